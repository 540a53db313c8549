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
//!    Then the commit (CAS on R's word): the remove node delta is replaced by a committed one.
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
//! frozen state is put back with a CAS and the remove node delta retired.
//!
//! The commit rule (§IV-C treats an SMO as a system transaction that a thread meeting it must
//! "complete and commit"): whether a merge is withdrawn or completed is decided by one CAS on
//! R's word, from the uncommitted remove node delta. A withdrawal swaps it back to the frozen
//! state; a commit (end of step 2, after the parent update, before step 3) swaps it to a committed
//! remove node delta over the same frozen state. Only one of the two can succeed, so the
//! frozen state gets one owner: R again, or L's node merge delta. A committed R is never
//! withdrawn; helpers that meet it go straight to step 3, which needs no parent. A helper
//! commits only from the remove node delta it read before its parent update, so one that slept
//! through a withdrawal (and maybe a new removal) fails its CAS and does not merge the old
//! frozen state it holds. (Without this, a helper that found R a first child could withdraw
//! R after another helper, which found R a middle child again, had passed its check and
//! installed the node merge delta: both then owned the frozen state.)
//!
//! A tree dropped while a merge is begun and not completed (a thread panicked in between) gives
//! each frozen state no node merge delta owns back to its page, which frees it with the table.
//!
//! On an LSS (`smo_log.rs`) each CAS above is a system transaction, the commit included
//! ({merge commit on R}, after T2 and before T3 in the LSS), and R is frozen only in a state
//! its newest piece holds whole (`clean_state`): T3 names R's newest piece as what L absorbs, and a
//! frozen page is never flushed again.
//!
//! Other choices: R must be reached by its parent (its index term posted) and must not be its
//! parent's first child. A small first child (or leftmost page of a level) cannot merge left;
//! it absorbs its right sibling instead when the two fit in one page, so that deletes shrink
//! the tree everywhere. A root index page left with one child and no pending split is
//! collapsed once that child has no side link (no pending split or merge to its right, whose
//! helpers would need the root's level): a remove node delta freezes it, the root PID is
//! swapped to the child by a CAS, and the old root is freed.

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_core::pause::pause_point;
use forest_llama::Pid;

use crate::base_page::{decode_pid, NO_PID};
use crate::consolidate::view;
use crate::delta::{Kind, Node, NodeMerge};
use crate::flush::PageFlush;
use crate::gc::node_ref;
use crate::get::{route, Path, Route, Target};
use crate::smo_log::{newest_piece, SmoDelta, Step, StepLog};
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
        if matches!(node.kind, Kind::RemoveNode { .. }) {
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
        if level == 0 && !self.merge_fits_left(pid, node, parent, low, guard) {
            return;
        }
        // On an LSS, R is frozen only in a state its newest piece holds whole (module doc).
        let Some((state, node)) = self.clean_state(pid, state, node, guard) else {
            return;
        };
        let delta = Owned::new(Node::delta(node, 0, Kind::RemoveNode { committed: false }));
        self.stats.merge_attempts.incr();
        self.stats.cas_attempts.incr();
        // On an LSS, T1 of the merge (`smo_log.rs`): the remove-node delta on R.
        match self.remove_node_step(pid, state, node, delta, guard) {
            Step::Won(installed) => {
                self.count_delta(node_ref(installed));
                pause_point("merge:remove-node-installed");
                self.complete_merge(pid, guard);
            }
            Step::Lost((abandoned, _)) => {
                drop(abandoned);
                self.stats.failed_merges.incr();
                self.stats.cas_failures.incr();
            }
            // Refused (a unit of one PID larger than a segment): R stays unfrozen.
            Step::NotAttempted => self.stats.failed_merges.incr(),
        }
    }

    /// Hysteresis for leaves (insert.rs `page_limits`): whether leaf `r` (state `node`, low
    /// key `low`) and its left sibling under `parent` fit in one page by both pages' split
    /// limits, so the merge does not make a page that splits again. False also when the
    /// child left of `low` is not R's direct left sibling (a split of it is pending): the
    /// next write retries once that split is completed.
    fn merge_fits_left(
        &self,
        r: Pid,
        node: &Node,
        parent: &Node,
        low: &[u8],
        guard: &Guard,
    ) -> bool {
        let Route::Child(left) = route(parent, Target::Below(Some(low))) else {
            return false;
        };
        let Some((_, l_node)) = self.read_node(left, guard) else {
            return false;
        };
        let (l_high, l_side) = l_node.bounds();
        if l_side != r || l_high != Some(low) {
            return false;
        }
        let total = l_node.record_count as usize + node.record_count as usize;
        total <= self.page_limits(l_node).0.min(self.page_limits(node).0)
    }

    /// Merges the right sibling of the page at `node` into it when both fit in one page.
    fn absorb_right(&self, node: &Node, guard: &Guard) {
        let (_, side_link) = node.bounds();
        if side_link == NO_PID {
            return;
        }
        let Some((r_state, r_node)) = self.read_node(side_link, guard) else {
            return;
        };
        let total = r_node.record_count as usize + node.record_count as usize;
        if total <= self.page_limits(node).0.min(self.page_limits(r_node).0) {
            self.merge_into_left(side_link, r_state, r_node, false, guard);
        }
    }

    /// Completes the merge of frozen page `r` (steps 2-4 above), or its withdrawal. Returns
    /// whether this call installed the node merge delta (or swapped the root).
    pub(crate) fn complete_merge(&self, r: Pid, guard: &Guard) -> bool {
        let Some((r_state, r_node)) = self.read_node(r, guard) else {
            return false; // freed: the merge is complete
        };
        let Kind::RemoveNode { committed } = r_node.kind else {
            return false; // withdrawn
        };
        let frozen = r_node
            .next()
            .expect("a remove node delta has the frozen state below it");
        let level = r_node.level;
        let low: &[u8] = frozen.base_page().low();
        let (high, side_link) = frozen.bounds();
        if low.is_empty() {
            return self.complete_root_collapse(r, r_state, frozen, guard);
        }
        if !committed {
            if !self.delete_index_term(r, r_state, frozen, guard) {
                return false;
            }
            // The commit that ends step 2 (module doc): fails if R was withdrawn since `r_state` was
            // read (a retired state never comes back while we are pinned), so a stale helper,
            // whose delete may belong to an earlier removal, never merges an old copy of R; a
            // delete it posted on a withdrawn R is healed like an unposted split (the left
            // page's side link leads to R, and the next thread that follows it re-posts R's
            // index term).
            let commit = Owned::new(Node::delta(frozen, 0, Kind::RemoveNode { committed: true }));
            self.stats.cas_attempts.incr();
            // On an LSS, the commit is a step of its own (`smo_log.rs`): {merge commit on R},
            // after T2 in the LSS (this thread saw T2's result) and before T3.
            let step = self.smo_step(
                || StepLog::default().delta(r, newest_piece(frozen), SmoDelta::MergeCommit),
                &[],
                || self.table.update_r(r, r_state, commit, guard),
                guard,
            );
            match step {
                Step::Won(_) => {}
                Step::Lost((abandoned, _)) => {
                    drop(abandoned);
                    self.stats.cas_failures.incr();
                    return false; // withdrawn, or committed by another helper that goes on
                }
                // Refused (a unit of no fields larger than a segment): R stays uncommitted.
                Step::NotAttempted => return false,
            }
            pause_point("merge:committed");
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
            // On an LSS, T3 of the merge: the node-merge delta on L naming R's newest piece,
            // and Free R. Step 4, once won, inside the step (`smo_step_then`): no current
            // state leads to R now; its remove node delta and PID are reclaimed after the
            // epoch (its frozen state belongs to the left page).
            let step = self.smo_step_then(
                || {
                    StepLog::default()
                        .delta(
                            left,
                            newest_piece(l_node),
                            SmoDelta::NodeMerge {
                                separator: low.to_vec(),
                                right: r,
                                right_piece: newest_piece(frozen),
                                high: high.map(<[u8]>::to_vec),
                                side_link,
                            },
                        )
                        .freed(r)
                },
                &[],
                || self.table.update_d(left, l_state, delta, guard),
                |_| self.free_page(r, guard),
                guard,
            );
            match step {
                Step::Won(installed) => {
                    self.count_delta(node_ref(installed));
                    self.stats.merges.incr();
                    pause_point("merge:node-merge-installed");
                    let merged = node_ref(installed);
                    if merged.record_count as usize > self.page_limits(merged).0 {
                        self.split(left, installed, merged, path, guard);
                    } else {
                        self.consolidate_if_long(left, installed, merged, guard);
                    }
                    self.after_index_delete(low, level + 1, guard);
                    return true;
                }
                Step::Lost((abandoned, _)) => {
                    drop(abandoned);
                    self.stats.cas_failures.incr();
                }
                // Refused (a unit of two keys larger than a segment): R stays frozen and
                // committed; the next visitor retries step 3.
                Step::NotAttempted => return false,
            }
        }
    }

    /// Step 2 of the merge of `r`, frozen by `r_state` above `frozen`: posts the index term
    /// delete on the parent, or sees it posted. False if R was withdrawn (by this thread, if
    /// R became a first child) or changed meanwhile, or has no parent level.
    fn delete_index_term(
        &self,
        r: Pid,
        r_state: Shared<'_, Node>,
        frozen: &Node,
        guard: &Guard,
    ) -> bool {
        let level = frozen.level;
        let low: &[u8] = frozen.base_page().low();
        loop {
            if self.table.read(r, guard) != r_state {
                return false; // withdrawn or committed by another thread meanwhile
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
                        // The parent split at R's low key after the remove: withdraw it, by a
                        // CAS from the uncommitted remove node delta (fails once committed).
                        pause_point("merge:withdrawal-decided");
                        if self.table.restore(
                            r,
                            r_state,
                            Shared::from(frozen as *const Node),
                            guard,
                        ) {
                            self.uncount_node(node_ref(r_state));
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
                    // On an LSS, T2 of the merge: the index-term delete on the parent.
                    let step = self.smo_step(
                        || {
                            StepLog::default().delta(
                                parent,
                                newest_piece(p_node),
                                SmoDelta::IndexTermDelete {
                                    separator: low.to_vec(),
                                },
                            )
                        },
                        &[],
                        || self.table.update_d(parent, p_state, delta, guard),
                        guard,
                    );
                    match step {
                        Step::Won(installed) => {
                            self.count_delta(node_ref(installed));
                            pause_point("merge:index-term-delete-installed");
                            return true;
                        }
                        Step::Lost((abandoned, _)) => {
                            // The parent changed; route again in its new state.
                            drop(abandoned);
                            self.stats.cas_failures.incr();
                        }
                        // Refused (a unit of one key larger than a segment): R stays frozen,
                        // uncommitted; the next visitor retries step 2.
                        Step::NotAttempted => return false,
                    }
                }
                Route::Child(_) => return true, // another thread posted the delete
                // `descend` stopped at this state because it routes `low` to a child.
                Route::Right { .. } | Route::Removed | Route::Here => {
                    self.stats.restarts.incr();
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

    /// Freezes the root if it is an index page with one child and no pending split, and the
    /// child has no side link, then collapses it.
    ///
    /// A sole child with a side link has a pending SMO to its right: its own split (not yet
    /// posted) or the merge of its right sibling R, whose separator is deleted but whose node
    /// merge delta is not yet installed. Collapsing then would leave an uncommitted R without
    /// a parent level, so no helper could finish its parent update and, R being frozen,
    /// `grow_root` refuses to put a level back: descents to R's keys would restart until the
    /// thread that posted the delete went on. The child is read after `state` was, and the
    /// freeze is a CAS from `state`, so no delete or index term was posted in between; the
    /// merge or split completes first, and its thread offers the collapse again
    /// (`after_index_delete`).
    ///
    /// On an LSS the root is frozen only in a state its newest piece holds whole
    /// (`clean_state`, as a merge's R): a checkpoint names a frozen page's newest piece, and
    /// the index-term delete that left the root one child is a unit below that checkpoint's
    /// S (review rev-smo F4).
    fn collapse_root<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) {
        let collapsible = |node: &Node| {
            node.level != 0
                && node.record_count == 1
                && node.bounds().0.is_none()
                && self.root_pid(guard) == pid
        };
        if !collapsible(node) {
            return;
        }
        let Some((state, node)) = self.clean_state(pid, state, node, guard) else {
            return;
        };
        if !collapsible(node) {
            return;
        }
        let Some(&(_, child)) = view(node).records.first() else {
            return;
        };
        match self.read_node(decode_pid(child), guard) {
            Some((_, child)) if child.bounds().1 == NO_PID => {}
            _ => return,
        }
        let delta = Owned::new(Node::delta(node, 0, Kind::RemoveNode { committed: false }));
        self.stats.cas_attempts.incr();
        match self.remove_node_step(pid, state, node, delta, guard) {
            Step::Won(installed) => {
                self.count_delta(node_ref(installed));
                pause_point("merge:root-remove-installed");
                self.complete_root_collapse(pid, installed, node, guard);
            }
            Step::Lost((abandoned, _)) => {
                drop(abandoned);
                self.stats.cas_failures.incr();
            }
            Step::NotAttempted => {}
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
        let child = decode_pid(child);
        // On an LSS: {the root word names the child, Free R}; R is freed in memory inside
        // the step (`smo_step_then`, review rev-recov F3).
        let step = self.smo_step_then(
            || {
                StepLog::default()
                    .delta(child, None, SmoDelta::Root)
                    .freed(r)
            },
            &[],
            || self.set_root(root_word, child).then_some(()).ok_or(()),
            |_| {
                debug_assert!(std::ptr::eq(
                    r_state.as_raw(),
                    self.table.read(r, guard).as_raw()
                ));
                self.free_page(r, guard);
            },
            guard,
        );
        match step {
            Step::Won(()) => {}
            Step::Lost(()) => {
                self.stats.cas_failures.incr();
                return false;
            }
            Step::NotAttempted => return false,
        }
        self.stats.root_collapses.incr();
        // Nothing absorbs the old root's frozen state, so it is retired with its remove delta.
        self.uncount_state(frozen);
        self.table
            .retire(Shared::from(frozen as *const Node), guard);
        true
    }
}

impl BwTree {
    /// On an LSS: page `pid` (read at `state`) flushed until its newest piece holds its state
    /// whole (a flush finds it clean, or installed its delta right over it), and that state; `None` if it is frozen, gone or keeps changing, or the flush fails (the
    /// merge is then left to a later writer). In memory: `state` as it is.
    ///
    /// Why a merge's R must be clean when frozen: a frozen page is never flushed, T3 names
    /// R's newest piece as the contents L absorbs, and a checkpoint names it as R's state; so
    /// that piece must hold every write at or below ESL and every SMO change of R (a split,
    /// an index term, a node merge it absorbed, each of which makes the next flush an image).
    /// Writes above ESL stay out of pieces, and the store's WAL holds them.
    fn clean_state<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) -> Option<(Shared<'g, Node>, &'g Node)> {
        let Some(storage) = &self.storage else {
            return Some((state, node));
        };
        for _ in 0..3 {
            let (before, _) = self.read_node(pid, guard)?;
            match self.flush_page_inner(pid, &storage.lss) {
                Ok(PageFlush::Clean) => {
                    // The flush read a state between `before` and `after`: if they are one,
                    // that state is clean.
                    let (after, after_node) = self.read_node(pid, guard)?;
                    return (after == before).then_some((after, after_node));
                }
                Ok(PageFlush::Flushed { .. }) => {
                    // Its flush delta right over `before`: that piece holds `before` whole (a
                    // later flush of a chain with a structure delta would be an image again,
                    // never Clean).
                    let (after, after_node) = self.read_node(pid, guard)?;
                    if matches!(after_node.kind, Kind::Flush(_, false))
                        && after_node
                            .next()
                            .is_some_and(|n| std::ptr::eq(n, node_ref(before)))
                    {
                        return Some((after, after_node));
                    }
                }
                Ok(PageFlush::Lost { .. }) => {}
                Ok(PageFlush::Frozen | PageFlush::Gone) | Err(_) => return None,
            }
        }
        None
    }

    /// The remove-node delta's CAS on `pid` at `state` as a step of its own (T1 of a merge
    /// or of a root collapse, `smo_log.rs`).
    fn remove_node_step<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &Node,
        delta: Owned<Node>,
        guard: &'g Guard,
    ) -> Step<Shared<'g, Node>, (Owned<Node>, Shared<'g, Node>)> {
        self.smo_step(
            || StepLog::default().delta(pid, newest_piece(node), SmoDelta::RemoveNode),
            &[],
            || self.table.update_d(pid, state, delta, guard),
            guard,
        )
    }

    /// Gives every frozen state that no node merge delta owns back to its page, so that the
    /// table frees it with the page when it drops. For the tree's `Drop`: no operation runs
    /// then, so a page still frozen has no node merge delta over its frozen state (the thread
    /// that installs one frees the page in the same call); the search for an owning node merge
    /// delta covers a thread that panicked in between.
    pub(crate) fn give_back_frozen_states(&mut self) {
        let guard = &crossbeam_epoch::pin();
        let mut frozen_pages = Vec::new();
        self.table.for_each_state(guard, |pid, state| {
            if matches!(node_ref(state).kind, Kind::RemoveNode { .. }) {
                frozen_pages.push((pid, state));
            }
        });
        if frozen_pages.is_empty() {
            return;
        }
        let mut owned = std::collections::HashSet::new();
        self.table.for_each_state(guard, |_, state| {
            collect_merged_states(node_ref(state), &mut owned);
        });
        for (pid, state) in frozen_pages {
            let frozen = node_ref(state)
                .next()
                .expect("a remove node delta has the frozen state below it");
            let frozen: *const Node = frozen;
            if !owned.contains(&frozen) && self.table.restore(pid, state, frozen.into(), guard) {
                self.table.retire(state, guard);
            }
        }
    }
}

/// Adds to `owned` every state a node merge delta in `node`'s chain (and the chains it
/// reaches) points to.
fn collect_merged_states(node: &Node, owned: &mut std::collections::HashSet<*const Node>) {
    let mut current = Some(node);
    while let Some(n) = current {
        if let Kind::NodeMerge(merge) = &n.kind {
            if owned.insert(merge.right()) {
                collect_merged_states(merge.right(), owned);
            }
        }
        current = n.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page::BasePage;
    use crate::gc::read_node;
    use crate::{counter_names, BwTreeConfig};
    #[cfg(feature = "pause-points")]
    use forest_core::conformance::pause::{arm_gates, disarm, take_turn};
    use forest_core::{Index, Order};
    use std::ops::{Bound, ControlFlow};

    /// Keys 0..40 in pages of 16 under one root, merging only by hand (merge threshold 0) and
    /// consolidating late, so the tests freeze and split pages themselves.
    fn two_level_tree_of_40_keys() -> BwTree {
        two_level_tree(40)
    }

    /// Keys `0..count` in pages of 16 as above.
    fn two_level_tree(count: u32) -> BwTree {
        let tree = BwTree::with_config(BwTreeConfig {
            max_records_per_page: 16,
            consolidate_threshold: 8,
            merge_threshold: 0,
            read_consolidate_threshold: 8,
        })
        .expect("valid config");
        for i in 0..count {
            tree.insert(&i.to_be_bytes(), b"v").expect("insert");
        }
        tree
    }

    /// The second child of the (level 1) root: its low key and PID.
    fn second_child<'g>(tree: &BwTree, guard: &'g Guard) -> (&'g [u8], Pid) {
        let (_, root_node) = read_node(&tree.table, tree.root_pid(guard), guard).expect("root");
        assert_eq!(root_node.level, 1, "a two-level tree");
        let entries = view(root_node);
        assert!(entries.records.len() >= 2, "the root has a second child");
        (entries.records[1].0, decode_pid(entries.records[1].1))
    }

    /// Step 1 of a merge by hand: a remove node delta on `pid`.
    fn freeze(tree: &BwTree, pid: Pid, guard: &Guard) {
        let (state, node) = read_node(&tree.table, pid, guard).expect("a live page");
        let remove = Owned::new(Node::delta(node, 0, Kind::RemoveNode { committed: false }));
        assert!(tree.table.update_d(pid, state, remove, guard).is_ok());
    }

    /// Splits the (level 1) root at the separator `at` by hand, as a racing split would, and
    /// completes the split (a new root grows over both halves); returns the right half.
    fn split_root_by_hand(tree: &BwTree, at: &[u8], guard: &Guard) -> Pid {
        let root = tree.root_pid(guard);
        let (root_state, root_node) = read_node(&tree.table, root, guard).expect("root");
        let entries = view(root_node);
        let left = entries
            .records
            .iter()
            .position(|&(separator, _)| separator == at)
            .expect("`at` is a separator of the root");
        let right = BasePage::build(at, None, NO_PID, entries.records[left..].iter().copied());
        let q = tree.table.allocate();
        tree.table
            .install_new(q, Owned::new(Node::base(1, right)), guard);
        let split = Kind::Split {
            separator: at.into(),
            side_link: q,
        };
        let left = u32::try_from(left).expect("small");
        let delta = Owned::new(Node::delta(root_node, left, split));
        assert!(tree.table.update_d(root, root_state, delta, guard).is_ok());
        assert!(tree.complete_split(Path::new(), root, 1, at, q, guard));
        q
    }

    /// Checks that the tree holds exactly the keys `0..40` but `missing`, by scan and get.
    fn check_keys(tree: &BwTree, missing: Option<&[u8]>) {
        let want: Vec<Vec<u8>> = (0..40u32)
            .map(|i| i.to_be_bytes().to_vec())
            .filter(|k| Some(&k[..]) != missing)
            .collect();
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
        assert_eq!(keys, want);
        let mut out = Vec::new();
        assert!(want.iter().all(|k| tree.get(k, &mut out)));
        if let Some(missing) = missing {
            assert!(
                !tree.get(missing, &mut out),
                "the removed key stays removed"
            );
        }
        assert_eq!(tree.stats().key_count, want.len() as u64);
    }

    /// Runs `complete_merge(r)` on a thread named `name` within `scope`.
    #[cfg(feature = "pause-points")]
    fn complete_merge_on<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        name: &str,
        tree: &'scope BwTree,
        r: Pid,
    ) -> std::thread::ScopedJoinHandle<'scope, bool> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, move || {
                tree.complete_merge(r, &crossbeam_epoch::pin())
            })
            .expect("spawn")
    }

    // Goal: the withdrawal path of a merge (the parent split at the frozen page's low key after
    // its remove node delta, making it a first child) restores the page and loses nothing.
    // Method: freeze a middle child of the root by hand, split the root at exactly that
    // child's low key by hand (as a racing split would), then complete the merge.
    #[test]
    fn merge_is_withdrawn_when_the_page_becomes_a_first_child() {
        let tree = two_level_tree_of_40_keys();
        let guard = &crossbeam_epoch::pin();
        let (r_low, r_pid) = second_child(&tree, guard);
        freeze(&tree, r_pid, guard);
        split_root_by_hand(&tree, r_low, guard);
        // Completing the merge finds R a first child and withdraws it.
        assert!(!tree.complete_merge(r_pid, guard));
        let (_, restored) = read_node(&tree.table, r_pid, guard).expect("R is still a page");
        assert!(!matches!(restored.kind, Kind::RemoveNode { .. }));
        let stats = tree.stats();
        assert_eq!(stats.counter(counter_names::WITHDRAWN_MERGES), Some(1));
        check_keys(&tree, None);
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
        let _turn = take_turn();
        let tree = two_level_tree_of_40_keys();
        let guard = &crossbeam_epoch::pin();
        let (r_low, r_pid) = second_child(&tree, guard);
        let [stale_stop, second_stop] = arm_gates([
            ("merge:helper-checked-frozen", "stale"),
            ("merge:index-term-delete-installed", "second"),
        ]);
        std::thread::scope(|scope| {
            freeze(&tree, r_pid, guard);
            let stale = complete_merge_on(scope, "stale", &tree, r_pid);
            stale_stop.wait_paused(); // the stale helper is paused with R's first remove delta
            let q = split_root_by_hand(&tree, r_low, guard);
            assert!(!tree.complete_merge(r_pid, guard), "withdrawn");
            // R changes, then becomes a middle child again (Q merged back) and is removed again.
            assert!(tree.remove(r_low));
            freeze(&tree, q, guard);
            assert!(
                tree.complete_merge(q, guard),
                "Q merged back into the old root"
            );
            freeze(&tree, r_pid, guard);
            let second = complete_merge_on(scope, "second", &tree, r_pid);
            second_stop.wait_paused(); // the second helper posted R's index term delete
            stale_stop.release(); // the stale helper goes first
            let stale_merged = stale.join().expect("stale helper");
            second_stop.release();
            let second_merged = second.join().expect("second helper");
            assert!(
                !stale_merged,
                "a stale helper must not complete a merge it did not see through"
            );
            assert!(second_merged, "the second merge completes");
        });
        disarm();
        check_keys(&tree, Some(r_low));
    }

    // Goal (regression, issue 12 item 5): a merge is withdrawn or completed, never both. A
    // helper that found R a first child used to restore R's frozen state after another helper
    // (that found R a middle child again) had passed its re-check and installed the node merge
    // delta: the frozen state then had two owners (double free, lost writes).
    // Method: R frozen; the root split at R's low key by hand makes R a first child; a helper
    // decides to withdraw and is paused before its CAS; Q is merged back, so R is a middle
    // child again; a second helper completes the merge and is paused right after its node
    // merge delta; then the first helper goes on, then the second.
    #[cfg(feature = "pause-points")]
    #[test]
    fn a_merge_is_never_both_withdrawn_and_completed() {
        let _turn = take_turn();
        let tree = two_level_tree_of_40_keys();
        let guard = &crossbeam_epoch::pin();
        let (r_low, r_pid) = second_child(&tree, guard);
        let [withdrawer_stop, merger_stop] = arm_gates([
            ("merge:withdrawal-decided", "withdrawer"),
            ("merge:node-merge-installed", "merger"),
        ]);
        let (withdrawer_merged, merger_merged) = std::thread::scope(|scope| {
            freeze(&tree, r_pid, guard);
            let q = split_root_by_hand(&tree, r_low, guard);
            let withdrawer = complete_merge_on(scope, "withdrawer", &tree, r_pid);
            withdrawer_stop.wait_paused(); // it found R a first child, about to withdraw
            freeze(&tree, q, guard);
            assert!(
                tree.complete_merge(q, guard),
                "Q merged back into the old root"
            );
            let merger = complete_merge_on(scope, "merger", &tree, r_pid);
            merger_stop.wait_paused(); // R's keys are in its left sibling now
            withdrawer_stop.release();
            let withdrawer_merged = withdrawer.join().expect("withdrawer");
            merger_stop.release();
            (withdrawer_merged, merger.join().expect("merger"))
        });
        disarm();
        let withdrawn = tree.stats().counter(counter_names::WITHDRAWN_MERGES);
        if withdrawn != Some(0) && merger_merged {
            // R's frozen state has two owners: forget the tree so that this failure is
            // reported instead of a double free.
            std::mem::forget(tree);
            panic!("the merge was both withdrawn and completed (withdrawn: {withdrawn:?})");
        }
        assert!(!withdrawer_merged);
        assert!(merger_merged, "the merge completes");
        assert!(read_node(&tree.table, r_pid, guard).is_none(), "R is freed");
        check_keys(&tree, None);
    }

    // Goal (regression, issue 12 item 6): a root is not collapsed while its sole child's right
    // sibling is half merged (its separator deleted, the node merge delta not yet installed).
    // Collapsing then left the frozen page without a parent level: no helper could post or
    // see its parent update, and `grow_root` refuses a frozen right page, so every descent to
    // its keys restarted until the paused merger went on.
    // Method: a root over two leaves A and B; B frozen, its merger paused right after the
    // index term delete; the root, left with one child, is offered a collapse (as a late
    // `after_index_delete` would); then a reader of every key must finish while the merger
    // stays paused (time bound as a hang detector).
    #[cfg(feature = "pause-points")]
    #[test]
    fn no_root_collapse_over_a_half_merged_child() {
        const HANG_SECONDS: u64 = 30;
        let _turn = take_turn();
        let tree = two_level_tree(20);
        for i in 10..20u32 {
            // B keeps two keys, so A does not split again once it absorbed B.
            assert!(tree.remove(&i.to_be_bytes()));
        }
        let guard = &crossbeam_epoch::pin();
        let root = tree.root_pid(guard);
        let (_, root_node) = read_node(&tree.table, root, guard).expect("root");
        assert_eq!(view(root_node).records.len(), 2, "a root over two leaves");
        let (_, b_pid) = second_child(&tree, guard);
        let [merger_stop] = arm_gates([("merge:index-term-delete-installed", "merger")]);
        let (reader_finished, merger_merged) = std::thread::scope(|scope| {
            freeze(&tree, b_pid, guard);
            let merger = complete_merge_on(scope, "merger", &tree, b_pid);
            merger_stop.wait_paused(); // B's separator is deleted, its keys not yet in A
            let (root_state, root_node) = read_node(&tree.table, root, guard).expect("root");
            assert_eq!(root_node.record_count, 1, "the root has one child left");
            tree.merge(root, root_state, root_node, guard);
            let (done, finished) = std::sync::mpsc::channel();
            let tree = &tree;
            let reader = scope.spawn(move || {
                let mut out = Vec::new();
                for i in 0..10u32 {
                    assert!(tree.get(&i.to_be_bytes(), &mut out), "key {i}");
                }
                done.send(()).expect("the test waits");
            });
            let wait = std::time::Duration::from_secs(HANG_SECONDS);
            let reader_finished = finished.recv_timeout(wait).is_ok();
            merger_stop.release(); // (lets a livelocked reader finish too)
            reader.join().expect("reader");
            (reader_finished, merger.join().expect("merger"))
        });
        disarm();
        assert!(
            reader_finished,
            "readers livelocked for {HANG_SECONDS} s while the merger was paused"
        );
        assert!(!merger_merged, "the reader completed the merge");
        let stats = tree.stats();
        assert_eq!(stats.counter(counter_names::ROOT_COLLAPSES), Some(1));
        assert_eq!(
            stats.height, 1,
            "the root collapsed once the merge was done"
        );
        let mut out = Vec::new();
        assert!((0..10u32).all(|i| tree.get(&i.to_be_bytes(), &mut out)));
        assert_eq!(stats.key_count, 10);
    }
}
