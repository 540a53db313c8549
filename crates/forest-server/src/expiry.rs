//! Key expiry's state (issue 15 "Expiry"; docs/PROTOCOL.md "Expiry"): the deadlines of the
//! keys that have one, durable in the store, and the background task that deletes keys whose
//! deadline has passed. The commands are in [`crate::cmd`]'s `expire` module.
//!
//! Redis keeps a dictionary of deadlines beside its keyspace and finds due keys by random
//! sampling (redis `src/expire.c`, `activeExpireCycle`). An ordered store can do better: the
//! deadlines are also an index ordered by time, so the task reads exactly the keys that are
//! due, oldest first, a bounded number per tick.
//!
//! Layout (beside the collections', [`crate::collection`]):
//! - `FF 'E' <deadline: u64 BE, ms since the Unix epoch> <userkey>` -> empty: one entry per
//!   key with a deadline, string or collection. It is written in the same atomic store batch
//!   as the write it belongs to (SET EX's value, EXPIRE's change, DEL's removal), so a
//!   restart or a replay brings back exactly the deadlines the acknowledged writes set, and
//!   the absolute deadline (never a relative TTL) is what is logged.
//! - In memory, [`Expires`] maps each such key to its deadline (rebuilt from the index at
//!   start), so a read asks "is it due?" without a second store lookup, and a write knows
//!   which index entry to replace.
//!
//! Invariants:
//! - a key has at most one index entry, and has one exactly while the map holds its
//!   deadline; both change only under the key's stripe lock ([`crate::collection::Collections::lock`]);
//! - an index entry's key exists (a deadline in the past deletes the key instead of being
//!   stored, and every deletion of a key removes its entry in the same batch);
//! - a key whose deadline is at or before now is never visible: reads check the map (after
//!   reading the value), scans filter, DBSIZE subtracts the due index entries;
//! - every deletion of an expired key (by a write that finds it due, by the active task, or
//!   by a command setting a deadline in the past) goes through one function,
//!   `cmd::expire::delete_expired`, which writes the store first and clears the map after;
//! - a point read checks the deadline before it reads the value (so a deletion, store first,
//!   map second, is never seen as a value without a deadline); a scan, which reads rows
//!   before it can check their deadlines, checks [`Expires::generation`] and re-reads its rows
//!   as point reads if a deletion may have slipped in between.
//!
//! Choices: a write that sets or clears a deadline of a live key updates the map when it is
//! decided, just before its batch is written (under the stripe lock); a reader that slips
//! between the two sees a deadline still in the future either way. The map costs memory per
//! key with a deadline (its bytes plus about 50), as Redis's `expires` dictionary does.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use forest_core::Order;
use forest_store::Store;
use parking_lot::Mutex;

use crate::collection::RESERVED_BYTE;
use crate::server::Shared;

/// Tag of the deadline index entries, after [`RESERVED_BYTE`].
pub const EXPIRE_TAG: u8 = b'E';
/// Shards of the deadline map: enough that connections rarely meet on one, few enough to
/// cost little when empty.
const MAP_SHARD_COUNT: usize = 256;
/// Keys the active task deletes at most per tick: each deletion is one store batch under
/// one stripe lock, so a tick holds no client up for long.
pub const ACTIVE_EXPIRE_KEYS_PER_TICK: usize = 256;
/// Pause between ticks while keys keep coming due (a full tick ran).
const ACTIVE_EXPIRE_BUSY_PAUSE: Duration = Duration::from_millis(1);
/// Pause between ticks otherwise: the most a due key stays in memory past its deadline when
/// no write touches it (reads never see it meanwhile).
const ACTIVE_EXPIRE_IDLE_PAUSE: Duration = Duration::from_millis(20);

/// `FF 'E' <deadline BE> <user>`.
pub fn index_key(deadline_ms: u64, user: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(user.len() + 10);
    key.extend_from_slice(&[RESERVED_BYTE, EXPIRE_TAG]);
    key.extend_from_slice(&deadline_ms.to_be_bytes());
    key.extend_from_slice(user);
    key
}

/// An index entry's deadline and user key; None if `key` is not one.
pub fn split_index_key(key: &[u8]) -> Option<(u64, &[u8])> {
    let rest = key.strip_prefix(&[RESERVED_BYTE, EXPIRE_TAG][..])?;
    let deadline: [u8; 8] = rest.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(deadline), &rest[8..]))
}

/// The index entries of deadlines up to and including `now_ms`: (lower, upper exclusive).
pub fn due_bounds(now_ms: u64) -> (Vec<u8>, Vec<u8>) {
    let lower = vec![RESERVED_BYTE, EXPIRE_TAG];
    let upper = match now_ms.checked_add(1) {
        Some(next) => index_key(next, b""),
        None => vec![RESERVED_BYTE, EXPIRE_TAG + 1],
    };
    (lower, upper)
}

/// The whole index: (lower, upper exclusive).
pub fn index_bounds() -> ([u8; 2], [u8; 2]) {
    ([RESERVED_BYTE, EXPIRE_TAG], [RESERVED_BYTE, EXPIRE_TAG + 1])
}

/// Milliseconds since the Unix epoch by the system clock.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One shard of the deadline map: user key -> deadline (ms since the Unix epoch).
type MapShard = Mutex<HashMap<Box<[u8]>, u64>>;

/// The deadlines of the keys that have one (see the module doc), and expiry's counters.
#[derive(Debug)]
pub struct Expires {
    shards: Box<[MapShard]>,
    hasher: std::collections::hash_map::RandomState,
    /// Keys with a deadline (entries of the map).
    count: AtomicI64,
    /// The sum of their deadlines, wrapping (INFO's avg_ttl: the true sum of the TTLs is
    /// small, so wrapping arithmetic gives it exactly).
    deadline_sum: AtomicU64,
    /// Keys deleted because their deadline passed (INFO's `expired_keys`).
    expired: AtomicU64,
    /// Whether the active task runs (DEBUG SET-ACTIVE-EXPIRE).
    active: AtomicBool,
    /// Added to the clock: tests move time forward without sleeping.
    clock_offset_ms: AtomicI64,
    /// When not 0, the clock stands at this time (tests: no real time passes).
    clock_frozen_ms: AtomicU64,
    /// Deletions of expired keys so far, counted after the store write and before the map
    /// forgets the deadline: a scan that read a row, then found no deadline for it, checks
    /// this to know whether the row may be a key deleted meanwhile ([`Expires::generation`]).
    generation: AtomicU64,
}

impl Expires {
    /// Reads the deadline index (one scan of it at start: proportional to the keys with a
    /// deadline). Keys whose deadline passed while the server was down stay invisible and
    /// the active task deletes them first.
    pub fn load(store: &Store) -> Self {
        let expires = Self::empty();
        let (lower, upper) = index_bounds();
        store.scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |key, _| {
                if let Some((deadline, user)) = split_index_key(key) {
                    // Should a key have two entries (no forest writes that), the later
                    // deadline wins here; `repair` removes the other.
                    expires.insert(user, deadline);
                }
                ControlFlow::Continue(())
            },
        );
        expires
    }

    fn empty() -> Self {
        Self {
            shards: (0..MAP_SHARD_COUNT)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            count: AtomicI64::new(0),
            deadline_sum: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            active: AtomicBool::new(true),
            clock_offset_ms: AtomicI64::new(0),
            clock_frozen_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    fn shard(&self, user: &[u8]) -> &MapShard {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(user);
        &self.shards[(hasher.finish() % MAP_SHARD_COUNT as u64) as usize]
    }

    /// Now, in milliseconds since the Unix epoch (the clock deadlines are compared with).
    pub fn now_ms(&self) -> u64 {
        let frozen = self.clock_frozen_ms.load(Ordering::Relaxed);
        let base = if frozen != 0 { frozen } else { unix_ms() };
        base.saturating_add_signed(self.clock_offset_ms.load(Ordering::Relaxed))
    }

    /// Stops the clock at now (tests: replies that depend on the time left, such as TTL's
    /// rounding, do not depend on how fast the machine runs). [`Self::advance_clock_ms`]
    /// still moves it.
    pub fn freeze_clock(&self) {
        self.clock_frozen_ms
            .store(unix_ms().max(1), Ordering::Relaxed);
    }

    /// Moves the clock forward (tests).
    pub fn advance_clock_ms(&self, ms: i64) {
        self.clock_offset_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// Whether any key may have a deadline: reads check deadlines only then.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Keys with a deadline (due ones included until they are deleted).
    pub fn count(&self) -> i64 {
        self.count.load(Ordering::SeqCst).max(0)
    }

    /// The deadline of `user`, if it has one.
    pub fn deadline(&self, user: &[u8]) -> Option<u64> {
        if !self.any() {
            return None;
        }
        self.shard(user).lock().get(user).copied()
    }

    /// Whether `user` has a deadline at or before now: such a key is never visible.
    pub fn is_due(&self, user: &[u8]) -> bool {
        self.deadline(user).is_some_and(|d| d <= self.now_ms())
    }

    /// Whether the store key `key` belongs to a user key that is due: a string key, or a
    /// collection's type entry (`FF 't' <user>`).
    pub fn hides(&self, key: &[u8]) -> bool {
        if !self.any() {
            return false;
        }
        match key {
            [RESERVED_BYTE, crate::collection::TYPE_TAG, user @ ..] => self.is_due(user),
            [RESERVED_BYTE, ..] => false,
            user => self.is_due(user),
        }
    }

    /// The count of deletions of expired keys. A scan reads it before its first row and after
    /// its last check of a deadline: unchanged, no row it showed can be a key deleted (and its
    /// deadline forgotten) after the row was read; changed, it checks the rows again with
    /// point reads, which look at the deadline first ([`Expires::is_due`], then the value).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counts a deletion of an expired key: after its store write, before the map forgets
    /// its deadline.
    pub(crate) fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Records `user`'s deadline (replacing any). Precondition: its stripe lock is held.
    pub(crate) fn insert(&self, user: &[u8], deadline: u64) {
        let old = self.shard(user).lock().insert(user.into(), deadline);
        self.account(old, Some(deadline));
    }

    /// Forgets `user`'s deadline; returns it. Precondition: its stripe lock is held.
    pub(crate) fn remove(&self, user: &[u8]) -> Option<u64> {
        if !self.any() {
            return None;
        }
        let old = self.shard(user).lock().remove(user);
        self.account(old, None);
        old
    }

    fn account(&self, old: Option<u64>, new: Option<u64>) {
        match (old, new) {
            (None, Some(_)) => {
                self.count.fetch_add(1, Ordering::SeqCst);
            }
            (Some(_), None) => {
                self.count.fetch_sub(1, Ordering::SeqCst);
            }
            _ => {}
        }
        if let Some(old) = old {
            self.deadline_sum.fetch_sub(old, Ordering::Relaxed);
        }
        if let Some(new) = new {
            self.deadline_sum.fetch_add(new, Ordering::Relaxed);
        }
    }

    /// Forgets every deadline (FLUSHDB, once the index is removed from the store).
    pub(crate) fn clear(&self) {
        self.bump_generation();
        for shard in self.shards.iter() {
            let mut map = shard.lock();
            for (_, deadline) in map.drain() {
                self.account(Some(deadline), None);
            }
        }
    }

    /// Counts a key deleted because its deadline passed.
    pub(crate) fn note_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts `expired_keys` from 0 (CONFIG RESETSTAT).
    pub fn reset_expired_count(&self) {
        self.expired.store(0, Ordering::Relaxed);
    }

    /// Keys deleted because their deadline passed, since start (or CONFIG RESETSTAT).
    pub fn expired_count(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// The mean time to live of the keys with a deadline, in ms (0 if none).
    pub fn avg_ttl_ms(&self) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let now = self.now_ms();
        let sum = self.deadline_sum.load(Ordering::Relaxed);
        let total = sum.wrapping_sub(now.wrapping_mul(count as u64)) as i64;
        (total / count).max(0) as u64
    }

    /// Turns the active task on or off (DEBUG SET-ACTIVE-EXPIRE).
    pub fn set_active(&self, on: bool) {
        self.active.store(on, Ordering::Relaxed);
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Keys whose deadline has passed but that are not deleted yet (one scan of the due
    /// part of the index, which the active task keeps short).
    pub fn due_count(&self, store: &Store) -> i64 {
        if !self.any() {
            return 0;
        }
        let (lower, upper) = due_bounds(self.now_ms());
        let mut due = 0i64;
        store.scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |_, _| {
                due += 1;
                ControlFlow::Continue(())
            },
        );
        due
    }
}

/// Removes what no forest write leaves but a hand-edited or damaged store might hold: index
/// entries whose key does not exist, and all but the latest entry of a key with several.
/// Run at start, before serving; returns how many entries it removed.
pub fn repair(store: &Store) -> forest_core::Result<u64> {
    let (lower, upper) = index_bounds();
    let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    store.scan(
        Bound::Included(&lower[..]),
        Bound::Excluded(&upper[..]),
        Order::Ascending,
        &mut |key, _| {
            if let Some((deadline, user)) = split_index_key(key) {
                let best = latest.entry(user.to_vec()).or_insert(deadline);
                *best = (*best).max(deadline);
                entries.push((deadline, user.to_vec()));
            }
            ControlFlow::Continue(())
        },
    );
    let mut removed = 0;
    let mut scratch = Vec::new();
    for (deadline, user) in entries {
        let exists = store.get(&user, &mut scratch)
            || store.get(&crate::collection::type_key(&user), &mut scratch);
        if !exists || latest.get(&user) != Some(&deadline) {
            store.remove(&index_key(deadline, &user))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Starts the active expiry task; it ends when the server stops.
pub fn spawn_active(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("forest-expire".into())
        .spawn(move || {
            while !shared.shutdown.is_requested() {
                let deleted = if shared.expires.is_active() {
                    crate::cmd::expire_cycle(&shared, ACTIVE_EXPIRE_KEYS_PER_TICK)
                } else {
                    0
                };
                std::thread::sleep(if deleted >= ACTIVE_EXPIRE_KEYS_PER_TICK {
                    ACTIVE_EXPIRE_BUSY_PAUSE
                } else {
                    ACTIVE_EXPIRE_IDLE_PAUSE
                });
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: index keys sort by deadline, then key, and round-trip.
    // Method: encode a few and compare; split them back; the due bounds cover deadlines up
    // to now only.
    #[test]
    fn index_keys_sort_by_deadline() {
        let a = index_key(5, b"zz");
        let b = index_key(6, b"aa");
        let c = index_key(6, b"ab");
        assert!(a < b && b < c);
        assert_eq!(split_index_key(&b), Some((6, &b"aa"[..])));
        assert_eq!(split_index_key(b"\xffE\x00"), None);
        let (lower, upper) = due_bounds(5);
        assert!(lower.as_slice() <= a.as_slice() && a < upper);
        assert!(b >= upper);
        let (_, top) = due_bounds(u64::MAX);
        assert_eq!(top, vec![RESERVED_BYTE, EXPIRE_TAG + 1]);
    }

    // Goal: the counters follow the map: count, avg_ttl, clear.
    // Method: insert, replace, remove, clear.
    #[test]
    fn map_counts() {
        let e = Expires::empty();
        assert!(!e.any());
        let now = e.now_ms();
        e.insert(b"a", now + 10_000);
        e.insert(b"b", now + 20_000);
        e.insert(b"a", now + 30_000);
        assert_eq!(e.count(), 2);
        let avg = e.avg_ttl_ms();
        assert!((24_000..=25_000).contains(&avg), "{avg}");
        assert_eq!(e.remove(b"b"), Some(now + 20_000));
        assert_eq!(e.count(), 1);
        assert!(!e.is_due(b"a"));
        e.advance_clock_ms(30_001);
        assert!(e.is_due(b"a"));
        assert!(e.hides(b"a"));
        assert!(e.hides(&crate::collection::type_key(b"a")));
        assert!(!e.hides(b"\xffma"));
        e.clear();
        assert_eq!(e.count(), 0);
        assert_eq!(e.avg_ttl_ms(), 0);
    }
}
