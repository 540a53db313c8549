//! The shared conformance kit on the default configuration and on small pages, so that key
//! splits, time splits (every update and remove adds a version), index splits and root growth
//! start within the first few keys.
//!
//! | module | page / index page | consolidate | time split at |
//! |---|---|---|---|
//! | `default_config` | 128 / 128 | 8 | 33 % historical |
//! | `small_pages_config` | 4 / 4 | 2 | 33 % |
//! | `tiny_pages_eager_time_splits` | 3 / 5 | 1 | 10 % |

use forest_tsbtree::{TsbConfig, TsbTree};

fn tree(page: usize, index: usize, consolidate: u32, percent: u32) -> TsbTree {
    TsbTree::with_config(TsbConfig {
        max_records_per_page: page,
        max_index_entries: index,
        consolidate_threshold: consolidate,
        time_split_percent: percent,
    })
    .expect("valid config")
}

forest_core::conformance_tests!(default_config, || TsbTree::new());
forest_core::conformance_tests!(
    small_pages_config,
    || super::tree(4, 4, 2, 33),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    tiny_pages_eager_time_splits,
    || super::tree(3, 5, 1, 10),
    sizes = forest_core::conformance::Sizes::for_variant()
);

forest_core::temporal_conformance_tests!(temporal_default, || TsbTree::new());
forest_core::temporal_conformance_tests!(
    temporal_small_pages,
    || super::tree(4, 4, 2, 33),
    sizes = forest_core::conformance::Sizes::for_variant()
);
