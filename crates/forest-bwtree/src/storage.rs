//! The Bw-tree on storage (issue 17, increment 3; Bw-tree §V-B, TSBw §II-C): an LSS attached
//! to the tree, resident-bytes accounting under a memory budget, eviction of pages whose
//! newest flush is stable (forest-llama `evict.rs`), and reading evicted pages back
//! (forest-llama `read.rs`).
//!
//! Every read of a PID's state goes through [`BwTree::read_node`]: a word tagged `01` (an LSS
//! address) is loaded there, so the descent, lookups, writes, scans, splits, merges and
//! consolidations all meet only memory states. A failed CAS that finds an LSS address reads
//! as "no state" (forest-llama `MappingTable::update_d`), and every such caller already starts
//! over from the root, whose descent loads the page.
//!
//! Eviction ([`BwTree::evict_to_budget`]): the clock's candidate is brought to the shape
//! "one flush delta F over the base page" (a consolidation, which keeps F when it folds
//! nothing unflushed, then a flush if needed), then F's piece is made stable and the word is
//! CASed from exactly that state to F's address. Candidates with a record delta above ESL
//! are skipped (no partial swap in this version), as are frozen pages (being merged).
//!
//! Errors: reading a page back can fail (a checksum, a decode error, EIO). The `Index` trait's
//! `get`, `remove` and `scan` cannot return an error, so the load error unwinds the
//! operation (`std::panic::resume_unwind` with a private payload: no panic hook runs) to its
//! public entry ([`BwTree::catching`]), which turns it into an `Err` where the method has a
//! `Result` (writes, `flush_page`, [`BwTree::try_get`], [`BwTree::try_remove`],
//! [`BwTree::try_scan`]) and otherwise records it ([`BwTree::take_load_error`]) and returns
//! "not found". Stopping an operation at a read is safe for the same reason a descheduled
//! thread is: every SMO step is one CAS and the next visitor completes a half-done one
//! (§IV-C). Trees without an LSS never meet an address and never catch.
//!
//! Page holds ([`BwTree::hold_pages`]): a caller that must not meet a load failure in a later
//! step (a store applying a write it already logged) takes a hold, loads the pages it will
//! need (a `try_get_into` of each key loads its path), then writes. Each swap-out waits for
//! the holds to drain (a shared/exclusive lock; only the CAS is excluded, Mk-Stable comes
//! first). Why the key's pages are still resident at the write: a page changes only by a
//! CAS on its in-memory state, so every page on the key's path at the write was either on it
//! at the preload or changed since (split, merge, index term, root growth); both are in
//! memory, and none is swapped out while the hold lives. Not covered: a merge of the key's
//! page begun after the preload, whose completion needs the left sibling, which may be
//! evicted (the write then meets a load error, as without a hold).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crossbeam_epoch::{Guard, Shared};
use forest_core::sync::atomic::Ordering;
use forest_core::{Error, Result};
use forest_llama::evict::{is_stable, swap_out, Clock, EvictStats, ResidentBytes, SwapOut};
use forest_llama::flush::FlushDelta;
use forest_llama::lss::{Lss, LssAddress, RecordKind};
use forest_llama::page_state::PageLocation;
use forest_llama::read::{load_page, payload_error, read_page, read_pieces, PageLoader};
use forest_llama::Pid;

use crate::consolidate::build_state;
use crate::delta::{Kind, Node};
use crate::flush::{DeltaRun, PageFlush, PageImage};
use crate::gc::{drop_unpublished, node_ref};
use crate::BwTree;

/// The LSS and the memory budget of a tree on storage.
pub(crate) struct Storage {
    pub(crate) lss: Arc<Lss>,
    /// Above this many resident bytes pages are evicted; `None`: never.
    budget: Option<u64>,
    pub(crate) resident: ResidentBytes,
    clock: Clock,
    pub(crate) stats: EvictStats,
    /// One thread evicts below 125 % of the budget (the background evictor's role until the
    /// store runs one); above it every writer helps.
    evicting: AtomicBool,
    /// Resident bytes when a whole sweep found nothing to evict: no new sweep until the
    /// count grows past it by a sixteenth of the budget (else every write would sweep).
    futile_at: std::sync::atomic::AtomicU64,
    /// The newest load error that no `Result` could carry (see the module doc).
    load_error: Mutex<Option<Error>>,
    /// Load errors recorded since the tree was built: a caller that must know whether its
    /// own operation met one compares it before and after (another thread may take the
    /// slot's error first).
    load_errors: std::sync::atomic::AtomicU64,
    /// A background evictor runs (`set_background_evictor`): no sweep after operations.
    background: AtomicBool,
    /// Shared by [`PageHold`]s, taken exclusively around each swap-out: while a hold lives
    /// no page is evicted, so the pages a store preloaded for a logged write stay resident
    /// until it is applied (review rev-lstore F4).
    holds: RwLock<()>,
    /// The cleaner's counters and its space target (`clean.rs`).
    pub(crate) clean_stats: forest_llama::clean::CleanStats,
    pub(crate) space_factor: Mutex<f64>,
    /// One cleaner at a time.
    pub(crate) cleaning: Mutex<()>,
    /// The SMOs' system transactions (`smo_log.rs`), and steps run unlogged because the
    /// LSS refused their unit.
    pub(crate) txn_stats: forest_llama::sys_txn::TxnStats,
    pub(crate) sys_txn_errors: forest_core::Counter,
    /// SMO steps aborted because a healthy LSS refused their unit (too large).
    pub(crate) sys_txn_refused: forest_core::Counter,
    /// Pages an SMO step allocated and has not yet published or freed (`smo_log.rs`): not
    /// flushed until then. The count lets a flush skip the lock when it is zero.
    pub(crate) unpublished: Mutex<Vec<forest_llama::Pid>>,
    pub(crate) unpublished_count: std::sync::atomic::AtomicUsize,
    /// Held shared by each SMO step from before its unit is reserved until its pages are
    /// published and registered in `unit_pages`; a checkpoint's walk takes it exclusively
    /// once, after S, so every unit below S is registered before the walk decides a page
    /// (`smo_log.rs` "Checkpoints").
    pub(crate) smo_barrier: RwLock<()>,
    /// With checkpoints in use: page → the newest committed unit that changed it, until a
    /// checkpoint whose S lies above that unit (`smo_log.rs` "Checkpoints").
    pub(crate) unit_pages: Mutex<std::collections::HashMap<forest_llama::Pid, LssAddress>>,
    /// The mapping-table checkpoints the cleaner obeys, once set (`map_checkpoint.rs`).
    pub(crate) map_checkpoints: std::sync::OnceLock<crate::map_checkpoint::MapCheckpoints>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.lss.detach();
    }
}

std::thread_local! {
    /// Page holds this thread has open (any tree): its own eviction must not wait for them.
    static HOLDING: Cell<u32> = const { Cell::new(0) };
}

/// While it lives no page of the tree is swapped out (module doc, "Page holds").
pub struct PageHold<'a> {
    _shared: Option<RwLockReadGuard<'a, ()>>,
}

impl Drop for PageHold<'_> {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(h.get() - 1));
    }
}

impl std::fmt::Debug for PageHold<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageHold").finish_non_exhaustive()
    }
}

/// The payload a failed load unwinds with (module doc).
struct LoadFailed(Error);

/// Stops the operation that needed a page it could not load (module doc).
fn fail_load(error: Error) -> ! {
    std::panic::resume_unwind(Box::new(LoadFailed(error)))
}

/// Bytes a delta adds when installed: its own, but a node merge delta's absorbed state was
/// counted with its page already.
fn delta_bytes(node: &Node) -> usize {
    match &node.kind {
        Kind::NodeMerge(merge) => node.own_bytes() - merge.right().chain_bytes(),
        _ => node.own_bytes(),
    }
}

/// Candidates made ready before one Mk-Stable (see `sweep`).
const EVICT_BATCH: usize = 32;

/// How one eviction attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    Evicted,
    /// Ready but its newest piece (here) is not stable yet.
    NotStable(LssAddress),
    Skipped,
}

/// What eviction must do to a page first.
enum Shape {
    /// One flush delta over the base page: swap out.
    Ready(FlushDelta),
    /// A bare base page: flush it.
    Flush,
    /// Deltas to fold first.
    Consolidate,
    /// A record delta above ESL: skipped (no partial swap).
    Held,
}

fn shape(node: &Node, esl: u64) -> Shape {
    match &node.kind {
        Kind::Base(_) => return Shape::Flush,
        Kind::Flush(f, behind) if only_flushes_below(node) => {
            // Behind: the base page holds writes no piece has; an image first. Not behind:
            // F's pieces hold the whole state, including when F is the image written over a
            // behind delta a dirty consolidation carried (flush deltas only, down to the
            // base page): no second consolidation (review rev-ckwire F1).
            return if *behind {
                Shape::Flush
            } else {
                Shape::Ready(*f)
            };
        }
        _ => {}
    }
    let mut current = Some(node);
    while let Some(n) = current {
        if n.lsn() > esl {
            return Shape::Held;
        }
        current = n.next();
    }
    Shape::Consolidate
}

/// Whether the chain below `node` holds flush deltas only, down to its base page.
fn only_flushes_below(node: &Node) -> bool {
    let mut current = node.next();
    while let Some(n) = current {
        match n.kind {
            Kind::Base(_) => return true,
            Kind::Flush(..) => current = n.next(),
            _ => return false,
        }
    }
    false
}

impl BwTree {
    /// This tree on `lss` (issue 17): pages may be flushed to it and, with
    /// `memory_budget_bytes`, evicted when the resident bytes of page states (base pages and
    /// deltas) pass the budget, and read back when met. Call on a fresh tree. One tree per
    /// LSS: an `lss` another live tree uses is refused with [`Error::InvalidUse`] (its
    /// cleaner would take this tree's pieces, keyed by PID, for dead ones).
    pub fn with_lss(mut self, lss: Arc<Lss>, memory_budget_bytes: Option<u64>) -> Result<Self> {
        if memory_budget_bytes == Some(0) {
            return Err(Error::Config(
                "memory_budget_bytes is 0; give at least one page's bytes, or none".into(),
            ));
        }
        // One tree per LSS (`Lss::attach`); released when this tree's storage drops.
        lss.attach()?;
        let storage = Storage {
            lss,
            budget: memory_budget_bytes,
            resident: ResidentBytes::default(),
            clock: Clock::new(),
            stats: EvictStats::default(),
            evicting: AtomicBool::new(false),
            futile_at: std::sync::atomic::AtomicU64::new(0),
            load_error: Mutex::new(None),
            load_errors: std::sync::atomic::AtomicU64::new(0),
            background: AtomicBool::new(false),
            holds: RwLock::new(()),
            clean_stats: forest_llama::clean::CleanStats::default(),
            txn_stats: forest_llama::sys_txn::TxnStats::default(),
            unpublished: Mutex::new(Vec::new()),
            unpublished_count: std::sync::atomic::AtomicUsize::new(0),
            sys_txn_errors: forest_core::Counter::default(),
            sys_txn_refused: forest_core::Counter::default(),
            smo_barrier: RwLock::new(()),
            unit_pages: Mutex::new(std::collections::HashMap::new()),
            space_factor: Mutex::new(crate::clean::LSS_SPACE_FACTOR_DEFAULT),
            cleaning: Mutex::new(()),
            map_checkpoints: std::sync::OnceLock::new(),
        };
        let guard = &crossbeam_epoch::pin();
        self.table.for_each_state(guard, |_, state| {
            storage.resident.add(node_ref(state).chain_bytes());
        });
        self.storage = Some(storage);
        Ok(self)
    }

    /// Whether a background thread runs [`Self::evict_to_budget`] (a store's evictor): then
    /// operations no longer sweep after themselves below 125 % of the budget (writers above
    /// it still help, which bounds the overshoot).
    pub fn set_background_evictor(&self, on: bool) {
        if let Some(storage) = &self.storage {
            storage.background.store(on, Ordering::Release);
        }
    }

    /// Holds every resident page in memory until the hold is dropped: swap-outs wait for it
    /// (the evictor's, and other threads' helping), so a page this thread loaded after taking
    /// the hold is still resident when it writes (a store preloads a logged write's pages
    /// this way, before taking its LSN: review rev-lstore F4). While this thread holds, its
    /// own writes do not help evict (they would wait for their own hold). Keep it short:
    /// eviction stops meanwhile. `None` without an LSS (nothing is ever evicted).
    pub fn hold_pages(&self) -> Option<PageHold<'_>> {
        let storage = self.storage.as_ref()?;
        let nested = HOLDING.with(|h| {
            let n = h.get();
            h.set(n + 1);
            n > 0
        });
        // A second hold on this thread shares the first: taking the lock again could wait
        // for a swap-out queued behind the first (writer-preferring), which waits for it.
        let shared = (!nested).then(|| storage.holds.read().unwrap_or_else(|e| e.into_inner()));
        Some(PageHold { _shared: shared })
    }

    /// Helps evict when the resident bytes are above 125 % of the budget, as every write
    /// does first; a caller that holds pages across its write ([`Self::hold_pages`]) calls
    /// this before taking the hold, since a write under a hold does not help.
    pub fn help_evict(&self) {
        self.before_write();
    }

    /// The memory budget, if the tree is on storage with one.
    pub fn memory_budget_bytes(&self) -> Option<u64> {
        self.storage.as_ref().and_then(|s| s.budget)
    }

    /// The eviction counters (evictions, loads, load races, swap-out CAS failures), if on
    /// storage.
    pub fn evict_stats(&self) -> Option<&EvictStats> {
        self.storage.as_ref().map(|s| &s.stats)
    }

    /// The attached LSS, if any.
    pub fn lss(&self) -> Option<&Arc<Lss>> {
        self.storage.as_ref().map(|s| &s.lss)
    }

    /// Resident bytes of page states as counted at install and retire (0 without an LSS).
    pub fn resident_bytes(&self) -> u64 {
        self.storage.as_ref().map_or(0, |s| s.resident.get())
    }

    /// The newest page-load error that a method without a `Result` (get, remove, scan, stats)
    /// met, taken out.
    pub fn take_load_error(&self) -> Option<Error> {
        let storage = self.storage.as_ref()?;
        let mut slot = storage.load_error.lock().unwrap_or_else(|e| e.into_inner());
        slot.take()
    }

    /// Load errors recorded so far ([`Self::take_load_error`]'s slot keeps only the newest,
    /// and any caller may take it): compare before and after an operation to know whether a
    /// load failed during it, whoever took the error.
    pub fn load_errors(&self) -> u64 {
        self.storage
            .as_ref()
            .map_or(0, |s| s.load_errors.load(Ordering::SeqCst))
    }

    /// Records `error` for [`Self::take_load_error`].
    pub(crate) fn record_load_error(&self, error: Error) {
        if let Some(storage) = &self.storage {
            storage.load_errors.fetch_add(1, Ordering::SeqCst);
            let mut slot = storage.load_error.lock().unwrap_or_else(|e| e.into_inner());
            *slot = Some(error);
        }
    }

    /// Runs `op`, turning a page-load failure inside it into `Err` (module doc). Without an
    /// LSS, just runs it.
    pub(crate) fn catching<R>(&self, op: impl FnOnce() -> R) -> Result<R> {
        if self.storage.is_none() {
            return Ok(op());
        }
        match std::panic::catch_unwind(AssertUnwindSafe(op)) {
            Ok(value) => Ok(value),
            Err(payload) => match payload.downcast::<LoadFailed>() {
                Ok(failed) => Err(failed.0),
                Err(other) => std::panic::resume_unwind(other),
            },
        }
    }

    /// Reads `pid`'s state as a node reference valid for the guard's lifetime, loading it
    /// from the LSS if it was evicted (forest-llama `read::read_page`); `None` when the PID
    /// holds no page (merged away and freed after the caller found it). A load failure stops
    /// the operation (module doc).
    #[inline]
    pub(crate) fn read_node<'g>(
        &self,
        pid: Pid,
        guard: &'g Guard,
    ) -> Option<(Shared<'g, Node>, &'g Node)> {
        let clock = self.storage.as_ref().map(|s| &s.clock);
        match read_page(
            &self.table,
            pid,
            clock,
            |bits| self.load(pid, bits, guard),
            guard,
        ) {
            Ok(state) => state.map(|state| (state, node_ref(state))),
            Err(e) => fail_load(e),
        }
    }

    /// Read of an evicted page (TSBw §II-C, forest-llama `read::load_page`): its pieces
    /// rebuilt, installed by a CAS from its address; `None` if another thread's copy won or
    /// the word changed.
    #[cold]
    fn load<'g>(&self, pid: Pid, bits: u64, guard: &'g Guard) -> Result<Option<Shared<'g, Node>>> {
        let storage = self.storage.as_ref();
        let loader = PageLoader {
            lss: storage.map(|s| (&*s.lss, &s.stats)),
            label: "page",
            rebuild: |lss: &Lss, address| self.rebuild(lss, pid, address),
            discard: drop_unpublished,
            installed: |state: Shared<'g, Node>| {
                if let Some(storage) = storage {
                    storage.resident.add(node_ref(state).chain_bytes());
                    storage.clock.touch(pid);
                }
            },
        };
        load_page(&self.table, pid, bits, &loader, guard)
    }

    /// Whether `pid`'s word no longer holds the LSS address `bits` (loaded, relocated by the
    /// cleaner, or freed since it was read).
    pub(crate) fn moved(&self, pid: Pid, bits: u64) -> bool {
        !matches!(self.table.read_location(pid), PageLocation::Stored(now) if now == bits)
    }

    /// Page `pid` rebuilt from its pieces (newest at `newest`): one base page topped by a
    /// flush delta for `newest`, so that its next flush is a delta run after it.
    fn rebuild(
        &self,
        lss: &Lss,
        pid: Pid,
        newest: LssAddress,
    ) -> Result<crossbeam_epoch::Owned<Node>> {
        let (image, lsn_high) = self.rebuild_image_lsn(lss, pid, newest)?;
        let page = image.base_page();
        let flushed = FlushDelta {
            address: newest,
            lsn_high,
            // No record delta lies below this flush delta, so its ESL (which only decides
            // whether such a delta was held back) may be today's.
            annotation: self.esl(),
        };
        Ok(build_state(image.level, page, Some((flushed, false)), &[]))
    }

    /// The page image that page `pid`'s pieces (newest at `newest`) rebuild to.
    pub(crate) fn rebuild_image(
        &self,
        lss: &Lss,
        pid: Pid,
        newest: LssAddress,
    ) -> Result<PageImage> {
        self.rebuild_image_lsn(lss, pid, newest)
            .map(|(image, _)| image)
    }

    /// [`Self::rebuild_image`] and the newest piece's highest LSN.
    fn rebuild_image_lsn(
        &self,
        lss: &Lss,
        pid: Pid,
        newest: LssAddress,
    ) -> Result<(PageImage, u64)> {
        let pieces = read_pieces(lss, pid, newest)?;
        let (image_at, image_record) = pieces.last().expect("read_pieces ends at an image");
        let mut image = PageImage::decode(&image_record.payload)
            .map_err(|what| payload_error(lss, pid, *image_at, &what))?;
        // Runs oldest first (the image is last in the newest-first list).
        for (at, record) in pieces.iter().rev().skip(1) {
            debug_assert_eq!(record.header.kind, RecordKind::DeltaRun);
            let run = DeltaRun::decode(&record.payload)
                .map_err(|what| payload_error(lss, pid, *at, &what))?;
            image.apply(&run);
        }
        Ok((image, pieces[0].1.header.lsn_high))
    }

    /// Counts a delta installed by this thread's CAS.
    #[inline]
    pub(crate) fn count_delta(&self, node: &Node) {
        if let Some(storage) = &self.storage {
            storage.resident.add(delta_bytes(node));
        }
    }

    /// Counts a whole state installed (a new page, a consolidated page).
    #[inline]
    pub(crate) fn count_state(&self, node: &Node) {
        if let Some(storage) = &self.storage {
            storage.resident.add(node.chain_bytes());
        }
    }

    /// Counts a whole state swapped out of the table (retired).
    #[inline]
    pub(crate) fn uncount_state(&self, node: &Node) {
        if let Some(storage) = &self.storage {
            storage.resident.sub(node.chain_bytes());
        }
    }

    /// Counts one node swapped out alone (a withdrawn remove node delta).
    #[inline]
    pub(crate) fn uncount_node(&self, node: &Node) {
        if let Some(storage) = &self.storage {
            storage.resident.sub(node.own_bytes());
        }
    }

    /// Before a write: above 125 % of the budget the writer helps evict (bounds overshoot).
    #[inline]
    pub(crate) fn before_write(&self) {
        if let Some(Storage {
            budget: Some(budget),
            resident,
            ..
        }) = &self.storage
        {
            if resident.get() > budget + budget / 4 && HOLDING.with(Cell::get) == 0 {
                self.evict_to_budget_reporting(true);
            }
        }
    }

    /// After an operation: above the budget one thread at a time evicts down below it.
    #[inline]
    pub(crate) fn after_op(&self) {
        if let Some(Storage {
            budget: Some(budget),
            resident,
            futile_at,
            background,
            ..
        }) = &self.storage
        {
            if background.load(Ordering::Relaxed) {
                return;
            }
            let now = resident.get();
            let futile = futile_at.load(std::sync::atomic::Ordering::Relaxed);
            if now > *budget && now > futile.saturating_add(budget / 16) {
                self.evict_to_budget_reporting(false);
            }
        }
    }

    fn evict_to_budget_reporting(&self, help: bool) {
        if let Err(e) = self
            .catching(|| self.evict_to_budget_inner(help))
            .and_then(|r| r)
        {
            self.record_load_error(e);
        }
        if !help {
            // Without a background thread the after-op evictor also keeps the LSS within its
            // space target (`clean.rs`); a cleaner already at work is left alone.
            if let Err(e) = self.clean_if_idle() {
                self.record_load_error(e);
            }
        }
    }

    /// Evicts pages until the resident bytes are at most the budget, or a sweep of every
    /// page found none to evict (leaves first; index pages only when no leaf qualifies).
    /// Returns the pages evicted. Without a budget, does nothing.
    pub fn evict_to_budget(&self) -> Result<usize> {
        self.catching(|| self.evict_to_budget_inner(true))?
    }

    fn evict_to_budget_inner(&self, help: bool) -> Result<usize> {
        let Some(storage) = &self.storage else {
            return Ok(0);
        };
        let Some(budget) = storage.budget else {
            return Ok(0);
        };
        /// Clears the evicting flag however the sweep ends (a load error unwinds through it).
        struct Evicting<'a>(&'a AtomicBool);
        impl Drop for Evicting<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _evicting = if help {
            None
        } else if storage
            .evicting
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Some(Evicting(&storage.evicting))
        } else {
            return Ok(0); // another thread is evicting
        };
        self.sweep(storage, budget, help)
    }

    /// The clock: a turn over the leaves (a referenced page has its bit cleared and is passed
    /// over: a second chance), then, if that evicted nothing, a turn over every page, until the resident bytes are within `budget`. A candidate whose
    /// newest piece is not stable yet is left for a later sweep (its flush is posted; the
    /// piece becomes stable when its buffer is written), unless `help` (above 125 % of the
    /// budget): then such candidates wait in a batch of up to [`EVICT_BATCH`], made stable by
    /// one Mk-Stable, so that a helper waits for the device once per batch, not per page.
    fn sweep(&self, storage: &Storage, budget: u64, help: bool) -> Result<usize> {
        let mut evicted = 0;
        let mut pending: Vec<Pid> = Vec::new();
        let mut newest: Option<LssAddress> = None;
        for allow_index in [false, true] {
            let end = self.table.pid_end();
            for _ in 0..end {
                if storage.resident.get() <= budget {
                    break;
                }
                let Some(pid) = storage.clock.advance(end) else {
                    break;
                };
                // Evicted and free PIDs cost one load: under a small budget most PIDs are.
                if !matches!(self.table.read_location(pid), PageLocation::Memory(_)) {
                    continue;
                }
                if storage.clock.clear(pid) {
                    continue; // referenced since the hand last passed: a second chance
                }
                match self.evict_page(storage, pid, allow_index, false)? {
                    Attempt::Evicted => evicted += 1,
                    Attempt::NotStable(_) if !help => {}
                    Attempt::NotStable(address) => {
                        pending.push(pid);
                        newest = newest.max(Some(address));
                        if pending.len() >= EVICT_BATCH {
                            evicted += self.evict_pending(storage, &mut pending, &mut newest)?;
                        }
                    }
                    Attempt::Skipped => {}
                }
            }
            evicted += self.evict_pending(storage, &mut pending, &mut newest)?;
            if evicted > 0 || storage.resident.get() <= budget {
                // Pages are evictable again (ESL passed their deltas, say): a past futile
                // sweep must not keep the after-op evictor off (review rev-evict F2).
                if evicted > 0 {
                    storage
                        .futile_at
                        .store(0, std::sync::atomic::Ordering::Relaxed);
                }
                return Ok(evicted);
            }
        }
        storage
            .futile_at
            .store(storage.resident.get(), std::sync::atomic::Ordering::Relaxed);
        Ok(evicted)
    }

    /// Makes the batch's pieces stable with one Mk-Stable and evicts its pages.
    fn evict_pending(
        &self,
        storage: &Storage,
        pending: &mut Vec<Pid>,
        newest: &mut Option<LssAddress>,
    ) -> Result<usize> {
        let Some(address) = newest.take() else {
            return Ok(0);
        };
        storage
            .lss
            .mk_stable(LssAddress::current(address.offset() + 1))?;
        let mut evicted = 0;
        for pid in pending.drain(..) {
            if matches!(self.evict_page(storage, pid, true, true)?, Attempt::Evicted) {
                evicted += 1;
            }
        }
        Ok(evicted)
    }

    /// Evicts page `pid` if it can (module doc). With `wait` false, a page whose newest
    /// piece is not stable yet is left as it is and reported with that piece's address.
    fn evict_page(
        &self,
        storage: &Storage,
        pid: Pid,
        allow_index: bool,
        wait: bool,
    ) -> Result<Attempt> {
        // Consolidate, flush, swap out: three rounds, twice (a change of the page makes the
        // swap-out CAS lose once and the page be brought to shape again). The image written
        // over the behind flush delta of a dirty consolidation is swapped out as it is
        // (`shape`; review rev-ckwire F1: it was consolidated a second time).
        for _ in 0..6 {
            let guard = &crossbeam_epoch::pin();
            let PageLocation::Memory(ptr) = self.table.read_location(pid) else {
                return Ok(Attempt::Skipped); // evicted already, or no page
            };
            let state: Shared<'_, Node> = Shared::from(ptr);
            let node = node_ref(state);
            if (node.level > 0 && !allow_index) || matches!(node.kind, Kind::RemoveNode { .. }) {
                return Ok(Attempt::Skipped);
            }
            match shape(node, self.esl()) {
                Shape::Held => return Ok(Attempt::Skipped),
                Shape::Ready(f) if !wait && !is_stable(&storage.lss, f.address) => {
                    return Ok(Attempt::NotStable(f.address));
                }
                Shape::Ready(f) => {
                    if !is_stable(&storage.lss, f.address) {
                        // Before taking the holds' lock: no hold waits for the device.
                        storage
                            .lss
                            .mk_stable(LssAddress::current(f.address.offset() + 1))?;
                    }
                    if HOLDING.with(Cell::get) > 0 {
                        // This thread holds pages: waiting for the holds would wait for itself.
                        return Ok(Attempt::Skipped);
                    }
                    let _no_holds = storage.holds.write().unwrap_or_else(|e| e.into_inner());
                    let outcome = swap_out(
                        &self.table,
                        &storage.lss,
                        pid,
                        state,
                        f.address,
                        &storage.stats,
                        guard,
                    )?;
                    if outcome == SwapOut::Evicted {
                        storage.resident.sub(node.chain_bytes());
                        return Ok(Attempt::Evicted);
                    }
                }
                Shape::Consolidate => {
                    self.consolidate_if_longer(pid, state, node, 0, guard);
                }
                Shape::Flush => match self.flush_page_inner(pid, &storage.lss)? {
                    PageFlush::Frozen | PageFlush::Gone => return Ok(Attempt::Skipped),
                    PageFlush::Flushed { .. } | PageFlush::Clean | PageFlush::Lost { .. } => {}
                },
            }
        }
        Ok(Attempt::Skipped)
    }

    /// Evicts page `pid` now, ignoring the budget and the clock (tests, and a store that
    /// wants a page out); whether it did.
    pub fn evict_pid(&self, pid: Pid) -> Result<bool> {
        let Some(storage) = &self.storage else {
            return Err(Error::InvalidUse(
                "evict_pid on a tree without an LSS".into(),
            ));
        };
        let attempt = self.catching(|| self.evict_page(storage, pid, true, true))??;
        Ok(attempt == Attempt::Evicted)
    }

    /// The address of page `pid`'s newest piece if the page is evicted now (its word holds
    /// an LSS address), else `None`.
    pub fn evicted_at(&self, pid: Pid) -> Option<LssAddress> {
        match self.table.read_location(pid) {
            PageLocation::Stored(bits) => LssAddress::from_bits(bits),
            _ => None,
        }
    }

    /// The resident bytes found by walking the mapping table now (every in-memory state's
    /// chain), to check the counted [`Self::resident_bytes`] against when no operation runs
    /// and no merge is half done.
    pub fn resident_bytes_walked(&self) -> u64 {
        let guard = &crossbeam_epoch::pin();
        let mut total = 0u64;
        self.table.for_each_state(guard, |_, state| {
            total += node_ref(state).chain_bytes() as u64;
        });
        total
    }

    /// (level, records) of every evicted page, read from its pieces without loading it; a
    /// page that cannot be read is left out and its error recorded.
    pub(crate) fn evicted_page_counts(&self) -> Vec<(u32, u64)> {
        let Some(storage) = &self.storage else {
            return Vec::new();
        };
        let mut counts = Vec::new();
        for pid in 0..self.table.pid_end() as Pid {
            // Retried while the cleaner moves the page under the read (`clean.rs`).
            while let Some(address) = self.evicted_at(pid) {
                match self.rebuild_image(&storage.lss, pid, address) {
                    Ok(image) => counts.push((image.level, image.records.len() as u64)),
                    Err(_) if self.moved(pid, address.to_bits()) => continue,
                    Err(e) => self.record_load_error(e),
                }
                break;
            }
        }
        counts
    }

    /// The level of page `pid`, read from its pieces if it is evicted (not loaded: stats
    /// must not change what is resident); `None` if the PID holds no page.
    pub(crate) fn page_level(&self, pid: Pid, guard: &Guard) -> Option<u32> {
        loop {
            return match (self.table.read_location(pid), &self.storage) {
                (PageLocation::Stored(bits), Some(storage)) => {
                    let address = LssAddress::from_bits(bits)?;
                    match self.rebuild_image(&storage.lss, pid, address) {
                        Ok(image) => Some(image.level),
                        // Moved by the cleaner meanwhile (`clean.rs`): read the word again.
                        Err(_) if self.moved(pid, bits) => continue,
                        Err(e) => fail_load(e),
                    }
                }
                _ => self.read_node(pid, guard).map(|(_, node)| node.level),
            };
        }
    }

    /// The counters of eviction: evictions, loads, load races, failed swap-out CASes, and
    /// the resident bytes; empty without an LSS.
    pub(crate) fn storage_counters(&self) -> Vec<(&'static str, u64)> {
        let Some(storage) = &self.storage else {
            return Vec::new();
        };
        let s = &storage.stats;
        vec![
            (crate::counter_names::EVICTIONS, s.evictions.get()),
            (crate::counter_names::LOADS, s.loads.get()),
            (crate::counter_names::LOAD_RACES, s.load_races.get()),
            (
                crate::counter_names::EVICT_CAS_FAILURES,
                s.evict_cas_failures.get(),
            ),
            (crate::counter_names::RESIDENT_BYTES, storage.resident.get()),
            (
                crate::counter_names::SEGMENTS_CLEANED,
                storage.clean_stats.segments_cleaned.get(),
            ),
            (
                crate::counter_names::BYTES_RELOCATED,
                storage.clean_stats.bytes_relocated.get(),
            ),
            (
                crate::counter_names::LSS_LIVE_BYTES,
                storage.lss.live_bytes(),
            ),
            (
                crate::counter_names::LSS_TOTAL_BYTES,
                storage.lss.total_bytes(),
            ),
        ]
    }
}
