//! [`Store`]: the durable store over any engine of the [`Index`] trait: the papers'
//! transactional component (DESIGN.md "Durability"; bw-tree.md §V-A; masstree.md §5).
//!
//! A write: lock the key's stripe, decide the outcome from the current value (insert only if
//! absent, update only if present, remove only if present, read-modify-write), and if it
//! changes anything, log it in the thread's shard (the LSN is taken, the record encoded and
//! the index applied under the shard's lock, `wal::group_commit`), release the stripe, then
//! wait for durability as the mode says. An operation that changes nothing takes no LSN, but
//! waits for the last LSN taken under its stripe: what it saw must be durable before it
//! answers (issue 12, defect 4).
//!
//! Atomic batches ([`WriteBatch`], [`Store::write`], [`Batch::write`]; issue 12): the stripes
//! of all the batch's keys are locked in ascending order (no deadlock with other batches;
//! single writers hold one stripe), every op is decided against the current values and the
//! batch's own earlier ops, and the records that change something are logged as one unit
//! (consecutive LSNs in one shard log, `wal::group_commit::log_unit`): recovery applies it
//! whole or not at all. Readers: each stripe is also a seqlock, odd while a batch applies
//! its keys; [`Store::get`] and [`Store::get_many`] retry (waiting on the stripe's lock)
//! until they read with no batch half applied, so no point read sees part of a batch. Scans
//! see each batch whole or not at all through the scan gate (`scan_gate`): short ones read
//! optimistically between batches, long ones hold batches (not single writes) off while
//! they run. A scan is otherwise not a snapshot: single writes may land during it.
//!
//! Invariants:
//! - Per key, LSN order = apply order (the stripe covers both), so replay in LSN order
//!   rebuilds what readers saw.
//! - A write returns `Ok` in `sync`/`group` only once every LSN up to its own is durable.
//! - After any write or fsync failure the store refuses writes until reopened; reads go on
//!   (they may show writes that were never acknowledged).
//! - One open `Store` per directory ([`Dir::lock`]).
//!
//! Open: after recovery replayed any log record of a store that did not close cleanly, a
//! checkpoint is written before the store takes writes, so the recovered state is durable
//! even if the logs it came from were only in the page cache (after a failed fsync). After a
//! clean close ([`Store::close`] seals every log once it is synced) none is needed, so a
//! full disk never keeps a clean store from opening.
//!
//! On `bztree-pm` the engine's file is the index and, under `persist=msync`, the data: single
//! writes skip the logs and batches are redo records (`crate::pm` has the model per mode).
//!
//! Choices: readers may see a write before it is durable (Masstree does too); a [`Batch`] as
//! a whole is not atomic (a Redis pipeline is not either), only its durability wait is
//! shared; each [`WriteBatch`] within it is. Old logs are deleted once two newer
//! checkpoints exist, so recovery can fall back from a damaged newest checkpoint to the one
//! before it (the logs it needs are kept).

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use forest_core::{check_entry, check_key, Error, Index, IndexStats, Order, Result, Visitor};
use forest_engines::EngineSpec;
pub use forest_engines::ENGINE_DEFAULT;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::checkpoint::{self, CheckpointInfo};
use crate::durability::Durability;
use crate::file::{Dir, DirLock, OsDir};
use crate::lsn::{KeyStripes, LsnAllocator};
use crate::meta::{self, StoreMeta};
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::scan_gate::ScanGate;
use crate::verify::VerifyReport;
use crate::wal::group_commit::{GroupCommit, SHARD_COUNT_MAX};
use crate::wal::record::RECORD_HEADER_BYTES;
use crate::wal::{log_name, LogHeader, LogWriter, Op};

mod map_ckpt;
mod reads;
mod temporal;

pub use reads::ReadFailures;

/// The default number of shard logs. Every shard adds an fsync to each group-commit round, so
/// one log shares fsyncs best; more shards pay off only when appends to one log buffer contend
/// (many cores). Check with `forest bench --engines lockbtree --workload durable-put
/// --durability group --threads 64 --keys 0 --ops 20000` (fsyncs/ack column).
pub const SHARD_COUNT_DEFAULT: usize = 1;

/// A unit of up to this many ops keeps its bookkeeping off the heap: its stripes, their
/// locks, its records and what each op changed stay on the stack, and the unit's own earlier
/// effects are found among its records instead of in a map (a collection command is a unit
/// of two: its member and its type entry; issue 19). Not every such unit allocates nothing:
/// a conditional op reads the current value into a fresh buffer, and the temporal and msync
/// paths keep maps (review rev-lists13 F4).
const SMALL_UNIT_OPS: usize = 4;

/// What each op of a unit changed.
type Changed = SmallVec<[bool; SMALL_UNIT_OPS]>;

/// A unit's records: op, key, value.
type UnitRecords<'a> = SmallVec<[(Op, &'a [u8], &'a [u8]); SMALL_UNIT_OPS]>;

/// A new, empty engine as `spec` names it (`masstree`, `masstree:fanout=15x32`; the
/// registry, `forest_engines`), if it can be a store's index.
pub fn new_engine(spec: &str) -> Result<Box<dyn Index>> {
    let spec = EngineSpec::parse(spec)?;
    store_engine(&spec.name)?;
    forest_engines::build(&spec)
}

/// The engines that can be a store's index, in registry order. Temporal engines (`tsbtree`)
/// can be one too but are not listed: they need one shard log and never switch in from
/// another engine (`store/temporal.rs`), which the tests run over every engine assume; they
/// have tests of their own.
pub fn engine_names() -> Vec<&'static str> {
    forest_engines::ENGINES
        .iter()
        .filter(|e| e.capabilities.durable_through_store)
        .map(|e| e.name)
        .collect()
}

/// The registry entry of `name`, if it can be a store's index.
fn store_engine(name: &str) -> Result<&'static forest_engines::EngineEntry> {
    let entry = forest_engines::find(name)?;
    // bztree-pm keeps its own file, which a store can hold as its data (`crate::pm`).
    let c = entry.capabilities;
    // A temporal in-memory engine keeps its history through the logs (`temporal`).
    let indexable =
        c.durable_through_store || c.store_holds_its_file || (c.temporal && c.in_memory);
    if !indexable {
        let why = if c.persistent_on_its_own {
            "keeps its own files"
        } else {
            "is not durable through a store's logs (yet)"
        };
        return Err(Error::Config(format!(
            "engine {name:?} {why} and cannot be the index of a store (`forest engines` lists \
             each engine's capabilities)"
        )));
    }
    Ok(entry)
}

/// The canonical form of `spec` (`forest_engines::canonical`), checked as a store engine.
pub(crate) fn canonical_spec(spec: &str) -> Result<String> {
    let spec = EngineSpec::parse(spec)?;
    store_engine(&spec.name)?;
    Ok(forest_engines::canonical(&spec)?.label())
}

/// How to open a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// The engine spec (`masstree`, `masstree:fanout=15x32`; `forest engines` lists them);
    /// `None`: the one recorded in the directory's meta file (`crate::meta`), or
    /// [`ENGINE_DEFAULT`] for a new store. A new store records the spec named; an existing
    /// one refuses a spec other than its recorded one unless [`Self::switch_engine`].
    pub engine: Option<String>,
    /// Open with `engine` even if the store recorded another: the logs and checkpoints hold
    /// keys and values only, so the index is rebuilt in the new engine, which is recorded.
    pub switch_engine: bool,
    pub durability: Durability,
    /// Shard logs written in parallel, 1..=`SHARD_COUNT_MAX`.
    pub shards: usize,
    /// Engine `bwtree` only: run the tree on its own log-structured store in `DIR/lss/` and
    /// evict pages above this many resident bytes (`crate::llama`); `None`: all in memory.
    /// Other engines refuse a budget.
    pub memory_budget_bytes: Option<u64>,
    /// With a memory budget: take a mapping-table checkpoint of the tree's LSS once this many
    /// WAL bytes were logged since the last one (on a background thread), and recover the
    /// tree from its LSS at open, redoing the WAL from the checkpoint's RSSP only
    /// (`crate::llama`, "Recovery"). Default
    /// [`crate::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT`]. `None`: no map checkpoints, so
    /// every open discards `DIR/lss/` and rebuilds the tree from the store's checkpoint and
    /// WAL — unless `DIR/lss/` already holds map checkpoints: they are then used, on the
    /// default schedule, since the WAL may be cut below them. Ignored without a budget.
    pub map_checkpoint_wal_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            engine: None,
            switch_engine: false,
            durability: Durability::default(),
            shards: SHARD_COUNT_DEFAULT,
            memory_budget_bytes: None,
            map_checkpoint_wal_bytes: Some(crate::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT),
        }
    }
}

/// One operation of a [`WriteBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Sets the key only if it is absent (given the batch's earlier ops).
    Insert(Vec<u8>, Vec<u8>),
    /// Sets the key.
    Upsert(Vec<u8>, Vec<u8>),
    /// Sets the key only if it is present.
    Update(Vec<u8>, Vec<u8>),
    /// Removes the key.
    Remove(Vec<u8>),
    /// Removes the key, which the caller knows present: not read first, which saves
    /// [`Self::Remove`]'s descent of the index (a list's pop, which has just read its
    /// element). Always reported as a change, and logged (but a single record on an msync
    /// bztree-pm, which goes to the tree unlogged): if the key was absent after all, the store
    /// is unchanged (the removal applies and replays as nothing). On a temporal store it is
    /// read first, as [`Self::Remove`] is, since a removal there is a delete version at a new
    /// timestamp: an absent key gets none (still reported a change).
    RemovePresent(Vec<u8>),
}

impl BatchOp {
    /// The key the op writes.
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Insert(k, _)
            | BatchOp::Upsert(k, _)
            | BatchOp::Update(k, _)
            | BatchOp::Remove(k)
            | BatchOp::RemovePresent(k) => k,
        }
    }
}

/// Writes applied all or nothing, after any crash and for every reader of single keys (as
/// RocksDB's `WriteBatch` and redb's write transaction): [`Store::write`], or
/// [`Batch::write`] inside a pipeline. Ops apply in order, each seeing the earlier ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Upsert(key.to_vec(), value.to_vec()));
        self
    }

    /// Sets `key` to `value` only if absent.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Insert(key.to_vec(), value.to_vec()));
        self
    }

    /// Sets `key` to `value` only if present.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Update(key.to_vec(), value.to_vec()));
        self
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Remove(key.to_vec()));
        self
    }

    /// Adds `op`.
    pub fn push(&mut self, op: BatchOp) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// The number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no op.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// What a read-modify-write does with the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rmw {
    /// Leave it as it is (nothing is logged).
    Keep,
    /// Give it this value.
    Put(Vec<u8>),
    /// Remove it.
    Remove,
}

/// A store's counters.
#[derive(Clone, Debug)]
pub struct StoreStats {
    pub index: IndexStats,
    pub engine: String,
    pub durability: Durability,
    pub shard_count: usize,
    /// The next LSN to hand out.
    pub lsn_next: u64,
    /// Every LSN up to this one is durable.
    pub durable_lsn: u64,
    pub fsync_count: u64,
    pub checkpoint_count: u64,
    /// What recovery found at open.
    pub recovery: RecoveryReport,
    /// A store on `bwtree` with a memory budget: its memory and eviction counters.
    pub memory: Option<MemoryStats>,
}

/// Memory and eviction counters of a store whose `bwtree` runs on its LSS under a budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryStats {
    pub budget_bytes: u64,
    /// Resident bytes of page states (base pages and deltas), as counted at install and
    /// retire.
    pub resident_bytes: u64,
    /// The most resident bytes a read or write saw since open.
    pub resident_peak_bytes: u64,
    /// Pages swapped out to the LSS.
    pub evictions: u64,
    /// Pages read back from the LSS.
    pub loads: u64,
    /// The ESL the tree reads: every LSN up to it is durable.
    pub esl: u64,
    /// Bytes written to the LSS.
    pub lss_bytes_written: u64,
    /// Bytes of live page pieces in the LSS (the cleaner's accounting).
    pub lss_live_bytes: u64,
    /// Bytes of the LSS's segment files (written since open, not removed by the cleaner).
    pub lss_total_bytes: u64,
    /// Segments the cleaner removed.
    pub lss_segments_cleaned: u64,
    /// Bytes of page images the cleaner wrote.
    pub lss_bytes_relocated: u64,
    /// The error the background evictor met last, if any.
    pub evictor_error: Option<String>,
    /// The error a scheduled map checkpoint met last, if any
    /// (`StoreOptions::map_checkpoint_wal_bytes`).
    pub map_checkpoint_error: Option<String>,
}

#[derive(Debug)]
struct CheckpointState {
    /// Logs no longer written: (name, every record's LSN is below this).
    retired: Vec<(String, u64)>,
    log_seq_next: u64,
    /// A bwtree with map checkpoints: the RSSPs of the kept ones this process knows, oldest
    /// first (at most two; `checkpoint_map`).
    map_rssps: Vec<u64>,
}

impl CheckpointState {
    /// Keeps the logs a rotation at `start_lsn` closed, to delete once a checkpoint covers
    /// them (every record in them is below `start_lsn`).
    fn retire(&mut self, old_logs: Vec<LogWriter>, start_lsn: u64) {
        for old in old_logs {
            let name = old
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .expect("log names are plain UTF-8 names")
                .to_string();
            self.retired.push((name, start_lsn));
        }
    }
}

/// A durable ordered key-value store (see the module doc).
pub struct Store {
    dir: Arc<dyn Dir>,
    index: Box<dyn Index>,
    lsns: Arc<LsnAllocator>,
    stripes: KeyStripes,
    /// Keeps scans from seeing part of an atomic batch (`scan_gate`).
    gate: ScanGate,
    commit: Arc<GroupCommit>,
    options: StoreOptions,
    /// The engine in use (named, recorded or the default).
    engine: String,
    checkpoints: Arc<Mutex<CheckpointState>>,
    checkpoint_count: Arc<AtomicU64>,
    recovery: RecoveryReport,
    /// The persistent BzTree's file, when it is the index (`crate::pm`).
    pm: Option<crate::pm::Pm>,
    /// The Bw-tree on its LSS, when the store has a memory budget (`crate::llama`).
    llama: Option<crate::llama::Llama>,
    /// Takes the scheduled map checkpoints of a bwtree on its LSS (`map_ckpt`).
    map_checkpointer: Option<map_ckpt::Checkpointer>,
    /// False while the state recovered from logs is not yet durable on its own (the open's
    /// checkpoint pending): closing then must not seal the logs as clean.
    clean_close: AtomicBool,
    /// A temporal store's units between their timestamp and their apply, per shard
    /// (`temporal`: §IV-B1's EOSL-TS).
    in_flight: Arc<temporal::InFlight>,
    /// `META`'s `layout` ([`Self::layout`]) and `durable_through` as recorded at open (what
    /// [`Self::set_layout`] writes back beside the new layout).
    layout: Mutex<(u32, u64)>,
    _lock: DirLock,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir.path())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What [`Store::write_one`] did: changed, what to wait for, the value decided from.
type WroteOne = (bool, Ack, Option<Vec<u8>>);

/// What a write's acknowledgement waits for: its LSN to be acknowledged under the durability
/// mode (None: nothing), and on a temporal store the units in flight at or below its
/// timestamp to apply ([`Store::settle`]; None: it took none, the clock bounds the wait).
#[derive(Clone, Copy, Debug, Default)]
struct Ack {
    lsn: Option<u64>,
    ts: Option<u64>,
}

/// Creates the log set `seq` of `shards` logs whose LSNs start at `first_lsn`, with LSNs
/// `void_from .. first_lsn` recorded as void (cut by recovery, never handed out); `opened`:
/// made by a store's open.
fn create_logs(
    dir: &dyn Dir,
    seq: u64,
    shards: usize,
    (first_lsn, void_from): (u64, u64),
    opened: bool,
) -> Result<Vec<LogWriter>> {
    let count = u32::try_from(shards).expect("shards are bounded by SHARD_COUNT_MAX");
    let mut writers = Vec::with_capacity(shards);
    for shard_id in 0..count {
        let header = LogHeader {
            void_from,
            opened,
            ..LogHeader::new(shard_id, count, first_lsn)
        };
        match LogWriter::create(dir, &log_name(seq, shard_id), header) {
            Ok(writer) => writers.push(writer),
            Err(e) => {
                // Best effort: a set that never takes records is harmless to recovery.
                for shard in 0..=shard_id {
                    let _ = dir.remove(&log_name(seq, shard));
                }
                return Err(e);
            }
        }
    }
    Ok(writers)
}

/// The next generation of logs a checkpoint rotates to, starting at the next LSN.
fn fresh_logs_in(
    dir: &dyn Dir,
    lsns: &LsnAllocator,
    shards: usize,
    state: &mut CheckpointState,
) -> Result<Vec<LogWriter>> {
    let seq = state.log_seq_next;
    state.log_seq_next += 1;
    let next = lsns.next();
    create_logs(dir, seq, shards, (next, next), false)
}

/// The canonical engine spec to open `dir` with: `named` if given, else the one its meta
/// file records, else [`ENGINE_DEFAULT`]. Errors: an unknown engine or bad parameters; a
/// named spec other than the recorded one without `switch`; a damaged meta file unless an
/// engine is named (the open then writes a new one).
pub fn resolve_engine(dir: &dyn Dir, named: Option<&str>, switch: bool) -> Result<String> {
    match (named, meta::read(dir)) {
        (Some(named), recorded) => {
            let named = canonical_spec(named)?;
            check_recorded(recorded, &named, switch)?;
            Ok(named)
        }
        (None, Ok(Some(meta))) => canonical_spec(&meta.engine),
        (None, Ok(None)) => Ok(ENGINE_DEFAULT.to_string()),
        (None, Err(e)) => Err(e),
    }
}

/// The spec as recorded: canonical if the registry knows it, else as given (an index of
/// the caller's making, `Store::open_with_index`).
pub(crate) fn spec_form(spec: &str) -> String {
    canonical_spec(spec).unwrap_or_else(|_| spec.to_string())
}

/// Whether an open naming `named` (canonical) may go on given what META holds: the same
/// spec, or another with `switch`; no META; a damaged one (the open rewrites it). A META of
/// a newer format is never overwritten.
fn check_recorded(recorded: Result<Option<StoreMeta>>, named: &str, switch: bool) -> Result<()> {
    if named.len() > meta::ENGINE_SPEC_BYTES_MAX {
        return Err(Error::Config(format!(
            "engine spec {named:?} is longer than {} bytes",
            meta::ENGINE_SPEC_BYTES_MAX
        )));
    }
    let meta = match recorded {
        Ok(Some(meta)) => meta,
        Ok(None) | Err(Error::Corrupt { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let recorded = spec_form(&meta.engine);
    if recorded != named && !switch {
        return Err(Error::Config(format!(
            "the store was created with engine `{recorded}`, and `{named}` was named: open it \
             without naming an engine to use `{recorded}`, or switch engines explicitly \
             (--switch-engine; StoreOptions::switch_engine), which rebuilds the index in \
             `{named}` from the logs and checkpoint"
        )));
    }
    Ok(())
}

impl Store {
    /// Opens (creating if empty) the store in `dir`: takes the directory's lock, recovers,
    /// starts new shard logs and their flushers.
    pub fn open(dir: impl Dir + 'static, options: StoreOptions) -> Result<Self> {
        Self::open_in_mode(dir, options, RecoveryMode::Repair, None)
    }

    /// As [`Self::open`] with [`StoreOptions::map_checkpoint_wal_bytes`] set to `wal_bytes`
    /// (the default is on already). Refused without a memory budget.
    pub fn open_with_map_checkpoints(
        dir: impl Dir + 'static,
        options: StoreOptions,
        wal_bytes: u64,
    ) -> Result<Self> {
        if options.memory_budget_bytes.is_none() {
            return Err(Error::Config(
                "map checkpoints need engine bwtree with a memory budget".into(),
            ));
        }
        let options = StoreOptions {
            map_checkpoint_wal_bytes: Some(wal_bytes),
            ..options
        };
        Self::open_in_mode(dir, options, RecoveryMode::Repair, None)
    }

    /// As [`Self::open`], but a loss that recovery proves (acknowledged writes gone: a
    /// damaged or missing log) is accepted: what is dropped is listed in
    /// [`RecoveryReport::losses`] (`forest check --repair`). Never the default.
    pub fn open_accepting_loss(dir: impl Dir + 'static, options: StoreOptions) -> Result<Self> {
        Self::open_in_mode(dir, options, RecoveryMode::AcceptLoss, None)
    }

    /// As [`Self::open`] with an index of the caller's making (an engine of one's own, or a
    /// test's instrumented one); `options.engine` names it in the store's meta file.
    pub fn open_with_index(
        dir: impl Dir + 'static,
        options: StoreOptions,
        make_index: &dyn Fn() -> Box<dyn Index>,
    ) -> Result<Self> {
        Self::open_in_mode(dir, options, RecoveryMode::Repair, Some(make_index))
    }

    fn open_in_mode(
        dir: impl Dir + 'static,
        options: StoreOptions,
        mode: RecoveryMode,
        make_index: Option<&dyn Fn() -> Box<dyn Index>>,
    ) -> Result<Self> {
        if options.shards == 0 || options.shards > SHARD_COUNT_MAX {
            return Err(Error::Config(format!(
                "shards: {} given, 1..={SHARD_COUNT_MAX} allowed",
                options.shards
            )));
        }
        let lock = dir.lock()?;
        // The directory's own name must survive a power loss before anything in it matters.
        dir.sync_parent()?;
        let engine = match (make_index, &options.engine) {
            (Some(_), Some(name)) => {
                let named = spec_form(name);
                check_recorded(meta::read(&dir), &named, options.switch_engine)?;
                named
            }
            (Some(_), None) => {
                return Err(Error::Config(
                    "a store opened with its own index needs an engine name".to_string(),
                ))
            }
            (None, named) => resolve_engine(&dir, named.as_deref(), options.switch_engine)?,
        };
        let meta_read = meta::read(&dir);
        let meta_unreadable = meta_read.is_err();
        let recorded = meta_read.ok().flatten();
        // A temporal store's retention threshold applies before redo (`temporal`).
        let retention = recorded.as_ref().map_or(0, |m| m.retention);
        let by_name = || {
            let index = new_engine(&engine).expect("the engine spec was checked");
            temporal::apply_retention(&*index, retention);
            index
        };
        // A damaged META is rewritten with the engine named (`check_recorded`): a tree file
        // present is taken as that engine's rather than removed as stale.
        let recorded_spec = match &recorded {
            _ if meta_unreadable => Some(engine.clone()),
            Some(m) => Some(spec_form(&m.engine)),
            None => None,
        };
        // An msync tree file is the data: with no META to say so, its header does.
        let recorded_spec = if make_index.is_none() && (meta_unreadable || recorded.is_none()) {
            crate::pm::unrecorded(&dir, &engine, recorded_spec)?
        } else {
            recorded_spec
        };
        let mut pm = None;
        let mut checkpoint_now = false;
        let on_lss = crate::llama::uses_lss(&engine, options.memory_budget_bytes)?;
        if on_lss && make_index.is_some() {
            return Err(Error::Config(
                "a memory budget needs the store to build its bwtree (not open_with_index)".into(),
            ));
        }
        if !on_lss && crate::llama::map_checkpointed(&dir)? {
            // Its WAL may be cut below a map checkpoint's RSSP: only the LSS holds the rest.
            return Err(Error::Config(format!(
                "{}: the store's bwtree recovers from its LSS ({}/ holds map checkpoints): open \
                 it with engine bwtree and a memory budget",
                dir.path().display(),
                crate::llama::LSS_DIR_NAME
            )));
        }
        let mut maker = None;
        let mut map_rssp = None;
        let recovered = match make_index {
            Some(make_index) => {
                let with_retention = || {
                    let index = make_index();
                    temporal::apply_retention(&*index, retention);
                    index
                };
                recovery::recover(&dir, &with_retention, mode)?
            }
            None if on_lss => {
                // Leaving msync bztree-pm copies its tree file into a checkpoint first, as
                // for any other engine (review rev-lstore F1: skipped, every single write
                // held only in the tree file was lost).
                crate::pm::prepare(&dir, recorded_spec.as_deref(), &engine, mode)?;
                let budget = options.memory_budget_bytes.unwrap_or_default();
                let made = crate::llama::Maker::new(
                    &dir,
                    &engine,
                    budget,
                    options.map_checkpoint_wal_bytes,
                )?;
                let recovered = if made.recovers()? {
                    // The tree from its LSS, then the WAL redone from the checkpoint's RSSP
                    // (`crate::llama`, "Recovery": puts and removes of whole values, so a
                    // record already in a recovered page applies again harmlessly).
                    let (index, rssp) = made.recovered()?;
                    map_rssp = Some(rssp);
                    recovery::recover_applied(&dir, index, rssp.saturating_sub(1), mode)?
                } else {
                    eprintln!(
                        "forest-store: {}: bwtree on its LSS with a memory budget of {budget} \
                         bytes: no map checkpoint, so {}/ is discarded and recreated, the tree \
                         rebuilt from checkpoint + WAL",
                        dir.path().display(),
                        crate::llama::LSS_DIR_NAME
                    );
                    recovery::recover(&dir, &|| made.fresh(), mode)?
                };
                maker = Some(made);
                recovered
            }
            None => {
                crate::pm::prepare(&dir, recorded_spec.as_deref(), &engine, mode)?;
                if crate::pm::is_pm(&engine) {
                    let continuing = recorded_spec.as_deref() == Some(&engine);
                    let (recovered, state, unclean) =
                        crate::pm::recover(&dir, &engine, continuing, mode)?;
                    pm = Some(state);
                    checkpoint_now = unclean;
                    recovered
                } else {
                    recovery::recover(&dir, &by_name, mode)?
                }
            }
        };
        if let Some(temporal) = recovered.index.as_temporal() {
            temporal::check_open(recorded.as_ref(), &engine)?;
            // After redo, not before (split times would pass the versions redo replays): the
            // logged timestamps may all lie below the threshold, and a wall clock set back
            // across the restart would put `now()` and new writes below it (review
            // rev-retain13 F2).
            // The index's threshold: META's, or a loaded checkpoint's if higher.
            temporal.advance_clock(temporal.retention());
        }
        // A store with keys whose META was missing or damaged at this open: its layout is
        // unknown, and the rewritten META says so (a next open must not take it for 0).
        let recorded_layout = match &recorded {
            Some(m) => (m.layout, m.durable_through),
            None if recovered.report.keys_recovered > 0 => (meta::LAYOUT_UNKNOWN, 0),
            None => (0, 0),
        };
        if recorded.as_ref().map(|m| &m.engine) != Some(&engine) {
            meta::write(
                &dir,
                &StoreMeta {
                    engine: engine.clone(),
                    durable_through: recorded_layout.1,
                    retention,
                    layout: recorded_layout.0,
                },
            )?;
        }
        let report = &recovered.report;
        // Temporal stores too (session 13: their checkpoints keep the history).
        let replayed = (report.records_replayed > 0 && !report.clean) || checkpoint_now;
        // The ESL (a bwtree on its LSS) must not claim what recovery read from the logs
        // durable before the open's checkpoint has written it anew (review rev-lstore F9).
        let durable_at_open = if replayed {
            report.durable_lsn
        } else {
            report.lsn_next - 1
        };
        let lsns = Arc::new(LsnAllocator::new(report.lsn_next, durable_at_open));
        let seq = recovered.log_seq_next;
        let writers = create_logs(
            &dir,
            seq,
            options.shards,
            (report.lsn_next, report.cutoff_lsn + 1),
            true,
        )?;
        let commit = Arc::new(GroupCommit::start(
            writers,
            Arc::clone(&lsns),
            options.durability,
        )?);
        let llama = maker.map(|m| m.finish(&lsns)).transpose()?;
        let lsn_end = lsns.next();
        let in_flight = Arc::new(temporal::InFlight::new(options.shards));
        let mut store = Self {
            dir: Arc::new(dir),
            index: recovered.index,
            lsns,
            stripes: KeyStripes::default(),
            gate: ScanGate::default(),
            commit,
            options,
            engine,
            checkpoints: Arc::new(Mutex::new(CheckpointState {
                retired: recovered
                    .log_names
                    .into_iter()
                    .map(|name| (name, lsn_end))
                    .collect(),
                log_seq_next: seq + 1,
                map_rssps: map_rssp.into_iter().collect(),
            })),
            checkpoint_count: Arc::new(AtomicU64::new(0)),
            recovery: recovered.report,
            pm,
            llama,
            map_checkpointer: None,
            clean_close: AtomicBool::new(true),
            in_flight,
            layout: Mutex::new(recorded_layout),
            _lock: lock,
        };
        store.hand_over_in_flight();
        if let Some(llama) = &store.llama {
            if let Some(map) = llama.map_schedule() {
                store.map_checkpointer = Some(map_ckpt::Checkpointer::start(map_ckpt::Parts {
                    dir: Arc::clone(&store.dir),
                    commit: Arc::clone(&store.commit),
                    lsns: Arc::clone(&store.lsns),
                    checkpoints: Arc::clone(&store.checkpoints),
                    count: Arc::clone(&store.checkpoint_count),
                    tree: Arc::clone(&llama.tree),
                    map: Arc::clone(map),
                })?);
            }
        }
        if replayed {
            // What recovery read may be only in the page cache (a failed fsync marks pages
            // clean without writing them, and a reopen reads them back): writing it anew in
            // a checkpoint makes it durable before any new write depends on it. Until then
            // the store must not close as clean (its marks would claim that state durable).
            store.clean_close.store(false, Ordering::SeqCst);
            store.checkpoint()?;
            store.clean_close.store(true, Ordering::SeqCst);
            // Now on disk in the checkpoint: the ESL may cover it.
            store.lsns.publish_durable(lsn_end - 1);
        }
        Ok(store)
    }

    /// Opens the store in the directory `path` of the real file system (created if missing).
    pub fn open_path(path: impl Into<PathBuf>, options: StoreOptions) -> Result<Self> {
        Self::open(OsDir::open(path)?, options)
    }

    /// Checks every file of the store in `dir` without changing anything or taking its lock,
    /// and reports what an open would recover (see [`crate::verify`](mod@crate::verify));
    /// `engine` as in [`StoreOptions`]. A store holding the directory is reported
    /// ([`VerifyReport::in_use`]), not refused.
    pub fn verify(dir: impl Dir, engine: Option<&str>) -> Result<VerifyReport> {
        crate::verify::verify(&dir, engine)
    }

    /// [`Self::verify`] on the directory `path` of the real file system, which must exist,
    /// opened read-only ([`OsDir::open_read_only`]: a running store's or a read-only copy).
    pub fn verify_path(path: impl Into<PathBuf>, engine: Option<&str>) -> Result<VerifyReport> {
        let path = path.into();
        if !path.is_dir() {
            return Err(Error::Io {
                path,
                op: "open",
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such store directory",
                ),
            });
        }
        Self::verify(OsDir::open_read_only(path)?, engine)
    }

    /// [`crate::verify::inspect`] of the store at `path`, which must exist (`forest inspect`).
    pub fn inspect_path(path: impl Into<PathBuf>) -> Result<crate::verify::InspectReport> {
        let path = path.into();
        if !path.is_dir() {
            return Err(Error::Io {
                path,
                op: "open",
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such store directory",
                ),
            });
        }
        crate::verify::inspect(&OsDir::open_read_only(path)?)
    }

    /// What recovery found at open.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Copies the value of `key` into `out`; false if absent. Never sees part of an atomic
    /// batch (the stripe's seqlock; see the module doc). A bwtree on its LSS that cannot load
    /// a page answers false and parks the error ([`Self::take_load_error`],
    /// [`ReadFailures`]); [`Self::try_get`] returns it.
    pub fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let read = self.try_get(key, out);
        self.or_park(read, || false)
    }

    /// [`Self::get`] that returns a page-load error (file, offset, page) instead of "not
    /// found" (review rev-lstore F3).
    pub fn try_get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let stripe = self.stripes.of(key);
        for _ in 0..READ_RETRIES_MAX {
            let Some(seq) = stripe.read_begin() else {
                stripe.wait_for_batch();
                continue;
            };
            let found = self.index_get(key, out)?;
            if stripe.read_valid(seq) {
                return Ok(found);
            }
        }
        let _locked = stripe.lock();
        self.index_get(key, out)
    }

    /// Reads each key of `keys` as that many [`Self::try_get`]s in a row would (key `i`'s read
    /// takes effect after key `i - 1`'s), looking the keys up together through the index's
    /// batched lookup ([`Index::get_many`]; masstree overlaps the descents, issue 15): key `i`'s
    /// value goes to `values[i]` (replaced) and whether it is present to `found[i]`. Each key's
    /// read sees no atomic batch in part, as `try_get`'s (its stripe's seqlock); the keys are
    /// not read at one moment together (that is [`Self::get_many`], MGET's). A page-load error
    /// is returned as by `try_get`, with the keys before it read. Panics unless the three
    /// slices have one length.
    pub fn try_get_each(
        &self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<()> {
        assert!(
            keys.len() == values.len() && keys.len() == found.len(),
            "try_get_each: {} keys, {} values, {} found flags",
            keys.len(),
            values.len(),
            found.len()
        );
        if self.llama.is_some() || keys.len() < 2 {
            // A bwtree on its LSS loads pages per key (and parks their errors per read).
            return self.try_get_in_turn(keys, values, found, 0);
        }
        for (chunk, keys_here) in keys.chunks(EACH_CHUNK_KEYS).enumerate() {
            let first = chunk * EACH_CHUNK_KEYS;
            let mut stripes: [Option<&crate::lsn::Stripe>; EACH_CHUNK_KEYS] =
                [None; EACH_CHUNK_KEYS];
            let mut seqs = [0u64; EACH_CHUNK_KEYS];
            for (j, key) in keys_here.iter().enumerate() {
                let stripe = self.stripes.of(key);
                match stripe.read_begin() {
                    Some(seq) => (stripes[j], seqs[j]) = (Some(stripe), seq),
                    // A batch is applying to this key's stripe: the rest as single gets,
                    // which wait for it.
                    None => return self.try_get_in_turn(keys, values, found, first),
                }
            }
            let (values_here, found_here) = (
                &mut values[first..first + keys_here.len()],
                &mut found[first..first + keys_here.len()],
            );
            self.index.get_many(keys_here, &mut |j, value| {
                found_here[j] = value.is_some();
                if let Some(value) = value {
                    values_here[j].clear();
                    values_here[j].extend_from_slice(value);
                }
            });
            for j in 0..keys_here.len() {
                let valid = stripes[j].is_some_and(|stripe| stripe.read_valid(seqs[j]));
                if !valid {
                    // A batch applied to key j's stripe meanwhile: it and every key after it
                    // are read again one by one, so the reads stay in order.
                    return self.try_get_in_turn(keys, values, found, first + j);
                }
            }
        }
        Ok(())
    }

    /// [`Self::try_get`] of `keys[from..]`, one after another (see [`Self::try_get_each`]).
    fn try_get_in_turn(
        &self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
        from: usize,
    ) -> Result<()> {
        for i in from..keys.len() {
            found[i] = self.try_get(keys[i], &mut values[i])?;
        }
        Ok(())
    }

    /// Reads every key of `keys` at one moment with respect to atomic batches: no batch is
    /// seen in part, across the keys too. `visit` gets each key's index and value (None:
    /// absent), in order, once the read is known to be consistent. A page-load error is
    /// parked as by [`Self::get`] and every key visited as absent; [`Self::try_get_many`]
    /// returns it.
    pub fn get_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) {
        let read = self.try_get_many(keys, visit);
        self.or_park(read, || (0..keys.len()).for_each(|i| visit(i, None)))
    }

    /// [`Self::get_many`] that returns a page-load error; `visit` is then not called.
    pub fn try_get_many(
        &self,
        keys: &[&[u8]],
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let stripes: Vec<&crate::lsn::Stripe> = keys.iter().map(|k| self.stripes.of(k)).collect();
        let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        let mut seqs = Vec::with_capacity(keys.len());
        let mut consistent = false;
        for _ in 0..READ_RETRIES_MAX {
            seqs.clear();
            let mut busy = None;
            for stripe in &stripes {
                match stripe.read_begin() {
                    Some(seq) => seqs.push(seq),
                    None => {
                        busy = Some(*stripe);
                        break;
                    }
                }
            }
            if let Some(stripe) = busy {
                stripe.wait_for_batch();
                continue;
            }
            self.index_get_many(keys, &mut values)?;
            if stripes.iter().zip(&seqs).all(|(s, &seq)| s.read_valid(seq)) {
                consistent = true;
                break;
            }
        }
        if !consistent {
            // Batches kept changing the keys: read under their stripes' locks, taken in
            // ascending order as batches take them.
            let mut indexes: Vec<usize> = keys.iter().map(|k| KeyStripes::index_of(k)).collect();
            indexes.sort_unstable();
            indexes.dedup();
            let _locked: Vec<_> = indexes.iter().map(|&i| self.stripes.at(i).lock()).collect();
            for (key, value) in keys.iter().zip(values.iter_mut()) {
                let mut out = value.take().unwrap_or_default();
                *value = self.index_get(key, &mut out)?.then_some(out);
            }
        }
        for (i, value) in values.iter().enumerate() {
            visit(i, value.as_deref());
        }
        Ok(())
    }

    /// Visits the records in the bounds in `order`. The scan sees every atomic batch whole
    /// or not at all (`scan_gate`): a short scan reads optimistically and retries if a
    /// batch applied meanwhile; a long one holds batches off (not single writes) while it
    /// runs, visitor included, so a slow visitor delays batches. The visitor must not write
    /// a batch ([`Error::InvalidUse`]); single writes and reads are fine. A page-load error
    /// ends the scan early and is parked as by [`Self::get`]; [`Self::try_scan`] returns it.
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_up_to(lower, upper, order, usize::MAX, visit)
    }

    /// [`Self::scan`] of at most `limit` records: a scan that ends within its first
    /// [`SCAN_OPTIMISTIC_ROWS`] rows (or `limit`) holds batches off only if batches kept
    /// applying through 8 tries.
    pub fn scan_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_parked(
            ScanRange(lower, upper, order, limit, false),
            ScanTo::Visit(visit),
        )
    }

    /// [`Self::scan_up_to`] for keys alone: the values are not copied into the scan's
    /// buffer (the engine's own copy-out still reads them), so a page of keys costs what its
    /// keys cost. The visitor gets each key with an empty value.
    pub fn scan_keys_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_parked(
            ScanRange(lower, upper, order, limit, true),
            ScanTo::Visit(visit),
        )
    }

    /// [`Self::scan_up_to`] that returns a page-load error (the visitor may have seen a
    /// prefix of the range).
    pub fn try_scan_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.try_scan_to(
            ScanRange(lower, upper, order, limit, false),
            ScanTo::Visit(visit),
        )
    }

    /// [`Self::scan_keys_up_to`] that returns a page-load error (the visitor may have seen a
    /// prefix of the range).
    pub fn try_scan_keys_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.try_scan_to(
            ScanRange(lower, upper, order, limit, true),
            ScanTo::Visit(visit),
        )
    }

    /// [`Self::scan_up_to`] whose records go to `sink` in place, under the engine's epoch
    /// pin (`Index::scan_pinned`), not copied into the scan's row buffer first: for sinks that
    /// only encode what they get (a reply written straight into a connection's output;
    /// issue 14). In exchange the sink may see a read that is then dropped: if a batch applied
    /// while it ran (the scan gate's optimistic check failed), [`ScanSink::restart`] is called
    /// and the range read again; after [`READ_RETRIES_MAX`] tries, once more with batches held
    /// off. So `sink` must not block or run long (it holds back memory reclamation) and must
    /// not read or write this store. A range of more than [`SCAN_IN_PLACE_ROWS_MAX`] rows, or a
    /// read that passes [`SCAN_IN_PLACE_BYTES_MAX`] bytes, is read by [`Self::scan_up_to`]
    /// instead (restarted first if the sink saw part of it), so a long range pins nothing long.
    /// The limit goes to the engine as its length hint. With `keys_only` the sink gets empty
    /// values. A page-load error ends the scan early and is parked as by [`Self::get`].
    pub fn scan_in_place_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        sink: &mut dyn ScanSink,
    ) {
        let range = ScanRange(lower, upper, order, limit, keys_only);
        self.scan_parked(range, ScanTo::InPlace(sink))
    }

    /// [`Self::scan_in_place_up_to`] that returns a page-load error. The sink then holds
    /// nothing (restarted), or a prefix of the range read with batches held off, never records
    /// of a read that was not checked against the gate (review rev-range F1).
    pub fn try_scan_in_place_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        sink: &mut dyn ScanSink,
    ) -> Result<()> {
        if limit == 0 {
            return Ok(());
        }
        if limit <= SCAN_IN_PLACE_ROWS_MAX {
            // Whether the sink saw records since the scan began or last restarted.
            let mut dirty = false;
            let tried = self.read_between_batches(|| {
                if dirty {
                    sink.restart();
                }
                dirty = true;
                match self.read_in_place(lower, upper, order, limit, keys_only, sink) {
                    Ok(true) => ControlFlow::Continue(()),
                    // Too large to read in place: no use trying again.
                    Ok(false) => ControlFlow::Break(Ok(())),
                    Err(e) => {
                        // This read was never checked against the gate: what the sink saw may
                        // mix batches (review rev-range F1).
                        sink.restart();
                        ControlFlow::Break(Err(e))
                    }
                }
            });
            match tried {
                Optimistic::Valid(_) => return Ok(()),
                Optimistic::Stopped(Err(e)) => return Err(e),
                Optimistic::Stopped(Ok(())) => {}
                Optimistic::Exhausted => {
                    // Batches kept coming: hold them off for one more read, which stands.
                    if dirty {
                        sink.restart();
                    }
                    let _pass = self.gate.enter_scan();
                    if self.read_in_place(lower, upper, order, limit, keys_only, sink)? {
                        return Ok(());
                    }
                }
            }
            // Large values: read the ordinary way, the visitor unpinned.
            sink.restart();
        }
        // `scan_fields` leaves values out of its rows, not out of a registered stream.
        self.scan_fields(lower, upper, order, limit, keys_only, &mut |k, v| {
            sink.record(k, if keys_only { &[] } else { v })
        })
    }

    /// The scans whose signature has no `Result`: [`Self::try_scan_to`], a page-load error
    /// parked ([`Self::or_park`]).
    fn scan_parked(&self, range: ScanRange<'_>, to: ScanTo<'_, '_>) {
        let read = self.try_scan_to(range, to);
        self.or_park(read, || ())
    }

    /// Up to `limit` records (keys alone, empty values, with `keys_only`) to a visitor run
    /// unpinned or to a sink in place.
    fn try_scan_to(&self, range: ScanRange<'_>, to: ScanTo<'_, '_>) -> Result<()> {
        let ScanRange(lower, upper, order, limit, keys_only) = range;
        match to {
            ScanTo::Visit(visit) if keys_only => {
                // `scan_fields` leaves values out of its rows, not out of a streamed rest.
                self.scan_fields(lower, upper, order, limit, true, &mut |k, _| visit(k, &[]))
            }
            ScanTo::Visit(visit) => self.scan_fields(lower, upper, order, limit, false, visit),
            ScanTo::InPlace(sink) => {
                self.try_scan_in_place_up_to(lower, upper, order, limit, keys_only, sink)
            }
        }
    }

    /// Runs `read` between atomic batches (the scan gate's seqlock side): up to
    /// [`READ_RETRIES_MAX`] tries, each begun with no batch applying; `Valid` once the gate
    /// shows none applied during a try. `read` ends the tries early by `Break` (an error, or
    /// a read that cannot succeed this way).
    fn read_between_batches<B>(&self, mut read: impl FnMut() -> ControlFlow<B>) -> Optimistic<B> {
        for _ in 0..READ_RETRIES_MAX {
            let Some(generation) = self.gate.read_begin() else {
                // A batch is applying (it leaves the gate once applied, before its fsync).
                std::thread::yield_now();
                continue;
            };
            if let ControlFlow::Break(stop) = read() {
                return Optimistic::Stopped(stop);
            }
            if self.gate.read_valid(generation) {
                return Optimistic::Valid(generation);
            }
        }
        Optimistic::Exhausted
    }

    /// One read of [`Self::try_scan_in_place_up_to`]: up to `limit` records to `sink` under
    /// the engine's pin. False if it stopped at [`SCAN_IN_PLACE_BYTES_MAX`].
    fn read_in_place(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        sink: &mut dyn ScanSink,
    ) -> Result<bool> {
        let (mut left, mut bytes, mut whole) = (limit, 0usize, true);
        let _visiting = self.gate.visiting();
        self.index_scan(true, lower, upper, order, &mut |k, v| {
            let v = if keys_only { &[][..] } else { v };
            left -= 1;
            bytes += k.len() + v.len();
            sink.record(k, v)?;
            if left == 0 {
                ControlFlow::Break(())
            } else if bytes > SCAN_IN_PLACE_BYTES_MAX {
                whole = false;
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(whole)
    }

    fn scan_fields(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        if limit == 0 {
            return Ok(());
        }
        let want = limit.min(SCAN_OPTIMISTIC_ROWS);
        // One buffer per thread, taken (a nested scan in a visitor gets a fresh one).
        let mut rows = SCAN_ROWS.with(|r| r.take());
        rows.clear();
        let tried = self.read_between_batches(|| {
            rows.clear();
            // This visitor only copies into `rows`: it neither blocks nor writes, so it may
            // run under the engine's pin on records in place (one copy, not two; issue 14).
            let scanned = self.index_scan(true, lower, upper, order, &mut |k, v| {
                rows.push(k, if keys_only { &[] } else { v });
                if rows.len() >= want {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            match scanned {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            }
        });
        // The generation the rows were read at, once a read was valid.
        let read_at = match tried {
            Optimistic::Valid(generation) => Some(generation),
            Optimistic::Exhausted => None,
            Optimistic::Stopped(e) => {
                rows.keep_for_next_scan();
                return Err(e);
            }
        };
        if read_at.is_some() && (rows.len() < SCAN_OPTIMISTIC_ROWS || rows.len() == limit) {
            // The whole scan (or all the caller wants) is in `rows`, read between batches.
            let _visiting = self.gate.visiting();
            // Stopped by the visitor or not, the scan is done.
            let _ = rows.visit(visit);
            drop(_visiting);
            rows.keep_for_next_scan();
            return Ok(());
        }
        // Long, or batches kept coming: hold them off and stream the rest.
        let _pass = self.gate.enter_scan();
        let _visiting = self.gate.visiting();
        let mut left = limit;
        let visit = &mut |k: &[u8], v: &[u8]| {
            left -= 1;
            visit(k, v)?;
            if left == 0 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        match read_at {
            // No batch applied since the rows were read: hand them out, go on after them.
            Some(generation) if self.gate.read_valid(generation) => {
                if rows.visit(visit).is_break() {
                    return Ok(());
                }
                let last = rows.last_key().expect("a long scan read rows");
                // The rows still wanted, as the engine's hint (an unlimited scan gives none).
                let hint = match limit {
                    usize::MAX => usize::MAX,
                    n => n - rows.len(),
                };
                match order {
                    Order::Ascending => self.index_scan_hinted(
                        false,
                        Bound::Excluded(last),
                        upper,
                        order,
                        hint,
                        visit,
                    ),
                    Order::Descending => self.index_scan_hinted(
                        false,
                        lower,
                        Bound::Excluded(last),
                        order,
                        hint,
                        visit,
                    ),
                }
            }
            _ => self.index_scan_hinted(false, lower, upper, order, limit, visit),
        }
    }

    /// The index's scan (`pinned`: its `scan_pinned`), returning a bwtree on its LSS's
    /// page-load error.
    fn index_scan(
        &self,
        pinned: bool,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.index_scan_hinted(pinned, lower, upper, order, usize::MAX, visit)
    }

    /// [`Self::index_scan`] with the caller's expected count (`Index::scan_hinted`; a
    /// pinned scan copies nothing ahead, so it has no use for one, nor does the LSS tree).
    fn index_scan_hinted(
        &self,
        pinned: bool,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        match (&self.llama, pinned) {
            (Some(llama), pinned) => {
                let scanned = if pinned {
                    llama.tree.try_scan_pinned(lower, upper, order, visit)
                } else {
                    llama.tree.try_scan(lower, upper, order, visit)
                };
                llama.after_op();
                scanned
            }
            (None, true) => {
                self.index.scan_pinned(lower, upper, order, visit);
                Ok(())
            }
            (None, false) if len_hint == usize::MAX => {
                self.index.scan(lower, upper, order, visit);
                Ok(())
            }
            (None, false) => {
                self.index.scan_hinted(lower, upper, order, len_hint, visit);
                Ok(())
            }
        }
    }

    /// Runs `read` with atomic batches held off, so that every read in it (several scans,
    /// gets) sees the same batches: one consistent view across ranges (the server's KEYS
    /// reads string keys and collection names in two scans). Single writes may still land.
    /// `read` must not write a batch ([`Error::InvalidUse`]); keep it short, batches wait.
    pub fn read_consistent<R>(&self, read: impl FnOnce() -> R) -> R {
        let _pass = self.gate.enter_scan();
        let _visiting = self.gate.visiting();
        read()
    }

    /// Decides and logs one write of `key` in `shard`, under the key's stripe; returns
    /// whether it changed anything, what to wait for before answering (its own LSN, or the
    /// stripe's last when it changed nothing; on a temporal store the version's timestamp,
    /// None when nothing was written) and what `decide` saw.
    fn write_one(
        &self,
        shard: usize,
        key: &[u8],
        read_current: bool,
        deferred: bool,
        decide: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<WroteOne> {
        self.commit.check_failed()?;
        // A bwtree on its LSS: help evict before anything is held (see `preload`).
        if let Some(llama) = &self.llama {
            llama.tree.help_evict();
        }
        let stripe = self.stripes.of(key);
        let _locked = stripe.lock();
        // A read of the key loads its pages too (under the hold).
        let key_alone = [key];
        let hold = self.preload(if read_current { &[] } else { &key_alone })?;
        let mut current = Vec::new();
        let old = if read_current && self.index_get(key, &mut current)? {
            Some(current)
        } else {
            None
        };
        if self.pm.as_ref().is_some_and(|pm| pm.msync) {
            // Durable when the tree returns (`crate::pm`): no record, nothing to wait for
            // (a batch under this stripe was durable before it let the stripe go). A panic in
            // the tree (an msync that failed) leaves its durability unknown: fail the store.
            let _guard = FailOnPanic::new(&self.commit, "writing to the msync tree");
            let changed = match decide(old.as_deref())? {
                Rmw::Keep => false,
                Rmw::Put(value) => {
                    check_entry(key, &value)?;
                    self.index.upsert(key, &value)?;
                    true
                }
                Rmw::Remove => {
                    self.index.remove(key);
                    true
                }
            };
            return Ok((changed, Ack::default(), old));
        }
        let mut refused = None;
        let mut stamp = None;
        let decision = decide(old.as_deref())?;
        let lsn = if let Some(temporal) = self.index.as_temporal() {
            let logged =
                self.log_temporal(shard, temporal, key, decision, deferred, &mut refused)?;
            stamp = logged.map(|(_, ts)| ts);
            logged.map(|(lsn, _)| lsn)
        } else {
            match decision {
                Rmw::Keep => None,
                Rmw::Put(value) => {
                    check_entry(key, &value)?;
                    let index = &*self.index;
                    let apply = |lsn: u64| {
                        // Released once applied (not across a `sync` mode's own fsync).
                        let _hold = hold;
                        // Limits were checked before logging; a tree can still be full.
                        let _untrusted = self.pm.as_ref().map(|pm| UntrustOnPanic(&pm.tree));
                        if let Err(e) = self.apply_upsert(index, key, &value, lsn) {
                            let e = self.fail_logged_unapplied(e);
                            if let Some(pm) = &self.pm {
                                // Logged, not applied: only a rebuild from the logs is right. Under
                                // the batch lock and after the failure, so no batch clears it.
                                let _one_batch = pm.batch.lock();
                                pm.tree.set_store_pending(1);
                            }
                            refused = Some(e);
                        }
                    };
                    Some(if deferred {
                        self.commit
                            .log_deferred(shard, Op::Put, key, &value, apply)?
                    } else {
                        self.commit.log(shard, Op::Put, key, &value, apply)?
                    })
                }
                Rmw::Remove => {
                    let index = &*self.index;
                    let apply = |lsn: u64| {
                        let _hold = hold;
                        if let Err(e) = self.apply_remove(index, key, lsn) {
                            refused = Some(self.fail_logged_unapplied(e));
                        }
                    };
                    Some(if deferred {
                        self.commit
                            .log_deferred(shard, Op::Remove, key, &[], apply)?
                    } else {
                        self.commit.log(shard, Op::Remove, key, &[], apply)?
                    })
                }
            }
        };
        if let Some(e) = refused {
            return Err(e);
        }
        if let Some(llama) = &self.llama {
            llama.after_op();
        }
        if let Some(lsn) = lsn {
            stripe.note_lsn(lsn);
        }
        // Only a write that changed nothing reads the stripe's last LSN.
        let wait_for = lsn.or_else(|| Some(stripe.last_lsn()).filter(|&l| l > 0));
        let ack = Ack {
            lsn: wait_for,
            ts: stamp,
        };
        Ok((lsn.is_some(), ack, old))
    }

    fn wait(&self, ack: Ack) -> Result<()> {
        match ack.lsn {
            Some(lsn) => self.commit.wait(lsn)?,
            None => self.commit.check_failed()?,
        }
        self.settle(ack.ts)?;
        self.scheduled_map_checkpoint();
        Ok(())
    }

    /// Inserts `key` only if absent; true if inserted.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (changed, ack, _) = self.write_one(shard, key, true, false, |old| {
            Ok(match old {
                Some(_) => Rmw::Keep,
                None => Rmw::Put(value.to_vec()),
            })
        })?;
        self.wait(ack)?;
        Ok(changed)
    }

    /// Sets `key` to `value`.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (_, ack, _) =
            self.write_one(shard, key, false, false, |_| Ok(Rmw::Put(value.to_vec())))?;
        self.wait(ack)
    }

    /// Sets `key` to `value` only if present; true if updated.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (changed, ack, _) = self.write_one(shard, key, true, false, |old| {
            Ok(match old {
                Some(_) => Rmw::Put(value.to_vec()),
                None => Rmw::Keep,
            })
        })?;
        self.wait(ack)?;
        Ok(changed)
    }

    /// Removes `key`; true if it was present.
    pub fn remove(&self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let shard = self.commit.shard_of_thread();
        let (changed, ack, _) = self.write_one(shard, key, true, false, |old| {
            Ok(if old.is_some() {
                Rmw::Remove
            } else {
                Rmw::Keep
            })
        })?;
        self.wait(ack)?;
        Ok(changed)
    }

    /// Atomically (per key) reads `key`'s value, lets `f` decide what to do, applies and
    /// logs it; returns the value `f` saw. An error from `f` changes nothing.
    pub fn read_modify_write(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let shard = self.commit.shard_of_thread();
        let (_, ack, old) = self.write_one(shard, key, true, false, f)?;
        self.wait(ack)?;
        Ok(old)
    }

    /// A batch of writes that share one durability wait ([`Batch::wait`]).
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            store: self,
            shard: self.commit.shard_of_thread(),
            lsn_max: None,
            ts_max: None,
            clock_bound: false,
        }
    }

    /// Applies `ops` in order as one atomic batch (see [`Self::write`]); returns for each
    /// op whether it changed the store.
    pub fn write_batch(&self, ops: &[BatchOp]) -> Result<Vec<bool>> {
        let shard = self.commit.shard_of_thread();
        let (changed, ack) = self.write_unit(shard, ops, false)?;
        self.wait(ack)?;
        Ok(changed.into_vec())
    }

    /// Applies `batch` atomically: after any crash either all of its writes are there or
    /// none, and no [`Self::get`] or [`Self::get_many`] sees part of it (see the module
    /// doc). Returns for each op whether it changed the store; an error (a key or value over
    /// the limits, a failed store) changes nothing.
    pub fn write(&self, batch: &WriteBatch) -> Result<Vec<bool>> {
        self.write_batch(&batch.ops)
    }

    /// Decides and logs `ops` as one atomic unit in `shard` (see the module doc); returns
    /// what each op changed and what to wait for (the LSN; on a temporal store the unit's
    /// one timestamp, None when it wrote nothing).
    fn write_unit(&self, shard: usize, ops: &[BatchOp], deferred: bool) -> Result<(Changed, Ack)> {
        for op in ops {
            match op {
                BatchOp::Insert(k, v) | BatchOp::Upsert(k, v) | BatchOp::Update(k, v) => {
                    check_entry(k, v)?
                }
                BatchOp::Remove(k) | BatchOp::RemovePresent(k) => check_key(k)?,
            }
        }
        self.commit.check_failed()?;
        let mut stripes: SmallVec<[usize; SMALL_UNIT_OPS]> = ops
            .iter()
            .map(|op| KeyStripes::index_of(op.key()))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        // Scans must not see part of a batch of two ops or more (`scan_gate`): with all its
        // stripes held, it enters the gate without blocking, or lets go and waits.
        let lock_stripes = || -> SmallVec<[_; SMALL_UNIT_OPS]> {
            stripes.iter().map(|&i| self.stripes.at(i).lock()).collect()
        };
        if let Some(llama) = &self.llama {
            llama.tree.help_evict(); // before anything is held (see `preload`)
        }
        let (_locked, pass) = if ops.len() > 1 {
            self.gate.check_no_scan_here()?;
            let (locked, pass) = self.gate.enter_batch_holding(lock_stripes);
            (locked, Some(pass))
        } else {
            (lock_stripes(), None)
        };
        // Every key's pages, loaded and held before any LSN is taken (`preload`); the reads
        // below then meet resident pages.
        // Only a store on its LSS has pages to load (review rev-lfix F6: others built the
        // key list, on the heap past four ops, for nothing).
        let hold = match &self.llama {
            Some(_) => {
                let keys: SmallVec<[&[u8]; SMALL_UNIT_OPS]> =
                    ops.iter().map(BatchOp::key).collect();
                self.preload(&keys)?
            }
            None => None,
        };
        // The batch's own effects so far, by key: Some(value) or None (removed). A small unit
        // leaves it empty and reads its records instead (each key's last record is its state).
        let small = ops.len() <= SMALL_UNIT_OPS;
        let mut overlay: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        let mut scratch = Vec::new();
        let mut changed = Changed::with_capacity(ops.len());
        let mut records = UnitRecords::new();
        let temporal = self.index.as_temporal().is_some();
        for op in ops {
            let key = op.key();
            let earlier = if small {
                records
                    .iter()
                    .rev()
                    .find(|&&(_, k, _)| k == key)
                    .map(|&(op, _, _)| op == Op::Put)
            } else {
                overlay.get(key).map(Option::is_some)
            };
            // An upsert changes the key whatever it held: no read (a descent of the index
            // per op, which SET EX's two-op batch would pay twice).
            let mut present = || -> Result<bool> {
                match earlier {
                    Some(present) => Ok(present),
                    None => self.index_get(key, &mut scratch),
                }
            };
            let effect = match op {
                BatchOp::Insert(_, v) => (!present()?).then_some(Some(&v[..])),
                BatchOp::Upsert(_, v) => Some(Some(&v[..])),
                BatchOp::Update(_, v) => present()?.then_some(Some(&v[..])),
                BatchOp::Remove(_) => present()?.then_some(None),
                // A temporal removal is a version, so an absent key must not get one (F1).
                BatchOp::RemovePresent(_) if temporal => present()?.then_some(None),
                BatchOp::RemovePresent(_) => Some(None),
            };
            // RemovePresent is reported a change whatever it found (its doc).
            changed.push(effect.is_some() || matches!(op, BatchOp::RemovePresent(_)));
            if let Some(state) = effect {
                if !small {
                    overlay.insert(key, state);
                }
                records.push(match state {
                    Some(value) => (Op::Put, key, value),
                    None => (Op::Remove, key, &[][..]),
                });
            }
        }
        if let Some(temporal) = self.index.as_temporal() {
            let unit = temporal::last_per_key(&records);
            let apply = |ts: u64| {
                // As below: the gate is left once applied; odd stripes while applying.
                let _pass = pass;
                let _applying = Applying::begin(&self.stripes, &stripes);
                self.apply_versions(shard, temporal, &unit, ts)
            };
            let mut refused = None;
            let logged = self.commit.log_unit_stamped(
                shard,
                &unit,
                &|| self.tick(shard, temporal),
                |ts| refused = apply(ts).err().map(|e| self.fail_logged_unapplied(e)),
                deferred,
            )?;
            if let Some(e) = refused {
                return Err(e);
            }
            let lsn = logged.map(|(lsn, _)| lsn);
            let ack = Ack {
                lsn: self.note_unit(&stripes, lsn),
                ts: logged.map(|(_, ts)| ts),
            };
            return Ok((changed, ack));
        }
        let index = &*self.index;
        let msync = self.pm.as_ref().is_some_and(|pm| pm.msync);
        // An msync batch that the tree refuses part way (a full heap) is undone, so it is
        // whole or absent (`crate::pm`): each key's value before the batch.
        let before: BTreeMap<&[u8], Option<Vec<u8>>> = if msync && records.len() > 1 {
            records
                .iter()
                .map(|&(_, key, _)| {
                    let mut value = Vec::new();
                    (key, index.get(key, &mut value).then_some(value))
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let (stripes_ref, records_ref, before_ref) = (&stripes, &records, &before);
        let mut apply = Some(move |lsn: u64| -> std::result::Result<(), Refused> {
            // The gate is left once the batch is applied, before any fsync (declared first,
            // dropped last); the pages are let go then too.
            let _pass = pass;
            let _hold = hold;
            // Odd while the batch applies; even again on return and on unwinding (an engine
            // panic fails the store, but readers must not wait for ever).
            let _applying = Applying::begin(&self.stripes, stripes_ref);
            for (n, &(op, key, value)) in records_ref.iter().enumerate() {
                // A batch's writes share its last LSN (`crate::llama`).
                let applied = if op == Op::Put {
                    // Limits were checked before logging; a tree can still be full.
                    self.apply_upsert(index, key, value, lsn)
                } else {
                    self.apply_remove(index, key, lsn)
                };
                if let Err(e) = applied {
                    return Err(undo(index, &records_ref[..n], before_ref, e));
                }
            }
            Ok(())
        });
        let mut apply = |lsn: u64| -> std::result::Result<(), Refused> {
            match apply.take() {
                Some(apply) => apply(lsn),
                None => Ok(()),
            }
        };
        let mut refused = None;
        let lsn = match &self.pm {
            None => self.commit.log_unit(
                shard,
                &records,
                |lsn| {
                    refused = apply(lsn)
                        .err()
                        .map(|e| self.fail_logged_unapplied(e.into_inner()))
                },
                deferred,
            )?,
            Some(pm) if pm.msync && records.len() <= 1 => {
                // One record is a single write: durable when the tree returns.
                let _guard = FailOnPanic::new(&self.commit, "writing to the msync tree");
                apply(0).map_err(|e| e.into_inner())?;
                return Ok((changed, Ack::default()));
            }
            Some(pm) if pm.msync => {
                // A redo record, durable before the tree changes (`crate::pm`).
                let _one_batch = pm.batch.lock();
                let lsn = self.commit.log_unit(shard, &records, |_| {}, deferred)?;
                self.commit.sync()?;
                if let Some(lsn) = lsn {
                    // A panic here (an msync that failed) leaves the batch half applied: the
                    // store refuses writes until a reopen redoes it.
                    let _guard = FailOnPanic::new(&self.commit, "applying an msync batch");
                    pm.tree.set_store_pending(lsn);
                    let applied = apply(lsn);
                    if let Err(Refused::NotUndone(e)) = applied {
                        // `store pending` stays: the store fails, the redo at reopen completes
                        // the batch.
                        return Err(self.fail_logged_unapplied(e));
                    }
                    // Whole, or undone (the tree as before it): either way never redone.
                    pm.tree.set_store_lsn(lsn);
                    pm.tree.set_store_pending(0);
                    for &i in &stripes {
                        self.stripes.at(i).note_lsn(lsn);
                    }
                    applied.map_err(|e| e.into_inner())?;
                }
                return Ok((changed, Ack::default()));
            }
            Some(pm) => {
                // clwb: a reopen must know if the tree may hold part of a batch.
                let marked = records.len() > 1;
                let apply = |lsn: u64| {
                    let _untrusted = UntrustOnPanic(&pm.tree);
                    let _one_batch = marked.then(|| pm.batch.lock());
                    if marked {
                        pm.tree.set_store_pending(1);
                    }
                    refused = apply(lsn)
                        .err()
                        .map(|e| self.fail_logged_unapplied(e.into_inner()));
                    if refused.is_some() {
                        // Logged, not applied: only a rebuild from the logs is right. Under
                        // the batch lock and after the failure, so no batch clears it.
                        let _one_batch = (!marked).then(|| pm.batch.lock());
                        pm.tree.set_store_pending(1);
                    } else if marked && !self.commit.is_failed() {
                        pm.tree.set_store_pending(0);
                    }
                };
                self.commit.log_unit(shard, &records, apply, deferred)?
            }
        };
        if let Some(e) = refused {
            return Err(e);
        }
        if let Some(llama) = &self.llama {
            llama.after_op();
        }
        let ack = Ack {
            lsn: self.note_unit(&stripes, lsn),
            ts: None,
        };
        Ok((changed, ack))
    }

    /// Notes a unit's LSN (None: it changed nothing) on its stripes; returns the LSN to wait
    /// for: the unit's, or the stripes' last when higher.
    fn note_unit(&self, stripes: &[usize], lsn: Option<u64>) -> Option<u64> {
        let mut wait_for = lsn;
        for &i in stripes {
            let stripe = self.stripes.at(i);
            if let Some(lsn) = lsn {
                stripe.note_lsn(lsn);
            }
            wait_for = wait_for.max(Some(stripe.last_lsn()).filter(|&l| l > 0));
        }
        wait_for
    }

    /// Fails the store after the index refused a logged write (a full heap): the log holds
    /// a record the index lacks, so nothing more may be acknowledged until a reopen (which
    /// replays the logs; a clwb tree was marked to be rebuilt). Returns the error to give.
    /// Reads `key` from the index for a write's decision: a page that cannot be loaded
    /// (bwtree on its LSS) is the write's error, before any LSN is taken.
    /// [`Self::index_get`] of every key of `keys` into `values` (None: absent, a `Some`'s
    /// buffer reused), through the index's batched lookup unless a bwtree on its LSS serves
    /// the keys.
    fn index_get_many(&self, keys: &[&[u8]], values: &mut [Option<Vec<u8>>]) -> Result<()> {
        if self.llama.is_some() {
            for (key, value) in keys.iter().zip(values.iter_mut()) {
                let mut out = value.take().unwrap_or_default();
                *value = self.index_get(key, &mut out)?.then_some(out);
            }
            return Ok(());
        }
        self.index.get_many(keys, &mut |i, found| match found {
            Some(bytes) => {
                let out = values[i].get_or_insert_with(Vec::new);
                out.clear();
                out.extend_from_slice(bytes);
            }
            None => values[i] = None,
        });
        Ok(())
    }

    fn index_get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match &self.llama {
            Some(llama) => {
                let found = llama.tree.try_get_into(key, out);
                llama.after_op();
                found
            }
            None => Ok(self.index.get(key, out)),
        }
    }

    /// A bwtree on its LSS: holds the tree's pages (nothing is evicted until the hold is
    /// dropped) and loads the pages of `keys`, so that a page that cannot be read fails the
    /// write here, before its LSN is taken, and the apply after the LSN meets resident pages
    /// (review rev-lstore F4; forest-bwtree `storage.rs` "Page holds" says why the pages stay
    /// resident, and the one case not covered). Keys the write reads anyway need not be
    /// listed. Call with the keys' stripes held, and drop the hold once the write is applied.
    fn preload(&self, keys: &[&[u8]]) -> Result<Option<forest_bwtree::PageHold<'_>>> {
        let Some(llama) = &self.llama else {
            return Ok(None);
        };
        let hold = llama.tree.hold_pages();
        let mut scratch = Vec::new();
        for key in keys {
            llama.tree.try_get_into(key, &mut scratch)?;
        }
        Ok(hold)
    }

    /// Applies a logged put: with the write's LSN on a bwtree on its LSS (`crate::llama`).
    fn apply_upsert(&self, index: &dyn Index, key: &[u8], value: &[u8], lsn: u64) -> Result<()> {
        match &self.llama {
            Some(llama) => {
                llama.logged(RECORD_HEADER_BYTES + key.len() + value.len());
                llama.tree.upsert_with_lsn(key, value, lsn)
            }
            None => index.upsert(key, value),
        }
    }

    /// Applies a logged removal (see [`Self::apply_upsert`]); only a bwtree on its LSS can
    /// fail here (a page that cannot be loaded).
    fn apply_remove(&self, index: &dyn Index, key: &[u8], lsn: u64) -> Result<()> {
        match &self.llama {
            Some(llama) => {
                llama.logged(RECORD_HEADER_BYTES + key.len());
                llama.tree.remove_with_lsn(key, lsn).map(|_| ())
            }
            None => {
                index.remove(key);
                Ok(())
            }
        }
    }

    /// The newest page-load error a read without a `Result` met ([`Self::get`],
    /// [`Self::scan`] on a bwtree on its LSS: they answer "not found"), or the tree's own
    /// operations (eviction, stats), taken out.
    pub fn take_load_error(&self) -> Option<Error> {
        let llama = self.llama.as_ref()?;
        llama.take_parked().or_else(|| llama.tree.take_load_error())
    }

    /// Keeps the error of a read that answered "not found" because a page could not be
    /// loaded: for [`Self::take_load_error`], and for this thread's [`ReadFailures`].
    fn park(&self, error: Error) {
        crate::store::reads::note(&error);
        if let Some(llama) = &self.llama {
            llama.park(error);
        }
    }

    /// The result of a read that has no `Result` in its signature: its value, or, after a
    /// page-load error, `absent()` with the error parked ([`Self::park`]).
    fn or_park<T>(&self, read: Result<T>, absent: impl FnOnce() -> T) -> T {
        read.unwrap_or_else(|e| {
            self.park(e);
            absent()
        })
    }

    /// [`Self::scan`] that returns a page-load error (the visitor may have seen a prefix).
    pub fn try_scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.try_scan_up_to(lower, upper, order, usize::MAX, visit)
    }

    fn fail_logged_unapplied(&self, error: Error) -> Error {
        let error = Error::Config(format!(
            "{error}: the write was logged but not applied, so the store refuses writes until \
             it is reopened"
        ));
        self.commit.fail(&error);
        error
    }

    /// Makes every write so far durable (in any mode).
    pub fn sync(&self) -> Result<()> {
        self.commit.sync()
    }

    /// Writes a checkpoint while writes go on, publishes it, and deletes the logs and
    /// checkpoints no longer needed (see the module doc). Safe to call from a background
    /// thread; checkpoints run one at a time.
    pub fn checkpoint(&self) -> Result<CheckpointInfo> {
        let mut state = self.checkpoints.lock();
        self.commit.check_failed()?;
        if let Some(pm) = self.pm.as_ref().filter(|pm| pm.msync) {
            return self.checkpoint_msync(pm, &mut state);
        }
        if let Some(llama) = self.llama.as_ref().filter(|l| l.map_mode()) {
            return self.checkpoint_map(llama, &mut state);
        }
        let fresh = self.fresh_logs(&mut state)?;
        let temporal = self.index.as_temporal();
        // A temporal store's cut: its clock with every shard locked at the rotation, so
        // every unit below `start_lsn` has applied at a timestamp at most it, and every later
        // one ticks above it (`temporal`).
        let (start_lsn, cut, old_logs) = self
            .commit
            .rotate_with(fresh, || temporal.map(|t| t.now()))?;
        state.retire(old_logs, start_lsn);
        let lsns = &self.lsns;
        let errors_before = self.llama.as_ref().map_or(0, |l| l.tree.load_errors());
        let info = match (temporal, cut) {
            (Some(temporal), Some(cut)) => {
                // The threshold cannot move meanwhile: `set_retention` takes `checkpoints`.
                // It is at most the cut (at most `now()` when set; an open raises the clock
                // to it); the max only keeps a file the loader would refuse from being
                // written should that ever fail.
                let threshold = temporal.retention();
                let block = checkpoint::TemporalBlock {
                    threshold,
                    cut: cut.max(threshold),
                };
                checkpoint::write_temporal(&*self.dir, temporal, start_lsn, block, || lsns.last())?
            }
            _ => checkpoint::write(&*self.dir, &*self.index, start_lsn, || lsns.last())?,
        };
        let errors_after = self.llama.as_ref().map_or(0, |l| l.tree.load_errors());
        if errors_after != errors_before {
            // The scan may have missed pages it could not load: never publish it. Counted,
            // not taken from the error slot, which a concurrent `try_get` may empty first
            // (review rev-lstore F2).
            let e = self
                .take_load_error()
                .map_or_else(|| "taken by another caller".to_string(), |e| e.to_string());
            return Err(Error::Config(format!(
                "checkpoint {start_lsn} not published: reading an evicted page failed: {e}"
            )));
        }
        // Nothing newer than the logs may be published: make them durable through end_lsn.
        self.commit.sync()?;
        if let Err(e) = checkpoint::publish(&*self.dir, start_lsn) {
            // The rename may or may not be durable: like a failed fsync, nothing is known.
            self.commit.fail(&e);
            return Err(e);
        }
        self.checkpoint_count.fetch_add(1, Ordering::Relaxed);
        self.delete_obsolete(&mut state)?;
        Ok(info)
    }

    /// The next generation of logs a checkpoint rotates to, starting at the next LSN.
    fn fresh_logs(&self, state: &mut CheckpointState) -> Result<Vec<LogWriter>> {
        fresh_logs_in(&*self.dir, &self.lsns, self.commit.shard_count(), state)
    }

    /// A checkpoint of a store on `bztree-pm:persist=msync` (`crate::pm`): the tree holds
    /// every write, so the logs are rotated with no batch applying, the rotation's LSN is
    /// recorded in the tree, and every older log and checkpoint file is deleted.
    fn checkpoint_msync(
        &self,
        pm: &crate::pm::Pm,
        state: &mut CheckpointState,
    ) -> Result<CheckpointInfo> {
        let _no_batch = pm.batch.lock();
        let fresh = self.fresh_logs(state)?;
        let (start_lsn, old_logs) = self.commit.rotate(fresh)?;
        pm.tree.set_store_lsn(start_lsn - 1);
        let mut names: Vec<String> = state.retired.drain(..).map(|(name, _)| name).collect();
        for old in old_logs {
            if let Some(name) = old.path().file_name().and_then(|n| n.to_str()) {
                names.push(name.to_string());
            }
        }
        names.extend(
            self.dir
                .list()?
                .into_iter()
                .filter(|n| checkpoint::parse_checkpoint_name(n).is_some()),
        );
        for name in &names {
            self.dir.remove(name)?;
        }
        self.dir.sync_dir()?;
        self.checkpoint_count.fetch_add(1, Ordering::Relaxed);
        Ok(CheckpointInfo {
            start_lsn,
            end_lsn: start_lsn - 1,
            entry_count: 0,
            bytes: 0,
        })
    }

    /// A checkpoint of a bwtree on its LSS with map checkpoints (`map_ckpt::take`).
    fn checkpoint_map(
        &self,
        llama: &crate::llama::Llama,
        state: &mut CheckpointState,
    ) -> Result<CheckpointInfo> {
        let map = llama
            .map_schedule()
            .expect("checkpoint_map runs only in map mode");
        map_ckpt::take(
            &*self.dir,
            &self.commit,
            &self.lsns,
            &self.checkpoint_count,
            (&llama.tree, map),
            state,
        )
    }

    /// Wakes the checkpointer if a scheduled map checkpoint is due
    /// ([`StoreOptions::map_checkpoint_wal_bytes`]), after a write was acknowledged as
    /// durable; the writer never waits for it (`map_ckpt`).
    #[inline]
    fn scheduled_map_checkpoint(&self) {
        let (Some(llama), Some(checkpointer)) = (&self.llama, &self.map_checkpointer) else {
            return;
        };
        if llama.map_due() {
            checkpointer.wake();
        }
    }

    /// Deletes checkpoints older than the newest two, and retired logs below the older of
    /// those two (recovery may fall back to it).
    fn delete_obsolete(&self, state: &mut CheckpointState) -> Result<()> {
        let mut starts: Vec<u64> = self
            .dir
            .list()?
            .iter()
            .filter_map(|n| checkpoint::parse_checkpoint_name(n))
            .collect();
        starts.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&keep_from) = starts.get(1) else {
            return Ok(());
        };
        let mut removed = false;
        let mut kept = Vec::new();
        for (name, lsn_end) in state.retired.drain(..) {
            if lsn_end <= keep_from {
                self.dir.remove(&name)?;
                removed = true;
            } else {
                kept.push((name, lsn_end));
            }
        }
        state.retired = kept;
        for &start in starts.iter().skip(2) {
            self.dir.remove(&checkpoint::checkpoint_name(start))?;
            removed = true;
        }
        if removed {
            self.dir.sync_dir()?;
        }
        Ok(())
    }

    /// The store's counters.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            index: self.index.stats(),
            engine: self.engine.clone(),
            durability: self.options.durability,
            shard_count: self.commit.shard_count(),
            lsn_next: self.lsns.next(),
            durable_lsn: self.commit.durable_lsn(),
            fsync_count: self.commit.fsync_count(),
            checkpoint_count: self.checkpoint_count.load(Ordering::Relaxed),
            recovery: self.recovery.clone(),
            memory: self.llama.as_ref().map(|llama| {
                let evict = llama.tree.evict_stats();
                MemoryStats {
                    budget_bytes: llama.budget(),
                    resident_bytes: llama.tree.resident_bytes(),
                    resident_peak_bytes: llama.resident_peak(),
                    evictions: evict.map_or(0, |s| s.evictions.get()),
                    loads: evict.map_or(0, |s| s.loads.get()),
                    esl: llama.esl(),
                    lss_bytes_written: llama.tree.lss().map_or(0, |l| l.stats().bytes_written),
                    lss_live_bytes: llama.tree.lss().map_or(0, |l| l.live_bytes()),
                    lss_total_bytes: llama.tree.lss().map_or(0, |l| l.total_bytes()),
                    lss_segments_cleaned: llama
                        .tree
                        .clean_stats()
                        .map_or(0, |s| s.segments_cleaned.get()),
                    lss_bytes_relocated: llama
                        .tree
                        .clean_stats()
                        .map_or(0, |s| s.bytes_relocated.get()),
                    evictor_error: llama.evictor_error(),
                    map_checkpoint_error: llama.map_error(),
                }
            }),
        }
    }

    /// Makes everything durable, seals every log (so the next open knows the store closed
    /// cleanly and needs no checkpoint), stops the flushers and releases the directory.
    pub fn close(mut self) -> Result<()> {
        self.stop_map_checkpointer();
        if let Some(llama) = &mut self.llama {
            llama.stop();
        }
        let result = self.seal();
        self.stop_commit();
        result
    }

    /// Stops the map checkpointer (after the checkpoint it is taking), which lets go of its
    /// share of the group commit.
    fn stop_map_checkpointer(&mut self) {
        if let Some(mut checkpointer) = self.map_checkpointer.take() {
            checkpointer.stop();
        }
    }

    /// Stops the group commit's flushers; the map checkpointer must be stopped first (else
    /// the last share, the checkpointer's, stops them when dropped).
    fn stop_commit(&mut self) {
        if let Some(commit) = Arc::get_mut(&mut self.commit) {
            commit.stop();
        }
    }

    /// A clean close's seal, and `META`'s record of how far the logs are durable; only a
    /// store whose state is durable closes clean.
    fn seal(&self) -> Result<()> {
        if !self.clean_close.load(Ordering::SeqCst) {
            return self.commit.sync();
        }
        self.commit.seal()?;
        let mut layout = self.layout.lock();
        meta::write(
            &*self.dir,
            &StoreMeta {
                engine: self.engine.clone(),
                durable_through: self.lsns.last(),
                retention: self.index.as_temporal().map_or(0, |t| t.retention()),
                layout: layout.0,
            },
        )?;
        layout.1 = self.lsns.last();
        Ok(())
    }

    /// The key layout version `META` records for the application that writes this store (0:
    /// none recorded; [`meta::LAYOUT_UNKNOWN`]: META was missing or damaged at an open that
    /// found keys, and rewritten). The store itself never reads it.
    pub fn layout(&self) -> u32 {
        self.layout.lock().0
    }

    /// Records `layout` in `META`, durably (written whole, fsynced and renamed; after a
    /// crash `META` holds the old or the new value). An application records its key layout
    /// once the store's keys are in it, so its next open knows there is nothing to migrate.
    pub fn set_layout(&self, layout: u32) -> Result<()> {
        let mut recorded = self.layout.lock();
        meta::write(
            &*self.dir,
            &StoreMeta {
                engine: self.engine.clone(),
                durable_through: recorded.1,
                // META's other field a running store changes; both under this lock.
                retention: self.index.as_temporal().map_or(0, |t| t.retention()),
                layout,
            },
        )?;
        recorded.0 = layout;
        Ok(())
    }

    /// Collects every key and value (tests and tools).
    pub fn to_vec(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        self.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                ControlFlow::Continue(())
            },
        );
        out
    }
}

/// Why a tree refused (part of) a write that limits allowed: a full heap, for one.
enum Refused {
    /// An msync batch's applied part was undone: the tree is as before the batch.
    Undone(Error),
    /// Part of the write may be applied (or, logged first, none of it is).
    NotUndone(Error),
}

impl Refused {
    fn into_inner(self) -> Error {
        match self {
            Refused::Undone(e) => Error::Config(format!(
                "{e}: the atomic batch was undone, none of it is applied"
            )),
            Refused::NotUndone(e) => e,
        }
    }
}

/// Undoes the `applied` records of an msync batch the tree refused with `error`, restoring
/// each key's value `before` the batch (empty: no undo possible).
fn undo(
    index: &dyn Index,
    applied: &[(Op, &[u8], &[u8])],
    before: &BTreeMap<&[u8], Option<Vec<u8>>>,
    error: Error,
) -> Refused {
    if before.is_empty() {
        return Refused::NotUndone(error);
    }
    let mut keys: Vec<&[u8]> = applied.iter().map(|&(_, key, _)| key).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        match before.get(key) {
            Some(Some(value)) => {
                if let Err(again) = index.upsert(key, value) {
                    return Refused::NotUndone(Error::Config(format!(
                        "{error}; undoing the batch's applied part failed too: {again}"
                    )));
                }
            }
            Some(None) => {
                index.remove(key);
            }
            None => return Refused::NotUndone(error),
        }
    }
    Refused::Undone(error)
}

/// Fails the store if the thread unwinds while this lives: a tree operation panicked (an
/// msync that failed), so what the file holds is unknown until a reopen.
struct FailOnPanic<'a> {
    commit: &'a GroupCommit,
    what: &'static str,
}

impl<'a> FailOnPanic<'a> {
    fn new(commit: &'a GroupCommit, what: &'static str) -> Self {
        Self { commit, what }
    }
}

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.commit.fail(&Error::Io {
                path: PathBuf::from("<store>"),
                op: "write",
                source: std::io::Error::other(format!(
                    "a panic while {}: the tree may be half changed; reopen the store",
                    self.what
                )),
            });
        }
    }
}

/// Marks a clwb tree as not to be trusted (a reopen rebuilds it from the logs) if the thread
/// unwinds while this lives: a logged write may be missing from it.
struct UntrustOnPanic<'a>(&'a forest_engines::StoreTree);

impl Drop for UntrustOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.set_store_pending(1);
        }
    }
}

/// Marks a batch's stripes as applying (odd) for as long as it lives.
struct Applying<'a> {
    stripes: &'a KeyStripes,
    indexes: &'a [usize],
}

impl<'a> Applying<'a> {
    fn begin(stripes: &'a KeyStripes, indexes: &'a [usize]) -> Self {
        for &i in indexes {
            stripes.at(i).bump();
        }
        Self { stripes, indexes }
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        for &i in self.indexes {
            self.stripes.at(i).bump();
        }
    }
}

/// Rows a scan reads optimistically before it registers in the scan gate instead (its
/// buffer's size; YCSB-E's scans are up to 100 rows).
pub const SCAN_OPTIMISTIC_ROWS: usize = 128;

/// The longest limit [`Store::scan_in_place_up_to`] reads in place under one pin: LRANGE's
/// 600 of redis-benchmark fit; past it the ordinary scan (rows, then batches) runs.
pub const SCAN_IN_PLACE_ROWS_MAX: usize = 1024;

/// The bytes (keys and values) an in-place read hands its sink before it gives up for the
/// ordinary scan: a range of large values does not pin for the time it takes to copy them.
pub const SCAN_IN_PLACE_BYTES_MAX: usize = 1 << 20;

/// Where [`Store::scan_in_place_up_to`] puts the records it reads.
pub trait ScanSink {
    /// One record; `Break` ends the scan.
    fn record(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()>;
    /// The records given since the scan began (or since the last restart) are dropped: a
    /// fresh read of the range begins.
    fn restart(&mut self);
}

thread_local! {
    /// The optimistic scan buffer of this thread, kept between short scans (no allocation
    /// per scan once warm; a long scan, which registers anyway, lets its buffer go).
    static SCAN_ROWS: std::cell::Cell<ScanRows> = std::cell::Cell::new(ScanRows::default());
}

/// Bytes of a scan buffer worth keeping for the next scan (a larger one is let go).
const SCAN_ROWS_KEEP_BYTES_MAX: usize = 1 << 20;

/// The rows of an optimistic scan: keys and values in one buffer, no allocation per row.
#[derive(Default)]
struct ScanRows {
    bytes: Vec<u8>,
    /// Per row: where its key starts and how long key and value are.
    rows: Vec<(usize, usize, usize)>,
}

impl ScanRows {
    fn clear(&mut self) {
        self.bytes.clear();
        self.rows.clear();
    }

    /// Gives the buffer back to this thread for its next scan, unless it grew large.
    fn keep_for_next_scan(self) {
        if self.bytes.capacity() <= SCAN_ROWS_KEEP_BYTES_MAX {
            SCAN_ROWS.with(|r| r.set(self));
        }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.rows.push((self.bytes.len(), key.len(), value.len()));
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
    }

    fn visit(&self, visit: &mut Visitor<'_>) -> ControlFlow<()> {
        for &(at, key_len, value_len) in &self.rows {
            let key = &self.bytes[at..at + key_len];
            visit(key, &self.bytes[at + key_len..at + key_len + value_len])?;
        }
        ControlFlow::Continue(())
    }

    fn last_key(&self) -> Option<&[u8]> {
        let &(at, key_len, _) = self.rows.last()?;
        Some(&self.bytes[at..at + key_len])
    }
}

/// A scan's bounds, order, limit and whether it wants keys alone ([`Store::try_scan_to`]).
#[derive(Clone, Copy)]
struct ScanRange<'k>(Bound<&'k [u8]>, Bound<&'k [u8]>, Order, usize, bool);

/// Where a scan's records go ([`Store::try_scan_to`]).
enum ScanTo<'a, 'v> {
    /// A visitor, run with no pin held.
    Visit(&'a mut Visitor<'v>),
    /// A sink, in place under the engine's pin ([`Store::scan_in_place_up_to`]).
    InPlace(&'a mut dyn ScanSink),
}

/// How [`Store::read_between_batches`] ended.
enum Optimistic<B> {
    /// A try no batch overlapped, read at this gate generation.
    Valid(u64),
    /// The read ended the tries itself.
    Stopped(B),
    /// Batches kept applying through every try.
    Exhausted,
}

/// Seqlock retries before a reader takes the stripes' locks instead (a reader must not
/// starve behind a stream of batches).
const READ_RETRIES_MAX: u32 = 8;
/// Keys [`Store::try_get_each`] hands the index at a time (the stripes and their sequence
/// numbers stay on the stack): two of masstree's lock-step groups.
const EACH_CHUNK_KEYS: usize = 32;

/// Writes that share one durability wait (the server's pipelines; issue 5 "A batch API").
///
/// Each write is applied, and visible to readers, at once, exactly like the same call on
/// [`Store`] (atomic per key; the batch as a whole is not atomic). None is acknowledged
/// before [`Batch::wait`] returns `Ok`, which covers every write of the batch with one
/// durability wait: under `sync` one fsync of the batch's shard log, under `group` one wait
/// for the batch's highest LSN, under `periodic` none. A batch dropped without `wait` leaves
/// nothing half-applied: its writes are applied and logged, simply not acknowledged; the
/// drop asks the flushers to make them durable in the background and returns at once.
#[derive(Debug)]
pub struct Batch<'a> {
    store: &'a Store,
    shard: usize,
    /// The highest LSN taken by the batch (None: nothing changed yet).
    lsn_max: Option<u64>,
    /// On a temporal store, the highest timestamp of the batch's units ([`Store::settle`]).
    ts_max: Option<u64>,
    /// A write waits for an LSN without a timestamp (it changed nothing, or an observed
    /// stripe's): the clock bounds the settle instead of `ts_max`.
    clock_bound: bool,
}

impl Batch<'_> {
    fn write_key(
        &mut self,
        key: &[u8],
        read_current: bool,
        decide: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        let (changed, ack, old) =
            self.store
                .write_one(self.shard, key, read_current, true, decide)?;
        self.add(ack);
        Ok((changed, old))
    }

    /// Adds a write's wait to the batch's.
    fn add(&mut self, ack: Ack) {
        self.lsn_max = self.lsn_max.max(ack.lsn);
        self.ts_max = self.ts_max.max(ack.ts);
        self.clock_bound |= ack.lsn.is_some() && ack.ts.is_none();
    }

    /// Adds to this batch's durability wait whatever was written under `key`'s stripe: an
    /// answer decided from what a read saw (MSETNX finding a key) must not be given before
    /// that is durable (issue 12, defect 4). True if that write is not yet known durable, so
    /// the answer has something to wait for.
    pub fn observe(&mut self, key: &[u8]) -> bool {
        let last = self.store.stripes.of(key).last_lsn();
        if last > self.store.lsns.durable() {
            self.add(Ack {
                lsn: Some(last),
                ts: None,
            });
            return true;
        }
        false
    }

    /// Applies `batch` atomically within this pipeline batch (as [`Store::write`]; the
    /// durability wait is this batch's).
    pub fn write(&mut self, batch: &WriteBatch) -> Result<Vec<bool>> {
        let (changed, ack) = self.store.write_unit(self.shard, &batch.ops, true)?;
        self.add(ack);
        Ok(changed.into_vec())
    }

    /// [`Self::write`] of `ops` (a [`WriteBatch`]'s, or a vector the caller reuses) without
    /// the report of what each op changed (a collection command's member and type entry;
    /// a unit of up to four ops keeps its bookkeeping off the heap, see `SMALL_UNIT_OPS`).
    pub fn write_ops(&mut self, ops: &[BatchOp]) -> Result<()> {
        let (_, ack) = self.store.write_unit(self.shard, ops, true)?;
        self.add(ack);
        Ok(())
    }

    /// Inserts `key` only if absent; true if inserted.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (changed, _) = self.write_key(key, true, |old| {
            Ok(match old {
                Some(_) => Rmw::Keep,
                None => Rmw::Put(value.to_vec()),
            })
        })?;
        Ok(changed)
    }

    /// Sets `key` to `value`.
    pub fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.write_key(key, false, |_| Ok(Rmw::Put(value.to_vec())))?;
        Ok(())
    }

    /// Sets `key` to `value` only if present; true if updated.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (changed, _) = self.write_key(key, true, |old| {
            Ok(match old {
                Some(_) => Rmw::Put(value.to_vec()),
                None => Rmw::Keep,
            })
        })?;
        Ok(changed)
    }

    /// Removes `key`; true if it was present.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let (changed, _) = self.write_key(key, true, |old| {
            Ok(if old.is_some() {
                Rmw::Remove
            } else {
                Rmw::Keep
            })
        })?;
        Ok(changed)
    }

    /// Atomically (per key) reads `key`'s value, lets `f` decide, applies and logs it;
    /// returns the value `f` saw. An error from `f` changes nothing.
    pub fn read_modify_write(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let (_, old) = self.write_key(key, true, f)?;
        Ok(old)
    }

    /// Waits once for every write of the batch to be acknowledged under the store's
    /// durability mode. An error (a failed write or fsync) means none of them is
    /// acknowledged, and the store refuses writes until reopened.
    pub fn wait(mut self) -> Result<()> {
        match self.lsn_max.take() {
            Some(lsn) => self.store.commit.wait_batch(self.shard, lsn)?,
            None => self.store.commit.check_failed()?,
        }
        let bound = if self.clock_bound { None } else { self.ts_max };
        self.store.settle(bound)
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if let Some(lsn) = self.lsn_max {
            self.store.commit.request(lsn);
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort for a store dropped without close (periodic mode's unforced writes);
        // an error here has no caller to go to, and recovery copes with any state.
        self.stop_map_checkpointer();
        let _ = self.seal();
        self.stop_commit();
    }
}
