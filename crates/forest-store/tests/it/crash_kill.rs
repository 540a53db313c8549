//! SIGKILL tests: durability proven with real processes (STYLE.md §5 "SIGKILL test"; issue 5).
//!
//! The test binary re-runs itself as a child (`FOREST_KILL_CHILD=dir,mode,engine,seed`
//! selects child mode, `-- --exact <name> --nocapture` the test). The child opens a [`Store`]
//! and runs `THREAD_COUNT` writer threads, each issuing upserts and removes of its own keys
//! from a generator seeded by (seed, thread), and prints one line per acknowledged write:
//! `ack <thread> <seq> <key-hex> <value-hex|->`. The parent reads the lines, kills the child
//! with SIGKILL (`Child::kill`) after a random number of acks plus a random short delay,
//! drains the rest of the pipe, reopens the store and checks it.
//!
//! Because each thread's operations are a function of the seed, the parent regenerates them:
//! the ack lines must match, and each thread's keys must hold the state after a prefix of its
//! operations. In `sync` and `group` that prefix holds every acknowledged write and at most
//! the one in flight (a thread starts its next write only after printing the ack of the last);
//! in `periodic` any prefix up to the one in flight is allowed (the store only promises a
//! prefix). A value that no prefix explains (never written, or lost after its ack) fails.
//!
//! Every test kills the same directory several times, so recovery runs over the remains of
//! earlier recoveries (a kill may land during open, recovery or a checkpoint).
//!
//! A quarter of the writes are atomic batches (issue 12): the key and its twin (`<key>~`) set
//! to the same value, or both removed, in one `WriteBatch`. The prefix check covers them: a
//! batch recovered in part leaves key and twin different, which no prefix explains.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use forest_store::{Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The environment variable that puts the test binary in child mode.
const CHILD_ENV: &str = "FOREST_KILL_CHILD";
/// The environment variable that sets the kill cycles per test (default `CYCLE_COUNT_DEFAULT`).
const CYCLES_ENV: &str = "FOREST_KILL_CYCLES";
/// The environment variable that adds an offset to every test's seed base (default 0), so a
/// loop can try other seeds than CI's.
const SEED_OFFSET_ENV: &str = "FOREST_KILL_SEED_OFFSET";
/// 10 cycles × 9 tests = 90 kills per run: a few seconds in the `ci` profile (budget ~60 s).
/// The two bztree-pm tests run `BZTREE_PM_CYCLES` each; msync's is disk-bound (an msync
/// per flush): about 70 s in a debug build on a loaded 2-core machine.
const CYCLE_COUNT_DEFAULT: u64 = 10;
/// Writer threads in the child: more than one so group commit batches several writers.
const THREAD_COUNT: u64 = 4;
/// Keys per thread: small, so that keys are overwritten and removed often.
const KEYS_PER_THREAD: u64 = 24;
/// Operations per thread at most; the child then idles until killed.
const OPS_PER_THREAD_MAX: u64 = 200_000;
/// Acks read before the kill, at most (drawn uniformly from 0..=this).
const KILL_ACKS_MAX: u64 = 600;
/// Extra delay before the kill, at most.
const KILL_DELAY_MS_MAX: u64 = 30;
/// How long a child waits for the directory lock (see `open_retrying_lock`).
const LOCK_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long the parent waits for the next ack before declaring the child stuck.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// One write of a child thread.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Op {
    key: Vec<u8>,
    /// None: remove.
    value: Option<Vec<u8>>,
    /// Written with its twin key in one atomic batch.
    batch: bool,
}

impl Op {
    /// The key written with `key` in a batch.
    fn twin(&self) -> Vec<u8> {
        [self.key.as_slice(), b"~"].concat()
    }

    /// Applies the write to `state`.
    fn apply(&self, state: &mut State) {
        let keys = if self.batch {
            vec![self.key.clone(), self.twin()]
        } else {
            vec![self.key.clone()]
        };
        for key in keys {
            match &self.value {
                Some(v) => state.insert(key, v.clone()),
                None => state.remove(&key),
            };
        }
    }
}

/// The operations of `thread` in the child run with `seed`, in order.
struct OpGen {
    rng: StdRng,
    thread: u64,
    seed: u64,
    seq: u64,
}

impl OpGen {
    fn new(seed: u64, thread: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ thread),
            thread,
            seed,
            seq: 0,
        }
    }

    fn next_op(&mut self) -> Op {
        let key = format!(
            "t{:02}/k{:03}",
            self.thread,
            self.rng.random_range(0..KEYS_PER_THREAD)
        )
        .into_bytes();
        let value = if self.rng.random_ratio(1, 4) {
            None
        } else {
            // The value names its write, so a stray one is traceable; padding varies sizes.
            let pad = self.rng.random_range(0..64);
            Some(
                format!(
                    "{}.{}.{}.{}",
                    self.seed,
                    self.thread,
                    self.seq,
                    "x".repeat(pad)
                )
                .into_bytes(),
            )
        };
        self.seq += 1;
        let batch = self.rng.random_ratio(1, 4);
        Op { key, value, batch }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The separator of a memory budget after the engine (`bwtree@budget=8192`): the budget
/// is a store option, not part of the engine spec.
const BUDGET_SEP: &str = "@budget=";
/// The separator of a map checkpoint schedule after the budget (`bwtree@budget=8192@map=
/// 16384`: `StoreOptions::map_checkpoint_wal_bytes`; without it, the default).
const MAP_SEP: &str = "@map=";

fn options(engine: &str, mode: &str) -> StoreOptions {
    let (engine, map_every) = match engine.split_once(MAP_SEP) {
        Some((engine, bytes)) => (engine, bytes.parse().expect("map checkpoint bytes")),
        None => (
            engine,
            forest_store::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT,
        ),
    };
    let (engine, budget) = match engine.split_once(BUDGET_SEP) {
        Some((engine, budget)) => (engine, Some(budget.parse().expect("budget bytes"))),
        None => (engine, None),
    };
    StoreOptions {
        engine: Some(engine.to_string()),
        durability: mode.parse::<Durability>().expect("valid mode"),
        shards: 2,
        switch_engine: false,
        memory_budget_bytes: budget,
        map_checkpoint_wal_bytes: Some(map_every),
    }
}

/// Opens the store, waiting out a lock still held for a moment by a process the parent
/// forked for another test: a fork copies the parent's file descriptors, the LOCK's among
/// them, until that child execs (CLOEXEC), so the flock may outlive `Store::close` briefly.
/// Also used by `temporal`'s SIGKILL model tests (review rev-tsb F4).
pub(crate) fn open_retrying_lock(dir: &Path, options: &StoreOptions) -> Store {
    let began = std::time::Instant::now();
    loop {
        match Store::open_path(dir, options.clone()) {
            Ok(store) => return store,
            Err(forest_core::Error::Io {
                op: "lock", source, ..
            }) if source.kind() == std::io::ErrorKind::WouldBlock
                && began.elapsed() < LOCK_WAIT_MAX =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
}

/// Child mode: write until killed, printing an ack line after each acknowledged write.
fn run_child(spec: &str) -> ! {
    // The engine spec may hold commas of its own (`bztree-pm:persist=msync,node=256`).
    let parsed = spec.split_once(',').and_then(|(dir, rest)| {
        let (mode, rest) = rest.split_once(',')?;
        let (engine, seed) = rest.rsplit_once(',')?;
        Some((dir, mode, engine, seed))
    });
    let Some((dir, mode, engine, seed)) = parsed else {
        panic!("{CHILD_ENV}={spec:?}: expected dir,mode,engine,seed");
    };
    let seed: u64 = seed.parse().expect("seed");
    let store = open_retrying_lock(Path::new(dir), &options(engine, mode));
    std::thread::scope(|s| {
        for thread in 0..THREAD_COUNT {
            let store = &store;
            s.spawn(move || {
                let mut ops = OpGen::new(seed, thread);
                for seq in 0..OPS_PER_THREAD_MAX {
                    let op = ops.next_op();
                    match (&op.value, op.batch) {
                        (Some(v), false) => store.upsert(&op.key, v).expect("child upsert"),
                        (None, false) => {
                            store.remove(&op.key).expect("child remove");
                        }
                        (value, true) => {
                            let mut batch = WriteBatch::new();
                            match value {
                                Some(v) => batch.put(&op.key, v).put(&op.twin(), v),
                                None => batch.remove(&op.key).remove(&op.twin()),
                            };
                            store.write(&batch).expect("child batch");
                        }
                    }
                    let value = op.value.as_deref().map_or_else(|| "-".to_string(), hex);
                    let kind = if op.batch { "b" } else { "s" };
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {thread} {seq} {} {value} {kind}", hex(&op.key))
                        .expect("stdout");
                    out.flush().expect("flush");
                }
            });
        }
    });
    // Every thread finished: wait for the kill rather than exit, so the parent's kill
    // always hits a live process.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Parses an ack line into (thread, seq, the write).
fn parse_ack(line: &str) -> Option<(u64, u64, Op)> {
    fn unhex(s: &str) -> Option<Vec<u8>> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect()
    }
    let mut words = line.strip_prefix("ack ")?.split(' ');
    let thread = words.next()?.parse().ok()?;
    let seq = words.next()?.parse().ok()?;
    let key = unhex(words.next()?)?;
    let value = match words.next()? {
        "-" => None,
        v => Some(unhex(v)?),
    };
    let batch = words.next()? == "b";
    Some((thread, seq, Op { key, value, batch }))
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// The thread whose key this is (keys are `tNN/kNNN`).
fn thread_of(key: &[u8]) -> u64 {
    std::str::from_utf8(&key[1..3])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected key {key:?}"))
}

/// One kill cycle; returns the recovered state (the next cycle's starting state) and the
/// number of acknowledged writes it checked.
fn kill_cycle(
    name: &str,
    dir: &Path,
    mode: &str,
    engine: &str,
    seed: u64,
    before: &State,
) -> (State, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kill_acks = rng.random_range(0..=KILL_ACKS_MAX);
    let kill_delay = Duration::from_millis(rng.random_range(0..=KILL_DELAY_MS_MAX));
    let spec = format!("{},{mode},{engine},{seed}", dir.display());
    // The test's path in this binary (`crash_kill::<name>`), which `--exact` wants.
    let (_, module) = module_path!()
        .split_once("::")
        .expect("a module of the test binary");
    let path = format!("{module}::{name}");
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        // `--include-ignored`: the review's ignored kill tests run their child too.
        .args([
            "--exact",
            path.as_str(),
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test <name> ... " before the first ack on the same line.
            let Some(at) = line.find("ack ") else {
                continue;
            };
            if tx.send(line[at..].to_string()).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while (lines.len() as u64) < kill_acks {
        match rx.recv_timeout(ACK_TIMEOUT) {
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().expect("wait");
                panic!(
                    "{name} seed {seed}: child stopped acking after {} acks ({e}; {status})",
                    lines.len()
                );
            }
        }
    }
    std::thread::sleep(kill_delay);
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("wait");
    assert!(
        !status.success(),
        "{name} seed {seed}: the child must die by the kill"
    );
    reader.join().expect("reader thread");
    // Lines printed before the kill but not yet read are acks too.
    lines.extend(rx.try_iter());

    // The acks, per thread, must be the generated operations in order.
    let mut acked = vec![0u64; THREAD_COUNT as usize];
    let mut gens: Vec<OpGen> = (0..THREAD_COUNT).map(|t| OpGen::new(seed, t)).collect();
    let mut ops: Vec<Vec<Op>> = vec![Vec::new(); THREAD_COUNT as usize];
    for line in &lines {
        let (thread, seq, acked_op) =
            parse_ack(line).unwrap_or_else(|| panic!("bad ack line {line:?}"));
        let t = thread as usize;
        assert_eq!(
            seq, acked[t],
            "{name} seed {seed}: acks of thread {thread} out of order"
        );
        acked[t] += 1;
        let op = gens[t].next_op();
        assert_eq!(
            op, acked_op,
            "{name} seed {seed}: ack differs from the generator"
        );
        ops[t].push(op);
    }
    // The write in flight at the kill (applied, maybe durable, not acked).
    for (t, gen) in gens.iter_mut().enumerate() {
        ops[t].push(gen.next_op());
    }

    let store = Store::open_path(dir, options(engine, mode)).expect("recovery after SIGKILL");
    let recovered: State = store.to_vec().into_iter().collect();
    store.close().expect("close");

    let acks_durable = mode.parse::<Durability>().expect("mode").acks_durable();
    for t in 0..THREAD_COUNT {
        let own = |state: &State| -> State {
            state
                .iter()
                .filter(|(k, _)| thread_of(k) == t)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let target = own(&recovered);
        let mut model = own(before);
        let ops = &ops[t as usize];
        let acked = acked[t as usize] as usize;
        // Prefix lengths allowed: every acked write is durable in sync/group.
        let shortest = if acks_durable { acked } else { 0 };
        let mut matched = None;
        for (len, op) in std::iter::once(None)
            .chain(ops.iter().map(Some))
            .enumerate()
        {
            if let Some(op) = op {
                op.apply(&mut model);
            }
            if len >= shortest && model == target {
                matched = Some(len);
                break;
            }
        }
        if matched.is_none() {
            // What the shortest allowed prefix holds and the recovered state lacks or holds
            // otherwise, and the acked writes to those keys: names the lost writes.
            let mut expected = own(before);
            for op in &ops[..shortest] {
                op.apply(&mut expected);
            }
            let show = |k: &[u8], v: Option<&Vec<u8>>| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    v.map_or("(absent)".into(), |v| String::from_utf8_lossy(v)
                        .into_owned())
                )
            };
            let differ: Vec<String> = expected
                .keys()
                .chain(target.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|&k| expected.get(k) != target.get(k))
                .map(|k: &Vec<u8>| {
                    let writes: Vec<usize> = ops
                        .iter()
                        .enumerate()
                        .filter(|(_, op)| &op.key == k || &op.twin() == k)
                        .map(|(seq, _)| seq)
                        .collect();
                    format!(
                        "{} recovered {}; writes (seq) {writes:?}",
                        show(k, expected.get(k)),
                        show(k, target.get(k))
                    )
                })
                .collect();
            panic!(
                "{name} seed {seed}: thread {t}'s keys match no allowed prefix ({acked} acked, \
                 mode {mode}); the first {shortest} writes' state differs at: {differ:#?}; \
                 recovered {:?}",
                target
                    .iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v)))
                    .collect::<Vec<_>>()
            );
        }
    }
    assert!(
        recovered.keys().all(|k| thread_of(k) < THREAD_COUNT),
        "{name} seed {seed}: a key no thread wrote"
    );
    (recovered, lines.len() as u64)
}

/// The store directory of a kill test, kept (and named on stderr) when the test fails, so the
/// state that failed can be examined.
struct KeptOnFailure(Option<tempfile::TempDir>);

impl KeptOnFailure {
    fn path(&self) -> &Path {
        self.0.as_ref().expect("held until drop").path()
    }
}

impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if let (true, Some(dir)) = (std::thread::panicking(), self.0.take()) {
            eprintln!(
                "kill test failed: its store directory is kept at {}",
                dir.keep().display()
            );
        }
    }
}

/// The map checkpoint files (`lss/map-<seq>`) of the store in `dir`.
fn map_checkpoints_in(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("lss")).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("map-") && !name.contains('.')
            })
            .count()
    })
}

/// Runs the kill cycles of one (mode, engine), or the child if the env var says so.
fn kill_test(name: &str, mode: &str, engine: &str, seed_base: u64) {
    kill_test_cycles(name, mode, engine, seed_base, CYCLE_COUNT_DEFAULT);
}

/// [`kill_test`] with its own default number of cycles (`FOREST_KILL_CYCLES` still wins).
fn kill_test_cycles(name: &str, mode: &str, engine: &str, seed_base: u64, default: u64) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        run_child(&spec);
    }
    let cycles = std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let seed_base = seed_base
        + std::env::var(SEED_OFFSET_ENV)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    let tmp = KeptOnFailure(Some(tempfile::tempdir().expect("tempdir")));
    let mut state = State::new();
    let mut acked = 0;
    // Cycles whose child (and the parent's check) opened a store with map checkpoints.
    let mut from_map = 0;
    for cycle in 0..cycles {
        from_map += u64::from(map_checkpoints_in(tmp.path()) > 0);
        let (next, count) = kill_cycle(name, tmp.path(), mode, engine, seed_base + cycle, &state);
        state = next;
        acked += count;
    }
    if engine.contains(MAP_SEP) {
        assert!(
            map_checkpoints_in(tmp.path()) > 0,
            "{name}: no map checkpoint was ever taken"
        );
        println!("{name}: {from_map} of {cycles} opens recovered from a map checkpoint");
    }
    // Every check passed (docs/RELIABILITY.md counts these): in sync and group nothing
    // acknowledged was lost; periodic promises only a prefix, which held.
    let verdict = if mode.parse::<Durability>().expect("mode").acks_durable() {
        "0 lost"
    } else {
        "a prefix kept each time (periodic acknowledges before durability)"
    };
    println!("{name}: {cycles} kills, {acked} acknowledged writes checked, {verdict}");
}

// Goal: in sync mode every acked write survives SIGKILL (lockbtree). Method: kill cycles.
#[test]
fn kill_sync_lockbtree() {
    kill_test("kill_sync_lockbtree", "sync", "lockbtree", 1_000);
}

// Goal: in sync mode every acked write survives SIGKILL (bwtree). Method: kill cycles.
#[test]
fn kill_sync_bwtree() {
    kill_test("kill_sync_bwtree", "sync", "bwtree", 2_000);
}

// Goal: in group mode every acked write survives SIGKILL (lockbtree). Method: kill cycles.
#[test]
fn kill_group_lockbtree() {
    kill_test("kill_group_lockbtree", "group", "lockbtree", 3_000);
}

// Goal: in group mode every acked write survives SIGKILL (bwtree). Method: kill cycles.
#[test]
fn kill_group_bwtree() {
    kill_test("kill_group_bwtree", "group", "bwtree", 4_000);
}

// Goal: in periodic mode recovery succeeds with a prefix of each thread's writes
// (lockbtree). Method: kill cycles.
#[test]
fn kill_periodic_lockbtree() {
    kill_test("kill_periodic_lockbtree", "periodic:20", "lockbtree", 5_000);
}

// Goal: in periodic mode recovery succeeds with a prefix of each thread's writes (bwtree).
// Method: kill cycles.
#[test]
fn kill_periodic_bwtree() {
    kill_test("kill_periodic_bwtree", "periodic:20", "bwtree", 6_000);
}

// Goal: in sync mode every acked write survives SIGKILL (masstree). Method: kill cycles.
#[test]
fn kill_sync_masstree() {
    kill_test("kill_sync_masstree", "sync", "masstree", 7_000);
}

// Goal: in group mode every acked write survives SIGKILL (masstree). Method: kill cycles.
#[test]
fn kill_group_masstree() {
    kill_test("kill_group_masstree", "group", "masstree", 8_000);
}

// Goal: in periodic mode recovery succeeds with a prefix of each thread's writes
// (masstree). Method: kill cycles.
#[test]
fn kill_periodic_masstree() {
    kill_test("kill_periodic_masstree", "periodic:20", "masstree", 9_000);
}

/// Kill cycles of the stores on the persistent BzTree (issue 16 asks for at least 20).
const BZTREE_PM_CYCLES: u64 = 20;
/// A small tree file, so that 20 reopens stay quick: 64 MiB of heap, 1024 descriptors.
const BZTREE_PM_SIZES: &str = "heap_mib=64,descriptors=1024";

// Goal: on bztree-pm with persist=msync (single writes logged nowhere, durable when the tree
// returns; batches redo records) every acked write survives SIGKILL and every batch is
// whole or absent. Method: kill cycles.
#[test]
fn kill_group_bztree_pm_msync() {
    kill_test_cycles(
        "kill_group_bztree_pm_msync",
        "group",
        &format!("bztree-pm:persist=msync,{BZTREE_PM_SIZES}"),
        10_000,
        BZTREE_PM_CYCLES,
    );
}

// Goal: on bztree-pm with persist=clwb (logs kept; a same-boot reopen trusts the file unless
// a batch was applying) every acked write survives SIGKILL and every batch is whole or
// absent. Method: kill cycles.
#[test]
fn kill_group_bztree_pm_clwb() {
    kill_test_cycles(
        "kill_group_bztree_pm_clwb",
        "group",
        &format!("bztree-pm:{BZTREE_PM_SIZES}"),
        11_000,
        BZTREE_PM_CYCLES,
    );
}

/// Kill cycles of the bwtree on its LSS under a small budget (issue 17, increment 4).
const BWTREE_BUDGET_CYCLES: u64 = 6;

// Goal: on bwtree with a memory budget of a few pages (the tree evicts to its LSS all the
// time; every open discards the LSS and rebuilds from checkpoint + WAL) every acked write
// survives SIGKILL and every batch is whole or absent. Method: kill cycles.
#[test]
fn kill_group_bwtree_budget() {
    kill_test_cycles(
        "kill_group_bwtree_budget",
        "group",
        &format!("bwtree{BUDGET_SEP}8192"),
        12_000,
        BWTREE_BUDGET_CYCLES,
    );
}

/// Kill cycles of the bwtree recovering from its LSS (issue 17 asks for at least 20).
const BWTREE_MAP_CYCLES: u64 = 20;

// Goal: on bwtree with a small budget and map checkpoints every 16 KiB of WAL (a scheduled
// checkpoint every ~100 writes, on the checkpointer thread, so kills land before, during and
// after them; the cleaner runs), every acked write survives SIGKILL, every batch is whole or
// absent, and reopens recover the tree from a map checkpoint, redoing the WAL from its RSSP
// (the WAL below the older one is deleted). Method: kill cycles; the directory must hold map
// checkpoints at the end.
#[test]
fn kill_group_bwtree_map_checkpoints() {
    kill_test_cycles(
        "kill_group_bwtree_map_checkpoints",
        "group",
        &format!("bwtree{BUDGET_SEP}8192{MAP_SEP}16384"),
        13_000,
        BWTREE_MAP_CYCLES,
    );
}

// Review rev-mapdef: the SIGKILL cycles with a map checkpoint every 1 KiB of WAL (several per
// cycle's writes, so kills land inside checkpoints and WAL deletions far more often), in
// group and sync modes.
#[test]
#[ignore = "rev: mapdef-kill SIGKILL cycles with a map checkpoint every 1 KiB of WAL"]
fn rev_kill_group_bwtree_map_checkpoints_every_kib() {
    kill_test_cycles(
        "rev_kill_group_bwtree_map_checkpoints_every_kib",
        "group",
        &format!("bwtree{BUDGET_SEP}8192{MAP_SEP}1024"),
        21_000,
        BWTREE_MAP_CYCLES,
    );
}

#[test]
#[ignore = "rev: mapdef-kill SIGKILL cycles in sync mode with a map checkpoint every 1 KiB"]
fn rev_kill_sync_bwtree_map_checkpoints_every_kib() {
    kill_test_cycles(
        "rev_kill_sync_bwtree_map_checkpoints_every_kib",
        "sync",
        &format!("bwtree{BUDGET_SEP}8192{MAP_SEP}1024"),
        22_000,
        BWTREE_MAP_CYCLES,
    );
}
