//! Recovery: the newest complete checkpoint, then every log replayed from its start LSN up
//! to the cutoff, merged by LSN (masstree.md §5 "recovery"; bw-tree.md §V-A: redo from the
//! redo-scan-start-point; issue 5 "Checkpoints and recovery").
//!
//! Steps (docs/ARCHITECTURE.md "forest-store" has them in prose):
//! 1. Delete unpublished `checkpoint-*.tmp` files.
//! 2. Try the published checkpoints newest first; a damaged one is reported, renamed to
//!    `<name>.corrupt` and the next older one tried. With none complete, start from an
//!    empty index at LSN 1, which is only sound if no log was ever deleted: refused when
//!    checkpoint files existed and the logs do not hold LSN 1.
//! 3. Read and decode every log; a torn tail is reported (and cut in step 5); damage before
//!    the tail is an error naming the file and offset.
//! 4. Merge the records of all logs by LSN (a k-way merge; each log is ascending) and apply
//!    those from the start LSN while they are gap-free: the cutoff is the last LSN of the
//!    gap-free run (`lsn::recovery_cutoff`). Records past a gap were never acknowledged
//!    (`wal::group_commit`) and are dropped.
//! 5. Cut every log to its records up to the cutoff (torn tails included) and fsync it, so
//!    that the LSNs after the cutoff can be handed out again; remove logs left without a
//!    header. Only then may the store write.
//!
//! Invariants: the index handed back holds exactly checkpoint + records `start ..= cutoff`;
//! two records with one LSN are corruption; nothing is written before every check passed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use forest_core::{Error, Index, Result};

use crate::checkpoint;
use crate::file::Dir;
use crate::wal::record::LOG_HEADER_BYTES;
use crate::wal::{cut_torn_tail, parse_log_name, LogFile, Op};

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
    /// Torn tails cut: file name, offset, bytes.
    pub torn_tails: Vec<(String, u64, u64)>,
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
pub fn recover(dir: &dyn Dir, new_index: &dyn Fn() -> Box<dyn Index>) -> Result<Recovered> {
    let began = Instant::now();
    let mut report = RecoveryReport::default();
    let names = dir.list()?;
    let mut dir_changed = false;

    // 1. Unpublished checkpoints.
    for name in names.iter().filter(|n| checkpoint::is_checkpoint_tmp(n)) {
        dir.remove(name)?;
        dir_changed = true;
    }

    // 2. The newest complete checkpoint.
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
        let (path, data) = checkpoint::read(dir, &name)?;
        match checkpoint::decode(&path, &data) {
            Ok((info, entries)) => {
                let fresh = new_index();
                for (key, value) in entries {
                    fresh.upsert(key, value)?;
                }
                report.checkpoint_start_lsn = Some(info.start_lsn);
                report.checkpoint_entry_count = info.entry_count;
                report.checkpoint_bytes = info.bytes;
                start_lsn = info.start_lsn;
                index = Some(fresh);
                break;
            }
            Err(e @ Error::Corrupt { .. }) => {
                report.corrupt_checkpoints.push(e.to_string());
                dir.rename(&name, &format!("{name}.corrupt"))?;
                dir_changed = true;
                last_checkpoint_error = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    let from_checkpoint = index.is_some();
    let index = index.unwrap_or_else(new_index);

    // 3. The logs.
    let mut log_names: Vec<String> = names
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
    let files: Vec<LogFile> = log_names
        .iter()
        .map(|n| LogFile::read(dir, n))
        .collect::<Result<_>>()?;
    let decoded: Vec<_> = files.iter().map(LogFile::decode).collect::<Result<_>>()?;
    report.log_count = files.len();
    for (name, d) in log_names.iter().zip(&decoded) {
        if let Some(torn) = d.torn {
            report
                .torn_tails
                .push((name.clone(), torn.offset, torn.bytes));
        }
    }
    if !from_checkpoint && checkpoint_files_seen {
        let holds_first = decoded
            .iter()
            .any(|d| d.records.first().is_some_and(|r| r.lsn == 1));
        if !holds_first {
            return Err(last_checkpoint_error.unwrap_or_else(|| Error::Corrupt {
                path: dir.path().to_path_buf(),
                offset: 0,
                what: "no complete checkpoint, and the logs no longer start at LSN 1".into(),
            }));
        }
    }

    // 4. Merge by LSN and replay the gap-free run from the start LSN.
    let mut heap = BinaryHeap::new();
    let mut next_of = vec![0usize; decoded.len()];
    for (file, d) in decoded.iter().enumerate() {
        let first = d.records.partition_point(|r| r.lsn < start_lsn);
        next_of[file] = first;
        if let Some(r) = d.records.get(first) {
            heap.push(Reverse((r.lsn, file)));
        }
    }
    let mut expected = start_lsn;
    let mut gap = false;
    while let Some(Reverse((lsn, file))) = heap.pop() {
        let record = decoded[file].records[next_of[file]];
        next_of[file] += 1;
        if let Some(r) = decoded[file].records.get(next_of[file]) {
            heap.push(Reverse((r.lsn, file)));
        }
        if lsn < expected {
            return Err(Error::Corrupt {
                path: files[file].path().to_path_buf(),
                offset: 0,
                what: format!("LSN {lsn} appears in two logs"),
            });
        }
        if gap || lsn > expected {
            gap = true;
            report.records_beyond_cutoff += 1;
            continue;
        }
        match record.op {
            Op::Put => index.upsert(record.key, record.value)?,
            Op::Remove => {
                index.remove(record.key);
            }
        }
        report.records_replayed += 1;
        expected += 1;
    }
    let cutoff = expected - 1;
    report.cutoff_lsn = cutoff;

    // 5. Cut every log to its records up to the cutoff.
    let mut kept_names = Vec::new();
    for ((name, d), file) in log_names.drain(..).zip(&decoded).zip(&files) {
        if d.header.is_none() {
            dir.remove(&name)?;
            dir_changed = true;
            continue;
        }
        let mut len = LOG_HEADER_BYTES as u64;
        for r in d.records.iter().take_while(|r| r.lsn <= cutoff) {
            len += r.encoded_len() as u64;
        }
        debug_assert!(len <= d.valid_len, "records lie within the valid prefix");
        if len != file.bytes().len() as u64 {
            cut_torn_tail(dir, &name, len)?;
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
