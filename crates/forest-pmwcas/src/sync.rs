//! Atomics from forest-core's shim (loom swaps them in under `--cfg loom`, shuttle under
//! `--cfg shuttle`, STYLE.md §4), plus the yield and mutex that the model checkers must see:
//! the epoch stand-in (`reclaim.rs`) and the simulated persister (`sim.rs`) lock around
//! atomic accesses, and a std mutex held across a scheduling point would hang the one OS
//! thread that a model runs its threads on.

pub(crate) use forest_core::sync::{atomic, spin_loop};

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(shuttle)]
pub(crate) use shuttle::sync::Mutex;
#[cfg(not(any(loom, shuttle)))]
pub(crate) use std::sync::Mutex;

/// Gives way to other threads in a bounded wait (loom, shuttle: a yield the model checker
/// sees).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(any(loom, shuttle)))]
    std::thread::yield_now();
}
