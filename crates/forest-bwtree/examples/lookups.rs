//! A short, deterministic single-thread run for `valgrind --tool=cachegrind`: load N 8-byte
//! keys in scattered order, then M operations, so instructions and last-level misses per
//! operation can be compared before and after a change (the `forest bench` numbers drift with
//! the machine's load; cachegrind's counts do not).
//!
//! ```text
//! cargo build --release -p forest-bwtree --example lookups
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/lookups 200000 1000000 get
//! ```
//! Arguments: key count (default 200 000), operation count (default 1 000 000), and the mix:
//! `get` (read-only, as `bwtree-readonly`) or `synthetic` (5 reads : 1 write, the writes half
//! updates and half inserts of new keys, as `bwtree-synthetic`), then optionally the page
//! size, the consolidation threshold and the readers' one (defaults: the engine's). Subtract
//! a run with 0 operations to get the cost of the operations alone.
#![allow(clippy::unwrap_used)] // an example: a bad argument may panic

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::Index;

/// SplitMix64: a bijection on u64, so distinct indices give distinct, scattered keys.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let keys: u64 = args.get(1).map_or(200_000, |a| a.parse().unwrap());
    let ops: u64 = args.get(2).map_or(1_000_000, |a| a.parse().unwrap());
    let synthetic = match args.get(3).map(String::as_str) {
        None | Some("get") => false,
        Some("synthetic") => true,
        Some(other) => panic!("mix {other:?}: use get or synthetic"),
    };
    let mut config = BwTreeConfig::default();
    if let Some(page) = args.get(4) {
        config.max_records_per_page = page.parse().unwrap();
        config.merge_threshold = config.max_records_per_page / 4;
    }
    if let Some(threshold) = args.get(5) {
        config.consolidate_threshold = threshold.parse().unwrap();
    }
    if let Some(threshold) = args.get(6) {
        config.read_consolidate_threshold = threshold.parse().unwrap();
    }
    let tree = BwTree::with_config(config).unwrap();
    for i in 0..keys {
        let k = mix(i).to_be_bytes();
        tree.insert(&k, &k).unwrap();
    }
    let mut out = Vec::with_capacity(8);
    let (mut found, mut next_new) = (0u64, keys);
    for op in 0..ops {
        let r = mix(op ^ 0x5555_5555);
        let k = mix(r % keys).to_be_bytes();
        if synthetic && op % 6 == 5 {
            if op % 12 == 5 {
                tree.upsert(&k, &r.to_be_bytes()).unwrap();
            } else {
                let new = mix(next_new).to_be_bytes();
                next_new += 1;
                tree.insert(&new, &new).unwrap();
            }
        } else {
            found += u64::from(tree.get(&k, &mut out));
        }
    }
    let stats = tree.stats();
    println!(
        "keys {keys} ops {ops} found {found} height {} pages {} memory {} B",
        stats.height,
        stats.leaf_node_count + stats.inner_node_count,
        stats.memory_bytes
    );
}
