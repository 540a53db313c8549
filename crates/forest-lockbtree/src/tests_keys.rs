//! Unit tests of keys around the key slot's inline limit ([`crate::bytes::KEY_INLINE_MAX`]):
//! where they are stored, and that search, get, scan and remove treat inline and boxed keys
//! alike, also mixed in one leaf and as separators.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order};

use crate::bytes::{SlotBytes, KEY_INLINE_MAX};
use crate::node::Latched;
use crate::{LockBTree, LockBTreeConfig, NodeSearch};

/// A key of `len` bytes sharing its first 8 bytes (`user1234`) with every other key of at
/// least 8 bytes, so that the prefixes tie and the full keys decide; `tail` varies the last
/// byte.
fn key(len: usize, tail: u8) -> Vec<u8> {
    let mut k: Vec<u8> = b"user1234".iter().copied().cycle().take(len).collect();
    if let Some(last) = k.last_mut() {
        *last = tail;
    }
    k
}

/// Whether each key slot of the root leaf is inline, in key order. The tree must be one leaf.
fn root_leaf_inline(tree: &LockBTree) -> Vec<(Vec<u8>, bool)> {
    let waits = &tree.counters.latch_waits;
    let holder = tree.tree.read(waits);
    let root = holder.root_read(waits);
    drop(holder);
    assert_eq!(root.level(), 0, "the tree is one leaf");
    root.body()
        .keys
        .iter()
        .map(|k| (k.to_vec(), matches!(k, SlotBytes::Inline { .. })))
        .collect()
}

fn scan_keys(
    tree: &LockBTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    tree.scan(lower, upper, order, &mut |k, _| {
        keys.push(k.to_vec());
        ControlFlow::Continue(())
    });
    keys
}

/// Checks `tree` against `model`: every key and its neighbours one byte off by get, whole and
/// bounded scans in both orders, the invariants.
fn check_against(tree: &LockBTree, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    tree.check_invariants().unwrap();
    let mut out = Vec::new();
    for (k, v) in model {
        assert!(tree.get(k, &mut out), "{k:?} lost");
        assert_eq!(&out, v, "{k:?}");
        let mut longer = k.clone();
        longer.push(0);
        assert_eq!(tree.get(&longer, &mut out), model.contains_key(&longer));
        if let Some((_, shorter)) = k.split_last() {
            assert_eq!(tree.get(shorter, &mut out), model.contains_key(shorter));
        }
    }
    let all: Vec<Vec<u8>> = model.keys().cloned().collect();
    let unbounded = Bound::Unbounded;
    assert_eq!(scan_keys(tree, unbounded, unbounded, Order::Ascending), all);
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(
        scan_keys(tree, unbounded, unbounded, Order::Descending),
        reversed
    );
    // Bounds on every key: the bounded scans start and stop at inline and boxed keys alike.
    for (i, k) in all.iter().enumerate() {
        let from: Vec<_> = all[i..].to_vec();
        assert_eq!(
            scan_keys(tree, Bound::Included(k), unbounded, Order::Ascending),
            from
        );
        let above: Vec<_> = all[i + 1..].to_vec();
        assert_eq!(
            scan_keys(tree, Bound::Excluded(k), unbounded, Order::Ascending),
            above
        );
        let mut below: Vec<_> = all[..i].to_vec();
        below.reverse();
        assert_eq!(
            scan_keys(tree, unbounded, Bound::Excluded(k), Order::Descending),
            below
        );
    }
}

#[test]
fn keys_at_below_and_above_the_inline_limit_and_the_empty_key() {
    // Goal: a key of exactly KEY_INLINE_MAX bytes (30) and one byte less stay in the slot, one
    // byte more is boxed, the empty key is inline too, and all four behave the same through
    // insert, get, update, scan and remove. Method: one leaf; the slots' kinds are read under
    // the leaf's latch; values are larger than a value slot holds, so only keys differ.
    let tree = LockBTree::new();
    let lengths = [0, KEY_INLINE_MAX - 1, KEY_INLINE_MAX, KEY_INLINE_MAX + 1];
    let mut model = BTreeMap::new();
    for len in lengths {
        let value = vec![len as u8; 100];
        assert!(tree.insert(&key(len, b'k'), &value).unwrap());
        model.insert(key(len, b'k'), value);
    }
    let slots = root_leaf_inline(&tree);
    let want: Vec<_> = model
        .keys()
        .map(|k| (k.clone(), k.len() <= KEY_INLINE_MAX))
        .collect();
    assert_eq!(slots, want);
    assert_eq!(
        slots.iter().filter(|(_, inline)| !inline).count(),
        1,
        "only the 31-byte key is boxed"
    );
    check_against(&tree, &model);
    for len in lengths {
        assert!(tree.update(&key(len, b'k'), b"updated").unwrap());
        model.insert(key(len, b'k'), b"updated".to_vec());
    }
    check_against(&tree, &model);
    for len in lengths {
        assert!(tree.remove(&key(len, b'k')), "{len}");
        assert!(!tree.remove(&key(len, b'k')), "{len} twice");
        model.remove(&key(len, b'k'));
        check_against(&tree, &model);
    }
    assert_eq!(tree.stats().key_count, 0);
}

#[test]
fn mixed_lengths_in_one_leaf() {
    // Goal: one leaf holding keys of every length from 0 to 40, inline and boxed next to each
    // other and sharing an 8-byte prefix, searches right with both in-node searches. Method:
    // two keys per length (different last byte) inserted in a scrambled order into a tree of
    // the default order (one leaf); slot kinds follow the length; gets of each key and its
    // one-byte-off neighbours, bounded scans from every key, then removal of every other key.
    for search in [NodeSearch::Linear, NodeSearch::Binary] {
        let tree = LockBTree::with_config(LockBTreeConfig {
            search,
            ..LockBTreeConfig::default()
        })
        .unwrap();
        let mut keys: Vec<Vec<u8>> = (0..=40)
            .flat_map(|len| [key(len, b'a'), key(len, b'z')])
            .collect();
        keys.sort();
        keys.dedup();
        let mut model = BTreeMap::new();
        for i in 0..keys.len() {
            let k = &keys[i * 37 % keys.len()];
            let value = format!("value of {} bytes", k.len()).into_bytes();
            assert!(tree.insert(k, &value).unwrap(), "{k:?}");
            model.insert(k.clone(), value);
        }
        assert_eq!(model.len(), keys.len());
        let slots = root_leaf_inline(&tree);
        assert!(slots.iter().any(|(_, inline)| *inline));
        assert!(slots.iter().any(|(_, inline)| !inline));
        for (k, inline) in &slots {
            assert_eq!(*inline, k.len() <= KEY_INLINE_MAX, "{k:?}");
        }
        check_against(&tree, &model);
        for k in keys.iter().step_by(2) {
            assert!(tree.remove(k), "{k:?}");
            model.remove(k);
        }
        check_against(&tree, &model);
    }
}

#[test]
fn mixed_lengths_as_separators_through_splits_and_merges() {
    // Goal: inline and boxed keys moved between nodes (splits, borrows, merges) and copied
    // into inner nodes as separators keep the tree ordered and complete. Method: order 4, so
    // nearly every insert and remove restructures; keys of lengths 0..=40 with two tails, all
    // inserted, then all removed, checking against a model after each phase.
    for search in [NodeSearch::Linear, NodeSearch::Binary] {
        let tree = LockBTree::with_config(LockBTreeConfig { order: 4, search }).unwrap();
        let keys: Vec<Vec<u8>> = (0..=40)
            .flat_map(|len| [key(len, b'a'), key(len, b'z')])
            .collect();
        let mut model = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            tree.upsert(k, &[i as u8; 40]).unwrap();
            model.insert(k.clone(), vec![i as u8; 40]);
        }
        assert!(tree.stats().height >= 3);
        check_against(&tree, &model);
        for k in keys.iter().rev().step_by(3) {
            assert_eq!(tree.remove(k), model.remove(k).is_some(), "{k:?}");
        }
        check_against(&tree, &model);
        for k in &keys {
            assert_eq!(tree.remove(k), model.remove(k).is_some(), "{k:?}");
        }
        check_against(&tree, &model);
        assert_eq!(tree.stats().key_count, 0);
    }
}
