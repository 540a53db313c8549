//! forest-store's integration tests in one binary: each module is one test file (a binary per
//! file instantiated the engines' generic code again for each, which cost CI minutes of build).
//! One file's tests: `cargo test -p forest-store --test it -- NAME::`.

mod batch;
mod bztree_pm;
mod correctness;
mod crash_kill;
mod crash_sim;
mod decode_proptest;
mod llama_faults;
mod llama_store;
mod map_recovery;
mod map_verify;
mod power_loss;
mod rev_bz4;
mod rev_lists;
mod rev_lists14;
mod rev_lss3;
mod rev_lstore;
mod rev_mapdef;
mod rev_range;
mod rev_tckpt;
mod rev_tsb;
mod review13_meta;
mod review_bzstore;
mod review_regressions;
mod review_scan_gate;
mod scan_batches;
mod small_units;
mod store;
mod temporal;
mod temporal_checkpoint;
mod verify;

/// The pause hook is one per process: tests that install one run one at a time (a test whose
/// hook another replaced waits forever for a pause that never comes).
#[cfg(feature = "pause-points")]
fn pause_hook_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
