//! Target words and their three control bits (BzTree §2.3, footnote 2; Harris, Fraser and
//! Pratt, "A practical multi-word compare-and-swap operation", DISC 2002, the paper's [11]).
//!
//! Every word a PMwCAS may change carries three control bits at its top, as in the reference
//! library (microsoft/pmwcas `src/mwcas/mwcas.h`, `kMwCASFlag`, `kCondCASFlag`, `kDirtyFlag`):
//!
//! | bit | name | meaning |
//! |---|---|---|
//! | 63 | [`DESCRIPTOR_BIT`] | the word holds a reference to a PMwCAS descriptor (Phase 1 done here) |
//! | 62 | [`RDCSS_BIT`] | the word holds a reference to one RDCSS installation (Phase 1 in progress here) |
//! | 61 | [`DIRTY_BIT`] | the word may not be durable yet: a reader flushes it and clears the bit (§2.3.1) |
//!
//! Values that users store leave these bits zero ([`VALUE_MASK`]); the descriptor's builder
//! rejects a value that uses them, and users const-assert their own layouts against
//! [`CONTROL_MASK`].
//!
//! References are not addresses (the mapping of a pool file moves between runs): they name a
//! descriptor by its index in the pool.
//! - Descriptor reference: `DESCRIPTOR_BIT | gen << 21 | index << 4`. `gen` is the
//!   descriptor's generation (40 bits, advanced at each reuse), so that a reference read before
//!   a reuse can never be taken for one made after it.
//! - RDCSS reference: `RDCSS_BIT | seq << 21 | index << 4 | slot`. `seq` is drawn from the
//!   descriptor's install counter once per run of Phase 1, and a run installs each slot at
//!   most once (`rdcss.rs`), so no two installations ever put the same bit pattern in a word.
//!   Harris et al. allocate a fresh RDCSS descriptor per attempt for this reason; the
//!   reference library reuses `&words_[i]`, which lets a stalled
//!   completer finish a *later* installation of the same entry with a stale status read (the
//!   §2.3.2 race). `slot` is the entry's index in the descriptor.
//!
//! Invariants:
//! - A [`Word`] is only loaded through the pool's helping read (`Pool::read`), which completes
//!   RDCSS installations, flushes and clears dirty bits, and helps descriptors before returning a
//!   plain value: the type has no other load.
//! - Generation and sequence numbers compare modulo 2^40 ([`tag_at_least`]).

use crate::sync::atomic::{AtomicU64, Ordering};

/// Bit 63: the word holds a descriptor reference.
pub const DESCRIPTOR_BIT: u64 = 1 << 63;
/// Bit 62: the word holds an RDCSS reference.
pub const RDCSS_BIT: u64 = 1 << 62;
/// Bit 61: the word's latest store may not be durable yet.
pub const DIRTY_BIT: u64 = 1 << 61;
/// The three control bits.
pub const CONTROL_MASK: u64 = DESCRIPTOR_BIT | RDCSS_BIT | DIRTY_BIT;
/// The bits a stored value may use.
pub const VALUE_MASK: u64 = !CONTROL_MASK;

/// Bits of an entry's index (slot) inside an RDCSS reference.
const SLOT_BITS: u32 = 4;
/// Bits of a descriptor's index in the pool.
const INDEX_BITS: u32 = 17;
/// Bits of a generation or install sequence number.
pub(crate) const TAG_BITS: u32 = 40;
const INDEX_SHIFT: u32 = SLOT_BITS;
const TAG_SHIFT: u32 = SLOT_BITS + INDEX_BITS;
/// Mask of a generation or sequence number.
pub(crate) const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Most descriptors a pool may hold (the index field's range).
pub const DESCRIPTORS_MAX: usize = 1 << INDEX_BITS;
/// Most entries a descriptor's RDCSS slot field can name.
pub(crate) const SLOTS_MAX: usize = 1 << SLOT_BITS;

const _: () = assert!(
    TAG_SHIFT + TAG_BITS == 61,
    "references fill the 61 value bits"
);
const _: () = assert!(CONTROL_MASK & VALUE_MASK == 0);
const _: () = assert!(CONTROL_MASK.count_ones() == 3);

/// A word that PMwCAS operations may change: 8 bytes, 8-aligned, loaded only through the
/// helping read (`Pool::read`).
#[derive(Debug)]
#[repr(transparent)]
pub struct Word(pub(crate) AtomicU64);

// Shuttle's modeled atomic carries its scheduler state beside the value.
const _: () = assert!(cfg!(shuttle) || size_of::<Word>() == 8);

impl Word {
    /// A word holding `value` (a word not yet in a pool region, e.g. in a test).
    pub fn new(value: u64) -> Self {
        debug_assert_eq!(
            value & CONTROL_MASK,
            0,
            "values leave the control bits zero"
        );
        Self(AtomicU64::new(value & VALUE_MASK))
    }

    /// Initializes a word that no other thread can reach yet (a node being built before it is
    /// linked, §6.2): a plain store, never a load. Once the word is published, only a PMwCAS
    /// changes it.
    pub fn init(&self, value: u64) {
        debug_assert_eq!(
            value & CONTROL_MASK,
            0,
            "values leave the control bits zero"
        );
        self.0.store(value & VALUE_MASK, Ordering::Relaxed);
    }

    /// The raw word, control bits included: only the protocol modules read it.
    #[inline]
    pub(crate) fn load_raw(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// CAS on the raw word (protocol modules only).
    #[inline]
    pub(crate) fn cas_raw(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.0
            .compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
    }

    /// Plain store of a raw value (recovery, single-threaded).
    pub(crate) fn store_raw(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

/// A descriptor reference (no dirty bit).
#[inline]
pub(crate) fn descriptor_ref(index: u32, gen: u64) -> u64 {
    DESCRIPTOR_BIT | ((gen & TAG_MASK) << TAG_SHIFT) | (u64::from(index) << INDEX_SHIFT)
}

/// An RDCSS reference.
#[inline]
pub(crate) fn rdcss_ref(index: u32, slot: usize, seq: u64) -> u64 {
    debug_assert!(slot < SLOTS_MAX);
    RDCSS_BIT | ((seq & TAG_MASK) << TAG_SHIFT) | (u64::from(index) << INDEX_SHIFT) | slot as u64
}

/// The parts of a reference: (descriptor index, slot, tag).
#[inline]
pub(crate) fn decode_ref(word: u64) -> (u32, usize, u64) {
    let index = ((word >> INDEX_SHIFT) & ((1 << INDEX_BITS) - 1)) as u32;
    let slot = (word & ((1 << SLOT_BITS) - 1)) as usize;
    let tag = (word >> TAG_SHIFT) & TAG_MASK;
    (index, slot, tag)
}

/// `a >= b` for tags modulo 2^40 (valid while they are less than 2^39 apart).
#[inline]
pub(crate) fn tag_at_least(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) & TAG_MASK) < (1 << (TAG_BITS - 1))
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_stay_in_value_bits() {
        // Goal: encode/decode are inverse and set only their own control bit. Method: extremes.
        let index = (DESCRIPTORS_MAX - 1) as u32;
        let d = descriptor_ref(index, TAG_MASK);
        assert_eq!(d & CONTROL_MASK, DESCRIPTOR_BIT);
        assert_eq!(decode_ref(d), (index, 0, TAG_MASK));
        let r = rdcss_ref(index, SLOTS_MAX - 1, 12345);
        assert_eq!(r & CONTROL_MASK, RDCSS_BIT);
        assert_eq!(decode_ref(r), (index, SLOTS_MAX - 1, 12345));
        assert_ne!(
            rdcss_ref(3, 1, 7),
            rdcss_ref(3, 1, 8),
            "installations differ"
        );
    }

    #[test]
    fn tags_compare_modulo() {
        assert!(tag_at_least(5, 5));
        assert!(tag_at_least(6, 5));
        assert!(!tag_at_least(4, 5));
        assert!(tag_at_least(1, TAG_MASK), "1 follows 2^40 - 1");
    }
}
