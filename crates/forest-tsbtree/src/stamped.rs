//! Versions at a given timestamp (issue 18 "Temporal API in the store"): a store takes each
//! write's timestamp with its LSN and applies it with [`TsbTree::put_version`]; recovery
//! redoes the logged writes the same way, at their logged timestamps.
//!
//! - A version is `(key, timestamp)`: creating one that is already there is a no-op, so a
//!   redo never duplicates a version.
//! - The clock moves up to every timestamp put, so a later split time (a tick of the clock,
//!   `time_split.rs`) is above every version applied: a page's history is complete when it
//!   splits, as with the engine's own writes.
//! - The caller applies each key's versions in timestamp order, and each page's too (a
//!   store: in LSN order under one log's lock). A version older than its key's newest, or than
//!   its page's start, and not already there, would have to go into history, which is never
//!   updated (§IV-A2): it is refused with an error that says so, unless it is below the
//!   retention threshold (`retention.rs`): that history is discarded, so it is a no-op.

use forest_core::{check_entry, check_key, Error, Result, Timestamp};

use crate::node::{Kind, Node};
use crate::version::Record;
use crate::{page, TsbTree};

/// The newest version's timestamp of `key` on the page whose state is `head` (None: the
/// page holds no version of it).
fn newest_ts(head: &Node, key: &[u8]) -> Option<Timestamp> {
    for n in head.chain() {
        match &n.kind {
            Kind::Version(r) if *r.key == *key => return Some(r.ts),
            Kind::Leaf(b) => {
                let at = b
                    .records
                    .partition_point(|r| (&*r.key, r.ts) <= (key, u64::MAX));
                return at
                    .checked_sub(1)
                    .map(|i| &b.records[i])
                    .filter(|r| *r.key == *key)
                    .map(|r| r.ts);
            }
            _ => {}
        }
    }
    None
}

impl TsbTree {
    /// Whether `key` has a version at exactly `ts` (in any page, current or historical).
    /// Errors: `ts` below the retention threshold (discarded).
    pub fn has_version(&self, key: &[u8], ts: Timestamp) -> Result<bool> {
        let mut found = false;
        self.catching(|| {
            self.history_of(key, ts, ts, forest_core::Order::Ascending, &mut |_, _| {
                found = true;
                std::ops::ControlFlow::Break(())
            })
        })??;
        Ok(found)
    }

    /// Creates the version `(key, ts)` (see the module doc); false when it was there.
    pub fn put_version(&self, key: &[u8], ts: Timestamp, value: Option<&[u8]>) -> Result<bool> {
        self.catching(|| self.put_version_here(key, ts, value))?
    }

    fn put_version_here(&self, key: &[u8], ts: Timestamp, value: Option<&[u8]>) -> Result<bool> {
        match value {
            Some(v) => check_entry(key, v)?,
            None => check_key(key)?,
        }
        self.clock.advance_to(ts);
        let guard = &crossbeam_epoch::pin();
        loop {
            let hit = self.find_leaf_for_write(key, guard);
            let start = page::page_start(hit.head);
            let newest = newest_ts(hit.head, key);
            if ts < start || newest.is_some_and(|n| ts <= n) {
                if ts < self.retention_threshold() {
                    // A redo below the threshold: that history is discarded (retention.rs).
                    return Ok(false);
                }
                if self.has_version(key, ts)? {
                    return Ok(false);
                }
                return Err(Error::InvalidUse(format!(
                    "tsbtree: a version of key {key:?} at {ts} is older than the key's newest \
                     ({newest:?}) or its page's start ({start}); history is never updated, so \
                     versions must come in timestamp order"
                )));
            }
            let delta = Node::delta(
                hit.head,
                hit.state,
                Kind::Version(Record::new(key, ts, value)),
                hit.head.record_count as usize + 1,
            );
            self.stats.cas_attempts.incr();
            match self.table.update_d(hit.pid, hit.state, delta, guard) {
                Ok(state) => {
                    self.after_write(hit.pid, state, guard);
                    return Ok(true);
                }
                Err(_) => self.stats.cas_failures.incr(),
            }
        }
    }
}
