//! [`verify`]: checks every file of a store directory and reports what it found, changing
//! nothing (issue 5: "`forest check DIR` verifies every file of a store and prints what it
//! found").
//!
//! Steps: take the directory's lock; read the meta file; stream every log to its end
//! (header, records, LSN order, torn tail or corruption) and every published checkpoint
//! (header, every entry, trailer), each on its own so that one damaged file does not hide
//! the others; then run recovery in [`RecoveryMode::ReadOnly`] to report what an open would
//! recover (checkpoint chosen, records replayed, cutoff, keys) and what it would repair.
//!
//! A bwtree store with map checkpoints in `DIR/lss/` (issue 17 Recovery; Bw-tree §V-A: the
//! DC's checkpoint bounds the TC's redo start): [`check_map`] reads the map checkpoints and
//! every segment record with forest-llama's decoders, never opening the LSS (its open cuts a
//! torn tail), and the logs are replayed from the used checkpoint's RSSP into no index, as
//! an open redoes them: logs below the RSSP are deleted by design, not lost.
//!
//! Choice: the lock is taken exclusively, as an open does, and a directory whose lock is held
//! (a running server or store) is refused at once with the lock error: a live store appends
//! to and cuts its logs, so a check beside it would report in-flight writes as torn tails.
//! Taking the lock creates the empty `LOCK` file if it is missing; nothing else is written.
//! A store on `bztree-pm:persist=msync` keeps its single writes in the tree file only: its
//! logs are checked from their first LSN, into no index, and the tree file is not opened
//! (an open recovers it, which writes).

use forest_core::{Error, Result};
use forest_llama::checkpoint::{self as map_checkpoint, MapCheckpoint};
use forest_llama::lss::{record as lss_record, segment, LssAddress};

use crate::checkpoint::{self, CheckpointInfo, CheckpointStream};
use crate::file::Dir;
use crate::meta;
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::store::{canonical_spec, new_engine, spec_form, ENGINE_DEFAULT};
use crate::wal::record::TornTail;
use crate::wal::{parse_log_name, LogHeader, LogStream};

/// What [`verify`] found in one log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogCheck {
    pub name: String,
    pub bytes: u64,
    /// `None`: no whole header (empty, or torn at creation).
    pub header: Option<LogHeader>,
    /// Valid records read (up to the damage, if any).
    pub record_count: u64,
    pub lsn_first: Option<u64>,
    pub lsn_last: Option<u64>,
    pub torn: Option<TornTail>,
    /// Corruption or a read error.
    pub error: Option<String>,
}

/// What [`verify`] found in one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointCheck {
    pub name: String,
    pub bytes: u64,
    /// Set when the checkpoint is complete.
    pub info: Option<CheckpointInfo>,
    /// A temporal checkpoint's retention threshold `T` and cut (set when it is complete).
    pub temporal: Option<checkpoint::TemporalBlock>,
    pub error: Option<String>,
}

/// Everything [`verify`] found.
#[derive(Clone, Debug)]
pub struct VerifyReport {
    /// The engine the meta file records, if any.
    pub engine_recorded: Option<String>,
    /// A temporal store's retention threshold `T` in the meta file (0: none).
    pub retention_recorded: u64,
    /// The engine recovery ran with (named, recorded or the default).
    pub engine: String,
    /// The engine named differs from the recorded one: an open would refuse it without
    /// `switch_engine`.
    pub engine_conflict: Option<String>,
    pub meta_error: Option<String>,
    pub logs: Vec<LogCheck>,
    pub checkpoints: Vec<CheckpointCheck>,
    /// Files recovery would delete or keeps aside (`.tmp`, `.corrupt`), and unknown files.
    pub other_files: Vec<String>,
    /// What an open would recover and repair, or why it would fail.
    pub recovery: std::result::Result<RecoveryReport, String>,
    /// Set when the store's bwtree recovers from map checkpoints in `DIR/lss/`: then the
    /// logs are replayed from the checkpoint's RSSP into no index (the tree is in the LSS),
    /// and logs below the RSSP are not missing.
    pub map: Option<MapCheck>,
}

impl VerifyReport {
    /// The damage found: one line per problem. Torn tails are not damage (a crash leaves
    /// them and recovery cuts them); damaged checkpoints, damaged logs, a damaged meta file,
    /// `.corrupt` files kept from an earlier recovery and a failing recovery are.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.meta_error {
            out.push(e.clone());
        }
        if let Some(c) = &self.engine_conflict {
            out.push(c.clone());
        }
        out.extend(self.logs.iter().filter_map(|l| l.error.clone()));
        out.extend(self.checkpoints.iter().filter_map(|c| c.error.clone()));
        if let Some(map) = &self.map {
            out.extend(map.problems());
        }
        for name in &self.other_files {
            if name.ends_with(".corrupt") {
                out.push(format!(
                    "{name}: damaged checkpoint kept from an earlier recovery"
                ));
            }
        }
        if let Err(e) = &self.recovery {
            out.push(format!("recovery would fail: {e}"));
        }
        out
    }
}

fn check_log(dir: &dyn Dir, name: &str) -> LogCheck {
    let mut check = LogCheck {
        name: name.to_string(),
        bytes: 0,
        header: None,
        record_count: 0,
        lsn_first: None,
        lsn_last: None,
        torn: None,
        error: None,
    };
    let mut stream = match LogStream::open(dir, name) {
        Ok(stream) => stream,
        Err(e) => {
            check.error = Some(e.to_string());
            return check;
        }
    };
    check.bytes = stream.file_len();
    check.header = stream.header();
    loop {
        match stream.advance() {
            Ok(true) => {
                if stream.op().is_some_and(|op| op.is_data()) {
                    let lsn = stream.lsn();
                    check.lsn_first = check.lsn_first.or(lsn);
                    check.lsn_last = lsn;
                }
            }
            Ok(false) => break,
            Err(e) => {
                check.error = Some(e.to_string());
                break;
            }
        }
    }
    check.record_count = stream.record_count();
    check.torn = stream.torn();
    check
}

fn check_checkpoint(dir: &dyn Dir, name: &str) -> CheckpointCheck {
    let bytes = dir.open(name).and_then(|f| f.len()).unwrap_or_default();
    let result = CheckpointStream::open(dir, name)
        .and_then(|mut s| s.check_all().map(|info| (info, s.temporal())));
    CheckpointCheck {
        name: name.to_string(),
        bytes,
        info: result.as_ref().ok().map(|r| r.0),
        temporal: result.as_ref().ok().and_then(|r| r.1),
        error: result.err().map(|e| e.to_string()),
    }
}

/// One map checkpoint file (`DIR/lss/map-<seq>`) as [`verify`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapCheckpointCheck {
    pub name: String,
    pub bytes: u64,
    /// Set when it decodes whole: (RSSP, S, T, pages).
    pub content: Option<MapCheckpointInfo>,
    /// Damage, with what recovery does instead (the older kept one, or nothing).
    pub error: Option<String>,
}

/// What a valid map checkpoint holds, in short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapCheckpointInfo {
    pub sequence: u64,
    pub rssp: u64,
    /// S: the LSS scan starts here.
    pub start: u64,
    /// T: every record below it was stable when the checkpoint was published.
    pub stable_end: u64,
    pub pages: usize,
}

/// One LSS segment file as [`verify`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentCheck {
    pub name: String,
    pub bytes: u64,
    /// Records whose crc matched.
    pub records: u64,
    /// A torn tail at or above T in the last segment: (file offset, bytes, why). Recovery
    /// cuts it; not damage.
    pub torn: Option<(u64, u64, String)>,
    /// The first bad record (segment, offset, PID) or a bad header.
    pub error: Option<String>,
}

/// The LSS side of a store whose bwtree recovers from map checkpoints (issue 17).
#[derive(Clone, Debug, Default)]
pub struct MapCheck {
    /// Newest first.
    pub checkpoints: Vec<MapCheckpointCheck>,
    /// The checkpoint recovery would start from.
    pub used: Option<String>,
    /// Its RSSP: the WAL is checked from here (the logs below were deleted by design).
    pub rssp: u64,
    /// Its T (0: none).
    pub stable_end: u64,
    /// The segment holding its S (recovery's scan reads every segment from it on).
    pub start_segment: Option<u64>,
    pub segments: Vec<SegmentCheck>,
    /// Other problems: a missing segment, `.corrupt` map checkpoints, no valid checkpoint.
    pub errors: Vec<String>,
    /// `.tmp` map checkpoints an open deletes.
    pub tmp: Vec<String>,
}

impl MapCheck {
    fn problems(&self) -> impl Iterator<Item = String> + '_ {
        self.checkpoints
            .iter()
            .filter_map(|c| c.error.clone())
            .chain(self.segments.iter().filter_map(|s| s.error.clone()))
            .chain(self.errors.iter().cloned())
    }
}

/// Reads a map checkpoint with forest-llama's decoder ([`map_checkpoint::decode`]).
fn read_map_checkpoint(dir: &dyn Dir, name: &str, sequence: u64) -> (u64, Result<MapCheckpoint>) {
    let read = || -> Result<(u64, Vec<u8>, std::path::PathBuf)> {
        let file = dir.open(name)?;
        let mut data = Vec::new();
        file.read_all(&mut data)?;
        Ok((data.len() as u64, data, file.path().to_path_buf()))
    };
    match read() {
        Ok((bytes, data, path)) => {
            let decoded = map_checkpoint::decode(&path, &data).and_then(|c| {
                if c.sequence == sequence {
                    Ok(c)
                } else {
                    Err(Error::Corrupt {
                        path,
                        offset: 0,
                        what: format!("sequence {} differs from the name's {sequence}", c.sequence),
                    })
                }
            });
            (bytes, decoded)
        }
        Err(e) => (0, Err(e)),
    }
}

/// Checks one segment's header and every record's crc with forest-llama's decoders
/// ([`segment::decode_header`], [`lss_record::decode`]). `last`: the log's last segment,
/// where a bad record at or above `stable_end` is a torn tail recovery cuts.
fn check_segment(
    dir: &dyn Dir,
    name: &str,
    sequence: u64,
    last: bool,
    stable_end: u64,
) -> SegmentCheck {
    let mut check = SegmentCheck {
        name: name.to_string(),
        bytes: 0,
        records: 0,
        torn: None,
        error: None,
    };
    let mut data = Vec::new();
    if let Err(e) = dir.open(name).and_then(|f| f.read_all(&mut data)) {
        check.error = Some(format!("{name}: {e}"));
        return check;
    }
    check.bytes = data.len() as u64;
    let header = match segment::decode_header(&data) {
        Ok(h) => h,
        // A creation a crash cut off (header only): an open removes it.
        Err(why) if last && check.bytes <= segment::SEGMENT_HEADER_BYTES => {
            check.torn = Some((0, check.bytes, format!("segment creation cut off: {why}")));
            return check;
        }
        Err(why) => {
            check.error = Some(format!("{name}: offset 0: {why}"));
            return check;
        }
    };
    if header.sequence != sequence {
        check.error = Some(format!("{name}: header names sequence {}", header.sequence));
        return check;
    }
    let segment_bytes = header.segment_bytes;
    let segment_start = sequence.saturating_mul(segment_bytes);
    let len = check.bytes.min(segment_bytes);
    let mut at = segment::SEGMENT_HEADER_BYTES;
    while at < len {
        let address = LssAddress::current(segment_start + at);
        match lss_record::decode(address, &data[at as usize..len as usize]) {
            Ok(record) => {
                check.records += 1;
                at += record.len() as u64;
            }
            Err(e) => {
                let what = e.to_error(&dir.path().join(name), at, address).to_string();
                if last && segment_start + at >= stable_end {
                    check.torn = Some((at, check.bytes - at, what));
                } else {
                    check.error = Some(format!(
                        "{name}: first bad record at offset {at} (below T {stable_end} or \
                         before the last segment): {what}"
                    ));
                }
                return check;
            }
        }
    }
    let end = segment_start + at;
    // A full segment's end is the next one's start, whose header holds no record.
    let end_records = if end.is_multiple_of(segment_bytes) {
        end + segment::SEGMENT_HEADER_BYTES
    } else {
        end
    };
    if last && end_records < stable_end {
        check.error = Some(format!(
            "{name}: the LSS ends at offset {at} (address {end}), below T {stable_end} that the \
             map checkpoint relies on"
        ));
        return check;
    }
    if last && check.bytes > len {
        check.torn = Some((
            len,
            check.bytes - len,
            "bytes past the segment's size".into(),
        ));
    }
    check
}

/// Checks `DIR/lss/`: its map checkpoints (newest valid one used; a damaged one named, with
/// whether the older is usable) and every segment record up to the stable end.
fn check_map(lss: &dyn Dir) -> Result<MapCheck> {
    let names = lss.list()?;
    let mut check = MapCheck {
        tmp: names
            .iter()
            .filter(|n| n.starts_with("map-") && n.ends_with(".tmp"))
            .cloned()
            .collect(),
        ..MapCheck::default()
    };
    let mut published: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| map_checkpoint::parse_map_file_name(n).map(|s| (s, n)))
        .collect();
    published.sort_unstable_by_key(|&(s, _)| std::cmp::Reverse(s));
    let mut read: Vec<(String, u64, Result<MapCheckpoint>)> = published
        .iter()
        .map(|&(s, n)| {
            let (bytes, r) = read_map_checkpoint(lss, n, s);
            (n.clone(), bytes, r)
        })
        .collect();
    // Recovery reads the newest valid one; the older kept one is its fallback.
    let mut start = None;
    let used = read.iter().position(|(_, _, r)| r.is_ok());
    for (i, (name, bytes, result)) in read.drain(..).enumerate() {
        let (content, error) = match result {
            Ok(c) => {
                if Some(i) == used {
                    check.used = Some(name.clone());
                    check.rssp = c.rssp;
                    check.stable_end = c.stable_end.offset();
                    start = Some(c.start.offset());
                }
                let info = MapCheckpointInfo {
                    sequence: c.sequence,
                    rssp: c.rssp,
                    start: c.start.offset(),
                    stable_end: c.stable_end.offset(),
                    pages: c.entries.len(),
                };
                (Some(info), None)
            }
            Err(e) => {
                let fallback = match used {
                    Some(u) if u > i => format!(
                        "recovery falls back to the older {}, which is valid",
                        published[u].1
                    ),
                    Some(u) => format!(
                        "recovery uses the newer {}; an open sets this one aside",
                        published[u].1
                    ),
                    _ if i + 1 < published.len() => {
                        "the older checkpoint is damaged too: recovery fails".to_string()
                    }
                    _ => "no older checkpoint is usable".to_string(),
                };
                (
                    None,
                    Some(format!("map checkpoint {name}: DAMAGED: {e}; {fallback}")),
                )
            }
        };
        check.checkpoints.push(MapCheckpointCheck {
            name,
            bytes,
            content,
            error,
        });
    }
    for name in &names {
        if name
            .strip_suffix(".corrupt")
            .is_some_and(|n| map_checkpoint::parse_map_file_name(n).is_some())
        {
            check.errors.push(format!(
                "lss/{name}: damaged map checkpoint kept from an earlier recovery"
            ));
        }
    }
    if check.used.is_none() {
        check
            .errors
            .push("no valid map checkpoint: an open would fail".to_string());
    }
    let mut sequences: Vec<u64> = names
        .iter()
        .filter_map(|n| segment::parse_segment_file_name(n))
        .collect();
    sequences.sort_unstable();
    // S's segment: segment sizes are in every segment header (the first readable one).
    check.start_segment = start.and_then(|s| {
        sequences.iter().find_map(|&q| {
            let mut head = vec![0u8; segment::SEGMENT_HEADER_BYTES as usize];
            let file = lss.open(&segment::segment_file_name(q)).ok()?;
            file.read_exact_at(0, &mut head).ok()?;
            let h = segment::decode_header(&head).ok()?;
            Some(s / h.segment_bytes.max(1))
        })
    });
    let mut sequences: Vec<u64> = names
        .iter()
        .filter_map(|n| segment::parse_segment_file_name(n))
        .collect();
    sequences.sort_unstable();
    // The cleaner removes segments below the kept checkpoints' S; from the segment of the
    // used one's S on, recovery's scan reads every segment, so one missing there is damage.
    let scan_from = check.start_segment;
    if scan_from.is_some() && sequences.is_empty() {
        check
            .errors
            .push("no LSS segment in lss/: the map checkpoint's pages are gone".to_string());
    }
    for (i, &sequence) in sequences.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|p| sequences.get(p)).copied();
        if let Some(missing) =
            scan_from.filter(|&s| s < sequence && prev.is_none_or(|p| p + 1 < sequence))
        {
            let from = prev.map_or(missing, |p| (p + 1).max(missing));
            check.errors.push(format!(
                "LSS segments {} to {} missing (recovery scans from segment {missing}, the \
                 map checkpoint's S)",
                segment::segment_file_name(from),
                segment::segment_file_name(sequence - 1),
            ));
        }
        let last = i + 1 == sequences.len();
        let name = segment::segment_file_name(sequence);
        check
            .segments
            .push(check_segment(lss, &name, sequence, last, check.stable_end));
    }
    Ok(check)
}

/// Checks the store in `dir` without changing it (see the module doc). `engine` names the
/// engine recovery replays into (`None`: the recorded one, else the default). Errors: the
/// directory's lock is held, or the directory cannot be listed; damage is in the report.
pub fn verify(dir: &dyn Dir, engine: Option<&str>) -> Result<VerifyReport> {
    let engine = engine.map(canonical_spec).transpose()?;
    let _lock = dir.lock()?;
    let (engine_recorded, retention_recorded, meta_error) = match meta::read(dir) {
        Ok(m) => (
            m.as_ref().map(|m| m.engine.clone()),
            m.map_or(0, |m| m.retention),
            None,
        ),
        Err(e) => (None, 0, Some(e.to_string())),
    };
    let engine_conflict = match (&engine, &engine_recorded) {
        (Some(named), Some(recorded)) if *named != spec_form(recorded) => Some(format!(
            "META records engine `{}`; `{named}` was named: an open needs --switch-engine",
            spec_form(recorded)
        )),
        _ => None,
    };
    let engine = engine
        .or_else(|| engine_recorded.clone())
        .unwrap_or_else(|| ENGINE_DEFAULT.to_string());
    let names = dir.list()?;
    let mut logs = Vec::new();
    let mut checkpoints = Vec::new();
    let mut other_files = Vec::new();
    for name in &names {
        if parse_log_name(name).is_some() {
            logs.push(check_log(dir, name));
        } else if checkpoint::parse_checkpoint_name(name).is_some() {
            checkpoints.push(check_checkpoint(dir, name));
        } else if name != crate::file::LOCK_FILE_NAME && name != meta::META_FILE_NAME {
            other_files.push(name.clone());
        }
    }
    // A bztree-pm spec is not built (its tree is a heap-sized scratch file); recovery checks
    // the logs into the default memory engine instead, which holds the same keys.
    let pm = crate::pm::is_pm(&engine);
    let replay_engine = if pm { ENGINE_DEFAULT } else { engine.as_str() };
    let built = if pm {
        Ok(())
    } else {
        new_engine(&engine).map(drop)
    };
    let map = if crate::llama::map_checkpointed(dir)? {
        Some(check_map(&*dir.subdir(crate::llama::LSS_DIR_NAME)?)?)
    } else {
        None
    };
    let recovery = match built {
        // The tree is rebuilt from the LSS; the logs are redone from the RSSP on (what an
        // open redoes): check them, applying nothing.
        Ok(_) if map.is_some() => {
            match map.as_ref().and_then(|m| m.used.as_ref().map(|_| m.rssp)) {
                Some(rssp) => recovery::recover_applied(
                    dir,
                    Box::new(crate::pm::NullIndex),
                    rssp.saturating_sub(1),
                    RecoveryMode::ReadOnly,
                )
                .map(|r| r.report)
                .map_err(|e| e.to_string()),
                None => Err("no valid map checkpoint in lss/".to_string()),
            }
        }
        // The tree file holds the single writes of msync (`crate::pm`); the logs hold its
        // batches from their first LSN on: check them, applying nothing.
        Ok(_) if crate::pm::is_msync(&engine) => {
            let first = logs
                .iter()
                .filter_map(|l| l.header.map(|h| h.first_lsn))
                .min()
                .unwrap_or(1);
            recovery::recover_applied(
                dir,
                Box::new(crate::pm::NullIndex),
                first.saturating_sub(1),
                RecoveryMode::ReadOnly,
            )
            .map(|r| r.report)
            .map_err(|e| e.to_string())
        }
        Ok(_) => recovery::recover(
            dir,
            &|| new_engine(replay_engine).expect("the engine spec was checked"),
            RecoveryMode::ReadOnly,
        )
        .map(|r| r.report)
        .map_err(|e| e.to_string()),
        Err(e @ Error::UnknownEngine { .. }) => Err(format!("{e} (name one with --engine)")),
        Err(e) => Err(e.to_string()),
    };
    Ok(VerifyReport {
        engine_recorded,
        retention_recorded,
        engine,
        engine_conflict,
        meta_error,
        logs,
        checkpoints,
        other_files,
        recovery,
        map,
    })
}
