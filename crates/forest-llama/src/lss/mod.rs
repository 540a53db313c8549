//! The log-structured store (LSS): LLAMA's storage layer (Bw-tree §II-E, §V-B, §VIII-B;
//! TSBw §II-D; llama-notes §2 and §4). Issue 17, first increment: the files and the flush
//! buffer. Flush deltas, eviction, cleaning, system transactions and checkpoints are later
//! increments that post through [`Lss::reserve`] and read through [`Lss::read`].
//!
//! | module | paper |
//! |--------|-------|
//! | [`record`] | §V-B "Page Marshalling" (one contiguous piece per flush), §V-A system-transaction records; llama-notes §2 failed-flush fillers |
//! | [`segment`] | §II-E, TSBw §II-D: the log as fixed-size segment files; the end of the stable prefix at open |
//! | [`buffer`] | §V-B "Flush Activity", §VIII-B latch-free flush buffer; TSBw §II-D Flush, Mk-Stable, Hi-Stable |
//! | `space` | §II-E, TSBw §V-A: live bytes per segment for the cleaner (`crate::clean`) |
//!
//! Addresses: an [`LssAddress`] is a logical byte offset into one endless log, monotonic,
//! never reused; segment `n` holds offsets `n * segment_bytes ..  (n + 1) * segment_bytes`
//! (its first [`segment::SEGMENT_HEADER_BYTES`] are the file's header). One bit of the
//! address is the store tag: LSS-C (current, this module) or LSS-H (TSBw §V-B2's archive of
//! historical pages, a later issue); an address with its tag fits a mapping-table word
//! ([`crate::page_state::STORAGE_OFFSET_MAX`]).
//!
//! Invariants:
//! - Records never cross a segment boundary and never overlap; each lies wholly in one flush
//!   buffer generation, written to its segment file in one write.
//! - [`Lss::hi_stable`] only grows; every record whose address is below it is durable (its
//!   buffer's write and fsync returned success), whatever order writes completed in.
//! - After a failed write or fsync, nothing past the failed buffer ever counts as stable and
//!   every later post fails, naming the file, until the LSS is reopened.
//! - A segment file is created (header written, file and directory fsynced) only after every
//!   buffer of the segments before it is durable, so after a crash only the last segment can
//!   hold a hole, and [`Lss::open`] finds the end of the valid prefix by scanning it alone.

pub mod buffer;
pub mod record;
pub mod segment;
pub(crate) mod space;

use std::fmt;

use forest_core::{Error, Result};

pub use buffer::{Lss, LssStats, Reservation};
pub use record::{RecordHeader, RecordKind, RECORD_HEADER_BYTES};
pub use segment::OpenReport;

/// The address bit that tags an LSS-H (archive) address (TSBw §V-B2).
const ARCHIVE_BIT: u64 = 1 << 61;

/// The largest log offset an address holds: 2 EiB, far beyond any device.
pub const LSS_OFFSET_MAX: u64 = ARCHIVE_BIT - 1;

// An address with its tag must fit a mapping-table word's storage offset.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(ARCHIVE_BIT + LSS_OFFSET_MAX <= crate::page_state::STORAGE_OFFSET_MAX);

/// An address in the log-structured store: a log offset and the store it belongs to.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LssAddress(u64);

impl LssAddress {
    /// The LSS-C address of log offset `offset`. Panics above [`LSS_OFFSET_MAX`] (the LSS
    /// never hands such an offset out: it is 2 EiB).
    pub fn current(offset: u64) -> Self {
        assert!(offset <= LSS_OFFSET_MAX, "LSS offset {offset} out of range");
        Self(offset)
    }

    /// The LSS-H (archive) address of log offset `offset` (TSBw §V-B2; nothing writes the
    /// archive yet).
    pub fn archive(offset: u64) -> Self {
        assert!(offset <= LSS_OFFSET_MAX, "LSS offset {offset} out of range");
        Self(offset | ARCHIVE_BIT)
    }

    /// The log offset.
    pub fn offset(self) -> u64 {
        self.0 & LSS_OFFSET_MAX
    }

    /// Whether the address is in LSS-H.
    pub fn is_archive(self) -> bool {
        self.0 & ARCHIVE_BIT != 0
    }

    /// The address as stored on disk and in mapping-table words.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// The address `bits` encode, or `None` if bits outside the offset and the tag are set.
    pub fn from_bits(bits: u64) -> Option<Self> {
        (bits & !(ARCHIVE_BIT | LSS_OFFSET_MAX) == 0).then_some(Self(bits))
    }
}

impl fmt::Display for LssAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_archive() {
            write!(f, "H:{}", self.offset())
        } else {
            write!(f, "{}", self.offset())
        }
    }
}

impl fmt::Debug for LssAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LssAddress({self})")
    }
}

/// The default segment size: large sequential files, few of them (the cleaner's unit later).
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// The default flush buffer size: Bw-tree §V-B's "currently set at 1MB".
pub const BUFFER_BYTES_DEFAULT: u32 = 1 << 20;
/// The default number of flush buffers: §V-B's ping-pong pair.
pub const BUFFER_COUNT_DEFAULT: usize = 2;
/// The default number of writer threads: one keeps writes in log order.
pub const WRITER_THREAD_COUNT_DEFAULT: usize = 1;

/// The smallest segment: a header and a few buffers' worth of records (tests use small ones
/// so that runs cross segment boundaries often).
pub const SEGMENT_BYTES_MIN: u64 = 16 << 10;
/// The largest segment: offsets inside a segment, and so record and buffer lengths, fit the
/// 32-bit offset field of a buffer's state word.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 32;
/// The smallest flush buffer: room for a few records with their headers.
pub const BUFFER_BYTES_MIN: u32 = 1 << 10;
/// The most flush buffers: each holds `buffer_bytes` of memory for the life of the LSS.
pub const BUFFER_COUNT_MAX: usize = 16;

/// How an [`Lss`] is laid out and runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LssConfig {
    /// Bytes per segment file, header included (a format property: all segments of a store
    /// have the same size, checked at open).
    pub segment_bytes: u64,
    /// Bytes per flush buffer: a buffer is written in one write when full (or when
    /// [`Lss::mk_stable`] needs it).
    pub buffer_bytes: u32,
    /// Flush buffers: one fills while the others are written (2: ping-pong).
    pub buffer_count: usize,
    /// Background threads that write and fsync full buffers; more than one lets writes
    /// complete out of order ([`Lss::hi_stable`] stays a prefix).
    pub writer_thread_count: usize,
}

impl Default for LssConfig {
    fn default() -> Self {
        Self {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            buffer_bytes: BUFFER_BYTES_DEFAULT,
            buffer_count: BUFFER_COUNT_DEFAULT,
            writer_thread_count: WRITER_THREAD_COUNT_DEFAULT,
        }
    }
}

impl LssConfig {
    /// Checks every field's range and their relations.
    pub fn validate(&self) -> Result<()> {
        let fail = |what: String| Err(Error::Config(format!("LSS: {what}")));
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return fail(format!(
                "segment_bytes {} outside {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX}",
                self.segment_bytes
            ));
        }
        let room = self.segment_bytes - segment::SEGMENT_HEADER_BYTES;
        if self.buffer_bytes < BUFFER_BYTES_MIN || u64::from(self.buffer_bytes) > room {
            return fail(format!(
                "buffer_bytes {} outside {BUFFER_BYTES_MIN}..={room} (a segment's room after its header)",
                self.buffer_bytes
            ));
        }
        if !(2..=BUFFER_COUNT_MAX).contains(&self.buffer_count) {
            return fail(format!(
                "buffer_count {} outside 2..={BUFFER_COUNT_MAX}",
                self.buffer_count
            ));
        }
        if !(1..=self.buffer_count).contains(&self.writer_thread_count) {
            return fail(format!(
                "writer_thread_count {} outside 1..={} (the buffer count)",
                self.writer_thread_count, self.buffer_count
            ));
        }
        Ok(())
    }

    /// The largest record (header included) the LSS takes: one segment's room.
    pub fn record_bytes_max(&self) -> u64 {
        self.segment_bytes - segment::SEGMENT_HEADER_BYTES
    }
}

/// A record read back from the LSS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub header: RecordHeader,
    pub payload: Vec<u8>,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    // Goal: addresses keep offset and store apart and reject stray bits. Method: round-trip
    // both stores, decode bad bits.
    #[test]
    fn addresses_round_trip() {
        let c = LssAddress::current(12345);
        let h = LssAddress::archive(12345);
        assert_eq!(c.offset(), h.offset());
        assert!(!c.is_archive());
        assert!(h.is_archive());
        assert_eq!(LssAddress::from_bits(h.to_bits()), Some(h));
        assert_eq!(LssAddress::from_bits(c.to_bits()), Some(c));
        assert_eq!(LssAddress::from_bits(1 << 62), None);
        assert_eq!(LssAddress::from_bits(u64::MAX), None);
        assert_eq!(h.to_string(), "H:12345");
    }

    // Goal: bad configurations are refused by name. Method: one bad field at a time.
    #[test]
    fn config_is_checked() {
        assert!(LssConfig::default().validate().is_ok());
        let bad = [
            LssConfig {
                segment_bytes: 100,
                ..LssConfig::default()
            },
            LssConfig {
                buffer_bytes: 10,
                ..LssConfig::default()
            },
            LssConfig {
                buffer_count: 1,
                ..LssConfig::default()
            },
            LssConfig {
                writer_thread_count: 3,
                ..LssConfig::default()
            },
        ];
        for config in bad {
            let text = config.validate().unwrap_err().to_string();
            assert!(text.contains("LSS:"), "{text}");
        }
    }
}
