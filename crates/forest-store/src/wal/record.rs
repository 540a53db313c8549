//! The log record format: a file header and checksummed records (issue 5 "Logs"; Masstree §5:
//! each logged update carries its timestamp, the operation, key and value; here the
//! timestamp is an LSN as in the Bw-tree's TC, bw-tree.md §V-A). Byte by byte in
//! docs/FORMAT.md; all integers little-endian and fixed width.
//!
//! A log file is a [`LogHeader`] ([`LOG_HEADER_BYTES`]) followed by records:
//!
//! ```text
//! header: magic[8] version:u32 shard_id:u32 first_lsn:u64 reserved:u32 crc32c:u32
//! record: length:u32 crc32c:u32 | lsn:u64 op:u8 reserved[3] key_len:u32 value_len:u32 key value
//!                                 \------------- length bytes, covered by crc32c ----------/
//! ```
//!
//! Invariants of a well-formed log (checked on every decode):
//! - `length == RECORD_BODY_FIXED_BYTES + key_len + value_len`, `key_len <= KEY_BYTES_MAX`,
//!   `value_len <= VALUE_BYTES_MAX`, a remove has `value_len == 0`, reserved bytes are zero.
//! - LSNs strictly increase along the file and the first is at least the header's
//!   `first_lsn`.
//! - A record logs what the operation did (put of a full value, or remove), so replaying it
//!   twice gives the same state (issue 5: replay is idempotent).
//!
//! The torn-tail rule (issue 5 "Checkpoints and recovery"): decoding stops at the first
//! offset whose bytes are not a valid record (or header). If no valid record starts anywhere
//! after that offset, the rest is a torn tail — a write cut by a crash — that is reported
//! in [`Decoded::torn`] and cut. If a valid record does follow, acknowledged data after the
//! damage would be lost by cutting, so it is corruption: [`Error::Corrupt`] naming the file
//! and the offset of the first bad byte run. The rule is applied the same way whether the bad
//! record ends beyond the file or fails its checksum, since a damaged length can make a
//! middle record look like it ends beyond the file.
//!
//! Choices the papers leave open:
//! - The checksum covers everything after itself, length excepted; a damaged length is caught
//!   by the structural check `length == 20 + key_len + value_len` (deterministically for any
//!   single damaged length) or by the checksum over the wrong span.
//! - A value that itself contains a whole encoded record, in a torn tail, makes the tail look
//!   like corruption: decoding then refuses rather than cuts (the safe side, never wrong
//!   data).
//! - An empty file has no header and no torn tail (created, nothing written yet).

use std::path::Path;

use forest_core::{check_entry, Error, Result, KEY_BYTES_MAX, VALUE_BYTES_MAX};

/// The first eight bytes of every log file.
pub const LOG_MAGIC: [u8; 8] = *b"FORESTWL";

/// The log format version this code writes and reads; bump it on any change of layout.
pub const LOG_FORMAT_VERSION: u32 = 1;

/// Bytes of the file header.
pub const LOG_HEADER_BYTES: usize = 32;

/// Bytes of a record's length and checksum fields, which the checksum does not cover.
pub const RECORD_FRAME_BYTES: usize = 8;

/// Bytes of a record's fixed fields after the frame: lsn, op, reserved, key_len, value_len.
pub const RECORD_BODY_FIXED_BYTES: usize = 20;

/// Bytes of a record before its key.
pub const RECORD_HEADER_BYTES: usize = RECORD_FRAME_BYTES + RECORD_BODY_FIXED_BYTES;

/// The longest record: the limits of forest-core bound a record, so a damaged length
/// field can never make the reader look past one maximal record.
pub const RECORD_BYTES_MAX: usize = RECORD_HEADER_BYTES + KEY_BYTES_MAX + VALUE_BYTES_MAX;

const _: () = assert!(RECORD_HEADER_BYTES == 28);
const _: () = assert!(RECORD_BYTES_MAX <= u32::MAX as usize); // length fits its u32 field
const _: () = assert!(LOG_HEADER_BYTES.is_multiple_of(8)); // records start 8-aligned in the file

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;

/// What a log file's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// The writer shard whose log this is (one log per shard, Masstree §5).
    pub shard_id: u32,
    /// No record of this file has a smaller LSN.
    pub first_lsn: u64,
}

/// What a record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The key now has this full value.
    Put,
    /// The key is gone (the value is empty).
    Remove,
}

/// One logged operation, borrowing its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub lsn: u64,
    pub op: Op,
    pub key: &'a [u8],
    /// Empty for [`Op::Remove`].
    pub value: &'a [u8],
}

impl Record<'_> {
    /// The record's encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.key.len() + self.value.len()
    }
}

/// A tail cut off by a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the tail starts: the file's valid length.
    pub offset: u64,
    /// How many bytes the tail holds.
    pub bytes: u64,
}

/// A decoded log: the whole records before any torn tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// `None` only for a file with no complete header (empty, or torn while being created).
    pub header: Option<LogHeader>,
    pub records: Vec<Record<'a>>,
    /// Bytes of the valid prefix (header and whole records).
    pub valid_len: u64,
    pub torn: Option<TornTail>,
}

/// Appends the encoding of `header` to `buf`.
pub fn encode_header(header: &LogHeader, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&LOG_MAGIC);
    buf.extend_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&header.shard_id.to_le_bytes());
    buf.extend_from_slice(&header.first_lsn.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(buf.len() - start, LOG_HEADER_BYTES);
}

/// Appends the encoding of `record` to `buf` (a buffer the caller reuses).
///
/// Errors: a key or value over forest-core's limits. Panics if a remove carries a value (the
/// store builds records; that would be a broken invariant).
pub fn encode_record(record: &Record<'_>, buf: &mut Vec<u8>) -> Result<()> {
    check_entry(record.key, record.value)?;
    assert!(
        record.op == Op::Put || record.value.is_empty(),
        "a remove record carries no value"
    );
    let body_len = RECORD_BODY_FIXED_BYTES + record.key.len() + record.value.len();
    let length = u32::try_from(body_len).expect("limits keep a record within u32");
    let op = match record.op {
        Op::Put => OP_PUT,
        Op::Remove => OP_REMOVE,
    };
    buf.reserve(RECORD_FRAME_BYTES + body_len);
    let start = buf.len();
    buf.extend_from_slice(&length.to_le_bytes());
    buf.extend_from_slice(&[0; 4]); // the checksum, filled in below
    buf.extend_from_slice(&record.lsn.to_le_bytes());
    buf.extend_from_slice(&[op, 0, 0, 0]);
    buf.extend_from_slice(&(record.key.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(record.value.len() as u32).to_le_bytes());
    buf.extend_from_slice(record.key);
    buf.extend_from_slice(record.value);
    let crc = crc32c::crc32c(&buf[start + RECORD_FRAME_BYTES..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(buf.len() - start, record.encoded_len());
    Ok(())
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"))
}

/// The verdict on the bytes at one offset.
pub(crate) enum Check<'a> {
    /// A whole, well-formed record and the offset after it.
    Valid(Record<'a>, usize),
    /// The bytes end before the record does (as far as its length field tells).
    Incomplete,
    /// The record is complete but its checksum or structure is wrong.
    Bad(&'static str),
}

/// Checks the record at `at`, cheap structural checks first so that scanning garbage for a
/// valid record rarely computes a checksum.
pub(crate) fn check_record(data: &[u8], at: usize) -> Check<'_> {
    let rest = &data[at..];
    if rest.len() < RECORD_HEADER_BYTES {
        return Check::Incomplete;
    }
    let length = u32_at(rest, 0) as usize;
    if !(RECORD_BODY_FIXED_BYTES..=RECORD_BYTES_MAX - RECORD_FRAME_BYTES).contains(&length) {
        return Check::Bad("record length out of range");
    }
    let key_len = u32_at(rest, 20) as usize;
    let value_len = u32_at(rest, 24) as usize;
    let op = match rest[16] {
        OP_PUT => Op::Put,
        OP_REMOVE => Op::Remove,
        _ => return Check::Bad("unknown operation"),
    };
    if rest[17..20] != [0, 0, 0] {
        return Check::Bad("reserved bytes not zero");
    }
    if key_len > KEY_BYTES_MAX
        || value_len > VALUE_BYTES_MAX
        || length != RECORD_BODY_FIXED_BYTES + key_len + value_len
    {
        return Check::Bad("record length disagrees with key and value lengths");
    }
    if op == Op::Remove && value_len != 0 {
        return Check::Bad("remove record with a value");
    }
    let Some(body) = rest.get(RECORD_FRAME_BYTES..RECORD_FRAME_BYTES + length) else {
        return Check::Incomplete;
    };
    if crc32c::crc32c(body) != u32_at(rest, 4) {
        return Check::Bad("record checksum mismatch");
    }
    let key_start = RECORD_HEADER_BYTES;
    let value_start = key_start + key_len;
    Check::Valid(
        Record {
            lsn: u64_at(rest, 8),
            op,
            key: &rest[key_start..value_start],
            value: &rest[value_start..value_start + value_len],
        },
        at + RECORD_FRAME_BYTES + length,
    )
}

/// Whether a valid record starts anywhere in `data` after `from`.
fn valid_record_follows(data: &[u8], from: usize) -> bool {
    (from + 1..data.len()).any(|at| matches!(check_record(data, at), Check::Valid(..)))
}

/// Decodes the header of a log file, if it is whole and valid.
pub(crate) fn decode_header(path: &Path, data: &[u8]) -> Result<Option<LogHeader>> {
    let Some(bytes) = data.get(..LOG_HEADER_BYTES) else {
        return Ok(None);
    };
    if crc32c::crc32c(&bytes[..LOG_HEADER_BYTES - 4]) != u32_at(bytes, LOG_HEADER_BYTES - 4) {
        return Ok(None);
    }
    let corrupt = |what: String| Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        what,
    };
    if bytes[..8] != LOG_MAGIC {
        return Err(corrupt("not a forest log file (bad magic)".to_string()));
    }
    let version = u32_at(bytes, 8);
    if version != LOG_FORMAT_VERSION {
        return Err(corrupt(format!(
            "log format version {version}, this build reads version {LOG_FORMAT_VERSION}"
        )));
    }
    if u32_at(bytes, 24) != 0 {
        return Err(corrupt("header reserved bytes not zero".to_string()));
    }
    Ok(Some(LogHeader {
        shard_id: u32_at(bytes, 12),
        first_lsn: u64_at(bytes, 16),
    }))
}

/// Decodes a whole log file's bytes (`path` names it in errors).
///
/// Returns the records of the valid prefix and the torn tail, if any; returns
/// [`Error::Corrupt`] for damage followed by valid records, an LSN out of order, or a header
/// of another format. Never panics on any input.
pub fn decode_log<'a>(path: &Path, data: &'a [u8]) -> Result<Decoded<'a>> {
    let torn_at = |offset: usize, records| Decoded {
        header: None,
        records,
        valid_len: offset as u64,
        torn: (offset < data.len()).then(|| TornTail {
            offset: offset as u64,
            bytes: (data.len() - offset) as u64,
        }),
    };
    let Some(header) = decode_header(path, data)? else {
        if valid_record_follows(data, 0) {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                what: "log header damaged but records follow".to_string(),
            });
        }
        return Ok(torn_at(0, Vec::new()));
    };
    let mut records = Vec::new();
    let mut at = LOG_HEADER_BYTES;
    let mut lsn_min = header.first_lsn;
    while at < data.len() {
        let what = match check_record(data, at) {
            Check::Valid(record, next) => {
                if record.lsn < lsn_min {
                    return Err(Error::Corrupt {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        what: format!(
                            "record LSN {} out of order (expected at least {lsn_min})",
                            record.lsn
                        ),
                    });
                }
                lsn_min = record.lsn.saturating_add(1);
                records.push(record);
                at = next;
                continue;
            }
            Check::Incomplete => "record extends beyond the end of the file",
            Check::Bad(what) => what,
        };
        if valid_record_follows(data, at) {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset: at as u64,
                what: format!("{what}, and valid records follow"),
            });
        }
        break;
    }
    let mut decoded = torn_at(at, records);
    decoded.header = Some(header);
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PATH: &str = "/test/shard-0.log";

    /// An owned record for building test logs.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Owned {
        lsn: u64,
        op: Op,
        key: Vec<u8>,
        value: Vec<u8>,
    }

    fn encode_log(first_lsn: u64, records: &[Owned]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        encode_header(
            &LogHeader {
                shard_id: 3,
                first_lsn,
            },
            &mut buf,
        );
        let mut ends = vec![buf.len()];
        for r in records {
            let record = Record {
                lsn: r.lsn,
                op: r.op,
                key: &r.key,
                value: &r.value,
            };
            encode_record(&record, &mut buf).unwrap();
            ends.push(buf.len());
        }
        (buf, ends)
    }

    fn owned(decoded: &Decoded<'_>) -> Vec<Owned> {
        decoded
            .records
            .iter()
            .map(|r| Owned {
                lsn: r.lsn,
                op: r.op,
                key: r.key.to_vec(),
                value: r.value.to_vec(),
            })
            .collect()
    }

    fn small_log() -> Vec<Owned> {
        (0..6u64)
            .map(|i| Owned {
                lsn: 10 + i * 3,
                op: if i % 3 == 2 { Op::Remove } else { Op::Put },
                key: format!("key-{i}").into_bytes(),
                value: if i % 3 == 2 {
                    Vec::new()
                } else {
                    vec![i as u8; i as usize * 7]
                },
            })
            .collect()
    }

    fn arb_records() -> impl Strategy<Value = Vec<Owned>> {
        prop::collection::vec(
            (
                1u64..1000,
                any::<bool>(),
                prop::collection::vec(any::<u8>(), 0..40),
                prop::collection::vec(any::<u8>(), 0..200),
            ),
            0..20,
        )
        .prop_map(|items| {
            let mut lsn = 0;
            items
                .into_iter()
                .map(|(gap, put, key, value)| {
                    lsn += gap;
                    Owned {
                        lsn,
                        op: if put { Op::Put } else { Op::Remove },
                        key,
                        value: if put { value } else { Vec::new() },
                    }
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn records_round_trip(records in arb_records(), first_lsn in 0u64..2) {
            // Goal: decode(encode(x)) == x. Method: random records with increasing LSNs.
            let (buf, _) = encode_log(first_lsn, &records);
            let decoded = decode_log(Path::new(PATH), &buf).unwrap();
            prop_assert_eq!(decoded.header, Some(LogHeader { shard_id: 3, first_lsn }));
            prop_assert_eq!(owned(&decoded), records);
            prop_assert_eq!(decoded.valid_len, buf.len() as u64);
            prop_assert_eq!(decoded.torn, None);
        }

        #[test]
        fn random_damage_never_yields_wrong_data(
            records in arb_records(),
            damage in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        ) {
            // Goal: whatever bytes are damaged, decoding gives a prefix of the true records
            // or a corruption error, never a changed record. Method: xor a few random bytes.
            let (mut buf, _) = encode_log(0, &records);
            for (index, mask) in damage {
                let at = index.index(buf.len());
                buf[at] ^= mask;
            }
            match decode_log(Path::new(PATH), &buf) {
                Ok(decoded) => {
                    let got = owned(&decoded);
                    prop_assert!(got.len() <= records.len());
                    prop_assert_eq!(&got[..], &records[..got.len()]);
                }
                Err(Error::Corrupt { offset, .. }) => prop_assert!(offset < buf.len() as u64),
                Err(other) => prop_assert!(false, "unexpected error {other}"),
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
            // Goal: the decoder survives any input. Method: random bytes, with and without a
            // valid header in front.
            let _ = decode_log(Path::new(PATH), &data);
            let (mut buf, _) = encode_log(0, &[]);
            buf.extend_from_slice(&data);
            let _ = decode_log(Path::new(PATH), &buf);
        }
    }

    #[test]
    fn truncation_at_every_offset_keeps_exactly_the_whole_records() {
        // Goal: a cut anywhere recovers exactly the records wholly before it and reports the
        // rest as a torn tail. Method: decode every prefix of a small log.
        let records = small_log();
        let (buf, ends) = encode_log(10, &records);
        for cut in 0..=buf.len() {
            let decoded = decode_log(Path::new(PATH), &buf[..cut]).unwrap();
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            let kept = whole.saturating_sub(1); // ends[0] is the header's end
            assert_eq!(owned(&decoded), records[..kept], "cut {cut}");
            let valid_len = if whole == 0 { 0 } else { ends[whole - 1] };
            assert_eq!(decoded.valid_len, valid_len as u64, "cut {cut}");
            assert_eq!(decoded.header.is_some(), whole > 0, "cut {cut}");
            let torn = (valid_len < cut).then(|| TornTail {
                offset: valid_len as u64,
                bytes: (cut - valid_len) as u64,
            });
            assert_eq!(decoded.torn, torn, "cut {cut}");
        }
    }

    #[test]
    fn every_single_byte_change_is_detected() {
        // Goal: a damaged byte never yields wrong data: in the last record it is a torn tail
        // (the other records kept), anywhere before it is corruption at the damaged record's
        // offset. Method: change each byte with three masks, decode.
        let records = small_log();
        let (buf, ends) = encode_log(10, &records);
        for at in 0..buf.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut damaged = buf.clone();
                damaged[at] ^= mask;
                let result = decode_log(Path::new(PATH), &damaged);
                // The record (or header, index 0) holding the damaged byte starts here.
                let index = ends.iter().filter(|&&end| end <= at).count();
                let start = if index == 0 { 0 } else { ends[index - 1] };
                if index == records.len() {
                    let decoded = result.unwrap();
                    assert_eq!(owned(&decoded), records[..index - 1], "byte {at}");
                    assert_eq!(decoded.valid_len, start as u64, "byte {at}");
                } else {
                    match result {
                        Err(Error::Corrupt { offset, .. }) => {
                            assert_eq!(offset, start as u64, "byte {at} mask {mask:#x}")
                        }
                        other => panic!("byte {at} mask {mask:#x}: {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn corrupt_middle_names_file_and_offset() {
        // Goal: damage before valid records is an error naming the file and offset.
        // Method: damage the checksum of the third record.
        let (mut buf, ends) = encode_log(10, &small_log());
        buf[ends[2] + 5] ^= 0x10;
        let err = decode_log(Path::new(PATH), &buf).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(PATH), "{text}");
        assert!(text.contains(&ends[2].to_string()), "{text}");
        assert!(text.contains("checksum"), "{text}");
    }

    #[test]
    fn zeroed_or_random_tail_is_torn() {
        // Goal: a tail of zeros (a file extended but never written) or of random bytes (a
        // torn page) is cut, not reported as corruption. Method: append each to a log.
        let records = small_log();
        let (buf, _) = encode_log(10, &records);
        let mut zeros = buf.clone();
        zeros.resize(buf.len() + 4096, 0);
        let mut noise = buf.clone();
        noise.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        for data in [zeros, noise] {
            let decoded = decode_log(Path::new(PATH), &data).unwrap();
            assert_eq!(owned(&decoded), records);
            assert_eq!(
                decoded.torn,
                Some(TornTail {
                    offset: buf.len() as u64,
                    bytes: 4096
                })
            );
        }
    }

    #[test]
    fn lsn_out_of_order_is_corrupt() {
        // Goal: a valid record whose LSN does not increase is corruption, not data. Method:
        // encode LSNs 5 then 5, and a first LSN below the header's.
        let mut records = small_log();
        records[1].lsn = records[0].lsn;
        let (buf, ends) = encode_log(10, &records);
        assert!(matches!(decode_log(Path::new(PATH), &buf),
            Err(Error::Corrupt { offset, .. }) if offset == ends[1] as u64));
        let (buf, _) = encode_log(11, &small_log());
        assert!(matches!(decode_log(Path::new(PATH), &buf),
            Err(Error::Corrupt { offset, .. }) if offset == LOG_HEADER_BYTES as u64));
    }

    #[test]
    fn other_formats_and_versions_are_refused() {
        // Goal: a file of another format or version is an error, not a torn log. Method:
        // rewrite magic and version with a recomputed header checksum.
        let (buf, _) = encode_log(0, &small_log());
        for (at, byte) in [(0, b'X'), (8, 2u8)] {
            let mut other = buf.clone();
            other[at] = byte;
            let crc = crc32c::crc32c(&other[..LOG_HEADER_BYTES - 4]);
            other[LOG_HEADER_BYTES - 4..LOG_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
            let text = decode_log(Path::new(PATH), &other).unwrap_err().to_string();
            assert!(text.contains("magic") || text.contains("version"), "{text}");
        }
    }

    #[test]
    fn limits_are_enforced_when_encoding() {
        // Goal: an over-long key or value is an error, never a record. Method: encode one
        // byte over each limit, and the largest legal record.
        let mut buf = Vec::new();
        let key = vec![1u8; KEY_BYTES_MAX + 1];
        let put = |key, value| Record {
            lsn: 1,
            op: Op::Put,
            key,
            value,
        };
        assert!(encode_record(&put(&key, b"v"), &mut buf).is_err());
        let value = vec![2u8; VALUE_BYTES_MAX + 1];
        assert!(encode_record(&put(b"k", &value), &mut buf).is_err());
        assert!(buf.is_empty());
        encode_record(&put(&key[1..], &value[1..]), &mut buf).unwrap();
        assert_eq!(buf.len(), RECORD_BYTES_MAX);
        let mut log = Vec::new();
        encode_header(
            &LogHeader {
                shard_id: 0,
                first_lsn: 0,
            },
            &mut log,
        );
        log.extend_from_slice(&buf);
        let decoded = decode_log(Path::new(PATH), &log).unwrap();
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.records[0].value.len(), VALUE_BYTES_MAX);
    }
}
