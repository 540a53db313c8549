//! Node merge (BzTree §5.3) and the shrinking of the tree.
//!
//! A delete that leaves leaf N below `min_size` looks for a sibling under the same parent P
//! (footnote 4): the left one L if N's records fit in it without passing `max_size`, else the
//! right one; otherwise N stays underfull. A frozen sibling means another SMO runs there; the
//! merge is left for later (§5.4: it serializes after L's SMO). Preparation: a 2-word PMwCAS
//! freezes both; L′ gets both leaves' records and P′ drops the separator between them.
//! Installation as in a split: freeze P, swap G's child pointer to P′, bump G's status.
//!
//! Paper-silent, decided here:
//! - Internal merges: when P′ falls below `min_size` (or a leaf has no sibling because its
//!   parent has one child), P′ is merged with a sibling Q under G the same way (Q frozen in
//!   the same PMwCAS, the separator from G pulled down), up the tree while the descriptor has
//!   room, so the tree shrinks after mass deletes.
//! - Root collapse: a root left with a single child is replaced by that child (PMwCAS on the
//!   root word).

use forest_pmwcas::{Guard, Persist};

use crate::consolidate::Plan;
use crate::node::{internal_bytes, Separator, HEADER_BYTES};
use crate::{BzTree, Outcome, Path, Target};

/// Merges one delete may run (`merge_around`).
const MERGE_ROUNDS_MAX: usize = 4;

/// Entries merging one more internal level may add to a plan, with what the next level needs
/// to close it: the merged node, the sibling's and the grandparent's freezes and
/// retirements, then (worst) a new version of the next ancestor and its swap (2 words).
const MERGE_LEVEL_ENTRIES: usize = 8;

impl<P: Persist> BzTree<P> {
    /// Merges around the underfull leaf holding `key` while merges succeed (a few rounds: a
    /// leaf emptied while its siblings were full is absorbed by a later neighbor's merge).
    pub(crate) fn merge_around(&self, key: &[u8], guard: &Guard) {
        for _ in 0..MERGE_ROUNDS_MAX {
            let path = self.descend(key, false, guard);
            let s = self.status(path.leaf, guard);
            if path.len == 0 || s.is_frozen() || !self.underfull(path.leaf, s, guard) {
                return;
            }
            if !self.try_merge(&path, guard) {
                return;
            }
        }
    }

    /// Tries to merge the underfull leaf `path.leaf` (module doc); gives up quietly. Returns
    /// whether a merge was installed.
    pub(crate) fn try_merge(&self, path: &Path, guard: &Guard) -> bool {
        let n = path.leaf;
        let Some((parent, slot)) = path.parent() else {
            return false;
        };
        let ps = self.status(parent, guard);
        if ps.is_frozen() || self.child(parent, slot, guard) != n {
            return false;
        }
        let count = self.sorted_count(parent);
        if count < 2 {
            return self.merge_lonely_parent(path, guard);
        }
        let n_bytes = self.live_bytes(n, guard);
        let max = self.config.max_size as u64;
        let mut choice = None;
        let candidates = [slot.checked_sub(1), (slot + 1 < count).then_some(slot + 1)];
        for sib_slot in candidates.into_iter().flatten() {
            let sib = self.child(parent, sib_slot, guard);
            if self.status(sib, guard).is_frozen() {
                continue;
            }
            if self.live_bytes(sib, guard) + n_bytes - HEADER_BYTES <= max {
                choice = Some((sib, sib_slot));
                break;
            }
        }
        let Some((sib, sib_slot)) = choice else {
            return false;
        };
        let (ss, ns) = (self.status(sib, guard), self.status(n, guard));
        if ss.is_frozen() || ns.is_frozen() {
            return false;
        }
        let freeze = [
            Target::new(Self::status_off(sib), ss.0, ss.frozen().0),
            Target::new(Self::status_off(n), ns.0, ns.frozen().0),
        ];
        if self.pmwcas(guard, &freeze, &[]) != Outcome::Succeeded {
            return false;
        }
        let (left, left_slot, right, right_slot) = if sib_slot < slot {
            (sib, sib_slot, n, slot)
        } else {
            (n, slot, sib, sib_slot)
        };
        let mut records = self.live_records(left, guard);
        records.extend(self.live_records(right, guard));
        let mut plan = Plan::default();
        let Some(merged) = self.build_leaf(&records, 0) else {
            // Out of heap: the frozen leaves are consolidated by the next writers.
            return false;
        };
        plan.fresh.push(merged);
        plan.retire.extend([left, right]);
        let entries = self.internal_entries(parent, guard);
        let new: Vec<Separator<'_>> = entries
            .iter()
            .enumerate()
            .filter(|&(i, _)| i as u64 != right_slot)
            .map(|(i, &(k, c))| {
                if i as u64 == left_slot {
                    (k, merged)
                } else {
                    (k, c)
                }
            })
            .collect();
        plan.targets
            .push(Target::new(Self::status_off(parent), ps.0, ps.frozen().0));
        plan.retire.push(parent);
        if self
            .install_shrunk(path, path.len - 1, parent, new, &mut plan, guard)
            .is_none()
        {
            self.discard_plan(plan);
            return false;
        }
        forest_core::pause::pause_point("merge:prepared");
        if self.run_plan(plan, guard) == Outcome::Succeeded {
            self.counters.merges.incr();
            return true;
        }
        false
    }

    /// The leaf's parent has a single child: merge the lowest single-child ancestor whose own
    /// parent has other children with one of them, or collapse a one-child root (module doc).
    fn merge_lonely_parent(&self, path: &Path, guard: &Guard) -> bool {
        let mut depth = path.len - 1;
        while depth > 0 && self.sorted_count(path.nodes[depth - 1].0) < 2 {
            depth -= 1;
        }
        let (node, _) = path.nodes[depth];
        if depth > 0 && self.sorted_count(node) >= 2 {
            return false;
        }
        let ns = self.status(node, guard);
        if ns.is_frozen() {
            return false;
        }
        let entries = self.internal_entries(node, guard);
        let mut plan = Plan::default();
        plan.targets
            .push(Target::new(Self::status_off(node), ns.0, ns.frozen().0));
        plan.retire.push(node);
        match self.install_shrunk(path, depth, node, entries, &mut plan, guard) {
            Some(true) => {
                let merged = self.run_plan(plan, guard) == Outcome::Succeeded;
                if merged {
                    self.counters.merges.incr();
                }
                merged
            }
            _ => {
                self.discard_plan(plan);
                false
            }
        }
    }

    /// Adds to `plan` the replacement of internal node `old` (at `path.nodes[depth]`, already
    /// frozen and retired in `plan`) by a node of `new` entries, merging it with a sibling
    /// while it is underfull, collapsing a one-child root. `None` if the path went stale or
    /// the heap is full; else whether a merge with a sibling or a collapse was planned.
    fn install_shrunk<'a>(
        &'a self,
        path: &Path,
        mut depth: usize,
        mut old: u64,
        mut new: Vec<Separator<'a>>,
        plan: &mut Plan,
        guard: &Guard,
    ) -> Option<bool> {
        let mut merged_any = false;
        'up: loop {
            let level = self.level(old);
            if depth == 0 {
                let root = if new.len() == 1 {
                    merged_any = true;
                    new[0].1
                } else {
                    let r = self.build_internal(&new, level)?;
                    plan.fresh.push(r);
                    r
                };
                plan.targets.push(Target::new(self.root_off, old, root));
                return Some(merged_any);
            }
            let (g, gslot) = path.nodes[depth - 1];
            let gs = self.status(g, guard);
            if gs.is_frozen() || self.child(g, gslot, guard) != old {
                return None;
            }
            let underfull = internal_bytes(&new) < self.config.min_size as u64 || new.len() < 2;
            if underfull && plan.entries() + MERGE_LEVEL_ENTRIES <= Self::ENTRIES {
                let gcount = self.sorted_count(g);
                let candidates = [
                    gslot.checked_sub(1),
                    (gslot + 1 < gcount).then_some(gslot + 1),
                ];
                for qslot in candidates.into_iter().flatten() {
                    let q = self.child(g, qslot, guard);
                    let qs = self.status(q, guard);
                    if qs.is_frozen() {
                        continue;
                    }
                    let qentries = self.internal_entries(q, guard);
                    let combined: Vec<Separator<'a>> = if qslot < gslot {
                        let mut c = qentries.clone();
                        c.push((self.separator(g, gslot), new[0].1));
                        c.extend_from_slice(&new[1..]);
                        c
                    } else {
                        let mut c = new.clone();
                        c.push((self.separator(g, qslot), qentries[0].1));
                        c.extend_from_slice(&qentries[1..]);
                        c
                    };
                    if internal_bytes(&combined) > self.config.max_size as u64 {
                        continue;
                    }
                    let node = self.build_internal(&combined, level)?;
                    plan.fresh.push(node);
                    plan.targets
                        .push(Target::new(Self::status_off(q), qs.0, qs.frozen().0));
                    plan.retire.push(q);
                    let (keep, drop) = if qslot < gslot {
                        (qslot, gslot)
                    } else {
                        (gslot, qslot)
                    };
                    let gentries = self.internal_entries(g, guard);
                    new = gentries
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i as u64 != drop)
                        .map(|(i, &(k, c))| if i as u64 == keep { (k, node) } else { (k, c) })
                        .collect();
                    plan.targets
                        .push(Target::new(Self::status_off(g), gs.0, gs.frozen().0));
                    plan.retire.push(g);
                    merged_any = true;
                    old = g;
                    depth -= 1;
                    continue 'up;
                }
            }
            let node = self.build_internal(&new, level)?;
            plan.fresh.push(node);
            if !self.swap_in_parent(path, depth, old, node, plan, guard) {
                return None;
            }
            return Some(merged_any);
        }
    }
}
