//! Review rev-bzperf (session 14) of branch h-bzperf: `free_space`.
#![allow(clippy::unwrap_used)]

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;

fn key(i: u32) -> [u8; 8] {
    u64::from(i).to_be_bytes()
}

// Goal: a `free_space` that `check()` accepts and that is at least the node size behaves as a
// whole node ("full", as the registry's `free_resolved` reports it), not as no free space.
// Method: the same inserts into a tree with free_space = node_size and one with the largest
// multiple of 8 (accepted by `check()`, and by the registry as `free=18446744073709551608`).
// `build_leaf`'s `content + extra + free_space` overflows: a debug build panics ("attempt to
// add with overflow"), a release build wraps and builds leaves with no free space at all.
#[test]
fn huge_free_space_is_full_leaves() {
    let run = |free_space: usize| {
        let config = BzTreeConfig {
            free_space,
            ..BzTreeConfig::default()
        };
        config.check().unwrap();
        let tree = BzTree::with_config(config).unwrap();
        for i in 0..5_000u32 {
            assert!(tree
                .insert(&key(i.wrapping_mul(2_654_435_761)), &key(i))
                .unwrap());
        }
        tree.memory_in_use()
    };
    let full = run(1024);
    let huge = run(usize::MAX - 7);
    assert_eq!(
        huge,
        full,
        "free_space {} is not full leaves",
        usize::MAX - 7
    );
}

// Goal (a check that holds): a persistent tree written with little free space reopens with a
// different `free_space` (it is not recorded in the file; each node records its own size) and
// keeps every key, across further writes that rebuild its small leaves into full ones.
// Method: fill with free_space 64, reopen with the default, upsert and insert, reopen, read.
#[test]
fn persistent_reopen_with_other_free_space() {
    use forest_pmwcas::Clwb;
    let config = |free_space: usize| BzTreeConfig {
        heap_bytes: 64 << 20,
        descriptor_count: 1024,
        free_space,
        ..BzTreeConfig::with_node_size(256)
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pool");
    let n = 3_000u32;
    {
        let tree = BzTree::open(&path, config(64), Clwb::detect()).unwrap();
        for i in 0..n {
            assert!(tree.insert(&key(i), &key(i)).unwrap());
        }
    }
    {
        let tree = BzTree::open(&path, config(256), Clwb::detect()).unwrap();
        tree.audit().unwrap();
        for i in 0..n {
            tree.upsert(&key(i), &key(i + 1)).unwrap();
        }
        for i in n..2 * n {
            assert!(tree.insert(&key(i), &key(i + 1)).unwrap());
        }
    }
    let tree = BzTree::open(&path, config(64), Clwb::detect()).unwrap();
    tree.audit().unwrap();
    let mut out = Vec::new();
    for i in 0..2 * n {
        assert!(tree.get(&key(i), &mut out), "key {i} lost");
        assert_eq!(out, key(i + 1));
    }
}
