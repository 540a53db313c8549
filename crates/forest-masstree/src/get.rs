//! The optimistic get of Fig. 7 (§4.6.4): no locks, no writes to shared memory.
//!
//! The value is copied out between the version snapshot and its validation; when the border
//! node changed, the reader re-reads it, first walking right along `next` past splits
//! (`k ≥ lowkey(next)`), since splits move keys only to the right.

use crossbeam_epoch as epoch;
use forest_core::sync::atomic::Ordering;

use crate::border::Lookup;
use crate::key::{class_of, slice_of, SLICE_BYTES};
use crate::node::border;
use crate::nodeversion::DELETED;
use crate::Masstree;

/// Looks `key` up; on a hit, `out` holds the value.
pub fn get(tree: &Masstree, key: &[u8], out: &mut Vec<u8>) -> bool {
    let guard = epoch::pin();
    let mut root = tree.root.load(Ordering::Acquire);
    let mut rest = key;
    'layer: loop {
        let slice = slice_of(rest);
        let class = class_of(rest);
        let (mut n, mut v) = crate::layer::find_border(tree, root, slice);
        loop {
            if v & DELETED != 0 {
                tree.counters.restarts.incr();
                continue 'layer;
            }
            let found = n.lookup(slice, class, rest, &guard);
            let mut hit = false;
            if let Lookup::Value(p) = found {
                // SAFETY: values are freed only through the epoch `guard` pins.
                if let Some(b) = unsafe { p.as_ref() } {
                    out.clear();
                    out.extend_from_slice(b);
                    hit = true;
                }
            }
            if n.base.version.has_changed(v) {
                // What we read may be torn or stale: re-read, after walking right past splits.
                tree.counters.retries.incr();
                v = n.base.version.stable();
                let mut next = n.next.load(Ordering::Acquire);
                while v & DELETED == 0 && !next.is_null() {
                    // SAFETY: `next` links point to live border nodes.
                    let nb = unsafe { border(next) };
                    if slice < nb.lowkey {
                        break;
                    }
                    n = nb;
                    v = n.base.version.stable();
                    next = n.next.load(Ordering::Acquire);
                }
                continue;
            }
            match found {
                Lookup::NotFound | Lookup::Value(_) => return hit,
                Lookup::Layer(p) => {
                    root = p;
                    rest = &rest[SLICE_BYTES..];
                    continue 'layer;
                }
                Lookup::Unstable => {
                    // A layer is being installed; the writer holds the node briefly.
                    tree.counters.retries.incr();
                    forest_core::sync::spin_loop();
                }
            }
        }
    }
}
