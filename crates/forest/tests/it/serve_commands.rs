//! Every command of `forest serve` through a real client library, the `redis` crate
//! (issue 6 "Tests"; the contract is docs/PROTOCOL.md and the session's protocol brief):
//! values, errors with Redis's own texts, arity, RESP3 after HELLO 3, AUTH, SCAN, INFO,
//! CONFIG, COMMAND, CLIENT, and SAVE/BGSAVE surviving a restart.

use crate::common;

use common::{data_dir, err_text, expect_err, query, Server};
use redis::Value;

fn bulk(v: &[u8]) -> Value {
    Value::BulkString(v.to_vec())
}

fn ok() -> Value {
    Value::Okay
}

/// The bytes of a bulk or simple string reply; panics on anything else.
fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::VerbatimString { text, .. } => text.clone().into_bytes(),
        Value::Okay => b"OK".to_vec(),
        other => panic!("not a string reply: {other:?}"),
    }
}

fn text(v: &Value) -> String {
    String::from_utf8(bytes(v)).expect("utf-8 reply")
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an integer reply: {other:?}"),
    }
}

fn array(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) | Value::Set(a) => a.clone(),
        other => panic!("not an array reply: {other:?}"),
    }
}

// Goal: the connection commands answer as Redis does. Method: PING, PING msg, ECHO, SELECT 0 and
// an out-of-range SELECT, QUIT on its own connection.
#[test]
fn connection_commands() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut con = server.client();
    assert_eq!(
        query(&mut con, &[b"PING"]),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(query(&mut con, &[b"PING", b"hi there"]), bulk(b"hi there"));
    assert_eq!(query(&mut con, &[b"ECHO", b"a\r\nb\0"]), bulk(b"a\r\nb\0"));
    assert_eq!(query(&mut con, &[b"SELECT", b"0"]), ok());
    assert_eq!(
        expect_err(&mut con, &[b"SELECT", b"1"]),
        "ERR DB index is out of range"
    );
    check_time(&query(&mut con, &[b"TIME"]));
    let mut quitter = server.client();
    assert_eq!(query(&mut quitter, &[b"QUIT"]), ok());
    assert_eq!(
        query(&mut con, &[b"PING"]),
        Value::SimpleString("PONG".into())
    );
}

/// TIME's reply: seconds and microseconds as bulk strings, near the test's clock.
fn check_time(reply: &Value) {
    let parts = array(reply);
    assert_eq!(parts.len(), 2, "TIME: {reply:?}");
    let secs: u64 = text(&parts[0]).parse().expect("TIME seconds");
    let micros: u64 = text(&parts[1]).parse().expect("TIME microseconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(secs.abs_diff(now) < 60, "TIME {secs} vs now {now}");
    assert!(micros < 1_000_000, "TIME microseconds {micros}");
}

// Goal: the string commands keep Redis's semantics, binary-safe. Method: each command and each
// option against known state, compared with the replies Redis gives.
#[test]
fn string_commands() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    assert_eq!(query(c, &[b"GET", b"k"]), Value::Nil);
    assert_eq!(query(c, &[b"SET", b"k", b"v1"]), ok());
    assert_eq!(query(c, &[b"GET", b"k"]), bulk(b"v1"));
    // Binary keys and values, CR LF and NUL inside, and the empty value.
    assert_eq!(query(c, &[b"SET", b"\0\r\n\xff", b"\r\n\0"]), ok());
    assert_eq!(query(c, &[b"GET", b"\0\r\n\xff"]), bulk(b"\r\n\0"));
    assert_eq!(query(c, &[b"SET", b"empty", b""]), ok());
    assert_eq!(query(c, &[b"GET", b"empty"]), bulk(b""));

    // NX / XX / GET.
    assert_eq!(query(c, &[b"SET", b"k", b"v2", b"NX"]), Value::Nil);
    assert_eq!(query(c, &[b"GET", b"k"]), bulk(b"v1"));
    assert_eq!(query(c, &[b"SET", b"new", b"n1", b"XX"]), Value::Nil);
    assert_eq!(query(c, &[b"EXISTS", b"new"]), Value::Int(0));
    assert_eq!(query(c, &[b"SET", b"new", b"n1", b"nx"]), ok());
    assert_eq!(query(c, &[b"SET", b"new", b"n2", b"XX"]), ok());
    assert_eq!(query(c, &[b"GET", b"new"]), bulk(b"n2"));
    assert_eq!(query(c, &[b"SET", b"k", b"v3", b"GET"]), bulk(b"v1"));
    assert_eq!(query(c, &[b"SET", b"fresh", b"f", b"GET"]), Value::Nil);
    assert_eq!(query(c, &[b"SET", b"k", b"v4", b"XX", b"GET"]), bulk(b"v3"));
    assert_eq!(
        query(c, &[b"SET", b"nope", b"x", b"XX", b"GET"]),
        Value::Nil
    );
    assert_eq!(query(c, &[b"EXISTS", b"nope"]), Value::Int(0));
    assert_eq!(query(c, &[b"GET", b"k"]), bulk(b"v4"));
    assert_eq!(
        expect_err(c, &[b"SET", b"k", b"v", b"NX", b"XX"]),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(c, &[b"SET", b"k", b"v", b"BOGUS"]),
        "ERR syntax error"
    );
    // Expiry options (serve_expiry.rs has the rest): conflicting ones are refused.
    for bad in [
        &[&b"EX"[..], b"1", b"PX", b"1"][..],
        &[b"KEEPTTL", b"EX", b"1"],
        &[b"EX"],
    ] {
        let mut argv: Vec<&[u8]> = vec![b"SET", b"k", b"v"];
        argv.extend_from_slice(bad);
        assert_eq!(expect_err(c, &argv), "ERR syntax error");
    }
    assert_eq!(
        expect_err(c, &[b"SET", b"k", b"v", b"EX", b"0"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        query(c, &[b"GET", b"k"]),
        bulk(b"v4"),
        "a refused SET changes nothing"
    );

    // SETNX, GETSET.
    assert_eq!(query(c, &[b"SETNX", b"k", b"x"]), Value::Int(0));
    assert_eq!(query(c, &[b"SETNX", b"sn", b"x"]), Value::Int(1));
    assert_eq!(query(c, &[b"GET", b"sn"]), bulk(b"x"));
    assert_eq!(query(c, &[b"GETSET", b"sn", b"y"]), bulk(b"x"));
    assert_eq!(query(c, &[b"GETSET", b"gs", b"z"]), Value::Nil);
    assert_eq!(query(c, &[b"GET", b"gs"]), bulk(b"z"));

    // DEL, UNLINK, EXISTS (duplicates count, as in Redis).
    assert_eq!(
        query(c, &[b"EXISTS", b"k", b"k", b"missing", b"sn"]),
        Value::Int(3)
    );
    assert_eq!(query(c, &[b"DEL", b"k", b"missing", b"sn"]), Value::Int(2));
    assert_eq!(query(c, &[b"UNLINK", b"gs", b"gs"]), Value::Int(1));
    assert_eq!(query(c, &[b"EXISTS", b"k", b"sn", b"gs"]), Value::Int(0));

    // MGET, MSET, MSETNX (all or nothing).
    assert_eq!(
        query(c, &[b"MSET", b"a", b"1", b"b", b"2", b"c", b"3"]),
        ok()
    );
    assert_eq!(
        query(c, &[b"MGET", b"a", b"nokey", b"c"]),
        Value::Array(vec![bulk(b"1"), Value::Nil, bulk(b"3")])
    );
    assert_eq!(
        query(c, &[b"MSETNX", b"x1", b"1", b"b", b"9"]),
        Value::Int(0)
    );
    assert_eq!(
        query(c, &[b"EXISTS", b"x1"]),
        Value::Int(0),
        "MSETNX is atomic"
    );
    assert_eq!(query(c, &[b"GET", b"b"]), bulk(b"2"));
    assert_eq!(
        query(c, &[b"MSETNX", b"x1", b"1", b"x2", b"2"]),
        Value::Int(1)
    );
    assert_eq!(
        query(c, &[b"MGET", b"x1", b"x2"]),
        Value::Array(vec![bulk(b"1"), bulk(b"2")])
    );
    assert_eq!(
        expect_err(c, &[b"MSET", b"a", b"1", b"b"]),
        "ERR wrong number of arguments for 'mset' command"
    );

    // APPEND, STRLEN.
    assert_eq!(query(c, &[b"APPEND", b"ap", b"hello"]), Value::Int(5));
    assert_eq!(query(c, &[b"APPEND", b"ap", b" world"]), Value::Int(11));
    assert_eq!(query(c, &[b"GET", b"ap"]), bulk(b"hello world"));
    assert_eq!(query(c, &[b"STRLEN", b"ap"]), Value::Int(11));
    assert_eq!(query(c, &[b"STRLEN", b"nokey"]), Value::Int(0));
}

// Goal: the INCR family is Redis's: 64-bit signed, errors for non-integers and overflow with
// Redis's texts, nothing changed by a failed call. Method: each command at the edges.
#[test]
fn incr_family() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    assert_eq!(query(c, &[b"INCR", b"n"]), Value::Int(1));
    assert_eq!(query(c, &[b"INCRBY", b"n", b"10"]), Value::Int(11));
    assert_eq!(query(c, &[b"DECR", b"n"]), Value::Int(10));
    assert_eq!(query(c, &[b"DECRBY", b"n", b"25"]), Value::Int(-15));
    assert_eq!(query(c, &[b"INCRBY", b"n", b"-5"]), Value::Int(-20));
    assert_eq!(query(c, &[b"GET", b"n"]), bulk(b"-20"));
    assert_eq!(query(c, &[b"DECR", b"m"]), Value::Int(-1));

    let not_int = "ERR value is not an integer or out of range";
    for bad in [
        &b"abc"[..],
        b"1.5",
        b"",
        b" 1",
        b"12a",
        b"99999999999999999999",
    ] {
        assert_eq!(query(c, &[b"SET", b"s", bad]), ok());
        assert_eq!(expect_err(c, &[b"INCR", b"s"]), not_int, "INCR of {bad:?}");
        assert_eq!(
            query(c, &[b"GET", b"s"]),
            bulk(bad),
            "a failed INCR changes nothing"
        );
    }
    assert_eq!(expect_err(c, &[b"INCRBY", b"n", b"x"]), not_int);
    assert_eq!(expect_err(c, &[b"DECRBY", b"n", b"1.0"]), not_int);
    assert_eq!(query(c, &[b"GET", b"n"]), bulk(b"-20"));

    let overflow = "ERR increment or decrement would overflow";
    let max = i64::MAX.to_string();
    let min = i64::MIN.to_string();
    assert_eq!(query(c, &[b"SET", b"big", max.as_bytes()]), ok());
    assert_eq!(expect_err(c, &[b"INCR", b"big"]), overflow);
    assert_eq!(query(c, &[b"DECR", b"big"]), Value::Int(i64::MAX - 1));
    assert_eq!(query(c, &[b"SET", b"small", min.as_bytes()]), ok());
    assert_eq!(expect_err(c, &[b"DECR", b"small"]), overflow);
    assert_eq!(expect_err(c, &[b"INCRBY", b"small", b"-1"]), overflow);
    let err = expect_err(c, &[b"DECRBY", b"n", min.as_bytes()]);
    assert!(err.ends_with("would overflow"), "DECRBY by i64::MIN: {err}");
    assert_eq!(
        query(c, &[b"INCRBY", b"small", max.as_bytes()]),
        Value::Int(-1)
    );
    assert_eq!(
        query(c, &[b"GET", b"big"]),
        bulk((i64::MAX - 1).to_string().as_bytes())
    );
}

// Goal: errors carry Redis's texts. Method: unknown command, wrong arity for several commands,
// over-long key and value, forest's range bound error.
#[test]
fn error_texts() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    assert_eq!(
        expect_err(c, &[b"foo", b"a", b"b"]),
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    );
    for (line, name) in [
        ("GET", "get"),
        ("GET a b", "get"),
        ("SET k", "set"),
        ("DEL", "del"),
        ("INCRBY k", "incrby"),
        ("MGET", "mget"),
        ("ECHO", "echo"),
        ("STRLEN", "strlen"),
        ("FOREST.RANGE -", "forest.range"),
        ("FOREST.COUNT -", "forest.count"),
        ("FOREST.DELRANGE", "forest.delrange"),
    ] {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        assert_eq!(
            expect_err(c, &args),
            format!("ERR wrong number of arguments for '{name}' command"),
            "{line}"
        );
    }
    let long_key = vec![b'k'; 16 * 1024 + 1];
    assert_eq!(
        expect_err(c, &[b"SET", &long_key, b"v"]),
        "ERR key too long (16385 bytes; the limit is 16384)"
    );
    let max_key = vec![b'k'; 16 * 1024];
    assert_eq!(query(c, &[b"SET", &max_key, b"v"]), ok());
    assert_eq!(query(c, &[b"GET", &max_key]), bulk(b"v"));
    let long_value = vec![b'v'; 1024 * 1024 + 1];
    let err = expect_err(c, &[b"SET", b"k", &long_value]);
    assert!(
        err.starts_with("ERR value too long (1048577 bytes"),
        "{err}"
    );
    let max_value = vec![b'v'; 1024 * 1024];
    assert_eq!(query(c, &[b"SET", b"k", &max_value]), ok());
    assert_eq!(query(c, &[b"STRLEN", b"k"]), Value::Int(1024 * 1024));
    let err = expect_err(c, &[b"APPEND", b"k", b"x"]);
    assert!(err.starts_with("ERR value too long"), "{err}");
    assert_eq!(
        expect_err(c, &[b"FOREST.RANGE", b"a", b"+"]),
        "ERR min or max not valid string range item"
    );
    // The connection is still usable after errors.
    assert_eq!(query(c, &[b"PING"]), Value::SimpleString("PONG".into()));
}

// Goal: SCAN visits every key exactly once, in key order, with MATCH and COUNT; KEYS globs as
// Redis does; DBSIZE, FLUSHDB and FLUSHALL. Method: 500 keys written in a scrambled order, then
// full SCAN loops for several COUNTs and patterns.
#[test]
fn scan_keys_dbsize_flush() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    let mut keys: Vec<Vec<u8>> = (0..500u32)
        .map(|i| {
            let i = i.wrapping_mul(2_654_435_761) % 1000;
            let prefix = if i % 3 == 0 { "user" } else { "item" };
            format!("{prefix}:{i:04}").into_bytes()
        })
        .collect();
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("SET").arg(k).arg(b"v").ignore();
    }
    pipe.query::<()>(c).expect("load");
    keys.sort();
    keys.dedup();
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(keys.len() as i64));

    for (pattern, count) in [
        (None, None),
        (None, Some(7)),
        (Some("user:*"), Some(10)),
        (Some("*:00?[05]"), Some(1000)),
    ] {
        let mut seen = Vec::new();
        let mut cursor = b"0".to_vec();
        let mut calls = 0;
        loop {
            let mut args: Vec<&[u8]> = vec![b"SCAN", &cursor];
            if let Some(p) = pattern {
                args.extend([&b"MATCH"[..], p.as_bytes()]);
            }
            let count_text = count.map(|n: usize| n.to_string());
            if let Some(n) = &count_text {
                args.extend([&b"COUNT"[..], n.as_bytes()]);
            }
            let reply = array(&query(c, &args));
            assert_eq!(reply.len(), 2, "SCAN reply {reply:?}");
            let batch: Vec<Vec<u8>> = array(&reply[1]).iter().map(bytes).collect();
            seen.extend(batch);
            cursor = bytes(&reply[0]);
            calls += 1;
            assert!(calls <= keys.len() + 2, "SCAN does not end");
            if cursor == b"0" {
                break;
            }
        }
        let expected: Vec<Vec<u8>> = keys
            .iter()
            .filter(|k| pattern.is_none_or(|p| glob(p.as_bytes(), k)))
            .cloned()
            .collect();
        assert_eq!(
            seen, expected,
            "SCAN MATCH {pattern:?} COUNT {count:?}: all keys, in order, once"
        );
        if let Some(n) = count {
            if n < expected.len() {
                assert!(calls > 1, "COUNT {n} should split the scan");
            }
        }
    }
    let err = expect_err(c, &[b"SCAN", b"0", b"COUNT", b"0"]);
    assert!(err.starts_with("ERR"), "COUNT 0: {err}");

    // KEYS: compared as sets (Redis gives no order).
    for pattern in [
        "*",
        "user:*",
        "item:0??1",
        "*:0[0-1]0*",
        "*:0[^0-8]*",
        "nomatch*",
        "user:0000",
    ] {
        let mut got: Vec<Vec<u8>> = array(&query(c, &[b"KEYS", pattern.as_bytes()]))
            .iter()
            .map(bytes)
            .collect();
        got.sort();
        let expected: Vec<Vec<u8>> = keys
            .iter()
            .filter(|k| glob(pattern.as_bytes(), k))
            .cloned()
            .collect();
        assert_eq!(got, expected, "KEYS {pattern}");
    }
    assert_eq!(query(c, &[b"SET", b"a*b", b"1"]), ok());
    assert_eq!(query(c, &[b"SET", b"axb", b"1"]), ok());
    assert_eq!(
        query(c, &[b"KEYS", b"a\\*b"]),
        Value::Array(vec![bulk(b"a*b")]),
        "an escaped star matches itself only"
    );

    assert_eq!(query(c, &[b"FLUSHDB"]), ok());
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(0));
    assert_eq!(query(c, &[b"KEYS", b"*"]), Value::Array(vec![]));
    assert_eq!(query(c, &[b"SET", b"again", b"1"]), ok());
    assert_eq!(query(c, &[b"FLUSHALL"]), ok());
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(0));
}

// Goal: the SCAN cursor works with a client library's own iterator, which parses the cursor as
// an unsigned integer (redis-rs, redis-py and others do). Method: `scan_match` over 300 keys.
#[test]
fn scan_cursor_works_with_client_iterators() {
    use redis::Commands;
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    for i in 0..300 {
        let _: () = c.set(format!("key:{i:03}"), i).expect("set");
    }
    let got: Vec<String> = c
        .scan_match::<_, String>("key:1*")
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("scan items");
    let expected: Vec<String> = (100..200).map(|i| format!("key:{i:03}")).collect();
    assert_eq!(got, expected);
}

/// Redis's glob (stringmatchlen): `*`, `?`, `[...]` with ranges and `^`, `\` escapes.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|i| glob(&p[1..], &s[i..])),
        Some(b'?') => !s.is_empty() && glob(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(&c) = s.first() else { return false };
            let mut i = 1;
            let negate = p.get(1) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut matched = false;
            while i < p.len() && p[i] != b']' {
                if p[i] == b'\\' && i + 1 < p.len() {
                    matched |= p[i + 1] == c;
                    i += 2;
                } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                    let (lo, hi) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
                    matched |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    matched |= p[i] == c;
                    i += 1;
                }
            }
            let rest = if i < p.len() { &p[i + 1..] } else { &p[i..] };
            matched != negate && glob(rest, &s[1..])
        }
        Some(b'\\') if p.len() > 1 => s.first() == Some(&p[1]) && glob(&p[2..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && glob(&p[1..], &s[1..]),
    }
}

// Goal: INFO has Redis's sections plus forest's engine counters; CONFIG GET answers what
// redis-benchmark and client libraries ask; CONFIG SET/RESETSTAT where harmless. Method: read
// the sections and parameters, compare fields with the state set up.
#[test]
fn info_and_config() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--max-clients", "77"]);
    let mut c = server.client();
    let c = &mut c;
    for i in 0..5 {
        assert_eq!(query(c, &[b"SET", format!("k{i}").as_bytes(), b"v"]), ok());
    }
    let info = text(&query(c, &[b"INFO"]));
    for section in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Keyspace",
    ] {
        assert!(info.contains(section), "INFO lacks {section}:\n{info}");
    }
    assert!(
        info.to_ascii_lowercase().contains("# forest"),
        "INFO lacks the forest section:\n{info}"
    );
    assert!(info.contains("db0:keys=5"), "keyspace line:\n{info}");
    assert!(
        info.contains("\r\n"),
        "INFO lines end in CR LF as Redis's do"
    );
    let server_only = text(&query(c, &[b"INFO", b"server"]));
    assert!(server_only.contains("# Server"), "{server_only}");
    assert!(
        !server_only.contains("# Keyspace"),
        "INFO server is one section:\n{server_only}"
    );
    let forest = text(&query(c, &[b"INFO", b"forest"]));
    assert!(
        forest.lines().filter(|l| l.contains(':')).count() >= 3,
        "the forest section lists the engine's stats:\n{forest}"
    );
    let keyspace = text(&query(c, &[b"INFO", b"keyspace"]));
    assert!(keyspace.contains("db0:keys=5"), "{keyspace}");

    let config = |c: &mut redis::Connection, name: &str| -> Vec<String> {
        match query(c, &[b"CONFIG", b"GET", name.as_bytes()]) {
            Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [text(k), text(v)]).collect(),
            v => array(&v).iter().map(text).collect(),
        }
    };
    assert_eq!(config(c, "maxclients"), ["maxclients", "77"]);
    let port = server.addr.port().to_string();
    assert_eq!(config(c, "port"), ["port", port.as_str()]);
    for name in ["save", "appendonly", "databases", "bind"] {
        let got = config(c, name);
        assert_eq!(got.len(), 2, "CONFIG GET {name}: {got:?}");
        assert_eq!(got[0], name);
    }
    assert!(config(c, "no-such-parameter").is_empty());
    assert_eq!(query(c, &[b"CONFIG", b"RESETSTAT"]), ok());
    // Harmless sets are accepted: `save` (client libraries and tools clear it) and a value
    // equal to the current one.
    assert_eq!(query(c, &[b"CONFIG", b"SET", b"save", b""]), ok());
    assert_eq!(query(c, &[b"CONFIG", b"SET", b"maxclients", b"77"]), ok());
    let err = expect_err(c, &[b"CONFIG", b"SET", b"no-such-parameter", b"1"]);
    assert!(err.starts_with("ERR"), "{err}");
}

// Goal: COMMAND and CLIENT answer enough for redis-cli and client libraries. Method: COMMAND
// COUNT, INFO and DOCS of known commands, CLIENT SETNAME/GETNAME/ID/LIST/INFO/SETINFO.
#[test]
fn command_and_client() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    let count = int(&query(c, &[b"COMMAND", b"COUNT"]));
    assert!(
        count >= 40,
        "COMMAND COUNT {count}: protocol.md lists over 40 commands"
    );
    let all = array(&query(c, &[b"COMMAND"]));
    assert_eq!(
        all.len() as i64,
        count,
        "COMMAND lists COMMAND COUNT entries"
    );
    let info = array(&query(c, &[b"COMMAND", b"INFO", b"get", b"forest.range"]));
    assert_eq!(info.len(), 2);
    let get = array(&info[0]);
    assert_eq!(text(&get[0]), "get");
    assert_eq!(int(&get[1]), 2, "GET's arity");
    assert_ne!(info[1], Value::Nil, "COMMAND INFO knows forest.range");
    let docs = query(c, &[b"COMMAND", b"DOCS", b"set"]);
    assert!(matches!(docs, Value::Array(_) | Value::Map(_)), "{docs:?}");

    assert_eq!(query(c, &[b"CLIENT", b"GETNAME"]), Value::Nil);
    assert_eq!(query(c, &[b"CLIENT", b"SETNAME", b"tester"]), ok());
    assert_eq!(query(c, &[b"CLIENT", b"GETNAME"]), bulk(b"tester"));
    assert_eq!(query(c, &[b"CLIENT", b"SETINFO", b"LIB-NAME", b"t"]), ok());
    let id = int(&query(c, &[b"CLIENT", b"ID"]));
    let mut other = server.client();
    let other_id = int(&query(&mut other, &[b"CLIENT", b"ID"]));
    assert_ne!(id, other_id, "client ids are unique");
    let list = text(&query(c, &[b"CLIENT", b"LIST"]));
    assert!(list.contains(&format!("id={id} ")), "{list}");
    assert!(list.contains(&format!("id={other_id} ")), "{list}");
    assert!(list.contains("name=tester"), "{list}");
    let me = text(&query(c, &[b"CLIENT", b"INFO"]));
    assert!(
        me.contains(&format!("id={id} ")) && me.contains("name=tester"),
        "{me}"
    );
}

// Goal: SAVE and BGSAVE write a checkpoint the next start recovers from. Method: write keys,
// SAVE, more keys, BGSAVE, LASTSAVE; SIGKILL; restart on the directory and read every key.
#[test]
fn save_bgsave_then_restart() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &["--durability", "sync"]);
    let mut c = server.client();
    for i in 0..200 {
        assert_eq!(
            query(&mut c, &[b"SET", format!("a{i:03}").as_bytes(), b"x"]),
            ok()
        );
    }
    assert_eq!(query(&mut c, &[b"SAVE"]), ok());
    for i in 0..100 {
        assert_eq!(
            query(&mut c, &[b"SET", format!("b{i:03}").as_bytes(), b"y"]),
            ok()
        );
    }
    assert_eq!(
        query(&mut c, &[b"BGSAVE"]),
        Value::SimpleString("Background saving started".into())
    );
    let last = int(&query(&mut c, &[b"LASTSAVE"]));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!((now - last).abs() < 60, "LASTSAVE {last} vs now {now}");
    assert_eq!(query(&mut c, &[b"DEL", b"a000"]), Value::Int(1));
    drop(c);
    server.kill();

    let server = Server::start(&dir, &[]);
    assert!(
        server.start_line.contains("recovered 299 keys"),
        "{}",
        server.start_line
    );
    let mut c = server.client();
    assert_eq!(query(&mut c, &[b"DBSIZE"]), Value::Int(299));
    assert_eq!(query(&mut c, &[b"GET", b"a199"]), bulk(b"x"));
    assert_eq!(query(&mut c, &[b"GET", b"b099"]), bulk(b"y"));
    assert_eq!(query(&mut c, &[b"GET", b"a000"]), Value::Nil);
}

// Goal: RESP3 after HELLO 3: HELLO's map, RESP3 nulls, CONFIG GET as a map, ranges as flat
// arrays. Method: a `redis` crate connection with `protocol=resp3` (it sends HELLO 3).
#[test]
fn hello_3_and_resp3_replies() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client_at(&server.url("?protocol=resp3"));
    let c = &mut c;
    let Value::Map(hello) = query(c, &[b"HELLO", b"3"]) else {
        panic!("HELLO 3 is a map in RESP3");
    };
    let field = |name: &str| -> Value {
        hello
            .iter()
            .find(|(k, _)| text(k) == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("HELLO lacks {name}: {hello:?}"))
    };
    assert_eq!(text(&field("server")), "forest");
    assert_eq!(field("proto"), Value::Int(3));
    assert_eq!(text(&field("mode")), "standalone");
    assert_eq!(text(&field("role")), "master");
    assert!(matches!(field("id"), Value::Int(_)));
    assert!(!text(&field("version")).is_empty());
    assert!(matches!(field("modules"), Value::Array(ref m) if m.is_empty()));

    assert_eq!(query(c, &[b"GET", b"missing"]), Value::Nil);
    assert_eq!(query(c, &[b"SET", b"a", b"1"]), ok());
    assert_eq!(query(c, &[b"SET", b"b", b"2"]), ok());
    assert_eq!(query(c, &[b"EXISTS", b"a"]), Value::Int(1));
    assert_eq!(query(c, &[b"GET", b"a"]), bulk(b"1"));
    assert_eq!(
        query(c, &[b"FOREST.RANGE", b"-", b"+"]),
        Value::Array(vec![bulk(b"a"), bulk(b"1"), bulk(b"b"), bulk(b"2")])
    );
    assert!(
        matches!(query(c, &[b"CONFIG", b"GET", b"maxclients"]), Value::Map(ref m) if m.len() == 1),
        "CONFIG GET is a map in RESP3, as in Redis 7"
    );
    assert_eq!(
        expect_err(c, &[b"nosuch"]),
        "ERR unknown command 'nosuch', with args beginning with: "
    );
    // HELLO's id is CLIENT ID; HELLO SETNAME names the connection.
    assert_eq!(field("id"), query(c, &[b"CLIENT", b"ID"]));
    assert!(matches!(
        query(c, &[b"HELLO", b"3", b"SETNAME", b"resp3-client"]),
        Value::Map(_)
    ));
    assert_eq!(query(c, &[b"CLIENT", b"GETNAME"]), bulk(b"resp3-client"));
    // HELLO 2 goes back to RESP2: HELLO's reply becomes a flat array.
    let mut back = server.client_at(&server.url("?protocol=resp3"));
    assert!(matches!(
        query(&mut back, &[b"HELLO", b"2"]),
        Value::Array(_)
    ));
    let unsupported = expect_err(&mut back, &[b"HELLO", b"4"]);
    assert!(
        unsupported.starts_with("NOPROTO") || unsupported.starts_with("ERR"),
        "{unsupported}"
    );
}

// Goal: AUTH without --requirepass is Redis's error. Method: one AUTH on a server without one.
#[test]
fn auth_without_requirepass() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let err = expect_err(&mut c, &[b"AUTH", b"pw"]);
    assert!(
        err.starts_with("ERR AUTH <password> called without any password"),
        "{err}"
    );
}

// Goal: --requirepass guards every command but AUTH/HELLO/QUIT; a wrong password is refused;
// AUTH (with or without the user "default") and HELLO AUTH open the connection. Method: raw
// commands before and after AUTH; URLs with the password.
#[test]
fn auth_with_requirepass() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--requirepass", "s3cret"]);
    let mut c = server.client();
    let c = &mut c;
    let noauth = "NOAUTH Authentication required.";
    assert_eq!(expect_err(c, &[b"GET", b"k"]), noauth);
    assert_eq!(expect_err(c, &[b"PING"]), noauth);
    // Redis checks that a command exists (and its arity) before authentication; so does forest.
    assert_eq!(
        expect_err(c, &[b"nosuch"]),
        "ERR unknown command 'nosuch', with args beginning with: "
    );
    let hello = expect_err(c, &[b"HELLO", b"3"]);
    assert!(hello.starts_with("NOAUTH"), "HELLO without AUTH: {hello}");
    let hello = expect_err(c, &[b"HELLO", b"3", b"AUTH", b"default", b"wrong"]);
    assert!(
        hello.starts_with("WRONGPASS"),
        "HELLO with a wrong password: {hello}"
    );
    let wrong = expect_err(c, &[b"AUTH", b"wrong"]);
    assert!(
        wrong.starts_with("WRONGPASS") || wrong.starts_with("ERR"),
        "{wrong}"
    );
    assert_eq!(expect_err(c, &[b"SET", b"k", b"v"]), noauth);
    assert_eq!(query(c, &[b"AUTH", b"s3cret"]), ok());
    assert_eq!(query(c, &[b"SET", b"k", b"v"]), ok());

    let mut d = server.client();
    assert_eq!(query(&mut d, &[b"AUTH", b"default", b"s3cret"]), ok());
    assert_eq!(query(&mut d, &[b"GET", b"k"]), bulk(b"v"));

    let url = format!("redis://:s3cret@{}/", server.addr);
    let mut e = server.client_at(&url);
    assert_eq!(query(&mut e, &[b"GET", b"k"]), bulk(b"v"));
    let url3 = format!("redis://default:s3cret@{}/?protocol=resp3", server.addr);
    let mut f = server.client_at(&url3);
    assert_eq!(query(&mut f, &[b"GET", b"k"]), bulk(b"v"));

    let bad = redis::Client::open(format!("redis://:nope@{}/", server.addr).as_str())
        .expect("url")
        .get_connection_with_timeout(common::READ_TIMEOUT);
    let err = bad.err().map(|e| err_text(&e));
    assert!(
        err.is_some(),
        "a wrong password in the URL fails the connect"
    );
}

// Goal: INCR and APPEND are atomic across connections. Method: 4 clients x 250 INCRs of one
// key (the replies must be exactly 1..=1000) and 4 clients x 100 APPENDs of their own letter
// (the final value holds 100 of each).
#[test]
fn concurrent_incr_and_append_are_atomic() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    let replies: Vec<i64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let mut c = server.client();
                s.spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..250 {
                        got.push(int(&query(&mut c, &[b"INCR", b"counter"])));
                        query(&mut c, &[b"APPEND", b"letters", &[b'a' + t]]);
                    }
                    got
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread"))
            .collect()
    });
    let mut sorted = replies;
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (1..=1000).collect::<Vec<i64>>(),
        "each INCR saw a distinct value"
    );
    let mut c = server.client();
    assert_eq!(query(&mut c, &[b"GET", b"counter"]), bulk(b"1000"));
    let letters = bytes(&query(&mut c, &[b"GET", b"letters"]));
    assert_eq!(letters.len(), 1000);
    for t in 0..4u8 {
        let n = letters.iter().filter(|&&b| b == b'a' + t).count();
        assert_eq!(n, 250, "APPENDs of {}", char::from(b'a' + t));
    }
}

// Goal: MSETNX is all or nothing under races (Redis's MSETNX is atomic): of several clients
// setting the same keys, exactly one wins and every key holds its value. Method: 4 clients, 100
// rounds started at a barrier, each client naming the round's 1024 keys in its own rotation
// (many keys, so that the clients' commands overlap in the server).
#[test]
fn concurrent_msetnx_has_one_winner() {
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 100;
    const KEYS: usize = 1024;
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    let barrier = common::Barrier::new(CLIENTS);
    let keys = |round: usize| -> Vec<Vec<u8>> {
        (0..KEYS)
            .map(|k| format!("r{round}:{k}").into_bytes())
            .collect()
    };
    let wins: Vec<Vec<bool>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let mut c = server.client();
                let barrier = &barrier;
                s.spawn(move || {
                    (0..ROUNDS)
                        .map(|round| {
                            let mut names = keys(round);
                            names.rotate_left(t * KEYS / CLIENTS);
                            let v = t.to_string();
                            let mut args: Vec<&[u8]> = vec![b"MSETNX"];
                            for k in &names {
                                args.extend([&k[..], v.as_bytes()]);
                            }
                            barrier.wait();
                            query(&mut c, &args) == Value::Int(1)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let mut c = server.client();
    for round in 0..ROUNDS {
        let winners: Vec<usize> = wins
            .iter()
            .enumerate()
            .filter(|(_, won)| won[round])
            .map(|(t, _)| t)
            .collect();
        let names = keys(round);
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(names.iter().map(|k| &k[..]));
        let values = query(&mut c, &args);
        assert_eq!(
            winners.len(),
            1,
            "round {round}: winners {winners:?}, values {values:?}"
        );
        let v = winners[0].to_string();
        assert_eq!(
            values,
            Value::Array(vec![bulk(v.as_bytes()); KEYS]),
            "round {round}"
        );
    }
}

// Goal: MSETNX is all or nothing against a plain SETNX of one of its keys too (Redis runs
// each command alone): either MSETNX set every key, or it set none. Method: 100 rounds at a
// barrier; client A MSETNXes 1024 keys, client B SETNXes the middle one after a delay that
// varies from round to round (0 to 2 ms), so that in some rounds it lands between A's check
// and A's write of that key; then the keys must hold all of A's values, or only B's.
#[test]
fn msetnx_against_setnx_is_all_or_nothing() {
    const ROUNDS: usize = 100;
    const KEYS: usize = 1024;
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    let barrier = common::Barrier::new(2);
    let key = |round: usize, k: usize| format!("x{round}:{k:04}").into_bytes();
    std::thread::scope(|s| {
        let mut a = server.client();
        let barrier_a = &barrier;
        s.spawn(move || {
            for round in 0..ROUNDS {
                let names: Vec<Vec<u8>> = (0..KEYS).map(|k| key(round, k)).collect();
                let mut args: Vec<&[u8]> = vec![b"MSETNX"];
                for n in &names {
                    args.extend([&n[..], b"A"]);
                }
                barrier_a.wait();
                query(&mut a, &args);
            }
        });
        let mut b = server.client();
        for round in 0..ROUNDS {
            let middle = key(round, KEYS / 2);
            let delay = std::time::Duration::from_micros(100 * (round as u64 % 21));
            barrier.wait();
            let until = std::time::Instant::now() + delay;
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            query(&mut b, &[b"SETNX", &middle, b"B"]);
        }
    });
    let mut c = server.client();
    for round in 0..ROUNDS {
        let names: Vec<Vec<u8>> = (0..KEYS).map(|k| key(round, k)).collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(names.iter().map(|n| &n[..]));
        let Value::Array(values) = query(&mut c, &args) else {
            panic!("MGET is an array");
        };
        let a_count = values.iter().filter(|v| **v == bulk(b"A")).count();
        let b_won = values[KEYS / 2] == bulk(b"B");
        assert!(
            a_count == KEYS || (a_count == 0 && b_won),
            "round {round}: MSETNX applied in part: {a_count} of {KEYS} keys set by MSETNX, one by SETNX: {b_won}"
        );
    }
}

// Goal: the start line has protocol.md's form and tells the truth. Method: start with
// --engine, --durability, check each field; restart and check the recovered key count.
#[test]
fn start_line_format() {
    let re = regex::Regex::new(
        r"^forest serve: listening on 127\.0\.0\.1:(\d+), engine (\S+), dir (.+), durability (\S+), recovered (\d+) keys in (\d+(\.\d+)?) ms$",
    )
    .expect("regex");
    for engine in forest_store::engine_names() {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &["--engine", engine, "--durability", "periodic:50"]);
        let line = &server.start_line;
        let caps = re
            .captures(line)
            .unwrap_or_else(|| panic!("start line {line:?}"));
        assert_eq!(caps[1].parse::<u16>().ok(), Some(server.addr.port()));
        assert_eq!(&caps[2], engine);
        assert_eq!(&caps[3], dir.to_str().expect("utf-8 dir"));
        assert_eq!(&caps[4], "periodic:50");
        assert_eq!(&caps[5], "0");
        let mut c = server.client();
        for i in 0..10 {
            query(&mut c, &[b"SET", format!("k{i}").as_bytes(), b"v"]);
        }
        query(&mut c, &[b"SAVE"]);
        drop(c);
        drop(server);
        let again = Server::start(&dir, &[]);
        let caps = re
            .captures(&again.start_line)
            .unwrap_or_else(|| panic!("start line {:?}", again.start_line));
        assert_eq!(&caps[2], engine, "the directory records its engine");
        assert_eq!(&caps[4], "group", "group is the default durability");
        assert_eq!(&caps[5], "10");
    }
}

// Goal: --bind chooses the listening address and the start line reports it. Method: bind to
// another loopback address, connect there, and check that 127.0.0.1 is not served.
#[test]
fn bind_flag() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--bind", "127.0.0.2"]);
    assert_eq!(
        server.addr.ip().to_string(),
        "127.0.0.2",
        "{}",
        server.start_line
    );
    let mut c = server.client();
    assert_eq!(
        query(&mut c, &[b"PING"]),
        Value::SimpleString("PONG".into())
    );
    let other = std::net::SocketAddr::from(([127, 0, 0, 1], server.addr.port()));
    if let Ok(mut s) = std::net::TcpStream::connect(other) {
        // The port may belong to someone else on 127.0.0.1; it must not be this server.
        s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .expect("timeout");
        let _ = std::io::Write::write_all(&mut s, b"PING\r\n");
        let mut buf = [0u8; 7];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
        assert_ne!(&buf[..n], b"+PONG\r\n", "127.0.0.1 is served too");
    }
}

// Goal: with no --dir the data lives in ./forest-data, created if missing. Method: start in an
// empty working directory, write, SHUTDOWN, check the directory and the start line.
#[test]
fn default_data_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start_in(tmp.path(), &[]);
    assert!(
        server.start_line.contains(", dir ./forest-data, "),
        "{}",
        server.start_line
    );
    assert!(
        server.start_line.contains(", durability group, "),
        "group is the default"
    );
    assert!(
        server.start_line.contains(", engine masstree, "),
        "masstree is the default"
    );
    let mut c = server.client();
    assert_eq!(query(&mut c, &[b"SET", b"k", b"v"]), ok());
    let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut c);
    assert_eq!(server.wait_exit().code(), Some(0));
    let data = tmp.path().join("forest-data");
    assert!(data.is_dir(), "{} was not created", data.display());
    let again = Server::start_in(tmp.path(), &[]);
    let mut c = again.client();
    assert_eq!(query(&mut c, &[b"GET", b"k"]), bulk(b"v"));
}

// Goal: `--pubsub-limit` sets the subscribers' bound that CONFIG GET reports, and a malformed
// one is refused before the server starts, with the expected shape named. Method: start with
// "1mb 512kb 5", read it back; start with two values and with a bad unit.
#[test]
fn pubsub_limit_flag() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--pubsub-limit", "1mb 512kb 5"]);
    let mut con = server.client();
    let got = query(
        &mut con,
        &[b"CONFIG", b"GET", b"client-output-buffer-limit"],
    );
    let pairs: Vec<Value> = match got {
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        Value::Array(items) => items,
        other => panic!("CONFIG GET: {other:?}"),
    };
    assert_eq!(
        text(&pairs[1]),
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 5"
    );
    drop(server);
    for bad in ["1mb 2", "1qb 1mb 5"] {
        let (_tmp, dir) = data_dir();
        let Err(err) = Server::try_start(&dir, &["--pubsub-limit", bad]) else {
            panic!("--pubsub-limit {bad:?} was accepted");
        };
        assert!(err.contains("--pubsub-limit"), "{bad}: {err}");
    }
}

// Goal: `--busy-poll-us` and `--busy-poll-yield` are accepted and INFO server reports them
// (the defaults when not given), and a server with them answers; a value that is not a number is refused before
// the server starts. Method: start with 40 and without; INFO server; start with "x".
#[test]
fn busy_poll_flag() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--busy-poll-us", "40", "--busy-poll-yield"]);
    let mut c = server.client();
    assert_eq!(query(&mut c, &[b"SET", b"k", b"v"]), ok());
    assert_eq!(query(&mut c, &[b"GET", b"k"]), bulk(b"v"));
    let info = text(&query(&mut c, &[b"INFO", b"server"]));
    assert!(info.contains("forest_busy_poll_us:40\r\n"), "{info}");
    assert!(info.contains("forest_busy_poll_yield:1\r\n"), "{info}");
    drop(server);
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let info = text(&query(&mut c, &[b"INFO", b"server"]));
    let default = forest_server::server::BUSY_POLL_DEFAULT.as_micros();
    assert!(
        info.contains(&format!("forest_busy_poll_us:{default}\r\n")),
        "{info}"
    );
    assert!(info.contains("forest_busy_poll_yield:0\r\n"), "{info}");
    drop(server);
    let (_tmp, dir) = data_dir();
    let Err(err) = Server::try_start(&dir, &["--busy-poll-us", "x"]) else {
        panic!("--busy-poll-us x was accepted");
    };
    assert!(err.contains("--busy-poll-us"), "{err}");
}
