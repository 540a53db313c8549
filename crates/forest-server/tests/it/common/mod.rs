//! The server in process for the transaction and Pub/Sub tests, in either I/O model, and a
//! small RESP client that reads one reply at a time (push frames included).
#![allow(dead_code)] // Each test file uses its own part.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

/// The I/O models whose connection code differs: threads, and per-core (the default) with
/// two runtimes. The tokio model runs per-core's connection task (`tokio_io::serve`) on a
/// multi-thread runtime; the `forest serve` tests cover it (`crates/forest/tests/it`).
pub const IO_MODELS: [IoModel; 2] = [IoModel::Threads, IoModel::PerCore];

/// How long a client waits for a reply before the test fails (never reached when green).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Running {
    pub addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    pub fn start(dir: &std::path::Path, io: IoModel) -> Running {
        Self::start_with(dir, io, 2)
    }

    /// As [`Running::start`] with `threads` I/O threads (runtimes under per-core).
    pub fn start_with(dir: &std::path::Path, io: IoModel, threads: usize) -> Running {
        Self::open(Config {
            dir: dir.to_path_buf(),
            port: 0,
            io,
            threads,
            durability: Durability::Periodic { interval_ms: 50 },
            ..Config::default()
        })
    }

    /// Opens a server on `config` and runs it on a thread of this process.
    pub fn open(config: Config) -> Running {
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

    /// Waits (at most 20 s) for the server's run to end, by itself (SHUTDOWN, a signal).
    pub fn ended(&mut self) -> bool {
        self.run_result(Duration::from_secs(20)).is_some()
    }

    /// The run's result once it ended by itself, waiting at most `within`; None if it runs on.
    pub fn run_result(&mut self, within: Duration) -> Option<forest_core::Result<()>> {
        let started = std::time::Instant::now();
        let thread = self.thread.take().expect("running");
        while !thread.is_finished() {
            if started.elapsed() > within {
                self.thread = Some(thread);
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(thread.join().expect("server thread"))
    }

    /// Asks the server to stop (as a signal does), without waiting.
    pub fn request_stop(&self) {
        self.shutdown.request(false);
    }

    /// A client whose reads give up after `timeout` (a read then returns None).
    pub fn client_timing_out(&self, timeout: Duration) -> Client {
        let c = Client::connect(self.addr);
        c.stream.set_read_timeout(Some(timeout)).expect("timeout");
        c
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// A bare connection with [`READ_TIMEOUT`], for tests that read raw bytes.
    pub fn stream(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        stream
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

/// A RESP reply.
#[derive(Clone, Debug, PartialEq)]
pub enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or `_`.
    Nil,
    Arr(Vec<R>),
    Push(Vec<R>),
    Map(Vec<(R, R)>),
}

impl R {
    pub fn bulk(s: &str) -> R {
        R::Bulk(s.as_bytes().to_vec())
    }

    pub fn text(&self) -> String {
        match self {
            R::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            R::Simple(s) | R::Err(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    pub fn items(self) -> Vec<R> {
        match self {
            R::Arr(items) | R::Push(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }
}

pub struct Client {
    pub stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        Client { stream, reader }
    }

    /// Sends a command as a RESP array.
    pub fn send(&mut self, argv: &[&[u8]]) {
        self.stream.write_all(&encode(argv)).expect("send");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends a command and reads one reply.
    pub fn cmd(&mut self, argv: &[&str]) -> R {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        self.send(&argv);
        self.read()
    }

    /// Reads one reply.
    pub fn read(&mut self) -> R {
        self.try_read().expect("a reply")
    }

    /// Exactly `n` bytes of raw output.
    pub fn read_bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        std::io::Read::read_exact(&mut self.reader, &mut out).expect("read bytes");
        out
    }

    /// One reply, or None if the server closed the connection.
    pub fn try_read(&mut self) -> Option<R> {
        let mut line = Vec::new();
        let n = self.reader.read_until(b'\n', &mut line).ok()?;
        if n == 0 {
            return None;
        }
        if !line.ends_with(b"\r\n") {
            // Cut mid-line: the server closed the connection.
            return None;
        }
        let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        Some(match line[0] {
            b'+' => R::Simple(body),
            b'-' => R::Err(body),
            b':' => R::Int(body.parse().expect("integer")),
            b'_' => R::Nil,
            b'$' => {
                let len: i64 = body.parse().expect("length");
                if len < 0 {
                    return Some(R::Nil);
                }
                let mut data = vec![0u8; len as usize + 2];
                std::io::Read::read_exact(&mut self.reader, &mut data).ok()?;
                data.truncate(len as usize);
                R::Bulk(data)
            }
            tag @ (b'*' | b'>') => {
                let len: i64 = body.parse().expect("length");
                if len < 0 {
                    return Some(R::Nil);
                }
                let items = (0..len)
                    .map(|_| self.try_read())
                    .collect::<Option<Vec<_>>>()?;
                if tag == b'*' {
                    R::Arr(items)
                } else {
                    R::Push(items)
                }
            }
            b'%' => {
                let len: usize = body.parse().expect("length");
                let mut pairs = Vec::new();
                for _ in 0..len {
                    pairs.push((self.try_read()?, self.try_read()?));
                }
                R::Map(pairs)
            }
            other => panic!("unexpected type byte {}", char::from(other)),
        })
    }
}

/// `argv` as a RESP array of bulk strings.
pub fn encode(argv: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", argv.len()).into_bytes();
    for arg in argv {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Upper bound for anything that should happen at once in the blocking tests (a loaded
/// machine is slow).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// INFO's `blocked_clients`.
pub fn blocked_clients(c: &mut Client) -> usize {
    let info = c.cmd(&["INFO", "clients"]).text();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("blocked_clients line")
}

/// Waits until `n` clients are blocked (so that the next one is behind them in line).
pub fn until_blocked(c: &mut Client, n: usize) {
    let start = Instant::now();
    while blocked_clients(c) != n {
        assert!(start.elapsed() < PATIENCE, "never {n} blocked clients");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sends a command without reading its reply.
pub fn send(c: &mut Client, argv: &[&str]) {
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    c.send(&argv);
}

/// Asserts that no reply arrives within a short while (the client is still blocked).
pub fn assert_silent(c: &mut Client) {
    c.stream
        .set_read_timeout(Some(Duration::from_millis(150)))
        .expect("timeout");
    let got = c.try_read();
    c.stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("timeout");
    assert_eq!(got, None, "a blocked client got a reply");
}

/// Sends `SET key v` on `writer` until one stays unanswered for `waiting`: it waits for the
/// stripe locks of a script that started meanwhile (replies that did come must be OK). The
/// writer's read timeout is `then` afterwards.
pub fn until_waiting(
    writer: &mut Client,
    key: &str,
    what: &str,
    waiting: Duration,
    then: Duration,
) {
    let started = std::time::Instant::now();
    writer
        .stream
        .set_read_timeout(Some(waiting))
        .expect("timeout");
    loop {
        send(writer, &["SET", key, "v"]);
        match writer.try_read() {
            Some(R::Simple(ok)) if ok == "OK" => {}
            Some(other) => panic!("{what}: SET: {other:?}"),
            None => break,
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: no script held the stripes"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.stream.set_read_timeout(Some(then)).expect("timeout");
}

/// Threads of this process (the servers of these tests run in it).
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}
