//! Group commit: N shard logs written in parallel, each with a background flusher that
//! shares one fsync among every writer that appended while the previous fsync ran (Masstree
//! §5: per-core log buffers, a logging thread per log; issue 5 "Logs").
//!
//! Protocol. A writer picks its shard by thread. Under the shard's `state` lock it takes an
//! LSN, encodes the record into the shard's buffer and then applies its operation to the
//! index: the record is buffered before the index changes, so an engine that panics leaves
//! no hole in the LSNs, and the panic fails the store (issue 12, defect 1).
//! A *flush pass* of a shard holds the shard's `writer` lock, takes the buffer under the
//! `state` lock while reading `G` = the last LSN allocated, writes and fsyncs the batch, and
//! only then raises the shard's `durable_through` to `G`.
//!
//! The acknowledgement rule (the one Masstree's cutoff needs): a write with LSN `L` is
//! acknowledged when `min over shards of durable_through >= L`. `durable_through = G` is
//! true because every record of the shard with an LSN up to `G` was allocated under the
//! shard's `state` lock before the take, so it is in the batch or an earlier one, and those
//! are durable. A shard with nothing pending is therefore durable up to the global LSN at the
//! moment its flusher found it idle (a flush pass with an empty batch, no fsync). When `L` is
//! acknowledged every LSN up to `L`, in every log, is durable; LSNs are dense (`lsn.rs`), so
//! recovery's cutoff (the end of the gap-free run of LSNs) is at least `L`.
//!
//! Invariants:
//! - Lock order: `writer` before `state`; several shards in ascending order; a key stripe
//!   before either. The index is applied under `state` only.
//! - `durable_through` only grows, and only after a successful fsync of everything up to it.
//! - After a failed write or fsync the group is failed for good: every waiter whose LSN is
//!   not yet acknowledged gets the error, nothing more is acknowledged, new writes are
//!   refused until the store is reopened (never retry an fsync and trust it).
//!
//! Modes: `group` as above. `sync`: the writer holds its shard's writer lock from before
//! taking its LSN until it has run the flush pass itself, so every write gets a dedicated
//! fsync of its own record; then it waits for the other shards. `periodic`: the writer does not
//! wait; flushers force at least every interval.
//!
//! Marks (issue 12, defect 2): a flush pass that writes records first writes a mark with the
//! acknowledged LSN `D` of that moment: every LSN up to `D` is durable in every log, so
//! recovery refuses a cutoff below it. Seals: a log rotated out ends with a seal whose
//! bound is the rotation's LSN; at a clean close every log gets a mark and a seal, and
//! recovery then knows nothing was cut.
//!
//! Atomic units (`log_unit`): the records of one atomic batch take consecutive LSNs in one
//! shard's buffer, flagged `BATCH_MORE` but the last, so they reach the log together and
//! recovery applies them whole or not at all.
//!
//! Batches (`log_deferred` + `wait_batch`): the records are only buffered, and the wait
//! starts one flush for all of them (under `sync` the waiter runs the pass itself: one fsync
//! per batch; under `group` it wakes the flusher once). A record is never acknowledged before
//! the same rule as above holds for the batch's highest LSN.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use forest_core::{check_entry, Error, Result};
use parking_lot::{Condvar, Mutex};

use super::record::{encode_record, Op, Record};
use super::writer::LogWriter;
use crate::durability::Durability;
use crate::lsn::LsnAllocator;

/// The most shards (log files written in parallel): more would only add flusher threads
/// and idle passes on a machine with fewer cores.
pub const SHARD_COUNT_MAX: usize = 64;

/// The largest log buffer a shard keeps for its next flush pass (`ShardState::spare`).
/// Small, because a shard keeps up to two such buffers while idle after a burst (review
/// rev-lists13 F3: 256 MiB each before); a steady `periodic` pass at 100 k list pushes a
/// second fills 11 MB.
const SPARE_BYTES_MAX: usize = 16 << 20;

/// What one shard's writers have appended and the flusher not yet taken.
#[derive(Debug, Default)]
struct ShardState {
    buf: Vec<u8>,
    /// The buffer of the last flush pass, emptied, to be `buf` at the next: a buffer that
    /// started empty at every pass grew by reallocation and fresh pages each time (issue 19:
    /// about 3 % of LPUSH's server time under `periodic`). Memory: at most the largest
    /// buffer of recent passes, again.
    spare: Vec<u8>,
    /// The nonce of the shard's current log (records are encoded for it).
    nonce: u32,
    /// LSNs of the first and last record in `buf` (0: empty).
    lsn_first: u64,
    lsn_last: u64,
}

#[derive(Debug)]
struct Shard {
    state: Mutex<ShardState>,
    /// Wakes the shard's flusher.
    work: Condvar,
    writer: Mutex<LogWriter>,
    durable_through: AtomicU64,
}

/// The first failure, kept to report to every later caller.
#[derive(Clone, Debug)]
struct Failure {
    path: PathBuf,
    op: &'static str,
    message: String,
}

impl Failure {
    fn to_error(&self) -> Error {
        Error::Io {
            path: self.path.clone(),
            op: self.op,
            source: std::io::Error::other(format!(
                "{}; the store refuses writes until it is reopened",
                self.message
            )),
        }
    }
}

#[derive(Debug, Default)]
struct AckState {
    /// Every LSN up to this one is durable in every log.
    durable: u64,
    failure: Option<Failure>,
}

#[derive(Debug)]
struct Inner {
    shards: Box<[Shard]>,
    lsns: Arc<LsnAllocator>,
    durability: Durability,
    ack: Mutex<AckState>,
    acked: Condvar,
    /// The highest LSN some caller waits for; flushers of idle shards advance to it.
    requested: AtomicU64,
    failed: AtomicBool,
    shutdown: AtomicBool,
    fsync_count: AtomicU64,
    /// A temporal store's units take their LSNs and timestamp under it, so timestamps follow
    /// LSN order across shards too (redo replays in LSN order; `store/temporal.rs`).
    stamp: Mutex<()>,
}

/// The shard logs of an open store and their flushers.
#[derive(Debug)]
pub struct GroupCommit {
    inner: Arc<Inner>,
    flushers: Vec<JoinHandle<()>>,
}

static THREAD_SEQ: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number, which picks its shard.
    static THREAD_INDEX: usize = THREAD_SEQ.fetch_add(1, Ordering::Relaxed);
}

impl GroupCommit {
    /// Starts one flusher per log of `writers` (one per shard, shard `i` = `writers[i]`).
    /// Every LSN below `lsns.next()` must be durable already.
    pub fn start(
        writers: Vec<LogWriter>,
        lsns: Arc<LsnAllocator>,
        durability: Durability,
    ) -> Result<Self> {
        if writers.is_empty() || writers.len() > SHARD_COUNT_MAX {
            return Err(Error::Config(format!(
                "shards: {} given, 1..={SHARD_COUNT_MAX} allowed",
                writers.len()
            )));
        }
        let durable = lsns.last();
        let shards: Box<[Shard]> = writers
            .into_iter()
            .map(|writer| Shard {
                state: Mutex::new(ShardState {
                    nonce: writer.header().nonce,
                    ..ShardState::default()
                }),
                work: Condvar::new(),
                writer: Mutex::new(writer),
                durable_through: AtomicU64::new(durable),
            })
            .collect();
        let inner = Arc::new(Inner {
            shards,
            lsns,
            durability,
            ack: Mutex::new(AckState {
                durable,
                failure: None,
            }),
            acked: Condvar::new(),
            requested: AtomicU64::new(durable),
            failed: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            fsync_count: AtomicU64::new(0),
            stamp: Mutex::new(()),
        });
        let mut flushers = Vec::new();
        for index in 0..inner.shards.len() {
            let inner = Arc::clone(&inner);
            let handle = std::thread::Builder::new()
                .name(format!("forest-flusher-{index}"))
                .spawn(move || {
                    // A flusher that panics must not leave writers waiting for ever.
                    let run = std::panic::AssertUnwindSafe(|| inner.flusher(index));
                    if std::panic::catch_unwind(run).is_err() {
                        inner.fail(&internal_error(format!(
                            "the flusher of shard log {index} panicked"
                        )));
                    }
                })
                .map_err(|e| Error::Io {
                    path: PathBuf::from("<thread>"),
                    op: "spawn flusher",
                    source: e,
                })?;
            flushers.push(handle);
        }
        Ok(Self { inner, flushers })
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// The shard of the calling thread.
    pub fn shard_of_thread(&self) -> usize {
        THREAD_INDEX.with(|i| *i) % self.inner.shards.len()
    }

    /// Logs one operation in `shard`: takes its LSN, runs `apply` (the index operation) and
    /// encodes the record, all under the shard's lock. Precondition: the caller holds the
    /// key's stripe. Returns the LSN; the write is not durable yet (see [`Self::wait`]).
    pub fn log(
        &self,
        shard: usize,
        op: Op,
        key: &[u8],
        value: &[u8],
        apply: impl FnOnce(u64),
    ) -> Result<u64> {
        self.log_as(shard, op, key, value, apply, false)
    }

    /// Like [`Self::log`], for a batch: the record is only buffered (no fsync of its own
    /// under `sync`, no flusher wake-up under `group`), so a batch's records share the one
    /// flush that [`Self::wait_batch`] starts.
    pub fn log_deferred(
        &self,
        shard: usize,
        op: Op,
        key: &[u8],
        value: &[u8],
        apply: impl FnOnce(u64),
    ) -> Result<u64> {
        self.log_as(shard, op, key, value, apply, true)
    }

    fn log_as(
        &self,
        shard: usize,
        op: Op,
        key: &[u8],
        value: &[u8],
        apply: impl FnOnce(u64),
        deferred: bool,
    ) -> Result<u64> {
        // A single write is a unit of one record (its flag clear).
        let lsn = self.log_unit(shard, &[(op, key, value)], apply, deferred)?;
        Ok(lsn.expect("a unit of one record takes an LSN"))
    }

    /// Logs the records of one atomic batch in `shard` at consecutive LSNs, flagged as one
    /// unit (see the module doc), then runs `apply` (the index operations), all under the
    /// shard's lock. Precondition: the caller holds the stripes of every key. Returns the
    /// unit's last LSN; `deferred` as for [`Self::log_deferred`]. An empty unit logs
    /// nothing and returns `None`.
    pub fn log_unit(
        &self,
        shard: usize,
        records: &[(Op, &[u8], &[u8])],
        apply: impl FnOnce(u64),
        deferred: bool,
    ) -> Result<Option<u64>> {
        let logged = self.log_unit_at(shard, records, None, |_, lsn| apply(lsn), deferred)?;
        Ok(logged.map(|(lsn, _)| lsn))
    }

    /// [`Self::log_unit`] for a store over a temporal engine (issue 18): `tick` (the
    /// engine's clock) gives the unit one timestamp, taken right after its LSNs under the
    /// shard's lock and carried in each of its records ([`FLAG_TIMESTAMP`](super::record::FLAG_TIMESTAMP));
    /// `apply` gets it. LSNs and timestamp are taken together under one lock across shards,
    /// so timestamps increase with LSNs; units of different shards apply concurrently (the
    /// store hands its timestamps in flight to the engine, §IV-B1's EOSL-TS). Returns the
    /// unit's last LSN and its timestamp.
    pub fn log_unit_stamped(
        &self,
        shard: usize,
        records: &[(Op, &[u8], &[u8])],
        tick: &dyn Fn() -> u64,
        apply: impl FnOnce(u64),
        deferred: bool,
    ) -> Result<Option<(u64, u64)>> {
        let logged = self.log_unit_at(
            shard,
            records,
            Some(tick),
            |ts, _| apply(ts.expect("a stamped unit has a timestamp")),
            deferred,
        )?;
        Ok(logged.map(|(lsn, ts)| (lsn, ts.expect("a stamped unit has a timestamp"))))
    }

    fn log_unit_at(
        &self,
        shard: usize,
        records: &[(Op, &[u8], &[u8])],
        tick: Option<&dyn Fn() -> u64>,
        apply: impl FnOnce(Option<u64>, u64),
        deferred: bool,
    ) -> Result<Option<(u64, Option<u64>)>> {
        // Limits first: an LSN must never be taken for a record that cannot be encoded.
        for &(op, key, value) in records {
            check_entry(key, value)?;
            assert!(op.is_data(), "a unit holds data records");
            debug_assert!(op == Op::Put || value.is_empty(), "a remove logs no value");
        }
        let Some(count) = std::num::NonZeroU64::new(records.len() as u64) else {
            return Ok(None);
        };
        let inner = &*self.inner;
        let shard_ref = &inner.shards[shard];
        // `sync`: the writer lock is held from before the LSNs are taken to after the fsync,
        // so the flush that follows is this unit's own.
        let mut own_flush =
            (inner.durability == Durability::Sync && !deferred).then(|| shard_ref.writer.lock());
        let mut state = shard_ref.state.lock();
        if inner.failed.load(Ordering::SeqCst) {
            return Err(inner.failure_error());
        }
        let (first, ts) = match tick {
            Some(tick) => {
                let _stamp = inner.stamp.lock();
                (inner.lsns.allocate_n(count.get()), Some(tick()))
            }
            None => (inner.lsns.allocate_n(count.get()), None),
        };
        let last = first + count.get() - 1;
        let nonce = state.nonce;
        for (i, &(op, key, value)) in records.iter().enumerate() {
            let record = Record {
                lsn: first + i as u64,
                op,
                batch_more: i + 1 < records.len(),
                key,
                value,
                ts,
            };
            encode_record(&record, nonce, &mut state.buf)
                .expect("limits were checked before the LSNs were taken");
        }
        if state.lsn_first == 0 {
            state.lsn_first = first;
        }
        state.lsn_last = last;
        let guard = FailOnUnwind::new(inner, During::Apply { lsn: first });
        apply(ts, last);
        guard.disarm();
        drop(state);
        if let Some(writer) = own_flush.as_mut() {
            inner.flush_locked(shard, writer)?;
            drop(own_flush);
            inner.publish();
        } else if inner.durability == Durability::Group && !deferred {
            shard_ref.work.notify_one();
        }
        Ok(Some((last, ts)))
    }

    /// Fails the store with `error` (a checkpoint whose publication failed, for one): every
    /// waiter not yet acknowledged gets it, and writes are refused until reopened.
    pub fn fail(&self, error: &Error) {
        self.inner.fail(error);
    }

    /// Waits until a batch logged by [`Self::log_deferred`] in `shard`, whose highest LSN
    /// is `lsn`, may be acknowledged: `sync` runs one flush pass of `shard` itself (one
    /// fsync for the whole batch) and then waits for the other shards; `group` waits for
    /// `lsn` like a single write; `periodic` returns at once.
    pub fn wait_batch(&self, shard: usize, lsn: u64) -> Result<()> {
        let inner = &*self.inner;
        if inner.durability == Durability::Sync
            && inner.shards[shard].durable_through.load(Ordering::SeqCst) < lsn
        {
            inner.flush_pass(shard)?;
        }
        self.wait(lsn)
    }

    /// Asks the flushers to make every LSN up to `lsn` durable, without waiting (a batch
    /// dropped before its wait).
    pub fn request(&self, lsn: u64) {
        self.inner.request(lsn);
    }

    /// Waits until `lsn` may be acknowledged under the durability mode:
    /// at once in `periodic`, after every LSN up to it is durable in `sync` and `group`.
    pub fn wait(&self, lsn: u64) -> Result<()> {
        let inner = &*self.inner;
        match inner.durability {
            Durability::Periodic { .. } => {
                if inner.failed.load(Ordering::SeqCst) {
                    return Err(inner.failure_error());
                }
                Ok(())
            }
            // `sync` forced the record in `log`; the other shards may still owe earlier LSNs.
            Durability::Sync | Durability::Group => inner.wait_durable(lsn),
        }
    }

    /// Makes every write logged so far durable, whatever the mode.
    pub fn sync(&self) -> Result<()> {
        let target = self.inner.lsns.last();
        self.inner.wait_durable(target)
    }

    /// Whether a write or fsync failed (the store refuses writes).
    pub fn is_failed(&self) -> bool {
        self.inner.failed.load(Ordering::SeqCst)
    }

    /// The error every write gets after a failure, or `Ok`.
    pub fn check_failed(&self) -> Result<()> {
        if self.is_failed() {
            return Err(self.inner.failure_error());
        }
        Ok(())
    }

    /// Every LSN up to this one is durable in every log.
    pub fn durable_lsn(&self) -> u64 {
        self.inner.ack.lock().durable
    }

    /// Fsyncs of log files so far.
    pub fn fsync_count(&self) -> u64 {
        self.inner.fsync_count.load(Ordering::Relaxed)
    }

    /// Rotates every shard to its log in `fresh` (created empty, `first_lsn` at most the
    /// current next LSN) at one LSN `start`: every record below `start` is in the old logs,
    /// which are made durable and returned, every later one goes to the new logs.
    pub fn rotate(&self, fresh: Vec<LogWriter>) -> Result<(u64, Vec<LogWriter>)> {
        self.rotate_with(fresh, || ())
            .map(|(start, _, old)| (start, old))
    }

    /// [`Self::rotate`], also returning what `at_start` reads while every shard is locked at
    /// `start`: no unit is between its LSNs and its apply then (a temporal store reads its
    /// clock, the cut of its checkpoint).
    pub fn rotate_with<T>(
        &self,
        fresh: Vec<LogWriter>,
        at_start: impl FnOnce() -> T,
    ) -> Result<(u64, T, Vec<LogWriter>)> {
        let inner = &*self.inner;
        assert_eq!(fresh.len(), inner.shards.len(), "one new log per shard");
        let mut writers: Vec<_> = inner.shards.iter().map(|s| s.writer.lock()).collect();
        let mut states: Vec<_> = inner.shards.iter().map(|s| s.state.lock()).collect();
        if inner.failed.load(Ordering::SeqCst) {
            return Err(inner.failure_error());
        }
        let start = inner.lsns.next();
        let read = at_start();
        let mut old_logs = Vec::with_capacity(fresh.len());
        // Rotation takes every buffer: a panic before the old logs are synced loses them.
        let guard = FailOnUnwind::new(inner, During::Rotate);
        for ((writer, state), new_log) in writers.iter_mut().zip(states.iter_mut()).zip(fresh) {
            let buf = std::mem::take(&mut state.buf);
            let (first, last) = (state.lsn_first, state.lsn_last);
            state.lsn_first = 0;
            state.lsn_last = 0;
            state.nonce = new_log.header().nonce;
            let mut old = std::mem::replace(&mut **writer, new_log);
            // Cannot fail: the store is not failed and the LSNs follow the old log's. The
            // seal tells recovery the log is whole: no LSN of it is at or above `start`.
            let sealed = old
                .append_encoded(first, last, &buf)
                .and_then(|()| old.append_control(Op::Seal, start));
            if let Err(e) = sealed {
                inner.fail(&e);
                return Err(e);
            }
            old_logs.push(old);
        }
        drop(states);
        // The writer locks stay held: no flush pass may call a shard durable until its old
        // log is synced.
        for old in &mut old_logs {
            if let Err(e) = old.sync() {
                inner.fail(&e);
                return Err(e);
            }
            inner.fsync_count.fetch_add(1, Ordering::Relaxed);
        }
        guard.disarm();
        drop(writers);
        Ok((start, read, old_logs))
    }

    /// A clean close: makes every write durable, then ends every log with a mark (everything
    /// is durable) and a seal, synced, so that recovery knows nothing was cut. Call with no
    /// writer left; [`Self::stop`] follows.
    pub fn seal(&self) -> Result<()> {
        self.sync()?;
        let inner = &*self.inner;
        let mut writers: Vec<_> = inner.shards.iter().map(|s| s.writer.lock()).collect();
        let states: Vec<_> = inner.shards.iter().map(|s| s.state.lock()).collect();
        if inner.failed.load(Ordering::SeqCst) {
            return Err(inner.failure_error());
        }
        if states.iter().any(|s| !s.buf.is_empty()) {
            return Err(internal_error(
                "writes arrived while the store closed".to_string(),
            ));
        }
        let bound = inner.lsns.next();
        for writer in writers.iter_mut() {
            let sealed = writer
                .append_control(Op::Mark, bound - 1)
                .and_then(|()| writer.append_control(Op::Seal, bound))
                .and_then(|()| writer.sync().map(|_| ()));
            if let Err(e) = sealed {
                inner.fail(&e);
                return Err(e);
            }
            inner.fsync_count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Stops the flushers (nothing more is forced; call [`Self::sync`] first to keep it).
    pub fn stop(&mut self) {
        self.inner.shutdown.store(true, Ordering::SeqCst);
        for shard in self.inner.shards.iter() {
            drop(shard.state.lock());
            shard.work.notify_all();
        }
        for handle in self.flushers.drain(..) {
            // A flusher that panicked has nothing left to clean up; its panic was printed.
            let _ = handle.join();
        }
        let mut ack = self.inner.ack.lock();
        if ack.failure.is_none() {
            ack.failure = Some(Failure {
                path: PathBuf::from("<store>"),
                op: "write",
                message: "the store is closed".to_string(),
            });
            self.inner.failed.store(true, Ordering::SeqCst);
        }
        self.inner.acked.notify_all();
    }
}

/// Fails the store if the thread unwinds through an engine's apply (issue 12, defect 1): the
/// record is logged, the index may be half changed, so nothing more may be acknowledged.
struct FailOnUnwind<'a> {
    inner: &'a Inner,
    /// What was under way, for the error: applying `lsn`, or writing out a shard's log.
    during: During,
}

#[derive(Clone, Copy)]
enum During {
    Apply {
        lsn: u64,
    },
    /// Records taken from a shard's buffer are only in the writer's hands: a panic before
    /// they are durable leaves a hole, like a panic in apply.
    LogIo {
        shard: usize,
    },
    Rotate,
}

impl<'a> FailOnUnwind<'a> {
    fn new(inner: &'a Inner, during: During) -> Self {
        Self { inner, during }
    }

    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        let message = match self.during {
            During::Apply { lsn } => format!("the engine panicked while applying LSN {lsn}"),
            During::LogIo { shard } => format!("a panic while writing out shard log {shard}"),
            During::Rotate => "a panic while rotating the logs".to_string(),
        };
        self.inner.fail(&internal_error(message));
    }
}

fn internal_error(message: String) -> Error {
    Error::Io {
        path: PathBuf::from("<store>"),
        op: "write",
        source: std::io::Error::other(message),
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    fn failure_error(&self) -> Error {
        match &self.ack.lock().failure {
            Some(f) => f.to_error(),
            None => Error::Io {
                path: PathBuf::from("<store>"),
                op: "write",
                source: std::io::Error::other("an earlier write or fsync failed"),
            },
        }
    }

    /// Records the first failure and wakes every waiter.
    fn fail(&self, error: &Error) {
        let (path, op) = match error {
            Error::Io { path, op, .. } => (path.clone(), *op),
            Error::Corrupt { path, .. } => (path.clone(), "write"),
            _ => (PathBuf::from("<store>"), "write"),
        };
        let mut ack = self.ack.lock();
        if ack.failure.is_none() {
            ack.failure = Some(Failure {
                path,
                op,
                message: error.to_string(),
            });
        }
        self.failed.store(true, Ordering::SeqCst);
        drop(ack);
        self.acked.notify_all();
    }

    /// One flush pass of `index` (see the module doc); returns after its fsync.
    fn flush_pass(&self, index: usize) -> Result<()> {
        let mut writer = self.shards[index].writer.lock();
        self.flush_locked(index, &mut writer)?;
        drop(writer);
        self.publish();
        Ok(())
    }

    /// The body of a flush pass; precondition: the caller holds shard `index`'s writer lock
    /// (`writer` is its guarded log). The caller publishes afterwards.
    fn flush_locked(&self, index: usize, writer: &mut LogWriter) -> Result<()> {
        let shard = &self.shards[index];
        if self.failed.load(Ordering::SeqCst) {
            return Err(self.failure_error());
        }
        let (buf, first, last, through) = {
            let mut state = shard.state.lock();
            let spare = std::mem::take(&mut state.spare);
            let buf = std::mem::replace(&mut state.buf, spare);
            let taken = (buf, state.lsn_first, state.lsn_last, self.lsns.last());
            state.lsn_first = 0;
            state.lsn_last = 0;
            taken
        };
        if !buf.is_empty() {
            // The mark first: it claims only what was acknowledged before this pass.
            let acked = self.ack.lock().durable;
            let guard = FailOnUnwind::new(self, During::LogIo { shard: index });
            let result = writer
                .append_mark_if_newer(acked)
                .and_then(|()| writer.append_encoded(first, last, &buf))
                .and_then(|()| writer.sync());
            guard.disarm();
            if let Err(e) = result {
                self.fail(&e);
                return Err(e);
            }
            self.fsync_count.fetch_add(1, Ordering::Relaxed);
            // Kept while passes fill at least a quarter of it (a second of `periodic` at
            // 100 k list pushes a second is 11 MB), so a burst's buffer goes with the first
            // smaller pass after it.
            if buf.capacity() <= SPARE_BYTES_MAX && buf.len() >= buf.capacity() / 4 {
                let mut buf = buf;
                buf.clear();
                shard.state.lock().spare = buf;
            }
        } else if buf.capacity() > 0 && buf.capacity() <= SPARE_BYTES_MAX {
            // An empty pass took the buffer the next writes would have filled: keep it.
            shard.state.lock().spare = buf;
        }
        shard.durable_through.fetch_max(through, Ordering::SeqCst);
        Ok(())
    }

    /// Raises the acknowledged LSN to the minimum over shards and wakes waiters.
    fn publish(&self) {
        let min = self
            .shards
            .iter()
            .map(|s| s.durable_through.load(Ordering::SeqCst))
            .min()
            .expect("at least one shard");
        let mut ack = self.ack.lock();
        if min > ack.durable {
            ack.durable = min;
            self.lsns.publish_durable(min);
            drop(ack);
            self.acked.notify_all();
        }
    }

    /// Asks the flushers of shards not yet durable through `lsn` to advance to it.
    fn request(&self, lsn: u64) {
        self.requested.fetch_max(lsn, Ordering::SeqCst);
        for shard in self.shards.iter() {
            if shard.durable_through.load(Ordering::SeqCst) < lsn {
                // Taking the lock orders this wake-up after the flusher's check.
                drop(shard.state.lock());
                shard.work.notify_one();
            }
        }
    }

    /// Waits until every LSN up to `lsn` is durable, asking idle shards' flushers to
    /// advance.
    fn wait_durable(&self, lsn: u64) -> Result<()> {
        {
            let ack = self.ack.lock();
            if ack.durable >= lsn {
                return Ok(());
            }
            if let Some(f) = &ack.failure {
                return Err(f.to_error());
            }
        }
        self.request(lsn);
        let mut ack = self.ack.lock();
        loop {
            if ack.durable >= lsn {
                return Ok(());
            }
            if let Some(f) = &ack.failure {
                return Err(f.to_error());
            }
            self.acked.wait(&mut ack);
        }
    }

    /// The flusher of shard `index`: waits for work, runs flush passes, exits at shutdown
    /// or after a failure.
    fn flusher(&self, index: usize) {
        let shard = &self.shards[index];
        let interval = match self.durability {
            Durability::Periodic { interval_ms } => Some(Duration::from_millis(interval_ms)),
            Durability::Sync | Durability::Group => None,
        };
        let mut deadline = interval.map(|i| Instant::now() + i);
        loop {
            {
                let mut state = shard.state.lock();
                loop {
                    if self.shutdown.load(Ordering::SeqCst) || self.failed.load(Ordering::SeqCst) {
                        return;
                    }
                    let requested = self.requested.load(Ordering::SeqCst)
                        > shard.durable_through.load(Ordering::SeqCst);
                    let pending = !state.buf.is_empty();
                    if requested || (pending && self.durability == Durability::Group) {
                        break;
                    }
                    match deadline {
                        Some(at) => {
                            if Instant::now() >= at {
                                // An idle shard advances too (no fsync), so the durable
                                // LSN keeps up in this mode where nobody waits.
                                let behind =
                                    shard.durable_through.load(Ordering::SeqCst) < self.lsns.last();
                                if pending || behind {
                                    break;
                                }
                                deadline = interval.map(|i| Instant::now() + i);
                            }
                            if let Some(at) = deadline {
                                shard.work.wait_until(&mut state, at);
                            }
                        }
                        None => shard.work.wait(&mut state),
                    }
                }
            }
            if self.flush_pass(index).is_err() {
                return; // the failure is recorded and every waiter woken
            }
            deadline = interval.map(|i| Instant::now() + i);
        }
    }
}
