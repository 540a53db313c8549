//! Range scans in both orders (Bw-tree §III-C).
//!
//! A scan keeps a cursor (the last key handed out). It descends to the leaf holding the next
//! keys, copies that page's live records within the range into a record vector, leaves the
//! epoch, and hands the records out one by one, never holding a pin while `visit` runs. Before
//! each next-record it checks whether the page changed since the vector was built (its
//! mapping-table word moved); if so it rebuilds the vector from the cursor, so an update to
//! the unreturned part is seen. Each next-record is atomic; the scan as a whole is not.
//!
//! Choices the paper leaves open:
//! - "Has the unreturned subrange changed" is checked as "has the page's state changed" (its
//!   address, and the node's stamp, since freed nodes are recycled: an address alone could
//!   come back at the same page), which is cheaper than inspecting the new deltas and errs on
//!   the side of rebuilding.
//! - Descending scans find the page holding the greatest keys below the cursor with the same
//!   descent, comparing strictly ([`Target::Below`]).

use std::ops::{Bound, ControlFlow};

use forest_core::index::{below_lower, in_bounds, past_upper};
use forest_core::{Order, Visitor};

use crate::consolidate::view;
use crate::get::{Path, Target};
use crate::BwTree;

/// A record copied out of the tree.
type OwnedRecord = (Box<[u8]>, Box<[u8]>);

/// One page's worth of records, copied out of the tree.
struct Batch {
    records: Vec<OwnedRecord>,
    pid: forest_llama::Pid,
    /// The page's state the records came from: its address and stamp (see `Node::stamp`).
    state_word: usize,
    stamp: u32,
    /// The page's low key (descending scans continue below it).
    low: Box<[u8]>,
    /// The page's high key (ascending scans continue from it); `None`: rightmost page.
    high: Option<Box<[u8]>>,
}

impl BwTree {
    pub(crate) fn scan_range(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        match order {
            Order::Ascending => self.scan_ascending(lower, upper, visit),
            Order::Descending => self.scan_descending(lower, upper, visit),
        }
    }

    fn scan_ascending(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, visit: &mut Visitor<'_>) {
        // The cursor: records handed out next lie above it.
        let mut cursor: Bound<Box<[u8]>> = lower.map(Into::into);
        loop {
            let from = match &cursor {
                Bound::Included(k) | Bound::Excluded(k) => &**k,
                Bound::Unbounded => &[][..],
            };
            let batch = self.snapshot(Target::At(from), |key| {
                in_bounds(key, bound_ref(&cursor), upper)
            });
            match self.hand_out(&batch, batch.records.iter(), visit) {
                HandOut::Stopped => return,
                HandOut::Changed(last) => {
                    if let Some(last) = last {
                        cursor = Bound::Excluded(last);
                    }
                    continue;
                }
                // The next cursor comes from the page's high key below.
                HandOut::Done => {}
            }
            match batch.high {
                // Every record of this page lies below its high key, so the rest starts there.
                Some(high) if !past_upper(&high, upper) => cursor = Bound::Included(high),
                _ => return,
            }
        }
    }

    fn scan_descending(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, visit: &mut Visitor<'_>) {
        let mut cursor: Bound<Box<[u8]>> = upper.map(Into::into);
        loop {
            let target = match &cursor {
                Bound::Included(k) => Target::At(k),
                Bound::Excluded(k) => Target::Below(Some(k)),
                Bound::Unbounded => Target::Below(None),
            };
            if matches!(&cursor, Bound::Excluded(k) if k.is_empty()) {
                return; // nothing lies below the empty key
            }
            let batch = self.snapshot(target, |key| in_bounds(key, lower, bound_ref(&cursor)));
            match self.hand_out(&batch, batch.records.iter().rev(), visit) {
                HandOut::Stopped => return,
                HandOut::Changed(last) => {
                    if let Some(last) = last {
                        cursor = Bound::Excluded(last);
                    }
                    continue;
                }
                // The next cursor comes from the page's low key below.
                HandOut::Done => {}
            }
            // Continue with the keys below the page's low key, if the range goes there.
            if batch.low.is_empty() || below_lower(&batch.low, lower) {
                return;
            }
            if let Bound::Included(l) = lower {
                if &*batch.low == l {
                    return;
                }
            }
            cursor = Bound::Excluded(batch.low);
        }
    }

    /// Copies the live records of the leaf holding `target` that pass `keep`.
    fn snapshot(&self, target: Target<'_>, keep: impl Fn(&[u8]) -> bool) -> Batch {
        let guard = &crossbeam_epoch::pin();
        let mut path = Path::new();
        let (pid, state, node) = self.descend_to_leaf(target, &mut path, guard);
        let v = view(node);
        let records = v
            .records
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|&(k, val)| (Box::from(k), Box::from(val)))
            .collect();
        let (low, high) = (v.low.into(), v.high.map(Into::into));
        // A consolidation of the state just copied holds the same records: the batch follows
        // it, so the first next-record does not take it for a change.
        let state = self
            .consolidate_after_read(pid, state, node, guard)
            .unwrap_or(state);
        Batch {
            records,
            pid,
            state_word: state.as_raw() as usize,
            stamp: crate::gc::node_ref(state).stamp,
            low,
            high,
        }
    }

    /// Whether `batch`'s page has another state than the one its records came from: another
    /// address, or a recycled allocation at the same address (another stamp).
    fn page_changed(&self, batch: &Batch) -> bool {
        let guard = &crossbeam_epoch::pin();
        // The raw word first: the PID may have been freed (merged away) and reused as a free
        // list link since the copy, which is no state to read. Equal to the copied state's
        // address after the pin, it is a live state, and a PID freed later is free-listed only
        // after this pin's epoch, so the read below sees a state or nothing.
        if self.table.read_word(batch.pid) != batch.state_word {
            return true;
        }
        match crate::gc::read_node(&self.table, batch.pid, guard) {
            Some((state, node)) => {
                state.as_raw() as usize != batch.state_word || node.stamp != batch.stamp
            }
            None => true,
        }
    }

    /// Hands out `records` (in scan order) until the end, a stop, or a change to the page.
    fn hand_out<'b>(
        &self,
        batch: &Batch,
        records: impl Iterator<Item = &'b OwnedRecord>,
        visit: &mut Visitor<'_>,
    ) -> HandOut {
        let mut last: Option<Box<[u8]>> = None;
        for (key, value) in records {
            // §III-C: before each next-record, check the page for updates since the copy.
            if last.is_some() && self.page_changed(batch) {
                return HandOut::Changed(last);
            }
            if visit(key, value) == ControlFlow::Break(()) {
                return HandOut::Stopped;
            }
            last = Some(key.clone());
        }
        HandOut::Done
    }
}

enum HandOut {
    Stopped,
    /// The page changed; the last key handed out, if any.
    Changed(Option<Box<[u8]>>),
    /// All records handed out.
    Done,
}

fn bound_ref(bound: &Bound<Box<[u8]>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}
