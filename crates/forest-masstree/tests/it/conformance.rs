//! The shared conformance kit on the default Masstree and on each non-default configuration
//! of the §6.2 factor analysis.

use forest_masstree::{
    Masstree, Masstree10x8, Masstree15x32, MasstreeConfig, NodeSearch, SuffixStorage,
};

forest_core::conformance_tests!(default_config, || Masstree::new());
forest_core::conformance_tests!(
    prefetch_off,
    || Masstree::with_config(MasstreeConfig {
        prefetch: false,
        ..MasstreeConfig::default()
    }),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    search_binary,
    || Masstree::with_config(MasstreeConfig {
        search: NodeSearch::Binary,
        ..MasstreeConfig::default()
    }),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    permuter_off,
    || Masstree::with_config(MasstreeConfig {
        permuter: false,
        ..MasstreeConfig::default()
    }),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    suffix_separate,
    || Masstree::with_config(MasstreeConfig {
        suffix: SuffixStorage::Separate,
        ..MasstreeConfig::default()
    }),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    suffix_layers,
    || Masstree::with_config(MasstreeConfig {
        suffix: SuffixStorage::Layers,
        ..MasstreeConfig::default()
    }),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    fanout_10x8,
    || Masstree10x8::with_widths(MasstreeConfig::default()),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    fanout_15x32,
    || Masstree15x32::with_widths(MasstreeConfig::default()),
    sizes = forest_core::conformance::Sizes::for_variant()
);
forest_core::conformance_tests!(
    fanout_10x8_sorted_layers,
    || {
        Masstree10x8::with_widths(MasstreeConfig {
            permuter: false,
            suffix: SuffixStorage::Layers,
            ..MasstreeConfig::default()
        })
    },
    sizes = forest_core::conformance::Sizes::for_variant()
);
