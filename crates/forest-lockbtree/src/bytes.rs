//! Key and value storage in node slots: short byte strings inline, longer ones boxed.
//!
//! The thesis stores integer keys and pointer-sized data inline (§2.1, Listing 2.1). For byte
//! strings, a slot holds up to `N` bytes in place ([`SlotBytes`]) and longer ones in a
//! `Box<[u8]>`, so short keys and values cost no heap allocation on insert, no extra cache
//! miss on a get or a scan's copy, and no pointer chase when a prefix tie makes the search
//! compare full keys (`search`).
//!
//! Keys and values get different slot widths:
//! - A key slot ([`Key`]) is 32 bytes and holds up to [`KEY_INLINE_MAX`] = 30 bytes inline
//!   (one byte is the tag, one the length). That covers 8-byte integers, YCSB's `user` +
//!   up to 20 digits (23–24 bytes in `forest bench`) and most text keys. At 24 bytes (22
//!   inline) YCSB's keys were all boxed: a scan copying a record then missed on the key's box
//!   as well as on the value's, and a search whose 8-byte prefixes tie (`user` + 4 digits, ten
//!   or so keys per leaf) chased a pointer per probe.
//! - A value slot ([`Value`]) stays 24 bytes, 22 inline (a `Vec` header's size): values are
//!   usually either small (counters, ids) or well past 30 bytes (YCSB's 100), where a wider
//!   slot would only cost memory.
//!
//! Memory per record, for a node allocated with room for `order` slots and filled to a
//! fraction `f` of it (about 0.7 after random inserts, so 1.4 slots per record):
//! - keys of 23–30 bytes: 32 / f ≈ 46 bytes, where they took 24 / f + 24 (the box; mimalloc
//!   has 24- and 32-byte size classes) ≈ 58: about 12 bytes less;
//! - keys up to 22 bytes, or over 30: 8 / f ≈ 11 bytes more than with 24-byte slots (the
//!   8 extra slot bytes, on the node's whole capacity). Inner nodes' separators pay the same
//!   per separator, about one per `0.7 * order` records.
//!
//! A per-leaf flat key arena (keys back to back, slots holding offsets) would cost less for
//! short keys and handle any length inline, but every insert, split, borrow and merge would
//! move or compact arena bytes under the write latch, and the arena would need its own
//! capacity policy; a wider fixed slot keeps all of those `Vec` moves of plain slots.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;

/// Key bytes held in place: a 32-byte slot minus the tag and the length byte.
pub(crate) const KEY_INLINE_MAX: usize = 30;

/// Value bytes held in place: a 24-byte slot minus the tag and the length byte.
pub(crate) const VALUE_INLINE_MAX: usize = 22;

/// A key or separator in a node slot.
pub(crate) type Key = SlotBytes<KEY_INLINE_MAX>;

/// A value in a leaf slot.
pub(crate) type Value = SlotBytes<VALUE_INLINE_MAX>;

/// A byte string in a node slot: up to `N` bytes in place, longer ones boxed.
#[derive(Clone)]
pub(crate) enum SlotBytes<const N: usize> {
    /// Up to `N` bytes: `data[..len]`.
    Inline { len: u8, data: [u8; N] },
    /// Longer byte strings.
    Heap(Box<[u8]>),
}

const _: () = assert!(size_of::<Key>() == 32);
const _: () = assert!(size_of::<Value>() == 24);
const _: () = assert!(KEY_INLINE_MAX <= u8::MAX as usize);
const _: () = assert!(VALUE_INLINE_MAX <= u8::MAX as usize);

impl<const N: usize> SlotBytes<N> {
    /// A copy of `bytes`.
    #[inline]
    pub(crate) fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= N {
            let mut data = [0u8; N];
            data[..bytes.len()].copy_from_slice(bytes);
            SlotBytes::Inline {
                len: bytes.len() as u8,
                data,
            }
        } else {
            SlotBytes::Heap(Box::from(bytes))
        }
    }

    /// The bytes.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            SlotBytes::Inline { len, data } => &data[..*len as usize],
            SlotBytes::Heap(b) => b,
        }
    }

    /// Replaces the contents, reusing the heap buffer when the length is unchanged.
    #[inline]
    pub(crate) fn set(&mut self, bytes: &[u8]) {
        match self {
            SlotBytes::Heap(b) if b.len() == bytes.len() => b.copy_from_slice(bytes),
            _ => *self = Self::new(bytes),
        }
    }

    /// Asks the CPU to load a boxed string's bytes (a scan copies them a few records later);
    /// inline ones sit in the slot already.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if let SlotBytes::Heap(b) = self {
            crate::node::prefetch(b);
        }
    }

    /// Heap bytes this slot owns beyond itself.
    #[inline]
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            SlotBytes::Inline { .. } => 0,
            SlotBytes::Heap(b) => b.len(),
        }
    }
}

impl<const N: usize> Deref for SlotBytes<N> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<const N: usize> PartialEq for SlotBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> Eq for SlotBytes<N> {}

impl<const N: usize> PartialOrd for SlotBytes<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for SlotBytes<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl<const N: usize> fmt::Debug for SlotBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.as_slice().escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<const N: usize>() {
        for len in 0..=N + 18 {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let mut b = SlotBytes::<N>::new(&bytes);
            assert_eq!(b.as_slice(), &bytes[..]);
            assert_eq!(b.heap_bytes(), if len > N { len } else { 0 }, "len {len}");
            assert_eq!(matches!(b, SlotBytes::Inline { .. }), len <= N, "len {len}");
            let other: Vec<u8> = bytes.iter().map(|x| x ^ 0xff).collect();
            b.set(&other);
            assert_eq!(&*b, &other[..]);
            b.set(b"x");
            assert_eq!(&*b, b"x");
        }
    }

    #[test]
    fn round_trips_at_the_inline_boundary() {
        // Goal: every length round-trips, is inline exactly up to the slot's limit, and set()
        // keeps contents right across the switch between inline and heap; method: lengths
        // 0..=limit + 18 through new and set, for key and value slots.
        round_trip::<KEY_INLINE_MAX>();
        round_trip::<VALUE_INLINE_MAX>();
    }
}
