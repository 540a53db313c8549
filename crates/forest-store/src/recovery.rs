//! Recovery: the newest complete checkpoint, then every log replayed from its start LSN up
//! to the cutoff, merged by LSN (masstree.md §5 "recovery"; bw-tree.md §V-A: redo from the
//! redo-scan-start-point; issue 5 "Checkpoints and recovery"; issue 12: recovery refuses
//! whenever it cannot prove that what it would drop was never acknowledged).
//!
//! Steps (docs/ARCHITECTURE.md "forest-store" has them in prose):
//! 1. Delete unpublished `checkpoint-*.tmp` files.
//! 2. Try the published checkpoints newest first, each loaded into a fresh index while it is
//!    streamed and checked; a damaged one is reported, its half-loaded index dropped, the
//!    file renamed to `<name>.corrupt` and the next older one tried. With none complete,
//!    start from an empty index at LSN 1, which is only sound if no log was ever deleted:
//!    refused when checkpoint files existed and the logs do not hold LSN 1.
//! 3. Open every log as a [`LogStream`] (bounded memory per log). A log's valid prefix ends
//!    at a tail (torn by a crash, or damaged) or at structural damage.
//! 4. Merge the data records of all logs by LSN (a k-way merge; each log is ascending) and
//!    apply those from the start LSN while they are gap-free, stepping over void LSNs (cut
//!    by an earlier recovery, `LogHeader::void_from`). The records of an atomic batch are
//!    held back until its last record arrives: a batch cut by the cutoff is dropped whole.
//!    The cutoff is the last LSN applied.
//! 5. Weigh what was not applied. It is a *loss* — the open is refused with an error naming
//!    the file and offset, unless [`RecoveryMode::AcceptLoss`] — when:
//!    - the cutoff is below a watermark a mark proves (every LSN up to it was durable in
//!      every log), or below the loaded checkpoint's end LSN (the logs were durable through
//!      it before the checkpoint was published);
//!    - a log set that may hold records at or above the start LSN misses a shard's log;
//!    - a log of a set older than the newest set holding records has structural damage, or
//!      holds anything past its header but no seal (a newer set gets records only after the
//!      older one was synced and sealed, so its end was durable; a set that never took
//!      records, from a checkpoint that failed, holds only headers).
//!
//!    Damage in a set that the checkpoint covers (every LSN of it below the start LSN, by its
//!    seal or a later set's first LSN) is reported and ignored.
//! 6. Repair: never reuse an LSN. The store continues after the highest LSN any log or
//!    mark mentions, and LSNs from the cutoff to there are recorded as void in the new logs'
//!    headers. Every log is cut after its last applied record (the cut always synced), and
//!    sealed; logs left without a header are removed. Only then may the store write.
//!
//! [`recover_applied`] starts instead from an index that already holds every record up to
//! an LSN (a `bztree-pm` file, `crate::pm`): no checkpoint is loaded; steps 3-6 run as
//! above with that LSN + 1 as the start, so only later records are applied (redo).
//!
//! [`RecoveryMode::ReadOnly`] (`Store::verify`, `forest check`) runs the same steps and
//! reports the same findings, refusals included, but changes nothing.
//!
//! Records and checkpoint entries are decoded in one thread and applied by several
//! (`replay`: partitioned by key, so each key's records keep their LSN order).
//!
//! Invariants: the index handed back holds exactly checkpoint + whole batches of records
//! `start ..= cutoff`; two records with one LSN are corruption; nothing is written before
//! every check passed. Memory: the index plus one read window per log, plus the records of
//! one batch.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use forest_core::{Error, Index, Result};

use crate::checkpoint::{self, CheckpointStream};
use crate::file::Dir;
use crate::replay;
use crate::wal::record::{Evidence, LOG_HEADER_BYTES};
use crate::wal::{cut_log, parse_log_name, seal_log, LogStream, Op};

/// Whether recovery may repair the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Delete `.tmp` checkpoints, rename damaged ones, cut and seal logs (a store's open);
    /// refuse a proven loss.
    Repair,
    /// As `Repair`, but a proven loss is accepted: it is listed in
    /// [`RecoveryReport::losses`] and dropped (`forest check --repair`).
    AcceptLoss,
    /// Change nothing; report what `Repair` would do (`Store::verify`).
    ReadOnly,
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The checkpoint loaded (its start LSN), if any.
    pub checkpoint_start_lsn: Option<u64>,
    /// The loaded checkpoint's end LSN: the logs were durable through it.
    pub checkpoint_end_lsn: Option<u64>,
    pub checkpoint_entry_count: u64,
    pub checkpoint_bytes: u64,
    /// Damaged checkpoints skipped, each with its error.
    pub corrupt_checkpoints: Vec<String>,
    /// Logs read.
    pub log_count: usize,
    /// Tails after a log's valid prefix (cut unless read-only): file name, offset, bytes.
    pub torn_tails: Vec<(String, u64, u64)>,
    /// Unpublished `checkpoint-*.tmp` files (deleted unless read-only).
    pub tmp_checkpoints: Vec<String>,
    /// Log bytes after the cutoff (cut unless read-only): file name, length kept, file
    /// length. Torn tails are among them.
    pub log_cuts: Vec<(String, u64, u64)>,
    /// Logs sealed by this recovery (unless read-only).
    pub logs_sealed: Vec<String>,
    /// Bytes of the logs read.
    pub log_bytes: u64,
    /// Time spent loading the checkpoint (damaged ones tried included).
    pub checkpoint_elapsed: Duration,
    /// Time spent reading and replaying the logs.
    pub replay_elapsed: Duration,
    /// Records applied.
    pub records_replayed: u64,
    /// Data records after the cutoff, dropped (a batch cut by the cutoff included).
    pub records_beyond_cutoff: u64,
    /// Atomic batches cut by the cutoff and dropped whole.
    pub batches_dropped: u64,
    /// The last LSN recovered.
    pub cutoff_lsn: u64,
    /// The LSN the store continues at; `cutoff_lsn + 1 .. lsn_next` is void.
    pub lsn_next: u64,
    /// Every LSN up to this one was durable before recovery read the logs, by proof: the
    /// checkpoint loaded (its end LSN), a mark, META's clean close, or a clean seal (then it
    /// is the cutoff). Records after it were read but may have been only in the page cache
    /// (after a kill, or a failed fsync: Linux marks the pages clean without writing them, so
    /// recovery's own fsyncs need not write them either). At most `cutoff_lsn`.
    pub durable_lsn: u64,
    /// Proven losses: what was durable (and perhaps acknowledged) and is gone. A `Repair`
    /// open refuses when there is any; `AcceptLoss` drops it and lists it here.
    pub losses: Vec<String>,
    /// Damage in logs the checkpoint covers, ignored.
    pub covered_damage: Vec<String>,
    /// The newest log set was sealed by a clean close: nothing was cut.
    pub clean: bool,
    /// Keys in the index afterwards.
    pub keys_recovered: u64,
    pub elapsed: Duration,
}

/// The recovered state handed to the store.
pub struct Recovered {
    pub index: Box<dyn Index>,
    pub report: RecoveryReport,
    /// The logs left in the directory (all records at most `cutoff_lsn`, all sealed).
    pub log_names: Vec<String>,
    /// The next unused log set number.
    pub log_seq_next: u64,
}

/// One proven loss, located.
#[derive(Clone, Debug)]
struct Loss {
    path: PathBuf,
    offset: u64,
    what: String,
}

impl Loss {
    fn text(&self) -> String {
        format!(
            "{} at offset {}: {}",
            self.path.display(),
            self.offset,
            self.what
        )
    }
}

/// One log and what reading it found.
struct Log {
    name: String,
    seq: u64,
    shard: u32,
    stream: LogStream,
    /// Structural damage that ended the valid prefix early: offset and what.
    damage: Option<(u64, String)>,
    /// The stream has no more data records for the merge.
    done: bool,
    /// Where to cut: the end of the last data record kept (applied, or below the start);
    /// marks and seals after it are written anew or dropped.
    kept_end: u64,
    /// A data record of this log was not applied: later records are not kept either.
    past_cutoff: bool,
    evidence: Evidence,
}

impl Log {
    /// Moves to the next data record at or above `start` that is not void, keeping the
    /// records passed over; records structural damage as the end of the log.
    fn next_data(&mut self, start: u64, voids: &Voids) -> Result<Option<u64>> {
        if self.done {
            return Ok(None);
        }
        loop {
            match self.stream.advance() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(Error::Corrupt { offset, what, .. }) => {
                    self.damage = Some((offset, what));
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
            let op = self.stream.op().expect("advance returned true");
            let lsn = self.stream.lsn().expect("advance returned true");
            let end = self.stream.record_end().expect("advance returned true");
            if !op.is_data() {
                continue;
            }
            if lsn < start || voids.contains(lsn) {
                if !self.past_cutoff {
                    self.kept_end = end;
                }
                continue;
            }
            return Ok(Some(lsn));
        }
    }

    /// The end of this log's valid prefix (structural damage included).
    fn valid_end(&self) -> u64 {
        match self.damage {
            Some((offset, _)) => offset,
            None => self.stream.valid_len().unwrap_or(0),
        }
    }

    fn sealed(&self) -> Option<u64> {
        self.stream.seal()
    }
}

/// LSN ranges cut by earlier recoveries, never handed out (`[from, to)`, sorted).
#[derive(Default)]
struct Voids(Vec<(u64, u64)>);

impl Voids {
    fn contains(&self, lsn: u64) -> bool {
        self.0.iter().any(|&(from, to)| (from..to).contains(&lsn))
    }

    /// The first LSN at or after `lsn` that is not void.
    fn skip(&self, mut lsn: u64) -> u64 {
        while let Some(&(_, to)) = self.0.iter().find(|&&(from, to)| (from..to).contains(&lsn)) {
            lsn = to;
        }
        lsn
    }
}

/// A data record held back until its batch is whole.
struct Held {
    log: usize,
    op: Op,
    key: Vec<u8>,
    value: Vec<u8>,
    ts: Option<u64>,
    end: u64,
}

/// Recovers the store in `dir` into a fresh index from `new_index` (see the module doc).
pub fn recover(
    dir: &dyn Dir,
    new_index: &dyn Fn() -> Box<dyn Index>,
    mode: RecoveryMode,
) -> Result<Recovered> {
    recover_from(dir, Base::Checkpoint(new_index), mode)
}

/// Recovery onto an index that already holds every record up to `applied_through` (a
/// persistent engine's own file, `crate::pm`): no checkpoint is loaded, the logs are read,
/// checked and repaired exactly as by [`recover`], and only their records after
/// `applied_through` are applied (redo), up to the cutoff.
pub fn recover_applied(
    dir: &dyn Dir,
    index: Box<dyn Index>,
    applied_through: u64,
    mode: RecoveryMode,
) -> Result<Recovered> {
    recover_from(dir, Base::Applied(index, applied_through), mode)
}

/// Where recovery starts.
enum Base<'a> {
    /// The newest complete checkpoint, loaded into fresh indexes.
    Checkpoint(&'a dyn Fn() -> Box<dyn Index>),
    /// An index holding every record through this LSN.
    Applied(Box<dyn Index>, u64),
}

fn recover_from(dir: &dyn Dir, base: Base<'_>, mode: RecoveryMode) -> Result<Recovered> {
    let began = Instant::now();
    let repair = mode != RecoveryMode::ReadOnly;
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
    let mut checkpoint_path = None;
    let mut last_checkpoint_error = None;
    let mut applied_base = false;
    let no_index = || -> Box<dyn Index> { Box::new(crate::pm::NullIndex) };
    let new_index: &dyn Fn() -> Box<dyn Index> = match base {
        Base::Checkpoint(new_index) => new_index,
        Base::Applied(applied, through) => {
            // As if a checkpoint ended at `through`: later records are redone, and the loop
            // below has no checkpoint to try.
            applied_base = true;
            start_lsn = through + 1;
            starts.clear();
            index = Some(applied);
            &no_index
        }
    };
    for start in starts {
        let name = checkpoint::checkpoint_name(start);
        match load_checkpoint(dir, &name, new_index) {
            Ok((info, fresh)) => {
                report.checkpoint_start_lsn = Some(info.start_lsn);
                report.checkpoint_end_lsn = Some(info.end_lsn);
                report.checkpoint_entry_count = info.entry_count;
                report.checkpoint_bytes = info.bytes;
                start_lsn = info.start_lsn;
                checkpoint_path = Some(dir.path().join(&name));
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
    let from_checkpoint = index.is_some() && !applied_base;
    let index = index.unwrap_or_else(new_index);
    report.checkpoint_elapsed = checkpoint_began.elapsed();

    // 3. The logs, each positioned on its first data record at or above the start.
    let replay_began = Instant::now();
    let mut logs = Vec::new();
    let mut losses = Vec::new();
    for name in &names {
        let Some((seq, shard)) = parse_log_name(name) else {
            continue;
        };
        let (stream, damage) = match LogStream::open(dir, name) {
            Ok(stream) => (stream, None),
            Err(Error::Corrupt { offset, what, .. }) => {
                // A damaged header: the log counts as holding records it cannot show.
                let file = dir.open(name)?;
                let empty = Box::new(crate::file::MemFile::new(file.path(), Vec::new()));
                (LogStream::from_file(empty)?, Some((offset, what)))
            }
            Err(e) => return Err(e),
        };
        report.log_bytes += stream.file_len();
        logs.push(Log {
            name: name.clone(),
            seq,
            shard,
            done: damage.is_some(),
            damage,
            kept_end: if stream.header().is_some() {
                LOG_HEADER_BYTES as u64
            } else {
                0
            },
            stream,
            past_cutoff: false,
            evidence: Evidence::default(),
        });
    }
    report.log_count = logs.len();
    let log_seq_next = logs.iter().map(|l| l.seq + 1).max().unwrap_or(0);
    let mut voids = Voids::default();
    for log in &logs {
        if let Some(h) = log.stream.header() {
            if h.void_from < h.first_lsn {
                voids.0.push((h.void_from, h.first_lsn));
            }
        }
    }
    voids.0.sort_unstable();
    let mut heap = BinaryHeap::with_capacity(logs.len());
    for (i, log) in logs.iter_mut().enumerate() {
        if let Some(lsn) = log.next_data(start_lsn, &voids)? {
            heap.push(Reverse((lsn, i)));
        }
    }
    if !from_checkpoint && !applied_base && checkpoint_files_seen {
        let holds_first = heap.iter().any(|Reverse((lsn, _))| *lsn == 1);
        if !holds_first {
            return Err(last_checkpoint_error.unwrap_or_else(|| Error::Corrupt {
                path: dir.path().to_path_buf(),
                offset: 0,
                what: "no complete checkpoint, and the logs no longer start at LSN 1".into(),
            }));
        }
    }

    // 4. Merge by LSN and replay the gap-free run of whole batches from the start LSN.
    let mut expected = voids.skip(start_lsn);
    let mut gap = false;
    let mut held: Vec<Held> = Vec::new();
    // A temporal index takes its versions in timestamp (= LSN) order: inline.
    let workers = if index.as_temporal().is_some() {
        0
    } else {
        replay::worker_count()
    };
    replay::apply_parallel(&*index, workers, |apply| {
        while let Some(Reverse((lsn, i))) = heap.pop() {
            let next_needed = expected + held.len() as u64;
            if lsn < next_needed && !gap {
                return Err(Error::Corrupt {
                    path: logs[i].stream.path().to_path_buf(),
                    offset: logs[i].stream.record_start().unwrap_or(0),
                    what: format!("LSN {lsn} appears in two logs"),
                });
            }
            if !gap && lsn == next_needed {
                let log = &mut logs[i];
                let record = log.stream.record().expect("the heap holds current records");
                let end = log.stream.record_end().expect("a current record");
                if record.batch_more || !held.is_empty() {
                    held.push(Held {
                        log: i,
                        op: record.op,
                        key: record.key.to_vec(),
                        value: record.value.to_vec(),
                        ts: record.ts,
                        end,
                    });
                    if !record.batch_more {
                        for h in held.drain(..) {
                            match h.op {
                                Op::Put => apply.put_at(&h.key, &h.value, h.ts)?,
                                _ => apply.remove_at(&h.key, h.ts)?,
                            }
                            logs[h.log].kept_end = h.end;
                        }
                        report.records_replayed += lsn + 1 - expected;
                        expected = voids.skip(lsn + 1);
                    }
                } else {
                    match record.op {
                        Op::Put => apply.put_at(record.key, record.value, record.ts)?,
                        _ => apply.remove_at(record.key, record.ts)?,
                    }
                    report.records_replayed += 1;
                    log.kept_end = end;
                    expected = voids.skip(lsn + 1);
                }
            } else {
                gap = true;
                report.records_beyond_cutoff += 1;
                logs[i].past_cutoff = true;
            }
            if let Some(next) = logs[i].next_data(start_lsn, &voids)? {
                heap.push(Reverse((next, i)));
            }
        }
        Ok(())
    })?;
    if !held.is_empty() {
        report.batches_dropped += 1;
        report.records_beyond_cutoff += held.len() as u64;
        for h in held.drain(..) {
            logs[h.log].past_cutoff = true;
        }
    }
    let cutoff = expected - 1;
    report.cutoff_lsn = cutoff;
    report.replay_elapsed = replay_began.elapsed();

    // 5. Weigh what was not applied.
    let mut proof: Option<(u64, Loss)> = None;
    let mut prove = |lsn: u64, loss: Loss| {
        if proof.as_ref().is_none_or(|(p, _)| lsn > *p) {
            proof = Some((lsn, loss));
        }
    };
    if let (Some(end), Some(path)) = (report.checkpoint_end_lsn, &checkpoint_path) {
        prove(
            end,
            Loss {
                path: path.clone(),
                offset: 0,
                what: format!("the logs were durable through LSN {end} when it was published"),
            },
        );
    }
    // Below the replay's start: in the checkpoint, or in a tree that held it (`recover_applied`).
    let mut durable = start_lsn - 1;
    let mut lsn_seen = cutoff.max(report.checkpoint_end_lsn.unwrap_or(0));
    // The last clean close recorded how far the logs were durable (META).
    if let Ok(Some(meta)) = crate::meta::read(dir) {
        if meta.durable_through > 0 {
            lsn_seen = lsn_seen.max(meta.durable_through);
            prove(
                meta.durable_through,
                Loss {
                    path: dir.path().join(crate::meta::META_FILE_NAME),
                    offset: 0,
                    what: format!(
                        "the store closed cleanly with every LSN through {} durable",
                        meta.durable_through
                    ),
                },
            );
        }
    }
    for log in logs.iter_mut() {
        if log.damage.is_none() {
            log.evidence = log.stream.evidence()?;
            if let Some(torn) = log.stream.torn() {
                report
                    .torn_tails
                    .push((log.name.clone(), torn.offset, torn.bytes));
            }
        }
        let path = dir.path().join(&log.name);
        if let Some(mark) = log.stream.mark_max() {
            prove(
                mark,
                Loss {
                    path: path.clone(),
                    offset: 0,
                    what: format!("a mark in this log proves every LSN through {mark} durable"),
                },
            );
        }
        if let (Some(mark), Some(at)) = (log.evidence.mark_max, log.evidence.first_at) {
            prove(
                mark,
                Loss {
                    path: path.clone(),
                    offset: at,
                    what: format!(
                        "a mark after this log's damaged tail proves every LSN through {mark} \
                         durable"
                    ),
                },
            );
        }
        for lsn in [
            log.stream.lsn_max(),
            log.evidence.lsn_max,
            log.sealed().map(|r| r.saturating_sub(1)),
            log.evidence.seal.map(|r| r.saturating_sub(1)),
            log.stream.mark_max(),
            log.evidence.mark_max,
            // A log set made at LSN `first_lsn` saw every LSN below it allocated.
            log.stream.header().map(|h| h.first_lsn.saturating_sub(1)),
        ]
        .into_iter()
        .flatten()
        {
            lsn_seen = lsn_seen.max(lsn);
        }
    }
    if let Some((proven, _)) = &proof {
        durable = durable.max(*proven);
    }
    if let Some((proven, at)) = &proof {
        if cutoff < *proven {
            let tails: Vec<String> = logs
                .iter()
                .filter(|l| l.valid_end() < l.stream.file_len() || l.damage.is_some())
                .map(|l| {
                    let why = match &l.damage {
                        Some((_, what)) => what.as_str(),
                        None => l.stream.tail_reason(),
                    };
                    format!("{} from offset {} ({why})", l.name, l.valid_end())
                })
                .collect();
            let tails = if tails.is_empty() {
                String::new()
            } else {
                format!("; damaged or cut: {}", tails.join(", "))
            };
            losses.push(Loss {
                what: format!(
                    "LSNs {}..={proven} are missing, but {}{tails}",
                    cutoff + 1,
                    at.what
                ),
                ..at.clone()
            });
        }
    }

    let mut sets: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, log) in logs.iter().enumerate() {
        sets.entry(log.seq).or_default().push(i);
    }
    // Data or marks (seals alone are written by recovery into logs that held nothing).
    let holds_records = |l: &Log| {
        l.stream.lsn_max().is_some()
            || l.stream.mark_max().is_some()
            || l.evidence.lsn_max.is_some()
            || l.evidence.mark_max.is_some()
            || l.damage.is_some()
    };
    let newest_with_records = logs
        .iter()
        .filter(|l| holds_records(l))
        .map(|l| l.seq)
        .max();
    let mut covered = vec![false; logs.len()];
    for (&seq, members) in &sets {
        // Every LSN of the set is below its seal, and below the first LSN of any set made
        // after its successor: the next set that took records, which this one was rotated
        // into (a set made by a checkpoint that failed took none). A set is made and rotated
        // into within one checkpoint, so every later set was made after that rotation.
        let successor = logs
            .iter()
            .filter(|l| l.seq > seq && holds_records(l))
            .map(|l| l.seq)
            .min();
        let bound = members
            .iter()
            .filter_map(|&i| logs[i].sealed().or(logs[i].evidence.seal))
            .chain(
                logs.iter()
                    .filter(|l| successor.is_some_and(|s| l.seq > s))
                    .filter_map(|l| l.stream.header().map(|h| h.first_lsn)),
            )
            .min();
        let is_covered = (from_checkpoint || applied_base) && bound.is_some_and(|b| b <= start_lsn);
        let set_holds = members.iter().any(|&i| holds_records(&logs[i]));
        let older = newest_with_records.is_some_and(|n| seq < n);
        for &i in members {
            covered[i] = is_covered;
        }
        let mut set_losses = Vec::new();
        let counts: Vec<u32> = members
            .iter()
            .filter_map(|&i| logs[i].stream.header().map(|h| h.shard_count))
            .collect();
        if let Some(&count) = counts.iter().max() {
            for shard in 0..count {
                if !members.iter().any(|&i| logs[i].shard == shard) && set_holds {
                    set_losses.push(Loss {
                        path: dir.path().join(crate::wal::log_name(seq, shard)),
                        offset: 0,
                        what: format!("this log of a set of {count} is missing"),
                    });
                }
            }
        }
        for &i in members {
            let log = &logs[i];
            let path = dir.path().join(&log.name);
            if let Some((offset, what)) = &log.damage {
                set_losses.push(Loss {
                    path,
                    offset: *offset,
                    what: what.clone(),
                });
            } else if log.stream.header().is_none() {
                if set_holds {
                    set_losses.push(Loss {
                        path,
                        offset: 0,
                        what: "the log has no header, but its set holds records".to_string(),
                    });
                }
            } else if older
                && log.sealed().is_none()
                && (holds_records(log) || log.stream.file_len() > LOG_HEADER_BYTES as u64)
            {
                set_losses.push(Loss {
                    path,
                    offset: log.valid_end(),
                    what: "the log ends without its seal (damaged or cut), but a newer log \
                           set holds records, so its end was durable"
                        .to_string(),
                });
            }
        }
        if is_covered {
            report
                .covered_damage
                .extend(set_losses.iter().map(Loss::text));
        } else {
            losses.extend(set_losses);
        }
    }
    report.losses = losses.iter().map(Loss::text).collect();
    if !losses.is_empty() && mode != RecoveryMode::AcceptLoss {
        let first = &losses[0];
        let more = if losses.len() > 1 {
            format!(
                " (and {} more: {})",
                losses.len() - 1,
                report.losses[1..].join("; ")
            )
        } else {
            String::new()
        };
        return Err(Error::Corrupt {
            path: first.path.clone(),
            offset: first.offset,
            what: format!(
                "{}{more}; acknowledged writes may be lost, so the store is not opened \
                 (`forest check --repair` drops them and lists what)",
                first.what
            ),
        });
    }
    let lsn_next = lsn_seen.max(cutoff) + 1;
    report.lsn_next = lsn_next;
    // Clean: every log of the newest set ends as `Store::close` leaves it (a mark of
    // everything, then the seal), and nothing was cut or accepted as lost.
    report.clean = losses.is_empty()
        && match logs.iter().map(|l| l.seq).max() {
            Some(newest) => logs
                .iter()
                .filter(|l| l.seq == newest)
                .all(|l| l.stream.closed_cleanly() && !l.past_cutoff),
            None => true,
        };

    // A clean close synced everything before its seal.
    report.durable_lsn = if report.clean {
        cutoff
    } else {
        durable.min(cutoff)
    };

    // 6. Cut every log after its last kept data record and seal it. A seal the last run
    // wrote may be only in the page cache (its fsync failed, and the store was reopened
    // without a power loss): those logs are sealed anew, so every seal recovery relies on
    // is durable.
    let run_start = logs
        .iter()
        .filter(|l| l.stream.header().is_some_and(|h| h.opened))
        .map(|l| l.seq)
        .max()
        .unwrap_or(0);
    let mut kept_names = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let Some(header) = log.stream.header() else {
            report
                .log_cuts
                .push((log.name.clone(), 0, log.stream.file_len()));
            if repair && log.damage.is_none() {
                dir.remove(&log.name)?;
                dir_changed = true;
            }
            if log.damage.is_some() {
                kept_names.push(log.name.clone());
            }
            continue;
        };
        kept_names.push(log.name.clone());
        // A covered log needs nothing, but a seal the last run wrote (coverage may rest on
        // it) is made durable all the same.
        if covered[i] && (log.seq < run_start || log.damage.is_some()) {
            continue;
        }
        // Nothing after the kept data but marks and a seal: the log is whole.
        let whole = log.sealed().is_some() && log.stream.torn().is_none() && !log.past_cutoff;
        if whole && log.seq < run_start {
            continue; // sealed by an earlier run, and made durable by the recovery after it
        }
        let len = log.kept_end;
        if !whole && len != log.stream.file_len() {
            report
                .log_cuts
                .push((log.name.clone(), len, log.stream.file_len()));
        }
        if log.sealed().is_none() {
            report.logs_sealed.push(log.name.clone());
        }
        if repair {
            if whole {
                // The last run's seal (and the marks before it) may be only in the page
                // cache: write the same bytes again in place, so the fsync writes them, with
                // no moment where the log has no seal.
                rewrite_tail(dir, &log.name, len)?;
            } else {
                cut_log(dir, &log.name, len)?;
                seal_log(
                    dir,
                    &log.name,
                    header.nonce,
                    log.sealed().unwrap_or(lsn_next),
                )?;
            }
        }
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

/// Writes the bytes of the log `name` from `from` to its end again, in place, and syncs.
fn rewrite_tail(dir: &dyn Dir, name: &str, from: u64) -> Result<()> {
    let mut file = dir.open(name)?;
    let len = file.len()?;
    let mut tail = vec![0; usize::try_from(len - from).expect("a log tail fits in memory")];
    file.read_exact_at(from, &mut tail)?;
    file.write_at(from, &tail)?;
    file.sync()
}

/// Streams the checkpoint `name` into a fresh index; the index is dropped on any error.
///
/// A temporal checkpoint's versions are put at their timestamps, inline and in the file's
/// (timestamp, key) order; its threshold is raised on the index first (META's was applied
/// by `new_index`; a checkpoint never holds less than its own threshold needs, and the
/// higher of the two holds). Into an index that keeps no versions (a store switched away
/// from a temporal engine) they are plain puts and removes, in timestamp order, which leave
/// each key's newest.
fn load_checkpoint(
    dir: &dyn Dir,
    name: &str,
    new_index: &dyn Fn() -> Box<dyn Index>,
) -> Result<(checkpoint::CheckpointInfo, Box<dyn Index>)> {
    let mut stream = CheckpointStream::open(dir, name)?;
    let fresh = new_index();
    let cut = stream.temporal().map(|block| block.cut);
    let workers = match (stream.temporal(), fresh.as_temporal()) {
        (Some(block), Some(temporal)) => {
            if block.threshold > temporal.retention() {
                temporal.set_retention(block.threshold)?;
            }
            0
        }
        _ => replay::worker_count(),
    };
    replay::apply_parallel(&*fresh, workers, |apply| {
        while let Some(entry) = stream.next_version()? {
            match entry.value {
                Some(value) => apply.put_at(entry.key, value, entry.ts)?,
                None => apply.remove_at(entry.key, entry.ts)?,
            }
        }
        Ok(())
    })?;
    if let (Some(cut), Some(temporal)) = (cut, fresh.as_temporal()) {
        // Reads before the crash could reach the cut: with a wall clock set back across the
        // restart, new writes must still stamp above it (review rev-tckpt F1). The logs after
        // the checkpoint hold only later timestamps, so redo is unaffected.
        temporal.advance_clock(cut);
    }
    let info = stream.info().expect("set once the entries end");
    Ok((info, fresh))
}
