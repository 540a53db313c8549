//! Review of issue 13 (skeptical reviewer's tests): node references tied to the epoch guard
//! (`node::Ref<'g, N>`) and value blocks reached through `block::BlockSlot`. Those types are
//! private, so these tests attack them through the public API only: a scan's visitor that
//! removes, rewrites and re-inserts what the scan is standing on (retiring the nodes and
//! blocks its references point at, while its guard is pinned), nested scans, and concurrent
//! churn on layered keys with separate suffix blocks. Run them under AddressSanitizer to make
//! a use-after-free visible:
//! `RUSTFLAGS="-Zsanitizer=address" cargo +nightly test -p forest-masstree
//! --target x86_64-unknown-linux-gnu --test it -- review13_refs::`.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8, MasstreeConfig, SuffixStorage};

/// Keys that need layers (a shared 24-byte prefix), suffixes and plain slices.
fn key(i: u64) -> Vec<u8> {
    match i % 3 {
        0 => i.to_be_bytes().to_vec(),
        1 => {
            let mut k = b"a prefix shared by many".to_vec();
            k.extend_from_slice(&i.to_be_bytes());
            k
        }
        _ => format!("suffix-key-{i:010}-with-a-long-tail").into_bytes(),
    }
}

fn value(i: u64, round: u64) -> Vec<u8> {
    format!("value-{i}-{round}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

fn trees() -> Vec<(&'static str, Arc<dyn Index>)> {
    vec![
        ("default", Arc::new(Masstree::new())),
        (
            "separate",
            Arc::new(Masstree::with_config(MasstreeConfig {
                suffix: SuffixStorage::Separate,
                ..MasstreeConfig::default()
            })),
        ),
        (
            "sorted-layers",
            Arc::new(Masstree::with_config(MasstreeConfig {
                permuter: false,
                suffix: SuffixStorage::Layers,
                ..MasstreeConfig::default()
            })),
        ),
        (
            "10x8",
            Arc::new(Masstree10x8::with_widths(MasstreeConfig::default())),
        ),
    ]
}

// Goal: a scan's references stay valid while its own visitor removes the node it stands on,
// the nodes ahead of it, whole layers, and rewrites values (replacing the blocks it just
// read). Method: per tree shape, both orders; the visitor removes the visited key and the
// next ones, rewrites others, and re-inserts some behind the cursor; a nested scan runs in
// the visitor. Every value the scan hands out must be one that was written for its key.
#[test]
fn a_visitor_that_tears_down_what_the_scan_stands_on() {
    const N: u64 = 3_000;
    for (name, tree) in trees() {
        for order in [Order::Ascending, Order::Descending] {
            for i in 0..N {
                tree.upsert(&key(i), &value(i, 0)).expect("upsert");
            }
            let index: std::collections::HashMap<Vec<u8>, u64> =
                (0..N).map(|i| (key(i), i)).collect();
            let mut seen = 0u64;
            tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                let i = *index
                    .get(k)
                    .unwrap_or_else(|| panic!("{name}: unknown key {k:?}"));
                assert!(
                    (0..3).any(|round| v == value(i, round).as_slice()),
                    "{name}: key {i} has value {:?}",
                    String::from_utf8_lossy(v)
                );
                seen += 1;
                // A scan hands out a node's records as copied, so a key this visitor already
                // removed ahead of the cursor may still come (weakly consistent scans).
                tree.remove(k);
                for j in i + 1..(i + 40).min(N) {
                    if j % 2 == 0 {
                        tree.remove(&key(j));
                    } else {
                        tree.upsert(&key(j), &value(j, 1)).expect("rewrite");
                    }
                }
                if i.is_multiple_of(7) && i > 0 {
                    tree.upsert(&key(i - 1), &value(i - 1, 2))
                        .expect("reinsert");
                }
                if i.is_multiple_of(97) {
                    let mut inner = 0;
                    tree.scan(
                        Bound::Included(k),
                        Bound::Unbounded,
                        Order::Ascending,
                        &mut |_, _| {
                            inner += 1;
                            if inner < 20 {
                                ControlFlow::Continue(())
                            } else {
                                ControlFlow::Break(())
                            }
                        },
                    );
                }
                ControlFlow::Continue(())
            });
            assert!(seen > 0, "{name}");
            // Empty it for the next order.
            let mut left = Vec::new();
            tree.scan(
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                &mut |k, _| {
                    left.push(k.to_vec());
                    ControlFlow::Continue(())
                },
            );
            for k in left {
                assert!(tree.remove(&k));
            }
            assert_eq!(tree.stats().key_count, 0, "{name}");
        }
    }
}

// Goal: gets and scans on many threads never see a value of another key or a torn one while
// writers replace blocks, split and remove nodes and create and remove layers (every block
// and node they read was retired under them at some point). Method: 2 writers churn a small
// key space; 2 readers check every value against its key.
#[test]
fn readers_never_see_freed_blocks_under_churn() {
    const N: u64 = 600;
    for (name, tree) in trees() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for w in 0..2u64 {
            let (tree, stop) = (Arc::clone(&tree), Arc::clone(&stop));
            handles.push(thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    for i in (w..N).step_by(2) {
                        if (i + round).is_multiple_of(3) {
                            tree.remove(&key(i));
                        } else {
                            tree.upsert(&key(i), &value(i, round % 3)).expect("upsert");
                        }
                    }
                }
            }));
        }
        for r in 0..2u64 {
            let (tree, stop) = (Arc::clone(&tree), Arc::clone(&stop));
            handles.push(thread::spawn(move || {
                let index: std::collections::HashMap<Vec<u8>, u64> =
                    (0..N).map(|i| (key(i), i)).collect();
                let check = |k: &[u8], v: &[u8]| {
                    let i = index[k];
                    assert!(
                        (0..3).any(|round| v == value(i, round).as_slice()),
                        "key {i}: {:?}",
                        String::from_utf8_lossy(v)
                    );
                };
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..N {
                        if tree.get(&key(i), &mut out) {
                            check(&key(i), &out);
                        }
                    }
                    let order = if r == 0 {
                        Order::Ascending
                    } else {
                        Order::Descending
                    };
                    tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                        check(k, v);
                        ControlFlow::Continue(())
                    });
                }
            }));
        }
        thread::sleep(std::time::Duration::from_millis(
            if cfg!(debug_assertions) { 1_500 } else { 500 },
        ));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect(name);
        }
    }
}

// Goal: a tree dropped while other threads are pinned (and the epoch holds its retired nodes
// and blocks) frees each node and block once. Method: build and churn trees, drop them while a
// reader thread keeps a scan of another tree pinned; run under ASan/LSan to see double frees
// or leaks.
#[test]
fn dropping_trees_while_the_epoch_is_held() {
    let other: Arc<dyn Index> = Arc::new(Masstree::new());
    for i in 0..2_000 {
        other.upsert(&key(i), b"v").expect("upsert");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let pinned = {
        let (other, stop) = (Arc::clone(&other), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                other.scan(
                    Bound::Unbounded,
                    Bound::Unbounded,
                    Order::Ascending,
                    &mut |_, _| {
                        std::thread::yield_now();
                        if stop.load(Ordering::Relaxed) {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    },
                );
            }
        })
    };
    for round in 0..20 {
        for (_, tree) in trees() {
            for i in 0..500 {
                tree.upsert(&key(i), &value(i, round)).expect("upsert");
            }
            for i in (0..500).step_by(3) {
                tree.remove(&key(i));
            }
            for i in (0..500).step_by(5) {
                tree.upsert(&key(i), &value(i, round + 1)).expect("upsert");
            }
            drop(tree);
        }
    }
    stop.store(true, Ordering::Relaxed);
    pinned.join().expect("reader");
}
