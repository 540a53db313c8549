//! The log record format: a file header and checksummed records (issue 5 "Logs", issue 12
//! "Correctness"; Masstree §5: each logged update carries its timestamp, the operation, key
//! and value, and the logs carry the timestamps that bound recovery; here the timestamp is an
//! LSN as in the Bw-tree's TC, bw-tree.md §V-A). Byte by byte in docs/FORMAT.md; all integers
//! little-endian and fixed width.
//!
//! A log file is a [`LogHeader`] ([`LOG_HEADER_BYTES`]) followed by records:
//!
//! ```text
//! header: magic[8] version:u32 shard_id:u32 shard_count:u32 nonce:u32 first_lsn:u64
//!         void_from:u64 flags:u32 crc32c:u32
//! record: length:u32 crc32c:u32 | lsn:u64 op:u8 flags:u8 reserved[2] key_len:u32 value_len:u32 key value
//!                                 \--------- length bytes, covered by crc32c(nonce ‖ …) ---------/
//! ```
//!
//! Record kinds ([`Op`]): `Put` and `Remove` carry data and take an LSN each; a `Mark`
//! carries in its LSN field a *watermark* `W`: when it was written, every LSN up to `W` was
//! durable in every log (recovery refuses a cutoff below any mark it reads); a `Seal` ends a
//! log: its LSN field `R` bounds the log's LSNs (all below `R`), and nothing follows it. The
//! flag [`FLAG_BATCH_MORE`] on a data record says the record at the next LSN, in this same
//! file, belongs to the same atomic batch: a batch is a run of consecutive LSNs whose last
//! record has the flag clear, and recovery applies it whole or not at all. The flag
//! [`FLAG_TIMESTAMP`] on a data record (a store over a temporal engine, issue 18) says its
//! last 8 bytes (counted in `value_len`, after the value) are the version's timestamp, a
//! little-endian `u64`: a remove then has `value_len == 8`.
//!
//! Invariants of a well-formed log (checked on every decode, [`super::LogStream`]):
//! - `length == RECORD_BODY_FIXED_BYTES + key_len + value_len`, `key_len <= KEY_BYTES_MAX`,
//!   `value_len <= value_bytes_max(key)` (forest-core's limit: 8 bytes more for a stamped
//!   key), a remove has `value_len == 0`, marks and seals have no
//!   key, value or flag, reserved bits are zero, the checksum matches.
//! - Data LSNs strictly increase along the file, the first at least the header's
//!   `first_lsn`; a record flagged `BATCH_MORE` is followed by the data record at the next
//!   LSN; a seal's bound exceeds every data LSN before it. A record after a seal ends the
//!   valid prefix (only a truncate lost to a failed fsync leaves one there).
//! - A record logs what the operation did (put of a full value, or remove), so replaying it
//!   twice gives the same state (issue 5: replay is idempotent).
//!
//! Choices the papers leave open:
//! - The checksum covers a random per-log nonce from the header, then everything after the
//!   checksum field: a value that is itself an encoded record (of another log) can never
//!   pass for a record of this one, so bytes after a hole can be read as evidence.
//! - A damaged length is caught by the structural check `length == 20 + key_len +
//!   value_len` or by the checksum over the wrong span.
//! - The header is synced before any record is written (`writer.rs`), so a file longer than
//!   the header whose header is damaged is corruption, never a torn creation.

use forest_core::{
    check_entry, value_bytes_max, Error, Result, KEY_BYTES_MAX, STORED_VALUE_BYTES_MAX,
};
use std::path::Path;

/// The first eight bytes of every log file.
pub const LOG_MAGIC: [u8; 8] = *b"FORESTWL";

/// The log format version this code writes; bump it on any change of layout. 3: a stamped
/// key's value may hold `STORED_VALUE_BYTES_MAX` bytes (a string's deadline beside a value
/// at the limit), so that a build that reads only 2 refuses such a log by its version
/// instead of taking the record for a torn tail.
pub const LOG_FORMAT_VERSION: u32 = 3;

/// The oldest log format version this code reads: 2 has 3's layout (and the builds of
/// session 10 wrote stamped values over the limit under it), so it is read by 3's rules.
pub const LOG_FORMAT_VERSION_OLDEST: u32 = 2;

/// Bytes of the file header.
pub const LOG_HEADER_BYTES: usize = 48;

/// Bytes of a record's length and checksum fields, which the checksum does not cover.
pub const RECORD_FRAME_BYTES: usize = 8;

/// Bytes of a record's fixed fields after the frame: lsn, op, flags, reserved, key_len,
/// value_len.
pub const RECORD_BODY_FIXED_BYTES: usize = 20;

/// Bytes of a record before its key.
pub const RECORD_HEADER_BYTES: usize = RECORD_FRAME_BYTES + RECORD_BODY_FIXED_BYTES;

/// The longest record: the limits of forest-core bound a record, so a damaged length
/// field can never make the reader look past one maximal record.
pub const RECORD_BYTES_MAX: usize =
    RECORD_HEADER_BYTES + KEY_BYTES_MAX + STORED_VALUE_BYTES_MAX + TIMESTAMP_BYTES;

/// Bytes of a version's timestamp after the value of a record flagged [`FLAG_TIMESTAMP`].
pub const TIMESTAMP_BYTES: usize = 8;

/// Flag bit: the data record at the next LSN, in this file, belongs to the same batch.
pub const FLAG_BATCH_MORE: u8 = 1;

/// Flag bit: the record ends with the version's timestamp ([`TIMESTAMP_BYTES`], see the
/// module doc).
pub const FLAG_TIMESTAMP: u8 = 2;

const _: () = assert!(RECORD_HEADER_BYTES == 28);
const _: () = assert!(RECORD_BYTES_MAX <= u32::MAX as usize); // length fits its u32 field
const _: () = assert!(LOG_HEADER_BYTES.is_multiple_of(8)); // records start 8-aligned in the file

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;
const OP_MARK: u8 = 3;
const OP_SEAL: u8 = 4;

/// What a log file's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// The writer shard whose log this is (one log per shard, Masstree §5).
    pub shard_id: u32,
    /// How many shard logs the set of this log has (`log-<seq>-000 ..`): recovery refuses
    /// a set with one missing.
    pub shard_count: u32,
    /// Random per log; every record's checksum covers it.
    pub nonce: u32,
    /// No record of this file has a smaller LSN.
    pub first_lsn: u64,
    /// LSNs `void_from .. first_lsn` are void: recovery cut them when this log set was made
    /// and they are never handed out again (equal to `first_lsn`: no void).
    pub void_from: u64,
    /// The set was made by a store's open ([`HEADER_FLAG_OPENED`]), not by a checkpoint's
    /// rotation: the sets from the newest such one on were written by the last run.
    pub opened: bool,
}

/// Header flag: the log set was made by a store's open.
pub const HEADER_FLAG_OPENED: u32 = 1;

impl LogHeader {
    /// The header of shard `shard_id` of `shard_count`, first LSN `first_lsn`, no void, a
    /// fresh random nonce.
    pub fn new(shard_id: u32, shard_count: u32, first_lsn: u64) -> Self {
        Self {
            shard_id,
            shard_count,
            nonce: rand::random(),
            first_lsn,
            void_from: first_lsn,
            opened: false,
        }
    }
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The key now has this full value.
    Put,
    /// The key is gone (the value is empty).
    Remove,
    /// A watermark: every LSN up to the record's `lsn` was durable in every log.
    Mark,
    /// The end of the log: every data LSN of the file is below the record's `lsn`.
    Seal,
}

impl Op {
    /// Whether the record carries data (and an LSN of its own).
    pub fn is_data(self) -> bool {
        matches!(self, Op::Put | Op::Remove)
    }
}

/// One record, borrowing its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The data record's LSN; a mark's watermark; a seal's bound.
    pub lsn: u64,
    pub op: Op,
    /// [`FLAG_BATCH_MORE`]: the next LSN continues this record's batch.
    pub batch_more: bool,
    pub key: &'a [u8],
    /// Empty for everything but [`Op::Put`].
    pub value: &'a [u8],
    /// The version's timestamp ([`FLAG_TIMESTAMP`]): data records of a temporal store.
    pub ts: Option<u64>,
}

impl<'a> Record<'a> {
    /// A put record, not part of a larger batch.
    pub fn put(lsn: u64, key: &'a [u8], value: &'a [u8]) -> Self {
        Self {
            lsn,
            op: Op::Put,
            batch_more: false,
            key,
            value,
            ts: None,
        }
    }

    /// A remove record, not part of a larger batch.
    pub fn remove(lsn: u64, key: &'a [u8]) -> Self {
        Self {
            lsn,
            op: Op::Remove,
            batch_more: false,
            key,
            value: &[],
            ts: None,
        }
    }

    /// A mark with watermark `lsn` or a seal with bound `lsn`.
    pub fn control(op: Op, lsn: u64) -> Self {
        debug_assert!(!op.is_data());
        Self {
            lsn,
            op,
            batch_more: false,
            key: &[],
            value: &[],
            ts: None,
        }
    }

    /// The record's encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.key.len() + self.value.len() + self.ts_len()
    }

    /// Bytes of the timestamp after the value (0 without one).
    fn ts_len(&self) -> usize {
        if self.ts.is_some() {
            TIMESTAMP_BYTES
        } else {
            0
        }
    }
}

/// A tail cut off by a crash (or damage: recovery decides which from the evidence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the tail starts: the file's valid length.
    pub offset: u64,
    /// How many bytes the tail holds.
    pub bytes: u64,
}

/// What the bytes after a log's valid prefix still show: valid records of this log found
/// past the hole (a crash that wrote later pages but not earlier ones, or damage in the
/// middle). They are never replayed; recovery weighs them as evidence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Valid records found after the hole.
    pub records: u64,
    /// The offset of the first of them.
    pub first_at: Option<u64>,
    /// The highest data LSN among them.
    pub lsn_max: Option<u64>,
    /// The highest watermark among their marks.
    pub mark_max: Option<u64>,
    /// A seal among them (its bound).
    pub seal: Option<u64>,
}

impl Evidence {
    pub(crate) fn add(&mut self, at: u64, record: &Record<'_>) {
        self.records += 1;
        self.first_at.get_or_insert(at);
        match record.op {
            Op::Put | Op::Remove => self.lsn_max = self.lsn_max.max(Some(record.lsn)),
            Op::Mark => self.mark_max = self.mark_max.max(Some(record.lsn)),
            Op::Seal => self.seal = self.seal.max(Some(record.lsn)),
        }
    }
}

/// A decoded log: the whole records before any torn tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// `None` only for a file with no complete header (empty, or torn while being created).
    pub header: Option<LogHeader>,
    /// Every record of the valid prefix, marks and seals included.
    pub records: Vec<Record<'a>>,
    /// Bytes of the valid prefix (header and whole records).
    pub valid_len: u64,
    pub torn: Option<TornTail>,
    /// What the torn tail still holds (default when there is none).
    pub evidence: Evidence,
}

/// Appends the encoding of `header` to `buf`.
pub fn encode_header(header: &LogHeader, buf: &mut Vec<u8>) {
    let start = buf.len();
    buf.extend_from_slice(&LOG_MAGIC);
    buf.extend_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&header.shard_id.to_le_bytes());
    buf.extend_from_slice(&header.shard_count.to_le_bytes());
    buf.extend_from_slice(&header.nonce.to_le_bytes());
    buf.extend_from_slice(&header.first_lsn.to_le_bytes());
    buf.extend_from_slice(&header.void_from.to_le_bytes());
    let flags = if header.opened { HEADER_FLAG_OPENED } else { 0 };
    buf.extend_from_slice(&flags.to_le_bytes());
    let crc = crc32c::crc32c(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(buf.len() - start, LOG_HEADER_BYTES);
}

/// The checksum of a record body in a log whose nonce is `nonce`.
fn record_crc(nonce: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(nonce_crc(nonce), body)
}

/// The crc32c of `nonce`'s bytes, every record's checksum seed in its log: remembered for the
/// thread's last nonce (a log keeps one), since the crate's call costs ~130 instructions even
/// for 4 bytes, a quarter of a small record's encoding (session 14's callgrind).
fn nonce_crc(nonce: u32) -> u32 {
    std::thread_local! {
        static LAST: std::cell::Cell<Option<(u32, u32)>> = const { std::cell::Cell::new(None) };
    }
    LAST.with(|last| match last.get() {
        Some((n, crc)) if n == nonce => crc,
        _ => {
            let crc = crc32c::crc32c(&nonce.to_le_bytes());
            last.set(Some((nonce, crc)));
            crc
        }
    })
}

/// Appends the encoding of `record` to `buf` (a buffer the caller reuses), for the log whose
/// header has `nonce`.
///
/// Errors: a key or value over forest-core's limits. Panics if a remove carries a value or
/// a mark or seal carries anything (the store builds records; a broken invariant).
pub fn encode_record(record: &Record<'_>, nonce: u32, buf: &mut Vec<u8>) -> Result<()> {
    check_entry(record.key, record.value)?;
    assert!(
        record.op == Op::Put || record.value.is_empty(),
        "only a put record carries a value"
    );
    assert!(
        record.op.is_data() || (record.key.is_empty() && !record.batch_more && record.ts.is_none()),
        "marks and seals carry no key, no batch flag and no timestamp"
    );
    let stored_len = record.value.len() + record.ts_len();
    let body_len = RECORD_BODY_FIXED_BYTES + record.key.len() + stored_len;
    let length = u32::try_from(body_len).expect("limits keep a record within u32");
    let op = match record.op {
        Op::Put => OP_PUT,
        Op::Remove => OP_REMOVE,
        Op::Mark => OP_MARK,
        Op::Seal => OP_SEAL,
    };
    let flags = if record.batch_more {
        FLAG_BATCH_MORE
    } else {
        0
    } | if record.ts.is_some() {
        FLAG_TIMESTAMP
    } else {
        0
    };
    buf.reserve(RECORD_FRAME_BYTES + body_len);
    let start = buf.len();
    buf.extend_from_slice(&length.to_le_bytes());
    buf.extend_from_slice(&[0; 4]); // the checksum, filled in below
    buf.extend_from_slice(&record.lsn.to_le_bytes());
    buf.extend_from_slice(&[op, flags, 0, 0]);
    buf.extend_from_slice(&(record.key.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(stored_len as u32).to_le_bytes());
    buf.extend_from_slice(record.key);
    buf.extend_from_slice(record.value);
    if let Some(ts) = record.ts {
        buf.extend_from_slice(&ts.to_le_bytes());
    }
    let crc = record_crc(nonce, &buf[start + RECORD_FRAME_BYTES..]);
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

/// Checks the record at `at` of a log whose nonce is `nonce`, cheap structural checks first
/// so that scanning garbage for a valid record rarely computes a checksum.
pub(crate) fn check_record(data: &[u8], at: usize, nonce: u32) -> Check<'_> {
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
        OP_MARK => Op::Mark,
        OP_SEAL => Op::Seal,
        _ => return Check::Bad("unknown operation"),
    };
    let flags = rest[17];
    if flags & !(FLAG_BATCH_MORE | FLAG_TIMESTAMP) != 0 || rest[18..20] != [0, 0] {
        return Check::Bad("reserved bits not zero");
    }
    let stamped = flags & FLAG_TIMESTAMP != 0;
    let ts_len = if stamped { TIMESTAMP_BYTES } else { 0 };
    if key_len > KEY_BYTES_MAX
        || value_len > STORED_VALUE_BYTES_MAX + ts_len
        || value_len < ts_len
        || length != RECORD_BODY_FIXED_BYTES + key_len + value_len
    {
        return Check::Bad("record length disagrees with key and value lengths");
    }
    // From here on, the value without its timestamp.
    let value_len = value_len - ts_len;
    if op != Op::Put && value_len != 0 {
        return Check::Bad("a record other than a put carries a value");
    }
    if !op.is_data() && (key_len != 0 || flags != 0) {
        return Check::Bad("a mark or seal with a key or flags");
    }
    let Some(body) = rest.get(RECORD_FRAME_BYTES..RECORD_FRAME_BYTES + length) else {
        return Check::Incomplete;
    };
    if record_crc(nonce, body) != u32_at(rest, 4) {
        return Check::Bad("record checksum mismatch");
    }
    let key_start = RECORD_HEADER_BYTES;
    let value_start = key_start + key_len;
    if value_len > value_bytes_max(&rest[key_start..value_start]) {
        return Check::Bad("value longer than its key's limit");
    }
    Check::Valid(
        Record {
            lsn: u64_at(rest, 8),
            op,
            batch_more: flags & FLAG_BATCH_MORE != 0,
            key: &rest[key_start..value_start],
            value: &rest[value_start..value_start + value_len],
            ts: stamped.then(|| u64_at(rest, value_start + value_len)),
        },
        at + RECORD_FRAME_BYTES + length,
    )
}

/// Decodes the header of a log file, if it is whole and its checksum matches; a file longer
/// than a header with a damaged header is corruption (headers are synced before records are
/// written). `len` is the file's length.
pub(crate) fn decode_header(path: &Path, data: &[u8], len: u64) -> Result<Option<LogHeader>> {
    let corrupt = |what: String| Error::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        what,
    };
    let whole = data
        .get(..LOG_HEADER_BYTES)
        .filter(|b| crc32c::crc32c(&b[..LOG_HEADER_BYTES - 4]) == u32_at(b, LOG_HEADER_BYTES - 4));
    let Some(bytes) = whole else {
        if len > LOG_HEADER_BYTES as u64 {
            return Err(corrupt(
                "log header damaged, and the file holds more than a header".to_string(),
            ));
        }
        return Ok(None);
    };
    if bytes[..8] != LOG_MAGIC {
        return Err(corrupt("not a forest log file (bad magic)".to_string()));
    }
    let version = u32_at(bytes, 8);
    if !(LOG_FORMAT_VERSION_OLDEST..=LOG_FORMAT_VERSION).contains(&version) {
        return Err(corrupt(format!(
            "log format version {version}, this build reads versions \
             {LOG_FORMAT_VERSION_OLDEST} to {LOG_FORMAT_VERSION}"
        )));
    }
    let header = LogHeader {
        shard_id: u32_at(bytes, 12),
        shard_count: u32_at(bytes, 16),
        nonce: u32_at(bytes, 20),
        first_lsn: u64_at(bytes, 24),
        void_from: u64_at(bytes, 32),
        opened: u32_at(bytes, 40) & HEADER_FLAG_OPENED != 0,
    };
    if u32_at(bytes, 40) & !HEADER_FLAG_OPENED != 0 {
        return Err(corrupt("header flags unknown".to_string()));
    }
    if header.shard_id >= header.shard_count {
        return Err(corrupt(format!(
            "shard {} of {} shards",
            header.shard_id, header.shard_count
        )));
    }
    if header.void_from > header.first_lsn {
        return Err(corrupt(format!(
            "void from LSN {} above the first LSN {}",
            header.void_from, header.first_lsn
        )));
    }
    Ok(Some(header))
}

/// Decodes a whole log file's bytes (`path` names it in errors): the same rules as
/// [`super::LogStream`], which does the work over the bytes in memory.
///
/// Returns the records of the valid prefix, the torn tail if any, and the evidence after
/// it; [`Error::Corrupt`] for a damaged header before records, a data LSN out of order, an
/// interrupted batch, or a header of another format. Never panics.
pub fn decode_log<'a>(path: &Path, data: &'a [u8]) -> Result<Decoded<'a>> {
    let file = Box::new(crate::file::MemFile::new(path, data.to_vec()));
    let mut stream = super::LogStream::from_file(file)?;
    let mut records = Vec::new();
    while stream.advance()? {
        let (start, key, value) = stream.record_ranges().expect("advance returned true");
        let current = stream.record().expect("advance returned true");
        let at = start as usize;
        records.push(Record {
            lsn: current.lsn,
            op: current.op,
            batch_more: current.batch_more,
            key: &data[at + key.start..at + key.end],
            value: &data[at + value.start..at + value.end],
            ts: current.ts,
        });
    }
    let evidence = stream.evidence()?;
    Ok(Decoded {
        header: stream.header(),
        records,
        valid_len: stream.valid_len().expect("the stream ended"),
        torn: stream.torn(),
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PATH: &str = "/test/shard-0.log";
    const NONCE: u32 = 0x5eed_1234;

    /// An owned record for building test logs.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Owned {
        lsn: u64,
        op: Op,
        batch_more: bool,
        key: Vec<u8>,
        value: Vec<u8>,
        ts: Option<u64>,
    }

    fn header(first_lsn: u64) -> LogHeader {
        LogHeader {
            shard_id: 3,
            shard_count: 4,
            nonce: NONCE,
            first_lsn,
            void_from: first_lsn,
            opened: false,
        }
    }

    fn encode_log(first_lsn: u64, records: &[Owned]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        encode_header(&header(first_lsn), &mut buf);
        let mut ends = vec![buf.len()];
        for r in records {
            let record = Record {
                lsn: r.lsn,
                op: r.op,
                batch_more: r.batch_more,
                key: &r.key,
                value: &r.value,
                ts: r.ts,
            };
            encode_record(&record, NONCE, &mut buf).unwrap();
            ends.push(buf.len());
        }
        (buf, ends)
    }

    // Goal: the remembered nonce checksum never leaks between logs: records encoded for two
    // nonces in turn on one thread each carry their own log's checksum. Method: compare with
    // the checksum computed from scratch, alternating nonces.
    #[test]
    fn record_crc_follows_the_nonce() {
        let body = b"a record body";
        for nonce in [NONCE, NONCE + 1, NONCE, 0, NONCE + 1] {
            let fresh = crc32c::crc32c_append(crc32c::crc32c(&nonce.to_le_bytes()), &body[..]);
            assert_eq!(record_crc(nonce, body), fresh, "nonce {nonce:#x}");
        }
        assert_ne!(record_crc(NONCE, body), record_crc(NONCE + 1, body));
    }

    fn owned(decoded: &Decoded<'_>) -> Vec<Owned> {
        decoded
            .records
            .iter()
            .map(|r| Owned {
                lsn: r.lsn,
                op: r.op,
                batch_more: r.batch_more,
                key: r.key.to_vec(),
                value: r.value.to_vec(),
                ts: r.ts,
            })
            .collect()
    }

    fn data(lsn: u64, put: bool, key: Vec<u8>, value: Vec<u8>) -> Owned {
        Owned {
            lsn,
            op: if put { Op::Put } else { Op::Remove },
            batch_more: false,
            key,
            value: if put { value } else { Vec::new() },
            ts: None,
        }
    }

    fn control(op: Op, lsn: u64) -> Owned {
        Owned {
            lsn,
            op,
            batch_more: false,
            key: Vec::new(),
            value: Vec::new(),
            ts: None,
        }
    }

    fn small_log() -> Vec<Owned> {
        let mut records: Vec<Owned> = (0..6u64)
            .map(|i| {
                data(
                    10 + i * 3,
                    i % 3 != 2,
                    format!("key-{i}").into_bytes(),
                    vec![i as u8; i as usize * 7],
                )
            })
            .collect();
        records.insert(2, control(Op::Mark, 9));
        records
    }

    fn arb_records() -> impl Strategy<Value = Vec<Owned>> {
        prop::collection::vec(
            (
                1u64..1000,
                0u8..8,
                prop::collection::vec(any::<u8>(), 0..40),
                prop::collection::vec(any::<u8>(), 0..200),
            ),
            0..20,
        )
        .prop_map(|items| {
            let mut lsn = 0;
            let mut out: Vec<Owned> = Vec::new();
            for (gap, kind, key, value) in items {
                let in_batch = out.last().is_some_and(|r| r.batch_more);
                if kind == 7 && !in_batch {
                    out.push(control(Op::Mark, lsn));
                    continue;
                }
                lsn += if in_batch { 1 } else { gap };
                let mut record = data(lsn, kind % 2 == 0, key, value);
                record.batch_more = kind == 6;
                // Kinds 4 and 5: a temporal store's records, with a version timestamp.
                if kind / 2 == 2 {
                    record.ts = Some(lsn.wrapping_mul(1_000_003));
                }
                out.push(record);
            }
            if let Some(last) = out.last_mut() {
                last.batch_more = false;
            }
            out
        })
    }

    proptest! {
        #[test]
        fn records_round_trip(records in arb_records(), first_lsn in 0u64..2) {
            // Goal: decode(encode(x)) == x. Method: random records with increasing LSNs,
            // marks and batches among them.
            let (buf, _) = encode_log(first_lsn, &records);
            let decoded = decode_log(Path::new(PATH), &buf).unwrap();
            prop_assert_eq!(decoded.header, Some(header(first_lsn)));
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
            assert_eq!(decoded.evidence.records, 0, "cut {cut}");
        }
    }

    #[test]
    fn every_single_byte_change_is_detected() {
        // Goal: a damaged byte never yields wrong data: in the header it is corruption at
        // offset 0; in a record the valid prefix ends there and the records after it are
        // reported as evidence (recovery weighs them), never replayed. Method: change each
        // byte with three masks, decode.
        let records = small_log();
        let (buf, ends) = encode_log(10, &records);
        for at in 0..buf.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut damaged = buf.clone();
                damaged[at] ^= mask;
                let result = decode_log(Path::new(PATH), &damaged);
                // The record (or header, index 0) holding the damaged byte starts here.
                let index = ends.iter().filter(|&&end| end <= at).count();
                if index == 0 {
                    assert!(
                        matches!(result, Err(Error::Corrupt { offset: 0, .. })),
                        "byte {at}: {result:?}"
                    );
                    continue;
                }
                let start = ends[index - 1];
                let decoded = result.unwrap();
                assert_eq!(owned(&decoded), records[..index - 1], "byte {at}");
                assert_eq!(decoded.valid_len, start as u64, "byte {at}");
                let after = (records.len() - index) as u64;
                assert_eq!(decoded.evidence.records, after, "byte {at} mask {mask:#x}");
                if after > 0 {
                    assert_eq!(decoded.evidence.first_at, Some(ends[index] as u64));
                }
            }
        }
    }

    #[test]
    fn evidence_after_damage_shows_later_marks_and_lsns() {
        // Goal: records after a damaged one are found and summarised (the watermark that
        // proves the damage hit durable data). Method: damage the second record, check the
        // evidence holds the later mark and the highest LSN.
        let mut records = small_log();
        records.push(control(Op::Mark, 25));
        let (mut buf, ends) = encode_log(10, &records);
        buf[ends[1] + 5] ^= 0x10;
        let decoded = decode_log(Path::new(PATH), &buf).unwrap();
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.evidence.mark_max, Some(25));
        assert_eq!(decoded.evidence.lsn_max, Some(25));
        assert_eq!(decoded.evidence.records, records.len() as u64 - 2);
    }

    #[test]
    fn a_record_of_another_log_is_not_valid_here() {
        // Goal: a value that is itself an encoded record (of another log, another nonce)
        // never passes for a record of this log. Method: write a record into a value, cut
        // the log in the middle of that value.
        let mut inner = Vec::new();
        encode_record(&Record::put(99, b"k", b"v"), NONCE ^ 1, &mut inner).unwrap();
        let records = vec![data(10, true, b"a".to_vec(), inner)];
        let (buf, ends) = encode_log(10, &records);
        let cut = &buf[..ends[1] - 1];
        let decoded = decode_log(Path::new(PATH), cut).unwrap();
        assert!(decoded.records.is_empty());
        assert_eq!(decoded.evidence.records, 0);
    }

    #[test]
    fn zeroed_or_random_tail_is_torn() {
        // Goal: a tail of zeros (a file extended but never written) or of random bytes (a
        // torn page) is a tail with no evidence. Method: append each to a log.
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
            assert_eq!(decoded.evidence, Evidence::default());
        }
    }

    #[test]
    fn lsn_out_of_order_is_corrupt() {
        // Goal: a valid record whose LSN does not increase is corruption, not data. Method:
        // encode LSNs 10 then 10, and a first LSN below the header's.
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
    fn batches_and_seals_are_checked() {
        // Goal: a batch is consecutive LSNs with nothing between; nothing follows a seal;
        // a seal bounds the LSNs before it. Method: each broken shape is corrupt at the
        // offending record; a batch whose last record is missing just ends the prefix.
        let mut first = data(10, true, b"a".to_vec(), b"1".to_vec());
        first.batch_more = true;
        let second = data(11, true, b"b".to_vec(), b"2".to_vec());
        let (buf, _) = encode_log(10, &[first.clone(), second.clone()]);
        let decoded = decode_log(Path::new(PATH), &buf).unwrap();
        assert_eq!(decoded.records.len(), 2);
        // Each shape, and the index of the record found at fault.
        let shapes = [
            (
                vec![first.clone(), data(12, true, b"b".to_vec(), Vec::new())],
                1,
            ),
            (vec![first.clone(), control(Op::Mark, 5)], 1),
            (vec![second.clone(), control(Op::Seal, 11)], 1),
        ];
        for (records, at) in shapes {
            let (buf, ends) = encode_log(10, &records);
            let err = decode_log(Path::new(PATH), &buf).unwrap_err();
            assert!(
                matches!(err, Error::Corrupt { offset, .. } if offset == ends[at] as u64),
                "{records:?}: {err}"
            );
        }
        // A record after a seal ends the prefix (a lost truncate leaves that), as evidence.
        let (buf, ends) = encode_log(
            10,
            &[second.clone(), control(Op::Seal, 20), control(Op::Mark, 5)],
        );
        let decoded = decode_log(Path::new(PATH), &buf).unwrap();
        assert_eq!(decoded.records.len(), 2);
        assert_eq!(decoded.valid_len, ends[2] as u64);
        assert_eq!(decoded.evidence.mark_max, Some(5));
        let (buf, _) = encode_log(10, std::slice::from_ref(&first));
        let mut stream =
            super::super::LogStream::from_file(Box::new(crate::file::MemFile::new(PATH, buf)))
                .unwrap();
        stream.drain().unwrap();
        assert!(stream.ends_in_batch());
    }

    #[test]
    fn other_formats_and_versions_are_refused() {
        // Goal: a file of another format or version is an error, not a torn log. Method:
        // rewrite magic and version with a recomputed header checksum.
        let (buf, _) = encode_log(0, &small_log());
        for (at, byte) in [(0, b'X'), (8, 1u8), (8, 4u8)] {
            let mut other = buf.clone();
            other[at] = byte;
            let crc = crc32c::crc32c(&other[..LOG_HEADER_BYTES - 4]);
            other[LOG_HEADER_BYTES - 4..LOG_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
            let text = decode_log(Path::new(PATH), &other).unwrap_err().to_string();
            let refused = match at {
                0 => "bad magic".to_string(),
                _ => format!("log format version {byte}, this build reads versions 2 to 3"),
            };
            assert!(text.contains(&refused), "{text}");
        }
    }

    #[test]
    fn older_version_is_read() {
        // Goal: a log of the previous format version (2, written before the version said
        // that a stamped value may hold the limit plus its stamp) still opens, its records
        // read as the current version's, that stamped value included. Method: a log with
        // such a record, its header rewritten to version 2 with a recomputed checksum.
        let mut stamped = forest_core::STAMPED_KEY_PREFIX.to_vec();
        stamped.extend_from_slice(b"key");
        let mut records = small_log();
        records.push(data(40, true, stamped, vec![9u8; STORED_VALUE_BYTES_MAX]));
        let (buf, _) = encode_log(10, &records);
        assert_eq!(u32_at(&buf, 8), LOG_FORMAT_VERSION);
        let mut old = buf.clone();
        old[8..12].copy_from_slice(&LOG_FORMAT_VERSION_OLDEST.to_le_bytes());
        let crc = crc32c::crc32c(&old[..LOG_HEADER_BYTES - 4]);
        old[LOG_HEADER_BYTES - 4..LOG_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        let decoded = decode_log(Path::new(PATH), &old).expect("version 2 is read");
        assert_eq!(owned(&decoded), records);
        assert_eq!(decoded.torn, None);
        assert_eq!(decoded.valid_len, old.len() as u64);
    }

    #[test]
    fn limits_are_enforced_when_encoding() {
        // Goal: an over-long key or value is an error, never a record; a stamped key (the
        // server's string with a deadline) holds 8 bytes more, and only it. Method: encode
        // one byte over each limit, and the largest legal record; decode it; a record whose
        // value fits only a stamped key, under another key with a matching checksum, is
        // refused on decode.
        use forest_core::{STAMPED_KEY_PREFIX, STAMP_BYTES, VALUE_BYTES_MAX};
        let mut buf = Vec::new();
        let key = vec![1u8; KEY_BYTES_MAX + 1];
        assert!(encode_record(&Record::put(1, &key, b"v"), NONCE, &mut buf).is_err());
        let value = vec![2u8; VALUE_BYTES_MAX + 1];
        assert!(encode_record(&Record::put(1, b"k", &value), NONCE, &mut buf).is_err());
        let mut stamped = STAMPED_KEY_PREFIX.to_vec();
        stamped.resize(KEY_BYTES_MAX, b'k');
        let stored = vec![3u8; STORED_VALUE_BYTES_MAX + 1];
        assert!(encode_record(&Record::put(1, &stamped, &stored), NONCE, &mut buf).is_err());
        assert!(buf.is_empty());
        encode_record(&Record::put(1, &key[1..], &value[1..]), NONCE, &mut buf).unwrap();
        assert_eq!(buf.len(), RECORD_BYTES_MAX - STAMP_BYTES - TIMESTAMP_BYTES);
        buf.clear();
        // The longest record: a stamped key's longest value and a version's timestamp.
        let longest = Record {
            ts: Some(u64::MAX),
            ..Record::put(1, &stamped, &stored[1..])
        };
        encode_record(&longest, NONCE, &mut buf).unwrap();
        assert_eq!(buf.len(), RECORD_BYTES_MAX);
        let mut whole = Vec::new();
        encode_header(&header(0), &mut whole);
        whole.extend_from_slice(&buf);
        let decoded = decode_log(Path::new(PATH), &whole).unwrap();
        assert_eq!(decoded.records, vec![longest]);
        buf.clear();
        encode_record(&Record::put(1, &stamped, &stored[1..]), NONCE, &mut buf).unwrap();
        assert_eq!(buf.len(), RECORD_BYTES_MAX - TIMESTAMP_BYTES);
        let mut log = Vec::new();
        encode_header(&header(0), &mut log);
        let records_at = log.len();
        log.extend_from_slice(&buf);
        let decoded = decode_log(Path::new(PATH), &log).unwrap();
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.records[0].value.len(), STORED_VALUE_BYTES_MAX);
        // The same record under an unstamped key: its value is over that key's limit.
        log[records_at + RECORD_HEADER_BYTES + 1] = b'y';
        let crc = record_crc(NONCE, &log[records_at + RECORD_FRAME_BYTES..]);
        log[records_at + 4..records_at + 8].copy_from_slice(&crc.to_le_bytes());
        let refused = decode_log(Path::new(PATH), &log).map_or(0, |d| d.records.len());
        assert_eq!(refused, 0, "a value over its key's limit is no record");
    }
}
