//! §IV-B1's EOSL-TS (`time_split.rs`, `TsbTree::split_time`): a store's timestamps taken and
//! not yet applied hold leaf split times below them.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use forest_core::{InFlight, Index, Order, TemporalIndex};
use forest_tsbtree::{counter_names, TsbConfig, TsbTree};

/// A store's slot of timestamps in flight, set and cleared by the test.
#[derive(Default)]
struct Slots(Mutex<Vec<u64>>);

impl InFlight for Slots {
    fn oldest_unapplied(&self) -> Option<u64> {
        self.0.lock().expect("slots").iter().copied().min()
    }
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats()
        .counters
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |c| c.1)
}

fn history(tree: &TsbTree, key: &[u8]) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    tree.history(key, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.map(<[u8]>::to_vec)));
        ControlFlow::Continue(())
    })
    .expect("retained");
    out
}

// Goal: a unit that took its timestamp and has not applied it yet while its page
// time-splits still applies afterwards, at its timestamp, in the current page: the split
// time stays at or below it (before EOSL-TS the split took the clock's newest timestamp, and
// the late version was refused as "older than its page's start"). Method: a tick held in
// flight, then 40 updates of one key on the same 6-version leaf from later ticks (time
// splits happen), then the held version is put; its history, as-of reads just before and at
// it, and every later split time are checked; then, with nothing in flight, splits move on.
#[test]
fn a_timestamp_in_flight_holds_the_split_time_below_it() {
    let tree = TsbTree::with_config(TsbConfig {
        max_records_per_page: 6,
        max_index_entries: 6,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .expect("valid config");
    let slots = Arc::new(Slots::default());
    tree.set_in_flight(slots.clone());
    tree.upsert_ts(b"b", b"old").expect("write");
    let held = tree.tick();
    slots.0.lock().expect("slots").push(held);
    for i in 0..40u32 {
        let ts = tree.tick();
        tree.put_version(b"a", ts, Some(&i.to_le_bytes()))
            .expect("in order");
        assert!(
            tree.split_time() <= held,
            "split time passed a unit in flight"
        );
    }
    assert!(
        counter(&tree, counter_names::TIME_SPLITS) > 0,
        "no time split ran"
    );
    let splits_before = counter(&tree, counter_names::TIME_SPLITS);
    assert!(
        tree.put_version(b"b", held, Some(b"late"))
            .expect("the held version applies after the splits"),
        "a new version"
    );
    slots.0.lock().expect("slots").clear();
    let h = history(&tree, b"b");
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[1], (held, Some(b"late".to_vec())));
    let mut out = Vec::new();
    assert!(tree.get_as_of(b"b", held - 1, &mut out).expect("retained"));
    assert_eq!(out, b"old");
    assert!(tree.get_as_of(b"b", held, &mut out).expect("retained"));
    assert_eq!(out, b"late");
    // Nothing in flight: split times follow the clock again, so history moves out.
    for i in 0..40u32 {
        tree.upsert_ts(b"a", &i.to_le_bytes()).expect("write");
    }
    assert!(tree.split_time() > held);
    assert!(counter(&tree, counter_names::TIME_SPLITS) > splits_before);
    assert_eq!(history(&tree, b"a").len(), 80);
}
