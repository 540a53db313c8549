//! Range scans in both orders across layers (§3 getrange, §4.3's linked border nodes).
//!
//! The leaf-snapshot cursor of DESIGN.md: under an epoch pin, copy one border node's live
//! records (validated by its version, retried when it changed), unpin, hand them out, then
//! move on. Layer links found in a node are scanned recursively at their place in key order.
//!
//! - Ascending follows `next` links: a snapshot at version `v` holds every key below the
//!   node's high key at `v`, and `next` at `v` starts exactly there; splits only move keys
//!   right, so no key present throughout is skipped.
//! - Descending re-descends: after a node with lowkey `l` it finds the node responsible for
//!   slice `l - 1`, walks right while a sibling's lowkey is still `≤ l - 1`, and hands out its
//!   keys below `l`. The leftmost node (lowkey 0) ends the layer.
//!
//! Holding node pointers while unpinned is sound because nodes live as long as the tree
//! (crate::node); values and suffixes are copied while pinned.

use std::ops::{Bound, ControlFlow};

use crossbeam_epoch as epoch;
use forest_core::index::{below_lower, in_bounds, past_upper};
use forest_core::sync::atomic::Ordering;
use forest_core::{Order, Visitor};

use crate::border::Border;
use crate::key::{push_slice, slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::node::{border, NodeBase};
use crate::Masstree;

/// One record copied out of a border node.
enum Entry {
    Record { key: Vec<u8>, value: Vec<u8> },
    Layer { slice: u64, root: *mut NodeBase },
}

impl Entry {
    fn slice(&self, prefix_len: usize) -> u64 {
        match self {
            Entry::Record { key, .. } => slice_of(&key[prefix_len..]),
            Entry::Layer { slice, .. } => *slice,
        }
    }
}

/// Copies the live records of `n` (full keys, with `prefix` in front) into `out`, in key
/// order, and returns `n.next` as of the same validated version.
fn snapshot(tree: &Masstree, n: &Border, prefix: &[u8], out: &mut Vec<Entry>) -> *mut Border {
    let guard = epoch::pin();
    'retry: loop {
        out.clear();
        let v = n.base.version.stable();
        let perm = n.permutation();
        for i in 0..perm.size() {
            let s = perm.get(i);
            let slice = n.keyslice[s].load(Ordering::Acquire);
            let kl = n.keylen[s].load(Ordering::Acquire);
            if kl == KEYLEN_LAYER {
                let root = n.layer[s].load(Ordering::Acquire);
                out.push(Entry::Layer { slice, root });
                continue;
            }
            let mut key = Vec::with_capacity(prefix.len() + SLICE_BYTES);
            key.extend_from_slice(prefix);
            if kl == KEYLEN_SUFFIX {
                push_slice(&mut key, slice, SLICE_BYTES);
                // SAFETY: suffixes are freed only through the epoch `guard` pins.
                match unsafe { n.suffix[s].load(Ordering::Acquire, &guard).as_ref() } {
                    Some(b) => key.extend_from_slice(b),
                    None => {
                        tree.counters.retries.incr();
                        continue 'retry;
                    }
                }
            } else if kl as usize <= SLICE_BYTES {
                push_slice(&mut key, slice, kl as usize);
            } else {
                // A layer being installed: the writer marked the node, wait for it.
                tree.counters.retries.incr();
                continue 'retry;
            }
            let p = n.value[s].load(Ordering::Acquire, &guard);
            // SAFETY: values are freed only through the epoch `guard` pins.
            if let Some(b) = unsafe { p.as_ref() } {
                out.push(Entry::Record {
                    key,
                    value: b.to_vec(),
                });
            }
        }
        let next = n.next.load(Ordering::Acquire);
        if n.base.version.has_changed(v) {
            tree.counters.retries.incr();
            continue;
        }
        return next;
    }
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

struct Scan<'a, 'v> {
    tree: &'a Masstree,
    lower: Bound<&'a [u8]>,
    upper: Bound<&'a [u8]>,
    visit: &'a mut Visitor<'v>,
}

impl Scan<'_, '_> {
    fn emit(&mut self, key: &[u8], value: &[u8], order: Order) -> ControlFlow<()> {
        match order {
            Order::Ascending if past_upper(key, self.upper) => ControlFlow::Break(()),
            Order::Descending if below_lower(key, self.lower) => ControlFlow::Break(()),
            _ if !in_bounds(key, self.lower, self.upper) => ControlFlow::Continue(()),
            _ => (self.visit)(key, value),
        }
    }

    fn layer_ascending(&mut self, root: *mut NodeBase, prefix: &mut Vec<u8>) -> ControlFlow<()> {
        let start = match self.lower {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => match bound_slice(prefix, k) {
                Ok(s) => s,
                Err(true) => return ControlFlow::Continue(()), // layer below lower
                Err(false) => 0,
            },
        };
        let (mut n, _) = crate::layer::find_border(self.tree, root, start);
        let mut entries = Vec::new();
        loop {
            let next = snapshot(self.tree, n, prefix, &mut entries);
            for e in entries.drain(..) {
                match e {
                    Entry::Record { key, value } => self.emit(&key, &value, Order::Ascending)?,
                    Entry::Layer { slice, root } => {
                        let len = prefix.len();
                        push_slice(prefix, slice, SLICE_BYTES);
                        let r = self.layer_ascending(root, prefix);
                        prefix.truncate(len);
                        r?;
                    }
                }
            }
            if next.is_null() {
                return ControlFlow::Continue(());
            }
            // SAFETY: `next` links point to live border nodes.
            n = unsafe { border(next) };
        }
    }

    fn layer_descending(&mut self, root: *mut NodeBase, prefix: &mut Vec<u8>) -> ControlFlow<()> {
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
            let (mut n, _) = crate::layer::find_border(self.tree, root, bound);
            loop {
                let next = snapshot(self.tree, n, prefix, &mut entries);
                if next.is_null() {
                    break;
                }
                // SAFETY: `next` links point to live border nodes.
                let nb = unsafe { border(next) };
                if nb.lowkey > bound {
                    break;
                }
                n = nb;
            }
            let plen = prefix.len();
            for e in entries.drain(..).rev() {
                if e.slice(plen) > bound {
                    continue;
                }
                match e {
                    Entry::Record { key, value } => self.emit(&key, &value, Order::Descending)?,
                    Entry::Layer { slice, root } => {
                        push_slice(prefix, slice, SLICE_BYTES);
                        let r = self.layer_descending(root, prefix);
                        prefix.truncate(plen);
                        r?;
                    }
                }
            }
            if n.lowkey == 0 {
                return ControlFlow::Continue(());
            }
            bound = n.lowkey - 1;
        }
    }
}

/// `Index::scan` for Masstree.
pub fn scan(
    tree: &Masstree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    let root = tree.root.load(Ordering::Acquire);
    let mut scan = Scan {
        tree,
        lower,
        upper,
        visit,
    };
    let mut prefix = Vec::new();
    let _ = match order {
        Order::Ascending => scan.layer_ascending(root, &mut prefix),
        Order::Descending => scan.layer_descending(root, &mut prefix),
    };
}
