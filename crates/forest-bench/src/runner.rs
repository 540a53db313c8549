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
use std::sync::Barrier;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use anyhow::bail;
use indicatif::ProgressBar;

use crate::alloc_count;
use crate::engines::{self, Spec};
use crate::peers;
use crate::report::ResultRow;
use crate::target::{self, Mode, Target};
use crate::workload::{self, Config, Kind, OpKind, Phase, ScanOrder, Stream};

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
    /// Durability modes to measure each engine under, in order (None: the bare index).
    pub modes: Vec<Mode>,
    /// Where durable runs make their store directories (None: the system's temp dir).
    pub dir: Option<PathBuf>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            threads: vec![1],
            runs: 1,
            warmup_ops: None,
            duration: None,
            modes: vec![None],
            dir: None,
        }
    }
}

/// Checks a timed loop makes between clock reads in duration mode: rare enough to cost
/// nothing, frequent enough to stop within microseconds.
const CLOCK_CHECK_OPS: usize = 256;

/// Runs `specs` on one workload configuration at every thread count; rows in order of
/// thread count, then engine, then durability mode, then phase. `progress` advances once per
/// engine run. Combinations that cannot run are left out (see [`skip_reason`]).
pub fn run_workload(
    config: &Config,
    specs: &[Spec],
    options: &RunOptions,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<ResultRow>> {
    let mut rows = Vec::new();
    for &threads in &options.threads {
        progress.set_message(format!(
            "{} T={threads}: generating ops",
            config.workload.name
        ));
        let phases = workload::phases(config, threads);
        let warmup = warmup_phase(config, threads, options);
        for spec in specs {
            for &mode in &options.modes {
                if skip_reason(config, spec, mode).is_some() {
                    progress.inc(options.runs as u64);
                    continue;
                }
                rows.extend(run_spec(
                    config, spec, mode, threads, &phases, &warmup, options, progress,
                )?);
            }
        }
    }
    Ok(rows)
}

/// Why `spec` does not run `config` under `mode`, if it does not: a hash map on a workload
/// with scans (its scans sort the whole map), a peer without a correct reverse range scan on
/// descending scans (measuring its workaround would be measuring something else), and under
/// a durable mode anything but a store engine.
pub fn skip_reason(config: &Config, spec: &Spec, mode: Mode) -> Option<String> {
    let scans = config.workload.has_scans();
    if scans && peers::is_unordered(&spec.name) {
        return Some("a hash map has no ordered scans".to_string());
    }
    if scans && config.scan_order == ScanOrder::Desc {
        if let Some(why) = peers::reverse_scan_gap(&spec.name) {
            return Some(format!("no descending scans: {why}"));
        }
    }
    if mode.is_some() && !target::store_can_run(spec) {
        return Some("not a store engine, so not run under a durable mode".to_string());
    }
    if mode.is_some_and(|m| m.memory_budget_bytes.is_some()) && !target::budget_can_run(spec) {
        return Some("a memory budget needs engine bwtree".to_string());
    }
    None
}

/// `spec` with `dir=` set to `--dir` for an engine that keeps its data in files of its own
/// (`bztree-pm`), unless the spec names one.
fn with_dir(spec: &Spec, dir: Option<&std::path::Path>) -> Spec {
    let mut spec = spec.clone();
    let own_files = forest_engines::find(&spec.name).is_ok_and(|e| {
        e.capabilities.persistent_on_its_own && e.params.iter().any(|p| p.key == "dir")
    });
    if let (true, Some(dir)) = (own_files, dir) {
        if !spec.params.iter().any(|(k, _)| k == "dir") {
            spec.params.push(("dir".into(), dir.display().to_string()));
        }
    }
    spec
}

/// Builds a fresh target of `spec` under `mode`.
fn build_target(
    spec: &Spec,
    config: &Config,
    mode: Mode,
    options: &RunOptions,
) -> anyhow::Result<Target> {
    match mode {
        None => {
            let spec = with_dir(spec, options.dir.as_deref());
            Ok(Target::Memory(engines::build(&spec, config.key_shape)?))
        }
        Some(durability) => Target::open_durable(&spec.label(), durability, options.dir.as_deref()),
    }
}

/// Runs one engine under one mode at one thread count, `options.runs` times; one row per
/// phase.
#[allow(clippy::too_many_arguments)]
fn run_spec(
    config: &Config,
    spec: &Spec,
    mode: Mode,
    threads: usize,
    phases: &[Phase],
    warmup: &Phase,
    options: &RunOptions,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<ResultRow>> {
    let label = spec.label();
    let counting = alloc_count::is_installed();
    let mut per_phase: Vec<PhaseRuns> = phases.iter().map(|_| PhaseRuns::default()).collect();
    let mut memory = Vec::new();
    let mut engine_memory = 0;
    let mut height = 0;
    for run in 0..options.runs {
        progress.set_message(format!(
            "{} {label} {} T={threads} run {}/{}",
            config.workload.name,
            target::mode_name(mode),
            run + 1,
            options.runs
        ));
        let target = build_target(spec, config, mode, options)?;
        if config.has_load() {
            let bytes = measured(counting, || load(&target, config))?;
            // An engine with a heap of its own (bztree's mapped node heap) allocates outside
            // the counting allocator: its own account of its memory is then the larger figure.
            memory.extend(bytes.map(|b| b.max(target.stats().memory_bytes)));
            run_phase(&target, warmup, config.value_size, None)?;
        } else if run == 0 && counting && matches!(config.workload.kind, Kind::MasstreeRw1) {
            // rw1 has no load: measure its put phase once, untimed, on a spare index.
            let spare = build_target(spec, config, mode, options)?;
            let bytes = measured(counting, || {
                run_phase(&spare, &phases[0], config.value_size, None).map(|_| ())
            })?;
            memory.extend(bytes);
        }
        for (phase, runs) in phases.iter().zip(&mut per_phase) {
            let before = target.stats();
            let fsyncs_before = target.fsync_count();
            let done = run_phase(&target, phase, config.value_size, options.duration)?;
            let after = target.stats();
            runs.fsyncs += target.fsync_count().saturating_sub(fsyncs_before);
            runs.writes += done.writes;
            runs.latencies_ns.extend(done.latencies_ns);
            let secs = done.elapsed.as_secs_f64().max(1e-9);
            runs.ops_per_sec.push(done.ops as f64 / secs);
            runs.records_per_sec.push(done.records as f64 / secs);
            runs.ops.push(done.ops);
            for (name, value) in &after.counters {
                let was = before.counter(name).unwrap_or(0);
                *runs.counter_deltas.entry((*name).to_string()).or_default() +=
                    value.saturating_sub(was);
            }
        }
        let stats = target.stats();
        engine_memory = stats.memory_bytes;
        height = stats.height;
        progress.inc(1);
    }
    let memory_bytes = median_u64(&memory);
    let keys_for_memory = if config.has_load() {
        config.keys
    } else {
        config.ops
    };
    let mut rows = Vec::new();
    for (phase, mut runs) in phases.iter().zip(per_phase) {
        let mut workload = match phase.suffix {
            Some(suffix) => format!("{}/{suffix}", config.workload.name),
            None => config.workload.name.to_string(),
        };
        let scans = phase.has_scans();
        if let Some(label) = config.scan_label().filter(|_| scans) {
            workload = format!("{workload}/{label}");
        }
        let total_ops: u64 = runs.ops.iter().sum();
        let durable = mode.is_some();
        runs.latencies_ns.sort_unstable();
        let percentile_us =
            |p: f64| durable.then(|| percentile(&runs.latencies_ns, p) as f64 / 1e3);
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
            memory_bytes,
            bytes_per_key: memory_bytes.map(|m| m as f64 / keys_for_memory.max(1) as f64),
            engine_memory_bytes: engine_memory,
            height,
            durability: target::mode_name(mode),
            fsyncs_per_ack: durable.then(|| runs.fsyncs as f64 / runs.writes.max(1) as f64),
            ack_p50_us: percentile_us(0.50),
            ack_p99_us: percentile_us(0.99),
            counters_per_op: runs
                .counter_deltas
                .into_iter()
                .map(|(k, v)| (k, v as f64 / total_ops.max(1) as f64))
                .collect(),
            runs_ops_per_sec: runs.ops_per_sec,
            records_per_sec: scans.then(|| median(&runs.records_per_sec)),
            scan_len: scans.then(|| match config.scan_len {
                Some(n) => n.to_string(),
                None => format!("1-{}", config.workload.scan_len_max().unwrap_or(0)),
            }),
            scan_order: scans.then(|| config.scan_order.name().to_string()),
        });
    }
    Ok(rows)
}

#[derive(Default)]
struct PhaseRuns {
    ops_per_sec: Vec<f64>,
    /// Records the scans visited per second, per run.
    records_per_sec: Vec<f64>,
    ops: Vec<u64>,
    counter_deltas: BTreeMap<String, u64>,
    /// Log fsyncs of the timed phases (durable runs).
    fsyncs: u64,
    /// Writes acknowledged in the timed phases.
    writes: u64,
    /// Each acknowledgement's wait (durable runs): a write call's, or a batch call's.
    latencies_ns: Vec<u64>,
}

/// The `p` quantile (0..=1) of sorted `values` (nearest rank); 0 for none.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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
/// range of key indices (ascending, so a `monotonic` load is in key order per thread), in
/// batches of [`target::LOAD_BATCH_OPS`] (one durability wait each on a store).
pub fn load(target: &Target, config: &Config) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(config.keys.max(1) as usize);
    let value = value_bytes(config.value_size);
    let chunk = config.keys.div_ceil(threads as u64);
    let results: Vec<anyhow::Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let value = &value;
                s.spawn(move || {
                    let end = ((t + 1) * chunk).min(config.keys);
                    let mut inserted = 0u64;
                    let mut keys = Vec::with_capacity(target::LOAD_BATCH_OPS);
                    let mut i = t * chunk;
                    while i < end {
                        keys.clear();
                        while i < end && keys.len() < target::LOAD_BATCH_OPS {
                            let mut key = Vec::new();
                            config.key(i, &mut key);
                            keys.push(key);
                            i += 1;
                        }
                        inserted += target.insert_batch(&keys, value)?;
                    }
                    Ok(inserted)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a load thread panicked")))
            })
            .collect()
    });
    let mut inserted = 0u64;
    for r in results {
        inserted += r?;
    }
    if inserted != config.keys {
        bail!(
            "loading {} into {}: {} of {} inserts found the key present",
            config.workload.name,
            target.name(),
            config.keys - inserted.min(config.keys),
            config.keys
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
            batch_ops: 1,
            scan_order: ScanOrder::Asc,
            scan_pinned: false,
        };
    }
    let mut warm = *config;
    warm.ops = count;
    warm.workload.kind = workload::Kind::Mixed(workload::READ_ONLY);
    workload::phases(&warm, threads).remove(0)
}

/// What a timed phase did.
#[derive(Clone, Debug)]
pub struct PhaseResult {
    /// Operations completed over all threads.
    pub ops: u64,
    /// Writes acknowledged (upserts, inserts, read-modify-writes; each op of a batch).
    pub writes: u64,
    /// Records the scans visited.
    pub records: u64,
    /// From the first thread's start after the barrier until the last thread finished.
    pub elapsed: Duration,
    /// On a durable target, each write call's time to acknowledgement (a batch's as one).
    pub latencies_ns: Vec<u64>,
}

/// What one thread's timed loop did.
struct StreamDone {
    ops: u64,
    writes: u64,
    /// Records the scans visited.
    records: u64,
    latencies_ns: Vec<u64>,
}

/// Runs one phase: a thread per stream, started together at a barrier; the elapsed time runs
/// from the first thread's start to the last thread's end.
pub fn run_phase(
    target: &Target,
    phase: &Phase,
    value_size: usize,
    duration: Option<Duration>,
) -> anyhow::Result<PhaseResult> {
    if phase.streams.is_empty() {
        return Ok(PhaseResult {
            ops: 0,
            writes: 0,
            records: 0,
            elapsed: Duration::ZERO,
            latencies_ns: Vec::new(),
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
                let (value, barrier) = (&value, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let done = if phase.batch_ops > 1 {
                        run_batches(target, stream, phase.batch_ops, value, duration)
                    } else {
                        run_stream(target, stream, phase, value, duration)
                    };
                    (done, start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut result = PhaseResult {
        ops: 0,
        writes: 0,
        records: 0,
        elapsed: Duration::ZERO,
        latencies_ns: Vec::new(),
    };
    let mut first_start: Option<Instant> = None;
    let mut last_end: Option<Instant> = None;
    for outcome in outcomes {
        match outcome {
            Ok((Ok(done), start, end)) => {
                result.ops += done.ops;
                result.writes += done.writes;
                result.records += done.records;
                result.latencies_ns.extend(done.latencies_ns);
                first_start = Some(first_start.map_or(start, |f| f.min(start)));
                last_end = Some(last_end.map_or(end, |l| l.max(end)));
            }
            Ok((Err(e), _, _)) => return Err(e),
            Err(_) => bail!("a benchmark thread panicked in {}", target.name()),
        }
    }
    if let (Some(start), Some(end)) = (first_start, last_end) {
        result.elapsed = end.saturating_duration_since(start);
    }
    Ok(result)
}

/// Times `write` when `timed`, appending its nanoseconds to `latencies_ns`.
#[inline]
fn timed_write<T>(timed: bool, latencies_ns: &mut Vec<u64>, write: impl FnOnce() -> T) -> T {
    if !timed {
        return write();
    }
    let start = Instant::now();
    let out = write();
    latencies_ns.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    out
}

/// One thread's timed loop handing `batch_ops` upserts at a time to the target.
fn run_batches(
    target: &Target,
    stream: &Stream,
    batch_ops: usize,
    value: &[u8],
    duration: Option<Duration>,
) -> anyhow::Result<StreamDone> {
    let timed = target.is_durable();
    let mut done = StreamDone {
        ops: 0,
        writes: 0,
        records: 0,
        latencies_ns: Vec::with_capacity(if timed {
            stream.ops.len().div_ceil(batch_ops)
        } else {
            0
        }),
    };
    let deadline = duration.map(|d| Instant::now() + d);
    let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(batch_ops);
    loop {
        for chunk in stream.ops.chunks(batch_ops) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(done);
            }
            pairs.clear();
            for op in chunk {
                debug_assert_eq!(op.kind, OpKind::Upsert, "batches hold upserts only");
                pairs.push((stream.key(op), value));
            }
            timed_write(timed, &mut done.latencies_ns, || {
                target.upsert_batch(&pairs)
            })?;
            done.ops += chunk.len() as u64;
            done.writes += chunk.len() as u64;
        }
        if deadline.is_none() || stream.ops.is_empty() {
            return Ok(done);
        }
    }
}

/// One scan op: up to `len` records from `key`, up (`[key, +inf)`) or down (`(-inf, key]`,
/// largest first); `visit` sees each record. Returns the records visited. The scan is told
/// its length (`Index::scan_hinted`), as YCSB's scan names its record count.
pub fn scan(
    target: &Target,
    key: &[u8],
    len: u32,
    order: ScanOrder,
    pinned: bool,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> u64 {
    let mut left = len;
    let mut visited = 0u64;
    if left == 0 {
        return 0;
    }
    let (lower, upper) = match order {
        ScanOrder::Asc => (Bound::Included(key), Bound::Unbounded),
        ScanOrder::Desc => (Bound::Unbounded, Bound::Included(key)),
    };
    target.scan(
        lower,
        upper,
        order.order(),
        pinned,
        len as usize,
        &mut |k, v| {
            visit(k, v);
            visited += 1;
            left -= 1;
            if left == 0 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    );
    visited
}

/// One thread's timed loop.
fn run_stream(
    target: &Target,
    stream: &Stream,
    phase: &Phase,
    value: &[u8],
    duration: Option<Duration>,
) -> anyhow::Result<StreamDone> {
    let timed = target.is_durable();
    let mut out = Vec::with_capacity(value.len());
    let mut found = 0u64;
    let mut done = StreamDone {
        ops: 0,
        writes: 0,
        records: 0,
        latencies_ns: Vec::with_capacity(if timed { stream.ops.len() } else { 0 }),
    };
    let lat = &mut done.latencies_ns;
    let mut ops = 0u64;
    let mut writes = 0u64;
    let mut records = 0u64;
    let deadline = duration.map(|d| Instant::now() + d);
    'cycles: loop {
        for (i, op) in stream.ops.iter().enumerate() {
            if i % CLOCK_CHECK_OPS == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                break 'cycles;
            }
            let key = stream.key(op);
            match op.kind {
                OpKind::Read => found += u64::from(target.get(key, &mut out)),
                OpKind::Upsert => {
                    timed_write(timed, lat, || target.upsert(key, value))?;
                    writes += 1;
                }
                OpKind::Insert => {
                    found += u64::from(timed_write(timed, lat, || target.insert(key, value))?);
                    writes += 1;
                }
                OpKind::Scan => {
                    let (order, pinned) = (phase.scan_order, phase.scan_pinned);
                    records += scan(target, key, op.scan_len, order, pinned, &mut |k, v| {
                        // Read each record as a consumer would (its first and last bytes),
                        // so an index that hands out values in place pays for reaching
                        // them just as one that copies them out does.
                        let ends = |b: &[u8]| {
                            u64::from(b.first().copied().unwrap_or(0))
                                + u64::from(b.last().copied().unwrap_or(0))
                        };
                        found += v.len() as u64 + ends(k) + ends(v);
                    });
                }
                OpKind::ReadModifyWrite => {
                    found += u64::from(target.get(key, &mut out));
                    timed_write(timed, lat, || target.upsert(key, value))?;
                    writes += 1;
                }
            }
            ops += 1;
        }
        if deadline.is_none() || stream.ops.is_empty() {
            break;
        }
    }
    std::hint::black_box(found);
    done.ops = ops;
    done.writes = writes;
    done.records = records;
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

    use std::collections::BTreeMap;

    use crate::keygen::{KeyOrder, KeyShape};

    #[test]
    fn scans_visit_the_right_records_in_both_orders_on_every_engine_and_peer() {
        // Goal: a scan op visits exactly the next `len` records from its key: up for asc,
        // down from the key (the key itself first) for desc, on every engine and peer (each
        // peer adapter's descending path included), and returns how many it visited.
        // Method: 3,000 scattered keys with distinct values, scans of 1, 10 and 1,000 records
        // from loaded keys, from keys between them and near both ends, against a BTreeMap.
        let shape = KeyShape::Ycsb;
        let mut model = BTreeMap::new();
        for i in 0..3_000u64 {
            model.insert(shape.key(i, KeyOrder::Scattered), i.to_be_bytes().to_vec());
        }
        let keys: Vec<&Vec<u8>> = model.keys().collect();
        let mut starts: Vec<Vec<u8>> = vec![
            keys[0].clone(),
            keys[5].clone(),
            keys[1_500].clone(),
            keys[keys.len() - 3].clone(),
            b"a".to_vec(),
            b"zzzz".to_vec(),
        ];
        let mut between = keys[700].clone();
        between.push(0);
        starts.push(between);
        for name in crate::engines::known_names() {
            let spec = Spec::parse(name).expect("valid");
            let target = Target::Memory(crate::engines::build(&spec, shape).expect("builds"));
            for (k, v) in &model {
                target.insert(k, v).expect("insert");
            }
            for start in &starts {
                for len in [1u32, 10, 1_000] {
                    for order in [ScanOrder::Asc, ScanOrder::Desc] {
                        let want: Vec<(Vec<u8>, Vec<u8>)> = match order {
                            ScanOrder::Asc => model
                                .range::<[u8], _>((Bound::Included(&start[..]), Bound::Unbounded))
                                .take(len as usize)
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                            ScanOrder::Desc => model
                                .range::<[u8], _>((Bound::Unbounded, Bound::Included(&start[..])))
                                .rev()
                                .take(len as usize)
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                        };
                        let mut got = Vec::new();
                        let visited = scan(&target, start, len, order, false, &mut |k, v| {
                            got.push((k.to_vec(), v.to_vec()));
                        });
                        assert_eq!(visited, got.len() as u64, "{name}");
                        assert_eq!(got, want, "{name} {order:?} len {len} from {start:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        // Goal: the quoted median is the middle run (mean of the middle two for even counts).
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median_u64(&[5, 1, 9]), Some(5));
    }
}
