//! The driver of the collection model tests (issue 19 "Tests": "a model test per type").
//!
//! A model is the collection type's state in memory (key → collection) and a function that
//! applies one command to it, checking the server's reply. [`run`] sends random commands of a
//! type (its [`Kind`]) plus the commands every type shares (DEL, RENAME, COPY, EXISTS, TYPE,
//! SAVE, BGSAVE) one at a time to a real `forest serve`, applies each acknowledged one to the
//! model, and among them:
//! - SIGKILLs the server with a command, or half the time a pipeline of up to 9, in flight
//!   (after no delay, a spin of up to 0.5 ms or a sleep of up to 3 ms), reads the replies that
//!   came before the kill, restarts the server on the same directory and reads every key
//!   back: each collection's count (LLEN, SCARD, HLEN, ZCARD, XLEN) must equal its members,
//!   DBSIZE the number of collections, and the whole state the model's. A command whose
//!   reply came is acknowledged, so its effect must be there; of the unacknowledged ones a
//!   prefix (none, some, all) may have applied, and the model takes the one the server shows
//!   (if no prefix explains it, the test fails);
//! - stops it cleanly (SIGTERM) and restarts it, after which the state must be the model's.
//!
//! The seed is printed first and named in every failure; `FOREST_MODEL_SEED` replays one
//! (the same commands, kill points and delays; whether the command in flight lands before
//! the kill is up to timing), `FOREST_MODEL_STEPS` sets the number of commands per run. The engine is picked by the seed
//! among the store's engines (`FOREST_MODEL_ENGINE` overrides it).

pub mod hashes;
pub mod lists;
pub mod sets;
pub mod streams;
pub mod zsets;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::common::{data_dir, err_text, Server};

/// A reply as the models compare it (RESP2: a null bulk and a null array are both `Nil`).
#[derive(Clone, Debug, PartialEq)]
pub enum R {
    Nil,
    Int(i64),
    Bulk(String),
    Arr(Vec<R>),
    /// A status reply other than +OK.
    Status(String),
    Ok,
    /// An error reply's text ("ERR no such key").
    Err(String),
}

impl R {
    pub fn from_value(v: Value) -> R {
        match v {
            Value::Nil => R::Nil,
            Value::Int(n) => R::Int(n),
            Value::BulkString(b) => R::Bulk(String::from_utf8_lossy(&b).into_owned()),
            Value::Array(a) | Value::Set(a) => R::Arr(a.into_iter().map(R::from_value).collect()),
            Value::Okay => R::Ok,
            Value::SimpleString(s) if s == "OK" => R::Ok,
            Value::SimpleString(s) => R::Status(s),
            Value::ServerError(e) => R::Err(err_text(&e.into())),
            other => R::Status(format!("unexpected reply {other:?}")),
        }
    }

    /// The elements of an array reply, or an error naming what came instead.
    pub fn items(&self) -> Result<&[R], String> {
        match self {
            R::Arr(a) => Ok(a),
            other => Err(format!("expected an array, got {other:?}")),
        }
    }

    /// The text of a bulk reply.
    pub fn text(&self) -> Result<&str, String> {
        match self {
            R::Bulk(s) => Ok(s),
            other => Err(format!("expected a bulk string, got {other:?}")),
        }
    }
}

/// A bulk reply.
pub fn b(s: impl Into<String>) -> R {
    R::Bulk(s.into())
}

/// An array of bulk replies.
pub fn bulks<S: Into<String>>(items: impl IntoIterator<Item = S>) -> R {
    R::Arr(items.into_iter().map(b).collect())
}

/// An error reply.
pub fn e(text: &str) -> R {
    R::Err(text.to_string())
}

/// Checks `got` (`None`: the reply never came) against the model's `want`.
pub fn expect(got: Option<&R>, want: R) -> Result<(), String> {
    match got {
        Some(got) if *got != want => Err(format!("reply {got:?}, the model wants {want:?}")),
        _ => Ok(()),
    }
}

/// Checks an array reply's elements against `want` in any order (Redis's order for these
/// replies is its hash table's).
pub fn expect_unordered(got: Option<&R>, mut want: Vec<R>) -> Result<(), String> {
    let Some(got) = got else { return Ok(()) };
    let mut items = got.items()?.to_vec();
    let key = |r: &R| format!("{r:?}");
    items.sort_by_key(key);
    want.sort_by_key(key);
    if items == want {
        Ok(())
    } else {
        Err(format!(
            "reply {got:?}, the model wants {want:?} in any order"
        ))
    }
}

/// Checks a flat `a b a b ...` array reply's pairs against `want` in any order.
pub fn expect_pairs_unordered(
    got: Option<&R>,
    mut want: Vec<(String, String)>,
) -> Result<(), String> {
    let Some(got) = got else { return Ok(()) };
    let mut pairs = pairs_of(got)?;
    pairs.sort();
    want.sort();
    if pairs == want {
        Ok(())
    } else {
        Err(format!(
            "reply {got:?}, the model wants pairs {want:?} in any order"
        ))
    }
}

/// The `(a, b)` pairs of a flat array reply of bulks.
pub fn pairs_of(got: &R) -> Result<Vec<(String, String)>, String> {
    let items = got.items()?;
    if items.len() % 2 != 0 {
        return Err(format!("odd-length pair reply {got:?}"));
    }
    items
        .chunks(2)
        .map(|p| Ok((p[0].text()?.to_string(), p[1].text()?.to_string())))
        .collect()
}

/// The state of a type's keys: key → collection (an emptied collection is no key, as in Redis).
pub type State<C> = BTreeMap<String, C>;

/// One collection type's model.
pub trait Kind {
    type Coll: Clone + PartialEq + Debug;
    /// TYPE's answer for this type.
    const TYPE: &'static str;
    /// The keys the commands use (few, so that multi-key commands meet often).
    const KEYS: &'static [&'static str];
    /// A random command of this type (not the shared ones).
    fn gen(state: &State<Self::Coll>, rng: &mut StdRng) -> Vec<String>;
    /// Applies `args` to `state`, checking the reply (`None`: it never came, so only a
    /// command whose effect does not depend on its reply may be applied that way).
    fn apply(state: &mut State<Self::Coll>, args: &[String], got: Option<&R>)
        -> Result<(), String>;
    /// Whether applying `args` (reply unknown) to `before` can give `after`; the default
    /// asks [`Kind::apply`] for the one outcome, a type with random commands overrides it.
    fn explains(before: &State<Self::Coll>, args: &[String], after: &State<Self::Coll>) -> bool {
        let mut state = before.clone();
        Self::apply(&mut state, args, None).is_ok() && state == *after
    }
    /// Whether `args`'s effect depends on its reply (a random pick: SPOP).
    fn needs_reply(_args: &[String]) -> bool {
        false
    }
    /// Reads `key`'s collection back, checking its count command against its members.
    fn read(con: &mut redis::Connection, key: &str) -> Result<Self::Coll, String>;
}

/// Runs `args` as one command; `Err` for a connection failure, a server error is `R::Err`.
pub fn query(con: &mut redis::Connection, args: &[String]) -> Result<R, String> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a.as_str());
    }
    match cmd.query::<Value>(con) {
        Ok(v) => Ok(R::from_value(v)),
        Err(e) if e.code().is_some() => Ok(R::Err(err_text(&e))),
        Err(e) => Err(format!("{args:?}: {e}")),
    }
}

/// Runs `args` and returns the reply, failing on a connection error or an error reply.
pub fn read_query(con: &mut redis::Connection, args: &[&str]) -> Result<R, String> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    match query(con, &args)? {
        R::Err(text) => Err(format!("{args:?}: {text}")),
        r => Ok(r),
    }
}

/// An integer reply of `args`.
pub fn read_int(con: &mut redis::Connection, args: &[&str]) -> Result<i64, String> {
    match read_query(con, args)? {
        R::Int(n) => Ok(n),
        other => Err(format!("{args:?}: expected an integer, got {other:?}")),
    }
}

/// Checks that a count command agrees with the number of members listed.
pub fn check_count(count: i64, members: usize, what: &str) -> Result<(), String> {
    if count == members as i64 {
        Ok(())
    } else {
        Err(format!(
            "{what}: the count is {count} but {members} members are listed"
        ))
    }
}

/// The commands every type shares, over the type's keys.
fn gen_shared<K: Kind>(rng: &mut StdRng) -> Vec<String> {
    let key = |rng: &mut StdRng| K::KEYS[rng.random_range(0..K::KEYS.len())].to_string();
    match rng.random_range(0..20) {
        0..=4 => {
            let mut args = vec!["DEL".to_string()];
            for _ in 0..rng.random_range(1..=3) {
                args.push(key(rng));
            }
            args
        }
        5..=8 => vec!["RENAME".into(), key(rng), key(rng)],
        9..=12 => {
            let mut args = vec!["COPY".into(), key(rng), key(rng)];
            if rng.random_bool(0.5) {
                args.push("REPLACE".into());
            }
            args
        }
        13..=14 => vec!["EXISTS".into(), key(rng), key(rng)],
        15..=16 => vec!["TYPE".into(), key(rng)],
        17 => vec!["SAVE".into()],
        _ => vec!["BGSAVE".into()],
    }
}

/// Applies a shared command, or returns `None` if `args` is not one.
fn apply_shared<K: Kind>(
    state: &mut State<K::Coll>,
    args: &[String],
    got: Option<&R>,
) -> Option<Result<(), String>> {
    let result = match args[0].as_str() {
        "DEL" => {
            let mut removed = 0;
            for k in &args[1..] {
                removed += i64::from(state.remove(k).is_some());
            }
            expect(got, R::Int(removed))
        }
        "RENAME" => match state.remove(&args[1]) {
            None => expect(got, e("ERR no such key")),
            Some(c) => {
                state.insert(args[2].clone(), c);
                expect(got, R::Ok)
            }
        },
        "COPY" => {
            let replace = args.len() > 3;
            if args[1] == args[2] {
                expect(got, e("ERR source and destination objects are the same"))
            } else {
                match state.get(&args[1]).cloned() {
                    Some(c) if replace || !state.contains_key(&args[2]) => {
                        state.insert(args[2].clone(), c);
                        expect(got, R::Int(1))
                    }
                    _ => expect(got, R::Int(0)),
                }
            }
        }
        "EXISTS" => {
            let n = args[1..].iter().filter(|k| state.contains_key(*k)).count();
            expect(got, R::Int(n as i64))
        }
        "TYPE" => {
            let t = if state.contains_key(&args[1]) {
                K::TYPE
            } else {
                "none"
            };
            expect(got, R::Status(t.to_string()))
        }
        "SAVE" => expect(got, R::Ok),
        "BGSAVE" => match got {
            None => Ok(()),
            Some(R::Status(s)) if s == "Background saving started" => Ok(()),
            Some(R::Err(s)) if s == "ERR Background save already in progress" => Ok(()),
            Some(other) => Err(format!("BGSAVE replied {other:?}")),
        },
        _ => return None,
    };
    Some(result)
}

fn apply<K: Kind>(
    state: &mut State<K::Coll>,
    args: &[String],
    got: Option<&R>,
) -> Result<(), String> {
    match apply_shared::<K>(state, args, got) {
        Some(result) => result,
        None => K::apply(state, args, got),
    }
}

/// Reads every key of the type back (counts checked) and DBSIZE.
fn read_state<K: Kind>(con: &mut redis::Connection) -> Result<State<K::Coll>, String> {
    let mut state = State::new();
    for &key in K::KEYS {
        match read_query(con, &["TYPE", key])? {
            R::Status(t) if t == "none" => {}
            R::Status(t) if t == K::TYPE => {
                state.insert(key.to_string(), K::read(con, key)?);
            }
            other => return Err(format!("TYPE {key} answered {other:?}")),
        }
    }
    let dbsize = read_int(con, &["DBSIZE"])?;
    if dbsize != state.len() as i64 {
        return Err(format!(
            "DBSIZE is {dbsize}, but {} keys are there",
            state.len()
        ));
    }
    Ok(state)
}

/// Where the server runs and how a run is told apart in messages.
struct Run {
    seed: u64,
    dir: std::path::PathBuf,
    flags: Vec<String>,
    server: Option<Server>,
    label: String,
}

impl Run {
    fn start(&mut self) -> redis::Connection {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let server = Server::start(&self.dir, &flags);
        let con = server.client();
        self.server = Some(server);
        con
    }

    fn server(&mut self) -> &mut Server {
        self.server.as_mut().expect("the server runs")
    }
}

/// How many commands one run sends, unless `FOREST_MODEL_STEPS` says.
fn steps(default: usize) -> usize {
    std::env::var("FOREST_MODEL_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Out of 1000 commands, how many are sent with a SIGKILL after them, and how many are
/// preceded by a clean restart.
const KILLS_PER_MILLE: u32 = 25;
const REOPENS_PER_MILLE: u32 = 8;

/// The model test of type `K` against `forest serve --durability mode`, `default_steps`
/// commands long.
pub fn run<K: Kind>(mode: &str, default_steps: usize) {
    let seed: u64 = std::env::var("FOREST_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let engines = forest_store::engine_names();
    let engine = std::env::var("FOREST_MODEL_ENGINE")
        .unwrap_or_else(|_| engines[(seed % engines.len() as u64) as usize].to_string());
    let label = format!(
        "{} model, seed {seed} (FOREST_MODEL_SEED={seed}), --durability {mode}, --engine {engine}",
        K::TYPE
    );
    println!("{label}");
    let (_tmp, dir) = data_dir();
    let mut run = Run {
        seed,
        dir,
        flags: vec![
            "--engine".into(),
            engine,
            "--durability".into(),
            mode.into(),
        ],
        server: None,
        label,
    };
    let mut rng = StdRng::seed_from_u64(run.seed);
    let mut con = run.start();
    let mut state: State<K::Coll> = State::new();
    let (mut kills, mut reopens, mut unacked_applied) = (0, 0, 0);
    let began = Instant::now();
    let total = steps(default_steps);
    let label = run.label.clone();
    for step in 0..total {
        let at = |what: &str| format!("{label}, step {step}: {what}");
        let args = if rng.random_range(0..10) == 0 {
            gen_shared::<K>(&mut rng)
        } else {
            K::gen(&state, &mut rng)
        };
        let roll = rng.random_range(0..1000);
        if roll < REOPENS_PER_MILLE {
            run.server().signal("TERM");
            run.server().wait_exit();
            con = run.start();
            reopens += 1;
            let got = read_state::<K>(&mut con).unwrap_or_else(|m| panic!("{}", at(&m)));
            assert_eq!(got, state, "{}", at("the state after a clean restart"));
        }
        if roll >= 1000 - KILLS_PER_MILLE {
            // One command, or a pipeline of several (only the first may be one whose effect
            // depends on its reply, since a prefix of the rest is matched without replies).
            let mut batch = vec![args];
            if rng.random_bool(0.5) && !K::needs_reply(&batch[0]) {
                for _ in 0..rng.random_range(1..=8) {
                    let args = if rng.random_range(0..10) == 0 {
                        gen_shared::<K>(&mut rng)
                    } else {
                        K::gen(&state, &mut rng)
                    };
                    if !K::needs_reply(&args) {
                        batch.push(args);
                    }
                }
            }
            kill_during::<K>(
                &mut run,
                &mut con,
                &mut rng,
                &mut state,
                &batch,
                step,
                &mut unacked_applied,
            );
            kills += 1;
            continue;
        }
        let reply = query(&mut con, &args).unwrap_or_else(|m| panic!("{}", at(&m)));
        apply::<K>(&mut state, &args, Some(&reply))
            .unwrap_or_else(|m| panic!("{}", at(&format!("{args:?}: {m}"))));
    }
    let got =
        read_state::<K>(&mut con).unwrap_or_else(|m| panic!("{}: at the end: {m}", run.label));
    assert_eq!(got, state, "{}: the state at the end", run.label);
    println!(
        "{total} commands, {kills} SIGKILLs ({unacked_applied} with unacknowledged commands \
         applied), {reopens} clean restarts, {} keys at the end, {:.1} s",
        state.len(),
        began.elapsed().as_secs_f64()
    );
}

/// Sends `batch` as one pipeline, SIGKILLs the server after a random short delay, restarts
/// it and checks the recovered state against the model (module doc): the commands whose
/// replies came are applied; of the rest, a prefix may have landed (the server writes a
/// pipeline's commands in order), and the model takes the one the server shows.
fn kill_during<K: Kind>(
    run: &mut Run,
    con: &mut redis::Connection,
    rng: &mut StdRng,
    state: &mut State<K::Coll>,
    batch: &[Vec<String>],
    step: usize,
    unacked_applied: &mut usize,
) {
    let at = |label: &str, what: &str| {
        format!("{label}, step {step} (SIGKILL during the pipeline {batch:?}): {what}")
    };
    let mut pipe = redis::pipe();
    for args in batch {
        let cmd = pipe.cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a.as_str());
        }
    }
    con.send_packed_command(&pipe.get_packed_pipeline())
        .unwrap_or_else(|e| panic!("{}", at(&run.label, &format!("send: {e}"))));
    match rng.random_range(0..3) {
        0 => {}
        1 => {
            let until = Instant::now() + Duration::from_micros(rng.random_range(0..500));
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        _ => std::thread::sleep(Duration::from_micros(rng.random_range(0..3000))),
    }
    run.server().kill();
    // Replies that left the server before the kill still arrive: those commands were
    // acknowledged.
    let mut replies = Vec::new();
    while replies.len() < batch.len() {
        match con.recv_response() {
            Ok(v) => replies.push(R::from_value(v)),
            Err(e) if e.code().is_some() => replies.push(R::Err(err_text(&e))),
            Err(_) => break,
        }
    }
    for (args, reply) in batch.iter().zip(&replies) {
        apply::<K>(state, args, Some(reply))
            .unwrap_or_else(|m| panic!("{}", at(&run.label, &format!("{args:?}: {m}"))));
    }
    *con = run.start();
    let got = read_state::<K>(con).unwrap_or_else(|m| panic!("{}", at(&run.label, &m)));
    let unacked = &batch[replies.len()..];
    if unacked.is_empty() {
        assert_eq!(
            got,
            *state,
            "{}",
            at(&run.label, "the acknowledged commands' state")
        );
        return;
    }
    // The state after 0, 1, ... of the unacknowledged commands, until one needs its reply.
    let mut candidate = state.clone();
    let mut landed = (got == candidate).then_some(0);
    for (i, args) in unacked.iter().enumerate() {
        if landed.is_some() {
            break;
        }
        let mut next = candidate.clone();
        let explained = match apply_shared::<K>(&mut next, args, None) {
            Some(result) => result.is_ok() && next == got,
            None => K::explains(&candidate, args, &got),
        };
        if explained {
            landed = Some(i + 1);
            break;
        }
        let mut next = candidate.clone();
        if apply::<K>(&mut next, args, None).is_err() {
            break;
        }
        candidate = next;
    }
    let Some(landed) = landed else {
        panic!(
            "{}",
            at(
                &run.label,
                &format!(
                    "{} of {} acknowledged; the state after recovery is not the one after any \
                     prefix of the unacknowledged commands:\nacknowledged: {state:?}\nafter:  \
                     {got:?}",
                    replies.len(),
                    batch.len()
                )
            )
        )
    };
    if landed > 0 {
        *unacked_applied += 1;
    }
    *state = got;
}

/// Runs the model of `K` against a redis-server on PATH (no kills, no restarts): the check
/// of the model itself, so that a disagreement with forest is forest's. `false` if there is
/// no redis-server.
pub fn against_redis_server<K: Kind>(steps: usize) -> bool {
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return false;
    };
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let Ok(child) = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut con = loop {
        match client.get_connection() {
            Ok(con) => break con,
            Err(e) if Instant::now() > deadline => panic!("redis-server on {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let seed: u64 = rand::rng().random();
    println!("{} model against redis-server, seed {seed}", K::TYPE);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut state: State<K::Coll> = State::new();
    for step in 0..steps {
        let args = if rng.random_range(0..10) == 0 {
            gen_shared::<K>(&mut rng)
        } else {
            K::gen(&state, &mut rng)
        };
        if args[0] == "SAVE" || args[0] == "BGSAVE" {
            continue; // no checkpoint to write: --save ""
        }
        let reply = query(&mut con, &args).unwrap_or_else(|m| panic!("step {step}: {m}"));
        apply::<K>(&mut state, &args, Some(&reply))
            .unwrap_or_else(|m| panic!("seed {seed} step {step}: {args:?}: {m}"));
    }
    let got = read_state::<K>(&mut con).unwrap_or_else(|m| panic!("seed {seed}: {m}"));
    assert_eq!(got, state, "seed {seed}: the state at the end");
    true
}
