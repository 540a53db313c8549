//! Range scans in both orders as a leaf-snapshot cursor (DESIGN.md, "The Index API"). The
//! thesis' tree has no leaf links (§2.1), so a scan moves to the next leaf by a descent with
//! interlocking read latches (§4.2.1); within a leaf it comes back without one.
//!
//! One step: latch a leaf, copy up to a budget of its records within the scan's bounds into
//! a flat buffer, release the leaf, then hand the records to `visit`, holding no latch, so
//! `visit` may call back into the index. The buffer is this thread's, reused from scan to
//! scan. While copying, the boxed keys and values of the records [`PREFETCH_AHEAD`] slots
//! further are prefetched, so their cache misses overlap: they, not the copy, are what a
//! record costs.
//!
//! Which leaf a step latches:
//! - The first step descends to the leaf holding the scan's start bound and remembers the
//!   leaf's fence (the separator bounding it on the scan side, taken from the path: the
//!   deepest separator to the right of the path going up, to the left going down).
//! - A step cut short by its budget resumes after the last key it copied (`Excluded(last)`,
//!   either direction) in the same leaf: it comes back to the leaf by its pointer
//!   (`node::ReadGuard::revisit`, node.rs invariant 6) if no leaf changed its key range and
//!   no node was freed in between (a tree-wide stamp read under the leaf's latch tells) and
//!   no writer holds the leaf; the fence is then still the leaf's. Otherwise it descends for
//!   `Excluded(last)` and takes the fence of the leaf it lands in.
//! - A step that copied all of its leaf's records within the bounds goes past the fence:
//!   going up from `Excluded(fence)`, going down from `Included(fence)` (keys `m` left of
//!   separator `k` have `m <= k`, §2.1). The thesis' leaves have no side links, so it goes
//!   through the leaf's parent instead ([`sibling`]): the descent remembered the parent, the
//!   stamp read under its latch and the leaf's index; the parent is taken again as a leaf is
//!   revisited (only if the stamp is unchanged, so its children and separators are), and the
//!   neighbouring child is latched while the parent is held (§4.2.1). Past the parent's last
//!   child on the scan side, or when the parent cannot be taken again, it descends from the
//!   root for the bound.
//!
//! The budget is [`SCAN_BUDGET_FIRST`] records at first and doubles each step, so a scan
//! copies fewer than twice the records it hands out plus the first budget; coming back for
//! more costs a latch and a look at the remembered slot (a search of the leaf if writes moved
//! it) rather than a descent; a long scan soon copies whole leaves. Prefetching runs
//! [`PREFETCH_AHEAD`] records past the budget, so the next step's first misses overlap the
//! visitor's work. A scan told its length (`Index::scan_hinted`, [`scan_hinted`]) budgets
//! each step for the records the hint still expects, so a visitor that stops there gets them
//! from one step per leaf and nothing is copied past it; past the hint, budgets double from
//! [`SCAN_BUDGET_FIRST`] as without one.
//!
//! A scan's buffers (the records copied, the cursor's keys) are its thread's, kept between
//! scans: a scan allocates nothing once its thread has scanned before.
//!
//! Every record handed out was in its leaf under the leaf's latch. A key present for the
//! whole scan lies, at each step, in the one leaf whose range holds it (a revisited leaf's
//! range is unchanged), so it is returned exactly once; keys between the last one returned
//! and the fence that appear during the scan may be missed, as the contract allows. Fences
//! only grow (going up) or shrink (going down) and each step starts past the last key, so
//! keys come strictly ordered.

use std::cell::Cell;
use std::ops::Bound;

use forest_core::index::{below_lower, past_upper};
use forest_core::{Order, Visitor};

use crate::bytes::Key;
use crate::node::{Latched, NodeBody, NodePtr, ReadGuard};
use crate::search::{lower_bound, upper_bound, SearchKey};
use crate::LockBTree;

/// Records the first step of a scan copies; later steps double it. Small, because a record
/// copied and not handed out costs its cache misses, while coming back to the leaf for more
/// is cheap (see the module doc). Under loom, one record, so that a scan of a
/// few records revisits its leaf.
pub(crate) const SCAN_BUDGET_FIRST: usize = if cfg!(loom) { 1 } else { 8 };

/// Records ahead of the one being copied whose boxed key and value are prefetched, so that the
/// cache misses of a step's records overlap instead of coming one after another.
const PREFETCH_AHEAD: usize = 8;

/// The largest buffer a thread keeps between scans (bytes of records); a scan that needed
/// more gives its buffer back to the allocator.
const SPARE_BYTES_MAX: usize = 64 << 10;

std::thread_local! {
    /// This thread's buffers, lent to one scan at a time: a scan run by a visitor of another
    /// scan finds them taken (empty) and grows its own.
    static SPARE: Cell<Buffers> = const { Cell::new(Buffers::EMPTY) };
}

/// A scan's buffers: the records of a step, and the cursor's keys.
#[derive(Default)]
struct Buffers {
    records: LeafCopy,
    cursor: Cursor,
}

impl Buffers {
    const EMPTY: Self = Self {
        records: LeafCopy::EMPTY,
        cursor: Cursor::EMPTY,
    };

    /// This thread's spare buffers, or new ones.
    fn take() -> Self {
        SPARE.try_with(Cell::take).unwrap_or_default()
    }

    /// Keeps the buffers for this thread's next scan unless they grew large.
    fn give(self) {
        let bytes = self.records.bytes.capacity()
            + self.cursor.last.capacity()
            + self.cursor.fence.capacity()
            + self.cursor.fence_above.capacity();
        if bytes <= SPARE_BYTES_MAX {
            // During thread exit the thread-local may be gone: the buffers are then freed.
            let _ = SPARE.try_with(|spare| spare.set(self));
        }
    }
}

/// One step's records, copied.
#[derive(Default)]
struct LeafCopy {
    /// Keys and values back to back.
    bytes: Vec<u8>,
    /// Per record: key length, value length.
    lengths: Vec<(usize, usize)>,
}

impl LeafCopy {
    const EMPTY: Self = Self {
        bytes: Vec::new(),
        lengths: Vec::new(),
    };

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

/// Where the next step starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    /// At the scan's own bound.
    Start,
    /// After [`Cursor::last`], in the leaf the step before stopped inside.
    AfterLast,
    /// Past [`Cursor::fence`]: the step before copied the rest of its leaf.
    PastFence,
}

/// What a scan keeps between steps.
#[derive(Default)]
struct Cursor {
    /// The last key copied (after a step cut short); the bound of a descent past the fence.
    last: Vec<u8>,
    /// The fence of the leaf copied from, if it has one on the scan side.
    fence: Vec<u8>,
    has_fence: bool,
    /// The leaf a cut-short step stopped inside, the stamp read under its latch, and the slot
    /// the next step starts at if the leaf is unchanged (see [`StepEnd::slot`]).
    leaf: Option<(NodePtr, u64, usize)>,
    /// The parent of the leaf copied from, the stamp read under the parent's latch, and the
    /// leaf's index in it: a step past the fence goes to the neighbouring child through it
    /// (see [`sibling`]).
    parent: Option<(NodePtr, u64, usize)>,
    /// The fence from the levels above the parent (what the leaf's fence is when the leaf is
    /// the parent's last child on the scan side).
    fence_above: Vec<u8>,
    has_fence_above: bool,
}

impl Cursor {
    const EMPTY: Self = Self {
        last: Vec::new(),
        fence: Vec::new(),
        has_fence: false,
        leaf: None,
        parent: None,
        fence_above: Vec::new(),
        has_fence_above: false,
    };

    /// The cursor of a new scan, keeping the keys' allocations.
    fn reset(&mut self) {
        self.last.clear();
        self.fence.clear();
        self.has_fence = false;
        self.leaf = None;
        self.parent = None;
        self.fence_above.clear();
        self.has_fence_above = false;
    }
}

/// How a step ended.
struct StepEnd {
    /// The scan's far bound was reached (or no leaf lies beyond): nothing more to visit.
    finished: bool,
    /// The budget ran out inside the leaf: the next step resumes after the last key copied.
    cut_short: bool,
    /// Going up, the slot after the last record copied; going down, the last record's slot.
    slot: usize,
}

/// Runs a scan (see the module doc).
pub(crate) fn scan(
    tree: &LockBTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    scan_hinted(tree, lower, upper, order, None, visit);
}

/// Runs a scan whose visitor is expected to take about `len_hint` records, if given
/// (`Index::scan_hinted`): each step's budget is what the hint still expects, at least 1; past
/// it, budgets double from [`SCAN_BUDGET_FIRST`]. The records handed out are `scan`'s.
pub(crate) fn scan_hinted(
    tree: &LockBTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    len_hint: Option<usize>,
    visit: &mut Visitor<'_>,
) {
    let mut buffers = Buffers::take();
    buffers.cursor.reset();
    scan_with(tree, lower, upper, order, len_hint, visit, &mut buffers);
    buffers.give();
}

/// The scan's steps, copying into `buffers`.
fn scan_with(
    tree: &LockBTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    len_hint: Option<usize>,
    visit: &mut Visitor<'_>,
    buffers: &mut Buffers,
) {
    let Buffers { records, cursor } = buffers;
    let mut next = Next::Start;
    // The records the hint still expects (0 without one, or once they are out).
    let mut hinted = len_hint.map_or(0, |hint| hint.max(1));
    let mut doubling = SCAN_BUDGET_FIRST;
    loop {
        let budget = if hinted > 0 { hinted } else { doubling };
        records.clear();
        let end = step(tree, cursor, next, lower, upper, order, budget, records);
        // No latch is held from here on.
        if records.visit(visit) || end.finished {
            return;
        }
        next = if end.cut_short {
            Next::AfterLast
        } else {
            Next::PastFence
        };
        if hinted > 0 {
            hinted -= records.len();
        } else {
            doubling = doubling.saturating_mul(2);
        }
    }
}

/// One step: latches the leaf `next` names, copies up to `budget` of its records within
/// `lower..upper` in `order`, and leaves in `cursor` where the next step starts.
#[allow(clippy::too_many_arguments)] // one step's whole state; a struct would only rename it
fn step(
    tree: &LockBTree,
    cursor: &mut Cursor,
    next: Next,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    budget: usize,
    records: &mut LeafCopy,
) -> StepEnd {
    let ascending = order == Order::Ascending;
    if next == Next::PastFence {
        // The old fence becomes the bound; the descent finds the next leaf's.
        std::mem::swap(&mut cursor.last, &mut cursor.fence);
    }
    let Cursor {
        last,
        fence,
        has_fence,
        leaf: remembered,
        parent,
        fence_above,
        has_fence_above,
    } = cursor;
    let bound = match (next, ascending) {
        (Next::Start, true) => lower,
        (Next::Start, false) => upper,
        (Next::AfterLast, _) | (Next::PastFence, true) => Bound::Excluded(last.as_slice()),
        (Next::PastFence, false) => Bound::Included(last.as_slice()),
    };
    let revisited = match (next, remembered.take()) {
        (Next::AfterLast, Some((ptr, stamp, slot))) => {
            ReadGuard::revisit(ptr, stamp, &tree.tree.revisits).map(|leaf| (leaf, slot))
        }
        _ => None,
    };
    let mut hint = None;
    // The parent link outlives revisits of its leaf: only a step past the fence uses it up.
    let stepped = match (next, parent.take_if(|_| next == Next::PastFence)) {
        (Next::PastFence, Some(link)) => {
            let above = (fence_above.as_slice(), *has_fence_above);
            sibling(tree, link, ascending, above, fence, has_fence, parent)
        }
        _ => None,
    };
    let leaf = match (revisited, stepped) {
        (Some((leaf, slot)), _) => {
            tree.counters.scan_revisits.incr();
            hint = Some(slot);
            leaf
        }
        (None, Some(leaf)) => {
            tree.counters.scan_sibling_steps.incr();
            leaf
        }
        (None, None) => {
            if next != Next::Start {
                tree.counters.scan_redescents.incr();
            }
            let at = (
                &mut *fence,
                &mut *has_fence,
                fence_above,
                has_fence_above,
                parent,
            );
            descend(tree, bound, ascending, at)
        }
    };
    let end = copy_leaf(
        tree,
        leaf.body(),
        bound,
        hint,
        lower,
        upper,
        order,
        budget,
        records,
        fence,
        *has_fence,
    );
    if end.cut_short {
        records.last_key_into(last);
        // Read under the leaf's latch (node.rs, invariant 6).
        *remembered = Some((leaf.ptr(), tree.tree.revisits.stamp(), end.slot));
    }
    end
}

/// Where [`descend`] leaves the leaf's fence on the scan side (`fence`, if it has one), the
/// fence from above its parent, and the parent link (see [`Cursor`]).
type Landing<'a> = (
    &'a mut Vec<u8>,
    &'a mut bool,
    &'a mut Vec<u8>,
    &'a mut bool,
    &'a mut Option<(NodePtr, u64, usize)>,
);

/// Descends to the leaf for `bound` and leaves in `at` its fence, the fence above its parent
/// and its parent link.
fn descend(tree: &LockBTree, bound: Bound<&[u8]>, ascending: bool, at: Landing<'_>) -> ReadGuard {
    let (fence, has_fence, fence_above, has_fence_above, parent) = at;
    let waits = &tree.counters.latch_waits;
    let how = tree.search;
    // Which slot to go to in a node, for the cursor's bound.
    let position = |prefixes: &[u64], keys: &[Key]| match bound {
        Bound::Unbounded if ascending => 0,
        Bound::Unbounded => keys.len(),
        Bound::Excluded(k) if ascending => upper_bound(how, prefixes, keys, &SearchKey::new(k)),
        Bound::Included(k) | Bound::Excluded(k) => {
            lower_bound(how, prefixes, keys, &SearchKey::new(k))
        }
    };
    *has_fence = false;
    *parent = None;
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
        if node.level() == 1 {
            // Read under the parent's latch, like a leaf's stamp (node.rs, invariant 6).
            *parent = Some((node.ptr(), tree.tree.revisits.stamp(), index));
            fence_above.clone_from(fence);
            *has_fence_above = *has_fence;
        }
        if let Some(separator) = side {
            fence.clear();
            fence.extend_from_slice(separator);
            *has_fence = true;
        }
        node.prefetch_child(index, tree.order);
        let child = node.read_child(index, waits);
        node = child;
    }
    node
}

/// The leaf beside the one at `index` of the parent `link` names (right going up, left going
/// down), latched through the parent: the parent is taken again as a leaf is revisited
/// (`ReadGuard::revisit`: only if no leaf changed its range and no node was freed since the
/// stamp was read under its latch, so its children and separators are as they were), and the
/// leaf's latch is taken while the parent's is held (§4.2.1). Leaves in `fence` the leaf's
/// fence (the parent's separator beyond it, else `above`) and in `parent` the new link.
/// `None` when the parent cannot be taken again or has no child beyond: the scan descends.
fn sibling(
    tree: &LockBTree,
    (ptr, stamp, index): (NodePtr, u64, usize),
    ascending: bool,
    above: (&[u8], bool),
    fence: &mut Vec<u8>,
    has_fence: &mut bool,
    parent: &mut Option<(NodePtr, u64, usize)>,
) -> Option<ReadGuard> {
    let node = ReadGuard::revisit(ptr, stamp, &tree.tree.revisits)?;
    let body = node.body();
    let next = if ascending {
        Some(index + 1).filter(|&i| i < body.children.len())?
    } else {
        index.checked_sub(1)?
    };
    let side = if ascending {
        body.keys.get(next)
    } else {
        next.checked_sub(1).map(|i| &body.keys[i])
    };
    fence.clear();
    match side {
        Some(separator) => {
            fence.extend_from_slice(separator);
            *has_fence = true;
        }
        None => {
            fence.extend_from_slice(above.0);
            *has_fence = above.1;
        }
    }
    node.prefetch_child(next, tree.order);
    let leaf = node.read_child(next, &tree.counters.latch_waits);
    *parent = Some((ptr, stamp, next));
    Some(leaf)
}

/// Copies up to `budget` records of `leaf` from `bound` on within `lower..upper` in `order`.
/// `hint`: where the step before stopped in this leaf ([`StepEnd::slot`]); used if the key
/// there is still `bound`'s, else the leaf is searched.
#[allow(clippy::too_many_arguments)] // one step's whole state; a struct would only rename it
fn copy_leaf(
    tree: &LockBTree,
    leaf: &NodeBody,
    bound: Bound<&[u8]>,
    hint: Option<usize>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    budget: usize,
    records: &mut LeafCopy,
    fence: &[u8],
    has_fence: bool,
) -> StepEnd {
    let how = tree.search;
    let mut finished = false;
    let mut cut_short = false;
    let mut slot = 0;
    // The slot of the last key copied, if it is still there (the leaf's range is unchanged,
    // but writes may have moved its records).
    let hinted = |back: usize| {
        let Bound::Excluded(k) = bound else {
            return None;
        };
        let at = hint?.checked_sub(back)?;
        (leaf.keys.get(at)?.as_slice() == k).then_some(at)
    };
    if order == Order::Ascending {
        let start = if let Some(at) = hinted(1) {
            at + 1
        } else {
            match bound {
                Bound::Unbounded => 0,
                Bound::Included(k) => {
                    lower_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k))
                }
                Bound::Excluded(k) => {
                    upper_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k))
                }
            }
        };
        // Records past the budget are prefetched too: the next step, if any, starts there.
        let last = start
            .saturating_add(budget.saturating_add(PREFETCH_AHEAD))
            .min(leaf.len());
        for i in start..last.min(start + PREFETCH_AHEAD) {
            prefetch_record(leaf, i);
        }
        for (i, (key, value)) in leaf.keys.iter().zip(&leaf.values).enumerate().skip(start) {
            if i + PREFETCH_AHEAD < last {
                prefetch_record(leaf, i + PREFETCH_AHEAD);
            }
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
            slot = i + 1;
        }
        finished = finished || (!cut_short && (!has_fence || past_upper(fence, upper)));
    } else {
        let end = if let Some(at) = hinted(0) {
            at
        } else {
            match bound {
                Bound::Unbounded => leaf.len(),
                Bound::Included(k) => {
                    upper_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k))
                }
                Bound::Excluded(k) => {
                    lower_bound(how, &leaf.prefixes, &leaf.keys, &SearchKey::new(k))
                }
            }
        };
        let first = end.saturating_sub(budget.saturating_add(PREFETCH_AHEAD));
        for i in (first.max(end.saturating_sub(PREFETCH_AHEAD))..end).rev() {
            prefetch_record(leaf, i);
        }
        let records_before_end = leaf.keys[..end].iter().zip(&leaf.values[..end]);
        for (i, (key, value)) in records_before_end.enumerate().rev() {
            if i >= first + PREFETCH_AHEAD {
                prefetch_record(leaf, i - PREFETCH_AHEAD);
            }
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
            slot = i;
        }
        finished = finished || (!cut_short && (!has_fence || below_lower(fence, lower)));
    }
    StepEnd {
        finished,
        cut_short,
        slot,
    }
}

/// Prefetches record `i`'s boxed key and value.
#[inline]
fn prefetch_record(leaf: &NodeBody, i: usize) {
    leaf.keys[i].prefetch();
    leaf.values[i].prefetch();
}
