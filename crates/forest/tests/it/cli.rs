//! The store commands of the `forest` binary, run as a user runs them (issue 5 "CLI").

use std::path::Path;
use std::process::{Command, Output};

use forest_llama::checkpoint;
use forest_llama::lss::LssAddress;

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

/// A closed bwtree store on map checkpoints (issue 17) in `dir`: a 64 KiB budget, a map
/// checkpoint every 96 KiB of WAL, three rounds of 1500 upserts each ending in a checkpoint
/// (the first logs are deleted).
fn map_store(dir: &Path) {
    use forest_store::{file::OsDir, Store, StoreOptions};
    let options = StoreOptions {
        engine: Some("bwtree".into()),
        memory_budget_bytes: Some(64 << 10),
        ..StoreOptions::default()
    };
    let store = Store::open_with_map_checkpoints(OsDir::open(dir).expect("dir"), options, 96 << 10)
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
}

/// The names in `dir` that `keep` accepts, sorted.
fn names(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    use forest_store::file::{Dir, OsDir};
    let mut names = OsDir::open(dir).expect("open").list().expect("list");
    names.retain(|n| keep(n));
    names
}

// Goal: `forest check` on a store whose bwtree recovers from map checkpoints (issue 17):
// OK after its WAL below the RSSP was deleted; a flipped byte in an LSS segment is named
// with a non-zero exit. Method: `map_store`; check; flip a byte in the middle of the first
// segment; check again.
#[test]
fn check_a_store_on_map_checkpoints() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    map_store(&dir);
    let out = ok(&["check", path(&dir)]);
    assert!(out.contains("(recovery starts here)"), "{out}");
    assert!(out.contains("wal: checked from the rssp"), "{out}");
    assert!(!out.contains("LOST"), "{out}");
    assert!(!out.contains("mapping table:"), "{out}");
    let lss = dir.join("lss");
    let segments = names(&lss, |n| n.ends_with(".seg"));
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

/// The numbers of `forest inspect`'s line that starts with `prefix`, in order.
fn numbers_of(out: &str, prefix: &str) -> Vec<f64> {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {out}"));
    line[prefix.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.trim_matches('.').parse().ok())
        .collect()
}

// Goal: `forest inspect` on a bwtree store with map checkpoints prints the checkpoint used
// (S, T, RSSP), each segment's live / total bytes (summing to the LSS's), evicted and
// resident pages and pieces per page, exit 0; on a default-engine store it says there is
// no LSS; `--help` describes it; a missing directory is one line, exit 1. Method:
// `map_store`, inspect, parse the lines.
#[test]
fn inspect_a_store_on_map_checkpoints() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    map_store(&dir);
    let out = ok(&["inspect", path(&dir)]);
    assert!(out.contains("(recovery starts here)"), "{out}");
    assert!(
        out.contains(", rssp ") && out.contains(", S ") && out.contains(", T "),
        "{out}"
    );
    assert!(!out.contains("PROBLEM"), "{out}");
    // A version-3 checkpoint: its live pieces below S (an open reads no segment below S).
    assert!(
        numbers_of(&out, "live pieces below S recorded: ")[0] > 0.0,
        "{out}"
    );
    let segment_live: f64 = out
        .lines()
        .filter(|l| l.starts_with("segment lss/"))
        .map(|l| numbers_of(l, "segment lss/")[4])
        .sum();
    let lss = numbers_of(&out, "lss: ");
    assert!(lss[1] > 0.0 && lss[2] > 0.0 && lss[2] <= lss[1], "{out}");
    assert_eq!(
        segment_live, lss[2],
        "segments' live bytes sum to the LSS's: {out}"
    );
    let pages = numbers_of(&out, "pages at open: ");
    assert!(pages[0] > 2.0, "most pages are evicted at open: {out}");
    let histogram = numbers_of(&out, "pieces per page (pieces: pages): ");
    let counted: f64 = histogram.iter().skip(1).step_by(2).sum();
    assert_eq!(
        counted,
        pages[0] + pages[1],
        "every page in the histogram: {out}"
    );

    let plain = tmp.path().join("plain");
    ok(&["put", path(&plain), "k", "v"]);
    let out = ok(&["inspect", path(&plain)]);
    assert!(
        out.contains("engine recorded: masstree") && out.contains("no LSS"),
        "{out}"
    );
    let help = ok(&["inspect", "--help"]);
    assert!(
        help.contains("segment") && help.contains("pieces per page"),
        "{help}"
    );
    let err = fails(&["inspect", path(&tmp.path().join("none"))]);
    assert!(err.contains("no such store directory"), "{err}");
}

// Goal: `forest inspect` names damage with a non-zero exit and never panics: a flipped byte
// in a segment (file and offset), a damaged newest map checkpoint (named; the older is
// used), every map checkpoint damaged (named; the segments still listed), a missing
// segment. Method: `map_store`, damage one file at a time, inspect.
#[test]
fn inspect_names_damage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    map_store(&dir);
    let lss = dir.join("lss");
    let segments = names(&lss, |n| n.ends_with(".seg"));
    let checkpoints = names(&lss, |n| n.starts_with("map-") && !n.contains('.'));
    assert_eq!(checkpoints.len(), 2, "{checkpoints:?}");
    let flip = |name: &str, at: fn(usize) -> usize| {
        let file = lss.join(name);
        let mut bytes = std::fs::read(&file).expect("read");
        let i = at(bytes.len());
        bytes[i] ^= 0x5a;
        std::fs::write(&file, &bytes).expect("write");
    };

    flip(&checkpoints[1], |len| len / 2);
    let err = fails(&["inspect", path(&dir)]);
    assert!(
        err.contains(&checkpoints[1]) && err.contains("damaged"),
        "{err}"
    );
    let out = forest(&["inspect", path(&dir)]);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains(&format!("lss/{} (recovery starts here)", checkpoints[0])),
        "{out}"
    );

    flip(&checkpoints[0], |len| len / 2);
    let err = fails(&["inspect", path(&dir)]);
    assert!(err.contains("no valid map checkpoint"), "{err}");
    let out = forest(&["inspect", path(&dir)]);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains(&format!("segment lss/{}", segments[0])),
        "{out}"
    );
    flip(&checkpoints[0], |len| len / 2);
    flip(&checkpoints[1], |len| len / 2);
    ok(&["inspect", path(&dir)]);

    flip(&segments[0], |len| len / 2);
    let err = fails(&["inspect", path(&dir)]);
    assert!(
        err.contains(&segments[0]) && err.contains("first bad record at offset"),
        "{err}"
    );
    flip(&segments[0], |len| len / 2);
    ok(&["inspect", path(&dir)]);

    // The segment holding S (the last) gone: the only one, or the LSS now ends below T.
    std::fs::remove_file(lss.join(segments.last().expect("a segment"))).expect("remove");
    let err = fails(&["inspect", path(&dir)]);
    assert!(
        err.contains("no LSS segment") || err.contains("below T"),
        "{err}"
    );
}

/// Rewrites `lss/map-…` `name` with its entries changed by `change`, re-sealed (its crc
/// matches): damage the crc cannot catch.
fn rewrite_map_checkpoint(file: &Path, change: impl FnOnce(&mut Vec<(u64, LssAddress)>)) {
    let bytes = std::fs::read(file).expect("read");
    let mut checkpoint = checkpoint::decode(file, &bytes).expect("a valid checkpoint");
    change(&mut checkpoint.entries);
    std::fs::write(file, checkpoint.encode()).expect("write");
}

// Goal: `forest check`'s table check (issue 17): an entry of the newest map checkpoint that
// names another page's piece, or an address where no record begins, or a piece whose bytes
// were damaged, is reported with the checkpoint, PID, segment file and offset, exit 1; the
// undamaged store reports none. Method: `map_store`; rewrite the newest checkpoint's entries
// with a valid crc (PID a names b's piece; PID c an address 8 bytes into its piece); check;
// restore, flip a byte inside PID d's piece; check.
#[test]
fn check_reports_mapping_table_entries_that_name_no_valid_chain() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    map_store(&dir);
    let lss = dir.join("lss");
    let newest = names(&lss, |n| n.starts_with("map-") && !n.contains('.'))
        .pop()
        .expect("a map checkpoint");
    let file = lss.join(&newest);
    let original = std::fs::read(&file).expect("read");
    let entries = checkpoint::decode(&file, &original).expect("valid").entries;
    assert!(entries.len() > 4, "{entries:?}");
    let (a, b, c) = (entries[0], entries[1], entries[2]);
    rewrite_map_checkpoint(&file, |e| {
        e[0].1 = b.1;
        e[2].1 = LssAddress::current(c.1.offset() + 8);
    });
    let out = forest(&["check", path(&dir)]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let table: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("mapping table: "))
        .collect();
    assert_eq!(table.len(), 2, "{stdout}");
    let shared = format!("PID {}: its chain from address {}", a.0, b.1);
    assert!(
        table[0].contains(&newest)
            && table[0].contains(&shared)
            && table[0].contains(".seg offset ")
            && table[0].contains(&format!("a piece of page {}", b.0)),
        "{stdout}"
    );
    assert!(
        table[1].contains(&format!("PID {}:", c.0)) && table[1].contains(".seg offset "),
        "{stdout}"
    );
    assert!(
        stderr.contains(&shared) && stderr.contains("2 problem(s)"),
        "{stderr}"
    );

    std::fs::write(&file, &original).expect("restore");
    ok(&["check", path(&dir)]);
    let d = entries[3];
    let segment_bytes = numbers_of(&ok(&["inspect", path(&dir)]), "segment size: ")[0] as u64;
    let segment = lss.join(format!("lss-{:016x}.seg", d.1.offset() / segment_bytes));
    let mut bytes = std::fs::read(&segment).expect("read");
    // Inside the piece's payload, past its 48-byte header.
    bytes[(d.1.offset() % segment_bytes) as usize + 60] ^= 0x5a;
    std::fs::write(&segment, &bytes).expect("write");
    let out = forest(&["check", path(&dir)]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with("mapping table: ")
            && l.contains(&format!("PID {}: its chain", d.0))
            && l.contains("bad checksum")),
        "{stdout}"
    );
}

/// Every file under `dir` (relative name → bytes), recursively.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let name = path.strip_prefix(dir).expect("under dir");
                let bytes = std::fs::read(&path).expect("read");
                out.insert(name.to_string_lossy().into_owned(), bytes);
            }
        }
    }
    out
}

/// Sets `mode` on every file under `dir` and `dir_mode` on `dir` and its subdirectories.
fn chmod_tree(dir: &Path, mode: u32, dir_mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            chmod_tree(&path, mode, dir_mode);
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode)).expect("chmod");
}

// Goal (issue 17, session 20): `forest check` and `forest inspect` read a store without its
// lock and without opening anything for writing, so they work on a read-only copy and leave
// every byte as it was, `LOCK` included (before, both took the lock, creating `LOCK`, and
// opened every file read-write: on a read-only directory they failed). Method: `map_store`;
// remove `LOCK`; make the tree read-only (files 0444, directories 0555: binding for a
// non-root user; as root the checks below still hold); check and inspect; every file
// unchanged and no `LOCK`.
#[test]
fn check_and_inspect_a_read_only_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    map_store(&dir);
    std::fs::remove_file(dir.join("LOCK")).expect("remove LOCK");
    let before = snapshot(&dir);
    chmod_tree(&dir, 0o444, 0o555);
    let checked = forest(&["check", path(&dir)]);
    let inspected = forest(&["inspect", path(&dir)]);
    chmod_tree(&dir, 0o644, 0o755);
    for (what, out) in [("check", &checked), ("inspect", &inspected)] {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "forest {what} of a read-only store failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("(recovery starts here)"), "{stdout}");
        assert!(!stdout.contains("store in use"), "{stdout}");
    }
    assert!(!dir.join("LOCK").exists(), "LOCK created");
    assert_eq!(snapshot(&dir), before, "a file changed");
}

// Goal (issue 17, session 20): `forest check` and `forest inspect` beside a running server
// do not disturb it and say the store is in use ("figures may be from a moment ago")
// instead of refusing. Method: `forest serve` on bwtree with a 64 KiB budget and a map
// checkpoint every 256 KiB of log; 3000 SETs and a SAVE (a map checkpoint); a writer keeps
// SETting on its own connection, with a SAVE every 500, while check and inspect run three
// times each (both exit 0 and print the line); then every key written reads back, SHUTDOWN exits cleanly, a check of
// the stopped store is clean without the line, and a restart reads the keys again.
#[test]
fn check_and_inspect_beside_a_running_server() {
    use redis::Commands;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let (_tmp, dir) = crate::common::data_dir();
    let flags = [
        "--engine",
        "bwtree",
        "--memory-budget",
        "64KiB",
        "--map-checkpoint-bytes",
        "256KiB",
    ];
    let value = |i: u32| format!("{i:0>200}");
    let mut server = crate::common::Server::start(&dir, &flags);
    let mut con = server.client();
    let mut pipe = redis::pipe();
    for i in 0..3000u32 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(value(i)).ignore();
    }
    let () = pipe.query(&mut con).expect("SETs");
    // SAVE takes a map checkpoint (forest-store `Store::checkpoint`).
    let () = redis::cmd("SAVE").query(&mut con).expect("SAVE");
    assert!(
        !names(&dir.join("lss"), |n| n.starts_with("map-")).is_empty(),
        "no map checkpoint after SAVE"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let mut writer_con = server.client();
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let () = writer_con
                    .set(format!("w{n}"), value(n))
                    .expect("SET beside check");
                n += 1;
                // Map checkpoints published and pruned while check and inspect read.
                if n.is_multiple_of(500) {
                    let () = redis::cmd("SAVE")
                        .query(&mut writer_con)
                        .expect("SAVE beside check");
                }
            }
            n
        })
    };
    for _ in 0..3 {
        for command in ["check", "inspect"] {
            let out = ok(&[command, path(&dir)]);
            assert!(
                out.contains("store in use: figures may be from a moment ago"),
                "{command}: {out}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("the writer saw no error");
    assert!(written > 0);
    for i in (0..3000u32).step_by(7) {
        let got: String = con.get(format!("k{i}")).expect("GET");
        assert_eq!(got, value(i));
    }
    for n in (0..written).step_by((written as usize / 300).max(1)) {
        let got: String = con.get(format!("w{n}")).expect("GET");
        assert_eq!(got, value(n));
    }
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
    assert!(server.wait_exit().success());
    let out = ok(&["check", path(&dir)]);
    assert!(!out.contains("store in use"), "{out}");
    let server = crate::common::Server::start(&dir, &flags);
    let mut con = server.client();
    for n in (0..written).step_by((written as usize / 100).max(1)) {
        let got: String = con.get(format!("w{n}")).expect("GET after restart");
        assert_eq!(got, value(n));
    }
}
