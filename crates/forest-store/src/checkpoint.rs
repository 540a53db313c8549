//! Checkpoints: a scan of the index written to a file and published by an atomic rename
//! (masstree.md §5 "checkpoints"; issue 5 "Checkpoints and recovery"). Format version 1,
//! byte by byte in docs/FORMAT.md.
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
//! - Every entry and the header and trailer carry a crc32c; the loader verifies all of them
//!   before the caller applies a single entry.
//!
//! Choice: the loader reads the whole file into memory and checks it before applying, so a
//! damaged checkpoint never leaves a half-loaded index; a streaming loader can replace it
//! without changing the format.

use std::ops::{Bound, ControlFlow};
use std::path::Path;

use forest_core::{Error, Index, Order, Result, KEY_BYTES_MAX, VALUE_BYTES_MAX};

use crate::file::Dir;

/// The first 8 bytes of a checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"FORESTCP";
/// The first 8 bytes of a checkpoint's trailer.
pub const CHECKPOINT_TRAILER_MAGIC: [u8; 8] = *b"FORESTCE";
/// The checkpoint format version this code writes and reads.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 1;
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
    let value_len = u32::try_from(value.len()).expect("values are within VALUE_BYTES_MAX");
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
    let mut file = dir.create(&name)?;
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
    let header = &data[..CHECKPOINT_HEADER_BYTES];
    if crc32c::crc32c(&header[..28]) != u32_at(header, 28) {
        return Err(corrupt(path, 0, "checkpoint header checksum mismatch"));
    }
    if header[..8] != CHECKPOINT_MAGIC || u32_at(header, 12) != 0 || u32_at(header, 24) != 0 {
        return Err(corrupt(path, 0, "not a forest checkpoint"));
    }
    let version = u32_at(header, 8);
    if version != CHECKPOINT_FORMAT_VERSION {
        return Err(corrupt(
            path,
            8,
            format!("checkpoint format version {version}"),
        ));
    }
    let start_lsn = u64_at(header, 16);
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
        if key_len > KEY_BYTES_MAX || value_len > VALUE_BYTES_MAX {
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
    if crc32c::crc32c(&trailer[..28]) != u32_at(trailer, 28)
        || trailer[..8] != CHECKPOINT_TRAILER_MAGIC
        || u32_at(trailer, 24) != 0
    {
        return Err(corrupt(
            path,
            entries_end,
            "checkpoint trailer missing or damaged",
        ));
    }
    let entry_count = u64_at(trailer, 8);
    if entry_count != entries.len() as u64 {
        return Err(corrupt(
            path,
            entries_end,
            format!(
                "trailer counts {entry_count} entries, {} found",
                entries.len()
            ),
        ));
    }
    let end_lsn = u64_at(trailer, 16);
    if end_lsn + 1 < start_lsn {
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

    // Goal: every truncation and every single flipped byte is reported, never decoded as
    // other data. Method: damage a small checkpoint at each offset.
    #[test]
    fn damage_is_reported() {
        let dir = SimDir::new(2);
        write(&dir, &filled(20), 1, || 0).expect("write");
        let (path, data) = read(&dir, &checkpoint_tmp_name(1)).expect("read");
        for len in 0..data.len() {
            assert!(decode(&path, &data[..len]).is_err(), "cut at {len}");
        }
        for at in 0..data.len() {
            let mut bad = data.clone();
            bad[at] ^= 0x40;
            let err = decode(&path, &bad).expect_err("flipped byte");
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }
}
