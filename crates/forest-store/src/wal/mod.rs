//! The write-ahead log: one log file per writer shard, records with LSNs, checksums and a
//! torn-tail rule (issue 5 "Logs"; Masstree §5 per-core logs; bw-tree.md §V-A LSNs).
//!
//! - [`record`]: the byte format of a log file and its decoder (docs/FORMAT.md).
//! - [`writer`]: appends records to a log file of the file trait and syncs them.
//! - [`reader`]: reads a log file back, and cuts a torn tail before appending resumes.
//!
//! Group commit (a background flusher sharing each fsync among writers) builds on
//! [`writer::LogWriter`] in a later step of issue 5.

pub mod reader;
pub mod record;
pub mod writer;

pub use reader::{cut_torn_tail, LogFile};
pub use record::{decode_log, encode_header, encode_record, Decoded, LogHeader, Op, Record};
pub use writer::LogWriter;
