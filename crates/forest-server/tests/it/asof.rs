//! The `ASOF.*` commands over a socket (docs/PROTOCOL.md "Reads as of a time"): each command
//! on a `tsbtree` store, strings with deadlines, a restart, and the errors.

use crate::common;

use std::sync::Arc;
use std::thread::JoinHandle;

use common::{Client, R};
use forest_server::shutdown::Shutdown;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

struct Running {
    client: Client,
    shutdown: Arc<Shutdown>,
    thread: Option<JoinHandle<forest_core::Result<()>>>,
}

impl Running {
    fn start(dir: &std::path::Path, engine: &str) -> Running {
        let config = Config {
            dir: dir.to_path_buf(),
            port: 0,
            io: IoModel::Threads,
            threads: 2,
            engine: Some(engine.to_string()),
            durability: Durability::Group,
            ..Config::default()
        };
        let server = Server::open(config).expect("open");
        let addr = server.local_addr().expect("bound");
        let shutdown = server.shutdown_handle();
        let thread = std::thread::spawn(move || server.run());
        Running {
            client: Client::connect(addr),
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

fn int(r: &R) -> i64 {
    match r {
        R::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn now(c: &mut Client) -> String {
    int(&c.cmd(&["ASOF.NOW"])).to_string()
}

fn bulks(items: &[&str]) -> R {
    R::Arr(items.iter().map(|s| R::bulk(s)).collect())
}

fn err_text(r: R) -> String {
    match r {
        R::Err(e) => e,
        other => panic!("not an error: {other:?}"),
    }
}

// Goal: each ASOF command answers as documented: gets, ranges (bounds, REV, LIMIT with
// continuation, KEYSONLY), counts and histories at past times, RFC 3339 times, and the same
// answers after a restart. Method: writes between ASOF.NOW readings, then every command at
// each reading.
#[test]
fn asof_commands_read_the_past() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (t0, t1, t2, t3);
    {
        let mut s = Running::start(dir.path(), "tsbtree");
        let c = &mut s.client;
        t0 = now(c);
        assert_eq!(
            c.cmd(&["MSET", "a", "1", "b", "2", "c", "3"]),
            R::Simple("OK".into())
        );
        t1 = now(c);
        c.cmd(&["SET", "b", "20"]);
        c.cmd(&["DEL", "a"]);
        c.cmd(&["SET", "d", "4"]);
        t2 = now(c);
        c.cmd(&["SET", "b", "200"]);
        t3 = now(c);
        assert!(t0 < t1 && t1 < t2 && t2 < t3, "{t0} {t1} {t2} {t3}");
    }
    let mut s = Running::start(dir.path(), "tsbtree");
    let c = &mut s.client;
    assert_eq!(c.cmd(&["ASOF.GET", "a", &t0]), R::Nil);
    assert_eq!(c.cmd(&["ASOF.GET", "a", &t1]), R::bulk("1"));
    assert_eq!(c.cmd(&["ASOF.GET", "a", &t2]), R::Nil);
    assert_eq!(c.cmd(&["ASOF.GET", "b", &t2]), R::bulk("20"));
    assert_eq!(c.cmd(&["ASOF.GET", "b", &t3]), R::bulk("200"));
    assert_eq!(c.cmd(&["ASOF.GET", "a", "1970-01-01T00:00:01Z"]), R::Nil);

    assert_eq!(c.cmd(&["ASOF.RANGE", "-", "+", &t0]), bulks(&[]));
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "-", "+", &t1]),
        bulks(&["a", "1", "b", "2", "c", "3"])
    );
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "-", "+", &t2, "REV", "KEYSONLY"]),
        bulks(&["d", "c", "b"])
    );
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "-", "+", &t2, "LIMIT", "2"]),
        bulks(&["b", "20", "c", "3"])
    );
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "(c", "+", &t2, "LIMIT", "2"]),
        bulks(&["d", "4"])
    );
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "[a", "(c", &t1, "KEYSONLY"]),
        bulks(&["a", "b"])
    );
    assert_eq!(c.cmd(&["ASOF.RANGE", "+", "-", &t1]), bulks(&[]));
    assert_eq!(int(&c.cmd(&["ASOF.COUNT", "-", "+", &t1])), 3);
    assert_eq!(int(&c.cmd(&["ASOF.COUNT", "(a", "[c", &t2])), 2);
    assert_eq!(int(&c.cmd(&["ASOF.COUNT", "-", "+", &t0])), 0);

    let history = c.cmd(&["ASOF.HISTORY", "b"]).items();
    let values: Vec<R> = history.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(values, vec![R::bulk("2"), R::bulk("20"), R::bulk("200")]);
    let stamps: Vec<i64> = history.iter().step_by(2).map(int).collect();
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");
    assert_eq!(
        c.cmd(&["ASOF.HISTORY", "b", "REV", "LIMIT", "1"]).items()[1],
        R::bulk("200")
    );
    let window = c
        .cmd(&["ASOF.HISTORY", "b", "FROM", &t1, "TO", &t2])
        .items();
    assert_eq!(window.len(), 2, "{window:?}");
    assert_eq!(window[1], R::bulk("20"));
    let a = c.cmd(&["ASOF.HISTORY", "a"]).items();
    assert_eq!(a.len(), 4);
    assert_eq!((a[1].clone(), a[3].clone()), (R::bulk("1"), R::Nil));
    // The MSET's three keys share one timestamp.
    let first =
        |c: &mut Client, k: &str| c.cmd(&["ASOF.HISTORY", k, "LIMIT", "1"]).items()[0].clone();
    assert_eq!(first(c, "a"), first(c, "c"));
    assert_eq!(c.cmd(&["ASOF.HISTORY", "zz"]), bulks(&[]));
}

// Goal: a string with a deadline is read as of a time through its `FF 'x'` entry, is absent
// from its deadline on, and its history shows the expiry as a delete at the deadline.
// Method: SET PX 150 and a plain key, wait past the deadline, read as of before and after.
#[test]
fn asof_sees_deadlines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Running::start(dir.path(), "tsbtree");
    let c = &mut s.client;
    c.cmd(&["SET", "plain", "p"]);
    c.cmd(&["SET", "brief", "b", "PX", "150"]);
    let during = now(c);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let after = now(c);
    assert_eq!(c.cmd(&["ASOF.GET", "brief", &during]), R::bulk("b"));
    assert_eq!(c.cmd(&["ASOF.GET", "brief", &after]), R::Nil);
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "-", "+", &during]),
        bulks(&["brief", "b", "plain", "p"])
    );
    assert_eq!(
        c.cmd(&["ASOF.RANGE", "-", "+", &after, "KEYSONLY"]),
        bulks(&["plain"])
    );
    assert_eq!(int(&c.cmd(&["ASOF.COUNT", "-", "+", &during])), 2);
    let h = c.cmd(&["ASOF.HISTORY", "brief"]).items();
    assert_eq!(h.len(), 4, "{h:?}");
    assert_eq!((h[1].clone(), h[3].clone()), (R::bulk("b"), R::Nil));
    let lived = int(&h[2]) - int(&h[0]);
    assert!(
        (140_000..=160_000).contains(&lived),
        "expired after {lived} µs"
    );
}

// Goal: errors name the problem: a bad timestamp, a time in the future, a store of another
// engine, bad options. Method: one command per error.
#[test]
fn asof_errors_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Running::start(dir.path(), "tsbtree");
    let c = &mut s.client;
    let e = err_text(c.cmd(&["ASOF.GET", "k", "yesterday"]));
    assert!(e.contains("invalid timestamp 'yesterday'"), "{e}");
    let e = err_text(c.cmd(&["ASOF.GET", "k", "9999-01-01T00:00:00Z"]));
    assert!(e.contains("is in the future"), "{e}");
    let e = err_text(c.cmd(&["ASOF.HISTORY", "k", "FROM", "99999999999999999"]));
    assert!(e.contains("is in the future"), "{e}");
    let e = err_text(c.cmd(&["ASOF.RANGE", "x", "+", "0"]));
    assert!(e.contains("not valid string range item"), "{e}");
    let e = err_text(c.cmd(&["ASOF.RANGE", "-", "+", "0", "SIDEWAYS"]));
    assert!(e.contains("syntax error"), "{e}");
    let e = err_text(c.cmd(&["ASOF.HISTORY", "k", "LIMIT", "-1"]));
    assert!(e.contains("LIMIT count must be 0 or more"), "{e}");
    drop(s);

    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Running::start(dir.path(), "masstree");
    let c = &mut s.client;
    for argv in [
        &["ASOF.NOW"][..],
        &["ASOF.GET", "k", "0"],
        &["ASOF.RANGE", "-", "+", "0"],
        &["ASOF.COUNT", "-", "+", "0"],
        &["ASOF.HISTORY", "k"],
        &["ASOF.RETAIN"],
        &["ASOF.RETAIN", "0"],
    ] {
        let e = err_text(c.cmd(argv));
        assert!(
            e.contains("engine `masstree` is not a temporal engine"),
            "{argv:?}: {e}"
        );
    }
}

// Goal: ASOF.RETAIN answers as documented: 0 at first; raising it refuses reads below it
// (GET, RANGE, COUNT, HISTORY FROM) naming it while reads at or above answer as before;
// HISTORY without FROM starts at it; a future or lower threshold is refused, the same one
// accepted; INFO shows it; it survives a restart. Method: three versions of a key, the
// threshold at the second, every command before and after a restart.
#[test]
fn asof_retain_discards_history_before_the_threshold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Running::start(dir.path(), "tsbtree");
    let c = &mut s.client;
    assert_eq!(int(&c.cmd(&["ASOF.RETAIN"])), 0);
    c.cmd(&["SET", "color", "red"]);
    let t1 = now(c);
    c.cmd(&["SET", "color", "blue"]);
    let t2 = now(c);
    c.cmd(&["SET", "other", "x"]);
    c.cmd(&["DEL", "color"]);
    let t3 = now(c);
    let before_history = c.cmd(&["ASOF.HISTORY", "color", "FROM", &t2]);
    assert_eq!(
        int(&c.cmd(&["ASOF.RETAIN", &t2])),
        t2.parse::<i64>().unwrap()
    );
    let discarded = format!("history before {t2} is discarded");
    let mut restarted = false;
    loop {
        let c = &mut s.client;
        assert_eq!(int(&c.cmd(&["ASOF.RETAIN"])).to_string(), t2);
        for argv in [
            &["ASOF.GET", "color", &t1][..],
            &["ASOF.RANGE", "-", "+", &t1],
            &["ASOF.COUNT", "-", "+", &t1],
            &["ASOF.HISTORY", "color", "FROM", &t1],
            &["ASOF.HISTORY", "color", "FROM", "0"],
        ] {
            let e = err_text(c.cmd(argv));
            assert!(e.contains(&discarded), "{argv:?}: {e}");
        }
        assert_eq!(c.cmd(&["ASOF.GET", "color", &t2]), R::bulk("blue"));
        assert_eq!(c.cmd(&["ASOF.GET", "color", &t3]), R::Nil);
        assert_eq!(int(&c.cmd(&["ASOF.COUNT", "-", "+", &t2])), 1);
        assert_eq!(
            c.cmd(&["ASOF.HISTORY", "color", "FROM", &t2]),
            before_history
        );
        let all = c.cmd(&["ASOF.HISTORY", "color"]);
        assert_eq!(all, before_history, "no FROM: from the threshold");
        let e = err_text(c.cmd(&["ASOF.RETAIN", "9999-01-01T00:00:00Z"]));
        assert!(e.contains("is in the future"), "{e}");
        let e = err_text(c.cmd(&["ASOF.RETAIN", &t1]));
        assert!(e.contains("only grows"), "{e}");
        assert_eq!(int(&c.cmd(&["ASOF.RETAIN", &t2])).to_string(), t2);
        let e = err_text(c.cmd(&["ASOF.RETAIN", "soon"]));
        assert!(e.contains("invalid timestamp 'soon'"), "{e}");
        let info = match c.cmd(&["INFO", "forest"]) {
            R::Bulk(b) => String::from_utf8(b).expect("utf8"),
            other => panic!("INFO: {other:?}"),
        };
        assert!(info.contains(&format!("asof_retention:{t2}")), "{info}");
        // Once (review rev-retain F6: the engine's `retention` counter repeated it).
        assert_eq!(info.matches(t2.as_str()).count(), 1, "{info}");
        if restarted {
            break;
        }
        drop(s);
        s = Running::start(dir.path(), "tsbtree");
        restarted = true;
    }
}
