//! forest-bztree's integration tests in one binary: each module is one test file (a binary per
//! file instantiated the engines' generic code again for each, which cost CI minutes of build).
//! One file's tests: `cargo test -p forest-bztree --test it -- NAME::`.

mod common;
mod conformance;
mod conformance_pm;
mod file_lock;
mod kill;
mod left_repeat;
mod pause_points;
mod persistent;
mod power_loss;
mod reuse_race;
mod rev_bz;
mod rev_bz4;
mod rev_bzperf;
mod rev_pmrec2;
mod structure;
