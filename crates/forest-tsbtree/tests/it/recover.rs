//! Opening tsbtree from LSS-C (issue 18, `src/recover.rs`): a mapping checkpoint with the
//! root, and `tsb-meta` (clock, retention threshold) beside it; the scan from S. After a
//! clean close every version and every as-of answer is back, on a second generation too;
//! after a simulated power loss (SimDir's crash, images written but not synced kept or torn
//! at random) each key's history is a prefix of the one before the crash holding every
//! version a sync made stable, and nothing else; the conformance and temporal kits pass on
//! a reopened tree; a damaged checkpoint or meta file is refused naming the file.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_core::{Error, Index, Order, TemporalIndex};
use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::parse_segment_file_name;
use forest_llama::lss::{LssAddress, LSS_OFFSET_MAX};
use forest_llama::recover::RecoveredMap;
use forest_tsbtree::{TsbConfig, TsbTree, META_FILE};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::on_lss::{lss_config, small, SEGMENT_BYTES};
use crate::storage::history;

/// Each key's versions: timestamp → value (None: a tombstone).
type Model = BTreeMap<Vec<u8>, BTreeMap<u64, Option<Vec<u8>>>>;

/// Opens the tree in the two simulated directories (LSS, checkpoints), `budget` resident.
fn open(
    lss_sim: &SimDir,
    ckpt_sim: &SimDir,
    config: TsbConfig,
    budget: Option<usize>,
) -> forest_core::Result<(TsbTree, RecoveredMap)> {
    let lss_dir: Arc<dyn Dir> = Arc::new(lss_sim.clone());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(ckpt_sim.clone());
    TsbTree::open(config, lss_dir, lss_config(), ckpt_dir, budget)
}

/// A clean close: every page flushed, a checkpoint, the LSS closed.
fn close(tree: TsbTree) {
    tree.flush_resident_pages().unwrap();
    tree.take_map_checkpoint(0).unwrap();
    let lss = Arc::clone(tree.lss().unwrap());
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();
}

/// What a sync acknowledges: every page flushed and a checkpoint (whose walk makes every
/// image stable).
fn sync(tree: &TsbTree) {
    tree.flush_resident_pages().unwrap();
    tree.take_map_checkpoint(0).unwrap();
}

/// A power loss: unsynced writes of both directories kept, torn or lost at random.
fn crash(tree: TsbTree, lss_sim: &SimDir, ckpt_sim: &SimDir) {
    let lss = Arc::clone(tree.lss().unwrap());
    lss_sim.crash();
    ckpt_sim.crash();
    drop(tree);
    drop(lss);
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// `ops` random upserts (3 in 4) and removes over `keys` keys, recorded in `model`.
fn random_work(tree: &TsbTree, model: &mut Model, rng: &mut SmallRng, keys: u32, ops: usize) {
    for op in 0..ops {
        let k = key(rng.random_range(0..keys));
        if rng.random_ratio(3, 4) {
            let value = format!("{op}:{}", rng.random::<u32>()).into_bytes();
            let ts = tree.upsert_ts(&k, &value).unwrap();
            model.entry(k).or_default().insert(ts, Some(value));
        } else if let Some(ts) = tree.remove_ts(&k) {
            model.entry(k).or_default().insert(ts, None);
        }
    }
}

fn at(versions: &BTreeMap<u64, Option<Vec<u8>>>, t: u64) -> Option<Vec<u8>> {
    versions
        .range(..=t)
        .next_back()
        .and_then(|(_, v)| v.clone())
}

fn scan_as_of(tree: &TsbTree, t: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    tree.scan_as_of(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        t,
        &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    )
    .unwrap();
    out
}

/// The tree answers as `model` says: every key's whole history, as-of gets at every 7th
/// recorded time (each key), as-of scans at a few times, the current scan; and its
/// structure checks.
fn check_equal(tree: &TsbTree, model: &Model) {
    tree.check_structure().unwrap();
    for (k, versions) in model {
        let want: Vec<_> = versions.iter().map(|(&t, v)| (t, v.clone())).collect();
        assert_eq!(history(tree, k), want, "history of {k:?}");
    }
    let mut stamps: Vec<u64> = model.values().flat_map(|v| v.keys().copied()).collect();
    stamps.sort_unstable();
    for &t in stamps.iter().step_by(7) {
        for (k, versions) in model {
            let mut out = Vec::new();
            let found = tree.get_as_of(k, t, &mut out).unwrap();
            assert_eq!(found.then_some(out), at(versions, t), "{k:?} as of {t}");
        }
    }
    for &t in stamps
        .iter()
        .step_by(stamps.len() / 5 + 1)
        .chain([&u64::MAX])
    {
        let want: Vec<_> = model
            .iter()
            .filter_map(|(k, versions)| at(versions, t).map(|v| (k.clone(), v)))
            .collect();
        assert_eq!(scan_as_of(tree, t), want, "scan as of {t}");
    }
}

// Goal: a clean close and reopen gives the same current state and the same history (every
// as-of get, scan and history), with pages evicted and loaded, key and time splits, index
// time splits and root growth before the close; and again on a second generation with
// writes and a checkpoint in between. Method: 3 000 random writes over 150 keys on small
// pages and a 24-page budget, close, reopen, compare with the model; 2 000 more, a
// checkpoint, 2 000 more, close, reopen, compare; new timestamps exceed every recovered one.
#[test]
fn a_clean_close_reopens_with_every_version() {
    let (lss_sim, ckpt_sim) = (SimDir::new(71), SimDir::new(72));
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = Model::new();
    let (tree, map) = open(&lss_sim, &ckpt_sim, small(), Some(24)).unwrap();
    assert!(map.pages.is_empty(), "a new LSS");
    random_work(&tree, &mut model, &mut rng, 150, 3000);
    assert!(
        tree.evict_stats().unwrap().evictions.get() > 0,
        "pages were evicted"
    );
    let height = tree.stats().height;
    assert!(height >= 3, "height {height}");
    close(tree);

    let (tree, map) = open(&lss_sim, &ckpt_sim, small(), Some(24)).unwrap();
    assert!(map.checkpoint.is_some());
    assert_eq!(tree.resident_pages(), 0, "nothing is read at open");
    check_equal(&tree, &model);
    let newest = model
        .values()
        .flat_map(|v| v.keys())
        .max()
        .copied()
        .unwrap();
    let ts = tree.upsert_ts(b"after", b"reopen").unwrap();
    assert!(ts > newest, "{ts} after the recovered {newest}");
    model
        .entry(b"after".to_vec())
        .or_default()
        .insert(ts, Some(b"reopen".to_vec()));
    random_work(&tree, &mut model, &mut rng, 150, 2000);
    tree.take_map_checkpoint(0).unwrap();
    random_work(&tree, &mut model, &mut rng, 150, 2000);
    close(tree);

    let (tree, _) = open(&lss_sim, &ckpt_sim, small(), None).unwrap();
    check_equal(&tree, &model);
}

// Goal: after a power loss each key's history is a prefix of its history before the crash
// (nothing stale, nothing invented), holding every version written before the last sync;
// current gets agree with that history, as-of gets at synced times with the model; the
// reopened tree goes on (timestamps above every recovered one) through three such crashes.
// Method: per round, random writes with a sync (flush pass + checkpoint) at a random point
// and unsynced writes after it on a 16-page budget (evictions write images that may or may
// not survive), then SimDir crashes of both directories, reopen, check; the model becomes
// what was recovered.
#[test]
fn a_power_loss_keeps_every_synced_version_and_nothing_stale() {
    let (lss_sim, ckpt_sim) = (SimDir::new(81), SimDir::new(82));
    let mut rng = SmallRng::seed_from_u64(8);
    let mut model = Model::new();
    let (mut tree, _) = open(&lss_sim, &ckpt_sim, small(), Some(16)).unwrap();
    for round in 0..3 {
        random_work(&tree, &mut model, &mut rng, 120, 1000);
        sync(&tree);
        let synced = tree.now();
        random_work(&tree, &mut model, &mut rng, 120, 1000);
        crash(tree, &lss_sim, &ckpt_sim);

        let (reopened, _) = open(&lss_sim, &ckpt_sim, small(), Some(16)).unwrap();
        tree = reopened;
        tree.check_structure().unwrap();
        let (recovered, beyond) = check_prefix(&tree, &model, synced, &format!("round {round}"));
        eprintln!("round {round}: {beyond} versions after the sync survived the crash");
        let newest = recovered.values().flat_map(|v| v.keys()).max().copied();
        assert!(tree.now() >= newest.unwrap_or(0));
        model = recovered;
    }
    check_equal(&tree, &model);
}

/// After a crash: each key's history in `tree` is a prefix of `model`'s holding every version
/// at or before `synced`, the current value is the prefix's last, and as-of gets at synced
/// times agree with the model. Returns the recovered model and the versions after `synced`
/// that survived.
fn check_prefix(tree: &TsbTree, model: &Model, synced: u64, what: &str) -> (Model, usize) {
    let mut recovered = Model::new();
    let mut beyond = 0;
    for (k, versions) in model {
        let got = history(tree, k);
        let want: Vec<_> = versions.iter().map(|(&t, v)| (t, v.clone())).collect();
        assert!(
            want.starts_with(&got),
            "{what}: history of {k:?} is no prefix: {got:?} vs {want:?}"
        );
        let synced_count = versions.range(..=synced).count();
        assert!(
            got.len() >= synced_count,
            "{what}: {k:?} lost synced versions: {} of {synced_count}",
            got.len()
        );
        beyond += got.len() - synced_count;
        let mut out = Vec::new();
        let current = tree.get(k, &mut out).then_some(out);
        assert_eq!(
            current,
            got.last().and_then(|(_, v)| v.clone()),
            "{what}: current {k:?}"
        );
        for &t in versions.range(..=synced).map(|(t, _)| t).step_by(3) {
            let mut out = Vec::new();
            let found = tree.get_as_of(k, t, &mut out).unwrap();
            assert_eq!(
                found.then_some(out),
                at(versions, t),
                "{what}: {k:?} as of {t}"
            );
        }
        if !got.is_empty() {
            recovered.insert(k.clone(), got.into_iter().collect());
        }
    }
    (recovered, beyond)
}

// Goal: whatever prefix of LSS-C survives, the tree recovers consistent (no dangling link,
// structure checks pass) with each key's history a prefix holding every synced version: the
// flush order (`src/storage.rs`) at every address, not only where a crash happens to cut.
// Method (three seeds): a sync, then 1 500 unsynced writes with a flush of a random page every 4th (no
// Mk-Stable: images of splits' pages in any order), the LSS closed; then, from the end down
// to the sync's end in 16 steps, the segment zeroed from the cut on (a power loss whose
// stable prefix ended there), the tree reopened and checked, 600 more writes on it (its
// recovered pages split again) and checked again.
#[test]
fn every_cut_of_lss_c_after_a_sync_recovers_consistent() {
    for seed in [11, 12, 13] {
        cuts_recover_consistent(seed);
    }
}

fn cuts_recover_consistent(seed: u64) {
    let (lss_sim, ckpt_sim) = (SimDir::new(seed * 10), SimDir::new(seed * 10 + 1));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::new();
    let (tree, _) = open(&lss_sim, &ckpt_sim, small(), None).unwrap();
    random_work(&tree, &mut model, &mut rng, 120, 1500);
    sync(&tree);
    let synced = tree.now();
    let lss = Arc::clone(tree.lss().unwrap());
    let synced_end = lss.hi_stable().offset();
    for op in 0..1500 {
        random_work(&tree, &mut model, &mut rng, 120, 1);
        if op % 4 == 0 {
            let pids = tree.page_ids();
            tree.flush_page(pids[rng.random_range(0..pids.len())])
                .unwrap();
        }
    }
    let end = lss
        .mk_stable(LssAddress::current(LSS_OFFSET_MAX))
        .unwrap()
        .offset();
    drop(tree);
    Arc::try_unwrap(lss).ok().unwrap().close().unwrap();
    assert!(
        end > synced_end + 4096,
        "unsynced images: {synced_end}..{end}"
    );
    let mut survived = Vec::new();
    for step in (0..16u64).rev() {
        let cut = synced_end + (end - synced_end) * step / 16;
        for name in lss_sim.list().unwrap() {
            let Some(segment) = parse_segment_file_name(&name) else {
                continue;
            };
            let from = (segment * SEGMENT_BYTES)
                .max(cut)
                .saturating_sub(segment * SEGMENT_BYTES);
            lss_sim.damage(&name, |bytes| {
                let from = (from as usize).min(bytes.len());
                bytes[from..].fill(0);
            });
        }
        let (tree, _) = open(&lss_sim, &ckpt_sim, small(), None).unwrap();
        tree.check_structure().unwrap();
        let what = format!("seed {seed}, cut at {cut}");
        let (mut recovered, beyond) = check_prefix(&tree, &model, synced, &what);
        survived.push(beyond);
        // Splits of recovered pages (their posts meet the parents recovered beside them).
        random_work(&tree, &mut recovered, &mut rng, 120, 600);
        tree.check_structure().unwrap();
        for (k, versions) in &recovered {
            let want: Vec<_> = versions.iter().map(|(&t, v)| (t, v.clone())).collect();
            assert_eq!(
                history(&tree, k),
                want,
                "{what}: history of {k:?} after more writes"
            );
        }
    }
    eprintln!("seed {seed}: versions after the sync kept, from the end down: {survived:?}");
    assert!(
        survived[0] > 0 && survived[15] < survived[0],
        "{survived:?}"
    );
}

/// A tree for the kits: 400 writes over keys no kit uses, all removed again (so the kits'
/// current and as-of checks at their own times see none), a clean close, and the reopened
/// tree on `budget`.
fn reopened(config: TsbConfig, budget: Option<usize>, seed: u64) -> TsbTree {
    let (lss_sim, ckpt_sim) = (SimDir::new(seed), SimDir::new(seed + 1));
    let (tree, _) = open(&lss_sim, &ckpt_sim, config.clone(), budget).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let prework = |i: u32| format!("\u{1}recover-prework/{i:03}").into_bytes();
    for op in 0..400u32 {
        tree.upsert(
            &prework(rng.random_range(0..60)),
            format!("{op}").as_bytes(),
        )
        .unwrap();
    }
    for i in 0..60 {
        tree.remove(&prework(i));
    }
    close(tree);
    open(&lss_sim, &ckpt_sim, config, budget).unwrap().0
}

/// Small pages, every page evicted at open, 64 resident.
pub fn reopened_small() -> TsbTree {
    reopened(small(), Some(64), 91)
}

forest_core::conformance_tests!(
    kit_reopened,
    super::reopened_small,
    sizes = crate::storage::tiny_sizes()
);
forest_core::temporal_conformance_tests!(
    temporal_reopened,
    super::reopened_small,
    sizes = crate::storage::tiny_sizes()
);

// Goal: a damaged newest checkpoint falls back to the older one; every checkpoint damaged is
// refused naming the files; a damaged meta file is refused naming it. Method: two
// checkpoints; flip a byte of the newest (reopen: the older one, the same answers); then of
// the older too (refused, both named); the meta file damaged (refused, named).
#[test]
fn a_damaged_checkpoint_or_meta_is_refused_naming_the_file() {
    let (lss_sim, ckpt_sim) = (SimDir::new(101), SimDir::new(102));
    let mut rng = SmallRng::seed_from_u64(10);
    let mut model = Model::new();
    let (tree, _) = open(&lss_sim, &ckpt_sim, small(), None).unwrap();
    random_work(&tree, &mut model, &mut rng, 80, 800);
    sync(&tree);
    random_work(&tree, &mut model, &mut rng, 80, 800);
    close(tree);
    let names = ckpt_sim.list().unwrap();
    let maps: Vec<&String> = names.iter().filter(|n| n.starts_with("map-")).collect();
    assert_eq!(maps.len(), 2, "{names:?}");
    let (older, newest) = (maps[0].clone(), maps[1].clone());

    assert!(ckpt_sim.damage(&newest, |b| b[100] ^= 1));
    let (tree, map) = open(&lss_sim, &ckpt_sim, small(), None).unwrap();
    assert_eq!(map.checkpoint.as_ref().unwrap().0, older, "fell back");
    assert_eq!(map.rejected.len(), 1);
    check_equal(&tree, &model);
    // No write since: the set-aside copy stays as it is, the older one is the newest.
    drop(tree);

    assert!(ckpt_sim.damage(&older, |b| b[100] ^= 1));
    let e = open(&lss_sim, &ckpt_sim, small(), None).err().unwrap();
    let text = e.to_string();
    assert!(matches!(e, Error::Corrupt { .. }), "{text}");
    assert!(text.contains(&older), "{text}");
    assert!(ckpt_sim.damage(&older, |b| b[100] ^= 1), "undone");

    assert!(ckpt_sim.damage(META_FILE, |b| b[20] ^= 1));
    let e = open(&lss_sim, &ckpt_sim, small(), None).err().unwrap();
    let text = e.to_string();
    let Error::Corrupt { path, .. } = &e else {
        panic!("not a corruption error: {text}");
    };
    assert!(path.ends_with(META_FILE), "{text}");
}
