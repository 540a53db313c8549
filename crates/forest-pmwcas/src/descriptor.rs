//! The descriptor and its §2.3 API: `AllocateDescriptor` (`Pool::allocate_descriptor`),
//! `AddWord`, `ReserveEntry`, `RemoveWord`, `PMwCAS` ([`Descriptor::execute`]) and `Discard`
//! (BzTree Fig. 1, §2.3, §6.1, §6.3).
//!
//! The owner builds the entries in its handle; nothing is written to the pool until the entries
//! are published (at execute, or when memory is activated into a slot), so no other thread can
//! see a half-built descriptor. Publication (durable mode) writes the entries, the address
//! order and the status `Undecided`, then flushes them all and fences once: a crash before the
//! fence may leave the status durable without the entries, but then no word refers to this
//! generation yet, so recovery of an `Undecided` descriptor touches only words that hold its
//! references and frees only activated entries (`recovery.rs`). A durable `Succeeded` or
//! `Failed` status, or a durable reference, implies the generation's entries are durable.
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

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    address: u64,
    expected: u64,
    new: u64,
    policy: Policy,
    new_set: bool,
    activated: bool,
}

/// A descriptor being built by its owner (Fig. 1). Execute or discard it; dropping it
/// discards it.
pub struct Descriptor<'a, P: Persist> {
    pool: &'a Pool<P>,
    guard: &'a Guard,
    index: u32,
    gen: u64,
    entries: [Entry; ENTRIES_MAX],
    count: usize,
    activated_any: bool,
    finished: bool,
}

impl<P: Persist> std::fmt::Debug for Descriptor<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("index", &self.index)
            .field("gen", &self.gen)
            .field("entries", &&self.entries[..self.count])
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
            entries: [Entry::default(); ENTRIES_MAX],
            count: 0,
            activated_any: false,
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

    fn push(&mut self, entry: Entry) -> Result<Slot, Error> {
        if entry.address < layout::TOMBSTONE
            && self.entries[..self.count]
                .iter()
                .any(|e| e.address == entry.address)
        {
            return Err(Error::DuplicateAddress {
                offset: entry.address,
            });
        }
        if self.count == ENTRIES_MAX {
            return Err(Error::TooManyEntries { max: ENTRIES_MAX });
        }
        self.entries[self.count] = entry;
        self.count += 1;
        Ok(Slot(self.count - 1))
    }

    /// `AddWord(address, expected, desired)`: change `word` from `expected` to `new`.
    pub fn add_word(&mut self, word: &Word, expected: u64, new: u64) -> Result<(), Error> {
        Self::check_value(expected)?;
        Self::check_value(new)?;
        let address = self.pool.inner.target_offset(word)?;
        self.push(Entry {
            address,
            expected,
            new,
            policy: Policy::None,
            new_set: true,
            activated: false,
        })?;
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
        self.push(Entry {
            address,
            expected,
            new: 0,
            policy,
            new_set: false,
            activated: false,
        })
    }

    /// A memory-only entry (`FREE-ONE`): `free_on_success` (a node this PMwCAS retires) is
    /// freed if it succeeds, `free_on_failure` (a node it allocated) if it fails; 0 is none.
    pub fn add_memory(&mut self, free_on_success: u64, free_on_failure: u64) -> Result<(), Error> {
        Self::check_value(free_on_success)?;
        Self::check_value(free_on_failure)?;
        self.push(Entry {
            address: layout::MEMORY_ONLY,
            expected: free_on_success,
            new: free_on_failure,
            policy: Policy::FreeOne,
            new_set: true,
            activated: false,
        })?;
        Ok(())
    }

    /// A memory-only entry whose new value (memory freed if the PMwCAS fails) is activated
    /// later through [`Descriptor::set_new`] (§6.1).
    pub fn reserve_memory(&mut self) -> Result<Slot, Error> {
        self.push(Entry {
            address: layout::MEMORY_ONLY,
            expected: 0,
            new: 0,
            policy: Policy::FreeOne,
            new_set: false,
            activated: false,
        })
    }

    /// Fills a reserved slot's new value. For a `FREE-ONE` slot this is the activation of
    /// §6.1: when it returns (durable mode) the value is durably the descriptor's, and
    /// recovery frees it if the PMwCAS never succeeds.
    pub fn set_new(&mut self, slot: Slot, value: u64) -> Result<(), Error> {
        Self::check_value(value)?;
        let Slot(i) = slot;
        if i >= self.count || self.entries[i].address == layout::TOMBSTONE {
            return Err(Error::BadSlot { slot: i });
        }
        if self.entries[i].activated {
            return Err(Error::SlotActivated { slot: i });
        }
        self.entries[i].new = value;
        self.entries[i].new_set = true;
        if P::DURABLE && self.entries[i].policy == Policy::FreeOne && value != 0 {
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
        let i = self.entries[..self.count]
            .iter()
            .position(|e| e.address == address)
            .ok_or(Error::NoSuchWord { offset: address })?;
        if self.entries[i].activated {
            return Err(Error::EntryActivated { offset: address });
        }
        if self.activated_any {
            self.entries[i] = Entry {
                address: layout::TOMBSTONE,
                ..Entry::default()
            };
        } else {
            self.entries.copy_within(i + 1..self.count, i);
            self.count -= 1;
        }
        Ok(())
    }

    /// Live entries (targets and memory-only).
    pub fn len(&self) -> usize {
        self.entries[..self.count]
            .iter()
            .filter(|e| e.address != layout::TOMBSTONE)
            .count()
    }

    /// Whether the descriptor has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write_entry(&self, i: usize) {
        let d = self.pool.inner.desc(self.index);
        let e = &self.entries[i];
        let w = DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS;
        d[w + E_ADDRESS].store(e.address, Ordering::Relaxed);
        d[w + E_EXPECTED].store(e.expected, Ordering::Relaxed);
        d[w + E_NEW].store(e.new, Ordering::Relaxed);
        d[w + E_POLICY].store(
            layout::policy_word(e.policy.code(), e.activated, self.gen),
            Ordering::Relaxed,
        );
    }

    /// Durable activation of entry `i` (module doc).
    fn activate(&mut self, i: usize) {
        let inner = &self.pool.inner;
        self.write_entry(i);
        let entry_bytes = self.entry_bytes(i);
        let status_bytes =
            inner.desc_bytes(self.index).start..inner.desc_bytes(self.index).start + WORD_BYTES;
        inner.persist.flush(&inner.region, status_bytes);
        inner.persist.flush(&inner.region, entry_bytes.clone());
        inner.persist.fence();
        self.entries[i].activated = true;
        self.activated_any = true;
        self.write_entry(i);
        inner.persist.flush(&inner.region, entry_bytes);
        inner.persist.fence();
        forest_core::pause::pause_point("pmwcas:activation-persisted");
    }

    fn entry_bytes(&self, i: usize) -> std::ops::Range<usize> {
        let start = self.pool.inner.desc_bytes(self.index).start
            + (DESCRIPTOR_HEADER_WORDS + i * ENTRY_WORDS) * WORD_BYTES;
        start..start + ENTRY_WORDS * WORD_BYTES
    }

    /// `PMwCAS(descriptor)`: executes the operation; `Ok(true)` if every word changed,
    /// `Ok(false)` if none did (§2.3). An unset reserved slot is an error and discards it.
    #[inline]
    pub fn execute(mut self) -> Result<bool, Error> {
        // Inlined, so the descriptor (about 500 bytes of entries) is run where the caller
        // built it rather than copied into this call.
        self.execute_in_place()
    }

    fn execute_in_place(&mut self) -> Result<bool, Error> {
        if let Some(i) = self.entries[..self.count]
            .iter()
            .position(|e| e.address != layout::TOMBSTONE && !e.new_set)
        {
            self.discard_now();
            return Err(Error::SlotUnset { slot: i });
        }
        let inner = &self.pool.inner;
        if !P::DURABLE
            && self.count == 1
            && self.entries[0].address < layout::TOMBSTONE
            && self.entries[0].policy == Policy::None
        {
            return Ok(self.execute_single());
        }
        let d = inner.desc(self.index);
        for i in 0..self.count {
            self.write_entry(i);
        }
        let mut targets: [(u64, usize); ENTRIES_MAX] = [(0, 0); ENTRIES_MAX];
        let mut target_count = 0;
        for (i, e) in self.entries[..self.count].iter().enumerate() {
            if e.address < layout::TOMBSTONE {
                targets[target_count] = (e.address, i);
                target_count += 1;
            }
        }
        targets[..target_count].sort_unstable();
        let slots: [usize; ENTRIES_MAX] = std::array::from_fn(|k| targets[k].1);
        d[D_ORDER].store(
            layout::order_word(&slots[..target_count]),
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
        // The owner's targets as it wrote them: no read-back of the lines just flushed.
        let mut snap = Snapshot {
            targets: [Target::default(); ENTRIES_MAX],
            len: target_count,
            count: self.count,
        };
        for (k, &(address, slot)) in targets[..target_count].iter().enumerate() {
            let e = &self.entries[slot];
            snap.targets[k] = Target {
                slot,
                address,
                expected: e.expected,
                new: e.new,
            };
        }
        let succeeded = inner
            .run(self.index, self.gen, &snap, 0)
            .expect("an owner's descriptor is not reused while it runs");
        inner.counters().attempt(target_count, succeeded);
        forest_core::pause::pause_point("pmwcas:phase2-done");
        self.finished = true;
        // Memory its policies free (old values after success, new after failure) must wait
        // for the pool's epoch; a descriptor freeing nothing comes back at once (`reuse.rs`).
        let frees_memory = self.entries[..self.count].iter().any(|e| {
            e.policy == Policy::FreeOne
                && e.address != layout::TOMBSTONE
                && (if succeeded { e.expected } else { e.new }) != 0
        });
        inner.retire(self.index, self.gen, self.guard, frees_memory);
        Ok(succeeded)
    }

    /// A volatile single-word PMwCAS without policy (module doc): a helping read and a CAS.
    fn execute_single(&mut self) -> bool {
        let inner = &self.pool.inner;
        let e = self.entries[0];
        let succeeded = match inner.target_word(e.address) {
            Some(word) => inner.volatile_cas(word, e.expected, e.new),
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
            inner.recycler(inner.desc(self.index)[layout::D_RECYCLER].load(Ordering::Relaxed));
        for e in &self.entries[..self.count] {
            if e.policy == Policy::FreeOne
                && e.new_set
                && e.new != 0
                && e.address != layout::TOMBSTONE
            {
                recycler.free_by(
                    e.new,
                    crate::pool::descriptor_tag(self.index, self.gen),
                    &|r| inner.persist_bytes(r),
                );
            }
        }
        inner.free_unpublished(self.index, self.gen, P::DURABLE && self.activated_any);
    }
}

impl<P: Persist> Drop for Descriptor<'_, P> {
    fn drop(&mut self) {
        self.discard_now();
    }
}
