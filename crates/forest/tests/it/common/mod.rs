//! The harness of the `serve_*` tests: `forest serve` as a child process (issue 6 "Tests").
//!
//! [`Server::start`] runs the binary with `serve --port 0 --dir DIR` and the given flags, reads
//! the start line (protocol.md "Start line") for the address, and keeps draining stdout and
//! stderr so the child never blocks on a full pipe. Dropping a [`Server`] SIGKILLs and reaps
//! the child; a failing test prints what the server wrote to stderr.
#![allow(dead_code)] // Each test file uses its own part of the harness.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a start (open + recovery + bind) may take before the test fails.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a clean exit (SHUTDOWN, SIGTERM) may take.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Read timeout on test clients, so a server that never answers fails the test, not hangs it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variable that picks the I/O model for every start (see the module doc).
pub const IO_ENV: &str = "FOREST_SERVE_IO";

/// One set of flags per I/O model `forest serve --io` offers (read from its help), or one
/// empty set when the binary has no `--io`: tests of connection handling run under each.
pub fn io_flag_sets() -> Vec<Vec<&'static str>> {
    let help = Command::new(env!("CARGO_BIN_EXE_forest"))
        .args(["serve", "--help"])
        .output()
        .expect("forest serve --help");
    if String::from_utf8_lossy(&help.stdout).contains("--io") {
        // The default, per-core, with one runtime: a task that blocks its thread (on a
        // socket or a durability wait) would stall every other client there.
        vec![
            vec!["--io", "threads"],
            vec!["--io", "tokio"],
            vec!["--io", "per-core", "--threads", "1"],
        ]
    } else {
        vec![vec![]]
    }
}

/// A running `forest serve`.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    /// The start line, as printed.
    pub start_line: String,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Server {
    /// Starts `forest serve --port 0 --dir dir` plus `flags` and waits for the start line.
    pub fn start(dir: &Path, flags: &[&str]) -> Server {
        Self::try_start(dir, flags).unwrap_or_else(|e| panic!("forest serve {flags:?}: {e}"))
    }

    /// As [`Server::start`], returning what went wrong instead of panicking.
    pub fn try_start(dir: &Path, flags: &[&str]) -> Result<Server, String> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_forest"));
        command
            .arg("serve")
            .args(["--port", "0", "--dir"])
            .arg(dir)
            .args(flags);
        Self::spawn(command, dir, flags)
    }

    /// Starts `forest serve --port 0` plus `flags` in the working directory `cwd`, without
    /// `--dir` (the default directory, `cwd/forest-data`).
    pub fn start_in(cwd: &Path, flags: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_forest"));
        command
            .current_dir(cwd)
            .args(["serve", "--port", "0"])
            .args(flags);
        Self::spawn(command, &cwd.join("forest-data"), flags)
            .unwrap_or_else(|e| panic!("forest serve {flags:?} in {}: {e}", cwd.display()))
    }

    /// Spawns `command` and waits for the start line.
    fn spawn(mut command: Command, dir: &Path, flags: &[&str]) -> Result<Server, String> {
        if let Ok(io) = std::env::var(IO_ENV) {
            if !io.is_empty() && !flags.contains(&"--io") {
                command.args(["--io", &io]);
            }
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err_pipe = child.stderr.take().ok_or("no stderr pipe")?;
        let sink = Arc::clone(&stderr);
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr lock")
                    .extend_from_slice(&buf[..n]);
            }
        });
        let out_pipe = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out_pipe).lines() {
                let Ok(line) = line else { break };
                // The receiver is gone after the start line; keep draining regardless.
                let _ = tx.send(line);
            }
        });
        let mut server = Server {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir: dir.to_path_buf(),
            start_line: String::new(),
            stderr,
        };
        let re = regex::Regex::new(r"listening on ([^,\s]+),").expect("regex");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(c) = re.captures(&line) {
                        server.addr = c[1]
                            .parse()
                            .map_err(|e| format!("address in {line:?}: {e}"))?;
                        server.start_line = line;
                        return Ok(server);
                    }
                }
                Err(gone) => {
                    // Stdout closed (the server is exiting) or the start timed out. On a
                    // close, wait for the exit and for stderr to drain: a refusal's message
                    // may still be in the pipe when stdout's reader gives up (CI of stop 30).
                    let mut status = None;
                    if gone == mpsc::RecvTimeoutError::Disconnected {
                        while Instant::now() < deadline {
                            status = server
                                .child
                                .as_mut()
                                .and_then(|c| c.try_wait().ok().flatten());
                            if status.is_some() {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        if status.is_some() {
                            let _ = err_reader.join();
                        }
                    } else {
                        status = server
                            .child
                            .as_mut()
                            .and_then(|c| c.try_wait().ok().flatten());
                    }
                    return Err(format!(
                        "no start line ({}); stderr:\n{}",
                        status.map_or("still running".to_string(), |s| s.to_string()),
                        server.stderr_text()
                    ));
                }
            }
        }
    }

    /// What the server wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock")).into_owned()
    }

    /// The `redis://` URL of the server, with `query` appended (e.g. `?protocol=resp3`).
    pub fn url(&self, query: &str) -> String {
        format!("redis://{}/{query}", self.addr)
    }

    /// A RESP2 client of the `redis` crate.
    pub fn client(&self) -> redis::Connection {
        self.client_at(&self.url(""))
    }

    /// A client of the `redis` crate for `url`.
    pub fn client_at(&self, url: &str) -> redis::Connection {
        let client = redis::Client::open(url).expect("redis url");
        let con = client
            .get_connection_with_timeout(READ_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect {url}: {e}; stderr:\n{}", self.stderr_text()));
        con.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        con
    }

    /// A raw TCP connection with a read timeout.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        s.set_nodelay(true).expect("nodelay");
        s
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (a name `kill` knows, e.g. "TERM") to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the server to exit by itself; panics after [`EXIT_TIMEOUT`].
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let child = self.child.as_mut().expect("server already reaped");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit within {EXIT_TIMEOUT:?}; stderr:\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- forest serve stderr ---\n{}", self.stderr_text());
        }
    }
}

/// A fresh temporary directory and the data directory inside it.
pub fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    (tmp, dir)
}

/// The text of a server error as the wire carried it, without the leading '-'
/// ("ERR unknown command ...").
pub fn err_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Runs `args` as one command and returns the server's error text; panics on success.
pub fn expect_err(con: &mut redis::Connection, args: &[&[u8]]) -> String {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(con) {
        Err(e) => err_text(&e),
        Ok(v) => panic!("{:?} should fail, got {v:?}", show(args)),
    }
}

/// Runs `args` as one command and returns the reply; panics on an error.
pub fn query(con: &mut redis::Connection, args: &[&[u8]]) -> redis::Value {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(con)
        .unwrap_or_else(|e| panic!("{:?}: {e}", show(args)))
}

fn show(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Writes `bytes` and reads until `expected.len()` bytes came back, then compares.
pub fn roundtrip(stream: &mut TcpStream, bytes: &[u8], expected: &[u8]) {
    stream.write_all(bytes).expect("write");
    let got = read_exact_len(stream, expected.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
    );
}

/// Reads exactly `len` bytes (or panics with what came before EOF or the timeout).
pub fn read_exact_len(stream: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match stream.read(&mut got[filled..]) {
            Ok(0) => panic!(
                "EOF after {filled} of {len} bytes: {:?}",
                String::from_utf8_lossy(&got[..filled])
            ),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!(
                "read after {filled} of {len} bytes: {e}: {:?}",
                String::from_utf8_lossy(&got[..filled])
            ),
        }
    }
    got
}

/// Reads until EOF (the server closed) and returns everything read; panics on a timeout.
pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A reset after the error reply also closes the connection.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!(
                "connection not closed ({e}); read so far: {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// Encodes `args` as a RESP array of bulk strings.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// True if the environment variable is set to something other than "" or "0".
pub fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A barrier whose wait panics after [`READ_TIMEOUT`] instead of hanging, so that one failed
/// client thread fails a test instead of leaving the others waiting forever.
pub struct Barrier {
    parties: usize,
    state: std::sync::Mutex<(usize, u64)>, // (arrived, generation)
    turned: std::sync::Condvar,
}

impl Barrier {
    pub fn new(parties: usize) -> Self {
        Self {
            parties,
            state: std::sync::Mutex::new((0, 0)),
            turned: std::sync::Condvar::new(),
        }
    }

    pub fn wait(&self) {
        let mut state = self.state.lock().expect("barrier lock");
        let generation = state.1;
        state.0 += 1;
        if state.0 == self.parties {
            *state = (0, generation + 1);
            self.turned.notify_all();
            return;
        }
        let deadline = Instant::now() + READ_TIMEOUT;
        while state.1 == generation {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "barrier: the other clients never arrived");
            state = self
                .turned
                .wait_timeout(state, left)
                .expect("barrier lock")
                .0;
        }
    }
}

// Goal: a server that refuses to start is reported with its stderr, even when stdout closes
// before the message is read (CI of stop 30 saw "no start line (exit status None)" with an
// empty stderr). Method: a stand-in that closes stdout, waits, then writes stderr and exits 2.
#[test]
fn refusal_is_reported_with_its_stderr() {
    let mut command = Command::new("sh");
    command.args([
        "-c",
        "exec 1>&-; sleep 0.3; echo 'refused: bad flag' >&2; exit 2",
    ]);
    let dir = std::env::temp_dir();
    let Err(err) = Server::spawn(command, &dir, &["--io", "none"]) else {
        panic!("the stand-in printed no start line, yet spawn succeeded");
    };
    assert!(err.contains("refused: bad flag"), "{err}");
    assert!(err.contains("exit status: 2"), "{err}");
}
