//! Recovery of the mapping table at open (`recover.rs`, issue 17 "Recovery"): pieces and
//! committed units from S, aborted units' allocations freed, the checkpoint fallback, the
//! torn-tail rule, and power loss at many points checked against a model of the log.
#![cfg(not(loom))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::sync::Arc;

use crossbeam_epoch::{Owned, Shared};
use forest_core::Error;
use forest_file::{CrashMode, Dir, SimDir};
use forest_llama::checkpoint::Checkpoints;
use forest_llama::lss::segment::segment_file_name;
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordHeader, RecordKind};
use forest_llama::recover::{open_recovering, RecoveredMap, MISSING_START};
use forest_llama::sys_txn::{SysTxn, TxnOutcome, TxnStats};
use forest_llama::{MappingTable, PageState, Pid};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A page state the walk never meets resident (every page here is evicted: a word with an
/// LSS address).
struct Nothing(#[allow(dead_code)] u32);

impl PageState for Nothing {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the trait's contract: an unreachable `Owned` allocation, reclaimed once.
        drop(unsafe { Owned::from_raw(ptr) });
    }
}

fn config() -> LssConfig {
    LssConfig {
        segment_bytes: 16 << 10,
        buffer_bytes: 2 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

fn dirs(lss: &SimDir, ckpt: &SimDir) -> (Arc<dyn Dir>, Arc<dyn Dir>) {
    (Arc::new(lss.clone()), Arc::new(ckpt.clone()))
}

fn open(lss: &SimDir, ckpt: &SimDir) -> forest_core::Result<(Lss, Checkpoints, RecoveredMap)> {
    let (l, c) = dirs(lss, ckpt);
    open_recovering(l, config(), c)
}

fn image(lss: &Lss, pid: Pid, relocated_from: Option<LssAddress>) -> LssAddress {
    let header = RecordHeader {
        prev: relocated_from,
        ..RecordHeader::new(RecordKind::PageImage, pid)
    };
    lss.post(&header, format!("image of {pid}").as_bytes())
        .unwrap()
}

fn run(lss: &Lss, pid: Pid, prev: LssAddress) -> LssAddress {
    let header = RecordHeader {
        prev: Some(prev),
        ..RecordHeader::new(RecordKind::DeltaRun, pid)
    };
    lss.post(&header, format!("run of {pid}").as_bytes())
        .unwrap()
}

/// A checkpoint of the recovered map: every page evicted at its address.
fn checkpoint(checkpoints: &Checkpoints, lss: &Lss, map: &RecoveredMap, rssp: u64) {
    let table: MappingTable<Nothing> = map.table().unwrap();
    checkpoints
        .take(&table, lss, rssp, |_, _: Shared<'_, Nothing>| None)
        .unwrap();
}

fn unit(lss: &Lss, stats: &TxnStats, ops: impl FnOnce(&mut SysTxn<'_>), won: bool) -> TxnOutcome {
    let mut txn = SysTxn::begin(lss, stats);
    ops(&mut txn);
    txn.commit_if(|| won, |_| {}).unwrap()
}

// Goal: the scan from S applies pieces in order (a dead relocation left out, a live one
// taken), a committed unit's Allocate and Update-D deltas (kept per page until a later piece
// of the page supersedes them), ignores an aborted unit and frees PIDs with no state; the
// checkpoint's RSSP comes back. Method: build each case by hand on a simulated disk, close,
// reopen, compare field by field; then flush the split page and reopen again.
#[test]
fn pieces_and_units_after_a_clean_close() {
    let lss_sim = SimDir::new(1);
    let ckpt_sim = SimDir::new(2);
    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert!(map.checkpoint.is_none() && map.pages.is_empty() && map.pid_end == 0);
    let a0 = image(&lss, 0, None);
    let a1 = image(&lss, 1, None);
    // PIDs 2..=4 handed out with no piece: 2 a split's Q below, 3 and 4 never logged.
    let base = RecoveredMap {
        pid_end: 5,
        pages: vec![(0, a0), (1, a1)],
        free: vec![],
        ..map
    };
    checkpoint(&checkpoints, &lss, &base, 77);
    let a2 = run(&lss, 0, a0);
    let stats = TxnStats::default();
    let committed = unit(
        &lss,
        &stats,
        |t| {
            t.note_allocated(2);
            t.update_d(2, None, 1, b"Q's image".to_vec(), 0, 0);
            t.update_d(0, Some(a2), 2, b"split at m".to_vec(), 0, 0);
        },
        true,
    );
    let TxnOutcome::Committed(u) = committed else {
        panic!("{committed:?}")
    };
    let aborted = unit(
        &lss,
        &stats,
        |t| {
            t.note_allocated(3);
            t.update_d(3, None, 1, b"lost".to_vec(), 0, 0);
        },
        false,
    );
    assert_eq!(aborted, TxnOutcome::Aborted);
    let dead = image(&lss, 0, Some(a0)); // relocation of a0 whose CAS lost to a2
    let moved = image(&lss, 1, Some(a1)); // relocation that won
    drop(checkpoints);
    lss.close().unwrap();

    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.rssp(), 77);
    assert_eq!(map.pages, vec![(0, a2), (1, moved)]);
    assert_eq!(map.free, vec![3, 4]);
    assert_eq!(map.pid_end, 5);
    let deltas: Vec<(Pid, Vec<u8>, u8)> = map
        .unit_deltas
        .iter()
        .flat_map(|(&pid, ds)| ds.iter().map(move |d| (pid, d.bytes.clone(), d.kind)))
        .collect();
    assert_eq!(
        deltas,
        vec![
            (0, b"split at m".to_vec(), 2),
            (2, b"Q's image".to_vec(), 1)
        ]
    );
    assert!(map.unit_deltas.values().flatten().all(|d| d.unit == u));
    assert_eq!(map.stats.units_committed, 1);
    assert_eq!(map.stats.dead_relocations, 1);
    assert!(map.stats.fillers >= 1, "{:?}", map.stats);
    assert!(dead > u);
    let table: MappingTable<Nothing> = map.table().unwrap();
    assert_eq!(table.pid_end(), 5);
    // The free list hands out the lowest free PID first.
    assert_eq!(table.allocate(), 3);

    // A flush of page 0 after the split supersedes its unit delta; Q's stays.
    let a3 = image(&lss, 0, None);
    drop(checkpoints);
    lss.close().unwrap();
    let (_lss, _c, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.pages, vec![(0, a3), (1, moved)]);
    assert_eq!(map.unit_deltas.keys().copied().collect::<Vec<_>>(), vec![2]);
}

// Goal: a committed Free makes the PID free and drops its pieces and pending deltas; a later
// Allocate and piece bring it back. Method: free page 1 in a unit, reopen; reuse it, reopen.
#[test]
fn committed_free_and_reuse() {
    let lss_sim = SimDir::new(3);
    let ckpt_sim = SimDir::new(4);
    let (lss, checkpoints, _) = open(&lss_sim, &ckpt_sim).unwrap();
    let stats = TxnStats::default();
    image(&lss, 0, None);
    image(&lss, 1, None);
    unit(&lss, &stats, |t| t.free(1), true);
    drop(checkpoints);
    lss.close().unwrap();
    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.pages.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0]);
    assert_eq!(map.free, vec![1]);
    let again = image(&lss, 1, None);
    drop(checkpoints);
    lss.close().unwrap();
    let (_lss, _c, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.pages.get(1), Some(&(1, again)));
    assert!(map.free.is_empty());
}

fn checkpoint_names(sim: &SimDir) -> Vec<String> {
    let mut names: Vec<String> = sim
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("map-") && !n.contains('.'))
        .collect();
    names.sort();
    names
}

/// Two checkpoints over pages 0..4, then more pieces; returns the pages expected.
fn two_checkpoints(lss_sim: &SimDir, ckpt_sim: &SimDir) -> Vec<(Pid, LssAddress)> {
    let (lss, checkpoints, map) = open(lss_sim, ckpt_sim).unwrap();
    let mut pages: Vec<(Pid, LssAddress)> = (0..4).map(|p| (p, image(&lss, p, None))).collect();
    let mut map = RecoveredMap {
        pid_end: 4,
        pages: pages.clone(),
        ..map
    };
    checkpoint(&checkpoints, &lss, &map, 10);
    pages[1].1 = run(&lss, 1, pages[1].1);
    map.pages = pages.clone();
    checkpoint(&checkpoints, &lss, &map, 20);
    pages[2].1 = run(&lss, 2, pages[2].1);
    drop(checkpoints);
    lss.close().unwrap();
    pages
}

// Goal: a damaged newest checkpoint falls back to the older one (same pages, its RSSP); with
// both damaged, open refuses by name. Method: flip a byte of each in turn.
#[test]
fn damaged_checkpoints_fall_back_then_refuse() {
    let lss_sim = SimDir::new(5);
    let ckpt_sim = SimDir::new(6);
    let pages = two_checkpoints(&lss_sim, &ckpt_sim);
    let names = checkpoint_names(&ckpt_sim);
    assert_eq!(names.len(), 2);
    assert!(ckpt_sim.damage(&names[1], |b| b[30] ^= 0x40));
    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.rssp(), 10, "fell back to the older");
    assert_eq!(map.rejected.len(), 1);
    assert_eq!(map.pages, pages);
    drop((lss, checkpoints));
    let names = checkpoint_names(&ckpt_sim);
    assert_eq!(names.len(), 1);
    assert!(ckpt_sim.damage(&names[0], |b| b[30] ^= 0x40));
    match open(&lss_sim, &ckpt_sim) {
        Err(Error::Corrupt { what, .. }) => {
            assert!(what.contains("no valid map checkpoint"), "{what}")
        }
        other => panic!("{:?}", other.map(|r| r.2)),
    }
}

// Goal: damage to a record the checkpoint relies on (below T) refuses the open, naming the
// file; bytes torn after the last record at or above T are cut and recovery goes on.
// Method: flip a byte in the first record after the segment header; separately append
// garbage to the last segment's end.
#[test]
fn damage_below_t_refuses_a_torn_tail_above_is_cut() {
    let lss_sim = SimDir::new(7);
    let ckpt_sim = SimDir::new(8);
    let pages = two_checkpoints(&lss_sim, &ckpt_sim);
    let mut segments: Vec<String> = lss_sim
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect();
    segments.sort();
    let last = segments.last().unwrap().clone();
    assert!(lss_sim.damage(&last, |b| b.extend_from_slice(&[0xAB; 50])));
    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert!(map.open.cut.is_some(), "{:?}", map.open);
    assert_eq!(map.pages, pages);
    drop((lss, checkpoints));
    // The first record of segment 0 lies below both checkpoints' T.
    assert!(lss_sim.damage(&segment_file_name(0), |b| b[64 + 20] ^= 1));
    match open(&lss_sim, &ckpt_sim) {
        Err(Error::Corrupt { path, .. }) => {
            assert!(path.ends_with(segment_file_name(0)), "{}", path.display())
        }
        other => panic!("{:?}", other.map(|r| r.2)),
    }
}

// Goal: without any checkpoint the scan starts at segment 0, which must exist. Method: post
// enough to fill a few segments, delete segment 0, reopen.
#[test]
fn no_checkpoint_and_no_first_segment_refuses() {
    let lss_sim = SimDir::new(9);
    let ckpt_sim = SimDir::new(10);
    let (lss, checkpoints, _) = open(&lss_sim, &ckpt_sim).unwrap();
    let mut at = image(&lss, 0, None);
    for _ in 0..400 {
        at = run(&lss, 0, at);
    }
    drop(checkpoints);
    lss.close().unwrap();
    let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim).unwrap();
    assert_eq!(map.pages, vec![(0, at)]);
    drop((lss, checkpoints));
    lss_sim.remove(&segment_file_name(0)).unwrap();
    match open(&lss_sim, &ckpt_sim) {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains(MISSING_START), "{what}"),
        other => panic!("{:?}", other.map(|r| r.2)),
    }
}

/// What pages recover to by the rule: newest piece, and unit deltas pending above it.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
struct Model {
    pages: BTreeMap<Pid, LssAddress>,
    pending: BTreeMap<Pid, usize>,
}

enum Posted {
    Piece(Pid, LssAddress),
    Split { q: Pid, p: Pid },
}

impl Model {
    fn apply(&mut self, posted: &Posted) {
        match *posted {
            Posted::Piece(pid, at) => {
                self.pages.insert(pid, at);
                self.pending.remove(&pid);
            }
            Posted::Split { q, p } => {
                *self.pending.entry(q).or_default() += 1;
                *self.pending.entry(p).or_default() += 1;
            }
        }
    }

    fn of(map: &RecoveredMap) -> Self {
        Self {
            pages: map.pages.iter().copied().collect(),
            pending: map.unit_deltas.iter().map(|(&p, d)| (p, d.len())).collect(),
        }
    }
}

// Goal: a power loss at any point (checkpoints taken now and then, units committed and
// aborted) recovers exactly the log's stable prefix: nothing below the last Hi-Stable is
// lost, every page maps to its newest piece in the prefix, every committed unit in it is
// pending on its pages until a later piece, and no PID is both free and in use. Method: per
// seed, random pieces, units and checkpoints with Mk-Stable now and then, a crash in a random
// mode, reopen, compare with the model of the records posted below the recovered end; three
// generations a seed, each going on from what was recovered.
#[test]
fn power_loss_at_many_points_recovers_the_stable_prefix() {
    let modes = [
        CrashMode::Random,
        CrashMode::Scatter,
        CrashMode::DropUnsynced,
    ];
    let (mut cycles, mut lost_tails, mut checkpoints_taken) = (0, 0, 0);
    for seed in 0..24u64 {
        let lss_sim = SimDir::new(seed * 2 + 100);
        let ckpt_sim = SimDir::new(seed * 2 + 101);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut base = Model::default();
        let mut pid_end: Pid = 0;
        for generation in 0..3u64 {
            let (lss, checkpoints, mut map) = open(&lss_sim, &ckpt_sim)
                .unwrap_or_else(|e| panic!("seed {seed} gen {generation}: {e}"));
            assert_eq!(Model::of(&map), base, "seed {seed} gen {generation}");
            let stats = TxnStats::default();
            let mut live = base.clone();
            let mut posted: Vec<(LssAddress, Posted)> = Vec::new();
            for _ in 0..rng.random_range(10..200) {
                let choice = rng.random_range(0..20);
                if choice < 12 || live.pages.is_empty() {
                    let pid = rng.random_range(0..pid_end + 1);
                    pid_end = pid_end.max(pid + 1);
                    let at = match live.pages.get(&pid) {
                        Some(&prev) if rng.random_bool(0.7) => run(&lss, pid, prev),
                        _ => image(&lss, pid, None),
                    };
                    let entry = Posted::Piece(pid, at);
                    live.apply(&entry);
                    posted.push((at, entry));
                } else if choice < 16 {
                    let pages: Vec<Pid> = live.pages.keys().copied().collect();
                    let p = pages[rng.random_range(0..pages.len())];
                    let q = pid_end;
                    pid_end += 1;
                    let outcome = unit(
                        &lss,
                        &stats,
                        |t| {
                            t.note_allocated(q);
                            t.update_d(q, None, 1, vec![7; 40], 0, 0);
                            t.update_d(p, None, 2, vec![8; 10], 0, 0);
                        },
                        rng.random_bool(0.8),
                    );
                    if let TxnOutcome::Committed(at) = outcome {
                        let entry = Posted::Split { q, p };
                        live.apply(&entry);
                        posted.push((at, entry));
                    }
                } else if choice < 19 {
                    if let Some((at, _)) = posted.last() {
                        lss.mk_stable(*at).unwrap();
                    }
                } else if live.pending.is_empty() {
                    // Every page evicted at its newest piece. A pending unit delta is in no
                    // word, so none may be pending below S (the tree flushes such pages first).
                    if let Some((at, _)) = posted.last() {
                        lss.mk_stable(*at).unwrap();
                    }
                    map.pid_end = pid_end;
                    map.pages = live.pages.iter().map(|(&p, &a)| (p, a)).collect();
                    map.free = vec![];
                    checkpoint(&checkpoints, &lss, &map, 0);
                    checkpoints_taken += 1;
                }
            }
            let hi = lss.hi_stable();
            lss_sim.crash_with(modes[((seed + generation) % 3) as usize]);
            ckpt_sim.crash_with(CrashMode::DropUnsynced);
            drop(checkpoints);
            drop(lss);
            let (lss, checkpoints, map) = open(&lss_sim, &ckpt_sim)
                .unwrap_or_else(|e| panic!("seed {seed} gen {generation}: reopen: {e}"));
            cycles += 1;
            let end = map.scanned_end;
            assert!(end >= hi, "seed {seed}: end {end:?} below Hi-Stable {hi:?}");
            let mut expected = base.clone();
            for (at, entry) in &posted {
                if *at < end {
                    expected.apply(entry);
                }
            }
            lost_tails += usize::from(posted.iter().any(|(at, _)| *at >= end));
            assert_eq!(Model::of(&map), expected, "seed {seed} gen {generation}");
            for pid in map
                .pages
                .iter()
                .map(|p| p.0)
                .chain(map.unit_deltas.keys().copied())
            {
                assert!(map.free.binary_search(&pid).is_err(), "seed {seed}: {pid}");
            }
            assert_eq!(
                map.free.len() as u64
                    + Model::of(&map)
                        .pages
                        .keys()
                        .chain(map.unit_deltas.keys())
                        .collect::<std::collections::BTreeSet<_>>()
                        .len() as u64,
                map.pid_end,
                "seed {seed}: every PID below pid_end is free or in use"
            );
            base = expected;
            pid_end = pid_end.max(map.pid_end);
            drop(checkpoints);
            lss.close().unwrap();
        }
    }
    assert_eq!(cycles, 72);
    // The test must have met both cases it checks.
    assert!(
        lost_tails > 0 && checkpoints_taken > 0,
        "{lost_tails} {checkpoints_taken}"
    );
}
