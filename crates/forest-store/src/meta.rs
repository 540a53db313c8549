//! The store's meta file `META`: the engine spec chosen at creation, so that a reopen that
//! names no engine uses it and one that names another is refused unless asked for (issue 5
//! "The store"; issue 13: the full spec). Format version 4, byte by byte in docs/FORMAT.md
//! "Store meta file"; versions 1 to 3 are still read. Version 4 adds a temporal store's
//! retention threshold (issue 18, `store/temporal.rs`) and the key layout version of the
//! application that writes the store (the server's, issue 15).
//!
//! Logs and checkpoints hold keys and values only, so any engine durable through the store
//! can open any store: `StoreOptions::switch_engine` rebuilds the index in another engine
//! and records it.
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
/// The meta format version this code writes.
pub const META_FORMAT_VERSION: u32 = 4;
/// Versions 1 and 2 (64 bytes, an engine name of up to 32 bytes; version 1 had no
/// `durable_through`, its bytes were zero): still read.
const META_FORMAT_VERSION_1: u32 = 1;
const META_FORMAT_VERSION_2: u32 = 2;
/// Version 3: version 4 without the retention threshold and the key layout, 256 bytes:
/// still read.
const META_FORMAT_VERSION_3: u32 = 3;
/// Bytes of the meta file (fixed) in version 4.
pub const META_BYTES: usize = 264;
/// Bytes of a version 3 meta file.
const META_BYTES_V3: usize = 256;
/// Where version 4 keeps the retention threshold (8 bytes).
const RETENTION_AT: usize = 248;
/// Where version 4 keeps the key layout (4 bytes).
const LAYOUT_AT: usize = RETENTION_AT + 8;
/// Bytes of a version 1 or 2 meta file.
const META_BYTES_V2: usize = 64;
/// The longest engine spec recorded (a canonical spec such as `masstree:fanout=15x32`).
pub const ENGINE_SPEC_BYTES_MAX: usize = 224;

/// Where the fields are, by version: (spec at, spec bytes max, durable_through at).
const V2_FIELDS: (usize, usize, usize) = (16, 32, 48);
const V3_FIELDS: (usize, usize, usize) = (24, ENGINE_SPEC_BYTES_MAX, 16);
const _: () = assert!(V3_FIELDS.0 + V3_FIELDS.1 <= RETENTION_AT);
const _: () = assert!(LAYOUT_AT + 4 + 4 <= META_BYTES);

/// What the meta file records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreMeta {
    /// The engine spec (canonical, `forest_engines::canonical`) the store opens when none
    /// is named; reopening with another is refused unless asked for.
    pub engine: String,
    /// Every LSN up to this one was durable in the logs when the store last closed cleanly
    /// (0: unknown). Recovery refuses a cutoff below it, so a log cut or damaged after a
    /// clean close is noticed even where no mark follows the damage (issue 12).
    pub durable_through: u64,
    /// A temporal store's retention threshold (0: none; versions before 4 record none):
    /// history before it is discarded (`store/temporal.rs`).
    pub retention: u64,
    /// The key layout version of the application that writes the store (0: none
    /// recorded, the files before version 4). The store does not read it: the server
    /// migrates its keys at open and records the layout it wrote (`Store::set_layout`).
    pub layout: u32,
}

/// `layout` of a META the store wrote anew at an open that found keys but no readable META
/// (missing, or damaged and rewritten): what layout those keys are in is not known.
pub const LAYOUT_UNKNOWN: u32 = u32::MAX;

/// Encodes `meta` in version 4 (errors: an engine spec over [`ENGINE_SPEC_BYTES_MAX`] or
/// empty).
pub fn encode(meta: &StoreMeta) -> Result<[u8; META_BYTES]> {
    let spec = meta.engine.as_bytes();
    if spec.is_empty() || spec.len() > ENGINE_SPEC_BYTES_MAX {
        return Err(Error::Config(format!(
            "engine spec {:?}: 1..={ENGINE_SPEC_BYTES_MAX} bytes allowed",
            meta.engine
        )));
    }
    let (spec_at, _, durable_at) = V3_FIELDS;
    let mut bytes = [0u8; META_BYTES];
    bytes[..8].copy_from_slice(&META_MAGIC);
    bytes[8..12].copy_from_slice(&META_FORMAT_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(spec.len() as u32).to_le_bytes());
    bytes[durable_at..durable_at + 8].copy_from_slice(&meta.durable_through.to_le_bytes());
    bytes[RETENTION_AT..RETENTION_AT + 8].copy_from_slice(&meta.retention.to_le_bytes());
    bytes[LAYOUT_AT..LAYOUT_AT + 4].copy_from_slice(&meta.layout.to_le_bytes());
    bytes[spec_at..spec_at + spec.len()].copy_from_slice(spec);
    let crc_at = META_BYTES - 4;
    let crc = crc32c::crc32c(&bytes[..crc_at]);
    bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    Ok(bytes)
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&data[at..at + 4]);
    u32::from_le_bytes(word)
}

/// Decodes the meta file's bytes (any version this build reads); `path` names it in
/// errors.
pub fn decode(path: &std::path::Path, data: &[u8]) -> Result<StoreMeta> {
    let corrupt = |offset: usize, what: String| Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    // A newer format is not damage: refuse it, and never let an open overwrite it.
    if data.len() >= 12 && data[..8] == META_MAGIC && u32_at(data, 8) > META_FORMAT_VERSION {
        return Err(Error::Config(format!(
            "{}: meta format version {}, newer than this build reads ({META_FORMAT_VERSION}): \
             open the store with a newer forest",
            path.display(),
            u32_at(data, 8)
        )));
    }
    if ![META_BYTES, META_BYTES_V3, META_BYTES_V2].contains(&data.len()) {
        return Err(corrupt(
            0,
            format!(
                "meta file is {} bytes, {META_BYTES} (or {META_BYTES_V3}, {META_BYTES_V2}) \
                 expected",
                data.len()
            ),
        ));
    }
    let crc_at = data.len() - 4;
    if crc32c::crc32c(&data[..crc_at]) != u32_at(data, crc_at) {
        return Err(corrupt(crc_at, "meta file checksum mismatch".to_string()));
    }
    if data[..8] != META_MAGIC {
        return Err(corrupt(0, "not a forest meta file (bad magic)".to_string()));
    }
    let version = u32_at(data, 8);
    let fields = match (version, data.len()) {
        (META_FORMAT_VERSION, META_BYTES) | (META_FORMAT_VERSION_3, META_BYTES_V3) => V3_FIELDS,
        (META_FORMAT_VERSION_1 | META_FORMAT_VERSION_2, META_BYTES_V2) => V2_FIELDS,
        _ => {
            return Err(corrupt(
                8,
                format!(
                    "meta format version {version} in {} bytes; this build reads versions \
                     1 to {META_FORMAT_VERSION}",
                    data.len()
                ),
            ))
        }
    };
    let (spec_at, spec_max, durable_at) = fields;
    let retention_at = (version == META_FORMAT_VERSION).then_some(RETENTION_AT);
    let len = u32_at(data, 12) as usize;
    if len == 0 || len > spec_max {
        return Err(corrupt(12, format!("engine spec length {len}")));
    }
    // Every byte that no field holds is zero.
    let held = |at: usize| {
        at < 16
            || (spec_at..spec_at + len).contains(&at)
            || (durable_at..durable_at + 8).contains(&at)
            || retention_at.is_some_and(|r| (r..r + 8 + 4).contains(&at))
    };
    if let Some(at) = (16..crc_at).find(|&at| !held(at) && data[at] != 0) {
        return Err(corrupt(at, "padding not zero".to_string()));
    }
    let engine = std::str::from_utf8(&data[spec_at..spec_at + len])
        .map_err(|_| corrupt(spec_at, "engine spec not UTF-8".to_string()))?;
    let mut durable = [0u8; 8];
    durable.copy_from_slice(&data[durable_at..durable_at + 8]);
    let retention = retention_at.map_or(0, |r| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&data[r..r + 8]);
        u64::from_le_bytes(word)
    });
    Ok(StoreMeta {
        engine: engine.to_string(),
        durable_through: u64::from_le_bytes(durable),
        retention,
        layout: retention_at.map_or(0, |_| u32_at(data, LAYOUT_AT)),
    })
}

pub fn read(dir: &dyn Dir) -> Result<Option<StoreMeta>> {
    if !dir.exists(META_FILE_NAME)? {
        return Ok(None);
    }
    let file = dir.open(META_FILE_NAME)?;
    let len = file.len()?;
    let known = |len: u64| [META_BYTES, META_BYTES_V3, META_BYTES_V2].contains(&(len as usize));
    if (12..=4096).contains(&len) && !known(len) {
        // Perhaps a newer format: let decode say so.
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(0, &mut data)?;
        return decode(file.path(), &data).map(Some);
    }
    if !known(len) {
        return Err(Error::Corrupt {
            path: file.path().to_path_buf(),
            offset: 0,
            what: format!(
                "meta file is {len} bytes, {META_BYTES} (or {META_BYTES_V3}, {META_BYTES_V2}) \
                 expected"
            ),
        });
    }
    let mut data = vec![0u8; len as usize];
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
            retention: 0,
            layout: 0,
        };
        write(&dir, &a).expect("write");
        dir.crash_with(CrashMode::DropUnsynced);
        assert_eq!(read(&dir).expect("read"), Some(a));
        let b = StoreMeta {
            engine: "masstree".into(),
            durable_through: 1 << 40,
            retention: 1_700_000_000_000_000,
            layout: 7,
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
            retention: 5,
            layout: 2,
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
            engine: "x".repeat(ENGINE_SPEC_BYTES_MAX + 1),
            durable_through: 0,
            retention: 0,
            layout: 0,
        })
        .is_err());
    }

    /// A version 2 file, as the code before version 3 wrote it (docs/FORMAT.md).
    fn v2_bytes(engine: &str, durable_through: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..8].copy_from_slice(&META_MAGIC);
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        bytes[12..16].copy_from_slice(&(engine.len() as u32).to_le_bytes());
        bytes[16..16 + engine.len()].copy_from_slice(engine.as_bytes());
        bytes[48..56].copy_from_slice(&durable_through.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..60]);
        bytes[60..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    // Goal: stores written before version 3 still open: a version 2 file decodes, and
    // damage in it is still reported. Method: a hand-built version 2 file.
    #[test]
    fn version_2_files_are_read() {
        let path = std::path::Path::new("/x/META");
        let bytes = v2_bytes("bwtree", 99);
        let meta = decode(path, &bytes).expect("v2");
        assert_eq!(meta.engine, "bwtree");
        assert_eq!(meta.durable_through, 99);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(decode(path, &bad).is_err(), "byte {at}");
        }
    }

    // Goal: stores written by version 3 (no retention field) still open, with no threshold.
    // Method: a version 4 file made into version 3's 256 bytes by hand (docs/FORMAT.md).
    #[test]
    fn version_3_files_are_read() {
        let path = std::path::Path::new("/x/META");
        let v4 = encode(&StoreMeta {
            engine: "tsbtree".into(),
            durable_through: 12,
            retention: 0,
            layout: 0,
        })
        .expect("encode");
        let mut bytes = v4[..META_BYTES_V3].to_vec();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..META_BYTES_V3 - 4]);
        bytes[META_BYTES_V3 - 4..].copy_from_slice(&crc.to_le_bytes());
        let meta = decode(path, &bytes).expect("v3");
        assert_eq!(
            (meta.engine.as_str(), meta.durable_through),
            ("tsbtree", 12)
        );
        assert_eq!((meta.retention, meta.layout), (0, 0));
        // Bytes 248..252 are padding in version 3: non-zero there is damage.
        bytes[248] = 2;
        let crc = crc32c::crc32c(&bytes[..META_BYTES_V3 - 4]);
        bytes[META_BYTES_V3 - 4..].copy_from_slice(&crc.to_le_bytes());
        let err = decode(path, &bytes).expect_err("v3 with a byte at 248");
        assert!(err.to_string().contains("padding"), "{err}");
    }
}
