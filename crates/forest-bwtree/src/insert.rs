//! Record updates at leaves: insert, modify and delete deltas (Bw-tree §III-A "Leaf-level
//! update operations"), installed with Update-D.
//!
//! A write finds the leaf, looks its key up in the state it read, builds the delta on top of
//! that state and CASes it in. The CAS succeeding means no other delta slipped in, so the
//! lookup still holds: each write is atomic at its CAS. On a failed CAS ("failed update",
//! Table I) the thread looks again in the state the CAS found and retries; if that state sends
//! the key to a sibling (a split came in) it descends again from the root.
//!
//! After its own write the thread splits the page if it has grown past the page size
//! (§IV-A), merges it if it has shrunk below the merge threshold (§IV-B), or consolidates it
//! if the chain is long (§III-B). A leaf's page size is in records, but a leaf of large
//! records splits earlier, at about [`LEAF_BYTES_MAX`] (the paper's pages are sized in bytes:
//! a consolidation copies the whole page).

use crate::delta::{Kind, Lsn48, Node, Record};
use crate::gc::node_ref;
use crate::get::{lookup, Lookup, Path};
use crate::BwTree;

/// The four writes of the Index trait.
#[derive(Clone, Copy)]
pub(crate) enum Write<'a> {
    /// Only if absent.
    Insert(&'a [u8]),
    /// Insert or replace.
    Upsert(&'a [u8]),
    /// Only if present.
    Update(&'a [u8]),
    Remove,
}

impl BwTree {
    /// Applies `write` to `key` with the delta tagged `lsn` (at most
    /// [`crate::delta::LSN_MAX`], checked by the caller); returns whether it changed the tree.
    pub(crate) fn write_lsn(&self, key: &[u8], write: Write<'_>, lsn: u64) -> bool {
        let guard = &crossbeam_epoch::pin();
        let mut path = Path::new();
        // The delta's payload is built once and kept across retries.
        let mut payload: Option<Kind> = None;
        'descend: loop {
            let (pid, mut state, mut node, mut found) = self.find_in_leaf(key, &mut path, guard);
            loop {
                let present = match found {
                    Lookup::Found(_) => true,
                    Lookup::Absent => false,
                    Lookup::Right { .. } | Lookup::Removed => {
                        // A split or merge moved the key since we read the page: start over
                        // from the root, which completes the SMO on the way (§IV-C).
                        self.stats.restarts.incr();
                        continue 'descend;
                    }
                };
                let (kind, record_count) = match (write, present) {
                    (Write::Insert(_), true)
                    | (Write::Update(_), false)
                    | (Write::Remove, false) => {
                        self.consolidate_if_long(pid, state, node, guard);
                        return false;
                    }
                    (Write::Insert(v) | Write::Upsert(v), false) => (
                        Kind::Insert(take_record(&mut payload, key, v, lsn)),
                        node.record_count + 1,
                    ),
                    (Write::Upsert(v) | Write::Update(v), true) => (
                        Kind::Modify(take_record(&mut payload, key, v, lsn)),
                        node.record_count,
                    ),
                    (Write::Remove, true) => (
                        Kind::Delete(key.into(), Lsn48::new(lsn)),
                        node.record_count - 1,
                    ),
                };
                let delta = Node::delta(node, record_count, kind).into_owned();
                self.stats.update_attempts.incr();
                self.stats.cas_attempts.incr();
                match self.table.update_d(pid, state, delta, guard) {
                    Ok(installed) => {
                        let new_node = node_ref(installed);
                        self.count_delta(new_node);
                        // The write is in: a page that fails to load in the follow-up SMO
                        // must not report it as failed (review rev-evict F1); the next
                        // visitor completes a half-done SMO, as after a descheduled thread.
                        let follow_up = || self.after_write(pid, installed, new_node, path, guard);
                        if let Err(e) = self.catching(follow_up) {
                            self.record_load_error(e);
                        }
                        return true;
                    }
                    Err((delta, found_state)) => {
                        // Lost the race to another delta or SMO on this page; the page is
                        // unchanged by us, so looking again in the state found is safe.
                        self.stats.failed_updates.incr();
                        self.stats.cas_failures.incr();
                        payload = Some(delta.into_box().kind);
                        if found_state.is_null() {
                            // The page was merged away and freed: start over from the root.
                            self.stats.restarts.incr();
                            continue 'descend;
                        }
                        state = found_state;
                        node = node_ref(found_state);
                        found = lookup(node, key);
                    }
                }
            }
        }
    }

    /// Page maintenance after the thread's own write: split (§IV-A) or consolidate (§III-B).
    fn after_write<'g>(
        &self,
        pid: forest_llama::Pid,
        state: crossbeam_epoch::Shared<'g, Node>,
        node: &'g Node,
        path: Path,
        guard: &'g crossbeam_epoch::Guard,
    ) {
        let (split_above, merge_below) = self.page_limits(node);
        if node.record_count as usize > split_above || self.write_over_room(node, split_above) {
            self.split(pid, state, node, path, guard);
        } else if (node.record_count as usize) < merge_below {
            self.merge(pid, state, node, guard);
            // A merge refused (hysteresis, a first child that cannot absorb) leaves the page
            // as it was, and its chain must still be consolidated (review rev-bwleaf2 F1:
            // update-only traffic grew it without bound); after an installed remove-node
            // delta the state changed and this CAS fails.
            self.consolidate_if_long(pid, state, node, guard);
        } else {
            self.consolidate_if_long(pid, state, node, guard);
        }
    }
}

/// The bytes of records (keys, values, their prefixes and slots) above which a leaf splits
/// although it holds fewer than `max_records_per_page` records; never below a quarter of that
/// count (pages of very large records keep a useful fanout). Measured on YCSB A (100-byte
/// values, 128-record leaves of about 16 KiB): a consolidation of a hot page copied 16 KiB
/// every 16 updates and readers walked chains of up to 16 deltas; 4 KiB leaves are
/// consolidated by readers and writers alike past the writers' threshold x 2
/// (`consolidate.rs` `leaf_sized_in_bytes`; docs/BENCHMARKS.md, "Issue 14: byte-sized
/// leaves' chains"). Leaves of 8-byte keys and
/// values (24 bytes a record) stay at 128 records.
pub const LEAF_BYTES_MAX: usize = 4 << 10;

impl BwTree {
    /// The record counts above which the page at `node` splits and below which it merges.
    /// Index pages: the configured ones. Leaves split above the configured count, or earlier
    /// when their base page's records average more than [`LEAF_BYTES_MAX`] /
    /// `max_records_per_page` bytes, never below a quarter of it (the floor).
    ///
    /// Hysteresis (review rev-ycsba F1, F2): every leaf's merge threshold is the configured
    /// one capped at half the floor. A page just split holds at least half the floor, so it
    /// never merges back whatever its records' sizes; the threshold is never scaled to 0, so
    /// an emptied leaf of large records merges; `merge.rs` also skips a leaf merge whose
    /// merged page would exceed either page's split limit. (Scaling the threshold by
    /// floor / max instead took small-page configurations' merges away: `merge=2` on 8-record
    /// pages became 1.)
    pub(crate) fn page_limits(&self, node: &Node) -> (usize, usize) {
        let (max, merge) = (
            self.config.max_records_per_page,
            self.config.merge_threshold,
        );
        if node.level != 0 {
            return (max, merge);
        }
        let floor = (max / 4).max(crate::MAX_RECORDS_PER_PAGE_MIN);
        let merge_below = merge.min(floor / 2);
        let base = node.base_page();
        if base.len() == 0 {
            return (max, merge_below);
        }
        // By the record size, not the page's bytes: a page just split is small, and its
        // records decide its limit.
        let per_record = base.heap_bytes() / base.len();
        let split_above = (LEAF_BYTES_MAX / per_record).clamp(floor, max);
        (
            self.split_above_on_lss(split_above, per_record),
            merge_below,
        )
    }
}

/// The record for a retry: reuses the payload of the failed delta when it had one.
fn take_record(payload: &mut Option<Kind>, key: &[u8], value: &[u8], lsn: u64) -> Record {
    match payload.take() {
        Some(Kind::Insert(r) | Kind::Modify(r)) => r,
        _ => Record::with_lsn(key, value, lsn),
    }
}
