//! forest-masstree's integration tests in one binary: each module is one test file (a binary per
//! file instantiated the engines' generic code again for each, which cost CI minutes of build).
//! One file's tests: `cargo test -p forest-masstree --test it -- NAME::`.

mod cleared_links;
mod columns;
mod conformance;
mod hard_cases;
mod memcheck_poison;
mod pause_points;
mod put_layers;
mod removal;
mod rev_mscan2;
mod rev_mscan3;
mod rev_ycsba;
mod review13_refs;
mod scan_batches;
mod scan_copy;
mod scan_far_bound;
mod scan_layers;
