//! Smoke runs of the harness end to end, with tiny sizes: every workload against lockbtree and
//! a peer, the JSON report's fields, and memory measured through the counting allocator
//! (installed here as the `forest` binary does).

use forest_bench::alloc_count::CountingAlloc;
use forest_bench::engines::{split_list, Spec};
use forest_bench::runner::skip_reason;
use forest_bench::runner::{run_workload, RunOptions};
use forest_bench::target::parse_mode;
use forest_bench::workload::{Config, ScanOrder, WORKLOADS};
use forest_bench::BenchArgs;
use indicatif::ProgressBar;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc(std::alloc::System);

/// Allocation counting is process-wide: tests that run benchmarks take turns, so one test's
/// allocations do not land in another's measurement.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn options(threads: Vec<usize>) -> RunOptions {
    RunOptions {
        threads,
        ..RunOptions::default()
    }
}

fn tiny(name: &str) -> Config {
    let workload = name.parse().expect("known workload");
    let w: &forest_bench::workload::Workload = &workload;
    Config {
        workload,
        key_shape: w.key_shape,
        value_size: w.value_size,
        dist: w.dist,
        keys: 2_000,
        ops: 4_000,
        seed: 1,
        scan_len: None,
        scan_order: ScanOrder::Asc,
        scan_pinned: false,
    }
}

#[test]
fn every_workload_runs_on_lockbtree_and_a_peer() {
    // Goal: each workload completes on an engine and a peer with nonzero throughput.
    // Method: tiny sizes, 1 and 2 threads, one run; check every row.
    let _serial = serial();
    let specs = split_list("lockbtree,skiplist").expect("valid");
    for w in WORKLOADS {
        let rows = run_workload(
            &tiny(w.name),
            &specs,
            &options(vec![1, 2]),
            &ProgressBar::hidden(),
        )
        .unwrap_or_else(|e| panic!("{}: {e:#}", w.name));
        let phases = if w.name == "masstree-rw1" { 2 } else { 1 };
        let has_load = w.keys > 0 || !w.name.starts_with("durable-");
        assert_eq!(rows.len(), 2 * 2 * phases, "{}", w.name);
        for r in &rows {
            assert!(r.ops > 0, "{} {}: no ops", r.workload, r.engine);
            assert!(r.median_ops_per_sec > 0.0, "{} {}", r.workload, r.engine);
            assert!(r.workload.starts_with(w.name));
            if has_load || w.name == "masstree-rw1" {
                // Only that it was measured: with this few keys, a previous run's epoch garbage
                // freed during the load can outweigh what the load allocated (net change 0).
                assert!(r.memory_bytes.is_some(), "counting allocator installed");
            }
        }
        if w.name == "masstree-rw1" {
            assert!(rows.iter().any(|r| r.workload == "masstree-rw1/put"));
            assert!(rows.iter().any(|r| r.workload == "masstree-rw1/get"));
        }
    }
}

#[test]
fn every_peer_runs_a_mixed_workload_and_the_hash_map_skips_scans() {
    // Goal: all peers run; the hash map is skipped where scans are. Method: ycsb-a and ycsb-e.
    let _serial = serial();
    let specs = split_list("skiplist,scc-tree,btreemap-rwlock,masstree-rs,hashmap").expect("ok");
    let rows = run_workload(
        &tiny("ycsb-a"),
        &specs,
        &options(vec![2]),
        &ProgressBar::hidden(),
    )
    .expect("runs");
    assert_eq!(rows.len(), 5);
    let rows = run_workload(
        &tiny("ycsb-e"),
        &specs,
        &options(vec![1]),
        &ProgressBar::hidden(),
    )
    .expect("runs");
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.engine != "hashmap"));
}

#[test]
fn pinned_scans_visit_as_many_records_and_say_so_in_the_label() {
    // Goal: --scan-pinned runs ycsb-e through `Index::scan_pinned` (masstree's in-place scan,
    // the default scan elsewhere) with the same scans, so the records per op match the
    // copy-out run's, and the label names it. Method: tiny runs of both, fixed length 10.
    let _serial = serial();
    let specs = split_list("masstree,lockbtree").expect("ok");
    let mut config = tiny("ycsb-e");
    config.scan_len = Some(10);
    let copied =
        run_workload(&config, &specs, &options(vec![1]), &ProgressBar::hidden()).expect("runs");
    config.scan_pinned = true;
    let pinned =
        run_workload(&config, &specs, &options(vec![1]), &ProgressBar::hidden()).expect("runs");
    for (c, p) in copied.iter().zip(&pinned) {
        assert_eq!(c.workload, "ycsb-e/scan=10,asc");
        assert_eq!(p.workload, "ycsb-e/scan=10,asc,pinned");
        let per_op = |r: &forest_bench::report::ResultRow| {
            r.records_per_sec.expect("records") / r.median_ops_per_sec
        };
        assert!((per_op(c) - per_op(p)).abs() < 0.01, "{}", c.engine);
    }
}

#[test]
fn fixed_length_descending_scans_report_records_and_skip_peers_without_reverse_scans() {
    // Goal: ycsb-e with --scan-len 10 --scan-order desc runs on the engines and on the peers
    // with a reverse range scan of their own; its rows carry records per second (about 10
    // per scan: a scan from one of the 10 lowest keys finds fewer), the scan shape in the
    // workload label and in the JSON fields; the peers whose descending scan is a workaround
    // are skipped with a reason. Method: one run with tiny sizes; the scans are 95 % of ops.
    let _serial = serial();
    let specs =
        split_list("lockbtree,masstree,skiplist,btreemap-rwlock,scc-tree,masstree-rs,hashmap")
            .expect("ok");
    let mut config = tiny("ycsb-e");
    config.scan_len = Some(10);
    config.scan_order = ScanOrder::Desc;
    let rows =
        run_workload(&config, &specs, &options(vec![1]), &ProgressBar::hidden()).expect("runs");
    let engines: Vec<&str> = rows.iter().map(|r| r.engine.as_str()).collect();
    assert_eq!(
        engines,
        ["lockbtree", "masstree", "skiplist", "btreemap-rwlock"]
    );
    for r in &rows {
        assert_eq!(r.workload, "ycsb-e/scan=10,desc");
        assert_eq!(r.scan_len.as_deref(), Some("10"));
        assert_eq!(r.scan_order.as_deref(), Some("desc"));
        let per_op = r.records_per_sec.expect("scan rows count records") / r.median_ops_per_sec;
        assert!(
            (8.5..=10.0).contains(&per_op),
            "{}: {per_op} records per op",
            r.engine
        );
    }
    for (name, why) in [
        ("scc-tree", "scc"),
        ("masstree-rs", "masstree 0.9"),
        ("hashmap", "hash map"),
    ] {
        let spec = Spec::parse(name).expect("valid");
        let reason = skip_reason(&config, &spec, None).expect("skipped");
        assert!(reason.contains(why), "{name}: {reason}");
    }
    // Ascending scans measure every ordered peer; workloads without scans carry no records.
    config.scan_order = ScanOrder::Asc;
    let spec = Spec::parse("scc-tree").expect("valid");
    assert_eq!(skip_reason(&config, &spec, None), None);
    let rows = run_workload(
        &tiny("ycsb-c"),
        &specs[..1],
        &options(vec![1]),
        &ProgressBar::hidden(),
    )
    .expect("runs");
    assert_eq!(rows[0].records_per_sec, None);
    assert_eq!(rows[0].workload, "ycsb-c");
}

#[test]
fn memory_per_key_is_plausible() {
    // Goal: the load's measured heap is at least the raw key and value bytes and not absurdly
    // more. Method: 20k u64 keys with 100-byte values into btreemap-rwlock.
    let _serial = serial();
    let mut config = tiny("bztree-read-only");
    config.keys = 20_000;
    config.value_size = 100;
    let specs = vec![Spec::parse("btreemap-rwlock").expect("valid")];
    let rows =
        run_workload(&config, &specs, &options(vec![1]), &ProgressBar::hidden()).expect("runs");
    let per_key = rows[0].bytes_per_key.expect("measured");
    assert!((100.0..400.0).contains(&per_key), "{per_key} bytes per key");
}

#[test]
fn memory_of_an_engine_with_its_own_heap_is_counted() {
    // Goal: bztree, whose nodes live in a mapped heap of its own (outside the counting
    // allocator), does not report 0 bytes per key. Method: 20k keys with 100-byte values.
    let _serial = serial();
    let mut config = tiny("bztree-read-only");
    config.keys = 20_000;
    config.value_size = 100;
    let specs = vec![Spec::parse("bztree").expect("valid")];
    let rows =
        run_workload(&config, &specs, &options(vec![1]), &ProgressBar::hidden()).expect("runs");
    let per_key = rows[0].bytes_per_key.expect("measured");
    assert!(per_key >= 100.0, "{per_key} bytes per key");
}

#[test]
fn json_report_has_the_documented_fields() {
    // Goal: --json writes {"results":[...]} with every documented field, and --plot an SVG.
    // Method: run the CLI entry point with tiny sizes and parse the files.
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("forest-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let plot = dir.join("out.svg");
    let args = BenchArgs {
        engines: vec!["lockbtree,skiplist".to_string()],
        workload: Some("ycsb-c,masstree-rw1".to_string()),
        keys: Some(1_000),
        ops: Some(2_000),
        duration: None,
        threads: vec![1, 2],
        runs: 2,
        warmup_ops: None,
        dist: None,
        key_shape: None,
        value_size: None,
        scan_len: None,
        scan_order: None,
        scan_pinned: false,
        json: Some(json.clone()),
        plot: Some(plot.clone()),
        baseline: Some("skiplist".to_string()),
        seed: 5,
        durability: vec!["none".to_string()],
        dir: None,
        shards: None,
        checkpoint_every: None,
        memory_budget: Vec::new(),
        map_checkpoint_bytes: None,
        no_map_checkpoints: false,
    };
    forest_bench::run(args).expect("bench runs");
    let text = std::fs::read_to_string(&json).expect("json written");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let results = doc["results"].as_array().expect("results array");
    assert_eq!(
        results.len(),
        2 * 2 * 3,
        "2 engines x 2 thread counts x 3 rows"
    );
    for r in results {
        for field in [
            "engine",
            "workload",
            "threads",
            "keys",
            "ops",
            "runs_ops_per_sec",
            "median_ops_per_sec",
            "memory_bytes",
            "key_shape",
            "dist",
            "value_size",
            "bytes_per_key",
            "durability",
            "counters_per_op",
        ] {
            assert!(r.get(field).is_some(), "missing {field} in {r}");
        }
        assert_eq!(r["durability"], "none");
        assert_eq!(r["runs_ops_per_sec"].as_array().expect("array").len(), 2);
        assert!(r["median_ops_per_sec"].as_f64().expect("number") > 0.0);
        assert!(r["counters_per_op"].is_object());
    }
    let svg = std::fs::read_to_string(&plot).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_engine_spec_fails_before_running() {
    // Goal: a bad engine parameter is a clear error naming the parameter.
    let _serial = serial();
    let args = BenchArgs {
        engines: vec!["lockbtree:colour=red".to_string()],
        workload: Some("ycsb-c".to_string()),
        keys: Some(10),
        ops: Some(10),
        duration: None,
        threads: vec![1],
        runs: 1,
        warmup_ops: None,
        dist: None,
        key_shape: None,
        value_size: None,
        scan_len: None,
        scan_order: None,
        scan_pinned: false,
        json: None,
        plot: None,
        baseline: None,
        seed: 1,
        durability: vec!["none".to_string()],
        dir: None,
        shards: None,
        checkpoint_every: None,
        memory_budget: Vec::new(),
        map_checkpoint_bytes: None,
        no_map_checkpoints: false,
    };
    let err = forest_bench::run(args).expect_err("bad parameter");
    assert!(format!("{err:#}").contains("colour"), "{err:#}");
}

#[test]
fn durable_modes_run_through_the_store() {
    // Goal: durable-put, durable-batch and a mixed workload run through a store under sync,
    // group and periodic:10, with fsync and latency figures, and leave no directory behind.
    // Method: tiny sizes in a fresh --dir; check each row's durable fields and the dir after.
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("forest-bench-durable-{}", std::process::id()));
    let modes: Vec<_> = ["none", "sync", "group", "periodic:10"]
        .iter()
        .map(|m| parse_mode(m).expect("valid mode"))
        .collect();
    let options = RunOptions {
        threads: vec![1, 4],
        modes,
        dir: Some(dir.clone()),
        ..RunOptions::default()
    };
    let specs = split_list("lockbtree,skiplist").expect("valid");
    for name in ["durable-put", "durable-batch", "ycsb-a"] {
        let mut config = tiny(name);
        // Sync pays an fsync per write: keep it to a few hundred.
        config.ops = 400;
        config.keys = if name == "ycsb-a" { 500 } else { 0 };
        let rows = run_workload(&config, &specs, &options, &ProgressBar::hidden())
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        // lockbtree under 4 modes, skiplist under none only, at 2 thread counts.
        assert_eq!(rows.len(), 2 * (4 + 1), "{name}");
        for r in &rows {
            assert!(
                r.ops > 0 && r.median_ops_per_sec > 0.0,
                "{name} {}",
                r.label()
            );
            if r.durability == "none" {
                assert!(r.fsyncs_per_ack.is_none() && r.ack_p50_us.is_none());
                continue;
            }
            assert_eq!(r.engine, "lockbtree");
            let fsyncs = r.fsyncs_per_ack.expect("durable rows count fsyncs");
            let (p50, p99) = (r.ack_p50_us.expect("p50"), r.ack_p99_us.expect("p99"));
            assert!(p50 > 0.0 && p99 >= p50, "{name} {}: {p50} {p99}", r.label());
            match r.durability.as_str() {
                // sync forces every write's own record.
                "sync" if name == "durable-put" => {
                    assert!((0.99..=1.01).contains(&fsyncs), "{fsyncs}")
                }
                // No mode needs more than one fsync per write.
                _ => assert!(fsyncs <= 1.01, "{name} {}: {fsyncs}", r.label()),
            }
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("--dir was created")
        .collect();
    assert!(left.is_empty(), "store directories left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn durable_json_rows_carry_fsyncs_and_latency() {
    // Goal: --durability with a comma list reaches the JSON: a durable row has
    // "durability", "fsyncs_per_ack", "ack_p50_us", "ack_p99_us"; a "none" row has no
    // latency fields. Method: the CLI entry point with tiny sizes, --keys 0.
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("forest-bench-djson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let args = BenchArgs {
        engines: vec!["lockbtree".to_string()],
        workload: Some("durable-put".to_string()),
        keys: Some(0),
        ops: Some(500),
        duration: None,
        threads: vec![2],
        runs: 1,
        warmup_ops: None,
        dist: None,
        key_shape: None,
        value_size: None,
        scan_len: None,
        scan_order: None,
        scan_pinned: false,
        json: Some(json.clone()),
        plot: None,
        baseline: None,
        seed: 3,
        durability: vec!["none".to_string(), "group".to_string()],
        dir: Some(dir.join("stores")),
        shards: None,
        checkpoint_every: None,
        memory_budget: Vec::new(),
        map_checkpoint_bytes: None,
        no_map_checkpoints: false,
    };
    forest_bench::run(args).expect("bench runs");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["durability"], "none");
    assert!(results[0].get("ack_p50_us").is_none());
    assert_eq!(results[1]["durability"], "group");
    for field in ["fsyncs_per_ack", "ack_p50_us", "ack_p99_us"] {
        assert!(results[1][field].as_f64().is_some(), "missing {field}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn durable_mode_rejects_runs_without_a_store_engine() {
    // Goal: a durable mode with only peers, or a bad mode, is a clear error before running.
    let _serial = serial();
    let mut args = BenchArgs {
        engines: vec!["skiplist".to_string()],
        workload: Some("durable-put".to_string()),
        keys: Some(0),
        ops: Some(10),
        duration: None,
        threads: vec![1],
        runs: 1,
        warmup_ops: None,
        dist: None,
        key_shape: None,
        value_size: None,
        scan_len: None,
        scan_order: None,
        scan_pinned: false,
        json: None,
        plot: None,
        baseline: None,
        seed: 1,
        durability: vec!["sync".to_string()],
        dir: None,
        shards: None,
        checkpoint_every: None,
        memory_budget: Vec::new(),
        map_checkpoint_bytes: None,
        no_map_checkpoints: false,
    };
    let err = forest_bench::run(args.clone()).expect_err("no store engine");
    assert!(format!("{err:#}").contains("store engine"), "{err:#}");
    args.engines = vec!["lockbtree".to_string()];
    args.durability = vec!["fast".to_string()];
    let err = forest_bench::run(args).expect_err("bad mode");
    assert!(format!("{err:#}").contains("periodic:MS"), "{err:#}");
}

#[test]
fn memory_budget_runs_bwtree_twice_and_refuses_masstree() {
    // Goal: --memory-budget none,SIZE runs each durable mode once per budget (the rows say
    // which, and the budgeted row counts evictions), and is refused for other engines.
    // Method: bwtree under group with none and 16KiB on 3,000 keys; then masstree.
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("forest-bench-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let args = |engines: &str| BenchArgs {
        engines: vec![engines.to_string()],
        workload: Some("ycsb-a".to_string()),
        keys: Some(3_000),
        ops: Some(3_000),
        duration: None,
        threads: vec![1],
        runs: 1,
        warmup_ops: None,
        dist: None,
        key_shape: None,
        value_size: None,
        scan_len: None,
        scan_order: None,
        scan_pinned: false,
        json: Some(json.clone()),
        plot: None,
        baseline: None,
        seed: 5,
        durability: vec!["periodic:5".to_string()],
        dir: None,
        shards: None,
        checkpoint_every: None,
        memory_budget: vec!["none".to_string(), "16KiB".to_string()],
        map_checkpoint_bytes: None,
        no_map_checkpoints: false,
    };
    forest_bench::run(args("bwtree")).expect("bench runs");
    let text = std::fs::read_to_string(&json).expect("json written");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let results = doc["results"].as_array().expect("results array");
    let modes: Vec<&str> = results
        .iter()
        .map(|r| r["durability"].as_str().expect("mode"))
        .collect();
    assert_eq!(modes, ["periodic:5", "periodic:5,budget=16384"], "{text}");
    let evictions = results[1]["counters_per_op"]["evictions"].as_f64();
    assert!(evictions.is_some_and(|e| e > 0.0), "{text}");
    let e = forest_bench::run(args("masstree")).unwrap_err();
    assert!(format!("{e:#}").contains("needs engine bwtree"), "{e:#}");
    let _ = std::fs::remove_dir_all(&dir);
}
