//! Node layout (BzTree §4.1, Fig. 2a): a fixed header, the record metadata array growing
//! down into the free space, and the record storage block growing up from the node's end.
//!
//! ```text
//! +0   node size: u32 | sorted count: u32 (its top byte: the node's level, 0 = leaf)
//! +8   status word (status_word.rs)                        <- PMwCAS target
//! +16  metadata[0], metadata[1], ...  (metadata.rs)         <- PMwCAS targets (leaves)
//!      ... free space ...
//!      records, the first one ending at the node's end
//! ```
//!
//! Choices the paper leaves open:
//! - Fig. 2a lists node size (32), status (64), sorted count (32); the two 32-bit fields share
//!   the first word so that the status word is 8-aligned, as every PMwCAS target must be.
//! - Record counts fit 16 bits, so the sorted count's top byte holds the node's level; a
//!   descent needs to know where the leaves are.
//! - Records start 8-aligned. A leaf record is `[key][value]`, or `[pointer][key]` when its
//!   value lives in a value block (`[length: u64][bytes]`); an internal record is
//!   `[child pointer][key]`. Pointers are offsets in the region (heap.rs).
//! - An internal node's first record has an empty key that stands for its lower bound: child
//!   `i` holds the keys above key `i` (exclusive) up to key `i + 1` (inclusive), as §5.2's
//!   separator `k` keeps keys `<= k` in N′ and gives the sibling O the keys `> k`.
//!
//! Beyond the paper (§4.1 lays out internal nodes like leaves): an internal node of `n`
//! records keeps, right after its metadata array, an array of `n` key prefixes, each the
//! first 8 bytes of record `i`'s key zero-padded and read big-endian as a `u64`:
//!
//! ```text
//! +16        metadata[0..n]
//! +16 + 8n   prefix[0..n]      (written once at build, never a target: §4.4's nodes are immutable)
//!            records [child pointer][key]
//! ```
//!
//! The descent's binary search compares integers in one contiguous array and touches a
//! record's key only when the prefixes tie, instead of two dependent loads per probe
//! (metadata word, then key bytes at its offset) on lines spread over the whole node. Zero
//! padding keeps the order: `prefix(a) < prefix(b)` implies `a < b`. The array is not counted
//! in the split and merge thresholds ([`internal_bytes`]), so fan-out is the paper's.

use std::sync::atomic::Ordering;

use forest_pmwcas::{Guard, Persist};

use crate::metadata::{record_block_bytes, Metadata, OFFSET_MAX, TOTAL_LEN_MAX};
use crate::status_word::{StatusWord, BLOCK_SIZE_MAX, RECORD_COUNT_MAX};
use crate::BzTree;

/// Bytes of the header.
pub const HEADER_BYTES: u64 = 16;
/// Bytes of one metadata entry.
pub const METADATA_BYTES: u64 = 8;
const LEVEL_SHIFT: u32 = 56;
const SORTED_MASK: u64 = (1 << 24) - 1;

/// A leaf record's value as a new node receives it.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Inline value bytes.
    Inline(&'a [u8]),
    /// A value block's offset.
    Pointer(u64),
}

/// One live record of a node being rebuilt, borrowing its key from the old node.
#[derive(Clone, Copy, Debug)]
pub struct LiveRecord<'a> {
    pub key: &'a [u8],
    pub payload: Payload<'a>,
}

impl LiveRecord<'_> {
    /// Total length (metadata field) of the record.
    pub fn total_len(&self) -> usize {
        match self.payload {
            Payload::Inline(v) => self.key.len() + v.len(),
            Payload::Pointer(_) => 8 + self.key.len(),
        }
    }

    /// Bytes it takes in a node: metadata entry and storage.
    pub fn node_bytes(&self) -> u64 {
        METADATA_BYTES + record_block_bytes(self.total_len())
    }
}

/// An internal record: separator key and child.
pub type Separator<'a> = (&'a [u8], u64);

/// Bytes an internal node of `entries` takes by the paper's layout (the split and merge
/// thresholds); the node itself also holds their prefix array ([`internal_node_bytes`]).
pub fn internal_bytes(entries: &[Separator<'_>]) -> u64 {
    HEADER_BYTES
        + entries
            .iter()
            .map(|(k, _)| METADATA_BYTES + record_block_bytes(8 + k.len()))
            .sum::<u64>()
}

/// Bytes of an internal node holding `entries`: [`internal_bytes`] and the prefix array.
pub fn internal_node_bytes(entries: &[Separator<'_>]) -> u64 {
    internal_bytes(entries) + 8 * entries.len() as u64
}

/// A key's first 8 bytes, zero-padded, as a big-endian integer: ordered as the keys are
/// where the prefixes differ.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(head) => u64::from_be_bytes(*head),
        None => {
            let mut head = [0u8; 8];
            head[..key.len()].copy_from_slice(key);
            u64::from_be_bytes(head)
        }
    }
}

impl<P: Persist> BzTree<P> {
    #[inline]
    pub(crate) fn node_size(&self, node: u64) -> u64 {
        self.heap.atomic(node).load(Ordering::Relaxed) & 0xFFFF_FFFF
    }

    #[inline]
    pub(crate) fn sorted_count(&self, node: u64) -> u64 {
        (self.heap.atomic(node).load(Ordering::Relaxed) >> 32) & SORTED_MASK
    }

    #[inline]
    pub(crate) fn level(&self, node: u64) -> u64 {
        self.heap.atomic(node).load(Ordering::Relaxed) >> LEVEL_SHIFT
    }

    #[inline]
    pub(crate) fn status_off(node: u64) -> u64 {
        node + 8
    }

    #[inline]
    pub(crate) fn status(&self, node: u64, guard: &Guard) -> StatusWord {
        StatusWord(
            self.pool
                .read(self.heap.word(Self::status_off(node)), guard),
        )
    }

    #[inline]
    pub(crate) fn meta_off(node: u64, i: u64) -> u64 {
        node + HEADER_BYTES + METADATA_BYTES * i
    }

    /// A leaf's metadata entry (a PMwCAS target: the helping read).
    #[inline]
    pub(crate) fn leaf_meta(&self, node: u64, i: u64, guard: &Guard) -> Metadata {
        Metadata(
            self.pool
                .read(self.heap.word(Self::meta_off(node, i)), guard),
        )
    }

    /// An internal node's metadata entry (immutable after the node is built, never a target).
    #[inline]
    pub(crate) fn internal_meta(&self, node: u64, i: u64) -> Metadata {
        Metadata(
            self.heap
                .atomic(Self::meta_off(node, i))
                .load(Ordering::Relaxed),
        )
    }

    /// A record's key.
    #[inline]
    pub(crate) fn key_of(&self, node: u64, m: Metadata) -> &[u8] {
        let skip = if m.is_record_pointer() { 8 } else { 0 };
        self.heap.bytes(node + m.offset() + skip, m.key_len())
    }

    /// The offset of a pointer record's pointer word (child or value block pointer).
    #[inline]
    pub(crate) fn pointer_off(node: u64, m: Metadata) -> u64 {
        node + m.offset()
    }

    /// A leaf record's value bytes (inline or in its value block).
    pub(crate) fn value_of(&self, node: u64, m: Metadata, guard: &Guard) -> &[u8] {
        if m.is_record_pointer() {
            let block = self
                .pool
                .read(self.heap.word(Self::pointer_off(node, m)), guard);
            self.value_block(block)
        } else {
            let k = m.key_len();
            self.heap
                .bytes(node + m.offset() + k as u64, m.total_len() - k)
        }
    }

    /// The bytes of a value block.
    pub(crate) fn value_block(&self, block: u64) -> &[u8] {
        let len = self.heap.atomic(block).load(Ordering::Relaxed) as usize;
        self.heap.bytes(block + 8, len)
    }

    /// A chunk of the heap (`NodeHeap::alloc`), once the descriptors a crash left are
    /// finished: their policies may repeat frees of chunks this run could otherwise take
    /// (forest-pmwcas `Pool::ensure_recovery_finished`).
    fn alloc_chunk(&self, bytes: u64, zeroed: bool) -> Option<u64> {
        self.pool.ensure_recovery_finished();
        self.heap.alloc(bytes, zeroed, &|r| self.flush(r))
    }

    /// A new value block holding `value`, or `None` when the heap is full.
    pub(crate) fn new_value_block(&self, value: &[u8]) -> Option<u64> {
        let block = self.alloc_chunk(8 + value.len() as u64, false)?;
        self.heap
            .atomic(block)
            .store(value.len() as u64, Ordering::Relaxed);
        self.heap.write(block + 8, value);
        self.persist_bytes(block, 8 + value.len() as u64);
        Some(block)
    }

    /// §6.2 flush-before-visible (nothing in volatile mode).
    #[inline]
    pub(crate) fn persist_bytes(&self, off: u64, len: u64) {
        if P::DURABLE {
            self.pool.persist_range(off as usize..(off + len) as usize);
        }
    }

    fn write_header(&self, node: u64, size: u64, sorted: u64, level: u64) {
        self.heap.atomic(node).store(
            size | (sorted | level << (LEVEL_SHIFT - 32)) << 32,
            Ordering::Relaxed,
        );
    }

    /// A new consolidated leaf holding `records` (sorted by key) with room for `extra` more
    /// bytes and `free_space` (§4.3), at most the configured node size unless the records need
    /// more. `None` when the heap is full or the records exceed what a node can address.
    pub(crate) fn build_leaf(&self, records: &[LiveRecord<'_>], extra: u64) -> Option<u64> {
        let content: u64 = HEADER_BYTES + records.iter().map(LiveRecord::node_bytes).sum::<u64>();
        // The records, the pending write and `free_space` more, within the node size unless
        // the records and the write alone need more.
        // Saturating: a free_space far above the node size means whole nodes (review rev-bzperf F1).
        let size = (content + extra)
            .saturating_add(self.config.free_space as u64)
            .min(self.config.node_size as u64)
            .max(content + extra)
            .div_ceil(8)
            * 8;
        let block: u64 = records
            .iter()
            .map(|r| record_block_bytes(r.total_len()))
            .sum();
        if size > OFFSET_MAX || block > BLOCK_SIZE_MAX || records.len() as u64 > RECORD_COUNT_MAX {
            return None;
        }
        let node = self.alloc_chunk(size, true)?;
        self.write_header(node, size, records.len() as u64, 0);
        let mut end = size;
        for (i, r) in records.iter().enumerate() {
            let total = r.total_len();
            debug_assert!(total <= TOTAL_LEN_MAX);
            end -= record_block_bytes(total);
            let at = node + end;
            let pointer = match r.payload {
                Payload::Inline(v) => {
                    self.heap.write(at, r.key);
                    self.heap.write(at + r.key.len() as u64, v);
                    false
                }
                Payload::Pointer(p) => {
                    self.heap.word(at).init(p);
                    self.heap.write(at + 8, r.key);
                    true
                }
            };
            self.heap
                .word(Self::meta_off(node, i as u64))
                .init(Metadata::visible(end, r.key.len(), total, pointer).0);
        }
        self.heap
            .word(Self::status_off(node))
            .init(StatusWord::leaf(records.len() as u64, block).0);
        self.persist_bytes(node, size);
        Some(node)
    }

    /// A new internal node (§4.4: search-optimized, sorted, no free space) at `level`.
    pub(crate) fn build_internal(&self, entries: &[Separator<'_>], level: u64) -> Option<u64> {
        debug_assert!(!entries.is_empty() && level > 0);
        let size = internal_node_bytes(entries);
        if size > OFFSET_MAX {
            return None;
        }
        let node = self.alloc_chunk(size, true)?;
        let n = entries.len() as u64;
        self.write_header(node, size, n, level);
        let mut end = size;
        for (i, (key, child)) in entries.iter().enumerate() {
            // The first record's key is the node's lower bound: stored empty.
            let key: &[u8] = if i == 0 { &[] } else { key };
            let total = 8 + key.len();
            end -= record_block_bytes(total);
            let at = node + end;
            self.heap.word(at).init(*child);
            self.heap.write(at + 8, key);
            self.heap.atomic(Self::meta_off(node, i as u64)).store(
                Metadata::visible(end, key.len(), total, true).0,
                Ordering::Relaxed,
            );
            self.heap
                .atomic(Self::prefix_off(node, n, i as u64))
                .store(key_prefix(key), Ordering::Relaxed);
        }
        // Slot 0's key is stored empty, so `end` may sit above the prefix array's end.
        debug_assert!(end >= HEADER_BYTES + 2 * METADATA_BYTES * n);
        self.heap
            .word(Self::status_off(node))
            .init(StatusWord::internal().0);
        self.persist_bytes(node, size);
        Some(node)
    }

    /// An internal node's records: keys borrowed from the node, children by the helping read.
    pub(crate) fn internal_entries<'g>(&'g self, node: u64, guard: &Guard) -> Vec<Separator<'g>> {
        (0..self.sorted_count(node))
            .map(|i| {
                let m = self.internal_meta(node, i);
                let child = self
                    .pool
                    .read(self.heap.word(Self::pointer_off(node, m)), guard);
                (self.key_of(node, m), child)
            })
            .collect()
    }

    /// The offset of prefix `i` of an internal node of `n` records (module doc).
    #[inline]
    pub(crate) fn prefix_off(node: u64, n: u64, i: u64) -> u64 {
        node + HEADER_BYTES + METADATA_BYTES * (n + i)
    }

    /// The child slot of an internal node for `key` (§4.4 binary search): the child whose
    /// range holds `key`, or with `after`, the first child holding keys above `key`.
    pub(crate) fn child_slot(&self, node: u64, key: &[u8], after: bool) -> u64 {
        let n = self.sorted_count(node);
        let prefix = key_prefix(key);
        let sep_prefix = |i: u64| {
            self.heap
                .atomic(Self::prefix_off(node, n, i))
                .load(Ordering::Relaxed)
        };
        // Separators 1..n below key by prefix, without a branch on the comparisons
        // (`lower_bound`); where the first one not below ties key's prefix (with 8-byte keys,
        // it is key), the rest by whole keys.
        let i = lower_bound(1, n.saturating_sub(1), |i| sep_prefix(i) < prefix);
        if i < n && sep_prefix(i) == prefix {
            let goes_right = |i: u64| match key_cmp(self.separator(node, i), key) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => after,
                std::cmp::Ordering::Greater => false,
            };
            return lower_bound(i, n - i, goes_right) - 1;
        }
        i - 1
    }

    /// The child pointer word of slot `i` of an internal node.
    #[inline]
    pub(crate) fn child_word_off(&self, node: u64, i: u64) -> u64 {
        Self::pointer_off(node, self.internal_meta(node, i))
    }

    #[inline]
    pub(crate) fn child(&self, node: u64, i: u64, guard: &Guard) -> u64 {
        self.pool
            .read(self.heap.word(self.child_word_off(node, i)), guard)
    }

    /// Separator key of slot `i` (empty for slot 0).
    #[inline]
    pub(crate) fn separator(&self, node: u64, i: u64) -> &[u8] {
        self.key_of(node, self.internal_meta(node, i))
    }
}

/// The first index in `base..base + size` where `less` is false (`base + size` if none), for
/// `less` true on a prefix of the range: a binary search whose steps select the next half
/// arithmetically rather than by a branch. A probe's comparison goes one way or the other at
/// random, so a branch on it mispredicts about every other probe (session 19 measured 14.2
/// mispredictions per read, against bwtree's 4.9); the probe count depends on `size` only.
#[inline]
pub(crate) fn lower_bound(mut base: u64, mut size: u64, less: impl Fn(u64) -> bool) -> u64 {
    if size == 0 {
        return base;
    }
    while size > 1 {
        let half = size / 2;
        base += half * u64::from(less(base + half));
        size -= half;
    }
    base + u64::from(less(base))
}

/// `a.cmp(b)` for keys: the first 8 bytes compared as one big-endian word, so the common
/// case (keys differing in their first 8 bytes, or 8-byte keys) makes no `memcmp` call,
/// which was a quarter of a read-only run's CPU at 8-byte keys.
#[inline]
pub(crate) fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        (Some(x), Some(y)) => match u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y)) {
            std::cmp::Ordering::Equal if a.len() == 8 && b.len() == 8 => std::cmp::Ordering::Equal,
            std::cmp::Ordering::Equal => a[8..].cmp(&b[8..]),
            unequal => unequal,
        },
        _ => a.cmp(b),
    }
}

/// `a == b` for keys of equal length, with [`key_cmp`]'s word fast path for 8 bytes.
#[inline]
pub(crate) fn key_eq(a: &[u8], b: &[u8]) -> bool {
    match (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        (Some(x), Some(y)) if a.len() == 8 && b.len() == 8 => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod key_order_tests {
    use super::{key_cmp, key_eq, key_prefix};

    // Goal: `lower_bound` finds the first index where `less` is false, at every size and
    // split point. Method: exhaustively for ranges of 0..40 elements at two bases.
    #[test]
    fn lower_bound_finds_the_first_false() {
        for base in [0u64, 1] {
            for size in 0..40u64 {
                for cut in base..=base + size {
                    assert_eq!(
                        super::lower_bound(base, size, |i| i < cut),
                        cut,
                        "base {base} size {size} cut {cut}"
                    );
                }
            }
        }
    }

    // Goal: key_cmp and key_eq order keys exactly as byte slices do, at lengths around the
    // 8-byte word. Method: every pair from a set of keys of lengths 0–17 that differ early,
    // late, or only in length.
    #[test]
    fn key_cmp_is_slice_order() {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for len in 0..18usize {
            for fill in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut k = vec![fill; len];
                keys.push(k.clone());
                if let Some(last) = k.last_mut() {
                    *last ^= 1;
                    keys.push(k.clone());
                }
                if len > 3 {
                    k[3] = k[3].wrapping_add(1);
                    keys.push(k);
                }
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} vs {b:?}");
                if a.len() == b.len() {
                    assert_eq!(key_eq(a, b), a == b, "{a:?} vs {b:?}");
                }
                // The prefix order never contradicts the key order (internal nodes' search).
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "prefixes of {a:?} vs {b:?}");
                }
            }
        }
    }
}
