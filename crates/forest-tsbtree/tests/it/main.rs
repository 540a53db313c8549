//! forest-tsbtree's integration tests in one binary: each module is one test file (a binary per
//! file linked the engine and the conformance kit again for each, which cost CI minutes of
//! build). One file's tests: `cargo test -p forest-tsbtree --test it -- NAME::`.

mod conformance;
mod eosl;
mod export;
mod fig3;
mod history_links;
mod index_time_split;
mod on_lss;
mod pause_points;
mod put_version;
mod recover;
mod retention;
mod rev_retain;
mod rev_tsb;
mod rev_tsb6;
mod storage;
mod storage_pause;

/// What a tree's free list held and its retention had retired, taken before frees that
/// [`drain_epochs_until_recycled`] then waits for.
pub struct RecycleMark {
    recyclable: usize,
    retired: usize,
}

/// Marks `tree` before the frees to wait for; nothing may allocate from here to the drain
/// (a reused PID leaves the free list and would never be counted, rev-tsb5 F2).
pub fn recycle_mark(tree: &forest_tsbtree::TsbTree) -> RecycleMark {
    RecycleMark {
        recyclable: tree.recyclable_pids(),
        retired: retired_pages(tree),
    }
}

fn retired_pages(tree: &forest_tsbtree::TsbTree) -> usize {
    use forest_core::Index;
    tree.stats()
        .counter(forest_tsbtree::counter_names::RETIRED_PAGES)
        .expect("tsbtree counter") as usize
}

/// Lets the epoch drain until the PIDs `tree`'s retention freed since `mark` are on its free
/// list (the next allocations reuse them). A freed PID is pushed only after every thread
/// pinned at its free has unpinned, in the whole process: other tests' threads run beside
/// this one under `cargo test`, and a few flushes while one of them is pinned (preempted on a
/// loaded machine, or paused) leave the PIDs pending. Waits for the count, not for a number
/// of flushes; the count is the free list's at the mark plus the PIDs retired since, so it
/// holds only if nothing allocated since the mark (PIDs freed and reused before the mark,
/// e.g. by a redo's splits below its threshold, are not waited for: they were reused).
fn drain_epochs_until_recycled(tree: &forest_tsbtree::TsbTree, mark: RecycleMark) {
    let want = mark.recyclable + (retired_pages(tree) - mark.retired);
    let start = std::time::Instant::now();
    while tree.recyclable_pids() < want {
        crossbeam_epoch::pin().flush();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(300),
            "the epoch did not drain in 300 s: {} PIDs recyclable, {want} awaited",
            tree.recyclable_pids()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
