//! What an allocation costs through each allocator the `forest` binary could install, and what
//! forest-bench's counting wrapper adds to it while counting is off (as under `forest serve`).
//!
//! Method: each thread allocates, touches and frees blocks of a mix of sizes (16 to 1024 bytes,
//! a few live at once, as a request's buffers are), calling the allocator directly rather than
//! through the global one, so all variants run in one process on the same machine state. Each
//! variant runs `ROUNDS` times, interleaved; the median nanoseconds per alloc+free pair are
//! printed. Run: `cargo run --release -p forest --example alloc_cost [THREADS]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Instant;

use forest_bench::alloc_count::{self, CountingAlloc};

/// Alloc+free pairs per thread per round: long enough (tens of ms) to swamp timer noise.
const PAIRS_PER_ROUND: usize = 4_000_000;

/// Rounds of each variant; the median is printed.
const ROUNDS: usize = 7;

/// Blocks live at once per thread: a request holds a few buffers at a time.
const LIVE_COUNT: usize = 8;

/// Block sizes cycled through, bytes.
const SIZES: [usize; 7] = [16, 24, 48, 64, 100, 256, 1024];

/// Runs `PAIRS_PER_ROUND` alloc+free pairs through `alloc`; nanoseconds per pair.
fn pairs<A: GlobalAlloc>(alloc: &A) -> f64 {
    let mut live = [(std::ptr::null_mut::<u8>(), Layout::new::<u8>()); LIVE_COUNT];
    let start = Instant::now();
    for i in 0..PAIRS_PER_ROUND {
        let slot = &mut live[i % LIVE_COUNT];
        if !slot.0.is_null() {
            // SAFETY: `slot.0` came from `alloc` with layout `slot.1` and is freed once.
            unsafe { alloc.dealloc(slot.0, slot.1) };
        }
        let size = SIZES[i % SIZES.len()];
        let Ok(layout) = Layout::from_size_align(size, 8) else {
            unreachable!("sizes are small multiples of 8 or below")
        };
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { alloc.alloc(layout) };
        assert!(!p.is_null(), "out of memory");
        // SAFETY: `p` points to `size` >= 1 writable bytes.
        unsafe { p.write_volatile(i as u8) };
        *slot = (black_box(p), layout);
    }
    for (p, layout) in live {
        if !p.is_null() {
            // SAFETY: as above.
            unsafe { alloc.dealloc(p, layout) };
        }
    }
    start.elapsed().as_nanos() as f64 / PAIRS_PER_ROUND as f64
}

/// `pairs` on `threads` threads at once; the slowest thread's figure.
fn on_threads<A: GlobalAlloc + Sync>(alloc: &A, threads: usize) -> f64 {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| pairs(alloc))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(f64::NAN))
            .fold(0.0, f64::max)
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let counting_system = CountingAlloc(System);
    let counting_mimalloc = CountingAlloc(mimalloc::MiMalloc);
    type Variant<'a> = (&'a str, Box<dyn Fn() -> f64 + 'a>);
    let variants: Vec<Variant<'_>> = vec![
        ("System", Box::new(|| on_threads(&System, threads))),
        (
            "CountingAlloc<System>, counting off",
            Box::new(|| on_threads(&counting_system, threads)),
        ),
        (
            "MiMalloc",
            Box::new(|| on_threads(&mimalloc::MiMalloc, threads)),
        ),
        (
            "CountingAlloc<MiMalloc>, counting off",
            Box::new(|| on_threads(&counting_mimalloc, threads)),
        ),
        (
            "CountingAlloc<MiMalloc>, counting on",
            Box::new(|| {
                alloc_count::set_enabled(true);
                let ns = on_threads(&counting_mimalloc, threads);
                alloc_count::set_enabled(false);
                ns
            }),
        ),
    ];
    let mut samples = vec![Vec::new(); variants.len()];
    for _ in 0..ROUNDS {
        for ((_, run), out) in variants.iter().zip(&mut samples) {
            out.push(run());
        }
    }
    println!("threads={threads}, {PAIRS_PER_ROUND} pairs per thread per round, median of {ROUNDS} rounds:");
    for ((name, _), values) in variants.iter().zip(samples) {
        println!("  {name:<40} {:>6.2} ns per alloc+free", median(values));
    }
}
