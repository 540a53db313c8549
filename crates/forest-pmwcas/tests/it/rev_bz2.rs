//! Review rev-bz2 (session 17): the descriptor is built in place in its pool slot, so in
//! persistent mode a crash while the owner builds (AddWord, RemoveWord's shift and tombstone,
//! activations) may leave any subset of those unflushed in-place stores durable, over the
//! entries of the slot's previous generation. Recovery must free exactly the entries activated
//! in the current generation and change no word.

#![cfg(not(any(loom, shuttle)))]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use forest_pmwcas::{Pool, PoolConfig, Recycle, Region, Sim};

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
        descriptors_per_partition: 1,
        client_words: 0,
        user_words: 16,
        recyclers: vec![freed.clone() as Arc<dyn Recycle>],
    }
}

/// Opens `image` (recovery), and checks the words are g1's result and that recovery freed
/// at least `must` and nothing outside `may`.
fn check(image: &[u64], must: &[u64], may: &[u64], what: &str) {
    let freed = Arc::new(Freed::default());
    let region = Region::from_image(image);
    let sim = Sim::new(&region);
    let (pool, _) = Pool::open(region, sim, config(&freed)).unwrap();
    pool.finish_recovery();
    let base = pool.user_area().start;
    let guard = pool.pin();
    let words: Vec<u64> = (0..4)
        .map(|i| pool.read(pool.word(base + 8 * i).unwrap(), &guard))
        .collect();
    assert_eq!(words, vec![1, 1, 0, 0], "{what}: words");
    let got: BTreeSet<u64> = freed.0.lock().unwrap().iter().copied().collect();
    let must: BTreeSet<u64> = must.iter().copied().collect();
    let may: BTreeSet<u64> = may.iter().copied().collect();
    assert!(
        must.is_subset(&got),
        "{what}: freed {got:?}, must free {must:?}"
    );
    assert!(got.is_subset(&may), "{what}: freed {got:?} outside {may:?}");
}

#[test]
fn rev_bz2_crash_while_building_in_place_frees_only_this_generations_activations() {
    let mut images = 0;
    for seed in 0..48u64 {
        let freed = Arc::new(Freed::default());
        let cfg = config(&freed);
        let region = Region::heap(cfg.region_bytes().unwrap());
        let sim = Sim::new(&region);
        let pool = Pool::create(region, sim, cfg).unwrap();
        pool.persist_range(0..pool.region().len_bytes());
        let base = pool.user_area().start;
        let w: Vec<_> = (0..4).map(|i| pool.word(base + 8 * i).unwrap()).collect();
        let mut step = 0u64;
        let mut snap = |pool: &Pool<Sim>, must: &[u64], may: &[u64], what: &str| {
            step += 1;
            let image = pool
                .persist()
                .crash_image(pool.region(), seed * 1000 + step);
            check(&image, must, may, &format!("seed {seed} after {what}"));
            images += 1;
        };
        // g1: activated memory entries 101 and 102 at entries 0 and 2, which the slot keeps
        // (durably) after g1 succeeds: success frees neither (their old values are 0).
        {
            let guard = pool.pin();
            let mut d = pool.allocate_descriptor(&guard).unwrap();
            let m = d.reserve_memory().unwrap();
            d.set_new(m, 101).unwrap();
            d.add_word(w[0], 0, 1).unwrap();
            let m = d.reserve_memory().unwrap();
            d.set_new(m, 102).unwrap();
            d.add_word(w[1], 0, 1).unwrap();
            assert!(d.execute().unwrap());
        }
        assert!(freed.0.lock().unwrap().is_empty());
        // g2 in the same slot, with a crash image after each step.
        let guard = pool.pin();
        let mut d = loop {
            match pool.allocate_descriptor(&guard) {
                Ok(d) => break d,
                Err(_) => {
                    guard.flush();
                    std::thread::yield_now();
                }
            }
        };
        snap(&pool, &[], &[], "allocate");
        let m = d.reserve_memory().unwrap(); // entry 0
        snap(&pool, &[], &[], "reserve_memory");
        d.add_word(w[2], 0, 5).unwrap(); // entry 1
        d.add_word(w[0], 1, 2).unwrap(); // entry 2 (g1's activated 102 was there)
        snap(&pool, &[], &[], "add_word x2");
        d.remove_word(w[2]).unwrap(); // shift: w0 to entry 1, a stale copy at 2
        snap(&pool, &[], &[], "remove_word (shift)");
        d.set_new(m, 500).unwrap(); // activation of entry 0 (g1's 101 was there)
        snap(&pool, &[500], &[500], "activation 500");
        d.add_word(w[3], 0, 7).unwrap(); // entry 2
        snap(&pool, &[500], &[500], "add_word w3");
        d.remove_word(w[3]).unwrap(); // tombstone at entry 2
        snap(&pool, &[500], &[500], "remove_word (tombstone)");
        let m2 = d.reserve_memory().unwrap(); // entry 3
        d.set_new(m2, 600).unwrap();
        snap(&pool, &[500, 600], &[500, 600], "activation 600");
        d.discard();
        snap(&pool, &[], &[], "discard");
        let got: BTreeSet<u64> = freed.0.lock().unwrap().iter().copied().collect();
        assert_eq!(got, [500, 600].into(), "the live run's discard");
    }
    eprintln!("{images} crash images");
}
