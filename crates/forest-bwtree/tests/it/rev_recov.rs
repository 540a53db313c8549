//! Review rev-recov (session 16) of branch h-recov: recovery of a Bw-tree from its LSS.
//! Tests here failed on the branch; F1-F3 are fixed (session 16, f-recov).
//!
//! Run: `cargo test -p forest-bwtree --features pause-points --test it -- rev_recov:: --ignored`
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use forest_core::Index;

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

fn value(i: u32) -> Vec<u8> {
    format!("v-{i}").into_bytes()
}

fn try_open(lss_sim: &SimDir, ckpt_sim: &SimDir) -> forest_core::Result<(BwTree, RecoveredMap)> {
    try_open_with(config(), lss_sim, ckpt_sim)
}

fn try_open_with(
    config: BwTreeConfig,
    lss_sim: &SimDir,
    ckpt_sim: &SimDir,
) -> forest_core::Result<(BwTree, RecoveredMap)> {
    let lss_dir: Arc<dyn Dir> = Arc::new(lss_sim.clone());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(ckpt_sim.clone());
    let (lss, checkpoints, map) = open_recovering(lss_dir, lss_config(), ckpt_dir)?;
    let tree = BwTree::open_recovered(config, Arc::new(lss), &map, None)?;
    tree.use_map_checkpoints(Arc::new(checkpoints))?;
    Ok((tree, map))
}

fn close(tree: BwTree) {
    let lss = Arc::clone(tree.lss().unwrap());
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();
}

/// The flushed writes, the reopen's outcome, the two directories.
type Reopened = (
    BTreeMap<Vec<u8>, Vec<u8>>,
    forest_core::Result<(BwTree, RecoveredMap)>,
    SimDir,
    SimDir,
);

/// Writes keys 0..16 (one full leaf), flushes them and makes them stable, then on a pauser
/// thread writes keys 16..20 (a leaf split, then the root's growth: two SMO steps, each a
/// system transaction); at the `arrival`-th "txn:committed" pause point (right after a
/// step's unit is filled, before the step ends) the map checkpoint is taken from inside the
/// step's thread, with RSSP 7 (every write so far is claimed in the LSS). Then the LSS is
/// closed (no later flush: as a crash after the checkpoint) and the tree reopened.
fn checkpoint_inside_smo_step(seed: u64, arrival: usize) -> Reopened {
    use forest_core::conformance::pause::{disarm, on_pause_point, spawn_pauser, PAUSER};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let lss_sim = SimDir::new(seed);
    let ckpt_sim = SimDir::new(seed + 1);
    let (tree, _) = try_open(&lss_sim, &ckpt_sim).unwrap();
    let tree = Arc::new(tree);
    let mut flushed = BTreeMap::new();
    for i in 0..16u32 {
        tree.upsert_with_lsn(&key(i), &value(i), 0).unwrap();
        flushed.insert(key(i), value(i));
    }
    flush_all(&tree);
    tree.take_map_checkpoint(1).unwrap();

    // The step's thread stops at its `arrival`-th "txn:committed"; the checkpoint is taken
    // from another thread meanwhile (it needs nothing the stopped thread holds on the branch;
    // a checkpoint that waits for steps in flight finishes after the release instead).
    let arrivals = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(std::sync::Barrier::new(2));
    let go_on = Arc::new(std::sync::Barrier::new(2));
    {
        let (arrivals, stopped, go_on) = (
            Arc::clone(&arrivals),
            Arc::clone(&stopped),
            Arc::clone(&go_on),
        );
        on_pause_point("txn:committed", PAUSER, move || {
            if arrivals.fetch_add(1, Ordering::SeqCst) + 1 == arrival {
                stopped.wait();
                go_on.wait();
            }
        });
    }
    let w = Arc::clone(&tree);
    let worker = spawn_pauser(move || {
        for i in 16..20u32 {
            w.upsert_with_lsn(&key(i), &value(i), 0).unwrap();
        }
    });
    stopped.wait();
    let c = Arc::clone(&tree);
    let checkpoint = std::thread::spawn(move || c.take_map_checkpoint(7).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    go_on.wait();
    worker.join().unwrap();
    checkpoint.join().unwrap();
    disarm();
    let tree = Arc::try_unwrap(tree).ok().unwrap();
    close(tree);
    let reopened = try_open(&lss_sim, &ckpt_sim);
    (flushed, reopened, lss_sim, ckpt_sim)
}

// F1 (split): a map checkpoint whose S lies after a split's unit but taken before the split
// step clears Q's "unpublished" mark: the pre-walk pass skips Q (flush_page answers Frozen
// for an unpublished page), the walk records no piece for Q (never flushed), and the unit
// that holds Q's first image lies below S, so the scan never meets it. P's piece (flushed by
// the pass) has high key = separator and side link Q. Recovery: Q recovers free; the keys
// that moved to Q (flushed before both checkpoints, RSSP claimed) are gone.
#[test]
fn checkpoint_right_after_a_split_unit_keeps_q() {
    let _turn = forest_core::conformance::pause::take_turn();
    let (flushed, reopened, _l, _c) = checkpoint_inside_smo_step(11, 1);
    let (tree, map) = reopened.expect("reopen");
    // Q's PID: named by a side link, but recovered with no state.
    let in_use = |pid| map.pages.iter().any(|p| p.0 == pid) || map.unit_deltas.contains_key(&pid);
    let orphans: Vec<_> = (0..map.pid_end).filter(|&p| !in_use(p)).collect();
    // Reads on a thread with a deadline: on the branch the reopened tree's reads of Q's keys
    // never return (the descent retries forever on the free PID).
    let tree = Arc::new(tree);
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (tree, flushed) = (Arc::clone(&tree), flushed.clone());
        std::thread::spawn(move || {
            for (k, v) in &flushed {
                let got = tree.try_get(k).map_err(|e| e.to_string());
                let ok = matches!(&got, Ok(Some(g)) if g == v);
                tx.send((
                    String::from_utf8_lossy(k).into_owned(),
                    ok,
                    format!("{got:?}"),
                ))
                .unwrap();
            }
        });
    }
    let mut bad = Vec::new();
    let keys: Vec<_> = flushed
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        match rx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok((_, true, _)) => {}
            Ok((k, false, got)) => bad.push(format!("{k}: {got}")),
            Err(_) => {
                bad.push(format!(
                    "the read of {key} did not return within 5 s ({i} read right)"
                ));
                break;
            }
        }
    }
    assert!(
        bad.is_empty(),
        "flushed, checkpointed keys after reopen: {bad:?} (recovered free: {:?}; \
         PIDs with no state {orphans:?}; pages {:?})",
        map.free,
        map.pages
    );
}

// F1 (root growth): the same window in grow_root: the new root's unit (its image and ROOT)
// lies below S, the pass skips the unpublished root, the walk records no piece for it, and
// the checkpoint records it as the root (read after S). Recovery finds no state for the
// root and refuses to open: the store can never be opened again.
#[test]
fn checkpoint_right_after_a_root_growth_unit_reopens() {
    let _turn = forest_core::conformance::pause::take_turn();
    let (flushed, reopened, _l, _c) = checkpoint_inside_smo_step(21, 2);
    let (tree, _map) = reopened.expect("reopen after a checkpoint taken during a root growth");
    let got = contents(&tree);
    for (k, v) in &flushed {
        assert_eq!(got.get(k), Some(v), "flushed key {k:?}");
    }
}

// F3 (low): a map checkpoint taken after a merge's last unit (node merge on L, Free R)
// committed but before R's word is freed in memory: the pre-walk pass skips R (frozen: its
// remove-node delta is on top), the walk records R's old piece as a live entry, and the unit
// with Free(R) lies below S, so the scan never frees it. R recovers as a live page nothing
// reaches: its PID is never reused and the cleaner keeps relocating its piece. The set of
// PIDs in use after reopen should equal the tree's before the crash. Fixed: the step frees R
// in memory before it leaves the checkpoint barrier (`smo_step_then`), so this checkpoint,
// the first that can run after the unit, finds R free.
#[test]
fn checkpoint_after_a_merge_unit_frees_r() {
    use forest_core::conformance::pause::{disarm, on_pause_point, spawn_pauser, PAUSER};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _turn = forest_core::conformance::pause::take_turn();
    let merging = BwTreeConfig {
        merge_threshold: 4,
        ..config()
    };
    let lss_sim = SimDir::new(31);
    let ckpt_sim = SimDir::new(32);
    let (tree, _) = try_open_with(merging.clone(), &lss_sim, &ckpt_sim).unwrap();
    let tree = Arc::new(tree);
    for i in 0..64u32 {
        tree.upsert_with_lsn(&key(i), &value(i), 0).unwrap();
    }
    flush_all(&tree);
    tree.take_map_checkpoint(1).unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    {
        let (t, taken) = (Arc::clone(&tree), Arc::clone(&taken));
        on_pause_point("merge:node-merge-installed", PAUSER, move || {
            if taken.fetch_add(1, Ordering::SeqCst) == 0 {
                t.take_map_checkpoint(7).unwrap();
            }
        });
    }
    let w = Arc::clone(&tree);
    spawn_pauser(move || {
        for i in 0..40u32 {
            w.remove(&key(i));
        }
    })
    .join()
    .unwrap();
    disarm();
    assert!(taken.load(Ordering::SeqCst) >= 1, "a merge committed");
    let live: std::collections::BTreeSet<u64> = tree.page_ids().into_iter().collect();
    let tree = Arc::try_unwrap(tree).ok().unwrap();
    close(tree);
    let (tree, map) = try_open_with(merging, &lss_sim, &ckpt_sim).unwrap();
    eprintln!(
        "after reopen: stats key_count {}, keys a scan returns {}",
        tree.stats().key_count,
        contents(&tree).len()
    );
    let recovered: std::collections::BTreeSet<u64> = map
        .pages
        .iter()
        .map(|p| p.0)
        .chain(map.unit_deltas.keys().copied())
        .collect();
    assert_eq!(
        recovered, live,
        "PIDs in use after reopen vs in the tree before the crash"
    );
}

// F2 (medium): the checkpoint's pre-walk pass gave up silently on a page whose flushes kept
// losing to writes: the checkpoint was then published without the piece the page needed (here
// the root, never flushed and changed by no unit, so the walk's `checkpoint_piece` does not
// flush it either: the checkpoint named a root with no state, and reopening failed). Every
// flush the checkpoint thread tries on it loses: a write lands between its state read and its
// CAS (`flush:reserved`). Now the checkpoint fails and none is published; once the writes
// stop, the next one succeeds and the tree reopens whole. Failed before the fix: the first
// checkpoint returned Ok.
#[test]
fn checkpoint_fails_when_a_page_keeps_losing_its_flush() {
    use forest_core::conformance::pause::{disarm, on_pause_point, spawn_pauser, PAUSER};
    use std::sync::atomic::{AtomicU32, Ordering};
    let _turn = forest_core::conformance::pause::take_turn();
    let lss_sim = SimDir::new(41);
    let ckpt_sim = SimDir::new(42);
    let (tree, _) = try_open(&lss_sim, &ckpt_sim).unwrap();
    let tree = Arc::new(tree);
    for i in 0..8u32 {
        tree.upsert_with_lsn(&key(i), &value(i), 0).unwrap();
    }
    // Enough lost flushes to exhaust the pass's tries, then the writes stop (the walk's own
    // flushes, on pages a unit changed, retry without bound).
    let writes = Arc::new(AtomicU32::new(0));
    {
        let (t, writes) = (Arc::clone(&tree), Arc::clone(&writes));
        on_pause_point("flush:reserved", PAUSER, move || {
            let n = writes.fetch_add(1, Ordering::SeqCst);
            if n < 200 {
                t.upsert_with_lsn(&key(n % 8), &value(1000 + n), 0).unwrap();
            }
        });
    }
    let t = Arc::clone(&tree);
    let first = spawn_pauser(move || t.take_map_checkpoint(7))
        .join()
        .unwrap();
    disarm();
    assert!(
        writes.load(Ordering::SeqCst) >= 64,
        "the flushes were contended"
    );
    assert!(
        first.is_err(),
        "a checkpoint whose pass could not flush a page that needs a piece is published: {first:?}"
    );
    let expected = contents(&tree);
    tree.take_map_checkpoint(8).unwrap();
    let tree = Arc::try_unwrap(tree).ok().unwrap();
    close(tree);
    let (tree, _) = try_open(&lss_sim, &ckpt_sim).expect("reopen after the second checkpoint");
    assert_eq!(contents(&tree), expected);
}
