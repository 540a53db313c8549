//! The node status word (BzTree Fig. 2c, §4.1): the one word of a node that every record
//! operation and structure modification names in its PMwCAS, so a freeze serializes them.
//!
//! Leaf status, bit for bit (63 is the top bit):
//!
//! | bits | width | field |
//! |---|---|---|
//! | 61..=63 | 3 | PMwCAS control bits (forest-pmwcas `CONTROL_MASK`) |
//! | 60 | 1 | frozen: the node is immutable and about to be replaced |
//! | 44..=59 | 16 | record count: entries used in the record metadata array |
//! | 22..=43 | 22 | block size: bytes used by the record storage block |
//! | 0..=21 | 22 | delete size: bytes of logically deleted (or superseded) records |
//!
//! Internal status: control bits and frozen only, as in Fig. 2c, plus one field the paper
//! does not have (paper-silent, decided here): bits 0..=31 count the in-place child-pointer
//! swaps of §4.4. A split or merge builds P′ from P's child pointers and installs it by
//! freezing P with the status it read; without the count, a consolidation of another child
//! of P installed in between (2-word PMwCAS on that child pointer and P's status) would leave
//! the status unchanged, the freeze would succeed, and P′ would point to the replaced child,
//! losing every write made to its consolidated version.

use forest_pmwcas::CONTROL_MASK;

/// Bit 60: frozen.
pub const FROZEN_BIT: u64 = 1 << 60;
const RECORD_COUNT_SHIFT: u32 = 44;
const RECORD_COUNT_BITS: u32 = 16;
const BLOCK_SIZE_SHIFT: u32 = 22;
const BLOCK_SIZE_BITS: u32 = 22;
const DELETE_SIZE_SHIFT: u32 = 0;
const DELETE_SIZE_BITS: u32 = 22;
const SWAP_COUNT_BITS: u32 = 32;

const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

/// Most entries of a leaf's record metadata array (16-bit record count).
pub const RECORD_COUNT_MAX: u64 = mask(RECORD_COUNT_BITS);
/// Most bytes of a record storage block (22-bit block size): 4 MiB.
pub const BLOCK_SIZE_MAX: u64 = mask(BLOCK_SIZE_BITS);

const RECORD_COUNT_MASK: u64 = mask(RECORD_COUNT_BITS) << RECORD_COUNT_SHIFT;
const BLOCK_SIZE_MASK: u64 = mask(BLOCK_SIZE_BITS) << BLOCK_SIZE_SHIFT;
const DELETE_SIZE_MASK: u64 = mask(DELETE_SIZE_BITS) << DELETE_SIZE_SHIFT;
const SWAP_COUNT_MASK: u64 = mask(SWAP_COUNT_BITS);

// Fig. 2c: the fields tile the 61 value bits exactly and leave the control bits alone.
const _: () = assert!(FROZEN_BIT & CONTROL_MASK == 0);
const _: () = assert!(RECORD_COUNT_SHIFT + RECORD_COUNT_BITS == 60);
const _: () = assert!(BLOCK_SIZE_SHIFT + BLOCK_SIZE_BITS == RECORD_COUNT_SHIFT);
const _: () = assert!(DELETE_SIZE_SHIFT + DELETE_SIZE_BITS == BLOCK_SIZE_SHIFT);
const _: () = assert!(
    FROZEN_BIT | RECORD_COUNT_MASK | BLOCK_SIZE_MASK | DELETE_SIZE_MASK | CONTROL_MASK == u64::MAX
);
const _: () = assert!(FROZEN_BIT & (RECORD_COUNT_MASK | BLOCK_SIZE_MASK | DELETE_SIZE_MASK) == 0);
const _: () = assert!(SWAP_COUNT_MASK & (FROZEN_BIT | CONTROL_MASK) == 0);

/// A status word's value (control bits clear, as the helping read returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWord(pub u64);

impl StatusWord {
    /// A new leaf's status: `count` records in `block` bytes, nothing deleted.
    pub fn leaf(count: u64, block: u64) -> Self {
        debug_assert!(count <= RECORD_COUNT_MAX && block <= BLOCK_SIZE_MAX);
        Self(count << RECORD_COUNT_SHIFT | block << BLOCK_SIZE_SHIFT)
    }

    /// A new internal node's status.
    pub fn internal() -> Self {
        Self(0)
    }

    pub fn is_frozen(self) -> bool {
        self.0 & FROZEN_BIT != 0
    }

    pub fn frozen(self) -> Self {
        Self(self.0 | FROZEN_BIT)
    }

    pub fn record_count(self) -> u64 {
        (self.0 & RECORD_COUNT_MASK) >> RECORD_COUNT_SHIFT
    }

    pub fn block_size(self) -> u64 {
        (self.0 & BLOCK_SIZE_MASK) >> BLOCK_SIZE_SHIFT
    }

    pub fn delete_size(self) -> u64 {
        (self.0 & DELETE_SIZE_MASK) >> DELETE_SIZE_SHIFT
    }

    /// After reserving one metadata entry and `bytes` of storage (§4.2.1), or `None` if a
    /// field would overflow.
    pub fn reserved(self, bytes: u64) -> Option<Self> {
        let count = self.record_count() + 1;
        let block = self.block_size() + bytes;
        (count <= RECORD_COUNT_MAX && block <= BLOCK_SIZE_MAX).then_some(Self(
            self.0 & !(RECORD_COUNT_MASK | BLOCK_SIZE_MASK)
                | count << RECORD_COUNT_SHIFT
                | block << BLOCK_SIZE_SHIFT,
        ))
    }

    /// After `bytes` more were deleted (§4.2.2); saturates at the field's maximum (the delete
    /// size only triggers consolidation).
    pub fn deleted(self, bytes: u64) -> Self {
        let size = (self.delete_size() + bytes).min(mask(DELETE_SIZE_BITS));
        Self(self.0 & !DELETE_SIZE_MASK | size << DELETE_SIZE_SHIFT)
    }

    /// An internal node's status after one more in-place child swap (module doc).
    pub fn swapped(self) -> Self {
        let count = (self.0 & SWAP_COUNT_MASK).wrapping_add(1) & SWAP_COUNT_MASK;
        Self(self.0 & !SWAP_COUNT_MASK | count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_limits() {
        let s = StatusWord::leaf(RECORD_COUNT_MAX - 1, BLOCK_SIZE_MAX - 8);
        let r = s.reserved(8).expect("fits");
        assert_eq!(r.record_count(), RECORD_COUNT_MAX);
        assert_eq!(r.block_size(), BLOCK_SIZE_MAX);
        assert!(r.reserved(0).is_none(), "record count overflow is refused");
        let d = r.deleted(100).deleted(u64::from(u32::MAX));
        assert_eq!(d.delete_size(), mask(DELETE_SIZE_BITS));
        assert_eq!(d.record_count(), RECORD_COUNT_MAX);
        assert!(!d.is_frozen() && d.frozen().is_frozen());
        assert_eq!(d.frozen().0 & CONTROL_MASK, 0);
        let i = StatusWord::internal().swapped().swapped();
        assert_eq!(i.0, 2);
        assert_eq!(StatusWord(SWAP_COUNT_MASK).swapped().0, 0);
    }
}
