//! Crash points of the SMOs' system transactions (issue 17 "each transaction of a split and
//! a merge"): a thread stopped right after each step's unit committed (the SMO pause points
//! lie after their step's unit, `smo_log.rs`), the LSS made stable and the power cut there;
//! the LSS opened again holds that step's unit whole as its newest, every earlier step of
//! the SMO before it, and no later one.
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test it -- sys_txn_pause::`.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_bwtree::smo_log::SmoDelta;
use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress};

use super::sys_txn::{check_order, key, lss_config, read_log, tree, Entry, Op};

/// Runs `work` on a tree until it stops at `point`, cuts the power with everything before
/// made stable, and returns the deltas of the LSS's units in log order (each unit's list).
fn crash_at(
    seed: u64,
    prepare: impl FnOnce(&forest_bwtree::BwTree),
    point: &'static str,
    work: impl FnOnce(&forest_bwtree::BwTree) + Send + 'static,
) -> Vec<Vec<SmoDelta>> {
    let sim = SimDir::new(seed);
    let t = tree(&sim);
    prepare(&t);
    let lss = Arc::clone(t.lss().unwrap());
    let gate = arm(point);
    let w = Arc::clone(&t);
    let worker = spawn_pauser(move || work(&w));
    gate.wait_paused();
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
    let stable = lss.hi_stable();
    sim.crash();
    gate.release();
    worker.join().unwrap();
    disarm();
    drop(t);
    drop(lss);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let (reopened, _) = Lss::open(dir, lss_config(), stable).unwrap();
    let log = read_log(&reopened);
    check_order(&log);
    log.into_iter()
        .filter_map(|(_, entry)| match entry {
            Entry::Unit(ops) => Some(
                ops.into_iter()
                    .filter_map(|op| match op {
                        Op::Delta(_, d) => Some(d),
                        _ => None,
                    })
                    .collect(),
            ),
            Entry::Piece(_) => None,
        })
        .collect()
}

fn fill(t: &forest_bwtree::BwTree, n: u32) {
    for i in 0..n {
        t.upsert(&key(i), b"v").unwrap();
    }
}

fn remove_all(t: &forest_bwtree::BwTree) {
    for i in 0..64 {
        t.remove(&key(i));
    }
}

#[test]
fn each_step_of_a_split_and_a_merge_is_a_crash_point() {
    let _turn = take_turn();

    // Split T1 committed, before T2 (an index page's term): the newest unit is T1.
    let units = crash_at(
        1,
        |t| fill(t, 40),
        "split:leaf-half-split-installed",
        |t| fill(t, 48),
    );
    let last = units.last().unwrap();
    let Some(SmoDelta::Split { right, .. }) = last.get(1) else {
        panic!("the newest unit is a split's T1: {last:?}")
    };
    assert!(matches!(last[0], SmoDelta::PageImage(_)), "Q's image in T1");
    assert!(
        !units.iter().any(|u| u
            .iter()
            .any(|d| matches!(d, SmoDelta::IndexTerm { child, .. } if child == right))),
        "no T2 for Q {right}"
    );

    // Merge T1 (remove node) committed, before T2.
    let units = crash_at(
        2,
        |t| fill(t, 64),
        "merge:remove-node-installed",
        remove_all,
    );
    assert_eq!(units.last().unwrap(), &vec![SmoDelta::RemoveNode]);

    // Merge T2 (index-term delete) committed, before the commit and T3.
    let units = crash_at(
        3,
        |t| fill(t, 64),
        "merge:index-term-delete-installed",
        remove_all,
    );
    assert!(matches!(
        units.last().unwrap()[..],
        [SmoDelta::IndexTermDelete { .. }]
    ));
    assert!(matches!(units[units.len() - 2][..], [SmoDelta::RemoveNode]));

    // Merge T3 (node merge, Free R) committed, before R is freed in memory.
    let units = crash_at(4, |t| fill(t, 64), "merge:node-merge-installed", remove_all);
    assert!(matches!(
        units.last().unwrap()[..],
        [SmoDelta::NodeMerge { .. }]
    ));

    // The generic point after any unit: the newest unit is whole.
    let units = crash_at(5, |t| fill(t, 8), "txn:committed", |t| fill(t, 9));
    assert!(!units.last().unwrap().is_empty());
}
