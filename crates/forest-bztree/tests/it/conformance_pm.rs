//! The shared conformance kit (forest-core `testkit`) on the persistent tree (`bztree-pm`, a
//! mapped file flushed with clwb) with 256 B nodes, inline values and every value behind a
//! record pointer.

use forest_bztree::{BzTree, BzTreeConfig};
use forest_pmwcas::Clwb;

fn persistent(inline_value_max: usize) -> BzTree<Clwb> {
    // The file is unlinked when the directory drops; the mapping keeps it until the tree drops.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = BzTreeConfig {
        heap_bytes: 1 << 30,
        descriptor_count: 4096,
        inline_value_max,
        ..BzTreeConfig::with_node_size(256)
    };
    BzTree::open(&dir.path().join("tree.pool"), config, Clwb::detect()).expect("open")
}

forest_core::conformance_tests!(
    pm_small_nodes_256,
    || super::persistent(64),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    pm_record_pointer_values,
    || super::persistent(0),
    sizes = forest_core::conformance::Sizes::for_variant()
);
