//! Descriptor reuse without the pool's epoch (`reuse.rs`, issue 16's recovery after a
//! SIGKILL): a descriptor whose policies free nothing comes back to its partition within a
//! few PMwCASes even while callers stay pinned, so a crash leaves only a handful in flight;
//! one that frees memory still waits for the pool's epoch.
//!
//! Sized by `PMWCAS_REUSE_OPS` (PMwCASes per thread, default 2000).

#![cfg(not(any(loom, shuttle)))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use forest_pmwcas::{NoPersist, Persist, Policy, Pool, PoolConfig, Recycle, Region, Sim, Word};

fn ops() -> u64 {
    std::env::var("PMWCAS_REUSE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn config(partitions: usize, per: usize, recyclers: Vec<Arc<dyn Recycle>>) -> PoolConfig {
    PoolConfig {
        partition_count: partitions,
        descriptors_per_partition: per,
        client_words: 0,
        user_words: 64,
        recyclers,
    }
}

fn word<P: Persist>(pool: &Pool<P>, i: u64) -> &Word {
    pool.word(pool.user_area().start + 8 * i).unwrap()
}

// Goal: a caller pinned across many PMwCASes (a tree reader pinned elsewhere) does not hold
// descriptors back. Method: one guard held for the whole run over a pool of 4 descriptors;
// each PMwCAS increments words 0 and 1. With descriptors behind the pool's epoch the fifth
// allocation would exhaust the pool (the guard predates every retirement).
#[test]
fn a_pinned_caller_does_not_hold_descriptors_back() {
    let pool = Pool::create_volatile(NoPersist, config(1, 4, Vec::new())).unwrap();
    let guard = pool.pin();
    for n in 0..ops() {
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(word(&pool, 0), n, n + 1).unwrap();
        d.add_word(word(&pool, 1), n, n + 1).unwrap();
        assert!(d.execute().unwrap(), "PMwCAS {n} failed");
        assert!(
            pool.descriptors_waiting() <= 3,
            "{} descriptors waiting after PMwCAS {n}",
            pool.descriptors_waiting()
        );
    }
    assert_eq!(pool.read(word(&pool, 0), &guard), ops());
    assert_eq!(pool.stats().pool_waits, 0, "no allocation waited");
}

/// Counts frees.
#[derive(Default)]
struct Count(AtomicU64);

impl Recycle for Count {
    fn free(&self, _value: u64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

// Goal: memory a FREE-ONE policy frees still waits for the pool's epoch (§2.2: a reader
// pinned anywhere may hold it). Method: a guard held while 3 PMwCASes each swap a pointer
// word with FREE-ONE; no free may run before the guard drops; after it drops (and other
// pins flush the epoch) all three do.
#[test]
fn memory_freed_by_policy_still_waits_for_the_pool_epoch() {
    let count = Arc::new(Count::default());
    let pool = Pool::create_volatile(NoPersist, config(1, 8, vec![count.clone()])).unwrap();
    word(&pool, 0).init(64);
    {
        let guard = pool.pin();
        for n in 1..=3u64 {
            let mut d = pool.allocate_descriptor(&guard).unwrap();
            let slot = d
                .reserve_entry(word(&pool, 0), n * 64, Policy::FreeOne)
                .unwrap();
            d.set_new(slot, (n + 1) * 64).unwrap();
            assert!(d.execute().unwrap());
        }
        assert_eq!(pool.descriptors_waiting(), 3);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "memory freed while a reader that may hold it is pinned"
        );
    }
    // Other tests of this binary pin the same (process-wide) epoch meanwhile: wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count.0.load(Ordering::SeqCst) < 3 && std::time::Instant::now() < deadline {
        pool.pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        3,
        "the old values are freed"
    );
}

// Goal: a crash under writers leaves only a handful of descriptors for recovery, whatever the
// callers' pins. Method: the `sim` persister; 2 writer threads, each holding one guard across
// all its PMwCASes on its own two words, and a reader pinned for the whole run; the durable
// image taken while the pool is live (a crash) is recovered: few descriptors in flight, few
// scanned (the marks stayed low), and every word holds its thread's last value or the one
// before.
#[test]
fn a_crash_under_pinned_writers_leaves_a_handful_in_flight() {
    let cfg = config(4, 256, Vec::new());
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Arc::new(Pool::create(region, sim, cfg.clone()).unwrap());
    let reader = pool.pin();
    let start = Arc::new(Barrier::new(2));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (pool, start) = (pool.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let guard = pool.pin();
                for n in 0..ops() {
                    let mut d = pool.allocate_descriptor(&guard).unwrap();
                    d.add_word(word(&pool, 2 * t), n, n + 1).unwrap();
                    d.add_word(word(&pool, 2 * t + 1), n, n + 1).unwrap();
                    assert!(d.execute().unwrap());
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let image = pool.persist().durable_image();
    drop(reader);

    let region = Region::from_image(&image);
    let sim = Sim::new(&region);
    let (recovered, report) = Pool::open(region, sim, cfg).unwrap();
    assert!(
        report.descriptors_in_flight <= 8,
        "{} descriptors in flight at the crash: {report:?}",
        report.descriptors_in_flight
    );
    assert!(
        report.descriptors_scanned <= 32,
        "{} descriptors scanned (marks {:?}): {report:?}",
        report.descriptors_scanned,
        recovered.high_water_marks()
    );
    let guard = recovered.pin();
    for i in 0..4 {
        assert_eq!(
            recovered.read(word(&recovered, i), &guard),
            ops(),
            "word {i}"
        );
    }
}
