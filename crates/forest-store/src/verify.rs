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
//! Choice: the lock is taken exclusively, as an open does, and a directory whose lock is held
//! (a running server or store) is refused at once with the lock error: a live store appends
//! to and cuts its logs, so a check beside it would report in-flight writes as torn tails.
//! Taking the lock creates the empty `LOCK` file if it is missing; nothing else is written.
//! A store on `bztree-pm:persist=msync` keeps its single writes in the tree file only: its
//! logs are checked from their first LSN, into no index, and the tree file is not opened
//! (an open recovers it, which writes).

use forest_core::{Error, Result};

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
    let recovery = match built {
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
    })
}
