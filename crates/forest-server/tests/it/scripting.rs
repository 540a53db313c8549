//! Lua scripting over real sockets in both I/O models (issue 15 "Scripting";
//! docs/PROTOCOL.md "Scripting"): Redis's replies byte for byte, a script as one atomic
//! batch under concurrent readers, a script reading its own writes, EVALSHA's NOSCRIPT and
//! the EVAL fallback clients use, and the time limit and SCRIPT KILL.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Running, IO_MODELS, R};

/// Lowercase hex SHA1 of `text`, computed by the server (so the test needs no SHA1 code).
fn sha_of(c: &mut common::Client, text: &str) -> String {
    c.cmd(&["EVAL", "return redis.sha1hex(ARGV[1])", "0", text])
        .text()
}

// Goal: each command and the conversion rules answer byte for byte as Redis does.
// Method: pipelined raw commands, replies compared as bytes.
#[test]
fn scripting_replies_byte_for_byte() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let cases: &[(&[&str], &[u8])] = &[
            (&["EVAL", "return 1", "0"], b":1\r\n"),
            (&["EVAL", "return 'x'", "0"], b"$1\r\nx\r\n"),
            (
                &["EVAL", "return {1, 'a', {2}, nil, 5}", "0"],
                b"*3\r\n:1\r\n$1\r\na\r\n*1\r\n:2\r\n",
            ),
            (&["EVAL", "return false", "0"], b"$-1\r\n"),
            (&["EVAL", "return true", "0"], b":1\r\n"),
            (&["EVAL", "return 2.7", "0"], b":2\r\n"),
            (&["EVAL", "return {ok='fine'}", "0"], b"+fine\r\n"),
            (&["EVAL", "return {err='MY error'}", "0"], b"-MY error\r\n"),
            (
                &["EVAL", "return redis.error_reply('bad')", "0"],
                b"-ERR bad\r\n",
            ),
            (
                &[
                    "EVAL",
                    "return {KEYS[1], ARGV[1], ARGV[2]}",
                    "1",
                    "k",
                    "a",
                    "b",
                ],
                b"*3\r\n$1\r\nk\r\n$1\r\na\r\n$1\r\nb\r\n",
            ),
            (
                &[
                    "EVAL",
                    "return redis.call('set', KEYS[1], ARGV[1])",
                    "1",
                    "s",
                    "v",
                ],
                b"+OK\r\n",
            ),
            (
                &["EVAL", "return redis.call('get', KEYS[1])", "1", "s"],
                b"$1\r\nv\r\n",
            ),
            (
                &["EVAL", "return redis.call('get', 'none')", "0"],
                b"$-1\r\n",
            ),
            (
                &["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "s"],
                b"-ERR value is not an integer or out of range\r\n",
            ),
            (
                &["EVAL", "return 1", "3", "a"],
                b"-ERR Number of keys can't be greater than number of args\r\n",
            ),
            (
                &["EVAL", "return 1", "-1"],
                b"-ERR Number of keys can't be negative\r\n",
            ),
            (
                &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
                b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            ),
            (&["SCRIPT", "LOAD", "return 'loaded'"], b"$40\r\n{sha}\r\n"),
            (
                &["SCRIPT", "EXISTS", "{sha}", "ffff"],
                b"*2\r\n:1\r\n:0\r\n",
            ),
            (&["EVALSHA", "{sha}", "0"], b"$6\r\nloaded\r\n"),
            (
                &["EVAL_RO", "return redis.pcall('del', 's')", "0"],
                b"-ERR Write commands are not allowed from read-only scripts.\r\n",
            ),
            (&["SCRIPT", "FLUSH"], b"+OK\r\n"),
            (&["SCRIPT", "EXISTS", "{sha}"], b"*1\r\n:0\r\n"),
            (
                &["SCRIPT", "KILL"],
                b"-NOTBUSY No scripts in execution right now.\r\n",
            ),
        ];
        // `{sha}` stands for the digest of "return 'loaded'" (redis.sha1hex's, checked against
        // a known value of SHA1 below).
        assert_eq!(
            sha_of(&mut c, ""),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        let loaded = sha_of(&mut c, "return 'loaded'");
        for (argv, want) in cases {
            let argv: Vec<String> = argv.iter().map(|a| a.replace("{sha}", &loaded)).collect();
            let want = String::from_utf8_lossy(want).replace("{sha}", &loaded);
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            c.send(&argv);
            assert_eq!(
                String::from_utf8_lossy(&c.read_bytes(want.len())),
                want,
                "{io} {argv:?}"
            );
        }
        // RESP3: false is `_`, the rest as in RESP2 (the script still sees RESP2 replies).
        assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
        c.send_raw(b"EVAL \"return false\" 0\r\nEVAL \"redis.call('hset', 'h', 'f', 'v') return redis.call('hgetall', 'h')\" 0\r\n");
        let want = b"_\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
    }
}

const PAIRS: usize = 4;
const SCRIPTS_PER_WRITER: usize = 200;

// Goal: no client ever sees half a script: a script incrementing two counters (and moving
// a token between two keys) is seen whole or not at all by MGET, by a range, and by another
// script. Method: two writers run the script while two readers check the invariants in a
// loop; a fixed number of scripts, so the test ends by count.
#[test]
fn scripts_are_atomic_to_concurrent_readers() {
    const SCRIPT: &str = "redis.call('incr', KEYS[1]) \
                          redis.call('incr', KEYS[2]) \
                          if redis.call('del', KEYS[3]) == 1 then redis.call('set', KEYS[4], 'here') \
                          else redis.call('del', KEYS[4]) redis.call('set', KEYS[3], 'here') end \
                          return redis.call('get', KEYS[1])";
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut setup = server.client();
        for p in 0..PAIRS {
            setup.cmd(&[
                "MSET",
                &format!("a:{p}"),
                "0",
                &format!("b:{p}"),
                "0",
                &format!("t:{p}:x"),
                "here",
            ]);
        }
        let done = AtomicBool::new(false);
        let checks = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let mut c = server.client();
                    let done = &done;
                    s.spawn(move || {
                        let mut checks = 0usize;
                        while !done.load(Ordering::SeqCst) || checks == 0 {
                            let p = (checks + r) % PAIRS;
                            let (a, b) = (format!("a:{p}"), format!("b:{p}"));
                            let values = c.cmd(&["MGET", &a, &b]).items();
                            assert_eq!(values[0], values[1], "{io} MGET saw half a script");
                            let range = c.cmd(&["FOREST.RANGE", &format!("[t:{p}:"), &format!("[t:{p}:~"), "KEYSONLY"]).items();
                            assert_eq!(range.len(), 1, "{io} the token is in one place: {range:?}");
                            let seen = c
                                .cmd(&["EVAL_RO", "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}", "2", &a, &b])
                                .items();
                            assert_eq!(seen[0], seen[1], "{io} a script saw half a script");
                            checks += 1;
                        }
                        checks
                    })
                })
                .collect();
            let writers: Vec<_> = (0..2)
                .map(|w| {
                    let mut c = server.client();
                    s.spawn(move || {
                        for i in 0..SCRIPTS_PER_WRITER {
                            let p = (i + w) % PAIRS;
                            let keys = [
                                format!("a:{p}"),
                                format!("b:{p}"),
                                format!("t:{p}:x"),
                                format!("t:{p}:y"),
                            ];
                            let reply = c.cmd(&[
                                "EVAL", SCRIPT, "4", &keys[0], &keys[1], &keys[2], &keys[3],
                            ]);
                            assert!(matches!(reply, R::Bulk(_)), "{reply:?}");
                        }
                    })
                })
                .collect();
            for writer in writers {
                writer.join().expect("writer");
            }
            done.store(true, Ordering::SeqCst);
            readers
                .into_iter()
                .map(|r| r.join().expect("reader"))
                .sum::<usize>()
        });
        assert!(checks >= 2, "{io}: {checks}");
        let total: i64 = (0..PAIRS)
            .map(|p| {
                setup
                    .cmd(&["GET", &format!("a:{p}")])
                    .text()
                    .parse::<i64>()
                    .expect("count")
            })
            .sum();
        assert_eq!(
            total,
            (2 * SCRIPTS_PER_WRITER) as i64,
            "{io}: no increment lost"
        );
    }
}

// Goal: a script's reads see its own earlier writes, collections and deadlines included.
#[test]
fn script_reads_its_own_writes() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let reply = c.cmd(&[
            "EVAL",
            "redis.call('set', KEYS[1], 'v') redis.call('sadd', KEYS[2], 'm') \
             redis.call('pexpire', KEYS[1], 100000) \
             return {redis.call('get', KEYS[1]), redis.call('scard', KEYS[2]), \
             redis.call('pttl', KEYS[1]) > 0 and 1 or 0, redis.call('dbsize')}",
            "2",
            "k",
            "s",
        ]);
        assert_eq!(
            reply,
            R::Arr(vec![R::bulk("v"), R::Int(1), R::Int(1), R::Int(2)]),
            "{io}"
        );
    }
}

// Goal: the path redis-py's Script takes: EVALSHA of an unknown digest answers NOSCRIPT,
// then SCRIPT LOAD (or EVAL) caches it and EVALSHA runs it, from any client.
#[test]
fn noscript_then_eval_fallback() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let body = "return redis.call('incrby', KEYS[1], ARGV[1])";
        let sha = sha_of(&mut c, body);
        assert_eq!(
            c.cmd(&["EVALSHA", &sha, "1", "n", "5"]),
            R::Err("NOSCRIPT No matching script. Please use EVAL.".into())
        );
        assert_eq!(c.cmd(&["EVAL", body, "1", "n", "5"]), R::Int(5), "{io}");
        let mut other = server.client();
        assert_eq!(
            other.cmd(&["EVALSHA", &sha, "1", "n", "2"]),
            R::Int(7),
            "{io}: shared cache"
        );
        other.cmd(&["SCRIPT", "FLUSH"]);
        assert!(
            matches!(c.cmd(&["EVALSHA", &sha, "1", "n", "1"]), R::Err(e) if e.starts_with("NOSCRIPT"))
        );
        assert_eq!(c.cmd(&["SCRIPT", "LOAD", body]), R::bulk(&sha));
        assert_eq!(c.cmd(&["EVALSHA", &sha, "1", "n", "1"]), R::Int(8), "{io}");
    }
}

// Goal: a runaway script is stopped after the time limit with an error (its writes
// dropped) while other clients keep reading; SCRIPT KILL stops one at once.
#[test]
fn time_limit_and_script_kill() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.cmd(&["SET", "seen", "yes"]);
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "300"]),
            R::Simple("OK".into())
        );
        let started = Instant::now();
        c.send(&[
            b"EVAL",
            b"redis.call('set', 'w', 1) while true do end",
            b"0",
        ]);
        // Meanwhile another client reads (reads take no lock).
        let mut other = server.client();
        assert_eq!(other.cmd(&["GET", "seen"]), R::bulk("yes"), "{io}");
        let reply = c.read();
        assert!(
            matches!(&reply, R::Err(e) if e.starts_with("ERR Script timed out")),
            "{io}: {reply:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(300), "{io}");
        assert_eq!(
            c.cmd(&["EXISTS", "w"]),
            R::Int(0),
            "{io}: the stopped script's write was dropped"
        );
        // SCRIPT KILL, well before a long limit.
        c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "60000"]);
        let started = Instant::now();
        c.send(&[b"EVAL", b"while true do end", b"0"]);
        loop {
            match other.cmd(&["SCRIPT", "KILL"]) {
                R::Simple(ok) if ok == "OK" => break,
                R::Err(e) if e.starts_with("NOTBUSY") => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => panic!("{io}: SCRIPT KILL: {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{io}: the script never ran"
            );
        }
        let reply = c.read();
        assert!(
            matches!(&reply, R::Err(e) if e.starts_with("ERR Script killed by user with SCRIPT KILL")),
            "{io}: {reply:?}"
        );
        assert_eq!(
            c.cmd(&["EVAL", "return 'alive'", "0"]),
            R::bulk("alive"),
            "{io}"
        );
    }
}

// Goal: EVAL inside MULTI is queued and its writes join EXEC's one batch.
#[test]
fn eval_inside_multi_exec() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.send_raw(b"MULTI\r\nSET x 1\r\nEVAL \"return redis.call('incr', KEYS[1])\" 1 x\r\nGET x\r\nEXEC\r\n");
        let want = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n:2\r\n$1\r\n2\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
    }
}

// Goal: scripts nesting deeply, when compiled or through C functions (pcall, gsub), end
// with a Lua error or their result, never a crash, on either I/O model's thread stacks.
// Method: depths below and above Lua's C-call bound (200), then PING the same server.
#[test]
fn deep_nesting_never_crashes() {
    let nested = |depth: usize| format!("return {}1{}", "(".repeat(depth), ")".repeat(depth));
    let pcalls = "local function f(n) if n == 0 then return 0 end \
                  local ok, v = pcall(f, n - 1) if not ok then error(v, 0) end return v + 1 end \
                  return f(tonumber(ARGV[1]))";
    let gsubs = "local function f(s, n) if n == 0 then return s end \
                 return (string.gsub(s, '.', function(c) return f(c, n - 1) end)) end \
                 return f('a', tonumber(ARGV[1]))";
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        for depth in [150usize, 195, 250, 1000] {
            for (script, arg) in [
                (nested(depth), String::new()),
                (pcalls.to_string(), depth.to_string()),
                (gsubs.to_string(), depth.to_string()),
            ] {
                let reply = c.cmd(&["EVAL", &script, "0", &arg]);
                assert!(
                    matches!(&reply, R::Int(_) | R::Bulk(_) | R::Err(_)),
                    "{io} depth {depth}: {reply:?}"
                );
            }
        }
        assert_eq!(c.cmd(&["PING"]), R::Simple("PONG".into()), "{io}");
    }
}
