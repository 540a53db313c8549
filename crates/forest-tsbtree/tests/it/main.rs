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

/// Lets the epoch drain until the PIDs `tree`'s retention freed are on its free list (the
/// next allocations reuse them). A freed PID is pushed only after every thread pinned at its
/// free has unpinned, in the whole process: other tests' threads run beside this one under
/// `cargo test`, and a few flushes while one of them is pinned (preempted on a loaded machine,
/// or paused) leave the PIDs pending. Waits for the count, not for a number of flushes.
fn drain_epochs_until_recycled(tree: &forest_tsbtree::TsbTree) {
    use forest_core::Index;
    let freed = tree
        .stats()
        .counter(forest_tsbtree::counter_names::RETIRED_PAGES)
        .expect("tsbtree counter") as usize;
    let start = std::time::Instant::now();
    while tree.recyclable_pids() < freed {
        crossbeam_epoch::pin().flush();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(300),
            "the epoch did not drain in 300 s: {} of {freed} freed PIDs recyclable",
            tree.recyclable_pids()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
