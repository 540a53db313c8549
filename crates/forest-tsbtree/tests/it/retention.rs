//! Retention (retention.rs, §V-C (1) in memory): reads below the threshold refused, answers at
//! or above it unchanged, historical pages freed and their PIDs reused without a stale term
//! ever leading a read to a recycled PID, and a bounded page count under a rising threshold.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order, TemporalIndex};
use forest_tsbtree::{counter_names, TsbConfig, TsbTree};

type Model = BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>>;

fn tiny() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 4,
        max_index_entries: 4,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .expect("valid config")
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats().counter(name).expect("tsbtree counter")
}

/// Writes `rounds` rounds over `keys` keys (every 7th write a delete), into `model`.
fn write(tree: &TsbTree, model: &mut Model, keys: usize, rounds: usize, tag: u8) {
    for round in 0..rounds {
        for k in 0..keys {
            let key = format!("key{k:02}").into_bytes();
            if (round * keys + k) % 7 == 6 {
                if let Some(ts) = tree.remove_ts(&key) {
                    model.entry(key).or_default().insert(ts, None);
                }
            } else {
                let value = vec![tag, round as u8, k as u8];
                let ts = tree.upsert_ts(&key, &value).expect("small entry");
                model.entry(key).or_default().insert(ts, Some(value));
            }
        }
    }
}

fn model_at(model: &Model, key: &[u8], t: u64) -> Option<Vec<u8>> {
    model
        .get(key)?
        .range(..=t)
        .next_back()
        .and_then(|(_, v)| v.clone())
}

/// Every key as of `t` by get, both scans and each key's history from `t` on, against the
/// model.
fn check_at(tree: &TsbTree, model: &Model, t: u64) {
    let mut out = Vec::new();
    for key in model.keys() {
        let got = tree
            .get_as_of(key, t, &mut out)
            .unwrap_or_else(|e| panic!("get at {t}: {e}"))
            .then(|| out.clone());
        assert_eq!(got, model_at(model, key, t), "{key:?} at {t}");
        let mut history = Vec::new();
        tree.history(key, t, u64::MAX, Order::Ascending, &mut |ts, v| {
            history.push((ts, v.map(<[u8]>::to_vec)));
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("history from {t}: {e}"));
        let want: Vec<_> = model[key]
            .range(t..)
            .map(|(ts, v)| (*ts, v.clone()))
            .collect();
        assert_eq!(history, want, "{key:?}'s history from {t}");
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .keys()
        .filter_map(|k| model_at(model, k, t).map(|v| (k.clone(), v)))
        .collect();
    for order in [Order::Ascending, Order::Descending] {
        let mut got = Vec::new();
        tree.scan_as_of(Bound::Unbounded, Bound::Unbounded, order, t, &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("scan at {t}: {e}"));
        if order == Order::Descending {
            got.reverse();
        }
        assert_eq!(got, want, "{order:?} scan at {t}");
    }
}

/// Every read below `threshold` is refused with the error naming it.
fn check_refused(tree: &TsbTree, model: &Model, t: u64, threshold: u64) {
    let named = |e: forest_core::Error| {
        let text = e.to_string();
        assert!(
            text.contains(&format!("history before {threshold} is discarded")),
            "{text}"
        );
    };
    let key = model.keys().next().expect("keys");
    let mut out = Vec::new();
    named(tree.get_as_of(key, t, &mut out).expect_err("get below T"));
    named(
        tree.scan_as_of(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            t,
            &mut |_, _| ControlFlow::Continue(()),
        )
        .expect_err("scan below T"),
    );
    named(
        tree.history(key, t, u64::MAX, Order::Ascending, &mut |_, _| {
            ControlFlow::Continue(())
        })
        .expect_err("history from below T"),
    );
}

// Goal: reads at or above T answer as before a threshold was set, reads below are refused
// naming T, and historical pages before T are freed. Method: 6 keys on tiny pages, 60 rounds
// of updates and deletes, T at the middle write; compare gets, scans and histories at T, T+1
// and later times with the model, before and after raising T; reads at T-1 and 0 refused.
#[test]
fn reads_below_the_threshold_are_refused_and_above_unchanged() {
    let tree = tiny();
    let mut model = Model::new();
    write(&tree, &mut model, 6, 60, 1);
    let mut stamps: Vec<u64> = model.values().flat_map(|v| v.keys().copied()).collect();
    stamps.sort_unstable();
    let threshold = stamps[stamps.len() / 2];
    let probes = [
        threshold,
        threshold + 1,
        stamps[stamps.len() * 3 / 4],
        tree.now(),
    ];
    let pages_before = counter(&tree, counter_names::LIVE_PAGES);
    tree.set_retention(threshold).expect("in memory");
    assert_eq!(tree.retention(), threshold);
    let freed = counter(&tree, counter_names::RETIRED_PAGES);
    assert!(freed > 0, "historical pages before T were freed");
    assert_eq!(
        counter(&tree, counter_names::LIVE_PAGES),
        pages_before - freed
    );
    for &t in &probes {
        check_at(&tree, &model, t);
    }
    check_refused(&tree, &model, threshold - 1, threshold);
    check_refused(&tree, &model, 0, threshold);
    // Only grows: a lower threshold changes nothing.
    tree.set_retention(threshold - 10).expect("in memory");
    assert_eq!(tree.retention(), threshold);
    tree.check_structure().expect("structure");
    assert_eq!(counter(&tree, counter_names::STALE_TERMS_REFUSED), 0);
}

// Goal: a recycled PID is never reached through a stale term: after T frees historical leaf
// and index pages and their PIDs are reused by later splits, reads as of T and T+1, which
// descend through historical index pages still holding terms to the freed PIDs, answer
// exactly as the model. Method: 4 hot keys on tiny pages (index time splits, height grows),
// T at 60 % of the writes, the epoch drained, then more writes until the mapping table's
// PID range stops growing while pages are made (PIDs reused) and some live index page has a
// term that T passed leading to a page that does not cover it (`recycled_stale_terms`).
#[test]
fn a_recycled_pid_is_never_reached_through_a_stale_term() {
    let tree = tiny();
    let mut model = Model::new();
    write(&tree, &mut model, 4, 300, 1);
    let mut stamps: Vec<u64> = model.values().flat_map(|v| v.keys().copied()).collect();
    stamps.sort_unstable();
    let threshold = stamps[stamps.len() * 6 / 10];
    let mark = crate::recycle_mark(&tree);
    tree.set_retention(threshold).expect("in memory");
    crate::drain_epochs_until_recycled(&tree, mark);
    let pid_end = tree.pid_end();
    let splits =
        counter(&tree, counter_names::TIME_SPLITS) + counter(&tree, counter_names::KEY_SPLITS);
    write(&tree, &mut model, 4, 40, 2);
    let made = counter(&tree, counter_names::TIME_SPLITS)
        + counter(&tree, counter_names::KEY_SPLITS)
        - splits;
    assert!(made > 0, "the later writes split pages");
    assert!(
        tree.pid_end() - pid_end < made as usize,
        "freed PIDs were reused: pid range grew {} for {made} new pages",
        tree.pid_end() - pid_end
    );
    let recycled = tree.recycled_stale_terms();
    assert!(recycled > 0, "some stale term names a recycled PID");
    for t in [threshold, threshold + 1] {
        check_at(&tree, &model, t);
    }
    check_refused(&tree, &model, threshold - 1, threshold);
    assert_eq!(counter(&tree, counter_names::STALE_TERMS_REFUSED), 0);
    tree.check_structure().expect("structure");
}

// Goal: with a threshold that follows the writes, a workload of updates to few keys keeps the
// page count bounded (pages counted, not time). Method: 8 keys on tiny pages, 30 rounds of
// 25 updates per key, T raised after each round to the time 25 writes back; the live page
// count of the last rounds stays within twice that after round 5 while pages keep being made.
#[test]
fn a_rising_threshold_bounds_the_page_count() {
    let tree = tiny();
    let mut model = Model::new();
    let mut live = Vec::new();
    for round in 0..30u8 {
        write(&tree, &mut model, 8, 25, round);
        let mut stamps: Vec<u64> = model.values().flat_map(|v| v.keys().copied()).collect();
        stamps.sort_unstable();
        let threshold = stamps[stamps.len() - 25];
        tree.set_retention(threshold).expect("in memory");
        // The model keeps what the tree keeps: the versions a read at T or later needs.
        for versions in model.values_mut() {
            let keep = versions.range(..=threshold).next_back().map(|(t, _)| *t);
            versions.retain(|t, _| Some(*t) >= keep);
        }
        live.push(counter(&tree, counter_names::LIVE_PAGES));
        check_at(&tree, &model, threshold);
    }
    let made = counter(&tree, counter_names::TIME_SPLITS);
    let bound = 2 * live[5];
    assert!(
        live[20..].iter().all(|&n| n <= bound),
        "live pages {live:?} exceed {bound} (time splits made: {made})"
    );
    assert!(
        made > 4 * bound,
        "pages kept being made: {made} time splits"
    );
    tree.check_structure().expect("structure");
    assert!(tree.get(b"key00", &mut Vec::new()));
}
