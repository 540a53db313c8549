//! Loom models of the mapping table's lock-free protocols: install (Update-R / Update-D CAS
//! races), retire (each replaced state reclaimed once), withdrawal of a delta (restore), chunk
//! growth, and PID reuse through the free list.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p forest-llama
//! --release --test loom_mapping_table`.
//!
//! crossbeam-epoch does not run under loom (its thread-local handles and global epoch are not
//! loom-aware), so the models use `epoch::unprotected()` guards: deferred reclamation and PID
//! recycling then run at once, which is the moment an epoch has drained. What is modeled is
//! everything the table itself does with atomics (the CASes, the chunk directory, the free
//! list's versioned head); the epoch's own guarantee is crossbeam's, checked by its loom suite.
#![cfg(loom)]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Owned};
use forest_llama::{MappingTable, PageState, Pid};

/// A page state that counts its reclamations.
struct Page {
    reclaimed: Arc<AtomicUsize>,
}

impl PageState for Page {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the trait's contract: an unreachable state from `Owned`, reclaimed once.
        let page = unsafe { Owned::from_raw(ptr) };
        page.reclaimed.fetch_add(1, Ordering::Relaxed);
    }
}

fn page(reclaimed: &Arc<AtomicUsize>) -> Owned<Page> {
    Owned::new(Page {
        reclaimed: Arc::clone(reclaimed),
    })
}

// Goal: two Update-Rs from the same state: exactly one wins, the old state is retired once,
// and nothing leaks. Method: both threads CAS from the initial state; count wins and reclaims.
#[test]
fn update_r_race_installs_one_and_retires_once() {
    loom::model(|| {
        let reclaimed = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(MappingTable::<Page>::new());
        // SAFETY: no state is dereferenced in this model, so running deferred frees at once
        // is safe.
        let guard = unsafe { epoch::unprotected() };
        let pid = table.allocate();
        let initial = table.install_new(pid, page(&reclaimed), guard);
        let wins = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, reclaimed, wins) = (table.clone(), reclaimed.clone(), wins.clone());
                loom::thread::spawn(move || {
                    // SAFETY: as above.
                    let guard = unsafe { epoch::unprotected() };
                    if table
                        .update_r(pid, initial, page(&reclaimed), guard)
                        .is_ok()
                    {
                        wins.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(wins.load(Ordering::Relaxed), 1);
        assert_eq!(
            reclaimed.load(Ordering::Relaxed),
            1,
            "the initial state, once"
        );
        drop(table);
        assert_eq!(
            reclaimed.load(Ordering::Relaxed),
            2,
            "the final state, at drop"
        );
    });
}

// Goal: Update-D retried from the state a failed CAS returns never loses a delta. Method: two
// threads prepend with retry; the final state must be one of theirs and the CAS must have
// failed at most once.
#[test]
fn update_d_with_retry_installs_both() {
    loom::model(|| {
        let reclaimed = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(MappingTable::<Page>::new());
        // SAFETY: no state is dereferenced in this model.
        let guard = unsafe { epoch::unprotected() };
        let pid = table.allocate();
        table.install_new(pid, page(&reclaimed), guard);
        let failures = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, reclaimed, failures) =
                    (table.clone(), reclaimed.clone(), failures.clone());
                loom::thread::spawn(move || {
                    // SAFETY: as above.
                    let guard = unsafe { epoch::unprotected() };
                    let mut expected = table.read(pid, guard);
                    let mut delta = page(&reclaimed);
                    loop {
                        match table.update_d(pid, expected, delta, guard) {
                            Ok(installed) => return installed.as_raw() as usize,
                            Err((back, found)) => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                delta = back;
                                expected = found;
                            }
                        }
                    }
                })
            })
            .collect();
        let installed: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let last = table.read(pid, guard).as_raw() as usize;
        assert!(installed.contains(&last));
        assert_ne!(installed[0], installed[1]);
        assert!(failures.load(Ordering::Relaxed) <= 1);
        // Update-D retires nothing (a real delta owns the state below it). These test states
        // are not chained, so the one no longer in the table is freed here; the table's drop
        // frees the other and the initial state is left to the count below.
        for &ptr in &installed {
            if ptr != last {
                // SAFETY: the threads are joined and the state is out of the table, so nothing
                // reaches it; it came from `Owned` and is freed once, here.
                drop(unsafe { Owned::from_raw(ptr as *mut Page) });
            }
        }
        drop(table);
    });
}

// Goal: concurrent Allocate across a chunk boundary hands out distinct PIDs and installs each
// chunk once. Method: two threads allocate two PIDs each (chunks of 2 under loom) and install
// a state in each; all four states are readable afterwards.
#[test]
fn allocation_grows_chunks_without_duplicates() {
    loom::model(|| {
        let reclaimed = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(MappingTable::<Page>::new());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, reclaimed) = (table.clone(), reclaimed.clone());
                loom::thread::spawn(move || {
                    // SAFETY: no state is dereferenced in this model.
                    let guard = unsafe { epoch::unprotected() };
                    let pids: Vec<Pid> = (0..2).map(|_| table.allocate()).collect();
                    for &pid in &pids {
                        table.install_new(pid, page(&reclaimed), guard);
                    }
                    pids
                })
            })
            .collect();
        let mut pids: Vec<Pid> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        pids.sort_unstable();
        assert_eq!(pids, vec![0, 1, 2, 3]);
        // SAFETY: as above.
        let guard = unsafe { epoch::unprotected() };
        assert!(pids.iter().all(|&pid| !table.read(pid, guard).is_null()));
        drop(table);
        assert_eq!(reclaimed.load(Ordering::Relaxed), 4);
    });
}

// Goal: a freed PID is handed out again only after its (modeled) epoch drain, and never to two
// threads at once. Method: one thread frees two PIDs while another allocates two; PIDs live at
// the same time must be distinct and the live count must add up.
#[test]
fn freed_pids_are_reused_once() {
    loom::model(|| {
        let reclaimed = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(MappingTable::<Page>::new());
        // SAFETY: no state is dereferenced in this model.
        let guard = unsafe { epoch::unprotected() };
        let keep = table.allocate();
        let a = table.allocate();
        let b = table.allocate();
        for pid in [keep, a, b] {
            table.install_new(pid, page(&reclaimed), guard);
        }
        let freer = {
            let table = table.clone();
            loom::thread::spawn(move || {
                // SAFETY: as above.
                let guard = unsafe { epoch::unprotected() };
                table.free(a, guard);
                table.free(b, guard);
            })
        };
        let allocator = {
            let table = table.clone();
            loom::thread::spawn(move || [table.allocate(), table.allocate()])
        };
        freer.join().unwrap();
        let got = allocator.join().unwrap();
        assert_ne!(got[0], got[1]);
        assert!(!got.contains(&keep), "a live PID was handed out again");
        assert_eq!(table.live_count(), 3);
        // Both freed PIDs are back or in use: two more allocations never repeat a live PID.
        let more = [table.allocate(), table.allocate()];
        let mut all = vec![keep, got[0], got[1], more[0], more[1]];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5);
        assert_eq!(
            reclaimed.load(Ordering::Relaxed),
            2,
            "freed states reclaimed once"
        );
    });
}

/// A page state that counts how often it is dropped, however it is freed.
struct Dropped {
    drops: Arc<AtomicUsize>,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

impl PageState for Dropped {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the trait's contract: an unreachable state from `Owned`, reclaimed once.
        drop(unsafe { Owned::from_raw(ptr) });
    }
}

// Goal: withdrawing a delta (restore the state below it, retire the delta) races safely with
// a writer that CASes from the old state: every state is freed exactly once, whoever wins.
// Method: thread A prepends D to S then restores S and retires D; thread B replaces S by N
// with Update-R; after the table drops, S, D and N have each been dropped once.
#[test]
fn restore_races_with_update_r_and_frees_each_state_once() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let table = Arc::new(MappingTable::<Dropped>::new());
        // SAFETY: no state is dereferenced in this model.
        let guard = unsafe { epoch::unprotected() };
        let pid = table.allocate();
        let s = table.install_new(
            pid,
            Owned::new(Dropped {
                drops: drops.clone(),
            }),
            guard,
        );
        let s_raw = s.as_raw() as usize;
        let a = {
            let (table, drops) = (table.clone(), drops.clone());
            loom::thread::spawn(move || {
                // SAFETY: as above.
                let guard = unsafe { epoch::unprotected() };
                let s = crossbeam_epoch::Shared::from(s_raw as *const Dropped);
                let d = Owned::new(Dropped { drops });
                if let Ok(d) = table.update_d(pid, s, d, guard) {
                    if table.restore(pid, d, s, guard) {
                        table.retire(d, guard);
                    }
                }
            })
        };
        let b = {
            let (table, drops) = (table.clone(), drops.clone());
            loom::thread::spawn(move || {
                // SAFETY: as above.
                let guard = unsafe { epoch::unprotected() };
                let s = crossbeam_epoch::Shared::from(s_raw as *const Dropped);
                let _ = table.update_r(pid, s, Owned::new(Dropped { drops }), guard);
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        drop(table);
        assert_eq!(drops.load(Ordering::Relaxed), 3, "S, D and N, each once");
    });
}
