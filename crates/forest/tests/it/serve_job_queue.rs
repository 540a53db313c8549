//! A real job queue across a server crash (issue 19 "Tests": "a real job queue library driving
//! the server ... enqueuing and completing jobs across a server restart"): RQ (python-rq,
//! installed from PyPI by `.ci/run`) through redis-py against `forest serve`.
//!
//! The steps are `tests/job_queue/forest_rq.py`'s. An enqueuer adds jobs one at a time and
//! reports each acknowledgement; after a random number of them the test SIGKILLs the server
//! (one enqueue is then in flight), restarts it on the same directory and enqueues a second
//! batch. An RQ worker in burst mode runs the queue dry; the server is SIGKILLed and restarted
//! once more, and then every acknowledged job must be finished with its result stored, the
//! queue and the failed-job registry empty, and the run log (each job appends its id) must
//! name every acknowledged job exactly once, the one in flight at most once, and nothing else.
//!
//! Without python3 and RQ the test prints why and passes, unless FOREST_REQUIRE_REDIS_TOOLS=1
//! (CI sets it), which makes that a failure.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{data_dir, env_flag, Server};
use rand::Rng;

/// Set to 1 to fail, not skip, when python3 or RQ is missing.
const REQUIRE_ENV: &str = "FOREST_REQUIRE_REDIS_TOOLS";
/// How long one step of the script may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);
/// Jobs the first enqueuer would add if the server lived; it is killed well before.
const FIRST_BATCH_MAX: usize = 400;
const SECOND_BATCH: usize = 40;

fn script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/job_queue")
}

/// True if python3 imports rq; otherwise prints the skip (or panics under [`REQUIRE_ENV`]).
fn have_rq() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import rq, redis"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            !env_flag(REQUIRE_ENV),
            "python3 cannot import rq and redis, and {REQUIRE_ENV} is set (python3 -m pip install rq)"
        );
        println!("SKIP: python3 cannot import rq and redis (python3 -m pip install rq; {REQUIRE_ENV}=1 makes this a failure)");
    }
    found
}

/// `python3 forest_rq.py step HOST PORT args...`, with the run log's path in its environment.
fn script(step: &str, server: &Server, args: &[String], log: &Path) -> Command {
    let mut cmd = Command::new("python3");
    cmd.current_dir(script_dir())
        .env("PYTHONPATH", script_dir())
        .env("FOREST_RQ_LOG", log)
        .arg("forest_rq.py")
        .arg(step)
        .arg(server.addr.ip().to_string())
        .arg(server.addr.port().to_string())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs a step to its end, failing after [`STEP_TIMEOUT`].
fn run_step(step: &str, server: &Server, args: &[String], log: &Path) -> Output {
    let mut child = script(step, server, args, log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn python3 forest_rq.py {step}: {e}"));
    let began = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if began.elapsed() > STEP_TIMEOUT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "forest_rq.py {step} ran over {STEP_TIMEOUT:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}; stdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What an enqueuer reported: the acknowledged ids, and the one sent but not acknowledged.
#[derive(Default)]
struct Enqueued {
    acked: Vec<String>,
    in_flight: Option<String>,
}

impl Enqueued {
    fn line(&mut self, line: &str) {
        if let Some(id) = line.strip_prefix("sent ") {
            self.in_flight = Some(id.to_string());
        } else if let Some(id) = line.strip_prefix("acked ") {
            assert_eq!(self.in_flight.as_deref(), Some(id), "acked a job not sent");
            self.acked.push(id.to_string());
            self.in_flight = None;
        }
    }
}

/// Enqueues jobs `first..` and SIGKILLs the server once `kill_after` were acknowledged.
fn enqueue_then_kill(server: &mut Server, first: usize, kill_after: usize, log: &Path) -> Enqueued {
    let args = [first.to_string(), FIRST_BATCH_MAX.to_string()];
    let mut child = script("enqueue", server, &args, log)
        .spawn()
        .expect("spawn python3 forest_rq.py enqueue");
    let stdout = child.stdout.take().expect("stdout");
    let mut seen = Enqueued::default();
    let mut lines = BufReader::new(stdout).lines();
    let began = Instant::now();
    for line in lines.by_ref() {
        let line = line.expect("enqueuer output");
        seen.line(&line);
        if seen.acked.len() == kill_after {
            server.kill();
            break;
        }
        assert!(began.elapsed() < STEP_TIMEOUT, "the enqueuer is too slow");
    }
    for line in lines {
        seen.line(&line.expect("enqueuer output"));
    }
    let out = child.wait_with_output().expect("enqueuer");
    // One more may be acknowledged: its reply can arrive between the line read and the kill.
    assert!(
        seen.acked.len() >= kill_after,
        "the enqueuer stopped early; {}",
        show(&out)
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "the enqueuer should stop on the lost connection; {}",
        show(&out)
    );
    seen
}

// Goal: RQ enqueues and completes jobs across SIGKILLs of forest serve: every acknowledged job
// runs exactly once and its result survives; nothing runs twice. Method: module doc.
#[test]
fn rq_jobs_run_once_across_sigkill() {
    if !have_rq() {
        return;
    }
    let (tmp, dir) = data_dir();
    let log = tmp.path().join("runs.log");
    let kill_after = rand::rng().random_range(20..120);
    println!("first batch: SIGKILL after {kill_after} acknowledged enqueues");

    let mut server = Server::start(&dir, &[]);
    let first = enqueue_then_kill(&mut server, 0, kill_after, &log);
    let mut server = Server::start(&dir, &[]);
    let second_from = 100_000;
    let out = run_step(
        "enqueue",
        &server,
        &[second_from.to_string(), SECOND_BATCH.to_string()],
        &log,
    );
    assert!(out.status.success(), "second batch: {}", show(&out));
    let mut second = Enqueued::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        second.line(line);
    }
    assert_eq!(
        second.acked.len(),
        SECOND_BATCH,
        "second batch: {}",
        show(&out)
    );

    let out = run_step("work", &server, &[], &log);
    assert!(out.status.success(), "worker: {}", show(&out));
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());

    server.kill();
    let server = Server::start(&dir, &[]);
    let acked: Vec<String> = first.acked.iter().chain(&second.acked).cloned().collect();
    let out = run_step("check", &server, &acked, &log);
    assert!(out.status.success(), "check: {}", show(&out));
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for id in text.lines() {
        *runs.entry(id).or_default() += 1;
    }
    for id in &acked {
        assert_eq!(runs.remove(id.as_str()), Some(1), "job {id} runs");
    }
    if let Some(id) = &first.in_flight {
        let n = runs.remove(id.as_str()).unwrap_or(0);
        assert!(n <= 1, "the unacknowledged job {id} ran {n} times");
        println!("the job in flight at the kill ({id}) ran {n} times");
    }
    assert!(runs.is_empty(), "jobs never enqueued ran: {runs:?}");
}
