//! Node lifetime (§4.6.5: "removed nodes must not be freed immediately ... we mark them as
//! deleted and reclaim them later"): the node header shared by border and interior nodes,
//! node allocation and reclamation, and the references through which the rest of the crate
//! reaches nodes. This module and [`crate::block`] (value blocks) hold the crate's `unsafe`
//! for memory; the algorithm modules use the safe types below.
//!
//! - [`TreeGuard<'t>`](TreeGuard): an epoch guard pinned for one operation on one tree
//!   (`Masstree::pin`), borrowing that tree for `'t`. Links and blocks are loaded, and nodes
//!   allocated and retired, only through it, so everything it yields is tied to both the pin
//!   and the tree; allocation and retirement check that the guard is their tree's.
//! - [`Ref<'g, N>`](Ref) (aliases [`NodeRef`], [`BorderRef`], [`InteriorRef`]): a node kept
//!   alive by the tree guard borrowed for `'g` (so `'t: 'g`: no `Ref` outlives the guard's
//!   pin or its tree), as crossbeam-epoch's `Shared<'g, T>`, but dereferenced safely (it is
//!   `Deref`), because of the invariants below. Made only by allocation and by loads from a
//!   [`Link`]; `Copy`; compared by address.
//! - [`Link<N>`](Link): a node pointer field (the tree's root, `parent`, interior children,
//!   border `next`/`prev` and layer links). [`Link::load`] takes a `&'g TreeGuard` and returns
//!   an `Option<Ref<'g, N>>`; [`Link::store`] takes a `Ref` (or `None`), so a link only ever
//!   holds null or a node.
//! - [`NodeRef::kind`] tells a border node from an interior node; [`Ref::node`] goes back.
//! - [`NodeTree<W, F>`](NodeTree): a tree's registry and its layer-0 root, the one link
//!   outside a heap node, private to this module: the root is loaded and replaced only under
//!   the tree's own guard (asserted), and dropping it frees the tree. [`Link::null`] takes a
//!   [`Making`], so no other link is made outside a node. A link in a node reachable from
//!   the root holds null or a node not yet retired: links that stop naming a node (a
//!   removed or moved slot, children moved by a split) are cleared (crate::border,
//!   crate::interior); a retired node's links are frozen at its retirement and followed only
//!   by readers pinned before it.
//! - [`Making`]: the proof, made only in this module (`alloc_*`, `NodeTree::new`), that the
//!   links and value slots ([`crate::block::BlockSlot`]) being made belong to a new heap node.
//!
//! The one rule the types do not prove (it would need branded lifetimes): a link or value slot
//! of a node is loaded and stored only under the guard of that node's tree. Every operation
//! pins one guard for one tree and reaches links and slots only from that tree's root
//! (`NodeTree::root`, which checks the guard), so its `Ref`s and blocks are that tree's.
//!
//! Invariants (why dereferencing a `Ref<'g, _>` is sound while its guard is pinned):
//! - Every node is made on the heap by [`NodeRegistry::alloc_border`] / `alloc_interior`
//!   ([`NodeBase`] has a private field, so no other code can make a node, on the stack or
//!   elsewhere). So every `Link` is a field of one tree's heap node or that tree's root.
//! - A link holds null or a node of its own tree (it stores only `Ref`s, which come from that
//!   tree's allocations and loads); a node's kind and shape `(W, F)` are its link's type.
//! - A node is freed only by [`NodeRegistry::retire`] (through crossbeam-epoch, once it is
//!   unreachable from the tree and will not be linked again: its caller's duty, the one
//!   `unsafe` step of the algorithms) or by the private `free_tree` from [`NodeTree`]'s
//!   `Drop` (exclusive access). So a node loaded while a guard is pinned stays valid until that guard unpins.
//! - A `TreeGuard` borrows its tree and a `Ref` never outlives its guard's borrow, so no `Ref`
//!   outlives the pin, the operation or the tree (the borrow checker's proof). A `Ref` of one
//!   tree is never stored in another tree's link: every operation pins one guard for one
//!   tree and reaches links only from that tree's root, and the nodes it allocates and
//!   retires are checked to be its tree's. A scan keeps a node only while its guard is
//!   pinned; across an unpin it keeps a key (crate::scan).
//! - A node is retired only after it is marked `DELETED` (a collapsed root also has its
//!   `ISROOT` bit cleared and its parent pointing at the new root), so a reader pinned before
//!   the unlink that still reaches it learns to retry.
//! - `#[repr(C)]` border and interior nodes start with a [`NodeBase`]; its `ISBORDER` bit, set
//!   here at allocation and never changed afterwards (crate::nodeversion invariants), says
//!   which one a `NodeRef` is. `Ref`s hold raw pointers (the allocation's provenance), so a
//!   `NodeRef` cast back to its kind covers the whole node.
//! - Debug builds poison a node's version word as it is freed, so a reader that reaches a freed
//!   node (a use-after-free) trips an assertion in `stable`/`lock` with good probability; the
//!   memory-tool build poisons the whole node ([`crate::memcheck`]).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;

use crossbeam_epoch::Guard;
use forest_core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::border::Border;
use crate::interior::Interior;
use crate::key::KEYLEN_LAYER;
use crate::memcheck::free_box;
use crate::nodeversion::{NodeVersion, ISBORDER, ISROOT};

/// The first field of every node of a tree of shape `(W, F)` (border slots, interior fanout).
#[derive(Debug)]
#[repr(C)]
pub struct NodeBase<const W: usize, const F: usize> {
    /// The version word (§4.4).
    pub version: NodeVersion,
    /// The parent interior node; null at a layer's root. Protected by the parent's lock.
    /// A collapsed (deleted) root points at the node that replaced it.
    pub parent: Link<NodeBase<W, F>>,
    /// Private: only this module makes nodes (module invariants).
    made_here: (),
}

impl<const W: usize, const F: usize> NodeBase<W, F> {
    fn new(version_bits: u64) -> Self {
        Self {
            version: NodeVersion::new(version_bits),
            parent: Link::null(&Making(())),
            made_here: (),
        }
    }

    /// Whether this is a border node (immutable).
    #[inline]
    pub fn is_border(&self) -> bool {
        self.version.raw() & ISBORDER != 0
    }
}

impl<const W: usize, const F: usize> Drop for NodeBase<W, F> {
    fn drop(&mut self) {
        let () = self.made_here;
        if cfg!(debug_assertions) {
            self.version.poison();
        }
    }
}

/// An epoch guard pinned for one operation on one tree, borrowing the tree for `'t`: the only
/// guard through which links and blocks are loaded and nodes allocated and retired, so every
/// [`Ref`] it yields lives no longer than the guard's borrow, hence no longer than the tree's
/// (module invariants). Made by [`TreeGuard::pin`] (the tree's `pin`).
pub struct TreeGuard<'t> {
    epoch: Guard,
    nodes: &'t NodeRegistry,
}

impl fmt::Debug for TreeGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TreeGuard({:p})", self.nodes)
    }
}

impl<'t> TreeGuard<'t> {
    /// Pins the epoch for an operation on the tree whose registry is `nodes`.
    #[inline]
    fn pin(nodes: &'t NodeRegistry) -> Self {
        Self {
            epoch: crossbeam_epoch::pin(),
            nodes,
        }
    }

    /// The crossbeam guard, for deferring the free of a block this tree unlinked.
    #[inline]
    pub(crate) fn epoch(&self) -> &Guard {
        &self.epoch
    }

    /// Whether this guard was pinned for the tree of `nodes`.
    #[inline]
    fn is_for(&self, nodes: &NodeRegistry) -> bool {
        std::ptr::eq(self.nodes, nodes)
    }
}

/// Proof that a node is being made by [`NodeRegistry::alloc_border`] or `alloc_interior`:
/// only this module can make one (private field), so [`Link`]s and
/// [`crate::block::BlockSlot`]s, which take it, exist only inside heap nodes (crate::block
/// invariants), besides the root in [`NodeTree`].
pub struct Making(());

/// A node of kind `N` kept alive by a [`TreeGuard`] borrowed for `'g` (module invariants).
pub struct Ref<'g, N> {
    ptr: NonNull<N>,
    guard: PhantomData<&'g N>,
}

/// Any node of a tree of shape `(W, F)`.
pub type NodeRef<'g, const W: usize, const F: usize> = Ref<'g, NodeBase<W, F>>;
/// A border node.
pub type BorderRef<'g, const W: usize, const F: usize> = Ref<'g, Border<W, F>>;
/// An interior node.
pub type InteriorRef<'g, const W: usize, const F: usize> = Ref<'g, Interior<W, F>>;

impl<N> Clone for Ref<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for Ref<'_, N> {}

impl<N> Deref for Ref<'_, N> {
    type Target = N;

    #[inline]
    fn deref(&self) -> &N {
        // SAFETY: `ptr` is a live node of kind `N` until the guard borrowed for the `Ref`'s
        // lifetime unpins (module invariants), and nodes are only read through `&`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<N> PartialEq for Ref<'_, N> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}

impl<N> Eq for Ref<'_, N> {}

impl<N> fmt::Debug for Ref<'_, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ref({:p})", self.ptr)
    }
}

impl<N> Ref<'_, N> {
    /// The node's address (for prefetching).
    #[inline]
    pub fn as_ptr(self) -> *const N {
        self.ptr.as_ptr()
    }
}

/// A node seen through its kind.
pub enum Kind<'g, const W: usize, const F: usize> {
    Border(BorderRef<'g, W, F>),
    Interior(InteriorRef<'g, W, F>),
}

impl<'g, const W: usize, const F: usize> NodeRef<'g, W, F> {
    /// The node as a border or an interior node (its `ISBORDER` bit).
    #[inline]
    pub fn kind(self) -> Kind<'g, W, F> {
        if self.is_border() {
            Kind::Border(Ref {
                ptr: self.ptr.cast(),
                guard: PhantomData,
            })
        } else {
            Kind::Interior(Ref {
                ptr: self.ptr.cast(),
                guard: PhantomData,
            })
        }
    }

    /// The node as an interior node; panics on a border node (a broken invariant: the caller
    /// read a link that names interior nodes only).
    #[inline]
    pub fn interior(self) -> InteriorRef<'g, W, F> {
        match self.kind() {
            Kind::Interior(i) => i,
            Kind::Border(_) => panic!("a border node where an interior node must be"),
        }
    }
}

impl<'g, const W: usize, const F: usize> BorderRef<'g, W, F> {
    /// The same node through its header.
    #[inline]
    pub fn node(self) -> NodeRef<'g, W, F> {
        Ref {
            ptr: self.ptr.cast(),
            guard: PhantomData,
        }
    }
}

impl<'g, const W: usize, const F: usize> InteriorRef<'g, W, F> {
    /// The same node through its header.
    #[inline]
    pub fn node(self) -> NodeRef<'g, W, F> {
        Ref {
            ptr: self.ptr.cast(),
            guard: PhantomData,
        }
    }
}

/// A node pointer field: null or a node of kind `N` of this tree (module invariants).
pub struct Link<N> {
    ptr: AtomicPtr<N>,
}

impl<N> fmt::Debug for Link<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Link({:p})", self.ptr.load(Ordering::Relaxed))
    }
}

impl<N> Link<N> {
    /// A null link, for a node being made (`Making`: no link exists outside a heap node but
    /// a tree's root in [`NodeTree`], so every link is reached from a root by loads under
    /// that tree's guard).
    pub fn null(_making: &Making) -> Self {
        Self {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The node linked, kept alive by `guard` (module invariants).
    #[inline]
    pub fn load<'g>(&self, order: Ordering, _guard: &'g TreeGuard<'_>) -> Option<Ref<'g, N>> {
        NonNull::new(self.ptr.load(order)).map(|ptr| Ref {
            ptr,
            guard: PhantomData,
        })
    }

    /// Links `n` (or nothing).
    #[inline]
    pub fn store(&self, n: Option<Ref<'_, N>>, order: Ordering) {
        self.ptr.store(raw(n), order);
    }

    /// Links `new` if the link is `current`; returns whether it did.
    pub fn compare_exchange(
        &self,
        current: Option<Ref<'_, N>>,
        new: Option<Ref<'_, N>>,
        success: Ordering,
        failure: Ordering,
    ) -> bool {
        self.ptr
            .compare_exchange(raw(current), raw(new), success, failure)
            .is_ok()
    }
}

fn raw<N>(n: Option<Ref<'_, N>>) -> *mut N {
    n.map_or(std::ptr::null_mut(), |n| n.ptr.as_ptr())
}

/// Counts the live nodes of one tree and allocates and retires them (made only with its
/// [`NodeTree`]).
#[derive(Debug)]
pub struct NodeRegistry {
    border_count: AtomicU64,
    interior_count: AtomicU64,
}

/// A node pointer handed to the epoch's deferred destructor.
struct Retired<const W: usize, const F: usize>(NonNull<NodeBase<W, F>>);

// SAFETY: a retired node is unreachable from the tree; the destructor that receives it is
// its only owner, whichever thread runs it.
unsafe impl<const W: usize, const F: usize> Send for Retired<W, F> {}

impl<const W: usize, const F: usize> Retired<W, F> {
    /// Frees the node.
    ///
    /// # Safety
    /// As [`free_node`].
    unsafe fn free(self) {
        // SAFETY: the caller's duty.
        unsafe { free_node(self.0) }
    }
}

/// Frees one node (its kind told by `ISBORDER`).
///
/// # Safety
/// `p` came from `alloc_*`, is freed once, and no thread can reach it any more.
unsafe fn free_node<const W: usize, const F: usize>(p: NonNull<NodeBase<W, F>>) {
    // SAFETY: the caller's duty: `p` is live until here; free_box undoes alloc_*'s
    // Box::into_raw of the kind ISBORDER names (module invariants).
    unsafe {
        if p.as_ref().is_border() {
            free_box(p.cast::<Border<W, F>>().as_ptr());
        } else {
            free_box(p.cast::<Interior<W, F>>().as_ptr());
        }
    }
}

/// A new heap node.
fn leak<'g, N>(n: N) -> Ref<'g, N> {
    Ref {
        ptr: NonNull::from(Box::leak(Box::new(n))),
        guard: PhantomData,
    }
}

impl NodeRegistry {
    /// An empty registry (only a [`NodeTree`] has one).
    fn new() -> Self {
        Self {
            border_count: AtomicU64::new(0),
            interior_count: AtomicU64::new(0),
        }
    }

    /// Allocates an empty border node with the version bits `version_bits` (`ISBORDER` is
    /// set here) and `lowkey`. Nobody else can reach it until the caller links it.
    pub fn alloc_border<'g, const W: usize, const F: usize>(
        &self,
        version_bits: u64,
        lowkey: u64,
        guard: &'g TreeGuard<'_>,
    ) -> BorderRef<'g, W, F> {
        assert!(
            guard.is_for(self),
            "a node is made under its own tree's guard"
        );
        self.border_count.fetch_add(1, Ordering::Relaxed);
        let base = NodeBase::new(version_bits | ISBORDER);
        leak(Border::new(base, lowkey, &Making(())))
    }

    /// Allocates an empty interior node with the version bits `version_bits` (`ISBORDER`
    /// cleared here).
    pub fn alloc_interior<'g, const W: usize, const F: usize>(
        &self,
        version_bits: u64,
        guard: &'g TreeGuard<'_>,
    ) -> InteriorRef<'g, W, F> {
        assert!(
            guard.is_for(self),
            "a node is made under its own tree's guard"
        );
        self.interior_count.fetch_add(1, Ordering::Relaxed);
        leak(Interior::new(
            NodeBase::new(version_bits & !ISBORDER),
            &Making(()),
        ))
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
    /// `n` belongs to this registry's tree, is retired once, is no longer reachable from the
    /// tree (no link names it) and will not be linked again (module invariants), so only
    /// threads pinned before this call can hold it.
    pub unsafe fn retire<const W: usize, const F: usize>(
        &self,
        n: NodeRef<'_, W, F>,
        guard: &TreeGuard<'_>,
    ) {
        assert!(
            guard.is_for(self),
            "a node is retired under its own tree's guard"
        );
        debug_assert!(n.version.raw() & crate::nodeversion::DELETED != 0);
        let counter = if n.is_border() {
            &self.border_count
        } else {
            &self.interior_count
        };
        counter.fetch_sub(1, Ordering::Relaxed);
        let r = Retired(n.ptr);
        // SAFETY: the closure owns the unreachable node (the caller's duty) and runs after
        // every guard that could have loaded it is gone (crossbeam-epoch's guarantee).
        unsafe { guard.epoch.defer_unchecked(move || r.free()) };
    }
}

/// A tree's nodes: its registry and its layer-0 root link (the one link not inside a heap
/// node), made together and private to this module, so the root is loaded only under this
/// tree's own guard (checked), and every node reference of the tree comes from loads under
/// that guard, living no longer than its borrow of the tree (module invariants). Dropping it
/// frees the tree.
pub struct NodeTree<const W: usize, const F: usize> {
    registry: NodeRegistry,
    root: Link<NodeBase<W, F>>,
}

impl<const W: usize, const F: usize> fmt::Debug for NodeTree<W, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeTree({:?}, {:?})", self.registry, self.root)
    }
}

impl<const W: usize, const F: usize> std::ops::Deref for NodeTree<W, F> {
    type Target = NodeRegistry;

    /// Allocation, retirement and counts, each checking the guard it is given.
    fn deref(&self) -> &NodeRegistry {
        &self.registry
    }
}

impl<const W: usize, const F: usize> Default for NodeTree<W, F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, const F: usize> NodeTree<W, F> {
    /// A new tree: one empty border node, root of layer 0.
    pub fn new() -> Self {
        let registry = NodeRegistry::new();
        let root = Link::null(&Making(()));
        {
            let guard = TreeGuard::pin(&registry);
            root.store(
                Some(registry.alloc_border::<W, F>(ISROOT, 0, &guard).node()),
                Ordering::Relaxed,
            );
        }
        Self { registry, root }
    }

    /// Pins the epoch for one operation on this tree.
    #[inline]
    pub fn pin(&self) -> TreeGuard<'_> {
        TreeGuard::pin(&self.registry)
    }

    /// The root of layer 0. Panics unless `guard` is this tree's.
    #[inline]
    pub fn root<'g>(&self, guard: &'g TreeGuard<'_>) -> NodeRef<'g, W, F> {
        assert!(
            guard.is_for(&self.registry),
            "a tree's root is loaded under its own tree's guard"
        );
        self.root
            .load(Ordering::Acquire, guard)
            .expect("a tree always has a root")
    }

    /// Replaces the root `old` by `new` (a split's new root, a collapse's only child), under
    /// this tree's `guard`; returns whether it was still `old`.
    pub fn replace_root(
        &self,
        old: NodeRef<'_, W, F>,
        new: NodeRef<'_, W, F>,
        guard: &TreeGuard<'_>,
    ) -> bool {
        assert!(
            guard.is_for(&self.registry),
            "a tree's root is replaced under its own tree's guard"
        );
        self.root
            .compare_exchange(Some(old), Some(new), Ordering::AcqRel, Ordering::Acquire)
    }
}

impl<const W: usize, const F: usize> Drop for NodeTree<W, F> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no operation on the tree runs, and every node reference is
        // bounded by a guard borrowing this tree, so none is held (module invariants).
        unsafe { free_tree(&mut self.root) };
    }
}

/// Frees every node reachable from the tree's `root` link (layer 0): interior children, and
/// the layers linked from live border slots. The root is left null.
///
/// # Safety
/// The tree is being dropped: no operation on it runs and no reference to its nodes or
/// blocks is held anywhere. Called once, by [`NodeTree`]'s `Drop`.
unsafe fn free_tree<const W: usize, const F: usize>(root: &mut Link<NodeBase<W, F>>) {
    // No other thread can reach the tree (above), so the nodes loaded here cannot be
    // retired or freed meanwhile but by this function: loads need no guard.
    let guard = Unguarded;
    let mut stack: Vec<NodeRef<'_, W, F>> = guard.load(root).into_iter().collect();
    root.store(None, Ordering::Relaxed);
    while let Some(n) = stack.pop() {
        match n.kind() {
            Kind::Interior(i) => {
                stack.extend(i.child[..=i.nkeys()].iter().filter_map(|c| guard.load(c)));
            }
            Kind::Border(b) => {
                let perm = b.permutation();
                for k in 0..perm.size() {
                    let s = perm.get(k);
                    if b.keylen[s].load(Ordering::Relaxed) != KEYLEN_LAYER {
                        continue;
                    }
                    // The link is the layer's first border node; free from its root.
                    let Some(mut r) = guard.load(&b.layer[s]).map(|l| l.node()) else {
                        continue;
                    };
                    while r.version.raw() & ISROOT == 0 {
                        r = guard.load(&r.parent).expect("a non-root has a parent");
                    }
                    stack.push(r);
                }
            }
        }
        // SAFETY: `n` came from `alloc_*`; the tree is a tree, so each node is reached
        // once, and it is freed after its children and layers were pushed; nothing else
        // can reach it (the caller's duty). `n` is not used again.
        unsafe { free_node(n.ptr) };
    }
}

/// Loads for [`free_tree`], which has the tree to itself.
struct Unguarded;

impl Unguarded {
    fn load<N>(&self, link: &Link<N>) -> Option<Ref<'_, N>> {
        NonNull::new(link.ptr.load(Ordering::Relaxed)).map(|ptr| Ref {
            ptr,
            guard: PhantomData,
        })
    }
}
