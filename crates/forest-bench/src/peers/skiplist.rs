//! `skiplist`: crossbeam-skiplist's `SkipMap`, the latch-free skip list Bw-tree §VI compares
//! against.
//!
//! `SkipMap::insert` replaces an entry by unlinking the old node and linking a new one, so a
//! concurrent get or scan can miss a key that is never absent (the kit's `stress_hot_keys`
//! shows it). The adapter therefore keeps each value in a [`Slot`], an epoch-managed atomic
//! pointer, as a user of the crate needing in-place updates would: upsert and update swap the
//! pointer of the existing entry, so only `remove` ever unlinks a key. Insert-if-absent is
//! `get_or_insert_with`. No write takes a lock.
//!
//! Invariants (the unsafe code relies on them):
//! - A slot's pointer is never null and points to a `Box<[u8]>` the slot owns.
//! - A pointer swapped out of a slot is destroyed with `defer_destroy` under the guard that
//!   swapped it, so a reader that loaded it under a pinned guard still reads valid memory.
//! - A pointer is loaded only by a thread holding an `Entry` of the slot's node. The map drops
//!   a node's value (the slot) only once no `Entry` of it is left, so a slot being dropped
//!   owns its current pointer outright.
//!
//! Linearizability: an upsert or update that swaps into an entry a concurrent remove has just
//! unlinked takes effect just before that remove (its value is then never observable), which
//! is a valid order since the swap lies within both calls.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};
use crossbeam_skiplist::SkipMap;
use forest_core::{check_entry, Index, IndexStats, Order, Result, Visitor};

use super::key::PeerKey;
use super::{copy_out, wrong_key_shape};

/// A value cell: an atomic pointer to the current value (see the module invariants).
pub struct Slot(Atomic<Box<[u8]>>);

impl Slot {
    fn new(value: &[u8]) -> Self {
        Slot(Atomic::new(value.into()))
    }

    /// The current value, valid while `guard` is pinned.
    #[inline]
    fn load<'g>(&self, guard: &'g Guard) -> &'g [u8] {
        let current = self.0.load(Ordering::Acquire, guard);
        // SAFETY: the pointer is never null and its pointee is destroyed only through
        // `defer_destroy` after a swap, which waits for `guard` to be unpinned (invariants 1
        // and 2).
        unsafe { current.deref() }
    }

    /// Replaces the value; the old one is freed once no reader can hold it.
    #[inline]
    fn store(&self, value: &[u8], guard: &Guard) {
        let old = self
            .0
            .swap(Owned::new(value.into()), Ordering::AcqRel, guard);
        // SAFETY: `old` is now unreachable from the slot; readers that loaded it are pinned,
        // and `defer_destroy` waits for them (invariant 2). Each old pointer is swapped out
        // exactly once, so it is destroyed once.
        unsafe { guard.defer_destroy(old) };
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: the map drops a slot only when no `Entry` of its node is left, and pointers
        // are loaded only under an `Entry` (invariant 3), so no thread can reach the current
        // pointer; `unprotected` is sound without concurrent access, and the pointer is
        // non-null and owned by the slot (invariant 1).
        unsafe {
            let current = self.0.load(Ordering::Acquire, epoch::unprotected());
            drop(current.into_owned());
        }
    }
}

/// A `SkipMap` behind the `Index` trait.
pub struct SkipList<K: PeerKey> {
    map: SkipMap<K, Slot>,
}

impl<K: PeerKey> Default for SkipList<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PeerKey> SkipList<K> {
    /// An empty map.
    pub fn new() -> Self {
        Self {
            map: SkipMap::new(),
        }
    }
}

impl<K: PeerKey> Index for SkipList<K> {
    fn name(&self) -> &'static str {
        "skiplist"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        K::with_probe(key, |probe| match self.map.get(probe) {
            Some(entry) => {
                let guard = epoch::pin();
                copy_out(entry.value().load(&guard), out);
                true
            }
            None => false,
        })
        .unwrap_or(false)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let mut inserted = false;
        self.map.get_or_insert_with(owned, || {
            inserted = true;
            Slot::new(value)
        });
        Ok(inserted)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        // Existing keys (the common case in the workloads) need no key allocation.
        let swapped = K::with_probe(key, |probe| match self.map.get(probe) {
            Some(entry) => {
                entry.value().store(value, &epoch::pin());
                true
            }
            None => false,
        })
        .ok_or_else(|| wrong_key_shape::<K>(key))?;
        if swapped {
            return Ok(());
        }
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let mut inserted = false;
        let entry = self.map.get_or_insert_with(owned, || {
            inserted = true;
            Slot::new(value)
        });
        if !inserted {
            entry.value().store(value, &epoch::pin());
        }
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        K::with_probe(key, |probe| match self.map.get(probe) {
            Some(entry) => {
                entry.value().store(value, &epoch::pin());
                true
            }
            None => false,
        })
        .ok_or_else(|| wrong_key_shape::<K>(key))
    }

    fn remove(&self, key: &[u8]) -> bool {
        K::with_probe(key, |probe| self.map.remove(probe).is_some()).unwrap_or(false)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        K::with_bounds(lower, upper, |bounds| {
            let Some(range) = bounds else { return };
            let guard = epoch::pin();
            let mut emit = |entry: crossbeam_skiplist::map::Entry<'_, K, Slot>| {
                let value = entry.value().load(&guard);
                entry.key().with_bytes(|k| visit(k, value))
            };
            match order {
                Order::Ascending => {
                    for entry in self.map.range::<K::Probe, _>(range) {
                        if emit(entry).is_break() {
                            return;
                        }
                    }
                }
                Order::Descending => {
                    for entry in self.map.range::<K::Probe, _>(range).rev() {
                        if emit(entry).is_break() {
                            return;
                        }
                    }
                }
            }
        });
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            key_count: self.map.len() as u64,
            ..IndexStats::default()
        }
    }
}
