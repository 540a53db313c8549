//! The conformance kit: the one test suite every engine and every benchmark peer passes
//! (DESIGN.md, "Rules of the house"; STYLE.md §5). It checks the contract written in
//! [`crate::index`]: single-key operations are linearizable, each record a scan hands out is
//! atomic (Bw-tree §III-C, BzTree §4.2.6), scans are strictly ordered and never run `visit`
//! under a latch or an epoch pin, and over-long keys or values are errors that change nothing.
//!
//! Use it through the macro, which expands to a module with one `#[test]` per check (in an
//! engine's `tests/conformance.rs`, with forest-core's `testkit` feature as a dev-dependency):
//! ```
//! forest_core::conformance_tests!(reference_kit, || {
//!     forest_core::conformance::reference::ReferenceIndex::new()
//! });
//! ```
//! or call one check directly, with sizes of your own:
//! ```
//! use forest_core::conformance::{reference::ReferenceIndex, scan, share, Sizes};
//! let sizes = Sizes { order_key_count: 1_000, ..Sizes::for_build() };
//! scan::scan_early_stop(&share(ReferenceIndex::new), &sizes);
//! ```
//!
//! Sizes are [`Sizes::for_build`]: full in optimized builds (`cfg(forest_optimized)`, i.e. the
//! `ci` and `release` profiles), smaller in debug builds; an engine's further configurations
//! and the peers run [`Sizes::for_variant`] (a quarter of the order keys, an eighth of the
//! stress ops and half the model cases in optimized builds). Random checks draw their seed from
//! `FOREST_KIT_SEED` when set, else at random, and every failure message names the seed.
//!
//! | check | what it proves | size (debug / optimized) |
//! |---|---|---|
//! | [`model::model_small_keys`] | proptest op sequences (get, insert, upsert, update, remove, scans with every bound kind, both orders, early stop) agree with a `BTreeMap` at every step; `stats().key_count` equals the model's length at the end. Keys: 0..=3 bytes over {00, 01, 'a', 'b', FF} | 128 / 256 cases of up to 64 ops |
//! | [`model::model_many_keys`] | the same over a pool of 512 keys with long shared prefixes (8- and 16-byte slice boundaries), with bulk fill and drain ops so small nodes split and merge | 32 / 64 cases of up to 48 ops (fills up to 300 keys) |
//! | [`edge::edge_binary_keys`] | the empty key, empty values, 00 and FF bytes, keys that are prefixes of each other or differ only in trailing zeros; insert-if-absent, update-if-present, bounded scans at the empty key | ~100 keys |
//! | [`edge::edge_size_limits`] | `KEY_BYTES_MAX` keys and `VALUE_BYTES_MAX` values round-trip; one byte more is `KeyTooLong` / `ValueTooLong` on insert, upsert and update and leaves the index unchanged; get and remove with an over-long key find nothing and do not panic | 1 MiB values |
//! | [`edge::edge_get_replaces_out`] | `get` replaces the whole contents of a reused, non-empty buffer | - |
//! | [`order::order_ascending`], [`order::order_descending`], [`order::order_random`] | keys inserted in that order are all found by get and by full scans both ways; then 90 % removed (ascending / descending / random order), then all, the empty index is empty (gets, scans, key_count), then reinsertion works | 20 k / 100 k keys |
//! | [`scan::scan_bounds`] | every bound kind on each side (on keys, between keys, beyond both ends), both orders, against the model | 600 keys, ~3 400 scans (a third on variants) |
//! | [`scan::scan_crossing_and_equal_bounds`] | crossing bounds give nothing; equal bounds give the key for Included/Included and nothing otherwise | 600 keys |
//! | [`scan::scan_early_stop`] | a visitor that breaks after 0, 1, k records stops the scan at once, with the right prefix | 600 keys |
//! | [`scan::scan_hinted`] | [`Index::scan_hinted`] hands out what `scan` does whatever its length hint: hints of 0, 1, a few, batch sizes and past the range, visitors stopping before, at, past the hint or never, breaking on the last record kept or on the next, both orders | 600 keys |
//! | [`scan::scan_pinned_bounds`], [`scan::scan_pinned_crossing_and_equal_bounds`], [`scan::scan_pinned_early_stop`] | the three checks above through [`Index::scan_pinned`] ([`PinnedScans`]) | as above |
//! | [`scan::scan_visitor_reenters`] | `visit` may call get, upsert and remove on the same index without deadlock (watchdog: 20 s without a visit) | 600 keys |
//! | [`stress::stress_disjoint_keys`] | threads on disjoint, interleaved key sets check every return value against their own model; at the end the index equals the union of the models | 50 k / 1 M ops |
//! | [`stress::stress_hot_keys`] | threads upsert 16 hot keys with (thread, sequence) values; readers (gets and scans) never see a writer's sequence go back; at the end each key holds some writer's last write | 50 k / 1 M ops |
//! | [`stress::stress_scan_during_writes`] | scans with random bounds, orders, early stops and length hints, during inserts and removes of volatile keys, are strictly ordered, stay within bounds, return every stable key and only correct values | 50 k / 1 M writes |
//! | [`stress::stress_scan_pinned_during_writes`] | the same through [`Index::scan_pinned`] | a quarter of the above: 12.5 k / 250 k writes |
//! | [`many::get_many_model`] | [`Index::get_many`] on random lists (the empty list, up to 70 keys: repeats, absent and over-long keys, the edge keys, keys of one, two and three slices) after each of three rounds of upserts and removals: one visit per position, in order, the model's value | 300–3 000 keys, 192 lists |
//! | [`stress::stress_get_many_during_writes`] | `get_many` during writes: one writer writes each sequence to 16 hot keys in turn, others insert and remove volatile keys; readers' lists of hot, stable, volatile, never-written and over-long keys get one visit per position in order, right values, and no hot key behind what an earlier position or call showed (key `i`'s read after key `i - 1`'s); the model at the end | a quarter of the stress ops as writes: 12.5 k / 250 k |
//!
//! Threads: `max(4, 2 × available_parallelism)`. When no stress thread finishes an operation
//! for [`stress::STALL_TIMEOUT`] (60 s), the kit prints which threads are stuck and aborts the
//! test process, since deadlocked threads can be neither stopped nor joined. A model failure
//! prints its shrunk op sequence as Rust source that [`model::replay`] runs, so it becomes a
//! named regression test (STYLE.md §5).
//!
//! Temporal engines also run [`temporal`] (the temporal model test, issue 18) through
//! [`crate::temporal_conformance_tests!`].
//!
//! With feature `pause-points` too, [`pause`] holds the helpers that stop a named thread at
//! a pause point ([`crate::pause`]) for an engine's tests of half-done structure changes.
//!
//! The kit's own proof is
//! `tests/kit_selftest.rs`: [`reference::ReferenceIndex`] passes every check, and deliberately
//! broken indexes are each caught by the check meant to catch them.

pub mod edge;
pub mod many;
pub mod model;
pub mod order;
#[cfg(feature = "pause-points")]
pub mod pause;
pub mod reference;
pub mod scan;
pub mod stress;
pub mod temporal;

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::index::{in_bounds, Index, Order};

/// How a check gets a fresh, empty index.
pub type Make<'a> = &'a dyn Fn() -> Arc<dyn Index>;

/// Turns a constructor of a concrete index into the shared form the checks take.
pub fn share<I, F>(make: F) -> impl Fn() -> Arc<dyn Index>
where
    F: Fn() -> I,
    I: Index + 'static,
{
    move || Arc::new(make()) as Arc<dyn Index>
}

/// An index whose `scan` is the wrapped index's [`Index::scan_pinned`], so that the kit's scan
/// checks run through the pinned path (the `scan_pinned_*` checks; their messages name the scan
/// check they run). Their visitors only copy or compare what they get, as `scan_pinned` asks.
pub struct PinnedScans(pub Arc<dyn Index>);

impl Index for PinnedScans {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.0.get(key, out)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> crate::Result<bool> {
        self.0.insert(key, value)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> crate::Result<()> {
        self.0.upsert(key, value)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> crate::Result<bool> {
        self.0.update(key, value)
    }

    fn remove(&self, key: &[u8]) -> bool {
        self.0.remove(key)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut crate::Visitor<'_>,
    ) {
        self.0.scan_pinned(lower, upper, order, visit);
    }

    fn scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut crate::Visitor<'_>,
    ) {
        self.0.scan_pinned(lower, upper, order, visit);
    }

    fn stats(&self) -> crate::IndexStats {
        self.0.stats()
    }
}

/// `make`, with every index it makes wrapped in [`PinnedScans`].
pub fn pinned(make: Make<'_>) -> impl Fn() -> Arc<dyn Index> + '_ {
    move || Arc::new(PinnedScans(make())) as Arc<dyn Index>
}

/// The fewest threads a stress check runs, so that even a 1- or 2-core machine interleaves
/// operations of more threads than cores (preemption inside critical sections).
pub const STRESS_THREAD_COUNT_MIN: usize = 4;

/// How long [`scan::scan_visitor_reenters`] waits by default, with no record visited, before
/// it calls a scan deadlocked: a visit takes microseconds to milliseconds, so only a deadlock
/// comes near this, even on a loaded machine.
pub const REENTRY_TIMEOUT: Duration = Duration::from_secs(20);

/// How big the checks are.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Proptest cases of [`model::model_small_keys`].
    pub model_small_case_count: u32,
    /// Proptest cases of [`model::model_many_keys`].
    pub model_many_case_count: u32,
    /// Keys inserted by each [`order`] check.
    pub order_key_count: usize,
    /// Operations of each stress check, over all its threads.
    pub stress_op_count: usize,
    /// Threads of each stress check.
    pub thread_count: usize,
    /// How long [`scan::scan_visitor_reenters`] waits without a visit before it calls a scan
    /// deadlocked.
    pub reentry_timeout: Duration,
    /// [`scan::scan_bounds`] checks the (lower, upper) pairs whose indices sum to a multiple
    /// of this (1: all): each bound meets every this-many-th bound on the other side, so each
    /// bound kind still appears on each side hundreds of times.
    pub scan_pair_stride: usize,
}

impl Sizes {
    /// Full sizes in optimized builds, smaller ones in debug builds (see the module doc).
    pub fn for_build() -> Self {
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let thread_count = parallelism.saturating_mul(2).max(STRESS_THREAD_COUNT_MIN);
        if cfg!(forest_optimized) {
            Self {
                model_small_case_count: 256,
                model_many_case_count: 64,
                order_key_count: 100_000,
                stress_op_count: 1_000_000,
                thread_count,
                reentry_timeout: REENTRY_TIMEOUT,
                scan_pair_stride: 1,
            }
        } else {
            Self {
                model_small_case_count: 128,
                model_many_case_count: 32,
                order_key_count: 20_000,
                stress_op_count: 50_000,
                thread_count,
                reentry_timeout: REENTRY_TIMEOUT,
                scan_pair_stride: 1,
            }
        }
    }
}

impl Sizes {
    /// The sizes for a further configuration of an engine whose default configuration runs
    /// [`Sizes::for_build`], and for third-party peers: in optimized builds a quarter of the
    /// order keys (25 k, still several levels of the smallest nodes), an eighth of the stress
    /// operations (125 k), half the model cases and a third of the bound pairs of the
    /// scan-bound checks, the rest as `for_build`. Every check still runs on every
    /// configuration; only the default pays for the full sizes, which keeps CI's test run
    /// within its time budget (docs/ARCHITECTURE.md "CI").
    pub fn for_variant() -> Self {
        let full = Self::for_build();
        if cfg!(forest_optimized) {
            Self {
                model_small_case_count: full.model_small_case_count / 2,
                model_many_case_count: full.model_many_case_count / 2,
                order_key_count: full.order_key_count / 4,
                stress_op_count: full.stress_op_count / 8,
                scan_pair_stride: 3,
                ..full
            }
        } else {
            full
        }
    }
}

/// The seed of a check's random choices: `FOREST_KIT_SEED` (decimal or 0x-hex) when set,
/// else a fresh one, so repeated runs explore more while a failure stays reproducible.
pub fn seed() -> u64 {
    if let Ok(text) = std::env::var("FOREST_KIT_SEED") {
        let text = text.trim();
        let parsed = match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse(),
        };
        if let Ok(seed) = parsed {
            return seed;
        }
        panic!("FOREST_KIT_SEED={text:?} is not a u64 (decimal or 0x-hex)");
    }
    rand::rng().random()
}

/// Shows bytes as a byte-string literal, cutting long ones so messages stay readable.
pub fn show(bytes: &[u8]) -> String {
    /// Longest byte string shown whole.
    const SHOWN_BYTES_MAX: usize = 40;
    if bytes.len() <= SHOWN_BYTES_MAX {
        format!("b\"{}\"", bytes.escape_ascii())
    } else {
        format!(
            "{} bytes b\"{}\"..b\"{}\"",
            bytes.len(),
            bytes[..16].escape_ascii(),
            bytes[bytes.len() - 8..].escape_ascii()
        )
    }
}

/// Shows a bound with [`show`].
pub fn show_bound(bound: Bound<&[u8]>) -> String {
    match bound {
        Bound::Included(k) => format!("Included({})", show(k)),
        Bound::Excluded(k) => format!("Excluded({})", show(k)),
        Bound::Unbounded => "Unbounded".to_string(),
    }
}

/// Whether no key can lie within the bounds (they cross, or are equal and one excludes).
pub fn bounds_empty(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u))
        | (Bound::Excluded(l), Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

/// A lower and an upper bound.
pub(crate) type BoundPair<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The model the checks compare against.
pub(crate) type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Records in the order a scan handed them out.
pub(crate) type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// What one scan returned.
pub(crate) struct ScanResult {
    /// The records visited, including the one whose visit returned `Break`.
    pub records: Records,
    /// Calls of `visit` after it had returned `Break` (must be 0).
    pub calls_after_break: usize,
}

/// Scans and collects. With `limit = Some(n)`, the visitor keeps `n` records and returns
/// `Break` on the next call (that record is not kept).
pub(crate) fn collect(
    index: &dyn Index,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    limit: Option<usize>,
) -> ScanResult {
    collect_hinted(index, lower, upper, order, limit, None)
}

/// As [`collect`], through [`Index::scan_hinted`] when `hint` is given.
pub(crate) fn collect_hinted(
    index: &dyn Index,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    limit: Option<usize>,
    hint: Option<usize>,
) -> ScanResult {
    let mut records = Vec::new();
    let mut broken = false;
    let mut calls_after_break = 0;
    let mut visit = |k: &[u8], v: &[u8]| {
        if broken {
            calls_after_break += 1;
            return ControlFlow::Break(());
        }
        if limit == Some(records.len()) {
            broken = true;
            return ControlFlow::Break(());
        }
        records.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    };
    match hint {
        Some(hint) => index.scan_hinted(lower, upper, order, hint, &mut visit),
        None => index.scan(lower, upper, order, &mut visit),
    }
    ScanResult {
        records,
        calls_after_break,
    }
}

/// What the model says a scan returns.
pub(crate) fn expected(
    model: &Model,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    limit: Option<usize>,
) -> Records {
    let within = model
        .iter()
        .filter(|(k, _)| in_bounds(k, lower, upper))
        .map(|(k, v)| (k.clone(), v.clone()));
    let limit = limit.unwrap_or(usize::MAX);
    match order {
        Order::Ascending => within.take(limit).collect(),
        Order::Descending => within.rev().take(limit).collect(),
    }
}

/// The first difference between two record lists, described, or None when equal.
pub(crate) fn diff_records(actual: &Records, expected: &Records) -> Option<String> {
    for (position, (a, e)) in actual.iter().zip(expected).enumerate() {
        if a != e {
            return Some(format!(
                "record #{position}: got ({}, {}), expected ({}, {}) ({} records returned, {} expected)",
                show(&a.0),
                show(&a.1),
                show(&e.0),
                show(&e.1),
                actual.len(),
                expected.len()
            ));
        }
    }
    match actual.len().cmp(&expected.len()) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Less => Some(format!(
            "returned {} records, expected {}: the first missing is ({}, {})",
            actual.len(),
            expected.len(),
            show(&expected[actual.len()].0),
            show(&expected[actual.len()].1)
        )),
        std::cmp::Ordering::Greater => Some(format!(
            "returned {} records, expected {}: the first extra is ({}, {})",
            actual.len(),
            expected.len(),
            show(&actual[expected.len()].0),
            show(&actual[expected.len()].1)
        )),
    }
}

/// Checks a quiescent index against the model: key_count, a get of every key, and full scans
/// both ways. Returns a description of the first difference.
pub(crate) fn compare_with_model(index: &dyn Index, model: &Model) -> Result<(), String> {
    let key_count = index.stats().key_count;
    if key_count != model.len() as u64 {
        return Err(format!(
            "stats().key_count is {key_count}, expected {}",
            model.len()
        ));
    }
    let mut out = Vec::new();
    for (key, value) in model {
        if !index.get(key, &mut out) {
            return Err(format!(
                "get({}) found nothing, expected {}",
                show(key),
                show(value)
            ));
        }
        if out != *value {
            return Err(format!(
                "get({}) gave {}, expected {}",
                show(key),
                show(&out),
                show(value)
            ));
        }
    }
    for order in [Order::Ascending, Order::Descending] {
        let scan = collect(index, Bound::Unbounded, Bound::Unbounded, order, None);
        let want = expected(model, Bound::Unbounded, Bound::Unbounded, order, None);
        if let Some(diff) = diff_records(&scan.records, &want) {
            return Err(format!("full {order:?} scan: {diff}"));
        }
    }
    Ok(())
}

/// Panics with `check`, the index name and `context` when [`compare_with_model`] fails.
pub(crate) fn assert_matches_model(check: &str, index: &dyn Index, model: &Model, context: &str) {
    if let Err(diff) = compare_with_model(index, model) {
        panic!("[{check}] index {}: {context}: {diff}", index.name());
    }
}

/// Expands to one `#[test]` per conformance check for an index type.
///
/// `$make` evaluates to a closure `Fn() -> I` with `I: forest_core::Index + 'static`; each test
/// calls it for a fresh index. Items of the calling module are in scope for `$make`. An optional
/// third argument `sizes = expr` replaces [`Sizes::for_build`], for example
/// [`Sizes::for_variant`] for an engine's second and later configurations.
#[macro_export]
macro_rules! conformance_tests {
    ($name:ident, $make:expr) => {
        $crate::conformance_tests!(
            $name,
            $make,
            sizes = $crate::conformance::Sizes::for_build()
        );
    };
    ($name:ident, $make:expr, sizes = $sizes:expr) => {
        // Each test runs the kit check of the same name, whose doc states its goal and method.
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            // `|| MyIndex::new()` is the documented form, so clippy's preference for a path
            // must not fail the caller's build.
            #[allow(clippy::redundant_closure)]
            fn shared() -> impl Fn() -> ::std::sync::Arc<dyn $crate::Index> {
                $crate::conformance::share($make)
            }

            fn sizes() -> $crate::conformance::Sizes {
                $sizes
            }

            #[test]
            fn model_small_keys() {
                $crate::conformance::model::model_small_keys(&shared(), &sizes());
            }

            #[test]
            fn model_many_keys() {
                $crate::conformance::model::model_many_keys(&shared(), &sizes());
            }

            #[test]
            fn edge_binary_keys() {
                $crate::conformance::edge::edge_binary_keys(&shared(), &sizes());
            }

            #[test]
            fn edge_size_limits() {
                $crate::conformance::edge::edge_size_limits(&shared(), &sizes());
            }

            #[test]
            fn edge_get_replaces_out() {
                $crate::conformance::edge::edge_get_replaces_out(&shared(), &sizes());
            }

            #[test]
            fn order_ascending() {
                $crate::conformance::order::order_ascending(&shared(), &sizes());
            }

            #[test]
            fn order_descending() {
                $crate::conformance::order::order_descending(&shared(), &sizes());
            }

            #[test]
            fn order_random() {
                $crate::conformance::order::order_random(&shared(), &sizes());
            }

            #[test]
            fn scan_bounds() {
                $crate::conformance::scan::scan_bounds(&shared(), &sizes());
            }

            #[test]
            fn scan_crossing_and_equal_bounds() {
                $crate::conformance::scan::scan_crossing_and_equal_bounds(&shared(), &sizes());
            }

            #[test]
            fn scan_early_stop() {
                $crate::conformance::scan::scan_early_stop(&shared(), &sizes());
            }

            #[test]
            fn scan_hinted() {
                $crate::conformance::scan::scan_hinted(&shared(), &sizes());
            }

            #[test]
            fn scan_pinned_bounds() {
                $crate::conformance::scan::scan_pinned_bounds(&shared(), &sizes());
            }

            #[test]
            fn scan_pinned_crossing_and_equal_bounds() {
                $crate::conformance::scan::scan_pinned_crossing_and_equal_bounds(
                    &shared(),
                    &sizes(),
                );
            }

            #[test]
            fn scan_pinned_early_stop() {
                $crate::conformance::scan::scan_pinned_early_stop(&shared(), &sizes());
            }

            #[test]
            fn scan_visitor_reenters() {
                $crate::conformance::scan::scan_visitor_reenters(&shared(), &sizes());
            }

            #[test]
            fn stress_disjoint_keys() {
                $crate::conformance::stress::stress_disjoint_keys(&shared(), &sizes());
            }

            #[test]
            fn stress_hot_keys() {
                $crate::conformance::stress::stress_hot_keys(&shared(), &sizes());
            }

            #[test]
            fn stress_scan_during_writes() {
                $crate::conformance::stress::stress_scan_during_writes(&shared(), &sizes());
            }

            #[test]
            fn stress_scan_pinned_during_writes() {
                $crate::conformance::stress::stress_scan_pinned_during_writes(&shared(), &sizes());
            }

            #[test]
            fn get_many_model() {
                $crate::conformance::many::get_many_model(&shared(), &sizes());
            }

            #[test]
            fn stress_get_many_during_writes() {
                $crate::conformance::stress::stress_get_many_during_writes(&shared(), &sizes());
            }
        }
    };
}
