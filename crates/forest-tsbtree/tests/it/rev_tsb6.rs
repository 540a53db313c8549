//! Reviewer rev-tsb6's findings on h-tsb6 (tsbtree on LSS-C), each a test that failed on the
//! branch and passes since its fix (f-tsb6; F1's tests check every op's answer against the
//! history). Run them with
//! `cargo test -p forest-tsbtree --features pause-points --test it -- rev_tsb6::`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_core::Index;
use forest_file::SimDir;
use forest_tsbtree::{TsbConfig, TsbFlush, TsbTree};

fn tree_on(seed: u64, budget: Option<usize>) -> (TsbTree, SimDir) {
    crate::on_lss::tree_on(crate::on_lss::small(), budget, seed)
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

#[cfg(feature = "pause-points")]
fn history(tree: &TsbTree, k: &[u8]) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    forest_core::TemporalIndex::history(
        tree,
        k,
        0,
        u64::MAX,
        forest_core::Order::Ascending,
        &mut |ts, v| {
            out.push((ts, v.map(<[u8]>::to_vec)));
            std::ops::ControlFlow::Continue(())
        },
    )
    .unwrap();
    out
}

fn historical_pids(tree: &TsbTree) -> Vec<u64> {
    tree.page_ids()
        .into_iter()
        .filter(|&p| {
            tree.page_time_range(p)
                .unwrap()
                .is_some_and(|(_, end)| end < u64::MAX)
        })
        .collect()
}

// F2: a historical page flushed while it held a version above the flush limit (flush_page
// writes it, with a flush delta whose annotation is the limit) can never be evicted once the
// limit passes: evict_page flushes it again over its flush delta (Flush/Flush/base), then
// finds shape Consolidate, and historical pages are never consolidated: Skipped for good.
#[test]
fn rev_f2_historical_page_flushed_while_held_evicts_once_the_limit_passes() {
    let (tree, _sim) = tree_on(21, None);
    let first = tree.upsert_ts(&key(0), b"v0").unwrap();
    tree.set_flush_limit(first);
    for i in 1..40u32 {
        tree.upsert_ts(&key(i % 2), format!("v{i}").as_bytes())
            .unwrap();
    }
    let historical = historical_pids(&tree);
    assert!(!historical.is_empty(), "time splits made historical pages");
    // A store's checkpoint flushes every page while its ESL lags.
    let mut held = Vec::new();
    for &pid in &historical {
        if matches!(tree.flush_page(pid).unwrap(), TsbFlush::Flushed { .. })
            && !tree.evict_pid(pid).unwrap()
        {
            held.push(pid);
        }
    }
    assert!(
        !held.is_empty(),
        "some historical page holds a version above the limit"
    );
    // The ESL passes every version: each page may go now.
    tree.set_flush_limit(u64::MAX - 1);
    let stuck: Vec<_> = held
        .iter()
        .copied()
        .filter(|&pid| !tree.evict_pid(pid).unwrap())
        .collect();
    assert!(
        stuck.is_empty(),
        "historical pages {stuck:?} of {held:?} can never be evicted"
    );
}

// F3: set_flush_limit(0) (a store whose ESL is still at timestamp 0: nothing durable yet)
// leaves the limit at infinity (0 is the "none set" sentinel), so every version is flushed
// and its page evicted though none may be.
#[test]
fn rev_f3_a_flush_limit_of_zero_holds_every_version_back() {
    let (tree, _sim) = tree_on(22, None);
    tree.set_flush_limit(0);
    tree.upsert_ts(&key(1), b"not durable").unwrap();
    let leaf = tree.leaf_pid(&key(1)).unwrap();
    assert!(
        !tree.evict_pid(leaf).unwrap(),
        "a page whose only version is above the limit 0 was flushed and evicted (limit now {})",
        tree.flush_limit()
    );
}

// F4: pages freed by retention (and a failed split's new page) are not reported to the LSS
// (bwtree's free_page calls `lss.note_freed`): their images stay counted live, so a cleaner
// would copy them forward forever (until the PID is reused and flushed again).
#[test]
fn rev_f4_freed_pages_images_are_dead_in_the_lss() {
    let (tree, _sim) = tree_on(23, None);
    for i in 0..200u32 {
        tree.upsert_ts(&key(i % 3), format!("v{i}").as_bytes())
            .unwrap();
    }
    let historical = historical_pids(&tree);
    assert!(historical.len() > 2);
    for pid in tree.page_ids() {
        tree.flush_page(pid).unwrap();
        tree.evict_pid(pid).unwrap();
    }
    let lss = Arc::clone(tree.lss().unwrap());
    let before = lss.live_bytes();
    let freed = tree.raise_retention(u64::MAX - 1);
    assert!(freed > 2, "{freed} historical pages freed");
    let after = lss.live_bytes();
    assert!(
        after < before,
        "{freed} pages freed, live bytes {before} -> {after}"
    );
}

/// Flips one byte in the image of each page in `pids` (evicted); the same call undoes it.
#[cfg(feature = "pause-points")]
fn flip(tree: &TsbTree, sim: &SimDir, pids: &[u64]) {
    for &pid in pids {
        crate::on_lss::flip_record(sim, tree.evicted_at(pid).unwrap());
    }
}

/// One op of the paused writer: (is a remove, the value written, its outcome).
#[cfg(feature = "pause-points")]
type Done = (bool, Vec<u8>, Result<Option<u64>, String>);

/// A writer paused after its version's CAS (in the time split it set off); every page but
/// its leaf evicted and damaged; released: the split's index step meets the damage.
/// Returns each op's (is_remove, value, outcome) in order, the last one the paused op; the
/// damage undone.
#[cfg(feature = "pause-points")]
fn write_then_fail_load(
    op: impl Fn(&TsbTree, u32) -> Done + Send + 'static,
) -> (TsbTree, Vec<Done>) {
    use forest_core::conformance::pause::{arm, disarm, spawn_pauser};
    let (tree, sim) = tree_on(24, None);
    let tree = Arc::new(tree);
    for i in (0..64).step_by(2) {
        tree.upsert(&key(i), b"base").unwrap();
    }
    let gate = arm("time_split:leaf-split-installed");
    let writer = {
        let tree = Arc::clone(&tree);
        spawn_pauser(move || {
            let mut done = Vec::new();
            for i in 0..64u32 {
                let outcome = op(&tree, i);
                let failed = outcome.2.is_err();
                done.push(outcome);
                if failed {
                    break;
                }
            }
            done
        })
    };
    gate.wait_paused();
    let leaf = tree.leaf_pid(&key(10)).unwrap();
    for pid in tree.page_ids() {
        tree.evict_pid(pid).unwrap();
    }
    let damaged: Vec<u64> = tree
        .page_ids()
        .into_iter()
        .filter(|&p| p != leaf && tree.evicted_at(p).is_some())
        .collect();
    flip(&tree, &sim, &damaged);
    gate.release();
    let done = writer.join().unwrap();
    disarm();
    flip(&tree, &sim, &damaged);
    let _ = tree.take_load_error();
    (Arc::into_inner(tree).unwrap(), done)
}

// F1a: an upsert whose version CAS succeeded, whose time split's index step (Algorithm 1 step
// 2, help_time_split) then met a page that could not be loaded, returned Err though its
// version is in the tree and visible: a store would tell its client the SET failed. Now every
// upsert that returned Ok is in the history, every one that returned Err is not, and the
// split's load failure was recorded.
#[cfg(feature = "pause-points")]
#[test]
fn rev_f1a_an_upsert_that_returned_err_wrote_nothing() {
    let _turn = forest_core::conformance::pause::take_turn();
    let (tree, done) = write_then_fail_load(|tree, i| {
        let v = format!("w{i}").into_bytes();
        let r = tree
            .upsert_ts(&key(10), &v)
            .map(Some)
            .map_err(|e| e.to_string());
        (false, v, r)
    });
    let hist = history(&tree, &key(10));
    for (_, v, outcome) in &done {
        let written = hist
            .iter()
            .any(|(_, value)| value.as_deref() == Some(&v[..]));
        assert_eq!(
            written,
            outcome.is_ok(),
            "upsert of {v:?} returned {outcome:?}; in the history: {written}"
        );
    }
    assert!(tree.load_errors() > 0, "the paused split met no load error");
}

// F1b: as F1a for a remove: remove_ts answers None ("absent, nothing written"; Index::remove
// false, a Redis DEL 0) though its tombstone was written and the key is gone.
#[cfg(feature = "pause-points")]
#[test]
fn rev_f1b_a_remove_that_answered_absent_removed_the_key() {
    let _turn = forest_core::conformance::pause::take_turn();
    let (tree, done) = write_then_fail_load(|tree, i| {
        if i % 2 == 0 {
            let r = tree.remove_ts(&key(10));
            (true, Vec::new(), Ok(r))
        } else {
            let v = format!("w{i}").into_bytes();
            let r = tree
                .upsert_ts(&key(10), &v)
                .map(Some)
                .map_err(|e| e.to_string());
            (false, v, r)
        }
    });
    // remove_ts has no Result: a remove that answered None (absent) must have written
    // nothing. The paused op's split met the damage and recorded it.
    assert!(tree.load_errors() > 0, "the paused split met no load error");
    let removes_absent = done
        .iter()
        .enumerate()
        .filter(|(_, (is_remove, _, r))| *is_remove && matches!(r, Ok(None)))
        .map(|(i, _)| i)
        .collect::<Vec<_>>();
    let hist = history(&tree, &key(10));
    let tombstones = hist.iter().filter(|(_, v)| v.is_none()).count();
    let acknowledged = done
        .iter()
        .filter(|(is_remove, _, r)| *is_remove && matches!(r, Ok(Some(_))))
        .count();
    assert_eq!(
        tombstones,
        acknowledged,
        "{tombstones} tombstones in the history, {acknowledged} removes answered Some; \
         removes that answered None (absent): ops {removes_absent:?} of {}",
        done.len()
    );
}

// F6: pages split by record count only (max_records_per_page, 128 by default), so a leaf of
// large values outgrows an LSS record (a segment: 64 MiB by default, 4 MiB here): its image
// cannot be reserved, flush_page and evict_pid fail with InvalidUse, and under a budget the
// page stays resident for good while every sweep that meets it records the error as a load
// error. Default pages with 8 values of 1 MiB (VALUE_BYTES_MAX) on 4 MiB segments. Fixed by
// splitting a leaf over half an LSS record by bytes too (storage.rs).
#[test]
fn rev_f6_a_leaf_of_large_values_can_be_evicted() {
    let (tree, _sim) = crate::on_lss::tree_on(TsbConfig::default(), Some(1), 26);
    let value = vec![7u8; forest_core::limits::VALUE_BYTES_MAX];
    for i in 0..8u32 {
        tree.upsert(&key(i), &value).unwrap();
    }
    let leaf = tree.leaf_pid(&key(0)).unwrap();
    assert_eq!(
        tree.load_errors(),
        0,
        "sweeps after the upserts recorded: {:?}",
        tree.take_load_error()
    );
    // Under a budget of one page the sweeps may have evicted it already.
    for pid in tree.page_ids() {
        assert!(
            tree.evicted_at(pid).is_some() || tree.evict_pid(pid).unwrap(),
            "page {pid} (the leaf of key 0: {leaf}) is resident and does not evict"
        );
    }
    let mut out = Vec::new();
    for i in 0..8u32 {
        assert!(tree.get(&key(i), &mut out), "key {i} reads back");
        assert!(out == value, "key {i}'s value reads back whole");
    }
    assert_eq!(tree.load_errors(), 0);
}
