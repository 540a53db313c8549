//! The node header shared by border and interior nodes, the node registry, and the only
//! places that turn node pointers into references.
//!
//! Invariants (the reason every node dereference in this crate is sound):
//! - Every node is allocated by [`NodeRegistry::alloc`], which records it in the registry's
//!   list, and is freed only by [`NodeRegistry::free_all`], from the tree's `Drop` (exclusive
//!   access). So a node pointer read from the tree (root, child, parent, next, prev, layer
//!   link) stays valid for as long as the tree is borrowed, with or without an epoch pin.
//! - `#[repr(C)]` border and interior nodes start with a [`NodeBase`]; its `ISBORDER` bit,
//!   fixed at creation, says which one a `NodeBase` pointer is.
//!
//! Choice: nodes are not reclaimed while the tree lives, since this engine does not yet
//! unlink empty nodes (§4.6.5). Values and key suffixes, which updates and removes replace,
//! are reclaimed through crossbeam-epoch.

use forest_core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::border::Border;
use crate::interior::Interior;
use crate::nodeversion::{NodeVersion, ISBORDER};

/// The first field of every node.
#[derive(Debug)]
#[repr(C)]
pub struct NodeBase {
    /// The version word (§4.4).
    pub version: NodeVersion,
    /// The parent interior node; null at a layer's root. Protected by the parent's lock.
    pub parent: AtomicPtr<Interior>,
    /// The next node in the registry's list.
    alloc_next: AtomicPtr<NodeBase>,
}

impl NodeBase {
    pub(crate) fn new(version_bits: u64) -> Self {
        Self {
            version: NodeVersion::new(version_bits),
            parent: AtomicPtr::new(std::ptr::null_mut()),
            alloc_next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Whether this is a border node (immutable).
    pub fn is_border(&self) -> bool {
        self.version.raw() & ISBORDER != 0
    }
}

/// A node seen through its kind.
pub enum NodeRef<'t> {
    Border(&'t Border),
    Interior(&'t Interior),
}

/// The node behind `p`.
///
/// # Safety
/// `p` is non-null and was read from a tree that is still borrowed (module invariants).
pub unsafe fn node<'t>(p: *mut NodeBase) -> NodeRef<'t> {
    // SAFETY: the caller's duty: `p` points to a live node; the repr(C) prefix and the
    // immutable ISBORDER bit make the cast to the right kind sound.
    unsafe {
        if (*p).is_border() {
            NodeRef::Border(&*(p as *const Border))
        } else {
            NodeRef::Interior(&*(p as *const Interior))
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
pub unsafe fn border<'t>(p: *mut Border) -> &'t Border {
    // SAFETY: the caller's duty: `p` points to a live border node.
    unsafe { &*p }
}

/// The interior node behind `p`.
///
/// # Safety
/// As [`node`], and `p` is an interior node (a `parent` link).
pub unsafe fn interior<'t>(p: *mut Interior) -> &'t Interior {
    // SAFETY: the caller's duty: `p` points to a live interior node.
    unsafe { &*p }
}

/// Owns every node of one tree.
#[derive(Debug)]
pub struct NodeRegistry {
    head: AtomicPtr<NodeBase>,
    border_count: AtomicU64,
    interior_count: AtomicU64,
}

impl Default for NodeRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            head: AtomicPtr::new(std::ptr::null_mut()),
            border_count: AtomicU64::new(0),
            interior_count: AtomicU64::new(0),
        }
    }

    fn push(&self, p: *mut NodeBase) {
        // SAFETY: `p` was just allocated and is not yet shared.
        let b = unsafe { base(p) };
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            b.alloc_next.store(head, Ordering::Relaxed);
            match self
                .head
                .compare_exchange_weak(head, p, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Allocates a border node and records it.
    pub fn alloc_border(&self, b: Border) -> *mut Border {
        let p = Box::into_raw(Box::new(b));
        self.push(p.cast());
        self.border_count.fetch_add(1, Ordering::Relaxed);
        p
    }

    /// Allocates an interior node and records it.
    pub fn alloc_interior(&self, n: Interior) -> *mut Interior {
        let p = Box::into_raw(Box::new(n));
        self.push(p.cast());
        self.interior_count.fetch_add(1, Ordering::Relaxed);
        p
    }

    /// Border and interior nodes allocated.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.border_count.load(Ordering::Relaxed),
            self.interior_count.load(Ordering::Relaxed),
        )
    }

    /// Frees every node. Needs `&mut self`: no other thread can reach the tree.
    pub fn free_all(&mut self) {
        let mut p = self.head.swap(std::ptr::null_mut(), Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: `p` came from `alloc_*` (Box::into_raw of its kind, told by ISBORDER) and
            // is freed exactly once, here; no reference to it outlives `&mut self`.
            unsafe {
                let next = (*p).alloc_next.load(Ordering::Relaxed);
                if (*p).is_border() {
                    drop(Box::from_raw(p.cast::<Border>()));
                } else {
                    drop(Box::from_raw(p.cast::<Interior>()));
                }
                p = next;
            }
        }
    }
}
