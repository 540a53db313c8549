//! §IV-C help-along, reached on purpose: a thread is stopped between the steps of an SMO (a
//! split after its split delta; a merge after its remove node delta or after its index term
//! delete) and other threads must complete the SMO before their own work, with no key lost,
//! duplicated or resurrected.
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test pause_points`. The hook
//! is process-wide, so all scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::stats::names;
use forest_core::{Index, Order};

const LEAF: &str = "split:leaf-half-split-installed";
const INDEX: &str = "split:index-half-split-installed";

fn small_tree() -> BwTree {
    BwTree::with_config(BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        merge_threshold: 2,
        read_consolidate_threshold: 2,
    })
    .expect("valid config")
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn check_exactly(tree: &BwTree, keys: impl Iterator<Item = u32>) {
    let want: Vec<Vec<u8>> = keys.map(|i| key(i).to_vec()).collect();
    let mut got = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, _| {
            got.push(k.to_vec());
            ControlFlow::Continue(())
        },
    );
    assert_eq!(got, want, "scan must return each key exactly once");
    let mut out = Vec::new();
    for k in &want {
        assert!(tree.get(k, &mut out), "lost key {k:?}");
    }
    let stats = tree.stats();
    assert_eq!(stats.key_count, want.len() as u64);
    // Pages: one at the start, one more per split and per root growth, one fewer per merge
    // and per root collapse; root growths minus collapses are the height minus one.
    let pages = stats.leaf_node_count + stats.inner_node_count;
    assert_eq!(
        stats.counter(names::SPLITS).unwrap() + u64::from(stats.height),
        pages + stats.counter(names::MERGES).unwrap(),
        "{stats:?}"
    );
}

/// Scenario 1: the root leaf splits and its splitter stops before making the new root; another
/// thread writing into the right half must make the root itself.
fn paused_root_split_is_completed_by_a_writer() {
    let tree = Arc::new(small_tree());
    for i in 0..4 {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm(LEAF);
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.insert(&key(4), b"v").unwrap())
    };
    gate.wait_paused();
    assert_eq!(tree.stats().height, 1, "the split is only half done");
    // Key 9 lies right of the separator (key 2): this insert meets the split delta.
    assert!(tree.insert(&key(9), b"v").unwrap());
    let stats = tree.stats();
    assert_eq!(stats.height, 2, "the writer made the new root");
    assert_eq!(stats.counter(counter_names::SMO_HELPS), Some(1));
    gate.release();
    assert!(pauser.join().unwrap());
    disarm();
    let stats = tree.stats();
    assert_eq!(
        stats.height, 2,
        "the splitter found the root made and did not make another"
    );
    assert_eq!(stats.counter(counter_names::SMO_HELPS), Some(1));
    check_exactly(&tree, [0, 1, 2, 3, 4, 9].into_iter());
}

/// Scenarios 2 and 3: in a tree of several levels a leaf (or index) split stops before its
/// index term; readers and writers over the whole key range must post the term, and splits
/// around and above it keep working.
fn paused_split_is_completed_by_others(point: &'static str) {
    let tree = Arc::new(small_tree());
    for i in (0..400).step_by(2) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm(point);
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            // Odd keys fill pages until one splits, where the hook stops this thread.
            for i in (1..400).step_by(2) {
                tree.insert(&key(i), b"v").unwrap();
            }
        })
    };
    gate.wait_paused();
    let helps_before = tree.stats().counter(counter_names::SMO_HELPS).unwrap();
    // A reader of every even key passes the paused split's page and must complete it.
    let mut out = Vec::new();
    for i in (0..400).step_by(2) {
        assert!(tree.get(&key(i), &mut out));
    }
    let helps_after = tree.stats().counter(counter_names::SMO_HELPS).unwrap();
    assert!(
        helps_after > helps_before,
        "a reader completed the paused split"
    );
    // Writers on top of it, splitting more pages around the paused one.
    for i in 400..800 {
        tree.insert(&key(i), b"v").unwrap();
    }
    gate.release();
    pauser.join().unwrap();
    disarm();
    check_exactly(&tree, 0..800);
}

/// Scenarios 4 and 5: a merge stops after its remove node delta (or after its index term
/// delete); readers of the whole key range must complete it, and the splitter, released, must
/// find it done.
fn paused_merge_is_completed_by_others(point: &'static str) {
    let tree = Arc::new(small_tree());
    for i in (0..400).step_by(2) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm(point);
    let pauser_gate = Arc::clone(&gate);
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            // Removes keys in order until one removal merges pages and pauses there.
            for i in (0..400).step_by(2) {
                assert!(tree.remove(&key(i)));
                if pauser_gate.has_paused() {
                    return i;
                }
            }
            panic!("no merge happened");
        })
    };
    gate.wait_paused();
    let before = tree.stats();
    let mut out = Vec::new();
    for i in (0..400).step_by(2) {
        tree.get(&key(i), &mut out);
    }
    let after = tree.stats();
    // The reader completes the paused merge, and with it any parent merge that follows.
    assert!(
        after.counter(names::MERGES) > before.counter(names::MERGES),
        "a reader completed the paused merge"
    );
    assert!(after.counter(counter_names::SMO_HELPS) > before.counter(counter_names::SMO_HELPS));
    gate.release();
    let last_removed = pauser.join().unwrap();
    disarm();
    assert_eq!(
        tree.stats().counter(names::MERGES),
        after.counter(names::MERGES)
    );
    check_exactly(&tree, (last_removed + 2..400).step_by(2));
}

/// Scenarios 6 to 9: a scan stops in its visitor (which holds no pin) at key 200; a writer then
/// inserts (or removes) keys beyond it until a split (or merge) of a page there stops half
/// done; the scan, let go, crosses into the half-split page by its side link (or meets the
/// frozen page and descends), in either order, and returns the records as they stand then,
/// each once.
fn scan_crosses_a_paused_smo(point: &'static str, order: Order) {
    use std::sync::{mpsc, Mutex};
    const CURSOR: u32 = 200;
    const END: u32 = 400;
    let tree = Arc::new(small_tree());
    for i in (0..END).step_by(4) {
        tree.insert(&key(i), b"v").unwrap();
    }
    let (at_cursor, scan_stopped) = mpsc::channel();
    let (go_on, scan_released) = mpsc::channel::<()>();
    let scanner = {
        let tree = Arc::clone(&tree);
        std::thread::spawn(move || {
            let mut got = Vec::new();
            tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
                let i = u32::from_be_bytes(k.try_into().unwrap());
                got.push(i);
                if i == CURSOR {
                    at_cursor.send(()).unwrap();
                    scan_released.recv().unwrap();
                }
                ControlFlow::Continue(())
            });
            got
        })
    };
    scan_stopped.recv().unwrap();
    let split = point.starts_with("split");
    // The keys beyond the cursor in the scan's order: the missing ones to insert (three per
    // gap, so pages fill and split), or the present ones to remove.
    let beyond: Vec<u32> = match order {
        Order::Ascending => (CURSOR + 1..END).collect(),
        Order::Descending => (0..CURSOR).rev().collect(),
    };
    let beyond: Vec<u32> = beyond
        .into_iter()
        .filter(|k| (k % 4 == 0) != split)
        .collect();
    let changed = Arc::new(Mutex::new(Vec::new()));
    let gate = arm(point);
    let pauser = {
        let (tree, changed, gate) = (Arc::clone(&tree), Arc::clone(&changed), Arc::clone(&gate));
        spawn_pauser(move || {
            for k in beyond {
                changed.lock().unwrap().push(k);
                if split {
                    assert!(tree.insert(&key(k), b"v").unwrap());
                } else {
                    assert!(tree.remove(&key(k)));
                }
                if gate.has_paused() {
                    return;
                }
            }
            panic!("no {point} happened");
        })
    };
    gate.wait_paused();
    go_on.send(()).unwrap();
    let got = scanner.join().unwrap();
    gate.release();
    pauser.join().unwrap();
    disarm();
    let mut now: std::collections::BTreeSet<u32> = (0..END).step_by(4).collect();
    for k in changed.lock().unwrap().iter() {
        if split {
            now.insert(*k);
        } else {
            now.remove(k);
        }
    }
    let want: Vec<u32> = match order {
        Order::Ascending => (0..=CURSOR)
            .step_by(4)
            .chain(now.range(CURSOR + 1..).copied())
            .collect(),
        Order::Descending => (CURSOR..END)
            .step_by(4)
            .rev()
            .chain(now.range(..CURSOR).rev().copied())
            .collect(),
    };
    assert_eq!(got, want, "{order:?} scan across a paused {point}");
}

/// Runs `check` on another thread and fails if it has not finished within [`HANG_SECONDS`]
/// (a livelocked descent spins forever; the test must fail, not hang).
fn within_time_bound(what: &str, check: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    let checker = std::thread::spawn(move || {
        check();
        done.send(()).unwrap();
    });
    match finished.recv_timeout(std::time::Duration::from_secs(HANG_SECONDS)) {
        // Disconnected: the checker panicked; joining re-raises its panic.
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => checker.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            // Straight to stderr: the harness's capture would be lost with the process.
            let message = format!("{what}: no answer in {HANG_SECONDS} s: livelocked\n");
            std::io::Write::write_all(&mut std::io::stderr(), message.as_bytes()).unwrap();
            std::process::exit(1); // the spinning thread cannot be stopped
        }
    }
}

/// Seconds a check on a tiny tree may take before it counts as hung.
const HANG_SECONDS: u64 = 20;

/// Scenario 6 (regression, the livelock seen once in stress runs): the root leaf X splits
/// into X and Q and its splitter stops before making the new root. Other threads make the
/// root N over X and Q, drain Q until it merges back into X, and collapse N, so the root is
/// X again. The released splitter then finds "its" split's page still the root: growing a
/// root over X and the freed Q would send every descent for Q's keys to a freed PID, which
/// restarts from the root forever. The root word carries a version, and a root is only
/// grown over a split that still stands (Q alive, not frozen).
fn root_split_completed_after_the_root_came_back() {
    let tree = Arc::new(small_tree());
    for i in 0..4 {
        tree.insert(&key(i), b"v").unwrap();
    }
    let gate = arm(LEAF);
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.insert(&key(4), b"v").unwrap())
    };
    gate.wait_paused();
    // The split moved keys 2.. to Q. A writer there makes the root N over X and Q.
    assert!(tree.insert(&key(9), b"v").unwrap());
    assert_eq!(tree.stats().height, 2, "the writer made the new root");
    // Drain Q below the merge threshold: it merges into X and the one-child root collapses.
    for i in [9, 4, 3] {
        assert!(tree.remove(&key(i)));
    }
    let stats = tree.stats();
    assert_eq!(stats.height, 1, "the root collapsed back to X: {stats:?}");
    assert_eq!(stats.counter(names::MERGES), Some(1));
    gate.release();
    assert!(pauser.join().unwrap());
    disarm();
    within_time_bound("reads after a stale root split", move || {
        assert_eq!(
            tree.stats().height,
            1,
            "no root was grown over a freed page"
        );
        check_exactly(&tree, 0..3);
        for i in 3..40 {
            tree.insert(&key(i), b"v").unwrap();
        }
        check_exactly(&tree, 0..40);
    });
}

// Goal: every help-along path of §IV-C is reached and leaves no key lost or duplicated.
// Method: the two scenarios above, one after the other (the pause hook is process-wide).
#[test]
fn incomplete_splits_are_completed_by_other_threads() {
    let _turn = take_turn();
    paused_root_split_is_completed_by_a_writer();
    paused_split_is_completed_by_others(LEAF);
    paused_split_is_completed_by_others(INDEX);
    paused_merge_is_completed_by_others("merge:remove-node-installed");
    paused_merge_is_completed_by_others("merge:index-term-delete-installed");
    root_split_completed_after_the_root_came_back();
    for order in [Order::Ascending, Order::Descending] {
        scan_crosses_a_paused_smo(LEAF, order);
        scan_crosses_a_paused_smo("merge:remove-node-installed", order);
    }
}
