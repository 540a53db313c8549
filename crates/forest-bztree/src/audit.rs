//! A full check of a quiescent tree and its heap, for tests after a crash and reopen (issue 16
//! "SIGKILL tests": invariants hold, every allocated chunk is reachable or free). Walks the
//! whole tree and the whole heap: never on a recovery path (§6.3 needs no walk).

use std::collections::HashSet;

use forest_pmwcas::{Guard, Persist};

use crate::BzTree;

/// What [`BzTree::audit`] found on a sound tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Visible keys.
    pub keys: u64,
    /// Nodes reachable from the root.
    pub nodes: u64,
    /// Value blocks behind visible record pointers.
    pub value_blocks: u64,
    /// Chunks on the free lists.
    pub free_chunks: u64,
    /// Height (1: the root is a leaf).
    pub height: u64,
    /// Internal nodes whose records (the split threshold's bytes, `node.rs`) pass the
    /// configured node size: built oversized when a split had no room in its descriptor to
    /// split them (`split.rs`).
    pub oversized_internal: u64,
}

impl<P: Persist> BzTree<P> {
    /// Checks the tree's invariants (keys ordered and within their parents' separators, one
    /// visible version per key, levels consistent, no linked internal node frozen) and the
    /// heap's (every chunk below the bump pointer is reachable from the root or on a free
    /// list, never both, and no chunk is left unactivated). Only for a quiescent tree whose
    /// retired nodes have been released, as after a reopen. The error names the first
    /// violation.
    pub fn audit(&self) -> Result<Audit, String> {
        // Decided descriptors a crash left free their chunks once finished (forest-pmwcas
        // `recovery.rs`): after that every chunk is reachable or listed.
        self.pool.finish_recovery();
        let guard = self.pool.pin();
        let mut audit = Audit::default();
        let mut reachable = HashSet::new();
        let root = self.root(&guard);
        audit.height = self.level(root) + 1;
        self.audit_node(root, None, None, &mut reachable, &mut audit, &guard)?;
        // Heads a crash left unmarked are completed at their class's first use (`heap.rs`).
        self.heap.settle_heads(&|r| self.pool.persist_range(r));
        let (free, unactivated) = self.heap.listed();
        if !unactivated.is_empty() {
            return Err(format!("chunks left unactivated: {unactivated:?}"));
        }
        let listed = free.len();
        let free: HashSet<u64> = free.into_iter().collect();
        if free.len() != listed {
            return Err(format!(
                "{} chunks are on the free lists twice",
                listed - free.len()
            ));
        }
        audit.free_chunks = free.len() as u64;
        let (mut matched, mut matched_free) = (0usize, 0usize);
        for (chunk, size, is_free) in self.heap.chunks()? {
            let r = reachable.contains(&chunk);
            matched += usize::from(r);
            matched_free += usize::from(is_free);
            match (r, free.contains(&chunk), is_free) {
                (true, false, false) | (false, true, true) => {}
                (r, f, m) => {
                    return Err(format!(
                        "chunk {chunk} ({size} bytes): reachable {r}, on a free list {f}, marked free {m}"
                    ))
                }
            }
        }
        if matched_free != free.len() {
            return Err(format!(
                "{} chunks on the free lists are not free chunks of the heap",
                free.len() - matched_free
            ));
        }
        if matched != reachable.len() {
            return Err(format!(
                "{} of {} reachable nodes and value blocks are not chunks of the heap",
                reachable.len() - matched,
                reachable.len()
            ));
        }
        Ok(audit)
    }

    fn audit_node(
        &self,
        node: u64,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        reachable: &mut HashSet<u64>,
        audit: &mut Audit,
        guard: &Guard,
    ) -> Result<(), String> {
        if !reachable.insert(node) {
            return Err(format!("node {node} reached twice"));
        }
        audit.nodes += 1;
        // Child i of an internal node holds the keys above separator i and up to separator
        // i + 1 (a split leaves the separator in the left half, §5.2).
        let within = |k: &[u8]| lo.is_none_or(|l| k > l) && hi.is_none_or(|h| k <= h);
        let level = self.level(node);
        // A linked leaf may be frozen (a consolidation or merge whose install never ran: the
        // next writer rebuilds it, §4.3); an internal node is frozen only by the PMwCAS that
        // unlinks it.
        if level > 0 && self.status(node, guard).is_frozen() {
            return Err(format!("internal node {node} is frozen but linked"));
        }
        if level == 0 {
            let s = self.status(node, guard);
            let mut keys: Vec<&[u8]> = Vec::new();
            for i in 0..s.record_count() {
                let m = self.leaf_meta(node, i, guard);
                if !m.is_visible() {
                    continue;
                }
                let key = self.key_of(node, m);
                if !within(key) {
                    return Err(format!("leaf {node}: key {key:?} outside {lo:?}..{hi:?}"));
                }
                if m.is_record_pointer() {
                    let block = self
                        .pool
                        .read(self.heap.word(Self::pointer_off(node, m)), guard);
                    if !reachable.insert(block) {
                        return Err(format!("value block {block} reached twice"));
                    }
                    audit.value_blocks += 1;
                }
                keys.push(key);
            }
            keys.sort_unstable();
            if keys.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("leaf {node}: a key is visible twice"));
            }
            audit.keys += keys.len() as u64;
            return Ok(());
        }
        let n = self.sorted_count(node);
        // Sized to its content, which the split threshold counts without the prefix array
        // (`node.rs`).
        if self.node_size(node).saturating_sub(8 * n) > self.config.node_size as u64 {
            audit.oversized_internal += 1;
        }
        if n == 0 {
            return Err(format!("internal node {node} has no child"));
        }
        for i in 0..n {
            let sep = (i > 0).then(|| self.separator(node, i));
            let next = (i + 1 < n).then(|| self.separator(node, i + 1)).or(hi);
            let prefix = self
                .heap
                .atomic(Self::prefix_off(node, n, i))
                .load(std::sync::atomic::Ordering::Relaxed);
            if prefix != crate::node::key_prefix(sep.unwrap_or_default()) {
                return Err(format!("internal node {node}: prefix {i} is not its key's"));
            }
            if let Some(k) = sep {
                let above = lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k <= h);
                if !above || next.is_some_and(|nx| k >= nx) {
                    return Err(format!("internal node {node}: separator {i} out of order"));
                }
            }
            let child = self.child(node, i, guard);
            if self.level(child) + 1 != level {
                return Err(format!(
                    "internal node {node}: child {i} at the wrong level"
                ));
            }
            self.audit_node(child, sep.or(lo), next, reachable, audit, guard)?;
        }
        Ok(())
    }
}
