//! Scans in batches (crate::scan): a scan copies records under a pin in batches of 32, then
//! of all handed out so far once 128 were, and goes on from past the last key handed out by
//! a new descent through the layers; `Masstree::scan_pinned` walks the same way with its
//! visitor under the pin. These tests aim at the seams: stops and resumptions at every batch
//! boundary, inside deep layers, in both orders, with bounds, and the pinned and hinted
//! (`Index::scan_hinted`: first batch sized by the caller) scans agreeing with the batched
//! one.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8, MasstreeConfig, SuffixStorage};

/// Keys of several layers: plain 8-byte keys, keys sharing 8 and 16-byte prefixes (layers),
/// keys ending inside a slice (lengths 1-7) and long keys with suffixes.
fn key(i: u64) -> Vec<u8> {
    match i % 5 {
        0 => i.to_be_bytes().to_vec(),
        1 => {
            let mut k = b"prefix01".to_vec();
            k.extend_from_slice(&(i / 7).to_be_bytes());
            k.truncate(8 + (i % 9) as usize);
            k
        }
        2 => {
            let mut k = b"prefix01prefix02".to_vec();
            k.extend_from_slice(format!("{i:012}").as_bytes());
            k
        }
        3 => format!("p{}", i % 97).into_bytes(),
        _ => format!("prefix01-suffix-{i:08}-tail").into_bytes(),
    }
}

/// The paper's shape, and small nodes with every long key in layers.
pub(crate) fn trees() -> Vec<(&'static str, Box<dyn Index>)> {
    vec![
        ("default", Box::new(Masstree::new())),
        (
            "10x8-layers",
            Box::new(Masstree10x8::with_widths(MasstreeConfig {
                suffix: SuffixStorage::Layers,
                ..MasstreeConfig::default()
            })),
        ),
    ]
}

/// Loads keys 0..n (value `v{i}`) into `t`; returns the model of what it holds.
fn load(t: &dyn Index, n: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        let v = format!("v{i}").into_bytes();
        t.upsert(&key(i), &v).expect("upsert");
        m.insert(key(i), v);
    }
    m
}

/// What a scan of `t` hands out, stopping after `stop` records.
fn scan_of(
    t: &dyn Index,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    stop: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
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

/// What a hinted scan of `t` hands out, its visitor breaking on the record that makes `stop`.
pub(crate) fn hinted_scan_of(
    t: &dyn Index,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    hint: usize,
    stop: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    t.scan_hinted(lower, upper, order, hint, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        if got.len() >= stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    got
}

/// What the model holds in range, in `order`, at most `stop` records.
fn model_of(
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    stop: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let range = m
        .range::<[u8], _>((lower, upper))
        .map(|(k, v)| (k.clone(), v.clone()));
    match order {
        Order::Ascending => range.take(stop).collect(),
        Order::Descending => range.rev().take(stop).collect(),
    }
}

#[test]
fn stops_and_resumptions_at_every_batch_boundary() {
    // Goal: a scan that stops, or goes on to a next batch, right at or next to a batch's
    // end hands out exactly the model's records, in both orders, from bounds that fall in
    // deep layers. Method: 3,000 keys over several layers; scans from several bounds that
    // stop after n records for n around each batch boundary (16, 32, 128, 256, 512, 1024,
    // 2048) and without stopping; compared with a BTreeMap.
    const N: u64 = 3_000;
    for (name, t) in trees() {
        let m = load(&*t, N);
        let stops = [
            1,
            15,
            16,
            17,
            31,
            32,
            33,
            127,
            128,
            129,
            255,
            256,
            257,
            511,
            512,
            513,
            1023,
            1024,
            1025,
            2047,
            2048,
            2049,
            usize::MAX,
        ];
        let bounds = [
            key(2),
            key(1_001),
            key(7),
            b"prefix01".to_vec(),
            b"p5".to_vec(),
        ];
        for order in [Order::Ascending, Order::Descending] {
            for stop in stops {
                let got = scan_of(&*t, Bound::Unbounded, Bound::Unbounded, order, stop);
                let want = model_of(&m, Bound::Unbounded, Bound::Unbounded, order, stop);
                assert_eq!(got, want, "{name} {order:?} unbounded stop {stop}");
                for b in &bounds {
                    let (lo, hi) = match order {
                        Order::Ascending => (Bound::Excluded(&b[..]), Bound::Unbounded),
                        Order::Descending => (Bound::Unbounded, Bound::Included(&b[..])),
                    };
                    let got = scan_of(&*t, lo, hi, order, stop);
                    let want = model_of(&m, lo, hi, order, stop);
                    assert_eq!(got, want, "{name} {order:?} from {b:?} stop {stop}");
                }
            }
        }
    }
}

#[test]
fn pinned_scans_agree_with_batched_scans() {
    // Goal: `scan_pinned` (visitor under the pin, no batches) hands out what `scan` does, in
    // both orders, with every kind of bound and early stops. Method: the same tree scanned
    // both ways over a grid of bounds and stops.
    let t = Masstree::new();
    for i in 0..2_000 {
        t.upsert(&key(i), &key(i + 1)).expect("upsert");
    }
    let points = [
        key(3),
        key(10),
        key(444),
        b"prefix01prefix02".to_vec(),
        b"q".to_vec(),
    ];
    let mut bounds = vec![Bound::Unbounded];
    for p in &points {
        bounds.push(Bound::Included(&p[..]));
        bounds.push(Bound::Excluded(&p[..]));
    }
    for order in [Order::Ascending, Order::Descending] {
        for lo in &bounds {
            for hi in &bounds {
                for stop in [1, 16, 17, 300, usize::MAX] {
                    let want = scan_of(&t, *lo, *hi, order, stop);
                    let mut got = Vec::new();
                    t.scan_pinned(*lo, *hi, order, &mut |k, v| {
                        got.push((k.to_vec(), v.to_vec()));
                        if got.len() == stop {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    });
                    assert_eq!(got, want, "{order:?} {lo:?}..{hi:?} stop {stop}");
                }
            }
        }
    }
}

#[test]
fn hinted_scans_hand_out_what_plain_scans_do() {
    // Goal: `scan_hinted` (first batch sized by the hint, `crate::scan`) hands out exactly
    // the model's records whatever the hint, when the visitor stops before, at or after the
    // hint, in both orders, from bounds that fall in deep layers. Method: 3,000 keys over
    // several layers; hints of 0, 1, around the default batch sizes and the largest batch;
    // visitors breaking on the record that makes `stop`; compared with a BTreeMap.
    const N: u64 = 3_000;
    for (name, t) in trees() {
        let m = load(&*t, N);
        let bounds = [key(2), key(1_001), b"prefix01".to_vec(), b"p5".to_vec()];
        for order in [Order::Ascending, Order::Descending] {
            for hint in [
                0,
                1,
                2,
                31,
                32,
                33,
                100,
                1023,
                1024,
                1025,
                5_000,
                usize::MAX,
            ] {
                for stop in [
                    1,
                    hint.max(1) - 1,
                    hint,
                    hint.saturating_add(1),
                    hint.saturating_add(129),
                    usize::MAX,
                ] {
                    for b in &bounds {
                        let (lo, hi) = match order {
                            Order::Ascending => (Bound::Included(&b[..]), Bound::Unbounded),
                            Order::Descending => (Bound::Unbounded, Bound::Excluded(&b[..])),
                        };
                        let got = hinted_scan_of(&*t, lo, hi, order, hint, stop);
                        let want = model_of(&m, lo, hi, order, stop.max(1));
                        assert_eq!(
                            got, want,
                            "{name} {order:?} from {b:?} hint {hint} stop {stop}"
                        );
                    }
                }
            }
        }
    }
}
