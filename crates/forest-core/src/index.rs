//! The `Index` trait: the one API every engine implements (DESIGN.md, "The Index API").
//!
//! The trait is object safe so that the CLI, the benchmarks and the server choose an engine at
//! run time (`Arc<dyn Index>`). Keys and values are byte strings ordered lexicographically
//! (as `[u8]`'s `Ord`), so the empty key sorts first and a key sorts before its extensions.
//!
//! Contract shared by every engine (the conformance kit checks each point):
//! - Every single-key operation is linearizable.
//! - A scan is not atomic as a whole; each record it hands out is (Bw-tree §III-C, BzTree
//!   §4.2.6). A key present and unchanged for the whole scan is returned exactly once; keys
//!   come strictly ordered in the requested direction, never twice.
//! - A scan never runs `visit` while holding a latch or an epoch pin: engines copy a leaf's
//!   records, release, hand them out, and re-descend from the last key returned. So `visit`
//!   may call back into the same index.
//! - Writes check sizes first ([`crate::check_entry`]); an over-long key or value is an error
//!   and changes nothing.

use std::ops::{Bound, ControlFlow};

use crate::error::Result;
use crate::stats::IndexStats;

/// The direction of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Smallest key first.
    Ascending,
    /// Largest key first.
    Descending,
}

/// The callback of [`Index::scan`]: gets each record's key and value, returns
/// `ControlFlow::Break(())` to stop the scan.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// A concurrent ordered map from byte keys to byte values.
pub trait Index: Send + Sync {
    /// The engine's name as the CLI and benchmarks spell it (`lockbtree`, `bwtree`, ...).
    fn name(&self) -> &'static str;

    /// Looks `key` up. When present, replaces `out`'s contents with the value and returns
    /// true; when absent returns false and leaves `out` unspecified. Reusing `out` across calls
    /// keeps the hot path free of allocation.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool;

    /// Inserts only if `key` is absent (the papers' unique insert). Returns whether it did.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Inserts or replaces.
    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Replaces only if `key` is present. Returns whether it did.
    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Removes `key`. Returns whether it was present.
    fn remove(&self, key: &[u8]) -> bool;

    /// Calls `visit` on every record with a key within `(lower, upper)`, in `order`, until
    /// `visit` returns `ControlFlow::Break`. Bounds that cross (lower above upper) give an
    /// empty scan, not an error.
    fn scan(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, order: Order, visit: &mut Visitor<'_>);

    /// A snapshot of sizes and the engine's event counters. May walk the structure; not meant
    /// for the hot path.
    fn stats(&self) -> IndexStats;
}

/// Whether `key` lies within the two bounds (helper for engines and the kit).
#[inline]
pub fn in_bounds(key: &[u8], lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    let above_lower = match lower {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    };
    let below_upper = match upper {
        Bound::Included(u) => key <= u,
        Bound::Excluded(u) => key < u,
        Bound::Unbounded => true,
    };
    above_lower && below_upper
}

/// Whether `key` is past `upper` going up (so an ascending scan can stop).
#[inline]
pub fn past_upper(key: &[u8], upper: Bound<&[u8]>) -> bool {
    match upper {
        Bound::Included(u) => key > u,
        Bound::Excluded(u) => key >= u,
        Bound::Unbounded => false,
    }
}

/// Whether `key` is below `lower` going down (so a descending scan can stop).
#[inline]
pub fn below_lower(key: &[u8], lower: Bound<&[u8]>) -> bool {
    match lower {
        Bound::Included(l) => key < l,
        Bound::Excluded(l) => key <= l,
        Bound::Unbounded => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_helpers_agree_with_ranges() {
        let b: &[u8] = b"b";
        let d: &[u8] = b"d";
        assert!(in_bounds(b"b", Bound::Included(b), Bound::Excluded(d)));
        assert!(!in_bounds(b"b", Bound::Excluded(b), Bound::Excluded(d)));
        assert!(!in_bounds(b"d", Bound::Included(b), Bound::Excluded(d)));
        assert!(in_bounds(b"d", Bound::Included(b), Bound::Included(d)));
        assert!(in_bounds(b"", Bound::Unbounded, Bound::Unbounded));
        assert!(past_upper(b"d", Bound::Excluded(d)));
        assert!(!past_upper(b"d", Bound::Included(d)));
        assert!(below_lower(b"b", Bound::Excluded(b)));
        assert!(!below_lower(b"b", Bound::Included(b)));
    }
}
