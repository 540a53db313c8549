//! Concurrent stress of the Bw-tree's own SMO paths: with 4-record pages every thread's
//! fill-and-drain rounds split and merge pages (leaf and index levels, root growth and
//! collapse) while other threads do the same on interleaved keys and scanners walk the tree.
//! The shared kit's stress checks run in tests/conformance.rs; this one aims at SMO races.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

const KEY_COUNT: u32 = 20_000;
const ROUNDS: u32 = 10;

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
    });
}

fn fill_and_drain(config: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(config).unwrap());
    let threads = thread_count();
    let stop = Arc::new(AtomicBool::new(false));
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
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                let mine: Vec<[u8; 4]> = (0..KEY_COUNT)
                    .filter(|k| k % threads == t)
                    .map(u32::to_be_bytes)
                    .collect();
                let mut out = Vec::new();
                for round in 0..ROUNDS {
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
                    let drain: Box<dyn Iterator<Item = &[u8; 4]>> = if round % 2 == 0 {
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
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for s in scanners {
        assert!(s.join().unwrap() > 0);
    }
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
