//! The Bw-tree (Levandoski, Lomet, Sengupta, ICDE 2013): a latch-free B+tree over LLAMA's
//! mapping table, with delta records, consolidation and B-link structure modifications.
//!
//! | module | paper |
//! |--------|-------|
//! | `base_page.rs` | §III-A base pages (low key, high key, side link, sorted records), laid out for a prefix-first search (§VIII-C) |
//! | `delta.rs` | §III-A delta chains: insert/modify/delete deltas; §IV-A split and index-term, §IV-B remove-node, node-merge and index-term-delete deltas |
//! | `get.rs` | §III-A page search, §IV-A index search, the descent with B-link moves |
//! | `insert.rs` | §III-A leaf updates installed by CAS (Update-D) |
//! | `consolidate.rs` | §III-B consolidation (Update-R), abandoned on a failed CAS |
//! | `scan.rs` | §III-C range scans with a record vector, both orders; pinned scans in place |
//! | `split.rs` | §IV-A half split, index-term delta, root split |
//! | `merge.rs` | §IV-B remove node, index term delete and node merge deltas, root collapse |
//! | [`flush`] | §V-A LSNs and ESL, §V-B page marshalling and incremental flushing: pieces for LLAMA's Flush (forest-llama `flush.rs`) |
//! | `storage.rs` | §V-B swapping pages out under a memory budget, TSBw §II-C Read of an evicted page (issue 17, increment 3; forest-llama `evict.rs`, `read.rs`) |
//! | `gc.rs` | §III-D garbage collection: states read under a guard, chains freed after their epoch drains, node allocations recycled |
//! | `page_buffers.rs` | §III-B/§III-D: freed base pages' buffers reused by the next consolidations |
//! | [`memcheck`] | the memory-tool build (`--cfg forest_memcheck`): no recycling, freed memory poisoned |
//! | forest-llama | §II-B mapping table, §III-D epochs for states and PIDs |
//!
//! Use: [`BwTree::new`] or [`BwTree::with_config`], then the [`forest_core::Index`] methods.
//!
//! Every operation pins one crossbeam-epoch guard for its whole run (a scan: for each page
//! copy; a pinned scan: for up to 8 pages), so PIDs on its remembered path and every state it
//! read stay valid (§III-D). `stats()` walks the mapping table: key and page counts, height,
//! memory bytes (states plus the table), a delta-chain length histogram of the current pages, and the counters of
//! [`counter_names`] and [`forest_core::stats::names`] (Table I: failed splits, consolidates
//! and updates, with their attempts, so rates are failures / attempts).
//!
//! §IV-C help-along (serializing SMOs): a thread that meets an incomplete SMO completes it
//! before its own work. `get.rs`'s descent (and `find_in_leaf`, its leaf end for gets and
//! writes) completes a split before following its side link and a merge before going on from
//! a frozen page (then starts over from the root), and grows the root when the root's own split
//! is pending; `split.rs` completes a page's pending split before splitting it again or posting
//! to a frozen parent; `merge.rs` completes a pending split before removing a page and a frozen
//! neighbour's merge before its own.
//!
//! Pause points ([`forest_core::pause`], feature `pause-points`, tests only): named places
//! between the atomic steps of an SMO where a test's hook can stop the thread (e.g. after the
//! half split, before the index term) so that other threads meet the incomplete SMO. Each is
//! right after the CAS of the step named, but where said otherwise:
//! - `split:leaf-half-split-installed`, `split:index-half-split-installed`: split delta, before
//!   the index term or new root;
//! - `merge:remove-node-installed`: remove node delta, before the index term delete;
//! - `merge:helper-checked-frozen`: a thread completing a merge has checked that the page is
//!   still frozen by the remove node delta it read, before it searches the parent (not after
//!   a CAS: it lets a test make that thread a stale helper);
//! - `merge:withdrawal-decided`: a thread completing a merge found the page a first child,
//!   before its CAS that withdraws the merge (not after a CAS either);
//! - `merge:index-term-delete-installed`: index term delete, before the commit;
//! - `merge:committed`: the commit (remove node delta made committed), before the node merge
//!   delta;
//! - `merge:node-merge-installed`: node merge delta, after R's PID is freed;
//! - `merge:root-remove-installed`: a one-child root frozen, before the root PID swap.
//!
//! On an LSS each of these SMO points lies after its step's system-transaction unit
//! (`smo_log.rs`), so they are the crash points of the SMOs' transactions; also
//! - `txn:committed` (`smo_log.rs`): any SMO step's unit is filled, before its follow-up.
//!
//! - `flush:reserved` (forest-llama): a flush reserved its piece's room, before its CAS;
//! - `flush:installed` (forest-llama): its flush delta is installed, before the copy;
//! - `load:word-read` (forest-llama `read::load_page`, shared with tsbtree): a reader read an
//!   evicted page's address, before it reads the pieces (not after a CAS);
//! - `clean:relocated` (forest-llama): the cleaner's image of an evicted page is stable,
//!   before the CAS that switches the word to it;
//! - `clean:before-remove` (`clean.rs`): a victim holds no live piece, before the Mk-Stable and
//!   the removal of its file (between relocation and segment reuse).
//!
//! §V (issue 17, increment 2): record deltas carry the caller's LSN ([`BwTree::upsert_with_lsn`]
//! and its siblings; the [`forest_core::Index`] methods write LSN 0), the ESL comes from an
//! [`EslSource`], consolidation and splits fold only deltas with LSN <= ESL and keep the rest on
//! top (§V-A), and [`BwTree::flush_page`] posts a page to the LSS (`flush.rs`). Increment 3
//! (`storage.rs`): [`BwTree::with_lss`] attaches an LSS and a memory budget; pages are evicted
//! above it and read back when met. Increment 5 (`clean.rs`): the LSS cleaner. Increment 6
//! (`smo_log.rs`): SMOs as system transactions on an LSS. Not built yet: checkpoints, recovery.

mod base_page;
pub mod clean;
mod consolidate;
mod delta;
pub mod flush;
mod gc;
mod get;
mod insert;
mod map_checkpoint;
pub mod memcheck;
mod merge;
mod page_buffers;
mod recover;
mod scan;
pub mod smo_log;
mod split;
mod storage;

use std::ops::Bound;
use std::sync::Arc;

use crossbeam_epoch::{Guard, Owned};
use forest_core::limits::KEY_BYTES_MAX;
use forest_core::stats::names;
use forest_core::sync::atomic::{AtomicU64, Ordering};
use forest_core::{check_entry, Counter, Error, Index, IndexStats, Order, Result, Visitor};
use forest_llama::{MappingTable, Pid};

use crate::base_page::{BasePage, NO_PID};
use crate::delta::Node;
use crate::insert::Write;

/// Default records per page before a split. 8 KiB pages (the paper's default) of the
/// synthetic workload's 16-byte records hold a few hundred; 128 keeps base-page binary
/// searches within a few cache lines and is swept by the benchmarks.
pub const MAX_RECORDS_PER_PAGE_DEFAULT: usize = 128;
/// Default delta-chain length that triggers consolidation. Fig. 5 shows small records
/// tolerating chains of about eight, but here each delta a read walks is a cache miss, and on
/// 1 M 8-byte keys 4 measured faster than 8 on both the read-only and the 5:1 synthetic
/// workloads (`forest bench --engines bwtree:consolidate=4,bwtree:consolidate=8`).
pub const CONSOLIDATE_THRESHOLD_DEFAULT: u32 = 4;
/// Default delta-chain length above which a read (get or scan) consolidates the leaf it read.
/// Lower than the writers' threshold: a page read several times before its next write repays
/// a consolidation on every one of those reads, while a writer's consolidation is undone by
/// the next writes to the page. Chosen by measurement (docs/BENCHMARKS.md, bwtree section:
/// `forest bench --engines bwtree:read_consolidate=1,bwtree:read_consolidate=2,...`).
pub const READ_CONSOLIDATE_THRESHOLD_DEFAULT: u32 = 1;
/// Default record count below which a page merges: a quarter page, so that a merged page
/// (at most a full page plus a quarter) seldom splits right away.
pub const MERGE_THRESHOLD_DEFAULT: usize = MAX_RECORDS_PER_PAGE_DEFAULT / 4;
/// The fewest records per page: a split leaves at least two on each side.
pub const MAX_RECORDS_PER_PAGE_MIN: usize = 4;
/// The most records per page: record counts are kept in a u32, and larger pages make every
/// consolidation copy more than a page should.
pub const MAX_RECORDS_PER_PAGE_MAX: usize = 1 << 20;
/// The longest delta chain a configuration may allow (a search walks it on every access).
pub const CONSOLIDATE_THRESHOLD_MAX: u32 = 1024;

/// Bw-tree tuning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BwTreeConfig {
    /// A page whose record count exceeds this is split (§IV-A); a leaf of large records
    /// earlier, at about [`LEAF_BYTES_MAX`] bytes (never below a quarter of this count, the
    /// floor).
    pub max_records_per_page: usize,
    /// A page whose delta chain is longer than this is consolidated (§III-B, Fig. 5); a page
    /// whose base page is above 8 KiB keeps a chain four times as long (at most 16), a leaf
    /// sized in bytes ([`LEAF_BYTES_MAX`]) twice as long, since its consolidation copies more
    /// (consolidate.rs, `writers_threshold`).
    pub consolidate_threshold: u32,
    /// A page of at most 8 KiB whose delta chain a read walked (a get's or scan's leaf, an
    /// index page on any descent) is consolidated by the reader when the chain is longer than
    /// this (§III-B: by the thread that noticed it, after its own operation); larger pages and
    /// leaves sized in bytes use the writers' threshold (`consolidate_threshold`, scaled).
    pub read_consolidate_threshold: u32,
    /// An index page whose record count falls below this is merged into its left sibling
    /// (§IV-B); a leaf below this capped at half the floor of the leaves' split limits,
    /// and only when the merged page fits both pages' split limits (hysteresis: insert.rs
    /// `page_limits`). 0 turns merges off. At most half the page size.
    pub merge_threshold: usize,
}

impl Default for BwTreeConfig {
    fn default() -> Self {
        Self {
            max_records_per_page: MAX_RECORDS_PER_PAGE_DEFAULT,
            consolidate_threshold: CONSOLIDATE_THRESHOLD_DEFAULT,
            read_consolidate_threshold: READ_CONSOLIDATE_THRESHOLD_DEFAULT,
            merge_threshold: MERGE_THRESHOLD_DEFAULT,
        }
    }
}

/// The engine's event counters (Table I and the standard names).
#[derive(Default)]
struct Stats {
    cas_attempts: Counter,
    cas_failures: Counter,
    restarts: Counter,
    update_attempts: Counter,
    failed_updates: Counter,
    split_attempts: Counter,
    splits: Counter,
    failed_splits: Counter,
    consolidate_attempts: Counter,
    consolidations: Counter,
    failed_consolidates: Counter,
    smo_helps: Counter,
    merge_attempts: Counter,
    merges: Counter,
    failed_merges: Counter,
    withdrawn_merges: Counter,
    root_collapses: Counter,
}

/// Counter names beyond [`forest_core::stats::names`].
pub mod counter_names {
    /// Record-update CAS attempts (inserts, modifies, deletes).
    pub const UPDATE_ATTEMPTS: &str = "update_attempts";
    /// Record updates whose CAS failed (Table I "failed updates").
    pub const FAILED_UPDATES: &str = "failed_updates";
    /// Split-delta CAS attempts.
    pub const SPLIT_ATTEMPTS: &str = "split_attempts";
    /// Split-delta CASes that failed (Table I "failed splits").
    pub const FAILED_SPLITS: &str = "failed_splits";
    /// Consolidation CAS attempts.
    pub const CONSOLIDATE_ATTEMPTS: &str = "consolidate_attempts";
    /// Consolidation CASes that failed (Table I "failed consolidates").
    pub const FAILED_CONSOLIDATES: &str = "failed_consolidates";
    /// Remove-node-delta CAS attempts (merges begun).
    pub const MERGE_ATTEMPTS: &str = "merge_attempts";
    /// Remove-node-delta CASes that failed.
    pub const FAILED_MERGES: &str = "failed_merges";
    /// Merges withdrawn because the page became its parent's first child (merge.rs).
    pub const WITHDRAWN_MERGES: &str = "withdrawn_merges";
    /// Root index pages with one child replaced by that child.
    pub const ROOT_COLLAPSES: &str = "root_collapses";
    /// Incomplete SMOs of other threads that this engine's threads completed (§IV-C).
    pub const SMO_HELPS: &str = "smo_helps";
    /// Pages swapped out to the LSS (issue 17; trees with an LSS only).
    pub const EVICTIONS: &str = "evictions";
    /// Evicted pages read back and installed.
    pub const LOADS: &str = "loads";
    /// Loads whose install lost to another thread's load of the same page.
    pub const LOAD_RACES: &str = "load_races";
    /// Swap-out CASes that lost to a change of the page.
    pub const EVICT_CAS_FAILURES: &str = "evict_cas_failures";
    /// Resident bytes of page states, as counted at install and retire.
    pub const RESIDENT_BYTES: &str = "resident_bytes";
    /// LSS segments the cleaner removed (issue 17, `clean.rs`).
    pub const SEGMENTS_CLEANED: &str = "lss_segments_cleaned";
    /// Bytes of page images the cleaner wrote.
    pub const BYTES_RELOCATED: &str = "lss_bytes_relocated";
    /// Bytes of live page pieces in the LSS.
    pub const LSS_LIVE_BYTES: &str = "lss_live_bytes";
    /// Bytes of the LSS's segments (written since open, not removed).
    pub const LSS_TOTAL_BYTES: &str = "lss_total_bytes";
    /// Pages whose delta chain length, when stats were taken, was 0, 1, 2-3, 4-7, 8-15, 16+.
    pub const CHAIN_LEN_BUCKETS: [&str; 6] = [
        "chain_len_0",
        "chain_len_1",
        "chain_len_2_3",
        "chain_len_4_7",
        "chain_len_8_15",
        "chain_len_16_up",
    ];
}

/// Where a tree reads the ESL, the end of stable log (Bw-tree §V-A: "ESL is an LSN such that
/// all lower valued LSNs are definitely in the stable log"; here: at or below). The store
/// publishes it; tests set an atomic. It must never decrease.
pub trait EslSource: Send + Sync {
    fn esl(&self) -> u64;
}

impl EslSource for std::sync::atomic::AtomicU64 {
    fn esl(&self) -> u64 {
        self.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub use crate::delta::LSN_MAX;
pub use crate::insert::LEAF_BYTES_MAX;
pub use crate::storage::PageHold;

fn check_lsn(lsn: u64) -> Result<()> {
    if lsn > LSN_MAX {
        return Err(Error::InvalidUse(format!(
            "LSN {lsn} is above the Bw-tree's largest, {LSN_MAX} (48 bits)"
        )));
    }
    Ok(())
}

/// Bits of the root word that hold the root PID; the bits above count root changes.
///
/// The root PID alone would let a CAS succeed after the root went from X to a new root and
/// back to X (a collapse), so a thread that read X's split before could grow a second root
/// over a page merged away meanwhile (split.rs `grow_root`). With the count, any root change
/// since the thread's read fails its CAS.
const ROOT_PID_BITS: u32 = 32;
// Every PID fits below the version bits.
const _: () = assert!((forest_llama::PID_COUNT_MAX as u64) < 1 << ROOT_PID_BITS);

/// The root PID in a root word.
#[inline]
fn root_word_pid(word: u64) -> Pid {
    word & ((1 << ROOT_PID_BITS) - 1)
}

/// The Bw-tree index.
pub struct BwTree {
    table: MappingTable<Node>,
    /// Where the ESL comes from; none: every LSN counts as stable (memory mode).
    esl: Option<Arc<dyn EslSource>>,
    /// The root word: the root page's PID in the low [`ROOT_PID_BITS`] bits, the number of
    /// root changes above; replaced by a CAS when the root splits or collapses.
    root: AtomicU64,
    config: BwTreeConfig,
    stats: Stats,
    /// PIDs freed so far ([`Self::free_page`]): a scan that kept a PID across an unpinned
    /// stretch trusts it to name the same page only while this is unchanged (scan.rs).
    pids_freed: AtomicU64,
    /// The LSS and memory budget, if the tree is on storage (`storage.rs`).
    storage: Option<storage::Storage>,
}

impl Drop for BwTree {
    fn drop(&mut self) {
        // A merge begun and not completed: its frozen state goes back to its page (merge.rs).
        self.give_back_frozen_states();
    }
}

impl Default for BwTree {
    fn default() -> Self {
        Self::new()
    }
}

impl BwTree {
    /// A tree with the default configuration.
    pub fn new() -> Self {
        Self::build(BwTreeConfig::default())
    }

    /// A tree with `config`, checked.
    pub fn with_config(config: BwTreeConfig) -> Result<Self> {
        if !(MAX_RECORDS_PER_PAGE_MIN..=MAX_RECORDS_PER_PAGE_MAX)
            .contains(&config.max_records_per_page)
        {
            return Err(Error::Config(format!(
                "max_records_per_page is {}, must be within {MAX_RECORDS_PER_PAGE_MIN}..={MAX_RECORDS_PER_PAGE_MAX}",
                config.max_records_per_page
            )));
        }
        if !(1..=CONSOLIDATE_THRESHOLD_MAX).contains(&config.consolidate_threshold) {
            return Err(Error::Config(format!(
                "consolidate_threshold is {}, must be within 1..={CONSOLIDATE_THRESHOLD_MAX}",
                config.consolidate_threshold
            )));
        }
        if config.read_consolidate_threshold > CONSOLIDATE_THRESHOLD_MAX {
            return Err(Error::Config(format!(
                "read_consolidate_threshold is {}, must be within 0..={CONSOLIDATE_THRESHOLD_MAX}",
                config.read_consolidate_threshold
            )));
        }
        if config.merge_threshold > config.max_records_per_page / 2 {
            return Err(Error::Config(format!(
                "merge_threshold is {}, must be at most half of max_records_per_page ({})",
                config.merge_threshold, config.max_records_per_page
            )));
        }
        Ok(Self::build(config))
    }

    fn build(config: BwTreeConfig) -> Self {
        let table = MappingTable::new();
        let guard = &crossbeam_epoch::pin();
        let root = table.allocate();
        let leaf = BasePage::build(b"", None, NO_PID, std::iter::empty());
        table.install_new(root, Owned::new(Node::base(0, leaf)), guard);
        Self {
            table,
            esl: None,
            root: AtomicU64::new(root),
            config,
            stats: Stats::default(),
            pids_freed: AtomicU64::new(0),
            storage: None,
        }
    }

    /// This tree with its ESL read from `source` (Bw-tree §V-A): consolidations, splits and
    /// flushes then leave record deltas with LSN above it out of base pages and flushed pieces.
    /// `source` must only grow.
    pub fn with_esl_source(mut self, source: Arc<dyn EslSource>) -> Self {
        self.esl = Some(source);
        self
    }

    /// The ESL now: every LSN at or below it is on the stable log (`u64::MAX` without a
    /// source).
    #[inline]
    pub(crate) fn esl(&self) -> u64 {
        self.esl.as_ref().map_or(u64::MAX, |source| source.esl())
    }

    /// Insert (only if absent) with the write's LSN (§III-A: "All update deltas contain an
    /// LSN provided by the client"); at most [`LSN_MAX`], 0 for none.
    pub fn insert_with_lsn(&self, key: &[u8], value: &[u8], lsn: u64) -> Result<bool> {
        check_entry(key, value)?;
        check_lsn(lsn)?;
        self.write_op(key, Write::Insert(value), lsn)
    }

    /// Upsert with the write's LSN (see [`Self::insert_with_lsn`]).
    pub fn upsert_with_lsn(&self, key: &[u8], value: &[u8], lsn: u64) -> Result<()> {
        check_entry(key, value)?;
        check_lsn(lsn)?;
        self.write_op(key, Write::Upsert(value), lsn).map(|_| ())
    }

    /// Update (only if present) with the write's LSN (see [`Self::insert_with_lsn`]).
    pub fn update_with_lsn(&self, key: &[u8], value: &[u8], lsn: u64) -> Result<bool> {
        check_entry(key, value)?;
        check_lsn(lsn)?;
        self.write_op(key, Write::Update(value), lsn)
    }

    /// Remove with the write's LSN (see [`Self::insert_with_lsn`]).
    pub fn remove_with_lsn(&self, key: &[u8], lsn: u64) -> Result<bool> {
        check_lsn(lsn)?;
        if key.len() > KEY_BYTES_MAX {
            return Ok(false); // as in `remove`
        }
        self.write_op(key, Write::Remove, lsn)
    }

    /// A write as the public methods make it: on storage, helps evict first above 125 % of
    /// the budget, fails on a page that cannot be loaded, and evicts after above the budget.
    fn write_op(&self, key: &[u8], write: Write<'_>, lsn: u64) -> Result<bool> {
        if self.storage.is_none() {
            return Ok(self.write_lsn(key, write, lsn));
        }
        self.before_write();
        let written = self.catching(|| self.write_lsn(key, write, lsn));
        self.after_op();
        written
    }

    /// Get that reports a page-load failure (Bw-tree on storage) instead of "not found".
    pub fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        if key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        Ok(self.try_get_into(key, &mut out)?.then_some(out))
    }

    /// [`Self::try_get`] into `out` (no allocation once `out` is warm); false if absent.
    /// Also loads every page on the key's path: a store preloads a write's pages this way
    /// before taking its LSN ([`Self::hold_pages`]).
    pub fn try_get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        let found = self.catching(|| self.get_into(key, out));
        self.after_op();
        found
    }

    /// Remove that reports a page-load failure instead of "not found".
    pub fn try_remove(&self, key: &[u8]) -> Result<bool> {
        if key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        self.write_op(key, Write::Remove, 0)
    }

    /// Scan that reports a page-load failure (the visitor may have seen a prefix of the
    /// range by then).
    pub fn try_scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.try_scan_hinted(lower, upper, order, None, visit)
    }

    /// [`Self::try_scan`] with `Index::scan_hinted`'s length hint.
    fn try_scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: Option<usize>,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let scanned = self.catching(|| self.scan_range(lower, upper, order, len_hint, visit));
        self.after_op();
        scanned
    }

    /// `Index::scan` (no hint) and `Index::scan_hinted`: in memory directly, on storage
    /// through [`Self::try_scan_hinted`], recording a page-load failure.
    fn scan_hinted_or_not(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: Option<usize>,
        visit: &mut Visitor<'_>,
    ) {
        if self.storage.is_none() {
            return self.scan_range(lower, upper, order, len_hint, visit);
        }
        if let Err(e) = self.try_scan_hinted(lower, upper, order, len_hint, visit) {
            self.record_load_error(e);
        }
    }

    /// [`Index::scan_pinned`] that reports a page-load failure (the visitor may have seen a
    /// prefix of the range by then).
    pub fn try_scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let scanned = self.catching(|| self.scan_pinned_range(lower, upper, order, visit));
        self.after_op();
        scanned
    }

    /// Frees `pid` (LLAMA Free: its state retired, the PID reused after the epoch), then
    /// counts it in `pids_freed`. After, not before: a scan that reads the count with the
    /// increment also reads the freed word, and one that reads the PID reused reads the count
    /// with the increment (it came before the epoch drained and the PID was handed out again).
    pub(crate) fn free_page(&self, pid: Pid, guard: &Guard) {
        if self.storage.is_some() {
            // The PID is unreachable (the precondition of Free), so its state stays put.
            if let forest_llama::page_state::PageLocation::Memory(ptr) =
                self.table.read_location(pid)
            {
                self.uncount_state(gc::node_ref(crossbeam_epoch::Shared::from(ptr)));
            }
        }
        self.table.free(pid, guard);
        if let Some(storage) = &self.storage {
            // Every piece of the page is dead (`clean.rs`); this thread is pinned, so the PID
            // is not handed out again, and no piece of a later page under it exists yet.
            storage.lss.note_freed(
                pid,
                forest_llama::lss::LssAddress::current(forest_llama::lss::LSS_OFFSET_MAX),
            );
        }
        self.pids_freed.fetch_add(1, Ordering::AcqRel);
    }

    /// The count of PIDs freed (see [`Self::free_page`]).
    #[inline]
    pub(crate) fn pids_freed(&self) -> u64 {
        self.pids_freed.load(Ordering::Acquire)
    }

    /// The configuration in force.
    pub fn config(&self) -> &BwTreeConfig {
        &self.config
    }

    #[inline]
    fn root_pid(&self, _guard: &Guard) -> Pid {
        root_word_pid(self.root_word())
    }

    /// The root word: the root PID and the count of root changes (see [`ROOT_PID_BITS`]).
    #[inline]
    fn root_word(&self) -> u64 {
        // Acquire: the new root's state was installed before the root word was published.
        self.root.load(Ordering::Acquire)
    }

    /// Swaps the root from the root word `expected` (as read by [`Self::root_word`]) to
    /// `new`; false if the root changed since that read, even if it came back to the same PID.
    fn set_root(&self, expected: u64, new: Pid) -> bool {
        debug_assert!(new < 1 << ROOT_PID_BITS);
        let version = (expected >> ROOT_PID_BITS).wrapping_add(1);
        self.root
            .compare_exchange(
                expected,
                (version << ROOT_PID_BITS) | new,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

impl Index for BwTree {
    fn name(&self) -> &'static str {
        "bwtree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false; // no such key can have been written (`check_key` would refuse it)
        }
        if self.storage.is_none() {
            return self.get_into(key, out);
        }
        self.try_get_into(key, out).unwrap_or_else(|e| {
            self.record_load_error(e);
            false
        })
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        self.write_op(key, Write::Insert(value), 0)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.write_op(key, Write::Upsert(value), 0).map(|_| ())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        self.write_op(key, Write::Update(value), 0)
    }

    fn remove(&self, key: &[u8]) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false; // as in `get`
        }
        self.write_op(key, Write::Remove, 0).unwrap_or_else(|e| {
            self.record_load_error(e);
            false
        })
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_hinted_or_not(lower, upper, order, None, visit);
    }

    /// Batches sized by the hint (`scan.rs`).
    fn scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_hinted_or_not(lower, upper, order, Some(len_hint), visit);
    }

    fn scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        if self.storage.is_none() {
            return self.scan_pinned_range(lower, upper, order, visit);
        }
        if let Err(e) = self.try_scan_pinned(lower, upper, order, visit) {
            self.record_load_error(e);
        }
    }

    fn stats(&self) -> IndexStats {
        let guard = &crossbeam_epoch::pin();
        let mut stats = IndexStats {
            memory_bytes: self.table.memory_bytes() as u64,
            ..IndexStats::default()
        };
        let mut chain_buckets = [0u64; 6];
        self.table.for_each_state(guard, |_, state| {
            // SAFETY-free read: `for_each_state` hands out states read under `guard`.
            let node = gc::node_ref(state);
            stats.memory_bytes += node.chain_bytes() as u64;
            if node.level == 0 {
                stats.leaf_node_count += 1;
                // A frozen page's records are counted with the page that absorbs them.
                stats.key_count += u64::from(node.record_count);
            } else {
                stats.inner_node_count += 1;
            }
            let bucket = match node.delta_count {
                0 => 0,
                1 => 1,
                2..=3 => 2,
                4..=7 => 3,
                8..=15 => 4,
                _ => 5,
            };
            chain_buckets[bucket] += 1;
        });
        // Evicted pages: their records counted from their pieces (read, not installed).
        for (level, records) in self.evicted_page_counts() {
            if level == 0 {
                stats.leaf_node_count += 1;
                stats.key_count += records;
            } else {
                stats.inner_node_count += 1;
            }
            chain_buckets[0] += 1;
        }
        // The root PID is read before its state: a collapse may swap it in between, then
        // the new root is read instead.
        let height = self.catching(|| loop {
            if let Some(level) = self.page_level(self.root_pid(guard), guard) {
                break level + 1;
            }
        });
        stats.height = height.unwrap_or_else(|e| {
            self.record_load_error(e);
            0
        });
        let s = &self.stats;
        stats.counters = vec![
            (names::CAS_ATTEMPTS, s.cas_attempts.get()),
            (names::CAS_FAILURES, s.cas_failures.get()),
            (names::RESTARTS, s.restarts.get()),
            (names::SPLITS, s.splits.get()),
            (names::MERGES, s.merges.get()),
            (names::CONSOLIDATIONS, s.consolidations.get()),
            (counter_names::UPDATE_ATTEMPTS, s.update_attempts.get()),
            (counter_names::FAILED_UPDATES, s.failed_updates.get()),
            (counter_names::SPLIT_ATTEMPTS, s.split_attempts.get()),
            (counter_names::FAILED_SPLITS, s.failed_splits.get()),
            (
                counter_names::CONSOLIDATE_ATTEMPTS,
                s.consolidate_attempts.get(),
            ),
            (
                counter_names::FAILED_CONSOLIDATES,
                s.failed_consolidates.get(),
            ),
            (counter_names::SMO_HELPS, s.smo_helps.get()),
            (counter_names::MERGE_ATTEMPTS, s.merge_attempts.get()),
            (counter_names::FAILED_MERGES, s.failed_merges.get()),
            (counter_names::WITHDRAWN_MERGES, s.withdrawn_merges.get()),
            (counter_names::ROOT_COLLAPSES, s.root_collapses.get()),
        ];
        stats.counters.extend(self.storage_counters());
        for (name, count) in counter_names::CHAIN_LEN_BUCKETS.iter().zip(chain_buckets) {
            stats.counters.push((name, count));
        }
        stats
    }
}
