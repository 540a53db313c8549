//! `Store::verify` (what `forest check` runs) on a store whose bwtree recovers from map
//! checkpoints in `DIR/lss/` (issue 17 Recovery: "`forest check DIR` verifies segments and
//! checkpoints"): the newest valid map checkpoint, every LSS record's crc up to the stable
//! end, and the WAL from the RSSP on; the WAL below the RSSP is deleted by design, not lost.

use std::path::{Path, PathBuf};

use forest_store::file::{Dir, OsDir};
use forest_store::{Durability, Store, StoreOptions};

use crate::llama_store::{key, value};

const N: u32 = 1500;

fn options() -> StoreOptions {
    StoreOptions {
        engine: Some("bwtree".into()),
        durability: Durability::Group,
        memory_budget_bytes: Some(64 << 10),
        shards: 2,
        ..StoreOptions::default()
    }
}

fn names(path: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names = OsDir::open(path).expect("open").list().expect("list");
    names.retain(|n| keep(n));
    names
}

fn logs(path: &Path) -> Vec<String> {
    names(path, |n| n.starts_with("wal-") || n.starts_with("log-"))
}

/// A store with several map checkpoints (so its first logs were deleted) and writes after
/// the last one; closed cleanly if `close`, else dropped (the WAL tail is then the only copy
/// of the last writes).
fn map_store(close: bool) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("store");
    let store =
        Store::open_with_map_checkpoints(OsDir::open(&path).expect("dir"), options(), 96 << 10)
            .expect("open");
    for i in 0..N {
        store.upsert(&key(i), &value(i, 0)).expect("upsert");
    }
    let first_logs = logs(&path);
    for round in 1..=3 {
        for i in (0..N).step_by(3) {
            store.upsert(&key(i), &value(i, round)).expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
    }
    for i in (0..N).step_by(2) {
        store.upsert(&key(i), &value(i, 9)).expect("upsert");
    }
    let now = logs(&path);
    assert!(
        first_logs.iter().any(|n| !now.contains(n)),
        "no log was deleted below the RSSP: {first_logs:?} then {now:?}"
    );
    if close {
        store.close().expect("close");
    } else {
        store.sync().expect("sync");
        drop(store);
    }
    (tmp, path)
}

fn verify(path: &Path) -> forest_store::VerifyReport {
    Store::verify_path(path, None).expect("verify")
}

fn flip(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(file, &bytes).expect("write");
}

// Goal: a clean map-checkpoint store whose WAL below the RSSP was deleted checks OK (no
// loss reported), with its map checkpoint and segments read. Method: map_store, closed and
// dropped; verify each: no problem, a checkpoint used, every segment read.
#[test]
fn clean_store_with_a_cut_wal_checks_ok() {
    for close in [true, false] {
        let (_tmp, path) = map_store(close);
        let report = verify(&path);
        assert_eq!(report.problems(), Vec::<String>::new(), "close {close}");
        let map = report.map.as_ref().expect("map checkpoints seen");
        assert!(map.used.is_some(), "{map:?}");
        assert!(map.rssp > 1, "RSSP {}", map.rssp);
        assert!(!map.segments.is_empty() && map.segments.iter().all(|s| s.records > 0));
        let recovery = report.recovery.as_ref().expect("recovery");
        assert!(recovery.losses.is_empty(), "{:?}", recovery.losses);
        if !close {
            assert!(recovery.records_replayed > 0, "the WAL tail was not read");
        }
    }
}

// Goal: a flipped byte in a segment below T is named (segment and offset). Method: flip a
// byte 8 KiB into the first segment (below the checkpoint's T), verify.
#[test]
fn flipped_segment_byte_is_named() {
    let (_tmp, path) = map_store(true);
    let lss = path.join("lss");
    let segments = names(&lss, |n| n.ends_with(".seg"));
    let first = lss.join(&segments[0]);
    // 8 KiB in: below T whether or not later segments exist (segments are at least ~2 MiB
    // since rev-smo2 F1, so this store may have one, and T lies far above 8 KiB in it).
    flip(&first, 8 << 10);
    let problems = verify(&path).problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&segments[0]) && p.contains("first bad record at offset")),
        "{problems:?}"
    );
}

// Goal: a damaged newest map checkpoint is named, saying the older one is usable. Method:
// flip a byte in the newest `map-<seq>`, verify.
#[test]
fn damaged_newest_map_checkpoint_is_named() {
    let (_tmp, path) = map_store(true);
    let lss = path.join("lss");
    let maps = names(&lss, |n| n.starts_with("map-") && !n.contains('.'));
    assert_eq!(maps.len(), 2, "{maps:?}");
    let newest = lss.join(&maps[1]);
    let len = std::fs::metadata(&newest).expect("stat").len() as usize;
    flip(&newest, len / 2);
    let report = verify(&path);
    let problems = report.problems();
    assert!(
        problems.iter().any(|p| p.contains(&maps[1])
            && p.contains("DAMAGED")
            && p.contains(&format!("falls back to the older {}", maps[0]))),
        "{problems:?}"
    );
    assert_eq!(report.map.expect("map").used.as_deref(), Some(&*maps[0]));
}

// Goal: a WAL file above the RSSP that is missing is reported (recovery would redo it).
// Method: a dropped store (its last writes only in the WAL), delete the newest log holding
// records, verify: a problem.
#[test]
fn missing_wal_file_above_rssp_is_reported() {
    let (_tmp, path) = map_store(false);
    let report = verify(&path);
    let rssp = report.map.as_ref().expect("map").rssp;
    let victim = report
        .logs
        .iter()
        .filter(|l| l.lsn_last.is_some_and(|last| last >= rssp))
        .map(|l| l.name.clone())
        .next()
        .expect("a log above the RSSP");
    std::fs::remove_file(path.join(&victim)).expect("remove");
    let report = verify(&path);
    let problems = report.problems();
    assert!(
        problems.iter().any(|p| p.contains(&victim)),
        "missing {victim} not reported: {problems:?}"
    );
}

// Goal: a newest map checkpoint of a newer format version (which an open refuses) is a
// reported problem, not a failed check: the table check's inspection cannot read the LSS and
// says so. Method: set the newest `map-<seq>`'s version field (bytes 8..12) to 99 and re-seal
// its header crc (bytes 76..80, crc32c of 0..76), verify.
#[test]
fn a_newer_map_checkpoint_version_is_reported() {
    let (_tmp, path) = map_store(true);
    let lss = path.join("lss");
    let maps = names(&lss, |n| n.starts_with("map-") && !n.contains('.'));
    let newest = lss.join(&maps[1]);
    let mut bytes = std::fs::read(&newest).expect("read");
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..76]);
    bytes[76..80].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&newest, &bytes).expect("write");
    let problems = verify(&path).problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("lss/ cannot be inspected") && p.contains("version")),
        "{problems:?}"
    );
}
