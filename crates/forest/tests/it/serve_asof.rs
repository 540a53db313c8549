//! `forest serve --engine tsbtree` (docs/PROTOCOL.md "Reads as of a time"): through a Redis
//! client, a writer's as-of answers are recorded as it goes; the server is killed (SIGKILL)
//! mid writes and restarted, and every recorded answer is given again, and each key's
//! history holds its acknowledged writes in order.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{data_dir, query, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: u32 = 6;

/// What the writer saw: acknowledged writes per key (None: a DEL that deleted), and
/// as-of answers (key, time, value).
#[derive(Default)]
struct Seen {
    writes: BTreeMap<String, Vec<Option<String>>>,
    answers: Vec<(String, i64, Option<String>)>,
}

fn try_query(con: &mut redis::Connection, args: &[&str]) -> Option<redis::Value> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(con).ok()
}

fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::Nil => None,
        other => panic!("not a bulk or nil: {other:?}"),
    }
}

/// Writes until the server dies: SET or DEL of a random key, and after some writes
/// ASOF.NOW and an ASOF.GET of a random key at that time.
fn writer(mut con: redis::Connection, seen: &Mutex<Seen>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for n in 0u64.. {
        let key = format!("k{}", rng.random_range(0..KEYS));
        let write = if rng.random_range(0..4) == 0 {
            match try_query(&mut con, &["DEL", &key]) {
                Some(redis::Value::Int(1)) => Some(None),
                Some(_) => None,
                None => return,
            }
        } else {
            let value = format!("v{n}");
            if try_query(&mut con, &["SET", &key, &value]).is_none() {
                return;
            }
            Some(Some(value))
        };
        if let Some(w) = write {
            seen.lock()
                .expect("seen")
                .writes
                .entry(key)
                .or_default()
                .push(w);
        }
        if n % 3 == 0 {
            let Some(redis::Value::Int(t)) = try_query(&mut con, &["ASOF.NOW"]) else {
                return;
            };
            let key = format!("k{}", rng.random_range(0..KEYS));
            let Some(v) = try_query(&mut con, &["ASOF.GET", &key, &t.to_string()]) else {
                return;
            };
            seen.lock().expect("seen").answers.push((key, t, text(&v)));
        }
    }
}

// Goal: as-of answers given before a SIGKILL are the same after it, and every acknowledged
// write is in its key's history, in order. Method: two kill cycles of a writer thread
// against `forest serve --engine tsbtree --durability group`, then the checks over all
// cycles' answers.
#[test]
fn asof_answers_survive_sigkill() {
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let (_tmp, dir) = data_dir();
    let flags = ["--engine", "tsbtree", "--durability", "group"];
    let seen = Arc::new(Mutex::new(Seen::default()));
    for cycle in 0..2 {
        let mut server = Server::start(&dir, &flags);
        let con = server.client();
        let thread_seen = Arc::clone(&seen);
        let thread = std::thread::spawn(move || writer(con, &thread_seen, seed ^ cycle));
        std::thread::sleep(Duration::from_millis(150));
        server.kill();
        thread.join().expect("writer");
    }
    let server = Server::start(&dir, &flags);
    let mut con = server.client();
    let seen = seen.lock().expect("seen");
    assert!(!seen.answers.is_empty(), "seed {seed}: no answers recorded");
    for (key, t, answer) in &seen.answers {
        let v = query(
            &mut con,
            &[b"ASOF.GET", key.as_bytes(), t.to_string().as_bytes()],
        );
        assert_eq!(
            &text(&v),
            answer,
            "seed {seed}: ASOF.GET {key} {t} after the kills"
        );
    }
    for (key, writes) in &seen.writes {
        let redis::Value::Array(items) = query(&mut con, &[b"ASOF.HISTORY", key.as_bytes()]) else {
            panic!("history is an array");
        };
        let values: Vec<Option<String>> = items.iter().skip(1).step_by(2).map(text).collect();
        // Acknowledged writes in order; at most one more per cycle (a write in flight at a
        // kill) may follow any of them.
        let mut at = 0;
        for w in writes {
            while values.get(at).is_some_and(|v| v != w) {
                at += 1;
            }
            assert!(
                at < values.len(),
                "seed {seed}: {key}'s acknowledged {w:?} is not in its history {values:?}"
            );
            at += 1;
        }
        assert!(
            values.len() <= writes.len() + 2,
            "seed {seed}: {key}'s history {values:?} has more than its writes {writes:?}"
        );
    }
}
