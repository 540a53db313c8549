//! Where things are in a pool's region, and the bits of a descriptor (BzTree Fig. 1, §6.3
//! "The PMwCAS library maintains a pool of descriptors at a well-defined location").
//!
//! Region, in 8-byte little-endian words (docs/FORMAT.md has it byte by byte):
//!
//! | words | what |
//! |---|---|
//! | 0..8 | pool header: magic, version, region bytes, descriptor count, partitions, client words, descriptor words, crc32c of words 0..7 |
//! | 8..8+client | client header words (the user's root, epochs...: target words) |
//! | marks..marks+partitions | high-water marks, one per partition (`pool.rs`): descriptors of the partition ever handed out |
//! | pool..pool+count*DESCRIPTOR_WORDS | descriptors, each cache-line aligned |
//! | user.. | user area (node heap: target words and bytes), page aligned |
//!
//! Descriptor (`DESCRIPTOR_WORDS` words):
//!
//! | word | field |
//! |---|---|
//! | 0 | status: state (bits 0-2), status dirty bit (3), entry count (4-8), generation (16-55) |
//! | 1 | order: target entries' slots in address order, 4 bits each, target count in bits 60-63 |
//! | 2 | seq start: the install counter's value when this generation began |
//! | 3 | install counter: the next RDCSS installation's sequence number |
//! | 4 | recycler: index of the free callback (§2.3 `AllocateDescriptor(callback)`) |
//! | 5 | free-list link while on its partition's stack: the next one's index + 1 (volatile: stale after a restart, never read by recovery) |
//! | 6-7 | zero |
//! | 8+4i.. | entry i: address (byte offset, or `MEMORY_ONLY`/`TOMBSTONE`), expected, new, policy |
//!
//! Policy word: policy (bits 0-7: 0 `NONE`, 1 `FREE-ONE`), activated (bit 8), generation of
//! the activation (16-55).

use crate::region::WORD_BYTES;
use crate::word::{SLOTS_MAX, TAG_MASK};

/// "FORESTPM", little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FORESTPM");
/// Version of the pool format in this file. 2: the high-water marks (version 1 had none, and
/// its recovery scanned the whole pool).
pub const FORMAT_VERSION: u64 = 2;
/// Words of the pool header.
pub(crate) const HEADER_WORDS: usize = 8;
/// Words per cache line: descriptors start on a line.
pub(crate) const LINE_WORDS: usize = 8;
/// The user area starts on a page (a line under loom, to keep models small).
pub(crate) const PAGE_WORDS: usize = crate::region::REGION_ALIGN_BYTES / WORD_BYTES;

/// Entries per descriptor. The BzTree's largest PMwCAS (a split reaching the great-grandparent,
/// §7.2) changes up to 5 words and names the nodes it allocates and retires (N', O, P', N, P,
/// ...), issue 16 "Persistent mode"; 14 fills a 512-byte descriptor. Loom models use 4 so that
/// a pool stays small enough to explore.
pub const ENTRIES_MAX: usize = if cfg!(loom) { 4 } else { 14 };
/// Descriptor header words.
pub(crate) const DESCRIPTOR_HEADER_WORDS: usize = 8;
/// Words per entry.
pub(crate) const ENTRY_WORDS: usize = 4;
/// Words per descriptor.
pub(crate) const DESCRIPTOR_WORDS: usize = DESCRIPTOR_HEADER_WORDS + ENTRIES_MAX * ENTRY_WORDS;

const _: () = assert!(
    DESCRIPTOR_WORDS.is_multiple_of(LINE_WORDS),
    "descriptors fill whole lines"
);
const _: () = assert!(
    ENTRIES_MAX <= SLOTS_MAX,
    "an RDCSS reference names any slot"
);
const _: () = assert!(
    ENTRIES_MAX < 1 << COUNT_BITS,
    "the status word counts every entry"
);
const _: () = assert!(ENTRIES_MAX * 4 <= 60, "the order word holds every slot");

// Descriptor header word indices.
pub(crate) const D_STATUS: usize = 0;
pub(crate) const D_ORDER: usize = 1;
pub(crate) const D_SEQ_START: usize = 2;
pub(crate) const D_INSTALL_SEQ: usize = 3;
pub(crate) const D_RECYCLER: usize = 4;
pub(crate) const D_FREE_NEXT: usize = 5;
// Entry word indices.
pub(crate) const E_ADDRESS: usize = 0;
pub(crate) const E_EXPECTED: usize = 1;
pub(crate) const E_NEW: usize = 2;
pub(crate) const E_POLICY: usize = 3;

/// An entry that names no word: memory handed to the descriptor for its policy (§6.3).
pub(crate) const MEMORY_ONLY: u64 = u64::MAX;
/// A removed entry (`RemoveWord` after an activation, so entries never move).
pub(crate) const TOMBSTONE: u64 = u64::MAX - 1;

/// Descriptor states (status bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// In a free list (or retired, its policies applied).
    Free = 0,
    /// Allocated, its owner adding entries; no word refers to it.
    Building = 1,
    /// Published: Phase 1 under way.
    Undecided = 2,
    /// Phase 1 installed every word: roll forward.
    Succeeded = 3,
    /// Phase 1 met a mismatch: roll back.
    Failed = 4,
}

const STATE_MASK: u64 = 0b111;
/// The status is decided but may not be durable yet (§2.3.2).
pub(crate) const STATUS_DIRTY: u64 = 1 << 3;
const COUNT_SHIFT: u32 = 4;
const COUNT_BITS: u32 = 5;
const GEN_SHIFT: u32 = 16;

/// A status word.
#[inline]
pub(crate) fn status(gen: u64, count: usize, state: State) -> u64 {
    ((gen & TAG_MASK) << GEN_SHIFT) | ((count as u64) << COUNT_SHIFT) | state as u64
}

/// The state of a status word, `None` if the bits name no state (a corrupt pool).
#[inline]
pub(crate) fn status_state(status: u64) -> Option<State> {
    Some(match status & STATE_MASK {
        0 => State::Free,
        1 => State::Building,
        2 => State::Undecided,
        3 => State::Succeeded,
        4 => State::Failed,
        _ => return None,
    })
}

/// The generation of a status word.
#[inline]
pub(crate) fn status_gen(status: u64) -> u64 {
    (status >> GEN_SHIFT) & TAG_MASK
}

/// The entry count of a status word.
#[inline]
pub(crate) fn status_count(status: u64) -> usize {
    ((status >> COUNT_SHIFT) & ((1 << COUNT_BITS) - 1)) as usize
}

/// Policy codes (policy word bits 0-7).
pub(crate) const POLICY_NONE: u64 = 0;
pub(crate) const POLICY_FREE_ONE: u64 = 1;
const POLICY_MASK: u64 = 0xff;
/// The entry's new value is memory handed to the descriptor and durable (§6.1 activation).
pub(crate) const ACTIVATED: u64 = 1 << 8;

/// A policy word.
#[inline]
pub(crate) fn policy_word(policy: u64, activated: bool, gen: u64) -> u64 {
    policy | if activated { ACTIVATED } else { 0 } | ((gen & TAG_MASK) << GEN_SHIFT)
}

/// The policy code of a policy word.
#[inline]
pub(crate) fn policy_code(word: u64) -> u64 {
    word & POLICY_MASK
}

/// The generation of a policy word.
#[inline]
pub(crate) fn policy_gen(word: u64) -> u64 {
    (word >> GEN_SHIFT) & TAG_MASK
}

/// The order word: `slots` (target entries in address order).
#[inline]
pub(crate) fn order_word(slots: impl ExactSizeIterator<Item = usize>) -> u64 {
    let mut word = (slots.len() as u64) << 60;
    for (k, slot) in slots.enumerate() {
        word |= (slot as u64) << (4 * k);
    }
    word
}

/// The number of target entries in an order word.
#[inline]
pub(crate) fn order_len(word: u64) -> usize {
    (word >> 60) as usize
}

/// The `k`-th slot in address order.
#[inline]
pub(crate) fn order_slot(word: u64, k: usize) -> usize {
    ((word >> (4 * k)) & 0xf) as usize
}

/// A pool's shape: how many descriptors, partitions and words of each area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Descriptors in the pool.
    pub descriptor_count: usize,
    /// Per-thread partitions of the free descriptors.
    pub partition_count: usize,
    /// Words of the client header (target words at a known place: root, epochs...).
    pub client_words: usize,
    /// Words of the user area.
    pub user_words: usize,
}

impl Geometry {
    /// First word of the client header.
    pub(crate) const fn client_word(&self) -> usize {
        HEADER_WORDS
    }

    /// Word of partition 0's high-water mark; partition `p`'s is `p` words on.
    pub(crate) const fn marks_word(&self) -> usize {
        HEADER_WORDS + self.client_words
    }

    /// First word of the descriptors.
    pub(crate) const fn pool_word(&self) -> usize {
        (self.marks_word() + self.partition_count).div_ceil(LINE_WORDS) * LINE_WORDS
    }

    /// Descriptors in each partition (partition `p` holds `p * per .. (p + 1) * per`).
    pub(crate) const fn per_partition(&self) -> usize {
        self.descriptor_count / self.partition_count
    }

    /// First word of descriptor `index`.
    pub(crate) const fn descriptor_word(&self, index: usize) -> usize {
        self.pool_word() + index * DESCRIPTOR_WORDS
    }

    /// First word of the user area.
    pub(crate) const fn user_word(&self) -> usize {
        (self.pool_word() + self.descriptor_count * DESCRIPTOR_WORDS).div_ceil(PAGE_WORDS)
            * PAGE_WORDS
    }

    /// Byte offset of the client header (for users that lay out their own words in it
    /// before a pool exists, e.g. to recover an allocator before `Pool::open`).
    pub const fn client_start_bytes(&self) -> u64 {
        (self.client_word() * WORD_BYTES) as u64
    }

    /// Byte offset of partition 0's high-water mark (one u64 per partition follows): for tests
    /// and tools that inspect a crash image.
    pub const fn marks_start_bytes(&self) -> u64 {
        (self.marks_word() * WORD_BYTES) as u64
    }

    /// Byte offset of descriptor `index` (its status word), as [`Geometry::marks_start_bytes`].
    pub const fn descriptor_start_bytes(&self, index: usize) -> u64 {
        (self.descriptor_word(index) * WORD_BYTES) as u64
    }

    /// Byte offset of the user area (as [`Geometry::client_start_bytes`]).
    pub const fn user_start_bytes(&self) -> u64 {
        (self.user_word() * WORD_BYTES) as u64
    }

    /// Words the region needs.
    pub(crate) const fn total_words(&self) -> usize {
        (self.user_word() + self.user_words).div_ceil(PAGE_WORDS) * PAGE_WORDS
    }

    /// Whether word `w` may be a PMwCAS target (client header or user area).
    #[inline]
    pub(crate) const fn is_target_word(&self, w: usize, region_words: usize) -> bool {
        (w >= self.client_word() && w < self.client_word() + self.client_words)
            || (w >= self.user_word() && w < region_words)
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn status_and_policy_words_round_trip() {
        let s = status(TAG_MASK, ENTRIES_MAX, State::Failed) | STATUS_DIRTY;
        assert_eq!(status_gen(s), TAG_MASK);
        assert_eq!(status_count(s), ENTRIES_MAX);
        assert_eq!(status_state(s & !STATUS_DIRTY), Some(State::Failed));
        assert_eq!(status_state(7), None);
        let p = policy_word(POLICY_FREE_ONE, true, 77);
        assert_eq!(
            (policy_code(p), p & ACTIVATED != 0, policy_gen(p)),
            (POLICY_FREE_ONE, true, 77)
        );
        let o = order_word([3, 0, 13].into_iter());
        assert_eq!(order_len(o), 3);
        assert_eq!(
            (order_slot(o, 0), order_slot(o, 1), order_slot(o, 2)),
            (3, 0, 13)
        );
    }

    #[test]
    fn areas_do_not_overlap() {
        let g = Geometry {
            descriptor_count: 10,
            partition_count: 2,
            client_words: 3,
            user_words: 5,
        };
        assert_eq!(g.marks_word(), HEADER_WORDS + 3);
        assert!(g.pool_word() >= g.marks_word() + 2);
        assert_eq!(g.pool_word() % LINE_WORDS, 0);
        assert_eq!(g.per_partition(), 5);
        assert!(g.user_word() >= g.descriptor_word(10));
        assert_eq!(g.user_word() % PAGE_WORDS, 0);
        assert!(g.total_words() >= g.user_word() + 5);
        assert!(g.is_target_word(HEADER_WORDS, g.total_words()));
        assert!(!g.is_target_word(g.pool_word(), g.total_words()));
        assert!(!g.is_target_word(g.marks_word(), g.total_words()));
        assert!(!g.is_target_word(g.marks_word() + 1, g.total_words()));
        assert!(!g.is_target_word(0, g.total_words()));
    }
}
