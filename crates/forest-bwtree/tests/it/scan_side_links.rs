//! Scans that move to the next page by its side link (scan.rs, Bw-tree §III-C) while that
//! page splits, merges or consolidates under them: the scan's visitor makes the change itself
//! (a visitor runs without a pin and may write to the index), at every position of the scan in
//! turn, so that each page boundary is crossed right after its neighbour changed. Single
//! threaded, so the answer is exact: the records handed out before the change, then the
//! records beyond the cursor as they are after it (§III-C: an update to the unreturned part
//! is seen). Both orders, unhinted and with length hints (`Index::scan_hinted`: batches
//! sized by the hint, ending before, at and past the change).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

/// Four records per page: a change of a few keys splits or merges the neighbouring pages.
fn small_tree() -> BwTree {
    BwTree::with_config(BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        merge_threshold: 2,
        read_consolidate_threshold: 2,
    })
    .expect("valid config")
}

fn key(i: u32) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// What the visitor does to the keys just beyond the cursor.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Inserts keys between the next ones: the next pages split.
    Split,
    /// Removes the next keys: the next pages merge away.
    Merge,
    /// Rewrites the next keys' values twice: the next pages' chains grow and consolidate.
    Consolidate,
}

const KEYS: u32 = 60;

/// Scans the whole tree of even keys in `order` (through `scan_hinted` if `hint` is given);
/// after handing out `at` records the visitor applies `change` beyond the cursor. Checks the
/// records against the model and returns the tree's counters of splits, merges and
/// consolidations.
fn scan_with_change(order: Order, change: Change, at: usize, hint: Option<usize>) -> [u64; 3] {
    let tree = small_tree();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for i in (0..KEYS).step_by(2) {
        tree.insert(&key(i), b"old").unwrap();
        model.insert(key(i), b"old".to_vec());
    }
    let before: Vec<(Vec<u8>, Vec<u8>)> = match order {
        Order::Ascending => model.clone().into_iter().collect(),
        Order::Descending => model.clone().into_iter().rev().collect(),
    };
    let counters = |tree: &BwTree| {
        let stats = tree.stats();
        [names::SPLITS, names::MERGES, names::CONSOLIDATIONS].map(|n| stats.counter(n).unwrap())
    };
    let start = counters(&tree);
    let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut cursor = None;
    let mut visit = |k: &[u8], v: &[u8]| {
        got.push((k.to_vec(), v.to_vec()));
        if got.len() == at {
            let c = u32::from_be_bytes(k.try_into().unwrap());
            cursor = Some(c);
            // The keys beyond the cursor, nearest first.
            let beyond = |step: u32| -> Vec<u32> {
                (1..=8)
                    .filter_map(|n| match order {
                        Order::Ascending => Some(c + n * step).filter(|&k| k < KEYS),
                        Order::Descending => c.checked_sub(n * step),
                    })
                    .collect()
            };
            match change {
                Change::Split => {
                    for k in beyond(1).into_iter().filter(|k| k % 2 == 1) {
                        tree.insert(&key(k), b"new").unwrap();
                        model.insert(key(k), b"new".to_vec());
                    }
                }
                Change::Merge => {
                    for k in beyond(2) {
                        assert!(tree.remove(&key(k)));
                        model.remove(&key(k));
                    }
                }
                Change::Consolidate => {
                    for round in [&b"new1"[..], b"new2"] {
                        for k in beyond(2) {
                            assert!(tree.update(&key(k), round).unwrap());
                            model.insert(key(k), round.to_vec());
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    };
    let (lower, upper) = (Bound::Unbounded, Bound::Unbounded);
    match hint {
        Some(hint) => tree.scan_hinted(lower, upper, order, hint, &mut visit),
        None => tree.scan(lower, upper, order, &mut visit),
    }
    let c = cursor.unwrap();
    let after: Vec<(Vec<u8>, Vec<u8>)> = match order {
        Order::Ascending => model.range(key(c + 1)..).map(clone).collect(),
        Order::Descending => model.range(..key(c)).rev().map(clone).collect(),
    };
    let want: Vec<(Vec<u8>, Vec<u8>)> = before[..at].iter().cloned().chain(after).collect();
    assert_eq!(
        got, want,
        "{order:?} scan (hint {hint:?}), {change:?} after {at} records: the records before the \
         change, then the rest as changed"
    );
    let end = counters(&tree);
    [0, 1, 2].map(|i| end[i] - start[i])
}

fn clone((k, v): (&Vec<u8>, &Vec<u8>)) -> (Vec<u8>, Vec<u8>) {
    (k.clone(), v.clone())
}

/// Every position of the scan, both orders, without a hint and with hints whose batches end
/// before, at and past the change: the change meets each page boundary.
fn every_position(change: Change, counter: usize) {
    for order in [Order::Ascending, Order::Descending] {
        let mut happened = 0;
        for at in 1..=(KEYS / 2) as usize {
            for hint in [None, Some(1), Some(3), Some(at), Some(at + 1)] {
                happened += scan_with_change(order, change, at, hint)[counter];
            }
        }
        assert!(
            happened > 0,
            "{order:?}, {change:?}: the change never happened"
        );
    }
}

// Goal: a scan crossing to a page that split after the scan copied the page before it gets
// every record, including those the split moved right, once. Method: the visitor inserts
// between the next keys at each position in turn (see the module doc).
#[test]
fn scan_meets_a_split_of_the_next_page() {
    every_position(Change::Split, 0);
}

// Goal: a scan whose next page was merged away (its PID freed and possibly reused) finds the
// records' new page and loses or repeats none. Method: the visitor removes the next keys.
#[test]
fn scan_meets_a_merge_of_the_next_page() {
    every_position(Change::Merge, 1);
}

// Goal: a scan whose next page was consolidated (a new state at its PID) reads the new values.
// Method: the visitor rewrites the next keys twice.
#[test]
fn scan_meets_a_consolidation_of_the_next_page() {
    every_position(Change::Consolidate, 2);
}

// Goal: a long scan over pages of one base page each crosses by side link without falling
// back to descents, and the budgeted batches (doubling) resume in the middle of a page; the
// records are all there, once, both orders, with every kind of bound. Method: a tree of 128-key
// pages, scans from every tenth key with included and excluded bounds.
#[test]
fn budgeted_batches_resume_within_pages() {
    let tree = BwTree::new();
    let n = 5_000u32;
    for i in 0..n {
        tree.insert(&key(i), &i.to_le_bytes().repeat(40)).unwrap();
    }
    assert!(tree.stats().counter(counter_names::FAILED_SPLITS).is_some());
    for from in (0..n).step_by(499) {
        for bound in [Bound::Included(key(from)), Bound::Excluded(key(from))] {
            let b = bound.as_ref().map(|k| &k[..]);
            for order in [Order::Ascending, Order::Descending] {
                let (lower, upper) = match order {
                    Order::Ascending => (b, Bound::Unbounded),
                    Order::Descending => (Bound::Unbounded, b),
                };
                let mut got = Vec::new();
                tree.scan(lower, upper, order, &mut |k, v| {
                    let i = u32::from_be_bytes(k.try_into().unwrap());
                    assert_eq!(v, &i.to_le_bytes().repeat(40)[..]);
                    got.push(i);
                    ControlFlow::Continue(())
                });
                let skip = u32::from(matches!(bound, Bound::Excluded(_)));
                let want: Vec<u32> = match order {
                    Order::Ascending => (from + skip..n).collect(),
                    Order::Descending => (0..(from + 1 - skip)).rev().collect(),
                };
                assert_eq!(got, want, "{order:?} from {bound:?}");
            }
        }
    }
}
