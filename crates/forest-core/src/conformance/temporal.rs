//! The temporal model test (issue 18): for engines that implement [`TemporalIndex`].
//!
//! - [`temporal_model_on`]: one thread makes random upserts and removes over a small key pool
//!   (so keys get many versions and pages split by key and by time), remembering each write's
//!   timestamp in a `BTreeMap<key, BTreeMap<timestamp, Option<value>>>`; between writes it
//!   checks as-of gets, as-of scans (both orders, every bound kind) and histories (both
//!   orders, random time ranges) at random past times, chosen at, just before and just after
//!   recorded timestamps, against the model; at the end it checks every key at every
//!   recorded time and every key's whole history.
//! - [`temporal_threads`]: threads each write their own keys (interleaved with the others'
//!   so that they share pages) and check their own keys' histories and as-of gets, during
//!   and after the run.
//!
//! Use through [`crate::temporal_conformance_tests!`]. Failures name the seed
//! (`FOREST_KIT_SEED`).

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::conformance::{seed, show, show_bound, Sizes};
use crate::index::{in_bounds, Order};
use crate::temporal::{TemporalIndex, Timestamp};

/// Versions of each key: timestamp to value (None: tombstone).
pub type VersionModel = BTreeMap<Vec<u8>, BTreeMap<Timestamp, Option<Vec<u8>>>>;

/// How a check gets a fresh temporal index.
pub type MakeTemporal<'a> = &'a dyn Fn() -> Arc<dyn TemporalIndex>;

/// Keys of the single-thread model: few, so each gets many versions.
pub const MODEL_KEY_COUNT: usize = 96;

/// Operations of [`temporal_model`] for `sizes`: a twentieth of the stress ops.
pub fn model_op_count(sizes: &Sizes) -> usize {
    (sizes.stress_op_count / 20).max(1_000)
}

/// The key pool: shared prefixes and different lengths.
fn model_key(i: usize) -> Vec<u8> {
    match i % 3 {
        0 => format!("k{i:03}").into_bytes(),
        1 => format!("key/{i:05}/x").into_bytes(),
        _ => vec![b'z', (i % 251) as u8, 0, (i / 7) as u8],
    }
}

/// What the model says `key` was at `t`.
fn model_at<'m>(model: &'m VersionModel, key: &[u8], t: Timestamp) -> Option<&'m [u8]> {
    model
        .get(key)?
        .range(..=t)
        .next_back()
        .and_then(|(_, v)| v.as_deref())
}

/// A random time near a recorded one (or 0, or now).
fn random_time(rng: &mut SmallRng, stamps: &[Timestamp], index: &dyn TemporalIndex) -> Timestamp {
    if stamps.is_empty() || rng.random_ratio(1, 20) {
        return if rng.random() { 0 } else { index.now() };
    }
    let ts = stamps[rng.random_range(0..stamps.len())];
    match rng.random_range(0..3) {
        0 => ts.saturating_sub(1),
        1 => ts,
        _ => ts.saturating_add(1),
    }
}

fn random_bound<'k>(rng: &mut SmallRng, key: &'k [u8]) -> Bound<&'k [u8]> {
    match rng.random_range(0..3) {
        0 => Bound::Included(key),
        1 => Bound::Excluded(key),
        _ => Bound::Unbounded,
    }
}

/// Checks one as-of get.
fn check_get(index: &dyn TemporalIndex, model: &VersionModel, key: &[u8], t: Timestamp, seed: u64) {
    let mut out = Vec::new();
    let found = index
        .get_as_of(key, t, &mut out)
        .unwrap_or_else(|e| panic!("[temporal] get_as_of at {t}: {e} (seed {seed})"));
    let got = found.then_some(out.as_slice());
    let want = model_at(model, key, t);
    assert_eq!(
        got.map(show),
        want.map(show),
        "[temporal] get_as_of({}, {t}) (seed {seed})",
        show(key)
    );
}

/// Checks one as-of scan.
fn check_scan(
    index: &dyn TemporalIndex,
    model: &VersionModel,
    (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
    order: Order,
    t: Timestamp,
    seed: u64,
) {
    let mut got = Vec::new();
    index
        .scan_as_of(lower, upper, order, t, &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("[temporal] scan_as_of at {t}: {e} (seed {seed})"));
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
        .keys()
        .filter(|k| in_bounds(k, lower, upper))
        .filter_map(|k| model_at(model, k, t).map(|v| (k.clone(), v.to_vec())))
        .collect();
    if order == Order::Descending {
        want.reverse();
    }
    if got != want {
        let first = got
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "[temporal] scan_as_of({}, {}, {order:?}, {t}) gave {} records, expected {}; first \
             difference at #{first}: got {:?}, expected {:?} (seed {seed})",
            show_bound(lower),
            show_bound(upper),
            got.len(),
            want.len(),
            got.get(first).map(|(k, _)| show(k)),
            want.get(first).map(|(k, _)| show(k)),
        );
    }
}

/// Checks one history.
fn check_history(
    index: &dyn TemporalIndex,
    model: &VersionModel,
    key: &[u8],
    (from, to): (Timestamp, Timestamp),
    order: Order,
    seed: u64,
) {
    let mut got: Vec<(Timestamp, Option<Vec<u8>>)> = Vec::new();
    index
        .history(key, from, to, order, &mut |ts, v| {
            got.push((ts, v.map(<[u8]>::to_vec)));
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("[temporal] history from {from}: {e} (seed {seed})"));
    let mut want: Vec<(Timestamp, Option<Vec<u8>>)> = match model.get(key) {
        Some(versions) if from <= to => versions
            .range(from..=to)
            .map(|(ts, v)| (*ts, v.clone()))
            .collect(),
        _ => Vec::new(),
    };
    if order == Order::Descending {
        want.reverse();
    }
    assert_eq!(
        got,
        want,
        "[temporal] history({}, {from}..={to}, {order:?}) (seed {seed})",
        show(key)
    );
}

/// The single-thread model run on `index` (see the module doc), with `op_count` writes.
pub fn temporal_model_on(index: &dyn TemporalIndex, op_count: usize, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let keys: Vec<Vec<u8>> = (0..MODEL_KEY_COUNT).map(model_key).collect();
    let mut model = VersionModel::new();
    let mut stamps: Vec<Timestamp> = Vec::new();
    let mut last = 0;
    for op in 0..op_count {
        let key = &keys[rng.random_range(0..keys.len())];
        if rng.random_ratio(3, 4) {
            let value = format!("{op}:{}", rng.random::<u16>()).into_bytes();
            let ts = index
                .upsert_stamped(key, &value)
                .unwrap_or_else(|e| panic!("[temporal] upsert failed: {e} (seed {seed})"));
            assert!(
                ts > last,
                "[temporal] timestamp {ts} after {last} (seed {seed})"
            );
            last = ts;
            stamps.push(ts);
            model
                .entry(key.clone())
                .or_default()
                .insert(ts, Some(value));
        } else {
            let live = model_at(&model, key, Timestamp::MAX).is_some();
            match index.remove_stamped(key) {
                Some(ts) => {
                    assert!(
                        live,
                        "[temporal] removed absent {} (seed {seed})",
                        show(key)
                    );
                    assert!(
                        ts > last,
                        "[temporal] timestamp {ts} after {last} (seed {seed})"
                    );
                    last = ts;
                    stamps.push(ts);
                    model.entry(key.clone()).or_default().insert(ts, None);
                }
                None => assert!(
                    !live,
                    "[temporal] remove missed {} (seed {seed})",
                    show(key)
                ),
            }
        }
        // Reads at random past times.
        let probe = &keys[rng.random_range(0..keys.len())];
        let t = random_time(&mut rng, &stamps, index);
        check_get(index, &model, probe, t, seed);
        if op % 16 == 0 {
            let (a, b) = (
                &keys[rng.random_range(0..keys.len())],
                &keys[rng.random_range(0..keys.len())],
            );
            let bounds = (random_bound(&mut rng, a), random_bound(&mut rng, b));
            let order = if rng.random() {
                Order::Ascending
            } else {
                Order::Descending
            };
            let t = random_time(&mut rng, &stamps, index);
            check_scan(index, &model, bounds, order, t, seed);
            let (t1, t2) = (
                random_time(&mut rng, &stamps, index),
                random_time(&mut rng, &stamps, index),
            );
            check_history(index, &model, probe, (t1.min(t2), t1.max(t2)), order, seed);
        }
    }
    // Everything at the end: every key at a sample of recorded times, whole histories, and
    // full scans at a few times.
    let step = (stamps.len() / 200).max(1);
    for &ts in stamps.iter().step_by(step) {
        for t in [ts - 1, ts] {
            for key in &keys {
                check_get(index, &model, key, t, seed);
            }
        }
        for order in [Order::Ascending, Order::Descending] {
            check_scan(
                index,
                &model,
                (Bound::Unbounded, Bound::Unbounded),
                order,
                ts,
                seed,
            );
        }
    }
    for key in &keys {
        for order in [Order::Ascending, Order::Descending] {
            check_history(index, &model, key, (0, Timestamp::MAX), order, seed);
        }
    }
}

/// [`temporal_model_on`] on a fresh index, [`model_op_count`] writes.
pub fn temporal_model(make: MakeTemporal<'_>, sizes: &Sizes) {
    let index = make();
    temporal_model_on(&*index, model_op_count(sizes), seed());
}

/// Threads write their own keys and check their own histories (module doc).
pub fn temporal_threads(make: MakeTemporal<'_>, sizes: &Sizes) {
    const KEYS_PER_THREAD: usize = 24;
    let index = make();
    let seed = seed();
    let threads = sizes.thread_count;
    let per_thread = (sizes.stress_op_count / 10 / threads).max(500);
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let index = &*index;
            scope.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed ^ (thread as u64).wrapping_mul(0x9E37));
                // Interleaved with the other threads' keys, so that they share pages.
                let keys: Vec<Vec<u8>> = (0..KEYS_PER_THREAD)
                    .map(|i| format!("t{:04}/{thread:02}", i).into_bytes())
                    .collect();
                let mut model = VersionModel::new();
                let mut stamps = Vec::new();
                for op in 0..per_thread {
                    let key = &keys[rng.random_range(0..keys.len())];
                    if rng.random_ratio(4, 5) {
                        let value = format!("{thread}:{op}").into_bytes();
                        let ts = index.upsert_stamped(key, &value).unwrap_or_else(|e| {
                            panic!("[temporal threads] upsert failed: {e} (seed {seed})")
                        });
                        stamps.push(ts);
                        model
                            .entry(key.clone())
                            .or_default()
                            .insert(ts, Some(value));
                    } else if let Some(ts) = index.remove_stamped(key) {
                        stamps.push(ts);
                        model.entry(key.clone()).or_default().insert(ts, None);
                    }
                    if op % 8 == 0 {
                        let probe = &keys[rng.random_range(0..keys.len())];
                        let t = random_time(&mut rng, &stamps, index);
                        check_get(index, &model, probe, t, seed);
                        let order = if rng.random() {
                            Order::Ascending
                        } else {
                            Order::Descending
                        };
                        check_history(index, &model, probe, (0, Timestamp::MAX), order, seed);
                    }
                }
                for key in &keys {
                    check_history(
                        index,
                        &model,
                        key,
                        (0, Timestamp::MAX),
                        Order::Ascending,
                        seed,
                    );
                    for &ts in stamps.iter().step_by(7) {
                        check_get(index, &model, key, ts, seed);
                    }
                }
            });
        }
    });
}

/// Expands to the temporal checks for a [`TemporalIndex`] type: `temporal_model` and
/// `temporal_threads`, each a `#[test]`. `$make` is a closure `Fn() -> I`, `I:
/// TemporalIndex + 'static`; an optional `sizes = expr` as in [`crate::conformance_tests!`].
#[macro_export]
macro_rules! temporal_conformance_tests {
    ($name:ident, $make:expr) => {
        $crate::temporal_conformance_tests!(
            $name,
            $make,
            sizes = $crate::conformance::Sizes::for_build()
        );
    };
    ($name:ident, $make:expr, sizes = $sizes:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(clippy::redundant_closure)]
            fn shared() -> impl Fn() -> ::std::sync::Arc<dyn $crate::TemporalIndex> {
                let make = $make;
                move || ::std::sync::Arc::new(make()) as ::std::sync::Arc<dyn $crate::TemporalIndex>
            }

            #[test]
            fn temporal_model() {
                $crate::conformance::temporal::temporal_model(&shared(), &$sizes);
            }

            #[test]
            fn temporal_threads() {
                $crate::conformance::temporal::temporal_threads(&shared(), &$sizes);
            }
        }
    };
}
