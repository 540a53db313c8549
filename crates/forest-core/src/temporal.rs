//! The `TemporalIndex` extension trait: reads as of a past time and a key's version history
//! (TSBw-tree §III-A1, issue 18). Implemented by engines that keep every version (`tsbtree`).
//!
//! Contract:
//! - Every write gets a timestamp: a `u64`, strictly increasing over all writes of the index
//!   (wall-clock microseconds when the clock allows, `max(now, last + 1)`). An update inserts a
//!   version; a delete inserts a tombstone version that ends the key's lifetime.
//! - `get_as_of(key, t)` answers with the version of `key` whose timestamp is the largest at or
//!   below `t`, absent when there is none or it is a tombstone. `t = u64::MAX` is the current
//!   state. A version whose write has not returned yet may or may not be seen; once every
//!   write with a timestamp at or below `t` has returned, the answer for `t` never changes.
//! - `scan_as_of` is [`crate::Index::scan`] at time `t` (same bounds, orders and per-record
//!   guarantees); `history(key, from, to, order, visit)` hands out every version of `key` with
//!   a timestamp in `from..=to`, once each (a version a time split copied into two pages is
//!   still one version), tombstones as `None`.
//! - Retention (§V-C): [`TemporalIndex::set_retention`] raises a threshold `T` (it never
//!   falls); history before `T` may be discarded. Every read as of a time below `T`, and a
//!   history whose range starts below `T`, is refused with [`discarded`]'s error, never
//!   answered from what is left. Reads at `T` or later answer exactly as before.

use std::ops::{Bound, ControlFlow};

use crate::error::{Error, Result};
use crate::index::{Index, Order, Visitor};

/// A version's timestamp (microseconds since the Unix epoch, made strictly increasing).
pub type Timestamp = u64;

/// The callback of [`TemporalIndex::history`]: a version's timestamp and its value, `None` for
/// a tombstone; returns `ControlFlow::Break(())` to stop.
pub type HistoryVisitor<'a> = dyn FnMut(Timestamp, Option<&[u8]>) -> ControlFlow<()> + 'a;

/// An index that keeps every version of every key (see the module doc).
pub trait TemporalIndex: Index {
    /// A timestamp at or above every timestamp handed out so far and below every later one:
    /// reads as of it see every write that returned before the call.
    fn now(&self) -> Timestamp;

    /// The value of `key` as of time `t` into `out` (replacing its contents); false when the
    /// key had no live version then. Errors: `t` below the retention threshold.
    fn get_as_of(&self, key: &[u8], t: Timestamp, out: &mut Vec<u8>) -> Result<bool>;

    /// [`Index::scan`] as of time `t`. Errors: `t` below the retention threshold (also when
    /// the threshold passes `t` while the scan runs: records already handed out stand).
    fn scan_as_of(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        t: Timestamp,
        visit: &mut Visitor<'_>,
    ) -> Result<()>;

    /// Every version of `key` with a timestamp in `from..=to`, in `order` of timestamps.
    /// Errors: `from` below the retention threshold (a range that starts in discarded history
    /// is refused, not clipped: a clipped answer would look like a complete one).
    fn history(
        &self,
        key: &[u8],
        from: Timestamp,
        to: Timestamp,
        order: Order,
        visit: &mut HistoryVisitor<'_>,
    ) -> Result<()>;

    /// The retention threshold: history before it may be discarded (0: none is).
    fn retention(&self) -> Timestamp;

    /// Raises the retention threshold to `t` (a lower `t` changes nothing: the threshold
    /// only grows) and discards what only times below it need. A threshold above
    /// [`Self::now`] is taken (a store sets its persisted threshold before redo, and versions
    /// below it that come later are discarded in turn), so a caller serving users refuses
    /// future times itself. Errors: the engine cannot discard (none for `tsbtree` in memory).
    fn set_retention(&self, t: Timestamp) -> Result<()>;

    /// [`Index::upsert`], returning the new version's timestamp.
    fn upsert_stamped(&self, key: &[u8], value: &[u8]) -> Result<Timestamp>;

    /// [`Index::remove`], returning the tombstone's timestamp (`None`: the key was absent and
    /// no version was written).
    fn remove_stamped(&self, key: &[u8]) -> Option<Timestamp>;

    /// A new timestamp from the index's clock, above every timestamp handed out or inserted
    /// so far: a store takes it with the LSN and applies the write with
    /// [`Self::put_version`].
    fn tick(&self) -> Timestamp;

    /// Moves the clock up to `t` (never down), so later ticks exceed it: a store raises it to
    /// its retention threshold after redo, as the logged timestamps may all lie below it.
    fn advance_clock(&self, t: Timestamp);

    /// Creates the version `(key, ts)` with `value` (`None`: a tombstone), moving the clock
    /// up to `ts`. Returns false, changing nothing, when `key` already has a version at `ts`
    /// (so a redo of a logged write is a no-op). The caller applies versions of each page in
    /// timestamp order (a store: in LSN order, one writer at a time); a version older than a
    /// time split of its page is refused with [`crate::Error::InvalidUse`] (history is never
    /// updated, §IV-A2).
    fn put_version(&self, key: &[u8], ts: Timestamp, value: Option<&[u8]>) -> Result<bool>;

    /// The versions that reads at `from` or later need, among those with a timestamp up to
    /// `to` (a store's temporal checkpoint): each once, in no particular order (the caller
    /// sorts; an index holds a bounded part at a time, not a key's whole history). A version is handed out when its timestamp is at or after `from`, or
    /// when it holds a value and its key's next version (up to `to`) is at or after `from`,
    /// or there is none: the version current at `from` (a tombstone current at `from` is
    /// not: nothing older is handed out for it to end). Reads as of any time in `from..=to`
    /// and histories from `from` answer the same from these versions alone. Versions above
    /// `to` (writes going on) are skipped. Errors: `from` below the retention threshold.
    fn versions_from(
        &self,
        from: Timestamp,
        to: Timestamp,
        visit: &mut VersionVisitor<'_>,
    ) -> Result<()>;

    /// Hands the index its caller's timestamps in flight (§IV-B1's EOSL-TS): a store whose
    /// units take timestamps with [`Self::tick`] and apply them with [`Self::put_version`]
    /// later, several at once, says which are taken and not yet applied, and a data page's
    /// time split never splits above the oldest of them (its version would otherwise be older
    /// than its page's start, and history is never updated). Set once; later calls change
    /// nothing.
    fn set_in_flight(&self, source: std::sync::Arc<dyn InFlight>);
}

/// §IV-B1's end of stable log for timestamps (EOSL-TS): which timestamps a caller of
/// [`TemporalIndex::tick`] has taken but not yet applied.
pub trait InFlight: Send + Sync {
    /// The smallest timestamp taken and not yet applied (None: none is in flight). A
    /// timestamp being taken while this runs is waited for; one taken after it returns is
    /// above every timestamp the index's clock had handed out when it was called.
    fn oldest_unapplied(&self) -> Option<Timestamp>;
}

/// The callback of [`TemporalIndex::versions_from`]: a key, a version's timestamp and its
/// value (`None` for a tombstone); returns `ControlFlow::Break(())` to stop.
pub type VersionVisitor<'a> = dyn FnMut(&[u8], Timestamp, Option<&[u8]>) -> ControlFlow<()> + 'a;

/// The error for a read as of time `t` below the retention threshold `threshold`.
pub fn discarded(t: Timestamp, threshold: Timestamp) -> Error {
    Error::InvalidUse(format!(
        "history before {threshold} is discarded (retention threshold {threshold}): time {t} \
         cannot be read"
    ))
}
