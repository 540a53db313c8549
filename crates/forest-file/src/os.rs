//! [`OsDir`]: the file trait over `std::fs` (Unix: positional I/O, real directory fsync).
//!
//! Choices: files are opened read-write without `O_APPEND` (which would make positional
//! writes append on Linux); [`File::append`] writes at the length this handle tracks, so one
//! handle is the only writer of its file, as the store's per-shard logs are. `sync` is
//! `fdatasync` (`sync_data`): the store never relies on timestamps, and a grown length is
//! metadata that `fdatasync` does flush.
//!
//! [`OsDir::open_read_only`] opens files without write access and refuses every change, for
//! `forest check` and `forest inspect` of a store another process serves or a read-only copy.
//!
//! A directory's name lives in its parent, so [`OsDir::open`] fsyncs the parent of every
//! directory it creates (outermost first) before returning: without that a power loss may
//! remove the new store directory with everything synced inside it. Ancestors that an earlier
//! opener created and died before syncing are beyond it; [`Dir::sync_parent`] covers the
//! store directory itself.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use forest_core::Result;

use super::{check_name, io_error, locked_error, Dir, DirLock, File, LOCK_FILE_NAME};

/// A store directory on the real file system.
#[derive(Debug)]
pub struct OsDir {
    path: PathBuf,
    /// Opened by [`OsDir::open_read_only`]: files open read-only, nothing is created,
    /// renamed, removed, synced or locked.
    read_only: bool,
}

impl OsDir {
    /// Opens the directory `path`, creating it (and its parents) if missing and making each
    /// created name durable by an fsync of its parent.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        for created in create_missing(&path)? {
            if let Some(parent) = parent_of(&created)? {
                sync_dir_at(&parent)?;
            }
        }
        Ok(Self {
            path,
            read_only: false,
        })
    }

    /// Opens the existing directory `path` for reading only, for a reader beside a store
    /// another process may serve, or of a read-only copy: [`Dir::open`] opens files
    /// read-only (a write through them fails), [`Dir::subdir`] creates nothing, and every
    /// call that would change the directory (create, rename, remove, syncs, [`Dir::lock`])
    /// fails naming it. [`Dir::lock_held`] tells whether a store holds it.
    pub fn open_read_only(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if !path.is_dir() {
            return Err(io_error(
                &path,
                "open",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            ));
        }
        Ok(Self {
            path,
            read_only: true,
        })
    }

    /// Whether the directory was opened by [`Self::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Fails `op` on `path` if the directory is read-only.
    fn writable(&self, path: &Path, op: &'static str) -> Result<()> {
        if self.read_only {
            return Err(io_error(
                path,
                op,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the directory was opened read-only",
                ),
            ));
        }
        Ok(())
    }
}

/// Creates `path` and its missing ancestors, as `fs::create_dir_all` does; returns the ones
/// this call created, outermost first.
fn create_missing(path: &Path) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    create_tree(path, &mut created)?;
    Ok(created)
}

fn create_tree(path: &Path, created: &mut Vec<PathBuf>) -> Result<()> {
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_tree(parent, created)?;
    }
    match fs::create_dir(path) {
        Ok(()) => {
            created.push(path.to_path_buf());
            Ok(())
        }
        // Another opener created it meanwhile; its parent sync is that opener's.
        Err(_) if path.is_dir() => Ok(()),
        Err(e) => Err(io_error(path, "create directory", e)),
    }
}

/// The directory that holds `path`'s own entry, or `None` for the root, which has none.
fn parent_of(path: &Path) -> Result<Option<PathBuf>> {
    match path.components().next_back() {
        Some(Component::Normal(_)) => Ok(Some(match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        })),
        // `.`, `..` or `/`: the lexical parent is not where the entry lives.
        _ => {
            let real = fs::canonicalize(path).map_err(|e| io_error(path, "resolve", e))?;
            Ok(real.parent().map(Path::to_path_buf))
        }
    }
}

/// Fsyncs the directory `path`, which Linux needs to make its entries durable.
fn sync_dir_at(path: &Path) -> Result<()> {
    let dir = fs::File::open(path).map_err(|e| io_error(path, "open", e))?;
    dir.sync_all()
        .map_err(|e| io_error(path, "fsync directory", e))
}

/// One file of an [`OsDir`].
#[derive(Debug)]
struct OsFile {
    path: PathBuf,
    file: fs::File,
    len: u64,
}

impl OsFile {
    fn new(path: PathBuf, file: fs::File) -> Result<Self> {
        let len = file
            .metadata()
            .map_err(|e| io_error(&path, "stat", e))?
            .len();
        Ok(Self { path, file, len })
    }
}

impl File for OsFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> Result<u64> {
        Ok(self.len)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| io_error(&self.path, "read", e))
    }

    fn append(&mut self, data: &[u8]) -> Result<()> {
        let offset = self.len;
        self.write_at(offset, data)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| io_error(&self.path, "write", e))?;
        self.len = self.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| io_error(&self.path, "truncate", e))?;
        self.len = len;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| io_error(&self.path, "fsync", e))
    }
}

/// Tries of a refused `lock` (1 ms apart) before it reports the directory in use.
const LOCK_TRIES: u32 = 100;

impl Dir for OsDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn create(&self, name: &str) -> Result<Box<dyn File>> {
        let path = check_name(&self.path, name, "create")?;
        self.writable(&path, "create")?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error(&path, "create", e))?;
        Ok(Box::new(OsFile::new(path, file)?))
    }

    fn open(&self, name: &str) -> Result<Box<dyn File>> {
        let path = check_name(&self.path, name, "open")?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(!self.read_only)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        Ok(Box::new(OsFile::new(path, file)?))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = check_name(&self.path, name, "stat")?;
        path.try_exists().map_err(|e| io_error(&path, "stat", e))
    }

    fn list(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let entries = fs::read_dir(&self.path).map_err(|e| io_error(&self.path, "list", e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&self.path, "list", e))?;
            let is_file = entry
                .file_type()
                .map_err(|e| io_error(&entry.path(), "stat", e))?
                .is_file();
            // Names that are not UTF-8 cannot be the store's; they are left alone.
            if let (true, Ok(name)) = (is_file, entry.file_name().into_string()) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let from_path = check_name(&self.path, from, "rename")?;
        let to_path = check_name(&self.path, to, "rename")?;
        self.writable(&from_path, "rename")?;
        fs::rename(&from_path, &to_path).map_err(|e| io_error(&from_path, "rename", e))
    }

    fn remove(&self, name: &str) -> Result<()> {
        let path = check_name(&self.path, name, "remove")?;
        self.writable(&path, "remove")?;
        fs::remove_file(&path).map_err(|e| io_error(&path, "remove", e))
    }

    fn lock(&self) -> Result<DirLock> {
        let path = self.path.join(LOCK_FILE_NAME);
        self.writable(&path, "lock")?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        // flock(LOCK_EX | LOCK_NB): released by the kernel when the process dies. A refusal
        // is tried again for about 100 ms: `lock_held`'s shared probe (a check or inspect
        // beside the store) holds the lock for microseconds and must not refuse an opener;
        // a store that really holds it refuses every try.
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(DirLock::new(Box::new(file))),
                Err(fs::TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(fs::TryLockError::WouldBlock) => return Err(locked_error(&self.path)),
                Err(fs::TryLockError::Error(e)) => return Err(io_error(&path, "lock", e)),
            }
        }
    }

    // A shared flock probe, released at once: it never creates `LOCK` and fails only while an
    // exclusive holder (an open store) has it. An opener meeting the probe tries again
    // (`lock`), so the probe never refuses it (flock has no test without taking).
    fn lock_held(&self) -> Result<bool> {
        let path = self.path.join(LOCK_FILE_NAME);
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            // No store ever locked it (an opener creates LOCK before locking).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_error(&path, "open", e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(false),
            Err(fs::TryLockError::WouldBlock) => Ok(true),
            Err(fs::TryLockError::Error(e)) => Err(io_error(&path, "lock", e)),
        }
    }

    fn sync_dir(&self) -> Result<()> {
        self.writable(&self.path, "fsync directory")?;
        sync_dir_at(&self.path)
    }

    fn sync_parent(&self) -> Result<()> {
        self.writable(&self.path, "fsync parent directory")?;
        match parent_of(&self.path)? {
            Some(parent) => sync_dir_at(&parent),
            None => Ok(()),
        }
    }

    fn subdir(&self, name: &str) -> Result<std::sync::Arc<dyn Dir>> {
        let path = check_name(&self.path, name, "subdir")?;
        if self.read_only {
            return Ok(std::sync::Arc::new(OsDir::open_read_only(path)?));
        }
        // `open` creates it and fsyncs this directory when it did.
        Ok(std::sync::Arc::new(OsDir::open(path)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_dir_round_trips_files_and_names() {
        // Goal: every trait operation works on the real file system. Method: exercise each
        // once in a temporary directory and read the results back.
        let tmp = tempfile::tempdir().unwrap();
        let dir = OsDir::open(tmp.path().join("store")).unwrap();
        let mut f = dir.create("a.log").unwrap();
        f.append(b"hello ").unwrap();
        f.append(b"world").unwrap();
        f.write_at(0, b"J").unwrap();
        f.sync().unwrap();
        assert_eq!(f.len().unwrap(), 11);
        let mut out = Vec::new();
        f.read_all(&mut out).unwrap();
        assert_eq!(out, b"Jello world");
        f.truncate(5).unwrap();
        drop(f);
        assert!(
            dir.create("a.log").is_err(),
            "create must not replace a file"
        );
        dir.rename("a.log", "b.log").unwrap();
        dir.sync_dir().unwrap();
        assert_eq!(dir.list().unwrap(), vec!["b.log".to_string()]);
        let f = dir.open("b.log").unwrap();
        f.read_all(&mut out).unwrap();
        assert_eq!(out, b"Jello");
        assert!(dir.exists("b.log").unwrap());
        dir.remove("b.log").unwrap();
        assert!(!dir.exists("b.log").unwrap());
    }

    #[test]
    fn a_read_only_dir_reads_and_changes_nothing() {
        // Goal: a directory opened read-only reads files and lists names, opens every file
        // read-only (a write through it fails even for root: the descriptor is O_RDONLY),
        // refuses every change by name, creates no `LOCK` and no subdirectory, and tells
        // whether a store holds the lock without taking it. Method: a store directory with
        // a file; open it read-only; try each call; hold the lock through a writable open.
        let tmp = tempfile::tempdir().unwrap();
        let writer = OsDir::open(tmp.path().join("store")).unwrap();
        let mut f = writer.create("a.log").unwrap();
        f.append(b"data").unwrap();
        drop(f);
        let reader = OsDir::open_read_only(tmp.path().join("store")).unwrap();
        assert!(reader.is_read_only() && !writer.is_read_only());
        let mut f = reader.open("a.log").unwrap();
        let mut out = Vec::new();
        f.read_all(&mut out).unwrap();
        assert_eq!(out, b"data");
        assert!(f.write_at(0, b"X").is_err() && f.append(b"X").is_err());
        f.read_all(&mut out).unwrap();
        assert_eq!(out, b"data");
        for refused in [
            reader.create("b.log").map(drop),
            reader.rename("a.log", "c.log"),
            reader.remove("a.log"),
            reader.sync_dir(),
            reader.sync_parent(),
            reader.lock().map(drop),
            reader.subdir("lss").map(drop),
        ] {
            let text = refused.unwrap_err().to_string();
            assert!(text.contains("store"), "{text}");
        }
        assert_eq!(reader.list().unwrap(), vec!["a.log".to_string()]);
        assert!(!reader.lock_held().unwrap(), "no LOCK file: not held");
        assert!(!tmp.path().join("store/lss").exists());
        let held = writer.lock().unwrap();
        assert!(reader.lock_held().unwrap() && writer.lock_held().unwrap());
        drop(held);
        assert!(!reader.lock_held().unwrap());
        // The probe left the lock free for the next opener.
        drop(writer.lock().unwrap());
        assert!(OsDir::open_read_only(tmp.path().join("none")).is_err());
        assert!(!tmp.path().join("none").exists());
    }

    #[test]
    fn os_dir_errors_name_the_file_and_operation() {
        // Goal: an I/O error says which file and which operation failed. Method: open a
        // missing file and a bad name, and read the messages.
        let tmp = tempfile::tempdir().unwrap();
        let dir = OsDir::open(tmp.path()).unwrap();
        let text = dir.open("missing.log").err().unwrap().to_string();
        assert!(text.contains("missing.log"), "{text}");
        assert!(text.contains("open"), "{text}");
        let text = dir.create("../escape").err().unwrap().to_string();
        assert!(text.contains("plain file name"), "{text}");
    }

    #[test]
    fn open_creates_missing_ancestors_outermost_first() {
        // Goal: open creates every missing directory and reports each, outermost first, so
        // each parent is fsynced before its child's. Method: create a three-deep path with
        // the helper open uses, call it again, then open a fresh path and sync its parent.
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let c = a.join("b").join("c");
        assert_eq!(
            create_missing(&c).unwrap(),
            vec![a.clone(), a.join("b"), c.clone()]
        );
        assert!(c.is_dir());
        assert_eq!(create_missing(&c).unwrap(), Vec::<PathBuf>::new());
        let dir = OsDir::open(tmp.path().join("x").join("store")).unwrap();
        assert!(dir.path().is_dir());
        dir.sync_parent().unwrap();
    }

    #[test]
    fn parent_of_finds_the_directory_holding_the_entry() {
        // Goal: the parent fsynced is where the name lives, also for `.`/`..` paths. Method:
        // lexical and resolved cases.
        assert_eq!(parent_of(Path::new("a/b")).unwrap(), Some("a".into()));
        assert_eq!(parent_of(Path::new("b")).unwrap(), Some(".".into()));
        assert_eq!(parent_of(Path::new("b/.")).unwrap(), Some(".".into()));
        assert_eq!(parent_of(Path::new("/")).unwrap(), None);
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("sub")).unwrap();
        let real = fs::canonicalize(tmp.path()).unwrap();
        assert_eq!(
            parent_of(&tmp.path().join("sub").join("..")).unwrap(),
            real.parent().map(Path::to_path_buf)
        );
    }

    #[test]
    fn open_and_sync_parent_errors_name_the_path() {
        // Goal: a failed create or parent sync says which directory and which operation.
        // Method: open below a regular file; sync the parent of a store whose parent was
        // removed.
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain");
        fs::write(&file, b"x").unwrap();
        let text = OsDir::open(file.join("store")).err().unwrap().to_string();
        assert!(text.contains("create directory"), "{text}");
        assert!(text.contains(&file.display().to_string()), "{text}");
        let gone = tmp.path().join("gone");
        let dir = OsDir::open(gone.join("store")).unwrap();
        fs::remove_dir_all(&gone).unwrap();
        let text = dir.sync_parent().err().unwrap().to_string();
        assert!(text.starts_with("open "), "{text}");
        assert!(text.contains(&gone.display().to_string()), "{text}");
    }

    // rev-lss4 F1: `forest check`/`inspect`'s lock probe (a shared flock taken and released)
    // makes a store opening in that instant fail with "locked": a check can stop a server
    // from starting. Method: one thread probes in a loop; the other takes and drops the
    // exclusive lock as an opener does; count refusals.
    #[test]
    fn rev_lss4_lock_probe_never_refuses_an_opener() {
        let tmp = tempfile::tempdir().unwrap();
        let writer = OsDir::open(tmp.path().join("store")).unwrap();
        drop(writer.lock().unwrap()); // LOCK exists, as after any earlier open
        let reader = OsDir::open_read_only(tmp.path().join("store")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = std::sync::Arc::clone(&stop);
        let prober = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = reader.lock_held().unwrap();
            }
        });
        let mut refused = 0;
        for _ in 0..20_000 {
            match writer.lock() {
                Ok(held) => drop(held),
                Err(_) => refused += 1,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        prober.join().unwrap();
        assert_eq!(refused, 0, "opens refused because a check probed the lock");
    }
}
