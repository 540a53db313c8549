//! A tree dropped while a page is frozen (a merge begun, not completed) frees the frozen state
//! with everything else (issue 12 item 8; it used to leak: a remove node delta does not own the
//! state below it, and no node merge delta owned it yet).
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test drop_while_frozen`.
//! A counting global allocator tracks the allocations of at least [`BIG_BYTES`]: only the
//! records' large values (and pages that hold them) are that big, so the count is not
//! disturbed by small recycled nodes and buffers. Invariant of its `unsafe`: it forwards every
//! call to `System` unchanged; the counters are observations only.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::conformance::pause::{disarm, on_pause_point, spawn_pauser, take_turn, PAUSER};
use forest_core::Index;

/// Allocations at least this large are counted: above the mapping table's 128 KiB directory
/// and chunks, below [`VALUE_BYTES`].
const BIG_BYTES: usize = 256 << 10;
/// Each record's value.
const VALUE_BYTES: usize = 512 << 10;

/// Live allocations of at least [`BIG_BYTES`].
static BIG_LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

fn count(layout: Layout, delta: isize) {
    if layout.size() >= BIG_BYTES {
        BIG_LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to `System` unchanged (module invariant).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout, 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout, 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout, -1);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(layout, -1);
        count(
            Layout::from_size_align(new_size, layout.align()).unwrap(),
            1,
        );
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Lets the epoch drain, so that everything retired so far is freed.
fn drain_epoch() {
    for _ in 0..10_000 {
        crossbeam_epoch::pin().flush();
    }
}

/// Builds a tree of records with large values, removes keys on the pauser thread until a
/// merge stops at pause point `point` (the hook panics there: the only way to leave a merge
/// begun, since every thread that meets one completes it), drops the tree and checks that the
/// count of large allocations is back where it was.
fn drop_with_a_merge_stopped_at(point: &'static str) {
    drain_epoch();
    let before = BIG_LIVE.load(Ordering::Relaxed);
    let tree = Arc::new(
        BwTree::with_config(BwTreeConfig {
            max_records_per_page: 4,
            consolidate_threshold: 2,
            merge_threshold: 2,
            read_consolidate_threshold: 2,
        })
        .unwrap(),
    );
    let value = vec![7u8; VALUE_BYTES];
    for i in 0..12u32 {
        tree.insert(&i.to_be_bytes(), &value).unwrap();
    }
    drop(value);
    on_pause_point(point, PAUSER, move || {
        panic!("stopped at {point} (expected)")
    });
    // The default panic hook would print a backtrace, whose symbol cache stays allocated.
    std::panic::set_hook(Box::new(|_| {}));
    let remover = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            for i in 0..12u32 {
                assert!(tree.remove(&i.to_be_bytes()));
            }
        })
    };
    assert!(
        remover.join().is_err(),
        "a merge began, and the remover stopped after freezing a page"
    );
    disarm();
    drop(std::panic::take_hook()); // the default hook again
    drop(tree);
    drain_epoch();
    assert_eq!(
        BIG_LIVE.load(Ordering::Relaxed) - before,
        0,
        "large allocations left after the tree was dropped, merge stopped at {point}"
    );
}

// Goal: no frozen state outlives its tree, and none is freed twice. Method: a merge stopped
// right after its remove node delta (the frozen state belongs to no node merge delta: before
// the fix it leaked), then one stopped right after its node merge delta (the left page owns
// the frozen state and the removed page still holds it: it must not be given back too).
#[test]
fn dropping_a_tree_frees_a_frozen_page_once() {
    let _turn = take_turn();
    drop_with_a_merge_stopped_at("merge:remove-node-installed");
    drop_with_a_merge_stopped_at("merge:node-merge-installed");
}
