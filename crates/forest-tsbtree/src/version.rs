//! Versions and timestamps (TSBw-tree §III-A1, §III-B).
//!
//! A record is `(key, timestamp, value)`, or a tombstone `(key, timestamp, None)`: the paper
//! never deletes, so a delete ends a key's lifetime with a tombstone version. An update inserts
//! a version; nothing is overwritten. A version is alive from its timestamp until the next
//! version of its key.
//!
//! Without a store the tree keeps its own [`Clock`]: strictly increasing `u64`s, wall-clock
//! microseconds when the clock allows (`max(now, last + 1)`). A writer reads the page state,
//! then takes its timestamp, then CASes its delta onto the state it read; a failed CAS takes a
//! new timestamp. So on every page the versions' timestamps increase in installation order,
//! and a split that takes its split time after reading the page (below) can never miss a
//! version with an earlier timestamp (in memory this plays the role of §IV-B1's EOSL-TS).

use forest_core::sync::atomic::{AtomicU64, Ordering};

/// One version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub key: Box<[u8]>,
    pub ts: u64,
    /// None: a tombstone.
    pub value: Option<Box<[u8]>>,
}

impl Record {
    pub fn new(key: &[u8], ts: u64, value: Option<&[u8]>) -> Self {
        Self {
            key: key.into(),
            ts,
            value: value.map(Into::into),
        }
    }
}

/// Keys of sorted `records` whose newest version is not a tombstone.
pub(crate) fn live_count(records: &[Record]) -> usize {
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| r.value.is_some() && records.get(i + 1).is_none_or(|n| n.key != r.key))
        .count()
}

/// The engine's clock (see the module doc).
pub(crate) struct Clock {
    last: AtomicU64,
}

impl Clock {
    pub fn new() -> Self {
        Self {
            last: AtomicU64::new(0),
        }
    }

    /// A new timestamp, above every earlier one.
    pub fn tick(&self) -> u64 {
        let wall = wall_micros();
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let ts = wall.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, ts, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return ts,
                Err(found) => last = found,
            }
        }
    }

    /// The newest timestamp handed out or put so far (the clock does not move).
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Moves the clock up to `ts` (a version put at its own timestamp, `stamped.rs`), so
    /// later ticks exceed it.
    pub fn advance_to(&self, ts: u64) {
        self.last.fetch_max(ts, Ordering::AcqRel);
    }

    /// A time at or above every timestamp handed out, below every later one: the clock is
    /// moved up to it, so later ticks exceed it.
    pub fn now(&self) -> u64 {
        let wall = wall_micros();
        let previous = self.last.fetch_max(wall, Ordering::AcqRel);
        previous.max(wall)
    }
}

/// Microseconds since the Unix epoch (0 if the system clock is before it).
fn wall_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1))
}

/// Sorts versions by (key, timestamp).
pub(crate) fn sort(records: &mut [Record]) {
    records.sort_unstable_by(|a, b| (&a.key, a.ts).cmp(&(&b.key, b.ts)));
}

/// The versions of sorted `records` alive at time `t` or later: per key, the latest version
/// before `t` unless it is a tombstone, and every version from `t` on (the current page of a
/// time split at `t`, Fig. 3).
pub(crate) fn alive_from(records: &[Record], t: u64) -> Vec<Record> {
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let superseded_before_t = records
            .get(i + 1)
            .is_some_and(|n| n.key == r.key && n.ts < t);
        let dead_tombstone = r.value.is_none() && r.ts < t;
        if r.ts >= t || (!superseded_before_t && !dead_tombstone) {
            out.push(r.clone());
        }
    }
    out
}

/// Versions that are not alive now: superseded ones and tombstones (what a time split at the
/// current time moves out, §VI-A's "historical records").
pub(crate) fn historical_count(records: &[Record]) -> usize {
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| r.value.is_none() || records.get(i + 1).is_some_and(|n| n.key == r.key))
        .count()
}

/// Distinct keys of sorted `records`.
pub(crate) fn distinct_keys(records: &[Record]) -> usize {
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| *i == 0 || records[i - 1].key != r.key)
        .count()
}
