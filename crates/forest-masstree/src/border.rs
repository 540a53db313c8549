//! Border nodes (§4.2, Fig. 2): `W` slots (the paper's 15; [`crate::permuter::WIDTH_MIN`]
//! to [`crate::permuter::WIDTH_MAX`]) of key slice, `keylen` and link-or-value, ordered by
//! the permutation. A key's suffix is stored beside the node, in the slot's value block
//! ([`crate::block`]: one epoch-managed block per slot holding suffix and value).
//!
//! Invariants:
//! - A slot's fields change only under the node's lock. A slot listed in the permutation is
//!   complete before the permutation that lists it is published (release store), so readers
//!   that load the permutation (acquire) see whole keys (§4.6.2).
//! - All keys with the same slice live in one border node; `lowkey` (the smallest slice the
//!   node is responsible for, 0 for a layer's leftmost node) never changes (§4.6.4).
//! - A block is owned by exactly one slot; moving a slot moves the pointer (null at the
//!   source), and replaced blocks are freed through the epoch.
//! - A listed slot with `keylen == KEYLEN_SUFFIX` has a block whose suffix is the key's bytes
//!   past the slice; other slots' blocks have an empty suffix. A null block in a listed slot
//!   is a slot in transition (a remove or a new layer): readers treat it as unstable or
//!   absent and their validation decides.
//! - `has_removed` is set once a slot was freed by a remove; inserts into such a node mark it
//!   inserting, so a reader holding a stale slot index retries (§4.6.5).
//! - `prev` is protected by the previous node's lock, `next` by this node's lock.
//! - Only a listed slot with `keylen == KEYLEN_LAYER` holds a layer link: removing the slot
//!   or moving it to a split's sibling clears it (crate::node: a link holds null or a live
//!   node).
//! - Without the permuter (`MasstreeConfig::permuter == false`, §6.2's "B-tree" before
//!   "+Permuter") the permutation is always the identity over `size` slots: the key at
//!   position `i` is in slot `i`, and slots `size..` are free with null blocks. An insert or a
//!   remove then shifts slots in place with the node marked inserting, so a reader that
//!   overlaps it fails validation (`vinsert` changes) and retries; a shift moves each block
//!   ([`BlockSlot::move_to`]: the source slot is nulled), so a block stays owned by one slot.
//!
//! Nodes and blocks are reached through [`crate::node`]'s references and
//! [`crate::block::BlockSlot`], so this module has no `unsafe`.

use crate::node::TreeGuard;
use forest_core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use crate::block::{self, Block, BlockSlot, SuffixStorage};
use crate::config::{MasstreeConfig, NodeSearch};
use crate::key::{class_of_keylen, slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::node::{BorderRef, Link, Making, NodeBase};
use crate::permuter::Permuter;

/// A border node of a tree whose border nodes have `W` slots and interior nodes fanout `F`.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Border<const W: usize, const F: usize> {
    pub base: NodeBase<W, F>,
    pub permutation: AtomicU64,
    pub has_removed: AtomicBool,
    pub lowkey: u64,
    pub keyslice: [AtomicU64; W],
    pub keylen: [AtomicU8; W],
    pub value: [BlockSlot; W],
    /// Layer links: the first border node of the layer below (`keylen == KEYLEN_LAYER`).
    pub layer: [Link<Border<W, F>>; W],
    pub next: Link<Border<W, F>>,
    pub prev: Link<Border<W, F>>,
}

/// What a new slot holds: a key and its value, or (§4.6.3, and always for long keys without
/// suffix storage) a link to a deeper layer.
#[derive(Clone, Copy)]
pub enum NewSlot<'a, const W: usize, const F: usize> {
    /// A key, from this layer's slice on, and its value.
    Key {
        rest: &'a [u8],
        value: block::Value<'a>,
    },
    /// A layer link for `slice` to the layer whose first border node is `link`.
    Layer {
        slice: u64,
        link: BorderRef<'a, W, F>,
    },
}

impl<const W: usize, const F: usize> NewSlot<'_, W, F> {
    /// The slice the slot is sorted by.
    pub fn slice(&self) -> u64 {
        match self {
            NewSlot::Key { rest, .. } => slice_of(rest),
            NewSlot::Layer { slice, .. } => *slice,
        }
    }
}

/// What a reader found for a key in one border node.
pub enum Lookup<'g, const W: usize, const F: usize> {
    NotFound,
    /// The key's slot, and its block (none: the slot is being emptied).
    Value(Option<&'g Block>),
    /// A layer link (none: a slot being rewritten, caught by validation).
    Layer(Option<BorderRef<'g, W, F>>),
    Unstable,
}

/// What a batched get's first pass found for a key in one border node ([`Border::probe`]),
/// with what its second pass compares to reuse it (`crate::get`).
#[derive(Clone, Copy)]
pub enum Probe<'g, const W: usize, const F: usize> {
    /// The key is absent under the permutation word `perm`.
    Absent { perm: u64 },
    /// The key's slot `slot` under `perm`, and its block, not read yet; `suffix`: the slot
    /// holds a key with a suffix, to compare with the key's own once the block is read.
    Value {
        perm: u64,
        slot: usize,
        block: block::BlockRef<'g>,
        suffix: bool,
    },
    /// A layer link.
    Layer(BorderRef<'g, W, F>),
    /// A slot in transition: the second pass looks the key up as a get does.
    Other,
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

impl<const W: usize, const F: usize> Border<W, F> {
    /// An empty border node with the header `base` and `lowkey`; only
    /// [`crate::node::NodeRegistry::alloc_border`] makes a header and a [`Making`] for it.
    pub fn new(base: NodeBase<W, F>, lowkey: u64, making: &Making) -> Self {
        Self {
            base,
            permutation: AtomicU64::new(Permuter::<W>::empty().value()),
            has_removed: AtomicBool::new(false),
            lowkey,
            keyslice: std::array::from_fn(|_| AtomicU64::new(0)),
            keylen: std::array::from_fn(|_| AtomicU8::new(0)),
            value: std::array::from_fn(|_| BlockSlot::empty(making)),
            layer: std::array::from_fn(|_| Link::null(making)),
            next: Link::null(making),
            prev: Link::null(making),
        }
    }

    /// The current permutation.
    pub fn permutation(&self) -> Permuter<W> {
        Permuter::from_value(self.permutation.load(Ordering::Acquire))
    }

    /// The position of the first key at or after `(slice, class)` in key order, and, when the
    /// key there has exactly that slice and class, the `keylen` read to decide it (read once,
    /// so a reader's later use agrees with the class it matched). Under the lock the answer is
    /// exact; a reader may get a wrong one from a changing node and then fails its validation.
    #[inline]
    fn position(
        &self,
        perm: Permuter<W>,
        slice: u64,
        class: u8,
        search: NodeSearch,
    ) -> (usize, Option<u8>) {
        let key_at = |i: usize| {
            let s = perm.get(i);
            let kl = self.keylen[s].load(Ordering::Acquire);
            (
                (
                    self.keyslice[s].load(Ordering::Acquire),
                    class_of_keylen(kl),
                ),
                kl,
            )
        };
        let target = (slice, class);
        let size = perm.size();
        match search {
            NodeSearch::Linear => {
                for i in 0..size {
                    let (k, kl) = key_at(i);
                    if k >= target {
                        return (i, (k == target).then_some(kl));
                    }
                }
                (size, None)
            }
            NodeSearch::Binary => {
                let (mut lo, mut hi) = (0, size);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if key_at(mid).0 < target {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                if lo == size {
                    return (size, None);
                }
                let (k, kl) = key_at(lo);
                (lo, (k == target).then_some(kl))
            }
        }
    }

    /// Reader-side search (Fig. 7's "extract link_or_value"); the caller validates the
    /// version afterwards. `rest` is the key from this layer's slice on.
    #[inline]
    pub fn lookup<'g>(
        &self,
        slice: u64,
        class: u8,
        rest: &[u8],
        search: NodeSearch,
        guard: &'g TreeGuard<'_>,
    ) -> Lookup<'g, W, F> {
        let perm = self.permutation();
        let (i, Some(kl)) = self.position(perm, slice, class, search) else {
            return Lookup::NotFound;
        };
        let s = perm.get(i);
        forest_core::pause::pause_point("get:slot-matched");
        match kl {
            0..=8 => Lookup::Value(self.value[s].load(Ordering::Acquire, guard)),
            KEYLEN_SUFFIX => match self.value[s].load(Ordering::Acquire, guard) {
                Some(b) if block::suffix(b) == suffix_of(rest) => Lookup::Value(Some(b)),
                Some(_) => Lookup::NotFound,
                None => Lookup::Unstable,
            },
            KEYLEN_LAYER => Lookup::Layer(self.layer[s].load(Ordering::Acquire, guard)),
            _ => Lookup::Unstable,
        }
    }

    /// Reader-side search for a batched get's first pass: as [`Self::lookup`], but the key's
    /// block is not read (its address can be prefetched) and the permutation word read is
    /// returned. The caller validates the version afterwards. A later reader that finds the
    /// same version, the same permutation word and (for a value) the same block in the slot
    /// knows the key's state has not changed since: inserts change the permutation, a
    /// removal empties the slot (before it, the permutation changes), a slot reused or moved
    /// marks the node, an update replaces the block, and no block is reused while pinned.
    #[inline]
    pub fn probe<'g>(
        &self,
        slice: u64,
        class: u8,
        search: NodeSearch,
        guard: &'g TreeGuard<'_>,
    ) -> Probe<'g, W, F> {
        let raw = self.permutation.load(Ordering::Acquire);
        let perm = Permuter::<W>::from_value(raw);
        let (i, Some(kl)) = self.position(perm, slice, class, search) else {
            return Probe::Absent { perm: raw };
        };
        let s = perm.get(i);
        match kl {
            0..=8 | KEYLEN_SUFFIX => match self.value[s].load_ref(Ordering::Acquire, guard) {
                Some(block) => Probe::Value {
                    perm: raw,
                    slot: s,
                    block,
                    suffix: kl == KEYLEN_SUFFIX,
                },
                None => Probe::Other,
            },
            KEYLEN_LAYER => match self.layer[s].load(Ordering::Acquire, guard) {
                Some(link) => Probe::Layer(link),
                None => Probe::Other,
            },
            _ => Probe::Other,
        }
    }

    /// Reader-side: the layer link for `slice`, if the node holds one (the caller validates;
    /// `Some(None)` is a slot being rewritten).
    pub fn layer_link<'g>(
        &self,
        slice: u64,
        guard: &'g TreeGuard<'_>,
    ) -> Option<Option<BorderRef<'g, W, F>>> {
        let perm = self.permutation();
        (0..perm.size()).map(|i| perm.get(i)).find_map(|s| {
            (self.keyslice[s].load(Ordering::Acquire) == slice
                && self.keylen[s].load(Ordering::Acquire) == KEYLEN_LAYER)
                .then(|| self.layer[s].load(Ordering::Acquire, guard))
        })
    }

    /// Reader-side: the layer link in the slot of a key longer than `slice`'s 8 bytes, if the
    /// node holds one (`Some(None)`: a slot being rewritten). Found by the node's search, as a
    /// get finds it; the caller validates the version afterwards.
    #[inline]
    pub fn layer_for<'g>(
        &self,
        slice: u64,
        search: NodeSearch,
        guard: &'g TreeGuard<'_>,
    ) -> Option<Option<BorderRef<'g, W, F>>> {
        let perm = self.permutation();
        match self.position(perm, slice, KEYLEN_SUFFIX, search) {
            (i, Some(KEYLEN_LAYER)) => Some(self.layer[perm.get(i)].load(Ordering::Acquire, guard)),
            _ => None,
        }
    }

    /// Writer-side search; the node is locked.
    pub fn find_locked(
        &self,
        slice: u64,
        class: u8,
        rest: &[u8],
        search: NodeSearch,
        guard: &TreeGuard<'_>,
    ) -> Found {
        debug_assert!(self.base.version.raw() & crate::nodeversion::LOCKED != 0);
        let perm = self.permutation();
        let (i, kl) = self.position(perm, slice, class, search);
        let Some(kl) = kl else {
            return Found::Absent(i);
        };
        let s = perm.get(i);
        match kl {
            KEYLEN_LAYER => Found::Layer(s),
            KEYLEN_SUFFIX => {
                let same = self.value[s]
                    .load(Ordering::Relaxed, guard)
                    .is_some_and(|b| block::suffix(b) == suffix_of(rest));
                if same {
                    Found::Exact(i, s)
                } else {
                    Found::Conflict(s)
                }
            }
            _ => Found::Exact(i, s),
        }
    }

    /// Writes a new slot's contents into free slot `s`; the node is locked and `s` is not
    /// listed (or the node is marked dirty).
    pub fn write_slot(
        &self,
        s: usize,
        new: NewSlot<'_, W, F>,
        storage: SuffixStorage,
        guard: &TreeGuard<'_>,
    ) {
        self.keyslice[s].store(new.slice(), Ordering::Relaxed);
        match new {
            NewSlot::Key { rest, value } => {
                let kl = if rest.len() <= SLICE_BYTES {
                    rest.len() as u8
                } else {
                    debug_assert_ne!(storage, SuffixStorage::Layers);
                    KEYLEN_SUFFIX
                };
                self.keylen[s].store(kl, Ordering::Relaxed);
                let b = block::new_value(suffix_of(rest), value, storage);
                // The release store publishes the block's bytes; the old block is retired.
                self.value[s].replace(Some(b), Ordering::Release, guard);
                self.layer[s].store(None, Ordering::Relaxed);
            }
            NewSlot::Layer { link, .. } => {
                self.keylen[s].store(KEYLEN_LAYER, Ordering::Relaxed);
                self.value[s].replace(None, Ordering::Relaxed, guard);
                self.layer[s].store(Some(link), Ordering::Release);
            }
        }
    }

    /// Inserts `new` at position `pos` of a locked node with a free slot (§4.6.2): with the
    /// permuter into the free slot at the back, published by one permutation store; without
    /// it (module invariants) into slot `pos`, after shifting the slots from `pos` on.
    pub fn insert_at(
        &self,
        pos: usize,
        new: NewSlot<'_, W, F>,
        config: &MasstreeConfig,
        guard: &TreeGuard<'_>,
    ) {
        let perm = self.permutation();
        let (perm, s) = if config.permuter {
            if self.has_removed.load(Ordering::Relaxed) {
                // The slot may have held a key a reader still looks at (§4.6.5).
                self.base.version.mark_insert();
            }
            perm.insert_from_back(pos)
        } else {
            let n = perm.size();
            self.base.version.mark_insert();
            self.shift_right(pos, n, guard);
            forest_core::pause::pause_point("border:shifted");
            (Permuter::<W>::identity(n + 1), pos)
        };
        self.write_slot(s, new, config.suffix, guard);
        self.permutation.store(perm.value(), Ordering::Release);
    }

    /// Removes the key or layer link at position `pos` of this locked node and retires its
    /// block: with the permuter by one permutation store (the slot is reused late, readers
    /// that hold it are caught by `has_removed`), without it by shifting the later slots left
    /// with the node marked inserting.
    pub fn remove_at(&self, pos: usize, permuter: bool, guard: &TreeGuard<'_>) {
        let perm = self.permutation();
        let s = perm.get(pos);
        if permuter {
            self.has_removed.store(true, Ordering::Relaxed);
            self.permutation
                .store(perm.remove(pos).value(), Ordering::Release);
            self.value[s].replace(None, Ordering::Release, guard);
            // A removed layer's node is retired: its slot must not name it (a layer slot is
            // removed with the node marked inserting, so a reader of the slot retries).
            self.layer[s].store(None, Ordering::Release);
            return;
        }
        let n = perm.size();
        debug_assert_eq!(s, pos, "a sorted node's permutation is the identity");
        self.base.version.mark_insert();
        self.value[pos].replace(None, Ordering::Release, guard);
        for i in pos..n - 1 {
            self.copy_slot(i + 1, i, guard);
        }
        // Slot n - 1's block moved left; its link goes too.
        self.layer[n - 1].store(None, Ordering::Release);
        self.permutation
            .store(Permuter::<W>::identity(n - 1).value(), Ordering::Release);
    }

    /// Shifts slots `pos..n` of this locked, dirty node one place right and leaves slot `pos`
    /// without a block (its block moved on). Precondition: slot `n` is free.
    pub fn shift_right(&self, pos: usize, n: usize, guard: &TreeGuard<'_>) {
        debug_assert!(self.value[n].is_null(guard));
        for i in (pos..n).rev() {
            self.copy_slot(i, i + 1, guard);
        }
    }

    /// Copies slot `from` to the empty slot `to` of this locked, dirty node, moving its block
    /// (`from` is left without one: one owner per block). Release stores: a reader that
    /// loads the moved pointer also sees the block's bytes, published when the block was
    /// first stored.
    fn copy_slot(&self, from: usize, to: usize, guard: &TreeGuard<'_>) {
        self.keyslice[to].store(
            self.keyslice[from].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        self.keylen[to].store(self.keylen[from].load(Ordering::Relaxed), Ordering::Relaxed);
        self.value[from].move_to(&self.value[to], Ordering::Release, guard);
        self.layer[to].store(
            self.layer[from].load(Ordering::Relaxed, guard),
            Ordering::Release,
        );
    }

    /// Moves slot `from_s` of this locked node to slot `to_s` of `to` (not yet visible).
    pub fn move_slot(&self, from_s: usize, to: &Border<W, F>, to_s: usize, guard: &TreeGuard<'_>) {
        to.keyslice[to_s].store(
            self.keyslice[from_s].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        to.keylen[to_s].store(
            self.keylen[from_s].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        // Plain loads and stores: both nodes are ours (locked, or not yet visible).
        self.value[from_s].move_to(&to.value[to_s], Ordering::Relaxed, guard);
        to.layer[to_s].store(
            self.layer[from_s].load(Ordering::Relaxed, guard),
            Ordering::Relaxed,
        );
        // The layer is `to`'s now, which may retire it: this slot must not name it. A reader
        // of the slot meets the splitting mark and retries.
        self.layer[from_s].store(None, Ordering::Release);
    }
}

/// The suffix a block stores for the remaining key `rest`: its bytes past the slice.
#[inline]
pub fn suffix_of(rest: &[u8]) -> &[u8] {
    rest.get(SLICE_BYTES..).unwrap_or_default()
}
