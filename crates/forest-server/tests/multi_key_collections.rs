//! Collection commands over several keys (issue 19): LMOVE, RPOPLPUSH, LMPOP, SMOVE and
//! SINTERSTORE / SUNIONSTORE / SDIFFSTORE, over raw RESP. The expected replies are what
//! redis-server 7.0.15 answered to the same commands (run by hand, `redis-cli`, session 9),
//! errors included; then atomicity under concurrent clients.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, Running, R};
use forest_server::IoModel;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn b(s: &str) -> R {
    R::bulk(s)
}

fn bulks(items: &[&str]) -> R {
    R::Arr(items.iter().map(|s| b(s)).collect())
}

fn err(text: &str) -> R {
    R::Err(format!("ERR {text}"))
}

fn wrong() -> R {
    R::Err(WRONGTYPE.into())
}

fn ok() -> R {
    R::Simple("OK".into())
}

fn server() -> (tempfile::TempDir, Running) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::Threads);
    (dir, server)
}

/// Runs each `(command, reply)` in order and compares.
fn check(c: &mut Client, script: &[(&[&str], R)]) {
    for (argv, want) in script {
        assert_eq!(&c.cmd(argv), want, "{argv:?}");
    }
}

// Goal: LMOVE and RPOPLPUSH answer as redis-server 7.0.15: the element or null, WRONGTYPE
// only when the source exists, a rotation of one list, the emptied source deleted, the
// destination's deadline kept, syntax and arity errors.
// Method: one sequence against one server, replies compared.
#[test]
fn lmove_and_rpoplpush_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["RPUSH", "l", "a", "b", "c"], R::Int(3)),
            (&["SET", "s", "v"], ok()),
            (&["LMOVE", "l", "s", "LEFT", "RIGHT"], wrong()),
            (&["LRANGE", "l", "0", "-1"], bulks(&["a", "b", "c"])),
            (&["LMOVE", "nol", "s", "LEFT", "RIGHT"], R::Nil),
            (&["LMOVE", "s", "l", "LEFT", "RIGHT"], wrong()),
            (&["LMOVE", "l", "l", "LEFT", "RIGHT"], b("a")),
            (&["LRANGE", "l", "0", "-1"], bulks(&["b", "c", "a"])),
            (&["LMOVE", "l", "l", "up", "down"], err("syntax error")),
            (&["LMOVE", "nol", "s", "up", "right"], err("syntax error")),
            (
                &["LMOVE", "l", "d"],
                err("wrong number of arguments for 'lmove' command"),
            ),
            (&["RPUSH", "d", "x"], R::Int(1)),
            (&["EXPIRE", "d", "100"], R::Int(1)),
            (&["lmove", "l", "d", "right", "left"], b("a")),
            (&["TTL", "d"], R::Int(100)),
            (&["LRANGE", "d", "0", "-1"], bulks(&["a", "x"])),
            (&["RPOPLPUSH", "l", "d"], b("c")),
            (&["LRANGE", "d", "0", "-1"], bulks(&["c", "a", "x"])),
            (&["RPOPLPUSH", "l", "l"], b("b")),
            (&["LRANGE", "l", "0", "-1"], bulks(&["b"])),
            (&["LMOVE", "l", "new", "LEFT", "RIGHT"], b("b")),
            (&["EXISTS", "l"], R::Int(0)),
            (&["TYPE", "new"], R::Simple("list".into())),
            (&["RPOPLPUSH", "l", "d"], R::Nil),
            (&["RPOPLPUSH", "d", "s"], wrong()),
            (&["LLEN", "d"], R::Int(3)),
            (&["DBSIZE"], R::Int(3)),
        ],
    );
}

// Goal: LMPOP answers as redis-server 7.0.15: `[key, elements]` from the first non-empty
// key, a null array (RESP2 `*-1`, RESP3 `_`), the argument errors in Redis's order,
// WRONGTYPE only for a key met before the first non-empty one.
// Method: replies compared, the null arrays as raw bytes.
#[test]
fn lmpop_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["RPUSH", "l", "b", "c", "a"], R::Int(3)),
            (&["SET", "s", "v"], ok()),
            (
                &["LMPOP", "0", "l", "LEFT"],
                err("numkeys should be greater than 0"),
            ),
            (
                &["LMPOP", "x", "l", "LEFT"],
                err("numkeys should be greater than 0"),
            ),
            (&["LMPOP", "3", "l", "LEFT"], err("syntax error")),
            (&["LMPOP", "1", "l", "up"], err("syntax error")),
            (
                &["LMPOP", "1", "l", "LEFT", "COUNT", "0"],
                err("count should be greater than 0"),
            ),
            (
                &["LMPOP", "1", "l", "LEFT", "COUNT", "x"],
                err("count should be greater than 0"),
            ),
            (
                &["LMPOP", "1", "l", "LEFT", "COUNT", "1", "COUNT", "1"],
                err("syntax error"),
            ),
            (&["LMPOP", "1", "l", "LEFT", "extra"], err("syntax error")),
            (
                &["LMPOP", "1", "l"],
                err("wrong number of arguments for 'lmpop' command"),
            ),
            (&["LMPOP", "2", "nol", "s", "LEFT"], wrong()),
            (&["LMPOP", "2", "s", "l", "LEFT"], wrong()),
            (
                &["LMPOP", "2", "l", "s", "LEFT"],
                R::Arr(vec![b("l"), bulks(&["b"])]),
            ),
            (
                &["lmpop", "2", "nol", "l", "right", "count", "5"],
                R::Arr(vec![b("l"), bulks(&["a", "c"])]),
            ),
            (&["EXISTS", "l"], R::Int(0)),
            (&["LMPOP", "1", "l", "LEFT"], R::Nil),
        ],
    );
    c.send_raw(b"LMPOP 1 nokey LEFT\r\n");
    assert_eq!(c.read_bytes(5), b"*-1\r\n");
    assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
    c.send_raw(b"LMPOP 1 nokey LEFT\r\nLMOVE nokey x LEFT LEFT\r\n");
    assert_eq!(c.read_bytes(6), b"_\r\n_\r\n");
}

// Goal: SMOVE, SINTERSTORE, SUNIONSTORE and SDIFFSTORE as redis-server 7.0.15: SMOVE's 0
// for a missing source whatever the destination, WRONGTYPE otherwise, the same set as both,
// the destination's deadline kept; the STORE forms replacing their destination (deadline
// dropped), deleting it for an empty result, every key type-checked, the source as
// destination.
// Method: one sequence, replies compared.
#[test]
fn smove_and_set_stores_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["SADD", "a", "1", "2", "3"], R::Int(3)),
            (&["SADD", "b", "3", "4"], R::Int(2)),
            (&["SET", "s", "v"], ok()),
            (&["EXPIRE", "b", "100"], R::Int(1)),
            (&["SMOVE", "a", "b", "1"], R::Int(1)),
            (&["TTL", "b"], R::Int(100)),
            (&["SMOVE", "a", "b", "9"], R::Int(0)),
            (&["SMOVE", "a", "b", "3"], R::Int(1)),
            (&["SMEMBERS", "b"], bulks(&["1", "3", "4"])),
            (&["SMOVE", "nokey", "s", "1"], R::Int(0)),
            (&["SMOVE", "a", "s", "2"], wrong()),
            (&["SMOVE", "s", "a", "2"], wrong()),
            (&["SMOVE", "a", "a", "2"], R::Int(1)),
            (&["SMOVE", "a", "a", "9"], R::Int(0)),
            (&["SMOVE", "a", "fresh", "2"], R::Int(1)),
            (&["EXISTS", "a"], R::Int(0)),
            (&["SMEMBERS", "fresh"], bulks(&["2"])),
            (
                &["SMOVE", "a", "b"],
                err("wrong number of arguments for 'smove' command"),
            ),
            (&["SADD", "a", "1", "2", "3"], R::Int(3)),
            (&["SINTERSTORE", "d", "a", "b"], R::Int(2)),
            (&["SMEMBERS", "d"], bulks(&["1", "3"])),
            (&["EXPIRE", "d", "100"], R::Int(1)),
            (&["SUNIONSTORE", "d", "a", "b"], R::Int(4)),
            (&["TTL", "d"], R::Int(-1)),
            (&["SDIFFSTORE", "d", "a", "b"], R::Int(1)),
            (&["SMEMBERS", "d"], bulks(&["2"])),
            (&["SINTERSTORE", "d", "a", "nokey"], R::Int(0)),
            (&["EXISTS", "d"], R::Int(0)),
            (&["SINTERSTORE", "d", "a", "s"], wrong()),
            (&["SINTERSTORE", "d", "nokey", "s"], wrong()),
            (&["SUNIONSTORE", "d", "nokey", "s"], wrong()),
            (&["SDIFFSTORE", "d", "nokey", "s"], wrong()),
            (&["SUNIONSTORE", "s", "a"], R::Int(3)),
            (&["TYPE", "s"], R::Simple("set".into())),
            (&["RPUSH", "l", "x"], R::Int(1)),
            (&["SDIFFSTORE", "l", "a", "b"], R::Int(1)),
            (&["TYPE", "l"], R::Simple("set".into())),
            (&["SDIFFSTORE", "a", "a", "a"], R::Int(0)),
            (&["EXISTS", "a"], R::Int(0)),
            (&["SUNIONSTORE", "b", "b", "fresh"], R::Int(4)),
            (&["SMEMBERS", "b"], bulks(&["1", "2", "3", "4"])),
            (
                &["SINTERSTORE", "x"],
                err("wrong number of arguments for 'sinterstore' command"),
            ),
            (&["DBSIZE"], R::Int(4)),
        ],
    );
}

/// Reads `keys`' sizes at one moment (MULTI/EXEC holds all their locks).
fn sizes(c: &mut Client, command: &str, keys: &[&str]) -> Vec<i64> {
    c.cmd(&["MULTI"]);
    for key in keys {
        c.cmd(&[command, key]);
    }
    c.cmd(&["EXEC"])
        .items()
        .into_iter()
        .map(|r| match r {
            R::Int(n) => n,
            other => panic!("integer expected: {other:?}"),
        })
        .collect()
}

// Goal: no reader sees an element of LMOVE / a member of SMOVE in both places or neither,
// and counts agree with members, while two clients move them back and forth.
// Method: 2 movers x 1 s per I/O model; a reader sums LLEN / SCARD of both keys in one
// EXEC and checks LRANGE's length against LLEN.
#[test]
fn moves_are_atomic_under_concurrency() {
    for io in [IoModel::Threads, IoModel::Tokio] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let elements: Vec<String> = (0..50).map(|i| format!("e{i:02}")).collect();
        let mut argv = vec!["RPUSH", "la"];
        argv.extend(elements.iter().map(String::as_str));
        c.cmd(&argv);
        argv[0] = "SADD";
        argv[1] = "sa";
        c.cmd(&argv);
        let stop = Arc::new(AtomicBool::new(false));
        let movers: Vec<_> = (0..2)
            .map(|m| {
                let stop = Arc::clone(&stop);
                let mut c = server.client();
                let elements = elements.clone();
                std::thread::spawn(move || {
                    let mut i = m;
                    while !stop.load(Ordering::Relaxed) {
                        let (from, to) = if i % 2 == 0 {
                            ("la", "lb")
                        } else {
                            ("lb", "la")
                        };
                        c.cmd(&["LMOVE", from, to, "LEFT", "RIGHT"]);
                        let (from, to) = if i % 3 == 0 {
                            ("sa", "sb")
                        } else {
                            ("sb", "sa")
                        };
                        c.cmd(&["SMOVE", from, to, elements[i % elements.len()].as_str()]);
                        i += 1;
                    }
                })
            })
            .collect();
        let start = Instant::now();
        let mut reads = 0;
        while start.elapsed() < Duration::from_secs(1) {
            let lists = sizes(&mut c, "LLEN", &["la", "lb"]);
            assert_eq!(lists.iter().sum::<i64>(), 50, "{io}: {lists:?}");
            let sets = sizes(&mut c, "SCARD", &["sa", "sb"]);
            assert_eq!(sets.iter().sum::<i64>(), 50, "{io}: {sets:?}");
            c.cmd(&["MULTI"]);
            c.cmd(&["LLEN", "la"]);
            c.cmd(&["LRANGE", "la", "0", "-1"]);
            let reply = c.cmd(&["EXEC"]).items();
            let R::Int(len) = reply[0] else {
                panic!("{reply:?}");
            };
            assert_eq!(reply[1].clone().items().len() as i64, len, "{io}");
            reads += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for mover in movers {
            mover.join().expect("mover");
        }
        assert!(reads > 0);
        let mut all: Vec<R> = c.cmd(&["LRANGE", "la", "0", "-1"]).items();
        all.extend(c.cmd(&["LRANGE", "lb", "0", "-1"]).items());
        all.sort_by_key(|r| r.text());
        assert_eq!(
            R::Arr(all),
            bulks(&elements.iter().map(String::as_str).collect::<Vec<_>>())
        );
    }
}
