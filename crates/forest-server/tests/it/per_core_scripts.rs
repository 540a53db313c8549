//! A long script on the per-core I/O model (issue 15; review rev-io F1): it runs off its
//! runtime's thread, so the other connections of that runtime are served meanwhile (PING,
//! SCRIPT KILL), and a write of another runtime that waits for the script's stripe locks
//! does not stall that runtime either.
//!
//! Which runtime a connection lands on: the acceptor gives each new connection to the
//! runtime serving the fewest, round-robin on a tie (`per_core` `accept_loop`), so with two
//! runtimes and connections opened one after the other the first, third, ... share one and
//! the second, fourth, ... the other. With one runtime every connection shares it.

use crate::common;

use std::time::{Duration, Instant};

use common::{threads, Client, Running, R};
use forest_server::IoModel;

/// How long a PING or SCRIPT KILL may take while a script runs (it is answered at once; the
/// slack is for a loaded machine). Before the fix it waited for the script.
const ANSWER_MAX: Duration = Duration::from_secs(2);
/// How long a write must stay unanswered to show that it waits for the script's locks.
const WAITING: Duration = Duration::from_millis(300);

/// A client whose reads give up after [`ANSWER_MAX`] and a little more (None then).
fn client(server: &Running) -> Client {
    server.client_timing_out(ANSWER_MAX + Duration::from_secs(3))
}

/// Sends `argv` and returns its reply and how long it took; fails the test if none came.
fn timed(c: &mut Client, argv: &[&str], what: &str) -> (R, Duration) {
    let started = Instant::now();
    common::send(c, argv);
    let reply = c
        .try_read()
        .unwrap_or_else(|| panic!("{what}: {argv:?} unanswered while a script ran"));
    (reply, started.elapsed())
}

/// Sends `SET key v` on `writer` until one stays unanswered for [`WAITING`]: it waits for
/// the stripe locks of the script that started meanwhile.
fn until_waiting(writer: &mut Client, key: &str, what: &str) {
    common::until_waiting(
        writer,
        key,
        what,
        WAITING,
        ANSWER_MAX + Duration::from_secs(3),
    );
}

/// SCRIPT KILL on `killer` until OK (NOTBUSY: the script has not started), each answered
/// within [`ANSWER_MAX`].
fn kill(killer: &mut Client, what: &str) {
    let started = Instant::now();
    loop {
        let (reply, took) = timed(killer, &["SCRIPT", "KILL"], what);
        assert!(took < ANSWER_MAX, "{what}: SCRIPT KILL took {took:?}");
        match reply {
            R::Simple(ok) if ok == "OK" => return,
            R::Err(e) if e.starts_with("NOTBUSY") => {}
            other => panic!("{what}: SCRIPT KILL: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: the script never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn killed(reply: &R) -> bool {
    matches!(reply, R::Err(e) if e.starts_with("ERR Script killed by user with SCRIPT KILL"))
}

// Goal: while a script runs on a per-core runtime (alone, or one of two), the connections
// of its runtime and those of a runtime whose write waits for the script's stripe locks are
// served: PING at once, SCRIPT KILL answers OK and stops the script, whose client gets
// Redis's "Script killed by user" error; the waiting write then goes through. Also when the
// script is pipelined between other commands, and when EXEC runs it.
// Method: connections opened in order (see the module doc): `script` and `killer` share a
// runtime, `writer` and `pinger` share the other one (all one with one runtime). A script
// loops (time limit 20 s); the writer's SET waits for its stripes; PING and SCRIPT KILL
// must each answer within 2 s. Before the fix the killer and the pinger waited for the
// script (the killer got NOTBUSY after the time limit).
#[test]
fn a_running_script_leaves_the_runtimes_serving() {
    // The threads model passes the same checks (each connection its own thread); left
    // out to spare CI the spinning script's CPU (scripting.rs covers its SCRIPT KILL).
    for threads in [1, 2] {
        let io = IoModel::PerCore;
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Running::start_with(dir.path(), io, threads);
        let mut script = client(&server);
        let mut writer = client(&server);
        let mut killer = client(&server);
        let mut pinger = client(&server);
        assert_eq!(
            script.cmd(&["CONFIG", "SET", "busy-reply-threshold", "20000"]),
            R::Simple("OK".into())
        );
        assert_eq!(script.cmd(&["SET", "k", "before"]), R::Simple("OK".into()));
        for round in ["pipelined", "exec"] {
            let what = format!("{io} threads={threads} {round}");
            let started = Instant::now();
            match round {
                "pipelined" => {
                    script.send_raw(b"PING\r\nEVAL \"while true do end\" 0\r\nGET k\r\n")
                }
                _ => script.send_raw(b"MULTI\r\nEVAL \"while true do end\" 0\r\nEXEC\r\n"),
            }
            until_waiting(&mut writer, &format!("w-{round}"), &what);
            for _ in 0..3 {
                let (reply, took) = timed(&mut pinger, &["PING"], &what);
                assert_eq!(reply, R::Simple("PONG".into()), "{what}");
                assert!(took < ANSWER_MAX, "{what}: PING took {took:?}");
            }
            // The PINGs were answered while the script held the stripes: the write still
            // waits for them (review rev-pcscript F3: `until_waiting` alone is timing-based).
            writer
                .stream
                .set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            assert_eq!(
                writer.try_read(),
                None,
                "{what}: the script no longer held the stripes"
            );
            writer
                .stream
                .set_read_timeout(Some(ANSWER_MAX + Duration::from_secs(3)))
                .expect("timeout");
            kill(&mut killer, &what);
            match round {
                "pipelined" => {
                    assert_eq!(script.read(), R::Simple("PONG".into()), "{what}");
                    let reply = script.read();
                    assert!(killed(&reply), "{what}: {reply:?}");
                    assert_eq!(script.read(), R::bulk("before"), "{what}");
                }
                _ => {
                    assert_eq!(script.read(), R::Simple("OK".into()), "{what}");
                    assert_eq!(script.read(), R::Simple("QUEUED".into()), "{what}");
                    let replies = script.read().items();
                    assert!(
                        replies.len() == 1 && killed(&replies[0]),
                        "{what}: {replies:?}"
                    );
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{what}: the script was not stopped by SCRIPT KILL"
            );
            // The write that waited for the script's stripes went through after it.
            assert_eq!(writer.read(), R::Simple("OK".into()), "{what}");
            assert_eq!(
                writer.cmd(&["GET", &format!("w-{round}")]),
                R::bulk("v"),
                "{what}"
            );
            assert_eq!(killer.cmd(&["PING"]), R::Simple("PONG".into()), "{what}");
        }
    }
}

// Goal (review rev-pcscript F1; session 14, the thread pile-up): SCRIPT KILL from the
// script's runtime is answered while the script runs even when many connections of that
// runtime write meanwhile, and the waiting writes take no thread each.
// Method: one runtime; a looping script (time limit 20 s); `writers` other connections each
// send a SET, which waits for the script's stripe locks; then SCRIPT KILL must answer within
// 2 s, and each SET goes through after the script. Session 13 sent every command to a
// blocking thread while a script held the stripes: with 600 writers the SETs took all 512 of
// tokio's blocking pool (SCRIPT KILL queued behind them until then; it runs inline since).
// Now a waiting SET awaits the script's end on its runtime: the process must not grow by
// half as many threads as writers (other tests' servers run meanwhile; it grew by 512).
fn script_kill_with_writers_waiting(writers: usize) {
    let what = format!("{writers} writers");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start_with(dir.path(), IoModel::PerCore, 1);
    let mut script = client(&server);
    let mut writer = client(&server);
    let mut killer = client(&server);
    assert_eq!(
        script.cmd(&["CONFIG", "SET", "busy-reply-threshold", "20000"]),
        R::Simple("OK".into())
    );
    script.send_raw(b"EVAL \"while true do end\" 0\r\n");
    until_waiting(&mut writer, "w", &what);
    let before = threads();
    let mut waiting: Vec<Client> = (0..writers)
        .map(|i| {
            let mut c = client(&server);
            common::send(&mut c, &["SET", &format!("k{i}"), "v"]);
            c
        })
        .collect();
    // Each SET reaches the runtime (and, before the fix, a blocking thread).
    std::thread::sleep(Duration::from_secs(2));
    let grown = threads().saturating_sub(before);
    assert!(
        grown < writers / 2,
        "{what}: {grown} more threads while the writers wait for the script"
    );
    kill(&mut killer, &what);
    let reply = script.read();
    assert!(killed(&reply), "{what}: {reply:?}");
    for c in &mut waiting {
        assert_eq!(c.read(), R::Simple("OK".into()), "{what}");
    }
}

#[test]
fn script_kill_is_answered_while_many_writers_wait_for_the_script() {
    script_kill_with_writers_waiting(600);
}

// Goal (review rev-pcscript F4; rev-pcore F1, F5): SHUTDOWN NOSAVE while a script runs
// stops the script (its write dropped) and the server, and waits for no script's time
// limit. (SHUTDOWN, SHUTDOWN SAVE and a signal let the script end first: rev_pcore's
// tests.) Both I/O models.
// Method: a script that writes, then loops (time limit 60 s); from another connection
// (once a SET waits for the script's stripes) SHUTDOWN NOSAVE: the server must end within
// 10 s, and after a restart the script's write is absent. Before rev-pcscript F4's fix the
// stop waited for the script's time limit (SHUTDOWN NOSAVE from a per-core runtime waited
// for the script's stripes).
#[test]
fn shutdown_nosave_during_a_script_stops_it() {
    for (io, threads) in [(IoModel::PerCore, 1), (IoModel::Threads, 2)] {
        let what = format!("{io}");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Running::start_with(dir.path(), io, threads);
        let mut script = client(&server);
        let mut other = client(&server);
        assert_eq!(
            script.cmd(&["CONFIG", "SET", "busy-reply-threshold", "60000"]),
            R::Simple("OK".into())
        );
        script.send_raw(b"EVAL \"redis.call('set', 'w', 1) while true do end\" 0\r\n");
        // The script holds the stripes once a SET waits for them.
        let mut writer = client(&server);
        until_waiting(&mut writer, "x", &what);
        let stop_started = Instant::now();
        common::send(&mut other, &["SHUTDOWN", "NOSAVE"]);
        assert_eq!(other.try_read(), None, "{what}: SHUTDOWN NOSAVE answered");
        let left = Duration::from_secs(10).saturating_sub(stop_started.elapsed());
        let run = server
            .run_result(left)
            .unwrap_or_else(|| panic!("{what}: the stop waited for the script"));
        run.expect("server run");
        match script.try_read() {
            None => {}
            Some(reply) => assert!(
                matches!(&reply, R::Err(e) if e.starts_with("ERR Script stopped: the server is shutting down")),
                "{what}: the script's reply {reply:?}"
            ),
        }
        drop(server);
        let server = Running::start_with(dir.path(), io, threads);
        assert_eq!(
            client(&server).cmd(&["EXISTS", "w"]),
            R::Int(0),
            "{what}: the stopped script's write"
        );
    }
}
