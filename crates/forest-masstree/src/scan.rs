//! Range scans in both orders across layers (§3 getrange, §4.3's linked border nodes).
//!
//! The leaf-snapshot cursor of DESIGN.md: under an epoch pin, copy one border node's live
//! records (validated by its version, retried when it changed), unpin, hand them out, then
//! move on. Layer links found in a node are scanned recursively at their place in key order.
//!
//! - Ascending follows `next` links: a snapshot at version `v` holds every key below the
//!   node's high key at `v`, and `next` at `v` starts exactly there; splits only move keys
//!   right, so no key present throughout is skipped.
//! - Descending: after a node with lowkey `l` it finds the node responsible for slice `l - 1`
//!   and hands out its keys below `l`. The leftmost node (lowkey 0) ends the layer.
//!
//! No node pointer is held across an unpin, since removed nodes are freed (§4.6.5): each step
//! descends again from the tree's root, through the layers named by the key prefix, to the
//! node responsible for the next slice (ascending: the next node's lowkey as read in the
//! validated snapshot). If that node was removed meanwhile, its keys moved to its left
//! neighbour, which the descent finds; entries whose slice was already passed are skipped.
//! A layer found gone was empty at that moment, so it ends its part of the scan.

use std::ops::{Bound, ControlFlow};

use forest_core::index::{below_lower, in_bounds, past_upper};
use forest_core::sync::atomic::Ordering;
use forest_core::{Order, Visitor};

use crate::border::Border;
use crate::key::{push_slice, slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::node::TreeGuard;
use crate::nodeversion::DELETED;
use crate::Masstree;

/// One record copied out of a border node.
enum Entry {
    Record { key: Vec<u8>, value: Vec<u8> },
    Layer { slice: u64 },
}

impl Entry {
    fn slice(&self, prefix_len: usize) -> u64 {
        match self {
            Entry::Record { key, .. } => slice_of(&key[prefix_len..]),
            Entry::Layer { slice } => *slice,
        }
    }
}

/// The border node responsible for `slice` in the layer of keys starting with `prefix`, as one
/// validated copy.
struct Snapshot {
    lowkey: u64,
    /// The next node's lowkey, `None` at the layer's last node.
    next_lowkey: Option<u64>,
}

/// Under a fresh pin: descends from the tree's root to the layer of `prefix` and its border
/// node for `slice`, and copies that node's live records (full keys) into `out`, in key order.
/// `None` when the layer no longer exists (all its keys were removed).
fn snapshot<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    prefix: &[u8],
    slice: u64,
    out: &mut Vec<Entry>,
) -> Option<Snapshot> {
    let guard = tree.pin();
    'top: loop {
        let root = crate::layer::layer_root(tree, prefix, &guard)?;
        let (mut n, mut v) = crate::layer::find_border(tree, root, slice, &guard);
        'node: loop {
            out.clear();
            if v & DELETED != 0 {
                // A removed node, or the layer itself was removed: descend again.
                tree.counters.restarts.incr();
                continue 'top;
            }
            forest_core::pause::pause_point("scan:before-copy");
            if copy_node(&n, prefix, out, &guard).is_none() {
                forest_core::pause::pause_point("scan:copy-failed");
                tree.counters.retries.incr();
                // As after a failed validation: the node may have split since `v`, its keys
                // from `slice` on moved right.
                (n, v) = crate::layer::walk_right(n, slice, &guard);
                continue 'node;
            }
            let next_lowkey = n.next.load(Ordering::Acquire, &guard).map(|b| b.lowkey);
            if n.base.version.has_changed(v) {
                tree.counters.retries.incr();
                (n, v) = crate::layer::walk_right(n, slice, &guard);
                continue 'node;
            }
            return Some(Snapshot {
                lowkey: n.lowkey,
                next_lowkey,
            });
        }
    }
}

/// Copies `n`'s live records into `out`; `None` when a slot is mid-change (retry).
fn copy_node<const W: usize, const F: usize>(
    n: &Border<W, F>,
    prefix: &[u8],
    out: &mut Vec<Entry>,
    guard: &TreeGuard<'_>,
) -> Option<()> {
    let perm = n.permutation();
    for i in 0..perm.size() {
        let s = perm.get(i);
        let slice = n.keyslice[s].load(Ordering::Acquire);
        let kl = n.keylen[s].load(Ordering::Acquire);
        if kl == KEYLEN_LAYER {
            out.push(Entry::Layer { slice });
            continue;
        }
        let mut key = Vec::with_capacity(prefix.len() + SLICE_BYTES);
        key.extend_from_slice(prefix);
        let block = n.value[s].load(Ordering::Acquire, guard);
        if kl == KEYLEN_SUFFIX {
            push_slice(&mut key, slice, SLICE_BYTES);
            // A long key without its block is in transition: the caller retries.
            key.extend_from_slice(crate::block::suffix(block?));
        } else if kl as usize <= SLICE_BYTES {
            push_slice(&mut key, slice, kl as usize);
        } else {
            // A layer being installed: the writer marked the node, wait for it.
            return None;
        }
        if let Some(b) = block {
            out.push(Entry::Record {
                key,
                value: crate::block::value(b).bytes.to_vec(),
            });
        }
    }
    Some(())
}

/// Where a bound key falls relative to the layer holding keys `prefix ++ x`: the slice to
/// start at, or `None` when the whole layer lies on one side (`Some(true)` = below the key).
fn bound_slice(prefix: &[u8], k: &[u8]) -> Result<u64, bool> {
    if prefix.is_empty() || (k.len() > prefix.len() && k.starts_with(prefix)) {
        Ok(slice_of(&k[prefix.len()..]))
    } else {
        Err(prefix < k)
    }
}

struct Scan<'a, 'v, const W: usize, const F: usize> {
    tree: &'a Masstree<W, F>,
    lower: Bound<&'a [u8]>,
    upper: Bound<&'a [u8]>,
    visit: &'a mut Visitor<'v>,
}

impl<const W: usize, const F: usize> Scan<'_, '_, W, F> {
    fn emit(&mut self, key: &[u8], value: &[u8], order: Order) -> ControlFlow<()> {
        match order {
            Order::Ascending if past_upper(key, self.upper) => ControlFlow::Break(()),
            Order::Descending if below_lower(key, self.lower) => ControlFlow::Break(()),
            _ if !in_bounds(key, self.lower, self.upper) => ControlFlow::Continue(()),
            _ => (self.visit)(key, value),
        }
    }

    fn layer_ascending(&mut self, prefix: &mut Vec<u8>) -> ControlFlow<()> {
        let mut from = match self.lower {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => match bound_slice(prefix, k) {
                Ok(s) => s,
                Err(true) => return ControlFlow::Continue(()), // layer below lower
                Err(false) => 0,
            },
        };
        let mut entries = Vec::new();
        loop {
            let Some(snap) = snapshot(self.tree, prefix, from, &mut entries) else {
                return ControlFlow::Continue(());
            };
            let plen = prefix.len();
            for e in entries.drain(..) {
                // Slices below `from` were handed out from an earlier node (one that was
                // removed since, its keys now in this one) or lie below the bound.
                if e.slice(plen) < from {
                    continue;
                }
                match e {
                    Entry::Record { key, value } => self.emit(&key, &value, Order::Ascending)?,
                    Entry::Layer { slice } => {
                        push_slice(prefix, slice, SLICE_BYTES);
                        let r = self.layer_ascending(prefix);
                        prefix.truncate(plen);
                        r?;
                    }
                }
            }
            match snap.next_lowkey {
                Some(l) => from = l,
                None => return ControlFlow::Continue(()),
            }
        }
    }

    fn layer_descending(&mut self, prefix: &mut Vec<u8>) -> ControlFlow<()> {
        let mut bound = match self.upper {
            Bound::Unbounded => u64::MAX,
            Bound::Included(k) | Bound::Excluded(k) => match bound_slice(prefix, k) {
                Ok(s) => s,
                Err(true) => u64::MAX,
                Err(false) => return ControlFlow::Continue(()), // layer above upper
            },
        };
        let mut entries = Vec::new();
        loop {
            let Some(snap) = snapshot(self.tree, prefix, bound, &mut entries) else {
                return ControlFlow::Continue(());
            };
            let plen = prefix.len();
            for e in entries.drain(..).rev() {
                if e.slice(plen) > bound {
                    continue;
                }
                match e {
                    Entry::Record { key, value } => self.emit(&key, &value, Order::Descending)?,
                    Entry::Layer { slice } => {
                        push_slice(prefix, slice, SLICE_BYTES);
                        let r = self.layer_descending(prefix);
                        prefix.truncate(plen);
                        r?;
                    }
                }
            }
            if snap.lowkey == 0 {
                return ControlFlow::Continue(());
            }
            bound = snap.lowkey - 1;
        }
    }
}

/// `Index::scan` for Masstree.
pub fn scan<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    let mut scan = Scan {
        tree,
        lower,
        upper,
        visit,
    };
    let mut prefix = Vec::new();
    let _ = match order {
        Order::Ascending => scan.layer_ascending(&mut prefix),
        Order::Descending => scan.layer_descending(&mut prefix),
    };
}
