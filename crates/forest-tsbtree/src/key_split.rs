//! Key splits (TSBw-tree §III-A2) of leaves and index pages, as Algorithm 1's two steps: a
//! split delta on P pointing to the new page Q (step 1, lines 2–13), then an index-term delta
//! on the parent (step 2, lines 15–20), completed by whoever meets the split half done.
//!
//! Algorithm 1 contradicts §II-E twice; forest's choices:
//! - §II-E allows only Allocate, Free and Update-D inside a system transaction, yet lines 3
//!   and 8 Read P and Update-R Q. In memory there is no transaction log: Read happens before
//!   the "transaction", Q is installed without a CAS (`install_new`: no one else can see Q
//!   before the split delta names it), and only the split delta is a CAS; a failed CAS Frees Q
//!   (line 12). The storage increment will log the three as one unit.
//! - Line 19 aborts and exits when the index delta fails; the text says it is retried. Here a
//!   failed CAS re-finds the parent and retries, and if this thread gives up (never: it loops)
//!   any later search that follows the side link would complete it anyway (help-along).
//!
//! A leaf key split gives Q every version of its keys (current and historical alike), the
//! left page's start and its history link (`as_of.rs`), so Q covers its keys from that start.
//! An index page split gives the right page every term with a key at or above the separator,
//! plus a copy, keyed at the separator, of each term left of it whose region crosses it (the
//! TSB-tree's duplication of index terms that span a key split); these are always terms of
//! historical pages, because the separator is a term's key and so a current boundary.

use crossbeam_epoch::Guard;
use forest_llama::Pid;

use crate::as_of::{self, Target};
use crate::node::{self, IndexBase, Kind, LeafBase, Node, Term, INFINITY};
use crate::page::{self, LeafView};
use crate::version::{self, Record};
use crate::TsbTree;

impl TsbTree {
    /// Key-splits leaf `pid` (state `state`, folded into `view`) at its median key. Returns
    /// false when it did not (too few keys, or the CAS failed).
    pub(crate) fn key_split_leaf(
        &self,
        pid: Pid,
        head: &Node,
        state: crossbeam_epoch::Shared<'_, Node>,
        view: &LeafView,
        guard: &Guard,
    ) -> bool {
        let records = &view.records;
        if version::distinct_keys(records) < 2 {
            return false;
        }
        let first = &records[0].key;
        let mut at = records.len() / 2;
        // The separator must leave a key on each side: step past versions of the first key.
        while at < records.len() && records[at].key == *first {
            at += 1;
        }
        if at == records.len() {
            return false;
        }
        // And start at a key's first version, so that all versions of a key stay together.
        while at > 0 && records[at - 1].key == records[at].key {
            at -= 1;
        }
        if at == 0 {
            return false;
        }
        let sep = records[at].key.clone();
        let right: Vec<Record> = records[at..].to_vec();
        self.stats.split_attempts.incr();
        let q = self.table.allocate();
        let right_count = right.len();
        let base = LeafBase {
            low: sep.clone(),
            high: view.high.clone(),
            side: view.side,
            start: view.start,
            end: INFINITY,
            history: view.history,
            records: right,
        };
        self.table
            .install_new(q, Node::base(Kind::Leaf(base), 0, right_count), guard);
        let delta = Node::delta(
            head,
            state,
            Kind::KeySplit {
                sep: sep.clone(),
                q,
            },
            at,
        );
        if self.table.update_d(pid, state, delta, guard).is_err() {
            self.table.free(q, guard);
            self.stats.failed_splits.incr();
            return false;
        }
        self.stats.key_splits.incr();
        forest_core::pause::pause_point("key_split:leaf-split-installed");
        self.complete_split(pid, 0, &sep, q, view.start, guard);
        true
    }

    /// Key-splits index page `pid` at its middle key. Returns whether it did.
    pub(crate) fn key_split_index(&self, pid: Pid, guard: &Guard) -> bool {
        let Some((state, head)) = node::read(&self.table, pid, guard) else {
            return false;
        };
        let view = page::index_view(head);
        let entries = &view.entries;
        let mut at = entries.len() / 2;
        while at < entries.len() && entries[at].key == entries[0].key {
            at += 1;
        }
        if at == entries.len() {
            return false; // one key's terms only: only an index time split could help
        }
        while at > 0 && entries[at - 1].key == entries[at].key {
            at -= 1;
        }
        if at == 0 || at == entries.len() {
            return false; // one key's terms only: only an index time split could help
        }
        let sep = entries[at].key.clone();
        let mut right: Vec<Term> = Vec::new();
        // Copies of the left terms whose regions cross the separator: the term the rule
        // picks for the separator at each time a term starts.
        let mut times: Vec<u64> = entries.iter().map(|e| e.ts).collect();
        times.sort_unstable();
        times.dedup();
        for t in times {
            if let Some(e) = as_of::select(entries, Target::At(&sep), t) {
                if e.key < sep && !right.iter().any(|r| r.pid == e.pid) {
                    right.push(Term {
                        key: sep.clone(),
                        ts: e.ts,
                        pid: e.pid,
                    });
                }
            }
        }
        for e in &entries[at..] {
            page::insert_term(&mut right, e.clone());
        }
        self.stats.split_attempts.incr();
        let q = self.table.allocate();
        let count = right.len();
        let base = IndexBase {
            low: sep.clone(),
            high: view.high.clone(),
            side: view.side,
            start: view.start,
            end: INFINITY,
            history: view.history,
            entries: right,
        };
        self.table
            .install_new(q, Node::base(Kind::Index(base), head.level, count), guard);
        let delta = Node::delta(
            head,
            state,
            Kind::IndexSplit {
                sep: sep.clone(),
                q,
            },
            at,
        );
        if self.table.update_d(pid, state, delta, guard).is_err() {
            self.table.free(q, guard);
            self.stats.failed_splits.incr();
            return false;
        }
        self.stats.key_splits.incr();
        forest_core::pause::pause_point("key_split:index-split-installed");
        self.complete_split(pid, head.level, &sep, q, view.start, guard);
        true
    }

    /// Step 2 of a key split of `left` (at `level`) at `sep` into `right`, whose keys start at
    /// time `right_start`: posts `(sep, right_start, right)` on the parent, or grows the root
    /// when `left` is the root. Idempotent: stops when the parent already has a term for
    /// `right`.
    pub(crate) fn complete_split(
        &self,
        left: Pid,
        level: u32,
        sep: &[u8],
        right: Pid,
        right_start: u64,
        guard: &Guard,
    ) {
        loop {
            let (root_pid, _, root) = self.root(guard);
            if root.level == level {
                assert_eq!(
                    root_pid, left,
                    "a page at the root's level that is not the root split"
                );
                if self.grow_root(left, level, sep, right, right_start, guard) {
                    return;
                }
                continue;
            }
            let Some((pid, state, head)) = self.find_node(sep, level + 1, guard) else {
                continue;
            };
            let view = page::index_view(head);
            // Posted: a current term (its key's latest) names `right`. A stale term may name
            // the PID too once retention freed its page and the PID was reused (`retention.rs`).
            if page::current_term(&view.entries, right).is_some() {
                return;
            }
            self.check_post(&view, right_start, right_start);
            let term = Term {
                key: sep.into(),
                ts: right_start,
                pid: right,
            };
            let delta = Node::delta(head, state, Kind::KeyTerm(term), view.entries.len() + 1);
            self.stats.cas_attempts.incr();
            if self.table.update_d(pid, state, delta, guard).is_ok() {
                self.after_post(pid, guard);
                return;
            }
            self.stats.cas_failures.incr();
        }
    }

    /// A new root one level up over `left` and `right`; false when the root changed first.
    /// The left page's current term starts at the left page's start, like every current term
    /// (the index time split's bound relies on it, `time_split.rs`), and a term at time 0 to
    /// its history link takes the times before, as the left page's own link would.
    fn grow_root(
        &self,
        left: Pid,
        level: u32,
        sep: &[u8],
        right: Pid,
        right_start: u64,
        guard: &Guard,
    ) -> bool {
        let (left_start, left_history) = match node::read(&self.table, left, guard) {
            Some((_, head)) => time_range_start(head),
            None => (0, None),
        };
        let mut entries = Vec::with_capacity(3);
        match left_history {
            Some(h) => {
                entries.push(Term {
                    key: Box::default(),
                    ts: 0,
                    pid: h,
                });
                entries.push(Term {
                    key: Box::default(),
                    ts: left_start,
                    pid: left,
                });
            }
            None => entries.push(Term {
                key: Box::default(),
                ts: 0,
                pid: left,
            }),
        }
        page::insert_term(
            &mut entries,
            Term {
                key: sep.into(),
                ts: right_start,
                pid: right,
            },
        );
        self.install_root(left, level, entries, guard)
    }

    /// Installs a new root at `level + 1` with `entries` in place of the root `old`; false
    /// (and the new page freed) when the root is no longer `old`.
    pub(crate) fn install_root(
        &self,
        old: Pid,
        level: u32,
        entries: Vec<Term>,
        guard: &Guard,
    ) -> bool {
        let pid = self.table.allocate();
        let count = entries.len();
        let base = IndexBase {
            low: Box::default(),
            high: None,
            side: None,
            start: 0,
            end: INFINITY,
            history: None,
            entries,
        };
        self.table
            .install_new(pid, Node::base(Kind::Index(base), level + 1, count), guard);
        if self.swap_root(old, pid) {
            true
        } else {
            self.table.free(pid, guard);
            false
        }
    }

    /// After a term was posted on index page `pid`: splits it when it is too full (by time or
    /// key, `time_split.rs`), else consolidates it (index pages are read by every search).
    pub(crate) fn after_post(&self, pid: Pid, guard: &Guard) {
        let Some((state, head)) = node::read(&self.table, pid, guard) else {
            return;
        };
        if head.record_count as usize > self.config.max_index_entries {
            self.split_index(pid, guard);
        } else if head.delta_count > 0 {
            self.consolidate(pid, state, head, guard);
        }
    }
}

/// A page state's start and history link (the newest time split's, else the base's).
pub(crate) fn time_range_start(head: &Node) -> (u64, Option<Pid>) {
    for n in head.chain() {
        match &n.kind {
            Kind::TimeSplit { t, h } | Kind::IndexTimeSplit { t, h } => return (*t, Some(*h)),
            Kind::Leaf(b) => return (b.start, b.history),
            Kind::Index(b) => return (b.start, b.history),
            _ => {}
        }
    }
    unreachable!("a chain ends in a base page")
}
