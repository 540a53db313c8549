//! §4.3 and §5.4 reached on purpose: a thread is stopped between reserve and completion of an
//! insert, or between an SMO's preparation and its install, while other threads write into the
//! same leaf. They must retry or help (run their own consolidation or split of the frozen
//! leaf), and no key may be lost or duplicated; the stopped thread's install then fails and it
//! retries.
//!
//! Run with `cargo nextest run -p forest-bztree --features pause-points --test it -- pause_points::`.
//! The hook is process-wide, so all scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)]

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::conformance::pause::{
    arm, arm_gates, disarm, spawn_named, spawn_pauser, take_turn, PAUSER,
};
use forest_core::stats::names;
use forest_core::{Index, Order};
use forest_pmwcas::Clwb;

fn key(i: u32) -> [u8; 8] {
    u64::from(i).to_be_bytes()
}

fn small() -> Arc<BzTree> {
    Arc::new(BzTree::with_config(BzTreeConfig::with_node_size(256)).unwrap())
}

fn check_exactly(tree: &BzTree, keys: &[u32]) {
    let mut want: Vec<Vec<u8>> = keys.iter().map(|&i| key(i).to_vec()).collect();
    want.sort();
    want.dedup();
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
    assert_eq!(tree.stats().key_count, want.len() as u64);
}

fn counter(tree: &BzTree, name: &str) -> u64 {
    tree.stats().counter(name).unwrap_or(0)
}

/// Scenario 1: an insert stops between its 2-word reservation and its completion; another
/// insert of the same key waits on the in-progress entry (bounded), freezes the leaf, and
/// succeeds on the consolidated leaf; the stopped insert then finds the leaf frozen, retries
/// and reports the duplicate.
fn paused_reservation_is_abandoned_on_freeze() {
    let tree = small();
    for i in 0..3 {
        tree.insert(&key(i * 10), b"v").unwrap();
    }
    let gate = arm("insert:reserved");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.insert(&key(15), b"first").unwrap())
    };
    gate.wait_paused();
    let mut out = Vec::new();
    assert!(
        !tree.get(&key(15), &mut out),
        "an in-progress insert is invisible"
    );
    assert!(
        tree.insert(&key(15), b"second").unwrap(),
        "the waiter wins after freezing"
    );
    assert!(counter(&tree, "recheck_waits") >= 1);
    assert!(counter(&tree, "recheck_timeouts") >= 1);
    gate.release();
    assert!(
        !pauser.join().unwrap(),
        "the stopped insert finds the key on retry"
    );
    assert!(tree.get(&key(15), &mut out) && out == b"second");
    check_exactly(&tree, &[0, 10, 15, 20]);
    disarm();
}

/// Scenario 2: a leaf split stops after its preparation (N frozen; N′, O, P′ built); writers
/// into that leaf meet the frozen node, re-traverse, then run their own split and install it;
/// the stopped split's install fails and its insert retries.
fn paused_split_is_raced_by_helpers() {
    let tree = small();
    // A root with a few leaves, so the split below installs under a parent (3 words).
    let mut keys: Vec<u32> = (0..60).map(|i| i * 100).collect();
    for &k in &keys {
        tree.insert(&key(k), b"v").unwrap();
    }
    assert!(tree.stats().height >= 2);
    let gate = arm("split:prepared");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            // Fill one leaf until it splits (and the pauser stops there).
            for i in 1..99 {
                tree.insert(&key(3000 + i), b"p").unwrap();
            }
        })
    };
    gate.wait_paused();
    let failures_before = counter(&tree, "smo_failures");
    // Writers into the frozen leaf's range help: their own split wins.
    for i in 1..40 {
        assert!(tree.insert(&key(2900 + i), b"h").unwrap());
        keys.push(2900 + i);
    }
    assert!(counter(&tree, "frozen_retries") >= 1);
    gate.release();
    pauser.join().unwrap();
    keys.extend((1..99).map(|i| 3000 + i));
    assert!(
        counter(&tree, "smo_failures") > failures_before,
        "the stopped install failed"
    );
    check_exactly(&tree, &keys);
    disarm();
}

/// Scenario 3: a consolidation stops before installing N′ (N frozen); readers read the frozen
/// leaf, writers help with their own consolidation; no update is lost.
fn paused_consolidation_is_raced_by_helpers() {
    let tree = small();
    for i in 0..4 {
        tree.insert(&key(i), b"0").unwrap();
    }
    let gate = arm("consolidate:prepared");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            // Superseded versions pile up until the leaf consolidates.
            for round in 0..40u8 {
                tree.upsert(&key(0), &[round]).unwrap();
            }
        })
    };
    gate.wait_paused();
    let mut out = Vec::new();
    assert!(tree.get(&key(1), &mut out), "reads ignore the frozen bit");
    assert!(tree.update(&key(1), b"helped").unwrap());
    assert!(tree.get(&key(1), &mut out) && out == b"helped");
    gate.release();
    pauser.join().unwrap();
    assert!(tree.get(&key(0), &mut out) && out == [39]);
    assert!(counter(&tree, names::CONSOLIDATIONS) >= 1);
    check_exactly(&tree, &[0, 1, 2, 3]);
    disarm();
}

/// Scenario 4: a merge stops after freezing both leaves (2 words) and building L′ and P′;
/// a writer into one of them consolidates it in place, so the merge's install fails; nothing
/// is lost and later deletes still shrink the tree.
fn paused_merge_is_raced_by_helpers() {
    let tree = small();
    let keys: Vec<u32> = (0..80).collect();
    for &k in &keys {
        tree.insert(&key(k), b"v").unwrap();
    }
    let gate = arm("merge:prepared");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            for k in (40..80).rev() {
                assert!(tree.remove(&key(k)));
            }
        })
    };
    gate.wait_paused();
    // Write around the merging leaves until a helper's install lands.
    let mut live: Vec<u32> = (0..40).collect();
    for k in 0..40 {
        assert!(tree.update(&key(k), b"w").unwrap());
    }
    for k in 100..110 {
        assert!(tree.insert(&key(k), b"n").unwrap());
        live.push(k);
    }
    gate.release();
    pauser.join().unwrap();
    check_exactly(&tree, &live);
    let mut out = Vec::new();
    for k in 0..40 {
        assert!(tree.get(&key(k), &mut out) && out == b"w");
    }
    disarm();
}

/// Scenario 5: an update of a large value (record pointer) stops after reserving its new
/// version; the key is deleted meanwhile; the update then finds no version to replace,
/// abandons its record and reports false, and its value block goes back to the heap (it was
/// leaked before: the abandoned record's block was taken for the tree's).
fn abandoned_update_frees_its_value_block() {
    let tree = Arc::new(
        BzTree::with_config(BzTreeConfig {
            inline_value_max: 16,
            ..BzTreeConfig::with_node_size(256)
        })
        .unwrap(),
    );
    let big = vec![5u8; 1 << 20];
    // An inline version, so the update appends a record-pointer version (no in-place swap).
    tree.insert(b"k", b"small").unwrap();
    let gate = arm("insert:reserved");
    let pauser = {
        let tree = Arc::clone(&tree);
        let big = big.clone();
        spawn_pauser(move || tree.update(b"k", &big).unwrap())
    };
    gate.wait_paused();
    let with_block = tree.stats().memory_bytes;
    assert!(tree.remove(b"k"));
    gate.release();
    assert!(
        !pauser.join().unwrap(),
        "the key was deleted before the update completed"
    );
    let mut out = Vec::new();
    assert!(!tree.get(b"k", &mut out));
    // The abandoned update's 2 MiB chunk comes back at once (no other thread saw it).
    let memory = tree.stats().memory_bytes;
    assert!(
        memory + (2 << 20) <= with_block,
        "value block leaked: {memory} bytes in use, {with_block} with the block"
    );
    disarm();
}

/// Scenario 6 (CI failure of `stress_disjoint_keys`, "one visible version per key"): a
/// delete sizes its unfrozen leaf for a merge (§5.1) and reads the leaf's entries while an
/// update of a key it already counted appends the key's new version and hides the old one in
/// one 3-word PMwCAS. The read sees both versions visible; that is an estimate of an unfrozen
/// leaf, not a broken leaf, and must not trip the frozen leaf's invariant.
fn merge_sizing_meets_a_version_swap() {
    let config = BzTreeConfig {
        // Every leaf is underfull, so each delete sizes its leaf for a merge; no delete
        // consolidates on its own.
        min_size: 1536,
        delete_size_max: 4096,
        ..BzTreeConfig::with_node_size(4096)
    };
    let tree = Arc::new(BzTree::with_config(config).unwrap());
    for i in 0..400 {
        tree.insert(&key(i), b"old-val!").unwrap();
    }
    assert!(counter(&tree, names::SPLITS) > 0, "several leaves");
    // The update of key 1 (the first visible entry of key 0's leaf) reserves its new
    // version's entry and stops; the delete of key 0 reads the leaf's status (counting that
    // entry) and stops at the old version; the update completes (old version hidden, new
    // visible); the delete reads on and meets the new version.
    let [reserved, read] = arm_gates([
        ("insert:reserved", "updater"),
        ("consolidate:live-read", PAUSER),
    ]);
    let updater = {
        let tree = Arc::clone(&tree);
        spawn_named("updater", move || {
            tree.upsert(&key(1), b"new-val!").unwrap()
        })
    };
    reserved.wait_paused();
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.remove(&key(0)))
    };
    read.wait_paused();
    reserved.release();
    updater.join().expect("the update completes");
    read.release();
    disarm();
    assert!(pauser.join().expect("the sizing read tolerates the swap"));
    let mut out = Vec::new();
    assert!(tree.get(&key(1), &mut out));
    assert_eq!(out, b"new-val!");
    let keys: Vec<u32> = (1..400).collect();
    check_exactly(&tree, &keys);
}

/// A file tree with record pointers for values over 32 bytes (`bztree-pm`, so that a reopen
/// and `audit` can check that every chunk is reachable or free).
fn pointer_tree(path: &std::path::Path) -> Arc<BzTree<Clwb>> {
    let config = BzTreeConfig {
        heap_bytes: 16 << 20,
        descriptor_count: 256,
        inline_value_max: 32,
        ..BzTreeConfig::with_node_size(256)
    };
    Arc::new(BzTree::open(path, config, Clwb::detect()).unwrap())
}

/// Reopens the file `tree` lives in and audits it: the leaked block of a retirement that
/// freed an old block twice shows as a chunk neither reachable nor free.
fn reopen_and_audit(tree: Arc<BzTree<Clwb>>, path: &std::path::Path, key: &[u8], want: &[u8]) {
    let config = tree.config().clone();
    drop(Arc::into_inner(tree).expect("no other owner"));
    let tree = BzTree::open(path, config, Clwb::detect()).unwrap();
    let audit = tree.audit();
    assert!(audit.is_ok(), "after reopen: {audit:?}");
    let mut out = Vec::new();
    assert_eq!(tree.get(key, &mut out), !want.is_empty());
    assert_eq!(out.as_slice(), want);
}

/// Scenario 7 (issue 16, h-bz3's finding): a delete of a record-pointer record reads the
/// record's pointer word (block A) and stops before its PMwCAS; an update swaps the pointer in
/// place (A -> B: the pointer word changes, the metadata and status words do not). The delete
/// must not then succeed retiring A: A would be freed twice (by the swap and by the delete)
/// and B leaked. Its PMwCAS must fail on the pointer word and the retry retire B.
fn delete_meets_a_pointer_swap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pool");
    let tree = pointer_tree(&path);
    let (a, b) = (vec![0xa5u8; 4000], vec![0x5bu8; 4000]);
    assert!(tree.insert(b"k", &a).unwrap());
    let gate = arm("delete:pointer-read");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.remove(b"k"))
    };
    gate.wait_paused();
    assert!(
        tree.update(b"k", &b).unwrap(),
        "the swap (3 words) succeeds"
    );
    gate.release();
    assert!(pauser.join().unwrap(), "the delete succeeds");
    disarm();
    let mut out = Vec::new();
    assert!(!tree.get(b"k", &mut out));
    reopen_and_audit(tree, &path, b"k", b"");
}

/// Scenario 8: the same race with the 3-word completion that hides an old record-pointer
/// version (an update to an inline value appends a new version): the completion read the old
/// version's pointer (A), a swap replaced it (B), and the completion must fail and retry
/// retiring B, not A.
fn completion_meets_a_pointer_swap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pool");
    let tree = pointer_tree(&path);
    let (a, b) = (vec![0xa5u8; 4000], vec![0x5bu8; 4000]);
    assert!(tree.insert(b"k", &a).unwrap());
    let gate = arm("complete:pointer-read");
    let pauser = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || tree.update(b"k", b"small").unwrap())
    };
    gate.wait_paused();
    assert!(
        tree.update(b"k", &b).unwrap(),
        "the swap (3 words) succeeds"
    );
    gate.release();
    assert!(pauser.join().unwrap(), "the inline update succeeds");
    disarm();
    let mut out = Vec::new();
    assert!(tree.get(b"k", &mut out));
    assert_eq!(out, b"small");
    reopen_and_audit(tree, &path, b"k", b"small");
}

#[test]
fn smo_and_reservation_pause_points() {
    let _turn = take_turn();
    paused_reservation_is_abandoned_on_freeze();
    paused_split_is_raced_by_helpers();
    paused_consolidation_is_raced_by_helpers();
    paused_merge_is_raced_by_helpers();
    abandoned_update_frees_its_value_block();
    merge_sizing_meets_a_version_swap();
    delete_meets_a_pointer_swap();
    completion_meets_a_pointer_swap();
}
