//! Review rev-mscan3 (session 18) of h-mscan3's hinted scans (`Index::scan_hinted`, masstree's
//! first batch sized by the hint): seams at every small first-batch size, with both bounds
//! inside deep layers and of every kind, and hinted scans with tiny first batches racing
//! splits and layer removals.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8};

use crate::scan_batches::{hinted_scan_of, trees};
use crate::scan_layers::{scans_across_layers_racing_splits_and_removals, ScanKind};

/// A scan's lower and upper bound, owned.
type OwnedBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Keys in layers 0-3: a shared 8-, 16- and 24-byte prefix, ending at every length inside
/// the next slice (1-8 bytes: keys whose layer holds fewer than 8 bytes) and past it (suffix).
fn deep_key(i: u64) -> Vec<u8> {
    let depth = (i % 4) as usize;
    let mut k = b"AAAAAAAABBBBBBBBCCCCCCCC"[..8 * depth].to_vec();
    let tail = format!("{:06}-{:06}", i / 4, i);
    let len = 1 + (i / 4 % 13) as usize;
    k.extend_from_slice(&tail.as_bytes()[..len]);
    k
}

#[test]
fn hinted_scans_with_both_bounds_inside_deep_layers() {
    // Goal: a hinted scan's first batch of 1..=40 records (every seam position), with both
    // bounds inside layers 1-3 (Included and Excluded, on keys and between them), hands out
    // exactly the model's records in both orders whatever the visitor's stop. Method: 1,200
    // keys over 4 layers; every hint 0..=40 and 1024, stops 1..=hint+3 and never.
    const N: u64 = 1_200;
    for (name, t) in trees() {
        let mut m = BTreeMap::new();
        for i in 0..N {
            let k = deep_key(i);
            let v = format!("v{i}-").repeat(1 + (i % 3) as usize).into_bytes();
            t.upsert(&k, &v).expect("upsert");
            m.insert(k, v);
        }
        let keys: Vec<Vec<u8>> = m.keys().cloned().collect();
        let n = keys.len();
        assert!(n > 400, "{n} distinct keys");
        let mut between = keys[n / 4 + 1].clone();
        between.push(0);
        let pairs: Vec<OwnedBounds> = vec![
            (
                Bound::Included(keys[n / 4].clone()),
                Bound::Excluded(keys[3 * n / 4].clone()),
            ),
            (
                Bound::Excluded(keys[n / 10].clone()),
                Bound::Included(keys[n / 10 + 60].clone()),
            ),
            (
                Bound::Excluded(between.clone()),
                Bound::Included(b"AAAAAAAABBBBBBBB".to_vec()),
            ),
            (
                Bound::Included(b"AAAAAAAA".to_vec()),
                Bound::Excluded(b"AAAAAAAABBBBBBBBCCCCCCCD".to_vec()),
            ),
        ];
        for (lo, hi) in &pairs {
            let (lo, hi) = (lo.as_ref().map(|k| &k[..]), hi.as_ref().map(|k| &k[..]));
            for order in [Order::Ascending, Order::Descending] {
                let mut all: Vec<(Vec<u8>, Vec<u8>)> = m
                    .range::<[u8], _>((lo, hi))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if order == Order::Descending {
                    all.reverse();
                }
                assert!(all.len() > 10, "{name}: a range of {} records", all.len());
                for hint in (0..=40).chain([1024, usize::MAX]) {
                    let stops = (1..=hint.min(60) + 3).chain([usize::MAX]);
                    for stop in stops {
                        let got = hinted_scan_of(&*t, lo, hi, order, hint, stop);
                        let want: Vec<_> = all.iter().take(stop).cloned().collect();
                        assert!(
                            got == want,
                            "{name} {order:?} {lo:?}..{hi:?} hint {hint} stop {stop}: got {} records, want {}; first difference at {:?}",
                            got.len(),
                            want.len(),
                            got.iter().zip(&want).position(|(a, b)| a != b)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn hinted_scans_with_tiny_first_batches_racing_splits_and_removals() {
    // Goal: a hinted scan whose first batch holds 1-4 records (seams right at the start, in
    // layer-1 subtrees) loses, repeats and misorders no key present throughout while writers
    // split and empty nodes and remove layers. Method: scan_layers.rs's harness through
    // `scan_hinted` with hints 0..=4 and stops 1..=120 (then its quiet whole-scan check);
    // both node shapes, 2,000 scans per order.
    scans_across_layers_racing_splits_and_removals(
        Arc::new(Masstree::new()),
        2_000,
        ScanKind::Hinted,
    );
    scans_across_layers_racing_splits_and_removals(
        Arc::new(Masstree10x8::with_widths(Default::default())),
        2_000,
        ScanKind::Hinted,
    );
}

#[test]
fn a_hinted_batch_of_large_values_still_ends_at_the_byte_bound() {
    // Goal: with a hint of 1024, a batch of 64 KiB values still ends at the 256 KiB byte
    // bound (the thread's buffer stays small) and the visitor runs between batches. Method:
    // a batch boundary is observable: a key inserted by the visitor just after the record it
    // is visiting is handed out only if the next batch starts after that record. 40 records
    // of 64 KiB; the visitor inserts `key ++ "+"` after each original record; some must come
    // back within the first 8 records, none before the 4th (a batch holds at least 4).
    let t = Masstree::new();
    let big = vec![7u8; 64 * 1024];
    for i in 0..40u32 {
        t.upsert(format!("k{i:04}").as_bytes(), &big)
            .expect("upsert");
    }
    let mut order_seen: Vec<Vec<u8>> = Vec::new();
    t.scan_hinted(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        1024,
        &mut |k, v| {
            if k.len() == 5 {
                assert_eq!(v.len(), big.len());
            }
            order_seen.push(k.to_vec());
            if k.len() == 5 {
                let mut after = k.to_vec();
                after.push(b'+');
                t.upsert(&after, b"small").expect("upsert");
            }
            ControlFlow::Continue(())
        },
    );
    // A seen inserted key (length 6) right after record j means a batch ended at j.
    let firsts: Vec<usize> = order_seen
        .iter()
        .enumerate()
        .filter(|(_, k)| k.len() == 6)
        .map(|(i, _)| i)
        .collect();
    assert!(
        firsts.first().is_some_and(|&i| (4..=8).contains(&i)),
        "inserted keys seen at positions {firsts:?}: the first batch did not end at the byte bound"
    );
}

/// The positions (in what a scan hands out) at which a batch boundary fell, observed by
/// inserting `key ++ "+"` after each original record from inside the visitor: such a key is
/// handed out only if the next batch starts after the record it follows. The scan stops
/// after `stop` original records.
fn batch_ends(t: &dyn Index, hint: usize, stop: usize) -> Vec<usize> {
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut originals = 0;
    t.scan_hinted(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        hint,
        &mut |k, _| {
            seen.push(k.to_vec());
            if k.last() == Some(&b'+') {
                return ControlFlow::Continue(());
            }
            originals += 1;
            if originals == stop {
                return ControlFlow::Break(());
            }
            let mut after = k.to_vec();
            after.push(b'+');
            t.upsert(&after, b"s").expect("upsert");
            ControlFlow::Continue(())
        },
    );
    // Original records handed out before each inserted key that came back.
    let mut ends = Vec::new();
    let mut n = 0;
    for k in &seen {
        if k.last() == Some(&b'+') {
            ends.push(n);
        } else {
            n += 1;
        }
    }
    ends
}

#[test]
fn hint_survives_a_first_batch_cut_by_the_byte_bound() {
    // Goal (`scan_hinted`'s doc: "a caller that takes that many gets them ... and nothing is
    // copied (or prefetched) past them"): a scan hinted 100 whose visitor takes 100 records
    // of 4 KiB values. The first batch ends at the 256 KiB byte bound after ~63 records; the
    // 37 still expected (~150 KiB) fit one more batch. Method: `batch_ends` observes the
    // boundaries; on the branch the second batch holds 32 (the default quota: the hint is
    // forgotten), so a third descent copies 32 records of which the visitor takes 5.
    let t = Masstree::new();
    let value = vec![3u8; 4096];
    for i in 0..300u32 {
        t.upsert(format!("k{i:05}").as_bytes(), &value)
            .expect("upsert");
    }
    let ends = batch_ends(&t, 100, 100);
    // The second batch also holds the one inserted key that follows the first batch's last
    // record, so it ends one original short of 100 (at 99): only boundaries below that count.
    let early: Vec<usize> = ends.iter().copied().filter(|&e| e < 99).collect();
    assert_eq!(
        early.len(),
        1,
        "batch boundaries after original records {ends:?}: more than the byte bound's one, \
         so the last batch copied records past the 100 the hint named"
    );
}
