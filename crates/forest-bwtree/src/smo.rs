//! Serializing structure modifications (Bw-tree §IV-C) — test-only pause points.
//!
//! The help-along rule itself lives where a thread meets an incomplete SMO: `get.rs`'s
//! descent (and `find_in_leaf`, its leaf end for gets and writes) completes a split before
//! following its side link and a merge before going on from a frozen page (then starts over
//! from the root), and grows the root when the root's own split is pending; `split.rs` completes a page's pending
//! split before splitting it again or posting to a frozen parent; `merge.rs` completes a
//! pending split before removing a page and a frozen neighbour's merge before its own. This module holds the pause points: named places between the atomic steps
//! of an SMO where, with the `pause-points` feature, a test's hook can stop the thread (e.g.
//! after the half split, before the index term) so that other threads meet the incomplete SMO.
//! Without the feature a pause point compiles to nothing.
//!
//! Pause points (each right after the CAS of the step named):
//! - `split:leaf-half-split-installed`, `split:index-half-split-installed`: split delta, before
//!   the index term or new root;
//! - `merge:remove-node-installed`: remove node delta, before the index term delete;
//! - `merge:helper-checked-frozen`: a thread completing a merge has checked that the page is
//!   still frozen by the remove node delta it read, before it searches the parent (not after
//!   a CAS: it lets a test make that thread a stale helper);
//! - `merge:withdrawal-decided`: a thread completing a merge found the page a first child,
//!   before its CAS that withdraws the merge (not after a CAS either);
//! - `merge:index-term-delete-installed`: index term delete, before the commit;
//! - `merge:committed`: the commit (remove node delta made committed), before the node merge
//!   delta;
//! - `merge:node-merge-installed`: node merge delta, before the PID is freed;
//! - `merge:root-remove-installed`: a one-child root frozen, before the root PID swap.

/// A hook called at every pause point with its name.
#[cfg(feature = "pause-points")]
pub type PauseHook = std::sync::Arc<dyn Fn(&'static str) + Send + Sync>;

#[cfg(feature = "pause-points")]
static HOOK: std::sync::RwLock<Option<PauseHook>> = std::sync::RwLock::new(None);

/// Installs (or with `None` removes) the process-wide pause hook. Test builds only.
#[cfg(feature = "pause-points")]
pub fn set_pause_hook(hook: Option<PauseHook>) {
    *HOOK
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
}

/// Calls the pause hook, if any, with `name`.
#[cfg(feature = "pause-points")]
pub(crate) fn pause_point(name: &'static str) {
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
pub(crate) fn pause_point(_name: &'static str) {}
