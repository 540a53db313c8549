//! Versions at given timestamps (`stamped.rs`): a store's writes and their redo.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use forest_core::{Error, Index, Order, TemporalIndex};
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

/// A key's versions: (timestamp, value or None for a tombstone).
type Versions = Vec<(u64, Option<Vec<u8>>)>;

fn history(tree: &TsbTree, key: &[u8]) -> Versions {
    let mut out = Vec::new();
    tree.history(key, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.map(<[u8]>::to_vec)));
        ControlFlow::Continue(())
    })
    .expect("retained");
    out
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats()
        .counters
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |c| c.1)
}

// Goal: versions put at given timestamps are read back as of each time, a redo of every one
// of them (also after key and time splits moved them) changes nothing, and the clock moves
// past them. Method: 300 versions over 7 keys at timestamps 10, 20, ... with small pages
// (both split kinds happen), then the same 300 again; compare every history with a model,
// and the versions counter before and after the redo.
#[test]
fn versions_at_given_times_and_redo_is_a_no_op() {
    let tree = small();
    let mut model: BTreeMap<Vec<u8>, Versions> = BTreeMap::new();
    let mut writes = Vec::new();
    for i in 0..300u64 {
        let key = format!("k{}", i * 7 % 11 % 7).into_bytes();
        let value = (i % 5 != 4).then(|| i.to_le_bytes().to_vec());
        let ts = 10 * (i + 1);
        writes.push((key.clone(), ts, value.clone()));
        assert!(tree.put_version(&key, ts, value.as_deref()).unwrap());
        model.entry(key).or_default().push((ts, value));
    }
    assert!(counter(&tree, counter_names::TIME_SPLITS) > 0);
    assert!(counter(&tree, counter_names::KEY_SPLITS) > 0);
    let versions = counter(&tree, counter_names::VERSIONS);
    for (key, ts, value) in &writes {
        assert!(
            !tree.put_version(key, *ts, value.as_deref()).unwrap(),
            "redo of ({key:?}, {ts}) wrote a version"
        );
    }
    assert_eq!(counter(&tree, counter_names::VERSIONS), versions);
    for (key, versions) in &model {
        assert_eq!(&history(&tree, key), versions, "{key:?}");
        for (ts, value) in versions {
            let mut out = Vec::new();
            let found = tree.get_as_of(key, *ts, &mut out).expect("retained");
            assert_eq!(found.then_some(out), value.clone());
        }
    }
    assert!(tree.tick() > 3000);
    tree.check_structure().unwrap();
}

// Goal: a version older than its key's newest that is not already there is refused with an
// error that says why, and changes nothing. Method: versions at 100 and 200, then one at 150.
#[test]
fn an_older_new_version_is_refused() {
    let tree = small();
    tree.put_version(b"a", 100, Some(b"1")).unwrap();
    tree.put_version(b"a", 200, Some(b"2")).unwrap();
    match tree.put_version(b"a", 150, Some(b"x")) {
        Err(Error::InvalidUse(m)) => assert!(m.contains("timestamp order"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(history(&tree, b"a").len(), 2);
}
