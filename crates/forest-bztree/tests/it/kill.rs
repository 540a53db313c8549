//! SIGKILL (issue 16 "SIGKILL tests", §6): the test binary re-runs itself as a writer child on
//! a bztree-pm file (clwb: every store reaches the page cache, which a killed process keeps);
//! the child prints each acknowledged operation, the parent kills it with SIGKILL at a random
//! moment, reopens the file (allocator, then descriptor pool recovery, then a new epoch), and
//! checks that every acknowledged operation is there (the one in flight may or may not be),
//! that the tree's invariants hold and that every chunk of the heap is reachable or free
//! (`BzTree::audit`). No WAL: the file is the data. With feature `pause-points`, the child
//! also dies (abort) at named steps: each PMwCAS step, between reserve and completion, between
//! activation and install, between an SMO's preparation and install.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{apply, key, value, Op};
use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::Clwb;
use rand::{Rng, SeedableRng};

const CHILD_PATH: &str = "FOREST_BZTREE_KILL_FILE";
const CHILD_START: &str = "FOREST_BZTREE_KILL_START";
const CHILD_POINT: &str = "FOREST_BZTREE_KILL_POINT";
const CHILD_POINT_HITS: &str = "FOREST_BZTREE_KILL_HITS";
const CYCLES: usize = 24;
const KEYS: u64 = 2000;

fn config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 256 << 20,
        descriptor_count: 1024,
        inline_value_max: 32,
        ..BzTreeConfig::with_node_size(256)
    }
}

fn op(i: u64) -> Op {
    common::op(0, i, KEYS)
}

fn run(tree: &BzTree<Clwb>, op: Op) {
    match op {
        Op::Upsert(k, v) => tree.upsert(&key(k), &value(v)).unwrap(),
        Op::Remove(k) => {
            tree.remove(&key(k));
        }
    }
}

/// The child: runs operations from `start` on, printing `ack <i>` after each returns.
/// Opens the tree, waiting (bounded) for its lock: the other test's thread may be forking
/// its own child just now, and until that process execs it shares the parent's descriptors,
/// so the lock of a file the parent just closed may still be held for a moment.
fn open_waiting(path: &Path) -> BzTree<Clwb> {
    let mut tries = 0;
    loop {
        match BzTree::open(path, config(), Clwb::detect()) {
            Ok(tree) => return tree,
            Err(forest_core::Error::Io { op: "lock", .. }) if tries < 500 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
}

fn child(path: &Path, start: u64) -> ! {
    let tree = open_waiting(path);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The test harness's "test ... " line has no newline yet.
    writeln!(out).unwrap();
    for i in start.. {
        run(&tree, op(i));
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
    unreachable!("the parent kills the child")
}

/// Whether the tree holds exactly `model`.
fn matches(tree: &BzTree<Clwb>, model: &BTreeMap<u64, u64>) -> Result<(), String> {
    let mut out = Vec::new();
    for k in 0..KEYS {
        let found = tree.get(&key(k), &mut out).then(|| out.clone());
        let expected = model.get(&k).map(|&v| value(v));
        if found != expected {
            return Err(format!("key {k}: found {found:?}, expected {expected:?}"));
        }
    }
    Ok(())
}

/// The parent's view across cycles: the model of every applied operation and the next one.
struct Run {
    path: std::path::PathBuf,
    model: BTreeMap<u64, u64>,
    next: u64,
    in_flight_applied: usize,
    recovery_micros: Vec<u64>,
    /// Children that died at their pause point (abort), not by the parent's SIGKILL.
    died_at_point: usize,
}

/// How a cycle's child dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// SIGKILL from the parent this long after the first acknowledged write.
    Timer(u64),
    /// `abort` at the `n`-th time the child reaches the named pause point (SIGKILL from the
    /// parent after `Death::Timer`'s bound if it never does).
    #[allow(dead_code)]
    Point(&'static str, u64),
}

impl Run {
    fn new(path: std::path::PathBuf) -> Self {
        drop(open_waiting(&path));
        Self {
            path,
            model: BTreeMap::new(),
            next: 0,
            in_flight_applied: 0,
            recovery_micros: Vec::new(),
            died_at_point: 0,
        }
    }

    /// One child, its death, the reopen and the checks.
    fn cycle(&mut self, test: &str, cycle: usize, death: Death) {
        // The test's path in this binary (`kill::<test>`), which `--exact` wants.
        let path = format!("{}::{test}", module_path!().split_once("::").unwrap().1);
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([path.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_PATH, &self.path)
            .env(CHILD_START, self.next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let wait_micros = match death {
            Death::Timer(micros) => micros,
            Death::Point(name, n) => {
                command
                    .env(CHILD_POINT, name)
                    .env(CHILD_POINT_HITS, n.to_string());
                1_500_000
            }
        };
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(i) = line.strip_prefix("ack ") {
                    if acks.is_empty() {
                        let _ = first_tx.send(());
                    }
                    acks.push(i.parse::<u64>().unwrap());
                }
            }
            acks
        });
        let started = first_rx.recv_timeout(Duration::from_secs(30)).is_ok();
        if started {
            let deadline = std::time::Instant::now() + Duration::from_micros(wait_micros);
            while std::time::Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        let acks = reader.join().unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let expected_signals: &[i32] = match death {
            Death::Timer(_) => &[9],
            Death::Point(..) => &[6, 9],
        };
        assert!(
            status
                .signal()
                .is_some_and(|s| expected_signals.contains(&s)),
            "cycle {cycle} ({death:?}): the child ended otherwise ({status}): {stderr}"
        );
        if status.signal() == Some(6) {
            self.died_at_point += 1;
        }
        assert!(
            started || matches!(death, Death::Point(..)),
            "cycle {cycle}: no write acknowledged: {stderr}"
        );
        for (n, &i) in acks.iter().enumerate() {
            assert_eq!(i, self.next + n as u64, "cycle {cycle}: acks in order");
        }
        for &i in &acks {
            apply(&mut self.model, op(i));
        }
        let in_flight = self.next + acks.len() as u64;
        let tree = open_waiting(&self.path);
        self.recovery_micros
            .push(tree.open_report().recovery_micros);
        let audit = tree
            .audit()
            .unwrap_or_else(|e| panic!("cycle {cycle} ({death:?}): audit after reopen: {e}"));
        let mut with_in_flight = self.model.clone();
        apply(&mut with_in_flight, op(in_flight));
        if let Err(without) = matches(&tree, &self.model) {
            if let Err(with) = matches(&tree, &with_in_flight) {
                panic!(
                    "cycle {cycle} ({death:?}): after {in_flight} acked operations: {without}; \
                     with the one in flight ({:?}): {with}",
                    op(in_flight)
                );
            }
            self.model = with_in_flight;
            self.in_flight_applied += 1;
        }
        assert_eq!(audit.keys, self.model.len() as u64, "cycle {cycle}");
        self.next = in_flight + 1;
    }

    fn report(&mut self, what: &str) {
        self.recovery_micros.sort_unstable();
        let n = self.recovery_micros.len();
        eprintln!(
            "{what}: {n} cycles ({} died at their pause point), {} operations, the one in \
             flight applied in {}; recovery median {} us (max {} us)",
            self.died_at_point,
            self.next,
            self.in_flight_applied,
            self.recovery_micros[n / 2],
            self.recovery_micros[n - 1]
        );
    }
}

/// Runs the child if this process is one (it never returns then).
fn maybe_child() {
    let Ok(path) = std::env::var(CHILD_PATH) else {
        return;
    };
    let start = std::env::var(CHILD_START).unwrap().parse().unwrap();
    #[cfg(feature = "pause-points")]
    if let Ok(point) = std::env::var(CHILD_POINT) {
        let hits: u64 = std::env::var(CHILD_POINT_HITS).unwrap().parse().unwrap();
        let seen = std::sync::atomic::AtomicU64::new(0);
        forest_core::pause::set_pause_hook(Some(std::sync::Arc::new(move |name| {
            if name == point && seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == hits
            {
                std::process::abort();
            }
        })));
    }
    child(Path::new(&path), start);
}

// Goal: SIGKILL at any moment loses no acknowledged write and leaves a sound tree and heap.
// Method: 24 cycles of child writer, kill at a random time, reopen, audit, compare with the
// model of the acknowledged operations (plus possibly the one in flight).
#[test]
fn sigkill_cycles() {
    maybe_child();
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::new(dir.path().join("kill.pool"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0016);
    for cycle in 0..CYCLES {
        run.cycle(
            "sigkill_cycles",
            cycle,
            Death::Timer(rng.random_range(2_000..80_000)),
        );
    }
    run.report("sigkill");
    assert!(run.next > CYCLES as u64 * 2, "the children made progress");
}

/// Pause points a child dies at (forest-pmwcas's at each PMwCAS step, the tree's between
/// reserve and completion and between SMO preparation and install), with the most hits to
/// wait for (frequent points die later).
#[cfg(feature = "pause-points")]
const POINTS: &[(&str, u64)] = &[
    ("pmwcas:activation-persisted", 40),
    ("pmwcas:descriptor-persisted", 400),
    ("pmwcas:rdcss-installed", 400),
    ("pmwcas:phase1-persisted", 400),
    ("pmwcas:status-decided", 400),
    ("pmwcas:status-persisted", 400),
    ("pmwcas:phase2-word-installed", 400),
    ("pmwcas:phase2-done", 400),
    ("pmwcas:policies-applied", 400),
    ("pmwcas:released", 400),
    ("insert:reserved", 200),
    ("consolidate:prepared", 8),
    ("split:prepared", 8),
    ("merge:prepared", 3),
];

// Goal: a crash at each named step (every PMwCAS step, between reserve and completion,
// between activation and install, between SMO preparation and install) loses no acknowledged
// write and leaves a sound tree and heap.
// Method: as `sigkill_cycles`, the child aborting at the n-th hit of one pause point, two
// cycles per point.
#[cfg(feature = "pause-points")]
#[test]
fn named_kill_points() {
    maybe_child();
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::new(dir.path().join("points.pool"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0017);
    let mut cycle = 0;
    for &(point, most) in POINTS {
        for _ in 0..2 {
            let hits = rng.random_range(1..=most);
            run.cycle("named_kill_points", cycle, Death::Point(point, hits));
            cycle += 1;
        }
    }
    run.report("named kill points");
    assert_eq!(
        run.died_at_point, cycle,
        "every child reached its pause point before the parent's timeout"
    );
}
