//! Freezing and consolidation (BzTree §4.3), and helping a frozen leaf (§4.3 "Concurrency
//! during consolidation", §5.4).
//!
//! A thread that must reorganize a leaf N freezes it with a 1-word PMwCAS on its status, so no
//! in-flight record operation can complete on it, collects the live records (visible ones;
//! deleted, superseded, in-progress and abandoned entries are dropped), and either splits
//! (`split.rs`, when the live records and the pending write would pass `max_size`) or builds N′
//! with the records sorted and installs it with a 2-word PMwCAS on the child pointer in the
//! parent P and P's status (re-traversing when P is frozen or no longer points to N). Every
//! SMO names its new and retired nodes in its install descriptor (`BzTree::pmwcas_with`, §6.1,
//! §6.3), so a failed install frees its new nodes through the `FREE-ONE` policy, after the
//! epoch: in both modes, as the persistent mode needs them named, and one code path serves
//! both. Nodes of a plan never installed (a stale path, no descriptor) are freed at once.
//!
//! A writer that meets a frozen leaf re-traverses once; meeting it again, it runs its own
//! consolidation (or split) of the frozen leaf and races to install it (§4.3); whichever
//! install wins, every other one fails on the parent's status and the writers retry.

use forest_core::Result;
use forest_pmwcas::{Guard, Persist};

use crate::node::{key_cmp, LiveRecord, Payload, HEADER_BYTES};
use crate::status_word::StatusWord;
use crate::{BzTree, Outcome, Path, Target};

/// New nodes of an SMO, its PMwCAS words and the nodes it retires.
#[derive(Clone, Default)]
pub(crate) struct Plan {
    pub targets: Vec<Target>,
    pub retire: Vec<u64>,
    /// New nodes: freed at once if the install fails (never seen by another thread, §5.2).
    pub fresh: Vec<u64>,
}

impl Plan {
    /// Entries (words and memory) so far, counting each retired and new node as its own
    /// entry: a bound, as a word swapping a retired node for a new one takes one entry.
    pub fn entries(&self) -> usize {
        self.targets.len() + self.retire.len() + self.fresh.len()
    }

    /// The descriptor entries this plan takes (`BzTree::pmwcas_with`): its targets, then its
    /// other retired and new nodes in pairs.
    pub fn exact_entries(&self) -> usize {
        crate::Folds::entries(&self.targets, &self.retire, &self.fresh)
    }
}

impl<P: Persist> BzTree<P> {
    /// Sets the frozen bit with a 1-word PMwCAS (§4.3, §5.2 preparation).
    pub(crate) fn freeze(&self, node: u64, s: StatusWord, guard: &Guard) -> Outcome {
        let targets = [Target::new(Self::status_off(node), s.0, s.frozen().0)];
        self.pmwcas(guard, &targets, &[])
    }

    /// The live records of a leaf, sorted by key, one per key. Exact only once the leaf is
    /// frozen; of a live leaf, an estimate (what merge sizing needs).
    pub(crate) fn live_records(&self, leaf: u64, guard: &Guard) -> Vec<LiveRecord<'_>> {
        let s = self.status(leaf, guard);
        let mut live: Vec<LiveRecord<'_>> = (0..s.record_count())
            .filter_map(|i| {
                let m = self.leaf_meta(leaf, i, guard);
                if !m.is_visible() {
                    return None;
                }
                forest_core::pause::pause_point("consolidate:live-read");
                let key = self.key_of(leaf, m);
                let payload = if m.is_record_pointer() {
                    Payload::Pointer(
                        self.pool
                            .read(self.heap.word(Self::pointer_off(leaf, m)), guard),
                    )
                } else {
                    let k = m.key_len();
                    Payload::Inline(
                        self.heap
                            .bytes(leaf + m.offset() + k as u64, m.total_len() - k),
                    )
                };
                Some(LiveRecord { key, payload })
            })
            .collect();
        // Unstable: a frozen leaf has one visible version per key (asserted below), and the
        // estimate's dedup keeps either version's size.
        live.sort_unstable_by(|a, b| key_cmp(a.key, b.key));
        if s.is_frozen() {
            // Frozen before the read: no completion can change an entry any more.
            debug_assert!(
                live.windows(2).all(|w| w[0].key < w[1].key),
                "one visible version per key"
            );
        } else {
            // A merge's sizing of a live leaf: an update's 3-word swap that ran between two
            // entry reads shows both versions visible. Count the key once (an estimate).
            live.dedup_by(|later, earlier| later.key == earlier.key);
        }
        live
    }

    /// Bytes a consolidated copy of `leaf` would fill (header, entries, records).
    pub(crate) fn live_bytes(&self, leaf: u64, guard: &Guard) -> u64 {
        HEADER_BYTES
            + self
                .live_records(leaf, guard)
                .iter()
                .map(LiveRecord::node_bytes)
                .sum::<u64>()
    }

    /// A write found its leaf frozen: re-traverse the first time, help the second (§4.3).
    pub(crate) fn on_frozen(
        &self,
        path: &Path,
        key: &[u8],
        need: u64,
        frozen_seen: &mut u32,
        guard: &Guard,
    ) -> Result<()> {
        self.counters.frozen_retries.incr();
        *frozen_seen += 1;
        if *frozen_seen == 1 {
            std::thread::yield_now();
            return Ok(());
        }
        self.rebuild_frozen(path, key, need, need, guard)
    }

    /// The leaf needs room or has too much deleted space (§4.3, §5.1): freeze it and rebuild.
    /// `need` bytes must fit after it; the live records grow by `growth` (0 for a new version
    /// of an existing key).
    pub(crate) fn maintain(
        &self,
        path: &Path,
        key: &[u8],
        need: u64,
        growth: u64,
        guard: &Guard,
    ) -> Result<()> {
        let s = self.status(path.leaf, guard);
        if !s.is_frozen() && self.freeze(path.leaf, s, guard) != Outcome::Succeeded {
            return Ok(());
        }
        self.rebuild_frozen(path, key, need, growth, guard)
    }

    /// Consolidates or splits a frozen leaf, leaving room for `need` more bytes; splits when
    /// the live records, grown by `growth`, would pass `max_size` (§4.3, §5.1).
    pub(crate) fn rebuild_frozen(
        &self,
        path: &Path,
        key: &[u8],
        need: u64,
        growth: u64,
        guard: &Guard,
    ) -> Result<()> {
        let live = self.live_records(path.leaf, guard);
        let bytes = HEADER_BYTES + live.iter().map(LiveRecord::node_bytes).sum::<u64>();
        if live.len() >= 2 && bytes + growth > self.config.max_size as u64 {
            return self.split(path, key, &live, need, guard);
        }
        let fresh = self
            .build_leaf(&live, need)
            .ok_or_else(|| self.heap_full())?;
        forest_core::pause::pause_point("consolidate:prepared");
        let mut plan = Plan {
            fresh: vec![fresh],
            ..Plan::default()
        };
        plan.retire.push(path.leaf);
        let located = self.locate(path, key, guard);
        let ready = match &located {
            Some(at) => self.swap_in_parent(at, at.len, path.leaf, fresh, &mut plan, guard),
            None => false,
        };
        let outcome = if ready {
            self.run_plan(plan, guard)
        } else {
            self.discard_plan(plan);
            Outcome::Failed
        };
        if outcome == Outcome::Succeeded {
            self.counters.consolidations.incr();
        }
        Ok(())
    }

    /// The path to `path.leaf` that an install should use: the given one if its parent still
    /// points to the leaf and is not frozen, else a re-traversal (§4.3); `None` if the leaf
    /// left the tree.
    pub(crate) fn locate(&self, path: &Path, key: &[u8], guard: &Guard) -> Option<Path> {
        if let Some((parent, slot)) = path.parent() {
            if !self.status(parent, guard).is_frozen()
                && self.child(parent, slot, guard) == path.leaf
            {
                return Some(*path);
            }
            return self.path_to(path.leaf, key, guard);
        }
        if self.root(guard) == path.leaf {
            return Some(*path);
        }
        self.path_to(path.leaf, key, guard)
    }

    /// Executes an SMO's install, naming its new and retired nodes (module doc).
    pub(crate) fn run_plan(&self, plan: Plan, guard: &Guard) -> Outcome {
        if plan.targets.is_empty() {
            self.discard_plan(plan);
            return Outcome::Failed;
        }
        let outcome = self.pmwcas_with(guard, &plan.targets, &plan.retire, &plan.fresh);
        match outcome {
            Outcome::Succeeded => {}
            // The descriptor's policy frees the new nodes after the epoch.
            Outcome::Failed => self.counters.smo_failures.incr(),
            Outcome::PoolExhausted => {
                self.counters.smo_failures.incr();
                self.discard_plan(plan);
            }
        }
        outcome
    }

    /// Frees the new nodes of a plan that no descriptor named (never seen by another thread).
    pub(crate) fn discard_plan(&self, plan: Plan) {
        for node in plan.fresh {
            self.heap.free(node, &|r| self.flush(r));
        }
    }

    /// Root word swap or in-place child swap (§4.4) of `old` by `new`, where `old` is the node
    /// below `path.nodes[depth - 1]` (the root if `depth` is 0).
    pub(crate) fn swap_in_parent(
        &self,
        path: &Path,
        depth: usize,
        old: u64,
        new: u64,
        plan: &mut Plan,
        guard: &Guard,
    ) -> bool {
        if depth == 0 {
            plan.targets.push(Target::new(self.root_off, old, new));
            return true;
        }
        let (parent, slot) = path.nodes[depth - 1];
        let ps = self.status(parent, guard);
        if ps.is_frozen() || self.child(parent, slot, guard) != old {
            return false;
        }
        plan.targets
            .push(Target::new(self.child_word_off(parent, slot), old, new));
        plan.targets
            .push(Target::new(Self::status_off(parent), ps.0, ps.swapped().0));
        true
    }
}
