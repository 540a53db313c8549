//! Atomics and hints from one place, so that loom can swap them in under `--cfg loom`
//! (STYLE.md §4; crossbeam-epoch's `primitive` module does the same).
//!
//! Engines import `forest_core::sync::atomic::*` and `forest_core::sync::spin_loop` instead of
//! `std`'s, and their loom tests build with `RUSTFLAGS="--cfg loom"`.

#[cfg(not(loom))]
pub use std::sync::atomic;

#[cfg(loom)]
pub use loom::sync::atomic;

/// Busy-wait hint. Under loom a spin must yield, or the model checker would explore an
/// unbounded loop.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}
