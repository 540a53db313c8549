//! A server on engine bwtree under a memory budget whose LSS cannot be read back (review
//! rev-lstore F3): every read answers the storage error, never a nil or a short reply, and a
//! command whose read failed writes nothing.

use crate::common;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Client, R};
use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

const BUDGET: u64 = 16 << 10;
const STRINGS: usize = 1500;
const FIELDS: usize = 400;

struct Running {
    addr: std::net::SocketAddr,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    fn start(dir: &std::path::Path) -> Running {
        let config = Config {
            dir: dir.to_path_buf(),
            engine: Some("bwtree".into()),
            memory_budget_bytes: Some(BUDGET),
            // The damage flips every file of lss/ as a segment: no map checkpoint files there
            // (nor a checkpointer renaming one mid-listing).
            map_checkpoint_wal_bytes: None,
            port: 0,
            io: IoModel::Threads,
            threads: 2,
            durability: Durability::Periodic { interval_ms: 20 },
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

fn value(i: usize) -> String {
    format!("value-{i:05}-{}", "x".repeat(60))
}

/// Sends `commands` as one pipeline and checks that each succeeded.
fn pipeline(client: &mut Client, commands: &[Vec<String>]) {
    for command in commands {
        let argv: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
        client.send(&argv);
    }
    for command in commands {
        let reply = client.read();
        assert!(!matches!(reply, R::Err(_)), "{command:?}: {reply:?}");
    }
}

/// An `INFO memory` field as a number.
fn info_field(client: &mut Client, name: &str) -> u64 {
    let info = client.cmd(&["INFO", "memory"]).text();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO memory has no {name}: {info}"))
        .trim()
        .parse()
        .expect("a number")
}

/// Writes `collection` and `STRINGS` strings, then waits until pages were evicted down to
/// the budget (so reads must load them from the LSS).
fn load_and_evict(client: &mut Client, collection: &[Vec<String>]) {
    pipeline(client, collection);
    let sets: Vec<Vec<String>> = (0..STRINGS)
        .map(|i| vec!["SET".to_string(), format!("k{i:05}"), value(i)])
        .collect();
    pipeline(client, &sets);
    let began = Instant::now();
    loop {
        let resident = info_field(client, "forest_resident_bytes");
        if info_field(client, "forest_evictions") > 0 && resident <= BUDGET + BUDGET / 4 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "no eviction down to the budget: {resident} resident bytes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Flips every LSS record byte on disk (past each segment's 64-byte header), in place;
/// returns each segment's bytes as they were, for [`restore_lss`].
fn damage_lss(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let mut saved = Vec::new();
    for entry in std::fs::read_dir(dir.join("lss")).expect("lss dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read segment");
        let flipped: Vec<u8> = bytes
            .iter()
            .enumerate()
            .map(|(i, b)| if i < 64 { *b } else { b ^ 0x5a })
            .collect();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open segment");
        file.write_all_at(&flipped, 0).expect("damage segment");
        saved.push((path, bytes));
    }
    saved
}

/// Writes back what [`damage_lss`] changed (bytes appended since stay).
fn restore_lss(saved: &[(std::path::PathBuf, Vec<u8>)]) {
    use std::os::unix::fs::FileExt;
    for (path, bytes) in saved {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open segment");
        file.write_all_at(bytes, 0).expect("restore segment");
    }
}

fn is_storage_error(reply: &R) -> bool {
    matches!(reply, R::Err(text) if text.starts_with("ERR storage: cannot read a page")
        && text.contains("lss-"))
}

// Goal: a page-read failure is every read's error reply (GET, MGET, a collection read,
// FOREST.RANGE), never nil or a short reply; a command whose read failed writes nothing
// (HSET, which reads the hash's meta entry, would otherwise start a new hash over the old
// one). Method: a hash and strings on a 16 KiB budget, pages evicted, every LSS record byte
// flipped on disk; read everything; then undo the damage and check nothing changed.
#[test]
fn a_page_that_cannot_be_read_is_an_error_reply() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let server = Running::start(&dir);
    let mut client = Client::connect(server.addr);

    let hset: Vec<Vec<String>> = (0..FIELDS)
        .step_by(50)
        .map(|from| {
            let mut argv = vec!["HSET".to_string(), "h".to_string()];
            for i in from..(from + 50).min(FIELDS) {
                argv.push(format!("f{i:05}"));
                argv.push(value(i));
            }
            argv
        })
        .collect();
    load_and_evict(&mut client, &hset);
    let saved = damage_lss(&dir);

    let mut errors = 0;
    for i in 0..STRINGS {
        let reply = client.cmd(&["GET", &format!("k{i:05}")]);
        if is_storage_error(&reply) {
            errors += 1;
        } else {
            assert_eq!(reply, R::bulk(&value(i)), "GET k{i:05}");
        }
    }
    assert!(errors > 0, "no GET met the damage");

    let keys: Vec<String> = (0..STRINGS)
        .step_by(7)
        .map(|i| format!("k{i:05}"))
        .collect();
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let reply = client.cmd(&mget);
    assert!(is_storage_error(&reply), "MGET: {reply:?}");

    let reply = client.cmd(&["HGETALL", "h"]);
    assert!(is_storage_error(&reply), "HGETALL: {reply:?}");
    // HLEN reads the meta entry alone, whose page may still be resident.
    let reply = client.cmd(&["HLEN", "h"]);
    let meta_lost = is_storage_error(&reply);
    assert!(
        meta_lost || reply == R::Int(FIELDS as i64),
        "HLEN: {reply:?}"
    );

    let reply = client.cmd(&["FOREST.RANGE", "-", "+"]);
    assert!(is_storage_error(&reply), "FOREST.RANGE: {reply:?}");
    let reply = client.cmd(&["FOREST.RANGE", "-", "+", "KEYSONLY"]);
    assert!(is_storage_error(&reply), "FOREST.RANGE KEYSONLY: {reply:?}");

    // A transaction whose read failed writes nothing.
    assert_eq!(client.cmd(&["MULTI"]), R::Simple("OK".into()));
    assert_eq!(client.cmd(&["HGETALL", "h"]), R::Simple("QUEUED".into()));
    assert_eq!(
        client.cmd(&["HSET", "h", "in-exec", "v"]),
        R::Simple("QUEUED".into())
    );
    let reply = client.cmd(&["EXEC"]);
    assert!(is_storage_error(&reply), "EXEC: {reply:?}");
    // HSET reads the meta entry first: if it failed, the HSET must not start a new hash.
    let reply = client.cmd(&["HSET", "h", "new", "v"]);
    assert!(
        is_storage_error(&reply) || (!meta_lost && reply == R::Int(1)),
        "HSET: {reply:?}"
    );
    let added = i64::from(reply == R::Int(1));

    // The damage undone, everything reads back as written: no refused write happened.
    restore_lss(&saved);
    assert_eq!(client.cmd(&["HLEN", "h"]), R::Int(FIELDS as i64 + added));
    assert_eq!(client.cmd(&["HEXISTS", "h", "in-exec"]), R::Int(0));
    assert_eq!(client.cmd(&["HEXISTS", "h", "new"]), R::Int(added));
    assert_eq!(
        client.cmd(&["HGET", "h", "f00007"]),
        R::bulk(&value(7)),
        "HGET after the damage was undone"
    );
    let reply = client.cmd(&mget);
    let expected: Vec<R> = (0..STRINGS)
        .step_by(7)
        .map(|i| R::bulk(&value(i)))
        .collect();
    assert_eq!(reply, R::Arr(expected), "MGET after the damage was undone");
}

// Review rev-lists14. Goal: LRANGE, now written straight into the connection's output
// (`list::lrange_into`), answers the storage error whole when a page cannot be read, with
// nothing of a partial array before it: the replies around it in one pipeline parse and are
// right. Method: a long list and strings on a 16 KiB budget, pages evicted, every LSS record
// byte flipped; pipelines PING, LRANGE, PING; then the damage undone, the list reads whole.
#[test]
fn lrange_on_a_page_that_cannot_be_read_is_the_error_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let server = Running::start(&dir);
    let mut client = Client::connect(server.addr);
    let pushes: Vec<Vec<String>> = (0..FIELDS)
        .step_by(50)
        .map(|from| {
            let mut argv = vec!["RPUSH".to_string(), "l".to_string()];
            argv.extend((from..(from + 50).min(FIELDS)).map(value));
            argv
        })
        .collect();
    load_and_evict(&mut client, &pushes);
    let saved = damage_lss(&dir);
    let mut errors = 0;
    for (a, b, range) in [
        ("0", "-1", 0..FIELDS),
        ("0", "9", 0..10),
        ("-10", "-1", FIELDS - 10..FIELDS),
        ("100", "299", 100..300),
    ] {
        client.send(&[b"PING"]);
        client.send(&[b"LRANGE", b"l", a.as_bytes(), b.as_bytes()]);
        client.send(&[b"PING"]);
        assert_eq!(
            client.read(),
            R::Simple("PONG".into()),
            "before LRANGE {a} {b}"
        );
        let reply = client.read();
        if is_storage_error(&reply) {
            errors += 1;
        } else {
            let expected: Vec<R> = range.map(|i| R::bulk(&value(i))).collect();
            assert_eq!(reply, R::Arr(expected), "LRANGE l {a} {b}");
        }
        assert_eq!(
            client.read(),
            R::Simple("PONG".into()),
            "after LRANGE {a} {b}"
        );
    }
    assert!(errors > 0, "no LRANGE met the damage");
    restore_lss(&saved);
    let reply = client.cmd(&["LRANGE", "l", "0", "-1"]);
    let expected: Vec<R> = (0..FIELDS).map(|i| R::bulk(&value(i))).collect();
    assert_eq!(
        reply,
        R::Arr(expected),
        "LRANGE after the damage was undone"
    );
}
