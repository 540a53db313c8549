//! A short, deterministic single-thread run of SMOs for `valgrind --tool=callgrind`: insert N
//! keys in scattered order on small pages (splits), then remove them all (merges), in memory
//! or on an LSS in a simulated directory (`lss`: each SMO step is then a system transaction,
//! `smo_log.rs`). Compare instruction counts before and after a change to the SMO path.
//!
//! ```text
//! cargo build --release -p forest-bwtree --example smo_churn
//! valgrind --tool=callgrind target/release/examples/smo_churn 50000 memory
//! ```
#![allow(clippy::unwrap_used)] // an example: a bad argument may panic

use std::sync::Arc;

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;
use forest_file::{Dir, SimDir};
use forest_llama::lss::{Lss, LssAddress, LssConfig};

/// SplitMix64: a bijection on u64, so distinct indices give distinct, scattered keys.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let keys: u64 = args.get(1).map_or(50_000, |a| a.parse().unwrap());
    let on_lss = args.get(2).is_some_and(|m| m == "lss");
    let config = BwTreeConfig {
        max_records_per_page: 16,
        consolidate_threshold: 4,
        read_consolidate_threshold: 4,
        merge_threshold: 4,
    };
    let mut tree = BwTree::with_config(config).unwrap();
    if on_lss {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new(1));
        let lss_config = LssConfig {
            segment_bytes: 64 << 20,
            buffer_bytes: 1 << 20,
            buffer_count: 2,
            writer_thread_count: 1,
        };
        let lss = Lss::open(dir, lss_config, LssAddress::current(0))
            .unwrap()
            .0;
        tree = tree.with_lss(Arc::new(lss), None).unwrap();
    }
    for i in 0..keys {
        tree.upsert(&mix(i).to_be_bytes(), b"value").unwrap();
    }
    for i in 0..keys {
        tree.remove(&mix(i).to_be_bytes());
    }
    let stats = tree.stats();
    println!(
        "{keys} keys, {}: splits {}, merges {}",
        if on_lss { "lss" } else { "memory" },
        stats.counter("splits").unwrap(),
        stats.counter("merges").unwrap()
    );
}
