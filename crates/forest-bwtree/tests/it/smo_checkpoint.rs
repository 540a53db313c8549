//! SMOs and mapping-table checkpoints (issue 17; forest-bwtree `smo_log.rs` "Checkpoints"):
//! a checkpoint plus the LSS records at or after its S rebuild every page, also a page whose
//! newest logged state was only a system-transaction unit below S (a split's Q before its
//! first flush, P's split delta, a new root, a merge's pages), and a merge's commit is a unit
//! of its own between its T2 and T3. Each test ends in a power loss and reads back only what
//! survived.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use forest_bwtree::flush::PageImage;
use forest_bwtree::smo_log::SmoDelta;
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::checkpoint::{read_newest, Checkpoints, Recovery};
use forest_llama::lss::{Lss, LssAddress};
use forest_llama::Pid;

use crate::common::rebuild;
use crate::sys_txn::{check_order, flush_all, key, lss_config, read_log, Entry, Op};

fn config(merge_threshold: usize) -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 8,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold,
    }
}

/// A tree on an LSS in `sim` using checkpoints in `ckpt`.
fn tree(sim: &SimDir, ckpt: &SimDir, merge_threshold: usize) -> Arc<BwTree> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let lss = Arc::new(
        Lss::open(dir, lss_config(), LssAddress::current(0))
            .unwrap()
            .0,
    );
    let tree = BwTree::with_config(config(merge_threshold))
        .unwrap()
        .with_lss(lss, None)
        .unwrap();
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt.clone())).unwrap();
    tree.use_map_checkpoints(Arc::new(checkpoints)).unwrap();
    Arc::new(tree)
}

/// Every live page's image, from memory.
fn images(tree: &BwTree) -> BTreeMap<Pid, PageImage> {
    tree.page_ids()
        .into_iter()
        .map(|pid| (pid, tree.page_image(pid).unwrap()))
        .collect()
}

/// Power loss, then recovery's page rule (forest-llama `checkpoint::Recovery`) from the
/// newest checkpoint and a scan from its S: every page of `want` must rebuild to its image.
/// Returns the reopened LSS.
fn crash_and_check(
    tree: Arc<BwTree>,
    sim: &SimDir,
    ckpt: &SimDir,
    want: &BTreeMap<Pid, PageImage>,
) -> Lss {
    let lss = Arc::clone(tree.lss().unwrap());
    let stable = lss.hi_stable();
    sim.crash();
    ckpt.crash();
    drop(tree);
    drop(lss);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let (lss, _) = Lss::open(dir, lss_config(), stable).unwrap();
    let (_, checkpoint) = read_newest(ckpt).unwrap().checkpoint.expect("a checkpoint");
    let mut recovery = Recovery::from_checkpoint(&checkpoint);
    lss.scan(checkpoint.start, |at, header, _| {
        recovery.apply_piece(at, header);
        Ok(())
    })
    .unwrap();
    for (&pid, image) in want {
        let at = recovery.address_of(pid).unwrap_or_else(|| {
            panic!(
                "page {pid} (level {}, low {:?}): no entry and no piece at or after S {}",
                image.level,
                String::from_utf8_lossy(&image.low),
                checkpoint.start
            )
        });
        assert_eq!(
            &rebuild(&lss, pid, at),
            image,
            "page {pid} rebuilt from {at}"
        );
    }
    lss
}

// Goal: a checkpoint taken right after a split whose Q was never flushed rebuilds every page
// (note15: "a split's Q before its first flush" had only its unit below S, so recovery lost
// Q, and P's split, and the new root over them). Method: 8 keys on one leaf, flushed; 4 more
// split it (T1 with Q's image, the new root's unit), no flush; a checkpoint; power loss; the
// pages rebuilt by recovery's rule from the checkpoint and the records from S.
#[test]
fn a_checkpoint_right_after_an_unflushed_split_rebuilds_every_page() {
    let (sim, ckpt) = (SimDir::new(161), SimDir::new(162));
    let t = tree(&sim, &ckpt, 0);
    for i in 0..8 {
        t.upsert(&key(i), b"first").unwrap();
    }
    flush_all(&t);
    for i in 8..12 {
        t.upsert(&key(i), b"second").unwrap();
    }
    assert!(t.page_ids().len() >= 3, "the leaf split and a root grew");
    let want = images(&t);
    let info = t.take_map_checkpoint(0).unwrap();
    assert!(info.start.offset() > 0, "S lies after the split's units");
    // Writes after the checkpoint that are never flushed: recovery is not asked for them.
    crash_and_check(t, &sim, &ckpt, &want);
}

// Goal: a merge's commit CAS is logged: a unit {merge commit on R} lies after the merge's T2
// and before its T3 in what survives a power loss, and a checkpoint after merges rebuilds
// every page. Method: 64 keys on 8-record pages, flushed; most removed (merges, a root
// collapse perhaps), no flush; a checkpoint; an Mk-Stable; power loss; the log checked
// (`check_order`, and each node merge's R committed between T2 and T3), then recovery.
#[test]
fn a_committed_merge_survives_a_power_loss() {
    let (sim, ckpt) = (SimDir::new(163), SimDir::new(164));
    let t = tree(&sim, &ckpt, 3);
    for i in 0..64 {
        t.upsert(&key(i), b"v").unwrap();
    }
    flush_all(&t);
    for i in 0..64 {
        if i % 8 != 0 {
            t.remove(&key(i));
        }
    }
    let merges = t.stats().counter("merges").unwrap();
    assert!(merges >= 2, "the removes merged pages ({merges})");
    let want = images(&t);
    t.take_map_checkpoint(0).unwrap();
    let lss = crash_and_check(t, &sim, &ckpt, &want);
    let log = read_log(&lss);
    let (_, _, logged_merges) = check_order(&log);
    assert_eq!(logged_merges as u64, merges, "every merge's T3 survived");
    let mut commits: BTreeMap<Pid, usize> = BTreeMap::new();
    let mut node_merges = 0;
    for (i, (at, entry)) in log.iter().enumerate() {
        let Entry::Unit(ops) = entry else { continue };
        for op in ops {
            match op {
                Op::Delta(r, SmoDelta::MergeCommit) => {
                    commits.insert(*r, i);
                }
                Op::Delta(_, SmoDelta::NodeMerge { right, .. }) => {
                    assert!(
                        commits.get(right).is_some_and(|&c| c < i),
                        "T3 at {at} merges R {right} with no commit unit before it"
                    );
                    node_merges += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(node_merges as u64, merges);
}
