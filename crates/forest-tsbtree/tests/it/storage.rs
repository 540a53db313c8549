//! tsbtree on LSS-C (issue 18, step 0 of LSS-H; `src/storage.rs`): the conformance and
//! temporal kits with a budget of a few pages (nearly every access loads one) and a large
//! one; every version read back as of its time after eviction; historical pages evicted
//! first; a version above the flush limit keeps its page resident; a damaged piece fails the
//! operation with a named error; flushes and evictions racing writers, key splits and time
//! splits (checked results).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_core::{Error, Index, Order, TemporalIndex};
use forest_file::SimDir;
use forest_tsbtree::{counter_names, TsbConfig, TsbFlush, TsbTree};

use crate::on_lss::{flip_record, lss_on, small, tree_on};

/// Small pages and 8 resident pages: nearly every access loads a page.
pub fn tiny_budget() -> TsbTree {
    tree_on(small(), Some(8), 7).0
}

/// The default pages and room for 512: the kit's trees evict only late, if at all.
pub fn large_budget() -> TsbTree {
    tree_on(TsbConfig::default(), Some(512), 8).0
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats().counter(name).unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Each key's versions (timestamp, value or None for a tombstone), oldest first.
type Model = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;

pub fn history(tree: &TsbTree, k: &[u8]) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    tree.history(k, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.map(<[u8]>::to_vec)));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// The kits' sizes, cut further than `conformance.rs`'s for small pages: under a tiny
/// budget nearly every access reads the LSS (a simulated device). Every check still runs; the
/// scan-bound checks take every 4th of their 57 x 57 bound pairs (coprime: every bound still
/// meets dozens of others on each side).
fn sizes() -> forest_core::conformance::Sizes {
    let full = forest_core::conformance::Sizes::for_build();
    forest_core::conformance::Sizes {
        order_key_count: full.order_key_count.min(2_000),
        stress_op_count: full.stress_op_count.min(5_000),
        scan_pair_stride: full.scan_pair_stride.max(4),
        ..full
    }
}

/// The tiny budget's sizes, cut again for CI's time budget (the storage module took 122 s of
/// CPU in debug with [`sizes`] here): 500 order keys (still several levels of 4-record
/// pages), 2 000 stress ops, a quarter of the model cases, and every 7th bound pair of the
/// scan-bound checks (coprime with 57: each bound meets 8 others on each side).
pub fn tiny_sizes() -> forest_core::conformance::Sizes {
    let full = forest_core::conformance::Sizes::for_build();
    forest_core::conformance::Sizes {
        model_small_case_count: (full.model_small_case_count / 4).max(16),
        model_many_case_count: (full.model_many_case_count / 4).max(4),
        order_key_count: full.order_key_count.min(500),
        stress_op_count: full.stress_op_count.min(2_000),
        scan_pair_stride: full.scan_pair_stride.max(7),
        ..full
    }
}

forest_core::conformance_tests!(
    kit_tiny_budget,
    super::tiny_budget,
    sizes = super::tiny_sizes()
);
forest_core::conformance_tests!(
    kit_large_budget,
    super::large_budget,
    sizes = super::sizes()
);
forest_core::temporal_conformance_tests!(
    temporal_tiny_budget,
    super::tiny_budget,
    sizes = super::tiny_sizes()
);
forest_core::temporal_conformance_tests!(
    temporal_large_budget,
    super::large_budget,
    sizes = super::sizes()
);

// Goal: under a budget of a few pages every version of every key reads back as of its time,
// and histories are whole, while pages are evicted and loaded over and over. Method: 300
// keys, 6 rounds of updates and some deletes on small pages (key and time splits) with 6
// resident pages; the model holds every (key, ts) written; then every key's history, an
// as-of get at every version's time and an as-of scan at a middle time are checked.
#[test]
fn every_version_reads_back_as_of_its_time_under_a_tiny_budget() {
    let (tree, _sim) = tree_on(small(), Some(6), 1);
    let mut model: Model = BTreeMap::new();
    for round in 0..6u32 {
        for i in 0..300u32 {
            let k = key((i * 37) % 300);
            let ts = if round > 0 && i % 11 == round {
                match tree.remove_ts(&k) {
                    Some(ts) => ts,
                    None => continue,
                }
            } else {
                tree.upsert_ts(&k, format!("v{round}").as_bytes()).unwrap()
            };
            let value = (!(round > 0 && i % 11 == round)).then(|| format!("v{round}").into_bytes());
            model.entry(k).or_default().push((ts, value));
        }
        assert!(tree.resident_pages() <= 6 + 8, "{}", tree.resident_pages());
    }
    assert!(counter(&tree, counter_names::EVICTIONS) > 100);
    assert!(counter(&tree, counter_names::LOADS) > 100);
    assert!(counter(&tree, counter_names::TIME_SPLITS) > 0);
    assert!(counter(&tree, counter_names::KEY_SPLITS) > 0);
    assert_eq!(tree.load_errors(), 0);
    let mut out = Vec::new();
    for (k, versions) in &model {
        assert_eq!(&history(&tree, k), versions, "history of {k:?}");
        for (ts, value) in versions {
            let found = tree.get_as_of(k, *ts, &mut out).unwrap();
            assert_eq!(
                found.then(|| out.clone()),
                value.clone(),
                "{k:?} as of {ts}"
            );
        }
    }
    let middle = model.values().map(|v| v[v.len() / 2].0).max().unwrap();
    let mut scanned = Vec::new();
    tree.scan_as_of(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        middle,
        &mut |k, v| {
            scanned.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    )
    .unwrap();
    let want: Vec<_> = model
        .iter()
        .filter_map(|(k, vs)| {
            let v = vs.iter().rev().find(|(ts, _)| *ts <= middle)?;
            v.1.clone().map(|v| (k.clone(), v))
        })
        .collect();
    assert_eq!(scanned, want);
    tree.check_structure().unwrap();
}

// Goal: historical pages, which never change, are the first evicted. Method: hot keys on
// small pages make historical pages in memory (more than a quarter of all pages); the tree
// then goes on an LSS with a budget of one page less than it holds, so that eviction (down
// to three quarters of the budget) can be met by historical pages alone; after
// `evict_to_budget` every evicted page is historical (its time range ends before infinity).
#[test]
fn historical_pages_are_evicted_first() {
    let tree = TsbTree::with_config(small()).unwrap();
    for i in 0..40u32 {
        tree.upsert(&key(i), b"v0").unwrap();
    }
    for round in 0..200u32 {
        tree.upsert(&key(round % 5), format!("v{round}").as_bytes())
            .unwrap();
    }
    let historical = counter(&tree, counter_names::HISTORICAL_PAGES) as usize;
    let pages = tree.page_ids().len();
    assert!(historical > pages / 4 + 1, "{historical} of {pages}");
    let sim = SimDir::new(2);
    let tree = tree.with_lss(lss_on(&sim), Some(pages - 1)).unwrap();
    assert!(tree.evict_to_budget().unwrap() > 0);
    let evicted: Vec<_> = tree
        .page_ids()
        .into_iter()
        .filter(|&p| tree.evicted_at(p).is_some())
        .collect();
    assert!(!evicted.is_empty());
    for pid in evicted {
        let (_, end) = tree.page_time_range(pid).unwrap().unwrap();
        assert!(end < u64::MAX, "page {pid} is current");
    }
}

// Goal: a version above the flush limit is held back: its page's image leaves it out and the
// page is not evicted until the limit passes it. Method: limit set below a write's
// timestamp; flush and evict the leaf (refused); raise the limit; evict (done), read back.
#[test]
fn a_version_above_the_flush_limit_keeps_its_page_resident() {
    let (tree, _sim) = tree_on(TsbConfig::default(), None, 3);
    let old = tree.upsert_ts(b"a", b"1").unwrap();
    tree.set_flush_limit(old);
    let held = tree.upsert_ts(b"b", b"2").unwrap();
    let leaf = tree.page_ids()[0];
    assert!(matches!(
        tree.flush_page(leaf).unwrap(),
        TsbFlush::Flushed { .. }
    ));
    assert!(!tree.evict_pid(leaf).unwrap(), "held back: stays resident");
    tree.set_flush_limit(held);
    assert!(tree.evict_pid(leaf).unwrap());
    let mut out = Vec::new();
    assert!(tree.get(b"b", &mut out));
    assert_eq!(out, b"2");
    assert!(tree.get_as_of(b"b", old, &mut out).is_ok_and(|f| !f));
    assert_eq!(counter(&tree, counter_names::LOADS), 1);
}

// Goal: a damaged piece fails the operation that needs it with an error naming the segment
// file, the offset in it and the page; nothing panics; other pages still work. Method: evict
// every page, flip a byte in the piece of the leaf holding key 0, then get, get_as_of,
// upsert and history of key 0.
#[test]
fn a_damaged_piece_fails_the_operation_with_a_named_error() {
    let (tree, sim) = tree_on(small(), None, 4);
    for i in 0..40 {
        tree.upsert(&key(i), b"value").unwrap();
    }
    for pid in tree.page_ids() {
        assert!(tree.evict_pid(pid).unwrap(), "page {pid} evicts");
    }
    // Finding the leaf loads its path: evict it again.
    let victim = tree.leaf_pid(&key(0)).unwrap();
    for pid in tree.page_ids() {
        tree.evict_pid(pid).unwrap();
    }
    let (name, at) = flip_record(&sim, tree.evicted_at(victim).unwrap());
    let check = |e: Error| {
        let text = e.to_string();
        let Error::Corrupt { path, offset, .. } = &e else {
            panic!("not a corruption error: {text}");
        };
        assert!(path.ends_with(&name), "{text}");
        assert_eq!(*offset, at as u64, "{text}");
        assert!(text.contains(&format!("page {victim}")), "{text}");
    };
    let mut out = Vec::new();
    assert!(!tree.get(&key(0), &mut out));
    check(tree.take_load_error().expect("get recorded its error"));
    check(tree.get_as_of(&key(0), u64::MAX - 1, &mut out).unwrap_err());
    check(tree.upsert(&key(0), b"again").unwrap_err());
    check(
        tree.history(&key(0), 0, u64::MAX, Order::Ascending, &mut |_, _| {
            ControlFlow::Continue(())
        })
        .unwrap_err(),
    );
    assert!(tree.get(&key(39), &mut out));
    assert_eq!(out, b"value");
}

// Goal: flushes and evictions racing writers, key splits and time splits lose nothing and
// duplicate nothing. Method: 3 writer threads on disjoint keys (upserts and removes on small
// pages: both splits) while a fourth thread flushes and evicts every page in turn and a
// budget of 8 pages evicts after operations; each writer then checks its keys' histories
// against its own model, and the structure is checked.
#[test]
fn flushes_and_evictions_race_writes_and_splits() {
    let (tree, _sim) = tree_on(small(), Some(8), 5);
    let tree = Arc::new(tree);
    let stop = Arc::new(AtomicBool::new(false));
    let evictor = {
        let tree = Arc::clone(&tree);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 3 {
                for pid in tree.page_ids() {
                    tree.flush_page(pid).unwrap();
                    tree.evict_pid(pid).unwrap();
                }
                rounds += 1;
            }
            rounds
        })
    };
    let writers: Vec<_> = (0..3u32)
        .map(|w| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                let mut model: Model = BTreeMap::new();
                for op in 0..1_500u32 {
                    let k = key(w + 3 * (op % 60));
                    let ts = if op % 7 == 3 {
                        tree.remove_ts(&k).map(|ts| (ts, None))
                    } else {
                        let v = format!("w{w}-{op}").into_bytes();
                        Some((tree.upsert_ts(&k, &v).unwrap(), Some(v)))
                    };
                    if let Some(entry) = ts {
                        model.entry(k).or_default().push(entry);
                    }
                }
                for (k, versions) in &model {
                    assert_eq!(&history(&tree, k), versions, "history of {k:?}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = evictor.join().unwrap();
    assert!(rounds >= 3);
    assert_eq!(tree.load_errors(), 0);
    assert!(counter(&tree, counter_names::EVICTIONS) > 0);
    tree.check_structure().unwrap();
}
