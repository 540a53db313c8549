//! The shared conformance kit (forest-core `testkit`), run on the default configuration and on
//! small-page configurations, so that leaf, index and root splits, merges and consolidations
//! happen within the first few dozen keys. Each configuration stresses another part:
//!
//! | module | page | consolidate (write / read) | merge | stresses |
//! |---|---|---|---|---|
//! | `default_config` | 128 | 4 / 1 | 32 | the shipped tuning |
//! | `small_pages_config` | 4 | 2 / 2 | 2 | deep trees: splits and merges on every level |
//! | `eager_consolidation` | 4 | 1 / 1 | 2 | a consolidation after nearly every write and read |
//! | `no_merges_reads_consolidate` | 4 | 2 / 0 | off | emptied pages kept; each read consolidates |
//! | `odd_pages_long_chains` | 7 | 8 / 1 | 3 | odd split points, chains longer than the pages |
//! | `medium_pages_long_chains` | 64 | 8 / 8 | 16 | long chains over larger base pages |
//!
//! (page: `max_records_per_page`; consolidate: `consolidate_threshold` /
//! `read_consolidate_threshold`; merge: `merge_threshold`.)

use forest_bwtree::{BwTree, BwTreeConfig};

/// A tree with `max_records_per_page`, `consolidate_threshold`, `merge_threshold` and
/// `read_consolidate_threshold`, in that order.
fn tree(
    max_records_per_page: usize,
    consolidate_threshold: u32,
    merge_threshold: usize,
    read_consolidate_threshold: u32,
) -> BwTree {
    BwTree::with_config(BwTreeConfig {
        max_records_per_page,
        consolidate_threshold,
        merge_threshold,
        read_consolidate_threshold,
    })
    .expect("valid config")
}

forest_core::conformance_tests!(default_config, || BwTree::new());
forest_core::conformance_tests!(
    small_pages_config,
    || super::tree(4, 2, 2, 2),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    eager_consolidation,
    || super::tree(4, 1, 2, 1),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    no_merges_reads_consolidate,
    || super::tree(4, 2, 0, 0),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    odd_pages_long_chains,
    || super::tree(7, 8, 3, 1),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    medium_pages_long_chains,
    || super::tree(64, 8, 16, 8),
    sizes = forest_core::conformance::Sizes::for_variant()
);
