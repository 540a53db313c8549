//! Scans that come back to their leaf between steps (scan.rs, node.rs invariant 6): a step
//! cut short by its budget (8 records at first) latches the same leaf again without a descent
//! when nothing changed a leaf's range or freed a node, and descends when something did. The
//! visitor writes to the tree between the steps (it may call back into the index), so each
//! case is deterministic: a write that keeps the leaf's range (the revisit is taken, and finds
//! its place again although the slots moved), a split of the leaf, a merge that frees it.
//! Every case checks, in both orders, that the keys present throughout come exactly once,
//! strictly ordered, and reads the scan counters.

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order};
use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch};

/// Order 32: a leaf holds up to 31 records, at least 16 unless it is the root.
fn tree() -> LockBTree {
    LockBTree::with_config(LockBTreeConfig {
        order: 32,
        search: NodeSearch::Binary,
    })
    .expect("a valid order")
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn counter(tree: &LockBTree, name: &str) -> u64 {
    tree.stats()
        .counter(name)
        .expect("lockbtree keeps the counter")
}

/// Scans all of `tree` in `order`, running `between` once after the 8th record (the first
/// step's budget, so between the first and second steps); returns the keys handed out and
/// the scan's revisits and re-descents.
fn scan_with_write(
    tree: &LockBTree,
    order: Order,
    between: impl FnOnce(&LockBTree),
) -> (Vec<u64>, u64, u64) {
    let revisits = counter(tree, "scan_revisits");
    let redescents = counter(tree, "scan_redescents");
    let mut between = Some(between);
    let mut seen = Vec::new();
    tree.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
        let n = u64::from_be_bytes(k.try_into().expect("8-byte keys"));
        assert_eq!(v, k, "value of {n}");
        seen.push(n);
        if seen.len() == 8 {
            between.take().expect("runs once")(tree);
        }
        ControlFlow::Continue(())
    });
    (
        seen,
        counter(tree, "scan_revisits") - revisits,
        counter(tree, "scan_redescents") - redescents,
    )
}

/// Asserts `seen` is strictly ordered in `order` and holds each of `stable` exactly once.
fn assert_scan(seen: &[u64], stable: &BTreeSet<u64>, order: Order) {
    for pair in seen.windows(2) {
        let ordered = match order {
            Order::Ascending => pair[0] < pair[1],
            Order::Descending => pair[0] > pair[1],
        };
        assert!(ordered, "{order:?} scan out of order: {pair:?} in {seen:?}");
    }
    let seen_set: BTreeSet<u64> = seen.iter().copied().collect();
    let missing: Vec<_> = stable.difference(&seen_set).collect();
    assert!(missing.is_empty(), "{order:?} scan lost {missing:?}");
}

fn filled(keys: impl IntoIterator<Item = u64>) -> (LockBTree, BTreeSet<u64>) {
    let t = tree();
    let keys: BTreeSet<u64> = keys.into_iter().collect();
    for &n in &keys {
        assert!(t.insert(&key(n), &key(n)).expect("8-byte records fit"));
    }
    t.check_invariants().expect("a fresh tree is sound");
    (t, keys)
}

const BOTH: [Order; 2] = [Order::Ascending, Order::Descending];

#[test]
fn a_quiet_scan_revisits_its_leaf_instead_of_descending() {
    // Goal: a step cut short comes back to its leaf without a descent. Method: 20 keys in a
    // root leaf; a scan of all of them takes 8, then the other 12 from the same leaf.
    for order in BOTH {
        let (t, keys) = filled(0..20);
        let (seen, revisits, redescents) = scan_with_write(&t, order, |_| {});
        assert_scan(&seen, &keys, order);
        assert_eq!(seen.len(), 20);
        assert_eq!((revisits, redescents), (1, 0), "{order:?}");
    }
}

#[test]
fn a_revisit_finds_its_place_after_writes_moved_the_slots() {
    // Goal: writes that keep the leaf's range (no split, no merge) leave the revisit on, and
    // the scan resumes right after its last key although the slots shifted. Method: between
    // the steps, remove a key already handed out and insert one not yet reached, both in the
    // same root leaf; the inserted key must come (it lies ahead), the removed one once.
    for order in BOTH {
        let (t, keys) = filled((0..40).step_by(2));
        let (behind, ahead) = match order {
            Order::Ascending => (0, 31),
            Order::Descending => (38, 7),
        };
        let (seen, revisits, redescents) = scan_with_write(&t, order, |t| {
            assert!(t.remove(&key(behind)));
            assert!(t.insert(&key(ahead), &key(ahead)).unwrap());
        });
        assert_scan(&seen, &keys, order);
        assert!(
            seen.contains(&ahead),
            "{order:?}: {ahead} inserted ahead, not seen"
        );
        assert_eq!(seen.len(), 21, "{order:?}: {seen:?}");
        assert_eq!((revisits, redescents), (1, 0), "{order:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_split_between_steps_sends_the_scan_down_from_the_root() {
    // Goal: a leaf whose range shrank is not revisited. Method: 20 even keys in a root leaf;
    // between the steps, 12 odd keys ahead of the cursor split it (32 > 31); the next step
    // must descend, and every even key still comes exactly once, in order.
    for order in BOTH {
        let (t, keys) = filled((0..40).step_by(2));
        let ahead: Vec<u64> = match order {
            Order::Ascending => (15..39).step_by(2).collect(),
            Order::Descending => (1..25).step_by(2).collect(),
        };
        let (seen, revisits, redescents) = scan_with_write(&t, order, |t| {
            for &n in &ahead {
                assert!(t.insert(&key(n), &key(n)).unwrap());
            }
            assert_eq!(t.stats().height, 2, "the leaf split");
        });
        assert_scan(&seen, &keys, order);
        assert_eq!(revisits, 0, "{order:?}: revisited a split leaf");
        assert!(redescents >= 1, "{order:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_merge_that_frees_the_leaf_between_steps_sends_the_scan_down() {
    // Goal: a scan never comes back to a freed leaf. Method: 32 keys make two leaves of 16
    // (the minimum); the scan starts in the leaf on its side (the right one going up from
    // key 16, the left one going down from 15), and between the steps a remove in that leaf
    // underflows it: it merges with its sibling (going up it is the right node, which is
    // freed; going down the left, whose range grows) and the root collapses. The next step
    // must descend.
    for order in BOTH {
        let (t, _) = filled(0..32);
        assert_eq!(t.stats().height, 2);
        let (lower, upper, victim) = match order {
            Order::Ascending => (Bound::Included(&key(16)[..]), Bound::Unbounded, 30),
            Order::Descending => (Bound::Unbounded, Bound::Included(&key(15)[..]), 1),
        };
        let revisits = counter(&t, "scan_revisits");
        let merges = counter(&t, "merges");
        let mut seen = Vec::new();
        t.scan(lower, upper, order, &mut |k, _| {
            seen.push(u64::from_be_bytes(k.try_into().unwrap()));
            if seen.len() == 8 {
                assert!(t.remove(&key(victim)));
            }
            ControlFlow::Continue(())
        });
        assert_eq!(
            counter(&t, "merges"),
            merges + 1,
            "{order:?}: the leaf merged"
        );
        assert_eq!(counter(&t, "scan_revisits"), revisits, "{order:?}");
        assert_eq!(t.stats().height, 1, "the root collapsed");
        let expected: BTreeSet<u64> = match order {
            Order::Ascending => (16..32).filter(|&n| n != victim).collect(),
            Order::Descending => (0..16).filter(|&n| n != victim).collect(),
        };
        assert_scan(&seen, &expected, order);
        assert_eq!(seen.len(), 15, "{order:?}: {seen:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn nested_scans_each_get_a_buffer() {
    // Goal: a scan run by another scan's visitor (the thread's buffer is lent out) sees its
    // own records, and the outer scan's records are not overwritten. Method: an outer scan
    // of 20 keys runs a full inner scan at each record and compares both to the model.
    let (t, keys) = filled(0..20);
    let mut outer = Vec::new();
    t.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            assert_eq!(k, v);
            outer.push(u64::from_be_bytes(k.try_into().unwrap()));
            let mut inner = Vec::new();
            t.scan(
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Descending,
                &mut |k, v| {
                    assert_eq!(k, v);
                    inner.push(u64::from_be_bytes(k.try_into().unwrap()));
                    ControlFlow::Continue(())
                },
            );
            assert_eq!(inner, keys.iter().rev().copied().collect::<Vec<_>>());
            ControlFlow::Continue(())
        },
    );
    assert_eq!(outer, keys.iter().copied().collect::<Vec<_>>());
}

#[test]
fn a_quiet_scan_goes_to_the_next_leaf_through_its_parent() {
    // Goal: a step past a leaf's fence takes the neighbouring leaf through the parent, taken
    // again, not by a descent from the root; at the parent's last child on the scan side it
    // descends. Method: 2 000 keys (three levels at order 32); full scans both ways with no
    // write: every leaf after the first is reached by a sibling step or a descent, and the
    // descents are the parent changes only (at most one per level-1 node).
    let (t, keys) = filled(0..2_000);
    let stats = t.stats();
    assert_eq!(stats.height, 3, "leaves under several parents");
    let leaves = stats.leaf_node_count;
    for order in BOTH {
        let steps = counter(&t, "scan_sibling_steps");
        let redescents = counter(&t, "scan_redescents");
        let mut seen = Vec::new();
        t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
            seen.push(u64::from_be_bytes(k.try_into().unwrap()));
            ControlFlow::Continue(())
        });
        assert_scan(&seen, &keys, order);
        assert_eq!(seen.len(), keys.len());
        let steps = counter(&t, "scan_sibling_steps") - steps;
        let redescents = counter(&t, "scan_redescents") - redescents;
        assert_eq!(
            steps + redescents,
            leaves - 1,
            "{order:?}: one move per next leaf"
        );
        assert!(
            redescents < leaves / 8,
            "{order:?}: {redescents} descents for {leaves} leaves"
        );
    }
}

#[test]
fn a_split_between_leaves_sends_the_sibling_step_down() {
    // Goal: after a leaf split (the stamp moved) the scan does not trust its parent link.
    // Method: two levels of keys 0, 4, 8, ...; at the 10th record the visitor inserts 40 odd
    // keys just ahead of the cursor, so leaves ahead split; the scan must descend at least
    // once, and every key present throughout still comes once, in order.
    for order in BOTH {
        let (t, keys) = filled((0..200).map(|n| n * 4));
        assert_eq!(t.stats().height, 2);
        let (splits, redescents) = (counter(&t, "splits"), counter(&t, "scan_redescents"));
        let mut seen = Vec::new();
        t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, _| {
            let n = u64::from_be_bytes(k.try_into().unwrap());
            seen.push(n);
            if seen.len() == 10 {
                let ahead: Vec<u64> = match order {
                    Order::Ascending => (0..40).map(|i| n + 1 + 2 * i).collect(),
                    Order::Descending => (0..40).map(|i| n - 1 - 2 * i).collect(),
                };
                for m in ahead {
                    assert!(t.insert(&key(m), &key(m)).unwrap());
                }
            }
            ControlFlow::Continue(())
        });
        assert_scan(&seen, &keys, order);
        assert!(counter(&t, "splits") > splits, "{order:?}: a leaf split");
        assert!(counter(&t, "scan_redescents") > redescents, "{order:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_short_scan_keeps_its_parent_link_across_revisits() {
    // Goal: revisits of a leaf (steps cut short by the budget) keep the parent link, so the
    // step past the fence that follows them still goes through the parent. Method: scans of
    // 40 records (8, then 16, then 32: two revisits before the fence) from 20 starts in a
    // three-level tree with no writes: most leaf changes are sibling steps.
    let (t, _) = filled(0..2_000);
    for order in BOTH {
        let steps = counter(&t, "scan_sibling_steps");
        let redescents = counter(&t, "scan_redescents");
        for start in (0..2_000u64).step_by(100) {
            let (lower, upper) = match order {
                Order::Ascending => (Bound::Included(key(start)), Bound::Unbounded),
                Order::Descending => (Bound::Unbounded, Bound::Included(key(start + 50))),
            };
            let mut count = 0;
            let bounds = (
                lower.as_ref().map(|k| &k[..]),
                upper.as_ref().map(|k| &k[..]),
            );
            t.scan(bounds.0, bounds.1, order, &mut |_, _| {
                count += 1;
                if count == 40 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
        }
        let steps = counter(&t, "scan_sibling_steps") - steps;
        let redescents = counter(&t, "scan_redescents") - redescents;
        assert!(
            steps > redescents,
            "{order:?}: {steps} sibling steps, {redescents} descents"
        );
    }
}
