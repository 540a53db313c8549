//! Review rev-bwleaf (issue 14, the base pages' common-prefix skip): whole-tree checks with
//! keys that share long prefixes of 0x00/0xFF bytes, so that pages' low and high keys share
//! prefixes, split, merge and consolidate (fast path and full), in memory and on an LSS with
//! a budget small enough that pages are evicted and rebuilt from storage.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::{Index, Order};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const STEMS: [&[u8]; 5] = [
    b"",
    b"\0\0\0\0\0\0\0\0\0\0\0\0",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    b"user1234567890",
    b"user1234567\xff\0",
];

/// A key: a stem's start, then adversarial bytes; `len` fixes the length (uniform pages).
fn gen_key(rng: &mut Rng, len: Option<usize>) -> Vec<u8> {
    const BYTES: [u8; 5] = [0x00, 0x01, 0x7f, 0xfe, 0xff];
    let stem = STEMS[rng.below(STEMS.len())];
    let len = len.unwrap_or_else(|| rng.below(stem.len() + 6));
    let keep = rng.below(stem.len() + 1).min(len);
    let mut key = stem[..keep].to_vec();
    if rng.below(3) > 0 {
        key = stem[..stem.len().min(len)].to_vec();
    }
    while key.len() < len {
        key.push(BYTES[rng.below(BYTES.len())]);
    }
    key
}

fn bound(rng: &mut Rng, len: Option<usize>) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(gen_key(rng, len)),
        _ => Bound::Excluded(gen_key(rng, len)),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
    }
}

fn run(tree: &BwTree, seed: u64, ops: usize, uniform: Option<usize>) {
    let mut rng = Rng(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in 0..ops {
        let key = gen_key(&mut rng, uniform);
        match rng.below(10) {
            0..=4 => {
                let value = format!("v{op}").into_bytes();
                let value = if uniform.is_some() {
                    vec![b'v'; 4]
                } else {
                    value
                };
                tree.upsert(&key, &value).unwrap();
                model.insert(key, value);
            }
            5..=6 => {
                assert_eq!(tree.remove(&key), model.remove(&key).is_some(), "op {op}");
            }
            7..=8 => {
                let mut out = Vec::new();
                let found = tree.get(&key, &mut out);
                assert_eq!(
                    found.then_some(&out),
                    model.get(&key),
                    "op {op} get {key:?}"
                );
            }
            _ => {
                let (lower, upper) = (bound(&mut rng, uniform), bound(&mut rng, uniform));
                let order = if rng.below(2) == 0 {
                    Order::Ascending
                } else {
                    Order::Descending
                };
                let limit = rng.below(40) + 1;
                let mut want: Vec<_> = match (&lower, &upper) {
                    (
                        Bound::Included(a) | Bound::Excluded(a),
                        Bound::Included(b) | Bound::Excluded(b),
                    ) if a > b => Vec::new(),
                    (Bound::Excluded(a), Bound::Excluded(b)) if a == b => Vec::new(),
                    _ => model
                        .range::<Vec<u8>, _>((lower.clone(), upper.clone()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                };
                if order == Order::Descending {
                    want.reverse();
                }
                want.truncate(limit);
                for pinned in [false, true] {
                    let mut got = Vec::new();
                    let mut visit = |k: &[u8], v: &[u8]| {
                        got.push((k.to_vec(), v.to_vec()));
                        if got.len() == limit {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    };
                    if pinned {
                        tree.scan_pinned(as_ref(&lower), as_ref(&upper), order, &mut visit);
                    } else {
                        tree.scan(as_ref(&lower), as_ref(&upper), order, &mut visit);
                    }
                    assert_eq!(
                        got, want,
                        "op {op} scan {lower:?} {upper:?} {order:?} pinned {pinned}"
                    );
                }
            }
        }
    }
    // Every key the generator can make, and the whole tree, at the end.
    let mut all = Vec::new();
    tree.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            all.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    );
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

fn small() -> BwTreeConfig {
    BwTreeConfig {
        max_records_per_page: 6,
        consolidate_threshold: 3,
        read_consolidate_threshold: 2,
        merge_threshold: 2,
    }
}

// Goal: the prefix skip keeps gets and scans (every bound kind, both orders, pinned or not)
// equal to a model while pages with prefix-sharing fences split, merge and consolidate.
// Method: random operations on 6-record pages with keys from STEMS, variable and fixed length.
#[test]
fn rev_prefix_keys_agree_with_a_model_in_memory() {
    for seed in 1..=6 {
        run(
            &BwTree::with_config(small()).unwrap(),
            seed * 0x9E37_79B9,
            6_000,
            None,
        );
        run(
            &BwTree::with_config(small()).unwrap(),
            seed * 0x7F4A_7C15,
            6_000,
            Some(14),
        );
    }
}

// Goal: as above, with pages evicted to an LSS and rebuilt (the rebuild builds base pages
// again, so their skip is recomputed). Method: an 8 KiB budget.
#[test]
fn rev_prefix_keys_agree_with_a_model_on_storage() {
    for (seed, uniform) in [(1, None), (2, Some(14))] {
        let (tree, _sim) = crate::evict::tree_on(small(), Some(8 << 10), seed);
        run(&tree, seed * 0x1234_5677, 4_000, uniform);
        let loads = tree.stats().counter("loads").unwrap();
        assert!(loads > 0, "pages were evicted and loaded again");
    }
}
