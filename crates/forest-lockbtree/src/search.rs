//! In-node key search: linear (thesis §2.2, Listing 2.3) and binary (§2.4, Listing 2.7).
//!
//! Both run in two phases: first over the dense array of prefixes alone, then, only where
//! prefixes tie, over the full keys of the tied slots. Both find, like the listings, the first slot whose key is not below the search key
//! ([`lower_bound`]); scans also need the first slot above it ([`upper_bound`]). In an inner
//! node that index is the child to descend to (separator semantics of §2.1: keys `m` of the
//! left subtree of separator `k` have `m <= k`); in a leaf it is the key's position.
//!
//! Keys are byte strings of any length; the thesis' integer compare becomes a compare of
//! 8-byte big-endian, zero-padded prefixes (one `u64` per slot, kept in a dense array), and
//! only on a prefix tie a look at the full keys:
//! - if either key is at most 8 bytes long, equal padded prefixes mean the shorter key is a
//!   prefix of the longer (the padding is zeros), so the lengths decide without touching the
//!   key bytes (the length sits in the slot: its length byte, or the box's fat pointer);
//! - otherwise the bytes after the first 8 decide.
//!
//! Padded big-endian prefixes order like the keys: where they differ at byte `p`, either both
//! keys have byte `p` and it decides, or the shorter one ends before `p` and is a prefix of the
//! longer, whose byte `p` is non-zero.

use std::cmp::Ordering;

use crate::bytes::Key;

/// Bytes of a key held in its slot's prefix.
pub(crate) const PREFIX_BYTES: usize = 8;

/// The in-node search algorithm (thesis §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NodeSearch {
    /// Listing 2.3: step right while the search key is above the slot's key. Wins on small
    /// nodes, where it streams through one or two cache lines of prefixes.
    Linear,
    /// Listing 2.7: iterative binary search for the first slot not below the key. Wins on
    /// wide nodes.
    #[default]
    Binary,
}

/// The prefix of `key`: its first 8 bytes, zero-padded, big-endian.
#[inline]
pub(crate) fn prefix_of(key: &[u8]) -> u64 {
    let mut bytes = [0u8; PREFIX_BYTES];
    let n = key.len().min(PREFIX_BYTES);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

/// A key being searched for, with its prefix computed once per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SearchKey<'k> {
    pub(crate) bytes: &'k [u8],
    pub(crate) prefix: u64,
}

impl<'k> SearchKey<'k> {
    #[inline]
    pub(crate) fn new(bytes: &'k [u8]) -> Self {
        Self {
            bytes,
            prefix: prefix_of(bytes),
        }
    }

    /// Orders the search key against slot `(prefix, key)`.
    #[inline]
    pub(crate) fn cmp_slot(&self, prefix: u64, key: &[u8]) -> Ordering {
        match self.prefix.cmp(&prefix) {
            Ordering::Equal => self.cmp_tie(key),
            other => other,
        }
    }

    /// Orders the search key against a key with the same prefix.
    #[inline(always)]
    fn cmp_tie(&self, key: &[u8]) -> Ordering {
        if self.bytes.len() <= PREFIX_BYTES || key.len() <= PREFIX_BYTES {
            self.bytes.len().cmp(&key.len())
        } else {
            self.bytes[PREFIX_BYTES..].cmp(&key[PREFIX_BYTES..])
        }
    }
}

/// The first slot whose key is `>= key` (the listings' index).
#[inline]
pub(crate) fn lower_bound(
    how: NodeSearch,
    prefixes: &[u64],
    keys: &[Key],
    key: &SearchKey<'_>,
) -> usize {
    let first = prefix_lower_bound(how, prefixes, key);
    tie_bound(how, prefixes, keys, key, first, false)
}

/// The first slot whose key is `> key`.
#[inline]
pub(crate) fn upper_bound(
    how: NodeSearch,
    prefixes: &[u64],
    keys: &[Key],
    key: &SearchKey<'_>,
) -> usize {
    let first = prefix_lower_bound(how, prefixes, key);
    tie_bound(how, prefixes, keys, key, first, true)
}

/// First phase: the first slot whose prefix is `>=` the key's, over the dense prefix array
/// only (all of whose cache lines are requested at once).
#[inline]
pub(crate) fn prefix_lower_bound(how: NodeSearch, prefixes: &[u64], key: &SearchKey<'_>) -> usize {
    crate::node::prefetch(prefixes);
    let past = |i: usize| prefixes[i] < key.prefix;
    match how {
        NodeSearch::Linear => linear(prefixes.len(), past),
        NodeSearch::Binary => binary(prefixes.len(), past),
    }
}

/// Second phase: from `first` (a [`prefix_lower_bound`]), steps over the slots that share the
/// key's prefix and are below the key (`strict`: or equal to it). Full keys are read only
/// here, and only on a prefix tie.
#[inline]
pub(crate) fn tie_bound(
    how: NodeSearch,
    prefixes: &[u64],
    keys: &[Key],
    key: &SearchKey<'_>,
    first: usize,
    strict: bool,
) -> usize {
    debug_assert_eq!(prefixes.len(), keys.len());
    let n = prefixes.len();
    if first == n || prefixes[first] != key.prefix {
        return first;
    }
    let past = |i: usize| tie_past(prefixes, keys, key, strict, i);
    match how {
        NodeSearch::Linear => first + linear(n - first, |j| past(first + j)),
        NodeSearch::Binary => {
            // The slots sharing the prefix, then a binary search among them.
            let tie_count = binary(n - first, |j| prefixes[first + j] == key.prefix);
            first + binary(tie_count, |j| past(first + j))
        }
    }
}

/// Whether a tie search steps past slot `i`: same prefix and key below the search key (or
/// equal, when `strict`).
#[inline(always)]
fn tie_past(prefixes: &[u64], keys: &[Key], key: &SearchKey<'_>, strict: bool, i: usize) -> bool {
    prefixes[i] == key.prefix && {
        let order = key.cmp_tie(&keys[i]);
        order == Ordering::Greater || (strict && order == Ordering::Equal)
    }
}

/// Listing 2.3: `while (i < k && past(i)) i++`.
#[inline(always)]
fn linear(len: usize, past: impl Fn(usize) -> bool) -> usize {
    let mut i = 0;
    while i < len && past(i) {
        i += 1;
    }
    i
}

/// Listing 2.7, with `past(mid)` for `key > keys[mid]`. `past` must be monotone (true on a
/// prefix of the slots), which sorted slots guarantee.
#[inline(always)]
fn binary(len: usize, past: impl Fn(usize) -> bool) -> usize {
    let mut i = 0;
    let mut i_max = len;
    while i < i_max {
        let mid = (i + i_max) / 2;
        if past(mid) {
            i = mid + 1;
        } else {
            i_max = mid;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(keys: &[&[u8]]) -> (Vec<u64>, Vec<Key>) {
        let prefixes = keys.iter().map(|k| prefix_of(k)).collect();
        let keys = keys.iter().map(|k| Key::new(k)).collect();
        (prefixes, keys)
    }

    #[test]
    fn both_searches_agree_with_slice_order() {
        // Goal: prefix compare orders like byte strings; method: keys around the 8-byte
        // boundary and trailing zeros, every probe compared with a plain partition_point.
        let mut all: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"\0\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\x01",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefghj",
            b"abcdefgz",
            b"b",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        all.sort();
        all.dedup();
        let (prefixes, keys) = slots(&all);
        let mut probes = all.clone();
        probes.extend_from_slice(&[b"a\0\0", b"abcdefg", b"abcdefgh\0\0", b"c", b"\xff"]);
        for probe in probes {
            let sk = SearchKey::new(probe);
            let lower = all.partition_point(|k| *k < probe);
            let upper = all.partition_point(|k| *k <= probe);
            for how in [NodeSearch::Linear, NodeSearch::Binary] {
                assert_eq!(
                    lower_bound(how, &prefixes, &keys, &sk),
                    lower,
                    "{probe:?} {how:?}"
                );
                assert_eq!(
                    upper_bound(how, &prefixes, &keys, &sk),
                    upper,
                    "{probe:?} {how:?}"
                );
            }
            for (i, k) in all.iter().enumerate() {
                assert_eq!(
                    sk.cmp_slot(prefixes[i], k),
                    probe.cmp(k),
                    "{probe:?} vs {k:?}"
                );
            }
        }
    }
}
