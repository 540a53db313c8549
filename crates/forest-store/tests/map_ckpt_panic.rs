//! A panic in a scheduled map checkpoint (review rev-mapdef F5). Its own test binary: the
//! pause hook is process-wide, and another test's checkpointer must not meet the panic.
#![cfg(feature = "pause-points")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forest_store::{Durability, Store, StoreOptions};

// Goal: a checkpointer that panics once is recorded as `map_checkpoint_error` and later
// scheduled checkpoints still run (before the fix `running` stayed claimed and they stopped
// silently). Method: panic at `store:map-checkpoint-synced` on the checkpointer once, keep
// writing until the error shows and the checkpoint count grows past it.
#[test]
fn a_panicking_map_checkpoint_is_recorded_and_later_ones_run() {
    let fired = Arc::new(AtomicBool::new(false));
    let theirs = Arc::clone(&fired);
    forest_core::pause::set_pause_hook(Some(Arc::new(move |name| {
        if name == "store:map-checkpoint-synced"
            && std::thread::current().name() == Some("map-checkpointer")
            && !theirs.swap(true, Ordering::SeqCst)
        {
            panic!("injected checkpointer panic");
        }
    })));
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        engine: Some("bwtree".into()),
        durability: Durability::Group,
        memory_budget_bytes: Some(64 << 10),
        shards: 2,
        map_checkpoint_wal_bytes: Some(4 << 10),
        ..StoreOptions::default()
    };
    let store = Store::open_path(tmp.path(), options).expect("open");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut i = 0u32;
    let mut after_panic = None;
    loop {
        let key = format!("key{:06}", i % 3000);
        store.upsert(key.as_bytes(), &[7u8; 64]).expect("put");
        i += 1;
        let stats = store.stats();
        let error = stats
            .memory
            .as_ref()
            .and_then(|m| m.map_checkpoint_error.clone());
        match (error, after_panic) {
            (Some(e), None) => {
                assert!(
                    e.contains("panic"),
                    "the recorded error names the panic: {e}"
                );
                after_panic = Some(stats.checkpoint_count);
            }
            (_, Some(count)) if stats.checkpoint_count > count + 1 => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled map checkpoint after the panic (error seen: {}, fired: {})",
            after_panic.is_some(),
            fired.load(Ordering::SeqCst)
        );
        if i.is_multiple_of(256) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    forest_core::pause::set_pause_hook(None);
    store.close().expect("close");
}
