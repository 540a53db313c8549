//! Algorithm 1's two steps, completed by others (Bw-tree §IV-C help-along): a thread stops
//! after its split delta and before the parent's term; searches must still find everything
//! (through side and history links) and a writer must post the term.
//!
//! Run with `cargo test -p forest-tsbtree --features pause-points --test pause_points`. The
//! hook is process-wide, so the scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::ControlFlow;
use std::sync::Arc;

use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::{Index, Order, TemporalIndex};
use forest_tsbtree::{counter_names, TsbConfig, TsbTree};

fn small_tree() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 4,
        max_index_entries: 4,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .unwrap()
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn history(tree: &TsbTree, k: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    tree.history(k, 0, u64::MAX, Order::Ascending, &mut |ts, _| {
        out.push(ts);
        ControlFlow::Continue(())
    });
    out
}

fn helps(tree: &TsbTree) -> u64 {
    tree.stats().counter(counter_names::SMO_HELPS).unwrap()
}

/// A time split stops before its term: as-of reads of the old versions go through the
/// history link; the next writer of the page posts the term.
fn paused_time_split_is_completed_by_a_writer() {
    let tree = Arc::new(small_tree());
    for i in (0..200).step_by(2) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let hot = key(100);
    let gate = arm("time_split:leaf-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            let mut stamps = Vec::new();
            for i in 0..64u8 {
                stamps.push(tree.upsert_ts(&hot, &[i]).unwrap());
            }
            stamps
        })
    };
    gate.wait_paused();
    // Every version written so far is readable as of its time, though no term names the
    // historical page yet.
    let h = history(&tree, &hot);
    assert!(h.len() >= 2, "{h:?}");
    let mut out = Vec::new();
    for (i, &ts) in h.iter().enumerate().skip(1) {
        assert!(tree.get_as_of(&hot, ts, &mut out), "version {i} at {ts}");
    }
    let before = helps(&tree);
    tree.upsert(&key(101), b"w").unwrap();
    assert!(
        helps(&tree) > before,
        "the writer posted the paused time split's term"
    );
    gate.release();
    let stamps = pauser.join().unwrap();
    disarm();
    let all = history(&tree, &hot);
    assert_eq!(&all[1..], &stamps[..], "every version once, in order");
    for (i, &ts) in stamps.iter().enumerate() {
        assert!(tree.get_as_of(&hot, ts, &mut out));
        assert_eq!(out, [i as u8]);
    }
}

/// A key split stops before its term: readers and writers over the whole key range keep
/// working and a writer completes it.
fn paused_key_split_is_completed_by_others() {
    let tree = Arc::new(small_tree());
    for i in (0..400).step_by(2) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm("key_split:leaf-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            for i in (1..400).step_by(2) {
                tree.insert(&key(i), b"v").unwrap();
            }
        })
    };
    gate.wait_paused();
    let mut out = Vec::new();
    for i in (0..400).step_by(2) {
        assert!(tree.get(&key(i), &mut out), "key {i}");
    }
    let before = helps(&tree);
    for i in 400..800 {
        tree.insert(&key(i), b"v").unwrap();
    }
    assert!(helps(&tree) > before, "writers completed the paused split");
    gate.release();
    pauser.join().unwrap();
    disarm();
    let mut count = 0;
    tree.scan(
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        Order::Ascending,
        &mut |k, _| {
            assert_eq!(k, key(count));
            count += 1;
            ControlFlow::Continue(())
        },
    );
    assert_eq!(count, 800);
    assert_eq!(tree.stats().key_count, 800);
}

// Goal: both splits' second step is completed by others, and nothing is lost meanwhile.
// Method: the two scenarios above, each with a thread stopped at the pause point.
#[test]
fn paused_splits_are_completed_by_others() {
    let _turn = take_turn();
    paused_time_split_is_completed_by_a_writer();
    paused_key_split_is_completed_by_others();
}
