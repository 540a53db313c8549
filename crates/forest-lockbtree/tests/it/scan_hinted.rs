//! Scans told their length (`Index::scan_hinted`, scan.rs): each step's budget is what the hint
//! still expects, so a visitor that stops on the hinted record gets it from one step per leaf
//! (no revisit of a leaf cut short by its budget), and the records are `scan`'s whatever the
//! hint, the stop and the writes the visitor makes between steps.

use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order};
use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch};

/// Order 32: a leaf holds up to 31 records, at least 16 unless it is the root.
fn tree(keys: impl IntoIterator<Item = u64>) -> LockBTree {
    let t = LockBTree::with_config(LockBTreeConfig {
        order: 32,
        search: NodeSearch::Binary,
    })
    .expect("a valid order");
    for n in keys {
        t.upsert(&key(n), &key(n)).expect("upsert");
    }
    t
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn number(k: &[u8]) -> u64 {
    u64::from_be_bytes(k.try_into().expect("8-byte keys"))
}

fn counter(tree: &LockBTree, name: &str) -> u64 {
    tree.stats()
        .counter(name)
        .expect("lockbtree keeps the counter")
}

/// The scan's bounds from `start` on in `order`.
fn from(start: &[u8], order: Order) -> (Bound<&[u8]>, Bound<&[u8]>) {
    match order {
        Order::Ascending => (Bound::Included(start), Bound::Unbounded),
        Order::Descending => (Bound::Unbounded, Bound::Included(start)),
    }
}

/// The first `stop` keys from `start` on in `order` by `scan_hinted` with `hint`, breaking on
/// the last one (as YCSB's scans do), and the scan's revisits of a leaf.
fn hinted(t: &LockBTree, start: u64, order: Order, hint: usize, stop: usize) -> (Vec<u64>, u64) {
    let revisits = counter(t, "scan_revisits");
    let start = key(start);
    let (lower, upper) = from(&start, order);
    let mut seen = Vec::new();
    t.scan_hinted(lower, upper, order, hint, &mut |k, v| {
        assert_eq!(k, v, "value of {}", number(k));
        seen.push(number(k));
        if seen.len() == stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    (seen, counter(t, "scan_revisits") - revisits)
}

fn expected(keys: &[u64], start: u64, order: Order, stop: usize) -> Vec<u64> {
    match order {
        Order::Ascending => keys
            .iter()
            .copied()
            .filter(|&n| n >= start)
            .take(stop)
            .collect(),
        Order::Descending => keys
            .iter()
            .rev()
            .copied()
            .filter(|&n| n <= start)
            .take(stop)
            .collect(),
    }
}

#[test]
fn a_scan_stopping_at_its_hint_never_revisits_a_leaf() {
    // Goal: the hint sizes the first step (scan.rs): a scan of `hint` records that stops on
    // the last one copies them in one step per leaf, so no leaf is latched again for the rest
    // (without the hint, the first step copies 8 and a scan of 9 or more comes back to its
    // leaf: this failed before `scan_hinted` was overridden). Method: 600 keys (leaves of 16 to
    // 31 records), scans of 1 to 40 records from every 7th key in both orders; each hands out
    // what the model says and counts no revisit.
    let keys: Vec<u64> = (0..600).map(|n| n * 3).collect();
    let t = tree(keys.iter().copied());
    for order in [Order::Ascending, Order::Descending] {
        for start in (0..1800).step_by(7) {
            for len in [1, 2, 8, 9, 10, 16, 31, 40] {
                let (seen, revisits) = hinted(&t, start, order, len, len);
                assert_eq!(
                    seen,
                    expected(&keys, start, order, len),
                    "{order:?} from {start}, {len}"
                );
                assert_eq!(
                    revisits, 0,
                    "{order:?} from {start}: {len} records, hint {len}"
                );
            }
        }
    }
}

#[test]
fn hints_below_and_past_the_stop_hand_out_what_scan_does() {
    // Goal: the hint only sizes copies: a visitor stopping before, at or far past it (budgets
    // double from 8 once the hint is out), or never, gets the model's records. Method: hints 0
    // to 50 against stops 1 to 120 and none, both orders, from a few starts.
    let keys: Vec<u64> = (0..400).collect();
    let t = tree(keys.iter().copied());
    for order in [Order::Ascending, Order::Descending] {
        for start in [0, 5, 199, 399] {
            for hint in [0, 1, 3, 8, 9, 17, 50] {
                for stop in [1, 2, 9, 10, 33, 120, usize::MAX] {
                    let (seen, _) = hinted(&t, start, order, hint, stop);
                    assert_eq!(
                        seen,
                        expected(&keys, start, order, stop),
                        "{order:?} from {start}, hint {hint}, stop {stop}"
                    );
                }
            }
        }
    }
}

#[test]
fn writes_between_hinted_steps_keep_the_stable_keys() {
    // Goal: a hinted scan's steps keep `scan`'s guarantees when the visitor writes between
    // them: keys present throughout come exactly once, strictly ordered, and no latch is held
    // while the visitor runs (it writes the tree). Method: even keys stable; after each record
    // the visitor inserts the odd key just past it (ahead of the cursor: may or may not come)
    // and, every 5th record, removes an odd key further on, splitting and merging leaves ahead;
    // hints 3, 10 and 40, the scan taking 60 records, both orders.
    for order in [Order::Ascending, Order::Descending] {
        for hint in [3, 10, 40] {
            let stable: Vec<u64> = (0..300).map(|n| n * 2).collect();
            let t = tree(stable.iter().copied());
            let start = match order {
                Order::Ascending => 100,
                Order::Descending => 500,
            };
            let start_key = key(start);
            let (lower, upper) = from(&start_key, order);
            let mut seen = Vec::new();
            t.scan_hinted(lower, upper, order, hint, &mut |k, _| {
                let n = number(k);
                seen.push(n);
                let (near, far) = match order {
                    Order::Ascending => (n + 3, n + 41),
                    Order::Descending => (n.saturating_sub(3), n.saturating_sub(41)),
                };
                t.upsert(&key(near | 1), &key(near | 1)).expect("upsert");
                if seen.len() % 5 == 0 {
                    t.remove(&key(far | 1));
                }
                if seen.len() == 60 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            for pair in seen.windows(2) {
                let ordered = match order {
                    Order::Ascending => pair[0] < pair[1],
                    Order::Descending => pair[0] > pair[1],
                };
                assert!(
                    ordered,
                    "{order:?} hint {hint}: {pair:?} out of order in {seen:?}"
                );
            }
            let last = *seen.last().expect("records");
            let want: Vec<u64> = stable
                .iter()
                .copied()
                .filter(|&n| match order {
                    Order::Ascending => n >= start && n <= last,
                    Order::Descending => n <= start && n >= last,
                })
                .collect();
            let got: Vec<u64> = seen.iter().copied().filter(|n| n % 2 == 0).collect();
            let mut want_ordered = want;
            if order == Order::Descending {
                want_ordered.reverse();
            }
            assert_eq!(got, want_ordered, "{order:?} hint {hint}: stable keys");
        }
    }
}
