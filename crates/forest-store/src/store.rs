//! [`Store`]: the durable store over any engine of the [`Index`] trait: the papers'
//! transactional component (DESIGN.md "Durability"; bw-tree.md §V-A; masstree.md §5).
//!
//! A write: lock the key's stripe, decide the outcome from the current value (insert only if
//! absent, update only if present, remove only if present, read-modify-write), and if it
//! changes anything, log it in the thread's shard (the LSN is taken, the index applied and
//! the record encoded under the shard's lock, `wal::group_commit`), release the stripe, then
//! wait for durability as the mode says. An operation that changes nothing takes no LSN.
//!
//! Invariants:
//! - Per key, LSN order = apply order (the stripe covers both), so replay in LSN order
//!   rebuilds what readers saw.
//! - A write returns `Ok` in `sync`/`group` only once every LSN up to its own is durable.
//! - After any write or fsync failure the store refuses writes until reopened; reads go on
//!   (they may show writes that were never acknowledged).
//! - One open `Store` per directory ([`Dir::lock`]).
//!
//! Open: after recovery replayed any log record, a checkpoint is written before the store
//! takes writes, so the recovered state is durable even if the logs it came from were only
//! in the page cache (after a failed fsync), and new LSNs never depend on those logs.
//!
//! Choices: readers may see a write before it is durable (Masstree does too); a [`Batch`] is
//! not atomic, only its durability wait is shared. Old logs are deleted once two newer
//! checkpoints exist, so recovery can fall back from a damaged newest checkpoint to the one
//! before it (the logs it needs are kept).

use std::ops::{Bound, ControlFlow};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use forest_core::{check_entry, check_key, Error, Index, IndexStats, Order, Result, Visitor};
use parking_lot::Mutex;

use crate::checkpoint::{self, CheckpointInfo};
use crate::durability::Durability;
use crate::file::{Dir, DirLock, OsDir};
use crate::lsn::{KeyStripes, LsnAllocator};
use crate::meta::{self, StoreMeta};
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::verify::VerifyReport;
use crate::wal::group_commit::{GroupCommit, SHARD_COUNT_MAX};
use crate::wal::{log_name, LogHeader, LogWriter, Op};

/// The engines a store opens by name.
pub const ENGINE_NAMES: &[&str] = &["lockbtree", "bwtree", "masstree"];

/// The default number of shard logs. Every shard adds an fsync to each group-commit round, so
/// one log shares fsyncs best; more shards pay off only when appends to one log buffer contend
/// (many cores). Check with `forest bench --engines lockbtree --workload durable-put
/// --durability group --threads 64 --keys 0 --ops 20000` (fsyncs/ack column).
pub const SHARD_COUNT_DEFAULT: usize = 1;

/// A new, empty engine named `name`.
pub fn new_engine(name: &str) -> Result<Box<dyn Index>> {
    match name {
        "lockbtree" => Ok(Box::new(forest_lockbtree::LockBTree::new())),
        "bwtree" => Ok(Box::new(forest_bwtree::BwTree::new())),
        "masstree" => Ok(Box::new(forest_masstree::Masstree::new())),
        _ => Err(Error::UnknownEngine {
            name: name.to_string(),
            known: ENGINE_NAMES.join(", "),
        }),
    }
}

/// The engine of a new store when none is named: the fastest on YCSB-B and YCSB-C
/// (docs/BENCHMARKS.md "The default engine").
pub const ENGINE_DEFAULT: &str = "masstree";

/// How to open a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// The engine, one of [`ENGINE_NAMES`]; `None`: the one recorded in the directory's meta
    /// file (`crate::meta`), or [`ENGINE_DEFAULT`] for a new store. A named engine is
    /// recorded for later opens.
    pub engine: Option<String>,
    pub durability: Durability,
    /// Shard logs written in parallel, 1..=`SHARD_COUNT_MAX`.
    pub shards: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            engine: None,
            durability: Durability::default(),
            shards: SHARD_COUNT_DEFAULT,
        }
    }
}

/// One operation of [`Store::write_batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    Insert(Vec<u8>, Vec<u8>),
    Upsert(Vec<u8>, Vec<u8>),
    Update(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
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
}

#[derive(Debug)]
struct CheckpointState {
    /// Logs no longer written: (name, every record's LSN is below this).
    retired: Vec<(String, u64)>,
    log_seq_next: u64,
}

/// A durable ordered key-value store (see the module doc).
pub struct Store {
    dir: Box<dyn Dir>,
    index: Box<dyn Index>,
    lsns: Arc<LsnAllocator>,
    stripes: KeyStripes,
    commit: GroupCommit,
    options: StoreOptions,
    /// The engine in use (named, recorded or the default).
    engine: String,
    checkpoints: Mutex<CheckpointState>,
    checkpoint_count: AtomicU64,
    recovery: RecoveryReport,
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

fn create_logs(dir: &dyn Dir, seq: u64, shards: usize, first_lsn: u64) -> Result<Vec<LogWriter>> {
    (0..shards)
        .map(|shard| {
            let shard_id = u32::try_from(shard).expect("shards are bounded by SHARD_COUNT_MAX");
            LogWriter::create(
                dir,
                &log_name(seq, shard_id),
                LogHeader {
                    shard_id,
                    first_lsn,
                },
            )
        })
        .collect()
}

/// The engine to open `dir` with: `named` if given, else the one its meta file records,
/// else [`ENGINE_DEFAULT`]. A damaged meta file is an error unless an engine is named (the
/// open then writes a new one).
pub fn resolve_engine(dir: &dyn Dir, named: Option<&str>) -> Result<String> {
    let recorded = meta::read(dir);
    let engine = match (named, recorded) {
        (Some(name), _) => name.to_string(),
        (None, Ok(Some(meta))) => meta.engine,
        (None, Ok(None)) => ENGINE_DEFAULT.to_string(),
        (None, Err(e)) => return Err(e),
    };
    new_engine(&engine)?;
    Ok(engine)
}

impl Store {
    /// Opens (creating if empty) the store in `dir`: takes the directory's lock, recovers,
    /// starts new shard logs and their flushers.
    pub fn open(dir: impl Dir + 'static, options: StoreOptions) -> Result<Self> {
        if options.shards == 0 || options.shards > SHARD_COUNT_MAX {
            return Err(Error::Config(format!(
                "shards: {} given, 1..={SHARD_COUNT_MAX} allowed",
                options.shards
            )));
        }
        if let Some(name) = &options.engine {
            new_engine(name)?;
        }
        let lock = dir.lock()?;
        let engine = resolve_engine(&dir, options.engine.as_deref())?;
        let recovered = recovery::recover(
            &dir,
            &|| new_engine(&engine).expect("the engine name was checked"),
            RecoveryMode::Repair,
        )?;
        if meta::read(&dir).ok().flatten().map(|m| m.engine).as_ref() != Some(&engine) {
            meta::write(
                &dir,
                &StoreMeta {
                    engine: engine.clone(),
                },
            )?;
        }
        let lsns = Arc::new(LsnAllocator::new(recovered.report.cutoff_lsn + 1));
        let seq = recovered.log_seq_next;
        let writers = create_logs(&dir, seq, options.shards, lsns.next())?;
        let commit = GroupCommit::start(writers, Arc::clone(&lsns), options.durability)?;
        let lsn_end = lsns.next();
        let replayed = recovered.report.records_replayed > 0;
        let store = Self {
            dir: Box::new(dir),
            index: recovered.index,
            lsns,
            stripes: KeyStripes::default(),
            commit,
            options,
            engine,
            checkpoints: Mutex::new(CheckpointState {
                retired: recovered
                    .log_names
                    .into_iter()
                    .map(|name| (name, lsn_end))
                    .collect(),
                log_seq_next: seq + 1,
            }),
            checkpoint_count: AtomicU64::new(0),
            recovery: recovered.report,
            _lock: lock,
        };
        if replayed {
            // What recovery read may be only in the page cache (a failed fsync marks pages
            // clean without writing them, and a reopen reads them back): writing it anew in
            // a checkpoint makes it durable before any new write depends on it.
            store.checkpoint()?;
        }
        Ok(store)
    }

    /// Opens the store in the directory `path` of the real file system (created if missing).
    pub fn open_path(path: impl Into<PathBuf>, options: StoreOptions) -> Result<Self> {
        Self::open(OsDir::open(path)?, options)
    }

    /// Checks every file of the store in `dir` without changing anything and reports what
    /// an open would recover (see [`crate::verify`]); `engine` as in [`StoreOptions`]. Fails
    /// at once if the directory's lock is held (a store or server has it open).
    pub fn verify(dir: impl Dir, engine: Option<&str>) -> Result<VerifyReport> {
        crate::verify::verify(&dir, engine)
    }

    /// [`Self::verify`] on the directory `path` of the real file system, which must exist.
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
        Self::verify(OsDir::open(path)?, engine)
    }

    /// What recovery found at open.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Copies the value of `key` into `out`; false if absent.
    pub fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.index.get(key, out)
    }

    /// Visits the records in the bounds in `order` (not atomic as a whole, like the engines).
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.index.scan(lower, upper, order, visit);
    }

    /// Decides and logs one write of `key` in `shard`, under the key's stripe; returns the
    /// LSN taken (None: nothing changed) and what `decide` saw.
    fn write_one(
        &self,
        shard: usize,
        key: &[u8],
        read_current: bool,
        deferred: bool,
        decide: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<(Option<u64>, Option<Vec<u8>>)> {
        self.commit.check_failed()?;
        let _stripe = self.stripes.lock(key);
        let mut current = Vec::new();
        let old = if read_current && self.index.get(key, &mut current) {
            Some(current)
        } else {
            None
        };
        let lsn = match decide(old.as_deref())? {
            Rmw::Keep => None,
            Rmw::Put(value) => {
                check_entry(key, &value)?;
                let index = &*self.index;
                let apply = || {
                    index
                        .upsert(key, &value)
                        .expect("limits were checked before logging");
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
                let apply = || {
                    index.remove(key);
                };
                Some(if deferred {
                    self.commit
                        .log_deferred(shard, Op::Remove, key, &[], apply)?
                } else {
                    self.commit.log(shard, Op::Remove, key, &[], apply)?
                })
            }
        };
        Ok((lsn, old))
    }

    fn wait(&self, lsn: Option<u64>) -> Result<()> {
        match lsn {
            Some(lsn) => self.commit.wait(lsn),
            None => self.commit.check_failed(),
        }
    }

    /// Inserts `key` only if absent; true if inserted.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (lsn, _) = self.write_one(shard, key, true, false, |old| {
            Ok(match old {
                Some(_) => Rmw::Keep,
                None => Rmw::Put(value.to_vec()),
            })
        })?;
        self.wait(lsn)?;
        Ok(lsn.is_some())
    }

    /// Sets `key` to `value`.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (lsn, _) =
            self.write_one(shard, key, false, false, |_| Ok(Rmw::Put(value.to_vec())))?;
        self.wait(lsn)
    }

    /// Sets `key` to `value` only if present; true if updated.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (lsn, _) = self.write_one(shard, key, true, false, |old| {
            Ok(match old {
                Some(_) => Rmw::Put(value.to_vec()),
                None => Rmw::Keep,
            })
        })?;
        self.wait(lsn)?;
        Ok(lsn.is_some())
    }

    /// Removes `key`; true if it was present.
    pub fn remove(&self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let shard = self.commit.shard_of_thread();
        let (lsn, _) = self.write_one(shard, key, true, false, |old| {
            Ok(if old.is_some() {
                Rmw::Remove
            } else {
                Rmw::Keep
            })
        })?;
        self.wait(lsn)?;
        Ok(lsn.is_some())
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
        let (lsn, old) = self.write_one(shard, key, true, false, f)?;
        self.wait(lsn)?;
        Ok(old)
    }

    /// A batch of writes that share one durability wait ([`Batch::wait`]).
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            store: self,
            shard: self.commit.shard_of_thread(),
            lsn_max: None,
        }
    }

    /// Applies `ops` in order (each atomic on its own, the batch not) with one durability
    /// wait; returns for each op whether it changed the store. Limits are checked for all
    /// ops before any is applied.
    pub fn write_batch(&self, ops: &[BatchOp]) -> Result<Vec<bool>> {
        for op in ops {
            match op {
                BatchOp::Insert(k, v) | BatchOp::Upsert(k, v) | BatchOp::Update(k, v) => {
                    check_entry(k, v)?
                }
                BatchOp::Remove(k) => check_key(k)?,
            }
        }
        let mut batch = self.batch();
        let mut changed = Vec::with_capacity(ops.len());
        for op in ops {
            changed.push(match op {
                BatchOp::Insert(k, v) => batch.insert(k, v)?,
                BatchOp::Upsert(k, v) => {
                    batch.upsert(k, v)?;
                    true
                }
                BatchOp::Update(k, v) => batch.update(k, v)?,
                BatchOp::Remove(k) => batch.remove(k)?,
            });
        }
        batch.wait()?;
        Ok(changed)
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
        let seq = state.log_seq_next;
        state.log_seq_next += 1;
        let fresh = create_logs(&*self.dir, seq, self.commit.shard_count(), self.lsns.next())?;
        let (start_lsn, old_logs) = self.commit.rotate(fresh)?;
        for old in old_logs {
            let name = old
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .expect("log names are plain UTF-8 names")
                .to_string();
            state.retired.push((name, start_lsn));
        }
        let lsns = &self.lsns;
        let info = checkpoint::write(&*self.dir, &*self.index, start_lsn, || lsns.last())?;
        // Nothing newer than the logs may be published: make them durable through end_lsn.
        self.commit.sync()?;
        checkpoint::publish(&*self.dir, start_lsn)?;
        self.checkpoint_count.fetch_add(1, Ordering::Relaxed);
        self.delete_obsolete(&mut state)?;
        Ok(info)
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
        }
    }

    /// Makes everything durable, stops the flushers and releases the directory.
    pub fn close(mut self) -> Result<()> {
        let result = self.commit.sync();
        self.commit.stop();
        result
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
}

impl Batch<'_> {
    fn write(
        &mut self,
        key: &[u8],
        read_current: bool,
        decide: impl FnOnce(Option<&[u8]>) -> Result<Rmw>,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        let (lsn, old) = self
            .store
            .write_one(self.shard, key, read_current, true, decide)?;
        self.lsn_max = self.lsn_max.max(lsn);
        Ok((lsn.is_some(), old))
    }

    /// Inserts `key` only if absent; true if inserted.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (changed, _) = self.write(key, true, |old| {
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
        self.write(key, false, |_| Ok(Rmw::Put(value.to_vec())))?;
        Ok(())
    }

    /// Sets `key` to `value` only if present; true if updated.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (changed, _) = self.write(key, true, |old| {
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
        let (changed, _) = self.write(key, true, |old| {
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
        let (_, old) = self.write(key, true, f)?;
        Ok(old)
    }

    /// Waits once for every write of the batch to be acknowledged under the store's
    /// durability mode. An error (a failed write or fsync) means none of them is
    /// acknowledged, and the store refuses writes until reopened.
    pub fn wait(mut self) -> Result<()> {
        match self.lsn_max.take() {
            Some(lsn) => self.store.commit.wait_batch(self.shard, lsn),
            None => self.store.commit.check_failed(),
        }
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
        let _ = self.commit.sync();
        self.commit.stop();
    }
}
