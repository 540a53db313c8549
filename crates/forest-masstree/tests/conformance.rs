//! The shared conformance kit on the default Masstree.

use forest_masstree::Masstree;

forest_core::conformance_tests!(default_config, || Masstree::new());
