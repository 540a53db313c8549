//! The persistent mode's file (§3.1, §6): a closed tree reopens with every key, its heap and
//! invariants sound, its epoch moved on; bad or foreign files are errors naming the problem.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::Index;
use forest_pmwcas::{Clwb, Msync, Persist, Pool, PoolConfig, Region};

fn config() -> BzTreeConfig {
    BzTreeConfig {
        heap_bytes: 64 << 20,
        descriptor_count: 1024,
        inline_value_max: 32,
        ..BzTreeConfig::with_node_size(256)
    }
}

fn key(i: u32) -> [u8; 8] {
    u64::from(i).to_be_bytes()
}

fn value(i: u32) -> Vec<u8> {
    // Every seventh value goes behind a record pointer (longer than inline_value_max).
    let len = if i.is_multiple_of(7) { 100 } else { 8 };
    (0..len).map(|j| (i as u8).wrapping_add(j as u8)).collect()
}

fn fill_and_reopen<P: Persist>(path: &Path, n: u32, persist: impl Fn() -> P) {
    {
        let tree = BzTree::open(path, config(), persist()).unwrap();
        assert!(tree.open_report().created);
        for i in 0..n {
            assert!(tree.insert(&key(i), &value(i)).unwrap());
        }
        for i in (0..n).step_by(3) {
            assert!(tree.remove(&key(i)));
        }
        for i in (1..n).step_by(5) {
            tree.upsert(&key(i), &value(i + 1)).unwrap();
        }
    }
    let tree = BzTree::open(path, config(), persist()).unwrap();
    let report = tree.open_report().clone();
    assert!(!report.created);
    assert_eq!(report.index_epoch, 2, "the epoch moves on at every open");
    let audit = tree.audit().unwrap();
    let mut out = Vec::new();
    let mut present = 0;
    for i in 0..n {
        // Removed every third key, then upserted every fifth from 1 (which brings some back).
        let expected = if i % 5 == 1 {
            Some(value(i + 1))
        } else if i.is_multiple_of(3) {
            None
        } else {
            Some(value(i))
        };
        let found = tree.get(&key(i), &mut out).then(|| out.clone());
        assert_eq!(found, expected, "key {i} after reopen");
        present += u64::from(expected.is_some());
    }
    assert_eq!(audit.keys, present);
    assert!(audit.height > 2, "small nodes: the tree grew: {audit:?}");
    assert!(audit.value_blocks > 0);
    // Writes go on after a reopen, through splits and merges.
    for i in n..n + n / 3 {
        assert!(tree.insert(&key(i), &value(i)).unwrap());
    }
    for i in 0..n + n / 3 {
        tree.remove(&key(i));
    }
    drop(tree);
    let tree = BzTree::open(path, config(), persist()).unwrap();
    assert_eq!(tree.open_report().index_epoch, 3);
    let audit = tree.audit().unwrap();
    assert_eq!(audit.keys, 0);
    assert_eq!(audit.value_blocks, 0);
}

// Goal: a tree closed and reopened (clwb) has every key and value, its invariants hold and
// every chunk is reachable or free; writes and deletes continue after the reopen.
#[test]
fn reopen_keeps_every_key_clwb() {
    let dir = tempfile::tempdir().unwrap();
    fill_and_reopen(&dir.path().join("t.pool"), 3000, Clwb::detect);
}

// Goal: as above with every flush an msync. On /dev/shm when there is one: the test is of the
// code path, and an msync per flush on a busy disk takes minutes.
#[test]
fn reopen_keeps_every_key_msync() {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    fill_and_reopen(&dir.path().join("t.pool"), 1200, || Msync);
}

fn open_error(path: &Path, config: BzTreeConfig) -> String {
    match BzTree::open(path, config, Clwb::detect()) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e.to_string(),
    }
}

fn assert_names(error: &str, what: &str) {
    assert!(
        error.contains(what),
        "error {error:?} does not name {what:?}"
    );
}

// Goal: a file that is not a bztree-pm file, or a damaged one, is an error that names the
// problem, never a panic.
#[test]
fn bad_or_foreign_files_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, vec![0x5au8; 8192]).unwrap();
    assert_names(&open_error(&garbage, config()), "magic");

    let odd = dir.path().join("odd");
    std::fs::write(&odd, vec![0u8; 1000]).unwrap();
    assert_names(&open_error(&odd, config()), "pages");

    // A PMwCAS pool that is not a tree: its client area has another size.
    let pool = dir.path().join("pool");
    let pool_config = PoolConfig {
        partition_count: 4,
        descriptors_per_partition: 4,
        ..PoolConfig::default()
    };
    let region = Region::map_file(&pool, pool_config.region_bytes().unwrap()).unwrap();
    drop(Pool::create(region, Clwb::detect(), pool_config).unwrap());
    assert_names(&open_error(&pool, config()), "not a bztree-pm file");

    let tree = dir.path().join("tree");
    drop(BzTree::open(&tree, config(), Clwb::detect()).unwrap());
    let other = BzTreeConfig {
        max_size: 768,
        min_size: 256,
        ..BzTreeConfig::with_node_size(1024)
    };
    assert_names(&open_error(&tree, other), "nodes are 256 bytes");

    // Flip a byte of the tree header's node size: the checksum catches it.
    let mut bytes = std::fs::read(&tree).unwrap();
    let node_size_at = 64 + 6 * 8;
    bytes[node_size_at] ^= 1;
    let damaged = dir.path().join("damaged");
    std::fs::write(&damaged, &bytes).unwrap();
    assert_names(&open_error(&damaged, config()), "checksum");

    // A creation cut short before the magic was written.
    bytes[node_size_at] ^= 1;
    bytes[64 + 8..64 + 16].fill(0);
    std::fs::write(&damaged, &bytes).unwrap();
    assert_names(&open_error(&damaged, config()), "never completed");

    // Garbage in the allocator state: recovery reports it.
    let mut bytes = std::fs::read(&tree).unwrap();
    let bump_at = 64 + 16 * 8;
    bytes[bump_at..bump_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&damaged, &bytes).unwrap();
    assert_names(&open_error(&damaged, config()), "bump pointer");
}
