//! Review of h-ycsba (session 19, rev-ycsba): puts follow layer links without the upper
//! layers' locks. Schedules the builder's `put_layers` tests do not cover: the removed layer's
//! slot re-used (by a new layer for the same slice, by a plain key of that slice) while a put
//! holds the old link; two layers removed under a put paused above both; a layer that split
//! and shrank back to its first node under a paused put; and stresses that churn one slice's
//! layer (made, emptied, removed, made again) under puts that must never be lost, on every
//! config variant.
//!
//! `cargo test -p forest-masstree --features pause-points --test it -- rev_ycsba::`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use forest_core::Index;
use forest_masstree::{Masstree, MasstreeConfig, NodeSearch, SuffixStorage};

#[cfg(feature = "pause-points")]
mod paused {
    use forest_core::Index;

    use crate::put_layers::paused::{has, put_paused, slice_keys, tree_with};

    #[test]
    fn put_paused_on_removed_layer_whose_slot_holds_a_new_layer() {
        // Goal: the old link names a removed layer while the slice's slot now links a new
        // layer; the put must land in the new one (once), not in the dead one.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2", b"zz"]);
        let reached = put_paused(&t, b"abcdefgh-3", |t| {
            assert!(t.remove(b"abcdefgh-1"));
            assert!(t.remove(b"abcdefgh-2"));
            assert!(t.stats().counter("layer_removals").expect("kept") >= 1);
            assert!(t.insert(b"abcdefgh-4", b"abcdefgh-4").expect("ok"));
            assert!(t.insert(b"abcdefgh-5", b"abcdefgh-5").expect("ok"));
        });
        assert_eq!(reached, 2, "restarted once and followed the new link");
        has(&t, b"abcdefgh-3", b"new");
        has(&t, b"abcdefgh-4", b"abcdefgh-4");
        has(&t, b"abcdefgh-5", b"abcdefgh-5");
        assert_eq!(t.stats().key_count, 4);
        let mut n = 0;
        t.scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            forest_core::Order::Ascending,
            &mut |_k, _v| {
                n += 1;
                std::ops::ControlFlow::Continue(())
            },
        );
        assert_eq!(n, 4, "a scan sees every key once");
    }

    #[test]
    fn put_paused_on_removed_layer_whose_slot_holds_a_plain_key() {
        // Goal: the slice's slot now holds one plain long key (no layer): the restarted put
        // meets it as a conflict and makes a new layer holding both.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2"]);
        let reached = put_paused(&t, b"abcdefgh-3", |t| {
            assert!(t.remove(b"abcdefgh-1"));
            assert!(t.remove(b"abcdefgh-2"));
            assert!(t.insert(b"abcdefgh-4", b"abcdefgh-4").expect("ok"));
            assert!(t.insert(b"abcdefgh", b"eight").expect("ok"));
        });
        assert_eq!(reached, 1);
        has(&t, b"abcdefgh-3", b"new");
        has(&t, b"abcdefgh-4", b"abcdefgh-4");
        has(&t, b"abcdefgh", b"eight");
        assert_eq!(t.stats().key_count, 3);
    }

    #[test]
    fn put_paused_above_two_layers_removed_and_remade() {
        // Goal: a key two layers down (17 bytes); the put stops after reading layer 1's link;
        // both layers are removed and re-made with other keys; the put lands once.
        let t = tree_with(&[b"abcdefghijklmnop-1", b"abcdefghijklmnop-2"]);
        let reached = put_paused(&t, b"abcdefghijklmnop-3", |t| {
            assert!(t.remove(b"abcdefghijklmnop-1"));
            assert!(t.remove(b"abcdefghijklmnop-2"));
            assert!(t.stats().counter("layer_removals").expect("kept") >= 2);
            assert_eq!(t.stats().key_count, 0);
            for k in [
                &b"abcdefghijklmnop-4"[..],
                b"abcdefghijklmnop-5",
                b"abcdefghZ-6",
            ] {
                assert!(t.insert(k, k).expect("ok"));
            }
        });
        assert!(
            reached >= 2,
            "restarted and followed the new links ({reached})"
        );
        has(&t, b"abcdefghijklmnop-3", b"new");
        for k in [
            &b"abcdefghijklmnop-4"[..],
            b"abcdefghijklmnop-5",
            b"abcdefghZ-6",
        ] {
            has(&t, k, k);
        }
        assert_eq!(t.stats().key_count, 4);
    }

    #[test]
    fn put_paused_on_layer_that_split_and_shrank_back() {
        // Goal: the layer grows (root splits, interior levels) and shrinks back to its first
        // node (nodes removed, root collapsed) while the put holds its link; the layer lives
        // throughout (one key stays); the put lands in it.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2"]);
        let reached = put_paused(&t, b"abcdefgh-3", |t| {
            let more = slice_keys(400, 5);
            for k in &more {
                assert!(t.insert(k, k).expect("ok"));
            }
            assert!(t.remove(b"abcdefgh-2"));
            for k in &more {
                assert!(t.remove(k));
            }
            let s = t.stats();
            assert!(s.counter("splits").expect("kept") >= 2);
            assert!(s.counter("collapses").expect("kept") >= 1);
            assert_eq!(s.counter("layer_removals").expect("kept"), 0);
        });
        assert_eq!(reached, 1);
        has(&t, b"abcdefgh-3", b"new");
        has(&t, b"abcdefgh-1", b"abcdefgh-1");
        assert_eq!(t.stats().key_count, 2);
    }

    #[test]
    fn put_paused_on_layer_that_split_then_was_removed() {
        // Goal: the layer splits, then empties entirely (every node but the first removed,
        // root collapsed, layer removed); the put holding the first node's link starts over.
        let t = tree_with(&[b"abcdefgh-1", b"abcdefgh-2"]);
        let reached = put_paused(&t, b"abcdefgh-3", |t| {
            let more = slice_keys(200, 5);
            for k in &more {
                assert!(t.insert(k, k).expect("ok"));
            }
            for k in &more {
                assert!(t.remove(k));
            }
            assert!(t.remove(b"abcdefgh-1"));
            assert!(t.remove(b"abcdefgh-2"));
            assert!(t.stats().counter("layer_removals").expect("kept") >= 1);
        });
        assert_eq!(reached, 1);
        has(&t, b"abcdefgh-3", b"new");
        assert_eq!(t.stats().key_count, 1);
    }
}

fn variants() -> Vec<(&'static str, MasstreeConfig)> {
    let d = MasstreeConfig::default();
    vec![
        ("default", d),
        (
            "search=binary",
            MasstreeConfig {
                search: NodeSearch::Binary,
                ..d
            },
        ),
        (
            "permuter=off",
            MasstreeConfig {
                permuter: false,
                ..d
            },
        ),
        (
            "suffix=layers",
            MasstreeConfig {
                suffix: SuffixStorage::Layers,
                ..d
            },
        ),
        (
            "suffix=separate",
            MasstreeConfig {
                suffix: SuffixStorage::Separate,
                ..d
            },
        ),
    ]
}

/// One slice's layer is made and removed over and over: a churner inserts and removes its
/// partner key(s) of the slice; owners each upsert their own key of that slice (also at depth
/// 2), read it back, remove it and check it is gone; a reader checks the 8-byte key of the same
/// slice (a plain slot next to the layer's) stays. No put may be lost or land twice.
fn churn_one_slice(t: Arc<Masstree>, rounds: u32) {
    const OWNERS: usize = 2;
    assert!(t.insert(b"abcdefgh", b"eight").expect("ok"));
    let stop = Arc::new(AtomicBool::new(false));
    let churner = {
        let t = Arc::clone(&t);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = if i.is_multiple_of(2) {
                    &b"abcdefgh-churn"[..]
                } else {
                    &b"abcdefghijklmnop-churn"[..]
                };
                assert!(t.insert(k, b"c").expect("ok"), "churn key present");
                assert!(t.remove(k), "churn key vanished");
                i += 1;
            }
        })
    };
    let reader = {
        let t = Arc::clone(&t);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut buf = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                assert!(t.get(b"abcdefgh", &mut buf), "the 8-byte key vanished");
                assert_eq!(buf, b"eight");
            }
        })
    };
    let owners: Vec<_> = (0..OWNERS)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let keys = [
                    format!("abcdefgh-own{w}").into_bytes(),
                    format!("abcdefghijklmnop-own{w}").into_bytes(),
                ];
                let mut buf = Vec::new();
                for r in 0..rounds {
                    let v = format!("w{w}r{r}").into_bytes();
                    for k in &keys {
                        t.upsert(k, &v).expect("ok");
                    }
                    for k in &keys {
                        assert!(t.get(k, &mut buf), "lost {k:?} in round {r}");
                        assert_eq!(buf, v, "stale {k:?} in round {r}");
                        // Update mode must find it too (a put of the present key).
                        assert!(t.update(k, &v).expect("ok"), "update missed {k:?} r{r}");
                    }
                    for k in &keys {
                        assert!(t.remove(k), "{k:?} vanished before its remove (r{r})");
                        assert!(!t.get(k, &mut buf), "{k:?} back after remove (r{r})");
                    }
                }
            })
        })
        .collect();
    for o in owners {
        o.join().expect("owner");
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().expect("churner");
    reader.join().expect("reader");
    let s = t.stats();
    eprintln!(
        "  layers {:?} layer_removals {:?} restarts {:?} retries {:?} latch_waits {:?}",
        s.counter("layers"),
        s.counter("layer_removals"),
        s.counter("restarts"),
        s.counter("retries"),
        s.counter("latch_waits")
    );
    assert_eq!(s.key_count, 1, "only the 8-byte key is left");
    assert!(s.counter("layer_removals").expect("kept") >= 1);
    let mut n = 0;
    t.scan(
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        forest_core::Order::Ascending,
        &mut |_k, _v| {
            n += 1;
            std::ops::ControlFlow::Continue(())
        },
    );
    assert_eq!(n, 1);
}

#[test]
fn puts_race_one_slices_layer_made_and_removed_every_variant() {
    for (name, config) in variants() {
        eprintln!("variant {name}");
        let rounds =
            std::env::var("REV_YCSBA_ROUNDS").map_or(1000, |r| r.parse().expect("a count"));
        churn_one_slice(Arc::new(Masstree::with_config(config)), rounds);
    }
}
