//! `TemporalIndex::versions_from` (`export.rs`): the versions that reads from a time on need,
//! what a store's temporal checkpoint writes.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};

use forest_core::{Index, TemporalIndex};
use forest_tsbtree::{counter_names, TsbConfig, TsbTree};

fn small() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 4,
        max_index_entries: 4,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .expect("valid config")
}

/// Per key, its versions in timestamp order (None: a tombstone).
type Model = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;
type Versions = Vec<(Vec<u8>, u64, Option<Vec<u8>>)>;

/// The rule of `versions_from`, on the model: among versions up to `to`, those at or after
/// `from`, and each key's value current at `from`.
fn expected(model: &Model, from: u64, to: u64) -> Versions {
    let mut out = Vec::new();
    for (key, versions) in model {
        let upto: Vec<_> = versions.iter().filter(|(ts, _)| *ts <= to).collect();
        for (i, (ts, value)) in upto.iter().enumerate() {
            let next = upto.get(i + 1).map(|(t, _)| *t);
            if *ts >= from || (value.is_some() && next.is_none_or(|n| n >= from)) {
                out.push((key.clone(), *ts, value.clone()));
            }
        }
    }
    out
}

fn exported(tree: &TsbTree, from: u64, to: u64) -> Versions {
    let mut out = Vec::new();
    tree.versions_from(from, to, &mut |key, ts, value| {
        out.push((key.to_vec(), ts, value.map(<[u8]>::to_vec)));
        ControlFlow::Continue(())
    })
    .expect("from is retained");
    // Handed out in no particular order; each once (a duplicate makes the lists differ).
    out.sort();
    out
}

/// A small deterministic generator (no dependency for a few choices).
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// Writes version `i` (at timestamp 10 * (i + 1)) of a random key into `tree` and `model`.
fn write(tree: &TsbTree, model: &mut Model, i: u64, rng: &mut u64) {
    let key = format!("k{:02}", next(rng) % 13).into_bytes();
    let present = model
        .get(&key)
        .and_then(|v| v.last())
        .is_some_and(|(_, v)| v.is_some());
    let value = (!present || !next(rng).is_multiple_of(4)).then(|| i.to_le_bytes().to_vec());
    let ts = 10 * (i + 1);
    assert!(tree
        .put_version(&key, ts, value.as_deref())
        .expect("in order"));
    model.entry(key).or_default().push((ts, value));
}

// Goal: the export hands out exactly the versions reads from `from` on need (the model's
// rule), each once, for thresholds and cuts at, between and around
// versions, before and after retention discarded history. Method: 600 versions over 13 keys
// with small pages (key and time splits); every 150 versions the threshold rises and the
// export is compared with the model for several (from, to).
#[test]
fn versions_from_match_the_model() {
    let tree = small();
    let mut model = Model::new();
    let mut rng = 7;
    let mut threshold = 0;
    for i in 0..600u64 {
        write(&tree, &mut model, i, &mut rng);
        if i % 150 == 149 {
            let newest = 10 * (i + 1);
            for (from, to) in [
                (threshold, newest),
                (threshold, u64::MAX),
                (threshold + 5, newest - 25),
                (newest - 300, newest - 300),
                (newest - 295, newest - 10),
                (newest, newest),
            ] {
                let want = expected(&model, from, to);
                assert_eq!(exported(&tree, from, to), want, "from {from} to {to}");
            }
            threshold = newest - 400;
            tree.set_retention(threshold).expect("in memory");
            assert_eq!(
                exported(&tree, threshold, newest),
                expected(&model, threshold, newest)
            );
            let err = tree
                .versions_from(threshold - 1, newest, &mut |_, _, _| {
                    ControlFlow::Continue(())
                })
                .expect_err("below the threshold");
            assert!(err.to_string().contains("discarded"), "{err}");
        }
    }
    let count = |name| {
        tree.stats()
            .counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |c| c.1)
    };
    assert!(count(counter_names::TIME_SPLITS) > 0);
    assert!(count(counter_names::KEY_SPLITS) > 0);
    assert!(count(counter_names::RETIRED_PAGES) > 0);
}

// Goal: an export up to a cut sees exactly the versions up to it while a writer goes on
// adding later versions (and splitting pages under the walk). Method: a thread puts versions
// at rising timestamps; the main thread reads how far the writer got, exports up to there,
// and compares with the model of those versions.
#[test]
fn versions_from_up_to_a_cut_while_writing() {
    let tree = small();
    let written = AtomicU64::new(0);
    let total = 2000u64;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut model = Model::new();
            let mut rng = 11;
            for i in 0..total {
                write(&tree, &mut model, i, &mut rng);
                written.store(i + 1, Ordering::SeqCst);
            }
            model
        });
        let mut cuts = Vec::new();
        while written.load(Ordering::SeqCst) < total {
            let done = written.load(Ordering::SeqCst);
            let cut = 10 * done;
            let from = cut.saturating_sub(500);
            cuts.push((from, cut, exported(&tree, from, cut)));
        }
        let model = writer.join().expect("writer");
        assert!(!cuts.is_empty());
        for (from, cut, got) in cuts {
            assert_eq!(got, expected(&model, from, cut), "from {from} cut {cut}");
        }
    });
}
