//! [`verify`]: checks every file of a store directory and reports what it found, changing
//! nothing (issue 5: "`forest check DIR` verifies every file of a store and prints what it
//! found").
//!
//! Steps: probe the directory's lock (never taken); read the meta file; stream every log to its end
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
//! [`inspect`] (`forest inspect DIR`) reads the same files for a picture rather than a
//! verdict: segment use, pages and pieces per page (forest-llama `inspect`).
//!
//! Choice (issue 17, session 20): the lock is not taken and nothing is written, so both work
//! on a store another process serves and on a read-only copy (`Store::verify_path` and
//! `Store::inspect_path` open the directory read-only: every file is opened without write
//! access, `LOCK` is never created). [`Dir::lock_held`] says whether a store holds the
//! directory ([`VerifyReport::in_use`]): then its files change while they are read (a log
//! appended, a checkpoint pruned, a segment cleaned away between the listing and the read),
//! so a run that finds problems is repeated, up to [`IN_USE_ATTEMPTS`] runs, and the last
//! one is reported: damage stays, a race does not come back every time. The figures are
//! then from a moment ago (the report says so).
//! A store on `bztree-pm:persist=msync` keeps its single writes in the tree file only: its
//! logs are checked from their first LSN, into no index, and the tree file is not opened
//! (an open recovers it, which writes).

use forest_core::{Error, Result};
use forest_llama::checkpoint::{self as map_checkpoint, MapCheckpoint};

use crate::checkpoint::{self, CheckpointInfo, CheckpointStream};

/// Runs of [`verify`] or [`inspect`] on a store in use before problems are reported (module
/// doc).
pub const IN_USE_ATTEMPTS: usize = 3;
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
    /// Another opener held the directory's lock (a store or server is running on it): the
    /// files changed while they were read, and the figures are from a moment ago.
    pub in_use: bool,
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
    /// The table check (forest-llama `inspect`): entries of the checkpoint used whose piece
    /// chain does not decode, and pages as recovered whose chain does not.
    pub table: Vec<String>,
}

impl MapCheck {
    fn problems(&self) -> impl Iterator<Item = String> + '_ {
        self.checkpoints
            .iter()
            .filter_map(|c| c.error.clone())
            .chain(self.segments.iter().filter_map(|s| s.error.clone()))
            .chain(self.errors.iter().cloned())
            .chain(self.table.iter().cloned())
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
    let mut check_start = 0;
    let used = read.iter().position(|(_, _, r)| r.is_ok());
    for (i, (name, bytes, result)) in read.drain(..).enumerate() {
        let (content, error) = match result {
            Ok(c) => {
                if Some(i) == used {
                    check.used = Some(name.clone());
                    check.rssp = c.rssp;
                    check.stable_end = c.stable_end.offset();
                    check_start = c.start.offset();
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
    // Segments, the scan from S and the table check: forest-llama's read-only inspection,
    // which reads every segment record with its decoders (never `Lss::open`, which cuts a
    // torn tail).
    // Its only errors: the directory cannot be listed, or a checkpoint of a newer format
    // (which an open refuses too): reported, not a failed check.
    let inspection = match forest_llama::inspect::inspect(lss) {
        Ok(inspection) => inspection,
        Err(e) => {
            check.errors.push(format!("lss/ cannot be inspected: {e}"));
            return Ok(check);
        }
    };
    check.start_segment = inspection
        .segment_bytes
        .filter(|_| check.used.is_some())
        .map(|b| check_start / b.max(1));
    check.segments = inspection
        .segments
        .iter()
        .map(|u| SegmentCheck {
            name: u.name.clone(),
            bytes: u.bytes,
            records: u.records,
            torn: u.torn.clone(),
            error: u.damage.clone(),
        })
        .collect();
    check.errors.extend(inspection.missing.iter().cloned());
    if check.used.is_some() {
        check.errors.extend(inspection.scan_error.clone());
    }
    check.table = inspection
        .table_problems
        .iter()
        .chain(&inspection.chain_problems)
        .cloned()
        .collect();
    Ok(check)
}

/// Checks the store in `dir` without changing it or taking its lock (see the module doc).
/// `engine` names the engine recovery replays into (`None`: the recorded one, else the
/// default). Errors: the directory cannot be listed; damage is in the report.
pub fn verify(dir: &dyn Dir, engine: Option<&str>) -> Result<VerifyReport> {
    let mut attempt = 1;
    loop {
        let in_use = dir.lock_held()?;
        let mut report = verify_once(dir, engine)?;
        report.in_use = in_use;
        if !in_use || report.problems().is_empty() || attempt >= IN_USE_ATTEMPTS {
            return Ok(report);
        }
        attempt += 1;
    }
}

fn verify_once(dir: &dyn Dir, engine: Option<&str>) -> Result<VerifyReport> {
    let engine = engine.map(canonical_spec).transpose()?;
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
        in_use: false,
    })
}

/// What [`inspect`] found: for a store whose bwtree lives in `DIR/lss/` with map checkpoints,
/// forest-llama's read-only [`Inspection`](forest_llama::inspect::Inspection) of it; for any
/// other store, its files (the data is in its logs and checkpoints).
#[derive(Debug)]
pub struct InspectReport {
    pub engine_recorded: Option<String>,
    pub meta_error: Option<String>,
    /// Logs and checkpoints (full-store files), with their bytes.
    pub files: Vec<(String, u64)>,
    /// `DIR/lss/` exists without map checkpoints: an open discards it and replays the WAL.
    pub lss_scratch: bool,
    pub lss: Option<forest_llama::inspect::Inspection>,
    /// A store held the directory's lock ([`VerifyReport::in_use`]).
    pub in_use: bool,
}

impl InspectReport {
    /// The damage found, one line each.
    pub fn problems(&self) -> Vec<String> {
        self.meta_error
            .iter()
            .cloned()
            .chain(self.lss.iter().flat_map(|l| l.problems()))
            .collect()
    }
}

/// Reads the store in `dir` without changing it or taking its lock, for `forest inspect`
/// (segment use, pages, pieces per page); a store in use is read as [`verify`] reads it.
/// Errors: no store in `dir` (no `META`, log, checkpoint or `lss/`), a file cannot be listed
/// or read; damage is in the report.
pub fn inspect(dir: &dyn Dir) -> Result<InspectReport> {
    let mut attempt = 1;
    loop {
        let in_use = dir.lock_held()?;
        // A file the running store removed between the listing and the read is an error
        // here: another run, as for damage.
        match inspect_once(dir) {
            Ok(mut report) => {
                report.in_use = in_use;
                if !in_use || report.problems().is_empty() || attempt >= IN_USE_ATTEMPTS {
                    return Ok(report);
                }
            }
            Err(e @ Error::Io { .. }) if in_use && attempt < IN_USE_ATTEMPTS => drop(e),
            Err(e) => return Err(e),
        }
        attempt += 1;
    }
}

fn inspect_once(dir: &dyn Dir) -> Result<InspectReport> {
    let store_file = |name: &String| {
        name == meta::META_FILE_NAME
            || parse_log_name(name).is_some()
            || checkpoint::parse_checkpoint_name(name).is_some()
    };
    let lss_path = dir.path().join(crate::llama::LSS_DIR_NAME);
    if !dir.list()?.iter().any(store_file) && !lss_path.is_dir() {
        return Err(Error::InvalidUse(format!(
            "{} holds no forest store (no META, log, checkpoint or lss/)",
            dir.path().display()
        )));
    }
    let (engine_recorded, meta_error) = match meta::read(dir) {
        Ok(m) => (m.map(|m| m.engine), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut files = Vec::new();
    for name in dir.list()? {
        if parse_log_name(&name).is_some() || checkpoint::parse_checkpoint_name(&name).is_some() {
            let bytes = dir.open(&name)?.len()?;
            files.push((name, bytes));
        }
    }
    files.sort();
    let (lss, lss_scratch) = if crate::llama::map_checkpointed(dir)? {
        let lss = dir.subdir(crate::llama::LSS_DIR_NAME)?;
        (Some(forest_llama::inspect::inspect(&*lss)?), false)
    } else {
        (None, lss_path.is_dir())
    };
    Ok(InspectReport {
        engine_recorded,
        meta_error,
        files,
        lss_scratch,
        lss,
        in_use: false,
    })
}
