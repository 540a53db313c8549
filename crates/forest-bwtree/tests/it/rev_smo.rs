//! Review rev-smo (session 16, branch h-smo, issue 17: SMO steps' Step result, refused
//! units, the checkpoint's SMO barrier, eviction's shape, merge's clean_state): tests that
//! showed a finding, fixed by f-smo (session 17) and run as regression tests.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use forest_bwtree::flush::PageImage;
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::checkpoint::{read_newest, Checkpoints, Recovery};
use forest_llama::lss::{Lss, LssAddress, LssConfig};
use forest_llama::Pid;

use crate::common::rebuild;
use crate::sys_txn::{flush_all, key};

fn small_pages() -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold: 0,
    }
}

fn lss_config(segment_bytes: u64) -> LssConfig {
    LssConfig {
        segment_bytes,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

fn tree_on(sim: &SimDir, segment_bytes: u64) -> Arc<BwTree> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let lss = Arc::new(
        Lss::open(dir, lss_config(segment_bytes), LssAddress::current(0))
            .unwrap()
            .0,
    );
    Arc::new(
        BwTree::with_config(small_pages())
            .unwrap()
            .with_lss(lss, None)
            .unwrap(),
    )
}

fn use_checkpoints(tree: &BwTree, ckpt: &SimDir) {
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt.clone())).unwrap();
    tree.use_map_checkpoints(Arc::new(checkpoints)).unwrap();
}

fn images(tree: &BwTree) -> BTreeMap<Pid, PageImage> {
    tree.page_ids()
        .into_iter()
        .map(|pid| (pid, tree.page_image(pid).unwrap()))
        .collect()
}

/// Power loss; then recovery's page rule from the newest checkpoint and a scan from its S.
/// Returns, per page of `want`, what it rebuilds to (None: no entry and no piece from S).
fn crash_and_rebuild(
    tree: Arc<BwTree>,
    sim: &SimDir,
    ckpt: &SimDir,
    segment_bytes: u64,
    want: &BTreeMap<Pid, PageImage>,
) -> BTreeMap<Pid, Option<PageImage>> {
    let lss = Arc::clone(tree.lss().unwrap());
    let stable = lss.hi_stable();
    sim.crash();
    ckpt.crash();
    drop(tree);
    drop(lss);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let (lss, _) = Lss::open(dir, lss_config(segment_bytes), stable).unwrap();
    let (_, checkpoint) = read_newest(ckpt).unwrap().checkpoint.expect("a checkpoint");
    let mut recovery = Recovery::from_checkpoint(&checkpoint);
    lss.scan(checkpoint.start, |at, header, _| {
        recovery.apply_piece(at, header);
        Ok(())
    })
    .unwrap();
    want.keys()
        .map(|&pid| {
            (
                pid,
                recovery.address_of(pid).map(|at| rebuild(&lss, pid, at)),
            )
        })
        .collect()
}

/// The leaf whose low key is empty (the leftmost leaf).
fn leftmost_leaf(tree: &BwTree) -> Pid {
    tree.page_ids()
        .into_iter()
        .find(|&pid| {
            let image = tree.page_image(pid).unwrap();
            image.level == 0 && image.low.is_empty()
        })
        .unwrap()
}

// rev: F1. Goal: a split the LSS refuses (its Q image larger than a segment: the store runs
// 64 KiB segments with values up to 1 MiB) does not leave a page that grows without bound.
// h-smo aborts the step and leaves the page "oversize, retried by the next writer"; but
// Q's image only grows with the page, so every later insert into it rebuilds Q (O(page)),
// encodes the unit, is refused, and the page takes the record anyway: the page's record
// count, its bytes in memory and each insert's cost grow with every insert; it can no
// longer be flushed (its image is larger than a segment) nor evicted. Before h-smo the
// split ran unlogged (rev-systxn F1) and pages stayed at ~max_records_per_page.
// Method: 64 KiB segments, 8-record pages, 40 keys with 25 KiB values (f-smo, session 17:
// 15 KiB no longer showed it once leaves of large records split past 4 records, since Q's
// 2 or 3 records then fit; with 25 KiB, Q's 3 do not); then every page is flushed.
#[test]
fn rev_f1_a_refused_split_lets_a_page_grow_without_bound() {
    let sim = SimDir::new(1601);
    let t = tree_on(&sim, 64 << 10);
    let value = vec![b'v'; 25 << 10];
    let started = std::time::Instant::now();
    for i in 0..40 {
        t.upsert(&key(i), &value).unwrap();
    }
    let pages = t.page_ids();
    let biggest = pages
        .iter()
        .map(|&pid| t.page_image(pid).unwrap().records.len())
        .max()
        .unwrap();
    let lss = Arc::clone(t.lss().unwrap());
    let flushed = t.flush_page(pages[0], &lss);
    let evicted = t.evict_pid(pages[0]);
    eprintln!(
        "{} pages, biggest holds {biggest} records (max_records_per_page 8); \
         sys_txn_refused {:?}; 40 inserts took {:?}; flush of page {}: {:?}; evict: {:?}",
        pages.len(),
        t.sys_txn_refused(),
        started.elapsed(),
        pages[0],
        flushed.as_ref().map(|_| "ok"),
        evicted,
    );
    for i in 0..40 {
        assert_eq!(t.try_get(&key(i)).unwrap().as_deref(), Some(&value[..]));
    }
    assert!(
        biggest <= 2 * 8,
        "a page holds {biggest} records: every split of it was refused ({:?} refused steps) \
         and it keeps taking records",
        t.sys_txn_refused()
    );
    for pid in t.page_ids() {
        assert!(t.flush_page(pid, &lss).is_ok(), "page {pid} can be flushed");
    }
}

// rev: F2. Goal: a checkpoint names, for every page an SMO unit below S changed, a piece
// that holds that change (`checkpoint_piece`). When the page's flush fails for a reason
// other than a poisoned LSS (its image is larger than a segment: LSS `reserve` answers
// InvalidUse and the LSS stays healthy), `checkpoint_piece` returns the page's older piece
// anyway ("an error: the LSS is poisoned and the checkpoint's last Mk-Stable fails too" --
// not so here), the checkpoint is published, and `forget_units_below` drops the unit.
// Recovery then rebuilds the split leaf from its pre-split image: no high key, no side link
// to Q, so a scan from it never reaches Q's keys. Method: 64 KiB segments; 8 small keys on
// one leaf, flushed; 4 more split it (units logged, nothing flushed); two 40 KiB values
// written to keys of the left leaf (its image no longer fits a segment); a checkpoint;
// power loss; the left leaf rebuilt by recovery's rule. (f-smo2: one 70 KiB value now,
// since two 40 KiB ones split the leaf.)
#[test]
fn rev_f2_checkpoint_names_a_piece_older_than_the_split_when_the_flush_is_refused() {
    const SEGMENT: u64 = 64 << 10;
    let (sim, ckpt) = (SimDir::new(1602), SimDir::new(1603));
    let t = tree_on(&sim, SEGMENT);
    use_checkpoints(&t, &ckpt);
    for i in 0..8 {
        t.upsert(&key(i), b"first").unwrap();
    }
    flush_all(&t);
    for i in 8..12 {
        t.upsert(&key(i), b"second").unwrap();
    }
    assert!(t.page_ids().len() >= 3, "the leaf split and a root grew");
    // f-smo2 (rev-smo2 F1b): two 40 KiB values now split the leaf apart; one value larger
    // than a segment keeps the leaf holding it unflushable.
    let big = vec![b'b'; 70 << 10];
    t.upsert(&key(0), &big).unwrap();
    let p = leftmost_leaf(&t);
    let lss = Arc::clone(t.lss().unwrap());
    assert!(
        t.flush_page(p, &lss).is_err(),
        "precondition: the left leaf's image no longer fits a segment"
    );
    assert!(lss.reserve(16).is_ok(), "the LSS is healthy");
    let want = images(&t);
    let info = t.take_map_checkpoint(0);
    eprintln!("checkpoint: {info:?}");
    if info.is_err() {
        return; // refusing the checkpoint would be sound
    }
    let got = crash_and_rebuild(t, &sim, &ckpt, SEGMENT, &want);
    let p_want = &want[&p];
    let p_got = got[&p].as_ref().expect("the left leaf has an entry");
    eprintln!(
        "left leaf {p}: in memory high {:?} side link {}, rebuilt high {:?} side link {} ({} records)",
        p_want.high.as_deref().map(String::from_utf8_lossy),
        p_want.side_link,
        p_got.high.as_deref().map(String::from_utf8_lossy),
        p_got.side_link,
        p_got.records.len()
    );
    assert_eq!(
        (&p_got.high, p_got.side_link),
        (&p_want.high, p_want.side_link),
        "the checkpoint named the left leaf's pre-split piece: its split (a unit below S) is lost"
    );
}

// rev: F3. Goal: a checkpoint rebuilds every page also when `use_map_checkpoints` is called
// after the tree ran SMOs (e.g. a store that replays its WAL into the tree, or loads, before
// it turns checkpoints on). `smo_step` registers a unit in `unit_pages` only while
// `map_checkpoints` is set, so units committed before are unknown to the walk: a split's Q
// with no piece gets no entry, and P, the root are named by their older pieces.
// Method: the builder's `a_checkpoint_right_after_an_unflushed_split_rebuilds_every_page`
// with `use_map_checkpoints` called after the split instead of before.
#[test]
fn rev_f3_checkpoints_turned_on_after_a_split_lose_it() {
    const SEGMENT: u64 = 256 << 10;
    let (sim, ckpt) = (SimDir::new(1604), SimDir::new(1605));
    let t = tree_on(&sim, SEGMENT);
    for i in 0..8 {
        t.upsert(&key(i), b"first").unwrap();
    }
    flush_all(&t);
    for i in 8..12 {
        t.upsert(&key(i), b"second").unwrap();
    }
    assert!(t.page_ids().len() >= 3, "the leaf split and a root grew");
    use_checkpoints(&t, &ckpt);
    let want = images(&t);
    t.take_map_checkpoint(0).unwrap();
    let got = crash_and_rebuild(t, &sim, &ckpt, SEGMENT, &want);
    for (pid, image) in &want {
        assert_eq!(
            got[pid].as_ref(),
            Some(image),
            "page {pid} (level {}, low {:?}) rebuilt from the checkpoint and the records from S",
            image.level,
            String::from_utf8_lossy(&image.low)
        );
    }
}

// rev: F4. Goal: the checkpoint argument's "a frozen X (the flush refuses it) is a merge's
// R, frozen clean" (docs/ARCHITECTURE.md "SMOs and checkpoints"; `checkpoint_piece`'s
// Frozen arm). A root collapse freezes the root with `remove_node_step` and no
// `clean_state`: the root's newest piece predates the index-term delete (merge T2, a unit
// below S) that left it one child. The walk finds the root registered, its flush refused
// (Frozen), and names that old piece; the merged-away R is free in the same checkpoint.
// Recovery then rebuilds a root whose term leads to a free PID. Method: 12 keys on 8-record
// pages (a root over two leaves), flushed; the right leaf's keys removed (its merge into the
// left one, T2 deletes its term on the root, the root is left with one child and frozen for
// the collapse); paused at `merge:root-remove-installed`, a checkpoint; power loss; the old
// root rebuilt by recovery's rule.
#[cfg(feature = "pause-points")]
#[test]
fn rev_f4_checkpoint_during_a_root_collapse_names_a_root_leading_to_a_free_page() {
    use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
    const SEGMENT: u64 = 256 << 10;
    let _turn = take_turn();
    let (sim, ckpt) = (SimDir::new(1606), SimDir::new(1607));
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let lss = Arc::new(
        Lss::open(dir, lss_config(SEGMENT), LssAddress::current(0))
            .unwrap()
            .0,
    );
    let t = Arc::new(
        BwTree::with_config(BwTreeConfig {
            merge_threshold: 3,
            ..small_pages()
        })
        .unwrap()
        .with_lss(lss, None)
        .unwrap(),
    );
    use_checkpoints(&t, &ckpt);
    for i in 0..12 {
        t.upsert(&key(i), b"v").unwrap();
    }
    let root = t
        .page_ids()
        .into_iter()
        .find(|&pid| t.page_image(pid).unwrap().level == 1)
        .expect("a root over the leaves");
    let terms = t.page_image(root).unwrap().records.len();
    assert_eq!(terms, 2, "a root over two leaves");
    flush_all(&t);
    let gate = arm("merge:root-remove-installed");
    let w = Arc::clone(&t);
    let worker = spawn_pauser(move || {
        for i in 4..12 {
            w.remove(&key(i));
        }
    });
    gate.wait_paused();
    let info = t.take_map_checkpoint(0).unwrap();
    let lss = Arc::clone(t.lss().unwrap());
    let stable = lss.hi_stable();
    sim.crash();
    ckpt.crash();
    gate.release();
    worker.join().unwrap();
    disarm();
    drop(t);
    drop(lss);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let (lss, _) = Lss::open(dir, lss_config(SEGMENT), stable).unwrap();
    let (_, checkpoint) = read_newest(&ckpt)
        .unwrap()
        .checkpoint
        .expect("a checkpoint");
    assert_eq!(checkpoint.start, info.start);
    let mut recovery = Recovery::from_checkpoint(&checkpoint);
    lss.scan(checkpoint.start, |at, header, _| {
        recovery.apply_piece(at, header);
        Ok(())
    })
    .unwrap();
    let at = recovery
        .address_of(root)
        .expect("the old root has an entry");
    let image = rebuild(&lss, root, at);
    let children: Vec<Pid> = image
        .records
        .iter()
        .map(|(_, v)| u64::from_le_bytes(v[..8].try_into().unwrap()))
        .collect();
    eprintln!(
        "recovered root {root}: children {children:?}; free in the checkpoint: {:?}",
        checkpoint.free
    );
    for child in children {
        assert!(
            !recovery.is_free(child) && recovery.address_of(child).is_some(),
            "the recovered root's term leads to page {child}, which recovers free or with no \
             page (free {}, entry {:?}; merged away by a unit below S)",
            recovery.is_free(child),
            recovery.address_of(child)
        );
    }
}
