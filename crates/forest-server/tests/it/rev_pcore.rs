//! Skeptic review rev-pcore (session 14, branch h-pcore): tests that fail on the branch,
//! each `#[ignore]`d with its finding. Run one: `cargo test -p forest-server --test it --
//! rev_pcore::NAME --ignored --exact` (names below).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{threads, Client, Running, R};
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

/// The reviewer's server: 20 s reads.
fn client(server: &Running) -> Client {
    server.client_timing_out(Duration::from_secs(20))
}

fn until_waiting(writer: &mut Client, key: &str) {
    common::until_waiting(
        writer,
        key,
        "rev-pcore",
        Duration::from_millis(300),
        Duration::from_secs(20),
    );
}

/// A script that writes `w` and then runs for about `ms` milliseconds (it ends by itself,
/// well within the default 5 s busy-reply-threshold), returning 1.
fn short_script(ms: u64) -> String {
    format!(
        "redis.call('set', 'w', 1) \
         local function now() local t = redis.call('time') \
           return tonumber(t[1]) * 1000000 + tonumber(t[2]) end \
         local stop = now() + {us} \
         while now() < stop do end \
         return 1",
        us = ms * 1000
    )
}

// Finding F1. Goal: SHUTDOWN (no NOSAVE) sent while a script runs within its time limit
// behaves as in Redis: Redis serves no other client while a script runs, so the SHUTDOWN
// is processed once the script has ended (Redis answers BUSY only to a script past
// busy-reply-threshold, `scriptIsTimedout()`; forest stops scripts there, so never): no
// reply, the server stops, and the script's write is kept.
// Method: a script that writes and ends by itself after ~1.5 s; once a SET waits for its
// stripes, SHUTDOWN from another connection. On h-pcore it answers -BUSY and the server
// keeps running (both models).
#[test]
fn rev_f1_shutdown_during_a_short_script_stops_after_it() {
    let mut failures = Vec::new();
    for (io, threads) in [(IoModel::PerCore, 1), (IoModel::Threads, 2)] {
        let what = format!("{io}");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Running::start_with(dir.path(), io, threads);
        let mut script = client(&server);
        let mut other = client(&server);
        let mut writer = client(&server);
        let body = short_script(1500);
        common::send(&mut script, &["EVAL", &body, "0"]);
        until_waiting(&mut writer, "x");
        common::send(&mut other, &["SHUTDOWN"]);
        if let Some(reply) = other.try_read() {
            failures.push(format!(
                "{what}: SHUTDOWN answered {reply:?} while a short script ran"
            ));
            continue;
        }
        assert!(server.ended(), "{what}: the server did not stop");
        drop(server);
        let server = Running::start_with(dir.path(), io, threads);
        assert_eq!(
            client(&server).cmd(&["EXISTS", "w"]),
            R::Int(1),
            "{what}: the script ended before the stop: its write stands"
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Finding F1 (second part). Goal: SHUTDOWN stops a server whose clients run short scripts
// back to back (a job queue, a rate limiter), as Redis does at the next command boundary.
// Method: 4 clients each loop `EVAL` of a ~5 ms script; another client sends SHUTDOWN up
// to 20 times, 50 ms apart: it must not be answered (the server stops at the first). On
// h-pcore `Scripts::busy` counts a script from its `hold()` on, so with scripts in flight
// nearly every SHUTDOWN is answered BUSY (per-core; threads alike).
#[test]
fn rev_f1_shutdown_stops_a_server_running_short_scripts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Running::start_with(dir.path(), IoModel::PerCore, 2);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = short_script(5);
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let mut c = client(&server);
            let stop = Arc::clone(&stop);
            let body = body.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    common::send(&mut c, &["EVAL", &body, "0"]);
                    if c.try_read().is_none() {
                        return;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut other = client(&server);
    let mut busy = 0;
    for _ in 0..20 {
        common::send(&mut other, &["SHUTDOWN"]);
        match other.try_read() {
            None => break,
            Some(R::Err(e)) if e.starts_with("BUSY") => busy += 1,
            Some(reply) => panic!("SHUTDOWN: {reply:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ended = server.ended();
    for l in loops {
        let _ = l.join();
    }
    assert!(
        busy == 0 && ended,
        "SHUTDOWN answered BUSY {busy} times of {} (server stopped: {ended})",
        busy + usize::from(ended)
    );
}

// Finding F5. Goal: a stop by signal (SIGTERM, the server's handle) while a script runs
// within its time limit lets it finish, as Redis does (its SIGTERM handler only sets
// `shutdown_asap`, acted on once the script has returned; `whileBlockedCron` exits early
// only while loading): the script's client gets its reply and its write survives the
// restart. h-pcore's `Scripts::stop` kills it instead, its writes dropped, and its client
// is told "Script killed by user with SCRIPT KILL" (no user killed it); the doc comment
// on `Scripts::stop` says Redis exits under a running script the same way.
// Method: a script that writes and ends by itself after ~1.5 s; once a SET waits for its
// stripes, the stop is requested through the handle; then a restart. Both models.
#[test]
fn rev_f5_a_stop_by_signal_lets_a_short_script_finish() {
    let mut failures = Vec::new();
    for (io, threads) in [(IoModel::PerCore, 1), (IoModel::Threads, 2)] {
        let what = format!("{io}");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Running::start_with(dir.path(), io, threads);
        let mut script = client(&server);
        let mut writer = client(&server);
        let body = short_script(1500);
        common::send(&mut script, &["EVAL", &body, "0"]);
        until_waiting(&mut writer, "x");
        server.request_stop();
        assert!(server.ended(), "{what}: the server did not stop");
        let reply = script.try_read();
        if reply != Some(R::Int(1)) {
            failures.push(format!("{what}: the script's reply {reply:?}"));
        }
        drop(server);
        let server = Running::start_with(dir.path(), io, threads);
        let exists = client(&server).cmd(&["EXISTS", "w"]);
        if exists != R::Int(1) {
            failures.push(format!("{what}: EXISTS w after the restart: {exists:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Finding F2. Goal: the claim "no thread per waiting command" holds for EVAL too: EVALs
// that waited (asynchronously) for a running script do not each take a blocking thread
// when it ends.
// Method: one per-core runtime; a looping script (time limit 20 s); 600 other
// connections each send `EVAL "return 1" 0`, which waits for the script's end on the
// runtime; SCRIPT KILL; every EVAL answers 1; the process must not have grown by a
// twentieth as many threads as EVALs (a fix runs them on a few; tokio keeps idle blocking
// threads 10 s, so the count after the replies shows how many ran at once). On h-pcore
// every waiting EVAL wakes on the same `released()` signal, and those that run before
// the first offloaded one marks `holding` again are each sent to `spawn_blocking`.
#[test]
fn rev_f2_evals_waiting_for_a_script_take_no_thread_each() {
    // On the branch, 600 EVALs: +15, +43, +52, +111 threads in four runs (timing: it fails
    // in most runs, not all); 300: +12 to +47. REV_EVALS sets the count.
    let evals: usize = std::env::var("REV_EVALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start_with(dir.path(), IoModel::PerCore, 1);
    let mut script = client(&server);
    let mut writer = client(&server);
    let mut killer = client(&server);
    assert_eq!(
        script.cmd(&["CONFIG", "SET", "busy-reply-threshold", "20000"]),
        R::Simple("OK".into())
    );
    common::send(&mut script, &["EVAL", "while true do end", "0"]);
    until_waiting(&mut writer, "w");
    let before = threads();
    let mut waiting_evals: Vec<Client> = (0..evals)
        .map(|_| {
            let mut c = client(&server);
            common::send(&mut c, &["EVAL", "return 1", "0"]);
            c
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let waiting = threads().saturating_sub(before);
    assert_eq!(killer.cmd(&["SCRIPT", "KILL"]), R::Simple("OK".into()));
    let _ = script.read();
    for c in &mut waiting_evals {
        assert_eq!(c.read(), R::Int(1));
    }
    let grown = threads().saturating_sub(before);
    eprintln!("threads: +{waiting} while waiting, +{grown} after the EVALs ran");
    assert!(
        grown < evals / 20,
        "{grown} more threads for {evals} EVALs that waited for a script"
    );
}

// Finding F3. Goal: SHUTDOWN SAVE NOSAVE is Redis's syntax error (`shutdownCommand`:
// "Illegal combo"), not a stop.
// Method: the command on an idle server; on h-pcore the connection closes and the server
// stops (SAVE wins; NOSAVE is now parsed, but the combination not refused).
#[test]
fn rev_f3_shutdown_save_nosave_is_a_syntax_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start_with(dir.path(), IoModel::PerCore, 1);
    let mut c = client(&server);
    assert_eq!(
        c.try_read_after(&["SHUTDOWN", "SAVE", "NOSAVE"]),
        Some(R::Err("ERR syntax error".into()))
    );
}

trait SendRead {
    fn try_read_after(&mut self, argv: &[&str]) -> Option<R>;
}

impl SendRead for Client {
    fn try_read_after(&mut self, argv: &[&str]) -> Option<R> {
        common::send(self, argv);
        self.try_read()
    }
}

/// VmRSS of this process, in KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

// Probe (passes; not a finding): 1000 idle connections under the default model, and a
// BLPOP served by a script's LPUSH under `sync` with a runtime's waiter.
#[test]
#[ignore = "rev: probe, passes (idle connections' cost; BLPOP woken by a script under sync)"]
fn rev_probe_idle_connections_and_blpop_after_a_script() {
    for io in [IoModel::PerCore, IoModel::Threads] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start_with(dir.path(), io, 2);
        let mut first = client(&server);
        assert_eq!(first.cmd(&["PING"]), R::Simple("PONG".into()));
        let (t0, m0) = (threads(), rss_kib());
        let mut idle: Vec<Client> = (0..1000).map(|_| client(&server)).collect();
        for c in idle.iter_mut().step_by(100) {
            assert_eq!(c.cmd(&["PING"]), R::Simple("PONG".into()));
        }
        std::thread::sleep(Duration::from_millis(500));
        eprintln!(
            "{io}: 1000 idle connections: +{} threads, +{} KiB RSS",
            threads().saturating_sub(t0),
            rss_kib().saturating_sub(m0)
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::open(Config {
        dir: dir.path().to_path_buf(),
        port: 0,
        io: IoModel::PerCore,
        threads: 1,
        durability: Durability::Sync,
        ..Config::default()
    })
    .expect("open");
    let addr = server.local_addr().expect("bound");
    let shutdown = server.shutdown_handle();
    let thread = std::thread::spawn(move || server.run());
    let mut waiter = Client::connect(addr);
    let mut script = Client::connect(addr);
    common::send(&mut waiter, &["BLPOP", "q", "0"]);
    std::thread::sleep(Duration::from_millis(200));
    let body = "redis.call('lpush', 'q', 'a') redis.call('set', 'after', 1) \
        local function now() local t = redis.call('time') \
        return tonumber(t[1]) * 1000000 + tonumber(t[2]) end \
        local stop = now() + 500000 while now() < stop do end return 1";
    assert_eq!(script.cmd(&["EVAL", body, "0"]), R::Int(1));
    let got = waiter.read().items();
    assert_eq!(got, vec![R::bulk("q"), R::bulk("a")]);
    assert_eq!(waiter.cmd(&["GET", "after"]), R::bulk("1"));
    assert_eq!(waiter.cmd(&["LLEN", "q"]), R::Int(0));
    shutdown.request(false);
    let _ = thread.join();
}

// Probe (passes on h-pcore; kept as a stress check of the gate/`released()` handshake):
// 2 runtimes, `sync` durability; 12 clients mix INCR, EVAL (INCR inside), MULTI/EXEC with
// an EVAL, WATCH'd GET/MULTI/SET/EXEC, BLPOP/LPUSH pairs and PING, for ~6 s. Every client
// must finish (no lost wake-up: each read has a 20 s timeout) and the counter must equal
// the increments acknowledged (no lost or torn update).
#[test]
#[ignore = "rev: probe, passes (mixed scripts/transactions/blocking stress under per-core)"]
fn rev_probe_mixed_stress_under_per_core() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::open(Config {
        dir: dir.path().to_path_buf(),
        port: 0,
        io: IoModel::PerCore,
        threads: 2,
        durability: Durability::Sync,
        ..Config::default()
    })
    .expect("open");
    let addr = server.local_addr().expect("bound");
    let shutdown = server.shutdown_handle();
    let thread = std::thread::spawn(move || server.run());
    let deadline = Instant::now() + Duration::from_secs(6);
    let workers: Vec<_> = (0..12)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut acked = 0i64;
                let mut i = 0u64;
                while Instant::now() < deadline {
                    i += 1;
                    match (w + i as usize) % 6 {
                        0 => {
                            assert!(matches!(c.cmd(&["INCR", "n"]), R::Int(_)));
                            acked += 1;
                        }
                        1 => {
                            let r = c.cmd(&[
                                "EVAL",
                                "local v = redis.call('incr', KEYS[1]) for i=1,20000 do end return v",
                                "1",
                                "n",
                            ]);
                            assert!(matches!(r, R::Int(_)), "{r:?}");
                            acked += 1;
                        }
                        2 => {
                            assert_eq!(c.cmd(&["MULTI"]), R::Simple("OK".into()));
                            c.cmd(&["INCR", "n"]);
                            c.cmd(&["EVAL", "return redis.call('incr', 'n')", "0"]);
                            let r = c.cmd(&["EXEC"]).items();
                            assert_eq!(r.len(), 2, "{r:?}");
                            acked += 2;
                        }
                        3 => {
                            let key = format!("wk{}", w % 3);
                            c.cmd(&["WATCH", &key]);
                            let v = match c.cmd(&["GET", &key]) {
                                R::Bulk(b) => String::from_utf8(b).unwrap().parse::<i64>().unwrap(),
                                _ => 0,
                            };
                            c.cmd(&["MULTI"]);
                            c.cmd(&["SET", &key, &(v + 1).to_string()]);
                            let _ = c.cmd(&["EXEC"]);
                        }
                        4 => {
                            let q = format!("q{w}");
                            c.cmd(&["LPUSH", &q, "x"]);
                            let r = c.cmd(&["BLPOP", &q, "5"]).items();
                            assert_eq!(r.len(), 2);
                        }
                        _ => assert_eq!(c.cmd(&["PING"]), R::Simple("PONG".into())),
                    }
                }
                acked
            })
        })
        .collect();
    let acked: i64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    let mut c = Client::connect(addr);
    assert_eq!(c.cmd(&["GET", "n"]), R::bulk(&acked.to_string()));
    shutdown.request(false);
    let _ = thread.join();
}
