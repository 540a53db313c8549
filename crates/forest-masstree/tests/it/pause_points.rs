//! Readers caught mid-change: a writer is stopped at a pause point between the steps of a
//! border split (§4.6.4), a layer creation (§4.6.3), a node removal (§4.6.5) and an in-place
//! shift of a sorted border node (no permuter, §6.2), and gets and scans started meanwhile
//! must return the right values, never "absent" for a present key. A reader is stopped too,
//! between matching its key's slot and loading the slot's value, while writers churn the node.
//!
//! Run with `cargo test -p forest-masstree --features pause-points --test it -- pause_points::`. The
//! hook is process-wide, so the tests take turns (forest-core's kit: `conformance::pause`,
//! whose gates stop a named thread at a named pause point; the points are listed in the crate
//! doc).
#![cfg(feature = "pause-points")]

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use forest_core::conformance::pause::{
    arm, arm_gates, disarm, spawn_named, spawn_pauser, take_turn,
};
use forest_core::stats::names;
use forest_core::{Index, Order};
use forest_masstree::{Masstree, MasstreeConfig};

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// Runs `write` in the pauser thread, stopped at `point`; meanwhile starts readers that get
/// every key of `present` (value = key) and scan both ways, checks they are still waiting or
/// done right, releases the writer and checks every reader's result.
fn caught_at(
    point: &'static str,
    t: Arc<Masstree>,
    present: impl FnOnce() -> Vec<Vec<u8>>,
    write: impl FnOnce(&Masstree) + Send + 'static,
) {
    let _turn = take_turn();
    let gate = arm(point);
    let writer = {
        let t = Arc::clone(&t);
        spawn_pauser(move || write(&t))
    };
    gate.wait_paused();
    let present = present();
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (t, present) = (Arc::clone(&t), present.clone());
            thread::spawn(move || {
                if r == 0 {
                    let mut buf = Vec::new();
                    for k in &present {
                        assert!(t.get(k, &mut buf), "present key {k:?} read as absent");
                        assert_eq!(&buf, k);
                    }
                    return;
                }
                let order = if r == 1 {
                    Order::Ascending
                } else {
                    Order::Descending
                };
                let mut got = Vec::new();
                t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                    assert_eq!(k, v);
                    got.push(k.to_vec());
                    ControlFlow::Continue(())
                });
                if order == Order::Descending {
                    got.reverse();
                }
                for k in &present {
                    assert!(
                        got.binary_search(k).is_ok(),
                        "scan missed present key {k:?}"
                    );
                }
            })
        })
        .collect();
    // Give the readers time to meet the half-done change.
    thread::sleep(Duration::from_millis(50));
    gate.release();
    writer.join().expect("writer");
    for r in readers {
        r.join().expect("reader");
    }
    disarm();
    assert!(gate.reached_count() >= 1, "{point} not reached");
}

/// A tree of `count` 8-byte keys `i * 10` (value = key).
fn tree_of(count: u64) -> (Arc<Masstree>, Vec<Vec<u8>>) {
    let t = Arc::new(Masstree::new());
    let keys: Vec<Vec<u8>> = (0..count).map(|i| key(i * 10)).collect();
    for k in &keys {
        assert!(t.insert(k, k).expect("within limits"));
    }
    (t, keys)
}

#[test]
fn split_paused_after_sibling_linked() {
    // Goal: keys already moved to a new sibling that the parent does not list yet are found
    // (§4.6.4 steps 1–2). Method: 15 keys fill the root border node; the pauser inserts a
    // 16th in the middle and stops after the copy; readers get every key and scan.
    let (t, keys) = tree_of(15);
    caught_at(
        "split:sibling-linked",
        t,
        || keys,
        |t| {
            assert!(t.insert(&key(75), &key(75)).expect("within limits"));
        },
    );
}

#[test]
fn split_paused_after_parent_updated() {
    // Goal: as above, stopped once the parent lists the sibling and before any unlock (steps
    // 3–4), in a two-level tree so that the parent is an existing interior node.
    let (t, keys) = tree_of(200);
    caught_at(
        "split:parent-updated",
        t,
        || keys,
        |t| {
            for i in 0..20 {
                let k = key(1_000 + i * 10 + 5);
                t.insert(&k, &k).expect("within limits");
            }
        },
    );
}

#[test]
fn layer_creation_paused_at_unstable_slot() {
    // Goal: a get concurrent with §4.6.3 sees the old key or the new layer, never neither.
    // Method: a long key sits in layer 0; the pauser inserts another with the same first slice
    // and stops after the slot turned unstable; readers look for the first key.
    let t = Arc::new(Masstree::new());
    let present: Vec<Vec<u8>> = vec![b"abcdefgh-first".to_vec(), b"zz".to_vec()];
    for k in &present {
        t.insert(k, k).expect("within limits");
    }
    let t2 = Arc::clone(&t);
    caught_at(
        "layer:unstable",
        t,
        || present,
        |t| {
            let k = b"abcdefgh-second";
            assert!(t.insert(k, k).expect("within limits"));
        },
    );
    let mut buf = Vec::new();
    assert!(t2.get(b"abcdefgh-second", &mut buf));
    assert!(t2.stats().counter("layers").expect("kept") >= 1);
}

#[test]
fn removal_paused_with_leaf_marked_deleted() {
    // Goal: while an emptied border node is marked deleted but still linked (§4.6.5), readers
    // of its neighbours and scans find every remaining key. Method: 60 keys (several border
    // nodes); the pauser removes keys from the highest down and stops at the first node
    // removal; the readers check every key below the one being removed.
    let (t, keys) = tree_of(60);
    let next_gone: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(keys.len()));
    // Set once the pauser is caught: it finishes that remove and stops, so the keys below
    // stay present while the readers run.
    let stop = Arc::new(AtomicBool::new(false));
    let t2 = Arc::clone(&t);
    let (all, seen, stop2) = (keys.clone(), Arc::clone(&next_gone), Arc::clone(&stop));
    let gone_at = Arc::clone(&next_gone);
    caught_at(
        "remove:leaf-marked",
        t,
        move || {
            stop2.store(true, Ordering::SeqCst);
            all[..seen.load(Ordering::SeqCst)].to_vec()
        },
        move |t| {
            for (i, k) in keys.iter().enumerate().rev() {
                next_gone.store(i, Ordering::SeqCst);
                assert!(t.remove(k));
                if stop.load(Ordering::SeqCst) {
                    break;
                }
            }
        },
    );
    let s = t2.stats();
    assert_eq!(s.key_count, gone_at.load(Ordering::SeqCst) as u64);
    assert!(s.counter(forest_core::stats::names::MERGES).expect("kept") >= 1);
}

#[test]
fn sorted_insert_paused_mid_shift() {
    // Goal: without the permuter, a reader that meets a border node whose slots are half
    // shifted (one slot without a block, keys at the wrong positions) waits or retries and
    // finds every present key with its own value. Method: ten keys in one sorted node; the
    // pauser inserts a key at position 1 and stops after the shift; gets and scans run.
    let t = Arc::new(Masstree::with_config(MasstreeConfig {
        permuter: false,
        ..MasstreeConfig::default()
    }));
    let keys: Vec<Vec<u8>> = (0..10u64).map(|i| key(i * 10)).collect();
    for k in &keys {
        assert!(t.insert(k, k).expect("within limits"));
    }
    caught_at(
        "border:shifted",
        Arc::clone(&t),
        || keys,
        |t| {
            assert!(t.insert(&key(5), &key(5)).expect("within limits"));
        },
    );
    let mut buf = Vec::new();
    assert!(t.get(&key(5), &mut buf));
    assert_eq!(buf, key(5));
    assert_eq!(t.stats().key_count, 11);
}

#[test]
fn get_paused_at_matched_slot_while_the_slot_is_reused_65536_times() {
    // Goal: a get stalled between matching its key's slot and loading the slot's value never
    // returns the value another key put in that slot meanwhile, however many inserts passed:
    // each reuse of a removed slot bumps `vinsert` (§4.6.5), and a counter that wraps back to
    // the reader's snapshot would pass its validation (§4.4, footnote 3). Method: 14 keys and
    // A fill the root border node, so a freed slot is its only free one and every insert
    // reuses it. The pauser gets A and stops at the matched slot; meanwhile A is removed and
    // B inserted, then B removed and reinserted, 2^16 inserts in all (a 16-bit count's
    // period), leaving B in A's slot.
    const INSERTS: u32 = 1 << 16;
    let _turn = take_turn();
    let t = Arc::new(Masstree::new());
    for i in 0..14 {
        assert!(t.insert(&key(i * 10), b"filler").expect("within limits"));
    }
    let (a, b) = (key(1_000), key(2_000));
    assert!(t.insert(&a, b"value of A").expect("within limits"));
    let gate = arm("get:slot-matched");
    let reader = {
        let (t, a) = (Arc::clone(&t), a.clone());
        spawn_pauser(move || {
            let mut buf = Vec::new();
            t.get(&a, &mut buf).then_some(buf)
        })
    };
    gate.wait_paused();
    assert!(t.remove(&a));
    assert!(t.insert(&b, b"value of B").expect("within limits"));
    for _ in 1..INSERTS {
        assert!(t.remove(&b));
        assert!(t.insert(&b, b"value of B").expect("within limits"));
    }
    gate.release();
    let got = reader.join().expect("reader");
    disarm();
    assert!(gate.reached_count() >= 1, "get:slot-matched not reached");
    assert!(
        matches!(got.as_deref(), None | Some(b"value of A")),
        "get(A) returned {:?}",
        got.map(|v| String::from_utf8_lossy(&v).into_owned())
    );
    assert_eq!(t.stats().key_count, 15);
}

#[test]
fn descending_scan_retrying_a_failed_copy_after_a_split() {
    // Goal: a scan whose copy of a border node failed (a slot mid-change) and that retries
    // after the node split finds the keys that moved to the new sibling. Method: 13 keys and a
    // long key A fill 14 slots of the root border node. A descending scan stops holding the
    // node's version; a writer inserting a key with A's slice stops with A's slot unstable
    // (a new layer, §4.6.3); the scan's copy fails there and stops; the writer finishes, two
    // more keys split the node, and the scan goes on. Every key present throughout must come
    // back, in order.
    let _turn = take_turn();
    let t = Arc::new(Masstree::new());
    let mut long_a = key(55);
    long_a.extend_from_slice(b"-first");
    let mut present: Vec<Vec<u8>> = (0..13).map(|i| key(i * 10)).collect();
    present.push(long_a);
    for k in &present {
        assert!(t.insert(k, k).expect("within limits"));
    }
    let [before_copy, copy_failed, unstable] = arm_gates([
        ("scan:before-copy", "scanner"),
        ("scan:copy-failed", "scanner"),
        ("layer:unstable", "writer"),
    ]);
    let scanner = {
        let t = Arc::clone(&t);
        spawn_named("scanner", move || {
            let mut got = Vec::new();
            let order = Order::Descending;
            t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
                got.push(k.to_vec());
                ControlFlow::Continue(())
            });
            got
        })
    };
    before_copy.wait_paused();
    let writer = {
        let t = Arc::clone(&t);
        spawn_named("writer", move || {
            let mut long_b = key(55);
            long_b.extend_from_slice(b"-second");
            assert!(t.insert(&long_b, &long_b).expect("within limits"));
        })
    };
    unstable.wait_paused();
    before_copy.release();
    copy_failed.wait_paused();
    unstable.release();
    writer.join().expect("writer");
    // Inserted in the middle, so half the node's keys move to the new sibling.
    for k in [key(65), key(75)] {
        assert!(t.insert(&k, &k).expect("within limits"));
    }
    assert_eq!(
        t.stats().counter(names::SPLITS),
        Some(1),
        "the node did not split"
    );
    copy_failed.release();
    let got = scanner.join().expect("scanner");
    disarm();
    assert!(
        got.windows(2).all(|w| w[0] > w[1]),
        "not strictly descending"
    );
    let missing: Vec<_> = present.iter().filter(|k| !got.contains(k)).collect();
    assert!(missing.is_empty(), "the scan missed {missing:?}");
}

/// A scanner stopped at `point` (holding the neighbour it is about to move to) while `write`
/// changes that neighbour; returns what the scan handed out, checked strictly ordered.
fn scan_moving_to_a_changed_node(
    point: &'static str,
    order: Order,
    t: &Arc<Masstree>,
    write: impl FnOnce(&Masstree),
) -> Vec<Vec<u8>> {
    let _turn = take_turn();
    let gate = arm(point);
    let scanner = {
        let t = Arc::clone(t);
        spawn_pauser(move || {
            let mut got = Vec::new();
            t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
                got.push(k.to_vec());
                ControlFlow::Continue(())
            });
            got
        })
    };
    gate.wait_paused();
    write(t);
    gate.release();
    let got = scanner.join().expect("scanner");
    disarm();
    let ordered = match order {
        Order::Ascending => got.windows(2).all(|w| w[0] < w[1]),
        Order::Descending => got.windows(2).all(|w| w[0] > w[1]),
    };
    assert!(ordered, "{order:?}: not strictly ordered");
    got
}

/// A tree of three full border nodes: keys 0, 10, .., 440 inserted in order (sequential
/// inserts leave each node full, crate::split), so node 1 holds positions 0..15, node 2
/// 15..30, node 3 30..45; values are the keys.
fn three_nodes() -> (Arc<Masstree>, Vec<Vec<u8>>) {
    let t = Arc::new(Masstree::new());
    let keys: Vec<_> = (0..45).map(|i| key(i * 10)).collect();
    for k in &keys {
        assert!(t.insert(k, k).expect("within limits"));
    }
    assert_eq!(t.stats().leaf_node_count, 3);
    (t, keys)
}

#[test]
fn scans_moving_to_a_node_that_split_meanwhile() {
    // Goal: a scan that holds the link to the node it moves to next (ascending: `next`;
    // descending: `prev`) while that node splits still hands out every key present
    // throughout, in order: ascending walks the split node and its new sibling through
    // `next`; descending must walk right from the stale `prev` to the new sibling, which
    // holds the keys just below the node it came from. Method: three full nodes; the scanner
    // stops after its first node (ascending after node 1, descending after node 3), holding
    // node 2; 20 keys inserted inside node 2's range split it (the splits counter says so);
    // then the scan goes on.
    for (point, order) in [
        ("scan:next-node", Order::Ascending),
        ("scan:prev-node", Order::Descending),
    ] {
        let (t, keys) = three_nodes();
        let got = scan_moving_to_a_changed_node(point, order, &t, |t| {
            for i in (201..).filter(|i| i % 10 != 0).take(20) {
                let k = key(i);
                assert!(t.insert(&k, &k).expect("within limits"));
            }
        });
        assert!(
            t.stats().counter(names::SPLITS).unwrap_or(0) >= 3,
            "{order:?}: node 2 did not split"
        );
        let missing: Vec<_> = keys.iter().filter(|k| !got.contains(k)).collect();
        assert!(missing.is_empty(), "{order:?}: the scan missed {missing:?}");
    }
}

#[test]
fn scans_moving_to_a_node_removed_meanwhile() {
    // Goal: a scan that holds the link to the node it moves to next while that node is
    // emptied and removed (§4.6.5: marked deleted, unlinked, retired while the scan is
    // pinned) finds it deleted, goes on from past its last key by a new descent, and hands
    // out exactly the keys of the other nodes: none twice, none of the removed node (removed
    // before the scan read them). Method: three full nodes; the scanner stops holding node 2
    // (as above); node 2's 15 keys are removed (the node-removal counter says it went); then
    // the scan goes on.
    for (point, order) in [
        ("scan:next-node", Order::Ascending),
        ("scan:prev-node", Order::Descending),
    ] {
        let (t, keys) = three_nodes();
        let got = scan_moving_to_a_changed_node(point, order, &t, |t| {
            for k in &keys[15..30] {
                assert!(t.remove(k));
            }
        });
        assert!(
            t.stats().counter(names::MERGES).unwrap_or(0) >= 1,
            "{order:?}: node 2 was not removed"
        );
        let mut want: Vec<_> = keys[..15].iter().chain(&keys[30..]).cloned().collect();
        if order == Order::Descending {
            want.reverse();
        }
        assert_eq!(got, want, "{order:?}");
    }
}
