//! Loom models of PMwCAS (issue 16): overlapping 2-word PMwCASes (one wins, no reader sees a
//! mix), helping (a reader completes a PMwCAS it meets), §2.3.2's race (a late installation for
//! a completed p1 must not overwrite p2), the dirty-bit read (a value read is durable), and
//! descriptor reuse under the epoch stand-in, and reuse through the reuse domain while a reader
//! stays pinned in the pool's epoch (`reuse.rs`).
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 cargo test
//! -p forest-pmwcas --release --test loom_pmwcas` (.ci/run runs every `tests/loom_*.rs`).
//!
//! crossbeam-epoch is not loom-aware; under `--cfg loom` the pool's guards are the stand-in in
//! `reclaim.rs` (a pinned count and a retired list under a loom mutex), which gives the same
//! guarantee: a retired descriptor is released only once no thread pinned at its retirement
//! is still pinned. Under loom a descriptor holds 4 entries and regions align to a line.
#![cfg(loom)]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_pmwcas::{Error, NoPersist, Persist, Pool, PoolConfig, Region, Word, VALUE_MASK};
use loom::sync::atomic::{AtomicU64, Ordering};

fn config(descriptors: usize) -> PoolConfig {
    PoolConfig {
        partition_count: 1,
        descriptors_per_partition: descriptors,
        client_words: 0,
        user_words: 4,
        recyclers: Vec::new(),
    }
}

fn volatile(descriptors: usize) -> Arc<Pool<NoPersist>> {
    Arc::new(Pool::create_volatile(NoPersist, config(descriptors)).unwrap())
}

fn word<P: Persist>(pool: &Pool<P>, i: u64) -> &Word {
    pool.word(pool.user_area().start + 8 * i).unwrap()
}

/// One PMwCAS over words `(index, expected, new)`, retried while the pool is exhausted (the
/// documented remedy: unpin, pin, retry). Returns whether it succeeded.
fn pmwcas<P: Persist>(pool: &Pool<P>, words: &[(u64, u64, u64)]) -> bool {
    loop {
        let guard = pool.pin();
        let mut d = match pool.allocate_descriptor(&guard) {
            Ok(d) => d,
            Err(Error::PoolExhausted { .. }) => {
                // The guard drops at the end of this iteration: unpinned before the retry.
                loom::thread::yield_now();
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        for &(i, expected, new) in words {
            d.add_word(word(pool, i), expected, new).unwrap();
        }
        return d.execute().unwrap();
    }
}

fn read<P: Persist>(pool: &Pool<P>, i: u64) -> u64 {
    let guard = pool.pin();
    pool.read(word(pool, i), &guard)
}

// Goal: two PMwCASes over the same two words from the same values: exactly one wins, and a
// reader never sees one word changed and the other not. Method: threads 1 and 2 run
// {A: 0 -> t, B: 0 -> t}; the main thread reads A then B.
#[test]
fn overlapping_two_word_pmwcas_one_wins_no_mix() {
    // Three threads that all help: at CI's bound 3 this model alone took over 150 s once the
    // reuse domain's atomics were modelled too (session 11), against CI's 20 minutes; it runs
    // at bound 2 unless FOREST_LOOM_FULL is set (then at LOOM_MAX_PREEMPTIONS).
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("FOREST_LOOM_FULL").is_none() {
        builder.preemption_bound = Some(builder.preemption_bound.map_or(2, |b| b.min(2)));
    }
    builder.check(|| {
        let pool = volatile(2);
        let writers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|t| {
                let pool = pool.clone();
                loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, t), (1, 0, t)]))
            })
            .collect();
        let a = read(&pool, 0);
        let b = read(&pool, 1);
        if a != 0 {
            assert_eq!(b, a, "B must show A's PMwCAS once A does");
        }
        let wins: Vec<bool> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(wins.iter().filter(|&&w| w).count(), 1, "exactly one wins");
        let winner = if wins[0] { 1 } else { 2 };
        assert_eq!((read(&pool, 0), read(&pool, 1)), (winner, winner));
    });
}

// Goal: a reader that meets a PMwCAS in progress helps it to its end: once it sees the second
// word (in address order) changed, the first is changed too, and the owner's result agrees.
// Method: a writer runs {A: 0 -> 5, B: 0 -> 6}; the main thread reads B then A.
#[test]
fn reader_helps_a_pmwcas_it_meets() {
    loom::model(|| {
        let pool = volatile(1);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, 5), (1, 0, 6)]))
        };
        let b = read(&pool, 1);
        let a = read(&pool, 0);
        if b == 6 {
            assert_eq!(a, 5, "linearized: B's new value implies A's");
        } else {
            assert_eq!(b, 0);
        }
        assert!(writer.join().unwrap());
        assert_eq!((read(&pool, 0), read(&pool, 1)), (5, 6));
    });
}

// Goal: §2.3.2's race: after p1 {A: 0 -> 1, B: 0 -> 1} completes and p2 {A: 1 -> 0, B: 1 -> 0}
// restores A, a stalled helper of p1 must not install p1's descriptor again and roll p1
// forward over p2. With one RDCSS reference per installation (rdcss.rs) a completer's CAS
// fails on any later installation. Method: thread 1 runs p1; thread 2 reads A (helping p1
// wherever it stands), then runs p2 if p1 is visible; at the end A == B and they agree with
// the outcomes.
#[test]
fn late_install_for_completed_p1_cannot_overwrite_p2() {
    loom::model(|| {
        let pool = volatile(2);
        let p1 = {
            let pool = pool.clone();
            loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]))
        };
        let p2 = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                let a = read(&pool, 0);
                a == 1 && pmwcas(&pool, &[(0, 1, 0), (1, 1, 0)])
            })
        };
        let p1_won = p1.join().unwrap();
        let p2_won = p2.join().unwrap();
        assert!(p1_won, "p1 has no competitor that could fail it");
        let expected = if p2_won { 0 } else { 1 };
        assert_eq!((read(&pool, 0), read(&pool, 1)), (expected, expected));
    });
}

/// A persister for loom: a flush copies the flushed words into loom atomics (the durable
/// image), so a model can check what was durable when a value was read. The copy runs under
/// a lock, as a cache line's write-back is one event: two flushes of a line cannot land
/// out of order.
struct LoomDurable {
    durable: Vec<AtomicU64>,
    writeback: loom::sync::Mutex<()>,
}

impl Persist for LoomDurable {
    const DURABLE: bool = true;

    fn flush(&self, region: &Region, range: std::ops::Range<usize>) {
        let start = range.start / 64 * 64;
        let end = range.end.div_ceil(64) * 64;
        let _line = self.writeback.lock().unwrap();
        for offset in (start..end.min(region.len_bytes())).step_by(8) {
            let value = region.load_for_flush(offset as u64).unwrap();
            self.durable[offset / 8].store(value, Ordering::SeqCst);
        }
    }

    fn fence(&self) {}

    fn name(&self) -> &'static str {
        "loom-durable"
    }
}

// Goal: the dirty-bit read (§2.3.1): a value a reader returns is durable, whoever installed
// it. Method: persistent mode with a loom-visible durable image; a writer runs
// {A: 0 -> 7, B: 0 -> 8}; the main thread reads A and then checks that A's durable copy is
// not behind it.
#[test]
fn dirty_bit_read_returns_only_durable_values() {
    loom::model(|| {
        let cfg = config(1);
        let region = Region::heap(cfg.region_bytes().unwrap());
        let words = region.len_bytes() / 8;
        let persist = LoomDurable {
            durable: (0..words).map(|_| AtomicU64::new(0)).collect(),
            writeback: loom::sync::Mutex::new(()),
        };
        let pool = Arc::new(Pool::create(region, persist, cfg).unwrap());
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, 7), (1, 0, 8)]))
        };
        let a = read(&pool, 0);
        let at = pool.user_area().start as usize / 8;
        let durable = pool.persist().durable[at].load(Ordering::SeqCst) & VALUE_MASK;
        // Values only move 0 -> 7: the durable copy is never behind what was read.
        if a == 7 {
            assert_eq!(durable, 7, "a value read is durable");
        }
        assert!(writer.join().unwrap());
        let durable_b = pool.persist().durable[at + 1].load(Ordering::SeqCst) & VALUE_MASK;
        assert_eq!(durable_b, 8, "an acknowledged PMwCAS is durable");
    });
}

// Goal: descriptor reuse under epochs: with one descriptor, a writer's second PMwCAS reuses
// the descriptor of its first while a reader may still hold a reference to it; the reader
// must neither help the reused descriptor as if it were the old one nor see a torn state.
// Method: thread 1 runs {A: 0 -> 1, B: 0 -> 1} then {A: 1 -> 2, B: 1 -> 2}; the main thread
// reads A then B: B is never behind A, and the end state is (2, 2).
#[test]
fn descriptor_reuse_under_epochs() {
    loom::model(|| {
        let pool = volatile(1);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                assert!(pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]));
                assert!(pmwcas(&pool, &[(0, 1, 2), (1, 1, 2)]));
            })
        };
        let a = read(&pool, 0);
        let b = read(&pool, 1);
        assert!(b >= a, "B ({b}) behind A ({a}): a torn PMwCAS");
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1)), (2, 2));
    });
}

// Goal: the reuse domain's rule (`reuse.rs`): a descriptor that frees no memory is reused
// while a reader stays pinned in the pool's epoch, and a reader that loaded its reference
// before the reuse (and pins the reuse domain only when it helps) neither helps the new
// generation as the old one nor sees a torn state. Method: one descriptor; thread 1 runs
// {A: 0 -> 1, B: 0 -> 1} then {A: 1 -> 2, B: 1 -> 2}; the main thread holds one guard across
// reading A then B: B is never behind A, and the end state is (2, 2).
#[test]
fn reuse_without_the_pool_epoch() {
    loom::model(|| {
        let pool = volatile(1);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                assert!(pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]));
                assert!(pmwcas(&pool, &[(0, 1, 2), (1, 1, 2)]));
            })
        };
        let (a, b) = {
            let guard = pool.pin();
            let a = pool.read(word(&pool, 0), &guard);
            let b = pool.read(word(&pool, 1), &guard);
            (a, b)
        };
        assert!(b >= a, "B ({b}) behind A ({a}): a torn PMwCAS");
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1)), (2, 2));
    });
}

// Goal (review rev-pmrec): the reuse pin is what keeps a helper's *install* of an old
// generation from landing after its descriptor is reused, when a target word's value comes
// back (ABA). Method: two descriptors; the writer runs g1 {A: 0 -> 1, B: 0 -> 1} (on d0),
// g2 {A: 1 -> 0, C: 0 -> 1} (d1), g3 {B: 1 -> 2, C: 1 -> 2} (d0 again; C makes g2 and g3
// real descriptors, a single-word PMwCAS publishes none); the main thread yields, then reads A
// (helping g1 wherever it stands). A helper of g1 that read g1 `Undecided` and is held up
// before its RDCSS would, unpinned, install g1's entry into A once g2 restored A to 0 and d0
// moved on to g3, and the completion would then write g3's entry 0 expected value (1) into A:
// a lost write. With the pin it cannot: d0 is not released before the helper unpins. The end
// state is (0, 2, 2).
#[test]
fn reuse_pin_stops_a_stale_install_after_aba() {
    loom::model(|| {
        let pool = volatile(2);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                assert!(pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]));
                assert!(pmwcas(&pool, &[(0, 1, 0), (2, 0, 1)]));
                assert!(pmwcas(&pool, &[(1, 1, 2), (2, 1, 2)]));
            })
        };
        loom::thread::yield_now();
        let _ = read(&pool, 0);
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1), read(&pool, 2)), (0, 2, 2));
    });
}

// Goal (review rev-pmrec): what `reuse_without_the_pool_epoch` claims but does not check (it
// passes with every descriptor sent through the pool's epoch): a descriptor that frees no
// memory comes back while its owner stays pinned in the pool's epoch. Method: one descriptor;
// the writer holds one guard across {A: 0 -> 1, B: 0 -> 1} and {A: 1 -> 2, B: 1 -> 2},
// retrying an exhausted allocation without unpinning (so behind the pool's epoch it would
// retry forever); the main thread reads A then B meanwhile (helping, pinned in the reuse
// domain only while it helps).
#[test]
fn reuse_while_the_owner_stays_pinned() {
    loom::model(|| {
        let pool = volatile(1);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                let guard = pool.pin();
                for n in 0..2u64 {
                    let mut d = loop {
                        match pool.allocate_descriptor(&guard) {
                            Ok(d) => break d,
                            Err(Error::PoolExhausted { .. }) => loom::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    };
                    d.add_word(word(&pool, 0), n, n + 1).unwrap();
                    d.add_word(word(&pool, 1), n, n + 1).unwrap();
                    assert!(d.execute().unwrap());
                }
            })
        };
        let a = read(&pool, 0);
        let b = read(&pool, 1);
        assert!(b >= a, "B ({b}) behind A ({a}): a torn PMwCAS");
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1)), (2, 2));
    });
}

// Goal (session 15): the volatile single-word PMwCAS is a helping read and a CAS
// (`descriptor.rs`), with no descriptor published; racing a 2-word PMwCAS on the same word
// from the same value, exactly one wins, and no reader sees the 2-word one half done.
// Method: thread 1 runs {A: 0 -> 1, B: 0 -> 1}; thread 2 runs {A: 0 -> 5}; the main thread
// reads A then B: A == 5 means B stays 0, A == 1 means B is 1; the end state matches the
// winner.
#[test]
fn single_word_pmwcas_races_a_two_word_one() {
    // Three threads that help, as `overlapping_two_word_pmwcas_one_wins_no_mix`: bound 2
    // unless FOREST_LOOM_FULL is set.
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("FOREST_LOOM_FULL").is_none() {
        builder.preemption_bound = Some(builder.preemption_bound.map_or(2, |b| b.min(2)));
    }
    builder.check(|| {
        let pool = volatile(2);
        let pair = {
            let pool = pool.clone();
            loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]))
        };
        let single = {
            let pool = pool.clone();
            loom::thread::spawn(move || pmwcas(&pool, &[(0, 0, 5)]))
        };
        let a = read(&pool, 0);
        let b = read(&pool, 1);
        match a {
            5 => assert_eq!(b, 0, "the 2-word PMwCAS went in after the CAS"),
            1 => assert_eq!(b, 1, "B behind A: a torn PMwCAS"),
            _ => assert_eq!(a, 0),
        }
        let pair_won = pair.join().unwrap();
        let single_won = single.join().unwrap();
        assert!(pair_won != single_won, "exactly one wins");
        let end = (read(&pool, 0), read(&pool, 1));
        assert_eq!(end, if pair_won { (1, 1) } else { (5, 0) });
    });
}

// Goal (review rev-pmw F1): the ABA scenario of `reuse_pin_stops_a_stale_install_after_aba`
// with its middle step a single-word PMwCAS, which takes and publishes no descriptor (a
// helping read and a CAS, `Pool::single_word_cas`): the word goes back to g1's expected value
// without any descriptor being decided, so only the reuse pin stands between a helper of g1
// held up before its RDCSS and a stale install into A. Method: the writer runs g1 {A: 0 -> 1,
// B: 0 -> 1}, then the single word {A: 1 -> 0}, then g3 {A: 0 -> 3, C: 0 -> 3} (two
// descriptors, so g3 may reuse g1's); the main thread reads A meanwhile (helping g1 wherever
// it stands). A stale install of g1 into A after the CAS would make A 1 again (g1 succeeded)
// and g3 fail. The end state is (3, 1, 3).
#[test]
fn reuse_pin_stops_a_stale_install_after_a_single_word_aba() {
    loom::model(|| {
        let pool = volatile(2);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                assert!(pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]));
                {
                    // No descriptor taken (`Pool::single_word_cas`, rev-pmw F2).
                    let guard = pool.pin();
                    assert!(pool.single_word_cas(word(&pool, 0), 1, 0, &guard).unwrap());
                }
                assert!(pmwcas(&pool, &[(0, 0, 3), (2, 0, 3)]));
            })
        };
        loom::thread::yield_now();
        let a = read(&pool, 0);
        assert!(matches!(a, 0 | 1 | 3), "A read {a}");
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1), read(&pool, 2)), (3, 1, 3));
    });
}

// Goal (review rev-bz2, session 17): the descriptor is built in place in its pool slot, so a
// reader holding a stale reference to generation g1 may read the slot while the owner writes
// g2's entries there, moves them (`RemoveWord`'s shift) and overwrites them. It must never
// act on a torn mix of g1's and g2's entries. Method: one descriptor; the writer runs g1
// {A: 0 -> 1, B: 0 -> 1}, then builds g2 as {C: 0 -> 9, B: 1 -> 2, A: 1 -> 2}, removes C
// (B and A shift down one entry, so entry 0 changes address twice: A, C, B) and executes;
// the main thread reads A then B meanwhile (helping g1 wherever it stands). A helper acting
// on a torn g1 snapshot would install a g2 value under g1 (g2 then fails) or touch C. B is
// never behind A, both PMwCASes succeed, the end state is (2, 2, 0).
#[test]
fn reuse_while_the_owner_builds_in_place() {
    loom::model(|| {
        let pool = volatile(1);
        let writer = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                assert!(pmwcas(&pool, &[(0, 0, 1), (1, 0, 1)]));
                loop {
                    let guard = pool.pin();
                    let mut d = match pool.allocate_descriptor(&guard) {
                        Ok(d) => d,
                        Err(Error::PoolExhausted { .. }) => {
                            loom::thread::yield_now();
                            continue;
                        }
                        Err(e) => panic!("{e}"),
                    };
                    d.add_word(word(&pool, 2), 0, 9).unwrap();
                    d.add_word(word(&pool, 1), 1, 2).unwrap();
                    d.add_word(word(&pool, 0), 1, 2).unwrap();
                    d.remove_word(word(&pool, 2)).unwrap();
                    assert!(d.execute().unwrap(), "g2 failed: a torn install of g1");
                    break;
                }
            })
        };
        let a = read(&pool, 0);
        let b = read(&pool, 1);
        assert!(b >= a, "B ({b}) behind A ({a}): a torn PMwCAS");
        writer.join().unwrap();
        assert_eq!((read(&pool, 0), read(&pool, 1), read(&pool, 2)), (2, 2, 0));
    });
}
