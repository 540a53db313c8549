//! Review rev-range (session 19) of `Store::scan_in_place_up_to`: the in-place read racing
//! atomic batches where it switches to the ordinary scan mid-read (values past
//! `SCAN_IN_PLACE_BYTES_MAX`), a sink that stops early, and every store engine.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use forest_core::Order;
use forest_store::file::SimDir;
use forest_store::store::SCAN_IN_PLACE_BYTES_MAX;
use forest_store::{engine_names, Durability, ScanSink, Store, StoreOptions, WriteBatch};

fn store(engine: Option<&str>) -> Arc<Store> {
    let options = StoreOptions {
        engine: engine.map(str::to_string),
        durability: Durability::Periodic { interval_ms: 20 },
        shards: 2,
        ..StoreOptions::default()
    };
    Arc::new(Store::open(SimDir::new(11), options).expect("open"))
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Keeps (key, value) rows; stops after `stop_after` rows (usize::MAX: never); counts restarts.
struct Kept {
    rows: Vec<(Vec<u8>, Vec<u8>)>,
    stop_after: usize,
    restarts: u64,
}

impl ScanSink for Kept {
    fn record(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        self.rows.push((key.to_vec(), value.to_vec()));
        if self.rows.len() >= self.stop_after {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn restart(&mut self) {
        self.rows.clear();
        self.restarts += 1;
    }
}

/// `keys` keys of `value_len` bytes each, every batch setting all of them to one round byte;
/// scanners in both orders read `limit` in place (the sink stopping after `stop_after`) and
/// check: one round, each key once and in order, the expected count, full-length values.
/// Returns (batches written, scans, restarts).
fn race(
    engine: Option<&str>,
    keys: usize,
    value_len: usize,
    limit: usize,
    stop_after: usize,
    time: Duration,
) -> (u64, u64, u64) {
    let store = store(engine);
    let write_round = move |store: &Store, round: u8| {
        let mut batch = WriteBatch::new();
        for i in 0..keys {
            batch.put(&key(i), &vec![round; value_len]);
        }
        store.write(&batch).expect("write");
    };
    write_round(&store, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let restarts = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                write_round(&store, (round % 251) as u8);
            }
            round
        })
    };
    let scanners: Vec<_> = [Order::Ascending, Order::Descending]
        .into_iter()
        .map(|order| {
            let (store, stop, restarts) =
                (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&restarts));
            let engine = format!("{engine:?}");
            thread::spawn(move || {
                let mut scans = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut sink = Kept {
                        rows: Vec::new(),
                        stop_after,
                        restarts: 0,
                    };
                    let (lower, upper) = (Bound::Included(&b"k"[..]), Bound::Excluded(&b"l"[..]));
                    store.scan_in_place_up_to(lower, upper, order, limit, false, &mut sink);
                    restarts.fetch_add(sink.restarts, Ordering::Relaxed);
                    let want = limit.min(keys).min(stop_after);
                    assert_eq!(sink.rows.len(), want, "{engine} {order:?}: rows");
                    let mut expect: Vec<usize> = (0..keys).collect();
                    if order == Order::Descending {
                        expect.reverse();
                    }
                    for ((k, v), i) in sink.rows.iter().zip(expect) {
                        assert_eq!(k, &key(i), "{engine} {order:?}: a key duplicated or missed");
                        assert_eq!(v.len(), value_len, "{engine}: a value's length");
                        assert!(
                            v.iter().all(|&b| b == sink.rows[0].1[0]),
                            "{engine} {order:?}: rows of two batches in one read"
                        );
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    thread::sleep(time);
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().expect("writer");
    let scans = scanners
        .into_iter()
        .map(|t| t.join().expect("scanner"))
        .sum();
    (rounds, scans, restarts.load(Ordering::Relaxed))
}

// Goal: a read in place that passes `SCAN_IN_PLACE_BYTES_MAX` while batches keep coming is
// restarted and read the ordinary way with nothing duplicated, missed or mixed. Method: 200
// keys of 8 KiB (1.6 MB a read, so every in-place read stops at 1 MiB), batches setting all
// of them to one round byte, scanners in both orders with limit 200.
#[test]
fn in_place_switch_to_ordinary_scan_under_batches() {
    const { assert!(200 * 8192 > SCAN_IN_PLACE_BYTES_MAX) };
    let (rounds, scans, restarts) = race(
        None,
        200,
        8192,
        200,
        usize::MAX,
        Duration::from_millis(1500),
    );
    assert!(rounds > 1 && scans > 1, "{rounds} rounds {scans} scans");
    // Each read restarted at least once (the switch).
    assert!(restarts >= scans, "{restarts} restarts {scans} scans");
}

// Goal: a sink that stops early (as ZRANGE's `take`) is restarted and reads again when a
// batch applied meanwhile: its rows are of one batch, as many as it asked. Method: 300 keys,
// limit 300 but the sink stops at 40; racing batches.
#[test]
fn in_place_sink_that_stops_early_under_batches() {
    let (rounds, scans, _) = race(None, 300, 8, 300, 40, Duration::from_millis(1000));
    assert!(rounds > 1 && scans > 1, "{rounds} rounds {scans} scans");
}

// Goal: every store engine's pinned read (or its fallback) keeps batches whole in place.
// Method: as above per engine, 100 keys of 16 bytes, limit 100, and a limit past the range.
#[test]
fn in_place_reads_keep_batches_whole_on_every_engine() {
    for engine in engine_names() {
        for limit in [100, 700] {
            let started = Instant::now();
            let (rounds, scans, _) = race(
                Some(engine),
                100,
                16,
                limit,
                usize::MAX,
                Duration::from_millis(500),
            );
            assert!(
                rounds > 1 && scans > 1,
                "{engine} limit {limit}: {rounds} rounds {scans} scans in {:?}",
                started.elapsed()
            );
        }
    }
}
