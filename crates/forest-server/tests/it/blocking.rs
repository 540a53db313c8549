//! Blocking pops over real sockets in both I/O models (issue 19; docs/PROTOCOL.md "Blocking
//! pops"): wake-ups by another client's push, by EXEC, by a push of several elements; the
//! order of service; timeouts; a client that leaves while blocked; several keys; MULTI;
//! pipelined commands behind a blocked one; CLIENT UNBLOCK, CLIENT LIST and INFO. Replies
//! were checked against redis-server 7.0.15. Timing is never asserted beyond "not before the
//! timeout" and generous upper bounds.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    assert_silent, blocked_clients, send, until_blocked, Client, Running, IO_MODELS, PATIENCE, R,
};

fn pair(key: &str, value: &str) -> R {
    R::Arr(vec![R::bulk(key), R::bulk(value)])
}

// Goal: a client blocked on an empty list is served by another client's push, in both I/O
// models; BRPOP takes the tail; BZPOPMIN/BZPOPMAX are served by ZADD with the score; the
// key is gone after its last element; commands pipelined after the blocking one answer
// after it. Method: block, check silence, push, read.
#[test]
fn push_wakes_the_blocked_client() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut waiter = server.client();
        let mut pusher = server.client();
        let mut pipeline = common::encode(&[b"BLPOP", b"q", b"0"]);
        pipeline.extend(common::encode(&[b"PING"]));
        waiter.send_raw(&pipeline);
        until_blocked(&mut pusher, 1);
        assert_silent(&mut waiter);
        assert_eq!(pusher.cmd(&["RPUSH", "q", "x"]), R::Int(1));
        assert_eq!(waiter.read(), pair("q", "x"), "{io}");
        assert_eq!(waiter.read(), R::Simple("PONG".into()));
        assert_eq!(pusher.cmd(&["EXISTS", "q"]), R::Int(0));
        assert_eq!(blocked_clients(&mut pusher), 0);

        send(&mut waiter, &["BRPOP", "q", "0"]);
        until_blocked(&mut pusher, 1);
        assert_eq!(pusher.cmd(&["LPUSH", "q", "a", "b"]), R::Int(2));
        assert_eq!(waiter.read(), pair("q", "a"));
        assert_eq!(
            pusher.cmd(&["LRANGE", "q", "0", "-1"]).items(),
            vec![R::bulk("b")]
        );

        send(&mut waiter, &["BZPOPMIN", "z", "0"]);
        until_blocked(&mut pusher, 1);
        assert_eq!(pusher.cmd(&["ZADD", "z", "2.5", "m", "1", "n"]), R::Int(2));
        assert_eq!(
            waiter.read(),
            R::Arr(vec![R::bulk("z"), R::bulk("n"), R::bulk("1")])
        );
        send(&mut waiter, &["BZPOPMAX", "y", "z", "0"]);
        assert_eq!(
            waiter.read(),
            R::Arr(vec![R::bulk("z"), R::bulk("m"), R::bulk("2.5")])
        );
        send(&mut waiter, &["BZPOPMAX", "z", "0"]);
        until_blocked(&mut pusher, 1);
        assert_eq!(pusher.cmd(&["ZINCRBY", "z", "3", "w"]), R::bulk("3"));
        assert_eq!(
            waiter.read(),
            R::Arr(vec![R::bulk("z"), R::bulk("w"), R::bulk("3")])
        );
        assert_eq!(pusher.cmd(&["EXISTS", "z"]), R::Int(0));
    }
}

// Goal: EXEC's pushes wake the waiter once EXEC is done, by the key that became ready
// first, as Redis (BLPOP k1 k2 with MULTI; RPUSH k2 x; RPUSH k1 y; EXEC -> k2 x). RENAME,
// a script's pushes (served once the script is done: the first element), ZUNIONSTORE and
// COPY onto a waited key wake too. Method: one waiter, another client writing.
#[test]
fn exec_and_rename_wake_in_order_of_readiness() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut waiter = server.client();
        let mut other = server.client();
        send(&mut waiter, &["BLPOP", "k1", "k2", "0"]);
        until_blocked(&mut other, 1);
        assert_eq!(other.cmd(&["MULTI"]), R::Simple("OK".into()));
        assert_eq!(other.cmd(&["RPUSH", "k2", "x"]), R::Simple("QUEUED".into()));
        assert_eq!(other.cmd(&["RPUSH", "k1", "y"]), R::Simple("QUEUED".into()));
        assert_eq!(other.cmd(&["EXEC"]).items(), vec![R::Int(1), R::Int(1)]);
        assert_eq!(waiter.read(), pair("k2", "x"), "{io}");
        assert_eq!(other.cmd(&["LLEN", "k1"]), R::Int(1));

        send(&mut waiter, &["BRPOP", "dest", "0"]);
        until_blocked(&mut other, 1);
        assert_eq!(other.cmd(&["RPUSH", "src", "p", "q"]), R::Int(2));
        assert_eq!(
            other.cmd(&["RENAME", "src", "dest"]),
            R::Simple("OK".into())
        );
        assert_eq!(waiter.read(), pair("dest", "q"), "{io}");

        // A script's push, once the script is done.
        send(&mut waiter, &["BLPOP", "lk", "0"]);
        until_blocked(&mut other, 1);
        let script = "redis.call('RPUSH', KEYS[1], 'a'); return redis.call('RPUSH', KEYS[1], 'b')";
        assert_eq!(other.cmd(&["EVAL", script, "1", "lk"]), R::Int(2));
        assert_eq!(waiter.read(), pair("lk", "a"), "{io}");

        // ZUNIONSTORE and COPY onto a waited key.
        send(&mut waiter, &["BZPOPMIN", "zu", "0"]);
        until_blocked(&mut other, 1);
        assert_eq!(other.cmd(&["ZADD", "za", "1", "m"]), R::Int(1));
        assert_eq!(other.cmd(&["ZUNIONSTORE", "zu", "1", "za"]), R::Int(1));
        assert_eq!(
            waiter.read(),
            R::Arr(vec![R::bulk("zu"), R::bulk("m"), R::bulk("1")]),
            "{io}"
        );
        send(&mut waiter, &["BZPOPMAX", "zc", "0"]);
        until_blocked(&mut other, 1);
        assert_eq!(other.cmd(&["COPY", "za", "zc"]), R::Int(1));
        assert_eq!(
            waiter.read(),
            R::Arr(vec![R::bulk("zc"), R::bulk("m"), R::bulk("1")]),
            "{io}"
        );
    }
}

/// Three clients blocked on `key` with `command`, in this order.
fn three_waiters(server: &Running, probe: &mut Client, command: &str, key: &str) -> Vec<Client> {
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let mut c = server.client();
        send(&mut c, &[command, key, "0"]);
        until_blocked(probe, n);
        waiters.push(c);
    }
    waiters
}

// Goal: Redis's order of service: waiters are served first come first served, one element
// each, for one push of several elements (RPUSH a b c: a, b, c to BLPOP's waiters in order;
// LPUSH a b c: a, b, c to BRPOP's) and for pushes one at a time; a second waiter of a
// one-element push keeps waiting. Method: three waiters registered one after another.
#[test]
fn waiters_are_served_in_order() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut probe = server.client();
        let mut waiters = three_waiters(&server, &mut probe, "BLPOP", "k");
        assert_eq!(probe.cmd(&["RPUSH", "k", "a", "b", "c"]), R::Int(3));
        for (w, value) in waiters.iter_mut().zip(["a", "b", "c"]) {
            assert_eq!(w.read(), pair("k", value), "{io}");
        }
        let mut waiters = three_waiters(&server, &mut probe, "BRPOP", "k");
        assert_eq!(probe.cmd(&["LPUSH", "k", "a", "b", "c"]), R::Int(3));
        for (w, value) in waiters.iter_mut().zip(["a", "b", "c"]) {
            assert_eq!(w.read(), pair("k", value), "{io}");
        }
        // One at a time: each push serves the longest waiting; the others keep waiting.
        let mut waiters = three_waiters(&server, &mut probe, "BLPOP", "k");
        for (i, value) in ["1", "2", "3"].into_iter().enumerate() {
            assert_eq!(probe.cmd(&["RPUSH", "k", value]), R::Int(1));
            assert_eq!(waiters[i].read(), pair("k", value), "{io}");
            until_blocked(&mut probe, 2 - i);
            for later in &mut waiters[i + 1..] {
                assert_silent(later);
            }
        }
        assert_eq!(probe.cmd(&["EXISTS", "k"]), R::Int(0));
    }
}

// Goal: timeouts answer a null array (RESP2 `*-1`, RESP3 `_`) not before they pass; a
// timeout's errors as Redis; a served client's timeout does not fire later. Method: short
// timeouts, raw bytes.
#[test]
fn timeouts() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let start = Instant::now();
        send(&mut c, &["BLPOP", "none", "0.2"]);
        assert_eq!(c.read_bytes(5), b"*-1\r\n".to_vec(), "{io}");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < PATIENCE, "{waited:?}");
        send(&mut c, &["BZPOPMIN", "none", "other", "0.05"]);
        assert_eq!(c.read_bytes(5), b"*-1\r\n".to_vec());
        c.cmd(&["HELLO", "3"]);
        send(&mut c, &["BRPOP", "none", "0.05"]);
        assert_eq!(c.read_bytes(3), b"_\r\n".to_vec());
        c.cmd(&["HELLO", "2"]);
        assert_eq!(
            c.cmd(&["BLPOP", "k", "abc"]),
            R::Err("ERR timeout is not a float or out of range".into())
        );
        assert_eq!(
            c.cmd(&["BLPOP", "k", "-1"]),
            R::Err("ERR timeout is negative".into())
        );
        assert_eq!(c.cmd(&["SET", "s", "v"]), R::Simple("OK".into()));
        assert_eq!(
            c.cmd(&["BLPOP", "none", "s", "1"]),
            R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
        );
        // Served before its timeout: nothing more comes when it would have passed.
        let mut other = server.client();
        send(&mut c, &["BLPOP", "k", "0.3"]);
        until_blocked(&mut other, 1);
        other.cmd(&["RPUSH", "k", "v"]);
        assert_eq!(c.read(), pair("k", "v"));
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(c.cmd(&["PING"]), R::Simple("PONG".into()));
        assert_eq!(blocked_clients(&mut other), 0);
    }
}

// Goal: a client that disconnects while blocked takes no element: the next waiter gets it,
// or it stays in the list; the registry forgets the client. Method: block, close the
// socket, push.
#[test]
fn disconnect_while_blocked_loses_nothing() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut probe = server.client();
        let mut gone = server.client();
        send(&mut gone, &["BLPOP", "k", "0"]);
        until_blocked(&mut probe, 1);
        let mut next = server.client();
        send(&mut next, &["BLPOP", "k", "0"]);
        until_blocked(&mut probe, 2);
        drop(gone);
        assert_eq!(probe.cmd(&["RPUSH", "k", "only"]), R::Int(1));
        assert_eq!(next.read(), pair("k", "only"), "{io}");
        until_blocked(&mut probe, 0);

        let mut gone = server.client();
        send(&mut gone, &["BLPOP", "k", "0"]);
        until_blocked(&mut probe, 1);
        drop(gone);
        assert_eq!(probe.cmd(&["RPUSH", "k", "kept"]), R::Int(1));
        until_blocked(&mut probe, 0);
        assert_eq!(
            probe.cmd(&["LRANGE", "k", "0", "-1"]).items(),
            vec![R::bulk("kept")],
            "{io}"
        );
    }
}

// Goal: a client blocked on several keys is served by the first that becomes ready; two
// waiters, one element: the first gets it, the second keeps waiting until the next push.
// Method: waiters on overlapping keys.
#[test]
fn several_keys_and_two_waiters_one_element() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut probe = server.client();
        let mut a = server.client();
        let mut b = server.client();
        send(&mut a, &["BLPOP", "k1", "k2", "k3", "0"]);
        until_blocked(&mut probe, 1);
        send(&mut b, &["BLPOP", "k3", "0"]);
        until_blocked(&mut probe, 2);
        assert_eq!(probe.cmd(&["RPUSH", "k3", "x"]), R::Int(1));
        assert_eq!(a.read(), pair("k3", "x"), "{io}");
        until_blocked(&mut probe, 1);
        assert_silent(&mut b);
        assert_eq!(probe.cmd(&["RPUSH", "k2", "y"]), R::Int(1));
        assert_eq!(probe.cmd(&["RPUSH", "k3", "z"]), R::Int(1));
        assert_eq!(b.read(), pair("k3", "z"), "{io}");
        assert_eq!(probe.cmd(&["LPOP", "k2"]), R::bulk("y"));
    }
}

// Goal: inside MULTI a blocking pop answers at once (null array for empty keys, the element
// otherwise) and nobody blocks. Method: MULTI; BLPOP; BZPOPMIN; EXEC on raw bytes.
#[test]
fn inside_multi_nothing_blocks() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.cmd(&["RPUSH", "full", "v"]);
        c.cmd(&["MULTI"]);
        c.cmd(&["BLPOP", "empty", "0"]);
        c.cmd(&["BZPOPMIN", "empty", "0"]);
        c.cmd(&["BLPOP", "full", "0"]);
        send(&mut c, &["EXEC"]);
        let expected = b"*3\r\n*-1\r\n*-1\r\n*2\r\n$4\r\nfull\r\n$1\r\nv\r\n".to_vec();
        assert_eq!(c.read_bytes(expected.len()), expected, "{io}");
        assert_eq!(blocked_clients(&mut c), 0);
        // Redis 7.0 refuses blocking commands in scripts (flag `noscript`).
        let refused = c.cmd(&["EVAL", "return redis.call('BLPOP', 'empty', 0)", "0"]);
        assert!(
            refused
                .text()
                .starts_with("ERR This Redis command is not allowed from script"),
            "{refused:?}"
        );
    }
}

// Goal: CLIENT UNBLOCK ends a wait with the timeout's reply or Redis's error; CLIENT LIST
// shows flag `b` while blocked; INFO counts blocked clients. Method: one waiter, another
// client inspecting and unblocking it.
#[test]
fn client_unblock_and_introspection() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let mut admin = server.client();
        let R::Int(id) = c.cmd(&["CLIENT", "ID"]) else {
            panic!("id expected");
        };
        let id = id.to_string();
        send(&mut c, &["BLPOP", "k", "0"]);
        until_blocked(&mut admin, 1);
        let list = admin.cmd(&["CLIENT", "LIST"]).text();
        let line = list
            .lines()
            .find(|l| l.starts_with(&format!("id={id} ")))
            .expect("the blocked client's line");
        assert!(line.contains(" flags=b "), "{line}");
        assert!(line.contains(" cmd=blpop "), "{line}");
        assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "TIMEOUT"]), R::Int(1));
        assert_eq!(c.read(), R::Nil, "{io}");
        until_blocked(&mut admin, 0);
        assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), R::Int(0));
        send(&mut c, &["BZPOPMAX", "z", "0"]);
        until_blocked(&mut admin, 1);
        assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "ERROR"]), R::Int(1));
        assert_eq!(
            c.read(),
            R::Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
        );
        assert_eq!(
            admin.cmd(&["CLIENT", "UNBLOCK", &id, "SOON"]),
            R::Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into())
        );
        let list = admin.cmd(&["CLIENT", "LIST"]).text();
        assert!(!list.contains("flags=b"), "{list}");
    }
}

// Goal: the server stops promptly with a client blocked forever. Method: block, drop the
// server (which requests the stop and joins it).
#[test]
fn stop_with_a_blocked_client() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        let mut probe = server.client();
        send(&mut c, &["BLPOP", "k", "0"]);
        until_blocked(&mut probe, 1);
        let start = Instant::now();
        drop(server);
        assert!(
            start.elapsed() < PATIENCE,
            "{io}: stop took {:?}",
            start.elapsed()
        );
        assert_eq!(
            c.try_read(),
            None,
            "{io}: the connection ends without a reply"
        );
    }
}

// Goal: BLMOVE, BRPOPLPUSH, BLMPOP and BZMPOP wait and are served as LMOVE, RPOPLPUSH, LMPOP
// and ZMPOP; a move into a list someone waits on wakes that client too (a chain of queues);
// timeouts, EXEC and argument errors answer byte for byte as redis-server 7.0.15.
// Method: waiters served by another client's pushes; raw replies.
#[test]
fn move_and_mpop_forms() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut a = server.client();
        let mut b = server.client();
        let mut probe = server.client();
        send(&mut b, &["BLPOP", "working", "0"]);
        until_blocked(&mut probe, 1);
        send(&mut a, &["BLMOVE", "jobs", "working", "RIGHT", "LEFT", "0"]);
        until_blocked(&mut probe, 2);
        assert_eq!(probe.cmd(&["LPUSH", "jobs", "j1"]), R::Int(1));
        assert_eq!(a.read(), R::bulk("j1"), "{io}");
        assert_eq!(b.read(), pair("working", "j1"), "{io}");
        assert_eq!(probe.cmd(&["EXISTS", "jobs", "working"]), R::Int(0));

        send(&mut a, &["BRPOPLPUSH", "src", "dst", "0"]);
        until_blocked(&mut probe, 1);
        assert_eq!(probe.cmd(&["RPUSH", "src", "x", "y"]), R::Int(2));
        assert_eq!(a.read(), R::bulk("y"), "{io}");
        assert_eq!(
            probe.cmd(&["LRANGE", "dst", "0", "-1"]).items(),
            vec![R::bulk("y")]
        );

        // Woken with a destination of another type: WRONGTYPE, the wait ends, the element
        // stays (as Redis).
        send(&mut a, &["BLMOVE", "s1", "str", "LEFT", "RIGHT", "0"]);
        until_blocked(&mut probe, 1);
        assert_eq!(probe.cmd(&["SET", "str", "v"]), R::Simple("OK".into()));
        assert_eq!(probe.cmd(&["RPUSH", "s1", "e"]), R::Int(1));
        assert_eq!(
            a.read(),
            R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into()),
            "{io}"
        );
        assert_eq!(
            probe.cmd(&["LRANGE", "s1", "0", "-1"]).items(),
            vec![R::bulk("e")]
        );
        until_blocked(&mut probe, 0);

        send(
            &mut a,
            &["BLMPOP", "0", "2", "l1", "l2", "RIGHT", "COUNT", "5"],
        );
        until_blocked(&mut probe, 1);
        assert_eq!(probe.cmd(&["RPUSH", "l2", "a", "b", "c"]), R::Int(3));
        assert_eq!(
            a.read(),
            R::Arr(vec![
                R::bulk("l2"),
                R::Arr(vec![R::bulk("c"), R::bulk("b"), R::bulk("a")])
            ]),
            "{io}"
        );

        send(&mut a, &["BZMPOP", "0", "1", "z", "MAX", "COUNT", "2"]);
        until_blocked(&mut probe, 1);
        assert_eq!(
            probe.cmd(&["ZADD", "z", "1", "m", "2", "n", "3", "o"]),
            R::Int(3)
        );
        let pair_of = |m: &str, s: &str| R::Arr(vec![R::bulk(m), R::bulk(s)]);
        assert_eq!(
            a.read(),
            R::Arr(vec![
                R::bulk("z"),
                R::Arr(vec![pair_of("o", "3"), pair_of("n", "2")])
            ]),
            "{io}"
        );
        assert_eq!(probe.cmd(&["ZCARD", "z"]), R::Int(1));

        let cases: [(&[&str], &[u8]); 10] = [
            (&["BLMOVE", "e", "f", "LEFT", "RIGHT", "0.02"], b"*-1\r\n"),
            (&["BRPOPLPUSH", "e", "f", "0.02"], b"*-1\r\n"),
            (&["BLMPOP", "0.02", "1", "e", "LEFT"], b"*-1\r\n"),
            (&["BZMPOP", "0.02", "2", "e", "f", "MIN"], b"*-1\r\n"),
            (&["BLMPOP", "x", "1", "e", "foo"], b"-ERR syntax error\r\n"),
            (
                &["BZMPOP", "x", "1", "e", "MIN", "COUNT", "0"],
                b"-ERR count should be greater than 0\r\n",
            ),
            (
                &["BZMPOP", "x", "0", "e", "MIN"],
                b"-ERR numkeys should be greater than 0\r\n",
            ),
            (
                &["BLMPOP", "x", "1", "e", "LEFT"],
                b"-ERR timeout is not a float or out of range\r\n",
            ),
            (
                &["BLMOVE", "e", "f", "up", "RIGHT", "x"],
                b"-ERR syntax error\r\n",
            ),
            (
                &["BRPOPLPUSH", "e", "f", "x"],
                b"-ERR timeout is not a float or out of range\r\n",
            ),
        ];
        for (argv, reply) in cases {
            send(&mut a, argv);
            assert_eq!(a.read_bytes(reply.len()), reply.to_vec(), "{io} {argv:?}");
        }
        a.cmd(&["MULTI"]);
        a.cmd(&["BLMOVE", "e", "f", "LEFT", "RIGHT", "0"]);
        a.cmd(&["BRPOPLPUSH", "e", "f", "0"]);
        a.cmd(&["BLMPOP", "0", "1", "e", "LEFT"]);
        a.cmd(&["BZMPOP", "0", "1", "e", "MIN"]);
        send(&mut a, &["EXEC"]);
        let expected = b"*4\r\n$-1\r\n$-1\r\n*-1\r\n*-1\r\n".to_vec();
        assert_eq!(a.read_bytes(expected.len()), expected, "{io}");
        assert_eq!(blocked_clients(&mut probe), 0);
    }
}
