//! `masstree`: the trie of B+trees of Mao, Kohler and Morris, "Cache craftiness for fast
//! multicore key-value storage" (EuroSys 2012), `shared/papers/masstree.md` §4.
//!
//! | paper | module |
//! |---|---|
//! | §4.1 layers, §4.6.3 new layers | `layer` |
//! | §4.2 key slices, keylen | `key` |
//! | §4.2 border nodes, suffixes beside them | `border` |
//! | §4.2 interior nodes | `interior` |
//! | §4.4–4.6 version word (Fig. 3) | `nodeversion` |
//! | §4.6.2 permutation | `permuter` |
//! | §4.6.4 get (Fig. 6, 7); batched gets with prefetch (§4.2) | `get`, `layer::find_border` |
//! | §4.6.1–4.6.3 put | `insert` |
//! | §4.3, §4.6.4 splits (Fig. 5) | `split` |
//! | §4.6.5 removes | `remove`, `layer::collapse_root`, `node` (reclamation) |
//! | §4.7 values, columns | `columns`, `insert::put_with` |
//! | §3 getrange, §4.3 linked border nodes: range queries in batches | `scan` |
//! | node lifetime, reclamation, node references | `node` |
//! | value and suffix blocks, the row flag | `block` |
//! | §6.2 factor-analysis knobs, §4.8 search | `config` ([`MasstreeConfig`]) |
//! | §4.2 prefetch | `prefetch` |
//! | test-only pause points | forest-core's `pause`, listed below |
//! | poisoning freed memory for memory tools | [`memcheck`] |
//!
//! The crate's API is [`Masstree`] (forest-core's `Index` and `ColumnIndex`), its shapes and
//! [`MasstreeConfig`]; [`memcheck`] is public for the memory-tool test, and `nodeversion` under
//! `cfg(loom)` for the loom model. The other modules are private.
//!
//! Pause points (forest-core's `pause`, feature `pause-points`, tests only: a test's hook can
//! stop the thread there so that other threads meet the change half done; without the feature
//! they compile to nothing):
//! - `split:sibling-linked` (§4.6.4 steps 1–2, `split`): the border node is locked and marked
//!   splitting, its upper keys moved to the new sibling, which is linked after it; the
//!   parent is not yet updated.
//! - `split:parent-updated` (§4.6.4 steps 3–4, `split`): the sibling is in the parent (or a
//!   new root); nothing is unlocked yet.
//! - `layer:unstable` (§4.6.3, `layer`): the slot's value moved to the new layer's node and
//!   its `keylen` is unstable; the layer link is not yet stored.
//! - `remove:leaf-marked` (§4.6.5, `remove`): an empty border node is locked, marked deleted,
//!   not yet unlinked.
//! - `border:shifted` (§6.2's "B-tree" without "+Permuter", `border`): a sorted border node is
//!   locked and marked inserting, its slots from the insert position on shifted right (that
//!   slot has no block); the new key and the permutation are not yet written.
//! - `get:slot-matched` (§4.6.4, Fig. 7, `border::Border::lookup`): a reader matched the key
//!   to a slot and has not yet loaded the slot's value; it holds its version snapshot.
//! - `put:layer-link-read` (§4.6.1, `insert`): a put read and validated, without the lock,
//!   the link of the layer holding its key, and has not yet descended into that layer.
//! - `scan:before-copy` (`scan`): a scan holds a border node and its version snapshot and is
//!   about to read the node's slots.
//! - `scan:layer-slot-read` (`scan`): a scan reading a node's slots (the permutation
//!   loaded) met a layer slot and has not yet loaded its link.
//! - `scan:copy-failed` (`scan`): that read met a slot mid-change (a layer being installed, a
//!   block being moved) and the scan is about to try the node again.
//! - `scan:next-node` (`scan`, ascending): a scan has handled a validated node and holds the
//!   `next` link read in that snapshot; it has not yet looked at the next node.
//! - `scan:prev-node` (`scan`, descending): a scan has handled a validated node and holds its
//!   `prev` link; it has not yet walked right from there to the node below it.
//!
//! `unsafe` lives in `node` (node references, allocation, reclamation) and `block` (value
//! blocks), whose module docs state the invariants that make their safe types sound, plus
//! `memcheck` and `prefetch`. Each operation pins a `node::TreeGuard` for its tree
//! (`Masstree::pin`: the epoch guard, borrowing the tree); the algorithm modules reach nodes
//! through `node`'s `Ref<'g, _>` (a node kept alive by that guard, so by the pin and the tree,
//! as crossbeam-epoch's `Shared<'g, T>` but dereferenced safely) and `block::BlockSlot`
//! (made only inside a new border node); their only `unsafe` is `NodeRegistry::retire`, whose
//! caller proves the node unlinked.
//!
//! Choices the paper leaves open, and what is not done yet:
//! - Empty border nodes, emptied interior nodes, one-child roots and empty layers are removed
//!   as §4.6.5 describes (`remove`), and every node, value and suffix goes back through
//!   crossbeam-epoch once unlinked (`node`). Sparse interior nodes are not merged.
//! - Values with columns (§4.7) are rows in forest-core's row encoding, replaced whole by
//!   copy-on-write (`columns`); whether a value is a row is a kind byte in its block, so a
//!   plain value never reads as a row however its bytes look.
//! - A key's suffix and its value are one block (header + bytes, `block`), one pointer
//!   from the slot.
//! - The paper's design is the default: prefetch, linear in-node search, the permuter,
//!   suffixes stored, border nodes of 15 slots and interior nodes of fanout 16. For §6.2's
//!   factor analysis [`Masstree::with_config`] switches prefetch, search, the permuter and
//!   suffix storage at run time, and [`Masstree10x8`] / [`Masstree15x32`] are the other node
//!   shapes (`config`).

mod block;
mod border;
mod columns;
mod config;
mod get;
mod insert;
mod interior;
mod key;
mod layer;
pub mod memcheck;
mod node;
// Public only for the loom model (tests/loom_nodeversion.rs).
#[cfg(loom)]
pub mod nodeversion;
#[cfg(not(loom))]
mod nodeversion;
mod permuter;
mod prefetch;
mod remove;
mod scan;
mod split;

use std::ops::Bound;

use forest_core::stats::names;
use forest_core::sync::atomic::Ordering;
use forest_core::{check_entry, Counter, Index, IndexStats, Order, Result, Visitor, KEY_BYTES_MAX};

use crate::border::Border;
pub use crate::config::{MasstreeConfig, NodeSearch, SuffixStorage};
use crate::insert::PutMode;
use crate::interior::Interior;
use crate::key::{KEYLEN_LAYER, SLICE_BYTES};
use crate::node::{Kind, NodeRef, NodeTree, TreeGuard};
use crate::nodeversion::ISROOT;

/// Event counters (the paper's retry statistics of §4.6.4).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Retries from a layer's root after a concurrent split.
    pub restarts: Counter,
    /// Local retries after a concurrent insert or split of the node at hand.
    pub retries: Counter,
    /// Writers that found their border node locked by another writer and spun (§4.5).
    pub lock_waits: Counter,
    /// Node splits (border and interior).
    pub splits: Counter,
    /// Layers created (§4.6.3).
    pub layers: Counter,
    /// Border and interior nodes removed (§4.6.5).
    pub node_removals: Counter,
    /// Empty layers removed from their parent layer (§4.6.5).
    pub layer_removals: Counter,
    /// Layer roots collapsed into their only child (§4.6.5).
    pub collapses: Counter,
}

/// A Masstree: concurrent ordered map from byte keys to byte values, with border nodes of
/// `W` slots and interior nodes of fanout `F` (the paper's 15 and 16, §4.2; [`Masstree10x8`]
/// and [`Masstree15x32`] are the other shapes built for §6.2's factor analysis).
#[derive(Debug)]
pub struct Masstree<const W: usize = 15, const F: usize = 16> {
    /// The nodes: registry and layer-0 root (replaced when it splits or collapses; never
    /// null), loaded only under this tree's guard. Dropping it frees the tree.
    pub(crate) nodes: NodeTree<W, F>,
    pub(crate) counters: Counters,
    /// The factor-analysis knobs (fixed for the tree's life).
    pub(crate) config: MasstreeConfig,
}

/// Border nodes of 10 slots (the fewest that hold every key of one slice, §4.2) and interior
/// nodes of fanout 8: smaller nodes, a deeper tree.
pub type Masstree10x8 = Masstree<10, 8>;

/// The paper's border nodes and interior nodes of fanout 32: a shallower tree whose interior
/// nodes span nine cache lines.
pub type Masstree15x32 = Masstree<15, 32>;

impl Default for Masstree {
    fn default() -> Self {
        Self::new()
    }
}

impl Masstree {
    /// An empty tree of the paper's shape with the default configuration: one border node,
    /// root of layer 0.
    pub fn new() -> Self {
        Self::with_config(MasstreeConfig::default())
    }

    /// An empty tree of the paper's shape with the given knobs (§6.2 factor analysis,
    /// `config`).
    pub fn with_config(config: MasstreeConfig) -> Self {
        Self::with_widths(config)
    }
}

impl<const W: usize, const F: usize> Masstree<W, F> {
    /// Cache lines prefetched per node (§4.2: all of a node's lines in parallel): the larger
    /// of an interior node and a border node up to the end of its value pointers (its layer
    /// links and sibling links are read on rarer paths).
    pub const PREFETCH_LINES: usize = prefetch::lines(
        std::mem::size_of::<Interior<W, F>>(),
        std::mem::offset_of!(Border<W, F>, layer),
    );

    /// An empty tree of this shape with the given knobs: one border node, root of layer 0.
    pub fn with_widths(config: MasstreeConfig) -> Self {
        Self {
            nodes: NodeTree::new(),
            counters: Counters::default(),
            config,
        }
    }

    /// Pins the epoch for one operation on this tree: every node and block reached through
    /// the guard lives no longer than the guard and the tree (`node` invariants).
    #[inline]
    pub(crate) fn pin(&self) -> TreeGuard<'_> {
        self.nodes.pin()
    }

    /// The root of layer 0. Panics unless `guard` is this tree's (`node` invariants).
    #[inline]
    pub(crate) fn root<'g>(&self, guard: &'g TreeGuard<'_>) -> NodeRef<'g, W, F> {
        self.nodes.root(guard)
    }

    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<bool> {
        check_entry(key, value)?;
        Ok(insert::put(self, key, value, mode))
    }
}

/// Totals of a structural walk for `stats`.
#[derive(Default)]
struct Walk {
    keys: u64,
    bytes: u64,
}

/// Walks the layer reached from `root`: all its border nodes left to right, and the layers
/// they link to. Not a snapshot: concurrent writes may or may not be counted.
fn walk_layer<const W: usize, const F: usize>(
    root: NodeRef<'_, W, F>,
    guard: &TreeGuard<'_>,
    w: &mut Walk,
) -> u32 {
    let mut n = root;
    let mut height = 1;
    while n.version.stable() & ISROOT == 0 {
        match n.parent.load(Ordering::Acquire, guard) {
            Some(p) => n = p,
            None => break,
        }
    }
    let mut b = loop {
        match n.kind() {
            Kind::Border(b) => break b,
            Kind::Interior(i) => {
                height += 1;
                match i.child[0].load(Ordering::Acquire, guard) {
                    Some(c) => n = c,
                    // Emptied by a concurrent remove: nothing below to count.
                    None => return height,
                }
            }
        }
    };
    loop {
        let perm = b.permutation();
        for i in 0..perm.size() {
            let s = perm.get(i);
            if b.keylen[s].load(Ordering::Acquire) == KEYLEN_LAYER {
                // Unvalidated: a slot being rewritten (sorted nodes shift slots in place)
                // may pair the layer mark with a null link; such a slot is skipped.
                if let Some(link) = b.layer[s].load(Ordering::Acquire, guard) {
                    walk_layer(link.node(), guard, w);
                }
                continue;
            }
            if let Some(v) = b.value[s].load(Ordering::Acquire, guard) {
                w.keys += 1;
                w.bytes += block::heap_bytes(v) as u64;
            }
        }
        match b.next.load(Ordering::Acquire, guard) {
            Some(next) => b = next,
            None => return height,
        }
    }
}

impl<const W: usize, const F: usize> Index for Masstree<W, F> {
    fn name(&self) -> &'static str {
        "masstree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false;
        }
        get::get(self, key, out)
    }

    fn get_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) {
        get::get_many(self, keys, visit)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put(key, value, PutMode::Insert)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(key, value, PutMode::Upsert).map(|_| ())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put(key, value, PutMode::Update)
    }

    fn remove(&self, key: &[u8]) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false;
        }
        remove::remove(self, key)
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

    /// The first batch sized by the hint (`scan::scan_hinted`).
    fn scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        scan::scan_hinted(self, lower, upper, order, len_hint, visit);
    }

    /// The records in place under the scan's epoch pin, with no batches (`scan::scan_pinned`).
    fn scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        scan::scan_pinned(self, lower, upper, order, visit);
    }

    fn stats(&self) -> IndexStats {
        let guard = self.pin();
        let mut w = Walk::default();
        let height = walk_layer(self.root(&guard), &guard, &mut w);
        let (borders, interiors) = self.nodes.counts();
        let node_bytes = borders * std::mem::size_of::<Border<W, F>>() as u64
            + interiors * std::mem::size_of::<Interior<W, F>>() as u64;
        // Each block (suffix and value): its bytes plus crossbeam's length header.
        let block_overhead = std::mem::size_of::<usize>() as u64;
        IndexStats {
            key_count: w.keys,
            memory_bytes: node_bytes + w.bytes + w.keys * block_overhead,
            height,
            inner_node_count: interiors,
            leaf_node_count: borders,
            counters: vec![
                (names::RESTARTS, self.counters.restarts.get()),
                (names::RETRIES, self.counters.retries.get()),
                (names::LATCH_WAITS, self.counters.lock_waits.get()),
                (names::SPLITS, self.counters.splits.get()),
                ("layers", self.counters.layers.get()),
                (names::MERGES, self.counters.node_removals.get()),
                ("layer_removals", self.counters.layer_removals.get()),
                ("collapses", self.counters.collapses.get()),
            ],
        }
    }
}

const _: () = assert!(SLICE_BYTES == 8);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn node_sizes_and_prefetch_lines_per_shape() {
        // Goal: the three shapes really differ in node size (the point of §4.2's fanout
        // choice), and the paper's shape prefetches the 5 lines it always did. Method: compare
        // size_of and PREFETCH_LINES with their expected cache-line counts.
        let lines = |bytes: usize| bytes / 64;
        assert_eq!(lines(std::mem::size_of::<Border<15, 16>>()), 7);
        assert_eq!(lines(std::mem::size_of::<Interior<15, 16>>()), 5);
        assert_eq!(Masstree::<15, 16>::PREFETCH_LINES, 5);
        assert_eq!(lines(std::mem::size_of::<Border<10, 8>>()), 5);
        assert_eq!(lines(std::mem::size_of::<Interior<10, 8>>()), 3);
        assert_eq!(Masstree10x8::PREFETCH_LINES, 4);
        assert_eq!(lines(std::mem::size_of::<Interior<15, 32>>()), 9);
        assert_eq!(Masstree15x32::PREFETCH_LINES, 9);
    }
}

/// Review of issue 13, finding F4: a link must hold null or a live node of its tree
/// (`node` invariants), so links that stop naming a node (a removed layer's slot, slots moved
/// out by a split, children moved to a new interior sibling) are cleared, not left stale.
#[cfg(all(test, not(loom)))]
mod stale_links {
    use super::*;
    use crate::node::BorderRef;

    /// The border nodes of layer 0, left to right.
    fn borders<'g, const W: usize, const F: usize>(
        tree: &Masstree<W, F>,
        guard: &'g TreeGuard<'_>,
    ) -> Vec<BorderRef<'g, W, F>> {
        let mut n = tree.root(guard);
        let mut b = loop {
            match n.kind() {
                Kind::Border(b) => break b,
                Kind::Interior(i) => {
                    n = i.child[0]
                        .load(Ordering::Acquire, guard)
                        .expect("a first child")
                }
            }
        };
        let mut out = vec![b];
        while let Some(next) = b.next.load(Ordering::Acquire, guard) {
            out.push(next);
            b = next;
        }
        out
    }

    /// Slots a node's permutation does not list that still hold a layer link.
    fn stale_layer_slots<const W: usize, const F: usize>(
        b: BorderRef<'_, W, F>,
        guard: &TreeGuard<'_>,
    ) -> Vec<usize> {
        let perm = b.permutation();
        let listed: Vec<usize> = (0..perm.size()).map(|i| perm.get(i)).collect();
        (0..W)
            .filter(|s| !listed.contains(s) && b.layer[*s].load(Ordering::Acquire, guard).is_some())
            .collect()
    }

    /// Two keys that share their first slice `i`, so that slot becomes a layer (§4.6.3).
    fn layered(i: u8, tail: u8) -> Vec<u8> {
        let mut k = vec![i; 8];
        k.extend_from_slice(&[tail; 4]);
        k
    }

    #[test]
    fn removed_layer_leaves_no_link_in_its_slot() {
        // Goal: removing the last keys of a layer (§4.6.5) retires the layer's node; the
        // parent slot, now unlisted, must not keep naming it. Method: make a layer, empty
        // it, then look at every unlisted slot of layer 0's node.
        let tree = Masstree::new();
        tree.upsert(b"plain", b"v").unwrap();
        for tail in [1, 2] {
            tree.upsert(&layered(7, tail), b"v").unwrap();
        }
        assert_eq!(tree.counters.layers.get(), 1);
        for tail in [1, 2] {
            assert!(tree.remove(&layered(7, tail)));
        }
        assert_eq!(tree.counters.layer_removals.get(), 1);
        let guard = tree.pin();
        for b in borders(&tree, &guard) {
            assert_eq!(stale_layer_slots(b, &guard), Vec::<usize>::new());
        }
    }

    #[test]
    fn border_split_leaves_no_link_in_moved_slots() {
        // Goal: a split (§4.6.4) moves layer slots to the new sibling; the slots they left
        // must not keep naming the layers, which the sibling alone owns now (and may retire).
        // Method: fill layer 0 with layer slots until it splits, for both slot disciplines.
        for permuter in [true, false] {
            let tree = Masstree::with_config(MasstreeConfig {
                permuter,
                ..MasstreeConfig::default()
            });
            // Descending, so that splits move slots (an ascending run splits at the end).
            for i in (0..40u8).rev() {
                for tail in [1, 2] {
                    tree.upsert(&layered(i, tail), b"v").unwrap();
                }
            }
            assert!(tree.counters.splits.get() > 0);
            let guard = tree.pin();
            for b in borders(&tree, &guard) {
                assert_eq!(
                    stale_layer_slots(b, &guard),
                    Vec::<usize>::new(),
                    "permuter {permuter}"
                );
            }
        }
    }

    #[test]
    fn interior_split_leaves_no_child_past_nkeys() {
        // Goal: an interior split moves its upper children to the new sibling; the entries
        // past the node's new key count must be null, not name the moved children. Method:
        // grow a tree with interior splits and look at every interior node of layer 0.
        let tree = Masstree10x8::with_widths(MasstreeConfig::default());
        for i in 0..20_000u64 {
            tree.upsert(&i.to_be_bytes(), b"v").unwrap();
        }
        let guard = tree.pin();
        let mut stack = vec![tree.root(&guard)];
        let mut interiors = 0;
        while let Some(n) = stack.pop() {
            if let Kind::Interior(i) = n.kind() {
                interiors += 1;
                let k = i.nkeys();
                for c in k + 1..8 {
                    assert!(
                        i.child[c].load(Ordering::Acquire, &guard).is_none(),
                        "child {c} of {k} keys"
                    );
                }
                stack.extend((0..=k).filter_map(|c| i.child[c].load(Ordering::Acquire, &guard)));
            }
        }
        assert!(
            interiors > 8,
            "{interiors} interior nodes: some of them split"
        );
    }
}

/// Review of issue 13, finding F1: the root is loaded only under its own tree's guard, so no
/// node reference of one tree is tied to another tree's pin (and outlives its own tree).
#[cfg(all(test, not(loom)))]
mod root_guard {
    use super::*;

    #[test]
    #[should_panic(expected = "its own tree's guard")]
    fn root_under_another_trees_guard_panics() {
        // Goal: `root` refuses a guard pinned for another tree. Method: load tree a's root
        // under tree b's guard.
        let a = Masstree::new();
        let b = Masstree::new();
        let guard = b.pin();
        let _ = a.root(&guard);
    }

    #[test]
    #[should_panic(expected = "its own tree's guard")]
    fn root_replaced_under_another_trees_guard_panics() {
        // Goal: `replace_root` refuses a guard pinned for another tree. Method: replace tree
        // a's root by itself under tree b's guard.
        let a = Masstree::new();
        let b = Masstree::new();
        let (ga, gb) = (a.pin(), b.pin());
        let r = a.root(&ga);
        a.nodes.replace_root(r, r, &gb);
    }
}
