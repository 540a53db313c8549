//! `Store::verify` (what `forest check` runs) and the engine recorded in the directory
//! (issue 5 "`forest check DIR` verifies every file of a store and prints what it found";
//! "the engine chosen by name").

use std::collections::BTreeMap;

use forest_store::file::{CrashMode, Dir, SimDir};
use forest_store::{Durability, Store, StoreOptions};

fn options(engine: Option<&str>) -> StoreOptions {
    StoreOptions {
        engine: engine.map(str::to_string),
        durability: Durability::Group,
        shards: 2,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

/// Every file's name and bytes.
fn snapshot(dir: &SimDir) -> BTreeMap<String, Vec<u8>> {
    dir.list()
        .expect("list")
        .into_iter()
        .map(|name| {
            let mut bytes = Vec::new();
            dir.open(&name)
                .expect("open")
                .read_all(&mut bytes)
                .expect("read");
            (name, bytes)
        })
        .collect()
}

fn log_names(dir: &SimDir) -> Vec<String> {
    dir.list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("log-"))
        .collect()
}

/// A closed store with `count` keys in its logs (no checkpoint).
fn written(count: u32) -> SimDir {
    let dir = SimDir::new(7);
    let store = Store::open(dir.clone(), options(None)).expect("open");
    for i in 0..count {
        store
            .upsert(&i.to_be_bytes(), &[i as u8; 50])
            .expect("upsert");
    }
    store.close().expect("close");
    dir
}

// Goal: verify reports a torn tail and changes no byte; the next open cuts it. Method: write,
// append half a record's worth of bytes to a log, verify twice, compare every file, open.
#[test]
fn torn_tail_is_reported_and_left_in_place() {
    let dir = written(20);
    let log = log_names(&dir)
        .into_iter()
        .find(|n| dir.open(n).and_then(|f| f.len()).expect("len") > 32)
        .expect("a log with records");
    let mut file = dir.open(&log).expect("open");
    file.append(&[0x41; 30]).expect("append");
    file.sync().expect("sync");
    drop(file);
    let before = snapshot(&dir);
    for _ in 0..2 {
        let report = Store::verify(dir.clone(), None).expect("verify");
        assert!(report.problems().is_empty(), "{:?}", report.problems());
        let torn: Vec<_> = report.logs.iter().filter(|l| l.torn.is_some()).collect();
        assert_eq!(torn.len(), 1, "{report:?}");
        assert_eq!(torn[0].name, log);
        assert_eq!(torn[0].torn.expect("torn").bytes, 30);
        let recovery = report.recovery.expect("recoverable");
        assert_eq!(recovery.keys_recovered, 20);
        assert_eq!(recovery.torn_tails.len(), 1);
        assert_eq!(snapshot(&dir), before, "verify changed nothing");
    }
    let store = Store::open(dir.clone(), options(None)).expect("open");
    assert_eq!(store.recovery_report().torn_tails.len(), 1);
    assert_eq!(store.to_vec().len(), 20);
}

// Goal: damage inside a log and a damaged newest checkpoint are reported with their file and
// offset, the store is left as it was (no `.corrupt` rename). Method: two checkpoints, flip
// a byte in the newest and one early in a log, verify, compare.
#[test]
fn damage_is_reported_without_repair() {
    let dir = written(30);
    let store = Store::open(dir.clone(), options(None)).expect("open");
    store.checkpoint().expect("checkpoint");
    store.upsert(b"late", b"v").expect("upsert");
    store.checkpoint().expect("checkpoint");
    store.upsert(b"later", b"v").expect("upsert");
    store.upsert(b"later2", b"v").expect("upsert");
    store.close().expect("close");
    let newest = dir
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("checkpoint-"))
        .max()
        .expect("a checkpoint");
    assert!(dir.damage(&newest, |b| b[40] ^= 1));
    let before = snapshot(&dir);
    let report = Store::verify(dir.clone(), None).expect("verify");
    let problems = report.problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains(&newest), "{problems:?}");
    let recovery = report.recovery.as_ref().expect("falls back");
    assert_eq!(recovery.corrupt_checkpoints.len(), 1);
    assert_eq!(recovery.keys_recovered, 33);
    assert_eq!(snapshot(&dir), before);

    let log = log_names(&dir)
        .into_iter()
        .find(|n| dir.open(n).and_then(|f| f.len()).expect("len") > 100)
        .expect("a log with two records");
    // A byte of the first record: a mark after it proves the record was durable.
    assert!(dir.damage(&log, |b| b[60] ^= 1));
    let before = snapshot(&dir);
    let report = Store::verify(dir.clone(), None).expect("verify");
    let problems = report.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&log) && p.contains("from offset 48")),
        "{problems:?}"
    );
    assert_eq!(snapshot(&dir), before);
}

// Goal (issue 17, session 20): verify beside an open store reads it without taking its lock
// (it no longer refuses), says it is in use, finds no problem and changes no byte; the store
// keeps working and its lock stays its own. Method: verify beside an open store, write, then
// verify after close.
#[test]
fn verify_beside_an_open_store_says_it_is_in_use() {
    let dir = written(3);
    let store = Store::open(dir.clone(), options(None)).expect("open");
    let before = snapshot(&dir);
    let report = Store::verify(dir.clone(), None).expect("verify beside an open store");
    assert!(report.in_use);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
    assert_eq!(snapshot(&dir), before);
    store
        .upsert(b"after", b"check")
        .expect("the store still writes");
    assert!(
        Store::open(dir.clone(), options(None)).is_err(),
        "still locked"
    );
    store.close().expect("close");
    let report = Store::verify(dir, None).expect("verify after close");
    assert!(!report.in_use);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
}

// Goal: the engine named at creation is recorded; an open naming none uses it; naming
// another works and is recorded; it survives a power loss. Method: open with bwtree, reopen
// without a name, with masstree, crash, reopen without a name; verify reports it.
#[test]
fn engine_is_recorded() {
    let dir = SimDir::new(8);
    let store = Store::open(dir.clone(), options(Some("bwtree"))).expect("create");
    store.upsert(b"k", b"v").expect("upsert");
    store.close().expect("close");
    let store = Store::open(dir.clone(), options(None)).expect("reopen");
    assert_eq!(store.stats().engine, "bwtree");
    store.close().expect("close");
    // Another engine is refused unless the open asks to switch (issue 13).
    let err = Store::open(dir.clone(), options(Some("masstree"))).expect_err("conflict");
    assert!(
        err.to_string().contains("created with engine `bwtree`"),
        "{err}"
    );
    let switch = StoreOptions {
        switch_engine: true,
        ..options(Some("masstree"))
    };
    let store = Store::open(dir.clone(), switch).expect("other engine");
    assert_eq!(store.stats().engine, "masstree");
    assert_eq!(store.to_vec(), [(b"k".to_vec(), b"v".to_vec())]);
    store.close().expect("close");
    dir.crash_with(CrashMode::DropUnsynced);
    let store = Store::open(dir.clone(), options(None)).expect("reopen");
    assert_eq!(store.stats().engine, "masstree");
    store.close().expect("close");
    let report = Store::verify(dir.clone(), None).expect("verify");
    assert_eq!(report.engine_recorded.as_deref(), Some("masstree"));
    // A new store naming no engine gets the default, recorded.
    let fresh = SimDir::new(9);
    let store = Store::open(fresh.clone(), options(None)).expect("create");
    assert_eq!(store.stats().engine, forest_store::ENGINE_DEFAULT);
    store.close().expect("close");
    let report = Store::verify(fresh, None).expect("verify");
    assert_eq!(
        report.engine_recorded.as_deref(),
        Some(forest_store::ENGINE_DEFAULT)
    );
}

// Goal: a damaged meta file is an error naming it unless an engine is named, which rewrites
// it. Method: damage META, open without and with an engine.
#[test]
fn damaged_meta_needs_an_engine() {
    let dir = written(2);
    assert!(dir.damage("META", |b| b[20] ^= 1));
    let err = Store::open(dir.clone(), options(None)).expect_err("damaged meta");
    assert!(err.to_string().contains("META"), "{err}");
    let report = Store::verify(dir.clone(), None).expect("verify");
    assert_eq!(report.problems().len(), 1, "{:?}", report.problems());
    let store = Store::open(dir.clone(), options(Some("lockbtree"))).expect("named");
    assert_eq!(store.to_vec().len(), 2);
    store.close().expect("close");
    Store::open(dir, options(None)).expect("rewritten");
}
