//! The list model: pushes, pops (plain, counted, blocking, LMPOP), LMOVE and RPOPLPUSH
//! between the lists, LSET, LTRIM, LREM, LINSERT, and the reads LRANGE, LINDEX, LLEN, LPOS.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::Rng;

use super::{b, bulks, check_count, e, expect, read_int, read_query, Kind, State, R};

pub struct Lists;

type List = VecDeque<String>;

/// Few distinct elements, so that LREM, LPOS and LINSERT find repeats.
fn element(rng: &mut StdRng) -> String {
    const ELEMENTS: [&str; 5] = ["a", "b", "c", "dd", "eee"];
    ELEMENTS[rng.random_range(0..ELEMENTS.len())].to_string()
}

fn index(rng: &mut StdRng) -> String {
    rng.random_range(-7..=7).to_string()
}

fn end(rng: &mut StdRng) -> String {
    if rng.random_bool(0.5) {
        "LEFT"
    } else {
        "RIGHT"
    }
    .to_string()
}

/// Redis's normalisation of a `start stop` range over `len` elements: the inclusive index
/// range, or `None` when it is empty.
pub fn range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

fn int(s: &str) -> i64 {
    s.parse().expect("the generator writes integers")
}

/// Pops from `key`'s `left` or right end; removes an emptied list.
fn pop(state: &mut State<List>, key: &str, left: bool) -> Option<String> {
    let list = state.get_mut(key)?;
    let got = if left {
        list.pop_front()
    } else {
        list.pop_back()
    };
    if list.is_empty() {
        state.remove(key);
    }
    got
}

fn push(state: &mut State<List>, key: &str, left: bool, element: String) {
    let list = state.entry(key.to_string()).or_default();
    if left {
        list.push_front(element);
    } else {
        list.push_back(element);
    }
}

/// LPOS's answer: the indexes of the matches from the rank-th on, at most `count` (0: all),
/// looking at no more than `maxlen` elements (0: all) from the end the rank's sign names.
fn lpos(list: &List, element: &str, rank: i64, count: usize, maxlen: usize) -> Vec<i64> {
    let n = list.len();
    let order: Vec<usize> = if rank > 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    };
    let limit = if maxlen == 0 { n } else { maxlen.min(n) };
    let mut skip = rank.unsigned_abs() as usize - 1;
    let mut found = Vec::new();
    for &i in &order[..limit] {
        if list[i] == element {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.push(i as i64);
            if count != 0 && found.len() == count {
                break;
            }
        }
    }
    found
}

impl Kind for Lists {
    type Coll = List;
    const TYPE: &'static str = "list";
    const KEYS: &'static [&'static str] = &["l0", "l1", "l2"];

    fn gen(_state: &State<List>, rng: &mut StdRng) -> Vec<String> {
        let key = |rng: &mut StdRng| Self::KEYS[rng.random_range(0..Self::KEYS.len())].to_string();
        let mut args: Vec<String> = Vec::new();
        let w = |args: &mut Vec<String>, s: &str| args.push(s.to_string());
        match rng.random_range(0..30) {
            0..=5 => {
                let cmd = ["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"][rng.random_range(0..4)];
                w(&mut args, cmd);
                args.push(key(rng));
                for _ in 0..rng.random_range(1..=4) {
                    args.push(element(rng));
                }
            }
            6..=8 => {
                w(
                    &mut args,
                    if rng.random_bool(0.5) { "LPOP" } else { "RPOP" },
                );
                args.push(key(rng));
                if rng.random_bool(0.4) {
                    args.push(rng.random_range(1..=4).to_string());
                }
            }
            9 => {
                w(
                    &mut args,
                    if rng.random_bool(0.5) {
                        "BLPOP"
                    } else {
                        "BRPOP"
                    },
                );
                for _ in 0..rng.random_range(1..=2) {
                    args.push(key(rng));
                }
                w(&mut args, "0.01");
            }
            10..=11 => {
                w(&mut args, "LMOVE");
                args.extend([key(rng), key(rng), end(rng), end(rng)]);
            }
            12 => {
                w(&mut args, "RPOPLPUSH");
                args.extend([key(rng), key(rng)]);
            }
            13 => {
                w(&mut args, "BLMOVE");
                args.extend([key(rng), key(rng), end(rng), end(rng)]);
                w(&mut args, "0.01");
            }
            14 => {
                w(&mut args, "LMPOP");
                let n = rng.random_range(1..=3);
                args.push(n.to_string());
                for _ in 0..n {
                    args.push(key(rng));
                }
                args.push(end(rng));
                if rng.random_bool(0.5) {
                    args.extend(["COUNT".to_string(), rng.random_range(1..=3).to_string()]);
                }
            }
            15..=16 => {
                w(&mut args, "LSET");
                args.extend([key(rng), index(rng), element(rng)]);
            }
            17 => {
                w(&mut args, "LTRIM");
                args.extend([key(rng), index(rng), index(rng)]);
            }
            18 => {
                w(&mut args, "LREM");
                args.extend([key(rng), rng.random_range(-2..=2).to_string(), element(rng)]);
            }
            19 => {
                w(&mut args, "LINSERT");
                let at = if rng.random_bool(0.5) {
                    "BEFORE"
                } else {
                    "AFTER"
                };
                args.extend([key(rng), at.to_string(), element(rng), element(rng)]);
            }
            20..=22 => {
                w(&mut args, "LRANGE");
                args.extend([key(rng), index(rng), index(rng)]);
            }
            23 => {
                w(&mut args, "LRANGE");
                args.extend([key(rng), "0".to_string(), "-1".to_string()]);
            }
            24..=25 => {
                w(&mut args, "LINDEX");
                args.extend([key(rng), index(rng)]);
            }
            26 => {
                w(&mut args, "LLEN");
                args.push(key(rng));
            }
            _ => {
                w(&mut args, "LPOS");
                args.extend([key(rng), element(rng)]);
                if rng.random_bool(0.5) {
                    let rank = *[-2i64, -1, 1, 2].get(rng.random_range(0..4)).expect("rank");
                    args.extend(["RANK".to_string(), rank.to_string()]);
                }
                if rng.random_bool(0.5) {
                    args.extend(["COUNT".to_string(), rng.random_range(0..=3).to_string()]);
                }
                if rng.random_bool(0.3) {
                    args.extend(["MAXLEN".to_string(), rng.random_range(0..=4).to_string()]);
                }
            }
        }
        args
    }

    fn apply(state: &mut State<List>, args: &[String], got: Option<&R>) -> Result<(), String> {
        let key = args.get(1).cloned().unwrap_or_default();
        let len = state.get(&key).map_or(0, VecDeque::len);
        match args[0].as_str() {
            cmd @ ("LPUSH" | "RPUSH" | "LPUSHX" | "RPUSHX") => {
                if cmd.ends_with('X') && len == 0 {
                    return expect(got, R::Int(0));
                }
                for element in &args[2..] {
                    push(state, &key, cmd.starts_with('L'), element.clone());
                }
                expect(got, R::Int((len + args.len() - 2) as i64))
            }
            cmd @ ("LPOP" | "RPOP") => {
                let left = cmd == "LPOP";
                match args.get(2) {
                    None => expect(got, pop(state, &key, left).map_or(R::Nil, b)),
                    Some(_) if len == 0 => expect(got, R::Nil),
                    Some(count) => {
                        let popped: Vec<String> = (0..int(count))
                            .map_while(|_| pop(state, &key, left))
                            .collect();
                        expect(got, bulks(popped))
                    }
                }
            }
            cmd @ ("BLPOP" | "BRPOP") => {
                let keys = &args[1..args.len() - 1];
                match keys.iter().find(|k| state.contains_key(*k)) {
                    Some(k) => {
                        let element = pop(state, k, cmd == "BLPOP").expect("a list");
                        expect(got, bulks([k.clone(), element]))
                    }
                    None => expect(got, R::Nil),
                }
            }
            cmd @ ("LMOVE" | "BLMOVE" | "RPOPLPUSH") => {
                let (from_left, to_left) = if cmd == "RPOPLPUSH" {
                    (false, true)
                } else {
                    (args[3] == "LEFT", args[4] == "LEFT")
                };
                match pop(state, &key, from_left) {
                    Some(element) => {
                        push(state, &args[2], to_left, element.clone());
                        expect(got, b(element))
                    }
                    None => expect(got, R::Nil),
                }
            }
            "LMPOP" => {
                let n: usize = int(&args[1]) as usize;
                let keys = &args[2..2 + n];
                let left = args[2 + n] == "LEFT";
                let count = args.get(4 + n).map_or(1, |c| int(c));
                match keys.iter().find(|k| state.contains_key(*k)) {
                    Some(k) => {
                        let popped: Vec<String> =
                            (0..count).map_while(|_| pop(state, k, left)).collect();
                        expect(got, R::Arr(vec![b(k.clone()), bulks(popped)]))
                    }
                    None => expect(got, R::Nil),
                }
            }
            "LSET" => {
                let Some(list) = state.get_mut(&key) else {
                    return expect(got, e("ERR no such key"));
                };
                let i = int(&args[2]);
                let i = if i < 0 { i + len as i64 } else { i };
                if i < 0 || i >= len as i64 {
                    return expect(got, e("ERR index out of range"));
                }
                list[i as usize] = args[3].clone();
                expect(got, R::Ok)
            }
            "LTRIM" => {
                if let Some(list) = state.get_mut(&key) {
                    match range(int(&args[2]), int(&args[3]), len) {
                        Some((start, stop)) => {
                            list.truncate(stop + 1);
                            list.drain(..start);
                        }
                        None => {
                            state.remove(&key);
                        }
                    }
                }
                expect(got, R::Ok)
            }
            "LREM" => {
                let Some(list) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                let count = int(&args[2]);
                let limit = if count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let mut removed = 0;
                let mut kept: Vec<String> = Vec::new();
                let order: Vec<String> = if count < 0 {
                    list.iter().rev().cloned().collect()
                } else {
                    list.iter().cloned().collect()
                };
                for x in order {
                    if x == args[3] && removed < limit {
                        removed += 1;
                    } else {
                        kept.push(x);
                    }
                }
                if count < 0 {
                    kept.reverse();
                }
                *list = kept.into();
                if list.is_empty() {
                    state.remove(&key);
                }
                expect(got, R::Int(removed as i64))
            }
            "LINSERT" => {
                let Some(list) = state.get_mut(&key) else {
                    return expect(got, R::Int(0));
                };
                match list.iter().position(|x| *x == args[3]) {
                    Some(i) => {
                        let at = if args[2] == "BEFORE" { i } else { i + 1 };
                        list.insert(at, args[4].clone());
                        expect(got, R::Int(list.len() as i64))
                    }
                    None => expect(got, R::Int(-1)),
                }
            }
            "LRANGE" => {
                let want: Vec<String> =
                    match (state.get(&key), range(int(&args[2]), int(&args[3]), len)) {
                        (Some(list), Some((start, stop))) => {
                            list.range(start..=stop).cloned().collect()
                        }
                        _ => Vec::new(),
                    };
                expect(got, bulks(want))
            }
            "LINDEX" => {
                let i = int(&args[2]);
                let i = if i < 0 { i + len as i64 } else { i };
                let want = state
                    .get(&key)
                    .and_then(|l| usize::try_from(i).ok().and_then(|i| l.get(i)))
                    .map_or(R::Nil, |x| b(x.clone()));
                expect(got, want)
            }
            "LLEN" => expect(got, R::Int(len as i64)),
            "LPOS" => {
                let (mut rank, mut count, mut maxlen) = (1, None, 0);
                for opt in args[3..].chunks(2) {
                    match opt[0].as_str() {
                        "RANK" => rank = int(&opt[1]),
                        "COUNT" => count = Some(int(&opt[1]) as usize),
                        _ => maxlen = int(&opt[1]) as usize,
                    }
                }
                let empty = List::new();
                let list = state.get(&key).unwrap_or(&empty);
                let found = lpos(list, &args[2], rank, count.unwrap_or(1), maxlen);
                let want = match count {
                    Some(_) => R::Arr(found.into_iter().map(R::Int).collect()),
                    None => found.first().map_or(R::Nil, |&i| R::Int(i)),
                };
                expect(got, want)
            }
            other => Err(format!("the list model has no command {other}")),
        }
    }

    fn read(con: &mut redis::Connection, key: &str) -> Result<List, String> {
        let n = read_int(con, &["LLEN", key])?;
        let items = read_query(con, &["LRANGE", key, "0", "-1"])?;
        let list: List = items
            .items()?
            .iter()
            .map(|r| r.text().map(str::to_string))
            .collect::<Result<_, _>>()?;
        check_count(n, list.len(), &format!("LLEN {key}"))?;
        Ok(list)
    }
}
