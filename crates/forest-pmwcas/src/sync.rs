//! Atomics from forest-core's shim (loom swaps them in under `--cfg loom`, STYLE.md §4), plus
//! the loom-aware mutex that the loom stand-in for epochs needs (`reclaim.rs`).

pub(crate) use forest_core::sync::{atomic, spin_loop};

/// Gives way to other threads in a bounded wait (loom: a yield the model checker sees).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
