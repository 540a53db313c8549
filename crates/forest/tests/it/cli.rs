//! The store commands of the `forest` binary, run as a user runs them (issue 5 "CLI").

use std::path::Path;
use std::process::{Command, Output};

fn forest(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forest"))
        .args(args)
        .output()
        .expect("run the forest binary")
}

/// Runs `forest args` and returns its stdout; panics unless it exits with 0.
fn ok(args: &[&str]) -> String {
    let out = forest(args);
    assert!(
        out.status.success(),
        "forest {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `forest args`, expects exit status 1 and returns stderr (one line).
fn fails(args: &[&str]) -> String {
    let out = forest(args);
    assert_eq!(out.status.code(), Some(1), "forest {args:?} should fail");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    stderr
}

fn path(dir: &Path) -> &str {
    dir.to_str().expect("utf-8 temp path")
}

// Goal: the store commands work together on one directory, with every engine. Method: load,
// put, get, scan (bounds, reverse, limit, hex), del, checkpoint, check, comparing output.
#[test]
fn load_put_get_scan_del_checkpoint_check() {
    for engine in forest_store::engine_names() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("store");
        let dir = path(&dir);
        let loaded = ok(&[
            "load",
            dir,
            "--engine",
            engine,
            "--keys",
            "3000",
            "--value-size",
            "8",
        ]);
        assert!(loaded.starts_with("loaded 3000 keys"), "{loaded}");

        ok(&["put", dir, "--engine", engine, "hello", "world"]);
        assert_eq!(ok(&["get", dir, "--engine", engine, "hello"]), "world\n");
        assert_eq!(ok(&["get", dir, "key-000000000042"]), "00000000\n");
        assert_eq!(ok(&["get", dir, "--hex", "68656c6c6f"]), "776f726c64\n");
        let err = fails(&["get", dir, "nothing"]);
        assert!(err.contains("not found") && err.contains(dir), "{err}");

        let scan = ok(&["scan", dir, "--from", "key-000000002998", "--to", "l"]);
        assert_eq!(
            scan,
            "key-000000002998\t00000000\nkey-000000002999\t00000000\n"
        );
        let scan = ok(&["scan", dir, "--reverse", "--limit", "2"]);
        assert_eq!(
            scan,
            "key-000000002999\t00000000\nkey-000000002998\t00000000\n"
        );
        assert_eq!(ok(&["scan", dir, "--limit", "1"]), "hello\tworld\n");
        assert_eq!(ok(&["scan", dir]).lines().count(), 3001);
        assert_eq!(ok(&["scan", dir, "--limit", "0"]), "");

        assert_eq!(ok(&["del", dir, "hello"]), "removed\n");
        assert_eq!(ok(&["del", dir, "hello"]), "absent\n");
        fails(&["get", dir, "hello"]);

        let cp = ok(&["checkpoint", dir, "--engine", engine]);
        assert!(cp.contains("3000 entries"), "{cp}");
        let report = ok(&["check", dir, "--engine", engine]);
        assert!(report.contains("keys recovered: 3000"), "{report}");
        assert!(report.contains("checkpoint: start lsn"), "{report}");
        assert_eq!(ok(&["scan", dir, "--engine", engine]).lines().count(), 3000);
    }
}

// Goal: check reports damage in the middle of a log with the file and offset and exit 1.
// Method: load without a checkpoint, flip a byte early in the one log, run check.
#[test]
fn check_reports_a_corrupt_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    ok(&["load", path(&dir), "--keys", "500"]);
    let log = dir.join("log-0000000000-000");
    let mut bytes = std::fs::read(&log).expect("read log");
    assert!(
        bytes.len() > 1000,
        "the load wrote its records to the first log"
    );
    bytes[200] ^= 0xff;
    std::fs::write(&log, bytes).expect("write log");
    let err = fails(&["check", path(&dir)]);
    assert!(err.contains("log-0000000000-000"), "{err}");
    assert!(err.contains("offset"), "{err}");
}

// Goal: check reports a damaged checkpoint and exits 1, on every run; after an open set it
// aside, check reports the `.corrupt` file. Method: two checkpoints, damage the newest,
// check twice, get, check.
#[test]
fn check_reports_a_corrupt_checkpoint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let dir_str = path(&dir);
    ok(&["load", dir_str, "--keys", "200"]);
    ok(&["checkpoint", dir_str]);
    ok(&["put", dir_str, "a", "b"]);
    ok(&["checkpoint", dir_str]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint-") && !n.ends_with(".tmp"))
        .collect();
    names.sort();
    let newest = dir.join(names.last().expect("a checkpoint"));
    let mut bytes = std::fs::read(&newest).expect("read checkpoint");
    bytes[100] ^= 0xff;
    std::fs::write(&newest, bytes).expect("write checkpoint");
    let name = names.last().expect("a checkpoint");
    for _ in 0..2 {
        let err = fails(&["check", dir_str]);
        assert!(
            err.contains("corrupt") && err.contains(name.as_str()),
            "{err}"
        );
    }
    // An open falls back to the older checkpoint and keeps the damaged one aside, which
    // check goes on reporting.
    assert_eq!(ok(&["get", dir_str, "a"]), "b\n");
    let err = fails(&["check", dir_str]);
    assert!(err.contains(".corrupt"), "{err}");
}

// Goal: bad arguments are one-line errors with exit 1. Method: a missing directory, an
// unknown engine, bad hex, an oversized value, a bad durability.
#[test]
fn bad_arguments_are_one_line_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("missing");
    let err = fails(&["get", path(&missing), "k"]);
    assert!(err.contains("no such store directory"), "{err}");
    let dir = path(tmp.path());
    let err = fails(&["put", dir, "--engine", "nope", "k", "v"]);
    assert!(err.contains("lockbtree"), "{err}");
    let err = fails(&["put", dir, "--hex", "zz", "00"]);
    assert!(err.contains("hexadecimal"), "{err}");
    let err = fails(&["load", dir, "--keys", "1", "--value-size", "2000000"]);
    assert!(err.contains("--value-size"), "{err}");
    let err = fails(&["load", dir, "--keys", "1", "--durability", "often"]);
    assert!(err.contains("periodic:MS"), "{err}");
    let err = fails(&["scan"]);
    assert!(err.contains("DIR"), "{err}");
    for command in ["load", "get", "put", "del", "scan", "check", "checkpoint"] {
        let help = ok(&[command, "--help"]);
        assert!(help.contains("Usage: forest"), "{command}: {help}");
    }
}

// Goal: check reports a torn log tail without touching it (not an error); the next open
// cuts it. Method: load (a clean close ends the log with a mark and a seal), drop the last 5
// bytes (the seal torn), check twice (exit 0, the tail named, the bytes unchanged), then
// scan: every key is there, and the open cut the tail and sealed the log anew.
#[test]
fn check_reports_a_torn_tail_and_leaves_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    ok(&["load", path(&dir), "--keys", "100"]);
    let log = dir.join("log-0000000000-000");
    let bytes = std::fs::read(&log).expect("read log");
    let torn = &bytes[..bytes.len() - 5];
    std::fs::write(&log, torn).expect("write log");
    for _ in 0..2 {
        let report = ok(&["check", path(&dir)]);
        assert!(report.contains("torn tail: log-0000000000-000"), "{report}");
        assert!(report.contains("keys recovered: 100"), "{report}");
        assert!(report.contains("records/s"), "{report}");
        assert_eq!(
            std::fs::read(&log).expect("read log"),
            torn,
            "check is read-only"
        );
    }
    assert_eq!(ok(&["scan", path(&dir)]).lines().count(), 100);
    assert!(
        std::fs::read(&log).expect("read log").len() < torn.len(),
        "open cut it"
    );
}

// Goal: the engine chosen at load is recorded and used without --engine; load --checkpoint
// leaves a checkpoint that check loads. Method: load with bwtree and --checkpoint, check.
#[test]
fn engine_is_recorded_and_checkpoint_loaded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let loaded = ok(&[
        "load",
        path(&dir),
        "--engine",
        "bwtree",
        "--keys",
        "200",
        "--checkpoint",
    ]);
    assert!(loaded.contains("200 entries"), "{loaded}");
    let report = ok(&["check", path(&dir)]);
    assert!(report.contains("engine recorded: bwtree"), "{report}");
    assert!(report.contains("engine bwtree"), "{report}");
    assert!(report.contains("checkpoint: start lsn"), "{report}");
    assert!(report.contains("keys recovered: 200"), "{report}");
    assert!(report.contains("MB/s"), "{report}");
}

// Goal: a full engine spec works where an engine is named and is recorded canonically;
// naming another than the recorded one is a clear error unless --switch-engine; `forest
// engines` lists every engine with its parameters (issue 13). Method: load with
// `masstree:fanout=15x32,prefetch=on`, reopen with and without specs, switch, list.
#[test]
fn engine_specs_are_recorded_and_conflicts_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let dir = path(&dir);
    let spec = "masstree:fanout=15x32,prefetch=on";
    ok(&["load", dir, "--engine", spec, "--keys", "100"]);
    let report = ok(&["check", dir]);
    assert!(
        report.contains("engine recorded: masstree:fanout=15x32"),
        "the canonical spec drops defaults: {report}"
    );
    // The same configuration, spelled otherwise, is no conflict.
    ok(&["put", dir, "--engine", "masstree:fanout=15x32", "a", "1"]);
    let err = fails(&["put", dir, "--engine", "masstree", "b", "2"]);
    assert!(
        err.contains("created with engine `masstree:fanout=15x32`")
            && err.contains("--switch-engine"),
        "{err}"
    );
    let err = fails(&["put", dir, "--engine", "masstree:fanout=7", "b", "2"]);
    assert!(err.contains("fanout=\"7\""), "{err}");
    ok(&[
        "put",
        dir,
        "--engine",
        "bwtree:page=64",
        "--switch-engine",
        "b",
        "2",
    ]);
    let report = ok(&["check", dir]);
    assert!(
        report.contains("engine recorded: bwtree:page=64"),
        "{report}"
    );
    assert_eq!(ok(&["get", dir, "a"]), "1\n");
    assert_eq!(ok(&["scan", dir]).lines().count(), 102);
    let err = fails(&["get", dir, "--switch-engine", "a"]);
    assert!(err.contains("--engine"), "{err}");

    let list = ok(&["engines"]);
    for name in forest_store::engine_names() {
        assert!(list.contains(name), "{list}");
    }
    assert!(list.contains("fanout=15x16|10x8|15x32"), "{list}");
    assert!(list.contains("skiplist"), "{list}");
}

// Goal: `forest check` on a store whose bwtree recovers from map checkpoints (issue 17):
// OK after its WAL below the RSSP was deleted; a flipped byte in an LSS segment is named
// with a non-zero exit. Method: a store on bwtree with a 64 KiB budget and map checkpoints,
// three checkpoints (the first logs are deleted), close; check; flip a byte in the middle
// of the first segment; check again.
#[test]
fn check_a_store_on_map_checkpoints() {
    use forest_store::{file::OsDir, Store, StoreOptions};
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let options = StoreOptions {
        engine: Some("bwtree".into()),
        memory_budget_bytes: Some(64 << 10),
        ..StoreOptions::default()
    };
    let store =
        Store::open_with_map_checkpoints(OsDir::open(&dir).expect("dir"), options, 96 << 10)
            .expect("open");
    for round in 0..3u32 {
        for i in 0..1500u32 {
            let value = format!("{round:04}-{i:0160}");
            store
                .upsert(format!("k{i:06}").as_bytes(), value.as_bytes())
                .expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
    }
    store.close().expect("close");
    let out = ok(&["check", path(&dir)]);
    assert!(out.contains("(recovery starts here)"), "{out}");
    assert!(out.contains("wal: checked from the rssp"), "{out}");
    assert!(!out.contains("LOST"), "{out}");
    let lss = dir.join("lss");
    let mut segments: Vec<String> = std::fs::read_dir(&lss)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    segments.sort();
    let first = lss.join(&segments[0]);
    let mut bytes = std::fs::read(&first).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&first, &bytes).expect("write");
    let err = fails(&["check", path(&dir)]);
    assert!(
        err.contains(&segments[0]) && err.contains("first bad record at offset"),
        "{err}"
    );
}
