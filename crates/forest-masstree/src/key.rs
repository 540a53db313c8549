//! Key slices and key lengths (§4.1, §4.2).
//!
//! A layer-`h` tree is indexed by key bytes `8h..8h+8` as a big-endian `u64`, zero padded, so
//! integer order is byte order. `keylen` tells keys with the same slice apart: 0..=8 is the
//! length of a key ending in this slice, [`KEYLEN_SUFFIX`] a longer key whose remaining bytes
//! are in the slot's suffix, [`KEYLEN_LAYER`] a link to the next layer. Within one slice, keys
//! order by length class (`min(len, 9)`), since a shorter key is a prefix of the longer.

/// Bytes in one key slice.
pub const SLICE_BYTES: usize = 8;
/// `keylen` of a key longer than its slice, whose tail is the slot's suffix.
pub const KEYLEN_SUFFIX: u8 = 9;
/// `keylen` of a link to a deeper layer.
pub const KEYLEN_LAYER: u8 = 10;
/// `keylen` while a new layer is being installed (§4.6.3); readers retry.
pub const KEYLEN_UNSTABLE: u8 = 11;

/// The slice of the remaining key `rest` at this layer.
#[inline]
pub fn slice_of(rest: &[u8]) -> u64 {
    let mut b = [0u8; SLICE_BYTES];
    let n = rest.len().min(SLICE_BYTES);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

/// The length class of a remaining key: its length up to 8, else 9.
#[inline]
pub fn class_of(rest: &[u8]) -> u8 {
    rest.len().min(SLICE_BYTES + 1) as u8
}

/// The length class of a stored `keylen`.
#[inline]
pub fn class_of_keylen(keylen: u8) -> u8 {
    keylen.min(KEYLEN_SUFFIX)
}

/// Appends the first `len` bytes of `slice` to `out`.
#[inline]
pub fn push_slice(out: &mut Vec<u8>, slice: u64, len: usize) {
    out.extend_from_slice(&slice.to_be_bytes()[..len.min(SLICE_BYTES)]);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slices_order_as_bytes_and_classes_split_trailing_zeros() {
        // Goal: slice order is byte order, and keys equal but for trailing zeros share a slice
        // and differ in class.
        assert!(slice_of(b"AB") < slice_of(b"AC"));
        assert!(slice_of(b"A\xff") > slice_of(b"AB\x01"));
        assert_eq!(slice_of(b"AB"), slice_of(b"AB\0"));
        assert_ne!(class_of(b"AB"), class_of(b"AB\0"));
        assert_eq!(class_of(b"0123456789"), KEYLEN_SUFFIX);
        let mut v = Vec::new();
        push_slice(&mut v, slice_of(b"xyz"), 3);
        assert_eq!(v, b"xyz");
    }
}
