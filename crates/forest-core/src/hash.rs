//! Word-at-a-time byte hashing shared by the store's key stripes and the server's collection
//! stripes (each keeps its own per-word mix: the server's is keyed against chosen keys).
//!
//! The bytes are read as little-endian 8-byte words (the last one zero-padded, the length
//! folded into the start so `a` and `a\0` differ), each combined into the state by the
//! caller's `mix`, and the state finished by murmur3's `fmix64`, so the low bits are as mixed
//! as the high ones and a caller may mask them.

/// The golden-ratio multiplier both callers start from.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// Hashes `bytes`: `start ^ len * GOLDEN`, each word folded in by `mix(state, word)`, then
/// [`fmix64`].
#[inline]
pub fn fold_words(start: u64, bytes: &[u8], mix: impl Fn(u64, u64) -> u64) -> u64 {
    let mut h = start ^ (bytes.len() as u64).wrapping_mul(GOLDEN);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(word);
        h = mix(h, u64::from_le_bytes(buf));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(buf));
    }
    fmix64(h)
}

/// murmur3's 64-bit finaliser: every input bit reaches every output bit.
#[inline]
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_and_every_byte_move_the_hash() {
        let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(GOLDEN).rotate_left(29);
        let base = fold_words(0, b"abcdefghij", mix);
        assert_ne!(base, fold_words(0, b"abcdefghij\0", mix));
        for i in 0..10 {
            let mut key = *b"abcdefghij";
            key[i] ^= 1;
            assert_ne!(base, fold_words(0, &key, mix), "byte {i}");
        }
        assert_ne!(fold_words(0, b"", mix), fold_words(1, b"", mix));
    }
}
