//! Node merges (Bw-tree §IV-B) and root collapse, latch-free, completed by any thread that
//! meets them (§IV-C).
//!
//! A page R that shrank below the merge threshold is merged into its left sibling L:
//! 1. Remove node delta on R (CAS). R is frozen: no delta is installed on it again; a thread
//!    that meets it completes the merge and starts over from the root.
//! 2. Index term delete delta on the parent (CAS): R's low key is no longer a separator, so
//!    its keys go to the child left of it. (The paper's delta also carries L's new range for
//!    a fast path; here an index page with such a delta is routed through its merged view,
//!    since the child left of a deleted separator may have absorbed more than R by then.)
//! 3. Node merge delta on L (CAS): it points to R's frozen state, which becomes part of L's
//!    state (a tree, no longer a chain), and gives L R's high key and side link.
//! 4. R's PID is freed; the table recycles it after the epoch drains (§III-D).
//!
//! Choice that departs from the paper's order: the paper posts the node merge delta (3) before
//! the parent update (2). Then a parent split at R's low key between the two would leave L
//! covering R's keys under one parent while R is the first child of the other, and no single
//! CAS could repair the parents. Posting the parent update first lets that CAS check, on the
//! very parent state it replaces, that R is not its parent's first child. Between 2 and 3 the
//! tree stays a valid B-link tree: L's side link still leads to R, whose frozen state marks the
//! merge as incomplete, and any thread that gets there completes it. If the parent split at
//! R's low key after step 1 (R is now a first child), the remove is withdrawn instead: the
//! frozen state is put back with a CAS and the remove node delta retired. So a helper checks,
//! before step 3, that R is still frozen by the remove node delta it read: one that slept
//! through a withdrawal must not merge the old frozen state it holds.
//!
//! Other choices: R must be reached by its parent (its index term posted) and must not be its
//! parent's first child. A small first child (or leftmost page of a level) cannot merge left;
//! it absorbs its right sibling instead when the two fit in one page, so that deletes shrink
//! the tree everywhere. A root index page left
//! with one child and no pending split is collapsed: a remove node delta freezes it, the root
//! PID is swapped to the child by a CAS, and the old root is freed.

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_llama::Pid;

use crate::consolidate::view;
use crate::delta::{decode_pid, node_ref, read_node, Kind, Node, NodeMerge, NO_PID};
use crate::get::{route, Path, Route, Target};
use crate::smo::pause_point;
use crate::{root_word_pid, BwTree};

impl BwTree {
    /// Starts merging page `pid` at `state` (below the merge threshold) into its left sibling;
    /// a first child (which has no left sibling under its parent) absorbs its right sibling
    /// instead when both fit in a page; an index root with one child collapses.
    pub(crate) fn merge<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) {
        self.merge_into_left(pid, state, node, true, guard);
    }

    fn merge_into_left<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        absorb_right: bool,
        guard: &'g Guard,
    ) {
        if matches!(node.kind, Kind::RemoveNode) {
            return;
        }
        let low: &[u8] = node.base_page().low();
        let level = node.level;
        if low.is_empty() {
            if self.root_pid(guard) == pid {
                self.collapse_root(pid, state, node, guard);
            } else if absorb_right {
                self.absorb_right(node, guard);
            }
            return;
        }
        // §IV-C: a pending split of this page goes first, so that the page right of it has
        // its own index term and does not depend on this one.
        if let (Some(high), side_link) = node.bounds() {
            if self.complete_split(Path::new(), pid, level, high, side_link, guard) {
                self.stats.smo_helps.incr();
            }
        }
        let mut path = Path::new();
        let Some((_, _, parent)) = self.descend(Target::At(low), level + 1, &mut path, guard)
        else {
            return;
        };
        match route(parent, Target::At(low)) {
            Route::Child(child) if child == pid => {}
            _ => return, // the parent does not route to this page yet (its split is pending)
        }
        if parent.base_page().low() == low {
            // The first child of its parent has no left sibling under the same parent.
            if absorb_right {
                self.absorb_right(node, guard);
            }
            return;
        }
        let delta = Owned::new(Node::delta(node, 0, Kind::RemoveNode));
        self.stats.merge_attempts.incr();
        self.stats.cas_attempts.incr();
        match self.table.update_d(pid, state, delta, guard) {
            Ok(_) => {
                pause_point("merge:remove-node-installed");
                self.complete_merge(pid, guard);
            }
            Err((abandoned, _)) => {
                drop(abandoned);
                self.stats.failed_merges.incr();
                self.stats.cas_failures.incr();
            }
        }
    }

    /// Merges the right sibling of the page at `node` into it when both fit in one page.
    fn absorb_right(&self, node: &Node, guard: &Guard) {
        let (_, side_link) = node.bounds();
        if side_link == NO_PID {
            return;
        }
        let Some((r_state, r_node)) = read_node(&self.table, side_link, guard) else {
            return;
        };
        let total = r_node.record_count as usize + node.record_count as usize;
        if total <= self.config.max_records_per_page {
            self.merge_into_left(side_link, r_state, r_node, false, guard);
        }
    }

    /// Completes the merge of frozen page `r` (steps 2-4 above), or its withdrawal. Returns
    /// whether this call installed the node merge delta (or swapped the root).
    pub(crate) fn complete_merge(&self, r: Pid, guard: &Guard) -> bool {
        let Some((r_state, r_node)) = read_node(&self.table, r, guard) else {
            return false; // freed: the merge is complete
        };
        if !matches!(r_node.kind, Kind::RemoveNode) {
            return false; // withdrawn
        }
        let frozen = r_node
            .next()
            .expect("a remove node delta has the frozen state below it");
        let level = r_node.level;
        let low: &[u8] = frozen.base_page().low();
        let (high, side_link) = frozen.bounds();
        if low.is_empty() {
            return self.complete_root_collapse(r, r_state, frozen, guard);
        }
        // Step 2: the index term delete on the parent.
        loop {
            if self.table.read(r, guard) != r_state {
                return false; // withdrawn or completed by another thread meanwhile
            }
            pause_point("merge:helper-checked-frozen");
            let mut path = Path::new();
            let Some((parent, p_state, p_node)) =
                self.descend(Target::At(low), level + 1, &mut path, guard)
            else {
                return false;
            };
            match route(p_node, Target::At(low)) {
                Route::Child(child) if child == r => {
                    if p_node.base_page().low() == low {
                        // The parent split at R's low key after the remove: withdraw it.
                        if self.table.restore(
                            r,
                            r_state,
                            Shared::from(frozen as *const Node),
                            guard,
                        ) {
                            self.table.retire(r_state, guard);
                            self.stats.withdrawn_merges.incr();
                        }
                        return false;
                    }
                    let kind = Kind::IndexTermDelete {
                        separator: low.into(),
                    };
                    let delta = Owned::new(Node::delta(p_node, p_node.record_count - 1, kind));
                    self.stats.cas_attempts.incr();
                    match self.table.update_d(parent, p_state, delta, guard) {
                        Ok(_) => {
                            pause_point("merge:index-term-delete-installed");
                            break;
                        }
                        Err((abandoned, _)) => {
                            // The parent changed; route again in its new state.
                            drop(abandoned);
                            self.stats.cas_failures.incr();
                        }
                    }
                }
                Route::Child(_) => break, // another thread posted the delete
                // `descend` stopped at this state because it routes `low` to a child.
                Route::Right { .. } | Route::Removed | Route::Here => {
                    self.stats.restarts.incr();
                }
            }
        }
        // The delete seen (or posted) above belongs to this removal only if R stayed frozen
        // by `r_state` until now: R's word never returns to a retired state, and after this
        // removal's delete no parent routes to R again (a frozen page's term is not re-posted),
        // so no withdrawal can follow. Otherwise this thread is a stale helper: R was
        // withdrawn (and maybe changed and removed again) while it searched, and merging its
        // old `frozen` state into the left page would bring back an old copy of R (keys,
        // bounds and, for an index page, child links). A delete it posted on a withdrawn R is
        // healed like an unposted split: the left page's side link leads to R, and the next
        // thread that follows it re-posts R's index term.
        if self.table.read(r, guard) != r_state {
            return false;
        }
        // Step 3: the node merge delta on the page left of R.
        loop {
            let mut path = Path::new();
            let Some((left, l_state, l_node)) =
                self.descend(Target::Below(Some(low)), level, &mut path, guard)
            else {
                return false;
            };
            let (l_high, l_side) = l_node.bounds();
            if l_side != r || l_high != Some(low) {
                return false; // the left page covers R's keys already: merged by another thread
            }
            let record_count = l_node.record_count + frozen.record_count;
            let kind = Kind::NodeMerge(NodeMerge::new(low, frozen, high, side_link));
            let delta = Owned::new(Node::delta(l_node, record_count, kind));
            self.stats.cas_attempts.incr();
            match self.table.update_d(left, l_state, delta, guard) {
                Ok(installed) => {
                    self.stats.merges.incr();
                    pause_point("merge:node-merge-installed");
                    // Step 4: no current state leads to R now; its remove node delta and PID
                    // are reclaimed after the epoch (its frozen state belongs to the left page).
                    self.table.free(r, guard);
                    let merged = node_ref(installed);
                    if merged.record_count as usize > self.config.max_records_per_page {
                        self.split(left, installed, merged, path, guard);
                    } else {
                        self.consolidate_if_long(left, installed, merged, guard);
                    }
                    self.after_index_delete(low, level + 1, guard);
                    return true;
                }
                Err((abandoned, _)) => {
                    drop(abandoned);
                    self.stats.cas_failures.incr();
                }
            }
        }
    }

    /// The parent at `level` that lost the separator `low` may now merge, or collapse if root.
    fn after_index_delete(&self, low: &[u8], level: u32, guard: &Guard) {
        let mut path = Path::new();
        if let Some((parent, p_state, p_node)) =
            self.descend(Target::At(low), level, &mut path, guard)
        {
            if (p_node.record_count as usize) < self.config.merge_threshold
                || p_node.record_count == 1
            {
                self.merge(parent, p_state, p_node, guard);
            }
        }
    }

    /// Freezes the root if it is an index page with one child and no pending split, then
    /// collapses it.
    fn collapse_root<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) {
        if node.level == 0
            || node.record_count != 1
            || node.bounds().0.is_some()
            || self.root_pid(guard) != pid
        {
            return;
        }
        let delta = Owned::new(Node::delta(node, 0, Kind::RemoveNode));
        self.stats.cas_attempts.incr();
        match self.table.update_d(pid, state, delta, guard) {
            Ok(installed) => {
                pause_point("merge:root-remove-installed");
                self.complete_root_collapse(pid, installed, node, guard);
            }
            Err((abandoned, _)) => {
                drop(abandoned);
                self.stats.cas_failures.incr();
            }
        }
    }

    /// Swaps the root PID from the frozen root `r` to its only child and frees `r`.
    fn complete_root_collapse(
        &self,
        r: Pid,
        r_state: Shared<'_, Node>,
        frozen: &Node,
        guard: &Guard,
    ) -> bool {
        let root_word = self.root_word();
        if root_word_pid(root_word) != r {
            return false; // another thread swapped the root (and frees `r`)
        }
        let entries = view(frozen);
        debug_assert_eq!(entries.records.len(), 1, "a collapsing root has one child");
        let Some(&(_, child)) = entries.records.first() else {
            return false;
        };
        self.stats.cas_attempts.incr();
        if !self.set_root(root_word, decode_pid(child)) {
            self.stats.cas_failures.incr();
            return false;
        }
        self.stats.root_collapses.incr();
        // Nothing absorbs the old root's frozen state, so it is retired with its remove delta.
        debug_assert!(std::ptr::eq(
            r_state.as_raw(),
            self.table.read(r, guard).as_raw()
        ));
        self.table.free(r, guard);
        self.table
            .retire(Shared::from(frozen as *const Node), guard);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::BasePage;
    use crate::{counter_names, BwTreeConfig};
    use forest_core::{Index, Order};
    use std::ops::{Bound, ControlFlow};

    /// Keys 0..40 in pages of 16 under one root, merging only by hand (merge threshold 0) and
    /// consolidating late, so the tests freeze and split pages themselves.
    fn two_level_tree_of_40_keys() -> BwTree {
        let tree = BwTree::with_config(BwTreeConfig {
            max_records_per_page: 16,
            consolidate_threshold: 8,
            merge_threshold: 0,
            read_consolidate_threshold: 8,
        })
        .expect("valid config");
        for i in 0..40u32 {
            tree.insert(&i.to_be_bytes(), b"v").expect("insert");
        }
        tree
    }

    // Goal: the withdrawal path of a merge (the parent split at the frozen page's low key after
    // its remove node delta, making it a first child) restores the page and loses nothing.
    // Method: freeze a middle child of the root by hand, split the root at exactly that
    // child's low key by hand (as a racing split would), then complete the merge.
    #[test]
    fn merge_is_withdrawn_when_the_page_becomes_a_first_child() {
        let tree = two_level_tree_of_40_keys();
        let guard = &crossbeam_epoch::pin();
        let root = tree.root_pid(guard);
        let (root_state, root_node) = read_node(&tree.table, root, guard).expect("root");
        assert_eq!(root_node.level, 1, "a two-level tree");
        let entries = view(root_node);
        assert!(entries.records.len() >= 3, "the root has several children");
        let (r_low, r_pid) = (entries.records[1].0, decode_pid(entries.records[1].1));
        // Step 1 by hand: freeze R.
        let (r_state, r_node) = read_node(&tree.table, r_pid, guard).expect("child");
        let remove = Owned::new(Node::delta(r_node, 0, Kind::RemoveNode));
        assert!(tree.table.update_d(r_pid, r_state, remove, guard).is_ok());
        // A racing split of the root at R's low key.
        let right = BasePage::build(
            r_low,
            None,
            crate::delta::NO_PID,
            entries.records[1..].iter().copied(),
        );
        let q = tree.table.allocate();
        tree.table
            .install_new(q, Owned::new(Node::base(1, right)), guard);
        let split = Kind::Split {
            separator: r_low.into(),
            side_link: q,
        };
        let delta = Owned::new(Node::delta(root_node, 1, split));
        assert!(tree.table.update_d(root, root_state, delta, guard).is_ok());
        assert!(tree.complete_split(Path::new(), root, 1, r_low, q, guard));
        // Completing the merge finds R a first child and withdraws it.
        assert!(!tree.complete_merge(r_pid, guard));
        let (_, restored) = read_node(&tree.table, r_pid, guard).expect("R is still a page");
        assert!(!matches!(restored.kind, Kind::RemoveNode));
        let stats = tree.stats();
        assert_eq!(stats.counter(counter_names::WITHDRAWN_MERGES), Some(1));
        assert_eq!(stats.key_count, 40);
        let mut keys = Vec::new();
        tree.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            &mut |k, _| {
                keys.push(k.to_vec());
                ControlFlow::Continue(())
            },
        );
        let want: Vec<Vec<u8>> = (0..40u32).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(keys, want);
        let mut out = Vec::new();
        assert!(want.iter().all(|k| tree.get(k, &mut out)));
    }

    // Goal (regression): a stale helper of a merge that was withdrawn must not merge the page's
    // old frozen state into its left sibling once the page has changed and been removed again.
    // Method: freeze R by hand; a helper completing that merge is paused right after its
    // frozen check; the merge is withdrawn (root split at R's low key by hand), R's low key is
    // removed, the split-off root page is merged back so R is a middle child again, R is frozen
    // again and a second helper is paused after posting its index term delete; the stale
    // helper goes first. The removed key must stay removed and every other key stay once.
    #[cfg(feature = "pause-points")]
    #[test]
    fn stale_helper_of_a_withdrawn_merge_does_not_merge_an_old_copy() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Barrier};

        let tree = two_level_tree_of_40_keys();
        let guard = &crossbeam_epoch::pin();
        let root = tree.root_pid(guard);
        let (root_state, root_node) = read_node(&tree.table, root, guard).expect("root");
        assert_eq!(root_node.level, 1, "a two-level tree");
        let entries = view(root_node);
        assert!(entries.records.len() >= 3, "the root has several children");
        let (r_low, r_pid) = (entries.records[1].0, decode_pid(entries.records[1].1));
        let freeze = |pid: Pid| {
            let (state, node) = read_node(&tree.table, pid, guard).expect("a live page");
            let remove = Owned::new(Node::delta(node, 0, Kind::RemoveNode));
            assert!(tree.table.update_d(pid, state, remove, guard).is_ok());
        };
        // Two pauses: the stale helper after its frozen check, the second helper after its
        // index term delete.
        let barriers: [Arc<Barrier>; 4] = std::array::from_fn(|_| Arc::new(Barrier::new(2)));
        let armed = [
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(true)),
        ];
        {
            let (b, armed) = (barriers.clone(), armed.clone());
            crate::smo::set_pause_hook(Some(Arc::new(move |point| {
                let which = match (std::thread::current().name(), point) {
                    (Some("stale"), "merge:helper-checked-frozen") => 0,
                    (Some("second"), "merge:index-term-delete-installed") => 1,
                    _ => return,
                };
                if armed[which].swap(false, Ordering::SeqCst) {
                    b[2 * which].wait();
                    b[2 * which + 1].wait();
                }
            })));
        }
        std::thread::scope(|scope| {
            freeze(r_pid);
            let stale = std::thread::Builder::new()
                .name("stale".into())
                .spawn_scoped(scope, || {
                    tree.complete_merge(r_pid, &crossbeam_epoch::pin())
                })
                .expect("spawn");
            barriers[0].wait(); // the stale helper is paused with R's first remove delta
                                // The merge is withdrawn: the root splits at R's low key, R becomes a first child.
            let right = BasePage::build(
                r_low,
                None,
                crate::delta::NO_PID,
                entries.records[1..].iter().copied(),
            );
            let q = tree.table.allocate();
            tree.table
                .install_new(q, Owned::new(Node::base(1, right)), guard);
            let split = Kind::Split {
                separator: r_low.into(),
                side_link: q,
            };
            let delta = Owned::new(Node::delta(root_node, 1, split));
            assert!(tree.table.update_d(root, root_state, delta, guard).is_ok());
            assert!(tree.complete_split(Path::new(), root, 1, r_low, q, guard));
            assert!(!tree.complete_merge(r_pid, guard), "withdrawn");
            // R changes, then becomes a middle child again (Q merged back) and is removed again.
            assert!(tree.remove(r_low));
            freeze(q);
            assert!(
                tree.complete_merge(q, guard),
                "Q merged back into the old root"
            );
            freeze(r_pid);
            let second = std::thread::Builder::new()
                .name("second".into())
                .spawn_scoped(scope, || {
                    tree.complete_merge(r_pid, &crossbeam_epoch::pin())
                })
                .expect("spawn");
            barriers[2].wait(); // the second helper posted R's index term delete
            barriers[1].wait(); // release the stale helper first
            let stale_merged = stale.join().expect("stale helper");
            barriers[3].wait();
            let second_merged = second.join().expect("second helper");
            assert!(
                !stale_merged,
                "a stale helper must not complete a merge it did not see through"
            );
            assert!(second_merged, "the second merge completes");
        });
        crate::smo::set_pause_hook(None);
        let mut out = Vec::new();
        assert!(!tree.get(r_low, &mut out), "the removed key stays removed");
        let mut keys = Vec::new();
        tree.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Order::Ascending,
            &mut |k, _| {
                keys.push(k.to_vec());
                ControlFlow::Continue(())
            },
        );
        let want: Vec<Vec<u8>> = (0..40u32)
            .map(|i| i.to_be_bytes().to_vec())
            .filter(|k| k[..] != *r_low)
            .collect();
        assert_eq!(keys, want);
        assert!(want.iter().all(|k| tree.get(k, &mut out)));
        assert_eq!(tree.stats().key_count, 39);
    }
}
