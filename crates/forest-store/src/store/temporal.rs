//! The store over a temporal engine (`tsbtree`; issue 18 "Temporal API in the store";
//! tsbw-tree-temporal.md §III-A1, §III-B): every write is a version at a timestamp, and
//! reads may ask for any past time.
//!
//! Timestamps. A unit (one write, or one atomic batch) takes its timestamp from the engine's
//! clock (wall-clock microseconds, `max(now, last + 1)`) with its LSNs, under the shard log's
//! lock and one lock common to all shards (`GroupCommit::log_unit_stamped`), so timestamps
//! strictly increase in LSN order across shards; it applies under its shard's lock, so units
//! of different shards apply concurrently, out of timestamp order, while each key's units
//! (serialised by the key stripes) apply in order. The timestamp is in each of its log
//! records (`wal::record`'s `FLAG_TIMESTAMP`). Every record of a batch has the batch's
//! timestamp, so an as-of read sees a batch whole or not at all; a batch that writes one key
//! twice makes one version, its last write's.
//!
//! EOSL-TS (tsbw-tree-temporal.md §IV-B1). Each shard has a slot holding the timestamp of its
//! unit in flight (taken, not yet applied; a shard has at most one, under its lock), marked
//! before the tick. [`InFlight`] hands their minimum to the engine
//! ([`TemporalIndex::set_in_flight`]), whose data pages time-split at or below it: a version
//! still to come is never older than its page's start, so history is never updated. The same
//! slots keep [`Store::now`] below every unit not yet applied. Redo applies one record at a
//! time in LSN (= timestamp) order and needs no slot. A write is acknowledged only once no
//! unit at or below its timestamp is in flight (`Store::settle`), so [`Store::now`] is at or
//! after every acknowledged write; a unit whose apply panics fails the store, then clears its
//! slot, and a write waiting for it gets the failure. Pause points (feature `pause-points`): `temporal:ticked`,
//! a unit's timestamp taken and marked in flight, nothing applied yet; `temporal:settling`, a
//! write waiting for an older unit to apply before it is acknowledged.
//!
//! Redo. Recovery replays the logs in LSN order, inline, each record as
//! [`TemporalIndex::put_version`] at its logged timestamp: the same versions at the same
//! times, and a version already there is left alone (a version is `(key, timestamp)`).
//!
//! Checkpoints (`checkpoint.rs`, format version 3). A checkpoint rotates the logs at
//! `start_lsn` and reads the clock with every shard locked there: that time is the cut,
//! every unit below `start_lsn` has applied at a timestamp at most it and every later unit
//! ticks above it. It then writes the versions that reads at or after the retention
//! threshold `T` need, up to the cut ([`TemporalIndex::versions_from`]), in (timestamp, key)
//! order, and is published, and logs below the older of the newest two checkpoints are
//! deleted, as for other engines. The rule for a version of a key, with the key's next
//! version (up to the cut) at `next`: written when its timestamp is at or after `T` (a
//! tombstone too: it ends an older version for reads after it, and a history from `T` lists
//! it), or when it holds a value and `next` is at or after `T` or absent (the version
//! current at `T`, which as-of reads at `T` need); discarded otherwise: a value superseded
//! before `T`, and a tombstone before `T` (nothing older is written for it to end). With no
//! threshold (`T = 0`) every version is written. Reads as of any time from `T` on, and
//! histories from `T`, answer the same from the file plus the logs after it. An open loads
//! the newest valid checkpoint into an index that has META's `T` (and the file's, if
//! higher), putting each version at its timestamp in file order (the order time splits
//! need, as in redo), then replays the logs from `start_lsn`. The open after a crash that
//! replayed records writes a checkpoint, as for other engines. Cost: each checkpoint writes
//! the whole retained history again; the index hands it out a page at a time and the sort
//! into (timestamp, key) order spills runs to scratch files, so memory stays bounded
//! whatever the history's size (`checkpoint/sort.rs`, review rev-tckpt F3).
//!
//! Retention (tsbw-tree-temporal.md §V-C). [`Store::set_retention`] raises a threshold `T`
//! (never lowers it, never past [`Store::now`]); it is written durably to META (format 4)
//! before the engine discards anything, and applied to the fresh index at open before the
//! checkpoint is loaded and redo runs, so both free history below `T` as they go; the next
//! checkpoint leaves it out of the files. Reads as of a time below `T`, and histories
//! starting below it, are refused naming `T`; reads at `T` or later answer as before.
//!
//! Reads as of `t` need no gate: [`Store::now`] is below every unit not yet applied, and a
//! time after it is refused ("in the future"), so the answer for any time allowed never
//! changes; across a crash too for any time up to an acknowledged write's timestamp (a
//! write not yet durable may be visible, as for [`Store::get`], and lost in a crash).

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;

use forest_core::{
    check_entry, check_key, Error, Order, Result, TemporalIndex, Timestamp, Visitor,
};

use super::{Rmw, Store, WriteBatch};
use crate::meta::StoreMeta;
use crate::wal::Op;

/// [`Store::settle`]'s busy rounds before it yields, and its yields before it sleeps.
const SETTLE_SPINS: u32 = 64;
const SETTLE_YIELDS: u32 = 1000;

/// A slot's value while its unit is taking its timestamp.
const TICKING: u64 = u64::MAX;

/// Per shard, the timestamp of the unit between its tick and its apply (0: none; see the
/// module doc): §IV-B1's EOSL-TS for the engine, and [`Store::now`]'s bound.
pub(super) struct InFlight {
    slots: Box<[Slot]>,
}

/// One shard's slot, on its own cache line: shards write theirs concurrently.
#[derive(Default)]
#[repr(align(64))]
struct Slot(std::sync::atomic::AtomicU64);

impl std::ops::Deref for Slot {
    type Target = std::sync::atomic::AtomicU64;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl InFlight {
    pub(super) fn new(shards: usize) -> Self {
        Self {
            slots: (0..shards).map(|_| Default::default()).collect(),
        }
    }

    /// Marks `shard`'s unit as ticking, takes its timestamp, records it.
    fn tick(&self, shard: usize, temporal: &dyn TemporalIndex) -> u64 {
        self.slots[shard].store(TICKING, Ordering::SeqCst);
        let ts = temporal.tick();
        self.slots[shard].store(ts, Ordering::SeqCst);
        ts
    }

    fn applied(&self, shard: usize) {
        self.slots[shard].store(0, Ordering::SeqCst);
    }

    /// The smallest timestamp in flight, waiting out a unit taking one.
    fn oldest(&self) -> Option<u64> {
        let mut oldest = None;
        for slot in self.slots.iter() {
            let ts = loop {
                match slot.load(Ordering::SeqCst) {
                    TICKING => std::hint::spin_loop(),
                    ts => break ts,
                }
            };
            if ts != 0 {
                oldest = Some(oldest.map_or(ts, |o: u64| o.min(ts)));
            }
        }
        oldest
    }
}

/// Clears a unit's slot when its apply ends, returned or unwound.
struct ClearsSlot<'a> {
    in_flight: &'a InFlight,
    shard: usize,
}

impl Drop for ClearsSlot<'_> {
    fn drop(&mut self) {
        self.in_flight.applied(self.shard);
    }
}

impl forest_core::InFlight for InFlight {
    fn oldest_unapplied(&self) -> Option<Timestamp> {
        self.oldest()
    }
}

/// Versions of one key's history: (timestamp, value or None for a delete).
pub type History = Vec<(Timestamp, Option<Vec<u8>>)>;

/// Refuses switching to a temporal engine from another engine (the logs and checkpoints of
/// that engine hold no timestamps).
pub(super) fn check_open(recorded: Option<&StoreMeta>, engine: &str) -> Result<()> {
    if let Some(meta) = recorded {
        let was = super::spec_form(&meta.engine);
        let temporal_before = forest_engines::EngineSpec::parse(&was)
            .ok()
            .and_then(|s| forest_engines::find(&s.name).ok())
            .is_some_and(|e| e.capabilities.temporal);
        if !temporal_before {
            return Err(Error::Config(format!(
                "the store was created with engine `{was}`, whose logs and checkpoints hold no \
                 timestamps: it cannot switch to the temporal engine `{engine}` (create a new \
                 store)"
            )));
        }
    }
    Ok(())
}

/// The records of a unit with each key's last only, in their order: one version per key
/// and timestamp.
pub(super) fn last_per_key<'a>(
    records: &[(Op, &'a [u8], &'a [u8])],
) -> Vec<(Op, &'a [u8], &'a [u8])> {
    let last: BTreeMap<&[u8], usize> = records
        .iter()
        .enumerate()
        .map(|(i, &(_, key, _))| (key, i))
        .collect();
    records
        .iter()
        .enumerate()
        .filter(|(i, (_, key, _))| last[key] == *i)
        .map(|(_, &r)| r)
        .collect()
}

/// Applies a store's persisted retention threshold to a fresh index before redo, so that
/// redo frees history below it as it goes (`tsbtree`: a historical page ending at or before
/// it is freed when its split commits). An engine that cannot discard keeps the history;
/// the store still refuses reads below the threshold ([`Store::get_as_of`] and the rest).
pub(super) fn apply_retention(index: &dyn forest_core::Index, threshold: Timestamp) {
    if let (Some(temporal), true) = (index.as_temporal(), threshold > 0) {
        // Memory only: reads below the threshold are refused by the store either way.
        let _ = temporal.set_retention(threshold);
    }
}

fn not_temporal(engine: &str) -> Error {
    Error::InvalidUse(format!(
        "engine `{engine}` is not a temporal engine: as-of reads, history and timestamps need \
         a store created with a temporal engine (tsbtree)"
    ))
}

impl Store {
    /// The engine's temporal side, or the error naming the engine.
    fn temporal(&self) -> Result<&dyn TemporalIndex> {
        self.index
            .as_temporal()
            .ok_or_else(|| not_temporal(&self.engine))
    }

    /// Whether the store's engine keeps versions.
    pub fn is_temporal(&self) -> bool {
        self.index.as_temporal().is_some()
    }

    /// A unit's timestamp, under its shard's lock; [`Self::now`] and the engine's split
    /// times stay at or below it until the unit has applied.
    pub(super) fn tick(&self, shard: usize, temporal: &dyn TemporalIndex) -> u64 {
        self.in_flight.tick(shard, temporal)
    }

    /// Applies a unit's records as versions at `ts`, then lets [`Self::now`] and split times
    /// pass it (also when the engine refused one or panicked: the store fails then).
    pub(super) fn apply_versions(
        &self,
        shard: usize,
        temporal: &dyn TemporalIndex,
        unit: &[(Op, &[u8], &[u8])],
        ts: u64,
    ) -> Result<()> {
        // Dropped in reverse: on a panic the store fails first, then the slot clears, so a
        // write settling behind the unit sees the failure, never a slot left set (rev-tsb2 F1).
        let _clears = ClearsSlot {
            in_flight: &self.in_flight,
            shard,
        };
        let _fails = super::FailOnPanic::new(&self.commit, "applying a temporal unit");
        forest_core::pause::pause_point("temporal:ticked");
        unit.iter().try_for_each(|&(op, key, value)| {
            temporal
                .put_version(key, ts, (op == Op::Put).then_some(value))
                .map(|_| ())
        })
    }

    /// The shard this thread's writes log to (tests pick writers on different shards).
    #[doc(hidden)]
    pub fn shard_of_this_thread(&self) -> usize {
        self.commit.shard_of_thread()
    }

    /// Hands the slots of timestamps in flight to the engine (§IV-B1's EOSL-TS).
    pub(super) fn hand_over_in_flight(&self) {
        if let Some(temporal) = self.index.as_temporal() {
            temporal.set_in_flight(self.in_flight.clone());
        }
    }

    /// Logs and applies one write of `key` on a temporal store; its LSN and timestamp (None:
    /// `decision` keeps the key). An engine's refusal goes to `refused`.
    pub(super) fn log_temporal(
        &self,
        shard: usize,
        temporal: &dyn TemporalIndex,
        key: &[u8],
        decision: Rmw,
        deferred: bool,
        refused: &mut Option<Error>,
    ) -> Result<Option<(u64, u64)>> {
        let value = match &decision {
            Rmw::Keep => return Ok(None),
            Rmw::Put(value) => {
                check_entry(key, value)?;
                Some(&value[..])
            }
            Rmw::Remove => None,
        };
        let unit = [match value {
            Some(v) => (Op::Put, key, v),
            None => (Op::Remove, key, &[][..]),
        }];
        self.commit.log_unit_stamped(
            shard,
            &unit,
            &|| self.tick(shard, temporal),
            |ts| {
                if let Err(e) = self.apply_versions(shard, temporal, &unit, ts) {
                    *refused = Some(self.fail_logged_unapplied(e));
                }
            },
            deferred,
        )
    }

    /// On a temporal store, waits before a write is acknowledged until no unit is in flight
    /// at or below `ts`, the write's timestamp (a batch's highest; None: the write took none,
    /// so the clock read now, at or above every applied write's): then [`Self::now`] is at or
    /// after every acknowledged write (review rev-tsb F2: under `periodic` a lower unit of
    /// another shard could still be in flight). Units that ticked after the write are not
    /// waited for (review rev-tsb2 F3). Such units only have their apply left; the wait spins
    /// briefly, then yields, then sleeps. A unit whose apply panicked fails the store before
    /// its slot clears ([`Self::apply_versions`]): the failure is returned, as the write's
    /// wait would (review rev-tsb2 F1). Pause point `temporal:settling`: a write found an
    /// older unit in flight.
    pub(super) fn settle(&self, ts: Option<u64>) -> Result<()> {
        let Some(temporal) = self.index.as_temporal() else {
            return Ok(());
        };
        let bound = ts.unwrap_or_else(|| temporal.now());
        let mut rounds = 0u32;
        loop {
            let behind = self.in_flight.oldest().is_some_and(|t| t <= bound);
            // After the slots: a slot cleared by a panic was cleared after the failure.
            self.commit.check_failed()?;
            if !behind {
                return Ok(());
            }
            if rounds == 0 {
                forest_core::pause::pause_point("temporal:settling");
            }
            rounds = rounds.saturating_add(1);
            if rounds < SETTLE_SPINS {
                std::hint::spin_loop();
            } else if rounds < SETTLE_SPINS + SETTLE_YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }

    /// A time at or above the timestamp of every write that has returned, below that of
    /// every write not yet applied: reads as of it never change. Errors: not temporal.
    pub fn now(&self) -> Result<Timestamp> {
        let temporal = self.temporal()?;
        let now = temporal.now();
        Ok(match self.in_flight.oldest() {
            Some(pending) => now.min(pending - 1),
            None => now,
        })
    }

    /// The error for a time after [`Self::now`], whose answer could still change, or below
    /// the retention threshold, whose history is discarded.
    fn check_past(&self, t: Timestamp) -> Result<&dyn TemporalIndex> {
        let temporal = self.temporal()?;
        let now = self.now()?;
        if t > now {
            return Err(Error::InvalidUse(format!(
                "time {t} is in the future (now is {now}): its answer could still change"
            )));
        }
        let threshold = temporal.retention();
        if t < threshold {
            return Err(forest_core::discarded(t, threshold));
        }
        Ok(temporal)
    }

    /// The retention threshold: reads before it are refused (0: none set). Errors: not
    /// temporal.
    pub fn retention(&self) -> Result<Timestamp> {
        Ok(self.temporal()?.retention())
    }

    /// Sets the retention threshold to `t`: history before it is discarded, and reads as of
    /// any time below it, or histories starting below it, are refused from then on, across
    /// reopens (the threshold is in META, written durably before anything is discarded).
    /// Setting the current threshold again changes nothing. Errors: not temporal; `t` after
    /// [`Self::now`] (reads up to now must keep their answers); `t` below the current
    /// threshold (it only grows: that history is gone).
    pub fn set_retention(&self, t: Timestamp) -> Result<Timestamp> {
        let temporal = self.temporal()?;
        // One at a time, and never during a checkpoint (which reads the threshold).
        let _serial = self.checkpoints.lock();
        let now = self.now()?;
        if t > now {
            return Err(Error::InvalidUse(format!(
                "retention threshold {t} is in the future (now is {now}): reads up to now \
                 must keep their answers"
            )));
        }
        let current = temporal.retention();
        if t < current {
            return Err(Error::InvalidUse(format!(
                "retention threshold {t} is below the current threshold {current}: it only \
                 grows (history before {current} is already discarded)"
            )));
        }
        if t == current {
            return Ok(t);
        }
        // Every unit at or below `now` is applied; made durable first, so that no threshold
        // covers a write a crash could still lose (review rev-retain13 F2).
        self.commit.sync()?;
        // Under the lock `set_layout` writes META with: neither loses the other's field.
        let layout = self.layout.lock();
        crate::meta::write(
            &*self.dir,
            &StoreMeta {
                engine: self.engine.clone(),
                durable_through: layout.1,
                retention: t,
                layout: layout.0,
            },
        )?;
        temporal.set_retention(t)?;
        Ok(t)
    }

    /// Sets `key` to `value`; returns the new version's timestamp. Errors: as
    /// [`Self::upsert`]; not temporal.
    pub fn put_ts(&self, key: &[u8], value: &[u8]) -> Result<Timestamp> {
        self.temporal()?;
        check_entry(key, value)?;
        let shard = self.commit.shard_of_thread();
        let (_, ack, _) =
            self.write_one(shard, key, false, false, |_| Ok(Rmw::Put(value.to_vec())))?;
        self.wait(ack)?;
        Ok(ack.ts.expect("an upsert always writes"))
    }

    /// Removes `key`; returns the delete's timestamp, None if the key was absent (nothing
    /// written). Errors: as [`Self::remove`]; not temporal.
    pub fn remove_ts(&self, key: &[u8]) -> Result<Option<Timestamp>> {
        self.temporal()?;
        check_key(key)?;
        let shard = self.commit.shard_of_thread();
        let (_, ack, _) = self.write_one(shard, key, true, false, |old| {
            Ok(if old.is_some() {
                Rmw::Remove
            } else {
                Rmw::Keep
            })
        })?;
        self.wait(ack)?;
        Ok(ack.ts)
    }

    /// [`Self::write`], also returning the batch's one timestamp (None: it changed nothing).
    pub fn write_ts(&self, batch: &WriteBatch) -> Result<(Vec<bool>, Option<Timestamp>)> {
        self.temporal()?;
        let shard = self.commit.shard_of_thread();
        let (changed, ack) = self.write_unit(shard, batch.ops(), false)?;
        self.wait(ack)?;
        Ok((changed.into_vec(), ack.ts))
    }

    /// The value of `key` as of time `t` into `out`; false if it had none then. Errors: not
    /// temporal; `t` after [`Self::now`].
    pub fn get_as_of(&self, key: &[u8], t: Timestamp, out: &mut Vec<u8>) -> Result<bool> {
        let temporal = self.check_past(t)?;
        check_key(key)?;
        temporal.get_as_of(key, t, out)
    }

    /// The records in the bounds as of time `t`, in `order`, at most `limit`. Returns the
    /// key to continue after (`Bound::Excluded` of it, same `t`) when `limit` stopped the
    /// scan, None when it reached the end (or the visitor stopped it). Pages read this way
    /// at one `t` are one snapshot. Errors: not temporal; `t` after [`Self::now`].
    pub fn scan_as_of(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        t: Timestamp,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        let temporal = self.check_past(t)?;
        if limit == 0 {
            return Ok(None);
        }
        let mut seen = 0;
        let mut last = None;
        temporal.scan_as_of(lower, upper, order, t, &mut |k, v| {
            seen += 1;
            if visit(k, v).is_break() {
                return ControlFlow::Break(());
            }
            if seen == limit {
                last = Some(k.to_vec());
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        Ok(last)
    }

    /// The versions of `key` with a timestamp in `from..=to`, in `order` of time, at most
    /// `limit`: (timestamp, value or None for a delete). `to` is capped at [`Self::now`].
    /// Errors: not temporal; `from` after now.
    pub fn history(
        &self,
        key: &[u8],
        from: Timestamp,
        to: Timestamp,
        order: Order,
        limit: usize,
    ) -> Result<History> {
        let temporal = self.check_past(from)?;
        check_key(key)?;
        let to = to.min(self.now()?);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        temporal.history(key, from, to, order, &mut |ts, v| {
            out.push((ts, v.map(<[u8]>::to_vec)));
            if out.len() == limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(out)
    }
}
