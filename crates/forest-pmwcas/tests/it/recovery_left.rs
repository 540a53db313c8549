//! Decided descriptors that recovery leaves for after open (`recovery.rs` "Left for after
//! open"): the open only records them; reads in the new run see the recovered values; the
//! first allocation finishes them (Phase 2, policies, durable `Free`) before it returns; and an
//! allocation racing a finish in progress waits for it.

#![cfg(not(any(loom, shuttle)))]
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use forest_core::pause::set_pause_hook;
use forest_pmwcas::{Pool, PoolConfig, Recycle, Region, Sim};

/// Every free, in order (a repeated policy would show twice).
#[derive(Default)]
struct Freed(Mutex<Vec<u64>>);

impl Recycle for Freed {
    fn free(&self, value: u64) {
        self.0.lock().unwrap().push(value);
    }
}

fn config(freed: &Arc<Freed>) -> PoolConfig {
    PoolConfig {
        partition_count: 1,
        descriptors_per_partition: 4,
        client_words: 0,
        user_words: 8,
        recyclers: vec![freed.clone() as Arc<dyn Recycle>],
    }
}

/// The first time thread `thread` reaches `point`, tells the test and waits for its go.
fn stop_at(thread: &'static str, point: &'static str) -> (Receiver<()>, Sender<()>) {
    let (reached_tx, reached_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let once = Mutex::new(Some((reached_tx, go_rx)));
    set_pause_hook(Some(Arc::new(move |name| {
        if name != point || std::thread::current().name() != Some(thread) {
            return;
        }
        let taken = once.lock().unwrap().take();
        if let Some((reached, go)) = taken {
            reached.send(()).unwrap();
            go.recv().unwrap();
        }
    })));
    (reached_rx, go_tx)
}

fn wait(reached: &Receiver<()>, what: &str) {
    reached
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("never reached {what}"));
}

/// The durable image taken while thread "o" stands at `point` of the pool's first PMwCAS,
/// {A: 0 -> 100} retiring memory 50 (freed on success): decided, descriptor 0.
fn image_at(point: &'static str) -> Vec<u64> {
    let freed = Arc::new(Freed::default());
    let cfg = config(&freed);
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Arc::new(Pool::create(region, sim, cfg).unwrap());
    let a = pool.user_area().start;
    let (reached, go) = stop_at("o", point);
    let owner = {
        let pool = Arc::clone(&pool);
        std::thread::Builder::new()
            .name("o".into())
            .spawn(move || {
                let guard = pool.pin();
                let mut d = pool.allocate_descriptor(&guard).unwrap();
                d.add_word(pool.word(a).unwrap(), 0, 100).unwrap();
                d.add_memory(50, 0).unwrap(); // a node it retires
                assert!(d.execute().unwrap());
            })
            .unwrap()
    };
    wait(&reached, point);
    let image = pool.persist().durable_image();
    go.send(()).unwrap();
    owner.join().unwrap();
    set_pause_hook(None);
    image
}

fn open(image: &[u64], freed: &Arc<Freed>) -> (Pool<Sim>, forest_pmwcas::RecoveryReport) {
    let region = Region::from_image(image);
    let sim = Sim::new(&region);
    Pool::open(region, sim, config(freed)).unwrap()
}

fn read(pool: &Pool<Sim>, word: u64) -> u64 {
    let guard = pool.pin();
    pool.read(
        pool.word(pool.user_area().start + word * 8).unwrap(),
        &guard,
    )
}

fn write(pool: &Pool<Sim>, word: u64, expected: u64, new: u64) -> bool {
    let guard = pool.pin();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(
        pool.word(pool.user_area().start + word * 8).unwrap(),
        expected,
        new,
    )
    .unwrap();
    d.execute().unwrap()
}

#[test]
fn decided_descriptors_are_finished_at_the_first_allocation() {
    let _serial = crate::serial();
    for point in ["pmwcas:status-persisted", "pmwcas:phase2-done"] {
        let image = image_at(point);
        let freed = Arc::new(Freed::default());
        let (pool, report) = open(&image, &freed);
        assert_eq!(report.descriptors_left, 1, "{point}: left for after open");
        assert_eq!(report.values_freed, 0, "{point}: nothing freed at open");
        assert_eq!(pool.recovery_left(), 1, "{point}");
        // A read helps it as it would any decided descriptor.
        assert_eq!(read(&pool, 0), 100, "{point}: A rolled forward");
        assert!(
            freed.0.lock().unwrap().is_empty(),
            "{point}: freed at a read"
        );
        assert!(write(&pool, 1, 0, 1), "{point}: a PMwCAS after open");
        assert_eq!(
            pool.recovery_left(),
            0,
            "{point}: finished by the allocation"
        );
        // The policy applied in the finish, before the allocation returned.
        assert_eq!(
            *freed.0.lock().unwrap(),
            [50],
            "{point}: the policy applied"
        );
        let _ = pool.finish_recovery();
        // Released durably: a later recovery does not repeat it (only the last PMwCAS, whose
        // descriptor waits in the reuse domain, may be in flight; it frees nothing).
        let again = pool.persist().durable_image();
        drop(pool);
        let (pool, report) = open(&again, &freed);
        assert!(report.descriptors_in_flight <= 1, "{point}: {report:?}");
        let _ = pool.finish_recovery();
        assert_eq!(*freed.0.lock().unwrap(), [50], "{point}: not freed again");
        assert_eq!((read(&pool, 0), read(&pool, 1)), (100, 1), "{point}");
    }
}

// Goal: an allocation while another thread finishes what recovery left waits for that
// finish, policies included: a repeated policy must come before this run takes anything it
// could free (`recovery.rs` "Left for after open"). Method: "f" finishes and stops in the left
// descriptor's Phase 2; "a" runs a PMwCAS meanwhile; "a" must not return before "f" goes on,
// and when it returns the left descriptor's memory is freed.
#[test]
fn an_allocation_during_the_finish_waits_for_it() {
    let _serial = crate::serial();
    // A still holds the left descriptor's reference: the finish has work to do.
    let image = image_at("pmwcas:status-persisted");
    let freed = Arc::new(Freed::default());
    let (pool, report) = open(&image, &freed);
    assert_eq!(report.descriptors_left, 1);
    let pool = Arc::new(pool);
    let (reached, go) = stop_at("f", "pmwcas:help-snapshot-taken");
    let finisher = {
        let pool = Arc::clone(&pool);
        std::thread::Builder::new()
            .name("f".into())
            .spawn(move || pool.finish_recovery().descriptors_in_flight)
            .unwrap()
    };
    wait(&reached, "the finish's Phase 2");
    let writer = {
        let (pool, freed) = (Arc::clone(&pool), Arc::clone(&freed));
        std::thread::Builder::new()
            .name("a".into())
            .spawn(move || {
                let wrote = write(&pool, 1, 0, 1);
                (wrote, freed.0.lock().unwrap().clone())
            })
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !writer.is_finished(),
        "a PMwCAS returned while the finish was under way"
    );
    go.send(()).unwrap();
    assert_eq!(finisher.join().unwrap(), 1, "f finished the descriptor");
    let (wrote, freed_then) = writer.join().unwrap();
    assert!(wrote, "the PMwCAS after the finish");
    assert_eq!(
        freed_then,
        [50],
        "the left policy applied before the PMwCAS returned"
    );
    set_pause_hook(None);
    assert_eq!((read(&pool, 0), read(&pool, 1)), (100, 1));
    assert_eq!(*freed.0.lock().unwrap(), [50]);
}
