//! A store on the persistent BzTree (`bztree-pm`, issue 16 "Integration"; `forest_store`'s
//! `pm` module has the durability model): a model test over reopens, engine switches and
//! checkpoints, the file's lock, the rebuild paths of `persist=clwb` (a new boot, a batch
//! left applying), and damaged or foreign files. SIGKILL: `crash_kill.rs`
//! (`kill_group_bztree_pm_*`).

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use forest_core::Error;
use forest_store::{BatchOp, Durability, Store, StoreOptions, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// The tree's file in the store's directory.
const TREE_FILE: &str = "bztree-pm.pool";
const SIZES: &str = "heap_mib=32,descriptors=512,node=512";
/// Byte offsets of header words of the tree file (forest-bztree `file` module doc).
const BOOT_WORD_AT: u64 = 64 + 5 * 8;
const PENDING_WORD_AT: u64 = 64 + 11 * 8;

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

/// Random single writes and batches, applied to the store and the model alike.
fn write_some(store: &Store, model: &mut Map, rng: &mut StdRng, count: usize) {
    for _ in 0..count {
        let key = format!("k{:03}", rng.random_range(0..200)).into_bytes();
        let value = format!("v{}", rng.random::<u32>()).into_bytes();
        match rng.random_range(0..6) {
            0 => {
                let inserted = store.insert(&key, &value).expect("insert");
                assert_eq!(inserted, !model.contains_key(&key));
                model.entry(key).or_insert(value);
            }
            1 => {
                let removed = store.remove(&key).expect("remove");
                assert_eq!(removed, model.remove(&key).is_some());
            }
            2 => {
                let twin = [key.as_slice(), b"~"].concat();
                let mut batch = WriteBatch::new();
                batch.put(&key, &value).put(&twin, &value).remove(b"absent");
                store.write(&batch).expect("batch");
                model.insert(key, value.clone());
                model.insert(twin, value);
            }
            3 => {
                let ops = [
                    BatchOp::Remove(key.clone()),
                    BatchOp::Insert(key.clone(), value.clone()),
                ];
                assert!(store.write_batch(&ops).expect("batch")[1]);
                model.insert(key, value);
            }
            _ => {
                store.upsert(&key, &value).expect("upsert");
                model.insert(key, value);
            }
        }
    }
}

// Goal: a store on bztree-pm holds exactly what was written, across clean reopens,
// checkpoints and engine switches into and out of both persist modes. Method: random writes
// against a model; after every reopen the store equals the model.
#[test]
fn model_over_reopens_checkpoints_and_switches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let mut rng = StdRng::seed_from_u64(16);
    let mut model = Map::new();
    let engines = [
        msync(),
        msync(),
        "masstree".to_string(),
        clwb(),
        clwb(),
        msync(),
        "lockbtree".to_string(),
        msync(),
    ];
    let mut previous: Option<&str> = None;
    for (round, engine) in engines.iter().enumerate() {
        let switch = previous.is_some_and(|p| p != engine);
        let store = Store::open_path(&dir, options(engine, switch)).expect("open");
        assert_eq!(as_map(&store), model, "round {round}: reopen on {engine}");
        write_some(&store, &mut model, &mut rng, 120);
        if round % 2 == 0 {
            store.checkpoint().expect("checkpoint");
            write_some(&store, &mut model, &mut rng, 40);
        }
        assert_eq!(
            as_map(&store),
            model,
            "round {round}: {engine} before close"
        );
        store.close().expect("close");
        let on_pm = engine.starts_with("bztree-pm");
        assert_eq!(
            dir.join(TREE_FILE).exists(),
            on_pm,
            "round {round}: the tree file exists only while the store is on bztree-pm"
        );
        previous = Some(engine);
    }
    let store = open(&dir, &msync());
    assert_eq!(as_map(&store), model, "final reopen");
}

// Goal: under msync a single write takes no LSN (no log record) and a batch takes its LSNs;
// a checkpoint deletes the logs the tree holds. Method: count LSNs; list the directory.
#[test]
fn msync_logs_only_batches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path(), &msync());
    let before = store.stats().lsn_next;
    store.upsert(b"a", b"1").expect("upsert");
    store.remove(b"a").expect("remove");
    assert_eq!(store.stats().lsn_next, before, "single writes take no LSN");
    let mut batch = WriteBatch::new();
    batch.put(b"b", b"2").put(b"c", b"3");
    store.write(&batch).expect("batch");
    assert_eq!(store.stats().lsn_next, before + 2, "a batch is logged");
    store.checkpoint().expect("checkpoint");
    store.upsert(b"d", b"4").expect("upsert");
    drop(store);
    let store = open(tmp.path(), &msync());
    assert_eq!(
        as_map(&store),
        Map::from([
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec()),
            (b"d".to_vec(), b"4".to_vec()),
        ])
    );
    assert_eq!(
        store.recovery_report().records_replayed,
        0,
        "the tree held every batch"
    );
}

// Goal: the tree file is locked while a store has it: opening it directly fails with an
// error naming the file and this process's pid; after close it opens. Method: open the
// store, then the file through the registry's StoreTree.
#[test]
fn tree_file_is_locked_while_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path(), &msync());
    store.upsert(b"k", b"v").expect("upsert");
    let spec = forest_engines::EngineSpec::parse(&msync()).expect("spec");
    let path = tmp.path().join(TREE_FILE);
    let err = forest_engines::StoreTree::open(&spec, &path).expect_err("locked");
    let text = err.to_string();
    assert!(text.contains(TREE_FILE), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    let again = Store::open_path(tmp.path(), options(&msync(), false)).expect_err("dir lock");
    assert!(matches!(again, Error::Io { op: "lock", .. }), "{again}");
    store.close().expect("close");
    let tree = forest_engines::StoreTree::open(&spec, &path).expect("unlocked after close");
    assert!(!tree.created());
}

/// Overwrites the header word at `at` of the closed store's tree file.
fn poke(dir: &Path, at: u64, value: u64) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(TREE_FILE))
        .expect("tree file");
    file.write_all_at(&value.to_le_bytes(), at).expect("poke");
}

// Goal: under clwb a file last opened on another boot, or with a batch marked as applying,
// is not trusted: the store rebuilds it from checkpoint + logs and loses nothing. Method:
// write, close, change the boot id (then the pending word) in the file, reopen, compare.
#[test]
fn clwb_rebuilds_after_a_new_boot_or_a_batch_left_applying() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Map::new();
    let store = open(tmp.path(), &clwb());
    write_some(&store, &mut model, &mut rng, 200);
    store.checkpoint().expect("checkpoint");
    write_some(&store, &mut model, &mut rng, 100);
    store.close().expect("close");
    for (at, value, what) in [
        (BOOT_WORD_AT, 0x1234_5678, "another boot"),
        (PENDING_WORD_AT, 1, "a batch left applying"),
    ] {
        poke(tmp.path(), at, value);
        let store = open(tmp.path(), &clwb());
        assert_eq!(as_map(&store), model, "after {what}");
        assert!(
            store.recovery_report().records_replayed > 0
                || store.recovery_report().checkpoint_start_lsn.is_some(),
            "{what}: rebuilt from checkpoint and logs"
        );
        write_some(&store, &mut model, &mut rng, 50);
        store.close().expect("close");
    }
    let store = open(tmp.path(), &clwb());
    assert_eq!(as_map(&store), model, "same-boot reopen");
}

// Goal: a damaged or foreign tree file is a clear error naming the file, never a panic.
// Method: a store on msync; overwrite the file's tree magic, then replace the file with
// text; each open fails with an error that names the file.
#[test]
fn damaged_or_foreign_tree_file_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path(), &msync());
    store.upsert(b"k", b"v").expect("upsert");
    store.close().expect("close");
    poke(tmp.path(), 64 + 8, 0x0bad_0bad);
    let err = Store::open_path(tmp.path(), options(&msync(), false)).expect_err("bad magic");
    assert!(err.to_string().contains(TREE_FILE), "{err}");
    std::fs::write(tmp.path().join(TREE_FILE), b"not a tree").expect("write");
    let err = Store::open_path(tmp.path(), options(&msync(), false)).expect_err("foreign");
    assert!(err.to_string().contains(TREE_FILE), "{err}");
}

// Goal: `forest check` (Store::verify) still works on a bztree-pm store, also once a
// checkpoint deleted the first logs. Method: verify a closed store on each mode; no
// problems reported.
#[test]
fn verify_reports_no_problems() {
    for engine in [msync(), clwb()] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = open(tmp.path(), &engine);
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1").put(b"b", b"2");
        store.write(&batch).expect("batch");
        store.upsert(b"c", b"3").expect("upsert");
        store.checkpoint().expect("checkpoint");
        let mut batch = WriteBatch::new();
        batch.put(b"d", b"4").put(b"e", b"5");
        store.write(&batch).expect("batch after the checkpoint");
        store.close().expect("close");
        let report = Store::verify_path(tmp.path(), None).expect("verify");
        assert!(
            report.problems().is_empty(),
            "{engine}: {:?}",
            report.problems()
        );
    }
}

/// Header word offsets of the store words (forest-bztree `file` module doc).
const STORE_LSN_WORD_AT: u64 = 64 + 10 * 8;

// Goal: under msync a batch the tree lost (a crash after its log record was synced, before
// or while it applied) is redone at open, whole, and a batch the tree marked as applied is
// not redone over later single writes. Method: write a batch, overwrite one of its keys with
// a single write, close; then take the batch back out of the tree by hand (remove its keys,
// set the store words as before it applied) and reopen: both keys are back, the redo counted;
// a second reopen redoes nothing.
#[test]
fn msync_redoes_a_lost_batch_and_only_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path(), &msync());
    let mut batch = WriteBatch::new();
    batch.put(b"x", b"1").put(b"y", b"1");
    store.write(&batch).expect("batch");
    let batch_lsn = store.stats().lsn_next - 1;
    store.upsert(b"x", b"2").expect("a later single write");
    store.close().expect("close");
    let store = open(tmp.path(), &msync());
    assert_eq!(
        store.recovery_report().records_replayed,
        0,
        "marked applied"
    );
    assert_eq!(
        as_map(&store),
        Map::from([
            (b"x".to_vec(), b"2".to_vec()),
            (b"y".to_vec(), b"1".to_vec())
        ]),
        "the later write stands"
    );
    store.close().expect("close");
    {
        let spec = forest_engines::EngineSpec::parse(&msync()).expect("spec");
        let tree = forest_engines::StoreTree::open(&spec, &tmp.path().join(TREE_FILE))
            .expect("the tree alone");
        use forest_core::Index;
        assert!(tree.remove(b"y"));
        assert!(tree.remove(b"x"));
    }
    poke(tmp.path(), STORE_LSN_WORD_AT, batch_lsn - 2);
    poke(tmp.path(), PENDING_WORD_AT, batch_lsn);
    let store = open(tmp.path(), &msync());
    assert_eq!(
        store.recovery_report().records_replayed,
        2,
        "the batch is redone"
    );
    assert_eq!(
        as_map(&store),
        Map::from([
            (b"x".to_vec(), b"1".to_vec()),
            (b"y".to_vec(), b"1".to_vec())
        ]),
        "whole"
    );
    store.upsert(b"x", b"3").expect("single write");
    store.close().expect("close");
    let store = open(tmp.path(), &msync());
    assert_eq!(store.recovery_report().records_replayed, 0, "redone once");
    let mut out = Vec::new();
    assert!(store.get(b"x", &mut out) && out == b"3");
}
