//! Pub/Sub over real sockets in both I/O models: delivery in publish order, pattern
//! messages, RESP2's subscribed mode and RESP3 pushes byte for byte, and a subscriber that
//! never reads being cut at the output bound while publishing goes on (issue 15 "Pub/Sub";
//! docs/PROTOCOL.md).

use crate::common;

use common::{Running, IO_MODELS, R};

fn confirm(kind: &str, name: &str, count: i64) -> R {
    R::Arr(vec![R::bulk(kind), R::bulk(name), R::Int(count)])
}

// Goal: every message reaches channel and pattern subscribers in publish order; PUBLISH
// counts receivers; introspection. Method: one subscriber by channel and by pattern, 300
// messages from another client, read back in order.
#[test]
fn messages_arrive_in_order_with_patterns() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut sub = server.client();
        assert_eq!(
            sub.cmd(&["SUBSCRIBE", "news"]),
            confirm("subscribe", "news", 1)
        );
        assert_eq!(
            sub.cmd(&["PSUBSCRIBE", "n?ws"]),
            confirm("psubscribe", "n?ws", 2)
        );
        let mut pubr = server.client();
        assert_eq!(
            pubr.cmd(&["PUBSUB", "NUMSUB", "news", "x"]).items(),
            vec![R::bulk("news"), R::Int(1), R::bulk("x"), R::Int(0)]
        );
        assert_eq!(pubr.cmd(&["PUBSUB", "NUMPAT"]), R::Int(1));
        assert_eq!(
            pubr.cmd(&["PUBSUB", "CHANNELS", "n*"]).items(),
            vec![R::bulk("news")]
        );
        assert_eq!(pubr.cmd(&["PUBLISH", "nows", "p"]), R::Int(1));
        let mut pipeline = Vec::new();
        for i in 0..300 {
            let message = format!("m{i}");
            pipeline.extend(common::encode(&[b"PUBLISH", b"news", message.as_bytes()]));
        }
        pubr.send_raw(&pipeline);
        for _ in 0..300 {
            assert_eq!(pubr.read(), R::Int(2));
        }
        assert_eq!(
            sub.read(),
            R::Arr(vec![
                R::bulk("pmessage"),
                R::bulk("n?ws"),
                R::bulk("nows"),
                R::bulk("p")
            ])
        );
        for i in 0..300 {
            let message = format!("m{i}");
            assert_eq!(
                sub.read(),
                R::Arr(vec![R::bulk("message"), R::bulk("news"), R::bulk(&message)]),
                "{io}"
            );
            assert_eq!(
                sub.read(),
                R::Arr(vec![
                    R::bulk("pmessage"),
                    R::bulk("n?ws"),
                    R::bulk("news"),
                    R::bulk(&message)
                ])
            );
        }
        assert_eq!(
            sub.cmd(&["UNSUBSCRIBE", "news"]),
            confirm("unsubscribe", "news", 1)
        );
        assert_eq!(pubr.cmd(&["PUBLISH", "news", "only-pattern"]), R::Int(1));
        assert_eq!(sub.read().items()[0], R::bulk("pmessage"));
        assert_eq!(
            sub.cmd(&["PUNSUBSCRIBE"]),
            confirm("punsubscribe", "n?ws", 0)
        );
        assert_eq!(sub.cmd(&["GET", "k"]), R::Nil, "out of subscribed mode");
        assert_eq!(pubr.cmd(&["PUBLISH", "news", "none"]), R::Int(0));
    }
}

// Goal: RESP2's subscribed mode as Redis (refusals, PING's array, QUIT), and RESP3's push
// frames with ordinary replies between them, byte for byte.
#[test]
fn subscribed_modes_byte_for_byte() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut c = server.client();
        c.send_raw(b"SUBSCRIBE a b\r\nGET k\r\nPING\r\nPING hi\r\n");
        let want: &[u8] = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
            *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
            -ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n\
            *2\r\n$4\r\npong\r\n$0\r\n\r\n*2\r\n$4\r\npong\r\n$2\r\nhi\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        c.send_raw(b"QUIT\r\n");
        assert_eq!(c.read_bytes(5), b"+OK\r\n");
        assert_eq!(c.try_read(), None, "{io}: closed after QUIT");

        let mut c = server.client();
        assert!(matches!(c.cmd(&["HELLO", "3"]), R::Map(_)));
        c.send_raw(b"SUBSCRIBE a\r\nSET k v\r\nGET k\r\n");
        let want: &[u8] = b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n+OK\r\n$1\r\nv\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        let mut pubr = server.client();
        assert_eq!(pubr.cmd(&["PUBLISH", "a", "hello"]), R::Int(1));
        let want: &[u8] = b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n";
        assert_eq!(c.read_bytes(want.len()), want, "{io}");
        assert_eq!(c.cmd(&["RESET"]), R::Simple("RESET".into()));
        assert_eq!(pubr.cmd(&["PUBLISH", "a", "x"]), R::Int(0));
    }
}

// Goal: a subscriber that never reads is cut at the output bound (32 MiB queued) and never
// grows the server's memory without bound; publishing goes on. Method: 256 KiB messages
// until PUBLISH reaches nobody (the kill ends the connection, which unsubscribes it); the
// loop's bound (4,000 messages, 1 GiB) is far above what the bound plus socket buffers
// hold, so reaching it means the subscriber was never cut.
#[test]
fn slow_subscriber_is_disconnected() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut sub = server.client();
        assert_eq!(
            sub.cmd(&["SUBSCRIBE", "big"]),
            confirm("subscribe", "big", 1)
        );
        let mut pubr = server.client();
        let payload = vec![b'x'; 256 * 1024];
        let mut sent = 0;
        loop {
            assert!(sent < 4000, "{io}: the subscriber was never cut");
            pubr.send(&[b"PUBLISH", b"big", &payload]);
            match pubr.read() {
                R::Int(0) => break,
                R::Int(1) => sent += 1,
                other => panic!("PUBLISH: {other:?}"),
            }
        }
        assert!(
            sent >= 32 * 4,
            "{io}: cut after {sent} messages, before the bound"
        );
        assert_eq!(pubr.cmd(&["PUBSUB", "NUMSUB", "big"]).items()[1], R::Int(0));
        assert_eq!(pubr.cmd(&["PING"]), R::Simple("PONG".into()));
        // The cut connection ends: what it still gets is less than was published.
        let mut got = 0usize;
        while let Some(reply) = sub.try_read() {
            got += 1;
            assert_eq!(reply.items()[0], R::bulk("message"));
        }
        assert!(got < sent, "{io}: {got} of {sent}");
    }
}

// Goal: CONFIG SET client-output-buffer-limit changes the bound of a subscriber that is
// already subscribed (Redis applies it at the next write). Method: subscribe, lower the hard
// limit to 1 MiB, publish 256 KiB messages to the subscriber that never reads: it is cut
// long before the default 32 MiB bound (128 messages) would cut it; socket buffers hold a
// few MiB more, hence the margin.
#[test]
fn lowered_limit_cuts_an_existing_subscriber() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut sub = server.client();
        assert_eq!(
            sub.cmd(&["SUBSCRIBE", "big"]),
            confirm("subscribe", "big", 1)
        );
        let mut pubr = server.client();
        assert_eq!(
            pubr.cmd(&[
                "CONFIG",
                "SET",
                "client-output-buffer-limit",
                "pubsub 1mb 0 0"
            ]),
            R::Simple("OK".into())
        );
        let payload = vec![b'x'; 256 * 1024];
        let mut sent = 0;
        loop {
            assert!(sent < 100, "{io}: not cut by the lowered limit");
            pubr.send(&[b"PUBLISH", b"big", &payload]);
            match pubr.read() {
                R::Int(0) => break,
                R::Int(1) => sent += 1,
                other => panic!("PUBLISH: {other:?}"),
            }
        }
        assert!(sent >= 4, "{io}: cut after {sent} messages, before 1 MiB");
    }
}
