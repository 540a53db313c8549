//! A quick look at throughput on a workload like masstree-beta's `rw1` test: each thread puts
//! decimal keys of pseudo-random integers, then gets them back, on one shared tree.
//! Not the benchmark harness (`forest bench`); a check while developing.
//!
//! `cargo run --profile ci -p forest-masstree --example rw1 -- [threads] [keys_per_thread]`

use std::sync::Arc;
use std::time::Instant;

use forest_core::Index;
use forest_masstree::Masstree;

fn keys(thread: u64, count: u64) -> Vec<Vec<u8>> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (thread + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2_000_000_000).to_string().into_bytes()
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let count: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let tree = Arc::new(Masstree::new());
    let sets: Vec<Arc<Vec<Vec<u8>>>> = (0..threads).map(|t| Arc::new(keys(t, count))).collect();
    let run = |phase: &str, put: bool| {
        let start = Instant::now();
        let handles: Vec<_> = sets
            .iter()
            .map(|set| {
                let (tree, set) = (Arc::clone(&tree), Arc::clone(set));
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    let mut found = 0u64;
                    for k in set.iter() {
                        if put {
                            tree.upsert(k, &k[..k.len().min(8)]).expect("within limits");
                        } else if tree.get(k, &mut out) {
                            found += 1;
                        }
                    }
                    found
                })
            })
            .collect();
        let found: u64 = handles.into_iter().map(|h| h.join().expect("worker")).sum();
        let secs = start.elapsed().as_secs_f64();
        let ops = (threads * count) as f64;
        println!(
            "{phase}: {threads} threads, {:.2} M ops/s total, {:.2} M ops/s per thread{}",
            ops / secs / 1e6,
            ops / secs / 1e6 / threads as f64,
            if put {
                String::new()
            } else {
                format!(", {found} found")
            }
        );
    };
    run("put", true);
    run("get", false);
    let s = tree.stats();
    println!(
        "keys {}, height {}, memory {} B ({:.1} B/key)",
        s.key_count,
        s.height,
        s.memory_bytes,
        s.memory_bytes as f64 / s.key_count.max(1) as f64
    );
}
