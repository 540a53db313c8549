//! Pause points: named places between the atomic steps of an engine's multi-step change
//! where a test can stop the thread, so that other threads meet the change half done (STYLE.md
//! §5, after RocksDB's sync points). A Bw-tree split stopped after its half split and before
//! its index term (Bw-tree §IV-C) or a Masstree border split stopped after linking its sibling
//! and before updating the parent (§4.6.4) are the cases they were made for.
//!
//! An engine calls [`pause_point`] at each such step; a test installs a process-wide hook with
//! [`set_pause_hook`], which every pause point calls with its name on the thread that reached
//! it. The test kit's `conformance::pause` (features `testkit` and `pause-points`) builds
//! the usual hooks: stop a named thread at a named point, once, behind barriers.
//!
//! Rules:
//! - A name is `"<mechanism>:<step>"`: the mechanism as its file or paper names it, then the
//!   step just completed or about to be taken (`"split:leaf-half-split-installed"`,
//!   `"layer:unstable"`).
//! - Each engine lists its pause points, with what holds at each, in its own module doc
//!   (forest-bwtree and forest-masstree: their crate docs).
//! - A pause point sits where the thread holds no latch another thread needs to go on, or the
//!   test documents which threads it expects to block.
//!
//! Feature `pause-points` (tests only, never in a release build): without it [`pause_point`]
//! is an empty inline function, so engines call it unconditionally, and [`set_pause_hook`] does
//! not exist. An engine forwards its own feature: `pause-points = ["forest-core/pause-points"]`.
//! Cargo unifies features, so a build that turns on one engine's points turns on every
//! engine's in it: each then costs a read of the hook's lock.

/// A hook called at every pause point with its name.
#[cfg(feature = "pause-points")]
pub type PauseHook = std::sync::Arc<dyn Fn(&'static str) + Send + Sync>;

/// The process-wide hook.
#[cfg(feature = "pause-points")]
static HOOK: std::sync::RwLock<Option<PauseHook>> = std::sync::RwLock::new(None);

/// Installs (or with `None` removes) the process-wide pause hook. Test builds only.
#[cfg(feature = "pause-points")]
pub fn set_pause_hook(hook: Option<PauseHook>) {
    *HOOK
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
}

/// Calls the pause hook, if any, with `name`. The hook runs outside the hook's lock, so it may
/// block, reach other pause points, or replace the hook.
#[cfg(feature = "pause-points")]
pub fn pause_point(name: &'static str) {
    let hook = HOOK
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(hook) = hook {
        hook(name);
    }
}

/// Without the `pause-points` feature a pause point does nothing.
#[cfg(not(feature = "pause-points"))]
#[inline(always)]
pub fn pause_point(_name: &'static str) {}
