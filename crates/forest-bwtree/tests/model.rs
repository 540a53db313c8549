//! Single-threaded model tests: the Bw-tree against a `BTreeMap`, with pages small enough
//! that splits (leaf, index, root) and consolidations happen within a few hundred operations.
//! (The shared conformance kit runs in tests/conformance.rs once forest-core provides it.)
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::index::in_bounds;
use forest_core::stats::names;
use forest_core::{Index, Order};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn small_tree() -> BwTree {
    BwTree::with_config(BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        merge_threshold: 2,
        read_consolidate_threshold: 2,
    })
    .expect("valid config")
}

fn collect(
    tree: &BwTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    tree.scan(lower, upper, order, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    });
    out
}

fn key(i: u32) -> Vec<u8> {
    format!("{i}").into_bytes()
}

// Goal: every operation agrees with a BTreeMap, including scans in both orders over random
// bounds. Method: 20k random operations on 300 keys with 4-record pages, checking each result.
#[test]
fn random_operations_match_a_btreemap() {
    // (page size, writers' consolidation threshold, merge threshold, readers' threshold)
    for config in [(4, 1, 2, 1), (4, 2, 0, 0), (7, 8, 3, 1), (64, 8, 16, 8)] {
        let tree = BwTree::with_config(BwTreeConfig {
            max_records_per_page: config.0,
            consolidate_threshold: config.1,
            merge_threshold: config.2,
            read_consolidate_threshold: config.3,
        })
        .expect("valid config");
        let mut model = BTreeMap::<Vec<u8>, Vec<u8>>::new();
        let mut rng = StdRng::seed_from_u64(config.0 as u64 * 31 + u64::from(config.1));
        let mut out = Vec::new();
        for step in 0..20_000u32 {
            let k = format!("k{:03}", rng.random_range(0..300u32)).into_bytes();
            let v = step.to_le_bytes().to_vec();
            match rng.random_range(0..10) {
                0..=2 => {
                    let absent = !model.contains_key(&k);
                    assert_eq!(tree.insert(&k, &v).unwrap(), absent);
                    if absent {
                        model.insert(k.clone(), v.clone());
                    }
                }
                3 => {
                    tree.upsert(&k, &v).unwrap();
                    model.insert(k.clone(), v.clone());
                }
                4 => {
                    let present = model.contains_key(&k);
                    assert_eq!(tree.update(&k, &v).unwrap(), present);
                    if present {
                        model.insert(k.clone(), v.clone());
                    }
                }
                5..=6 => assert_eq!(tree.remove(&k), model.remove(&k).is_some()),
                7..=8 => {
                    let found = tree.get(&k, &mut out);
                    assert_eq!(found.then_some(&out), model.get(&k));
                }
                _ => {
                    let a = format!("k{:03}", rng.random_range(0..300u32)).into_bytes();
                    let b = format!("k{:03}", rng.random_range(0..300u32)).into_bytes();
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    let lower = [
                        Bound::Included(&lo[..]),
                        Bound::Excluded(&lo[..]),
                        Bound::Unbounded,
                    ][step as usize % 3];
                    let upper = [
                        Bound::Included(&hi[..]),
                        Bound::Excluded(&hi[..]),
                        Bound::Unbounded,
                    ][step as usize / 3 % 3];
                    let want: Vec<_> = model
                        .iter()
                        .filter(|(k, _)| in_bounds(k, lower, upper))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(collect(&tree, lower, upper, Order::Ascending), want);
                    let mut rev = want;
                    rev.reverse();
                    assert_eq!(collect(&tree, lower, upper, Order::Descending), rev);
                }
            }
        }
        let all = collect(&tree, Bound::Unbounded, Bound::Unbounded, Order::Ascending);
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }
}

// Goal: splits build a multi-level tree whose stats add up. Method: insert 5000 keys into
// 4-record pages, then check height, node counts, key count and the Table I counters.
#[test]
fn splits_grow_the_tree_and_stats_add_up() {
    let tree = small_tree();
    for i in 0..5000u32 {
        assert!(tree.insert(&key(i * 7919 % 5000 + 100_000), b"v").unwrap());
    }
    let stats = tree.stats();
    assert_eq!(stats.key_count, 5000);
    assert!(stats.height >= 5, "height {}", stats.height);
    assert!(stats.leaf_node_count >= 5000 / 4, "{stats:?}");
    assert!(stats.inner_node_count >= 2, "{stats:?}");
    // Each split adds one page and each root split one more (the new root).
    let pages = stats.leaf_node_count + stats.inner_node_count;
    assert_eq!(
        stats.counter(names::SPLITS).unwrap() + u64::from(stats.height),
        pages
    );
    assert!(stats.counter(names::CONSOLIDATIONS).unwrap() > 0);
    assert_eq!(stats.counter(counter_names::UPDATE_ATTEMPTS), Some(5000));
    assert_eq!(stats.counter(counter_names::FAILED_UPDATES), Some(0));
    assert!(stats.memory_bytes > 5000 * 2);
    let buckets: u64 = counter_names::CHAIN_LEN_BUCKETS
        .iter()
        .map(|n| stats.counter(n).unwrap())
        .sum();
    assert_eq!(buckets, stats.leaf_node_count + stats.inner_node_count);
    let all = collect(&tree, Bound::Unbounded, Bound::Unbounded, Order::Ascending);
    assert_eq!(all.len(), 5000);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
}

// Goal: sequential inserts in both directions and the empty key work with tiny pages. Method:
// ascending then descending key runs, lookups of each, and a scan stopped early.
#[test]
fn sequential_runs_empty_key_and_early_stop() {
    let tree = small_tree();
    assert!(tree.insert(b"", b"empty").unwrap());
    for i in 0..1000u32 {
        tree.upsert(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
        tree.upsert(&(u32::MAX - i).to_be_bytes(), b"hi").unwrap();
    }
    let mut out = Vec::new();
    assert!(tree.get(b"", &mut out));
    assert_eq!(out, b"empty");
    for i in 0..1000u32 {
        assert!(tree.get(&i.to_be_bytes(), &mut out));
        assert_eq!(out, i.to_le_bytes());
    }
    let mut seen = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Descending,
        &mut |k, _| {
            seen.push(k.to_vec());
            if seen.len() == 10 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    );
    assert_eq!(seen.len(), 10);
    assert_eq!(seen[0], u32::MAX.to_be_bytes());
    let down = collect(&tree, Bound::Unbounded, Bound::Unbounded, Order::Descending);
    assert_eq!(down.len(), 2001);
    assert_eq!(down.last().unwrap().0, b"");
}

// Goal: a scan's visitor may write into the tree (no pin is held while it runs), and records
// changed ahead of the cursor are seen. Method: while scanning ascending, update every later
// key; the scan must return each key once, with the updated value for keys after the first.
#[test]
fn visitor_may_write_and_later_updates_are_seen() {
    let tree = small_tree();
    for i in 0..200u32 {
        tree.insert(&i.to_be_bytes(), b"old").unwrap();
    }
    let mut seen = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            let next = u32::from_be_bytes(k.try_into().unwrap()) + 1;
            tree.update(&next.to_be_bytes(), b"new").unwrap();
            ControlFlow::Continue(())
        },
    );
    assert_eq!(seen.len(), 200);
    assert_eq!(seen[0].1, b"old");
    assert!(seen[1..].iter().all(|(_, v)| v == b"new"));
}

// Goal: bad configurations and over-long keys are errors, not panics. Method: try each.
#[test]
fn invalid_input_is_an_error() {
    assert!(BwTree::with_config(BwTreeConfig {
        max_records_per_page: 3,
        consolidate_threshold: 8,
        merge_threshold: 0,
        read_consolidate_threshold: 8,
    })
    .is_err());
    assert!(BwTree::with_config(BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 0,
        merge_threshold: 0,
        read_consolidate_threshold: 0,
    })
    .is_err());
    assert!(BwTree::with_config(BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 8,
        merge_threshold: 5,
        read_consolidate_threshold: 8,
    })
    .is_err());
    let tree = BwTree::new();
    assert_eq!(tree.name(), "bwtree");
    let long = vec![1u8; forest_core::KEY_BYTES_MAX + 1];
    assert!(tree.insert(&long, b"v").is_err());
    assert!(!tree.remove(&long));
    assert!(!tree.get(&long, &mut Vec::new()));
}

// Goal: the tree shrinks back after mass deletes (§IV-B merges and root collapse). Method:
// insert 5000 keys into 4-record pages, remove all but every 100th, and check that the page
// count and height fell, merges happened, and every survivor is still found exactly once.
#[test]
fn mass_deletes_shrink_the_tree() {
    let tree = small_tree();
    for i in 0..5000u32 {
        assert!(tree.insert(&i.to_be_bytes(), b"v").unwrap());
    }
    let peak = tree.stats();
    for i in 0..5000u32 {
        if i % 100 != 0 {
            assert!(tree.remove(&i.to_be_bytes()));
        }
    }
    let after = tree.stats();
    let pages = |s: &forest_core::IndexStats| s.leaf_node_count + s.inner_node_count;
    assert_eq!(after.key_count, 50);
    assert!(
        pages(&after) * 10 < pages(&peak),
        "peak {peak:?}\nafter {after:?}"
    );
    assert!(after.height < peak.height, "peak {peak:?}\nafter {after:?}");
    assert!(after.counter(names::MERGES).unwrap() > 1000);
    assert!(after.counter(counter_names::ROOT_COLLAPSES).unwrap() > 0);
    let survivors: Vec<Vec<u8>> = (0..5000u32)
        .step_by(100)
        .map(|i| i.to_be_bytes().to_vec())
        .collect();
    let keys: Vec<Vec<u8>> = collect(&tree, Bound::Unbounded, Bound::Unbounded, Order::Ascending)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, survivors);
    let mut out = Vec::new();
    assert!(survivors.iter().all(|k| tree.get(k, &mut out)));
    // And it grows again.
    for i in 0..5000u32 {
        tree.upsert(&i.to_be_bytes(), b"w").unwrap();
    }
    assert_eq!(tree.stats().key_count, 5000);
}

// Goal: reads consolidate small pages at the readers' threshold and leave large pages to the
// writers' one (consolidate.rs: READ_CONSOLIDATE_PAGE_BYTES_MAX). Method: count consolidations
// around gets on a page of short records, then on a page of 1 KiB records (over 8 KiB).
#[test]
fn reads_consolidate_small_pages_only() {
    let config = BwTreeConfig {
        max_records_per_page: 64,
        consolidate_threshold: 8,
        read_consolidate_threshold: 1,
        merge_threshold: 0,
    };
    let consolidations = |tree: &BwTree| tree.stats().counter(names::CONSOLIDATIONS).unwrap();
    let mut out = Vec::new();

    let small = BwTree::with_config(config.clone()).unwrap();
    for i in 0..4u8 {
        small.insert(&[i], b"v").unwrap();
    }
    assert_eq!(
        consolidations(&small),
        0,
        "a chain of 4 is within the writers' 8"
    );
    assert!(small.get(&[0], &mut out));
    assert_eq!(
        consolidations(&small),
        1,
        "the read consolidated the chain of 4 > 1"
    );
    assert!(small.get(&[1], &mut out));
    assert_eq!(consolidations(&small), 1, "nothing left to consolidate");

    let large = BwTree::with_config(config).unwrap();
    let value = vec![7u8; 1024];
    for i in 0..9u8 {
        large.insert(&[i], &value).unwrap();
    }
    assert_eq!(
        consolidations(&large),
        1,
        "the 9th delta made the writer consolidate"
    );
    for i in 9..12u8 {
        large.insert(&[i], &value).unwrap();
    }
    assert!(large.get(&[10], &mut out));
    assert_eq!(out, value);
    assert_eq!(
        consolidations(&large),
        1,
        "a 9 KiB page keeps its chain of 3 after a read (writers' threshold 8)"
    );
}
