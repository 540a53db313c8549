//! Segment files: the LSS as a run of fixed-size files in one directory (Bw-tree §II-E;
//! TSBw §II-D's log with cleaning at its start and posting at its end; llama-notes §4).
//!
//! Segment `n` is the file [`segment_file_name`]`(n)`; it holds the log offsets
//! `n * segment_bytes .. (n + 1) * segment_bytes`, the first [`SEGMENT_HEADER_BYTES`] of which
//! are its header (magic, version, store, sequence number, segment size, crc32c). Records
//! follow back to back from the header; a file is only as long as what was written to it (a
//! buffer that did not fit a segment's rest starts the next segment, leaving the rest
//! unwritten).
//!
//! Invariants:
//! - A segment's header is written and fsynced, and the directory fsynced, before any record
//!   is written to it (the writer, `buffer.rs`), and only once every record of earlier
//!   segments is durable. So after a crash the end of the valid prefix lies in the last
//!   segment whose header is valid, and every earlier segment is valid to its file's end.
//! - [`recover_end`] never keeps bytes past the first invalid record of the last segment: it
//!   cuts them off (truncate, fsync) before the LSS writes again, so a stale record can never
//!   follow new ones. Record checksums cover the record's address, so stale bytes never
//!   decode as a record at another address either.
//!
//! Choices: a damaged header on a file longer than a header is corruption (headers are synced
//! before anything else is written); a file of a header or less with a bad header is a
//! creation the crash cut off, removed at open.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use forest_core::{Error, Result};
use forest_file::{Dir, File, ReadWindow, READ_CHUNK_BYTES};
use parking_lot::Mutex;

use super::record::{self, DecodeError, RECORD_HEADER_BYTES};
use super::{LssAddress, Record};

/// Bytes of a segment header.
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// The magic at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"FORESTLS";
/// The segment format version this build writes and reads.
pub const SEGMENT_FORMAT_VERSION: u32 = 1;
/// The store code of LSS-C segments (LSS-H, a later issue, takes 1).
const STORE_CURRENT: u32 = 0;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const STORE_AT: usize = 12;
const SEQUENCE_AT: usize = 16;
const SEGMENT_BYTES_AT: usize = 24;
const RESERVED_AT: usize = 32;
const CRC_AT: usize = 60;
const _: () = assert!(CRC_AT + 4 == SEGMENT_HEADER_BYTES as usize);

/// The file name of LSS-C segment `sequence`.
pub fn segment_file_name(sequence: u64) -> String {
    format!("lss-{sequence:016x}.seg")
}

/// The sequence number a segment file name holds, if `name` is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("lss-")?.strip_suffix(".seg")?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Encodes the header of segment `sequence`.
pub fn encode_header(sequence: u64, segment_bytes: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut out = [0u8; SEGMENT_HEADER_BYTES as usize];
    out[MAGIC_AT..VERSION_AT].copy_from_slice(&SEGMENT_MAGIC);
    out[VERSION_AT..STORE_AT].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    out[STORE_AT..SEQUENCE_AT].copy_from_slice(&STORE_CURRENT.to_le_bytes());
    out[SEQUENCE_AT..SEGMENT_BYTES_AT].copy_from_slice(&sequence.to_le_bytes());
    out[SEGMENT_BYTES_AT..RESERVED_AT].copy_from_slice(&segment_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&out[..CRC_AT]);
    out[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub sequence: u64,
    pub segment_bytes: u64,
}

/// Decodes a segment header; the error says what is wrong.
pub fn decode_header(bytes: &[u8]) -> std::result::Result<SegmentHeader, String> {
    let Some(bytes) = bytes.get(..SEGMENT_HEADER_BYTES as usize) else {
        return Err(format!(
            "segment header cut short: {} of {SEGMENT_HEADER_BYTES} bytes",
            bytes.len()
        ));
    };
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let half = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(w)
    };
    let stored = half(CRC_AT);
    let computed = crc32c::crc32c(&bytes[..CRC_AT]);
    if stored != computed {
        return Err(format!(
            "segment header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    if bytes[MAGIC_AT..VERSION_AT] != SEGMENT_MAGIC {
        return Err("not an LSS segment (bad magic)".to_string());
    }
    let version = half(VERSION_AT);
    if version != SEGMENT_FORMAT_VERSION {
        return Err(format!(
            "segment format version {version}, this build reads version {SEGMENT_FORMAT_VERSION}"
        ));
    }
    let store = half(STORE_AT);
    if store != STORE_CURRENT {
        return Err(format!("segment of store {store}, expected LSS-C (0)"));
    }
    if bytes[RESERVED_AT..CRC_AT].iter().any(|b| *b != 0) {
        return Err("segment header reserved bytes not zero".to_string());
    }
    Ok(SegmentHeader {
        sequence: word(SEQUENCE_AT),
        segment_bytes: word(SEGMENT_BYTES_AT),
    })
}

/// What [`recover_end`] found and did at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// The end of the valid prefix: the LSS posts from here on.
    pub end: LssAddress,
    /// Segment files found.
    pub segment_count: usize,
    /// Valid records in the scanned (last) segment.
    pub scanned_record_count: u64,
    /// The file and file offset from which invalid bytes were cut, their count, and why the
    /// first of them is not a record.
    pub cut: Option<Cut>,
    /// Segment files removed because their creation never became durable.
    pub removed: Vec<String>,
}

/// Bytes cut from the end of the last segment at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub path: PathBuf,
    pub offset: u64,
    pub bytes: u64,
    pub why: String,
}

/// One open segment file, shared by readers and writers.
pub(crate) type SegmentFile = Arc<Mutex<Box<dyn File>>>;

/// The segment files of one LSS: naming, creation, reading records.
pub(crate) struct Segments {
    dir: Arc<dyn Dir>,
    segment_bytes: u64,
    /// The writers' handles by sequence number (files are never closed while the LSS is
    /// open).
    files: Mutex<BTreeMap<u64, SegmentFile>>,
    /// Separate handles for reads, so that a read never waits for a writer's fsync.
    readers: Mutex<BTreeMap<u64, SegmentFile>>,
}

impl Segments {
    pub(crate) fn new(dir: Arc<dyn Dir>, segment_bytes: u64) -> Self {
        Self {
            dir,
            segment_bytes,
            files: Mutex::new(BTreeMap::new()),
            readers: Mutex::new(BTreeMap::new()),
        }
    }

    pub(crate) fn dir(&self) -> &Arc<dyn Dir> {
        &self.dir
    }

    pub(crate) fn path(&self, sequence: u64) -> PathBuf {
        self.dir.path().join(segment_file_name(sequence))
    }

    /// The read handle of existing segment `sequence`.
    fn reader(&self, sequence: u64) -> Result<SegmentFile> {
        let mut files = self.readers.lock();
        if let Some(file) = files.get(&sequence) {
            return Ok(Arc::clone(file));
        }
        let file = Arc::new(Mutex::new(self.dir.open(&segment_file_name(sequence))?));
        files.insert(sequence, Arc::clone(&file));
        Ok(file)
    }

    /// The handle of segment `sequence`, created first if missing: header written and
    /// fsynced, then the directory fsynced. Precondition (the writer's barrier): every record
    /// of earlier segments is durable.
    pub(crate) fn create_or_open(&self, sequence: u64) -> Result<SegmentFile> {
        let mut files = self.files.lock();
        if let Some(file) = files.get(&sequence) {
            return Ok(Arc::clone(file));
        }
        let name = segment_file_name(sequence);
        let file = if self.dir.exists(&name)? {
            self.dir.open(&name)?
        } else {
            let mut file = self.dir.create(&name)?;
            file.append(&encode_header(sequence, self.segment_bytes))?;
            file.sync()?;
            self.dir.sync_dir()?;
            file
        };
        let file = Arc::new(Mutex::new(file));
        files.insert(sequence, Arc::clone(&file));
        Ok(file)
    }

    /// Deletes segment `sequence`'s file and forgets its handles (a reader still holding
    /// one finishes its read on the unlinked file), then syncs the directory.
    pub(crate) fn remove(&self, sequence: u64) -> Result<()> {
        let name = segment_file_name(sequence);
        if self.dir.exists(&name)? {
            self.dir.remove(&name)?;
        }
        // After the delete: a reader that opened a handle before it is cut off here, and
        // none can open a new one (review rev-clean F8).
        self.files.lock().remove(&sequence);
        self.readers.lock().remove(&sequence);
        self.dir.sync_dir()
    }

    /// Reads the record at `address`. Every failure names the segment file, the offset in it
    /// and, for a damaged record, the PID its header claims.
    pub(crate) fn read_record(&self, address: LssAddress) -> Result<Record> {
        let offset = address.offset();
        let sequence = offset / self.segment_bytes;
        let at = offset % self.segment_bytes;
        let path = self.path(sequence);
        if at < SEGMENT_HEADER_BYTES {
            return Err(Error::InvalidUse(format!(
                "LSS address {address} lies in the header of {}",
                path.display()
            )));
        }
        let mut bytes = self.read_bytes(&**self.reader(sequence)?.lock(), at)?;
        if !record_complete(&bytes) {
            // A reader handle may know its file's length as of its open (`OsDir` files keep
            // it): the segment grew since, so read through a fresh handle.
            let fresh = Arc::new(Mutex::new(self.dir.open(&segment_file_name(sequence))?));
            self.readers.lock().insert(sequence, Arc::clone(&fresh));
            bytes = self.read_bytes(&**fresh.lock(), at)?;
        }
        match record::decode(address, &bytes) {
            Ok(record) => Ok(Record {
                header: record.header,
                payload: record.payload.to_vec(),
            }),
            Err(e) => Err(e.to_error(&path, at, address)),
        }
    }

    /// The bytes of the record at `at` in `file`, as far as the file's known length holds
    /// them.
    fn read_bytes(&self, file: &dyn File, at: u64) -> Result<Vec<u8>> {
        let available = file.len()?.min(self.segment_bytes).saturating_sub(at);
        let mut head = vec![0u8; (RECORD_HEADER_BYTES as u64).min(available) as usize];
        file.read_exact_at(at, &mut head)?;
        let need = match record::payload_len(&head) {
            Some(payload) => RECORD_HEADER_BYTES as u64 + u64::from(payload),
            None => head.len() as u64,
        };
        let mut bytes = head;
        if need > bytes.len() as u64 && need <= available {
            bytes.resize(need as usize, 0);
            file.read_exact_at(at, &mut bytes)?;
        }
        Ok(bytes)
    }

    /// Calls `visit` with every record from `from` (a record's address, or a segment's
    /// first) up to `until`, in log order. A record that fails to decode before `until` and
    /// before its segment file's end is corruption; a segment file's end moves on to the next
    /// segment (the rest of a segment a buffer did not fit stays unwritten).
    pub(crate) fn scan(
        &self,
        from: LssAddress,
        until: u64,
        removed: &dyn Fn(u64) -> bool,
        visit: &mut dyn FnMut(LssAddress, &record::RecordRef<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut offset = from.offset();
        while offset < until {
            let sequence = offset / self.segment_bytes;
            let segment_start = sequence * self.segment_bytes;
            if removed(sequence) {
                offset = segment_start + self.segment_bytes;
                continue;
            }
            let mut at = (offset - segment_start).max(SEGMENT_HEADER_BYTES);
            let name = segment_file_name(sequence);
            let mut window = ReadWindow::new(self.dir.open(&name)?, READ_CHUNK_BYTES)?;
            let path = window.path().to_path_buf();
            let len = window.len().min(self.segment_bytes);
            while at < len && segment_start + at < until {
                let address = LssAddress::current(segment_start + at);
                let bytes = window_record(&mut window, at)?;
                let record =
                    record::decode(address, bytes).map_err(|e| e.to_error(&path, at, address))?;
                let record_len = record.len() as u64;
                visit(address, &record)?;
                at += record_len;
            }
            offset = segment_start + self.segment_bytes;
        }
        Ok(())
    }

    /// Finds the end of the valid prefix at open (see the module doc), cuts what follows it,
    /// and removes segment files whose creation never became durable. `stable_at_least`: an
    /// address the caller knows was stable (a checkpoint's); a prefix ending below it is
    /// corruption, not a torn tail.
    pub(crate) fn recover_end(&self, stable_at_least: u64) -> Result<OpenReport> {
        let mut sequences: Vec<u64> = self
            .dir
            .list()?
            .iter()
            .filter_map(|name| parse_segment_file_name(name))
            .collect();
        sequences.sort_unstable();
        let segment_count = sequences.len();
        let mut removed = Vec::new();
        let mut complete_successor = false;
        while let Some(&sequence) = sequences.last() {
            let name = segment_file_name(sequence);
            let path = self.path(sequence);
            let mut file = self.dir.open(&name)?;
            let file_len = file.len()?;
            let mut head = vec![0u8; SEGMENT_HEADER_BYTES.min(file_len) as usize];
            file.read_exact_at(0, &mut head)?;
            let header = match decode_header(&head) {
                Ok(header) => header,
                Err(why) if file_len <= SEGMENT_HEADER_BYTES && !complete_successor => {
                    // A creation the crash cut off: nothing was written after the header.
                    drop(file);
                    self.dir.remove(&name)?;
                    self.dir.sync_dir()?;
                    removed.push(format!("{name} ({why})"));
                    sequences.pop();
                    if sequences.last().is_some_and(|&prev| prev + 1 != sequence) {
                        return Err(Error::Corrupt {
                            path: self.dir.path().to_path_buf(),
                            offset: 0,
                            what: format!(
                                "LSS segment before {name} missing (segments must be consecutive at the log's end)"
                            ),
                        });
                    }
                    if sequences.is_empty() {
                        let end = sequence * self.segment_bytes;
                        return self.finish_empty(end, stable_at_least, segment_count, removed);
                    }
                    // The segment before it was wholly durable before this one was created.
                    complete_successor = true;
                    continue;
                }
                Err(why) => {
                    return Err(Error::Corrupt {
                        path,
                        offset: 0,
                        what: why,
                    })
                }
            };
            if header.sequence != sequence {
                return Err(Error::Corrupt {
                    path,
                    offset: SEQUENCE_AT as u64,
                    what: format!("segment header names sequence {}", header.sequence),
                });
            }
            if header.segment_bytes != self.segment_bytes {
                return Err(Error::Config(format!(
                    "LSS: {} was written with segment_bytes {}, the LSS is configured with {}",
                    path.display(),
                    header.segment_bytes,
                    self.segment_bytes
                )));
            }
            let segment_start = sequence * self.segment_bytes;
            let len = file_len.min(self.segment_bytes);
            let mut window = ReadWindow::new(self.dir.open(&name)?, READ_CHUNK_BYTES)?;
            let mut at = SEGMENT_HEADER_BYTES;
            let mut scanned_record_count = 0u64;
            let mut failure: Option<(DecodeError, LssAddress)> = None;
            while at < len {
                let address = LssAddress::current(segment_start + at);
                let bytes = window_record(&mut window, at)?;
                match record::decode(address, bytes) {
                    Ok(record) => {
                        at += record.len() as u64;
                        scanned_record_count += 1;
                    }
                    Err(e) => {
                        failure = Some((e, address));
                        break;
                    }
                }
            }
            drop(window);
            let end = segment_start + at;
            if let Some((e, address)) = &failure {
                if complete_successor || segment_start + at < stable_at_least {
                    // Bytes that were durable do not decode: damage, not a torn tail.
                    return Err(e.to_error(&path, at, *address));
                }
            }
            // A full segment's end is the next one's start, whose header holds no record.
            let end_records = if end.is_multiple_of(self.segment_bytes) {
                end + SEGMENT_HEADER_BYTES
            } else {
                end
            };
            if end_records < stable_at_least {
                return Err(Error::Corrupt {
                    path,
                    offset: at,
                    what: format!(
                        "LSS ends at address {end}, below address {stable_at_least} known to be stable"
                    ),
                });
            }
            let cut = if file_len > at {
                file.truncate(at)?;
                file.sync()?;
                Some(Cut {
                    path: path.clone(),
                    offset: at,
                    bytes: file_len - at,
                    why: failure.map_or_else(
                        || "bytes past the segment's size".to_string(),
                        |(e, address)| e.to_error(&path, at, address).to_string(),
                    ),
                })
            } else {
                None
            };
            self.files
                .lock()
                .insert(sequence, Arc::new(Mutex::new(file)));
            return Ok(OpenReport {
                end: LssAddress::current(end),
                segment_count,
                scanned_record_count,
                cut,
                removed,
            });
        }
        self.finish_empty(0, stable_at_least, segment_count, removed)
    }

    fn finish_empty(
        &self,
        end: u64,
        stable_at_least: u64,
        segment_count: usize,
        removed: Vec<String>,
    ) -> Result<OpenReport> {
        if end + SEGMENT_HEADER_BYTES < stable_at_least {
            return Err(Error::Corrupt {
                path: self.dir.path().to_path_buf(),
                offset: 0,
                what: format!(
                    "the LSS holds nothing below address {stable_at_least}, which is known to be stable"
                ),
            });
        }
        Ok(OpenReport {
            end: LssAddress::current(end),
            segment_count,
            scanned_record_count: 0,
            cut: None,
            removed,
        })
    }
}

/// The bytes of the record at file offset `at`: its whole length if the file holds it, else
/// what there is (the decoder then reports the record torn).
pub(crate) fn window_record(window: &mut ReadWindow, at: u64) -> Result<&[u8]> {
    let head = window.bytes_at(at, RECORD_HEADER_BYTES)?;
    let need = match record::payload_len(head) {
        Some(payload) => RECORD_HEADER_BYTES + payload as usize,
        None => RECORD_HEADER_BYTES,
    };
    window.bytes_at(at, need)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // Goal: headers and names round-trip and damage is named. Method: encode, decode, flip.
    #[test]
    fn header_and_name_round_trip() {
        let bytes = encode_header(7, 1 << 20);
        assert_eq!(
            decode_header(&bytes).unwrap(),
            SegmentHeader {
                sequence: 7,
                segment_bytes: 1 << 20
            }
        );
        let mut bad = bytes;
        bad[20] ^= 1;
        assert!(decode_header(&bad).unwrap_err().contains("checksum"));
        assert!(decode_header(&bytes[..10])
            .unwrap_err()
            .contains("cut short"));
        assert_eq!(
            parse_segment_file_name(&segment_file_name(0xabc)),
            Some(0xabc)
        );
        assert_eq!(parse_segment_file_name("lss-12.seg"), None);
        assert_eq!(parse_segment_file_name("log-0000000000000001"), None);
    }
}

/// Whether `bytes` hold a whole record: a header and the payload it announces.
fn record_complete(bytes: &[u8]) -> bool {
    bytes.len() >= RECORD_HEADER_BYTES
        && record::payload_len(bytes).is_some_and(|payload| {
            bytes.len() as u64 >= RECORD_HEADER_BYTES as u64 + u64::from(payload)
        })
}
