//! Review rev-bwscan (session 17) of branch h-bwscan: scans consolidate byte-sized leaves past
//! one delta (`consolidate.rs` `consolidate_after_scan`, `SCAN_LEAF_CHAIN_MAX` = 1).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use crate::common;

use std::ops::{Bound, ControlFlow};

use common::{open_lss, tree_with_esl};
use forest_bwtree::flush::PageFlush;
use forest_bwtree::BwTreeConfig;
use forest_core::stats::names;
use forest_core::{Index, Order};
use forest_file::SimDir;
use forest_llama::lss::{LssAddress, RecordKind};

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

// Goal (F1): a scan of a flushed byte-sized leaf does not turn its next flush from an
// incremental delta run into a whole page image. Method: one leaf of 20 records with 100-byte
// values (sized in bytes under the default config), ESL above every LSN; flush it (an image),
// write one record, scan the leaf (both scans), flush again: on main the second flush is a
// delta run of one record; on the branch the scan consolidated base + flush delta + one write
// (a chain of 2, "past one delta": the flush delta counts), folding an unflushed write, so
// the flush delta is carried *behind* and the second flush writes the whole ~2.5 KiB page.
#[test]
#[ignore = "rev: F1 a scan after one write makes the next flush a whole page image (LSS write amplification)"]
fn rev_bwscan_f1_scan_keeps_the_next_flush_incremental() {
    for pinned in [false, true] {
        let sim = SimDir::new(1);
        let lss = open_lss(&sim, LssAddress::current(0));
        let (tree, _esl) = tree_with_esl(BwTreeConfig::default(), 1_000_000);
        let value = vec![7u8; 100];
        for i in 0..20u32 {
            tree.upsert_with_lsn(&key(i), &value, u64::from(i) + 1).unwrap();
        }
        let pids = tree.page_ids();
        assert_eq!(pids.len(), 1, "one leaf");
        let pid = pids[0];
        let PageFlush::Flushed { kind, .. } = tree.flush_page(pid, &lss).unwrap() else {
            panic!("a first flush writes");
        };
        assert_eq!(kind, RecordKind::PageImage);
        let before = tree.stats().counter(names::CONSOLIDATIONS).unwrap();
        tree.upsert_with_lsn(&key(3), b"new", 100).unwrap();
        let mut seen = 0;
        let mut visit = |_: &[u8], _: &[u8]| {
            seen += 1;
            ControlFlow::Continue(())
        };
        if pinned {
            tree.scan_pinned(Bound::Unbounded, Bound::Unbounded, Order::Ascending, &mut visit);
        } else {
            tree.scan(Bound::Unbounded, Bound::Unbounded, Order::Ascending, &mut visit);
        }
        assert_eq!(seen, 20);
        let consolidated = tree.stats().counter(names::CONSOLIDATIONS).unwrap() - before;
        let PageFlush::Flushed { kind, .. } = tree.flush_page(pid, &lss).unwrap() else {
            panic!("the write is unflushed");
        };
        assert_eq!(
            kind,
            RecordKind::DeltaRun,
            "pinned {pinned}: one write since the last flush should be a delta run; the scan \
             consolidated {consolidated} time(s) and made the flush delta behind"
        );
    }
}
