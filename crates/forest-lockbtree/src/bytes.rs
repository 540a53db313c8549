//! Key and value storage in node slots: short byte strings inline, longer ones boxed.
//!
//! The thesis stores integer keys and pointer-sized data inline (§2.1, Listing 2.1). For byte
//! strings, a slot holds up to [`INLINE_BYTES_MAX`] bytes in place, the same 24 bytes a
//! `Vec` header takes, so short keys and values (8-byte keys, small values) cost no heap
//! allocation on insert and no extra cache miss on a get; longer ones live in a `Box<[u8]>`.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;

/// Bytes held in place: a slot is 24 bytes, one is the tag and one the length.
pub(crate) const INLINE_BYTES_MAX: usize = 22;

/// A byte string in a node slot.
#[derive(Clone)]
pub(crate) enum Bytes {
    /// Up to [`INLINE_BYTES_MAX`] bytes: `data[..len]`.
    Inline {
        len: u8,
        data: [u8; INLINE_BYTES_MAX],
    },
    /// Longer byte strings.
    Heap(Box<[u8]>),
}

const _: () = assert!(size_of::<Bytes>() == 24);
const _: () = assert!(INLINE_BYTES_MAX <= u8::MAX as usize);

impl Bytes {
    /// A copy of `bytes`.
    #[inline]
    pub(crate) fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_BYTES_MAX {
            let mut data = [0u8; INLINE_BYTES_MAX];
            data[..bytes.len()].copy_from_slice(bytes);
            Bytes::Inline {
                len: bytes.len() as u8,
                data,
            }
        } else {
            Bytes::Heap(Box::from(bytes))
        }
    }

    /// The bytes.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, data } => &data[..*len as usize],
            Bytes::Heap(b) => b,
        }
    }

    /// Replaces the contents, reusing the heap buffer when the length is unchanged.
    #[inline]
    pub(crate) fn set(&mut self, bytes: &[u8]) {
        match self {
            Bytes::Heap(b) if b.len() == bytes.len() => b.copy_from_slice(bytes),
            _ => *self = Bytes::new(bytes),
        }
    }

    /// Asks the CPU to load a boxed string's bytes (a scan copies them a few records later);
    /// inline ones sit in the slot already.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if let Bytes::Heap(b) = self {
            crate::node::prefetch(b);
        }
    }

    /// Heap bytes this slot owns beyond itself.
    #[inline]
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Bytes::Inline { .. } => 0,
            Bytes::Heap(b) => b.len(),
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.as_slice().escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_the_inline_boundary() {
        // Goal: every length round-trips and set() keeps contents right across the switch
        // between inline and heap; method: lengths 0..=40 through new and set.
        for len in 0..=40usize {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let mut b = Bytes::new(&bytes);
            assert_eq!(b.as_slice(), &bytes[..]);
            assert_eq!(b.heap_bytes(), if len > INLINE_BYTES_MAX { len } else { 0 });
            let other: Vec<u8> = bytes.iter().map(|x| x ^ 0xff).collect();
            b.set(&other);
            assert_eq!(&*b, &other[..]);
            b.set(b"x");
            assert_eq!(&*b, b"x");
        }
    }
}
