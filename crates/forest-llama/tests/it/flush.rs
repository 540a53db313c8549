//! Flush (TSBw §II-D; issue 17, second increment) over a toy page type: reserve, CAS the
//! flush delta, copy the piece or write a failed-flush filler.
#![cfg(not(loom))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard, Owned, Shared};
use forest_file::{Dir, SimDir};
use forest_llama::flush::{flush, FlushDelta, FlushOutcome, Piece};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordKind};
use forest_llama::{MappingTable, PageState, Pid};

/// A toy page state: a chain of versions, each node owning the one below it (`next` is the
/// address of its older state, 0 for the first).
struct Toy {
    next: usize,
    version: u64,
    flush: Option<FlushDelta>,
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

fn delta_on(state: Shared<'_, Toy>, version: u64, flush: Option<FlushDelta>) -> Owned<Toy> {
    Owned::new(Toy {
        next: state.as_raw() as usize,
        version,
        flush,
    })
}

fn open(sim: &SimDir) -> Lss {
    let config = LssConfig {
        segment_bytes: 64 << 10,
        buffer_bytes: 4 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    };
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    Lss::open(dir, config, LssAddress::current(0)).unwrap().0
}

fn page(table: &MappingTable<Toy>, guard: &Guard) -> Pid {
    let pid = table.allocate();
    table.install_new(
        pid,
        Owned::new(Toy {
            next: 0,
            version: 1,
            flush: None,
        }),
        guard,
    );
    pid
}

fn image(payload: &[u8], lsn_high: u64) -> Piece<'_> {
    Piece {
        kind: RecordKind::PageImage,
        lsn_low: 1,
        lsn_high,
        prev: None,
        payload,
    }
}

/// Flushes the state `state` of `pid`, with the flush delta one version above it.
fn flush_toy<'g>(
    table: &MappingTable<Toy>,
    lss: &Lss,
    pid: Pid,
    state: Shared<'g, Toy>,
    piece: &Piece<'_>,
    guard: &'g Guard,
) -> FlushOutcome<'g, Toy> {
    let version = toy(state).version;
    flush(
        table,
        lss,
        pid,
        state,
        piece,
        7,
        |delta| delta_on(state, version + 1, Some(delta)),
        guard,
    )
    .unwrap()
}

// Goal: a won flush installs its delta naming the piece's address, LSN and annotation, and
// the piece reads back from the LSS once stable; the next flush is incremental and links to
// it. Method: flush an image, update, flush a delta run naming the image; read both back.
#[test]
fn flush_installs_its_delta_and_pieces_chain() {
    let sim = SimDir::new(1);
    let lss = open(&sim);
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = page(&table, guard);
    let s1 = table.read(pid, guard);
    let FlushOutcome::Installed { address: a1, state } =
        flush_toy(&table, &lss, pid, s1, &image(b"image one", 5), guard)
    else {
        panic!("the only flush of the state wins");
    };
    assert_eq!(table.read(pid, guard), state);
    let f1 = toy(state).flush.unwrap();
    assert_eq!(
        f1,
        FlushDelta {
            address: a1,
            lsn_high: 5,
            annotation: 7
        }
    );
    assert_eq!(toy(state).next, s1.as_raw() as usize, "the delta sits on S");
    let s3 = table
        .update_d(pid, state, delta_on(state, 10, None), guard)
        .map_err(|_| ())
        .unwrap();
    let run = Piece {
        kind: RecordKind::DeltaRun,
        lsn_low: 6,
        lsn_high: 9,
        prev: Some(a1),
        payload: b"run",
    };
    let FlushOutcome::Installed { address: a2, .. } = flush_toy(&table, &lss, pid, s3, &run, guard)
    else {
        panic!("the only flush of the state wins");
    };
    assert!(a2 > a1, "pieces lie in flush order");
    lss.mk_stable(a2).unwrap();
    let r1 = lss.read(a1).unwrap();
    assert_eq!(r1.header.kind, RecordKind::PageImage);
    assert_eq!(r1.header.pid, pid);
    assert_eq!((r1.header.lsn_low, r1.header.lsn_high), (1, 5));
    assert_eq!(r1.header.prev, None);
    assert_eq!(r1.payload, b"image one");
    let r2 = lss.read(a2).unwrap();
    assert_eq!(r2.header.kind, RecordKind::DeltaRun);
    assert_eq!(r2.header.prev, Some(a1), "the run links to the image");
    assert_eq!((r2.header.lsn_low, r2.header.lsn_high), (6, 9));
    assert_eq!(r2.payload, b"run");
    drop(table);
    lss.close().unwrap();
}

// Goal: a flush whose state changed before its CAS installs nothing and leaves a
// failed-flush filler at its reserved address. Method: read S, update the page, flush S.
#[test]
fn lost_flush_writes_a_filler() {
    let sim = SimDir::new(2);
    let lss = open(&sim);
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = page(&table, guard);
    let s1 = table.read(pid, guard);
    let s2 = table
        .update_d(pid, s1, delta_on(s1, 2, None), guard)
        .map_err(|_| ())
        .unwrap();
    let FlushOutcome::Lost { found, filler } =
        flush_toy(&table, &lss, pid, s1, &image(b"stale", 1), guard)
    else {
        panic!("a flush of a replaced state loses");
    };
    assert_eq!(found, s2);
    assert_eq!(table.read(pid, guard), s2, "nothing installed");
    lss.mk_stable(filler).unwrap();
    let record = lss.read(filler).unwrap();
    assert_eq!(record.header.kind, RecordKind::FailedFlush);
    assert_eq!(record.header.pid, pid);
    assert!(record.payload.iter().all(|&b| b == 0), "no stale bytes");
    assert_eq!(record.payload.len(), b"stale".len());
    drop(table);
    lss.close().unwrap();
}

// Goal: malformed pieces are refused by name before anything is reserved or installed.
// Method: a delta run without a previous piece, a piece of a system-transaction kind, an
// inverted LSN range.
#[test]
fn malformed_pieces_are_refused() {
    let sim = SimDir::new(3);
    let lss = open(&sim);
    let table = MappingTable::<Toy>::new();
    let guard = &epoch::pin();
    let pid = page(&table, guard);
    let s1 = table.read(pid, guard);
    let bad = [
        (
            Piece {
                kind: RecordKind::DeltaRun,
                lsn_low: 0,
                lsn_high: 0,
                prev: None,
                payload: b"x",
            },
            "previous piece",
        ),
        (
            Piece {
                kind: RecordKind::TxnUnit,
                lsn_low: 0,
                lsn_high: 0,
                prev: None,
                payload: b"x",
            },
            "system-transaction unit",
        ),
        (
            Piece {
                kind: RecordKind::PageImage,
                lsn_low: 5,
                lsn_high: 4,
                prev: None,
                payload: b"x",
            },
            "inverted",
        ),
    ];
    for (piece, what) in bad {
        let result = flush(&table, &lss, pid, s1, &piece, 0, |_| unreachable!(), guard);
        let Err(e) = result else {
            panic!("{what}: accepted")
        };
        assert!(e.to_string().contains(what), "{e}");
        assert!(e.to_string().contains(&format!("page {pid}")), "{e}");
    }
    assert_eq!(table.read(pid, guard), s1);
    assert_eq!(lss.stats().filler_count, 0);
    drop(table);
    lss.close().unwrap();
}

// Goal: flushes racing updates and each other: every installed flush delta has exactly one
// piece, holding the state it sits on; every lost flush exactly one filler; nothing else is
// in the LSS. Method: 4 threads on one page, each either updates (a delta one version up)
// or flushes the state it read (the piece is that state's version); afterwards walk the
// chain and scan the LSS.
#[test]
fn flushes_racing_updates_are_never_lost_or_doubled() {
    let sim = SimDir::new(4);
    let lss = open(&sim);
    let table = MappingTable::<Toy>::new();
    let pid = page(&table, &epoch::pin());
    let (installed, lost): (Vec<LssAddress>, Vec<LssAddress>) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (table, lss) = (&table, &lss);
                scope.spawn(move || {
                    let (mut won, mut lost) = (Vec::new(), Vec::new());
                    for i in 0..400u64 {
                        let guard = &epoch::pin();
                        let state = table.read(pid, guard);
                        let version = toy(state).version;
                        if (i + t) % 3 == 0 {
                            let bytes = version.to_le_bytes();
                            match flush_toy(table, lss, pid, state, &image(&bytes, version), guard)
                            {
                                FlushOutcome::Installed { address, .. } => won.push(address),
                                FlushOutcome::Lost { filler, .. } => lost.push(filler),
                            }
                        } else {
                            let delta = delta_on(state, version + 1, None);
                            let _ = table.update_d(pid, state, delta, guard);
                        }
                    }
                    (won, lost)
                })
            })
            .collect();
        let mut all = (Vec::new(), Vec::new());
        for handle in handles {
            let (won, lost) = handle.join().unwrap();
            all.0.extend(won);
            all.1.extend(lost);
        }
        all
    });
    let (mut installed, mut lost) = (installed, lost);
    let guard = &epoch::pin();
    // One lost flush and one installed for certain, whatever the race above did (it decides
    // only how many more: a loaded machine may run the threads one after another).
    let stale = table.read(pid, guard);
    let version = toy(stale).version;
    assert!(
        table
            .update_d(pid, stale, delta_on(stale, version + 1, None), guard)
            .is_ok(),
        "a lone update"
    );
    let bytes = version.to_le_bytes();
    match flush_toy(&table, &lss, pid, stale, &image(&bytes, version), guard) {
        FlushOutcome::Lost { filler, .. } => lost.push(filler),
        FlushOutcome::Installed { .. } => panic!("a flush of a replaced state was installed"),
    }
    let state = table.read(pid, guard);
    let version = toy(state).version;
    let bytes = version.to_le_bytes();
    match flush_toy(&table, &lss, pid, state, &image(&bytes, version), guard) {
        FlushOutcome::Installed { address, .. } => installed.push(address),
        FlushOutcome::Lost { .. } => panic!("a lone flush was lost"),
    }
    // Each flush delta in the chain: its piece holds the version of the state below it.
    let mut in_chain = Vec::new();
    let mut node = toy(table.read(pid, guard));
    loop {
        let below = node.next;
        if below == 0 {
            break;
        }
        let older = toy(Shared::from(below as *const Toy));
        if let Some(f) = node.flush {
            in_chain.push((f.address, older.version));
        }
        node = older;
    }
    in_chain.sort();
    let mut won = installed.clone();
    won.sort();
    assert_eq!(
        in_chain.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
        won,
        "each won flush has its delta in the chain, once"
    );
    let last = won.iter().chain(&lost).max().copied().unwrap();
    lss.mk_stable(last).unwrap();
    let mut images = Vec::new();
    let mut fillers = Vec::new();
    lss.scan(LssAddress::current(0), |address, header, payload| {
        match header.kind {
            RecordKind::PageImage => {
                let mut word = [0u8; 8];
                word.copy_from_slice(payload);
                images.push((address, u64::from_le_bytes(word)));
            }
            RecordKind::FailedFlush => fillers.push(address),
            other => panic!("unexpected {other:?} at {address}"),
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        images, in_chain,
        "each piece holds the state its delta sits on"
    );
    lost.sort();
    assert_eq!(fillers, lost, "each lost flush left one filler");
    drop(table);
    lss.close().unwrap();
}
