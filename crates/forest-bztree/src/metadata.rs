//! Record metadata entries (BzTree Fig. 2b, §4.1, §4.2.1): one 64-bit PMwCAS target word per
//! record, in the array that grows from the header into the free space.
//!
//! | bits | width | field |
//! |---|---|---|
//! | 61..=63 | 3 | PMwCAS control bits |
//! | 60 | 1 | visible |
//! | 32..=59 | 28 | offset of the record in the node; while a reservation is in progress, its high bit set and the rest the allocation epoch (§4.2.1) |
//! | 16..=31 | 16 | key length |
//! | 0..=15 | 16 | total length (key + payload) |
//!
//! Choices the paper leaves open:
//! - Keys are at most `KEY_BYTES_MAX` = 16 KiB < 2^15, so the key length field's top bit is
//!   free; it marks a leaf record whose payload is an 8-byte record pointer to a value block
//!   (values over the inline limit, §4.2.3 "record pointers"), laid out `[pointer][key]` so
//!   the pointer word is 8-aligned. Internal records always have that layout (child pointer).
//! - A reservation already carries the key and total lengths, so the uniqueness re-scan
//!   (§4.2.1) waits only on in-progress entries whose key has the length of its own: an entry
//!   of another length cannot be a duplicate.
//! - A delete clears the visible bit and keeps the offset (§4.2.2 zeroes it), so the sorted
//!   region stays binary-searchable by the dead record's key; an entry is dead when neither
//!   visible nor reserved. An insert that finds a duplicate zeroes its entry as in §4.2.1.

use forest_core::KEY_BYTES_MAX;
use forest_pmwcas::CONTROL_MASK;

/// Bit 60: visible.
pub const VISIBLE_BIT: u64 = 1 << 60;
const OFFSET_SHIFT: u32 = 32;
const OFFSET_BITS: u32 = 28;
const KEY_LEN_SHIFT: u32 = 16;
const KEY_LEN_BITS: u32 = 16;
const TOTAL_LEN_BITS: u32 = 16;
/// The offset field's high bit: the field holds an allocation epoch.
const ALLOCATION_BIT: u64 = 1 << (OFFSET_SHIFT + OFFSET_BITS - 1);
/// The key length field's top bit: a leaf record holding a record pointer.
const RECORD_POINTER_BIT: u64 = 1 << (KEY_LEN_SHIFT + KEY_LEN_BITS - 1);
const OFFSET_MASK: u64 = ((1 << OFFSET_BITS) - 1) << OFFSET_SHIFT;
const KEY_LEN_MASK: u64 = ((1 << (KEY_LEN_BITS - 1)) - 1) << KEY_LEN_SHIFT;
const TOTAL_LEN_MASK: u64 = (1 << TOTAL_LEN_BITS) - 1;
/// Most allocation epochs the offset field holds (27 bits).
pub const EPOCH_MASK: u64 = (1 << (OFFSET_BITS - 1)) - 1;
/// Largest record offset in a node (27 bits: the high bit marks an allocation).
pub const OFFSET_MAX: u64 = EPOCH_MASK;
/// Largest total length of one record.
pub const TOTAL_LEN_MAX: usize = (1 << TOTAL_LEN_BITS) - 1;

const _: () = assert!(VISIBLE_BIT & CONTROL_MASK == 0);
const _: () = assert!(OFFSET_SHIFT + OFFSET_BITS == 60);
const _: () = assert!(KEY_LEN_SHIFT + KEY_LEN_BITS == OFFSET_SHIFT);
const _: () = assert!(TOTAL_LEN_BITS == KEY_LEN_SHIFT);
const _: () = assert!(
    VISIBLE_BIT | OFFSET_MASK | KEY_LEN_MASK | RECORD_POINTER_BIT | TOTAL_LEN_MASK | CONTROL_MASK
        == u64::MAX
);
const _: () = assert!(
    KEY_BYTES_MAX < 1 << (KEY_LEN_BITS - 1),
    "the flag bit is free"
);

/// A metadata entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata(pub u64);

impl Metadata {
    /// A visible record at `offset`.
    pub fn visible(offset: u64, key_len: usize, total_len: usize, pointer: bool) -> Self {
        debug_assert!(offset <= OFFSET_MAX && total_len <= TOTAL_LEN_MAX);
        Self(VISIBLE_BIT | offset << OFFSET_SHIFT | Self::lengths(key_len, total_len, pointer))
    }

    /// A reservation of the current allocation epoch (§4.2.1), invisible.
    pub fn reserved(epoch: u64, key_len: usize, total_len: usize, pointer: bool) -> Self {
        Self(
            ALLOCATION_BIT
                | (epoch & EPOCH_MASK) << OFFSET_SHIFT
                | Self::lengths(key_len, total_len, pointer),
        )
    }

    fn lengths(key_len: usize, total_len: usize, pointer: bool) -> u64 {
        debug_assert!(key_len <= KEY_BYTES_MAX && total_len <= TOTAL_LEN_MAX);
        (key_len as u64) << KEY_LEN_SHIFT
            | total_len as u64
            | if pointer { RECORD_POINTER_BIT } else { 0 }
    }

    pub fn is_visible(self) -> bool {
        self.0 & VISIBLE_BIT != 0
    }

    /// Reserved and not yet completed (or abandoned by a freeze).
    pub fn is_reserved(self) -> bool {
        self.0 & VISIBLE_BIT == 0 && self.0 & ALLOCATION_BIT != 0
    }

    /// The allocation epoch of a reservation.
    pub fn allocation_epoch(self) -> u64 {
        (self.0 >> OFFSET_SHIFT) & EPOCH_MASK
    }

    /// The record's offset in its node (meaningful unless reserved).
    pub fn offset(self) -> u64 {
        (self.0 & OFFSET_MASK) >> OFFSET_SHIFT
    }

    pub fn key_len(self) -> usize {
        ((self.0 & KEY_LEN_MASK) >> KEY_LEN_SHIFT) as usize
    }

    pub fn total_len(self) -> usize {
        (self.0 & TOTAL_LEN_MASK) as usize
    }

    pub fn is_record_pointer(self) -> bool {
        self.0 & RECORD_POINTER_BIT != 0
    }

    /// The same entry, invisible (a delete or a superseded version, §4.2.2).
    pub fn deleted(self) -> Self {
        Self(self.0 & !VISIBLE_BIT)
    }

    /// Bytes the record takes in the storage block (8-aligned, so pointer words are).
    pub fn block_bytes(self) -> u64 {
        record_block_bytes(self.total_len())
    }
}

/// Bytes a record of `total_len` takes in a storage block.
pub fn record_block_bytes(total_len: usize) -> u64 {
    (total_len as u64).div_ceil(8) * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let m = Metadata::visible(OFFSET_MAX, KEY_BYTES_MAX, TOTAL_LEN_MAX, true);
        assert!(m.is_visible() && !m.is_reserved());
        assert_eq!(m.offset(), OFFSET_MAX);
        assert_eq!(m.key_len(), KEY_BYTES_MAX);
        assert_eq!(m.total_len(), TOTAL_LEN_MAX);
        assert!(m.is_record_pointer());
        assert_eq!(m.0 & CONTROL_MASK, 0);
        let r = Metadata::reserved(5, 3, 11, false);
        assert!(r.is_reserved() && !r.is_visible());
        assert_eq!(
            (r.allocation_epoch(), r.key_len(), r.total_len()),
            (5, 3, 11)
        );
        assert!(!r.is_record_pointer());
        let d = m.deleted();
        assert!(!d.is_visible() && !d.is_reserved());
        assert_eq!(d.offset(), OFFSET_MAX);
        assert_eq!(record_block_bytes(9), 16);
    }
}
