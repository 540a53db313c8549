//! redis-benchmark's default test set against the server in process (issue 6: "a short
//! redis-benchmark run of its default tests must complete with no errors"), in both I/O
//! models, then the collections it wrote survive a restart.
//!
//! Skips with a message when redis-benchmark is not installed, unless
//! FOREST_REQUIRE_REDIS_TOOLS=1 makes its absence a failure.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;

use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

struct Running {
    addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    fn start(dir: &std::path::Path, io: IoModel) -> Running {
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

    fn stop(mut self) {
        self.shutdown.request(false);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread").expect("clean stop");
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

/// Whether `tool` runs here; panics if it must (FOREST_REQUIRE_REDIS_TOOLS=1) and does not.
fn tool_present(tool: &str) -> bool {
    let present = Command::new(tool).arg("--version").output().is_ok();
    if !present {
        assert!(
            std::env::var("FOREST_REQUIRE_REDIS_TOOLS").as_deref() != Ok("1"),
            "{tool} is required (FOREST_REQUIRE_REDIS_TOOLS=1) but not found"
        );
        eprintln!("skipped: {tool} not found (set FOREST_REQUIRE_REDIS_TOOLS=1 to require it)");
    }
    present
}

/// Runs redis-benchmark with `args` against `addr`; returns its output after checking that
/// it exited 0 and printed no error line.
fn benchmark(addr: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("redis-benchmark")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("run redis-benchmark");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "redis-benchmark failed:\n{text}");
    for line in text.split(['\r', '\n']) {
        let lower = line.to_ascii_lowercase();
        assert!(
            !lower.contains("error") && !lower.contains("wrongtype"),
            "error line from redis-benchmark: {line}\n{text}"
        );
    }
    text
}

/// One RESP command over a fresh connection, through redis-cli; its raw output.
fn cli(addr: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

// Goal: every test of redis-benchmark's default set completes without an error, in both
// I/O models, and the collections it built are intact after a restart.
// Method: `-q -n 1000 -c 4` (all default tests), `-t lrange_600`, and the collection
// tests pipelined (`-P 16`); each test's result
// line must be there (XADD is checked when the installed version runs it: 7.2 does, 7.0
// does not); then stop, reopen, and compare LLEN/SCARD/HLEN/XLEN and a LRANGE.
#[test]
fn default_tests_complete() {
    if !tool_present("redis-benchmark") {
        return;
    }
    for io in [IoModel::Threads, IoModel::PerCore] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start(dir.path(), io);
        let text = benchmark(server.addr, &["-q", "-n", "1000", "-c", "4"]);
        for test in [
            "PING_INLINE",
            "PING_MBULK",
            "SET",
            "GET",
            "INCR",
            "LPUSH",
            "RPUSH",
            "LPOP",
            "RPOP",
            "SADD",
            "HSET",
            "SPOP",
            "ZADD",
            "ZPOPMIN",
            "LRANGE_100",
            "LRANGE_300",
            "LRANGE_500",
            "LRANGE_600",
            "MSET",
        ] {
            // -q rewrites its progress line with CRs; each result is a segment of its own.
            assert!(
                text.split(['\r', '\n']).any(|l| {
                    let l = l.trim_start();
                    (l.starts_with(&format!("{test}:")) || l.starts_with(&format!("{test} (")))
                        && l.contains("requests per second")
                }),
                "{io:?}: no result for {test}:\n{text}"
            );
        }
        if text.contains("XADD") {
            assert!(
                text.contains("XADD: "),
                "{io:?}: XADD did not complete:\n{text}"
            );
        }
        benchmark(
            server.addr,
            &["-q", "-n", "1000", "-c", "4", "-t", "lrange_600"],
        );
        // Pipelined: many collection commands on one key in one batch.
        let tests = "lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,set,get";
        let text = benchmark(
            server.addr,
            &["-q", "-n", "2000", "-c", "4", "-P", "16", "-t", tests],
        );
        assert!(text.contains("ZPOPMIN: "), "{io:?}: pipelined run:\n{text}");
        if !tool_present("redis-cli") {
            return;
        }
        let probes: [&[&str]; 5] = [
            &["LLEN", "mylist"],
            &["SCARD", "myset"],
            &["HLEN", "myhash"],
            &["XLEN", "mystream"],
            &["LRANGE", "mylist", "0", "2"],
        ];
        // redis-benchmark 7.2 adds XADD to the default set; 7.0 does not, so add a few.
        let xlen: u64 = cli(server.addr, &["XLEN", "mystream"])
            .parse()
            .expect("XLEN");
        for _ in 0..3 {
            cli(server.addr, &["XADD", "mystream", "*", "myfield", "v"]);
        }
        // Without -r every SADD adds one member, which SPOP then takes.
        cli(server.addr, &["SADD", "myset", "a", "b", "c"]);
        let before: Vec<String> = probes.iter().map(|p| cli(server.addr, p)).collect();
        assert_ne!(before[0], "0", "{io:?}: the list is empty");
        assert_eq!(before[1], "3", "{io:?}: SCARD");
        assert_eq!(before[3], (xlen + 3).to_string(), "{io:?}: XLEN");
        server.stop();
        let server = Running::start(dir.path(), io);
        let after: Vec<String> = probes.iter().map(|p| cli(server.addr, p)).collect();
        assert_eq!(
            before, after,
            "{io:?}: collections changed across a restart"
        );
        server.stop();
    }
}
