//! Search at the current time or as of time `t` (TSBw-tree §III-A1), and how a search reaches
//! history that no index term names yet.
//!
//! **Index terms.** An index term `(key, ts, PID)` names the child holding keys from `key` for
//! times from `ts`. Several terms may share a key (one per time split of that key range), at
//! most one of them current. The rule (§III-A1, extended to time): among the terms with
//! `key <= k` and `ts <= t`, take the largest key, and among its terms the largest `ts`. At the
//! current time (`t = u64::MAX`) this is the B-tree rule on the current terms. It is correct
//! because key boundaries are never removed (no merges) and a key split's right page starts at
//! its left page's start: the boundaries alive at `t` include every boundary alive earlier.
//!
//! **History links (forest's design; the paper leaves it open).** Every leaf page keeps, in
//! its base page and in its time-split delta, a link to its latest historical page, and a key
//! split copies it to the new right page (whose start is the left page's start). A historical
//! page's own link goes on to the one before it. So from any leaf whose key range holds `k`,
//! following history links while `t` is before the page's start reaches the page holding
//! `(k, t)`; the index rule only makes that walk short. This is what lets a search reach
//! history when the parent's term for a time split is not posted yet, after consolidation
//! folded the time-split delta into a base page (the link is in the base), and after a key
//! split moved versions to a new page (the new page has the link, and the new page holds
//! every version of its keys since the old page's start). A new root's left term starts at
//! the old root's start, and a term at time 0 to the old root's history link takes the times
//! before (`key_split.rs`, `time_split.rs`).
//!
//! Order of checks at a leaf: key range (side link) before time (history link), because a
//! historical page covers the key range its page had when it was split, which may be wider
//! than the page's current range but never narrower than what a search reached it for.
//!
//! **Index pages** have time ranges and history links too (`time_split.rs`, index time
//! splits), and the same order of checks: key range, then time, then the term. So a search at
//! time `t` that reaches a current index page which time-split after `t` goes on to its
//! historical index page, whether or not the parent's term for that page is posted yet.

use forest_llama::Pid;

use crate::node::{Kind, Node, Term};
use crate::page;

/// Which keys a search is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target<'a> {
    /// The page holding this key.
    At(&'a [u8]),
    /// The page holding the keys just below this one (descending scans).
    Below(&'a [u8]),
    /// The last page.
    End,
}

impl Target<'_> {
    /// Whether the target lies at or above a split key / high key `sep`.
    #[inline]
    pub fn goes_right(&self, sep: &[u8]) -> bool {
        match *self {
            Target::At(k) => k >= sep,
            Target::Below(k) => k > sep,
            Target::End => true,
        }
    }

    /// Whether a term with key `key` may hold the target.
    #[inline]
    fn admits(&self, key: &[u8]) -> bool {
        match *self {
            Target::At(k) => key <= k,
            Target::Below(k) => key < k,
            Target::End => true,
        }
    }
}

/// The term the rule picks from sorted `entries` (see the module doc).
pub(crate) fn select<'e>(entries: &'e [Term], target: Target<'_>, t: u64) -> Option<&'e Term> {
    select_at(entries, target, t).map(|i| &entries[i])
}

/// [`select`]'s term's position.
fn select_at(entries: &[Term], target: Target<'_>, t: u64) -> Option<usize> {
    let end = entries.partition_point(|e| target.admits(&e.key));
    entries[..end].iter().rposition(|e| e.ts <= t)
}

/// Where an index search goes next.
pub(crate) enum Route {
    /// Down to this child, through this term, which ends at the second field (the next term
    /// of its key's start, else the page's end: `retention.rs` checks it).
    Child(Term, u64),
    /// Right, through a side link (a split whose term is maybe not posted yet).
    Right(Pid),
    /// To the page's latest historical index page (`t` is before the page's start).
    History(Pid),
}

/// Routes `target` at time `t` through an index state: key range first (split deltas, then
/// the base's high key), then time (the newest index time split, else the base's start and
/// history link), then the term the rule picks (module doc).
pub(crate) fn route_index(head: &Node, target: Target<'_>, t: u64) -> Route {
    let mut time: Option<(u64, Option<Pid>)> = None;
    let mut base = None;
    for n in head.chain() {
        match &n.kind {
            // The newest split has the smallest separator.
            Kind::IndexSplit { sep, q } if target.goes_right(sep) => return Route::Right(*q),
            Kind::IndexTimeSplit { t: split, h } if time.is_none() => {
                time = Some((*split, Some(*h)));
            }
            Kind::Index(b) => base = Some(b),
            _ => {}
        }
    }
    let Some(b) = base else {
        panic!("index chain ends in a non-index base")
    };
    if let (Some(high), Some(side)) = (&b.high, b.side) {
        if target.goes_right(high) {
            return Route::Right(side);
        }
    }
    let (start, history) = time.unwrap_or((b.start, b.history));
    if let (true, Some(h)) = (t < start, history) {
        return Route::History(h);
    }
    let pick = |entries: &[Term]| {
        let at = select_at(entries, target, t)
            .unwrap_or_else(|| panic!("index page has no term for {target:?} at {t}"));
        Route::Child(
            entries[at].clone(),
            crate::retention::term_end(entries, at, b.end),
        )
    };
    if head.next().is_none() {
        pick(&b.entries)
    } else {
        pick(&page::index_view(head).entries)
    }
}

/// Where a leaf search goes next.
pub(crate) enum Locate {
    /// This page holds the target at the time.
    Here,
    /// To the right sibling.
    Right(Pid),
    /// To the page's latest historical page.
    History(Pid),
}

/// Whether a leaf state holds `target` at `t`, else where to go (module doc: keys first).
pub(crate) fn locate(head: &Node, target: Target<'_>, t: u64) -> Locate {
    let mut start = None;
    let mut history = None;
    for n in head.chain() {
        match &n.kind {
            Kind::KeySplit { sep, q } if target.goes_right(sep) => return Locate::Right(*q),
            Kind::TimeSplit { t: split, h } if start.is_none() => {
                start = Some(*split);
                history = Some(*h);
            }
            Kind::Leaf(b) => {
                if let (Some(high), Some(side)) = (&b.high, b.side) {
                    if target.goes_right(high) {
                        return Locate::Right(side);
                    }
                }
                if start.is_none() {
                    start = Some(b.start);
                    history = b.history;
                }
            }
            _ => {}
        }
    }
    match (start, history) {
        (Some(s), Some(h)) if t < s => Locate::History(h),
        _ => Locate::Here,
    }
}

/// The version of `key` at `t` in a leaf state that holds `key` at `t` ([`locate`] said
/// `Here`): `Some(value or None for a tombstone)`, or None when the page has no version of it
/// at or before `t`.
pub(crate) fn version_at<'n>(head: &'n Node, key: &[u8], t: u64) -> Option<Option<&'n [u8]>> {
    for n in head.chain() {
        match &n.kind {
            Kind::Version(r) if r.ts <= t && *r.key == *key => return Some(r.value.as_deref()),
            Kind::Leaf(b) => {
                let at = b.records.partition_point(|r| (&*r.key, r.ts) <= (key, t));
                return at
                    .checked_sub(1)
                    .map(|i| &b.records[i])
                    .filter(|r| *r.key == *key)
                    .map(|r| r.value.as_deref());
            }
            _ => {}
        }
    }
    None
}
