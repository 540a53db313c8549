//! Time splits (TSBw-tree §III-A3, §IV-B1) of leaves, as Algorithm 1's two steps: a
//! time-split delta on the current page P pointing to the new historical page Q, then a
//! time-term delta on the parent.
//!
//! - Which page keeps P's PID: the current one, as in the TSB-tree. History goes to the new
//!   PID Q (`h` in the delta); the current page keeps its PID, so the current index term and
//!   every side link to P stay valid, and a historical page's PID never changes after its split
//!   (§IV-A2: only its physical location may move, in a later increment).
//! - What goes where ([`split_versions`], Fig. 3): the historical page gets every version that
//!   began before the split time T; the current page gets every version alive at T or later,
//!   so versions that cross T are in both. A historical page is installed once and never
//!   updated (debug builds assert that no delta is ever prepended to one).
//! - The split time: in memory, a tick of the engine's clock taken after reading P, so every
//!   version on P is before it and every later write to P (which must CAS onto a state that
//!   includes the split delta) is after it. With a store, §IV-B1's EOSL-TS replaces it
//!   ([`crate::TsbTree::split_time`] is the hook).
//! - The parent's change: the term that led to P (P's current term) now leads to Q, and a new
//!   current term `(P's low key, T, P)` is added. It is skipped when P's current term is
//!   already at or after T (a later time split of P got there first), so terms never go back
//!   in time.
//! - Index pages do not time split in this increment (they key split only and hold terms of
//!   all times), so no current term ever has to go into a historical index page (§IV-B2's
//!   concern); §IV-B2's per-level list of active time splits comes with index time splits.

use crossbeam_epoch::{Guard, Shared};
use forest_llama::Pid;

use crate::node::{Kind, LeafBase, Node};
use crate::page::LeafView;
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
    /// The time at which to split a data page now: the clock's next tick (module doc). The
    /// store's EOSL-TS (§IV-B1) will come in here.
    pub fn split_time(&self) -> u64 {
        self.clock.tick()
    }

    /// Time-splits leaf `pid` (state `state`, folded into `view`). Returns the current page's
    /// version count after the split, or None when the CAS failed.
    pub(crate) fn time_split_leaf(
        &self,
        pid: Pid,
        head: &Node,
        state: Shared<'_, Node>,
        view: &LeafView,
        guard: &Guard,
    ) -> Option<usize> {
        let t = self.split_time();
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
            self.table.free(q, guard);
            self.stats.failed_splits.incr();
            return None;
        }
        self.stats.time_splits.incr();
        forest_core::pause::pause_point("time_split:leaf-split-installed");
        self.help_time_split(pid, self.read_live(pid, guard), &view.low, guard);
        Some(current_count)
    }

    /// Step 2 of leaf `pid`'s newest time split (its state `head`, its low key `low`): the
    /// parent's current term for it moves to the historical page and a new current term at
    /// the split time is added. Nothing to do for a root leaf.
    pub(crate) fn help_time_split(&self, pid: Pid, head: &Node, low: &[u8], guard: &Guard) {
        let Some((t, hist)) = newest_time_split(head) else {
            return;
        };
        loop {
            let Some((ppid, state, parent)) = self.find_node(low, 1, guard) else {
                return; // a root leaf: its history link is the only path, and enough
            };
            let view = crate::page::index_view(parent);
            let Some(current) = view.entries.iter().find(|e| e.pid == pid) else {
                return; // not this parent's child (a root leaf that just grew a root: retried by the next writer)
            };
            if current.ts >= t || view.entries.iter().any(|e| e.pid == hist) {
                return;
            }
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
                self.after_post(ppid, guard);
                return;
            }
            self.stats.cas_failures.incr();
        }
    }
}

/// The time and historical page of the newest time split in a leaf chain (or its base).
fn newest_time_split(head: &Node) -> Option<(u64, Pid)> {
    for n in head.chain() {
        match &n.kind {
            Kind::TimeSplit { t, h } => return Some((*t, *h)),
            Kind::Leaf(b) => return b.history.map(|h| (b.start, h)),
            _ => {}
        }
    }
    None
}
