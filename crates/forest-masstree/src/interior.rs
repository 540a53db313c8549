//! Interior nodes (§4.2, Fig. 2): `F - 1` key slices and `F` children; the paper's fanout `F`
//! is 16.
//!
//! Invariants:
//! - `child[i]` holds the keys whose slice lies in `[keyslice[i-1], keyslice[i])`; all keys
//!   with one slice sit under one child (border splits never separate a slice, §4.2).
//! - Fields change only under the node's lock with the node marked inserting or splitting, so
//!   a reader that read torn fields fails validation; a torn read never yields a dangling
//!   pointer since nodes are freed only through the epoch (crate::node), and a null child is
//!   retried.
//! - Children past `nkeys` are null (a split and a removal clear them), so no entry names a
//!   node that another parent owns or that was retired (crate::node).
//! - `keyslice[i-1]` is the lowkey of the first border node under `child[i]`: splits post the
//!   new sibling's lowkey, and a removal that shifts out a first child raises the ancestor
//!   separator to match (§4.6.5, `crate::remove`).
//!
//! Children are reached through [`crate::node`]'s references, so this module has no `unsafe`.

use crate::node::TreeGuard;
use forest_core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::config::NodeSearch;
use crate::node::{InteriorRef, Link, Making, NodeBase, NodeRef};

/// The most children an interior node may have (bounds a split's scratch arrays).
pub const FANOUT_MAX: usize = 32;
/// The fewest children an interior node may have (a split leaves both halves a key).
pub const FANOUT_MIN: usize = 4;

/// An interior node of fanout `F` (in a tree whose border nodes have `W` slots).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Interior<const W: usize, const F: usize> {
    pub base: NodeBase<W, F>,
    pub nkeys: AtomicU8,
    /// Separators `0..F - 1`; the last entry is never used (a stable array length cannot be
    /// `F - 1` for a generic `F`).
    pub keyslice: [AtomicU64; F],
    pub child: [Link<NodeBase<W, F>>; F],
}

impl<const W: usize, const F: usize> Interior<W, F> {
    /// Keys of a full node.
    pub const KEYS_MAX: usize = F - 1;
    const FANOUT_OK: () = assert!(F >= FANOUT_MIN && F <= FANOUT_MAX);

    /// An empty interior node with the header `base`; only
    /// [`crate::node::NodeRegistry::alloc_interior`] makes a header and a [`Making`] for it.
    pub fn new(base: NodeBase<W, F>, making: &Making) -> Self {
        let () = Self::FANOUT_OK;
        Self {
            base,
            nkeys: AtomicU8::new(0),
            keyslice: std::array::from_fn(|_| AtomicU64::new(0)),
            child: std::array::from_fn(|_| Link::null(making)),
        }
    }

    /// Keys in use (clamped, for readers that may see a torn value).
    pub fn nkeys(&self) -> usize {
        (self.nkeys.load(Ordering::Acquire) as usize).min(Self::KEYS_MAX)
    }

    /// The child responsible for `slice` (may be null under a torn read).
    #[inline]
    pub fn child_for<'g>(
        &self,
        slice: u64,
        search: NodeSearch,
        guard: &'g TreeGuard<'_>,
    ) -> Option<NodeRef<'g, W, F>> {
        let n = self.nkeys();
        let i = match search {
            NodeSearch::Linear => {
                let mut i = 0;
                while i < n && self.keyslice[i].load(Ordering::Acquire) <= slice {
                    i += 1;
                }
                i
            }
            NodeSearch::Binary => {
                let (mut lo, mut hi) = (0, n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.keyslice[mid].load(Ordering::Acquire) <= slice {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        };
        self.child[i].load(Ordering::Acquire, guard)
    }

    /// The position of child `c` in this locked node.
    pub(crate) fn position_of(&self, c: NodeRef<'_, W, F>, guard: &TreeGuard<'_>) -> usize {
        let n = self.nkeys();
        (0..=n)
            .find(|&i| self.child[i].load(Ordering::Relaxed, guard) == Some(c))
            .expect("a locked parent lists its child")
    }

    /// Removes child `c` of this locked node, marked inserting, with at least one key: with the
    /// key before it, or, for the first child, with the key after it. Returns that key in
    /// the second case: the node's new lower bound (§4.6.5).
    pub fn remove_child(&self, c: NodeRef<'_, W, F>, guard: &TreeGuard<'_>) -> Option<u64> {
        let n = self.nkeys();
        debug_assert!(n > 0);
        let j = self.position_of(c, guard);
        let (key_gone, raised) = if j == 0 {
            (0, Some(self.keyslice[0].load(Ordering::Relaxed)))
        } else {
            (j - 1, None)
        };
        for i in key_gone..n - 1 {
            let k = self.keyslice[i + 1].load(Ordering::Relaxed);
            self.keyslice[i].store(k, Ordering::Release);
        }
        for i in j..n {
            let k = self.child[i + 1].load(Ordering::Relaxed, guard);
            self.child[i].store(k, Ordering::Release);
        }
        self.child[n].store(None, Ordering::Release);
        self.nkeys.store(n as u8 - 1, Ordering::Release);
        raised
    }

    /// Inserts `right` after `left` with separator `sep`; the node is locked, marked
    /// inserting, and not full.
    pub fn insert_after(
        &self,
        left: NodeRef<'_, W, F>,
        sep: u64,
        right: NodeRef<'_, W, F>,
        guard: &TreeGuard<'_>,
    ) {
        let n = self.nkeys();
        debug_assert!(n < Self::KEYS_MAX);
        let j = self.position_of(left, guard);
        for i in (j..n).rev() {
            let k = self.keyslice[i].load(Ordering::Relaxed);
            self.keyslice[i + 1].store(k, Ordering::Relaxed);
            let c = self.child[i + 1].load(Ordering::Relaxed, guard);
            self.child[i + 2].store(c, Ordering::Relaxed);
        }
        self.keyslice[j].store(sep, Ordering::Relaxed);
        self.child[j + 1].store(Some(right), Ordering::Release);
        self.nkeys.store(n as u8 + 1, Ordering::Release);
    }

    /// Splits the full, locked, splitting node `this` into itself and `p2` (new, locked),
    /// inserting `right` after `left` first. Sets the parent of every child that lands in
    /// `p2`, and of `right` wherever it lands. Returns the separator to insert above.
    pub fn split_into<'g>(
        this: InteriorRef<'g, W, F>,
        p2: InteriorRef<'g, W, F>,
        left: NodeRef<'g, W, F>,
        sep: u64,
        right: NodeRef<'g, W, F>,
        guard: &'g TreeGuard<'_>,
    ) -> u64 {
        let n = this.nkeys();
        debug_assert_eq!(n, Self::KEYS_MAX);
        let j = this.position_of(left, guard);
        let mut keys = [0u64; FANOUT_MAX];
        let mut kids: [Option<NodeRef<'g, W, F>>; FANOUT_MAX + 1] = [None; FANOUT_MAX + 1];
        let mut k = 0;
        for i in 0..n {
            if i == j {
                keys[k] = sep;
                k += 1;
            }
            keys[k] = this.keyslice[i].load(Ordering::Relaxed);
            k += 1;
        }
        if j == n {
            keys[k] = sep;
        }
        let mut c = 0;
        for i in 0..=n {
            kids[c] = this.child[i].load(Ordering::Relaxed, guard);
            c += 1;
            if i == j {
                kids[c] = Some(right);
                c += 1;
            }
        }
        // F keys and F + 1 children: the left keeps keys 0..l and children 0..=l, key l goes
        // up, the right gets the rest (l = 8 at the paper's fanout 16).
        let left_keys = Self::KEYS_MAX.div_ceil(2);
        let up = keys[left_keys];
        for (i, &key) in keys[left_keys + 1..F].iter().enumerate() {
            p2.keyslice[i].store(key, Ordering::Relaxed);
        }
        for (i, &kid) in kids[left_keys + 1..=F].iter().enumerate() {
            p2.child[i].store(kid, Ordering::Relaxed);
            let kid = kid.expect("a full locked node has all its children");
            kid.parent.store(Some(p2.node()), Ordering::Release);
        }
        p2.nkeys
            .store((Self::KEYS_MAX - left_keys) as u8, Ordering::Relaxed);
        for (i, &key) in keys[..left_keys].iter().enumerate() {
            this.keyslice[i].store(key, Ordering::Relaxed);
        }
        for (i, &kid) in kids[..=left_keys].iter().enumerate() {
            this.child[i].store(kid, Ordering::Relaxed);
            if kid == Some(right) {
                right.parent.store(Some(this.node()), Ordering::Release);
            }
        }
        this.nkeys.store(left_keys as u8, Ordering::Release);
        // The moved children are `p2`'s, which may remove them: no entry here names them. A
        // reader that read the old key count meets a null child or the splitting mark.
        for c in &this.child[left_keys + 1..] {
            c.store(None, Ordering::Release);
        }
        up
    }
}
