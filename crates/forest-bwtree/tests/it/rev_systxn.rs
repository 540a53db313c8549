//! Review rev-systxn (session 15, branch h-systxn, issue 17: batched relocation, system
//! transactions): tests that show a finding. Each is `#[ignore]`d so the branch stays green;
//! run one with `cargo test -p forest-bwtree --test it -- rev_systxn::NAME --ignored --nocapture`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_bwtree::flush::PageFlush;
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RECORD_HEADER_BYTES};

use crate::sys_txn::{read_log, Entry};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn small_pages(merge_threshold: usize) -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold,
    }
}

fn lss_with(sim: &SimDir, segment_bytes: u64) -> Arc<Lss> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let config = LssConfig {
        segment_bytes,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    Arc::new(Lss::open(dir, config, LssAddress::current(0)).unwrap().0)
}

// rev: F1. Goal: an SMO step on a healthy LSS is always logged. `smo_step` treats every
// reservation error as "the LSS is poisoned" and runs the step unlogged; but `reserve` also
// refuses a unit larger than a segment (InvalidUse), and the LSS then keeps accepting
// pieces: later flushes (P's image showing the split, the new root's unit naming Q) become
// durable while no unit allocates Q. The store's llama engine uses 64 KiB..8 MiB segments
// and values up to 1 MiB, so a split of a page of large values hits this. Method: 64 KiB
// segments, nine 40 KiB values on 8-record pages (leaves of such records split past 4, the
// floor: insert.rs `page_limits`): the root leaf splits, Q (2 or more records, 80 KiB or more)
// does not fit a segment. Fixed (h-smo): such a step is aborted (Q freed, nothing
// logged, the leaf stays whole and oversize); since rev-smo F1 (session 17) Q is sized to
// fit, so no step is refused at all; checked too: every key reads back and every
// piece in the log belongs to the first page or to one a committed unit allocated.
#[test]
fn rev_f1_too_large_unit_runs_the_smo_unlogged_on_a_healthy_lss() {
    let sim = SimDir::new(71);
    let lss = lss_with(&sim, 64 << 10);
    let t = BwTree::with_config(small_pages(0))
        .unwrap()
        .with_lss(Arc::clone(&lss), None)
        .unwrap();
    let value = vec![b'v'; 40 << 10];
    for i in 0..9 {
        t.upsert(&key(i), &value).unwrap();
    }
    let mut flushed = 0;
    for pid in t.page_ids() {
        if let Ok(PageFlush::Flushed { .. }) = t.flush_page(pid, &lss) {
            flushed += 1;
        }
    }
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
    let log = read_log(&lss);
    let summary: Vec<String> = log
        .iter()
        .map(|(at, e)| match e {
            Entry::Unit(ops) => format!("{at}: unit {ops:?}").chars().take(160).collect(),
            Entry::Piece(pid) => format!("{at}: piece of page {pid}"),
        })
        .collect();
    eprintln!(
        "pages {:?}, {flushed} flushed, sys_txn_errors {:?}, committed {}; log:\n{}",
        t.page_ids(),
        t.sys_txn_errors(),
        t.sys_txn_stats().unwrap().committed(),
        summary.join("\n")
    );
    assert!(
        lss.reserve(16).is_ok(),
        "the LSS is healthy (not poisoned): it still takes records"
    );
    assert_eq!(
        t.sys_txn_errors(),
        Some(0),
        "an SMO step ran unlogged while the LSS stays healthy and later pieces/units become durable"
    );
    // Since rev-smo F1 (f-smo, session 17) a split on an LSS sizes Q to fit half a segment:
    // the unit fits, nothing is refused, and every page can be flushed.
    assert_eq!(
        t.sys_txn_refused(),
        Some(0),
        "a split sized to fit a segment was refused"
    );
    for pid in t.page_ids() {
        assert!(t.flush_page(pid, &lss).is_ok(), "page {pid} can be flushed");
    }
    for i in 0..9 {
        assert_eq!(
            t.try_get(&key(i)).unwrap().as_deref(),
            Some(&value[..]),
            "key {i}"
        );
    }
    let mut allocated: std::collections::HashSet<u64> = t.page_ids().into_iter().take(1).collect();
    for (at, entry) in &log {
        match entry {
            Entry::Unit(ops) => {
                for op in ops {
                    if let crate::sys_txn::Op::Allocate(pid) = op {
                        allocated.insert(*pid);
                    }
                }
            }
            Entry::Piece(pid) => assert!(
                allocated.contains(pid),
                "piece of page {pid} at {at} before any unit allocates it"
            ),
        }
    }
}

// rev: F2. Goal: a cleaning pass that fails leaves the space accounting as it was (every
// image it posted and did not switch to is dead). `relocate_evicted` posts the images of
// the victim's evicted pages one by one (each counted live by `post_relocation`); when
// rebuilding a later page fails (a damaged or unreadable piece, not a moved page) it returns
// the error at once: the images already posted are never noted lost and no word names them,
// so their bytes stay live for good, and every retry of the same victim posts (and leaks)
// them again. Method: 400 keys, every leaf evicted, the newest piece of the victim's
// highest-PID evicted page damaged; `clean_segment(victim)` fails; live bytes must not grow.
#[test]
fn rev_f2_failed_relocation_pass_leaks_live_bytes() {
    let sim = SimDir::new(72);
    let lss = lss_with(&sim, 16 << 10);
    let t = BwTree::with_config(small_pages(0))
        .unwrap()
        .with_lss(Arc::clone(&lss), None)
        .unwrap();
    for i in 0..400u32 {
        let mut v = format!("v-{i}-").into_bytes();
        v.resize(40, b'x');
        t.upsert(&key(i), &v).unwrap();
    }
    for pid in t.page_ids() {
        while let PageFlush::Lost { .. } = t.flush_page(pid, &lss).unwrap() {}
    }
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
    for pid in t.page_ids() {
        let leaf = t.page_image(pid).is_some_and(|img| img.level == 0);
        if leaf {
            t.evict_pid(pid).unwrap();
        }
    }
    // The victim: the segment with the most evicted pages' live pieces.
    let victim = (0..8)
        .max_by_key(|s| {
            lss.segment_live_pages(*s)
                .iter()
                .filter(|p| t.evicted_at(**p).is_some())
                .count()
        })
        .unwrap();
    let evicted: Vec<_> = lss
        .segment_live_pages(victim)
        .into_iter()
        .filter(|p| t.evicted_at(*p).is_some())
        .collect();
    assert!(
        evicted.len() >= 3,
        "victim {victim}: evicted pages {evicted:?}"
    );
    let bad = *evicted.last().unwrap();
    let at = t.evicted_at(bad).unwrap();
    let (path, offset) = lss.locate(at);
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    let flip = offset as usize + RECORD_HEADER_BYTES + 4;
    assert!(sim.damage(&name, |bytes| bytes[flip] ^= 0xff));
    let live_before = lss.live_bytes();
    let relocations_before = t.clean_stats().unwrap().bytes_relocated.get();
    for attempt in 0..3 {
        let result = t.clean_segment(victim);
        eprintln!(
            "attempt {attempt}: clean_segment({victim}) = {:?}; live bytes {} (before {live_before}), bytes relocated {}",
            result.as_ref().map_err(|e| e.to_string()),
            lss.live_bytes(),
            t.clean_stats().unwrap().bytes_relocated.get() - relocations_before,
        );
        assert!(result.is_err(), "the damaged piece makes cleaning fail");
    }
    assert_eq!(
        lss.live_bytes(),
        live_before,
        "failed cleaning passes left posted, unswitched images counted live"
    );
}

/// 400 keys of 40 bytes on 8-record pages, flushed and stable, every leaf evicted; returns
/// the segment holding the most evicted pages' live pieces and those pages.
fn evicted_victim(t: &BwTree, lss: &Lss) -> (u64, Vec<forest_llama::Pid>) {
    for i in 0..400u32 {
        let mut v = format!("v-{i}-").into_bytes();
        v.resize(40, b'x');
        t.upsert(&key(i), &v).unwrap();
    }
    for pid in t.page_ids() {
        while let PageFlush::Lost { .. } = t.flush_page(pid, lss).unwrap() {}
    }
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
    for pid in t.page_ids() {
        if t.page_image(pid).is_some_and(|img| img.level == 0) {
            t.evict_pid(pid).unwrap();
        }
    }
    let victim = (0..8)
        .max_by_key(|s| {
            lss.segment_live_pages(*s)
                .iter()
                .filter(|p| t.evicted_at(**p).is_some())
                .count()
        })
        .unwrap();
    let evicted = lss
        .segment_live_pages(victim)
        .into_iter()
        .filter(|p| t.evicted_at(*p).is_some())
        .collect();
    (victim, evicted)
}

// Soundness check (passes on the branch): an fsync EIO during a batched relocation (a
// buffer write while posting, or the one Mk-Stable) fails the cleaning pass with every
// evicted page's word unchanged, the victim kept, and no posted image counted live.
#[test]
fn rev_sound_eio_during_batched_relocation_changes_no_word() {
    let sim = SimDir::new(73);
    let lss = lss_with(&sim, 16 << 10);
    let t = BwTree::with_config(small_pages(0))
        .unwrap()
        .with_lss(Arc::clone(&lss), None)
        .unwrap();
    let (victim, evicted) = evicted_victim(&t, &lss);
    assert!(evicted.len() >= 3);
    let words: Vec<_> = evicted.iter().map(|p| t.evicted_at(*p)).collect();
    let live_before = lss.live_bytes();
    sim.set_faults(forest_file::FaultPlan::sync(1));
    let result = t.clean_segment(victim);
    assert!(result.is_err(), "{:?}", result.map_err(|e| e.to_string()));
    let after: Vec<_> = evicted.iter().map(|p| t.evicted_at(*p)).collect();
    assert_eq!(words, after, "words unchanged");
    assert_eq!(
        lss.live_bytes(),
        live_before,
        "no posted image counted live"
    );
    assert!(sim
        .exists(&forest_llama::lss::segment::segment_file_name(victim))
        .unwrap());
}

// Soundness check (passes on the branch): `SmoDelta::decode` refuses hostile bytes of every
// kind without panicking (the branch fuzzes `decode_unit` only), and every strict prefix of
// a valid encoding is refused.
#[test]
fn rev_sound_smo_delta_decode_never_panics() {
    use forest_bwtree::smo_log::SmoDelta;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(74);
    for _ in 0..20_000 {
        let code = rng.random_range(0..10u8);
        let len = rng.random_range(0..64usize);
        let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = SmoDelta::decode(code, &bytes);
    }
    let deltas = [
        SmoDelta::Split {
            separator: b"sep".to_vec(),
            right: 7,
        },
        SmoDelta::IndexTerm {
            separator: b"s".to_vec(),
            child: 3,
            high: Some(b"h".to_vec()),
        },
        SmoDelta::IndexTermDelete {
            separator: b"x".to_vec(),
        },
        SmoDelta::NodeMerge {
            separator: b"m".to_vec(),
            right: 9,
            right_piece: None,
            high: None,
            side_link: 4,
        },
    ];
    for delta in deltas {
        let (code, bytes) = delta.encode();
        assert_eq!(SmoDelta::decode(code, &bytes).unwrap(), delta);
        for cut in 0..bytes.len() {
            assert!(
                SmoDelta::decode(code, &bytes[..cut]).is_err(),
                "{delta:?} cut {cut}"
            );
        }
    }
}
