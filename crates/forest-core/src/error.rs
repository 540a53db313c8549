//! The one error type of forest's libraries.
//!
//! Bad input and corrupt files are errors that name what and where; a broken internal
//! invariant is a panic (STYLE.md §3). Later layers (store, server) add their variants here so
//! that a caller matches on one type.

/// Result with forest's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with enough detail to act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key longer than [`crate::KEY_BYTES_MAX`].
    #[error("key is {len} bytes long, more than the limit of {max} bytes")]
    KeyTooLong { len: usize, max: usize },
    /// A value longer than [`crate::VALUE_BYTES_MAX`].
    #[error("value is {len} bytes long, more than the limit of {max} bytes")]
    ValueTooLong { len: usize, max: usize },
    /// A configuration value outside its allowed range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A call the API does not allow in the caller's situation (what and why in the text).
    #[error("invalid use: {0}")]
    InvalidUse(String),
    /// An engine name that forest does not know.
    #[error("unknown engine {name:?}; known engines: {known}")]
    UnknownEngine { name: String, known: String },
    /// An I/O operation on a file or directory failed.
    #[error("{op} {path}: {source}", path = path.display())]
    Io {
        path: std::path::PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
    /// A file's contents are damaged: a checksum or a structural check failed at `offset`.
    #[error("{path}: corrupt at byte offset {offset}: {what}", path = path.display())]
    Corrupt {
        path: std::path::PathBuf,
        offset: u64,
        what: String,
    },
}
