//! Peers: well-known concurrent maps measured in the same process and run as forest's engines
//! (DESIGN.md "Benchmarks"), each behind the same [`forest_core::Index`] trait.
//!
//! | name              | map                                  | why it is here                       |
//! |-------------------|--------------------------------------|--------------------------------------|
//! | `skiplist`        | crossbeam-skiplist `SkipMap`         | Bw-tree §VI's latch-free skip list   |
//! | `scc-tree`        | `scc::TreeIndex`                     | a maintained concurrent B+tree       |
//! | `btreemap-rwlock` | `std::sync::RwLock<BTreeMap>`        | the thesis' "hard locking" (§4.3)    |
//! | `masstree-rs`     | crates.io `masstree` 0.9             | an independent Rust Masstree         |
//! | `hashmap`         | `scc::HashMap`                       | Masstree §6.4's no-range reference   |
//!
//! Fairness rules, shared by every adapter:
//! - Keys: on the `u64` key shape a peer stores `u64` keys decoded from the 8 big-endian
//!   bytes (no allocation, integer compares); on other shapes boxed byte slices
//!   ([`key::PeerKey`]). `masstree-rs` takes byte slices natively and always gets them.
//! - Values are boxed byte slices; a get copies the value into `out`, as engines do.
//! - Writes check sizes with [`forest_core::check_entry`] first, as engines do.
//!
//! Where a map lacks one of the trait's conditional writes, the adapter makes it linearizable
//! with [`stripes::Stripes`], a fixed table of mutexes chosen by key hash: the writes that need
//! it serialize per key, reads never take it. `scc-tree` has atomic insert-if-absent and
//! upsert, so only update-if-present and remove take a stripe (a remove cannot slip between
//! update's presence check and its write). `masstree-rs` has only an unconditional insert, so
//! all of its writes take a stripe. `skiplist` keeps values in epoch-managed atomic slots and
//! needs none (see [`skiplist`]); nor do `btreemap-rwlock` and `hashmap`.
//!
//! Where a map's own iteration breaks the contract, the adapter works around it and says so
//! in its module doc (descending scans of `scc-tree` and `masstree-rs`: both collect the
//! ascending range from its lower bound and hand it out backwards, which for a scan from a
//! key down reads every key below it). Such a workaround passes the conformance kit but is
//! not the map's reverse scan, so it is never measured: [`reverse_scan_gap`] names the peers
//! the runner skips under `--scan-order desc`, and the report says why. `skiplist`
//! (`Range::rev`) and `btreemap-rwlock` (`range(..).rev()` in batches under the read lock)
//! scan down natively, without an allocation per record.

pub mod btreemap_rwlock;
pub mod hashmap;
pub mod key;
pub mod masstree_rs;
pub mod scc_tree;
pub mod skiplist;
pub mod stripes;

use std::sync::Arc;

use forest_core::Index;

use crate::keygen::KeyShape;

pub use btreemap_rwlock::BTreeMapRwLock;
pub use hashmap::HashMapPeer;
pub use key::PeerKey;
pub use masstree_rs::MasstreeRs;
pub use scc_tree::SccTree;
pub use skiplist::SkipList;

/// Every peer's name, in the order of reports.
pub const PEER_NAMES: [&str; 5] = [
    "skiplist",
    "scc-tree",
    "btreemap-rwlock",
    "masstree-rs",
    "hashmap",
];

/// One line per peer for `--help`.
pub fn describe(name: &str) -> &'static str {
    match name {
        "skiplist" => "crossbeam-skiplist SkipMap (Bw-tree paper's latch-free skip list)",
        "scc-tree" => "scc::TreeIndex, a concurrent B+tree",
        "btreemap-rwlock" => "std RwLock<BTreeMap> (the thesis' hard locking)",
        "masstree-rs" => "crates.io masstree 0.9, an independent Rust Masstree (keys <= 256 B)",
        "hashmap" => "scc::HashMap, no-range reference; skipped on scan workloads",
        _ => "",
    }
}

/// Whether the peer is a hash map whose scans collect and sort everything (the runner skips
/// it on workloads with scans).
pub fn is_unordered(name: &str) -> bool {
    name == "hashmap"
}

/// Why the peer has no reverse range scan that can be measured (None: it has one): the
/// runner skips such a peer on descending scans and prints this.
pub fn reverse_scan_gap(name: &str) -> Option<&'static str> {
    match name {
        "scc-tree" => Some(
            "scc 3.8's Range::rev loses records (the adapter collects the ascending range instead)",
        ),
        "masstree-rs" => Some(
            "masstree 0.9's reverse scan loses and repeats records (the adapter collects the \
             ascending range instead)",
        ),
        _ => None,
    }
}

/// A peer by name for keys of `shape`: `u64` keys on [`KeyShape::U64`], byte slices otherwise.
pub fn build(name: &str, shape: KeyShape) -> Option<Arc<dyn Index>> {
    if shape == KeyShape::U64 {
        build_with_key::<u64>(name)
    } else {
        build_with_key::<Box<[u8]>>(name)
    }
}

/// A peer by name with key representation `K`.
pub fn build_with_key<K: PeerKey>(name: &str) -> Option<Arc<dyn Index>>
where
    K::Probe: scc::Equivalent<K>,
{
    Some(match name {
        "skiplist" => Arc::new(SkipList::<K>::new()),
        "scc-tree" => Arc::new(SccTree::<K>::new()),
        "btreemap-rwlock" => Arc::new(BTreeMapRwLock::<K>::new()),
        "masstree-rs" => Arc::new(MasstreeRs::new()),
        "hashmap" => Arc::new(HashMapPeer::<K>::new()),
        _ => return None,
    })
}

/// The error of a write whose key has no form in the peer's key representation.
fn wrong_key_shape<K: PeerKey>(key: &[u8]) -> forest_core::Error {
    forest_core::Error::Config(format!(
        "this peer stores {} keys; a {}-byte key has no such form",
        K::REPR,
        key.len()
    ))
}

/// Copies `value` into `out`, the engines' get contract.
#[inline]
fn copy_out(value: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(value);
}
