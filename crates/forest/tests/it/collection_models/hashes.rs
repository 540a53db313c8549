//! The hash model: HSET, HMSET, HSETNX, HDEL of many fields, HINCRBY, HINCRBYFLOAT, and the
//! reads HGET, HMGET, HGETALL, HLEN, HEXISTS, HKEYS, HVALS, HSTRLEN, HRANDFIELD, HSCAN.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::Rng;

use super::{
    b, check_count, e, expect, expect_pairs_unordered, expect_unordered, pairs_of, read_int,
    read_query, Kind, State, R,
};

pub struct Hashes;

type Hash = BTreeMap<String, String>;

fn field(rng: &mut StdRng) -> String {
    format!("f{}", rng.random_range(0..8))
}

/// An integer (which HINCRBY and HINCRBYFLOAT take) or a word (which they refuse).
fn value(rng: &mut StdRng) -> String {
    if rng.random_bool(0.5) {
        rng.random_range(-20..100).to_string()
    } else {
        format!("v{}", "x".repeat(rng.random_range(0..12)))
    }
}

fn int(s: &str) -> i64 {
    s.parse().expect("the generator writes integers")
}

/// Redis's `string2ll`: a canonical decimal 64-bit integer only.
fn redis_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok().filter(|n| n.to_string() == s)
}

/// A value HINCRBYFLOAT accepts: the model's values are integers, words, or what an
/// HINCRBYFLOAT printed.
fn redis_float(s: &str) -> Option<f64> {
    if s.starts_with('v') {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// HINCRBYFLOAT's print of a value: the model's increments keep every value a short binary
/// fraction, which `%.17Lf` with its trailing zeros cut prints as Rust does ("-0" as "0").
fn print_float(f: f64) -> String {
    if f == 0.0 {
        "0".to_string()
    } else {
        format!("{f}")
    }
}

fn texts(r: &R) -> Result<Vec<String>, String> {
    r.items()?
        .iter()
        .map(|x| x.text().map(str::to_string))
        .collect()
}

/// Checks an HRANDFIELD reply (`count` None: a field or nil; WITHVALUES: pairs).
fn check_random(
    hash: Option<&Hash>,
    count: Option<i64>,
    with_values: bool,
    got: &R,
) -> Result<(), String> {
    let empty = Hash::new();
    let hash = hash.unwrap_or(&empty);
    let Some(n) = count else {
        return match got {
            R::Nil if hash.is_empty() => Ok(()),
            R::Bulk(f) if hash.contains_key(f) => Ok(()),
            other => Err(format!("random field {other:?} not in {hash:?}")),
        };
    };
    let picked: Vec<(String, String)> = if with_values {
        pairs_of(got)?
    } else {
        texts(got)?
            .into_iter()
            .map(|f| (f, String::new()))
            .collect()
    };
    for (f, v) in &picked {
        match hash.get(f) {
            Some(value) if !with_values || value == v => {}
            _ => return Err(format!("random field {f} (value {v:?}) not in {hash:?}")),
        }
    }
    let distinct: std::collections::BTreeSet<&String> = picked.iter().map(|(f, _)| f).collect();
    let ok = if n >= 0 {
        distinct.len() == picked.len() && picked.len() == (n as usize).min(hash.len())
    } else if hash.is_empty() {
        picked.is_empty()
    } else {
        picked.len() == n.unsigned_abs() as usize
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{got:?} is no pick of {n} from {hash:?}"))
    }
}

impl Kind for Hashes {
    type Coll = Hash;
    const TYPE: &'static str = "hash";
    const KEYS: &'static [&'static str] = &["h0", "h1", "h2"];

    fn gen(_state: &State<Hash>, rng: &mut StdRng) -> Vec<String> {
        let key = Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string();
        let mut args: Vec<String> = Vec::new();
        let word = |args: &mut Vec<String>, s: &str| args.push(s.to_string());
        match rng.random_range(0..26) {
            0..=5 => {
                word(
                    &mut args,
                    if rng.random_range(0..4) < 3 {
                        "HSET"
                    } else {
                        "HMSET"
                    },
                );
                args.push(key);
                for _ in 0..rng.random_range(1..=3) {
                    args.extend([field(rng), value(rng)]);
                }
            }
            6 => {
                word(&mut args, "HSETNX");
                args.extend([key, field(rng), value(rng)]);
            }
            7..=9 => {
                word(&mut args, "HDEL");
                args.push(key);
                for _ in 0..rng.random_range(1..=4) {
                    args.push(field(rng));
                }
            }
            10..=11 => {
                word(&mut args, "HINCRBY");
                args.extend([key, field(rng), rng.random_range(-10..=10).to_string()]);
            }
            12 => {
                word(&mut args, "HINCRBYFLOAT");
                let by = ["1.5", "-0.25", "2", "0.125", "-3"][rng.random_range(0..5)];
                args.extend([key, field(rng), by.to_string()]);
            }
            13..=14 => {
                word(&mut args, "HGET");
                args.extend([key, field(rng)]);
            }
            15 => {
                word(&mut args, "HMGET");
                args.push(key);
                for _ in 0..rng.random_range(1..=3) {
                    args.push(field(rng));
                }
            }
            16..=17 => {
                word(&mut args, "HGETALL");
                args.push(key);
            }
            18 => {
                word(
                    &mut args,
                    ["HLEN", "HKEYS", "HVALS"][rng.random_range(0..3)],
                );
                args.push(key);
            }
            19 => {
                word(&mut args, "HEXISTS");
                args.extend([key, field(rng)]);
            }
            20 => {
                word(&mut args, "HSTRLEN");
                args.extend([key, field(rng)]);
            }
            21..=23 => {
                word(&mut args, "HRANDFIELD");
                args.push(key);
                if rng.random_bool(0.7) {
                    args.push(rng.random_range(-4..=10).to_string());
                    if rng.random_bool(0.5) {
                        word(&mut args, "WITHVALUES");
                    }
                }
            }
            _ => {
                word(&mut args, "HSCAN");
                args.extend([key, "0".to_string(), "COUNT".to_string(), "100".to_string()]);
            }
        }
        args
    }

    fn apply(state: &mut State<Hash>, args: &[String], got: Option<&R>) -> Result<(), String> {
        let key = args[1].clone();
        let hash = state.get(&key);
        match args[0].as_str() {
            cmd @ ("HSET" | "HMSET") => {
                let hash = state.entry(key).or_default();
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += i64::from(hash.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                expect(got, if cmd == "HSET" { R::Int(added) } else { R::Ok })
            }
            "HSETNX" => {
                let hash = state.entry(key).or_default();
                let new = !hash.contains_key(&args[2]);
                if new {
                    hash.insert(args[2].clone(), args[3].clone());
                }
                expect(got, R::Int(i64::from(new)))
            }
            "HDEL" => {
                let Some(hash) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let removed = args[2..]
                    .iter()
                    .filter(|f| hash.remove(*f).is_some())
                    .count();
                if hash.is_empty() {
                    state.remove(&key);
                }
                expect(got, R::Int(removed as i64))
            }
            "HINCRBY" => {
                let old = hash
                    .and_then(|h| h.get(&args[2]))
                    .map_or("0", String::as_str);
                let Some(old) = redis_int(old) else {
                    return expect(got, e("ERR hash value is not an integer"));
                };
                let new = old + int(&args[3]);
                state
                    .entry(key)
                    .or_default()
                    .insert(args[2].clone(), new.to_string());
                expect(got, R::Int(new))
            }
            "HINCRBYFLOAT" => {
                let old = hash
                    .and_then(|h| h.get(&args[2]))
                    .map_or("0", String::as_str);
                let Some(old) = redis_float(old) else {
                    return expect(got, e("ERR hash value is not a float"));
                };
                let by: f64 = args[3].parse().expect("the generator writes numbers");
                let new = print_float(old + by);
                state
                    .entry(key)
                    .or_default()
                    .insert(args[2].clone(), new.clone());
                expect(got, b(new))
            }
            "HGET" => expect(
                got,
                hash.and_then(|h| h.get(&args[2]))
                    .map_or(R::Nil, |v| b(v.clone())),
            ),
            "HMGET" => {
                let want = args[2..]
                    .iter()
                    .map(|f| hash.and_then(|h| h.get(f)).map_or(R::Nil, |v| b(v.clone())))
                    .collect();
                expect(got, R::Arr(want))
            }
            "HGETALL" => {
                let want = hash.map_or(Vec::new(), |h| {
                    h.iter().map(|(f, v)| (f.clone(), v.clone())).collect()
                });
                expect_pairs_unordered(got, want)
            }
            "HLEN" => expect(got, R::Int(hash.map_or(0, BTreeMap::len) as i64)),
            "HKEYS" => expect_unordered(
                got,
                hash.map_or(Vec::new(), |h| h.keys().map(|f| b(f.clone())).collect()),
            ),
            "HVALS" => expect_unordered(
                got,
                hash.map_or(Vec::new(), |h| h.values().map(|v| b(v.clone())).collect()),
            ),
            "HEXISTS" => expect(
                got,
                R::Int(i64::from(hash.is_some_and(|h| h.contains_key(&args[2])))),
            ),
            "HSTRLEN" => {
                let n = hash.and_then(|h| h.get(&args[2])).map_or(0, String::len);
                expect(got, R::Int(n as i64))
            }
            "HRANDFIELD" => match got {
                Some(got) => check_random(hash, args.get(2).map(|c| int(c)), args.len() > 3, got),
                None => Ok(()),
            },
            "HSCAN" => {
                let Some(got) = got else { return Ok(()) };
                let (cursor, pairs) = match got.items()? {
                    [cursor, page] => (cursor.text()?, pairs_of(page)?),
                    _ => return Err(format!("HSCAN page {got:?}")),
                };
                let empty = Hash::new();
                let hash = hash.unwrap_or(&empty);
                let seen: Hash = pairs.iter().cloned().collect();
                let whole = cursor != "0" || seen == *hash;
                let each_once = seen.len() == pairs.len();
                if !whole || !each_once || seen.iter().any(|(f, v)| hash.get(f) != Some(v)) {
                    return Err(format!("HSCAN page {got:?} of {hash:?}"));
                }
                Ok(())
            }
            other => Err(format!("the hash model has no command {other}")),
        }
    }

    fn read(con: &mut redis::Connection, key: &str) -> Result<Hash, String> {
        let n = read_int(con, &["HLEN", key])?;
        let pairs = pairs_of(&read_query(con, &["HGETALL", key])?)?;
        check_count(n, pairs.len(), &format!("HLEN {key}"))?;
        let hash: Hash = pairs.iter().cloned().collect();
        if hash.len() != pairs.len() {
            return Err(format!("HGETALL {key} lists a field twice: {pairs:?}"));
        }
        Ok(hash)
    }
}
