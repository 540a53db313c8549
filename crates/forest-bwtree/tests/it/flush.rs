//! Flushing Bw-tree pages into the LSS (issue 17, increment 2; Bw-tree §V-A, §V-B): the
//! pieces hold exactly the records with LSN <= ESL, incremental pieces chain, consolidations
//! and splits keep deltas above ESL out of base pages, and stable pieces survive power loss.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use crate::common;

use std::collections::BTreeMap;

use common::{flush_until_done, leaf_records, open_lss, rebuild, set_esl, tree_with_esl, Model};
use forest_bwtree::flush::{DeltaRun, PageFlush, PageImage};
use forest_bwtree::{BwTree, BwTreeConfig, LSN_MAX};
use forest_core::Index;
use forest_file::SimDir;
use forest_llama::lss::{LssAddress, RecordKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn one_page(consolidate_threshold: u32) -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 128,
        consolidate_threshold,
        read_consolidate_threshold: consolidate_threshold,
        merge_threshold: 0,
    }
}

fn records(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

// Goal: a flush writes exactly the page's records with LSN <= ESL; the next flush is a
// delta run linked to the first piece that holds only what changed, including a delta with a
// low LSN installed after a flush (tracked by chain position, not by LSN range). Method: one
// leaf; writes with LSNs, some above ESL; flush, write out of LSN order, raise ESL, flush
// again; rebuild each time from the LSS and compare with the model at ESL.
#[test]
fn pieces_hold_exactly_the_records_at_or_below_esl() {
    let sim = SimDir::new(1);
    let lss = open_lss(&sim, LssAddress::current(0));
    let (tree, esl) = tree_with_esl(one_page(64), 30);
    let mut model = Model::default();
    for i in 0..50u32 {
        let lsn = u64::from(i) + 1;
        tree.upsert_with_lsn(&key(i), &lsn.to_le_bytes(), lsn)
            .unwrap();
        model.put(&key(i), &lsn.to_le_bytes(), lsn);
    }
    let pid = tree.page_ids()[0];
    let PageFlush::Flushed {
        address: first,
        kind,
        lsn_high,
    } = tree.flush_page(pid, &lss).unwrap()
    else {
        panic!("a first flush writes");
    };
    assert_eq!(
        kind,
        RecordKind::PageImage,
        "no flush before: a whole image"
    );
    assert_eq!(lsn_high, 30);
    lss.mk_stable(first).unwrap();
    let image = rebuild(&lss, pid, first);
    assert_eq!(image.records, records(&model.at(30)));
    assert_eq!(image.records.len(), 30, "LSNs 31..=50 are held back");
    assert_eq!(tree.page_image(pid).unwrap(), image);
    assert_eq!(tree.flush_page(pid, &lss).unwrap(), PageFlush::Clean);

    // A high LSN first, then a lower one installed after the flush below.
    tree.upsert_with_lsn(&key(3), b"x58", 58).unwrap();
    model.put(&key(3), b"x58", 58);
    set_esl(&esl, 55);
    let PageFlush::Flushed {
        address: second,
        kind,
        ..
    } = tree.flush_page(pid, &lss).unwrap()
    else {
        panic!("LSNs 31..=50 are below ESL now");
    };
    assert_eq!(kind, RecordKind::DeltaRun);
    tree.upsert_with_lsn(&key(4), b"x56", 56).unwrap();
    model.put(&key(4), b"x56", 56);
    tree.remove_with_lsn(&key(5), 57).unwrap();
    model.remove(&key(5), 57);
    tree.insert_with_lsn(&key(900), b"new", 59).unwrap();
    model.put(&key(900), b"new", 59);
    set_esl(&esl, 60);
    let PageFlush::Flushed {
        address: third,
        kind,
        lsn_high,
    } = tree.flush_page(pid, &lss).unwrap()
    else {
        panic!("56..=59 are unflushed");
    };
    assert_eq!(kind, RecordKind::DeltaRun);
    assert_eq!(lsn_high, 59);
    assert!(first < second && second < third);
    lss.mk_stable(third).unwrap();
    let run = DeltaRun::decode(&lss.read(third).unwrap().payload).unwrap();
    let run_keys: Vec<Vec<u8>> = run.entries.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        run_keys,
        vec![key(3), key(4), key(5), key(900)],
        "the run holds what changed since the last piece, the low LSN 56 included"
    );
    assert_eq!(lss.read(third).unwrap().header.prev, Some(second));
    assert_eq!(lss.read(second).unwrap().header.prev, Some(first));
    let image = rebuild(&lss, pid, third);
    assert_eq!(image.records, records(&model.at(60)));
    assert_eq!(tree.page_image(pid).unwrap(), image);
    let mut out = Vec::new();
    assert!(tree.get(&key(3), &mut out) && out == b"x58");
    lss.close().unwrap();
}

// Goal: consolidation folds only deltas with LSN <= ESL into the base page and keeps the
// rest on top (§V-A), and keeps the page's flush delta when it folded only flushed deltas.
// Method: short chains (threshold 2) so that writes consolidate; ESL below some writes; the
// whole image a flush writes after the consolidations must still leave those writes out,
// while reads see every write.
#[test]
fn consolidation_keeps_deltas_above_esl_on_top() {
    let sim = SimDir::new(2);
    let lss = open_lss(&sim, LssAddress::current(0));
    let (tree, esl) = tree_with_esl(one_page(2), 10);
    let mut model = Model::default();
    for i in 0..20u32 {
        let lsn = u64::from(i) + 1;
        tree.upsert_with_lsn(&key(i), b"v", lsn).unwrap();
        model.put(&key(i), b"v", lsn);
    }
    let stats = tree.stats();
    let consolidations = stats.counter("consolidations").unwrap();
    assert!(consolidations > 0, "the test needs consolidations");
    let pid = tree.page_ids()[0];
    assert_eq!(
        tree.page_image(pid).unwrap().records,
        records(&model.at(10))
    );
    let mut out = Vec::new();
    for i in 0..20u32 {
        assert!(tree.get(&key(i), &mut out), "held write {i} is visible");
    }
    let first = flush_until_done(&tree, &lss, pid).unwrap();
    // Raise ESL, write more: the next consolidations fold 11..=15 and keep the rest.
    set_esl(&esl, 15);
    for i in 20..30u32 {
        let lsn = u64::from(i) + 1;
        tree.upsert_with_lsn(&key(i), b"w", lsn).unwrap();
        model.put(&key(i), b"w", lsn);
    }
    assert!(tree.stats().counter("consolidations").unwrap() > consolidations);
    let last = flush_until_done(&tree, &lss, pid).unwrap();
    assert!(last > first);
    lss.mk_stable(last).unwrap();
    assert_eq!(rebuild(&lss, pid, last).records, records(&model.at(15)));
    set_esl(&esl, LSN_MAX);
    let last = flush_until_done(&tree, &lss, pid).unwrap();
    lss.mk_stable(last).unwrap();
    assert_eq!(
        rebuild(&lss, pid, last).records,
        records(&model.at(LSN_MAX))
    );
    lss.close().unwrap();
}

// Goal: a consolidation that folds only flushed deltas keeps the flush delta, so the next
// flush is a delta run; one that folds an unflushed delta drops it, so the next is an image.
// Method: flush, write above ESL only, consolidate (clean), flush: a run; then write below
// ESL, consolidate, flush: an image.
#[test]
fn clean_consolidation_keeps_flushes_incremental() {
    let sim = SimDir::new(3);
    let lss = open_lss(&sim, LssAddress::current(0));
    let (tree, esl) = tree_with_esl(one_page(3), 100);
    for i in 0..10u32 {
        tree.upsert_with_lsn(&key(i), b"v", u64::from(i) + 1)
            .unwrap();
    }
    let pid = tree.page_ids()[0];
    flush_until_done(&tree, &lss, pid).unwrap();
    let before = tree.stats().counter("consolidations").unwrap();
    for i in 0..5u32 {
        tree.upsert_with_lsn(&key(i), b"held", 200 + u64::from(i))
            .unwrap();
    }
    assert!(tree.stats().counter("consolidations").unwrap() > before);
    assert!(
        tree.last_flush(pid).is_some(),
        "a clean consolidation keeps the flush delta"
    );
    set_esl(&esl, 300);
    let PageFlush::Flushed { kind, .. } = tree.flush_page(pid, &lss).unwrap() else {
        panic!("the held writes are below ESL now");
    };
    assert_eq!(kind, RecordKind::DeltaRun);
    let before = tree.stats().counter("consolidations").unwrap();
    for i in 0..5u32 {
        tree.upsert_with_lsn(&key(i), b"new", 210 + u64::from(i))
            .unwrap();
    }
    assert!(tree.stats().counter("consolidations").unwrap() > before);
    let PageFlush::Flushed { kind, address, .. } = tree.flush_page(pid, &lss).unwrap() else {
        panic!("unflushed writes");
    };
    assert_eq!(
        kind,
        RecordKind::PageImage,
        "the consolidation folded unflushed writes"
    );
    lss.mk_stable(address).unwrap();
    assert_eq!(rebuild(&lss, pid, address), tree.page_image(pid).unwrap());
    lss.close().unwrap();
}

// Goal: a split's new page obeys the LSN rule too, and the records of all leaves, flushed
// and rebuilt, are the model at ESL. Method: 4-record pages, 40 writes with ESL at 12, then
// flush every page and compare; reads see all 40.
#[test]
fn split_pages_leave_records_above_esl_out() {
    let sim = SimDir::new(4);
    let lss = open_lss(&sim, LssAddress::current(0));
    let config = BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        read_consolidate_threshold: 2,
        merge_threshold: 0,
    };
    let (tree, _esl) = tree_with_esl(config, 12);
    let mut model = Model::default();
    for i in 0..40u32 {
        let k = key((i * 7) % 40);
        let lsn = u64::from(i) + 1;
        tree.upsert_with_lsn(&k, &lsn.to_le_bytes(), lsn).unwrap();
        model.put(&k, &lsn.to_le_bytes(), lsn);
    }
    assert!(tree.stats().counter("splits").unwrap() > 3);
    assert_eq!(leaf_records(&tree), model.at(12));
    let mut rebuilt = BTreeMap::new();
    let mut addresses = Vec::new();
    for pid in tree.page_ids() {
        addresses.push((pid, flush_until_done(&tree, &lss, pid).unwrap()));
    }
    lss.mk_stable(addresses.iter().map(|a| a.1).max().unwrap())
        .unwrap();
    for (pid, address) in addresses {
        let image = rebuild(&lss, pid, address);
        assert_eq!(image, tree.page_image(pid).unwrap());
        if image.level == 0 {
            rebuilt.extend(image.records);
        }
    }
    assert_eq!(rebuilt, model.at(12));
    let mut out = Vec::new();
    for i in 0..40u32 {
        assert!(tree.get(&key(i), &mut out));
    }
    lss.close().unwrap();
}

// Goal: under random writes, removes, splits, merges and consolidations, with ESL moving up
// and flushes now and then, every page's pieces rebuild to the page's records at ESL, and
// the leaves' records are the model at ESL. Method: 3 seeds of 3000 operations on 6-record
// pages, random flushes; the leaves against the model every 50 operations (this caught
// consolidations that kept only the newest held delta of a key: a later ESL between two
// held LSNs lost the older write); at the end flush every page, make the LSS stable,
// rebuild each.
#[test]
fn random_operations_flush_to_the_model() {
    for seed in 0..3u64 {
        let sim = SimDir::new(seed);
        let lss = open_lss(&sim, LssAddress::current(0));
        let config = BwTreeConfig {
            max_records_per_page: 6,
            consolidate_threshold: 3,
            read_consolidate_threshold: 2,
            merge_threshold: 2,
        };
        let (tree, esl) = tree_with_esl(config, 0);
        let mut model = Model::default();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut lsn = 0u64;
        let mut esl_now = 0u64;
        for _ in 0..3000 {
            let k = key(rng.random_range(0..120));
            lsn += 1;
            match rng.random_range(0..10) {
                0..=5 => {
                    let v = lsn.to_le_bytes();
                    tree.upsert_with_lsn(&k, &v, lsn).unwrap();
                    model.put(&k, &v, lsn);
                }
                6..=8 => {
                    if tree.remove_with_lsn(&k, lsn).unwrap() {
                        model.remove(&k, lsn);
                    }
                }
                _ => {
                    let pids = tree.page_ids();
                    let pid = pids[rng.random_range(0..pids.len())];
                    tree.flush_page(pid, &lss).unwrap();
                }
            }
            if rng.random_ratio(1, 20) {
                esl_now = rng.random_range(esl_now..=lsn);
                set_esl(&esl, esl_now);
            }
            if lsn.is_multiple_of(50) {
                assert_eq!(
                    leaf_records(&tree),
                    model.at(esl_now),
                    "seed {seed} LSN {lsn}"
                );
            }
        }
        let stats = tree.stats();
        assert!(stats.counter("splits").unwrap() > 0, "seed {seed}");
        assert!(stats.counter("merges").unwrap() > 0, "seed {seed}");
        assert_eq!(leaf_records(&tree), model.at(esl_now), "seed {seed}");
        let mut addresses = Vec::new();
        for pid in tree.page_ids() {
            if let Some(address) = flush_until_done(&tree, &lss, pid) {
                addresses.push((pid, address));
            }
        }
        lss.mk_stable(addresses.iter().map(|a| a.1).max().unwrap())
            .unwrap();
        let mut rebuilt = BTreeMap::new();
        for (pid, address) in addresses {
            let image = rebuild(&lss, pid, address);
            assert_eq!(
                image,
                tree.page_image(pid).unwrap(),
                "seed {seed} page {pid}"
            );
            if image.level == 0 {
                rebuilt.extend(image.records);
            }
        }
        assert_eq!(rebuilt, model.at(esl_now), "seed {seed}");
        lss.close().unwrap();
    }
}

// Goal: flushes racing writers (and the splits, merges and consolidations they cause) never
// lose or double a flush delta: after the race, every page's pieces (images and the runs
// chained to them, written while the page changed under the flusher) rebuild to the page's
// records at ESL, and the leaves to the model. Method: 3 writer threads on disjoint keys
// (so per key, LSN order is install order, as the store's key locks make it) take LSNs from a
// shared counter; a flusher thread flushes random pages and raises ESL behind the counter,
// sometimes past LSNs not yet installed (a low LSN then lands above a flush delta).
#[test]
fn flushes_racing_writers_rebuild_to_the_model() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let sim = SimDir::new(9);
    let lss = open_lss(&sim, LssAddress::current(0));
    let config = BwTreeConfig {
        max_records_per_page: 6,
        consolidate_threshold: 3,
        read_consolidate_threshold: 2,
        merge_threshold: 2,
    };
    let (tree, esl) = tree_with_esl(config, 0);
    let next_lsn = AtomicU64::new(1);
    let done = AtomicBool::new(false);
    let (models, flushed) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..3u32)
            .map(|t| {
                let (tree, next_lsn) = (&tree, &next_lsn);
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(u64::from(t));
                    let mut model = Model::default();
                    for _ in 0..3000 {
                        let k = key(rng.random_range(0..60) * 3 + t);
                        let lsn = next_lsn.fetch_add(1, Ordering::SeqCst);
                        if rng.random_ratio(2, 3) {
                            tree.upsert_with_lsn(&k, &lsn.to_le_bytes(), lsn).unwrap();
                            model.put(&k, &lsn.to_le_bytes(), lsn);
                        } else if tree.remove_with_lsn(&k, lsn).unwrap() {
                            model.remove(&k, lsn);
                        }
                    }
                    model
                })
            })
            .collect();
        let flusher = {
            let (tree, lss, esl, next_lsn, done) = (&tree, &lss, &esl, &next_lsn, &done);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(99);
                let mut flushed = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let pids = tree.page_ids();
                    let pid = pids[rng.random_range(0..pids.len())];
                    if let PageFlush::Flushed { address, .. } = tree.flush_page(pid, lss).unwrap() {
                        flushed += 1;
                        if rng.random_ratio(1, 50) {
                            lss.mk_stable(address).unwrap();
                        }
                    }
                    let behind = next_lsn
                        .load(Ordering::SeqCst)
                        .saturating_sub(rng.random_range(0..20));
                    set_esl(esl, behind.max(esl.load(Ordering::SeqCst)));
                }
                flushed
            })
        };
        let models: Vec<Model> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        (models, flusher.join().unwrap())
    });
    assert!(
        flushed > 100,
        "the flusher raced the writers ({flushed} flushes)"
    );
    let stats = tree.stats();
    assert!(stats.counter("splits").unwrap() > 0 && stats.counter("merges").unwrap() > 0);
    let esl_now = esl.load(std::sync::atomic::Ordering::SeqCst);
    let mut want = BTreeMap::new();
    for model in &models {
        want.extend(model.at(esl_now));
    }
    assert_eq!(leaf_records(&tree), want);
    let mut addresses = Vec::new();
    for pid in tree.page_ids() {
        if let Some(address) = flush_until_done(&tree, &lss, pid) {
            addresses.push((pid, address));
        }
    }
    lss.mk_stable(addresses.iter().map(|a| a.1).max().unwrap())
        .unwrap();
    let mut rebuilt = BTreeMap::new();
    for (pid, address) in addresses {
        let image = rebuild(&lss, pid, address);
        assert_eq!(image, tree.page_image(pid).unwrap(), "page {pid}");
        if image.level == 0 {
            rebuilt.extend(image.records);
        }
    }
    assert_eq!(rebuilt, want);
    lss.close().unwrap();
}

// Goal: pieces made stable survive a power loss intact; the LSS reopens past them. Method:
// flush pages of a tree and Mk-Stable; flush more without Mk-Stable; crash the simulated
// disk (unsynced bytes dropped, the last page torn); reopen and rebuild the stable pieces.
#[test]
fn stable_pieces_survive_power_loss() {
    for seed in 0..8u64 {
        let sim = SimDir::new(seed);
        let lss = open_lss(&sim, LssAddress::current(0));
        let config = BwTreeConfig {
            max_records_per_page: 8,
            consolidate_threshold: 4,
            read_consolidate_threshold: 4,
            merge_threshold: 0,
        };
        let (tree, esl) = tree_with_esl(config, 0);
        for i in 0..200u32 {
            let lsn = u64::from(i) + 1;
            tree.upsert_with_lsn(&key(i % 90), &lsn.to_le_bytes(), lsn)
                .unwrap();
        }
        set_esl(&esl, 150);
        let mut stable: Vec<(u64, LssAddress, PageImage)> = Vec::new();
        for pid in tree.page_ids() {
            let address = flush_until_done(&tree, &lss, pid).unwrap();
            stable.push((pid, address, tree.page_image(pid).unwrap()));
        }
        let hi = lss
            .mk_stable(stable.iter().map(|s| s.1).max().unwrap())
            .unwrap();
        // More writes and flushes, not made stable: a crash may keep any part of them.
        set_esl(&esl, 200);
        for pid in tree.page_ids() {
            tree.flush_page(pid, &lss).unwrap();
        }
        sim.crash();
        drop(lss);
        let lss = open_lss(&sim, hi);
        assert!(lss.hi_stable() >= hi, "seed {seed}");
        for (pid, address, image) in &stable {
            assert_eq!(
                &rebuild(&lss, *pid, *address),
                image,
                "seed {seed} page {pid}"
            );
        }
        lss.close().unwrap();
    }
}

// Goal: LSNs above the 48 bits a delta holds are refused by name, and writes without an LSN
// (the Index methods) count as stable at any ESL. Method: one write of each kind.
#[test]
fn lsn_limits() {
    let (tree, _esl) = tree_with_esl(one_page(4), 0);
    let e = tree.upsert_with_lsn(b"k", b"v", LSN_MAX + 1).unwrap_err();
    assert!(e.to_string().contains("LSN"), "{e}");
    assert!(tree.remove_with_lsn(b"k", u64::MAX).is_err());
    tree.upsert(b"plain", b"v").unwrap();
    tree.upsert_with_lsn(b"held", b"v", 5).unwrap();
    let pid = tree.page_ids()[0];
    let image = tree.page_image(pid).unwrap();
    assert_eq!(image.records, vec![(b"plain".to_vec(), b"v".to_vec())]);
    let tree = BwTree::new();
    tree.upsert_with_lsn(b"k", b"v", LSN_MAX).unwrap();
    let pid = tree.page_ids()[0];
    assert_eq!(
        tree.page_image(pid).unwrap().records.len(),
        1,
        "no source: all stable"
    );
}

// Goal: the piece decoders refuse damaged payloads by what and where and never panic.
// Method: truncate and corrupt encoded pieces at every byte.
#[test]
fn piece_decoders_refuse_damage() {
    let image = PageImage {
        level: 0,
        low: b"a".to_vec(),
        high: Some(b"m".to_vec()),
        side_link: 7,
        records: vec![
            (b"b".to_vec(), b"1".to_vec()),
            (b"c".to_vec(), b"22".to_vec()),
        ],
    };
    let bytes = image.encode();
    assert_eq!(PageImage::decode(&bytes).unwrap(), image);
    for cut in 0..bytes.len() {
        assert!(PageImage::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0xFF;
        let _ = PageImage::decode(&bad); // must not panic
    }
    let run = DeltaRun {
        entries: vec![(b"b".to_vec(), None), (b"d".to_vec(), Some(b"4".to_vec()))],
    };
    let bytes = run.encode();
    assert_eq!(DeltaRun::decode(&bytes).unwrap(), run);
    for cut in 0..bytes.len() {
        assert!(DeltaRun::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut unsorted = run.clone();
    unsorted.entries.reverse();
    let e = DeltaRun::decode(&unsorted.encode()).unwrap_err();
    assert!(e.contains("ascending"), "{e}");
    let mut rebuilt = image.clone();
    rebuilt.apply(&run);
    assert_eq!(
        rebuilt.records,
        vec![
            (b"c".to_vec(), b"22".to_vec()),
            (b"d".to_vec(), b"4".to_vec())
        ]
    );
}
