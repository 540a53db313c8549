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
//! - a string with a deadline is one entry, `FF 'x' 00×6 <userkey>` ([`STRING_PREFIX`]) ->
//!   `<deadline: u64 BE, ms since the Unix epoch> <value>`, and its raw key is absent; a string without one stays
//!   at its raw key. So SET EX writes one entry, and the deadline is written with the value
//!   in every write: a restart or a replay brings back exactly the deadlines the
//!   acknowledged writes set, and the absolute deadline (never a relative TTL) is logged.
//!   A write that sets or clears a deadline moves the string between the two places in one
//!   atomic batch ([`Expires::begin_move`]).
//! - a collection with a deadline has the entry `FF 'E' <deadline BE> <userkey>` -> empty,
//!   written in the same atomic batch as the change it belongs to.
//! - In memory, [`Expires`] maps each key with a deadline to it (rebuilt from both ranges at
//!   start), so a read knows where a string lives and whether it is due without a second
//!   store lookup, and keeps the deadlines in time order per shard, which the active task
//!   walks (the `FF 'x'` range is in key order, not time order).
//! - A store written before (strings' deadlines as `FF 'E'` entries beside the raw key) is
//!   moved over at open ([`migrate`]), a bounded batch at a time, each atomic.
//!
//! Invariants:
//! - a string is in one place: its raw key or `FF 'x'`, never both (every move is one
//!   atomic batch); it is at `FF 'x'` exactly while the map holds its deadline, except
//!   between a move's batch and the map's update, both under the key's stripe lock
//!   ([`crate::collection::Collections::lock`]): a reader that misses the key meanwhile
//!   reads again ([`Expires::read_string`]); and except between a new key's deadline in
//!   the map and its first write (SET EX of an absent key), where the key is absent;
//! - a collection has at most one `FF 'E'` entry, and has one exactly while the map holds
//!   its deadline; an entry's collection exists;
//! - a key whose deadline is at or before now is never visible: reads check the deadline
//!   (a string's is in its value), scans filter, DBSIZE subtracts the due keys;
//! - every deletion of an expired key (by a write that finds it due, by the active task, or
//!   by a command setting a deadline in the past) goes through one function,
//!   `cmd::expire::delete_expired`, which writes the store first and clears the map after;
//! - a scan, which reads rows before it can check their deadlines, checks
//!   [`Expires::generation`] and re-reads its rows as point reads if a deletion may have
//!   slipped in between.
//!
//! Choices: a write that sets or clears a deadline updates the map after its batch is
//! visible, under the stripe lock, the two bracketed by [`Expires::begin_move`] /
//! [`Expires::end_move`]: a reader that misses the string between them reads again, and one
//! that finds it sees its deadline in its value. A new key's SET EX (no deadline, no entry
//! before) is the exception: the map learns the deadline first, then the entry is written,
//! so a reader in between looks at `FF 'x'` and misses a key that is not set yet, without
//! the two shared counters of a move. The map costs memory per key with a deadline (its
//! bytes plus about 90: the map, its entry in the time order, and stale entries of changed
//! deadlines up to as many again plus a few per shard), as Redis's `expires` dictionary does.

pub mod layout;
mod time_order;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use hashbrown::HashTable;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use forest_core::Order;
use forest_store::Store;
use parking_lot::Mutex;

use crate::collection::RESERVED_BYTE;
use crate::server::Shared;
use time_order::{Entry, TimeOrder};

/// Tag of the collections' deadline entries, after [`RESERVED_BYTE`] (and of the strings'
/// in stores written before [`STRING_TAG`]).
pub const EXPIRE_TAG: u8 = b'E';
/// Tag of the strings with a deadline, after [`RESERVED_BYTE`]: `FF 'x' <user>` ->
/// `<deadline BE> <value>`. The store lets these entries hold the deadline beyond the value
/// limit (forest-core's stamped keys), so a value at the limit takes a deadline too.
pub const STRING_TAG: u8 = forest_core::STAMPED_KEY_PREFIX[1];
/// Bytes of the deadline before a string's value at `FF 'x'`.
pub const DEADLINE_BYTES: usize = forest_core::STAMP_BYTES;
const _: () = assert!(RESERVED_BYTE == forest_core::STAMPED_KEY_PREFIX[0]);
/// Strings moved per atomic batch when an older store is migrated at open.
const MIGRATE_BATCH_KEYS: usize = 256;
/// Reads that miss a string while a move is under way try again this many times, then
/// look in both places.
const READ_RETRIES: usize = 64;
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

/// Where a string with a deadline lives: `FF 'x'` and six zero bytes, then the user key.
/// Eight bytes, so that the user key's bytes fall on the 8-byte slices masstree compares
/// (a 2-byte prefix cost plain SET ~13 % server CPU, an 8-byte one about nothing: docs/
/// BENCHMARKS.md, session 11). Stores of layout 1 held `FF 'x' <user>` (`layout::relayout`).
pub const STRING_PREFIX: [u8; 8] = [RESERVED_BYTE, STRING_TAG, 0, 0, 0, 0, 0, 0];
/// The first key past the `FF 'x'` range.
const STRING_PREFIX_END: [u8; 8] = [RESERVED_BYTE, STRING_TAG, 0, 0, 0, 0, 0, 1];
/// The server's key layout, recorded in the store's entry [`layout::LAYOUT_KEY`] and its
/// `META` (`Store::set_layout`): 2 = strings with a deadline at [`STRING_PREFIX`]; 1 (or 0,
/// none recorded) = at `FF 'x' <user>`, moved over at open ([`layout::relayout`]).
pub const KEY_LAYOUT: u32 = 2;

/// `FF 'x' 00×6 <user>`: where a string with a deadline lives.
pub fn string_key(user: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(user.len() + STRING_PREFIX.len());
    key.extend_from_slice(&STRING_PREFIX);
    key.extend_from_slice(user);
    key
}

/// The user key of an `FF 'x'` entry; None if `key` is not one.
pub fn split_string_key(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&STRING_PREFIX[..])
}

/// The whole `FF 'x'` range: (lower, upper exclusive).
pub fn string_bounds() -> ([u8; 8], [u8; 8]) {
    (STRING_PREFIX, STRING_PREFIX_END)
}

/// `<deadline BE> <value>`: what `FF 'x' <user>` holds.
pub fn encode_string(deadline_ms: u64, value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(DEADLINE_BYTES + value.len());
    stored.extend_from_slice(&deadline_ms.to_be_bytes());
    stored.extend_from_slice(value);
    stored
}

/// The deadline and value of what `FF 'x' <user>` holds; None if it is too short.
pub fn decode_string(stored: &[u8]) -> Option<(u64, &[u8])> {
    let deadline: [u8; DEADLINE_BYTES] = stored.get(..DEADLINE_BYTES)?.try_into().ok()?;
    Some((u64::from_be_bytes(deadline), &stored[DEADLINE_BYTES..]))
}

/// Strips the deadline from a value read from `FF 'x'` in place; returns it (None, and
/// `out` cleared, if the value is too short to hold one).
pub fn strip_deadline(out: &mut Vec<u8>) -> Option<u64> {
    match decode_string(out) {
        Some((deadline, _)) => {
            out.drain(..DEADLINE_BYTES);
            Some(deadline)
        }
        None => {
            out.clear();
            None
        }
    }
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

/// Stale entries a shard's time order may hold beyond its live ones before it is rebuilt.
const ORDER_SLACK: usize = 64;

/// One shard of the deadline map: user key -> deadline (ms since the Unix epoch), and the
/// same pairs in time order (the active task's walk, [`TimeOrder`]), where a key's entry is
/// the one with its stamp; the others are stale. The key's bytes are shared. The map is a
/// table keyed by the key's hash, computed once per call ([`Expires::hash`]; it also picks
/// the shard) and kept in the items, so a probe compares hashes before it reads a key's
/// bytes and a resize hashes nothing.
#[derive(Debug, Default)]
struct Shard {
    map: HashTable<Item>,
    order: TimeOrder,
    next_stamp: u64,
    /// The sum of the map's deadlines, wrapping (INFO's avg_ttl: the true sum of the TTLs
    /// is small, so wrapping arithmetic gives it exactly).
    deadline_sum: u64,
}

/// A key with a deadline, and the stamp of its entry in the time order.
#[derive(Debug)]
struct Item {
    hash: u64,
    key: Box<[u8]>,
    deadline: u64,
    stamp: u64,
}

impl Shard {
    fn get(&self, hash: u64, user: &[u8]) -> Option<&Item> {
        self.map.find(hash, |i| i.hash == hash && *i.key == *user)
    }

    /// Sets `user`'s deadline; returns the one it replaces.
    fn set(&mut self, hash: u64, user: &[u8], deadline: u64) -> Option<u64> {
        let stamp = self.next_stamp;
        let old = match self
            .map
            .find_mut(hash, |i| i.hash == hash && *i.key == *user)
        {
            Some(item) if item.deadline == deadline => return Some(deadline),
            Some(item) => {
                let old = item.deadline;
                item.deadline = deadline;
                item.stamp = stamp;
                Some(old)
            }
            None => {
                let item = Item {
                    hash,
                    key: Box::from(user),
                    deadline,
                    stamp,
                };
                self.map.insert_unique(hash, item, |i| i.hash);
                None
            }
        };
        self.next_stamp += 1;
        self.deadline_sum = self
            .deadline_sum
            .wrapping_sub(old.unwrap_or(0))
            .wrapping_add(deadline);
        self.order.push(Entry {
            deadline,
            stamp,
            hash,
        });
        if self.order.len() > 2 * self.map.len() + ORDER_SLACK {
            self.order.rebuild(self.map.iter().map(|i| Entry {
                deadline: i.deadline,
                stamp: i.stamp,
                hash: i.hash,
            }));
        }
        old
    }

    /// Forgets `user`'s deadline (its entry in the order goes stale); returns it.
    fn unset(&mut self, hash: u64, user: &[u8]) -> Option<u64> {
        let old = match self
            .map
            .find_entry(hash, |i| i.hash == hash && *i.key == *user)
        {
            Ok(entry) => Some(entry.remove().0.deadline),
            Err(_) => None,
        };
        self.deadline_sum = self.deadline_sum.wrapping_sub(old.unwrap_or(0));
        if self.map.is_empty() {
            self.order.clear();
        }
        old
    }

    /// The key of an entry of the order while it is live: while the map holds its stamp
    /// (stamps are never reused in a shard).
    fn item_of<'m>(map: &'m HashTable<Item>, e: &Entry) -> Option<&'m Item> {
        map.find(e.hash, |i| i.stamp == e.stamp)
    }

    /// The order with its stale entries due at `now` dropped from the top, and the test of
    /// liveness.
    fn pruned(&mut self, now: u64) -> (&TimeOrder, impl Fn(&Entry) -> bool + '_) {
        let Shard { map, order, .. } = self;
        let map = &*map;
        let live = move |e: &Entry| Self::item_of(map, e).is_some();
        order.prune_top(now, live);
        (&*order, live)
    }

    /// Up to `max` live keys due at `now`, earliest first.
    fn due(&mut self, now: u64, max: usize) -> Vec<(u64, Vec<u8>)> {
        let (order, live) = self.pruned(now);
        let entries = order.earliest(now, max, live);
        entries
            .iter()
            .filter_map(|e| Self::item_of(&self.map, e))
            .map(|i| (i.deadline, i.key.to_vec()))
            .collect()
    }
}

type MapShard = Mutex<Shard>;

/// A key's hash in the deadline map, from [`Expires::probe`] (only this map's hasher makes
/// one, so it is always the key's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHash(u64);

/// The deadlines of the keys that have one (see the module doc), and expiry's counters.
#[derive(Debug)]
pub struct Expires {
    shards: Box<[MapShard]>,
    hasher: std::collections::hash_map::RandomState,
    /// Shards whose map is not empty: changes only when a shard empties or fills, so the
    /// check every command makes ([`Self::any`]) reads a line that writes rarely touch
    /// (the count of keys and the sum of deadlines are per shard, under its lock).
    nonempty: AtomicI64,
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
    /// Moves of strings between their raw key and `FF 'x'` begun and ended
    /// ([`Self::begin_move`]): a read that missed a string while the two differed may have
    /// looked in the place it just left.
    moves_begun: AtomicU64,
    moves_ended: AtomicU64,
    /// Whether a string may ever have moved to `FF 'x'` since start: until then a scan of
    /// strings reads the raw range alone ([`Self::scan_untimed`]).
    timed: AtomicBool,
    /// Scans of the raw range alone under way ([`Self::scan_untimed`]).
    untimed_scans: AtomicU64,
}

impl Expires {
    /// Reads the strings' deadlines (the `FF 'x'` range) and the collections' (`FF 'E'`):
    /// one scan of each at start, proportional to the keys with a deadline. Keys whose
    /// deadline passed while the server was down stay invisible and the active task
    /// deletes them first. Run [`migrate`] before on a store written by an older forest.
    pub fn load(store: &Store) -> Self {
        let expires = Self::empty();
        let (lower, upper) = string_bounds();
        store.scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |key, value| {
                if let (Some(user), Some((deadline, _))) =
                    (split_string_key(key), decode_string(value))
                {
                    expires.insert(user, deadline);
                    expires.timed.store(true, Ordering::SeqCst);
                }
                ControlFlow::Continue(())
            },
        );
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
                .map(|_| Mutex::new(Shard::default()))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            nonempty: AtomicI64::new(0),
            expired: AtomicU64::new(0),
            active: AtomicBool::new(true),
            clock_offset_ms: AtomicI64::new(0),
            clock_frozen_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            moves_begun: AtomicU64::new(0),
            moves_ended: AtomicU64::new(0),
            timed: AtomicBool::new(false),
            untimed_scans: AtomicU64::new(0),
        }
    }

    /// `user`'s hash: picks its shard (bits 48..56, which the table's probe does not use
    /// alone) and keys it in the shard's table.
    fn hash(&self, user: &[u8]) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(user);
        hasher.finish()
    }

    fn shard(&self, hash: u64) -> &MapShard {
        &self.shards[(hash >> 48) as usize % MAP_SHARD_COUNT]
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
        self.nonempty.load(Ordering::SeqCst) > 0
    }

    /// Keys with a deadline (due ones included until they are deleted): a pass over the
    /// shards (INFO).
    pub fn count(&self) -> i64 {
        self.totals().0
    }

    /// Keys with a deadline and the wrapping sum of their deadlines, over all shards.
    fn totals(&self) -> (i64, u64) {
        if !self.any() {
            return (0, 0);
        }
        self.shards.iter().fold((0, 0u64), |(count, sum), shard| {
            let shard = shard.lock();
            (
                count + shard.map.len() as i64,
                sum.wrapping_add(shard.deadline_sum),
            )
        })
    }

    /// The deadline of `user`, if it has one.
    pub fn deadline(&self, user: &[u8]) -> Option<u64> {
        if !self.any() {
            return None;
        }
        let hash = self.hash(user);
        self.shard(hash).lock().get(hash, user).map(|i| i.deadline)
    }

    /// [`Self::deadline`], and the key's hash for [`Self::insert_hashed`]: a write that
    /// reads a deadline and then sets one hashes the key once.
    pub(crate) fn probe(&self, user: &[u8]) -> (KeyHash, Option<u64>) {
        let hash = self.hash(user);
        if !self.any() {
            return (KeyHash(hash), None);
        }
        let deadline = self.shard(hash).lock().get(hash, user).map(|i| i.deadline);
        (KeyHash(hash), deadline)
    }

    /// Marks the start of a move of a string between its raw key and `FF 'x'` (a write
    /// that sets or clears its deadline): before its batch. [`Self::end_move`] follows once
    /// the map holds the new deadline.
    pub(crate) fn begin_move(&self) {
        self.moves_begun.fetch_add(1, Ordering::SeqCst);
        self.mark_timed();
    }

    /// Before a string is first written at `FF 'x'` (by a move or by a new key's SET EX):
    /// from then on scans merge both places.
    pub(crate) fn mark_timed(&self) {
        if !self.timed.load(Ordering::SeqCst) {
            // The first move: from now on scans merge both places; one that read the raw
            // range alone ends first, so that none can miss the string moving.
            self.timed.store(true, Ordering::SeqCst);
            while self.untimed_scans.load(Ordering::SeqCst) > 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Runs `scan` (of the raw string range alone) if no string can be at `FF 'x'`: no
    /// deadline in the map and no string moved there since start; false (and `scan` not
    /// run) otherwise. A move waits for such scans to end ([`Self::begin_move`]).
    pub fn scan_untimed(&self, scan: impl FnOnce()) -> bool {
        self.untimed_scans.fetch_add(1, Ordering::SeqCst);
        let untimed = !self.timed.load(Ordering::SeqCst) && !self.any();
        if untimed {
            scan();
        }
        self.untimed_scans.fetch_sub(1, Ordering::SeqCst);
        untimed
    }

    /// The end of a move ([`Self::begin_move`]).
    pub(crate) fn end_move(&self) {
        self.moves_ended.fetch_add(1, Ordering::SeqCst);
    }

    /// Reads string `user` from where the map says it lives: its value (without the
    /// deadline) into `out` and its deadline (None: it has none); None if absent. Due or
    /// not: the caller compares the deadline. A hit is right as it is (a string is in one
    /// place, and at `FF 'x'` its deadline is in its value); a miss is right unless a move
    /// was under way between the map's answer and the store's, and then it reads again.
    pub fn read_string(
        &self,
        store: &Store,
        user: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Option<u64>> {
        let mut attempt = 0;
        loop {
            let ended = self.moves_ended.load(Ordering::SeqCst);
            let found = match self.deadline(user) {
                None => read_raw_place(store, user, out),
                Some(_) => read_deadline_place(store, user, out),
            };
            if found.is_some() {
                return found;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.moves_begun.load(Ordering::SeqCst) == ended {
                return None;
            }
            attempt += 1;
            if attempt >= READ_RETRIES {
                // Moves keep coming: look in both places.
                return read_raw_place(store, user, out)
                    .or_else(|| read_deadline_place(store, user, out));
            }
            std::thread::yield_now();
        }
    }

    /// Whether a read that began when [`Self::moves_ended`] was `ended` may have missed a
    /// string that a move put elsewhere meanwhile.
    pub fn moved_since(&self, ended: u64) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.moves_begun.load(Ordering::SeqCst) != ended
    }

    /// Moves ended so far (see [`Self::moved_since`]).
    pub fn moves_ended(&self) -> u64 {
        self.moves_ended.load(Ordering::SeqCst)
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
        self.insert_hashed(KeyHash(self.hash(user)), user, deadline);
    }

    /// [`Self::insert`] with the hash [`Self::probe`] gave for `user`.
    pub(crate) fn insert_hashed(&self, hash: KeyHash, user: &[u8], deadline: u64) {
        let hash = hash.0;
        let mut shard = self.shard(hash).lock();
        let fills = shard.map.is_empty();
        shard.set(hash, user, deadline);
        if fills {
            self.nonempty.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Forgets `user`'s deadline; returns it. Precondition: its stripe lock is held.
    pub(crate) fn remove(&self, user: &[u8]) -> Option<u64> {
        if !self.any() {
            return None;
        }
        let hash = self.hash(user);
        let mut shard = self.shard(hash).lock();
        let old = shard.unset(hash, user);
        if old.is_some() && shard.map.is_empty() {
            self.nonempty.fetch_sub(1, Ordering::SeqCst);
        }
        old
    }

    /// Up to `max` keys whose deadline is at or before `now_ms`, earliest first.
    pub fn due(&self, now_ms: u64, max: usize) -> Vec<(u64, Vec<u8>)> {
        if !self.any() || max == 0 {
            return Vec::new();
        }
        let mut due = Vec::new();
        for shard in self.shards.iter() {
            due.extend(shard.lock().due(now_ms, max));
        }
        due.sort_unstable();
        due.truncate(max);
        due
    }

    /// Forgets every deadline (FLUSHDB, once the index is removed from the store).
    pub(crate) fn clear(&self) {
        self.bump_generation();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            if !shard.map.is_empty() {
                self.nonempty.fetch_sub(1, Ordering::SeqCst);
            }
            shard.map.clear();
            shard.order.clear();
            shard.deadline_sum = 0;
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
        let (count, sum) = self.totals();
        if count == 0 {
            return 0;
        }
        let now = self.now_ms();
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

    /// Keys whose deadline has passed but that are not deleted yet (the due part of the
    /// time order, which the active task keeps short).
    pub fn due_count(&self) -> i64 {
        if !self.any() {
            return 0;
        }
        let now = self.now_ms();
        let mut due = 0i64;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let (order, live) = shard.pruned(now);
            due += order.count_due(now, live) as i64;
        }
        due
    }
}

/// String `user` at its raw key, if there (no deadline).
fn read_raw_place(store: &Store, user: &[u8], out: &mut Vec<u8>) -> Option<Option<u64>> {
    store.get(user, out).then_some(None)
}

/// String `user` at `FF 'x'`, if there: its deadline, its value in `out`.
fn read_deadline_place(store: &Store, user: &[u8], out: &mut Vec<u8>) -> Option<Option<u64>> {
    if !store.get(&string_key(user), out) {
        return None;
    }
    strip_deadline(out).map(Some)
}

/// Moves the strings' deadlines of a store written by an older forest (an `FF 'E'` entry
/// beside the raw key) to the one-entry layout: the string becomes `FF 'x' <user>` ->
/// `<deadline> <value>`, its raw key and its `FF 'E'` entry removed, at most
/// [`MIGRATE_BATCH_KEYS`] strings per atomic batch. A crash between batches leaves some
/// strings moved and the rest as they were (each string is whole in one place), and the
/// next open goes on. A string whose key is too long for `FF 'x'` (within 8 bytes of the
/// key limit) is deleted if its deadline has passed; otherwise it keeps its raw key and
/// loses its deadline (reported on stderr). Run at start, before serving
/// and before [`Expires::load`]; returns how many strings it moved.
pub fn migrate(store: &Store) -> forest_core::Result<u64> {
    let (lower, upper) = index_bounds();
    let mut resume: Option<Vec<u8>> = None;
    let mut moved = 0;
    let now = unix_ms();
    loop {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let from = match &resume {
            Some(key) => Bound::Excluded(key.as_slice()),
            None => Bound::Included(&lower[..]),
        };
        store.scan_up_to(
            from,
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            MIGRATE_BATCH_KEYS,
            &mut |key, _| {
                entries.push(key.to_vec());
                ControlFlow::Continue(())
            },
        );
        layout::loaded(store, ())?;
        let full = entries.len() >= MIGRATE_BATCH_KEYS;
        let mut batch = forest_store::WriteBatch::new();
        let mut value = Vec::new();
        for entry in &entries {
            let Some((deadline, user)) = split_index_key(entry) else {
                continue;
            };
            if !layout::loaded(store, store.get(user, &mut value))? {
                // A collection's deadline (or an orphan, which `repair` removes).
                continue;
            }
            let stored = encode_string(deadline, &value);
            let place = string_key(user);
            batch.remove(entry);
            if forest_core::check_entry(&place, &stored).is_ok() {
                batch.remove(user);
                batch.put(&place, &stored);
                moved += 1;
            } else if deadline <= now {
                // Expired while the server was down: gone, as it would have been (review
                // F2), rather than back without a deadline.
                batch.remove(user);
            } else {
                eprintln!(
                    "forest: key {:?} is too long to keep its deadline in this store's layout; \
                     it stays without one",
                    String::from_utf8_lossy(&user[..user.len().min(64)])
                );
            }
        }
        if !batch.is_empty() {
            store.write(&batch)?;
        }
        match entries.pop() {
            Some(last) if full => resume = Some(last),
            _ => return Ok(moved),
        }
    }
}

/// Removes what no forest write leaves but a hand-edited or damaged store might hold:
/// collections' deadline entries whose collection does not exist, and all but the latest
/// entry of a key with several; first moves an older store's strings over ([`migrate`]).
/// Run at start, before serving; returns how many entries it removed.
pub fn repair(store: &Store) -> forest_core::Result<u64> {
    layout::relayout(store)?;
    migrate(store)?;
    let mut removed = settle_strings(store)?;
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
    layout::loaded(store, ())?;
    let mut scratch = Vec::new();
    for (deadline, user) in entries {
        let exists = layout::loaded(
            store,
            store.get(&crate::collection::type_key(&user), &mut scratch),
        )?;
        if !exists || latest.get(&user) != Some(&deadline) {
            store.remove(&index_key(deadline, &user))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes the `FF 'x'` entry of every string also at its raw key (no forest write leaves
/// both; an older FLUSHDB racing SET EX could leave an `FF 'x'` entry the map did not know,
/// and a plain SET over it then wrote the raw key). The raw key wins: there is no version
/// to compare, and a raw key beside an `FF 'x'` entry can only have been written after
/// it, by a write that did not see it. Returns how many entries it removed.
fn settle_strings(store: &Store) -> forest_core::Result<u64> {
    let (lower, upper) = string_bounds();
    let mut timed: Vec<Vec<u8>> = Vec::new();
    store.scan(
        Bound::Included(&lower[..]),
        Bound::Excluded(&upper[..]),
        Order::Ascending,
        &mut |key, _| {
            timed.push(key.to_vec());
            ControlFlow::Continue(())
        },
    );
    layout::loaded(store, ())?;
    let mut removed = 0;
    let mut scratch = Vec::new();
    for key in &timed {
        let user = split_string_key(key).unwrap_or_default();
        if layout::loaded(store, store.get(user, &mut scratch))? {
            store.remove(key)?;
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

    // Goal: a string's place and stored value round-trip; a value too short to hold a
    // deadline is refused, not misread.
    #[test]
    fn string_places_round_trip() {
        let key = string_key(b"k");
        assert_eq!(split_string_key(&key), Some(&b"k"[..]));
        assert_eq!(split_string_key(b"k"), None);
        let stored = encode_string(7, b"value");
        assert_eq!(decode_string(&stored), Some((7, &b"value"[..])));
        assert_eq!(decode_string(b"short"), None);
        let mut out = stored.clone();
        assert_eq!(strip_deadline(&mut out), Some(7));
        assert_eq!(out, b"value");
        let (lower, upper) = string_bounds();
        assert!(lower.as_slice() <= key.as_slice() && key.as_slice() < upper.as_slice());
    }

    // Goal: the time order follows the map (replace, remove, clear) and `due` hands out
    // the earliest deadlines first, at most `max`.
    #[test]
    fn due_keys_in_time_order() {
        let e = Expires::empty();
        e.insert(b"a", 30);
        e.insert(b"b", 10);
        e.insert(b"c", 20);
        e.insert(b"a", 5);
        e.insert(b"d", 1_000);
        assert_eq!(e.remove(b"c"), Some(20));
        assert_eq!(
            e.due(100, 10),
            vec![(5, b"a".to_vec()), (10, b"b".to_vec())]
        );
        assert_eq!(e.due(100, 1), vec![(5, b"a".to_vec())]);
        assert_eq!(e.due(4, 10), vec![]);
        e.clear();
        assert_eq!(e.due(u64::MAX, 10), vec![]);
    }

    // Goal: a key whose deadline changes again and again leaves stale entries in its
    // shard's time order, which stay bounded (rebuilt past twice the live ones) and are
    // never handed out or counted as due; a key removed and set again with the same
    // deadline is due once.
    // Method: 10 000 changes of one key's deadline, then of 100 keys'; check the order's
    // size, `due` and `due_count` against the live deadlines.
    #[test]
    fn stale_order_entries_stay_bounded_and_hidden() {
        let e = Expires::empty();
        let now = e.now_ms();
        for i in 0..10_000u64 {
            e.insert(b"k", now - 5_000 + i % 7);
        }
        let order_len =
            |e: &Expires| -> usize { e.shards.iter().map(|s| s.lock().order.len()).sum() };
        assert!(order_len(&e) <= 2 + ORDER_SLACK + 1, "{}", order_len(&e));
        e.remove(b"k");
        assert_eq!(order_len(&e), 0, "an empty shard drops its stale entries");
        e.insert(b"k", now - 5_000);
        assert_eq!(e.due(now, 10), vec![(now - 5_000, b"k".to_vec())]);
        assert_eq!(e.due_count(), 1);
        for round in 0..50u64 {
            for k in 0..100u64 {
                let deadline = if k.is_multiple_of(2) {
                    now - 1_000 - k
                } else {
                    now + 1_000 + round
                };
                e.insert(format!("m{k}").as_bytes(), deadline);
            }
        }
        for k in (1..100u64).step_by(4) {
            e.remove(format!("m{k}").as_bytes());
        }
        for shard in e.shards.iter() {
            let shard = shard.lock();
            assert!(shard.order.len() <= 2 * (shard.map.len() + 25) + ORDER_SLACK + 1);
        }
        assert_eq!(e.due_count(), 51, "k and the 50 even m keys");
        let due = e.due(now, 1_000);
        let mut want: Vec<(u64, Vec<u8>)> = (0..100u64)
            .step_by(2)
            .map(|k| (now - 1_000 - k, format!("m{k}").into_bytes()))
            .collect();
        want.push((now - 5_000, b"k".to_vec()));
        want.sort();
        assert_eq!(due, want);
        assert_eq!(e.due(now, 3), want[..3].to_vec());
        assert_eq!(e.count(), 1 + 100 - 25);
    }

    // Goal: a store written by the older layout (a string's deadline as an `FF 'E'` entry
    // beside its raw key) opens right, also when a crash cut its migration in two (some
    // strings moved, the rest not), and opening again changes nothing more: values,
    // deadlines, a key due while down gone, a collection's deadline kept, DBSIZE, KEYS.
    // Method: write both layouts by hand into one store (more strings than one migration
    // batch), reopen twice, check every key and the store's entries.
    #[test]
    fn migrates_the_older_layout() {
        use crate::cmd::testing::{bulk, bulks, Harness};
        use crate::frame::Frame;
        let h = Harness::new();
        let now = unix_ms();
        let count = MIGRATE_BATCH_KEYS * 2 + 11;
        let name = |i: usize| format!("s{i:04}");
        {
            let store = &h.shared.store;
            for i in 0..count {
                let (key, value) = (name(i), format!("v{i}"));
                let deadline = now + 100_000_000 + i as u64;
                if i % 3 == 0 {
                    // Already moved before the crash.
                    store
                        .upsert(
                            &string_key(key.as_bytes()),
                            &encode_string(deadline, value.as_bytes()),
                        )
                        .expect("upsert");
                } else {
                    store
                        .upsert(key.as_bytes(), value.as_bytes())
                        .expect("upsert");
                    store
                        .upsert(&index_key(deadline, key.as_bytes()), b"")
                        .expect("upsert");
                }
            }
            store.upsert(b"gone", b"x").expect("upsert");
            store
                .upsert(&index_key(now - 1_000, b"gone"), b"")
                .expect("upsert");
            store.upsert(b"plain", b"p").expect("upsert");
        }
        let mut h = h;
        h.run(&["HSET", "h", "f", "1"]);
        h.run(&["EXPIRE", "h", "100000"]);
        for _ in 0..2 {
            h = h.restart();
            for i in 0..count {
                let key = name(i);
                assert_eq!(h.run(&["GET", &key]), bulk(&format!("v{i}")), "{key}");
                let Frame::Integer(pttl) = h.run(&["PTTL", &key]) else {
                    panic!("PTTL");
                };
                assert!(pttl > 99_000_000, "{key} {pttl}");
                let mut v = Vec::new();
                assert!(!h.shared.store.get(key.as_bytes(), &mut v), "{key} raw");
                assert!(h.shared.store.get(&string_key(key.as_bytes()), &mut v));
            }
            assert_eq!(h.run(&["GET", "gone"]), Frame::Null);
            assert_eq!(h.run(&["GET", "plain"]), bulk("p"));
            assert_eq!(h.run(&["TTL", "plain"]), Frame::Integer(-1));
            let Frame::Integer(ttl) = h.run(&["TTL", "h"]) else {
                panic!("TTL");
            };
            assert!(ttl > 99_000, "{ttl}");
            assert_eq!(
                h.run(&["DBSIZE"]),
                Frame::Integer(count as i64 + 2),
                "the strings, plain and h"
            );
            let (lower, upper) = index_bounds();
            let mut entries = Vec::new();
            h.shared.store.scan(
                Bound::Included(&lower[..]),
                Bound::Excluded(&upper[..]),
                Order::Ascending,
                &mut |key, _| {
                    entries.push(split_index_key(key).expect("index").1.to_vec());
                    ControlFlow::Continue(())
                },
            );
            assert_eq!(entries, vec![b"h".to_vec()], "only the collection's entry");
            let mut keys: Vec<String> = (0..count).map(name).collect();
            keys.push("h".into());
            keys.push("plain".into());
            keys.sort();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            assert_eq!(h.run(&["KEYS", "*"]), bulks(&keys));
        }
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
