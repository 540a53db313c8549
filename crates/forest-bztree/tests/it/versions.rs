//! Superseded versions (crate doc, §4.2.3 "last writer wins"): an upsert of an existing key
//! completes with 2 words and leaves the old version visible until a consolidation; reads,
//! scans, deletes, stats and the audit see one version per key, the newest.
#![allow(clippy::unwrap_used)]

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

fn pairs(tree: &BzTree) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for order in [Order::Ascending, Order::Descending] {
        let mut got = Vec::new();
        tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        });
        if order == Order::Descending {
            got.reverse();
        }
        if out.is_empty() {
            out = got;
        } else {
            assert_eq!(out, got, "both orders see the same records");
        }
    }
    out
}

fn consolidations(tree: &BzTree) -> u64 {
    tree.stats().counter(names::CONSOLIDATIONS).unwrap_or(0)
}

// Goal: versions piled up in one leaf (no consolidation between) read as the newest, scan as
// one record, count once, and go with one delete; the key can then be inserted again.
#[test]
fn superseded_versions_read_scan_and_delete_as_one() {
    let tree = BzTree::new();
    for k in [b"a", b"b", b"c"] {
        assert!(tree.insert(k, b"0").unwrap());
    }
    for v in 1..=6u8 {
        tree.upsert(b"b", &[v]).unwrap();
        assert!(tree.update(b"c", &[v, v]).unwrap());
    }
    assert_eq!(consolidations(&tree), 0, "the versions are all in the leaf");
    let mut out = Vec::new();
    assert!(tree.get(b"b", &mut out) && out == [6]);
    assert!(tree.get(b"c", &mut out) && out == [6, 6]);
    assert_eq!(
        pairs(&tree),
        vec![
            (b"a".to_vec(), b"0".to_vec()),
            (b"b".to_vec(), vec![6]),
            (b"c".to_vec(), vec![6, 6]),
        ]
    );
    assert_eq!(tree.stats().key_count, 3);
    assert!(
        !tree.insert(b"b", b"x").unwrap(),
        "an older version counts as present"
    );
    assert!(tree.remove(b"b"));
    assert!(!tree.get(b"b", &mut out), "no older version comes back");
    assert!(!tree.remove(b"b"));
    assert!(!tree.update(b"b", b"y").unwrap());
    assert_eq!(pairs(&tree).len(), 2);
    assert!(tree.insert(b"b", b"again").unwrap());
    assert!(tree.get(b"b", &mut out) && out == b"again");
    assert_eq!(tree.stats().key_count, 3);
}

// Goal: a delete of a key with more visible versions than one PMwCAS takes consolidates first
// and still removes every version.
#[test]
fn delete_of_more_versions_than_a_descriptor_holds() {
    let tree = BzTree::with_config(BzTreeConfig {
        delete_size_max: 512,
        ..BzTreeConfig::default()
    })
    .unwrap();
    assert!(tree.insert(b"k", b"0").unwrap());
    assert!(tree.insert(b"z", b"1").unwrap());
    for v in 0..30u8 {
        tree.upsert(b"k", &[v]).unwrap();
    }
    assert_eq!(consolidations(&tree), 0, "30 versions in the leaf");
    let mut out = Vec::new();
    assert!(tree.get(b"k", &mut out) && out == [29]);
    assert!(tree.remove(b"k"));
    assert!(consolidations(&tree) > 0, "the delete consolidated first");
    assert!(!tree.get(b"k", &mut out));
    assert_eq!(pairs(&tree), vec![(b"z".to_vec(), b"1".to_vec())]);
}

// Goal: a record-pointer version superseded by an inline one is hidden (its block retired),
// an inline one superseded by a record pointer stays visible behind it; reads follow the
// newest either way and a delete removes all.
#[test]
fn record_pointer_and_inline_versions_alternate() {
    let tree = BzTree::with_config(BzTreeConfig {
        inline_value_max: 16,
        ..BzTreeConfig::default()
    })
    .unwrap();
    let big = |v: u8| vec![v; 100];
    assert!(tree.insert(b"k", &big(1)).unwrap());
    let mut out = Vec::new();
    for round in 0..4u8 {
        tree.upsert(b"k", &[round]).unwrap();
        assert!(tree.get(b"k", &mut out) && out == [round]);
        tree.upsert(b"k", &big(round)).unwrap();
        assert!(tree.get(b"k", &mut out) && out == big(round));
        tree.upsert(b"k", &big(round + 10)).unwrap();
        assert!(tree.get(b"k", &mut out) && out == big(round + 10));
        assert_eq!(pairs(&tree), vec![(b"k".to_vec(), big(round + 10))]);
    }
    assert!(tree.remove(b"k"));
    assert!(!tree.get(b"k", &mut out));
    assert!(pairs(&tree).is_empty());
}

// Goal: linearizable reads under concurrent upserts and deletes of a few keys: a reader never
// sees a writer's older value after a newer one of the same writer (last writer wins keeps
// each writer's order), and never a value no one wrote.
#[test]
fn readers_never_go_back_in_a_writers_order() {
    const KEYS: u8 = 4;
    const WRITES: u32 = 3_000;
    let tree = Arc::new(BzTree::with_config(BzTreeConfig::with_node_size(256)).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u8)
        .map(|w| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                for seq in 1..=WRITES {
                    let k = [(seq % u32::from(KEYS)) as u8];
                    let mut v = vec![w];
                    v.extend_from_slice(&seq.to_be_bytes());
                    tree.upsert(&k, &v).unwrap();
                    if seq % 7 == 0 {
                        tree.remove(&[((seq / 7) % u32::from(KEYS)) as u8]);
                    }
                }
            })
        })
        .collect();
    let reader = {
        let (tree, done) = (Arc::clone(&tree), Arc::clone(&done));
        std::thread::spawn(move || {
            // Per key and writer, the newest sequence number seen.
            let mut seen = [[0u32; 2]; KEYS as usize];
            let mut out = Vec::new();
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) || reads < 1_000 {
                for k in 0..KEYS {
                    reads += 1;
                    if !tree.get(&[k], &mut out) {
                        continue;
                    }
                    assert_eq!(out.len(), 5, "key {k}: {out:?}");
                    let w = usize::from(out[0]);
                    let seq = u32::from_be_bytes(out[1..].try_into().unwrap());
                    assert!(w < 2 && seq % u32::from(KEYS) == u32::from(k), "{out:?}");
                    let last = &mut seen[usize::from(k)][w];
                    assert!(
                        seq >= *last,
                        "key {k}: writer {w} went back {last} -> {seq}"
                    );
                    *last = seq;
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    reader.join().unwrap();
    // Quiescent: one version per key, the newest, in reads and scans alike.
    let mut out = Vec::new();
    for (k, v) in pairs(&tree) {
        assert!(tree.get(&k, &mut out) && out == v, "key {k:?}");
    }
    assert_eq!(tree.stats().key_count, pairs(&tree).len() as u64);
}
