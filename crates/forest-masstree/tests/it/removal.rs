//! §4.6.5 removes: empty border nodes, emptied interior nodes, one-child roots and empty layers
//! go away and their memory comes back through the epoch, while concurrent gets, inserts and
//! scans keep returning right answers.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use forest_core::stats::names;
use forest_core::{Index, IndexStats, Order};
use forest_masstree::{Masstree, Masstree10x8, Masstree15x32, MasstreeConfig, SuffixStorage};

/// Keys per shape: 150 k in optimized builds (still five levels of 15-wide nodes at random
/// fill; a million took 42 s of CI's test budget for no new structure, 250 k 12 s), fewer in
/// debug builds.
const KEYS: u64 = if cfg!(forest_optimized) {
    150_000
} else {
    50_000
};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The key shapes: 8-byte big-endian integers, decimal strings, 40-byte keys with a 32-byte
/// common prefix (four layers deep), and keys whose long prefixes come in groups of 100 (many
/// small layers, each created and removed).
/// A key shape: its name and the key of index `i`.
type Shape = (&'static str, fn(u64) -> Vec<u8>);

fn shapes() -> Vec<Shape> {
    vec![
        ("u64", |i| i.to_be_bytes().to_vec()),
        ("decimal", |i| {
            (i.wrapping_mul(2_654_435_761) % 4_000_000_000)
                .to_string()
                .into_bytes()
        }),
        ("prefix32", |i| {
            let mut k = b"a shared prefix of 32 bytes ....".to_vec();
            k.extend_from_slice(&i.to_be_bytes());
            k
        }),
        ("groups", |i| {
            let mut k = format!("group-{:012}-padding-", i / 100).into_bytes();
            k.extend_from_slice(format!("{:04}", i % 100).as_bytes());
            k
        }),
    ]
}

fn assert_shrunk(shape: &str, peak: &IndexStats, after: &IndexStats) {
    assert_eq!(after.key_count, 0, "{shape}: keys left");
    assert_eq!(after.height, 1, "{shape}: height");
    assert_eq!(after.inner_node_count, 0, "{shape}: interior nodes left");
    assert_eq!(after.leaf_node_count, 1, "{shape}: border nodes left");
    assert!(
        after.memory_bytes * 100 < peak.memory_bytes,
        "{shape}: {} bytes left of a {} byte peak",
        after.memory_bytes,
        peak.memory_bytes
    );
}

#[test]
fn removing_every_key_shrinks_memory_and_height_back() {
    // Goal: after inserting then removing KEYS keys of each shape, in ascending, descending
    // and random order, the tree is one empty border node again. Method: compare stats() at
    // the peak with stats() after the removals (bytes < 1 % of the peak, height 1).
    shrinks_back(Masstree::new, &["ascending", "descending", "random"], KEYS);
}

#[test]
fn factor_analysis_variants_shrink_back_too() {
    // Goal: the §6.2 variants (sorted border nodes, separate suffixes, layers instead of
    // suffixes, the other node widths) also remove empty nodes and layers. Method: the test
    // above, in random order, with a tenth of the keys.
    let config = |f: fn(&mut MasstreeConfig)| {
        move || {
            let mut c = MasstreeConfig::default();
            f(&mut c);
            Masstree::with_config(c)
        }
    };
    let random = &["random"];
    shrinks_back(config(|c| c.permuter = false), random, KEYS / 10);
    shrinks_back(
        config(|c| c.suffix = SuffixStorage::Separate),
        random,
        KEYS / 10,
    );
    shrinks_back(
        config(|c| c.suffix = SuffixStorage::Layers),
        random,
        KEYS / 10,
    );
    let widths = |c| move || Masstree10x8::with_widths(c);
    shrinks_back(widths(MasstreeConfig::default()), random, KEYS / 10);
    let sorted_layers = MasstreeConfig {
        permuter: false,
        suffix: SuffixStorage::Layers,
        ..MasstreeConfig::default()
    };
    shrinks_back(widths(sorted_layers), random, KEYS / 10);
    let wide = || Masstree15x32::with_widths(MasstreeConfig::default());
    shrinks_back(wide, random, KEYS / 10);
}

/// Inserts `keys` keys of each shape into a tree from `make`, removes them in each of
/// `orders`, and checks the tree shrank back to one empty border node.
fn shrinks_back<T: Index>(make: impl Fn() -> T, orders: &[&str], keys: u64) {
    for (shape, key) in shapes() {
        for &order in orders {
            let t = make();
            let mut idx: Vec<u64> = (0..keys).collect();
            let mut x = 0x2545_f491_4f6c_dd1d;
            for i in (1..idx.len()).rev() {
                idx.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
            }
            for &i in &idx {
                assert!(t.insert(&key(i), &i.to_le_bytes()).expect("within limits"));
            }
            let peak = t.stats();
            assert_eq!(peak.key_count, keys, "{shape}");
            // stats() reports layer 0's height; the prefix shapes keep layer 0 one node high.
            assert!(
                peak.height > 1 || !matches!(shape, "u64" | "decimal"),
                "{shape}"
            );
            match order {
                "ascending" => idx.sort_unstable(),
                "descending" => idx.sort_unstable_by(|a, b| b.cmp(a)),
                _ => {}
            }
            let mut buf = Vec::new();
            for (n, &i) in idx.iter().enumerate() {
                assert!(t.remove(&key(i)), "{shape} {order}: {i} missing");
                if n % 9_973 == 0 {
                    assert!(!t.get(&key(i), &mut buf));
                    let next = idx.get(n + 1).copied();
                    if let Some(j) = next {
                        assert!(t.get(&key(j), &mut buf), "{shape} {order}: lost {j}");
                        assert_eq!(buf, j.to_le_bytes());
                    }
                }
            }
            let after = t.stats();
            assert_shrunk(&format!("{shape} {order}"), &peak, &after);
            assert!(after.counter(names::MERGES).expect("kept") > 0);
            if shape != "u64" && shape != "decimal" {
                assert!(
                    after.counter("layer_removals").expect("kept") > 0,
                    "{shape}"
                );
            }
            let mut seen = 0;
            t.scan(
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                &mut |_, _| {
                    seen += 1;
                    ControlFlow::Continue(())
                },
            );
            assert_eq!(seen, 0);
            // The emptied tree takes keys again.
            assert!(t.insert(&key(7), b"again").expect("within limits"));
            assert!(t.get(&key(7), &mut buf));
            assert_eq!(buf, b"again");
        }
    }
}

/// A value that names its key, so a reader can tell a right value from a wrong one.
fn value_of(k: &[u8]) -> Vec<u8> {
    let mut v = k.to_vec();
    v.reverse();
    v
}

/// Runs `writers` threads of churn (insert a whole group of keys, then remove it, so that
/// the border nodes holding the group empty out and are removed) against readers that get
/// and scan the stable keys between the groups.
fn race<T: Index + 'static>(
    t: Arc<T>,
    stable: Vec<Vec<u8>>,
    groups: Vec<Vec<Vec<u8>>>,
    rounds: u32,
) -> Arc<T> {
    for k in &stable {
        t.insert(k, &value_of(k)).expect("within limits");
    }
    let done = Arc::new(AtomicBool::new(false));
    let stable = Arc::new(stable);
    let mut readers = Vec::new();
    for r in 0..3 {
        let (t, done, stable) = (Arc::clone(&t), Arc::clone(&done), Arc::clone(&stable));
        let groups = groups.clone();
        readers.push(thread::spawn(move || {
            let mut buf = Vec::new();
            let mut passes = 0u64;
            while !done.load(Ordering::Relaxed) || passes == 0 {
                if r == 2 {
                    // Scans in both orders: every stable key once, in order, with its value.
                    for order in [Order::Ascending, Order::Descending] {
                        let mut got = Vec::new();
                        t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                            assert_eq!(v, value_of(k), "torn value in a scan");
                            if stable.binary_search_by(|s| s.as_slice().cmp(k)).is_ok() {
                                got.push(k.to_vec());
                            }
                            ControlFlow::Continue(())
                        });
                        if order == Order::Descending {
                            got.reverse();
                        }
                        assert_eq!(&got, &*stable, "a scan lost or repeated a stable key");
                    }
                } else {
                    for k in stable.iter() {
                        assert!(t.get(k, &mut buf), "lost stable key {k:?}");
                        assert_eq!(buf, value_of(k));
                    }
                    for g in &groups {
                        for k in g {
                            if t.get(k, &mut buf) {
                                assert_eq!(buf, value_of(k), "wrong value for churned key");
                            }
                        }
                    }
                }
                passes += 1;
            }
        }));
    }
    let writers: Vec<_> = groups
        .chunks(groups.len().div_ceil(2))
        .map(|mine| {
            let (t, mine) = (Arc::clone(&t), mine.to_vec());
            thread::spawn(move || {
                for _ in 0..rounds {
                    for g in &mine {
                        for k in g {
                            assert!(t.insert(k, &value_of(k)).expect("within limits"));
                        }
                        for k in g {
                            assert!(t.remove(k), "churned key vanished before its remove");
                        }
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    t
}

const ROUNDS: u32 = if cfg!(forest_optimized) { 2_000 } else { 40 };

#[test]
fn removed_border_nodes_racing_gets_and_scans_of_neighbours() {
    // Goal: border nodes that empty and are unlinked while readers read the keys around them
    // never make a reader miss a stable key or see a wrong value, and the nodes really are
    // removed. Method: stable 8-byte keys every 1 000; between them, groups of 40 keys that
    // writers insert (splitting off whole nodes of them) and remove again, ROUNDS times.
    let stable: Vec<Vec<u8>> = (0..=40u64)
        .map(|i| (i * 1_000).to_be_bytes().to_vec())
        .collect();
    let groups: Vec<Vec<Vec<u8>>> = (0..40u64)
        .map(|g| {
            (1..=40)
                .map(|j| (g * 1_000 + j * 7).to_be_bytes().to_vec())
                .collect()
        })
        .collect();
    let t = race(Arc::new(Masstree::new()), stable.clone(), groups, ROUNDS);
    let s = t.stats();
    assert!(
        s.counter(names::MERGES).expect("kept") > 0,
        "no node was removed"
    );
    assert_eq!(s.key_count, stable.len() as u64);
}

#[test]
fn removed_layers_racing_gets_and_scans() {
    // Goal: layers created and removed over and over, beside stable keys that share their
    // first slices, never hide a stable key. Method: stable keys with a 16-byte prefix and
    // churn groups each under its own 24-byte prefix (a layer per group), inserted and removed.
    layers_race(Arc::new(Masstree::new()), ROUNDS / 2);
}

/// The race of `removed_layers_racing_gets_and_scans` on the tree `t`.
fn layers_race<T: Index + 'static>(t: Arc<T>, rounds: u32) {
    let stable: Vec<Vec<u8>> = (0..64u32)
        .map(|i| format!("prefix-A-16bytes{i:04}/stable").into_bytes())
        .collect();
    let groups: Vec<Vec<Vec<u8>>> = (0..16u32)
        .map(|g| {
            (0..30u32)
                .map(|j| format!("prefix-A-16bytes{:04}/g-{g:02}-{j:03}", g * 4).into_bytes())
                .collect()
        })
        .collect();
    let mut sorted = stable;
    sorted.sort();
    let t = race(t, sorted.clone(), groups, rounds);
    let s = t.stats();
    assert!(
        s.counter("layer_removals").expect("kept") > 0,
        "no layer was removed"
    );
    assert_eq!(s.key_count, sorted.len() as u64);
}

#[test]
fn owned_keys_under_churn_match_a_model() {
    // Goal: removals that empty nodes and layers, racing other threads' inserts and removals
    // nearby, never lose or resurrect a key. Method: each thread owns the keys carrying its
    // id (interleaved with the others' in key order, under prefixes that share 0–3 slices so
    // layers come and go), runs random insert / remove / get (in filling and draining phases)
    // against its own BTreeSet model, and checks every answer, then the final contents.
    let ops = if cfg!(forest_optimized) {
        400_000
    } else {
        40_000
    };
    let s = owned_keys_under_churn(Arc::new(Masstree::new()), ops).stats();
    assert!(s.counter(names::MERGES).expect("kept") > 0);
}

#[test]
fn factor_analysis_variants_under_racing_removals() {
    // Goal: the variants whose writers differ most (sorted border nodes that shift, layers
    // for every long key, small nodes) keep readers and owners right while nodes and layers
    // are removed. Method: the layer race and the owned-keys model above, shorter.
    let sorted = MasstreeConfig {
        permuter: false,
        ..MasstreeConfig::default()
    };
    let layers = MasstreeConfig {
        suffix: SuffixStorage::Layers,
        ..MasstreeConfig::default()
    };
    let ops = if cfg!(forest_optimized) {
        100_000
    } else {
        20_000
    };
    layers_race(Arc::new(Masstree::with_config(sorted)), ROUNDS / 8);
    owned_keys_under_churn(Arc::new(Masstree::with_config(sorted)), ops);
    layers_race(Arc::new(Masstree::with_config(layers)), ROUNDS / 8);
    owned_keys_under_churn(Arc::new(Masstree::with_config(layers)), ops);
    let small = Masstree10x8::with_widths(MasstreeConfig {
        permuter: false,
        ..layers
    });
    owned_keys_under_churn(Arc::new(small), ops);
}

/// The owned-keys model test on `tree`, `ops` operations per thread.
/// Returns the tree; layers were removed (nodes too, for most shapes: the caller checks).
fn owned_keys_under_churn<T: Index + 'static>(tree: Arc<T>, ops: u64) -> Arc<T> {
    const THREADS: u64 = 4;
    let key = |t: u64, i: u64| -> Vec<u8> {
        let mut k = b"shared-prefix-of-24-byte".to_vec();
        k.truncate(8 * (i % 4) as usize);
        k.extend_from_slice(&(i / 4).to_be_bytes());
        k.push(t as u8);
        k
    };
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let tree = Arc::clone(&tree);
            thread::spawn(move || {
                let mut model = std::collections::BTreeSet::new();
                let mut x = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                let mut buf = Vec::new();
                for op in 0..ops {
                    let r = xorshift(&mut x);
                    let i = r % 2_000;
                    let k = key(t, i);
                    // Alternate filling and draining phases, so that nodes and layers empty.
                    let draining = (op / 20_000) % 2 == 1;
                    let choice = match (r >> 32) % 4 {
                        0 | 1 if draining => 1,
                        0 | 1 => 0,
                        c => c - 1,
                    };
                    match choice {
                        0 => assert_eq!(
                            tree.insert(&k, &value_of(&k)).expect("within limits"),
                            model.insert(i)
                        ),
                        1 => assert_eq!(tree.remove(&k), model.remove(&i), "remove {k:?}"),
                        _ => {
                            let hit = tree.get(&k, &mut buf);
                            assert_eq!(hit, model.contains(&i), "get {k:?}");
                            if hit {
                                assert_eq!(buf, value_of(&k));
                            }
                        }
                    }
                }
                model.into_iter().map(|i| key(t, i)).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut want: Vec<Vec<u8>> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker"))
        .collect();
    want.sort();
    let mut got = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            assert_eq!(v, value_of(k));
            got.push(k.to_vec());
            ControlFlow::Continue(())
        },
    );
    assert_eq!(got, want);
    let s = tree.stats();
    assert!(s.counter("layer_removals").expect("kept") > 0);
    tree
}

#[test]
fn stats_walk_while_sorted_layered_nodes_shift_and_shrink() {
    // Goal: stats() (an unvalidated walk, "not a snapshot") never follows a slot being
    // rewritten, where sorted border nodes pair a layer mark with a null link for a moment.
    // Method: writers insert and remove long keys (one layer each, slots shifting) in a small
    // key space while another thread walks the tree with stats() until they finish.
    let tree = Arc::new(Masstree::with_config(MasstreeConfig {
        permuter: false,
        suffix: SuffixStorage::Layers,
        ..MasstreeConfig::default()
    }));
    let done = Arc::new(AtomicBool::new(false));
    let ops: u64 = if cfg!(forest_optimized) {
        200_000
    } else {
        20_000
    };
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let tree = Arc::clone(&tree);
            thread::spawn(move || {
                let mut x = 0x9E37_79B9 + t;
                for _ in 0..ops {
                    let k = format!("key-{:03}-long-suffix", xorshift(&mut x) % 64);
                    if xorshift(&mut x).is_multiple_of(2) {
                        tree.upsert(k.as_bytes(), b"v").expect("upsert");
                    } else {
                        tree.remove(k.as_bytes());
                    }
                }
            })
        })
        .collect();
    let walker = {
        let (tree, done) = (Arc::clone(&tree), Arc::clone(&done));
        thread::spawn(move || {
            let mut walks = 0u64;
            while !done.load(Ordering::Acquire) {
                assert!(tree.stats().key_count <= 64, "at most the key space");
                walks += 1;
            }
            walks
        })
    };
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Release);
    assert!(walker.join().expect("walker") > 0);
}
