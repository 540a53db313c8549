//! redis-cli and redis-benchmark (Debian's redis-tools) against `forest serve`, unchanged
//! (issue 6 "Tests": "a short redis-benchmark run of its default tests must complete with no
//! errors").
//!
//! Without the tools on PATH the tests print a skip message and pass, unless
//! `FOREST_REQUIRE_REDIS_TOOLS=1`, which makes their absence a failure (CI sets it).

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{data_dir, env_flag, Server};

/// Set to 1 to fail, not skip, when redis-cli or redis-benchmark is missing.
const REQUIRE_ENV: &str = "FOREST_REQUIRE_REDIS_TOOLS";
/// How long one tool run may take before the test fails.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// True if `tool` runs; otherwise prints the skip (or panics under [`REQUIRE_ENV`]).
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            !env_flag(REQUIRE_ENV),
            "{tool} is not on PATH and {REQUIRE_ENV} is set (apt-get install redis-tools)"
        );
        println!("SKIP: {tool} is not on PATH (apt-get install redis-tools; {REQUIRE_ENV}=1 makes this a failure)");
    }
    found
}

/// Runs `tool args`, killing it after [`TOOL_TIMEOUT`].
fn run(tool: &str, args: &[&str]) -> Output {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {tool}: {e}"));
    let began = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if began.elapsed() > TOOL_TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{tool} {args:?} ran over {TOOL_TIMEOUT:?}; stdout:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `redis-cli -h ADDR -p PORT args`, its stdout; fails on a non-zero exit or any stderr.
fn cli(server: &Server, args: &[&str]) -> String {
    let port = server.addr.port().to_string();
    let host = server.addr.ip().to_string();
    let mut full = vec!["-h", host.as_str(), "-p", port.as_str()];
    full.extend_from_slice(args);
    let out = run("redis-cli", &full);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "redis-cli {args:?}: {stderr}"
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

// Goal: redis-cli works unchanged: PING, SET/GET, forest's range command, an error reply.
// Method: one redis-cli process per command (non-interactive output: one line per element).
#[test]
fn redis_cli_commands() {
    if !have("redis-cli") {
        return;
    }
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    assert_eq!(cli(&server, &["PING"]), "PONG\n");
    assert_eq!(cli(&server, &["SET", "fruit:apple", "red"]), "OK\n");
    assert_eq!(cli(&server, &["SET", "fruit:banana", "yellow"]), "OK\n");
    assert_eq!(cli(&server, &["SET", "veg:carrot", "orange"]), "OK\n");
    assert_eq!(cli(&server, &["GET", "fruit:apple"]), "red\n");
    assert_eq!(
        cli(&server, &["FOREST.RANGE", "[fruit:", "(fruit;"]),
        "fruit:apple\nred\nfruit:banana\nyellow\n"
    );
    assert_eq!(
        cli(
            &server,
            &["FOREST.RANGE", "-", "+", "REV", "LIMIT", "1", "KEYSONLY"]
        ),
        "veg:carrot\n"
    );
    assert_eq!(cli(&server, &["FOREST.COUNT", "-", "+"]), "3\n");
    assert_eq!(cli(&server, &["DBSIZE"]), "3\n");
    let info = cli(&server, &["INFO", "server"]);
    assert!(info.contains("# Server"), "{info}");
    // An error reply: printed as "ERR ..." when stdout is no terminal (the exit status
    // differs between redis-cli versions, so only the text is checked).
    let port = server.addr.port().to_string();
    let out = run("redis-cli", &["-p", port.as_str(), "nosuch", "a"]);
    let both = [out.stdout, out.stderr].concat();
    let both = String::from_utf8_lossy(&both);
    assert!(both.contains("ERR unknown command 'nosuch'"), "{both}");
    // Multi-line input on stdin, as scripts pipe it.
    let mut child = Command::new("redis-cli")
        .args([
            "-h",
            &server.addr.ip().to_string(),
            "-p",
            &server.addr.port().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redis-cli");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(b"SET piped 1\nINCR piped\nGET piped\n")
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("redis-cli output");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n2\n2\n");
}

/// Fails on any line of redis-benchmark's output that reports a problem.
fn assert_clean(output: &str, what: &str) {
    for line in output.lines() {
        let lower = line.to_ascii_lowercase();
        assert!(
            !(lower.contains("error") || lower.contains("err ") || lower.contains("warn")),
            "{what}: {line}\n---\n{output}"
        );
    }
}

/// Runs redis-benchmark with `args` after the address and `-q`; returns its stdout with
/// progress lines split; fails on a non-zero exit or any line reporting a problem.
fn benchmark(server: &Server, args: &[&str], what: &str) -> String {
    let port = server.addr.port().to_string();
    let host = server.addr.ip().to_string();
    let mut full = vec!["-h", host.as_str(), "-p", port.as_str(), "-q"];
    full.extend_from_slice(args);
    let out = run("redis-benchmark", &full);
    let stdout = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: redis-benchmark {args:?} failed (it exits at the first error reply): {stderr}\n{stdout}"
    );
    assert_clean(&stdout, what);
    assert_clean(&stderr, what);
    stdout
}

/// True if `output` has redis-benchmark's final line for `test`.
fn has_rate(output: &str, test: &str) -> bool {
    output
        .lines()
        .any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second"))
}

// Goal: redis-benchmark's tests of the commands forest has (PING inline and multibulk, SET,
// GET, INCR, MSET) run to the end with no error, one command at a time and pipelined. Method:
// `-n 2000 -c 4 -t ping,set,get,incr,mset`, then the same with `-P 16`; each test reports a rate.
#[test]
fn redis_benchmark_string_tests() {
    if !have("redis-benchmark") {
        return;
    }
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:100"]);
    for pipeline in ["1", "16"] {
        let what = format!("string tests -P {pipeline}");
        let args = [
            "-n",
            "2000",
            "-c",
            "4",
            "-P",
            pipeline,
            "-t",
            "ping,set,get,incr,mset",
        ];
        let out = benchmark(&server, &args, &what);
        for test in [
            "PING_INLINE",
            "PING_MBULK",
            "SET",
            "GET",
            "INCR",
            "MSET (10 keys)",
        ] {
            assert!(has_rate(&out, test), "{what}: no rate for {test}:\n{out}");
        }
    }
}

// redis-benchmark's whole default set (the issue's "default tests ... complete with no
// errors") runs in forest-server/tests/it/redis_benchmark.rs, in both I/O models.
