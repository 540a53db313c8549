//! The set-up the LSS-C modules share (`storage`, `storage_pause`, `rev_tsb6`, `recover`):
//! a simulated LSS with segments large enough for the largest entry (`src/storage.rs`
//! "Split by bytes"), small pages, and a byte flipped in a page's image.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns; a panic is the failure

use std::sync::Arc;

use forest_file::{Dir, SimDir};
use forest_llama::lss::segment::segment_file_name;
use forest_llama::lss::{Lss, LssAddress, LssConfig};
use forest_tsbtree::{TsbConfig, TsbTree};

pub const SEGMENT_BYTES: u64 = 4 << 20;

/// The LSS configuration of every module here.
pub fn lss_config() -> LssConfig {
    LssConfig {
        segment_bytes: SEGMENT_BYTES,
        buffer_bytes: 64 << 10,
        buffer_count: 2,
        writer_thread_count: 1,
    }
}

/// A fresh LSS in `sim`.
pub fn lss_on(sim: &SimDir) -> Arc<Lss> {
    let dir: Arc<dyn Dir> = Arc::new(sim.clone());
    Arc::new(
        Lss::open(dir, lss_config(), LssAddress::current(0))
            .unwrap()
            .0,
    )
}

/// Small pages: key and time splits start after a few writes.
pub fn small() -> TsbConfig {
    TsbConfig {
        max_records_per_page: 4,
        max_index_entries: 4,
        consolidate_threshold: 2,
        time_split_percent: 33,
    }
}

/// A tree with `config` on its own simulated LSS (`seed`), `budget_pages` resident.
pub fn tree_on(config: TsbConfig, budget_pages: Option<usize>, seed: u64) -> (TsbTree, SimDir) {
    let sim = SimDir::new(seed);
    let tree = TsbTree::with_config(config)
        .unwrap()
        .with_lss(lss_on(&sim), budget_pages)
        .unwrap();
    (tree, sim)
}

/// Flips one payload byte of the LSS record at `address` in `sim` (the same call undoes it);
/// the damaged segment file's name and the record's offset in it.
pub fn flip_record(sim: &SimDir, address: LssAddress) -> (String, usize) {
    let name = segment_file_name(address.offset() / SEGMENT_BYTES);
    let at = (address.offset() % SEGMENT_BYTES) as usize;
    assert!(sim.damage(&name, |bytes| bytes[at + 60] ^= 0x40));
    (name, at)
}
