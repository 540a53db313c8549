//! The node header shared by border and interior nodes, node allocation and reclamation
//! (§4.6.5: "removed nodes must not be freed immediately ... we mark them as deleted and
//! reclaim them later"), and the only places that turn node pointers into references.
//!
//! Invariants (the reason every node dereference in this crate is sound):
//! - Every node is allocated by [`NodeRegistry::alloc_border`] / `alloc_interior` and freed
//!   either by [`NodeRegistry::retire`] (through crossbeam-epoch, once it is unreachable from
//!   the tree: unlinked from its parent, the border list, the root pointer and layer slots)
//!   or by [`free_tree`] from the tree's `Drop` (exclusive access).
//! - So a node pointer read from the tree while an epoch guard is pinned stays valid until
//!   that guard unpins. Nothing holds a node pointer across an unpin: scans re-descend by key.
//! - A node is retired only after it is marked `DELETED` (or, for a collapsed root, has its
//!   `ISROOT` bit cleared and its parent pointing at the new root), so a reader pinned before
//!   the unlink that still reaches it learns to retry.
//! - `#[repr(C)]` border and interior nodes start with a [`NodeBase`]; its `ISBORDER` bit,
//!   fixed at creation, says which one a `NodeBase` pointer is.
//! - Debug builds poison a node's version word as it is freed, so a reader that reaches a freed
//!   node (a use-after-free) trips an assertion in `stable`/`lock` with good probability; the
//!   memory-tool build poisons the whole node ([`crate::memcheck`]).

use crossbeam_epoch::Guard;
use forest_core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::border::Border;
use crate::interior::Interior;
use crate::memcheck::free_box;
use crate::nodeversion::{NodeVersion, ISBORDER};

/// The first field of every node.
#[derive(Debug)]
#[repr(C)]
pub struct NodeBase {
    /// The version word (§4.4).
    pub version: NodeVersion,
    /// The parent interior node; null at a layer's root. Protected by the parent's lock.
    /// A collapsed (deleted) root points at the node that replaced it.
    pub parent: AtomicPtr<NodeBase>,
}

impl NodeBase {
    pub(crate) fn new(version_bits: u64) -> Self {
        Self {
            version: NodeVersion::new(version_bits),
            parent: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Whether this is a border node (immutable).
    #[inline]
    pub fn is_border(&self) -> bool {
        self.version.raw() & ISBORDER != 0
    }
}

impl Drop for NodeBase {
    fn drop(&mut self) {
        if cfg!(debug_assertions) {
            self.version.poison();
        }
    }
}

/// A node seen through its kind.
pub enum NodeRef<'t, const W: usize, const F: usize> {
    Border(&'t Border<W>),
    Interior(&'t Interior<F>),
}

/// The node behind `p`.
///
/// # Safety
/// `p` is non-null and was read from a tree that is still borrowed (module invariants).
pub unsafe fn node<'t, const W: usize, const F: usize>(p: *mut NodeBase) -> NodeRef<'t, W, F> {
    // SAFETY: the caller's duty: `p` points to a live node; the repr(C) prefix and the
    // immutable ISBORDER bit make the cast to the right kind sound.
    unsafe {
        if (*p).is_border() {
            NodeRef::Border(&*(p as *const Border<W>))
        } else {
            NodeRef::Interior(&*(p as *const Interior<F>))
        }
    }
}

/// The header behind `p`.
///
/// # Safety
/// As [`node`].
pub unsafe fn base<'t>(p: *mut NodeBase) -> &'t NodeBase {
    // SAFETY: the caller's duty: `p` points to a live node.
    unsafe { &*p }
}

/// The border node behind `p`.
///
/// # Safety
/// As [`node`], and `p` is a border node (a `next`/`prev` link, or checked `ISBORDER`).
pub unsafe fn border<'t, const W: usize>(p: *mut Border<W>) -> &'t Border<W> {
    // SAFETY: the caller's duty: `p` points to a live border node.
    unsafe { &*p }
}

/// The interior node behind `p`.
///
/// # Safety
/// As [`node`], and `p` is an interior node (a `parent` link).
pub unsafe fn interior<'t, const F: usize>(p: *mut Interior<F>) -> &'t Interior<F> {
    // SAFETY: the caller's duty: `p` points to a live interior node.
    unsafe { &*p }
}

/// Counts the live nodes of one tree and allocates and retires them.
#[derive(Debug, Default)]
pub struct NodeRegistry {
    border_count: AtomicU64,
    interior_count: AtomicU64,
}

/// A node pointer handed to the epoch's deferred destructor.
struct Retired(*mut NodeBase);

// SAFETY: a retired node is unreachable from the tree; the destructor that receives it is
// its only owner, whichever thread runs it.
unsafe impl Send for Retired {}

impl Retired {
    /// Frees the node.
    ///
    /// # Safety
    /// `self.0` came from `alloc_*` and no thread can reach it any more.
    unsafe fn free<const W: usize, const F: usize>(self) {
        // SAFETY: the caller's duty; ISBORDER tells the allocation's type.
        unsafe { free_node::<W, F>(self.0) }
    }
}

/// Frees one node (its kind told by `ISBORDER`).
///
/// # Safety
/// `p` came from `alloc_*`, is freed once, and no thread can reach it any more.
unsafe fn free_node<const W: usize, const F: usize>(p: *mut NodeBase) {
    // SAFETY: the caller's duty; free_box undoes alloc_*'s Box::into_raw of that kind.
    unsafe {
        if (*p).is_border() {
            free_box(p.cast::<Border<W>>());
        } else {
            free_box(p.cast::<Interior<F>>());
        }
    }
}

impl NodeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allocates a border node.
    pub fn alloc_border<const W: usize>(&self, b: Border<W>) -> *mut Border<W> {
        self.border_count.fetch_add(1, Ordering::Relaxed);
        Box::into_raw(Box::new(b))
    }

    /// Allocates an interior node.
    pub fn alloc_interior<const F: usize>(&self, n: Interior<F>) -> *mut Interior<F> {
        self.interior_count.fetch_add(1, Ordering::Relaxed);
        Box::into_raw(Box::new(n))
    }

    /// Live border and interior nodes.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.border_count.load(Ordering::Relaxed),
            self.interior_count.load(Ordering::Relaxed),
        )
    }

    /// Hands an unlinked node to the epoch: freed once every thread pinned now has unpinned.
    ///
    /// # Safety
    /// `p` came from this tree's `alloc_*`, is retired once, and is no longer reachable from
    /// the tree (module invariants), so only threads pinned before this call can hold it.
    pub unsafe fn retire<const W: usize, const F: usize>(&self, p: *mut NodeBase, guard: &Guard) {
        // SAFETY: `p` is live until the deferred call (caller's duty).
        let counter = if unsafe { base(p) }.is_border() {
            &self.border_count
        } else {
            &self.interior_count
        };
        counter.fetch_sub(1, Ordering::Relaxed);
        let r = Retired(p);
        // SAFETY: the closure owns the unreachable node and runs after every guard that could
        // have loaded it is gone (crossbeam-epoch's guarantee).
        unsafe { guard.defer_unchecked(move || r.free::<W, F>()) };
    }
}

/// Frees every node reachable from `root` (a layer-0 root): interior children, and the layers
/// linked from live border slots. Needs exclusive access to the tree (its `Drop`).
///
/// # Safety
/// No other thread can reach the tree; `root` and everything reachable from it are live.
pub unsafe fn free_tree<const W: usize, const F: usize>(root: *mut NodeBase) {
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        // SAFETY: every pointer pushed is a live node reachable only from the tree (caller's
        // duty); each is reached once (a tree), pushed before its owner is freed.
        unsafe {
            match node::<W, F>(p) {
                NodeRef::Interior(i) => {
                    for c in &i.child[..=i.nkeys()] {
                        stack.push(c.load(Ordering::Relaxed));
                    }
                }
                NodeRef::Border(b) => {
                    let perm = b.permutation();
                    for k in 0..perm.size() {
                        let s = perm.get(k);
                        if b.keylen[s].load(Ordering::Relaxed) == crate::key::KEYLEN_LAYER {
                            // The link is the layer's first border node; free from its root.
                            let mut r = b.layer[s].load(Ordering::Relaxed);
                            while base(r).version.raw() & crate::nodeversion::ISROOT == 0 {
                                r = base(r).parent.load(Ordering::Relaxed).cast();
                            }
                            stack.push(r);
                        }
                    }
                }
            }
            free_node::<W, F>(p);
        }
    }
}
