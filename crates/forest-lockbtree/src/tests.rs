//! Unit tests that need the crate's test hook (`insert_multipass::BETWEEN_PASSES`).

use forest_core::stats::names;
use forest_core::Index;

use crate::insert_multipass::{BETWEEN_PASSES, PASS_COUNT_MAX_OVERRIDE};
use crate::{LockBTree, LockBTreeConfig, NodeSearch};

fn order4() -> LockBTree {
    LockBTree::with_config(LockBTreeConfig {
        order: 4,
        search: NodeSearch::Linear,
    })
    .expect("order 4 is valid")
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn counter(tree: &LockBTree, name: &str) -> u64 {
    tree.stats()
        .counter(name)
        .expect("lockbtree keeps the counter")
}

/// Sets the hook that runs between this thread's next two passes.
fn between_passes(hook: impl FnOnce() + 'static) {
    BETWEEN_PASSES.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
}

#[test]
fn insert_pass_turns_into_a_dry_run_when_the_path_changed() {
    // Goal: a remembered path that no longer matches makes the next pass a dry run, and the
    // insert still lands. Method: order 4; the first pass of insert(55) finds its leaf
    // [30 40 50] full; between passes the hook splits that leaf (insert 35), so 55's child
    // index in the root moves and the second pass must fail validation.
    let tree = std::sync::Arc::new(order4());
    for n in [10, 20, 30, 40, 50] {
        assert!(tree.insert(&key(n), b"v").unwrap());
    }
    let dry_runs_before = counter(&tree, "dry_runs");
    let restarts_before = counter(&tree, names::RESTARTS);
    let other = tree.clone();
    between_passes(move || {
        assert!(other.insert(&key(35), b"v").unwrap());
    });
    assert!(tree.insert(&key(55), b"w").unwrap());
    assert_eq!(counter(&tree, "dry_runs"), dry_runs_before + 1);
    // Ours: pass 1 (leaf full), pass 2: a dry run, which still completes at the leaf
    // [40 50] since that now has room. The hook's insert(35): one restart for its split.
    assert_eq!(counter(&tree, names::RESTARTS), restarts_before + 2);
    tree.check_invariants().unwrap();
    let mut out = Vec::new();
    for n in [10, 20, 30, 35, 40, 50] {
        assert!(tree.get(&key(n), &mut out), "{n} lost");
        assert_eq!(out, b"v");
    }
    assert!(tree.get(&key(55), &mut out));
    assert_eq!(out, b"w");
    assert_eq!(tree.stats().key_count, 7);
}

#[test]
fn remove_pass_turns_into_a_dry_run_when_the_path_changed() {
    // Goal: the same for delete. Method: order 4, leaves [10 20] [30 40] under root [20];
    // remove(40) underflows its leaf, so pass 1 asks for the holder; between passes the hook
    // splits the left leaf (insert 5, 6), moving 40's leaf to child index 2: the next pass is a
    // dry run, the one after merges.
    let tree = std::sync::Arc::new(order4());
    for n in [10, 20, 30, 40] {
        assert!(tree.insert(&key(n), b"v").unwrap());
    }
    assert_eq!(tree.stats().height, 2);
    let dry_runs_before = counter(&tree, "dry_runs");
    let merges_before = counter(&tree, names::MERGES);
    let other = tree.clone();
    between_passes(move || {
        assert!(other.insert(&key(5), b"v").unwrap());
        assert!(other.insert(&key(6), b"v").unwrap());
    });
    assert!(tree.remove(&key(40)));
    assert_eq!(counter(&tree, "dry_runs"), dry_runs_before + 1);
    assert_eq!(counter(&tree, names::MERGES), merges_before + 1);
    tree.check_invariants().unwrap();
    let mut keys = Vec::new();
    tree.scan(
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        forest_core::Order::Ascending,
        &mut |k, _| {
            keys.push(u64::from_be_bytes(k.try_into().unwrap()));
            std::ops::ControlFlow::Continue(())
        },
    );
    assert_eq!(keys, [5, 6, 10, 20, 30]);
}

#[test]
fn pessimistic_passes_complete_every_structure_change() {
    // Goal: the last-resort pass (holder and whole path write-latched, no validation) does
    // splits, borrows, merges and root changes right. Method: with the pass limit at 1, every
    // second pass is pessimistic; grow an order-4 tree to 3 000 keys and shrink it to empty,
    // checking invariants and contents along the way.
    PASS_COUNT_MAX_OVERRIDE.with(|n| n.set(Some(1)));
    let tree = order4();
    for n in 0..3_000u64 {
        assert!(tree.insert(&key(n * 7919 % 3_000), b"v").unwrap());
        if n % 500 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    tree.check_invariants().unwrap();
    assert_eq!(tree.stats().key_count, 3_000);
    assert!(tree.stats().height > 4);
    for n in 0..3_000u64 {
        assert!(tree.remove(&key(n * 4111 % 3_000)), "{n}");
        if n % 500 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    PASS_COUNT_MAX_OVERRIDE.with(|n| n.set(None));
    tree.check_invariants().unwrap();
    let stats = tree.stats();
    assert_eq!(
        (stats.key_count, stats.height, stats.leaf_node_count),
        (0, 1, 1)
    );
    assert!(counter(&tree, names::MERGES) > 0);
    assert!(counter(&tree, names::BORROWS) > 0);
}
