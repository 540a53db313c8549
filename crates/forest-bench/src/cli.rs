//! `forest bench`: the flags (names are an interface scripts rely on) and the driver.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::dist::Dist;
use crate::engines::{self, Spec};
use crate::keygen::KeyShape;
use crate::peers;
use crate::report;
use crate::runner::{self, RunOptions};
use crate::target::{self, Mode};
use crate::workload::{Config, ScanOrder, Workload, WORKLOADS};

/// Workloads of `forest bench` without `--workload`: a read-only, a write-heavy and a scan
/// mix, the three regimes the papers contrast.
pub const DEFAULT_WORKLOADS: &str = "ycsb-c,ycsb-a,ycsb-e";
/// Keys of the default comparison (workloads named with `--workload` keep their own).
pub const DEFAULT_QUICK_KEYS: u64 = 100_000;
/// Timed operations per run of the default comparison.
pub const DEFAULT_QUICK_OPS: u64 = 150_000;
/// Timed operations per run when `--workload` is given without `--ops`.
pub const DEFAULT_OPS: u64 = 1_000_000;

const ABOUT: &str = "Measure forest's engines against each other and against well-known peers";

const LONG_ABOUT: &str = "\
Measure forest's engines against each other and against well-known peers, in one process and
one run, on the papers' workloads. Every engine and peer faces the same pre-generated op
streams; threads start together at a barrier; each configuration runs --runs times on a fresh
index (load, warm-up, timed phase) and the report quotes the median.

Without flags, `forest bench` compares every engine and peer on ycsb-c, ycsb-a and ycsb-e with
100 000 keys, 150 000 timed ops per run, 1 and 2 threads and 3 runs: about a minute on a
2-core machine. A workload named with --workload keeps its own key count (1 M for most) and
runs 1 000 000 ops unless --keys / --ops say otherwise.

Output: a table on stdout (median Mops/s, the runs' range, for workloads with scans the
records the scans visited in millions per second (Mrec/s), heap bytes the load allocated and
bytes per key, engine counters per op), then each engine's throughput relative to the first
peer, or to --baseline, per workload and thread count. --json and --plot write the same
results for machines and for eyes. A progress bar is drawn on stderr when it is a terminal.";

/// `forest bench`'s flags.
#[derive(Args, Debug, Clone)]
#[command(about = ABOUT, long_about = LONG_ABOUT, after_long_help = catalog())]
pub struct BenchArgs {
    /// Engines and peers to run, comma-separated specs `name` or `name:key=value,...`
    /// (e.g. `lockbtree:order=16,search=linear,skiplist`); repeatable. Default: every engine
    /// and every peer.
    #[arg(long, value_name = "SPECS")]
    pub engines: Vec<String>,

    /// Workloads, comma-separated (see the list below). Default: ycsb-c,ycsb-a,ycsb-e.
    #[arg(long, value_name = "NAMES")]
    pub workload: Option<String>,

    /// Keys loaded before the timed phase (rw1: keys put). Default: the workload's own.
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,

    /// Timed operations per run, over all threads. Default: 1000000 (150000 without
    /// --workload). Ignored by masstree-rw1, whose ops are its keys.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,

    /// Also bound each timed phase by time: streams are cycled until this many seconds
    /// passed (inserts of a later cycle find their keys present).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Thread counts, comma-separated; each is measured in turn.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2"
    )]
    pub threads: Vec<usize>,

    /// Repetitions of each configuration; the report quotes the median.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub runs: usize,

    /// Warm-up reads per run before the timed phase. Default: a tenth of --ops, at most
    /// the key count.
    #[arg(long, value_name = "N")]
    pub warmup_ops: Option<u64>,

    /// Key-access distribution, overriding the workload's (see the list below).
    #[arg(long, value_name = "NAME")]
    pub dist: Option<String>,

    /// Key shape, overriding the workload's (see the list below).
    #[arg(long, value_name = "NAME")]
    pub key_shape: Option<String>,

    /// Value size in bytes, overriding the workload's.
    #[arg(long, value_name = "BYTES")]
    pub value_size: Option<usize>,

    /// Records per scan, for workloads with scans (ycsb-e): every scan visits exactly N
    /// records (fewer only where the keys run out), from the same start keys as without the
    /// flag. Default: the workload's own lengths (ycsb-e: uniform in 1..=100). Scan rows
    /// report records per second (Mrec/s) beside ops per second.
    #[arg(long, value_name = "N")]
    pub scan_len: Option<u32>,

    /// Direction of every scan, for workloads with scans: `asc` (from the start key up, as
    /// YCSB E) or `desc` (from the start key down, the key itself first). A peer without a
    /// correct reverse range scan of its own is skipped on `desc`, and the report says why.
    /// Default: asc.
    #[arg(long, value_name = "asc|desc")]
    pub scan_order: Option<String>,

    /// Scan through `Index::scan_pinned`: the visitor runs under the engine's epoch pin on
    /// records in place (no copy), where the engine has such a scan (masstree; the others
    /// and the durable modes scan as without the flag). Measures what the rule "no pin while
    /// the visitor runs" costs (issue 14).
    #[arg(long)]
    pub scan_pinned: bool,

    /// Write the results as JSON: {"results":[{"engine","workload","threads","keys","ops",
    /// "runs_ops_per_sec","median_ops_per_sec","memory_bytes","bytes_per_key","key_shape",
    /// "dist","value_size","durability","counters_per_op",...}]}; durable rows add
    /// "fsyncs_per_ack","ack_p50_us","ack_p99_us".
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Draw median throughput per engine and thread count as an SVG bar chart.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// The engine or peer (spec label or name) that ratios are relative to. Default: the
    /// first peer of the run.
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,

    /// Seed of every generator: the same seed gives the same op streams.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,

    /// Durability modes, comma-separated: `none` (the bare index), or through a durable
    /// store: `sync` (fsync per write), `group` (group commit), `periodic:MS`. Durable modes
    /// run the store engines (lockbtree, bwtree, masstree, without parameters) and report
    /// fsyncs per acknowledged write and acknowledgement latency p50/p99.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "none"
    )]
    pub durability: Vec<String>,

    /// Where durable runs create their store directories, one fresh directory per run,
    /// removed after it, and where engines with files of their own (`bztree-pm`) put them
    /// (their `dir=` parameter). Default: the system's temp dir. Put it on the disk to measure.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Durable runs: shard logs written in parallel (1..=64). Default: the store's default.
    #[arg(long, value_name = "N")]
    pub shards: Option<usize>,

    /// Durable runs: start a checkpoint every MS milliseconds while the store is open, to
    /// measure puts while checkpoints run. Default: no checkpoint during a run.
    #[arg(long, value_name = "MS")]
    pub checkpoint_every: Option<u64>,

    /// Durable runs of engine bwtree: memory budgets, comma-separated, each `none` or bytes
    /// with a unit (`64MiB`, `64mb`, `16k`): the tree runs on its own LSS and evicts pages
    /// above the budget; every durable mode runs once per budget (so `none,64MiB` compares
    /// both in one run). Refused for other engines.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub memory_budget: Vec<String>,

    /// With --memory-budget: a mapping-table checkpoint of the LSS after every BYTES of log
    /// (units as --memory-budget), on a background thread [default: 64MiB].
    #[arg(long, value_name = "BYTES")]
    pub map_checkpoint_bytes: Option<String>,

    /// With --memory-budget: no map checkpoints (the store's LSS is then discarded at open).
    #[arg(long, conflicts_with = "map_checkpoint_bytes")]
    pub no_map_checkpoints: bool,
}

/// The catalogue of workloads, key shapes, distributions, engines and peers for `--help`.
pub fn catalog() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Workloads (defaults: key shape, value bytes, distribution, keys):"
    );
    for w in WORKLOADS {
        let _ = writeln!(
            s,
            "  {:<20} {} [{}, {} B, {}, {}]",
            w.name,
            w.about,
            w.key_shape.name(),
            w.value_size,
            w.dist.name(),
            w.keys
        );
    }
    let _ = writeln!(s, "\nKey shapes (--key-shape):");
    for k in KeyShape::ALL {
        let _ = writeln!(s, "  {:<20} {}", k.name(), k.describe());
    }
    let _ = writeln!(s, "\nDistributions (--dist):");
    for d in Dist::ALL {
        let _ = writeln!(s, "  {:<20} {}", d.name(), d.describe());
    }
    let _ = writeln!(s, "\nEngines (--engines; parameters after a colon):");
    for e in engines::ENGINES {
        let _ = writeln!(s, "  {:<20} {}", e.name, e.about);
        let params: Vec<String> = e
            .params
            .iter()
            .map(|p| format!("{}={} (default {})", p.key, p.values, p.default))
            .collect();
        let _ = writeln!(s, "  {:<20} parameters: {}", "", params.join(", "));
    }
    let _ = writeln!(s, "  (`forest engines` says what each parameter means)");
    let _ = writeln!(
        s,
        "\nPeers (--engines; u64 keys on the u64 shape, byte keys otherwise):"
    );
    for p in peers::PEER_NAMES {
        let _ = writeln!(s, "  {:<20} {}", p, peers::describe(p));
    }
    let _ = writeln!(
        s,
        "\nExamples:\n  forest bench\n  forest bench --workload bztree-balanced --dist zipfian \
         --threads 1,2,4 --json out.json --plot out.svg\n  forest bench --workload ycsb-e \
         --scan-len 1000 --scan-order desc --keys 1000000\n  forest bench --engines \
         lockbtree:order=8,lockbtree:order=64,skiplist --workload ycsb-a --baseline skiplist\n  \
         forest bench --engines lockbtree --workload durable-put --durability \
         sync,group,periodic:200 --threads 1,8,64 --ops 20000 --runs 1\n  \
         forest bench --engines lockbtree --workload durable-put --durability group \
         --threads 8 --keys 1000000 --ops 200000 --checkpoint-every 100 --shards 2"
    );
    s
}

/// Everything `run` needs, resolved from the flags.
struct Plan {
    configs: Vec<Config>,
    specs: Vec<Spec>,
    options: RunOptions,
}

fn plan(args: &BenchArgs) -> anyhow::Result<Plan> {
    let quick = args.workload.is_none();
    let names = args.workload.as_deref().unwrap_or(DEFAULT_WORKLOADS);
    let workloads: Vec<Workload> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::parse)
        .collect::<anyhow::Result<_>>()?;
    if workloads.is_empty() {
        bail!("--workload names no workload");
    }
    let dist = args.dist.as_deref().map(str::parse::<Dist>).transpose()?;
    let key_shape = args
        .key_shape
        .as_deref()
        .map(str::parse::<KeyShape>)
        .transpose()?;
    if let Some(v) = args.value_size {
        if v > forest_core::VALUE_BYTES_MAX {
            bail!(
                "--value-size {v} is above the value limit of {} bytes",
                forest_core::VALUE_BYTES_MAX
            );
        }
    }
    let scan_order = args
        .scan_order
        .as_deref()
        .map(str::parse::<ScanOrder>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--scan-order: {e}"))?;
    if args.scan_len == Some(0) {
        bail!("--scan-len must be at least 1");
    }
    if (args.scan_len.is_some() || scan_order.is_some() || args.scan_pinned)
        && !workloads.iter().any(Workload::has_scans)
    {
        let with_scans: Vec<&str> = WORKLOADS
            .iter()
            .filter(|w| w.has_scans())
            .map(|w| w.name)
            .collect();
        bail!(
            "--scan-len, --scan-order and --scan-pinned shape scans, and no workload run has \
             scans (those that \
             do: {})",
            with_scans.join(", ")
        );
    }
    let ops = args.ops.unwrap_or(if quick {
        DEFAULT_QUICK_OPS
    } else {
        DEFAULT_OPS
    });
    let configs: Vec<Config> = workloads
        .iter()
        .map(|&workload| {
            let keys = args.keys.unwrap_or(if quick {
                DEFAULT_QUICK_KEYS
            } else {
                workload.keys
            });
            Config {
                workload,
                key_shape: key_shape.unwrap_or(workload.key_shape),
                value_size: args.value_size.unwrap_or(workload.value_size),
                dist: dist.unwrap_or(workload.dist),
                keys,
                ops,
                seed: args.seed,
                scan_len: args.scan_len,
                scan_order: scan_order.unwrap_or_default(),
                scan_pinned: args.scan_pinned,
            }
        })
        .collect();
    for c in &configs {
        if c.keys == 0 && !c.allows_no_keys() {
            bail!("--keys must be at least 1 (0 only for durable-put and durable-batch)");
        }
        if c.keys.saturating_add(c.ops) > c.key_shape.capacity() {
            bail!(
                "{} keys plus {} ops exceed the {} distinct keys of key shape {}",
                c.keys,
                c.ops,
                c.key_shape.capacity(),
                c.key_shape.name()
            );
        }
    }

    let specs = if args.engines.is_empty() {
        engines::known_names()
            .into_iter()
            .map(Spec::parse)
            .collect::<forest_core::Result<Vec<_>>>()?
    } else {
        let mut specs = Vec::new();
        for list in &args.engines {
            specs.extend(engines::split_list(list)?);
        }
        specs
    };
    if specs.is_empty() {
        bail!("--engines names no engine");
    }
    // Fail on a bad spec now, not after minutes of other engines' runs.
    for spec in &specs {
        engines::build(spec, configs[0].key_shape)?;
    }
    if let Some(b) = &args.baseline {
        if !specs.iter().any(|s| &s.label() == b || &s.name == b) {
            let labels: Vec<String> = specs.iter().map(Spec::label).collect();
            bail!(
                "--baseline {b:?} is not among the engines run: {}",
                labels.join(", ")
            );
        }
    }

    if args.threads.is_empty() || args.threads.contains(&0) {
        bail!("--threads needs thread counts of at least 1");
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut modes: Vec<Mode> = args
        .durability
        .iter()
        .map(|m| target::parse_mode(m))
        .collect::<anyhow::Result<_>>()?;
    if modes.is_empty() {
        bail!("--durability names no mode");
    }
    if (args.shards.is_some() || args.checkpoint_every.is_some())
        && !modes.iter().any(Option::is_some)
    {
        bail!("--shards and --checkpoint-every need a durable mode in --durability");
    }
    if let Some(shards) = args.shards {
        let max = forest_store::wal::group_commit::SHARD_COUNT_MAX;
        if !(1..=max).contains(&shards) {
            bail!("--shards {shards}: 1..={max} allowed");
        }
    }
    if args.checkpoint_every == Some(0) {
        bail!("--checkpoint-every must be at least 1 ms");
    }
    for mode in modes.iter_mut().flatten() {
        if let Some(shards) = args.shards {
            mode.shards = shards;
        }
        mode.checkpoint_every_ms = args.checkpoint_every;
    }
    // Parsed always, so a bad value is refused even without a budget; without one they mean
    // nothing (map checkpoints are a budgeted bwtree's), so they are refused by name.
    let map_checkpoint_wal_bytes = forest_store::map_checkpoint_schedule(
        args.map_checkpoint_bytes.as_deref(),
        args.no_map_checkpoints,
    )?;
    if args.memory_budget.is_empty() {
        if let Some(flag) = forest_store::map_checkpoint_flag(
            args.map_checkpoint_bytes.is_some(),
            args.no_map_checkpoints,
        ) {
            bail!("{flag} needs --memory-budget (map checkpoints are a budgeted bwtree's)");
        }
    }
    if !args.memory_budget.is_empty() {
        let budgets: Vec<Option<u64>> = args
            .memory_budget
            .iter()
            .map(|b| forest_store::parse_memory_budget(b).context("--memory-budget"))
            .collect::<anyhow::Result<_>>()?;
        if !modes.iter().any(Option::is_some) {
            bail!("--memory-budget needs a durable mode in --durability (the store evicts)");
        }
        if budgets.iter().any(Option::is_some) {
            if let Some(other) = specs
                .iter()
                .find(|s| target::store_can_run(s) && !target::budget_can_run(s))
            {
                bail!(
                    "--memory-budget needs engine bwtree (the only engine that evicts pages to \
                     its own log-structured store); --engines names {}",
                    other.name
                );
            }
        }
        modes = modes
            .into_iter()
            .flat_map(|mode| {
                budgets.iter().map(move |&budget| {
                    mode.map(|m| target::DurableMode {
                        memory_budget_bytes: budget,
                        map_checkpoint_wal_bytes,
                        ..m
                    })
                })
            })
            .collect();
        modes.dedup();
    }
    if modes.iter().any(Option::is_some) && !specs.iter().any(target::store_can_run) {
        bail!(
            "--durability {} needs a store engine among --engines: {} (with any parameters)",
            args.durability.join(","),
            forest_engines::ENGINES
                .iter()
                .filter(
                    |e| e.capabilities.durable_through_store || e.capabilities.store_holds_its_file
                )
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let duration = match args.duration {
        Some(secs) if !(secs > 0.0 && secs.is_finite()) => {
            bail!("--duration must be a positive number of seconds")
        }
        Some(secs) => Some(Duration::from_secs_f64(secs)),
        None => None,
    };
    Ok(Plan {
        configs,
        specs,
        options: RunOptions {
            threads: args.threads.clone(),
            runs: args.runs,
            warmup_ops: args.warmup_ops,
            duration,
            modes,
            dir: args.dir.clone(),
        },
    })
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    // The clock keeps moving through long phases; a redraw twice a second costs nothing.
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// Runs `forest bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    let total = plan.configs.len() as u64
        * plan.options.threads.len() as u64
        * plan.specs.len() as u64
        * plan.options.modes.len() as u64
        * plan.options.runs as u64;
    let progress = progress_bar(total);
    let mut rows = Vec::new();
    let mut printed_header = false;
    for config in &plan.configs {
        let new_rows = runner::run_workload(config, &plan.specs, &plan.options, &progress)
            .with_context(|| format!("workload {}", config.workload.name))?;
        let mut text = report::table(&new_rows);
        if printed_header {
            text = text
                .split_once('\n')
                .map_or(String::new(), |(_, rest)| rest.to_string());
        }
        printed_header = true;
        let skipped: Vec<&Spec> = plan
            .specs
            .iter()
            .filter(|s| !new_rows.iter().any(|r| r.engine == s.label()))
            .collect();
        for s in skipped {
            let why = plan
                .options
                .modes
                .iter()
                .find_map(|&mode| runner::skip_reason(config, s, mode))
                .unwrap_or_default();
            let workload = match config.scan_label() {
                Some(label) => format!("{}/{label}", config.workload.name),
                None => config.workload.name.to_string(),
            };
            let _ = writeln!(text, "{workload:<22}     {:<34} skipped: {why}", s.label());
        }
        progress.suspend(|| print!("{text}"));
        rows.extend(new_rows);
    }
    progress.finish_and_clear();
    let ratios = report::ratios(&rows, args.baseline.as_deref(), |engine| {
        Spec::parse(engine).is_ok_and(|s| engines::is_peer(&s))
    });
    println!(
        "\nThroughput ratios (same run, median of {} runs):",
        plan.options.runs
    );
    print!("{}", report::ratio_table(&ratios));
    if let Some(path) = &args.json {
        report::write_json(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        report::write_svg(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .expect("valid flags")
            .bench
    }

    #[test]
    fn flags_resolve_against_workload_defaults() {
        // Goal: flags override workload defaults; a named workload keeps its own key count.
        let p = plan(&parse(&[
            "--workload",
            "xbox-like,ycsb-a",
            "--dist",
            "zipfian",
        ]))
        .expect("ok");
        assert_eq!(p.configs.len(), 2);
        assert_eq!(p.configs[0].key_shape, KeyShape::Text94);
        assert_eq!(p.configs[0].value_size, 1200);
        assert_eq!(p.configs[0].dist, Dist::Zipfian);
        assert_eq!(p.configs[0].keys, 1_000_000);
        assert_eq!(p.configs[0].ops, DEFAULT_OPS);
        let quick = plan(&parse(&["--engines", "skiplist", "--threads", "1,3"])).expect("ok");
        assert_eq!(quick.configs.len(), 3);
        assert_eq!(quick.configs[0].keys, DEFAULT_QUICK_KEYS);
        assert_eq!(quick.options.threads, [1, 3]);
        assert_eq!(quick.specs.len(), 1);
    }

    #[test]
    fn scan_flags_reach_every_workload_with_scans() {
        // Goal: --scan-len and --scan-order are resolved into each configuration; they are
        // refused when zero, unknown, or when no workload run has scans; --help shows them.
        let p = plan(&parse(&[
            "--workload",
            "ycsb-e,ycsb-c",
            "--scan-len",
            "1000",
            "--scan-order",
            "desc",
        ]))
        .expect("ok");
        assert!(p
            .configs
            .iter()
            .all(|c| c.scan_len == Some(1_000) && c.scan_order == ScanOrder::Desc));
        let quick = plan(&parse(&["--scan-len", "10"])).expect("ycsb-e is a default");
        assert_eq!(quick.configs[2].scan_order, ScanOrder::Asc);
        let err = |args: &[&str]| plan(&parse(args)).err().expect("rejected").to_string();
        assert!(err(&["--scan-len", "0"]).contains("--scan-len"));
        assert!(err(&["--scan-order", "up"]).contains("desc"));
        assert!(err(&["--workload", "ycsb-a", "--scan-order", "desc"]).contains("ycsb-e"));
        let mut cmd = <Cli as clap::CommandFactory>::command();
        let help = cmd.render_long_help().to_string();
        assert!(help.contains("--scan-len") && help.contains("--scan-order"));
        assert!(help.contains("Mrec/s"));
    }

    // Review rev-mapdef: the map checkpoint flags mean something only with --memory-budget;
    // without it they are neither parsed nor refused (garbage passes, as does
    // --no-map-checkpoints on a run that has no LSS).
    #[test]
    fn rev_map_checkpoint_flags_without_a_budget_are_refused() {
        let err = |args: &[&str]| plan(&parse(args)).err().map(|e| e.to_string());
        let garbage = err(&["--map-checkpoint-bytes", "garbage"]);
        assert!(
            garbage
                .as_deref()
                .is_some_and(|e| e.contains("--map-checkpoint-bytes")),
            "{garbage:?}"
        );
        let off = err(&["--no-map-checkpoints"]);
        assert!(
            off.as_deref()
                .is_some_and(|e| e.contains("--memory-budget")),
            "{off:?}"
        );
    }

    #[test]
    fn bad_flags_are_clear_errors() {
        // Goal: unknown names and impossible values fail before any run, naming the problem.
        let err = |args: &[&str]| plan(&parse(args)).err().expect("rejected").to_string();
        assert!(err(&["--workload", "ycsb-q"]).contains("ycsb-a"));
        assert!(err(&["--dist", "pareto"]).contains("zipfian"));
        assert!(err(&["--key-shape", "u128"]).contains("hash20"));
        assert!(err(&["--engines", "btree"]).contains("skiplist"));
        assert!(err(&["--engines", "skiplist", "--baseline", "hashmap"]).contains("baseline"));
        assert!(err(&["--runs", "0"]).contains("runs"));
        assert!(err(&["--threads", "0"]).contains("threads"));
    }

    #[test]
    fn help_lists_every_workload_shape_distribution_engine_and_peer() {
        // Goal: the long help documents every name scripts may pass.
        let text = catalog();
        for w in WORKLOADS {
            assert!(text.contains(w.name), "{}", w.name);
        }
        for k in KeyShape::ALL {
            assert!(text.contains(k.name()));
        }
        for d in Dist::ALL {
            assert!(text.contains(d.name()));
        }
        for e in engines::known_names() {
            assert!(text.contains(e));
        }
    }
}
