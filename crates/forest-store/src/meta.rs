//! The store's meta file `META`: the engine chosen at creation, so that a reopen that names
//! no engine uses it (issue 5 "The store": the engine chosen by name). Format version 1, byte
//! by byte in docs/FORMAT.md "Store meta file".
//!
//! Logs and checkpoints hold keys and values only, so any engine can open any store; the
//! meta file records the last engine named, and naming a different one at open records that
//! one instead.
//!
//! Invariants: the file is written whole to `META.tmp`, fsynced, renamed over `META` and the
//! directory fsynced, so after any crash `META` is the old or the new version, never a mix;
//! a damaged `META` is [`Error::Corrupt`], never guessed at.

use forest_core::{Error, Result};

use crate::file::Dir;

/// The meta file's name in a store directory.
pub const META_FILE_NAME: &str = "META";
/// The name the meta file is written under before its rename.
pub const META_TMP_FILE_NAME: &str = "META.tmp";
/// The first 8 bytes of the meta file.
pub const META_MAGIC: [u8; 8] = *b"FORESTMD";
/// The meta format version this code writes and reads.
pub const META_FORMAT_VERSION: u32 = 2;
/// The version before `durable_through` existed (its bytes were zero): still read.
const META_FORMAT_VERSION_1: u32 = 1;
/// Bytes of the meta file (fixed).
pub const META_BYTES: usize = 64;
/// The longest engine name recorded: engine names are short words; the field is fixed.
pub const ENGINE_NAME_BYTES_MAX: usize = 32;

const ENGINE_AT: usize = 16;
const DURABLE_AT: usize = ENGINE_AT + ENGINE_NAME_BYTES_MAX;
const RESERVED_AT: usize = DURABLE_AT + 8;
const CRC_AT: usize = META_BYTES - 4;
const _: () = assert!(RESERVED_AT < CRC_AT);

/// What the meta file records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreMeta {
    /// The engine the store opens when none is named.
    pub engine: String,
    /// Every LSN up to this one was durable in the logs when the store last closed cleanly
    /// (0: unknown). Recovery refuses a cutoff below it, so a log cut or damaged after a
    /// clean close is noticed even where no mark follows the damage (issue 12).
    pub durable_through: u64,
}

/// Encodes `meta` (errors: an engine name over [`ENGINE_NAME_BYTES_MAX`] or empty).
pub fn encode(meta: &StoreMeta) -> Result<[u8; META_BYTES]> {
    let name = meta.engine.as_bytes();
    if name.is_empty() || name.len() > ENGINE_NAME_BYTES_MAX {
        return Err(Error::Config(format!(
            "engine name {:?}: 1..={ENGINE_NAME_BYTES_MAX} bytes allowed",
            meta.engine
        )));
    }
    let mut bytes = [0u8; META_BYTES];
    bytes[..8].copy_from_slice(&META_MAGIC);
    bytes[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(name.len() as u32).to_le_bytes());
    bytes[ENGINE_AT..ENGINE_AT + name.len()].copy_from_slice(name);
    bytes[DURABLE_AT..DURABLE_AT + 8].copy_from_slice(&meta.durable_through.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..CRC_AT]);
    bytes[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    Ok(bytes)
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&data[at..at + 4]);
    u32::from_le_bytes(word)
}

/// Decodes the meta file's bytes; `path` names it in errors.
pub fn decode(path: &std::path::Path, data: &[u8]) -> Result<StoreMeta> {
    let corrupt = |offset: usize, what: String| Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    if data.len() != META_BYTES {
        return Err(corrupt(
            0,
            format!("meta file is {} bytes, {META_BYTES} expected", data.len()),
        ));
    }
    if crc32c::crc32c(&data[..CRC_AT]) != u32_at(data, CRC_AT) {
        return Err(corrupt(CRC_AT, "meta file checksum mismatch".to_string()));
    }
    if data[..8] != META_MAGIC {
        return Err(corrupt(0, "not a forest meta file (bad magic)".to_string()));
    }
    let version = u32_at(data, 8);
    if version != META_FORMAT_VERSION && version != META_FORMAT_VERSION_1 {
        return Err(corrupt(
            8,
            format!("meta format version {version}, this build reads {META_FORMAT_VERSION}"),
        ));
    }
    let len = u32_at(data, 12) as usize;
    if len == 0 || len > ENGINE_NAME_BYTES_MAX {
        return Err(corrupt(12, format!("engine name length {len}")));
    }
    let padding_zero = data[ENGINE_AT + len..DURABLE_AT].iter().all(|b| *b == 0)
        && data[RESERVED_AT..CRC_AT].iter().all(|b| *b == 0);
    if !padding_zero {
        return Err(corrupt(ENGINE_AT + len, "padding not zero".to_string()));
    }
    let engine = std::str::from_utf8(&data[ENGINE_AT..ENGINE_AT + len])
        .map_err(|_| corrupt(ENGINE_AT, "engine name not UTF-8".to_string()))?;
    let mut durable = [0u8; 8];
    durable.copy_from_slice(&data[DURABLE_AT..DURABLE_AT + 8]);
    Ok(StoreMeta {
        engine: engine.to_string(),
        durable_through: u64::from_le_bytes(durable),
    })
}

/// Reads the meta file of `dir`: `None` if there is none (a new store, or one made before
/// the meta file existed).
pub fn read(dir: &dyn Dir) -> Result<Option<StoreMeta>> {
    if !dir.exists(META_FILE_NAME)? {
        return Ok(None);
    }
    let file = dir.open(META_FILE_NAME)?;
    let len = file.len()?;
    if len != META_BYTES as u64 {
        return Err(Error::Corrupt {
            path: file.path().to_path_buf(),
            offset: 0,
            what: format!("meta file is {len} bytes, {META_BYTES} expected"),
        });
    }
    let mut data = [0u8; META_BYTES];
    file.read_exact_at(0, &mut data)?;
    decode(file.path(), &data).map(Some)
}

/// Writes `meta` as the meta file of `dir`, durably (see the module doc).
pub fn write(dir: &dyn Dir, meta: &StoreMeta) -> Result<()> {
    let bytes = encode(meta)?;
    if dir.exists(META_TMP_FILE_NAME)? {
        dir.remove(META_TMP_FILE_NAME)?;
    }
    let mut file = dir.create(META_TMP_FILE_NAME)?;
    file.append(&bytes)?;
    file.sync()?;
    drop(file);
    dir.rename(META_TMP_FILE_NAME, META_FILE_NAME)?;
    dir.sync_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{CrashMode, SimDir};

    // Goal: a written meta file reads back, survives a power loss once written, and
    // replaces the old one atomically. Method: write, crash, read; write another, read.
    #[test]
    fn round_trip_and_replace() {
        let dir = SimDir::new(1);
        assert_eq!(read(&dir).expect("read"), None);
        let a = StoreMeta {
            engine: "bwtree".into(),
            durable_through: 0,
        };
        write(&dir, &a).expect("write");
        dir.crash_with(CrashMode::DropUnsynced);
        assert_eq!(read(&dir).expect("read"), Some(a));
        let b = StoreMeta {
            engine: "masstree".into(),
            durable_through: 1 << 40,
        };
        write(&dir, &b).expect("write");
        assert_eq!(read(&dir).expect("read"), Some(b));
        assert!(!dir.exists(META_TMP_FILE_NAME).expect("exists"));
    }

    // Goal: every flipped bit and every truncation is an error naming the file. Method:
    // damage an encoded file at each offset.
    #[test]
    fn damage_is_reported() {
        let path = std::path::Path::new("/x/META");
        let bytes = encode(&StoreMeta {
            engine: "lockbtree".into(),
            durable_through: 77,
        })
        .expect("encode");
        for at in 0..META_BYTES {
            let mut bad = bytes;
            bad[at] ^= 1;
            let err = decode(path, &bad).expect_err("damaged");
            assert!(err.to_string().contains("META"), "{err}");
        }
        for len in 0..META_BYTES {
            assert!(decode(path, &bytes[..len]).is_err());
        }
        assert!(encode(&StoreMeta {
            engine: "x".repeat(ENGINE_NAME_BYTES_MAX + 1),
            durable_through: 0,
        })
        .is_err());
    }
}
