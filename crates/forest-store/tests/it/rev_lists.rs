//! Review rev-lists (session 15, branch h-lists): `BatchOp::RemovePresent` on every store
//! engine, on present and absent keys, alone and with other ops of the same key in one
//! batch (small units of up to four ops and larger ones), before and after a reopen that
//! replays the logs.

use std::collections::BTreeMap;

use forest_core::Order;
use forest_store::{BatchOp, Durability, Store, StoreOptions};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(engine: &str, budget: Option<u64>) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        durability: Durability::Group,
        memory_budget_bytes: budget,
        ..StoreOptions::default()
    }
}

fn engines() -> Vec<(String, Option<u64>)> {
    vec![
        ("lockbtree".into(), None),
        ("masstree".into(), None),
        ("bwtree".into(), None),
        ("bwtree".into(), Some(1 << 20)),
        ("tsbtree".into(), None),
        (
            "bztree-pm:persist=msync,heap_mib=32,descriptors=512,node=512".into(),
            None,
        ),
        (
            "bztree-pm:heap_mib=32,descriptors=512,node=512".into(),
            None,
        ),
    ]
}

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn rp(s: &str) -> BatchOp {
    BatchOp::RemovePresent(k(s))
}

fn as_map(store: &Store) -> Map {
    store.to_vec().into_iter().collect()
}

/// Applies `ops` to `model` as the store documents them.
fn apply(model: &mut Map, ops: &[BatchOp]) {
    for op in ops {
        match op {
            BatchOp::Insert(key, v) => {
                model.entry(key.clone()).or_insert_with(|| v.clone());
            }
            BatchOp::Upsert(key, v) => {
                model.insert(key.clone(), v.clone());
            }
            BatchOp::Update(key, v) => {
                if let Some(old) = model.get_mut(key) {
                    *old = v.clone();
                }
            }
            BatchOp::Remove(key) | BatchOp::RemovePresent(key) => {
                model.remove(key);
            }
        }
    }
}

// Goal: on every engine a store can hold, RemovePresent leaves the store exactly as Remove
// would (present or absent key, twice in one batch, followed by an insert of the same key),
// and so does the replay of its records after a reopen. Passes on the branch (a soundness
// check, kept).
#[test]
fn remove_present_on_every_engine_matches_remove_after_reopen() {
    for (engine, budget) in engines() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut model = Map::new();
        let batches: Vec<Vec<BatchOp>> = vec![
            vec![
                BatchOp::Upsert(k("a"), k("1")),
                BatchOp::Upsert(k("b"), k("2")),
                BatchOp::Upsert(k("c"), k("3")),
            ],
            vec![rp("a")],
            vec![rp("absent")],
            vec![rp("b"), rp("b")],
            vec![rp("x"), BatchOp::Insert(k("x"), k("new"))],
            vec![rp("c"), BatchOp::Insert(k("c"), k("again"))],
            // Over four ops: the overlay path.
            vec![
                rp("y"),
                BatchOp::Insert(k("y"), k("y1")),
                rp("y"),
                BatchOp::Update(k("y"), k("no")),
                rp("z"),
                rp("z"),
                BatchOp::Upsert(k("w"), k("w1")),
            ],
        ];
        {
            let store = Store::open_path(tmp.path(), options(&engine, budget)).expect("open");
            for ops in &batches {
                let changed = store.write_batch(ops).expect("write");
                for (op, c) in ops.iter().zip(&changed) {
                    if matches!(op, BatchOp::RemovePresent(_)) {
                        assert!(c, "{engine}: RemovePresent is reported a change");
                    }
                }
                apply(&mut model, ops);
                assert_eq!(as_map(&store), model, "{engine}: after {ops:?}");
            }
            assert_eq!(
                store.stats().index.key_count,
                model.len() as u64,
                "{engine}: key count"
            );
            // Dropped without close: the reopen replays the logs.
        }
        let store = Store::open_path(tmp.path(), options(&engine, budget)).expect("reopen");
        assert_eq!(as_map(&store), model, "{engine}: after reopen");
        assert_eq!(
            store.stats().index.key_count,
            model.len() as u64,
            "{engine}: key count after reopen"
        );
        store.close().expect("close");
        let store = Store::open_path(tmp.path(), options(&engine, budget)).expect("reopen 2");
        assert_eq!(as_map(&store), model, "{engine}: after close and reopen");
    }
}

// F1: the doc of `BatchOp::RemovePresent` says "if the key was absent after all, the store is
// unchanged (the logged removal replays as nothing)". On the temporal engine it is changed:
// a delete version is written at a new timestamp for a key that never existed, and it shows
// in the key's history (and survives a reopen), while `Remove` of the same absent key writes
// nothing and takes no timestamp. Fixed (branch f-lists): a temporal store reads the key first.
#[test]
fn remove_present_of_absent_key_leaves_no_version_on_tsbtree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(tmp.path(), options("tsbtree", None)).expect("open");
    store.put_ts(b"other", b"v").expect("put");
    let mut remove = forest_store::WriteBatch::new();
    remove.remove(b"never");
    let (_, ts_remove) = store.write_ts(&remove).expect("remove");
    assert_eq!(ts_remove, None, "Remove of an absent key writes nothing");
    let mut present = forest_store::WriteBatch::new();
    present.push(BatchOp::RemovePresent(b"never".to_vec()));
    let (_, ts) = store.write_ts(&present).expect("remove present");
    let now = store.now().expect("now");
    let history = store
        .history(b"never", 0, now, Order::Ascending, 10)
        .expect("history");
    assert_eq!(
        (ts, history),
        (None, vec![]),
        "RemovePresent of an absent key left a version (the store changed)"
    );
}
