//! The optimistic get of Fig. 7 (§4.6.4): no locks, no writes to shared memory.
//!
//! The value is copied out between the version snapshot and its validation; when the border
//! node changed, the reader re-reads it, first walking right along `next` past splits
//! (`k ≥ lowkey(next)`), since splits move keys only to the right.

use crate::block::Value;
use crate::border::Lookup;
use crate::key::{class_of, slice_of, SLICE_BYTES};
use crate::nodeversion::DELETED;
use crate::Masstree;

/// Looks `key` up; on a hit, `out` holds the value.
pub fn get<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    get_with(tree, key, |v| {
        out.clear();
        out.extend_from_slice(v.bytes);
    })
}

/// Looks `key` up and calls `read` on the value block found; returns whether it was found.
/// `read` may run more than once (a validation failed after it), the last call being the
/// answer; a value block never changes once published, so each call sees one whole value.
pub fn get_with<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    key: &[u8],
    mut read: impl FnMut(Value<'_>),
) -> bool {
    let guard = tree.pin();
    'top: loop {
        let mut root = tree.root(&guard);
        let mut rest = key;
        'layer: loop {
            let slice = slice_of(rest);
            let class = class_of(rest);
            let (mut n, mut v) = crate::layer::find_border(tree, root, slice, &guard);
            loop {
                if v & DELETED != 0 {
                    // Removed node or removed layer (§4.6.5): the key's place is found anew
                    // from the top, since the layer itself may be gone.
                    tree.counters.restarts.incr();
                    continue 'top;
                }
                let found = n.lookup(slice, class, rest, tree.config.search, &guard);
                let mut hit = false;
                if let Lookup::Value(Some(b)) = found {
                    read(crate::block::value(b));
                    hit = true;
                }
                if n.base.version.has_changed(v) {
                    // What we read may be torn or stale: re-read, after walking right past
                    // splits.
                    tree.counters.retries.incr();
                    (n, v) = crate::layer::walk_right(n, slice, &guard);
                    continue;
                }
                match found {
                    Lookup::NotFound | Lookup::Value(_) => return hit,
                    Lookup::Layer(Some(p)) => {
                        root = p.node();
                        rest = &rest[SLICE_BYTES..];
                        continue 'layer;
                    }
                    // A validated layer slot has its link; wait as for an unstable one.
                    Lookup::Layer(None) | Lookup::Unstable => {
                        // A layer is being installed; the writer holds the node briefly.
                        tree.counters.retries.incr();
                        forest_core::sync::spin_loop();
                    }
                }
            }
        }
    }
}
