//! The descriptor pool (BzTree §2.3 "descriptors are pooled and eventually reused", §2.3.2
//! "pooled in a memory location known to recovery", §6.3): a fixed array of descriptors at a
//! known place in the region, split into per-thread partitions of free descriptors, each a
//! lock-free stack; descriptors come back through epochs (§2.2): one whose policies free
//! memory through the pool's epoch (`reclaim.rs`), any other through the reuse domain, a
//! private epoch pinned only by threads helping a descriptor (`reuse.rs`), so that callers
//! pinned across a whole operation do not hold descriptors back.
//!
//! After microsoft/pmwcas `DescriptorPool` (`src/mwcas/mwcas.h`): a partition per thread,
//! descriptors handed out from the caller's partition and returned to their own. Choices the
//! paper leaves open:
//! - A thread's partition is its thread number modulo the partition count; an empty partition
//!   takes from the others before waiting, so threads beyond the partition count still work.
//! - Exhaustion is a bounded wait ([`ALLOCATE_WAIT_ROUNDS_MAX`] rounds of releasing every
//!   reuse-domain descriptor whose epoch has passed, flushing this thread's deferred releases
//!   and yielding), counted in `pool_waits`, then [`Error::PoolExhausted`]. A longer wait would
//!   not help for descriptors that free memory: the waiting thread is pinned, and those
//!   retired in its epoch come back only after it unpins (the reference library's
//!   `AllocateDescriptor` spins here unboundedly for the same reason). The caller's remedy is to
//!   drop its guard, pin again and retry its operation. Since the reuse domain it needs
//!   descriptors that free memory (SMOs) held back by pinned threads, or a thread descheduled
//!   while helping.
//! - The free lists are volatile. A partition's free list is a stack of the descriptors it took
//!   back, above a cursor over the ones not yet handed out in this run, in index order: the
//!   stack first, then the cursor. At open (after recovery freed every descriptor) the stack
//!   is empty and the cursor at the partition's first descriptor, so opening costs nothing
//!   per descriptor, and a run hands out the same descriptors a list of all of them, lowest on
//!   top, would.
//! - A released descriptor keeps its generation; allocation advances it, so references made
//!   before the reuse never match (`word.rs`).
//! - High-water marks (issue 16's recovery bar, not in the paper or the reference library,
//!   whose recovery scans the whole pool): each partition has a durable mark in the region,
//!   the number of its descriptors, counted from its first, that may ever have left the free
//!   list. Recovery scans only those (`recovery.rs`), so its time follows the descriptors
//!   in use, not the pool's size. A partition takes back only its own descriptors and its
//!   cursor moves in index order, so the descriptors ever handed out in a run are a prefix of
//!   the partition and the mark moves once per new descriptor: before a descriptor above the
//!   mark is first used, the mark is raised to cover it, flushed and fenced
//!   (`Inner::cover`). After warm-up every descriptor handed out is below the mark, and the
//!   check is one load of a line the allocation touches anyway. Marks never go down (a run
//!   that used many descriptors keeps later recoveries scanning them); lowering them at open,
//!   after recovery freed everything below them, would be safe but gains little once a
//!   workload has warmed up. Stopping a scan at the first never-used descriptor instead would
//!   be unsafe: descriptor k + 1 may be in flight with k already free again.
//!
//! Invariants:
//! - A descriptor is in at most one free list, and only with state `Free`: on its partition's
//!   stack, or at or above its partition's cursor (never handed out in this run).
//! - A descriptor's release runs once, after its owner retired it: under a guard of the pool's
//!   epoch if its policies free memory, else in the reuse domain.
//! - A descriptor whose status is not `Free` (in memory, so possibly durable) lies below its
//!   partition's durable mark, and the volatile copy of a mark (`Partition::mark`) never
//!   exceeds the durable one.
//! - Dropping the pool waits (bounded) for pending releases, then marks it closed: a release
//!   that runs later does nothing, and the decided descriptor it leaves is recovered at the
//!   next open, as after a crash.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as StdOrdering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::error::Error;
use crate::layout::{self, Geometry, State, DESCRIPTOR_WORDS, HEADER_WORDS};
use crate::persist::Persist;
use crate::reclaim::{Domain, Guard};
use crate::region::{Region, WORD_BYTES};
use crate::reuse::{ReuseDomain, ReusePin};
use crate::stats::{Counters, PmwcasStats};
use crate::sync::atomic::{fence, AtomicU64, Ordering};
use crate::word::{Word, DESCRIPTORS_MAX, TAG_MASK};

/// Wait rounds of an allocation that finds every partition empty.
/// Short: the waiting thread is pinned, so garbage retired in its own epoch cannot come back
/// until it unpins; the caller's remedy is to drop its guard and retry (module doc).
pub const ALLOCATE_WAIT_ROUNDS_MAX: usize = if cfg!(any(loom, shuttle)) { 4 } else { 1_000 };
/// How long `Pool::finish_recovery` waits for the releases of what recovery left: only a
/// thread pinned in the pool's epoch throughout holds them back.
const RECOVERED_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// Bounded wait of `Drop` for pending releases, in rounds of flush and yield.
const CLOSE_WAIT_ROUNDS_MAX: usize = if cfg!(any(loom, shuttle)) { 1 } else { 10_000 };
/// Most partitions (more would only spread descriptors thinner).
pub const PARTITIONS_MAX: usize = 1024;

/// Frees memory named by a descriptor's `FREE-ONE` entries (§6.3): the old value after a
/// success, the new value after a failure. Called after the epoch has passed, and again by
/// recovery for every descriptor in flight at a crash, so in persistent mode it must accept a
/// value it has already freed (the reference library asks the same of its allocator).
pub trait Recycle: Send + Sync {
    /// Frees `value` (never zero: zero means "no memory").
    fn free(&self, value: u64);

    /// Frees `value` on behalf of the descriptor generation `by` (nonzero, unique to one
    /// generation of one descriptor, [`descriptor_tag`]); `persist` flushes and fences bytes
    /// of the pool's region (nothing in volatile mode). A persistent allocator records `by`
    /// with the free and persists it before returning, so the repeat of this free by recovery
    /// (the crash fell between the policies and the durable `Free` status) is recognised even
    /// if the memory was allocated again meanwhile. The default forgets `by`.
    fn free_by(&self, value: u64, by: u64, persist: &dyn Fn(std::ops::Range<usize>)) {
        let _ = (by, persist);
        self.free(value);
    }
}

/// The tag [`Recycle::free_by`] receives for generation `gen` of descriptor `index`: the
/// descriptor's reference word, nonzero and unique per generation.
pub fn descriptor_tag(index: u32, gen: u64) -> u64 {
    crate::word::descriptor_ref(index, gen)
}

/// A recycler that frees nothing (the default callback for words that are not pointers).
#[derive(Debug, Default)]
pub struct NoRecycle;

impl Recycle for NoRecycle {
    fn free(&self, _value: u64) {}
}

/// Names one of the pool's recyclers (`AllocateDescriptor(callback)`, §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecyclerId(pub u32);

/// How to build or open a pool.
#[derive(Clone)]
pub struct PoolConfig {
    /// Free-descriptor partitions (one per expected thread).
    pub partition_count: usize,
    /// Descriptors in each partition.
    pub descriptors_per_partition: usize,
    /// Client header words (target words at a fixed place).
    pub client_words: usize,
    /// User-area words.
    pub user_words: usize,
    /// Recyclers by [`RecyclerId`]; id 0 is the default. Empty means one [`NoRecycle`].
    pub recyclers: Vec<Arc<dyn Recycle>>,
}

impl std::fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolConfig")
            .field("partition_count", &self.partition_count)
            .field("descriptors_per_partition", &self.descriptors_per_partition)
            .field("client_words", &self.client_words)
            .field("user_words", &self.user_words)
            .field("recyclers", &self.recyclers.len())
            .finish()
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            partition_count: 64,
            // 4096 descriptors (2 MiB): a thread descheduled while pinned holds back every
            // descriptor retired meanwhile, so the pool must outlast a time slice of the others.
            descriptors_per_partition: 64,
            client_words: 504,
            user_words: 0,
            recyclers: Vec::new(),
        }
    }
}

impl PoolConfig {
    /// The geometry this configuration asks for.
    pub fn geometry(&self) -> Result<Geometry, Error> {
        if self.partition_count == 0 || self.partition_count > PARTITIONS_MAX {
            return Err(Error::Config(format!(
                "partition_count {} is not in 1..={PARTITIONS_MAX}",
                self.partition_count
            )));
        }
        let count = self
            .partition_count
            .checked_mul(self.descriptors_per_partition)
            .filter(|&c| c > 0 && c <= DESCRIPTORS_MAX)
            .ok_or_else(|| {
                Error::Config(format!(
                    "{} partitions x {} descriptors is not in 1..={DESCRIPTORS_MAX}",
                    self.partition_count, self.descriptors_per_partition
                ))
            })?;
        Ok(Geometry {
            descriptor_count: count,
            partition_count: self.partition_count,
            client_words: self.client_words,
            user_words: self.user_words,
        })
    }

    /// Bytes of the region this configuration needs.
    pub fn region_bytes(&self) -> Result<usize, Error> {
        Ok(self.geometry()?.total_words() * WORD_BYTES)
    }
}

/// One partition's free list (module doc): the stack of descriptors taken back, head = tag <<
/// 32 | (index + 1), 0 when empty; the cursor, how many of its descriptors were handed out in
/// this run; and its high-water mark as known durable.
struct Partition {
    head: AtomicU64,
    cursor: AtomicU64,
    mark: AtomicU64,
}

/// The shared state of a pool.
pub(crate) struct Inner<P: Persist> {
    pub(crate) region: Region,
    pub(crate) persist: P,
    pub(crate) geometry: Geometry,
    partitions: Box<[CachePadded<Partition>]>,
    counters: Box<[CachePadded<Counters>]>,
    recyclers: Vec<Arc<dyn Recycle>>,
    pub(crate) domain: Domain,
    /// Where descriptors that free no memory wait (`reuse.rs`).
    reuse: ReuseDomain,
    pending_releases: AtomicUsize,
    active_releases: AtomicUsize,
    closed: AtomicBool,
    /// Decided descriptors recovery left to finish after open (`recovery.rs`), sorted: the
    /// cursors skip them, and `finish_recovery` hands them back through the pool's epoch.
    recovered: Box<[u32]>,
    /// Those of `recovered` (with their generation) not yet finished.
    to_finish: std::sync::Mutex<Vec<(u32, u64)>>,
    /// Whether `to_finish` may be non-empty (one load on the allocation path).
    finishing: AtomicBool,
    /// Of `pending_releases`, the returns to the free lists of descriptors recovery left
    /// (`Pool::finish_recovery` waits for them).
    recovered_pending: AtomicUsize,
    /// `geometry`'s derived word positions, computed once: every PMwCAS step looks them up
    /// (its divisions and range checks were a tenth of a volatile PMwCAS's instructions).
    bounds: Bounds,
}

/// Word positions derived from the geometry and the region (`Inner::bounds`).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// First word of the descriptors.
    pool_word: usize,
    /// Descriptors per partition.
    per_partition: usize,
    /// Target words: the client header `client_start..client_end`, and the user area
    /// `user_start..region_words`.
    client_start: usize,
    client_end: usize,
    user_start: usize,
    region_words: usize,
}

impl Bounds {
    fn new(geometry: &Geometry, region_words: usize) -> Self {
        Self {
            pool_word: geometry.pool_word(),
            per_partition: geometry.per_partition(),
            client_start: geometry.client_word(),
            client_end: geometry.client_word() + geometry.client_words,
            user_start: geometry.user_word(),
            region_words,
        }
    }

    /// `Geometry::is_target_word`, from the cached positions.
    #[inline]
    fn is_target_word(&self, w: usize) -> bool {
        (w >= self.client_start && w < self.client_end)
            || (w >= self.user_start && w < self.region_words)
    }
}

/// A PMwCAS descriptor pool over a region (see the module doc and the crate doc).
pub struct Pool<P: Persist> {
    pub(crate) inner: Arc<Inner<P>>,
}

impl<P: Persist> std::fmt::Debug for Pool<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("geometry", &self.inner.geometry)
            .field("persist", &self.inner.persist.name())
            .finish()
    }
}

thread_local! {
    static THREAD_NUMBER: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, StdOrdering::Relaxed)
    };
}

pub(crate) fn thread_number() -> usize {
    THREAD_NUMBER.try_with(|n| *n).unwrap_or(0)
}

fn header_crc(words: &[u64; HEADER_WORDS - 1]) -> u64 {
    let mut bytes = [0u8; (HEADER_WORDS - 1) * WORD_BYTES];
    for (chunk, w) in bytes.chunks_exact_mut(WORD_BYTES).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    u64::from(crc32c::crc32c(&bytes))
}

impl<P: Persist> Pool<P> {
    /// Formats a new pool in `region` (which must be zeroed or hold nothing of value) and
    /// persists it.
    pub fn create(region: Region, persist: P, config: PoolConfig) -> Result<Self, Error> {
        let geometry = config.geometry()?;
        let needed = geometry.total_words() * WORD_BYTES;
        if region.len_bytes() < needed {
            return Err(Error::Config(format!(
                "region has {} bytes, the pool needs {needed}",
                region.len_bytes()
            )));
        }
        let header = Self::header_words(&geometry, region.len_bytes());
        let words = region.words();
        for (i, &w) in header.iter().enumerate() {
            words[i].store(w, Ordering::Relaxed);
        }
        for w in &words[geometry.marks_word()..geometry.user_word()] {
            w.store(0, Ordering::Relaxed);
        }
        persist.flush(&region, 0..geometry.user_word() * WORD_BYTES);
        persist.fence();
        let pool = Self::assemble(region, persist, geometry, config.recyclers);
        pool.inner.reset_free_lists();
        Ok(pool)
    }

    /// A volatile pool on the heap with `config`'s geometry.
    pub fn create_volatile(persist: P, config: PoolConfig) -> Result<Self, Error> {
        let region = Region::heap(config.region_bytes()?);
        Self::create(region, persist, config)
    }

    /// Opens the pool in `region`: checks its header against `config`, then recovers every
    /// descriptor in flight (§2.3.2 "Recovery", `recovery.rs`).
    pub fn open(
        region: Region,
        persist: P,
        config: PoolConfig,
    ) -> Result<(Self, crate::RecoveryReport), Error> {
        let geometry = config.geometry()?;
        if region.len_bytes() < HEADER_WORDS * WORD_BYTES {
            return Err(Error::Format(format!(
                "region of {} bytes has no pool header",
                region.len_bytes()
            )));
        }
        let words = region.words();
        let found: Vec<u64> = words[..HEADER_WORDS]
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        if found[0] != layout::MAGIC {
            return Err(Error::Format(format!(
                "bad magic {:#018x} at byte 0",
                found[0]
            )));
        }
        if found[1] != layout::FORMAT_VERSION {
            return Err(Error::Format(format!(
                "format version {} at byte 8, this build reads {}",
                found[1],
                layout::FORMAT_VERSION
            )));
        }
        let expected = Self::header_words(&geometry, region.len_bytes());
        if found[HEADER_WORDS - 1] != expected[HEADER_WORDS - 1] || found[..] != expected[..] {
            let mut head = [0u64; HEADER_WORDS - 1];
            head.copy_from_slice(&found[..HEADER_WORDS - 1]);
            if header_crc(&head) != found[HEADER_WORDS - 1] {
                return Err(Error::Format(
                    "pool header checksum mismatch at byte 56".into(),
                ));
            }
            return Err(Error::Format(format!(
                "pool geometry {found:?} differs from the configuration's {expected:?}"
            )));
        }
        let mut pool = Self::assemble(region, persist, geometry, config.recyclers);
        let (report, deferred) = crate::recovery::recover(&pool.inner)?;
        {
            let inner = Arc::get_mut(&mut pool.inner).expect("a pool being opened is not shared");
            let mut recovered: Vec<u32> = deferred.iter().map(|&(index, _)| index).collect();
            recovered.sort_unstable();
            inner.recovered = recovered.into_boxed_slice();
            inner.finishing = AtomicBool::new(!deferred.is_empty());
            inner.to_finish = std::sync::Mutex::new(deferred);
        }
        pool.inner.reset_free_lists();
        Ok((pool, report))
    }

    /// The geometry recorded in the pool header of `region`, checked (magic, version,
    /// checksum, region size) but not recovered: what a user needs to lay out its own words
    /// before calling [`Pool::open`] with a matching configuration.
    pub fn read_geometry(region: &Region) -> Result<Geometry, Error> {
        if region.len_bytes() < HEADER_WORDS * WORD_BYTES {
            return Err(Error::Format(format!(
                "region of {} bytes has no pool header",
                region.len_bytes()
            )));
        }
        let words = region.words();
        let mut head = [0u64; HEADER_WORDS - 1];
        for (h, w) in head.iter_mut().zip(words) {
            *h = w.load(Ordering::Relaxed);
        }
        if head[0] != layout::MAGIC {
            return Err(Error::Format(format!(
                "bad magic {:#018x} at byte 0 (not a forest PMwCAS pool)",
                head[0]
            )));
        }
        if head[1] != layout::FORMAT_VERSION {
            return Err(Error::Format(format!(
                "format version {} at byte 8, this build reads {}",
                head[1],
                layout::FORMAT_VERSION
            )));
        }
        if header_crc(&head) != words[HEADER_WORDS - 1].load(Ordering::Relaxed) {
            return Err(Error::Format(
                "pool header checksum mismatch at byte 56".into(),
            ));
        }
        if head[2] != region.len_bytes() as u64 {
            return Err(Error::Format(format!(
                "pool header records {} bytes, the file has {}",
                head[2],
                region.len_bytes()
            )));
        }
        if head[6] != DESCRIPTOR_WORDS as u64 {
            return Err(Error::Format(format!(
                "descriptors of {} words, this build uses {DESCRIPTOR_WORDS}",
                head[6]
            )));
        }
        let geometry = PoolConfig {
            partition_count: usize::try_from(head[4]).unwrap_or(usize::MAX),
            descriptors_per_partition: usize::try_from(head[3] / head[4].max(1))
                .unwrap_or(usize::MAX),
            client_words: usize::try_from(head[5]).unwrap_or(usize::MAX),
            user_words: 0,
            recyclers: Vec::new(),
        }
        .geometry()
        .map_err(|e| Error::Format(format!("pool header geometry: {e}")))?;
        if geometry.descriptor_count as u64 != head[3]
            || geometry.user_start_bytes() > region.len_bytes() as u64
        {
            return Err(Error::Format(format!(
                "pool header geometry {head:?} does not fit the file"
            )));
        }
        Ok(geometry)
    }

    fn header_words(geometry: &Geometry, region_bytes: usize) -> [u64; HEADER_WORDS] {
        let head = [
            layout::MAGIC,
            layout::FORMAT_VERSION,
            region_bytes as u64,
            geometry.descriptor_count as u64,
            geometry.partition_count as u64,
            geometry.client_words as u64,
            DESCRIPTOR_WORDS as u64,
        ];
        let crc = header_crc(&head);
        let mut out = [0u64; HEADER_WORDS];
        out[..HEADER_WORDS - 1].copy_from_slice(&head);
        out[HEADER_WORDS - 1] = crc;
        out
    }

    fn assemble(
        region: Region,
        persist: P,
        geometry: Geometry,
        mut recyclers: Vec<Arc<dyn Recycle>>,
    ) -> Self {
        if recyclers.is_empty() {
            recyclers.push(Arc::new(NoRecycle));
        }
        let per = geometry.descriptor_count / geometry.partition_count;
        let bounds = Bounds::new(&geometry, region.words().len());
        let inner = Inner {
            bounds,
            region,
            persist,
            geometry,
            partitions: (0..geometry.partition_count)
                .map(|_| {
                    CachePadded::new(Partition {
                        head: AtomicU64::new(0),
                        cursor: AtomicU64::new(0),
                        mark: AtomicU64::new(0),
                    })
                })
                .collect(),
            counters: (0..geometry.partition_count)
                .map(|_| CachePadded::new(Counters::default()))
                .collect(),
            recyclers,
            domain: Domain::default(),
            reuse: ReuseDomain::new(geometry.partition_count),
            pending_releases: AtomicUsize::new(0),
            active_releases: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            recovered: Box::new([]),
            to_finish: std::sync::Mutex::new(Vec::new()),
            finishing: AtomicBool::new(false),
            recovered_pending: AtomicUsize::new(0),
        };
        debug_assert_eq!(per * geometry.partition_count, geometry.descriptor_count);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Pins the calling thread (§2.2). Hold the guard across reading words and the PMwCAS
    /// built from them; drop or `repin` it between operations so descriptors come back.
    pub fn pin(&self) -> Guard {
        self.inner.domain.pin()
    }

    /// The word at byte `offset` of the region, if it may be a PMwCAS target.
    pub fn word(&self, offset: u64) -> Result<&Word, Error> {
        self.inner.target_word(offset).ok_or(Error::NotATargetWord {
            offset: Some(offset),
        })
    }

    /// Byte offset of a target word.
    pub fn offset_of(&self, word: &Word) -> Result<u64, Error> {
        self.inner.target_offset(word)
    }

    /// The helping read (§2.3.1): the word's value with the control bits clear, after
    /// completing any RDCSS, flushing and cleaning a dirty value, and helping any PMwCAS found
    /// in it. The only way to load a target word.
    pub fn read(&self, word: &Word, guard: &Guard) -> u64 {
        let _ = guard;
        self.inner.read(word)
    }

    /// A single-word PMwCAS with no policy: `word` from `expected` to `new`; `Ok(true)` if it
    /// changed. In volatile mode it takes no descriptor: a helping read and a CAS
    /// (`descriptor.rs` module doc, session 16). In durable mode it is `AllocateDescriptor`,
    /// `AddWord` and `PMwCAS` (recovery must see the descriptor), so it may return
    /// `PoolExhausted` as they do.
    pub fn single_word_cas(
        &self,
        word: &Word,
        expected: u64,
        new: u64,
        guard: &Guard,
    ) -> Result<bool, Error> {
        if P::DURABLE {
            let mut d = self.allocate_descriptor(guard)?;
            d.add_word(word, expected, new)?;
            return d.execute();
        }
        crate::Descriptor::<P>::check_value(expected)?;
        crate::Descriptor::<P>::check_value(new)?;
        self.inner.target_offset(word)?;
        let succeeded = self.inner.volatile_cas(word, expected, new);
        self.inner.counters().attempt(1, succeeded);
        Ok(succeeded)
    }

    /// Allocates a descriptor with the default recycler (§2.3 `AllocateDescriptor()`).
    #[inline]
    pub fn allocate_descriptor<'a>(
        &'a self,
        guard: &'a Guard,
    ) -> Result<crate::Descriptor<'a, P>, Error> {
        self.allocate_descriptor_with(RecyclerId::default(), guard)
    }

    /// Allocates a descriptor whose `FREE-ONE` entries are freed by `recycler`
    /// (§2.3 `AllocateDescriptor(callback)`).
    #[inline]
    pub fn allocate_descriptor_with<'a>(
        &'a self,
        recycler: RecyclerId,
        guard: &'a Guard,
    ) -> Result<crate::Descriptor<'a, P>, Error> {
        if recycler.0 as usize >= self.inner.recyclers.len() {
            return Err(Error::Config(format!(
                "recycler {} not configured ({} recyclers)",
                recycler.0,
                self.inner.recyclers.len()
            )));
        }
        let (index, gen) = self.inner.allocate(recycler, guard)?;
        Ok(crate::Descriptor::new(self, guard, index, gen))
    }

    /// Finishes the decided descriptors recovery left for after open (`recovery.rs`: their
    /// Phase 2, their policies, their durable `Free` status), if any are left, waiting for a
    /// finish under way in another thread; then waits (bounded) until they are back in the
    /// free lists, which takes the pool's epoch (unless a thread stayed pinned throughout).
    /// The first allocation of a descriptor or chunk finishes them too, without the second
    /// wait; dropping the pool does it as well. Returns what this call did: descriptors
    /// finished (`descriptors_in_flight`), words rolled, values its policies freed.
    pub fn finish_recovery(&self) -> crate::RecoveryReport {
        let report = self.inner.finish_recovery();
        self.inner.wait_recovered_releases();
        report
    }

    /// Finishes what recovery left, if that is not done yet (one load once it is), waiting
    /// for a finish under way: a client that allocates memory its descriptors' policies free
    /// calls it before taking a chunk (`Inner::finish_recovery` says why), as an allocation
    /// of a descriptor does.
    pub fn ensure_recovery_finished(&self) {
        let _ = self.inner.finish_recovery();
    }

    /// How many decided descriptors recovery left for after open (`recovery.rs`) are not
    /// finished yet.
    pub fn recovery_left(&self) -> usize {
        self.inner
            .to_finish
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Each partition's high-water mark as the region holds it: how many of its descriptors,
    /// from its first, recovery would scan (module doc).
    pub fn high_water_marks(&self) -> Vec<u64> {
        (0..self.inner.geometry.partition_count)
            .map(|p| self.inner.mark_word(p).load(Ordering::Acquire))
            .collect()
    }

    /// Descriptors finished and retired but not yet back on a free list: those waiting for
    /// the helpers that may still read them (`reuse.rs`) and those whose memory waits for the
    /// pool's epoch. A crash now leaves these for recovery to read.
    pub fn descriptors_waiting(&self) -> usize {
        self.inner.descriptors_waiting()
    }

    /// The pool's counters.
    pub fn stats(&self) -> PmwcasStats {
        PmwcasStats::sum(self.inner.counters.iter().map(|c| &**c))
    }

    /// The region the pool lives in.
    pub fn region(&self) -> &Region {
        &self.inner.region
    }

    /// The persister.
    pub fn persist(&self) -> &P {
        &self.inner.persist
    }

    /// The pool's geometry.
    pub fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    /// Byte range of the client header (target words at a fixed place).
    pub fn client_header(&self) -> std::ops::Range<u64> {
        let g = &self.inner.geometry;
        (g.client_word() * WORD_BYTES) as u64
            ..((g.client_word() + g.client_words) * WORD_BYTES) as u64
    }

    /// Byte range of the user area (the node heap).
    pub fn user_area(&self) -> std::ops::Range<u64> {
        (self.inner.geometry.user_word() * WORD_BYTES) as u64..self.inner.region.len_bytes() as u64
    }

    /// Flushes `range` (bytes) of the region and fences: users persist record bytes and new
    /// nodes before the PMwCAS that makes them visible (§6.2).
    pub fn persist_range(&self, range: std::ops::Range<usize>) {
        if P::DURABLE {
            self.inner.persist.flush(&self.inner.region, range);
            self.inner.persist.fence();
        }
    }
}

impl<P: Persist> Drop for Pool<P> {
    fn drop(&mut self) {
        let inner = &self.inner;
        // What recovery left: finished now, so a clean close leaves nothing in flight.
        let _ = inner.finish_recovery();
        // No thread is inside the pool now, so none is pinned in the reuse domain.
        inner
            .reuse
            .drain(|index, gen| inner.release_within(index, gen, false));
        for _ in 0..CLOSE_WAIT_ROUNDS_MAX {
            if inner.pending_releases.load(StdOrdering::Acquire) == 0 {
                break;
            }
            #[cfg(not(any(loom, shuttle)))]
            inner.domain.pin().flush();
            crate::sync::yield_now();
        }
        inner.closed.store(true, StdOrdering::SeqCst);
        while inner.active_releases.load(StdOrdering::SeqCst) != 0 {
            crate::sync::yield_now();
        }
    }
}

impl<P: Persist> Inner<P> {
    /// The words of descriptor `index`.
    #[inline]
    pub(crate) fn desc(&self, index: u32) -> &[AtomicU64] {
        let start = self.bounds.pool_word + index as usize * DESCRIPTOR_WORDS;
        debug_assert_eq!(start, self.geometry.descriptor_word(index as usize));
        &self.region.words()[start..start + DESCRIPTOR_WORDS]
    }

    /// The region word holding partition `p`'s high-water mark.
    pub(crate) fn mark_word(&self, p: usize) -> &AtomicU64 {
        &self.region.words()[self.geometry.marks_word() + p]
    }

    /// Byte range of descriptor `index`.
    pub(crate) fn desc_bytes(&self, index: u32) -> std::ops::Range<usize> {
        let start = self.geometry.descriptor_word(index as usize) * WORD_BYTES;
        start..start + DESCRIPTOR_WORDS * WORD_BYTES
    }

    /// The target word at byte `offset`.
    #[inline]
    pub(crate) fn target_word(&self, offset: u64) -> Option<&Word> {
        let w = usize::try_from(offset).ok()? / WORD_BYTES;
        debug_assert_eq!(
            self.bounds.is_target_word(w),
            self.geometry.is_target_word(w, self.region.words().len())
        );
        if !self.bounds.is_target_word(w) {
            return None;
        }
        self.region.word(offset)
    }

    /// The byte offset of a target word.
    pub(crate) fn target_offset(&self, word: &Word) -> Result<u64, Error> {
        let offset = self
            .region
            .offset_of(word)
            .ok_or(Error::NotATargetWord { offset: None })?;
        if !self.bounds.is_target_word(offset as usize / WORD_BYTES) {
            return Err(Error::NotATargetWord {
                offset: Some(offset),
            });
        }
        Ok(offset)
    }

    /// This thread's counters.
    #[inline]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters[thread_number() % self.counters.len()]
    }

    /// The recycler a descriptor names (a corrupt index falls back to the default).
    pub(crate) fn recycler(&self, id: u64) -> &dyn Recycle {
        &*self.recyclers[usize::try_from(id)
            .ok()
            .filter(|&i| i < self.recyclers.len())
            .unwrap_or(0)]
    }

    /// Flushes the line holding `word` (durable mode only).
    #[inline]
    pub(crate) fn flush_word(&self, word: &Word) {
        if P::DURABLE {
            if let Some(offset) = self.region.offset_of(word) {
                let at = offset as usize;
                self.persist.flush(&self.region, at..at + WORD_BYTES);
            }
        }
    }

    /// Flushes and fences bytes of the region (durable mode only).
    pub(crate) fn persist_bytes(&self, range: std::ops::Range<usize>) {
        if P::DURABLE {
            self.persist.flush(&self.region, range);
            self.persist.fence();
        }
    }

    /// Flushes the status word of descriptor `index`, without a fence.
    pub(crate) fn flush_status(&self, index: u32) {
        if P::DURABLE {
            let at = self.desc_bytes(index).start;
            self.persist.flush(&self.region, at..at + WORD_BYTES);
        }
    }

    /// Flushes and fences the status word of descriptor `index`.
    pub(crate) fn persist_status(&self, index: u32) {
        if P::DURABLE {
            let at = self.desc_bytes(index).start;
            self.persist.flush(&self.region, at..at + WORD_BYTES);
            self.persist.fence();
        }
    }

    /// Empties the stacks, puts the cursors at each partition's first descriptor, and loads
    /// the durable marks. Runs at create and open, before any other thread has the pool:
    /// nothing per descriptor (open time is recovery time, §2.3.2).
    fn reset_free_lists(&self) {
        let per = self.geometry.per_partition();
        for (p, partition) in self.partitions.iter().enumerate() {
            // Recovery refused a mark above `per`; the region's value is durable at open.
            let mark = self.mark_word(p).load(Ordering::Relaxed).min(per as u64);
            partition.mark.store(mark, Ordering::Relaxed);
            partition.cursor.store(0, Ordering::Relaxed);
            partition.head.store(0, Ordering::Release);
            // Recovery freed those below the mark but the ones it left to finish; those above
            // are not read (their pages stay untouched until used).
            #[cfg(debug_assertions)]
            for index in p * per..p * per + mark as usize {
                if self.recovered.binary_search(&(index as u32)).is_ok() {
                    continue;
                }
                assert_eq!(
                    layout::status_state(
                        self.desc(index as u32)[layout::D_STATUS].load(Ordering::Relaxed)
                    ),
                    Some(State::Free),
                    "descriptor {index} below the mark is not free after recovery"
                );
            }
        }
    }

    fn push_free(&self, index: u32, partition: usize) {
        let head = &self.partitions[partition].head;
        let mut current = head.load(Ordering::Acquire);
        loop {
            // The link lives in the descriptor (its line is written by the release anyway),
            // so a pool needs no volatile array per descriptor, which at open would cost a
            // fresh allocation's page faults.
            self.desc(index)[layout::D_FREE_NEXT]
                .store(u64::from(current as u32), Ordering::Relaxed);
            let new = ((current >> 32).wrapping_add(1) << 32) | u64::from(index + 1);
            match head.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(c) => current = c,
            }
        }
    }

    /// A free descriptor of `partition`: from its stack, else the cursor's next.
    fn pop_free(&self, partition: usize) -> Option<u32> {
        let head = &self.partitions[partition].head;
        let mut current = head.load(Ordering::Acquire);
        loop {
            let top = (current & 0xffff_ffff) as u32;
            if top == 0 {
                return self.take_unused(partition);
            }
            let next = self.desc(top - 1)[layout::D_FREE_NEXT].load(Ordering::Relaxed) as u32;
            let new = ((current >> 32).wrapping_add(1) << 32) | u64::from(next);
            match head.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(top - 1),
                Err(c) => current = c,
            }
        }
    }

    /// The next descriptor of `partition` not yet handed out in this run, if any.
    fn take_unused(&self, partition: usize) -> Option<u32> {
        let per = self.bounds.per_partition as u64;
        let cursor = &self.partitions[partition].cursor;
        let mut current = cursor.load(Ordering::Relaxed);
        loop {
            if current >= per {
                return None;
            }
            match cursor.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let index = (partition as u64 * per + current) as u32;
                    // One recovery left to finish comes back through its stack instead.
                    if !self.recovered.is_empty() && self.recovered.binary_search(&index).is_ok() {
                        current += 1;
                        continue;
                    }
                    return Some(index);
                }
                Err(c) => current = c,
            }
        }
    }

    /// Takes a free descriptor and starts its next generation (state `Building`).
    fn allocate(
        self: &Arc<Self>,
        recycler: RecyclerId,
        guard: &Guard,
    ) -> Result<(u32, u64), Error> {
        if self.finishing.load(StdOrdering::Acquire) {
            // Waiting for a finish under way, if another thread runs it (`finish_recovery`).
            let _ = self.finish_recovery();
        }
        let partitions = self.partitions.len();
        let home = thread_number() % partitions;
        for round in 0..=ALLOCATE_WAIT_ROUNDS_MAX {
            for k in 0..partitions {
                if let Some(index) = self.pop_free((home + k) % partitions) {
                    self.cover(index);
                    return Ok((index, self.start_generation(index, recycler)));
                }
            }
            if round == ALLOCATE_WAIT_ROUNDS_MAX {
                break;
            }
            // Every descriptor is in use or waiting for its epoch: push this thread's deferred
            // releases out and give the others a turn; retrying is safe, nothing was taken.
            self.counters().pool_wait();
            self.reuse
                .collect_all(|index, gen| self.release_within(index, gen, false));
            guard.flush();
            crate::sync::yield_now();
        }
        Err(Error::PoolExhausted {
            descriptors: self.geometry.descriptor_count,
            rounds: ALLOCATE_WAIT_ROUNDS_MAX,
        })
    }

    /// Makes sure descriptor `index`'s partition mark durably covers it before its status
    /// leaves `Free` (module doc): after warm-up, one load.
    #[inline]
    fn cover(&self, index: u32) {
        let per = self.bounds.per_partition;
        let (p, need) = (index as usize / per, (index as usize % per + 1) as u64);
        if self.partitions[p].mark.load(Ordering::Acquire) < need {
            self.raise_mark(p, need);
        }
    }

    /// Raises partition `p`'s durable mark to at least `need`: the region word first (several
    /// threads may raise one partition's mark at once, so by CAS, never lowering it), flushed
    /// and fenced, and only then the volatile copy that lets later allocations skip the flush.
    #[cold]
    fn raise_mark(&self, p: usize, need: u64) {
        let word = self.mark_word(p);
        let mut current = word.load(Ordering::Acquire);
        while current < need {
            match word.compare_exchange_weak(current, need, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(c) => current = c,
            }
        }
        // The flush writes the line as it is now, with a value >= `need` whoever stored it.
        let at = (self.geometry.marks_word() + p) * WORD_BYTES;
        self.persist_bytes(at..at + WORD_BYTES);
        let known = &self.partitions[p].mark;
        let mut current = known.load(Ordering::Acquire);
        while current < need {
            match known.compare_exchange_weak(current, need, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(c) => current = c,
            }
        }
        forest_core::pause::pause_point("pmwcas:mark-raised");
    }

    fn start_generation(&self, index: u32, recycler: RecyclerId) -> u64 {
        let d = self.desc(index);
        let old = d[layout::D_STATUS].load(Ordering::Relaxed);
        debug_assert_eq!(
            layout::status_state(old),
            Some(State::Free),
            "free lists hold free descriptors"
        );
        let gen = (layout::status_gen(old) + 1) & TAG_MASK;
        d[layout::D_STATUS].store(layout::status(gen, 0, State::Building), Ordering::SeqCst);
        // Seqlock writer side: a reader that sees any field written for this generation also
        // sees the status above and knows its snapshot is stale (`execute.rs` snapshot).
        fence(Ordering::Release);
        let seq = d[layout::D_INSTALL_SEQ].load(Ordering::Relaxed);
        d[layout::D_SEQ_START].store(seq, Ordering::Relaxed);
        d[layout::D_RECYCLER].store(u64::from(recycler.0), Ordering::Relaxed);
        gen
    }

    /// Returns a never-published descriptor at once (Discard, §2.3: nothing saw it).
    pub(crate) fn free_unpublished(&self, index: u32, gen: u64, persist: bool) {
        self.desc(index)[layout::D_STATUS]
            .store(layout::status(gen, 0, State::Free), Ordering::SeqCst);
        if persist {
            self.persist_status(index);
        }
        let per = self.bounds.per_partition;
        self.push_free(index, index as usize / per);
    }

    /// Pins the descriptor reuse domain (`reuse.rs`): held while helping a descriptor.
    #[inline]
    pub(crate) fn pin_reuse(&self) -> ReusePin<'_> {
        self.reuse.pin(thread_number())
    }

    /// Descriptors retired and not yet released, in both domains.
    pub(crate) fn descriptors_waiting(&self) -> usize {
        self.reuse.waiting() + self.pending_releases.load(StdOrdering::Acquire)
    }

    /// Hands a finished descriptor to an epoch: released when no thread can still read it.
    /// One whose policies free memory (`frees_memory`) waits for the pool's epoch, which
    /// protects readers of that memory anywhere in the caller's structure (§2.2); any other
    /// waits only for the threads helping it (`reuse.rs`).
    pub(crate) fn retire(
        self: &Arc<Self>,
        index: u32,
        gen: u64,
        guard: &Guard,
        frees_memory: bool,
    ) {
        if !frees_memory {
            let deferred = self
                .reuse
                .retire(thread_number(), index, gen, |index, gen| {
                    self.release_within(index, gen, false)
                });
            if deferred {
                self.counters().reuse_defer();
            }
            return;
        }
        self.counters().epoch_retire();
        self.pending_releases.fetch_add(1, StdOrdering::AcqRel);
        // Weak: the pool owns its collector, whose queue holds this until it runs; a strong
        // reference would keep the pool alive for good if it never ran (a thread pinned
        // through the close). A pool gone by then has nothing to release.
        let inner = Arc::downgrade(self);
        guard.defer(move || {
            if let Some(inner) = inner.upgrade() {
                inner.release(index, gen);
            }
        });
        // crossbeam keeps deferred work in a thread-local bag of up to 64 items until it is
        // full, and each one parked there is one more for recovery to read after a crash;
        // these retirements are rare (SMOs, value blocks), so hand each to the collector at
        // once (a flush also collects what is due).
        guard.flush();
    }

    /// Finishes what recovery left (`Pool::finish_recovery`, `recovery.rs` "Left for after
    /// open"): each descriptor once, by the thread holding the list; a caller finding another
    /// thread at it waits for it. Each one's Phase 2 runs, then its policies apply and its
    /// `Free` status is made durable, all before any thread of this run takes a descriptor
    /// (`allocate`) or a chunk (`ensure_recovery_finished`): a chunk its release freed before
    /// the crash may since have been taken again and freed under another tag (by recovery's
    /// rollback of the SMO that took it), and a repeat after this run reused it would free a
    /// linked node. Only the descriptor's return to its free list waits for the pool's epoch,
    /// for a thread of this run still helping it.
    pub(crate) fn finish_recovery(self: &Arc<Self>) -> crate::RecoveryReport {
        let mut report = crate::RecoveryReport::default();
        if !self.finishing.load(StdOrdering::Acquire) {
            return report;
        }
        let mut left = self
            .to_finish
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !left.is_empty() {
            let guard = self.domain.pin();
            let per = self.geometry.per_partition();
            // Each taken off the list only once its `Free` is stored: a panic in between
            // leaves it there for the next caller (idempotent), not decided and forgotten
            // until the next open repeats its policies on chunks this run took (review
            // rev-pmfix2 F2).
            while let Some(&(index, gen)) = left.last() {
                report.descriptors_in_flight += 1;
                let succeeded = crate::recovery::finish(self, index, gen, &mut report);
                let count =
                    layout::status_count(self.desc(index)[layout::D_STATUS].load(Ordering::SeqCst));
                report.values_freed += self.apply_policies(index, gen, succeeded, count);
                // A crash from here to the fence below repeats the policies at the next open,
                // on chunks nothing took since (every allocation waits for this finish).
                forest_core::pause::pause_point("pmwcas:policies-applied");
                self.desc(index)[layout::D_STATUS]
                    .store(layout::status(gen, 0, State::Free), Ordering::SeqCst);
                self.flush_status(index);
                left.pop();
                self.recovered_pending.fetch_add(1, StdOrdering::AcqRel);
                self.pending_releases.fetch_add(1, StdOrdering::AcqRel);
                // Weak: the pool's collector holds this until it runs (`reclaim.rs`).
                let inner = Arc::downgrade(self);
                guard.defer(move || {
                    let Some(inner) = inner.upgrade() else { return };
                    // Announced before `closed` is read, as `release_descriptor` does: `Drop`
                    // waits for active releases, so no free-list link is written after close
                    // (review rev-pmfix2 F1: a reopen of the file in this process).
                    inner.active_releases.fetch_add(1, StdOrdering::SeqCst);
                    if !inner.closed.load(StdOrdering::SeqCst) {
                        inner.push_free(index, index as usize / per);
                    }
                    inner.active_releases.fetch_sub(1, StdOrdering::SeqCst);
                    inner.pending_releases.fetch_sub(1, StdOrdering::AcqRel);
                    inner.recovered_pending.fetch_sub(1, StdOrdering::AcqRel);
                });
            }
            // The `Free` statuses, flushed one by one, durable together before any allocation.
            self.persist.fence();
            // Handed to the collector at once (`retire`): back in the free lists as soon as
            // the epoch moves past the threads pinned now.
            guard.flush();
        }
        self.finishing.store(false, StdOrdering::Release);
        drop(left);
        report
    }

    /// Waits (bounded) for the releases of what recovery left (`Pool::finish_recovery`).
    fn wait_recovered_releases(&self) {
        let deadline = std::time::Instant::now() + RECOVERED_WAIT_MAX;
        while self.recovered_pending.load(StdOrdering::Acquire) != 0 {
            self.domain.pin().flush();
            if cfg!(any(loom, shuttle)) || std::time::Instant::now() >= deadline {
                return;
            }
            crate::sync::yield_now();
        }
    }

    /// Releases a descriptor the pool's epoch held (`retire`).
    fn release(&self, index: u32, gen: u64) {
        self.release_descriptor(index, gen, true);
        self.pending_releases.fetch_sub(1, StdOrdering::AcqRel);
    }

    /// Applies the policies of a finished descriptor, marks it free (durably), and returns it
    /// to its partition (§2.3 "Memory management"). Without `policies` (a descriptor whose
    /// policies free nothing, `retire`) the entries are not read again. For a release the
    /// pool's epoch runs (a deferred function, which may run after the pool is dropped):
    /// announced, and skipped once the pool is closed.
    fn release_descriptor(&self, index: u32, gen: u64, policies: bool) {
        self.active_releases.fetch_add(1, StdOrdering::SeqCst);
        if !self.closed.load(StdOrdering::SeqCst) {
            self.release_within(index, gen, policies);
        }
        self.active_releases.fetch_sub(1, StdOrdering::SeqCst);
    }

    /// `release_descriptor` by a thread inside the pool (the reuse domain's releases: a
    /// retirement, an exhausted allocation, `Drop` itself), which no close can overlap: the
    /// pool is borrowed. No announcement, so a PMwCAS writes no line shared by all threads.
    fn release_within(&self, index: u32, gen: u64, policies: bool) {
        let d = self.desc(index);
        let status = d[layout::D_STATUS].load(Ordering::SeqCst);
        assert_eq!(
            layout::status_gen(status),
            gen,
            "a retired descriptor is reused only after release"
        );
        let state = layout::status_state(status & !layout::STATUS_DIRTY);
        debug_assert!(matches!(state, Some(State::Succeeded | State::Failed)));
        if policies {
            self.apply_policies(
                index,
                gen,
                state == Some(State::Succeeded),
                layout::status_count(status),
            );
        }
        // A crash here repeats the policies at recovery (`Recycle::free_by`).
        forest_core::pause::pause_point("pmwcas:policies-applied");
        d[layout::D_STATUS].store(layout::status(gen, 0, State::Free), Ordering::SeqCst);
        self.persist_status(index);
        forest_core::pause::pause_point("pmwcas:released");
        let per = self.bounds.per_partition;
        self.push_free(index, index as usize / per);
    }

    /// Frees, through the descriptor's recycler, the memory its `FREE-ONE` entries name:
    /// old values after a success, new values after a failure (§6.3). With `activated_only`
    /// (a descriptor never published), only activated entries of generation `gen`.
    pub(crate) fn apply_policies_where(
        &self,
        index: u32,
        gen: u64,
        succeeded: bool,
        count: usize,
        activated_only: bool,
    ) -> usize {
        let recycler = self.recycler(self.desc(index)[layout::D_RECYCLER].load(Ordering::Relaxed));
        let mut freed = 0;
        self.for_each_policy_value(index, gen, succeeded, count, activated_only, |value| {
            recycler.free_by(value, descriptor_tag(index, gen), &|r| {
                self.persist_bytes(r)
            });
            freed += 1;
        });
        freed
    }

    /// Calls `f` with each value the descriptor's `FREE-ONE` entries free (see `apply_policies_where`).
    fn for_each_policy_value(
        &self,
        index: u32,
        gen: u64,
        succeeded: bool,
        count: usize,
        activated_only: bool,
        mut f: impl FnMut(u64),
    ) {
        let d = self.desc(index);
        for i in 0..count.min(layout::ENTRIES_MAX) {
            let e = layout::DESCRIPTOR_HEADER_WORDS + i * layout::ENTRY_WORDS;
            let address = d[e + layout::E_ADDRESS].load(Ordering::Relaxed);
            let policy = d[e + layout::E_POLICY].load(Ordering::Relaxed);
            if address == layout::TOMBSTONE
                || layout::policy_code(policy) != layout::POLICY_FREE_ONE
            {
                continue;
            }
            if activated_only
                && (policy & layout::ACTIVATED == 0 || layout::policy_gen(policy) != gen)
            {
                continue;
            }
            let field = if succeeded {
                layout::E_EXPECTED
            } else {
                layout::E_NEW
            };
            let value = d[e + field].load(Ordering::Relaxed) & crate::word::VALUE_MASK;
            if value != 0 {
                f(value);
            }
        }
    }

    fn apply_policies(&self, index: u32, gen: u64, succeeded: bool, count: usize) -> usize {
        self.apply_policies_where(index, gen, succeeded, count, false)
    }
}
