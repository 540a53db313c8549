//! forest-pmwcas's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-pmwcas --test it -- NAME::`.

mod api;
mod crash_sim;
mod high_water_mark;
mod race_late_install;
mod reuse_domain;
mod stress;
