//! Eviction and loading racing other threads, reached on purpose with pause points
//! (forest-llama's `evict:stable`: a page's newest piece is stable, before the swap-out CAS;
//! forest-bwtree's `load:rebuilt`: an evicted page is rebuilt from its pieces, before the
//! install CAS): an update, a split or a consolidation of the page makes the swap-out CAS
//! lose and nothing is lost; of two readers loading one page, one installs its copy and both
//! see the records.
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test evict_pause`. The hook
//! is process-wide, so all scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::{contents, counter};
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::conformance::pause::{
    arm, arm_gates, disarm, spawn_named, spawn_pauser, take_turn,
};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress, LssConfig};
use forest_llama::Pid;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn tree(seed: u64, read_consolidate_threshold: u32) -> Arc<BwTree> {
    let dir: Arc<dyn Dir> = Arc::new(SimDir::new(seed));
    let config = LssConfig {
        segment_bytes: 256 << 10,
        buffer_bytes: 8 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let lss = Arc::new(Lss::open(dir, config, LssAddress::current(0)).unwrap().0);
    let config = BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 8,
        read_consolidate_threshold,
        merge_threshold: 0,
    };
    Arc::new(
        BwTree::with_config(config)
            .unwrap()
            .with_lss(lss, None)
            .unwrap(),
    )
}

/// Starts `evict_pid(pid)` on the pauser thread, stopped before its swap-out CAS.
fn paused_eviction(
    tree: &Arc<BwTree>,
    pid: Pid,
) -> (
    Arc<forest_core::conformance::pause::Gate>,
    std::thread::JoinHandle<bool>,
) {
    let gate = arm("evict:stable");
    let t = Arc::clone(tree);
    let pauser = spawn_pauser(move || t.evict_pid(pid).unwrap());
    gate.wait_paused();
    (gate, pauser)
}

#[test]
fn eviction_and_loads_race_updates_splits_consolidations_and_each_other() {
    let _turn = take_turn();

    // 1. An update between the stable piece and the swap-out: the CAS loses, the update
    // stays, and the retry evicts the page with it.
    let t = tree(1, 8);
    let mut model = BTreeMap::new();
    for i in 0..3 {
        t.upsert(&key(i), b"a").unwrap();
        model.insert(key(i), b"a".to_vec());
    }
    let pid = t.page_ids()[0];
    let (gate, pauser) = paused_eviction(&t, pid);
    t.upsert(&key(1), b"updated").unwrap();
    model.insert(key(1), b"updated".to_vec());
    gate.release();
    assert!(pauser.join().unwrap(), "the retry evicts");
    disarm();
    assert_eq!(counter(&t, "evict_cas_failures"), 1);
    assert!(t.evicted_at(pid).is_some());
    assert_eq!(contents(&t), model);

    // 2. A split of the page: the CAS loses; both halves keep their records.
    let t = tree(2, 8);
    let mut model = BTreeMap::new();
    for i in 0..4 {
        t.upsert(&key(i * 10), b"a").unwrap();
        model.insert(key(i * 10), b"a".to_vec());
    }
    let pid = t.page_ids()[0];
    let (gate, pauser) = paused_eviction(&t, pid);
    for i in 0..3 {
        t.upsert(&key(i * 10 + 5), b"b").unwrap();
        model.insert(key(i * 10 + 5), b"b".to_vec());
    }
    assert!(counter(&t, "splits") > 0);
    gate.release();
    pauser.join().unwrap();
    disarm();
    assert!(counter(&t, "evict_cas_failures") >= 1);
    assert_eq!(contents(&t), model);
    for pid in t.page_ids() {
        t.evict_pid(pid).unwrap();
    }
    assert_eq!(contents(&t), model, "after evicting every page");

    // 3. A consolidation by a reader (threshold 0: every read of a chain consolidates): the
    // page's state is replaced by an equal one, and the CAS loses all the same.
    let t = tree(3, 0);
    let mut model = BTreeMap::new();
    for i in 0..3 {
        t.upsert(&key(i), b"c").unwrap();
        model.insert(key(i), b"c".to_vec());
    }
    let pid = t.page_ids()[0];
    let consolidations = counter(&t, "consolidations");
    let (gate, pauser) = paused_eviction(&t, pid);
    let mut out = Vec::new();
    assert!(t.get(&key(0), &mut out));
    assert!(counter(&t, "consolidations") > consolidations);
    gate.release();
    assert!(pauser.join().unwrap());
    disarm();
    assert_eq!(counter(&t, "evict_cas_failures"), 1);
    assert_eq!(contents(&t), model);

    // 4. Two readers load one evicted page: the first stops after rebuilding it, the second
    // loads and installs; the first's CAS loses, it drops its copy, and both read the key.
    let t = tree(4, 8);
    for i in 0..3 {
        t.upsert(&key(i), b"d").unwrap();
    }
    let pid = t.page_ids()[0];
    assert!(t.evict_pid(pid).unwrap());
    let [gate] = arm_gates([("load:rebuilt", "reader-a")]);
    let ta = Arc::clone(&t);
    let reader_a = spawn_named("reader-a", move || ta.try_get(&key(2)).unwrap());
    gate.wait_paused();
    assert_eq!(t.try_get(&key(2)).unwrap(), Some(b"d".to_vec()));
    gate.release();
    assert_eq!(reader_a.join().unwrap(), Some(b"d".to_vec()));
    disarm();
    assert_eq!(counter(&t, "loads"), 1);
    assert_eq!(counter(&t, "load_races"), 1);
    assert_eq!(t.resident_bytes(), t.resident_bytes_walked());
}
