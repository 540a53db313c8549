//! Temporal checkpoints (`checkpoint.rs` format version 3, `store/temporal.rs`): a power loss
//! while one is written, a store whose directory holds logs only (as builds before them left
//! it), and a store switched away from tsbtree loading one. The model and its checks are
//! `temporal.rs`'s.

use forest_core::Error;
use forest_store::file::{CrashMode, FaultKind, FaultPlan, SimDir};
use forest_store::{checkpoint, wal, Durability, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::temporal::{
    check_all_history, check_reads, options, raise_threshold, random_write, value_at, Model, ENGINE,
};

/// The start LSNs of the published checkpoints among `names`.
fn checkpoints(names: &[String]) -> Vec<u64> {
    names
        .iter()
        .filter_map(|n| checkpoint::parse_checkpoint_name(n))
        .collect()
}

/// `sync` durability: each write fsyncs itself (cheap on SimDir), no group commit to wait for.
fn sync_options() -> StoreOptions {
    StoreOptions {
        durability: Durability::Sync,
        ..options(ENGINE)
    }
}

/// Random writes into the store and the model.
fn writes(store: &Store, model: &mut Model, stamps: &mut Vec<u64>, rng: &mut StdRng, n: usize) {
    for _ in 0..n {
        random_write(store, model, stamps, rng);
    }
}

// Goal: a power loss while a temporal checkpoint is written (or published, or the logs after
// it deleted) loses no acknowledged version: the reopen answers every history from the
// threshold and as-of reads as the model. Method: a store on SimDir with a threshold and a
// first checkpoint, more writes (all acknowledged: sync durability), then the Nth write or sync
// of a second checkpoint fails and the power is lost in one of three ways; also one run
// without a fault. The checkpoint file is over 1 MiB, so it takes several writes.
#[test]
fn power_loss_while_the_checkpoint_is_written() {
    let seed = rand::random::<u64>();
    let mut plans: Vec<Option<FaultPlan>> = vec![None];
    for nth in 1..=5 {
        plans.push(Some(FaultPlan::write(nth, FaultKind::Eio)));
        plans.push(Some(FaultPlan::sync(nth)));
    }
    for (run, plan) in plans.into_iter().enumerate() {
        let what = format!("seed {seed} run {run} plan {plan:?}");
        let mut rng = StdRng::seed_from_u64(seed ^ run as u64);
        let dir = SimDir::new(seed ^ run as u64);
        let store = Store::open(dir.clone(), sync_options()).expect("open");
        let mut model = Model::new();
        let mut stamps = Vec::new();
        writes(&store, &mut model, &mut stamps, &mut rng, 40);
        raise_threshold(&store, &stamps, &mut rng, &what);
        store.checkpoint().expect("first checkpoint");
        writes(&store, &mut model, &mut stamps, &mut rng, 30);
        // Large values, so that the checkpoint file takes several appends of 1 MiB.
        let big = vec![7u8; 48 << 10];
        for i in 0..30u32 {
            let k = crate::temporal::key(i % 12);
            let ts = store.put_ts(&k, &big).expect("put");
            model.entry(k).or_default().insert(ts, Some(big.clone()));
            stamps.push(ts);
        }
        let failed = match &plan {
            Some(plan) => {
                dir.set_faults(plan.clone());
                match store.checkpoint() {
                    Ok(_) => false,
                    Err(e) => {
                        assert!(matches!(e, Error::Io { .. }), "{what}: {e}");
                        true
                    }
                }
            }
            None => {
                store.checkpoint().expect("second checkpoint");
                false
            }
        };
        match run % 3 {
            0 => dir.crash(),
            1 => dir.crash_scatter(),
            _ => dir.crash_with(CrashMode::DropUnsynced),
        }
        drop(store);
        dir.set_faults(FaultPlan::default());
        let store = Store::open(dir.clone(), sync_options()).expect("reopen");
        let report = store.recovery_report();
        assert!(report.checkpoint_start_lsn.is_some(), "{what}: {report:?}");
        if plan.is_none() {
            assert_eq!(report.records_replayed, 0, "{what}: {report:?}");
        }
        check_all_history(&store, &model, &what);
        for _ in 0..30 {
            check_reads(&store, &model, &stamps, &mut rng, &what);
        }
        // The store goes on: writes, a checkpoint, a clean reopen.
        writes(&store, &mut model, &mut stamps, &mut rng, 10);
        store.checkpoint().expect("checkpoint after the reopen");
        store.close().expect("close");
        let store = Store::open(dir.clone(), sync_options()).expect("clean reopen");
        check_all_history(&store, &model, &format!("{what} (failed: {failed}), clean"));
        store.close().expect("close");
    }
}

// Goal: a temporal store whose directory holds logs only (several log sets, no checkpoint:
// what the builds before temporal checkpoints left) opens and answers as before; its first
// checkpoints then let those logs go, and a store switched away from tsbtree loads the
// temporal checkpoint as each key's newest value. Method: three sessions of writes without a
// checkpoint, a reopen that replays them all, two checkpoints with writes between, a reopen
// from the checkpoint, then a switch to masstree.
#[test]
fn logs_only_store_opens_then_checkpoints() {
    let seed = rand::random::<u64>();
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Model::new();
    let mut stamps = Vec::new();
    for session in 0..3 {
        let store = Store::open_path(tmp.path(), options(ENGINE)).expect("open");
        writes(&store, &mut model, &mut stamps, &mut rng, 30);
        if session == 1 {
            raise_threshold(&store, &stamps, &mut rng, "logs only");
        }
        store.close().expect("close");
    }
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect()
    };
    assert!(checkpoints(&names(tmp.path())).is_empty());
    let store = Store::open_path(tmp.path(), options(ENGINE)).expect("open logs only");
    let what = format!("seed {seed} logs only");
    let report = store.recovery_report();
    assert_eq!(report.checkpoint_start_lsn, None, "{what}");
    // One record per version: every write of the three sessions is replayed.
    let versions: usize = model.values().map(|h| h.len()).sum();
    assert_eq!(
        report.records_replayed, versions as u64,
        "{what}: {report:?}"
    );
    check_all_history(&store, &model, &what);
    store.checkpoint().expect("checkpoint");
    writes(&store, &mut model, &mut stamps, &mut rng, 10);
    raise_threshold(&store, &stamps, &mut rng, &what);
    store.checkpoint().expect("checkpoint");
    let files = names(tmp.path());
    assert_eq!(checkpoints(&files).len(), 2, "{what}: {files:?}");
    for seq in 0..3 {
        assert!(
            !files.contains(&wal::log_name(seq, 0)),
            "{what}: log set {seq} is kept: {files:?}"
        );
    }
    check_all_history(&store, &model, &what);
    store.close().expect("close");

    let store = Store::open_path(tmp.path(), options(ENGINE)).expect("open from checkpoint");
    let report = store.recovery_report();
    assert!(report.checkpoint_start_lsn.is_some(), "{what}: {report:?}");
    assert_eq!(report.records_replayed, 0, "{what}: {report:?}");
    check_all_history(&store, &model, &format!("{what}, from the checkpoint"));
    for _ in 0..30 {
        check_reads(&store, &model, &stamps, &mut rng, &what);
    }
    store.checkpoint().expect("checkpoint");
    store.close().expect("close");

    // Away from tsbtree: the versions load as each key's newest value.
    let store = Store::open_path(
        tmp.path(),
        StoreOptions {
            switch_engine: true,
            ..options("masstree")
        },
    )
    .expect("switch to masstree");
    assert!(store.recovery_report().checkpoint_start_lsn.is_some());
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .keys()
        .filter_map(|k| value_at(&model, k, u64::MAX).map(|v| (k.clone(), v)))
        .collect();
    assert_eq!(store.to_vec(), want, "{what}: switched to masstree");
    store.close().expect("close");
}
