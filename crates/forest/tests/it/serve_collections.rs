//! The collection commands of `forest serve` (lists, sets, hashes, sorted sets; docs/PROTOCOL.md
//! "Collections") against in-memory models, through the `redis` crate: Redis's replies for
//! each command, collections as keys (KEYS, DBSIZE, EXISTS, DEL, TYPE), WRONGTYPE errors,
//! atomicity per key under concurrent clients, and every collection intact after a SIGKILL
//! in sync mode.
//!
//! Seeded random rounds; the seed is printed and `FOREST_COLLECTION_SEED` replays one.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use common::{data_dir, expect_err, query, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// Rounds of random operations, and operations per round.
const ROUND_COUNT: usize = 40;
const OPS_PER_ROUND: usize = 50;
/// Keys per collection type: few, so collections grow, shrink and vanish.
const KEYS_PER_TYPE: usize = 3;

/// forest's collections as Redis would hold them. A sorted set keeps member -> score; its
/// order is (score, member).
#[derive(Default, Debug, PartialEq)]
struct Model {
    lists: BTreeMap<String, VecDeque<Vec<u8>>>,
    sets: BTreeMap<String, BTreeSet<Vec<u8>>>,
    hashes: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    zsets: BTreeMap<String, BTreeMap<Vec<u8>, i64>>,
}

impl Model {
    /// Drops emptied collections, as Redis (and forest) remove them.
    fn prune(&mut self) {
        self.lists.retain(|_, l| !l.is_empty());
        self.sets.retain(|_, s| !s.is_empty());
        self.hashes.retain(|_, h| !h.is_empty());
        self.zsets.retain(|_, z| !z.is_empty());
    }

    fn keys(&self) -> BTreeSet<String> {
        self.lists
            .keys()
            .chain(self.sets.keys())
            .chain(self.hashes.keys())
            .chain(self.zsets.keys())
            .cloned()
            .collect()
    }

    /// The members of sorted set `key` in rank order.
    fn zrank_order(&self, key: &str) -> Vec<(Vec<u8>, i64)> {
        let mut all: Vec<(Vec<u8>, i64)> = self
            .zsets
            .get(key)
            .map(|z| z.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all
    }
}

fn bulk(v: &[u8]) -> Value {
    Value::BulkString(v.to_vec())
}

fn bulks(items: impl IntoIterator<Item = Vec<u8>>) -> Value {
    Value::Array(items.into_iter().map(Value::BulkString).collect())
}

fn member(rng: &mut StdRng) -> Vec<u8> {
    // Binary members too: NUL, CR LF, 0xff.
    const MEMBERS: [&[u8]; 8] = [b"a", b"b", b"c", b"d", b"\x00", b"\r\n", b"\xff", b""];
    MEMBERS[rng.random_range(0..MEMBERS.len())].to_vec()
}

/// Redis's LRANGE index clamping: the [start, stop] slice of a list of `len` elements.
fn lrange_slice(len: usize, start: i64, stop: i64) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        0..0
    } else {
        start as usize..stop as usize + 1
    }
}

/// One random list operation, checked against the model.
fn list_op(c: &mut redis::Connection, m: &mut Model, rng: &mut StdRng, key: &str) {
    let k = key.as_bytes();
    let list = m.lists.entry(key.to_string()).or_default();
    match rng.random_range(0..7) {
        0 | 1 => {
            let left = rng.random_bool(0.5);
            let elems: Vec<Vec<u8>> = (0..rng.random_range(1..=3)).map(|_| member(rng)).collect();
            let mut args: Vec<&[u8]> = vec![if left { b"LPUSH" } else { b"RPUSH" }, k];
            args.extend(elems.iter().map(|e| &e[..]));
            for e in elems.iter().cloned() {
                if left {
                    list.push_front(e);
                } else {
                    list.push_back(e);
                }
            }
            assert_eq!(query(c, &args), Value::Int(list.len() as i64), "{args:?}");
        }
        2 => {
            let left = rng.random_bool(0.5);
            let cmd: &[u8] = if left { b"LPOP" } else { b"RPOP" };
            if rng.random_bool(0.5) {
                let want = if left {
                    list.pop_front()
                } else {
                    list.pop_back()
                };
                let expected = want.map_or(Value::Nil, Value::BulkString);
                assert_eq!(query(c, &[cmd, k]), expected, "{key} {cmd:?}");
            } else {
                let count = rng.random_range(1..=3usize);
                let expected = if list.is_empty() {
                    Value::Nil
                } else {
                    let n = count.min(list.len());
                    let popped: Vec<Vec<u8>> = (0..n)
                        .filter_map(|_| {
                            if left {
                                list.pop_front()
                            } else {
                                list.pop_back()
                            }
                        })
                        .collect();
                    bulks(popped)
                };
                let n = count.to_string();
                assert_eq!(
                    query(c, &[cmd, k, n.as_bytes()]),
                    expected,
                    "{key} {cmd:?} {n}"
                );
            }
        }
        3 | 4 => {
            let (start, stop) = (rng.random_range(-6..6i64), rng.random_range(-6..6i64));
            let range = lrange_slice(list.len(), start, stop);
            let expected = bulks(list.range(range).cloned());
            let (a, b) = (start.to_string(), stop.to_string());
            assert_eq!(
                query(c, &[b"LRANGE", k, a.as_bytes(), b.as_bytes()]),
                expected,
                "LRANGE {key} {start} {stop} of {list:?}"
            );
        }
        5 => {
            let idx = rng.random_range(-6..6i64);
            let pos = if idx < 0 {
                list.len() as i64 + idx
            } else {
                idx
            };
            let expected = usize::try_from(pos)
                .ok()
                .and_then(|p| list.get(p))
                .map_or(Value::Nil, |v| bulk(v));
            let i = idx.to_string();
            assert_eq!(
                query(c, &[b"LINDEX", k, i.as_bytes()]),
                expected,
                "LINDEX {idx}"
            );
        }
        _ => {
            assert_eq!(query(c, &[b"LLEN", k]), Value::Int(list.len() as i64));
        }
    }
}

/// One random set operation, checked against the model.
fn set_op(c: &mut redis::Connection, m: &mut Model, rng: &mut StdRng, key: &str) {
    let k = key.as_bytes();
    let set = m.sets.entry(key.to_string()).or_default();
    match rng.random_range(0..6) {
        0 | 1 => {
            let members: Vec<Vec<u8>> = (0..rng.random_range(1..=3)).map(|_| member(rng)).collect();
            let mut args: Vec<&[u8]> = vec![b"SADD", k];
            args.extend(members.iter().map(|e| &e[..]));
            let new = members.iter().filter(|e| set.insert(e.to_vec())).count();
            assert_eq!(query(c, &args), Value::Int(new as i64), "{args:?}");
        }
        2 => {
            let members: Vec<Vec<u8>> = (0..rng.random_range(1..=2)).map(|_| member(rng)).collect();
            let mut args: Vec<&[u8]> = vec![b"SREM", k];
            args.extend(members.iter().map(|e| &e[..]));
            let gone = members.iter().filter(|e| set.remove(*e)).count();
            assert_eq!(query(c, &args), Value::Int(gone as i64), "{args:?}");
        }
        3 => match query(c, &[b"SPOP", k]) {
            Value::Nil => assert!(set.is_empty(), "SPOP of {set:?} gave nil"),
            Value::BulkString(e) => assert!(set.remove(&e), "SPOP gave {e:?}, not in {set:?}"),
            other => panic!("SPOP: {other:?}"),
        },
        4 => {
            let e = member(rng);
            let expected = Value::Int(i64::from(set.contains(&e)));
            assert_eq!(query(c, &[b"SISMEMBER", k, &e]), expected);
            assert_eq!(query(c, &[b"SCARD", k]), Value::Int(set.len() as i64));
        }
        _ => {
            assert_eq!(
                query(c, &[b"SMEMBERS", k]),
                bulks(set.iter().cloned()),
                "SMEMBERS in member order"
            );
        }
    }
}

/// One random hash operation, checked against the model.
fn hash_op(c: &mut redis::Connection, m: &mut Model, rng: &mut StdRng, key: &str) {
    let k = key.as_bytes();
    let hash = m.hashes.entry(key.to_string()).or_default();
    match rng.random_range(0..6) {
        0 | 1 => {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..rng.random_range(1..=2))
                .map(|_| (member(rng), member(rng)))
                .collect();
            let mut args: Vec<&[u8]> = vec![b"HSET", k];
            for (f, v) in &pairs {
                args.extend([&f[..], &v[..]]);
            }
            // A field named twice counts once, with its last value.
            let mut new = 0;
            for (f, v) in pairs.iter().cloned() {
                if hash.insert(f, v).is_none() {
                    new += 1;
                }
            }
            assert_eq!(query(c, &args), Value::Int(new), "{args:?}");
        }
        2 => {
            let f = member(rng);
            let gone = hash.remove(&f).is_some();
            assert_eq!(query(c, &[b"HDEL", k, &f]), Value::Int(i64::from(gone)));
        }
        3 => {
            let (f, g) = (member(rng), member(rng));
            let get = |f: &Vec<u8>| hash.get(f).map_or(Value::Nil, |v| bulk(v));
            assert_eq!(query(c, &[b"HGET", k, &f]), get(&f));
            assert_eq!(
                query(c, &[b"HMGET", k, &f, &g]),
                Value::Array(vec![get(&f), get(&g)])
            );
            let exists = Value::Int(i64::from(hash.contains_key(&f)));
            assert_eq!(query(c, &[b"HEXISTS", k, &f]), exists);
        }
        4 => {
            // HINCRBY on a field of its own, so values stay integers.
            let by = rng.random_range(-5..=5i64);
            let f = b"counter".to_vec();
            let old = hash.get(&f).map_or(0, |v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(0)
            });
            hash.insert(f.clone(), (old + by).to_string().into_bytes());
            let by_text = by.to_string();
            assert_eq!(
                query(c, &[b"HINCRBY", k, &f, by_text.as_bytes()]),
                Value::Int(old + by)
            );
        }
        _ => {
            assert_eq!(query(c, &[b"HLEN", k]), Value::Int(hash.len() as i64));
            let flat = hash.iter().flat_map(|(f, v)| [f.clone(), v.clone()]);
            assert_eq!(
                query(c, &[b"HGETALL", k]),
                bulks(flat),
                "HGETALL in field order"
            );
        }
    }
}

/// One random sorted-set operation, checked against the model.
fn zset_op(c: &mut redis::Connection, m: &mut Model, rng: &mut StdRng, key: &str) {
    let k = key.as_bytes();
    let order = m.zrank_order(key);
    let zset = m.zsets.entry(key.to_string()).or_default();
    match rng.random_range(0..6) {
        0 | 1 => {
            let (score, e) = (rng.random_range(-3..=3i64), member(rng));
            let new = zset.insert(e.clone(), score).is_none();
            let s = score.to_string();
            assert_eq!(
                query(c, &[b"ZADD", k, s.as_bytes(), &e]),
                Value::Int(i64::from(new))
            );
        }
        2 => {
            let e = member(rng);
            let gone = zset.remove(&e).is_some();
            assert_eq!(query(c, &[b"ZREM", k, &e]), Value::Int(i64::from(gone)));
        }
        3 => {
            let expected = match order.first() {
                Some((e, s)) => {
                    zset.remove(e);
                    bulks([e.clone(), s.to_string().into_bytes()])
                }
                None => Value::Array(vec![]),
            };
            assert_eq!(query(c, &[b"ZPOPMIN", k]), expected, "ZPOPMIN of {order:?}");
        }
        4 => {
            let e = member(rng);
            let expected = zset
                .get(&e)
                .map_or(Value::Nil, |s| bulk(s.to_string().as_bytes()));
            assert_eq!(query(c, &[b"ZSCORE", k, &e]), expected);
            assert_eq!(query(c, &[b"ZCARD", k]), Value::Int(zset.len() as i64));
        }
        _ => {
            let flat = order
                .iter()
                .flat_map(|(e, s)| [e.clone(), s.to_string().into_bytes()]);
            assert_eq!(
                query(c, &[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"]),
                bulks(flat),
                "ZRANGE by (score, member)"
            );
        }
    }
}

/// Reads every collection of the model's key space back and compares; also KEYS, DBSIZE,
/// TYPE.
fn check_all(c: &mut redis::Connection, m: &Model, what: &str) {
    let keys: BTreeSet<String> = match query(c, &[b"KEYS", b"*"]) {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => String::from_utf8(b).expect("utf-8 key"),
                other => panic!("KEYS item {other:?}"),
            })
            .collect(),
        other => panic!("KEYS: {other:?}"),
    };
    assert_eq!(keys, m.keys(), "{what}: KEYS");
    assert_eq!(
        query(c, &[b"DBSIZE"]),
        Value::Int(m.keys().len() as i64),
        "{what}"
    );
    for (key, list) in &m.lists {
        let got = query(c, &[b"LRANGE", key.as_bytes(), b"0", b"-1"]);
        assert_eq!(got, bulks(list.iter().cloned()), "{what}: list {key}");
        assert_eq!(
            query(c, &[b"TYPE", key.as_bytes()]),
            Value::SimpleString("list".into())
        );
    }
    for (key, set) in &m.sets {
        let got = query(c, &[b"SMEMBERS", key.as_bytes()]);
        assert_eq!(got, bulks(set.iter().cloned()), "{what}: set {key}");
        assert_eq!(
            query(c, &[b"TYPE", key.as_bytes()]),
            Value::SimpleString("set".into())
        );
    }
    for (key, hash) in &m.hashes {
        let flat = hash.iter().flat_map(|(f, v)| [f.clone(), v.clone()]);
        let got = query(c, &[b"HGETALL", key.as_bytes()]);
        assert_eq!(got, bulks(flat), "{what}: hash {key}");
        assert_eq!(
            query(c, &[b"TYPE", key.as_bytes()]),
            Value::SimpleString("hash".into())
        );
    }
    for key in m.zsets.keys() {
        let flat = m
            .zrank_order(key)
            .into_iter()
            .flat_map(|(e, s)| [e, s.to_string().into_bytes()]);
        let got = query(c, &[b"ZRANGE", key.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
        assert_eq!(got, bulks(flat), "{what}: zset {key}");
        assert_eq!(
            query(c, &[b"TYPE", key.as_bytes()]),
            Value::SimpleString("zset".into())
        );
    }
}

// Goal: lists, sets, hashes and sorted sets answer as Redis's do, and survive a SIGKILL in
// sync mode intact. Method: seeded random operations on 3 keys per type against models,
// every collection read back after each round, a kill and restart every 10 rounds.
#[test]
fn collections_match_models_across_kills() {
    let seed: u64 = std::env::var("FOREST_COLLECTION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("FOREST_COLLECTION_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_tmp, dir) = data_dir();
    let flags = ["--durability", "sync"];
    let mut server = Server::start(&dir, &flags);
    let mut c = server.client();
    let mut m = Model::default();
    for round in 0..ROUND_COUNT {
        for _ in 0..OPS_PER_ROUND {
            let i = rng.random_range(0..KEYS_PER_TYPE);
            match rng.random_range(0..4) {
                0 => list_op(&mut c, &mut m, &mut rng, &format!("list{i}")),
                1 => set_op(&mut c, &mut m, &mut rng, &format!("set{i}")),
                2 => hash_op(&mut c, &mut m, &mut rng, &format!("hash{i}")),
                _ => zset_op(&mut c, &mut m, &mut rng, &format!("zset{i}")),
            }
            m.prune();
        }
        let what = format!("seed {seed} round {round}");
        check_all(&mut c, &m, &what);
        if round % 10 == 9 {
            drop(c);
            server.kill();
            server = Server::start(&dir, &flags);
            c = server.client();
            check_all(&mut c, &m, &format!("{what}, after SIGKILL and restart"));
        }
    }
}

// Goal: collections and strings keep to their types: WRONGTYPE both ways, SET replaces a
// collection, DEL and FLUSHDB remove collections whole, EXISTS counts them. Method: one key
// of each kind and the commands that cross types.
#[test]
fn collections_as_keys_and_type_errors() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    query(c, &[b"RPUSH", b"l", b"1", b"2"]);
    query(c, &[b"SADD", b"s", b"x"]);
    query(c, &[b"HSET", b"h", b"f", b"v"]);
    query(c, &[b"ZADD", b"z", b"1.5", b"m"]);
    query(c, &[b"SET", b"str", b"v"]);
    assert_eq!(expect_err(c, &[b"GET", b"l"]), wrongtype);
    assert_eq!(expect_err(c, &[b"INCR", b"s"]), wrongtype);
    assert_eq!(expect_err(c, &[b"APPEND", b"h", b"x"]), wrongtype);
    assert_eq!(expect_err(c, &[b"LPUSH", b"s", b"x"]), wrongtype);
    assert_eq!(expect_err(c, &[b"SADD", b"str", b"x"]), wrongtype);
    assert_eq!(expect_err(c, &[b"HGET", b"z", b"m"]), wrongtype);
    assert_eq!(query(c, &[b"ZSCORE", b"z", b"m"]), bulk(b"1.5"));
    assert_eq!(
        query(c, &[b"MGET", b"l", b"str"]),
        Value::Array(vec![Value::Nil, bulk(b"v")])
    );
    assert_eq!(
        query(c, &[b"EXISTS", b"l", b"s", b"h", b"z", b"str", b"no"]),
        Value::Int(5)
    );
    assert_eq!(
        query(c, &[b"SETNX", b"l", b"x"]),
        Value::Int(0),
        "SETNX sees the list"
    );
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(5));
    assert_eq!(query(c, &[b"SET", b"l", b"now a string"]), Value::Okay);
    assert_eq!(query(c, &[b"GET", b"l"]), bulk(b"now a string"));
    assert_eq!(
        query(c, &[b"TYPE", b"l"]),
        Value::SimpleString("string".into())
    );
    assert_eq!(query(c, &[b"DEL", b"s", b"h"]), Value::Int(2));
    assert_eq!(query(c, &[b"SMEMBERS", b"s"]), Value::Array(vec![]));
    assert_eq!(
        query(c, &[b"TYPE", b"h"]),
        Value::SimpleString("none".into())
    );
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(3));
    assert_eq!(query(c, &[b"FLUSHDB"]), Value::Okay);
    assert_eq!(query(c, &[b"DBSIZE"]), Value::Int(0));
    assert_eq!(query(c, &[b"ZCARD", b"z"]), Value::Int(0));
}

// Goal: a collection command is atomic per key: concurrent LPUSH/RPUSH lose no element and
// SADD/SREM races keep the count exact. Method: 4 clients x 200 pushes of distinct elements to
// one list; then 4 clients SADD their own members to one set; compare with what was sent.
#[test]
fn concurrent_pushes_lose_nothing() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let mut c = server.client();
            s.spawn(move || {
                for i in 0..200u32 {
                    let e = format!("{t}:{i}");
                    let cmd: &[u8] = if i % 2 == 0 { b"LPUSH" } else { b"RPUSH" };
                    query(&mut c, &[cmd, b"list", e.as_bytes()]);
                    query(&mut c, &[b"SADD", b"set", e.as_bytes(), b"shared"]);
                }
            });
        }
    });
    let mut c = server.client();
    assert_eq!(query(&mut c, &[b"LLEN", b"list"]), Value::Int(800));
    let Value::Array(items) = query(&mut c, &[b"LRANGE", b"list", b"0", b"-1"]) else {
        panic!("LRANGE is an array");
    };
    let got: BTreeSet<Vec<u8>> = items
        .into_iter()
        .map(|v| match v {
            Value::BulkString(b) => b,
            other => panic!("LRANGE item {other:?}"),
        })
        .collect();
    let sent: BTreeSet<Vec<u8>> = (0..4u32)
        .flat_map(|t| (0..200u32).map(move |i| format!("{t}:{i}").into_bytes()))
        .collect();
    assert_eq!(got, sent, "every element once");
    assert_eq!(query(&mut c, &[b"SCARD", b"set"]), Value::Int(801));
}
