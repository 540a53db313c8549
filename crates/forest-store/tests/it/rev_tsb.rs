//! Review rev-tsb (session 16): a temporal store over several shards (§IV-B1's EOSL-TS,
//! `store/temporal.rs`).

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};

use forest_core::Order;
use forest_store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[cfg(feature = "pause-points")]
use crate::temporal::writers_held_back;
use crate::temporal::{key, sharded, ENGINE};

type Snapshot = Vec<(Vec<u8>, Vec<u8>)>;

fn snapshot(store: &Store, t: u64) -> Snapshot {
    let mut out = Vec::new();
    store
        .scan_as_of(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            t,
            usize::MAX,
            &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                ControlFlow::Continue(())
            },
        )
        .expect("scan as of");
    out
}

// Checked and found sound (passes): six writers over three shards write and delete four
// shared keys (one hot leaf, many time splits) and batches of two keys; a reader takes
// `now()` and a scan as of it, and scans the same times again later while the writes go on:
// every answer stays the same (no version below `now()` lands after it, none is refused as
// older than its page's start). After a reopen (redo of the logs), every key's whole history
// is what it was: the timestamps the logs hold follow LSN order, so redo puts them back.
#[test]
fn as_of_answers_at_now_never_change_over_several_shards() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), sharded(ENGINE, 3)).expect("open");
    let done = AtomicBool::new(false);
    let mut shards_used = std::collections::BTreeSet::new();
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..6u64)
            .map(|w| {
                let store = &store;
                s.spawn(move || {
                    let shard = store.shard_of_this_thread();
                    let mut rng = StdRng::seed_from_u64(w);
                    for i in 0..600u32 {
                        let k = key(rng.random_range(0..4));
                        match rng.random_range(0..6) {
                            0 => {
                                store.remove_ts(&k).expect("remove");
                            }
                            1 => {
                                let mut b = forest_store::WriteBatch::new();
                                b.put(&key(4 + (i % 3)), &i.to_le_bytes());
                                b.put(&k, &i.to_le_bytes());
                                store.write_ts(&b).expect("batch");
                            }
                            _ => {
                                store.put_ts(&k, &i.to_le_bytes()).expect("put");
                            }
                        }
                    }
                    shard
                })
            })
            .collect();
        let reader = {
            let (store, done) = (&store, &done);
            s.spawn(move || {
                let mut seen: Vec<(u64, Snapshot)> = Vec::new();
                let mut checks = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let t = store.now().expect("now");
                    seen.push((t, snapshot(store, t)));
                    for (t, snap) in seen.iter().rev().take(8) {
                        assert_eq!(&snapshot(store, *t), snap, "the answer as of {t} changed");
                        checks += 1;
                    }
                }
                checks
            })
        };
        for w in writers {
            shards_used.insert(w.join().expect("writer"));
        }
        done.store(true, Ordering::SeqCst);
        assert!(reader.join().expect("reader") > 0);
    });
    assert!(
        shards_used.len() > 1,
        "writers on one shard only: {shards_used:?}"
    );
    type Histories = BTreeMap<u32, Vec<(u64, Option<Vec<u8>>)>>;
    let histories = |store: &Store| -> Histories {
        (0..8)
            .map(|i| {
                let h = store
                    .history(&key(i), 0, u64::MAX, Order::Ascending, usize::MAX)
                    .expect("history");
                (i, h)
            })
            .collect()
    };
    let before = histories(&store);
    drop(store);
    // The logs of all shards, merged by LSN: timestamps never go down, and go up from one
    // unit to the next (a batch's records share one).
    let mut stamped: Vec<(u64, u64, bool)> = Vec::new();
    for name in std::fs::read_dir(tmp.path()).expect("dir") {
        let name = name
            .expect("entry")
            .file_name()
            .into_string()
            .expect("name");
        if forest_store::wal::parse_log_name(&name).is_none() {
            continue;
        }
        let path = tmp.path().join(&name);
        let data = std::fs::read(&path).expect("read log");
        let decoded = forest_store::wal::decode_log(&path, &data).expect("decode");
        for r in decoded.records.iter().filter(|r| r.op.is_data()) {
            stamped.push((
                r.lsn,
                r.ts.expect("a temporal record has a timestamp"),
                r.batch_more,
            ));
        }
    }
    stamped.sort_unstable();
    assert!(stamped.len() > 1000, "{} records", stamped.len());
    for pair in stamped.windows(2) {
        let ((_, ts0, more0), (_, ts1, _)) = (pair[0], pair[1]);
        assert!(
            if more0 { ts1 == ts0 } else { ts1 > ts0 },
            "timestamps out of LSN order: {pair:?}"
        );
    }
    let store = Store::open_path(tmp.path(), sharded(ENGINE, 3)).expect("reopen");
    assert!(store.recovery_report().records_replayed > 0);
    assert_eq!(histories(&store), before);
    // More writes after the reopen stamp above every version redone.
    let newest = before
        .values()
        .flat_map(|h| h.iter().map(|v| v.0))
        .max()
        .expect("some");
    assert!(store.put_ts(&key(0), b"after").expect("put") > newest);
    store.close().expect("close");
}

// F1 in a store: one shard's unit held between its tick and its apply (a descheduled
// thread; here the pause point `temporal:ticked`) while writers of another shard update a key
// on the same leaf: after one time split at the held timestamp the leaf could neither
// time-split nor consolidate, so every further write folded a longer chain. Since F2's fix a
// write waits, applied but not yet acknowledged, for the held unit (`temporal:settling`), so
// each writer thread adds one version during the stall: here 100 threads, one write each.
// The tsbtree test `rev_tsb::a_held_timestamp_keeps_the_page_consolidated` shows the same
// without a store.
#[cfg(feature = "pause-points")]
#[test]
fn a_held_unit_keeps_other_shards_pages_consolidated() {
    let _serial = crate::pause_hook_serial();
    use forest_store::{Durability, StoreOptions};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    let tmp = tempfile::tempdir().expect("tempdir");
    let options = || StoreOptions {
        durability: Durability::Periodic { interval_ms: 5 },
        ..sharded(ENGINE, 2)
    };
    let store = Store::open_path(tmp.path(), options()).expect("open");
    let consolidations = |store: &Store| {
        store
            .stats()
            .index
            .counters
            .iter()
            .find(|(n, _)| *n == "consolidations")
            .map_or(0, |c| c.1)
    };
    let (k00, k01) = (key(0), key(1));
    store.put_ts(&k00, b"old").expect("put");
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (settling_tx, settling_rx) = mpsc::channel::<()>();
    let (paused_tx, go_rx) = (Mutex::new(paused_tx), Mutex::new(go_rx));
    let settling_tx = Mutex::new(settling_tx);
    let fired = AtomicBool::new(false);
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        if name == "temporal:ticked"
            && std::thread::current().name() == Some("rev-held")
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
    let (before, after) = std::thread::scope(|s| {
        let (store, k00, k01) = (&store, &k00, &k01);
        let (shard_tx, shard_rx) = mpsc::channel::<usize>();
        let held = std::thread::Builder::new()
            .name("rev-held".into())
            .spawn_scoped(s, move || {
                shard_tx
                    .send(store.shard_of_this_thread())
                    .expect("test alive");
                store.put_ts(k00, b"held")
            })
            .expect("spawn");
        let held_shard = shard_rx.recv().expect("shard");
        paused_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the held writer reached its pause point");
        // Writers of the other shard, each applied and waiting for the held unit.
        let mut writers = writers_held_back(s, store, k01, held_shard, 40, &settling_rx);
        let before = consolidations(store);
        writers.extend(writers_held_back(
            s,
            store,
            k01,
            held_shard,
            60,
            &settling_rx,
        ));
        let after = consolidations(store);
        go_tx.send(()).expect("held alive");
        held.join().expect("held").expect("held applies");
        for writer in writers {
            writer.join().expect("writer");
        }
        (before, after)
    });
    forest_core::pause::set_pause_hook(None);
    assert!(
        after > before,
        "60 writes of another shard while one unit was held: no consolidation ({before} \
         before, {after} after)"
    );
}

// F2: under `periodic` durability (acknowledged at once) a unit of another shard with a lower
// timestamp may still be in flight when a write is acknowledged, so `now()` (ASOF.NOW) is
// below the acknowledged write's own timestamp: the writer's as-of read "at now" does not see
// its own acknowledged write, which `get` already returns. With one shard (before) a unit
// applied before the next could tick, so `now()` was at or above every acknowledged write.
#[cfg(feature = "pause-points")]
#[test]
fn now_is_at_or_after_an_acknowledged_write() {
    let _serial = crate::pause_hook_serial();
    use forest_store::{Durability, StoreOptions};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(
        tmp.path(),
        StoreOptions {
            durability: Durability::Periodic { interval_ms: 5 },
            ..sharded(ENGINE, 2)
        },
    )
    .expect("open");
    let (k00, k01) = (key(0), key(1));
    store.put_ts(&k01, b"before").expect("put");
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let release_tx = Mutex::new(go_tx.clone());
    let released = AtomicBool::new(false);
    let (paused_tx, go_rx) = (Mutex::new(paused_tx), Mutex::new(go_rx));
    let fired = AtomicBool::new(false);
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        if name == "temporal:ticked"
            && std::thread::current().name() == Some("rev-held-f2")
            && !fired.swap(true, Ordering::SeqCst)
        {
            paused_tx
                .lock()
                .expect("hook")
                .send(())
                .expect("test alive");
            go_rx.lock().expect("hook").recv().expect("test alive");
        }
        // The other shard's write waits for the held unit before it is acknowledged: let
        // the held unit go then.
        if name == "temporal:settling" && !released.swap(true, Ordering::SeqCst) {
            let _ = release_tx.lock().expect("hook").send(());
        }
    })));
    let (mine, now, as_of_now, current) = std::thread::scope(|s| {
        let (store, k00, k01) = (&store, &k00, &k01);
        let (shard_tx, shard_rx) = mpsc::channel::<usize>();
        let held = std::thread::Builder::new()
            .name("rev-held-f2".into())
            .spawn_scoped(s, move || {
                shard_tx
                    .send(store.shard_of_this_thread())
                    .expect("test alive");
                store.put_ts(k00, b"held")
            })
            .expect("spawn");
        let held_shard = shard_rx.recv().expect("shard");
        paused_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the held writer reached its pause point");
        let seen = (0..64)
            .find_map(|_| {
                s.spawn(move || {
                    if store.shard_of_this_thread() == held_shard {
                        return None;
                    }
                    let mine = store.put_ts(k01, b"mine").expect("acknowledged");
                    let now = store.now().expect("now");
                    let mut out = Vec::new();
                    let as_of_now = store
                        .get_as_of(k01, now, &mut out)
                        .expect("as of now")
                        .then_some(out);
                    let mut cur = Vec::new();
                    let current = store.get(k01, &mut cur).then_some(cur);
                    Some((mine, now, as_of_now, current))
                })
                .join()
                .expect("writer")
            })
            .expect("a thread on the other shard");
        // Without the wait the writer returned before the held unit applied: let it go.
        let _ = go_tx.send(());
        held.join().expect("held").expect("held applies");
        seen
    });
    forest_core::pause::set_pause_hook(None);
    assert_eq!(
        current.as_deref(),
        Some(&b"mine"[..]),
        "get sees the acknowledged write"
    );
    assert!(
        now >= mine && as_of_now.as_deref() == Some(&b"mine"[..]),
        "acknowledged write at {mine}, now() {now}: as of now the key is {:?}",
        as_of_now.as_deref().map(String::from_utf8_lossy)
    );
}

// rev-tsb2 F1: `Store::settle` waits for every unit in flight at or below the clock, and
// only an applied unit clears its slot (`InFlight::applied`). A unit whose apply panics
// (an engine bug; FailOnUnwind fails the store) never clears its slot, so a write of another
// shard that applied before the panic and is settling loops forever: it never sees the
// store's failure, and its caller (a server connection, a close) hangs.
// Method: two shards, `periodic`; a writer paused at `temporal:ticked`; a writer of the other
// shard applies and reaches `temporal:settling`; then the paused writer panics. The settling
// write must return (Ok or the store's failure) within 10 s.
#[cfg(feature = "pause-points")]
#[test]
fn a_write_settling_behind_a_panicked_unit_returns() {
    let _serial = crate::pause_hook_serial();
    use forest_store::{Durability, StoreOptions};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    let tmp = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        durability: Durability::Periodic { interval_ms: 5 },
        ..sharded(ENGINE, 2)
    };
    let store = Arc::new(Store::open_path(tmp.path(), options).expect("open"));
    store.put_ts(&key(0), b"old").expect("put");
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (settling_tx, settling_rx) = mpsc::channel::<()>();
    let (paused_tx, go_rx) = (Mutex::new(paused_tx), Mutex::new(go_rx));
    let settling_tx = Mutex::new(settling_tx);
    let fired = AtomicBool::new(false);
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        let me = std::thread::current();
        if name == "temporal:ticked"
            && me.name() == Some("rev-tsb2-panics")
            && !fired.swap(true, Ordering::SeqCst)
        {
            paused_tx
                .lock()
                .expect("hook")
                .send(())
                .expect("test alive");
            go_rx.lock().expect("hook").recv().expect("test alive");
            panic!("injected: the unit's apply panics");
        }
        if name == "temporal:settling" && me.name() == Some("rev-tsb2-settles") {
            let _ = settling_tx.lock().expect("hook").send(());
        }
    })));
    let (shard_tx, shard_rx) = mpsc::channel::<usize>();
    let held = {
        let store = Arc::clone(&store);
        std::thread::Builder::new()
            .name("rev-tsb2-panics".into())
            .spawn(move || {
                shard_tx
                    .send(store.shard_of_this_thread())
                    .expect("test alive");
                store.put_ts(&key(0), b"held")
            })
            .expect("spawn")
    };
    let held_shard = shard_rx.recv().expect("shard");
    paused_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the held writer reached its pause point");
    // A writer on the other shard (one on the held shard would wait for its lock).
    let (done_tx, done_rx) = mpsc::channel();
    loop {
        let (other_tx, other_rx) = mpsc::channel::<bool>();
        let store = Arc::clone(&store);
        let done_tx = done_tx.clone();
        std::thread::Builder::new()
            .name("rev-tsb2-settles".into())
            .spawn(move || {
                let other = store.shard_of_this_thread() != held_shard;
                other_tx.send(other).expect("test alive");
                if other {
                    let _ = done_tx.send(store.put_ts(&key(1), b"new").map(|_| ()));
                }
            })
            .expect("spawn");
        if other_rx.recv().expect("writer") {
            break;
        }
    }
    settling_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the other shard's write applied and settles behind the held unit");
    go_tx.send(()).expect("held alive");
    assert!(held.join().is_err(), "the held writer panicked");
    let outcome = done_rx.recv_timeout(Duration::from_secs(10));
    forest_core::pause::set_pause_hook(None);
    let outcome = outcome.expect(
        "the write settling behind the panicked unit never returned (Store::settle spins on \
         its slot forever)",
    );
    // Either acknowledged before the failure or refused with it; never a hang.
    let _ = outcome;
}

// rev-tsb2: a temporal checkpoint written by the streaming export and the external sort
// (session 17) must be byte-identical to the one main wrote (one copy of every leaf's history,
// in memory) for the same index. Method: 20 000 versions put at fixed timestamps (a hot key,
// 60 others, tombstones, units of 3 keys at one timestamp) on tiny pages (key and time splits),
// then checkpoints for thresholds at, just below and just above versions' timestamps (a time
// split's start is one of them) and several cuts, before and after retention; each file's
// entry count is checked against the rule (versions from T on, and each key's newest value
// before T), and a digest of all the files is printed: run the same test on main and on the
// branch and compare the digests.
#[test]
fn a_checkpoint_is_byte_identical_to_mains() {
    use forest_store::checkpoint::{self, TemporalBlock};
    use forest_store::file::SimDir;
    use std::hash::{Hash, Hasher};

    let index = forest_store::new_engine("tsbtree:page=6,index_page=6").expect("engine");
    let temporal = index.as_temporal().expect("temporal");
    let mut model: BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(18);
    let mut ts = 0u64;
    for i in 0..20_000u64 {
        ts += 10;
        let keys: Vec<Vec<u8>> = if i % 50 == 0 {
            (0..3).map(|_| key(rng.random_range(0..60))).collect()
        } else if rng.random_bool(0.3) {
            vec![b"hot".to_vec()]
        } else {
            vec![key(rng.random_range(0..60))]
        };
        let mut seen = std::collections::BTreeSet::new();
        for k in keys {
            if !seen.insert(k.clone()) {
                continue;
            }
            let value = (!rng.random_ratio(1, 9)).then(|| {
                let n = rng.random_range(0..100);
                (0..n).map(|_| rng.random::<u8>()).collect::<Vec<u8>>()
            });
            temporal
                .put_version(&k, ts, value.as_deref())
                .expect("in order");
            model.entry(k).or_default().insert(ts, value);
        }
    }
    let expected = |model: &BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>>, t: u64, cut: u64| {
        model
            .values()
            .map(|vs| {
                let from_t = vs.range(t..=cut).count();
                let before = vs.range(..t).next_back().filter(|(_, v)| v.is_some());
                from_t + usize::from(before.is_some())
            })
            .sum::<usize>() as u64
    };
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let mut files = 0;
    let mut check = |t: u64,
                     cut: u64,
                     model: &BTreeMap<_, _>,
                     digest: &mut std::collections::hash_map::DefaultHasher| {
        let dir = SimDir::new(4);
        let block = TemporalBlock { threshold: t, cut };
        let info = checkpoint::write_temporal(&dir, temporal, 3, block, || 8).expect("write");
        assert_eq!(info.entry_count, expected(model, t, cut), "T {t} cut {cut}");
        let (_, data) = checkpoint::read(&dir, &checkpoint::checkpoint_tmp_name(3)).expect("read");
        (t, cut, data).hash(digest);
        files += 1;
    };
    let last = ts;
    for step in [1u64, 997, 2_500, 6_001, 13_003, 19_999] {
        let at = step * 10;
        for t in [at - 1, at, at + 1] {
            for cut in [t, at + 7_770, last - 10, last] {
                if cut >= t {
                    check(t, cut, &model, &mut digest);
                }
            }
        }
    }
    temporal.set_retention(60_000).expect("retention");
    for t in [60_000u64, 60_001, 99_990, 150_000] {
        for cut in [t, last] {
            check(t, cut, &model, &mut digest);
        }
    }
    println!(
        "rev-tsb2 checkpoint digest over {files} files: {:016x}",
        digest.finish()
    );
}

// rev-tsb2 F3: `Store::settle` waits for every unit in flight at or below the clock read
// after the write applied, not at or below the write's own timestamp; `now()` at or after
// the write needs only the older units applied. So a write's acknowledgement waits for
// units that ticked after it (a descheduled later writer of another shard), which is also
// why tests holding a unit had to go to one write per thread.
// Method: two shards, `periodic`; writer A paused at `temporal:ticked`; writer B of the other
// shard ticks after it (a later timestamp) and pauses there too; A goes on: its write applies
// and must be acknowledged within 5 s while B, younger, is still held.
#[cfg(feature = "pause-points")]
#[test]
fn an_acknowledgement_does_not_wait_for_a_later_unit() {
    let _serial = crate::pause_hook_serial();
    use forest_store::{Durability, StoreOptions};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    let tmp = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        durability: Durability::Periodic { interval_ms: 5 },
        ..sharded(ENGINE, 2)
    };
    let store = Arc::new(Store::open_path(tmp.path(), options).expect("open"));
    let (paused_tx, paused_rx) = mpsc::channel::<&'static str>();
    let (go_a_tx, go_a_rx) = mpsc::channel::<()>();
    let (go_b_tx, go_b_rx) = mpsc::channel::<()>();
    let paused_tx = Mutex::new(paused_tx);
    let (go_a_rx, go_b_rx) = (Mutex::new(go_a_rx), Mutex::new(go_b_rx));
    let (fired_a, fired_b) = (AtomicBool::new(false), AtomicBool::new(false));
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        if name != "temporal:ticked" {
            return;
        }
        match std::thread::current().name() {
            Some("rev-tsb2-a") if !fired_a.swap(true, Ordering::SeqCst) => {
                paused_tx
                    .lock()
                    .expect("hook")
                    .send("a")
                    .expect("test alive");
                go_a_rx.lock().expect("hook").recv().expect("test alive");
            }
            Some("rev-tsb2-b") if !fired_b.swap(true, Ordering::SeqCst) => {
                paused_tx
                    .lock()
                    .expect("hook")
                    .send("b")
                    .expect("test alive");
                go_b_rx.lock().expect("hook").recv().expect("test alive");
            }
            _ => {}
        }
    })));
    let (a_shard_tx, a_shard_rx) = mpsc::channel::<usize>();
    let (a_done_tx, a_done_rx) = mpsc::channel();
    let a = {
        let (store, a_done_tx) = (Arc::clone(&store), a_done_tx.clone());
        std::thread::Builder::new()
            .name("rev-tsb2-a".into())
            .spawn(move || {
                a_shard_tx
                    .send(store.shard_of_this_thread())
                    .expect("test alive");
                let _ = a_done_tx.send(store.put_ts(&key(0), b"a").map(|_| ()));
            })
            .expect("spawn")
    };
    let a_shard = a_shard_rx.recv().expect("shard");
    assert_eq!(paused_rx.recv_timeout(Duration::from_secs(60)), Ok("a"));
    let b = loop {
        let (other_tx, other_rx) = mpsc::channel::<bool>();
        let store = Arc::clone(&store);
        let b = std::thread::Builder::new()
            .name("rev-tsb2-b".into())
            .spawn(move || {
                let other = store.shard_of_this_thread() != a_shard;
                other_tx.send(other).expect("test alive");
                if other {
                    store.put_ts(&key(1), b"b").expect("b");
                }
            })
            .expect("spawn");
        if other_rx.recv().expect("b") {
            break b;
        }
        b.join().expect("b on a's shard wrote nothing");
    };
    assert_eq!(paused_rx.recv_timeout(Duration::from_secs(60)), Ok("b"));
    go_a_tx.send(()).expect("a alive");
    let acked = a_done_rx.recv_timeout(Duration::from_secs(5));
    go_b_tx.send(()).expect("b alive");
    a.join().expect("a");
    b.join().expect("b");
    forest_core::pause::set_pause_hook(None);
    acked
        .expect("A's write, older than the held unit B, was not acknowledged while B was held")
        .expect("A's write");
}
