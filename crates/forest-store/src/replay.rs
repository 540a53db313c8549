//! Parallel apply for recovery: the records that recovery decodes in one thread (LSN order,
//! masstree.md §5 "recovery") are applied to the index by several threads, partitioned by a
//! hash of the key, so that replay and checkpoint loading use more than one core (issue 5:
//! at least 1 M log records per second replayed).
//!
//! Invariants:
//! - Per key, records are applied in the order [`Apply::put`]/[`Apply::remove`] received
//!   them: all of a key's records go to one worker (same hash), through one FIFO channel,
//!   and a worker applies its batches in order. Writes to different keys commute, so the
//!   final index is the one serial replay builds.
//! - Memory is bounded: each worker's channel holds at most [`QUEUED_BATCH_COUNT`] batches of
//!   about [`BATCH_BYTES`].
//! - Every record handed over is applied before [`apply_parallel`] returns `Ok`; on an error
//!   the workers stop and the (half-built) index is the caller's to drop.
//!
//! Choice: by default the records are applied inline, without threads ([`worker_count`]
//! says why); `FOREST_REPLAY_THREADS=N` turns the workers on.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use forest_core::{Error, Index, Result};

use crate::wal::Op;

/// Bytes of encoded records per batch handed to a worker: large enough that the channel's
/// cost per record is small, small enough to keep every worker busy.
pub const BATCH_BYTES: usize = 256 << 10;
/// Batches queued per worker before the decoder waits.
pub const QUEUED_BATCH_COUNT: usize = 4;
/// The most apply threads: the decoder is one thread, and engines scale only so far.
pub const WORKER_COUNT_MAX: usize = 8;

/// Where decoded records go (see [`apply_parallel`]).
pub struct Apply<'a> {
    index: &'a dyn Index,
    senders: Vec<SyncSender<Vec<u8>>>,
    batches: Vec<Vec<u8>>,
}

impl Apply<'_> {
    /// Sets `key` to `value` (in order with this key's other records).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.push(Op::Put, key, value)
    }

    /// Removes `key` (in order with this key's other records).
    pub fn remove(&mut self, key: &[u8]) -> Result<()> {
        self.push(Op::Remove, key, &[])
    }

    /// [`Self::put`] of a record that may carry a version's timestamp (a temporal store's):
    /// on a temporal index the version `(key, ts)` is created unless it is there (redo never
    /// duplicates a version); on another index (a store switched away from a temporal
    /// engine) it is a plain put. Timestamped records are applied inline, in the order
    /// given (the caller runs no workers for a temporal index).
    pub fn put_at(&mut self, key: &[u8], value: &[u8], ts: Option<u64>) -> Result<()> {
        match ts {
            Some(ts) => self.version(key, ts, Some(value)),
            None => self.put(key, value),
        }
    }

    /// [`Self::remove`] of a record that may carry a timestamp (see [`Self::put_at`]).
    pub fn remove_at(&mut self, key: &[u8], ts: Option<u64>) -> Result<()> {
        match ts {
            Some(ts) => self.version(key, ts, None),
            None => self.remove(key),
        }
    }

    fn version(&mut self, key: &[u8], ts: u64, value: Option<&[u8]>) -> Result<()> {
        let Some(temporal) = self.index.as_temporal() else {
            return match value {
                Some(value) => self.put(key, value),
                None => self.remove(key),
            };
        };
        if !self.senders.is_empty() {
            return Err(Error::Config(
                "a temporal index is replayed inline, in timestamp order, not by workers"
                    .to_string(),
            ));
        }
        temporal.put_version(key, ts, value).map(|_| ())
    }

    fn push(&mut self, op: Op, key: &[u8], value: &[u8]) -> Result<()> {
        if self.senders.is_empty() {
            return apply_one(self.index, op, key, value);
        }
        let worker = crc32c::crc32c(key) as usize % self.senders.len();
        let batch = &mut self.batches[worker];
        batch.push(if op == Op::Put { 1 } else { 2 });
        batch.extend_from_slice(&(key.len() as u32).to_le_bytes());
        batch.extend_from_slice(&(value.len() as u32).to_le_bytes());
        batch.extend_from_slice(key);
        batch.extend_from_slice(value);
        if batch.len() >= BATCH_BYTES {
            self.send(worker)?;
        }
        Ok(())
    }

    fn send(&mut self, worker: usize) -> Result<()> {
        let batch = std::mem::replace(&mut self.batches[worker], Vec::with_capacity(BATCH_BYTES));
        if batch.is_empty() {
            return Ok(());
        }
        self.senders[worker]
            .send(batch)
            .map_err(|_| Error::Config("a replay worker stopped early".to_string()))
    }
}

fn apply_one(index: &dyn Index, op: Op, key: &[u8], value: &[u8]) -> Result<()> {
    if op == Op::Put {
        index.upsert(key, value)
    } else {
        index.remove(key);
        Ok(())
    }
}

fn u32_at(batch: &[u8], at: usize) -> usize {
    let mut word = [0u8; 4];
    word.copy_from_slice(&batch[at..at + 4]);
    u32::from_le_bytes(word) as usize
}

/// A worker: applies its batches in order until the channel closes.
fn worker(index: &dyn Index, batches: Receiver<Vec<u8>>) -> Result<()> {
    for batch in batches {
        let mut at = 0;
        while at < batch.len() {
            let op = if batch[at] == 1 { Op::Put } else { Op::Remove };
            let key_len = u32_at(&batch, at + 1);
            let value_len = u32_at(&batch, at + 5);
            let key = &batch[at + 9..at + 9 + key_len];
            let value = &batch[at + 9 + key_len..at + 9 + key_len + value_len];
            apply_one(index, op, key, value)?;
            at += 9 + key_len + value_len;
        }
    }
    Ok(())
}

/// The environment variable that sets the apply threads (0: inline), for measurements.
pub const REPLAY_THREADS_ENV: &str = "FOREST_REPLAY_THREADS";

/// The apply threads to use besides the decoder: `FOREST_REPLAY_THREADS` if set (at most
/// [`WORKER_COUNT_MAX`]), else 0, inline. Choice: inline is the default because on the
/// 2-core machine of issue 5, shared with other work, 1 and 2 workers measured slower than
/// inline (ascending keys make the workers meet in one leaf); set the variable to measure
/// on a larger machine (`FOREST_REPLAY_THREADS=4 forest check DIR`).
pub fn worker_count() -> usize {
    std::env::var(REPLAY_THREADS_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(0, |n| n.min(WORKER_COUNT_MAX))
}

/// Runs `produce`, which hands records to an [`Apply`], and applies them to `index` with
/// `workers` threads (0: inline); returns once every record is applied, or the first error.
pub fn apply_parallel<T>(
    index: &dyn Index,
    workers: usize,
    produce: impl FnOnce(&mut Apply<'_>) -> Result<T>,
) -> Result<T> {
    if workers == 0 {
        let mut apply = Apply {
            index,
            senders: Vec::new(),
            batches: Vec::new(),
        };
        return produce(&mut apply);
    }
    std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = sync_channel(QUEUED_BATCH_COUNT);
            senders.push(tx);
            handles.push(scope.spawn(move || worker(index, rx)));
        }
        let mut apply = Apply {
            index,
            senders,
            batches: (0..workers)
                .map(|_| Vec::with_capacity(BATCH_BYTES))
                .collect(),
        };
        let produced = produce(&mut apply);
        let flushed = (0..workers).try_for_each(|w| apply.send(w));
        drop(apply); // closes the channels: the workers finish their queues and exit
        let mut applied = Ok(());
        for handle in handles {
            let result = handle
                .join()
                .unwrap_or_else(|_| Err(Error::Config("a replay worker panicked".to_string())));
            applied = applied.and(result);
        }
        // A worker's own error explains a failed send, so it goes first.
        applied?;
        flushed?;
        produced
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use forest_lockbtree::LockBTree;
    use std::ops::{Bound, ControlFlow};

    fn contents(index: &dyn Index) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        index.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            forest_core::Order::Ascending,
            &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                ControlFlow::Continue(())
            },
        );
        out
    }

    // Goal: parallel apply builds exactly what serial apply builds, per-key order included.
    // Method: 200 k writes and removes over 500 keys, applied inline and with 1..4 workers.
    #[test]
    fn parallel_apply_matches_serial() {
        let ops: Vec<(bool, u32, u32)> = (0..200_000u32)
            .map(|i| (i % 7 == 3, i.wrapping_mul(2_654_435_761) % 500, i))
            .collect();
        let run = |workers| {
            let index = LockBTree::new();
            apply_parallel(&index, workers, |apply| {
                for &(remove, key, value) in &ops {
                    if remove {
                        apply.remove(&key.to_be_bytes())?;
                    } else {
                        apply.put(&key.to_be_bytes(), &value.to_le_bytes())?;
                    }
                }
                Ok(())
            })
            .unwrap();
            contents(&index)
        };
        let serial = run(0);
        assert!(!serial.is_empty());
        for workers in 1..=4 {
            assert_eq!(run(workers), serial, "{workers} workers");
        }
    }

    // Goal: an error from the producer reaches the caller and the workers stop. Method: fail
    // half way with 3 workers.
    #[test]
    fn producer_error_stops_the_workers() {
        let index = LockBTree::new();
        let result: Result<()> = apply_parallel(&index, 3, |apply| {
            for i in 0..10_000u32 {
                apply.put(&i.to_be_bytes(), b"v")?;
            }
            Err(Error::Config("stop".into()))
        });
        assert!(matches!(result, Err(Error::Config(m)) if m == "stop"));
    }
}
