//! The external sort behind a temporal checkpoint (issue 18; review rev-tckpt F3): the index
//! hands its versions out in no particular order ([`forest_core::TemporalIndex::versions_from`])
//! and format version 3 holds them in (timestamp, key) order, the order a load needs (time
//! splits, as in redo). Before, every version was copied into one vector and sorted in
//! memory: about the size of the retained history, under the checkpoints mutex.
//!
//! Now versions gather in a run of at most [`Budget::run_bytes`] (one arena of keys and
//! values, one small item per version), which is sorted and, once full, spilled to a run file
//! `checkpoint-<start_lsn>.run-<n>.tmp` (an unpublished checkpoint's name: an open after a
//! crash deletes it, `recovery.rs` step 1). At the end the runs are merged
//! [`Budget::fan_in`] at a time, each read through a [`ReadWindow`] of [`Budget::chunk`]
//! bytes, in passes until one merge hands the versions to the checkpoint. A single run is
//! never spilled: sorted in memory and handed out (small stores write no extra file).
//!
//! Memory: the run, plus `fan_in` windows of `chunk` bytes and the largest version each
//! during a merge, plus one spill buffer of `chunk` bytes: bounded by the budget and the
//! largest entry, whatever the number of versions. [`Stats::peak_buffered`] counts it (bytes
//! buffered, not the allocator's view). Cost: each version is written and read once per merge
//! pass beyond the first (one pass up to `run_bytes × fan_in`, 16 GiB by default).

use forest_core::{Error, Result, Timestamp};

use crate::file::{Dir, ReadWindow};

use super::checkpoint_name;

/// How much a temporal checkpoint's sort may buffer (module doc).
#[derive(Clone, Copy, Debug)]
pub(super) struct Budget {
    /// Bytes of versions sorted in memory at a time: a run.
    pub run_bytes: usize,
    /// Runs merged at a time.
    pub fan_in: usize,
    /// Bytes read from a run file, and written to one, at a time.
    pub chunk: usize,
}

impl Budget {
    /// About 64 MiB for the run and 8 MiB of windows.
    pub const DEFAULT: Self = Self {
        run_bytes: 64 << 20,
        fan_in: 32,
        chunk: 256 << 10,
    };
}

/// What a sort did, for tests and measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Stats {
    /// Versions sorted.
    pub versions: u64,
    /// Run files written (0: one run, sorted in memory).
    pub runs_spilled: u64,
    /// The most bytes buffered at once: the run's arena and items, the merge's windows (the
    /// chunk and the largest version asked of each), the spill buffer.
    pub peak_buffered: usize,
}

/// A version in the run: `arena[at..at + key_len]` is its key, the value follows.
#[derive(Clone, Copy)]
struct Item {
    ts: Timestamp,
    at: usize,
    key_len: u32,
    /// [`TOMBSTONE`] for a delete.
    value_len: u32,
}

/// Where sorted versions go: timestamp, key, value (None: a tombstone).
pub(super) type Emit<'a> = dyn FnMut(Timestamp, &[u8], Option<&[u8]>) -> Result<()> + 'a;

/// A version read from a run: timestamp, key, value (None: a tombstone).
type VersionRef<'a> = (Timestamp, &'a [u8], Option<&'a [u8]>);

/// An item's `value_len` for a tombstone (no entry's value is this long: `check_entry`).
const TOMBSTONE: u32 = u32::MAX;

/// A run file's record header: timestamp, key length, value length (or [`TOMBSTONE`]).
const RECORD_HEAD: usize = 16;

/// Sorts versions by (timestamp, key) in bounded memory (module doc).
pub(super) struct Sorter<'d> {
    dir: &'d dyn Dir,
    start_lsn: u64,
    budget: Budget,
    arena: Vec<u8>,
    items: Vec<Item>,
    /// Run files written and not yet merged away, oldest first.
    runs: Vec<String>,
    next_run: u64,
    stats: Stats,
}

impl<'d> Sorter<'d> {
    pub fn new(dir: &'d dyn Dir, start_lsn: u64, budget: Budget) -> Self {
        Self {
            dir,
            start_lsn,
            budget,
            arena: Vec::new(),
            items: Vec::new(),
            runs: Vec::new(),
            next_run: 0,
            stats: Stats::default(),
        }
    }

    fn buffered(&self) -> usize {
        self.arena.len() + self.items.len() * std::mem::size_of::<Item>()
    }

    fn note(&mut self, buffered: usize) {
        self.stats.peak_buffered = self.stats.peak_buffered.max(buffered);
    }

    /// Adds one version; spills the run once it is full.
    pub fn push(&mut self, ts: Timestamp, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let at = self.arena.len();
        self.arena.extend_from_slice(key);
        let value_len = match value {
            Some(v) => {
                self.arena.extend_from_slice(v);
                len_u32(v.len())?
            }
            None => TOMBSTONE,
        };
        self.items.push(Item {
            ts,
            at,
            key_len: len_u32(key.len())?,
            value_len,
        });
        self.stats.versions += 1;
        let buffered = self.buffered();
        self.note(buffered);
        if buffered >= self.budget.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    fn sort_run(&mut self) {
        let arena = &self.arena;
        let key = |i: &Item| &arena[i.at..i.at + i.key_len as usize];
        self.items
            .sort_unstable_by(|a, b| a.ts.cmp(&b.ts).then_with(|| key(a).cmp(key(b))));
    }

    /// Sorts the run and writes it to a new run file.
    fn spill(&mut self) -> Result<()> {
        self.sort_run();
        // Listed before it is created: whatever fails from here, `Drop` removes it.
        let name = self.new_run_name();
        self.runs.push(name.clone());
        let mut out = RunWriter::create(self.dir, &name, self.budget.chunk)?;
        let (arena, items) = (&self.arena, &self.items);
        for i in items {
            let key = &arena[i.at..i.at + i.key_len as usize];
            let value = (i.value_len != TOMBSTONE).then(|| {
                let v = i.at + i.key_len as usize;
                &arena[v..v + i.value_len as usize]
            });
            out.put(i.ts, key, value)?;
        }
        let peak = self.buffered() + out.buf.capacity();
        out.finish()?;
        self.note(peak);
        self.arena.clear();
        self.items.clear();
        self.stats.runs_spilled += 1;
        Ok(())
    }

    fn new_run_name(&mut self) -> String {
        let name = format!(
            "{}.run-{}{}",
            checkpoint_name(self.start_lsn),
            self.next_run,
            super::TMP_SUFFIX
        );
        self.next_run += 1;
        name
    }

    /// Hands every version to `emit` in (timestamp, key) order, each once; removes the run
    /// files. Returns what the sort did.
    pub fn finish(mut self, emit: &mut Emit<'_>) -> Result<Stats> {
        if self.runs.is_empty() {
            self.sort_run();
            for i in &self.items {
                let key = &self.arena[i.at..i.at + i.key_len as usize];
                let value = (i.value_len != TOMBSTONE).then(|| {
                    let v = i.at + i.key_len as usize;
                    &self.arena[v..v + i.value_len as usize]
                });
                emit(i.ts, key, value)?;
            }
            return Ok(self.stats);
        }
        if !self.items.is_empty() {
            self.spill()?;
        }
        // The arena's memory goes back before the merge's windows are taken.
        self.arena = Vec::new();
        self.items = Vec::new();
        let fan_in = self.budget.fan_in.max(2);
        while self.runs.len() > fan_in {
            // The output run is created while the group is still listed, so a failed creation
            // leaves every run to `Drop` (review rev-tsb2 F2).
            let name = self.new_run_name();
            self.runs.push(name.clone());
            let mut out = RunWriter::create(self.dir, &name, self.budget.chunk)?;
            let group: Vec<String> = self.runs.drain(..fan_in).collect();
            let merged = self
                .merge(&group, &mut |ts, key, value| out.put(ts, key, value))
                .and_then(|peak| {
                    let peak = peak + out.buf.capacity();
                    out.finish()?;
                    Ok(peak)
                });
            if merged.is_err() {
                self.runs.extend(group);
                return merged.map(|_| self.stats);
            }
            self.note(merged?);
            if let Err(e) = self.remove_runs(&group) {
                self.runs.extend(group);
                return Err(e);
            }
        }
        let group = std::mem::take(&mut self.runs);
        let peak = self.merge(&group, emit);
        self.runs = group;
        let peak = peak?;
        self.note(peak);
        self.remove_runs(&self.runs)?;
        self.runs.clear();
        Ok(self.stats)
    }

    /// Merges the run files `names` into `emit`; returns the most bytes its windows held.
    fn merge(&self, names: &[String], emit: &mut Emit<'_>) -> Result<usize> {
        let mut readers = names
            .iter()
            .map(|n| RunReader::open(self.dir, n, self.budget.chunk))
            .collect::<Result<Vec<_>>>()?;
        for r in &mut readers {
            r.advance()?;
        }
        let mut peak = 0;
        loop {
            peak = peak.max(readers.iter().map(RunReader::buffered).sum::<usize>());
            let mut least: Option<usize> = None;
            for (i, r) in readers.iter().enumerate() {
                let Some(head) = r.head() else { continue };
                if least.is_none_or(|l| {
                    let best = readers[l].head().expect("a head");
                    (head.0, head.1) < (best.0, best.1)
                }) {
                    least = Some(i);
                }
            }
            let Some(i) = least else { return Ok(peak) };
            let (ts, key, value) = readers[i].head().expect("a head");
            emit(ts, key, value)?;
            readers[i].advance()?;
        }
    }

    fn remove_runs(&self, names: &[String]) -> Result<()> {
        names.iter().try_for_each(|n| self.dir.remove(n))
    }
}

impl Drop for Sorter<'_> {
    /// A failed checkpoint leaves no run file behind (best effort: an open deletes the rest).
    fn drop(&mut self) {
        for name in &self.runs {
            let _ = self.dir.remove(name);
        }
    }
}

fn len_u32(len: usize) -> Result<u32> {
    u32::try_from(len)
        .ok()
        .filter(|&l| l != TOMBSTONE)
        .ok_or_else(|| Error::InvalidUse(format!("a version of {len} bytes is too large")))
}

/// A run file being written through a buffer of `chunk` bytes.
struct RunWriter {
    file: Box<dyn crate::file::File>,
    buf: Vec<u8>,
    chunk: usize,
}

impl RunWriter {
    fn create(dir: &dyn Dir, name: &str, chunk: usize) -> Result<Self> {
        if dir.exists(name)? {
            dir.remove(name)?;
        }
        Ok(Self {
            file: dir.create(name)?,
            buf: Vec::with_capacity(chunk),
            chunk,
        })
    }

    fn put(&mut self, ts: Timestamp, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        // Appended before it would outgrow `chunk` (a larger version grows it once).
        let len = RECORD_HEAD + key.len() + value.map_or(0, <[u8]>::len);
        if !self.buf.is_empty() && self.buf.len() + len > self.chunk {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        self.buf.extend_from_slice(&ts.to_le_bytes());
        self.buf
            .extend_from_slice(&len_u32(key.len())?.to_le_bytes());
        let value_len = value.map_or(Ok(TOMBSTONE), |v| len_u32(v.len()))?;
        self.buf.extend_from_slice(&value_len.to_le_bytes());
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value.unwrap_or_default());
        Ok(())
    }

    /// Appends what is buffered. No fsync: a run is scratch, and the checkpoint that reads
    /// it is synced before it is published.
    fn finish(mut self) -> Result<()> {
        self.file.append(&self.buf)
    }
}

/// A run file read front to back; `head` is the version at `at` once [`Self::advance`]d.
struct RunReader {
    window: ReadWindow,
    chunk: usize,
    /// The file offset of the next record.
    next: u64,
    /// The head's timestamp, key and value lengths, and file offset (None: the run is done).
    head: Option<(Timestamp, usize, Option<usize>, u64)>,
    largest: usize,
}

impl RunReader {
    fn open(dir: &dyn Dir, name: &str, chunk: usize) -> Result<Self> {
        Ok(Self {
            window: ReadWindow::new(dir.open(name)?, chunk)?,
            chunk,
            next: 0,
            head: None,
            largest: RECORD_HEAD,
        })
    }

    /// The most bytes the window may hold (its invariant: the largest `need` plus `chunk`).
    fn buffered(&self) -> usize {
        self.largest + self.chunk
    }

    /// Reads the next record's header and bytes into the window.
    fn advance(&mut self) -> Result<()> {
        if self.next >= self.window.len() {
            self.head = None;
            return Ok(());
        }
        let at = self.next;
        let damaged = |path: &std::path::Path| Error::Corrupt {
            path: path.to_path_buf(),
            offset: at,
            what: "a checkpoint's run file ends inside a record".into(),
        };
        let head: [u8; RECORD_HEAD] =
            match self.window.bytes_at(at, RECORD_HEAD)?.get(..RECORD_HEAD) {
                Some(h) => h.try_into().expect("RECORD_HEAD bytes"),
                None => return Err(damaged(self.window.path())),
            };
        let ts = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let key_len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
        let value_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        let value_len = (value_len != TOMBSTONE).then_some(value_len as usize);
        let total = RECORD_HEAD + key_len + value_len.unwrap_or(0);
        self.largest = self.largest.max(total);
        if self.window.bytes_at(at, total)?.len() < total {
            return Err(damaged(self.window.path()));
        }
        self.head = Some((ts, key_len, value_len, at));
        self.next = at + total as u64;
        Ok(())
    }

    /// The head version: timestamp, key, value (None: a tombstone).
    fn head(&self) -> Option<VersionRef<'_>> {
        let (ts, key_len, value_len, at) = self.head?;
        let bytes = self.window.peek(at);
        let key = &bytes[RECORD_HEAD..RECORD_HEAD + key_len];
        let value = value_len.map(|v| &bytes[RECORD_HEAD + key_len..RECORD_HEAD + key_len + v]);
        Some((ts, key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::SimDir;

    const TINY: Budget = Budget {
        run_bytes: 512,
        fan_in: 3,
        chunk: 64,
    };

    type Version = (Timestamp, Vec<u8>, Option<Vec<u8>>);

    /// Versions in a scrambled order: timestamps repeat across keys, some tombstones.
    fn scrambled(n: u64) -> Vec<Version> {
        (0..n)
            .map(|i| {
                let j = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % n;
                let key = format!("k{:03}", j % 97).into_bytes();
                let value = (!j.is_multiple_of(7)).then(|| vec![j as u8; (j % 40) as usize]);
                (j / 3, key, value)
            })
            .collect()
    }

    fn sorted_by(dir: &SimDir, budget: Budget, input: &[Version]) -> (Vec<Version>, Stats) {
        let mut sorter = Sorter::new(dir, 7, budget);
        for (ts, k, v) in input {
            sorter.push(*ts, k, v.as_deref()).expect("push");
        }
        let mut out = Vec::new();
        let stats = sorter
            .finish(&mut |ts, k, v| {
                out.push((ts, k.to_vec(), v.map(<[u8]>::to_vec)));
                Ok(())
            })
            .expect("finish");
        (out, stats)
    }

    // Goal: spilled runs merged in several passes give (timestamp, key) order, every version
    // once, and leave no run file. Method: 3 000 versions through a 512-byte run and merges
    // of 3 (dozens of runs, three passes or more) against a sort in memory.
    #[test]
    fn runs_merge_into_timestamp_key_order() {
        let dir = SimDir::new(4);
        let input = scrambled(3000);
        let (out, stats) = sorted_by(&dir, TINY, &input);
        let mut want = input.clone();
        want.sort();
        assert_eq!(out, want);
        assert!(stats.runs_spilled > 27, "{stats:?}");
        assert_eq!(dir.list().expect("list"), Vec::<String>::new());
        let (in_memory, stats) = sorted_by(&dir, Budget::DEFAULT, &input);
        assert_eq!(in_memory, want);
        assert_eq!(stats.runs_spilled, 0);
    }

    // Goal (rev-tckpt F3): the sort's peak of bytes buffered does not grow with the number
    // of versions. Method: 1 000 and 16 000 versions with the same tiny budget; both peaks
    // are within the budget's bound (the run, the merge's windows with the largest version,
    // a spill buffer), the same for both, while the runs grow 16-fold.
    #[test]
    fn peak_buffered_does_not_grow_with_the_versions() {
        let largest = RECORD_HEAD + 4 + 40;
        let bound = TINY.run_bytes
            + largest
            + std::mem::size_of::<Item>()
            + TINY.fan_in * (TINY.chunk + largest)
            + TINY.chunk
            + largest;
        let mut peaks = Vec::new();
        for n in [1000, 16_000] {
            let dir = SimDir::new(4);
            let (_, stats) = sorted_by(&dir, TINY, &scrambled(n));
            assert!(stats.peak_buffered <= bound, "{n}: {stats:?} over {bound}");
            peaks.push((n, stats));
        }
        let (small, large) = (peaks[0].1, peaks[1].1);
        assert!(large.runs_spilled >= 15 * small.runs_spilled, "{peaks:?}");
        assert!(
            large.peak_buffered <= small.peak_buffered + largest,
            "the peak grew with the versions: {peaks:?}"
        );
    }

    // Goal: a temporal checkpoint sorted through spilled runs is the one sorted in memory,
    // byte for byte, and leaves only itself in the directory. Method: 3 000 versions of 37
    // keys and a hot key on small pages (key and time splits), a threshold and a cut inside.
    #[test]
    fn a_spilled_checkpoint_is_the_in_memory_one() {
        let index = crate::new_engine("tsbtree:page=4,index_page=4").expect("engine");
        let temporal = index.as_temporal().expect("temporal");
        for i in 1..=3000u64 {
            let key = if i.is_multiple_of(3) {
                b"hot".to_vec()
            } else {
                format!("k{}", i % 37).into_bytes()
            };
            let value = (!i.is_multiple_of(11)).then(|| i.to_le_bytes().to_vec());
            temporal
                .put_version(&key, 10 * i, value.as_deref())
                .expect("in order");
        }
        let block = super::super::TemporalBlock {
            threshold: 5_005,
            cut: 29_000,
        };
        let mut files = Vec::new();
        for budget in [Budget::DEFAULT, TINY] {
            let dir = SimDir::new(4);
            let (info, stats) =
                super::super::write_temporal_with(&dir, temporal, 3, block, || 8, budget)
                    .expect("write");
            assert_eq!(
                dir.list().expect("list"),
                vec![super::super::checkpoint_tmp_name(3)]
            );
            let (_, data) =
                super::super::read(&dir, &super::super::checkpoint_tmp_name(3)).expect("read");
            files.push((info, stats.runs_spilled, data));
        }
        assert_eq!(files[0].1, 0, "the default budget sorts in memory");
        assert!(files[1].1 > 10, "the tiny budget spills runs");
        assert_eq!(files[0].0, files[1].0);
        assert!(files[0].0.entry_count > 1000);
        assert!(files[0].2 == files[1].2, "the two files differ");
    }

    /// A directory that fails the `fail_at`-th creation (from 1) of a run file.
    struct FailingRunCreate {
        inner: SimDir,
        fail_at: u64,
        creates: std::sync::atomic::AtomicU64,
    }

    impl Dir for FailingRunCreate {
        fn path(&self) -> &std::path::Path {
            self.inner.path()
        }
        fn create(&self, name: &str) -> Result<Box<dyn crate::file::File>> {
            if name.contains(".run-") {
                let n = self
                    .creates
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1;
                if n == self.fail_at {
                    return Err(Error::Io {
                        path: self.inner.path().join(name),
                        op: "create",
                        source: std::io::Error::other("injected: no space for a run file"),
                    });
                }
            }
            self.inner.create(name)
        }
        fn open(&self, name: &str) -> Result<Box<dyn crate::file::File>> {
            self.inner.open(name)
        }
        fn exists(&self, name: &str) -> Result<bool> {
            self.inner.exists(name)
        }
        fn list(&self) -> Result<Vec<String>> {
            self.inner.list()
        }
        fn rename(&self, from: &str, to: &str) -> Result<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, name: &str) -> Result<()> {
            self.inner.remove(name)
        }
        fn sync_dir(&self) -> Result<()> {
            self.inner.sync_dir()
        }
        fn sync_parent(&self) -> Result<()> {
            self.inner.sync_parent()
        }
        fn lock(&self) -> Result<crate::file::DirLock> {
            self.inner.lock()
        }
    }

    // rev-tsb2 F2: the module doc and `Drop for Sorter` promise that a failed sort leaves no
    // run file behind. Method: the same multi-pass sort (TINY budget, merges of 3) with the
    // k-th run file's creation failing, for every k: after the error the directory must be
    // empty. A merge pass drains its group of runs out of `self.runs` before it creates its
    // output run, so when that creation fails (`?`) the group's files are forgotten.
    #[test]
    fn a_failed_run_creation_leaves_no_run_file() {
        let input = scrambled(3000);
        let mut leaks = Vec::new();
        for fail_at in 1.. {
            let dir = FailingRunCreate {
                inner: SimDir::new(4),
                fail_at,
                creates: Default::default(),
            };
            let mut sorter = Sorter::new(&dir, 7, TINY);
            let mut failed = false;
            for (ts, k, v) in &input {
                if sorter.push(*ts, k, v.as_deref()).is_err() {
                    failed = true;
                    break;
                }
            }
            let failed = if failed {
                drop(sorter);
                true
            } else {
                sorter.finish(&mut |_, _, _| Ok(())).is_err()
            };
            if !failed {
                break;
            }
            let left = dir.list().expect("list");
            if !left.is_empty() {
                leaks.push((fail_at, left));
            }
        }
        assert!(
            leaks.is_empty(),
            "run files left after {} of the failed sorts, first: {:?}",
            leaks.len(),
            leaks.first()
        );
    }
}
