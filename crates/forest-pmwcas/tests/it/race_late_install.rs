//! §2.3.2's race, forced step by step with pause points: a late installation for a completed
//! PMwCAS p1 must not overwrite the result of a later PMwCAS p2.
//!
//! The interleaving (four actors, more than the loom models reach within their bounds):
//! 1. p1 = {A: 0 -> 1, B: 0 -> 1} installs an RDCSS reference r in A and stops.
//! 2. Thread C reads A, meets r, reads p1's status (`Undecided`) and stops before its CAS.
//! 3. p1 completes r itself (A = p1's descriptor) and stops before installing B.
//! 4. Thread H reads A, meets p1's descriptor, helps: reads `Undecided`, stops just before
//!    its own RDCSS installation in A.
//! 5. p1 finishes (A = B = 1); p2 = {A: 1 -> 0, B: 1 -> 0} runs (A = B = 0).
//! 6. H installs its RDCSS reference r' in A (A held p1's expected value 0) and stops.
//! 7. C resumes: its CAS expects r. If r' had the same bits as r (the reference library
//!    reuses the word descriptor as the RDCSS descriptor), C would install p1's descriptor
//!    in A and every reader would roll p1 forward: A = 1 beside B = 0. Here every
//!    installation draws a fresh sequence number (`word.rs`, `rdcss.rs`), so C's CAS fails.
//! 8. H resumes, finds p1 decided and rolls r' back: A = B = 0.

#![cfg(not(any(loom, shuttle)))]
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use forest_core::pause::set_pause_hook;
use forest_pmwcas::{NoPersist, Pool, PoolConfig};

/// A thread stopped at the `occurrence`-th time it reaches `point`, until released.
struct Stop {
    thread: &'static str,
    point: &'static str,
    occurrence: usize,
    count: AtomicUsize,
    reached: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
}

/// The test's side of a stop.
struct Handle {
    reached: Receiver<()>,
    go: Sender<()>,
    what: String,
}

impl Handle {
    fn wait(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("never reached {}", self.what));
    }

    fn release(&self) {
        self.go.send(()).unwrap();
    }
}

fn stops(list: &[(&'static str, &'static str, usize)]) -> Vec<Handle> {
    let mut all = Vec::new();
    let mut handles = Vec::new();
    for &(thread, point, occurrence) in list {
        let (reached_tx, reached_rx) = channel();
        let (go_tx, go_rx) = channel();
        all.push(Stop {
            thread,
            point,
            occurrence,
            count: AtomicUsize::new(0),
            reached: Mutex::new(reached_tx),
            go: Mutex::new(go_rx),
        });
        handles.push(Handle {
            reached: reached_rx,
            go: go_tx,
            what: format!("{thread} at {point} #{occurrence}"),
        });
    }
    let all = Arc::new(all);
    set_pause_hook(Some(Arc::new(move |name| {
        let current = std::thread::current();
        let Some(thread) = current.name() else { return };
        for stop in all.iter() {
            if stop.thread == thread
                && stop.point == name
                && stop.count.fetch_add(1, Ordering::SeqCst) + 1 == stop.occurrence
            {
                stop.reached.lock().unwrap().send(()).unwrap();
                stop.go.lock().unwrap().recv().unwrap();
            }
        }
    })));
    handles
}

/// A thread's body.
type Job = Box<dyn FnOnce(&Pool<NoPersist>) -> u64 + Send>;

#[test]
fn late_install_for_completed_p1_does_not_overwrite_p2() {
    let _serial = crate::serial();
    let pool = Arc::new(
        Pool::create_volatile(
            NoPersist,
            PoolConfig {
                partition_count: 1,
                descriptors_per_partition: 4,
                client_words: 0,
                user_words: 8,
                recyclers: Vec::new(),
            },
        )
        .unwrap(),
    );
    let base = pool.user_area().start;
    let [p1_installed_a, c_read_status, p1_before_b, h_before_install, h_installed] =
        <[Handle; 5]>::try_from(stops(&[
            ("p1", "pmwcas:rdcss-installed", 1),
            ("c", "pmwcas:rdcss-status-read", 1),
            ("p1", "pmwcas:rdcss-installing", 2),
            ("h", "pmwcas:rdcss-installing", 1),
            ("h", "pmwcas:rdcss-installed", 1),
        ]))
        .ok()
        .unwrap();
    let spawn = |name: &str, f: Job| {
        let pool = pool.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&pool))
            .unwrap()
    };
    let read_a: fn(&Pool<NoPersist>) -> u64 = |pool| {
        let guard = pool.pin();
        pool.read(pool.word(pool.user_area().start).unwrap(), &guard)
    };
    // 1.
    let p1 = spawn(
        "p1",
        Box::new(move |pool| {
            let guard = pool.pin();
            let mut d = pool.allocate_descriptor(&guard).unwrap();
            d.add_word(pool.word(base).unwrap(), 0, 1).unwrap();
            d.add_word(pool.word(base + 8).unwrap(), 0, 1).unwrap();
            u64::from(d.execute().unwrap())
        }),
    );
    p1_installed_a.wait();
    // 2.
    let c = spawn("c", Box::new(read_a));
    c_read_status.wait();
    // 3.
    p1_installed_a.release();
    p1_before_b.wait();
    // 4.
    let h = spawn("h", Box::new(read_a));
    h_before_install.wait();
    // 5.
    p1_before_b.release();
    assert_eq!(p1.join().unwrap(), 1, "p1 succeeds");
    {
        let guard = pool.pin();
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(pool.word(base).unwrap(), 1, 0).unwrap();
        d.add_word(pool.word(base + 8).unwrap(), 1, 0).unwrap();
        assert!(d.execute().unwrap(), "p2 succeeds");
    }
    // 6.
    h_before_install.release();
    h_installed.wait();
    // 7.
    c_read_status.release();
    let c_saw = c.join().unwrap();
    // 8.
    h_installed.release();
    let h_saw = h.join().unwrap();
    set_pause_hook(None);
    let guard = pool.pin();
    let a = pool.read(pool.word(base).unwrap(), &guard);
    let b = pool.read(pool.word(base + 8).unwrap(), &guard);
    assert_eq!(
        (a, b),
        (0, 0),
        "p2's result stands (C saw {c_saw}, H saw {h_saw})"
    );
}
