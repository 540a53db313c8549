//! The two ways to history that no index term names (as_of.rs, "History links"): through a
//! base page's history link after consolidation folded the time-split delta, and through the
//! history link a key split copied to the new right page.

use std::ops::ControlFlow;

use forest_core::{Index, Order, TemporalIndex};
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

fn history(tree: &TsbTree, key: &[u8]) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    tree.history(key, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.map(<[u8]>::to_vec)));
        ControlFlow::Continue(())
    })
    .expect("retained");
    out
}

// Goal: as-of gets and histories reach versions that a time split moved to a historical page
// after consolidation absorbed the split delta, and versions of a key that a later key split
// moved to a new page. Method: on the root leaf, write "x" five times (the fifth write
// time-splits the page, which is then consolidated, and grows a root over the historical page
// and the leaf), then four new keys (a key split moves "x" to the new right page Q with the
// copied history link); check every version of "x" by as-of get (through the root's terms)
// and by history (which walks the history links: the consolidated base's, then the copied
// one), and the split counters.
#[test]
fn history_is_reached_after_consolidation_and_after_a_key_split() {
    let tree = small();
    let mut stamps = Vec::new();
    for i in 0..5u8 {
        stamps.push(tree.upsert_ts(b"x", &[i]).expect("small"));
    }
    let stats = tree.stats();
    assert_eq!(stats.counter(counter_names::TIME_SPLITS), Some(1));
    assert_eq!(stats.counter(counter_names::HISTORICAL_PAGES), Some(1));
    assert_eq!(stats.height, 2, "the root leaf's time split grew a root");
    let mut out = Vec::new();
    for (i, &ts) in stamps.iter().enumerate() {
        assert!(
            tree.get_as_of(b"x", ts, &mut out).expect("retained"),
            "x at {ts}"
        );
        assert_eq!(out, [i as u8]);
    }
    assert!(!tree
        .get_as_of(b"x", stamps[0] - 1, &mut out)
        .expect("retained"));
    for key in [b"a", b"b", b"c", b"d"] {
        tree.upsert(key, b"v").expect("small");
    }
    let stats = tree.stats();
    assert_eq!(stats.counter(counter_names::KEY_SPLITS), Some(1));
    assert_eq!(stats.height, 2, "the root grew once, at the time split");
    // "x" now lives on the key split's right page; its older versions only on the
    // historical page that the right page's copied link names.
    let want: Vec<(u64, Option<Vec<u8>>)> = stamps
        .iter()
        .enumerate()
        .map(|(i, &ts)| (ts, Some(vec![i as u8])))
        .collect();
    assert_eq!(history(&tree, b"x"), want);
    for (i, &ts) in stamps.iter().enumerate() {
        assert!(
            tree.get_as_of(b"x", ts, &mut out).expect("retained"),
            "x at {ts}"
        );
        assert_eq!(out, [i as u8]);
    }
    // A delete ends the lifetime with a tombstone; the history shows it once.
    let gone = tree.remove_ts(b"x").expect("present");
    assert!(!tree.get(b"x", &mut out));
    assert!(tree.get_as_of(b"x", gone - 1, &mut out).expect("retained"));
    let h = history(&tree, b"x");
    assert_eq!(h.len(), 6);
    assert_eq!(h[5], (gone, None));
}

// Goal: the temporal model on small pages really time-splits, key-splits and grows the tree
// (so the kit's temporal check covers the split paths). Method: run the kit's model on a
// small-page tree and read the counters.
#[test]
fn temporal_model_on_small_pages_splits_by_key_and_time() {
    let tree = small();
    forest_core::conformance::temporal::temporal_model_on(
        &tree,
        3_000,
        forest_core::conformance::seed(),
    );
    let stats = tree.stats();
    assert!(
        stats.counter(counter_names::TIME_SPLITS).unwrap_or(0) > 10,
        "{stats:?}"
    );
    assert!(
        stats.counter(counter_names::KEY_SPLITS).unwrap_or(0) > 10,
        "{stats:?}"
    );
    assert!(stats.height >= 3, "{stats:?}");
}
