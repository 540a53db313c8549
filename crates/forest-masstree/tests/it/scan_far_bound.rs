//! A scan decides once per layer where the layer's keys stand against its far bound (upper
//! ascending, lower descending): all within, within while their slice comes before the
//! bound's, or compared whole (crate::scan `Far`); and it decides once per node whether
//! every slot lies ahead of the walk's place. These tests aim at the edges of those
//! decisions: bounds whose slice equals records' slices, bounds equal to a layer's prefix or
//! a prefix of it, bounds padded with zero bytes (which share a slice with the shorter key),
//! in layers 0-2, for the pinned, batched and hinted scans in both orders.

use std::ops::{Bound, ControlFlow};

use forest_core::index::in_bounds;
use forest_core::Order;

// The test's keys and bounds, the same on every run.
use crate::rev_mscan2::Rng;
use crate::scan_batches::trees;

/// An index below `n`.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// 8-byte layer prefixes that share all but their last byte, and one with zero padding.
const CHUNKS: [&[u8; 8]; 3] = [b"aaaaaaaa", b"aaaaaaab", b"b\0\0\0\0\0\0\0"];
/// Tail bytes: zero (ties of slices between a key and its zero-padded extension), 0xFF.
const TAIL: [u8; 4] = [0, b'a', b'b', 0xFF];

fn key(rng: &mut Rng) -> Vec<u8> {
    let mut k = Vec::new();
    for _ in 0..below(rng, 3) {
        k.extend_from_slice(CHUNKS[below(rng, CHUNKS.len())]);
    }
    for _ in 0..below(rng, 13) {
        k.push(TAIL[below(rng, TAIL.len())]);
    }
    k
}

/// A bound key near the keys: one of them, a prefix of one (at a layer's edge or not), one
/// with a byte added or its last byte changed.
fn bound_key(rng: &mut Rng, keys: &[Vec<u8>]) -> Vec<u8> {
    let mut k = keys[below(rng, keys.len())].clone();
    match below(rng, 5) {
        0 => {}
        1 => k.truncate(8 * (k.len() / 8)),
        2 => k.truncate(below(rng, k.len() + 1)),
        3 => k.push(TAIL[below(rng, TAIL.len())]),
        _ => {
            if let Some(last) = k.last_mut() {
                *last = TAIL[below(rng, TAIL.len())];
            }
        }
    }
    k
}

fn bound<'a>(rng: &mut Rng, k: &'a [u8]) -> Bound<&'a [u8]> {
    match below(rng, 5) {
        0 => Bound::Unbounded,
        1 | 2 => Bound::Included(k),
        _ => Bound::Excluded(k),
    }
}

#[test]
fn scans_stop_exactly_at_far_bounds_that_tie_on_a_slice() {
    // Goal: the far bound's slice shortcut and the per-node "all slots ahead" decision hand
    // out exactly the keys within the bounds, in order, in every scan kind. Method: 400
    // keys from 8-byte chunks that share 7 bytes and tails of 0 / 'a' / 'b' / 0xFF bytes
    // (layers 0-2, zero-padded slice ties), in a default tree and in one that makes a layer
    // for every long key; 400 bound pairs near the keys (equal to keys, to prefixes at and
    // off a layer's edge, one byte longer or changed), each bound Included / Excluded /
    // Unbounded; `scan_pinned`, `scan` and `scan_hinted` (hint 3) in both orders against
    // the sorted keys filtered by the bounds.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut keys: Vec<Vec<u8>> = (0..400).map(|_| key(&mut rng)).collect();
    keys.sort();
    keys.dedup();
    let bounds: Vec<(Vec<u8>, Vec<u8>, u64)> = (0..400)
        .map(|_| {
            (
                bound_key(&mut rng, &keys),
                bound_key(&mut rng, &keys),
                rng.next(),
            )
        })
        .collect();
    for (name, tree) in trees() {
        for (i, k) in keys.iter().enumerate() {
            tree.upsert(k, &(i as u32).to_le_bytes()).unwrap();
        }
        for (a, b, seed) in &bounds {
            let mut pick = Rng(*seed | 1);
            let (lower, upper) = (bound(&mut pick, a), bound(&mut pick, b));
            let want: Vec<&Vec<u8>> = keys.iter().filter(|k| in_bounds(k, lower, upper)).collect();
            for order in [Order::Ascending, Order::Descending] {
                let mut want = want.clone();
                if order == Order::Descending {
                    want.reverse();
                }
                for kind in ["pinned", "batched", "hinted"] {
                    let mut got: Vec<Vec<u8>> = Vec::new();
                    let visit = &mut |k: &[u8], v: &[u8]| {
                        let i = u32::from_le_bytes(v.try_into().unwrap()) as usize;
                        assert_eq!(keys[i], k, "{name} {kind}: a key with another's value");
                        got.push(k.to_vec());
                        ControlFlow::Continue(())
                    };
                    match kind {
                        "pinned" => tree.scan_pinned(lower, upper, order, visit),
                        "batched" => tree.scan(lower, upper, order, visit),
                        _ => tree.scan_hinted(lower, upper, order, 3, visit),
                    }
                    assert!(
                        got.iter().eq(want.iter().copied()),
                        "{name} {kind} {order:?} {lower:?}..{upper:?}: got {} keys, want {}",
                        got.len(),
                        want.len()
                    );
                }
            }
        }
    }
}
