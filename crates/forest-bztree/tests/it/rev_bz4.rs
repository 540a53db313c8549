//! Review rev-bz4 (session 19, branch h-bz4): the internal nodes' key prefix array. A model
//! test with adversarial keys (prefix ties, trailing zero bytes, empty key, keys of exactly
//! 8 bytes, separators equal to the searched key) against a BTreeMap, volatile and in a file
//! reopened; and the version-1 file's refusal.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::path::Path;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::{Index, Order};
use forest_pmwcas::{Clwb, Persist};

/// Keys whose 8-byte zero-padded prefixes tie in many ways.
fn adversarial_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let bases: [&[u8]; 9] = [
        b"",
        b"\0",
        b"a",
        b"ab",
        b"abcdefg",
        b"abcdefgh",
        b"abcdefghi",
        b"\xff\xff\xff\xff\xff\xff\xff\xff",
        b"abcdefg\0",
    ];
    for base in bases {
        for zeros in 0..10 {
            let mut k = base.to_vec();
            k.extend(std::iter::repeat_n(0u8, zeros));
            keys.push(k.clone());
            k.push(1);
            keys.push(k.clone());
            k.push(0xff);
            keys.push(k);
        }
    }
    // Many keys sharing one 8-byte prefix (every separator among them a tie), and sharing
    // a 7-byte prefix with a zero 8th byte (the padded prefix of the 7-byte key).
    for i in 0u32..400 {
        let mut k = b"abcdefgh".to_vec();
        k.extend_from_slice(&i.to_be_bytes()[2..]);
        keys.push(k);
        let mut k = b"abcdefg\0".to_vec();
        k.extend_from_slice(&i.to_be_bytes()[2..]);
        keys.push(k);
        let mut k = b"a".to_vec();
        k.extend(std::iter::repeat_n(0u8, (i % 12) as usize));
        k.extend_from_slice(&i.to_be_bytes()[2..]);
        keys.push(k);
        // 8-byte keys whose first 7 bytes tie.
        let mut k = b"zzzzzzz".to_vec();
        k.push(i as u8);
        keys.push(k);
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Keys not inserted but adjacent to inserted ones in every way a prefix can tie.
fn probes(keys: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut p = Vec::new();
    for k in keys {
        let mut a = k.clone();
        a.push(0);
        p.push(a);
        if !k.is_empty() {
            p.push(k[..k.len() - 1].to_vec());
        }
        let mut b = k.clone();
        b.push(0x80);
        p.push(b);
    }
    p
}

/// A deterministic shuffle (xorshift), so the splits fall at varied keys.
fn shuffled(mut v: Vec<Vec<u8>>, seed: u64) -> Vec<Vec<u8>> {
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn value_of(k: &[u8]) -> Vec<u8> {
    let mut v = b"v".to_vec();
    v.extend_from_slice(k);
    v
}

fn scan<P: Persist>(
    tree: &BzTree<P>,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    order: Order,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    tree.scan(lo, hi, order, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    });
    got
}

fn check<P: Persist>(
    tree: &BzTree<P>,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    all: &[Vec<u8>],
    what: &str,
) {
    let mut out = Vec::new();
    for k in all.iter().chain(probes(all).iter()) {
        let found = tree.get(k, &mut out).then(|| out.clone());
        assert_eq!(found.as_ref(), model.get(k), "{what}: get {k:?}");
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(
        scan(tree, Bound::Unbounded, Bound::Unbounded, Order::Ascending),
        want,
        "{what}: full scan"
    );
    // Range scans bounded at tie keys, both inclusive and exclusive, both orders.
    for (i, lo) in all.iter().enumerate().step_by(7) {
        let hi = &all[(i * 31 + 5) % all.len()];
        for (lb, hb) in [
            (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
            (Bound::Excluded(&lo[..]), Bound::Excluded(&hi[..])),
            (Bound::Included(&lo[..]), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(&hi[..])),
        ] {
            if let (
                Bound::Included(a) | Bound::Excluded(a),
                Bound::Included(b) | Bound::Excluded(b),
            ) = (lb, hb)
            {
                if a > b {
                    continue;
                }
            }
            let want: Vec<_> = model
                .range::<[u8], _>((lb, hb))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(
                scan(tree, lb, hb, Order::Ascending),
                want,
                "{what}: scan {lb:?}..{hb:?}"
            );
            let mut rev = want.clone();
            rev.reverse();
            assert_eq!(
                scan(tree, lb, hb, Order::Descending),
                rev,
                "{what}: rev scan {lb:?}..{hb:?}"
            );
        }
    }
    // `audit` is for a quiescent tree (retired chunks wait for their epoch): after a reopen.
    assert_eq!(
        tree.stats().key_count,
        model.len() as u64,
        "{what}: key count"
    );
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn exercise<P: Persist>(tree: &BzTree<P>) -> (Model, Vec<Vec<u8>>) {
    let all = adversarial_keys();
    let mut model = BTreeMap::new();
    for k in shuffled(all.clone(), 0x9e37_79b9) {
        assert!(tree.insert(&k, &value_of(&k)).unwrap(), "insert {k:?}");
        model.insert(k.clone(), value_of(&k));
    }
    let height = tree.stats().height;
    assert!(
        height >= 3,
        "the keys must build internal levels: height {height}"
    );
    check(tree, &model, &all, "after inserts");
    // Remove two thirds (merges, root collapse on the way), then upsert some back.
    for (i, k) in shuffled(all.clone(), 77).iter().enumerate() {
        if i % 3 != 0 {
            assert!(tree.remove(k), "remove {k:?}");
            model.remove(k);
        }
    }
    check(tree, &model, &all, "after removes");
    for (i, k) in all.iter().enumerate().step_by(5) {
        let v = format!("u{i}").into_bytes();
        tree.upsert(k, &v).unwrap();
        model.insert(k.clone(), v);
    }
    check(tree, &model, &all, "after upserts");
    (model, all)
}

// Goal: with keys whose prefixes tie (b"a" vs b"a\0", the empty key, 8-byte keys, thousands
// sharing 8 bytes), every get, scan and audit agrees with a BTreeMap: the prefix search
// answers as the full-key search did.
#[test]
fn adversarial_prefix_keys_match_a_model() {
    let tree = BzTree::with_config(BzTreeConfig::with_node_size(256)).unwrap();
    let _ = exercise(&tree);
}

fn pm_config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 64 << 20,
        descriptor_count: 1024,
        inline_value_max: 32,
        ..BzTreeConfig::with_node_size(256)
    }
}

// Goal: the same in a bztree-pm file, and after reopening it (prefix arrays read back).
#[test]
fn adversarial_prefix_keys_match_a_model_in_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pool");
    let reopen = || BzTree::open(&path, pm_config(), Clwb::detect()).unwrap();
    let (model, all) = {
        let tree = reopen();
        exercise(&tree)
    };
    let tree = reopen();
    check(&tree, &model, &all, "after reopen");
    let audit = tree
        .audit()
        .unwrap_or_else(|e| panic!("after reopen: audit: {e}"));
    assert_eq!(audit.keys, model.len() as u64);
}

fn open_error(path: &Path) -> String {
    match BzTree::open(path, pm_config(), Clwb::detect()) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e.to_string(),
    }
}

// Goal: a version-1 file (before the prefix arrays) is refused with an error naming the
// version, never read as version 2.
#[test]
fn version_1_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    {
        let t = BzTree::open(&tree, pm_config(), Clwb::detect()).unwrap();
        for i in 0u32..2000 {
            t.insert(&i.to_be_bytes(), b"x").unwrap();
        }
    }
    let mut bytes = std::fs::read(&tree).unwrap();
    let version_at = 64 + 2 * 8;
    assert_eq!(bytes[version_at..version_at + 8], 2u64.to_le_bytes());
    bytes[version_at..version_at + 8].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(&tree, &bytes).unwrap();
    let e = open_error(&tree);
    eprintln!("version-1 error: {e}");
    assert!(e.contains("version 1"), "{e}");
}

fn anon_huge_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// KiB of this process's mappings the kernel counts as eligible for transparent huge pages
/// (`THPeligible: 1` in /proc/self/smaps: `madvise(MADV_HUGEPAGE)` applied, or THP `always`).
fn thp_eligible_kib() -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut size = 0;
    let mut total = 0;
    for line in smaps.lines() {
        if let Some(v) = line.strip_prefix("Size:") {
            size = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        } else if line.strip_prefix("THPeligible:").map(str::trim) == Some("1") {
            total += size;
        }
    }
    total
}

// Goal (a check that holds where THP is `madvise` or `always`): the volatile tree's heap is
// advised for huge pages (the crate doc's claim). Whether the kernel then backs it with huge
// pages depends on free contiguous memory, so the check is the advice the kernel recorded
// (`THPeligible`), not `AnonHugePages`, which is printed. Informational where THP is off.
#[test]
fn volatile_heap_gets_huge_pages() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let (before, eligible_before) = (anon_huge_kib(), thp_eligible_kib());
    let tree = BzTree::with_config(BzTreeConfig {
        heap_bytes: 256 << 20,
        ..BzTreeConfig::default()
    })
    .unwrap();
    for i in 0u64..200_000 {
        tree.insert(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes(), b"v")
            .unwrap();
    }
    let (after, eligible_after) = (anon_huge_kib(), thp_eligible_kib());
    eprintln!(
        "THP {thp:?}: AnonHugePages {before} kB -> {after} kB, THP-eligible {eligible_before} kB \
         -> {eligible_after} kB, heap {} B",
        tree.memory_in_use()
    );
    if thp.contains("[madvise]") || thp.contains("[always]") {
        assert!(
            eligible_after >= eligible_before + (128 << 10),
            "the heap is not THP-eligible: {eligible_before} -> {eligible_after} kB"
        );
    }
}
