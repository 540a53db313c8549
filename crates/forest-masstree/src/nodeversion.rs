//! The per-node version word of Masstree §4.4–4.6 (Fig. 3; masstree-beta's `nodeversion.hh`).
//!
//! Writers lock a node by setting `LOCKED`, mark it dirty (`INSERTING` or `SPLITTING`) before
//! they create states a reader must not trust, and on unlock bump `vinsert` or `vsplit` and
//! clear the dirty bits. Readers never write: they take a [`NodeVersion::stable`] snapshot
//! (no dirty bit), read, and [`NodeVersion::has_changed`] tells them whether to retry.
//!
//! Invariants:
//! - `LOCKED`, `INSERTING` and `SPLITTING` are set only by the lock holder; the dirty bits only
//!   while `LOCKED` is set.
//! - `ISBORDER` never changes after a node is created; `ISROOT` is cleared only under the lock
//!   while the node is marked splitting.
//! - Memory ordering follows the seqlock pattern: a dirty mark is a relaxed store followed by a
//!   release fence, so a reader whose acquire fence sees any write made after the mark also
//!   sees the mark when it re-reads the version.
//!
//! Choice: the word is 64 bits (the paper's is 32). `vinsert` (16 bits) and `vsplit` (42 bits)
//! form one counter: `vinsert`'s carry flows into `vsplit`, as in masstree-beta. So the word
//! repeats only after 2^58 inserts, never in practice (the paper's footnote 3: a reader stalled
//! across a wrap would pass its validation), and `vsplit` repeats only after 2^42 splits. A
//! carry looks like a split to a reader, which then just retries from further up: once per
//! 65,536 inserts into one node.

use forest_core::sync::atomic::{fence, AtomicU64, Ordering};
use forest_core::sync::spin_loop;

/// Claimed by a writer (update, insert, split, remove).
pub const LOCKED: u64 = 1;
/// Dirty: an insert is rearranging the node.
pub const INSERTING: u64 = 1 << 1;
/// Dirty: the node is splitting.
pub const SPLITTING: u64 = 1 << 2;
/// The node was removed from the tree (§4.6.5); readers retry from the root.
pub const DELETED: u64 = 1 << 3;
/// The node is the root of its layer's B+tree.
pub const ISROOT: u64 = 1 << 4;
/// The node is a border node (else interior).
pub const ISBORDER: u64 = 1 << 5;
/// Lowest bit of the `vinsert` counter.
pub const VINSERT_LOW: u64 = 1 << 6;
/// The `vinsert` counter's bits (16 bits; their carry goes into `vsplit`).
pub const VINSERT_MASK: u64 = 0xffff << 6;
/// Lowest bit of the `vsplit` counter.
pub const VSPLIT_LOW: u64 = 1 << 22;
/// The `vsplit` counter's bits (the rest of the word).
pub const VSPLIT_MASK: u64 = !((1 << 22) - 1);
const DIRTY: u64 = INSERTING | SPLITTING;
/// Written into a node's version word as it is freed, in debug builds, so that a reader that
/// still holds the node (a use-after-free) trips an assertion instead of reading garbage.
/// No live word is all ones: its 58-bit counter never reaches its maximum.
pub const POISON: u64 = u64::MAX;

const _: () = assert!(VINSERT_MASK & VSPLIT_MASK == 0);
const _: () = assert!(VINSERT_MASK & (VINSERT_LOW - 1) == 0);
// `vsplit` starts where `vinsert` ends, so the carry lands in it.
const _: () = assert!(VINSERT_MASK + VINSERT_LOW == VSPLIT_LOW);

/// A node's version word.
#[derive(Debug)]
pub struct NodeVersion {
    word: AtomicU64,
}

impl NodeVersion {
    /// A version with the given bits (`ISBORDER`, `ISROOT`, ...).
    pub fn new(bits: u64) -> Self {
        Self {
            word: AtomicU64::new(bits),
        }
    }

    /// The current word, unordered; for writers that hold the lock and for immutable bits.
    #[inline]
    pub fn raw(&self) -> u64 {
        self.word.load(Ordering::Relaxed)
    }

    /// `stableversion` (Fig. 4): waits until no writer has the node dirty and returns the word.
    #[inline]
    pub fn stable(&self) -> u64 {
        loop {
            let v = self.word.load(Ordering::Acquire);
            debug_assert_ne!(v, POISON, "read of a freed node");
            if v & DIRTY == 0 {
                return v;
            }
            spin_loop();
        }
    }

    /// Whether the node changed since the snapshot `old` in anything but the lock bit
    /// (`n.version ⊕ v > locked`, Fig. 6 and 7). Orders the reader's earlier loads first.
    #[inline]
    pub fn has_changed(&self, old: u64) -> bool {
        fence(Ordering::Acquire);
        (self.word.load(Ordering::Relaxed) ^ old) > LOCKED
    }

    /// Takes the node's lock (a spinlock, §4.5). Returns the locked word.
    #[inline]
    pub fn lock(&self) -> u64 {
        loop {
            let v = self.word.load(Ordering::Relaxed);
            debug_assert_ne!(v, POISON, "lock of a freed node");
            if v & LOCKED == 0
                && self
                    .word
                    .compare_exchange_weak(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return v | LOCKED;
            }
            spin_loop();
        }
    }

    /// Locks the node if no writer holds it (one compare-exchange, no spin): the lock word
    /// as locked, or `None` when another writer holds it. Lets a writer count lock waits.
    #[inline]
    pub fn try_lock(&self) -> Option<u64> {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert_ne!(v, POISON, "lock of a freed node");
        if v & LOCKED != 0 {
            return None;
        }
        self.word
            .compare_exchange(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| v | LOCKED)
    }

    #[inline]
    fn mark(&self, bit: u64) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & LOCKED != 0, "marking an unlocked node");
        self.word.store(v | bit, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Marks the locked node as inserting: readers that overlap retry, and unlock bumps `vinsert`.
    #[inline]
    pub fn mark_insert(&self) {
        self.mark(INSERTING);
    }

    /// Marks the locked node as splitting: unlock bumps `vsplit`.
    #[inline]
    pub fn mark_split(&self) {
        self.mark(SPLITTING);
    }

    /// Clears `ISROOT` of the locked, splitting node (it got a parent).
    #[inline]
    pub fn clear_root(&self) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & LOCKED != 0, "clear_root on an unlocked node");
        debug_assert!(v & SPLITTING != 0, "clear_root outside a split");
        self.word.store(v & !ISROOT, Ordering::Relaxed);
    }

    /// Marks the locked, dirty node deleted (§4.6.5): readers that reach it retry.
    #[inline]
    pub fn mark_deleted(&self) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & LOCKED != 0, "mark_deleted on an unlocked node");
        debug_assert!(v & DIRTY != 0, "mark_deleted outside a split or insert");
        self.word.store(v | DELETED, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Sets `ISROOT` on the locked node: it becomes its layer's root when the root above it
    /// collapses (§4.6.5). Readers that overlap see the word change and retry locally.
    #[inline]
    pub fn mark_root(&self) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & LOCKED != 0, "mark_root on an unlocked node");
        self.word.store(v | ISROOT, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Overwrites the word with [`POISON`] just before the node is freed (debug builds).
    /// `&mut`: a live node's word is never poisoned (its `ISBORDER` bit must not change).
    pub fn poison(&mut self) {
        self.word.store(POISON, Ordering::Relaxed);
    }

    /// Releases the lock, bumping `vinsert` / `vsplit` for each dirty bit set. Plain adds:
    /// `vinsert`'s carry goes into `vsplit` (module doc).
    #[inline]
    pub fn unlock(&self) {
        let v = self.word.load(Ordering::Relaxed);
        debug_assert!(v & LOCKED != 0, "unlocking an unlocked node");
        let mut n = v;
        if v & INSERTING != 0 {
            n = n.wrapping_add(VINSERT_LOW);
        }
        if v & SPLITTING != 0 {
            n = n.wrapping_add(VSPLIT_LOW);
        }
        self.word
            .store(n & !(LOCKED | INSERTING | SPLITTING), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn unlock_bumps_the_right_counter() {
        // Goal: inserts bump vinsert only, splits vsplit only, and a plain lock bumps nothing.
        let nv = NodeVersion::new(ISBORDER | ISROOT);
        let v0 = nv.stable();
        nv.lock();
        nv.unlock();
        assert!(!nv.has_changed(v0));
        nv.lock();
        nv.mark_insert();
        nv.unlock();
        let v1 = nv.stable();
        assert!(nv.has_changed(v0) || v1 != v0);
        assert_eq!((v1 ^ v0) & VSPLIT_MASK, 0);
        assert_ne!((v1 ^ v0) & VINSERT_MASK, 0);
        nv.lock();
        nv.mark_split();
        nv.clear_root();
        nv.unlock();
        let v2 = nv.stable();
        assert_ne!((v2 ^ v1) & VSPLIT_MASK, 0);
        assert_eq!(v2 & ISROOT, 0);
        assert_ne!(v2 & ISBORDER, 0);
    }

    #[test]
    fn vinsert_carries_into_vsplit() {
        // Goal: 2^16 inserts, which wrap the 16-bit vinsert, still change the word (a reader
        // stalled across them fails validation) and change vsplit as a split would; the flag
        // bits stay. Method: count 2^16 inserts on one word.
        let nv = NodeVersion::new(ISBORDER | ISROOT);
        let v0 = nv.stable();
        for _ in 0..(1u32 << 16) {
            nv.lock();
            nv.mark_insert();
            nv.unlock();
        }
        let v1 = nv.stable();
        assert!(nv.has_changed(v0));
        assert_eq!(v1 & VINSERT_MASK, v0 & VINSERT_MASK);
        assert_eq!(v1 & VSPLIT_MASK, (v0 & VSPLIT_MASK) + VSPLIT_LOW);
        assert_eq!(v1 & (VINSERT_LOW - 1), ISBORDER | ISROOT);
    }
}
