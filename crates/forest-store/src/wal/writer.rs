//! [`LogWriter`]: appends records to one log file and makes them durable (issue 5 "Logs";
//! Masstree §5: a per-core log buffer that a logging thread writes out and forces).
//!
//! Records are encoded into a reused buffer by [`LogWriter::append`], handed to the file by
//! [`LogWriter::write`], and made durable by [`LogWriter::sync`], which reports the highest
//! durable LSN: the store acknowledges a write only once its LSN is durable (in `sync` and
//! `group` modes).
//!
//! Invariants:
//! - LSNs passed to `append` strictly increase (the store assigns them; a repeat is a broken
//!   invariant, so a panic).
//! - `durable_lsn` only grows, and only after a successful fsync of every byte up to it.
//! - After any failed write or fsync the writer is failed for good: every later call returns
//!   an error and nothing more is reported durable. A failed fsync leaves the unsynced bytes
//!   unknown (Linux marks the pages clean), so retrying would only pretend (issue 5 "I/O
//!   errors": refuse writes until reopened).
//!
//! Choices: a new log is durable by name before it is used: `create` writes and syncs the
//! header, then syncs the directory, so a crash never leaves records in a file whose name
//! may vanish.

use std::path::Path;

use forest_core::{Error, Result};

use super::record::{encode_header, encode_record, LogHeader, Op, Record, LOG_HEADER_BYTES};
use crate::file::{Dir, File};

/// The writer of one log file.
pub struct LogWriter {
    file: Box<dyn File>,
    header: LogHeader,
    /// Encoded records not yet handed to the file.
    buf: Vec<u8>,
    /// The LSN of the last record appended (to `buf` or the file).
    lsn_last: Option<u64>,
    /// The LSN of the last record in the file (handed over, perhaps not durable).
    lsn_written: Option<u64>,
    /// The LSN of the last record made durable.
    lsn_durable: Option<u64>,
    /// Bytes of the file, header included.
    written_len: u64,
    /// Bytes of the file known durable: a sync is owed while `written_len` is above it
    /// (marks and seals carry no LSN, so LSNs alone cannot tell).
    synced_len: u64,
    /// The watermark of the last mark appended (0: none).
    mark_last: u64,
    failed: bool,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("path", &self.file.path())
            .field("header", &self.header)
            .field("lsn_durable", &self.lsn_durable)
            .field("written_len", &self.written_len)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl LogWriter {
    /// Creates the log file `name` in `dir` with `header` and makes it durable, name
    /// included.
    pub fn create(dir: &dyn Dir, name: &str, header: LogHeader) -> Result<Self> {
        let mut file = dir.create(name)?;
        let mut buf = Vec::with_capacity(LOG_HEADER_BYTES);
        encode_header(&header, &mut buf);
        file.append(&buf)?;
        file.sync()?;
        dir.sync_dir()?;
        buf.clear();
        Ok(Self {
            file,
            header,
            buf,
            lsn_last: None,
            lsn_written: None,
            lsn_durable: None,
            written_len: LOG_HEADER_BYTES as u64,
            synced_len: LOG_HEADER_BYTES as u64,
            mark_last: 0,
            failed: false,
        })
    }

    /// Resumes appending to an existing log whose valid prefix is `valid_len` bytes and
    /// whose last record has `lsn_last` (from [`crate::wal::LogFile`], after any torn tail
    /// was cut). Everything in the file is taken as durable.
    pub fn resume(
        file: Box<dyn File>,
        header: LogHeader,
        valid_len: u64,
        lsn_last: Option<u64>,
    ) -> Result<Self> {
        let len = file.len()?;
        if len != valid_len {
            return Err(Error::Corrupt {
                path: file.path().to_path_buf(),
                offset: valid_len,
                what: format!("log is {len} bytes, {valid_len} expected; cut the torn tail first"),
            });
        }
        Ok(Self {
            file,
            header,
            buf: Vec::new(),
            lsn_last,
            lsn_written: lsn_last,
            lsn_durable: lsn_last,
            written_len: valid_len,
            synced_len: valid_len,
            mark_last: 0,
            failed: false,
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The log's header.
    pub fn header(&self) -> LogHeader {
        self.header
    }

    /// The LSN of the last record made durable, if any.
    pub fn durable_lsn(&self) -> Option<u64> {
        self.lsn_durable
    }

    /// Bytes of the file, header included, once the buffer is written.
    pub fn len_bytes(&self) -> u64 {
        self.written_len + self.buf.len() as u64
    }

    fn failed_error(&self, op: &'static str) -> Error {
        Error::Io {
            path: self.path().to_path_buf(),
            op,
            source: std::io::Error::other(
                "an earlier write or fsync of this log failed; reopen the store",
            ),
        }
    }

    /// Encodes a record into the buffer. Errors: over-long key or value, or a failed writer.
    ///
    /// Panics if `lsn` does not exceed the previous record's, or is below the header's
    /// `first_lsn` (the store assigns LSNs; that would be a broken invariant).
    pub fn append(&mut self, lsn: u64, op: Op, key: &[u8], value: &[u8]) -> Result<()> {
        assert!(
            op.is_data(),
            "append takes data records; see append_control"
        );
        self.append_record(&Record {
            lsn,
            op,
            batch_more: false,
            key,
            value,
            ts: None,
        })
    }

    /// Encodes any data record (batch flag included) into the buffer; as [`Self::append`].
    pub fn append_record(&mut self, record: &Record<'_>) -> Result<()> {
        if self.failed {
            return Err(self.failed_error("append"));
        }
        assert!(record.op.is_data(), "a data record");
        assert!(
            record.lsn >= self.header.first_lsn,
            "LSN below the log's first LSN"
        );
        assert!(
            self.lsn_last.is_none_or(|last| record.lsn > last),
            "LSNs of one log strictly increase"
        );
        encode_record(record, self.header.nonce, &mut self.buf)?;
        self.lsn_last = Some(record.lsn);
        Ok(())
    }

    /// Encodes a mark (watermark `lsn`) or a seal (bound `lsn`) into the buffer.
    pub fn append_control(&mut self, op: Op, lsn: u64) -> Result<()> {
        if self.failed {
            return Err(self.failed_error("append"));
        }
        encode_record(&Record::control(op, lsn), self.header.nonce, &mut self.buf)
    }

    /// Adds records already encoded by [`encode_record`] (LSNs `lsn_first ..= lsn_last`,
    /// increasing) to the buffer: group commit encodes under the shard's lock and hands the
    /// batch over here.
    ///
    /// Panics if `lsn_first` does not exceed the previous record's LSN (broken invariant).
    pub fn append_encoded(&mut self, lsn_first: u64, lsn_last: u64, records: &[u8]) -> Result<()> {
        if self.failed {
            return Err(self.failed_error("append"));
        }
        if records.is_empty() {
            return Ok(());
        }
        assert!(lsn_first <= lsn_last, "a batch's LSNs increase");
        assert!(
            lsn_first >= self.header.first_lsn,
            "LSN below the log's first LSN"
        );
        assert!(
            self.lsn_last.is_none_or(|last| lsn_first > last),
            "LSNs of one log strictly increase"
        );
        self.buf.extend_from_slice(records);
        self.lsn_last = Some(lsn_last);
        Ok(())
    }

    /// Appends a mark with watermark `acked` if it is above the last mark of this log (a
    /// mark claims that every LSN up to `acked` is durable in every log; see group commit).
    pub fn append_mark_if_newer(&mut self, acked: u64) -> Result<()> {
        if acked <= self.mark_last {
            return Ok(());
        }
        self.append_control(Op::Mark, acked)?;
        self.mark_last = acked;
        Ok(())
    }

    /// Hands the buffered records to the file (not yet durable).
    pub fn write(&mut self) -> Result<()> {
        if self.failed {
            return Err(self.failed_error("write"));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.append(&self.buf) {
            // Part of the buffer may be in the file: the log's tail is unknown now.
            self.failed = true;
            return Err(e);
        }
        self.written_len += self.buf.len() as u64;
        self.buf.clear();
        self.lsn_written = self.lsn_last;
        Ok(())
    }

    /// Writes the buffer and fsyncs the file; returns the highest durable LSN.
    pub fn sync(&mut self) -> Result<Option<u64>> {
        self.write()?;
        if self.synced_len == self.written_len {
            return Ok(self.lsn_durable);
        }
        if let Err(e) = self.file.sync() {
            self.failed = true;
            return Err(e);
        }
        self.synced_len = self.written_len;
        self.lsn_durable = self.lsn_written;
        Ok(self.lsn_durable)
    }
}
