//! Review rev-bz (session 16) of branch h-bz.
#![allow(clippy::unwrap_used)]

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::{NoPersist, Pool, PoolConfig};

fn key(i: u32) -> [u8; 8] {
    u64::from(i).to_be_bytes()
}

/// `rev_bzperf::huge_free_space_is_full_leaves`'s tree: 5 000 inserts in hashed order, then the
/// heap's bytes in use.
fn heap_bytes_after_inserts(free_space: usize) -> u64 {
    let config = BzTreeConfig {
        free_space,
        ..BzTreeConfig::default()
    };
    let tree = BzTree::with_config(config).unwrap();
    for i in 0..5_000u32 {
        assert!(tree
            .insert(&key(i.wrapping_mul(2_654_435_761)), &key(i))
            .unwrap());
    }
    tree.memory_in_use()
}

// Goal (rev-bz F1, why `rev_bzperf::huge_free_space_is_full_leaves` fails in the whole suite
// and passes alone, on main as on h-bz): `memory_in_use` counts nodes retired by SMOs whose
// frees still wait for the pool's epoch, and that epoch is crossbeam-epoch's *global*
// collector (`forest-pmwcas/src/reclaim.rs`), so any other thread of the process that is
// pinned (any test running in parallel that touches any PMwCAS pool) holds back the frees
// and changes the figure. Method: the same deterministic tree built twice, once alone and
// once while another thread holds a guard of an unrelated pool; the bytes should be equal.
// Session 20: passes since each pool reclaims through its own collector (forest-pmwcas
// `reclaim.rs`): a thread pinned in another pool no longer holds this tree's frees back.
#[test]
fn rev_bz_memory_in_use_depends_on_other_threads_pins() {
    let alone = heap_bytes_after_inserts(1024);
    let pool = Pool::create_volatile(
        NoPersist,
        PoolConfig {
            partition_count: 1,
            descriptors_per_partition: 4,
            client_words: 0,
            user_words: 8,
            recyclers: vec![],
        },
    )
    .unwrap();
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let guard = pool.pin();
        pinned_tx.send(()).unwrap();
        stop_rx.recv().unwrap();
        drop(guard);
    });
    pinned_rx.recv().unwrap();
    let with_other_pinned = heap_bytes_after_inserts(1024);
    stop_tx.send(()).unwrap();
    other.join().unwrap();
    assert_eq!(
        with_other_pinned, alone,
        "the same tree's heap bytes in use, with another thread of the process pinned vs alone"
    );
}
