//! Single-threaded tests of what is the Bw-tree's own, beyond the conformance kit (which
//! tests/conformance.rs runs against a model on the default and on small-page configurations):
//! the tree's shape and its stats after splits (§IV-A) and after merges and root collapses
//! (§IV-B), a scan's record vector rebuilt when records ahead of its cursor change (§III-C),
//! the configuration's checks, and the readers' consolidation of small pages only (§III-B).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::{Bound, ControlFlow};

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

use crate::common::scan_all;

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

// Goal: bad configurations are errors, not panics (over-long keys and values: the kit's
// `edge_size_limits`). Method: try each.
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
    assert_eq!(BwTree::new().name(), "bwtree");
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

// Goal: a leaf sized in bytes (its records too large for max_records_per_page of them to fit
// in LEAF_BYTES_MAX) is consolidated by readers only at the writers' threshold, as the old
// leaves of such records (above 8 KiB) were, while a leaf of small records keeps the readers'
// threshold (consolidate.rs `consolidate_after_read`). Method: insert 16 records into a
// one-leaf tree, then more until a writer consolidates (the chain is then empty), add three deltas (below the writers'
// threshold 4), read, and count the read's consolidations; once with 100-byte values, once
// with 1-byte ones (8-byte values and short keys already average over 32 bytes a record with
// the slots, so that leaf is sized in bytes too). Failed before: a 4 KiB YCSB leaf was under the 8 KiB line and each read
// after a write consolidated.
#[test]
fn reads_leave_byte_sized_leaves_to_the_writers_threshold() {
    let read_consolidates = |value_len: usize| {
        let value = vec![3u8; value_len];
        let (tree, i) = three_deltas_past_a_consolidation(&value);
        let count = || tree.stats().counter(names::CONSOLIDATIONS).unwrap();
        let before = count();
        let mut out = Vec::new();
        assert!(tree.get(&key(i - 1), &mut out));
        assert_eq!(out, value);
        assert_eq!(tree.stats().key_count, u64::from(i));
        count() - before
    };
    assert_eq!(
        read_consolidates(100),
        0,
        "the read leaves a chain of 3 (byte-sized leaf: writers' 4 x 2)"
    );
    assert_eq!(
        read_consolidates(1),
        1,
        "a leaf of small records is consolidated by the read (readers' threshold 1)"
    );
}

// Goal: a scan that reads a leaf sized in bytes consolidates it past a chain of one delta
// (consolidate.rs `consolidate_after_scan`, §III-B "the thread that noticed"), both the copying
// scan and the pinned one, while a get leaves the same chain to the writers' threshold (8).
// Method: as `reads_leave_byte_sized_leaves_to_the_writers_threshold`, 100-byte values: after
// a writer's consolidation add three deltas, get one key (no consolidation), then scan (one
// consolidation, the leaf's records all seen). Failed before: scans kept the leaf's chain up
// to 8 deltas and walked it on every read (YCSB-E at 2 threads fell to 0.69x scc-tree).
#[test]
fn scans_consolidate_byte_sized_leaves_past_one_delta() {
    for pinned in [false, true] {
        let value = vec![3u8; 100];
        let (tree, i) = three_deltas_past_a_consolidation(&value);
        let count = || tree.stats().counter(names::CONSOLIDATIONS).unwrap();
        let before = count();
        let mut out = Vec::new();
        assert!(tree.get(&key(i - 1), &mut out));
        assert_eq!(
            count(),
            before,
            "a get leaves a chain of 3 (writers' 4 x 2)"
        );
        let mut seen = 0u32;
        let mut visit = |_: &[u8], v: &[u8]| {
            assert_eq!(v, &value[..]);
            seen += 1;
            ControlFlow::Continue(())
        };
        scan_all(&tree, pinned, &mut visit);
        assert_eq!(seen, i, "pinned: {pinned}");
        assert_eq!(
            count() - before,
            1,
            "the scan consolidated (pinned: {pinned})"
        );
    }
}

// Goal: leaves of large records split at about LEAF_BYTES_MAX, not at max_records_per_page,
// while leaves of small records keep the record count (insert.rs `page_limits`). Method: load
// 2000 keys with 100-byte values and with 8-byte values into default trees and compare the
// leaf counts with what each page size allows.
#[test]
fn leaves_of_large_records_split_by_bytes() {
    let leaves = |value_len: usize| {
        let tree = BwTree::new();
        let value = vec![5u8; value_len];
        for i in 0..2000u32 {
            tree.insert(format!("user{:08}", i * 7919 % 2000).as_bytes(), &value)
                .unwrap();
        }
        let stats = tree.stats();
        assert_eq!(stats.key_count, 2000);
        // Inserts only: a page split below its limit must not merge back at once.
        assert_eq!(
            stats.counter(names::MERGES),
            Some(0),
            "{value_len}-byte values"
        );
        stats.leaf_node_count
    };
    let (large, small) = (leaves(100), leaves(8));
    let limit = forest_bwtree::LEAF_BYTES_MAX / (100 + 12 + 16); // value, key, prefix and slot
    assert!(
        large >= 2000 / limit as u64,
        "{large} leaves of 100-byte records: at most {limit} records each"
    );
    // Before: 128-record leaves either way; half-full pages hold 64 records.
    assert!(small <= 2000 / 64 + 1, "{small} leaves of 8-byte records");
    assert!(
        large > 2 * small,
        "{large} large-record leaves, {small} small-record ones"
    );
}

fn merges_and_leaves(tree: &BwTree) -> (u64, u64) {
    let stats = tree.stats();
    (
        stats.counter(names::MERGES).unwrap_or(0),
        stats.leaf_node_count,
    )
}

// Goal: hysteresis (insert.rs `page_limits`, merge.rs `merge_fits_left`): a leaf below its
// merge threshold does not merge when the merged page would exceed the left sibling's split
// limit (it would split again), and merges once it fits. Method: 2000-byte values (split limit
// 32, merge threshold 16 by default); 33 keys split into two leaves, the left one refilled to
// 30 records; the right one emptied to 7 records (30 + 7 > 32: no merge; before the
// hysteresis it merged and split again), then the left one shrunk to 20 and one more delete on
// the right (20 + 6 <= 32: merges).
#[test]
fn leaf_merge_skipped_when_the_merged_page_would_split() {
    let tree = BwTree::new();
    let key = |i: u32| format!("user{i:08}").into_bytes();
    let value = vec![9u8; 2000];
    for i in 0..33 {
        tree.insert(&key(i * 10), &value).unwrap();
    }
    assert_eq!(
        merges_and_leaves(&tree),
        (0, 2),
        "33 large records: one split"
    );
    // The left leaf holds keys 0..16 (times 10): refill it between them.
    for i in 0..14 {
        tree.insert(&key(i * 10 + 5), &value).unwrap();
    }
    assert_eq!(merges_and_leaves(&tree), (0, 2), "left leaf at 30 records");
    for i in 16..26 {
        assert!(tree.remove(&key(i * 10)));
    }
    assert_eq!(
        merges_and_leaves(&tree),
        (0, 2),
        "right leaf at 7 records: 30 + 7 would exceed the left leaf's limit of 32"
    );
    for i in 0..10 {
        assert!(tree.remove(&key(i * 10 + 5)));
    }
    assert!(tree.remove(&key(260)));
    assert_eq!(
        merges_and_leaves(&tree),
        (1, 1),
        "20 + 6 records fit one leaf"
    );
    assert_eq!(tree.stats().key_count, 26);
}

// Goal: the leaves' merge threshold is the configured one capped at half the floor of the
// split limits (a quarter of max_records_per_page), also for leaves of small records
// (insert.rs `page_limits`: a page just split never merges back). Method: default config
// (128 records, merge 32: leaves merge below 16); 129 keys of 8 bytes split into 64 + 65; the
// right leaf is emptied to 16 records (no merge; 32 before the hysteresis), then to 15
// (merges).
#[test]
fn small_record_leaves_merge_below_the_capped_threshold() {
    let tree = BwTree::new();
    let key = |i: u32| format!("k{i:06}").into_bytes();
    for i in 0..129 {
        tree.insert(&key(i), b"8 bytes!").unwrap();
    }
    assert_eq!(merges_and_leaves(&tree), (0, 2));
    let mut i = 128;
    while tree.stats().key_count > 64 + 16 {
        assert!(tree.remove(&key(i)));
        i -= 1;
    }
    assert_eq!(merges_and_leaves(&tree), (0, 2), "right leaf at 16 records");
    assert!(tree.remove(&key(i)));
    assert_eq!(merges_and_leaves(&tree), (1, 1), "right leaf at 15 records");
}

/// A tree with one leaf whose writer consolidated it (16 records first, so the base page's
/// records decide its limits), then three more inserts on top: the tree and the next key.
fn three_deltas_past_a_consolidation(value: &[u8]) -> (BwTree, u32) {
    let tree = BwTree::new();
    let count = || tree.stats().counter(names::CONSOLIDATIONS).unwrap();
    let mut i = 0u32;
    while i < 16 {
        tree.insert(&key(i), value).unwrap();
        i += 1;
    }
    let start = count();
    while count() == start {
        tree.insert(&key(i), value).unwrap();
        i += 1;
        assert!(i < 100, "no writer consolidated");
    }
    for _ in 0..3 {
        tree.insert(&key(i), value).unwrap();
        i += 1;
    }
    (tree, i)
}
