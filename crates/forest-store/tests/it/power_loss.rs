//! Simulated power losses while writers run (issue 12 "Proof"; STYLE.md §5 "Simulated file"):
//! each cycle opens a store on a `SimDir` (engine, durability and shard count drawn from the
//! seed), starts writer threads that issue single writes and atomic batches and record each
//! acknowledgement (and, half the time, a checkpoint), and cuts the power from another thread at a random moment — the kind of
//! loss drawn at random: a random prefix of the unsynced writes with a torn page, unsynced
//! pages in any order (`Scatter`), or nothing unsynced. Writes after the loss fail (the
//! process is gone). The directory is then reopened, and:
//!
//! - each writer's keys are the state before plus a prefix of its writes that holds every
//!   acknowledged one (`sync` and `group`);
//! - every batch is whole: a batch writes a key and its twin (`<key>~`) together, and a batch
//!   recovered in part leaves them apart, which no prefix explains.
//!
//! Each thread owns its keys and sends a write only once the last was acknowledged. The same directory goes through
//! every cycle of a seed, so recovery runs over the remains of earlier recoveries.
//! `FOREST_POWER_LOSS_CYCLES` sets the number of losses (default a CI-sized share); the test
//! prints the losses and the acknowledged writes it checked (docs/RELIABILITY.md).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use forest_store::file::{CrashMode, SimDir};
use forest_store::{engine_names, Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CYCLES_ENV: &str = "FOREST_POWER_LOSS_CYCLES";
/// Losses per run by default: a bounded share for CI (a few seconds in the `ci` profile).
const CYCLES_DEFAULT: u64 = 60;
/// Losses per directory before a fresh one is started.
const CYCLES_PER_DIR: u64 = 10;
const THREADS: u64 = 3;
const KEYS_PER_THREAD: u64 = 12;

/// What a writer thread sent, in order: (key, value or removal, written with its twin).
type Sent = Vec<(Vec<u8>, Option<Vec<u8>>, bool)>;

/// A writer's record: what it sent, and how many of those were acknowledged.
#[derive(Default)]
struct WriterLog {
    sent: Sent,
    acked: usize,
}

fn twin(key: &[u8]) -> Vec<u8> {
    [key, b"~"].concat()
}

/// Writes until a write fails (the power is gone) or `stop`; records every write before
/// sending it and every acknowledgement after.
fn writer(store: &Store, thread: u64, seed: u64, log: &Mutex<WriterLog>, stop: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(seed ^ (thread << 32));
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("t{thread}/k{:02}", rng.random_range(0..KEYS_PER_THREAD)).into_bytes();
        let value = (!rng.random_ratio(1, 5)).then(|| {
            format!(
                "{seed}.{thread}.{seq}.{}",
                "v".repeat(rng.random_range(0..80))
            )
        });
        let value = value.map(String::into_bytes);
        let batch = rng.random_ratio(1, 3);
        seq += 1;
        log.lock()
            .expect("log")
            .sent
            .push((key.clone(), value.clone(), batch));
        let result = if batch {
            let mut b = WriteBatch::new();
            match &value {
                Some(v) => b.put(&key, v).put(&twin(&key), v),
                None => b.remove(&key).remove(&twin(&key)),
            };
            store.write(&b).map(|_| ())
        } else {
            match &value {
                Some(v) => store.upsert(&key, v),
                None => store.remove(&key).map(|_| ()),
            }
        };
        if result.is_err() {
            return; // the power is gone: nothing more is acknowledged
        }
        log.lock().expect("log").acked += 1;
    }
}

/// Checks one writer's keys (and twins) in `recovered`: they must be `before` plus a prefix of
/// the writer's writes holding every acknowledged one (at most the one in flight more: a
/// writer sends its next write only after the last was acknowledged). A batch recovered in
/// part leaves a key and its twin apart, which no prefix explains. Returns the acknowledged
/// writes checked.
fn check(
    recovered: &BTreeMap<Vec<u8>, Vec<u8>>,
    before: &BTreeMap<Vec<u8>, Vec<u8>>,
    log: &WriterLog,
    thread: u64,
    what: &str,
) -> usize {
    let prefix = format!("t{thread}/").into_bytes();
    let own = |state: &BTreeMap<Vec<u8>, Vec<u8>>| -> BTreeMap<Vec<u8>, Vec<u8>> {
        state
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let target = own(recovered);
    let mut model = own(before);
    let mut matched = None;
    for len in 0..=log.sent.len() {
        if len > 0 {
            let (key, value, batch) = &log.sent[len - 1];
            let mut keys = vec![key.clone()];
            if *batch {
                keys.push(twin(key));
            }
            for k in keys {
                match value {
                    Some(v) => model.insert(k, v.clone()),
                    None => model.remove(&k),
                };
            }
        }
        if len >= log.acked && model == target {
            matched = Some(len);
            break;
        }
    }
    assert!(
        matched.is_some(),
        "{what}: thread {thread}'s keys match no prefix holding its {} acknowledged writes \
         ({} sent); recovered {:?}",
        log.acked,
        log.sent.len(),
        target
            .iter()
            .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v)))
            .collect::<Vec<_>>()
    );
    log.acked
}

fn open(dir: &SimDir, engine: &str, durability: Durability, shards: usize) -> Store {
    Store::open(
        dir.clone(),
        StoreOptions {
            engine: Some(engine.to_string()),
            durability,
            shards,
            switch_engine: false,
            memory_budget_bytes: None,
            map_checkpoint_wal_bytes: None,
        },
    )
    .unwrap_or_else(|e| panic!("recovery after a power loss: {e}"))
}

// Goal: no acknowledged write is lost and no batch is recovered in part, whatever a power
// loss keeps of the unsynced bytes, with writers running when it strikes. Method: see the
// module doc; every engine, `sync` and `group`, 1-3 shards.
#[test]
fn power_loss_while_writing() {
    let cycles: u64 = std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CYCLES_DEFAULT);
    let mut acked_checked = 0;
    let mut modes = BTreeMap::new();
    for dir_seed in 0..cycles.div_ceil(CYCLES_PER_DIR) {
        let mut rng = StdRng::seed_from_u64(dir_seed);
        let engine = engine_names()[rng.random_range(0..engine_names().len())];
        let durability = if rng.random_bool(0.5) {
            Durability::Sync
        } else {
            Durability::Group
        };
        let shards = rng.random_range(1..=3);
        let dir = SimDir::new(dir_seed);
        let mut state = BTreeMap::new();
        for cycle in 0..CYCLES_PER_DIR.min(cycles - dir_seed * CYCLES_PER_DIR) {
            let seed = dir_seed * 1000 + cycle;
            let store = open(&dir, engine, durability, shards);
            assert_eq!(
                store.to_vec().into_iter().collect::<BTreeMap<_, _>>(),
                state,
                "seed {seed}: the state before the cycle"
            );
            let logs: Vec<Mutex<WriterLog>> = (0..THREADS).map(|_| Mutex::default()).collect();
            let stop = AtomicBool::new(false);
            let mode = match rng.random_range(0..3) {
                0 => CrashMode::Random,
                1 => CrashMode::Scatter,
                _ => CrashMode::DropUnsynced,
            };
            *modes.entry(format!("{mode:?}")).or_insert(0u64) += 1;
            let delay = std::time::Duration::from_micros(rng.random_range(0..4000));
            let checkpoint_at =
                (rng.random_bool(0.5)).then(|| delay.mul_f64(rng.random_range(0.0..1.0)));
            std::thread::scope(|s| {
                for (thread, log) in logs.iter().enumerate() {
                    let (store, stop) = (&store, &stop);
                    s.spawn(move || writer(store, thread as u64, seed, log, stop));
                }
                if let Some(at) = checkpoint_at {
                    // A checkpoint (log rotation, seals, deletions) the loss may cut short.
                    let store = &store;
                    s.spawn(move || {
                        std::thread::sleep(at);
                        let _ = store.checkpoint();
                    });
                }
                std::thread::sleep(delay);
                dir.crash_with(mode);
                stop.store(true, Ordering::Relaxed);
            });
            drop(store);
            let reopened = open(&dir, engine, durability, shards);
            let recovered: BTreeMap<_, _> = reopened.to_vec().into_iter().collect();
            let what = format!("seed {seed} {engine} {durability} {shards} shards {mode:?}");
            for (thread, log) in logs.iter().enumerate() {
                let log = log.lock().expect("log");
                acked_checked += check(&recovered, &state, &log, thread as u64, &what);
            }
            reopened.close().expect("close");
            state = recovered;
        }
    }
    assert!(
        acked_checked > 0,
        "no write was acknowledged before any loss"
    );
    println!(
        "power_loss_while_writing: {cycles} power losses ({modes:?}), {acked_checked} \
         acknowledged writes checked, 0 lost"
    );
}
