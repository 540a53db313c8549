//! The memory-tool build poisons what it frees (src/memcheck.rs). Only built with
//! `RUSTFLAGS="--cfg forest_memcheck"` in a debug build, as `scripts/memcheck.sh` runs it.
//!
//! A checking global allocator looks at the bytes of every border node, interior node and
//! value block (told apart by their layouts) as it is freed. Invariant of its `unsafe`: it
//! forwards every call to `System` unchanged and only reads the `size` bytes it is freeing.
#![cfg(all(forest_memcheck, debug_assertions))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use forest_core::Index;
use forest_masstree::memcheck::{NODE_LAYOUTS, POISON_BYTE};
use forest_masstree::Masstree;

/// Value bytes: with an 8-byte key the block holds 3 header bytes and the value after
/// crossbeam's 8-byte length, 1000 bytes in all with no padding, a layout nothing else uses.
const VALUE_BYTES: usize = 989;
const BLOCK_HEADER: usize = 8;

/// Frees seen and frees not all poison, of nodes and of value blocks.
static NODES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static BLOCKS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

struct Checking;

fn count(seen: &[AtomicUsize; 2], bytes: &[u8]) {
    seen[0].fetch_add(1, Ordering::Relaxed);
    if bytes.iter().any(|&b| b != POISON_BYTE) {
        seen[1].fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to `System` unchanged (module invariant).
unsafe impl GlobalAlloc for Checking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        let node = NODE_LAYOUTS.contains(&layout);
        let block = layout == Layout::from_size_align(1000, 8).expect("valid");
        if node || block {
            // SAFETY: `p` is a live allocation of `layout.size()` bytes until the dealloc
            // below, all initialized (a dropped node's or a block's bytes, written by the
            // crate's poisoning or, if it failed to, by the node or block itself).
            let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
            if node {
                count(&NODES, bytes);
            } else {
                count(&BLOCKS, &bytes[BLOCK_HEADER..]);
            }
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Checking = Checking;

#[test]
fn freed_nodes_and_value_blocks_are_poisoned() {
    // Goal: under cfg(forest_memcheck) every node and value block is all poison bytes when
    // it reaches the allocator. Method: 2,000 keys (border and interior nodes), half of them
    // upserted (old blocks go through the epoch) and a quarter removed (border nodes too),
    // then the tree is dropped, which frees every node and block left at once.
    let t = Masstree::new();
    let value = vec![b'v'; VALUE_BYTES];
    let keys = 2_000u64;
    for i in 0..keys {
        t.insert(&i.to_be_bytes(), &value).expect("within limits");
    }
    for i in (0..keys).step_by(2) {
        t.upsert(&i.to_be_bytes(), &value).expect("within limits");
    }
    for i in 0..keys / 4 {
        assert!(t.remove(&i.to_be_bytes()));
    }
    let nodes_before_drop = t.stats().leaf_node_count + t.stats().inner_node_count;
    drop(t);
    let (nodes, blocks) = (&NODES, &BLOCKS);
    assert!(nodes[0].load(Ordering::Relaxed) as u64 >= nodes_before_drop);
    assert!(blocks[0].load(Ordering::Relaxed) as u64 >= keys - keys / 4);
    assert_eq!(
        nodes[1].load(Ordering::Relaxed),
        0,
        "nodes freed unpoisoned"
    );
    assert_eq!(
        blocks[1].load(Ordering::Relaxed),
        0,
        "blocks freed unpoisoned"
    );
}
