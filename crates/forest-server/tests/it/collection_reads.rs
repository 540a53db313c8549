//! Reads of several entries of one collection see each write whole (issue 19's review, a
//! differential run against redis-server): SMISMEMBER, HMGET, ZMSCORE, ZRANK and the random
//! picks read members one by one, so without the key's stripe lock they could see part of
//! another client's SADD/HSET/ZADD (`[1, 0]` for two members added together, a rank no state
//! had, more random members than asked for).

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Running, R};
use forest_server::IoModel;

/// Runs `write_a` / `write_b` alternately on one client while another checks `check` on
/// the reply of `read`, for `time`. Returns the number of reads.
fn race(
    server: &Running,
    writes: [&'static [&'static str]; 2],
    read: &'static [&'static str],
    check: impl Fn(&R) -> bool,
    time: Duration,
) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let mut c = server.client();
        thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                c.cmd(writes[i % 2]);
                i += 1;
            }
        })
    };
    let mut c = server.client();
    let start = Instant::now();
    let mut reads = 0;
    while start.elapsed() < time {
        let reply = c.cmd(read);
        assert!(check(&reply), "{read:?} saw part of a write: {reply:?}");
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    reads
}

fn ints(reply: &R) -> Vec<i64> {
    reply
        .clone()
        .items()
        .into_iter()
        .map(|r| match r {
            R::Int(n) => n,
            other => panic!("integer expected: {other:?}"),
        })
        .collect()
}

// Goal: each multi-entry read sees the other client's two-member writes whole. Method: a
// writer flips two members in and out with one command each; the reader's reply must show
// both or neither (ZRANK: a rank some state had). Fails without the stripe lock in these
// reads (seen by the differential run: SMISMEMBER [1, 0], ZRANK 3 of a 3-member set).
#[test]
fn multi_entry_reads_see_writes_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::Threads);
    let time = Duration::from_millis(1500);
    let mut c = server.client();
    c.cmd(&["SADD", "s", "base"]);
    race(
        &server,
        [&["SADD", "s", "a", "b"], &["SREM", "s", "a", "b"]],
        &["SMISMEMBER", "s", "a", "b"],
        |r| matches!(ints(r)[..], [0, 0] | [1, 1]),
        time,
    );
    c.cmd(&["HSET", "h", "base", "x"]);
    race(
        &server,
        [&["HSET", "h", "a", "1", "b", "1"], &["HDEL", "h", "a", "b"]],
        &["HMGET", "h", "a", "b"],
        |r| {
            let items = r.clone().items();
            items[0] == items[1]
        },
        time,
    );
    c.cmd(&["ZADD", "z", "0", "base"]);
    race(
        &server,
        [&["ZADD", "z", "1", "a", "1", "b"], &["ZREM", "z", "a", "b"]],
        &["ZMSCORE", "z", "a", "b"],
        |r| {
            let items = r.clone().items();
            items[0] == items[1]
        },
        time,
    );
    c.cmd(&["ZADD", "r", "1", "x", "2", "y", "3", "m"]);
    race(
        &server,
        [&["ZADD", "r", "0", "m"], &["ZADD", "r", "5", "m"]],
        &["ZRANK", "r", "m"],
        |r| matches!(r, R::Int(0) | R::Int(2)),
        time,
    );
    c.cmd(&["SADD", "p", "1", "2", "3"]);
    race(
        &server,
        [
            &["SADD", "p", "4", "5", "6", "7"],
            &["SREM", "p", "4", "5", "6", "7"],
        ],
        &["SRANDMEMBER", "p", "4"],
        |r| r.clone().items().len() <= 4,
        time,
    );
}
