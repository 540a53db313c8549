//! The key representations peers store: fair to each peer (see [`crate::peers`]).
//!
//! A peer on the `u64` key shape keeps `u64` keys decoded from the 8 big-endian bytes: no
//! heap allocation per key, and an integer comparison, as a hand-written benchmark of that
//! peer would use. On every other shape it keeps boxed byte slices. Lookups go through a
//! *probe* (`u64` or `[u8]`) that the map's key borrows as, so a get never allocates.

use std::borrow::Borrow;
use std::hash::Hash;
use std::ops::Bound;

/// A key type a peer map is generic over.
pub trait PeerKey: Ord + Hash + Clone + Send + Sync + Borrow<Self::Probe> + 'static {
    /// What lookups compare against: the key's borrowed form.
    type Probe: ?Sized + Ord + Hash;

    /// The representation's name in reports (`u64` or `bytes`).
    const REPR: &'static str;

    /// An owned key, or None when `key` has no such representation (not 8 bytes for `u64`).
    fn from_bytes(key: &[u8]) -> Option<Self>;

    /// Runs `f` on the probe of `key`, or returns None when `key` has no representation.
    fn with_probe<R>(key: &[u8], f: impl FnOnce(&Self::Probe) -> R) -> Option<R>;

    /// Runs `f` on the key's bytes.
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R;

    /// Runs `f` on scan bounds translated to probes; `f` gets None when no key of this
    /// representation lies between the bounds.
    fn with_bounds<R>(
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        f: impl FnOnce(Option<(Bound<&Self::Probe>, Bound<&Self::Probe>)>) -> R,
    ) -> R;
}

impl PeerKey for Box<[u8]> {
    type Probe = [u8];
    const REPR: &'static str = "bytes";

    #[inline]
    fn from_bytes(key: &[u8]) -> Option<Self> {
        Some(key.into())
    }

    #[inline]
    fn with_probe<R>(key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        Some(f(key))
    }

    #[inline]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }

    fn with_bounds<R>(
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        f: impl FnOnce(Option<(Bound<&[u8]>, Bound<&[u8]>)>) -> R,
    ) -> R {
        if bounds_are_empty(lower, upper) {
            f(None)
        } else {
            f(Some((lower, upper)))
        }
    }
}

impl PeerKey for u64 {
    type Probe = u64;
    const REPR: &'static str = "u64";

    #[inline]
    fn from_bytes(key: &[u8]) -> Option<Self> {
        Some(u64::from_be_bytes(key.try_into().ok()?))
    }

    #[inline]
    fn with_probe<R>(key: &[u8], f: impl FnOnce(&u64) -> R) -> Option<R> {
        let k = u64::from_be_bytes(key.try_into().ok()?);
        Some(f(&k))
    }

    #[inline]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.to_be_bytes())
    }

    fn with_bounds<R>(
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        f: impl FnOnce(Option<(Bound<&u64>, Bound<&u64>)>) -> R,
    ) -> R {
        let (lower, upper) = (u64_lower(lower), u64_upper(upper));
        let (l, u) = (lower.as_ref(), upper.as_ref());
        if bounds_are_empty(l, u) {
            f(None)
        } else {
            f(Some((l, u)))
        }
    }
}

/// `b` padded with zero bytes to 8, or its first 8 bytes.
fn to_u64_prefix(b: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = b.len().min(8);
    buf[..n].copy_from_slice(&b[..n]);
    u64::from_be_bytes(buf)
}

/// The lower bound on 8-byte keys equivalent to a lower bound on byte strings.
///
/// For 8-byte keys k: k ≥ b (or k > b) with |b| < 8 holds exactly when k ≥ b‖0…0 (k cannot
/// equal b, and b‖0…0 is b's smallest 8-byte extension); with |b| > 8 it holds exactly when
/// k > b[..8] (k = b[..8] is a proper prefix of b, so smaller).
fn u64_lower(b: Bound<&[u8]>) -> Bound<u64> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(b) | Bound::Excluded(b) if b.len() < 8 => Bound::Included(to_u64_prefix(b)),
        Bound::Included(b) if b.len() == 8 => Bound::Included(to_u64_prefix(b)),
        Bound::Excluded(b) if b.len() == 8 => Bound::Excluded(to_u64_prefix(b)),
        Bound::Included(b) | Bound::Excluded(b) => Bound::Excluded(to_u64_prefix(b)),
    }
}

/// The upper bound on 8-byte keys equivalent to an upper bound on byte strings.
///
/// With |b| < 8: k ≤ b (or k < b) holds exactly when k < b‖0…0 (every extension of b is
/// above b); with |b| > 8: exactly when k ≤ b[..8].
fn u64_upper(b: Bound<&[u8]>) -> Bound<u64> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(b) | Bound::Excluded(b) if b.len() < 8 => Bound::Excluded(to_u64_prefix(b)),
        Bound::Included(b) if b.len() == 8 => Bound::Included(to_u64_prefix(b)),
        Bound::Excluded(b) if b.len() == 8 => Bound::Excluded(to_u64_prefix(b)),
        Bound::Included(b) | Bound::Excluded(b) => Bound::Included(to_u64_prefix(b)),
    }
}

/// Whether no value lies between the bounds. Maps like `BTreeMap::range` panic on crossed
/// bounds, so peers check first.
pub fn bounds_are_empty<T: Ord + ?Sized>(lower: Bound<&T>, upper: Bound<&T>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u))
        | (Bound::Excluded(l), Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forest_core::index::in_bounds;

    #[test]
    fn u64_bounds_agree_with_byte_bounds() {
        // Goal: translating byte bounds to u64 bounds keeps exactly the same 8-byte keys.
        // Method: for short, exact and long bounds, compare membership of sample keys.
        let samples: Vec<u64> = [
            0u64,
            1,
            0x0100,
            0x6162_6300_0000_0000,
            0x6162_6300_0000_0001,
        ]
        .into_iter()
        .chain((0..200).map(|i| crate::rng::mix64(i) >> (i % 64)))
        .chain([u64::MAX, 0x6162_6364_6566_6768, 0x6162_6364_6566_6769])
        .collect();
        let bounds: Vec<&[u8]> = vec![
            b"",
            b"abc",
            b"abcdefgh",
            b"abcdefghi",
            b"\0\0\0\0\0\0\x01\0",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        let mut all_bounds = vec![Bound::Unbounded];
        for b in &bounds {
            all_bounds.push(Bound::Included(*b));
            all_bounds.push(Bound::Excluded(*b));
        }
        for &lower in &all_bounds {
            for &upper in &all_bounds {
                <u64 as PeerKey>::with_bounds(lower, upper, |translated| {
                    for &k in &samples {
                        let bytes = k.to_be_bytes();
                        let expected = in_bounds(&bytes, lower, upper);
                        let got = translated.is_some_and(|(l, u)| (l, u).contains_u64(k));
                        assert_eq!(got, expected, "{k:#x} {lower:?} {upper:?}");
                    }
                });
            }
        }
    }

    trait ContainsU64 {
        fn contains_u64(&self, k: u64) -> bool;
    }

    impl ContainsU64 for (Bound<&u64>, Bound<&u64>) {
        fn contains_u64(&self, k: u64) -> bool {
            std::ops::RangeBounds::contains(self, &k)
        }
    }

    #[test]
    fn u64_keys_round_trip() {
        // Goal: u64 keys decode from and encode to the same 8 big-endian bytes; other lengths
        // have no u64 form. Method: sample values, then a 7- and a 9-byte key.
        for k in [0u64, 1, 255, 256, u64::MAX, 0x0102_0304_0506_0708] {
            let decoded = <u64 as PeerKey>::from_bytes(&k.to_be_bytes()).expect("8 bytes");
            assert_eq!(decoded, k);
            decoded.with_bytes(|b| assert_eq!(b, k.to_be_bytes()));
        }
        assert!(<u64 as PeerKey>::from_bytes(&[1; 7]).is_none());
        assert!(<u64 as PeerKey>::with_probe(&[1; 9], |_| ()).is_none());
    }
}
