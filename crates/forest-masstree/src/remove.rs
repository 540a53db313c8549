//! Removes (§4.6.5), in part: a key leaves its border node's permutation in one store and its
//! value block goes back through the epoch; the node's `has_removed` flag makes later inserts
//! that reuse a slot bump `vinsert`, so a reader holding the old slot retries.
//!
//! Not yet done (the paper's remaining §4.6.5): empty border nodes stay linked, empty layers
//! stay in place; a later insert reuses them.

use crossbeam_epoch::{self as epoch, Shared};
use forest_core::sync::atomic::Ordering;

use crate::border::{retire, Found};
use crate::key::{class_of, slice_of, SLICE_BYTES};
use crate::Masstree;

/// Removes `key`; returns whether it was present.
pub fn remove(tree: &Masstree, key: &[u8]) -> bool {
    let guard = epoch::pin();
    let mut root = tree.root.load(Ordering::Acquire);
    let mut rest = key;
    loop {
        let slice = slice_of(rest);
        let n = crate::layer::locate_locked(tree, root, slice);
        match n.find_locked(slice, class_of(rest), rest, &guard) {
            Found::Exact(pos, s) => {
                n.has_removed.store(true, Ordering::Relaxed);
                let perm = n.permutation().remove(pos);
                n.permutation.store(perm.value(), Ordering::Release);
                let old = n.value[s].swap(Shared::null(), Ordering::AcqRel, &guard);
                retire(old, &guard);
                n.base.version.unlock();
                return true;
            }
            Found::Layer(s) => {
                root = n.layer[s].load(Ordering::Acquire);
                n.base.version.unlock();
                rest = &rest[SLICE_BYTES..];
            }
            Found::Conflict(_) | Found::Absent(_) => {
                n.base.version.unlock();
                return false;
            }
        }
    }
}
