//! PMwCAS execution: the two phases, helping, and the helping read (BzTree §2.3.1–2.3.2;
//! Harris et al. 2002 `MCAS`/`MCASRead`; microsoft/pmwcas `PersistentMwCAS`, `GetValue`).
//!
//! Owner, after publishing the descriptor durably (`descriptor.rs`):
//! 1. Phase 1: for each target in address order (no deadlock between overlapping PMwCASes),
//!    install the descriptor reference by RDCSS (`rdcss.rs`), dirty. A word holding another
//!    PMwCAS is flushed if dirty and that PMwCAS is helped, then the word is tried again; a
//!    dirty plain value is flushed and cleaned, then compared again; any other value fails the
//!    PMwCAS. Stop early once the status is no longer `Undecided`.
//! 2. If every word holds the reference: flush them, fence, clear their dirty bits.
//! 3. CAS the status `Undecided` → `Succeeded`/`Failed` with the status dirty bit; flush it,
//!    fence, clear the bit. A persisted `Succeeded` commits the PMwCAS.
//! 4. Phase 2: in each word still holding the reference, install the new (or old) value,
//!    dirty; flush; fence; clear the dirty bits.
//! 5. Retire the descriptor to the epoch (`pool.rs`).
//!
//! Any thread that meets the descriptor runs the same steps from where they stand (`help`).
//! In volatile mode (`P::DURABLE == false`) no dirty bit is set and no flush is issued.
//!
//! Choices the paper leaves open:
//! - Helping depth is bounded by [`HELP_DEPTH_MAX`]: beyond it a thread does not recurse but
//!   yields and reads the word again (the PMwCAS in it is being run by its owner and by the
//!   helpers above in the chain, so waiting is enough; the stack stays bounded).
//! - Reuse: a helper pins the reuse domain (`reuse.rs`) in `help`, after it loaded the
//!   reference and before its snapshot; a helper that read the status `Undecided` of its
//!   generation under that pin is protected (the descriptor cannot be retired before it is
//!   decided). A helper that finds it decided, or pinned only after the descriptor was
//!   retired, released and reused, reads the entries as a seqlock reader: status, fields,
//!   acquire fence, status again; a changed generation means the words it would touch no
//!   longer hold this descriptor. Every later status check compares the generation too
//!   (`undecided`), and every CAS it makes expects a generation-tagged reference.
//! - Fig. 1's per-word dirty bit is the dirty bit of the reference in the target word; the
//!   descriptor keeps no copy.
//!
//! Invariants:
//! - A word leaves a dirty value only after the value is flushed (every path that meets a
//!   dirty value flushes it first), so a value read by anyone is durable (§6.2 "cannot read a
//!   volatile modification").
//! - Only Phase 2 replaces a descriptor reference (or recovery).
//! - The owner's Phase 2 ends with every target word durable and free of this descriptor's
//!   references but for late installations whose installers are still pinned.

use crate::layout::{
    self, State, DESCRIPTOR_HEADER_WORDS, D_ORDER, D_STATUS, ENTRIES_MAX, ENTRY_WORDS, E_ADDRESS,
    E_EXPECTED, E_NEW,
};
use crate::persist::{Persist, CACHE_LINE_BYTES};
use crate::pool::Inner;
use crate::sync::atomic::{fence, Ordering};
use crate::word::{decode_ref, descriptor_ref, Word, DESCRIPTOR_BIT, DIRTY_BIT, RDCSS_BIT};

/// Deepest chain of PMwCASes one thread helps recursively (module doc).
pub const HELP_DEPTH_MAX: usize = 8;

/// One target of a descriptor as a helper saw it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Target {
    pub(crate) slot: usize,
    pub(crate) address: u64,
    pub(crate) expected: u64,
    pub(crate) new: u64,
}

/// The targets of one descriptor generation in address order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) targets: [Target; ENTRIES_MAX],
    pub(crate) len: usize,
    pub(crate) count: usize,
}

impl Snapshot {
    #[inline]
    pub(crate) fn targets(&self) -> &[Target] {
        &self.targets[..self.len]
    }
}

impl<P: Persist> Inner<P> {
    /// The helping read (§2.3.1): loops until the word holds a plain value.
    pub(crate) fn read(&self, word: &Word) -> u64 {
        loop {
            let value = word.load_raw();
            if value & RDCSS_BIT != 0 {
                self.rdcss_complete(word, value);
                continue;
            }
            if value & DIRTY_BIT != 0 {
                self.clean_dirty(word, value);
            }
            let value = value & !DIRTY_BIT;
            if value & DESCRIPTOR_BIT != 0 {
                let (index, _, gen) = decode_ref(value);
                self.help(index, gen, 1);
                continue;
            }
            return value;
        }
    }

    /// A volatile single-word PMwCAS without policy (`descriptor.rs` module doc): a helping
    /// read, then a CAS from the plain expected value, again if the CAS met a reference
    /// installed meanwhile. Volatile mode only (no dirty bits: a plain value is exactly
    /// `expected`).
    pub(crate) fn volatile_cas(&self, word: &Word, expected: u64, new: u64) -> bool {
        debug_assert!(!P::DURABLE);
        loop {
            if self.read(word) != expected {
                return false;
            }
            if word.cas_raw(expected, new).is_ok() {
                return true;
            }
        }
    }

    /// Flushes a dirty word, fences, then clears its dirty bit if it still holds `seen`.
    pub(crate) fn clean_dirty(&self, word: &Word, seen: u64) {
        debug_assert!(seen & DIRTY_BIT != 0);
        self.flush_word(word);
        self.persist.fence();
        let _ = word.cas_raw(seen, seen & !DIRTY_BIT);
        self.counters().dirty_flush();
    }

    /// Reads the targets of descriptor `index` generation `gen` as a seqlock reader; `None` if
    /// it is not published in that generation.
    pub(crate) fn snapshot(&self, index: u32, gen: u64) -> Option<Snapshot> {
        let d = self.desc(index);
        let status = d[D_STATUS].load(Ordering::SeqCst);
        if !published(status, gen) {
            return None;
        }
        let order = d[D_ORDER].load(Ordering::Relaxed);
        let mut snap = Snapshot {
            targets: [Target::default(); ENTRIES_MAX],
            len: layout::order_len(order).min(ENTRIES_MAX),
            count: layout::status_count(status),
        };
        for k in 0..snap.len {
            let slot = layout::order_slot(order, k).min(ENTRIES_MAX - 1);
            let e = DESCRIPTOR_HEADER_WORDS + slot * ENTRY_WORDS;
            snap.targets[k] = Target {
                slot,
                address: d[e + E_ADDRESS].load(Ordering::Relaxed),
                expected: d[e + E_EXPECTED].load(Ordering::Relaxed),
                new: d[e + E_NEW].load(Ordering::Relaxed),
            };
        }
        fence(Ordering::Acquire);
        if !published(d[D_STATUS].load(Ordering::Relaxed), gen) {
            return None;
        }
        Some(snap)
    }

    /// Runs descriptor `index` generation `gen` to its end from wherever it stands. Returns
    /// whether it succeeded, or `None` if it is no longer that generation (or the help chain
    /// is too deep: the caller reads its word again).
    pub(crate) fn help(&self, index: u32, gen: u64, depth: usize) -> Option<bool> {
        if depth > HELP_DEPTH_MAX {
            crate::sync::spin_loop();
            return None;
        }
        if depth > 0 {
            self.counters().help();
        }
        // The reference is loaded, not yet pinned: the generation may be retired meanwhile.
        forest_core::pause::pause_point("pmwcas:help-reference-loaded");
        // Before the snapshot: a generation read `Undecided` under this pin is not reused
        // before it drops (`reuse.rs`).
        let _pin = self.pin_reuse();
        let snap = self.snapshot(index, gen)?;
        // A generation read decided may be released and reused from here on, though pinned
        // (it was retired before the pin): `run` checks the generation (`undecided`).
        forest_core::pause::pause_point("pmwcas:help-snapshot-taken");
        self.run(index, gen, &snap, depth)
    }

    /// Runs descriptor `index` generation `gen`, whose targets are `snap`, to its end (the
    /// rest of [`Inner::help`]). The owner passes the entries it built rather than reading
    /// back lines it has just flushed (a flush may evict them: `clwb` does on some CPUs).
    pub(crate) fn run(&self, index: u32, gen: u64, snap: &Snapshot, depth: usize) -> Option<bool> {
        let status_word = &self.desc(index)[D_STATUS];
        if undecided(status_word.load(Ordering::SeqCst), gen) {
            self.phase1(index, gen, snap, depth);
        }
        let mut status = status_word.load(Ordering::SeqCst);
        if layout::status_gen(status) != gen {
            return None;
        }
        if status & layout::STATUS_DIRTY != 0 {
            // The decision must be durable before any Phase 2 value can be read (§2.3.2).
            self.persist_status(index);
            let _ = status_word.compare_exchange(
                status,
                status & !layout::STATUS_DIRTY,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            status &= !layout::STATUS_DIRTY;
            forest_core::pause::pause_point("pmwcas:status-persisted");
        }
        let succeeded = match layout::status_state(status) {
            Some(State::Succeeded) => true,
            Some(State::Failed) => false,
            _ => return None, // released meanwhile: another thread finished it
        };
        self.phase2(index, gen, snap, succeeded);
        Some(succeeded)
    }

    fn phase1(&self, index: u32, gen: u64, snap: &Snapshot, depth: usize) {
        let me = descriptor_ref(index, gen);
        let status_word = &self.desc(index)[D_STATUS];
        let mut all_installed = true;
        let seq = self.rdcss_seq(index);
        'targets: for t in snap.targets() {
            let Some(word) = self.target_word(t.address) else {
                // A torn snapshot of a reused descriptor; the generation check below ends it.
                return;
            };
            loop {
                if !undecided(status_word.load(Ordering::SeqCst), gen) {
                    // Decided by a helper (or, for a helper that pinned late, reused):
                    // nothing left to install.
                    break 'targets;
                }
                let met = self.rdcss_install(word, index, t.slot, t.expected, seq);
                if met == t.expected || met & !DIRTY_BIT == me {
                    forest_core::pause::pause_point("pmwcas:phase1-word-installed");
                    continue 'targets;
                }
                if met & DESCRIPTOR_BIT != 0 {
                    // Another PMwCAS holds the word: make its install durable, help it, retry.
                    if met & DIRTY_BIT != 0 {
                        self.clean_dirty(word, met);
                    }
                    let (other, _, other_gen) = decode_ref(met);
                    self.help(other, other_gen, depth + 1);
                    continue;
                }
                if met & DIRTY_BIT != 0 {
                    // A finished PMwCAS's value, not yet durable: persist, then compare again.
                    self.clean_dirty(word, met);
                    continue;
                }
                all_installed = false;
                break 'targets;
            }
        }
        let undecided = layout::status(gen, snap.count, State::Undecided);
        if all_installed && P::DURABLE {
            // Persist the dirty references before the decision (§2.3.2 "Upon completing
            // Phase 1, a thread persists the target words whose dirty bit is set").
            let mut lines = Lines::default();
            for t in snap.targets() {
                if let Some(word) = self.target_word(t.address) {
                    if word.load_raw() == me | DIRTY_BIT && lines.first(t.address) {
                        self.flush_word(word);
                    }
                }
            }
            self.persist.fence();
            for t in snap.targets() {
                if let Some(word) = self.target_word(t.address) {
                    let _ = word.cas_raw(me | DIRTY_BIT, me);
                }
            }
        }
        forest_core::pause::pause_point("pmwcas:phase1-persisted");
        let outcome = if all_installed {
            State::Succeeded
        } else {
            State::Failed
        };
        let dirty = if P::DURABLE { layout::STATUS_DIRTY } else { 0 };
        let decided = layout::status(gen, snap.count, outcome) | dirty;
        let _ =
            status_word.compare_exchange(undecided, decided, Ordering::SeqCst, Ordering::SeqCst);
        forest_core::pause::pause_point("pmwcas:status-decided");
    }

    fn phase2(&self, index: u32, gen: u64, snap: &Snapshot, succeeded: bool) {
        let me = descriptor_ref(index, gen);
        let dirty = if P::DURABLE { DIRTY_BIT } else { 0 };
        let mut installed = [0u64; ENTRIES_MAX];
        for (k, t) in snap.targets().iter().enumerate() {
            let Some(word) = self.target_word(t.address) else {
                continue;
            };
            let value = (if succeeded { t.new } else { t.expected }) | dirty;
            let mut current = word.load_raw();
            while current & !DIRTY_BIT == me {
                match word.cas_raw(current, value) {
                    Ok(_) => current = value,
                    Err(now) => current = now,
                }
            }
            forest_core::pause::pause_point("pmwcas:phase2-word-installed");
            if P::DURABLE && current == value {
                installed[k] = value;
            }
        }
        if P::DURABLE {
            // Flush after every word is installed, not after each: a locked instruction
            // (the next word's CAS) waits for an earlier flush to complete, as a fence does.
            let mut lines = Lines::default();
            for (k, t) in snap.targets().iter().enumerate() {
                if installed[k] != 0 && lines.first(t.address) {
                    if let Some(word) = self.target_word(t.address) {
                        self.flush_word(word);
                    }
                }
            }
            self.persist.fence();
            for (k, t) in snap.targets().iter().enumerate() {
                if installed[k] != 0 {
                    if let Some(word) = self.target_word(t.address) {
                        let _ = word.cas_raw(installed[k], installed[k] & !DIRTY_BIT);
                    }
                }
            }
        }
    }
}

/// The cache lines flushed so far in one batch (before one fence): a line holding two
/// targets is flushed once.
#[derive(Default)]
struct Lines {
    seen: [u64; ENTRIES_MAX],
    len: usize,
}

impl Lines {
    /// Whether the line of byte `offset` is new to this batch (and records it).
    #[inline]
    fn first(&mut self, offset: u64) -> bool {
        let line = offset / CACHE_LINE_BYTES as u64;
        if self.seen[..self.len].contains(&line) {
            return false;
        }
        if self.len < ENTRIES_MAX {
            self.seen[self.len] = line;
            self.len += 1;
        }
        true
    }
}

/// Whether `status` is generation `gen`, `Undecided`: only then may Phase 1 install (a
/// helper that pinned after loading a reference may meet a later generation, `reuse.rs`).
#[inline]
fn undecided(status: u64, gen: u64) -> bool {
    layout::status_gen(status) == gen && layout::status_state(status) == Some(State::Undecided)
}

/// Whether `status` is generation `gen` past publication.
#[inline]
fn published(status: u64, gen: u64) -> bool {
    layout::status_gen(status) == gen
        && matches!(
            layout::status_state(status & !layout::STATUS_DIRTY),
            Some(State::Undecided | State::Succeeded | State::Failed)
        )
}
