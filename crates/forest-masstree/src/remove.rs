//! Removes (§4.6.5).
//!
//! A key leaves its border node's permutation in one store and its value block goes back
//! through the epoch; the node's `has_removed` flag makes later inserts that reuse a slot bump
//! `vinsert`, so a reader holding the old slot retries (the paper's get/remove/put example).
//! Without the permuter the later slots shift left instead, the node marked inserting
//! ([`crate::border::Border::remove_at`]).
//!
//! A border node that becomes empty is removed unless it is its layer's first node, which
//! "is not deleted until the B+-tree itself is completely empty" (§4.6.4):
//! 1. lock its `prev` (holding the node; border locks are taken right to left only here),
//!    mark the node splitting and deleted, unlink it from the doubly linked list (`prev.next`
//!    under `prev`'s lock, `next.prev` under the node's own), unlock `prev`;
//! 2. remove it from its parent, locking upward hand over hand as a split does. When it was
//!    the parent's first child, the parent's lower bound rises to its next separator, and the
//!    ancestor separator that equals the node's lowkey is raised to match ("redirect",
//!    masstree-beta's `masstree_remove.hh`). An interior node left with no child is marked
//!    deleted and removed from its own parent the same way;
//! 3. unlock the node and retire it through crossbeam-epoch.
//!
//! Then a root left with one child collapses ([`crate::layer::collapse_root`]), and a layer
//! whose first node is its root and is empty is removed from its parent layer's slot (which
//! may empty that node in turn, and so on up the layers).
//!
//! Why readers stay correct: keys of a removed node become the responsibility of its `prev`
//! (lowkeys never change, highkeys only grow by removal), so a reader that reached a node
//! with `lowkey <= slice` and validates it finds the right node by walking right. A reader
//! that meets the deleted node sees its version change and starts over; a descent that lands
//! on a node whose lowkey exceeds the slice (between the shift in step 2 and the redirect)
//! starts over in `find_border`.
//!
//! Choices the paper leaves open: interior nodes are not merged when they get sparse (only
//! emptied ones go), and non-root one-child chains stay until their subtree empties; an
//! empty layer is removed by the remove that empties it rather than by a background task.
//!
//! Nodes are reached through [`crate::node`]'s references; the `unsafe` steps are the
//! retirements of unlinked nodes, each with a `// SAFETY:` comment saying why it is
//! unreachable.

use crate::node::TreeGuard;
use forest_core::sync::atomic::Ordering;

use crate::border::Found;
use crate::key::{class_of, slice_of, KEYLEN_LAYER, SLICE_BYTES};
use crate::layer::{collapse_root, layer_root, locate_locked};
use crate::node::{BorderRef, InteriorRef, NodeRef};
use crate::nodeversion::{DELETED, ISROOT};
use crate::split::locked_parent;
use crate::Masstree;

/// Removes `key`; returns whether it was present.
pub fn remove<const W: usize, const F: usize>(tree: &Masstree<W, F>, key: &[u8]) -> bool {
    let guard = tree.pin();
    'top: loop {
        let mut root = tree.root(&guard);
        let mut depth = 0;
        loop {
            let rest = &key[depth * SLICE_BYTES..];
            let slice = slice_of(rest);
            let Some(n) = locate_locked(tree, root, slice, &guard) else {
                // A removed node or layer: nothing was changed yet; start over.
                continue 'top;
            };
            match n.find_locked(slice, class_of(rest), rest, tree.config.search, &guard) {
                Found::Exact(pos, _) => {
                    n.remove_at(pos, tree.config.permuter, &guard);
                    finish_remove(tree, n, root, key, depth, &guard);
                    return true;
                }
                Found::Layer(s) => {
                    let link = n.layer[s].load(Ordering::Acquire, &guard);
                    n.base.version.unlock();
                    root = link.expect("a locked layer slot has its link").node();
                    depth += 1;
                }
                Found::Conflict(_) | Found::Absent(_) => {
                    n.base.version.unlock();
                    return false;
                }
            }
        }
    }
}

/// `n` (locked, in the layer at `depth` whose link is `root`) just lost an entry. Unlocks it,
/// and removes it if empty, then collapses the layer's root and removes the layer if empty,
/// repeating in the parent layer.
fn finish_remove<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    mut n: BorderRef<'g, W, F>,
    mut root: NodeRef<'g, W, F>,
    key: &[u8],
    mut depth: usize,
    guard: &'g TreeGuard<'_>,
) {
    loop {
        if n.permutation().size() > 0 {
            n.base.version.unlock();
            return;
        }
        if n.prev.load(Ordering::Acquire, guard).is_none() {
            n.base.version.unlock();
        } else {
            remove_leaf(tree, n, guard);
            collapse_root(tree, root, guard);
        }
        if depth == 0 {
            return;
        }
        match remove_layer(tree, key, depth, root, guard) {
            Some((m, parent_root)) => {
                n = m;
                root = parent_root;
                depth -= 1;
            }
            None => return,
        }
    }
}

/// Unlinks the empty, locked, non-first border node `n` and retires it (steps 1–3 above).
/// Unlocks `n`.
fn remove_leaf<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    n: BorderRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
) {
    debug_assert_eq!(n.permutation().size(), 0);
    debug_assert_eq!(n.base.version.raw() & (DELETED | ISROOT), 0);
    let p = loop {
        let p = n
            .prev
            .load(Ordering::Acquire, guard)
            .expect("a non-first node has a prev");
        p.base.version.lock();
        // `n.prev` is protected by `prev`'s lock: unchanged means `p` is still our prev.
        if n.prev.load(Ordering::Acquire, guard) == Some(p) {
            break p;
        }
        p.base.version.unlock();
    };
    debug_assert_eq!(p.next.load(Ordering::Relaxed, guard), Some(n));
    n.base.version.mark_split();
    n.base.version.mark_deleted();
    forest_core::pause::pause_point("remove:leaf-marked");
    p.base.version.mark_insert();
    let next = n.next.load(Ordering::Relaxed, guard);
    p.next.store(next, Ordering::Release);
    if let Some(next) = next {
        // Its `prev` is protected by `n`'s lock, which we hold.
        next.prev.store(Some(p), Ordering::Release);
    }
    p.base.version.unlock();
    remove_child(tree, n.node(), n.lowkey, guard);
    n.base.version.unlock();
    tree.counters.node_removals.incr();
    // SAFETY: `n` is unlinked from the border list and its parent, and never a layer link (it
    // had a prev); it was marked deleted under its lock, so no writer links it again (writers
    // lock a node and check `DELETED` first). Retired once: by the thread that marked it.
    unsafe { tree.nodes.retire(n.node(), guard) };
}

/// Removes child `c` (locked, marked deleted, whose subtree's lowest key is `lowkey`) from
/// its parent, removing the parent too when it was its only child.
fn remove_child<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    c: NodeRef<'g, W, F>,
    lowkey: u64,
    guard: &'g TreeGuard<'_>,
) {
    let p = locked_parent(c, guard).expect("a removed node is never a layer's root");
    if p.nkeys() == 0 {
        debug_assert_eq!(p.base.version.raw() & ISROOT, 0);
        p.base.version.mark_split();
        p.base.version.mark_deleted();
        remove_child(tree, p.node(), lowkey, guard);
        p.base.version.unlock();
        tree.counters.node_removals.incr();
        // SAFETY: `p` is removed from its parent and its only child is being retired, so no
        // link names it; marked deleted under its lock, so no writer links it again. Retired
        // once: by the thread that marked it.
        unsafe { tree.nodes.retire(p.node(), guard) };
        return;
    }
    p.base.version.mark_insert();
    if let Some(new_low) = p.remove_child(c, guard) {
        redirect(p, lowkey, new_low, guard);
    }
    p.base.version.unlock();
}

/// After the locked node `start` lost its first child, raises the ancestor separator equal to
/// `old` (the removed child's lowkey) to `new`, so those keys route to the left neighbour.
/// Locks ancestors upward hand over hand; leaves `start` locked.
fn redirect<'g, const W: usize, const F: usize>(
    start: InteriorRef<'g, W, F>,
    old: u64,
    new: u64,
    guard: &'g TreeGuard<'_>,
) {
    let mut cur = start;
    loop {
        let a = locked_parent(cur.node(), guard);
        if cur != start {
            // Nothing in `cur` changed.
            cur.base.version.unlock();
        }
        let Some(a) = a else {
            debug_assert!(false, "the leftmost node is never removed");
            return;
        };
        let j = a.position_of(cur.node(), guard);
        if j > 0 {
            debug_assert_eq!(a.keyslice[j - 1].load(Ordering::Relaxed), old);
            a.base.version.mark_insert();
            a.keyslice[j - 1].store(new, Ordering::Release);
            a.base.version.unlock();
            return;
        }
        cur = a;
    }
}

/// Removes the empty layer linked as `link` at `depth` from its parent layer's slot, if it is
/// still empty (its first node is its root, holds nothing, has no sibling). Returns the
/// parent-layer node, locked, with the slot gone, and that layer's link.
fn remove_layer<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    depth: usize,
    link: NodeRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
) -> Option<(BorderRef<'g, W, F>, NodeRef<'g, W, F>)> {
    let prefix = &key[..(depth - 1) * SLICE_BYTES];
    let rest = &key[(depth - 1) * SLICE_BYTES..];
    let slice = slice_of(rest);
    // A layer link names the layer's first border node (crate::layer).
    let crate::node::Kind::Border(t) = link.kind() else {
        panic!("a layer link names a border node");
    };
    if t.permutation().size() != 0 || t.next.load(Ordering::Acquire, guard).is_some() {
        return None;
    }
    let (m, parent_root) = loop {
        let parent_root = layer_root(tree, prefix, guard)?;
        if let Some(m) = locate_locked(tree, parent_root, slice, guard) {
            break (m, parent_root);
        }
    };
    let perm = m.permutation();
    let pos = (0..perm.size()).find(|&i| {
        let s = perm.get(i);
        m.keyslice[s].load(Ordering::Relaxed) == slice
            && m.keylen[s].load(Ordering::Relaxed) == KEYLEN_LAYER
            && m.layer[s].load(Ordering::Relaxed, guard) == Some(t)
    });
    let Some(pos) = pos else {
        m.base.version.unlock();
        return None;
    };
    // Upper layer first, then the layer's root: the one lock order across layers.
    t.base.version.lock();
    let empty = t.base.version.raw() & (ISROOT | DELETED) == ISROOT
        && t.permutation().size() == 0
        && t.next.load(Ordering::Relaxed, guard).is_none();
    if !empty {
        t.base.version.unlock();
        m.base.version.unlock();
        return None;
    }
    t.base.version.mark_split();
    t.base.version.mark_deleted();
    t.base.version.unlock();
    m.base.version.mark_insert();
    m.remove_at(pos, tree.config.permuter, guard);
    tree.counters.layer_removals.incr();
    // SAFETY: the layer's only node is out of the parent slot's permutation (its one link)
    // and marked deleted under its lock, so no writer links it again; a reader that loaded
    // the link before is pinned now and will retry. Retired once: by the thread that marked
    // it, under the parent-layer node's lock.
    unsafe { tree.nodes.retire(t.node(), guard) };
    Some((m, parent_root))
}
