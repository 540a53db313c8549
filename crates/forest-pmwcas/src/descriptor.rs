//! The descriptor and its §2.3 API: `AllocateDescriptor` (`Pool::allocate_descriptor`),
//! `AddWord`, `ReserveEntry`, `RemoveWord`, `PMwCAS` ([`Descriptor::execute`]) and `Discard`
//! (BzTree Fig. 1, §2.3, §6.1, §6.3).
//!
//! The owner builds the entries in place, in its pool slot (issue 16 session 17: a copy of
//! the entries in the handle cost two ~500-byte copies and a zeroing per PMwCAS, 8 % of a
//! balanced run's instructions): each `AddWord`/`ReserveEntry` writes only that entry's words,
//! and the handle keeps the entry count and a few bit masks. Nothing reads an entry of a
//! `Building` descriptor but its owner: helpers take a snapshot only of a published
//! generation (`execute.rs`), and one holding a stale reference reads as a seqlock reader
//! (`pool.rs` start_generation: the status is stored before any field of the generation), so
//! it sees the new generation's status and gives up; recovery of a `Building` descriptor frees
//! only entries whose policy word says activated in its generation. The count published with
//! the status bounds what readers and recovery look at, so words beyond it (stale entries of
//! earlier generations) are never read. Publication (durable mode) writes the address order
//! and the status `Undecided`, then flushes the header and the entries in use and fences once:
//! a crash before the fence may leave the status durable without the entries, but then no word
//! refers to this generation yet, so recovery of an `Undecided` descriptor touches only words
//! that hold its references and frees only activated entries (`recovery.rs`). A durable
//! `Succeeded` or `Failed` status, or a durable reference, implies the generation's entries
//! are durable.
//!
//! Choices the paper leaves open:
//! - Memory-only entries (issue 16 "Persistent mode"): an SMO names every node it allocates and
//!   retires in its descriptor. [`Descriptor::add_memory`] / [`Descriptor::reserve_memory`]
//!   add an entry with no target word whose `FREE-ONE` policy frees its old value on success
//!   (a retired node) or its new value on failure (an allocated node).
//! - Activation (§6.1, §6.3): [`Descriptor::set_new`] on a `FREE-ONE` slot makes the value the
//!   descriptor's. In durable mode it publishes the entry, flushes it, fences, then sets the
//!   entry's activated bit (tagged with the generation) and flushes again: recovery frees the
//!   value of an activated entry of a descriptor that never executed. An activated entry is
//!   immutable (no second `set_new`, no `RemoveWord`), and entries never move once any entry is
//!   activated (`RemoveWord` leaves a tombstone), so a crash never pairs a flag with a torn
//!   value. [`Descriptor::new_value_location`] names the slot's bytes for the allocator's own
//!   recovery (§6.1: "the allocator persisted the address in the provided reference").
//! - `Discard` and dropping an unexecuted descriptor free the new values of its `FREE-ONE`
//!   entries at once (nothing else ever saw them) and return it to its free list.
//! - A PMwCAS with no target word (memory only) succeeds; its policies still apply.
//! - A volatile single-word PMwCAS with no policy (a freeze, §4.3/§5.2) is the CAS it
//!   amounts to: read the word (helping whatever PMwCAS holds it, §2.3.1), compare, CAS from
//!   the plain expected value, again if the CAS met a reference installed meanwhile. Nothing
//!   is published, so the descriptor goes straight back to its free list. Linearizable as
//!   the full protocol is: a PMwCAS that installs in the word afterwards expected the value
//!   the CAS replaced and fails, and the CAS fails on a word holding a reference. Durable
//!   mode keeps the full protocol (recovery must see the descriptor; issue 16 session 15).
//!   [`Pool::single_word_cas`] is the same step without taking a descriptor from the pool
//!   (session 16, review rev-pmw F2); in durable mode it runs the full protocol.

use crate::error::Error;
use crate::execute::{Snapshot, Target};
use crate::layout::{
    self, State, DESCRIPTOR_HEADER_WORDS, D_ORDER, D_STATUS, ENTRIES_MAX, ENTRY_WORDS, E_ADDRESS,
    E_EXPECTED, E_NEW, E_POLICY,
};
use crate::persist::Persist;
use crate::pool::Pool;
use crate::reclaim::Guard;
use crate::region::WORD_BYTES;
use crate::sync::atomic::Ordering;
use crate::word::{Word, CONTROL_MASK};

/// What happens to the memory a word's values point to when the PMwCAS concludes (§2.3.2,
/// §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// The values are not memory: nothing to free.
    #[default]
    None,
    /// Free the old value if the PMwCAS succeeds, the new value if it fails (after the epoch).
    FreeOne,
}

impl Policy {
    fn code(self) -> u64 {
        match self {
            Policy::None => layout::POLICY_NONE,
            Policy::FreeOne => layout::POLICY_FREE_ONE,
        }
    }
}

/// Names a reserved entry's new-value field (`ReserveEntry`'s return, §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(usize);

impl Slot {
    /// The entry's index in its descriptor.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Bit `i` of an entry mask.
#[inline]
fn bit(i: usize) -> u32 {
    1 << i
}

/// `mask` with bit `i` removed and the bits above it moved down one (`RemoveWord` shifting
/// the entries after `i`).
#[inline]
fn drop_bit(mask: u32, i: usize) -> u32 {
    (mask & (bit(i) - 1)) | ((mask >> (i + 1)) << i)
}

const _: () = assert!(ENTRIES_MAX < 32, "entry masks are u32");

/// A descriptor being built by its owner (Fig. 1), in place in its pool slot (module doc).
/// Execute or discard it; dropping it discards it.
pub struct Descriptor<'a, P: Persist> {
    pool: &'a Pool<P>,
    guard: &'a Guard,
    index: u32,
    gen: u64,
    /// The descriptor's words in the pool (looked up once).
    words: &'a [crate::sync::atomic::AtomicU64],
    /// Entries written to the slot, tombstones included.
    count: usize,
    /// Entries whose new value is set.
    new_set: u32,
    /// Entries with the `FREE-ONE` policy.
    free_one: u32,
    /// Entries activated (§6.1): immutable from then on.
    activated: u32,
    /// Entries removed after an activation (`RemoveWord`'s tombstones).
    tombstones: u32,
    finished: bool,
}

impl<P: Persist> std::fmt::Debug for Descriptor<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.slot_words();
        let entries: Vec<[u64; ENTRY_WORDS]> = (0..self.count)
            .map(|i| {
                let w = DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS;
                std::array::from_fn(|k| d[w + k].load(Ordering::Relaxed))
            })
            .collect();
        f.debug_struct("Descriptor")
            .field("index", &self.index)
            .field("gen", &self.gen)
            .field("entries", &entries)
            .finish()
    }
}

impl<'a, P: Persist> Descriptor<'a, P> {
    #[inline]
    pub(crate) fn new(pool: &'a Pool<P>, guard: &'a Guard, index: u32, gen: u64) -> Self {
        Self {
            pool,
            guard,
            index,
            gen,
            words: pool.inner.desc(index),
            count: 0,
            new_set: 0,
            free_one: 0,
            activated: 0,
            tombstones: 0,
            finished: false,
        }
    }

    pub(crate) fn check_value(value: u64) -> Result<(), Error> {
        if value & CONTROL_MASK != 0 {
            return Err(Error::ControlBits {
                value,
                mask: CONTROL_MASK,
            });
        }
        Ok(())
    }

    /// The descriptor's words in the pool.
    #[inline]
    fn slot_words(&self) -> &'a [crate::sync::atomic::AtomicU64] {
        self.words
    }

    /// Word `field` of entry `i`, as this owner wrote it.
    #[inline]
    fn field(&self, i: usize, field: usize) -> u64 {
        self.slot_words()[DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS + field].load(Ordering::Relaxed)
    }

    #[inline]
    fn set_field(&self, i: usize, field: usize, value: u64) {
        self.slot_words()[DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS + field]
            .store(value, Ordering::Relaxed);
    }

    #[inline]
    fn push(
        &mut self,
        address: u64,
        expected: u64,
        new: u64,
        policy: Policy,
        new_set: bool,
    ) -> Result<Slot, Error> {
        if address < layout::TOMBSTONE
            && (0..self.count).any(|i| self.field(i, E_ADDRESS) == address)
        {
            return Err(Error::DuplicateAddress { offset: address });
        }
        if self.count == ENTRIES_MAX {
            return Err(Error::TooManyEntries { max: ENTRIES_MAX });
        }
        let i = self.count;
        self.set_field(i, E_ADDRESS, address);
        self.set_field(i, E_EXPECTED, expected);
        self.set_field(i, E_NEW, new);
        self.set_field(
            i,
            E_POLICY,
            layout::policy_word(policy.code(), false, self.gen),
        );
        if new_set {
            self.new_set |= bit(i);
        }
        if policy == Policy::FreeOne {
            self.free_one |= bit(i);
        }
        self.count += 1;
        Ok(Slot(i))
    }

    /// `AddWord(address, expected, desired)`: change `word` from `expected` to `new`.
    #[inline]
    pub fn add_word(&mut self, word: &Word, expected: u64, new: u64) -> Result<(), Error> {
        Self::check_value(expected)?;
        Self::check_value(new)?;
        let address = self.pool.inner.target_offset(word)?;
        self.push(address, expected, new, Policy::None, true)?;
        Ok(())
    }

    /// `ReserveEntry(address, expected, policy)`: like `add_word` with the new value left to
    /// [`Descriptor::set_new`].
    pub fn reserve_entry(
        &mut self,
        word: &Word,
        expected: u64,
        policy: Policy,
    ) -> Result<Slot, Error> {
        Self::check_value(expected)?;
        let address = self.pool.inner.target_offset(word)?;
        self.push(address, expected, 0, policy, false)
    }

    /// A memory-only entry (`FREE-ONE`): `free_on_success` (a node this PMwCAS retires) is
    /// freed if it succeeds, `free_on_failure` (a node it allocated) if it fails; 0 is none.
    pub fn add_memory(&mut self, free_on_success: u64, free_on_failure: u64) -> Result<(), Error> {
        Self::check_value(free_on_success)?;
        Self::check_value(free_on_failure)?;
        self.push(
            layout::MEMORY_ONLY,
            free_on_success,
            free_on_failure,
            Policy::FreeOne,
            true,
        )?;
        Ok(())
    }

    /// A memory-only entry whose new value (memory freed if the PMwCAS fails) is activated
    /// later through [`Descriptor::set_new`] (§6.1).
    pub fn reserve_memory(&mut self) -> Result<Slot, Error> {
        self.push(layout::MEMORY_ONLY, 0, 0, Policy::FreeOne, false)
    }

    /// [`Descriptor::reserve_memory`] whose entry also names memory this PMwCAS retires
    /// (`free_on_success`, freed if it succeeds): a retired and a new node in one entry, as a
    /// `FREE-ONE` target word swapping them is. Until the new value is activated, a crash
    /// frees neither (recovery frees only activated new values of a PMwCAS that never
    /// succeeded, `recovery.rs`).
    pub fn reserve_memory_retiring(&mut self, free_on_success: u64) -> Result<Slot, Error> {
        Self::check_value(free_on_success)?;
        self.push(
            layout::MEMORY_ONLY,
            free_on_success,
            0,
            Policy::FreeOne,
            false,
        )
    }

    /// Fills a reserved slot's new value. For a `FREE-ONE` slot this is the activation of
    /// §6.1: when it returns (durable mode) the value is durably the descriptor's, and
    /// recovery frees it if the PMwCAS never succeeds.
    pub fn set_new(&mut self, slot: Slot, value: u64) -> Result<(), Error> {
        Self::check_value(value)?;
        let Slot(i) = slot;
        if i >= self.count || self.tombstones & bit(i) != 0 {
            return Err(Error::BadSlot { slot: i });
        }
        if self.activated & bit(i) != 0 {
            return Err(Error::SlotActivated { slot: i });
        }
        self.set_field(i, E_NEW, value);
        self.new_set |= bit(i);
        if P::DURABLE && self.free_one & bit(i) != 0 && value != 0 {
            self.activate(i);
        }
        Ok(())
    }

    /// Byte offset in the region of a slot's new-value field (for the allocator's recovery).
    pub fn new_value_location(&self, slot: Slot) -> u64 {
        let start = self
            .pool
            .inner
            .geometry
            .descriptor_word(self.index as usize);
        ((start + DESCRIPTOR_HEADER_WORDS + slot.0 * ENTRY_WORDS + E_NEW) * WORD_BYTES) as u64
    }

    /// `RemoveWord(address)`.
    pub fn remove_word(&mut self, word: &Word) -> Result<(), Error> {
        let address = self.pool.inner.target_offset(word)?;
        let i = (0..self.count)
            .find(|&i| self.field(i, E_ADDRESS) == address)
            .ok_or(Error::NoSuchWord { offset: address })?;
        if self.activated & bit(i) != 0 {
            return Err(Error::EntryActivated { offset: address });
        }
        if self.activated != 0 {
            // Entries never move once one is activated (module doc): a tombstone.
            self.set_field(i, E_ADDRESS, layout::TOMBSTONE);
            self.set_field(
                i,
                E_POLICY,
                layout::policy_word(layout::POLICY_NONE, false, self.gen),
            );
            self.tombstones |= bit(i);
            self.new_set &= !bit(i);
            self.free_one &= !bit(i);
        } else {
            for j in i + 1..self.count {
                for f in 0..ENTRY_WORDS {
                    self.set_field(j - 1, f, self.field(j, f));
                }
            }
            self.new_set = drop_bit(self.new_set, i);
            self.free_one = drop_bit(self.free_one, i);
            self.count -= 1;
        }
        Ok(())
    }

    /// Live entries (targets and memory-only).
    pub fn len(&self) -> usize {
        self.count - self.tombstones.count_ones() as usize
    }

    /// Whether the descriptor has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Durable activation of entry `i` (module doc): its words are in the slot already.
    fn activate(&mut self, i: usize) {
        let inner = &self.pool.inner;
        let entry_bytes = self.entry_bytes(i);
        let status_bytes =
            inner.desc_bytes(self.index).start..inner.desc_bytes(self.index).start + WORD_BYTES;
        inner.persist.flush(&inner.region, status_bytes);
        inner.persist.flush(&inner.region, entry_bytes.clone());
        inner.persist.fence();
        self.activated |= bit(i);
        let policy = self.free_one & bit(i) != 0;
        let code = if policy {
            Policy::FreeOne.code()
        } else {
            Policy::None.code()
        };
        self.set_field(i, E_POLICY, layout::policy_word(code, true, self.gen));
        inner.persist.flush(&inner.region, entry_bytes);
        inner.persist.fence();
        forest_core::pause::pause_point("pmwcas:activation-persisted");
    }

    fn entry_bytes(&self, i: usize) -> std::ops::Range<usize> {
        let start = self.pool.inner.desc_bytes(self.index).start
            + (DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS) * WORD_BYTES;
        start..start + ENTRY_WORDS * WORD_BYTES
    }

    /// Entries that are neither tombstones nor beyond the count.
    #[inline]
    fn live(&self) -> u32 {
        (bit(self.count) - 1) & !self.tombstones
    }

    /// `PMwCAS(descriptor)`: executes the operation; `Ok(true)` if every word changed,
    /// `Ok(false)` if none did (§2.3). An unset reserved slot is an error and discards it.
    #[inline]
    pub fn execute(mut self) -> Result<bool, Error> {
        self.execute_in_place()
    }

    fn execute_in_place(&mut self) -> Result<bool, Error> {
        let unset = self.live() & !self.new_set;
        if unset != 0 {
            self.discard_now();
            return Err(Error::SlotUnset {
                slot: unset.trailing_zeros() as usize,
            });
        }
        let inner = &self.pool.inner;
        if !P::DURABLE
            && self.count == 1
            && self.tombstones == 0
            && self.free_one == 0
            && self.field(0, E_ADDRESS) < layout::TOMBSTONE
        {
            return Ok(self.execute_single());
        }
        // The owner's targets as it wrote them, read before the flush below (no read-back of
        // lines just flushed: `clwb` may evict them), then put in address order.
        let mut snap = Snapshot {
            targets: [Target::default(); ENTRIES_MAX],
            len: 0,
            count: self.count,
        };
        // Whether its policies free memory on success / on failure (`retire` below).
        let (mut frees_on_success, mut frees_on_failure) = (false, false);
        for i in 0..self.count {
            let address = self.field(i, E_ADDRESS);
            if address == layout::TOMBSTONE {
                continue;
            }
            let (expected, new) = (self.field(i, E_EXPECTED), self.field(i, E_NEW));
            if self.free_one & bit(i) != 0 {
                frees_on_success |= expected != 0;
                frees_on_failure |= new != 0;
            }
            if address < layout::TOMBSTONE {
                snap.targets[snap.len] = Target {
                    slot: i,
                    address,
                    expected,
                    new,
                };
                snap.len += 1;
            }
        }
        snap.targets[..snap.len].sort_unstable_by_key(|t| t.address);
        let d = self.slot_words();
        d[D_ORDER].store(
            layout::order_word(snap.targets().iter().map(|t| t.slot)),
            Ordering::Relaxed,
        );
        d[D_STATUS].store(
            layout::status(self.gen, self.count, State::Undecided),
            Ordering::SeqCst,
        );
        if P::DURABLE {
            // One persist of the header, status included, and the entries in use (§2.3.2:
            // "the descriptor be persisted before entering Phase 1"); later lines hold nothing
            // of this generation. No word refers to it before the fence (module doc).
            let start = inner.desc_bytes(self.index).start;
            let used = (DESCRIPTOR_HEADER_WORDS + self.count * ENTRY_WORDS) * WORD_BYTES;
            inner.persist.flush(&inner.region, start..start + used);
            inner.persist.fence();
        }
        forest_core::pause::pause_point("pmwcas:descriptor-persisted");
        let succeeded = inner
            .run(self.index, self.gen, &snap, 0)
            .expect("an owner's descriptor is not reused while it runs");
        inner.counters().attempt(snap.len, succeeded);
        forest_core::pause::pause_point("pmwcas:phase2-done");
        self.finished = true;
        // Memory its policies free (old values after success, new after failure) must wait
        // for the pool's epoch; a descriptor freeing nothing comes back at once (`reuse.rs`).
        let frees_memory = if succeeded {
            frees_on_success
        } else {
            frees_on_failure
        };
        inner.retire(self.index, self.gen, self.guard, frees_memory);
        Ok(succeeded)
    }

    /// A volatile single-word PMwCAS without policy (module doc): a helping read and a CAS.
    fn execute_single(&mut self) -> bool {
        let inner = &self.pool.inner;
        let (address, expected, new) = (
            self.field(0, E_ADDRESS),
            self.field(0, E_EXPECTED),
            self.field(0, E_NEW),
        );
        let succeeded = match inner.target_word(address) {
            Some(word) => inner.volatile_cas(word, expected, new),
            None => false, // `add_word` admits target words only
        };
        inner.counters().attempt(1, succeeded);
        self.finished = true;
        inner.free_unpublished(self.index, self.gen, false);
        succeeded
    }

    /// `Discard(descriptor)`: cancels the PMwCAS; no word changes, memory activated into it is
    /// freed.
    pub fn discard(mut self) {
        self.discard_now();
    }

    fn discard_now(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let inner = &self.pool.inner;
        let recycler =
            inner.recycler(self.slot_words()[layout::D_RECYCLER].load(Ordering::Relaxed));
        let mut frees = self.live() & self.free_one & self.new_set;
        while frees != 0 {
            let i = frees.trailing_zeros() as usize;
            frees &= frees - 1;
            let new = self.field(i, E_NEW);
            if new != 0 {
                recycler.free_by(
                    new,
                    crate::pool::descriptor_tag(self.index, self.gen),
                    &|r| inner.persist_bytes(r),
                );
            }
        }
        inner.free_unpublished(self.index, self.gen, P::DURABLE && self.activated != 0);
    }
}

impl<P: Persist> Drop for Descriptor<'_, P> {
    fn drop(&mut self) {
        self.discard_now();
    }
}
