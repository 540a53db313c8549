//! Collection commands over several keys (issue 19): LMOVE, RPOPLPUSH, LMPOP, ZMPOP, the lex
//! ranges (ZRANGE BYLEX, ZRANGEBYLEX, ZREVRANGEBYLEX, ZLEXCOUNT, ZREMRANGEBYLEX), ZRANGESTORE,
//! ZUNION/ZINTER/ZDIFF and their STORE forms, ZINTERCARD, SMOVE and SINTERSTORE /
//! SUNIONSTORE / SDIFFSTORE, over raw RESP. The expected replies are what redis-server
//! 7.0.15 answered to the same commands (run by hand, `redis-cli`, session 9), errors
//! included; then the same inside MULTI/EXEC and a script, WRONGTYPE in each key position,
//! expired sources and destinations, and atomicity under concurrent clients.

use crate::common;

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
    // Keys after numkeys are checked against forest's reserved byte too.
    let reserved = err("keys beginning with byte 0xff are reserved by forest");
    for argv in [
        &[&b"LMPOP"[..], b"2", b"l", b"\xffl", b"LEFT"][..],
        &[b"ZMPOP", b"1", b"\xffz", b"MIN"],
        &[b"ZUNION", b"1", b"\xffz"],
        &[b"ZUNIONSTORE", b"\xffd", b"1", b"z"],
        &[b"ZINTERCARD", b"1", b"\xffz"],
    ] {
        c.send(argv);
        assert_eq!(c.read(), reserved, "{argv:?}");
    }
    c.send_raw(b"LMPOP 1 nokey LEFT\r\n");
    assert_eq!(c.read_bytes(5), b"*-1\r\n");
    assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
    c.send_raw(b"LMPOP 1 nokey LEFT\r\nLMOVE nokey x LEFT LEFT\r\n");
    assert_eq!(c.read_bytes(6), b"_\r\n_\r\n");
}

// Goal: ZMPOP answers as redis-server 7.0.15: `[key, [[member, score], ...]]` (pairs in RESP2
// too, RESP2 bulk and RESP3 double scores) from the first non-empty key, a null array, the
// argument errors, WRONGTYPE only for a key met before the first non-empty one.
// Method: replies compared, the null arrays and score types as raw bytes.
#[test]
fn zmpop_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["SET", "s", "v"], ok()),
            (&["RPUSH", "l", "x"], R::Int(1)),
            (&["ZADD", "z", "1", "a", "2", "b", "3", "c"], R::Int(3)),
            (
                &["ZMPOP", "1", "z", "MIN"],
                R::Arr(vec![b("z"), R::Arr(vec![bulks(&["a", "1"])])]),
            ),
            (
                &["ZMPOP", "2", "nokey", "z", "max", "count", "5"],
                R::Arr(vec![
                    b("z"),
                    R::Arr(vec![bulks(&["c", "3"]), bulks(&["b", "2"])]),
                ]),
            ),
            (&["EXISTS", "z"], R::Int(0)),
            (&["ZMPOP", "1", "z", "MIN"], R::Nil),
            (
                &["ZMPOP", "0", "z", "MIN"],
                err("numkeys should be greater than 0"),
            ),
            (&["ZMPOP", "2", "z", "MIN"], err("syntax error")),
            (&["ZMPOP", "1", "z", "foo"], err("syntax error")),
            (
                &["ZMPOP", "1", "z", "MIN", "COUNT", "0"],
                err("count should be greater than 0"),
            ),
            (&["ZMPOP", "2", "nokey", "s", "MIN"], wrong()),
            (&["ZMPOP", "2", "l", "s", "MIN"], wrong()),
        ],
    );
    c.send_raw(b"ZMPOP 1 nokey MIN\r\n");
    assert_eq!(c.read_bytes(5), b"*-1\r\n");
    c.cmd(&["ZADD", "z", "1.5", "a"]);
    c.send_raw(b"ZMPOP 1 z MIN\r\n");
    let want = b"*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\na\r\n$3\r\n1.5\r\n";
    assert_eq!(c.read_bytes(want.len()), want);
    assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
    c.send_raw(b"ZMPOP 1 nokey MIN\r\n");
    assert_eq!(c.read_bytes(3), b"_\r\n");
    c.cmd(&["ZADD", "z", "2", "b"]);
    c.send_raw(b"ZMPOP 1 z MIN\r\n");
    let want = b"*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\nb\r\n,2\r\n";
    assert_eq!(c.read_bytes(want.len()), want);
}

// Goal: the lex ranges answer as redis-server 7.0.15 over members of equal score: bounds
// `[`, `(`, `-`, `+`, both directions, LIMIT (a negative offset: nothing; a negative count:
// the rest), inverted and empty ranges, the option errors (WITHSCORES with BYLEX, REV or
// BYLEX where the command fixes them, BYLEX with BYSCORE), ZLEXCOUNT and ZREMRANGEBYLEX.
// Method: one sequence, replies compared.
#[test]
fn lex_ranges_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    let bad_item = err("min or max not valid string range item");
    check(
        &mut c,
        &[
            (
                &[
                    "ZADD", "z", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e",
                ],
                R::Int(5),
            ),
            (&["SET", "s", "v"], ok()),
            (
                &["ZRANGEBYLEX", "z", "-", "+"],
                bulks(&["a", "b", "c", "d", "e"]),
            ),
            (&["ZRANGEBYLEX", "z", "[b", "(d"], bulks(&["b", "c"])),
            (&["ZRANGEBYLEX", "z", "(b", "[d"], bulks(&["c", "d"])),
            (&["ZRANGEBYLEX", "z", "[b", "[b"], bulks(&["b"])),
            (&["ZRANGEBYLEX", "z", "[b", "(b"], bulks(&[])),
            (&["ZRANGEBYLEX", "z", "[bb", "+"], bulks(&["c", "d", "e"])),
            (&["ZRANGEBYLEX", "z", "b", "d"], bad_item.clone()),
            (&["ZRANGEBYLEX", "z", "", "+"], bad_item.clone()),
            (&["ZRANGEBYLEX", "z", "+x", "+"], bad_item.clone()),
            (
                &["ZRANGEBYLEX", "z", "-", "+", "WITHSCORES"],
                err("syntax error, WITHSCORES not supported in combination with BYLEX"),
            ),
            (&["ZRANGEBYLEX", "z", "-", "+", "REV"], err("syntax error")),
            (
                &["ZRANGEBYLEX", "z", "-", "+", "BYLEX"],
                err("syntax error"),
            ),
            (
                &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "1", "2"],
                bulks(&["b", "c"]),
            ),
            (
                &["ZRANGEBYLEX", "z", "-", "[c", "LIMIT", "-1", "2"],
                bulks(&[]),
            ),
            (
                &["ZRANGEBYLEX", "z", "-", "[c", "LIMIT", "1", "-1"],
                bulks(&["b", "c"]),
            ),
            (
                &["ZRANGEBYLEX", "z", "-", "[c", "LIMIT", "5", "1"],
                bulks(&[]),
            ),
            (&["ZRANGEBYLEX", "z", "+", "-"], bulks(&[])),
            (&["ZRANGEBYLEX", "z", "[c", "[a"], bulks(&[])),
            (&["ZRANGEBYLEX", "s", "-", "+"], wrong()),
            (&["ZRANGEBYLEX", "nokey", "-", "+"], bulks(&[])),
            (
                &["ZREVRANGEBYLEX", "z", "+", "-", "LIMIT", "1", "2"],
                bulks(&["d", "c"]),
            ),
            (&["ZREVRANGEBYLEX", "z", "(d", "[b"], bulks(&["c", "b"])),
            (&["ZREVRANGEBYLEX", "z", "-", "+"], bulks(&[])),
            (
                &["ZRANGE", "z", "[c", "-", "BYLEX", "REV"],
                bulks(&["c", "b", "a"]),
            ),
            (&["ZRANGE", "z", "(a", "[c", "bylex"], bulks(&["b", "c"])),
            (
                &["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"],
                err("syntax error, WITHSCORES not supported in combination with BYLEX"),
            ),
            (
                &["ZRANGE", "z", "-", "+", "BYLEX", "BYSCORE"],
                err("syntax error"),
            ),
            (
                &["ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX"],
                err("syntax error"),
            ),
            (&["ZRANGE", "z", "0", "1", "BYLEX"], bad_item.clone()),
            (&["ZRANGE", "z", "0", "1", "LIMIT", "5", "-1"], bulks(&["a", "b"])),
            (
                &["ZRANGE", "z", "0", "1", "LIMIT", "5", "-2"],
                err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"),
            ),
            (&["ZLEXCOUNT", "z", "-", "+"], R::Int(5)),
            (&["ZLEXCOUNT", "z", "(a", "[c"], R::Int(2)),
            (&["ZLEXCOUNT", "z", "a", "c"], bad_item.clone()),
            (&["ZLEXCOUNT", "nokey", "-", "+"], R::Int(0)),
            (&["ZLEXCOUNT", "s", "-", "+"], wrong()),
            (&["ZREMRANGEBYLEX", "z", "[d", "+"], R::Int(2)),
            (&["ZREMRANGEBYLEX", "s", "x", "+"], bad_item.clone()),
            (&["ZREMRANGEBYLEX", "s", "[x", "+"], wrong()),
            (&["ZREMRANGEBYLEX", "nokey", "[x", "+"], R::Int(0)),
            (&["ZRANGE", "z", "0", "-1"], bulks(&["a", "b", "c"])),
            (&["ZCARD", "z"], R::Int(3)),
            (&["ZREMRANGEBYLEX", "z", "-", "+"], R::Int(3)),
            (&["EXISTS", "z"], R::Int(0)),
        ],
    );
}

// Goal: ZRANGESTORE as redis-server 7.0.15: by rank, score and lex, LIMIT, WITHSCORES
// refused, the destination replaced whatever it held and its deadline dropped, an empty
// result deleting it, WRONGTYPE for the source only, the source as destination.
// Method: one sequence, replies compared.
#[test]
fn zrangestore_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["ZADD", "z", "1", "a", "2", "b", "3", "c"], R::Int(3)),
            (&["SADD", "st", "x"], R::Int(1)),
            (&["ZRANGESTORE", "dst", "z", "0", "-1"], R::Int(3)),
            (&["EXPIRE", "dst", "100"], R::Int(1)),
            (
                &["ZRANGESTORE", "dst", "z", "0", "1", "WITHSCORES"],
                err("syntax error"),
            ),
            (&["ZRANGESTORE", "dst", "z", "0", "1"], R::Int(2)),
            (&["TTL", "dst"], R::Int(-1)),
            (&["ZRANGESTORE", "dst", "z", "5", "6"], R::Int(0)),
            (&["EXISTS", "dst"], R::Int(0)),
            (&["SET", "s", "v"], ok()),
            (&["ZRANGESTORE", "s", "z", "0", "0"], R::Int(1)),
            (&["TYPE", "s"], R::Simple("zset".into())),
            (&["ZRANGESTORE", "dst", "st", "0", "1"], wrong()),
            (&["SET", "s", "v"], ok()),
            (&["ZRANGESTORE", "dst", "s", "0", "1"], wrong()),
            (&["ZRANGESTORE", "st", "nokey", "0", "1"], R::Int(0)),
            (&["EXISTS", "st"], R::Int(0)),
            (&["ZRANGESTORE", "dst", "z", "[a", "[b", "BYLEX"], R::Int(2)),
            (
                &["ZRANGE", "dst", "0", "-1", "WITHSCORES"],
                bulks(&["a", "1", "b", "2"]),
            ),
            (
                &[
                    "ZRANGESTORE",
                    "dst",
                    "z",
                    "1",
                    "(3",
                    "BYSCORE",
                    "LIMIT",
                    "0",
                    "1",
                ],
                R::Int(1),
            ),
            (
                &["ZRANGE", "dst", "0", "-1", "WITHSCORES"],
                bulks(&["a", "1"]),
            ),
            (
                &["ZRANGESTORE", "dst", "z", "+inf", "2", "BYSCORE", "REV"],
                R::Int(2),
            ),
            (&["ZRANGE", "dst", "0", "-1"], bulks(&["b", "c"])),
            (&["ZRANGESTORE", "z", "z", "1", "-1"], R::Int(2)),
            (&["ZRANGE", "z", "0", "-1"], bulks(&["b", "c"])),
            (
                &["ZRANGESTORE", "a", "b", "0"],
                err("wrong number of arguments for 'zrangestore' command"),
            ),
            (&["DBSIZE"], R::Int(3)),
        ],
    );
}

// Goal: ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD as redis-server 7.0.15:
// scores combined with WEIGHTS and AGGREGATE (sets as sources scoring 1; inf*0 and
// inf + -inf as 0), the argument errors in Redis's order (WRONGTYPE before the options),
// empty results deleting the destination.
// Method: one sequence, replies compared.
#[test]
fn zunion_zinter_zdiff_as_redis() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["ZADD", "z", "1", "a", "2", "b", "3", "c"], R::Int(3)),
            (&["ZADD", "y", "10", "b", "20", "d"], R::Int(2)),
            (&["SADD", "st", "b", "c", "x"], R::Int(3)),
            (&["SET", "s", "v"], ok()),
            (
                &["ZUNION", "2", "z", "y", "WITHSCORES"],
                bulks(&["a", "1", "c", "3", "b", "12", "d", "20"]),
            ),
            (&["ZUNION", "2", "z", "y"], bulks(&["a", "c", "b", "d"])),
            (
                &[
                    "ZUNION",
                    "2",
                    "z",
                    "y",
                    "WEIGHTS",
                    "2",
                    "3",
                    "AGGREGATE",
                    "MAX",
                    "WITHSCORES",
                ],
                bulks(&["a", "2", "c", "6", "b", "30", "d", "60"]),
            ),
            (
                &["ZINTER", "2", "z", "y", "WITHSCORES"],
                bulks(&["b", "12"]),
            ),
            (
                &["ZDIFF", "2", "z", "y", "WITHSCORES"],
                bulks(&["a", "1", "c", "3"]),
            ),
            (
                &["ZUNION", "3", "z", "y", "st", "WITHSCORES"],
                bulks(&["a", "1", "x", "1", "c", "4", "b", "13", "d", "20"]),
            ),
            (&["ZINTER", "2", "z", "st"], bulks(&["b", "c"])),
            (
                &["ZUNION", "0", "z"],
                err("at least 1 input key is needed for 'zunion' command"),
            ),
            (
                &["ZUNION", "x", "z"],
                err("value is not an integer or out of range"),
            ),
            (&["ZUNION", "3", "z", "y"], err("syntax error")),
            (&["ZUNION", "2", "z", "s"], wrong()),
            (&["ZUNION", "2", "z", "s", "WEIGHTS", "x"], wrong()),
            (&["ZUNION", "2", "s", "nokey", "WEIGHTS", "x"], wrong()),
            (
                &["ZUNION", "2", "z", "y", "WEIGHTS", "1"],
                err("syntax error"),
            ),
            (
                &["ZUNION", "2", "z", "y", "WEIGHTS", "1", "x"],
                err("weight value is not a float"),
            ),
            (
                &["ZUNION", "2", "z", "y", "AGGREGATE", "foo"],
                err("syntax error"),
            ),
            (&["ZUNION", "1", "z", "AGGREGATE"], err("syntax error")),
            (
                &["ZDIFF", "2", "z", "y", "WEIGHTS", "1", "1"],
                err("syntax error"),
            ),
            (
                &["ZUNIONSTORE", "d", "2", "z", "y", "WITHSCORES"],
                err("syntax error"),
            ),
            (
                &["ZINTERSTORE", "d", "2", "z", "y", "AGGREGATE", "MIN"],
                R::Int(1),
            ),
            (
                &["ZRANGE", "d", "0", "-1", "WITHSCORES"],
                bulks(&["b", "2"]),
            ),
            (&["ZUNIONSTORE", "0", "2", "z", "y"], R::Int(4)),
            (
                &["ZINTERSTORE", "d", "0", "z"],
                err("at least 1 input key is needed for 'zinterstore' command"),
            ),
            (
                &["ZDIFFSTORE", "d", "-1", "z"],
                err("at least 1 input key is needed for 'zdiffstore' command"),
            ),
            (&["ZINTERSTORE", "d", "2", "z", "nokey"], R::Int(0)),
            (&["EXISTS", "d"], R::Int(0)),
            (&["ZDIFFSTORE", "s", "2", "z", "y"], R::Int(2)),
            (
                &["ZRANGE", "s", "0", "-1", "WITHSCORES"],
                bulks(&["a", "1", "c", "3"]),
            ),
            (&["ZUNIONSTORE", "z", "1", "z", "WEIGHTS", "2"], R::Int(3)),
            (
                &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
                bulks(&["a", "2", "b", "4", "c", "6"]),
            ),
            (&["ZINTERCARD", "2", "z", "y"], R::Int(1)),
            (&["ZINTERCARD", "2", "z", "st", "LIMIT", "1"], R::Int(1)),
            (&["ZINTERCARD", "2", "z", "st", "LIMIT", "0"], R::Int(2)),
            (
                &["ZINTERCARD", "0", "z"],
                err("at least 1 input key is needed for 'zintercard' command"),
            ),
            (
                &["ZINTERCARD", "2", "z", "y", "LIMIT", "-1"],
                err("LIMIT can't be negative"),
            ),
            (
                &["ZINTERCARD", "2", "z", "y", "LIMIT", "x"],
                err("LIMIT can't be negative"),
            ),
            (&["ZINTERCARD", "3", "z", "y"], err("syntax error")),
            (
                &["ZINTERCARD", "2", "z", "y", "WITHSCORES"],
                err("syntax error"),
            ),
            (&["SET", "str", "v"], ok()),
            (&["ZINTERCARD", "2", "z", "str"], wrong()),
        ],
    );
    // Infinities: a weighted score that is not a number and inf + -inf count as 0.
    check(
        &mut c,
        &[
            (&["ZADD", "p", "inf", "a", "1", "b"], R::Int(2)),
            (&["ZADD", "q", "-inf", "a", "2", "b"], R::Int(2)),
            (
                &["ZUNION", "2", "p", "q", "WITHSCORES"],
                bulks(&["a", "0", "b", "3"]),
            ),
            (
                &["ZINTER", "2", "p", "q", "WITHSCORES"],
                bulks(&["a", "0", "b", "3"]),
            ),
            (
                &["ZINTER", "2", "p", "q", "WEIGHTS", "0", "1", "WITHSCORES"],
                bulks(&["a", "-inf", "b", "2"]),
            ),
            (
                &[
                    "ZINTER",
                    "2",
                    "p",
                    "q",
                    "WEIGHTS",
                    "0",
                    "1",
                    "AGGREGATE",
                    "MAX",
                    "WITHSCORES",
                ],
                bulks(&["a", "0", "b", "2"]),
            ),
            (
                &[
                    "ZINTER",
                    "2",
                    "p",
                    "q",
                    "WEIGHTS",
                    "1",
                    "0",
                    "AGGREGATE",
                    "MIN",
                    "WITHSCORES",
                ],
                bulks(&["b", "0", "a", "inf"]),
            ),
            (
                &[
                    "ZUNION",
                    "2",
                    "p",
                    "q",
                    "WEIGHTS",
                    "0",
                    "0",
                    "AGGREGATE",
                    "MIN",
                    "WITHSCORES",
                ],
                bulks(&["a", "0", "b", "0"]),
            ),
            (
                &["ZUNION", "1", "p", "WEIGHTS", "inf", "WITHSCORES"],
                bulks(&["a", "inf", "b", "inf"]),
            ),
            (
                &["ZUNION", "1", "p", "WEIGHTS", "nan"],
                err("weight value is not a float"),
            ),
            (
                &[
                    "ZUNION",
                    "2",
                    "p",
                    "q",
                    "AGGREGATE",
                    "MIN",
                    "AGGREGATE",
                    "MAX",
                    "WITHSCORES",
                ],
                bulks(&["b", "2", "a", "inf"]),
            ),
        ],
    );
    // RESP3: `[member, score]` pairs with double scores, as redis-server 7.0.15.
    assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
    c.send_raw(b"ZINTER 2 p q WEIGHTS 1 0 AGGREGATE MIN WITHSCORES\r\n");
    let want = b"*2\r\n*2\r\n$1\r\nb\r\n,0\r\n*2\r\n$1\r\na\r\n,inf\r\n";
    assert_eq!(c.read_bytes(want.len()), want);
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

// Goal: inside MULTI/EXEC the commands see the earlier writes of their transaction and
// later ones see theirs; in a script likewise; WATCH of a key they write aborts another
// client's EXEC. Method: queued commands and one EVAL, replies compared.
#[test]
fn multi_key_commands_in_transactions_and_scripts() {
    let (_dir, server) = server();
    let mut c = server.client();
    let queued = || R::Simple("QUEUED".into());
    check(
        &mut c,
        &[
            (&["MULTI"], ok()),
            (&["RPUSH", "src", "a", "b"], queued()),
            (&["LMOVE", "src", "dst", "LEFT", "RIGHT"], queued()),
            (&["LMPOP", "2", "nokey", "src", "LEFT"], queued()),
            (&["LRANGE", "dst", "0", "-1"], queued()),
            (&["SADD", "s1", "x", "y"], queued()),
            (&["SMOVE", "s1", "s2", "x"], queued()),
            (&["SUNIONSTORE", "s3", "s1", "s2"], queued()),
            (&["ZADD", "z1", "0", "p", "0", "q"], queued()),
            (&["ZUNIONSTORE", "z2", "2", "z1", "s3"], queued()),
            (&["ZRANGEBYLEX", "z2", "-", "+"], queued()),
            (&["ZMPOP", "1", "z2", "MAX", "COUNT", "2"], queued()),
            (&["EXISTS", "src", "s1", "s3", "z2"], queued()),
            (
                &["EXEC"],
                R::Arr(vec![
                    R::Int(2),
                    b("a"),
                    R::Arr(vec![b("src"), bulks(&["b"])]),
                    bulks(&["a"]),
                    R::Int(2),
                    R::Int(1),
                    R::Int(2),
                    R::Int(2),
                    R::Int(4),
                    bulks(&["p", "q", "x", "y"]),
                    R::Arr(vec![
                        b("z2"),
                        R::Arr(vec![bulks(&["y", "1"]), bulks(&["x", "1"])]),
                    ]),
                    R::Int(3),
                ]),
            ),
            (&["ZRANGE", "z2", "0", "-1"], bulks(&["p", "q"])),
            (&["DBSIZE"], R::Int(6)),
            (
                &[
                    "EVAL",
                    "redis.call('RPUSH', KEYS[1], 'e'); \
                     local m = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'LEFT'); \
                     redis.call('SADD', KEYS[3], m); \
                     return {m, redis.call('SINTERSTORE', KEYS[4], KEYS[3], KEYS[3]), \
                             redis.call('ZINTERCARD', 1, KEYS[4])}",
                    "4",
                    "ls",
                    "dst",
                    "st",
                    "st2",
                ],
                R::Arr(vec![b("e"), R::Int(1), R::Int(1)]),
            ),
            (&["LRANGE", "dst", "0", "-1"], bulks(&["e", "a"])),
            (&["EXISTS", "ls"], R::Int(0)),
        ],
    );
    let mut other = server.client();
    assert_eq!(c.cmd(&["WATCH", "dst"]), ok());
    assert_eq!(other.cmd(&["RPUSH", "w", "1"]), R::Int(1));
    assert_eq!(other.cmd(&["RPOPLPUSH", "w", "dst"]), b("1"));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["LLEN", "dst"]), queued());
    assert_eq!(c.cmd(&["EXEC"]), R::Nil);
}

// Goal: WRONGTYPE from each key position of every command (a string there; a list where a
// set or sorted set is read), nothing changed by a refused command.
// Method: each command with the wrong key in one position, then the keys read back.
#[test]
fn wrongtype_in_every_key_position() {
    let (_dir, server) = server();
    let mut c = server.client();
    check(
        &mut c,
        &[
            (&["SET", "str", "v"], ok()),
            (&["RPUSH", "l", "a"], R::Int(1)),
            (&["SADD", "s", "a"], R::Int(1)),
            (&["ZADD", "z", "1", "a"], R::Int(1)),
        ],
    );
    let cases: &[&[&str]] = &[
        &["LMOVE", "str", "l", "LEFT", "LEFT"],
        &["LMOVE", "l", "str", "LEFT", "LEFT"],
        &["LMOVE", "l", "s", "LEFT", "LEFT"],
        &["RPOPLPUSH", "s", "l"],
        &["RPOPLPUSH", "l", "z"],
        &["LMPOP", "1", "str", "LEFT"],
        &["LMPOP", "2", "nokey", "z", "LEFT"],
        &["ZMPOP", "1", "str", "MIN"],
        &["ZMPOP", "2", "nokey", "l", "MIN"],
        &["ZRANGE", "l", "-", "+", "BYLEX"],
        &["ZRANGEBYLEX", "str", "-", "+"],
        &["ZREVRANGEBYLEX", "s", "+", "-"],
        &["ZLEXCOUNT", "l", "-", "+"],
        &["ZREMRANGEBYLEX", "str", "-", "+"],
        &["ZRANGESTORE", "d", "s", "0", "-1"],
        &["ZUNION", "2", "z", "l"],
        &["ZINTER", "2", "str", "z"],
        &["ZDIFF", "2", "z", "str"],
        &["ZUNIONSTORE", "d", "2", "l", "z"],
        &["ZINTERSTORE", "d", "2", "z", "str"],
        &["ZDIFFSTORE", "d", "2", "z", "l"],
        &["ZINTERCARD", "2", "z", "l"],
        &["SMOVE", "str", "s", "a"],
        &["SMOVE", "s", "str", "a"],
        &["SMOVE", "s", "z", "a"],
        &["SINTERSTORE", "d", "s", "l"],
        &["SUNIONSTORE", "d", "str", "s"],
        &["SDIFFSTORE", "d", "s", "z"],
    ];
    for argv in cases {
        assert_eq!(c.cmd(argv), wrong(), "{argv:?}");
    }
    check(
        &mut c,
        &[
            (&["GET", "str"], b("v")),
            (&["LRANGE", "l", "0", "-1"], bulks(&["a"])),
            (&["SMEMBERS", "s"], bulks(&["a"])),
            (&["ZRANGE", "z", "0", "-1"], bulks(&["a"])),
            (&["EXISTS", "d"], R::Int(0)),
            (&["DBSIZE"], R::Int(4)),
        ],
    );
}

// Goal: an expired source is missing and an expired destination is replaced, for every
// writing command, with no deadline left behind. Method: PEXPIRE 1 ms, a short sleep,
// then each command and TTL / contents read back.
#[test]
fn expired_sources_and_destinations() {
    let (_dir, server) = server();
    let mut c = server.client();
    let expire_all = |c: &mut Client, keys: &[&str]| {
        for key in keys {
            assert_eq!(c.cmd(&["PEXPIRE", key, "1"]), R::Int(1), "{key}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    c.cmd(&["RPUSH", "l", "a", "b"]);
    c.cmd(&["RPUSH", "d", "old"]);
    expire_all(&mut c, &["l"]);
    assert_eq!(c.cmd(&["LMOVE", "l", "d", "LEFT", "LEFT"]), R::Nil);
    assert_eq!(
        c.cmd(&["LMPOP", "2", "l", "d", "LEFT"]),
        R::Arr(vec![b("d"), bulks(&["old"])])
    );
    c.cmd(&["RPUSH", "l", "a"]);
    c.cmd(&["RPUSH", "d", "old"]);
    expire_all(&mut c, &["d"]);
    assert_eq!(c.cmd(&["LMOVE", "l", "d", "LEFT", "LEFT"]), b("a"));
    assert_eq!(c.cmd(&["LRANGE", "d", "0", "-1"]), bulks(&["a"]));
    assert_eq!(c.cmd(&["TTL", "d"]), R::Int(-1));
    c.cmd(&["SADD", "s", "m"]);
    c.cmd(&["SADD", "t", "old"]);
    expire_all(&mut c, &["t"]);
    assert_eq!(c.cmd(&["SMOVE", "s", "t", "m"]), R::Int(1));
    assert_eq!(c.cmd(&["SMEMBERS", "t"]), bulks(&["m"]));
    assert_eq!(c.cmd(&["TTL", "t"]), R::Int(-1));
    expire_all(&mut c, &["t"]);
    assert_eq!(c.cmd(&["SMOVE", "t", "s", "m"]), R::Int(0));
    c.cmd(&["ZADD", "z", "1", "a"]);
    c.cmd(&["ZADD", "dz", "5", "old"]);
    expire_all(&mut c, &["dz"]);
    assert_eq!(c.cmd(&["ZUNIONSTORE", "dz", "2", "z", "dz"]), R::Int(1));
    assert_eq!(c.cmd(&["ZRANGE", "dz", "0", "-1"]), bulks(&["a"]));
    assert_eq!(c.cmd(&["TTL", "dz"]), R::Int(-1));
    expire_all(&mut c, &["z"]);
    assert_eq!(c.cmd(&["ZMPOP", "1", "z", "MIN"]), R::Nil);
    assert_eq!(c.cmd(&["ZRANGESTORE", "dz", "z", "0", "-1"]), R::Int(0));
    assert_eq!(c.cmd(&["EXISTS", "dz"]), R::Int(0));
    c.cmd(&["SET", "str", "v"]);
    expire_all(&mut c, &["str"]);
    assert_eq!(c.cmd(&["SUNIONSTORE", "u", "str"]), R::Int(0));
    assert_eq!(c.cmd(&["DBSIZE"]), R::Int(1));
    // A live string with a deadline as a STORE destination: replaced, its deadline dropped.
    assert_eq!(c.cmd(&["SET", "ts", "v", "EX", "100"]), ok());
    assert_eq!(c.cmd(&["LMOVE", "d", "ts", "LEFT", "LEFT"]), wrong());
    assert_eq!(c.cmd(&["SADD", "m1", "x"]), R::Int(1));
    assert_eq!(c.cmd(&["SUNIONSTORE", "ts", "m1"]), R::Int(1));
    assert_eq!(c.cmd(&["TTL", "ts"]), R::Int(-1));
    assert_eq!(c.cmd(&["SMEMBERS", "ts"]), bulks(&["x"]));
    assert_eq!(c.cmd(&["SET", "tz", "v", "PX", "100000"]), ok());
    assert_eq!(c.cmd(&["ZUNIONSTORE", "tz", "1", "m1"]), R::Int(1));
    assert_eq!(c.cmd(&["TTL", "tz"]), R::Int(-1));
    assert_eq!(c.cmd(&["GET", "tz"]), wrong());
    assert_eq!(c.cmd(&["SET", "te", "v", "PX", "100000"]), ok());
    assert_eq!(c.cmd(&["SDIFFSTORE", "te", "nokey"]), R::Int(0));
    assert_eq!(c.cmd(&["EXISTS", "te"]), R::Int(0));
    assert_eq!(c.cmd(&["TTL", "te"]), R::Int(-2));
    assert_eq!(c.cmd(&["DBSIZE"]), R::Int(4));
    assert_eq!(c.cmd(&["KEYS", "*"]), bulks(&["d", "m1", "ts", "tz"]));
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
    for io in [IoModel::Threads, IoModel::PerCore] {
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
