//! A counting global allocator: how many heap bytes an index holds after the load phase.
//!
//! The `forest` binary installs [`CountingAlloc`] over mimalloc with `#[global_allocator]`;
//! the runner brackets the load phase with [`live_bytes`] and reports the difference (bytes
//! and bytes per key). Counting must not perturb what it measures, so:
//! - it is off unless [`set_enabled`] switched it on (the runner does so only around loads);
//!   when off, an allocation or free pays a load of a flag that is never written while
//!   threads run (so its cache line stays shared and clean) and a predicted branch;
//! - when on, a thread adds to its own cache-padded shard with a relaxed `fetch_add`: no
//!   shared contended atomic, and no allocation inside `alloc` (the shard index lives in a
//!   `const`-initialized thread-local without destructor, which never allocates).
//!
//! Invariants: every method forwards to the inner allocator `A` with the caller's arguments
//! unchanged, so the wrapper is exactly as sound as `A`; the counters are observations only. A
//! free counted on one thread of memory allocated on another still sums correctly, since
//! [`live_bytes`] adds all shards. Memory freed while counting is on but allocated before is
//! subtracted: the measurement is the net change of the heap over the bracketed phase.
//!
//! Why one binary, wrapper always installed, rather than a separate benchmark binary so that
//! `forest serve` runs on the bare allocator (issue 13): the wrapper's cost with counting off
//! was measured (`cargo run --release -p forest --example alloc_cost`, docs/BENCHMARKS.md
//! "Allocator (issue 13)"): 0.4 to 1.6 ns per alloc+free pair on one thread, lost in the
//! noise on two, against 8 to 25 ns for the pair itself; and `forest serve`'s CPU time on a
//! fixed load does not tell it from noise (4.19 s with it, 4.32 s without; medians of 5). In
//! the machine code it is, after the inner call (no longer a tail call), a load of the flag's
//! address, a byte load, a test and a branch. A second binary would cost more than that:
//! two builds, two install paths, `forest bench` no longer a subcommand.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Shards of the byte counter; a power of two at least the core count of common machines.
const SHARD_COUNT: usize = 64;
const _: () = assert!(SHARD_COUNT.is_power_of_two());

static SHARDS: [CachePadded<AtomicI64>; SHARD_COUNT] =
    [const { CachePadded::new(AtomicI64::new(0)) }; SHARD_COUNT];

static ENABLED: AtomicBool = AtomicBool::new(false);

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Marks a thread whose shard is not chosen yet.
const NO_SHARD: usize = usize::MAX;

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(NO_SHARD) };
}

/// The allocator the `forest` binary installs: the allocator `A` (by default `System`), plus
/// counting when enabled. Counting is of requested sizes (`Layout::size`), so the figure does
/// not depend on which allocator serves the requests.
pub struct CountingAlloc<A = System>(pub A);

#[inline]
fn record(delta: i64) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // During thread teardown the thread-local may be gone; shard 0 is as good as any then.
    let shard = SHARD
        .try_with(|s| {
            let mut shard = s.get();
            if shard == NO_SHARD {
                shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) & (SHARD_COUNT - 1);
                s.set(shard);
            }
            shard
        })
        .unwrap_or(0);
    SHARDS[shard].fetch_add(delta, Ordering::Relaxed);
}

// SAFETY: every method forwards to `A` with unchanged arguments and returns its result
// unchanged, so `GlobalAlloc`'s contract holds as it does for `A`; `record` neither
// allocates nor unwinds.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller meets `alloc`'s contract (non-zero size), passed on unchanged.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            record(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `A`, with `layout`.
        unsafe { self.0.dealloc(ptr, layout) };
        record(-(layout.size() as i64));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `A` with `layout`; the caller meets `realloc`'s contract
        // for `new_size`.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            record(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Switches counting on or off (the runner: on just before a load, off right after).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::SeqCst);
}

/// Net bytes allocated while counting was on, summed over shards.
pub fn live_bytes() -> i64 {
    SHARDS.iter().map(|s| s.load(Ordering::Relaxed)).sum()
}

/// Whether [`CountingAlloc`] is the global allocator of this process: with counting on, a
/// fresh allocation must move the counter.
pub fn is_installed() -> bool {
    let was = ENABLED.load(Ordering::SeqCst);
    set_enabled(true);
    let before = live_bytes();
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let moved = live_bytes() != before;
    drop(probe);
    set_enabled(was);
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_installed_in_unit_tests() {
        // Goal: the probe tells an installed allocator from the system one. Method: the unit
        // test binary does not install `CountingAlloc`, so counting on must not move the sum
        // (the smoke tests install it and check that memory is measured).
        assert!(!is_installed());
        assert!(
            !ENABLED.load(Ordering::SeqCst),
            "the probe restores the flag"
        );
    }
}
