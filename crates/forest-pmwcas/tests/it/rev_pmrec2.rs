//! Review rev-pmrec2 F3: recovery checks, at open, that every entry of a decided descriptor
//! names a target word (a corrupt descriptor is a named `Error::Format`, "Errors name the
//! problem"), also for the descriptors it leaves for after open. Unchecked, their finish
//! skipped an entry that names no target word, so the corrupt file opened and the word the
//! entry should have rolled forward kept the descriptor's reference: a read of it spun for
//! good (it helps a descriptor that is no longer that generation, then reads the word again).

#![cfg(not(any(loom, shuttle)))]
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::{Arc, Mutex};

use forest_core::pause::set_pause_hook;
use forest_pmwcas::{Error, Pool, PoolConfig, Region, Sim};

fn config() -> PoolConfig {
    PoolConfig {
        partition_count: 1,
        descriptors_per_partition: 4,
        client_words: 0,
        user_words: 8,
        recyclers: Vec::new(),
    }
}

/// The durable image when the pool's first PMwCAS, {A: 0 -> 100}, has persisted its decision
/// (`Succeeded`, A still holding its reference): descriptor 0 in flight and decided.
fn decided_image() -> Vec<u64> {
    let region = Region::heap(config().region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Arc::new(Pool::create(region, sim, config()).unwrap());
    let taken: Arc<Mutex<Option<Vec<u64>>>> = Arc::default();
    {
        let (pool, taken) = (Arc::downgrade(&pool), Arc::clone(&taken));
        set_pause_hook(Some(Arc::new(move |name| {
            if name != "pmwcas:status-persisted" {
                return;
            }
            let Some(pool) = pool.upgrade() else { return };
            let mut taken = taken.lock().unwrap();
            if taken.is_none() {
                *taken = Some(pool.persist().durable_image());
            }
        })));
    }
    {
        let guard = pool.pin();
        let a = pool.user_area().start;
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(pool.word(a).unwrap(), 0, 100).unwrap();
        assert!(d.execute().unwrap());
    }
    set_pause_hook(None);
    let image = taken.lock().unwrap().take();
    image.expect("the PMwCAS persisted its decision")
}

// Goal: a decided descriptor whose entry names no target word is reported at open, as before
// the deferral. Method: image with descriptor 0 decided; its entry 0's address set past the
// region; open.
#[test]
fn a_left_descriptor_naming_no_target_word_is_a_named_error() {
    let _serial = crate::serial();
    let image = decided_image();
    let geometry = config().geometry().unwrap();
    // Entry 0's address word: after the descriptor's 8 header words.
    let at = geometry.descriptor_start_bytes(0) as usize / 8 + 8;
    let mut corrupt = image.clone();
    corrupt[at] = (image.len() as u64 + 1) * 8;
    let region = Region::from_image(&corrupt);
    let sim = Sim::new(&region);
    match Pool::open(region, sim, config()) {
        Err(Error::Format(m)) => assert!(m.contains("not a target word"), "{m}"),
        Ok((pool, report)) => {
            let finished = pool.finish_recovery();
            // A still holds the reference, which no finish removes: a read helps for ever.
            let pool = Arc::new(pool);
            let (tx, rx) = std::sync::mpsc::channel();
            {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let guard = pool.pin();
                    let a = pool.word(pool.user_area().start).unwrap();
                    let _ = tx.send(pool.read(a, &guard));
                });
            }
            let read = rx.recv_timeout(std::time::Duration::from_secs(2));
            // The reader may spin for good: leak the pool rather than wait in its drop.
            std::mem::forget(pool);
            panic!(
                "a corrupt decided descriptor opened: {report:?}, finished {finished:?}; \
                 a read of A then: {read:?}"
            )
        }
        Err(other) => panic!("{other}"),
    }
}

// Goal (review rev-pmrec2 F6): a second `finish_recovery` waits for a first one under way
// rather than return before the descriptors are finished (an audit racing a first write).
// Method: thread "f" finishes the decided image's descriptor and stops in its Phase 2; thread
// "s" calls `finish_recovery` too; it must not return until "f" goes on, and A then reads the
// new value.
#[test]
fn a_second_finish_waits_for_the_first() {
    let _serial = crate::serial();
    let image = decided_image();
    let region = Region::from_image(&image);
    let sim = Sim::new(&region);
    let (pool, report) = Pool::open(region, sim, config()).unwrap();
    assert_eq!(report.descriptors_left, 1);
    let pool = Arc::new(pool);
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let once = Mutex::new(Some((reached_tx, go_rx)));
    set_pause_hook(Some(Arc::new(move |name| {
        if name != "pmwcas:help-snapshot-taken" || std::thread::current().name() != Some("f") {
            return;
        }
        let taken = once.lock().unwrap().take();
        if let Some((reached, go)) = taken {
            reached.send(()).unwrap();
            go.recv().unwrap();
        }
    })));
    let finisher = |name: &str| {
        let pool = Arc::clone(&pool);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || pool.finish_recovery().descriptors_in_flight)
            .unwrap()
    };
    let first = finisher("f");
    reached
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("f never reached its Phase 2");
    let second = finisher("s");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !second.is_finished(),
        "the second finish returned while the first was under way"
    );
    go.send(()).unwrap();
    assert_eq!(first.join().unwrap(), 1, "f finished the descriptor");
    assert_eq!(second.join().unwrap(), 0, "s found nothing left");
    set_pause_hook(None);
    assert_eq!(pool.recovery_left(), 0);
    let guard = pool.pin();
    let a = pool.word(pool.user_area().start).unwrap();
    assert_eq!(pool.read(a, &guard), 100, "A rolled forward");
}
