//! Node split (BzTree §5.2, Fig. 3) and parent overflow.
//!
//! Preparation: N is frozen (1-word PMwCAS, `consolidate.rs`); its live records are cut at a
//! separator `k` that balances their bytes; N′ gets the keys `<= k`, the new sibling O the keys
//! `> k`; P′ is P with N's child pointer replaced by N′ and the record `(k, O)` added.
//! Installation: one PMwCAS that freezes P, swaps G's child pointer from P to P′ and bumps
//! G's status (3 words); on failure the new nodes are freed at once (never seen).
//!
//! Paper-silent, decided here:
//! - Root split: when N (or an overflowing ancestor) is the root, a new root with the two
//!   halves is installed by a PMwCAS on the root word (a pool client word).
//! - Parent overflow: when P′ passes the node size, it is split in two as well (its middle
//!   separator moves up) and G′ is built the same way, up the tree, all in the same PMwCAS,
//!   which freezes every replaced ancestor (§7.2: a split "up to the great-grandparent" is one
//!   PMwCAS). An ancestor splits when the descriptor, counted exactly (`pmwcas_with`: a
//!   target swapping a retired node for a new one is one entry, other retired and new nodes
//!   pair up in memory-only entries), keeps room for the cheapest close above it: the new
//!   root, or the next ancestor's freeze, retirement, new version and swap. Otherwise it is
//!   built oversized (a node's size is in its header). Session 20: the former fixed bound
//!   (7 entries per level, nodes counted one entry each) never let a root split follow a
//!   level-1 split, so at 1 M keys the root grew to 1 076 children (25 KiB); now a split
//!   reaching the root takes 9 of 14 entries at height 3, 12 at height 4.

use forest_core::Result;
use forest_pmwcas::{Guard, Persist};

use crate::consolidate::Plan;
use crate::node::{internal_bytes, LiveRecord, Separator};
use crate::{BzTree, Path, Target};

/// Stand-ins for the nodes of a hypothetical close (`BzTree::closes_after_split`): never
/// chunk offsets (those are 64-aligned), all distinct.
const STAND_IN: [u64; 3] = [u64::MAX - 8, u64::MAX - 16, u64::MAX - 24];

impl<P: Persist> BzTree<P> {
    /// Splits the frozen leaf `path.leaf` whose live records are `live` (at least two).
    pub(crate) fn split(
        &self,
        path: &Path,
        key: &[u8],
        live: &[LiveRecord<'_>],
        need: u64,
        guard: &Guard,
    ) -> Result<()> {
        debug_assert!(live.len() >= 2);
        let total: u64 = live.iter().map(LiveRecord::node_bytes).sum();
        let mut acc = 0;
        let mut mid = 0;
        for (i, r) in live.iter().enumerate() {
            acc += r.node_bytes();
            mid = i;
            if acc * 2 >= total {
                break;
            }
        }
        let mid = mid.min(live.len() - 2);
        let mut plan = Plan::default();
        let Some(left) = self.build_leaf(&live[..=mid], need) else {
            return Err(self.heap_full());
        };
        plan.fresh.push(left);
        let Some(right) = self.build_leaf(&live[mid + 1..], need) else {
            self.discard_plan(plan);
            return Err(self.heap_full());
        };
        plan.fresh.push(right);
        plan.retire.push(path.leaf);
        let Some(at) = self.locate(path, key, guard) else {
            self.discard_plan(plan);
            return Ok(());
        };
        let repl = vec![(&[][..], left), (live[mid].key, right)];
        match self.replace_node(&at, at.len, path.leaf, repl, &mut plan, guard) {
            Ok(true) => {}
            Ok(false) => {
                self.discard_plan(plan);
                return Ok(());
            }
            Err(e) => {
                self.discard_plan(plan);
                return Err(e);
            }
        }
        forest_core::pause::pause_point("split:prepared");
        if self.run_plan(plan, guard) == crate::Outcome::Succeeded {
            self.counters.splits.incr();
        }
        Ok(())
    }

    /// Adds to `plan` the replacement of `old` (the node under `path.nodes[depth - 1]`, the
    /// root if `depth` is 0) by the nodes of `repl` (one: a swap in place; two: a split that
    /// adds a separator to the parent, which is rebuilt, split again if it overflows, and so
    /// on up). Returns false if the path went stale (a parent frozen or no longer pointing to
    /// the node).
    pub(crate) fn replace_node<'a>(
        &'a self,
        path: &Path,
        mut depth: usize,
        mut old: u64,
        mut repl: Vec<Separator<'a>>,
        plan: &mut Plan,
        guard: &Guard,
    ) -> Result<bool> {
        loop {
            if repl.len() == 1 {
                return Ok(self.swap_in_parent(path, depth, old, repl[0].1, plan, guard));
            }
            debug_assert_eq!(repl.len(), 2);
            if depth == 0 {
                let root = self
                    .build_internal(&repl, self.level(old) + 1)
                    .ok_or_else(|| self.heap_full())?;
                plan.fresh.push(root);
                plan.targets.push(Target::new(self.root_off, old, root));
                return Ok(true);
            }
            let (parent, slot) = path.nodes[depth - 1];
            let slot = slot as usize;
            let ps = self.status(parent, guard);
            if ps.is_frozen() || self.child(parent, slot as u64, guard) != old {
                return Ok(false);
            }
            let entries = self.internal_entries(parent, guard);
            let mut new: Vec<Separator<'a>> = Vec::with_capacity(entries.len() + 1);
            new.extend_from_slice(&entries[..slot]);
            new.push((entries[slot].0, repl[0].1));
            new.extend_from_slice(&repl[1..]);
            new.extend_from_slice(&entries[slot + 1..]);
            plan.targets
                .push(Target::new(Self::status_off(parent), ps.0, ps.frozen().0));
            plan.retire.push(parent);
            let level = self.level(parent);
            let overflow = internal_bytes(&new) > self.config.node_size as u64 && new.len() >= 4;
            if overflow && self.closes_after_split(plan, path, depth - 1, parent) {
                let m = new.len() / 2;
                let a = self
                    .build_internal(&new[..m], level)
                    .ok_or_else(|| self.heap_full())?;
                plan.fresh.push(a);
                let b = self
                    .build_internal(&new[m..], level)
                    .ok_or_else(|| self.heap_full())?;
                plan.fresh.push(b);
                repl = vec![(&[][..], a), (new[m].0, b)];
            } else {
                let p2 = self
                    .build_internal(&new, level)
                    .ok_or_else(|| self.heap_full())?;
                plan.fresh.push(p2);
                repl = vec![(&[][..], p2)];
            }
            old = parent;
            depth -= 1;
        }
    }

    /// Whether `plan`, with `parent` (the node under `path.nodes[depth - 1]`, the root if
    /// `depth` is 0) split in two, still fits one descriptor once closed at the next level
    /// the cheapest way: a new root over the two halves, or the grandparent rebuilt without
    /// a split (frozen, retired, its new version swapped into its own parent).
    fn closes_after_split(&self, plan: &Plan, path: &Path, depth: usize, parent: u64) -> bool {
        let mut p = plan.clone();
        p.fresh.extend_from_slice(&STAND_IN[..2]);
        if depth == 0 {
            p.fresh.push(STAND_IN[2]);
            p.targets
                .push(Target::new(self.root_off, parent, STAND_IN[2]));
        } else {
            let (g, _) = path.nodes[depth - 1];
            p.targets.push(Target::new(Self::status_off(g), 0, 0));
            p.retire.push(g);
            p.fresh.push(STAND_IN[2]);
            // Into g's parent: the root word, or a child word and that parent's status.
            p.targets.push(Target::new(0, g, STAND_IN[2]));
            if depth > 1 {
                p.targets.push(Target::new(0, 0, 0));
            }
        }
        p.exact_entries() <= Self::ENTRIES
    }
}
