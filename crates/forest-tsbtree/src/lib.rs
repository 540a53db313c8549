//! The TSBw-tree (Lomet, Hong, Nehme, Zhang: "High Performance Temporal Indexing on Modern
//! Hardware", ICDE 2015): a time-split B-tree on LLAMA's mapping table, kept latch-free the
//! Bw-tree's way. Engine `tsbtree`. This is issue 18's first increment: the in-memory core.
//!
//! | module | paper |
//! |--------|-------|
//! | `version.rs` | §III-A1 versioned records, tombstones; §III-B updates insert versions; the engine's clock |
//! | `node.rs` | §II-C page states: delta chains over base pages (Update-D / Update-R); `unsafe` here and in `split_list.rs` only |
//! | `page.rs` | folding a chain into a view; consolidation (Bw-tree §III-B) |
//! | `as_of.rs` | §III-A1 search by key at the current time or at time t; history links (forest's design) |
//! | `descend.rs` | descents; Bw-tree §IV-C help-along for half-done splits |
//! | `key_split.rs` | §III-A2 key splits of leaves and index pages as Algorithm 1's two steps; root growth |
//! | `time_split.rs` | §III-A3 time splits of leaves and index pages as Algorithm 1's two steps, Fig. 3; §IV-B1 split time (the hook); §IV-B2 index split time; root growth by time |
//! | `split_list.rs` | §IV-B2 per-level latch-free lists of active time splits |
//! | `scan.rs` | current and as-of range scans, both orders |
//! | `history.rs` | a key's versions in a time range, each once |
//! | `export.rs` | §V-C the versions reads from a time on need (a store's temporal checkpoint) |
//! | `stamped.rs` | versions at a given timestamp: a store's writes and their redo, idempotent |
//! | `retention.rs` | §V-C (1) in memory: a retention threshold; historical pages before it freed, their PIDs reused; stale terms never followed |
//! | `marshal.rs` | §II-D, Bw-tree §V-B page marshalling: leaf and index images, split pieces, crc32c (docs/FORMAT.md) |
//! | `storage.rs` | LSS-C (§II-C Read, §II-D Flush, Bw-tree §V-B): flush of whole images under the flush limit and in the flush order, eviction under a page budget (historical pages first), loading evicted pages |
//! | `recover.rs` | §II-D, §V-A, Bw-tree §V-A: map checkpoints with the root, `tsb-meta` (clock, retention threshold), opening from LSS-C |
//! | forest-llama | §II-B mapping table; §II-C Allocate, Free, Read, Update-D, Update-R; epochs |
//!
//! Choices the paper leaves open or contradicts (each argued in its module):
//! - Deletes write a tombstone version (`version.rs`).
//! - A time split keeps P's PID for the current page; history gets the new PID (`time_split.rs`).
//! - History links, copied by key splits, reach history that no index term names
//!   (`as_of.rs`).
//! - Algorithm 1 uses Read and Update-R inside a system transaction (§II-E forbids them) and
//!   both aborts and retries the index delta; in memory, Q is installed before the one CAS and
//!   the index delta is retried, and any search that meets the half-done split completes it
//!   (`key_split.rs`).
//! - No merges: the paper has none, and historical pages never merge; in this increment
//!   current pages do not merge either (an emptied page stays, holding its history link).
//! - Index pages time-split like leaves (`time_split.rs`): the current index page keeps its
//!   PID, the terms that ended before the split time go to a historical index page; the split
//!   time is the smaller of §IV-B2's bound (the level below's active time splits,
//!   `split_list.rs`) and the TSB-tree's (the oldest current child's start), the latter
//!   needed because the current page keeps its PID. A root's time split grows the tree.
//! - Split policy (§VI-A): a page over `max_records_per_page` versions time-splits when at
//!   least `time_split_percent` % of a full page is historical (superseded versions and
//!   tombstones), else key-splits; after a time split it key-splits too if the current part
//!   still fills more than `100 - time_split_percent` % of a page. A page that can split
//!   neither way (its split time held at its start by a unit in flight) stays over the limit
//!   by the writes of that stall, and is consolidated at `consolidate_threshold` as usual.
//!
//! Pause points (feature `pause-points`): `key_split:leaf-split-installed`,
//! `key_split:index-split-installed`, `time_split:leaf-split-installed`,
//! `time_split:index-split-installed`, each after step 1's CAS and before step 2; on LSS-C
//! also forest-llama's `flush:*` and `load:*` (`read::load_page`).
//!
//! §IV-B1's EOSL-TS: a store hands over its timestamps in flight
//! ([`TemporalIndex::set_in_flight`]), and leaves time-split below the oldest
//! (`time_split.rs`).
//!
//! On LSS-C (`storage.rs`, session 19): flush, eviction and Read of evicted pages; recovery
//! from LSS-C (`recover.rs`, session 20). Not built yet (later increments of issue 18): a
//! store on LSS-C, incremental pieces, LSS-H, migration, archive GC (retention frees
//! in-memory historical pages, `retention.rs`).

mod as_of;
mod descend;
mod export;
mod history;
mod key_split;
mod marshal;
mod node;
mod page;
mod recover;
mod retention;
mod scan;
mod split_list;
mod stamped;
mod storage;
mod time_split;
mod version;

use std::ops::Bound;

use crossbeam_epoch::{Guard, Shared};
use forest_core::limits::KEY_BYTES_MAX;
use forest_core::stats::names;
use forest_core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use forest_core::{
    check_entry, Counter, Error, HistoryVisitor, InFlight, Index, IndexStats, Order, Result,
    TemporalIndex, Timestamp, VersionVisitor, Visitor,
};
use forest_llama::{MappingTable, Pid};

use crate::as_of::Target;
use crate::node::{Kind, LeafBase, Node, INFINITY};
use crate::version::{Clock, Record};

pub use recover::{TsbMeta, META_FILE};
pub use storage::TsbFlush;
pub use time_split::{split_versions_pub as split_versions, SplitOutcome, Version};

/// Tuning of a [`TsbTree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsbConfig {
    /// Versions a leaf holds before it splits.
    pub max_records_per_page: usize,
    /// Terms an index page holds before it splits.
    pub max_index_entries: usize,
    /// Delta chain length at which a writer consolidates its leaf (§VI-A: ten).
    pub consolidate_threshold: u32,
    /// Percent of a full page that must be historical for a time split (§VI-A: a third).
    pub time_split_percent: u32,
}

impl Default for TsbConfig {
    fn default() -> Self {
        Self {
            max_records_per_page: 128,
            max_index_entries: 128,
            consolidate_threshold: 8,
            time_split_percent: 33,
        }
    }
}

/// Counter names beyond [`forest_core::stats::names`].
pub mod counter_names {
    pub const KEY_SPLITS: &str = "key_splits";
    pub const TIME_SPLITS: &str = "time_splits";
    pub const SPLIT_ATTEMPTS: &str = "split_attempts";
    pub const FAILED_SPLITS: &str = "failed_splits";
    pub const SMO_HELPS: &str = "smo_helps";
    pub const HISTORICAL_PAGES: &str = "historical_pages";
    pub const VERSIONS: &str = "versions";
    /// Time splits of index pages (`TIME_SPLITS` counts the leaves').
    pub const INDEX_TIME_SPLITS: &str = "index_time_splits";
    /// Historical index pages (`HISTORICAL_PAGES` counts the leaves).
    pub const HISTORICAL_INDEX_PAGES: &str = "historical_index_pages";
    /// Active time splits on the §IV-B2 lists of all levels (0 when no split is under way).
    pub const ACTIVE_TIME_SPLITS: &str = "active_time_splits";
    /// Terms posted on an index page before its start (would belong in a historical index
    /// page, §IV-B): the split-time rules keep this at 0.
    pub const LATE_TERMS: &str = "late_terms";
    /// Historical pages (leaf and index) freed by retention (`retention.rs`).
    pub const RETIRED_PAGES: &str = "retired_pages";
    /// Reads refused at a term or history link the retention threshold had passed.
    pub const STALE_TERMS_REFUSED: &str = "stale_terms_refused";
    /// The retention threshold.
    pub const RETENTION: &str = "retention";
    /// Pages in memory (current and historical, leaf and index); on LSS-C, evicted ones
    /// are not counted (`storage.rs`).
    pub const LIVE_PAGES: &str = "live_pages";
    /// On LSS-C (`storage.rs`): pages swapped out.
    pub const EVICTIONS: &str = "evictions";
    /// On LSS-C: evicted pages read back and installed.
    pub const LOADS: &str = "loads";
    /// On LSS-C: loads whose install lost to another thread's.
    pub const LOAD_RACES: &str = "load_races";
    /// On LSS-C: page images written by flushes that won their CAS.
    pub const FLUSHES: &str = "flushes";
    /// On LSS-C: pages whose state is in memory.
    pub const RESIDENT_PAGES: &str = "resident_pages";
}

#[derive(Default)]
struct Stats {
    cas_attempts: Counter,
    cas_failures: Counter,
    restarts: Counter,
    consolidations: Counter,
    key_splits: Counter,
    time_splits: Counter,
    split_attempts: Counter,
    failed_splits: Counter,
    smo_helps: Counter,
    index_time_splits: Counter,
    late_terms: Counter,
    retired_pages: Counter,
    stale_terms_refused: Counter,
}

/// Levels with a list of active time splits of their own; deeper levels (never reached: a
/// tree that high holds more than 2^64 pages) share the last.
const SPLIT_LIST_LEVELS: usize = 64;

/// The TSBw-tree (see the crate doc).
pub struct TsbTree {
    table: MappingTable<Node>,
    root: AtomicU64,
    clock: Clock,
    config: TsbConfig,
    stats: Stats,
    /// §IV-B2: per level, the active time splits (`split_list.rs`).
    split_lists: Box<[split_list::SplitList]>,
    /// §V-C: the retention threshold (`retention.rs`).
    retention: AtomicU64,
    /// Historical pages waiting for the threshold (`retention.rs`).
    retire_queue: retention::RetireQueue,
    /// §IV-B1: a store's timestamps taken and not yet applied (`time_split.rs`).
    in_flight: std::sync::OnceLock<std::sync::Arc<dyn InFlight>>,
    /// LSS-C and the page budget, for a tree built [`TsbTree::with_lss`] (`storage.rs`).
    storage: Option<storage::Storage>,
    /// Versions above this timestamp are held back from flushes (`storage.rs`), once
    /// `flush_limit_set`: 0 is a limit (nothing durable yet), not "none".
    flush_limit: AtomicU64,
    flush_limit_set: AtomicBool,
}

/// What a write does.
#[derive(Clone, Copy)]
enum Write<'a> {
    Insert(&'a [u8]),
    Upsert(&'a [u8]),
    Update(&'a [u8]),
    Remove,
}

impl Default for TsbTree {
    fn default() -> Self {
        Self::new()
    }
}

impl TsbTree {
    /// A tree with the default configuration.
    pub fn new() -> Self {
        Self::build(TsbConfig::default())
    }

    /// A tree with `config`, or an error naming the value out of range.
    pub fn with_config(config: TsbConfig) -> Result<Self> {
        if config.max_records_per_page < 3 {
            return Err(Error::Config(format!(
                "tsbtree: max_records_per_page is {}, at least 3 are needed to split",
                config.max_records_per_page
            )));
        }
        if config.max_index_entries < 4 {
            return Err(Error::Config(format!(
                "tsbtree: max_index_entries is {}, at least 4 are needed to split",
                config.max_index_entries
            )));
        }
        if !(1..=99).contains(&config.time_split_percent) {
            return Err(Error::Config(format!(
                "tsbtree: time_split_percent is {}, must be 1..=99",
                config.time_split_percent
            )));
        }
        if config.consolidate_threshold == 0 {
            return Err(Error::Config(
                "tsbtree: consolidate_threshold must be at least 1".to_string(),
            ));
        }
        Ok(Self::build(config))
    }

    fn build(config: TsbConfig) -> Self {
        let table = MappingTable::new();
        let guard = &crossbeam_epoch::pin();
        let pid = table.allocate();
        let base = LeafBase {
            low: Box::default(),
            high: None,
            side: None,
            start: 0,
            end: INFINITY,
            history: None,
            records: Vec::new(),
        };
        table.install_new(pid, Node::base(Kind::Leaf(base), 0, 0), guard);
        Self {
            table,
            root: AtomicU64::new(pid),
            clock: Clock::new(),
            config,
            stats: Stats::default(),
            split_lists: (0..SPLIT_LIST_LEVELS)
                .map(|level| split_list::SplitList::new(level == 0))
                .collect(),
            retention: AtomicU64::new(0),
            retire_queue: retention::RetireQueue::default(),
            in_flight: std::sync::OnceLock::new(),
            storage: None,
            flush_limit: AtomicU64::new(0),
            flush_limit_set: AtomicBool::new(false),
        }
    }

    /// Level `level`'s list of active time splits.
    pub(crate) fn split_list(&self, level: u32) -> &split_list::SplitList {
        let at = (level as usize).min(SPLIT_LIST_LEVELS - 1);
        &self.split_lists[at]
    }

    /// The configuration.
    pub fn config(&self) -> &TsbConfig {
        &self.config
    }

    pub(crate) fn root_pid(&self) -> Pid {
        self.root.load(Ordering::Acquire)
    }

    /// Replaces the root `old` by `new`; false when the root is no longer `old`.
    pub(crate) fn swap_root(&self, old: Pid, new: Pid) -> bool {
        self.root
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Upsert returning the new version's timestamp.
    pub fn upsert_ts(&self, key: &[u8], value: &[u8]) -> Result<Timestamp> {
        check_entry(key, value)?;
        Ok(self
            .catching(|| self.write(key, Write::Upsert(value)))?
            .expect("an upsert always writes"))
    }

    /// Insert-if-absent returning the version's timestamp (None: present, nothing written).
    pub fn insert_ts(&self, key: &[u8], value: &[u8]) -> Result<Option<Timestamp>> {
        check_entry(key, value)?;
        self.catching(|| self.write(key, Write::Insert(value)))
    }

    /// Update-if-present returning the version's timestamp (None: absent, nothing written).
    pub fn update_ts(&self, key: &[u8], value: &[u8]) -> Result<Option<Timestamp>> {
        check_entry(key, value)?;
        self.catching(|| self.write(key, Write::Update(value)))
    }

    /// Remove returning the tombstone's timestamp (None: absent, nothing written).
    pub fn remove_ts(&self, key: &[u8]) -> Option<Timestamp> {
        if key.len() > KEY_BYTES_MAX {
            return None; // no such key can have been written
        }
        self.catching_or(None, || self.write(key, Write::Remove))
    }

    /// One write: find the current leaf, decide from its state, take a timestamp, CAS a
    /// version delta onto that state (`version.rs` explains the order); then consolidate or
    /// split the leaf if needed.
    fn write(&self, key: &[u8], op: Write<'_>) -> Option<Timestamp> {
        let guard = &crossbeam_epoch::pin();
        loop {
            let hit = self.find_leaf_for_write(key, guard);
            let present = matches!(as_of::version_at(hit.head, key, u64::MAX), Some(Some(_)));
            let value = match op {
                Write::Insert(_) if present => return None,
                Write::Update(_) | Write::Remove if !present => return None,
                Write::Insert(v) | Write::Upsert(v) | Write::Update(v) => Some(v),
                Write::Remove => None,
            };
            let ts = self.clock.tick();
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
                    return Some(ts);
                }
                Err(_) => self.stats.cas_failures.incr(),
            }
        }
    }

    /// Splits a leaf over its limit (§VI-A policy, crate doc), else consolidates a long chain.
    /// The version is in place already, so the write succeeded: a page that cannot be loaded
    /// here stops only this follow-up work (the next visitor completes a half-done split,
    /// §IV-C) and is recorded ([`Self::take_load_error`]), never the write's answer.
    fn after_write(&self, pid: Pid, state: Shared<'_, Node>, guard: &Guard) {
        self.catching_follow_up(|| self.split_or_consolidate(pid, state, guard));
    }

    fn split_or_consolidate(&self, pid: Pid, state: Shared<'_, Node>, guard: &Guard) {
        let Some(head) = node::state_ref(state, guard) else {
            return;
        };
        let max = self.config.max_records_per_page;
        if head.record_count as usize > max || self.leaf_over_bytes(head) {
            let view = page::leaf_view(head);
            let historical = version::historical_count(&view.records);
            let pct = self.config.time_split_percent as usize;
            if historical * 100 >= max * pct {
                if let Some(current) = self.time_split_leaf(pid, head, state, &view, guard) {
                    if let Some((state, head)) = self.read_node(pid, guard) {
                        self.consolidate(pid, state, head, guard);
                    }
                    if current * 100 > max * (100 - pct) {
                        if let Some((state, head)) = self.read_node(pid, guard) {
                            let view = page::leaf_view(head);
                            self.key_split_leaf(pid, head, state, &view, guard);
                        }
                    }
                    return;
                }
            } else if self.key_split_leaf(pid, head, state, &view, guard)
                // One key's versions only: history is all a split can move out.
                || (historical > 0
                    && self.time_split_leaf(pid, head, state, &view, guard).is_some())
            {
                return;
            }
            // No split now: the split time is held at the page's start by a unit between
            // its tick and its apply (or a CAS lost). The page stays over its limit by the
            // writes of the stall, but its chain is still folded (review rev-tsb F1).
        }
        if head.delta_count >= self.config.consolidate_threshold {
            self.consolidate(pid, state, head, guard);
        }
    }

    /// Update-R of the folded state; a failed CAS drops the new page (Bw-tree §III-B).
    pub(crate) fn consolidate(
        &self,
        pid: Pid,
        state: Shared<'_, Node>,
        head: &Node,
        guard: &Guard,
    ) {
        debug_assert!(
            !page::is_historical(head),
            "a historical page is never updated"
        );
        let new = if head.level == 0 {
            let view = page::leaf_view(head);
            let n = view.records.len();
            Node::folded(head, Kind::Leaf(view.into_base()), n)
        } else {
            let view = page::index_view(head);
            let n = view.entries.len();
            Node::folded(head, Kind::Index(view.into_base()), n)
        };
        if self.table.update_r(pid, state, new, guard).is_ok() {
            self.stats.consolidations.incr();
        }
    }
}

impl TsbTree {
    /// The value of `key` as of `t` (see [`TemporalIndex::get_as_of`]).
    fn get_at(&self, key: &[u8], t: Timestamp, out: &mut Vec<u8>) -> Result<bool> {
        if key.len() > KEY_BYTES_MAX {
            self.check_retained(t)?;
            return Ok(false);
        }
        let guard = &crossbeam_epoch::pin();
        let (_, head) = self.find_leaf_as_of(Target::At(key), t, guard)?;
        Ok(match as_of::version_at(head, key, t) {
            Some(Some(v)) => {
                out.clear();
                out.extend_from_slice(v);
                true
            }
            _ => false,
        })
    }
}

/// What [`TsbTree::check_structure`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Structure {
    /// Terms of the fullest current index page.
    pub max_current_index_terms: usize,
    /// Terms of the fullest historical index page.
    pub max_historical_index_terms: usize,
    pub current_index_pages: usize,
    pub historical_index_pages: usize,
    /// Versions of the fullest current leaf.
    pub max_current_leaf_versions: usize,
}

impl TsbTree {
    /// Walks every page (while no thread writes) and checks the time-split invariants:
    /// no historical index page holds a term leading to a current page (so no historical
    /// page is ever to be updated for one, and as-of searches through it never go stale);
    /// every term of a historical index page starts before the page ends; and every page's
    /// history link leads to a historical page of its level ending where the page starts
    /// (terms and links that retention's threshold has passed are not followed).
    /// Returns the pages' sizes, or the first breach found.
    pub fn check_structure(&self) -> std::result::Result<Structure, String> {
        self.catching(|| self.check_structure_inner())
            .map_err(|e| e.to_string())?
    }

    fn check_structure_inner(&self) -> std::result::Result<Structure, String> {
        let guard = &crossbeam_epoch::pin();
        let mut shape = Structure::default();
        let mut breach = None;
        self.table.for_each_state(guard, |pid, state| {
            if breach.is_some() {
                return;
            }
            let Some(head) = node::state_ref(state, guard) else {
                return;
            };
            let (start, end, history) = if head.level == 0 {
                let view = page::leaf_view(head);
                if !view.is_historical() {
                    shape.max_current_leaf_versions =
                        shape.max_current_leaf_versions.max(view.records.len());
                }
                (view.start, view.end, view.history)
            } else {
                let view = page::index_view(head);
                let n = view.entries.len();
                if view.is_historical() {
                    shape.historical_index_pages += 1;
                    shape.max_historical_index_terms = shape.max_historical_index_terms.max(n);
                    let retained = self.retention_threshold();
                    for (i, e) in view.entries.iter().enumerate() {
                        if retention::term_end(&view.entries, i, view.end) <= retained {
                            continue; // its page may be freed, its PID reused (retention.rs)
                        }
                        let current = self
                            .read_node(e.pid, guard)
                            .is_some_and(|(_, child)| !page::is_historical(child));
                        if current {
                            breach = Some(format!(
                                "historical index page {pid} (level {}) has a term ({:?}, {}) \
                                 leading to current page {}",
                                head.level, e.key, e.ts, e.pid
                            ));
                        } else if e.ts >= view.end {
                            breach = Some(format!(
                                "historical index page {pid} ends at {} but has a term at {}",
                                view.end, e.ts
                            ));
                        }
                    }
                } else {
                    shape.current_index_pages += 1;
                    shape.max_current_index_terms = shape.max_current_index_terms.max(n);
                }
                (view.start, view.end, view.history)
            };
            if start >= end {
                breach = Some(format!(
                    "page {pid} has the empty time range [{start}, {end})"
                ));
            }
            if let Some(h) = history.filter(|_| start > self.retention_threshold()) {
                match self.read_node(h, guard) {
                    Some((_, old)) if old.level == head.level && page::is_historical(old) => {
                        let (_, old_end) = page::time_range(old);
                        if old_end != start {
                            breach = Some(format!(
                                "page {pid} starts at {start}, its history page {h} ends at \
                                 {old_end}"
                            ));
                        }
                    }
                    _ => {
                        breach = Some(format!(
                            "page {pid}'s history link {h} is not a historical page of level {}",
                            head.level
                        ))
                    }
                }
            }
        });
        match breach {
            Some(b) => Err(b),
            None => Ok(shape),
        }
    }

    /// The start times of the current pages on `key`'s path now, root first, leaf last (for
    /// tests: which pages time-split, and when).
    pub fn path_starts(&self, key: &[u8]) -> Vec<Timestamp> {
        self.catching_or(Vec::new(), || self.path_starts_inner(key))
    }

    fn path_starts_inner(&self, key: &[u8]) -> Vec<Timestamp> {
        let guard = &crossbeam_epoch::pin();
        let (_, _, mut head) = self.root(guard);
        let mut starts = Vec::new();
        loop {
            let next = if head.level == 0 {
                match as_of::locate(head, Target::At(key), u64::MAX) {
                    as_of::Locate::Right(q) => q,
                    _ => {
                        starts.push(page::page_start(head));
                        return starts;
                    }
                }
            } else {
                match as_of::route_index(head, Target::At(key), u64::MAX) {
                    as_of::Route::Child(term, _) => {
                        starts.push(page::page_start(head));
                        term.pid
                    }
                    as_of::Route::Right(q) | as_of::Route::History(q) => q,
                }
            };
            head = self.read_live(next, guard);
        }
    }
}

impl Index for TsbTree {
    fn name(&self) -> &'static str {
        "tsbtree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        // The current time is never below the threshold: never refused.
        self.catching_or(false, || {
            matches!(self.get_at(key, u64::MAX, out), Ok(true))
        })
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.insert_ts(key, value)?.is_some())
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.upsert_ts(key, value).map(|_| ())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.update_ts(key, value)?.is_some())
    }

    fn remove(&self, key: &[u8]) -> bool {
        self.remove_ts(key).is_some()
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        // The current time is never below the threshold: never refused.
        self.catching_or((), || {
            let _ = self.scan_at(lower, upper, order, u64::MAX, visit);
        });
    }

    fn as_temporal(&self) -> Option<&dyn TemporalIndex> {
        Some(self)
    }

    fn stats(&self) -> IndexStats {
        let guard = &crossbeam_epoch::pin();
        let mut stats = IndexStats {
            memory_bytes: self.table.memory_bytes() as u64,
            ..IndexStats::default()
        };
        let mut historical_pages = 0u64;
        let mut historical_index_pages = 0u64;
        let mut versions = 0u64;
        let mut live_pages = 0u64;
        self.table.for_each_state(guard, |_, state| {
            let Some(head) = node::state_ref(state, guard) else {
                return;
            };
            live_pages += 1;
            if head.level > 0 {
                stats.inner_node_count += 1;
                if page::is_historical(head) {
                    historical_index_pages += 1;
                }
                return;
            }
            let view = page::leaf_view(head);
            stats.memory_bytes += page::record_bytes(&view.records) as u64;
            versions += view.records.len() as u64;
            if view.is_historical() {
                historical_pages += 1;
                return;
            }
            stats.leaf_node_count += 1;
            stats.key_count += version::live_count(&view.records) as u64;
        });
        // Evicted pages, read from LSS-C without loading them (`storage.rs`).
        for (level, historical, records) in self.evicted_pages() {
            if level > 0 {
                stats.inner_node_count += 1;
                historical_index_pages += u64::from(historical);
                continue;
            }
            versions += records.len() as u64;
            if historical {
                historical_pages += 1;
            } else {
                stats.leaf_node_count += 1;
                stats.key_count += version::live_count(&records) as u64;
            }
        }
        stats.height = self.catching_or(0, || self.root(guard).2.level + 1);
        let s = &self.stats;
        stats.counters = vec![
            (names::CAS_ATTEMPTS, s.cas_attempts.get()),
            (names::CAS_FAILURES, s.cas_failures.get()),
            (names::RESTARTS, s.restarts.get()),
            (
                names::SPLITS,
                s.key_splits.get() + s.time_splits.get() + s.index_time_splits.get(),
            ),
            (names::CONSOLIDATIONS, s.consolidations.get()),
            (counter_names::KEY_SPLITS, s.key_splits.get()),
            (counter_names::TIME_SPLITS, s.time_splits.get()),
            (counter_names::SPLIT_ATTEMPTS, s.split_attempts.get()),
            (counter_names::FAILED_SPLITS, s.failed_splits.get()),
            (counter_names::SMO_HELPS, s.smo_helps.get()),
            (counter_names::HISTORICAL_PAGES, historical_pages),
            (counter_names::VERSIONS, versions),
            (counter_names::INDEX_TIME_SPLITS, s.index_time_splits.get()),
            (
                counter_names::HISTORICAL_INDEX_PAGES,
                historical_index_pages,
            ),
            (counter_names::LATE_TERMS, s.late_terms.get()),
            (counter_names::RETIRED_PAGES, s.retired_pages.get()),
            (
                counter_names::STALE_TERMS_REFUSED,
                s.stale_terms_refused.get(),
            ),
            (counter_names::RETENTION, self.retention_threshold()),
            (counter_names::LIVE_PAGES, live_pages),
            (
                counter_names::ACTIVE_TIME_SPLITS,
                self.split_lists.iter().map(|l| l.counts().0 as u64).sum(),
            ),
        ];
        stats.counters.extend(self.storage_counters());
        stats
    }
}

impl TemporalIndex for TsbTree {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn get_as_of(&self, key: &[u8], t: Timestamp, out: &mut Vec<u8>) -> Result<bool> {
        self.catching(|| self.get_at(key, t, out))?
    }

    fn scan_as_of(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        t: Timestamp,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.catching(|| self.scan_at(lower, upper, order, t, visit))?
    }

    fn history(
        &self,
        key: &[u8],
        from: Timestamp,
        to: Timestamp,
        order: Order,
        visit: &mut HistoryVisitor<'_>,
    ) -> Result<()> {
        self.check_retained(from)?;
        if key.len() > KEY_BYTES_MAX {
            return Ok(());
        }
        self.catching(|| self.history_of(key, from, to, order, visit))?
    }

    fn retention(&self) -> Timestamp {
        self.retention_threshold()
    }

    fn set_retention(&self, t: Timestamp) -> Result<()> {
        // Durable before anything is freed on a checkpointed tree (`recover.rs`).
        self.persist_retention(t)?;
        self.raise_retention(t);
        Ok(())
    }

    fn upsert_stamped(&self, key: &[u8], value: &[u8]) -> Result<Timestamp> {
        self.upsert_ts(key, value)
    }

    fn remove_stamped(&self, key: &[u8]) -> Option<Timestamp> {
        self.remove_ts(key)
    }

    fn tick(&self) -> Timestamp {
        self.clock.tick()
    }

    fn advance_clock(&self, t: Timestamp) {
        self.clock.advance_to(t);
    }

    fn put_version(&self, key: &[u8], ts: Timestamp, value: Option<&[u8]>) -> Result<bool> {
        TsbTree::put_version(self, key, ts, value)
    }

    fn versions_from(
        &self,
        from: Timestamp,
        to: Timestamp,
        visit: &mut VersionVisitor<'_>,
    ) -> Result<()> {
        self.catching(|| self.versions_between(from, to, visit))?
    }

    fn set_in_flight(&self, source: std::sync::Arc<dyn InFlight>) {
        let _ = self.in_flight.set(source);
    }
}
