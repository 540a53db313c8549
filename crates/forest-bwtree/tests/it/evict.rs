//! Eviction under a memory budget and reading evicted pages back (issue 17, increment 3;
//! Bw-tree §V-B, TSBw §II-C): every key reads back after eviction, resident bytes stay
//! bounded and equal to a walk of the table, held deltas keep their page in memory, a damaged
//! piece fails the operation with an error naming file, offset and page, and the conformance
//! kit passes on a budget so small that nearly every access loads a page.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::common::counter;
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::{Error, Index, Order};
use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::segment_file_name;
use forest_llama::lss::{Lss, LssAddress, LssConfig};

pub(crate) const SEGMENT_BYTES: u64 = 4 << 20;

pub(crate) fn lss_on(sim: &SimDir) -> Arc<Lss> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let config = LssConfig {
        segment_bytes: SEGMENT_BYTES,
        buffer_bytes: 64 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    Arc::new(Lss::open(dir, config, LssAddress::current(0)).unwrap().0)
}

pub(crate) fn tree_on(config: BwTreeConfig, budget: Option<u64>, seed: u64) -> (BwTree, SimDir) {
    let sim = SimDir::new(seed);
    let tree = BwTree::with_config(config)
        .unwrap()
        .with_lss(lss_on(&sim), budget)
        .unwrap();
    (tree, sim)
}

pub(crate) fn key(i: u32) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("v{round}-{i}-").into_bytes();
    v.resize(100, b'x');
    v
}

/// Keys to write, overridable by `FOREST_EVICT_KEYS` (default: about 10x the budget).
fn key_count() -> u32 {
    std::env::var("FOREST_EVICT_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24_000)
}

// Goal: a tree holding ~10x its budget keeps every key readable, its resident bytes within
// 1.25x the budget, and its counted resident bytes equal to a walk of the table. Method:
// 256 KiB budget, 24 000 keys of 100-byte values (~2.6 MB of records) inserted, a third
// updated and a tenth removed; resident bytes checked every 500 operations; then every key
// read back (point reads and a scan) against a model, and the counters checked.
#[test]
fn every_key_reads_back_under_a_budget() {
    let budget = 256 << 10;
    let (tree, _sim) = tree_on(BwTreeConfig::default(), Some(budget), 1);
    let n = key_count();
    let mut model = BTreeMap::new();
    let bound = budget + budget / 4;
    let mut peak = 0;
    for i in 0..n {
        // A scattered order, so that every leaf is written, evicted and loaded again.
        let k = (i.wrapping_mul(7_919)) % n;
        tree.upsert(&key(k), &value(k, 0)).unwrap();
        model.insert(key(k), value(k, 0));
        if i % 500 == 0 {
            let resident = tree.resident_bytes();
            peak = peak.max(resident);
            assert!(
                resident <= bound,
                "resident {resident} above {bound} after {i} writes"
            );
        }
    }
    for i in (0..n).step_by(3) {
        assert!(tree.update(&key(i), &value(i, 1)).unwrap());
        model.insert(key(i), value(i, 1));
    }
    for i in (0..n).step_by(10) {
        assert!(tree.remove(&key(i)));
        model.remove(&key(i));
    }
    assert!(counter(&tree, "evictions") > 0);
    assert!(counter(&tree, "loads") > 0);
    assert_eq!(
        tree.resident_bytes(),
        tree.resident_bytes_walked(),
        "counted resident bytes equal the table's"
    );
    let mut out = Vec::new();
    for i in 0..n {
        let expected = model.get(&key(i));
        assert_eq!(tree.get(&key(i), &mut out), expected.is_some(), "key {i}");
        if let Some(v) = expected {
            assert_eq!(&out, v, "key {i}");
        }
        assert!(tree.resident_bytes() <= bound);
    }
    let mut scanned = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            scanned.push((k.to_vec(), v.to_vec()));
            std::ops::ControlFlow::Continue(())
        },
    );
    assert_eq!(scanned, model.into_iter().collect::<Vec<_>>());
    assert!(tree.take_load_error().is_none());
    assert_eq!(tree.resident_bytes(), tree.resident_bytes_walked());
    eprintln!(
        "peak resident {peak} of budget {budget}; evictions {} loads {}",
        counter(&tree, "evictions"),
        counter(&tree, "loads")
    );
}

// Goal: concurrent writers keep resident bytes near the budget (one evicts above it, all
// help above 125 %) and lose nothing. Method: 4 threads upsert disjoint keys (100-byte
// values) into a tree with a 128 KiB budget while a sampler checks resident bytes against
// 1.25x the budget plus one page per writer (what a writer may load or grow between its
// check and its write); then every key reads back and the count equals a walk.
#[test]
fn concurrent_writers_stay_near_the_budget() {
    let budget: u64 = 128 << 10;
    let (tree, _sim) = tree_on(BwTreeConfig::default(), Some(budget), 4);
    let tree = Arc::new(tree);
    let per_thread = key_count() / 8;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (tree, done) = (Arc::clone(&tree), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(tree.resident_bytes());
                std::thread::yield_now();
            }
            peak
        })
    };
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let k = (i.wrapping_mul(7_919) % per_thread) * 4 + t;
                    tree.upsert(&key(k), &value(k, 0)).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let page_bytes = 128 * 130 + 4096; // a full default page of these records, with slack
    let bound = budget + budget / 4 + 4 * page_bytes;
    assert!(peak <= bound, "peak resident {peak} above {bound}");
    let mut out = Vec::new();
    for k in 0..per_thread * 4 {
        assert!(tree.get(&key(k), &mut out), "key {k}");
        assert_eq!(out, value(k, 0));
    }
    assert!(tree.take_load_error().is_none());
    assert_eq!(tree.resident_bytes(), tree.resident_bytes_walked());
    eprintln!("peak resident {peak} of budget {budget} with 4 writers");
}

// Goal: a page with a record delta above ESL is not evicted (no partial swap), and is once
// ESL passes it. Method: one leaf written with LSNs above ESL; evict; raise ESL; evict.
#[test]
fn a_page_with_held_deltas_stays_until_esl_passes_them() {
    let esl = Arc::new(AtomicU64::new(5));
    let sim = SimDir::new(2);
    let tree = BwTree::new()
        .with_esl_source(esl.clone())
        .with_lss(lss_on(&sim), None)
        .unwrap();
    for i in 0..10u32 {
        tree.upsert_with_lsn(&key(i), &value(i, 0), u64::from(i) + 1)
            .unwrap();
    }
    let pid = tree.page_ids()[0];
    assert!(!tree.evict_pid(pid).unwrap(), "LSNs 6..=10 are above ESL");
    assert!(tree.evicted_at(pid).is_none());
    esl.store(10, std::sync::atomic::Ordering::SeqCst);
    assert!(tree.evict_pid(pid).unwrap());
    assert!(tree.evicted_at(pid).is_some());
    let mut out = Vec::new();
    for i in 0..10 {
        assert!(tree.get(&key(i), &mut out));
        assert_eq!(out, value(i, 0));
    }
    assert_eq!(counter(&tree, "loads"), 1);
    // Loaded with a flush delta on top: the next flush is a delta run after it.
    tree.upsert_with_lsn(&key(3), b"new", 11).unwrap();
    esl.store(11, std::sync::atomic::Ordering::SeqCst);
    let flushed = tree.flush_page(pid, tree.lss().unwrap()).unwrap();
    assert!(
        matches!(
            flushed,
            forest_bwtree::flush::PageFlush::Flushed {
                kind: forest_llama::lss::RecordKind::DeltaRun,
                ..
            }
        ),
        "{flushed:?}"
    );
}

// Goal: a damaged piece fails the operation that needs it with an error naming the segment
// file, the offset in it and the page, and nothing panics; other pages still work. Method:
// evict every page of a small tree, flip a byte in one leaf's piece on the medium, then read
// a key of that leaf through `try_get`, `get` (+ `take_load_error`), `insert` and `try_scan`.
#[test]
fn a_corrupted_piece_fails_the_operation_with_a_named_error() {
    let config = BwTreeConfig {
        max_records_per_page: 8,
        ..BwTreeConfig::default()
    };
    let (tree, sim) = tree_on(
        BwTreeConfig {
            merge_threshold: 0,
            ..config
        },
        None,
        3,
    );
    for i in 0..40 {
        tree.upsert(&key(i), &value(i, 0)).unwrap();
    }
    for pid in tree.page_ids() {
        assert!(tree.evict_pid(pid).unwrap(), "page {pid} evicts");
    }
    // The leaf holding key 0 (the leftmost): find it as the first evicted leaf piece that
    // holds the key.
    let lss = tree.lss().unwrap().clone();
    let (victim, address) = tree
        .page_ids()
        .into_iter()
        .filter_map(|pid| tree.evicted_at(pid).map(|a| (pid, a)))
        .find(|&(pid, a)| {
            let record = lss.read(a).unwrap();
            record.header.pid == pid
                && forest_bwtree::flush::PageImage::decode(&record.payload).is_ok_and(|img| {
                    img.level == 0 && img.records.iter().any(|(k, _)| *k == key(0))
                })
        })
        .unwrap();
    let name = segment_file_name(address.offset() / SEGMENT_BYTES);
    let at = (address.offset() % SEGMENT_BYTES) as usize;
    assert!(sim.damage(&name, |bytes| bytes[at + 60] ^= 0x40));
    let check = |e: Error| {
        let text = e.to_string();
        let Error::Corrupt { path, offset, .. } = &e else {
            panic!("not a corruption error: {text}");
        };
        assert!(path.ends_with(&name), "{text}");
        assert_eq!(*offset, at as u64, "{text}");
        assert!(text.contains(&format!("PID {victim}")), "{text}");
    };
    check(tree.try_get(&key(0)).unwrap_err());
    let mut out = Vec::new();
    assert!(!tree.get(&key(0), &mut out));
    check(tree.take_load_error().expect("get recorded its error"));
    check(tree.insert(&key(0), b"again").unwrap_err());
    let scanned = tree.try_scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |_, _| std::ops::ControlFlow::Continue(()),
    );
    check(scanned.unwrap_err());
    // Keys on other leaves are unaffected.
    assert_eq!(tree.try_get(&key(39)).unwrap(), Some(value(39, 0)));
}

/// A tree on its own LSS with 4-record pages and a 16 KiB budget: a few dozen pages stay in
/// memory, so most accesses load one.
pub fn tiny_budget_tree() -> BwTree {
    let config = BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        read_consolidate_threshold: 2,
        merge_threshold: 2,
    };
    let sim = SimDir::new(7);
    BwTree::with_config(config)
        .unwrap()
        .with_lss(lss_on(&sim), Some(16 << 10))
        .unwrap()
}

/// The kit's sizes cut for a tree that loads a page on nearly every access: each check
/// stays within a few seconds in the ci profile (`FOREST_EVICT_KIT_SCALE` multiplies them).
pub fn tiny_budget_sizes() -> forest_core::conformance::Sizes {
    let scale: usize = std::env::var("FOREST_EVICT_KIT_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    forest_core::conformance::Sizes {
        model_small_case_count: 32 * scale as u32,
        model_many_case_count: 8 * scale as u32,
        order_key_count: 3_000 * scale,
        stress_op_count: 8_000 * scale,
        ..forest_core::conformance::Sizes::for_variant()
    }
}

forest_core::conformance_tests!(
    tiny_budget,
    || super::tiny_budget_tree(),
    sizes = super::tiny_budget_sizes()
);

/// [`tiny_budget_tree`] over 16 KiB segments: the after-operation evictor also cleans the
/// LSS (issue 17, increment 5), many times per check.
pub fn tiny_budget_cleaning_tree() -> BwTree {
    let config = BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        read_consolidate_threshold: 2,
        merge_threshold: 2,
    };
    let dir: Arc<dyn Dir> = Arc::new(SimDir::new(8));
    let lss_config = LssConfig {
        segment_bytes: 16 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let lss = Arc::new(
        Lss::open(dir, lss_config, LssAddress::current(0))
            .unwrap()
            .0,
    );
    BwTree::with_config(config)
        .unwrap()
        .with_lss(lss, Some(16 << 10))
        .unwrap()
}

forest_core::conformance_tests!(
    tiny_budget_cleaning,
    || super::tiny_budget_cleaning_tree(),
    sizes = super::tiny_budget_sizes()
);
