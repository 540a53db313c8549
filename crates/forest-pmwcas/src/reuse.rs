//! The descriptor reuse domain: a private epoch, pinned only while a thread may dereference a
//! descriptor it found in a word (`help`), that returns a finished descriptor with no memory
//! to free to its partition within a few PMwCASes (issue 16's recovery bar after a SIGKILL).
//!
//! Why not the pool's epoch (`reclaim.rs`, crossbeam-epoch) for every descriptor. §2.2 gives
//! epochs two jobs: no thread may dereference a descriptor after it is recycled, and no thread
//! may touch memory a PMwCAS freed by policy. Callers hold that epoch's guard across a whole
//! tree operation (descend, read, build, PMwCAS), and with crossbeam's global collector any
//! guard anywhere in the process holds back every descriptor retired meanwhile; a thread
//! descheduled while pinned held back thousands (2 000-7 000 retired descriptors after a
//! SIGKILL under 2 writers, each read back by recovery: 4.7 ms), and writers waited for the
//! pool. Memory freed by a `FREE-ONE` policy keeps the first job's reason: a reader pinned
//! anywhere in the tree may hold a pointer into a node the PMwCAS retired, so such a
//! descriptor still waits for the pool's epoch (`Inner::retire`). A descriptor that frees
//! nothing only has to outlive the threads that may read *it*: those that met its reference
//! in a word and help it. They pin this domain in `Inner::help` before their seqlock snapshot
//! (`execute.rs`), so a helper that reads the status `Undecided` of generation g while pinned
//! holds g back (g is retired only after it is decided), which is all RDCSS installation
//! relies on (`rdcss.rs`). A helper that pinned only after it loaded the reference may find g
//! already reused: its snapshot then fails the generation check, or it sees g decided, and
//! every later step checks the generation again (`run`, `phase1`) and every CAS expects a
//! generation-tagged reference, so it touches nothing of g + 1. The owner needs no pin: its
//! descriptor is retired only by itself, after its Phase 2. Every such pin is short (one help):
//! with no pin held a retired descriptor comes back at once (below), else the epoch advances at
//! nearly every retirement and a thread keeps two or three descriptors waiting.
//!
//! Epoch-based reclamation (Fraser 2004; crossbeam-epoch's rules): a global epoch; a slot per
//! thread (thread number modulo the slot count; threads sharing a slot share one announcement,
//! (epoch << 16) | pinned count, the oldest epoch among them, which only delays release); pin
//! announces the global epoch then fences (SeqCst); the epoch advances from e to e + 1 only
//! when every pinned slot announces e; a descriptor retired at epoch e (read after a SeqCst
//! fence) is released once the epoch is e + 2, when every thread pinned at its retirement has
//! unpinned. The retiring thread keeps it in its slot's limbo list and releases what is due
//! at its next retirements; an allocation that finds the pool empty releases every slot's due
//! descriptors; dropping the pool releases all (no thread is inside it then).
//!
//! No shared line written per PMwCAS (issue 16, session 15): pins are rare (a thread pins only
//! to help), so the domain also counts the pins held (`pinned`, written only by pins). A
//! retirement fences (SeqCst) and loads that count; if it is zero, the descriptor is released
//! at once, without the limbo or the epoch. Why that is sound: a helper that read generation
//! g `Undecided` under its pin incremented the count, fenced, then read the status; the
//! retiring thread decided g, fenced, then read the count; of two such fenced pairs at least
//! one sees the other's store, and the helper saw `Undecided`, so the retirement sees the
//! count above zero and takes the epoch path. A helper pinned after that load is a late
//! pinner, which the generation checks cover (above). Only the descriptor being retired
//! skips the limbo: entries already there (retired while some pin was held, maybe by a
//! thread sharing the slot whose pin is not ordered before this load) still wait for the
//! epoch, which this retirement then tries to advance.
//!
//! Built on `crate::sync`, so loom and shuttle check this code itself (`tests/loom_pmwcas.rs`
//! "reuse without the pool's epoch"), not a stand-in.

use crossbeam_utils::CachePadded;

use crate::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use crate::sync::Mutex;

/// Bits of a slot word holding how many threads share its pin.
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The epoch bits a slot announces (the epoch counter itself is a full u64).
const EPOCH_MASK: u64 = u64::MAX >> COUNT_BITS;

/// One descriptor generation waiting for the epoch.
#[derive(Debug, Clone, Copy)]
struct Retired {
    epoch: u64,
    index: u32,
    gen: u64,
}

/// A private epoch domain for descriptors (module doc).
pub(crate) struct ReuseDomain {
    epoch: CachePadded<AtomicU64>,
    /// Pins held, over all slots (module doc: a retirement that reads 0 releases at once).
    pinned: CachePadded<AtomicUsize>,
    /// 0 when unpinned, else the announced epoch << `COUNT_BITS` | pinned count.
    slots: Box<[CachePadded<AtomicU64>]>,
    /// Slots ever pinned are below this (advances scan only those).
    used: AtomicUsize,
    limbo: Box<[CachePadded<Limbo>]>,
}

/// One slot's retired descriptors, on a line of their own.
struct Limbo {
    list: Mutex<Vec<Retired>>,
    /// `list`'s length, readable without the lock (`ReuseDomain::waiting`).
    waiting: AtomicUsize,
}

/// A pin of the reuse domain; unpins on drop.
pub(crate) struct ReusePin<'a> {
    domain: &'a ReuseDomain,
    slot: usize,
}

impl Drop for ReusePin<'_> {
    fn drop(&mut self) {
        let slot = &self.domain.slots[self.slot];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let new = if current & COUNT_MASK <= 1 {
                0
            } else {
                current - 1
            };
            // Release: the helper's reads of the descriptor happen before a releaser sees the
            // slot move on.
            match slot.compare_exchange_weak(current, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(c) => current = c,
            }
        }
        // After the slot: a retirement that reads 0 finds no pin in any slot either.
        self.domain.pinned.fetch_sub(1, Ordering::Release);
    }
}

impl ReuseDomain {
    pub(crate) fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        Self {
            epoch: CachePadded::new(AtomicU64::new(1)),
            pinned: CachePadded::new(AtomicUsize::new(0)),
            slots: (0..slots)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            used: AtomicUsize::new(0),
            limbo: (0..slots)
                .map(|_| {
                    CachePadded::new(Limbo {
                        list: Mutex::new(Vec::new()),
                        waiting: AtomicUsize::new(0),
                    })
                })
                .collect(),
        }
    }

    fn slot_of(&self, thread: usize) -> usize {
        thread % self.slots.len()
    }

    /// Pins thread number `thread` (module doc).
    pub(crate) fn pin(&self, thread: usize) -> ReusePin<'_> {
        let s = self.slot_of(thread);
        // Counted before the fence below: a retirement that reads 0 after its own fence
        // precedes this pin's status reads (module doc).
        self.pinned.fetch_add(1, Ordering::SeqCst);
        // Counted before the announcement: an advance that scans up to `used` sees this slot.
        let mut used = self.used.load(Ordering::SeqCst);
        while used <= s {
            match self
                .used
                .compare_exchange_weak(used, s + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(u) => used = u,
            }
        }
        let slot = &self.slots[s];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let new = if current == 0 {
                ((self.epoch.load(Ordering::Relaxed) & EPOCH_MASK) << COUNT_BITS) | 1
            } else {
                assert!(
                    current & COUNT_MASK < COUNT_MASK,
                    "more than {COUNT_MASK} threads pinned on one reuse slot"
                );
                current + 1
            };
            match slot.compare_exchange_weak(current, new, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(c) => current = c,
            }
        }
        // The announcement is visible before any load of a descriptor under this pin.
        fence(Ordering::SeqCst);
        ReusePin {
            domain: self,
            slot: s,
        }
    }

    /// Advances the epoch if every pinned slot announces the current one; returns the epoch.
    fn try_advance(&self) -> u64 {
        fence(Ordering::SeqCst);
        let epoch = self.epoch.load(Ordering::Relaxed);
        let used = self.used.load(Ordering::Acquire).min(self.slots.len());
        for slot in &self.slots[..used] {
            let v = slot.load(Ordering::Acquire);
            if v != 0 && v >> COUNT_BITS != epoch & EPOCH_MASK {
                return epoch;
            }
        }
        match self
            .epoch
            .compare_exchange(epoch, epoch + 1, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => epoch + 1,
            Err(now) => now,
        }
    }

    /// Hands back descriptor `index` generation `gen`, finished and free of references but
    /// for helpers still pinned: at once if no pin is held (module doc), else queued on thread
    /// `thread`'s slot. Then hands `release` every descriptor of that slot whose epoch has
    /// passed. Returns whether the descriptor was queued (a counter).
    pub(crate) fn retire(
        &self,
        thread: usize,
        index: u32,
        gen: u64,
        mut release: impl FnMut(u32, u64),
    ) -> bool {
        let s = self.slot_of(thread);
        fence(Ordering::SeqCst);
        if self.pinned.load(Ordering::SeqCst) == 0 {
            release(index, gen);
            if self.limbo[s].waiting.load(Ordering::Relaxed) != 0 {
                self.collect(s, release);
            }
            return false;
        }
        let epoch = self.epoch.load(Ordering::Relaxed);
        {
            let mut limbo = self.lock(s);
            limbo.push(Retired { epoch, index, gen });
            self.limbo[s].waiting.store(limbo.len(), Ordering::Relaxed);
        }
        self.collect(s, release);
        true
    }

    /// Hands `release` every descriptor of every slot whose epoch has passed (a pool-exhaustion
    /// wait); returns how many.
    pub(crate) fn collect_all(&self, mut release: impl FnMut(u32, u64)) -> usize {
        (0..self.slots.len())
            .map(|s| self.collect(s, &mut release))
            .sum()
    }

    /// Hands `release` every descriptor left, whatever its epoch: only when no thread can be
    /// pinned (the pool is being dropped).
    pub(crate) fn drain(&self, mut release: impl FnMut(u32, u64)) {
        for s in 0..self.slots.len() {
            let all = std::mem::take(&mut *self.lock(s));
            self.limbo[s].waiting.store(0, Ordering::Relaxed);
            for r in all {
                release(r.index, r.gen);
            }
        }
    }

    /// Descriptors retired here and not yet released.
    pub(crate) fn waiting(&self) -> usize {
        self.limbo
            .iter()
            .map(|l| l.waiting.load(Ordering::Relaxed))
            .sum()
    }

    /// Hands `release` slot `s`'s descriptors whose epoch has passed, after trying to advance
    /// the epoch.
    fn collect(&self, s: usize, mut release: impl FnMut(u32, u64)) -> usize {
        let epoch = self.try_advance();
        let mut total = 0;
        loop {
            // Released outside the lock (a release flushes), at most 16 at a time.
            let mut due = [(0u32, 0u64); 16];
            let mut n = 0;
            {
                let mut limbo = self.lock(s);
                let list = &mut *limbo;
                let mut i = 0;
                while i < list.len() && n < due.len() {
                    if list[i].epoch + 2 <= epoch {
                        let r = list.swap_remove(i);
                        due[n] = (r.index, r.gen);
                        n += 1;
                    } else {
                        i += 1;
                    }
                }
                self.limbo[s].waiting.store(list.len(), Ordering::Relaxed);
            }
            for &(index, gen) in &due[..n] {
                release(index, gen);
            }
            total += n;
            if n < due.len() {
                return total;
            }
        }
    }

    fn lock(&self, s: usize) -> impl std::ops::DerefMut<Target = Vec<Retired>> + '_ {
        self.limbo[s]
            .list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
