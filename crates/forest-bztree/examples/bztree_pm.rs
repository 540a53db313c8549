//! Two quick measurements of the persistent BzTree while developing (not the benchmark
//! harness, `forest bench`):
//!
//! - `recovery DIR KEYS OPENS [DESCRIPTORS]`: builds a `bztree-pm` file of KEYS 8-byte keys in DIR, closes
//!   it, then times `BzTree::open` of it OPENS times (the recovery scans the descriptor pool
//!   only, below each partition's high-water mark, BzTree §2.3.2, §6.3; the paper reports
//!   145 us). The first open is the one a restarted process pays; later ones reuse memory the
//!   earlier opens' allocations left behind. Prints each open's wall time and its
//!   `recovery_micros`, then the medians.
//! - `killed DIR KEYS RUNS`: builds a file of KEYS keys, then RUNS times starts a child
//!   process that opens it and upserts random keys on 2 threads, kills it with SIGKILL after
//!   300 ms, and times the open that recovers the file (the issue 16 bar: recovery after
//!   SIGKILL), then the finishing of what it left for after open (forest-pmwcas
//!   `recovery.rs`; otherwise the first write does it). Prints each open's figures and phases
//!   (`OpenPhases`, `RecoveryReport`), then the medians.
//! - `overhead DIR KEYS OPS WRITE_PERCENT [VALUE_BYTES]`: loads KEYS keys with VALUE_BYTES-byte
//!   values (8; over the inline limit, 256 with 1 KiB nodes, a value is a block freed by
//!   `FREE-ONE` when replaced) into `bztree` and into `bztree-pm`
//!   (file in DIR, `clwb`), runs OPS uniform reads and upserts of existing keys on one thread,
//!   and prints the CPU time per op of each (from `/proc/thread-self/schedstat`, so time the
//!   thread spent descheduled on a shared machine is not counted) and their ratio.
//!
//! `cargo run --release -p forest-bztree --example bztree_pm -- recovery /dev/shm/t 1000000 5`

use std::path::Path;
use std::time::Instant;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::Clwb;

/// A bijection of u64 (splitmix64's finalizer): distinct, scattered keys.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn key(i: u64) -> [u8; 8] {
    mix(i).to_be_bytes()
}

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn config(heap_mib: usize) -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: heap_mib << 20,
        ..BzTreeConfig::default()
    }
}

fn config_with(heap_mib: usize, descriptors: usize) -> BzTreeConfig {
    BzTreeConfig {
        descriptor_count: descriptors,
        ..config(heap_mib)
    }
}

fn load(tree: &dyn Index, keys: u64) {
    for i in 0..keys {
        tree.upsert(&key(i), &i.to_le_bytes()).expect("upsert");
    }
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn recovery(dir: &Path, keys: u64, opens: usize, descriptors: usize) {
    let path = dir.join(format!("bztree-pm-recovery-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let heap_mib = (keys as usize / 4000).max(64);
    {
        let tree = BzTree::open(&path, config_with(heap_mib, descriptors), Clwb::detect())
            .expect("create");
        load(&tree, keys);
    }
    let (mut wall, mut recovery) = (Vec::new(), Vec::new());
    for run in 0..opens {
        let started = Instant::now();
        let tree =
            BzTree::open(&path, config_with(heap_mib, descriptors), Clwb::detect()).expect("open");
        let us = started.elapsed().as_micros() as u64;
        let report = tree.open_report().clone();
        let mut out = Vec::new();
        assert!(tree.get(&key(keys / 2), &mut out), "a loaded key is found");
        drop(tree);
        println!(
            "open {run}: {us} us wall, recovery_micros {}, in flight {}, descriptors scanned {}",
            report.recovery_micros,
            report.pool.descriptors_in_flight,
            report.pool.descriptors_scanned
        );
        wall.push(us);
        recovery.push(report.recovery_micros);
    }
    println!(
        "keys {keys}, descriptors {descriptors}: median open {} us, median recovery_micros {} us",
        median(&mut wall),
        median(&mut recovery)
    );
    let _ = std::fs::remove_file(&path);
}

/// The `killed` child: upserts random existing keys on 2 threads until it is killed.
fn write_until_killed(path: &Path, keys: u64) {
    let heap_mib = (keys as usize / 4000).max(64);
    let tree = BzTree::open(path, config(heap_mib), Clwb::detect()).expect("child open");
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let tree = &tree;
            s.spawn(move || {
                let mut x = t + 1;
                loop {
                    x = mix(x);
                    tree.upsert(&key(x % keys), &x.to_le_bytes())
                        .expect("upsert");
                }
            });
        }
    });
}

fn killed(dir: &Path, keys: u64, runs: usize) {
    let path = dir.join(format!("bztree-pm-killed-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let heap_mib = (keys as usize / 4000).max(64);
    {
        let tree = BzTree::open(&path, config(heap_mib), Clwb::detect()).expect("create");
        load(&tree, keys);
    }
    let exe = std::env::current_exe().expect("own path");
    let (mut wall, mut recovery, mut phases, mut finish) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let mut child = std::process::Command::new(&exe)
            .arg("write-until-killed")
            .arg(&path)
            .arg(keys.to_string())
            .spawn()
            .expect("spawn the writer");
        std::thread::sleep(std::time::Duration::from_millis(300));
        child.kill().expect("SIGKILL the writer");
        child.wait().expect("reap the writer");
        let started = Instant::now();
        let tree = BzTree::open(&path, config(heap_mib), Clwb::detect()).expect("open");
        let us = started.elapsed().as_micros() as u64;
        let report = tree.open_report().clone();
        // What recovery left for after open (the first write would do it).
        let finishing = Instant::now();
        let finished = tree.finish_recovery();
        let finish_us = finishing.elapsed().as_micros() as u64;
        let mut out = Vec::new();
        assert!(tree.get(&key(keys / 2), &mut out), "a loaded key is found");
        drop(tree);
        println!(
            "killed {run}: {us} us wall, recovery_micros {}, in flight {}, descriptors scanned {}, words rolled {}, values freed {}; left for after open {}, finished in {finish_us} us (words rolled {}, values freed {})",
            report.recovery_micros,
            report.pool.descriptors_in_flight,
            report.pool.descriptors_scanned,
            report.pool.words_rolled_forward + report.pool.words_rolled_back,
            report.pool.values_freed,
            report.pool.descriptors_left,
            finished.words_rolled_forward + finished.words_rolled_back,
            finished.values_freed
        );
        finish.push(finish_us);
        let b = breakdown(&report);
        println!("  {}", show(&b));
        phases.push(b);
        wall.push(us);
        recovery.push(report.recovery_micros);
    }
    println!(
        "keys {keys}, after SIGKILL: median open {} us, median recovery_micros {} us, median finish after open {} us",
        median(&mut wall),
        median(&mut recovery),
        median(&mut finish)
    );
    let medians: Vec<(&str, u64)> = (0..phases[0].len())
        .map(|i| {
            let mut v: Vec<u64> = phases.iter().map(|b| b[i].1).collect();
            (phases[0][i].0, median(&mut v))
        })
        .collect();
    println!("  medians: {}", show(&medians));
    let _ = std::fs::remove_file(&path);
}

/// An open's phases in microseconds (`OpenPhases`, `RecoveryReport`): the mapping, the header
/// checks, the allocator's lists, the pool (of it: the descriptor scan, of that the words
/// restored and the policies applied, and the final fence), the epoch bump.
fn breakdown(report: &forest_bztree::OpenReport) -> Vec<(&'static str, u64)> {
    let (p, q) = (&report.phases, &report.pool);
    vec![
        ("map", p.map_nanos / 1000),
        ("headers", p.headers_nanos / 1000),
        ("allocator", p.allocator_nanos / 1000),
        ("pool", p.pool_nanos / 1000),
        ("scan", q.scan_nanos / 1000),
        ("words", q.words_nanos / 1000),
        ("policies", q.policies_nanos / 1000),
        ("fence", q.fence_nanos / 1000),
        ("epoch", p.epoch_nanos / 1000),
    ]
}

fn show(b: &[(&str, u64)]) -> String {
    b.iter()
        .map(|(name, us)| format!("{name} {us}"))
        .collect::<Vec<_>>()
        .join(", ")
        + " (us)"
}

/// A value of `bytes` bytes (at least 8) for `x`.
fn value(x: u64, bytes: usize) -> Vec<u8> {
    let mut v = x.to_le_bytes().repeat(bytes.div_ceil(8).max(1));
    v.truncate(bytes.max(8));
    v
}

fn load_values(tree: &dyn Index, keys: u64, value_bytes: usize) {
    for i in 0..keys {
        tree.upsert(&key(i), &value(i, value_bytes))
            .expect("upsert");
    }
}

fn run_mix(tree: &dyn Index, keys: u64, ops: u64, write_percent: u64, value_bytes: usize) -> f64 {
    let mut out = Vec::new();
    let mut x = 42u64;
    let started = cpu_ns();
    for _ in 0..ops {
        x = mix(x);
        let i = x % keys;
        if (x >> 40) % 100 < write_percent {
            tree.upsert(&key(i), &value(x, value_bytes))
                .expect("upsert");
        } else {
            assert!(tree.get(&key(i), &mut out));
        }
    }
    (cpu_ns() - started) as f64 / ops as f64
}

fn overhead(dir: &Path, keys: u64, ops: u64, write_percent: u64, value_bytes: usize) {
    let heap_mib = ((keys as usize * (value_bytes + 64) * 4) >> 20).max(64);
    let volatile = BzTree::with_config(config(heap_mib)).expect("volatile tree");
    load_values(&volatile, keys, value_bytes);
    let v = run_mix(&volatile, keys, ops, write_percent, value_bytes);
    drop(volatile);
    let path = dir.join(format!("bztree-pm-overhead-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pm = BzTree::open(&path, config(heap_mib), Clwb::detect()).expect("pm tree");
    load_values(&pm, keys, value_bytes);
    let p = run_mix(&pm, keys, ops, write_percent, value_bytes);
    drop(pm);
    let _ = std::fs::remove_file(&path);
    println!(
        "{write_percent}% upserts, {keys} keys, {value_bytes}-byte values, {ops} ops: bztree {v:.0} ns/op, bztree-pm {p:.0} ns/op CPU, ratio {:.2}x",
        v / p
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let dir = Path::new(args.get(1).map_or("/tmp", String::as_str)).to_path_buf();
    // A missing DIR is made here rather than failing the first open with "NotFound".
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("bztree_pm: cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    match args.first().map(String::as_str) {
        Some("recovery") => recovery(
            &dir,
            num(2, 1_000_000),
            num(3, 5) as usize,
            num(4, BzTreeConfig::default().descriptor_count as u64) as usize,
        ),
        Some("killed") => killed(&dir, num(2, 1_000_000), num(3, 5) as usize),
        Some("write-until-killed") => write_until_killed(&dir, num(2, 1_000_000)),
        Some("overhead") => overhead(
            &dir,
            num(2, 200_000),
            num(3, 1_000_000),
            num(4, 50),
            num(5, 8) as usize,
        ),
        _ => eprintln!(
            "usage: bztree_pm recovery DIR KEYS OPENS [DESCRIPTORS] | killed DIR KEYS RUNS | overhead DIR KEYS OPS WRITE_PERCENT [VALUE_BYTES]"
        ),
    }
}
