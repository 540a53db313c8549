//! Node splits (thesis §2.2.2), run by the final pass of a multi-pass insert.
//!
//! The record goes into the leaf first, using the overflow slot (§2.4, Listing 2.9); a node
//! over capacity then splits on its own: a new right sibling takes the upper half, and the
//! parent gets a separator and the new child. For a leaf the separator is a copy of the left
//! half's largest key (keys `m` left of separator `k` have `m <= k`, §2.1); for an inner node
//! the middle separator moves up, as the split makes it redundant (Figure 2.2). A root split
//! makes a new root with the two halves as children and grows the height.
//!
//! Preconditions: the pass stayed valid and holds the leaf and every inner node from
//! `lock_from` down write-latched (the holder too for a root split), and the node at
//! `lock_from` has room for one more separator ([`can_absorb_split`]). So the cascade stops
//! at or below `lock_from`, and each node it touches is exclusively ours.
//!
//! Each node is released as soon as its part is done: its parent is still held exclusively,
//! so no thread can reach it or its unlinked new sibling before the parent is consistent.

use crate::bytes::Key;
use crate::insert_multipass::{insert_record, Descent, Path};
use crate::node::{Latched, NodeBody, NodePtr, OwnedNode, WriteGuard};
use crate::search::prefix_of;
use crate::LockBTree;

/// The insert's `lock_from` after a pass found the leaf full: the level of the lowest
/// ancestor with room for one more separator, or the height (the holder) when all are full.
pub(crate) fn lock_from_for_insert(path: &Path, cap: usize) -> u32 {
    let leaf_depth = path.depth - 1;
    (0..leaf_depth)
        .rev()
        .find(|&depth| (path.path[depth].len as usize) < cap)
        .map_or(path.height, |depth| path.level(depth))
}

/// Whether the pass's latches suffice for a split cascade, rechecked under those latches.
pub(crate) fn can_absorb_split(tree: &LockBTree, d: &Descent<'_>, lock_from: u32) -> bool {
    if d.holder.is_some() {
        return true;
    }
    match d.chain.first() {
        Some(top) => top.level() == lock_from && top.body().len() < tree.key_count_max(),
        None => false,
    }
}

/// Inserts the record at `pos` of the leaf and splits up the chain as needed.
pub(crate) fn insert_with_splits(
    tree: &LockBTree,
    d: Descent<'_>,
    pos: usize,
    key: &[u8],
    value: &[u8],
) {
    let Descent {
        mut holder,
        mut chain,
        mut leaf,
        path,
    } = d;
    insert_record(leaf.body_mut(), pos, key, value);
    let mut carry = split_if_over(tree, &mut leaf);
    drop(leaf);
    let mut depth = path.depth - 1;
    while let Some((separator, right)) = carry.take() {
        if let Some(mut parent) = chain.pop() {
            depth -= 1;
            let index = path.path[depth].index as usize;
            debug_assert_eq!(parent.id(), path.path[depth].node);
            insert_child(parent.body_mut(), index, separator, right);
            carry = split_if_over(tree, &mut parent);
        } else {
            let holder = holder
                .as_mut()
                .expect("a root split holds the holder's latch (lock_from = height)");
            let height = holder.height();
            let mut root = OwnedNode::new(height, tree.order);
            let body = root.body_mut();
            body.prefixes.push(prefix_of(&separator));
            body.keys.push(separator);
            body.children.push(holder.root());
            body.children.push(right);
            holder.set_root(root.into_ptr(), height + 1);
        }
    }
}

/// Puts `separator` and `right` into an inner node after child `index` (the split child).
fn insert_child(node: &mut NodeBody, index: usize, separator: Key, right: NodePtr) {
    node.prefixes.insert(index, prefix_of(&separator));
    node.keys.insert(index, separator);
    node.children.insert(index + 1, right);
}

/// Splits `node` if it is over capacity; returns the separator and the new right sibling.
fn split_if_over(tree: &LockBTree, node: &mut WriteGuard) -> Option<(Key, NodePtr)> {
    if node.body().len() <= tree.key_count_max() {
        return None;
    }
    let level = node.level();
    let order = tree.order;
    let mut right = OwnedNode::new(level, order);
    let left = node.body_mut();
    let separator = if level == 0 {
        // The leaf's range shrinks (node.rs, invariant 6); it is held exclusively.
        tree.tree.revisits.bump();
        split_leaf(left, right.body_mut())
    } else {
        split_inner(left, right.body_mut())
    };
    tree.counters.splits.incr();
    Some((separator, right.into_ptr()))
}

/// Moves the upper half of a leaf of `order` records to `right`; the left keeps the larger
/// half (`ceil(order / 2)`), the right gets `floor(order / 2)`, the leaf minimum.
fn split_leaf(left: &mut NodeBody, right: &mut NodeBody) -> Key {
    let kept = left.len().div_ceil(2);
    right.prefixes.extend(left.prefixes.drain(kept..));
    right.keys.extend(left.keys.drain(kept..));
    right.values.extend(left.values.drain(kept..));
    left.keys[kept - 1].clone()
}

/// Splits an inner node of `order` separators (`order + 1` children): the left keeps
/// `ceil((order + 1) / 2)` children, the right the rest (at least `ceil(order / 2)`), and the
/// separator between them moves up.
fn split_inner(left: &mut NodeBody, right: &mut NodeBody) -> Key {
    let kept_children = left.children.len().div_ceil(2);
    right.prefixes.extend(left.prefixes.drain(kept_children..));
    right.keys.extend(left.keys.drain(kept_children..));
    right.children.extend(left.children.drain(kept_children..));
    left.prefixes.pop();
    left.keys
        .pop()
        .expect("an inner node over capacity has separators")
}
