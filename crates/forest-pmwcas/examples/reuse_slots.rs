//! Review rev-pmrec's F4: threads sharing a reuse-domain slot (thread number modulo the
//! partition count) share one announced epoch, so with more threads than slots overlapping
//! helps may hold the epoch back, and descriptors wait. THREADS threads run 2-word PMwCASes
//! on 16 shared words (conflicts, so they help each other) for SECONDS, once with PARTITIONS
//! partitions (slots) and once with one per thread; the main thread samples how many
//! descriptors are retired and not yet back (`descriptors_waiting`).
//!
//! `cargo run --release -p forest-pmwcas --example reuse_slots -- [threads] [partitions] [seconds]`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forest_pmwcas::{NoPersist, Pool, PoolConfig};

const WORDS: u64 = 16;

fn run(threads: usize, partitions: usize, seconds: f64) {
    let pool = Arc::new(
        Pool::create_volatile(
            NoPersist,
            PoolConfig {
                partition_count: partitions,
                descriptors_per_partition: 256 / partitions,
                client_words: 0,
                user_words: WORDS as usize,
                recyclers: Vec::new(),
            },
        )
        .expect("pool"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
            std::thread::spawn(move || {
                let base = pool.user_area().start;
                let (mut ops, mut x) = (0u64, t as u64 * 7 + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (i, j) = (x % WORDS, (x >> 8) % WORDS);
                    if i == j {
                        continue;
                    }
                    // Pinned across the operation, as a tree operation is.
                    let guard = pool.pin();
                    let Ok(mut d) = pool.allocate_descriptor(&guard) else {
                        continue;
                    };
                    for k in [i, j] {
                        let w = pool.word(base + 8 * k).expect("user word");
                        let v = pool.read(w, &guard);
                        d.add_word(w, v, v + 1).expect("fresh descriptor");
                    }
                    let _ = d.execute().expect("execute");
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let (mut samples, mut sum, mut max) = (0u64, 0u64, 0usize);
    while started.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(Duration::from_micros(200));
        let waiting = pool.descriptors_waiting();
        samples += 1;
        sum += waiting as u64;
        max = max.max(waiting);
    }
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = handles.into_iter().map(|h| h.join().expect("worker")).sum();
    let stats = pool.stats();
    let failures: u64 = stats.failures_by_size.iter().sum();
    println!(
        "{threads} threads on {partitions} slots: {:.2} Mops/s, descriptors waiting mean {:.1} max {max}, pool waits {}, helps {}, failures {failures}",
        ops as f64 / started.elapsed().as_secs_f64() / 1e6,
        sum as f64 / samples.max(1) as f64,
        stats.pool_waits,
        stats.helps,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let threads = num(0, 4.0) as usize;
    let partitions = num(1, 2.0) as usize;
    let seconds = num(2, 2.0);
    run(threads, partitions, seconds);
    run(threads, threads, seconds);
}
