//! Recycled base-page buffers: each thread keeps a few freed base pages' word buffers and
//! builds its next consolidated pages (§III-B) in them.
//!
//! Why: every consolidation allocates a base page of a few KiB and frees the replaced one
//! after an epoch drains (§III-D), on whichever thread collects the epoch's garbage. glibc
//! serves such sizes from per-thread arenas, so a page freed on another thread than the one
//! that allocated it takes that arena's lock, and a fresh one often runs `malloc_consolidate`:
//! with two threads on the 5:1 synthetic workload `perf` put about a sixth of the time in
//! `malloc`, `free` and the futex wake-ups behind them. Builds with and without this module,
//! run alternately, gave the recycling one 6-9 % more throughput there.
//!
//! Buffers are sized in classes of [`CLASS_WORDS`] words, so a freed page fits the next pages
//! of about its size; each thread keeps at most [`SPARE_MAX`] of at most 8 KiB, the newest
//! ones; larger and older ones go back to the allocator. The price is memory: a page holds up to two classes more than it needs
//! (1 KiB), about 14 % more on 8-byte records. Reused words hold old bytes: a page writes
//! every word it reads. The memory-tool build (`memcheck.rs`) keeps none: each buffer is
//! poisoned and freed.

use std::cell::RefCell;

/// Buffer lengths are multiples of this many words (512 bytes).
pub(crate) const CLASS_WORDS: usize = 64;
/// The most spare buffers a thread keeps.
const SPARE_MAX: usize = 32;
/// The largest buffer kept (words): pages of small records, the ones consolidated after most
/// writes. Larger pages' buffers go back to the allocator, so a thread keeps at most
/// `SPARE_MAX` x 8 KiB.
const SPARE_WORDS_MAX: usize = 1024;
/// A request may take a spare this many classes larger than it needs.
const CLASS_SLACK: usize = 1;

thread_local! {
    static SPARE: RefCell<Vec<Box<[u64]>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of at least `words` words (rounded up to a class), recycled when one of that
/// class is spare; its contents are unspecified.
pub(crate) fn take(words: usize) -> Box<[u64]> {
    let len = words.next_multiple_of(CLASS_WORDS).max(CLASS_WORDS);
    if !crate::memcheck::RECYCLES {
        return vec![0u64; len].into_boxed_slice();
    }
    let spare = SPARE
        .try_with(|spare| {
            let mut spare = spare.borrow_mut();
            let fits = len..=len + CLASS_SLACK * CLASS_WORDS;
            let at = spare.iter().position(|b| fits.contains(&b.len()))?;
            Some(spare.swap_remove(at))
        })
        .ok()
        .flatten();
    spare.unwrap_or_else(|| vec![0u64; len].into_boxed_slice())
}

/// Gives a page's buffer back: kept for reuse while this thread has room, else freed (in the
/// memory-tool build always, poisoned first: `memcheck.rs`).
pub(crate) fn give(mut buffer: Box<[u64]>) {
    if !crate::memcheck::RECYCLES {
        if crate::memcheck::POISONS {
            buffer.fill(u64::from_ne_bytes([crate::memcheck::POISON_BYTE; 8]));
            // The stores must reach memory although a free follows.
            std::hint::black_box(&mut buffer);
        }
        return;
    }
    if buffer.is_empty()
        || buffer.len() > SPARE_WORDS_MAX
        || !buffer.len().is_multiple_of(CLASS_WORDS)
    {
        return;
    }
    // During thread exit the thread-local may be gone: the buffer is then simply freed.
    let _ = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() == SPARE_MAX {
            // The oldest goes: spares of a class no longer built do not stay forever.
            spare.remove(0);
        }
        spare.push(buffer);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a given-back buffer is reused for a request of its class or one class smaller,
    // and not for smaller ones. Method: give one buffer, then take sizes around it.
    #[cfg(not(forest_memcheck))]
    #[test]
    fn buffers_are_reused_within_their_class() {
        let first = take(3 * CLASS_WORDS - 5);
        assert_eq!(first.len(), 3 * CLASS_WORDS);
        let address = first.as_ptr();
        give(first);
        let smaller = take(10);
        assert_eq!(smaller.len(), CLASS_WORDS);
        assert_ne!(smaller.as_ptr(), address, "two classes too big: not reused");
        let again = take(2 * CLASS_WORDS);
        assert_eq!(again.as_ptr(), address, "one class of slack: reused");
    }

    // Goal: the memory-tool build keeps no given-back buffer (each goes to the allocator,
    // where a memory tool sees it). Method: give one and look at the thread's spares.
    #[cfg(forest_memcheck)]
    #[test]
    fn memcheck_build_keeps_no_buffer() {
        give(take(CLASS_WORDS));
        assert_eq!(SPARE.with(|s| s.borrow().len()), 0);
    }

    // Goal: a thread keeps a bounded number of spares, the newest, and none too large.
    // Method: give a large one, then more than SPARE_MAX of one class, then check what is kept.
    #[cfg(not(forest_memcheck))]
    #[test]
    fn spares_are_bounded() {
        give(vec![0u64; SPARE_WORDS_MAX + CLASS_WORDS].into_boxed_slice());
        assert_eq!(SPARE.with(|s| s.borrow().len()), 0, "too large to keep");
        let oldest = take(CLASS_WORDS);
        let oldest_address = oldest.as_ptr();
        give(oldest);
        for _ in 0..SPARE_MAX {
            give(vec![0u64; CLASS_WORDS].into_boxed_slice());
        }
        SPARE.with(|s| {
            let s = s.borrow();
            assert_eq!(s.len(), SPARE_MAX);
            assert!(
                s.iter().all(|b| b.as_ptr() != oldest_address),
                "oldest evicted"
            );
        });
    }
}
