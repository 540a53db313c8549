//! `forest serve` byte for byte (STYLE.md §5: server tests send raw RESP and compare reply
//! bytes; issue 6 "Limits and bad input", "Tests"): inline commands, a pipeline of 1,000
//! commands in one write, errors and QUIT inside pipelines, frames split at every byte, replies
//! larger than a batch, RESP3 encodings, malformed frames and the exact bulk limit (each
//! protocol error answered with `-ERR Protocol error` and a closed connection while another
//! client keeps working), random and truncated frames (proptest), half a frame then silence, a
//! client that never reads, many clients at once, `--max-clients`, and clean exits through
//! SHUTDOWN, SIGTERM and SIGINT with the data there after a restart. The tests of connection
//! handling run under every I/O model (`--io threads`, `--io tokio`, `--io per-core`).

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{data_dir, io_flag_sets, read_exact_len, read_to_close, resp, roundtrip, Server};
use proptest::prelude::*;

/// PING on `stream` answers PONG: the server still serves this client.
fn assert_alive(stream: &mut TcpStream) {
    roundtrip(stream, b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

// Goal: inline commands as redis-cli and telnet send them. Method: space-separated lines,
// quoted arguments, an empty line, exact replies.
#[test]
fn inline_commands() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");
    roundtrip(&mut s, b"SET greeting hello\r\n", b"+OK\r\n");
    roundtrip(&mut s, b"GET greeting\r\n", b"$5\r\nhello\r\n");
    roundtrip(&mut s, b"set  spaced   \"two words\"\r\n", b"+OK\r\n");
    roundtrip(&mut s, b"get spaced\r\n", b"$9\r\ntwo words\r\n");
    roundtrip(&mut s, b"GET nothing\r\n", b"$-1\r\n");
    // An empty line is skipped, as Redis does; the next command still answers.
    roundtrip(&mut s, b"\r\nEXISTS greeting spaced\r\n", b":2\r\n");
    roundtrip(
        &mut s,
        b"FOREST.RANGE - + KEYSONLY\r\n",
        b"*2\r\n$8\r\ngreeting\r\n$6\r\nspaced\r\n",
    );
    // Redis's quoting: escapes inside double quotes, none inside single quotes.
    roundtrip(&mut s, b"SET esc \"a\\x41\\n\"\r\n", b"+OK\r\n");
    roundtrip(&mut s, b"GET esc\r\n", b"$3\r\naA\n\r\n");
    roundtrip(&mut s, b"SET sq 'x\\n'\r\n", b"+OK\r\n");
    roundtrip(&mut s, b"STRLEN sq\r\n", b":3\r\n");
}

// Goal: exact reply bytes of the common reply kinds and error texts, RESP2 and RESP3.
// Method: one command at a time on a raw connection.
#[test]
fn exact_replies_resp2_and_resp3() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    let s = &mut s;
    roundtrip(s, &resp(&[b"SET", b"k", b"v"]), b"+OK\r\n");
    roundtrip(s, &resp(&[b"INCR", b"n"]), b":1\r\n");
    roundtrip(
        s,
        &resp(&[b"MGET", b"k", b"x"]),
        b"*2\r\n$1\r\nv\r\n$-1\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"foo", b"a", b"b"]),
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n",
    );
    roundtrip(
        s,
        &resp(&[b"GET"]),
        b"-ERR wrong number of arguments for 'get' command\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"SET", b"k", b"v", b"EX", b"0"]),
        b"-ERR invalid expire time in 'set' command\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"FOREST.RANGE", b"-", b"+"]),
        b"*4\r\n$1\r\nk\r\n$1\r\nv\r\n$1\r\nn\r\n$1\r\n1\r\n",
    );
    roundtrip(s, &resp(&[b"FOREST.COUNT", b"-", b"+"]), b":2\r\n");

    // RESP3: HELLO 3 answers a map of 7 entries; nulls become `_`.
    s.write_all(&resp(&[b"HELLO", b"3"])).expect("write");
    let head = read_exact_len(s, 4);
    assert_eq!(head, b"%7\r\n", "HELLO 3 replies with a 7-entry map");
    // Drain the rest of HELLO's reply with a marker command behind it.
    s.write_all(&resp(&[b"ECHO", b"end-of-hello"]))
        .expect("write");
    let mut rest = Vec::new();
    while !rest.ends_with(b"$12\r\nend-of-hello\r\n") {
        rest.extend(read_exact_len(s, 1));
        assert!(rest.len() < 4096, "HELLO reply too long: {rest:?}");
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("$6\r\nserver\r\n$6\r\nforest\r\n"), "{rest}");
    assert!(rest.contains("$5\r\nproto\r\n:3\r\n"), "{rest}");
    roundtrip(s, &resp(&[b"GET", b"x"]), b"_\r\n");
    roundtrip(s, &resp(&[b"MGET", b"k", b"x"]), b"*2\r\n$1\r\nv\r\n_\r\n");
}

// Goal: a pipeline of 1,000 commands in one write is answered in order, in full. Method:
// SET/GET/INCR interleaved, one write, the exact concatenated replies read back.
#[test]
fn pipeline_of_1000_in_one_write() {
    for io in io_flag_sets() {
        pipeline_of_1000_in_one_write_on(&io);
    }
}

fn pipeline_of_1000_in_one_write_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, io);
    let mut s = server.raw();
    let mut request = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000u32 {
        let key = format!("key{}", i % 50);
        match i % 3 {
            0 => {
                let value = format!("value{i}");
                request.extend(resp(&[b"SET", key.as_bytes(), value.as_bytes()]));
                expected.extend_from_slice(b"+OK\r\n");
            }
            1 => {
                // The GET sees the pipeline's last SET of its key, if any came before it.
                let last_set = (0..i).rev().find(|j| j % 3 == 0 && j % 50 == i % 50);
                request.extend(resp(&[b"GET", key.as_bytes()]));
                match last_set {
                    Some(j) => {
                        let v = format!("value{j}");
                        expected.extend(format!("${}\r\n{v}\r\n", v.len()).into_bytes());
                    }
                    None => expected.extend_from_slice(b"$-1\r\n"),
                }
            }
            _ => {
                request.extend(resp(&[b"INCR", b"counter"]));
                expected.extend(format!(":{}\r\n", i / 3 + 1).into_bytes());
            }
        }
    }
    roundtrip(&mut s, &request, &expected);
    assert_alive(&mut s);
}

// Goal: each malformed frame gets `-ERR Protocol error...` and a closed connection, while
// another client keeps working. Method: one fresh connection per bad frame; the bystander
// PINGs after each.
#[test]
fn malformed_frames_close_only_their_connection() {
    for io in io_flag_sets() {
        malformed_frames_close_only_their_connection_on(&io);
    }
}

fn malformed_frames_close_only_their_connection_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, io);
    let mut bystander = server.raw();
    let over_bulk = format!("*2\r\n$3\r\nGET\r\n${}\r\n", 1024 * 1024 + 64 * 1024 + 1);
    let over_array = format!("*{}\r\n", 1_048_576 + 1);
    let long_inline = vec![b'a'; 64 * 1024 + 10];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad type byte in an array", b"*1\r\n+PING\r\n".to_vec()),
        ("negative bulk length", b"*1\r\n$-5\r\n".to_vec()),
        (
            "huge bulk length",
            b"*1\r\n$99999999999999999999\r\n".to_vec(),
        ),
        ("bulk over the limit", over_bulk.into_bytes()),
        ("too many elements", over_array.into_bytes()),
        ("non-numeric array length", b"*abc\r\n".to_vec()),
        ("non-numeric bulk length", b"*1\r\n$x1\r\n".to_vec()),
        ("inline line over 64 KiB", long_inline),
        ("unbalanced quotes", b"SET \"a b\r\n".to_vec()),
    ];
    for (what, bytes) in cases {
        let mut s = server.raw();
        s.write_all(&bytes).expect("write");
        let reply = read_to_close(&mut s);
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("-ERR Protocol error") && reply.ends_with("\r\n"),
            "{what}: got {reply:?}"
        );
        assert_eq!(
            reply.matches("\r\n").count(),
            1,
            "{what}: one error line: {reply:?}"
        );
        assert_alive(&mut bystander);
    }
}

// Goal: half a frame then silence harms no one, and the frame completes later. Method: client A
// sends part of a GET and waits; B works meanwhile; A sends the rest and gets its reply.
#[test]
fn half_a_frame_then_silence() {
    for io in io_flag_sets() {
        half_a_frame_then_silence_on(&io);
    }
}

fn half_a_frame_then_silence_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, io);
    let mut a = server.raw();
    let mut b = server.raw();
    roundtrip(&mut b, &resp(&[b"SET", b"abcde", b"5"]), b"+OK\r\n");
    a.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nab").expect("write");
    let began = Instant::now();
    for i in 0..100u32 {
        let v = i.to_string();
        roundtrip(&mut b, &resp(&[b"SET", b"x", v.as_bytes()]), b"+OK\r\n");
    }
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "B was slowed down"
    );
    std::thread::sleep(Duration::from_millis(200));
    roundtrip(&mut a, b"cde\r\n", b"$1\r\n5\r\n");
}

// Goal: a client that sends a huge pipeline and never reads its replies does not stop others.
// Method: A pipelines GETs of a 64 KiB value (64 MiB of replies) and never reads; B runs
// commands with a deadline meanwhile.
#[test]
fn slow_reader_does_not_stop_others() {
    for io in io_flag_sets() {
        slow_reader_does_not_stop_others_on(&io);
    }
}

fn slow_reader_does_not_stop_others_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, io);
    let mut b = server.raw();
    let big = vec![b'z'; 64 * 1024];
    roundtrip(&mut b, &resp(&[b"SET", b"big", &big]), b"+OK\r\n");
    let mut a = server.raw();
    a.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let writer = std::thread::spawn(move || {
        let one = resp(&[b"GET", b"big"]);
        let chunk: Vec<u8> = one.repeat(100);
        for _ in 0..10 {
            // Once the server stops reading A (its replies are not read), writes block and
            // time out: expected, A just stops.
            if a.write_all(&chunk).is_err() {
                break;
            }
        }
        a // Keep A open until the test ends.
    });
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    for i in 0..200u32 {
        let v = i.to_string();
        roundtrip(&mut b, &resp(&[b"SET", b"k", v.as_bytes()]), b"+OK\r\n");
        roundtrip(
            &mut b,
            &resp(&[b"GET", b"k"]),
            format!("${}\r\n{v}\r\n", v.len()).as_bytes(),
        );
    }
    let mut c = server.raw();
    assert_alive(&mut c);
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "others slowed to {:?}",
        began.elapsed()
    );
    let a = writer.join().expect("writer thread");
    drop(a);
    assert_alive(&mut b);
}

// Goal: --max-clients holds: the next client gets `-ERR max number of clients reached` and a
// closed connection; a freed slot is usable again. Method: --max-clients 3, four connections.
#[test]
fn max_clients_rejects_the_next_client() {
    for io in io_flag_sets() {
        max_clients_rejects_the_next_client_on(&io);
    }
}

fn max_clients_rejects_the_next_client_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[io, &["--max-clients", "3"]].concat());
    let mut held: Vec<TcpStream> = (0..3).map(|_| server.raw()).collect();
    for s in &mut held {
        assert_alive(s);
    }
    let mut extra = server.raw();
    let reply = read_to_close(&mut extra);
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR max number of clients reached\r\n"
    );
    for s in &mut held {
        assert_alive(s);
    }
    drop(held.pop());
    // The server notices the close asynchronously: retry for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = server.raw();
        s.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
        let reply = read_to_close_or_pong(&mut s);
        if reply == b"+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a PONG (7 bytes) or everything up to the close, whichever comes first.
fn read_to_close_or_pong(s: &mut TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got != b"+PONG\r\n" {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// Writes `count` keys through a raw connection and checks the replies.
fn write_keys(server: &Server, count: u32) {
    let mut s = server.raw();
    let mut request = Vec::new();
    for i in 0..count {
        request.extend(resp(&[b"SET", format!("key{i:05}").as_bytes(), b"value"]));
    }
    roundtrip(&mut s, &request, &b"+OK\r\n".repeat(count as usize));
}

/// Restarts on `server`'s directory and checks that `count` keys came back.
fn assert_recovered(dir: &std::path::Path, count: u32) {
    let server = Server::start(dir, &[]);
    assert!(
        server
            .start_line
            .contains(&format!("recovered {count} keys")),
        "{}",
        server.start_line
    );
    let mut s = server.raw();
    roundtrip(
        &mut s,
        &resp(&[b"DBSIZE"]),
        format!(":{count}\r\n").as_bytes(),
    );
    roundtrip(
        &mut s,
        &resp(&[b"GET", format!("key{:05}", count - 1).as_bytes()]),
        b"$5\r\nvalue\r\n",
    );
}

// Goal: SHUTDOWN (plain, NOSAVE, SAVE) replies nothing, closes the connection, exits 0, and the
// data is there after a restart. Method: periodic durability with a long interval, so the exit
// itself must make the log durable.
#[test]
fn shutdown_exits_0_and_keeps_data() {
    for io in io_flag_sets() {
        shutdown_exits_0_and_keeps_data_on(&io);
    }
}

fn shutdown_exits_0_and_keeps_data_on(io: &[&str]) {
    for shutdown in [
        &[&b"SHUTDOWN"[..]][..],
        &[b"SHUTDOWN", b"NOSAVE"],
        &[b"shutdown", b"save"],
    ] {
        let (_tmp, dir) = data_dir();
        let flags = [io, &["--durability", "periodic:60000"]].concat();
        let mut server = Server::start(&dir, &flags);
        write_keys(&server, 500);
        let mut s = server.raw();
        s.write_all(&resp(shutdown)).expect("write");
        assert_eq!(read_to_close(&mut s), b"", "SHUTDOWN replies nothing");
        let status = server.wait_exit();
        assert_eq!(status.code(), Some(0), "exit status ({io:?})");
        assert_recovered(&dir, 500);
    }
}

// Goal: SIGTERM and SIGINT stop the server cleanly: exit 0, data kept, even with a client
// connected and periodic durability. Method: one server per signal.
#[test]
fn sigterm_and_sigint_exit_0_and_keep_data() {
    for (io, signal) in io_flag_sets()
        .into_iter()
        .flat_map(|io| [(io.clone(), "TERM"), (io, "INT")])
    {
        let (_tmp, dir) = data_dir();
        let flags = [&io[..], &["--durability", "periodic:60000"]].concat();
        let mut server = Server::start(&dir, &flags);
        write_keys(&server, 300);
        let _idle = server.raw();
        server.signal(signal);
        let status = server.wait_exit();
        assert_eq!(
            status.code(),
            Some(0),
            "exit status after SIG{signal} ({io:?})"
        );
        assert_recovered(&dir, 300);
    }
}

// Goal: QUIT replies +OK and closes. Method: raw connection.
#[test]
fn quit_replies_ok_and_closes() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    s.write_all(&resp(&[b"QUIT"])).expect("write");
    assert_eq!(read_to_close(&mut s), b"+OK\r\n");
}

/// The corpus the proptest mutates: valid requests of several shapes.
fn seed_frames() -> Vec<Vec<u8>> {
    vec![
        resp(&[b"SET", b"k", b"v"]),
        resp(&[b"GET", b"k"]),
        resp(&[b"MSET", b"a", b"1", b"b", b"2"]),
        resp(&[b"FOREST.RANGE", b"-", b"+", b"LIMIT", b"3"]),
        b"PING\r\n".to_vec(),
        b"SET \"q u\" 'x'\r\n".to_vec(),
        b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n".to_vec(),
    ]
}

// Goal: random and truncated frames never take the server down or disturb another client.
// Method: proptest: a valid request, cut at a random point with random bytes spliced in, sent on
// a fresh connection that is then closed; a bystander's PING must answer after each case. One
// server for all cases (a start per case would dominate the run).
#[test]
fn random_and_truncated_frames() {
    for io in io_flag_sets() {
        random_and_truncated_frames_on(&io);
    }
}

fn random_and_truncated_frames_on(io: &[&str]) {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[io, &["--durability", "periodic:1000"]].concat());
    let bystander = std::cell::RefCell::new(server.raw());
    let strategy = (
        0..seed_frames().len(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        prop::collection::vec(any::<u8>(), 0..16),
    );
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |(which, cut, at, junk)| {
        let mut frame = seed_frames()[which].clone();
        frame.truncate(cut.index(frame.len() + 1));
        let at = at.index(frame.len() + 1);
        let tail = frame.split_off(at);
        frame.extend(junk);
        frame.extend(tail);
        let mut s = server.raw();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        s.write_all(&frame).expect("write");
        // Whatever comes back (replies, an error, nothing for an incomplete frame) is fine;
        // what matters is the server and the other client.
        let mut sink = [0u8; 4096];
        let _ = std::io::Read::read(&mut s, &mut sink);
        drop(s);
        assert_alive(&mut bystander.borrow_mut());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// Goal: frames split anywhere are reassembled: a pipeline written one byte at a time gets the
// same replies. Method: 12 commands (with a binary value) dribbled byte by byte with TCP_NODELAY.
#[test]
fn frames_split_at_every_byte() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &io);
        let mut s = server.raw();
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for i in 0..4u8 {
            let key = [b'k', b'0' + i];
            let value = [0, b'\r', b'\n', i, 0xff];
            request.extend(resp(&[b"SET", &key, &value]));
            expected.extend_from_slice(b"+OK\r\n");
            request.extend(resp(&[b"GET", &key]));
            expected.extend_from_slice(b"$5\r\n");
            expected.extend_from_slice(&value);
            expected.extend_from_slice(b"\r\n");
            request.extend(format!("EXISTS k{i}\r\n").into_bytes());
            expected.extend_from_slice(b":1\r\n");
        }
        for byte in &request {
            s.write_all(std::slice::from_ref(byte)).expect("write");
        }
        let got = read_exact_len(&mut s, expected.len());
        assert_eq!(got, expected, "{io:?}");
    }
}

// Goal: the bulk limit is exact: a bulk of 1 MiB + 64 KiB is a frame (a too-long value is the
// store's error and the connection stays open); one byte more is a protocol error. Method:
// SET at the limit, PING, then SET with one byte more (only its header is sent).
#[test]
fn bulk_limit_is_exact() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    let limit = 1024 * 1024 + 64 * 1024;
    let at_limit = vec![b'v'; limit];
    roundtrip(
        &mut s,
        &resp(&[b"SET", b"k", &at_limit]),
        format!("-ERR value too long ({limit} bytes; the limit is 1048576)\r\n").as_bytes(),
    );
    assert_alive(&mut s);
    // Only the header of the over-long bulk: the server refuses it on the claimed length and
    // closes, so a client still writing the body would see EPIPE or a reset.
    let header = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", limit + 1);
    s.write_all(header.as_bytes()).expect("write");
    let reply = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(reply.starts_with("-ERR Protocol error"), "{reply:?}");
}

// Goal: an error in the middle of a pipeline answers in its place and the rest run. Method:
// SET, INCR of a non-integer, unknown command, wrong arity, GET in one write; exact replies.
#[test]
fn errors_inside_a_pipeline_keep_their_place() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    let request = [
        resp(&[b"SET", b"s", b"text"]),
        resp(&[b"INCR", b"s"]),
        resp(&[b"NOPE"]),
        resp(&[b"GET"]),
        resp(&[b"SET", b"t", b"1"]),
        resp(&[b"MGET", b"s", b"t"]),
    ]
    .concat();
    let expected: &[u8] = b"+OK\r\n\
        -ERR value is not an integer or out of range\r\n\
        -ERR unknown command 'NOPE', with args beginning with: \r\n\
        -ERR wrong number of arguments for 'get' command\r\n\
        +OK\r\n\
        *2\r\n$4\r\ntext\r\n$1\r\n1\r\n";
    roundtrip(&mut s, &request, expected);
}

// Goal: many clients at once all get served correctly (worker threads share one store).
// Method: 64 connections, each on its own thread writing and reading its own keys in small
// pipelines, then one check of the total.
#[test]
fn many_concurrent_clients() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let flags = [&io[..], &["--durability", "group"]].concat();
        let server = Server::start(&dir, &flags);
        std::thread::scope(|scope| {
            for t in 0..64u32 {
                let mut s = server.raw();
                scope.spawn(move || {
                    for round in 0..10u32 {
                        let mut request = Vec::new();
                        let mut expected = Vec::new();
                        for i in 0..5u32 {
                            let key = format!("c{t}:{round}:{i}");
                            let value = format!("{t}.{round}.{i}");
                            request.extend(resp(&[b"SET", key.as_bytes(), value.as_bytes()]));
                            expected.extend_from_slice(b"+OK\r\n");
                            request.extend(resp(&[b"GET", key.as_bytes()]));
                            expected
                                .extend(format!("${}\r\n{value}\r\n", value.len()).into_bytes());
                        }
                        roundtrip(&mut s, &request, &expected);
                    }
                });
            }
        });
        let mut s = server.raw();
        roundtrip(&mut s, &resp(&[b"DBSIZE"]), b":3200\r\n");
    }
}

// Goal: QUIT in a pipeline answers +OK, closes, and the commands after it do not run (as in
// Redis). Method: SET, QUIT, SET in one write; then a new connection checks the second key.
#[test]
fn quit_inside_a_pipeline_stops_it() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    let request = [
        resp(&[b"SET", b"a", b"1"]),
        resp(&[b"QUIT"]),
        resp(&[b"SET", b"b", b"2"]),
    ]
    .concat();
    s.write_all(&request).expect("write");
    assert_eq!(read_to_close(&mut s), b"+OK\r\n+OK\r\n");
    let mut t = server.raw();
    roundtrip(&mut t, &resp(&[b"EXISTS", b"a", b"b"]), b":1\r\n");
}

// Goal: a pipeline whose replies are far larger than one batch's reply budget comes back
// whole and in order. Method: a 600 KB value, 20 x (GET, ECHO n) in one write (12 MB of
// replies), read back exactly.
#[test]
fn large_replies_in_a_pipeline_stay_in_order() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &io);
        let mut s = server.raw();
        let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        roundtrip(&mut s, &resp(&[b"SET", b"big", &big]), b"+OK\r\n");
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for i in 0..20u32 {
            request.extend(resp(&[b"GET", b"big"]));
            expected.extend(format!("${}\r\n", big.len()).into_bytes());
            expected.extend_from_slice(&big);
            expected.extend_from_slice(b"\r\n");
            let n = i.to_string();
            request.extend(resp(&[b"ECHO", n.as_bytes()]));
            expected.extend(format!("${}\r\n{n}\r\n", n.len()).into_bytes());
        }
        s.write_all(&request).expect("write");
        let got = read_exact_len(&mut s, expected.len());
        assert!(
            got == expected,
            "{io:?}: replies differ from the expected bytes"
        );
    }
}

/// The server's resident memory in KiB (Linux /proc).
fn rss_kib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

// Goal: a claimed length costs no memory before its bytes arrive (a client cannot take the
// server's memory with headers). Method: 100 connections each claim an array of 1,048,576
// elements or a bulk of 1 MiB + 64 KiB and send a few bytes; the server's RSS may grow by far
// less than what was claimed, and it still serves. RSS counts touched memory only: a buffer
// reserved but never written would pass unseen here.
#[test]
fn claimed_lengths_take_no_memory() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let server = Server::start(&dir, &io);
        let mut bystander = server.raw();
        assert_alive(&mut bystander);
        let before = rss_kib(&server);
        let mut held = Vec::new();
        for i in 0..100 {
            let mut s = server.raw();
            let claim: &[u8] = if i % 2 == 0 {
                b"*1048576\r\n$3\r\nGET\r\n"
            } else {
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1114112\r\nsome bytes"
            };
            s.write_all(claim).expect("write");
            held.push(s);
        }
        assert_alive(&mut bystander);
        std::thread::sleep(Duration::from_millis(200));
        let grew_mib = rss_kib(&server).saturating_sub(before) / 1024;
        println!("{io:?}: RSS grew by {grew_mib} MiB for 100 claims");
        assert!(
            grew_mib < 64,
            "{io:?}: RSS grew by {grew_mib} MiB for 100 claims (100 MiB of bulks, 50M elements claimed)"
        );
        drop(held);
        assert_alive(&mut bystander);
    }
}
