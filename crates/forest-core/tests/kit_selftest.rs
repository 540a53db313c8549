//! Proves the conformance kit itself: the reference index passes every check through the
//! macro, and each deliberately broken index is caught by the check meant to catch it.

// Test scaffolding: a poisoned lock here means a test has already failed.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::thread::ThreadId;

use forest_core::conformance::reference::ReferenceIndex;
use forest_core::conformance::{bounds_empty, share, Sizes};
use forest_core::{check_entry, Index, IndexStats, Order, Result, Visitor};

// The reference index passes every check, through the macro as engines use it.
// The kit's own proof needs no full sizes: the variant sizes (CI's time).
forest_core::conformance_tests!(
    reference,
    || ReferenceIndex::new(),
    sizes = Sizes::for_variant()
);

/// One deliberate bug each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// A scan drops the last record of its range.
    ScanSkipsLast,
    /// A pinned scan (only) drops the last record of its range.
    PinnedScanSkipsLast,
    /// A descending scan hands records out in ascending order.
    DescendingIsAscending,
    /// Insert of a present key overwrites its value (and still returns false).
    InsertOverwrites,
    /// Remove returns true even when the key was absent.
    RemoveAlwaysTrue,
    /// `stats().key_count` ignores removes.
    KeyCountIgnoresRemoves,
    /// Keys are stored without their trailing zero bytes, so `a` and `a\0` collide.
    TrailingZerosDropped,
    /// Values longer than 64 KiB are cut to 64 KiB.
    TruncatesLongValues,
    /// Upsert removes the old record before it checks the value size.
    ErrorAfterRemove,
    /// Get appends to `out` instead of replacing its contents.
    GetAppends,
    /// Crossing bounds passed straight to `BTreeMap::range`, which panics.
    CrossingBoundsPanic,
    /// A scan ignores `Break` and goes on calling `visit`.
    IgnoresBreak,
    /// A scan holds a latch while `visit` runs; writers take it exclusively.
    LatchedScan,
    /// The first insert of each thread other than the creator is dropped (yet returns true).
    DropsFirstInsertOfThread,
    /// Every 8th get returns the key's previous value.
    StaleRead,
    /// A scan restarts from its first bound when a write happened between two chunks.
    RestartingScan,
    /// When the index grows to 300 keys, its smallest key vanishes (a bad split).
    SplitLosesKey,
    /// Removing a key when 1 000 keys remain also removes its successor (a bad merge).
    MergeLosesNeighbour,
    /// Upsert of a present key is a remove, a pause, then an insert: readers see it absent.
    UpsertNotAtomic,
    /// After a write between two chunks, a scan resumes one record too far.
    SeamSkipsAfterWrite,
    /// A hinted scan takes its length hint for a limit: it ends after that many records.
    HintIsALimit,
    /// `get_many` answers a key repeated in one list as absent after its first time.
    GetManyDropsRepeats,
}

/// Records a scan copies per chunk; small so that chunk seams are crossed often.
const CHUNK_RECORD_COUNT: usize = 16;
/// Length the truncating fault cuts values to.
const TRUNCATED_VALUE_BYTES: usize = 64 * 1024;

struct Broken {
    fault: Fault,
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    latch: RwLock<()>,
    write_count: AtomicU64,
    get_count: AtomicU64,
    inserted_count: AtomicU64,
    previous: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    creator: ThreadId,
    threads_seen: Mutex<HashSet<ThreadId>>,
}

impl Broken {
    fn new(fault: Fault) -> Self {
        Self {
            fault,
            map: RwLock::default(),
            latch: RwLock::default(),
            write_count: AtomicU64::new(0),
            get_count: AtomicU64::new(0),
            inserted_count: AtomicU64::new(0),
            previous: Mutex::default(),
            creator: std::thread::current().id(),
            threads_seen: Mutex::default(),
        }
    }

    fn stored_key(&self, key: &[u8]) -> Vec<u8> {
        let mut key = key.to_vec();
        if self.fault == Fault::TrailingZerosDropped {
            while key.last() == Some(&0) {
                key.pop();
            }
        }
        key
    }

    fn stored_value(&self, value: &[u8]) -> Vec<u8> {
        let mut value = value.to_vec();
        if self.fault == Fault::TruncatesLongValues {
            value.truncate(TRUNCATED_VALUE_BYTES);
        }
        value
    }

    /// Whether this call is a thread's first insert that the fault drops.
    fn drop_this_insert(&self) -> bool {
        let me = std::thread::current().id();
        self.fault == Fault::DropsFirstInsertOfThread
            && me != self.creator
            && self.threads_seen.lock().unwrap().insert(me)
    }

    fn write(&self, key: Vec<u8>, value: Vec<u8>) {
        let _latch = self.latch.write().unwrap();
        let mut map = self.map.write().unwrap();
        if let Some(old) = map.insert(key.clone(), value) {
            self.previous.lock().unwrap().insert(key, old);
        }
        if self.fault == Fault::SplitLosesKey && map.len() == 300 {
            map.pop_first();
        }
        self.write_count.fetch_add(1, Ordering::SeqCst);
    }

    fn chunk(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        if self.fault != Fault::CrossingBoundsPanic && bounds_empty(lower, upper) {
            return Vec::new();
        }
        let map = self.map.read().unwrap();
        let range = map.range::<[u8], _>((lower, upper));
        let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        match order {
            Order::Ascending => range.take(CHUNK_RECORD_COUNT).map(copy).collect(),
            Order::Descending => range.rev().take(CHUNK_RECORD_COUNT).map(copy).collect(),
        }
    }
}

impl Index for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let key = self.stored_key(key);
        let n = self.get_count.fetch_add(1, Ordering::Relaxed);
        if self.fault == Fault::StaleRead && n % 8 == 7 {
            // Copy the old value and release `previous` before reading `map`: `write` takes
            // them in the other order, so holding both here could deadlock.
            let old = self.previous.lock().unwrap().get(&key).cloned();
            if let Some(old) = old {
                if self.map.read().unwrap().contains_key(&key) {
                    out.clear();
                    out.extend_from_slice(&old);
                    return true;
                }
            }
        }
        match self.map.read().unwrap().get(&key) {
            Some(value) => {
                if self.fault != Fault::GetAppends {
                    out.clear();
                }
                out.extend_from_slice(value);
                true
            }
            None => false,
        }
    }

    fn get_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let repeat = !seen.insert(*key);
            let found = self.get(key, &mut out);
            let dropped = repeat && self.fault == Fault::GetManyDropsRepeats;
            visit(i, (found && !dropped).then_some(out.as_slice()));
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (key, value) = (self.stored_key(key), self.stored_value(value));
        let present = self.map.read().unwrap().contains_key(&key);
        if present {
            if self.fault == Fault::InsertOverwrites {
                self.write(key, value);
            }
            return Ok(false);
        }
        if self.drop_this_insert() {
            return Ok(true);
        }
        self.inserted_count.fetch_add(1, Ordering::Relaxed);
        self.write(key, value);
        Ok(true)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.fault == Fault::ErrorAfterRemove {
            self.remove(key);
        }
        check_entry(key, value)?;
        if self.fault == Fault::UpsertNotAtomic && self.remove(key) {
            std::thread::yield_now();
        }
        let (key, value) = (self.stored_key(key), self.stored_value(value));
        if !self.map.read().unwrap().contains_key(&key) {
            self.inserted_count.fetch_add(1, Ordering::Relaxed);
        }
        self.write(key, value);
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let (key, value) = (self.stored_key(key), self.stored_value(value));
        if !self.map.read().unwrap().contains_key(&key) {
            return Ok(false);
        }
        self.write(key, value);
        Ok(true)
    }

    fn remove(&self, key: &[u8]) -> bool {
        let key = self.stored_key(key);
        let _latch = self.latch.write().unwrap();
        let mut map = self.map.write().unwrap();
        let was = map.remove(&key).is_some();
        if self.fault == Fault::MergeLosesNeighbour && was && map.len() == 1000 {
            let next = map.range(key..).next().map(|(k, _)| k.clone());
            if let Some(next) = next {
                map.remove(&next);
            }
        }
        self.write_count.fetch_add(1, Ordering::SeqCst);
        was || self.fault == Fault::RemoveAlwaysTrue
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.chunked_scan(
            lower,
            upper,
            order,
            visit,
            self.fault == Fault::ScanSkipsLast,
        );
    }

    fn scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        if self.fault != Fault::HintIsALimit {
            return self.scan(lower, upper, order, visit);
        }
        let mut left = len_hint;
        self.scan(lower, upper, order, &mut |k, v| {
            if left == 0 {
                return ControlFlow::Break(());
            }
            left -= 1;
            visit(k, v)
        });
    }

    fn scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        let skip_last = matches!(
            self.fault,
            Fault::ScanSkipsLast | Fault::PinnedScanSkipsLast
        );
        self.chunked_scan(lower, upper, order, visit, skip_last);
    }

    fn stats(&self) -> IndexStats {
        let len = self.map.read().unwrap().len() as u64;
        let key_count = if self.fault == Fault::KeyCountIgnoresRemoves {
            self.inserted_count.load(Ordering::Relaxed)
        } else {
            len
        };
        IndexStats {
            key_count,
            ..IndexStats::default()
        }
    }
}

impl Broken {
    /// Both scans: chunks of [`CHUNK_RECORD_COUNT`] records, with the scan faults.
    fn chunked_scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
        skip_last: bool,
    ) {
        let _latch = (self.fault == Fault::LatchedScan).then(|| self.latch.read().unwrap());
        let chunk_order = if self.fault == Fault::DescendingIsAscending {
            Order::Ascending
        } else {
            order
        };
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let writes_before = self.write_count.load(Ordering::SeqCst);
            let (from_lower, from_upper) = match (&cursor, chunk_order) {
                (None, _) => (lower, upper),
                (Some(last), Order::Ascending) => (Bound::Excluded(last.as_slice()), upper),
                (Some(last), Order::Descending) => (lower, Bound::Excluded(last.as_slice())),
            };
            let mut chunk = self.chunk(from_lower, from_upper, chunk_order);
            let complete = chunk.len() < CHUNK_RECORD_COUNT;
            let last = chunk.last().map(|(k, _)| k.clone());
            if skip_last && complete {
                chunk.pop();
            }
            for (key, value) in &chunk {
                if visit(key, value).is_break() && self.fault != Fault::IgnoresBreak {
                    return;
                }
            }
            if complete {
                return;
            }
            let written = self.write_count.load(Ordering::SeqCst) != writes_before;
            cursor = match self.fault {
                Fault::RestartingScan if written => None,
                Fault::SeamSkipsAfterWrite if written => {
                    let last = last.unwrap_or_default();
                    let (from_lower, from_upper) = match chunk_order {
                        Order::Ascending => (Bound::Excluded(last.as_slice()), upper),
                        Order::Descending => (lower, Bound::Excluded(last.as_slice())),
                    };
                    let skipped = self.chunk(from_lower, from_upper, chunk_order);
                    skipped.first().map(|(k, _)| k.clone()).or(Some(last))
                }
                _ => last,
            };
        }
    }
}

fn broken(fault: Fault) -> impl Fn() -> std::sync::Arc<dyn Index> {
    share(move || Broken::new(fault))
}

mod caught {
    use super::*;
    use forest_core::conformance::{edge, many, model, order, scan, stress};

    // Each test: goal = the named check catches one bug; method = run that check on an index
    // with that one fault and expect the check's own failure message.

    #[test]
    #[should_panic(expected = "[scan_bounds] index broken")]
    fn scan_skipping_the_last_record() {
        scan::scan_bounds(&broken(Fault::ScanSkipsLast), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[scan_bounds] index broken")]
    fn pinned_scan_skipping_the_last_record() {
        let make = broken(Fault::PinnedScanSkipsLast);
        // Its plain scans are right: only the pinned variant of the check catches it.
        scan::scan_bounds(&make, &Sizes::for_build());
        scan::scan_pinned_bounds(&make, &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[scan_bounds] index broken")]
    fn descending_scan_in_ascending_order() {
        scan::scan_bounds(&broken(Fault::DescendingIsAscending), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[model_small_keys] index broken: model check failed")]
    fn insert_that_overwrites() {
        model::model_small_keys(&broken(Fault::InsertOverwrites), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[model_small_keys] index broken: model check failed")]
    fn remove_returning_the_wrong_bool() {
        model::model_small_keys(&broken(Fault::RemoveAlwaysTrue), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "stats().key_count")]
    fn key_count_ignoring_removes() {
        model::model_small_keys(&broken(Fault::KeyCountIgnoresRemoves), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[edge_binary_keys] index broken")]
    fn trailing_zeros_dropped() {
        edge::edge_binary_keys(&broken(Fault::TrailingZerosDropped), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[edge_size_limits] index broken")]
    fn long_values_truncated() {
        edge::edge_size_limits(&broken(Fault::TruncatesLongValues), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[edge_size_limits] index broken: after the refused upsert")]
    fn refused_upsert_that_removed_the_old_value() {
        edge::edge_size_limits(&broken(Fault::ErrorAfterRemove), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[edge_get_replaces_out] index broken")]
    fn get_appending_to_out() {
        edge::edge_get_replaces_out(&broken(Fault::GetAppends), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "in BTreeMap")]
    fn crossing_bounds_panic() {
        scan::scan_crossing_and_equal_bounds(
            &broken(Fault::CrossingBoundsPanic),
            &Sizes::for_build(),
        );
    }

    #[test]
    #[should_panic(expected = "[scan_early_stop] index broken")]
    fn scan_ignoring_break() {
        scan::scan_early_stop(&broken(Fault::IgnoresBreak), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[get_many_model] index broken")]
    fn get_many_dropping_repeated_keys() {
        many::get_many_model(&broken(Fault::GetManyDropsRepeats), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[scan_hinted] index broken")]
    fn hint_taken_for_a_limit() {
        scan::scan_hinted(&broken(Fault::HintIsALimit), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[stress_scan_during_writes] index broken: scanner thread")]
    fn hint_taken_for_a_limit_under_writes() {
        stress::stress_scan_during_writes(&broken(Fault::HintIsALimit), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[scan_visitor_reenters] index broken")]
    fn scan_holding_a_latch_while_visiting() {
        let sizes = Sizes {
            reentry_timeout: std::time::Duration::from_secs(2),
            ..Sizes::for_build()
        };
        scan::scan_visitor_reenters(&broken(Fault::LatchedScan), &sizes);
    }

    #[test]
    #[should_panic(expected = "[stress_disjoint_keys] index broken: thread")]
    fn first_insert_of_each_thread_dropped() {
        stress::stress_disjoint_keys(
            &broken(Fault::DropsFirstInsertOfThread),
            &Sizes::for_build(),
        );
    }

    #[test]
    #[should_panic(expected = "[stress_hot_keys] index broken: thread")]
    fn stale_reads() {
        stress::stress_hot_keys(&broken(Fault::StaleRead), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[stress_scan_during_writes] index broken: scanner thread")]
    fn scan_restarting_after_a_concurrent_write() {
        stress::stress_scan_during_writes(&broken(Fault::RestartingScan), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[stress_hot_keys] index broken: thread")]
    fn upsert_that_is_not_atomic() {
        stress::stress_hot_keys(&broken(Fault::UpsertNotAtomic), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "is missing")]
    fn scan_skipping_a_record_at_a_seam_after_a_write() {
        stress::stress_scan_during_writes(&broken(Fault::SeamSkipsAfterWrite), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[model_many_keys] index broken: model check failed")]
    fn split_losing_a_key() {
        model::model_many_keys(&broken(Fault::SplitLosesKey), &Sizes::for_build());
    }

    #[test]
    #[should_panic(expected = "[order_random] index broken")]
    fn merge_losing_a_neighbour() {
        order::order_random(&broken(Fault::MergeLosesNeighbour), &Sizes::for_build());
    }
}

#[test]
#[should_panic(expected = "[model replay] index broken: op #2 Get(key(b\"\"))")]
fn replay_of_a_printed_sequence() {
    // Goal: a failure listing pastes into a named regression test. Method: replay the listing
    // the model check printed for the overwriting insert.
    use forest_core::conformance::model::{key, replay, val, Op::*};
    replay(
        &Broken::new(Fault::InsertOverwrites),
        &[
            Insert(key(b""), val(0, 0)),
            Insert(key(b""), val(0, 1)),
            Get(key(b"")),
        ],
    );
}

#[test]
fn broken_index_without_fault_behaviour_is_not_flagged_by_accident() {
    // Goal: the faults, not the Broken scaffolding, are what the checks catch. Method: run the
    // cheap checks on a Broken index whose fault only matters under concurrency.
    let make = broken(Fault::DropsFirstInsertOfThread);
    let sizes = Sizes::for_build();
    forest_core::conformance::scan::scan_bounds(&make, &sizes);
    forest_core::conformance::edge::edge_binary_keys(&make, &sizes);
    forest_core::conformance::model::model_small_keys(&make, &sizes);
}
