//! The memory-tool build poisons what it frees (src/memcheck.rs). Only built with
//! `RUSTFLAGS="--cfg forest_memcheck"` in a debug build, as the memcheck script runs it.
//!
//! A checking global allocator looks at the bytes of every node (told apart by its layout) and
//! every base-page buffer (a multiple of 512 bytes, 8-aligned) as it is freed. Other
//! allocations may share those layouts, so the test counts poisoned frees and asks for at least
//! as many as the tree surely made. Invariant of its `unsafe`: it forwards every call to
//! `System` unchanged and only reads the `size` bytes it is freeing.
#![cfg(all(forest_memcheck, debug_assertions))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use forest_bwtree::memcheck::{NODE_BYTES, POISON_BYTE};
use forest_bwtree::BwTree;
use forest_core::Index;

/// Bytes per base-page buffer class (page_buffers.rs: 64 words).
const BUFFER_CLASS_BYTES: usize = 512;

/// Poisoned frees of node-sized and of buffer-sized allocations.
static NODES: AtomicUsize = AtomicUsize::new(0);
static BUFFERS: AtomicUsize = AtomicUsize::new(0);

struct Checking;

// SAFETY: every call goes to `System` unchanged (module invariant).
unsafe impl GlobalAlloc for Checking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        let size = layout.size();
        let node = size == NODE_BYTES;
        let buffer = size.is_multiple_of(BUFFER_CLASS_BYTES) && size > 0;
        if (node || buffer) && layout.align() == 8 {
            // SAFETY: `p` is a live allocation of `size` bytes until the dealloc below; the
            // bytes are read as plain bytes (a u8 may hold any value).
            let bytes = unsafe { std::slice::from_raw_parts(p, size) };
            if bytes.iter().all(|&b| b == POISON_BYTE) {
                let counter = if node { &NODES } else { &BUFFERS };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Checking = Checking;

// Goal: under cfg(forest_memcheck) freed nodes and base-page buffers are all poison bytes when
// they reach the allocator. Method: 2,000 inserts and 2,000 removes (each a delta node; pages
// consolidate and split, merge, so buffers are freed too), then the tree is dropped and the
// epoch drained; at least one poisoned node free per write and one poisoned buffer free per
// consolidation must have been seen.
#[test]
fn freed_nodes_and_buffers_are_poisoned() {
    let tree = BwTree::new();
    let keys = 2_000u32;
    for i in 0..keys {
        tree.insert(&i.to_be_bytes(), b"value").expect("insert");
    }
    for i in 0..keys {
        assert!(tree.remove(&i.to_be_bytes()));
    }
    let consolidations = tree
        .stats()
        .counter(forest_core::stats::names::CONSOLIDATIONS)
        .expect("counted");
    drop(tree);
    for _ in 0..10_000 {
        crossbeam_epoch::pin().flush();
    }
    let (nodes, buffers) = (
        NODES.load(Ordering::Relaxed),
        BUFFERS.load(Ordering::Relaxed) as u64,
    );
    assert!(nodes >= 2 * keys as usize, "poisoned node frees: {nodes}");
    assert!(
        consolidations > 0 && buffers >= consolidations,
        "poisoned buffer frees: {buffers}, consolidations: {consolidations}"
    );
}
