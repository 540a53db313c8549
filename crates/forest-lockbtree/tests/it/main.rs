//! forest-lockbtree's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-lockbtree --test it -- NAME::`.

mod conformance;
mod scan_hinted;
mod scan_revisit;
mod structure;
