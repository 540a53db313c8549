//! Key expiry through the network (issue 15 "Expiry" and "Tests"): the expiry commands
//! through the `redis` crate and as raw RESP bytes, deadlines across a clean restart and a
//! SIGKILL, and "expiry under load": many keys with short deadlines written while clients
//! read and scan, none returned after its deadline, the server killed mid-way and restarted,
//! expired keys gone and the others kept with their deadlines, and the key count and the
//! store's entries falling back once the background task has deleted the expired keys.
//!
//! Clock: the test and the server read the same system clock. A key's value is its own
//! deadline (ms since the Unix epoch), so a reader can tell a key returned after its
//! deadline: the deadline is at or before the moment the request was sent (a key is gone
//! from its deadline on, as in Redis). Nothing here depends on
//! how fast the machine is: slowness only makes more keys expire before they are read, and
//! the waits for the background task are bounded polls with generous limits.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{data_dir, expect_err, query, resp, roundtrip, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// How long the background task may take to delete every expired key before the test
/// fails (it needs well under a second for this test's keys on an idle machine).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

fn int(con: &mut redis::Connection, args: &[&[u8]]) -> i64 {
    match query(con, args) {
        Value::Int(n) => n,
        other => panic!("integer expected: {other:?}"),
    }
}

/// Checks TTL: `secs`, or a little less on a slow machine (TTL rounds the time left).
fn ttl_about(con: &mut redis::Connection, key: &[u8], secs: i64) {
    let ttl = int(con, &[b"TTL", key]);
    assert!(
        (secs - 5..=secs).contains(&ttl),
        "TTL {}: {ttl}, expected about {secs}",
        String::from_utf8_lossy(key)
    );
}

fn bulk(b: &[u8]) -> Value {
    Value::BulkString(b.to_vec())
}

/// A field of INFO's text.
fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}:\n{info}"))
        .trim()
        .to_string()
}

/// The store's entries (INFO forest `keys`): values, collection entries and deadline entries.
fn store_entries(con: &mut redis::Connection) -> u64 {
    info_field(con, "forest", "keys").parse().expect("number")
}

// Goal: the expiry commands answer through a client library as Redis documents them.
// Method: each command once through the `redis` crate, replies compared.
#[test]
fn expiry_commands_through_the_redis_crate() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    assert_eq!(query(c, &[b"SET", b"k", b"v", b"EX", b"100"]), Value::Okay);
    ttl_about(c, b"k", 100);
    let pttl = int(c, &[b"PTTL", b"k"]);
    assert!((90_000..=100_000).contains(&pttl), "{pttl}");
    assert_eq!(query(c, &[b"SETEX", b"s", b"50", b"v"]), Value::Okay);
    ttl_about(c, b"s", 50);
    assert_eq!(query(c, &[b"PSETEX", b"p", b"50000", b"v"]), Value::Okay);
    ttl_about(c, b"p", 50);
    assert_eq!(int(c, &[b"PERSIST", b"p"]), 1);
    assert_eq!(int(c, &[b"TTL", b"p"]), -1);
    assert_eq!(int(c, &[b"EXPIRE", b"p", b"30", b"NX"]), 1);
    assert_eq!(int(c, &[b"EXPIRE", b"p", b"20", b"GT"]), 0);
    assert_eq!(int(c, &[b"EXPIRE", b"p", b"20", b"LT"]), 1);
    ttl_about(c, b"p", 20);
    let at = now_ms() / 1000 + 1000;
    assert_eq!(int(c, &[b"EXPIREAT", b"p", at.to_string().as_bytes()]), 1);
    assert_eq!(int(c, &[b"EXPIRETIME", b"p"]), at as i64);
    assert_eq!(int(c, &[b"PEXPIRETIME", b"p"]), at as i64 * 1000);
    assert_eq!(query(c, &[b"GETEX", b"p", b"PERSIST"]), bulk(b"v"));
    assert_eq!(int(c, &[b"TTL", b"p"]), -1);
    assert_eq!(query(c, &[b"GETEX", b"p", b"PX", b"700000"]), bulk(b"v"));
    ttl_about(c, b"p", 700);
    assert_eq!(int(c, &[b"TTL", b"missing"]), -2);
    assert_eq!(int(c, &[b"EXPIRE", b"missing", b"10"]), 0);
    assert_eq!(int(c, &[b"RPUSH", b"list", b"a"]), 1);
    assert_eq!(int(c, &[b"PEXPIRE", b"list", b"60000"]), 1);
    ttl_about(c, b"list", 60);
    assert_eq!(int(c, &[b"EXPIRE", b"list", b"-1"]), 1);
    assert_eq!(int(c, &[b"EXISTS", b"list"]), 0);
    assert_eq!(
        expect_err(c, &[b"SETEX", b"k", b"0", b"v"]),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        expect_err(c, &[b"EXPIRE", b"k", b"1", b"NX", b"XX"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        expect_err(c, &[b"GETEX", b"k", b"EX", b"1", b"PERSIST"]),
        "ERR syntax error"
    );
    // redis-py's Lock: SET NX PX, then PEXPIRE to extend, DEL to release.
    assert_eq!(
        query(c, &[b"SET", b"lock", b"token", b"NX", b"PX", b"10000"]),
        Value::Okay
    );
    assert_eq!(
        query(c, &[b"SET", b"lock", b"other", b"NX", b"PX", b"10000"]),
        Value::Nil
    );
    assert_eq!(int(c, &[b"PEXPIRE", b"lock", b"20000"]), 1);
    assert_eq!(int(c, &[b"DEL", b"lock"]), 1);
    let keyspace = info_field(c, "keyspace", "db0");
    assert!(
        keyspace.starts_with("keys=3,expires=3,avg_ttl="),
        "{keyspace}"
    );
}

// Goal: the replies' bytes are Redis's, in RESP2. Method: raw RESP round trips.
#[test]
fn expiry_replies_as_raw_resp() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut s = server.raw();
    let s = &mut s;
    // 2100-01-01: exact replies whatever the time the test takes.
    roundtrip(
        s,
        &resp(&[b"SET", b"k", b"v", b"EXAT", b"4102444800"]),
        b"+OK\r\n",
    );
    roundtrip(s, &resp(&[b"EXPIRETIME", b"k"]), b":4102444800\r\n");
    roundtrip(s, &resp(&[b"PEXPIRETIME", b"k"]), b":4102444800000\r\n");
    roundtrip(s, &resp(&[b"TTL", b"nope"]), b":-2\r\n");
    roundtrip(s, &resp(&[b"PERSIST", b"k"]), b":1\r\n");
    roundtrip(s, &resp(&[b"PTTL", b"k"]), b":-1\r\n");
    roundtrip(s, &resp(&[b"GETEX", b"nope", b"EX", b"5"]), b"$-1\r\n");
    roundtrip(s, &resp(&[b"GETEX", b"k", b"EX", b"5"]), b"$1\r\nv\r\n");
    roundtrip(
        s,
        &resp(&[b"SET", b"k", b"v", b"PX", b"-5"]),
        b"-ERR invalid expire time in 'set' command\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"EXPIRE", b"k", b"10", b"BOGUS"]),
        b"-ERR Unsupported option BOGUS\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"PEXPIRE", b"k", b"1", b"GT", b"LT"]),
        b"-ERR GT and LT options at the same time are not compatible\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"EXPIRE", b"k", b"ten"]),
        b"-ERR value is not an integer or out of range\r\n",
    );
    roundtrip(
        s,
        &resp(&[b"SETEX", b"k", b"10"]),
        b"-ERR wrong number of arguments for 'setex' command\r\n",
    );
    roundtrip(s, &resp(&[b"EXPIREAT", b"k", b"1"]), b":1\r\n");
    roundtrip(s, &resp(&[b"GET", b"k"]), b"$-1\r\n");
    roundtrip(s, &resp(&[b"EXPIRETIME", b"k"]), b":-2\r\n");
}

// Goal: deadlines are durable and absolute (issue 15): after a clean restart a key keeps
// its PEXPIRETIME; after a SIGKILL, a key whose deadline passed while the server was down
// is gone and the others keep theirs. Method: keys with far and short deadlines in `group`
// durability (a reply means durable), a restart, then a kill and a wait past the short ones.
#[test]
fn deadlines_survive_restart_and_kill() {
    let (_tmp, dir) = data_dir();
    let far = now_ms() + 3_600_000;
    let short;
    {
        let mut server = Server::start(&dir, &["--durability", "group"]);
        let mut c = server.client();
        let far_text = far.to_string();
        assert_eq!(
            query(
                &mut c,
                &[b"SET", b"far", b"v", b"PXAT", far_text.as_bytes()]
            ),
            Value::Okay
        );
        assert_eq!(int(&mut c, &[b"SADD", b"set", b"m"]), 1);
        assert_eq!(int(&mut c, &[b"PEXPIREAT", b"set", far_text.as_bytes()]), 1);
        // SHUTDOWN answers by closing the connection.
        let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut c);
        assert!(server.wait_exit().success());
    }
    {
        let mut server = Server::start(&dir, &["--durability", "group"]);
        let mut c = server.client();
        assert_eq!(int(&mut c, &[b"PEXPIRETIME", b"far"]), far as i64);
        assert_eq!(int(&mut c, &[b"PEXPIRETIME", b"set"]), far as i64);
        short = now_ms() + 300;
        let short_text = short.to_string();
        assert_eq!(
            query(
                &mut c,
                &[b"SET", b"short", b"v", b"PXAT", short_text.as_bytes()]
            ),
            Value::Okay
        );
        assert_eq!(
            query(&mut c, &[b"HSET", b"hash", b"f", b"v"]),
            Value::Int(1)
        );
        assert_eq!(
            int(&mut c, &[b"PEXPIREAT", b"hash", short_text.as_bytes()]),
            1
        );
        server.kill();
    }
    while now_ms() <= short + 50 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = Server::start(&dir, &["--durability", "group"]);
    let mut c = server.client();
    assert_eq!(int(&mut c, &[b"EXISTS", b"short", b"hash"]), 0);
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
    assert_eq!(keys, vec![b"far".to_vec(), b"set".to_vec()]);
    assert_eq!(int(&mut c, &[b"PEXPIRETIME", b"far"]), far as i64);
    // The background task deletes them: far (one entry, its deadline in its value) and
    // set's type, member and deadline entries are all left.
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while store_entries(&mut c) != 1 + 3 {
        assert!(Instant::now() < deadline, "expired keys not deleted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "stats", "expired_keys"), "2");
    // DBSIZE once the task is done (while it deletes, DBSIZE's counts may be read between
    // a deletion's decision and its application: docs/PROTOCOL.md "Expiry").
    assert_eq!(int(&mut c, &[b"DBSIZE"]), 2);
}

/// What the writer of the load test did: every key it sent with its deadline, and how many
/// (a prefix, replies come in order) were acknowledged.
#[derive(Default)]
struct Written {
    sent: Vec<(u32, u64)>,
    acked: usize,
}

/// Keys of the load test.
fn load_key(i: u32) -> String {
    format!("load:{i:06}")
}

/// Writes keys in pipelines until `count` are written or the server is gone; a third of
/// them live an hour, the others 20 ms to 1.5 s.
fn write_load(
    con: &mut redis::Connection,
    first: u32,
    count: u32,
    written: &Mutex<Written>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut i = first;
    while i < first + count {
        let mut pipe = redis::pipe();
        let mut batch = Vec::new();
        for _ in 0..100 {
            let deadline = if i.is_multiple_of(3) {
                now_ms() + 3_600_000
            } else {
                now_ms() + rng.random_range(20..1500)
            };
            let d = deadline.to_string();
            pipe.cmd("SET").arg(load_key(i)).arg(&d).arg("PXAT").arg(&d);
            batch.push((i, deadline));
            i += 1;
        }
        written.lock().expect("log").sent.extend(&batch);
        match pipe.query::<Vec<Value>>(con) {
            Ok(replies) => {
                assert!(replies.iter().all(|r| *r == Value::Okay), "{replies:?}");
                written.lock().expect("log").acked += batch.len();
            }
            Err(_) => return,
        }
    }
}

/// Reads keys and ranges until `stop`, failing on any key returned after its deadline (its
/// value). Returns how many values it checked.
fn read_load(server_url: &str, stop: &AtomicBool, seed: u64, key_count: u32) -> u64 {
    let Ok(client) = redis::Client::open(server_url) else {
        return 0;
    };
    let Ok(mut con) = client.get_connection() else {
        return 0;
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut checked = 0u64;
    let check = |key: &[u8], value: &[u8], sent: u64| {
        let deadline: u64 = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("value of {key:?} is no deadline: {value:?}"));
        // The server's clock read at least `sent` when it answered, and a key is gone from
        // its deadline on.
        assert!(
            deadline > sent,
            "{} returned {} ms after its deadline",
            String::from_utf8_lossy(key),
            sent - deadline
        );
    };
    while !stop.load(Ordering::Relaxed) {
        let sent = now_ms();
        let result = match rng.random_range(0..4) {
            0 => {
                let keys: Vec<String> = (0..20)
                    .map(|_| load_key(rng.random_range(0..key_count)))
                    .collect();
                redis::cmd("MGET")
                    .arg(&keys)
                    .query::<Vec<Option<Vec<u8>>>>(&mut con)
                    .map(|values| {
                        for (k, v) in keys.iter().zip(values) {
                            if let Some(v) = v {
                                check(k.as_bytes(), &v, sent);
                                checked += 1;
                            }
                        }
                    })
            }
            1 | 2 => {
                let from = format!("[{}", load_key(rng.random_range(0..key_count)));
                let mut cmd = redis::cmd("FOREST.RANGE");
                if rng.random_bool(0.5) {
                    cmd.arg(&from).arg("+");
                } else {
                    cmd.arg("-").arg(&from).arg("REV");
                }
                cmd.arg("LIMIT").arg(rng.random_range(1..300));
                cmd.query::<Vec<Vec<u8>>>(&mut con).map(|flat| {
                    for pair in flat.chunks(2) {
                        check(&pair[0], &pair[1], sent);
                        checked += 1;
                    }
                })
            }
            _ => redis::cmd("SCAN")
                .arg(0)
                .arg("MATCH")
                .arg("load:*")
                .arg("COUNT")
                .arg(500)
                .query::<(String, Vec<Vec<u8>>)>(&mut con)
                .map(|(_, keys)| {
                    // SCAN returns keys only: each must still be unexpired on a GET after
                    // it (or gone).
                    for key in keys.iter().take(20) {
                        let t = now_ms();
                        if let Ok(Some(v)) = redis::cmd("GET")
                            .arg(key)
                            .query::<Option<Vec<u8>>>(&mut con)
                        {
                            check(key, &v, t);
                            checked += 1;
                        }
                    }
                }),
        };
        if result.is_err() {
            // The server was killed: reconnect until it is back or the test stops.
            std::thread::sleep(Duration::from_millis(50));
            match client.get_connection() {
                Ok(c) => con = c,
                Err(_) => continue,
            }
        }
    }
    checked
}

// Goal: expiry under load (issue 15 "Tests"): keys with short deadlines are written while
// clients read and scan; no read returns a key after its deadline; a SIGKILL mid-way and a
// restart keep the acknowledged long-lived keys with their deadlines and bring back no
// expired key; once the short deadlines have passed, the background task deletes every
// expired key, so DBSIZE, the store's entries and its memory fall back to the live keys.
// Method: a writer pipelines SET k <deadline> PXAT <deadline> (group durability: an
// acknowledged write is durable), readers run MGET, FOREST.RANGE in both orders and SCAN and
// check each value against the time they sent the request; the server is killed after a
// random share of the writes, restarted on the same directory, and the rest is written.
#[test]
fn expiry_under_load() {
    const KEYS_PER_PHASE: u32 = 3000;
    let (_tmp, dir) = data_dir();
    let seed = now_ms();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut server = Server::start(&dir, &["--durability", "group"]);
    let written = Arc::new(Mutex::new(Written::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let url = Arc::new(Mutex::new(server.url("")));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (stop, checked, url) = (Arc::clone(&stop), Arc::clone(&checked), Arc::clone(&url));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let at = url.lock().expect("url").clone();
                    let n = read_load(&at, &stop, seed + r, 2 * KEYS_PER_PHASE);
                    checked.fetch_add(n, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    // Phase 1, killed after a random delay.
    let writer = {
        let written = Arc::clone(&written);
        let mut con = server.client();
        std::thread::spawn(move || write_load(&mut con, 0, KEYS_PER_PHASE, &written, seed))
    };
    std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
    server.kill();
    writer.join().expect("writer");
    let (phase1_sent, phase1_acked) = {
        let w = written.lock().expect("log");
        (w.sent.clone(), w.acked)
    };
    let server = Server::start(&dir, &["--durability", "group"]);
    *url.lock().expect("url") = server.url("");
    let mut c = server.client();
    // After the restart: every acknowledged long-lived key is there with its deadline; no
    // key is there after its deadline.
    for (n, &(i, deadline)) in phase1_sent.iter().enumerate() {
        let key = load_key(i);
        let sent = now_ms();
        let got: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut c).expect("GET");
        match got {
            Some(v) => {
                assert_eq!(v, deadline.to_string().into_bytes(), "{key}");
                assert!(deadline > sent, "{key} back after its deadline");
                let at = int(&mut c, &[b"PEXPIRETIME", key.as_bytes()]);
                assert!(at == deadline as i64 || at == -2, "{key}: deadline {at}");
            }
            None => {
                let after = now_ms();
                if n < phase1_acked && deadline > after {
                    let ttl = int(&mut c, &[b"PEXPIRETIME", key.as_bytes()]);
                    let range = query(
                        &mut c,
                        &[
                            b"FOREST.RANGE",
                            format!("[{key}").as_bytes(),
                            b"+",
                            b"LIMIT",
                            b"2",
                        ],
                    );
                    panic!(
                        "{key}: acknowledged, deadline {deadline} not passed (now {after}, sent {sent}), yet gone after the kill; \
                         PEXPIRETIME {ttl}, range {range:?}, {} acked of {}",
                        phase1_acked, phase1_sent.len()
                    );
                }
            }
        }
    }
    // Phase 2 on the restarted server, readers still running.
    {
        let mut con = server.client();
        write_load(&mut con, KEYS_PER_PHASE, KEYS_PER_PHASE, &written, seed + 7);
    }
    let peak_entries = store_entries(&mut c);
    let peak_memory: u64 = info_field(&mut c, "memory", "used_memory")
        .parse()
        .expect("number");
    // Every short deadline passes within 1.5 s of its write; then the task drains.
    let last_short = written
        .lock()
        .expect("log")
        .sent
        .iter()
        .map(|&(_, d)| d)
        .filter(|&d| d < now_ms() + 1_000_000)
        .max()
        .unwrap_or(0);
    while now_ms() <= last_short {
        std::thread::sleep(Duration::from_millis(20));
    }
    let keys_sent = now_ms();
    let live: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("load:*")
        .query(&mut c)
        .expect("KEYS");
    for key in &live {
        let i: u32 = String::from_utf8_lossy(&key[5..])
            .parse()
            .expect("key number");
        if !i.is_multiple_of(3) {
            let at = int(&mut c, &[b"PEXPIRETIME", key]);
            let value = query(&mut c, &[b"GET", key]);
            let sent: Vec<(u32, u64)> = written
                .lock()
                .expect("log")
                .sent
                .iter()
                .copied()
                .filter(|&(j, _)| j == i)
                .collect();
            panic!(
                "{}: a short-lived key is left: PEXPIRETIME {at}, value {value:?}, KEYS sent at {keys_sent}, last short {last_short}, now {}, sent {sent:?}, phase 1 acked {phase1_acked} of {}",
                String::from_utf8_lossy(key),
                now_ms(),
                phase1_sent.len()
            );
        }
    }
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        // Each live key is one entry, its deadline in its value.
        let entries = store_entries(&mut c);
        if entries == live.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{entries} store entries for {} live keys",
            live.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dbsize = int(&mut c, &[b"DBSIZE"]);
    if dbsize != live.len() as i64 {
        let again: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
        panic!(
            "DBSIZE {dbsize}, KEYS {} then {}; {}; forest keys {}, collection_entries {}",
            live.len(),
            again.len(),
            info_field(&mut c, "keyspace", "db0"),
            store_entries(&mut c),
            info_field(&mut c, "forest", "collection_entries")
        );
    }
    let memory: u64 = info_field(&mut c, "memory", "used_memory")
        .parse()
        .expect("number");
    println!(
        "entries {peak_entries} -> {}, memory {peak_memory} -> {memory}",
        2 * live.len()
    );
    assert!(peak_entries > 2 * live.len() as u64);
    assert!(
        memory <= peak_memory,
        "memory grew: {peak_memory} -> {memory}"
    );
    let expired: u64 = info_field(&mut c, "stats", "expired_keys")
        .parse()
        .expect("number");
    assert!(expired > 0);
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    let checked = checked.load(Ordering::Relaxed);
    println!("{checked} values checked by readers; {expired} keys expired after the restart");
    assert!(checked > 0, "the readers read nothing");
}
