//! `lockbtree`: the lock-coupling B+tree of Westerhoff's thesis
//! (`shared/papers/btree-synchronization-thesis.md`): read/write spin latches on every node
//! and on the tree holder, interlocking read latches while descending, and multi-pass writes
//! that take write latches top-down only where the change needs them.
//!
//! | module | thesis |
//! |---|---|
//! | [`latch`] | §4.2, Listing 4.1: the 32-bit RW spin latch |
//! | `node` | §2.1, Listings 2.1–2.2: `Node`/`Leaf`, the `BTree` holder; latch guards and scan revisits (the only `unsafe`) |
//! | `bytes` | §2.1's inline keys and data, for byte strings: keys up to 30 bytes and values up to 22 in the slot, longer ones boxed |
//! | `search` | §2.2 Listing 2.3 (linear) and §2.4 Listing 2.7 (binary) in-node search |
//! | `insert_multipass` | §4.1, §4.2.2, Listing 4.3: `Path`, the write descent, insert/upsert/update |
//! | `split` | §2.2.2: leaf and inner splits, root split |
//! | `remove` | §2.2.3 with §4.1's passes: migration (borrow), merge, root collapse |
//! | `scan` | leaf-snapshot cursor: revisits within a leaf, to the next leaf through its revisited parent (no leaf links), else a descent |
//! | `inspect` | stats walk and the invariant check |
//!
//! Get descends with interlocking read latches (§4.2.1, Listing 4.2) and copies the value into
//! the caller's buffer. Keys are byte strings; each node keeps the keys' 8-byte big-endian
//! prefixes in a dense array compared first (see `search`).
//!
//! Choices the thesis leaves open, besides those in each module's doc:
//! - Capacity: a node of order `m` holds up to `m - 1` keys, and an inner node `m` children
//!   (§2.1). Minimums: a leaf `floor(m / 2)` records, an inner node `ceil(m / 2)` children;
//!   the root has none (an inner root keeps two children).
//! - Slot widths (`bytes`): a key slot is 32 bytes and holds keys up to 30 bytes in place, so
//!   YCSB's 23–24-byte keys are neither a heap box a scan copies from nor a pointer a prefix
//!   tie chases; a value slot stays 24 bytes (22 in place). Per record that is about 12 bytes
//!   less for 23–30-byte keys (no 24-byte box; `forest bench` YCSB, 100 000 keys: 206.6 →
//!   193.5 B/key) and about 11 bytes more for keys up to 22 or over 30 bytes (8 slot bytes
//!   over a leaf's capacity at ~70 % fill); the argument against a per-leaf key arena is in
//!   `bytes`.
//! - `key_count` is counted by a walk at stats time, not kept in a shared counter, which would
//!   bounce one cache line between all writers.

use std::ops::Bound;

use forest_core::stats::Counter;
use forest_core::{check_entry, Error, Index, IndexStats, Order, Result, Visitor, KEY_BYTES_MAX};

mod bytes;
mod insert_multipass;
mod inspect;
pub mod latch;
mod node;
mod remove;
mod scan;
mod search;
mod split;

use insert_multipass::WriteMode;
use node::{BTree, Latched};
pub use search::NodeSearch;

/// The smallest order: below 4 a split leaves single-key nodes and a merge of an underflowing
/// leaf with a minimal sibling has no room to spare, so rebalancing degenerates.
pub const ORDER_MIN: usize = 4;

/// The largest order: a split copies half a node under its latch, and beyond a few thousand
/// keys per node that copy, not the tree height, dominates writes (thesis §3.2: orders of
/// 1 000 and 5 000 already hurt).
pub const ORDER_MAX: usize = 4096;

/// The default order. With binary search over the prefetched prefix array, a node's cost is
/// about one memory round trip whatever its width up to a few hundred keys, so wider nodes
/// mean fewer levels and fewer misses per get; inserts pay for the width in the shift of the
/// leaf's slots (about 3 KiB at 128). Measured on 1 M 8-byte keys (uniform gets and the
/// thesis' 80/20 sequence, 2 cores), 128 beat 64 by 5 to 7 % and 32 by more. The thesis found
/// orders in the tens to low hundreds best and 1 000 and above harmful (§3.2).
pub const ORDER_DEFAULT: usize = 128;

/// How a [`LockBTree`] is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockBTreeConfig {
    /// Children of a full inner node; a node holds up to `order - 1` keys.
    pub order: usize,
    /// The in-node search algorithm.
    pub search: NodeSearch,
}

impl Default for LockBTreeConfig {
    fn default() -> Self {
        Self {
            order: ORDER_DEFAULT,
            search: NodeSearch::default(),
        }
    }
}

/// Event counters (see [`Index::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) restarts: Counter,
    pub(crate) dry_runs: Counter,
    pub(crate) splits: Counter,
    pub(crate) merges: Counter,
    pub(crate) borrows: Counter,
    pub(crate) latch_waits: Counter,
    /// Scan steps that came back to the leaf of the step before without a descent.
    pub(crate) scan_revisits: Counter,
    /// Scan steps after the first that descended from the root.
    pub(crate) scan_redescents: Counter,
    /// Scan steps that went to the next leaf through its parent, taken again, without a
    /// descent from the root.
    pub(crate) scan_sibling_steps: Counter,
}

/// The lock-coupling B+tree.
pub struct LockBTree {
    tree: BTree,
    order: usize,
    search: NodeSearch,
    counters: Counters,
}

impl Default for LockBTree {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LockBTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockBTree")
            .field("order", &self.order)
            .field("search", &self.search)
            .finish_non_exhaustive()
    }
}

impl LockBTree {
    /// An empty tree with the default configuration.
    pub fn new() -> Self {
        Self::build(LockBTreeConfig::default())
    }

    /// An empty tree; `Error::Config` when the order is outside
    /// [`ORDER_MIN`]`..=`[`ORDER_MAX`].
    pub fn with_config(config: LockBTreeConfig) -> Result<Self> {
        if !(ORDER_MIN..=ORDER_MAX).contains(&config.order) {
            return Err(Error::Config(format!(
                "lockbtree order {} is outside {ORDER_MIN}..={ORDER_MAX}",
                config.order
            )));
        }
        Ok(Self::build(config))
    }

    fn build(config: LockBTreeConfig) -> Self {
        Self {
            tree: BTree::new(config.order),
            order: config.order,
            search: config.search,
            counters: Counters::default(),
        }
    }

    /// The configuration the tree was built with.
    pub fn config(&self) -> LockBTreeConfig {
        LockBTreeConfig {
            order: self.order,
            search: self.search,
        }
    }

    /// Checks the B+tree invariants by a walk under read latches: keys strictly ordered in
    /// each node and within the separators above it, prefixes matching keys, capacity and
    /// minimum fill of non-root nodes, children counts, all leaves at one depth. Returns the
    /// first violation found. Meant for tests and debugging on a quiescent tree; O(n).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        inspect::check(self)
    }

    /// Keys a node holds at most (leaf records or inner separators).
    #[inline]
    pub(crate) fn key_count_max(&self) -> usize {
        self.order - 1
    }

    /// Records a non-root leaf holds at least.
    #[inline]
    pub(crate) fn leaf_key_count_min(&self) -> usize {
        self.order / 2
    }

    /// Separators a non-root inner node holds at least (`ceil(order / 2)` children).
    #[inline]
    pub(crate) fn inner_key_count_min(&self) -> usize {
        self.order.div_ceil(2) - 1
    }
}

impl Index for LockBTree {
    fn name(&self) -> &'static str {
        "lockbtree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let waits = &self.counters.latch_waits;
        let sk = search::SearchKey::new(key);
        let holder = self.tree.read(waits);
        let mut node = holder.root_read(waits);
        drop(holder);
        while node.level() > 0 {
            let body = node.body();
            // The child pointers load while the prefixes are searched.
            node::prefetch(&body.children);
            let index = search::lower_bound(self.search, &body.prefixes, &body.keys, &sk);
            node.prefetch_child(index, self.order);
            // Interlocking: the child's latch is taken before the parent's is released.
            let child = node.read_child(index, waits);
            node = child;
        }
        let leaf = node.body();
        let first = search::prefix_lower_bound(self.search, &leaf.prefixes, &sk);
        if first == leaf.len() || leaf.prefixes[first] != sk.prefix {
            return false;
        }
        // The value's slot loads while the key's slot is compared.
        node::prefetch(&leaf.values[first..=first]);
        let pos = search::tie_bound(self.search, &leaf.prefixes, &leaf.keys, &sk, first, false);
        if pos < leaf.len() && sk.cmp_slot(leaf.prefixes[pos], &leaf.keys[pos]).is_eq() {
            out.clear();
            out.extend_from_slice(&leaf.values[pos]);
            true
        } else {
            false
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        Ok(insert_multipass::write_entry(
            self,
            key,
            value,
            WriteMode::InsertIfAbsent,
        ))
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        insert_multipass::write_entry(self, key, value, WriteMode::Upsert);
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        Ok(insert_multipass::write_entry(
            self,
            key,
            value,
            WriteMode::UpdateIfPresent,
        ))
    }

    fn remove(&self, key: &[u8]) -> bool {
        if key.len() > KEY_BYTES_MAX {
            // No such key can have been written.
            return false;
        }
        remove::remove_entry(self, key)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        scan::scan(self, lower, upper, order, visit);
    }

    /// Each step's copy sized by what the hint still expects (`scan::scan_hinted`).
    fn scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        scan::scan_hinted(self, lower, upper, order, Some(len_hint), visit);
    }

    fn stats(&self) -> IndexStats {
        inspect::stats(self)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_keys;
