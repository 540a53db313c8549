//! A store on `bwtree` with a memory budget and map checkpoints
//! (`Store::open_with_map_checkpoints`; issue 17, recovery at open; `forest-store/src/llama.rs`
//! "Recovery"): the tree recovers from its LSS and the WAL is redone from the checkpoint's
//! RSSP only; the WAL below the older kept checkpoint's RSSP is deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use forest_store::file::{CrashMode, Dir, OsDir, SimDir};
use forest_store::{Durability, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::llama_store::{key, value};

const BUDGET: u64 = 64 << 10;
/// Small, so that a test's writes take several map checkpoints.
const MAP_EVERY: u64 = 96 << 10;

fn options(durability: Durability) -> StoreOptions {
    StoreOptions {
        engine: Some("bwtree".into()),
        durability,
        memory_budget_bytes: Some(BUDGET),
        shards: 2,
        ..StoreOptions::default()
    }
}

fn open(dir: impl Dir + 'static, durability: Durability) -> Store {
    Store::open_with_map_checkpoints(dir, options(durability), MAP_EVERY)
        .unwrap_or_else(|e| panic!("open with map checkpoints: {e}"))
}

/// Random power-loss cycles (`FOREST_MAP_RECOVERY_CYCLES` for more).
fn cycle_count() -> u64 {
    std::env::var("FOREST_MAP_RECOVERY_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

fn map_files(lss: &OsDir) -> Vec<String> {
    let mut names: Vec<String> = lss
        .list()
        .expect("list lss")
        .into_iter()
        .filter(|n| n.starts_with("map-") && !n.ends_with(".tmp"))
        .collect();
    names.sort();
    names
}

fn log_files(dir: &OsDir) -> Vec<String> {
    let mut names: Vec<String> = dir
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("wal-") || n.starts_with("log-"))
        .collect();
    names.sort();
    names
}

fn check_all(store: &Store, n: u32, round: impl Fn(u32) -> u32, context: &str) {
    let mut out = Vec::new();
    for i in 0..n {
        let found = store
            .try_get(&key(i), &mut out)
            .unwrap_or_else(|e| panic!("{context}: get {i}: {e}"));
        assert!(found, "{context}: key {i} missing");
        assert_eq!(out, value(i, round(i)), "{context}: key {i}");
    }
    assert_eq!(store.to_vec().len(), n as usize, "{context}: key count");
}

// Goal: after a clean close the tree comes back from its LSS and only the WAL above the
// checkpoint's RSSP is redone; the old WAL is deleted once two checkpoints exist. Method:
// 3000 values of 160 bytes, written in rounds (several map checkpoints at 96 KiB of WAL),
// close, count the map checkpoints and logs, reopen, read every key back; reopen again with
// plain `Store::open` (map checkpoints found, so used).
#[test]
fn clean_reopen_recovers_from_the_lss_and_redoes_only_the_wal_tail() {
    const N: u32 = 3000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let group = Durability::Group;
    let store = open(OsDir::open(&path).expect("dir"), group);
    for round in 0..3 {
        for i in 0..N {
            store.upsert(&key(i), &value(i, round)).expect("upsert");
        }
    }
    for i in (0..N).step_by(5) {
        store.remove(&key(i)).expect("remove");
    }
    for i in (0..N).step_by(5) {
        store.upsert(&key(i), &value(i, 7)).expect("upsert");
    }
    let stats = store.stats();
    assert!(
        stats.checkpoint_count >= 3,
        "{} map checkpoints taken",
        stats.checkpoint_count
    );
    let memory = stats.memory.expect("memory");
    assert_eq!(memory.map_checkpoint_error, None);
    assert!(memory.evictions > 0, "nothing was evicted");
    let written = stats.lsn_next - 1;
    store.close().expect("close");
    let lss = OsDir::open(path.join("lss")).expect("lss");
    let maps = map_files(&lss);
    assert_eq!(maps.len(), 2, "kept map checkpoints: {maps:?}");
    let round = |i: u32| if i.is_multiple_of(5) { 7 } else { 2 };

    let store = open(OsDir::open(&path).expect("dir"), group);
    let report = store.recovery_report().clone();
    assert!(
        report.records_replayed < written / 2,
        "{} of {written} records redone: the WAL was not cut at the RSSP",
        report.records_replayed
    );
    eprintln!(
        "map_recovery clean reopen: {} of {written} WAL records redone, RSSP-bounded",
        report.records_replayed
    );
    check_all(&store, N, round, "after a clean reopen");
    store.close().expect("close");
    let store = Store::open(OsDir::open(&path).expect("dir"), options(group)).expect("plain open");
    check_all(&store, N, round, "after a plain reopen");
    store.close().expect("close");
    // Without a budget the WAL alone no longer holds the data: refused by name.
    let plain = StoreOptions {
        memory_budget_bytes: None,
        ..options(group)
    };
    let e = Store::open(OsDir::open(&path).expect("dir"), plain).unwrap_err();
    assert!(e.to_string().contains("map checkpoints"), "{e}");
}

// Goal: the WAL below the older kept checkpoint's RSSP is deleted, and recovery after that
// is still whole. Method: write, checkpoint explicitly four times with writes between,
// compare the log files before and after, reopen and read back.
#[test]
fn wal_truncation_then_reopen() {
    const N: u32 = 1500;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let dir = OsDir::open(&path).expect("dir");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    for i in 0..N {
        store.upsert(&key(i), &value(i, 0)).expect("upsert");
    }
    let first_logs = log_files(&dir);
    assert!(!first_logs.is_empty(), "no log files");
    for round in 1..=4 {
        for i in (0..N).step_by(3) {
            store.upsert(&key(i), &value(i, round)).expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
    }
    let logs = log_files(&dir);
    for name in &first_logs {
        assert!(
            !logs.contains(name),
            "{name} below the older checkpoint's RSSP was kept: {logs:?}"
        );
    }
    for i in (0..N).step_by(2) {
        store.upsert(&key(i), &value(i, 9)).expect("upsert");
    }
    drop(store); // no clean close: the open redoes the WAL tail and checkpoints
    let round = |i: u32| match (i % 2, i % 3) {
        (0, _) => 9,
        (_, 0) => 4,
        _ => 0,
    };
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    check_all(&store, N, round, "after truncation and reopen");
    store.close().expect("close");
}

// Goal: a damaged newest map checkpoint falls back to the older one, whose WAL tail was
// kept. Method: several checkpoints, close, flip bytes in the newest `map-<seq>`, reopen
// and read every key back; the damaged file is set aside as `.corrupt`.
#[test]
fn damaged_newest_checkpoint_falls_back_to_the_older() {
    const N: u32 = 1500;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    for round in 0..3 {
        for i in 0..N {
            store.upsert(&key(i), &value(i, round)).expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
    }
    for i in (0..N).step_by(4) {
        store.upsert(&key(i), &value(i, 5)).expect("upsert");
    }
    store.close().expect("close");
    let lss_path = path.join("lss");
    let maps = map_files(&OsDir::open(&lss_path).expect("lss"));
    assert_eq!(maps.len(), 2, "{maps:?}");
    let newest = lss_path.join(&maps[1]);
    let mut bytes = std::fs::read(&newest).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&newest, &bytes).expect("write");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    check_all(
        &store,
        N,
        |i| if i.is_multiple_of(4) { 5 } else { 2 },
        "after the fallback",
    );
    store.close().expect("close");
    let names = OsDir::open(&lss_path).expect("lss").list().expect("list");
    assert!(
        names.contains(&format!("{}.corrupt", maps[1])),
        "the damaged checkpoint was not set aside: {names:?}"
    );
}

// Goal: every acknowledged write survives a power loss at any moment, with writers, the
// evictor, the cleaner and scheduled map checkpoints running, over two generations (a
// recovered store takes checkpoints and is crashed again). Method: per cycle a seeded
// simulated disk; four writers count up their own keys (values padded to 120 bytes, so the
// 64 KiB budget evicts), noting each acknowledgement; the disk loses power (random kind) at
// a random moment; reopen and check every key holds a count between its last acknowledged
// and last attempted; write and crash once more; check again.
#[test]
fn power_loss_with_writers_evictor_cleaner_and_map_checkpoints() {
    let (mut checked, mut from_lss) = (0u64, 0u64);
    for seed in 0..cycle_count() {
        let dir = SimDir::new(seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut noted = BTreeMap::<Vec<u8>, (u32, u32)>::new();
        for generation in 0..2 {
            from_lss += u64::from(has_map_checkpoint(&dir));
            let store = Arc::new(open(dir.clone(), Durability::Group));
            if generation > 0 {
                check_counts(&store, &noted, seed, generation);
                checked += noted.len() as u64;
            }
            let shared = Arc::new(Mutex::new(noted.clone()));
            let writers: Vec<_> = (0..4u8)
                .map(|w| {
                    let store = Arc::clone(&store);
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || {
                        for step in 0..u32::MAX {
                            let k = counter_key(w, step % 300);
                            let count = {
                                let mut noted = shared.lock().expect("noted");
                                let entry = noted.entry(k.clone()).or_default();
                                entry.1 = entry.1.max(entry.0) + 1;
                                entry.1
                            };
                            if store.upsert(&k, &counter_value(count)).is_err() {
                                return;
                            }
                            let mut noted = shared.lock().expect("noted");
                            let entry = noted.entry(k).or_default();
                            entry.0 = entry.0.max(count);
                        }
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(rng.random_range(20..400)));
            match rng.random_range(0..3) {
                0 => dir.crash(),
                1 => dir.crash_scatter(),
                _ => dir.crash_with(CrashMode::DropUnsynced),
            }
            for w in writers {
                w.join().expect("writer");
            }
            drop(store);
            noted = shared.lock().expect("noted").clone();
        }
        from_lss += u64::from(has_map_checkpoint(&dir));
        let store = open(dir.clone(), Durability::Group);
        check_counts(&store, &noted, seed, 2);
        checked += noted.len() as u64;
        store.close().expect("close");
    }
    eprintln!(
        "map_recovery power loss: {} power losses, {from_lss} opens from a map checkpoint, \
         {checked} keys checked",
        cycle_count() * 2
    );
    assert!(from_lss > 0, "no open recovered from a map checkpoint");
}

/// Whether the simulated store's LSS holds a published map checkpoint (durable or not).
fn has_map_checkpoint(dir: &SimDir) -> bool {
    dir.subdir("lss")
        .expect("lss")
        .list()
        .expect("list")
        .iter()
        .any(|n| n.starts_with("map-") && !n.ends_with(".tmp"))
}

fn counter_key(writer: u8, slot: u32) -> Vec<u8> {
    format!("w{writer}-{slot:05}").into_bytes()
}

fn counter_value(count: u32) -> Vec<u8> {
    let mut v = count.to_le_bytes().to_vec();
    v.resize(120, b'.');
    v
}

fn check_counts(store: &Store, noted: &BTreeMap<Vec<u8>, (u32, u32)>, seed: u64, generation: u32) {
    let memory = store.stats().memory.expect("memory");
    assert_eq!(memory.map_checkpoint_error, None, "seed {seed}");
    let recovered: BTreeMap<Vec<u8>, Vec<u8>> = store.to_vec().into_iter().collect();
    for (k, v) in &recovered {
        let count = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
        let (_, attempted) = noted
            .get(k)
            .unwrap_or_else(|| panic!("seed {seed}: never written {k:?}"));
        assert!(
            count <= *attempted,
            "seed {seed} gen {generation}: {k:?}={count} never written"
        );
        assert_eq!(v, &counter_value(count), "seed {seed}: {k:?}");
    }
    for (k, (acked, _)) in noted.iter().filter(|(_, (a, _))| *a > 0) {
        let v = recovered.get(k).unwrap_or_else(|| {
            panic!("seed {seed} gen {generation}: acknowledged {k:?}={acked} lost")
        });
        let count = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
        assert!(
            count >= *acked,
            "seed {seed} gen {generation}: {k:?} {count} < acknowledged {acked}"
        );
    }
}

// Goal: the cleaner of a recovered store never removes a segment that still holds the
// newest piece of a page recovered from it (the space map starts empty at open, so every
// segment from before the open looked empty to the cleaner). Method: 3000 keys under a
// 64 KiB budget (most pages evicted), close, reopen, then rounds of writes to 100 keys with
// a checkpoint each (the cleaner runs in the evictor's thread meanwhile), and read all 3000
// back.
#[test]
fn cleaner_after_recovery_keeps_segments_of_recovered_pages() {
    const N: u32 = 3000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    for i in 0..N {
        store.upsert(&key(i), &value(i, 0)).expect("upsert");
    }
    store.checkpoint().expect("checkpoint");
    store.close().expect("close");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    for round in 1..=8 {
        for i in 0..100 {
            store.upsert(&key(i), &value(i, round)).expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(120));
    }
    check_all(
        &store,
        N,
        |i| if i < 100 { 8 } else { 0 },
        "after cleaning in a recovered store",
    );
    store.close().expect("close");
    let store = open(OsDir::open(&path).expect("dir"), Durability::Group);
    check_all(
        &store,
        N,
        |i| if i < 100 { 8 } else { 0 },
        "after cleaning and reopen",
    );
    store.close().expect("close");
}
