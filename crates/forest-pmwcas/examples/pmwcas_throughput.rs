//! PMwCAS throughput by size and persister: each thread PMwCASes 1, 2 or 3 of its own words
//! (no conflicts: the cost of the protocol itself) for a fixed time.
//!
//! `cargo run --release -p forest-pmwcas --example pmwcas_throughput -- [threads] [seconds]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use forest_pmwcas::{Clwb, NoPersist, Persist, Pool, PoolConfig, Region};

fn run<P: Persist>(pool: Arc<Pool<P>>, threads: usize, size: usize, seconds: f64) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let base = pool.user_area().start + (t * 64 * 8) as u64;
                let mut ops = 0u64;
                let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                while Instant::now() < deadline {
                    for _ in 0..256 {
                        let guard = pool.pin();
                        let Ok(mut d) = pool.allocate_descriptor(&guard) else {
                            continue;
                        };
                        for i in 0..size {
                            let w = pool.word(base + 8 * i as u64).expect("user word");
                            let v = pool.read(w, &guard);
                            d.add_word(w, v, v + 1).expect("fresh descriptor");
                        }
                        assert!(d.execute().expect("no reserved slots"));
                        ops += 1;
                    }
                }
                ops
            })
        })
        .collect();
    let ops: u64 = handles.into_iter().map(|h| h.join().expect("worker")).sum();
    let stats = pool.stats();
    eprintln!(
        "  {} size {size}: pool waits {}, helps {}, dirty flushes {}",
        pool.persist().name(),
        stats.pool_waits,
        stats.helps,
        stats.dirty_flushes
    );
    ops as f64 / start.elapsed().as_secs_f64()
}

fn config(threads: usize) -> PoolConfig {
    PoolConfig {
        user_words: threads * 64,
        ..PoolConfig::default()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let clwb = Clwb::detect();
    println!(
        "threads {threads}, {seconds} s per cell, flush instruction {:?}",
        clwb.instruction()
    );
    println!("size  none Mops/s  clwb Mops/s  clwb/none");
    for size in 1..=3 {
        let none = run(
            Arc::new(Pool::create_volatile(NoPersist, config(threads)).expect("pool")),
            threads,
            size,
            seconds,
        );
        let cfg = config(threads);
        let region = Region::heap(cfg.region_bytes().expect("geometry"));
        let durable = run(
            Arc::new(Pool::create(region, clwb, cfg).expect("pool")),
            threads,
            size,
            seconds,
        );
        println!(
            "{size}     {:>9.2}  {:>11.2}  {:>9.2}",
            none / 1e6,
            durable / 1e6,
            durable / none
        );
    }
    // Recovery of a default pool (4096 descriptors) in a mapped file: the scan alone.
    let dir = std::env::temp_dir().join(format!("pmwcas-recovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("pool");
    let cfg = PoolConfig::default();
    let bytes = cfg.region_bytes().expect("geometry");
    drop(
        Pool::create(
            Region::map_file(&path, bytes).expect("map"),
            clwb,
            cfg.clone(),
        )
        .expect("pool"),
    );
    let mut times = Vec::new();
    for _ in 0..5 {
        let region = Region::map_file(&path, bytes).expect("map");
        let start = Instant::now();
        let (pool, report) = Pool::open(region, clwb, cfg.clone()).expect("open");
        times.push(start.elapsed());
        assert_eq!(report.descriptors_in_flight, 0);
        drop(pool);
    }
    times.sort();
    let count = cfg.geometry().expect("geometry").descriptor_count;
    println!(
        "open + recovery of {count} descriptors: median {:?}",
        times[2]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
