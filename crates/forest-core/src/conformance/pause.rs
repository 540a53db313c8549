//! Test helpers for pause points ([`crate::pause`]; features `testkit` and `pause-points`):
//! stop a named thread at a named pause point, once, and let the test decide when it goes on.
//!
//! Use: take the [`TURN`] (the hook is process-wide, so tests that set it take turns), arm
//! one [`Gate`] per stop with [`arm`] or [`arm_gates`], start the work on the named thread
//! ([`spawn_pauser`] for [`PAUSER`]), [`Gate::wait_paused`], act on the half-done change,
//! [`Gate::release`], join, and [`disarm`].
//! ```
//! use forest_core::conformance::pause::{arm, disarm, spawn_pauser, take_turn};
//! let _turn = take_turn();
//! let gate = arm("doc:step");
//! let pauser = spawn_pauser(|| forest_core::pause::pause_point("doc:step"));
//! gate.wait_paused(); // the pauser is stopped at "doc:step"
//! assert!(gate.has_paused());
//! gate.release();
//! pauser.join().expect("the pauser finishes");
//! disarm();
//! ```
//!
//! Invariants: a gate stops its thread at most once, at the first time that thread reaches
//! its point; later arrivals are only counted ([`Gate::reached_count`]). Threads other than a
//! gate's are never stopped by it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use crate::pause::set_pause_hook;

/// The thread name [`arm`] stops and [`spawn_pauser`] gives.
pub const PAUSER: &str = "pauser";

/// Held by each test while it sets the process-wide pause hook: tests in one process (as
/// `cargo test` runs them) take turns.
pub static TURN: Mutex<()> = Mutex::new(());

/// Takes the [`TURN`]; a test that failed while holding it does not fail the next.
pub fn take_turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One stop of one named thread at one pause point, the first time it gets there.
pub struct Gate {
    point: &'static str,
    thread: &'static str,
    /// True until the thread stops here.
    armed: AtomicBool,
    /// Arrivals of the thread at the point, the stopping one included.
    reached: AtomicUsize,
    /// Passed by the stopped thread and the test once it is stopped.
    paused: Barrier,
    /// Passed by the stopped thread and the test to let it go on.
    release: Barrier,
}

impl Gate {
    /// A gate for `thread` at `point`, not yet in a hook (see [`arm_gates`]).
    pub fn new(point: &'static str, thread: &'static str) -> Self {
        Self {
            point,
            thread,
            armed: AtomicBool::new(true),
            reached: AtomicUsize::new(0),
            paused: Barrier::new(2),
            release: Barrier::new(2),
        }
    }

    /// Returns once the thread is stopped here.
    pub fn wait_paused(&self) {
        self.paused.wait();
    }

    /// Lets the stopped thread go on.
    pub fn release(&self) {
        self.release.wait();
    }

    /// Whether the thread has reached the point and stopped (or is stopping) there.
    pub fn has_paused(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }

    /// How many times the thread has reached the point.
    pub fn reached_count(&self) -> usize {
        self.reached.load(Ordering::SeqCst)
    }

    /// The hook's part: counts the arrival and stops the first one, if it is this gate's.
    fn pass(&self, name: &'static str) {
        if name != self.point || thread::current().name() != Some(self.thread) {
            return;
        }
        self.reached.fetch_add(1, Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.paused.wait();
            self.release.wait();
        }
    }
}

/// Arms a hook that stops the thread named [`PAUSER`] at its first pause point `point`.
pub fn arm(point: &'static str) -> Arc<Gate> {
    let [gate] = arm_gates([(point, PAUSER)]);
    gate
}

/// Arms a hook with one gate per `(point, thread)`, returned in that order. A thread that
/// reaches a point two gates share stops at each, in order.
pub fn arm_gates<const N: usize>(stops: [(&'static str, &'static str); N]) -> [Arc<Gate>; N] {
    let gates = stops.map(|(point, thread)| Arc::new(Gate::new(point, thread)));
    let hooked = gates.clone();
    set_pause_hook(Some(Arc::new(move |name| {
        for gate in &hooked {
            gate.pass(name);
        }
    })));
    gates
}

/// Sets a hook that runs `action` each time the thread named `thread` reaches `point` (for
/// a stop no gate expresses, such as a panic that leaves a change half done for good).
pub fn on_pause_point(
    point: &'static str,
    thread: &'static str,
    action: impl Fn() + Send + Sync + 'static,
) {
    set_pause_hook(Some(Arc::new(move |name| {
        if name == point && thread::current().name() == Some(thread) {
            action();
        }
    })));
}

/// Removes the pause hook.
pub fn disarm() {
    set_pause_hook(None);
}

/// Runs `work` on a thread named [`PAUSER`], the one [`arm`] stops.
pub fn spawn_pauser<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    spawn_named(PAUSER, work)
}

/// Runs `work` on a thread named `name` (a gate's thread).
pub fn spawn_named<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    thread::Builder::new()
        .name(name.into())
        .spawn(work)
        .expect("spawn a test thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pause::pause_point;

    // Goal: a gate stops only its thread, only at its point, only the first time, and counts
    // every arrival. Method: two gates; threads reach their own and each other's points.
    #[test]
    fn a_gate_stops_its_thread_once_at_its_point() {
        let _turn = take_turn();
        let [first, second] = arm_gates([("kit:first", "one"), ("kit:second", "two")]);
        let one = spawn_named("one", || {
            pause_point("kit:second"); // not its gate's point: goes on
            pause_point("kit:first"); // stops here
            pause_point("kit:first"); // counted, not stopped
        });
        first.wait_paused();
        assert!(first.has_paused());
        assert!(!second.has_paused());
        pause_point("kit:first"); // this thread is not "one": goes on
        first.release();
        one.join().expect("thread one");
        assert_eq!(first.reached_count(), 2);
        let two = spawn_named("two", || pause_point("kit:second"));
        second.wait_paused();
        second.release();
        two.join().expect("thread two");
        assert_eq!(second.reached_count(), 1);
        disarm();
    }
}
