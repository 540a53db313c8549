//! The TSBw-tree on LSS-C (issue 18, step 0 of LSS-H; TSBw §II-C Read, §II-D Flush; Bw-tree
//! §V-B swapping pages out), after forest-bwtree's `storage.rs`: a tree built
//! [`TsbTree::with_lss`] flushes pages as whole images (`marshal.rs`) through forest-llama's
//! Flush, evicts cold pages under a budget of resident pages, and loads an evicted page when
//! a read meets its LSS address.
//!
//! Every read of a PID goes through [`TsbTree::read_node`]: a word holding an LSS address is
//! loaded there (one image, installed by a CAS from the address; the loser of a race drops
//! its copy), so descents, splits, consolidations, scans and histories meet memory states
//! only. A CAS that finds an address fails like one that finds another state, and every
//! caller starts over from a read, which loads.
//!
//! **Flush.** [`TsbTree::flush_page`] folds the page's state, writes its image with the
//! versions whose timestamp is at most the *flush limit* ([`TsbTree::set_flush_limit`]: a
//! store's timestamps go with its LSNs, so the limit is the timestamp of its ESL; versions
//! above it are held back as bwtree holds back deltas above ESL, §V-A) and CASes a flush
//! delta ([`Kind::Flush`], annotation = the limit used) onto the state it read. Whole images
//! only in this step: incremental pieces (a run of versions, the split pieces `marshal.rs`
//! encodes) are open. Without a store the limit is ∞: an applied version may be flushed.
//!
//! **Flush order** (for recovery, `recover.rs`; forest's rule, the paper logs Algorithm 1's
//! steps as system transactions instead). A page's image is reserved only after the images
//! it relies on: the page a side link or a history link names has *some* image (any image of
//! a key split's right page holds its range's versions as of the split, and a historical page
//! never changes), and each page an index page's terms name has an image holding its newest
//! split or term change (else a recovered parent could route keys to a right page whose left
//! page recovered unsplit, whose next split would then post a term over them). Two flags on
//! every node track this without a walk: `imaged` (some state has an image; a flush delta
//! sets it, consolidation carries it) and `structure_unflushed` (a split or term delta since
//! the newest image; a new page starts with it). [`TsbTree::flush_page`] flushes the pages
//! lacking them first, each in the same order, on an explicit stack; the flags are read after
//! the page's state, so a link's later changes are not waited for. Addresses order the
//! stable prefix, so whatever prefix survives a crash holds each image's dependencies.
//!
//! **Eviction.** A page is swapped out (forest-llama `evict::swap_out`: Mk-Stable, then a CAS
//! from exactly the state to the address) only in the shape "flush deltas over the base" (a
//! page flushed while held and again once the limit passed has two; the top image is whole),
//! with no version in the base above the top flush's limit (else it is *held*, and stays). A
//! current page with other deltas is consolidated first (the flush delta does not survive a
//! consolidation: the next flush writes a new image). Historical pages never change after
//! their time split (§IV-A2), so they are flushed once and are the first candidates: taken
//! from a list (pushed at a time split's commit and at a load), before the clock turns over
//! current leaves, then any page. One Mk-Stable per batch of up to 32 candidates.
//!
//! **Budget.** In resident pages (PIDs whose word holds a memory state), not bytes:
//! `live PIDs − evicted PIDs`, counted at swap-out, load and free. A free racing a load of
//! the same page may miscount by one (the count only steers eviction). After each public
//! operation one thread at a time evicts down to the budget.
//!
//! **Split by bytes.** A leaf's image must fit one LSS record (a segment's room), so on LSS-C
//! a leaf is split not only over `max_records_per_page` but also once its versions take more
//! than half a record (`Node::bytes`, an upper bound; a key split then cuts at half the bytes).
//! A page is split after the write that takes it over, so it holds at most half a record plus
//! one entry; [`TsbTree::with_lss`] refuses segments whose half record cannot hold the largest
//! entry and a header. A split held off by an in-flight unit (crate doc) may leave a leaf
//! over that for the writes of the stall: its flush fails (InvalidUse) until the split runs.
//!
//! **Errors.** A page that cannot be loaded (crc, decode, EIO) stops the operation: the error
//! unwinds with a private payload to the public entry ([`TsbTree::catching`]), which returns it
//! where the method has a `Result` and otherwise records it ([`TsbTree::take_load_error`]) and
//! answers "not found". Stopping at a read is safe for the reason a descheduled thread is:
//! each split step is one CAS and the next visitor completes a half-done split (§IV-C).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::{Guard, Shared};
use forest_core::sync::atomic::Ordering;
use forest_core::{Counter, Error, Result};
use forest_llama::evict::{is_stable, swap_out, Clock, EvictStats, SwapOut};
use forest_llama::flush::{flush, FlushOutcome, Piece as LssPiece};
use forest_llama::lss::{Lss, LssAddress, RecordKind};
use forest_llama::page_state::PageLocation;
use forest_llama::read::{load_page, payload_error, read_page, read_pieces, PageLoader};
use forest_llama::Pid;

use crate::marshal::{self, Header, Piece};
use crate::node::{self, IndexBase, Kind, LeafBase, Node, Term, INFINITY};
use crate::page;
use crate::TsbTree;

/// The LSS and the budget of a tree on storage.
pub(crate) struct Storage {
    pub(crate) lss: Arc<Lss>,
    budget_pages: Option<usize>,
    /// PIDs whose word holds an LSS address.
    evicted: AtomicI64,
    clock: Clock,
    stats: EvictStats,
    flushes: Counter,
    /// One thread evicts after operations at a time.
    evicting: AtomicBool,
    /// Historical pages that may be resident: the first eviction candidates, taken without
    /// a walk over the mapping table (pushed at a time split's commit and at a load).
    historical: Mutex<Vec<Pid>>,
    load_error: Mutex<Option<Error>>,
    load_errors: AtomicU64,
    /// A leaf whose versions take more bytes than this is split (review rev-tsb6 F6).
    leaf_bytes_max: u64,
    /// The mapping-table checkpoints and the meta file, once in use (`recover.rs`).
    pub(crate) checkpoints: std::sync::OnceLock<crate::recover::TsbCheckpoints>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.lss.detach();
    }
}

/// The payload a failed load unwinds with (module doc).
struct LoadFailed(Error);

fn fail_load(error: Error) -> ! {
    std::panic::resume_unwind(Box::new(LoadFailed(error)))
}

/// `$ty { low, high, side, start, end, history, $field: $value }` with the first six taken
/// from `$from`'s fields of those names: a page's bounds and links pass between a view or a
/// base page and an image header (`marshal::Header`) unchanged, in both directions.
macro_rules! with_bounds {
    ($ty:ident, $from:expr, $field:ident: $value:expr) => {
        $ty {
            low: $from.low,
            high: $from.high,
            side: $from.side,
            start: $from.start,
            end: $from.end,
            history: $from.history,
            $field: $value,
        }
    };
}

/// How a [`TsbTree::flush_page`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsbFlush {
    /// A page image went to the buffer at `address` and its flush delta is installed.
    Flushed { address: LssAddress },
    /// Nothing to write: the page is flush deltas over its base with nothing held back, or
    /// its image at this flush limit is written already.
    Clean,
    /// The page changed between the read and the CAS (a filler took the room).
    Lost,
    /// The PID holds no page.
    Gone,
}

/// What eviction must do to a page first.
enum Shape {
    Ready(LssAddress),
    Flush,
    Consolidate,
    /// A version above the flush limit is in the base page: not evicted.
    Held,
}

/// The newest timestamp in a base page (0 for an index page: it holds no versions).
fn base_newest_ts(base: &Node) -> u64 {
    match &base.kind {
        Kind::Leaf(b) => b.records.iter().map(|r| r.ts).max().unwrap_or(0),
        _ => 0,
    }
}

/// The base page under a chain of flush deltas only (`head` itself a flush delta), if so.
/// A page flushed while it held a version back, and again once the limit passed, is
/// Flush/Flush/base: the top image is whole, so the chain evicts as one flush over the base
/// (a historical page is never consolidated; review rev-tsb6 F2).
fn flush_only_base(head: &Node) -> Option<&Node> {
    let mut at = head.next()?;
    while matches!(at.kind, Kind::Flush(_)) {
        at = at.next()?;
    }
    at.next().is_none().then_some(at)
}

/// What page state `head` needs before it can be swapped out, at flush limit `limit`.
fn shape(head: &Node, limit: u64) -> Shape {
    match &head.kind {
        Kind::Flush(f) => match flush_only_base(head) {
            Some(base) => {
                let newest = base_newest_ts(base);
                if newest <= f.annotation {
                    Shape::Ready(f.address)
                } else if newest <= limit {
                    Shape::Flush // the limit passed what that flush held back
                } else {
                    Shape::Held
                }
            }
            _ => Shape::Consolidate,
        },
        Kind::Leaf(_) | Kind::Index(_) if base_newest_ts(head) > limit => Shape::Held,
        Kind::Leaf(_) | Kind::Index(_) => Shape::Flush,
        _ => Shape::Consolidate,
    }
}

impl TsbTree {
    /// This tree on `lss` (LSS-C): pages are flushed to it and, with `memory_budget_pages`,
    /// evicted once more pages than that are resident, and loaded again when met. Pages the
    /// tree holds already stay in memory until evicted. One tree per LSS (`Lss::attach`; a second is refused with
    /// [`Error::InvalidUse`]).
    pub fn with_lss(mut self, lss: Arc<Lss>, memory_budget_pages: Option<usize>) -> Result<Self> {
        if memory_budget_pages == Some(0) {
            return Err(Error::Config(
                "tsbtree: memory_budget_pages is 0; give at least one page, or none".into(),
            ));
        }
        // A leaf is split once over half a record (`leaf_bytes_max`); until then one more
        // entry and a header (low and high keys) must still fit one record.
        let record_max = lss.config().record_bytes_max();
        let entry_max = (forest_core::limits::KEY_BYTES_MAX * 3
            + forest_core::limits::VALUE_BYTES_MAX
            + 4096) as u64;
        if record_max / 2 < entry_max {
            return Err(Error::Config(format!(
                "tsbtree: LSS records of at most {record_max} bytes: half of one must hold the \
                 largest entry and a page header ({entry_max} bytes); use larger segments"
            )));
        }
        lss.attach()?;
        let guard = &crossbeam_epoch::pin();
        let mut historical = Vec::new();
        self.table.for_each_state(guard, |pid, state| {
            if node::state_ref(state, guard).is_some_and(page::is_historical) {
                historical.push(pid);
            }
        });
        self.storage = Some(Storage {
            lss,
            budget_pages: memory_budget_pages,
            evicted: AtomicI64::new(0),
            clock: Clock::new(),
            stats: EvictStats::default(),
            flushes: Counter::default(),
            evicting: AtomicBool::new(false),
            historical: Mutex::new(historical),
            load_error: Mutex::new(None),
            load_errors: AtomicU64::new(0),
            leaf_bytes_max: record_max / 2,
            checkpoints: std::sync::OnceLock::new(),
        });
        Ok(self)
    }

    /// The attached LSS, if any.
    pub fn lss(&self) -> Option<&Arc<Lss>> {
        self.storage.as_ref().map(|s| &s.lss)
    }

    /// Versions with a timestamp above `ts` are held back from flushes (module doc); a store
    /// raises it to the timestamp of its ESL. Only raised.
    pub fn set_flush_limit(&self, ts: u64) {
        self.flush_limit.fetch_max(ts, Ordering::AcqRel);
        // After the value: a reader that sees the flag sees a limit at least `ts`.
        self.flush_limit_set.store(true, Ordering::Release);
    }

    /// The flush limit ([`Self::set_flush_limit`]); ∞ until a store sets one (0 included).
    pub fn flush_limit(&self) -> u64 {
        if self.flush_limit_set.load(Ordering::Acquire) {
            self.flush_limit.load(Ordering::Acquire)
        } else {
            INFINITY
        }
    }

    /// The eviction counters (evictions, loads, load races, swap-out CAS failures).
    pub fn evict_stats(&self) -> Option<&EvictStats> {
        self.storage.as_ref().map(|s| &s.stats)
    }

    /// Page images written by flushes that won their CAS.
    pub fn flush_count(&self) -> u64 {
        self.storage.as_ref().map_or(0, |s| s.flushes.get())
    }

    /// Pages whose state is in memory now (all live pages without an LSS).
    pub fn resident_pages(&self) -> usize {
        let live = self.table.live_count();
        match &self.storage {
            Some(s) => live.saturating_sub(s.evicted.load(Ordering::Relaxed).max(0) as usize),
            None => live,
        }
    }

    /// Counts `pages` whose words hold LSS addresses at open (`recover.rs`).
    pub(crate) fn count_evicted(&self, pages: usize) {
        if let Some(storage) = &self.storage {
            storage
                .evicted
                .fetch_add(i64::try_from(pages).unwrap_or(i64::MAX), Ordering::Relaxed);
        }
    }

    /// The newest load error that a method without a `Result` met, taken out.
    pub fn take_load_error(&self) -> Option<Error> {
        let storage = self.storage.as_ref()?;
        storage
            .load_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Load errors recorded since the tree was built.
    pub fn load_errors(&self) -> u64 {
        self.storage
            .as_ref()
            .map_or(0, |s| s.load_errors.load(Ordering::SeqCst))
    }

    pub(crate) fn record_load_error(&self, error: Error) {
        if let Some(storage) = &self.storage {
            storage.load_errors.fetch_add(1, Ordering::SeqCst);
            *storage.load_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
        }
    }

    /// Runs one public operation: a load failure inside it becomes `Err` (module doc), and
    /// afterwards one thread evicts down to the budget. Without an LSS, just runs it.
    pub(crate) fn catching<R>(&self, op: impl FnOnce() -> R) -> Result<R> {
        if self.storage.is_none() {
            return Ok(op());
        }
        let out = match std::panic::catch_unwind(AssertUnwindSafe(op)) {
            Ok(value) => Ok(value),
            Err(payload) => match payload.downcast::<LoadFailed>() {
                Ok(failed) => Err(failed.0),
                Err(other) => std::panic::resume_unwind(other),
            },
        };
        self.after_op();
        out
    }

    /// Whether leaf `head` is over its byte limit on LSS-C (module doc, "Split by bytes").
    pub(crate) fn leaf_over_bytes(&self, head: &Node) -> bool {
        self.storage
            .as_ref()
            .is_some_and(|s| head.level == 0 && head.bytes > s.leaf_bytes_max)
    }

    /// Where a key split of `records` cuts first: the middle record, or on LSS-C for a leaf
    /// over its byte limit the record where half the bytes are behind.
    pub(crate) fn split_point(&self, records: &[crate::version::Record]) -> usize {
        let Some(storage) = &self.storage else {
            return records.len() / 2;
        };
        let total: u64 = records.iter().map(node::record_bytes).sum();
        if total <= storage.leaf_bytes_max {
            return records.len() / 2;
        }
        let mut behind = 0;
        for (i, r) in records.iter().enumerate() {
            if behind >= total / 2 {
                return i;
            }
            behind += node::record_bytes(r);
        }
        records.len() / 2
    }

    /// Runs the follow-up work of a write whose version is in place (review rev-tsb6 F1): a
    /// load failure in it is recorded, not returned, and the work stops there.
    pub(crate) fn catching_follow_up(&self, work: impl FnOnce()) {
        if self.storage.is_none() {
            return work();
        }
        if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(work)) {
            match payload.downcast::<LoadFailed>() {
                Ok(failed) => self.record_load_error(failed.0),
                Err(other) => std::panic::resume_unwind(other),
            }
        }
    }

    /// [`Self::catching`] for a method without a `Result`: an error is recorded and `or`
    /// returned.
    pub(crate) fn catching_or<R>(&self, or: R, op: impl FnOnce() -> R) -> R {
        self.catching(op).unwrap_or_else(|e| {
            self.record_load_error(e);
            or
        })
    }

    /// Reads `pid`'s state, loading it if it was evicted (forest-llama `read::read_page`);
    /// `None` when the PID holds no page. A load failure stops the operation (module doc).
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
            Ok(state) => state.and_then(|state| Some((state, node::state_ref(state, guard)?))),
            Err(e) => fail_load(e),
        }
    }

    /// Read of an evicted page (TSBw §II-C, forest-llama `read::load_page`): its image
    /// rebuilt as a flush delta over a base page, installed by a CAS from its address; `None`
    /// if another thread's copy won or the word changed.
    #[cold]
    fn load<'g>(&self, pid: Pid, bits: u64, guard: &'g Guard) -> Result<Option<Shared<'g, Node>>> {
        let storage = self.storage.as_ref();
        let loader = PageLoader {
            lss: storage.map(|s| (&*s.lss, &s.stats)),
            label: "tsbtree page",
            rebuild: |lss: &Lss, address| self.rebuild(lss, pid, address, guard),
            discard: node::drop_unpublished,
            installed: |state: Shared<'g, Node>| {
                if let Some(storage) = storage {
                    storage.evicted.fetch_sub(1, Ordering::Relaxed);
                    if node::state_ref(state, guard).is_some_and(page::is_historical) {
                        self.note_historical(pid);
                    }
                    storage.clock.touch(pid);
                }
            },
        };
        load_page(&self.table, pid, bits, &loader, guard)
    }

    /// (level, historical, versions) of every evicted page, decoded from its image without
    /// loading it (stats must not change what is resident); a page that cannot be read is
    /// left out and its error recorded.
    pub(crate) fn evicted_pages(&self) -> Vec<(u32, bool, Vec<crate::version::Record>)> {
        let Some(storage) = &self.storage else {
            return Vec::new();
        };
        let mut pages = Vec::new();
        for pid in 0..self.table.pid_end() as Pid {
            let PageLocation::Stored(bits) = self.table.read_location(pid) else {
                continue;
            };
            let Some(address) = LssAddress::from_bits(bits) else {
                continue;
            };
            let decoded = read_pieces(&storage.lss, pid, address).and_then(|pieces| {
                let (at, record) = &pieces[0];
                marshal::decode(&record.payload)
                    .map_err(|what| payload_error(&storage.lss, pid, *at, &what))
            });
            match decoded {
                Ok(Piece::Leaf(h, records)) => pages.push((0, h.end != INFINITY, records)),
                Ok(Piece::Index(h, _)) => pages.push((h.level, h.end != INFINITY, Vec::new())),
                Ok(_) => {}
                // Loaded or freed meanwhile: no longer evicted.
                Err(_) if self.table.read_location(pid) != PageLocation::Stored(bits) => {}
                Err(e) => self.record_load_error(e),
            }
        }
        pages
    }

    /// Page `pid`'s state rebuilt from its newest piece at `address`.
    fn rebuild(
        &self,
        lss: &Lss,
        pid: Pid,
        address: LssAddress,
        guard: &Guard,
    ) -> Result<crossbeam_epoch::Owned<Node>> {
        let pieces = read_pieces(lss, pid, address)?;
        let [(at, record)] = pieces.as_slice() else {
            return Err(payload_error(
                lss,
                pid,
                address,
                &format!(
                    "a chain of {} pieces; tsbtree writes whole images only",
                    pieces.len()
                ),
            ));
        };
        let decoded =
            marshal::decode(&record.payload).map_err(|what| payload_error(lss, pid, *at, &what))?;
        let (level, kind, count) = match decoded {
            Piece::Leaf(h, records) => {
                let n = records.len();
                (
                    0,
                    Kind::Leaf(with_bounds!(LeafBase, h, records: records)),
                    n,
                )
            }
            Piece::Index(h, terms) => {
                let n = terms.len();
                let entries = terms
                    .into_iter()
                    .map(|(key, ts, pid)| Term { key, ts, pid })
                    .collect();
                (
                    h.level,
                    Kind::Index(with_bounds!(IndexBase, h, entries: entries)),
                    n,
                )
            }
            Piece::KeySplit { .. } | Piece::TimeSplit { .. } => {
                return Err(payload_error(
                    lss,
                    pid,
                    *at,
                    "a split piece where a page image was expected",
                ))
            }
        };
        // Unpublished until the caller's install: `into_shared` only names it for the delta.
        let base = Node::base(kind, level, count).into_shared(guard);
        // The image holds no version above the newest it wrote, which is at most the limit
        // of the flush that wrote it: so the loaded state can be swapped out unchanged.
        let flushed = forest_llama::flush::FlushDelta {
            address,
            lsn_high: record.header.lsn_high,
            annotation: record.header.lsn_high,
        };
        let head = node::state_ref(base, guard).expect("just built");
        Ok(Node::delta(head, base, Kind::Flush(flushed), count))
    }

    /// Flushes page `pid` to LSS-C once (module doc): a whole image of its state, versions
    /// above the flush limit held back. The piece is in the buffer, not yet durable
    /// ([`Lss::mk_stable`] makes it so). Errors: no LSS, or the LSS refused the piece, or a
    /// load failed.
    pub fn flush_page(&self, pid: Pid) -> Result<TsbFlush> {
        self.catching(|| self.flush_page_inner(pid))?
    }

    /// [`Self::flush_page`] in the flush order (module doc): the pages `pid` links to and
    /// that lack the image it relies on are flushed first, each after its own such pages, on
    /// an explicit stack (a level's side links can chain every page of it).
    pub(crate) fn flush_page_inner(&self, pid: Pid) -> Result<TsbFlush> {
        let Some(storage) = &self.storage else {
            return Err(Error::InvalidUse(
                "flush_page on a tree without an LSS".into(),
            ));
        };
        let mut stack = vec![pid];
        let mut on_stack = std::collections::HashSet::from([pid]);
        let step_max = FLUSH_ORDER_STEPS_MIN + 8 * self.table.pid_end();
        for _ in 0..step_max {
            let top = *stack.last().expect("popped only on its way out");
            // A link already on the stack would wait for its own waiter: a cycle cannot come
            // from the tree's links (side links go right, history links back in time, terms
            // down); only a stale term naming a PID retention freed and a page reused could
            // close one, and a stale term is never followed: that link is let go.
            match self.flush_one(storage, top, &on_stack)? {
                FlushStep::Done(outcome) => {
                    stack.pop();
                    on_stack.remove(&top);
                    if stack.is_empty() {
                        return Ok(outcome);
                    }
                }
                FlushStep::LinksFirst(links) => {
                    for link in links {
                        if on_stack.insert(link) {
                            stack.push(link);
                        }
                    }
                }
            }
        }
        Err(Error::InvalidUse(format!(
            "tsbtree: flushing page {pid} took more than {step_max} steps (pages it links to \
             kept losing their flushes to writes); nothing is lost, the flush may be retried"
        )))
    }

    /// Flushes page `pid` once if every page it links to has the image it relies on (module
    /// doc, "Flush order"), else names those pages (none of `waiting`, which are let go).
    fn flush_one(
        &self,
        storage: &Storage,
        pid: Pid,
        waiting: &std::collections::HashSet<Pid>,
    ) -> Result<FlushStep> {
        let guard = &crossbeam_epoch::pin();
        let Some((state, head)) = self.read_node(pid, guard) else {
            return Ok(FlushStep::Done(TsbFlush::Gone));
        };
        // Read after the state: the limit only grows.
        let limit = self.flush_limit();
        match (&head.kind, shape(head, limit)) {
            (_, Shape::Ready(_)) => return Ok(FlushStep::Done(TsbFlush::Clean)),
            // Held back at this very limit already: the image would be the same again.
            (Kind::Flush(f), Shape::Held) if f.annotation >= limit => {
                return Ok(FlushStep::Done(TsbFlush::Clean));
            }
            _ => {}
        }
        // Side and history links need an image of the page; an index page's terms need their
        // child's structure in its newest image. Read after `state`: a link's later changes
        // are not what this image relies on.
        let mut first = Vec::new();
        let mut need = |link: Option<Pid>, structure: bool| {
            if let Some(link) = link {
                if !waiting.contains(&link) && !self.has_image(link, structure, guard) {
                    first.push(link);
                }
            }
        };
        let (payload, low, high) = if head.level == 0 {
            let view = page::leaf_view(head);
            need(view.side, false);
            need(view.history, false);
            let header = with_bounds!(Header, view, level: 0);
            let kept = view.records.iter().filter(|r| r.ts <= limit);
            let low = kept.clone().map(|r| r.ts).min().unwrap_or(0);
            let high = kept.clone().map(|r| r.ts).max().unwrap_or(0);
            let kept: Vec<_> = kept.collect();
            (marshal::encode_leaf(&header, kept.into_iter()), low, high)
        } else {
            let view = page::index_view(head);
            need(view.side, false);
            need(view.history, false);
            for term in &view.entries {
                need(Some(term.pid), true);
            }
            let header = with_bounds!(Header, view, level: head.level);
            let terms = view.entries.iter().map(|t| (&*t.key, t.ts, t.pid));
            (marshal::encode_index(&header, terms), 0, 0)
        };
        if !first.is_empty() {
            first.sort_unstable();
            first.dedup();
            return Ok(FlushStep::LinksFirst(first));
        }
        let piece = LssPiece {
            kind: RecordKind::PageImage,
            lsn_low: low,
            lsn_high: high,
            prev: None,
            payload: &payload,
        };
        let outcome = flush(
            &self.table,
            &storage.lss,
            pid,
            state,
            &piece,
            limit,
            |delta| Node::delta(head, state, Kind::Flush(delta), head.record_count as usize),
            guard,
        )?;
        Ok(FlushStep::Done(match outcome {
            FlushOutcome::Installed { address, .. } => {
                storage.flushes.incr();
                TsbFlush::Flushed { address }
            }
            FlushOutcome::Lost { .. } => TsbFlush::Lost,
        }))
    }

    /// Whether page `link` has an image reserved in LSS-C (with `structure`: one holding its
    /// newest split or term change), or needs none (evicted: its word is its image; free or
    /// empty: nothing to write). Reads the word without loading.
    fn has_image(&self, link: Pid, structure: bool, guard: &Guard) -> bool {
        match self.table.read_location(link) {
            // Read under `guard`: the state lives until it unpins.
            PageLocation::Memory(ptr) => {
                node::state_ref(Shared::from(ptr), guard).is_none_or(|n| {
                    if structure {
                        !n.structure_unflushed
                    } else {
                        n.imaged
                    }
                })
            }
            _ => true,
        }
    }

    /// Evicts page `pid` now, ignoring the budget and the clock; whether it did.
    pub fn evict_pid(&self, pid: Pid) -> Result<bool> {
        if self.storage.is_none() {
            return Err(Error::InvalidUse(
                "evict_pid on a tree without an LSS".into(),
            ));
        }
        let attempt = self.catching(|| self.evict_page(pid, Pass::Any, true))??;
        Ok(attempt == Attempt::Evicted)
    }

    /// Evicts pages until at most the budget is resident or a sweep found none to evict;
    /// the pages evicted. Without a budget, nothing.
    pub fn evict_to_budget(&self) -> Result<usize> {
        self.catching(|| self.sweep())?
    }

    /// After a public operation: above the budget, one thread at a time evicts.
    fn after_op(&self) {
        let Some(storage) = &self.storage else {
            return;
        };
        let Some(budget) = storage.budget_pages else {
            return;
        };
        if self.resident_pages() <= budget
            || storage
                .evicting
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        /// Clears the flag however the sweep ends (a load error unwinds through it).
        struct Evicting<'a>(&'a AtomicBool);
        impl Drop for Evicting<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _evicting = Evicting(&storage.evicting);
        let swept = std::panic::catch_unwind(AssertUnwindSafe(|| self.sweep()));
        match swept {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.record_load_error(e),
            Err(payload) => match payload.downcast::<LoadFailed>() {
                Ok(failed) => self.record_load_error(failed.0),
                Err(other) => std::panic::resume_unwind(other),
            },
        }
    }

    /// Eviction in three turns: historical pages (they never change, so one flush each,
    /// from their list), then the clock (second chance) over current leaves, then over any
    /// page; each until a quarter of the
    /// budget is free again (so that not every operation sweeps). Pages whose image is not
    /// stable yet wait in a batch of [`EVICT_BATCH`], made stable by one Mk-Stable.
    fn sweep(&self) -> Result<usize> {
        let Some(storage) = &self.storage else {
            return Ok(0);
        };
        let Some(budget) = storage.budget_pages else {
            return Ok(0);
        };
        let target = (budget - budget / 4).max(1);
        let mut evicted = 0;
        let mut pending: Vec<Pid> = Vec::new();
        let mut newest: Option<LssAddress> = None;
        let enough =
            |pending: &Vec<Pid>| self.resident_pages().saturating_sub(pending.len()) <= target;
        // Historical pages first, from their list: a PID popped that was loaded again is
        // pushed again by its load; one freed or reused is skipped by `evict_page`'s checks.
        while !enough(&pending) {
            let next = storage
                .historical
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            let Some(pid) = next else {
                break;
            };
            evicted += self.try_evict(pid, Pass::Historical, &mut pending, &mut newest)?;
        }
        'passes: for pass in [Pass::Leaves, Pass::Any] {
            let end = self.table.pid_end();
            for _ in 0..end {
                if enough(&pending) {
                    break 'passes;
                }
                let Some(pid) = storage.clock.advance(end) else {
                    break;
                };
                if !matches!(self.table.read_location(pid), PageLocation::Memory(_)) {
                    continue;
                }
                if storage.clock.clear(pid) {
                    continue; // referenced since the hand last passed: a second chance
                }
                evicted += self.try_evict(pid, pass, &mut pending, &mut newest)?;
            }
        }
        evicted += self.evict_pending(&mut pending, &mut newest)?;
        Ok(evicted)
    }

    /// One candidate of a sweep: evicted now, or, its image not stable yet, added to the
    /// batch (`pending`, whose newest image is `newest`), which is evicted once full. The
    /// pages evicted.
    fn try_evict(
        &self,
        pid: Pid,
        pass: Pass,
        pending: &mut Vec<Pid>,
        newest: &mut Option<LssAddress>,
    ) -> Result<usize> {
        match self.evict_page(pid, pass, false)? {
            Attempt::Evicted => Ok(1),
            Attempt::NotStable(address) => {
                pending.push(pid);
                *newest = (*newest).max(Some(address));
                if pending.len() >= EVICT_BATCH {
                    return self.evict_pending(pending, newest);
                }
                Ok(0)
            }
            Attempt::Skipped => Ok(0),
        }
    }

    /// Makes the batch's images stable with one Mk-Stable and evicts its pages.
    fn evict_pending(
        &self,
        pending: &mut Vec<Pid>,
        newest: &mut Option<LssAddress>,
    ) -> Result<usize> {
        let (Some(storage), Some(address)) = (&self.storage, newest.take()) else {
            return Ok(0);
        };
        storage
            .lss
            .mk_stable(LssAddress::current(address.offset() + 1))?;
        let mut evicted = 0;
        for pid in pending.drain(..) {
            if self.evict_page(pid, Pass::Any, true)? == Attempt::Evicted {
                evicted += 1;
            }
        }
        Ok(evicted)
    }

    /// Brings page `pid` to the shape "flush delta over base" and swaps it out (module doc),
    /// if `pass` allows its kind. Without `wait`, a page whose image is not stable yet is
    /// reported with the image's address instead.
    fn evict_page(&self, pid: Pid, pass: Pass, wait: bool) -> Result<Attempt> {
        let Some(storage) = &self.storage else {
            return Ok(Attempt::Skipped);
        };
        // Consolidate, flush, swap out; twice, for a change that makes the CAS lose once.
        for _ in 0..6 {
            let guard = &crossbeam_epoch::pin();
            if !matches!(self.table.read_location(pid), PageLocation::Memory(_)) {
                return Ok(Attempt::Skipped);
            }
            let Some((state, head)) = node::read(&self.table, pid, guard) else {
                return Ok(Attempt::Skipped);
            };
            let allowed = match pass {
                Pass::Historical => page::is_historical(head),
                Pass::Leaves => head.level == 0,
                Pass::Any => true,
            };
            if !allowed {
                return Ok(Attempt::Skipped);
            }
            match shape(head, self.flush_limit()) {
                Shape::Held => return Ok(Attempt::Skipped),
                Shape::Ready(address) if !wait && !is_stable(&storage.lss, address) => {
                    return Ok(Attempt::NotStable(address));
                }
                Shape::Ready(address) => {
                    if !is_stable(&storage.lss, address) {
                        storage
                            .lss
                            .mk_stable(LssAddress::current(address.offset() + 1))?;
                    }
                    let outcome = swap_out(
                        &self.table,
                        &storage.lss,
                        pid,
                        state,
                        address,
                        &storage.stats,
                        guard,
                    )?;
                    if outcome == SwapOut::Evicted {
                        storage.evicted.fetch_add(1, Ordering::Relaxed);
                        return Ok(Attempt::Evicted);
                    }
                }
                // Historical pages are never consolidated (never updated, §IV-A2); they have
                // no delta but the flush's.
                Shape::Consolidate if page::is_historical(head) => return Ok(Attempt::Skipped),
                Shape::Consolidate => self.consolidate(pid, state, head, guard),
                Shape::Flush => match self.flush_page_inner(pid)? {
                    TsbFlush::Gone => return Ok(Attempt::Skipped),
                    TsbFlush::Flushed { .. } | TsbFlush::Clean | TsbFlush::Lost => {}
                },
            }
        }
        Ok(Attempt::Skipped)
    }

    /// Notes historical page `pid` as an eviction candidate (module doc).
    pub(crate) fn note_historical(&self, pid: Pid) {
        if let Some(Storage {
            budget_pages: Some(_),
            historical,
            ..
        }) = &self.storage
        {
            historical
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(pid);
        }
    }

    /// Free (LLAMA) of `pid`, keeping the evicted count when the page was evicted and telling
    /// the LSS its images are dead (review rev-tsb6 F4).
    pub(crate) fn free_page(&self, pid: Pid, guard: &Guard) {
        if let Some(storage) = &self.storage {
            if matches!(self.table.read_location(pid), PageLocation::Stored(_)) {
                storage.evicted.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.table.free(pid, guard);
        if let Some(storage) = &self.storage {
            // Every image of the page is dead now (as bwtree's free_page): the caller is
            // pinned, so the PID is not handed out again and no later page's image exists.
            storage
                .lss
                .note_freed(pid, LssAddress::current(forest_llama::lss::LSS_OFFSET_MAX));
        }
    }

    /// Page `pid`'s time range `[start, end)` (end ∞ for a current page), loading it if it
    /// is evicted; `None` if the PID holds no page. For tests and tools.
    pub fn page_time_range(&self, pid: Pid) -> Result<Option<(u64, u64)>> {
        self.catching(|| {
            let guard = &crossbeam_epoch::pin();
            self.read_node(pid, guard)
                .map(|(_, head)| page::time_range(head))
        })
    }

    /// The current leaf holding `key` now. For tests and tools.
    pub fn leaf_pid(&self, key: &[u8]) -> Result<Pid> {
        self.catching(|| {
            let guard = &crossbeam_epoch::pin();
            self.find_leaf_as_of(crate::as_of::Target::At(key), INFINITY, guard)
                .map(|(pid, _)| pid)
        })?
    }

    /// The address of page `pid`'s image if it is evicted now.
    pub fn evicted_at(&self, pid: Pid) -> Option<LssAddress> {
        match self.table.read_location(pid) {
            PageLocation::Stored(bits) => LssAddress::from_bits(bits),
            _ => None,
        }
    }

    /// Every PID that holds a page now (resident or evicted), in PID order.
    pub fn page_ids(&self) -> Vec<Pid> {
        (0..self.table.pid_end() as Pid)
            .filter(|&pid| {
                matches!(
                    self.table.read_location(pid),
                    PageLocation::Memory(_) | PageLocation::Stored(_)
                )
            })
            .collect()
    }

    /// Eviction's counters for [`forest_core::Index::stats`]; empty without an LSS.
    pub(crate) fn storage_counters(&self) -> Vec<(&'static str, u64)> {
        let Some(storage) = &self.storage else {
            return Vec::new();
        };
        let s = &storage.stats;
        vec![
            (crate::counter_names::EVICTIONS, s.evictions.get()),
            (crate::counter_names::LOADS, s.loads.get()),
            (crate::counter_names::LOAD_RACES, s.load_races.get()),
            (crate::counter_names::FLUSHES, storage.flushes.get()),
            (
                crate::counter_names::RESIDENT_PAGES,
                self.resident_pages() as u64,
            ),
        ]
    }
}

/// What one step of the flush order did.
enum FlushStep {
    Done(TsbFlush),
    /// These pages must be flushed first.
    LinksFirst(Vec<Pid>),
}

/// Steps a flush in the flush order may take beyond 8 per PID in use (each page it must
/// flush first takes two, more when a flush loses to a write).
const FLUSH_ORDER_STEPS_MIN: usize = 1024;

/// Candidates made ready before one Mk-Stable.
const EVICT_BATCH: usize = 32;

/// How one eviction attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    Evicted,
    /// Ready, but its image (here) is not stable yet.
    NotStable(LssAddress),
    Skipped,
}

/// Which pages a clock turn may evict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Historical,
    Leaves,
    Any,
}
