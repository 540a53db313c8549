//! Review rev-coll (session 16, branch h-coll): HSET of an unchanged value writing nothing,
//! pops without vectors, `write_existing` opening its unit with the type entry it read, the
//! unit's overlay as a sorted vector. Run: `cargo test -p forest-server --test it --
//! rev_coll::` (and `-- rev_coll:: --ignored` for the findings' tests).

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Client, Running, R};
use forest_server::IoModel;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn int(r: R) -> i64 {
    match r {
        R::Int(i) => i,
        other => panic!("not an integer: {other:?}"),
    }
}

// F1 (pre-existing, main too; not from this branch): HGET, HMGET and HSTRLEN read the store
// directly (`hash::field`, `ctx.shared.store.get`), not the running unit's overlay, so
// inside MULTI/EXEC (and a Lua script) they miss the transaction's own writes:
// `MULTI; HSET h a 22 b 3; HGET h a; HMGET h a b; HEXISTS h b; HSTRLEN h a; EXEC` answers
// 1, [1, nil], 1, 1 where Redis 7 answers 22, [22, 3], 1, 2 (HEXISTS is right). Method:
// that transaction, and the same through EVAL.
#[test]
fn hash_field_reads_in_multi_and_scripts_see_their_own_writes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let up = Running::start(tmp.path(), IoModel::Threads);
    let mut c = up.client();
    assert_eq!(c.cmd(&["HSET", "h", "a", "1"]), R::Int(1));
    assert_eq!(c.cmd(&["MULTI"]), R::Simple("OK".into()));
    for argv in [
        &["HSET", "h", "a", "22", "b", "3"][..],
        &["HGET", "h", "a"],
        &["HMGET", "h", "a", "b"],
        &["HEXISTS", "h", "b"],
        &["HSTRLEN", "h", "a"],
    ] {
        assert_eq!(c.cmd(argv), R::Simple("QUEUED".into()));
    }
    assert_eq!(
        c.cmd(&["EXEC"]),
        R::Arr(vec![
            R::Int(1),
            R::bulk("22"),
            R::Arr(vec![R::bulk("22"), R::bulk("3")]),
            R::Int(1),
            R::Int(2),
        ]),
        "Redis 7's replies"
    );
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('HSET', KEYS[1], 'a', '9'); return redis.call('HGET', KEYS[1], 'a')",
            "1",
            "h",
        ]),
        R::bulk("9"),
        "a script's HGET after its HSET"
    );
}

// Soundness (passes on the branch): HSET's replies, with repeated fields in one call and
// fields set to the value they hold (no write), against a model, in and out of MULTI, and the
// hash after a restart. Method: 600 random HSETs of 1-20 pairs over 24 fields and 3 values.
#[test]
fn hset_replies_with_repeated_and_unchanged_fields_match_a_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    {
        let up = Running::start(tmp.path(), IoModel::PerCore);
        let mut c = up.client();
        for round in 0..600 {
            let pairs = [1, 1, 2, 3, 20][rng.below(5) as usize];
            let mut argv = vec!["HSET".to_string(), "h".to_string()];
            let mut want = 0;
            let mut after = model.clone();
            for _ in 0..pairs {
                let f = format!("f{}", rng.below(if pairs < 5 { 6 } else { 24 }));
                let v = format!("v{}", rng.below(3));
                if after.insert(f.clone(), v.clone()).is_none() {
                    want += 1;
                }
                argv.push(f);
                argv.push(v);
            }
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            if rng.below(8) == 0 {
                c.cmd(&["MULTI"]);
                c.cmd(&argv);
                c.cmd(&["HLEN", "h"]);
                assert_eq!(
                    c.cmd(&["EXEC"]),
                    R::Arr(vec![R::Int(want), R::Int(after.len() as i64)]),
                    "round {round}: {argv:?} in MULTI"
                );
            } else {
                assert_eq!(c.cmd(&argv), R::Int(want), "round {round}: {argv:?}");
            }
            model = after;
            if rng.below(20) == 0 {
                let f = format!("f{}", rng.below(24));
                let had = model.remove(&f).is_some();
                assert_eq!(c.cmd(&["HDEL", "h", &f]), R::Int(had as i64));
            }
        }
        assert_eq!(int(c.cmd(&["HLEN", "h"])), model.len() as i64);
    }
    let up = Running::start(tmp.path(), IoModel::PerCore);
    let mut c = up.client();
    let all = c.cmd(&["HGETALL", "h"]).items();
    let got: BTreeMap<String, String> = all.chunks(2).map(|p| (p[0].text(), p[1].text())).collect();
    assert_eq!(got, model, "the hash after the restart");
    assert_eq!(int(c.cmd(&["HLEN", "h"])), model.len() as i64);
}

const HASHES: [&str; 2] = ["h0", "h1"];
const LISTS: [&str; 2] = ["l0", "l1"];

fn one_op(c: &mut Client, rng: &mut Rng) {
    let h = HASHES[rng.below(2) as usize];
    let l = LISTS[rng.below(2) as usize];
    let f = format!("f{}", rng.below(6));
    let f2 = format!("f{}", rng.below(6));
    let v = format!("v{}", rng.below(2));
    let reply = match rng.below(16) {
        // Mostly no-ops once the fields are set: two values only.
        0..=4 => c.cmd(&["HSET", h, &f, &v, &f2, &v]),
        5 => c.cmd(&["HDEL", h, &f]),
        6 => c.cmd(&["HINCRBY", h, "n", "1"]),
        7 => c.cmd(&["DEL", h]),
        8 => c.cmd(&["PEXPIRE", h, "100000"]),
        9 => {
            c.cmd(&["MULTI"]);
            c.cmd(&["HSET", h, &f, &v]);
            c.cmd(&["HDEL", h, &f2]);
            c.cmd(&["LPOP", l]);
            c.cmd(&["EXEC"])
        }
        10..=11 => c.cmd(&["RPUSH", l, &v, "x"]),
        12 => c.cmd(&["LPOP", l]),
        13 => c.cmd(&["RPOP", l]),
        14 if rng.below(40) == 0 => c.cmd(&["FLUSHALL"]),
        _ => c.cmd(&["HSET", h, &f, &v]),
    };
    if let R::Err(e) = &reply {
        panic!("unexpected error {e}");
    }
}

fn check(c: &mut Client, context: &str) -> Vec<R> {
    let mut seen = Vec::new();
    for h in HASHES {
        let all = c.cmd(&["HGETALL", h]).items();
        assert_eq!(
            int(c.cmd(&["HLEN", h])),
            all.len() as i64 / 2,
            "{context}: HLEN {h}"
        );
        seen.push(R::Arr(all));
    }
    for l in LISTS {
        let all = c.cmd(&["LRANGE", l, "0", "-1"]).items();
        assert_eq!(
            int(c.cmd(&["LLEN", l])),
            all.len() as i64,
            "{context}: LLEN {l}"
        );
        seen.push(R::Arr(all));
    }
    let keys = c.cmd(&["KEYS", "*"]).items();
    assert_eq!(
        int(c.cmd(&["DBSIZE"])),
        keys.len() as i64,
        "{context}: DBSIZE against KEYS *"
    );
    seen
}

// Soundness (passes on the branch): no-op HSETs (no write, watchers touched), pops opened
// with the type entry read once, and every other writer of the same keys (HDEL, HINCRBY,
// DEL, PEXPIRE, MULTI, FLUSHALL) racing on 4 connections: every HLEN and LLEN equals the
// members read, DBSIZE equals KEYS *, and a restart finds the same.
#[test]
fn noop_hsets_and_pops_racing_other_writers_keep_counts_across_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let before = {
        let up = Running::start(tmp.path(), IoModel::Threads);
        let until = Instant::now() + Duration::from_millis(2000);
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let mut c = up.client();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5678_9abc));
                    let mut rounds = 0u64;
                    while Instant::now() < until {
                        one_op(&mut c, &mut rng);
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        let rounds: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
        assert!(rounds > 100, "only {rounds} ops");
        let mut c = up.client();
        check(&mut c, "after the race")
    };
    let up = Running::start(tmp.path(), IoModel::Threads);
    let mut c = up.client();
    let after = check(&mut c, "after the restart");
    assert_eq!(after, before, "the collections across the restart");
}
