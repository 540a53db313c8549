//! Scans that cross many layer-1 subtrees (crate::scan's kept layer stack: back from a layer,
//! the walk goes on in the parent node at its saved position if the node's version is
//! unchanged, and re-reads it from its place if not) while other threads split, empty and
//! remove the subtrees and the layer-0 nodes around them. Checked against a model of the keys
//! present throughout: each scan hands out every such key in its range (up to where it
//! stops), strictly ordered, none twice, and no key or value that was never written.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use forest_core::{Index, Order};
use forest_masstree::{Masstree, Masstree10x8};

/// Groups of keys sharing their first 8 bytes (one layer-1 subtree each).
const GROUPS: u64 = 240;
/// Keys of a group present throughout (every third group has none: its layer comes and goes).
const STABLE: u64 = 5;
/// Keys a writer adds to a group and removes again (enough to split its border node).
const CHURN: u64 = 24;

/// A key of `group`: 8 bytes of group, then 16 of `i` (a slice and a suffix); churn keys
/// (`i >= STABLE`) interleave with the stable ones.
fn key(group: u64, i: u64) -> Vec<u8> {
    format!("g{group:07}{:08}-{i:07}", i * 37 % 101).into_bytes()
}

/// A value naming its key, so a scan can check it got the record's own value.
fn value(k: &[u8]) -> Vec<u8> {
    let mut v = k.to_vec();
    v.extend_from_slice(b"=v");
    v
}

fn has_stable(group: u64) -> bool {
    !group.is_multiple_of(3)
}

fn is_stable(group: u64, i: u64) -> bool {
    has_stable(group) && i < STABLE
}

/// Parses a key back into (group, i).
fn parse(k: &[u8]) -> (u64, u64) {
    let s = std::str::from_utf8(k).expect("keys are text");
    let group = s[1..8].parse().expect("group");
    let i = s[17..].parse().expect("index");
    (group, i)
}

/// A writer's round: adds `CHURN` keys to a range of groups (splits), then removes them
/// (empties nodes; groups without stable keys lose their layer).
fn churn(t: &dyn Index, seed: u64, stop: &AtomicBool) {
    let mut x = seed;
    while !stop.load(Ordering::Relaxed) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let first = (x >> 33) % GROUPS;
        let groups: Vec<u64> = (first..(first + 6).min(GROUPS)).collect();
        for &g in &groups {
            for i in STABLE..STABLE + CHURN {
                let k = key(g, i);
                t.upsert(&k, &value(&k)).expect("within limits");
            }
        }
        for &g in &groups {
            for i in STABLE..STABLE + CHURN {
                t.remove(&key(g, i));
            }
        }
    }
}

/// How the racing scans are made.
#[derive(Clone, Copy)]
pub(crate) enum ScanKind {
    /// `Index::scan`, stopping after 1-200 records.
    Plain,
    /// `Index::scan_hinted` with a hint of 0-4 (a first batch of 1-4 records), stopping after
    /// 1-120 records (review rev-mscan3, session 18).
    Hinted,
}

/// One scan from a random bound in `order`, stopping after `stop` records; checks it against
/// the stable keys (the model of keys present throughout).
fn checked_scan(t: &dyn Index, x: u64, order: Order, stable: &[Vec<u8>], kind: ScanKind) {
    let g = x % GROUPS;
    let bound = key(g, (x >> 20) % (STABLE + CHURN));
    let (stop, hint) = match kind {
        ScanKind::Plain => (1 + ((x >> 40) % 200) as usize, None),
        ScanKind::Hinted => (
            1 + ((x >> 40) % 120) as usize,
            Some(((x >> 30) % 5) as usize),
        ),
    };
    let (lower, upper) = match order {
        Order::Ascending => (Bound::Included(&bound[..]), Bound::Unbounded),
        Order::Descending => (Bound::Unbounded, Bound::Included(&bound[..])),
    };
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut visit = |k: &[u8], v: &[u8]| {
        assert_eq!(v, value(k), "a record with another key's value");
        let (group, i) = parse(k);
        assert!(group < GROUPS && i < STABLE + CHURN, "a key never written");
        got.push(k.to_vec());
        if got.len() == stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    match hint {
        None => t.scan(lower, upper, order, &mut visit),
        Some(hint) => t.scan_hinted(lower, upper, order, hint, &mut visit),
    }
    let ordered = match order {
        Order::Ascending => got.windows(2).all(|w| w[0] < w[1]),
        Order::Descending => got.windows(2).all(|w| w[0] > w[1]),
    };
    assert!(ordered, "{order:?} hint {hint:?}: not strictly ordered");
    // The stable keys the scan passed (up to its last key, or all in range if it ran out).
    let last = got.last().cloned();
    let passed = |k: &Vec<u8>| match (order, &last) {
        (Order::Ascending, _) if *k < bound => false,
        (Order::Descending, _) if *k > bound => false,
        (_, None) => true,
        (_, Some(_)) if got.len() < stop => true,
        (Order::Ascending, Some(l)) => k <= l,
        (Order::Descending, Some(l)) => k >= l,
    };
    let mut want: Vec<&Vec<u8>> = stable.iter().filter(|k| passed(k)).collect();
    if order == Order::Descending {
        want.reverse();
    }
    let seen: Vec<&Vec<u8>> = got.iter().filter(|k| is_stable_key(k)).collect();
    assert_eq!(
        seen, want,
        "{order:?} from {bound:?}, hint {hint:?}, stop {stop}"
    );
}

fn is_stable_key(k: &[u8]) -> bool {
    let (g, i) = parse(k);
    is_stable(g, i)
}

/// Two writers churn groups while an ascending and a descending scanner each run `scans`
/// checked scans of `kind`; then a quiet whole scan gives exactly the stable keys.
pub(crate) fn scans_across_layers_racing_splits_and_removals(
    t: Arc<dyn Index>,
    scans: u64,
    kind: ScanKind,
) {
    // Seeds per kind, so the plain and hinted tests race different schedules.
    let (writer_seed, scan_seed) = match kind {
        ScanKind::Plain => (1, 0x9E37_79B9_7F4A_7C15u64),
        ScanKind::Hinted => (11, 0x5DEE_CE66_D1CE_4E5Bu64),
    };
    let mut stable: Vec<Vec<u8>> = Vec::new();
    for g in 0..GROUPS {
        for i in 0..STABLE {
            if is_stable(g, i) {
                stable.push(key(g, i));
            }
        }
    }
    for k in &stable {
        assert!(t.insert(k, &value(k)).expect("within limits"));
    }
    stable.sort();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (t, stop) = (Arc::clone(&t), Arc::clone(&stop));
            std::thread::spawn(move || churn(&*t, w + writer_seed, &stop))
        })
        .collect();
    let stable = Arc::new(stable);
    let scanners: Vec<_> = [Order::Ascending, Order::Descending]
        .into_iter()
        .map(|order| {
            let (t, stable) = (Arc::clone(&t), Arc::clone(&stable));
            std::thread::spawn(move || {
                let mut x = scan_seed ^ order as u64;
                for _ in 0..scans {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    checked_scan(&*t, x, order, &stable, kind);
                }
            })
        })
        .collect();
    let results: Vec<_> = scanners.into_iter().map(|s| s.join()).collect();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    for r in results {
        r.expect("scanner");
    }
    // Quiet again: a whole scan gives exactly the stable keys and the churn left over.
    let mut all = Vec::new();
    t.scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, _| {
            all.push(k.to_vec());
            ControlFlow::Continue(())
        },
    );
    all.retain(|k| is_stable_key(k));
    assert_eq!(all, *stable);
}

#[test]
fn scans_across_layer1_subtrees_racing_splits_and_removals() {
    // Goal: the kept layer stack (a parent-layer node resumed at its saved position when its
    // version is unchanged, re-read from its place when not) loses, repeats and misorders no
    // key present throughout, while writers split, empty and remove layer-1 nodes, remove
    // whole layers and split or empty the layer-0 nodes holding their links. Method: 240
    // groups of 5 stable keys (every third group none); two writers add and remove 24 keys
    // in runs of 6 groups; an ascending and a descending scanner check each scan against
    // the stable keys; the paper's shape and small nodes (more splits).
    scans_across_layers_racing_splits_and_removals(
        Arc::new(Masstree::new()),
        3_000,
        ScanKind::Plain,
    );
    scans_across_layers_racing_splits_and_removals(
        Arc::new(Masstree10x8::with_widths(Default::default())),
        3_000,
        ScanKind::Plain,
    );
}
