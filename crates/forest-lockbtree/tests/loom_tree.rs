//! Model checks of the tree's node bodies under loom: with `--cfg loom` the bodies and the
//! root fields are loom cells (`forest_core::sync::cell`), so every guard's body access is
//! checked against the order the latches give; a descent that read a node without its latch,
//! or a split that wrote one without the exclusive latch, fails the model.
//!
//! Method: a tree of order 4 (3 keys a node) whose root leaf is full; one thread inserts the
//! key that splits the leaf and grows a new root, another reads or inserts concurrently.
//! Afterwards every key is checked and the invariants walked. (Weakening the latch's
//! `write_unlock` to `Relaxed` makes both tests fail with "Causality violation".)
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p forest-lockbtree
//! --test loom_tree --release`
#![cfg(loom)]

use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order};
use forest_lockbtree::{LockBTree, LockBTreeConfig, ORDER_MIN};
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // As the latch tests (and .ci/run's LOOM_MAX_PREEMPTIONS): 3 explores both tests in
    // well under a second.
    builder.preemption_bound.get_or_insert(3);
    builder.check(f);
}

/// A tree of order 4 holding `a`, `b`, `c`: its root leaf is full, the next insert splits it.
fn full_leaf() -> Arc<LockBTree> {
    let tree = LockBTree::with_config(LockBTreeConfig {
        order: ORDER_MIN,
        ..LockBTreeConfig::default()
    })
    .unwrap();
    for key in [b"a", b"b", b"c"] {
        assert!(tree.insert(key, key).unwrap());
    }
    Arc::new(tree)
}

fn get(tree: &LockBTree, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    tree.get(key, &mut out).then_some(out)
}

#[test]
fn get_during_root_split() {
    // Goal: a reader never sees a body the splitting writer is changing; method: one thread
    // inserts `d` (leaf split, new root), the other reads `b` and `d`; `b` is always there,
    // `d` before or after.
    model(|| {
        let tree = full_leaf();
        let other = tree.clone();
        let t = thread::spawn(move || assert!(other.insert(b"d", b"d").unwrap()));
        assert_eq!(get(&tree, b"b").as_deref(), Some(&b"b"[..]));
        let d = get(&tree, b"d");
        assert!(d.is_none() || d.as_deref() == Some(&b"d"[..]));
        t.join().unwrap();
        assert_eq!(get(&tree, b"d").as_deref(), Some(&b"d"[..]));
        tree.check_invariants().unwrap();
    });
}

#[test]
fn two_inserts_across_a_split() {
    // Goal: concurrent writers that split and write the same leaf lose nothing; method: two
    // threads insert `d` and `0` into the full leaf; both keys and the old ones remain.
    model(|| {
        let tree = full_leaf();
        let other = tree.clone();
        let t = thread::spawn(move || assert!(other.insert(b"d", b"d").unwrap()));
        assert!(tree.insert(b"0", b"0").unwrap());
        t.join().unwrap();
        for key in [&b"0"[..], b"a", b"b", b"c", b"d"] {
            assert_eq!(get(&tree, key).as_deref(), Some(key), "key {key:?}");
        }
        tree.check_invariants().unwrap();
    });
}

#[test]
fn scan_revisit_races_a_merge_that_frees_its_leaf() {
    // Goal: a scan coming back to its leaf between steps (node.rs invariant 6) never latches
    // a freed leaf and never sees a changed range as unchanged; method: two leaves [a b]
    // [c d]; one thread scans from `c` (under loom a step copies one record at first, so the
    // second step revisits the right leaf), the other removes `d`, which underflows the right
    // leaf, merges it into the left, frees it and collapses the root. The scan returns `c`,
    // then `d` or nothing.
    model(|| {
        let tree = full_leaf();
        assert!(tree.insert(b"d", b"d").unwrap());
        let other = tree.clone();
        let t = thread::spawn(move || assert!(other.remove(b"d")));
        let mut seen = Vec::new();
        tree.scan(
            Bound::Included(b"c"),
            Bound::Unbounded,
            Order::Ascending,
            &mut |k, v| {
                assert_eq!(k, v);
                seen.push(k.to_vec());
                ControlFlow::Continue(())
            },
        );
        assert!(
            seen == [b"c".to_vec()] || seen == [b"c".to_vec(), b"d".to_vec()],
            "{seen:?}"
        );
        t.join().unwrap();
        assert_eq!(get(&tree, b"d"), None);
        tree.check_invariants().unwrap();
    });
}
