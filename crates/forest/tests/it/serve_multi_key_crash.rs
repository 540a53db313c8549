//! Commands over several collections under SIGKILL (issue 19: "a crash never leaves a
//! collection whose member count disagrees with its members"): LMOVE, RPOPLPUSH, SMOVE and
//! the STORE forms are each one atomic batch, so after recovery an element moved between
//! two lists or sets is in exactly one of them, and a stored result is whole.
//!
//! Each writer owns two lists (`la`, `lb`: 20 elements between them) and two sets (`sa`,
//! `sb`: 20 members) and sends pipelines of random LMOVE / RPOPLPUSH / SMOVE between them,
//! SUNIONSTORE `su` of the two sets (always the 20 members), ZUNIONSTORE `zu` of the two sets
//! (20 members scoring 1) and ZRANGESTORE `zr` of its first 10. The test SIGKILLs the server
//! after a random number of acknowledged pipelines, restarts it on the same directory and
//! checks, per writer: the elements of both lists are the 20, once each, and LLEN agrees
//! with LRANGE; likewise the sets with SCARD; `su`, `zu`, `zr` have their full size, counted
//! and listed alike. `FOREST_KILL_CYCLES` cycles (default 6) under `group` durability.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{data_dir, Server};
use rand::{Rng, SeedableRng};

const WRITERS: usize = 3;
const ELEMENTS: usize = 20;
const PIPELINE_MAX: usize = 12;

fn cycles() -> u64 {
    std::env::var("FOREST_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

fn key(w: usize, name: &str) -> String {
    format!("w{w}:{name}")
}

fn element(i: usize) -> String {
    format!("e{i:02}")
}

/// Fills writer `w`'s keys: every element in `la` and in `sa`.
fn fill(con: &mut redis::Connection, w: usize) {
    let all: Vec<String> = (0..ELEMENTS).map(element).collect();
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(key(w, "la"))
        .arg(key(w, "lb"))
        .arg(key(w, "sa"))
        .arg(key(w, "sb"))
        .ignore()
        .rpush(key(w, "la"), &all)
        .ignore()
        .sadd(key(w, "sa"), &all)
        .ignore()
        .query(con)
        .expect("fill");
}

/// Sends random moves and stores until the connection breaks; counts acknowledged pipelines.
fn writer(mut con: redis::Connection, w: usize, acked: &AtomicUsize, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((w as u64) << 32));
    let (la, lb, sa, sb) = (key(w, "la"), key(w, "lb"), key(w, "sa"), key(w, "sb"));
    loop {
        let mut pipe = redis::pipe();
        for _ in 0..rng.random_range(1..=PIPELINE_MAX) {
            let (from, to) = if rng.random_bool(0.5) {
                (&la, &lb)
            } else {
                (&lb, &la)
            };
            match rng.random_range(0..6) {
                0 | 1 => pipe.cmd("LMOVE").arg(from).arg(to).arg("LEFT").arg("RIGHT"),
                2 => pipe.cmd("RPOPLPUSH").arg(from).arg(to),
                3 => {
                    let (from, to) = if rng.random_bool(0.5) {
                        (&sa, &sb)
                    } else {
                        (&sb, &sa)
                    };
                    let member = element(rng.random_range(0..ELEMENTS));
                    pipe.cmd("SMOVE").arg(from).arg(to).arg(member)
                }
                4 => pipe.cmd("SUNIONSTORE").arg(key(w, "su")).arg(&sa).arg(&sb),
                _ => pipe
                    .cmd("ZUNIONSTORE")
                    .arg(key(w, "zu"))
                    .arg(2)
                    .arg(&sa)
                    .arg(&sb)
                    .cmd("ZRANGESTORE")
                    .arg(key(w, "zr"))
                    .arg(key(w, "zu"))
                    .arg(0)
                    .arg(ELEMENTS / 2 - 1),
            };
        }
        let replies: Result<Vec<redis::Value>, _> = pipe.query(&mut con);
        match replies {
            Ok(replies) => {
                for reply in replies {
                    assert!(
                        !matches!(reply, redis::Value::ServerError(_)),
                        "writer {w}: {reply:?}"
                    );
                }
                acked.fetch_add(1, Ordering::SeqCst);
            }
            // An error the server sent is a failure; anything else is the kill.
            Err(e) if e.code().is_some() => panic!("writer {w}: {e}"),
            Err(_) => return,
        }
    }
}

/// A collection's size by its count command and by listing it, which must agree.
fn counted(con: &mut redis::Connection, count: &str, list: &[&str], key: &str) -> Vec<String> {
    let n: i64 = redis::cmd(count).arg(key).query(con).expect("count");
    let mut members: Vec<String> = redis::cmd(list[0])
        .arg(key)
        .arg(&list[1..])
        .query(con)
        .expect("list");
    assert_eq!(
        members.len() as i64,
        n,
        "{count} {key} disagrees with its members"
    );
    members.sort();
    members
}

fn check(server: &Server, cycle: u64) {
    let mut con = server.client();
    let all: Vec<String> = (0..ELEMENTS).map(element).collect();
    for w in 0..WRITERS {
        let range = ["LRANGE", "0", "-1"];
        let mut lists = counted(&mut con, "LLEN", &range, &key(w, "la"));
        lists.extend(counted(&mut con, "LLEN", &range, &key(w, "lb")));
        lists.sort();
        assert_eq!(lists, all, "cycle {cycle} writer {w}: the lists' elements");
        let mut sets = counted(&mut con, "SCARD", &["SMEMBERS"], &key(w, "sa"));
        sets.extend(counted(&mut con, "SCARD", &["SMEMBERS"], &key(w, "sb")));
        sets.sort();
        assert_eq!(sets, all, "cycle {cycle} writer {w}: the sets' members");
        let su = counted(&mut con, "SCARD", &["SMEMBERS"], &key(w, "su"));
        assert!(
            su.is_empty() || su == all,
            "cycle {cycle} writer {w}: su {su:?}"
        );
        let zrange = ["ZRANGE", "0", "-1"];
        let zu = counted(&mut con, "ZCARD", &zrange, &key(w, "zu"));
        assert!(
            zu.is_empty() || zu == all,
            "cycle {cycle} writer {w}: zu {zu:?}"
        );
        let zr = counted(&mut con, "ZCARD", &zrange, &key(w, "zr"));
        assert!(
            zr.is_empty() || zr == all[..ELEMENTS / 2],
            "cycle {cycle} writer {w}: zr {zr:?}"
        );
    }
}

// Goal: after SIGKILL each multi-key command is whole or absent: no element in both lists or
// neither, no count that disagrees with the members, no half-stored result.
// Method: kill cycles (module doc), group commit.
#[test]
fn multi_key_commands_survive_sigkill_whole() {
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (_tmp, dir) = data_dir();
    let flags = ["--durability", "group"];
    for cycle in 0..cycles() {
        let mut server = Server::start(&dir, &flags);
        let mut con = server.client();
        for w in 0..WRITERS {
            fill(&mut con, w);
        }
        let acked: Vec<Arc<AtomicUsize>> = (0..WRITERS).map(|_| Arc::default()).collect();
        let threads: Vec<_> = (0..WRITERS)
            .map(|w| {
                let con = server.client();
                let acked = Arc::clone(&acked[w]);
                std::thread::spawn(move || writer(con, w, &acked, seed ^ cycle))
            })
            .collect();
        // Kill once a random number of pipelines were acknowledged (progress, not time).
        let target = rng.random_range(5..200);
        while acked
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .sum::<usize>()
            < target
        {
            std::thread::yield_now();
        }
        server.kill();
        for thread in threads {
            thread.join().expect("writer");
        }
        let server = Server::start(&dir, &flags);
        check(&server, cycle);
    }
}
