//! Review rev-pmrec's F2, forced with pause points: a helper that loaded a reference before it
//! pinned the reuse domain snapshots a generation g already decided and retired; g is released
//! and reused (g + 1, `Undecided`) while the helper is pinned; the helper's `run` must see that
//! the status is no longer g's (`execute.rs` `undecided` compares the generation) and install
//! nothing. Without that check it runs g's Phase 1 against g + 1's `Undecided` status: its
//! RDCSS installation in A (back at g's expected value) completes to a reference to g + 1,
//! which g + 1 does not target, so A holds it for good and a read of A never returns.
//!
//! The interleaving (one descriptor, so g + 1 is the same one). Since session 15 a retirement
//! that finds no reuse pin held releases the descriptor at once (`reuse.rs`), so a second
//! helper P holds a pin across g's retirement to send g through the epoch, as any concurrent
//! helper would:
//! 1. O runs g = {A: 0 -> 1, B: 7 -> 1} and stops after installing A (B holds 0: g fails).
//! 2. H reads A, meets g's reference and stops before pinning (`help-reference-loaded`).
//! 3. P reads A, meets g's reference, pins, snapshots g (`Undecided`) and stops
//!    (`help-snapshot-taken`).
//! 4. O finishes: g fails, A is rolled back to 0, g is retired at epoch e with P pinned (the
//!    epoch moves to e + 1, P announcing e).
//! 5. P resumes and returns A's value, 0, unpinning; H pins at e + 1, snapshots g (`Failed`,
//!    not released yet) and stops (`help-snapshot-taken`).
//! 6. M allocates: the pool is empty, the epoch can move to e + 2 (H announces e + 1), g is
//!    released and M takes it as g + 1 = {C: 0 -> 1, D: 0 -> 1} (two words: a single-word
//!    PMwCAS publishes no descriptor), published, stopped before its first install.
//! 7. H resumes: it must return A's value, 0. M finishes; A, B, C, D read 0, 0, 1, 1.

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

/// A thread's body; its result comes back through a channel so that a hang is a failure.
type Job = Box<dyn FnOnce(&Pool<NoPersist>) -> u64 + Send>;

fn spawn(pool: &Arc<Pool<NoPersist>>, name: &str, f: Job) -> Receiver<u64> {
    let pool = Arc::clone(pool);
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(f(&pool));
        })
        .unwrap();
    rx
}

fn outcome(rx: &Receiver<u64>, what: &str) -> u64 {
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} never returned"))
}

fn read_word(pool: &Pool<NoPersist>, offset: u64) -> u64 {
    let guard = pool.pin();
    pool.read(pool.word(offset).unwrap(), &guard)
}

#[test]
fn helper_of_a_reused_generation_installs_nothing() {
    let _serial = crate::serial();
    let pool = Arc::new(
        Pool::create_volatile(
            NoPersist,
            PoolConfig {
                partition_count: 1,
                descriptors_per_partition: 1,
                client_words: 0,
                user_words: 8,
                recyclers: Vec::new(),
            },
        )
        .unwrap(),
    );
    let base = pool.user_area().start;
    let (a, b, c, d) = (base, base + 8, base + 16, base + 24);
    let [o_installed_a, h_loaded, h_snapshot, p_snapshot, m_before_install] =
        <[Handle; 5]>::try_from(stops(&[
            ("o", "pmwcas:phase1-word-installed", 1),
            ("h", "pmwcas:help-reference-loaded", 1),
            ("h", "pmwcas:help-snapshot-taken", 1),
            ("p", "pmwcas:help-snapshot-taken", 1),
            ("m", "pmwcas:rdcss-installing", 1),
        ]))
        .ok()
        .unwrap();
    // 1.
    let o = spawn(
        &pool,
        "o",
        Box::new(move |pool| {
            let guard = pool.pin();
            let mut d = pool.allocate_descriptor(&guard).unwrap();
            d.add_word(pool.word(a).unwrap(), 0, 1).unwrap();
            d.add_word(pool.word(b).unwrap(), 7, 1).unwrap();
            u64::from(d.execute().unwrap())
        }),
    );
    o_installed_a.wait();
    // 2.
    let h = spawn(&pool, "h", Box::new(move |pool| read_word(pool, a)));
    h_loaded.wait();
    // 3.
    let p = spawn(&pool, "p", Box::new(move |pool| read_word(pool, a)));
    p_snapshot.wait();
    // 4.
    o_installed_a.release();
    assert_eq!(outcome(&o, "O's PMwCAS"), 0, "g fails on B");
    // 5. P unpins first: a pool of one partition has one reuse slot, whose announcement
    // stays the oldest of the pins sharing it (`reuse.rs`).
    p_snapshot.release();
    assert_eq!(outcome(&p, "P's read of A"), 0, "P reads A rolled back");
    h_loaded.release();
    h_snapshot.wait();
    // 6.
    let m = spawn(
        &pool,
        "m",
        Box::new(move |pool| {
            let guard = pool.pin();
            let mut g1 = pool.allocate_descriptor(&guard).unwrap();
            g1.add_word(pool.word(c).unwrap(), 0, 1).unwrap();
            g1.add_word(pool.word(d).unwrap(), 0, 1).unwrap();
            u64::from(g1.execute().unwrap())
        }),
    );
    m_before_install.wait();
    // 7.
    h_snapshot.release();
    let h_saw = outcome(
        &h,
        "H's read of A (a stale helper installed a reference to the reused generation?)",
    );
    m_before_install.release();
    assert_eq!(outcome(&m, "M's PMwCAS"), 1, "g + 1 succeeds");
    set_pause_hook(None);
    assert_eq!(h_saw, 0, "H reads A rolled back");
    let r = spawn(
        &pool,
        "reader",
        Box::new(move |pool| {
            (read_word(pool, a) << 24)
                | (read_word(pool, b) << 16)
                | (read_word(pool, c) << 8)
                | read_word(pool, d)
        }),
    );
    assert_eq!(
        outcome(&r, "the final reads (A holds a stale reference?)"),
        0x0101,
        "A, B, C, D = 0, 0, 1, 1"
    );
}

// Review rev-pmw (coverage of the pin-count fast path, expected to pass): the scenario above
// without P, so g's retirement finds no reuse pin held and releases g at once (`reuse.rs`),
// while H holds g's reference loaded and unpinned. M reuses the descriptor as g + 1 =
// {C: 0 -> 1, D: 0 -> 1} and stops before its first install; H then pins, must find its
// snapshot stale (generation g + 1), read A again and return 0, installing nothing.
#[test]
fn rev_pmw_helper_unpinned_across_a_fast_path_release_installs_nothing() {
    let _serial = crate::serial();
    let pool = Arc::new(
        Pool::create_volatile(
            NoPersist,
            PoolConfig {
                partition_count: 1,
                descriptors_per_partition: 1,
                client_words: 0,
                user_words: 8,
                recyclers: Vec::new(),
            },
        )
        .unwrap(),
    );
    let base = pool.user_area().start;
    let (a, b, c, d) = (base, base + 8, base + 16, base + 24);
    let [o_installed_a, h_loaded, m_before_install] = <[Handle; 3]>::try_from(stops(&[
        ("o", "pmwcas:phase1-word-installed", 1),
        ("h", "pmwcas:help-reference-loaded", 1),
        ("m", "pmwcas:rdcss-installing", 1),
    ]))
    .ok()
    .unwrap();
    let o = spawn(
        &pool,
        "o",
        Box::new(move |pool| {
            let guard = pool.pin();
            let mut d = pool.allocate_descriptor(&guard).unwrap();
            d.add_word(pool.word(a).unwrap(), 0, 1).unwrap();
            d.add_word(pool.word(b).unwrap(), 7, 1).unwrap();
            u64::from(d.execute().unwrap())
        }),
    );
    o_installed_a.wait();
    let h = spawn(&pool, "h", Box::new(move |pool| read_word(pool, a)));
    h_loaded.wait();
    o_installed_a.release();
    assert_eq!(outcome(&o, "O's PMwCAS"), 0, "g fails on B");
    assert_eq!(
        pool.descriptors_waiting(),
        0,
        "no pin held: g released at once"
    );
    let m = spawn(
        &pool,
        "m",
        Box::new(move |pool| {
            let guard = pool.pin();
            let mut g1 = pool.allocate_descriptor(&guard).unwrap();
            g1.add_word(pool.word(c).unwrap(), 0, 1).unwrap();
            g1.add_word(pool.word(d).unwrap(), 0, 1).unwrap();
            u64::from(g1.execute().unwrap())
        }),
    );
    m_before_install.wait();
    h_loaded.release();
    assert_eq!(outcome(&h, "H's read of A"), 0, "H reads A rolled back");
    m_before_install.release();
    assert_eq!(outcome(&m, "M's PMwCAS"), 1, "g + 1 succeeds");
    set_pause_hook(None);
    let r = spawn(
        &pool,
        "reader",
        Box::new(move |pool| {
            (read_word(pool, a) << 24)
                | (read_word(pool, b) << 16)
                | (read_word(pool, c) << 8)
                | read_word(pool, d)
        }),
    );
    assert_eq!(
        outcome(&r, "the final reads"),
        0x0101,
        "A, B, C, D = 0, 0, 1, 1"
    );
}
