//! forest's ordered-range commands against a `BTreeMap` model (issue 6 "Ordered ranges";
//! protocol.md "Ordered ranges"): FOREST.RANGE (REV, LIMIT, KEYSONLY, continuation),
//! FOREST.COUNT and FOREST.DELRANGE with every bound kind (`[key`, `(key`, `-`, `+`) on both
//! sides, over random binary keys including the empty key.
//!
//! Seeded random rounds: each round changes the server and the model by the same random
//! SET/DEL/DELRANGE operations, then compares random range queries. The seed is printed, and
//! `FOREST_RANGE_SEED` replays one.

use crate::common;

use std::collections::BTreeMap;
use std::ops::Bound;

use common::{data_dir, expect_err, query, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Rounds of (writes, queries) per run.
const ROUND_COUNT: usize = 60;
/// Writes per round.
const WRITES_PER_ROUND: usize = 40;
/// Range queries per round.
const QUERIES_PER_ROUND: usize = 25;

/// A random key from a small alphabet (so bounds often hit keys and share prefixes), with
/// the bytes that break text protocols: NUL, CR, LF, 0xfe, 0xff. Length 0..=4: the empty key
/// too. A key never starts with 0xff here: the server reserves such keys, and
/// `keys_beginning_with_0xff_are_reserved` tests that on its own.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    const ALPHABET: &[u8] = b"\x00\r\nab\xfe\xff";
    let len = rng.random_range(0..=4);
    (0..len)
        .map(|i| {
            let choices = if i == 0 {
                ALPHABET.len() - 1
            } else {
                ALPHABET.len()
            };
            ALPHABET[rng.random_range(0..choices)]
        })
        .collect()
}

/// A random bound and its wire form: `[key`, `(key`, `-` or `+`.
fn random_bound(rng: &mut StdRng, model: &Model) -> (Bound<Vec<u8>>, Vec<u8>) {
    let key = if !model.is_empty() && rng.random_ratio(2, 3) {
        let i = rng.random_range(0..model.len());
        model.keys().nth(i).cloned().unwrap_or_default()
    } else {
        random_key(rng)
    };
    match rng.random_range(0..10) {
        0 => (Bound::Unbounded, b"-".to_vec()),
        1 => (Bound::Unbounded, b"+".to_vec()),
        2..=5 => (Bound::Included(key.clone()), [&b"["[..], &key[..]].concat()),
        _ => (Bound::Excluded(key.clone()), [&b"("[..], &key[..]].concat()),
    }
}

/// `-` is the lowest and `+` the highest key whichever side they stand on (Redis's lex
/// ranges): `-` as max or `+` as min gives an empty range.
fn side(wire: &[u8], bound: Bound<Vec<u8>>, is_min: bool) -> Option<Bound<Vec<u8>>> {
    match (wire, is_min) {
        (b"-", false) | (b"+", true) => None,
        _ => Some(bound),
    }
}

/// The model's entries in [min, max], ascending.
fn model_range(
    model: &Model,
    min: (&Bound<Vec<u8>>, &[u8]),
    max: (&Bound<Vec<u8>>, &[u8]),
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (Some(lo), Some(hi)) = (
        side(min.1, min.0.clone(), true),
        side(max.1, max.0.clone(), false),
    ) else {
        return Vec::new();
    };
    model
        .iter()
        .filter(|(k, _)| {
            let above = match &lo {
                Bound::Included(b) => *k >= b,
                Bound::Excluded(b) => *k > b,
                Bound::Unbounded => true,
            };
            let below = match &hi {
                Bound::Included(b) => *k <= b,
                Bound::Excluded(b) => *k < b,
                Bound::Unbounded => true,
            };
            above && below
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn bulks(v: Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::BulkString(b) => b,
                other => panic!("range reply holds {other:?}"),
            })
            .collect(),
        other => panic!("range reply is {other:?}"),
    }
}

fn pairs(flat: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    assert_eq!(flat.len() % 2, 0, "a flat k v reply has an even length");
    flat.chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(i) => i,
        other => panic!("not an integer: {other:?}"),
    }
}

/// FOREST.RANGE with options; the reply as (key, value) pairs or, with `keys_only`, keys.
fn range(
    c: &mut redis::Connection,
    min: &[u8],
    max: &[u8],
    rev: bool,
    limit: Option<usize>,
    keys_only: bool,
) -> Vec<Vec<u8>> {
    let limit_text = limit.map(|n| n.to_string());
    let mut args: Vec<&[u8]> = vec![b"FOREST.RANGE", min, max];
    if rev {
        args.push(b"REV");
    }
    if let Some(n) = &limit_text {
        args.extend([&b"LIMIT"[..], n.as_bytes()]);
    }
    if keys_only {
        args.push(b"KEYSONLY");
    }
    bulks(query(c, &args))
}

/// Pages through [min, max] with LIMIT `page` and `(lastkey` continuation; returns the
/// concatenation in reply order.
fn paged(
    c: &mut redis::Connection,
    min: &[u8],
    max: &[u8],
    rev: bool,
    page: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (mut min, mut max) = (min.to_vec(), max.to_vec());
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let got = pairs(range(c, &min, &max, rev, Some(page), false));
        assert!(got.len() <= page, "LIMIT {page} gave {}", got.len());
        let Some((last, _)) = got.last().cloned() else {
            return all;
        };
        let short = got.len() < page;
        all.extend(got);
        if short {
            return all;
        }
        let next = [&b"("[..], &last[..]].concat();
        if rev {
            max = next;
        } else {
            min = next;
        }
    }
    panic!("continuation does not end");
}

// Goal: the range commands agree with a BTreeMap model for random binary keys, every bound
// kind on both sides, both orders, LIMIT (with continuation covering the range exactly once),
// KEYSONLY, COUNT and DELRANGE. Method: seeded random rounds of writes and queries.
#[test]
fn ranges_match_a_btreemap_model() {
    let seed: u64 = std::env::var("FOREST_RANGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("FOREST_RANGE_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    let mut c = server.client();
    let c = &mut c;
    let mut model = Model::new();
    for round in 0..ROUND_COUNT {
        let mut pipe = redis::pipe();
        for _ in 0..WRITES_PER_ROUND {
            let key = random_key(&mut rng);
            if rng.random_ratio(1, 4) {
                model.remove(&key);
                pipe.cmd("DEL").arg(&key).ignore();
            } else {
                let value = format!("r{round}.{}", rng.random_range(0..1000u32)).into_bytes();
                pipe.cmd("SET").arg(&key).arg(&value).ignore();
                model.insert(key, value);
            }
        }
        pipe.query::<()>(c).expect("writes");
        if round % 5 == 4 {
            let (lo, lo_wire) = random_bound(&mut rng, &model);
            let (hi, hi_wire) = random_bound(&mut rng, &model);
            let doomed = model_range(&model, (&lo, &lo_wire), (&hi, &hi_wire));
            let removed = int(query(c, &[b"FOREST.DELRANGE", &lo_wire, &hi_wire]));
            assert_eq!(
                removed,
                doomed.len() as i64,
                "DELRANGE {lo_wire:?} {hi_wire:?}"
            );
            for (k, _) in doomed {
                model.remove(&k);
            }
        }
        assert_eq!(
            int(query(c, &[b"DBSIZE"])),
            model.len() as i64,
            "round {round}"
        );
        for _ in 0..QUERIES_PER_ROUND {
            let (lo, lo_wire) = random_bound(&mut rng, &model);
            let (hi, hi_wire) = random_bound(&mut rng, &model);
            let expected = model_range(&model, (&lo, &lo_wire), (&hi, &hi_wire));
            let what = format!("seed {seed} round {round}: {lo_wire:?} {hi_wire:?}");
            let count = int(query(c, &[b"FOREST.COUNT", &lo_wire, &hi_wire]));
            assert_eq!(count, expected.len() as i64, "COUNT {what}");

            let asc = pairs(range(c, &lo_wire, &hi_wire, false, None, false));
            assert_eq!(asc, expected, "RANGE {what}");
            let mut desc_expected = expected.clone();
            desc_expected.reverse();
            let desc = pairs(range(c, &lo_wire, &hi_wire, true, None, false));
            assert_eq!(desc, desc_expected, "RANGE REV {what}");

            let limit = rng.random_range(0..=expected.len() + 2);
            let rev = rng.random_bool(0.5);
            let keys = range(c, &lo_wire, &hi_wire, rev, Some(limit), true);
            let order = if rev { &desc_expected } else { &expected };
            let want: Vec<Vec<u8>> = order.iter().take(limit).map(|(k, _)| k.clone()).collect();
            assert_eq!(keys, want, "RANGE LIMIT {limit} KEYSONLY rev={rev} {what}");

            let page = rng.random_range(1..=4);
            assert_eq!(
                paged(c, &lo_wire, &hi_wire, rev, page),
                *order,
                "paged by {page} rev={rev} {what}"
            );
        }
    }
}

// Goal: edge cases named by protocol.md: min above max, LIMIT 0, the empty key as a bound,
// `-`/`+` on the wrong side, and the errors for bad bounds and options. Method: a fixed set of
// keys and exact replies.
#[test]
fn range_edges_and_errors() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    for k in [&b""[..], b"a", b"b", b"c"] {
        query(c, &[b"SET", k, &[&b"v"[..], k].concat()]);
    }
    let keys = |c: &mut redis::Connection, args: &[&[u8]]| -> Vec<Vec<u8>> {
        let mut full: Vec<&[u8]> = vec![b"FOREST.RANGE"];
        full.extend_from_slice(args);
        full.push(b"KEYSONLY");
        bulks(query(c, &full))
    };
    let all: Vec<Vec<u8>> = vec![b"".to_vec(), b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
    assert_eq!(keys(c, &[b"-", b"+"]), all);
    assert_eq!(
        keys(c, &[b"[", b"+"]),
        all,
        "[ with nothing is the empty key, inclusive"
    );
    assert_eq!(
        keys(c, &[b"(", b"+"]),
        all[1..],
        "( with nothing excludes the empty key"
    );
    assert_eq!(keys(c, &[b"-", b"("]), Vec::<Vec<u8>>::new());
    assert_eq!(
        keys(c, &[b"[c", b"[a"]),
        Vec::<Vec<u8>>::new(),
        "min above max"
    );
    assert_eq!(keys(c, &[b"+", b"-"]), Vec::<Vec<u8>>::new());
    assert_eq!(keys(c, &[b"(b", b"(b"]), Vec::<Vec<u8>>::new());
    assert_eq!(keys(c, &[b"[b", b"[b"]), vec![b"b".to_vec()]);
    assert_eq!(
        keys(c, &[b"[a", b"+", b"REV"]),
        vec![b"c".to_vec(), b"b".to_vec(), b"a".to_vec()],
        "REV keeps the arguments as min max"
    );
    assert_eq!(
        keys(c, &[b"-", b"+", b"LIMIT", b"0"]),
        Vec::<Vec<u8>>::new()
    );
    assert_eq!(
        bulks(query(c, &[b"FOREST.RANGE", b"(a", b"[b"])),
        vec![b"b".to_vec(), b"vb".to_vec()]
    );
    assert_eq!(int(query(c, &[b"FOREST.COUNT", b"[c", b"[a"])), 0);
    assert_eq!(int(query(c, &[b"FOREST.DELRANGE", b"[c", b"[a"])), 0);
    assert_eq!(int(query(c, &[b"FOREST.COUNT", b"-", b"+"])), 4);
    assert_eq!(
        keys(c, &[b"-", b"+", b"LIMIT", b"2", b"REV"]),
        vec![b"c".to_vec(), b"b".to_vec()],
        "options in any order"
    );

    let bad_bound = "ERR min or max not valid string range item";
    for (min, max) in [("a", "+"), ("-", "b"), ("", "+"), ("--", "+"), ("-", "++")] {
        let (min, max) = (min.as_bytes(), max.as_bytes());
        assert_eq!(
            expect_err(c, &[b"FOREST.RANGE", min, max]),
            bad_bound,
            "{min:?} {max:?}"
        );
        assert_eq!(expect_err(c, &[b"FOREST.COUNT", min, max]), bad_bound);
        assert_eq!(expect_err(c, &[b"FOREST.DELRANGE", min, max]), bad_bound);
    }
    for opts in ["LIMIT", "LIMIT -1", "LIMIT x", "BOGUS"] {
        let mut args: Vec<&[u8]> = vec![b"FOREST.RANGE", b"-", b"+"];
        args.extend(opts.split(' ').map(str::as_bytes));
        let err = expect_err(c, &args);
        assert!(err.starts_with("ERR"), "{opts:?}: {err}");
    }
    assert_eq!(int(query(c, &[b"FOREST.DELRANGE", b"(", b"[b"])), 2);
    assert_eq!(keys(c, &[b"-", b"+"]), vec![b"".to_vec(), b"c".to_vec()]);
}

// Goal: ranges and SCAN stay correct while other clients write: every key present throughout
// comes back exactly once, in order, with its value. Method: 1,000 stable keys; a writer churns
// keys between them (insert and delete); meanwhile paged FOREST.RANGE (both orders) and SCAN
// passes are checked against the stable set.
#[test]
fn ranges_and_scan_during_writes() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--durability", "periodic:50"]);
    let mut c = server.client();
    let stable: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("s:{i:04}").into_bytes())
        .collect();
    let mut pipe = redis::pipe();
    for k in &stable {
        pipe.cmd("SET").arg(k).arg(k).ignore();
    }
    pipe.query::<()>(&mut c).expect("load");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut w = server.client();
        let stop = &stop;
        s.spawn(move || {
            // Bounded in time too, so a failed check (which skips the stop) cannot hang.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                let key = format!("s:{:04}.churn", (i * 7919) % 1000);
                let mut pipe = redis::pipe();
                pipe.cmd("SET").arg(&key).arg("x").ignore();
                pipe.cmd("DEL")
                    .arg(format!("s:{:04}.churn", (i * 104_729) % 1000));
                pipe.query::<()>(&mut w).expect("churn");
                i += 1;
            }
        });
        let _stop_on_exit = StopOnDrop(stop);
        let check = |got: &[Vec<u8>], what: &str| {
            let kept: Vec<&Vec<u8>> = got.iter().filter(|k| !k.ends_with(b".churn")).collect();
            assert_eq!(
                kept.len(),
                stable.len(),
                "{what}: stable keys lost or repeated"
            );
            assert!(
                kept.iter().zip(&stable).all(|(a, b)| *a == b),
                "{what}: stable keys"
            );
            assert!(
                got.windows(2).all(|w| w[0] < w[1]),
                "{what}: not in key order, once"
            );
        };
        for pass in 0..3 {
            for rev in [false, true] {
                let page = 37;
                let got = paged(&mut c, b"[s:", b"(s;", rev, page);
                for (k, v) in &got {
                    if !k.ends_with(b".churn") {
                        assert_eq!(k, v, "value of {k:?}");
                    }
                }
                let mut keys: Vec<Vec<u8>> = got.into_iter().map(|(k, _)| k).collect();
                if rev {
                    keys.reverse();
                }
                check(&keys, &format!("pass {pass} paged RANGE rev={rev}"));
            }
            let mut keys = Vec::new();
            let mut cursor = b"0".to_vec();
            loop {
                let (next, batch): (Vec<u8>, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(13)
                    .query(&mut c)
                    .expect("SCAN");
                keys.extend(batch);
                if next == b"0" {
                    break;
                }
                cursor = next;
            }
            check(&keys, &format!("pass {pass} SCAN"));
        }
    });
}

/// Sets its flag when dropped, also while a failed assertion unwinds, so that a scoped
/// helper thread ends and the scope can join it.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

// Goal: keys beginning with byte 0xff are reserved for collection data (docs/PROTOCOL.md
// "Collections") and refused with a clear error that changes nothing, while keys just below
// the reserved byte stay ordinary and ranges ending at `+` reach them. Method: SET reserved
// and ordinary keys, then GET, RANGE, COUNT, DBSIZE, DELRANGE.
#[test]
fn keys_beginning_with_0xff_are_reserved() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let mut c = server.client();
    let c = &mut c;
    for k in [&b"\xff"[..], b"\xfft", b"\xff\xff"] {
        let err = expect_err(c, &[b"SET", k, b"v"]);
        assert!(err.contains("reserved"), "SET {k:?}: {err}");
    }
    let keys: [&[u8]; 3] = [b"a", b"\xfe", b"\xfe\xff"];
    for k in keys {
        assert_eq!(query(c, &[b"SET", k, b"v"]), Value::Okay, "SET {k:?}");
    }
    assert_eq!(
        query(c, &[b"GET", b"\xfe\xff"]),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(
        range(c, b"-", b"+", false, None, true),
        keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>()
    );
    assert_eq!(
        range(c, b"(a", b"+", true, Some(1), true),
        vec![b"\xfe\xff".to_vec()]
    );
    assert_eq!(int(query(c, &[b"FOREST.COUNT", b"[\xfe", b"+"])), 2);
    assert_eq!(int(query(c, &[b"DBSIZE"])), 3);
    assert_eq!(int(query(c, &[b"FOREST.DELRANGE", b"(\xfe", b"+"])), 1);
    assert_eq!(
        range(c, b"-", b"+", false, None, true),
        vec![b"a".to_vec(), b"\xfe".to_vec()]
    );
}
