//! forest-pmwcas's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-pmwcas --test it -- NAME::`.

mod api;
mod crash_sim;
mod epoch_domain;
mod high_water_mark;
mod race_late_install;
mod recovery_left;
mod reuse_domain;
mod rev_bz2;
mod rev_pmrec2;
mod stale_helper;
mod stress;

/// The pause hook (`forest_core::pause`) is process-global: every test that sets one holds
/// this one lock throughout, so parallel test threads never run into each other's stops
/// (review rev-pmrec2 F5: a lock per file did not exclude the other files).
#[cfg(all(feature = "pause-points", not(any(loom, shuttle))))]
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
