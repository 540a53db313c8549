//! The file trait: every byte a store (forest-store's logs and checkpoints, LLAMA's log-structured
//! store) reads or writes goes through [`Dir`] and [`File`]
//! (STYLE.md §1 "all I/O through one trait"; issue 5 "I/O errors" and "Power loss").
//!
//! A store lives in one flat directory. [`Dir`] creates, opens, lists, renames and removes
//! the files in it, syncs the directory itself and syncs its parent (where the directory's
//! own name lives); [`File`] reads, appends, writes at an
//! offset, truncates and syncs one file's data. Two implementations (and [`MemFile`], a
//! read-only file over bytes in memory for the decoders' tests and fuzz targets):
//! - [`OsDir`]: `std::fs`, with real `fdatasync` for files and a real `fsync` of the directory
//!   (Linux needs it for a created or renamed name to survive a power loss); opening creates
//!   missing directories and fsyncs the parent of each.
//! - [`SimDir`]: an in-memory disk for tests that keeps live and durable bytes per file, a
//!   live and durable name table and whether the directory's own entry is durable, drops
//!   what was not synced at [`SimDir::crash`] (keeping a random prefix, perhaps with a torn
//!   last page) or [`SimDir::crash_scatter`] (keeping any subset of the unsynced pages), and
//!   fails the Nth write or sync on request ([`FaultPlan`]).
//!
//! Invariants every implementation keeps:
//! - Bytes are durable only after [`File::sync`] returns `Ok` on that file; a name (create,
//!   rename, remove) is durable only after [`Dir::sync_dir`] returns `Ok`; a directory just
//!   created, with everything in it, is durable only after [`Dir::sync_parent`] returns `Ok`.
//! - Unsynced pages reach the disk in any order, not as a prefix: after a power loss a file
//!   may hold a later unsynced page and not an earlier one, with zeros in the hole.
//! - [`Dir::rename`] is atomic: after any crash the target names either the old file or the
//!   new one, never a mix.
//! - After [`File::sync`] fails, the file's unsynced bytes are in an unknown state (Linux
//!   marks the failed pages clean, so a retried fsync "succeeds" without writing them). The
//!   trait reports the failure; callers must not retry and assume safety.
//! - Every error is [`forest_core::Error::Io`] naming the file and the operation.
//!
//! Choices: names are plain file names inside the directory (no sub-directories, no `/`), so
//! the simulation stays a flat table; reads go to live bytes (the page cache), as on Linux.

mod mem;
mod os;
mod sim;
mod window;

use std::path::{Path, PathBuf};

use forest_core::{Error, Result};

pub use mem::MemFile;
pub use os::OsDir;
pub use window::{ReadWindow, READ_CHUNK_BYTES};

pub use sim::{CrashMode, Fault, FaultKind, FaultOp, FaultPlan, SimDir, TORN_PAGE_BYTES};

/// One open file of a [`Dir`].
pub trait File: Send {
    /// The file's path, for error messages.
    fn path(&self) -> &Path;
    /// The file's current length in bytes (live, not necessarily durable).
    fn len(&self) -> Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `offset`; fails if the file ends before `buf` is full.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Replaces `out`'s contents with the whole file.
    fn read_all(&self, out: &mut Vec<u8>) -> Result<()> {
        let len = usize::try_from(self.len()?).map_err(|_| Error::Io {
            path: self.path().to_path_buf(),
            op: "read",
            source: std::io::Error::other("file larger than memory"),
        })?;
        out.clear();
        out.resize(len, 0);
        self.read_exact_at(0, out)
    }
    /// Appends `data` at the end of the file.
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Writes `data` at `offset`, extending the file if it ends before.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;
    /// Cuts (or zero-extends) the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> Result<()>;
    /// Makes the file's data durable (`fdatasync`). After an error the unsynced bytes are in
    /// an unknown state: never retry and assume they are safe.
    fn sync(&mut self) -> Result<()>;
}

/// The directory that holds one store.
pub trait Dir: Send + Sync {
    /// The directory's path, for error messages.
    fn path(&self) -> &Path;
    /// Creates the file `name`; fails if it exists.
    fn create(&self, name: &str) -> Result<Box<dyn File>>;
    /// Opens the existing file `name` for reading and writing.
    fn open(&self, name: &str) -> Result<Box<dyn File>>;
    /// Whether a file `name` exists.
    fn exists(&self, name: &str) -> Result<bool>;
    /// The names of all files, sorted.
    fn list(&self) -> Result<Vec<String>>;
    /// Renames `from` to `to` atomically, replacing `to` if it exists.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Removes the file `name`.
    fn remove(&self, name: &str) -> Result<()>;
    /// Makes the directory's names durable (creates, renames, removes so far).
    fn sync_dir(&self) -> Result<()>;
    /// Makes the directory's own entry in its parent durable (an fsync of the parent): until
    /// then a power loss may remove a just-created directory with all its files. Call it at
    /// every open, before trusting anything written: it costs one fsync, is harmless for an
    /// old directory, and covers one created by an opener that died before syncing it.
    fn sync_parent(&self) -> Result<()>;
    /// Takes the directory's exclusive lock (one open store per directory); fails at once,
    /// naming the directory, if another opener holds it. Dropping the [`DirLock`] releases it.
    fn lock(&self) -> Result<DirLock>;
    /// Whether another opener holds the directory's lock now, for a reader that does not
    /// take it (`forest check` and `forest inspect` beside a running store). Default: takes
    /// the lock and drops it at once ([`OsDir`] probes without creating `LOCK`).
    fn lock_held(&self) -> Result<bool> {
        match self.lock() {
            Ok(_released) => Ok(false),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }
    /// The subdirectory `name` (created if missing, its entry made durable), for a part of
    /// the store that keeps files of its own (the Bw-tree's LSS, `DIR/lss/`). A simulated
    /// directory's subdirectory shares its power losses. Default: refused, naming the
    /// directory.
    fn subdir(&self, name: &str) -> Result<std::sync::Arc<dyn Dir>> {
        Err(Error::Config(format!(
            "{} holds no subdirectories (asked for {name:?})",
            self.path().display()
        )))
    }
}

/// The exclusive lock of a store directory, held until dropped (see [`Dir::lock`]).
pub struct DirLock {
    _held: Box<dyn Send + Sync>,
}

impl DirLock {
    /// Wraps whatever keeps the lock held (a locked file, a simulated token).
    pub fn new(held: Box<dyn Send + Sync>) -> Self {
        Self { _held: held }
    }
}

impl std::fmt::Debug for DirLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirLock")
    }
}

/// The name of the lock file in a store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// The error of a second opener.
pub(crate) fn locked_error(dir: &Path) -> Error {
    io_error(
        &dir.join(LOCK_FILE_NAME),
        "lock",
        std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "the store directory is already open (another process or Store holds its lock)",
        ),
    )
}

/// Builds the [`Error::Io`] for `op` on `path`.
pub(crate) fn io_error(path: &Path, op: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Checks that `name` is a plain file name (see the module doc's choices).
pub(crate) fn check_name(dir: &Path, name: &str, op: &'static str) -> Result<PathBuf> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0');
    let path = dir.join(name);
    if !plain {
        return Err(io_error(
            &path,
            op,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a plain file name inside the store directory",
            ),
        ));
    }
    Ok(path)
}
