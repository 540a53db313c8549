//! A store whose index is the persistent BzTree (`bztree-pm`, issue 16 "Integration"): the
//! engine's file, [`STORE_FILE_NAME`] in the store's directory, is the data, and the store
//! keeps its logs for what the file alone cannot do. The durability model, per persist mode:
//!
//! - `persist=msync`: every PMwCAS flush is an msync, so a single write (insert, upsert,
//!   update, remove, read-modify-write, a pipeline's writes) is durable when the tree's
//!   operation returns: it takes no LSN, writes no log record and is acknowledged at once in
//!   every durability mode. An atomic batch of two records or more cannot rely on the tree (a
//!   crash between its PMwCASes would leave part of it), so it is a redo record: batches run
//!   one at a time (`Pm::batch`); each is logged as one unit and the log is synced *before*
//!   the tree changes; the tree's header word `store pending` names it while it applies, and
//!   `store LSN` is set to its LSN once it is whole, still under its keys' stripes, so no
//!   later write to its keys can precede that mark. An open redoes the logged batches after
//!   `store LSN` (at most the one that was applying), which is idempotent, and cannot undo a
//!   later write. A batch the tree refuses part way (a full heap) is undone and marked done,
//!   so it is whole or absent and never redone; a panic there (an msync that failed) fails the
//!   store, and the reopen's redo completes it. Cost per batch: one log fsync, one msync per record and two of the header,
//!   and batches do not overlap one another (single writes do). A checkpoint writes no
//!   snapshot: it rotates the logs, records the rotation's LSN as `store LSN` and deletes
//!   every older log and checkpoint file (the tree holds all of it).
//! - `persist=clwb`: the logs and checkpoints stay the truth, as for a memory engine (each
//!   write applied and logged under its shard's lock, acknowledged by the durability mode);
//!   the file is the index, and spares the rebuild when it can be trusted: a reopen on the
//!   boot the file was last opened on (header boot id = the kernel's, so the page cache kept
//!   every store) with no batch marked as applying needs only the tree's descriptor recovery
//!   and a read of the logs that applies nothing (every logged record was applied before it
//!   could reach a log). The tree may also hold writes never logged (applied, killed before
//!   the flush); such an open is unclean and takes a checkpoint of the tree before taking
//!   writes, so that a later rebuild from checkpoint + logs reproduces what readers saw. A
//!   new boot (lines may be lost) or a batch marked as applying (part of it may be in the
//!   tree, and its log record may not have been written) rebuilds the file from checkpoint +
//!   logs, as a memory engine rebuilds its index. Whether to trust the file is decided from
//!   its header words read plainly (the open stamps this boot's id): a file not trusted, or
//!   one that fails to open, is removed before anything else and rebuilt, so an open cut
//!   short never leaves a stale file that looks current. A rebuild marks the file as
//!   rebuilding until it is complete, so a rebuild cut short is never trusted. A write the
//!   tree refuses after it was logged (a full heap) fails the store with that error and
//!   marks the file to be rebuilt.
//!
//! Engine switches: leaving `bztree-pm:persist=msync` first exports the tree into a
//! checkpoint (the logs hold only its batches); leaving either mode, or coming to it from
//! another spec, removes the file, which is then rebuilt from checkpoint + logs. A missing or
//! empty clwb file is rebuilt the same way; a missing or empty msync file is refused as
//! corrupt (it held the only copy of the single writes). With META missing or unreadable, an
//! msync file (its header says so) is continued by an msync spec and refused for any other. Power loss: the file is mapped, so the simulated disk
//! (`file::SimDir`) does not cover it; forest-bztree's `sim` persister tests cover the tree's
//! own crash states, and nothing covers the two together.

use std::path::{Path, PathBuf};

use forest_core::{Error, Index, IndexStats, Order, Result, Visitor};
use forest_engines::{EngineSpec, StoreTree, STORE_FILE_NAME};
use parking_lot::Mutex;

use crate::checkpoint;
use crate::file::Dir;
use crate::recovery::{self, Recovered, RecoveryMode};

/// The registry name of the persistent BzTree.
pub const ENGINE_NAME: &str = "bztree-pm";

/// `store pending` of a file being rebuilt from checkpoint + logs: a rebuild cut short
/// leaves it, and the next open rebuilds again rather than trust a partial tree.
const REBUILDING: u64 = u64::MAX;

/// The tree of a store open on `bztree-pm` (see the module doc).
#[derive(Debug)]
pub(crate) struct Pm {
    pub(crate) tree: StoreTree,
    /// `persist=msync`: single writes skip the logs.
    pub(crate) msync: bool,
    /// Held while an atomic batch of two records or more is logged and applied (msync) or
    /// applied (clwb): one `store pending` word names it.
    pub(crate) batch: Mutex<()>,
}

/// Whether `spec` (canonical) names the persistent BzTree.
pub(crate) fn is_pm(spec: &str) -> bool {
    EngineSpec::parse(spec).is_ok_and(|s| s.name == ENGINE_NAME)
}

/// Whether `spec` (canonical) names the persistent BzTree with `persist=msync`.
pub(crate) fn is_msync(spec: &str) -> bool {
    EngineSpec::parse(spec).is_ok_and(|s| {
        s.name == ENGINE_NAME && s.params.iter().any(|(k, v)| k == "persist" && v == "msync")
    })
}

/// The tree file of the store in `dir`, which must be a directory of the file system.
fn file_path(dir: &dyn Dir) -> Result<PathBuf> {
    let path = dir.path();
    if !path.is_dir() {
        return Err(Error::Config(format!(
            "engine {ENGINE_NAME} keeps its tree in a file of the store's directory, and {} \
             is not a directory of the file system",
            path.display()
        )));
    }
    Ok(path.join(STORE_FILE_NAME))
}

fn holds_data(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
}

fn remove_file(dir: &dyn Dir, path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => dir.sync_dir(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            op: "remove",
            source,
        }),
    }
}

fn spec_of(spec: &str) -> Result<EngineSpec> {
    EngineSpec::parse(spec)
}

/// Readies `dir` for an open with `engine` when its META records `recorded` (both
/// canonical), before recovery: a switch away from msync exports the tree into a checkpoint;
/// a tree file that will not be continued is removed (module doc, "Engine switches").
pub(crate) fn prepare(
    dir: &dyn Dir,
    recorded: Option<&str>,
    engine: &str,
    mode: RecoveryMode,
) -> Result<()> {
    let switching = recorded.is_some_and(|r| r != engine);
    if switching && recorded.is_some_and(is_msync) {
        export(dir, recorded.unwrap_or_default(), mode)?;
    }
    let leaving = switching && recorded.is_some_and(is_pm);
    let stale = is_pm(engine) && recorded != Some(engine);
    if leaving || stale {
        let path = dir.path().join(STORE_FILE_NAME);
        if path.exists() {
            remove_file(dir, &path)?;
        }
    }
    Ok(())
}

/// Writes the msync tree of `spec` (with its logged batches redone) as a checkpoint that a
/// rebuild in another engine loads, then removes the file.
fn export(dir: &dyn Dir, spec: &str, mode: RecoveryMode) -> Result<()> {
    let path = file_path(dir)?;
    if !holds_data(&path) {
        return Err(missing_msync_file(&path));
    }
    let tree = StoreTree::open(&spec_of(spec)?, &path)?;
    if tree.store_pending() == REBUILDING {
        // A rebuild from checkpoint + logs cut short: those are still the whole truth.
        drop(tree);
        return remove_file(dir, &path);
    }
    let applied = tree.store_lsn();
    let recovered = recovery::recover_applied(dir, Box::new(tree.clone()), applied, mode)?;
    let start = recovered.report.lsn_next;
    drop(recovered);
    checkpoint::write(dir, &tree, start, || start - 1)?;
    checkpoint::publish(dir, start)?;
    drop(tree);
    remove_file(dir, &path)
}

/// Recovers a store on `engine` (a `bztree-pm` spec); `continuing`: META records this very
/// spec. Returns what recovery found, the tree, and whether the open must take a checkpoint
/// before writes (the module doc says when).
pub(crate) fn recover(
    dir: &dyn Dir,
    engine: &str,
    continuing: bool,
    mode: RecoveryMode,
) -> Result<(Recovered, Pm, bool)> {
    let path = file_path(dir)?;
    let spec = spec_of(engine)?;
    let msync = is_msync(engine);
    let pm = |tree: StoreTree| Pm {
        tree,
        msync,
        batch: Mutex::new(()),
    };
    if continuing && msync && !holds_data(&path) {
        // The file is the only copy of the single writes: never rebuilt from the logs.
        return Err(missing_msync_file(&path));
    }
    if continuing && msync {
        let tree = StoreTree::open(&spec, &path)?;
        if tree.store_pending() != REBUILDING {
            let applied = tree.store_lsn();
            let recovered = recovery::recover_applied(dir, Box::new(tree.clone()), applied, mode)?;
            tree.set_store_lsn(recovered.report.cutoff_lsn.max(applied));
            tree.set_store_pending(0);
            return Ok((recovered, pm(tree), false));
        }
        drop(tree);
    } else if continuing && holds_data(&path) {
        // clwb: the header is read before the open, which stamps this boot's id into it.
        let trusted = forest_engines::peek_header(&path)?
            .is_some_and(|h| h.magic && h.same_boot && h.store_pending == 0);
        if trusted {
            match StoreTree::open(&spec, &path) {
                Ok(tree) if tree.same_boot() && tree.store_pending() == 0 => {
                    let mut recovered = recovery::recover(dir, &|| Box::new(NullIndex), mode)?;
                    recovered.report.keys_recovered = tree.stats().key_count;
                    recovered.index = Box::new(tree.clone());
                    let unclean = !recovered.report.clean;
                    return Ok((recovered, pm(tree), unclean));
                }
                Ok(_) => {}
                // Another opener holds it: not a damaged file, and not ours to remove.
                Err(e @ Error::Io { op: "lock", .. }) => return Err(e),
                // Damaged (zeroed by a power loss, say): the logs are the truth, rebuild.
                Err(_) => {}
            }
        }
    }
    if !msync {
        // Removed before anything else: an open or rebuild cut short from here on finds no
        // file, never a stale one that this boot's open stamped.
        remove_file(dir, &path)?;
    }
    let (recovered, tree) = rebuild(dir, &spec, &path, mode)?;
    dir.sync_dir()?;
    tree.set_store_lsn(recovered.report.cutoff_lsn);
    tree.set_store_pending(0);
    Ok((recovered, pm(tree), false))
}

fn missing_msync_file(path: &Path) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        what: format!(
            "the store's META names {ENGINE_NAME} with persist=msync, whose tree file holds \
             the only copy of its single writes, and the file is missing or empty"
        ),
    }
}

/// The spec to take as recorded when META is unreadable or absent (`fallback`: what the
/// open would take otherwise): a tree file of persist=msync holds the only copy of its single
/// writes, so it is continued by an msync `engine` and refused for any other (never removed
/// as stale).
pub(crate) fn unrecorded(
    dir: &dyn Dir,
    engine: &str,
    fallback: Option<String>,
) -> Result<Option<String>> {
    if !dir.path().is_dir() {
        return Ok(fallback);
    }
    let path = dir.path().join(STORE_FILE_NAME);
    let Some(header) = forest_engines::peek_header(&path)? else {
        return Ok(fallback);
    };
    if !header.magic || header.persist != "msync" {
        return Ok(fallback);
    }
    if is_msync(engine) {
        return Ok(Some(engine.to_string()));
    }
    Err(Error::Config(format!(
        "the store's META is missing or unreadable and {} is a {ENGINE_NAME} tree of \
         persist=msync (the only copy of its single writes): open it with a {ENGINE_NAME} \
         persist=msync engine spec, not {engine}",
        path.display()
    )))
}

/// Recovery from checkpoint + logs into a new file (each index recovery asks for is a new
/// file: a damaged checkpoint's half-loaded one is replaced).
fn rebuild(
    dir: &dyn Dir,
    spec: &EngineSpec,
    path: &Path,
    mode: RecoveryMode,
) -> Result<(Recovered, StoreTree)> {
    let made: Mutex<Option<StoreTree>> = Mutex::new(None);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let fresh = || -> Box<dyn Index> {
        // The previous attempt's tree (if any) was dropped by recovery; let go of ours too.
        made.lock().take();
        let opened = remove_file(dir, path).and_then(|()| StoreTree::open(spec, path));
        match opened {
            Ok(tree) => {
                tree.set_store_pending(REBUILDING);
                *made.lock() = Some(tree.clone());
                Box::new(tree)
            }
            Err(e) => {
                let mut first = failed.lock();
                if first.is_none() {
                    *first = Some(e);
                }
                Box::new(NullIndex)
            }
        }
    };
    let recovered = recovery::recover(dir, &fresh, mode)?;
    if let Some(e) = failed.lock().take() {
        return Err(e);
    }
    let tree = made.lock().take().ok_or_else(|| {
        Error::Config(format!(
            "{ENGINE_NAME}: recovery made no tree in {}",
            path.display()
        ))
    })?;
    Ok((recovered, tree))
}

/// An index that keeps nothing: recovery runs into it to check the logs without applying
/// them (a trusted clwb file holds them already).
#[derive(Debug, Default)]
pub(crate) struct NullIndex;

impl Index for NullIndex {
    fn name(&self) -> &'static str {
        "null"
    }

    fn get(&self, _key: &[u8], _out: &mut Vec<u8>) -> bool {
        false
    }

    fn insert(&self, _key: &[u8], _value: &[u8]) -> Result<bool> {
        Ok(true)
    }

    fn upsert(&self, _key: &[u8], _value: &[u8]) -> Result<()> {
        Ok(())
    }

    fn update(&self, _key: &[u8], _value: &[u8]) -> Result<bool> {
        Ok(false)
    }

    fn remove(&self, _key: &[u8]) -> bool {
        false
    }

    fn scan(
        &self,
        _lower: std::ops::Bound<&[u8]>,
        _upper: std::ops::Bound<&[u8]>,
        _order: Order,
        _visit: &mut Visitor<'_>,
    ) {
    }

    fn stats(&self) -> IndexStats {
        IndexStats::default()
    }
}
