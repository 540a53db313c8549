//! The node heap: nodes and value blocks live in the user area of the PMwCAS pool's region, so
//! that every word a PMwCAS changes (status words, metadata entries, child and record
//! pointers) is a target word of the pool, and every reference is a byte offset into the
//! region, never an address: the one representation that serves the persistent mode (§3.1,
//! §6), where the mapping moves between runs.
//!
//! A chunk is `[size: u64][payload]`; allocation hands out the payload's offset. Sizes are
//! multiples of 64 bytes up to 4 KiB (a 1 KB node takes 1088 bytes), powers of two above;
//! freed chunks go to a free list per size, taken first; a bump pointer serves the rest. Frees come from the pool's `FREE-ONE` policies after the epoch
//! (§2.2, §6.3) or, for chunks no other thread ever saw (a failed SMO's new nodes, §5.2), at
//! once. The volatile heap is an anonymous mapping, so untouched space costs nothing.
//!
//! This is the crate's only module with `unsafe`. Invariants:
//! - `base` is the start of the pool's region, which outlives the heap's users: the tree owns
//!   the pool and drops the heap with it; the pool runs no release after it is dropped.
//! - Offsets handed to the accessors lie inside a live chunk of `start..end` (checked in debug
//!   builds), 8-aligned for words; `word` also reaches the pool's client words (the root).
//! - Bytes read through [`NodeHeap::bytes`] are not written while the reader holds them: record
//!   bytes are written only into reserved space before the PMwCAS that makes them visible (or
//!   into a node no other thread reaches yet), and chunks are reused only after the epoch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use forest_pmwcas::{Recycle, Word};

/// Chunks up to this size come in steps of [`STEP_BYTES`]; larger ones in powers of two.
const FINE_BYTES_MAX: u64 = 4096;
/// Step of the fine size classes (a cache line).
const STEP_BYTES: u64 = 64;
/// Fine classes, then powers of two from 8 KiB to 2^34 bytes.
const FINE_CLASSES: usize = (FINE_BYTES_MAX / STEP_BYTES) as usize;
const CLASS_COUNT: usize = FINE_CLASSES + 22;
/// Bytes of a chunk's size prefix.
const PREFIX_BYTES: u64 = 8;

/// The heap over the region's user area (module doc).
pub struct NodeHeap {
    base: *mut u8,
    start: u64,
    end: u64,
    bump: AtomicU64,
    free: [Mutex<Vec<u64>>; CLASS_COUNT],
    in_use: AtomicU64,
}

// SAFETY: the heap only hands out offsets and accesses region memory through atomics or
// through byte ranges that the module invariants keep free of concurrent writes; the base
// pointer is valid for the region's lifetime on every thread.
unsafe impl Send for NodeHeap {}
// SAFETY: as for Send: all shared state is atomics or mutexes.
unsafe impl Sync for NodeHeap {}

impl std::fmt::Debug for NodeHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHeap")
            .field("bytes", &(self.end - self.start))
            .field("in_use", &self.in_use.load(Ordering::Relaxed))
            .finish()
    }
}

/// The size class and chunk size of a payload of `bytes`.
fn class_of(bytes: u64) -> (usize, u64) {
    let total = bytes + PREFIX_BYTES;
    if total <= FINE_BYTES_MAX {
        let steps = total.div_ceil(STEP_BYTES).max(1);
        return ((steps - 1) as usize, steps * STEP_BYTES);
    }
    let size = total.next_power_of_two();
    let class =
        FINE_CLASSES + (size.trailing_zeros() - FINE_BYTES_MAX.trailing_zeros() - 1) as usize;
    (class, size)
}

impl NodeHeap {
    /// A heap over bytes `start..end` of the region at `base`.
    ///
    /// # Safety
    /// `base` must point to a region of at least `end` bytes that stays mapped, and is
    /// accessed by others only atomically, for as long as the heap is used (module doc).
    pub unsafe fn new(base: *mut u8, start: u64, end: u64) -> Self {
        debug_assert!(start.is_multiple_of(64));
        Self {
            base,
            start,
            end,
            bump: AtomicU64::new(start),
            free: std::array::from_fn(|_| Mutex::new(Vec::new())),
            in_use: AtomicU64::new(0),
        }
    }

    /// Bytes handed out and not freed (chunk sizes).
    pub fn bytes_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Bytes of the heap.
    pub fn capacity(&self) -> u64 {
        self.end - self.start
    }

    /// A chunk of at least `bytes`, zeroed if `zeroed`; `None` when the heap is full.
    pub fn alloc(&self, bytes: u64, zeroed: bool) -> Option<u64> {
        let (class, size) = class_of(bytes);
        if class >= CLASS_COUNT {
            return None;
        }
        let reused = self.free[class]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let chunk = match reused {
            Some(c) => c,
            None => {
                let mut at = self.bump.load(Ordering::Relaxed);
                loop {
                    let next = at.checked_add(size).filter(|&n| n <= self.end)?;
                    match self.bump.compare_exchange_weak(
                        at,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break at,
                        Err(now) => at = now,
                    }
                }
            }
        };
        self.in_use.fetch_add(size, Ordering::Relaxed);
        self.atomic(chunk).store(size, Ordering::Relaxed);
        let payload = chunk + PREFIX_BYTES;
        if zeroed {
            self.zero(payload, size - PREFIX_BYTES);
        }
        Some(payload)
    }

    /// Returns a chunk (by its payload offset) to its free list.
    pub fn free(&self, payload: u64) {
        let chunk = payload - PREFIX_BYTES;
        let size = self.atomic(chunk).load(Ordering::Relaxed);
        debug_assert!(size.is_multiple_of(STEP_BYTES) && chunk + size <= self.end);
        let (class, _) = class_of(size - PREFIX_BYTES);
        self.in_use.fetch_sub(size, Ordering::Relaxed);
        self.free[class]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(chunk);
    }

    #[inline]
    fn check(&self, off: u64, len: u64) {
        debug_assert!(
            off >= self.start && off + len <= self.end,
            "offset {off} (+{len}) outside the heap {}..{}",
            self.start,
            self.end
        );
    }

    /// The target word at `off` (8-aligned): in the heap, or a client word of the pool
    /// (the root word) before it.
    #[inline]
    pub fn word(&self, off: u64) -> &Word {
        debug_assert!(off + 8 <= self.end, "word at {off} past the region");
        debug_assert!(off.is_multiple_of(8));
        // SAFETY: in bounds and 8-aligned (checked in debug builds, guaranteed by the node
        // layout); `Word` is a transparent `AtomicU64`, which has `u64`'s size and alignment,
        // and the region is only accessed atomically or through disjoint byte ranges.
        unsafe { &*(self.base.add(off as usize) as *const Word) }
    }

    /// A word that is never a PMwCAS target (a node's first header word, a chunk prefix).
    #[inline]
    pub fn atomic(&self, off: u64) -> &AtomicU64 {
        self.check(off, 8);
        debug_assert!(off.is_multiple_of(8));
        // SAFETY: as in `word`.
        unsafe { &*(self.base.add(off as usize) as *const AtomicU64) }
    }

    /// Record bytes that no thread writes while they are read (module doc).
    #[inline]
    pub fn bytes(&self, off: u64, len: usize) -> &[u8] {
        self.check(off, len as u64);
        // SAFETY: in bounds; by the module invariant nothing writes these bytes while the
        // returned slice lives (they are immutable once visible, and reused after the epoch).
        unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len) }
    }

    /// Copies `src` into space this thread reserved or allocated and no one reads yet.
    #[inline]
    pub fn write(&self, off: u64, src: &[u8]) {
        self.check(off, src.len() as u64);
        // SAFETY: in bounds; the destination is reserved by the caller (module doc), so no
        // other thread reads or writes it now; `src` is not region memory of that range.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off as usize), src.len())
        }
    }

    /// Zeroes space this thread reserved or allocated.
    #[inline]
    pub fn zero(&self, off: u64, len: u64) {
        self.check(off, len);
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(self.base.add(off as usize), 0, len as usize) }
    }
}

/// The pool's `FREE-ONE` callback: frees nodes and value blocks into the heap (§6.3). The
/// heap is set right after the pool is created (it lies in the pool's region); nothing is
/// freed before that.
pub struct HeapRecycler(pub std::sync::Arc<std::sync::OnceLock<std::sync::Arc<NodeHeap>>>);

impl Recycle for HeapRecycler {
    fn free(&self, value: u64) {
        if let Some(heap) = self.0.get() {
            heap.free(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_fit_and_round_trip() {
        assert_eq!(class_of(1024), (16, 1088));
        assert_eq!(class_of(1), (0, 64));
        assert_eq!(class_of(4088), (63, 4096));
        assert_eq!(class_of(4089), (64, 8192));
        assert_eq!(class_of((1 << 20) + 8), (FINE_CLASSES + 8, 1 << 21));
        for bytes in [1u64, 56, 57, 1000, 4088, 4089, 100_000, 1 << 30] {
            let (class, size) = class_of(bytes);
            assert!(size >= bytes + PREFIX_BYTES && class < CLASS_COUNT);
            assert_eq!(class_of(size - PREFIX_BYTES), (class, size), "{bytes}");
        }
    }
}
