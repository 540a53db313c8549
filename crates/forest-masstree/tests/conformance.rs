//! The shared conformance kit on the default Masstree and on each non-default configuration
//! of the §6.2 factor analysis.

use forest_masstree::{Masstree, MasstreeConfig, NodeSearch};

forest_core::conformance_tests!(default_config, || Masstree::new());
forest_core::conformance_tests!(prefetch_off, || Masstree::with_config(MasstreeConfig {
    prefetch: false,
    ..MasstreeConfig::default()
}));
forest_core::conformance_tests!(search_binary, || Masstree::with_config(MasstreeConfig {
    search: NodeSearch::Binary,
    ..MasstreeConfig::default()
}));
