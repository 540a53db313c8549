//! Time splits (TSBw-tree §III-A3, §IV-B) of leaves and index pages, as Algorithm 1's two
//! steps: a time-split delta on the current page P pointing to the new historical page Q,
//! then a time-term delta on the parent.
//!
//! - Which page keeps P's PID: the current one, as in the TSB-tree. History goes to the new
//!   PID Q (`h` in the delta); the current page keeps its PID, so the current index term and
//!   every side link to P stay valid, and a historical page's PID never changes after its split
//!   (§IV-A2: only its physical location may move, in a later increment).
//! - What goes where ([`split_versions`], Fig. 3): the historical page gets every version that
//!   began before the split time T; the current page gets every version alive at T or later,
//!   so versions that cross T are in both. A historical page is installed once and never
//!   updated (debug builds assert that no delta is ever prepended to one).
//! - The split time of a leaf: in memory, the clock's newest timestamp, read after reading
//!   P, so every version on P is at or before it (one at it stays current) and every later
//!   write to P (which must CAS onto a state that includes the split delta, so it takes its
//!   timestamp after) is at or after it; no split when that is P's own start. With a store,
//!   §IV-B1's EOSL-TS bounds it ([`crate::TsbTree::split_time`]): a store's units take their
//!   timestamps under their shard's lock and apply later, several shards at once, so the
//!   split time is at most the oldest timestamp taken and not yet applied
//!   ([`forest_core::InFlight`]); such a version lands at or after the split, in the current
//!   page, never in the historical one. The paper's EOSL-TS is "below which no update is
//!   outstanding"; forest takes it as that oldest outstanding timestamp itself, since a version
//!   at exactly the split time belongs to the current page.
//! - The parent's change: the term that led to P (P's current term) now leads to Q, and a new
//!   current term `(P's low key, T, P)` is added. It is skipped when P's current term is
//!   already at or after T (a later time split of P got there first), so terms never go back
//!   in time. A root has no parent: its time split grows a new root over `(ε, 0, Q)` and
//!   `(ε, T, P)`, so that an as-of search never walks a root's chain of history links (a
//!   single hot key on a root leaf would otherwise make every old read walk all its splits).
//!
//! **Index time splits** (the paper's index terms `(key, ts, PID)`, several per key, at most
//! one current: each key's latest). An index page I time-splits at T like a leaf
//! ([`page::terms_alive_from`]): the historical index page Q gets every term that began before
//! T; I keeps the terms alive at T or later (each key's latest term before T unless a term
//! of that key starts at or before T, and every term from T on), keeps its PID, and starts at
//! T with a history link to Q. I's parent changes as for a leaf. A search at time t reaches Q
//! through the parent's term once it is moved, or through I's history link before (`as_of.rs`:
//! key range, then time, then term), and in Q picks the term the rule picks in I before the
//! split. An index page over `max_index_entries` terms follows the leaves' policy
//! ([`crate::TsbTree::split_index`]), so one key's terms, which a key split cannot divide,
//! move to historical index pages, and a root's time split grows the tree: the index pages
//! stay bounded and the height grows with the log of the history (`tests/index_time_split.rs`).
//!
//! **The index split time** ([`crate::TsbTree::index_split_time`]) is the smaller of two
//! bounds; both keep a historical index page free of any term that could still change:
//! - §IV-B2 (`split_list.rs`): no later than the smallest split time of the level below's
//!   active time splits whose terms go to I (for leaves, else the newest they had), so a
//!   term still to come from below is at or after T and goes to the current page I, never
//!   to Q.
//! - The TSB-tree's rule (§IV-A1): no later than the oldest current child's start (the
//!   smallest time among I's current terms). Forest needs it because the current page keeps
//!   its PID: the next time split of a child whose current term crossed T would repoint that
//!   term, also in Q, which must not change; and a stale term in Q would make as-of searches
//!   through it walk the child's history links, one per split since. The paper's TSBw-tree
//!   avoids the rule by never changing historical terms (§IV-A2), a choice forest did not make.
//!
//! Every current term's time is its child's start (time terms, key terms and root growth all
//! post it so), and a child's next split is after its start, so under the second rule every
//! later term posted on I is at or after T: in forest the second rule implies the first (an
//! active split's time is after its page's start, so the list never binds below the second
//! rule), and the list is the paper's guard kept alongside, at one CAS per time split and a
//! scan of the active splits per index time split. [`crate::TsbTree::check_post`] counts any
//! term posted before its page's start (`late_terms`, asserted 0 by the tests), and
//! [`crate::TsbTree::check_structure`] that no historical index page leads to a current page.
//! The paper says both "earlier than" and "= min" for the split time; forest takes "= min"
//! (a term at exactly T belongs to I, whose range `[T, ∞)` includes T).
//!
//! An index page's split time can be held back by a child whose time split is half done (its
//! current term still at its old start): an index page over its limit first posts that
//! split's term (help-along, [`crate::TsbTree::split_index`]), as a writer of the child's keys
//! would; only the child's own writers reach it otherwise, and a hot key has one writer
//! whose thread may be descheduled. Likewise by a key split below whose term is not posted
//! yet (its split-list entry holds the page at the left page's old start, `split_list.rs`):
//! the page posts it ([`crate::TsbTree::split_index`]), since the left page's writers never
//! follow the side link that would make them post it. It can also be held back by a child
//! that never time-splits again (its term's time is the oldest). The page then key-splits if
//! it can, else stays over its limit until a later post.

use crossbeam_epoch::{Guard, Shared};
use forest_llama::Pid;

use crate::node::{IndexBase, Kind, LeafBase, Node, Term};
use crate::page::{self, IndexView, LeafView};
use crate::split_list::Entry;
use crate::version::{self, Record};
use crate::TsbTree;

/// Splits sorted versions at time `t` (Fig. 3): `(historical, current)`, where the historical
/// page gets the versions that began before `t` and the current page those alive at `t` or
/// later. Versions that cross `t` are in both.
pub fn split_versions_pub(records: &[Version], t: u64) -> SplitOutcome {
    let mut recs: Vec<Record> = records
        .iter()
        .map(|(k, ts, v)| Record::new(k, *ts, v.as_deref()))
        .collect();
    version::sort(&mut recs);
    let (h, c) = split_versions(&recs, t);
    let out = |rs: Vec<Record>| {
        rs.into_iter()
            .map(|r| (r.key.into_vec(), r.ts, r.value.map(|v| v.into_vec())))
            .collect()
    };
    SplitOutcome {
        historical: out(h),
        current: out(c),
    }
}

/// What [`split_versions_pub`] returns: each side's versions as (key, timestamp, value).
#[derive(Debug, PartialEq, Eq)]
pub struct SplitOutcome {
    pub historical: Vec<Version>,
    pub current: Vec<Version>,
}

/// A version as (key, timestamp, value or None for a tombstone).
pub type Version = (Vec<u8>, u64, Option<Vec<u8>>);

/// See [`split_versions_pub`].
pub(crate) fn split_versions(records: &[Record], t: u64) -> (Vec<Record>, Vec<Record>) {
    let historical = records.iter().filter(|r| r.ts < t).cloned().collect();
    (historical, version::alive_from(records, t))
}

impl TsbTree {
    /// The time at which to split a data page now: the newest timestamp handed out or put
    /// (module doc), without moving the clock, or §IV-B1's EOSL-TS when a store has
    /// timestamps in flight: the oldest taken and not yet applied, if lower. Not a new tick:
    /// a store's redo puts old versions in timestamp order (`stamped.rs`), and a wall-clock
    /// split time would leave the next ones below their page's start; and not one above the
    /// newest: the other versions of a store's atomic batch share its timestamp and may
    /// still come. A writer whose CAS comes after the split took its timestamp again after
    /// reading the split page, so it is at or above; a store's unit in flight is at or above
    /// by EOSL-TS, so its version never has to go into the historical page.
    ///
    /// The clock is read before the units in flight: a unit marks its slot before it ticks
    /// (an RMW of the clock), so a clock value at or after its tick makes its mark visible
    /// here, and one before its tick is below its timestamp.
    pub fn split_time(&self) -> u64 {
        let last = self.clock.last();
        match self.in_flight.get().and_then(|s| s.oldest_unapplied()) {
            Some(oldest) => last.min(oldest),
            None => last,
        }
    }

    /// Time-splits leaf `pid` (state `state`, folded into `view`). Returns the current page's
    /// version count after the split, or None when it did not split (the CAS failed).
    pub(crate) fn time_split_leaf(
        &self,
        pid: Pid,
        head: &Node,
        state: Shared<'_, Node>,
        view: &LeafView,
        guard: &Guard,
    ) -> Option<usize> {
        // §IV-B2: on level 0's list before the split begins, with its time chosen there.
        let active = self.split_list(0).begin(&view.low, pid, || {
            // A page that started at the newest timestamp (a batch's versions share it)
            // has no history to move out yet.
            Some(self.split_time()).filter(|&t| t > view.start)
        })?;
        let t = active.ts();
        let (historical, current) = split_versions(&view.records, t);
        self.stats.split_attempts.incr();
        let q = self.table.allocate();
        let count = historical.len();
        let base = LeafBase {
            low: view.low.clone(),
            high: view.high.clone(),
            side: None,
            start: view.start,
            end: t,
            history: view.history,
            records: historical,
        };
        self.table
            .install_new(q, Node::base(Kind::Leaf(base), 0, count), guard);
        let current_count = current.len();
        let delta = Node::delta(head, state, Kind::TimeSplit { t, h: q }, current_count);
        if self.table.update_d(pid, state, delta, guard).is_err() {
            self.free_page(q, guard);
            self.stats.failed_splits.incr();
            active.finish();
            return None;
        }
        self.stats.time_splits.incr();
        self.register_historical(q, t, guard);
        forest_core::pause::pause_point("time_split:leaf-split-installed");
        self.help_time_split(pid, self.read_live(pid, guard), &view.low, guard);
        active.finish();
        Some(current_count)
    }

    /// Step 2 of page `pid`'s newest time split (leaf or index; its state `head`, its low key
    /// `low`): the parent's current term for it moves to the historical page and a new
    /// current term at the split time is added. A root grows a new root over the historical
    /// page and itself, so that as-of searches never walk a root's history links.
    pub(crate) fn help_time_split(&self, pid: Pid, head: &Node, low: &[u8], guard: &Guard) -> bool {
        let Some((t, hist)) = newest_time_split(head) else {
            return false;
        };
        let level = head.level;
        loop {
            let Some((ppid, state, parent)) = self.find_node(low, level + 1, guard) else {
                if self.root_pid() != pid {
                    return false; // a right page whose own term is not posted yet: see below
                }
                let entries = vec![
                    Term {
                        key: Box::default(),
                        ts: 0,
                        pid: hist,
                    },
                    Term {
                        key: Box::default(),
                        ts: t,
                        pid,
                    },
                ];
                if self.install_root(pid, level, entries, guard) {
                    self.split_list(level).finish_posted(pid, t);
                    return true;
                }
                continue; // the root grew meanwhile: post on the new root
            };
            let view = crate::page::index_view(parent);
            let Some(current) = page::current_term(&view.entries, pid) else {
                // Not this parent's child yet: a right page whose key-split term is pending.
                // That term is posted with the page's start as it is then, and the history
                // link covers the times before.
                return false;
            };
            // Posted: P's term starts at `t`, or H has a term here. Not H's PID once retention
            // freed H (`t` at or below the threshold): the PID may name another page now.
            let threshold = self.retention_threshold();
            let hist_posted = view.entries.iter().enumerate().any(|(i, e)| {
                e.pid == hist && crate::retention::term_end(&view.entries, i, view.end) > threshold
            });
            if current.ts >= t || hist_posted {
                self.split_list(level).finish_posted(pid, t);
                return false;
            }
            self.check_post(&view, t, current.ts);
            let delta = Node::delta(
                parent,
                state,
                Kind::TimeTerm {
                    key: current.key.clone(),
                    t,
                    hist,
                    cur: pid,
                },
                view.entries.len() + 1,
            );
            self.stats.cas_attempts.incr();
            if self.table.update_d(ppid, state, delta, guard).is_ok() {
                self.split_list(level).finish_posted(pid, t);
                self.after_post(ppid, guard);
                return true;
            }
            self.stats.cas_failures.incr();
        }
    }

    /// Checks a post on index page `view`: the new term's time `ts` and the time `repointed`
    /// of the term a time split repoints are at or after the page's start. Otherwise the term
    /// would belong in the page's historical index page, which is never updated (§IV-B); the
    /// split-time rules below make it impossible, and this counts (and in debug builds
    /// panics on) any breach.
    pub(crate) fn check_post(&self, view: &IndexView, ts: u64, repointed: u64) {
        if ts < view.start || repointed < view.start {
            self.stats.late_terms.incr();
            debug_assert!(
                false,
                "a term at {ts} (repointing one at {repointed}) posted on an index page \
                 starting at {}: it belongs in a historical index page",
                view.start
            );
        }
    }

    /// The latest time at which index page `view` (at `level` >= 1) may time-split:
    /// - §IV-B2: no later than [`crate::split_list::SplitList::bound`] of the level below, so
    ///   that every term still to come from a time split below is at or after it;
    /// - the TSB-tree's rule (§IV-A1): no later than the start of its oldest current child,
    ///   i.e. the smallest time of the page's current terms (each key's latest), so that no
    ///   term leading to a current page is copied into the historical index page (module doc).
    pub(crate) fn index_split_time(&self, level: u32, view: &IndexView) -> u64 {
        let guard = &crossbeam_epoch::pin();
        let doomed = |e: &Entry| match e.key_split {
            // A time split: another split of its page got in first.
            None => self
                .read_node(e.pid, guard)
                .is_some_and(|(_, page)| page::page_start(page) > e.ts),
            // A key split: its CAS failed or will (`split_list.rs`); the state is read before
            // the side links, so a CAS that succeeded before the read is found by the walk.
            Some(origin) => {
                let now = self.read_node(origin.left, guard);
                now.is_none_or(|(state, _)| state.as_raw() as usize != origin.state)
                    && !self.key_split_installed(origin.left, &e.key, e.pid, guard)
            }
        };
        let below = self
            .split_list(level - 1)
            .bound(&view.low, view.high.as_deref(), doomed);
        below.min(oldest_current(view))
    }

    /// Splits an index page over its limit, by the leaves' policy (crate doc): time when at
    /// least `time_split_percent` % of a full page would move to a historical index page,
    /// then key too if the current part is still more than `100 - time_split_percent` % full;
    /// else key, and time when key cannot (one key's terms only). Neither may be possible
    /// (one key, and a split below pinning the split time): the page then stays over its
    /// limit until the next post tries again.
    pub(crate) fn split_index(&self, pid: Pid, guard: &Guard) {
        let Some((_, head)) = self.read_node(pid, guard) else {
            return;
        };
        let view = page::index_view(head);
        if self.help_oldest_child(&view, guard) || self.help_key_splits(head.level, &view, guard) {
            return; // the help posted on this page, and that post split it as needed
        }
        let max = self.config.max_index_entries;
        let pct = self.config.time_split_percent as usize;
        let t = self.index_split_time(head.level, &view);
        let movable = if t > view.start {
            view.entries.len() - page::terms_alive_from(&view.entries, t).len()
        } else {
            0
        };
        if movable * 100 >= max * pct {
            let Some(current) = self.time_split_index(pid, guard) else {
                self.key_split_index(pid, guard);
                return;
            };
            if let Some((state, head)) = self.read_node(pid, guard) {
                self.consolidate(pid, state, head, guard);
            }
            if current * 100 > max * (100 - pct) {
                self.key_split_index(pid, guard);
            }
        } else if !self.key_split_index(pid, guard) && movable > 0 {
            self.time_split_index(pid, guard);
        }
    }

    /// Help-along (Bw-tree §IV-C) for the page's split time: when the oldest current term of
    /// `view` leads to a child whose time split is half done (the term older than the child's
    /// start), posts that split's term, which would otherwise hold the page's split time back
    /// until the split's own thread comes back (no other thread may write the child's keys).
    /// Returns whether it posted.
    fn help_oldest_child(&self, view: &IndexView, guard: &Guard) -> bool {
        let oldest = view
            .entries
            .iter()
            .enumerate()
            .filter(|(i, e)| view.entries.get(i + 1).is_none_or(|n| n.key != e.key))
            .map(|(_, e)| e)
            .min_by_key(|e| e.ts);
        let Some(term) = oldest else {
            return false;
        };
        let Some((_, child)) = self.read_node(term.pid, guard) else {
            return false;
        };
        if page::is_historical(child) || page::page_start(child) <= term.ts {
            return false;
        }
        self.stats.smo_helps.incr();
        self.help_time_split(term.pid, child, &term.key, guard)
    }

    /// Help-along for the page's split time held back by key splits below (`split_list.rs`):
    /// posts every installed key split whose term goes to this page and starts before its
    /// oldest current term, which would otherwise wait for a writer of the right page's keys
    /// (the left page's writers never follow its side link). Returns whether it posted any.
    fn help_key_splits(&self, level: u32, view: &IndexView, guard: &Guard) -> bool {
        let pending = self.split_list(level - 1).pending_key_splits(
            &view.low,
            view.high.as_deref(),
            oldest_current(view),
        );
        let mut helped = false;
        for e in pending {
            let Some(origin) = e.key_split else {
                continue;
            };
            if !self.key_split_installed(origin.left, &e.key, e.pid, guard) {
                continue; // not installed yet (or never): nothing to post
            }
            self.stats.smo_helps.incr();
            let right_start = page::page_start(self.read_live(e.pid, guard));
            self.complete_split(origin.left, level - 1, &e.key, e.pid, right_start, guard);
            helped = true;
        }
        helped
    }

    /// Time-splits index page `pid` at [`Self::index_split_time`] (module doc). Returns the
    /// current page's term count after the split, or None when it did not split (nothing to
    /// move, a split time out of its level's order, or the CAS failed).
    pub(crate) fn time_split_index(&self, pid: Pid, guard: &Guard) -> Option<usize> {
        let (state, head) = self.read_node(pid, guard)?;
        let level = head.level;
        let view = page::index_view(head);
        debug_assert!(
            !view.is_historical(),
            "a historical index page never splits"
        );
        // §IV-B2: registered on this level's list before the split begins; the time is chosen
        // after the list's header was read, so entries stay in time order.
        let active = self.split_list(level).begin(&view.low, pid, || {
            let t = self.index_split_time(level, &view);
            (t > view.start).then_some(t)
        })?;
        let t = active.ts();
        let historical: Vec<Term> = view.entries.iter().filter(|e| e.ts < t).cloned().collect();
        let current = page::terms_alive_from(&view.entries, t);
        if current.len() == view.entries.len() {
            active.finish();
            return None; // nothing would move
        }
        debug_assert!(
            historical
                .iter()
                .all(|e| view.entries.iter().any(|n| n.key == e.key && n.ts > e.ts)),
            "a historical index page never holds a current term"
        );
        self.stats.split_attempts.incr();
        let q = self.table.allocate();
        let count = historical.len();
        let base = IndexBase {
            low: view.low.clone(),
            high: view.high.clone(),
            side: None,
            start: view.start,
            end: t,
            history: view.history,
            entries: historical,
        };
        self.table
            .install_new(q, Node::base(Kind::Index(base), level, count), guard);
        let current_count = current.len();
        let delta = Node::delta(head, state, Kind::IndexTimeSplit { t, h: q }, current_count);
        if self.table.update_d(pid, state, delta, guard).is_err() {
            self.free_page(q, guard);
            self.stats.failed_splits.incr();
            active.finish();
            return None;
        }
        self.stats.index_time_splits.incr();
        self.register_historical(q, t, guard);
        forest_core::pause::pause_point("time_split:index-split-installed");
        self.help_time_split(pid, self.read_live(pid, guard), &view.low, guard);
        active.finish();
        Some(current_count)
    }
}

/// The smallest time among an index page's current terms (each key's latest): its oldest
/// current child's start.
fn oldest_current(view: &IndexView) -> u64 {
    view.entries
        .iter()
        .enumerate()
        .filter(|(i, e)| view.entries.get(i + 1).is_none_or(|n| n.key != e.key))
        .map(|(_, e)| e.ts)
        .min()
        .unwrap_or(0)
}

/// The time and historical page of the newest time split in a chain (or its base's link).
fn newest_time_split(head: &Node) -> Option<(u64, Pid)> {
    for n in head.chain() {
        match &n.kind {
            Kind::TimeSplit { t, h } | Kind::IndexTimeSplit { t, h } => return Some((*t, *h)),
            Kind::Leaf(b) => return b.history.map(|h| (b.start, h)),
            Kind::Index(b) => return b.history.map(|h| (b.start, h)),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split_list::KeySplitOrigin;
    use crate::TsbConfig;

    // Goal: a key split's split-list entry holds the index page above at its term's time
    // while its CAS may still succeed or has, and not once its left page moved on without it
    // (the CAS failed or will: nothing to post, nothing to wait for). Method: a root index
    // page over leaves that all time-split (every current term after 0), one leaf L; entries
    // registered by hand at time 0 for a right page that is not linked: with L's current
    // state as the state read (pending: the bound is 0), then with a state L no longer has
    // (doomed: the bound is the page's own). An installed split is found through the side
    // links from its left page, across the pages later splits put between.
    #[test]
    fn a_key_split_entry_bounds_until_its_cas_is_known_to_fail() {
        let tree = TsbTree::with_config(TsbConfig {
            max_records_per_page: 4,
            max_index_entries: 64,
            consolidate_threshold: 2,
            time_split_percent: 33,
        })
        .expect("valid config");
        for round in 0..20u32 {
            for k in 0..8u32 {
                tree.upsert_ts(&(k * 10).to_be_bytes(), &round.to_le_bytes())
                    .expect("small entry");
            }
        }
        let guard = &crossbeam_epoch::pin();
        let (_, _, root) = tree.root(guard);
        assert_eq!(root.level, 1, "one index level");
        let view = page::index_view(root);
        let own = tree.index_split_time(1, &view);
        assert!(own > 0, "every leaf time-split");
        let leaf = view.entries.last().expect("a term").pid;
        let (state, head) = tree.read_node(leaf, guard).expect("live");
        let sep = 1000u32.to_be_bytes();
        assert!(
            crate::descend::current_split(head).is_none(),
            "the last leaf has no side link"
        );
        let unlinked = tree.table.pid_end() as Pid; // never handed out: linked nowhere
        let pending = KeySplitOrigin {
            left: leaf,
            state: state.as_raw() as usize,
        };
        let entry = tree
            .split_list(0)
            .begin_key_split(&sep, unlinked, 0, pending);
        assert_eq!(tree.index_split_time(1, &view), 0, "its CAS may succeed");
        entry.finish();
        let stale = KeySplitOrigin {
            left: leaf,
            state: pending.state ^ 8,
        };
        let entry = tree.split_list(0).begin_key_split(&sep, unlinked, 0, stale);
        assert_eq!(
            tree.index_split_time(1, &view),
            own,
            "its CAS fails: the entry is doomed"
        );
        entry.finish();
        assert!(!tree.key_split_installed(leaf, &sep, unlinked, guard));
        // The first key's latest term: its current leaf (the terms before lead to history).
        let low_key = &view.entries[0].key;
        let first = view
            .entries
            .iter()
            .rfind(|e| e.key == *low_key)
            .expect("a term")
            .pid;
        let low = |pid| page::leaf_view(tree.read_live(pid, guard)).low;
        assert!(tree.key_split_installed(first, &low(leaf), leaf, guard));
        let first_head = tree.read_live(first, guard);
        let (high, side) = crate::descend::current_split(first_head).expect("a side link");
        assert!(tree.key_split_installed(first, &high, side, guard));
        assert!(!tree.key_split_installed(first, &low(leaf), side, guard) || side == leaf);
    }
}
