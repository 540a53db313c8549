//! Nodes, the tree holder and their latch guards (thesis §2.1, Listings 2.1 and 2.2; latches
//! of §4.2). This is the crate's only `unsafe` module: every other module reaches node contents
//! through the guards defined here.
//!
//! A node is the thesis' `Node` and `Leaf` in one struct: a latch, its level (0 for a leaf,
//! fixed at birth) and a body in an `UnsafeCell`. The body holds per slot the key's 8-byte
//! prefix (dense array, compared first, see [`crate::search`]), the full key, and either the
//! values (leaf) or the children (inner node, one more child than keys); keys and values are
//! inline in their slot when short ([`crate::bytes`]). Vectors are allocated
//! with room for one slot over the node's capacity: the thesis' *overflow slot* (§2.4,
//! Listing 2.9), so an insert first goes in and a split follows on its own.
//!
//! [`BTree`] is the thesis' `BTree` struct (Listing 2.2): a latch guarding the root pointer and
//! the height.
//!
//! # Invariants
//! 1. A node is reachable only from its parent's `children` (or the holder's root pointer).
//! 2. The body is read only under the node's latch (shared or exclusive) and written only under
//!    its exclusive latch. Guards are the only way to the body, and a guard holds the latch
//!    for its whole life.
//! 3. A child's latch is taken only while its parent's latch is held (interlocking, §4.2.1); the
//!    root's only while the holder's latch is held. So a thread that holds or waits for a
//!    node's latch got its pointer from a parent it still held at that moment.
//! 4. A node is freed only by a thread holding its exclusive latch *and* its parent's (or the
//!    holder's) exclusive latch, after unlinking it from that parent. By 3, any other thread
//!    touching the node's latch must hold or have held the parent's latch while taking it; the
//!    parent is held exclusively, so no thread is on its way in, and the node's own exclusive
//!    latch means no thread is inside. After the unlink no thread can find it again. Hence no
//!    thread can hold, wait on, or later reach a freed node, and no deferred reclamation
//!    (epochs) is needed: the latches already exclude every reader at the time of the free.
//! 5. A new node is filled through [`OwnedNode`] (owned, unshared) and published by linking it
//!    into an exclusively latched parent or holder; the latch release publishes its contents.
//! 6. Revisits (a scan coming back to the leaf it copied from, or to that leaf's parent to
//!    step to the next leaf, [`ReadGuard::revisit`]) are the one exception to 3: the scan
//!    holds no latch between its steps, only the node's pointer and the [`Revisits`] stamp it
//!    read under the node's latch. A parent's children and separators change only with a
//!    leaf's range (a leaf split, borrow or merge) or a free, all of which bump the stamp. Every change of a leaf's key
//!    range (split, borrow, merge) and every free bumps the stamp while the changed nodes are
//!    held exclusively; a free then drains: it waits until its read-modify-write of each
//!    stripe of in-flight revisits reads zero. A revisit announces itself by a
//!    read-modify-write of its stripe, then checks the stamp, and only then touches the
//!    leaf's latch, without waiting. Both sides use read-modify-writes (acquire and release)
//!    on the stripe, which are ordered: if the drain's comes first, the revisit's
//!    synchronizes with it and sees the bumped stamp, so it stays away; if the revisit's
//!    comes first, the drain waits for its release and all its accesses happen before the
//!    free. A revisit that gets the latch re-checks the stamp under it, so a range change
//!    since the scan's step is seen (see `revisit`).
//!
//! Bodies and the root fields sit in `forest_core::sync::cell::UnsafeCell`: `std`'s normally,
//! loom's under `--cfg loom`, where every guard's `body` / `body_mut` call is an access loom
//! checks against the latches' ordering (tests/loom_tree.rs).

use std::ptr::NonNull;

use std::cell::Cell;

use forest_core::stats::Counter;
use forest_core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use forest_core::sync::cell::UnsafeCell;
use forest_core::sync::spin_loop;

use crate::bytes::{Key, Value};
use crate::latch::Latch;

/// The contents of a node, guarded by its latch. `repr(C)`: the fields a descent reads
/// (prefixes, children) come first, so with the latch they share the node's first cache line.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct NodeBody {
    /// `prefixes[i]` is [`crate::search::prefix_of`] of `keys[i]`.
    pub(crate) prefixes: Vec<u64>,
    /// Inner nodes: `keys.len() + 1` children. Empty in leaves.
    pub(crate) children: Vec<NodePtr>,
    /// Sorted, strictly increasing. Leaf: the records' keys. Inner: separators.
    pub(crate) keys: Vec<Key>,
    /// Leaves: one value per key. Empty in inner nodes.
    pub(crate) values: Vec<Value>,
}

impl NodeBody {
    /// Keys (leaf) or separators (inner node) held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Heap bytes of this body (vectors' capacities and boxed keys and values), for stats.
    pub(crate) fn heap_bytes(&self) -> u64 {
        let vectors = self.prefixes.capacity() * size_of::<u64>()
            + self.keys.capacity() * size_of::<Key>()
            + self.children.capacity() * size_of::<NodePtr>()
            + self.values.capacity() * size_of::<Value>();
        let keys: usize = self.keys.iter().map(Key::heap_bytes).sum();
        let values: usize = self.values.iter().map(Value::heap_bytes).sum();
        (vectors + keys + values) as u64
    }
}

/// Cache line size assumed by [`prefetch`].
const CACHE_LINE_BYTES: usize = 64;

/// Asks the CPU to load all cache lines of `slots` at once, so that a binary search over a
/// node's prefix array waits for one memory round trip instead of one per probe.
#[inline]
pub(crate) fn prefetch<T>(slots: &[T]) {
    prefetch_bytes(slots.as_ptr().cast(), size_of_val(slots));
}

/// Prefetches the cache lines of `bytes` bytes from `start`. Never reads: any address is fine.
#[inline]
fn prefetch_bytes(start: *const i8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut offset = 0;
        while offset < bytes {
            // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is a hint that never
            // faults nor reads or changes memory, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)) };
            offset += CACHE_LINE_BYTES;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// Bytes of a node's own struct, for stats.
pub(crate) const NODE_BYTES: usize = size_of::<Node>();

/// A node: latch, level, body. Cache-line aligned so that the latch, the level and the
/// prefix and child vectors' headers sit in one line: an inner level of a descent then costs
/// one miss for the node plus one round of (prefetched) misses for its arrays.
#[repr(C, align(64))]
pub(crate) struct Node {
    latch: Latch,
    /// 0 for a leaf; a child's level is its parent's minus one. Never changes.
    level: u32,
    body: UnsafeCell<NodeBody>,
}

// SAFETY: the body is only reached through guards that hold the node's latch (invariant 2),
// which serializes writers against everyone; the rest is immutable or atomic.
unsafe impl Sync for Node {}
// SAFETY: a node owns its body; moving it between threads is moving plain data.
unsafe impl Send for Node {}

/// The address of a node, copied around as a child pointer. Dereferenced only in this module.
///
/// It also carries a hint: the address of the node's prefix array. A node's vectors are
/// allocated with their full capacity at birth and never grow past it, so the array stays put
/// for the node's life; a descent prefetches it together with the node's header as soon as it
/// reads the child pointer, so the two misses overlap (the hint is only ever prefetched, never
/// read, so even a stale one would be harmless).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodePtr {
    node: NonNull<Node>,
    prefixes: *const u64,
}

impl PartialEq for NodePtr {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node
    }
}

impl Eq for NodePtr {}

impl NodePtr {
    /// The node's identity, for the multi-pass path memory (compared, never dereferenced).
    #[inline]
    pub(crate) fn id(self) -> usize {
        self.node.as_ptr() as usize
    }

    /// Prefetches the node's header and its first `prefix_count` prefixes.
    #[inline]
    pub(crate) fn prefetch(self, prefix_count: usize) {
        prefetch_bytes(self.node.as_ptr().cast(), size_of::<Node>());
        prefetch_bytes(self.prefixes.cast(), prefix_count * size_of::<u64>());
    }

    /// # Safety
    /// The node must be alive for `'a` (invariants 3 and 4: a latch on it or its parent is
    /// held for `'a`).
    #[inline]
    unsafe fn node<'a>(self) -> &'a Node {
        // SAFETY: the caller guarantees the node is alive for 'a; nodes are only mutated
        // through the UnsafeCell (`forest_core::sync::cell`, loom's under `--cfg loom`).
        unsafe { self.node.as_ref() }
    }
}

/// A node not yet linked into the tree: owned, so filled without latches.
pub(crate) struct OwnedNode(Box<Node>);

impl OwnedNode {
    /// A new empty node at `level`, with room for `order` keys (capacity plus the overflow
    /// slot) and, if inner, `order + 1` children.
    pub(crate) fn new(level: u32, order: usize) -> Self {
        let body = NodeBody {
            prefixes: Vec::with_capacity(order),
            keys: Vec::with_capacity(order),
            children: if level > 0 {
                Vec::with_capacity(order + 1)
            } else {
                Vec::new()
            },
            values: if level == 0 {
                Vec::with_capacity(order)
            } else {
                Vec::new()
            },
        };
        Self(Box::new(Node {
            latch: Latch::new(),
            level,
            body: UnsafeCell::new(body),
        }))
    }

    pub(crate) fn body_mut(&mut self) -> &mut NodeBody {
        // SAFETY: the node is owned and not yet shared (no other thread can reach it), and
        // `&mut self` makes this the only borrow.
        self.0.body.with_mut(|p| unsafe { &mut *p })
    }

    /// Gives up ownership; the caller links the pointer into an exclusively latched parent or
    /// holder (invariant 5).
    pub(crate) fn into_ptr(mut self) -> NodePtr {
        let prefixes = self.body_mut().prefixes.as_ptr();
        NodePtr {
            node: NonNull::from(Box::leak(self.0)),
            prefixes,
        }
    }
}

/// What every guard offers: the body under the latch, and latching a child while held.
pub(crate) trait Latched {
    /// The latched node's pointer.
    fn ptr(&self) -> NodePtr;

    /// The body, readable while the guard lives.
    fn body(&self) -> &NodeBody;

    /// The node's level (0 = leaf).
    #[inline]
    fn level(&self) -> u32 {
        // SAFETY: the guard holds the node's latch, so the node is alive (invariant 4).
        unsafe { self.ptr().node() }.level
    }

    /// The node's identity.
    #[inline]
    fn id(&self) -> usize {
        self.ptr().id()
    }

    /// Prefetches child `i`'s header and first `prefix_count` prefixes (see [`NodePtr`]).
    #[inline]
    fn prefetch_child(&self, i: usize, prefix_count: usize) {
        self.body().children[i].prefetch(prefix_count);
    }

    /// Takes child `i`'s latch in shared mode while this node's latch is held (§4.2.1,
    /// Listing 4.2). The caller may drop `self` afterwards.
    #[inline]
    fn read_child(&self, i: usize, waits: &Counter) -> ReadGuard {
        let child = self.body().children[i];
        // SAFETY: `child` was read under this node's latch, which is still held: the child
        // cannot be freed before we hold its latch (invariant 4), and once held, not before
        // the returned guard releases it.
        unsafe { ReadGuard::lock(child, waits) }
    }

    /// Takes child `i`'s latch in exclusive mode while this node's latch is held.
    #[inline]
    fn write_child(&self, i: usize, waits: &Counter) -> WriteGuard {
        let child = self.body().children[i];
        // SAFETY: as in `read_child`.
        unsafe { WriteGuard::lock(child, waits) }
    }
}

/// A shared hold on a node's latch.
#[derive(Debug)]
pub(crate) struct ReadGuard {
    node: NodePtr,
}

impl ReadGuard {
    /// # Safety
    /// `node` must stay alive until the guard has taken its latch (the caller holds a latch
    /// on its parent or the holder, invariant 3).
    #[inline]
    unsafe fn lock(node: NodePtr, waits: &Counter) -> Self {
        // SAFETY: the caller keeps the node alive while we take its latch.
        if unsafe { node.node() }.latch.read_lock() {
            waits.incr();
        }
        Self { node }
    }
}

impl ReadGuard {
    /// Takes `node`'s latch again (a leaf a scan copied from, or that leaf's parent) for a scan
    /// that held it under stamp `stamp` ([`Revisits::stamp`], read while holding this latch),
    /// if no leaf changed its key range
    /// and no node was freed since, and no writer has or wants the latch; never waits.
    /// `None` sends the scan down from the root instead. Invariant 6.
    pub(crate) fn revisit(node: NodePtr, stamp: u64, revisits: &Revisits) -> Option<Self> {
        let active = &revisits.active[stripe()].count;
        active.fetch_add(1, Ordering::AcqRel);
        let guard = if revisits.stamp.count.load(Ordering::Acquire) == stamp {
            // SAFETY: invariant 6: the stamp is unchanged after we announced ourselves, so no
            // free's drain came before our announcement: a free of this node waits for our
            // `fetch_sub` below before freeing; the node is alive until then.
            let latch = &unsafe { node.node() }.latch;
            latch.try_read_lock().then(|| Self { node })
        } else {
            None
        };
        // Release: our accesses to the node happen before the free whose drain reads this.
        active.fetch_sub(1, Ordering::Release);
        let guard = guard?;
        // A range change since the scan's step bumped the stamp under this latch held
        // exclusively, whose release our Acquire took: it is seen here. Changes after this
        // point wait for our latch.
        (revisits.stamp.count.load(Ordering::Acquire) == stamp).then_some(guard)
    }
}

impl Latched for ReadGuard {
    #[inline]
    fn ptr(&self) -> NodePtr {
        self.node
    }

    #[inline]
    fn body(&self) -> &NodeBody {
        // SAFETY: we hold the shared latch: the node is alive (invariant 4).
        let node = unsafe { self.node.node() };
        // SAFETY: shared latch held: no writer is inside (invariant 2).
        node.body.with(|p| unsafe { &*p })
    }
}

impl Drop for ReadGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we still hold the latch, so the node is alive.
        unsafe { self.node.node() }.latch.read_unlock();
    }
}

/// An exclusive hold on a node's latch.
#[derive(Debug)]
pub(crate) struct WriteGuard {
    node: NodePtr,
}

impl WriteGuard {
    /// # Safety
    /// As [`ReadGuard::lock`].
    #[inline]
    unsafe fn lock(node: NodePtr, waits: &Counter) -> Self {
        // SAFETY: the caller keeps the node alive while we take its latch.
        if unsafe { node.node() }.latch.write_lock() {
            waits.incr();
        }
        Self { node }
    }

    /// The body, writable while the guard lives.
    #[inline]
    pub(crate) fn body_mut(&mut self) -> &mut NodeBody {
        // SAFETY: we hold the exclusive latch: the node is alive (invariant 4).
        let node = unsafe { self.node.node() };
        // SAFETY: exclusive latch held: nobody else reads or writes the body (invariant 2),
        // and `&mut self` makes this the only borrow through this guard.
        node.body.with_mut(|p| unsafe { &mut *p })
    }

    /// Frees this node, which the caller has unlinked from `parent` (invariant 4: we hold this
    /// node's and its parent's exclusive latches).
    pub(crate) fn free(self, parent: &WriteGuard, revisits: &Revisits) {
        debug_assert!(
            !parent.body().children.contains(&self.node),
            "freeing a node still linked from its parent"
        );
        self.free_unlinked(revisits);
    }

    /// Frees this node, the former root, which the caller has replaced in `holder`.
    pub(crate) fn free_root(self, holder: &HolderWrite<'_>) {
        debug_assert!(holder.root() != self.node, "freeing the linked root");
        self.free_unlinked(&holder.tree.revisits);
    }

    fn free_unlinked(self, revisits: &Revisits) {
        // Invariant 6: no revisit can reach the node once this returns.
        revisits.bump();
        revisits.drain();
        let node = self.node;
        // No unlock: nobody can be waiting on this latch (invariant 4), and the memory goes.
        std::mem::forget(self);
        // SAFETY: invariant 4 holds (see callers): no other thread holds, waits on or can
        // reach the node, and it was allocated by `OwnedNode::new` as a Box.
        drop(unsafe { Box::from_raw(node.node.as_ptr()) });
    }
}

impl Latched for WriteGuard {
    #[inline]
    fn ptr(&self) -> NodePtr {
        self.node
    }

    #[inline]
    fn body(&self) -> &NodeBody {
        // SAFETY: we hold the exclusive latch: the node is alive (invariant 4).
        let node = unsafe { self.node.node() };
        // SAFETY: exclusive latch held; shared borrows through `&self` cannot overlap
        // `body_mut`'s `&mut self` borrow.
        node.body.with(|p| unsafe { &*p })
    }
}

impl Drop for WriteGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we still hold the latch, so the node is alive.
        unsafe { self.node.node() }.latch.write_unlock();
    }
}

/// Either kind of hold, for descents that choose per level.
#[derive(Debug)]
pub(crate) enum Guard {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Latched for Guard {
    #[inline]
    fn ptr(&self) -> NodePtr {
        match self {
            Guard::Read(g) => g.ptr(),
            Guard::Write(g) => g.ptr(),
        }
    }

    #[inline]
    fn body(&self) -> &NodeBody {
        match self {
            Guard::Read(g) => g.body(),
            Guard::Write(g) => g.body(),
        }
    }
}

/// The root fields the holder's latch guards.
struct Root {
    node: NodePtr,
    /// Levels from the root to the leaves; 1 for a lone leaf.
    height: u32,
}

/// The thesis' `BTree` structure (Listing 2.2): stable access to a changing root. In a cache
/// line of its own: every operation writes the latch word, which must not drag the tree's
/// read-only fields (order, counters' addresses) from core to core with it.
#[repr(align(64))]
pub(crate) struct BTree {
    latch: Latch,
    root: UnsafeCell<Root>,
    pub(crate) revisits: Revisits,
}

/// Stripes of in-flight revisit counts: threads pick one by a thread-local index, so that
/// revisits on different cores rarely write one cache line.
const REVISIT_STRIPES: usize = if cfg!(loom) { 1 } else { 16 };

/// A counter in a cache line of its own.
#[repr(align(64))]
struct Padded<T> {
    count: T,
}

/// What scans need to come back to a leaf without a latch held in between (invariant 6): a
/// tree-wide stamp of leaf range changes and frees, and the revisits in flight.
pub(crate) struct Revisits {
    stamp: Padded<AtomicU64>,
    active: [Padded<AtomicUsize>; REVISIT_STRIPES],
}

impl Revisits {
    fn new() -> Self {
        Self {
            stamp: Padded {
                count: AtomicU64::new(0),
            },
            active: std::array::from_fn(|_| Padded {
                count: AtomicUsize::new(0),
            }),
        }
    }

    /// The stamp, for [`ReadGuard::revisit`]; read while holding the leaf's latch.
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp.count.load(Ordering::Acquire)
    }

    /// Marks a change of some leaf's key range (split, borrow, merge) or a free; the caller
    /// holds the changed nodes exclusively.
    #[inline]
    pub(crate) fn bump(&self) {
        self.stamp.count.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until no revisit is in flight (after a [`Self::bump`], before a free). Each
    /// stripe is read by a read-modify-write, so it is ordered against the revisits' own
    /// (invariant 6); a revisit never waits while it is in flight, so this ends.
    fn drain(&self) {
        for stripe in &self.active {
            while stripe.count.fetch_add(0, Ordering::AcqRel) != 0 {
                spin_loop();
            }
        }
    }
}

/// This thread's stripe of [`Revisits::active`].
#[inline]
fn stripe() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % REVISIT_STRIPES);
            }
            s.get()
        })
        .unwrap_or(0)
}

// SAFETY: `root` is read under the holder's latch and written only under its exclusive latch;
// nodes themselves are Sync (see `Node`).
unsafe impl Sync for BTree {}
// SAFETY: the holder owns the tree; moving it moves plain data.
unsafe impl Send for BTree {}

impl BTree {
    /// A tree of one empty leaf.
    pub(crate) fn new(order: usize) -> Self {
        Self {
            latch: Latch::new(),
            root: UnsafeCell::new(Root {
                node: OwnedNode::new(0, order).into_ptr(),
                height: 1,
            }),
            revisits: Revisits::new(),
        }
    }

    #[inline]
    pub(crate) fn read(&self, waits: &Counter) -> HolderRead<'_> {
        if self.latch.read_lock() {
            waits.incr();
        }
        HolderRead { tree: self }
    }

    #[inline]
    pub(crate) fn write(&self, waits: &Counter) -> HolderWrite<'_> {
        if self.latch.write_lock() {
            waits.incr();
        }
        HolderWrite { tree: self }
    }
}

impl Drop for BTree {
    fn drop(&mut self) {
        // `&mut self`: no other thread can hold any latch of this tree.
        // SAFETY: `&mut self`: no other borrow of the root fields.
        let root = self.root.with(|p| unsafe { (*p).node });
        let mut stack = vec![root];
        while let Some(ptr) = stack.pop() {
            // SAFETY: each node is reachable from exactly one parent (invariant 1), so it is
            // pushed and freed exactly once; nobody else has access (`&mut self`).
            let node = unsafe { Box::from_raw(ptr.node.as_ptr()) };
            stack.extend(node.body.into_inner().children);
        }
    }
}

/// A shared hold on the holder's latch.
pub(crate) struct HolderRead<'t> {
    tree: &'t BTree,
}

/// An exclusive hold on the holder's latch.
pub(crate) struct HolderWrite<'t> {
    tree: &'t BTree,
}

impl HolderRead<'_> {
    #[inline]
    fn fields(&self) -> &Root {
        // SAFETY: shared latch held: no writer changes the root fields.
        self.tree.root.with(|p| unsafe { &*p })
    }

    #[inline]
    pub(crate) fn height(&self) -> u32 {
        self.fields().height
    }

    /// Latches the root in shared mode (interlocking with the holder).
    #[inline]
    pub(crate) fn root_read(&self, waits: &Counter) -> ReadGuard {
        // SAFETY: the root is freed only under the holder's exclusive latch (invariant 4);
        // we hold it shared until the guard is taken.
        unsafe { ReadGuard::lock(self.fields().node, waits) }
    }

    /// Latches the root in exclusive mode.
    #[inline]
    pub(crate) fn root_write(&self, waits: &Counter) -> WriteGuard {
        // SAFETY: as in `root_read`.
        unsafe { WriteGuard::lock(self.fields().node, waits) }
    }
}

impl HolderWrite<'_> {
    #[inline]
    fn fields(&self) -> &Root {
        // SAFETY: exclusive latch held.
        self.tree.root.with(|p| unsafe { &*p })
    }

    #[inline]
    pub(crate) fn height(&self) -> u32 {
        self.fields().height
    }

    /// The root pointer (for linking it under a new root; not dereferenced).
    #[inline]
    pub(crate) fn root(&self) -> NodePtr {
        self.fields().node
    }

    /// Latches the root in shared mode.
    #[inline]
    pub(crate) fn root_read(&self, waits: &Counter) -> ReadGuard {
        // SAFETY: we hold the holder exclusively, so the root cannot be replaced or freed
        // until we release it, after the guard is taken.
        unsafe { ReadGuard::lock(self.root(), waits) }
    }

    /// Latches the root in exclusive mode.
    #[inline]
    pub(crate) fn root_write(&self, waits: &Counter) -> WriteGuard {
        // SAFETY: as in `root_read`.
        unsafe { WriteGuard::lock(self.root(), waits) }
    }

    /// Replaces the root: after a root split (a new node) or when a root with one child gives
    /// way to that child (§2.2.3). The caller holds the old root exclusively.
    pub(crate) fn set_root(&mut self, node: NodePtr, height: u32) {
        debug_assert!(height >= 1);
        // SAFETY: exclusive latch held; `&mut self` makes this the only borrow.
        let fields = self.tree.root.with_mut(|p| unsafe { &mut *p });
        fields.node = node;
        fields.height = height;
    }
}

impl Drop for HolderRead<'_> {
    #[inline]
    fn drop(&mut self) {
        self.tree.latch.read_unlock();
    }
}

impl Drop for HolderWrite<'_> {
    #[inline]
    fn drop(&mut self) {
        self.tree.latch.write_unlock();
    }
}
