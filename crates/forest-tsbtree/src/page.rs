//! Views of a page state (a chain folded into what a base page would hold) and consolidation
//! (Bw-tree §III-B: Update-R of the folded state).

use crate::node::{IndexBase, Kind, LeafBase, Node, Term, INFINITY};
use crate::version::{self, Record};
use forest_llama::Pid;

/// A leaf state folded.
pub(crate) struct LeafView {
    pub low: Box<[u8]>,
    pub high: Option<Box<[u8]>>,
    pub side: Option<Pid>,
    pub start: u64,
    pub end: u64,
    pub history: Option<Pid>,
    /// Sorted by (key, ts).
    pub records: Vec<Record>,
}

impl LeafView {
    pub fn into_base(self) -> LeafBase {
        LeafBase {
            low: self.low,
            high: self.high,
            side: self.side,
            start: self.start,
            end: self.end,
            history: self.history,
            records: self.records,
        }
    }

    /// Whether this is a historical page (§III-A1: its end is a split time, not infinity).
    pub fn is_historical(&self) -> bool {
        self.end != INFINITY
    }
}

/// Folds a leaf chain: versions are added, a time split keeps the versions alive from its
/// time on (and moves the page's start and history link), a key split cuts the keys it moved.
pub(crate) fn leaf_view(head: &Node) -> LeafView {
    let chain: Vec<&Node> = head.chain().collect();
    let Some((base, deltas)) = chain.split_last() else {
        unreachable!("a chain has at least its head")
    };
    let Kind::Leaf(b) = &base.kind else {
        panic!("leaf chain ends in a non-leaf base")
    };
    let mut view = LeafView {
        low: b.low.clone(),
        high: b.high.clone(),
        side: b.side,
        start: b.start,
        end: b.end,
        history: b.history,
        records: b.records.clone(),
    };
    let mut sorted = true;
    for delta in deltas.iter().rev() {
        match &delta.kind {
            Kind::Version(r) => {
                view.records.push(r.clone());
                sorted = false;
            }
            Kind::KeySplit { sep, q } => {
                if !sorted {
                    version::sort(&mut view.records);
                    sorted = true;
                }
                view.records.retain(|r| r.key < *sep);
                view.high = Some(sep.clone());
                view.side = Some(*q);
            }
            Kind::TimeSplit { t, h } => {
                if !sorted {
                    version::sort(&mut view.records);
                    sorted = true;
                }
                view.records = version::alive_from(&view.records, *t);
                view.start = *t;
                view.history = Some(*h);
            }
            Kind::Flush(_) => {}
            _ => panic!("index delta on a leaf chain"),
        }
    }
    if !sorted {
        version::sort(&mut view.records);
    }
    view
}

/// An index state folded.
pub(crate) struct IndexView {
    pub low: Box<[u8]>,
    pub high: Option<Box<[u8]>>,
    pub side: Option<Pid>,
    pub start: u64,
    pub end: u64,
    pub history: Option<Pid>,
    /// Sorted by (key, ts).
    pub entries: Vec<Term>,
}

impl IndexView {
    pub fn into_base(self) -> IndexBase {
        IndexBase {
            low: self.low,
            high: self.high,
            side: self.side,
            start: self.start,
            end: self.end,
            history: self.history,
            entries: self.entries,
        }
    }

    /// Whether this is a historical index page (its end is a split time).
    pub fn is_historical(&self) -> bool {
        self.end != INFINITY
    }
}

/// Inserts `term` at its (key, ts) place.
pub(crate) fn insert_term(entries: &mut Vec<Term>, term: Term) {
    let at = entries.partition_point(|e| (&e.key, e.ts) < (&term.key, term.ts));
    entries.insert(at, term);
}

/// Folds an index chain.
pub(crate) fn index_view(head: &Node) -> IndexView {
    let chain: Vec<&Node> = head.chain().collect();
    let Some((base, deltas)) = chain.split_last() else {
        unreachable!("a chain has at least its head")
    };
    let Kind::Index(b) = &base.kind else {
        panic!("index chain ends in a non-index base")
    };
    let mut view = IndexView {
        low: b.low.clone(),
        high: b.high.clone(),
        side: b.side,
        start: b.start,
        end: b.end,
        history: b.history,
        entries: b.entries.clone(),
    };
    for delta in deltas.iter().rev() {
        match &delta.kind {
            Kind::KeyTerm(term) => insert_term(&mut view.entries, term.clone()),
            Kind::TimeTerm { key, t, hist, cur } => {
                // The current term of `cur` (its key's latest), not a stale term naming a
                // reused PID (`retention.rs`).
                if let Some(e) = view
                    .entries
                    .iter_mut()
                    .rev()
                    .find(|e| e.pid == *cur && e.key == *key)
                {
                    e.pid = *hist;
                }
                insert_term(
                    &mut view.entries,
                    Term {
                        key: key.clone(),
                        ts: *t,
                        pid: *cur,
                    },
                );
            }
            Kind::IndexSplit { sep, q } => {
                view.entries.retain(|e| e.key < *sep);
                view.high = Some(sep.clone());
                view.side = Some(*q);
            }
            Kind::IndexTimeSplit { t, h } => {
                view.entries = terms_alive_from(&view.entries, *t);
                view.start = *t;
                view.history = Some(*h);
            }
            Kind::Flush(_) => {}
            _ => panic!("leaf delta on an index chain"),
        }
    }
    view
}

/// The terms of sorted `entries` alive at time `t` or later: per key, the latest term before
/// `t` unless a term of that key starts at or before `t`, and every term from `t` on (the
/// current page of an index time split at `t`). A term superseded exactly at `t` is dropped:
/// the search rule never picks it at `t` or later.
pub(crate) fn terms_alive_from(entries: &[Term], t: u64) -> Vec<Term> {
    entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            e.ts >= t
                || !entries
                    .get(i + 1)
                    .is_some_and(|n| n.key == e.key && n.ts <= t)
        })
        .map(|(_, e)| e.clone())
        .collect()
}

/// Where a page state (leaf or index) starts in time: the newest time split's time, else the
/// base's start.
pub(crate) fn page_start(head: &Node) -> u64 {
    for n in head.chain() {
        match &n.kind {
            Kind::TimeSplit { t, .. } | Kind::IndexTimeSplit { t, .. } => return *t,
            Kind::Leaf(b) => return b.start,
            Kind::Index(b) => return b.start,
            _ => {}
        }
    }
    unreachable!("a chain ends in a base page")
}

/// A historical page's time range `[start, end)` as its base holds it (historical pages have
/// no deltas); for a current page, its base's.
pub(crate) fn time_range(head: &Node) -> (u64, u64) {
    match &head.base_node().kind {
        Kind::Leaf(b) => (b.start, b.end),
        Kind::Index(b) => (b.start, b.end),
        _ => unreachable!("a chain ends in a base page"),
    }
}

/// A page's key range `[low, high)` as its base holds it (None: no high key).
pub(crate) fn key_range(head: &Node) -> (&[u8], Option<&[u8]>) {
    match &head.base_node().kind {
        Kind::Leaf(b) => (&b.low, b.high.as_deref()),
        Kind::Index(b) => (&b.low, b.high.as_deref()),
        _ => unreachable!("a chain ends in a base page"),
    }
}

/// The current term (its key's latest) naming `pid` in sorted `entries`.
pub(crate) fn current_term(entries: &[Term], pid: Pid) -> Option<&Term> {
    entries
        .iter()
        .enumerate()
        .find(|(i, e)| e.pid == pid && entries.get(i + 1).is_none_or(|n| n.key != e.key))
        .map(|(_, e)| e)
}

/// Whether a page state is historical (its base ends at a split time; only bases can be).
pub(crate) fn is_historical(head: &Node) -> bool {
    match &head.base_node().kind {
        Kind::Leaf(b) => b.end != INFINITY,
        Kind::Index(b) => b.end != INFINITY,
        _ => false,
    }
}

/// Bytes a view's records take (for stats).
pub(crate) fn record_bytes(records: &[Record]) -> usize {
    records
        .iter()
        .map(|r| r.key.len() + r.value.as_ref().map_or(0, |v| v.len()) + 8)
        .sum()
}
