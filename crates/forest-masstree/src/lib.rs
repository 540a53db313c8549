//! `masstree`: the trie of B+trees of Mao, Kohler and Morris, "Cache craftiness for fast
//! multicore key-value storage" (EuroSys 2012), `shared/papers/masstree.md` §4.
//!
//! | paper | module |
//! |---|---|
//! | §4.1 layers, §4.6.3 new layers | [`layer`] |
//! | §4.2 key slices, keylen | [`key`] |
//! | §4.2 border nodes, suffixes beside them | [`border`] |
//! | §4.2 interior nodes | [`interior`] |
//! | §4.4–4.6 version word (Fig. 3) | [`nodeversion`] |
//! | §4.6.2 permutation | [`permuter`] |
//! | §4.6.4 get (Fig. 6, 7) | [`get`], `layer::find_border` |
//! | §4.6.1–4.6.3 put | [`insert`] |
//! | §4.3, §4.6.4 splits (Fig. 5) | [`split`] |
//! | §4.6.5 removes (in part) | [`remove`] |
//! | range queries | [`scan`] |
//! | node lifetime | [`node`] |
//!
//! Choices the paper leaves open, and what is not done yet:
//! - Nodes are freed when the tree drops, not before: empty border nodes and empty layers are
//!   not yet unlinked (§4.6.5's node removal). Values and suffixes go back through
//!   crossbeam-epoch as soon as they are replaced or removed.
//! - Values are single byte strings (§4.7's columns are not offered yet).
//! - No prefetch and linear in-node search (§4.8); no measurements yet.

pub mod border;
pub mod get;
pub mod insert;
pub mod interior;
pub mod key;
pub mod layer;
pub mod node;
pub mod nodeversion;
pub mod permuter;
pub mod remove;
pub mod scan;
pub mod split;

use std::ops::Bound;

use crossbeam_epoch as epoch;
use forest_core::stats::names;
use forest_core::sync::atomic::{AtomicPtr, Ordering};
use forest_core::{check_entry, Counter, Index, IndexStats, Order, Result, Visitor, KEY_BYTES_MAX};

use crate::border::Border;
use crate::insert::PutMode;
use crate::key::{KEYLEN_LAYER, SLICE_BYTES};
use crate::node::{node, NodeBase, NodeRef, NodeRegistry};
use crate::nodeversion::{ISBORDER, ISROOT};

/// Event counters (the paper's retry statistics of §4.6.4).
#[derive(Debug, Default)]
pub struct Counters {
    /// Retries from a layer's root after a concurrent split.
    pub restarts: Counter,
    /// Local retries after a concurrent insert or split of the node at hand.
    pub retries: Counter,
    /// Node splits (border and interior).
    pub splits: Counter,
    /// Layers created (§4.6.3).
    pub layers: Counter,
}

/// A Masstree: concurrent ordered map from byte keys to byte values.
#[derive(Debug)]
pub struct Masstree {
    /// The root of layer 0 (replaced when it splits).
    pub(crate) root: AtomicPtr<NodeBase>,
    pub(crate) nodes: NodeRegistry,
    pub(crate) counters: Counters,
}

impl Default for Masstree {
    fn default() -> Self {
        Self::new()
    }
}

impl Masstree {
    /// An empty tree: one border node, root of layer 0.
    pub fn new() -> Self {
        let nodes = NodeRegistry::new();
        let root = nodes.alloc_border(Border::new(ISBORDER | ISROOT, 0));
        Self {
            root: AtomicPtr::new(root.cast()),
            nodes,
            counters: Counters::default(),
        }
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
fn walk_layer(root: *mut NodeBase, guard: &epoch::Guard, w: &mut Walk) -> u32 {
    let mut n = root;
    let mut height = 1;
    // SAFETY: every pointer dereferenced below was read from the tree, so it is a live node
    // (crate::node invariants); values and suffixes are freed only through the pinned epoch.
    unsafe {
        while (*n).version.raw() & ISROOT == 0 && !(*n).parent.load(Ordering::Acquire).is_null() {
            n = (*n).parent.load(Ordering::Acquire).cast();
        }
        let mut b = loop {
            match node(n) {
                NodeRef::Border(b) => break b,
                NodeRef::Interior(i) => {
                    height += 1;
                    n = i.child[0].load(Ordering::Acquire);
                }
            }
        };
        loop {
            let perm = b.permutation();
            for i in 0..perm.size() {
                let s = perm.get(i);
                if b.keylen[s].load(Ordering::Acquire) == KEYLEN_LAYER {
                    walk_layer(b.layer[s].load(Ordering::Acquire), guard, w);
                    continue;
                }
                if let Some(v) = b.value[s].load(Ordering::Acquire, guard).as_ref() {
                    w.keys += 1;
                    w.bytes += v.len() as u64;
                }
                if let Some(x) = b.suffix[s].load(Ordering::Acquire, guard).as_ref() {
                    w.bytes += x.len() as u64;
                }
            }
            let next = b.next.load(Ordering::Acquire);
            if next.is_null() {
                return height;
            }
            b = &*next;
        }
    }
}

impl Index for Masstree {
    fn name(&self) -> &'static str {
        "masstree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false;
        }
        get::get(self, key, out)
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

    fn stats(&self) -> IndexStats {
        let guard = epoch::pin();
        let mut w = Walk::default();
        let height = walk_layer(self.root.load(Ordering::Acquire), &guard, &mut w);
        let (borders, interiors) = self.nodes.counts();
        let node_bytes = borders * std::mem::size_of::<Border>() as u64
            + interiors * std::mem::size_of::<interior::Interior>() as u64;
        // Each value and suffix block: its bytes plus the boxed slice header.
        let block_overhead = 2 * std::mem::size_of::<usize>() as u64;
        IndexStats {
            key_count: w.keys,
            memory_bytes: node_bytes + w.bytes + w.keys * block_overhead,
            height,
            inner_node_count: interiors,
            leaf_node_count: borders,
            counters: vec![
                (names::RESTARTS, self.counters.restarts.get()),
                (names::RETRIES, self.counters.retries.get()),
                (names::SPLITS, self.counters.splits.get()),
                ("layers", self.counters.layers.get()),
            ],
        }
    }
}

impl Drop for Masstree {
    fn drop(&mut self) {
        self.nodes.free_all();
    }
}

const _: () = assert!(SLICE_BYTES == 8);
