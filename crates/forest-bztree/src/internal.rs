//! Descent and internal nodes (BzTree §4.4, §4.3 "path stack"): a descent binary-searches the
//! immutable internal nodes, reads each child pointer with the helping read, and records the
//! path so that an SMO finds the parent and grandparent it must replace or swap into.

use forest_pmwcas::{Guard, Persist};

use crate::{BzTree, Path, PATH_MAX};

impl<P: Persist> BzTree<P> {
    /// The path to the leaf whose range holds `key` (or with `after`, the first leaf holding
    /// keys above `key`, §4.2.6).
    pub(crate) fn descend(&self, key: &[u8], after: bool, guard: &Guard) -> Path {
        let mut path = Path {
            nodes: [(0, 0); PATH_MAX],
            len: 0,
            leaf: 0,
        };
        let mut node = self.root(guard);
        while self.level(node) > 0 {
            let slot = self.child_slot(node, key, after);
            assert!(
                path.len < PATH_MAX,
                "bztree: tree deeper than {PATH_MAX} levels"
            );
            path.nodes[path.len] = (node, slot);
            path.len += 1;
            let level = self.level(node);
            node = self.child(node, slot, guard);
            if level == 1 {
                self.prefetch_leaf(node);
            }
        }
        path.leaf = node;
        path
    }

    /// The leaf whose range holds `key`, recording no path: a point read's descent (§4.2.5),
    /// which never runs an SMO and so needs no parent (no 512-byte path filled per read).
    pub(crate) fn leaf_for(&self, key: &[u8], guard: &Guard) -> u64 {
        let mut node = self.root(guard);
        loop {
            let level = self.level(node);
            if level == 0 {
                return node;
            }
            let slot = self.child_slot(node, key, false);
            node = self.child(node, slot, guard);
            if level == 1 {
                self.prefetch_leaf(node);
            }
        }
    }

    /// Starts loading a leaf's lines before its search (as bwtree's leaves, `base_page.rs`):
    /// the binary search's probes (metadata word, then key bytes elsewhere in the node) then
    /// wait for about one memory access instead of one or two each. Leaves only: the few
    /// internal nodes stay cached.
    #[inline]
    pub(crate) fn prefetch_leaf(&self, leaf: u64) {
        self.heap.prefetch(leaf, self.config.node_size as u64);
    }

    /// Re-traverses by `key` to `target` (§4.3: "re-traverse the index to find the valid
    /// parent"): the path whose last element is `target`'s parent (or an empty path if it is
    /// the root), or `None` if `target` is no longer in the tree.
    pub(crate) fn path_to(&self, target: u64, key: &[u8], guard: &Guard) -> Option<Path> {
        let target_level = self.level(target);
        let mut path = Path {
            nodes: [(0, 0); PATH_MAX],
            len: 0,
            leaf: 0,
        };
        let mut node = self.root(guard);
        loop {
            if node == target {
                path.leaf = node;
                return Some(path);
            }
            let level = self.level(node);
            if level <= target_level {
                return None;
            }
            let slot = self.child_slot(node, key, false);
            assert!(
                path.len < PATH_MAX,
                "bztree: tree deeper than {PATH_MAX} levels"
            );
            path.nodes[path.len] = (node, slot);
            path.len += 1;
            node = self.child(node, slot, guard);
        }
    }
}
