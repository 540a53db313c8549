//! [`SimDir`]: a simulated disk that loses what was not synced (issue 5 "Power loss";
//! STYLE.md §5 "Simulated file").
//!
//! Model:
//! - Each file has live bytes (what reads see, the page cache) and durable bytes (what a
//!   power loss keeps), plus the list of writes and truncates made since its last sync.
//!   [`File::sync`] applies that list to the durable bytes.
//! - The directory has a live and a durable name table plus the list of creates, renames and
//!   removes since its last [`Dir::sync_dir`].
//! - The directory itself is an entry in a parent directory. [`SimDir::new`] models one whose
//!   entry is durable; [`SimDir::new_uncreated`] one just created, whose entry is durable only
//!   after [`Dir::sync_parent`]. A crash before that removes the directory with all its files
//!   (the power loss drops the new name from the parent); it comes back empty and still not
//!   durable, as the next opener creates it again.
//! - [`SimDir::crash`] models a power loss. The name table becomes the durable one plus a
//!   random prefix of the unsynced name operations (a journaling file system commits
//!   metadata in order, so a rename never lands before the create it renames; each rename is
//!   atomic). Files no name refers to vanish. Handles opened before the crash fail from then
//!   on, as the process that held them is gone. What each file keeps depends on the
//!   [`CrashMode`]:
//!   - `Random` (the one [`SimDir::crash`] uses): the durable bytes plus a random prefix of
//!     the unsynced writes; the first write not kept whole may survive in part, with its
//!     last 4 KiB page torn (random bytes).
//!   - `Scatter` ([`SimDir::crash_scatter`]): write-back in any order, page by page. Every
//!     [`TORN_PAGE_BYTES`] page an unsynced write or truncate touched, and that starts
//!     before the live length, independently lands whole with its live content (zeros past
//!     the live length) or keeps its durable content (zeros past the durable length). Pages
//!     start at multiples of the page size and land whole (tearing is `Random`'s part). The
//!     length is then any value from `lo` to `hi` that covers the live content of every
//!     landed page (writing back a page past the old end also writes the grown length), where
//!     `hi` is the larger of the durable and live lengths and `lo` the durable length, or the
//!     shortest pending truncate if lower. So an appended file may come back at its new
//!     length with zero-filled holes, or shorter, and a later page may land while an earlier
//!     one is lost; bytes no pending operation touched keep their durable value.
//!   - `DropUnsynced`: the durable bytes only.
//! - A [`FaultPlan`] fails the Nth write with ENOSPC or EIO (a random prefix of the data may
//!   have reached the file first, as with a short write), or the Nth sync with EIO. A failed
//!   file sync makes a random prefix of the unsynced writes durable and forgets the rest
//!   while reads still see them — Linux marks failed pages clean, so a later sync succeeds
//!   without writing them. That is why callers must never retry an fsync and trust it. A
//!   failed [`Dir::sync_parent`] likewise leaves the entry durable or lost for good, by coin.
//!
//! Invariants: after a successful sync a file's durable bytes equal its live bytes; a crash
//! never changes a durable byte that no unsynced write or truncate touched (except by
//! removing a file whose name, or a directory whose entry, was never made durable); the
//! simulation is deterministic for a given seed and call sequence.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use forest_core::Result;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{check_name, io_error, locked_error, Dir, DirLock, File};

/// The page size of the torn-write model: a power loss can tear at most the last page a
/// write was filling, as a disk writes whole sectors but a page of them is not atomic.
pub const TORN_PAGE_BYTES: u64 = 4096;

/// Linux's errno values, which `std::io::Error::from_raw_os_error` maps to the usual texts.
const ERRNO_EIO: i32 = 5;
const ERRNO_ENOSPC: i32 = 28;

/// Which operation a [`Fault`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// [`File::append`] and [`File::write_at`] calls, counted across the directory.
    Write,
    /// [`File::sync`], [`Dir::sync_dir`] and [`Dir::sync_parent`] calls, counted across the
    /// directory.
    Sync,
}

/// The error a [`Fault`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// No space left on device (writes only).
    NoSpace,
    /// Input/output error.
    Eio,
    /// The operation panics (syncs only): a bug below the store, for tests that a thread
    /// which panics in the middle of I/O fails the store instead of hanging its writers.
    Panic,
}

/// One injected failure: the `nth` (counting from 1) operation of kind `op` fails with `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub op: FaultOp,
    pub nth: u64,
    pub kind: FaultKind,
}

/// The failures a [`SimDir`] injects; counts start when the plan is set.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    pub faults: Vec<Fault>,
}

impl FaultPlan {
    /// A plan that fails the `nth` write with `kind`.
    pub fn write(nth: u64, kind: FaultKind) -> Self {
        Self {
            faults: vec![Fault {
                op: FaultOp::Write,
                nth,
                kind,
            }],
        }
    }

    /// A plan that fails the `nth` sync with EIO.
    pub fn sync(nth: u64) -> Self {
        Self {
            faults: vec![Fault {
                op: FaultOp::Sync,
                nth,
                kind: FaultKind::Eio,
            }],
        }
    }
}

/// A change to a file not yet made durable.
#[derive(Clone, Debug)]
enum PendingWrite {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
}

/// A change to the name table not yet made durable.
#[derive(Clone, Debug)]
enum NameOp {
    Create { name: String, id: u64 },
    Rename { from: String, to: String },
    Remove { name: String },
}

#[derive(Debug, Default)]
struct SimFileData {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<PendingWrite>,
}

/// Whether the directory's own entry in its parent survives a power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Durable,
    /// Created and not yet synced in the parent.
    Pending,
    /// A failed [`Dir::sync_parent`] dropped it; later syncs do not write it (as for files).
    Lost,
}

#[derive(Debug)]
struct SimState {
    entry: Entry,
    files: HashMap<u64, SimFileData>,
    names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    pending_names: Vec<NameOp>,
    file_id_next: u64,
    /// Bumped by every crash; handles of an older generation are dead.
    generation: u64,
    rng: StdRng,
    plan: FaultPlan,
    write_count: u64,
    sync_count: u64,
    /// The token of the [`DirLock`] held, if any; a crash (the process dies) releases it.
    lock_owner: Option<u64>,
    lock_token_next: u64,
    /// A failed directory sync dropped name changes for good: live and durable names may
    /// differ until the next crash.
    names_diverged: bool,
    /// Subdirectories ([`Dir::subdir`]): each a disk of its own that crashes with this one.
    children: BTreeMap<String, SimDir>,
}

/// How [`SimDir::crash`] treats what was not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Keep a random prefix of unsynced writes and name changes, perhaps with a torn page.
    Random,
    /// Keep any subset of the pages unsynced writes touched, with a length they allow, and a
    /// random prefix of name changes (see the module doc).
    Scatter,
    /// Keep nothing that was not synced (the strictest power loss).
    DropUnsynced,
}

/// An in-memory store directory with simulated power loss and injected faults. Clones share
/// the same simulated disk.
#[derive(Clone, Debug)]
pub struct SimDir {
    path: PathBuf,
    state: Arc<Mutex<SimState>>,
}

impl SimDir {
    /// An empty simulated directory whose entry in its parent is durable (it existed before),
    /// with random choices that follow `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_entry(seed, Entry::Durable)
    }

    /// An empty directory just created: a crash removes it, and every file in it, until
    /// [`Dir::sync_parent`] succeeds.
    pub fn new_uncreated(seed: u64) -> Self {
        Self::with_entry(seed, Entry::Pending)
    }

    fn with_entry(seed: u64, entry: Entry) -> Self {
        Self {
            path: PathBuf::from("/sim"),
            state: Arc::new(Mutex::new(SimState {
                entry,
                files: HashMap::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                pending_names: Vec::new(),
                file_id_next: 0,
                generation: 0,
                rng: StdRng::seed_from_u64(seed),
                plan: FaultPlan::default(),
                write_count: 0,
                sync_count: 0,
                lock_owner: None,
                lock_token_next: 0,
                names_diverged: false,
                children: BTreeMap::new(),
            })),
        }
    }

    /// Installs `plan` and restarts the write and sync counts.
    pub fn set_faults(&self, plan: FaultPlan) {
        let mut state = self.state.lock();
        state.plan = plan;
        state.write_count = 0;
        state.sync_count = 0;
    }

    /// Simulates a power loss with random choices (see the module doc).
    pub fn crash(&self) {
        self.crash_with(CrashMode::Random);
    }

    /// Simulates a power loss that writes back unsynced pages in any order
    /// ([`CrashMode::Scatter`]).
    pub fn crash_scatter(&self) {
        self.crash_with(CrashMode::Scatter);
    }

    /// Whether the directory's own entry in its parent is durable (see
    /// [`SimDir::new_uncreated`]).
    pub fn is_entry_durable(&self) -> bool {
        self.state.lock().entry == Entry::Durable
    }

    /// Simulates a power loss in `mode`.
    pub fn crash_with(&self, mode: CrashMode) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.entry != Entry::Durable {
            // The parent forgets the directory; the next opener creates it again, empty.
            state.files.clear();
            state.names.clear();
            state.durable_names.clear();
            state.pending_names.clear();
            state.entry = Entry::Pending;
        }
        let names_kept = match mode {
            CrashMode::Random | CrashMode::Scatter => {
                state.rng.random_range(0..=state.pending_names.len())
            }
            CrashMode::DropUnsynced => 0,
        };
        for op in state.pending_names.drain(..names_kept) {
            apply_name_op(&mut state.durable_names, op);
        }
        state.pending_names.clear();
        state.names = state.durable_names.clone();
        let named: std::collections::HashSet<u64> = state.names.values().copied().collect();
        state.files.retain(|id, _| named.contains(id));
        let mut ids: Vec<u64> = state.files.keys().copied().collect();
        ids.sort_unstable(); // a HashMap's order must not steer the seeded choices
        for id in ids {
            let file = state.files.get_mut(&id).expect("id was just listed");
            let pending = std::mem::take(&mut file.pending);
            match mode {
                CrashMode::Random => {
                    apply_random_prefix(&mut state.rng, &mut file.durable, pending)
                }
                CrashMode::Scatter => {
                    apply_scatter(&mut state.rng, &mut file.durable, &file.live, &pending);
                }
                CrashMode::DropUnsynced => {}
            }
            file.live = file.durable.clone();
        }
        state.generation += 1;
        state.lock_owner = None;
        state.names_diverged = false;
        let children: Vec<SimDir> = state.children.values().cloned().collect();
        drop(guard);
        for child in children {
            child.crash_with(mode);
        }
    }

    /// The durable bytes of `name` under the durable name table, if it names a file and the
    /// directory's entry is durable (what [`CrashMode::DropUnsynced`] would keep).
    pub fn durable_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let state = self.state.lock();
        if state.entry != Entry::Durable {
            return None;
        }
        let id = state.durable_names.get(name)?;
        state.files.get(id).map(|f| f.durable.clone())
    }

    /// Changes the bytes of `name`, live and durable alike, as damage on the medium would
    /// (tests of corruption detection). Returns false if there is no such file.
    pub fn damage(&self, name: &str, change: impl Fn(&mut Vec<u8>)) -> bool {
        let mut state = self.state.lock();
        let Some(&id) = state.names.get(name) else {
            return false;
        };
        let file = state
            .files
            .get_mut(&id)
            .expect("a live name refers to a file");
        change(&mut file.live);
        change(&mut file.durable);
        true
    }

    fn handle(&self, name: &str, id: u64, generation: u64) -> Box<dyn File> {
        Box::new(SimFile {
            path: self.path.join(name),
            id,
            generation,
            state: Arc::clone(&self.state),
        })
    }
}

fn apply_name_op(names: &mut BTreeMap<String, u64>, op: NameOp) {
    match op {
        NameOp::Create { name, id } => {
            names.insert(name, id);
        }
        NameOp::Rename { from, to } => {
            if let Some(id) = names.remove(&from) {
                names.insert(to, id);
            }
        }
        NameOp::Remove { name } => {
            names.remove(&name);
        }
    }
}

fn apply_write(bytes: &mut Vec<u8>, write: &PendingWrite) {
    match write {
        PendingWrite::Write { offset, data } => {
            let start = usize::try_from(*offset).expect("simulated files fit in memory");
            let end = start + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[start..end].copy_from_slice(data);
        }
        PendingWrite::Truncate { len } => {
            bytes.resize(
                usize::try_from(*len).expect("simulated files fit in memory"),
                0,
            );
        }
    }
}

/// Makes a random prefix of `pending` durable; the first write not kept whole may land in
/// part, with its last page torn.
fn apply_random_prefix(rng: &mut StdRng, durable: &mut Vec<u8>, pending: Vec<PendingWrite>) {
    let kept = rng.random_range(0..=pending.len());
    let mut rest = pending.into_iter();
    for write in rest.by_ref().take(kept) {
        apply_write(durable, &write);
    }
    let Some(PendingWrite::Write { offset, mut data }) = rest.next() else {
        return;
    };
    if !rng.random_bool(0.5) {
        return;
    }
    data.truncate(rng.random_range(0..=data.len()));
    if !data.is_empty() && rng.random_bool(0.5) {
        let end = offset + data.len() as u64;
        let page_start = ((end - 1) / TORN_PAGE_BYTES * TORN_PAGE_BYTES).max(offset);
        let torn_from = usize::try_from(page_start - offset).expect("within the write");
        rng.fill(&mut data[torn_from..]);
    }
    apply_write(durable, &PendingWrite::Write { offset, data });
}

/// Lands each page `pending` touched whole or not at all, in any combination, and picks a
/// length the landed pages allow (the `Scatter` model of the module doc). `live` is the
/// file's live bytes, which hold every pending change.
fn apply_scatter(rng: &mut StdRng, durable: &mut Vec<u8>, live: &[u8], pending: &[PendingWrite]) {
    if pending.is_empty() {
        return;
    }
    let durable_len = durable.len() as u64;
    let live_len = live.len() as u64;
    let hi = durable_len.max(live_len);
    let mut lo = durable_len;
    // Sorted, so the coin flips below follow the seed alone.
    let mut touched = std::collections::BTreeSet::new();
    let mut touch = |start: u64, end: u64| {
        // Pages wholly past the live end are not written back: the length decides them.
        let end = end.min(live_len);
        if start < end {
            touched.extend(start / TORN_PAGE_BYTES..end.div_ceil(TORN_PAGE_BYTES));
        }
    };
    for write in pending {
        match write {
            PendingWrite::Write { offset, data } => touch(*offset, offset + data.len() as u64),
            PendingWrite::Truncate { len } => {
                // A truncate changes every byte from `len` on (cut, or zeroed when regrown).
                touch(*len, hi);
                lo = lo.min(*len);
            }
        }
    }
    let mut image = std::mem::take(durable);
    image.resize(
        usize::try_from(hi).expect("simulated files fit in memory"),
        0,
    );
    let mut reach = 0;
    for page in touched {
        if !rng.random_bool(0.5) {
            continue;
        }
        let start = usize::try_from(page * TORN_PAGE_BYTES).expect("within the file");
        let end = image.len().min(start + TORN_PAGE_BYTES as usize);
        let live_end = live.len().min(end);
        image[start..live_end].copy_from_slice(&live[start..live_end]);
        image[live_end..end].fill(0);
        reach = live_end as u64;
    }
    let lo = lo.max(reach);
    let len = match rng.random_range(0..3) {
        0 => lo,
        1 => hi,
        _ => rng.random_range(lo..=hi),
    };
    image.truncate(usize::try_from(len).expect("within the file"));
    *durable = image;
}

/// One open file of a [`SimDir`].
#[derive(Debug)]
struct SimFile {
    path: PathBuf,
    id: u64,
    generation: u64,
    state: Arc<Mutex<SimState>>,
}

impl SimFile {
    /// Locks the disk, checks the handle is from the current generation, and runs `body`.
    fn with<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&mut SimState, u64) -> std::io::Result<T>,
    ) -> Result<T> {
        let mut state = self.state.lock();
        if state.generation != self.generation {
            return Err(io_error(
                &self.path,
                op,
                std::io::Error::other("handle opened before a simulated crash"),
            ));
        }
        body(&mut state, self.id).map_err(|e| io_error(&self.path, op, e))
    }

    fn write(&mut self, op: &'static str, offset: Option<u64>, data: &[u8]) -> Result<()> {
        self.with(op, |state, id| {
            state.write_count += 1;
            let count = state.write_count;
            let fault = state
                .plan
                .faults
                .iter()
                .find(|f| f.op == FaultOp::Write && f.nth == count)
                .copied();
            let file = state
                .files
                .get_mut(&id)
                .expect("an open handle's file exists");
            let offset = offset.unwrap_or(file.live.len() as u64);
            let written = match fault {
                Some(_) => state.rng.random_range(0..=data.len()),
                None => data.len(),
            };
            let write = PendingWrite::Write {
                offset,
                data: data[..written].to_vec(),
            };
            apply_write(&mut file.live, &write);
            file.pending.push(write);
            match fault {
                Some(f) if f.kind == FaultKind::NoSpace => {
                    Err(std::io::Error::from_raw_os_error(ERRNO_ENOSPC))
                }
                Some(_) => Err(std::io::Error::from_raw_os_error(ERRNO_EIO)),
                None => Ok(()),
            }
        })
    }
}

/// Whether the current sync is the one a plan fails (panics if the plan says so).
fn sync_fails(state: &mut SimState) -> bool {
    state.sync_count += 1;
    let count = state.sync_count;
    let fault = state
        .plan
        .faults
        .iter()
        .find(|f| f.op == FaultOp::Sync && f.nth == count);
    if fault.is_some_and(|f| f.kind == FaultKind::Panic) {
        panic!("SimDir: injected panic in sync {count}");
    }
    fault.is_some()
}

impl File for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> Result<u64> {
        self.with("stat", |state, id| {
            Ok(state.files.get(&id).map_or(0, |f| f.live.len() as u64))
        })
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.with("read", |state, id| {
            let live = &state
                .files
                .get(&id)
                .expect("an open handle's file exists")
                .live;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let Some(bytes) = start
                .checked_add(buf.len())
                .and_then(|end| live.get(start..end))
            else {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            };
            buf.copy_from_slice(bytes);
            Ok(())
        })
    }

    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.write("write", None, data)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.write("write", Some(offset), data)
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.with("truncate", |state, id| {
            let file = state
                .files
                .get_mut(&id)
                .expect("an open handle's file exists");
            let write = PendingWrite::Truncate { len };
            apply_write(&mut file.live, &write);
            file.pending.push(write);
            Ok(())
        })
    }

    fn sync(&mut self) -> Result<()> {
        self.with("fsync", |state, id| {
            let fails = sync_fails(state);
            let file = state
                .files
                .get_mut(&id)
                .expect("an open handle's file exists");
            let pending = std::mem::take(&mut file.pending);
            if fails {
                // Linux: some pages may have reached the disk, the rest are marked clean and
                // lost to every later sync while reads still see them.
                apply_random_prefix(&mut state.rng, &mut file.durable, pending);
                return Err(std::io::Error::from_raw_os_error(ERRNO_EIO));
            }
            for write in &pending {
                apply_write(&mut file.durable, write);
            }
            Ok(())
        })
    }
}

impl Dir for SimDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn create(&self, name: &str) -> Result<Box<dyn File>> {
        let path = check_name(&self.path, name, "create")?;
        let mut state = self.state.lock();
        if state.names.contains_key(name) {
            return Err(io_error(
                &path,
                "create",
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        let id = state.file_id_next;
        state.file_id_next += 1;
        state.files.insert(id, SimFileData::default());
        state.names.insert(name.to_string(), id);
        state.pending_names.push(NameOp::Create {
            name: name.to_string(),
            id,
        });
        let generation = state.generation;
        drop(state);
        Ok(self.handle(name, id, generation))
    }

    fn open(&self, name: &str) -> Result<Box<dyn File>> {
        let path = check_name(&self.path, name, "open")?;
        let state = self.state.lock();
        let Some(&id) = state.names.get(name) else {
            return Err(io_error(
                &path,
                "open",
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        };
        let generation = state.generation;
        drop(state);
        Ok(self.handle(name, id, generation))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        check_name(&self.path, name, "stat")?;
        Ok(self.state.lock().names.contains_key(name))
    }

    fn list(&self) -> Result<Vec<String>> {
        Ok(self.state.lock().names.keys().cloned().collect())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let from_path = check_name(&self.path, from, "rename")?;
        check_name(&self.path, to, "rename")?;
        let mut state = self.state.lock();
        let Some(id) = state.names.remove(from) else {
            return Err(io_error(
                &from_path,
                "rename",
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        };
        state.names.insert(to.to_string(), id);
        state.pending_names.push(NameOp::Rename {
            from: from.to_string(),
            to: to.to_string(),
        });
        Ok(())
    }

    fn remove(&self, name: &str) -> Result<()> {
        let path = check_name(&self.path, name, "remove")?;
        let mut state = self.state.lock();
        if state.names.remove(name).is_none() {
            return Err(io_error(
                &path,
                "remove",
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        state.pending_names.push(NameOp::Remove {
            name: name.to_string(),
        });
        Ok(())
    }

    fn lock(&self) -> Result<DirLock> {
        let mut state = self.state.lock();
        if state.lock_owner.is_some() {
            return Err(locked_error(&self.path));
        }
        let token = state.lock_token_next;
        state.lock_token_next += 1;
        state.lock_owner = Some(token);
        Ok(DirLock::new(Box::new(SimLock {
            token,
            state: Arc::clone(&self.state),
        })))
    }

    fn subdir(&self, name: &str) -> Result<Arc<dyn Dir>> {
        let path = check_name(&self.path, name, "subdir")?;
        let mut state = self.state.lock();
        let seed = state.rng.random::<u64>();
        let child = state
            .children
            .entry(name.to_string())
            .or_insert_with(|| {
                let mut child = SimDir::with_entry(seed, Entry::Durable);
                child.path = path;
                child
            })
            .clone();
        Ok(Arc::new(child))
    }

    fn sync_dir(&self) -> Result<()> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let fails = sync_fails(state);
        let pending = std::mem::take(&mut state.pending_names);
        let kept = if fails {
            state.rng.random_range(0..=pending.len())
        } else {
            pending.len()
        };
        for op in pending.into_iter().take(kept) {
            apply_name_op(&mut state.durable_names, op);
        }
        if fails {
            state.names_diverged = true;
            return Err(io_error(
                &self.path,
                "fsync directory",
                std::io::Error::from_raw_os_error(ERRNO_EIO),
            ));
        }
        debug_assert!(state.names_diverged || state.names == state.durable_names);
        Ok(())
    }

    fn sync_parent(&self) -> Result<()> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if sync_fails(state) {
            if state.entry == Entry::Pending {
                state.entry = if state.rng.random_bool(0.5) {
                    Entry::Durable
                } else {
                    Entry::Lost
                };
            }
            let parent = self.path.parent().unwrap_or(Path::new("/"));
            return Err(io_error(
                parent,
                "fsync directory",
                std::io::Error::from_raw_os_error(ERRNO_EIO),
            ));
        }
        if state.entry == Entry::Pending {
            state.entry = Entry::Durable;
        }
        Ok(())
    }
}

/// The token of a held [`SimDir`] lock; dropping it releases the lock unless a crash did.
struct SimLock {
    token: u64,
    state: Arc<Mutex<SimState>>,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        if state.lock_owner == Some(self.token) {
            state.lock_owner = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &SimDir, name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        dir.open(name).unwrap().read_all(&mut out).unwrap();
        out
    }

    #[test]
    fn synced_bytes_and_names_survive_a_crash() {
        // Goal: what was synced (data and name) is kept by every crash. Method: sync a file
        // and its directory, crash with many seeds, read back.
        for seed in 0..50 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("a").unwrap();
            f.append(b"durable").unwrap();
            f.sync().unwrap();
            dir.sync_dir().unwrap();
            f.append(b" maybe").unwrap();
            dir.crash();
            let got = read(&dir, "a");
            assert!(got.starts_with(b"durable"), "seed {seed}: {got:?}");
            assert!(got.len() <= b"durable maybe".len(), "seed {seed}");
            assert!(f.append(b"x").is_err(), "old handles die with the crash");
        }
    }

    #[test]
    fn strict_crash_drops_everything_unsynced() {
        // Goal: DropUnsynced keeps exactly the durable state. Method: sync part, write more,
        // create an unsynced name, crash strictly.
        let dir = SimDir::new(1);
        let mut f = dir.create("a").unwrap();
        f.append(b"one").unwrap();
        f.sync().unwrap();
        dir.sync_dir().unwrap();
        f.append(b"two").unwrap();
        dir.create("b").unwrap().sync().unwrap();
        dir.crash_with(CrashMode::DropUnsynced);
        assert_eq!(read(&dir, "a"), b"one");
        assert_eq!(dir.list().unwrap(), vec!["a".to_string()]);
    }

    #[test]
    fn random_crash_keeps_a_prefix_or_a_torn_last_page() {
        // Goal: unsynced appends survive only as a prefix, apart from at most the last page
        // of the first write not kept whole. Method: many seeds, compare bytes before the
        // torn page with what was written.
        let mut saw_partial = false;
        for seed in 0..200 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("log").unwrap();
            dir.sync_dir().unwrap();
            let written: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
            for chunk in written.chunks(5_000) {
                f.append(chunk).unwrap();
            }
            dir.crash();
            let got = read(&dir, "log");
            assert!(got.len() <= written.len(), "seed {seed}");
            let page_start = got.len().saturating_sub(1) / 4096 * 4096;
            assert_eq!(got[..page_start], written[..page_start], "seed {seed}");
            saw_partial |= !got.is_empty() && got.len() < written.len();
        }
        assert!(saw_partial, "some crash should keep part of the tail");
    }

    #[test]
    fn rename_is_atomic_and_needs_a_directory_sync() {
        // Goal: a rename either lands whole or not at all, and is certain only after
        // sync_dir. Method: publish a file by rename, crash with many seeds.
        let mut saw_old = false;
        let mut saw_new = false;
        for seed in 0..100 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("ckpt.tmp").unwrap();
            f.append(b"checkpoint").unwrap();
            f.sync().unwrap();
            dir.sync_dir().unwrap();
            dir.rename("ckpt.tmp", "ckpt").unwrap();
            dir.crash();
            let names = dir.list().unwrap();
            assert_eq!(names.len(), 1, "seed {seed}: {names:?}");
            saw_old |= names[0] == "ckpt.tmp";
            saw_new |= names[0] == "ckpt";
            assert_eq!(read(&dir, &names[0]), b"checkpoint");
            dir.rename(&names[0], "ckpt2").unwrap();
            dir.sync_dir().unwrap();
            dir.crash();
            assert_eq!(dir.list().unwrap(), vec!["ckpt2".to_string()]);
        }
        assert!(saw_old && saw_new);
    }

    #[test]
    fn injected_write_faults_return_errors_naming_the_file() {
        // Goal: the Nth write fails with the planned errno and names file and operation.
        // Method: plan ENOSPC on the 2nd write and EIO on the 3rd.
        let dir = SimDir::new(7);
        let mut f = dir.create("w").unwrap();
        dir.set_faults(FaultPlan {
            faults: vec![
                Fault {
                    op: FaultOp::Write,
                    nth: 2,
                    kind: FaultKind::NoSpace,
                },
                Fault {
                    op: FaultOp::Write,
                    nth: 3,
                    kind: FaultKind::Eio,
                },
            ],
        });
        f.append(b"ok").unwrap();
        let err = f.append(b"full").unwrap_err();
        let forest_core::Error::Io { path, op, source } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(path, Path::new("/sim/w"));
        assert_eq!(*op, "write");
        assert_eq!(source.raw_os_error(), Some(ERRNO_ENOSPC));
        let err = f.write_at(0, b"io").unwrap_err();
        assert!(matches!(&err, forest_core::Error::Io { source, .. }
            if source.raw_os_error() == Some(ERRNO_EIO)));
        f.append(b"fine").unwrap();
    }

    #[test]
    fn after_a_failed_fsync_a_retry_does_not_make_the_data_durable() {
        // Goal: model Linux's fsync error semantics: the retried fsync succeeds but the
        // failed writes are not durable. Method: fail the first sync, retry, crash strictly,
        // and find at most a prefix of the failed data.
        let mut saw_loss = false;
        for seed in 0..50 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("log").unwrap();
            dir.sync_dir().unwrap();
            dir.set_faults(FaultPlan::sync(1));
            f.append(&[1u8; 100]).unwrap();
            assert!(f.sync().is_err());
            assert_eq!(
                read(&dir, "log").len(),
                100,
                "reads still see the page cache"
            );
            f.sync().unwrap();
            dir.crash_with(CrashMode::DropUnsynced);
            let got = read(&dir, "log");
            assert!(got.len() <= 100);
            saw_loss |= got.len() < 100;
        }
        assert!(saw_loss, "some failed fsync should lose data for good");
    }

    #[test]
    fn crashes_are_deterministic_per_seed() {
        // Goal: a failing seed can be replayed. Method: run the same script twice per mode.
        for mode in [CrashMode::Random, CrashMode::Scatter] {
            let run = || {
                let dir = SimDir::new(42);
                let mut f = dir.create("a").unwrap();
                for i in 0..10u8 {
                    f.append(&[i; 1000]).unwrap();
                }
                dir.crash_with(mode);
                dir.list().unwrap().first().map(|n| read(&dir, n))
            };
            assert_eq!(run(), run(), "{mode:?}");
        }
    }

    #[test]
    fn a_new_directory_vanishes_at_a_crash_until_its_parent_is_synced() {
        // Goal: a just-created directory, with files synced inside it, is lost by a power
        // loss before sync_parent, and kept after. Method: sync a file and the directory,
        // crash; redo it with sync_parent, crash; an old directory needs no sync_parent.
        let dir = SimDir::new_uncreated(3);
        assert!(!dir.is_entry_durable());
        let mut f = dir.create("a").unwrap();
        f.append(b"data").unwrap();
        f.sync().unwrap();
        dir.sync_dir().unwrap();
        assert_eq!(dir.durable_bytes("a"), None);
        dir.crash();
        assert_eq!(dir.list().unwrap(), Vec::<String>::new());
        assert!(!dir.is_entry_durable(), "it comes back as created anew");
        let mut f = dir.create("a").unwrap();
        f.append(b"data").unwrap();
        f.sync().unwrap();
        dir.sync_dir().unwrap();
        dir.sync_parent().unwrap();
        assert!(dir.is_entry_durable());
        dir.crash_with(CrashMode::DropUnsynced);
        assert_eq!(read(&dir, "a"), b"data");
        assert!(SimDir::new(3).is_entry_durable());
    }

    #[test]
    fn a_failed_sync_parent_is_not_fixed_by_a_retry() {
        // Goal: like a file fsync, a failed parent sync may lose the entry for good, and the
        // error names the parent. Method: fail the first sync_parent, retry, crash strictly.
        let mut saw_loss = false;
        for seed in 0..50 {
            let dir = SimDir::new_uncreated(seed);
            dir.create("a").unwrap().sync().unwrap();
            dir.sync_dir().unwrap();
            dir.set_faults(FaultPlan::sync(1));
            let text = dir.sync_parent().unwrap_err().to_string();
            assert!(text.starts_with("fsync directory /:"), "{text}");
            dir.sync_parent().unwrap();
            dir.crash_with(CrashMode::DropUnsynced);
            saw_loss |= dir.list().unwrap().is_empty();
        }
        assert!(
            saw_loss,
            "some failed parent sync should lose the directory"
        );
    }

    const PAGE: usize = TORN_PAGE_BYTES as usize;

    /// `len` bytes that are never zero and differ from page to page.
    fn pattern(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| ((i / 7 + i / PAGE + usize::from(salt)) % 255) as u8 + 1)
            .collect()
    }

    /// Checks that every page of `got` past `from` holds, from `from` on, either `live`'s
    /// bytes (zeros past its end) or zeros: a scattered page lands whole or not at all.
    fn assert_pages_whole(got: &[u8], live: &[u8], from: usize, seed: u64) {
        for start in (from / PAGE * PAGE..got.len()).step_by(PAGE) {
            let range = start.max(from)..got.len().min(start + PAGE);
            let landed = range
                .clone()
                .all(|i| got[i] == live.get(i).copied().unwrap_or(0));
            let lost = range.clone().all(|i| got[i] == 0);
            assert!(landed || lost, "seed {seed}: page at {start} is mixed");
        }
    }

    #[test]
    fn scatter_crash_never_changes_a_synced_byte() {
        // Goal: whatever order pages land in, synced bytes stay, even on the page they share
        // with unsynced ones. Method: sync 10,000 bytes (mid-page), append 15,000 more in
        // unaligned chunks, scatter-crash with many seeds.
        for seed in 0..200 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("log").unwrap();
            dir.sync_dir().unwrap();
            let live = pattern(25_000, 0);
            f.append(&live[..10_000]).unwrap();
            f.sync().unwrap();
            for chunk in live[10_000..].chunks(3_000) {
                f.append(chunk).unwrap();
            }
            dir.crash_scatter();
            let got = read(&dir, "log");
            assert!(got.len() >= 10_000, "seed {seed}: {}", got.len());
            assert_eq!(got[..10_000], live[..10_000], "seed {seed}");
            assert_pages_whole(&got, &live, 10_000, seed);
        }
    }

    #[test]
    fn scatter_crash_can_keep_a_later_page_and_lose_an_earlier_one() {
        // Goal: unsynced pages land in any order, leaving zero-filled holes (the prefix model
        // of `Random` never does). Method: append six unsynced pages to an empty file, crash,
        // and look for a lost page before a landed one.
        let mut saw_hole = false;
        for seed in 0..100 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("log").unwrap();
            dir.sync_dir().unwrap();
            let live = pattern(6 * PAGE, 1);
            f.append(&live).unwrap();
            dir.crash_scatter();
            let got = read(&dir, "log");
            assert_pages_whole(&got, &live, 0, seed);
            let landed: Vec<bool> = got.chunks(PAGE).map(|p| p[0] != 0).collect();
            saw_hole |= landed.windows(2).any(|w| !w[0] && w[1]);
        }
        assert!(saw_hole, "some seed should lose a page before a landed one");
    }

    #[test]
    fn scatter_crash_length_stays_within_its_bounds() {
        // Goal: the length after a scatter crash lies between the durable length (or a
        // pending truncate's, if shorter) and the larger of durable and live, and covers
        // every landed page. Method: sync three pages, truncate to 1,000 bytes and append
        // to five pages, crash with many seeds; see both ends of the range reached.
        let (mut saw_short, mut saw_long) = (false, false);
        for seed in 0..200 {
            let dir = SimDir::new(seed);
            let mut f = dir.create("log").unwrap();
            dir.sync_dir().unwrap();
            f.append(&pattern(3 * PAGE, 2)).unwrap();
            f.sync().unwrap();
            f.truncate(1_000).unwrap();
            let live = pattern(5 * PAGE, 3);
            f.append(&live[1_000..]).unwrap();
            let mut live_all = Vec::new();
            f.read_all(&mut live_all).unwrap();
            dir.crash_scatter();
            let got = read(&dir, "log");
            assert!((1_000..=5 * PAGE).contains(&got.len()), "seed {seed}");
            // A landed page (its probe byte is new) is visible whole.
            for page in 0..5 {
                let probe = (page * PAGE).max(1_000);
                if got.get(probe) == Some(&live_all[probe]) {
                    assert!(got.len() >= (page + 1) * PAGE, "seed {seed}: page {page}");
                }
            }
            saw_short |= got.len() < 3 * PAGE;
            saw_long |= got.len() == 5 * PAGE;
        }
        assert!(saw_short && saw_long);
    }
}
