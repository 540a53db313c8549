//! Recovery: the newest complete checkpoint, then every log replayed from its start LSN up
//! to the cutoff, merged by LSN (masstree.md §5 "recovery"; bw-tree.md §V-A: redo from the
//! redo-scan-start-point; issue 5 "Checkpoints and recovery").
//!
//! Steps (docs/ARCHITECTURE.md "forest-store" has them in prose):
//! 1. Delete unpublished `checkpoint-*.tmp` files.
//! 2. Try the published checkpoints newest first, each loaded into a fresh index while it is
//!    streamed and checked; a damaged one is reported, its half-loaded index dropped, the
//!    file renamed to `<name>.corrupt` and the next older one tried. With none complete,
//!    start from an empty index at LSN 1, which is only sound if no log was ever deleted:
//!    refused when checkpoint files existed and the logs do not hold LSN 1.
//! 3. Open every log as a [`LogStream`] (bounded memory per log); a torn tail is reported
//!    (and cut in step 5); damage before the tail is an error naming the file and offset,
//!    found when the stream reaches it.
//! 4. Merge the records of all logs by LSN (a k-way merge; each log is ascending) and apply
//!    those from the start LSN while they are gap-free: the cutoff is the last LSN of the
//!    gap-free run (`lsn::recovery_cutoff`). Records past a gap were never acknowledged
//!    (`wal::group_commit`) and are dropped; the streams still read them to the end, so
//!    damage anywhere is found.
//! 5. Cut every log to its records up to the cutoff (torn tails included) and fsync it, so
//!    that the LSNs after the cutoff can be handed out again; remove logs left without a
//!    header. Only then may the store write.
//!
//! [`RecoveryMode::ReadOnly`] (`Store::verify`, `forest check`) runs the same steps and
//! reports the same findings but changes nothing: no delete, rename or cut.
//!
//! Records and checkpoint entries are decoded in one thread and applied by several
//! (`replay`: partitioned by key, so each key's records keep their LSN order).
//!
//! Invariants: the index handed back holds exactly checkpoint + records `start ..= cutoff`;
//! two records with one LSN are corruption; nothing is written before every check passed.
//! Memory: the index plus one read window per file open at a time (`file::ReadWindow`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use forest_core::{Error, Index, Result};

use crate::checkpoint::{self, CheckpointStream};
use crate::file::Dir;
use crate::replay;
use crate::wal::record::LOG_HEADER_BYTES;
use crate::wal::{cut_torn_tail, parse_log_name, LogStream, Op};

/// Whether recovery may repair the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Delete `.tmp` checkpoints, rename damaged ones, cut logs (a store's open).
    Repair,
    /// Change nothing; report what `Repair` would do (`Store::verify`).
    ReadOnly,
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The checkpoint loaded (its start LSN), if any.
    pub checkpoint_start_lsn: Option<u64>,
    pub checkpoint_entry_count: u64,
    pub checkpoint_bytes: u64,
    /// Damaged checkpoints skipped, each with its error.
    pub corrupt_checkpoints: Vec<String>,
    /// Logs read.
    pub log_count: usize,
    /// Torn tails (cut unless read-only): file name, offset, bytes.
    pub torn_tails: Vec<(String, u64, u64)>,
    /// Unpublished `checkpoint-*.tmp` files (deleted unless read-only).
    pub tmp_checkpoints: Vec<String>,
    /// Log bytes after the cutoff (cut unless read-only): file name, valid length kept,
    /// file length. Torn tails are among them.
    pub log_cuts: Vec<(String, u64, u64)>,
    /// Bytes of the logs read.
    pub log_bytes: u64,
    /// Time spent loading the checkpoint (damaged ones tried included).
    pub checkpoint_elapsed: Duration,
    /// Time spent reading and replaying the logs.
    pub replay_elapsed: Duration,
    /// Records applied.
    pub records_replayed: u64,
    /// Records after the first missing LSN, dropped.
    pub records_beyond_cutoff: u64,
    /// The last LSN recovered; the store continues at `cutoff_lsn + 1`.
    pub cutoff_lsn: u64,
    /// Keys in the index afterwards.
    pub keys_recovered: u64,
    pub elapsed: Duration,
}

/// The recovered state handed to the store.
pub struct Recovered {
    pub index: Box<dyn Index>,
    pub report: RecoveryReport,
    /// The logs left in the directory (all records at most `cutoff_lsn`).
    pub log_names: Vec<String>,
    /// The next unused log set number.
    pub log_seq_next: u64,
}

/// Recovers the store in `dir` into a fresh index from `new_index` (see the module doc).
pub fn recover(
    dir: &dyn Dir,
    new_index: &dyn Fn() -> Box<dyn Index>,
    mode: RecoveryMode,
) -> Result<Recovered> {
    let began = Instant::now();
    let repair = mode == RecoveryMode::Repair;
    let mut report = RecoveryReport::default();
    let names = dir.list()?;
    let mut dir_changed = false;

    // 1. Unpublished checkpoints.
    for name in names.iter().filter(|n| checkpoint::is_checkpoint_tmp(n)) {
        report.tmp_checkpoints.push(name.clone());
        if repair {
            dir.remove(name)?;
            dir_changed = true;
        }
    }

    // 2. The newest complete checkpoint.
    let checkpoint_began = Instant::now();
    let checkpoint_files_seen = names
        .iter()
        .any(|n| n.starts_with("checkpoint-") && !checkpoint::is_checkpoint_tmp(n));
    let mut starts: Vec<u64> = names
        .iter()
        .filter_map(|n| checkpoint::parse_checkpoint_name(n))
        .collect();
    starts.sort_unstable_by(|a, b| b.cmp(a));
    let mut index = None;
    let mut start_lsn = 1;
    let mut last_checkpoint_error = None;
    for start in starts {
        let name = checkpoint::checkpoint_name(start);
        match load_checkpoint(dir, &name, new_index) {
            Ok((info, fresh)) => {
                report.checkpoint_start_lsn = Some(info.start_lsn);
                report.checkpoint_entry_count = info.entry_count;
                report.checkpoint_bytes = info.bytes;
                start_lsn = info.start_lsn;
                index = Some(fresh);
                break;
            }
            Err(e @ Error::Corrupt { .. }) => {
                report.corrupt_checkpoints.push(e.to_string());
                if repair {
                    dir.rename(&name, &format!("{name}.corrupt"))?;
                    dir_changed = true;
                }
                last_checkpoint_error = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    let from_checkpoint = index.is_some();
    let index = index.unwrap_or_else(new_index);
    report.checkpoint_elapsed = checkpoint_began.elapsed();

    // 3. The logs, each positioned on its first record.
    let replay_began = Instant::now();
    let log_names: Vec<String> = names
        .iter()
        .filter(|n| parse_log_name(n).is_some())
        .cloned()
        .collect();
    let log_seq_next = log_names
        .iter()
        .filter_map(|n| parse_log_name(n))
        .map(|(seq, _)| seq + 1)
        .max()
        .unwrap_or(0);
    let mut streams = Vec::with_capacity(log_names.len());
    for name in &log_names {
        let mut stream = LogStream::open(dir, name)?;
        stream.advance()?;
        report.log_bytes += stream.file_len();
        streams.push(stream);
    }
    report.log_count = streams.len();
    if !from_checkpoint && checkpoint_files_seen {
        let holds_first = streams.iter().any(|s| s.lsn() == Some(1));
        if !holds_first {
            return Err(last_checkpoint_error.unwrap_or_else(|| Error::Corrupt {
                path: dir.path().to_path_buf(),
                offset: 0,
                what: "no complete checkpoint, and the logs no longer start at LSN 1".into(),
            }));
        }
    }

    // 4. Merge by LSN and replay the gap-free run from the start LSN. `kept_end[f]`: the
    // end of log f's last record at or below the cutoff (records below the start LSN are
    // kept, the checkpoint covers them).
    let mut kept_end = vec![LOG_HEADER_BYTES as u64; streams.len()];
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (file, stream) in streams.iter_mut().enumerate() {
        while let Some(lsn) = stream.lsn() {
            if lsn >= start_lsn {
                heap.push(Reverse((lsn, file)));
                break;
            }
            kept_end[file] = stream.record_end().expect("a current record");
            stream.advance()?;
        }
    }
    let mut expected = start_lsn;
    let mut gap = false;
    replay::apply_parallel(&*index, replay::worker_count(), |apply| {
        while let Some(Reverse((lsn, file))) = heap.pop() {
            let stream = &mut streams[file];
            if lsn < expected {
                return Err(Error::Corrupt {
                    path: stream.path().to_path_buf(),
                    offset: 0,
                    what: format!("LSN {lsn} appears in two logs"),
                });
            }
            if gap || lsn > expected {
                gap = true;
                report.records_beyond_cutoff += 1;
            } else {
                let record = stream.record().expect("the heap holds current records");
                match record.op {
                    Op::Put => apply.put(record.key, record.value)?,
                    Op::Remove => apply.remove(record.key)?,
                }
                report.records_replayed += 1;
                expected += 1;
                kept_end[file] = stream.record_end().expect("a current record");
            }
            if stream.advance()? {
                let next = stream.lsn().expect("advance returned true");
                heap.push(Reverse((next, file)));
            }
        }
        Ok(())
    })?;
    let cutoff = expected - 1;
    report.cutoff_lsn = cutoff;
    for (name, stream) in log_names.iter().zip(&streams) {
        if let Some(torn) = stream.torn() {
            report
                .torn_tails
                .push((name.clone(), torn.offset, torn.bytes));
        }
    }
    report.replay_elapsed = replay_began.elapsed();

    // 5. Cut every log to its records up to the cutoff.
    let mut kept_names = Vec::new();
    for ((name, stream), len) in log_names.into_iter().zip(&streams).zip(kept_end) {
        if stream.header().is_none() {
            report.log_cuts.push((name.clone(), 0, stream.file_len()));
            if repair {
                dir.remove(&name)?;
                dir_changed = true;
            }
            continue;
        }
        debug_assert!(
            stream.valid_len().is_some_and(|valid| len <= valid),
            "records lie within the valid prefix"
        );
        if len != stream.file_len() {
            report.log_cuts.push((name.clone(), len, stream.file_len()));
            if repair {
                cut_torn_tail(dir, &name, len)?;
            }
        }
        kept_names.push(name);
    }
    if dir_changed {
        dir.sync_dir()?;
    }
    report.keys_recovered = index.stats().key_count;
    report.elapsed = began.elapsed();
    Ok(Recovered {
        index,
        report,
        log_names: kept_names,
        log_seq_next,
    })
}

/// Streams the checkpoint `name` into a fresh index; the index is dropped on any error.
fn load_checkpoint(
    dir: &dyn Dir,
    name: &str,
    new_index: &dyn Fn() -> Box<dyn Index>,
) -> Result<(checkpoint::CheckpointInfo, Box<dyn Index>)> {
    let mut stream = CheckpointStream::open(dir, name)?;
    let fresh = new_index();
    replay::apply_parallel(&*fresh, replay::worker_count(), |apply| {
        while let Some((key, value)) = stream.next_entry()? {
            apply.put(key, value)?;
        }
        Ok(())
    })?;
    let info = stream.info().expect("set once the entries end");
    Ok((info, fresh))
}
