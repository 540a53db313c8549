//! Range scans in both orders as a leaf-snapshot cursor (DESIGN.md, "The Index API"; the
//! thesis' tree has no leaf links, §2.1, so the cursor re-descends).
//!
//! One step: descend with interlocking read latches (§4.2.1) to the leaf holding the cursor's
//! bound, copy that leaf's records within the scan's bounds into a reused buffer, remember the
//! leaf's fence (the separator bounding it on the scan side, taken from the path: the deepest
//! separator to the right of the path going up, to the left going down), release the leaf,
//! then hand the records to `visit`, holding no latch, so `visit` may call back into the index.
//! The next step re-descends past the fence: going up from `Excluded(fence)`, going down from
//! `Included(fence)` (keys `m` left of separator `k` have `m <= k`, §2.1).
//!
//! A step copies at most a budget of records: [`SCAN_BUDGET_FIRST`] at first, doubling each
//! step, so a short scan (YCSB E's 1 to 100 records) copies little more than it returns while a
//! long one soon copies whole leaves. A step cut short by its budget resumes after the last key
//! it copied (`Excluded(last)`, either direction); a step that copied all of its leaf's records
//! within the bounds resumes past the fence, and keys between the last one returned and the
//! fence that appear later were inserted during the scan and may be missed, as the contract
//! allows. A key present for the
//! whole scan lies, at each descent, in the one leaf whose range holds it, so it is returned
//! exactly once; fences only grow (going up) or shrink (going down), so keys come strictly
//! ordered.

use std::ops::Bound;

use forest_core::index::{below_lower, past_upper};
use forest_core::{Order, Visitor};

use crate::bytes::Bytes;
use crate::node::Latched;
use crate::search::{lower_bound, upper_bound, SearchKey};
use crate::LockBTree;

/// Records the first step of a scan copies; later steps double it. Small enough that a scan
/// of a few records copies few, large enough that the extra descents of a long scan are few
/// (a leaf holds up to `order - 1` records).
pub(crate) const SCAN_BUDGET_FIRST: usize = 16;

/// One leaf's records, copied.
#[derive(Default)]
struct LeafCopy {
    /// Keys and values back to back.
    bytes: Vec<u8>,
    /// Per record: key length, value length.
    lengths: Vec<(usize, usize)>,
}

impl LeafCopy {
    fn clear(&mut self) {
        self.bytes.clear();
        self.lengths.clear();
    }

    fn len(&self) -> usize {
        self.lengths.len()
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.lengths.push((key.len(), value.len()));
    }

    /// Copies the last record's key into `out`.
    fn last_key_into(&self, out: &mut Vec<u8>) {
        let (key_len, value_len) = *self
            .lengths
            .last()
            .expect("a cut-short step copied records");
        let end = self.bytes.len() - value_len;
        out.clear();
        out.extend_from_slice(&self.bytes[end - key_len..end]);
    }

    /// Hands the records to `visit`; returns whether it asked to stop.
    fn visit(&self, visit: &mut Visitor<'_>) -> bool {
        let mut at = 0;
        for &(key_len, value_len) in &self.lengths {
            let key = &self.bytes[at..at + key_len];
            let value = &self.bytes[at + key_len..at + key_len + value_len];
            at += key_len + value_len;
            if visit(key, value).is_break() {
                return true;
            }
        }
        false
    }
}

/// How a step ended.
struct StepEnd {
    /// The scan's far bound was reached (or no leaf lies beyond): nothing more to visit.
    finished: bool,
    /// The budget ran out inside the leaf: `fence` holds the last key copied, and the next
    /// step resumes after it.
    cut_short: bool,
}

/// Runs a scan (see the module doc).
pub(crate) fn scan(
    tree: &LockBTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    let mut records = LeafCopy::default();
    // Where the next step starts: a key, and whether it was a step's last key copied (resume
    // after it) rather than a fence.
    let mut cursor: Option<(Vec<u8>, bool)> = None;
    let mut fence = Vec::new();
    let mut budget = SCAN_BUDGET_FIRST;
    loop {
        let bound = match (&cursor, order) {
            (None, Order::Ascending) => lower,
            (None, Order::Descending) => upper,
            (Some((k, true)), _) => Bound::Excluded(k.as_slice()),
            (Some((f, false)), Order::Ascending) => Bound::Excluded(f.as_slice()),
            (Some((f, false)), Order::Descending) => Bound::Included(f.as_slice()),
        };
        records.clear();
        let end = copy_leaf(
            tree,
            bound,
            lower,
            upper,
            order,
            budget,
            &mut records,
            &mut fence,
        );
        // No latch is held from here on.
        if records.visit(visit) || end.finished {
            return;
        }
        let (previous, after_last) = cursor.get_or_insert_with(|| (Vec::new(), false));
        std::mem::swap(previous, &mut fence);
        *after_last = end.cut_short;
        budget = budget.saturating_mul(2);
    }
}

/// Descends to the leaf for `bound`, copies up to `budget` of its records within
/// `lower..upper` in `order`, and leaves in `fence` the leaf's fence, or the last key copied
/// when the budget cut the leaf short.
#[allow(clippy::too_many_arguments)] // one step's whole state; a struct would only rename it
fn copy_leaf(
    tree: &LockBTree,
    bound: Bound<&[u8]>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    budget: usize,
    records: &mut LeafCopy,
    fence: &mut Vec<u8>,
) -> StepEnd {
    let waits = &tree.counters.latch_waits;
    let how = tree.search;
    let ascending = order == Order::Ascending;
    // Which slot to go to in a node, for the cursor's bound.
    let position = |prefixes: &[u64], keys: &[Bytes]| match bound {
        Bound::Unbounded if ascending => 0,
        Bound::Unbounded => keys.len(),
        Bound::Excluded(k) if ascending => upper_bound(how, prefixes, keys, &SearchKey::new(k)),
        Bound::Included(k) | Bound::Excluded(k) => {
            lower_bound(how, prefixes, keys, &SearchKey::new(k))
        }
    };
    let mut has_fence = false;
    let holder = tree.tree.read(waits);
    let mut node = holder.root_read(waits);
    drop(holder);
    while node.level() > 0 {
        let body = node.body();
        let index = position(&body.prefixes, &body.keys);
        // The deepest separator on the scan side bounds the leaf most tightly.
        let side = if ascending {
            body.keys.get(index)
        } else {
            index.checked_sub(1).map(|i| &body.keys[i])
        };
        if let Some(separator) = side {
            fence.clear();
            fence.extend_from_slice(separator);
            has_fence = true;
        }
        node.prefetch_child(index, tree.order);
        let child = node.read_child(index, waits);
        node = child;
    }

    let leaf = node.body();
    let mut finished = false;
    let mut cut_short = false;
    if ascending {
        let start = match bound {
            Bound::Unbounded => 0,
            Bound::Included(k) => lower_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k)),
            Bound::Excluded(k) => upper_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k)),
        };
        for (key, value) in leaf.keys[start..].iter().zip(&leaf.values[start..]) {
            if past_upper(key, upper) {
                finished = true;
                break;
            }
            debug_assert!(!below_lower(key, lower));
            if records.len() == budget {
                cut_short = true;
                break;
            }
            records.push(key, value);
        }
        finished = finished || (!cut_short && (!has_fence || past_upper(fence, upper)));
    } else {
        let end = match bound {
            Bound::Unbounded => leaf.len(),
            Bound::Included(k) => upper_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k)),
            Bound::Excluded(k) => lower_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k)),
        };
        for (key, value) in leaf.keys[..end].iter().zip(&leaf.values[..end]).rev() {
            if below_lower(key, lower) {
                finished = true;
                break;
            }
            debug_assert!(!past_upper(key, upper));
            if records.len() == budget {
                cut_short = true;
                break;
            }
            records.push(key, value);
        }
        finished = finished || (!cut_short && (!has_fence || below_lower(fence, lower)));
    }
    if cut_short {
        records.last_key_into(fence);
    }
    StepEnd {
        finished,
        cut_short,
    }
}
