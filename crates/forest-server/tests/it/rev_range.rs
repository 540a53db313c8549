//! Review rev-range (session 19): the range reads encoded in place (FOREST.RANGE, LRANGE,
//! ZRANGEBYSCORE / ZRANGEBYLEX / ZRANGE) racing atomic writes (MSET, MULTI/EXEC) over real
//! sockets: a reply never mixes two writes, its count always equals its elements, whether
//! the read stayed in place or switched to the ordinary scan (values past 1 MiB).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{Running, R};
use forest_server::IoModel;

/// Runs `write(client, round)` in a loop on one connection and `check(client)` on two others
/// for `time`; returns (writes, checks).
fn race(
    server: &Running,
    time: Duration,
    write: impl Fn(&mut common::Client, u64) + Send + Sync + 'static,
    check: impl Fn(&mut common::Client) + Send + Sync + 'static,
) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let write = Arc::new(write);
    let check = Arc::new(check);
    let writer = {
        let (mut c, stop, write) = (server.client(), Arc::clone(&stop), Arc::clone(&write));
        thread::spawn(move || {
            let mut round = 1u64;
            while !stop.load(Ordering::Relaxed) {
                write(&mut c, round);
                round += 1;
            }
            round
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (mut c, stop, check, checks) = (
                server.client(),
                Arc::clone(&stop),
                Arc::clone(&check),
                Arc::clone(&checks),
            );
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    check(&mut c);
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    thread::sleep(time);
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().expect("writer");
    for r in readers {
        r.join().expect("reader");
    }
    (writes, checks.load(Ordering::Relaxed))
}

fn texts(reply: R) -> Vec<String> {
    reply.items().iter().map(R::text).collect()
}

/// FOREST.RANGE of 50 keys racing MSETs of all 50 (`value_len` bytes of the round's digit):
/// every pair reply holds 50 keys of one MSET; KEYSONLY 50 keys.
fn forest_range_vs_mset(value_len: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::PerCore);
    let mset = move |c: &mut common::Client, round: u64| {
        let value = char::from(b'0' + (round % 10) as u8)
            .to_string()
            .repeat(value_len);
        let keys: Vec<String> = (0..50).map(|i| format!("k{i:02}")).collect();
        let mut argv: Vec<&str> = vec!["MSET"];
        for k in &keys {
            argv.push(k);
            argv.push(&value);
        }
        assert_eq!(c.cmd(&argv), R::Simple("OK".into()));
    };
    mset(&mut server.client(), 0);
    let (writes, checks) = race(&server, Duration::from_millis(1500), mset, move |c| {
        let pairs = texts(c.cmd(&["FOREST.RANGE", "[k00", "[k49", "LIMIT", "100"]));
        assert_eq!(pairs.len(), 100, "50 pairs");
        let first = pairs[1].clone();
        for (i, pair) in pairs.chunks(2).enumerate() {
            assert_eq!(pair[0], format!("k{i:02}"), "keys in order, once each");
            assert_eq!(pair[1].len(), value_len);
            assert!(pair[1] == first, "two MSETs in one FOREST.RANGE reply");
        }
        let keys = texts(c.cmd(&["FOREST.RANGE", "[k00", "[k49", "KEYSONLY", "REV"]));
        assert_eq!(keys.len(), 50, "KEYSONLY");
    });
    assert!(writes > 2 && checks > 2, "{writes} writes {checks} checks");
}

// Goal: FOREST.RANGE in place (8-byte values) never mixes two MSETs.
#[test]
fn forest_range_in_place_vs_mset() {
    forest_range_vs_mset(8);
}

// Goal: FOREST.RANGE whose read passes 1 MiB (50 values of 30 000 bytes: restarted, then the
// ordinary scan) never mixes two MSETs, nor duplicates or misses a key.
#[test]
fn forest_range_switched_vs_mset() {
    forest_range_vs_mset(30_000);
}

// Goal: ZRANGEBYSCORE / ZREVRANGEBYSCORE WITHSCORES / ZRANGEBYLEX / ZRANGE racing a MULTI
// that replaces the whole set (DEL, then ZADD of 60 members named by the round): each reply
// is one round's members, all 60 (or its LIMIT page), in RESP2 and RESP3.
#[test]
fn zset_ranges_vs_exec_replacing_the_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::PerCore);
    let replace = |c: &mut common::Client, round: u64| {
        assert_eq!(c.cmd(&["MULTI"]), R::Simple("OK".into()));
        c.cmd(&["DEL", "z"]);
        let members: Vec<String> = (0..60).map(|i| format!("r{round:06}-{i:02}")).collect();
        let mut argv: Vec<String> = vec!["ZADD".into(), "z".into()];
        for (i, m) in members.iter().enumerate() {
            argv.push(i.to_string());
            argv.push(m.clone());
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        c.cmd(&argv);
        match c.cmd(&["EXEC"]) {
            R::Arr(items) => assert_eq!(items.len(), 2),
            other => panic!("EXEC: {other:?}"),
        }
    };
    replace(&mut server.client(), 0);
    let one_round = |members: &[String], n: usize, what: &str| {
        assert_eq!(members.len(), n, "{what}: count");
        let round = &members[0][..7];
        assert!(
            members.iter().all(|m| m.starts_with(round)),
            "{what}: two rounds in one reply: {members:?}"
        );
    };
    let (writes, checks) = race(&server, Duration::from_millis(1500), replace, move |c| {
        for proto in ["2", "3"] {
            c.cmd(&["HELLO", proto]);
            let m = texts(c.cmd(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "5", "50"]));
            one_round(&m, 50, "ZRANGEBYSCORE");
            let m = texts(c.cmd(&["ZRANGEBYLEX", "z", "-", "+"]));
            one_round(&m, 60, "ZRANGEBYLEX");
            let m = texts(c.cmd(&["ZRANGE", "z", "0", "-1"]));
            one_round(&m, 60, "ZRANGE");
            // WITHSCORES in RESP2 only (the test client reads no RESP3 doubles).
            let m: Vec<String> = match proto {
                "2" => texts(c.cmd(&["ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES"]))
                    .into_iter()
                    .step_by(2)
                    .collect(),
                _ => texts(c.cmd(&["ZREVRANGEBYSCORE", "z", "+inf", "-inf"])),
            };
            one_round(&m, 60, "ZREVRANGEBYSCORE WITHSCORES");
        }
    });
    assert!(writes > 2 && checks > 2, "{writes} writes {checks} checks");
}

// Goal: LRANGE racing a MULTI that replaces the list (DEL, RPUSH of 120 elements named by the
// round): each reply is one round's 120 elements (or its page), negative indices included.
#[test]
fn lrange_vs_exec_replacing_the_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::PerCore);
    let replace = |c: &mut common::Client, round: u64| {
        assert_eq!(c.cmd(&["MULTI"]), R::Simple("OK".into()));
        c.cmd(&["DEL", "l"]);
        let elements: Vec<String> = (0..120).map(|i| format!("r{round:06}-{i:03}")).collect();
        let mut argv: Vec<&str> = vec!["RPUSH", "l"];
        argv.extend(elements.iter().map(String::as_str));
        c.cmd(&argv);
        match c.cmd(&["EXEC"]) {
            R::Arr(items) => assert_eq!(items.len(), 2),
            other => panic!("EXEC: {other:?}"),
        }
    };
    replace(&mut server.client(), 0);
    let (writes, checks) = race(&server, Duration::from_millis(1500), replace, move |c| {
        for (start, stop, n) in [("0", "-1", 120), ("0", "99", 100), ("-50", "-11", 40)] {
            let e = texts(c.cmd(&["LRANGE", "l", start, stop]));
            assert_eq!(e.len(), n, "LRANGE {start} {stop}: count");
            let round = &e[0][..7];
            assert!(
                e.iter().all(|x| x.starts_with(round)),
                "LRANGE {start} {stop}: two rounds in one reply"
            );
        }
    });
    assert!(writes > 2 && checks > 2, "{writes} writes {checks} checks");
}
