//! The node heap and its allocator (BzTree §3.1, §6.1, §6.3): nodes and value blocks live in
//! the user area of the PMwCAS pool's region, so every word a PMwCAS changes is a target word
//! of the pool, and every reference is a byte offset into the region, never an address (the
//! mapping moves between runs). One code path serves both modes: in volatile mode (`none`
//! persist) the flushes do nothing.
//!
//! Chunks: `[size | FREE: u64][freed by: u64][payload]`, 64-aligned; allocation hands out the
//! payload's offset. Sizes are multiples of 64 bytes up to 4 KiB (a 1 KB node takes 1088
//! bytes), powers of two above. A free chunk's first payload word links it to the next free
//! chunk of its size class.
//!
//! Allocator state (in the pool's client header, docs/FORMAT.md): the bump pointer, one free
//! list head per size class, and [`LISTS`] lists of [`LIST_ENTRIES`] unactivated-chunk
//! entries. The three stages of §6.1 ("a three-stage allocator [31]"):
//! - allocate: the chunk's offset is put in an entry of the calling thread's list (persisted),
//!   then the chunk is marked allocated, then it leaves its free list or the bump pointer
//!   moves (each step persisted before the next). Recovery frees every chunk left in a list.
//! - activate ([`NodeHeap::activated`]): after the tree persisted the chunk's offset into a
//!   descriptor slot (`ReserveEntry`/`set_new`, §6.3) or into the root word, the entry is
//!   cleared: the chunk is now the descriptor's (its `FREE-ONE` policy frees it if the PMwCAS
//!   fails, recovery does if it never ran), and once installed, the tree's.
//! - free: pushed on its class's list; the chunk's header records which descriptor
//!   generation freed it.
//!
//! Choices the paper leaves open (it assumes nvm_malloc [31]):
//! - Lists of unactivated chunks are per thread (thread number modulo [`LISTS`], the next list
//!   when full), so recovery reads `LISTS * LIST_ENTRIES` words, whatever the heap's size. No
//!   heap walk and no tree walk: the free lists are persistent.
//! - Each size class's list and the bump pointer are changed under a mutex (allocation is off
//!   the record path: SMOs and large values only), so at most one push or pop per class is in
//!   flight at a crash, always at the head. It is completed by the first use of the class
//!   after the open, under its lock and before anything else touches the list: a head not
//!   marked free is marked free (an interrupted push, or a pop that marked the chunk but did
//!   not move the head; that chunk is also in a thread list, whose recovery then finds it
//!   free). Lazily, not in recovery: reading each head's chunk costs a page fault in a
//!   freshly mapped file, about as long as the rest of recovery for a few dozen classes
//!   (issue 16's 145 us bar); the first use of a class is recovery's own list frees, the
//!   pool's policy repeats, an allocation, a free or an audit, and until then nothing reads
//!   the list or its head's header.
//! - Frees are idempotent: a chunk already free is left alone, and one freed by descriptor
//!   generation `g` (its header's "freed by" word) is not freed again by `g`. Recovery repeats
//!   the policies of every descriptor not durably free, and in the window between a release's
//!   policies and its durable `Free` status the chunk may have been allocated again by another
//!   thread; the tag tells that repeat apart from a real free (forest-pmwcas `Recycle::free_by`).
//! - Bytes in use are counted in memory; after a reopen the count starts at the bump pointer's
//!   reach (chunks on free lists included), as counting them would walk the lists.
//! - A chunk offset read from the file is checked (inside the heap, 64-aligned, a size class)
//!   before it is used; recovery reports a bad one as a corrupt file.
//!
//! This is the crate's only module with `unsafe`. Invariants:
//! - `base` is the start of the pool's region, which outlives the heap's users: the tree owns
//!   the pool and drops the heap with it; the pool runs no release after it is dropped.
//! - Offsets handed to the accessors lie inside the region (checked in debug builds), 8-aligned
//!   for words.
//! - Bytes read through [`NodeHeap::bytes`] are not written while the reader holds them: record
//!   bytes are written only into reserved space before the PMwCAS that makes them visible (or
//!   into a node no other thread reaches yet), and chunks are reused only after the epoch.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use forest_pmwcas::{Recycle, Word};

/// Chunks up to this size come in steps of [`STEP_BYTES`]; larger ones in powers of two.
const FINE_BYTES_MAX: u64 = 4096;
/// Step of the fine size classes (a cache line).
const STEP_BYTES: u64 = 64;
/// Fine classes, then powers of two from 8 KiB to 2^34 bytes.
const FINE_CLASSES: usize = (FINE_BYTES_MAX / STEP_BYTES) as usize;
pub(crate) const CLASS_COUNT: usize = FINE_CLASSES + 22;
/// Bytes of a chunk's prefix: size and state, then the tag of the descriptor that freed it.
pub(crate) const PREFIX_BYTES: u64 = 16;
/// Header bit: the chunk is free.
const FREE_BIT: u64 = 1;
/// Lists of unactivated chunks (one per thread, by thread number modulo this).
pub const LISTS: usize = 64;
/// Entries of one list: more than the chunks one operation holds unactivated (an SMO names at
/// most a descriptor's entries of new nodes, plus a value block).
pub const LIST_ENTRIES: usize = 16;
/// Allocator state words: bump, heads, padding to a line, then the lists.
const HEADS_WORD: usize = 1;
const LISTS_WORD: usize = (HEADS_WORD + CLASS_COUNT).div_ceil(8) * 8;
/// Words of allocator state.
pub(crate) const STATE_WORDS: usize = LISTS_WORD + LISTS * LIST_ENTRIES;

/// Persists a byte range of the region (flush and fence; nothing in volatile mode).
pub(crate) type Flush<'a> = &'a dyn Fn(Range<usize>);

/// What allocator recovery did (§6.3 "the allocator first runs its recovery algorithm").
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AllocatorRecovery {
    /// Chunks allocated but never activated, freed.
    pub unactivated_freed: usize,
    /// List entries that named a chunk the crash left unallocated (past the bump pointer, or
    /// already free).
    pub entries_dropped: usize,
    /// Free-list heads whose push or pop the crash interrupted, completed by recovery's own
    /// frees (the other heads are settled at their class's first use, module doc).
    pub heads_completed: usize,
}

/// The heap over the region's user area (module doc).
pub struct NodeHeap {
    base: *mut u8,
    start: u64,
    end: u64,
    /// Byte offset of the allocator state.
    state: u64,
    class_locks: [Mutex<()>; CLASS_COUNT],
    /// Whether the class's head was settled in this run (module doc); read and set under the
    /// class's lock.
    heads_settled: [AtomicBool; CLASS_COUNT],
    /// Heads settled that a crash had left unmarked.
    heads_completed: AtomicUsize,
    bump_lock: Mutex<()>,
    in_use: AtomicU64,
    /// Frees skipped because the chunk was already free or freed by the same descriptor
    /// generation (recovery's repeats, module doc).
    repeats_skipped: AtomicU64,
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

/// The class of a chunk of exactly `size` bytes, if it is one.
fn class_of_size(size: u64) -> Option<usize> {
    if size < STEP_BYTES || !size.is_multiple_of(STEP_BYTES) {
        return None;
    }
    let (class, s) = class_of(size - PREFIX_BYTES);
    (s == size && class < CLASS_COUNT).then_some(class)
}

fn thread_number() -> usize {
    thread_local! {
        static NUMBER: usize = {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            NEXT.fetch_add(1, Ordering::Relaxed)
        };
    }
    NUMBER.try_with(|n| *n).unwrap_or(0)
}

impl NodeHeap {
    /// A heap over bytes `start..end` of the region at `base`, with its allocator state at
    /// byte `state` (`STATE_WORDS` words before `start`). Call [`NodeHeap::format`] on a new
    /// region or [`NodeHeap::recover`] on an existing one before use.
    ///
    /// # Safety
    /// `base` must point to a region of at least `end` bytes that stays mapped, and is
    /// accessed by others only atomically, for as long as the heap is used (module doc).
    pub unsafe fn new(base: *mut u8, start: u64, end: u64, state: u64) -> Self {
        debug_assert!(start.is_multiple_of(64) && state.is_multiple_of(64));
        debug_assert!(state + (STATE_WORDS * 8) as u64 <= start);
        Self {
            base,
            start,
            end,
            state,
            class_locks: std::array::from_fn(|_| Mutex::new(())),
            heads_settled: std::array::from_fn(|_| AtomicBool::new(false)),
            heads_completed: AtomicUsize::new(0),
            bump_lock: Mutex::new(()),
            in_use: AtomicU64::new(0),
            repeats_skipped: AtomicU64::new(0),
        }
    }

    /// Byte offset of allocator state word `i`.
    fn state_off(&self, i: usize) -> u64 {
        self.state + (i * 8) as u64
    }

    fn state_word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < STATE_WORDS);
        self.raw(self.state_off(i))
    }

    fn head(&self, class: usize) -> &AtomicU64 {
        self.state_word(HEADS_WORD + class)
    }

    fn entry(&self, list: usize, i: usize) -> &AtomicU64 {
        self.state_word(LISTS_WORD + list * LIST_ENTRIES + i)
    }

    fn persist_word(&self, off: u64, flush: Flush<'_>) {
        flush(off as usize..off as usize + 8);
    }

    /// A new allocator: empty lists, the bump pointer at the heap's start.
    pub(crate) fn format(&self, flush: Flush<'_>) {
        for i in 0..STATE_WORDS {
            self.state_word(i).store(0, Ordering::Relaxed);
        }
        self.state_word(0).store(self.start, Ordering::Relaxed);
        flush(self.state as usize..self.state_off(STATE_WORDS) as usize);
    }

    /// Whether `chunk` may be a chunk of this heap below the bump pointer.
    fn valid_chunk(&self, chunk: u64) -> bool {
        chunk >= self.start
            && chunk.is_multiple_of(STEP_BYTES)
            && chunk < self.state_word(0).load(Ordering::Relaxed)
            && chunk + PREFIX_BYTES + 8 <= self.end
    }

    /// Allocator recovery (§6.3, before the pool's): completes the head of each free list,
    /// then frees every chunk left in an unactivated list. Single-threaded, before any use.
    pub(crate) fn recover(&self, flush: Flush<'_>) -> Result<AllocatorRecovery, String> {
        let mut report = AllocatorRecovery::default();
        let bump = self.state_word(0).load(Ordering::Relaxed);
        if bump < self.start || bump > self.end || !bump.is_multiple_of(STEP_BYTES) {
            return Err(format!(
                "allocator bump pointer {bump} is outside the heap {}..{}",
                self.start, self.end
            ));
        }
        // Heads are settled at their class's first use (module doc); here only their offsets
        // are checked, which reads no chunk.
        for class in 0..CLASS_COUNT {
            let head = self.head(class).load(Ordering::Relaxed);
            if head != 0 && !self.valid_chunk(head) {
                return Err(format!(
                    "free list {class} starts at {head}, which is not a chunk of this heap"
                ));
            }
        }
        for list in 0..LISTS {
            for i in 0..LIST_ENTRIES {
                let e = self.entry(list, i);
                let chunk = e.load(Ordering::Relaxed);
                if chunk == 0 {
                    continue;
                }
                if chunk >= bump {
                    report.entries_dropped += 1;
                } else if !self.valid_chunk(chunk)
                    || class_of_size(self.header(chunk) & !FREE_BIT).is_none()
                {
                    return Err(format!(
                        "unactivated list {list} entry {i} names {chunk}, not a chunk"
                    ));
                } else if self.free_chunk(chunk, 0, false, flush) {
                    report.unactivated_freed += 1;
                } else {
                    report.entries_dropped += 1;
                }
                e.store(0, Ordering::Relaxed);
                self.persist_word(self.entry_off(list, i), flush);
            }
        }
        self.in_use.store(bump - self.start, Ordering::Relaxed);
        report.heads_completed = self.heads_completed.load(Ordering::Relaxed);
        Ok(report)
    }

    fn entry_off(&self, list: usize, i: usize) -> u64 {
        self.state_off(LISTS_WORD + list * LIST_ENTRIES + i)
    }

    fn header(&self, chunk: u64) -> u64 {
        self.raw(chunk).load(Ordering::Relaxed)
    }

    /// Completes an interrupted push or pop at the head of `class` once per run, before
    /// anything else uses the list (module doc). The caller holds the class's lock.
    fn settle_head(&self, class: usize, flush: Flush<'_>) {
        if self.heads_settled[class].load(Ordering::Relaxed) {
            return;
        }
        let head = self.head(class).load(Ordering::Relaxed);
        if head != 0 {
            let header = self.header(head);
            debug_assert_eq!(
                class_of_size(header & !FREE_BIT),
                Some(class),
                "free list {class} starts at {head} with header {header:#x}"
            );
            if header & FREE_BIT == 0 && class_of_size(header) == Some(class) {
                self.raw(head).store(header | FREE_BIT, Ordering::Relaxed);
                self.persist_word(head, flush);
                self.heads_completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.heads_settled[class].store(true, Ordering::Relaxed);
    }

    /// Settles every class's head (for audits, which read the lists and the headers).
    pub(crate) fn settle_heads(&self, flush: Flush<'_>) {
        for class in 0..CLASS_COUNT {
            let _class = self.class_locks[class]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.settle_head(class, flush);
        }
    }

    /// Bytes handed out and not freed (chunk sizes; module doc for a reopened heap).
    pub fn bytes_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Frees skipped as repeats so far: the chunk was free, or freed by the same descriptor
    /// generation and possibly allocated again since.
    pub fn repeats_skipped(&self) -> u64 {
        self.repeats_skipped.load(Ordering::Relaxed)
    }

    /// Bytes of the heap.
    pub fn capacity(&self) -> u64 {
        self.end - self.start
    }

    /// Puts `chunk` in a free entry of this thread's list (or the next with room), persisted.
    fn claim_entry(&self, chunk: u64, flush: Flush<'_>) -> bool {
        let home = thread_number() % LISTS;
        for k in 0..LISTS {
            let list = (home + k) % LISTS;
            for i in 0..LIST_ENTRIES {
                let e = self.entry(list, i);
                if e.load(Ordering::Relaxed) == 0
                    && e.compare_exchange(0, chunk, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.persist_word(self.entry_off(list, i), flush);
                    return true;
                }
            }
        }
        false
    }

    /// Clears the list entry holding `chunk`, persisted; false if none holds it.
    fn release_entry(&self, chunk: u64, flush: Flush<'_>) -> bool {
        let home = thread_number() % LISTS;
        for k in 0..LISTS {
            let list = (home + k) % LISTS;
            for i in 0..LIST_ENTRIES {
                let e = self.entry(list, i);
                if e.load(Ordering::Relaxed) == chunk
                    && e.compare_exchange(chunk, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.persist_word(self.entry_off(list, i), flush);
                    return true;
                }
            }
        }
        false
    }

    /// Allocates (§6.1 stage 1) a chunk of at least `bytes`, zeroed if `zeroed`; it stays in
    /// this thread's unactivated list until [`NodeHeap::activated`] or [`NodeHeap::free`].
    /// `None` when the heap (or every unactivated list) is full.
    pub(crate) fn alloc(&self, bytes: u64, zeroed: bool, flush: Flush<'_>) -> Option<u64> {
        let (class, size) = class_of(bytes);
        if class >= CLASS_COUNT {
            return None;
        }
        let reused = {
            let _class = self.class_locks[class]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.settle_head(class, flush);
            let chunk = self.head(class).load(Ordering::Relaxed);
            if chunk != 0 {
                if !self.claim_entry(chunk, flush) {
                    return None;
                }
                // Marked allocated before it leaves the list: a crash between leaves it the
                // head, which recovery marks free again (module doc).
                self.raw(chunk).store(size, Ordering::Relaxed);
                self.persist_word(chunk, flush);
                let next = self.raw(chunk + PREFIX_BYTES).load(Ordering::Relaxed);
                self.head(class).store(next, Ordering::Relaxed);
                self.persist_word(self.state_off(HEADS_WORD + class), flush);
                Some(chunk)
            } else {
                None
            }
        };
        let chunk = match reused {
            Some(c) => c,
            None => {
                let _bump = self
                    .bump_lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let at = self.state_word(0).load(Ordering::Relaxed);
                let next = at.checked_add(size).filter(|&n| n <= self.end)?;
                if !self.claim_entry(at, flush) {
                    return None;
                }
                self.raw(at).store(size, Ordering::Relaxed);
                self.raw(at + 8).store(0, Ordering::Relaxed);
                flush(at as usize..(at + PREFIX_BYTES) as usize);
                self.state_word(0).store(next, Ordering::Relaxed);
                self.persist_word(self.state_off(0), flush);
                at
            }
        };
        self.in_use.fetch_add(size, Ordering::Relaxed);
        let payload = chunk + PREFIX_BYTES;
        if zeroed {
            self.zero(payload, size - PREFIX_BYTES);
        }
        Some(payload)
    }

    /// §6.1 stage 2: the chunk's offset is durably held elsewhere (a descriptor slot or the
    /// root word); it leaves the unactivated list.
    pub(crate) fn activated(&self, payload: u64, flush: Flush<'_>) {
        let found = self.release_entry(payload - PREFIX_BYTES, flush);
        debug_assert!(found, "chunk {payload} activated twice or never allocated");
    }

    /// Frees an unactivated chunk this thread allocated (nothing else ever named it).
    pub(crate) fn free(&self, payload: u64, flush: Flush<'_>) {
        self.free_chunk(payload - PREFIX_BYTES, 0, true, flush);
    }

    /// Pushes `chunk` on its free list unless it is free already or `by` (nonzero) freed it
    /// before (module doc); true if it was pushed. With `unlist`, also clears its unactivated
    /// entry, under the class lock: no other thread can allocate the chunk (and list it
    /// again) before its old entry is gone.
    fn free_chunk(&self, chunk: u64, by: u64, unlist: bool, flush: Flush<'_>) -> bool {
        if !self.valid_chunk(chunk) {
            debug_assert!(false, "freeing {chunk}, not a chunk of this heap");
            return false;
        }
        let header = self.header(chunk);
        let Some(class) = class_of_size(header & !FREE_BIT) else {
            debug_assert!(false, "freeing {chunk} with header {header:#x}");
            return false;
        };
        let _class = self.class_locks[class]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // First: `chunk` may be this head, left unmarked by a crash (a repeated free).
        self.settle_head(class, flush);
        let header = self.header(chunk);
        if header & FREE_BIT != 0 || (by != 0 && self.raw(chunk + 8).load(Ordering::Relaxed) == by)
        {
            self.repeats_skipped.fetch_add(1, Ordering::Relaxed);
            if unlist {
                self.release_entry(chunk, flush);
            }
            return false;
        }
        // Link, publish as the head, then tag and mark: a crash before the head is published
        // leaves the chunk unlisted, unmarked and untagged, so its owner's recovery frees it
        // again; after, it is listed and the head repair marks it (module doc).
        let head = self.head(class).load(Ordering::Relaxed);
        self.raw(chunk + PREFIX_BYTES)
            .store(head, Ordering::Relaxed);
        self.persist_word(chunk + PREFIX_BYTES, flush);
        self.head(class).store(chunk, Ordering::Relaxed);
        self.persist_word(self.state_off(HEADS_WORD + class), flush);
        if by != 0 {
            self.raw(chunk + 8).store(by, Ordering::Relaxed);
            self.persist_word(chunk + 8, flush);
        }
        self.raw(chunk).store(header | FREE_BIT, Ordering::Relaxed);
        self.persist_word(chunk, flush);
        if unlist {
            self.release_entry(chunk, flush);
        }
        self.in_use.fetch_sub(header, Ordering::Relaxed);
        true
    }

    /// Every chunk below the bump pointer, in address order: (payload offset, chunk size,
    /// free). For audits of a quiescent heap (tests): chunks are laid end to end.
    /// An error if a header on the way is not a chunk's or the last chunk passes the bump
    /// pointer.
    pub fn chunks(&self) -> Result<Vec<(u64, u64, bool)>, String> {
        let bump = self.state_word(0).load(Ordering::Relaxed);
        let mut out = Vec::new();
        let mut at = self.start;
        while at < bump {
            let header = self.header(at);
            let size = header & !FREE_BIT;
            if class_of_size(size).is_none() || at + size > bump {
                return Err(format!(
                    "no chunk at {at} (header {header:#x}, bump {bump})"
                ));
            }
            out.push((at + PREFIX_BYTES, size, header & FREE_BIT != 0));
            at += size;
        }
        Ok(out)
    }

    /// Payload offsets on the free lists and in unactivated lists (audits, quiescent).
    pub fn listed(&self) -> (Vec<u64>, Vec<u64>) {
        let mut free = Vec::new();
        for class in 0..CLASS_COUNT {
            let mut at = self.head(class).load(Ordering::Relaxed);
            while at != 0 && free.len() < 1 << 26 {
                free.push(at + PREFIX_BYTES);
                at = self.raw(at + PREFIX_BYTES).load(Ordering::Relaxed);
            }
        }
        let unactivated = (0..LISTS * LIST_ENTRIES)
            .map(|i| self.state_word(LISTS_WORD + i).load(Ordering::Relaxed))
            .filter(|&c| c != 0)
            .map(|c| c + PREFIX_BYTES)
            .collect();
        (free, unactivated)
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

    /// Any word of the region below the heap's end (allocator state, chunk headers).
    #[inline]
    fn raw(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.end && off.is_multiple_of(8));
        // SAFETY: in bounds and 8-aligned (checked in debug builds, guaranteed by the
        // layout); `AtomicU64` has `u64`'s size and alignment, and the region is only accessed
        // atomically or through disjoint byte ranges (module invariants).
        unsafe { &*(self.base.add(off as usize) as *const AtomicU64) }
    }

    /// A client word of the pool that is never a PMwCAS target (the tree's header, `file.rs`).
    #[inline]
    pub(crate) fn atomic_client(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off < self.state);
        self.raw(off)
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

    /// A word that is never a PMwCAS target (a node's first header word, a value's length).
    #[inline]
    pub fn atomic(&self, off: u64) -> &AtomicU64 {
        self.check(off, 8);
        self.raw(off)
    }

    /// Record bytes that no thread writes while they are read (module doc).
    #[inline]
    pub fn bytes(&self, off: u64, len: usize) -> &[u8] {
        self.check(off, len as u64);
        // SAFETY: in bounds; by the module invariant nothing writes these bytes while the
        // returned slice lives (they are immutable once visible, and reused after the epoch).
        unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len) }
    }

    /// Asks the CPU to start loading the cache lines of `len` bytes at `off` (a hint: it
    /// never faults and reads nothing in the language's sense, so a stale offset is harmless).
    #[inline]
    pub fn prefetch(&self, off: u64, len: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let end = (off + len).min(self.end);
            let mut line = off & !63;
            while line < end {
                // SAFETY: `_mm_prefetch` only hints the cache and cannot fault; the address
                // is inside the region (clamped to its end). SSE is baseline on x86_64.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        self.base.add(line as usize).cast::<i8>(),
                    )
                };
                line += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (off, len);
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

/// The pool's `FREE-ONE` callback (§6.3): frees nodes and value blocks into the heap, tagged
/// with the freeing descriptor's generation and persisted through the pool.
pub struct HeapRecycler(pub std::sync::Arc<NodeHeap>);

impl Recycle for HeapRecycler {
    fn free(&self, value: u64) {
        self.0.free_chunk(value - PREFIX_BYTES, 0, false, &|_| {});
    }

    fn free_by(&self, value: u64, by: u64, persist: &dyn Fn(Range<usize>)) {
        self.0.free_chunk(value - PREFIX_BYTES, by, false, persist);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_fit_and_round_trip() {
        assert_eq!(class_of(1024), (16, 1088));
        assert_eq!(class_of(1), (0, 64));
        assert_eq!(class_of(4080), (63, 4096));
        assert_eq!(class_of(4081), (64, 8192));
        assert_eq!(class_of((1 << 20) + 8), (FINE_CLASSES + 8, 1 << 21));
        for bytes in [1u64, 48, 49, 1000, 4080, 4081, 100_000, 1 << 30] {
            let (class, size) = class_of(bytes);
            assert!(size >= bytes + PREFIX_BYTES && class < CLASS_COUNT);
            assert_eq!(class_of(size - PREFIX_BYTES), (class, size), "{bytes}");
            assert_eq!(class_of_size(size), Some(class), "{bytes}");
        }
        assert_eq!(class_of_size(100), None);
        assert_eq!(class_of_size(0), None);
    }

    /// A heap over `region` as a tree file lays it out: state at byte 64, then the heap.
    fn heap_over(region: &forest_pmwcas::Region) -> NodeHeap {
        let state = 64;
        let start = (state + (STATE_WORDS * 8) as u64).div_ceil(64) * 64;
        assert!(start + (256 << 10) <= region.len_bytes() as u64);
        // SAFETY: the region is mapped for the heap's whole range (asserted) and outlives the
        // heap; only this test's heaps touch it, one at a time.
        unsafe { NodeHeap::new(region.base_ptr(), start, start + (256 << 10), state) }
    }

    fn is_marked_free(heap: &NodeHeap, payload: u64) -> bool {
        heap.header(payload - PREFIX_BYTES) & FREE_BIT != 0
    }

    // Goal: a free-list head that a crash left unmarked (an interrupted pop, or a push cut
    // after the head was published) is completed before its list is used again, now that it
    // happens at the class's first use rather than in recovery (module doc). Method: build
    // those states by hand, "reopen" with a new heap over the same bytes, then recover and
    // use the class; the lists hold each chunk once, marked free, and never a cycle.
    #[test]
    fn a_head_left_unmarked_is_settled_before_its_list_is_used() {
        let none: Flush<'_> = &|_| {};
        let region = forest_pmwcas::Region::heap(1 << 20);

        // An interrupted pop: `a` is the head, claimed by a thread's list and marked
        // allocated, but the head did not move.
        let heap = heap_over(&region);
        heap.format(none);
        let a = heap.alloc(100, false, none).unwrap();
        heap.free(a, none);
        assert_eq!(heap.listed().0, vec![a]);
        let chunk = a - PREFIX_BYTES;
        assert!(heap.claim_entry(chunk, none));
        heap.raw(chunk)
            .store(heap.header(chunk) & !FREE_BIT, Ordering::Relaxed);
        let heap = heap_over(&region);
        let report = heap.recover(none).unwrap();
        assert_eq!((report.heads_completed, report.entries_dropped), (1, 1));
        assert_eq!(heap.listed(), (vec![a], vec![]));
        assert!(is_marked_free(&heap, a));
        assert_eq!(heap.alloc(100, false, none), Some(a), "popped once");
        assert_ne!(heap.alloc(100, false, none), Some(a));

        // A push by descriptor tag 7 cut after the head and the tag were stored, before the
        // mark; then another free of the class comes first, then the policy's repeat.
        let heap = heap_over(&region);
        heap.format(none);
        let a = heap.alloc(100, false, none).unwrap();
        let b = heap.alloc(100, false, none).unwrap();
        heap.activated(a, none);
        heap.activated(b, none);
        let (chunk, class) = (a - PREFIX_BYTES, class_of(100).0);
        heap.raw(chunk + PREFIX_BYTES).store(0, Ordering::Relaxed);
        heap.head(class).store(chunk, Ordering::Relaxed);
        heap.raw(chunk + 8).store(7, Ordering::Relaxed);
        let heap = heap_over(&region);
        let report = heap.recover(none).unwrap();
        assert_eq!(
            report.heads_completed, 0,
            "not settled by recovery: no list entry"
        );
        assert!(
            !is_marked_free(&heap, a),
            "untouched until the class is used"
        );
        assert!(heap.free_chunk(b - PREFIX_BYTES, 9, false, none));
        assert!(is_marked_free(&heap, a), "settled before b was pushed");
        assert!(
            !heap.free_chunk(chunk, 7, false, none),
            "the repeat is skipped"
        );
        assert_eq!(heap.listed(), (vec![b, a], vec![]));
        assert!(is_marked_free(&heap, b));
        let chunks = heap.chunks().unwrap();
        assert!(chunks.iter().all(|&(_, _, free)| free), "{chunks:?}");
    }
}
