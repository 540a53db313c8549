//! Issue 16, the flakes of forest-bztree's `left_repeat` and `rev_bzperf` under `cargo test`
//! (many tests in one process): each pool reclaims through its own epoch domain
//! (`reclaim.rs`). With crossbeam's global collector, a release a pool deferred ran on any
//! thread of the process that pinned for anything, writing the pool's region (free lists,
//! chunk headers) while the test that owned the pool copied it as a kill image, and any
//! thread pinned anywhere held the pool's releases back.

#![cfg(not(any(loom, shuttle)))]
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use forest_pmwcas::{NoPersist, Pool, PoolConfig, Recycle};

/// Records each value freed and the thread that freed it.
#[derive(Default)]
struct Freed(Mutex<Vec<(u64, ThreadId)>>);

impl Recycle for Freed {
    fn free(&self, value: u64) {
        self.0
            .lock()
            .unwrap()
            .push((value, std::thread::current().id()));
    }
}

fn pool(recycler: Option<Arc<Freed>>) -> Pool<NoPersist> {
    let config = PoolConfig {
        partition_count: 2,
        descriptors_per_partition: 4,
        client_words: 8,
        user_words: 64,
        recyclers: recycler
            .into_iter()
            .map(|r| r as Arc<dyn Recycle>)
            .collect(),
    };
    Pool::create_volatile(NoPersist, config).unwrap()
}

/// One PMwCAS that retires memory value 200: its release waits for the pool's epoch.
fn retire_200(pool: &Pool<NoPersist>) {
    let guard = pool.pin();
    let w = pool.word(pool.user_area().start).unwrap();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(w, 0, 1).unwrap();
    d.add_memory(200, 0).unwrap();
    assert!(d.execute().unwrap());
}

// Goal: a pool's deferred releases run only on threads that pin that pool, never on a thread
// that pins another pool (another test's tree, in a test process). Method: retire memory in
// pool A and unpin; a second thread pins pool B 20 000 times (crossbeam collects every 128
// pins); then this thread pins A until the memory is freed. Before the fix the second thread
// ran A's release.
#[test]
fn a_pools_releases_run_only_on_threads_that_pin_it() {
    let freed = Arc::new(Freed::default());
    let a = pool(Some(Arc::clone(&freed)));
    retire_200(&a);
    assert!(freed.0.lock().unwrap().is_empty(), "not before the epoch");
    let b = pool(None);
    let other = std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..20_000 {
                b.pin().flush();
            }
            std::thread::current().id()
        })
        .join()
        .unwrap()
    });
    for _ in 0..10_000 {
        if !freed.0.lock().unwrap().is_empty() {
            break;
        }
        a.pin().flush();
        std::thread::yield_now();
    }
    let got = freed.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "freed once: {got:?}");
    assert_eq!(got[0].0, 200);
    assert_ne!(
        got[0].1, other,
        "pool A's release ran on a thread pinning pool B"
    );
    assert_eq!(got[0].1, std::thread::current().id());
}

// Goal: a pool closed while a thread stays pinned in it (its release held back past the
// close's bounded wait) is freed at the close, not kept alive by the release its own
// collector holds; the release never runs on the closed pool. Method: a second thread pins,
// then this one retires memory (held back: the second thread pinned before it) and drops
// the pool; the recycler (owned by the pool) must be dropped with it; then the second thread
// unpins.
#[test]
fn a_pool_closed_under_a_pinned_thread_is_freed() {
    let freed = Arc::new(Freed::default());
    let pool = Arc::new(pool(Some(Arc::clone(&freed))));
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || {
            let guard = pool.pin();
            drop(pool);
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(guard);
        })
    };
    pinned_rx.recv().unwrap();
    retire_200(&pool);
    drop(pool);
    let strong = Arc::strong_count(&freed);
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(
        strong, 1,
        "the closed pool (and its recycler) is still alive"
    );
    assert!(
        freed.0.lock().unwrap().is_empty(),
        "a release ran on the closed pool"
    );
}
