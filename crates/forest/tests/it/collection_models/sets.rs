//! The set model: SADD, SREM, SPOP (random: the model takes the server's pick once it checked
//! it), SMOVE, the STORE forms of SINTER/SUNION/SDIFF, and the reads SMEMBERS, SCARD,
//! SISMEMBER, SMISMEMBER, SRANDMEMBER, SINTER, SUNION, SDIFF, SINTERCARD, SSCAN.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::Rng;

use super::{check_count, expect, expect_unordered, read_int, read_query, Kind, State, R};

pub struct Sets;

type Set = BTreeSet<String>;

fn member(rng: &mut StdRng) -> String {
    format!("m{}", rng.random_range(0..10))
}

fn int(s: &str) -> i64 {
    s.parse().expect("the generator writes integers")
}

fn texts(r: &R) -> Result<Vec<String>, String> {
    r.items()?
        .iter()
        .map(|x| x.text().map(str::to_string))
        .collect()
}

/// SINTER, SUNION or SDIFF of `keys` (`op` is the command's name without its S and STORE).
fn combine(state: &State<Set>, op: &str, keys: &[String]) -> Set {
    let empty = Set::new();
    let get = |k: &String| state.get(k).unwrap_or(&empty);
    let mut out = get(&keys[0]).clone();
    for k in &keys[1..] {
        let other = get(k);
        out = match op {
            "INTER" => out.intersection(other).cloned().collect(),
            "UNION" => out.union(other).cloned().collect(),
            _ => out.difference(other).cloned().collect(),
        };
    }
    out
}

fn all(set: &Set) -> Vec<R> {
    set.iter().map(|m| R::Bulk(m.clone())).collect()
}

/// Checks a random pick: `count` None → one member or nil; else an array, distinct and as
/// long as it can be for a positive count, exactly `-count` long for a negative one.
fn check_random(set: Option<&Set>, count: Option<i64>, got: &R) -> Result<(), String> {
    let empty = Set::new();
    let set = set.unwrap_or(&empty);
    match count {
        None => match got {
            R::Nil if set.is_empty() => Ok(()),
            R::Bulk(m) if set.contains(m) => Ok(()),
            other => Err(format!("random member {other:?} not in {set:?}")),
        },
        Some(n) => {
            let picked = texts(got)?;
            if let Some(m) = picked.iter().find(|m| !set.contains(*m)) {
                return Err(format!("random member {m} not in {set:?}"));
            }
            let distinct: Set = picked.iter().cloned().collect();
            let ok = if n >= 0 {
                distinct.len() == picked.len() && picked.len() == (n as usize).min(set.len())
            } else if set.is_empty() {
                picked.is_empty()
            } else {
                picked.len() == n.unsigned_abs() as usize
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{picked:?} is no pick of {n} from {set:?}"))
            }
        }
    }
}

impl Kind for Sets {
    type Coll = Set;
    const TYPE: &'static str = "set";
    const KEYS: &'static [&'static str] = &["s0", "s1", "s2", "s3"];

    fn gen(_state: &State<Set>, rng: &mut StdRng) -> Vec<String> {
        let key = |rng: &mut StdRng| Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string();
        let mut args: Vec<String> = Vec::new();
        let word = |args: &mut Vec<String>, s: &str| args.push(s.to_string());
        match rng.random_range(0..26) {
            0..=6 => {
                word(
                    &mut args,
                    if rng.random_range(0..3) < 2 {
                        "SADD"
                    } else {
                        "SREM"
                    },
                );
                args.push(key(rng));
                for _ in 0..rng.random_range(1..=4) {
                    args.push(member(rng));
                }
            }
            7..=8 => {
                word(&mut args, "SPOP");
                args.push(key(rng));
                if rng.random_bool(0.5) {
                    args.push(rng.random_range(1..=3).to_string());
                }
            }
            9..=10 => {
                word(&mut args, "SMOVE");
                args.extend([key(rng), key(rng), member(rng)]);
            }
            11..=13 => {
                let op = ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"][rng.random_range(0..3)];
                word(&mut args, op);
                for _ in 0..rng.random_range(2..=4) {
                    args.push(key(rng));
                }
            }
            14..=15 => {
                let op = ["SINTER", "SUNION", "SDIFF"][rng.random_range(0..3)];
                word(&mut args, op);
                for _ in 0..rng.random_range(1..=3) {
                    args.push(key(rng));
                }
            }
            16 => {
                word(&mut args, "SINTERCARD");
                let n = rng.random_range(1..=3);
                args.push(n.to_string());
                for _ in 0..n {
                    args.push(key(rng));
                }
                if rng.random_bool(0.5) {
                    args.extend(["LIMIT".to_string(), rng.random_range(0..=3).to_string()]);
                }
            }
            17..=18 => {
                word(&mut args, "SMEMBERS");
                args.push(key(rng));
            }
            19 => {
                word(&mut args, "SCARD");
                args.push(key(rng));
            }
            20 => {
                word(&mut args, "SISMEMBER");
                args.extend([key(rng), member(rng)]);
            }
            21 => {
                word(&mut args, "SMISMEMBER");
                args.push(key(rng));
                for _ in 0..rng.random_range(1..=3) {
                    args.push(member(rng));
                }
            }
            22..=23 => {
                word(&mut args, "SRANDMEMBER");
                args.push(key(rng));
                if rng.random_bool(0.7) {
                    args.push(rng.random_range(-4..=12).to_string());
                }
            }
            _ => {
                word(&mut args, "SSCAN");
                args.extend([
                    key(rng),
                    "0".to_string(),
                    "COUNT".to_string(),
                    "100".to_string(),
                ]);
            }
        }
        args
    }

    fn apply(state: &mut State<Set>, args: &[String], got: Option<&R>) -> Result<(), String> {
        let key = args[1].clone();
        let card = state.get(&key).map_or(0, BTreeSet::len);
        match args[0].as_str() {
            "SADD" => {
                let set = state.entry(key).or_default();
                let added = args[2..]
                    .iter()
                    .filter(|m| set.insert((*m).clone()))
                    .count();
                expect(got, R::Int(added as i64))
            }
            "SREM" => {
                let Some(set) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let removed = args[2..].iter().filter(|m| set.remove(*m)).count();
                if set.is_empty() {
                    state.remove(&key);
                }
                expect(got, R::Int(removed as i64))
            }
            "SPOP" => {
                let Some(got) = got else {
                    return Err("SPOP's effect depends on its reply".into());
                };
                let count = args.get(2).map(|c| int(c));
                if count.is_some() && card == 0 {
                    // Redis answers an empty array for a count and a missing key.
                    return expect(Some(got), R::Arr(Vec::new()));
                }
                check_random(state.get(&key), count, got)?;
                let popped = match got {
                    R::Bulk(m) => vec![m.clone()],
                    R::Nil => Vec::new(),
                    other => texts(other)?,
                };
                if let Some(set) = state.get_mut(&key) {
                    for m in &popped {
                        set.remove(m);
                    }
                    if set.is_empty() {
                        state.remove(&key);
                    }
                }
                Ok(())
            }
            "SMOVE" => {
                let (from, to, m) = (&args[1], &args[2], &args[3]);
                if !state.get(from).is_some_and(|s| s.contains(m)) {
                    return expect(got, R::Int(0));
                }
                if from != to {
                    let set = state.get_mut(from).expect("the source");
                    set.remove(m);
                    if set.is_empty() {
                        state.remove(from);
                    }
                    state.entry(to.clone()).or_default().insert(m.clone());
                }
                expect(got, R::Int(1))
            }
            cmd @ ("SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE") => {
                let result = combine(state, &cmd[1..cmd.len() - 5], &args[2..]);
                let n = result.len();
                if result.is_empty() {
                    state.remove(&key);
                } else {
                    state.insert(key, result);
                }
                expect(got, R::Int(n as i64))
            }
            cmd @ ("SINTER" | "SUNION" | "SDIFF") => {
                let result = combine(state, &cmd[1..], &args[1..]);
                expect_unordered(got, all(&result))
            }
            "SINTERCARD" => {
                let n = int(&args[1]) as usize;
                let result = combine(state, "INTER", &args[2..2 + n]);
                let limit = args.get(3 + n).map_or(0, |l| int(l) as usize);
                let size = if limit == 0 {
                    result.len()
                } else {
                    result.len().min(limit)
                };
                expect(got, R::Int(size as i64))
            }
            "SMEMBERS" => expect_unordered(got, state.get(&key).map_or(Vec::new(), all)),
            "SCARD" => expect(got, R::Int(card as i64)),
            "SISMEMBER" => {
                let is = state.get(&key).is_some_and(|s| s.contains(&args[2]));
                expect(got, R::Int(i64::from(is)))
            }
            "SMISMEMBER" => {
                let set = state.get(&key);
                let want = args[2..]
                    .iter()
                    .map(|m| R::Int(i64::from(set.is_some_and(|s| s.contains(m)))))
                    .collect();
                expect(got, R::Arr(want))
            }
            "SRANDMEMBER" => match got {
                Some(got) => check_random(state.get(&key), args.get(2).map(|c| int(c)), got),
                None => Ok(()),
            },
            "SSCAN" => {
                let Some(got) = got else { return Ok(()) };
                let page = got.items()?;
                let (cursor, members) = match page {
                    [cursor, members] => (cursor.text()?, texts(members)?),
                    _ => return Err(format!("SSCAN page {got:?}")),
                };
                let empty = Set::new();
                let set = state.get(&key).unwrap_or(&empty);
                let seen: Set = members.iter().cloned().collect();
                // A page holds members only, once each; a finished scan (cursor 0) holds all.
                if !seen.is_subset(set)
                    || seen.len() != members.len()
                    || (cursor == "0" && seen != *set)
                {
                    return Err(format!("SSCAN page {got:?} of {set:?}"));
                }
                Ok(())
            }
            other => Err(format!("the set model has no command {other}")),
        }
    }

    fn needs_reply(args: &[String]) -> bool {
        args[0] == "SPOP"
    }

    fn explains(before: &State<Set>, args: &[String], after: &State<Set>) -> bool {
        if args[0] != "SPOP" {
            let mut state = before.clone();
            return Self::apply(&mut state, args, None).is_ok() && state == *after;
        }
        // Some members of the key are gone, as many as SPOP takes; no other key changed.
        let key = &args[1];
        let count = args.get(2).map_or(1, |c| int(c) as usize);
        let (Some(was), now) = (before.get(key), after.get(key).cloned().unwrap_or_default())
        else {
            return false;
        };
        let others = |s: &State<Set>| {
            let mut s = s.clone();
            s.remove(key);
            s
        };
        now.is_subset(was)
            && was.len() - now.len() == count.min(was.len())
            && others(before) == others(after)
    }

    fn read(con: &mut redis::Connection, key: &str) -> Result<Set, String> {
        let n = read_int(con, &["SCARD", key])?;
        let members = texts(&read_query(con, &["SMEMBERS", key])?)?;
        check_count(n, members.len(), &format!("SCARD {key}"))?;
        let set: Set = members.iter().cloned().collect();
        if set.len() != members.len() {
            return Err(format!("SMEMBERS {key} lists a member twice: {members:?}"));
        }
        Ok(set)
    }
}
