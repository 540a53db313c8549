//! LSS cleaning (issue 17, increment 5; Bw-tree §II-E, TSBw §V-A): live-byte accounting
//! exact against a walk of every page's piece chain, a victim holding resident, evicted and
//! freed pages cleaned and removed with every record kept, random operations on a tiny
//! budget with a cleaner thread running all the time checked against a model, and the LSS
//! staying within a bound of its live bytes after many overwrites.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{contents, counter, flush_resident};
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::segment_file_name;
use forest_llama::lss::{Lss, LssAddress, LssConfig, RECORD_HEADER_BYTES};
use forest_llama::read::read_pieces;
use rand::{Rng, SeedableRng};

/// The smallest segments, so that a few hundred pages span many.
const SEGMENT_BYTES: u64 = 16 << 10;

fn tree(sim: &SimDir, config: BwTreeConfig, budget: Option<u64>) -> Arc<BwTree> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let lss_config = LssConfig {
        segment_bytes: SEGMENT_BYTES,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let lss = Arc::new(
        Lss::open(dir, lss_config, LssAddress::current(0))
            .unwrap()
            .0,
    );
    Arc::new(
        BwTree::with_config(config)
            .unwrap()
            .with_lss(lss, budget)
            .unwrap(),
    )
}

fn small_pages() -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold: 2,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("v{round}-{i}-").into_bytes();
    v.resize(40, b'x');
    v
}

fn check_model(tree: &BwTree, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(tree.try_get(k).unwrap().as_deref(), Some(&v[..]), "{k:?}");
    }
    assert_eq!(&contents(tree), model);
}

/// Bytes of every page's piece chain, read from the LSS: the live bytes by definition.
fn walked_live_bytes(tree: &BwTree) -> (u64, Vec<(u64, u64)>) {
    let lss = tree.lss().unwrap();
    let mut total = 0;
    let mut per_page = Vec::new();
    for pid in tree.page_ids() {
        let newest = match tree.evicted_at(pid) {
            Some(address) => Some(address),
            None => tree.last_flush(pid).map(|f| f.address),
        };
        let Some(newest) = newest else { continue };
        let bytes: u64 = read_pieces(lss, pid, newest)
            .unwrap()
            .iter()
            .map(|(_, r)| (RECORD_HEADER_BYTES + r.payload.len()) as u64)
            .sum();
        total += bytes;
        per_page.push((pid, bytes));
    }
    (total, per_page)
}

fn assert_accounting_exact(tree: &BwTree) {
    let lss = tree.lss().unwrap();
    let (walked, per_page) = walked_live_bytes(tree);
    for (pid, bytes) in per_page {
        assert_eq!(lss.page_live_bytes(pid), bytes, "page {pid}");
    }
    assert_eq!(lss.live_bytes(), walked);
}

// Goal: the live bytes counted per page and in total equal a walk of every page's piece
// chain (runs keep their older pieces live, an image kills them, a freed page's pieces are
// dead). Method: 2 000 random writes and removes over 600 keys on 8-record pages (splits and
// merges), each page flushed every 50 operations (runs and images), some pages evicted;
// after flushing everything, compare the counts with the walk; then clean every candidate
// segment and compare again.
#[test]
fn accounting_is_exact_against_a_walk() {
    let sim = SimDir::new(1);
    let t = tree(&sim, small_pages(), None);
    let lss = Arc::clone(t.lss().unwrap());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    for op in 0..2_000u32 {
        let k = rng.random_range(0..600);
        if rng.random_bool(0.75) {
            t.upsert(&key(k), &value(k, op)).unwrap();
            model.insert(key(k), value(k, op));
        } else {
            t.remove(&key(k));
            model.remove(&key(k));
        }
        if op % 50 == 49 {
            for pid in t.page_ids() {
                let _ = t.flush_page(pid, &lss).unwrap();
            }
            for pid in t.page_ids().into_iter().step_by(3) {
                let _ = t.evict_pid(pid).unwrap();
            }
        }
    }
    flush_resident(&t);
    assert!(counter(&t, "merges") > 0, "the run merged pages");
    assert_accounting_exact(&t);
    assert!(lss.total_bytes() > lss.live_bytes());
    let mut cleaned = 0;
    for (sequence, _) in lss.clean_candidates() {
        if t.clean_segment(sequence).unwrap() {
            cleaned += 1;
        }
    }
    assert!(cleaned > 0);
    flush_resident(&t);
    assert_accounting_exact(&t);
    check_model(&t, &model);
}

// Goal: a victim segment holding pieces of resident, evicted and freed pages is cleaned: its
// live pages move (resident ones by a fresh image, evicted ones by relocation, whose word
// changes), the freed page's pieces count as dead, the file is removed, and every record
// reads back. Method: 8-record pages, 400 keys flushed, every other page evicted (the
// victim: the segment of the oldest evicted address, which also holds resident pages' pieces),
// keys 0..60 removed so that pages of the victim merge away; later writes; clean the victim.
#[test]
fn a_victim_with_resident_evicted_and_freed_pages_is_cleaned() {
    let sim = SimDir::new(2);
    let t = tree(&sim, small_pages(), None);
    let lss = Arc::clone(t.lss().unwrap());
    let mut model = BTreeMap::new();
    for i in 0..400 {
        t.upsert(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    flush_resident(&t);
    // Evict every other page: its word holds its newest piece, in the first segments.
    let mut evicted = Vec::new();
    for pid in t.page_ids().into_iter().step_by(2) {
        if t.evict_pid(pid).unwrap() {
            evicted.push((pid, t.evicted_at(pid).unwrap()));
        }
    }
    let victim = lss.segment_of(evicted.iter().map(|(_, a)| *a).min().unwrap());
    let pages = lss.segment_live_pages(victim);
    let resident: Vec<_> = pages
        .iter()
        .filter(|p| t.evicted_at(**p).is_none())
        .collect();
    assert!(!resident.is_empty() && resident.len() < pages.len());
    // Remove keys of the victim's first leaves so that some of them merge away (freed).
    for i in 0..60 {
        t.remove(&key(i));
        model.remove(&key(i));
    }
    assert!(counter(&t, "merges") > 0);
    let freed: Vec<_> = pages.iter().filter(|p| !t.page_ids().contains(p)).collect();
    assert!(!freed.is_empty(), "a page of the victim merged away");
    // Enough later writes that the victim is a candidate (wholly below Hi-Stable's segment).
    for round in 1..4 {
        for i in 200..400 {
            t.upsert(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        flush_resident(&t);
    }
    assert!(lss.clean_candidates().iter().any(|(s, _)| *s == victim));
    assert!(t.clean_segment(victim).unwrap(), "the victim is removed");
    assert_eq!(lss.segment_live_bytes(victim), 0);
    assert!(!sim.exists(&segment_file_name(victim)).unwrap());
    for (pid, old) in evicted {
        if let Some(now) = t.evicted_at(pid) {
            assert_ne!(lss.segment_of(now), victim, "page {pid}");
            if lss.segment_of(old) == victim {
                assert!(now > old, "page {pid} relocated: {old:?} -> {now:?}");
            }
        }
    }
    let stats = t.clean_stats().unwrap();
    assert_eq!(stats.segments_cleaned.get(), 1);
    assert!(stats.relocations.get() > 0);
    check_model(&t, &model);
    flush_resident(&t);
    assert_accounting_exact(&t);
    assert!(counter(&t, "lss_segments_cleaned") == 1);
}

/// Keys for the random run, overridable by `FOREST_CLEAN_OPS`.
fn op_count() -> u32 {
    std::env::var("FOREST_CLEAN_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

// Goal: with a budget of a few pages (nearly every access loads a page) and a cleaner thread
// cleaning all the time, random writes, removes and reads agree with a model, and after many
// overwrites the LSS holds at most 3x its live bytes. Method: 2 writer threads on disjoint
// key ranges (each checks its own model on every read), a cleaner thread looping
// `clean_once`, 4 KiB budget; then `clean_to_target`, the bound, the whole model.
#[test]
fn random_operations_with_the_cleaner_running_agree_with_a_model() {
    let sim = SimDir::new(3);
    let t = tree(&sim, small_pages(), Some(4 << 10));
    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let t = Arc::clone(&t);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut cleaned = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match t.clean_once().unwrap() {
                    Some(_) => cleaned += 1,
                    None => std::thread::yield_now(),
                }
            }
            cleaned
        })
    };
    let n = op_count();
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(w) + 10);
                let mut model = BTreeMap::new();
                for op in 0..n / 2 {
                    let k = w * 1_000 + rng.random_range(0..300);
                    match rng.random_range(0..10) {
                        0..=5 => {
                            t.upsert(&key(k), &value(k, op)).unwrap();
                            model.insert(key(k), value(k, op));
                        }
                        6 => {
                            t.try_remove(&key(k)).unwrap();
                            model.remove(&key(k));
                        }
                        _ => {
                            let got = t.try_get(&key(k)).unwrap();
                            assert_eq!(got.as_ref(), model.get(&key(k)), "key {k}");
                        }
                    }
                }
                model
            })
        })
        .collect();
    let mut model = BTreeMap::new();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let cleaned_by_thread = cleaner.join().unwrap();
    assert!(cleaned_by_thread > 0, "the cleaner thread removed segments");
    check_model(&t, &model);
    // Steady state: evict to the budget, then clean to the target.
    t.evict_to_budget().unwrap();
    t.clean_to_target().unwrap();
    let lss = t.lss().unwrap();
    let (live, total) = (lss.live_bytes(), lss.total_bytes());
    assert!(
        total <= 3 * live.max(SEGMENT_BYTES),
        "LSS {total} bytes, live {live}"
    );
    check_model(&t, &model);
    assert!(counter(&t, "loads") > 0);
}

// Goal: the space factor is checked. Method: refuse 1.0 and NaN, take 1.5.
#[test]
fn the_space_factor_is_checked() {
    let sim = SimDir::new(4);
    let t = tree(&sim, small_pages(), None);
    assert!(t.set_lss_space_factor(1.0).is_err());
    assert!(t.set_lss_space_factor(f64::NAN).is_err());
    t.set_lss_space_factor(1.5).unwrap();
}

// Goal: a tree without a background evictor cleans after its operations (the conformance
// kit's `evict::tiny_budget_cleaning` relies on it). Method: the kit's tree, 20 overwrites of
// 300 keys; segments cleaned and the LSS within 3x its live bytes, with no explicit call.
#[test]
fn the_after_operation_evictor_cleans() {
    let t = crate::evict::tiny_budget_cleaning_tree();
    for round in 0..20 {
        for i in 0..300 {
            t.upsert(&key(i), &value(i, round)).unwrap();
        }
    }
    let lss = t.lss().unwrap();
    assert!(counter(&t, "lss_segments_cleaned") > 0);
    let (live, total) = (lss.live_bytes(), lss.total_bytes());
    assert!(
        total <= 3 * live.max(SEGMENT_BYTES),
        "LSS {total} bytes, live {live}"
    );
    for i in 0..300 {
        assert_eq!(t.try_get(&key(i)).unwrap(), Some(value(i, 19)));
    }
}
