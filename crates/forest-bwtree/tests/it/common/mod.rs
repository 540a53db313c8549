//! Helpers shared by the test modules (flushing, reading a whole tree back).
#![allow(dead_code)] // each test binary uses a part
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use forest_bwtree::flush::{DeltaRun, PageFlush, PageImage};
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::{Index, Order};
use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordKind};
use forest_llama::Pid;

pub fn lss_config() -> LssConfig {
    LssConfig {
        segment_bytes: 256 << 10,
        buffer_bytes: 8 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

pub fn open_lss(sim: &SimDir, stable_at_least: LssAddress) -> Lss {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    Lss::open(dir, lss_config(), stable_at_least).unwrap().0
}

/// A tree whose ESL is the returned atomic.
pub fn tree_with_esl(config: BwTreeConfig, esl: u64) -> (BwTree, Arc<AtomicU64>) {
    let source = Arc::new(AtomicU64::new(esl));
    let tree = BwTree::with_config(config)
        .unwrap()
        .with_esl_source(source.clone());
    (tree, source)
}

pub fn set_esl(source: &AtomicU64, esl: u64) {
    source.store(esl, Ordering::SeqCst);
}

/// Rebuilds the page whose newest piece is at `address` from its pieces: the image, then
/// each run newest last. Checks each piece names `pid`.
pub fn rebuild(lss: &Lss, pid: Pid, address: LssAddress) -> PageImage {
    let mut runs = Vec::new();
    let mut at = address;
    loop {
        let record = lss.read(at).unwrap();
        assert_eq!(record.header.pid, pid, "piece at {at} names page {pid}");
        match record.header.kind {
            RecordKind::DeltaRun => {
                runs.push(DeltaRun::decode(&record.payload).unwrap());
                at = record.header.prev.expect("a run names its previous piece");
                assert!(at < address, "pieces link backwards");
            }
            RecordKind::PageImage => {
                let mut image = PageImage::decode(&record.payload).unwrap();
                for run in runs.iter().rev() {
                    image.apply(run);
                }
                return image;
            }
            other => panic!("page {pid}'s piece at {at} is a {other:?}"),
        }
    }
}

/// Flushes `pid` until it is flushed or clean; the address of its newest piece, if any.
pub fn flush_until_done(tree: &BwTree, lss: &Lss, pid: Pid) -> Option<LssAddress> {
    loop {
        match tree.flush_page(pid, lss).unwrap() {
            PageFlush::Flushed { address, .. } => return Some(address),
            PageFlush::Clean => return tree.last_flush(pid).map(|f| f.address),
            PageFlush::Lost { .. } => continue,
            PageFlush::Frozen | PageFlush::Gone => return None,
        }
    }
}

/// Every leaf's records at the ESL, from memory, merged (the pages partition the keys when
/// no merge is half done).
pub fn leaf_records(tree: &BwTree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    for pid in tree.page_ids() {
        let Some(image) = tree.page_image(pid) else {
            continue;
        };
        if image.level == 0 {
            for (k, v) in image.records {
                assert!(all.insert(k, v).is_none(), "a key on two leaves");
            }
        }
    }
    all
}

/// One write of the model: its LSN and the value, `None` for a remove.
pub type Write = (u64, Option<Vec<u8>>);

/// Model of a store's writes: per key, its writes in LSN order.
#[derive(Default)]
pub struct Model {
    pub writes: BTreeMap<Vec<u8>, Vec<Write>>,
}

impl Model {
    pub fn put(&mut self, key: &[u8], value: &[u8], lsn: u64) {
        self.writes
            .entry(key.to_vec())
            .or_default()
            .push((lsn, Some(value.to_vec())));
    }

    pub fn remove(&mut self, key: &[u8], lsn: u64) {
        self.writes
            .entry(key.to_vec())
            .or_default()
            .push((lsn, None));
    }

    /// Each key's newest value with LSN <= `esl`.
    pub fn at(&self, esl: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.writes
            .iter()
            .filter_map(|(k, writes)| {
                let (_, value) = writes.iter().rev().find(|(lsn, _)| *lsn <= esl)?;
                Some((k.clone(), value.clone()?))
            })
            .collect()
    }
}

/// Every record of `tree`, by a scan.
pub fn contents(tree: &BwTree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    tree.try_scan(
        Bound::Unbounded,
        Bound::Unbounded,
        Order::Ascending,
        &mut |k, v| {
            all.insert(k.to_vec(), v.to_vec());
            std::ops::ControlFlow::Continue(())
        },
    )
    .unwrap();
    all
}

/// A counter of `tree`'s stats, by name.
pub fn counter(tree: &BwTree, name: &str) -> u64 {
    tree.stats().counter(name).unwrap()
}

/// Flushes every page until it is flushed or clean, then makes everything stable.
pub fn flush_all(tree: &BwTree) {
    let lss: &Lss = tree.lss().unwrap();
    for pid in tree.page_ids() {
        flush_until_done(tree, lss, pid);
    }
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
}

/// Flushes every page in memory (evicted ones are left), retrying lost flushes, then makes
/// everything stable.
pub fn flush_resident(tree: &BwTree) {
    let lss = Arc::clone(tree.lss().unwrap());
    for pid in tree.page_ids() {
        if tree.evicted_at(pid).is_none() {
            while let PageFlush::Lost { .. } = tree.flush_page(pid, &lss).unwrap() {}
        }
    }
    lss.mk_stable(LssAddress::current(u64::MAX >> 4)).unwrap();
}

/// Scans all of `tree` in ascending order, through `scan_pinned` or `scan`.
pub fn scan_all(tree: &BwTree, pinned: bool, visit: &mut forest_core::Visitor<'_>) {
    if pinned {
        tree.scan_pinned(Bound::Unbounded, Bound::Unbounded, Order::Ascending, visit);
    } else {
        tree.scan(Bound::Unbounded, Bound::Unbounded, Order::Ascending, visit);
    }
}

/// Rewrites every published map checkpoint in `sim` as version 2 (without its live pieces),
/// so the next recovering open reads the segments below S (forest-llama `recover.rs` step
/// 5's pass): for tests whose premise is that pass (damage it meets in dead segments).
pub fn map_checkpoints_as_version_2(sim: &SimDir) {
    for name in sim.list().unwrap() {
        if forest_llama::checkpoint::parse_map_file_name(&name).is_none() {
            continue;
        }
        let mut bytes = Vec::new();
        sim.open(&name).unwrap().read_all(&mut bytes).unwrap();
        let mut c = forest_llama::checkpoint::decode(std::path::Path::new(&name), &bytes).unwrap();
        c.pieces = None;
        assert!(sim.damage(&name, |b| *b = c.encode()));
    }
}
