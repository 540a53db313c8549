//! Layers (§4.1, §4.6.3) and finding the border node for a slice within one layer (Fig. 6).
//!
//! A layer is a B+tree reached from a parent-layer slot whose `keylen` is `KEYLEN_LAYER` (or,
//! for layer 0, from the tree's root pointer). Layer links are not updated when a layer's
//! root splits: readers and writers climb `parent` links from the stale root to the current
//! one (Fig. 6's first lines), which is what the paper's lazy root update amounts to.
//!
//! Invariants:
//! - A node whose `ISROOT` bit is clear has a non-null parent (set before the bit is cleared).
//! - A new layer is installed under the parent-layer node's lock with the node marked
//!   inserting and the slot passing through `KEYLEN_UNSTABLE`, so a concurrent get sees the
//!   old key or the new layer, never neither.

use crossbeam_epoch::{Guard, Shared};
use forest_core::sync::atomic::Ordering;

use crate::border::Border;
use crate::key::{slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, KEYLEN_UNSTABLE, SLICE_BYTES};
use crate::node::{base, border, node, NodeBase, NodeRef};
use crate::nodeversion::{ISBORDER, ISROOT, VSPLIT_MASK};
use crate::permuter::Permuter;
use crate::Masstree;

/// `findborder` (Fig. 6): the border node responsible for `slice` in the layer reached from
/// `root` (possibly stale), with a stable version snapshot of it.
pub fn find_border(tree: &Masstree, root: *mut NodeBase, slice: u64) -> (&Border, u64) {
    'retry: loop {
        // Climb from a stale root to the current one.
        let mut n = root;
        // SAFETY: `root` came from the tree (crate::node invariants); so do parents.
        let mut v = unsafe { base(n) }.version.stable();
        while v & ISROOT == 0 {
            // SAFETY: as above.
            let p = unsafe { base(n) }.parent.load(Ordering::Acquire);
            debug_assert!(!p.is_null(), "a non-root node without a parent");
            if p.is_null() {
                break;
            }
            n = p.cast();
            // SAFETY: as above.
            v = unsafe { base(n) }.version.stable();
        }
        loop {
            // SAFETY: `n` is a live node of this tree.
            let inner = match unsafe { node(n) } {
                NodeRef::Border(b) => return (b, v),
                NodeRef::Interior(i) => i,
            };
            let child = inner.child_for(slice);
            if !child.is_null() {
                // SAFETY: a child pointer read from a live node is a live node.
                let cv = unsafe { base(child) }.version.stable();
                if !inner.base.version.has_changed(v) {
                    // Hand-over-hand validation: the child was ours while `inner` was unchanged.
                    n = child;
                    v = cv;
                    continue;
                }
            }
            let v2 = inner.base.version.stable();
            if (v2 ^ v) & VSPLIT_MASK != 0 {
                // The node split: the key may have moved to a node we cannot reach from here.
                tree.counters.restarts.incr();
                continue 'retry;
            }
            // Only an insert changed the node: its key range is the same, retry locally.
            tree.counters.retries.incr();
            v = v2;
        }
    }
}

/// The border node responsible for `slice`, locked (§4.5). After locking, walks right past
/// splits that happened since the search (lowkeys never change, §4.6.4).
pub fn locate_locked(tree: &Masstree, root: *mut NodeBase, slice: u64) -> &Border {
    let (mut n, _) = find_border(tree, root, slice);
    n.base.version.lock();
    loop {
        let next = n.next.load(Ordering::Acquire);
        if next.is_null() {
            return n;
        }
        // SAFETY: `next` links point to live border nodes.
        let nb = unsafe { border(next) };
        if slice < nb.lowkey {
            return n;
        }
        n.base.version.unlock();
        nb.base.version.lock();
        n = nb;
    }
}

/// Replaces the long key in slot `s` of the locked node `n` by a new layer holding it
/// (§4.6.3) and returns the new layer's root. The caller continues its insert there.
pub fn make_new_layer(tree: &Masstree, n: &Border, s: usize, guard: &Guard) -> *mut NodeBase {
    debug_assert_eq!(n.keylen[s].load(Ordering::Relaxed), KEYLEN_SUFFIX);
    tree.counters.layers.incr();
    let suf = n.suffix[s].load(Ordering::Relaxed, guard);
    // SAFETY: the slot's suffix is live while `n` is locked.
    let old_rest: &[u8] = unsafe { suf.as_ref() }.expect("a KEYLEN_SUFFIX slot has a suffix");
    let twig = Border::new(ISBORDER | ISROOT, 0);
    twig.keyslice[0].store(slice_of(old_rest), Ordering::Relaxed);
    if old_rest.len() <= SLICE_BYTES {
        twig.keylen[0].store(old_rest.len() as u8, Ordering::Relaxed);
    } else {
        twig.keylen[0].store(KEYLEN_SUFFIX, Ordering::Relaxed);
        let tail: Box<[u8]> = old_rest[SLICE_BYTES..].into();
        twig.suffix[0].store(crossbeam_epoch::Owned::new(tail), Ordering::Relaxed);
    }
    twig.permutation
        .store(Permuter::from_sorted(&[0]).value(), Ordering::Relaxed);
    n.base.version.mark_insert();
    let val = n.value[s].swap(Shared::null(), Ordering::AcqRel, guard);
    twig.value[0].store(val, Ordering::Relaxed);
    let twig = tree.nodes.alloc_border(twig);
    n.keylen[s].store(KEYLEN_UNSTABLE, Ordering::Release);
    n.layer[s].store(twig.cast(), Ordering::Release);
    n.keylen[s].store(KEYLEN_LAYER, Ordering::Release);
    let old = n.suffix[s].swap(Shared::null(), Ordering::AcqRel, guard);
    crate::border::retire(old, guard);
    twig.cast()
}
