//! The §2.3 API on one thread, in volatile and simulated-persistent mode: success, failure
//! with no word changed, duplicate addresses, control bits, RemoveWord, ReserveEntry,
//! Discard, policies through recyclers, stats, and the file-mapped pool reopened.

#![cfg(not(any(loom, shuttle)))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure
use std::sync::{Arc, Mutex};

use forest_pmwcas::{
    Error, NoPersist, Persist, Policy, Pool, PoolConfig, Recycle, RecyclerId, Region, Sim,
    ENTRIES_MAX,
};

#[derive(Default)]
struct Freed(Mutex<Vec<u64>>);

impl Recycle for Freed {
    fn free(&self, value: u64) {
        self.0.lock().unwrap().push(value);
    }
}

fn config(recycler: Option<Arc<Freed>>) -> PoolConfig {
    PoolConfig {
        partition_count: 2,
        descriptors_per_partition: 4,
        client_words: 8,
        user_words: 64,
        recyclers: recycler
            .into_iter()
            .map(|r| r as Arc<dyn Recycle>)
            .collect(),
    }
}

fn sim_pool(config: PoolConfig) -> Pool<Sim> {
    let region = Region::heap(config.region_bytes().unwrap());
    let sim = Sim::new(&region);
    Pool::create(region, sim, config).unwrap()
}

fn words<P: Persist>(pool: &Pool<P>, n: usize) -> Vec<u64> {
    (0..n as u64)
        .map(|i| pool.user_area().start + 8 * i)
        .collect()
}

fn basic_success_and_failure<P: Persist>(pool: &Pool<P>) {
    let at = words(pool, 3);
    let guard = pool.pin();
    let w: Vec<_> = at.iter().map(|&o| pool.word(o).unwrap()).collect();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    for (i, word) in w.iter().enumerate() {
        d.add_word(word, 0, 10 + i as u64).unwrap();
    }
    assert!(d.execute().unwrap());
    assert_eq!(
        w.iter().map(|x| pool.read(x, &guard)).collect::<Vec<_>>(),
        vec![10, 11, 12]
    );
    // One stale expected value: the PMwCAS fails and no word changes.
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(w[0], 10, 20).unwrap();
    d.add_word(w[1], 11, 21).unwrap();
    d.add_word(w[2], 99, 22).unwrap();
    assert!(!d.execute().unwrap());
    assert_eq!(
        w.iter().map(|x| pool.read(x, &guard)).collect::<Vec<_>>(),
        vec![10, 11, 12]
    );
    let stats = pool.stats();
    assert_eq!(stats.attempts_by_size[3], 2);
    assert_eq!(stats.failures_by_size[3], 1);
}

#[test]
fn success_and_failure_volatile() {
    // Goal: a PMwCAS changes all its words or none (§2.3). Method: one 3-word success, then a
    // 3-word PMwCAS with one wrong expected value; read back; check stats by size.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    basic_success_and_failure(&pool);
    assert_eq!(
        pool.stats().dirty_flushes,
        0,
        "volatile mode sets no dirty bits"
    );
}

#[test]
fn success_and_failure_persistent_sim_leaves_durable_image_current() {
    // Goal: in persistent mode the same, and a successful PMwCAS is durable when it returns.
    // Method: as above on a `Sim` pool, then compare the target words in the durable image.
    let pool = sim_pool(config(None));
    basic_success_and_failure(&pool);
    let durable = pool.persist().durable_image();
    let base = pool.user_area().start as usize / 8;
    for i in 0..3 {
        assert_eq!(durable[base + i] & forest_pmwcas::VALUE_MASK, 10 + i as u64);
    }
}

#[test]
fn api_errors_name_the_problem() {
    // Goal: §2.3's errors: duplicate address, control bits, too many entries, removing an
    // absent word, non-target words, unset reserved slots.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    let guard = pool.pin();
    let at = words(&pool, ENTRIES_MAX + 1);
    let w0 = pool.word(at[0]).unwrap();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(w0, 0, 1).unwrap();
    assert_eq!(
        d.add_word(w0, 0, 2),
        Err(Error::DuplicateAddress { offset: at[0] })
    );
    assert!(matches!(
        d.reserve_entry(w0, 0, Policy::None),
        Err(Error::DuplicateAddress { .. })
    ));
    let w1 = pool.word(at[1]).unwrap();
    assert!(matches!(
        d.add_word(w1, 1 << 63, 0),
        Err(Error::ControlBits { .. })
    ));
    assert!(matches!(
        d.add_word(w1, 0, 1 << 61),
        Err(Error::ControlBits { .. })
    ));
    assert_eq!(d.remove_word(w1), Err(Error::NoSuchWord { offset: at[1] }));
    for &o in &at[1..ENTRIES_MAX] {
        d.add_word(pool.word(o).unwrap(), 0, 1).unwrap();
    }
    let last = pool.word(at[ENTRIES_MAX]).unwrap();
    assert_eq!(
        d.add_word(last, 0, 1),
        Err(Error::TooManyEntries { max: ENTRIES_MAX })
    );
    d.discard();
    assert!(
        matches!(pool.word(0), Err(Error::NotATargetWord { .. })),
        "the pool header"
    );
    assert!(
        matches!(pool.word(at[0] + 3), Err(Error::NotATargetWord { .. })),
        "misaligned"
    );
    let foreign = forest_pmwcas::Word::new(0);
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    assert_eq!(
        d.add_word(&foreign, 0, 1),
        Err(Error::NotATargetWord { offset: None })
    );
    let slot = d.reserve_entry(w0, 0, Policy::None).unwrap();
    assert_eq!(slot.index(), 0);
    assert_eq!(d.execute(), Err(Error::SlotUnset { slot: 0 }));
    assert_eq!(pool.read(w0, &guard), 0, "discarded: nothing changed");
}

fn single_word_cas_checks<P: Persist>(pool: &Pool<P>) {
    let at = words(pool, 2);
    let guard = pool.pin();
    let (w0, w1) = (pool.word(at[0]).unwrap(), pool.word(at[1]).unwrap());
    assert_eq!(pool.single_word_cas(w0, 0, 7, &guard), Ok(true));
    assert_eq!(pool.single_word_cas(w0, 0, 8, &guard), Ok(false));
    assert_eq!(pool.read(w0, &guard), 7, "a failed CAS changes nothing");
    assert!(matches!(
        pool.single_word_cas(w1, 0, 1 << 62, &guard),
        Err(Error::ControlBits { .. })
    ));
    let foreign = forest_pmwcas::Word::new(0);
    assert_eq!(
        pool.single_word_cas(&foreign, 0, 1, &guard),
        Err(Error::NotATargetWord { offset: None })
    );
    assert_eq!(pool.read(w1, &guard), 0);
    let s = pool.stats();
    assert_eq!((s.attempts_by_size[1], s.failures_by_size[1]), (2, 1));
}

#[test]
fn single_word_cas_volatile_takes_no_descriptor() {
    // Goal (rev-pmw F2): `Pool::single_word_cas` succeeds, fails without a change, refuses
    // control bits and foreign words, counts as a 1-word PMwCAS, and in volatile mode takes no
    // descriptor: it works with every descriptor of the pool held.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    single_word_cas_checks(&pool);
    let guard = pool.pin();
    let held: Vec<_> = (0..8)
        .map(|_| pool.allocate_descriptor(&guard).unwrap())
        .collect();
    let w = pool.word(words(&pool, 3)[2]).unwrap();
    assert_eq!(pool.single_word_cas(w, 0, 5, &guard), Ok(true));
    assert_eq!(pool.read(w, &guard), 5);
    drop(held);
}

#[test]
fn single_word_cas_durable_runs_the_full_protocol() {
    // Goal: in durable mode the same call is a published descriptor (recovery must see it):
    // the simulated durable image holds the value once it returns.
    let pool = sim_pool(config(None));
    single_word_cas_checks(&pool);
    let durable = pool.persist().durable_image();
    let base = pool.user_area().start as usize / 8;
    assert_eq!(durable[base] & forest_pmwcas::VALUE_MASK, 7);
}

#[test]
fn remove_word_and_reserve_entry() {
    // Goal: RemoveWord drops a word from the PMwCAS; ReserveEntry's slot supplies the new
    // value later. Method: add two words, remove one, reserve a third, set it, execute.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    let guard = pool.pin();
    let at = words(&pool, 3);
    let w: Vec<_> = at.iter().map(|&o| pool.word(o).unwrap()).collect();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(w[0], 0, 5).unwrap();
    d.add_word(w[1], 0, 6).unwrap();
    d.remove_word(w[0]).unwrap();
    let slot = d.reserve_entry(w[2], 0, Policy::None).unwrap();
    d.set_new(slot, 7).unwrap();
    assert_eq!(d.len(), 2);
    assert!(d.execute().unwrap());
    assert_eq!(
        [0, 6, 7],
        [
            pool.read(w[0], &guard),
            pool.read(w[1], &guard),
            pool.read(w[2], &guard)
        ]
    );
}

#[test]
fn entries_built_in_place_follow_remove_word() {
    // Goal: the descriptor is built in its pool slot and the handle keeps only per-entry
    // flags (session 17): RemoveWord's shift (nothing activated) and tombstone (something
    // activated) keep each entry's policy and new value with it. Method: volatile, remove the
    // first of three entries, discard: only the FREE-ONE entry's new value is freed (a flag
    // left at its old position would free another entry's value or none). Persistent (sim):
    // activate, add and remove a word (a tombstone), add it again, execute; the word changes
    // and the activated node is freed only on failure.
    let freed = Arc::new(Freed::default());
    let pool = Pool::create_volatile(NoPersist, config(Some(freed.clone()))).unwrap();
    let guard = pool.pin();
    let at = words(&pool, 3);
    let w: Vec<_> = at.iter().map(|&o| pool.word(o).unwrap()).collect();
    let mut d = pool.allocate_descriptor(&guard).unwrap();
    d.add_word(w[0], 0, 5).unwrap();
    let slot = d.reserve_entry(w[1], 0, Policy::FreeOne).unwrap();
    d.set_new(slot, 800).unwrap();
    d.add_word(w[2], 0, 7).unwrap();
    d.remove_word(w[0]).unwrap();
    assert_eq!(d.len(), 2);
    d.discard();
    assert_eq!(*freed.0.lock().unwrap(), vec![800]);
    assert_eq!([0, 0, 0], [0, 1, 2].map(|i| pool.read(w[i], &guard)));
    drop(guard);

    let freed = Arc::new(Freed::default());
    let pool = sim_pool(config(Some(freed.clone())));
    let at = words(&pool, 2);
    {
        let guard = pool.pin();
        let w: Vec<_> = at.iter().map(|&o| pool.word(o).unwrap()).collect();
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(w[0], 0, 5).unwrap();
        let node = d.reserve_memory().unwrap();
        d.set_new(node, 300).unwrap(); // activated: entries stay where they are
        d.remove_word(w[0]).unwrap();
        assert_eq!(d.len(), 1);
        d.add_word(w[0], 0, 6).unwrap();
        d.add_word(w[1], 0, 9).unwrap();
        assert_eq!(d.len(), 3);
        assert!(d.execute().unwrap());
        assert_eq!([6, 9], [pool.read(w[0], &guard), pool.read(w[1], &guard)]);
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(w[0], 5, 1).unwrap(); // fails: w0 holds 6
        let node = d.reserve_memory().unwrap();
        d.set_new(node, 400).unwrap();
        assert!(!d.execute().unwrap());
    }
    for _ in 0..10_000 {
        if freed.0.lock().unwrap().contains(&400) {
            break;
        }
        pool.pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(
        *freed.0.lock().unwrap(),
        vec![400],
        "the failed one's node only"
    );
}

#[test]
fn free_one_frees_old_on_success_new_on_failure_after_the_epoch() {
    // Goal: FREE-ONE (§6.3): success frees the old value, failure the new one, memory-only
    // entries likewise, Discard frees activated new values at once; frees come through the
    // epoch. Method: a recycler that records values; unpin and flush the epoch; compare.
    let freed = Arc::new(Freed::default());
    let pool = sim_pool(config(Some(freed.clone())));
    let at = words(&pool, 2);
    {
        let guard = pool.pin();
        let w0 = pool.word(at[0]).unwrap();
        let w1 = pool.word(at[1]).unwrap();
        let mut d = pool
            .allocate_descriptor_with(RecyclerId(0), &guard)
            .unwrap();
        let slot = d.reserve_entry(w0, 0, Policy::FreeOne).unwrap();
        d.set_new(slot, 100).unwrap(); // activation: durable before it returns
        d.add_memory(200, 0).unwrap(); // a retired node
        let node = d.reserve_memory().unwrap();
        d.set_new(node, 300).unwrap(); // an allocated node
        assert!(d.execute().unwrap());
        // Failure: new values freed.
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        let slot = d.reserve_entry(w1, 42, Policy::FreeOne).unwrap();
        d.set_new(slot, 400).unwrap();
        assert!(!d.execute().unwrap());
        // Discard: activated value freed at once.
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        let node = d.reserve_memory().unwrap();
        d.set_new(node, 500).unwrap();
        d.discard();
        assert!(freed.0.lock().unwrap().contains(&500));
        assert!(
            !freed.0.lock().unwrap().contains(&200),
            "not before the epoch passes"
        );
    }
    for _ in 0..10_000 {
        if freed.0.lock().unwrap().len() == 3 {
            break;
        }
        pool.pin().flush();
        std::thread::yield_now();
    }
    let mut got = freed.0.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(
        got,
        vec![200, 400, 500],
        "old 0 and new 300 are not freed after success"
    );
    assert!(matches!(
        pool.allocate_descriptor_with(RecyclerId(9), &pool.pin()),
        Err(Error::Config(_))
    ));
}

#[test]
fn pool_exhaustion_is_a_counted_bounded_wait() {
    // Goal: with every descriptor held, allocation waits a bounded time, counts the wait, and
    // reports exhaustion. Method: hold all 8 descriptors, allocate a ninth.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    let guard = pool.pin();
    let held: Vec<_> = (0..8)
        .map(|_| pool.allocate_descriptor(&guard).unwrap())
        .collect();
    assert!(matches!(
        pool.allocate_descriptor(&guard),
        Err(Error::PoolExhausted { descriptors: 8, .. })
    ));
    assert!(pool.stats().pool_waits > 0);
    drop(held);
    assert!(
        pool.allocate_descriptor(&guard).is_ok(),
        "discarded descriptors come back at once"
    );
}

#[test]
fn mapped_file_pool_reopens_with_its_words() {
    // Goal: a pool in a mapped file keeps its words across close and open, through offsets.
    // Method: msync mode; one PMwCAS; drop; reopen; read; a wrong geometry is a clear error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let cfg = config(None);
    let bytes = cfg.region_bytes().unwrap();
    {
        let pool = Pool::create(
            Region::map_file(&path, bytes).unwrap(),
            forest_pmwcas::Msync,
            cfg.clone(),
        )
        .unwrap();
        let guard = pool.pin();
        let w = pool.word(pool.user_area().start).unwrap();
        let mut d = pool.allocate_descriptor(&guard).unwrap();
        d.add_word(w, 0, 77).unwrap();
        assert!(d.execute().unwrap());
    }
    let (pool, report) = Pool::open(
        Region::map_file(&path, bytes).unwrap(),
        forest_pmwcas::Msync,
        cfg.clone(),
    )
    .unwrap();
    assert_eq!(report.words_rolled_forward + report.words_rolled_back, 0);
    let guard = pool.pin();
    assert_eq!(
        pool.read(pool.word(pool.user_area().start).unwrap(), &guard),
        77
    );
    drop(guard);
    drop(pool);
    let mut other = cfg;
    other.descriptors_per_partition = 5;
    let err = Pool::open(
        Region::map_file(&path, bytes).unwrap(),
        forest_pmwcas::Msync,
        other,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Format(ref m) if m.contains("geometry")),
        "{err}"
    );
    let garbage = Region::heap(bytes);
    assert!(
        matches!(Pool::open(garbage, NoPersist, config(None)), Err(Error::Format(ref m)) if m.contains("magic"))
    );
}

#[test]
fn descriptors_come_back_through_the_epoch() {
    // Goal: descriptors return through the epoch, so a thread that pins per operation goes on
    // forever on a small pool. Method: 10,000 single-word PMwCASes on an 8-descriptor pool, a
    // fresh guard each; on exhaustion (other tests' threads share crossbeam's global epoch and
    // may hold it back) unpin and retry, the documented remedy, a bounded number of times.
    let pool = Pool::create_volatile(NoPersist, config(None)).unwrap();
    let w = pool.word(pool.user_area().start).unwrap();
    for i in 0..10_000u64 {
        let mut retries = 0;
        loop {
            let guard = pool.pin();
            match pool.allocate_descriptor(&guard) {
                Ok(mut d) => {
                    d.add_word(w, i, i + 1).unwrap();
                    assert!(d.execute().unwrap());
                    break;
                }
                Err(Error::PoolExhausted { .. }) if retries < 1_000 => retries += 1,
                Err(e) => panic!("operation {i}: {e}"),
            };
        }
    }
    assert_eq!(pool.read(w, &pool.pin()), 10_000);
}
