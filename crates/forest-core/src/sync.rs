//! Atomics, cells and hints from one place, so that loom can swap them in under `--cfg loom`
//! and shuttle under `--cfg shuttle` (STYLE.md §4; crossbeam-epoch's `primitive` module does
//! the same).
//!
//! Engines import `forest_core::sync::atomic::*`, `forest_core::sync::cell::UnsafeCell` and
//! `forest_core::sync::spin_loop` instead of `std`'s, and their loom tests build with
//! `RUSTFLAGS="--cfg loom"`, their shuttle tests with `RUSTFLAGS="--cfg shuttle"`. Shuttle
//! schedules threads at each atomic access but models every ordering as `SeqCst`, and has no
//! checked cell: under it `UnsafeCell` is the std wrapper.

#[cfg(all(loom, shuttle))]
compile_error!("--cfg loom and --cfg shuttle each replace the atomics: build with one of them");

#[cfg(not(any(loom, shuttle)))]
pub use std::sync::atomic;

#[cfg(loom)]
pub use loom::sync::atomic;

#[cfg(shuttle)]
pub use shuttle::sync::atomic;

/// `UnsafeCell` with loom's closure API under both builds, so call sites are the same.
///
/// Under `--cfg loom` it is `loom::cell::UnsafeCell`: each `with` / `with_mut` is an access
/// that loom checks against the cell's other accesses (a read must happen after the last
/// write, a write after every earlier access), so a latch that fails to order them fails the
/// model. Otherwise it is a transparent wrapper over `std::cell::UnsafeCell` whose `with` and
/// `with_mut` just hand the closure the raw pointer (inlined: no cost).
///
/// Loom tracks an access for the closure's duration only; a reference returned out of the
/// closure is unchecked after it. Call sites that hand out such references (lockbtree's
/// guards) call `with` at each use, so each use is still one checked access.
pub mod cell {
    #[cfg(loom)]
    pub use loom::cell::UnsafeCell;

    /// `std::cell::UnsafeCell` behind loom's `with` / `with_mut` API (see [`super::cell`]).
    #[cfg(not(loom))]
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        /// Wraps `data`.
        #[inline(always)]
        pub const fn new(data: T) -> Self {
            Self(std::cell::UnsafeCell::new(data))
        }

        /// Unwraps the value.
        #[inline(always)]
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    #[cfg(not(loom))]
    impl<T: ?Sized> UnsafeCell<T> {
        /// Runs `f` with a shared raw pointer to the value (loom: a checked read).
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a mutable raw pointer to the value (loom: a checked write).
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Busy-wait hint. Under loom and shuttle a spin must yield, or the model checker would
/// explore an unbounded loop (shuttle: a spinning thread would never let the one it waits for
/// run).
#[inline]
pub fn spin_loop() {
    #[cfg(not(any(loom, shuttle)))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(shuttle)]
    shuttle::hint::spin_loop();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::cell::UnsafeCell;

    #[test]
    fn std_cell_has_loom_closure_api() {
        // Goal: the std side offers loom's calls with their meaning. Method: write through
        // `with_mut`, read through `with`, unwrap with `into_inner`.
        let cell = UnsafeCell::new(1u64);
        // SAFETY: single thread, no other borrow of the cell.
        cell.with_mut(|p| unsafe { *p += 41 });
        // SAFETY: as above.
        assert_eq!(cell.with(|p| unsafe { *p }), 42);
        assert_eq!(cell.into_inner(), 42);
        assert_eq!(size_of::<UnsafeCell<u64>>(), size_of::<u64>());
    }
}
