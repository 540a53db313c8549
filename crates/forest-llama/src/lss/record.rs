//! The LSS record: what one flush, filler or system transaction puts in the log
//! (Bw-tree §V-B "Page Marshalling", §V-A system transaction records; TSBw §II-D, §II-E;
//! llama-notes §2 and §4), byte by byte in docs/FORMAT.md "LSS segments and records".
//!
//! A record is a fixed [`RECORD_HEADER_BYTES`]-byte header and a payload. The header names the
//! kind, the PID, the payload's length, the LSN range of the updates in it, the LSS address of
//! the page's previous piece (incremental flushes chain their pieces, newest first) and a
//! crc32c. The payload's meaning is the access method's (marshalled page image, delta run,
//! system transaction operations): this layer never interprets it.
//!
//! Invariants:
//! - The crc32c covers the record's own LSS address (8 bytes, little-endian), then every
//!   header byte after the crc field, then the payload. A record is therefore valid only at the
//!   address it was written for: stale bytes of an older record, or a record copied elsewhere,
//!   never decode as valid.
//! - Kind 0 is never written, so zeros (an unwritten or cut file area) never decode.
//! - Decoding never panics and never reads past the bytes it is given (fuzzed by
//!   `tests/lss_record.rs`).
//!
//! Choices the papers leave open (llama-notes §7.1): one header for every kind; no alignment
//! between records (buffers are written whole, so nothing gains from it yet); a reserved flags
//! byte and reserved words that must be zero, so later increments can add fields.

use std::path::Path;

use forest_core::Error;

use super::LssAddress;

/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: usize = 48;

/// The PID of records that belong to no page (fillers of an unknown flush, system transaction
/// markers, padding).
pub const PID_NONE: u64 = u64::MAX;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// A whole page state, consolidated into one contiguous image (a first flush, or a page the
    /// cleaner relocates; Bw-tree §II-E). A flush's has no `prev`; a relocation's names in
    /// `prev` the address it relocates from ([`RecordHeader::relocated_from`]), so recovery
    /// applies it only if the page recovers to that address (a relocation whose CAS lost
    /// leaves a stable image that must not supersede newer pieces).
    PageImage = 1,
    /// The deltas of one incremental flush, consolidated into one run (Bw-tree §V-B); `prev`
    /// names the page's previous piece.
    DeltaRun = 2,
    /// Space whose flush lost its CAS or whose reservation was dropped unfilled
    /// (llama-notes §2 step 5); recovery skips it.
    FailedFlush = 3,
    /// The beginning of a system transaction's records (Bw-tree §V-A).
    TxnBegin = 4,
    /// The commit of a system transaction; without it recovery ignores the transaction.
    TxnCommit = 5,
    /// A whole system transaction in one reservation (TSBw §II-E): stable all or nothing.
    TxnUnit = 6,
    /// Bytes that carry nothing, skipped by readers (kept in the format for writers that pad a
    /// buffer to an alignment; this increment writes none).
    Padding = 7,
}

impl RecordKind {
    /// Every kind, in code order.
    pub const ALL: [RecordKind; 7] = [
        RecordKind::PageImage,
        RecordKind::DeltaRun,
        RecordKind::FailedFlush,
        RecordKind::TxnBegin,
        RecordKind::TxnCommit,
        RecordKind::TxnUnit,
        RecordKind::Padding,
    ];

    /// The kind with code `code`, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| *kind as u8 == code)
    }

    /// The kind's name in error messages and tools.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::PageImage => "page image",
            RecordKind::DeltaRun => "delta run",
            RecordKind::FailedFlush => "failed-flush filler",
            RecordKind::TxnBegin => "system-transaction begin",
            RecordKind::TxnCommit => "system-transaction commit",
            RecordKind::TxnUnit => "system-transaction unit",
            RecordKind::Padding => "padding",
        }
    }
}

/// A decoded record header (the payload length is the payload's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    /// The page, or [`PID_NONE`].
    pub pid: u64,
    /// The lowest and highest LSN of the updates in the payload (both 0 when it holds none).
    pub lsn_low: u64,
    pub lsn_high: u64,
    /// The LSS address of the page's previous piece, if this piece continues one; for a page
    /// image, the address a relocation relocates from.
    pub prev: Option<LssAddress>,
}

impl RecordHeader {
    /// The address a relocation image relocates from: a [`RecordKind::PageImage`]'s `prev`.
    pub fn relocated_from(&self) -> Option<LssAddress> {
        match self.kind {
            RecordKind::PageImage => self.prev,
            _ => None,
        }
    }

    /// A header of `kind` for `pid` with no LSNs and no previous piece.
    pub fn new(kind: RecordKind, pid: u64) -> Self {
        Self {
            kind,
            pid,
            lsn_low: 0,
            lsn_high: 0,
            prev: None,
        }
    }
}

/// Byte offsets of the header fields (docs/FORMAT.md).
const CRC_AT: usize = 0;
const KIND_AT: usize = 4;
const FLAGS_AT: usize = 5;
const RESERVED_A_AT: usize = 6;
const LENGTH_AT: usize = 8;
const RESERVED_B_AT: usize = 12;
const PID_AT: usize = 16;
const LSN_LOW_AT: usize = 24;
const LSN_HIGH_AT: usize = 32;
const PREV_AT: usize = 40;
const _: () = assert!(PREV_AT + 8 == RECORD_HEADER_BYTES);

/// The `prev` field's value for "no previous piece".
const PREV_NONE: u64 = u64::MAX;

/// The total bytes of a record with `payload_bytes` of payload.
pub fn record_bytes(payload_bytes: usize) -> usize {
    RECORD_HEADER_BYTES + payload_bytes
}

/// Writes the header of a record at `address` into `out[..RECORD_HEADER_BYTES]` and the crc32c
/// over it and the payload already in `out[RECORD_HEADER_BYTES..]` (the whole of `out` is the
/// record). Precondition: `out.len() >= RECORD_HEADER_BYTES` and the payload fits a `u32`
/// (the LSS bounds records by its segment size, far below).
pub fn encode_in_place(address: LssAddress, header: &RecordHeader, out: &mut [u8]) {
    assert!(out.len() >= RECORD_HEADER_BYTES, "a record holds a header");
    let payload_bytes =
        u32::try_from(out.len() - RECORD_HEADER_BYTES).expect("the LSS bounds a record's length");
    out[KIND_AT] = header.kind as u8;
    out[FLAGS_AT] = 0;
    out[RESERVED_A_AT..LENGTH_AT].fill(0);
    out[LENGTH_AT..RESERVED_B_AT].copy_from_slice(&payload_bytes.to_le_bytes());
    out[RESERVED_B_AT..PID_AT].fill(0);
    out[PID_AT..LSN_LOW_AT].copy_from_slice(&header.pid.to_le_bytes());
    out[LSN_LOW_AT..LSN_HIGH_AT].copy_from_slice(&header.lsn_low.to_le_bytes());
    out[LSN_HIGH_AT..PREV_AT].copy_from_slice(&header.lsn_high.to_le_bytes());
    let prev = header.prev.map_or(PREV_NONE, LssAddress::to_bits);
    out[PREV_AT..RECORD_HEADER_BYTES].copy_from_slice(&prev.to_le_bytes());
    let crc = checksum(address, &out[KIND_AT..]);
    out[CRC_AT..KIND_AT].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes a whole record at `address` into a new vector.
pub fn encode(address: LssAddress, header: &RecordHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; record_bytes(payload.len())];
    out[RECORD_HEADER_BYTES..].copy_from_slice(payload);
    encode_in_place(address, header, &mut out);
    out
}

fn checksum(address: LssAddress, covered: &[u8]) -> u32 {
    let seed = crc32c::crc32c(&address.to_bits().to_le_bytes());
    crc32c::crc32c_append(seed, covered)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Why the bytes at an address are not a valid record. Each names the PID its header claims
/// (unverified unless the checksum matched), so that a report says which page is hurt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Zeros (or nothing) where a header should be: never written, the normal end of a log.
    Unwritten { have: u64 },
    /// The bytes end before the header, or before the payload the header announces: a write
    /// cut short (or a length field that damage made too large).
    Torn {
        pid: Option<u64>,
        needed: u64,
        have: u64,
    },
    /// The crc32c does not match: damage, or bytes that were never this record.
    BadChecksum {
        pid: u64,
        stored: u32,
        computed: u32,
    },
    /// The checksum matches but the kind code is unknown (a newer format).
    UnknownKind { pid: u64, code: u8 },
    /// The checksum matches but a reserved field is not zero or the LSN range is inverted.
    BadHeader { pid: u64, what: &'static str },
}

impl DecodeError {
    /// The PID the damaged header names, if it got that far.
    pub fn pid(&self) -> Option<u64> {
        match self {
            DecodeError::Unwritten { .. } => None,
            DecodeError::Torn { pid, .. } => *pid,
            DecodeError::BadChecksum { pid, .. }
            | DecodeError::UnknownKind { pid, .. }
            | DecodeError::BadHeader { pid, .. } => Some(*pid),
        }
    }

    /// Whether the bytes were all zero where a header should be: never written.
    pub fn is_unwritten(&self) -> bool {
        matches!(self, DecodeError::Unwritten { .. })
    }

    /// The [`Error::Corrupt`] for this failure at `address`, `file_offset` bytes into `path`.
    pub fn to_error(&self, path: &Path, file_offset: u64, address: LssAddress) -> Error {
        let pid = match self.pid() {
            Some(PID_NONE) => "no PID".to_string(),
            Some(pid) if matches!(self, DecodeError::BadChecksum { .. }) => {
                format!("PID {pid} (unverified)")
            }
            Some(pid) => format!("PID {pid}"),
            None => "PID unknown".to_string(),
        };
        let detail = match self {
            DecodeError::Unwritten { have } => {
                format!("no record: {have} bytes present, all zero")
            }
            DecodeError::Torn { needed, have, .. } => {
                format!("torn record: needs {needed} bytes, {have} present")
            }
            DecodeError::BadChecksum {
                stored, computed, ..
            } => format!("bad checksum: stored {stored:#010x}, computed {computed:#010x}"),
            DecodeError::UnknownKind { code, .. } => format!("unknown record kind {code}"),
            DecodeError::BadHeader { what, .. } => format!("bad header: {what}"),
        };
        Error::Corrupt {
            path: path.to_path_buf(),
            offset: file_offset,
            what: format!("LSS record at address {address} ({pid}): {detail}"),
        }
    }
}

/// A record decoded from a byte slice: its header and a view of its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub header: RecordHeader,
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// The record's total length in bytes.
    pub fn len(&self) -> usize {
        record_bytes(self.payload.len())
    }

    /// Always false: a record has a header.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The payload length a header announces, if `bytes` holds a whole header.
pub fn payload_len(bytes: &[u8]) -> Option<u32> {
    (bytes.len() >= RECORD_HEADER_BYTES).then(|| u32_at(bytes, LENGTH_AT))
}

/// Decodes the record at `address` from `bytes`, which start at the record (trailing bytes are
/// ignored).
pub fn decode(address: LssAddress, bytes: &[u8]) -> Result<RecordRef<'_>, DecodeError> {
    let head = &bytes[..bytes.len().min(RECORD_HEADER_BYTES)];
    if head.iter().all(|b| *b == 0) {
        return Err(DecodeError::Unwritten {
            have: head.len() as u64,
        });
    }
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(DecodeError::Torn {
            pid: (bytes.len() >= LSN_LOW_AT).then(|| u64_at(bytes, PID_AT)),
            needed: RECORD_HEADER_BYTES as u64,
            have: bytes.len() as u64,
        });
    }
    let header = &bytes[..RECORD_HEADER_BYTES];
    let pid = u64_at(header, PID_AT);
    let needed = RECORD_HEADER_BYTES as u64 + u64::from(u32_at(header, LENGTH_AT));
    if needed > bytes.len() as u64 {
        return Err(DecodeError::Torn {
            pid: Some(pid),
            needed,
            have: bytes.len() as u64,
        });
    }
    // The check above bounds `needed` by a slice length.
    let record = &bytes[..needed as usize];
    let stored = u32_at(header, CRC_AT);
    let computed = checksum(address, &record[KIND_AT..]);
    if stored != computed {
        return Err(DecodeError::BadChecksum {
            pid,
            stored,
            computed,
        });
    }
    let code = header[KIND_AT];
    let Some(kind) = RecordKind::from_code(code) else {
        return Err(DecodeError::UnknownKind { pid, code });
    };
    if header[FLAGS_AT] != 0 {
        return Err(DecodeError::BadHeader {
            pid,
            what: "unknown flag bits",
        });
    }
    if header[RESERVED_A_AT..LENGTH_AT].iter().any(|b| *b != 0)
        || header[RESERVED_B_AT..PID_AT].iter().any(|b| *b != 0)
    {
        return Err(DecodeError::BadHeader {
            pid,
            what: "reserved bytes not zero",
        });
    }
    let lsn_low = u64_at(header, LSN_LOW_AT);
    let lsn_high = u64_at(header, LSN_HIGH_AT);
    if lsn_low > lsn_high {
        return Err(DecodeError::BadHeader {
            pid,
            what: "LSN range inverted (low above high)",
        });
    }
    let prev = match u64_at(header, PREV_AT) {
        PREV_NONE => None,
        bits => match LssAddress::from_bits(bits) {
            Some(prev) => Some(prev),
            None => {
                return Err(DecodeError::BadHeader {
                    pid,
                    what: "previous-piece address has unknown tag bits",
                })
            }
        },
    };
    Ok(RecordRef {
        header: RecordHeader {
            kind,
            pid,
            lsn_low,
            lsn_high,
            prev,
        },
        payload: &record[RECORD_HEADER_BYTES..],
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn header() -> RecordHeader {
        RecordHeader {
            kind: RecordKind::DeltaRun,
            pid: 42,
            lsn_low: 7,
            lsn_high: 9,
            prev: Some(LssAddress::current(1000)),
        }
    }

    // Goal: a record decodes to what was encoded, at its own address only. Method: encode,
    // decode at the same and at another address.
    #[test]
    fn round_trips_at_its_own_address_only() {
        let at = LssAddress::current(4096);
        let bytes = encode(at, &header(), b"payload");
        let record = decode(at, &bytes).unwrap();
        assert_eq!(record.header, header());
        assert_eq!(record.payload, b"payload");
        assert_eq!(record.len(), bytes.len());
        let err = decode(LssAddress::current(4097), &bytes).unwrap_err();
        assert!(
            matches!(err, DecodeError::BadChecksum { pid: 42, .. }),
            "{err:?}"
        );
    }

    // Goal: each failure is told apart and named. Method: cut, flip, zero and re-kind a record.
    #[test]
    fn failures_are_exact() {
        let at = LssAddress::current(64);
        let bytes = encode(at, &header(), &[5u8; 100]);
        assert_eq!(
            decode(at, &bytes[..bytes.len() - 1]).unwrap_err(),
            DecodeError::Torn {
                pid: Some(42),
                needed: bytes.len() as u64,
                have: bytes.len() as u64 - 1
            }
        );
        assert!(decode(at, &[0u8; 30]).unwrap_err().is_unwritten());
        assert!(decode(at, &[0u8; 300]).unwrap_err().is_unwritten());
        let mut flipped = bytes.clone();
        flipped[RECORD_HEADER_BYTES + 3] ^= 0x10;
        assert!(matches!(
            decode(at, &flipped).unwrap_err(),
            DecodeError::BadChecksum { pid: 42, .. }
        ));
        let mut unknown = bytes.clone();
        unknown[KIND_AT] = 200;
        let crc = checksum(at, &unknown[KIND_AT..]);
        unknown[..4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(at, &unknown).unwrap_err(),
            DecodeError::UnknownKind { pid: 42, code: 200 }
        );
        let text = decode(at, &flipped)
            .unwrap_err()
            .to_error(Path::new("/sim/lss-0.seg"), 64, at)
            .to_string();
        assert!(text.contains("/sim/lss-0.seg"), "{text}");
        assert!(text.contains("offset 64"), "{text}");
        assert!(text.contains("PID 42"), "{text}");
        assert!(text.contains("bad checksum"), "{text}");
    }
}
