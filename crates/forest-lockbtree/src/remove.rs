//! Delete (thesis §2.2.3) with the multi-pass strategy of §4.1. The thesis leaves the
//! concurrent delete out (§4.2.2); this module's design follows insertion step by step.
//!
//! # Passes
//! - Every pass descends as an insert does ([`descend_for_write`]): interlocking read
//!   latches, the leaf write-latched, write latches from `lock_from` down in a valid pass.
//! - At the leaf: an absent key ends the operation. If the leaf stays at or above its minimum
//!   after losing the record (or is the root, which has no minimum), the record goes and the
//!   operation ends, in any pass.
//! - Otherwise the leaf underflows and the change reaches up: `lock_from` is the level of the
//!   lowest ancestor that stays at or above its minimum after losing one separator (a root
//!   inner node: that keeps two children), or the holder when none does, since the root may
//!   then be left with one child. It is at least the leaf's parent, which must be held to
//!   reach the siblings.
//! - A valid pass rechecks under its latches that the node at `lock_from` can lose one entry
//!   (the holder always can), then removes the record and rebalances bottom-up.
//!
//! # Rebalancing (§2.2.3)
//! An underflowing node looks at its left and right siblings and takes one entry
//! ("migration", counted as a borrow) from the fuller one if it is above the minimum; that
//! changes only the separator between the two in the parent, and the cascade ends. Otherwise
//! it merges: into the left sibling, or, when it is the leftmost child, its right sibling into
//! it; the separator between them leaves the parent (for leaves it is dropped, for inner nodes
//! it comes down between the two halves), the emptied right node is freed, and the parent may
//! underflow in turn. A root inner node left with one child gives way to that child and the
//! height shrinks. Leaf separators after a borrow are copies of the left node's largest key,
//! as splits make them.
//!
//! # Why this does not deadlock
//! Latches are only ever taken top-down: the holder before the root, a parent before a child
//! (both descents), and a sibling only while its parent is write-latched by the same thread.
//! A thread waiting for a latch at depth `t` holds only latches at depths `< t`, except for the
//! sibling case, where it holds the common parent exclusively. Any thread holding that sibling
//! got it through that parent before we latched it, and from then on waits only for latches
//! below the sibling, which we do not hold (we never latch a sibling's children). So every
//! wait is for a thread that only waits deeper, and deeper waits end at the leaves.
//!
//! # Why frees are safe
//! A merged-away node is freed while the thread holds it and its parent exclusively, after
//! unlinking it; the former root is freed while holding it and the holder exclusively. See
//! [`crate::node`] (invariant 4): no thread can hold, wait for, or later reach it, so no epoch
//! or other deferred reclamation is needed.

use std::mem;

use crate::insert_multipass::{descend_for_write, pass_count_max, Descent, Path};
use crate::node::{Latched, NodeBody, WriteGuard};
use crate::search::{self, prefix_of, SearchKey};
use crate::LockBTree;

/// Removes `key` by multi-pass deletion. Returns whether it was present.
pub(crate) fn remove_entry(tree: &LockBTree, key: &[u8]) -> bool {
    let sk = SearchKey::new(key);
    let mut old = Path::first_pass();
    let mut pass_count = 1;
    loop {
        let mut d = descend_for_write(tree, &sk, &old);
        if old.valid && !d.path.valid {
            tree.counters.dry_runs.incr();
        }
        let body = d.leaf.body();
        let pos = search::lower_bound(tree.search, &body.prefixes, &body.keys, &sk);
        let found = pos < body.len() && sk.cmp_slot(body.prefixes[pos], &body.keys[pos]).is_eq();
        if !found {
            return false;
        }
        let leaf_is_root = d.path.depth == 1;
        if leaf_is_root || body.len() > tree.leaf_key_count_min() {
            remove_record(d.leaf.body_mut(), pos);
            return true;
        }
        if d.path.valid && can_lose_entry(tree, &d, old.lock_from) {
            remove_and_rebalance(tree, d, pos);
            return true;
        }
        assert!(!old.pessimistic, "the pessimistic pass always completes");
        if old.valid && d.path.valid {
            // Valid path, but the recheck under the latches failed.
            tree.counters.dry_runs.incr();
        }
        let lock_from = lock_from_for_remove(tree, &d.path);
        old = d.path.next_pass(lock_from);
        drop(d);
        #[cfg(test)]
        crate::insert_multipass::between_passes();
        // Safe to go on: we hold no latch, and the next pass re-reads everything it uses.
        tree.counters.restarts.incr();
        pass_count += 1;
        if pass_count > pass_count_max() {
            old = Path::pessimistic();
        }
    }
}

/// The delete's `lock_from` after a pass found the leaf at its minimum (see the module doc).
fn lock_from_for_remove(tree: &LockBTree, path: &Path) -> u32 {
    let leaf_depth = path.depth - 1;
    (0..leaf_depth)
        .rev()
        .find(|&depth| can_lose_one(tree, path.path[depth].len as usize, depth == 0))
        .map_or(path.height, |depth| path.level(depth))
}

/// Whether an inner node with `len` separators stays valid after losing one.
fn can_lose_one(tree: &LockBTree, len: usize, is_root: bool) -> bool {
    if is_root {
        len >= 2
    } else {
        len > tree.inner_key_count_min()
    }
}

/// Whether the pass's latches suffice for a rebalance cascade, rechecked under them.
fn can_lose_entry(tree: &LockBTree, d: &Descent<'_>, lock_from: u32) -> bool {
    if d.holder.is_some() {
        return true;
    }
    match d.chain.first() {
        Some(top) => {
            let is_root = top.level() == d.path.height - 1;
            top.level() == lock_from && can_lose_one(tree, top.body().len(), is_root)
        }
        None => false,
    }
}

/// Removes the record at `pos` of a leaf.
fn remove_record(leaf: &mut NodeBody, pos: usize) {
    leaf.prefixes.remove(pos);
    leaf.keys.remove(pos);
    leaf.values.remove(pos);
}

/// Whether a non-root node is below its minimum.
fn underflows(tree: &LockBTree, node: &WriteGuard) -> bool {
    let min = if node.level() == 0 {
        tree.leaf_key_count_min()
    } else {
        tree.inner_key_count_min()
    };
    node.body().len() < min
}

/// Removes the record and rebalances up the chain; replaces a root left with one child.
fn remove_and_rebalance(tree: &LockBTree, d: Descent<'_>, pos: usize) {
    let Descent {
        mut holder,
        mut chain,
        mut leaf,
        path,
    } = d;
    remove_record(leaf.body_mut(), pos);
    let mut cur = leaf;
    let mut depth = path.depth - 1;
    loop {
        if depth == 0 {
            // `cur` is the root: no minimum, but an inner root needs two children.
            if cur.level() > 0 && cur.body().len() == 0 {
                let holder = holder
                    .as_mut()
                    .expect("a root collapse holds the holder's latch (lock_from = height)");
                let child = cur.body().children[0];
                cur.body_mut().children.clear();
                let height = holder.height();
                holder.set_root(child, height - 1);
                cur.free_root(holder);
            }
            return;
        }
        if !underflows(tree, &cur) {
            return;
        }
        let mut parent = chain
            .pop()
            .expect("the parent of an underflowing node is write-latched (lock_from)");
        depth -= 1;
        debug_assert_eq!(parent.id(), path.path[depth].node);
        let index = path.path[depth].index as usize;
        fix_underflow(tree, &mut parent, cur, index);
        cur = parent;
    }
}

/// Fixes child `index` of `parent` (`node`, below its minimum) by a borrow or a merge.
fn fix_underflow(tree: &LockBTree, parent: &mut WriteGuard, mut node: WriteGuard, index: usize) {
    let waits = &tree.counters.latch_waits;
    let child_count = parent.body().children.len();
    // Siblings are latched only under the exclusively held parent (see the module doc).
    let mut left = (index > 0).then(|| parent.write_child(index - 1, waits));
    let mut right = (index + 1 < child_count).then(|| parent.write_child(index + 1, waits));
    let min = if node.level() == 0 {
        tree.leaf_key_count_min()
    } else {
        tree.inner_key_count_min()
    };
    let left_len = left.as_ref().map_or(0, |g| g.body().len());
    let right_len = right.as_ref().map_or(0, |g| g.body().len());
    // Leaf ranges change below (node.rs, invariant 6); the nodes are held exclusively.
    tree.tree.revisits.bump();
    let p = parent.body_mut();
    if left_len > min && left_len >= right_len {
        let l = left.as_mut().expect("left_len > 0");
        borrow_from_left(p, index, l.body_mut(), node.body_mut());
        tree.counters.borrows.incr();
    } else if right_len > min {
        let r = right.as_mut().expect("right_len > 0");
        borrow_from_right(p, index, node.body_mut(), r.body_mut());
        tree.counters.borrows.incr();
    } else if let Some(mut l) = left {
        merge(p, index - 1, l.body_mut(), node.body_mut());
        node.free(parent, &tree.tree.revisits);
        tree.counters.merges.incr();
    } else {
        let mut r = right.expect("a non-root node has a sibling");
        merge(p, index, node.body_mut(), r.body_mut());
        r.free(parent, &tree.tree.revisits);
        tree.counters.merges.incr();
    }
}

/// Moves the left sibling's last entry to the front of `node` (child `index`).
fn borrow_from_left(parent: &mut NodeBody, index: usize, left: &mut NodeBody, node: &mut NodeBody) {
    let prefix = left
        .prefixes
        .pop()
        .expect("a sibling above minimum has entries");
    let key = left
        .keys
        .pop()
        .expect("a sibling above minimum has entries");
    if let Some(child) = left.children.pop() {
        // Inner: the separator comes down, the left's last separator goes up.
        let down = mem::replace(&mut parent.keys[index - 1], key);
        let down_prefix = mem::replace(&mut parent.prefixes[index - 1], prefix);
        node.prefixes.insert(0, down_prefix);
        node.keys.insert(0, down);
        node.children.insert(0, child);
    } else {
        let value = left.values.pop().expect("a leaf has one value per key");
        node.prefixes.insert(0, prefix);
        node.keys.insert(0, key);
        node.values.insert(0, value);
        // The new separator: the left's largest remaining key.
        let separator = left.keys.last().expect("left stays at its minimum").clone();
        parent.prefixes[index - 1] = prefix_of(&separator);
        parent.keys[index - 1] = separator;
    }
}

/// Moves the right sibling's first entry to the end of `node` (child `index`).
fn borrow_from_right(
    parent: &mut NodeBody,
    index: usize,
    node: &mut NodeBody,
    right: &mut NodeBody,
) {
    let prefix = right.prefixes.remove(0);
    let key = right.keys.remove(0);
    if right.children.is_empty() {
        let value = right.values.remove(0);
        // The new separator: `node`'s new largest key, the one moved.
        parent.prefixes[index] = prefix;
        parent.keys[index] = key.clone();
        node.prefixes.push(prefix);
        node.keys.push(key);
        node.values.push(value);
    } else {
        let child = right.children.remove(0);
        let down = mem::replace(&mut parent.keys[index], key);
        let down_prefix = mem::replace(&mut parent.prefixes[index], prefix);
        node.prefixes.push(down_prefix);
        node.keys.push(down);
        node.children.push(child);
    }
}

/// Appends `right` to `left`, dropping separator `separator_index` and the right child from
/// the parent. The caller frees the emptied right node.
fn merge(parent: &mut NodeBody, separator_index: usize, left: &mut NodeBody, right: &mut NodeBody) {
    let separator = parent.keys.remove(separator_index);
    let separator_prefix = parent.prefixes.remove(separator_index);
    parent.children.remove(separator_index + 1);
    if !right.children.is_empty() {
        // Inner nodes: the separator comes down between the halves.
        left.prefixes.push(separator_prefix);
        left.keys.push(separator);
        left.children.append(&mut right.children);
    }
    left.prefixes.append(&mut right.prefixes);
    left.keys.append(&mut right.keys);
    left.values.append(&mut right.values);
}
