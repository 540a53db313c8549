//! Read/write spin latches, as the thesis' Listing 4.1 (§4.2).
//!
//! One 32-bit word per latch: the low half is a counting semaphore of readers, the high half a
//! binary semaphore of the writer ([`RW_W_LOCK`] is its unit). A reader adds one and backs off
//! while a writer is there. A writer adds [`RW_W_LOCK`]; if it was the first writer it owns the
//! binary part, which stops new readers, and then waits for the readers inside to drain. No FIFO
//! queue: as the thesis argues, read latches are held only for one step of a descent, so
//! writers do not starve.
//!
//! Invariants:
//! - `word >= RW_W_LOCK` exactly while a writer holds the latch or is trying to take it.
//! - A writer owns the latch when its own `fetch_add` saw no writer and the word has since
//!   drained to exactly `RW_W_LOCK` (no readers inside).
//! - Counts stay below 2^16 in each half: fewer than 65 536 threads touch one latch at once.
//!
//! Memory order: acquiring (reader `fetch_add`, writer `fetch_add` and its drain load) is
//! `Acquire`; releasing (both unlocks) is `Release`. Every access to the word is a
//! read-modify-write or a load, so an unlock heads a release sequence that later lockers read
//! from: what a writer wrote under the latch is visible to whoever takes the latch next, and
//! what readers read happens before the next writer's writes.
//!
//! Choice the listing leaves open: a writer that lost the race spins while *any* writer is
//! there (`>= RW_W_LOCK`), where Listing 4.1 spins only while `> RW_W_LOCK` and so retries its
//! atomic add in a tight loop when the other writer has no readers; both are correct, ours keeps
//! the cache line shared while it waits.
//!
//! Waiting: Listing 4.1 pauses (`_mm_pause`) in its wait loops; we do so for the first
//! [`SPIN_COUNT_MAX`] rounds of a wait, then yield the thread each round. The protocol on the
//! word is unchanged; yielding only matters when there are more runnable threads than cores,
//! where a holder preempted inside its critical section would otherwise keep every waiter
//! spinning for a whole time slice.
//!
//! The lock functions return whether they had to wait, so callers can count
//! [`forest_core::stats::names::LATCH_WAITS`] without this module knowing the counters.

use forest_core::sync::atomic::{AtomicU32, Ordering};
use forest_core::sync::spin_loop;

/// The writer's unit: one in the high half of the word (Listing 4.1's `RW_W_LOCK`).
pub const RW_W_LOCK: u32 = 1 << 16;

/// Pause rounds of one wait before it starts yielding the thread. Latches are held for one
/// node's work (well under a microsecond), which this many pauses cover; a longer wait means
/// the holder is likely descheduled.
pub const SPIN_COUNT_MAX: u32 = 256;

/// The waiting policy of one wait (see the module doc).
struct Backoff {
    spin_count: u32,
}

impl Backoff {
    fn new() -> Self {
        Self { spin_count: 0 }
    }

    #[inline]
    fn wait(&mut self) {
        if self.spin_count < SPIN_COUNT_MAX {
            self.spin_count += 1;
            spin_loop();
        } else {
            yield_thread();
        }
    }
}

#[cfg(not(loom))]
fn yield_thread() {
    std::thread::yield_now();
}

#[cfg(loom)]
fn yield_thread() {
    // loom's spin hint is already a yield to its scheduler.
    spin_loop();
}

/// A read/write spin latch.
#[derive(Debug)]
pub struct Latch {
    word: AtomicU32,
}

impl Default for Latch {
    fn default() -> Self {
        Self::new()
    }
}

impl Latch {
    /// An unlocked latch.
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
        }
    }

    /// Takes the latch in shared mode. Returns whether it had to wait.
    #[inline]
    pub fn read_lock(&self) -> bool {
        let mut waited = false;
        // Wait while a writer has (or wants) the latch.
        while self.word.fetch_add(1, Ordering::Acquire) >= RW_W_LOCK {
            self.word.fetch_sub(1, Ordering::Relaxed);
            waited = true;
            let mut backoff = Backoff::new();
            while self.word.load(Ordering::Relaxed) >= RW_W_LOCK {
                backoff.wait();
            }
        }
        waited
    }

    /// Takes the latch in shared mode if no writer has or wants it; never waits. Returns
    /// whether it took the latch.
    #[inline]
    pub fn try_read_lock(&self) -> bool {
        if self.word.load(Ordering::Relaxed) >= RW_W_LOCK {
            return false;
        }
        if self.word.fetch_add(1, Ordering::Acquire) >= RW_W_LOCK {
            self.word.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Releases a shared hold.
    #[inline]
    pub fn read_unlock(&self) {
        let before = self.word.fetch_sub(1, Ordering::Release);
        debug_assert!(before & (RW_W_LOCK - 1) > 0, "read_unlock without a reader");
    }

    /// Takes the latch in exclusive mode. Returns whether it had to wait.
    #[inline]
    pub fn write_lock(&self) -> bool {
        let mut waited = false;
        // First phase: own the binary semaphore; from then on no reader gets in.
        while self.word.fetch_add(RW_W_LOCK, Ordering::Acquire) >= RW_W_LOCK {
            self.word.fetch_sub(RW_W_LOCK, Ordering::Relaxed);
            waited = true;
            let mut backoff = Backoff::new();
            while self.word.load(Ordering::Relaxed) >= RW_W_LOCK {
                backoff.wait();
            }
        }
        // Second phase: wait until the readers inside have left.
        let mut backoff = Backoff::new();
        while self.word.load(Ordering::Acquire) != RW_W_LOCK {
            waited = true;
            backoff.wait();
        }
        waited
    }

    /// Releases an exclusive hold.
    #[inline]
    pub fn write_unlock(&self) {
        let before = self.word.fetch_sub(RW_W_LOCK, Ordering::Release);
        debug_assert!(before >= RW_W_LOCK, "write_unlock without a writer");
    }

    /// Whether some writer holds or wants the latch (for assertions; racy by nature).
    pub fn is_write_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) >= RW_W_LOCK
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_writer_excludes() {
        // Goal: the word counts readers and a writer sees them; method: lock by hand, inspect.
        let latch = Latch::new();
        assert!(!latch.read_lock());
        assert!(!latch.read_lock());
        assert!(!latch.is_write_locked());
        latch.read_unlock();
        latch.read_unlock();
        assert!(latch.try_read_lock());
        latch.read_unlock();
        assert!(!latch.write_lock());
        assert!(!latch.try_read_lock(), "a writer holds it");
        assert!(latch.is_write_locked());
        latch.write_unlock();
        assert!(!latch.is_write_locked());
    }

    #[test]
    fn writers_exclude_each_other_under_threads() {
        // Goal: mutual exclusion at speed; method: non-atomic read-modify-write of a counter
        // under the write latch from 4 threads, the total must be exact.
        use std::sync::atomic::AtomicU64;
        let latch = Latch::new();
        let value = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        latch.write_lock();
                        let v = value.load(std::sync::atomic::Ordering::Relaxed);
                        value.store(v + 1, std::sync::atomic::Ordering::Relaxed);
                        latch.write_unlock();
                        latch.read_lock();
                        latch.read_unlock();
                    }
                });
            }
        });
        assert_eq!(value.into_inner(), 80_000);
    }
}
