//! The runner: for each workload, thread count and engine, `--runs` repetitions of: a fresh
//! index, the load phase (memory measured around it), a warm-up, then the timed phase(s).
//!
//! Methodology (DESIGN.md "Benchmarks"): every engine of a run faces the same pre-generated op
//! streams; threads start together at a barrier and the clock runs from the barrier until the
//! last thread finishes; the report quotes the median over runs. Engine counters from
//! `stats()` are read before and after each timed phase and divided by the operations done,
//! so contention (restarts/op, cas_failures/op) can be compared beyond this machine's cores.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::bail;
use forest_core::{Index, Order};
use indicatif::ProgressBar;

use crate::alloc_count;
use crate::engines::{self, Spec};
use crate::peers;
use crate::report::ResultRow;
use crate::workload::{self, Config, OpKind, Phase, Stream};

/// How runs are repeated and timed.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Thread counts to measure, in order.
    pub threads: Vec<usize>,
    /// Repetitions per configuration; the report quotes the median.
    pub runs: usize,
    /// Warm-up reads per run (over all threads); None: a tenth of the timed ops, at most the
    /// key count.
    pub warmup_ops: Option<u64>,
    /// When set, each timed phase cycles through its streams until this much time passed
    /// (a cycle's inserts then find their keys present). The op count still sets the
    /// stream length.
    pub duration: Option<Duration>,
}

/// Checks a timed loop makes between clock reads in duration mode: rare enough to cost
/// nothing, frequent enough to stop within microseconds.
const CLOCK_CHECK_OPS: usize = 256;

/// Runs `specs` on one workload configuration at every thread count; rows in order of
/// thread count, then engine, then phase. `progress` advances once per engine run.
pub fn run_workload(
    config: &Config,
    specs: &[Spec],
    options: &RunOptions,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<ResultRow>> {
    let mut rows = Vec::new();
    let counting = alloc_count::is_installed();
    for &threads in &options.threads {
        progress.set_message(format!(
            "{} T={threads}: generating ops",
            config.workload.name
        ));
        let phases = workload::phases(config, threads);
        let warmup = warmup_phase(config, threads, options);
        let has_scans = phases.iter().any(Phase::has_scans);
        for spec in specs {
            let label = spec.label();
            if has_scans && peers::is_unordered(&spec.name) {
                progress.inc(options.runs as u64);
                continue;
            }
            let mut per_phase: Vec<PhaseRuns> =
                phases.iter().map(|_| PhaseRuns::default()).collect();
            let mut memory = Vec::new();
            let mut engine_memory = 0;
            let mut height = 0;
            for run in 0..options.runs {
                progress.set_message(format!(
                    "{} {label} T={threads} run {}/{}",
                    config.workload.name,
                    run + 1,
                    options.runs
                ));
                let index = engines::build(spec, config.key_shape)?;
                if config.has_load() {
                    let bytes = measured(counting, || load(&index, config))?;
                    memory.extend(bytes);
                    run_phase(&index, &warmup, config.value_size, None)?;
                } else if run == 0 && counting {
                    // rw1 has no load: measure its put phase once, untimed, on a spare index.
                    let spare = engines::build(spec, config.key_shape)?;
                    let bytes = measured(counting, || {
                        run_phase(&spare, &phases[0], config.value_size, None).map(|_| ())
                    })?;
                    memory.extend(bytes);
                }
                for (phase, runs) in phases.iter().zip(&mut per_phase) {
                    let before = index.stats();
                    let done = run_phase(&index, phase, config.value_size, options.duration)?;
                    let after = index.stats();
                    runs.ops_per_sec
                        .push(done.ops as f64 / done.elapsed.as_secs_f64().max(1e-9));
                    runs.ops.push(done.ops);
                    for (name, value) in &after.counters {
                        let was = before.counter(name).unwrap_or(0);
                        *runs.counter_deltas.entry((*name).to_string()).or_default() +=
                            value.saturating_sub(was);
                    }
                }
                let stats = index.stats();
                engine_memory = stats.memory_bytes;
                height = stats.height;
                progress.inc(1);
            }
            let memory_bytes = median_u64(&memory);
            for (phase, runs) in phases.iter().zip(per_phase) {
                let workload = match phase.suffix {
                    Some(suffix) => format!("{}/{suffix}", config.workload.name),
                    None => config.workload.name.to_string(),
                };
                let total_ops: u64 = runs.ops.iter().sum();
                rows.push(ResultRow {
                    engine: label.clone(),
                    workload,
                    key_shape: config.key_shape.name().to_string(),
                    dist: config.dist.name().to_string(),
                    value_size: config.value_size,
                    threads,
                    keys: config.keys,
                    ops: median_u64(&runs.ops).unwrap_or(0),
                    median_ops_per_sec: median(&runs.ops_per_sec),
                    runs_ops_per_sec: runs.ops_per_sec,
                    memory_bytes,
                    bytes_per_key: memory_bytes.map(|m| m as f64 / config.keys.max(1) as f64),
                    engine_memory_bytes: engine_memory,
                    height,
                    durability: "none".to_string(),
                    counters_per_op: runs
                        .counter_deltas
                        .into_iter()
                        .map(|(k, v)| (k, v as f64 / total_ops.max(1) as f64))
                        .collect(),
                });
            }
        }
    }
    Ok(rows)
}

#[derive(Default)]
struct PhaseRuns {
    ops_per_sec: Vec<f64>,
    ops: Vec<u64>,
    counter_deltas: BTreeMap<String, u64>,
}

/// Runs `f` with allocation counting on; the net bytes it allocated, if counting works here.
fn measured(counting: bool, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Option<u64>> {
    if !counting {
        f()?;
        return Ok(None);
    }
    let before = alloc_count::live_bytes();
    alloc_count::set_enabled(true);
    let result = f();
    alloc_count::set_enabled(false);
    result?;
    Ok(Some((alloc_count::live_bytes() - before).max(0) as u64))
}

/// Inserts the workload's keys, on as many threads as the machine has, each a contiguous
/// range of key indices (ascending, so a `monotonic` load is in key order per thread).
pub fn load(index: &Arc<dyn Index>, config: &Config) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(config.keys.max(1) as usize);
    let value = value_bytes(config.value_size);
    let chunk = config.keys.div_ceil(threads as u64);
    let failures: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (index, value) = (index, &value);
                s.spawn(move || {
                    let mut key = Vec::new();
                    let mut failures = 0u64;
                    for i in t * chunk..((t + 1) * chunk).min(config.keys) {
                        config.key(i, &mut key);
                        if !matches!(index.insert(&key, value), Ok(true)) {
                            failures += 1;
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add)
    });
    if failures > 0 {
        bail!(
            "loading {} into {}: {failures} inserts failed or found the key present",
            config.workload.name,
            index.name()
        );
    }
    Ok(())
}

/// The warm-up: reads of loaded keys under the workload's distribution, leaving the index
/// unchanged.
fn warmup_phase(config: &Config, threads: usize, options: &RunOptions) -> Phase {
    let count = options
        .warmup_ops
        .unwrap_or((config.ops / 10).min(config.keys));
    if !config.has_load() || count == 0 {
        return Phase {
            suffix: None,
            streams: Vec::new(),
        };
    }
    let mut warm = *config;
    warm.ops = count;
    warm.workload.kind = workload::Kind::Mixed(workload::READ_ONLY);
    workload::phases(&warm, threads).remove(0)
}

/// What a timed phase did.
#[derive(Clone, Copy, Debug)]
pub struct PhaseResult {
    /// Operations completed over all threads.
    pub ops: u64,
    /// From the first thread's start after the barrier until the last thread finished.
    pub elapsed: Duration,
}

/// Runs one phase: a thread per stream, started together at a barrier; the elapsed time runs
/// from the first thread's start to the last thread's end.
pub fn run_phase(
    index: &Arc<dyn Index>,
    phase: &Phase,
    value_size: usize,
    duration: Option<Duration>,
) -> anyhow::Result<PhaseResult> {
    if phase.streams.is_empty() {
        return Ok(PhaseResult {
            ops: 0,
            elapsed: Duration::ZERO,
        });
    }
    let barrier = Barrier::new(phase.streams.len());
    let value = value_bytes(value_size);
    // Each thread reads the clock itself right after the barrier and when done: on an
    // oversubscribed machine a coordinating thread could be descheduled past the start.
    let outcomes: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = phase
            .streams
            .iter()
            .map(|stream| {
                let (index, value, barrier) = (index, &value, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let done = run_stream(index.as_ref(), stream, value, duration);
                    (done, start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut ops = 0;
    let mut first_start: Option<Instant> = None;
    let mut last_end: Option<Instant> = None;
    for outcome in outcomes {
        match outcome {
            Ok((Ok(done), start, end)) => {
                ops += done;
                first_start = Some(first_start.map_or(start, |f| f.min(start)));
                last_end = Some(last_end.map_or(end, |l| l.max(end)));
            }
            Ok((Err(e), _, _)) => return Err(e),
            Err(_) => bail!("a benchmark thread panicked in {}", index.name()),
        }
    }
    let elapsed = match (first_start, last_end) {
        (Some(start), Some(end)) => end.saturating_duration_since(start),
        _ => Duration::ZERO,
    };
    Ok(PhaseResult { ops, elapsed })
}

/// One thread's timed loop. Returns the operations done.
fn run_stream(
    index: &dyn Index,
    stream: &Stream,
    value: &[u8],
    duration: Option<Duration>,
) -> anyhow::Result<u64> {
    let mut out = Vec::with_capacity(value.len());
    let mut found = 0u64;
    let mut done = 0u64;
    let deadline = duration.map(|d| Instant::now() + d);
    loop {
        for (i, op) in stream.ops.iter().enumerate() {
            if i % CLOCK_CHECK_OPS == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                std::hint::black_box(found);
                return Ok(done);
            }
            let key = stream.key(op);
            match op.kind {
                OpKind::Read => found += u64::from(index.get(key, &mut out)),
                OpKind::Upsert => index.upsert(key, value)?,
                OpKind::Insert => found += u64::from(index.insert(key, value)?),
                OpKind::Scan => {
                    let mut left = op.scan_len;
                    index.scan(
                        Bound::Included(key),
                        Bound::Unbounded,
                        Order::Ascending,
                        &mut |k, v| {
                            // Read each record as a consumer would (its first and last bytes),
                            // so an index that hands out values in place pays for reaching
                            // them just as one that copies them out does.
                            let ends = |b: &[u8]| {
                                u64::from(b.first().copied().unwrap_or(0))
                                    + u64::from(b.last().copied().unwrap_or(0))
                            };
                            found += v.len() as u64 + ends(k) + ends(v);
                            left = left.saturating_sub(1);
                            if left == 0 {
                                ControlFlow::Break(())
                            } else {
                                ControlFlow::Continue(())
                            }
                        },
                    );
                }
                OpKind::ReadModifyWrite => {
                    found += u64::from(index.get(key, &mut out));
                    index.upsert(key, value)?;
                }
            }
            done += 1;
        }
        if deadline.is_none() || stream.ops.is_empty() {
            break;
        }
    }
    std::hint::black_box(found);
    Ok(done)
}

/// The value every write stores: `size` bytes of a fixed pattern.
fn value_bytes(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The median (mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

fn median_u64(values: &[u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    Some(sorted[sorted.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        // Goal: the quoted median is the middle run (mean of the middle two for even counts).
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median_u64(&[5, 1, 9]), Some(5));
    }
}
