//! Puts (§4.6.1–4.6.3): updates swap the value pointer in place (readers see the old or the
//! new block), inserts publish a new key with one permutation store, and a long key whose
//! slice collides with another long key moves both into a new layer.

use crossbeam_epoch::{self as epoch, Owned};
use forest_core::sync::atomic::Ordering;

use crate::border::{retire, Found};
use crate::key::{class_of, slice_of, SLICE_BYTES};
use crate::permuter::WIDTH;
use crate::Masstree;

/// What a put does when the key is present or absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Only if absent.
    Insert,
    /// Always.
    Upsert,
    /// Only if present.
    Update,
}

/// Stores `value` under `key` as `mode` says. Returns whether it wrote.
pub fn put(tree: &Masstree, key: &[u8], value: &[u8], mode: PutMode) -> bool {
    let guard = epoch::pin();
    let mut root = tree.root.load(Ordering::Acquire);
    let mut rest = key;
    loop {
        let slice = slice_of(rest);
        let class = class_of(rest);
        let n = crate::layer::locate_locked(tree, root, slice);
        match n.find_locked(slice, class, rest, &guard) {
            Found::Exact(_, s) => {
                if mode == PutMode::Insert {
                    n.base.version.unlock();
                    return false;
                }
                let old = n.value[s].swap(Owned::new(value.into()), Ordering::AcqRel, &guard);
                retire(old, &guard);
                n.base.version.unlock();
                return true;
            }
            Found::Layer(s) => {
                root = n.layer[s].load(Ordering::Acquire);
                n.base.version.unlock();
                rest = &rest[SLICE_BYTES..];
            }
            Found::Conflict(s) => {
                if mode == PutMode::Update {
                    n.base.version.unlock();
                    return false;
                }
                root = crate::layer::make_new_layer(tree, n, s, &guard);
                n.base.version.unlock();
                rest = &rest[SLICE_BYTES..];
            }
            Found::Absent(pos) => {
                if mode == PutMode::Update {
                    n.base.version.unlock();
                    return false;
                }
                if n.permutation().size() < WIDTH {
                    n.insert_at(pos, rest, value, &guard);
                    n.base.version.unlock();
                } else {
                    crate::split::split_insert(tree, n, pos, rest, value, &guard);
                }
                return true;
            }
        }
    }
}
