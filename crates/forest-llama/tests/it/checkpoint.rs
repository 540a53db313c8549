//! Mapping-table checkpoints (issue 17 "Recovery", first part): the file format's decoder
//! under arbitrary and damaged bytes, the fuzzy walk while pages are updated, flushed,
//! evicted and loaded, and publication under power loss at every step.
#![cfg(not(loom))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard, Owned, Shared};
use forest_core::Error;
use forest_file::{CrashMode, Dir, FaultPlan, SimDir};
use forest_llama::checkpoint::{
    self, decode, map_file_name, map_tmp_name, read_newest, Checkpoints, LivePiece, MapCheckpoint,
    Recovery, MAP_HEADER_BYTES, MAP_PIECE_BYTES,
};
use forest_llama::flush::{flush, FlushOutcome, Piece};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordKind};
use forest_llama::{MappingTable, PageState, Pid};
use parking_lot::Mutex;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A toy page state: a chain of versions, each owning the one below (`next`, 0 for none),
/// each carrying its page's newest flush address as a consolidated page would.
struct Toy {
    next: usize,
    depth: u32,
    flushed: Option<LssAddress>,
}

impl PageState for Toy {
    unsafe fn reclaim(ptr: *mut Self) {
        let mut ptr = ptr;
        while !ptr.is_null() {
            // SAFETY: the trait's contract: an unreachable chain of `Owned` allocations, each
            // owned by the node above it, reclaimed once.
            let node = unsafe { Owned::from_raw(ptr) }.into_box();
            ptr = node.next as *mut Toy;
        }
    }
}

fn toy<'g>(state: Shared<'g, Toy>) -> &'g Toy {
    // SAFETY: states are read under the guard `'g` names, and live until it unpins.
    unsafe { state.deref() }
}

fn newest_flushed(_pid: Pid, state: Shared<'_, Toy>) -> Option<LssAddress> {
    toy(state).flushed
}

fn delta_on(state: Shared<'_, Toy>, flushed: Option<LssAddress>) -> Owned<Toy> {
    let below = toy(state);
    Owned::new(Toy {
        next: state.as_raw() as usize,
        depth: below.depth + 1,
        flushed: flushed.or(below.flushed),
    })
}

fn fresh(flushed: Option<LssAddress>) -> Owned<Toy> {
    Owned::new(Toy {
        next: 0,
        depth: 0,
        flushed,
    })
}

fn open_lss(sim: &SimDir) -> Lss {
    let config = LssConfig {
        segment_bytes: 64 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    Lss::open(dir, config, LssAddress::current(0)).unwrap().0
}

fn image(pid: Pid) -> Vec<u8> {
    format!("page {pid}").into_bytes()
}

/// Flushes `state` of `pid` as an image; the address if the flush won.
fn flush_image<'g>(
    table: &MappingTable<Toy>,
    lss: &Lss,
    pid: Pid,
    state: Shared<'g, Toy>,
    guard: &'g Guard,
) -> Option<(LssAddress, Shared<'g, Toy>)> {
    let payload = image(pid);
    let piece = Piece {
        kind: RecordKind::PageImage,
        lsn_low: 0,
        lsn_high: 0,
        prev: None,
        payload: &payload,
    };
    match flush(
        table,
        lss,
        pid,
        state,
        &piece,
        0,
        |f| delta_on(state, Some(f.address)),
        guard,
    )
    .unwrap()
    {
        FlushOutcome::Installed { address, state } => Some((address, state)),
        FlushOutcome::Lost { .. } => None,
    }
}

fn sample(sequence: u64) -> MapCheckpoint {
    MapCheckpoint {
        sequence,
        root: None,
        start: LssAddress::current(4096 * sequence),
        rssp: 77 + sequence,
        pid_end: 10,
        stable_end: LssAddress::current(4096 * sequence + 50),
        entries: vec![
            (0, LssAddress::current(100)),
            (3, LssAddress::current(9000 + sequence)),
            (7, LssAddress::archive(5)),
        ],
        free: vec![1, 4, 9],
        pieces: Some(vec![
            piece(0, 100, 60),
            piece(0, 160, 48),
            piece(3, 1000, 3000),
        ]),
    }
}

fn piece(pid: u64, offset: u64, bytes: u32) -> LivePiece {
    LivePiece { pid, offset, bytes }
}

fn checkpoint_strategy() -> impl Strategy<Value = MapCheckpoint> {
    (
        0..u64::MAX,
        0..(1u64 << 61),
        any::<u64>(),
        0..(1u64 << 40),
        proptest::collection::btree_map(
            0..1000u64,
            (0..(1u64 << 61), any::<bool>(), any::<bool>(), 0..4u64),
            0..40,
        ),
        any::<bool>(),
    )
        .prop_map(|(sequence, start, rssp, beyond, pids, with_pieces)| {
            let mut entries = Vec::new();
            let mut free = Vec::new();
            let mut pieces = Vec::new();
            // Pieces of 48..=111 bytes, each PID's in its own 1 KiB-aligned run below S.
            let mut next = 0;
            for (pid, (offset, archive, is_free, count)) in pids {
                if is_free {
                    free.push(pid);
                    continue;
                } else if archive {
                    entries.push((pid, LssAddress::archive(offset)));
                } else {
                    entries.push((pid, LssAddress::current(offset)));
                }
                for k in 0..count {
                    let at = next + k * 200 + offset % 50;
                    let bytes = 48 + (offset % 64) as u32;
                    if at + u64::from(bytes) <= start {
                        pieces.push(piece(pid, at, bytes));
                    }
                }
                next += 1024;
            }
            let pieces = with_pieces.then_some(pieces);
            MapCheckpoint {
                sequence,
                root: None,
                start: LssAddress::current(start),
                rssp,
                pid_end: 1000,
                stable_end: LssAddress::current(start + beyond),
                entries,
                free,
                pieces,
            }
        })
}

fn path() -> &'static Path {
    Path::new("/sim/map-0000000000000001")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    // Goal: the decoder never panics on any bytes, and what it accepts re-encodes to the same
    // bytes. Method: arbitrary bytes, and arbitrary bytes behind a valid header prefix.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(c) = decode(path(), &bytes) {
            prop_assert_eq!(&c.encode(), &bytes);
        }
        let mut prefixed = sample(1).encode()[..MAP_HEADER_BYTES].to_vec();
        prefixed.extend_from_slice(&bytes);
        if let Ok(c) = decode(path(), &prefixed) {
            prop_assert_eq!(&c.encode(), &prefixed);
        }
    }

    // Goal: every checkpoint round-trips, and any one flipped bit or any cut is reported as
    // corruption naming the file and an offset inside it. Method: random checkpoints, a
    // random bit, a random length.
    #[test]
    fn round_trip_and_damage(c in checkpoint_strategy(), bit in any::<u64>(), cut in any::<u64>()) {
        let bytes = c.encode();
        prop_assert_eq!(&decode(path(), &bytes).unwrap(), &c);
        let mut flipped = bytes.clone();
        let at = (bit % (bytes.len() as u64 * 8)) as usize;
        flipped[at / 8] ^= 1 << (at % 8);
        match decode(path(), &flipped) {
            Err(Error::Corrupt { path: p, offset, .. }) => {
                prop_assert_eq!(p.as_path(), path());
                prop_assert!(offset <= bytes.len() as u64);
            }
            other => prop_assert!(false, "a flipped bit decoded: {:?}", other),
        }
        let short = &bytes[..(cut % bytes.len() as u64) as usize];
        let is_corrupt = matches!(decode(path(), short), Err(Error::Corrupt { .. }));
        prop_assert!(is_corrupt);
    }
}

// Goal: structural damage a crc cannot catch (a writer bug) is refused by name. Method:
// re-encode checkpoints that break each rule; the crcs are then valid.
#[test]
fn rules_are_checked_past_the_checksums() {
    let cases: Vec<(MapCheckpoint, &str)> = vec![
        (
            MapCheckpoint {
                entries: vec![(3, LssAddress::current(1)), (2, LssAddress::current(2))],
                ..sample(1)
            },
            "out of order",
        ),
        (
            MapCheckpoint {
                entries: vec![(10, LssAddress::current(1))],
                ..sample(1)
            },
            "not below pid_end",
        ),
        (
            MapCheckpoint {
                free: vec![0],
                ..sample(1)
            },
            "both mapped and free",
        ),
        (
            MapCheckpoint {
                free: vec![4, 4],
                ..sample(1)
            },
            "out of order",
        ),
        (
            MapCheckpoint {
                pieces: Some(vec![piece(1, 100, 60)]),
                ..sample(1)
            },
            "PID 1, which has no entry",
        ),
        (
            MapCheckpoint {
                pieces: Some(vec![piece(3, 1000, 60), piece(0, 100, 60)]),
                ..sample(1)
            },
            "out of order",
        ),
        (
            MapCheckpoint {
                pieces: Some(vec![piece(0, 100, 60), piece(0, 159, 60)]),
                ..sample(1)
            },
            "overlaps",
        ),
        (
            MapCheckpoint {
                pieces: Some(vec![piece(0, 100, 47)]),
                ..sample(1)
            },
            "less than a record header",
        ),
        (
            MapCheckpoint {
                pieces: Some(vec![piece(0, 4000, 97)]),
                ..sample(1)
            },
            "does not end below S",
        ),
    ];
    for (c, what) in cases {
        let text = decode(path(), &c.encode()).unwrap_err().to_string();
        assert!(text.contains(what), "{text} lacks {what}");
        assert!(text.contains("map-0000000000000001"), "{text}");
    }
}

// Goal: a checkpoint without live pieces is written and read as version 2, byte for byte the
// layout the version-2 writer produced (the fixed fields, entries, free PIDs, trailer), and
// version 3's section sits between the free PIDs and the trailer. Method: encode sample 1
// with and without its pieces; compare lengths, the version field and the shared prefix.
#[test]
fn version_2_without_pieces_and_version_3_with_them() {
    let v3 = sample(1);
    let v2 = MapCheckpoint {
        pieces: None,
        ..sample(1)
    };
    let (b3, b2) = (v3.encode(), v2.encode());
    assert_eq!(b2[8..12], 2u32.to_le_bytes());
    assert_eq!(b3[8..12], 3u32.to_le_bytes());
    assert_eq!(b2.len(), MAP_HEADER_BYTES + 3 * 16 + 3 * 8 + 8);
    assert_eq!(b3.len(), b2.len() + 8 + 3 * MAP_PIECE_BYTES);
    // Everything after the version and the header crc is the same up to the free PIDs' end.
    let lists = b2.len() - 8;
    assert_eq!(b2[12..76], b3[12..76]);
    assert_eq!(b2[80..lists], b3[80..lists]);
    assert_eq!(decode(path(), &b2).unwrap(), v2);
    assert_eq!(decode(path(), &b3).unwrap(), v3);
    // A count that does not fill the file is named at the count.
    let mut bad = b3.clone();
    bad[lists..lists + 8].copy_from_slice(&4u64.to_le_bytes());
    let text = decode(path(), &bad).unwrap_err().to_string();
    assert!(text.contains("live pieces do not fill"), "{text}");
}

fn publish_whole(sim: &SimDir, c: &MapCheckpoint) {
    checkpoint::write_tmp(sim, c).unwrap();
    checkpoint::publish(sim, c.sequence).unwrap();
    checkpoint::prune(sim).unwrap();
}

// Goal: a power loss at any step of publishing checkpoint 3 over durable checkpoints 1 and 2
// leaves the reader the old (2) or the new one, whole, and the new one once `publish`
// returned. Method: steps 0..=4 (nothing; .tmp written and synced; renamed, directory not
// synced; published; pruned, which deletes map-1), each crashed in every crash mode over 16
// seeds.
#[test]
fn power_loss_at_every_step_gives_old_or_new() {
    let oldest = sample(1);
    let old = sample(2);
    let new = sample(3);
    for step in 0..=4 {
        for mode in [
            CrashMode::Random,
            CrashMode::Scatter,
            CrashMode::DropUnsynced,
        ] {
            for seed in 0..16 {
                let sim = SimDir::new(seed);
                publish_whole(&sim, &oldest);
                publish_whole(&sim, &old);
                if step >= 1 {
                    checkpoint::write_tmp(&sim, &new).unwrap();
                }
                if step == 2 {
                    sim.rename(&map_tmp_name(3), &map_file_name(3)).unwrap();
                }
                if step >= 3 {
                    checkpoint::publish(&sim, 3).unwrap();
                }
                if step >= 4 {
                    checkpoint::prune(&sim).unwrap();
                    assert!(!sim.exists(&map_file_name(1)).unwrap(), "prune ran");
                }
                sim.crash_with(mode);
                let outcome = read_newest(&sim).unwrap();
                assert!(outcome.rejected.is_empty(), "{:?}", outcome.rejected);
                let (_, got) = outcome.checkpoint.unwrap();
                if step >= 3 {
                    assert_eq!(got, new, "step {step} {mode:?} seed {seed}");
                } else {
                    assert!(got == old || got == new, "step {step} {mode:?} seed {seed}");
                }
            }
        }
    }
}

// Goal: a failed write or fsync at each I/O of publishing checkpoint 3 over checkpoints 1
// and 2 leaves the old (2) or the new one after a crash, never neither, and the new one once
// its rename was durable. Method: publishing does one write (the .tmp's append) and three
// syncs (the .tmp, the directory after the rename, the directory after prune deletes
// map-1); fail each, check the fault hit, crash over 8 seeds.
#[test]
fn faults_while_publishing_give_old_or_new() {
    let oldest = sample(1);
    let old = sample(2);
    let new = sample(3);
    let plans = [
        (FaultPlan::write(1, forest_file::FaultKind::NoSpace), "old"),
        (FaultPlan::sync(1), "old"),
        (FaultPlan::sync(2), "either"),
        (FaultPlan::sync(3), "new"),
    ];
    for (plan, expect) in plans {
        for seed in 0..8 {
            let sim = SimDir::new(seed);
            publish_whole(&sim, &oldest);
            publish_whole(&sim, &old);
            sim.set_faults(plan.clone());
            let done = checkpoint::write_tmp(&sim, &new)
                .and_then(|_| checkpoint::publish(&sim, 3))
                .and_then(|()| checkpoint::prune(&sim));
            sim.set_faults(FaultPlan::default());
            assert!(done.is_err(), "{plan:?} hit nothing");
            sim.crash();
            let (_, got) = read_newest(&sim).unwrap().checkpoint.unwrap();
            match expect {
                "old" => assert_eq!(got, old, "{plan:?} seed {seed}"),
                "new" => assert_eq!(got, new, "{plan:?} seed {seed}"),
                _ => assert!(got == old || got == new, "{plan:?} seed {seed}"),
            }
        }
    }
    // And no fifth I/O: a plan past them hits nothing.
    for plan in [
        FaultPlan::write(2, forest_file::FaultKind::NoSpace),
        FaultPlan::sync(4),
    ] {
        let sim = SimDir::new(9);
        publish_whole(&sim, &oldest);
        publish_whole(&sim, &old);
        sim.set_faults(plan);
        publish_whole(&sim, &new);
        assert_eq!(read_newest(&sim).unwrap().checkpoint.unwrap().1, new);
    }
}

// Goal: a damaged newest checkpoint falls back to the one before; all damaged is an error,
// not silence; no files is none; `.tmp` files are never read; `Checkpoints::open` sets the
// damaged aside and numbers the next one above it. Method: damage files in a SimDir.
#[test]
fn damaged_checkpoints_fall_back_or_fail() {
    let sim = SimDir::new(5);
    assert!(read_newest(&sim).unwrap().checkpoint.is_none());
    publish_whole(&sim, &sample(1));
    publish_whole(&sim, &sample(2));
    checkpoint::write_tmp(&sim, &sample(3)).unwrap();
    assert_eq!(read_newest(&sim).unwrap().checkpoint.unwrap().1, sample(2));
    // A torn newest: cut its tail.
    sim.damage(&map_file_name(2), |b| b.truncate(b.len() - 3));
    let outcome = read_newest(&sim).unwrap();
    assert_eq!(outcome.checkpoint.unwrap().1, sample(1));
    assert_eq!(outcome.rejected.len(), 1);
    assert_eq!(outcome.tmp, vec![map_tmp_name(3)]);
    // A renamed copy (sequence differs from the name) is refused too.
    let bytes = sample(1).encode();
    let mut f = sim.create(&map_file_name(9)).unwrap();
    f.append(&bytes).unwrap();
    f.sync().unwrap();
    let outcome = read_newest(&sim).unwrap();
    assert!(
        outcome.rejected[0].1.contains("differs from the name"),
        "{:?}",
        outcome.rejected
    );
    sim.remove(&map_file_name(9)).unwrap();
    // Both damaged: an error naming the files.
    sim.damage(&map_file_name(1), |b| b[MAP_HEADER_BYTES + 3] ^= 0x10);
    let text = read_newest(&sim).unwrap_err().to_string();
    assert!(text.contains("no valid map checkpoint"), "{text}");
    assert!(text.contains("body checksum"), "{text}");
    // Open sets damaged files aside (so pruning never keeps them instead of a valid one).
    let sim = SimDir::new(6);
    publish_whole(&sim, &sample(1));
    publish_whole(&sim, &sample(2));
    sim.damage(&map_file_name(2), |b| b[0] ^= 1);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let (checkpoints, outcome) = Checkpoints::open(Arc::clone(&dir)).unwrap();
    assert_eq!(outcome.checkpoint.unwrap().1, sample(1));
    let names = sim.list().unwrap();
    assert!(
        names.contains(&format!("{}.corrupt", map_file_name(2))),
        "{names:?}"
    );
    assert!(!names.contains(&map_file_name(2)));
    assert_eq!(checkpoints.clean_bound(), Some(sample(1).start));
}

/// What the writers installed: per PID, every flush address that won its CAS.
type Installed = Mutex<BTreeMap<Pid, Vec<LssAddress>>>;

// Goal: a checkpoint taken while pages are updated, flushed, consolidated, evicted and
// loaded records for each page a stable piece of that page, at least as new as the page's
// newest piece below S (completeness with the scan from S), and marks freed PIDs free.
// Method: 3 threads over 48 pages with random operations; 6 checkpoints meanwhile; after
// the run, check every entry against the LSS and the installed addresses.
#[test]
fn fuzzy_walk_under_concurrent_updates() {
    let sim = SimDir::new(11);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(12);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    let page_count = 48u64;
    {
        let guard = &epoch::pin();
        for _ in 0..page_count {
            let pid = table.allocate();
            table.install_new(pid, fresh(None), guard);
        }
        // Two freed PIDs, drained onto the free list.
        for pid in [page_count, page_count + 1] {
            assert_eq!(table.allocate(), pid);
            table.install_new(pid, fresh(None), guard);
            table.free(pid, guard);
        }
    }
    // The frees reach the free list once the epoch advances, which other tests of this
    // process can hold back while they pin: wait for it rather than assume it.
    let on_free_list = |pid: Pid| {
        matches!(
            table.read_location(pid),
            forest_llama::page_state::PageLocation::FreeLink(_)
        )
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(on_free_list(page_count) && on_free_list(page_count + 1)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the frees never drained"
        );
        epoch::pin().flush();
        std::thread::yield_now();
    }
    let installed: Installed = Mutex::new(BTreeMap::new());
    let stop = AtomicBool::new(false);
    let mut taken = Vec::new();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (table, lss, installed, stop) = (&table, &lss, &installed, &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                while !stop.load(Ordering::Relaxed) {
                    let pid = rng.random_range(0..page_count);
                    let guard = &epoch::pin();
                    let state = match table.read_location(pid) {
                        forest_llama::page_state::PageLocation::Stored(bits) => {
                            // Load: one fresh state naming the evicted address.
                            let address = LssAddress::from_bits(bits).unwrap();
                            let _ = table.install_loaded(pid, bits, fresh(Some(address)), guard);
                            continue;
                        }
                        _ => table.read(pid, guard),
                    };
                    match rng.random_range(0..10) {
                        0..=3 => {
                            let _ = table.update_d(pid, state, delta_on(state, None), guard);
                        }
                        4..=6 => {
                            if let Some((address, _)) = flush_image(table, lss, pid, state, guard) {
                                installed.lock().entry(pid).or_default().push(address);
                            }
                        }
                        7 => {
                            if toy(state).depth > 4 {
                                let flushed = toy(state).flushed;
                                let _ = table.update_r(pid, state, fresh(flushed), guard);
                            }
                        }
                        _ => {
                            // Evict: flush, make it stable, swap out.
                            if let Some((address, top)) = flush_image(table, lss, pid, state, guard)
                            {
                                installed.lock().entry(pid).or_default().push(address);
                                lss.mk_stable(address).unwrap();
                                table.swap_out(pid, top, address.to_bits(), guard);
                            }
                        }
                    }
                }
            });
        }
        for _ in 0..6 {
            std::thread::sleep(std::time::Duration::from_millis(15));
            let info = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
            let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
            assert_eq!(c.sequence, info.sequence);
            // What the threads had installed below S when S was noted is a subset of what
            // they note later, so the check after the run is exact for "below S".
            taken.push((c, info.stable_end));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let installed = installed.into_inner();
    let mut recorded = 0;
    for (c, stable_end) in &taken {
        assert_eq!(c.free, vec![page_count, page_count + 1]);
        assert_eq!(c.pid_end, page_count + 2);
        let by_pid: BTreeMap<Pid, LssAddress> = c.entries.iter().copied().collect();
        for pid in 0..page_count {
            let pieces = installed.get(&pid).map(Vec::as_slice).unwrap_or(&[]);
            let newest_below_s = pieces.iter().copied().filter(|a| *a < c.start).max();
            match (by_pid.get(&pid), newest_below_s) {
                (Some(&a), below) => {
                    recorded += 1;
                    assert!(pieces.contains(&a), "PID {pid}: {a} is not its piece");
                    assert!(a < *stable_end, "PID {pid}: {a} was not stable");
                    assert!(
                        below.is_none_or(|b| a >= b),
                        "PID {pid}: {a} older than {below:?}"
                    );
                    let record = lss.read(a).unwrap();
                    assert_eq!(record.header.pid, pid);
                    assert_eq!(record.header.kind, RecordKind::PageImage);
                }
                (None, Some(b)) => panic!("PID {pid}: piece {b} below S {} not recorded", c.start),
                (None, None) => {}
            }
        }
    }
    assert!(recorded > 0, "the run flushed nothing");
    assert!(taken.windows(2).all(|w| w[0].0.start <= w[1].0.start));
    // Two generations kept.
    let kept: Vec<String> = ckpt_sim
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| checkpoint::parse_map_file_name(n).is_some())
        .collect();
    assert_eq!(kept, vec![map_file_name(5), map_file_name(6)]);
    drop(table);
    lss.close().unwrap();
}

// Goal: the cleaner's bound: nothing may go before two checkpoints exist, a segment emptied
// before both kept checkpoints' walks and wholly below the older one's S may go, one emptied
// later or reaching above S may not. Method: take checkpoints of a small table, compare.
#[test]
fn clean_bound_follows_the_kept_checkpoints() {
    let sim = SimDir::new(21);
    let lss = open_lss(&sim);
    let (checkpoints, _) = Checkpoints::open(Arc::new(SimDir::new(22))).unwrap();
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = table.allocate();
    table.install_new(pid, fresh(None), guard);
    let emptied = checkpoints.clean_ticket();
    assert!(!checkpoints.may_remove(LssAddress::current(1), emptied));
    let state = table.read(pid, guard);
    flush_image(&table, &lss, pid, state, guard).unwrap();
    let first = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    assert!(
        !checkpoints.may_remove(LssAddress::current(1), emptied),
        "one generation only"
    );
    let late = checkpoints.clean_ticket();
    let state = table.read(pid, guard);
    flush_image(&table, &lss, pid, state, guard).unwrap();
    let second = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    assert!(second.start > first.start);
    assert_eq!(checkpoints.clean_bound(), Some(first.start));
    assert!(checkpoints.may_remove(first.start, emptied));
    assert!(!checkpoints.may_remove(LssAddress::current(first.start.offset() + 1), emptied));
    assert!(
        !checkpoints.may_remove(LssAddress::current(1), late),
        "emptied after a walk"
    );
    drop(table);
    lss.close().unwrap();
}

// Goal: a flush that reserved below S but had not yet made its CAS when the checkpoint began
// is recorded: the walk waits for it (step 2), so the scan from S, which never reads that
// piece, does not need to. This is the race a walk before Mk-Stable(S) would lose. Method:
// hold a reservation (flush's step 2 done), start a checkpoint in another thread, check it
// waits, then install the flush delta and commit the piece as `flush` does; the checkpoint
// must name that piece and begin above it.
#[test]
fn a_flush_in_flight_below_s_is_recorded() {
    let sim = SimDir::new(31);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(32);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = table.allocate();
    table.install_new(pid, fresh(None), guard);
    let payload = image(pid);
    let mut reservation = lss.reserve(payload.len()).unwrap();
    let address = reservation.address();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let (checkpoints, table, lss) = (&checkpoints, &table, &lss);
        s.spawn(move || {
            let info = checkpoints.take(table, lss, 0, newest_flushed).unwrap();
            sender.send(info).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            receiver.try_recv().is_err(),
            "the checkpoint finished while a reservation below S was in flight"
        );
        let state = table.read(pid, guard);
        table
            .update_d(pid, state, delta_on(state, Some(address)), guard)
            .map_err(|_| ())
            .unwrap();
        reservation.payload_mut().copy_from_slice(&payload);
        reservation.commit(&forest_llama::lss::RecordHeader {
            kind: RecordKind::PageImage,
            pid,
            lsn_low: 0,
            lsn_high: 0,
            prev: None,
        });
    });
    let info = receiver.recv().unwrap();
    assert!(info.start > address);
    let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
    assert_eq!(c.entries, vec![(pid, address)]);
    assert_eq!(lss.read(address).unwrap().header.pid, pid);
    drop(table);
    lss.close().unwrap();
}

// ---- Reviewer's tests (rev-mapckpt). Each failed on h-mapckpt; fixed on f-mapckpt.
// Run: cargo test -p forest-llama --test it -- checkpoint::rev_

// Goal: a damaged *older* checkpoint (the fallback) does not stop `Checkpoints::open` when
// the newest is valid: read_newest loads the newest, so recovery has what it needs.
// Method: publish 1 and 2, flip a body byte of 1, open.
#[test]
fn rev_f1_open_survives_a_damaged_older_checkpoint() {
    let sim = SimDir::new(41);
    publish_whole(&sim, &sample(1));
    publish_whole(&sim, &sample(2));
    sim.damage(&map_file_name(1), |b| b[MAP_HEADER_BYTES + 3] ^= 0x10);
    // The reader is fine with it: the newest is valid.
    assert_eq!(read_newest(&sim).unwrap().checkpoint.unwrap().1, sample(2));
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    match Checkpoints::open(dir) {
        Ok((_, outcome)) => assert_eq!(outcome.checkpoint.unwrap().1, sample(2)),
        Err(e) => panic!("open refused a directory whose newest checkpoint is valid: {e}"),
    }
}

// Goal: sequences are never reused, so a `.corrupt` file set aside is never overwritten and
// "higher is newer" holds across restarts. Method: newest damaged, open (renamed .corrupt),
// restart without taking one, open again and take: the new checkpoint gets the set-aside
// sequence again; damage it and reopen: the first `.corrupt` is overwritten.
#[test]
fn rev_f3_sequence_set_aside_is_never_reused() {
    let sim = SimDir::new(42);
    let lss = open_lss(&SimDir::new(43));
    publish_whole(&sim, &sample(1));
    publish_whole(&sim, &sample(2));
    checkpoint::write_tmp(&sim, &sample(3)).unwrap();
    checkpoint::publish(&sim, 3).unwrap();
    sim.damage(&map_file_name(3), |b| b[0] ^= 1);
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    drop(Checkpoints::open(Arc::clone(&dir)).unwrap()); // sets map-3 aside; no take: a crash
    let (checkpoints, _) = Checkpoints::open(Arc::clone(&dir)).unwrap();
    let table = MappingTable::<Toy>::new();
    let info = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    assert!(
        info.sequence > 3,
        "sequence {} reused: {}.corrupt exists",
        info.sequence,
        map_file_name(3)
    );
    drop(table);
    lss.close().unwrap();
}

// Goal: no file name in the directory makes `open` panic or number the next checkpoint
// below an existing one. Method: a (damaged) file named with the highest sequence next to a
// valid checkpoint; open, then take: the new checkpoint must be the one read_newest loads.
#[test]
fn rev_f2_highest_sequence_name_does_not_break_numbering() {
    let sim = SimDir::new(44);
    let lss = open_lss(&SimDir::new(45));
    publish_whole(&sim, &sample(1));
    let mut f = sim.create(&map_file_name(u64::MAX)).unwrap();
    f.append(b"junk").unwrap();
    f.sync().unwrap();
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Checkpoints::open(Arc::clone(&dir))
    }));
    let (checkpoints, _) = match opened {
        Ok(r) => r.unwrap(),
        Err(p) => panic!(
            "open panicked: {:?}",
            p.downcast_ref::<String>()
                .cloned()
                .or(p.downcast_ref::<&str>().map(|s| s.to_string()))
        ),
    };
    let table = MappingTable::<Toy>::new();
    let info = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    let (_, newest) = read_newest(&sim).unwrap().checkpoint.unwrap();
    assert_eq!(
        newest.sequence, info.sequence,
        "the checkpoint just taken is not the newest"
    );
    drop(table);
    lss.close().unwrap();
}

// Goal: the completeness the module doc claims: with the checkpoint's entries and a scan of
// the LSS from S applying each page piece in address order (later wins, fillers skipped),
// each page ends at its newest stable piece. Method: the cleaner starts relocating evicted
// page P (old address A1, in the checkpoint) while P is loaded, updated and flushed as image
// X; the relocation's CAS then loses (`Relocation::Changed`), but its image A' > X was
// already committed as a PageImage record of P (relocate makes it stable before its CAS).
// The documented recovery rule then ends P at A' (the stale image rebuilt from A1), not X.
#[test]
fn rev_f4_lost_relocation_image_is_not_the_pages_newest_piece() {
    use forest_llama::clean::{relocate, CleanStats, Relocation};
    let sim = SimDir::new(51);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(52);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = table.allocate();
    table.install_new(pid, fresh(None), guard);
    // P flushed and evicted at A1.
    let state = table.read(pid, guard);
    let (a1, top) = flush_image(&table, &lss, pid, state, guard).unwrap();
    lss.mk_stable(a1).unwrap();
    assert!(table.swap_out(pid, top, a1.to_bits(), guard));
    checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
    assert_eq!(c.entries, vec![(pid, a1)]);
    // The cleaner read A1 and is rebuilding P's image. Meanwhile P is loaded, updated and
    // flushed (X: P's newest piece, installed).
    let loaded = table
        .install_loaded(pid, a1.to_bits(), fresh(Some(a1)), guard)
        .map_err(|_| ())
        .unwrap();
    let updated = table
        .update_d(pid, loaded, delta_on(loaded, None), guard)
        .map_err(|_| ())
        .unwrap();
    let (x, _) = flush_image(&table, &lss, pid, updated, guard).unwrap();
    // The cleaner posts its image of A1's state and loses the CAS.
    let stats = CleanStats::default();
    let moved = relocate(
        &table,
        &lss,
        pid,
        a1,
        b"stale image of A1",
        0,
        0,
        &stats,
        guard,
    )
    .unwrap();
    assert_eq!(moved, Relocation::Changed);
    lss.mk_stable(LssAddress::current(forest_llama::lss::LSS_OFFSET_MAX))
        .unwrap();
    // Recovery as documented: the checkpoint's entries, then the scan from S, each record
    // applied by the recovery rule.
    let mut recovered = Recovery::from_checkpoint(&c);
    lss.scan(c.start, |address, header, _| {
        recovered.apply_piece(address, header);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        recovered.address_of(pid),
        Some(x),
        "P's newest stable piece is {x} (installed); recovery ends it elsewhere"
    );
    drop(table);
    lss.close().unwrap();
}

// Goal: a PID the checkpoint records free is free after recovery unless recovery is told
// otherwise; the format says "free PIDs ... none also an entry's PID" and leaves to recovery
// only the PIDs with neither mark. Method: PID 0 on the free list at the walk; afterwards it
// is allocated again and flushed (a piece at or above S). Emulate the documented recovery
// (entries, then the scan from S, later wins) and the recorded free list: PID 0 is then
// both mapped and free, so a recovery that trusts the free list hands it out twice.
#[test]
fn rev_f5_recorded_free_pid_reused_after_the_walk() {
    let sim = SimDir::new(61);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(62);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    {
        let guard = &epoch::pin();
        let pid = table.allocate();
        table.install_new(pid, fresh(None), guard);
        table.free(pid, guard);
    }
    // Drain the epoch until PID 0 is on the free list (other tests may hold pins a while).
    for _ in 0..100_000 {
        if matches!(
            table.read_location(0),
            forest_llama::page_state::PageLocation::FreeLink(_)
        ) {
            break;
        }
        epoch::pin().flush();
        std::thread::yield_now();
    }
    checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
    assert_eq!(c.free, vec![0]);
    let guard = &epoch::pin();
    let pid = table.allocate();
    assert_eq!(pid, 0);
    let state = table.install_new(pid, fresh(None), guard);
    flush_image(&table, &lss, pid, state, guard).unwrap();
    lss.mk_stable(LssAddress::current(forest_llama::lss::LSS_OFFSET_MAX))
        .unwrap();
    let mut recovered = Recovery::from_checkpoint(&c);
    lss.scan(c.start, |address, header, _| {
        recovered.apply_piece(address, header);
        Ok(())
    })
    .unwrap();
    assert!(
        !(recovered.address_of(0).is_some() && recovered.is_free(0)),
        "PID 0 is both mapped ({:?}) and free after recovery",
        recovered.address_of(0)
    );
    assert!(recovered.address_of(0).is_some(), "PID 0's flush is lost");
    drop(table);
    lss.close().unwrap();
}

// ---- f-mapckpt: the fixes' own tests.

// Goal (F1): a damaged older checkpoint is set aside and only the valid newest is kept, so
// the cleaner may remove nothing until a second checkpoint exists. Method: publish 1 and 2,
// damage 1, open; check the names, `rejected`, `clean_bound` and `may_remove`.
#[test]
fn open_sets_a_damaged_older_checkpoint_aside_and_keeps_one() {
    let sim = SimDir::new(71);
    publish_whole(&sim, &sample(1));
    publish_whole(&sim, &sample(2));
    sim.damage(&map_file_name(1), |b| b[MAP_HEADER_BYTES + 3] ^= 0x10);
    let (checkpoints, outcome) = Checkpoints::open(Arc::new(sim.clone())).unwrap();
    assert_eq!(outcome.rejected.len(), 1);
    assert_eq!(outcome.rejected[0].0, map_file_name(1));
    let names = sim.list().unwrap();
    assert!(
        names.contains(&format!("{}.corrupt", map_file_name(1))),
        "{names:?}"
    );
    assert!(names.contains(&map_file_name(2)), "{names:?}");
    assert_eq!(checkpoints.clean_bound(), Some(sample(2).start));
    assert!(!checkpoints.may_remove(LssAddress::current(0), 0));
}

// Goal (F10): a whole file of a newer format version is refused with a clear error and left
// in place, never set aside as corrupt nor skipped for an older one. Method: re-encode
// checkpoint 2 with version 2 (valid header crc) over a valid 1; read and open.
#[test]
fn a_newer_format_version_is_refused_not_set_aside() {
    let sim = SimDir::new(72);
    publish_whole(&sim, &sample(1));
    let mut bytes = sample(2).encode();
    bytes[8..12].copy_from_slice(&(checkpoint::MAP_FORMAT_VERSION + 1).to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..MAP_HEADER_BYTES - 4]);
    bytes[MAP_HEADER_BYTES - 4..MAP_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    let mut f = sim.create(&map_file_name(2)).unwrap();
    f.append(&bytes).unwrap();
    f.sync().unwrap();
    drop(f);
    for err in [
        read_newest(&sim).unwrap_err(),
        Checkpoints::open(Arc::new(sim.clone())).err().unwrap(),
    ] {
        assert!(matches!(err, Error::InvalidUse(_)), "{err}");
        assert!(err.to_string().contains("newer"), "{err}");
    }
    assert!(sim.exists(&map_file_name(2)).unwrap());
    assert!(!sim
        .exists(&format!("{}.corrupt", map_file_name(2)))
        .unwrap());
    // An older (or zero) version is damage, as before.
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..MAP_HEADER_BYTES - 4]);
    bytes[MAP_HEADER_BYTES - 4..MAP_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        decode(path(), &bytes),
        Err(Error::Corrupt { offset: 8, .. })
    ));
}

// Goal (F9): the file records T, the stable end once the walk finished, at or above S; a
// file whose T lies below S is refused. Method: take a checkpoint after a flush, read it.
#[test]
fn the_stable_end_is_recorded() {
    let sim = SimDir::new(73);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(74);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = table.allocate();
    let state = table.install_new(pid, fresh(None), guard);
    flush_image(&table, &lss, pid, state, guard).unwrap();
    let info = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
    assert_eq!(c.stable_end, info.stable_end);
    assert!(c.stable_end >= c.start && c.stable_end > LssAddress::current(0));
    let bad = MapCheckpoint {
        stable_end: LssAddress::current(0),
        start: LssAddress::current(10),
        ..sample(1)
    };
    let text = decode(path(), &bad.encode()).unwrap_err().to_string();
    assert!(text.contains("stable_end below start"), "{text}");
    drop(table);
    lss.close().unwrap();
}

// Goal (F4, F5): the recovery rule piece by piece. A flush's piece maps its PID and takes it
// off the free set; a relocation image applies only when the page recovers to the address it
// relocates from, or to another image of that address; other kinds change nothing. Method:
// apply headers by hand to a checkpoint's state.
#[test]
fn recovery_rule_applies_relocations_only_from_the_current_address() {
    use forest_llama::lss::RecordHeader;
    let at = LssAddress::current;
    let c = MapCheckpoint {
        entries: vec![(0, at(100)), (3, at(200))],
        free: vec![1, 4],
        ..sample(1)
    };
    let mut r = Recovery::from_checkpoint(&c);
    let image_of = |pid, old| RecordHeader {
        prev: Some(old),
        ..RecordHeader::new(RecordKind::PageImage, pid)
    };
    let run = |pid, prev| RecordHeader {
        prev: Some(prev),
        ..RecordHeader::new(RecordKind::DeltaRun, pid)
    };
    // PID 0: relocated from 100 (applies), again from 100 (a second image of the same state:
    // applies), then from 100 once a run superseded it (lost: skipped).
    assert!(r.apply_piece(at(5000), &image_of(0, at(100))));
    assert!(r.apply_piece(at(5100), &image_of(0, at(100))));
    assert_eq!(r.address_of(0), Some(at(5100)));
    assert!(r.apply_piece(at(5200), &run(0, at(5100))));
    assert!(!r.apply_piece(at(5300), &image_of(0, at(100))));
    assert_eq!(r.address_of(0), Some(at(5200)));
    // PID 3: a relocation from an address it does not recover to is dead.
    assert!(!r.apply_piece(at(5400), &image_of(3, at(150))));
    assert_eq!(r.address_of(3), Some(at(200)));
    // PID 1 (recorded free): a relocation of it is dead; a flush's image maps it and unfrees it.
    assert!(!r.apply_piece(at(5500), &image_of(1, at(100))));
    assert!(r.is_free(1));
    assert!(r.apply_piece(at(5600), &RecordHeader::new(RecordKind::PageImage, 1)));
    assert!(!r.is_free(1));
    assert_eq!(r.address_of(1), Some(at(5600)));
    // Other kinds change nothing.
    for kind in [
        RecordKind::FailedFlush,
        RecordKind::TxnBegin,
        RecordKind::TxnCommit,
        RecordKind::TxnUnit,
        RecordKind::Padding,
    ] {
        assert!(!r.apply_piece(at(6000), &RecordHeader::new(kind, 4)));
    }
    assert_eq!(r.free().collect::<Vec<_>>(), vec![4]);
    assert_eq!(
        r.pages().collect::<Vec<_>>(),
        vec![(0, at(5200)), (1, at(5600)), (3, at(200))]
    );
}

// Goal (F4): the relocation record names the address it relocates from, and a winning
// relocation is what recovery ends the page at. Method: evict P at A1, checkpoint, relocate
// (wins), recover from the checkpoint.
#[test]
fn a_won_relocation_is_recovered() {
    use forest_llama::clean::{relocate, CleanStats, Relocation};
    let sim = SimDir::new(75);
    let lss = open_lss(&sim);
    let ckpt_sim = SimDir::new(76);
    let (checkpoints, _) = Checkpoints::open(Arc::new(ckpt_sim.clone())).unwrap();
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = table.allocate();
    table.install_new(pid, fresh(None), guard);
    let state = table.read(pid, guard);
    let (a1, top) = flush_image(&table, &lss, pid, state, guard).unwrap();
    lss.mk_stable(a1).unwrap();
    assert!(table.swap_out(pid, top, a1.to_bits(), guard));
    checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
    let (_, c) = read_newest(&ckpt_sim).unwrap().checkpoint.unwrap();
    let stats = CleanStats::default();
    let Relocation::Moved(image) =
        relocate(&table, &lss, pid, a1, b"image of A1", 0, 0, &stats, guard).unwrap()
    else {
        panic!("the relocation lost with no race");
    };
    let header = lss.read(image).unwrap().header;
    assert_eq!(header.kind, RecordKind::PageImage);
    assert_eq!(header.relocated_from(), Some(a1));
    let mut recovered = Recovery::from_checkpoint(&c);
    lss.scan(c.start, |address, header, _| {
        recovered.apply_piece(address, header);
        Ok(())
    })
    .unwrap();
    assert_eq!(recovered.address_of(pid), Some(image));
    drop(table);
    lss.close().unwrap();
}

// Goal (F4): a lost relocation of the piece a won relocation moved (two cleaners raced on
// the page) lands on the same state, and a later relocation of the won image still applies.
// Method: apply headers by hand: piece Q, relocation R of Q, a late image of Q, then a
// relocation of R.
#[test]
fn recovery_rule_follows_every_image_of_the_same_state() {
    use forest_llama::lss::RecordHeader;
    let at = LssAddress::current;
    let c = MapCheckpoint {
        entries: vec![(0, at(100))],
        free: vec![],
        ..sample(1)
    };
    let image_of = |old| RecordHeader {
        prev: Some(old),
        ..RecordHeader::new(RecordKind::PageImage, 0)
    };
    let mut r = Recovery::from_checkpoint(&c);
    assert!(r.apply_piece(at(5000), &image_of(at(100))));
    assert!(r.apply_piece(at(5100), &image_of(at(100))));
    assert!(r.apply_piece(at(5200), &image_of(at(5000))));
    assert_eq!(r.address_of(0), Some(at(5200)));
}
