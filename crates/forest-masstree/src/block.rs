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
//! Invariants:
//! - Every block is made by [`new_value`], which initializes all its bytes before the block is
//!   shared; blocks are never written afterwards (replaced whole, freed through the epoch).
//! - So every block is at least [`HEADER_BYTES`] long, starts with a [`ValueKind`] byte, and
//!   its suffix length fits in it.

use std::mem::MaybeUninit;

use crossbeam_epoch::Owned;

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

// Suffixes are the key past its first slice: at most KEY_BYTES_MAX - 8 bytes, a u16.
const _: () = assert!(forest_core::KEY_BYTES_MAX - 8 <= u16::MAX as usize);

/// A value to store or a value read: its kind and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value<'a> {
    pub kind: ValueKind,
    pub bytes: &'a [u8],
}

impl<'a> Value<'a> {
    /// A plain value.
    pub fn plain(bytes: &'a [u8]) -> Self {
        Self {
            kind: ValueKind::Plain,
            bytes,
        }
    }
}

/// A new block for a key with `suffix` (empty for a key that ends in its slice) and `value`.
/// `suffix` is at most `KEY_BYTES_MAX - 8` bytes (keys are checked before they get here).
pub fn new_value(suffix: &[u8], value: Value<'_>) -> Owned<Block> {
    debug_assert!(suffix.len() <= u16::MAX as usize);
    let mut o = Owned::<Block>::init(HEADER_BYTES + suffix.len() + value.bytes.len());
    let suffix_len = (suffix.len() as u16).to_le_bytes();
    let header = [value.kind as u8, suffix_len[0], suffix_len[1]];
    let bytes = header.iter().chain(suffix).chain(value.bytes);
    for (d, s) in o.iter_mut().zip(bytes) {
        d.write(*s);
    }
    o
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
    let kind = if kind == ValueKind::Row as u8 {
        ValueKind::Row
    } else {
        debug_assert_eq!(kind, ValueKind::Plain as u8);
        ValueKind::Plain
    };
    let (suffix, value) = rest.split_at(suffix_len.min(rest.len()));
    (suffix, Value { kind, bytes: value })
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
        // kinds with and without suffixes, empty values included, and read them back.
        let long = vec![b's'; forest_core::KEY_BYTES_MAX - 8];
        for (sfx, kind, bytes) in [
            (&b""[..], ValueKind::Plain, &b"abc"[..]),
            (b"12", ValueKind::Row, b"\x01\0\0\0\x01\0\0\0x"),
            (b"xyz", ValueKind::Plain, b""),
            (&long[..], ValueKind::Plain, b"v"),
        ] {
            let o = new_value(sfx, Value { kind, bytes });
            assert_eq!(entry(&o), (sfx, Value { kind, bytes }));
            assert_eq!(suffix(&o), sfx);
            assert_eq!(value(&o), Value { kind, bytes });
        }
    }
}
