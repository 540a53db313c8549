//! forest-tsbtree's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-tsbtree --test it -- NAME::`.

mod conformance;
mod eosl;
mod export;
mod fig3;
mod history_links;
mod index_time_split;
mod pause_points;
mod put_version;
mod retention;
mod rev_retain;
mod rev_tsb;
