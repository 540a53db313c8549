//! Skeptic review rev-ycsba (session 14, branch h-ycsba): the key hash in boxed deltas and the
//! byte-sized leaf limits (insert.rs `page_limits`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::stats::names;
use forest_core::{Index, Order};

fn counters(tree: &BwTree) -> (u64, u64, u64) {
    let s = tree.stats();
    (
        s.counter(names::SPLITS).unwrap_or(0),
        s.counter(names::MERGES).unwrap_or(0),
        s.leaf_node_count,
    )
}

fn scan_all(tree: &BwTree) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k: &[u8], v: &[u8]| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    );
    out
}

// Goal: an insert-only load never merges, also with records of mixed sizes (the builder's test
// checks uniform sizes only). Method: keys in order and in a scattered order, values of 8 bytes
// and of 2000 bytes in blocks, in runs, and one huge among small ones; count merges.
#[test]
fn rev_ycsba_mixed_sizes_insert_only_never_merges() {
    type Pattern = (&'static str, fn(u32) -> usize);
    let patterns: [Pattern; 4] = [
        ("alternate 8/2000", |i| if i % 2 == 0 { 8 } else { 2000 }),
        ("blocks of 20", |i| if (i / 20) % 2 == 0 { 8 } else { 2000 }),
        ("blocks of 40", |i| if (i / 40) % 2 == 0 { 8 } else { 2000 }),
        ("one 64 KiB in 50", |i| {
            if i.is_multiple_of(50) {
                64 << 10
            } else {
                8
            }
        }),
    ];
    let mut failures = Vec::new();
    for (name, len) in patterns {
        for scattered in [false, true] {
            let tree = BwTree::new();
            let n = 4000u32;
            for j in 0..n {
                let i = if scattered { j * 7919 % n } else { j };
                tree.insert(format!("user{i:08}").as_bytes(), &vec![7u8; len(i)])
                    .unwrap();
            }
            let (splits, merges, leaves) = counters(&tree);
            assert_eq!(tree.stats().key_count, u64::from(n));
            eprintln!(
                "{name} scattered={scattered}: splits {splits} merges {merges} leaves {leaves}"
            );
            if merges != 0 {
                failures.push(format!("{name} scattered={scattered}: {merges} merges, {splits} splits, {leaves} leaves"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "merges on insert-only loads: {failures:#?}"
    );
}

// Goal: lookups through long chains of boxed deltas whose keys share their last 64 bytes (so
// their hashes) and differ only in their first bytes, with inline and boxed deltas of one key,
// deletes and re-inserts, agree with a model. Method: a tree whose chains are long (high
// consolidate threshold), random inserts/updates/removes over such keys; get every key and
// scan after each round.
#[test]
fn rev_ycsba_hash_collisions_agree_with_model() {
    let tree = BwTree::with_config(BwTreeConfig {
        max_records_per_page: 64,
        consolidate_threshold: 1024,
        merge_threshold: 16,
        read_consolidate_threshold: 1024,
    })
    .unwrap();
    let tail = vec![b'z'; 70];
    let key = |i: u32| {
        let mut k = format!("{i:04}").into_bytes();
        k.extend_from_slice(&tail);
        k
    };
    // Short keys too: one byte string stored inline (short value) or boxed (long value).
    let short = |i: u32| format!("s{i:02}").into_bytes();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for round in 0..40 {
        for _ in 0..200 {
            let i = rnd(120) as u32;
            let k = if rnd(3) == 0 { short(i % 30) } else { key(i) };
            match rnd(4) {
                0 => {
                    assert_eq!(tree.remove(&k), model.remove(&k).is_some());
                }
                _ => {
                    let len = [1usize, 5, 30, 100][rnd(4) as usize];
                    let v = vec![(round as u8).wrapping_add(i as u8); len];
                    tree.upsert(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
        for i in 0..120 {
            for k in [key(i), short(i % 30)] {
                let mut out = Vec::new();
                let got = tree.get(&k, &mut out).then_some(out);
                assert_eq!(
                    got,
                    model.get(&k).cloned(),
                    "round {round} key {:?}",
                    String::from_utf8_lossy(&k)
                );
            }
        }
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scan_all(&tree), want, "round {round}");
    }
}

// Goal: once loaded, updates that keep every record's size leave the tree's shape alone (no
// split or merge). Method: load keys in order with a 64 KiB value every 50 keys (8 bytes
// otherwise), then rewrite every key with a value of its own size, 5 passes; count splits and
// merges during the updates; all keys still read back.
#[test]
fn rev_ycsba_same_size_updates_do_not_reshape() {
    let tree = BwTree::new();
    let n = 4000u32;
    let len = |i: u32| if i.is_multiple_of(50) { 64 << 10 } else { 8 };
    for i in 0..n {
        tree.upsert(format!("user{i:08}").as_bytes(), &vec![7u8; len(i)])
            .unwrap();
    }
    let (s0, m0, l0) = counters(&tree);
    for pass in 0..5u8 {
        for i in 0..n {
            tree.upsert(format!("user{i:08}").as_bytes(), &vec![pass; len(i)])
                .unwrap();
        }
    }
    let (s1, m1, l1) = counters(&tree);
    eprintln!("load: splits {s0} merges {m0} leaves {l0}; after 5 update passes: splits {} merges {} leaves {l1}", s1 - s0, m1 - m0);
    let mut out = Vec::new();
    for i in 0..n {
        assert!(tree.get(format!("user{i:08}").as_bytes(), &mut out));
        assert_eq!(out, vec![4u8; len(i)]);
    }
    assert_eq!(
        (s1 - s0, m1 - m0),
        (0, 0),
        "splits and merges during same-size updates"
    );
}

// Goal: the split/merge churn of mixed-size leaves (F1) loses no write under concurrency.
// Method: 4 threads, each owning the keys i % 4 == t of 3000, upsert values of 8, 300 or
// 6000 bytes and remove at random, checking each write's key right after it; then every key
// and a full scan against the merged models.
#[test]
fn rev_ycsba_mixed_sizes_concurrent_churn_agrees_with_model() {
    let tree = std::sync::Arc::new(BwTree::new());
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let tree = tree.clone();
            std::thread::spawn(move || {
                let mut model = BTreeMap::new();
                let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ (u64::from(t + 1) * 0x9E37_79B9);
                let mut rnd = |m: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % m
                };
                let mut out = Vec::new();
                for step in 0..20_000u32 {
                    let i = rnd(750) as u32 * 4 + t;
                    let k = format!("user{i:08}").into_bytes();
                    if rnd(3) == 0 {
                        let had = tree.remove(&k);
                        assert_eq!(had, model.remove(&k).is_some(), "t{t} step {step}");
                    } else {
                        let len = [8usize, 300, 6000][rnd(3) as usize];
                        let v = vec![(step % 251) as u8; len];
                        tree.upsert(&k, &v).unwrap();
                        model.insert(k.clone(), v);
                    }
                    let got = tree.get(&k, &mut out).then(|| out.clone());
                    assert_eq!(
                        got.as_ref(),
                        model.get(&k),
                        "t{t} step {step} read-your-write"
                    );
                }
                model
            })
        })
        .collect();
    let mut all = BTreeMap::new();
    for h in threads {
        all.extend(h.join().unwrap());
    }
    let want: Vec<_> = all.into_iter().collect();
    assert_eq!(scan_all(&tree), want);
    let (splits, merges, leaves) = counters(&tree);
    eprintln!("splits {splits} merges {merges} leaves {leaves}");
}

// Goal: with a small configured merge threshold (valid: `bwtree:merge=2`), leaves of large
// records still merge when they empty; the scaled threshold (merge * split_above / max) must not
// round to 0. Method: max 128, merge 2; a sliding window of 50 live keys with 2000-byte values
// over 20000 increasing keys (insert i, remove i - 50); count the leaves left.
#[test]
fn rev_ycsba_small_merge_threshold_still_merges_large_leaves() {
    let tree = BwTree::with_config(BwTreeConfig {
        merge_threshold: 2,
        ..BwTreeConfig::default()
    })
    .unwrap();
    let key = |i: u32| format!("user{i:08}").into_bytes();
    let value = vec![3u8; 2000];
    for i in 0..20_000u32 {
        tree.upsert(&key(i), &value).unwrap();
        if i >= 50 {
            assert!(tree.remove(&key(i - 50)));
        }
    }
    let (splits, merges, leaves) = counters(&tree);
    eprintln!("splits {splits} merges {merges} leaves {leaves}");
    assert_eq!(tree.stats().key_count, 50);
    // 50 live records of 2 KiB need a handful of leaves, not one per 16 keys ever written.
    assert!(
        leaves <= 20,
        "{leaves} leaves for 50 live keys ({splits} splits, {merges} merges)"
    );
}
