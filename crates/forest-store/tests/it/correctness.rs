//! Issue 12 "Correctness": the tests that prove each defect fixed by commits e9aed9a and
//! 7e7e05b (each fails on the code before them, aa54735), and model and fault tests of what
//! the fixes promise: atomic batches across crashes and for readers, a clean store that
//! opens on a full disk, checkpoints that fail cleanly, recovery under injected faults.
//!
//! Shards follow threads (`wal::group_commit`): tests that need a write in a given shard log
//! run it on a [`Lanes`] thread pinned to that shard.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use forest_core::{Error, Index, IndexStats, Order, Result, Visitor};
use forest_store::checkpoint::{is_checkpoint_tmp, parse_checkpoint_name};
use forest_store::file::{
    CrashMode, Dir, DirLock, Fault, FaultKind, FaultOp, FaultPlan, File, SimDir,
};
use forest_store::lsn::KeyStripes;
use forest_store::wal::{parse_log_name, LogStream};
use forest_store::{BatchOp, Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

const CRASH_MODES: [CrashMode; 3] = [
    CrashMode::Random,
    CrashMode::Scatter,
    CrashMode::DropUnsynced,
];

fn options(durability: Durability, shards: usize) -> StoreOptions {
    StoreOptions {
        engine: Some("lockbtree".to_string()),
        durability,
        shards,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

fn open(dir: &SimDir, durability: Durability, shards: usize) -> Result<Store> {
    Store::open(dir.clone(), options(durability, shards))
}

fn state_of(store: &Store) -> Map {
    store.to_vec().into_iter().collect()
}

fn get(store: &Store, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    store.get(key, &mut out).then_some(out)
}

/// Upserts `key` and notes it as acknowledged in `acked`.
fn put(store: &Store, acked: &mut Map, key: &[u8], value: &[u8]) {
    store.upsert(key, value).expect("upsert");
    acked.insert(key.to_vec(), value.to_vec());
}

fn text(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// Opens `dir` expecting recovery to refuse with [`Error::Corrupt`], and returns the error's
/// text; if it opens, fails naming the acknowledged keys it lost.
fn expect_refusal(dir: &SimDir, shards: usize, acked: &Map) -> String {
    match open(dir, Durability::Sync, shards) {
        Ok(store) => {
            let got = state_of(&store);
            let lost: Vec<String> = acked
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .map(|(k, _)| text(k))
                .collect();
            panic!(
                "recovery opened the store instead of refusing: {} acknowledged keys, lost {lost:?}",
                acked.len()
            );
        }
        Err(e) => {
            assert!(matches!(e, Error::Corrupt { .. }), "not a refusal: {e}");
            e.to_string()
        }
    }
}

/// An error that is an injected (or engine) failure, never a refusal of the data.
fn assert_io(e: &Error, context: &str) {
    assert!(matches!(e, Error::Io { .. }), "{context}: {e}");
}

/// The log files of `dir` as (set, shard, name), in name order.
fn logs(dir: &SimDir) -> Vec<(u64, u32, String)> {
    dir.list()
        .expect("list")
        .into_iter()
        .filter_map(|n| parse_log_name(&n).map(|(seq, shard)| (seq, shard, n)))
        .collect()
}

/// A log's data records: (LSN, first byte, byte after).
type DataRecords = Vec<(u64, u64, u64)>;

/// The data records of the log `name` up to the end of its valid prefix.
fn data_records(dir: &SimDir, name: &str) -> DataRecords {
    let mut stream = LogStream::open(dir, name).expect("open log");
    let mut out = Vec::new();
    while let Ok(true) = stream.advance() {
        let record = stream.record().expect("a current record");
        if record.op.is_data() {
            out.push((
                record.lsn,
                stream.record_start().expect("current"),
                stream.record_end().expect("current"),
            ));
        }
    }
    out
}

fn checkpoint_files(dir: &SimDir) -> Vec<String> {
    dir.list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("checkpoint-"))
        .collect()
}

/// A `LockBTree` that panics on the upsert of one key and may run a hook when a scan
/// starts (a checkpoint's scan: writes then land between its start and end LSN).
struct Instrumented {
    inner: forest_lockbtree::LockBTree,
    panic_on: Option<&'static [u8]>,
    on_scan: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Instrumented {
    fn boxed(
        panic_on: Option<&'static [u8]>,
        on_scan: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> Box<dyn Index> {
        Box::new(Self {
            inner: forest_lockbtree::LockBTree::new(),
            panic_on,
            on_scan,
        })
    }

    fn check(&self, key: &[u8]) {
        if self.panic_on == Some(key) {
            panic!("instrumented engine: upsert of {:?}", text(key));
        }
    }
}

impl Index for Instrumented {
    fn name(&self) -> &'static str {
        "lockbtree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.inner.get(key, out)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check(key);
        self.inner.insert(key, value)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check(key);
        self.inner.upsert(key, value)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check(key);
        self.inner.update(key, value)
    }

    fn remove(&self, key: &[u8]) -> bool {
        self.inner.remove(key)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        if let Some(hook) = &self.on_scan {
            hook();
        }
        self.inner.scan(lower, upper, order, visit);
    }

    fn stats(&self) -> IndexStats {
        self.inner.stats()
    }
}

/// The shard log the calling thread writes to (`Batch`'s Debug shows the shard it took).
fn shard_of_this_thread(store: &Store) -> usize {
    let shown = format!("{:?}", store.batch());
    shown
        .split("shard: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("Batch's Debug shows its shard: {shown}"))
}

type Job = Box<dyn FnOnce(&Store) + Send>;

/// One thread per shard log: `run(s, f)` runs `f` on the thread whose writes go to shard
/// `s`, and waits for it.
struct Lanes {
    senders: Vec<mpsc::Sender<Job>>,
}

impl Lanes {
    fn run<T: Send + 'static>(
        &self,
        shard: usize,
        f: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = mpsc::channel();
        self.senders[shard]
            .send(Box::new(move |store: &Store| {
                let _ = tx.send(f(store));
            }))
            .expect("the lane is alive");
        rx.recv()
            .expect("the lane ran the job (a panic there is printed above)")
    }
}

/// Runs `body` with a [`Lanes`] over `store`: threads are started until every shard has
/// one (the shard follows the thread's number).
fn with_lanes<R>(store: &Store, body: impl FnOnce(&Lanes) -> R) -> R {
    let shards = store.stats().shard_count;
    std::thread::scope(|scope| {
        let mut senders: Vec<Option<mpsc::Sender<Job>>> = vec![None; shards];
        let mut started = 0;
        while senders.iter().any(Option::is_none) {
            started += 1;
            assert!(started <= 64 * shards, "no thread found for some shard");
            let (tx, rx) = mpsc::channel::<Job>();
            let (shard_tx, shard_rx) = mpsc::channel();
            scope.spawn(move || {
                shard_tx
                    .send(shard_of_this_thread(store))
                    .expect("the starter waits");
                for job in rx {
                    job(store);
                }
            });
            let shard = shard_rx.recv().expect("the lane reports its shard");
            if senders[shard].is_none() {
                senders[shard] = Some(tx);
            }
        }
        let lanes = Lanes {
            senders: senders.into_iter().map(|s| s.expect("filled")).collect(),
        };
        let result = body(&lanes);
        drop(lanes); // the lanes' threads end, and the scope joins them
        result
    })
}

// ---------------------------------------------------------------------------------------
// Defect 1: an engine panic inside apply.

// Goal: an engine that panics while applying a write never leaves a hole in the LSNs that
// loses later acknowledged writes (issue 12, defect 1). Method: an index that panics on the
// upsert of "boom" (caught); then writes on every shard either fail with an error naming the
// panic, or, if acknowledged, are present after a power loss of each kind and a reopen with
// a normal engine; in `sync` and `group`, with 1 and 2 shards.
#[test]
fn engine_panic_leaves_no_lsn_hole() {
    for durability in [Durability::Sync, Durability::Group] {
        for shards in [1, 2] {
            for (c, mode) in CRASH_MODES.into_iter().enumerate() {
                let context = format!("{durability} {shards} shards {mode:?}");
                let dir = SimDir::new(100 + c as u64);
                let store =
                    Store::open_with_index(dir.clone(), options(durability, shards), &|| {
                        Instrumented::boxed(Some(b"boom"), None)
                    })
                    .expect("open");
                let mut acked = Map::new();
                put(&store, &mut acked, b"before", b"1");
                let panicked = catch_unwind(AssertUnwindSafe(|| store.upsert(b"boom", b"x")));
                assert!(panicked.is_err(), "the instrumented engine panics");
                let mut refused = 0;
                with_lanes(&store, |lanes| {
                    for i in 0..6 {
                        let key = format!("after-{i}").into_bytes();
                        let k = key.clone();
                        match lanes.run(i % shards, move |s| s.upsert(&k, b"2")) {
                            Ok(()) => {
                                acked.insert(key, b"2".to_vec());
                            }
                            Err(e) => {
                                assert!(e.to_string().contains("panicked"), "{context}: {e}");
                                refused += 1;
                            }
                        }
                    }
                });
                let batch = store.write(WriteBatch::new().put(b"after-batch", b"3"));
                match batch {
                    Ok(_) => {
                        acked.insert(b"after-batch".to_vec(), b"3".to_vec());
                    }
                    Err(e) => assert!(e.to_string().contains("panicked"), "{context}: {e}"),
                }
                dir.crash_with(mode);
                drop(store);
                let store = open(&dir, durability, shards).expect("reopen with a normal engine");
                for (key, value) in &acked {
                    assert_eq!(
                        get(&store, key).as_ref(),
                        Some(value),
                        "{context}: {:?} was acknowledged after the engine panicked, and is \
                         lost ({refused} later writes refused)",
                        text(key)
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Defect 2: recovery refuses what it cannot prove was never acknowledged.

/// Runs `writes` upserts of distinct keys on alternating shards (0, 1, 0, ...), each
/// acknowledged under `sync`; returns them.
fn alternate_writes(store: &Store, writes: u8) -> Map {
    let mut acked = Map::new();
    with_lanes(store, |lanes| {
        for i in 0..writes {
            let key = vec![b'k', b'0' + i / 10, b'0' + i % 10];
            let k = key.clone();
            lanes
                .run(usize::from(i % 2), move |s| s.upsert(&k, &[i; 24]))
                .expect("upsert");
            acked.insert(key, vec![i; 24]);
        }
    });
    acked
}

// Goal: a log set missing a shard's log is refused, naming the missing file, and
// `open_accepting_loss` opens it and lists the loss (issue 12, defect 2a). Method: two
// shards both holding records, a clean close, one log of the newest set deleted.
#[test]
fn missing_shard_log_is_refused() {
    let dir = SimDir::new(21);
    let store = open(&dir, Durability::Sync, 2).expect("open");
    let acked = alternate_writes(&store, 8);
    store.close().expect("close");
    let all = logs(&dir);
    let newest = all.iter().map(|l| l.0).max().expect("logs");
    let set: Vec<&(u64, u32, String)> = all.iter().filter(|l| l.0 == newest).collect();
    assert_eq!(set.len(), 2, "{all:?}");
    for (_, _, name) in &set {
        assert!(!data_records(&dir, name).is_empty(), "{name} holds records");
    }
    let victim = set[1].2.clone();
    dir.remove(&victim).expect("remove");
    dir.sync_dir().expect("sync_dir");

    let refusal = expect_refusal(&dir, 2, &acked);
    assert!(refusal.contains(&victim), "{refusal}");
    assert!(refusal.contains("missing"), "{refusal}");

    let store = Store::open_accepting_loss(dir.clone(), options(Durability::Sync, 2))
        .expect("accepting the loss opens");
    let losses = &store.recovery_report().losses;
    assert!(losses.iter().any(|l| l.contains(&victim)), "{losses:?}");
    let kept = state_of(&store);
    assert!(kept.len() < acked.len(), "the missing log's keys are gone");
    store.close().expect("close");
    let store = open(&dir, Durability::Sync, 2).expect("the accepted loss is not refused again");
    assert_eq!(state_of(&store), kept);
}

// Goal: a damaged last record in one shard's log, while the other shard's log holds later
// records, is refused naming the file and the record's offset (issue 12, defect 2b): the
// later records prove the damaged one was acknowledged. Method: two shards under `sync`,
// writes alternating between them, a power loss (logs not sealed), a byte flipped in the
// last data record of the log that does not hold the highest LSN.
#[test]
fn damaged_last_record_before_later_records_is_refused() {
    let dir = SimDir::new(22);
    let store = open(&dir, Durability::Sync, 2).expect("open");
    let acked = alternate_writes(&store, 10);
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let all = logs(&dir);
    let records: Vec<(String, DataRecords)> = all
        .iter()
        .map(|(_, _, name)| (name.clone(), data_records(&dir, name)))
        .collect();
    let lsn_max = |r: &[(u64, u64, u64)]| r.last().map_or(0, |l| l.0);
    let (with_max, _) = records
        .iter()
        .max_by_key(|(_, r)| lsn_max(r))
        .expect("a log");
    let (victim, victim_records) = records
        .iter()
        .find(|(name, r)| name != with_max && !r.is_empty())
        .expect("the other shard's log holds records");
    let (lsn, start, end) = *victim_records.last().expect("a record");
    let other_max = records.iter().map(|(_, r)| lsn_max(r)).max().expect("max");
    assert!(lsn < other_max, "{lsn} < {other_max}");
    let at = usize::try_from((start + end) / 2).expect("small");
    assert!(dir.damage(victim, |bytes| bytes[at] ^= 0x10));

    let refusal = expect_refusal(&dir, 2, &acked);
    assert!(refusal.contains(victim.as_str()), "{refusal}");
    assert!(refusal.contains(&format!("offset {start}")), "{refusal}");

    let store = Store::open_accepting_loss(dir, options(Durability::Sync, 2))
        .expect("accepting the loss opens");
    assert!(!store.recovery_report().losses.is_empty());
    assert!(
        get(&store, b"k00").is_some(),
        "what precedes the damage is kept"
    );
}

/// A store under `sync` with one shard whose checkpoint failed (ENOSPC) after rotating the
/// logs, so the older log set is not covered by any checkpoint; returns it and the writes
/// acknowledged so far (one of them into the new log set).
fn store_after_failed_checkpoint(seed: u64) -> (SimDir, Store, Map) {
    for nth in 1..=40 {
        let dir = SimDir::new(seed);
        let store = open(&dir, Durability::Sync, 1).expect("open");
        let mut acked = Map::new();
        for i in 0..6u8 {
            put(&store, &mut acked, &[b'a', b'0' + i], &[i; 20]);
        }
        dir.set_faults(FaultPlan::write(nth, FaultKind::NoSpace));
        let result = store.checkpoint();
        dir.set_faults(FaultPlan::default());
        let published = dir
            .list()
            .expect("list")
            .iter()
            .any(|n| parse_checkpoint_name(n).is_some());
        if result.is_err() && !published && store.upsert(b"b0", b"new set").is_ok() {
            // The rotation happened if the write went to a newer log set.
            let rotated = logs(&dir)
                .iter()
                .any(|l| l.0 > 0 && !data_records(&dir, &l.2).is_empty());
            if rotated {
                acked.insert(b"b0".to_vec(), b"new set".to_vec());
                return (dir, store, acked);
            }
        }
    }
    panic!("no write fault failed a checkpoint after its rotation");
}

// Goal: a torn tail in an older (rotated) log that no checkpoint covers is refused, naming
// the file (issue 12, defect 2c): a newer log set took records only after the older one
// was synced, so its end was durable. Method: a checkpoint that fails (ENOSPC) after its
// rotation, more writes into the new set, a clean close, the older log cut a few bytes into
// its last data record.
#[test]
fn torn_tail_in_an_older_log_is_refused() {
    let (dir, store, mut acked) = store_after_failed_checkpoint(23);
    for i in 1..4u8 {
        put(&store, &mut acked, &[b'b', b'0' + i], &[i; 20]);
    }
    store.close().expect("close");
    let all = logs(&dir);
    let oldest = all.first().expect("logs").clone();
    assert!(all.iter().any(|l| l.0 > oldest.0), "a newer set: {all:?}");
    let (_, start, _) = *data_records(&dir, &oldest.2).last().expect("records");
    assert!(dir.damage(&oldest.2, |bytes| bytes.truncate(start as usize + 5)));

    let refusal = expect_refusal(&dir, 1, &acked);
    assert!(refusal.contains(&oldest.2), "{refusal}");

    let store = Store::open_accepting_loss(dir, options(Durability::Sync, 1))
        .expect("accepting the loss opens");
    assert!(!store.recovery_report().losses.is_empty());
}

// Goal: a cutoff below the loaded checkpoint's end LSN is refused (issue 12, defect 2d):
// the logs were durable through that LSN when the checkpoint was published. Method: a write
// lands during a checkpoint's scan (an index hook runs it on another thread), so it is in
// the new log set below the checkpoint's end; after a clean close that record is cut.
#[test]
fn cutoff_below_the_checkpoint_end_is_refused() {
    let dir = SimDir::new(24);
    let armed = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let hook: Arc<dyn Fn() + Send + Sync> = {
        let armed = Arc::clone(&armed);
        let go_tx = Mutex::new(go_tx);
        let done_rx = Mutex::new(done_rx);
        Arc::new(move || {
            if armed.swap(false, Ordering::SeqCst) {
                go_tx
                    .lock()
                    .expect("go")
                    .send(())
                    .expect("the writer waits");
                done_rx
                    .lock()
                    .expect("done")
                    .recv()
                    .expect("the writer wrote");
            }
        })
    };
    let store = Store::open_with_index(dir.clone(), options(Durability::Sync, 1), &|| {
        Instrumented::boxed(None, Some(Arc::clone(&hook)))
    })
    .expect("open");
    let mut acked = Map::new();
    for i in 0..5u8 {
        put(&store, &mut acked, &[b'a', b'0' + i], &[i; 20]);
    }
    let info = std::thread::scope(|scope| {
        let store = &store;
        scope.spawn(move || {
            go_rx.recv().expect("the hook fires");
            store
                .upsert(b"during", b"the checkpoint's scan")
                .expect("upsert");
            done_tx.send(()).expect("the hook waits");
        });
        armed.store(true, Ordering::SeqCst);
        store.checkpoint().expect("checkpoint")
    });
    acked.insert(b"during".to_vec(), b"the checkpoint's scan".to_vec());
    assert!(
        info.end_lsn >= info.start_lsn,
        "the write landed inside the checkpoint: {info:?}"
    );
    store.close().expect("close");
    let newest = logs(&dir).into_iter().max().expect("logs");
    let records = data_records(&dir, &newest.2);
    let (lsn, start, _) = *records.first().expect("the write during the scan");
    assert!(lsn <= info.end_lsn);
    assert!(dir.damage(&newest.2, |bytes| bytes.truncate(start as usize + 5)));

    let refusal = expect_refusal(&dir, 1, &acked);
    assert!(
        refusal.contains(&format!("checkpoint-{:020}", info.start_lsn)),
        "{refusal}"
    );
    assert!(refusal.contains("durable through"), "{refusal}");
    let store = Store::open_accepting_loss(dir, options(Durability::Sync, 1))
        .expect("accepting the loss opens");
    assert!(!store.recovery_report().losses.is_empty());
}

// Goal: damage in an old log that a checkpoint already covers does not block the open; it
// is reported (issue 12, defect 2: refusals are only for what recovery needs). Method: two
// checkpoints, a clean close, a byte flipped in a data record of the oldest log set left.
#[test]
fn damage_a_checkpoint_covers_does_not_block_open() {
    let dir = SimDir::new(25);
    let store = open(&dir, Durability::Sync, 1).expect("open");
    for round in 0..3u8 {
        for i in 0..8u8 {
            store.upsert(&[b'k', i], &[round; 16]).expect("upsert");
        }
        if round < 2 {
            store.checkpoint().expect("checkpoint");
        }
    }
    let before = state_of(&store);
    store.close().expect("close");
    let oldest = logs(&dir).into_iter().min().expect("logs");
    let (_, start, end) = data_records(&dir, &oldest.2)[1];
    assert!(
        dir.damage(&oldest.2, |bytes| bytes[((start + end) / 2) as usize] ^=
            0x10)
    );

    let store = open(&dir, Durability::Sync, 1).expect("covered damage does not block");
    let report = store.recovery_report();
    assert!(
        report.covered_damage.iter().any(|d| d.contains(&oldest.2)),
        "{report:?}"
    );
    assert!(report.losses.is_empty(), "{report:?}");
    assert_eq!(state_of(&store), before);
}

// ---------------------------------------------------------------------------------------
// Defect 3: never reuse an LSN.

/// A store directory (two shards) whose logs hold a record past the recovery cutoff: shard
/// `torn`'s log lost its last record "cut" (LSN x, as a torn write would), while the other
/// shard's log holds "stale" at x + 1. No mark proves them (both were flushed by one
/// `sync`, nothing newer acknowledged), so recovery cuts them. Returns the keys it keeps.
fn dir_with_a_record_past_the_cutoff(seed: u64, torn: usize) -> (SimDir, Map) {
    let dir = SimDir::new(seed);
    let store = open(
        &dir,
        Durability::Periodic {
            interval_ms: 60_000,
        },
        2,
    )
    .expect("open");
    let mut kept = Map::new();
    with_lanes(&store, |lanes| {
        for shard in 0..2u8 {
            let key = vec![b'b', b'0' + shard];
            let k = key.clone();
            lanes
                .run(usize::from(shard), move |s| s.upsert(&k, b"base"))
                .expect("upsert");
            kept.insert(key, b"base".to_vec());
        }
        store.sync().expect("sync");
        lanes
            .run(torn, |s| s.upsert(b"cut", b"lost to the torn write"))
            .expect("upsert");
        lanes
            .run(1 - torn, |s| s.upsert(b"stale", b"must never come back"))
            .expect("upsert");
        store.sync().expect("sync");
    });
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let shard0 = logs(&dir)
        .into_iter()
        .find(|l| l.1 as usize == torn)
        .expect("shard 0's log");
    let (_, start, _) = *data_records(&dir, &shard0.2).last().expect("records");
    assert!(dir.damage(&shard0.2, |bytes| bytes.truncate(start as usize)));
    (dir, kept)
}

/// Opens `dir` (after its records past the cutoff were cut), writes acknowledged records on
/// both shards, loses power, reopens: exactly the kept and new keys must be there.
fn write_after_the_cut_then_power_loss(dir: &SimDir, kept: &Map, context: &str) {
    let store = open(dir, Durability::Sync, 2)
        .unwrap_or_else(|e| panic!("{context}: open after the cut: {e}"));
    assert_eq!(get(&store, b"stale"), None, "{context}");
    let mut expected = kept.clone();
    with_lanes(&store, |lanes| {
        for i in 0..6u8 {
            let key = vec![b'n', b'0' + i];
            let k = key.clone();
            lanes
                .run(usize::from(i % 2), move |s| s.upsert(&k, b"new"))
                .unwrap_or_else(|e| panic!("{context}: upsert: {e}"));
            expected.insert(key, b"new".to_vec());
        }
    });
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let store = open(dir, Durability::Sync, 2)
        .unwrap_or_else(|e| panic!("{context}: reopen after the power loss: {e}"));
    assert_eq!(
        state_of(&store),
        expected,
        "{context}: every acknowledged write, and no cut one"
    );
}

// Goal: recovery never hands out an LSN again that a log past the cutoff may still hold
// (issue 12, defect 3). Method: a directory with a record past the cutoff; open, write
// acknowledged records on both shards, power loss, reopen: every new write is there, the
// cut record never comes back, no LSN is in two logs. Then the failure mode of the defect:
// the first open fails at each of its fsyncs in turn (the cut's among them: its truncate
// may be lost for good, as Linux drops pages of a failed fsync), the store is opened again
// without a power loss, written, and loses power; the cut record (shard 0's or shard 1's,
// by seed) must not come back, and some seed must really lose a cut that way.
#[test]
fn recovery_never_reuses_an_lsn() {
    let (dir, kept) = dir_with_a_record_past_the_cutoff(31, 0);
    {
        let store = open(&dir, Durability::Sync, 2).expect("open");
        let report = store.recovery_report();
        assert!(
            report.records_beyond_cutoff >= 1,
            "the setup cuts: {report:?}"
        );
    }
    let (dir, kept2) = dir_with_a_record_past_the_cutoff(31, 0);
    assert_eq!(kept, kept2);
    write_after_the_cut_then_power_loss(&dir, &kept, "no fault");

    let mut lost_cuts = 0;
    for seed in 0..12 {
        let torn = seed as usize % 2;
        let mut done = false;
        for nth in 1..=80 {
            let (dir, kept) = dir_with_a_record_past_the_cutoff(seed, torn);
            dir.set_faults(FaultPlan::sync(nth));
            let first = open(&dir, Durability::Sync, 2);
            dir.set_faults(FaultPlan::default());
            let context =
                format!("seed {seed}, torn shard {torn}, fsync {nth} of the first open failed");
            match first {
                Ok(store) => {
                    done = true;
                    drop(store);
                }
                Err(e) => assert_io(&e, &context),
            }
            // The cut of the log holding "stale" looks done, yet a power loss would undo it.
            let stale_log = logs(&dir)
                .into_iter()
                .find(|l| l.1 as usize == 1 - torn)
                .expect("the log holding stale");
            let live = dir.open(&stale_log.2).expect("open").len().expect("len");
            let durable = dir.durable_bytes(&stale_log.2).expect("durable").len() as u64;
            lost_cuts += usize::from(durable > live);
            write_after_the_cut_then_power_loss(&dir, &kept, &context);
            if done {
                break;
            }
        }
        assert!(done, "seed {seed}: the open has more fsyncs than tried");
    }
    assert!(lost_cuts > 0, "no failed fsync lost a cut for good");
}

// ---------------------------------------------------------------------------------------
// Defect 4: a conditional write that changes nothing waits for what it saw.

// Goal: a conditional write that changes nothing answers only once the write it saw is
// durable (issue 12, defect 4). Method: a pipeline batch removes k and inserts n and is
// neither waited on nor dropped; then, on another thread (the other shard when there are
// two), remove(k) answers false and insert(n) answers false; a power loss right after:
// k must be absent and n present, as those answers said.
#[test]
fn conditional_no_op_waits_for_what_it_saw() {
    for durability in [Durability::Sync, Durability::Group] {
        for shards in [1, 2] {
            let context = format!("{durability} {shards} shards");
            let dir = SimDir::new(41);
            let store = open(&dir, durability, shards).expect("open");
            store.upsert(b"k", b"v").expect("upsert");
            let main_shard = shard_of_this_thread(&store);
            let mut batch = store.batch();
            assert!(batch.remove(b"k").expect("remove in the batch"));
            assert!(batch.insert(b"n", b"1").expect("insert in the batch"));
            with_lanes(&store, |lanes| {
                let other = (main_shard + 1) % shards;
                let removed = lanes.run(other, |s| s.remove(b"k")).expect("remove");
                assert!(!removed, "{context}: the batch removed k");
                let inserted = lanes.run(other, |s| s.insert(b"n", b"2")).expect("insert");
                assert!(!inserted, "{context}: the batch inserted n");
            });
            dir.crash_with(CrashMode::DropUnsynced);
            drop(batch);
            drop(store);
            let store = open(&dir, durability, shards).expect("reopen");
            assert_eq!(
                get(&store, b"k"),
                None,
                "{context}: remove(k) answered false, acknowledging k's removal"
            );
            assert_eq!(
                get(&store, b"n"),
                Some(b"1".to_vec()),
                "{context}: insert(n) answered false, acknowledging n"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Atomic batches.

type Effects = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The history of atomic batches since the last verified state.
struct BatchModel {
    base: Map,
    live: Map,
    /// Each batch that took LSNs, in LSN order, with its effects.
    batches: Vec<Effects>,
    /// Batches `..acked` were acknowledged.
    acked: usize,
}

impl BatchModel {
    /// What `ops` would report and change, applied to `live`.
    fn decide(live: &Map, ops: &[BatchOp]) -> (Vec<bool>, Effects) {
        let mut sim = live.clone();
        let mut effects = Vec::new();
        let changed = ops
            .iter()
            .map(|op| {
                let present = sim.contains_key(op.key());
                let effect = match op {
                    BatchOp::Insert(_, v) => (!present).then(|| Some(v.clone())),
                    BatchOp::Upsert(_, v) => Some(Some(v.clone())),
                    BatchOp::Update(_, v) => present.then(|| Some(v.clone())),
                    BatchOp::Remove(_) => present.then_some(None),
                    BatchOp::RemovePresent(_) => Some(None),
                };
                let Some(effect) = effect else {
                    return false;
                };
                match &effect {
                    Some(v) => sim.insert(op.key().to_vec(), v.clone()),
                    None => sim.remove(op.key()),
                };
                effects.push((op.key().to_vec(), effect));
                true
            })
            .collect();
        (changed, effects)
    }

    fn record(&mut self, effects: Effects) {
        for (key, value) in &effects {
            match value {
                Some(v) => self.live.insert(key.clone(), v.clone()),
                None => self.live.remove(key),
            };
        }
        self.batches.push(effects);
    }

    /// Checks that `recovered` is the base plus whole batches `..n` for some `n >= min`, then
    /// makes it the new base.
    fn verify(&mut self, recovered: Map, min: usize, context: &str) {
        let mut state = self.base.clone();
        let mut prefixes = Vec::new();
        if state == recovered {
            prefixes.push(0);
        }
        for (i, batch) in self.batches.iter().enumerate() {
            for (key, value) in batch {
                match value {
                    Some(v) => state.insert(key.clone(), v.clone()),
                    None => state.remove(key),
                };
            }
            if state == recovered {
                prefixes.push(i + 1);
            }
        }
        assert!(
            prefixes.iter().any(|&n| n >= min),
            "{context}: the recovered state is the base plus whole batches {prefixes:?} (of \
             {}), {min} acknowledged:\nrecovered {recovered:?}\nbatches {:?}",
            self.batches.len(),
            self.batches
        );
        self.base = recovered.clone();
        self.live = recovered;
        self.batches.clear();
        self.acked = 0;
    }
}

fn random_ops(rng: &mut StdRng, step: usize) -> Vec<BatchOp> {
    (0..rng.random_range(1..=6))
        .map(|i| {
            let key = vec![b'k', rng.random_range(0..16u8)];
            let value = format!("{step}.{i}").into_bytes();
            match rng.random_range(0..4) {
                0 => BatchOp::Insert(key, value),
                1 => BatchOp::Upsert(key, value),
                2 => BatchOp::Update(key, value),
                _ => BatchOp::Remove(key),
            }
        })
        .collect()
}

fn write_batch_of(ops: &[BatchOp]) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for op in ops {
        batch.push(op.clone());
    }
    batch
}

/// Atomic batches dropped whole by recoveries (the model saw torn batches).
static BATCHES_DROPPED: AtomicU64 = AtomicU64::new(0);

/// One random run of atomic batches with crashes of every kind, clean reopens, checkpoints
/// and (if `faults`) injected I/O errors.
fn batch_model_run(seed: u64, durability: Durability, shards: usize, faults: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = SimDir::new(seed);
    let mut store = Some(open(&dir, durability, shards).expect("open"));
    let mut model = BatchModel {
        base: Map::new(),
        live: Map::new(),
        batches: Vec::new(),
        acked: 0,
    };
    let mut failed = false;
    let context = format!("seed {seed} {durability} {shards} shards");
    let recovered = |store: &Store| {
        BATCHES_DROPPED.fetch_add(store.recovery_report().batches_dropped, Ordering::Relaxed);
        state_of(store)
    };
    for step in 0..150 {
        // A new thread per step: successive batches land in different shard logs.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let roll = rng.random_range(0..100);
                    let s = store.as_ref().expect("open");
                    match roll {
                        0..=54 => {
                            let ops = random_ops(&mut rng, step);
                            let (expected, effects) = BatchModel::decide(&model.live, &ops);
                            let lsn_before = s.stats().lsn_next;
                            let result = s.write(&write_batch_of(&ops));
                            let took = s.stats().lsn_next > lsn_before;
                            if took {
                                model.record(effects);
                            }
                            match result {
                                Ok(changed) => {
                                    assert!(!failed, "{context}: a write after a failure");
                                    assert_eq!(changed, expected, "{context}: step {step}");
                                    if took {
                                        model.acked = model.batches.len();
                                    }
                                }
                                Err(e) => {
                                    assert_io(&e, &context);
                                    failed = true;
                                }
                            }
                        }
                        55..=69 => {
                            let mut pipe = s.batch();
                            let mut took_any = false;
                            for _ in 0..rng.random_range(1..=3) {
                                let ops = random_ops(&mut rng, step);
                                let (expected, effects) = BatchModel::decide(&model.live, &ops);
                                let lsn_before = s.stats().lsn_next;
                                let result = pipe.write(&write_batch_of(&ops));
                                let took = s.stats().lsn_next > lsn_before;
                                took_any |= took;
                                if took {
                                    model.record(effects);
                                }
                                match result {
                                    Ok(changed) => assert_eq!(changed, expected, "{context}"),
                                    Err(e) => {
                                        assert_io(&e, &context);
                                        failed = true;
                                        break;
                                    }
                                }
                            }
                            if rng.random_bool(0.5) {
                                match pipe.wait() {
                                    Ok(()) => {
                                        assert!(!failed, "{context}: a wait after a failure");
                                        if took_any {
                                            model.acked = model.batches.len();
                                        }
                                    }
                                    Err(e) => {
                                        assert_io(&e, &context);
                                        failed = true;
                                    }
                                }
                            } else {
                                drop(pipe); // not acknowledged; flushed in the background
                            }
                        }
                        70..=74 => {
                            if let Err(e) = s.checkpoint() {
                                assert_io(&e, &format!("{context}: checkpoint"));
                            }
                        }
                        75..=81 => {
                            let s = store.take().expect("open");
                            let clean = s.close().is_ok() && !failed;
                            dir.set_faults(FaultPlan::default());
                            let reopened = open(&dir, durability, shards)
                                .unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
                            let min = if clean {
                                model.batches.len()
                            } else {
                                model.acked
                            };
                            model.verify(
                                recovered(&reopened),
                                min,
                                &format!("{context} step {step} reopen"),
                            );
                            store = Some(reopened);
                            failed = false;
                        }
                        82..=93 => {
                            let mode = CRASH_MODES[rng.random_range(0..3)];
                            dir.crash_with(mode);
                            drop(store.take());
                            dir.set_faults(FaultPlan::default());
                            let reopened = open(&dir, durability, shards)
                                .unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
                            model.verify(
                                recovered(&reopened),
                                model.acked,
                                &format!("{context} step {step} {mode:?}"),
                            );
                            store = Some(reopened);
                            failed = false;
                        }
                        _ => {
                            if faults && !failed {
                                let nth = rng.random_range(1..4);
                                dir.set_faults(match rng.random_range(0..3) {
                                    0 => FaultPlan::write(nth, FaultKind::NoSpace),
                                    1 => FaultPlan::write(nth, FaultKind::Eio),
                                    _ => FaultPlan::sync(nth),
                                });
                            }
                        }
                    }
                })
                .join()
                .expect("the step's panic is printed above");
        });
    }
    let mode = CRASH_MODES[rng.random_range(0..3)];
    dir.crash_with(mode);
    drop(store.take());
    dir.set_faults(FaultPlan::default());
    let reopened = open(&dir, durability, shards).expect("final reopen");
    model.verify(
        recovered(&reopened),
        model.acked,
        &format!("{context} final {mode:?}"),
    );
}

// Goal: an atomic batch survives every crash whole or not at all, and every acknowledged
// batch survives (issue 12 "atomic batches"). Method: random `WriteBatch`es (insert, put,
// update, remove over 16 keys, 1-6 ops) by `Store::write` and in pipelines (waited or
// dropped), on 1-3 shards, `sync` and `group`, among checkpoints, clean reopens and power
// losses of all three kinds; each recovery must be the base plus whole batches 0..n, with
// n at least the number acknowledged.
#[test]
fn atomic_batches_model() {
    for seed in 0..12u64 {
        let durability = [Durability::Sync, Durability::Group][seed as usize % 2];
        batch_model_run(7000 + seed, durability, 1 + seed as usize % 3, false);
    }
}

// Goal: as `atomic_batches_model`, with injected ENOSPC / EIO: a failed write or fsync may
// leave part of a batch's records on disk, and recovery must drop such a batch whole.
// Method: the same runs with fault plans among the steps.
#[test]
fn atomic_batches_model_with_faults() {
    for seed in 0..12u64 {
        let durability = [Durability::Sync, Durability::Group][seed as usize % 2];
        batch_model_run(8000 + seed, durability, 1 + seed as usize % 3, true);
    }
}

// Goal: a batch whose records reached the disk only in part is dropped whole (issue 12,
// atomic batches), and this really happens (else the model tests could pass without ever
// cutting a batch). Method: a 6-op batch whose own fsync fails (the failed fsync keeps a
// random prefix of its bytes), then a power loss; over seeds, recovery finds all of it or
// none, and some seed leaves a torn batch that recovery reports dropped.
#[test]
fn torn_batch_is_dropped_whole() {
    let mut dropped = 0;
    for seed in 0..60 {
        let dir = SimDir::new(seed);
        let store = open(&dir, Durability::Sync, 1).expect("open");
        store.upsert(b"base", b"1").expect("upsert");
        let mut batch = WriteBatch::new();
        for i in 0..6u8 {
            batch.put(&[b'k', i], &[i; 700]);
        }
        dir.set_faults(FaultPlan::sync(1));
        assert_io(&store.write(&batch).expect_err("the fsync fails"), "write");
        dir.set_faults(FaultPlan::default());
        dir.crash_with(CrashMode::DropUnsynced);
        drop(store);
        let store = open(&dir, Durability::Sync, 1).expect("reopen");
        let keys = (0..6u8)
            .filter(|&i| get(&store, &[b'k', i]).is_some())
            .count();
        assert!(
            keys == 0 || keys == 6,
            "seed {seed}: {keys} of 6 keys recovered"
        );
        assert_eq!(get(&store, b"base"), Some(b"1".to_vec()));
        dropped += store.recovery_report().batches_dropped;
    }
    assert!(dropped > 0, "no seed tore the batch");
}

// Goal: no point reader sees part of an atomic batch (issue 12: get_many reads at one moment
// with respect to batches). Method: a writer writes {a = i, b = i} as one batch for i = 1,
// 2, ... (a and b in different stripes) until the reader, calling get_many(a, b), has seen
// 1,000 different values (no time bound: only how long it takes depends on scheduling);
// every read finds the two equal.
#[test]
fn get_many_never_sees_part_of_a_batch() {
    let (a, b) = (b"alpha".as_slice(), b"beta".as_slice());
    assert_ne!(KeyStripes::index_of(a), KeyStripes::index_of(b));
    let store = open(&SimDir::new(51), Durability::Periodic { interval_ms: 5 }, 2).expect("open");
    const DISTINCT: u64 = 1_000;
    let stop = AtomicBool::new(false);
    let reads = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let v = i.to_le_bytes();
                store
                    .write(WriteBatch::new().put(a, &v).put(b, &v))
                    .expect("write");
            }
        });
        let (mut reads, mut last, mut distinct) = (0u64, None, 0u64);
        while distinct < DISTINCT {
            let mut seen = [None, None];
            store.get_many(&[a, b], &mut |i, v| seen[i] = v.map(<[u8]>::to_vec));
            assert_eq!(seen[0], seen[1], "read {reads}: part of a batch");
            if seen[0] != last {
                distinct += 1;
                last = seen[0].clone();
            }
            reads += 1;
        }
        stop.store(true, Ordering::SeqCst);
        reads
    });
    assert!(reads >= DISTINCT);
}

// Goal: `try_get_each` (the server's run of pipelined GETs, issue 15) reads its keys in
// order, each as `try_get` would: no key shows part of a batch and no later position shows an
// older state than an earlier one. Method: a writer writes {a = i, b = i} as one batch for
// i = 1, 2, ... (different stripes); the reader's lists alternate b and a (and an absent key,
// and more than one chunk of 32 keys) until it has seen 1,000 different values (no time
// bound); along each list and from call to call the values never decrease, the absent key is
// absent; on a quiet store the answers equal `try_get`'s.
#[test]
fn try_get_each_reads_in_order_and_never_part_of_a_batch() {
    let (a, b) = (b"alpha".as_slice(), b"beta".as_slice());
    assert_ne!(KeyStripes::index_of(a), KeyStripes::index_of(b));
    let store = open(&SimDir::new(52), Durability::Periodic { interval_ms: 5 }, 2).expect("open");
    let mut list: Vec<&[u8]> = Vec::new();
    for i in 0..70 {
        list.push(match i % 5 {
            4 => b"absent",
            n if n % 2 == 0 => b,
            _ => a,
        });
    }
    let mut values = vec![Vec::new(); list.len()];
    let mut found = vec![false; list.len()];
    store
        .try_get_each(&list, &mut values, &mut found)
        .expect("read");
    assert!(found.iter().all(|f| !f), "an empty store");
    const DISTINCT: u64 = 1_000;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let v = i.to_be_bytes();
                store
                    .write(WriteBatch::new().put(a, &v).put(b, &v))
                    .expect("write");
            }
        });
        let (mut last, mut distinct, mut calls) = (0u32, 0u64, 0u64);
        while distinct < DISTINCT {
            store
                .try_get_each(&list, &mut values, &mut found)
                .expect("read");
            for (j, key) in list.iter().enumerate() {
                if *key == b"absent" {
                    assert!(!found[j], "call {calls}: the absent key found");
                    continue;
                }
                if !found[j] {
                    // Before the first batch.
                    assert_eq!(last, 0, "call {calls}: position {j} absent after {last}");
                    continue;
                }
                let v = u32::from_be_bytes(values[j][..].try_into().expect("4 bytes"));
                assert!(
                    v >= last,
                    "call {calls}: position {j} ({}) shows {v} after an earlier read showed {last}",
                    String::from_utf8_lossy(key)
                );
                if v != last {
                    distinct += 1;
                    last = v;
                }
            }
            calls += 1;
        }
        stop.store(true, Ordering::SeqCst);
    });
    store
        .try_get_each(&list, &mut values, &mut found)
        .expect("read");
    for (j, key) in list.iter().enumerate() {
        let mut one = Vec::new();
        let hit = store.try_get(key, &mut one).expect("read");
        assert_eq!(found[j], hit, "position {j}");
        if hit {
            assert_eq!(values[j], one, "position {j}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Availability.

/// A disk with little room left: every write of more than `room` bytes fails with ENOSPC
/// (a partly filled block still takes a log header or seal, never a checkpoint).
#[derive(Clone)]
struct NearlyFull {
    inner: SimDir,
    room: usize,
}

struct NearlyFullFile {
    inner: Box<dyn File>,
    room: usize,
}

impl NearlyFullFile {
    fn check(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.room {
            return Err(Error::Io {
                path: self.inner.path().to_path_buf(),
                op: "write",
                source: std::io::Error::from_raw_os_error(28),
            });
        }
        Ok(())
    }
}

impl File for NearlyFullFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_exact_at(offset, buf)
    }
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.check(data)?;
        self.inner.append(data)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(data)?;
        self.inner.write_at(offset, data)
    }
    fn truncate(&mut self, len: u64) -> Result<()> {
        self.inner.truncate(len)
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
}

impl Dir for NearlyFull {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn create(&self, name: &str) -> Result<Box<dyn File>> {
        Ok(Box::new(NearlyFullFile {
            inner: self.inner.create(name)?,
            room: self.room,
        }))
    }
    fn open(&self, name: &str) -> Result<Box<dyn File>> {
        Ok(Box::new(NearlyFullFile {
            inner: self.inner.open(name)?,
            room: self.room,
        }))
    }
    fn exists(&self, name: &str) -> Result<bool> {
        self.inner.exists(name)
    }
    fn list(&self) -> Result<Vec<String>> {
        self.inner.list()
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> Result<()> {
        self.inner.sync_dir()
    }
    fn sync_parent(&self) -> Result<()> {
        self.inner.sync_parent()
    }
    fn lock(&self) -> Result<DirLock> {
        self.inner.lock()
    }
}

/// A plan that fails every write with ENOSPC.
fn every_write_fails() -> FaultPlan {
    FaultPlan {
        faults: (1..=10_000)
            .map(|nth| Fault {
                op: FaultOp::Write,
                nth,
                kind: FaultKind::NoSpace,
            })
            .collect(),
    }
}

// Goal: a cleanly closed store opens without writing a checkpoint, so a full disk does not
// keep it from opening (issue 12, availability). What the simulation allows: an open must
// write its new logs' headers (48 bytes) and recovery re-writes the last run's seals (28
// bytes), so a plan failing every write fails the open; it must fail cleanly (Error::Io) and
// harm nothing. A disk with a little room (every write over 64 bytes fails, `NearlyFull`)
// must open a clean store, with no checkpoint written and the checkpoint files unchanged.
// The same disk refuses a store that crashed, which needs a checkpoint at open (so the
// wrapper really blocks checkpoints).
#[test]
fn clean_store_opens_on_a_full_disk() {
    let dir = SimDir::new(61);
    let store = open(&dir, Durability::Sync, 2).expect("open");
    let mut acked = alternate_writes(&store, 6);
    store.checkpoint().expect("checkpoint");
    for i in 0..4u8 {
        put(&store, &mut acked, &[b'z', i], &[i; 100]);
    }
    store.close().expect("close");
    let checkpoints = checkpoint_files(&dir);
    assert_eq!(checkpoints.len(), 1);

    dir.set_faults(every_write_fails());
    match open(&dir, Durability::Sync, 2) {
        Ok(_) => panic!("an open writes log headers"),
        Err(e) => assert!(e.to_string().contains("No space"), "{e}"),
    }
    dir.set_faults(FaultPlan::default());

    for round in 0..2 {
        let full = NearlyFull {
            inner: dir.clone(),
            room: 64,
        };
        let store = Store::open(full, options(Durability::Sync, 2))
            .unwrap_or_else(|e| panic!("round {round}: a clean store opens on a full disk: {e}"));
        assert_eq!(store.stats().checkpoint_count, 0);
        assert!(
            store.recovery_report().clean,
            "{:?}",
            store.recovery_report()
        );
        assert_eq!(state_of(&store), acked);
        drop(store);
        assert_eq!(checkpoint_files(&dir), checkpoints, "round {round}");
    }

    let store = open(&dir, Durability::Sync, 2).expect("open");
    put(&store, &mut acked, b"after", b"crash");
    dir.crash_with(CrashMode::DropUnsynced);
    drop(store);
    let full = NearlyFull {
        inner: dir.clone(),
        room: 64,
    };
    let err = Store::open(full, options(Durability::Sync, 2))
        .expect_err("an unclean store writes a checkpoint at open");
    assert!(err.to_string().contains("No space"), "{err}");
    let store = open(&dir, Durability::Sync, 2).expect("open with room");
    assert_eq!(state_of(&store), acked);
}

// Goal: a checkpoint that fails with ENOSPC leaves no `checkpoint-*.tmp` and no partial log
// set, and the store either keeps working or refuses writes clearly; acknowledged writes
// survive a power loss (issue 12, availability). Method: ENOSPC at each write of a
// checkpoint in turn, until one succeeds.
#[test]
fn failed_checkpoint_cleans_up() {
    let mut kept_working = 0;
    let mut finished = false;
    for nth in 1..=60 {
        let context = format!("write {nth} of the checkpoint failed");
        let dir = SimDir::new(62);
        let store = open(&dir, Durability::Sync, 2).expect("open");
        let mut acked = alternate_writes(&store, 6);
        dir.set_faults(FaultPlan::write(nth, FaultKind::NoSpace));
        let result = store.checkpoint();
        dir.set_faults(FaultPlan::default());
        if result.is_ok() {
            finished = true;
            break;
        }
        assert_io(&result.expect_err("failed"), &context);
        let names = dir.list().expect("list");
        assert!(
            !names.iter().any(|n| is_checkpoint_tmp(n)),
            "{context}: {names:?}"
        );
        let mut shards_of_set = BTreeMap::<u64, usize>::new();
        for (seq, _, _) in logs(&dir) {
            *shards_of_set.entry(seq).or_default() += 1;
        }
        assert!(
            shards_of_set.values().all(|&n| n == 2),
            "{context}: {names:?}"
        );
        match store.upsert(b"after", b"1") {
            Ok(()) => {
                kept_working += 1;
                acked.insert(b"after".to_vec(), b"1".to_vec());
            }
            Err(e) => assert!(e.to_string().contains("reopen"), "{context}: {e}"),
        }
        dir.crash();
        drop(store);
        let store = open(&dir, Durability::Sync, 2).expect("reopen");
        let got = state_of(&store);
        for (k, v) in &acked {
            assert_eq!(got.get(k), Some(v), "{context}: {:?}", text(k));
        }
    }
    assert!(finished, "the checkpoint has more writes than tried");
    assert!(
        kept_working > 0,
        "no failed checkpoint left the store working"
    );
}

// Goal: a failed directory fsync while a checkpoint is published fails the store: whether
// the rename is durable is unknown (issue 12, availability). Method: EIO at each fsync of a
// checkpoint in turn; where the checkpoint is renamed into place and its publication fails,
// later writes return an error; acknowledged writes survive a power loss in every case.
#[test]
fn failed_publication_fails_the_store() {
    let mut publications_failed = 0;
    let mut finished = false;
    for nth in 1..=60 {
        let context = format!("fsync {nth} of the checkpoint failed");
        let dir = SimDir::new(63);
        let store = open(&dir, Durability::Sync, 2).expect("open");
        let acked = alternate_writes(&store, 6);
        dir.set_faults(FaultPlan::sync(nth));
        let result = store.checkpoint();
        dir.set_faults(FaultPlan::default());
        let Err(e) = result else {
            finished = true;
            break;
        };
        assert_io(&e, &context);
        let published = dir
            .list()
            .expect("list")
            .iter()
            .any(|n| parse_checkpoint_name(n).is_some());
        if published {
            publications_failed += 1;
            let err = store
                .upsert(b"after", b"1")
                .expect_err("a failed publication fails the store");
            assert!(err.to_string().contains("reopen"), "{context}: {err}");
        }
        dir.crash();
        drop(store);
        let store = open(&dir, Durability::Sync, 2).expect("reopen");
        let got = state_of(&store);
        for (k, v) in &acked {
            assert_eq!(got.get(k), Some(v), "{context}: {:?}", text(k));
        }
    }
    assert!(finished, "the checkpoint has more fsyncs than tried");
    assert!(publications_failed > 0, "no fsync failed a publication");
}

// ---------------------------------------------------------------------------------------
// Recovery under faults.

// Goal: an open whose recovery meets injected I/O errors either fails with Error::Io or
// opens with every acknowledged write, and never harms the store: the next open without
// faults (with or without a power loss between) still holds every acknowledged write.
// Method: per seed, writers on 1-3 shards count up 8 keys under `sync` or `group`, with a
// checkpoint among them; a power loss of a random kind; an open with a random write or sync
// fault (nth 1..16); then an open without faults. A key's recovered count lies between its
// last acknowledged and last attempted.
#[test]
fn recovery_under_injected_faults() {
    let (mut opened, mut refused) = (0, 0);
    for seed in 0..48u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let shards = rng.random_range(1..=3);
        let durability = [Durability::Sync, Durability::Group][rng.random_range(0..2)];
        let context = format!("seed {seed} {durability} {shards} shards");
        let dir = SimDir::new(seed);
        let store = open(&dir, durability, shards).expect("open");
        // Per key: (last acknowledged, last attempted) count.
        let mut noted = BTreeMap::<Vec<u8>, (u32, u32)>::new();
        with_lanes(&store, |lanes| {
            for count in 1..=40u32 {
                let key = vec![b'k', rng.random_range(0..8u8)];
                noted.entry(key.clone()).or_default().1 = count;
                let k = key.clone();
                let shard = rng.random_range(0..shards);
                lanes
                    .run(shard, move |s| s.upsert(&k, &count.to_le_bytes()))
                    .expect("upsert");
                noted.entry(key).or_default().0 = count;
                if count == 20 {
                    store.checkpoint().expect("checkpoint");
                }
            }
        });
        dir.crash_with(CRASH_MODES[rng.random_range(0..3)]);
        drop(store);
        let check = |store: &Store, when: &str| {
            let got = state_of(store);
            for (key, value) in &got {
                let count = u32::from_le_bytes(value.as_slice().try_into().expect("4 bytes"));
                let (_, attempted) = noted.get(key).expect("only written keys");
                assert!(
                    count <= *attempted,
                    "{context} {when}: {key:?} never written"
                );
            }
            for (key, (acked, _)) in &noted {
                let count = got
                    .get(key)
                    .map(|v| u32::from_le_bytes(v.as_slice().try_into().expect("4 bytes")));
                assert!(
                    count >= Some(*acked),
                    "{context} {when}: {key:?} = {count:?}, {acked} acknowledged"
                );
            }
        };
        let nth = rng.random_range(1..16);
        let plan = match rng.random_range(0..3) {
            0 => FaultPlan::write(nth, FaultKind::NoSpace),
            1 => FaultPlan::write(nth, FaultKind::Eio),
            _ => FaultPlan::sync(nth),
        };
        dir.set_faults(plan.clone());
        match open(&dir, durability, shards) {
            Ok(store) => {
                opened += 1;
                check(&store, &format!("open under {plan:?}"));
                drop(store);
            }
            Err(e) => {
                refused += 1;
                assert_io(&e, &format!("{context}: open under {plan:?}"));
            }
        }
        dir.set_faults(FaultPlan::default());
        if rng.random_bool(0.5) {
            dir.crash_with(CRASH_MODES[rng.random_range(0..3)]);
        }
        let store = open(&dir, durability, shards)
            .unwrap_or_else(|e| panic!("{context}: open after {plan:?}: {e}"));
        check(&store, &format!("open after {plan:?}"));
    }
    assert!(
        opened > 0 && refused > 0,
        "{opened} opened, {refused} failed"
    );
}

// Goal: a panic while a log is written out fails the store (issue 12, "a flusher thread
// that panics fails the store instead of leaving writers waiting forever"), whichever thread
// writes it out: the flusher (group) or the writer itself (sync). The writer gets an error
// or the panic, never an acknowledgement and never a hang; later writes are refused; after a
// crash every acknowledged write is there. Method: a SimDir plan whose next sync panics; the
// write runs in a thread so that a hang fails the test after 60 s. Without the guards: group
// hangs, and in sync the next write is accepted over the lost records.
#[test]
fn panic_while_writing_the_log_fails_the_store() {
    for (durability, shards) in [(Durability::Group, 1), (Durability::Sync, 2)] {
        let dir = SimDir::new(41);
        let store = Arc::new(open(&dir, durability, shards).expect("open"));
        let mut acked = Map::new();
        for i in 0..20u8 {
            put(&store, &mut acked, &[b'a', i], b"v");
        }
        dir.set_faults(FaultPlan {
            faults: vec![Fault {
                op: FaultOp::Sync,
                nth: 1,
                kind: FaultKind::Panic,
            }],
        });
        let (tx, rx) = mpsc::channel();
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let result = catch_unwind(AssertUnwindSafe(|| store.upsert(b"b", b"after")));
                let _ = tx.send(result.map_err(|_| "the write panicked"));
            })
        };
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the writer hangs after a panic in the log's I/O");
        writer.join().expect("writer");
        match result {
            Ok(Ok(())) => panic!("{durability:?}: a write whose log panicked is acknowledged"),
            Ok(Err(e)) => assert!(e.to_string().contains("panic"), "{e}"),
            Err(_) => {} // sync: the writer's own fsync panicked
        }
        let later = store.upsert(b"c", b"later");
        assert!(
            later.is_err(),
            "{durability:?}: a failed store takes writes"
        );
        drop(store);
        dir.set_faults(FaultPlan::default());
        dir.crash();
        let store = open(&dir, durability, shards).expect("reopen");
        for (key, value) in &acked {
            assert_eq!(get(&store, key).as_ref(), Some(value), "{}", text(key));
        }
    }
}

// rev-coll F1 (review of h-coll, issue 19): forest-server skips rewriting a collection's type
// entry only for a command that changed nothing, and such a reply waits on the type key's
// stripe (`observe`). That is sound only if every change, of members alone too (ZADD of a
// new score, LSET, HSET of a new value), writes the type entry in its unit: then the no-op's
// observe covers the change it read. h-coll first skipped the entry for member-only changes
// too; this test showed a no-op reply (ZADD GT CH -> 0) acknowledged before the change it saw
// was durable, and the server now rewrites it (cmd/coll.rs `settle`).
// Method: the server's two batches modelled on store keys: A's pipeline batch changes a member
// entry and the type entry; B on the other lane observes the type key and waits; a power
// loss; the member must be as B's answer said.
#[test]
fn rev_coll_unchanged_type_entry_observe_covers_member_changes() {
    let type_key: &[u8] = b"\xfftz";
    let stripe = KeyStripes::index_of(type_key);
    let member: Vec<u8> = (0u32..)
        .map(|i| [&[0xffu8][..], format!("m-z-name-m{i}").as_bytes()].concat())
        .find(|k| KeyStripes::index_of(k) != stripe)
        .expect("a member key on another stripe");
    for durability in [Durability::Sync, Durability::Group] {
        for shards in [1, 2] {
            let context = format!("{durability} {shards} shards");
            let dir = SimDir::new(43);
            let store = open(&dir, durability, shards).expect("open");
            store.upsert(type_key, b"meta").expect("upsert");
            store.upsert(&member, b"score 1").expect("upsert");
            let main_shard = shard_of_this_thread(&store);
            let mut batch = store.batch();
            let mut unit = WriteBatch::new();
            unit.put(&member, b"score 5");
            unit.put(type_key, b"meta"); // every change rewrites the type entry
            batch.write(&unit).expect("A's unit");
            with_lanes(&store, |lanes| {
                let other = (main_shard + 1) % shards;
                let seen = member.clone();
                lanes
                    .run(other, move |s| {
                        let mut read = Vec::new();
                        assert!(s.get(&seen, &mut read));
                        assert_eq!(read, b"score 5");
                        let mut b = s.batch();
                        b.observe(b"\xfftz");
                        b.wait()
                    })
                    .expect("B's no-op answered");
            });
            dir.crash_with(CrashMode::DropUnsynced);
            drop(batch);
            drop(store);
            let store = open(&dir, durability, shards).expect("reopen");
            assert_eq!(
                get(&store, &member),
                Some(b"score 5".to_vec()),
                "{context}: B answered from score 5 and was acknowledged"
            );
        }
    }
}
