//! tsbtree on LSS-C with threads paused at test-only points (`src/storage.rs`): a flush
//! paused between its reservation and its CAS loses to a write and a split and leaves no
//! flush delta; a key split and a time split paused between Algorithm 1's two steps survive
//! every page being evicted and loaded again, and complete afterwards.
//!
//! Run with `cargo test -p forest-tsbtree --features pause-points --test it -- storage_pause::`.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::ControlFlow;
use std::sync::Arc;

use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::{Index, Order, TemporalIndex};
use forest_file::SimDir;
use forest_tsbtree::{counter_names, TsbFlush, TsbTree};

fn tree_on_lss(seed: u64) -> (TsbTree, SimDir) {
    crate::on_lss::tree_on(crate::on_lss::small(), None, seed)
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn history(tree: &TsbTree, k: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    tree.history(k, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.unwrap_or_default().to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn evict_all(tree: &TsbTree) -> usize {
    let mut evicted = 0;
    for pid in tree.page_ids() {
        evicted += usize::from(tree.evict_pid(pid).unwrap());
    }
    evicted
}

// Goal: a flush whose page changes between its reservation and its CAS loses (a filler takes
// its room, no flush delta goes in), and the page's later image holds the change. Method:
// pause a flush of the leaf holding key 0 at `flush:reserved`; meanwhile update key 0 until
// the leaf key-splits and time-splits; release: the flush reports Lost; then evict every
// page and read every version back.
#[test]
fn a_paused_flush_loses_to_writes_and_splits() {
    let _turn = take_turn();
    let (tree, _sim) = tree_on_lss(11);
    let tree = Arc::new(tree);
    let first = tree.upsert_ts(&key(0), b"v0").unwrap();
    let leaf = tree.leaf_pid(&key(0)).unwrap();
    let gate = arm("flush:reserved");
    let flusher = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.flush_page(leaf).unwrap())
    };
    gate.wait_paused();
    let mut stamps = vec![(first, b"v0".to_vec())];
    for i in 1..40u32 {
        let v = format!("v{i}").into_bytes();
        stamps.push((tree.upsert_ts(&key(i % 3), &v).unwrap(), v));
    }
    assert!(tree.stats().counter(counter_names::TIME_SPLITS).unwrap() > 0);
    assert!(tree.stats().counter(counter_names::KEY_SPLITS).unwrap() > 0);
    gate.release();
    assert_eq!(flusher.join().unwrap(), TsbFlush::Lost);
    disarm();
    assert!(evict_all(&tree) > 0);
    for k in 0..3u32 {
        let want: Vec<_> = stamps
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u32 % 3 == k)
            .map(|(_, s)| s.clone())
            .collect();
        assert_eq!(history(&tree, &key(k)), want, "key {k}");
    }
    tree.check_structure().unwrap();
}

/// Pauses a writer at `point` (a split between its split delta and its index term), evicts
/// every page and checks every version written so far as of its time, then lets the split
/// finish and checks all versions again.
fn paused_split_survives_eviction(
    point: &'static str,
    writes: impl Fn(u32) -> u32 + Send + 'static,
) {
    let _turn = take_turn();
    let (tree, _sim) = tree_on_lss(12);
    let tree = Arc::new(tree);
    for i in (0..64).step_by(2) {
        tree.upsert(&key(i), b"base").unwrap();
    }
    let gate = arm(point);
    let writer = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            (0..64u32)
                .map(|i| {
                    let k = key(writes(i));
                    let v = format!("w{i}").into_bytes();
                    (k, tree.upsert_ts(&k, &v).unwrap(), v)
                })
                .collect::<Vec<_>>()
        })
    };
    gate.wait_paused();
    assert!(evict_all(&tree) > 0);
    // Every key written before the pause reads back (through side and history links, the
    // paused split's pages loaded from LSS-C).
    let mut out = Vec::new();
    for i in (0..64).step_by(2) {
        assert!(
            tree.get_as_of(&key(i), u64::MAX - 1, &mut out).unwrap(),
            "key {i}"
        );
        assert!(!history(&tree, &key(i)).is_empty(), "key {i}");
    }
    assert!(evict_all(&tree) > 0);
    gate.release();
    let written = writer.join().unwrap();
    disarm();
    assert!(evict_all(&tree) > 0);
    for (k, ts, v) in &written {
        assert!(tree.get_as_of(k, *ts, &mut out).unwrap(), "{k:?} at {ts}");
        assert_eq!(&out, v);
        assert!(history(&tree, k).contains(&(*ts, v.clone())));
    }
    tree.check_structure().unwrap();
    assert_eq!(tree.load_errors(), 0);
}

// Goal: a leaf time split paused between its split delta and its term survives eviction of
// every page (P consolidated and flushed with its new start and history link, the
// historical page flushed before any term names it) and completes. Method: hot key 10
// updated 64 times by a paused writer; see `paused_split_survives_eviction`.
#[test]
fn a_paused_time_split_survives_eviction() {
    paused_split_survives_eviction("time_split:leaf-split-installed", |_| 10);
}

// Goal: as above for a leaf key split (the new right page evicted before its term is posted,
// reached through P's side link). Method: a paused writer inserts the odd keys.
#[test]
fn a_paused_key_split_survives_eviction() {
    paused_split_survives_eviction("key_split:leaf-split-installed", |i| 2 * i + 1);
}
