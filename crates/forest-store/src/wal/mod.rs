//! The write-ahead log: one log file per writer shard, records with LSNs, checksums and a
//! torn-tail rule (issue 5 "Logs"; Masstree §5 per-core logs; bw-tree.md §V-A LSNs).
//!
//! - [`record`]: the byte format of a log file and its decoder (docs/FORMAT.md).
//! - [`writer`]: appends records to a log file of the file trait and syncs them.
//! - [`reader`]: reads a log file back, and cuts a torn tail before appending resumes.
//!
//! - [`group_commit`]: the shard logs of an open store, each with a background flusher
//!   that shares one fsync among many writers.
//!
//! Log files are named `log-<seq>-<shard>` ([`log_name`]): `seq` grows with every new set
//! of logs (store open, checkpoint rotation), so names never repeat.

pub mod group_commit;
pub mod reader;
pub mod record;
pub mod writer;

const LOG_PREFIX: &str = "log-";

/// The name of shard `shard`'s log of the set `seq`.
pub fn log_name(seq: u64, shard: u32) -> String {
    format!("{LOG_PREFIX}{seq:010}-{shard:03}")
}

/// The `(seq, shard)` of a log's name, `None` for any other name.
pub fn parse_log_name(name: &str) -> Option<(u64, u32)> {
    let rest = name.strip_prefix(LOG_PREFIX)?;
    let (seq, shard) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(seq) || !digits(shard) {
        return None;
    }
    Some((seq.parse().ok()?, shard.parse().ok()?))
}

pub use reader::{cut_log, seal_log, LogFile, LogStream};
pub use record::{
    decode_log, encode_header, encode_record, Decoded, Evidence, LogHeader, Op, Record,
};
pub use writer::LogWriter;
