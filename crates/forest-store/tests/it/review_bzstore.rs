//! Review of the store on the persistent BzTree (`bztree-pm`, merge d5b77bc): tests that
//! confirmed the defects found (findings F1-F5, F7), each failing before its fix.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use forest_core::Index;
use forest_store::{BatchOp, Durability, Store, StoreOptions};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

const TREE_FILE: &str = "bztree-pm.pool";
const SIZES: &str = "heap_mib=32,descriptors=512,node=512";
/// Byte offset of the tree header's boot id word (forest-bztree `file` module doc).
const BOOT_WORD_AT: u64 = 64 + 5 * 8;

fn msync() -> String {
    format!("bztree-pm:persist=msync,{SIZES}")
}

fn clwb() -> String {
    format!("bztree-pm:{SIZES}")
}

fn options(engine: &str, switch: bool) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        switch_engine: switch,
        durability: Durability::Group,
        shards: 2,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

fn open(dir: &Path, engine: &str) -> Store {
    Store::open_path(dir, options(engine, false)).expect("open")
}

fn as_map(store: &Store) -> Map {
    store.to_vec().into_iter().collect()
}

/// The keys of `model` the store lacks or holds with another value (short messages).
fn differences(store: &Store, model: &Map) -> Vec<String> {
    let got = as_map(store);
    model
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

/// Acknowledged single writes only (a store that never wrote a batch: no LSN taken).
fn write_singles(store: &Store, model: &mut Map) {
    for i in 0..50u32 {
        let (k, v) = (
            format!("s{i:03}").into_bytes(),
            format!("v{i}").into_bytes(),
        );
        store.upsert(&k, &v).expect("upsert");
        model.insert(k, v);
    }
}

/// Acknowledged writes: a few single writes, a batch, a checkpoint, more single writes.
fn write_acked(store: &Store, model: &mut Map) {
    for i in 0..50u32 {
        let (k, v) = (
            format!("k{i:03}").into_bytes(),
            format!("v{i}").into_bytes(),
        );
        store.upsert(&k, &v).expect("upsert");
        model.insert(k, v);
    }
    let ops = [
        BatchOp::Upsert(b"b1".to_vec(), b"x".to_vec()),
        BatchOp::Upsert(b"b2".to_vec(), b"x".to_vec()),
    ];
    store.write_batch(&ops).expect("batch");
    model.insert(b"b1".to_vec(), b"x".to_vec());
    model.insert(b"b2".to_vec(), b"x".to_vec());
    store.checkpoint().expect("checkpoint");
    for i in 50..80u32 {
        let (k, v) = (
            format!("k{i:03}").into_bytes(),
            format!("v{i}").into_bytes(),
        );
        store.upsert(&k, &v).expect("upsert");
        model.insert(k, v);
    }
}

fn poke(dir: &Path, at: u64, value: u64) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(TREE_FILE))
        .expect("tree file");
    file.write_all_at(&value.to_le_bytes(), at).expect("poke");
}

// F1. Goal: under clwb the logs are the truth, so a tree file that a power loss left
// unwritten (its size reached the disk, its pages never did: all zeros) is rebuilt from
// checkpoint + logs, as a new boot's file is. Method: write, close, zero the file keeping
// its length, reopen.
#[test]
fn clwb_rebuilds_a_tree_file_lost_to_power_loss() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    let store = open(tmp.path(), &clwb());
    write_acked(&store, &mut model);
    store.close().expect("close");
    let path = tmp.path().join(TREE_FILE);
    let len = std::fs::metadata(&path).expect("tree file").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("tree file");
    file.set_len(0).expect("truncate");
    file.set_len(len).expect("zeros, same length");
    drop(file);
    let store = Store::open_path(tmp.path(), options(&clwb(), false))
        .expect("clwb rebuilds from checkpoint + logs");
    assert_eq!(differences(&store, &model), Vec::<String>::new());
}

// F2. Goal: a clwb open on a new boot never leaves the file looking as if it were last
// opened on this boot until its rebuild has begun: else a later open trusts a file whose
// page-cache lines the power loss took. Method: write; simulate a line lost to power loss
// (remove one acknowledged key from the tree directly) and the previous boot (poke the boot
// word); make the first reopen fail before its rebuild starts (a rename recovery cannot do:
// any transient error, or a SIGKILL, in that window does the same); clear it and reopen.
#[test]
fn clwb_failed_open_on_a_new_boot_does_not_make_the_file_trusted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    let store = open(tmp.path(), &clwb());
    write_acked(&store, &mut model);
    store.close().expect("close");
    {
        let spec = forest_engines::EngineSpec::parse(&clwb()).expect("spec");
        let tree = forest_engines::StoreTree::open(&spec, &tmp.path().join(TREE_FILE))
            .expect("the tree alone");
        assert!(tree.remove(b"k070"), "the line that did not reach the disk");
    }
    poke(tmp.path(), BOOT_WORD_AT, 0x1234_5678);
    // A damaged newest checkpoint whose `.corrupt` name is taken by a non-empty directory:
    // recovery's rename of it fails, before it asks for a fresh tree.
    let damaged = tmp.path().join("checkpoint-09999999999999999999");
    std::fs::write(&damaged, b"not a checkpoint").expect("damaged checkpoint");
    let blocker = tmp.path().join("checkpoint-09999999999999999999.corrupt");
    std::fs::create_dir(&blocker).expect("blocker");
    std::fs::write(blocker.join("x"), b"x").expect("non-empty");
    let failed = Store::open_path(tmp.path(), options(&clwb(), false));
    assert!(failed.is_err(), "the first reopen fails before rebuilding");
    std::fs::remove_dir_all(&blocker).expect("cleared");
    std::fs::remove_file(&damaged).expect("cleared");
    let store = open(tmp.path(), &clwb());
    assert_eq!(
        differences(&store, &model),
        Vec::<String>::new(),
        "the stale file was trusted: acknowledged writes lost"
    );
}

// F3. Goal: under msync the tree file is the only copy of single writes: a store whose META
// names msync and whose file is gone must not open as if nothing were lost. Method: write,
// single writes only (no batch, so no LSN), close, delete the file, reopen: an error, or
// everything.
#[test]
fn msync_missing_tree_file_is_refused_not_silently_rebuilt() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    let store = open(tmp.path(), &msync());
    write_singles(&store, &mut model);
    store.close().expect("close");
    std::fs::remove_file(tmp.path().join(TREE_FILE)).expect("file lost");
    match Store::open_path(tmp.path(), options(&msync(), false)) {
        Err(_) => {}
        Ok(store) => assert_eq!(
            differences(&store, &model).len(),
            0,
            "opened without its tree: acknowledged single writes silently gone"
        ),
    }
}

// F3b. Goal: as F3 for a damaged META: the open goes on with the engine named, and must not
// ignore an msync tree file (the only copy of its single writes). Method: write on msync,
// close, damage META, open naming another engine: an error, or everything.
#[test]
fn damaged_meta_does_not_hide_the_msync_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    let store = open(tmp.path(), &msync());
    write_singles(&store, &mut model);
    store.close().expect("close");
    std::fs::write(tmp.path().join("META"), b"garbage, not a META file").expect("damage");
    match Store::open_path(tmp.path(), options("masstree", false)) {
        Err(_) => {}
        Ok(store) => assert_eq!(
            differences(&store, &model).len(),
            0,
            "the msync tree was ignored: acknowledged single writes gone"
        ),
    }
}

/// Fills the msync store's small heap with large values until a single write fails.
fn fill_heap(store: &Store) -> usize {
    let big = vec![7u8; 3000];
    for i in 0..100_000usize {
        if store.upsert(format!("z{i:06}").as_bytes(), &big).is_err() {
            return i;
        }
    }
    panic!("the heap never filled");
}

// F4. Goal: an atomic batch under msync that fails while it applies (here: the tree's heap
// is full) fails the store or returns an error without applying part of it; it never leaves
// half a batch visible while the store goes on taking writes, and its redo at reopen never
// overwrites a write acknowledged after it. Method: a store on a 1 MiB heap; fill it; a
// batch [remove a, put a large new value]: the remove applies, the put panics; then an
// acknowledged single write to `a`; free room; close; reopen.
#[test]
fn msync_batch_failing_mid_apply_is_not_half_applied_nor_redone_over_later_writes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = "bztree-pm:persist=msync,heap_mib=1,descriptors=512,node=512";
    let store = open(tmp.path(), engine);
    store.upsert(b"a", b"1").expect("upsert");
    let filled = fill_heap(&store);
    assert!(filled > 0);
    let ops = [
        BatchOp::Remove(b"a".to_vec()),
        BatchOp::Upsert(b"b".to_vec(), vec![9u8; 3000]),
    ];
    let outcome = catch_unwind(AssertUnwindSafe(|| store.write_batch(&ops)));
    let panicked = outcome.is_err();
    let mut out = Vec::new();
    let a_present = store.get(b"a", &mut out);
    let b_present = store.get(b"b", &mut out);
    // Free room (single writes go on: the store was not failed).
    let mut freed = 0;
    for i in 0..filled {
        if store.remove(format!("z{i:06}").as_bytes()).is_ok() {
            freed += 1;
        }
    }
    let later = store.upsert(b"a", b"acked-after");
    store.close().expect("close");
    let store = Store::open_path(tmp.path(), options(engine, false)).expect("reopen");
    let mut a_now = Vec::new();
    let a_now_present = store.get(b"a", &mut a_now);
    assert!(
        !panicked,
        "the batch panicked (caught here); then a present: {a_present}, b present: \
         {b_present}; single writes went on ({freed} removes ok, later upsert {:?}); after \
         reopen a = {:?}",
        later.as_ref().map_err(|e| e.to_string()),
        a_now_present.then(|| String::from_utf8_lossy(&a_now).into_owned())
    );
    // Whole: a gone, b there; none: a there, b gone; half (a removed, b not put): neither.
    assert_ne!(a_present, b_present, "half a batch visible");
    if later.is_ok() {
        assert!(a_now_present && a_now == b"acked-after", "acked write lost");
    }
}

// F5. Goal: under clwb a full heap is an error naming it, as under msync, not a panic of
// the writing thread that fails the whole store. Method: a store on a 1 MiB heap; single
// writes of large values until one fails; it must return Err, and the store still read.
#[test]
fn clwb_full_heap_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = "bztree-pm:heap_mib=1,descriptors=512,node=512";
    let store = open(tmp.path(), engine);
    let big = vec![7u8; 3000];
    let mut failure = None;
    for i in 0..100_000usize {
        let key = format!("z{i:06}");
        match catch_unwind(AssertUnwindSafe(|| store.upsert(key.as_bytes(), &big))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failure = Some(Ok(e.to_string()));
                break;
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failure = Some(Err(text));
                break;
            }
        }
    }
    let failure = failure.expect("the heap filled");
    let after = store.upsert(b"small", b"1").map_err(|e| e.to_string());
    assert!(
        failure.is_ok(),
        "a full heap panicked the writer: {failure:?}; the next write: {after:?}"
    );
    assert!(
        failure.as_ref().is_ok_and(|t| t.contains("full")),
        "{failure:?}"
    );
}

// F7. Goal: `forest check` of a bztree-pm store reads its logs and checkpoints without
// building a scratch tree file (a heap-sized file in the temp dir, or the spec's `dir`).
// Method: verify a clwb store naming a spec whose `dir` does not exist: it must stay absent,
// and the check must find no problem.
#[test]
fn check_of_a_bztree_pm_store_makes_no_scratch_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    let store = open(tmp.path(), &clwb());
    write_acked(&store, &mut model);
    store.close().expect("close");
    let scratch = tempfile::tempdir().expect("tempdir");
    let never = scratch.path().join("never-made");
    let engine = format!("bztree-pm:dir={},{SIZES}", never.display());
    let report = Store::verify_path(tmp.path(), Some(&engine)).expect("verify");
    assert!(
        !never.exists(),
        "verify built a scratch tree in {}",
        never.display()
    );
    let recovered = report.recovery.as_ref().expect("recovery checked");
    assert_eq!(recovered.keys_recovered, model.len() as u64);
}
