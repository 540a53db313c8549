//! Layers (§4.1, §4.6.3) and finding the border node for a slice within one layer (Fig. 6).
//!
//! A layer is a B+tree reached from a parent-layer slot whose `keylen` is `KEYLEN_LAYER` (or,
//! for layer 0, from the tree's root pointer). Layer links are not updated when a layer's
//! root splits: readers and writers climb `parent` links from the stale root to the current
//! one (Fig. 6's first lines), which is what the paper's lazy root update amounts to. A
//! layer's link names its first border node, which is never removed while the layer lives.
//!
//! Invariants:
//! - A node whose `ISROOT` bit is clear has a non-null parent (set before the bit is cleared).
//! - A new layer is installed under the parent-layer node's lock with the node marked
//!   inserting and the slot passing through `KEYLEN_UNSTABLE`, so a concurrent get sees the
//!   old key or the new layer, never neither.
//! - A layer is removed only when empty (its first border node is its root and holds no key),
//!   under the parent-layer node's lock, then the layer root's lock (upper layer first); the
//!   root is marked deleted, so a writer that followed the old link starts over (§4.6.5).
//! - A root collapse locks the only child, then the root; the old root is marked deleted
//!   and non-root and its parent pointer names the new root, so stale climbers go on.
//!
//! Nodes are reached through [`crate::node`]'s references; the one `unsafe` step is retiring
//! a collapsed root (its `// SAFETY:` comment says why it is unreachable).

use crate::node::TreeGuard;
use forest_core::sync::atomic::Ordering;

use crate::key::{slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, KEYLEN_UNSTABLE, SLICE_BYTES};
use crate::node::{BorderRef, Kind, NodeRef};
use crate::nodeversion::{DELETED, ISROOT, VSPLIT_MASK};
use crate::permuter::Permuter;
use crate::Masstree;

/// Climbs from a possibly stale root to its layer's current root (Fig. 6's first lines);
/// returns it with a stable version.
#[inline]
pub(crate) fn climb<'g, const W: usize, const F: usize>(
    mut n: NodeRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
) -> (NodeRef<'g, W, F>, u64) {
    loop {
        let v = n.version.stable();
        if v & ISROOT != 0 {
            return (n, v);
        }
        if let Some(p) = n.parent.load(Ordering::Acquire, guard) {
            n = p;
        }
        // A null parent on a non-root: a root collapse is making `n` the root; re-read it.
    }
}

/// `findborder` (Fig. 6): the border node responsible for `slice` in the layer reached from
/// `root` (possibly stale), with a stable version snapshot of it. The caller holds an epoch
/// guard. The node returned may be marked deleted (then the caller retries from the top).
///
/// Postcondition: `slice >= lowkey` of the node returned. A descent can reach a node whose
/// lowkey is above the slice only while a removal (§4.6.5) has shifted an interior node's
/// first child out and not yet redirected the separator above it; it then starts over.
pub fn find_border<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    root: NodeRef<'g, W, F>,
    slice: u64,
    guard: &'g TreeGuard<'_>,
) -> (BorderRef<'g, W, F>, u64) {
    'retry: loop {
        let (mut n, mut v) = climb(root, guard);
        loop {
            let inner = match n.kind() {
                Kind::Border(b) => {
                    // A deleted border node goes back to the caller, who starts over from
                    // the top: it may be a removed layer's root.
                    if slice < b.lowkey && v & DELETED == 0 {
                        tree.counters.restarts.incr();
                        continue 'retry;
                    }
                    return (b, v);
                }
                Kind::Interior(i) => i,
            };
            if v & DELETED != 0 {
                // An emptied interior node: the node now responsible is reached from the
                // layer's root.
                tree.counters.restarts.incr();
                continue 'retry;
            }
            let child = inner.child_for(slice, tree.config.search, guard);
            if let Some(child) = child {
                if tree.config.prefetch {
                    crate::prefetch::node(child.as_ptr(), Masstree::<W, F>::PREFETCH_LINES);
                }
                let cv = child.version.stable();
                if !inner.base.version.has_changed(v) {
                    // Hand-over-hand validation: the child was ours while `inner` was unchanged.
                    n = child;
                    v = cv;
                    continue;
                }
            }
            let v2 = inner.base.version.stable();
            if (v2 ^ v) & (VSPLIT_MASK | DELETED) != 0 {
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
/// splits that happened since the search (lowkeys never change, §4.6.4). `None` when it met a
/// deleted node: the caller starts over from the tree's root (the layer may be gone).
pub fn locate_locked<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    root: NodeRef<'g, W, F>,
    slice: u64,
    guard: &'g TreeGuard<'_>,
) -> Option<BorderRef<'g, W, F>> {
    let (n, v) = find_border(tree, root, slice, guard);
    lock_border(tree, n, v, slice, guard)
}

/// Locks `n`, found responsible for `slice` at version `v` by an optimistic descent, and
/// walks right past splits since then, as [`locate_locked`] does. A wait for another
/// writer's lock is counted (`lock_waits`: a relaxed add to a per-thread shard).
pub fn lock_border<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    mut n: BorderRef<'g, W, F>,
    v: u64,
    slice: u64,
    guard: &'g TreeGuard<'_>,
) -> Option<BorderRef<'g, W, F>> {
    let locked = match n.base.version.try_lock() {
        Some(locked) => locked,
        None => {
            tree.counters.lock_waits.incr();
            n.base.version.lock()
        }
    };
    if locked & DELETED == 0 && (locked ^ v) & VSPLIT_MASK == 0 {
        // No split since the descent's snapshot, when `n` was responsible for `slice`: only a
        // split moves keys out of a node (a removal only widens its left neighbour's range),
        // so it still is, and the walk right (a miss on `next`'s lowkey) is not needed.
        return Some(n);
    }
    loop {
        if n.base.version.raw() & DELETED != 0 {
            n.base.version.unlock();
            tree.counters.restarts.incr();
            return None;
        }
        let Some(nb) = n.next.load(Ordering::Acquire, guard) else {
            return Some(n);
        };
        if slice < nb.lowkey {
            return Some(n);
        }
        n.base.version.unlock();
        nb.base.version.lock();
        n = nb;
    }
}

/// The root link of the layer holding keys that start with `prefix` (a multiple of 8 bytes),
/// or `None` if no such layer exists now. Optimistic, like a get.
pub fn layer_root<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    prefix: &[u8],
    guard: &'g TreeGuard<'_>,
) -> Option<NodeRef<'g, W, F>> {
    debug_assert_eq!(prefix.len() % SLICE_BYTES, 0);
    'top: loop {
        let mut root = tree.root(guard);
        for chunk in prefix.chunks(SLICE_BYTES) {
            let slice = slice_of(chunk);
            let (mut n, mut v) = find_border(tree, root, slice, guard);
            root = loop {
                if v & DELETED != 0 {
                    continue 'top;
                }
                let link = n.layer_link(slice, guard);
                if n.base.version.has_changed(v) {
                    (n, v) = walk_right(n, slice, guard);
                    continue;
                }
                match link {
                    Some(Some(p)) => break p.node(),
                    // Validated: a listed layer slot has its link.
                    Some(None) => continue 'top,
                    None => return None,
                }
            };
        }
        return Some(root);
    }
}

/// After a failed validation of `n` (Fig. 7): a fresh stable version, walking right along
/// `next` while `slice` belongs to a sibling that a split created.
pub fn walk_right<'g, const W: usize, const F: usize>(
    mut n: BorderRef<'g, W, F>,
    slice: u64,
    guard: &'g TreeGuard<'_>,
) -> (BorderRef<'g, W, F>, u64) {
    let mut v = n.base.version.stable();
    let mut next = n.next.load(Ordering::Acquire, guard);
    while v & DELETED == 0 {
        let Some(nb) = next else {
            break;
        };
        if slice < nb.lowkey {
            break;
        }
        n = nb;
        v = n.base.version.stable();
        next = n.next.load(Ordering::Acquire, guard);
    }
    (n, v)
}

/// Collapses the layer's root while it is an interior node with one child (§4.6.5: removes
/// leave "trivial chains"); `hint` is any node on the layer's leftmost path (its link).
/// Locks child, then parent, as splits do.
pub fn collapse_root<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    hint: NodeRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
) {
    loop {
        let (r, _) = climb(hint, guard);
        let ri = match r.kind() {
            Kind::Interior(i) if i.nkeys() == 0 => i,
            _ => return,
        };
        let Some(c) = ri.child[0].load(Ordering::Acquire, guard) else {
            return;
        };
        if c.version.lock() & DELETED != 0 {
            // Removed, or a root that collapsed in turn since we read it: `r` changed too.
            c.version.unlock();
            continue;
        }
        let p = crate::split::locked_parent(c, guard);
        let ok = p == Some(ri)
            && ri.base.version.raw() & (ISROOT | DELETED) == ISROOT
            && ri.nkeys() == 0
            && ri.child[0].load(Ordering::Relaxed, guard) == Some(c);
        if !ok {
            if let Some(p) = p {
                p.base.version.unlock();
            }
            c.version.unlock();
            continue;
        }
        ri.base.version.mark_split();
        c.version.mark_root();
        // A reader holding the old root climbs from it to `c`.
        ri.base.parent.store(Some(c), Ordering::Release);
        ri.base.version.clear_root();
        ri.base.version.mark_deleted();
        c.parent.store(None, Ordering::Release);
        tree.nodes.replace_root(r, c, guard);
        ri.base.version.unlock();
        c.version.unlock();
        tree.counters.collapses.incr();
        // SAFETY: `r` is off every path: no child's parent, not the tree's root, never a
        // layer link (links name a layer's first border node); marked non-root and deleted
        // under its lock, so no writer links it again (they lock a node and check `DELETED`
        // before linking it). Retired once: only the thread that marked it deleted gets here.
        unsafe { tree.nodes.retire(r, guard) };
    }
}

/// Replaces the long key in slot `s` of the locked node `n` by a new layer holding it
/// (§4.6.3) and returns the new layer's root. The caller continues its insert there.
pub fn make_new_layer<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    n: BorderRef<'g, W, F>,
    s: usize,
    guard: &'g TreeGuard<'_>,
) -> NodeRef<'g, W, F> {
    debug_assert_eq!(n.keylen[s].load(Ordering::Relaxed), KEYLEN_SUFFIX);
    tree.counters.layers.incr();
    let (old_rest, value) = n.value[s]
        .load(Ordering::Relaxed, guard)
        .map(crate::block::entry)
        .expect("a listed KEYLEN_SUFFIX slot has its block");
    // Not reachable by others until linked below.
    let twig = tree.nodes.alloc_border::<W, F>(ISROOT, 0, guard);
    twig.keyslice[0].store(slice_of(old_rest), Ordering::Relaxed);
    let kl = if old_rest.len() <= SLICE_BYTES {
        old_rest.len() as u8
    } else {
        KEYLEN_SUFFIX
    };
    twig.keylen[0].store(kl, Ordering::Relaxed);
    // The twig's block holds the shorter suffix: a new block, the old one retired below.
    let moved = crate::block::new_value(
        crate::border::suffix_of(old_rest),
        value,
        tree.config.suffix,
    );
    twig.value[0].replace(Some(moved), Ordering::Relaxed, guard);
    twig.permutation
        .store(Permuter::<W>::from_sorted(&[0]).value(), Ordering::Relaxed);
    n.base.version.mark_insert();
    // A reader now sees the long key without its block (unstable) or, after validation
    // fails on the inserting mark, the new layer. The old block is retired: `old_rest` and
    // `value` stay readable while `guard` is pinned.
    n.value[s].replace(None, Ordering::Release, guard);
    n.keylen[s].store(KEYLEN_UNSTABLE, Ordering::Release);
    forest_core::pause::pause_point("layer:unstable");
    n.layer[s].store(Some(twig), Ordering::Release);
    n.keylen[s].store(KEYLEN_LAYER, Ordering::Release);
    twig.node()
}

/// A new layer for the key bytes `rest` (past the slice of the slot that will link to it) and
/// `value`, for a tree without suffix storage ([`crate::config::SuffixStorage::Layers`]): a
/// chain of one-slot layers, one per further slice, whose last holds the key's final 0..=8
/// bytes and the value. Returns the first layer's border node; nothing is visible to others
/// until the caller links it (one slot insert, §4.6.2).
pub fn new_layer_chain<'g, const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    rest: &[u8],
    value: crate::block::Value<'_>,
    guard: &'g TreeGuard<'_>,
) -> BorderRef<'g, W, F> {
    let slices = rest.len().saturating_sub(1) / SLICE_BYTES;
    let tail = &rest[slices * SLICE_BYTES..];
    debug_assert!(tail.len() <= SLICE_BYTES);
    let leaf = tree.nodes.alloc_border::<W, F>(ISROOT, 0, guard);
    leaf.keyslice[0].store(slice_of(tail), Ordering::Relaxed);
    leaf.keylen[0].store(tail.len() as u8, Ordering::Relaxed);
    let block = crate::block::new_value(&[], value, tree.config.suffix);
    leaf.value[0].replace(Some(block), Ordering::Relaxed, guard);
    leaf.permutation
        .store(Permuter::<W>::identity(1).value(), Ordering::Relaxed);
    let mut link = leaf;
    tree.counters.layers.incr();
    for chunk in rest[..slices * SLICE_BYTES].rchunks(SLICE_BYTES) {
        let twig = tree.nodes.alloc_border::<W, F>(ISROOT, 0, guard);
        twig.keyslice[0].store(slice_of(chunk), Ordering::Relaxed);
        twig.keylen[0].store(KEYLEN_LAYER, Ordering::Relaxed);
        twig.layer[0].store(Some(link), Ordering::Relaxed);
        twig.permutation
            .store(Permuter::<W>::identity(1).value(), Ordering::Relaxed);
        link = twig;
        tree.counters.layers.incr();
    }
    link
}
