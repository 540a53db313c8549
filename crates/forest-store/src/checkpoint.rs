//! Checkpoints: a scan of the index written to a file and published by an atomic rename
//! (masstree.md §5 "checkpoints"; issue 5 "Checkpoints and recovery"). Format version 2
//! (1 still read), byte by byte in docs/FORMAT.md; a temporal store's checkpoint is format
//! version 3 (below).
//!
//! A checkpoint named `checkpoint-<start_lsn>` holds, for every key, a value at least as new
//! as the state before `start_lsn` and no newer than its `end_lsn`: the store takes
//! `start_lsn` with every shard locked (so every LSN below it is applied), scans while writes
//! continue, reads `end_lsn` after the scan, and publishes only once the logs are durable
//! through `end_lsn`. Replaying the logs from `start_lsn` then yields each key's last logged
//! value (records log full values, so replaying over a newer value is harmless).
//!
//! Invariants:
//! - A published (renamed) checkpoint was fsynced whole before the rename, and the rename is
//!   durable once the directory is synced; a `.tmp` file is never read.
//! - Keys are strictly ascending (the scan is ascending); the loader checks it.
//! - Every entry and the header and trailer carry a crc32c; the loaders verify all of them.
//!
//! Temporal checkpoints (format version 3; issue 18, `store/temporal.rs`): a temporal store's
//! versions instead of keys and values, each with its timestamp and tombstones marked, in
//! strictly ascending (timestamp, key) order, which is the order
//! [`forest_core::TemporalIndex::put_version`] needs to rebuild the pages (time splits take
//! the clock's newest timestamp as split time, so a page's versions must arrive in timestamp
//! order, as in redo). It holds the versions that reads at or after the retention threshold
//! `T` need (`TemporalIndex::versions_from`), up to the cut: the clock's time read with every
//! shard locked when the logs were rotated at `start_lsn`, so every unit below `start_lsn`
//! (timestamp at most the cut) is in it and none after. A 24-byte block after the header
//! records `T` and the cut; the header is version 2's, so a build that reads only 1 and 2
//! refuses the file by its version. The writer sorts the versions in memory (they are copied
//! out of the index first): memory about the size of the retained history during the write.
//!
//! Two loaders with one set of checks: [`decode`] over a whole file in memory (tests, fuzz),
//! and [`CheckpointStream`], which recovery uses: it reads through a bounded window (issue 5:
//! 10 M keys must not need the file in memory) and hands out each entry once checked;
//! recovery loads into a fresh index and drops it if any later check fails, so a damaged
//! checkpoint never leaves a half-loaded index behind.

use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};

use forest_core::{
    Error, Index, Order, Result, TemporalIndex, Timestamp, KEY_BYTES_MAX, STORED_VALUE_BYTES_MAX,
};

use crate::file::{Dir, File, ReadWindow, READ_CHUNK_BYTES};

mod sort;

/// The first 8 bytes of a checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"FORESTCP";
/// The first 8 bytes of a checkpoint's trailer.
pub const CHECKPOINT_TRAILER_MAGIC: [u8; 8] = *b"FORESTCE";
/// The checkpoint format version this code writes. 2: a stamped key's value may hold
/// `STORED_VALUE_BYTES_MAX` bytes, so that a build that reads only 1 refuses such a
/// checkpoint by its version instead of calling an entry damaged.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 2;
/// The oldest checkpoint format version this code reads: 1 has 2's layout (and the builds of
/// session 10 wrote stamped values over the limit under it), so it is read by 2's rules.
pub const CHECKPOINT_FORMAT_VERSION_OLDEST: u32 = 1;
/// Bytes of the header.
pub const CHECKPOINT_HEADER_BYTES: usize = 32;
/// Bytes of the trailer.
pub const CHECKPOINT_TRAILER_BYTES: usize = 32;
/// Bytes of an entry before its key: key_len, value_len, crc32c.
pub const ENTRY_HEADER_BYTES: usize = 12;
/// Bytes gathered before each append while writing: large writes, bounded memory.
pub const CHECKPOINT_WRITE_BUFFER_BYTES: usize = 1 << 20;
/// The format version of a temporal store's checkpoint: version 2's header and trailer, a
/// temporal block after the header, entries that are versions (module doc).
pub const CHECKPOINT_FORMAT_TEMPORAL: u32 = 3;
/// Bytes of a temporal checkpoint's block after the header: threshold, cut, reserved, crc32c.
pub const TEMPORAL_BLOCK_BYTES: usize = 24;
/// Bytes of a temporal entry before its key: key_len, value_len, crc32c, flags, timestamp.
pub const TEMPORAL_ENTRY_HEADER_BYTES: usize = 24;
/// A temporal entry's flag: the version is a tombstone (its value is empty).
pub const ENTRY_FLAG_TOMBSTONE: u32 = 1;
const TEMPORAL_TOO_SHORT: &str = "temporal checkpoint shorter than its header, block and trailer";
/// The error text for a temporal checkpoint handed to a reader of keys and values.
const TEMPORAL_AS_PLAIN: &str = "a temporal checkpoint (format version 3) holds versions, \
                                 not keys and values: read it with next_version";

const CHECKPOINT_PREFIX: &str = "checkpoint-";
const TMP_SUFFIX: &str = ".tmp";

/// The name of the published checkpoint that starts at `start_lsn` (sorts by LSN).
pub fn checkpoint_name(start_lsn: u64) -> String {
    format!("{CHECKPOINT_PREFIX}{start_lsn:020}")
}

/// The name a checkpoint is written under before its rename.
pub fn checkpoint_tmp_name(start_lsn: u64) -> String {
    format!("{}{TMP_SUFFIX}", checkpoint_name(start_lsn))
}

/// The start LSN of a published checkpoint's name, `None` for any other name.
pub fn parse_checkpoint_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(CHECKPOINT_PREFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is an unpublished checkpoint (left by a crash; deleted at open).
pub fn is_checkpoint_tmp(name: &str) -> bool {
    name.starts_with(CHECKPOINT_PREFIX) && name.ends_with(TMP_SUFFIX)
}

/// What a checkpoint holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub start_lsn: u64,
    /// The last LSN allocated when the scan ended.
    pub end_lsn: u64,
    pub entry_count: u64,
    pub bytes: u64,
}

/// A temporal checkpoint's block after the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemporalBlock {
    /// The retention threshold `T` when it was written: no version only times below it
    /// need is in it.
    pub threshold: Timestamp,
    /// Every version with a timestamp at most this (and none later) that times from
    /// `threshold` on need is in it: the clock when the logs rotated at `start_lsn`.
    pub cut: Timestamp,
}

/// One checkpoint entry: a key and value, or (temporal) a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    /// `None`: a tombstone (temporal checkpoints only).
    pub value: Option<&'a [u8]>,
    /// The version's timestamp (temporal checkpoints only).
    pub ts: Option<Timestamp>,
}

fn encode_header(start_lsn: u64, version: u32, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&CHECKPOINT_MAGIC);
    buf.extend_from_slice(&version.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(&start_lsn.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
}

fn encode_entry(key: &[u8], value: &[u8], buf: &mut Vec<u8>) {
    let key_len = u32::try_from(key.len()).expect("keys are within KEY_BYTES_MAX");
    let value_len = u32::try_from(value.len()).expect("values are within STORED_VALUE_BYTES_MAX");
    let mut lens = [0u8; 8];
    lens[..4].copy_from_slice(&key_len.to_le_bytes());
    lens[4..].copy_from_slice(&value_len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&lens), key), value);
    buf.extend_from_slice(&lens);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
}

fn encode_temporal_block(block: TemporalBlock, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&block.threshold.to_le_bytes());
    buf.extend_from_slice(&block.cut.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// The crc32c of a temporal entry: its header without the crc field, the key, the value.
fn temporal_entry_crc(head: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[..8]), &head[12..24]);
    crc32c::crc32c_append(crc32c::crc32c_append(crc, key), value)
}

fn encode_temporal_entry(key: &[u8], ts: Timestamp, value: Option<&[u8]>, buf: &mut Vec<u8>) {
    let key_len = u32::try_from(key.len()).expect("keys are within KEY_BYTES_MAX");
    let bytes = value.unwrap_or_default();
    let value_len = u32::try_from(bytes.len()).expect("values are within STORED_VALUE_BYTES_MAX");
    let flags = if value.is_none() {
        ENTRY_FLAG_TOMBSTONE
    } else {
        0
    };
    let mut head = [0u8; TEMPORAL_ENTRY_HEADER_BYTES];
    head[..4].copy_from_slice(&key_len.to_le_bytes());
    head[4..8].copy_from_slice(&value_len.to_le_bytes());
    head[12..16].copy_from_slice(&flags.to_le_bytes());
    head[16..24].copy_from_slice(&ts.to_le_bytes());
    let crc = temporal_entry_crc(&head, key, bytes);
    head[8..12].copy_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&head);
    buf.extend_from_slice(key);
    buf.extend_from_slice(bytes);
}

fn encode_trailer(entry_count: u64, end_lsn: u64, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&CHECKPOINT_TRAILER_MAGIC);
    buf.extend_from_slice(&entry_count.to_le_bytes());
    buf.extend_from_slice(&end_lsn.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// Scans `index` into `checkpoint-<start_lsn>.tmp` and fsyncs it; `end_lsn` is called once
/// the scan is over. The caller makes the logs durable through the returned `end_lsn`, then
/// calls [`publish`].
pub fn write(
    dir: &dyn Dir,
    index: &dyn Index,
    start_lsn: u64,
    end_lsn: impl FnOnce() -> u64,
) -> Result<CheckpointInfo> {
    write_file(dir, start_lsn, end_lsn, |out| {
        encode_header(start_lsn, CHECKPOINT_FORMAT_VERSION, &mut out.buf);
        let mut failure = None;
        index.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            &mut |key, value| {
                encode_entry(key, value, &mut out.buf);
                match out.entry_done() {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failure = Some(e);
                        ControlFlow::Break(())
                    }
                }
            },
        );
        failure.map_or(Ok(()), Err)
    })
}

/// A temporal store's checkpoint (format version 3, module doc) into
/// `checkpoint-<start_lsn>.tmp`, fsynced: every version that reads from `block.threshold` on
/// need, up to `block.cut`, in (timestamp, key) order, sorted in bounded memory (`sort.rs`).
/// As [`write`] otherwise.
pub fn write_temporal(
    dir: &dyn Dir,
    index: &dyn TemporalIndex,
    start_lsn: u64,
    block: TemporalBlock,
    end_lsn: impl FnOnce() -> u64,
) -> Result<CheckpointInfo> {
    write_temporal_with(dir, index, start_lsn, block, end_lsn, sort::Budget::DEFAULT)
        .map(|(info, _)| info)
}

/// [`write_temporal`] with the sort's memory `budget`; also what the sort did.
fn write_temporal_with(
    dir: &dyn Dir,
    index: &dyn TemporalIndex,
    start_lsn: u64,
    block: TemporalBlock,
    end_lsn: impl FnOnce() -> u64,
    budget: sort::Budget,
) -> Result<(CheckpointInfo, sort::Stats)> {
    let mut sorter = sort::Sorter::new(dir, start_lsn, budget);
    let mut failure = None;
    index.versions_from(
        block.threshold,
        block.cut,
        &mut |key, ts, value| match sorter.push(ts, key, value) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        },
    )?;
    if let Some(e) = failure {
        return Err(e);
    }
    let mut stats = sort::Stats::default();
    let info = write_file(dir, start_lsn, end_lsn, |out| {
        encode_header(start_lsn, CHECKPOINT_FORMAT_TEMPORAL, &mut out.buf);
        encode_temporal_block(block, &mut out.buf);
        stats = sorter.finish(&mut |ts, key, value| {
            encode_temporal_entry(key, ts, value, &mut out.buf);
            out.entry_done()
        })?;
        Ok(())
    })?;
    Ok((info, stats))
}

/// A checkpoint file being written: bytes gathered, appended in large writes.
struct Out {
    file: Box<dyn File>,
    buf: Vec<u8>,
    bytes: u64,
    entry_count: u64,
}

impl Out {
    /// Counts the entry just encoded; appends the buffer once it is large.
    fn entry_done(&mut self) -> Result<()> {
        self.entry_count += 1;
        if self.buf.len() >= CHECKPOINT_WRITE_BUFFER_BYTES {
            self.file.append(&self.buf)?;
            self.bytes += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Writes `checkpoint-<start_lsn>.tmp` with the header and entries `fill` encodes, then the
/// trailer, and fsyncs it; on any error the file is removed (best effort).
fn write_file(
    dir: &dyn Dir,
    start_lsn: u64,
    end_lsn: impl FnOnce() -> u64,
    fill: impl FnOnce(&mut Out) -> Result<()>,
) -> Result<CheckpointInfo> {
    let name = checkpoint_tmp_name(start_lsn);
    if dir.exists(&name)? {
        dir.remove(&name)?;
    }
    let written = (|| {
        let mut out = Out {
            file: dir.create(&name)?,
            buf: Vec::with_capacity(CHECKPOINT_WRITE_BUFFER_BYTES + CHECKPOINT_HEADER_BYTES),
            bytes: 0,
            entry_count: 0,
        };
        fill(&mut out)?;
        let end_lsn = end_lsn();
        encode_trailer(out.entry_count, end_lsn, &mut out.buf);
        out.file.append(&out.buf)?;
        out.bytes += out.buf.len() as u64;
        out.file.sync()?;
        Ok(CheckpointInfo {
            start_lsn,
            end_lsn,
            entry_count: out.entry_count,
            bytes: out.bytes,
        })
    })();
    if written.is_err() {
        // A full disk must not stay full of a checkpoint nobody will publish (issue 12);
        // the removal is best effort, the next open deletes what is left.
        let _ = dir.remove(&name);
    }
    written
}

/// Publishes the written checkpoint of `start_lsn`: rename, then fsync the directory.
pub fn publish(dir: &dyn Dir, start_lsn: u64) -> Result<()> {
    dir.rename(&checkpoint_tmp_name(start_lsn), &checkpoint_name(start_lsn))?;
    dir.sync_dir()
}

fn corrupt(path: &Path, offset: usize, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.into(),
    }
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"))
}

/// A checked checkpoint: its info and its entries, borrowing from the file's bytes.
pub type DecodedCheckpoint<'a> = (CheckpointInfo, Vec<(&'a [u8], &'a [u8])>);

/// Checks a whole checkpoint file and returns its entries; any damage (including a missing
/// trailer: a checkpoint cut short) is [`Error::Corrupt`] with the offset.
pub fn decode<'a>(path: &Path, data: &'a [u8]) -> Result<DecodedCheckpoint<'a>> {
    if data.len() < CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES {
        return Err(corrupt(
            path,
            0,
            "checkpoint shorter than its header and trailer",
        ));
    }
    let (start_lsn, version) = check_header(path, &data[..CHECKPOINT_HEADER_BYTES])?;
    if version == CHECKPOINT_FORMAT_TEMPORAL {
        // The stream's checks at open first, so that both readers fail at one offset.
        let least = CHECKPOINT_HEADER_BYTES + TEMPORAL_BLOCK_BYTES + CHECKPOINT_TRAILER_BYTES;
        if data.len() < least {
            return Err(corrupt(path, CHECKPOINT_HEADER_BYTES, TEMPORAL_TOO_SHORT));
        }
        let block = &data[CHECKPOINT_HEADER_BYTES..CHECKPOINT_HEADER_BYTES + TEMPORAL_BLOCK_BYTES];
        check_temporal_block(path, block)?;
        return Err(corrupt(path, 8, TEMPORAL_AS_PLAIN));
    }
    let entries_end = data.len() - CHECKPOINT_TRAILER_BYTES;
    let mut entries = Vec::new();
    let mut at = CHECKPOINT_HEADER_BYTES;
    let mut previous: Option<&[u8]> = None;
    while at < entries_end {
        if entries_end - at < ENTRY_HEADER_BYTES {
            return Err(corrupt(path, at, "entry header runs into the trailer"));
        }
        let key_len = u32_at(data, at) as usize;
        let value_len = u32_at(data, at + 4) as usize;
        if key_len > KEY_BYTES_MAX || value_len > STORED_VALUE_BYTES_MAX {
            return Err(corrupt(path, at, "entry length over the limits"));
        }
        let body = at + ENTRY_HEADER_BYTES;
        if entries_end - body < key_len + value_len {
            return Err(corrupt(path, at, "entry runs into the trailer"));
        }
        let key = &data[body..body + key_len];
        let value = &data[body + key_len..body + key_len + value_len];
        let crc = crc32c::crc32c_append(
            crc32c::crc32c_append(crc32c::crc32c(&data[at..at + 8]), key),
            value,
        );
        if crc != u32_at(data, at + 8) {
            return Err(corrupt(path, at, "entry checksum mismatch"));
        }
        if previous.is_some_and(|p| p >= key) {
            return Err(corrupt(path, at, "keys out of order"));
        }
        previous = Some(key);
        entries.push((key, value));
        at = body + key_len + value_len;
    }
    let trailer = &data[entries_end..];
    let entry_count = check_trailer(path, entries_end, trailer, entries.len() as u64)?;
    let end_lsn = u64_at(trailer, 16);
    if end_lsn.saturating_add(1) < start_lsn {
        return Err(corrupt(path, entries_end, "end LSN before start LSN"));
    }
    Ok((
        CheckpointInfo {
            start_lsn,
            end_lsn,
            entry_count,
            bytes: data.len() as u64,
        },
        entries,
    ))
}

/// A checkpoint decoded front to back in bounded memory: [`CheckpointStream::next_entry`]
/// hands out the entries one by one, checking each; the last call checks the trailer. The
/// same checks as [`decode`], in the same order, so any damage is the same error; but an
/// entry is handed out before the rest of the file is checked, so a caller loads into a
/// fresh index and drops it on error (recovery does).
#[derive(Debug)]
pub struct CheckpointStream {
    window: ReadWindow,
    path: PathBuf,
    start_lsn: u64,
    /// A temporal checkpoint's block (format version 3).
    temporal: Option<TemporalBlock>,
    entries_end: u64,
    at: u64,
    previous: Vec<u8>,
    previous_ts: Timestamp,
    entry_count: u64,
    info: Option<CheckpointInfo>,
}

impl CheckpointStream {
    /// Opens the checkpoint `name` of `dir` and checks its header.
    pub fn open(dir: &dyn Dir, name: &str) -> Result<Self> {
        Self::from_file(dir.open(name)?)
    }

    /// Checks the header of the checkpoint in `file`.
    pub fn from_file(file: Box<dyn File>) -> Result<Self> {
        Self::with_chunk(file, READ_CHUNK_BYTES)
    }

    pub(crate) fn with_chunk(file: Box<dyn File>, chunk: usize) -> Result<Self> {
        let path = file.path().to_path_buf();
        let mut window = ReadWindow::new(file, chunk)?;
        let len = window.len();
        if len < (CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES) as u64 {
            return Err(corrupt(
                &path,
                0,
                "checkpoint shorter than its header and trailer",
            ));
        }
        let header = window.bytes_at(0, CHECKPOINT_HEADER_BYTES)?;
        let (start_lsn, version) = check_header(&path, &header[..CHECKPOINT_HEADER_BYTES])?;
        let mut at = CHECKPOINT_HEADER_BYTES as u64;
        let mut temporal = None;
        if version == CHECKPOINT_FORMAT_TEMPORAL {
            let least = CHECKPOINT_HEADER_BYTES + TEMPORAL_BLOCK_BYTES + CHECKPOINT_TRAILER_BYTES;
            if len < least as u64 {
                return Err(corrupt(&path, CHECKPOINT_HEADER_BYTES, TEMPORAL_TOO_SHORT));
            }
            let block = window.bytes_at(at, TEMPORAL_BLOCK_BYTES)?;
            temporal = Some(check_temporal_block(&path, block)?);
            at += TEMPORAL_BLOCK_BYTES as u64;
        }
        Ok(Self {
            window,
            path,
            start_lsn,
            temporal,
            entries_end: len - CHECKPOINT_TRAILER_BYTES as u64,
            at,
            previous: Vec::new(),
            previous_ts: 0,
            entry_count: 0,
            info: None,
        })
    }

    /// A temporal checkpoint's block (threshold and cut); `None` for keys and values.
    pub fn temporal(&self) -> Option<TemporalBlock> {
        self.temporal
    }

    /// The checkpoint's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The start LSN from the header.
    pub fn start_lsn(&self) -> u64 {
        self.start_lsn
    }

    /// The next key and value, checked; `None` once every entry was handed out and the
    /// trailer checked. Errors: [`Error::Corrupt`] with the offset of the damaged entry or
    /// trailer; a temporal checkpoint (read it with [`Self::next_version`]).
    pub fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.temporal.is_some() {
            return Err(corrupt(&self.path, 8, TEMPORAL_AS_PLAIN));
        }
        Ok(self
            .next_version()?
            .map(|e| (e.key, e.value.expect("plain entries have values"))))
    }

    /// The next entry of either kind, checked: a key and value, or (temporal checkpoint) a
    /// version; `None` once every entry was handed out and the trailer checked. Errors:
    /// [`Error::Corrupt`] with the offset of the damaged entry or trailer.
    pub fn next_version(&mut self) -> Result<Option<Entry<'_>>> {
        if self.info.is_some() {
            return Ok(None);
        }
        let at = self.at;
        if at >= self.entries_end {
            self.check_trailer()?;
            return Ok(None);
        }
        if let Some(block) = self.temporal {
            return self.next_temporal(block).map(Some);
        }
        let left = usize::try_from(self.entries_end - at).unwrap_or(usize::MAX);
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        if left < ENTRY_HEADER_BYTES {
            return Err(corrupt(
                &self.path,
                offset,
                "entry header runs into the trailer",
            ));
        }
        let head = self.window.bytes_at(at, ENTRY_HEADER_BYTES)?;
        let key_len = u32_at(head, 0) as usize;
        let value_len = u32_at(head, 4) as usize;
        if key_len > KEY_BYTES_MAX || value_len > STORED_VALUE_BYTES_MAX {
            return Err(corrupt(&self.path, offset, "entry length over the limits"));
        }
        if left - ENTRY_HEADER_BYTES < key_len + value_len {
            return Err(corrupt(&self.path, offset, "entry runs into the trailer"));
        }
        let data = self
            .window
            .bytes_at(at, ENTRY_HEADER_BYTES + key_len + value_len)?;
        let path = &self.path;
        let body = ENTRY_HEADER_BYTES;
        let key = &data[body..body + key_len];
        let value = &data[body + key_len..body + key_len + value_len];
        let crc = crc32c::crc32c_append(
            crc32c::crc32c_append(crc32c::crc32c(&data[..8]), key),
            value,
        );
        if crc != u32_at(data, 8) {
            return Err(corrupt(path, offset, "entry checksum mismatch"));
        }
        if self.entry_count > 0 && self.previous.as_slice() >= key {
            return Err(corrupt(path, offset, "keys out of order"));
        }
        self.previous.clear();
        self.previous.extend_from_slice(key);
        self.entry_count += 1;
        self.at = at + (body + key_len + value_len) as u64;
        Ok(Some(Entry {
            key,
            value: Some(value),
            ts: None,
        }))
    }

    /// The next version of a temporal checkpoint, checked (format version 3).
    fn next_temporal(&mut self, block: TemporalBlock) -> Result<Entry<'_>> {
        let at = self.at;
        let left = usize::try_from(self.entries_end - at).unwrap_or(usize::MAX);
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        if left < TEMPORAL_ENTRY_HEADER_BYTES {
            return Err(corrupt(
                &self.path,
                offset,
                "entry header runs into the trailer",
            ));
        }
        let head = self.window.bytes_at(at, TEMPORAL_ENTRY_HEADER_BYTES)?;
        let key_len = u32_at(head, 0) as usize;
        let value_len = u32_at(head, 4) as usize;
        if key_len > KEY_BYTES_MAX || value_len > STORED_VALUE_BYTES_MAX {
            return Err(corrupt(&self.path, offset, "entry length over the limits"));
        }
        if left - TEMPORAL_ENTRY_HEADER_BYTES < key_len + value_len {
            return Err(corrupt(&self.path, offset, "entry runs into the trailer"));
        }
        let data = self
            .window
            .bytes_at(at, TEMPORAL_ENTRY_HEADER_BYTES + key_len + value_len)?;
        let path = &self.path;
        let body = TEMPORAL_ENTRY_HEADER_BYTES;
        let key = &data[body..body + key_len];
        let value = &data[body + key_len..body + key_len + value_len];
        if temporal_entry_crc(data, key, value) != u32_at(data, 8) {
            return Err(corrupt(path, offset, "entry checksum mismatch"));
        }
        let flags = u32_at(data, 12);
        let ts = u64_at(data, 16);
        let tombstone = flags == ENTRY_FLAG_TOMBSTONE;
        if flags & !ENTRY_FLAG_TOMBSTONE != 0 {
            return Err(corrupt(
                path,
                offset,
                format!("unknown entry flags {flags:#x}"),
            ));
        }
        if tombstone && value_len != 0 {
            return Err(corrupt(path, offset, "a tombstone with a value"));
        }
        if ts > block.cut {
            return Err(corrupt(
                path,
                offset,
                format!("version at {ts} after the checkpoint's cut {}", block.cut),
            ));
        }
        if self.entry_count > 0 && (self.previous_ts, self.previous.as_slice()) >= (ts, key) {
            return Err(corrupt(
                path,
                offset,
                "versions out of (timestamp, key) order",
            ));
        }
        self.previous.clear();
        self.previous.extend_from_slice(key);
        self.previous_ts = ts;
        self.entry_count += 1;
        self.at = at + (body + key_len + value_len) as u64;
        Ok(Entry {
            key,
            value: (!tombstone).then_some(value),
            ts: Some(ts),
        })
    }

    /// Once [`Self::next_entry`] returned `None`: what the checkpoint holds.
    pub fn info(&self) -> Option<CheckpointInfo> {
        self.info
    }

    /// Reads and checks the rest of the checkpoint; what it holds.
    pub fn check_all(&mut self) -> Result<CheckpointInfo> {
        while self.next_version()?.is_some() {}
        Ok(self.info.expect("set when next_entry returns None"))
    }

    fn check_trailer(&mut self) -> Result<()> {
        let at = self.entries_end;
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        let trailer = self.window.bytes_at(at, CHECKPOINT_TRAILER_BYTES)?;
        let entry_count = check_trailer(&self.path, offset, trailer, self.entry_count)?;
        let end_lsn = u64_at(trailer, 16);
        if end_lsn.saturating_add(1) < self.start_lsn {
            return Err(corrupt(&self.path, offset, "end LSN before start LSN"));
        }
        self.info = Some(CheckpointInfo {
            start_lsn: self.start_lsn,
            end_lsn,
            entry_count,
            bytes: self.window.len(),
        });
        Ok(())
    }
}

/// Checks a temporal checkpoint's block after the header.
fn check_temporal_block(path: &Path, block: &[u8]) -> Result<TemporalBlock> {
    let at = CHECKPOINT_HEADER_BYTES;
    if crc32c::crc32c(&block[..20]) != u32_at(block, 20) || u32_at(block, 16) != 0 {
        return Err(corrupt(path, at, "temporal checkpoint block damaged"));
    }
    let block = TemporalBlock {
        threshold: u64_at(block, 0),
        cut: u64_at(block, 8),
    };
    if block.threshold > block.cut {
        return Err(corrupt(path, at, "retention threshold after the cut"));
    }
    Ok(block)
}

/// Checks a checkpoint header; its start LSN and format version.
fn check_header(path: &Path, header: &[u8]) -> Result<(u64, u32)> {
    if crc32c::crc32c(&header[..28]) != u32_at(header, 28) {
        return Err(corrupt(path, 0, "checkpoint header checksum mismatch"));
    }
    if header[..8] != CHECKPOINT_MAGIC || u32_at(header, 12) != 0 || u32_at(header, 24) != 0 {
        return Err(corrupt(path, 0, "not a forest checkpoint"));
    }
    let version = u32_at(header, 8);
    if version > CHECKPOINT_FORMAT_TEMPORAL {
        // A newer format is not damage: refused, so recovery never renames it `.corrupt`
        // (a build that reads versions 1 and 2 only does: after it, rename it back).
        return Err(Error::Config(format!(
            "{}: checkpoint format version {version}, newer than this build reads \
             ({CHECKPOINT_FORMAT_VERSION_OLDEST} to {CHECKPOINT_FORMAT_TEMPORAL}): open the \
             store with a newer forest",
            path.display()
        )));
    }
    if version < CHECKPOINT_FORMAT_VERSION_OLDEST {
        return Err(corrupt(
            path,
            8,
            format!(
                "checkpoint format version {version}, this build reads versions \
                 {CHECKPOINT_FORMAT_VERSION_OLDEST} to {CHECKPOINT_FORMAT_TEMPORAL}"
            ),
        ));
    }
    Ok((u64_at(header, 16), version))
}

/// Checks a trailer at `offset` against the entries read; its entry count.
fn check_trailer(path: &Path, offset: usize, trailer: &[u8], entries_read: u64) -> Result<u64> {
    if trailer.len() < CHECKPOINT_TRAILER_BYTES
        || crc32c::crc32c(&trailer[..28]) != u32_at(trailer, 28)
        || trailer[..8] != CHECKPOINT_TRAILER_MAGIC
        || u32_at(trailer, 24) != 0
    {
        return Err(corrupt(
            path,
            offset,
            "checkpoint trailer missing or damaged",
        ));
    }
    let entry_count = u64_at(trailer, 8);
    if entry_count != entries_read {
        return Err(corrupt(
            path,
            offset,
            format!("trailer counts {entry_count} entries, {entries_read} found"),
        ));
    }
    Ok(entry_count)
}

/// Reads the published checkpoint `name` of `dir` and returns its raw bytes and path.
pub fn read(dir: &dyn Dir, name: &str) -> Result<(std::path::PathBuf, Vec<u8>)> {
    let file = dir.open(name)?;
    let mut data = Vec::new();
    file.read_all(&mut data)?;
    Ok((file.path().to_path_buf(), data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::SimDir;
    use forest_lockbtree::LockBTree;
    use std::collections::BTreeMap;

    fn filled(count: u32) -> LockBTree {
        let index = LockBTree::new();
        for i in 0..count {
            index
                .upsert(&i.to_be_bytes(), &vec![i as u8; (i % 50) as usize])
                .expect("small entry");
        }
        index
    }

    // Goal: a written checkpoint decodes to the index's entries. Method: write, publish,
    // read back, compare.
    #[test]
    fn round_trip() {
        let dir = SimDir::new(1);
        let index = filled(500);
        let info = write(&dir, &index, 7, || 9).expect("write");
        publish(&dir, 7).expect("publish");
        assert_eq!(parse_checkpoint_name(&checkpoint_name(7)), Some(7));
        let (path, data) = read(&dir, &checkpoint_name(7)).expect("read");
        let (decoded, entries) = decode(&path, &data).expect("decode");
        assert_eq!(decoded, info);
        assert_eq!(entries.len(), 500);
        for (i, (key, value)) in entries.iter().enumerate() {
            let i = i as u32;
            assert_eq!(*key, i.to_be_bytes().as_slice());
            assert_eq!(value.len(), (i % 50) as usize);
        }
    }

    /// A checkpoint's info and entries, or the offset of its damage.
    type Outcome = std::result::Result<(CheckpointInfo, Vec<(Vec<u8>, Vec<u8>)>), u64>;

    /// What a [`CheckpointStream`] reading `chunk` bytes at a time makes of `data`: the
    /// info and entries, or the offset of the damage.
    fn streamed(data: &[u8], chunk: usize) -> Outcome {
        let offset = |e: Error| match e {
            Error::Corrupt { offset, .. } => offset,
            other => panic!("only corruption expected: {other}"),
        };
        let file = Box::new(crate::file::MemFile::new("/t/cp", data.to_vec()));
        let mut stream = CheckpointStream::with_chunk(file, chunk).map_err(offset)?;
        let mut entries = Vec::new();
        while let Some((k, v)) = stream.next_entry().map_err(offset)? {
            entries.push((k.to_vec(), v.to_vec()));
        }
        Ok((stream.info().expect("complete"), entries))
    }

    /// The same as [`streamed`], from the whole-file decoder.
    fn whole(data: &[u8]) -> Outcome {
        match decode(Path::new("/t/cp"), data) {
            Ok((info, entries)) => Ok((
                info,
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect(),
            )),
            Err(Error::Corrupt { offset, .. }) => Err(offset),
            Err(other) => panic!("only corruption expected: {other}"),
        }
    }

    // Goal: a checkpoint of the previous format version (1, before the version said that a
    // stamped value may hold the limit plus its stamp) still loads, by both loaders, and
    // one of an unknown version is refused by its version. Method: a checkpoint with a
    // stamped value at the limit; its header rewritten to version 1, 0 and 3 with a
    // recomputed checksum.
    #[test]
    fn older_version_is_read_and_unknown_refused() {
        let dir = SimDir::new(3);
        let index = filled(5);
        let mut stamped = forest_core::STAMPED_KEY_PREFIX.to_vec();
        stamped.extend_from_slice(b"key");
        index
            .upsert(&stamped, &vec![7u8; STORED_VALUE_BYTES_MAX])
            .expect("a stamped value at the limit");
        write(&dir, &index, 1, || 0).expect("write");
        let (path, data) = read(&dir, &checkpoint_tmp_name(1)).expect("read");
        assert_eq!(u32_at(&data, 8), CHECKPOINT_FORMAT_VERSION);
        let current = whole(&data).expect("current version");
        assert_eq!(current.1.len(), 6);
        assert_eq!(current.1[5].1.len(), STORED_VALUE_BYTES_MAX);
        let versioned = |version: u32| {
            let mut other = data.clone();
            other[8..12].copy_from_slice(&version.to_le_bytes());
            let crc = crc32c::crc32c(&other[..28]);
            other[28..32].copy_from_slice(&crc.to_le_bytes());
            other
        };
        let old = versioned(CHECKPOINT_FORMAT_VERSION_OLDEST);
        assert_eq!(whole(&old), Ok(current.clone()));
        assert_eq!(streamed(&old, 13), Ok(current));
        let other = versioned(0);
        assert_eq!(whole(&other), Err(8));
        assert_eq!(streamed(&other, 13), Err(8));
        let text = decode(&path, &other).unwrap_err().to_string();
        assert!(text.contains("checkpoint format version 0"), "{text}");
        // A newer version is refused by name and is not damage (recovery keeps the file).
        let newer = versioned(CHECKPOINT_FORMAT_TEMPORAL + 1);
        let file = Box::new(crate::file::MemFile::new("/t/cp", newer.clone()));
        for err in [
            decode(&path, &newer).unwrap_err(),
            CheckpointStream::from_file(file).unwrap_err(),
        ] {
            assert!(matches!(err, Error::Config(_)), "{err}");
            assert!(
                err.to_string()
                    .contains("checkpoint format version 4, newer than this build reads"),
                "{err}"
            );
        }
    }

    // Goal: every truncation and every single flipped byte is reported, never decoded as
    // other data, and the streaming loader agrees with the whole-file one (same entries or
    // same offset). Method: damage a small checkpoint at each offset; stream it in chunks of
    // 1..40 bytes.
    #[test]
    fn damage_is_reported() {
        let dir = SimDir::new(2);
        write(&dir, &filled(20), 1, || 0).expect("write");
        let (path, data) = read(&dir, &checkpoint_tmp_name(1)).expect("read");
        let intact = whole(&data).expect("intact");
        assert_eq!(intact.1.len(), 20);
        assert_eq!(streamed(&data, 7), Ok(intact));
        for len in 0..data.len() {
            assert!(decode(&path, &data[..len]).is_err(), "cut at {len}");
            assert_eq!(streamed(&data[..len], len % 40 + 1), whole(&data[..len]));
        }
        for at in 0..data.len() {
            let mut bad = data.clone();
            bad[at] ^= 0x40;
            let err = decode(&path, &bad).expect_err("flipped byte");
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            assert_eq!(streamed(&bad, at % 40 + 1), whole(&bad));
        }
    }

    /// A tsbtree with versions of 6 keys at 10, 20, ... (every 5th a tombstone of a present
    /// key), a batch of two keys at one timestamp among them.
    fn versions() -> Box<dyn Index> {
        let index = crate::new_engine("tsbtree:page=4,index_page=4").expect("engine");
        let temporal = index.as_temporal().expect("temporal");
        for i in 1..=60u64 {
            let key = format!("k{}", i % 6).into_bytes();
            let tombstone = i.is_multiple_of(5) && i > 6;
            let value = (!tombstone).then(|| i.to_le_bytes().to_vec());
            temporal
                .put_version(&key, 10 * i, value.as_deref())
                .expect("in order");
            if i == 30 {
                temporal
                    .put_version(b"k9", 10 * i, Some(b"b"))
                    .expect("batch");
            }
        }
        index
    }

    /// Versions read back: (key, timestamp, value or None for a tombstone).
    type Versions = Vec<(Vec<u8>, u64, Option<Vec<u8>>)>;
    /// Per key, its versions: (timestamp, value or None for a tombstone).
    type VersionModel = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;
    /// A temporal checkpoint's info and versions, or the offset of its damage.
    type VersionsOutcome = std::result::Result<(CheckpointInfo, Versions), u64>;

    /// A temporal checkpoint's versions as streamed in `chunk`-byte reads, or the offset of
    /// its damage.
    fn streamed_versions(data: &[u8], chunk: usize) -> VersionsOutcome {
        let offset = |e: Error| match e {
            Error::Corrupt { offset, .. } => offset,
            other => panic!("only corruption expected: {other}"),
        };
        let file = Box::new(crate::file::MemFile::new("/t/cp", data.to_vec()));
        let mut stream = CheckpointStream::with_chunk(file, chunk).map_err(offset)?;
        let mut out = Vec::new();
        while let Some(e) = stream.next_version().map_err(offset)? {
            let ts = e.ts.expect("a temporal entry has a timestamp");
            out.push((e.key.to_vec(), ts, e.value.map(<[u8]>::to_vec)));
        }
        Ok((stream.info().expect("complete"), out))
    }

    // Goal: a temporal checkpoint holds exactly the versions reads from its threshold on
    // need, up to its cut, in (timestamp, key) order, and reads back the same; its first 32
    // bytes are a complete header of version 3, so a build that reads versions 1 and 2 only
    // refuses it by its version; the readers of keys and values refuse it by name. Method:
    // versions at 10..=600, threshold 255 and cut 575; compare with the rule on the model.
    #[test]
    fn temporal_round_trip_and_refusals() {
        let dir = SimDir::new(4);
        let index = versions();
        let temporal = index.as_temporal().expect("temporal");
        let block = TemporalBlock {
            threshold: 255,
            cut: 575,
        };
        let info = write_temporal(&dir, temporal, 3, block, || 8).expect("write");
        let (path, data) = read(&dir, &checkpoint_tmp_name(3)).expect("read");
        assert_eq!(u32_at(&data, 8), CHECKPOINT_FORMAT_TEMPORAL);
        assert_eq!(crc32c::crc32c(&data[..28]), u32_at(&data, 28));
        let (read_info, got) = streamed_versions(&data, 64).expect("intact");
        assert_eq!(read_info, info);
        let mut model: VersionModel = BTreeMap::new();
        temporal
            .versions_from(0, u64::MAX, &mut |k, ts, v| {
                model
                    .entry(k.to_vec())
                    .or_default()
                    .push((ts, v.map(<[u8]>::to_vec)));
                ControlFlow::Continue(())
            })
            .expect("all");
        // Handed out in no particular order.
        model.values_mut().for_each(|vs| vs.sort_by_key(|v| v.0));
        let mut want = Vec::new();
        for (key, vs) in &model {
            let vs: Vec<_> = vs.iter().filter(|(ts, _)| *ts <= block.cut).collect();
            for (i, (ts, v)) in vs.iter().enumerate() {
                let next = vs.get(i + 1).map(|(t, _)| *t);
                if *ts >= block.threshold
                    || (v.is_some() && next.is_none_or(|n| n >= block.threshold))
                {
                    want.push((key.clone(), *ts, v.clone()));
                }
            }
        }
        want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        assert_eq!(got, want);
        assert!(got.iter().any(|v| v.2.is_none()), "tombstones are written");
        assert!(
            got.iter().any(|v| v.1 < block.threshold),
            "versions current at T"
        );
        assert_eq!(got.iter().filter(|v| v.1 == 300).count(), 2, "the batch");
        let text = decode(&path, &data).expect_err("plain decode").to_string();
        assert!(text.contains("temporal checkpoint"), "{text}");
        let file = Box::new(crate::file::MemFile::new("/t/cp", data.clone()));
        let mut stream = CheckpointStream::from_file(file).expect("header");
        assert_eq!(stream.temporal(), Some(block));
        let text = stream.next_entry().expect_err("plain entries").to_string();
        assert!(text.contains("temporal checkpoint"), "{text}");
    }

    // Goal: every truncation and single flipped byte of a temporal checkpoint is reported,
    // never read as other versions. Method: damage a small one at each offset, stream it in
    // chunks of 1..40 bytes.
    #[test]
    fn temporal_damage_is_reported() {
        let dir = SimDir::new(5);
        let index = versions();
        let temporal = index.as_temporal().expect("temporal");
        let block = TemporalBlock {
            threshold: 450,
            cut: 600,
        };
        write_temporal(&dir, temporal, 1, block, || 0).expect("write");
        let (_, data) = read(&dir, &checkpoint_tmp_name(1)).expect("read");
        let intact = streamed_versions(&data, 7).expect("intact");
        assert!(intact.1.len() > 10);
        for len in 0..data.len() {
            assert!(
                streamed_versions(&data[..len], len % 40 + 1).is_err(),
                "cut at {len}"
            );
        }
        for at in 0..data.len() {
            let mut bad = data.clone();
            bad[at] ^= 0x40;
            assert!(
                streamed_versions(&bad, at % 40 + 1).is_err(),
                "flip at {at}"
            );
        }
    }
}
