//! Reading log files back (issue 5 "Checkpoints and recovery"; issue 12: damage is weighed,
//! never guessed away).
//!
//! - [`LogStream`]: decodes a log front to back through a bounded [`ReadWindow`] (about
//!   two maximal records of memory, whatever the file's size); recovery and `verify` use it,
//!   and [`super::record::decode_log`] runs it over bytes in memory, so a log means the same
//!   whichever reader reads it.
//! - [`LogFile`]: the whole file in memory, decoded by `decode_log` (tests and small tools).
//!
//! The valid prefix ends at the first offset whose bytes are not a valid record. What lies
//! after it is a *tail*: a crash cut it (a torn write, or later pages written back before
//! earlier ones) or the medium damaged it. The stream cannot tell which; it reports the
//! tail and, on request ([`LogStream::evidence`]), the valid records of this log that the
//! tail still holds (the per-log nonce in every checksum makes them unmistakable). Recovery
//! then refuses the tail if anything proves it held acknowledged data (a watermark mark at or
//! beyond the LSNs lost, a newer log set, a checkpoint's end), and cuts it otherwise.
//!
//! Structural errors inside the valid prefix (a data LSN out of order, a batch interrupted
//! by another record, a damaged header before records) are [`Error::Corrupt`] naming the
//! file and offset: no crash produces them. A valid record after a seal ends the prefix
//! instead: a cut whose truncate was lost to a failed fsync leaves exactly that.
//!
//! Why window and whole-file verdicts match: `check_record` judges a record from its own
//! bytes only (the `8 + length` bytes its length field claims, never more than
//! [`RECORD_BYTES_MAX`]), so its verdict on a window holding those bytes (or reaching the end
//! of the file) is its verdict on the whole file.

use std::ops::Range;
use std::path::{Path, PathBuf};

use forest_core::{Error, Result};

use super::record::{
    check_record, decode_header, decode_log, Check, Decoded, Evidence, LogHeader, Op, Record,
    TornTail, LOG_HEADER_BYTES, RECORD_BYTES_MAX, RECORD_FRAME_BYTES, RECORD_HEADER_BYTES,
};
use crate::file::{Dir, File, ReadWindow, READ_CHUNK_BYTES};

/// Where the current record of a [`LogStream`] lies.
#[derive(Clone, Debug)]
struct Current {
    lsn: u64,
    op: Op,
    batch_more: bool,
    ts: Option<u64>,
    /// File offsets of the record's first byte and the byte after it.
    start: u64,
    end: u64,
    /// Offsets of key and value within the window's bytes from `start`.
    key: Range<usize>,
    value: Range<usize>,
}

/// A log decoded front to back in bounded memory (see the module doc).
#[derive(Debug)]
pub struct LogStream {
    window: ReadWindow,
    path: PathBuf,
    /// How far past an offset a record may reach ([`RECORD_BYTES_MAX`]; smaller in tests).
    lookahead: usize,
    header: Option<LogHeader>,
    nonce: u32,
    current: Option<Current>,
    /// The file offset of the next record.
    next_at: u64,
    /// The lowest data LSN the next data record may carry.
    lsn_min: u64,
    /// The previous data record was flagged `BATCH_MORE`: the next must be data at `lsn_min`.
    in_batch: bool,
    /// The seal read, if any: its bound and offset.
    seal: Option<u64>,
    seal_at: u64,
    /// The highest watermark of the marks read.
    mark_max: Option<u64>,
    /// The last mark's watermark, and whether the last record read was a mark.
    mark_last: Option<u64>,
    previous_was_mark: bool,
    /// The seal directly follows a mark of everything below it: a clean close wrote it.
    closed_cleanly: bool,
    /// The highest data LSN read.
    lsn_max: Option<u64>,
    /// Set once the valid prefix has ended: its length and the torn tail, if any.
    end: Option<(u64, Option<TornTail>)>,
    evidence: Option<Evidence>,
    /// Why the valid prefix ended before the end of the file.
    tail_what: &'static str,
    record_count: u64,
}

impl LogStream {
    /// Opens the log `name` of `dir` and decodes its header.
    pub fn open(dir: &dyn Dir, name: &str) -> Result<Self> {
        Self::from_file(dir.open(name)?)
    }

    /// Decodes the log in `file`.
    pub fn from_file(file: Box<dyn File>) -> Result<Self> {
        Self::with_window(file, RECORD_BYTES_MAX, READ_CHUNK_BYTES)
    }

    /// As [`Self::from_file`] with a smaller window: `lookahead` must be at least the longest
    /// record in the file for the verdicts to match the whole file's (tests of refills).
    pub(crate) fn with_window(file: Box<dyn File>, lookahead: usize, chunk: usize) -> Result<Self> {
        let path = file.path().to_path_buf();
        let window = ReadWindow::new(file, chunk)?;
        let mut stream = Self {
            window,
            path,
            lookahead,
            header: None,
            nonce: 0,
            current: None,
            next_at: LOG_HEADER_BYTES as u64,
            lsn_min: 0,
            in_batch: false,
            seal: None,
            seal_at: 0,
            mark_max: None,
            mark_last: None,
            previous_was_mark: false,
            closed_cleanly: false,
            lsn_max: None,
            end: None,
            evidence: None,
            tail_what: "",
            record_count: 0,
        };
        let len = stream.window.len();
        let bytes = stream.window.bytes_at(0, LOG_HEADER_BYTES)?;
        match decode_header(&stream.path, bytes, len)? {
            Some(header) => {
                stream.lsn_min = header.first_lsn;
                stream.nonce = header.nonce;
                stream.header = Some(header);
            }
            None => {
                stream.finish_at(0);
                stream.evidence = Some(Evidence::default());
            }
        }
        Ok(stream)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.window.len()
    }

    /// The header; `None` for a file without a whole header (empty, or torn at creation).
    pub fn header(&self) -> Option<LogHeader> {
        self.header
    }

    /// Records read so far (marks and seals included).
    pub fn record_count(&self) -> u64 {
        self.record_count
    }

    fn corrupt(&self, offset: u64, what: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            offset,
            what,
        }
    }

    /// Moves to the next record of the valid prefix (data, mark or seal); false at its end.
    /// Errors: a structural error ([`Error::Corrupt`] with the offset; see the module doc),
    /// or a failed read.
    pub fn advance(&mut self) -> Result<bool> {
        self.current = None;
        if self.end.is_some() {
            return Ok(false);
        }
        let at = self.next_at;
        if at >= self.window.len() {
            self.finish_at(at);
            return Ok(false);
        }
        let data = record_bytes(&mut self.window, at, self.lookahead)?;
        let (record, next) = match check_record(data, 0, self.nonce) {
            Check::Valid(record, next) => (record, next),
            Check::Incomplete => {
                self.tail_what = "record extends beyond the end of the file";
                self.finish_at(at);
                return Ok(false);
            }
            Check::Bad(what) => {
                self.tail_what = what;
                self.finish_at(at);
                return Ok(false);
            }
        };
        let key_start = record.key.as_ptr() as usize - data.as_ptr() as usize;
        let value_start = record.value.as_ptr() as usize - data.as_ptr() as usize;
        let current = Current {
            lsn: record.lsn,
            op: record.op,
            batch_more: record.batch_more,
            ts: record.ts,
            start: at,
            end: at + next as u64,
            key: key_start..key_start + record.key.len(),
            value: value_start..value_start + record.value.len(),
        };
        if self.seal.is_some() {
            // Only a cut whose truncate never reached the disk (a failed fsync) leaves
            // records after a seal: they end the prefix as a tail, evidence never replayed.
            self.tail_what = "a record after the log's seal (left by an earlier cut)";
            self.finish_at(at);
            return Ok(false);
        }
        if self.in_batch && !(current.op.is_data() && current.lsn == self.lsn_min) {
            return Err(self.corrupt(
                at,
                format!("batch interrupted: LSN {} expected next", self.lsn_min),
            ));
        }
        match current.op {
            Op::Put | Op::Remove => {
                if current.lsn < self.lsn_min {
                    return Err(self.corrupt(
                        at,
                        format!(
                            "record LSN {} out of order (expected at least {})",
                            current.lsn, self.lsn_min
                        ),
                    ));
                }
                self.lsn_min = current.lsn.saturating_add(1);
                self.in_batch = current.batch_more;
                self.lsn_max = Some(current.lsn);
            }
            Op::Mark => {
                self.mark_max = self.mark_max.max(Some(current.lsn));
                self.mark_last = Some(current.lsn);
            }
            Op::Seal => {
                if current.lsn < self.lsn_min {
                    return Err(self.corrupt(
                        at,
                        format!(
                            "seal bound {} below the log's LSNs (next {})",
                            current.lsn, self.lsn_min
                        ),
                    ));
                }
                self.seal = Some(current.lsn);
                self.seal_at = current.start;
                // A clean close writes a mark of everything, then the seal (group commit).
                self.closed_cleanly =
                    self.mark_last == Some(current.lsn.saturating_sub(1)) && self.previous_was_mark;
            }
        }
        self.previous_was_mark = current.op == Op::Mark;
        self.next_at = current.end;
        self.current = Some(current);
        self.record_count += 1;
        Ok(true)
    }

    /// The record [`Self::advance`] moved to, if it returned true.
    pub fn record(&self) -> Option<Record<'_>> {
        let current = self.current.as_ref()?;
        // The window was last moved to this record's start, so the record is buffered.
        let data = self.window.peek(current.start);
        Some(Record {
            lsn: current.lsn,
            op: current.op,
            batch_more: current.batch_more,
            key: &data[current.key.clone()],
            value: &data[current.value.clone()],
            ts: current.ts,
        })
    }

    /// The current record's file offset and its key and value ranges relative to it.
    pub(crate) fn record_ranges(&self) -> Option<(u64, Range<usize>, Range<usize>)> {
        let c = self.current.as_ref()?;
        Some((c.start, c.key.clone(), c.value.clone()))
    }

    /// The LSN field of the current record.
    pub fn lsn(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.lsn)
    }

    /// The current record's kind.
    pub fn op(&self) -> Option<Op> {
        self.current.as_ref().map(|c| c.op)
    }

    /// The file offset of the current record.
    pub fn record_start(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.start)
    }

    /// The file offset just past the current record.
    pub fn record_end(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.end)
    }

    /// Once [`Self::advance`] returned false: the valid prefix's length.
    pub fn valid_len(&self) -> Option<u64> {
        self.end.map(|(len, _)| len)
    }

    /// Once [`Self::advance`] returned false: the torn tail, if any.
    pub fn torn(&self) -> Option<TornTail> {
        self.end.and_then(|(_, torn)| torn)
    }

    /// Why the valid prefix ended before the end of the file ("" if it did not).
    pub fn tail_reason(&self) -> &'static str {
        self.tail_what
    }

    /// The seal read so far, if any (its bound).
    pub fn seal(&self) -> Option<u64> {
        self.seal
    }

    /// Whether the log ends as a clean close leaves it: a mark of everything, then the seal
    /// (recovery's and rotation's seals follow no such mark).
    pub fn closed_cleanly(&self) -> bool {
        self.closed_cleanly && self.torn().is_none()
    }

    /// The offset of the seal read, if any.
    pub fn seal_at(&self) -> Option<u64> {
        self.seal.map(|_| self.seal_at)
    }

    /// The highest watermark of the marks read so far.
    pub fn mark_max(&self) -> Option<u64> {
        self.mark_max
    }

    /// The highest data LSN read so far.
    pub fn lsn_max(&self) -> Option<u64> {
        self.lsn_max
    }

    /// Whether the valid prefix ended inside a batch (its last data record flagged
    /// `BATCH_MORE`).
    pub fn ends_in_batch(&self) -> bool {
        self.in_batch
    }

    /// Reads the rest of the valid prefix (checking it); the number of records read in all.
    pub fn drain(&mut self) -> Result<u64> {
        while self.advance()? {}
        Ok(self.record_count)
    }

    /// Once the valid prefix has ended: the valid records of this log that the tail still
    /// holds (scanned once, front to back through the window; memory stays bounded).
    pub fn evidence(&mut self) -> Result<Evidence> {
        self.drain()?;
        if let Some(evidence) = self.evidence {
            return Ok(evidence);
        }
        let mut evidence = Evidence::default();
        let len = self.window.len();
        // From the tail's first byte: a valid record can stand there (one after a seal).
        let mut at = self.valid_len().expect("drained");
        while at < len {
            let data = record_bytes(&mut self.window, at, self.lookahead)?;
            match check_record(data, 0, self.nonce) {
                Check::Valid(record, next) => {
                    evidence.add(at, &record);
                    at += next as u64;
                }
                Check::Incomplete | Check::Bad(_) => at += 1,
            }
        }
        self.evidence = Some(evidence);
        Ok(evidence)
    }

    fn finish_at(&mut self, at: u64) {
        let len = self.window.len();
        let torn = (at < len).then_some(TornTail {
            offset: at,
            bytes: len - at,
        });
        self.end = Some((at, torn));
        if torn.is_none() {
            self.evidence = Some(Evidence::default());
        }
    }
}

/// The window's bytes from `at`: the whole record its length field claims (at most
/// `lookahead` bytes), or up to the end of the file; enough for [`check_record`]'s
/// verdict to be the whole file's.
fn record_bytes(window: &mut ReadWindow, at: u64, lookahead: usize) -> Result<&[u8]> {
    let head = window.bytes_at(at, RECORD_HEADER_BYTES)?;
    let claimed = match head.get(..4) {
        Some(length) => {
            let mut word = [0u8; 4];
            word.copy_from_slice(length);
            RECORD_FRAME_BYTES.saturating_add(u32::from_le_bytes(word) as usize)
        }
        None => RECORD_HEADER_BYTES,
    };
    let need = claimed.clamp(RECORD_HEADER_BYTES, lookahead.max(RECORD_HEADER_BYTES));
    window.bytes_at(at, need)
}

/// A log file's bytes, read whole (tests and small tools; recovery streams with
/// [`LogStream`]).
#[derive(Clone, Debug)]
pub struct LogFile {
    path: PathBuf,
    data: Vec<u8>,
}

impl LogFile {
    /// Reads the log `name` of `dir`.
    pub fn read(dir: &dyn Dir, name: &str) -> Result<Self> {
        let file = dir.open(name)?;
        let mut data = Vec::new();
        file.read_all(&mut data)?;
        Ok(Self {
            path: file.path().to_path_buf(),
            data,
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The log's raw bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Decodes the records of the valid prefix; see [`decode_log`] for the torn-tail rule.
    pub fn decode(&self) -> Result<Decoded<'_>> {
        decode_log(&self.path, &self.data)
    }
}

/// Cuts the log `name` of `dir` to `len` bytes and syncs it, always: a cut whose earlier
/// sync failed or never ran looks done in the page cache, and a power loss would bring the
/// cut records back (issue 12, defect 3).
pub fn cut_log(dir: &dyn Dir, name: &str, len: u64) -> Result<()> {
    let mut file = dir.open(name)?;
    if file.len()? != len {
        file.truncate(len)?;
    }
    file.sync()
}

/// Ends the log `name` of `dir` (whose valid prefix is its whole length, `nonce` its
/// header's) with a seal of bound `bound`, and syncs it.
pub fn seal_log(dir: &dyn Dir, name: &str, nonce: u32, bound: u64) -> Result<()> {
    let mut file = dir.open(name)?;
    let mut buf = Vec::new();
    super::record::encode_record(&Record::control(Op::Seal, bound), nonce, &mut buf)?;
    file.append(&buf)?;
    file.sync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{CrashMode, FaultPlan, SimDir};
    use crate::wal::{LogHeader, LogWriter, Op};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    type Outcome = std::result::Result<
        (
            Option<LogHeader>,
            Vec<(u64, Op, Vec<u8>, Vec<u8>)>,
            u64,
            Option<crate::wal::record::TornTail>,
            crate::wal::Evidence,
        ),
        u64,
    >;

    fn error_offset(e: forest_core::Error) -> u64 {
        match e {
            forest_core::Error::Corrupt { offset, .. } => offset,
            other => panic!("only corruption expected: {other}"),
        }
    }

    /// What `decode_log` makes of `data`.
    fn whole_outcome(data: &[u8]) -> Outcome {
        let d = decode_log(Path::new("/t/log"), data).map_err(error_offset)?;
        let records = d
            .records
            .iter()
            .map(|r| (r.lsn, r.op, r.key.to_vec(), r.value.to_vec()))
            .collect();
        Ok((d.header, records, d.valid_len, d.torn, d.evidence))
    }

    /// What a [`LogStream`] with a small window makes of `data`.
    fn stream_outcome(data: &[u8], lookahead: usize, chunk: usize) -> Outcome {
        let file = Box::new(crate::file::MemFile::new("/t/log", data.to_vec()));
        let mut stream = LogStream::with_window(file, lookahead, chunk).map_err(error_offset)?;
        let mut records = Vec::new();
        while stream.advance().map_err(error_offset)? {
            let r = stream.record().unwrap();
            records.push((r.lsn, r.op, r.key.to_vec(), r.value.to_vec()));
        }
        let evidence = stream.evidence().map_err(error_offset)?;
        Ok((
            stream.header(),
            records,
            stream.valid_len().unwrap(),
            stream.torn(),
            evidence,
        ))
    }

    fn random_log(rng: &mut StdRng) -> Vec<u8> {
        let mut buf = Vec::new();
        let header = LogHeader::new(0, 1, 1);
        crate::wal::encode_header(&header, &mut buf);
        let mut lsn = 0;
        for _ in 0..rng.random_range(0..30) {
            lsn += rng.random_range(1..3);
            let key = vec![rng.random::<u8>(); rng.random_range(0..20)];
            let put = rng.random_bool(0.8);
            let value = if put {
                vec![rng.random::<u8>(); rng.random_range(0..200)]
            } else {
                Vec::new()
            };
            let op = if put { Op::Put } else { Op::Remove };
            crate::wal::encode_record(
                &Record {
                    lsn,
                    op,
                    batch_more: false,
                    key: &key,
                    value: &value,
                    ts: None,
                },
                header.nonce,
                &mut buf,
            )
            .unwrap();
        }
        buf
    }

    #[test]
    fn stream_agrees_with_the_whole_file_decoder() {
        // Goal: the streaming reader means exactly what decode_log means on every log, whole,
        // cut or damaged, across window refills. Method: random logs, each also truncated,
        // bit-flipped and overwritten at random, read both ways with windows of a few
        // hundred bytes and chunks of 1..64 bytes; outcomes (records, valid length, torn
        // tail, or the offset of the corruption) must be equal.
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..3000 {
            let mut data = random_log(&mut rng);
            match rng.random_range(0..4) {
                0 => {}
                1 => data.truncate(rng.random_range(0..=data.len())),
                2 if !data.is_empty() => {
                    let at = rng.random_range(0..data.len());
                    data[at] ^= 1 << rng.random_range(0..8);
                }
                _ if !data.is_empty() => {
                    let at = rng.random_range(0..data.len());
                    let end = (at + rng.random_range(1..40)).min(data.len());
                    rng.fill(&mut data[at..end]);
                }
                _ => {}
            }
            let whole = whole_outcome(&data);
            let chunk = rng.random_range(1..64);
            // 28 + 19 + 199 bytes is the longest record random_log writes.
            let streamed = stream_outcome(&data, 256, chunk);
            assert_eq!(streamed, whole, "chunk {chunk}");
            assert_eq!(
                stream_outcome(&data, RECORD_BYTES_MAX, READ_CHUNK_BYTES),
                whole
            );
        }
    }

    fn value_of(lsn: u64) -> Vec<u8> {
        vec![lsn as u8; (lsn as usize * 37) % 3000]
    }

    /// Writes `count` records with LSNs 1..=count, syncing after record `synced` (0: never),
    /// and returns the writer.
    fn write_log(dir: &SimDir, count: u64, synced: u64) -> LogWriter {
        let header = LogHeader::new(1, 2, 1);
        let mut writer = LogWriter::create(dir, "wal-1.log", header).unwrap();
        for lsn in 1..=count {
            let op = if lsn % 5 == 0 { Op::Remove } else { Op::Put };
            let value = if op == Op::Put {
                value_of(lsn)
            } else {
                Vec::new()
            };
            writer
                .append(lsn, op, format!("k{lsn}").as_bytes(), &value)
                .unwrap();
            if lsn % 3 == 0 {
                writer.write().unwrap();
            }
            if lsn == synced {
                assert_eq!(writer.sync().unwrap(), Some(synced));
            }
        }
        writer.write().unwrap();
        writer
    }

    /// Checks that the log holds records 1..=n for some n >= `synced`, each intact.
    fn check_prefix(dir: &SimDir, synced: u64, count: u64) -> u64 {
        let log = LogFile::read(dir, "wal-1.log").unwrap();
        let decoded = log.decode().unwrap();
        let n = decoded.records.len() as u64;
        assert!(n >= synced, "lost synced records: {n} < {synced}");
        assert!(n <= count);
        for (i, record) in decoded.records.iter().enumerate() {
            let lsn = i as u64 + 1;
            assert_eq!(record.lsn, lsn);
            assert_eq!(record.key, format!("k{lsn}").as_bytes());
            if record.op == Op::Put {
                assert_eq!(record.value, value_of(lsn));
            }
        }
        n
    }

    #[test]
    fn power_loss_keeps_a_prefix_that_holds_everything_synced() {
        // Goal: after a simulated power loss the log reads back as records 1..=n with every
        // synced record included and nothing altered. Method: for many seeds write records,
        // sync part way, write more, crash with random tails and torn pages, decode.
        let mut rng = StdRng::seed_from_u64(5);
        let mut saw_torn = false;
        let mut saw_extra = false;
        for seed in 0..300 {
            let dir = SimDir::new(seed);
            let count = rng.random_range(1..40);
            let synced = rng.random_range(0..=count);
            let _writer = write_log(&dir, count, synced);
            dir.crash();
            let n = check_prefix(&dir, synced, count);
            saw_extra |= n > synced;
            let log = LogFile::read(&dir, "wal-1.log").unwrap();
            let decoded = log.decode().unwrap();
            saw_torn |= decoded.torn.is_some();
            // Cutting the tail and resuming gives a log that appends cleanly.
            let valid_len = decoded.valid_len;
            let header = decoded.header.unwrap();
            drop(decoded);
            cut_log(&dir, "wal-1.log", valid_len).unwrap();
            let file = dir.open("wal-1.log").unwrap();
            let mut writer =
                LogWriter::resume(file, header, valid_len, (n > 0).then_some(n)).unwrap();
            writer.append(n + 1, Op::Put, b"after", b"crash").unwrap();
            writer.sync().unwrap();
            dir.crash_with(CrashMode::DropUnsynced);
            let log = LogFile::read(&dir, "wal-1.log").unwrap();
            let decoded = log.decode().unwrap();
            assert_eq!(decoded.records.len() as u64, n + 1);
            assert_eq!(decoded.torn, None);
        }
        assert!(saw_torn, "some crash should tear the tail");
        assert!(saw_extra, "some crash should keep unsynced records");
    }

    #[test]
    fn a_failed_fsync_fails_the_writer_for_good() {
        // Goal: after an fsync error nothing more is reported durable and every later call
        // fails; what was synced before survives. Method: fail the second sync, then crash.
        for seed in 0..50 {
            let dir = SimDir::new(seed);
            let mut writer = write_log(&dir, 10, 4);
            dir.set_faults(FaultPlan::sync(1));
            writer.append(11, Op::Put, b"k11", &value_of(11)).unwrap();
            assert!(writer.sync().is_err());
            assert_eq!(writer.durable_lsn(), Some(4));
            let text = writer.sync().unwrap_err().to_string();
            assert!(text.contains("wal-1.log"), "{text}");
            assert!(writer.append(12, Op::Put, b"k12", b"v").is_err());
            dir.crash();
            check_prefix(&dir, 4, 11);
        }
    }

    #[test]
    fn a_failed_write_fails_the_writer_and_loses_nothing_synced() {
        // Goal: ENOSPC on a write is returned, the writer refuses more, synced records stay.
        // Method: fail the next write with ENOSPC after syncing 6 records, crash, decode.
        for seed in 0..50 {
            let dir = SimDir::new(seed);
            let mut writer = write_log(&dir, 6, 6);
            dir.set_faults(FaultPlan::write(1, crate::file::FaultKind::NoSpace));
            writer.append(7, Op::Put, b"k7", &value_of(7)).unwrap();
            let err = writer.write().unwrap_err();
            assert!(matches!(err, forest_core::Error::Io { op: "write", .. }));
            assert!(writer.sync().is_err());
            dir.crash();
            check_prefix(&dir, 6, 7);
        }
    }

    #[test]
    fn os_dir_log_round_trips() {
        // Goal: the writer and reader work on the real file system with real fsyncs.
        // Method: write, sync, reopen and decode in a temporary directory.
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::file::OsDir::open(tmp.path()).unwrap();
        let header = LogHeader::new(9, 10, 100);
        let mut writer = LogWriter::create(&dir, "wal-9.log", header).unwrap();
        for lsn in 100..200 {
            writer
                .append(lsn, Op::Put, &lsn.to_le_bytes(), &value_of(lsn))
                .unwrap();
        }
        assert_eq!(writer.sync().unwrap(), Some(199));
        drop(writer);
        let log = LogFile::read(&dir, "wal-9.log").unwrap();
        let decoded = log.decode().unwrap();
        assert_eq!(decoded.header, Some(header));
        assert_eq!(decoded.records.len(), 100);
        assert_eq!(decoded.records[99].value, value_of(199));
        assert_eq!(decoded.torn, None);
    }

    #[test]
    fn a_log_whose_creation_was_lost_reads_as_empty_or_absent() {
        // Goal: a crash during creation leaves no log or an empty, headerless one, never an
        // error. Method: create without syncing the directory by hand through the trait,
        // crash, read.
        for seed in 0..30 {
            let dir = SimDir::new(seed);
            let mut file = dir.create("wal-2.log").unwrap();
            let mut buf = Vec::new();
            crate::wal::encode_header(&LogHeader::new(2, 3, 0), &mut buf);
            file.append(&buf).unwrap();
            dir.crash();
            if dir.exists("wal-2.log").unwrap() {
                let log = LogFile::read(&dir, "wal-2.log").unwrap();
                let decoded = log.decode().unwrap();
                assert!(decoded.records.is_empty());
            }
        }
    }
}
