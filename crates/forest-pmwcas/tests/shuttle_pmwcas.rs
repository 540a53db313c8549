//! Shuttle randomized concurrency tests of PMwCAS (issue 16): 4 threads, each running a few
//! PMwCASes of 1–3 distinct words chosen at random among 8, checked against a sequential model.
//!
//! Run: `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle cargo test -p forest-pmwcas
//! --release --test shuttle_pmwcas` (.ci/run). A failure prints the schedule to replay.
//!
//! Each op reads its words through `Pool::read` and asks to change each from the value it read
//! to a value unique to the op (`op_value`), so every value names the op that wrote it. Each
//! thread also reads a random word after each op. The model, from the outcomes alone:
//! (a) every value read is the initial value or one a successful op installed (no failed op's
//!     value, no descriptor reference, no control bits);
//! (b) per word, the successful ops form one chain from the initial value (each one's expected
//!     value is the previous one's new value, no two from the same value), and the union of the
//!     chains, as a precedence graph over ops, is acyclic: a linearization exists;
//! (c) each word's final value is its chain's last value;
//! (d) a failed op had a reason to fail: not all of its expected values are still in place at
//!     the end (values are unique, so a value in place at the end was in place all along since
//!     the op read it), and by (a) none of its values was ever seen;
//! and each thread sees each word move only forward along its chain (its own ops included).
//! In persistent mode (`sim`), the main thread also takes a crash image at a random point of
//! the run: its recovery must be a consistent cut of the linearization (each op in on all its
//! words or none) holding every op acknowledged before the image.
//!
//! Under `--cfg shuttle` the pool's epochs are `reclaim.rs`'s stand-in (crossbeam-epoch keys
//! participants by OS thread; shuttle runs every thread on one), and regions are heap words of
//! shuttle atomics. Shuttle models every ordering as `SeqCst`: weak-memory bugs are loom's part.
#![cfg(shuttle)]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use forest_pmwcas::{Error, NoPersist, Persist, Pool, PoolConfig, Region, Sim, Word, VALUE_MASK};
use shuttle::rand::{thread_rng, RngCore};
use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::{Config, Runner};

const THREADS: usize = 4;
const WORDS: usize = 8;
const OPS_PER_THREAD: usize = 3;
const WORDS_PER_OP_MAX: usize = 3;
/// One descriptor per thread: descriptors are reused while other threads may still hold
/// references to them, and allocations wait (the retry on exhaustion is the documented remedy).
const DESCRIPTORS: usize = 4;
const RANDOM_ITERATIONS: usize = 2_000;
const PCT_ITERATIONS: usize = 1_000;
const PCT_DEPTH: usize = 3;
const SIM_ITERATIONS: usize = 500;

/// Totals over one test's executions (std atomics: outside the model), so that the test can
/// show it met contention: PMwCASes, failures, helps, waits for a descriptor.
struct Totals([AtomicU64; 4]);

impl Totals {
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; 4])
    }

    fn add<P: Persist>(&self, pool: &Pool<P>) {
        let stats = pool.stats();
        let counts = [
            stats.attempts(),
            stats.failures(),
            stats.helps,
            stats.pool_waits,
        ];
        for (total, count) in self.0.iter().zip(counts) {
            total.fetch_add(count, Ordering::Relaxed);
        }
    }
}

static RANDOM_TOTALS: Totals = Totals::new();
static PCT_TOTALS: Totals = Totals::new();
static SIM_TOTALS: Totals = Totals::new();

/// Op `op` (1-based; 0 is the initial state) writes this to word `w`: unique per op and word.
fn op_value(op: usize, w: usize) -> u64 {
    (op * WORDS + w) as u64
}

fn config() -> PoolConfig {
    PoolConfig {
        partition_count: 1,
        descriptors_per_partition: DESCRIPTORS,
        client_words: 0,
        user_words: WORDS,
        recyclers: Vec::new(),
    }
}

fn word<P: Persist>(pool: &Pool<P>, w: usize) -> &Word {
    pool.word(pool.user_area().start + 8 * w as u64).unwrap()
}

fn read<P: Persist>(pool: &Pool<P>, w: usize) -> u64 {
    let guard = pool.pin();
    pool.read(word(pool, w), &guard)
}

/// One finished op: `(word, expected, new)` per entry, and whether it succeeded.
#[derive(Debug, Clone)]
struct Outcome {
    op: usize,
    entries: Vec<(usize, u64, u64)>,
    succeeded: bool,
}

/// What one thread saw, in its order: values read, and its own successful installs.
#[derive(Debug, Default)]
struct ThreadLog {
    outcomes: Vec<Outcome>,
    seen: Vec<(usize, u64)>,
}

/// The ops' words, drawn before the threads start: `plan[t][k]` is thread t's k-th op.
fn plan() -> Vec<Vec<Vec<usize>>> {
    let mut rng = thread_rng();
    (0..THREADS)
        .map(|_| {
            (0..OPS_PER_THREAD)
                .map(|_| {
                    let count = 1 + (rng.next_u64() % WORDS_PER_OP_MAX as u64) as usize;
                    let mut words = Vec::with_capacity(count);
                    while words.len() < count {
                        let w = (rng.next_u64() % WORDS as u64) as usize;
                        if !words.contains(&w) {
                            words.push(w);
                        }
                    }
                    words
                })
                .collect()
        })
        .collect()
}

/// Runs thread `t`'s ops: read the words, PMwCAS them from what was read to the op's values,
/// then read one more word.
fn run_thread<P: Persist>(
    pool: &Pool<P>,
    acked: &[AtomicBool],
    t: usize,
    ops: &[Vec<usize>],
    after: &[usize],
) -> ThreadLog {
    let mut log = ThreadLog::default();
    for (k, words) in ops.iter().enumerate() {
        let op = 1 + t * OPS_PER_THREAD + k;
        let entries: Vec<(usize, u64, u64)> = words
            .iter()
            .map(|&w| {
                let value = read(pool, w);
                log.seen.push((w, value));
                (w, value, op_value(op, w))
            })
            .collect();
        let succeeded = loop {
            let guard = pool.pin();
            let outcome = match pool.allocate_descriptor(&guard) {
                Ok(mut d) => {
                    for &(w, expected, new) in &entries {
                        d.add_word(word(pool, w), expected, new).unwrap();
                    }
                    Some(d.execute().unwrap())
                }
                Err(Error::PoolExhausted { .. }) => None,
                Err(e) => panic!("{e}"),
            };
            drop(guard);
            match outcome {
                Some(succeeded) => break succeeded,
                // Unpinned now, so descriptors retired before can come back; let others run.
                None => shuttle::thread::yield_now(),
            }
        };
        // A std atomic: shuttle runs every thread on one OS thread, so it is seen at once.
        acked[op].store(succeeded, Ordering::Relaxed);
        if succeeded {
            log.seen.extend(entries.iter().map(|&(w, _, new)| (w, new)));
        }
        log.outcomes.push(Outcome {
            op,
            entries,
            succeeded,
        });
        let w = after[k];
        log.seen.push((w, read(pool, w)));
    }
    log
}

/// Per word, the chain of values from the initial one: `position[w][value]` is the value's
/// index in word w's chain, `chain[w]` the ops in order (index 0: the initial state, op 0).
struct Model {
    chain: Vec<Vec<usize>>,
    position: Vec<BTreeMap<u64, usize>>,
}

/// Checks (b) and returns the chains: from the initial value, follow the one successful op
/// that expected the current value; every successful op on the word must be reached.
fn build_chains(outcomes: &[Outcome]) -> Model {
    let mut chain = Vec::with_capacity(WORDS);
    let mut position = Vec::with_capacity(WORDS);
    for w in 0..WORDS {
        // expected value -> (op, new value), for the successful ops on w.
        let mut next: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.succeeded) {
            for &(ow, expected, new) in &o.entries {
                if ow == w {
                    if let Some((other, _)) = next.insert(expected, (o.op, new)) {
                        panic!(
                            "(b) word {w}: ops {other} and {} both succeeded from value {expected}",
                            o.op
                        );
                    }
                }
            }
        }
        let total = next.len();
        let mut value = op_value(0, w);
        let mut ops = vec![0];
        let mut at = BTreeMap::from([(value, 0)]);
        while let Some((op, new)) = next.remove(&value) {
            ops.push(op);
            at.insert(new, ops.len() - 1);
            value = new;
        }
        assert!(
            next.is_empty(),
            "(b) word {w}: {} of {total} successful ops are off the chain from the initial value \
             (their expected values {:?} were never installed)",
            next.len(),
            next.keys().collect::<Vec<_>>()
        );
        chain.push(ops);
        position.push(at);
    }
    Model { chain, position }
}

/// (b) the per-word chains, taken together, order the ops without a cycle (Kahn's algorithm).
fn check_acyclic(model: &Model, ops: usize) {
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); ops + 1];
    let mut indegree = vec![0usize; ops + 1];
    for chain in &model.chain {
        for pair in chain.windows(2) {
            succ[pair[0]].push(pair[1]);
            indegree[pair[1]] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..=ops).filter(|&o| indegree[o] == 0).collect();
    let mut ordered = 0;
    while let Some(o) = ready.pop() {
        ordered += 1;
        for &s in &succ[o] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push(s);
            }
        }
    }
    let stuck: Vec<usize> = (0..=ops).filter(|&o| indegree[o] != 0).collect();
    assert_eq!(
        ordered,
        ops + 1,
        "(b) the words' chains order ops {stuck:?} in a cycle: no linearization"
    );
}

fn check<P: Persist>(pool: &Pool<P>, logs: &[ThreadLog]) -> Model {
    let outcomes: Vec<Outcome> = logs.iter().flat_map(|l| l.outcomes.clone()).collect();
    let model = build_chains(&outcomes);
    check_acyclic(&model, THREADS * OPS_PER_THREAD);
    for (t, log) in logs.iter().enumerate() {
        let mut last = [0usize; WORDS];
        for &(w, value) in &log.seen {
            // (a): the value is the initial one or a successful op's.
            let Some(&at) = model.position[w].get(&value) else {
                panic!(
                    "(a) thread {t} read {value:#x} from word {w}: no successful op installed it \
                     (chain {:?})",
                    model.chain[w]
                );
            };
            assert!(
                at >= last[w],
                "thread {t} saw word {w} go back along its chain from op {} to op {}",
                model.chain[w][last[w]],
                model.chain[w][at]
            );
            last[w] = at;
        }
    }
    let finals: Vec<u64> = (0..WORDS).map(|w| read(pool, w)).collect();
    for (w, &value) in finals.iter().enumerate() {
        let last_op = *model.chain[w].last().unwrap();
        // (c): the final value is the last op's.
        assert_eq!(
            value,
            op_value(last_op, w),
            "(c) word {w} ends at {value:#x}, its chain {:?} at op {last_op}",
            model.chain[w]
        );
    }
    for o in outcomes.iter().filter(|o| !o.succeeded) {
        // (d): a failure needs some word that did not hold its expected value throughout.
        assert!(
            o.entries
                .iter()
                .any(|&(w, expected, _)| finals[w] != expected),
            "(d) op {} failed though every word it expected ({:?}) still holds that value",
            o.op,
            o.entries
        );
    }
    model
}

/// Starts the threads on `pool`, runs `during` on this thread while they run (with the ops
/// acknowledged as successful so far), joins them, and checks the outcomes against the model.
fn run_and_check<P: Persist, R>(
    pool: &Arc<Pool<P>>,
    totals: &Totals,
    during: impl FnOnce(&Pool<P>, &[AtomicBool]) -> R,
) -> (Model, R) {
    for w in 0..WORDS {
        word(pool, w).init(op_value(0, w));
    }
    pool.persist_range(0..pool.region().len_bytes());
    let plan = plan();
    let mut rng = thread_rng();
    let after: Vec<Vec<usize>> = (0..THREADS)
        .map(|_| {
            (0..OPS_PER_THREAD)
                .map(|_| (rng.next_u64() % WORDS as u64) as usize)
                .collect()
        })
        .collect();
    let acked: Arc<Vec<AtomicBool>> = Arc::new(
        (0..=THREADS * OPS_PER_THREAD)
            .map(|_| AtomicBool::new(false))
            .collect(),
    );
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = Arc::clone(pool);
            let acked = Arc::clone(&acked);
            let ops = plan[t].clone();
            let after = after[t].clone();
            shuttle::thread::spawn(move || run_thread(&pool, &acked, t, &ops, &after))
        })
        .collect();
    let result = during(pool, &acked);
    let logs: Vec<ThreadLog> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let model = check(pool, &logs);
    totals.add(pool);
    (model, result)
}

fn volatile_case(totals: &Totals) {
    let pool = Arc::new(Pool::create_volatile(NoPersist, config()).unwrap());
    run_and_check(&pool, totals, |_, _| ());
}

/// The user words of a pool recovered from a crash `image`.
fn recover(image: &[u64]) -> Vec<u64> {
    let region = Region::from_image(image);
    let sim = Sim::new(&region);
    let (recovered, _) = Pool::open(region, sim, config()).unwrap();
    (0..WORDS).map(|w| read(&recovered, w)).collect()
}

/// A crash while the ops ran recovered to `recovered`: each word's value is on its chain, and
/// the ops it includes are a consistent cut of the linearization: each successful op is in
/// on all its words or on none (with the per-word chains, that makes the cut closed under
/// precedence), and every op acknowledged before the crash is in.
fn check_crash_cut(model: &Model, recovered: &[u64], acked: &[usize]) {
    let at: Vec<usize> = (0..WORDS)
        .map(|w| {
            *model.position[w].get(&recovered[w]).unwrap_or_else(|| {
                panic!(
                    "(crash) word {w} recovered to {:#x}, which no successful op installed \
                     (chain {:?})",
                    recovered[w], model.chain[w]
                )
            })
        })
        .collect();
    for op in 1..=THREADS * OPS_PER_THREAD {
        // On each word of op, whether the recovered value is at or past it.
        let included: Vec<(usize, bool)> = (0..WORDS)
            .filter_map(|w| {
                let i = model.chain[w].iter().position(|&o| o == op)?;
                Some((w, i <= at[w]))
            })
            .collect();
        let Some(&(_, first)) = included.first() else {
            continue; // failed: it is on no chain
        };
        assert!(
            included.iter().all(|&(_, i)| i == first),
            "(crash) op {op} recovered on some of its words only: {included:?}"
        );
        assert!(
            first || !acked.contains(&op),
            "(crash) op {op} was acknowledged before the crash but is not in the recovered state"
        );
    }
}

/// Persistent mode with the `sim` persister: the same checks; meanwhile this thread takes a
/// crash image at a random point, whose recovery must be a consistent cut holding every op
/// acknowledged before it; at the end every word's durable value is its final value, and a
/// crash image of the finished run recovers to the final values.
fn sim_case(totals: &Totals) {
    let cfg = config();
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Arc::new(Pool::create(region, sim, cfg).unwrap());
    let (model, (acked, image)) = run_and_check(&pool, totals, |pool, acked| {
        let mut rng = thread_rng();
        for _ in 0..rng.next_u64() % 64 {
            shuttle::thread::yield_now();
        }
        // Acknowledgements first: an op acknowledged by now finished before the image.
        let acked: Vec<usize> = (0..acked.len())
            .filter(|&op| acked[op].load(Ordering::Relaxed))
            .collect();
        (
            acked,
            pool.persist().crash_image(pool.region(), rng.next_u64()),
        )
    });
    check_crash_cut(&model, &recover(&image), &acked);
    let finals: Vec<u64> = (0..WORDS)
        .map(|w| op_value(*model.chain[w].last().unwrap(), w))
        .collect();
    let base = pool.user_area().start as usize / 8;
    let durable = pool.persist().durable_image();
    let durable_words: Vec<u64> = (0..WORDS).map(|w| durable[base + w] & VALUE_MASK).collect();
    assert_eq!(durable_words, finals, "acknowledged ops are durable");
    let image = pool
        .persist()
        .crash_image(pool.region(), thread_rng().next_u64());
    assert_eq!(
        recover(&image),
        finals,
        "a crash after the run recovers the final values"
    );
}

fn shuttle_config() -> Config {
    let mut config = Config::new();
    // The pool's relaxed and acquire/release accesses run as SeqCst here (module doc).
    config.silence_warnings = true;
    // Helping nests (HELP_DEPTH_MAX) deeper than shuttle's default 60 KiB stack allows.
    config.stack_size = 1 << 20;
    config
}

/// Runs `case` under `scheduler`, then checks that the executions met contention (else the
/// model's checks would hold vacuously).
fn run(
    name: &str,
    scheduler: impl Scheduler + 'static,
    case: fn(&Totals),
    totals: &'static Totals,
) {
    Runner::new(scheduler, shuttle_config()).run(move || case(totals));
    let [attempts, failures, helps, waits] =
        [0, 1, 2, 3].map(|i| totals.0[i].load(Ordering::Relaxed));
    eprintln!("{name}: {attempts} PMwCASes, {failures} failed, {helps} helps, {waits} pool waits");
    assert!(failures > 0 && helps > 0, "{name}: no contention met");
}

// Goal: PMwCAS is linearizable under random schedules (module doc: checks (a)–(d)).
#[test]
fn random_schedules_match_the_sequential_model() {
    run(
        "random",
        RandomScheduler::new(RANDOM_ITERATIONS),
        volatile_case,
        &RANDOM_TOTALS,
    );
}

// Goal: the same under PCT, which finds bugs needing a few preemptions at chosen points.
#[test]
fn pct_schedules_match_the_sequential_model() {
    run(
        "pct",
        PctScheduler::new(PCT_DEPTH, PCT_ITERATIONS),
        volatile_case,
        &PCT_TOTALS,
    );
}

// Goal: persistent mode (dirty bits, flushes in reads and writes) under the same checks, and
// acknowledged ops durable.
#[test]
fn sim_persistent_mode_matches_the_model_and_is_durable() {
    run(
        "sim",
        RandomScheduler::new(SIM_ITERATIONS),
        sim_case,
        &SIM_TOTALS,
    );
}
