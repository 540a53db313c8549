//! Value and key-suffix blocks: one heap allocation each, a length header followed by the
//! bytes (crossbeam-epoch's `Pointable` slices), so a get follows one pointer from the slot to
//! the bytes instead of two (`Box<Box<[u8]>>`). §4.7: "each value is allocated as a single
//! memory block".
//!
//! Invariant: every block is made by [`new`], which initializes all its bytes before the block
//! is shared; blocks are never written afterwards (replaced whole, freed through the epoch).

use std::mem::MaybeUninit;

use crossbeam_epoch::Owned;

/// A value or suffix block.
pub type Block = [MaybeUninit<u8>];

/// A new block holding a copy of `bytes`.
pub fn new(bytes: &[u8]) -> Owned<Block> {
    let mut o = Owned::<Block>::init(bytes.len());
    for (d, s) in o.iter_mut().zip(bytes) {
        d.write(*s);
    }
    o
}

/// The bytes of a block.
#[inline]
pub fn bytes(b: &Block) -> &[u8] {
    // SAFETY: every block's bytes were all initialized by `new` before it was shared (module
    // invariant); MaybeUninit<u8> has u8's layout.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), b.len()) }
}
