//! The stream model: XADD (explicit ids and `ms-*`, NOMKSTREAM, MAXLEN), XDEL, XTRIM
//! (MAXLEN, MINID), and the reads XLEN, XRANGE, XREVRANGE (inclusive and exclusive bounds,
//! COUNT), XREAD over several streams. A stream is read back with XLEN against XRANGE and its
//! last-generated id from XINFO STREAM, which must survive a crash too (else a later XADD
//! could reuse an id). Ids are the model's, never `*` (a clock the model cannot know); an
//! emptied stream stays, as in Redis.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::Rng;

use super::{b, check_count, e, expect, read_int, read_query, Kind, State, R};

pub struct Streams;

type Id = (u64, u64);

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Stream {
    entries: BTreeMap<Id, Vec<String>>,
    last: Id,
}

fn show(id: Id) -> String {
    format!("{}-{}", id.0, id.1)
}

fn parse(s: &str) -> Id {
    match s.split_once('-') {
        Some((ms, seq)) => (ms.parse().expect("ms"), seq.parse().expect("seq")),
        None => (s.parse().expect("ms"), 0),
    }
}

/// An id near the stream's last one, so that some are too small (an error) and most fit.
fn new_id(state: &State<Stream>, key: &str, rng: &mut StdRng) -> String {
    let last = state.get(key).map_or((0, 0), |s| s.last);
    let ms = (last.0 + rng.random_range(0..=3)).saturating_sub(1);
    if rng.random_bool(0.5) {
        format!("{ms}-*")
    } else {
        format!("{ms}-{}", rng.random_range(0..=2))
    }
}

/// A bound for XRANGE: `-`, `+`, an id, or `(id` (exclusive).
fn bound(state: &State<Stream>, key: &str, rng: &mut StdRng) -> String {
    let top = state.get(key).map_or(0, |s| s.last.0) + 1;
    match rng.random_range(0..6) {
        0 => "-".to_string(),
        1 => "+".to_string(),
        2 => format!("({}-{}", rng.random_range(0..=top), rng.random_range(0..=2)),
        3 => rng.random_range(0..=top).to_string(),
        _ => format!("{}-{}", rng.random_range(0..=top), rng.random_range(0..=2)),
    }
}

/// Whether `id` is within `bound` as the lower (`low`) or upper end. A bare `ms` is `ms-0`
/// as a start and `ms-max` as an end.
fn within(bound: &str, id: Id, low: bool) -> bool {
    match bound {
        "-" => low,
        "+" => !low,
        _ => {
            let (open, text) = match bound.strip_prefix('(') {
                Some(rest) => (true, rest),
                None => (false, bound),
            };
            let mut b = parse(text);
            if !text.contains('-') && !low {
                b.1 = u64::MAX;
            }
            match (low, open) {
                (true, true) => id > b,
                (true, false) => id >= b,
                (false, true) => id < b,
                (false, false) => id <= b,
            }
        }
    }
}

fn entry_reply(id: Id, fields: &[String]) -> R {
    R::Arr(vec![
        b(show(id)),
        R::Arr(fields.iter().cloned().map(b).collect()),
    ])
}

fn entries_reply<'a>(entries: impl Iterator<Item = (&'a Id, &'a Vec<String>)>) -> R {
    R::Arr(entries.map(|(id, f)| entry_reply(*id, f)).collect())
}

fn int(s: &str) -> i64 {
    s.parse().expect("the generator writes integers")
}

impl Kind for Streams {
    type Coll = Stream;
    const TYPE: &'static str = "stream";
    const KEYS: &'static [&'static str] = &["x0", "x1", "x2"];

    fn gen(state: &State<Stream>, rng: &mut StdRng) -> Vec<String> {
        let key = Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string();
        let mut args: Vec<String> = Vec::new();
        let w = |args: &mut Vec<String>, s: &str| args.push(s.to_string());
        match rng.random_range(0..20) {
            0..=7 => {
                w(&mut args, "XADD");
                args.push(key.clone());
                if rng.random_bool(0.1) {
                    w(&mut args, "NOMKSTREAM");
                }
                if rng.random_bool(0.15) {
                    args.extend(["MAXLEN".to_string(), rng.random_range(1..=6).to_string()]);
                }
                args.push(new_id(state, &key, rng));
                for _ in 0..rng.random_range(1..=2) {
                    args.extend([
                        format!("f{}", rng.random_range(0..3)),
                        format!("v{}", rng.random_range(0..100)),
                    ]);
                }
            }
            8..=9 => {
                w(&mut args, "XDEL");
                args.push(key.clone());
                let ids: Vec<Id> = state
                    .get(&key)
                    .map_or(Vec::new(), |s| s.entries.keys().copied().collect());
                for _ in 0..rng.random_range(1..=2) {
                    let id = if !ids.is_empty() && rng.random_bool(0.7) {
                        ids[rng.random_range(0..ids.len())]
                    } else {
                        (rng.random_range(0..5), rng.random_range(0..3))
                    };
                    args.push(show(id));
                }
            }
            10 => {
                w(&mut args, "XTRIM");
                args.push(key.clone());
                if rng.random_bool(0.5) {
                    args.extend([
                        "MAXLEN".to_string(),
                        "=".to_string(),
                        rng.random_range(0..=6).to_string(),
                    ]);
                } else {
                    let top = state.get(&key).map_or(0, |s| s.last.0);
                    args.extend([
                        "MINID".to_string(),
                        format!(
                            "{}-{}",
                            rng.random_range(0..=top + 1),
                            rng.random_range(0..=2)
                        ),
                    ]);
                }
            }
            11 => {
                w(&mut args, "XLEN");
                args.push(key);
            }
            12..=15 => {
                let rev = rng.random_bool(0.4);
                w(&mut args, if rev { "XREVRANGE" } else { "XRANGE" });
                args.push(key.clone());
                args.extend([bound(state, &key, rng), bound(state, &key, rng)]);
                if rng.random_bool(0.4) {
                    args.extend(["COUNT".to_string(), rng.random_range(1..=4).to_string()]);
                }
            }
            _ => {
                w(&mut args, "XREAD");
                if rng.random_bool(0.5) {
                    args.extend(["COUNT".to_string(), rng.random_range(1..=3).to_string()]);
                }
                w(&mut args, "STREAMS");
                let n = rng.random_range(1..=2);
                let keys: Vec<String> = (0..n)
                    .map(|_| Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string())
                    .collect();
                let ids: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        let top = state.get(k).map_or(0, |s| s.last.0);
                        format!("{}-{}", rng.random_range(0..=top), rng.random_range(0..=2))
                    })
                    .collect();
                args.extend(keys);
                args.extend(ids);
            }
        }
        args
    }

    fn apply(state: &mut State<Stream>, args: &[String], got: Option<&R>) -> Result<(), String> {
        let key = args[1].clone();
        match args[0].as_str() {
            "XADD" => {
                let nomk = args.iter().any(|a| a == "NOMKSTREAM");
                let maxlen = args
                    .iter()
                    .position(|a| a == "MAXLEN")
                    .map(|i| int(&args[i + 1]) as usize);
                let at = 2 + usize::from(nomk) + if maxlen.is_some() { 2 } else { 0 };
                let (id_text, fields) = (&args[at], args[at + 1..].to_vec());
                if id_text == "0-0" {
                    return expect(
                        got,
                        e("ERR The ID specified in XADD must be greater than 0-0"),
                    );
                }
                if nomk && !state.contains_key(&key) {
                    return expect(got, R::Nil);
                }
                let last = state.get(&key).map_or((0, 0), |s| s.last);
                let id = match id_text.strip_suffix("-*") {
                    Some(ms) => {
                        let ms: u64 = ms.parse().expect("ms");
                        if ms == last.0 && state.contains_key(&key) {
                            (ms, last.1 + 1)
                        } else if ms < last.0 {
                            return expect(got, e("ERR The ID specified in XADD is equal or smaller than the target stream top item"));
                        } else {
                            (ms, u64::from(ms == 0))
                        }
                    }
                    None => parse(id_text),
                };
                if state.contains_key(&key) && id <= last {
                    return expect(got, e("ERR The ID specified in XADD is equal or smaller than the target stream top item"));
                }
                let stream = state.entry(key).or_default();
                stream.entries.insert(id, fields);
                stream.last = id;
                if let Some(max) = maxlen {
                    while stream.entries.len() > max {
                        stream.entries.pop_first();
                    }
                }
                expect(got, b(show(id)))
            }
            "XDEL" => {
                let Some(stream) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let removed = args[2..]
                    .iter()
                    .filter(|id| stream.entries.remove(&parse(id)).is_some())
                    .count();
                expect(got, R::Int(removed as i64))
            }
            "XTRIM" => {
                let Some(stream) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let before = stream.entries.len();
                if args[2] == "MAXLEN" {
                    let max = int(&args[4]) as usize;
                    while stream.entries.len() > max {
                        stream.entries.pop_first();
                    }
                } else {
                    let min = parse(&args[3]);
                    stream.entries.retain(|id, _| *id >= min);
                }
                expect(got, R::Int((before - stream.entries.len()) as i64))
            }
            "XLEN" => expect(
                got,
                R::Int(state.get(&key).map_or(0, |s| s.entries.len()) as i64),
            ),
            cmd @ ("XRANGE" | "XREVRANGE") => {
                let rev = cmd == "XREVRANGE";
                let (low, high) = if rev {
                    (&args[3], &args[2])
                } else {
                    (&args[2], &args[3])
                };
                if high == "(0-0" {
                    return expect(got, e("ERR invalid end ID for the interval"));
                }
                let count = args.get(5).map_or(usize::MAX, |c| int(c) as usize);
                let Some(stream) = state.get(&key) else {
                    return expect(got, R::Arr(Vec::new()));
                };
                let picked = stream
                    .entries
                    .iter()
                    .filter(|(id, _)| within(low, **id, true) && within(high, **id, false));
                let want = if rev {
                    entries_reply(picked.rev().take(count))
                } else {
                    entries_reply(picked.take(count))
                };
                expect(got, want)
            }
            "XREAD" => {
                let count = if args[1] == "COUNT" {
                    int(&args[2]) as usize
                } else {
                    usize::MAX
                };
                let from = args.iter().position(|a| a == "STREAMS").expect("STREAMS") + 1;
                let n = (args.len() - from) / 2;
                let mut out = Vec::new();
                for i in 0..n {
                    let (k, after) = (&args[from + i], parse(&args[from + n + i]));
                    if let Some(stream) = state.get(k) {
                        let entries: Vec<_> = stream
                            .entries
                            .iter()
                            .filter(|(id, _)| **id > after)
                            .take(count)
                            .collect();
                        if !entries.is_empty() {
                            out.push(R::Arr(vec![
                                b(k.clone()),
                                entries_reply(entries.into_iter()),
                            ]));
                        }
                    }
                }
                expect(got, if out.is_empty() { R::Nil } else { R::Arr(out) })
            }
            other => Err(format!("the stream model has no command {other}")),
        }
    }

    fn read(con: &mut redis::Connection, key: &str) -> Result<Stream, String> {
        let n = read_int(con, &["XLEN", key])?;
        let reply = read_query(con, &["XRANGE", key, "-", "+"])?;
        let mut entries = BTreeMap::new();
        for entry in reply.items()? {
            let (id, fields) = match entry.items()? {
                [id, fields] => (parse(id.text()?), fields.items()?),
                _ => return Err(format!("XRANGE {key}: entry {entry:?}")),
            };
            let fields = fields
                .iter()
                .map(|f| f.text().map(str::to_string))
                .collect::<Result<_, _>>()?;
            entries.insert(id, fields);
        }
        check_count(n, entries.len(), &format!("XLEN {key}"))?;
        let info = read_query(con, &["XINFO", "STREAM", key])?;
        let items = info.items()?;
        let last = items
            .chunks(2)
            .find(|p| p[0] == b("last-generated-id"))
            .ok_or_else(|| format!("XINFO STREAM {key}: no last-generated-id in {info:?}"))?[1]
            .text()?
            .to_string();
        Ok(Stream {
            entries,
            last: parse(&last),
        })
    }
}
