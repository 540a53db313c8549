//! Range scans (BzTree §4.2.6): one leaf at a time, by snapshot. A scan pins, descends to a
//! leaf, copies its visible records in range (sorted) into a buffer, unpins, and only then
//! hands them to the visitor, so no epoch is held while user code runs. It then descends again
//! "greater than" the leaf's upper bound (ascending) or to the leaf holding its lower bound
//! (descending). A descent records the tightest separators above the leaf, so the next one
//! starts past the whole leaf rather than past its last key. A leaf reached that way may
//! have absorbed a merged sibling that was already read (through a stale parent), so each
//! snapshot keeps only the keys past the cursor: no key is returned twice or out of order.
//!
//! A snapshot is re-read when the leaf's delete size moved while it was copied (a delete or a
//! version swap ran under the copy: the copy could have missed a key or held it twice).

use std::ops::{Bound, ControlFlow};

use forest_core::index::{below_lower, in_bounds, past_upper};
use forest_core::{Order, Visitor};
use forest_pmwcas::{Guard, Persist};

use crate::BzTree;

/// Where a scan descent goes.
#[derive(Clone, Copy)]
enum Target<'k> {
    /// The leaf holding `key`, or with `after` the first leaf holding keys above it.
    Key(&'k [u8], bool),
    /// The last leaf.
    Rightmost,
}

/// A leaf's records, copied.
#[derive(Default)]
struct Snapshot {
    bytes: Vec<u8>,
    /// (key start, key end = value start, value end) in `bytes`.
    records: Vec<(usize, usize, usize)>,
    order: Vec<usize>,
}

impl<P: Persist> BzTree<P> {
    /// Descends to a leaf; returns it with its exclusive lower and inclusive upper bounds
    /// (`None`: unbounded on that side).
    fn descend_bounds(
        &self,
        target: Target<'_>,
        guard: &Guard,
        low: &mut Option<Vec<u8>>,
        high: &mut Option<Vec<u8>>,
    ) -> u64 {
        *low = None;
        *high = None;
        let mut node = self.root(guard);
        while self.level(node) > 0 {
            let n = self.sorted_count(node);
            let slot = match target {
                Target::Key(key, after) => self.child_slot(node, key, after),
                Target::Rightmost => n - 1,
            };
            if slot > 0 {
                *low = Some(self.separator(node, slot).to_vec());
            }
            if slot + 1 < n {
                *high = Some(self.separator(node, slot + 1).to_vec());
            }
            node = self.child(node, slot, guard);
        }
        node
    }

    fn snapshot_leaf(
        &self,
        leaf: u64,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        snap: &mut Snapshot,
        guard: &Guard,
    ) {
        loop {
            snap.bytes.clear();
            snap.records.clear();
            let s = self.status(leaf, guard);
            for i in 0..s.record_count() {
                let m = self.leaf_meta(leaf, i, guard);
                if !m.is_visible() {
                    continue;
                }
                let key = self.key_of(leaf, m);
                if !in_bounds(key, lower, upper) {
                    continue;
                }
                let start = snap.bytes.len();
                snap.bytes.extend_from_slice(key);
                let mid = snap.bytes.len();
                snap.bytes.extend_from_slice(self.value_of(leaf, m, guard));
                snap.records.push((start, mid, snap.bytes.len()));
            }
            if self.status(leaf, guard).delete_size() == s.delete_size() {
                break;
            }
            self.counters.read_retries.incr();
        }
        let (bytes, records) = (&snap.bytes, &snap.records);
        snap.order.clear();
        snap.order.extend(0..records.len());
        snap.order.sort_unstable_by(|&a, &b| {
            bytes[records[a].0..records[a].1].cmp(&bytes[records[b].0..records[b].1])
        });
    }

    /// §4.2.6 range scan in either order.
    pub(crate) fn range_scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        if forest_core_bounds_empty(lower, upper) {
            return;
        }
        let mut snap = Snapshot::default();
        let (mut low, mut high) = (None, None);
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            {
                let guard = self.pool.pin();
                let target = match (order, &cursor) {
                    (Order::Ascending, Some(c)) => Target::Key(c, true),
                    (Order::Ascending, None) => match lower {
                        Bound::Included(l) | Bound::Excluded(l) => Target::Key(l, false),
                        Bound::Unbounded => Target::Key(&[], false),
                    },
                    (Order::Descending, Some(c)) => Target::Key(c, false),
                    (Order::Descending, None) => match upper {
                        Bound::Included(u) | Bound::Excluded(u) => Target::Key(u, false),
                        Bound::Unbounded => Target::Rightmost,
                    },
                };
                let leaf = self.descend_bounds(target, &guard, &mut low, &mut high);
                // The leaf may also hold keys a previous snapshot covered (it absorbed a
                // merged sibling since): keep only what lies past the cursor.
                let (lo, up) = match (order, &cursor) {
                    (Order::Ascending, Some(c)) => (Bound::Excluded(&c[..]), upper),
                    (Order::Descending, Some(c)) => (lower, Bound::Included(&c[..])),
                    (_, None) => (lower, upper),
                };
                let lo = tighter_lower(lo, lower);
                let up = tighter_upper(up, upper);
                self.snapshot_leaf(leaf, lo, up, &mut snap, &guard);
            }
            // Unpinned: the visitor may take its time or call back into the tree.
            let visit_one = |i: usize, visit: &mut Visitor<'_>| {
                let (a, b, c) = snap.records[i];
                visit(&snap.bytes[a..b], &snap.bytes[b..c])
            };
            match order {
                Order::Ascending => {
                    for &i in &snap.order {
                        if visit_one(i, visit) == ControlFlow::Break(()) {
                            return;
                        }
                    }
                    match high.take() {
                        Some(h) if !past_upper(&h, upper) => cursor = Some(h),
                        _ => return,
                    }
                }
                Order::Descending => {
                    for &i in snap.order.iter().rev() {
                        if visit_one(i, visit) == ControlFlow::Break(()) {
                            return;
                        }
                    }
                    match low.take() {
                        // The next leaf holds keys <= low.
                        Some(l) if !below_lower(&l, lower) => cursor = Some(l),
                        _ => return,
                    }
                }
            }
        }
    }
}

/// Whether the bounds admit no key (lower above upper, or equal with one excluded).
fn forest_core_bounds_empty(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u))
        | (Bound::Excluded(l), Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

fn tighter_lower<'a>(a: Bound<&'a [u8]>, b: Bound<&'a [u8]>) -> Bound<&'a [u8]> {
    let key = |x: &Bound<&'a [u8]>| match *x {
        Bound::Included(k) | Bound::Excluded(k) => Some(k),
        Bound::Unbounded => None,
    };
    match (key(&a), key(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) if x > y => a,
        (Some(x), Some(y)) if y > x => b,
        _ => {
            if matches!(a, Bound::Excluded(_)) {
                a
            } else {
                b
            }
        }
    }
}

fn tighter_upper<'a>(a: Bound<&'a [u8]>, b: Bound<&'a [u8]>) -> Bound<&'a [u8]> {
    let key = |x: &Bound<&'a [u8]>| match *x {
        Bound::Included(k) | Bound::Excluded(k) => Some(k),
        Bound::Unbounded => None,
    };
    match (key(&a), key(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) if x < y => a,
        (Some(x), Some(y)) if y < x => b,
        _ => {
            if matches!(a, Bound::Excluded(_)) {
                a
            } else {
                b
            }
        }
    }
}
