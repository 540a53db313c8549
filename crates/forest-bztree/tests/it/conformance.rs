//! The shared conformance kit (forest-core `testkit`) on the default 1 KB nodes and on 256 B
//! nodes, where splits, merges, internal-node overflow and root changes happen within the first
//! few dozen keys, on 256 B nodes with every value behind a record pointer, and on 1 KB nodes
//! whose rebuilt leaves get only 64 bytes of free space (`free_space`, §7.7 Fig. 8b), so leaves
//! of many sizes below the node size are consolidated, split and merged.

use forest_bztree::{BzTree, BzTreeConfig};

fn small_nodes() -> BzTree {
    BzTree::with_config(BzTreeConfig::with_node_size(256)).expect("valid config")
}

fn record_pointers() -> BzTree {
    BzTree::with_config(BzTreeConfig {
        inline_value_max: 0,
        ..BzTreeConfig::with_node_size(256)
    })
    .expect("valid config")
}

fn small_free_space() -> BzTree {
    BzTree::with_config(BzTreeConfig {
        free_space: 64,
        ..BzTreeConfig::with_node_size(1024)
    })
    .expect("valid config")
}

forest_core::conformance_tests!(default_nodes, || BzTree::new());
forest_core::conformance_tests!(
    free_space_64,
    || super::small_free_space(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    small_nodes_256,
    || super::small_nodes(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    record_pointer_values,
    || super::record_pointers(),
    sizes = forest_core::conformance::Sizes::for_variant()
);
