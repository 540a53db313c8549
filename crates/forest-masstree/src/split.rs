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
//!   share a slice, so among 16 keys a boundary exists.
//! - Sequential inserts (new key last in the rightmost node) leave the old node full and
//!   start the new one with the new key only (§4.3's common-case optimization).

use crossbeam_epoch::Guard;
use forest_core::sync::atomic::Ordering;

use crate::border::Border;
use crate::interior::{Interior, KEYS_MAX};
use crate::key::slice_of;
use crate::node::{base, border, interior, NodeBase};
use crate::nodeversion::ISROOT;
use crate::permuter::{Permuter, WIDTH};
use crate::Masstree;

/// Splits the full, locked border node `n` and inserts the key `rest` at position `pos`.
pub fn split_insert(
    tree: &Masstree,
    n: &Border,
    pos: usize,
    rest: &[u8],
    value: crate::block::Value<'_>,
    guard: &Guard,
) {
    debug_assert_eq!(n.permutation().size(), WIDTH);
    tree.counters.splits.incr();
    n.base.version.mark_split();
    let perm = n.permutation();
    let new_slice = slice_of(rest);
    // The slice of item i of the 16 (old keys with the new one at `pos`).
    let item_slice = |i: usize| -> u64 {
        let slot = match i.cmp(&pos) {
            std::cmp::Ordering::Less => perm.get(i),
            std::cmp::Ordering::Equal => return new_slice,
            std::cmp::Ordering::Greater => perm.get(i - 1),
        };
        n.keyslice[slot].load(Ordering::Relaxed)
    };
    let total = WIDTH + 1;
    let sequential = pos == WIDTH
        && n.next.load(Ordering::Relaxed).is_null()
        && item_slice(WIDTH - 1) != new_slice;
    let m = if sequential {
        WIDTH
    } else {
        // The boundary between different slices nearest the middle.
        (0..total)
            .flat_map(|d| [total / 2 - d.min(total / 2), total / 2 + d])
            .find(|&m| (1..total).contains(&m) && item_slice(m - 1) != item_slice(m))
            .expect("16 keys hold at least two slices")
    };
    let lowkey = item_slice(m);
    let right = Border::new(n.base.version.raw() & !ISROOT, lowkey);
    let mut moved = [0usize; WIDTH];
    let mut moved_count = 0;
    for i in m..total {
        let j = i - m;
        if i == pos {
            right.write_slot(j, rest, value, guard);
        } else {
            let s = perm.get(if i < pos { i } else { i - 1 });
            n.move_slot(s, &right, j, guard);
            moved[moved_count] = s;
            moved_count += 1;
        }
    }
    let right_slots: [usize; WIDTH] = std::array::from_fn(|i| i);
    right.permutation.store(
        Permuter::from_sorted(&right_slots[..total - m]).value(),
        Ordering::Relaxed,
    );
    // The left keeps items 0..m; the new key, if it lands here, takes a slot just emptied.
    let mut left = [0usize; WIDTH];
    for (i, slot) in left.iter_mut().enumerate().take(m) {
        *slot = match i.cmp(&pos) {
            std::cmp::Ordering::Less => perm.get(i),
            std::cmp::Ordering::Equal => {
                let s = moved[0];
                n.write_slot(s, rest, value, guard);
                s
            }
            std::cmp::Ordering::Greater => perm.get(i - 1),
        };
    }
    if pos < m {
        debug_assert!(moved_count > 0);
    }
    n.permutation
        .store(Permuter::from_sorted(&left[..m]).value(), Ordering::Release);
    let right = tree.nodes.alloc_border(right);
    // Link the sibling after `n` (n's lock protects n.next and next.prev).
    let next = n.next.load(Ordering::Relaxed);
    // SAFETY: `right` is a live node, not yet visible to others.
    let rb = unsafe { border(right) };
    rb.next.store(next, Ordering::Relaxed);
    rb.prev
        .store(n as *const Border as *mut Border, Ordering::Relaxed);
    if !next.is_null() {
        // SAFETY: `next` links point to live border nodes.
        unsafe { border(next) }.prev.store(right, Ordering::Release);
    }
    n.next.store(right, Ordering::Release);
    crate::pause::pause_point("split:sibling-linked");
    let n_ptr = n as *const Border as *mut NodeBase;
    ascend(tree, n_ptr, right.cast(), lowkey);
}

/// Locks and returns `n`'s parent, or null at a layer's root (Fig. 4's `lockedparent`).
pub(crate) fn locked_parent(n: &NodeBase) -> *mut Interior {
    loop {
        let p = n.parent.load(Ordering::Acquire);
        if p.is_null() {
            return p;
        }
        // SAFETY: parent links point to live interior nodes.
        let pi = unsafe { interior(p) };
        pi.base.version.lock();
        if n.parent.load(Ordering::Acquire) == p {
            return p;
        }
        // The parent split meanwhile and `n` moved; try its new parent.
        pi.base.version.unlock();
    }
}

/// Inserts `n2` (locked, splitting) after `n` (locked, splitting) with separator `sep`,
/// splitting ancestors as needed (Fig. 5's `ascend`). Unlocks everything it holds on return.
fn ascend(tree: &Masstree, mut n: *mut NodeBase, mut n2: *mut NodeBase, mut sep: u64) {
    loop {
        // SAFETY: `n` and `n2` are live nodes (crate::node invariants).
        let (nb, n2b) = unsafe { (base(n), base(n2)) };
        let p = locked_parent(nb);
        if p.is_null() {
            // `n` was its layer's root: grow the layer by a new root.
            let r = Interior::new(ISROOT);
            r.keyslice[0].store(sep, Ordering::Relaxed);
            r.child[0].store(n, Ordering::Relaxed);
            r.child[1].store(n2, Ordering::Relaxed);
            r.nkeys.store(1, Ordering::Relaxed);
            let r = tree.nodes.alloc_interior(r);
            n2b.parent.store(r, Ordering::Release);
            nb.parent.store(r, Ordering::Release);
            nb.version.clear_root();
            // Layer 0's root is the tree's; deeper layers' links are found stale and climbed.
            let _ = tree
                .root
                .compare_exchange(n, r.cast(), Ordering::AcqRel, Ordering::Acquire);
            crate::pause::pause_point("split:parent-updated");
            nb.version.unlock();
            n2b.version.unlock();
            return;
        }
        // SAFETY: `p` is a live interior node, locked by us.
        let pi = unsafe { interior(p) };
        if pi.nkeys() < KEYS_MAX {
            pi.base.version.mark_insert();
            pi.insert_after(n, sep, n2);
            n2b.parent.store(p, Ordering::Release);
            crate::pause::pause_point("split:parent-updated");
            nb.version.unlock();
            n2b.version.unlock();
            pi.base.version.unlock();
            return;
        }
        tree.counters.splits.incr();
        pi.base.version.mark_split();
        nb.version.unlock();
        let p2 = tree
            .nodes
            .alloc_interior(Interior::new(pi.base.version.raw() & !ISROOT));
        // SAFETY: `p2` was just allocated and is reachable only by us.
        let p2i = unsafe { interior(p2) };
        let up = pi.split_into(p, p2i, p2, n, sep, n2);
        n2b.version.unlock();
        n = p.cast();
        n2 = p2.cast();
        sep = up;
    }
}
