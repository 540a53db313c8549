//! The sorted-set model: ZADD with NX/XX/GT/LT/CH/INCR, ZINCRBY, ZREM, the ZREMRANGEBY*
//! commands, pops (ZPOPMIN/MAX, ZMPOP, BZPOPMIN/MAX), the STORE forms (ZRANGESTORE,
//! ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE with WEIGHTS and AGGREGATE), and the reads ZRANGE in
//! all its forms, ZRANGEBYSCORE, ZREVRANGE*, ZRANGEBYLEX, ZCOUNT, ZLEXCOUNT, ZSCORE, ZMSCORE,
//! ZRANK, ZREVRANK, ZCARD, ZUNION/ZINTER/ZDIFF, ZINTERCARD, ZRANDMEMBER.
//!
//! Scores are multiples of 1/8 within ±40 and weights positive, so every sum is exact and
//! no -0 arises (whose print would depend on the order Redis aggregates in). Lex commands
//! run only on a key whose members all have one score (Redis leaves them unspecified
//! otherwise).

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::Rng;

use super::{b, check_count, expect, pairs_of, read_int, read_query, Kind, State, R};
use crate::collection_models::lists::range;

pub struct Zsets;

/// ZADD's option sets the generator picks from (the valid combinations).
const ZADD_FLAGS: [&[&str]; 10] = [
    &[],
    &[],
    &["NX"],
    &["XX"],
    &["GT"],
    &["LT"],
    &["XX", "GT"],
    &["XX", "LT"],
    &["CH"],
    &["GT", "CH"],
];

type Zset = BTreeMap<String, f64>;

fn member(rng: &mut StdRng) -> String {
    ((b'a' + rng.random_range(0..8u8)) as char).to_string()
}

fn score(rng: &mut StdRng) -> String {
    ["-2", "-1.5", "0", "0.5", "1", "1", "2", "2.5", "3"][rng.random_range(0..9)].to_string()
}

/// How Redis prints a score (shortest text that reads back; the model's are short fractions).
fn print(f: f64) -> String {
    format!("{f}")
}

fn num(s: &str) -> f64 {
    s.parse().expect("the generator writes numbers")
}

fn int(s: &str) -> i64 {
    s.parse().expect("the generator writes integers")
}

/// Members by (score, member), as a sorted set orders them.
fn ordered(z: &Zset) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
    v.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .expect("no NaN")
            .then_with(|| a.0.cmp(&b.0))
    });
    v
}

fn score_bound(rng: &mut StdRng) -> String {
    match rng.random_range(0..8) {
        0 => "-inf".to_string(),
        1 => "+inf".to_string(),
        2..=4 => format!("({}", score(rng)),
        _ => score(rng),
    }
}

fn lex_bound(rng: &mut StdRng) -> String {
    match rng.random_range(0..6) {
        0 => "-".to_string(),
        1 => "+".to_string(),
        2..=3 => format!("[{}", member(rng)),
        _ => format!("({}", member(rng)),
    }
}

/// Whether score `s` is within the bound as the lower (`low`) or upper end.
fn in_score(bound: &str, s: f64, low: bool) -> bool {
    let (open, v) = match bound.strip_prefix('(') {
        Some(rest) => (true, rest),
        None => (false, bound),
    };
    let v: f64 = match v {
        "-inf" => f64::NEG_INFINITY,
        "+inf" | "inf" => f64::INFINITY,
        v => num(v),
    };
    match (low, open) {
        (true, true) => s > v,
        (true, false) => s >= v,
        (false, true) => s < v,
        (false, false) => s <= v,
    }
}

fn in_lex(bound: &str, m: &str, low: bool) -> bool {
    match bound {
        "-" => low,
        "+" => !low,
        _ => {
            let (open, v) = (bound.starts_with('('), &bound[1..]);
            match (low, open) {
                (true, true) => m > v,
                (true, false) => m >= v,
                (false, true) => m < v,
                (false, false) => m <= v,
            }
        }
    }
}

/// The members (in reply order) that `ZRANGE key a b [BYSCORE|BYLEX] [REV] [LIMIT o c]`
/// selects; `opts` are the words after `a b`.
fn select(z: Option<&Zset>, a: &str, b: &str, opts: &[String]) -> Vec<(String, f64)> {
    let Some(z) = z else { return Vec::new() };
    let has = |w: &str| opts.iter().any(|o| o == w);
    let rev = has("REV");
    let mut all = ordered(z);
    if rev {
        all.reverse();
    }
    let (low, high) = if rev { (b, a) } else { (a, b) };
    let mut picked: Vec<(String, f64)> = if has("BYSCORE") {
        all.into_iter()
            .filter(|(_, s)| in_score(low, *s, true) && in_score(high, *s, false))
            .collect()
    } else if has("BYLEX") {
        all.into_iter()
            .filter(|(m, _)| in_lex(low, m, true) && in_lex(high, m, false))
            .collect()
    } else {
        match range(int(a), int(b), all.len()) {
            Some((start, stop)) => all[start..=stop].to_vec(),
            None => Vec::new(),
        }
    };
    if let Some(i) = opts.iter().position(|o| o == "LIMIT") {
        let (offset, count) = (int(&opts[i + 1]), int(&opts[i + 2]));
        picked = if offset < 0 {
            Vec::new()
        } else {
            let rest = picked.into_iter().skip(offset as usize);
            if count < 0 {
                rest.collect()
            } else {
                rest.take(count as usize).collect()
            }
        };
    }
    picked
}

/// A reply of members, with their scores (flat) if `with_scores`.
fn listed(items: &[(String, f64)], with_scores: bool) -> R {
    let mut out = Vec::new();
    for (m, s) in items {
        out.push(b(m.clone()));
        if with_scores {
            out.push(b(print(*s)));
        }
    }
    R::Arr(out)
}

/// The result of ZUNION / ZINTER / ZDIFF over `keys`, with `opts` (WEIGHTS, AGGREGATE).
fn combine(state: &State<Zset>, op: &str, keys: &[String], opts: &[String]) -> Zset {
    let empty = Zset::new();
    let sets: Vec<&Zset> = keys
        .iter()
        .map(|k| state.get(k).unwrap_or(&empty))
        .collect();
    let mut weights = vec![1.0; keys.len()];
    let mut aggregate = "SUM";
    let mut i = 0;
    while i < opts.len() {
        match opts[i].as_str() {
            "WEIGHTS" => {
                for (j, w) in weights.iter_mut().enumerate() {
                    *w = num(&opts[i + 1 + j]);
                }
                i += 1 + keys.len();
            }
            "AGGREGATE" => {
                aggregate = if opts[i + 1] == "MIN" {
                    "MIN"
                } else if opts[i + 1] == "MAX" {
                    "MAX"
                } else {
                    "SUM"
                };
                i += 2;
            }
            _ => i += 1,
        }
    }
    let agg = |a: f64, b: f64| match aggregate {
        "MIN" => a.min(b),
        "MAX" => a.max(b),
        _ => a + b,
    };
    match op {
        "DIFF" => sets[0]
            .iter()
            .filter(|(m, _)| !sets[1..].iter().any(|s| s.contains_key(*m)))
            .map(|(m, s)| (m.clone(), *s))
            .collect(),
        "INTER" => sets[0]
            .keys()
            .filter(|m| sets.iter().all(|s| s.contains_key(*m)))
            .map(|m| {
                let scores = sets.iter().zip(&weights).map(|(s, w)| s[m] * w);
                (m.clone(), scores.reduce(agg).expect("one set at least"))
            })
            .collect(),
        _ => {
            let mut out = Zset::new();
            for (s, w) in sets.iter().zip(&weights) {
                for (m, score) in s.iter() {
                    let v = score * w;
                    let merged = out.get(m).map_or(v, |old| agg(*old, v));
                    out.insert(m.clone(), merged);
                }
            }
            out
        }
    }
}

fn uniform(z: Option<&Zset>) -> bool {
    z.is_none_or(|z| z.values().all(|s| Some(s) == z.values().next()))
}

/// Pops `count` members from the low (`min`) or high end of `key`; removes an emptied set.
fn pop(state: &mut State<Zset>, key: &str, min: bool, count: usize) -> Vec<(String, f64)> {
    let Some(z) = state.get_mut(key) else {
        return Vec::new();
    };
    let mut order = ordered(z);
    if !min {
        order.reverse();
    }
    order.truncate(count);
    for (m, _) in &order {
        z.remove(m);
    }
    if z.is_empty() {
        state.remove(key);
    }
    order
}

fn store(state: &mut State<Zset>, dst: &str, result: Zset) -> R {
    let n = result.len();
    if result.is_empty() {
        state.remove(dst);
    } else {
        state.insert(dst.to_string(), result);
    }
    R::Int(n as i64)
}

/// Checks a ZRANDMEMBER reply.
fn check_random(
    z: Option<&Zset>,
    count: Option<i64>,
    with_scores: bool,
    got: &R,
) -> Result<(), String> {
    let empty = Zset::new();
    let z = z.unwrap_or(&empty);
    let Some(n) = count else {
        return match got {
            R::Nil if z.is_empty() => Ok(()),
            R::Bulk(m) if z.contains_key(m) => Ok(()),
            other => Err(format!("random member {other:?} not in {z:?}")),
        };
    };
    let picked: Vec<(String, String)> = if with_scores {
        pairs_of(got)?
    } else {
        got.items()?
            .iter()
            .map(|m| Ok((m.text()?.to_string(), String::new())))
            .collect::<Result<_, String>>()?
    };
    for (m, s) in &picked {
        match z.get(m) {
            Some(score) if !with_scores || print(*score) == *s => {}
            _ => return Err(format!("random member {m} (score {s:?}) not in {z:?}")),
        }
    }
    let distinct: std::collections::BTreeSet<&String> = picked.iter().map(|(m, _)| m).collect();
    let ok = if n >= 0 {
        distinct.len() == picked.len() && picked.len() == (n as usize).min(z.len())
    } else if z.is_empty() {
        picked.is_empty()
    } else {
        picked.len() == n.unsigned_abs() as usize
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{got:?} is no pick of {n} from {z:?}"))
    }
}

/// LIMIT offset count, sometimes.
fn limit(rng: &mut StdRng, args: &mut Vec<String>) {
    if rng.random_bool(0.3) {
        args.extend([
            "LIMIT".to_string(),
            rng.random_range(0..=3).to_string(),
            rng.random_range(-1..=3).to_string(),
        ]);
    }
}

impl Kind for Zsets {
    type Coll = Zset;
    const TYPE: &'static str = "zset";
    const KEYS: &'static [&'static str] = &["z0", "z1", "z2"];

    fn gen(state: &State<Zset>, rng: &mut StdRng) -> Vec<String> {
        let key = |rng: &mut StdRng| Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string();
        let k = key(rng);
        let mut args: Vec<String> = Vec::new();
        let w = |args: &mut Vec<String>, s: &str| args.push(s.to_string());
        let mut roll = rng.random_range(0..40);
        if (30..=32).contains(&roll) && !uniform(state.get(&k)) {
            roll = 0; // a lex command needs one score throughout: a ZADD instead
        }
        match roll {
            0..=7 => {
                w(&mut args, "ZADD");
                args.push(k);
                let flags = ZADD_FLAGS[rng.random_range(0..ZADD_FLAGS.len())];
                args.extend(flags.iter().map(|f| f.to_string()));
                if rng.random_bool(0.2) {
                    w(&mut args, "INCR");
                    args.extend([score(rng), member(rng)]);
                } else {
                    for _ in 0..rng.random_range(1..=3) {
                        args.extend([score(rng), member(rng)]);
                    }
                }
            }
            8..=9 => {
                w(&mut args, "ZINCRBY");
                args.extend([k, score(rng), member(rng)]);
            }
            10..=11 => {
                w(&mut args, "ZREM");
                args.push(k);
                for _ in 0..rng.random_range(1..=3) {
                    args.push(member(rng));
                }
            }
            12 => {
                w(&mut args, "ZREMRANGEBYSCORE");
                args.extend([k, score_bound(rng), score_bound(rng)]);
            }
            13 => {
                w(&mut args, "ZREMRANGEBYRANK");
                args.extend([
                    k,
                    rng.random_range(-4..=4).to_string(),
                    rng.random_range(-4..=4).to_string(),
                ]);
            }
            14..=15 => {
                w(
                    &mut args,
                    if rng.random_bool(0.5) {
                        "ZPOPMIN"
                    } else {
                        "ZPOPMAX"
                    },
                );
                args.push(k);
                if rng.random_bool(0.5) {
                    args.push(rng.random_range(1..=3).to_string());
                }
            }
            16 => {
                w(&mut args, "ZMPOP");
                let n = rng.random_range(1..=3);
                args.push(n.to_string());
                args.push(k);
                for _ in 1..n {
                    args.push(key(rng));
                }
                w(&mut args, if rng.random_bool(0.5) { "MIN" } else { "MAX" });
                if rng.random_bool(0.5) {
                    args.extend(["COUNT".to_string(), rng.random_range(1..=3).to_string()]);
                }
            }
            17 => {
                w(
                    &mut args,
                    if rng.random_bool(0.5) {
                        "BZPOPMIN"
                    } else {
                        "BZPOPMAX"
                    },
                );
                args.extend([k, key(rng), "0.01".to_string()]);
            }
            18 => {
                w(&mut args, "ZRANGESTORE");
                args.extend([key(rng), k]);
                if rng.random_bool(0.5) {
                    args.extend([score_bound(rng), score_bound(rng), "BYSCORE".to_string()]);
                } else {
                    args.extend([
                        rng.random_range(-3..=3).to_string(),
                        rng.random_range(-3..=3).to_string(),
                    ]);
                }
                if rng.random_bool(0.3) {
                    w(&mut args, "REV");
                }
                if args.contains(&"BYSCORE".to_string()) {
                    limit(rng, &mut args);
                }
            }
            19..=21 => {
                let op = ["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"][rng.random_range(0..3)];
                w(&mut args, op);
                args.push(key(rng));
                let n = rng.random_range(1..=3);
                args.push(n.to_string());
                args.push(k);
                for _ in 1..n {
                    args.push(key(rng));
                }
                if op != "ZDIFFSTORE" {
                    weights_aggregate(rng, n, &mut args);
                }
            }
            22 => {
                let op = ["ZUNION", "ZINTER", "ZDIFF"][rng.random_range(0..3)];
                w(&mut args, op);
                let n = rng.random_range(1..=3);
                args.push(n.to_string());
                args.push(k);
                for _ in 1..n {
                    args.push(key(rng));
                }
                if op != "ZDIFF" {
                    weights_aggregate(rng, n, &mut args);
                }
                w(&mut args, "WITHSCORES");
            }
            23 => {
                w(&mut args, "ZINTERCARD");
                args.extend(["2".to_string(), k, key(rng)]);
                if rng.random_bool(0.5) {
                    args.extend(["LIMIT".to_string(), rng.random_range(0..=2).to_string()]);
                }
            }
            24..=25 => {
                w(&mut args, "ZRANGE");
                args.push(k);
                match rng.random_range(0..2) {
                    0 => {
                        args.extend([
                            rng.random_range(-4..=4).to_string(),
                            rng.random_range(-4..=4).to_string(),
                        ]);
                        if rng.random_bool(0.3) {
                            w(&mut args, "REV");
                        }
                    }
                    _ => {
                        args.extend([score_bound(rng), score_bound(rng), "BYSCORE".to_string()]);
                        if rng.random_bool(0.3) {
                            w(&mut args, "REV");
                        }
                        limit(rng, &mut args);
                    }
                }
                if rng.random_bool(0.5) {
                    w(&mut args, "WITHSCORES");
                }
            }
            26 => {
                w(
                    &mut args,
                    if rng.random_bool(0.5) {
                        "ZRANGEBYSCORE"
                    } else {
                        "ZREVRANGEBYSCORE"
                    },
                );
                args.extend([k, score_bound(rng), score_bound(rng)]);
                if rng.random_bool(0.5) {
                    w(&mut args, "WITHSCORES");
                }
                limit(rng, &mut args);
            }
            27 => {
                w(&mut args, "ZREVRANGE");
                args.extend([
                    k,
                    rng.random_range(-4..=4).to_string(),
                    rng.random_range(-4..=4).to_string(),
                ]);
                if rng.random_bool(0.5) {
                    w(&mut args, "WITHSCORES");
                }
            }
            28 => {
                w(&mut args, "ZCOUNT");
                args.extend([k, score_bound(rng), score_bound(rng)]);
            }
            29 => {
                w(&mut args, "ZCARD");
                args.push(k);
            }
            30 => {
                let cmd = ["ZRANGEBYLEX", "ZREVRANGEBYLEX"][rng.random_range(0..2)];
                w(&mut args, cmd);
                args.extend([k, lex_bound(rng), lex_bound(rng)]);
                limit(rng, &mut args);
            }
            31 => {
                w(&mut args, "ZLEXCOUNT");
                args.extend([k, lex_bound(rng), lex_bound(rng)]);
            }
            32 => {
                w(&mut args, "ZREMRANGEBYLEX");
                args.extend([k, lex_bound(rng), lex_bound(rng)]);
            }
            33..=34 => {
                w(
                    &mut args,
                    ["ZSCORE", "ZRANK", "ZREVRANK"][rng.random_range(0..3)],
                );
                args.extend([k, member(rng)]);
            }
            35 => {
                w(&mut args, "ZMSCORE");
                args.push(k);
                for _ in 0..rng.random_range(1..=3) {
                    args.push(member(rng));
                }
            }
            _ => {
                w(&mut args, "ZRANDMEMBER");
                args.push(k);
                if rng.random_bool(0.7) {
                    args.push(rng.random_range(-4..=10).to_string());
                    if rng.random_bool(0.5) {
                        w(&mut args, "WITHSCORES");
                    }
                }
            }
        }
        args
    }

    fn apply(state: &mut State<Zset>, args: &[String], got: Option<&R>) -> Result<(), String> {
        let key = args[1].clone();
        let z = state.get(&key);
        let has = |w: &str| args.iter().any(|a| a == w);
        match args[0].as_str() {
            "ZADD" => {
                let flags = ["NX", "XX", "GT", "LT", "CH", "INCR"];
                let first_pair = args[2..]
                    .iter()
                    .position(|a| !flags.contains(&a.as_str()))
                    .expect("pairs")
                    + 2;
                let (nx, xx, gt, lt, ch, incr) = (
                    has("NX"),
                    has("XX"),
                    has("GT"),
                    has("LT"),
                    has("CH"),
                    has("INCR"),
                );
                let mut zset = z.cloned().unwrap_or_default();
                let (mut added, mut updated, mut incr_reply) = (0, 0, R::Nil);
                for pair in args[first_pair..].chunks(2) {
                    let (mut s, m) = (num(&pair[0]), &pair[1]);
                    match zset.get(m).copied() {
                        Some(old) => {
                            if nx {
                                continue;
                            }
                            if incr {
                                s += old;
                            }
                            if (lt && s >= old) || (gt && s <= old) {
                                continue;
                            }
                            incr_reply = b(print(s));
                            if s != old {
                                zset.insert(m.clone(), s);
                                updated += 1;
                            }
                        }
                        None if xx => {}
                        None => {
                            zset.insert(m.clone(), s);
                            added += 1;
                            incr_reply = b(print(s));
                        }
                    }
                }
                if !zset.is_empty() {
                    state.insert(key, zset);
                }
                let want = if incr {
                    incr_reply
                } else if ch {
                    R::Int(added + updated)
                } else {
                    R::Int(added)
                };
                expect(got, want)
            }
            "ZINCRBY" => {
                let s = z.and_then(|z| z.get(&args[3])).copied().unwrap_or(0.0) + num(&args[2]);
                state.entry(key).or_default().insert(args[3].clone(), s);
                expect(got, b(print(s)))
            }
            "ZREM" => {
                let Some(zset) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let removed = args[2..]
                    .iter()
                    .filter(|m| zset.remove(*m).is_some())
                    .count();
                if zset.is_empty() {
                    state.remove(&key);
                }
                expect(got, R::Int(removed as i64))
            }
            cmd @ ("ZREMRANGEBYSCORE" | "ZREMRANGEBYRANK" | "ZREMRANGEBYLEX") => {
                let by = match cmd {
                    "ZREMRANGEBYSCORE" => vec!["BYSCORE".to_string()],
                    "ZREMRANGEBYLEX" => vec!["BYLEX".to_string()],
                    _ => Vec::new(),
                };
                let gone = select(z, &args[2], &args[3], &by);
                if let Some(zset) = state.get_mut(&key) {
                    for (m, _) in &gone {
                        zset.remove(m);
                    }
                    if zset.is_empty() {
                        state.remove(&key);
                    }
                }
                expect(got, R::Int(gone.len() as i64))
            }
            cmd @ ("ZPOPMIN" | "ZPOPMAX") => {
                let count = args.get(2).map_or(1, |c| int(c) as usize);
                let popped = pop(state, &key, cmd == "ZPOPMIN", count);
                expect(got, listed(&popped, true))
            }
            "ZMPOP" => {
                let n = int(&args[1]) as usize;
                let keys = &args[2..2 + n];
                let min = args[2 + n] == "MIN";
                let count = args.get(4 + n).map_or(1, |c| int(c) as usize);
                match keys.iter().find(|k| state.contains_key(*k)) {
                    Some(k) => {
                        let popped = pop(state, k, min, count);
                        let pairs = popped
                            .iter()
                            .map(|(m, s)| R::Arr(vec![b(m.clone()), b(print(*s))]))
                            .collect();
                        expect(got, R::Arr(vec![b(k.clone()), R::Arr(pairs)]))
                    }
                    None => expect(got, R::Nil),
                }
            }
            cmd @ ("BZPOPMIN" | "BZPOPMAX") => {
                let keys = &args[1..args.len() - 1];
                match keys.iter().find(|k| state.contains_key(*k)) {
                    Some(k) => {
                        let (m, s) = pop(state, k, cmd == "BZPOPMIN", 1).remove(0);
                        expect(got, R::Arr(vec![b(k.clone()), b(m), b(print(s))]))
                    }
                    None => expect(got, R::Nil),
                }
            }
            "ZRANGESTORE" => {
                let result: Zset = select(state.get(&args[2]), &args[3], &args[4], &args[5..])
                    .into_iter()
                    .collect();
                expect(got, store(state, &key, result))
            }
            cmd @ ("ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE") => {
                let n = int(&args[2]) as usize;
                let result = combine(
                    state,
                    &cmd[1..cmd.len() - 5],
                    &args[3..3 + n],
                    &args[3 + n..],
                );
                expect(got, store(state, &key, result))
            }
            cmd @ ("ZUNION" | "ZINTER" | "ZDIFF") => {
                let n = int(&args[1]) as usize;
                let result = combine(state, &cmd[1..], &args[2..2 + n], &args[2 + n..]);
                expect(got, listed(&ordered(&result), true))
            }
            "ZINTERCARD" => {
                let result = combine(state, "INTER", &args[2..4], &[]);
                let limit = args.get(5).map_or(0, |l| int(l) as usize);
                let n = if limit == 0 {
                    result.len()
                } else {
                    result.len().min(limit)
                };
                expect(got, R::Int(n as i64))
            }
            "ZRANGE" => {
                let picked = select(z, &args[2], &args[3], &args[4..]);
                expect(got, listed(&picked, has("WITHSCORES")))
            }
            cmd @ ("ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" | "ZRANGEBYLEX" | "ZREVRANGEBYLEX") => {
                let mut opts = args[4..].to_vec();
                opts.push(
                    if cmd.ends_with("LEX") {
                        "BYLEX"
                    } else {
                        "BYSCORE"
                    }
                    .to_string(),
                );
                if cmd.starts_with("ZREV") {
                    opts.push("REV".to_string());
                }
                let picked = select(z, &args[2], &args[3], &opts);
                expect(got, listed(&picked, has("WITHSCORES")))
            }
            "ZREVRANGE" => {
                let picked = select(z, &args[2], &args[3], &["REV".to_string()]);
                expect(got, listed(&picked, has("WITHSCORES")))
            }
            "ZCOUNT" => {
                let n = select(z, &args[2], &args[3], &["BYSCORE".to_string()]).len();
                expect(got, R::Int(n as i64))
            }
            "ZLEXCOUNT" => {
                let n = select(z, &args[2], &args[3], &["BYLEX".to_string()]).len();
                expect(got, R::Int(n as i64))
            }
            "ZCARD" => expect(got, R::Int(z.map_or(0, BTreeMap::len) as i64)),
            "ZSCORE" => expect(
                got,
                z.and_then(|z| z.get(&args[2]))
                    .map_or(R::Nil, |s| b(print(*s))),
            ),
            "ZMSCORE" => {
                let want = args[2..]
                    .iter()
                    .map(|m| z.and_then(|z| z.get(m)).map_or(R::Nil, |s| b(print(*s))))
                    .collect();
                expect(got, R::Arr(want))
            }
            cmd @ ("ZRANK" | "ZREVRANK") => {
                let mut order = z.map(ordered).unwrap_or_default();
                if cmd == "ZREVRANK" {
                    order.reverse();
                }
                let rank = order.iter().position(|(m, _)| *m == args[2]);
                expect(got, rank.map_or(R::Nil, |r| R::Int(r as i64)))
            }
            "ZRANDMEMBER" => match got {
                Some(got) => check_random(z, args.get(2).map(|c| int(c)), has("WITHSCORES"), got),
                None => Ok(()),
            },
            other => Err(format!("the sorted-set model has no command {other}")),
        }
    }

    fn read(con: &mut redis::Connection, key: &str) -> Result<Zset, String> {
        let n = read_int(con, &["ZCARD", key])?;
        let pairs = pairs_of(&read_query(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"])?)?;
        check_count(n, pairs.len(), &format!("ZCARD {key}"))?;
        let mut z = Zset::new();
        for (m, s) in &pairs {
            let s: f64 = s
                .parse()
                .map_err(|_| format!("ZRANGE {key}: score {s:?}"))?;
            if z.insert(m.clone(), s).is_some() {
                return Err(format!("ZRANGE {key} lists {m} twice: {pairs:?}"));
            }
        }
        let listed: Vec<(String, f64)> = pairs.iter().map(|(m, _)| (m.clone(), z[m])).collect();
        if listed != ordered(&z) {
            return Err(format!(
                "ZRANGE {key} is not in (score, member) order: {pairs:?}"
            ));
        }
        Ok(z)
    }
}

/// WEIGHTS (positive) and AGGREGATE, each sometimes.
fn weights_aggregate(rng: &mut StdRng, n: usize, args: &mut Vec<String>) {
    if rng.random_bool(0.4) {
        args.push("WEIGHTS".to_string());
        for _ in 0..n {
            args.push(["1", "2", "0.5", "3"][rng.random_range(0..4)].to_string());
        }
    }
    if rng.random_bool(0.4) {
        args.push("AGGREGATE".to_string());
        args.push(["SUM", "MIN", "MAX"][rng.random_range(0..3)].to_string());
    }
}
