//! Checkpoints: a scan of the index written to a file and published by an atomic rename
//! (masstree.md §5 "checkpoints"; issue 5 "Checkpoints and recovery"). Format version 2
//! (1 still read), byte by byte in docs/FORMAT.md.
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
//! Two loaders with one set of checks: [`decode`] over a whole file in memory (tests, fuzz),
//! and [`CheckpointStream`], which recovery uses: it reads through a bounded window (issue 5:
//! 10 M keys must not need the file in memory) and hands out each entry once checked;
//! recovery loads into a fresh index and drops it if any later check fails, so a damaged
//! checkpoint never leaves a half-loaded index behind.

use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};

use forest_core::{Error, Index, Order, Result, KEY_BYTES_MAX, STORED_VALUE_BYTES_MAX};

use crate::file::{Dir, File, ReadWindow, READ_CHUNK_BYTES};

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

fn encode_header(start_lsn: u64, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&CHECKPOINT_MAGIC);
    buf.extend_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
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
    let name = checkpoint_tmp_name(start_lsn);
    if dir.exists(&name)? {
        dir.remove(&name)?;
    }
    let written = write_tmp(dir, &name, index, start_lsn, end_lsn);
    if written.is_err() {
        // A full disk must not stay full of a checkpoint nobody will publish (issue 12);
        // the removal is best effort, the next open deletes what is left.
        let _ = dir.remove(&name);
    }
    written
}

fn write_tmp(
    dir: &dyn Dir,
    name: &str,
    index: &dyn Index,
    start_lsn: u64,
    end_lsn: impl FnOnce() -> u64,
) -> Result<CheckpointInfo> {
    let mut file = dir.create(name)?;
    let mut buf = Vec::with_capacity(CHECKPOINT_WRITE_BUFFER_BYTES + CHECKPOINT_HEADER_BYTES);
    encode_header(start_lsn, &mut buf);
    let mut entry_count = 0u64;
    let mut bytes = 0u64;
    let mut failure = None;
    index.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |key, value| {
            encode_entry(key, value, &mut buf);
            entry_count += 1;
            if buf.len() >= CHECKPOINT_WRITE_BUFFER_BYTES {
                if let Err(e) = file.append(&buf) {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
                bytes += buf.len() as u64;
                buf.clear();
            }
            ControlFlow::Continue(())
        },
    );
    if let Some(e) = failure {
        return Err(e);
    }
    let end_lsn = end_lsn();
    encode_trailer(entry_count, end_lsn, &mut buf);
    file.append(&buf)?;
    bytes += buf.len() as u64;
    file.sync()?;
    Ok(CheckpointInfo {
        start_lsn,
        end_lsn,
        entry_count,
        bytes,
    })
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
    let start_lsn = check_header(path, &data[..CHECKPOINT_HEADER_BYTES])?;
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
    entries_end: u64,
    at: u64,
    previous: Vec<u8>,
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
        let start_lsn = check_header(&path, &header[..CHECKPOINT_HEADER_BYTES])?;
        Ok(Self {
            window,
            path,
            start_lsn,
            entries_end: len - CHECKPOINT_TRAILER_BYTES as u64,
            at: CHECKPOINT_HEADER_BYTES as u64,
            previous: Vec::new(),
            entry_count: 0,
            info: None,
        })
    }

    /// The checkpoint's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The start LSN from the header.
    pub fn start_lsn(&self) -> u64 {
        self.start_lsn
    }

    /// The next entry, checked; `None` once every entry was handed out and the trailer
    /// checked. Errors: [`Error::Corrupt`] with the offset of the damaged entry or trailer.
    pub fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.info.is_some() {
            return Ok(None);
        }
        let at = self.at;
        if at >= self.entries_end {
            self.check_trailer()?;
            return Ok(None);
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
        Ok(Some((key, value)))
    }

    /// Once [`Self::next_entry`] returned `None`: what the checkpoint holds.
    pub fn info(&self) -> Option<CheckpointInfo> {
        self.info
    }

    /// Reads and checks the rest of the checkpoint; what it holds.
    pub fn check_all(&mut self) -> Result<CheckpointInfo> {
        while self.next_entry()?.is_some() {}
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

/// Checks a checkpoint header; its start LSN.
fn check_header(path: &Path, header: &[u8]) -> Result<u64> {
    if crc32c::crc32c(&header[..28]) != u32_at(header, 28) {
        return Err(corrupt(path, 0, "checkpoint header checksum mismatch"));
    }
    if header[..8] != CHECKPOINT_MAGIC || u32_at(header, 12) != 0 || u32_at(header, 24) != 0 {
        return Err(corrupt(path, 0, "not a forest checkpoint"));
    }
    let version = u32_at(header, 8);
    if !(CHECKPOINT_FORMAT_VERSION_OLDEST..=CHECKPOINT_FORMAT_VERSION).contains(&version) {
        return Err(corrupt(
            path,
            8,
            format!(
                "checkpoint format version {version}, this build reads versions \
                 {CHECKPOINT_FORMAT_VERSION_OLDEST} to {CHECKPOINT_FORMAT_VERSION}"
            ),
        ));
    }
    Ok(u64_at(header, 16))
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
        for version in [0, CHECKPOINT_FORMAT_VERSION + 1] {
            let other = versioned(version);
            assert_eq!(whole(&other), Err(8));
            assert_eq!(streamed(&other, 13), Err(8));
            let text = decode(&path, &other).unwrap_err().to_string();
            assert!(
                text.contains(&format!("checkpoint format version {version}")),
                "{text}"
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
}
