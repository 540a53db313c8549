//! The shared conformance kit, run on the default configuration and on small orders (both
//! in-node searches) so that splits, borrows and merges happen early and often.

use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch};

forest_core::conformance_tests!(default_config, || LockBTree::new());

forest_core::conformance_tests!(
    order4_linear,
    || LockBTree::with_config(LockBTreeConfig {
        order: 4,
        search: NodeSearch::Linear,
    })
    .expect("a valid order"),
    sizes = forest_core::conformance::Sizes::for_variant()
);

forest_core::conformance_tests!(
    order5_binary,
    || LockBTree::with_config(LockBTreeConfig {
        order: 5,
        search: NodeSearch::Binary,
    })
    .expect("a valid order"),
    sizes = forest_core::conformance::Sizes::for_variant()
);
