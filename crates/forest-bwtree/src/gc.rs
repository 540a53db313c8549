//! Garbage collection of page states (Bw-tree §III-D): a state swapped out of the mapping
//! table (by an update, a consolidation, an SMO step, or a page freed by a merge) is reclaimed
//! only after every thread that might have read it has left its epoch (crossbeam-epoch,
//! through forest-llama's [`PageState::reclaim`]); then its chain is freed as a whole, and the
//! freed node allocations are kept for the freeing thread's next nodes (a choice of this
//! engine, as `page_buffers.rs` does for base pages' buffers).
//!
//! Invariants:
//! - Every node of a state read under a guard stays allocated until that guard unpins,
//!   because a chain is only reclaimed after it was swapped out of the table and the epoch
//!   drained: `BwTree::read_node` (storage.rs) and [`node_ref`] hand out references for the guard's lifetime.
//! - An installed chain is freed as a whole by [`free_chain`], once; a node whose CAS failed
//!   is freed alone (its `next` still belongs to the page).
//! - A frozen state (below a remove node delta, `delta.rs`) is freed exactly once: with the
//!   left sibling's chain, whose node merge delta owns it; with its page after a withdrawal;
//!   or, when the tree drops before the merge completed, with its page then
//!   (`BwTree::give_back_frozen_states`).
//! - A freed node's allocation may be reused for a new node by the thread that freed it
//!   ([`Node::into_owned`]): only after its contents were dropped, and only as a fresh node
//!   (never in the memory-tool build, `memcheck.rs`: there it is poisoned and freed).
//!   Pinned readers never see it (the node was unreachable before the epoch drained); code
//!   that compares addresses without a pin (scans) also compares the node's `stamp`.
//! - Before any freed node's allocation is used again (popped from the spares, or given back
//!   to the allocator, whence any thread may get it), the [`reuse_generation`] has grown since
//!   that node was freed ([`publish_reuse`]). So a scan that reads a page's word without a pin
//!   and finds the address it copied from, with the generation it read while it was pinned,
//!   knows the address still holds the very state it copied: no pin, no stamp to read.
//!
//! Unsafe here: freeing chains and recycling their allocations, and turning states read under
//! a guard into references.

use crossbeam_epoch::Shared;
use forest_llama::PageState;
#[cfg(test)]
use {
    crossbeam_epoch::Guard,
    forest_llama::{MappingTable, Pid},
};

use crate::delta::{Kind, Node};

impl PageState for Node {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the caller's duty (unreachable, reclaimed once) covers the whole chain, which
        // this state owns.
        unsafe { free_chain(ptr) }
    }
}

/// Node allocations a thread freed, reused by its next deltas and base pages: the same reason
/// as [`crate::page_buffers`] (the collecting thread frees nodes another thread allocated),
/// for the most frequent allocation of all, one per update.
const SPARE_NODES_MAX: usize = 256;

/// A thread's freed node allocations.
struct Spares {
    // Boxes, not values: the allocations themselves are what is kept for reuse.
    #[allow(clippy::vec_box)]
    nodes: Vec<Box<std::mem::MaybeUninit<Node>>>,
    /// Whether a node was freed into `nodes` since the last [`publish_reuse`].
    unpublished: bool,
}

impl Drop for Spares {
    fn drop(&mut self) {
        // Thread exit gives the allocations back to the allocator: publish first.
        if !self.nodes.is_empty() {
            publish_reuse();
        }
    }
}

thread_local! {
    static SPARE_NODES: std::cell::RefCell<Spares> = const {
        std::cell::RefCell::new(Spares { nodes: Vec::new(), unpublished: false })
    };
}

/// Counts the times freed node allocations were released for reuse (see the module
/// invariants); on its own cache line, as every scan reads it and writers seldom write it.
#[repr(align(128))]
struct ReuseGeneration(std::sync::atomic::AtomicU64);

static REUSE_GENERATION: ReuseGeneration = ReuseGeneration(std::sync::atomic::AtomicU64::new(0));

/// The reuse generation. Read while pinned, together with a state's address, it vouches for
/// that address later: while the generation is unchanged, no node freed since can have come
/// back, so the address holds the same state (read the word first, then the generation).
#[inline]
pub(crate) fn reuse_generation() -> u64 {
    // Acquire: a word read before shows a reused node only if the generation read here shows
    // the publish made before that reuse.
    REUSE_GENERATION
        .0
        .load(std::sync::atomic::Ordering::Acquire)
}

/// Marks that node allocations freed so far may now be reused. Called before the first reuse
/// of a batch of frees (one add per batch of crossbeam's collection, not per node).
fn publish_reuse() {
    // Release: the publish comes before the reuse and the CAS that installs the new node.
    REUSE_GENERATION
        .0
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

impl Node {
    /// This node in a heap allocation ready to install, reusing one this thread freed (none
    /// in the memory-tool build).
    pub(crate) fn into_owned(self) -> crossbeam_epoch::Owned<Node> {
        if !crate::memcheck::RECYCLES {
            return crossbeam_epoch::Owned::new(self);
        }
        let spare = SPARE_NODES
            .try_with(|spare| {
                let mut spare = spare.borrow_mut();
                let slot = spare.nodes.pop()?;
                if spare.unpublished {
                    publish_reuse();
                    spare.unpublished = false;
                }
                Some(slot)
            })
            .ok()
            .flatten();
        match spare {
            Some(slot) => crossbeam_epoch::Owned::from(Box::write(slot, self)),
            None => crossbeam_epoch::Owned::new(self),
        }
    }
}

/// Drops `node`'s contents and keeps its allocation for [`Node::into_owned`] while this thread
/// has room (else frees it; in the memory-tool build always, poisoned first: `memcheck.rs`).
fn recycle(node: Box<Node>) {
    let raw = Box::into_raw(node);
    // SAFETY: `raw` came from a live, owned box; its contents are dropped exactly once here and
    // never read again.
    unsafe { std::ptr::drop_in_place(raw) };
    if crate::memcheck::POISONS {
        // SAFETY: the contents were dropped above, so the bytes are dead and ours to write.
        unsafe {
            std::ptr::write_bytes(
                raw.cast::<u8>(),
                crate::memcheck::POISON_BYTE,
                std::mem::size_of::<Node>(),
            )
        };
        // The stores must reach memory although a free follows.
        std::hint::black_box(raw);
    }
    // SAFETY: same allocation, same layout (MaybeUninit<Node> has Node's); its contents are now
    // uninitialized, which MaybeUninit allows, and dropping the box frees without a drop.
    let mut slot = Some(unsafe { Box::from_raw(raw.cast::<std::mem::MaybeUninit<Node>>()) });
    if crate::memcheck::RECYCLES {
        // During thread exit the thread-local may be gone: the slot is then simply freed.
        let _ = SPARE_NODES.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.nodes.len() < SPARE_NODES_MAX {
                spare.nodes.extend(slot.take());
                spare.unpublished = true;
            }
        });
    }
    if let Some(slot) = slot {
        // Back to the allocator, whence any thread may get it: publish first.
        publish_reuse();
        drop(slot);
    }
}

/// Frees a chain built for an install whose CAS failed (a consolidation's new base page with
/// the deltas kept on top of it): never published, so no epoch is needed.
pub(crate) fn drop_unpublished(state: crossbeam_epoch::Owned<Node>) {
    let ptr = Box::into_raw(state.into_box());
    // SAFETY: the chain was built by this thread and never published; each node is owned by
    // the one above it (or by `state` for the first), so it is freed once here.
    unsafe { free_chain(ptr) }
}

/// Frees `ptr` and the chain it owns.
///
/// # Safety
/// `ptr` is an installed state that no thread can reach any more, freed once.
unsafe fn free_chain(mut ptr: *mut Node) {
    while !ptr.is_null() {
        // SAFETY: each node of an unreachable chain was boxed by crossbeam's `Owned` and is
        // owned only by its predecessor (or the caller for the first), so it is freed once.
        let node = unsafe { crossbeam_epoch::Owned::from_raw(ptr) }.into_box();
        ptr = match &node.kind {
            // A remove node delta does not own the frozen state below it.
            Kind::RemoveNode { .. } => std::ptr::null_mut(),
            Kind::NodeMerge(merge) => {
                // SAFETY: an installed merge delta owns the right page's frozen state, which
                // is unreachable with it and freed only here.
                unsafe { free_chain(merge.right_ptr()) };
                node.next_ptr()
            }
            _ => node.next_ptr(),
        };
        recycle(node);
    }
}

/// Reads `pid`'s state as a node reference valid for the guard's lifetime; `None` when the
/// page was freed (merged away) after the caller found its PID.
#[cfg(test)]
#[inline]
pub(crate) fn read_node<'g>(
    table: &MappingTable<Node>,
    pid: Pid,
    guard: &'g Guard,
) -> Option<(Shared<'g, Node>, &'g Node)> {
    let state = table.read(pid, guard);
    // SAFETY: the table holds only states built from `Owned<Node>`; a state read under `guard`
    // is reclaimed only after `guard` unpins (§III-D), so the reference lives long enough.
    let node = unsafe { state.as_ref() }?;
    Some((state, node))
}

/// Turns a non-null state (installed by this thread, or read from the table under the same
/// guard) into a node reference.
#[inline]
pub(crate) fn node_ref<'g>(state: Shared<'g, Node>) -> &'g Node {
    // SAFETY: the state came from the table or an `Owned<Node>` installed under the same guard,
    // so it is live until the guard unpins.
    unsafe { state.as_ref() }.expect("an installed state is not null")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page::{BasePage, NO_PID};

    // Goal: a freed chain's node allocations are reused by this thread's next nodes, whose
    // contents are the new ones, and the old contents were dropped (their heap bytes freed).
    // Method: build a base + delta chain, free it, then allocate and compare addresses.
    #[cfg(not(forest_memcheck))]
    #[test]
    fn freed_nodes_are_reused_with_fresh_contents() {
        let page = BasePage::build(b"", None, NO_PID, [(&b"a"[..], &b"1"[..])].into_iter());
        let base = Node::base(0, page)
            .into_owned()
            .into_shared(unsafe_free_guard());
        // SAFETY: (test) `base` was just allocated and is only used here.
        let base_ref = unsafe { base.deref() };
        let long_value = vec![9u8; 100]; // a boxed (heap) record, dropped with its node
        let delta = Node::delta(
            base_ref,
            2,
            Kind::Insert(crate::delta::Record::new(b"b", &long_value)),
        );
        let top = delta.into_owned().into_shared(unsafe_free_guard());
        let addresses = [top.as_raw() as usize, base.as_raw() as usize];
        // SAFETY: (test) the chain is unreachable by anyone else and freed once.
        unsafe { free_chain(top.as_raw().cast_mut()) };
        let page = BasePage::build(b"", None, NO_PID, [(&b"c"[..], &b"3"[..])].into_iter());
        let again = Node::base(0, page).into_owned();
        assert!(
            addresses.contains(&(&*again as *const Node as usize)),
            "reused"
        );
        assert!(matches!(&again.kind, Kind::Base(p) if p.key(0) == b"c"));
    }

    // Goal: the memory-tool build keeps no freed node for reuse (each goes to the allocator,
    // where a memory tool sees it). Method: free a chain and look at the thread's spares.
    #[cfg(forest_memcheck)]
    #[test]
    fn memcheck_build_keeps_no_freed_node() {
        let page = BasePage::build(b"", None, NO_PID, [(&b"a"[..], &b"1"[..])].into_iter());
        let base = Node::base(0, page)
            .into_owned()
            .into_shared(unsafe_free_guard());
        // SAFETY: (test) the node is unreachable by anyone else and freed once.
        unsafe { free_chain(base.as_raw().cast_mut()) };
        assert_eq!(SPARE_NODES.with(|spare| spare.borrow().nodes.len()), 0);
    }

    /// A guard for tests that own every node they touch (no concurrent reader exists).
    fn unsafe_free_guard() -> &'static crossbeam_epoch::Guard {
        // SAFETY: (test) an unprotected guard is sound when no other thread shares the data.
        unsafe { crossbeam_epoch::unprotected() }
    }
}
