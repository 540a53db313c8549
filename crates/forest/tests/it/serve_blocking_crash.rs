//! A pop served to a blocked client is durable before its reply (issue 19; docs/PROTOCOL.md
//! "Blocking pops"): under `group` durability a client blocked in BLPOP (or BZPOPMIN) is
//! served a pushed element, and the server is SIGKILLed the moment that reply arrives; after
//! the restart the element is gone from its key, and the rest of the push is there. Each I/O
//! model, a few rounds on one directory.

use crate::common;

use std::time::{Duration, Instant};

use common::{data_dir, io_flag_sets, Server};

/// INFO's `blocked_clients`.
fn blocked_clients(con: &mut redis::Connection) -> usize {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(con)
        .expect("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO clients has no blocked_clients:\n{info}"))
}

/// Waits until one client is blocked (a generous bound: the machine may be loaded).
fn until_blocked(con: &mut redis::Connection) {
    let start = Instant::now();
    while blocked_clients(con) != 1 {
        assert!(start.elapsed() < Duration::from_secs(30), "nobody blocked");
        std::thread::sleep(Duration::from_millis(2));
    }
}

// Goal: a served blocked pop survives SIGKILL right after its reply (the reply waited for
// its durability). Method: block, push two, read the served reply, SIGKILL, restart, read.
#[test]
fn served_pop_is_durable_before_its_reply() {
    for io in io_flag_sets() {
        let (_tmp, dir) = data_dir();
        let mut flags = vec!["--durability", "group"];
        flags.extend(io.iter().copied());
        for round in 0..3 {
            let mut server = Server::start(&dir, &flags);
            let mut waiter = server.client();
            let mut pusher = server.client();
            let (list, zset) = (format!("q{round}"), format!("z{round}"));
            let key = list.clone();
            let blocked = std::thread::spawn(move || {
                let served: (String, String) = redis::cmd("BLPOP")
                    .arg(&key)
                    .arg(0)
                    .query(&mut waiter)
                    .expect("BLPOP");
                let zserved: (String, String, String) = redis::cmd("BZPOPMIN")
                    .arg(format!("z{round}"))
                    .arg(0)
                    .query(&mut waiter)
                    .expect("BZPOPMIN");
                (served, zserved)
            });
            until_blocked(&mut pusher);
            let _: i64 = redis::cmd("RPUSH")
                .arg(&list)
                .arg("job")
                .arg("rest")
                .query(&mut pusher)
                .expect("RPUSH");
            until_blocked(&mut pusher);
            let _: i64 = redis::cmd("ZADD")
                .arg(&zset)
                .arg(1)
                .arg("low")
                .arg(2)
                .arg("high")
                .query(&mut pusher)
                .expect("ZADD");
            let (served, zserved) = blocked.join().expect("waiter");
            server.kill();
            assert_eq!(served, (list.clone(), "job".to_string()), "{io:?}");
            assert_eq!(
                zserved,
                (zset.clone(), "low".to_string(), "1".to_string()),
                "{io:?}"
            );
            let server = Server::start(&dir, &flags);
            let mut con = server.client();
            let left: Vec<String> = redis::cmd("LRANGE")
                .arg(&list)
                .arg(0)
                .arg(-1)
                .query(&mut con)
                .expect("LRANGE");
            assert_eq!(left, vec!["rest".to_string()], "{io:?} round {round}");
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(&zset)
                .arg(0)
                .arg(-1)
                .query(&mut con)
                .expect("ZRANGE");
            assert_eq!(members, vec!["high".to_string()], "{io:?} round {round}");
        }
    }
}
