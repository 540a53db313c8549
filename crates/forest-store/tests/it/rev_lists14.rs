//! Review rev-lists14: the per-thread cached record checksum seed (`wal::record::nonce_crc`)
//! must never leak from one log to another.

use forest_store::file::{CrashMode, SimDir};
use forest_store::{engine_names, BatchOp, Durability, Store, StoreOptions};

fn options(engine: &str, durability: Durability, shards: usize) -> StoreOptions {
    StoreOptions {
        engine: Some(engine.to_string()),
        durability,
        shards,
        switch_engine: false,
        memory_budget_bytes: None,
        map_checkpoint_wal_bytes: None,
    }
}

// Goal: two stores written in turn from one thread (each write's record encoded with its
// own log's nonce right after the other log's), then both lost to a power loss and reopened
// (recovery verifying both logs on one thread), and written and reopened again (new logs,
// new nonces, same thread), lose no acknowledged write. Method: alternate single writes
// and batches between the stores, crash both with unsynced data dropped, compare.
#[test]
fn two_stores_one_thread_alternating_survive_reopen() {
    for engine in engine_names() {
        for (durability, shards) in [(Durability::Sync, 1), (Durability::Group, 3)] {
            let dirs = [SimDir::new(11), SimDir::new(12)];
            let mut stores: Vec<Store> = dirs
                .iter()
                .map(|d| Store::open(d.clone(), options(engine, durability, shards)).expect("open"))
                .collect();
            let mut written = 0u64;
            for round in 0..3u32 {
                for i in 0..200u32 {
                    let s = (i % 2) as usize;
                    let key = format!("k{round}:{i}");
                    if i % 5 == 0 {
                        stores[s]
                            .write_batch(&[
                                BatchOp::Upsert(key.clone().into_bytes(), vec![s as u8; 9]),
                                BatchOp::Upsert(format!("{key}b").into_bytes(), b"v".to_vec()),
                            ])
                            .expect("batch");
                    } else {
                        stores[s]
                            .upsert(key.as_bytes(), &i.to_le_bytes())
                            .expect("upsert");
                    }
                    written += 1;
                }
                let before: Vec<_> = stores.iter().map(|s| s.to_vec()).collect();
                for d in &dirs {
                    d.crash_with(CrashMode::DropUnsynced);
                }
                drop(stores);
                stores = dirs
                    .iter()
                    .map(|d| {
                        Store::open(d.clone(), options(engine, durability, shards)).expect("reopen")
                    })
                    .collect();
                for (s, b) in stores.iter().zip(&before) {
                    assert_eq!(&s.to_vec(), b, "{engine} {durability} round {round}");
                }
            }
            assert!(written > 0);
        }
    }
}
