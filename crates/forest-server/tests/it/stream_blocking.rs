//! XREAD and XREADGROUP with BLOCK over real sockets in both I/O models (issue 19;
//! docs/PROTOCOL.md "Streams"): wake-ups by another client's XADD, `$` resolved when the
//! command first ran, every XREAD waiter served by one XADD, XREADGROUP `>` delivering and
//! adding to the PEL, waiters of one group served in turn, timeouts (RESP2 `*-1`, RESP3 `_`),
//! XGROUP DESTROY under a blocked XREADGROUP, MULTI and scripts. Replies were checked against
//! redis-server 7.0.15. Timing is never asserted beyond "not before the timeout".

use crate::common;

use std::time::{Duration, Instant};

use common::{assert_silent, blocked_clients, send, until_blocked, Client, Running, IO_MODELS, R};

fn b(s: &str) -> R {
    R::bulk(s)
}

fn arr(items: Vec<R>) -> R {
    R::Arr(items)
}

/// One entry: `[id, [field, value, ...]]`.
fn entry(id: &str, fields: &[&str]) -> R {
    arr(vec![b(id), arr(fields.iter().map(|f| b(f)).collect())])
}

/// A RESP2 read reply of one stream.
fn one_stream(key: &str, entries: Vec<R>) -> R {
    arr(vec![arr(vec![b(key), arr(entries)])])
}

// Goal: XADD from another client wakes a blocked XREAD in both I/O models, with only the
// stream that was written (one stream per woken reply, as Redis); `$` is the last id when
// the command first ran, not at wake-up (two XADDs in one EXEC are both read); commands
// pipelined behind the blocked one answer after it. Method: block, check silence, XADD.
#[test]
fn xadd_wakes_a_blocked_xread() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut reader = server.client();
        let mut writer = server.client();
        assert_eq!(writer.cmd(&["XADD", "a", "1-0", "f", "old"]), b("1-0"));
        let mut pipeline =
            common::encode(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"a", b"b", b"$", b"$"]);
        pipeline.extend(common::encode(&[b"PING"]));
        reader.send_raw(&pipeline);
        until_blocked(&mut writer, 1);
        assert_silent(&mut reader);
        assert_eq!(writer.cmd(&["XADD", "b", "5-0", "f", "v"]), b("5-0"));
        assert_eq!(
            reader.read(),
            one_stream("b", vec![entry("5-0", &["f", "v"])]),
            "{io}"
        );
        assert_eq!(reader.read(), R::Simple("PONG".into()));
        assert_eq!(blocked_clients(&mut writer), 0);

        // `$` is 1-0 from the start: both entries of the EXEC are read.
        send(&mut reader, &["XREAD", "BLOCK", "0", "STREAMS", "a", "$"]);
        until_blocked(&mut writer, 1);
        writer.cmd(&["MULTI"]);
        writer.cmd(&["XADD", "a", "2-0", "n", "2"]);
        writer.cmd(&["XADD", "a", "3-0", "n", "3"]);
        assert_eq!(writer.cmd(&["EXEC"]), arr(vec![b("2-0"), b("3-0")]));
        assert_eq!(
            reader.read(),
            one_stream(
                "a",
                vec![entry("2-0", &["n", "2"]), entry("3-0", &["n", "3"])]
            ),
            "{io}"
        );

        // A write that adds nothing after the id (XDEL) does not answer; COUNT applies.
        send(
            &mut reader,
            &["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "a", "$"],
        );
        until_blocked(&mut writer, 1);
        assert_eq!(writer.cmd(&["XDEL", "a", "1-0"]), R::Int(1));
        assert_silent(&mut reader);
        writer.cmd(&["MULTI"]);
        writer.cmd(&["XADD", "a", "4-0", "n", "4"]);
        writer.cmd(&["XADD", "a", "5-0", "n", "5"]);
        writer.cmd(&["EXEC"]);
        assert_eq!(
            reader.read(),
            one_stream("a", vec![entry("4-0", &["n", "4"])])
        );
    }
}

// Goal: one XADD serves every XREAD waiting on the stream, whatever their place in line;
// a reader waiting for a later id stays blocked until an entry after it comes; the RESP3
// reply is a map. Method: four readers on one stream, one XADD, then another.
#[test]
fn one_xadd_serves_every_reader() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut writer = server.client();
        let mut late = server.client();
        send(&mut late, &["XREAD", "BLOCK", "0", "STREAMS", "s", "100-0"]);
        until_blocked(&mut writer, 1);
        let mut readers: Vec<Client> = (0..3).map(|_| server.client()).collect();
        readers[2].cmd(&["HELLO", "3"]);
        for (i, reader) in readers.iter_mut().enumerate() {
            send(reader, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
            until_blocked(&mut writer, i + 2);
        }
        assert_eq!(writer.cmd(&["XADD", "s", "5-0", "f", "v"]), b("5-0"));
        let entries = arr(vec![entry("5-0", &["f", "v"])]);
        for reader in &mut readers[..2] {
            assert_eq!(
                reader.read(),
                one_stream("s", vec![entry("5-0", &["f", "v"])])
            );
        }
        assert_eq!(
            readers[2].read(),
            R::Map(vec![(b("s"), entries)]),
            "RESP3 {io}"
        );
        assert_silent(&mut late);
        until_blocked(&mut writer, 1);
        writer.cmd(&["XADD", "s", "101-0", "f", "w"]);
        assert_eq!(
            late.read(),
            one_stream("s", vec![entry("101-0", &["f", "w"])])
        );
        assert_eq!(blocked_clients(&mut writer), 0);
    }
}

// Goal: a blocked XREADGROUP `>` is woken by XADD, delivered the new entry and the entry is
// in the PEL (XPENDING); a second consumer of the group blocked behind it gets nothing of
// that entry and keeps waiting (served in turn), then gets the next; NOACK adds nothing to
// the PEL; XGROUP SETID wakes nobody. Method: two consumers, XADDs.
#[test]
fn xreadgroup_wake_delivers_and_adds_to_the_pel() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut writer = server.client();
        let mut alice = server.client();
        let mut bob = server.client();
        assert_eq!(
            writer.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]),
            R::Simple("OK".into())
        );
        let read = |consumer: &str| {
            [
                "XREADGROUP",
                "GROUP",
                "g",
                consumer,
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ]
            .map(str::to_owned)
        };
        send(&mut alice, &read("alice").each_ref().map(String::as_str));
        until_blocked(&mut writer, 1);
        send(&mut bob, &read("bob").each_ref().map(String::as_str));
        until_blocked(&mut writer, 2);
        writer.cmd(&["XADD", "s", "1-0", "f", "v"]);
        assert_eq!(
            alice.read(),
            one_stream("s", vec![entry("1-0", &["f", "v"])]),
            "{io}"
        );
        assert_silent(&mut bob);
        assert_eq!(
            writer.cmd(&["XPENDING", "s", "g"]),
            arr(vec![
                R::Int(1),
                b("1-0"),
                b("1-0"),
                arr(vec![arr(vec![b("alice"), b("1")])])
            ])
        );
        writer.cmd(&["XADD", "s", "2-0", "f", "w"]);
        assert_eq!(bob.read(), one_stream("s", vec![entry("2-0", &["f", "w"])]));
        assert_eq!(
            writer
                .cmd(&["XPENDING", "s", "g", "-", "+", "10", "bob"])
                .items()
                .len(),
            1
        );

        send(
            &mut alice,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "alice",
                "NOACK",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
        );
        until_blocked(&mut writer, 1);
        writer.cmd(&["XADD", "s", "3-0", "f", "x"]);
        assert_eq!(
            alice.read(),
            one_stream("s", vec![entry("3-0", &["f", "x"])])
        );
        assert_eq!(writer.cmd(&["XPENDING", "s", "g"]).items()[0], R::Int(2));

        // XGROUP SETID wakes nobody (Redis signals only XADD and the like); the next XADD
        // serves from the group's new last id, old entries included.
        writer.cmd(&["XGROUP", "CREATE", "s", "h", "$"]);
        send(
            &mut alice,
            &[
                "XREADGROUP",
                "GROUP",
                "h",
                "alice",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
        );
        until_blocked(&mut writer, 1);
        assert_eq!(
            writer.cmd(&["XGROUP", "SETID", "s", "h", "2-0"]),
            R::Simple("OK".into())
        );
        assert_silent(&mut alice);
        writer.cmd(&["XADD", "s", "4-0", "f", "y"]);
        assert_eq!(
            alice.read(),
            one_stream(
                "s",
                vec![entry("3-0", &["f", "x"]), entry("4-0", &["f", "y"])]
            ),
            "{io}"
        );
    }
}

// Goal: timeouts answer a null array (RESP2 `*-1`, RESP3 `_`) not before the timeout, for
// XREAD and XREADGROUP; a negative timeout is refused. Method: raw bytes.
#[test]
fn timeouts_answer_null() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
        let start = Instant::now();
        send(&mut c, &["XREAD", "BLOCK", "100", "STREAMS", "s", "$"]);
        assert_eq!(c.read_bytes(5), b"*-1\r\n", "{io}");
        assert!(start.elapsed() >= Duration::from_millis(100));
        let start = Instant::now();
        send(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "50",
                "STREAMS",
                "s",
                ">",
            ],
        );
        assert_eq!(c.read_bytes(5), b"*-1\r\n");
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(
            c.cmd(&["XREAD", "BLOCK", "-1", "STREAMS", "s", "$"]),
            R::Err("ERR timeout is negative".into())
        );
        assert_eq!(blocked_clients(&mut c), 0);
        c.cmd(&["HELLO", "3"]);
        send(
            &mut c,
            &["XREAD", "BLOCK", "20", "STREAMS", "s", "nokey", "$", "$"],
        );
        assert_eq!(c.read_bytes(3), b"_\r\n");
    }
}

// Goal: XGROUP DESTROY wakes the blocked XREADGROUP readers of the group with Redis's
// NOGROUP error; inside MULTI BLOCK does not block (null array); scripts refuse BLOCK
// with Redis's error; CLIENT UNBLOCK ends a blocked XREAD. Method: one scenario.
#[test]
fn destroy_multi_scripts_and_unblock() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut writer = server.client();
        let mut reader = server.client();
        writer.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
        send(
            &mut reader,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
        );
        until_blocked(&mut writer, 1);
        assert_eq!(writer.cmd(&["XGROUP", "DESTROY", "s", "g"]), R::Int(1));
        assert_eq!(
            reader.read(),
            R::Err("NOGROUP the consumer group this client was blocked on no longer exists".into()),
            "{io}"
        );

        reader.cmd(&["MULTI"]);
        reader.cmd(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
        assert_eq!(reader.cmd(&["EXEC"]), arr(vec![R::Nil]));
        assert_eq!(
            reader.cmd(&[
                "EVAL",
                "return redis.pcall('xread', 'block', '0', 'streams', 's', '0')",
                "0"
            ]),
            R::Err("ERR xread command is not allowed with BLOCK option from scripts".into())
        );

        let id = reader.cmd(&["CLIENT", "ID"]);
        let R::Int(id) = id else {
            panic!("CLIENT ID: {id:?}")
        };
        send(&mut reader, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
        until_blocked(&mut writer, 1);
        assert_eq!(
            writer.cmd(&["CLIENT", "UNBLOCK", &id.to_string()]),
            R::Int(1)
        );
        assert_eq!(reader.read(), R::Nil);
    }
}
