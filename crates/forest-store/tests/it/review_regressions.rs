//! Regression tests for the review findings fixed in commit 9506975 (issue 12 review): each
//! fails on the code before the fixes (4a4d529) and passes since. They grew from the
//! reviewer's scratch tests; each asserts the behaviour the fix promises.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use forest_core::{Index, IndexStats, Order, Result, Visitor};
use forest_store::file::{CrashMode, Dir, FaultKind, FaultPlan, SimDir};
use forest_store::wal::LogStream;
use forest_store::{Durability, Store, StoreOptions, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts(durability: Durability, shards: usize) -> StoreOptions {
    StoreOptions {
        engine: Some("lockbtree".into()),
        durability,
        shards,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

fn open(dir: &SimDir, shards: usize) -> Result<Store> {
    Store::open(dir.clone(), opts(Durability::Sync, shards))
}

fn get(store: &Store, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    store.get(key, &mut out).then_some(out)
}

fn state_of(store: &Store) -> Map {
    store.to_vec().into_iter().collect()
}

fn log_names(dir: &SimDir) -> Vec<String> {
    dir.list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("log-"))
        .collect()
}

/// The LSNs of the data records in the valid prefix of every log of `dir`.
fn data_lsns(dir: &SimDir) -> Vec<u64> {
    let mut lsns = Vec::new();
    for name in log_names(dir) {
        let mut stream = LogStream::open(dir, &name).expect("open log");
        while let Ok(true) = stream.advance() {
            if stream.op().map(|o| o.is_data()) == Some(true) {
                lsns.push(stream.lsn().expect("current record"));
            }
        }
    }
    lsns
}

/// Runs `body` on a thread and waits up to `limit` for it: a hang detector, not a timer of
/// speed (the thread is left behind if it hangs; the test fails).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        tx.send(body()).ok();
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?} (hang)"))
}

// ---------------------------------------------------------------------------------------
// C1: a failed open must not leave the logs looking cleanly closed.

/// Run 1: k1 acknowledged; k2's fsync fails (its bytes stay in the page cache only). Open A
/// (no power loss) replays k2 and fails its protective checkpoint (the `fail_write_nth`
/// write fails with ENOSPC). Open B writes k3 (acknowledged under sync) and closes; a power
/// loss. Returns None when the case is not reached (k2 became durable by chance, or open A
/// did not fail in its checkpoint), else open C's outcome.
fn failed_open_checkpoint(seed: u64, fail_write_nth: u64) -> Option<(String, Result<Store>)> {
    let dir = SimDir::new(seed);
    let s = open(&dir, 1).expect("open");
    s.upsert(b"k1", b"v1").expect("k1");
    dir.set_faults(FaultPlan::sync(1));
    assert!(s.upsert(b"k2", b"v2").is_err(), "k2's fsync fails");
    dir.set_faults(FaultPlan::default());
    drop(s);
    let log0 = log_names(&dir).into_iter().next().expect("a log");
    let durable = dir.durable_bytes(&log0).expect("durable").len() as u64;
    let live = dir.open(&log0).expect("open").len().expect("len");
    if durable == live {
        return None;
    }
    dir.set_faults(FaultPlan::write(fail_write_nth, FaultKind::NoSpace));
    let a = open(&dir, 1);
    dir.set_faults(FaultPlan::default());
    let a_err = match a {
        Ok(_) => return None,
        Err(e) => e.to_string(),
    };
    if a_err.contains("log-0000000000") {
        return None; // the failure hit recovery's own log writes, not the checkpoint
    }
    let context = format!("seed {seed}, write {fail_write_nth} failed (open A: {a_err})");
    let b = open(&dir, 1).unwrap_or_else(|e| panic!("{context}: open B: {e}"));
    b.upsert(b"k3", b"v3")
        .unwrap_or_else(|e| panic!("{context}: k3: {e}"));
    drop(b);
    dir.crash_with(CrashMode::DropUnsynced);
    Some((context, open(&dir, 1)))
}

// Goal: after a failed fsync, a reopen whose protective checkpoint fails (disk full) must
// not leave the logs looking cleanly closed, so later acknowledged writes survive a power
// loss (review C1). Method: for seeds and each write of the reopen failing with ENOSPC in
// turn, reach the case (k2 only in the page cache, the open's checkpoint failed), reopen,
// write k3 under sync, power loss: the store must open with k1 and k3.
#[test]
fn failed_open_checkpoint_does_not_pass_for_a_clean_close() {
    let mut reached = 0;
    for seed in 0..40 {
        for nth in 1..12 {
            let Some((context, c)) = failed_open_checkpoint(seed, nth) else {
                continue;
            };
            reached += 1;
            let c = c.unwrap_or_else(|e| panic!("{context}: open after the power loss: {e}"));
            assert_eq!(get(&c, b"k1"), Some(b"v1".to_vec()), "{context}: k1");
            assert_eq!(get(&c, b"k3"), Some(b"v3".to_vec()), "{context}: k3");
        }
        if reached >= 12 {
            break;
        }
    }
    assert!(reached > 0, "no seed reached the case");
}

// ---------------------------------------------------------------------------------------
// C2: an accepted loss (`forest check --repair`) sticks.

// Goal: after `Store::open_accepting_loss` of a store that lost a shard log, the next plain
// `Store::open` succeeds (review C2). Method: two shards, writes on two threads, clean
// close; remove a log not holding LSN 1; open refuses; open_accepting_loss, close; open.
#[test]
fn accepted_loss_sticks() {
    let dir = SimDir::new(4);
    let s = Arc::new(open(&dir, 2).expect("open"));
    for i in 0..5u8 {
        s.upsert(&[b'm', i], b"1").expect("upsert");
    }
    {
        let s = Arc::clone(&s);
        std::thread::spawn(move || s.upsert(b"t0", b"v").expect("upsert"))
            .join()
            .expect("writer");
    }
    Arc::into_inner(s).expect("sole").close().expect("close");
    let holds_lsn_1 = |name: &String| {
        let mut stream = LogStream::open(&dir, name).expect("open log");
        while stream.advance().expect("advance") {
            if stream.op().map(|o| o.is_data()) == Some(true) && stream.lsn() == Some(1) {
                return true;
            }
        }
        false
    };
    let victim = log_names(&dir)
        .into_iter()
        .find(|n| !holds_lsn_1(n))
        .expect("a log without LSN 1");
    dir.remove(&victim).expect("remove");
    dir.sync_dir().expect("sync_dir");
    assert!(open(&dir, 2).is_err(), "the loss of {victim} is refused");
    let repaired = Store::open_accepting_loss(dir.clone(), opts(Durability::Sync, 2))
        .expect("open accepting loss");
    assert!(get(&repaired, &[b'm', 0]).is_some() || get(&repaired, b"t0").is_some());
    repaired.close().expect("close after repair");
    let again = open(&dir, 2)
        .unwrap_or_else(|e| panic!("open after the repair refused the same loss again: {e}"));
    drop(again);
    open(&dir, 2).expect("and again");
}

// ---------------------------------------------------------------------------------------
// C3: a power loss during an ordinary reopen's reseal never makes the next open refuse.

/// A clean history: writes, a checkpoint (set 0 rotated out and sealed), writes into set 1,
/// clean close. Returns every key written.
fn clean_history(seed: u64) -> (SimDir, Map) {
    let dir = SimDir::new(seed);
    let s = open(&dir, 1).expect("open");
    let mut all = Map::new();
    for i in 0..5u8 {
        s.upsert(&[b'a', i], b"v").expect("upsert");
        all.insert(vec![b'a', i], b"v".to_vec());
    }
    s.checkpoint().expect("checkpoint");
    for i in 0..5u8 {
        s.upsert(&[b'b', i], b"v").expect("upsert");
        all.insert(vec![b'b', i], b"v".to_vec());
    }
    s.close().expect("close");
    (dir, all)
}

// Goal: a power loss in the middle of an ordinary reopen of a cleanly closed store (while
// recovery rewrites the last run's seals) never makes the next open refuse (review C3).
// Method: a clean history; the reopen's n-th write (EIO, ENOSPC) or n-th fsync fails, for
// each n in turn, then a power loss of each kind; the next open must succeed with every
// key.
#[test]
fn power_loss_during_reseal_is_not_refused() {
    let mut plans = Vec::new();
    for nth in 1..=6 {
        plans.push((
            format!("write {nth} EIO"),
            FaultPlan::write(nth, FaultKind::Eio),
        ));
        plans.push((
            format!("write {nth} ENOSPC"),
            FaultPlan::write(nth, FaultKind::NoSpace),
        ));
        plans.push((format!("fsync {nth}"), FaultPlan::sync(nth)));
    }
    let modes = [
        CrashMode::DropUnsynced,
        CrashMode::Random,
        CrashMode::Scatter,
    ];
    let mut failed_opens = 0;
    for (seed, mode) in modes.iter().enumerate() {
        for (what, plan) in &plans {
            let (dir, all) = clean_history(3 + seed as u64);
            dir.set_faults(plan.clone());
            let during = open(&dir, 1);
            failed_opens += usize::from(during.is_err());
            drop(during);
            dir.set_faults(FaultPlan::default());
            dir.crash_with(*mode);
            let context = format!("{what} of the reopen failed, then a power loss ({mode:?})");
            let store = open(&dir, 1).unwrap_or_else(|e| panic!("{context}: refused: {e}"));
            assert_eq!(state_of(&store), all, "{context}");
        }
    }
    assert!(failed_opens > 0, "no fault hit the reopen");
}

// ---------------------------------------------------------------------------------------
// C4: a cut whose fsync failed, a reopen, then a power loss.

const CUT_LOG: &str = "log-0000000000-000";

/// A store (one shard) whose log ends with an atomic batch whose last record is torn, as a
/// torn last write leaves it; r0..r2 before it are acknowledged. Returns them.
fn dir_with_a_torn_batch(seed: u64) -> (SimDir, Map) {
    let dir = SimDir::new(seed);
    let s = open(&dir, 1).expect("open");
    let mut acked = Map::new();
    for i in 0..3u8 {
        s.upsert(&[b'r', i], b"v").expect("upsert");
        acked.insert(vec![b'r', i], b"v".to_vec());
    }
    s.write(
        WriteBatch::new()
            .put(b"b1", b"x")
            .put(b"b2", b"x")
            .put(b"b3", b"x"),
    )
    .expect("batch");
    dir.crash_with(CrashMode::DropUnsynced);
    std::mem::forget(s);
    assert!(dir.damage(CUT_LOG, |b| {
        let n = b.len();
        b.truncate(n - 5);
    }));
    (dir, acked)
}

// Goal: a cut whose fsync failed, then a reopen without power loss, then a power loss: the
// store opens (no "record after the log's seal" refusal), no acknowledged write is lost and
// no LSN is reused (review C4). Method: a log ending in a torn batch; open 1 fails its 2nd
// fsync (recovery's cut), leaving the truncate only in the page cache; open 2 (no power
// loss) fails in its checkpoint (ENOSPC); power loss; open 3 must succeed with r0..r2 and
// without the cut batch; then writes acknowledged under sync, a power loss, and every one
// of them is there, the cut batch is not, and no LSN is in two records.
#[test]
fn failed_cut_sync_then_reopen_then_power_loss() {
    let mut reached = 0;
    for seed in 0..30 {
        let (dir, mut acked) = dir_with_a_torn_batch(seed);
        dir.set_faults(FaultPlan::sync(2));
        let e1 = open(&dir, 1).err().map(|e| e.to_string());
        dir.set_faults(FaultPlan::default());
        if !e1.as_deref().unwrap_or("").contains(CUT_LOG) {
            continue;
        }
        let durable = dir.durable_bytes(CUT_LOG).expect("durable").len() as u64;
        let live = dir.open(CUT_LOG).expect("open").len().expect("len");
        if durable == live {
            continue; // the failed sync happened to persist the truncate
        }
        reached += 1;
        dir.set_faults(FaultPlan::write(5, FaultKind::NoSpace));
        let e2 = open(&dir, 1).err().map(|e| e.to_string());
        dir.set_faults(FaultPlan::default());
        dir.crash_with(CrashMode::DropUnsynced);
        let context = format!("seed {seed} (open 1: {e1:?}; open 2: {e2:?})");
        let store = open(&dir, 1).unwrap_or_else(|e| panic!("{context}: open 3 refused: {e}"));
        assert_eq!(state_of(&store), acked, "{context}: open 3");
        for i in 0..4u8 {
            store.upsert(&[b'n', i], b"new").expect("upsert");
            acked.insert(vec![b'n', i], b"new".to_vec());
        }
        dir.crash_with(CrashMode::DropUnsynced);
        std::mem::forget(store);
        let store = open(&dir, 1).unwrap_or_else(|e| panic!("{context}: open 4 refused: {e}"));
        assert_eq!(state_of(&store), acked, "{context}: open 4");
        let lsns = data_lsns(&dir);
        let unique: BTreeSet<u64> = lsns.iter().copied().collect();
        assert_eq!(
            unique.len(),
            lsns.len(),
            "{context}: an LSN reused: {lsns:?}"
        );
    }
    assert!(reached > 0, "no seed lost the cut's truncate");
}

// ---------------------------------------------------------------------------------------
// C5: an engine panic inside an atomic batch leaves its stripes even.

/// An engine that panics on an upsert of `boom`.
struct Panicky(Box<dyn Index>);

impl Index for Panicky {
    fn name(&self) -> &'static str {
        "panicky"
    }
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.0.get(key, out)
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.0.insert(key, value)
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if key == b"boom" {
            panic!("engine panic on boom (injected)");
        }
        self.0.upsert(key, value)
    }
    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.0.update(key, value)
    }
    fn remove(&self, key: &[u8]) -> bool {
        self.0.remove(key)
    }
    fn scan(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, order: Order, v: &mut Visitor<'_>) {
        self.0.scan(lower, upper, order, v)
    }
    fn stats(&self) -> IndexStats {
        self.0.stats()
    }
}

// Goal: an engine panic inside an atomic WriteBatch's apply leaves the batch's stripes even,
// so readers return (review C5). Method: an engine panicking on key "boom"; a batch putting
// a and boom panics; then Store::get of a and of boom and get_many of both must return (a
// 30 s watchdog detects a hang only).
#[test]
fn get_after_a_panicking_batch_returns() {
    let store = Store::open_with_index(SimDir::new(1), opts(Durability::Group, 1), &|| {
        Box::new(Panicky(
            forest_store::new_engine("lockbtree").expect("engine"),
        ))
    })
    .expect("open");
    store.upsert(b"a", b"1").expect("upsert");
    let store = Arc::new(store);
    let s = Arc::clone(&store);
    let outcome = std::thread::spawn(move || {
        s.write(WriteBatch::new().put(b"a", b"2").put(b"boom", b"x"))
            .is_ok()
    })
    .join();
    assert!(!matches!(outcome, Ok(true)), "the batch must not succeed");
    let s = Arc::clone(&store);
    let (a, boom) = within(
        Duration::from_secs(30),
        "Store::get after the panic",
        move || (get(&s, b"a"), get(&s, b"boom")),
    );
    assert!(a.is_some(), "a was written before");
    assert_eq!(boom, None, "boom's put panicked");
    let s = Arc::clone(&store);
    within(
        Duration::from_secs(30),
        "get_many after the panic",
        move || s.get_many(&[b"a", b"boom"], &mut |_, _| {}),
    );
}

// ---------------------------------------------------------------------------------------
// C6: get_many completes while batches run.

// Goal: get_many completes while writer threads run two-key atomic batches continuously
// (review C6: a reader must not starve behind batches). Method: 100,000 keys; two writer
// threads loop on batches of two other keys; 10 get_many calls of all 100,000 keys must
// complete and see every key; a 60 s watchdog detects a hang only, speed is not asserted.
// (Calls of 1,000 keys complete on the old code too: a read that short rarely overlaps a
// batch of its stripes; one of 100,000 keys retried for minutes there.)
#[test]
fn get_many_completes_under_a_stream_of_batches() {
    let store = Arc::new(
        Store::open(
            SimDir::new(1),
            opts(Durability::Periodic { interval_ms: 1000 }, 1),
        )
        .expect("open"),
    );
    const KEYS: usize = 100_000;
    let keys: Vec<Vec<u8>> = (0..KEYS as u32)
        .map(|i| format!("key{i}").into_bytes())
        .collect();
    for k in &keys {
        store.upsert(k, b"v").expect("upsert");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (s, stop, n) = (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&batches));
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = (format!("w{i}"), format!("x{i}"));
                    s.write(
                        WriteBatch::new()
                            .put(a.as_bytes(), b"1")
                            .put(b.as_bytes(), b"1"),
                    )
                    .expect("batch");
                    i = (i + 2) % KEYS as u64;
                    n.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    while batches.load(Ordering::Relaxed) < 100 {
        std::thread::yield_now();
    }
    let s = Arc::clone(&store);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        within(Duration::from_secs(60), "10 get_many calls", move || {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let mut found = 0usize;
            for _ in 0..10 {
                s.get_many(&refs, &mut |_, v| found += usize::from(v.is_some()));
            }
            found
        })
    }));
    stop.store(true, Ordering::Relaxed);
    match result {
        Ok(found) => {
            for w in writers {
                w.join().expect("writer");
            }
            assert_eq!(found, 10 * KEYS, "every key is there");
        }
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
