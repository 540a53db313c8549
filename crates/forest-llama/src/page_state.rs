//! The page state word: what one mapping-table entry holds (Bw-tree §II-B).
//!
//! The mapping table translates a PID into "either (1) a flash offset, the address of a page on
//! stable storage, or (2) a memory pointer, the address of the page in memory". One machine word
//! holds either, told apart by its two low bits:
//!
//! | low bits | meaning                                                                  |
//! |----------|--------------------------------------------------------------------------|
//! | `00`     | memory pointer to the page state (null: the PID holds no state)          |
//! | `01`     | storage offset (`offset << 2`), for the storage issue; memory mode never writes one |
//! | `10`     | free-list link of a recycled PID (`(next_pid + 1) << 2`, 0 ends the list) |
//!
//! Invariants:
//! - A page state type is aligned to at least 4 bytes, so a pointer's two low bits are zero
//!   (checked at compile time by [`crate::MappingTable::new`]).
//! - A word tagged `10` is only ever written by the free list, to a PID that no thread can
//!   reach any more (its epoch drained).

/// Mask of the tag bits.
const TAG_MASK: usize = 0b11;
/// Tag of a memory pointer (and of the empty word).
const TAG_MEMORY: usize = 0b00;
/// Tag of a storage offset.
const TAG_STORED: usize = 0b01;
/// Tag of a free-list link.
const TAG_FREE_LINK: usize = 0b10;
/// Bits the tag takes.
const TAG_BITS: u32 = 2;

/// The largest storage offset a word can hold.
pub const STORAGE_OFFSET_MAX: u64 = (usize::MAX >> TAG_BITS) as u64;

/// One decoded mapping-table word.
pub enum PageLocation<T> {
    /// No state: a freshly allocated or a freed PID.
    Empty,
    /// The page is in memory at this address.
    Memory(*const T),
    /// The page is on stable storage at this offset (written only by the storage layer).
    Stored(u64),
    /// The PID is on the free list; the payload is the next free PID plus one (0: none).
    FreeLink(usize),
}

// Manual impls: derives would demand the same traits of `T`, which only a pointer to it needs.
impl<T> Clone for PageLocation<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PageLocation<T> {}

impl<T> PartialEq for PageLocation<T> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Empty, Self::Empty) => true,
            (Self::Memory(a), Self::Memory(b)) => std::ptr::eq(*a, *b),
            (Self::Stored(a), Self::Stored(b)) => a == b,
            (Self::FreeLink(a), Self::FreeLink(b)) => a == b,
            _ => false,
        }
    }
}

impl<T> Eq for PageLocation<T> {}

impl<T> std::fmt::Debug for PageLocation<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "Empty"),
            Self::Memory(ptr) => write!(f, "Memory({ptr:p})"),
            Self::Stored(offset) => write!(f, "Stored({offset})"),
            Self::FreeLink(next) => write!(f, "FreeLink({next})"),
        }
    }
}

/// Encodes a memory pointer (null gives the empty word).
#[inline]
pub fn encode_memory<T>(ptr: *const T) -> usize {
    let word = ptr as usize;
    debug_assert_eq!(word & TAG_MASK, 0, "page states are 4-byte aligned");
    word
}

/// Encodes a storage offset, or `None` above [`STORAGE_OFFSET_MAX`].
#[inline]
pub fn encode_stored(offset: u64) -> Option<usize> {
    if offset > STORAGE_OFFSET_MAX {
        return None;
    }
    // The check above makes the cast lossless.
    Some(((offset as usize) << TAG_BITS) | TAG_STORED)
}

/// Encodes a free-list link to `next_plus_one` (0 ends the list).
#[inline]
pub(crate) fn encode_free_link(next_plus_one: usize) -> usize {
    debug_assert!(next_plus_one <= usize::MAX >> TAG_BITS);
    (next_plus_one << TAG_BITS) | TAG_FREE_LINK
}

/// Decodes a word.
#[inline]
pub fn decode<T>(word: usize) -> PageLocation<T> {
    match word & TAG_MASK {
        TAG_MEMORY if word == 0 => PageLocation::Empty,
        TAG_MEMORY => PageLocation::Memory(word as *const T),
        TAG_STORED => PageLocation::Stored((word >> TAG_BITS) as u64),
        TAG_FREE_LINK => PageLocation::FreeLink(word >> TAG_BITS),
        _ => panic!("mapping-table word {word:#x} has the unused tag 0b11"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every kind of word decodes to what was encoded. Method: round-trip each kind.
    #[test]
    fn words_round_trip() {
        let value = 7u64;
        let ptr: *const u64 = &value;
        assert_eq!(decode::<u64>(encode_memory(ptr)), PageLocation::Memory(ptr));
        assert_eq!(
            decode::<u64>(encode_memory::<u64>(std::ptr::null())),
            PageLocation::Empty
        );
        let stored = encode_stored(12345).expect("small offset fits");
        assert_eq!(decode::<u64>(stored), PageLocation::Stored(12345));
        let top = encode_stored(STORAGE_OFFSET_MAX).expect("the maximum fits");
        assert_eq!(decode::<u64>(top), PageLocation::Stored(STORAGE_OFFSET_MAX));
        assert_eq!(encode_stored(STORAGE_OFFSET_MAX + 1), None);
        assert_eq!(
            decode::<u64>(encode_free_link(0)),
            PageLocation::FreeLink(0)
        );
        assert_eq!(
            decode::<u64>(encode_free_link(42)),
            PageLocation::FreeLink(42)
        );
    }
}
