//! The server in process over real sockets, in both I/O models: pipelined replies byte for
//! byte, the client bound, a slow client that never reads, protocol errors, and an orderly
//! stop after which the store reopens with every acknowledged write (issue 6 "Tests"; the
//! black-box tests of the binary live in crates/forest/tests/).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::{Durability, Store, StoreOptions};

struct Running {
    addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    fn start(dir: &std::path::Path, io: IoModel, edit: impl FnOnce(&mut Config)) -> Running {
        let mut config = Config {
            dir: dir.to_path_buf(),
            port: 0,
            io,
            threads: 2,
            durability: Durability::Group,
            ..Config::default()
        };
        edit(&mut config);
        let server = Server::open(config).expect("open");
        let addr = server.local_addr().expect("bound");
        let shutdown = server.shutdown_handle();
        let thread = std::thread::spawn(move || server.run());
        Running {
            addr,
            shutdown,
            thread: Some(thread),
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        stream
    }

    fn stop(mut self) -> forest_core::Result<()> {
        self.shutdown.request(false);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("server thread")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.request(false);
            let _ = thread.join();
        }
    }
}

/// Reads until `want` bytes arrived (or the peer closed); returns them.
fn read_exact_len(stream: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut out = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match stream.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("read after {got} of {want} bytes: {e}"),
        }
    }
    out.truncate(got);
    out
}

fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    out
}

fn both_models(test: impl Fn(IoModel)) {
    test(IoModel::Threads);
    test(IoModel::PerCore);
}

// Goal: a pipeline's replies arrive in order, byte for byte, and survive a stop and reopen.
// Method: one write holding several commands (inline and multibulk), compare the reply
// bytes, stop, reopen the store directly and read the keys.
#[test]
fn pipeline_and_restart() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |_| {});
        let mut c = server.connect();
        c.write_all(b"SET a 1\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2\r\n22\r\nINCR a\r\nGET b\r\nFOREST.RANGE - + KEYSONLY\r\nGET none\r\n")
            .expect("write");
        let want = b"+OK\r\n+OK\r\n:2\r\n$2\r\n22\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n";
        assert_eq!(read_exact_len(&mut c, want.len()), want, "{io}");
        server.stop().expect("stop");
        let store = Store::open_path(dir.path(), StoreOptions::default()).expect("reopen");
        let mut v = Vec::new();
        assert!(store.get(b"a", &mut v));
        assert_eq!(v, b"2");
        assert!(store.get(b"b", &mut v));
        assert_eq!(v, b"22");
    });
}

// Goal: the client bound holds: the client over it gets Redis's error and is closed, and
// a slot frees when a client leaves.
// Method: --max-clients 2, open three connections, close one, open another.
#[test]
fn max_clients() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |c| c.max_clients = 2);
        let mut a = server.connect();
        let mut b = server.connect();
        for c in [&mut a, &mut b] {
            c.write_all(b"PING\r\n").expect("write");
            assert_eq!(read_exact_len(c, 7), b"+PONG\r\n");
        }
        let mut third = server.connect();
        assert_eq!(
            read_to_close(&mut third),
            b"-ERR max number of clients reached\r\n",
            "{io}"
        );
        drop(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut again = server.connect();
            let _ = again.write_all(b"PING\r\n");
            let reply = read_exact_len(&mut again, 7);
            if reply == b"+PONG\r\n" {
                break;
            }
            assert!(Instant::now() < deadline, "slot never freed: {reply:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        b.write_all(b"PING\r\n").expect("write");
        assert_eq!(read_exact_len(&mut b, 7), b"+PONG\r\n");
    });
}

// Goal: a client that sends many requests and never reads its replies does not slow the
// others, and the server still stops in bounded time.
// Method: fill a large value, have one client pipeline GETs of it without reading, then
// time PINGs on another client; then stop.
#[test]
fn slow_client_does_not_block_others() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |c| {
            c.durability = Durability::Periodic { interval_ms: 100 }
        });
        let mut setup = server.connect();
        let value = vec![b'x'; 512 * 1024];
        let mut cmd = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", value.len()).into_bytes();
        cmd.extend_from_slice(&value);
        cmd.extend_from_slice(b"\r\n");
        setup.write_all(&cmd).expect("write");
        assert_eq!(read_exact_len(&mut setup, 5), b"+OK\r\n");
        let slow = server.connect();
        slow.set_nonblocking(true).expect("nonblocking");
        let mut slow_writer = &slow;
        let gets = b"GET big\r\n".repeat(64);
        // Write until the socket buffers fill: the server is then blocked writing to us.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match slow_writer.write(&gets) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("slow client write: {e}"),
            }
        }
        let mut fast = server.connect();
        for _ in 0..50 {
            let started = Instant::now();
            fast.write_all(b"PING\r\n").expect("write");
            assert_eq!(read_exact_len(&mut fast, 7), b"+PONG\r\n");
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{io}: PING took {:?}",
                started.elapsed()
            );
        }
        let started = Instant::now();
        server.stop().expect("stop");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{io}: stop took {:?}",
            started.elapsed()
        );
        drop(slow);
    });
}

// Goal: malformed input gets a protocol error and a closed connection; other clients go on.
// Method: a bulk over the limit, a bad multibulk length, a non-bulk element, half a frame
// followed by a half-close.
#[test]
fn protocol_errors_close_the_connection() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |_| {});
        let cases: [(&[u8], &[u8]); 4] = [
            (
                b"*1\r\n$99999999\r\n",
                b"-ERR Protocol error: invalid bulk length\r\n",
            ),
            (
                b"*2000000\r\n",
                b"-ERR Protocol error: invalid multibulk length\r\n",
            ),
            (
                b"*1\r\n:1\r\n",
                b"-ERR Protocol error: expected '$', got ':'\r\n",
            ),
            (
                b"*2\r\n$3\r\nGET\r\n$5\r\nab",
                b"-ERR Protocol error: incomplete command at the end of the stream\r\n",
            ),
        ];
        for (input, want) in cases {
            let mut c = server.connect();
            c.write_all(input).expect("write");
            c.shutdown(std::net::Shutdown::Write).expect("half-close");
            assert_eq!(read_to_close(&mut c), want, "{io}: {input:?}");
        }
        let mut ok = server.connect();
        ok.write_all(b"PING\r\n").expect("write");
        assert_eq!(read_exact_len(&mut ok, 7), b"+PONG\r\n");
    });
}

// Goal: SHUTDOWN closes without a reply and stops the server, which exits cleanly.
// Method: SET then SHUTDOWN in one pipeline; the SET's reply arrives, then EOF.
#[test]
fn shutdown_command() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Running::start(dir.path(), io, |_| {});
        let mut c = server.connect();
        c.write_all(b"SET k v\r\nSHUTDOWN\r\n").expect("write");
        assert_eq!(read_to_close(&mut c), b"+OK\r\n", "{io}");
        let thread = server.thread.take().expect("running");
        thread.join().expect("join").expect("clean stop");
        let store = Store::open_path(dir.path(), StoreOptions::default()).expect("reopen");
        let mut v = Vec::new();
        assert!(store.get(b"k", &mut v));
    });
}

// Goal: half a command followed by silence gets a protocol error and a closed connection.
// Method: a short partial-frame timeout; send half an array and wait without closing.
#[test]
fn half_a_frame_then_silence() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |c| {
            c.partial_frame_timeout = Duration::from_millis(200)
        });
        let mut c = server.connect();
        c.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nab").expect("write");
        let started = Instant::now();
        assert_eq!(
            read_to_close(&mut c),
            b"-ERR Protocol error: incomplete command at the end of the stream\r\n",
            "{io}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{io}: {:?}",
            started.elapsed()
        );
    });
}

// Goal: INCR is atomic across connections and pipelines, in both I/O models.
// Method: 8 clients each send 50 pipelines of 20 INCRs on 3 shared counters; the final
// values must add up to every increment, and each reply must be a growing integer.
#[test]
fn concurrent_incr_is_atomic() {
    both_models(|io| {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io, |c| {
            c.durability = Durability::Periodic { interval_ms: 50 }
        });
        let (clients, rounds, per_round) = (8usize, 50usize, 20usize);
        let threads: Vec<_> = (0..clients)
            .map(|t| {
                let mut c = server.connect();
                std::thread::spawn(move || {
                    let mut last = [0i64; 3];
                    for round in 0..rounds {
                        let mut pipeline = Vec::new();
                        for i in 0..per_round {
                            let key = (t + round + i) % 3;
                            pipeline.extend_from_slice(format!("INCR counter{key}\r\n").as_bytes());
                        }
                        c.write_all(&pipeline).expect("write");
                        let mut replies = Vec::new();
                        while replies.iter().filter(|&&b| b == b'\n').count() < per_round {
                            let mut buf = [0u8; 4096];
                            let n = c.read(&mut buf).expect("read");
                            assert!(n > 0, "server closed");
                            replies.extend_from_slice(&buf[..n]);
                        }
                        let text = String::from_utf8(replies).expect("utf8");
                        for (i, line) in text.lines().enumerate() {
                            let value: i64 = line
                                .strip_prefix(':')
                                .and_then(|v| v.parse().ok())
                                .unwrap_or_else(|| panic!("integer reply expected: {line}"));
                            let key = (t + round + i) % 3;
                            assert!(
                                value > last[key],
                                "counter{key} went from {} to {value}",
                                last[key]
                            );
                            last[key] = value;
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("client");
        }
        let mut c = server.connect();
        c.write_all(b"MGET counter0 counter1 counter2\r\n")
            .expect("write");
        let mut reply = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while reply.iter().filter(|&&b| b == b'\n').count() < 7 && Instant::now() < deadline {
            let mut buf = [0u8; 256];
            let n = c.read(&mut buf).expect("read");
            reply.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8(reply).expect("utf8");
        let total: i64 = text
            .lines()
            .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
            .map(|l| l.parse::<i64>().expect("number"))
            .sum();
        assert_eq!(total, (clients * rounds * per_round) as i64, "{io}: {text}");
    });
}

// Goal: with the busy-poll on (per-core), unpipelined requests from several connections on
// both runtimes are answered in order, INFO shows the window, and the server stops (the
// spin task holds no runtime open). Method: `busy_poll` 500 µs, 2 runtimes, 6 clients
// each doing 200 SET/GET pairs one request at a time; INFO server; stop.
#[test]
fn busy_poll_serves_one_request_at_a_time_and_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::PerCore, |c| {
        c.durability = Durability::Periodic { interval_ms: 50 };
        c.busy_poll = Duration::from_micros(500);
    });
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let mut c = server.connect();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let value = format!("{t}-{i}");
                    let set = format!("SET k{t} {value}\r\n");
                    c.write_all(set.as_bytes()).expect("write");
                    assert_eq!(read_exact_len(&mut c, 5), b"+OK\r\n");
                    c.write_all(format!("GET k{t}\r\n").as_bytes())
                        .expect("write");
                    let want = format!("${}\r\n{value}\r\n", value.len());
                    assert_eq!(
                        String::from_utf8_lossy(&read_exact_len(&mut c, want.len())),
                        want
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("client");
    }
    let mut c = server.connect();
    c.write_all(b"INFO server\r\n").expect("write");
    let mut info = Vec::new();
    while !String::from_utf8_lossy(&info).contains("uptime_in_days") {
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "server closed");
        info.extend_from_slice(&buf[..n]);
    }
    let info = String::from_utf8_lossy(&info);
    assert!(info.contains("forest_busy_poll_us:500\r\n"), "{info}");
    drop(c);
    server.stop().expect("stop");
}
