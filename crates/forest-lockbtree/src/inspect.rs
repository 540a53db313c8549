//! Statistics and the structural invariant check: walks of the whole tree under read latches.
//!
//! A walk latches top-down and holds the latches of the path from the root to the node it
//! visits, like a descent that keeps its ancestors; writers on that path wait for it. Neither
//! walk is a snapshot under concurrent writes; the invariant check is meant for quiescent trees
//! (tests, debugging).

use forest_core::stats::names;
use forest_core::IndexStats;

use crate::node::{Latched, ReadGuard, NODE_BYTES};
use crate::search::prefix_of;
use crate::LockBTree;

#[derive(Default)]
struct Totals {
    key_count: u64,
    memory_bytes: u64,
    inner_node_count: u64,
    leaf_node_count: u64,
}

/// [`forest_core::Index::stats`] for the tree.
pub(crate) fn stats(tree: &LockBTree) -> IndexStats {
    let waits = &tree.counters.latch_waits;
    let holder = tree.tree.read(waits);
    let height = holder.height();
    let root = holder.root_read(waits);
    drop(holder);
    let mut totals = Totals {
        memory_bytes: size_of::<LockBTree>() as u64,
        ..Totals::default()
    };
    add_subtree(tree, &root, &mut totals);
    drop(root);
    let c = &tree.counters;
    IndexStats {
        key_count: totals.key_count,
        memory_bytes: totals.memory_bytes,
        height,
        inner_node_count: totals.inner_node_count,
        leaf_node_count: totals.leaf_node_count,
        counters: vec![
            (names::RESTARTS, c.restarts.get()),
            ("dry_runs", c.dry_runs.get()),
            (names::SPLITS, c.splits.get()),
            (names::MERGES, c.merges.get()),
            (names::BORROWS, c.borrows.get()),
            (names::LATCH_WAITS, c.latch_waits.get()),
            ("scan_revisits", c.scan_revisits.get()),
            ("scan_redescents", c.scan_redescents.get()),
            ("scan_sibling_steps", c.scan_sibling_steps.get()),
        ],
    }
}

fn add_subtree(tree: &LockBTree, node: &ReadGuard, totals: &mut Totals) {
    let body = node.body();
    totals.memory_bytes += NODE_BYTES as u64 + body.heap_bytes();
    if node.level() == 0 {
        totals.leaf_node_count += 1;
        totals.key_count += body.len() as u64;
        return;
    }
    totals.inner_node_count += 1;
    for i in 0..body.children.len() {
        let child = node.read_child(i, &tree.counters.latch_waits);
        add_subtree(tree, &child, totals);
    }
}

/// Checks the B+tree invariants (see [`LockBTree::check_invariants`]).
pub(crate) fn check(tree: &LockBTree) -> Result<(), String> {
    let waits = &tree.counters.latch_waits;
    let holder = tree.tree.read(waits);
    let height = holder.height();
    let root = holder.root_read(waits);
    drop(holder);
    if root.level() + 1 != height {
        return Err(format!("root level {} but height {height}", root.level()));
    }
    check_node(tree, &root, true, None, None)
}

/// Checks one node and its subtree; its keys must lie in `(low, high]`.
fn check_node(
    tree: &LockBTree,
    node: &ReadGuard,
    is_root: bool,
    low: Option<&[u8]>,
    high: Option<&[u8]>,
) -> Result<(), String> {
    let body = node.body();
    let level = node.level();
    let len = body.len();
    let at = || format!("node {:#x} (level {level}, {len} keys)", node.id());
    if body.prefixes.len() != len {
        return Err(format!("{}: {} prefixes", at(), body.prefixes.len()));
    }
    for (i, key) in body.keys.iter().enumerate() {
        if body.prefixes[i] != prefix_of(key) {
            return Err(format!("{}: prefix {i} does not match its key", at()));
        }
        if i > 0 && body.keys[i - 1] >= *key {
            return Err(format!("{}: keys {} and {i} out of order", at(), i - 1));
        }
        if low.is_some_and(|l| &key[..] <= l) || high.is_some_and(|h| &key[..] > h) {
            return Err(format!("{}: key {i} outside its separators", at()));
        }
    }
    if len > tree.key_count_max() {
        return Err(format!("{}: over capacity {}", at(), tree.key_count_max()));
    }
    let min = match (is_root, level) {
        (true, 0) => 0,
        (true, _) => 1,
        (false, 0) => tree.leaf_key_count_min(),
        (false, _) => tree.inner_key_count_min(),
    };
    if len < min {
        return Err(format!("{}: below its minimum {min}", at()));
    }
    if level == 0 {
        if body.values.len() != len || !body.children.is_empty() {
            return Err(format!("{}: leaf with {} values", at(), body.values.len()));
        }
        return Ok(());
    }
    if body.children.len() != len + 1 || !body.values.is_empty() {
        return Err(format!(
            "{}: inner node with {} children",
            at(),
            body.children.len()
        ));
    }
    for i in 0..body.children.len() {
        let child = node.read_child(i, &tree.counters.latch_waits);
        if child.level() + 1 != level {
            return Err(format!(
                "{}: child {i} at level {}: leaves at unequal depths",
                at(),
                child.level()
            ));
        }
        let child_low = if i == 0 {
            low
        } else {
            Some(&body.keys[i - 1][..])
        };
        let child_high = if i == len {
            high
        } else {
            Some(&body.keys[i][..])
        };
        check_node(tree, &child, false, child_low, child_high)?;
    }
    Ok(())
}
