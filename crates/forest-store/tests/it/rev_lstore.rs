//! Review rev-lstore (issue 17 increment 4): findings proved by tests.

use forest_store::{Durability, Store, StoreOptions};

fn options(engine: &str, switch: bool, budget: Option<u64>) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        switch_engine: switch,
        durability: Durability::Group,
        shards: 1,
        memory_budget_bytes: budget,
        map_checkpoint_wal_bytes: Some(forest_store::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT),
    }
}

// Goal: switching a bztree-pm msync store (whose single writes live only in its tree file,
// no log record) to bwtree with a memory budget keeps every write, as the switch to
// in-memory bwtree does (`pm::prepare` exports the tree). Method: single writes on msync,
// close, reopen as bwtree with and without a budget.
#[test]
fn switching_from_msync_to_bwtree_with_a_budget_keeps_single_writes() {
    let msync = "bztree-pm:persist=msync,heap_mib=32,descriptors=512,node=512";
    for budget in [None, Some(1 << 20)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open_path(tmp.path(), options(msync, false, None)).expect("open");
        for i in 0..50u32 {
            store
                .upsert(format!("k{i:03}").as_bytes(), b"v")
                .expect("upsert");
        }
        store.close().expect("close");
        let store = Store::open_path(tmp.path(), options("bwtree", true, budget)).expect("switch");
        let mut out = Vec::new();
        let found = (0..50u32)
            .filter(|i| store.get(format!("k{i:03}").as_bytes(), &mut out))
            .count();
        assert_eq!(
            found, 50,
            "budget {budget:?}: single writes lost in the switch"
        );
        store.close().expect("close");
    }
}
