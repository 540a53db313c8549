//! Real client libraries driving the server as applications do (issue 15 "Tests"): redis-py
//! (Python, RESP2 and RESP3) and ioredis (Node.js), each over both I/O models. Each test
//! starts the server on a free port and runs one script of tests/clients/, which compares
//! every reply as the library returns it with Redis's and exits non-zero on a difference.
//!
//! The libraries are installed by `.ci/run` (`pip install redis`, `npm install ioredis` into
//! `target/client-libs`). A test whose library is missing is skipped, with the reason
//! printed, only when the environment variable CI is unset; under CI it fails.
//!
//! The scripts also hold groups that need other branches' features (MULTI/EXEC, expiry,
//! pub/sub, scripting for redis-py's Lock). They run only when named in
//! [`ENABLED_PENDING`]: enabling one is a one-line change there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

/// The scripts' groups that await other branches, enabled by name once merged:
/// "transaction" (MULTI/EXEC/WATCH), "expiry" (SETEX, EXPIRE, TTL, SET EX/PX),
/// "pubsub" (SUBSCRIBE, PSUBSCRIBE, PUBLISH), "lock" (redis-py's Lock: SET NX PX and
/// EVALSHA/EVAL of its release/extend scripts).
const ENABLED_PENDING: &[&str] = &["transaction", "expiry", "pubsub", "lock"];

/// How long one script may run before the test fails.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

struct Running {
    addr: std::net::SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    fn start(dir: &Path, io: IoModel) -> Running {
        let config = Config {
            dir: dir.to_path_buf(),
            port: 0,
            io,
            threads: 2,
            durability: Durability::Group,
            ..Config::default()
        };
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
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shutdown.request(false);
            let _ = thread.join();
        }
    }
}

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Where `.ci/run` installs the Node.js libraries, unless FOREST_NODE_PATH says otherwise.
fn node_path() -> PathBuf {
    match std::env::var_os("FOREST_NODE_PATH") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/client-libs/node_modules"),
    }
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Whether `program args` runs and exits 0 (the library loads).
fn loads(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .env("NODE_PATH", node_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips (returns false) when the library is missing outside CI; fails under CI.
fn library_present(name: &str, program: &str, probe: &[&str]) -> bool {
    if loads(program, probe) {
        return true;
    }
    assert!(
        !in_ci(),
        "{name} is not installed (`{program} {}` failed) and CI is set: .ci/run installs it",
        probe.join(" ")
    );
    println!(
        "skipped: {name} is not installed (`{program} {}` failed); .ci/run installs it",
        probe.join(" ")
    );
    false
}

/// Runs `program script HOST PORT --enable ...` against a fresh server of each I/O model;
/// fails with the script's output if it exits non-zero or runs too long.
fn run_script(program: &str, script: &str) {
    for io in [IoModel::Threads, IoModel::PerCore] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let mut child = Command::new(program)
            .arg(scripts_dir().join(script))
            .arg(server.addr.ip().to_string())
            .arg(server.addr.port().to_string())
            .args(["--enable", &ENABLED_PENDING.join(",")])
            .env("NODE_PATH", node_path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let deadline = Instant::now() + SCRIPT_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let output = child.wait_with_output().expect("output");
                panic!(
                    "{script} ({io:?}) ran over {SCRIPT_TIMEOUT:?}:\n{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = child.wait_with_output().expect("output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("{script} ({io:?}):\n{stdout}{stderr}");
        assert!(
            status.success(),
            "{script} ({io:?}) found replies that differ from Redis's ({status}):\n{stdout}{stderr}"
        );
        assert!(stdout.contains(": ok"), "{script} ran no group:\n{stdout}");
    }
}

// Goal: redis-py, the most used Python client, works unchanged: strings, the new string and
// keyspace commands, scan_iter, pipeline(transaction=False), every collection type, errors,
// and (enabled groups) transactions, expiry, pub/sub and Lock (EVALSHA/EVAL scripts); in RESP2
// and RESP3 (redis-py 8's default). Method: tests/clients/redis_py.py.
#[test]
fn redis_py() {
    if library_present("redis-py", "python3", &["-c", "import redis"]) {
        run_script("python3", "redis_py.py");
    }
}

// Goal: ioredis, a Node.js client, works unchanged: the same ground through its own API
// (scanStream, pipeline, Buffer replies, defineCommand's scripts). Method:
// tests/clients/ioredis.js.
#[test]
fn ioredis() {
    if library_present("ioredis", "node", &["-e", "require('ioredis')"]) {
        run_script("node", "ioredis.js");
    }
}
