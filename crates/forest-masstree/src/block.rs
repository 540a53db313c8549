//! Value and key-suffix blocks: one heap allocation each, a length header followed by the
//! bytes (crossbeam-epoch's `Pointable` slices), so a get follows one pointer from the slot to
//! the bytes instead of two (`Box<Box<[u8]>>`). §4.7: "each value is allocated as a single
//! memory block".
//!
//! A value block starts with one kind byte ([`ValueKind`]), so whether a value is a row
//! (§4.7 columns) is stored out of band: a plain value whose bytes happen to be a valid row
//! encoding is still a plain value. Then comes the key's suffix (§4.2: the key bytes past the
//! slot's slice, for `keylen == KEYLEN_SUFFIX`), as a `u16` length and the bytes, and then the
//! value's bytes: `kind: u8 | suffix_len: u16 LE | suffix | value`. Keeping the suffix in the
//! value's block means one allocation per key and one pointer chase for a get of a long key,
//! instead of two of each. (The paper keeps suffixes in a per-node bag; a slot here owns its
//! block.) Layer twigs (§4.6.3) get a new block with the shorter suffix.
//!
//! With [`SuffixStorage::Separate`] (§6.2's factor analysis, the paper's "keysuffixes ...
//! in separate memory blocks") a non-empty suffix lives in a heap block of its own: the kind
//! byte carries [`SEPARATE`], and the suffix bytes are replaced by the address of a
//! `Box<[u8]>` of `suffix_len` bytes: `kind | SEPARATE: u8 | suffix_len: u16 LE | 0 padding |
//! address: usize LE | value`, the address at a pointer-aligned offset (`ADDRESS_AT`, for
//! leak checkers). Comparing a suffix then costs one more dependent load.
//!
//! A border slot holds its block in a [`BlockSlot`]: [`BlockSlot::load`] takes a
//! `&'g TreeGuard` and returns a `&'g Block`, safely, because of the invariants below; a block leaves its
//! slot only through [`BlockSlot::replace`] (which retires it through the epoch) or
//! [`BlockSlot::move_to`] (to another slot). This module and [`crate::node`] hold the crate's
//! `unsafe` for memory.
//!
//! Invariants:
//! - A [`BlockSlot`] is made only as a value slot of a new heap border node ([`BlockSlot::empty`]
//!   takes a [`Making`], which only node allocation makes), so a slot is dropped
//!   only with its node.
//! - Every block is made by [`new_value`], which initializes all its bytes before the block is
//!   shared; blocks are never written afterwards (replaced whole, freed through the epoch;
//!   the memory-tool build poisons them in [`free`], when no thread can reach them).
//! - A block in a slot is owned by that slot alone: it is freed only once out of it, by the
//!   epoch (`replace`, so readers pinned before can still read it) or by the slot's drop
//!   (exclusive access: the node is being freed, crate::node invariants). So a block loaded
//!   under a pinned guard stays valid until that guard unpins. Slot writers are serialized by
//!   the node lock.
//! - So every block is at least [`HEADER_BYTES`] long, starts with a [`ValueKind`] byte, and
//!   its suffix length fits in it.
//! - A separate suffix block is owned by exactly one value block, made with it and freed with
//!   it: every value block is freed through [`free`] (directly, by [`BlockSlot::replace`] through the epoch, or by a slot's drop), never by
//!   dropping its `Owned`, so the suffix lives exactly as long as the value block naming it.

use std::mem::MaybeUninit;

use crossbeam_epoch::{Atomic, Owned, Pointer, Shared};
use forest_core::sync::atomic::Ordering;

use crate::memcheck::{POISONS, POISON_BYTE};
use crate::node::{Making, TreeGuard};

pub use crate::config::SuffixStorage;

/// A value or suffix block.
pub type Block = [MaybeUninit<u8>];

/// What a value block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ValueKind {
    /// Bytes written through the plain `Index` API: column 0 of a one-column row.
    Plain = 0,
    /// A row written through `ColumnIndex`, in forest-core's `row_encode` encoding.
    Row = 1,
}

/// Bytes of the kind byte and the suffix length at the start of a block.
pub const HEADER_BYTES: usize = 3;

/// Flag in the kind byte: the suffix is in a separate block whose address follows the header.
pub const SEPARATE: u8 = 0x80;

/// Bytes of a separate suffix block's address.
const ADDRESS_BYTES: usize = std::mem::size_of::<usize>();

/// Where a separate suffix block's address starts: past the header, at a multiple of its
/// size, so that it is a pointer-aligned word (crossbeam puts a block's bytes after a `usize`
/// length) that leak checkers such as LeakSanitizer recognize as a reference.
const ADDRESS_AT: usize = ADDRESS_BYTES;

const _: () = assert!(ADDRESS_AT >= HEADER_BYTES);

// Suffixes are the key past its first slice: at most KEY_BYTES_MAX - 8 bytes, a u16.
const _: () = assert!(forest_core::KEY_BYTES_MAX - 8 <= u16::MAX as usize);

/// A value to store or a value read: its kind and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value<'a> {
    pub kind: ValueKind,
    pub bytes: &'a [u8],
}

/// A new block for a key with `suffix` (empty for a key that ends in its slice) and `value`,
/// the suffix stored as `storage` says ([`SuffixStorage::Layers`] stores none: its suffixes
/// are always empty). `suffix` is at most `KEY_BYTES_MAX - 8` bytes (keys are checked before
/// they get here).
pub fn new_value(suffix: &[u8], value: Value<'_>, storage: SuffixStorage) -> Owned<Block> {
    debug_assert!(suffix.len() <= u16::MAX as usize);
    let suffix_len = (suffix.len() as u16).to_le_bytes();
    if storage == SuffixStorage::Separate && !suffix.is_empty() {
        let address = Box::into_raw(Box::<[u8]>::from(suffix)).cast::<u8>() as usize;
        let mut o = Owned::<Block>::init(ADDRESS_AT + ADDRESS_BYTES + value.bytes.len());
        let header = [value.kind as u8 | SEPARATE, suffix_len[0], suffix_len[1]];
        let padding = [0u8; ADDRESS_AT - HEADER_BYTES];
        let address = address.to_le_bytes();
        fill(&mut o, &[&header, &padding, &address, value.bytes]);
        return o;
    }
    let mut o = Owned::<Block>::init(HEADER_BYTES + suffix.len() + value.bytes.len());
    let header = [value.kind as u8, suffix_len[0], suffix_len[1]];
    fill(&mut o, &[&header, suffix, value.bytes]);
    o
}

/// Writes `parts` one after another over all of `block`, whose length is their sum. One
/// slice copy per part (a memcpy): a byte loop over the chained parts cost ~400 instructions
/// per value of a list push (session 14's callgrind).
fn fill(block: &mut Block, parts: &[&[u8]]) {
    debug_assert_eq!(block.len(), parts.iter().map(|p| p.len()).sum::<usize>());
    let mut at = 0;
    for part in parts {
        // A zip of two slices compiles to a copy (`write_copy_of_slice` is past the MSRV).
        for (d, s) in block[at..at + part.len()].iter_mut().zip(part.iter()) {
            d.write(*s);
        }
        at += part.len();
    }
}

/// The separate suffix block of `b`, if it has one: its address and length.
#[inline]
fn separate(b: &[u8]) -> Option<(*mut u8, usize)> {
    match b {
        [k, l0, l1, ..] if k & SEPARATE != 0 => {
            let mut a = [0u8; ADDRESS_BYTES];
            a.copy_from_slice(b.get(ADDRESS_AT..ADDRESS_AT + ADDRESS_BYTES)?);
            Some((
                usize::from_le_bytes(a) as *mut u8,
                u16::from_le_bytes([*l0, *l1]) as usize,
            ))
        }
        _ => None,
    }
}

/// Frees a value block that no thread can reach any more, and its separate suffix block
/// (both poisoned first in the memory-tool build, [`crate::memcheck`]).
pub fn free(mut o: Owned<Block>) {
    if let Some((address, len)) = separate(bytes(&o)) {
        let raw = std::ptr::slice_from_raw_parts_mut(address, len);
        // SAFETY: `address` and `len` describe the `Box<[u8]>` that `new_value` leaked for this
        // block alone (module invariants); the block is being freed, so this is the last use.
        let mut suffix = unsafe { Box::from_raw(raw) };
        if POISONS {
            suffix.fill(POISON_BYTE);
        }
        drop(suffix);
    }
    if POISONS {
        o.fill(MaybeUninit::new(POISON_BYTE));
    }
    drop(o);
}

/// A border slot's block: null or a block this slot alone owns (module invariants).
#[derive(Debug)]
pub struct BlockSlot(Atomic<Block>);

impl BlockSlot {
    /// An empty slot of the border node being made (module invariants).
    pub fn empty(_making: &Making) -> Self {
        Self(Atomic::null())
    }

    /// The slot's block, kept alive by `guard` (module invariants).
    #[inline]
    pub fn load<'g>(&self, order: Ordering, guard: &'g TreeGuard<'_>) -> Option<&'g Block> {
        // SAFETY: a block is freed only once out of its slot, through the epoch that `guard`
        // pins, or when the slot is dropped with its node, which cannot happen while a guard
        // that reached its node is pinned (module invariants, crate::node invariants).
        unsafe { self.0.load(order, guard.epoch()).as_ref() }
    }

    /// The slot's block, kept alive by `guard`, without reading it yet: a block's length is
    /// stored in the block, so making a `&Block` is a cache miss, which a scan lets overlap
    /// by loading a node's blocks first, prefetching them, and reading them afterwards.
    #[inline]
    pub fn load_ref<'g>(&self, order: Ordering, guard: &'g TreeGuard<'_>) -> Option<BlockRef<'g>> {
        let b = self.0.load(order, guard.epoch());
        (!b.is_null()).then_some(BlockRef(b))
    }

    /// Whether the slot holds no block.
    pub fn is_null(&self, guard: &TreeGuard<'_>) -> bool {
        self.0.load(Ordering::Relaxed, guard.epoch()).is_null()
    }

    /// Puts `new` (or nothing) in the slot with a store of `order` and retires the block it
    /// held: freed once every reader pinned now has unpinned. The node is locked, or not yet
    /// reachable: slot writers are serialized, so no interlocked swap is needed.
    #[inline]
    pub fn replace(&self, new: Option<Owned<Block>>, order: Ordering, guard: &TreeGuard<'_>) {
        let guard = guard.epoch();
        let old = self.0.load(Ordering::Relaxed, guard);
        match new {
            Some(b) => self.0.store(b, order),
            None => self.0.store(Shared::null(), order),
        }
        if !old.is_null() {
            // SAFETY: `old` is out of its slot, the only one that owned it, so no new reader
            // can load it; readers that did are pinned, and the epoch runs this after they
            // unpin, once (module invariants).
            unsafe { guard.defer_unchecked(move || free(old.into_owned())) };
        }
    }

    /// Moves this slot's block into the empty slot `to`, leaving this one empty: release
    /// stores, so a reader that loads the moved pointer also sees the block's bytes. Both
    /// slots' nodes are locked (and marked dirty when readers can see them) or not yet
    /// reachable.
    #[inline]
    pub fn move_to(&self, to: &BlockSlot, order: Ordering, guard: &TreeGuard<'_>) {
        debug_assert!(to.is_null(guard), "a block moves into an empty slot");
        let b = self.0.load(Ordering::Relaxed, guard.epoch());
        to.0.store(b, order);
        self.0.store(Shared::null(), order);
    }
}

/// A block kept alive by a tree guard borrowed for `'g`, not read yet
/// ([`BlockSlot::load_ref`]); never null.
#[derive(Clone, Copy, Debug)]
pub struct BlockRef<'g>(Shared<'g, Block>);

impl<'g> BlockRef<'g> {
    /// Starts loading the block's first `lines` cache lines.
    #[inline]
    pub fn prefetch(self, lines: usize) {
        // Blocks are never tagged: the word is the allocation's address.
        crate::prefetch::node(self.0.into_usize() as *const u8, lines);
    }

    /// Whether both name the same block (under one pin a block's address is not reused).
    #[inline]
    pub fn same(self, other: BlockRef<'_>) -> bool {
        self.0.into_usize() == other.0.into_usize()
    }

    /// The block.
    #[inline]
    pub fn get(self) -> &'g Block {
        // SAFETY: as `BlockSlot::load`: the block was in its slot when loaded under the guard
        // borrowed for `'g`, so it is freed, through that guard's epoch, only after it unpins
        // (module invariants); `load_ref` made a `BlockRef` of a non-null block only.
        unsafe { self.0.as_ref() }.expect("a BlockRef is never null")
    }
}

impl Drop for BlockSlot {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: the slot's node is being freed, so no thread can read the slot
        // (crate::node invariants); nothing is loaded through this guard past this function.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let p = self.0.swap(Shared::null(), Ordering::Relaxed, guard);
        if !p.is_null() {
            // SAFETY: the block is owned by this slot alone (module invariants) and no thread
            // can reach it (above).
            free(unsafe { p.into_owned() });
        }
    }
}

/// The bytes of a block.
#[inline]
fn bytes(b: &Block) -> &[u8] {
    // SAFETY: every block's bytes were all initialized by `new_value` before it was shared
    // (module invariant); MaybeUninit<u8> has u8's layout.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), b.len()) }
}

/// The key suffix and the value held by a block.
#[inline]
pub fn entry(b: &Block) -> (&[u8], Value<'_>) {
    let all = bytes(b);
    debug_assert!(all.len() >= HEADER_BYTES, "a block has its header");
    let (header, rest) = all.split_at(HEADER_BYTES.min(all.len()));
    let (kind, suffix_len) = match header {
        [k, l0, l1] => (*k, u16::from_le_bytes([*l0, *l1]) as usize),
        _ => (0, 0),
    };
    if kind & SEPARATE != 0 {
        let (suffix, value) = match separate(all) {
            // SAFETY: the separate block lives as long as `b` (module invariants) and was
            // initialized from the suffix before `b` was shared.
            Some((address, len)) => (unsafe { std::slice::from_raw_parts(address, len) }, {
                all.get(ADDRESS_AT + ADDRESS_BYTES..).unwrap_or_default()
            }),
            None => (&[][..], &[][..]),
        };
        return (
            suffix,
            Value {
                kind: kind_of(kind & !SEPARATE),
                bytes: value,
            },
        );
    }
    let (suffix, value) = rest.split_at(suffix_len.min(rest.len()));
    (
        suffix,
        Value {
            kind: kind_of(kind),
            bytes: value,
        },
    )
}

/// The kind named by a kind byte (without [`SEPARATE`]).
#[inline]
fn kind_of(kind: u8) -> ValueKind {
    if kind == ValueKind::Row as u8 {
        ValueKind::Row
    } else {
        debug_assert_eq!(kind, ValueKind::Plain as u8);
        ValueKind::Plain
    }
}

/// Heap bytes of a block, its separate suffix block included (for `stats`).
pub fn heap_bytes(b: &Block) -> usize {
    b.len() + separate(bytes(b)).map_or(0, |(_, len)| len)
}

/// The value held by a block.
#[inline]
pub fn value(b: &Block) -> Value<'_> {
    entry(b).1
}

/// The key suffix held by a block.
#[inline]
pub fn suffix(b: &Block) -> &[u8] {
    entry(b).0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn blocks_keep_kind_suffix_and_value_apart() {
        // Goal: kind, suffix and value round-trip separately. Method: build blocks of both
        // kinds with and without suffixes, empty values included, with the suffix inline and
        // separate, read them back and free them (Miri or a leak checker sees the suffix).
        let long = vec![b's'; forest_core::KEY_BYTES_MAX - 8];
        for (sfx, kind, bytes) in [
            (&b""[..], ValueKind::Plain, &b"abc"[..]),
            (b"12", ValueKind::Row, b"\x01\0\0\0\x01\0\0\0x"),
            (b"xyz", ValueKind::Plain, b""),
            (&long[..], ValueKind::Plain, b"v"),
        ] {
            for storage in [SuffixStorage::Block, SuffixStorage::Separate] {
                let o = new_value(sfx, Value { kind, bytes }, storage);
                assert_eq!(entry(&o), (sfx, Value { kind, bytes }));
                assert_eq!(suffix(&o), sfx);
                assert_eq!(value(&o), Value { kind, bytes });
                let separate = storage == SuffixStorage::Separate && !sfx.is_empty();
                assert_eq!(heap_bytes(&o) > o.len(), separate);
                free(o);
            }
        }
    }

    #[test]
    fn separate_suffix_address_is_an_aligned_word() {
        // Goal: a separate suffix block is referenced by a whole pointer-aligned word of its
        // value block, the only kind of reference a leak checker (LeakSanitizer) sees; else a
        // value block still waiting in the epoch's garbage at exit gets its suffix reported
        // as leaked. Method: find the address's bytes in a new block and check the offset.
        let value = Value {
            kind: ValueKind::Plain,
            bytes: b"value",
        };
        let o = new_value(b"a suffix", value, SuffixStorage::Separate);
        let (address, _) = separate(bytes(&o)).expect("a separate suffix");
        let word = (address as usize).to_le_bytes();
        let at = bytes(&o)
            .windows(word.len())
            .position(|w| w == word)
            .expect("the address is stored");
        let start = o.as_ptr().addr() + at;
        assert_eq!(start % std::mem::align_of::<usize>(), 0, "at byte {at}");
        free(o);
    }
}
