//! Test-only pause points: named places between the steps of a structure change where, with
//! the `pause-points` feature, a test's hook can stop the writer so that other threads meet
//! the change half done (house style §5, as forest-bwtree's `smo`). Without the feature a
//! pause point compiles to nothing.
//!
//! Pause points:
//! - `split:sibling-linked` (§4.6.4 steps 1–2): the border node is locked and marked
//!   splitting, its upper keys copied to the new sibling, which is linked after it; the
//!   parent is not yet updated.
//! - `split:parent-updated` (§4.6.4 steps 3–4): the sibling is in the parent (or a new root);
//!   nothing is unlocked yet.
//! - `layer:unstable` (§4.6.3): the slot's value moved to the new layer's node and its
//!   `keylen` is unstable; the layer link is not yet stored.
//! - `remove:leaf-marked` (§4.6.5): an empty border node is locked, marked deleted, not yet
//!   unlinked.
//! - `border:shifted` (§6.2's "B-tree" without "+Permuter"): a sorted border node is locked
//!   and marked inserting, its slots from the insert position on shifted right (that slot
//!   has no block); the new key and the permutation are not yet written.
//! - `get:slot-matched` (§4.6.4, Fig. 7): a reader's `lookup` matched the key to a slot and
//!   has not yet loaded the slot's value; it holds its version snapshot.
//! - `scan:before-copy`: a scan holds a border node and its version snapshot and is about to
//!   copy the node's records.
//! - `scan:copy-failed`: that copy met a slot mid-change (a layer being installed, a block
//!   being moved) and the scan is about to try the node again.

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
