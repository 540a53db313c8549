//! Border nodes (§4.2, Fig. 2): 15 slots of key slice, `keylen`, key suffix ("stored beside"
//! the node, one epoch-managed block per slot) and link-or-value, ordered by the permutation.
//!
//! Invariants:
//! - A slot's fields change only under the node's lock. A slot listed in the permutation is
//!   complete before the permutation that lists it is published (release store), so readers
//!   that load the permutation (acquire) see whole keys (§4.6.2).
//! - All keys with the same slice live in one border node; `lowkey` (the smallest slice the
//!   node is responsible for, 0 for a layer's leftmost node) never changes (§4.6.4).
//! - A value or suffix block is owned by exactly one slot; moving a slot moves the pointer
//!   (swap to null at the source), and replaced blocks are freed through the epoch.
//! - `has_removed` is set once a slot was freed by a remove; inserts into such a node mark it
//!   inserting, so a reader holding a stale slot index retries (§4.6.5).
//! - `prev` is protected by the previous node's lock, `next` by this node's lock.

use crossbeam_epoch::{Atomic, Guard, Shared};
use forest_core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use crate::block;
use crate::key::{class_of_keylen, slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::node::NodeBase;
use crate::permuter::{Permuter, WIDTH};

/// A heap block holding a value or a key suffix.
pub type Bytes = crate::block::Block;

/// A border node.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Border {
    pub base: NodeBase,
    pub permutation: AtomicU64,
    pub has_removed: AtomicBool,
    pub lowkey: u64,
    pub keyslice: [AtomicU64; WIDTH],
    pub keylen: [AtomicU8; WIDTH],
    pub value: [Atomic<Bytes>; WIDTH],
    pub suffix: [Atomic<Bytes>; WIDTH],
    pub layer: [AtomicPtr<NodeBase>; WIDTH],
    pub next: AtomicPtr<Border>,
    pub prev: AtomicPtr<Border>,
}

/// What a reader found for a key in one border node.
pub enum Lookup<'g> {
    NotFound,
    Value(Shared<'g, Bytes>),
    Layer(*mut NodeBase),
    Unstable,
}

/// Where a locked writer stands in a border node.
pub enum Found {
    /// The key is at this position / slot.
    Exact(usize, usize),
    /// A layer link for the key's slice, in this slot.
    Layer(usize),
    /// Another long key with the same slice: a new layer is needed (§4.6.3).
    Conflict(usize),
    /// Absent; it would go at this position.
    Absent(usize),
}

impl Border {
    /// An empty border node with the given version bits and lowkey.
    pub fn new(version_bits: u64, lowkey: u64) -> Self {
        Self {
            base: NodeBase::new(version_bits),
            permutation: AtomicU64::new(Permuter::empty().value()),
            has_removed: AtomicBool::new(false),
            lowkey,
            keyslice: std::array::from_fn(|_| AtomicU64::new(0)),
            keylen: std::array::from_fn(|_| AtomicU8::new(0)),
            value: std::array::from_fn(|_| Atomic::null()),
            suffix: std::array::from_fn(|_| Atomic::null()),
            layer: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            next: AtomicPtr::new(std::ptr::null_mut()),
            prev: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The current permutation.
    pub fn permutation(&self) -> Permuter {
        Permuter::from_value(self.permutation.load(Ordering::Acquire))
    }

    /// Reader-side search (Fig. 7's "extract link_or_value"); the caller validates the
    /// version afterwards. `rest` is the key from this layer's slice on.
    pub fn lookup<'g>(&self, slice: u64, class: u8, rest: &[u8], guard: &'g Guard) -> Lookup<'g> {
        let perm = self.permutation();
        for i in 0..perm.size() {
            let s = perm.get(i);
            if self.keyslice[s].load(Ordering::Acquire) != slice {
                continue;
            }
            let kl = self.keylen[s].load(Ordering::Acquire);
            if class_of_keylen(kl) != class {
                continue;
            }
            return match kl {
                0..=8 => Lookup::Value(self.value[s].load(Ordering::Acquire, guard)),
                KEYLEN_SUFFIX => {
                    let suf = self.suffix[s].load(Ordering::Acquire, guard);
                    // SAFETY: suffix blocks are freed only through the epoch `guard` pins.
                    match unsafe { suf.as_ref() } {
                        Some(b) if block::bytes(b) == &rest[SLICE_BYTES..] => {
                            Lookup::Value(self.value[s].load(Ordering::Acquire, guard))
                        }
                        Some(_) => Lookup::NotFound,
                        None => Lookup::Unstable,
                    }
                }
                KEYLEN_LAYER => Lookup::Layer(self.layer[s].load(Ordering::Acquire)),
                _ => Lookup::Unstable,
            };
        }
        Lookup::NotFound
    }

    /// Reader-side: the layer link for `slice`, if the node holds one (the caller validates).
    pub fn layer_link(&self, slice: u64, _guard: &Guard) -> Option<*mut NodeBase> {
        let perm = self.permutation();
        (0..perm.size()).map(|i| perm.get(i)).find_map(|s| {
            (self.keyslice[s].load(Ordering::Acquire) == slice
                && self.keylen[s].load(Ordering::Acquire) == KEYLEN_LAYER)
                .then(|| self.layer[s].load(Ordering::Acquire))
        })
    }

    /// Writer-side search; the node is locked.
    pub fn find_locked(&self, slice: u64, class: u8, rest: &[u8], guard: &Guard) -> Found {
        debug_assert!(self.base.version.raw() & crate::nodeversion::LOCKED != 0);
        let perm = self.permutation();
        for i in 0..perm.size() {
            let s = perm.get(i);
            let ks = self.keyslice[s].load(Ordering::Relaxed);
            let kl = self.keylen[s].load(Ordering::Relaxed);
            let c = class_of_keylen(kl);
            if (ks, c) < (slice, class) {
                continue;
            }
            if (ks, c) > (slice, class) {
                return Found::Absent(i);
            }
            return match kl {
                KEYLEN_LAYER => Found::Layer(s),
                KEYLEN_SUFFIX => {
                    let suf = self.suffix[s].load(Ordering::Relaxed, guard);
                    // SAFETY: the slot's suffix is live while the lock is held.
                    let same = unsafe { suf.as_ref() }
                        .is_some_and(|b| block::bytes(b) == &rest[SLICE_BYTES..]);
                    if same {
                        Found::Exact(i, s)
                    } else {
                        Found::Conflict(s)
                    }
                }
                _ => Found::Exact(i, s),
            };
        }
        Found::Absent(perm.size())
    }

    /// Writes a key and value into free slot `s`; the node is locked and `s` is not listed.
    pub fn write_slot(&self, s: usize, rest: &[u8], value: &[u8], guard: &Guard) {
        self.keyslice[s].store(slice_of(rest), Ordering::Relaxed);
        let (kl, suf) = if rest.len() <= SLICE_BYTES {
            (rest.len() as u8, Shared::null())
        } else {
            let b = block::new(&rest[SLICE_BYTES..]);
            (KEYLEN_SUFFIX, b.into_shared(guard))
        };
        self.keylen[s].store(kl, Ordering::Relaxed);
        let old = self.suffix[s].swap(suf, Ordering::AcqRel, guard);
        retire(old, guard);
        let old = self.value[s].swap(block::new(value), Ordering::AcqRel, guard);
        retire(old, guard);
        self.layer[s].store(std::ptr::null_mut(), Ordering::Relaxed);
    }

    /// Inserts a key at position `pos` of a locked node with a free slot (§4.6.2).
    pub fn insert_at(&self, pos: usize, rest: &[u8], value: &[u8], guard: &Guard) {
        let perm = self.permutation();
        let (perm, s) = perm.insert_from_back(pos);
        if self.has_removed.load(Ordering::Relaxed) {
            // The slot may have held a key a reader still looks at (§4.6.5).
            self.base.version.mark_insert();
        }
        self.write_slot(s, rest, value, guard);
        self.permutation.store(perm.value(), Ordering::Release);
    }

    /// Moves slot `from_s` of this locked node to slot `to_s` of `to` (not yet visible).
    pub fn move_slot(&self, from_s: usize, to: &Border, to_s: usize, guard: &Guard) {
        to.keyslice[to_s].store(
            self.keyslice[from_s].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        to.keylen[to_s].store(
            self.keylen[from_s].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        let suf = self.suffix[from_s].swap(Shared::null(), Ordering::AcqRel, guard);
        to.suffix[to_s].store(suf, Ordering::Relaxed);
        let val = self.value[from_s].swap(Shared::null(), Ordering::AcqRel, guard);
        to.value[to_s].store(val, Ordering::Relaxed);
        to.layer[to_s].store(
            self.layer[from_s].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
}

/// Frees a replaced block once no pinned reader can hold it.
pub fn retire(old: Shared<'_, Bytes>, guard: &Guard) {
    if !old.is_null() {
        // SAFETY: `old` was swapped out of its slot, so no new reader can load it; readers
        // that did are pinned, and the epoch frees it after they unpin.
        unsafe { guard.defer_destroy(old) };
    }
}

impl Drop for Border {
    fn drop(&mut self) {
        // SAFETY: dropping needs exclusive access to the node, so no thread can read these
        // slots; each block is owned by one slot only (module invariants).
        let guard = unsafe { crossbeam_epoch::unprotected() };
        for s in 0..WIDTH {
            for a in [&self.value[s], &self.suffix[s]] {
                let p = a.swap(Shared::null(), Ordering::Relaxed, guard);
                if !p.is_null() {
                    // SAFETY: as above: the block is unreachable from any other slot.
                    drop(unsafe { p.into_owned() });
                }
            }
        }
    }
}
