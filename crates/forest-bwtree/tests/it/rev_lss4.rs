//! Review rev-lss4 (session 20) of h-lss4: the map checkpoint's live pieces (version 3).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::parse_segment_file_name;
use forest_llama::lss::{Lss, LssConfig};
use forest_llama::recover::open_recovering;
use forest_llama::Pid;

use crate::common::{contents, flush_all, map_checkpoints_as_version_2};

fn config() -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 16,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold: 0,
    }
}

fn lss_config() -> LssConfig {
    LssConfig {
        segment_bytes: 64 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn open(lss_sim: &SimDir, ckpt_sim: &SimDir) -> BwTree {
    let lss_dir: Arc<dyn Dir> = Arc::new(lss_sim.clone());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(ckpt_sim.clone());
    let (lss, checkpoints, map) = open_recovering(lss_dir, lss_config(), ckpt_dir).unwrap();
    let tree = BwTree::open_recovered(config(), Arc::new(lss), &map, None).unwrap();
    tree.use_map_checkpoints(Arc::new(checkpoints)).unwrap();
    tree
}

/// Live bytes per segment and per page of a recovering open (no tree), and segments read.
fn recovered_space(
    lss_sim: &SimDir,
    ckpt_sim: &SimDir,
    pid_end: Pid,
) -> (BTreeMap<u64, u64>, BTreeMap<Pid, u64>, u64) {
    let lss_dir: Arc<dyn Dir> = Arc::new(lss_sim.clone());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(ckpt_sim.clone());
    let (lss, _c, map): (Lss, _, _) = open_recovering(lss_dir, lss_config(), ckpt_dir).unwrap();
    let segments = lss_sim
        .list()
        .unwrap()
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .map(|s| (s, lss.segment_live_bytes(s)))
        .collect();
    let pages = (0..pid_end)
        .map(|p| (p, lss.page_live_bytes(p)))
        .filter(|&(_, b)| b > 0)
        .collect();
    let read = map.space.as_ref().unwrap().segments_read;
    drop(_c);
    lss.close().unwrap();
    (segments, pages, read)
}

// Goal (brief: a piece becoming live or dead between the snapshot and the publication):
// checkpoints taken while a writer flushes/evicts and the cleaner relocates and removes
// segments; power loss right after the last one; the space map a version-3 open builds must
// count every piece the version-2 pass (which follows each chain through the segments)
// counts: per segment and per page at least as many live bytes. Then the reopened tree
// cleans hard (checkpoints and cleaning) and every key reads back after evicting all.
#[test]
fn rev_lss4_concurrent_checkpoints_then_crash_clean_and_read_back() {
    for seed in 0..3u64 {
        let lss_sim = SimDir::new(900 + seed);
        let ckpt_sim = SimDir::new(950 + seed);
        let tree = Arc::new(open(&lss_sim, &ckpt_sim));
        tree.set_lss_space_factor(1.1).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        {
            let (t, s) = (Arc::clone(&tree), Arc::clone(&stop));
            threads.push(std::thread::spawn(move || {
                let mut n = 0;
                while !s.load(Ordering::Relaxed) {
                    let _ = t.take_map_checkpoint(0).unwrap();
                    n += 1;
                    std::thread::yield_now();
                }
                n
            }));
        }
        {
            let (t, s) = (Arc::clone(&tree), Arc::clone(&stop));
            threads.push(std::thread::spawn(move || {
                let mut n = 0;
                while !s.load(Ordering::Relaxed) {
                    n += t.clean_to_target().unwrap();
                    std::thread::yield_now();
                }
                n
            }));
        }
        for round in 0..8u32 {
            for i in 0..600u32 {
                if (i + round) % 3 == 0 || round == 0 {
                    let mut v = format!("v{round}-{i}").into_bytes();
                    v.resize(200, b'.');
                    tree.upsert_with_lsn(&key(i), &v, 0).unwrap();
                }
            }
            flush_all(&tree);
            for pid in tree
                .page_ids()
                .into_iter()
                .skip(round as usize % 2)
                .step_by(2)
            {
                let _ = tree.evict_pid(pid).unwrap();
            }
        }
        // Everything written is stable before the last checkpoints (which run concurrently
        // with the cleaner).
        flush_all(&tree);
        let want = contents(&tree);
        for _ in 0..3 {
            tree.take_map_checkpoint(0).unwrap();
            tree.clean_to_target().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let pid_end = tree.page_ids().into_iter().max().unwrap() + 1;
        let lss = Arc::clone(tree.lss().unwrap());
        lss_sim.crash();
        ckpt_sim.crash();
        drop(Arc::try_unwrap(tree).ok().unwrap());
        drop(lss);

        let (v3_seg, v3_pages, v3_read) = recovered_space(&lss_sim, &ckpt_sim, pid_end);
        assert_eq!(
            v3_read, 0,
            "seed {seed}: the v3 open read no segment below S"
        );
        // (The pass is run on the same files after the v3 open: open_recovering does not
        // change the segments below S.)
        let ckpt_bytes: Vec<(String, Vec<u8>)> = ckpt_sim
            .list()
            .unwrap()
            .into_iter()
            .map(|n| {
                let mut b = Vec::new();
                ckpt_sim.open(&n).unwrap().read_all(&mut b).unwrap();
                (n, b)
            })
            .collect();
        map_checkpoints_as_version_2(&ckpt_sim);
        let (v2_seg, v2_pages, v2_read) = recovered_space(&lss_sim, &ckpt_sim, pid_end);
        assert!(v2_read > 0);
        for (n, b) in &ckpt_bytes {
            assert!(ckpt_sim.damage(n, |x| *x = b.clone()));
        }
        let lost_seg: Vec<_> = v2_seg
            .iter()
            .filter(|(s, b)| v3_seg.get(s).copied().unwrap_or(0) < **b)
            .collect();
        let lost_pages: Vec<_> = v2_pages
            .iter()
            .filter(|(p, b)| v3_pages.get(p).copied().unwrap_or(0) < **b)
            .collect();
        let leaked: u64 = v3_seg.values().sum::<u64>()
            - v2_seg
                .values()
                .sum::<u64>()
                .min(v3_seg.values().sum::<u64>());
        eprintln!(
            "seed {seed}: threads {counts:?}, v3 live {} v2 live {} (v3 extra {leaked})",
            v3_seg.values().sum::<u64>(),
            v2_seg.values().sum::<u64>()
        );
        assert!(
            lost_seg.is_empty() && lost_pages.is_empty(),
            "seed {seed}: v3 counts less live than the pass: segments {lost_seg:?} pages {lost_pages:?}"
        );

        // Reopen (version 3), clean hard, read every key back.
        let tree = open(&lss_sim, &ckpt_sim);
        tree.set_lss_space_factor(1.1).unwrap();
        for _ in 0..6 {
            tree.take_map_checkpoint(0).unwrap();
            tree.clean_to_target().unwrap();
        }
        for pid in tree.page_ids() {
            let _ = tree.evict_pid(pid).unwrap();
        }
        assert_eq!(
            contents(&tree),
            want,
            "seed {seed}: after cleaning the reopened store"
        );
        let stats = tree.clean_stats().unwrap();
        eprintln!(
            "seed {seed}: after reopen cleaned {} segments",
            stats.segments_cleaned.get()
        );
        drop(tree);
    }
}

// rev-lss4 F2: recovery falls back to the pass only when a chain's FIRST piece below S is
// missing from the checkpoint's live pieces; a deeper piece of the chain missing from the
// list is silently counted dead (the docs say "if a chain reaches below S to a piece the list
// lacks ... the open falls back"), and the cleaner may then remove the segment holding it.
// Method: pages with an image and a delta below S; a checkpoint re-sealed (crcs valid) with
// the lowest listed piece of a page removed; the v3 open must either fall back (segments
// read) or count that page's live bytes as the pass does.
#[test]
#[ignore = "rev: F2 a chain piece below the first one, missing from the live pieces, is counted dead with no fallback"]
fn rev_lss4_f2_a_deeper_piece_missing_from_the_list_falls_back() {
    let lss_sim = SimDir::new(971);
    let ckpt_sim = SimDir::new(972);
    let tree = open(&lss_sim, &ckpt_sim);
    for round in 0..2u32 {
        for i in 0..300u32 {
            if round == 0 || i % 5 == 0 {
                tree.upsert_with_lsn(
                    &key(i),
                    format!("v{round}-{i}").as_bytes(),
                    u64::from(round * 1000 + i + 1),
                )
                .unwrap();
            }
        }
        flush_all(&tree);
        for pid in tree.page_ids() {
            let _ = tree.evict_pid(pid).unwrap();
        }
    }
    tree.take_map_checkpoint(0).unwrap();
    tree.take_map_checkpoint(0).unwrap();
    let pid_end = tree.page_ids().into_iter().max().unwrap() + 1;
    let lss = Arc::clone(tree.lss().unwrap());
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();

    let (name, c) = forest_llama::checkpoint::read_newest(&ckpt_sim)
        .unwrap()
        .checkpoint
        .unwrap();
    let pieces = c.pieces.clone().unwrap();
    // A page with at least two listed pieces: drop its lowest (its chain's image).
    let mut by_pid: BTreeMap<Pid, Vec<usize>> = BTreeMap::new();
    for (i, p) in pieces.iter().enumerate() {
        by_pid.entry(p.pid).or_default().push(i);
    }
    let (&pid, idx) = by_pid
        .iter()
        .find(|(_, v)| v.len() >= 2)
        .expect("a page with two pieces below S");
    let mut cut = pieces.clone();
    let removed = cut.remove(idx[0]);
    let resealed = forest_llama::checkpoint::MapCheckpoint {
        pieces: Some(cut),
        ..c.clone()
    };
    let original = c.encode();
    assert!(ckpt_sim.damage(&name, |b| *b = resealed.encode()));
    let (_, v3_pages, v3_read) = recovered_space(&lss_sim, &ckpt_sim, pid_end);
    assert!(ckpt_sim.damage(&name, |b| *b = original.clone()));
    map_checkpoints_as_version_2(&ckpt_sim);
    let (_, v2_pages, _) = recovered_space(&lss_sim, &ckpt_sim, pid_end);
    let (v3, v2) = (
        v3_pages.get(&pid).copied().unwrap_or(0),
        v2_pages.get(&pid).copied().unwrap_or(0),
    );
    assert!(
        v3_read > 0 || v3 >= v2,
        "page {pid}: piece {removed:?} left out of the list: the v3 open read no segment and \
         counts {v3} live bytes, the pass {v2}: a live piece counted dead"
    );
}

// rev-lss4 F3: a segment below S whose live piece is damaged. The pass (version 2) meets the
// damage and keeps the segment (never a cleaning candidate, rev-smo2 F3); a version-3 open
// reads no segment below S, so it does not know, and the cleaner picks that segment, fails to
// read the page, and errors on every pass: no other segment gets cleaned. Method: pages written
// once and evicted (their pieces stay live in the oldest segments), later rounds on other
// keys; the lowest listed piece's payload damaged; reopen; checkpoints and cleaning.
#[test]
#[ignore = "rev: F3 a damaged live piece below S is not kept after a version-3 open: the cleaner errors on it every pass"]
fn rev_lss4_f3_a_damaged_live_piece_below_s_stalls_the_cleaner() {
    let lss_sim = SimDir::new(981);
    let ckpt_sim = SimDir::new(982);
    let tree = open(&lss_sim, &ckpt_sim);
    for round in 0..8u32 {
        for i in 0..600u32 {
            if round == 0 || i >= 100 {
                let mut v = format!("v{round}-{i}").into_bytes();
                v.resize(200, b'.');
                tree.upsert_with_lsn(&key(i), &v, u64::from(round * 1000 + i + 1))
                    .unwrap();
            }
        }
        flush_all(&tree);
        for pid in tree.page_ids() {
            let _ = tree.evict_pid(pid).unwrap();
        }
        tree.take_map_checkpoint(0).unwrap();
    }
    tree.take_map_checkpoint(0).unwrap();
    let lss = Arc::clone(tree.lss().unwrap());
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();
    let (_, c) = forest_llama::checkpoint::read_newest(&ckpt_sim)
        .unwrap()
        .checkpoint
        .unwrap();
    let lowest = *c
        .pieces
        .as_ref()
        .unwrap()
        .iter()
        .min_by_key(|p| p.offset)
        .unwrap();
    let sb = lss_config().segment_bytes;
    let name = forest_llama::lss::segment::segment_file_name(lowest.offset / sb);
    let at = (lowest.offset % sb) as usize + 60;
    assert!(lss_sim.damage(&name, |b| b[at] ^= 0x40));

    let tree = open(&lss_sim, &ckpt_sim);
    tree.set_lss_space_factor(1.1).unwrap();
    let mut errors = Vec::new();
    for _ in 0..30 {
        tree.take_map_checkpoint(0).unwrap();
        if let Err(e) = tree.clean_to_target() {
            errors.push(e.to_string());
        }
        eprintln!(
            "F3 pass: cleaned {} relocated {} lss total {} live {}",
            tree.clean_stats().unwrap().segments_cleaned.get(),
            tree.clean_stats().unwrap().relocations.get(),
            tree.lss().unwrap().total_bytes(),
            tree.lss().unwrap().live_bytes()
        );
    }
    let cleaned = tree.clean_stats().unwrap().segments_cleaned.get();
    eprintln!(
        "F3: cleaned {cleaned}, {name} exists {}, errors {errors:?}, above {}",
        lss_sim.exists(&name).unwrap(),
        forest_llama::clean::above_target(tree.lss().unwrap(), 1.1)
    );
    assert!(
        errors.is_empty(),
        "{} of 30 cleaning passes failed ({cleaned} segments cleaned), first: {}",
        errors.len(),
        errors[0]
    );
}
