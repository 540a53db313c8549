//! Splits (§4.3, §4.6.4, Fig. 5; masstree-beta's `masstree_split.hh`).
//!
//! A full border node splits "to the right": its higher keys move to a new sibling, which is
//! linked after it, then the sibling is inserted into the parent, locking upward hand over
//! hand (node, sibling and parent held together; §4.5). A full parent splits the same way.
//!
//! Preconditions and invariants:
//! - On entry the border node is locked; on return every node this split locked is unlocked.
//! - Nodes are marked splitting before keys move; new siblings start locked and splitting
//!   (their version copied from the splitting node) and unlock only once they have a parent,
//!   so a reader climbing parents never sees a parentless non-root.
//! - The split point never separates two keys with the same slice (§4.2); at most 10 keys
//!   share a slice and a border node has at least 10 slots, so among its `W + 1` keys a
//!   boundary exists.
//! - Sequential inserts (new key last in the rightmost node) leave the old node full and
//!   start the new one with the new key only (§4.3's common-case optimization).
//! - Without the permuter (§6.2's "B-tree") both halves leave the split physically sorted:
//!   the sibling is filled in order, and a new key that stays left is written at its
//!   position after the left's later slots shift right (crate::border invariants).
//!
//! Nodes are reached through [`crate::node`]'s references, so this module has no `unsafe`.

use crate::node::TreeGuard;
use forest_core::sync::atomic::Ordering;

use crate::border::NewSlot;
use crate::interior::Interior;
use crate::node::{BorderRef, InteriorRef, NodeRef};
use crate::nodeversion::ISROOT;
use crate::permuter::Permuter;
use crate::Masstree;

/// Splits the full, locked border node `n` and inserts the key `rest` at position `pos`.
pub fn split_insert<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    n: BorderRef<'g, W, F>,
    pos: usize,
    new: NewSlot<'_, W, F>,
    guard: &'g TreeGuard<'_>,
) {
    debug_assert_eq!(n.permutation().size(), W);
    tree.counters.splits.incr();
    n.base.version.mark_split();
    let perm = n.permutation();
    let new_slice = new.slice();
    let storage = tree.config.suffix;
    // The slice of item i of the W + 1 (old keys with the new one at `pos`).
    let item_slice = |i: usize| -> u64 {
        let slot = match i.cmp(&pos) {
            std::cmp::Ordering::Less => perm.get(i),
            std::cmp::Ordering::Equal => return new_slice,
            std::cmp::Ordering::Greater => perm.get(i - 1),
        };
        n.keyslice[slot].load(Ordering::Relaxed)
    };
    let total = W + 1;
    let sequential = pos == W
        && n.next.load(Ordering::Relaxed, guard).is_none()
        && item_slice(W - 1) != new_slice;
    let m = if sequential {
        W
    } else {
        // The boundary between different slices nearest the middle.
        (0..total)
            .flat_map(|d| [total / 2 - d.min(total / 2), total / 2 + d])
            .find(|&m| (1..total).contains(&m) && item_slice(m - 1) != item_slice(m))
            .expect("W + 1 >= 11 keys hold at least two slices")
    };
    let lowkey = item_slice(m);
    // Locked and splitting as `n` is; not reachable by others until linked below.
    let right = tree
        .nodes
        .alloc_border::<W, F>(n.base.version.raw() & !ISROOT, lowkey, guard);
    let mut moved = [0usize; W];
    let mut moved_count = 0;
    for i in m..total {
        let j = i - m;
        if i == pos {
            right.write_slot(j, new, storage, guard);
        } else {
            let s = perm.get(if i < pos { i } else { i - 1 });
            n.move_slot(s, &right, j, guard);
            moved[moved_count] = s;
            moved_count += 1;
        }
    }
    let right_slots: [usize; W] = std::array::from_fn(|i| i);
    right.permutation.store(
        Permuter::<W>::from_sorted(&right_slots[..total - m]).value(),
        Ordering::Relaxed,
    );
    // The left keeps items 0..m; the new key, if it lands here, takes a slot just emptied:
    // with the permuter the first one moved out, without it slot `pos`, after the left's
    // slots from `pos` on shift right into the emptied slot `m - 1` (all identity then).
    let mut left = [0usize; W];
    if !tree.config.permuter {
        if pos < m {
            n.shift_right(pos, m - 1, guard);
            n.write_slot(pos, new, storage, guard);
        }
        left = std::array::from_fn(|i| i);
    } else {
        for (i, slot) in left.iter_mut().enumerate().take(m) {
            *slot = match i.cmp(&pos) {
                std::cmp::Ordering::Less => perm.get(i),
                std::cmp::Ordering::Equal => {
                    let s = moved[0];
                    n.write_slot(s, new, storage, guard);
                    s
                }
                std::cmp::Ordering::Greater => perm.get(i - 1),
            };
        }
    }
    if pos < m {
        debug_assert!(moved_count > 0);
    }
    n.permutation.store(
        Permuter::<W>::from_sorted(&left[..m]).value(),
        Ordering::Release,
    );
    // Link the sibling after `n` (n's lock protects n.next and next.prev).
    let next = n.next.load(Ordering::Relaxed, guard);
    right.next.store(next, Ordering::Relaxed);
    right.prev.store(Some(n), Ordering::Relaxed);
    if let Some(next) = next {
        next.prev.store(Some(right), Ordering::Release);
    }
    n.next.store(Some(right), Ordering::Release);
    forest_core::pause::pause_point("split:sibling-linked");
    ascend(tree, n.node(), right.node(), lowkey, guard);
}

/// Locks and returns `n`'s parent, or `None` at a layer's root (Fig. 4's `lockedparent`).
/// Precondition: `n` is locked and is not a collapsed root (whose parent link names the root
/// that replaced it, maybe a border node, crate::layer invariants); every other parent link
/// names an interior node.
pub(crate) fn locked_parent<'g, const W: usize, const F: usize>(
    n: NodeRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
) -> Option<InteriorRef<'g, W, F>> {
    loop {
        let p = n.parent.load(Ordering::Acquire, guard)?.interior();
        p.base.version.lock();
        if n.parent.load(Ordering::Acquire, guard) == Some(p.node()) {
            return Some(p);
        }
        // The parent split meanwhile and `n` moved; try its new parent.
        p.base.version.unlock();
    }
}

/// Inserts `n2` (locked, splitting) after `n` (locked, splitting) with separator `sep`,
/// splitting ancestors as needed (Fig. 5's `ascend`). Unlocks everything it holds on return.
fn ascend<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    mut n: NodeRef<'g, W, F>,
    mut n2: NodeRef<'g, W, F>,
    mut sep: u64,
    guard: &'g TreeGuard<'_>,
) {
    loop {
        let Some(p) = locked_parent(n, guard) else {
            // `n` was its layer's root: grow the layer by a new root (not reachable by
            // others until a parent link or the tree's root names it).
            let r = tree.nodes.alloc_interior::<W, F>(ISROOT, guard);
            r.keyslice[0].store(sep, Ordering::Relaxed);
            r.child[0].store(Some(n), Ordering::Relaxed);
            r.child[1].store(Some(n2), Ordering::Relaxed);
            r.nkeys.store(1, Ordering::Relaxed);
            n2.parent.store(Some(r.node()), Ordering::Release);
            n.parent.store(Some(r.node()), Ordering::Release);
            n.version.clear_root();
            // Layer 0's root is the tree's; deeper layers' links are found stale and climbed.
            tree.nodes.replace_root(n, r.node(), guard);
            forest_core::pause::pause_point("split:parent-updated");
            n.version.unlock();
            n2.version.unlock();
            return;
        };
        if p.nkeys() < Interior::<W, F>::KEYS_MAX {
            p.base.version.mark_insert();
            p.insert_after(n, sep, n2, guard);
            n2.parent.store(Some(p.node()), Ordering::Release);
            forest_core::pause::pause_point("split:parent-updated");
            n.version.unlock();
            n2.version.unlock();
            p.base.version.unlock();
            return;
        }
        tree.counters.splits.incr();
        p.base.version.mark_split();
        n.version.unlock();
        // Locked and splitting as `p` is; reachable only by us until linked.
        let p2 = tree
            .nodes
            .alloc_interior::<W, F>(p.base.version.raw() & !ISROOT, guard);
        let up = Interior::split_into(p, p2, n, sep, n2, guard);
        n2.version.unlock();
        n = p.node();
        n2 = p2.node();
        sep = up;
    }
}
