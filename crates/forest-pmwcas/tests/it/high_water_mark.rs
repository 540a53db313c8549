//! The descriptor pool's high-water marks (`pool.rs`, `recovery.rs`; issue 16's recovery bar):
//! recovery scans only the descriptors below each partition's durable mark, and a descriptor
//! used for the first time is covered by the mark before anything of it can be durable.
//!
//! Method: the `sim` persister and a pause hook (forest-core `pause`, feature `pause-points`)
//! that takes a crash image at the k-th time a named point is reached, as in `crash_sim.rs`.
//! Tests share the process-wide hook, so they hold one lock.

#![cfg(not(any(loom, shuttle)))]
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::{Arc, Mutex};

use forest_core::pause::set_pause_hook;
use forest_pmwcas::{Error, Pool, PoolConfig, Region, Sim, CONTROL_MASK};

fn config(partitions: usize, per: usize) -> PoolConfig {
    PoolConfig {
        partition_count: partitions,
        descriptors_per_partition: per,
        client_words: 0,
        user_words: 64,
        recyclers: Vec::new(),
    }
}

/// A `sim` pool whose user words 0 and 1 hold 1 and 2, all durable.
fn new_pool(cfg: PoolConfig) -> Pool<Sim> {
    let region = Region::heap(cfg.region_bytes().unwrap());
    let sim = Sim::new(&region);
    let pool = Pool::create(region, sim, cfg).unwrap();
    let base = pool.user_area().start;
    for (i, v) in [1u64, 2].into_iter().enumerate() {
        pool.word(base + 8 * i as u64).unwrap().init(v);
    }
    pool.persist_range(0..pool.region().len_bytes());
    pool
}

/// One PMwCAS on user words 0 and 1: `expected` to `new`; returns whether it succeeded.
fn pmwcas(pool: &Pool<Sim>, expected: [u64; 2], new: [u64; 2]) -> bool {
    let base = pool.user_area().start;
    let guard = pool.pin();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    for i in 0..2 {
        let w = pool.word(base + 8 * i as u64).unwrap();
        d.add_word(w, expected[i], new[i]).unwrap();
    }
    d.execute().unwrap()
}

fn words_of(pool: &Pool<Sim>) -> [u64; 2] {
    let base = pool.user_area().start;
    let guard = pool.pin();
    std::array::from_fn(|i| pool.read(pool.word(base + 8 * i as u64).unwrap(), &guard))
}

fn open_image(
    image: &[u64],
    cfg: PoolConfig,
) -> Result<(Pool<Sim>, forest_pmwcas::RecoveryReport), Error> {
    let region = Region::from_image(image);
    let sim = Sim::new(&region);
    // Decided descriptors are finished after open (`recovery.rs`): counted here, so that the
    // report says what the whole recovery did.
    let (pool, mut report) = Pool::open(region, sim, cfg)?;
    let finished = pool.finish_recovery();
    report.words_rolled_forward += finished.words_rolled_forward;
    report.words_rolled_back += finished.words_rolled_back;
    report.values_freed += finished.values_freed;
    Ok((pool, report))
}

/// `image` with word `word_at` (a byte offset) set to `value`.
fn with_word(image: &[u64], word_at: u64, value: u64) -> Vec<u64> {
    let mut image = image.to_vec();
    image[word_at as usize / 8] = value;
    image
}

// Goal: recovery reads the descriptors below the marks and no other: garbage above a mark is
// never looked at, the same garbage below it is reported, and a mark beyond its partition is
// a named error. Method: a durable image after one PMwCAS (mark 1 of 8), edited.
#[test]
fn recovery_scans_only_below_the_marks() {
    let _serial = crate::serial();
    let cfg = config(1, 8);
    let geometry = cfg.geometry().unwrap();
    let pool = new_pool(cfg.clone());
    assert_eq!(
        pool.high_water_marks(),
        vec![0],
        "a new pool has used nothing"
    );
    assert!(pmwcas(&pool, [1, 2], [11, 12]));
    assert_eq!(pool.high_water_marks(), vec![1]);
    let image = pool.persist().durable_image();
    drop(pool);

    let (pool, report) = open_image(&image, cfg.clone()).unwrap();
    assert_eq!(report.descriptors_scanned, 1);
    assert_eq!(words_of(&pool), [11, 12]);
    drop(pool);

    // A status naming no state (7) in descriptor 5, above the mark: never read.
    let garbage = with_word(&image, geometry.descriptor_start_bytes(5), 7);
    let (pool, report) = open_image(&garbage, cfg.clone()).unwrap();
    assert_eq!(report.descriptors_scanned, 1);
    assert_eq!(words_of(&pool), [11, 12]);
    drop(pool);

    // The same garbage under a mark of 6 is read and reported.
    let marks_at = geometry.marks_start_bytes();
    let covered = with_word(&garbage, marks_at, 6);
    match open_image(&covered, cfg.clone()) {
        Err(Error::Format(m)) => assert!(m.contains("descriptor 5 has status"), "{m}"),
        other => panic!("garbage below the mark: {:?}", other.map(|(_, r)| r)),
    }

    // A mark above the partition's 8 descriptors is a corrupt pool, named.
    match open_image(&with_word(&image, marks_at, 9), cfg) {
        Err(Error::Format(m)) => assert!(m.contains("high-water mark"), "{m}"),
        other => panic!("mark 9 of 8: {:?}", other.map(|(_, r)| r)),
    }
}

// Goal: a descriptor taken from another partition (its own is empty) raises the mark of the
// partition it belongs to. Method: 2 partitions of 2; one thread holds 3 descriptors at once,
// so it empties its home partition and takes one from the other.
#[test]
fn a_taken_descriptor_raises_its_own_partitions_mark() {
    let _serial = crate::serial();
    let pool = new_pool(config(2, 2));
    let guard = pool.pin();
    let held: Vec<_> = (0..3)
        .map(|_| pool.allocate_descriptor(&guard).unwrap())
        .collect();
    let mut marks = pool.high_water_marks();
    marks.sort_unstable();
    assert_eq!(marks, vec![1, 2]);
    drop(held);
    // Reused descriptors leave the marks where they are.
    drop(guard);
    for i in 0..20u64 {
        assert!(pmwcas(&pool, [1 + i, 2 + i], [2 + i, 3 + i]));
    }
    let mut marks = pool.high_water_marks();
    marks.sort_unstable();
    assert!(marks[1] == 2 && marks[0] >= 1, "{marks:?}");
    assert!(pool.high_water_marks().iter().all(|&m| m <= 2));
}

const POINTS: &[&str] = &[
    "pmwcas:mark-raised",
    "pmwcas:descriptor-persisted",
    "pmwcas:rdcss-installed",
    "pmwcas:phase1-word-installed",
    "pmwcas:phase1-persisted",
    "pmwcas:status-decided",
    "pmwcas:status-persisted",
    "pmwcas:phase2-word-installed",
];

/// After a restart whose durable mark is 1, holds descriptor 0 and runs a PMwCAS on
/// descriptor 1 (above the old mark, used for the first time in the pool's life), taking a
/// crash image at the `occurrence`-th `point`. Returns the image, if the point was reached.
fn crash_on_a_new_slot(
    point: &'static str,
    occurrence: usize,
    seed: u64,
    succeeds: bool,
) -> Option<Vec<u64>> {
    let cfg = config(1, 4);
    let first = new_pool(cfg.clone());
    assert!(pmwcas(&first, [1, 2], [11, 12]));
    let image = first.persist().durable_image();
    drop(first);
    let (pool, report) = open_image(&image, cfg).unwrap();
    assert_eq!(pool.high_water_marks(), vec![1], "the old mark");
    assert_eq!(report.descriptors_scanned, 1);
    let pool = Arc::new(pool);

    let taken: Arc<Mutex<Option<Vec<u64>>>> = Arc::new(Mutex::new(None));
    let seen = Arc::new(Mutex::new(0usize));
    let weak = Arc::downgrade(&pool);
    let (taken_in, seen_in) = (taken.clone(), seen.clone());
    let guard = pool.pin();
    // Descriptor 0 (below the mark), held so that the PMwCAS gets descriptor 1.
    let held = pool.allocate_descriptor(&guard).unwrap();
    set_pause_hook(Some(Arc::new(move |name| {
        if name != point {
            return;
        }
        let mut n = seen_in.lock().unwrap();
        *n += 1;
        if *n == occurrence {
            if let Some(pool) = weak.upgrade() {
                *taken_in.lock().unwrap() = Some(pool.persist().crash_image(pool.region(), seed));
            }
        }
    })));
    let expected = if succeeds { [11, 12] } else { [11, 99] };
    assert_eq!(pmwcas(&pool, expected, [21, 22]), succeeds);
    set_pause_hook(None);
    drop(held);
    drop(guard);
    assert_eq!(
        pool.high_water_marks(),
        vec![2],
        "the new slot raised the mark"
    );
    let image = taken.lock().unwrap().take();
    image
}

// Goal (issue 16, the high-water mark): a crash right after a descriptor above the old mark is
// first used is recovered, because the mark covered it before anything of it could be
// durable. Method: crash images at every step of that descriptor's PMwCAS (sim, several
// seeds); each recovers to all-old or all-new with the mark covering the descriptor, and a
// second recovery does nothing. Control: the images whose recovery rolled a word back or
// forward, opened with the mark forced back to 1, keep a reference in a word, so the
// descriptor above the old mark was what recovery had to see.
#[test]
fn a_crash_just_after_a_new_slot_is_first_used_is_recovered() {
    let _serial = crate::serial();
    let cfg = config(1, 4);
    let geometry = cfg.geometry().unwrap();
    let base = geometry.user_start_bytes();
    let (mut images, mut rolled, mut controls) = (0, 0, 0);
    for succeeds in [true, false] {
        for &point in POINTS {
            for occurrence in 1..=3 {
                let mut hit = false;
                for seed in 0..6 {
                    let Some(image) = crash_on_a_new_slot(point, occurrence, seed, succeeds) else {
                        break;
                    };
                    hit = true;
                    images += 1;
                    let what = format!("{point} #{occurrence} seed {seed} succeeds {succeeds}");
                    let (pool, report) = open_image(&image, cfg.clone()).unwrap();
                    assert_eq!(
                        pool.high_water_marks(),
                        vec![2],
                        "{what}: the mark covers it"
                    );
                    assert_eq!(report.descriptors_scanned, 2, "{what}");
                    let words = words_of(&pool);
                    let allowed = if succeeds {
                        vec![[11, 12], [21, 22]]
                    } else {
                        vec![[11, 12]]
                    };
                    assert!(allowed.contains(&words), "{what}: words {words:?}");
                    let again = pool.persist().durable_image();
                    drop(pool);
                    let (pool, second) = open_image(&again, cfg.clone()).unwrap();
                    assert_eq!(second.descriptors_in_flight, 0, "{what}: second recovery");
                    assert_eq!(words_of(&pool), words, "{what}: second recovery");
                    drop(pool);
                    if report.words_rolled_forward + report.words_rolled_back > 0 {
                        rolled += 1;
                        let uncovered = with_word(&image, geometry.marks_start_bytes(), 1);
                        let (pool, _) = open_image(&uncovered, cfg.clone()).unwrap();
                        let raw: Vec<u64> = (0..2)
                            .map(|i| pool.region().load_for_flush(base + 8 * i).unwrap())
                            .collect();
                        assert!(
                            raw.iter().any(|w| w & CONTROL_MASK != 0),
                            "{what}: without the mark the words {raw:x?} hold no reference"
                        );
                        controls += 1;
                    }
                }
                if !hit {
                    break;
                }
            }
        }
    }
    assert!(images > 60, "only {images} crash images taken");
    assert!(
        rolled > 10 && controls == rolled,
        "{rolled} images rolled a word"
    );
    eprintln!("{images} images on a new slot, {rolled} rolled a word back or forward");
}
