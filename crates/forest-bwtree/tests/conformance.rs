//! The shared conformance kit (forest-core `testkit`), run on the default configuration and on
//! 4-record pages with a short consolidation threshold, so that leaf, index and root splits and
//! consolidations happen within the first few dozen keys.

use forest_bwtree::{BwTree, BwTreeConfig};

fn small_pages() -> BwTree {
    BwTree::with_config(BwTreeConfig {
        max_records_per_page: 4,
        consolidate_threshold: 2,
        merge_threshold: 2,
        read_consolidate_threshold: 2,
    })
    .expect("valid config")
}

forest_core::conformance_tests!(default_config, || BwTree::new());
forest_core::conformance_tests!(small_pages_config, || super::small_pages());
