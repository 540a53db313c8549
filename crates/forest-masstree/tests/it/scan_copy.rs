//! How a batched scan copies records (crate::scan, session 11): keys are assembled from the
//! layer prefix, the slice and the suffix with fixed-size stores for pieces of up to 16
//! bytes, and only the blocks a batch will copy are prefetched. These tests aim at the
//! lengths around those paths (prefixes of 0-3 layers, suffixes of 0-20 bytes, values of
//! 0-100 bytes) and at scans racing updates that change a value's length.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8, MasstreeConfig, SuffixStorage};

/// A key `depth` layers deep (8-byte shared prefixes `layer-0`, `layer-1`, ...) ending in a
/// slice and a suffix of `suffix` bytes, distinct per `i`.
fn key(depth: usize, suffix: usize, i: u64) -> Vec<u8> {
    let mut k = Vec::new();
    for d in 0..depth {
        k.extend_from_slice(format!("layer-{d}").as_bytes());
    }
    k.extend_from_slice(&i.to_be_bytes());
    k.extend((0..suffix).map(|j| b'a' + ((i as usize + j) % 26) as u8));
    k
}

fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 7 + j) as u8).collect()
}

fn trees() -> Vec<(&'static str, Box<dyn Index>)> {
    vec![
        ("default", Box::new(Masstree::new())),
        (
            "separate",
            Box::new(Masstree::with_config(MasstreeConfig {
                suffix: SuffixStorage::Separate,
                ..MasstreeConfig::default()
            })),
        ),
        (
            "10x8-layers",
            Box::new(Masstree10x8::with_widths(MasstreeConfig {
                suffix: SuffixStorage::Layers,
                ..MasstreeConfig::default()
            })),
        ),
    ]
}

fn scan_of(
    t: &dyn Index,
    lower: Bound<&[u8]>,
    order: Order,
    stop: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let upper = Bound::Unbounded;
    let (lower, upper) = match order {
        Order::Ascending => (lower, upper),
        Order::Descending => (upper, lower),
    };
    let mut got = Vec::new();
    t.scan(lower, upper, order, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        if got.len() == stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    got
}

#[test]
fn keys_and_values_of_every_short_length_come_out_whole() {
    // Goal: every key comes out exactly, whatever the lengths of its layer prefix (0-24
    // bytes) and suffix (0-20 bytes), with values of 0-100 bytes, in both orders, from the
    // start and from the middle, stopped at and around batch ends. Method: keys of each
    // depth and suffix length with values of varied lengths, scans compared with a BTreeMap.
    for (name, t) in trees() {
        let mut m = BTreeMap::new();
        let mut i = 0u64;
        for depth in 0..=3 {
            for suffix in 0..=20 {
                for _ in 0..3 {
                    let (k, v) = (key(depth, suffix, i), value(i, (i as usize * 13) % 101));
                    t.upsert(&k, &v).expect("upsert");
                    m.insert(k, v);
                    i += 1;
                }
            }
        }
        let mid = key(2, 5, 100);
        for order in [Order::Ascending, Order::Descending] {
            for stop in [1, 31, 32, 33, 64, 65, usize::MAX] {
                for lower in [Bound::Unbounded, Bound::Included(&mid[..])] {
                    let got = scan_of(&*t, lower, order, stop);
                    let range = m.range::<[u8], _>(match order {
                        Order::Ascending => (lower, Bound::Unbounded),
                        Order::Descending => (Bound::Unbounded, lower),
                    });
                    let want: Vec<_> = match order {
                        Order::Ascending => range
                            .take(stop)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                        Order::Descending => range
                            .rev()
                            .take(stop)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    };
                    assert_eq!(got, want, "{name} {order:?} from {lower:?} stop {stop}");
                }
            }
        }
    }
}

#[test]
fn scans_racing_length_changing_updates_hand_out_values_that_were_present() {
    // Goal: while writers replace values with ones of other lengths (0-100 bytes), every
    // record a scan hands out is a value some writer stored for that key, and keys come out
    // strictly ordered and all present (no key is ever removed). Method: 400 keys in two
    // layers; two writers cycle each key's value through lengths; a reader scans in both
    // orders and checks each value against its key's pattern. Rounds: FOREST_TEST_ROUNDS
    // (default 20).
    let rounds: usize = std::env::var("FOREST_TEST_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    const N: u64 = 400;
    let t = Arc::new(Masstree::new());
    let keys: Vec<Vec<u8>> = (0..N)
        .map(|i| key(1 + (i % 2) as usize, (i % 17) as usize, i))
        .collect();
    // A value for key `i`: its length byte pattern from `i`, so a torn or foreign value shows.
    let valid = |i: u64, v: &[u8]| v == value(i, v.len()).as_slice();
    for (i, k) in keys.iter().enumerate() {
        t.upsert(k, &value(i as u64, 8)).expect("upsert");
    }
    let index_of: BTreeMap<Vec<u8>, u64> = keys.iter().cloned().zip(0..).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (t, keys, stop) = (Arc::clone(&t), keys.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut len = w as usize * 37;
                while !stop.load(Ordering::Relaxed) {
                    for (i, k) in keys.iter().enumerate().skip(w as usize).step_by(2) {
                        len = (len + 29) % 101;
                        t.upsert(k, &value(i as u64, len)).expect("upsert");
                    }
                }
            })
        })
        .collect();
    for round in 0..rounds {
        for order in [Order::Ascending, Order::Descending] {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            t.scan(Bound::Unbounded, Bound::Unbounded, order, &mut |k, v| {
                let i = *index_of.get(k).expect("a key that was inserted");
                assert!(
                    valid(i, v),
                    "round {round}: key {i} has a value no writer stored: {v:?}"
                );
                seen.push(k.to_vec());
                ControlFlow::Continue(())
            });
            if order == Order::Descending {
                seen.reverse();
            }
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "round {round} {order:?}: out of order"
            );
            assert_eq!(
                seen.len() as u64,
                N,
                "round {round} {order:?}: every key is present"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
}
