//! Multi-threaded stress with checked results (STYLE.md §5: "Stress tests check results").
//!
//! - [`stress_disjoint_keys`] runs threads on disjoint key sets, interleaved so that they share
//!   leaves, each checking every return value against its own `BTreeMap`; at the end the
//!   index equals the union of the models.
//! - [`stress_hot_keys`] has threads upsert 16 hot keys with (thread, sequence) values; every read
//!   (get or scan) checks that no writer's sequence goes back for a key, as linearizability
//!   demands; at the end each key holds some writer's last write to it.
//! - [`stress_scan_during_writes`] runs scans (random bounds, both orders, some stopped early,
//!   half with a length hint) during inserts and removes of volatile keys interleaved with
//!   stable ones: keys strictly ordered, within bounds, every stable key in range returned,
//!   every value the one derived from its key (a scan returns each record atomically, Bw-tree
//!   §III-C).
//!
//! Threads: [`Sizes::thread_count`]. A failure names the thread, the key, what was expected and
//! the seed (`FOREST_KIT_SEED` replays the random choices, not the interleaving).

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::conformance::{assert_matches_model, show, show_bound, Make, Model, Sizes};
use crate::index::{in_bounds, Index, Order};

/// Keys each thread of [`stress_disjoint_keys`] owns: with 4 threads, thousands of keys, so
/// small-node engines have several levels while each key is still hit often.
pub const DISJOINT_KEYS_PER_THREAD: u16 = 1024;
/// Keys of [`stress_hot_keys`].
pub const HOT_KEY_COUNT: u8 = 16;
/// Stable keys of [`stress_scan_during_writes`] (and as many volatile keys between them).
pub const STABLE_KEY_COUNT: u32 = 1000;
/// Fewest scans each scanner runs, even when the writers finish first.
const SCANS_MIN: usize = 16;
/// Most scans a scanner runs, so the loop is bounded even if a writer never finishes.
const SCANS_MAX: usize = 10_000_000;
/// Operations between two looks at the shared failure flag.
const FAILED_POLL_INTERVAL: usize = 256;
/// How long the stress threads may go without finishing any operation before the kit calls
/// it a deadlock: far beyond any preemption or page-fault pause.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the watchdog looks at the threads' progress.
const WATCHDOG_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Sets the shared flag when its thread unwinds, so the other threads stop early.
struct FailOnPanic<'a>(&'a AtomicBool);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Counts a thread out when it ends, normally or by a panic.
struct CountDown<'a>(&'a AtomicUsize);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A thread's count of finished operations, which the watchdog of [`run_threads`] reads.
struct Progress(CachePadded<AtomicU64>);

/// What a stress thread shares with the others: its progress and the failure flag.
#[derive(Clone, Copy)]
struct Crew<'a> {
    progress: &'a Progress,
    failed: &'a AtomicBool,
}

impl Crew<'_> {
    /// Counts one more finished operation.
    fn tick(self) {
        self.progress.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether another thread failed, so this one should stop (looked at every
    /// [`FAILED_POLL_INTERVAL`] operations).
    fn should_stop(self, op: usize) -> bool {
        op.is_multiple_of(FAILED_POLL_INTERVAL) && self.failed.load(Ordering::Relaxed)
    }
}

/// Runs `body(thread, crew)` on `count` scoped threads and returns their results;
/// re-raises the first panic with its own message (not the scope's generic one). When no
/// thread finishes an operation for [`STALL_TIMEOUT`], the engine is deadlocked or livelocked:
/// the stuck threads cannot be stopped or joined, so the process aborts after saying why,
/// rather than hang the test run.
fn run_threads<T, F>(label: &str, count: usize, body: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize, Crew<'_>) -> T + Sync,
{
    let failed = &AtomicBool::new(false);
    let progress: Vec<Progress> = (0..count)
        .map(|_| Progress(CachePadded::new(AtomicU64::new(0))))
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .map(|t| {
                let body = &body;
                let crew = Crew {
                    progress: &progress[t],
                    failed,
                };
                std::thread::Builder::new()
                    .name(format!("kit-stress-{t}"))
                    .spawn_scoped(scope, move || {
                        let _flag = FailOnPanic(failed);
                        body(t, crew)
                    })
                    .unwrap_or_else(|e| panic!("{label}: cannot spawn thread {t}: {e}"))
            })
            .collect();
        let mut last_total = 0;
        let mut last_change = Instant::now();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(WATCHDOG_POLL_INTERVAL);
            let total: u64 = progress.iter().map(|p| p.0.load(Ordering::Relaxed)).sum();
            if total != last_total {
                last_total = total;
                last_change = Instant::now();
            } else if last_change.elapsed() > STALL_TIMEOUT {
                let done: Vec<u64> = progress
                    .iter()
                    .map(|p| p.0.load(Ordering::Relaxed))
                    .collect();
                let running: Vec<usize> =
                    (0..count).filter(|&t| !handles[t].is_finished()).collect();
                eprintln!(
                    "{label}: no operation finished in {STALL_TIMEOUT:?}: deadlock or livelock in threads {running:?} (operations done per thread: {done:?}); aborting the test process"
                );
                std::process::abort();
            }
        }
        let mut results = Vec::with_capacity(count);
        let mut first_panic = None;
        for handle in handles {
            match handle.join() {
                Ok(result) => results.push(result),
                Err(payload) => {
                    first_panic.get_or_insert(payload);
                }
            }
        }
        if let Some(payload) = first_panic {
            std::panic::resume_unwind(payload);
        }
        results
    })
}

fn thread_rng(seed: u64, thread: usize) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (thread as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Key `k` of thread `t`: ordered by `k` first, so all threads' keys interleave.
fn disjoint_key(t: usize, k: u16) -> Vec<u8> {
    let mut key = vec![b'd'];
    key.extend(k.to_be_bytes());
    key.extend((t as u16).to_be_bytes());
    key
}

/// A value unique to (thread, key, sequence), 7 to 17 bytes.
fn disjoint_value(t: usize, k: u16, seq: u32) -> Vec<u8> {
    let mut value = vec![t as u8];
    value.extend(k.to_be_bytes());
    value.extend(seq.to_le_bytes());
    value.extend(std::iter::repeat_n(seq as u8, (seq % 11) as usize));
    value
}

/// Threads on disjoint, interleaved key sets, each checking every result against its own
/// model: first an insert of half its keys and a read-back, then random operations.
pub fn stress_disjoint_keys(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "stress_disjoint_keys";
    let index = make();
    let index = &*index;
    let name = index.name();
    let seed = crate::conformance::seed();
    let thread_count = sizes.thread_count;
    let ops_per_thread = sizes.stress_op_count / thread_count;

    let label = format!("[{CHECK}] index {name} (seed {seed})");
    let models = run_threads(&label, thread_count, |t, crew| {
        let mut rng = thread_rng(seed, t);
        let mut model = Model::new();
        let mut out = Vec::new();
        let mut seq = 0u32;
        let fail = |what: String| -> ! {
            panic!("[{CHECK}] index {name}: thread {t}: {what} (seed {seed})")
        };
        let half = DISJOINT_KEYS_PER_THREAD / 2;
        for k in 0..half {
            let (key, value) = (disjoint_key(t, k), disjoint_value(t, k, 0));
            match index.insert(&key, &value) {
                Ok(true) => {}
                got => fail(format!(
                    "insert({}) of an absent key returned {got:?}, expected Ok(true)",
                    show(&key)
                )),
            }
            model.insert(key, value);
        }
        for (key, value) in &model {
            if !index.get(key, &mut out) || out != *value {
                fail(format!(
                    "get({}) right after inserting it: expected {}",
                    show(key),
                    show(value)
                ));
            }
        }
        let mut done = usize::from(DISJOINT_KEYS_PER_THREAD);
        while done < ops_per_thread {
            if crew.should_stop(done) {
                break;
            }
            done += 1;
            seq += 1;
            crew.tick();
            let k = rng.random_range(0..DISJOINT_KEYS_PER_THREAD);
            let key = disjoint_key(t, k);
            let value = disjoint_value(t, k, seq);
            let present = model.contains_key(&key);
            match rng.random_range(0..100) {
                0..25 => match index.insert(&key, &value) {
                    Ok(got) if got != present => {
                        if got {
                            model.insert(key, value);
                        }
                    }
                    got => fail(format!(
                        "op {done}: insert({}) returned {got:?}, expected Ok({}) (key {})",
                        show(&key),
                        !present,
                        if present { "present" } else { "absent" }
                    )),
                },
                25..45 => match index.upsert(&key, &value) {
                    Ok(()) => {
                        model.insert(key, value);
                    }
                    Err(e) => fail(format!("op {done}: upsert({}) failed: {e}", show(&key))),
                },
                45..60 => match index.update(&key, &value) {
                    Ok(got) if got == present => {
                        if got {
                            model.insert(key, value);
                        }
                    }
                    got => fail(format!(
                        "op {done}: update({}) returned {got:?}, expected Ok({present})",
                        show(&key)
                    )),
                },
                60..80 => {
                    let got = index.remove(&key);
                    if got != present {
                        fail(format!(
                            "op {done}: remove({}) returned {got}, expected {present}",
                            show(&key)
                        ));
                    }
                    model.remove(&key);
                }
                _ => {
                    let got = index.get(&key, &mut out);
                    match model.get(&key) {
                        Some(want) if !got || out != *want => fail(format!(
                            "op {done}: get({}) gave {}, expected {}",
                            show(&key),
                            if got {
                                show(&out)
                            } else {
                                "nothing".to_string()
                            },
                            show(want)
                        )),
                        None if got => fail(format!(
                            "op {done}: get({}) found {}, expected nothing",
                            show(&key),
                            show(&out)
                        )),
                        _ => {}
                    }
                }
            }
        }
        model
    });
    let union: Model = models.into_iter().flatten().collect();
    assert_matches_model(CHECK, index, &union, &format!("after the threads ended: the index is not the union of the threads' models (seed {seed})"));
}

/// The writer id of the values written before the threads start.
const INITIAL_WRITER: u32 = u32::MAX;

fn hot_key(i: u8) -> Vec<u8> {
    let mut key = vec![b'h', i];
    key.extend(std::iter::repeat_n(0, usize::from(i % 3)));
    key
}

/// (writer, sequence) with a filler derived from both, so a torn value shows.
fn hot_value(writer: u32, seq: u64) -> Vec<u8> {
    let mut value = writer.to_be_bytes().to_vec();
    value.extend(seq.to_be_bytes());
    value.extend(std::iter::repeat_n(
        writer as u8 ^ seq as u8,
        (seq % 9) as usize,
    ));
    value
}

fn decode_hot(value: &[u8]) -> Result<(u32, u64), String> {
    let writer = value
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes);
    let seq = value
        .get(4..12)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes);
    match (writer, seq) {
        (Some(writer), Some(seq)) if hot_value(writer, seq) == value => Ok((writer, seq)),
        _ => Err(format!("torn or foreign value {}", show(value))),
    }
}

/// What one thread of [`stress_hot_keys`] has seen and written.
struct HotThread {
    /// Per key, per writer slot (the last slot is the initial writer): highest sequence seen.
    seen: Vec<Vec<u64>>,
    /// Per key, this thread's last sequence written (0: never wrote it).
    last_written: Vec<u64>,
}

impl HotThread {
    /// Checks a read of key `i` against what this thread saw before, and records it.
    fn observe(&mut self, i: u8, value: &[u8], thread_count: usize) -> Result<(), String> {
        let (writer, seq) = decode_hot(value)?;
        let seen = &mut self.seen[usize::from(i)];
        let slot = if writer == INITIAL_WRITER {
            thread_count
        } else if (writer as usize) < thread_count {
            writer as usize
        } else {
            return Err(format!(
                "value names writer {writer}, but there are {thread_count} threads"
            ));
        };
        if writer == INITIAL_WRITER {
            if let Some(w) = seen[..thread_count].iter().position(|&s| s > 0) {
                return Err(format!(
                    "read the initial value after having seen thread {w}'s sequence {}",
                    seen[w]
                ));
            }
        } else if seq < seen[slot] {
            return Err(format!(
                "read thread {writer}'s sequence {seq} after having seen its sequence {}",
                seen[slot]
            ));
        }
        seen[slot] = seen[slot].max(seq);
        Ok(())
    }
}

/// Threads upsert and update 16 hot keys and read them by get and scan; no read ever sees a
/// writer's sequence for a key go back; at the end each key holds some writer's last write.
pub fn stress_hot_keys(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "stress_hot_keys";
    let index = make();
    let index = &*index;
    let name = index.name();
    let seed = crate::conformance::seed();
    let thread_count = sizes.thread_count;
    let ops_per_thread = sizes.stress_op_count / thread_count;
    let keys: Vec<Vec<u8>> = (0..HOT_KEY_COUNT).map(hot_key).collect();
    for key in &keys {
        if let Err(e) = index.upsert(key, &hot_value(INITIAL_WRITER, 0)) {
            panic!(
                "[{CHECK}] index {name}: initial upsert({}) failed: {e}",
                show(key)
            );
        }
    }

    let label = format!("[{CHECK}] index {name} (seed {seed})");
    let finals = run_threads(&label, thread_count, |t, crew| {
        let mut rng = thread_rng(seed, t);
        let mut state = HotThread {
            seen: vec![vec![0; thread_count + 1]; usize::from(HOT_KEY_COUNT)],
            last_written: vec![0; usize::from(HOT_KEY_COUNT)],
        };
        let mut out = Vec::new();
        let mut seq = 0u64;
        // Even threads mostly write, odd threads mostly read.
        let write_percent = if t % 2 == 0 { 60 } else { 10 };
        let fail = |what: String| -> ! {
            panic!("[{CHECK}] index {name}: thread {t}: {what} (seed {seed})")
        };
        for op in 0..ops_per_thread {
            if crew.should_stop(op) {
                break;
            }
            crew.tick();
            let i = rng.random_range(0..HOT_KEY_COUNT);
            let key = &keys[usize::from(i)];
            let roll = rng.random_range(0..100);
            if roll < write_percent {
                seq += 1;
                let value = hot_value(t as u32, seq);
                if roll % 4 == 0 {
                    match index.update(key, &value) {
                        Ok(true) => {}
                        got => fail(format!(
                            "op {op}: update({}) of a hot key returned {got:?}, expected Ok(true)",
                            show(key)
                        )),
                    }
                } else if let Err(e) = index.upsert(key, &value) {
                    fail(format!("op {op}: upsert({}) failed: {e}", show(key)));
                }
                state.seen[usize::from(i)][t] = seq;
                state.last_written[usize::from(i)] = seq;
            } else if roll < 90 {
                if !index.get(key, &mut out) {
                    fail(format!(
                        "op {op}: get({}) of a hot key found nothing",
                        show(key)
                    ));
                }
                if let Err(e) = state.observe(i, &out, thread_count) {
                    fail(format!("op {op}: get({}): {e}", show(key)));
                }
            } else {
                let j = rng.random_range(0..HOT_KEY_COUNT);
                let (low, high) = (&keys[usize::from(i.min(j))], &keys[usize::from(i.max(j))]);
                let lower = random_bound(&mut rng, low);
                let upper = random_bound(&mut rng, high);
                let order = if rng.random() {
                    Order::Ascending
                } else {
                    Order::Descending
                };
                let mut returned: Vec<u8> = Vec::new();
                let mut failure = None;
                index.scan(lower, upper, order, &mut |k, v| {
                    let Some(position) = keys.iter().position(|h| h.as_slice() == k) else {
                        failure = Some(format!(
                            "returned a key that was never written: {}",
                            show(k)
                        ));
                        return ControlFlow::Break(());
                    };
                    returned.push(position as u8);
                    match state.observe(position as u8, v, thread_count) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(e) => {
                            failure = Some(format!("at key {}: {e}", show(k)));
                            ControlFlow::Break(())
                        }
                    }
                });
                let what = format!(
                    "op {op}: scan({}, {}, {order:?})",
                    show_bound(lower),
                    show_bound(upper)
                );
                if let Some(failure) = failure {
                    fail(format!("{what}: {failure}"));
                }
                let mut want: Vec<u8> = (0..HOT_KEY_COUNT)
                    .filter(|&h| in_bounds(&keys[usize::from(h)], lower, upper))
                    .collect();
                if order == Order::Descending {
                    want.reverse();
                }
                if returned != want {
                    fail(format!(
                        "{what} returned hot keys #{returned:?}, expected #{want:?} (hot keys are never removed)"
                    ));
                }
            }
        }
        state.last_written
    });

    let mut out = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if !index.get(key, &mut out) {
            panic!(
                "[{CHECK}] index {name}: after the threads ended, get({}) found nothing",
                show(key)
            );
        }
        let (writer, seq) = decode_hot(&out).unwrap_or_else(|e| {
            panic!(
                "[{CHECK}] index {name}: after the threads ended, get({}): {e}",
                show(key)
            )
        });
        let ok = if writer == INITIAL_WRITER {
            finals.iter().all(|last| last[i] == 0)
        } else {
            finals
                .get(writer as usize)
                .is_some_and(|last| last[i] == seq && seq > 0)
        };
        assert!(
            ok,
            "[{CHECK}] index {name}: after the threads ended, {} holds writer {writer}'s sequence {seq}, which is not that writer's last write to it (last writes per thread: {:?}) (seed {seed})",
            show(key),
            finals.iter().map(|last| last[i]).collect::<Vec<_>>()
        );
    }
    let key_count = index.stats().key_count;
    assert_eq!(
        key_count,
        u64::from(HOT_KEY_COUNT),
        "[{CHECK}] index {name}: stats().key_count after the threads ended"
    );
}

fn random_bound<'k>(rng: &mut SmallRng, key: &'k [u8]) -> Bound<&'k [u8]> {
    match rng.random_range(0..5) {
        0 => Bound::Unbounded,
        1 | 2 => Bound::Included(key),
        _ => Bound::Excluded(key),
    }
}

/// Key of code `code` in [`stress_scan_during_writes`]: even codes stable, odd codes volatile.
fn scan_key(code: u32) -> Vec<u8> {
    let mut key = vec![b's'];
    key.extend(code.to_be_bytes());
    key
}

fn scan_code(key: &[u8]) -> Option<u32> {
    match key {
        [b's', rest @ ..] if rest.len() == 4 => rest.try_into().ok().map(u32::from_be_bytes),
        _ => None,
    }
}

/// The one value a key ever has: derived from it, 5 to 13 bytes.
fn derived_value(key: &[u8]) -> Vec<u8> {
    let mut value: Vec<u8> = key.iter().rev().map(|b| b ^ 0x5A).collect();
    let last = key.last().copied().unwrap_or(0);
    value.extend(std::iter::repeat_n(last, usize::from(last % 9)));
    value
}

/// Scanners (random bounds, both orders, some stopped early, half hinted) run while writers
/// insert and remove volatile keys between stable ones; each scan is checked (see the module doc).
pub fn stress_scan_during_writes(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "stress_scan_during_writes";
    let index = make();
    let index = &*index;
    let name = index.name();
    let seed = crate::conformance::seed();
    let writer_count = (sizes.thread_count / 2).max(1);
    let scanner_count = (sizes.thread_count - writer_count).max(1);
    let ops_per_writer = sizes.stress_op_count / writer_count;
    let code_end = STABLE_KEY_COUNT * 2;
    let mut model = Model::new();
    for code in (0..code_end).step_by(2) {
        let key = scan_key(code);
        let value = derived_value(&key);
        if !matches!(index.insert(&key, &value), Ok(true)) {
            panic!(
                "[{CHECK}] index {name}: inserting stable key {} failed",
                show(&key)
            );
        }
        model.insert(key, value);
    }
    let writers_running = AtomicUsize::new(writer_count);

    let label = format!("[{CHECK}] index {name} (seed {seed})");
    let volatile_sets = run_threads(&label, writer_count + scanner_count, |t, crew| {
        let mut rng = thread_rng(seed, t);
        if t < writer_count {
            let _count_down = CountDown(&writers_running);
            let volatile = Volatile {
                check: CHECK,
                writer: t,
                writer_count,
                op_count: ops_per_writer,
            };
            write_volatile(index, volatile, &mut rng, crew, seed)
        } else {
            let mut scans = 0usize;
            while scans < SCANS_MAX && !crew.should_stop(0) {
                if scans >= SCANS_MIN && writers_running.load(Ordering::Acquire) == 0 {
                    break;
                }
                scan_and_check(index, t, scans, &mut rng, seed);
                scans += 1;
                crew.tick();
            }
            BTreeSet::new()
        }
    });
    for code in volatile_sets.into_iter().flatten() {
        let key = scan_key(code);
        let value = derived_value(&key);
        model.insert(key, value);
    }
    assert_matches_model(
        CHECK,
        index,
        &model,
        &format!("after the threads ended (seed {seed})"),
    );
}

/// [`stress_scan_during_writes`] through [`Index::scan_pinned`] (its scanners' visitors only
/// check and copy keys).
pub fn stress_scan_pinned_during_writes(make: Make<'_>, sizes: &Sizes) {
    // A quarter of the writes: the same check on a second path (for most engines the very
    // same scan, `scan_pinned` being `scan`), which CI's time budget pays for every
    // configuration.
    let sizes = Sizes {
        stress_op_count: (sizes.stress_op_count / 4).max(1),
        ..sizes.clone()
    };
    stress_scan_during_writes(&crate::conformance::pinned(make), &sizes);
}

/// Who a volatile writer is ([`write_volatile`]): the check it names in failures, its number
/// among the volatile writers and how many writes it makes.
#[derive(Clone, Copy)]
struct Volatile<'a> {
    check: &'a str,
    writer: usize,
    writer_count: usize,
    op_count: usize,
}

/// One writer of [`stress_scan_during_writes`] and [`stress_get_many_during_writes`]: random
/// inserts, removes, upserts and updates of the volatile codes it owns, each result checked.
/// Returns the codes present at the end.
fn write_volatile(
    index: &dyn Index,
    volatile: Volatile<'_>,
    rng: &mut SmallRng,
    crew: Crew<'_>,
    seed: u64,
) -> BTreeSet<u32> {
    let Volatile {
        check,
        writer: t,
        writer_count,
        op_count,
    } = volatile;
    let name = index.name();
    let fail = |what: String| -> ! {
        panic!("[{check}] index {name}: writer thread {t}: {what} (seed {seed})")
    };
    let owned: Vec<u32> = (0..STABLE_KEY_COUNT)
        .filter(|i| *i as usize % writer_count == t)
        .map(|i| i * 2 + 1)
        .collect();
    let mut present = BTreeSet::new();
    for op in 0..op_count {
        if crew.should_stop(op) {
            break;
        }
        crew.tick();
        let code = owned[rng.random_range(0..owned.len())];
        let key = scan_key(code);
        let value = derived_value(&key);
        let was = present.contains(&code);
        match rng.random_range(0..4) {
            0 => match index.insert(&key, &value) {
                Ok(got) if got != was => {
                    present.insert(code);
                }
                got => fail(format!(
                    "op {op}: insert({}) returned {got:?}, expected Ok({})",
                    show(&key),
                    !was
                )),
            },
            1 => match index.upsert(&key, &value) {
                Ok(()) => {
                    present.insert(code);
                }
                Err(e) => fail(format!("op {op}: upsert({}) failed: {e}", show(&key))),
            },
            2 => match index.update(&key, &value) {
                Ok(got) if got == was => {}
                got => fail(format!(
                    "op {op}: update({}) returned {got:?}, expected Ok({was})",
                    show(&key)
                )),
            },
            _ => {
                let got = index.remove(&key);
                if got != was {
                    fail(format!(
                        "op {op}: remove({}) returned {got}, expected {was}",
                        show(&key)
                    ));
                }
                present.remove(&code);
            }
        }
    }
    present
}

/// One checked scan of [`stress_scan_during_writes`].
fn scan_and_check(index: &dyn Index, t: usize, scan_number: usize, rng: &mut SmallRng, seed: u64) {
    const CHECK: &str = "stress_scan_during_writes";
    let code_end = STABLE_KEY_COUNT * 2;
    // Bounds over a slightly wider code range than the keys, so they fall beyond both ends.
    let lower_key = scan_key(rng.random_range(0..code_end + 2));
    let upper_key = scan_key(rng.random_range(0..code_end + 2));
    let (lower_key, upper_key) = if lower_key <= upper_key {
        (lower_key, upper_key)
    } else {
        (upper_key, lower_key)
    };
    let lower = random_bound(rng, &lower_key);
    let upper = random_bound(rng, &upper_key);
    let order = if rng.random() {
        Order::Ascending
    } else {
        Order::Descending
    };
    let limit = if rng.random_range(0..4) == 0 {
        Some(rng.random_range(0..200usize))
    } else {
        None
    };
    // Half the scans pass a length hint (`Index::scan_hinted`), near the limit or anywhere;
    // it must change nothing.
    let hint = match limit {
        _ if rng.random() => None,
        Some(l) if rng.random() => Some((l + rng.random_range(0..=4usize)).saturating_sub(2)),
        _ => Some(rng.random_range(0..200usize)),
    };
    let what = format!(
        "scanner thread {t}, scan #{scan_number} ({}, {}, {order:?}, limit {limit:?}, hint {hint:?})",
        show_bound(lower),
        show_bound(upper)
    );
    let fail = |detail: String| -> ! {
        panic!(
            "[{CHECK}] index {}: {what}: {detail} (seed {seed})",
            index.name()
        )
    };

    let mut previous: Option<Vec<u8>> = None;
    let mut stable_seen: Vec<u32> = Vec::new();
    let mut returned = 0usize;
    let mut failure: Option<String> = None;
    let mut visit = |key: &[u8], value: &[u8]| {
        if limit == Some(returned) {
            return ControlFlow::Break(());
        }
        returned += 1;
        if let Some(previous) = &previous {
            let ordered = match order {
                Order::Ascending => previous.as_slice() < key,
                Order::Descending => previous.as_slice() > key,
            };
            if !ordered {
                failure = Some(format!(
                    "{} came after {}: not strictly {order:?} (a duplicate or a step back)",
                    show(key),
                    show(previous)
                ));
                return ControlFlow::Break(());
            }
        }
        previous = Some(key.to_vec());
        if !in_bounds(key, lower, upper) {
            failure = Some(format!("returned {}, outside the bounds", show(key)));
            return ControlFlow::Break(());
        }
        let Some(code) = scan_code(key).filter(|&c| c < code_end) else {
            failure = Some(format!(
                "returned {}, a key that was never written",
                show(key)
            ));
            return ControlFlow::Break(());
        };
        if value != derived_value(key).as_slice() {
            failure = Some(format!(
                "key {} came with {}, expected {}",
                show(key),
                show(value),
                show(&derived_value(key))
            ));
            return ControlFlow::Break(());
        }
        if code % 2 == 0 {
            stable_seen.push(code);
        }
        ControlFlow::Continue(())
    };
    match hint {
        Some(hint) => index.scan_hinted(lower, upper, order, hint, &mut visit),
        None => index.scan(lower, upper, order, &mut visit),
    }
    if let Some(failure) = failure {
        fail(failure);
    }
    // Every stable key within the bounds, up to where the scan stopped, must have come.
    let stopped_at = if limit.is_some_and(|l| returned >= l) {
        previous.as_deref().and_then(scan_code)
    } else {
        None
    };
    let mut want: Vec<u32> = (0..code_end)
        .step_by(2)
        .filter(|&code| in_bounds(&scan_key(code), lower, upper))
        .collect();
    if order == Order::Descending {
        want.reverse();
    }
    if let Some(limit) = limit {
        if returned >= limit {
            want.retain(|&code| match (stopped_at, order) {
                (None, _) => false,
                (Some(stop), Order::Ascending) => code <= stop,
                (Some(stop), Order::Descending) => code >= stop,
            });
        }
    }
    if stable_seen != want {
        let position = stable_seen
            .iter()
            .zip(&want)
            .take_while(|(a, b)| a == b)
            .count();
        let detail = match (stable_seen.get(position), want.get(position)) {
            (_, Some(&missing)) if !stable_seen.contains(&missing) => {
                format!("stable key {} is missing", show(&scan_key(missing)))
            }
            (Some(&extra), _) => format!("stable key {} is out of place", show(&scan_key(extra))),
            _ => "stable keys differ".to_string(),
        };
        fail(format!(
            "{detail}: {} stable keys returned, {} expected",
            stable_seen.len(),
            want.len()
        ));
    }
}

/// Keys one `get_many` of [`stress_get_many_during_writes`] looks up at most (several of
/// masstree's lock-step groups of 16).
const GET_MANY_KEYS_MAX: usize = 40;
/// Fewest `get_many` calls each reader makes, even when the writers finish first.
const GET_MANY_CALLS_MIN: usize = 64;

/// What one reader of [`stress_get_many_during_writes`] knows of the hot keys: per key, the
/// lowest sequence a read of it may still return.
struct HotFloors(Vec<u64>);

impl HotFloors {
    /// Checks a read of hot key `i`, then raises the floors it implies: the one writer writes
    /// sequence `s` to keys `0, 1, ..., 15` in turn, so once key `i` shows `s`, key `i` and
    /// every key before it hold `s` or later for good.
    fn observe(&mut self, i: usize, value: &[u8]) -> Result<(), String> {
        let (writer, seq) = decode_hot(value)?;
        if writer != 0 {
            return Err(format!("value names writer {writer}; only writer 0 writes"));
        }
        if seq < self.0[i] {
            return Err(format!(
                "read sequence {seq} after a read (this call's earlier keys or an earlier call) that showed sequence {} already written to it",
                self.0[i]
            ));
        }
        for floor in &mut self.0[..=i] {
            *floor = (*floor).max(seq);
        }
        Ok(())
    }
}

/// [`Index::get_many`] during writes: one thread writes sequence after sequence to the 16 hot
/// keys, each sequence to key 0, 1, ..., 15 in turn; other writers insert and remove volatile
/// keys between stable ones (so nodes split and merge); readers call `get_many` on random
/// lists of hot, stable, volatile, never-written and over-long keys, repeats included. Each
/// call visits every position once, in order; a stable key has its value, a volatile key its
/// value or nothing, a never-written or over-long key nothing, and a hot key never goes back
/// behind what the reader saw before, in this call or an earlier one (a read of key `i` at
/// sequence `s` means keys `0..=i` hold `s` or later, since the writer wrote them first): so
/// key `j`'s read takes effect after key `j - 1`'s, as the contract says. At the end the index
/// equals the model.
pub fn stress_get_many_during_writes(make: Make<'_>, sizes: &Sizes) {
    const CHECK: &str = "stress_get_many_during_writes";
    let index = make();
    let index = &*index;
    let name = index.name();
    let seed = crate::conformance::seed();
    let volatile_writer_count = (sizes.thread_count / 2).saturating_sub(1).max(1);
    let reader_count = sizes
        .thread_count
        .saturating_sub(volatile_writer_count + 1)
        .max(1);
    // A quarter of a stress check's operations, half to each kind of writer.
    let write_count = (sizes.stress_op_count / 4).max(2);
    let hot_rounds = (write_count / 2 / usize::from(HOT_KEY_COUNT)).max(1);
    let ops_per_volatile_writer = (write_count / 2 / volatile_writer_count).max(1);
    let code_end = STABLE_KEY_COUNT * 2;
    let mut model = Model::new();
    for code in (0..code_end).step_by(2) {
        let key = scan_key(code);
        let value = derived_value(&key);
        if !matches!(index.insert(&key, &value), Ok(true)) {
            panic!(
                "[{CHECK}] index {name}: inserting stable key {} failed",
                show(&key)
            );
        }
        model.insert(key, value);
    }
    let hot_keys: Vec<Vec<u8>> = (0..HOT_KEY_COUNT).map(hot_key).collect();
    for key in &hot_keys {
        if let Err(e) = index.upsert(key, &hot_value(0, 0)) {
            panic!(
                "[{CHECK}] index {name}: initial upsert({}) failed: {e}",
                show(key)
            );
        }
    }
    let never_written: Vec<Vec<u8>> = (0..8).map(|i| scan_key(code_end + 10 + i)).collect();
    let too_long = vec![b's'; crate::KEY_BYTES_MAX + 1];
    let writers_running = AtomicUsize::new(volatile_writer_count + 1);

    let label = format!("[{CHECK}] index {name} (seed {seed})");
    let thread_count = 1 + volatile_writer_count + reader_count;
    let results = run_threads(&label, thread_count, |t, crew| {
        let mut rng = thread_rng(seed, t);
        let fail = |what: String| -> ! {
            panic!("[{CHECK}] index {name}: thread {t}: {what} (seed {seed})")
        };
        if t == 0 {
            let _count_down = CountDown(&writers_running);
            let mut last = 0;
            for seq in 1..=hot_rounds as u64 {
                if crew.should_stop(0) {
                    break;
                }
                for key in &hot_keys {
                    if let Err(e) = index.upsert(key, &hot_value(0, seq)) {
                        fail(format!("upsert({}) failed: {e}", show(key)));
                    }
                    crew.tick();
                }
                last = seq;
            }
            return (BTreeSet::new(), last);
        }
        if t <= volatile_writer_count {
            let _count_down = CountDown(&writers_running);
            let volatile = Volatile {
                check: CHECK,
                writer: t - 1,
                writer_count: volatile_writer_count,
                op_count: ops_per_volatile_writer,
            };
            return (write_volatile(index, volatile, &mut rng, crew, seed), 0);
        }
        let mut floors = HotFloors(vec![0; usize::from(HOT_KEY_COUNT)]);
        let mut calls = 0usize;
        while calls < SCANS_MAX && !crew.should_stop(0) {
            if calls >= GET_MANY_CALLS_MIN && writers_running.load(Ordering::Acquire) == 0 {
                break;
            }
            let len = rng.random_range(0..=GET_MANY_KEYS_MAX);
            // Each position: its key and what it is (0..16: a hot key; else a kind below).
            const STABLE: usize = 100;
            const VOLATILE: usize = 101;
            const ABSENT: usize = 102;
            let mut kinds = Vec::with_capacity(len);
            let mut owned: Vec<Vec<u8>> = Vec::with_capacity(len);
            for _ in 0..len {
                let (kind, key) = match rng.random_range(0..10) {
                    0..=3 => {
                        let i = rng.random_range(0..HOT_KEY_COUNT);
                        (usize::from(i), hot_keys[usize::from(i)].clone())
                    }
                    4..=5 => (STABLE, scan_key(rng.random_range(0..STABLE_KEY_COUNT) * 2)),
                    6..=7 => (
                        VOLATILE,
                        scan_key(rng.random_range(0..STABLE_KEY_COUNT) * 2 + 1),
                    ),
                    8 => (
                        ABSENT,
                        never_written[rng.random_range(0..never_written.len())].clone(),
                    ),
                    _ => (ABSENT, too_long.clone()),
                };
                kinds.push(kind);
                owned.push(key);
            }
            let list: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut next = 0;
            let mut failure = None;
            index.get_many(&list, &mut |i, value| {
                if failure.is_some() {
                    return;
                }
                if i != next {
                    failure = Some(format!("visited position {i}, expected {next}"));
                    return;
                }
                next += 1;
                let key = list[i];
                let wrong = match (kinds[i], value) {
                    (hot, Some(v)) if hot < usize::from(HOT_KEY_COUNT) => {
                        floors.observe(hot, v).err()
                    }
                    (hot, None) if hot < usize::from(HOT_KEY_COUNT) => {
                        Some("a hot key found nothing (hot keys are never removed)".to_string())
                    }
                    (STABLE, None) => Some("a stable key found nothing".to_string()),
                    (STABLE | VOLATILE, Some(v)) if v != derived_value(key).as_slice() => Some(
                        format!("gave {}, expected {}", show(v), show(&derived_value(key))),
                    ),
                    (ABSENT, Some(v)) => Some(format!("a key never written gave {}", show(v))),
                    _ => None,
                };
                if let Some(wrong) = wrong {
                    failure = Some(format!("key #{i} {}: {wrong}", show(key)));
                }
            });
            if let Some(failure) = failure {
                fail(format!("get_many call {calls} of {len} keys: {failure}"));
            }
            if next != len {
                fail(format!(
                    "get_many call {calls} of {len} keys visited {next} positions"
                ));
            }
            calls += 1;
            crew.tick();
        }
        (BTreeSet::new(), 0)
    });
    let last_hot = results[0].1;
    for code in results.into_iter().flat_map(|(set, _)| set) {
        let key = scan_key(code);
        let value = derived_value(&key);
        model.insert(key, value);
    }
    for key in hot_keys {
        model.insert(key, hot_value(0, last_hot));
    }
    assert_matches_model(
        CHECK,
        index,
        &model,
        &format!("after the threads ended (seed {seed})"),
    );
}
