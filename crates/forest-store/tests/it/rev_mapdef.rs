//! Review rev-mapdef (session 17) of branch h-mapdef: map checkpoints by default, taken on a
//! background checkpointer thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use forest_store::file::{CrashMode, Dir, SimDir};
use forest_store::{Durability, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::llama_store::{key, value};

const BUDGET: u64 = 64 << 10;

fn options(map: Option<u64>) -> StoreOptions {
    StoreOptions {
        engine: Some("bwtree".into()),
        durability: Durability::Group,
        memory_budget_bytes: Some(BUDGET),
        shards: 2,
        map_checkpoint_wal_bytes: map,
        ..StoreOptions::default()
    }
}

fn has_map_checkpoint(dir: &SimDir) -> bool {
    dir.subdir("lss")
        .expect("lss")
        .list()
        .expect("list")
        .iter()
        .any(|n| n.starts_with("map-") && !n.ends_with(".tmp"))
}

/// Every key `0..n` holds one of the rounds it may hold (`ok`).
fn check(store: &Store, n: u32, ok: impl Fn(u32, u32) -> bool, context: &str) {
    let mut out = Vec::new();
    for i in 0..n {
        let found = store
            .try_get(&key(i), &mut out)
            .unwrap_or_else(|e| panic!("{context}: get {i}: {e}"));
        assert!(found, "{context}: key {i} missing");
        let round = (0..4)
            .find(|&r| out == value(i, r))
            .unwrap_or_else(|| panic!("{context}: key {i}: a value never written"));
        assert!(ok(i, round), "{context}: key {i} holds round {round}");
    }
}

// Goal: an old store (made with map checkpoints off: a full checkpoint + WAL, as main makes
// it) opened with map checkpoints on (now the default) keeps every write across a power loss
// at a random point of the switch-over (during its first map checkpoints and the WAL
// deletion below them), and later opens (also with map checkpoints "off") keep it. Method:
// 2000 keys round 0, full checkpoint, 1000 keys round 1 in the WAL, clean close or drop;
// reopen with map checkpoints every 8 KiB, overwrite every key with round 2 while a power
// loss strikes; reopen twice and check each key holds its newest acked round or a later one.
#[test]
#[ignore = "rev: mapdef-switch stress of the old-store switch-over across power loss"]
fn old_store_switch_over_survives_power_loss() {
    const N: u32 = 2000;
    let cycles: u64 = std::env::var("REV_MAPDEF_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let mut from_lss = 0;
    for seed in 0..cycles {
        let dir = SimDir::new(1000 + seed);
        let mut rng = StdRng::seed_from_u64(seed);
        {
            let store = Store::open(dir.clone(), options(None)).expect("open old");
            for i in 0..N {
                store.upsert(&key(i), &value(i, 0)).expect("put 0");
            }
            store.checkpoint().expect("full checkpoint");
            for i in 0..N / 2 {
                store.upsert(&key(i), &value(i, 1)).expect("put 1");
            }
            if seed % 2 == 0 {
                store.close().expect("close old");
            } else {
                drop(store);
            }
        }
        assert!(
            !has_map_checkpoint(&dir),
            "seed {seed}: old store has map files"
        );
        let store = Arc::new(Store::open(dir.clone(), options(Some(8 << 10))).expect("open new"));
        let acked = Arc::new(AtomicU32::new(0));
        let writer = {
            let store = Arc::clone(&store);
            let acked = Arc::clone(&acked);
            std::thread::spawn(move || {
                for i in 0..N {
                    if store.upsert(&key(i), &value(i, 2)).is_err() {
                        return;
                    }
                    acked.store(i + 1, Ordering::SeqCst);
                }
            })
        };
        std::thread::sleep(Duration::from_millis(rng.random_range(5..300)));
        match rng.random_range(0..3) {
            0 => dir.crash(),
            1 => dir.crash_scatter(),
            _ => dir.crash_with(CrashMode::DropUnsynced),
        }
        writer.join().expect("writer");
        drop(store);
        let acked = acked.load(Ordering::SeqCst);
        let ok = |i: u32, round: u32| {
            if i < acked {
                round == 2
            } else if i < N / 2 {
                round >= 1
            } else {
                round == 0 || round == 2
            }
        };
        from_lss += u64::from(has_map_checkpoint(&dir));
        let context = format!("seed {seed} acked {acked} reopen");
        let store = Store::open(dir.clone(), options(Some(8 << 10)))
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        check(&store, N, ok, &context);
        assert_eq!(
            store.stats().memory.expect("memory").map_checkpoint_error,
            None
        );
        store.close().expect("close");
        let context = format!("seed {seed} acked {acked} reopen with map checkpoints off");
        let store =
            Store::open(dir.clone(), options(None)).unwrap_or_else(|e| panic!("{context}: {e}"));
        check(&store, N, ok, &context);
        store.close().expect("close");
    }
    eprintln!("rev_mapdef switch-over: {cycles} power losses, {from_lss} reopens from the LSS");
}

// Goal: with map checkpoints every 4 KiB (a scheduled one every ~25 writes), writers, a
// thread calling `Store::checkpoint` in a loop (racing the checkpointer), and a power loss at
// a random point, no acknowledged write is lost and nothing never written appears. Method:
// counters per key as in map_recovery's power loss test, 3 generations per seed.
#[test]
#[ignore = "rev: mapdef-race stress of scheduled vs Store::checkpoint under power loss"]
fn power_loss_with_user_checkpoints_racing_the_checkpointer() {
    let cycles: u64 = std::env::var("REV_MAPDEF_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for seed in 0..cycles {
        let dir = SimDir::new(5000 + seed);
        let mut rng = StdRng::seed_from_u64(seed);
        // key -> (acked, attempted)
        let mut noted = BTreeMap::<Vec<u8>, (u32, u32)>::new();
        for generation in 0..3 {
            let store = Arc::new(
                Store::open(dir.clone(), options(Some(4 << 10)))
                    .unwrap_or_else(|e| panic!("seed {seed} gen {generation}: open: {e}")),
            );
            check_counts(&store, &noted, seed, generation);
            let shared = Arc::new(Mutex::new(noted.clone()));
            let stop = Arc::new(AtomicBool::new(false));
            let mut threads: Vec<_> = (0..3u8)
                .map(|w| {
                    let store = Arc::clone(&store);
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || {
                        for step in 0..u32::MAX {
                            let k = format!("w{w}-{:04}", step % 200).into_bytes();
                            let count = {
                                let mut noted = shared.lock().expect("noted");
                                let e = noted.entry(k.clone()).or_default();
                                e.1 = e.1.max(e.0) + 1;
                                e.1
                            };
                            let mut v = count.to_le_bytes().to_vec();
                            v.resize(100, b'.');
                            if store.upsert(&k, &v).is_err() {
                                return;
                            }
                            let mut noted = shared.lock().expect("noted");
                            let e = noted.entry(k).or_default();
                            e.0 = e.0.max(count);
                        }
                    })
                })
                .collect();
            {
                let store = Arc::clone(&store);
                let stop = Arc::clone(&stop);
                threads.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if store.checkpoint().is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(3));
                    }
                }));
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(20..300)));
            match rng.random_range(0..3) {
                0 => dir.crash(),
                1 => dir.crash_scatter(),
                _ => dir.crash_with(CrashMode::DropUnsynced),
            }
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join().expect("thread");
            }
            drop(store);
            noted = shared.lock().expect("noted").clone();
        }
        let store = Store::open(dir.clone(), options(Some(4 << 10))).expect("final open");
        check_counts(&store, &noted, seed, 3);
        store.close().expect("close");
    }
}

fn check_counts(store: &Store, noted: &BTreeMap<Vec<u8>, (u32, u32)>, seed: u64, generation: u32) {
    let recovered: BTreeMap<Vec<u8>, Vec<u8>> = store.to_vec().into_iter().collect();
    for (k, v) in &recovered {
        let count = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
        let (_, attempted) = noted
            .get(k)
            .unwrap_or_else(|| panic!("seed {seed} gen {generation}: never written {k:?}"));
        assert!(
            count <= *attempted,
            "seed {seed} gen {generation}: {k:?}={count} never written"
        );
    }
    for (k, (acked, _)) in noted.iter().filter(|(_, (a, _))| *a > 0) {
        let v = recovered
            .get(k)
            .unwrap_or_else(|| panic!("seed {seed} gen {generation}: acked {k:?}={acked} lost"));
        let count = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
        assert!(
            count >= *acked,
            "seed {seed} gen {generation}: {k:?} {count} < acked {acked}"
        );
    }
}

// Goal: an idle store takes no map checkpoints (the 200 ms space check must not start a
// storm). Method: 3000 keys overwritten 6 times under a 64 KiB budget with the WAL trigger
// out of reach (64 MiB default), so only the space trigger fires; then no writes: the
// checkpoint count must stay put over 3 s.
#[test]
#[ignore = "rev: mapdef-idle checkpoints taken by an idle store"]
fn an_idle_store_takes_no_checkpoints() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), options(Some(64 << 20))).expect("open");
    let mut during = Vec::new();
    for round in 0..4 {
        let before = store.stats().checkpoint_count;
        for i in 0..3000 {
            store.upsert(&key(i), &value(i, round)).expect("put");
        }
        during.push(store.stats().checkpoint_count - before);
    }
    std::thread::sleep(Duration::from_secs(1));
    let c1 = store.stats().checkpoint_count;
    std::thread::sleep(Duration::from_secs(3));
    let c2 = store.stats().checkpoint_count;
    let memory = store.stats().memory.expect("memory");
    eprintln!(
        "checkpoints per round of writes {during:?}; idle: {c1} then {c2}; lss total {} live {}",
        memory.lss_total_bytes, memory.lss_live_bytes
    );
    assert_eq!(c1, c2, "checkpoints taken while idle");
    store.close().expect("close");
}

// Goal: close and drop stop the checkpointer without deadlock while checkpoints (scheduled
// every 2 KiB) and user checkpoints run. Method: 40 rounds of open, 3 writers for a random
// while, then close (even rounds) or drop; a watchdog fails the test after 120 s.
#[test]
#[ignore = "rev: mapdef-stop close/drop racing the checkpointer"]
fn close_and_drop_racing_the_checkpointer_never_hang() {
    let (done, watch) = mpsc::channel();
    std::thread::spawn(move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..40u32 {
            let store =
                Arc::new(Store::open_path(tmp.path(), options(Some(2 << 10))).expect("open"));
            let stop = Arc::new(AtomicBool::new(false));
            let writers: Vec<_> = (0..3u32)
                .map(|w| {
                    let store = Arc::clone(&store);
                    let stop = Arc::clone(&stop);
                    std::thread::spawn(move || {
                        let mut i = 0;
                        while !stop.load(Ordering::Relaxed) {
                            store
                                .upsert(&key(w * 1000 + i % 1000), &value(i, round % 4))
                                .expect("put");
                            if i % 97 == 0 {
                                store.checkpoint().expect("checkpoint");
                            }
                            i += 1;
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(rng.random_range(1..60)));
            stop.store(true, Ordering::Relaxed);
            for w in writers {
                w.join().expect("writer");
            }
            let store = Arc::into_inner(store).expect("one owner");
            assert_eq!(
                store.stats().memory.expect("memory").map_checkpoint_error,
                None
            );
            if round % 2 == 0 {
                store.close().expect("close");
            } else {
                drop(store);
            }
        }
        done.send(()).expect("send");
    });
    watch
        .recv_timeout(Duration::from_secs(120))
        .expect("close/drop hung (or the test thread panicked)");
}

// Goal: once an old store (full checkpoint + WAL) has switched to map checkpoints and its WAL
// below them is deleted, its full checkpoint — a copy of the whole data set, stale now that
// the WAL it starts from is gone — is deleted too, not kept forever. Method: 2000 keys, a
// full checkpoint with map checkpoints off, reopen with them every 8 KiB, overwrite every key
// twice (many map checkpoints, WAL cut), close, reopen, close: list `checkpoint-*`.
#[test]
fn the_old_full_checkpoint_is_deleted_after_the_switch_over() {
    const N: u32 = 2000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), options(None)).expect("open old");
    for i in 0..N {
        store.upsert(&key(i), &value(i, 0)).expect("put");
    }
    store.checkpoint().expect("full checkpoint");
    store.close().expect("close");
    let names = |what: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(tmp.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(what))
            .collect();
        v.sort();
        v
    };
    let old = names("checkpoint-");
    assert!(!old.is_empty(), "the old store has a full checkpoint");
    let store = Store::open_path(tmp.path(), options(Some(8 << 10))).expect("open new");
    for round in 1..3 {
        for i in 0..N {
            store.upsert(&key(i), &value(i, round)).expect("put");
        }
    }
    store.close().expect("close");
    let store = Store::open_path(tmp.path(), options(Some(8 << 10))).expect("reopen");
    check(&store, N, |_, r| r == 2, "after the switch-over");
    store.close().expect("close");
    let left = names("checkpoint-");
    eprintln!(
        "full checkpoints before {old:?}, after {left:?}; logs now {:?}",
        names("log-")
    );
    assert!(
        left.iter().all(|n| !old.contains(n)),
        "the old full checkpoint {left:?} is kept after the WAL it starts from was deleted"
    );
}

// Goal: `Store::verify` (`forest check DIR`) finds no problem in a healthy store made with
// the new defaults (a budget: map checkpoints on, so the WAL below them is deleted). Known
// open in ARCHITECTURE, but now every budgeted store meets it: a check of a healthy store
// reports damage. Method: 2000 keys with map checkpoints every 8 KiB, clean close, verify.
#[test]
#[ignore = "rev: mapdef-check forest check reports problems on a healthy default store"]
fn verify_finds_nothing_wrong_in_a_healthy_default_store() {
    const N: u32 = 2000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), options(Some(8 << 10))).expect("open");
    for i in 0..N {
        store.upsert(&key(i), &value(i, 0)).expect("put");
    }
    store.close().expect("close");
    let report = Store::verify_path(tmp.path(), None).expect("verify");
    let problems = report.problems();
    let recovered = report.recovery.as_ref().map(|r| r.keys_recovered);
    eprintln!("problems {problems:?}; recovery keys {recovered:?}");
    assert!(
        problems.is_empty(),
        "a healthy store reported as damaged: {problems:?}"
    );
}
