//! forest-core: what every layer of forest shares.
//!
//! - [`index`]: the object-safe [`Index`] trait that every engine implements (DESIGN.md,
//!   "The Index API"): point reads into a reusable buffer, the papers' unique insert, upsert,
//!   update-if-present, remove, and bounded scans in both orders.
//! - [`limits`]: the documented key and value size limits and their checks.
//! - [`error`]: the one error type of forest's libraries.
//! - [`stats`]: [`IndexStats`] and the sharded event counters engines keep (the Bw-tree
//!   paper's Table I figures: CAS failures, consolidations, splits, merges, retries).
//! - [`sync`]: the atomics shim that loom swaps in under `--cfg loom`.
//! - [`temporal`]: the [`TemporalIndex`] extension trait: reads as of a past time and version
//!   histories (TSBw-tree, issue 18).
//! - [`pause`]: test-only pause points between the steps of an engine's structure changes
//!   (feature `pause-points`; a no-op without it).
//! - `conformance` (feature `testkit`): the one test kit every engine passes.

pub mod error;
pub mod hash;
pub mod index;
pub mod limits;
pub mod pause;
pub mod stats;
pub mod sync;
pub mod temporal;

#[cfg(feature = "testkit")]
pub mod conformance;

pub use error::{Error, Result};
pub use index::{Index, Order, Visitor};
pub use limits::{
    check_entry, check_key, value_bytes_max, KEY_BYTES_MAX, STAMPED_KEY_PREFIX, STAMP_BYTES,
    STORED_VALUE_BYTES_MAX, VALUE_BYTES_MAX,
};
pub use stats::{Counter, IndexStats};
pub use temporal::{discarded, HistoryVisitor, InFlight, TemporalIndex, Timestamp, VersionVisitor};
