//! The LSS cleaner racing updates and loads of the page it moves, reached on purpose with
//! pause points (forest-llama's `clean:relocated`: the image of an evicted page is stable,
//! before the CAS that switches its word; forest-bwtree's `load:word-read`: a reader read an
//! evicted page's address, before reading its pieces; `clean:before-remove`: the victim holds
//! no live piece, before its file is removed). Nothing is lost: a relocation CAS that loses
//! to a load makes the cleaner write a fresh image of the resident page instead, and a reader
//! whose segment was removed under it reads the page's new address.
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test it -- clean_pause::`.
//! The hook is process-wide, so all scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::{contents, flush_resident};
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::segment_file_name;
use forest_llama::lss::{Lss, LssAddress, LssConfig};
use forest_llama::Pid;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("v{round}-{i}-").into_bytes();
    v.resize(40, b'x');
    v
}

/// (tree, model, its disk, the evicted page, the victim segment, a key on the page).
type Setup = (
    Arc<BwTree>,
    BTreeMap<Vec<u8>, Vec<u8>>,
    SimDir,
    Pid,
    u64,
    u32,
);

/// A tree of 400 keys on 8-record pages over 16 KiB segments, with one leaf evicted whose
/// address lies in a segment the cleaner may pick.
fn setup(seed: u64) -> Setup {
    let sim = SimDir::new(seed);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let config = LssConfig {
        segment_bytes: 16 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let lss = Arc::new(Lss::open(dir, config, LssAddress::current(0)).unwrap().0);
    let tree = Arc::new(
        BwTree::with_config(BwTreeConfig {
            max_records_per_page: 8,
            consolidate_threshold: 4,
            read_consolidate_threshold: 4,
            merge_threshold: 0,
        })
        .unwrap()
        .with_lss(Arc::clone(&lss), None)
        .unwrap(),
    );
    let mut model = BTreeMap::new();
    for i in 0..400 {
        tree.upsert(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    flush_resident(&tree);
    // The leaf holding key 5, evicted; later writes elsewhere move Hi-Stable past its segment.
    let k = 5;
    let pid = tree
        .page_ids()
        .into_iter()
        .find(|&pid| {
            tree.page_image(pid).is_some_and(|img| {
                img.level == 0 && img.records.iter().any(|(rk, _)| *rk == key(k))
            })
        })
        .unwrap();
    assert!(tree.evict_pid(pid).unwrap());
    let victim = lss.segment_of(tree.evicted_at(pid).unwrap());
    let mut round = 1;
    while !lss.clean_candidates().iter().any(|(s, _)| *s == victim) {
        for i in 200..400 {
            tree.upsert(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        flush_resident(&tree);
        round += 1;
    }
    (tree, model, sim, pid, victim, k)
}

#[test]
fn relocation_races_an_update_a_load_and_a_reader_of_the_removed_segment() {
    let _turn = take_turn();

    // 1. An update of the page between its relocated image and the CAS: the update loads the
    // page from its old address (still there), the CAS loses, the cleaner writes a fresh
    // image of the resident page, removes the victim, and the update stays.
    let (t, mut model, sim, pid, victim, k) = setup(1);
    let gate = arm("clean:relocated");
    let c = Arc::clone(&t);
    let cleaner = spawn_pauser(move || c.clean_segment(victim).unwrap());
    gate.wait_paused();
    t.upsert(&key(k), b"updated").unwrap();
    model.insert(key(k), b"updated".to_vec());
    gate.release();
    assert!(cleaner.join().unwrap(), "the victim is removed");
    disarm();
    let stats = t.clean_stats().unwrap();
    assert_eq!(stats.relocation_races.get(), 1);
    assert!(t.evicted_at(pid).is_none(), "the update loaded the page");
    assert!(!sim.exists(&segment_file_name(victim)).unwrap());
    assert_eq!(
        t.try_get(&key(k)).unwrap().as_deref(),
        Some(&b"updated"[..])
    );
    assert_eq!(contents(&t), model);

    // 2. A load (a read) of the page at the same point: the same, with nothing changed.
    let (t, model, sim, pid, victim, k) = setup(2);
    let gate = arm("clean:relocated");
    let c = Arc::clone(&t);
    let cleaner = spawn_pauser(move || c.clean_segment(victim).unwrap());
    gate.wait_paused();
    assert_eq!(t.try_get(&key(k)).unwrap(), model.get(&key(k)).cloned());
    assert!(t.evicted_at(pid).is_none());
    gate.release();
    assert!(cleaner.join().unwrap());
    disarm();
    assert_eq!(t.clean_stats().unwrap().relocation_races.get(), 1);
    assert!(!sim.exists(&segment_file_name(victim)).unwrap());
    assert_eq!(contents(&t), model);

    // 3. A reader that read the page's old address, stopped before reading its pieces,
    // while the cleaner relocates the page and removes the segment: its read fails, it sees
    // the word changed, and reads the page at its new address.
    let (t, model, sim, pid, victim, k) = setup(3);
    let old = t.evicted_at(pid).unwrap();
    let gate = arm("load:word-read");
    let r = Arc::clone(&t);
    let reader = spawn_pauser(move || r.try_get(&key(k)).unwrap());
    gate.wait_paused();
    assert!(t.clean_segment(victim).unwrap());
    assert!(!sim.exists(&segment_file_name(victim)).unwrap());
    let moved = t.evicted_at(pid).unwrap();
    assert!(moved > old && t.lss().unwrap().segment_of(moved) != victim);
    gate.release();
    assert_eq!(reader.join().unwrap(), model.get(&key(k)).cloned());
    disarm();
    assert_eq!(t.clean_stats().unwrap().relocations.get(), 1);
    assert_eq!(contents(&t), model);

    // 4. Between relocation and segment reuse (`clean:before-remove`): the page moved is
    // updated, flushed and evicted again meanwhile; the victim is still removed and every
    // record reads back.
    let (t, mut model, sim, pid, victim, k) = setup(4);
    let gate = arm("clean:before-remove");
    let c = Arc::clone(&t);
    let cleaner = spawn_pauser(move || c.clean_segment(victim).unwrap());
    gate.wait_paused();
    assert!(sim.exists(&segment_file_name(victim)).unwrap());
    t.upsert(&key(k), b"again").unwrap();
    model.insert(key(k), b"again".to_vec());
    assert!(t.evict_pid(pid).unwrap());
    gate.release();
    assert!(cleaner.join().unwrap());
    disarm();
    assert!(!sim.exists(&segment_file_name(victim)).unwrap());
    assert_eq!(contents(&t), model);
}
