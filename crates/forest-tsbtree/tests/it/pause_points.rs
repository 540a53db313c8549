//! Algorithm 1's two steps, completed by others (Bw-tree §IV-C help-along): a thread stops
//! after its split delta and before the parent's term; searches must still find everything
//! (through side and history links) and a writer must post the term.
//!
//! Run with `cargo test -p forest-tsbtree --features pause-points --test pause_points`. The
//! hook is process-wide, so the scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    })
    .expect("retained");
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
        assert!(
            tree.get_as_of(&hot, ts, &mut out).expect("retained"),
            "version {i} at {ts}"
        );
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
        assert!(tree.get_as_of(&hot, ts, &mut out).expect("retained"));
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

/// Tiny leaves; index pages of 8 terms that time-split as soon as one term can move.
fn tiny_tree() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 3,
        max_index_entries: 8,
        consolidate_threshold: 1,
        time_split_percent: 10,
    })
    .unwrap()
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats().counter(name).unwrap()
}

/// Every version of `k` in `versions` (timestamp, value) is read back as of its time.
fn check_versions(tree: &TsbTree, k: &[u8], versions: &[(u64, Vec<u8>)]) {
    let mut out = Vec::new();
    for (ts, v) in versions {
        assert!(
            tree.get_as_of(k, *ts, &mut out).expect("retained"),
            "{k:?} at {ts}"
        );
        assert_eq!(&out, v, "{k:?} at {ts}");
    }
}

fn versions(tree: &TsbTree, k: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    tree.history(k, 0, u64::MAX, Order::Ascending, &mut |ts, v| {
        out.push((ts, v.unwrap().to_vec()));
        ControlFlow::Continue(())
    })
    .expect("retained");
    out
}

/// Runs as-of readers of `keys`' versions as of now until `stop`; returns the reads done.
fn spawn_readers(
    tree: &Arc<TsbTree>,
    keys: Vec<[u8; 4]>,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    let tree = Arc::clone(tree);
    let stop = Arc::clone(stop);
    let expected: Vec<_> = keys.iter().map(|k| (*k, versions(&tree, k))).collect();
    let reads = AtomicUsize::new(0);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) || reads.load(Ordering::Relaxed) == 0 {
            for (k, vs) in &expected {
                check_versions(&tree, k, vs);
                reads.fetch_add(vs.len(), Ordering::Relaxed);
            }
        }
        reads.into_inner()
    })
}

/// A leaf time split stops between its steps (its entry on level 0's list of active splits,
/// its term not posted); meanwhile the other leaves under the same index page time-split until
/// that page time-splits too, and as-of readers read the stopped leaf's versions. The index
/// page splits no later than the stopped split's time: before its term is posted, the
/// stopped leaf's old term and the list's active entry hold the page's split time back;
/// once the page, over its limit, has posted that term itself (help-along), the term is on
/// the page. Either way the stopped split's term is on the current index page, never on
/// the historical one, and the stopped thread, released, finds it posted.
fn index_time_split_while_a_leaf_time_split_is_paused() {
    let tree = Arc::new(tiny_tree());
    for i in (0..2000).step_by(10) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let hot = key(1000);
    let near: Vec<[u8; 4]> = (800..1200)
        .step_by(10)
        .filter(|&i| i != 1000)
        .map(key)
        .collect();
    // Warm up: every page near the hot key has history, the hot leaf split last. The hot
    // key gets no more writes than its neighbours: a hotter leaf fills its index page with
    // its own terms until a key split leaves it alone there, with no neighbour to split.
    for round in 0..8u8 {
        for k in &near {
            tree.upsert(k, &[round]).unwrap();
        }
        tree.upsert(&hot, &[round, 0]).unwrap();
    }
    let gate = arm("time_split:leaf-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            for i in 0..8u8 {
                tree.upsert(&hot, &[100, i]).unwrap();
            }
        })
    };
    gate.wait_paused();
    let hot_before = versions(&tree, &hot);
    let last_before = hot_before.last().unwrap().0;
    let parent_of = |k: &[u8]| {
        let starts = tree.path_starts(k);
        starts[starts.len() - 2]
    };
    let leaf_of = |k: &[u8]| *tree.path_starts(k).last().unwrap();
    let parent_start = parent_of(&hot);
    // The other leaves' keys under the hot key's index page (the hot leaf's own writers
    // would complete the split): all of them, since one leaf that never time-splits keeps
    // its old term current and holds the page's split time back (`index_split_time`).
    let neighbours: Vec<[u8; 4]> = (0..2000)
        .step_by(10)
        .map(key)
        .filter(|k| parent_of(k) == parent_start && leaf_of(k) != leaf_of(&hot))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let readers = spawn_readers(&tree, vec![hot], &stop);
    for round in 0..32u8 {
        for k in &neighbours {
            tree.upsert(k, &[200, round]).unwrap();
        }
    }
    let parent_now = parent_of(&hot);
    assert!(
        parent_now > parent_start,
        "the hot key's index page time-split during the pause ({parent_start} -> {parent_now})"
    );
    let paused_at = leaf_of(&hot);
    // A split's time is the clock's newest timestamp, here the hot key's last version (the
    // write that filled the leaf), which the current page keeps (alive at the split time).
    assert!(
        paused_at >= last_before,
        "the hot leaf starts at the paused split's time"
    );
    assert!(
        parent_now <= paused_at,
        "the index page split at {parent_now}, after the paused split's time {paused_at}"
    );
    check_versions(&tree, &hot, &hot_before);
    stop.store(true, Ordering::Release);
    assert!(readers.join().unwrap() > 0);
    gate.release();
    pauser.join().unwrap();
    disarm();
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    tree.check_structure().unwrap();
    let all = versions(&tree, &hot);
    assert_eq!(&all[..hot_before.len()], &hot_before[..]);
    assert_eq!(all.len(), 1 + 8 + 8, "every version once");
    check_versions(&tree, &hot, &all);
    for k in &neighbours {
        check_versions(&tree, k, &versions(&tree, k));
    }
}

/// An index time split stops between its steps (its historical index page installed, the
/// parent's term not moved): as-of readers reach the old terms through the index page's
/// history link; leaf splits under it post their terms on the current index page; a writer
/// posts the stopped split's term; after the release nothing is lost or duplicated.
fn leaf_splits_while_an_index_time_split_is_paused() {
    let tree = Arc::new(tiny_tree());
    for i in (0..2000).step_by(10) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let hot = key(1000);
    let gate = arm("time_split:index-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            let mut i = 0u32;
            // Until an index page of the hot key time-splits (the pauser stops there).
            while counter(&tree, counter_names::INDEX_TIME_SPLITS) == 0 {
                tree.upsert(&hot, &i.to_be_bytes()).unwrap();
                i += 1;
            }
        })
    };
    gate.wait_paused();
    let hot_before = versions(&tree, &hot);
    // Readers first, before any writer helps: they route through the history link.
    check_versions(&tree, &hot, &hot_before);
    let stop = Arc::new(AtomicBool::new(false));
    let readers = spawn_readers(&tree, vec![hot, key(990), key(1010)], &stop);
    let before = helps(&tree);
    for i in 0..200u32 {
        tree.upsert(&hot, &(1 << 20 | i).to_be_bytes()).unwrap();
        tree.upsert(&key(1010), &i.to_be_bytes()).unwrap();
    }
    assert!(
        helps(&tree) > before,
        "a writer posted the paused split's term"
    );
    stop.store(true, Ordering::Release);
    assert!(readers.join().unwrap() > 0);
    gate.release();
    pauser.join().unwrap();
    disarm();
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    let shape = tree.check_structure().unwrap();
    assert!(shape.max_current_index_terms <= tree.config().max_index_entries + 1);
    let all = versions(&tree, &hot);
    assert_eq!(&all[..hot_before.len()], &hot_before[..]);
    assert_eq!(all.len(), hot_before.len() + 200, "every version once");
    check_versions(&tree, &hot, &all);
    check_versions(&tree, &key(1010), &versions(&tree, &key(1010)));
}

// Goal: index time splits race leaf splits and as-of readers at Algorithm 1's pause points
// without a term ever going to a historical index page or a version being lost. Method: the
// two scenarios above, each with a thread stopped between a split's two steps.
#[test]
fn index_time_splits_race_leaf_splits_and_readers() {
    let _turn = take_turn();
    leaf_splits_while_an_index_time_split_is_paused();
}

// The first scenario alone. Its setup was redone (session 12) for split times that are the
// clock's newest timestamp (session 11): the hot key is written no more than its neighbours,
// and every other leaf under its index page is written during the pause.
#[test]
fn index_time_split_races_a_paused_leaf_time_split() {
    let _turn = take_turn();
    index_time_split_while_a_leaf_time_split_is_paused();
}

/// A leaf key split stops before its term: its right page Q starts at the left page P's start,
/// so the term it will post is as old as that start. Meanwhile P's keys are updated until P
/// time-splits (its current term moves on), and every other leaf too, so that no current term
/// of the index page above holds the page's split time at or below Q's start any more.
fn index_time_split_while_a_leaf_key_split_is_paused() {
    let tree = Arc::new(small_tree());
    // Leaves [10, 20] [30, 40] [50, 60, 70, 80]; inserting 90 splits the last at 70 into
    // P = [50, 60] and Q = [70, 80, 90], both starting at P's start. (The pauser goes on to 99
    // so that it stops at the last leaf's first key split whatever the layout.)
    for i in (10..=80).step_by(10) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm("key_split:leaf-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            (90..100)
                .map(|i| (i, tree.upsert_ts(&key(i), b"v").unwrap()))
                .collect::<Vec<_>>()
        })
    };
    gate.wait_paused();
    let index_splits = counter(&tree, counter_names::INDEX_TIME_SPLITS);
    let mut model: Vec<(u32, u64, Vec<u8>)> = Vec::new();
    // Keys left of Q only: a writer of Q's keys would follow P's side link and post Q's term.
    for round in 0..120u32 {
        for i in (10..=60).step_by(10) {
            let value = round.to_le_bytes().to_vec();
            let ts = tree.upsert_ts(&key(i), &value).unwrap();
            model.push((i, ts, value));
        }
    }
    assert!(
        counter(&tree, counter_names::INDEX_TIME_SPLITS) > index_splits,
        "index pages time-split during the pause"
    );
    gate.release();
    let stamps = pauser
        .join()
        .expect("the paused key split posted its term without a late term");
    disarm();
    assert_eq!(counter(&tree, counter_names::LATE_TERMS), 0);
    tree.check_structure().unwrap();
    let mut out = Vec::new();
    for (i, ts, value) in &model {
        assert!(tree.get_as_of(&key(*i), *ts, &mut out).expect("retained"));
        assert_eq!(&out, value, "key {i} at {ts}");
    }
    for (i, ts) in stamps {
        for j in [70, 80, i] {
            assert!(tree.get_as_of(&key(j), ts, &mut out).expect("retained"));
        }
        assert!(tree.get(&key(i), &mut out), "key {i} now");
    }
}

// Goal: a key split's term, which starts at its left page's start, never has to go to a
// historical index page, however long the split stalls between its steps (§IV-B2's bound
// must cover key splits too). Method: the scenario above; the paused split's post, the
// `late_terms` counter (0) and as-of reads of every version written during the pause.
#[test]
fn index_time_split_races_a_paused_leaf_key_split() {
    let _turn = take_turn();
    index_time_split_while_a_leaf_key_split_is_paused();
}

/// rev-tsb5 F1: a leaf key split paused between its split delta and its term, with writers on
/// the keys left of Q only (none follows P's side link, so none helps it along): its
/// split-list entry holds the bound of the index page above at P's old start for the whole
/// pause, so that page can no longer time-split, and every time split of P adds a term to it.
fn index_page_grows_while_a_leaf_key_split_is_paused(rounds: u32) -> usize {
    let tree = Arc::new(small_tree());
    for i in (10..=80).step_by(10) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm("key_split:leaf-split-installed");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            for i in 90..100 {
                tree.upsert_ts(&key(i), b"v").unwrap();
            }
        })
    };
    gate.wait_paused();
    for round in 0..rounds {
        for i in (10..=60).step_by(10) {
            tree.upsert_ts(&key(i), &round.to_le_bytes()).unwrap();
        }
    }
    // No thread writes: the pauser is stopped at its pause point.
    let shape = tree.check_structure().unwrap();
    gate.release();
    pauser.join().unwrap();
    disarm();
    shape.max_current_index_terms
}

// Goal: a paused key split does not let an index page grow without bound (the split-list's
// help-along, ARCHITECTURE "one descheduled thread made index pages ... reach 40 terms
// instead of 5", holds for key splits too). Method: the scenario above with 120 and 480
// rounds of writes during the pause; the fullest current index page (max 4 terms) must stay
// within a small multiple of its limit and not grow with the rounds.
#[test]
fn rev_tsb5_f1_a_paused_key_split_does_not_grow_its_index_page() {
    let _turn = take_turn();
    let short = index_page_grows_while_a_leaf_key_split_is_paused(120);
    let long = index_page_grows_while_a_leaf_key_split_is_paused(480);
    eprintln!("fullest current index page: {short} terms after 120 rounds, {long} after 480");
    assert!(
        long <= 16,
        "fullest current index page (limit 4): {short} terms after 120 rounds, {long} after 480"
    );
}
