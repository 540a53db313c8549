//! Opening a Bw-tree from its LSS (issue 17 "Recovery", `src/recover.rs`): the mapping table
//! from the newest checkpoint and the scan from S, pages loaded lazily, splits and root
//! growth after S rebuilt from their committed units, and a second generation on top.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_file::{Dir, SimDir};
use forest_llama::lss::LssConfig;
use forest_llama::recover::{open_recovering, RecoveredMap};

use crate::common::{contents, flush_all};

fn config() -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 16,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold: 0,
    }
}

fn lss_config() -> LssConfig {
    LssConfig {
        segment_bytes: 64 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("v{round}-{i}").into_bytes()
}

/// Opens the tree in the two simulated directories, with its checkpoints in use.
fn open(lss_sim: &SimDir, ckpt_sim: &SimDir, budget: Option<u64>) -> (BwTree, RecoveredMap) {
    let lss_dir: Arc<dyn Dir> = Arc::new(lss_sim.clone());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(ckpt_sim.clone());
    let (lss, checkpoints, map) = open_recovering(lss_dir, lss_config(), ckpt_dir).unwrap();
    let tree = BwTree::open_recovered(config(), Arc::new(lss), &map, budget).unwrap();
    tree.use_map_checkpoints(Arc::new(checkpoints)).unwrap();
    (tree, map)
}

/// Closes the tree's LSS: everything posted becomes durable (a clean close of the LSS, the
/// tree's unflushed writes dropped as a crash drops them).
fn close(tree: BwTree) {
    let lss = Arc::clone(tree.lss().unwrap());
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();
}

// Goal: a tree reopened from a checkpoint and the scan from S holds every write a piece or a
// committed unit holds: the flushed first half exactly; of the unflushed second half, those
// the splits after S logged in their new pages' images (units rebuilt at open), with the
// root grown after S; nothing else, never a wrong value, keys in order; a second generation
// (writes, flush, checkpoint, close) reopens with all of it. Method: 300 writes, flush,
// checkpoint; 300 more unflushed (splits and root growth after S); close the LSS; reopen;
// compare with the writes; repeat on the reopened tree.
#[test]
fn reopen_applies_pieces_and_units_after_s() {
    let lss_sim = SimDir::new(1);
    let ckpt_sim = SimDir::new(2);
    let (tree, map) = open(&lss_sim, &ckpt_sim, None);
    assert!(map.pages.is_empty());
    let mut written = BTreeMap::new();
    for i in 0..300u32 {
        tree.upsert_with_lsn(&key(i), &value(i, 0), 0).unwrap();
        written.insert(key(i), value(i, 0));
    }
    flush_all(&tree);
    tree.take_map_checkpoint(5).unwrap();
    let flushed = written.clone();
    for i in 300..2000u32 {
        tree.upsert_with_lsn(&key(i), &value(i, 0), 0).unwrap();
        written.insert(key(i), value(i, 0));
    }
    close(tree);

    let (tree, map) = open(&lss_sim, &ckpt_sim, None);
    assert_eq!(map.rssp(), 5);
    assert!(
        !map.unit_deltas.is_empty(),
        "splits after S left unit deltas"
    );
    assert!(
        map.newest_by_kind
            .contains_key(&forest_bwtree::smo_log::kind::ROOT),
        "the root grew after S"
    );
    let got = contents(&tree);
    for (k, v) in &flushed {
        assert_eq!(got.get(k), Some(v), "flushed key {k:?}");
        assert_eq!(tree.try_get(k).unwrap().as_ref(), Some(v));
    }
    for (k, v) in &got {
        assert_eq!(written.get(k), Some(v), "key {k:?} never written so");
        assert_eq!(tree.try_get(k).unwrap().as_ref(), Some(v));
    }
    assert!(
        got.len() > flushed.len(),
        "units brought unflushed writes back"
    );

    // Second generation on the recovered tree.
    let mut expected = got;
    for i in 2000..2500u32 {
        tree.upsert_with_lsn(&key(i), &value(i, 1), 0).unwrap();
        expected.insert(key(i), value(i, 1));
    }
    for i in (0..300u32).step_by(7) {
        tree.upsert_with_lsn(&key(i), &value(i, 2), 0).unwrap();
        expected.insert(key(i), value(i, 2));
    }
    flush_all(&tree);
    tree.take_map_checkpoint(9).unwrap();
    close(tree);
    let (tree, map) = open(&lss_sim, &ckpt_sim, None);
    assert_eq!(map.rssp(), 9);
    assert_eq!(contents(&tree), expected);
}

// Goal: with a memory budget of a few pages the reopened tree loads pages on first use (none
// at open) and holds every flushed write. Method: write with a small budget (pages evicted),
// flush, checkpoint, close; reopen with the budget; read every key; count loads.
#[test]
fn reopen_with_a_small_budget_loads_pages_lazily() {
    let lss_sim = SimDir::new(3);
    let ckpt_sim = SimDir::new(4);
    let (tree, _) = open(&lss_sim, &ckpt_sim, Some(8 << 10));
    let mut written = BTreeMap::new();
    for i in 0..3000u32 {
        let k = key(i * 7919 % 3000);
        tree.upsert_with_lsn(&k, &value(i, 0), 0).unwrap();
        written.insert(k, value(i, 0));
    }
    flush_all(&tree);
    tree.take_map_checkpoint(1).unwrap();
    close(tree);
    let (tree, map) = open(&lss_sim, &ckpt_sim, Some(8 << 10));
    assert!(map.unit_deltas.is_empty());
    let loads = |t: &BwTree| t.evict_stats().unwrap().loads.get();
    assert_eq!(loads(&tree), 0, "no page read at open");
    for (k, v) in &written {
        assert_eq!(tree.try_get(k).unwrap().as_ref(), Some(v), "{k:?}");
    }
    assert!(loads(&tree) > 0);
    assert_eq!(contents(&tree), written);
}

// Goal: after `flush_resident_pages` and a checkpoint with RSSP = ESL + 1, every write below
// the RSSP comes back from the LSS alone (the store's map checkpoint, forest-store
// `llama.rs` "Recovery"), and none above the ESL was written. Method: 300 writes with LSNs
// 1..=300 (splits included) and ESL 150; the pass, the checkpoint with RSSP 151, a close
// that drops the tree's unflushed state; reopen: keys 0..150 hold their values, no key
// above holds a value it was given above the ESL.
#[test]
fn flush_resident_pages_puts_every_write_below_the_rssp_in_a_piece() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let lss_sim = SimDir::new(7);
    let ckpt_sim = SimDir::new(8);
    let (tree, _) = open(&lss_sim, &ckpt_sim, None);
    let esl = Arc::new(AtomicU64::new(0));
    let tree = tree.with_esl_source(esl.clone());
    for i in 0..300u32 {
        tree.upsert_with_lsn(&key(i), &value(i, 0), u64::from(i) + 1)
            .unwrap();
    }
    esl.store(150, Ordering::SeqCst);
    let flushed = tree.flush_resident_pages().unwrap();
    assert!(flushed > 0, "nothing flushed");
    tree.take_map_checkpoint(151).unwrap();
    close(tree);
    let (tree, map) = open(&lss_sim, &ckpt_sim, None);
    assert_eq!(map.rssp(), 151);
    let all = contents(&tree);
    for i in 0..150u32 {
        assert_eq!(
            all.get(&key(i)),
            Some(&value(i, 0)),
            "key {i} below the RSSP"
        );
    }
    for i in 150..300u32 {
        assert!(
            !all.contains_key(&key(i)),
            "key {i} above the ESL was flushed"
        );
    }
    close(tree);
}

/// Bytes of the segment files in `sim` (the LSS as the disk holds it).
fn segment_file_bytes(sim: &SimDir) -> u64 {
    sim.list()
        .unwrap()
        .iter()
        .filter(|name| forest_llama::lss::segment::parse_segment_file_name(name).is_some())
        .map(|name| sim.open(name).unwrap().len().unwrap())
        .sum()
}

/// Overwrites every key `rounds` times with 200-byte values (each round flushed whole, then a checkpoint and a
/// cleaning pass; two more checkpoints let the cleaner remove what it emptied).
fn overwrite_and_clean(
    tree: &BwTree,
    keys: u32,
    rounds: std::ops::Range<u32>,
    clean: bool,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut written = BTreeMap::new();
    for round in rounds {
        for i in 0..keys {
            let mut v = value(i, round);
            v.resize(200, b'.');
            tree.upsert_with_lsn(&key(i), &v, 0).unwrap();
            written.insert(key(i), v);
        }
        flush_all(tree);
        for _ in 0..3 {
            tree.take_map_checkpoint(0).unwrap();
            if clean {
                tree.clean_to_target().unwrap();
            }
        }
    }
    written
}

// Goal: the segments an earlier run left are cleaned after a recovering open (issue 17, the
// space map rebuilt at open: forest-llama `recover.rs` step 5): overwriting every key brings
// the LSS back under its space target. Before, their live bytes were unknown, they were
// never victims, and the LSS stayed at what the earlier run left. Method: 64 KiB segments;
// 600 keys overwritten 8 times, every page flushed each round, no cleaning (the LSS many
// times its live bytes); close; reopen; 4 rounds of overwriting with checkpoints and
// cleaning; the segment files' bytes end within 2x live (the default target) plus four
// segments (the log's end and what the two kept checkpoints pin); every key holds its last
// value.
#[test]
fn segments_from_before_the_open_are_cleaned_after_it() {
    let lss_sim = SimDir::new(11);
    let ckpt_sim = SimDir::new(12);
    let (tree, _) = open(&lss_sim, &ckpt_sim, None);
    overwrite_and_clean(&tree, 600, 0..8, false);
    close(tree);
    let before = segment_file_bytes(&lss_sim);

    let (tree, map) = open(&lss_sim, &ckpt_sim, None);
    let rebuilt = map.space.clone().expect("the space map is rebuilt at open");
    assert_eq!(rebuilt.first_segment, 0);
    assert!(rebuilt.pieces > 0 && rebuilt.live_bytes > 0, "{rebuilt:?}");
    let written = overwrite_and_clean(&tree, 600, 8..12, true);
    // The cleaner's background rhythm: a checkpoint and a pass, until nothing more goes.
    for _ in 0..40 {
        tree.take_map_checkpoint(0).unwrap();
        tree.clean_to_target().unwrap();
    }
    let lss = Arc::clone(tree.lss().unwrap());
    let (after, live) = (segment_file_bytes(&lss_sim), lss.live_bytes());
    let segment = lss_config().segment_bytes;
    eprintln!(
        "LSS files: {before} bytes at close, {after} after reopen and cleaning; live {live}; \
         rebuilt at open: {rebuilt:?}; cleaned {:?}",
        tree.clean_stats().unwrap().segments_cleaned.get()
    );
    assert!(
        after <= 2 * live + 4 * segment,
        "the LSS holds {after} bytes for {live} live (it held {before} at close): the \
         segments written before the open were not cleaned"
    );
    assert_eq!(contents(&tree), written);
}
