//! Concurrent stress of the Bw-tree's own SMO paths: with 4-record pages every thread's
//! fill-and-drain rounds split and merge pages (leaf and index levels, root growth and
//! collapse) while other threads do the same on interleaved keys and scanners walk the tree.
//! The shared kit's stress checks run in tests/conformance.rs; this one aims at SMO races.
//!
//! Length knob: `FOREST_STRESS_SECONDS` (default [`STRESS_SECONDS_DEFAULT`]) bounds each test's
//! fill-and-drain rounds by time: every writer starts new rounds until that many seconds have
//! passed, and always runs at least [`ROUNDS_MIN`]. The default keeps the crate's `ci`-profile
//! run near one minute; set e.g. `FOREST_STRESS_SECONDS=600` for a soak. A watchdog fails the
//! process if a test is still running [`STALL_SECONDS_MAX`] seconds past that bound.
//! `FOREST_STRESS_KEYS` (default [`KEY_COUNT_DEFAULT`]) sets the keys the writers share; the
//! AddressSanitizer run (scripts/memcheck.sh) takes fewer, since its [`ROUNDS_MIN`] rounds of
//! the default took 15 s a test there.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

const KEY_COUNT_DEFAULT: u32 = 20_000;

/// The keys the writers share (see the crate doc above).
fn key_count() -> u32 {
    match std::env::var("FOREST_STRESS_KEYS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("FOREST_STRESS_KEYS={text:?} is not a whole number")),
        Err(_) => KEY_COUNT_DEFAULT,
    }
}
/// Rounds every writer runs whatever the time bound: both drain orders, at least once.
const ROUNDS_MIN: u32 = 2;
/// Seconds of rounds per test unless `FOREST_STRESS_SECONDS` says otherwise: two tests of
/// this length keep the crate's optimized CI run short (CI time: 15 s until session 9, 10 s
/// until session 11).
const STRESS_SECONDS_DEFAULT: u64 = 4;

/// Seconds past the time bound after which the test counts as hung and the process exits
/// with a failure (a round takes well under a second; a livelock must not eat CI's budget).
const STALL_SECONDS_MAX: u64 = 120;

/// Exits the process with a failure if `done` is not set by `deadline` plus
/// [`STALL_SECONDS_MAX`].
fn watchdog(deadline: Instant, done: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let limit = deadline + Duration::from_secs(STALL_SECONDS_MAX);
        while !done.load(Ordering::Relaxed) {
            if Instant::now() > limit {
                eprintln!("stress: no progress {STALL_SECONDS_MAX} s past the time bound: hung");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}

/// The time bound of each test's rounds (see the crate doc above).
fn stress_duration() -> Duration {
    let seconds = match std::env::var("FOREST_STRESS_SECONDS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("FOREST_STRESS_SECONDS={text:?} is not a whole number")),
        Err(_) => STRESS_SECONDS_DEFAULT,
    };
    Duration::from_secs(seconds)
}

fn thread_count() -> u32 {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
    (2 * cores).max(4)
}

// Goal: splits, merges and root changes racing with each other never lose, duplicate or
// resurrect a key, and scans stay strictly ordered. Method: T threads own interleaved keys
// (k % T == t) and repeatedly insert all of theirs, check them, and remove them, checking
// every return value; two scanners check order throughout; at the end the tree is empty.
#[test]
fn fill_and_drain_rounds_race_splits_and_merges() {
    fill_and_drain(BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        merge_threshold: 2,
        read_consolidate_threshold: 2,
    });
}

// Goal and method as above, with 8-record pages, eager merges (below half a page) and
// consolidation after every delta, so consolidations race with every SMO step.
#[test]
fn fill_and_drain_with_eager_merges_and_consolidation() {
    fill_and_drain(BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 1,
        merge_threshold: 4,
        read_consolidate_threshold: 1,
    });
}

fn fill_and_drain(config: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(config).unwrap());
    let threads = thread_count();
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + stress_duration();
    let done = Arc::new(AtomicBool::new(false));
    watchdog(deadline, Arc::clone(&done));
    let scanners: Vec<_> = [Order::Ascending, Order::Descending]
        .into_iter()
        .map(|order| {
            let (tree, stop) = (Arc::clone(&tree), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut scans = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let mut last: Option<Vec<u8>> = None;
                    tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                        assert_eq!(v, k, "a record's value is its key");
                        if let Some(last) = &last {
                            match order {
                                Order::Ascending => assert!(k > &last[..], "ascending order"),
                                Order::Descending => assert!(k < &last[..], "descending order"),
                            }
                        }
                        last = Some(k.to_vec());
                        ControlFlow::Continue(())
                    });
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    let key_count = key_count();
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                let mine: Vec<[u8; 4]> = (0..key_count)
                    .filter(|k| k % threads == t)
                    .map(u32::to_be_bytes)
                    .collect();
                let mut out = Vec::new();
                let mut round = 0u32;
                while round < ROUNDS_MIN || Instant::now() < deadline {
                    for k in &mine {
                        assert!(
                            tree.insert(k, k).unwrap(),
                            "round {round}: insert of an absent key"
                        );
                    }
                    for k in &mine {
                        assert!(tree.get(k, &mut out), "round {round}: lost key {k:?}");
                        assert_eq!(&out[..], k);
                        assert!(
                            !tree.insert(k, b"x").unwrap(),
                            "round {round}: duplicate insert"
                        );
                    }
                    // Drain in an order that differs by round: ascending, then descending.
                    let drain: Box<dyn Iterator<Item = &[u8; 4]>> = if round.is_multiple_of(2) {
                        Box::new(mine.iter())
                    } else {
                        Box::new(mine.iter().rev())
                    };
                    for k in drain {
                        assert!(tree.remove(k), "round {round}: remove of a present key");
                        assert!(
                            !tree.get(k, &mut out),
                            "round {round}: removed key resurrected"
                        );
                    }
                    round += 1;
                }
                round
            })
        })
        .collect();
    for w in writers {
        assert!(w.join().unwrap() >= ROUNDS_MIN);
    }
    stop.store(true, Ordering::Relaxed);
    for s in scanners {
        assert!(s.join().unwrap() > 0);
    }
    done.store(true, Ordering::Relaxed);
    let mut left = 0;
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |_, _| {
            left += 1;
            ControlFlow::Continue(())
        },
    );
    assert_eq!(left, 0);
    let stats = tree.stats();
    assert_eq!(stats.key_count, 0, "{stats:?}");
    assert!(stats.counter(names::SPLITS).unwrap() > 0);
    assert!(stats.counter(names::MERGES).unwrap() > 0);
    assert!(
        stats.counter(counter_names::ROOT_COLLAPSES).unwrap() > 0,
        "{stats:?}"
    );
}
