//! Power-loss recovery with the `sim` persister (issue 16): crash at each named step of a
//! PMwCAS, recover from the crash image, and find every PMwCAS all-old or all-new, its
//! memory freed by policy accordingly, and a second recovery a no-op.
//!
//! Method: a pause hook (forest-core `pause`, feature `pause-points`) takes a crash image at
//! the k-th time a named point is reached: each word stored since its line's last flush is
//! kept old or new at random (`Sim::crash_image`), over several seeds. The image is opened as
//! a pool (recovery), read, and recovered again. Two PMwCASes run in sequence on overlapping
//! words, the second succeeding or failing, so a crash in the second must leave the first
//! complete (a prefix of acknowledged operations). Tests share the process-wide hook, so they
//! hold one lock.

#![cfg(not(any(loom, shuttle)))]
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use forest_core::pause::set_pause_hook;
use forest_pmwcas::{Policy, Pool, PoolConfig, Recycle, Region, Sim, VALUE_MASK};

const POINTS: &[&str] = &[
    "pmwcas:activation-persisted",
    "pmwcas:descriptor-persisted",
    "pmwcas:rdcss-installed",
    "pmwcas:phase1-word-installed",
    "pmwcas:phase1-persisted",
    "pmwcas:status-decided",
    "pmwcas:status-persisted",
    "pmwcas:phase2-word-installed",
    "pmwcas:phase2-done",
];

#[derive(Default)]
struct Freed(Mutex<BTreeSet<u64>>);

impl Recycle for Freed {
    fn free(&self, value: u64) {
        self.0.lock().unwrap().insert(value);
    }
}

fn config(freed: &Arc<Freed>) -> PoolConfig {
    PoolConfig {
        partition_count: 1,
        descriptors_per_partition: 4,
        client_words: 0,
        user_words: 64,
        recyclers: vec![freed.clone() as Arc<dyn Recycle>],
    }
}

/// The values of three words before, after the first, and after the second PMwCAS.
const BEFORE: [u64; 3] = [1, 2, 3];
const AFTER_FIRST: [u64; 3] = [11, 12, 3];
fn after_second(second_succeeds: bool) -> [u64; 3] {
    if second_succeeds {
        [11, 22, 23]
    } else {
        AFTER_FIRST
    }
}

/// Runs the two PMwCASes; the hook may take a crash image during them.
fn run_ops(pool: &Pool<Sim>, second_succeeds: bool) {
    let base = pool.user_area().start;
    let w: Vec<_> = (0..3).map(|i| pool.word(base + 8 * i).unwrap()).collect();
    {
        let guard = pool.pin();
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(w[0], 1, 11).unwrap();
        let slot = d.reserve_entry(w[1], 2, Policy::FreeOne).unwrap();
        d.set_new(slot, 12).unwrap(); // "memory" 12 activated: freed if this fails
        d.add_memory(1000, 0).unwrap(); // a retired node: freed if this succeeds
        assert!(d.execute().unwrap());
    }
    {
        let guard = pool.pin();
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(w[2], 3, 23).unwrap();
        let expected = if second_succeeds { 12 } else { 99 };
        let slot = d.reserve_entry(w[1], expected, Policy::FreeOne).unwrap();
        d.set_new(slot, 22).unwrap();
        let node = d.reserve_memory().unwrap();
        d.set_new(node, 2000).unwrap(); // an allocated node: freed if this fails
        assert_eq!(d.execute().unwrap(), second_succeeds);
    }
}

fn words_of(pool: &Pool<Sim>) -> [u64; 3] {
    let base = pool.user_area().start;
    let guard = pool.pin();
    std::array::from_fn(|i| pool.read(pool.word(base + 8 * i as u64).unwrap(), &guard))
}

/// Opens a crash image, checks it is explained by a prefix of the operations, recovers again
/// (before and after the decided descriptors recovery leaves for after open are finished).
fn check_image(image: &[u64], second_succeeds: bool, what: &str) -> forest_pmwcas::RecoveryReport {
    let freed = Arc::new(Freed::default());
    let region = Region::from_image(image);
    let sim = Sim::new(&region);
    let (pool, mut first) = Pool::open(region, sim, config(&freed)).unwrap();
    // What a crash before they are finished leaves.
    let image2 = pool.persist().durable_image();
    let finished = pool.finish_recovery();
    assert_eq!(pool.recovery_left(), 0, "{what}: finished");
    first.words_rolled_forward += finished.words_rolled_forward;
    first.words_rolled_back += finished.words_rolled_back;
    first.values_freed += finished.values_freed;
    let words = words_of(&pool);
    let outcomes = [BEFORE, AFTER_FIRST, after_second(second_succeeds)];
    assert!(
        outcomes.contains(&words),
        "{what}: words {words:?} are no prefix's result"
    );
    let freed_now = freed.0.lock().unwrap().clone();
    // Policies: only values the reached outcome allows may be freed.
    // The first PMwCAS frees 2 (old of word 1) and 1000 on success, 12 on failure; the second
    // frees 12 (old of word 1) on success, 22 and 2000 on failure.
    let allowed: BTreeSet<u64> = if words == BEFORE {
        [12].into()
    } else if words == AFTER_FIRST {
        [2, 1000, 22, 2000].into()
    } else {
        [2, 1000, 12].into()
    };
    assert!(
        freed_now.is_subset(&allowed),
        "{what}: freed {freed_now:?} outside {allowed:?} for {words:?}"
    );
    // Recovered again from before the finish: the same words (idempotent, `recovery.rs`).
    let region = Region::from_image(&image2);
    let sim = Sim::new(&region);
    let (again, _) = Pool::open(region, sim, config(&freed)).unwrap();
    assert_eq!(
        words_of(&again),
        words,
        "{what}: recovery before the first was finished"
    );
    drop(again);
    // Recover again from what is durable now: nothing to roll, same words.
    let image3 = pool.persist().durable_image();
    drop(pool);
    let region = Region::from_image(&image3);
    let sim = Sim::new(&region);
    let (pool, report) = Pool::open(region, sim, config(&freed)).unwrap();
    assert_eq!(
        report.words_rolled_forward + report.words_rolled_back,
        0,
        "{what}: second recovery"
    );
    assert_eq!(report.descriptors_in_flight, 0, "{what}: second recovery");
    assert_eq!(words_of(&pool), words, "{what}: second recovery");
    first
}

fn crash_at(
    point: &'static str,
    occurrence: usize,
    seed: u64,
    second_succeeds: bool,
) -> Option<Vec<u64>> {
    let freed = Arc::new(Freed::default());
    let cfg = config(&freed);
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Arc::new(Pool::create(region, sim, cfg).unwrap());
    {
        let guard = pool.pin();
        let base = pool.user_area().start;
        for (i, v) in BEFORE.iter().enumerate() {
            let w = pool.word(base + 8 * i as u64).unwrap();
            w.init(*v);
            let _ = pool.read(w, &guard);
        }
        pool.persist_range(0..pool.region().len_bytes());
    }
    let image: Arc<Mutex<Option<Vec<u64>>>> = Arc::new(Mutex::new(None));
    let seen = Arc::new(Mutex::new(0usize));
    let weak = Arc::downgrade(&pool);
    let (image_in, seen_in) = (image.clone(), seen.clone());
    set_pause_hook(Some(Arc::new(move |name| {
        if name != point {
            return;
        }
        let mut n = seen_in.lock().unwrap();
        *n += 1;
        if *n == occurrence {
            if let Some(pool) = weak.upgrade() {
                *image_in.lock().unwrap() = Some(pool.persist().crash_image(pool.region(), seed));
            }
        }
    })));
    run_ops(&pool, second_succeeds);
    set_pause_hook(None);
    assert_eq!(
        words_of(&pool),
        after_second(second_succeeds),
        "the run itself"
    );
    let taken = image.lock().unwrap().take();
    taken
}

#[test]
fn crash_at_every_step_recovers_all_old_or_all_new() {
    let _serial = crate::serial();
    let mut images = 0;
    let (mut forward, mut back, mut freed) = (0, 0, 0);
    for second_succeeds in [true, false] {
        for &point in POINTS {
            for occurrence in 1..=6 {
                let mut hit = false;
                for seed in 0..6 {
                    let Some(image) = crash_at(point, occurrence, seed, second_succeeds) else {
                        break;
                    };
                    hit = true;
                    images += 1;
                    let what = format!(
                        "{point} #{occurrence} seed {seed} second_succeeds {second_succeeds}"
                    );
                    let report = check_image(&image, second_succeeds, &what);
                    forward += report.words_rolled_forward;
                    back += report.words_rolled_back;
                    freed += report.values_freed;
                }
                if !hit {
                    break;
                }
            }
        }
    }
    assert!(images > 100, "only {images} crash images taken");
    // The crashes exercised both directions and the policies.
    assert!(
        forward > 0 && back > 0 && freed > 0,
        "forward {forward} back {back} freed {freed}"
    );
    eprintln!("{images} images: {forward} words rolled forward, {back} back, {freed} values freed");
}

#[test]
fn crash_image_of_a_finished_run_is_the_final_state() {
    // Goal: after both PMwCASes return, everything they did is durable (no unflushed word).
    let _serial = crate::serial();
    let freed = Arc::new(Freed::default());
    let cfg = config(&freed);
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Pool::create(region, sim, cfg).unwrap();
    {
        let base = pool.user_area().start;
        for (i, v) in BEFORE.iter().enumerate() {
            pool.word(base + 8 * i as u64).unwrap().init(*v);
        }
        pool.persist_range(0..pool.region().len_bytes());
    }
    run_ops(&pool, true);
    let durable = pool.persist().durable_image();
    let base = pool.user_area().start as usize / 8;
    let durable_words: Vec<u64> = (0..3).map(|i| durable[base + i] & VALUE_MASK).collect();
    assert_eq!(durable_words, after_second(true).to_vec());
}
