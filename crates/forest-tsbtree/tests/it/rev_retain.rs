//! Review rev-retain (session 13): retention's PID reuse against the splits' lookups of a
//! page's term by PID (`key_split.rs` complete_split, `time_split.rs` help_time_split,
//! `page.rs` TimeTerm), which a stale term naming a reused PID can fool. Run one test at a
//! time: a livelocked worker stays pinned and stops the epoch for the rest of the binary.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use forest_core::{Index, TemporalIndex};
use forest_tsbtree::{TsbConfig, TsbTree};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Writes one version of a key.
type Put = fn(&TsbTree, &[u8], &[u8]);

/// Tiny leaves under a wide root: the root keeps every stale term of a hot key.
fn wide_root() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 4,
        max_index_entries: 256,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .expect("valid config")
}

/// Runs `work` on its own thread; None when it does not finish within 20 s (it is left
/// spinning: the test fails and the binary exits).
fn finishes<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

/// Every key of `model` read at the current time: the keys read wrong.
fn wrong_keys(tree: &TsbTree, model: &Model) -> Vec<String> {
    let mut out = Vec::new();
    model
        .iter()
        .filter(|(k, v)| !(tree.get(k, &mut out) && out == **v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

/// 120 versions of key `a`, then (`between`) e.g. a threshold, the epoch drained, then 4
/// rounds over 200 new keys; `put` writes one version. Returns the model.
fn workload(tree: &TsbTree, put: Put, between: &dyn Fn(&TsbTree)) -> Model {
    let mut model = Model::new();
    for i in 0..120u32 {
        let value = i.to_le_bytes().to_vec();
        put(tree, b"a", &value);
        model.insert(b"a".to_vec(), value);
    }
    let mark = crate::recycle_mark(tree);
    between(tree);
    crate::drain_epochs_until_recycled(tree, mark);
    for round in 0..4u32 {
        for k in 0..200u32 {
            let key = format!("b{k:03}").into_bytes();
            let value = (round * 1000 + k).to_le_bytes().to_vec();
            put(tree, &key, &value);
            model.insert(key, value);
        }
    }
    model
}

/// The workload on a fresh tree, on its own thread: whether it finished, then every key
/// read right and the structure sound.
fn check(put: Put, between: fn(&TsbTree), what: &str) {
    let tree = Arc::new(wide_root());
    let worker = Arc::clone(&tree);
    let model = finishes(move || workload(&worker, put, &between))
        .unwrap_or_else(|| panic!("{what}: the writes did not finish in 20 s (livelock)"));
    let wrong = wrong_keys(&tree, &model);
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} keys read wrong, first {:?}",
        wrong.len(),
        model.len(),
        &wrong[..wrong.len().min(8)]
    );
    tree.check_structure()
        .unwrap_or_else(|e| panic!("{what}: structure: {e}"));
}

fn upsert(tree: &TsbTree, key: &[u8], value: &[u8]) {
    tree.upsert_ts(key, value).expect("small entry");
}

// Goal: after retention frees historical pages and later splits reuse their PIDs, writes
// finish and current reads find every key. Method: one hot key on tiny leaves under a wide
// root (which keeps that key's stale terms, each naming a historical page), T raised to now
// (the pages freed), the epoch drained (their PIDs on the free list), then 200 new keys
// written 4 times: the key splits' right pages take the reused PIDs while the root still has
// stale terms naming them. The same workload without a threshold first, as the control.
#[test]
fn a_reused_pid_named_by_a_stale_term_is_not_taken_for_the_new_page() {
    check(upsert, |_| {}, "control, no threshold");
    check(
        upsert,
        |tree| tree.set_retention(tree.now()).expect("in memory"),
        "threshold at now",
    );
}

/// A store's redo: every version put at its own timestamp (a fresh tick).
fn put_in_order(tree: &TsbTree, key: &[u8], value: &[u8]) {
    let ts = tree.tick();
    tree.put_version(key, ts, Some(value)).expect("in order");
}

// Goal: the same through a store's redo, which applies its persisted threshold first and
// then puts every logged version at its timestamp (`store/temporal.rs`): time splits below
// T free their historical pages at once, and later splits of the redo reuse the PIDs.
// Method: the workload with versions put at increasing timestamps (the clock's next) on a
// tree whose threshold is set first, far above them; the control without a threshold.
#[test]
fn redo_below_a_persisted_threshold_keeps_every_key_reachable() {
    check(put_in_order, |_| {}, "control, no threshold");
    let tree = Arc::new(wide_root());
    tree.set_retention(u64::MAX / 2).expect("in memory");
    let worker = Arc::clone(&tree);
    let model = finishes(move || workload(&worker, put_in_order, &|_| {}))
        .expect("redo below the threshold: the puts did not finish in 20 s (livelock)");
    assert!(wrong_keys(&tree, &model).is_empty(), "keys read wrong");
}

// rev-tsb5 F2: `drain_epochs_until_recycled` waited until the free list held as many PIDs as
// retention ever retired; once a split had reused one (a store's redo below its threshold
// frees historical pages at once, and the epoch may drain during the puts), that count was
// never reached and the helper spun for 300 s. Goal: the helper returns after PID reuse.
// Method: the redo workload's 120 puts on a tree whose threshold is set first, the epoch
// flushed between puts (as a loaded process does; some freed PIDs are reused), the mark,
// then the helper on its own thread, which must return within `finishes`' 20 s.
#[test]
fn rev_tsb5_f2_drain_helper_terminates_after_pid_reuse() {
    let tree = Arc::new(wide_root());
    tree.set_retention(u64::MAX / 2).expect("in memory");
    for i in 0..120u32 {
        put_in_order(&tree, b"a", &i.to_le_bytes());
        crossbeam_epoch::pin().flush();
    }
    let mark = crate::recycle_mark(&tree);
    let worker = Arc::clone(&tree);
    finishes(move || crate::drain_epochs_until_recycled(&worker, mark))
        .expect("the drain helper returned");
}
