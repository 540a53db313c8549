//! The store's API, recovery reports and concurrency (issue 5 "The store", "Checkpoints and
//! recovery"; "Test that race").

use std::sync::Arc;

use forest_core::Error;
use forest_store::file::{CrashMode, FaultPlan, SimDir};
use forest_store::wal::{LogStream, Op};
use forest_store::{engine_names, BatchOp, Durability, Rmw, Store, StoreOptions};

fn options(engine: &str, durability: Durability, shards: usize) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        durability,
        shards,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

// Goal: a second opener of one directory gets a clear error, and the lock goes with the
// store. Method: open twice on SimDir and on a real directory.
#[test]
fn second_opener_is_refused() {
    let dir = SimDir::new(1);
    let store = Store::open(dir.clone(), StoreOptions::default()).expect("open");
    let err = Store::open(dir.clone(), StoreOptions::default()).expect_err("locked");
    assert!(err.to_string().contains("already open"), "{err}");
    store.close().expect("close");
    Store::open(dir, StoreOptions::default()).expect("reopen after close");

    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), StoreOptions::default()).expect("open");
    let err = Store::open_path(tmp.path(), StoreOptions::default()).expect_err("locked");
    assert!(err.to_string().contains("LOCK"), "{err}");
    store.upsert(b"k", b"v").expect("upsert");
    store.close().expect("close");
    let store = Store::open_path(tmp.path(), StoreOptions::default()).expect("reopen");
    let mut out = Vec::new();
    assert!(store.get(b"k", &mut out));
    assert_eq!(out, b"v");
}

// Goal: bad options are clear errors. Method: an unknown engine and zero shards.
#[test]
fn bad_options_are_errors() {
    let err =
        Store::open(SimDir::new(2), options("nope", Durability::Group, 2)).expect_err("engine");
    assert!(matches!(err, Error::UnknownEngine { .. }));
    assert!(err.to_string().contains("lockbtree, bwtree"), "{err}");
    let err =
        Store::open(SimDir::new(2), options("bwtree", Durability::Group, 0)).expect_err("shards");
    assert!(matches!(err, Error::Config(_)), "{err}");
}

// Goal: the operations mirror Index and report what they did. Method: each op once, then a
// clean reopen with both engines and all modes.
#[test]
fn operations_and_reopen() {
    for engine in engine_names() {
        for durability in [
            Durability::Sync,
            Durability::Group,
            Durability::Periodic { interval_ms: 5 },
        ] {
            let dir = SimDir::new(3);
            let store = Store::open(dir.clone(), options(engine, durability, 3)).expect("open");
            assert!(store.insert(b"a", b"1").expect("insert"));
            assert!(!store.insert(b"a", b"2").expect("insert again"));
            assert!(store.update(b"a", b"3").expect("update"));
            assert!(!store.update(b"b", b"3").expect("update absent"));
            store.upsert(b"b", b"4").expect("upsert");
            assert!(store.remove(b"b").expect("remove"));
            assert!(!store.remove(b"b").expect("remove absent"));
            let old = store
                .read_modify_write(b"n", |old| {
                    let n = old.map_or(0, |v| u64::from_le_bytes(v.try_into().expect("8 bytes")));
                    Ok(Rmw::Put((n + 1).to_le_bytes().to_vec()))
                })
                .expect("rmw");
            assert_eq!(old, None);
            let changed = store
                .write_batch(&[
                    BatchOp::Insert(b"c".to_vec(), b"5".to_vec()),
                    BatchOp::Insert(b"a".to_vec(), b"x".to_vec()),
                    BatchOp::Remove(b"zz".to_vec()),
                    BatchOp::Upsert(b"d".to_vec(), b"6".to_vec()),
                ])
                .expect("batch");
            assert_eq!(changed, [true, false, false, true]);
            let err = store.upsert(&vec![0; 20_000], b"v").expect_err("long key");
            assert!(matches!(err, Error::KeyTooLong { .. }));
            let before = store.to_vec();
            let stats = store.stats();
            assert_eq!(stats.lsn_next, 8, "one LSN per change");
            store.close().expect("close");
            dir.crash_with(CrashMode::DropUnsynced);
            let store = Store::open(dir, options(engine, durability, 2)).expect("reopen");
            assert_eq!(store.to_vec(), before, "{engine} {durability}");
            assert_eq!(store.recovery_report().records_replayed, 7);
        }
    }
}

// Goal: two writes to one key replay in the order the index applied them even from
// different shard logs. Method: 8 threads upsert the same few keys, then a power loss
// after the last acknowledgement; the recovered state equals the state before it.
#[test]
fn same_key_race_replays_in_apply_order() {
    for engine in engine_names() {
        let dir = SimDir::new(4);
        let store = Arc::new(
            Store::open(dir.clone(), options(engine, Durability::Group, 4)).expect("open"),
        );
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..300u32 {
                        let key = [b'k', (i % 3) as u8];
                        store
                            .upsert(&key, &[t.to_le_bytes(), i.to_le_bytes()].concat())
                            .expect("upsert");
                        if i % 7 == 0 {
                            store.remove(&key).expect("remove");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer");
        }
        let before = store.to_vec();
        dir.crash_with(CrashMode::DropUnsynced);
        drop(store);
        let store = Store::open(dir, options(engine, Durability::Group, 4)).expect("reopen");
        assert_eq!(store.to_vec(), before, "{engine}");
    }
}

// Goal: a checkpoint taken while writers run loses nothing, and old logs go away. Method:
// writers on 4 threads, checkpoints from another, then a power loss and reopen.
#[test]
fn background_checkpoint_while_writing() {
    let dir = SimDir::new(5);
    let store = Arc::new(
        Store::open(dir.clone(), options("lockbtree", Durability::Group, 4)).expect("open"),
    );
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..400u32 {
                    let key = [t.to_be_bytes(), (i % 50).to_be_bytes()].concat();
                    store.upsert(&key, &i.to_le_bytes()).expect("upsert");
                }
            })
        })
        .collect();
    let checkpointer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            for _ in 0..5 {
                store.checkpoint().expect("checkpoint");
            }
        })
    };
    for w in writers {
        w.join().expect("writer");
    }
    checkpointer.join().expect("checkpointer");
    let before = store.to_vec();
    assert_eq!(before.len(), 200);
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let store =
        Store::open(dir.clone(), options("lockbtree", Durability::Group, 4)).expect("reopen");
    assert_eq!(store.to_vec(), before);
    assert!(store.recovery_report().checkpoint_start_lsn.is_some());
    let names = forest_store::file::Dir::list(&dir).expect("list");
    let checkpoints = names
        .iter()
        .filter(|n| n.starts_with("checkpoint-"))
        .count();
    assert!(checkpoints <= 3, "old checkpoints deleted: {names:?}");
}

// Goal: a damaged newest checkpoint is reported and the older one used with the logs after
// it. Method: two checkpoints, more writes, flip a byte in the newest, reopen.
#[test]
fn damaged_checkpoint_falls_back() {
    let dir = SimDir::new(6);
    let store = Store::open(dir.clone(), options("bwtree", Durability::Group, 2)).expect("open");
    for round in 0..3u8 {
        for i in 0..20u8 {
            store.upsert(&[i], &[round, i]).expect("upsert");
        }
        if round < 2 {
            store.checkpoint().expect("checkpoint");
        }
    }
    let before = store.to_vec();
    store.close().expect("close");
    let names = forest_store::file::Dir::list(&dir).expect("list");
    let newest = names
        .iter()
        .filter(|n| forest_store::checkpoint::parse_checkpoint_name(n).is_some())
        .max()
        .expect("a checkpoint")
        .clone();
    assert!(dir.damage(&newest, |bytes| bytes[40] ^= 1));
    let store = Store::open(dir, options("bwtree", Durability::Group, 2)).expect("reopen");
    assert_eq!(store.to_vec(), before);
    let report = store.recovery_report();
    assert_eq!(report.corrupt_checkpoints.len(), 1, "{report:?}");
    assert!(report.corrupt_checkpoints[0].contains(&newest));
}

/// The file offsets of the records of `name` whose op is `op`, in order.
fn record_offsets(dir: &SimDir, name: &str, op: Op) -> Vec<u64> {
    let mut stream = LogStream::open(dir, name).expect("open log");
    let mut out = Vec::new();
    while stream.advance().expect("decode") {
        if stream.op() == Some(op) {
            out.push(stream.record_start().expect("current"));
        }
    }
    out
}

// Goal: damage in a log before a mark that proves it durable is refused, naming the file
// and offset; damage in the last bytes (the close's seal) is a torn tail, cut and reported.
// Method: flip bytes in a cleanly closed store's log (issue 12, defect 2).
#[test]
fn log_damage_is_reported() {
    let setup = |seed| {
        let dir = SimDir::new(seed);
        let store =
            Store::open(dir.clone(), options("lockbtree", Durability::Sync, 1)).expect("open");
        for i in 0..10u8 {
            store.upsert(&[i], &[i; 30]).expect("upsert");
        }
        store.close().expect("close");
        let log = forest_store::file::Dir::list(&dir)
            .expect("list")
            .into_iter()
            .find(|n| n.starts_with("log-"))
            .expect("a log");
        (dir, log)
    };
    let (dir, log) = setup(7);
    let third = record_offsets(&dir, &log, Op::Put)[2];
    assert!(dir.damage(&log, |bytes| bytes[third as usize + 40] ^= 1));
    let err = Store::open(dir, StoreOptions::default()).expect_err("corrupt");
    let text = err.to_string();
    assert!(matches!(err, Error::Corrupt { .. }), "{text}");
    assert!(text.contains(&log), "{text}");
    assert!(text.contains(&format!("from offset {third}")), "{text}");

    let (dir, log) = setup(8);
    assert!(dir.damage(&log, |bytes| {
        let len = bytes.len();
        bytes[len - 3] ^= 1;
    }));
    let store = Store::open(dir, options("lockbtree", Durability::Sync, 1)).expect("torn tail");
    let report = store.recovery_report();
    assert_eq!(report.torn_tails.len(), 1, "{report:?}");
    assert_eq!(store.to_vec().len(), 10);
}

// Goal: an injected fsync failure fails the waiting write, acknowledges nothing more and
// refuses later writes until reopen. Method: a fault plan on the next sync.
#[test]
fn fsync_failure_refuses_writes_until_reopen() {
    for durability in [Durability::Sync, Durability::Group] {
        let dir = SimDir::new(9);
        let store = Store::open(dir.clone(), options("lockbtree", durability, 2)).expect("open");
        store.upsert(b"a", b"1").expect("upsert");
        dir.set_faults(FaultPlan::sync(1));
        let err = store.upsert(b"b", b"2").expect_err("fsync fails");
        assert!(matches!(err, Error::Io { .. }), "{err}");
        let err = store.upsert(b"c", b"3").expect_err("refused");
        assert!(err.to_string().contains("reopen"), "{err}");
        assert!(store.close().is_err());
        dir.set_faults(FaultPlan::default());
        dir.crash_with(CrashMode::DropUnsynced);
        let store = Store::open(dir, options("lockbtree", durability, 2)).expect("reopen");
        let mut out = Vec::new();
        assert!(store.get(b"a", &mut out), "acknowledged write kept");
        assert!(!store.get(b"c", &mut out), "refused write absent");
        store.upsert(b"d", b"4").expect("writes again after reopen");
    }
}

// Goal: `periodic` acknowledges at once and still forces within its interval. Method: write,
// then wait a few intervals without calling sync, and look at the durable LSN.
#[test]
fn periodic_forces_within_its_interval() {
    let dir = SimDir::new(10);
    let store = Store::open(
        dir,
        options("lockbtree", Durability::Periodic { interval_ms: 5 }, 2),
    )
    .expect("open");
    for i in 0..50u8 {
        store.upsert(&[i], b"v").expect("upsert");
    }
    let last = store.stats().lsn_next - 1;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.stats().durable_lsn < last {
        assert!(std::time::Instant::now() < deadline, "not forced in time");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

// Goal: group commit shares fsyncs among writers on a real disk. Method: 32 threads write
// through one store in `group` mode; fewer fsyncs than acknowledged writes.
#[test]
fn group_commit_shares_fsyncs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        Store::open_path(tmp.path(), options("lockbtree", Durability::Group, 4)).expect("open"),
    );
    let threads: Vec<_> = (0..32u32)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..40u32 {
                    store
                        .upsert(&[t.to_be_bytes(), i.to_be_bytes()].concat(), &[0; 100])
                        .expect("upsert");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let stats = store.stats();
    let writes = stats.lsn_next - 1;
    assert_eq!(writes, 32 * 40);
    assert!(
        stats.fsync_count < writes / 2,
        "{} fsyncs for {writes} writes",
        stats.fsync_count
    );
}

// Goal: a truncated or byte-flipped log or checkpoint of a cleanly closed store either
// recovers every acknowledged write or is refused as corruption: never a panic, never a
// quiet loss (issue 12, defect 2). Method: a store with two checkpoints and logs, one random
// damage per trial, then open.
#[test]
fn random_damage_recovers_everything_or_reports() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    type Map = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;
    let trials = if cfg!(debug_assertions) { 60 } else { 300 };
    for trial in 0..trials {
        let mut rng = StdRng::seed_from_u64(trial);
        let dir = SimDir::new(trial);
        let store =
            Store::open(dir.clone(), options("lockbtree", Durability::Sync, 1)).expect("open");
        let mut states: Vec<Map> = vec![Map::new()];
        for i in 0..60u32 {
            let key = vec![rng.random_range(0..10u8)];
            let mut state = states.last().expect("a state").clone();
            if rng.random_range(0..4) == 0 {
                if store.remove(&key).expect("remove") {
                    state.remove(&key);
                    states.push(state);
                }
            } else {
                let value = i.to_le_bytes().repeat(rng.random_range(1..8));
                store.upsert(&key, &value).expect("upsert");
                state.insert(key, value);
                states.push(state);
            }
            if i == 20 || i == 40 {
                store.checkpoint().expect("checkpoint");
            }
        }
        store.close().expect("close");
        let names: Vec<String> = forest_store::file::Dir::list(&dir)
            .expect("list")
            .into_iter()
            .filter(|n| n.starts_with("log-") || n.starts_with("checkpoint-"))
            .collect();
        let victim = names[rng.random_range(0..names.len())].clone();
        let cut = rng.random_bool(0.5);
        let at = rng.random::<u32>() as usize;
        dir.damage(&victim, |bytes| {
            if bytes.is_empty() {
                return;
            }
            let at = at % bytes.len();
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] ^= 1 << (at % 8);
            }
        });
        match Store::open(dir, options("lockbtree", Durability::Sync, 1)) {
            Ok(store) => {
                // Every write was acknowledged (sync) and the store closed cleanly: an open
                // that succeeds has lost nothing (issue 12: a loss is refused, never cut).
                let got: Map = store.to_vec().into_iter().collect();
                assert!(
                    &got == states.last().expect("a state"),
                    "trial {trial}: {victim} damaged: the store opened without every \
                     acknowledged write"
                );
            }
            Err(e) => assert!(
                matches!(e, Error::Corrupt { .. }),
                "trial {trial}: {victim} damaged: {e}"
            ),
        }
    }
}

// Goal: a new store's directory survives a power loss once the store acknowledged a write:
// open makes the directory's own name durable (its parent is fsynced). Method: a directory
// just created (its entry not yet durable), open, an acknowledged write, power loss, reopen.
#[test]
fn a_new_store_directory_survives_a_power_loss() {
    let dir = SimDir::new_uncreated(3);
    let store = Store::open(dir.clone(), options("masstree", Durability::Sync, 1)).expect("open");
    assert!(dir.is_entry_durable(), "open syncs the parent");
    store.upsert(b"k", b"v").expect("upsert");
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let store = Store::open(dir, options("masstree", Durability::Sync, 1)).expect("reopen");
    assert_eq!(store.to_vec(), vec![(b"k".to_vec(), b"v".to_vec())]);
}

// Goal: a keys-only scan hands out exactly the keys a full scan does, with empty values, in
// both orders, with and without a limit, on both sides of the short-scan buffer's size (the
// optimistic path and the streaming one). Method: 300 keys; compare against `scan_up_to`.
#[test]
fn keys_only_scans_match_full_scans() {
    use std::ops::{Bound, ControlFlow};

    use forest_core::Order;

    let store = Store::open(
        SimDir::new(3),
        options("masstree", Durability::Periodic { interval_ms: 5 }, 2),
    )
    .expect("open");
    for i in 0..300u32 {
        let key = format!("k{i:04}");
        store.upsert(key.as_bytes(), &[7; 200]).expect("upsert");
    }
    let bounds = [
        (Bound::Unbounded, Bound::Unbounded),
        (
            Bound::Included(&b"k0010"[..]),
            Bound::Excluded(&b"k0290"[..]),
        ),
        (
            Bound::Excluded(&b"k0100"[..]),
            Bound::Included(&b"k0102"[..]),
        ),
    ];
    for (lower, upper) in bounds {
        for order in [Order::Ascending, Order::Descending] {
            for limit in [1, 50, 128, 129, 250, usize::MAX] {
                let mut full = Vec::new();
                store.scan_up_to(lower, upper, order, limit, &mut |k, v| {
                    assert_eq!(v.len(), 200);
                    full.push(k.to_vec());
                    ControlFlow::Continue(())
                });
                let mut keys = Vec::new();
                store.scan_keys_up_to(lower, upper, order, limit, &mut |k, v| {
                    assert!(v.is_empty(), "a keys-only scan passes no value");
                    keys.push(k.to_vec());
                    ControlFlow::Continue(())
                });
                assert_eq!(keys, full, "{lower:?}..{upper:?} {order:?} limit {limit}");
                assert!(!keys.is_empty());
            }
        }
    }
}
