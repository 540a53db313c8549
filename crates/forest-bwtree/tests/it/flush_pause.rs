//! A flush racing updates, splits, merges and consolidations, reached on purpose with pause
//! points (forest-llama's `flush:reserved`, before the flush delta's CAS, and
//! `flush:installed`, after it and before the piece is copied): the piece written is the
//! state the flush captured, a flush that lost its CAS leaves a filler and no flush delta, and
//! afterwards every page's pieces rebuild to its records at ESL.
//!
//! Run with `cargo test -p forest-bwtree --features pause-points --test flush_pause`. The hook
//! is process-wide, so all scenarios run in one test, one after another.
#![cfg(feature = "pause-points")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use common::{flush_until_done, leaf_records, open_lss, rebuild, tree_with_esl, Model};
use forest_bwtree::flush::PageFlush;
use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
use forest_core::Index;
use forest_file::SimDir;
use forest_llama::lss::{Lss, LssAddress, RecordKind};
use forest_llama::Pid;

const ESL: u64 = 1_000;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

struct Setup {
    tree: Arc<BwTree>,
    _esl: Arc<AtomicU64>,
    lss: Arc<Lss>,
    model: Model,
    lsn: u64,
}

impl Setup {
    fn new(seed: u64, keys: u32) -> Self {
        let config = BwTreeConfig {
            max_records_per_page: 4,
            consolidate_threshold: 3,
            read_consolidate_threshold: 3,
            merge_threshold: 2,
        };
        let (tree, esl) = tree_with_esl(config, ESL);
        let mut setup = Self {
            tree: Arc::new(tree),
            _esl: esl,
            lss: Arc::new(open_lss(&SimDir::new(seed), LssAddress::current(0))),
            model: Model::default(),
            lsn: 0,
        };
        for i in 0..keys {
            setup.put(i * 10);
        }
        setup
    }

    fn put(&mut self, i: u32) {
        self.lsn += 1;
        let v = self.lsn.to_le_bytes();
        self.tree.upsert_with_lsn(&key(i), &v, self.lsn).unwrap();
        self.model.put(&key(i), &v, self.lsn);
    }

    fn remove(&mut self, k: &[u8]) {
        self.lsn += 1;
        if self.tree.remove_with_lsn(k, self.lsn).unwrap() {
            self.model.remove(k, self.lsn);
        }
    }

    /// Starts a flush of `pid` on the pauser thread, stopped at `point`.
    fn paused_flush(&self, pid: Pid, point: &'static str) -> PausedFlush {
        let gate = arm(point);
        let (tree, lss) = (Arc::clone(&self.tree), Arc::clone(&self.lss));
        let pauser = spawn_pauser(move || tree.flush_page(pid, &lss).unwrap());
        gate.wait_paused();
        PausedFlush { gate, pauser }
    }

    /// Flushes every page until done, makes the LSS stable, and checks that each page's
    /// pieces rebuild to its image and the leaves to the model at ESL.
    fn check_all(&self) {
        let mut addresses = Vec::new();
        for pid in self.tree.page_ids() {
            if let Some(address) = flush_until_done(&self.tree, &self.lss, pid) {
                addresses.push((pid, address));
            }
        }
        let last = addresses.iter().map(|a| a.1).max().unwrap();
        self.lss.mk_stable(last).unwrap();
        let mut rebuilt = BTreeMap::new();
        for (pid, address) in addresses {
            let image = rebuild(&self.lss, pid, address);
            assert_eq!(image, self.tree.page_image(pid).unwrap(), "page {pid}");
            if image.level == 0 {
                rebuilt.extend(image.records);
            }
        }
        assert_eq!(rebuilt, self.model.at(ESL));
        assert_eq!(leaf_records(&self.tree), self.model.at(ESL));
    }
}

struct PausedFlush {
    gate: Arc<forest_core::conformance::pause::Gate>,
    pauser: std::thread::JoinHandle<PageFlush>,
}

impl PausedFlush {
    fn finish(self) -> PageFlush {
        self.gate.release();
        let outcome = self.pauser.join().unwrap();
        disarm();
        outcome
    }
}

/// The leaf holding `k`.
fn leaf_of(tree: &BwTree, k: &[u8]) -> Pid {
    for pid in tree.page_ids() {
        let image = tree.page_image(pid).unwrap();
        if image.level == 0
            && image.low.as_slice() <= k
            && image.high.as_ref().is_none_or(|h| k < h.as_slice())
        {
            return pid;
        }
    }
    panic!("no leaf holds {k:?}");
}

/// Checks that the piece at `address` is exactly `expected` (the captured state).
fn assert_piece(
    lss: &Lss,
    pid: Pid,
    address: LssAddress,
    expected: &forest_bwtree::flush::PageImage,
) {
    lss.mk_stable(address).unwrap();
    assert_eq!(&rebuild(lss, pid, address), expected);
}

#[test]
fn flush_races_updates_splits_merges_and_consolidations() {
    let _turn = take_turn();

    // 1. An update between the reservation and the CAS: the flush loses, a filler remains.
    let mut s = Setup::new(1, 3);
    let pid = s.tree.page_ids()[0];
    let paused = s.paused_flush(pid, "flush:reserved");
    s.put(5);
    let PageFlush::Lost { filler } = paused.finish() else {
        panic!("the page changed before the CAS");
    };
    assert_eq!(
        s.tree.last_flush(pid),
        None,
        "a lost flush installs nothing"
    );
    s.lss.mk_stable(filler).unwrap();
    let record = s.lss.read(filler).unwrap();
    assert_eq!(record.header.kind, RecordKind::FailedFlush);
    assert_eq!(record.header.pid, pid);
    s.check_all();

    // 2. A split (and the consolidations with it) after the CAS, before the copy: the piece
    // is the page as captured, with the records the split moved to the new page.
    let mut s = Setup::new(2, 4);
    let pid = s.tree.page_ids()[0];
    let expected = s.tree.page_image(pid).unwrap();
    let paused = s.paused_flush(pid, "flush:installed");
    for i in 0..6 {
        s.put(i * 10 + 5);
    }
    assert!(s.tree.stats().counter("splits").unwrap() > 0);
    let PageFlush::Flushed { address, kind, .. } = paused.finish() else {
        panic!("nothing changed the page before the CAS");
    };
    assert_eq!(kind, RecordKind::PageImage);
    assert_piece(&s.lss, pid, address, &expected);
    assert_eq!(
        expected.records.len(),
        4,
        "the piece keeps the records split away"
    );
    s.check_all();

    // 3. A split between the reservation and the CAS: the flush loses.
    let mut s = Setup::new(3, 4);
    let pid = s.tree.page_ids()[0];
    let paused = s.paused_flush(pid, "flush:reserved");
    s.put(15);
    s.put(25);
    assert!(s.tree.stats().counter("splits").unwrap() > 0);
    assert!(matches!(paused.finish(), PageFlush::Lost { .. }));
    assert_eq!(s.tree.last_flush(pid), None);
    s.check_all();

    // 4. A merge of the page into its left sibling after the CAS: the page is frozen,
    // absorbed and its PID freed while the copy waits; the piece is the captured page.
    let mut s = Setup::new(4, 24);
    let victim = key(130);
    let pid = leaf_of(&s.tree, &victim);
    let expected = s.tree.page_image(pid).unwrap();
    assert!(!expected.low.is_empty(), "not the first leaf");
    let paused = s.paused_flush(pid, "flush:installed");
    let merges = s.tree.stats().counter("merges").unwrap();
    for (k, _) in &expected.records {
        s.remove(k);
    }
    assert!(s.tree.stats().counter("merges").unwrap() > merges);
    let PageFlush::Flushed { address, .. } = paused.finish() else {
        panic!("nothing changed the page before the CAS");
    };
    assert_piece(&s.lss, pid, address, &expected);
    s.check_all();

    // 5. Consolidations on top of the flush delta after the CAS: the piece is the captured
    // page; the next flush writes what the updates changed.
    let mut s = Setup::new(5, 3);
    let pid = s.tree.page_ids()[0];
    let expected = s.tree.page_image(pid).unwrap();
    let paused = s.paused_flush(pid, "flush:installed");
    let consolidations = s.tree.stats().counter("consolidations").unwrap();
    for _ in 0..4 {
        s.put(10);
        s.put(20);
    }
    assert!(s.tree.stats().counter("consolidations").unwrap() > consolidations);
    let PageFlush::Flushed { address, .. } = paused.finish() else {
        panic!("nothing changed the page before the CAS");
    };
    assert_piece(&s.lss, pid, address, &expected);
    s.check_all();

    // 6. A flush racing a flush: the second, from the same state, loses its CAS.
    let s = Setup::new(6, 3);
    let pid = s.tree.page_ids()[0];
    let paused = s.paused_flush(pid, "flush:reserved");
    let PageFlush::Flushed { address: won, .. } = s.tree.flush_page(pid, &s.lss).unwrap() else {
        panic!("the unpaused flush wins");
    };
    let PageFlush::Lost { filler } = paused.finish() else {
        panic!("the paused flush read the state before the winner's delta");
    };
    assert!(filler < won, "the paused flush reserved first");
    assert_eq!(
        s.tree.last_flush(pid).unwrap().address,
        won,
        "one flush delta"
    );
    s.check_all();
}
