//! Retention (TSBw-tree §V-C "(1)", in memory): a threshold `T` below which history is
//! discarded. §V-C drops archived pages and reclaims their mapping entries; in memory (no
//! archive) the threshold frees historical pages, leaf and index, whose time range ends at or
//! before `T`, and their PIDs are reused.
//!
//! - `T` only grows. It is raised (SeqCst) before any page is freed, and every read loads it
//!   after pinning its epoch: a read that saw the old `T` was pinned before the frees, so the
//!   pages it may still reach are reclaimed, and their PIDs recycled, only after it unpins
//!   (forest-llama's Free defers both through crossbeam-epoch).
//! - Reads as of `t < T`, and histories from `from < T`, are refused ([`forest_core::discarded`]).
//! - Stale terms. Freed pages stay named by terms in older index pages (historical index
//!   pages are never updated, §IV-A2) and by history links, and their PIDs are recycled. So a
//!   read never follows a term or link whose time range ends at or before `T`
//!   ([`TsbTree::check_term`], [`TsbTree::check_history_link`]): a term ends where the next
//!   term of its key starts (or its page ends), a history link's page ends where the linking
//!   page starts. A read at `t >= T` never needs such a term (the term the search rule picks
//!   for `t` ends after `t`), so the check refuses only reads that `T` passed meanwhile.
//! - Which pages: every historical page is queued by its end when its time split commits;
//!   raising `T` frees the queue up to `T`. A split whose historical page ends at or before
//!   `T` already (a store's redo below its persisted threshold) frees it at once.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crossbeam_epoch::Guard;
use forest_core::sync::atomic::Ordering;
use forest_core::{discarded, Result, Timestamp};
use forest_llama::Pid;

use crate::node::Term;
use crate::TsbTree;

/// Historical pages by the end of their time range, waiting for the threshold to pass it.
#[derive(Default)]
pub(crate) struct RetireQueue {
    by_end: Mutex<BTreeMap<Timestamp, Vec<Pid>>>,
}

impl RetireQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Timestamp, Vec<Pid>>> {
        // A panic while holding it left a consistent map (single inserts and splits).
        self.by_end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Historical pages queued (not yet freed).
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }
}

/// The end of `entries[i]`'s time range in a page ending at `page_end`: the start of the next
/// term of its key, else the page's end.
pub(crate) fn term_end(entries: &[Term], i: usize, page_end: Timestamp) -> Timestamp {
    match entries.get(i + 1) {
        Some(n) if n.key == entries[i].key => n.ts,
        _ => page_end,
    }
}

impl TsbTree {
    /// The retention threshold (0: nothing discarded).
    pub fn retention_threshold(&self) -> Timestamp {
        self.retention.load(Ordering::SeqCst)
    }

    /// Raises the threshold to `t` (no change if it is at or above `t`) and frees every
    /// queued historical page ending at or before it. Returns the pages freed.
    pub fn raise_retention(&self, t: Timestamp) -> usize {
        let old = self.retention.fetch_max(t, Ordering::SeqCst);
        if t <= old {
            return 0;
        }
        let freed: Vec<Pid> = {
            let mut queue = self.retire_queue.lock();
            let later = queue.split_off(&t.saturating_add(1));
            let due = std::mem::replace(&mut *queue, later);
            due.into_values().flatten().collect()
        };
        let guard = &crossbeam_epoch::pin();
        for &pid in &freed {
            self.free_page(pid, guard);
        }
        self.stats.retired_pages.add(freed.len() as u64);
        freed.len()
    }

    /// Queues historical page `pid` ending at `end` (its time split committed), or frees it
    /// at once if the threshold is already at or past `end`.
    pub(crate) fn register_historical(&self, pid: Pid, end: Timestamp, guard: &Guard) {
        let mut queue = self.retire_queue.lock();
        // Read under the lock: a raise that passed `end` either drained the queue before
        // this insert (and we see its threshold here) or drains it after.
        if end <= self.retention_threshold() {
            drop(queue);
            self.free_page(pid, guard);
            self.stats.retired_pages.incr();
            return;
        }
        queue.entry(end).or_default().push(pid);
        drop(queue);
        self.note_historical(pid);
    }

    /// Historical pages waiting for the threshold.
    pub fn queued_historical_pages(&self) -> usize {
        self.retire_queue.len()
    }

    /// Refuses a read as of `t` below the threshold.
    pub(crate) fn check_retained(&self, t: Timestamp) -> Result<()> {
        let threshold = self.retention_threshold();
        if t < threshold {
            return Err(discarded(t, threshold));
        }
        Ok(())
    }

    /// Before a read at `t` follows a term ending at `end`: refused when the threshold has
    /// reached `end` (its page may be freed and its PID reused; module doc).
    pub(crate) fn check_term(&self, t: Timestamp, end: Timestamp) -> Result<()> {
        let threshold = self.retention_threshold();
        if end <= threshold {
            self.stats.stale_terms_refused.incr();
            return Err(discarded(t, threshold));
        }
        Ok(())
    }

    /// Before a read at `t` follows the history link of a page starting at `start`.
    pub(crate) fn check_history_link(&self, t: Timestamp, start: Timestamp) -> Result<()> {
        self.check_term(t, start)
    }
}

impl TsbTree {
    /// Terms of live index pages that the threshold has passed and whose PID now holds a
    /// page not covering the term (a recycled PID), while no thread writes (for tests: a
    /// read at or above the threshold must never follow one).
    pub fn recycled_stale_terms(&self) -> usize {
        let guard = &crossbeam_epoch::pin();
        let threshold = self.retention_threshold();
        let mut count = 0;
        self.table.for_each_state(guard, |_, state| {
            let Some(head) = crate::node::state_ref(state, guard) else {
                return;
            };
            if head.level == 0 {
                return;
            }
            let view = crate::page::index_view(head);
            for (i, e) in view.entries.iter().enumerate() {
                let end = term_end(&view.entries, i, view.end);
                if end > threshold {
                    continue;
                }
                let Some((_, child)) = self.read_node(e.pid, guard) else {
                    continue;
                };
                let (start, child_end) = crate::page::time_range(child);
                let (low, high) = crate::page::key_range(child);
                let covers = start <= e.ts
                    && end <= child_end
                    && *low <= *e.key
                    && high.is_none_or(|h| *e.key < *h);
                if !covers || child.level + 1 != head.level {
                    count += 1;
                }
            }
        });
        count
    }

    /// PIDs freed whose epoch has drained, so that the next allocations take them (on the
    /// free list), while no thread writes. A freed PID gets there only once every thread
    /// pinned at its free has unpinned, in this whole process (tests drain until it counts
    /// what they freed).
    pub fn recyclable_pids(&self) -> usize {
        self.table.pid_end() - self.table.live_count()
    }

    /// One past the highest PID ever handed out (PIDs are reused: it grows slower than the
    /// pages made).
    pub fn pid_end(&self) -> usize {
        self.table.pid_end()
    }
}
