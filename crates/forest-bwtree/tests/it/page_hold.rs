//! Page holds (`BwTree::hold_pages`; review rev-lstore F4): while a hold lives no page is
//! swapped out, so what its thread loaded stays resident until it writes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use forest_bwtree::{counter_names, BwTree, BwTreeConfig};
use forest_core::Index;

use crate::evict::{key, tree_on};

fn evictions(tree: &BwTree) -> u64 {
    tree.stats()
        .counter(counter_names::EVICTIONS)
        .expect("a tree on storage counts evictions")
}

// Goal: a hold keeps the evictor from swapping any page out until it is dropped, and the
// holding thread's own writes neither help evict nor wait for themselves. Method: 3 000
// keys on a 16 KiB budget, every key read back (so far above the budget); take a hold, run
// `evict_to_budget` on another thread and write on this one (above 125 % of the budget,
// where writes help); no eviction may happen until the hold is dropped, then it proceeds.
#[test]
fn a_hold_keeps_every_page_resident_until_dropped() {
    let (tree, _sim) = tree_on(BwTreeConfig::default(), Some(16 << 10), 5);
    // Only the explicit sweeps below evict (writes above 125 % still help).
    tree.set_background_evictor(true);
    for i in 0..3000 {
        tree.upsert(&key(i), &[b'v'; 100]).expect("upsert");
    }
    tree.evict_to_budget().expect("evict");
    let mut out = Vec::new();
    for i in 0..3000 {
        assert!(tree.try_get_into(&key(i), &mut out).expect("read back"));
    }
    let budget = tree.memory_budget_bytes().expect("a budget");
    assert!(
        tree.resident_bytes() > budget + budget / 4,
        "all loaded again"
    );

    let before = evictions(&tree);
    let hold = tree.hold_pages().expect("a tree on storage holds");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let evictor = s.spawn(|| {
            let evicted = tree.evict_to_budget().expect("evict");
            done.store(true, Ordering::SeqCst);
            evicted
        });
        // A write under the hold, above 125 % of the budget: it must not help (it would wait
        // for its own hold) and must not wait for the evictor.
        tree.upsert(&key(1), &[b'w'; 100])
            .expect("upsert under the hold");
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !done.load(Ordering::SeqCst),
            "eviction finished under a hold"
        );
        assert_eq!(
            evictions(&tree),
            before,
            "a page was swapped out under a hold"
        );
        // A second hold on this thread shares the first (no wait behind the evictor).
        drop(tree.hold_pages());
        drop(hold);
        let evicted = evictor.join().expect("evictor");
        assert!(evicted > 0, "eviction resumes once the hold is dropped");
    });
    assert!(evictions(&tree) > before);
    assert!(tree.try_get_into(&key(1), &mut out).expect("read"));
    assert_eq!(out, vec![b'w'; 100]);
}
