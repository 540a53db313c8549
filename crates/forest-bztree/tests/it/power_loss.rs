//! Power loss with the `sim` persister (issue 16, §6.2–6.3): a writer runs against a tree whose
//! flushes copy cache lines to a durable image; at a random moment the test takes a crash
//! image (every flushed line, and each word stored since its line's last flush old or new at
//! random), recovers a tree from it, and checks that its invariants hold, every chunk is
//! reachable or free, and its contents are those after some prefix of the operations that
//! includes every acknowledged one.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{apply, key, value, Op};
use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::{NoPersist, Region, Sim};
use rand::{Rng, SeedableRng};

const KEYS: u64 = 600;
const ROUNDS: u64 = 20;

fn config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 8 << 20,
        descriptor_count: 256,
        inline_value_max: 32,
        ..BzTreeConfig::with_node_size(256)
    }
}

fn op(round: u64, i: u64) -> Op {
    common::op(round, i, KEYS)
}

fn contents(tree: &BzTree<NoPersist>) -> BTreeMap<u64, Vec<u8>> {
    let mut out = Vec::new();
    let mut found = BTreeMap::new();
    for k in 0..KEYS {
        if tree.get(&key(k), &mut out) {
            found.insert(k, out.clone());
        }
    }
    found
}

fn expected(model: &BTreeMap<u64, u64>) -> BTreeMap<u64, Vec<u8>> {
    model.iter().map(|(&k, &v)| (k, value(v))).collect()
}

// Goal: after a simulated power loss at a random moment, recovery yields a sound tree whose
// contents are a prefix of the operations, at least every acknowledged one.
// Method: 20 rounds, each a fresh tree, a writer thread, a crash image taken while it runs,
// recovery from the image, audit, and a search for the prefix among the possible lengths.
#[test]
fn power_loss_leaves_a_prefix_of_acknowledged_operations() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x9017_0016);
    let mut lengths = Vec::new();
    for round in 0..ROUNDS {
        let region = Region::heap(BzTree::<Sim>::region_bytes(&config()).unwrap());
        let sim = Sim::new(&region);
        let tree = Arc::new(BzTree::create_in(region, config(), sim).unwrap());
        let acked = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (tree, acked, stop) = (Arc::clone(&tree), Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match op(round, i) {
                        Op::Upsert(k, v) => tree.upsert(&key(k), &value(v)).unwrap(),
                        Op::Remove(k) => {
                            tree.remove(&key(k));
                        }
                    }
                    acked.store(i + 1, Ordering::SeqCst);
                }
            })
        };
        std::thread::sleep(Duration::from_micros(rng.random_range(1_000..40_000)));
        let low = acked.load(Ordering::SeqCst);
        let image = tree.crash_image(rng.random());
        let high = acked.load(Ordering::SeqCst) + 1;
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        drop(tree);
        let recovered = BzTree::open_in(
            Region::from_image(&image),
            config(),
            NoPersist,
            Path::new("<image>"),
        )
        .unwrap_or_else(|e| panic!("round {round}: recovery: {e}"));
        let audit = recovered
            .audit()
            .unwrap_or_else(|e| panic!("round {round}: audit after recovery: {e}"));
        let found = contents(&recovered);
        assert_eq!(audit.keys, found.len() as u64, "round {round}");
        let mut model = BTreeMap::new();
        for i in 0..low {
            apply(&mut model, op(round, i));
        }
        let mut length = None;
        for n in low..=high {
            if expected(&model) == found {
                length = Some(n);
                break;
            }
            apply(&mut model, op(round, n));
        }
        let Some(n) = length else {
            panic!(
                "round {round}: the recovered tree ({} keys) is no prefix of {low}..={high} operations",
                found.len()
            );
        };
        lengths.push((low, n, high));
    }
    eprintln!("power loss: (acknowledged, recovered prefix, bound) per round: {lengths:?}");
    assert!(
        lengths.iter().any(|&(low, _, _)| low > 100),
        "the writer made progress"
    );
}
