//! A store over the temporal engine `tsbtree` (store/temporal.rs; issue 18): versions at
//! timestamps through the logs, reopen and SIGKILL, WAL redo, and the errors of other engines.
//!
//! The model test runs random writes, deletes and batches, and as-of gets, scans (both
//! orders, random bounds, a limit with continuation) and histories at random past times
//! against `BTreeMap<key, BTreeMap<ts, Option<value>>>`; among them the store is closed and
//! reopened, and a child process writing to it is killed (the harness of `crash_kill.rs`):
//! after recovery every acknowledged version is in its key's history at its timestamp, the
//! write in flight at most is added, and every as-of answer checked before is checked again.
//! A retention threshold rises among the rounds (`Store::set_retention`): reads at or above
//! it answer as the model, reads below it (and histories starting below it) are refused
//! naming it, across reopens and SIGKILL too. Every round checkpoints (temporal checkpoints,
//! `checkpoint.rs` format version 3), so reopens load a checkpoint and the first logs are
//! deleted; the open after the SIGKILL writes one.
//! `FOREST_TEMPORAL_OPS` sets the operations per round (default small, for CI).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use forest_core::{Error, Order};
use forest_store::{replay, wal, Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::crash_kill::open_retrying_lock;

/// Small pages, so key and time splits start early.
pub(crate) const ENGINE: &str = "tsbtree:page=6,index_page=6,consolidate=2";
const CHILD_ENV: &str = "FOREST_TEMPORAL_CHILD";
const OPS_ENV: &str = "FOREST_TEMPORAL_OPS";
const OPS_DEFAULT: usize = 150;
pub(crate) const KEY_COUNT: u32 = 12;

pub(crate) type Model = BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>>;

pub(crate) fn options(engine: &str) -> StoreOptions {
    sharded(engine, 1)
}

/// [`options`] with `shards` shard logs.
pub(crate) fn sharded(engine: &str, shards: usize) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        durability: Durability::Group,
        shards,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

pub(crate) fn key(i: u32) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

pub(crate) fn value_at(model: &Model, key: &[u8], t: u64) -> Option<Vec<u8>> {
    model
        .get(key)?
        .range(..=t)
        .next_back()
        .and_then(|(_, v)| v.clone())
}

fn in_bounds(k: &[u8], lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    let above = match lower {
        Bound::Included(l) => k >= l,
        Bound::Excluded(l) => k > l,
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(u) => k <= u,
        Bound::Excluded(u) => k < u,
        Bound::Unbounded => true,
    };
    above && below
}

fn random_bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    match rng.random_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng.random_range(0..KEY_COUNT))),
        _ => Bound::Excluded(key(rng.random_range(0..KEY_COUNT))),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A past time worth asking about: a version's timestamp, one before or after it, or 0.
fn random_time(rng: &mut StdRng, stamps: &[u64], now: u64) -> u64 {
    if stamps.is_empty() || rng.random_range(0..10) == 0 {
        return if rng.random() { 0 } else { now };
    }
    let ts = stamps[rng.random_range(0..stamps.len())];
    match rng.random_range(0..3) {
        0 => ts - 1,
        1 => ts,
        _ => (ts + 1).min(now),
    }
}

/// Checks one as-of get, scan (with continuation) and history at random past times.
pub(crate) fn check_reads(
    store: &Store,
    model: &Model,
    stamps: &[u64],
    rng: &mut StdRng,
    what: &str,
) {
    let now = store.now().expect("temporal store call");
    let threshold = store.retention().expect("temporal store call");
    let t = random_time(rng, stamps, now);
    let k = key(rng.random_range(0..KEY_COUNT));
    let mut out = Vec::new();
    if t < threshold {
        check_refused(store, &k, t, threshold, what);
        return;
    }
    let found = store
        .get_as_of(&k, t, &mut out)
        .expect("temporal store call");
    assert_eq!(
        found.then_some(out),
        value_at(model, &k, t),
        "{what}: get {k:?} as of {t}"
    );

    let (lower, upper) = (random_bound(rng), random_bound(rng));
    let order = if rng.random() {
        Order::Ascending
    } else {
        Order::Descending
    };
    let limit = rng.random_range(1..5);
    let mut got = Vec::new();
    let (mut lo, mut hi) = (lower.clone(), upper.clone());
    loop {
        let next = store
            .scan_as_of(as_ref(&lo), as_ref(&hi), order, t, limit, &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()));
                ControlFlow::Continue(())
            })
            .expect("temporal store call");
        match (next, order) {
            (None, _) => break,
            (Some(last), Order::Ascending) => lo = Bound::Excluded(last),
            (Some(last), Order::Descending) => hi = Bound::Excluded(last),
        }
    }
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
        .keys()
        .filter(|k| in_bounds(k, as_ref(&lower), as_ref(&upper)))
        .filter_map(|k| value_at(model, k, t).map(|v| (k.clone(), v)))
        .collect();
    if order == Order::Descending {
        want.reverse();
    }
    assert_eq!(
        got, want,
        "{what}: scan {lower:?}..{upper:?} {order:?} as of {t}"
    );

    let from = random_time(rng, stamps, now);
    let to = random_time(rng, stamps, now).max(from);
    let limit = rng.random_range(1..8);
    if from < threshold {
        check_refused(store, &k, from, threshold, what);
        return;
    }
    let got = store
        .history(&k, from, to, order, limit)
        .expect("temporal store call");
    let mut want: Vec<(u64, Option<Vec<u8>>)> = model
        .get(&k)
        .map(|h| h.range(from..=to).map(|(t, v)| (*t, v.clone())).collect())
        .unwrap_or_default();
    if order == Order::Descending {
        want.reverse();
    }
    want.truncate(limit);
    assert_eq!(got, want, "{what}: history {k:?} {from}..={to} {order:?}");
}

/// Reads as of `t`, below the threshold, are refused naming it: get, scan, history.
fn check_refused(store: &Store, k: &[u8], t: u64, threshold: u64, what: &str) {
    let named = |e: Error| {
        let text = e.to_string();
        assert!(
            text.contains(&format!("history before {threshold} is discarded")),
            "{what}: {text}"
        );
    };
    named(
        store
            .get_as_of(k, t, &mut Vec::new())
            .expect_err("a get below the threshold"),
    );
    named(
        store
            .scan_as_of(
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                t,
                3,
                &mut |_, _| ControlFlow::Continue(()),
            )
            .expect_err("a scan below the threshold"),
    );
    named(
        store
            .history(k, t, u64::MAX, Order::Ascending, 3)
            .expect_err("a history from below the threshold"),
    );
}

/// Every key's whole retained history (from the threshold on) equals the model's.
pub(crate) fn check_all_history(store: &Store, model: &Model, what: &str) {
    let threshold = store.retention().expect("temporal store call");
    for i in 0..KEY_COUNT {
        let k = key(i);
        let got = store
            .history(&k, threshold, u64::MAX, Order::Ascending, usize::MAX)
            .expect("temporal store call");
        let want: Vec<(u64, Option<Vec<u8>>)> = model
            .get(&k)
            .map(|h| h.range(threshold..).map(|(t, v)| (*t, v.clone())).collect())
            .unwrap_or_default();
        assert_eq!(got, want, "{what}: whole history of {k:?}");
    }
}

/// Raises the threshold to a recent version's time, checking the refusals of a future
/// threshold and of a lower one, and that setting it again changes nothing.
pub(crate) fn raise_threshold(store: &Store, stamps: &[u64], rng: &mut StdRng, what: &str) {
    let now = store.now().expect("temporal store call");
    let old = store.retention().expect("temporal store call");
    let err = store
        .set_retention(now + 3_600_000_000)
        .expect_err("a threshold an hour ahead");
    assert!(err.to_string().contains("in the future"), "{what}: {err}");
    let mut recent: Vec<u64> = stamps.iter().copied().filter(|&t| t > old).collect();
    recent.sort_unstable();
    let Some(&t) = recent.get(rng.random_range(0..recent.len().max(1)) / 2) else {
        return;
    };
    assert_eq!(store.set_retention(t).expect("a past threshold"), t);
    assert_eq!(store.set_retention(t).expect("the same threshold"), t);
    if t > 1 {
        let err = store.set_retention(t - 1).expect_err("a lower threshold");
        assert!(err.to_string().contains("only grows"), "{what}: {err}");
    }
    assert_eq!(store.retention().expect("temporal store call"), t);
}

/// One random write; records its versions in the model.
pub(crate) fn random_write(
    store: &Store,
    model: &mut Model,
    stamps: &mut Vec<u64>,
    rng: &mut StdRng,
) {
    let k = key(rng.random_range(0..KEY_COUNT));
    let v = rng.random::<u32>().to_le_bytes().to_vec();
    let present = value_at(model, &k, u64::MAX).is_some();
    let mut record = |k: &[u8], ts: u64, v: Option<Vec<u8>>| {
        model.entry(k.to_vec()).or_default().insert(ts, v);
    };
    match rng.random_range(0..6) {
        0..=2 => {
            let ts = store.put_ts(&k, &v).expect("temporal store call");
            record(&k, ts, Some(v));
            stamps.push(ts);
        }
        3 => {
            let ts = store.remove_ts(&k).expect("temporal store call");
            assert_eq!(ts.is_some(), present, "remove of {k:?}");
            if let Some(ts) = ts {
                record(&k, ts, None);
                stamps.push(ts);
            }
        }
        4 => {
            // A batch: one timestamp; the key written twice makes one version (the last).
            let k2 = key(rng.random_range(0..KEY_COUNT));
            let mut batch = WriteBatch::new();
            batch.put(&k, b"first").put(&k2, &v).put(&k, &v);
            let (changed, ts) = store.write_ts(&batch).expect("temporal store call");
            assert_eq!(changed, vec![true; 3]);
            let ts = ts.expect("the batch changed keys");
            record(&k, ts, Some(v.clone()));
            record(&k2, ts, Some(v));
            stamps.push(ts);
        }
        _ => {
            // The plain API writes versions too.
            store.upsert(&k, &v).expect("temporal store call");
            let threshold = store.retention().expect("temporal store call");
            let mut hist = store
                .history(&k, threshold, u64::MAX, Order::Descending, 1)
                .expect("temporal store call");
            let (ts, got) = hist.pop().expect("a version");
            assert_eq!(got.as_deref(), Some(&v[..]));
            record(&k, ts, Some(v));
            stamps.push(ts);
        }
    }
}

/// Child mode (spec `dir,seed,shards,threads`): `threads` threads write single upserts and
/// removes of their own keys (key `i` belongs to thread `i % threads`) until killed, printing
/// `ack <key-hex> <value-hex|-> <ts>` after each acknowledged write.
fn run_child(spec: &str) -> ! {
    let words: Vec<&str> = spec.rsplitn(4, ',').collect();
    let [threads, shards, seed, dir] = words[..] else {
        panic!("spec {spec}: dir,seed,shards,threads")
    };
    let (threads, shards): (u32, usize) = (
        threads.parse().expect("threads"),
        shards.parse().expect("shards"),
    );
    let seed: u64 = seed.parse().expect("seed");
    let store = open_retrying_lock(Path::new(dir), &sharded(ENGINE, shards));
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = &store;
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ u64::from(t));
                let mine: Vec<u32> = (0..KEY_COUNT).filter(|i| i % threads == t).collect();
                loop {
                    let k = key(mine[rng.random_range(0..mine.len())]);
                    let line = if rng.random_range(0..4) == 0 {
                        match store.remove_ts(&k).expect("child remove") {
                            Some(ts) => format!("ack {} - {ts}", hex(&k)),
                            None => continue,
                        }
                    } else {
                        let v = rng.random::<u32>().to_le_bytes();
                        let ts = store.put_ts(&k, &v).expect("child put");
                        format!("ack {} {} {ts}", hex(&k), hex(&v))
                    };
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{line}").expect("stdout");
                    out.flush().expect("flush");
                }
            });
        }
    });
    unreachable!("the writers run until killed")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Runs a child writer (test `test`, `shards` logs, `threads` writers) on `dir`, kills it
/// after `acks` acknowledged writes, and returns them as (key, value, ts).
fn kill_child(
    test: &str,
    dir: &Path,
    seed: u64,
    (shards, threads): (usize, u32),
    acks: usize,
) -> Vec<(Vec<u8>, Option<Vec<u8>>, u64)> {
    let (_, module) = module_path!().split_once("::").expect("a module");
    let path = format!("{module}::{test}");
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", path.as_str(), "--nocapture", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!("{},{seed},{shards},{threads}", dir.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("ack ") {
                if tx.send(line[at..].to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let mut lines = Vec::new();
    while lines.len() < acks {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child stopped acking after {} acks: {e}", lines.len());
            }
        }
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    reader.join().expect("reader");
    lines.extend(rx.try_iter());
    lines
        .iter()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let value = (words[2] != "-").then(|| unhex(words[2]));
            (unhex(words[1]), value, words[3].parse().expect("ts"))
        })
        .collect()
}

// Goal: a temporal store answers as-of gets, scans and histories like the model of every
// version, and keeps every acknowledged version at its timestamp through clean reopens and
// SIGKILL, so answers given before a crash are the same after it. Method: rounds of random
// writes and reads; after each round a close and reopen, or a child writer killed mid
// writes whose acks join the model (plus the write in flight, if it reached the log); after
// each, every key's whole history and the earlier reads are checked again.
#[test]
fn temporal_model_with_reopen_and_sigkill() {
    run_model("temporal_model_with_reopen_and_sigkill", 1, 1);
}

// Goal: as above over three shard logs, with units of several shards in flight at once
// (§IV-B1's EOSL-TS holds time splits below them, `store/temporal.rs`). Method: the model
// test with three shards; each round also runs three threads writing their own keys at
// once, and the killed child writes from three threads (up to three writes in flight may
// have reached the logs).
#[test]
fn temporal_model_over_several_shards() {
    run_model("temporal_model_over_several_shards", 3, 3);
}

/// The model test of `test` with `shards` shard logs and `threads` concurrent writers.
fn run_model(test: &str, shards: usize, threads: u32) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        run_child(&spec);
    }
    let ops: usize = std::env::var(OPS_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(OPS_DEFAULT);
    let seed = rand::random::<u64>();
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("temporal store call");
    let mut model = Model::new();
    let mut stamps = Vec::new();
    for round in 0..4 {
        let what = format!("seed {seed} round {round}");
        // Another test's fork may hold a copy of the LOCK fd for a moment (rev-tsb F4).
        let store = open_retrying_lock(tmp.path(), &sharded(ENGINE, shards));
        if round >= 1 {
            let report = store.recovery_report();
            assert!(report.checkpoint_start_lsn.is_some(), "{what}: {report:?}");
        }
        if round >= 2 {
            // Two checkpoints after round 0's logs: they are gone.
            let first = tmp.path().join(wal::log_name(0, 0));
            assert!(!first.exists(), "{what}: {} is kept", first.display());
        }
        check_all_history(&store, &model, &what);
        for _ in 0..ops {
            if rng.random_range(0..3) == 0 {
                check_reads(&store, &model, &stamps, &mut rng, &what);
            } else {
                random_write(&store, &mut model, &mut stamps, &mut rng);
            }
        }
        if threads > 1 {
            concurrent_writes(&store, &mut model, &mut stamps, threads, seed ^ round, ops);
        }
        check_all_history(&store, &model, &what);
        if round >= 1 {
            // A rising threshold among the writes, then more writes and reads above it.
            raise_threshold(&store, &stamps, &mut rng, &what);
            check_all_history(&store, &model, &what);
            for _ in 0..ops / 3 {
                if rng.random_range(0..2) == 0 {
                    check_reads(&store, &model, &stamps, &mut rng, &what);
                } else {
                    random_write(&store, &mut model, &mut stamps, &mut rng);
                }
            }
        }
        // Every round checkpoints (a temporal checkpoint lets the logs below it go).
        store.checkpoint().expect("temporal store call");
        if round % 2 == 0 {
            store.close().expect("temporal store call");
            continue;
        }
        drop(store);
        let last_ts = stamps.iter().max().copied().unwrap_or(0);
        let acked = kill_child(
            test,
            tmp.path(),
            seed ^ round,
            (shards, threads),
            rng.random_range(5..60),
        );
        for (k, v, ts) in acked {
            assert!(
                ts > last_ts,
                "{what}: a child's timestamp {ts} is not after {last_ts}"
            );
            model.entry(k).or_default().insert(ts, v);
            stamps.push(ts);
        }
        // The writes in flight at the kill (one per writer) may have reached the log: the
        // versions after the last ack, if any.
        let last_ack = stamps.iter().max().copied().unwrap_or(0);
        // Another test's fork may hold a copy of the LOCK fd for a moment (rev-tsb F4).
        let store = open_retrying_lock(tmp.path(), &sharded(ENGINE, shards));
        // The open after a crash that replayed records writes a checkpoint.
        assert_eq!(store.stats().checkpoint_count, 1, "{what}");
        let mut extra = Vec::new();
        for i in 0..KEY_COUNT {
            // One writer: its write in flight is after its last ack. Several: each writer's
            // is after its own last ack, so after the last version of the key it wrote
            // (another writer's ack may be later).
            let after = if threads == 1 {
                last_ack
            } else {
                model
                    .get(&key(i))
                    .and_then(|h| h.keys().next_back().copied())
                    .unwrap_or(0)
            };
            for (ts, v) in store
                .history(&key(i), after + 1, u64::MAX, Order::Ascending, usize::MAX)
                .expect("temporal store call")
            {
                extra.push((key(i), ts, v));
            }
        }
        assert!(
            extra.len() <= threads as usize,
            "{what}: versions after the last ack: {extra:?}"
        );
        for (k, ts, v) in extra {
            model.entry(k).or_default().insert(ts, v);
            stamps.push(ts);
        }
        check_all_history(&store, &model, &format!("{what} after SIGKILL"));
        for _ in 0..20 {
            check_reads(
                &store,
                &model,
                &stamps,
                &mut rng,
                &format!("{what} after SIGKILL"),
            );
        }
        store.close().expect("temporal store call");
    }
}

/// A version one writer wrote: (key, timestamp, value or None for a delete).
type Written = (Vec<u8>, u64, Option<Vec<u8>>);

/// `threads` threads write their own keys at once (key `i` to thread `i % threads`), `ops`
/// writes in all; their versions join the model.
fn concurrent_writes(
    store: &Store,
    model: &mut Model,
    stamps: &mut Vec<u64>,
    threads: u32,
    seed: u64,
    ops: usize,
) {
    let written: Vec<Vec<Written>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mut own: Model = (0..KEY_COUNT)
                    .filter(|i| i % threads == t)
                    .filter_map(|i| model.get_key_value(&key(i)))
                    .map(|(k, h)| (k.clone(), h.clone()))
                    .collect();
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(t));
                    let mine: Vec<u32> = (0..KEY_COUNT).filter(|i| i % threads == t).collect();
                    let mut out = Vec::new();
                    for _ in 0..ops / threads as usize {
                        let k = key(mine[rng.random_range(0..mine.len())]);
                        let present = value_at(&own, &k, u64::MAX).is_some();
                        let (ts, v) = if rng.random_range(0..4) == 0 {
                            let ts = store.remove_ts(&k).expect("temporal store call");
                            assert_eq!(ts.is_some(), present, "remove of {k:?}");
                            let Some(ts) = ts else { continue };
                            (ts, None)
                        } else {
                            let v = rng.random::<u32>().to_le_bytes().to_vec();
                            (store.put_ts(&k, &v).expect("temporal store call"), Some(v))
                        };
                        own.entry(k.clone()).or_default().insert(ts, v.clone());
                        out.push((k, ts, v));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a writer"))
            .collect()
    });
    for (k, ts, v) in written.into_iter().flatten() {
        model.entry(k).or_default().insert(ts, v);
        stamps.push(ts);
    }
}

// Goal: redo of a temporal store's log never duplicates a version: applying every logged
// record twice builds the histories the store had. Method: write versions (a batch among
// them), close, decode the log and apply each record twice to a fresh tsbtree through
// replay's `put_at`/`remove_at`, compare every history; `Store::verify` replays them all.
#[test]
fn wal_redo_is_idempotent() {
    let tmp = tempfile::tempdir().expect("temporal store call");
    let store = Store::open_path(tmp.path(), options(ENGINE)).expect("temporal store call");
    for i in 0..40u32 {
        let k = key(i % 5);
        if i % 7 == 6 {
            store.remove_ts(&k).expect("temporal store call");
        } else {
            store
                .put_ts(&k, &i.to_le_bytes())
                .expect("temporal store call");
        }
    }
    let mut batch = WriteBatch::new();
    batch.put(&key(1), b"b1").remove(&key(2));
    store.write_ts(&batch).expect("temporal store call");
    let histories: Vec<_> = (0..5)
        .map(|i| {
            store
                .history(&key(i), 0, u64::MAX, Order::Ascending, usize::MAX)
                .expect("temporal store call")
        })
        .collect();
    store.close().expect("temporal store call");

    let fresh = forest_store::new_engine(ENGINE).expect("temporal store call");
    let mut stamped = 0;
    for name in std::fs::read_dir(tmp.path()).expect("temporal store call") {
        let name = name
            .expect("temporal store call")
            .file_name()
            .into_string()
            .expect("temporal store call");
        if wal::parse_log_name(&name).is_none() {
            continue;
        }
        let path = tmp.path().join(&name);
        let data = std::fs::read(&path).expect("temporal store call");
        let decoded = wal::decode_log(&path, &data).expect("temporal store call");
        replay::apply_parallel(&*fresh, 0, |apply| {
            for r in decoded.records.iter().filter(|r| r.op.is_data()) {
                stamped += usize::from(r.ts.is_some());
                for _ in 0..2 {
                    match r.op {
                        wal::Op::Put => apply.put_at(r.key, r.value, r.ts)?,
                        _ => apply.remove_at(r.key, r.ts)?,
                    }
                }
            }
            Ok(())
        })
        .expect("temporal store call");
    }
    assert!(stamped >= 40, "{stamped} timestamped records");
    // `forest check`'s read-only recovery replays the same records into a temporal index.
    let report = Store::verify_path(tmp.path(), None).expect("verify");
    let recovery = report.recovery.expect("a clean store recovers");
    assert_eq!(recovery.records_replayed, stamped as u64);
    let temporal = fresh.as_temporal().expect("tsbtree is temporal");
    for (i, want) in histories.iter().enumerate() {
        let mut got = Vec::new();
        temporal
            .history(
                &key(i as u32),
                0,
                u64::MAX,
                Order::Ascending,
                &mut |ts, v| {
                    got.push((ts, v.map(<[u8]>::to_vec)));
                    ControlFlow::Continue(())
                },
            )
            .expect("no retention");
        assert_eq!(&got, want, "history of {:?}", key(i as u32));
    }
}

// Goal: every temporal call on a store of another engine answers an error naming the
// engine; a temporal store refuses a switch from another engine; a time
// in the future is refused. Method: each call on a lockbtree store, then the refused opens,
// then reads at now + 1 s on a tsbtree store.
#[test]
fn errors_name_the_problem() {
    let tmp = tempfile::tempdir().expect("temporal store call");
    let store = Store::open_path(tmp.path(), options("lockbtree")).expect("temporal store call");
    store.upsert(b"a", b"1").expect("temporal store call");
    let not_temporal = |e: Error| {
        let text = e.to_string();
        assert!(
            text.contains("engine `lockbtree` is not a temporal engine"),
            "{text}"
        );
    };
    assert!(!store.is_temporal());
    not_temporal(store.now().unwrap_err());
    not_temporal(store.put_ts(b"a", b"2").unwrap_err());
    not_temporal(store.remove_ts(b"a").unwrap_err());
    not_temporal(store.write_ts(&WriteBatch::new()).unwrap_err());
    not_temporal(store.get_as_of(b"a", 1, &mut Vec::new()).unwrap_err());
    not_temporal(
        store
            .scan_as_of(
                Bound::Unbounded,
                Bound::Unbounded,
                Order::Ascending,
                1,
                9,
                &mut |_, _| ControlFlow::Continue(()),
            )
            .unwrap_err(),
    );
    not_temporal(store.history(b"a", 0, 1, Order::Ascending, 9).unwrap_err());
    store.close().expect("temporal store call");

    let switched = Store::open_path(
        tmp.path(),
        StoreOptions {
            switch_engine: true,
            ..options("tsbtree")
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        switched.contains("cannot switch to the temporal engine"),
        "{switched}"
    );

    let tmp = tempfile::tempdir().expect("temporal store call");
    let store = Store::open_path(tmp.path(), options("tsbtree")).expect("temporal store call");
    let ts = store.put_ts(b"a", b"1").expect("temporal store call");
    assert!(store.now().expect("temporal store call") >= ts);
    let future = store.now().expect("temporal store call") + 1_000_000;
    let text = store
        .get_as_of(b"a", future, &mut Vec::new())
        .unwrap_err()
        .to_string();
    assert!(text.contains("is in the future"), "{text}");
    let text = store
        .history(b"a", future, u64::MAX, Order::Ascending, 1)
        .unwrap_err()
        .to_string();
    assert!(text.contains("is in the future"), "{text}");
    // A history up to "forever" is capped at now.
    assert_eq!(
        store
            .history(b"a", 0, u64::MAX, Order::Ascending, 9)
            .expect("temporal store call")
            .len(),
        1
    );
    store.close().expect("temporal store call");
}

/// CPU seconds (user + system) of this process so far, from /proc/self/stat (Linux; 0
/// elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

// Measurement (not in CI): a temporal store's memory and open time after
// FOREST_RETAIN_UPDATES (default 1 M) updates of 10 k keys, without and with a retention
// threshold at the newest time minus 10 % of the written span, and with that threshold and
// two checkpoints (the second after one more write), so the logs are deleted and the reopen
// loads the checkpoint. Run:
// cargo test --release -p forest-store --test it -j1 -- --ignored --nocapture temporal::measure_retention
#[test]
#[ignore = "measurement; see the comment"]
fn measure_retention() {
    let updates: usize = std::env::var("FOREST_RETAIN_UPDATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    const KEYS: usize = 10_000;
    const BATCH: usize = 100;
    let opts = || StoreOptions {
        durability: Durability::Periodic { interval_ms: 100 },
        ..options("tsbtree")
    };
    for (with_threshold, with_checkpoint) in [(false, false), (true, false), (true, true)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open_path(tmp.path(), opts()).expect("open");
        let mut first = None;
        let mut last = 0;
        let mut i = 0usize;
        while i < updates {
            let mut batch = WriteBatch::new();
            for j in i..(i + BATCH).min(updates) {
                batch.put(
                    format!("key{:05}", j % KEYS).as_bytes(),
                    &(j as u64).to_le_bytes(),
                );
            }
            let (_, ts) = store.write_ts(&batch).expect("write");
            let ts = ts.expect("changed");
            first.get_or_insert(ts);
            last = ts;
            i += BATCH;
        }
        let first = first.expect("written");
        let threshold = last - (last - first) / 10;
        if with_threshold {
            store.set_retention(threshold).expect("retain");
        }
        let count = |s: &Store, name: &str| s.stats().index.counter(name).unwrap_or(0);
        let (mem, pages) = (
            store.stats().index.memory_bytes,
            count(&store, "live_pages"),
        );
        let mut probe = Vec::new();
        let at_t = store
            .get_as_of(b"key00007", threshold, &mut probe)
            .expect("at T")
            .then(|| probe.clone());
        if with_checkpoint {
            store.checkpoint().expect("checkpoint");
            store.put_ts(b"key00000", b"one more").expect("write");
            store.checkpoint().expect("checkpoint");
        }
        store.close().expect("close");
        let (mut log_bytes, mut checkpoint_bytes) = (0, 0);
        for entry in std::fs::read_dir(tmp.path()).expect("list") {
            let entry = entry.expect("entry");
            let name = entry.file_name().into_string().expect("utf-8");
            let len = entry.metadata().expect("metadata").len();
            if wal::parse_log_name(&name).is_some() {
                log_bytes += len;
            } else if name.starts_with("checkpoint-") {
                checkpoint_bytes += len;
            }
        }
        let (wall, cpu) = (std::time::Instant::now(), cpu_seconds());
        let store = Store::open_path(tmp.path(), opts()).expect("reopen");
        let (open_wall, open_cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        let again = store
            .get_as_of(b"key00007", threshold, &mut probe)
            .expect("at T")
            .then(|| probe.clone());
        assert_eq!(at_t, again, "the answer at T survives the reopen");
        let report = store.recovery_report();
        println!(
            "retention={with_threshold} checkpoint={with_checkpoint} updates={updates} \
             keys={KEYS}: before close memory_bytes={mem} live_pages={pages}; on disk \
             log_bytes={log_bytes} checkpoint_bytes={checkpoint_bytes}; reopen {open_wall:.2} s \
             wall {open_cpu:.2} s cpu (checkpoint load {:.2} s, {} versions; replay {:.2} s, {} \
             records), memory_bytes={} live_pages={} versions={}",
            report.checkpoint_elapsed.as_secs_f64(),
            report.checkpoint_entry_count,
            report.replay_elapsed.as_secs_f64(),
            report.records_replayed,
            store.stats().index.memory_bytes,
            count(&store, "live_pages"),
            count(&store, "versions"),
        );
        store.close().expect("close");
    }
}

// Goal (review rev-retain13 F2): a retention threshold never covers a write a crash can
// still lose: what a read at the threshold answered before a power loss it answers after.
// Method: a temporal store under `periodic` (nothing synced for a minute) writes a key, the
// threshold is raised to now, then unsynced bytes are dropped and the store reopened.
#[test]
fn a_threshold_never_covers_a_write_a_crash_can_lose() {
    use forest_store::file::{CrashMode, SimDir};
    let opts = || StoreOptions {
        durability: Durability::Periodic {
            interval_ms: 60_000,
        },
        ..options("tsbtree")
    };
    let dir = SimDir::new(41);
    let store = Store::open(dir.clone(), opts()).expect("open");
    store.upsert(b"k", b"v").expect("upsert");
    let t = store.now().expect("now");
    assert_eq!(store.set_retention(t).expect("raise"), t);
    let mut out = Vec::new();
    assert!(store.get_as_of(b"k", t, &mut out).expect("read at T"));
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let store = Store::open(dir, opts()).expect("reopen");
    let mut after = Vec::new();
    let found = store
        .get_as_of(b"k", t, &mut after)
        .expect("read at T after");
    assert!(
        found && after == out,
        "the read at the threshold changed across the crash"
    );
}

/// Writers of `key` on shards other than `held`'s, one write each (threads take shards in
/// turn: one that lands on `held` writes nothing), started one after another until `n` have
/// applied their write and wait for the held unit before their acknowledgement (`settling`
/// gets one message per `temporal:settling` pause point). Join them once the held unit is
/// let go: each gives its write's timestamp (None: it landed on `held`).
#[cfg(feature = "pause-points")]
pub(crate) fn writers_held_back<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    store: &'s Store,
    key: &'s [u8],
    held: usize,
    n: u32,
    settling: &std::sync::mpsc::Receiver<()>,
) -> Vec<std::thread::ScopedJoinHandle<'s, Option<u64>>> {
    let mut writers = Vec::new();
    let mut started = 0u32;
    while started < n {
        let (other_tx, other_rx) = std::sync::mpsc::channel::<bool>();
        let value = started.to_le_bytes();
        writers.push(s.spawn(move || {
            let other = store.shard_of_this_thread() != held;
            other_tx.send(other).expect("test alive");
            other.then(|| store.put_ts(key, &value).expect("a write"))
        }));
        if other_rx.recv().expect("writer") {
            settling
                .recv_timeout(Duration::from_secs(120))
                .expect("the writer applied and waits for the held unit");
            started += 1;
        }
    }
    writers
}

// Goal (§IV-B1's EOSL-TS over several shards): a unit that took its timestamp and has not
// applied it while another shard's writes time-split its page still applies, at its
// timestamp, in the current page; the split time stays at or below it, so its version never
// goes into a historical page after the split. Before, the split took the clock's newest
// time (a later unit's) and the held write was refused as older than its page's start.
// Method: two shards; a writer of k00 paused at `temporal:ticked`; 40 writers on the other
// shard, one write each, update k01 (on the same leaf) until it time-splits; then the first
// goes on; its version, the as-of reads around it and a reopen are checked. Durability
// `periodic`, so no acknowledgement waits for the held unit's LSN; each writer still waits,
// applied, for the held unit before it is acknowledged (`temporal:settling`, rev-tsb F2),
// hence one thread per write.
#[cfg(feature = "pause-points")]
#[test]
fn a_unit_in_flight_keeps_its_version_out_of_history() {
    let _serial = crate::pause_hook_serial();
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc, Mutex};

    let tmp = tempfile::tempdir().expect("temporal store call");
    // Acknowledged at once: a write waits for durability in LSN order, and the held unit's
    // shard cannot flush while it holds the shard's lock.
    let options = || StoreOptions {
        durability: Durability::Periodic { interval_ms: 5 },
        ..sharded(ENGINE, 2)
    };
    let store = Store::open_path(tmp.path(), options()).expect("temporal store call");
    let k00 = key(0);
    let k01 = key(1);
    let old = store.put_ts(&k00, b"old").expect("temporal store call");
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (settling_tx, settling_rx) = mpsc::channel::<()>();
    let (paused_tx, go_rx) = (Mutex::new(paused_tx), Mutex::new(go_rx));
    let settling_tx = Mutex::new(settling_tx);
    let fired = AtomicBool::new(false);
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        if name == "temporal:ticked"
            && std::thread::current().name() == Some("held")
            && !fired.swap(true, Ordering::SeqCst)
        {
            paused_tx
                .lock()
                .expect("hook")
                .send(())
                .expect("test alive");
            go_rx.lock().expect("hook").recv().expect("test alive");
        }
        if name == "temporal:settling" {
            let _ = settling_tx.lock().expect("hook").send(());
        }
    })));
    let time_splits = |store: &Store| {
        store
            .stats()
            .index
            .counters
            .iter()
            .find(|(n, _)| *n == "time_splits")
            .map_or(0, |c| c.1)
    };
    std::thread::scope(|s| {
        let (store, k00, k01) = (&store, &k00, &k01);
        let (shard_tx, shard_rx) = mpsc::channel::<usize>();
        let held = std::thread::Builder::new()
            .name("held".into())
            .spawn_scoped(s, move || {
                shard_tx
                    .send(store.shard_of_this_thread())
                    .expect("test alive");
                store.put_ts(k00, b"held")
            })
            .expect("spawn");
        let held_shard = shard_rx.recv().expect("the held writer's shard");
        paused_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the held writer reached its pause point");
        // Writers on the other shard (the held one holds its shard's lock), each applied
        // and waiting for the held unit.
        let splits_before = time_splits(store);
        let writers = writers_held_back(s, store, k01, held_shard, 40, &settling_rx);
        let splits = time_splits(store);
        go_tx.send(()).expect("held writer alive");
        let held_ts = held
            .join()
            .expect("held writer")
            .expect("the held version applies after the splits");
        let writer_stamps: Vec<u64> = writers
            .into_iter()
            .filter_map(|w| w.join().expect("writer"))
            .collect();
        assert!(
            splits > splits_before,
            "no time split ran while the unit was held"
        );
        assert_eq!(writer_stamps.len(), 40);
        assert!(
            writer_stamps.iter().all(|&w| old < held_ts && held_ts < w),
            "{held_ts} {writer_stamps:?}"
        );
    });
    forest_core::pause::set_pause_hook(None);
    for store in [Some(store), None] {
        let store = match store {
            Some(s) => s,
            None => Store::open_path(tmp.path(), options()).expect("reopen"),
        };
        let h = store
            .history(&k00, 0, u64::MAX, Order::Ascending, 9)
            .expect("temporal store call");
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h[1].1.as_deref(), Some(&b"held"[..]));
        let mut out = Vec::new();
        assert!(store.get_as_of(&k00, h[1].0 - 1, &mut out).expect("read"));
        assert_eq!(out, b"old");
        assert!(store.get_as_of(&k00, h[1].0, &mut out).expect("read"));
        assert_eq!(out, b"held");
        assert_eq!(
            store
                .history(&k01, 0, u64::MAX, Order::Ascending, 99)
                .expect("temporal store call")
                .len(),
            40
        );
        store.close().expect("close");
    }
}
