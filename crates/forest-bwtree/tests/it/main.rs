//! forest-bwtree's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-bwtree --test it -- NAME::`.

mod clean;
mod clean_pause;
mod common;
mod conformance;
mod evict;
mod evict_pause;
mod flush;
mod flush_pause;
mod live_pieces;
mod map_checkpoint;
mod page_hold;
mod pause_points;
mod recover;
mod rev_bwleaf;
mod rev_bwleaf2;
mod rev_bwscan;
mod rev_clean;
mod rev_evict;
mod rev_recov;

mod rev_lss4;
mod rev_smo;
mod rev_smo2;
mod rev_systxn;
mod rev_ycsba;
mod review_rev1;
mod scan_side_links;
mod smo_checkpoint;
mod stress;
mod structure;
mod sys_txn;
mod sys_txn_pause;
