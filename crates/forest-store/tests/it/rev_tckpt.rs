//! Review rev-tckpt: temporal checkpoints taken while writers write (the cut read at the
//! rotation), with retention raised between them; the reopen must answer every history from
//! the threshold as before, and hold every acknowledged version at or after it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use forest_core::Order;
use forest_store::{Store, WriteBatch};

use crate::temporal::{options, ENGINE};

const KEYS: u32 = 40;

fn key(i: u32) -> Vec<u8> {
    format!("r{i:03}").into_bytes()
}

type Versions = BTreeMap<(Vec<u8>, u64), Option<Vec<u8>>>;

/// Every key's history from the store's threshold up to now.
fn histories(store: &Store) -> (u64, Versions) {
    let from = store.retention().expect("temporal");
    let mut out = Versions::new();
    for i in 0..KEYS {
        let k = key(i);
        for (ts, v) in store
            .history(&k, from, u64::MAX, Order::Ascending, usize::MAX)
            .expect("history")
        {
            out.insert((k.clone(), ts), v);
        }
    }
    (from, out)
}

// Goal: a checkpoint taken while units (single writes and three-key batches at one timestamp)
// go on loses no version and adds none: its cut separates the units below its start LSN from
// the later ones. Method: three writer threads and one thread that checkpoints in a loop and
// raises the threshold now and then (so logs are deleted); then every history from the
// threshold before a close and after the reopen must be equal, and every acknowledged version
// at or after the threshold must be in it.
#[test]
fn checkpoints_while_writing_keep_every_version() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), options(ENGINE)).expect("open");
    let acked: Mutex<Versions> = Mutex::new(Versions::new());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..3u32 {
            let (store, acked) = (&store, &acked);
            writers.push(s.spawn(move || {
                let mut x = u64::from(w) * 7919 + 1;
                for n in 0..600u32 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = key((x >> 33) as u32 % KEYS);
                    let v = format!("{w}-{n}").into_bytes();
                    match (x >> 20) % 4 {
                        0 => {
                            if let Some(ts) = store.remove_ts(&k).expect("remove") {
                                acked.lock().unwrap().insert((k, ts), None);
                            }
                        }
                        1 => {
                            let mut batch = WriteBatch::new();
                            let keys = [k.clone(), key(((x >> 40) as u32) % KEYS), key(n % KEYS)];
                            let mut distinct = keys.to_vec();
                            distinct.sort();
                            distinct.dedup();
                            for k in &distinct {
                                batch.put(k, &v);
                            }
                            let (_, ts) = store.write_ts(&batch).expect("batch");
                            let ts = ts.expect("a put batch writes");
                            let mut a = acked.lock().unwrap();
                            for k in distinct {
                                a.insert((k, ts), Some(v.clone()));
                            }
                        }
                        _ => {
                            let ts = store.put_ts(&k, &v).expect("put");
                            acked.lock().unwrap().insert((k, ts), Some(v));
                        }
                    }
                }
            }));
        }
        let checkpointer = s.spawn(|| {
            let mut rounds = 0u32;
            while !done.load(Ordering::SeqCst) {
                store.checkpoint().expect("checkpoint");
                rounds += 1;
                if rounds.is_multiple_of(3) {
                    let now = store.now().expect("now");
                    store.set_retention(now.saturating_sub(2_000)).ok();
                }
            }
            rounds
        });
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::SeqCst);
        let rounds = checkpointer.join().expect("checkpointer");
        assert!(rounds >= 2, "only {rounds} checkpoints ran");
    });
    let (from, before) = histories(&store);
    assert!(from > 0 && store.stats().checkpoint_count >= 2);
    let acked = acked.into_inner().unwrap();
    let missing: Vec<_> = acked
        .iter()
        .filter(|((_, ts), _)| *ts >= from)
        .filter(|(kt, v)| before.get(*kt) != Some(*v))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged versions missing before the close: {missing:?}"
    );
    store.close().expect("close");
    for round in 0..2 {
        let store = Store::open_path(tmp.path(), options(ENGINE)).expect("reopen");
        let report = store.recovery_report();
        assert!(report.checkpoint_start_lsn.is_some(), "{report:?}");
        let (from_after, after) = histories(&store);
        assert_eq!(from_after, from);
        let lost: Vec<_> = before
            .iter()
            .filter(|(k, _)| !after.contains_key(*k))
            .take(5)
            .collect();
        let extra: Vec<_> = after
            .iter()
            .filter(|(k, _)| !before.contains_key(*k))
            .take(5)
            .collect();
        assert!(
            lost.is_empty() && extra.is_empty(),
            "round {round}: lost {lost:?} extra {extra:?}"
        );
        assert_eq!(after, before, "round {round}");
        store.checkpoint().expect("checkpoint after reopen");
        store.close().expect("close");
    }
}

// Goal: `forest check` (Store::verify) reads a temporal store's version 3 checkpoints: no
// problem on an intact store, and a byte flipped in the newest checkpoint is reported against
// that file while recovery still succeeds from the older one (logs kept for it). Method: a
// tsbtree store on SimDir with a threshold and two checkpoints, closed; verify; damage; verify.
#[test]
fn verify_reads_temporal_checkpoints() {
    use forest_store::file::{Dir, SimDir};
    let dir = SimDir::new(11);
    let store = Store::open(dir.clone(), options(ENGINE)).expect("open");
    for i in 0..200u32 {
        store.put_ts(&key(i % KEYS), &i.to_le_bytes()).expect("put");
        if i.is_multiple_of(7) {
            store.remove_ts(&key((i + 3) % KEYS)).expect("remove");
        }
        if i == 120 {
            let now = store.now().expect("now");
            store.set_retention(now).expect("retention");
            store.checkpoint().expect("checkpoint");
        }
    }
    let threshold = store.retention().expect("retention");
    let before_last = store.now().expect("now");
    store.checkpoint().expect("checkpoint");
    let late = store.put_ts(b"late", b"v").expect("put");
    let live = store.to_vec().len() as u64;
    store.close().expect("close");
    let report = Store::verify(dir.clone(), None).expect("verify");
    assert!(report.problems().is_empty(), "{:?}", report.problems());
    assert_eq!(report.checkpoints.len(), 2, "{report:?}");
    assert!(
        report.checkpoints.iter().all(|c| c.info.is_some()),
        "{report:?}"
    );
    // T and each checkpoint's cut, for `forest check` to print (review rev-tckpt F5).
    assert_eq!(report.retention_recorded, threshold);
    for c in &report.checkpoints {
        let t = c.temporal.expect("a temporal checkpoint's block");
        assert_eq!(t.threshold, threshold, "{c:?}");
        assert!(threshold <= t.cut && t.cut < late, "{c:?}");
    }
    assert!(
        report
            .checkpoints
            .iter()
            .any(|c| c.temporal.is_some_and(|t| t.cut >= before_last)),
        "{report:?}"
    );
    let recovery = report.recovery.as_ref().expect("recoverable");
    assert_eq!(recovery.keys_recovered, live, "{recovery:?}");
    let newest = dir
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("checkpoint-"))
        .max_by_key(|n| forest_store::checkpoint::parse_checkpoint_name(n))
        .expect("a checkpoint");
    // Past the header (32) and the temporal block (24): inside the first entry.
    assert!(dir.damage(&newest, |b| b[70] ^= 1));
    let report = Store::verify(dir.clone(), None).expect("verify");
    let problems = report.problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains(&newest), "{problems:?}");
    let recovery = report
        .recovery
        .as_ref()
        .expect("recoverable from the older one");
    assert_eq!(recovery.keys_recovered, live, "{recovery:?}");
}

// Goal: the edge versions of a threshold survive a reopen from a temporal checkpoint: a key
// whose only version is below T, a tombstone at exactly T (and the value it ends), a value
// current at T whose successor came after the checkpoint's cut, a batch of keys at one
// timestamp. Method: set T at the tombstone's timestamp, checkpoint twice (logs deleted),
// write the successor, drop without close on SimDir (crash), reopen, read at T and after.
#[test]
fn threshold_edges_survive_a_checkpoint() {
    use forest_store::file::SimDir;
    let dir = SimDir::new(5);
    let store = Store::open(dir.clone(), options(ENGINE)).expect("open");
    let only = store.put_ts(b"only", b"o").expect("put");
    store.put_ts(b"ended", b"e").expect("put");
    store.put_ts(b"succ", b"s1").expect("put");
    let mut batch = WriteBatch::new();
    batch.put(b"b1", b"x").put(b"b2", b"y").put(b"b3", b"z");
    let (_, batch_ts) = store.write_ts(&batch).expect("batch");
    let batch_ts = batch_ts.expect("written");
    let t = store.remove_ts(b"ended").expect("remove").expect("present");
    for i in 0..60u32 {
        store.put_ts(&key(i % 9), &i.to_le_bytes()).expect("filler");
    }
    store.set_retention(t).expect("retention at the tombstone");
    store.checkpoint().expect("checkpoint");
    store.checkpoint().expect("checkpoint");
    let succ = store.put_ts(b"succ", b"s2").expect("put");
    store.sync().expect("sync");
    let reads = |store: &Store, what: &str| {
        let mut out = Vec::new();
        let get = |k: &[u8], at: u64, out: &mut Vec<u8>| {
            store
                .get_as_of(k, at, out)
                .expect("as of")
                .then(|| out.clone())
        };
        assert_eq!(get(b"only", t, &mut out), Some(b"o".to_vec()), "{what}");
        assert_eq!(get(b"ended", t, &mut out), None, "{what}");
        assert_eq!(get(b"succ", t, &mut out), Some(b"s1".to_vec()), "{what}");
        assert_eq!(get(b"succ", succ, &mut out), Some(b"s2".to_vec()), "{what}");
        for k in [&b"b1"[..], b"b2", b"b3"] {
            assert!(get(k, t, &mut out).is_some(), "{what}");
        }
        let h = store
            .history(b"ended", t, u64::MAX, Order::Ascending, 10)
            .expect("history");
        assert_eq!(h, vec![(t, None)], "{what}");
        let h = store
            .history(b"succ", t, u64::MAX, Order::Ascending, 10)
            .expect("history");
        assert_eq!(h.last(), Some(&(succ, Some(b"s2".to_vec()))), "{what}");
        assert!(only < t && batch_ts < t, "{what}");
    };
    reads(&store, "before");
    dir.crash();
    drop(store);
    let store = Store::open(dir.clone(), options(ENGINE)).expect("reopen");
    assert!(store.recovery_report().checkpoint_start_lsn.is_some());
    reads(&store, "after the crash");
    store.close().expect("close");
    let store = Store::open(dir.clone(), options(ENGINE)).expect("clean reopen");
    reads(&store, "after the clean reopen");
}
