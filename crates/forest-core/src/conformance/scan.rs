//! Scans against the model: every bound kind on each side, with bounds on keys, between keys,
//! at prefixes of keys and beyond both ends, in both orders; crossing and equal bounds; early
//! stop; length hints that change nothing; and a visitor that calls back into the index,
//! which must not deadlock because engines never run `visit` under a latch or an epoch pin
//! (DESIGN.md, "The Index API").

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use crate::conformance::{
    collect, collect_hinted, diff_records, expected, pinned, show, show_bound, BoundPair, Make,
    Model, Records, Sizes,
};
use crate::index::{in_bounds, Index, Order};

/// Keys of the scan fixture: enough for several leaves of small-node engines.
pub const FIXTURE_KEY_COUNT: usize = 600;

/// Fixture key `i`: `k`, an even big-endian u16, and on some keys a 0 byte or a suffix, so
/// keys differ in length and odd codes fall between keys.
pub fn fixture_key(i: usize) -> Vec<u8> {
    let mut key = vec![b'k'];
    key.extend(((i * 2 + 2) as u16).to_be_bytes());
    if i % 3 == 1 {
        key.push(0);
    }
    if i % 5 == 2 {
        key.extend(b"suffix!");
    }
    key
}

fn fixture_value(i: usize) -> Vec<u8> {
    let mut value = format!("value of {i}").into_bytes();
    value.truncate(i % 14);
    value
}

/// Probe keys for bounds: on keys (first, second, middle, last two), between keys, at keys'
/// prefixes and extensions, and beyond both ends.
fn probes() -> Vec<Vec<u8>> {
    let last = FIXTURE_KEY_COUNT - 1;
    let mut probes: BTreeSet<Vec<u8>> = BTreeSet::new();
    for i in [0, 1, 7, FIXTURE_KEY_COUNT / 2, last - 1, last] {
        let key = fixture_key(i);
        probes.insert(key.clone());
        probes.insert([key.as_slice(), b"\0"].concat()); // just after the key
        probes.insert(key[..3].to_vec()); // a prefix of it, or the key itself
        let mut between = key[..3].to_vec();
        between[2] += 1; // an odd code: between this key and the next
        probes.insert(between);
    }
    for probe in [
        &b""[..],
        b"\0",
        b"k",
        b"k\0",
        b"l",
        b"\xff",
        b"\xff\xff\xff",
    ] {
        probes.insert(probe.to_vec());
    }
    probes.into_iter().collect()
}

fn fixture(make: Make<'_>, check: &str) -> (Arc<dyn Index>, Model) {
    let index = make();
    let mut model = Model::new();
    // Interleave the ends so neither ascending nor descending insertion is the only shape.
    for step in 0..FIXTURE_KEY_COUNT {
        let i = if step % 2 == 0 {
            step / 2
        } else {
            FIXTURE_KEY_COUNT - 1 - step / 2
        };
        let (key, value) = (fixture_key(i), fixture_value(i));
        let got = index.insert(&key, &value);
        assert!(
            matches!(got, Ok(true)),
            "[{check}] index {}: insert({}) while building the scan fixture returned {got:?}",
            index.name(),
            show(&key)
        );
        model.insert(key, value);
    }
    (index, model)
}

fn bounds_of(probe: &[u8]) -> [Bound<&[u8]>; 2] {
    [Bound::Included(probe), Bound::Excluded(probe)]
}

fn check_scan(
    check: &str,
    index: &dyn Index,
    model: &Model,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
) {
    let scan = collect(index, lower, upper, order, None);
    let want = expected(model, lower, upper, order, None);
    if let Some(diff) = diff_records(&scan.records, &want) {
        panic!(
            "[{check}] index {}: scan({}, {}, {order:?}): {diff}",
            index.name(),
            show_bound(lower),
            show_bound(upper)
        );
    }
}

/// Every combination of bound kinds and probe keys on both sides, both orders.
pub fn scan_bounds(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "scan_bounds";
    let (index, model) = fixture(make, CHECK);
    let probes = probes();
    let mut sides: Vec<Bound<&[u8]>> = vec![Bound::Unbounded];
    for probe in &probes {
        sides.extend(bounds_of(probe));
    }
    // Pairs (i, j) with i + j a multiple of the stride: each lower meets every stride-th
    // upper and each upper every stride-th lower, whatever the count of sides (stepping
    // through the flattened pairs skipped whole uppers when the stride divided the count).
    let stride = sizes.scan_pair_stride.max(1);
    let pairs = sides.iter().enumerate().flat_map(|(i, &lower)| {
        sides
            .iter()
            .enumerate()
            .filter(move |(j, _)| (i + j) % stride == 0)
            .map(move |(_, &upper)| (lower, upper))
    });
    for (lower, upper) in pairs {
        for order in [Order::Ascending, Order::Descending] {
            check_scan(CHECK, &*index, &model, lower, upper, order);
        }
    }
}

/// Crossing bounds give nothing; equal bounds give the key only when both include it.
pub fn scan_crossing_and_equal_bounds(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "scan_crossing_and_equal_bounds";
    let (index, model) = fixture(make, CHECK);
    let index = &*index;
    let probes = probes();
    for (position, high) in probes.iter().enumerate() {
        for low in &probes[..position] {
            for upper in bounds_of(low) {
                for lower in bounds_of(high) {
                    for order in [Order::Ascending, Order::Descending] {
                        let scan = collect(index, lower, upper, order, None);
                        assert!(
                            scan.records.is_empty(),
                            "[{CHECK}] index {}: crossing scan({}, {}, {order:?}) returned {} records, the first {}, expected none",
                            index.name(),
                            show_bound(lower),
                            show_bound(upper),
                            scan.records.len(),
                            show(&scan.records[0].0)
                        );
                    }
                }
            }
        }
        // Equal bounds: the model says one record or none.
        for lower in bounds_of(high) {
            for upper in bounds_of(high) {
                for order in [Order::Ascending, Order::Descending] {
                    check_scan(CHECK, index, &model, lower, upper, order);
                }
            }
        }
    }
    for (position, key) in model.keys().enumerate().step_by(37) {
        let want = vec![(key.clone(), model[key].clone())];
        for order in [Order::Ascending, Order::Descending] {
            let scan = collect(
                index,
                Bound::Included(key),
                Bound::Included(key),
                order,
                None,
            );
            if let Some(diff) = diff_records(&scan.records, &want) {
                panic!(
                    "[{CHECK}] index {}: scan of the single key #{position} {} with Included bounds, {order:?}: {diff}",
                    index.name(),
                    show(key)
                );
            }
        }
    }
}

/// The early-stop checks' ranges (everything; an inner range; from between two keys to the
/// last key), each in both orders with the model's records for it: `check` runs per pair.
fn for_each_stop_range(
    model: &Model,
    mut check: impl FnMut(Bound<&[u8]>, Bound<&[u8]>, Order, &Records),
) {
    let (k10, k500, between) = (fixture_key(10), fixture_key(500), b"k\x00\x05".to_vec());
    let last = fixture_key(FIXTURE_KEY_COUNT - 1);
    let ranges: [BoundPair<'_>; 3] = [
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(&k10), Bound::Excluded(&k500)),
        (Bound::Excluded(&between), Bound::Included(&last)),
    ];
    for (lower, upper) in ranges {
        for order in [Order::Ascending, Order::Descending] {
            let all = expected(model, lower, upper, order, None);
            check(lower, upper, order, &all);
        }
    }
}

/// One early-stop case, through `scan` or (with `hint`) `scan_hinted`, in both visitor
/// styles: style 1 keeps `stop` records and breaks on the next call (never called again);
/// style 2 breaks on the record that makes `stop` (what YCSB's scans do) and is called
/// exactly `stop` times, or once per record when the range is shorter.
#[allow(clippy::too_many_arguments)]
fn check_stop(
    check: &str,
    index: &dyn Index,
    (lower, upper): BoundPair<'_>,
    order: Order,
    hint: Option<usize>,
    stop: Option<usize>,
    all: &Records,
    what: &str,
) {
    let name = index.name();
    let total = all.len();
    let want: Records = all
        .iter()
        .take(stop.unwrap_or(usize::MAX))
        .cloned()
        .collect();
    let scan = collect_hinted(index, lower, upper, order, stop, hint);
    if let Some(diff) = diff_records(&scan.records, &want) {
        panic!("[{check}] index {name}: {what}: {diff}");
    }
    assert_eq!(
        scan.calls_after_break, 0,
        "[{check}] index {name}: {what}: visit was called {} times after it returned Break",
        scan.calls_after_break
    );
    let Some(stop) = stop.filter(|&s| s > 0) else {
        return;
    };
    let mut seen = Vec::new();
    let mut calls = 0usize;
    let mut visit = |k: &[u8], v: &[u8]| {
        calls += 1;
        seen.push((k.to_vec(), v.to_vec()));
        if seen.len() >= stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    match hint {
        Some(hint) => index.scan_hinted(lower, upper, order, hint, &mut visit),
        None => index.scan(lower, upper, order, &mut visit),
    }
    if let Some(diff) = diff_records(&seen, &want) {
        panic!("[{check}] index {name}: {what} (breaking on the last): {diff}");
    }
    assert_eq!(
        calls,
        stop.min(total),
        "[{check}] index {name}: {what} (breaking on the last): visit called {calls} times"
    );
}

/// Visitors that stop after 0, 1, k records: the scan stops at once with the right prefix.
pub fn scan_early_stop(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "scan_early_stop";
    let (index, model) = fixture(make, CHECK);
    let index = &*index;
    for_each_stop_range(&model, |lower, upper, order, all| {
        let total = all.len();
        let limits = [
            0,
            1,
            2,
            3,
            10,
            63,
            64,
            65,
            127,
            128,
            129,
            total - 1,
            total,
            total + 1,
        ];
        for limit in limits {
            let what = format!(
                "scan({}, {}, {order:?}) stopping after {limit} of {total} records",
                show_bound(lower),
                show_bound(upper)
            );
            check_stop(
                CHECK,
                index,
                (lower, upper),
                order,
                None,
                Some(limit),
                all,
                &what,
            );
        }
    });
}

/// [`Index::scan_hinted`] hands out exactly what [`Index::scan`] does, whatever its hint: for
/// three ranges, both orders, hints of 0, 1, a few, around common batch sizes, the range's
/// length and past it, visitors that stop before, at, just past and far past the hint or
/// never, breaking on the next call after the last record kept (style 1 of
/// [`scan_early_stop`]) or on that record itself (style 2, what YCSB's scans do).
pub fn scan_hinted(make: Make<'_>, _sizes: &Sizes) {
    const CHECK: &str = "scan_hinted";
    let (index, model) = fixture(make, CHECK);
    let index = &*index;
    for_each_stop_range(&model, |lower, upper, order, all| {
        let total = all.len();
        let hints = [
            0,
            1,
            2,
            7,
            31,
            32,
            33,
            100,
            total - 1,
            total,
            total + 1,
            usize::MAX,
        ];
        for hint in hints {
            let stops = [
                Some(1),
                Some(hint.saturating_sub(1)),
                Some(hint),
                Some(hint.saturating_add(1)),
                Some(hint.saturating_mul(2).saturating_add(3)),
                None,
            ];
            for stop in stops {
                let what = format!(
                    "scan_hinted({}, {}, {order:?}, hint {hint}) stopping after {stop:?} of {total} records",
                    show_bound(lower),
                    show_bound(upper)
                );
                check_stop(
                    CHECK,
                    index,
                    (lower, upper),
                    order,
                    Some(hint),
                    stop,
                    all,
                    &what,
                );
            }
        }
    });
}

/// [`scan_bounds`] through [`Index::scan_pinned`].
pub fn scan_pinned_bounds(make: Make<'_>, sizes: &Sizes) {
    scan_bounds(&pinned(make), sizes);
}

/// [`scan_crossing_and_equal_bounds`] through [`Index::scan_pinned`].
pub fn scan_pinned_crossing_and_equal_bounds(make: Make<'_>, sizes: &Sizes) {
    scan_crossing_and_equal_bounds(&pinned(make), sizes);
}

/// [`scan_early_stop`] through [`Index::scan_pinned`].
pub fn scan_pinned_early_stop(make: Make<'_>, sizes: &Sizes) {
    scan_early_stop(&pinned(make), sizes);
}

/// The body of [`scan_visitor_reenters`], run on a watched thread.
fn reenter(index: &dyn Index, model: &Model, progress: &AtomicU64) {
    const CHECK: &str = "scan_visitor_reenters";
    let name = index.name();
    let lower_key = fixture_key(100);
    let upper_key = fixture_key(500);
    for (lower, upper) in [
        (Bound::Unbounded, Bound::Unbounded),
        (
            Bound::Included(lower_key.as_slice()),
            Bound::Excluded(upper_key.as_slice()),
        ),
    ] {
        for order in [Order::Ascending, Order::Descending] {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let mut out = Vec::new();
            let mut failure: Option<String> = None;
            index.scan(lower, upper, order, &mut |key, value| {
                progress.fetch_add(1, Ordering::Relaxed);
                let position = seen.len();
                seen.push(key.to_vec());
                // Read back the record being visited (fixture records never change).
                if model.contains_key(key) && (!index.get(key, &mut out) || out != value) {
                    failure = Some(format!(
                        "get({}) inside visit did not return the visited value {}",
                        show(key),
                        show(value)
                    ));
                    return ControlFlow::Break(());
                }
                // A scan that never ends (re-visiting what it wrote) fails here, not by timeout.
                if position > 4 * FIXTURE_KEY_COUNT {
                    failure = Some(format!("visited {position} records: the scan does not end"));
                    return ControlFlow::Break(());
                }
                // Write behind the cursor, where the scan has been: 'a' keys sort before every
                // fixture key, 'z' keys after.
                let behind = if order == Order::Ascending { 'a' } else { 'z' };
                let other = format!("{behind}{position:05}").into_bytes();
                if let Err(e) = index.upsert(&other, value) {
                    failure = Some(format!("upsert({}) inside visit failed: {e}", show(&other)));
                    return ControlFlow::Break(());
                }
                // Write ahead of and behind the cursor, inside the range: an odd code.
                let mut between = key[..3].to_vec();
                between[2] = between[2].wrapping_add(1);
                if let Err(e) = index.upsert(&between, b"between") {
                    failure = Some(format!(
                        "upsert({}) inside visit failed: {e}",
                        show(&between)
                    ));
                    return ControlFlow::Break(());
                }
                let _ = index.remove(&between);
                ControlFlow::Continue(())
            });
            if let Some(failure) = failure {
                panic!("[{CHECK}] index {name}: scan({order:?}): {failure}");
            }
            // Fixture keys were never changed: each one in range appears, in order, once.
            let fixture_seen: Vec<&Vec<u8>> =
                seen.iter().filter(|k| model.contains_key(*k)).collect();
            let mut want: Vec<&Vec<u8>> = model
                .keys()
                .filter(|k| in_bounds(k, lower, upper))
                .collect();
            if order == Order::Descending {
                want.reverse();
            }
            assert!(
                fixture_seen == want,
                "[{CHECK}] index {name}: scan({}, {}, {order:?}) with a writing visitor returned {} of the {} unchanged keys, or out of order",
                show_bound(lower),
                show_bound(upper),
                fixture_seen.len(),
                want.len()
            );
            for pair in seen.windows(2) {
                let ordered = match order {
                    Order::Ascending => pair[0] < pair[1],
                    Order::Descending => pair[0] > pair[1],
                };
                assert!(
                    ordered,
                    "[{CHECK}] index {name}: scan({order:?}) with a writing visitor returned {} then {}",
                    show(&pair[0]),
                    show(&pair[1])
                );
            }
        }
    }
}

/// A visitor that calls get, upsert and remove on the same index must not deadlock; the scan
/// runs on its own thread and fails after [`Sizes::reentry_timeout`].
pub fn scan_visitor_reenters(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "scan_visitor_reenters";
    let (index, model) = fixture(make, CHECK);
    let name = index.name();
    let (done_tx, done_rx) = mpsc::channel();
    // Records visited so far: the watchdog fires only after a whole timeout without one, so
    // a slow machine (or an index paging on a tiny budget) is never taken for a deadlock.
    let progress = Arc::new(AtomicU64::new(0));
    let worker = {
        let index = index.clone();
        let progress = Arc::clone(&progress);
        std::thread::Builder::new()
            .name("kit-reenter".into())
            .spawn(move || {
                reenter(&*index, &model, &progress);
                let _ = done_tx.send(());
            })
            .unwrap_or_else(|e| panic!("[{CHECK}] cannot spawn the scan thread: {e}"))
    };
    let mut seen = 0;
    let outcome = loop {
        match done_rx.recv_timeout(sizes.reentry_timeout) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = progress.load(Ordering::Relaxed);
                if now == seen {
                    break Err(mpsc::RecvTimeoutError::Timeout);
                }
                seen = now;
            }
            other => break other,
        }
    };
    match outcome {
        Ok(()) => {
            if let Err(payload) = worker.join() {
                std::panic::resume_unwind(payload);
            }
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => panic!("[{CHECK}] index {name}: the scan thread ended without reporting"),
        },
        // The stuck thread is left behind; the test process ends with the failure.
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "[{CHECK}] index {name}: a scan whose visitor calls get/upsert/remove on the same index visited nothing for {:?}: deadlock? (visit must not run under a latch or an epoch pin)",
            sizes.reentry_timeout
        ),
    }
}
