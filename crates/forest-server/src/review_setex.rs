//! Review of the one-entry layout of strings with a deadline (merge bbc27d1): tests that
//! probe where a string lives while other clients move it, FLUSHDB, the value limit and
//! the migration of older stores.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};

use forest_core::Order;

use crate::cmd::testing::{bulk, run_on, Harness};
use crate::expiry::{encode_string, index_key, split_string_key, string_bounds, string_key};
use crate::frame::Frame;

/// The user keys stored at `FF 'x'`.
fn timed_keys(h: &Harness) -> Vec<Vec<u8>> {
    let (lower, upper) = string_bounds();
    let mut keys = Vec::new();
    h.shared.store.scan(
        Bound::Included(&lower[..]),
        Bound::Excluded(&upper[..]),
        Order::Ascending,
        &mut |key, _| {
            keys.push(split_string_key(key).expect("timed key").to_vec());
            ControlFlow::Continue(())
        },
    );
    keys
}

fn run(h: &crate::server::Shared, client: &mut crate::cmd::Client, argv: &[&str]) -> Frame {
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    run_on(h, client, &argv)
}

// Goal: a SET EX that lands while FLUSHDB runs leaves the store and the map agreeing: a
// string at `FF 'x'` has its deadline in the map (else GET looks at its raw key and misses
// it, while KEYS lists it).
// Method: one thread FLUSHDBs in a loop, another SETs fresh keys with EX; afterwards every
// `FF 'x'` key must have a deadline in the map and be readable by GET.
#[test]
fn flushdb_racing_set_ex_keeps_map_and_store_agreeing() {
    let h = Harness::new();
    let shared = &h.shared;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut client = shared.new_client("f".into(), "f".into(), None);
            for _ in 0..6 {
                // Collections with deadlines: FLUSHDB removes their `FF 'E'` entries one
                // by one between removing `FF 'x'` and clearing the map, widening the gap.
                for j in 0..300 {
                    let name = format!("h{j}");
                    run(shared, &mut client, &["HSET", &name, "f", "v"]);
                    run(shared, &mut client, &["EXPIRE", &name, "1000"]);
                }
                run(shared, &mut client, &["FLUSHDB"]);
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut client = shared.new_client("w".into(), "w".into(), None);
            let mut i = 0u64;
            while !done.load(Ordering::SeqCst) {
                let key = format!("k{i}");
                run(shared, &mut client, &["SET", &key, "v", "EX", "1000"]);
                i += 1;
            }
        });
    });
    let mut client = shared.new_client("c".into(), "c".into(), None);
    let mut orphans = Vec::new();
    for user in timed_keys(&h) {
        let name = String::from_utf8_lossy(&user).into_owned();
        if shared.expires.deadline(&user).is_none() {
            orphans.push((name.clone(), run(shared, &mut client, &["GET", &name])));
        }
    }
    assert!(
        orphans.is_empty(),
        "{} strings at FF 'x' without a deadline in the map (GET's reply), e.g. {:?}",
        orphans.len(),
        &orphans[..orphans.len().min(3)]
    );
}

// Goal: the consequence of F1 when it happens: a string at `FF 'x'` the map does not know
// is invisible to GET yet listed by KEYS; a plain SET then puts it in both places, and
// after a restart the older value (and its deadline) comes back.
// Method: the state F1's race leaves, made by hand (a string at `FF 'x'` with the map
// cleared, as FLUSHDB's `Expires::clear` did). FLUSHDB now keeps writers out, so the state
// can only come from a store written before the fix: at start the map loads it, and KEYS
// and GET agree (a running server does not look for it on every miss).
#[test]
fn string_at_ff_x_unknown_to_map_is_one_key() {
    let h = Harness::new();
    h.shared.expires.freeze_clock();
    let deadline = h.shared.expires.now_ms() + 1_000_000;
    h.shared
        .store
        .upsert(&string_key(b"k"), &encode_string(deadline, b"old"))
        .expect("upsert");
    let mut h = h.restart();
    let keys = h.run(&["KEYS", "k"]);
    let get = h.run(&["GET", "k"]);
    assert_eq!(
        (keys, get),
        (Frame::Array(vec![bulk("k")]), bulk("old")),
        "KEYS and GET agree"
    );
}

/// One value at the limit of the store (1 MiB).
fn value_at_limit() -> String {
    "a".repeat(forest_core::VALUE_BYTES_MAX)
}

// Goal: a value the store accepts without a deadline takes one too, as in Redis and as
// before the one-entry layout (the deadline was a separate entry).
// Method: SET EX, EXPIRE, SETRANGE on a key with a deadline, all with a value at the limit.
#[test]
fn value_at_limit_takes_a_deadline() {
    let mut h = Harness::new();
    let value = value_at_limit();
    assert_eq!(h.run(&["SET", "plain", &value]), Frame::ok());
    assert_eq!(h.run(&["SET", "timed", &value, "EX", "100"]), Frame::ok());
    assert_eq!(h.run(&["EXPIRE", "plain", "100"]), Frame::Integer(1));
    h.run(&["SET", "grow", "x", "EX", "100"]);
    let end = (forest_core::VALUE_BYTES_MAX - 1).to_string();
    assert_eq!(
        h.run(&["SETRANGE", "grow", &end, "z"]),
        Frame::Integer(forest_core::VALUE_BYTES_MAX as i64)
    );
    for key in ["plain", "timed", "grow"] {
        let Frame::Integer(ttl) = h.run(&["TTL", key]) else {
            panic!("TTL {key}");
        };
        assert!(ttl > 0, "{key} keeps its deadline: TTL {ttl}");
        assert_eq!(
            h.run(&["STRLEN", key]),
            Frame::Integer(forest_core::VALUE_BYTES_MAX as i64)
        );
    }
    assert_eq!(h.run(&["GET", "timed"]), bulk(&value));
    // The limit on the value itself is unchanged, and named as the value's.
    let limit = forest_core::VALUE_BYTES_MAX;
    assert_eq!(
        h.run(&["APPEND", "timed", "z"]),
        Frame::err(format!(
            "value too long ({} bytes; the limit is {limit})",
            limit + 1
        ))
    );
    assert_eq!(h.run(&["GET", "timed"]), bulk(&value));
}

// Goal: a store of the older layout whose string at the value limit had a deadline that
// passed while the server was down does not bring the key back.
// Method: write the older layout by hand (raw key + `FF 'E'` entry), restart (migration),
// GET and KEYS.
#[test]
fn migration_keeps_deadline_of_value_at_limit() {
    let h = Harness::new();
    let value = value_at_limit();
    let now = h.shared.expires.now_ms();
    let store = &h.shared.store;
    store.upsert(b"expired", value.as_bytes()).expect("upsert");
    store
        .upsert(&index_key(now - 1_000, b"expired"), b"")
        .expect("upsert");
    let mut h = h.restart();
    let got = h.run(&["GET", "expired"]);
    assert!(
        got == Frame::Null,
        "expired while down, yet GET answers a value: {}",
        matches!(got, Frame::Bulk(_))
    );
    assert_eq!(h.run(&["KEYS", "*"]), Frame::Array(Vec::new()));
}

// Goal: the same for a deadline still to come: the key keeps it across the migration.
// Method: the older layout by hand, restart, PTTL.
#[test]
fn migration_keeps_future_deadline_of_value_at_limit() {
    let h = Harness::new();
    let value = value_at_limit();
    let now = h.shared.expires.now_ms();
    let store = &h.shared.store;
    store.upsert(b"future", value.as_bytes()).expect("upsert");
    store
        .upsert(&index_key(now + 1_000_000, b"future"), b"")
        .expect("upsert");
    let mut h = h.restart();
    let Frame::Integer(pttl) = h.run(&["PTTL", "future"]) else {
        panic!("PTTL");
    };
    assert!(pttl > 0, "future keeps its deadline: PTTL {pttl}");
}

// Goal: a key that always exists is seen by every read while other clients move it
// between its two places (SET EX, PERSIST, EXPIRE, plain SET, KEEPTTL, APPEND, GETEX,
// MULTI-less RENAME round trip excluded: it makes the key absent by design).
// Method: one writer cycles the moves; one reader checks GET, EXISTS, MGET, TYPE, KEYS,
// FOREST.RANGE and SCAN; every reply must show the key.
#[test]
fn key_moved_by_others_is_always_visible() {
    let h = Harness::new();
    let shared = &h.shared;
    {
        let mut c = shared.new_client("s".into(), "s".into(), None);
        run(shared, &mut c, &["SET", "k", "v"]);
        run(shared, &mut c, &["SET", "z", "1", "EX", "1000"]);
    }
    let done = AtomicBool::new(false);
    let failures = parking_lot::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = shared.new_client("w".into(), "w".into(), None);
            for i in 0..3_000 {
                let cmds: [&[&str]; 8] = [
                    &["SET", "k", "v", "EX", "1000"],
                    &["PERSIST", "k"],
                    &["PEXPIRE", "k", "100000"],
                    &["SET", "k", "v"],
                    &["EXPIRE", "k", "1000"],
                    &["SET", "k", "v", "KEEPTTL"],
                    &["GETEX", "k", "PERSIST"],
                    &["MSET", "k", "v"],
                ];
                run(shared, &mut c, cmds[i % cmds.len()]);
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut c = shared.new_client("r".into(), "r".into(), None);
            while !done.load(Ordering::SeqCst) {
                let checks: [(&[&str], Frame); 7] = [
                    (&["GET", "k"], bulk("v")),
                    (&["EXISTS", "k"], Frame::Integer(1)),
                    (
                        &["MGET", "k", "z"],
                        Frame::Array(vec![bulk("v"), bulk("1")]),
                    ),
                    (&["TYPE", "k"], Frame::Simple("string".into())),
                    (&["KEYS", "k"], Frame::Array(vec![bulk("k")])),
                    (
                        &["FOREST.RANGE", "[k", "[k", "KEYSONLY"],
                        Frame::Array(vec![bulk("k")]),
                    ),
                    (&["DBSIZE"], Frame::Integer(2)),
                ];
                for (argv, want) in checks {
                    let got = run(shared, &mut c, argv);
                    if got != want {
                        failures.lock().push((argv.join(" "), got));
                    }
                }
            }
        });
    });
    let failures = failures.into_inner();
    assert!(
        failures.is_empty(),
        "{} misses: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

// Goal: MGET sees an MSET whole (mget.rs's doc) also when one of its keys moves: the key
// read again after a miss must not come from a later MSET than the others.
// Method: a writer alternates EXPIRE a (a moves to `FF 'x'`) and MSET a i b i (a moves
// back); a reader's MGET a b must return equal values.
#[test]
fn mget_sees_mset_whole_while_a_key_moves() {
    let h = Harness::new();
    let shared = &h.shared;
    {
        let mut c = shared.new_client("s".into(), "s".into(), None);
        run(shared, &mut c, &["MSET", "a", "0", "b", "0"]);
    }
    let done = AtomicBool::new(false);
    let torn = parking_lot::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = shared.new_client("w".into(), "w".into(), None);
            for i in 1..5_000 {
                run(shared, &mut c, &["EXPIRE", "a", "1000"]);
                let i = i.to_string();
                run(shared, &mut c, &["MSET", "a", &i, "b", &i]);
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut c = shared.new_client("r".into(), "r".into(), None);
            while !done.load(Ordering::SeqCst) {
                let got = run(shared, &mut c, &["MGET", "a", "b"]);
                if let Frame::Array(items) = &got {
                    if items.len() != 2 || items[0] != items[1] {
                        torn.lock().push(got);
                    }
                }
            }
        });
    });
    let torn = torn.into_inner();
    assert!(
        torn.is_empty(),
        "torn MGETs: {:?}",
        &torn[..torn.len().min(5)]
    );
}

// Goal: after F1's state (a string at `FF 'x'` the map does not know), a plain SET is the
// key's value after a restart, and the key is in one place.
// Method: make the state by hand, SET, restart, GET.
#[test]
fn set_over_orphan_survives_restart() {
    let mut h = Harness::new();
    h.run(&["SET", "other", "1", "EX", "1000"]);
    let deadline = h.shared.expires.now_ms() + 1_000_000;
    h.shared
        .store
        .upsert(&string_key(b"k"), &encode_string(deadline, b"old"))
        .expect("upsert");
    assert_eq!(h.run(&["SET", "k", "new"]), Frame::ok());
    let mut h = h.restart();
    assert_eq!(h.run(&["GET", "k"]), bulk("new"));
    assert_eq!(h.run(&["TTL", "k"]), Frame::Integer(-1));
}

// Goal: a key KEYS (or FOREST.RANGE) lists is then readable by GET when nothing deletes
// it: SET EX of a new key writes `FF 'x'` before the map knows the deadline, and it does
// not count as a move, so GET in between looks at the raw key, misses, and does not retry.
// Method: a writer SETs new keys with EX in key order; a reader takes the last key
// FOREST.RANGE lists and GETs it at once.
#[test]
fn listed_new_key_is_readable() {
    let h = Harness::new();
    let shared = &h.shared;
    {
        let mut c = shared.new_client("s".into(), "s".into(), None);
        run(shared, &mut c, &["SET", "a", "1", "EX", "1000"]);
    }
    let done = AtomicBool::new(false);
    let misses = parking_lot::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = shared.new_client("w".into(), "w".into(), None);
            for i in 0..200_000 {
                let key = format!("n{i:07}");
                run(shared, &mut c, &["SET", &key, "v", "EX", "1000"]);
            }
            done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut c = shared.new_client("r".into(), "r".into(), None);
            while !done.load(Ordering::SeqCst) {
                let last = run(
                    shared,
                    &mut c,
                    &["FOREST.RANGE", "[n", "+", "REV", "KEYSONLY", "LIMIT", "1"],
                );
                let Frame::Array(items) = last else { continue };
                let Some(Frame::Bulk(key)) = items.first() else {
                    continue;
                };
                let key = String::from_utf8_lossy(key).into_owned();
                if run(shared, &mut c, &["GET", &key]) == Frame::Null {
                    misses.lock().push(key);
                }
            }
        });
    });
    let misses = misses.into_inner();
    assert!(
        misses.is_empty(),
        "{} listed keys GET missed, e.g. {:?}",
        misses.len(),
        &misses[..misses.len().min(3)]
    );
}

// Goal: writes keep or clear a string's deadline as Redis 7.0 does, the value written
// where the string lives, before and after a restart; RENAME onto itself keeps it.
// Method: one key per write command, each with a deadline first; TTL's sign and GET.
#[test]
fn writes_keep_or_clear_deadlines_across_restart() {
    let mut h = Harness::new();
    let setups: [(&str, &[&str], &str, bool); 11] = [
        ("ap", &["APPEND", "ap", "x"], "vx", true),
        ("in", &["INCR", "in"], "2", true),
        ("gs", &["GETSET", "gs", "w"], "w", false),
        ("kt", &["SET", "kt", "w", "KEEPTTL"], "w", true),
        ("ms", &["MSET", "ms", "w", "other", "o"], "w", false),
        ("r2", &["RENAME", "r", "r2"], "v", true),
        ("self", &["RENAME", "self", "self"], "v", true),
        ("c2", &["COPY", "c", "c2"], "v", true),
        ("sr", &["SETRANGE", "sr", "0", "J"], "Jello", true),
        ("sb", &["SETBIT", "sb", "7", "1"], "\u{1}", true),
        ("pl", &["SET", "pl", "w"], "w", false),
    ];
    for (key, _, _, _) in &setups {
        let init = match *key {
            "in" => "1",
            "sr" => "hello",
            "sb" => "\u{0}",
            _ => "v",
        };
        let source = match *key {
            "r2" => "r",
            "c2" => "c",
            k => k,
        };
        assert_eq!(h.run(&["SET", source, init, "EX", "1000"]), Frame::ok());
    }
    for (_, write, _, _) in &setups {
        let reply = h.run(write);
        assert!(!matches!(reply, Frame::Error(_)), "{write:?}: {reply:?}");
    }
    for round in 0..2 {
        for (key, write, value, keeps) in &setups {
            assert_eq!(h.run(&["GET", key]), bulk(value), "{write:?} round {round}");
            let Frame::Integer(ttl) = h.run(&["TTL", key]) else {
                panic!("TTL");
            };
            assert_eq!(ttl > 0, *keeps, "{write:?} round {round}: TTL {ttl}");
        }
        assert_eq!(h.run(&["EXISTS", "r"]), Frame::Integer(0));
        // The 11 keys, c and other.
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(13), "round {round}");
        assert_eq!(
            timed_keys(&h).len(),
            9,
            "round {round}: strings at FF 'x' (c too)"
        );
        h = h.restart();
    }
}
