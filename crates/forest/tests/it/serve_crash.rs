//! The crash test through the network (issue 6 "Tests"; STYLE.md §5 "SIGKILL test").
//!
//! A client thread writes SETs and DELs of a few keys to `forest serve`, one at a time or
//! pipelined, and records each write before sending it and each acknowledgement as its reply
//! arrives. The test SIGKILLs the server at a random moment, restarts it on the same
//! directory, and reads every key back. In `sync` and `group` an acknowledged write is
//! durable, so each key must hold the value of its last acknowledged write or of a later
//! (sent, unacknowledged) one; with no write acknowledged this cycle, the value it had after
//! the last recovery or that of any sent write. A value no write explains fails the test.
//! Values name their cycle and sequence number, so a stale or stray value is traceable.
//!
//! Each test runs every engine of the store, killing one directory per engine
//! `FOREST_KILL_CYCLES` times (default 3: 4 tests x 3 engines x 3 = 36 kills per run, a few
//! seconds), so recovery runs over the remains of earlier recoveries.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{data_dir, io_flag_sets, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// The environment variable that sets the kill cycles per test.
const CYCLES_ENV: &str = "FOREST_KILL_CYCLES";
/// Cycles per engine and test by default (see the module doc).
const CYCLE_COUNT_DEFAULT: u64 = 3;
/// Keys the writer cycles through: few, so keys are overwritten and deleted often.
const KEY_COUNT: u32 = 64;
/// Commands per pipeline at most (pipelined mode).
const PIPELINE_COMMANDS_MAX: usize = 64;
/// The kill comes after this long at most (drawn uniformly from 20 ms up).
const KILL_DELAY_MS_MAX: u64 = 400;

/// One write: `None` is a DEL.
type Write = (Vec<u8>, Option<Vec<u8>>);

/// What the writer did this cycle: every write in sending order, and how many of them (a
/// prefix, since replies come in order) were acknowledged.
#[derive(Default)]
struct Log {
    sent: Vec<Write>,
    acked: usize,
}

/// Writes until the connection breaks (the kill), logging sends and acknowledgements.
fn writer(con: &mut redis::Connection, log: &Mutex<Log>, seed: u64, cycle: u64, pipelined: bool) {
    let mut rng = StdRng::seed_from_u64(seed ^ cycle.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut seq = 0u64;
    loop {
        let batch = if pipelined {
            rng.random_range(1..=PIPELINE_COMMANDS_MAX)
        } else {
            1
        };
        let mut pipe = redis::pipe();
        let mut writes = Vec::with_capacity(batch);
        for _ in 0..batch {
            let key = format!("key{:03}", rng.random_range(0..KEY_COUNT)).into_bytes();
            let value = if rng.random_ratio(1, 5) {
                pipe.cmd("DEL").arg(&key);
                None
            } else {
                let pad = "x".repeat(rng.random_range(0..100));
                let v = format!("c{cycle}.s{seq}.{pad}").into_bytes();
                pipe.cmd("SET").arg(&key).arg(&v);
                Some(v)
            };
            seq += 1;
            writes.push((key, value));
        }
        // Logged as sent before the bytes leave, so a write the server saw is always known.
        log.lock().expect("log").sent.extend(writes.iter().cloned());
        let replies: Vec<Value> = match pipe.query(con) {
            Ok(r) => r,
            Err(_) => return, // The server is gone; the unacknowledged writes stay "sent".
        };
        assert_eq!(replies.len(), writes.len());
        for ((_, value), reply) in writes.iter().zip(&replies) {
            match (value, reply) {
                (Some(_), Value::Okay) | (None, Value::Int(0 | 1)) => {}
                other => panic!("unexpected reply {other:?}"),
            }
        }
        log.lock().expect("log").acked += writes.len();
    }
}

/// Every key's value after recovery.
fn read_all(server: &Server) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut con = server.client();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).expect("KEYS");
    let mut state = BTreeMap::new();
    for key in keys {
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).expect("GET");
        if let Some(v) = value {
            state.insert(key, v);
        }
    }
    state
}

/// Checks `recovered` against `before` (the state the cycle started from) and the cycle's log.
fn check(
    recovered: &BTreeMap<Vec<u8>, Vec<u8>>,
    before: &BTreeMap<Vec<u8>, Vec<u8>>,
    log: &Log,
    what: &str,
) {
    let mut keys: Vec<&Vec<u8>> = recovered.keys().chain(before.keys()).collect();
    keys.extend(log.sent.iter().map(|(k, _)| k));
    keys.sort();
    keys.dedup();
    for key in keys {
        let got = recovered.get(key);
        // Indexes of this key's writes, and the last acknowledged one among them.
        let writes: Vec<usize> = (0..log.sent.len())
            .filter(|&i| log.sent[i].0 == *key)
            .collect();
        let last_acked = writes.iter().copied().filter(|&i| i < log.acked).max();
        let mut allowed: Vec<Option<&Vec<u8>>> = Vec::new();
        if last_acked.is_none() {
            allowed.push(before.get(key));
        }
        let from = last_acked.unwrap_or(0);
        allowed.extend(
            writes
                .iter()
                .filter(|&&i| i >= from)
                .map(|&i| log.sent[i].1.as_ref()),
        );
        assert!(
            allowed.contains(&got),
            "{what}: key {} holds {:?}; allowed: {:?} (last acked write #{last_acked:?}, {} sent, {} acked)",
            String::from_utf8_lossy(key),
            got.map(|v| String::from_utf8_lossy(v).into_owned()),
            allowed
                .iter()
                .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()))
                .collect::<Vec<_>>(),
            log.sent.len(),
            log.acked,
        );
    }
}

fn cycles() -> u64 {
    std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CYCLE_COUNT_DEFAULT)
}

/// Kill cycles with `mode` durability, one directory per engine, under the default I/O model.
fn crash_cycles(mode: &str, pipelined: bool) {
    for engine in forest_store::engine_names() {
        crash_cycles_on(engine, mode, pipelined, &[], cycles());
    }
}

/// `count` kill cycles on one directory with `engine`, `mode` and the `io` flags.
fn crash_cycles_on(engine: &str, mode: &str, pipelined: bool, io: &[&str], count: u64) {
    let seed: u64 = rand::rng().random();
    println!("seed {seed}, engine {engine}, mode {mode}, pipelined {pipelined}, io {io:?}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_tmp, dir) = data_dir();
    let mut flags = vec!["--engine", engine, "--durability", mode];
    flags.extend_from_slice(io);
    let mut state = BTreeMap::new();
    let mut total_acked = 0;
    for cycle in 0..count {
        let mut server = Server::start(&dir, &flags);
        let recovered = read_all(&server);
        assert_eq!(
            recovered, state,
            "cycle {cycle}: the state read before the kill"
        );
        let log = Arc::new(Mutex::new(Log::default()));
        let mut con = server.client();
        let thread_log = Arc::clone(&log);
        let thread = std::thread::spawn(move || {
            writer(&mut con, &thread_log, seed, cycle, pipelined);
        });
        std::thread::sleep(Duration::from_millis(
            rng.random_range(20..=KILL_DELAY_MS_MAX),
        ));
        server.kill();
        thread.join().expect("writer thread");
        let log = std::mem::take(&mut *log.lock().expect("log"));
        total_acked += log.acked;

        let server = Server::start(&dir, &flags);
        let recovered = read_all(&server);
        let what = format!(
            "seed {seed} engine {engine} mode {mode} pipelined {pipelined} io {io:?} cycle {cycle}"
        );
        check(&recovered, &state, &log, &what);
        state = recovered;
    }
    assert!(total_acked > 0, "no write was acknowledged in any cycle");
    println!("{total_acked} acknowledged writes checked");
}

// Goal: every acknowledged write survives SIGKILL in sync mode, one command at a time.
// Method: kill cycles (module doc).
#[test]
fn crash_sync_single_commands() {
    crash_cycles("sync", false);
}

// Goal: every acknowledged write survives SIGKILL in sync mode under pipelining (one
// durability wait per batch). Method: kill cycles (module doc).
#[test]
fn crash_sync_pipelined() {
    crash_cycles("sync", true);
}

// Goal: every acknowledged write survives SIGKILL in group mode, one command at a time.
// Method: kill cycles (module doc).
#[test]
fn crash_group_single_commands() {
    crash_cycles("group", false);
}

// Goal: every acknowledged write survives SIGKILL in group mode under pipelining. Method:
// kill cycles (module doc).
#[test]
fn crash_group_pipelined() {
    crash_cycles("group", true);
}

// Goal: acknowledged writes survive SIGKILL under every I/O model, not only the default
// (review rev-pcore F4: with per-core the default, the tests above no longer ran threads).
// Method: kill cycles (module doc), sync and pipelined, one engine, 2 cycles per `--io`
// flag set (a small case: the tests above cover the engines and modes).
#[test]
fn crash_sync_pipelined_under_each_io_model() {
    let engine = forest_store::engine_names()[0];
    for io in io_flag_sets() {
        crash_cycles_on(engine, "sync", true, &io, 2);
    }
}
