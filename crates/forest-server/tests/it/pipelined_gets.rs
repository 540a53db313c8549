//! Pipelined GETs read together (issue 15: a connection's run of GETs is looked up in one
//! store call, masstree's descents overlapped) answer exactly as GETs run one by one: a
//! model of strings, deadlines and a list, random pipelines mixing GET, MGET, SET (with and
//! without EX), DEL, EXPIRE, PEXPIREAT in the past, PERSIST, RPUSH, MULTI/EXEC and errors; a
//! key whose deadline passed; and, under a concurrent writer, GETs and MGETs that never see
//! time go back across the keys of one pipeline.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{Running, IO_MODELS, R};

/// SplitMix64: the tests' random choices, reproducible from the seed in their messages.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a key holds in the model.
#[derive(Clone, Debug)]
enum Held {
    Str { value: String, timed: bool },
    List(i64),
}

/// The model of the keys one sequence touches (all under one prefix).
#[derive(Default)]
struct Model(BTreeMap<String, Held>);

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Model {
    fn get(&self, key: &str) -> R {
        match self.0.get(key) {
            None => R::Nil,
            Some(Held::Str { value, .. }) => R::bulk(value),
            Some(Held::List(_)) => R::Err(WRONGTYPE.to_string()),
        }
    }

    /// The reply of `argv` (names as the generator spells them) and the model after it.
    fn apply(&mut self, argv: &[String]) -> R {
        let a: Vec<&str> = argv.iter().map(String::as_str).collect();
        match a[..] {
            ["GET", key] => self.get(key),
            ["MGET", ref keys @ ..] => R::Arr(
                keys.iter()
                    .map(|k| match self.0.get(*k) {
                        Some(Held::Str { value, .. }) => R::bulk(value),
                        _ => R::Nil,
                    })
                    .collect(),
            ),
            ["SET", key, value] => {
                self.0.insert(
                    key.to_string(),
                    Held::Str {
                        value: value.to_string(),
                        timed: false,
                    },
                );
                R::Simple("OK".into())
            }
            ["SET", key, value, "EX", _] => {
                self.0.insert(
                    key.to_string(),
                    Held::Str {
                        value: value.to_string(),
                        timed: true,
                    },
                );
                R::Simple("OK".into())
            }
            ["DEL", key] => R::Int(i64::from(self.0.remove(key).is_some())),
            ["PEXPIREAT", key, "1"] => R::Int(i64::from(self.0.remove(key).is_some())),
            ["EXPIRE", key, _] => match self.0.get_mut(key) {
                Some(Held::Str { timed, .. }) => {
                    *timed = true;
                    R::Int(1)
                }
                Some(Held::List(_)) => R::Int(1),
                None => R::Int(0),
            },
            ["PERSIST", key] => match self.0.get_mut(key) {
                Some(Held::Str { timed, .. }) => R::Int(i64::from(std::mem::replace(timed, false))),
                _ => R::Int(0),
            },
            ["RPUSH", key, _] => match self.0.get_mut(key) {
                Some(Held::List(n)) => {
                    *n += 1;
                    R::Int(*n)
                }
                Some(Held::Str { .. }) => R::Err(WRONGTYPE.to_string()),
                None => {
                    self.0.insert(key.to_string(), Held::List(1));
                    R::Int(1)
                }
            },
            _ => panic!("the model has no command {a:?}"),
        }
    }
}

/// A random command over keys `{prefix}0..{prefix}5` (and the list-prone `{prefix}L`):
/// mostly runs of GETs, so that pipelines hold runs of every length.
fn command(rng: &mut Rng, prefix: &str) -> Vec<String> {
    let key = |rng: &mut Rng| match rng.below(8) {
        7 => format!("{prefix}L"),
        k => format!("{prefix}{}", k % 6),
    };
    let value = |rng: &mut Rng| format!("v{}", rng.below(1000));
    let argv: Vec<String> = match rng.below(20) {
        0..=9 => vec!["GET".into(), key(rng)],
        10 => {
            let mut argv = vec!["MGET".to_string()];
            argv.extend((0..1 + rng.below(4)).map(|_| key(rng)));
            argv
        }
        11 | 12 => vec!["SET".into(), key(rng), value(rng)],
        13 => vec![
            "SET".into(),
            key(rng),
            value(rng),
            "EX".into(),
            "100000".into(),
        ],
        14 => vec!["DEL".into(), key(rng)],
        15 => vec!["PEXPIREAT".into(), key(rng), "1".into()],
        16 => vec!["EXPIRE".into(), key(rng), "100000".into()],
        17 => vec!["PERSIST".into(), key(rng)],
        _ => vec!["RPUSH".into(), format!("{prefix}L"), value(rng)],
    };
    argv
}

fn encode(argv: &[String]) -> Vec<u8> {
    let argv: Vec<&[u8]> = argv.iter().map(String::as_bytes).collect();
    common::encode(&argv)
}

// Goal: a pipeline's replies equal the model's and those of the same commands run one by
// one (send, read its reply), in both I/O models: runs of GETs of every length (over 32, two
// of the store's chunks), keys present, absent, deleted, expired by a past deadline, timed
// (their strings at `FF 'x'`) and persisted, a list (WRONGTYPE), with MGETs between.
// Method: per seed, 600 random commands (half GETs) pipelined in one write on one client
// under prefix `p<seed>:`, and the same commands one at a time on another client under
// `s<seed>:`; every reply compared with the model's as it goes.
#[test]
fn pipelined_gets_answer_as_one_by_one_and_as_the_model() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("dir");
        let server = Running::start(dir.path(), io);
        for seed in 1..=4u64 {
            let mut rng = Rng(seed);
            let mut plan = Vec::new();
            for _ in 0..600 {
                plan.push(command(&mut rng, "#"));
            }
            // A long run of GETs (more than two chunks of 32 keys).
            for i in 0..70 {
                plan.push(vec!["GET".into(), format!("#{}", i % 7)]);
            }
            let named = |prefix: &str| -> Vec<Vec<String>> {
                plan.iter()
                    .map(|argv| argv.iter().map(|a| a.replace('#', prefix)).collect())
                    .collect()
            };
            let (piped, single) = (named(&format!("p{seed}:")), named(&format!("s{seed}:")));

            let mut model = Model::default();
            let expected: Vec<R> = piped.iter().map(|argv| model.apply(argv)).collect();

            let mut c = server.client();
            let bytes: Vec<u8> = piped.iter().flat_map(|argv| encode(argv)).collect();
            c.send_raw(&bytes);
            let got: Vec<R> = piped.iter().map(|_| c.read()).collect();

            let mut one = server.client();
            let each: Vec<R> = single
                .iter()
                .map(|argv| {
                    one.send_raw(&encode(argv));
                    one.read()
                })
                .collect();
            for (i, argv) in piped.iter().enumerate() {
                assert_eq!(
                    got[i], expected[i],
                    "{io:?} seed {seed}: command #{i} {argv:?} pipelined: got {:?}, the model says {:?}",
                    got[i], expected[i]
                );
                assert_eq!(
                    each[i], expected[i],
                    "{io:?} seed {seed}: command #{i} {argv:?} one by one: got {:?}, the model says {:?}",
                    each[i], expected[i]
                );
            }
        }
    }
}

// Goal: the GETs of a run keep every other semantic: a key whose deadline passed is nil, a
// reserved key is refused, a wrong arity is refused, GETs inside MULTI are queued and answered
// by EXEC, RESP3 nulls after HELLO 3.
// Method: one pipeline of GETs around those cases; replies compared with what GETs one by
// one answer (the same pipeline sent command by command to a second client).
#[test]
fn runs_of_gets_keep_expiry_errors_and_transactions() {
    let dir = tempfile::tempdir().expect("dir");
    let server = Running::start(dir.path(), forest_server::IoModel::PerCore);
    let mut c = server.client();
    assert_eq!(
        c.cmd(&["SET", "gone", "x", "PX", "1"]),
        R::Simple("OK".into())
    );
    assert_eq!(
        c.cmd(&["SET", "timed", "t", "EX", "100000"]),
        R::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["SET", "plain", "p"]), R::Simple("OK".into()));
    assert_eq!(c.cmd(&["RPUSH", "list", "a"]), R::Int(1));
    // Past the 1 ms deadline (a passed deadline stays passed, however slow the machine).
    thread::sleep(Duration::from_millis(20));
    let pipeline: Vec<Vec<&[u8]>> = vec![
        vec![b"GET", b"gone"],
        vec![b"GET", b"timed"],
        vec![b"GET", b"plain"],
        vec![b"GET", b"list"],
        vec![b"GET", b"\xffreserved"],
        vec![b"GET", b"plain", b"extra"],
        vec![b"GET", b"plain"],
        vec![b"GET", b"nope"],
        vec![b"MULTI"],
        vec![b"GET", b"plain"],
        vec![b"GET", b"timed"],
        vec![b"EXEC"],
        vec![b"GET", b"timed"],
        vec![b"HELLO", b"3"],
        vec![b"GET", b"nope"],
        vec![b"GET", b"plain"],
        vec![b"GET", b"gone"],
    ];
    let bytes: Vec<u8> = pipeline
        .iter()
        .flat_map(|argv| common::encode(argv))
        .collect();
    c.send_raw(&bytes);
    let mut got = Vec::new();
    for argv in &pipeline {
        let reply = c.read();
        if argv[0] == b"HELLO" {
            got.push(R::Simple("hello".into()));
        } else {
            got.push(reply);
        }
    }
    let mut one = server.client();
    let mut each = Vec::new();
    for argv in &pipeline {
        one.send(argv);
        let reply = one.read();
        if argv[0] == b"HELLO" {
            each.push(R::Simple("hello".into()));
        } else {
            each.push(reply);
        }
    }
    assert_eq!(got, each);
    assert_eq!(got[0], R::Nil, "a key whose deadline passed");
    assert_eq!(got[1], R::bulk("t"));
    assert_eq!(got[2], R::bulk("p"));
    assert_eq!(got[3], R::Err(WRONGTYPE.to_string()));
    assert!(matches!(&got[4], R::Err(_)), "a reserved key: {:?}", got[4]);
    assert!(matches!(&got[5], R::Err(e) if e.contains("wrong number of arguments")));
    assert_eq!(got[6], R::bulk("p"));
    assert_eq!(got[7], R::Nil);
    assert_eq!(got[9], R::Simple("QUEUED".into()));
    assert_eq!(got[11], R::Arr(vec![R::bulk("p"), R::bulk("t")]));
    assert_eq!(got[14], R::Nil);
    assert_eq!(got[16], R::Nil);
}

/// Hot keys of [`gets_see_time_go_forward_under_a_writer`].
const HOT_KEYS: usize = 16;

fn hot(i: usize) -> String {
    format!("hot:{i:02}")
}

// Goal: the GETs of one pipeline, and an MGET's keys, read in order while another client
// writes: a later read never sees an older state than an earlier one showed.
// Method: a writer pipelines SET hot:00 s, ..., SET hot:15 s for s = 1, 2, ...; a reader
// pipelines GET hot:15, ..., GET hot:00 (descending, so that a reordered read shows: once
// hot:i showed s, every hot:j below it holds s or later) and MGET hot:15 ... hot:00 (MGET is
// one moment for atomic batches only, like MSET's, not for single SETs: it reads its keys in
// order); 400 rounds.
#[test]
fn gets_see_time_go_forward_under_a_writer() {
    for io in IO_MODELS {
        let dir = tempfile::tempdir().expect("dir");
        let server = Running::start(dir.path(), io);
        let mut setup = server.client();
        for i in 0..HOT_KEYS {
            assert_eq!(setup.cmd(&["SET", &hot(i), "0"]), R::Simple("OK".into()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = Arc::clone(&stop);
            let mut w = server.client();
            thread::spawn(move || {
                let mut s = 0u64;
                while !stop.load(Ordering::Relaxed) && s < 20_000 {
                    s += 1;
                    let value = s.to_string();
                    let bytes: Vec<u8> = (0..HOT_KEYS)
                        .flat_map(|i| {
                            common::encode(&[b"SET", hot(i).as_bytes(), value.as_bytes()])
                        })
                        .collect();
                    w.send_raw(&bytes);
                    for _ in 0..HOT_KEYS {
                        assert_eq!(w.read(), R::Simple("OK".into()));
                    }
                }
                s
            })
        };
        let mut r = server.client();
        let int = |reply: &R| -> u64 {
            match reply {
                R::Bulk(b) => std::str::from_utf8(b)
                    .expect("utf8")
                    .parse()
                    .expect("number"),
                other => panic!("{io:?}: not a value: {other:?}"),
            }
        };
        // Per key, the least a read of it may still give: once hot:i showed s, every hot:j
        // with j <= i holds s or later for good (the writer wrote them first).
        let mut floors = [0u64; HOT_KEYS];
        let mut observe = |i: usize, s: u64| -> bool {
            let ok = s >= floors[i];
            for floor in &mut floors[..=i] {
                *floor = (*floor).max(s);
            }
            ok
        };
        for round in 0..400 {
            let mut bytes = Vec::new();
            for i in (0..HOT_KEYS).rev() {
                bytes.extend(common::encode(&[b"GET", hot(i).as_bytes()]));
            }
            let mut mget: Vec<Vec<u8>> = vec![b"MGET".to_vec()];
            mget.extend((0..HOT_KEYS).rev().map(|i| hot(i).into_bytes()));
            let mget: Vec<&[u8]> = mget.iter().map(Vec::as_slice).collect();
            bytes.extend(common::encode(&mget));
            r.send_raw(&bytes);
            for i in (0..HOT_KEYS).rev() {
                let s = int(&r.read());
                assert!(
                    observe(i, s),
                    "{io:?} round {round}: GET {} gave {s}, older than what an earlier GET (of this pipeline or an earlier one) showed was written to it",
                    hot(i)
                );
            }
            let values: Vec<u64> = r.read().items().iter().map(int).collect();
            for (i, &s) in (0..HOT_KEYS).rev().zip(&values) {
                assert!(
                    observe(i, s),
                    "{io:?} round {round}: MGET {values:?} gave {} = {s}, older than what an earlier read showed was written to it",
                    hot(i)
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        let rounds = writer.join().expect("writer");
        assert!(rounds > 0, "{io:?}: the writer wrote");
    }
}
