//! Index time splits (TSBw-tree §III-A3 for index pages, §IV-B2's split times): an index page
//! holding many terms of one key time-splits instead of growing, historical index pages never
//! hold a term to a current page, and as-of reads stay right through historical index pages.

use std::time::Instant;

use forest_core::{Index, TemporalIndex, Timestamp};
use forest_tsbtree::{counter_names, TsbConfig, TsbTree};

fn tiny() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 3,
        max_index_entries: 5,
        consolidate_threshold: 1,
        time_split_percent: 33,
    })
    .expect("valid config")
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats().counter(name).unwrap_or(0)
}

/// Updates of the hot key: enough for thousands of index time splits at several levels while
/// staying within a few seconds in the ci profile (the time is printed); a fifth of that in
/// unoptimized builds (the kit's sizes tell which).
fn hot_updates() -> u32 {
    if forest_core::conformance::Sizes::for_build().stress_op_count >= 1_000_000 {
        50_000
    } else {
        10_000
    }
}

// Goal: a hot key updated many times on tiny pages makes its index pages time-split, so that
// every index page (current and historical) stays within its limit, and as-of reads at every
// recorded time stay right. Before index time splits, the leaf's parent held one term per
// leaf time split and grew without bound (session 9: 120 s at 100 k operations, superlinear).
// Method: 16 keys, then `hot_updates()` upserts of one of them with values that name their
// position; check the structure (page sizes, no historical index page leading to a current
// page), the counters, every version as of its timestamp and just before it, the cold keys
// at a sample of times, and the tree's height (logarithmic in the versions).
#[test]
fn hot_key_index_pages_stay_bounded_and_as_of_reads_stay_right() {
    let begin = Instant::now();
    let tree = tiny();
    let mut cold_stamps = Vec::new();
    for i in 0..16u32 {
        let key = format!("key{i:02}");
        cold_stamps.push(tree.upsert_ts(key.as_bytes(), b"cold").expect("small"));
    }
    let hot = b"key07";
    let updates = hot_updates();
    let mut stamps: Vec<Timestamp> = Vec::with_capacity(updates as usize);
    for i in 0..updates {
        stamps.push(tree.upsert_ts(hot, &i.to_be_bytes()).expect("small"));
    }
    let written = begin.elapsed();
    let shape = tree.check_structure().expect("structure");
    let limit = tree.config().max_index_entries + 1;
    assert!(
        shape.max_current_index_terms <= limit && shape.max_historical_index_terms <= limit,
        "index pages over {limit} terms: {shape:?}"
    );
    assert!(
        shape.historical_index_pages > 100,
        "the hot key's terms went to historical index pages: {shape:?}"
    );
    assert!(counter(&tree, counter_names::INDEX_TIME_SPLITS) > 100);
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    let height = tree.stats().height;
    assert!(
        (3..=24).contains(&height),
        "height {height} for {updates} versions: logarithmic, not one level per split"
    );
    let mut out = Vec::new();
    for (i, &ts) in stamps.iter().enumerate() {
        assert!(
            tree.get_as_of(hot, ts, &mut out).expect("retained"),
            "version {i} at {ts}"
        );
        assert_eq!(out, (i as u32).to_be_bytes(), "version {i} at {ts}");
        let before = ts - 1;
        assert!(
            tree.get_as_of(hot, before, &mut out).expect("retained"),
            "before version {i}"
        );
        if i == 0 {
            assert_eq!(out, b"cold");
        } else {
            assert_eq!(out, (i as u32 - 1).to_be_bytes(), "before version {i}");
        }
    }
    for &ts in stamps.iter().step_by(997) {
        for i in 0..16u32 {
            let key = format!("key{i:02}");
            if key.as_bytes() == hot {
                continue;
            }
            assert!(
                tree.get_as_of(key.as_bytes(), ts, &mut out)
                    .expect("retained"),
                "{key} at {ts}"
            );
            assert_eq!(out, b"cold");
        }
    }
    assert!(!tree
        .get_as_of(b"key00", cold_stamps[0] - 1, &mut out)
        .expect("retained"));
    assert!(tree.get(hot, &mut out));
    assert_eq!(out, (updates - 1).to_be_bytes());
    println!(
        "{updates} hot updates in {written:?}, all checks in {:?}; height {height}, {shape:?}",
        begin.elapsed()
    );
}

// Goal: the kit's temporal model (random upserts and removes, as-of gets, scans and histories
// at random past times against a BTreeMap of versions) stays right on tiny pages where index
// pages time-split often. Method: run it, then count index time splits (> 0) and check the
// structure and that no term was ever posted before its index page's start.
#[test]
fn temporal_model_on_tiny_pages_time_splits_index_pages() {
    let begin = Instant::now();
    let tree = tiny();
    forest_core::conformance::temporal::temporal_model_on(
        &tree,
        4_000,
        forest_core::conformance::seed(),
    );
    let splits = counter(&tree, counter_names::INDEX_TIME_SPLITS);
    assert!(splits > 0, "{:?}", tree.stats());
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    let shape = tree.check_structure().expect("structure");
    println!(
        "{splits} index time splits in {:?}: {shape:?}",
        begin.elapsed()
    );
}

// Goal: concurrent writers of hot keys sharing index pages time-split those pages under each
// other (helping along each other's half-done splits) without losing a version or posting a
// term before its index page's start. Method: 4 threads, each upserting its own 4 keys
// (interleaved with the others' in key order) 5 000 times on tiny pages; then every version
// of every key by as-of get at its timestamp, the counters and the structure.
#[test]
fn concurrent_hot_keys_time_split_shared_index_pages() {
    const THREADS: u32 = 4;
    const OPS: u32 = 5_000;
    let begin = Instant::now();
    let tree = tiny();
    type Written = Vec<(Vec<u8>, Timestamp, Vec<u8>)>;
    let written: Vec<Written> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || {
                    let mut mine = Vec::with_capacity(OPS as usize);
                    for op in 0..OPS {
                        let key = format!("k{:02}", (op % 4) * THREADS + t).into_bytes();
                        let value = (t << 24 | op).to_be_bytes().to_vec();
                        let ts = tree.upsert_ts(&key, &value).expect("small");
                        mine.push((key, ts, value));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer"))
            .collect()
    });
    let mut out = Vec::new();
    for (key, ts, value) in written.iter().flatten() {
        assert!(
            tree.get_as_of(key, *ts, &mut out).expect("retained"),
            "{key:?} at {ts}"
        );
        assert_eq!(&out, value, "{key:?} at {ts}");
    }
    let splits = counter(&tree, counter_names::INDEX_TIME_SPLITS);
    assert!(splits > 0, "{:?}", tree.stats());
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    assert_eq!(counter(&tree, counter_names::ACTIVE_TIME_SPLITS), 0);
    let shape = tree.check_structure().expect("structure");
    println!(
        "{splits} index time splits under {THREADS} threads in {:?}: {shape:?}",
        begin.elapsed()
    );
}
