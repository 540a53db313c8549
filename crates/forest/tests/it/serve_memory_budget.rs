//! `forest serve --memory-budget` (issue 17, increment 4): bwtree on its own LSS under a
//! memory budget; refused for other engines.

use std::process::Command;

use redis::Commands;

use crate::common::{data_dir, Server};

fn serve_fails(flags: &[&str]) -> String {
    let (_tmp, dir) = data_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_forest"))
        .args(["serve", "--port", "0", "--dir"])
        .arg(&dir)
        .args(flags)
        .output()
        .expect("run the forest binary");
    assert!(!out.status.success(), "forest serve {flags:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// Goal: a budget for an engine that cannot evict, or one that is no byte count, is refused
// with a message naming the problem. Method: start forest serve with each.
#[test]
fn memory_budget_is_refused_for_masstree_and_bad_sizes() {
    let masstree = serve_fails(&["--engine", "masstree", "--memory-budget", "64MiB"]);
    assert!(
        masstree.contains("needs engine bwtree") && masstree.contains("masstree"),
        "{masstree}"
    );
    let bad = serve_fails(&["--engine", "bwtree", "--memory-budget", "64XB"]);
    assert!(
        bad.contains("--memory-budget") && bad.contains("64XB"),
        "{bad}"
    );
}

// Goal: a server on bwtree with a small budget evicts, reads everything back, reports its
// memory in INFO, and keeps everything across a restart (the LSS discarded, the tree rebuilt
// from checkpoint + log). Method: 3000 SETs of 200 bytes under a 32 KiB budget, INFO
// memory, GETs, SHUTDOWN, restart, GETs.
#[test]
fn serve_with_a_memory_budget_evicts_and_reads_back() {
    let (_tmp, dir) = data_dir();
    let flags = ["--engine", "bwtree", "--memory-budget", "32KiB"];
    let value = |i: u32| format!("{i:0>200}");
    let mut server = Server::start(&dir, &flags);
    let mut con = server.client();
    let mut pipe = redis::pipe();
    for i in 0..3000u32 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(value(i)).ignore();
    }
    let () = pipe.query(&mut con).expect("SETs");
    let mut info = String::new();
    for _ in 0..400 {
        info = redis::cmd("INFO")
            .arg("memory")
            .query(&mut con)
            .expect("INFO");
        if !info.contains("forest_evictions:0\r\n") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        info.contains("forest_memory_budget_bytes:32768\r\n"),
        "{info}"
    );
    assert!(info.contains("maxmemory:32768\r\n"), "{info}");
    assert!(
        !info.contains("forest_evictions:0\r\n"),
        "nothing evicted: {info}"
    );
    for field in [
        "forest_resident_bytes:",
        "forest_loads:",
        "forest_lss_bytes_written:",
    ] {
        assert!(info.contains(field), "{field} missing: {info}");
    }
    for i in (0..3000u32).step_by(13) {
        let got: String = con.get(format!("k{i}")).expect("GET");
        assert_eq!(got, value(i));
    }
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
    assert!(server.wait_exit().success());
    let server = Server::start(&dir, &flags);
    let mut con = server.client();
    for i in (0..3000u32).step_by(7) {
        let got: String = con.get(format!("k{i}")).expect("GET after restart");
        assert_eq!(got, value(i));
    }
    assert!(dir.join("lss").is_dir());
}

// Goal: the map checkpoint flags refuse a schedule that is no positive byte count and the two
// flags together, naming the flag. Method: start forest serve with each.
#[test]
fn map_checkpoint_flags_are_refused_when_bad() {
    let budget = ["--engine", "bwtree", "--memory-budget", "64MiB"];
    let zero = serve_fails(&[&budget[..], &["--map-checkpoint-bytes", "0"]].concat());
    assert!(zero.contains("--map-checkpoint-bytes"), "{zero}");
    let both = serve_fails(
        &[
            &budget[..],
            &["--map-checkpoint-bytes", "1MiB", "--no-map-checkpoints"],
        ]
        .concat(),
    );
    assert!(both.contains("--no-map-checkpoints"), "{both}");
}

// Review rev-mapdef: `--map-checkpoint-bytes` (or `--no-map-checkpoints`) without
// `--memory-budget` means nothing (map checkpoints exist only on a budget), so it should be
// refused naming the flag, as a budget for a wrong engine is. Method: start forest serve
// with it and no budget; a serve still running after 20 s accepted it (killed, test fails).
#[test]
fn map_checkpoint_flags_without_a_budget_are_refused() {
    for flags in [
        &["--engine", "bwtree", "--map-checkpoint-bytes", "1MiB"][..],
        &["--no-map-checkpoints"][..],
    ] {
        let (_tmp, dir) = data_dir();
        let mut child = Command::new(env!("CARGO_BIN_EXE_forest"))
            .args(["serve", "--port", "0", "--dir"])
            .arg(&dir)
            .args(flags)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run the forest binary");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let Some(status) = status else {
            child.kill().expect("kill");
            child.wait().expect("reap");
            panic!("forest serve {flags:?} without --memory-budget was accepted (still serving)");
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("stderr");
        assert!(!status.success(), "{flags:?}: {stderr}");
        assert!(stderr.contains("memory-budget"), "{flags:?}: {stderr}");
    }
}
