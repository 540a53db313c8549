//! Review rev-tsb (session 16) of §IV-B1's EOSL-TS (`TsbTree::split_time`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use forest_core::{InFlight, Index, TemporalIndex};
use forest_tsbtree::{TsbConfig, TsbTree};

#[derive(Default)]
struct Slots(Mutex<Vec<u64>>);

impl InFlight for Slots {
    fn oldest_unapplied(&self) -> Option<u64> {
        self.0.lock().expect("slots").iter().copied().min()
    }
}

fn counter(tree: &TsbTree, name: &str) -> u64 {
    tree.stats()
        .counters
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |c| c.1)
}

fn tree() -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: 6,
        max_index_entries: 6,
        consolidate_threshold: 2,
        time_split_percent: 33,
    })
    .expect("valid config")
}

// F1: while one timestamp is held in flight (a store's unit between its tick and its apply:
// a descheduled thread), a leaf that already split at it cannot time-split again
// (`split_time() == start`), and `after_write` then returns without consolidating either:
// the page's delta chain grows by one per write, for every writer of every other shard,
// until the held unit applies. Each write and read then walks the whole chain.
#[test]
fn a_held_timestamp_keeps_the_page_consolidated() {
    let tree = tree();
    let slots = Arc::new(Slots::default());
    tree.set_in_flight(slots.clone());
    tree.upsert_ts(b"b", b"old").expect("write");
    let held = tree.tick();
    slots.0.lock().expect("slots").push(held);
    for i in 0..40u32 {
        let ts = tree.tick();
        tree.put_version(b"a", ts, Some(&i.to_le_bytes()))
            .expect("write");
    }
    let consolidations = counter(&tree, "consolidations");
    let started = Instant::now();
    for i in 0..4000u32 {
        let ts = tree.tick();
        tree.put_version(b"a", ts, Some(&i.to_le_bytes()))
            .expect("write");
    }
    let took = started.elapsed();
    let after = counter(&tree, "consolidations");
    let shape = tree.check_structure().expect("structure");
    assert!(
        after > consolidations,
        "4000 writes to one page while a timestamp was held: no consolidation ({consolidations} \
         before, {after} after), current leaf holds {} versions, {took:?}",
        shape.max_current_leaf_versions
    );
}
