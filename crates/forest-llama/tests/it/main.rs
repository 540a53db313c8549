//! forest-llama's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-llama --test it -- NAME::`.

mod checkpoint;
mod flush;
mod lss;
mod lss_record;
mod recover;
mod rev_lss3;
mod sys_txn;
