//! Structural tests of the lock-coupling B+tree: configuration limits, height growth and
//! shrinkage, the invariant checker after random operation batches, and concurrent
//! multi-pass writes on a small order.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_core::stats::names;
use forest_core::{Error, Index, Order};
use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch, ORDER_MAX, ORDER_MIN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn tree(order: usize, search: NodeSearch) -> LockBTree {
    LockBTree::with_config(LockBTreeConfig { order, search }).expect("a valid order")
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn all_records(tree: &LockBTree) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut records = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            records.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    );
    records
}

#[test]
fn config_rejects_orders_out_of_range() {
    // Goal: bad orders are Error::Config, the limits themselves are accepted; method: try
    // each side of both limits.
    for order in [0, 1, ORDER_MIN - 1, ORDER_MAX + 1] {
        let result = LockBTree::with_config(LockBTreeConfig {
            order,
            search: NodeSearch::Binary,
        });
        assert!(
            matches!(result, Err(Error::Config(_))),
            "order {order} accepted"
        );
    }
    for order in [ORDER_MIN, ORDER_MAX] {
        let t = tree(order, NodeSearch::Linear);
        assert_eq!(t.config().order, order);
        t.insert(b"k", b"v").unwrap();
    }
}

#[test]
fn height_grows_with_inserts_and_shrinks_back_after_removing_all() {
    // Goal: splits grow the tree and merges plus root collapse shrink it back to one leaf;
    // method: order 4, 2 000 keys in, heights and node counts checked, then all out in an
    // interleaved order.
    let t = tree(4, NodeSearch::Binary);
    let empty = t.stats();
    assert_eq!(
        (empty.height, empty.leaf_node_count, empty.inner_node_count),
        (1, 1, 0)
    );
    let mut last_height = 1;
    for n in 0..2_000u64 {
        assert!(t.insert(&key(n), &n.to_le_bytes()).unwrap());
        let height = t.stats().height;
        assert!(height >= last_height, "height fell on insert");
        last_height = height;
    }
    t.check_invariants().unwrap();
    let full = t.stats();
    assert_eq!(full.key_count, 2_000);
    assert!(
        full.height >= 6,
        "height {} for 2 000 keys at order 4",
        full.height
    );
    assert!(full.inner_node_count > 0);
    assert!(full.counter(names::SPLITS).unwrap() > 0);
    // Remove evens, then odds, so merges and borrows both happen.
    for n in (0..2_000u64).step_by(2).chain((1..2_000u64).step_by(2)) {
        assert!(t.remove(&key(n)), "{n} missing");
    }
    t.check_invariants().unwrap();
    let after = t.stats();
    assert_eq!(after.key_count, 0);
    assert_eq!(after.height, 1);
    assert_eq!((after.leaf_node_count, after.inner_node_count), (1, 0));
    assert!(after.counter(names::MERGES).unwrap() > 0);
    assert!(after.counter(names::BORROWS).unwrap() > 0);
    assert!(after.memory_bytes < full.memory_bytes);
    assert!(all_records(&t).is_empty());
}

/// A random key: short or long, sharing prefixes across the 8-byte boundary.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    let n: u32 = rng.random_range(0..400);
    match rng.random_range(0..5) {
        0 => n.to_be_bytes().to_vec(),
        1 => format!("prefix{n}").into_bytes(),
        2 => format!("sharedprefix/{n:05}").into_bytes(),
        // 19 to 42 bytes: around the key slot's inline limit (30).
        3 => format!("sharedprefix/{n:05}/{}", "x".repeat(n as usize % 24)).into_bytes(),
        _ => vec![b'a'; (n % 12) as usize],
    }
}

#[test]
fn random_batches_keep_the_invariants() {
    // Goal: every operation keeps the B+tree invariants and the contents of a BTreeMap model;
    // method: batches of random writes on orders 4 to 9, both searches, with the invariant
    // checker and a full comparison after each batch.
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    for order in 4..=9 {
        for search in [NodeSearch::Linear, NodeSearch::Binary] {
            let t = tree(order, search);
            let mut model = BTreeMap::new();
            for batch in 0..30 {
                // Alternate growing and shrinking phases.
                let insert_share = if batch % 3 == 2 { 0.2 } else { 0.7 };
                for _ in 0..200 {
                    let k = random_key(&mut rng);
                    let v = vec![rng.random::<u8>(); rng.random_range(0..10)];
                    if rng.random_bool(insert_share) {
                        match rng.random_range(0..3) {
                            0 => {
                                let absent = !model.contains_key(&k);
                                assert_eq!(t.insert(&k, &v).unwrap(), absent, "seed {seed}");
                                model.entry(k.clone()).or_insert_with(|| v.clone());
                            }
                            1 => {
                                t.upsert(&k, &v).unwrap();
                                model.insert(k.clone(), v.clone());
                            }
                            _ => {
                                let present = model.contains_key(&k);
                                assert_eq!(t.update(&k, &v).unwrap(), present, "seed {seed}");
                                if present {
                                    model.insert(k.clone(), v.clone());
                                }
                            }
                        }
                        let mut out = Vec::new();
                        assert_eq!(t.get(&k, &mut out), model.contains_key(&k), "seed {seed}");
                    } else {
                        assert_eq!(t.remove(&k), model.remove(&k).is_some(), "seed {seed}");
                    }
                }
                t.check_invariants()
                    .unwrap_or_else(|e| panic!("seed {seed} order {order} {search:?}: {e}"));
                let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(
                    all_records(&t),
                    want,
                    "seed {seed} order {order} {search:?}"
                );
                assert_eq!(t.stats().key_count, model.len() as u64, "seed {seed}");
            }
        }
    }
}

#[test]
fn concurrent_splits_and_merges_restart_and_lose_nothing() {
    // Goal: writers that split and merge the same nodes at once go through restarts and dry
    // runs without losing or duplicating a record; method: order 4, threads insert
    // interleaved keys (so they hit the same leaves), then remove them interleaved, with
    // readers running gets throughout; contents and invariants checked after each phase.
    const THREAD_COUNT: u64 = 4;
    const KEY_COUNT: u64 = 20_000;
    let t = Arc::new(tree(4, NodeSearch::Linear));
    let run = |phase: u64| {
        std::thread::scope(|s| {
            for id in 0..THREAD_COUNT {
                let t = &t;
                s.spawn(move || {
                    for n in (id..KEY_COUNT).step_by(THREAD_COUNT as usize) {
                        if phase == 0 {
                            assert!(t.insert(&key(n), &key(n)).unwrap());
                        } else if n % 4 != 0 {
                            assert!(t.remove(&key(n)), "{n} missing");
                        }
                    }
                });
            }
            let t = &t;
            s.spawn(move || {
                let mut out = Vec::new();
                for n in (0..KEY_COUNT).step_by(3) {
                    if t.get(&key(n), &mut out) {
                        assert_eq!(out, key(n));
                    }
                }
            });
        });
    };
    run(0);
    t.check_invariants().unwrap();
    assert_eq!(t.stats().key_count, KEY_COUNT);
    let stats = t.stats();
    assert!(stats.counter(names::RESTARTS).unwrap() > 0);
    assert!(stats.counter(names::SPLITS).unwrap() > 0);
    run(1);
    t.check_invariants().unwrap();
    let left: Vec<_> = all_records(&t).into_iter().map(|(k, _)| k).collect();
    let want: Vec<_> = (0..KEY_COUNT).step_by(4).map(|n| key(n).to_vec()).collect();
    assert_eq!(left, want);
    let stats = t.stats();
    eprintln!("counters after the concurrent phases: {:?}", stats.counters);
    assert!(stats.counter(names::MERGES).unwrap() > 0);
}

#[test]
fn stats_account_memory_and_keep_every_counter() {
    // Goal: stats name every counter of the engine and memory grows with data; method:
    // compare an empty tree with one holding 10 000 records of 100-byte values.
    let t = LockBTree::new();
    let empty = t.stats();
    for name in [
        names::RESTARTS,
        names::SPLITS,
        names::MERGES,
        names::BORROWS,
        names::LATCH_WAITS,
        "dry_runs",
    ] {
        assert!(empty.counter(name).is_some(), "{name} missing");
    }
    for n in 0..10_000u64 {
        t.upsert(&key(n), &[7u8; 100]).unwrap();
    }
    let full = t.stats();
    assert!(full.memory_bytes >= empty.memory_bytes + 10_000 * (8 + 100));
    assert!(
        full.memory_bytes < 10_000 * 1_000,
        "{} bytes",
        full.memory_bytes
    );
    assert_eq!(full.key_count, 10_000);
}
