//! Key shapes: how a key *index* (the i-th key a workload knows) becomes key bytes.
//!
//! Shapes follow the papers' data sets:
//! - `u64`: 8-byte big-endian integers (Bw-tree §VI synthetic, BzTree §7.1.2).
//! - `decimal`: 1-to-10-byte decimal strings of 31-bit integers (Masstree §6.1, rw1).
//! - `hash20`: 20-byte hashes (Bw-tree §VI storage deduplication trace, SHA-1 sized).
//! - `text94`: 94-byte printable text keys (Bw-tree §VI Xbox LIVE trace).
//! - `prefix`: 40-byte keys whose first 32 bytes are shared (Masstree §6.4, Fig. 9).
//! - `ycsb`: YCSB's `user<number>` keys.
//!
//! Two steps make a key. First the index becomes a *key number*: under [`KeyOrder::Scattered`]
//! through a bijection ([`crate::rng::mix64`], or [`crate::rng::mix31`] for `decimal`), so
//! that consecutive indices land all over the key space, as the papers' random keys do; under
//! [`KeyOrder::Sequential`] (the `monotonic` distribution) the number is the index itself.
//! Then the shape encodes the number. `u64`, `text94` and `prefix` encode numbers in order,
//! so sequential indices give increasing keys; `decimal`, `hash20` and `ycsb` do not (a
//! decimal string or a hash does not sort like its number), as in the traces they model.
//! Distinct indices always give distinct keys (for `decimal`, below 2^31).

use std::fmt::Write as _;
use std::str::FromStr;

use crate::rng::{mix31, mix64};

/// The shape of the keys a workload uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyShape {
    /// 8-byte big-endian integers.
    U64,
    /// 1-to-10-byte decimal strings of 31-bit integers.
    Decimal,
    /// 20-byte hashes.
    Hash20,
    /// 94-byte printable text.
    Text94,
    /// 40-byte keys with a 32-byte common prefix.
    Prefix,
    /// YCSB `user<number>` keys.
    Ycsb,
}

/// How key indices map to key numbers (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// Indices are scattered over the key space by a bijection.
    Scattered,
    /// The key number is the index: increasing indices, increasing keys (ordered shapes).
    Sequential,
}

/// The shared prefix of the `prefix` shape: 32 bytes, as the longest prefixes of Masstree's
/// Fig. 9 (40-byte keys of which only the last 8 bytes vary).
const PREFIX_SHARED: &[u8; 32] = b"forest/bench/shared-prefix/0000/";

/// Length of the `prefix` shape's keys.
pub const PREFIX_KEY_BYTES: usize = 40;

/// Length of the `text94` shape's keys (the Xbox trace's average key length).
pub const TEXT94_KEY_BYTES: usize = 94;

/// Length of the `hash20` shape's keys (a SHA-1 digest).
pub const HASH20_KEY_BYTES: usize = 20;

/// Printable characters for the filler of `text94` keys.
const TEXT_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl KeyShape {
    /// Every shape, in the order `--help` lists them.
    pub const ALL: [KeyShape; 6] = [
        KeyShape::U64,
        KeyShape::Decimal,
        KeyShape::Hash20,
        KeyShape::Text94,
        KeyShape::Prefix,
        KeyShape::Ycsb,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeyShape::U64 => "u64",
            KeyShape::Decimal => "decimal",
            KeyShape::Hash20 => "hash20",
            KeyShape::Text94 => "text94",
            KeyShape::Prefix => "prefix",
            KeyShape::Ycsb => "ycsb",
        }
    }

    /// One line for `--help`.
    pub fn describe(self) -> &'static str {
        match self {
            KeyShape::U64 => "8-byte big-endian integers (Bw-tree synthetic, BzTree)",
            KeyShape::Decimal => "1-to-10-byte decimal strings of 31-bit integers (Masstree 6.1)",
            KeyShape::Hash20 => "20-byte hashes (Bw-tree dedup trace)",
            KeyShape::Text94 => "94-byte printable text keys (Bw-tree Xbox trace)",
            KeyShape::Prefix => "40-byte keys sharing a 32-byte prefix (Masstree Fig. 9)",
            KeyShape::Ycsb => "YCSB user<number> keys",
        }
    }

    /// Whether sequential indices give increasing keys under this shape.
    pub fn is_order_preserving(self) -> bool {
        matches!(self, KeyShape::U64 | KeyShape::Text94 | KeyShape::Prefix)
    }

    /// How many distinct keys the shape can make.
    pub fn capacity(self) -> u64 {
        match self {
            KeyShape::Decimal => 1 << 31,
            _ => u64::MAX,
        }
    }

    /// The key number of `index` under `order`.
    #[inline]
    pub fn number(self, index: u64, order: KeyOrder) -> u64 {
        match (order, self) {
            (KeyOrder::Sequential, _) => index,
            (KeyOrder::Scattered, KeyShape::Decimal) => mix31(index),
            (KeyOrder::Scattered, _) => mix64(index),
        }
    }

    /// Replaces `out`'s contents with the key of `index`.
    pub fn encode(self, index: u64, order: KeyOrder, out: &mut Vec<u8>) {
        out.clear();
        let number = self.number(index, order);
        match self {
            KeyShape::U64 => out.extend_from_slice(&number.to_be_bytes()),
            KeyShape::Decimal => push_decimal(out, number & ((1 << 31) - 1)),
            KeyShape::Hash20 => {
                // Word 0 is the bijective mix of the number, so keys stay distinct; the
                // other words only fill the digest's width.
                out.extend_from_slice(&mix64(number ^ 0x5EED).to_be_bytes());
                out.extend_from_slice(&mix64(number.rotate_left(17) ^ 1).to_be_bytes());
                out.extend_from_slice(&mix64(number.rotate_left(41) ^ 2).to_be_bytes()[..4]);
            }
            KeyShape::Text94 => {
                // "xbox:" + 20 zero-padded digits (these decide the order) + ":" + filler.
                out.extend_from_slice(b"xbox:");
                let mut digits = String::with_capacity(20);
                let _ = write!(digits, "{number:020}");
                out.extend_from_slice(digits.as_bytes());
                out.push(b':');
                let mut filler = mix64(number);
                while out.len() < TEXT94_KEY_BYTES {
                    out.push(TEXT_ALPHABET[(filler & 63) as usize]);
                    filler = filler.rotate_right(6) ^ 0x9E37;
                }
            }
            KeyShape::Prefix => {
                out.extend_from_slice(PREFIX_SHARED);
                out.extend_from_slice(&number.to_be_bytes());
            }
            KeyShape::Ycsb => {
                out.extend_from_slice(b"user");
                push_decimal(out, number);
            }
        }
    }

    /// The key of `index` as a new vector (tests, setup; not the hot path).
    pub fn key(self, index: u64, order: KeyOrder) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(index, order, &mut out);
        out
    }
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[..len].iter().rev());
}

impl FromStr for KeyShape {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        KeyShape::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = KeyShape::ALL.iter().map(|k| k.name()).collect();
                anyhow::anyhow!("unknown key shape {s:?}; known: {}", known.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn shapes_have_their_documented_lengths() {
        // Goal: each shape's key lengths match the papers' data sets. Method: 10k keys each.
        for order in [KeyOrder::Scattered, KeyOrder::Sequential] {
            for i in 0..10_000 {
                assert_eq!(KeyShape::U64.key(i, order).len(), 8);
                let d = KeyShape::Decimal.key(i, order).len();
                assert!((1..=10).contains(&d), "{d}");
                assert_eq!(KeyShape::Hash20.key(i, order).len(), HASH20_KEY_BYTES);
                assert_eq!(KeyShape::Text94.key(i, order).len(), TEXT94_KEY_BYTES);
                assert_eq!(KeyShape::Prefix.key(i, order).len(), PREFIX_KEY_BYTES);
                assert!(KeyShape::Ycsb.key(i, order).starts_with(b"user"));
            }
        }
        // Scattered decimal keys reach the full 1-to-10-byte range of 31-bit integers.
        let lens: HashSet<usize> = (0..100_000)
            .map(|i| KeyShape::Decimal.key(i, KeyOrder::Scattered).len())
            .collect();
        assert!(lens.contains(&10) && lens.contains(&9), "{lens:?}");
        assert!(KeyShape::Text94
            .key(7, KeyOrder::Scattered)
            .iter()
            .all(|b| b.is_ascii_graphic()));
    }

    #[test]
    fn keys_are_unique_per_shape() {
        // Goal: distinct indices give distinct keys. Method: 50k indices per shape and order.
        for shape in KeyShape::ALL {
            for order in [KeyOrder::Scattered, KeyOrder::Sequential] {
                let keys: HashSet<Vec<u8>> = (0..50_000).map(|i| shape.key(i, order)).collect();
                assert_eq!(keys.len(), 50_000, "{shape:?} {order:?}");
            }
        }
    }

    #[test]
    fn ordered_shapes_sort_like_their_indices() {
        // Goal: u64 big-endian sorts numerically; text94 and prefix keep index order.
        // Method: compare byte order with numeric order on sequential and scattered keys.
        for shape in KeyShape::ALL
            .into_iter()
            .filter(|s| s.is_order_preserving())
        {
            for i in [0u64, 1, 9, 255, 256, 65_535, 1 << 40] {
                assert!(
                    shape.key(i, KeyOrder::Sequential) < shape.key(i + 1, KeyOrder::Sequential)
                );
            }
        }
        for i in 0..1_000u64 {
            let (a, b) = (mix64(i), mix64(i + 1));
            let ka = KeyShape::U64.key(i, KeyOrder::Scattered);
            let kb = KeyShape::U64.key(i + 1, KeyOrder::Scattered);
            assert_eq!(a.cmp(&b), ka.cmp(&kb));
            assert_eq!(ka, a.to_be_bytes());
        }
        let shared = &KeyShape::Prefix.key(1, KeyOrder::Scattered)[..32];
        assert_eq!(shared, &KeyShape::Prefix.key(2, KeyOrder::Scattered)[..32]);
    }

    #[test]
    fn shape_names_round_trip() {
        // Goal: every shape parses from its own name; unknown names list the known ones.
        for shape in KeyShape::ALL {
            assert_eq!(shape.name().parse::<KeyShape>().ok(), Some(shape));
        }
        let err = "nope".parse::<KeyShape>().expect_err("unknown shape");
        assert!(err.to_string().contains("text94"));
    }
}
