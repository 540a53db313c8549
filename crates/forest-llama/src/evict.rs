//! Memory budget and eviction (Bw-tree §V-B "swapping pages out"; llama-notes §3; issue 17,
//! increment 3). The access method decides what a page's state holds; LLAMA keeps the count of
//! resident bytes, the clock that picks victims, and the final swap-out step.
//!
//! The protocol (docs/ARCHITECTURE.md "Memory budget and eviction"):
//! 1. the clock hand passes over PIDs; a PID whose referenced bit is set (by a read since the
//!    hand last passed) gets a second chance: the bit is cleared and the hand moves on;
//! 2. the access method brings the candidate to "one flush delta F over its base page, F
//!    describing exactly that base page" (consolidate, flush) or gives up on it;
//! 3. [`swap_out`]: once F's piece is stable ([`Lss::hi_stable`] above its address, else
//!    [`Lss::mk_stable`] first), CAS the word from exactly that state to F's address (tag
//!    `01`) and retire the state through the epoch. A write, split or consolidation that
//!    changed the page meanwhile makes the CAS fail, and nothing is lost.
//!
//! Invariants:
//! - A word holds an LSS address only if every piece of the page up to it is stable, and the
//!   pieces rebuild exactly the state that was swapped out (step 2's shape and step 3's CAS
//!   from that very state).
//! - Resident bytes change only by [`ResidentBytes::add`] / [`ResidentBytes::sub`], which the
//!   access method calls when it installs a state or a delta and when it swaps one out of
//!   the table (retires it), so the count is of reachable states, not of garbage awaiting its
//!   epoch.

use crossbeam_epoch::{Guard, Shared};
use forest_core::pause::pause_point;
use forest_core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use forest_core::{Counter, Result};

use crate::lss::{Lss, LssAddress};
use crate::mapping_table::{MappingTable, PageState, Pid, CHUNK_SLOT_COUNT, DIRECTORY_LEN};

/// Bytes of page states reachable from the mapping table (base pages and deltas).
#[derive(Default)]
pub struct ResidentBytes(AtomicI64);

impl ResidentBytes {
    /// Counts `bytes` installed.
    #[inline]
    pub fn add(&self, bytes: usize) {
        self.0.fetch_add(bytes as i64, Ordering::Relaxed);
    }

    /// Counts `bytes` swapped out of the table.
    #[inline]
    pub fn sub(&self, bytes: usize) {
        self.0.fetch_sub(bytes as i64, Ordering::Relaxed);
    }

    /// The count now (never below 0; a transient negative is a retire counted before its
    /// install's add on another thread).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed).max(0) as u64
    }
}

/// Words of referenced bits per chunk: one bit per PID of a mapping-table chunk.
const BIT_WORDS_PER_CHUNK: usize = CHUNK_SLOT_COUNT.div_ceil(64);

/// The clock over PIDs (second chance): a referenced bit per PID, set by reads, and a hand.
/// The bits live in chunks allocated on first use, as the mapping table's words do.
pub struct Clock {
    chunks: Box<[AtomicPtr<AtomicU64>]>,
    hand: AtomicUsize,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self {
            chunks: (0..DIRECTORY_LEN)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            hand: AtomicUsize::new(0),
        }
    }

    /// The bit word of `pid` and its mask, allocating its chunk if `create`.
    fn word(&self, pid: Pid, create: bool) -> Option<(&AtomicU64, u64)> {
        let pid = usize::try_from(pid).ok()?;
        let slot = self.chunks.get(pid / CHUNK_SLOT_COUNT)?;
        let mut chunk = slot.load(Ordering::Acquire);
        if chunk.is_null() {
            if !create {
                return None;
            }
            let words: Box<[AtomicU64]> = (0..BIT_WORDS_PER_CHUNK)
                .map(|_| AtomicU64::new(0))
                .collect();
            let fresh = Box::into_raw(words).cast::<AtomicU64>();
            chunk = match slot.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => fresh,
                Err(winner) => {
                    // SAFETY: the CAS failed, so `fresh` was never published; it is the boxed
                    // slice of BIT_WORDS_PER_CHUNK words made just above.
                    drop(unsafe { bits_from_raw(fresh) });
                    winner
                }
            };
        }
        let index = pid % CHUNK_SLOT_COUNT;
        // SAFETY: a non-null chunk points to BIT_WORDS_PER_CHUNK words that live until the
        // clock drops (`&self` keeps it); index / 64 is below that.
        let word = unsafe { &*chunk.add(index / 64) };
        Some((word, 1u64 << (index % 64)))
    }

    /// Marks `pid` referenced (a read met it). Writes only when the bit is clear, so hot
    /// pages cost readers a load, not a shared write.
    #[inline]
    pub fn touch(&self, pid: Pid) {
        if let Some((word, mask)) = self.word(pid, true) {
            if word.load(Ordering::Relaxed) & mask == 0 {
                word.fetch_or(mask, Ordering::Relaxed);
            }
        }
    }

    /// Clears `pid`'s bit; whether it was set (a second chance used up).
    pub fn clear(&self, pid: Pid) -> bool {
        match self.word(pid, false) {
            Some((word, mask)) if word.load(Ordering::Relaxed) & mask != 0 => {
                word.fetch_and(!mask, Ordering::Relaxed) & mask != 0
            }
            Some(_) => false,
            None => false,
        }
    }

    /// The next PID under the hand, among the first `end` PIDs (the table's high-water mark).
    pub fn advance(&self, end: usize) -> Option<Pid> {
        if end == 0 {
            return None;
        }
        let at = self.hand.fetch_add(1, Ordering::Relaxed);
        Some((at % end) as Pid)
    }
}

/// Rebuilds the box of a bit chunk.
///
/// # Safety
/// `ptr` came from `Box::into_raw` of a boxed slice of `BIT_WORDS_PER_CHUNK` words, once.
unsafe fn bits_from_raw(ptr: *mut AtomicU64) -> Box<[AtomicU64]> {
    let slice = std::ptr::slice_from_raw_parts_mut(ptr, BIT_WORDS_PER_CHUNK);
    // SAFETY: the caller's duty: the pointer and length are those of the original box.
    unsafe { Box::from_raw(slice) }
}

impl Drop for Clock {
    fn drop(&mut self) {
        for slot in self.chunks.iter() {
            let chunk = slot.load(Ordering::Acquire);
            if !chunk.is_null() {
                // SAFETY: non-null slots hold chunks made by `word`, each dropped once here
                // (`&mut self`: no other user).
                drop(unsafe { bits_from_raw(chunk) });
            }
        }
    }
}

/// Eviction's counters.
#[derive(Default)]
pub struct EvictStats {
    /// Pages swapped out.
    pub evictions: Counter,
    /// Pages read back from the LSS and installed.
    pub loads: Counter,
    /// Loads whose install CAS lost to another thread's load (the copy was dropped).
    pub load_races: Counter,
    /// Swap-out CASes that lost to a change of the page.
    pub evict_cas_failures: Counter,
}

/// How a [`swap_out`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapOut {
    /// The word holds the address now; the state is retired.
    Evicted,
    /// The page changed since `expected` was read: nothing happened.
    Changed,
}

/// Whether the record at `address` is stable. A record below Hi-Stable is wholly durable (it
/// lies in one buffer, written whole), so it is once Hi-Stable is past its first byte.
pub fn is_stable(lss: &Lss, address: LssAddress) -> bool {
    lss.hi_stable() > address
}

/// Step 3 of the protocol (module doc; pause point `evict:stable` after the piece is stable,
/// before the CAS): makes the piece at `flushed` stable if it is not yet,
/// then CASes `pid`'s word from `expected` to `flushed`, retiring `expected` on success.
///
/// Precondition: `expected` is exactly one flush delta whose piece is `flushed` over the base
/// page that the page's pieces up to `flushed` rebuild (the access method checks the shape).
/// Errors: [`Lss::mk_stable`]'s (a poisoned LSS); the page is then unchanged.
pub fn swap_out<T: PageState>(
    table: &MappingTable<T>,
    lss: &Lss,
    pid: Pid,
    expected: Shared<'_, T>,
    flushed: LssAddress,
    stats: &EvictStats,
    guard: &Guard,
) -> Result<SwapOut> {
    if !is_stable(lss, flushed) {
        lss.mk_stable(LssAddress::current(flushed.offset() + 1))?;
    }
    pause_point("evict:stable");
    if table.swap_out(pid, expected, flushed.to_bits(), guard) {
        stats.evictions.incr();
        Ok(SwapOut::Evicted)
    } else {
        stats.evict_cas_failures.incr();
        Ok(SwapOut::Changed)
    }
}
