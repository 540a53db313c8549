//! Multi-pass insertion (thesis §4.1 and §4.2.2): the `Path` memory, the write descent every
//! modifying operation shares, and unique insert, upsert and update on top of it.
//!
//! A pass descends with interlocking read latches (§4.2.1) and takes the leaf's latch in write
//! mode. It remembers the [`Path`]: per level the node's identity, the child index taken and
//! the node's fill. If the leaf can take the change by itself (room for a new key, or a value
//! replaced), the operation completes in that pass, whatever pass it is. Otherwise the pass
//! computes `lock_from`, the highest level the change reaches (for an insert the lowest
//! ancestor that is not full, or the holder for a root split), releases everything and the next
//! pass starts with `valid` preset to true: it descends again, write-latching every node from
//! `lock_from` down (the holder too when `lock_from` is the tree height) and comparing each step
//! with the remembered one. A mismatch (or a changed height) sets `valid` to false: the pass
//! becomes a dry run, drops the write latches it holds and goes on with read latches, to
//! remember the new path. A pass that reaches the leaf still valid holds every latch the change
//! needs; it rechecks under those latches that the top one can absorb the change (the fill
//! could have changed without the path changing, and node identities can be reused after a
//! free, ABA), then performs it ([`crate::split`], [`crate::remove`]).
//!
//! Latches are only ever taken top-down along tree edges, in both descents, so writers cannot
//! deadlock with each other or with readers (§4.1).
//!
//! Choices the thesis leaves open:
//! - Levels count from the leaves (leaf = 0, root = height - 1, holder = height), so
//!   `lock_from` names the same node whichever pass reads it; a height change invalidates the
//!   path anyway.
//! - Progress bound: after [`PASS_COUNT_MAX`] passes without success the operation runs one
//!   pessimistic pass that write-latches the holder and the whole path without validating,
//!   which always completes. Each failed pass means a concurrent structure change on our path,
//!   so this is reached only under extreme contention.
//! - Counters: every pass after the first is a restart from the root
//!   ([`names::RESTARTS`](forest_core::stats::names::RESTARTS)); a pass preset valid that
//!   failed validation (even if it then completes at the leaf) or whose recheck failed counts
//!   in `dry_runs`.

use std::cmp::Ordering;

use crate::bytes::{Key, Value};
use crate::node::{Guard, HolderWrite, Latched, NodeBody, WriteGuard};
use crate::search::{self, prefix_of, SearchKey};
use crate::{split, LockBTree};

/// The deepest tree the path memory holds. With the smallest order (4) every inner node but
/// the root has at least 2 children and every leaf but the root at least 2 records, so a tree
/// of height h holds at least 2^h records: 48 levels need 2^48 records, beyond any memory.
pub(crate) const HEIGHT_MAX: usize = 48;

/// Passes after which an operation stops validating and locks from the holder down.
pub(crate) const PASS_COUNT_MAX: u32 = 16;

/// One level of a remembered path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// The node's identity (its address; compared only, never dereferenced).
    pub(crate) node: usize,
    /// The child index taken (0 at the leaf).
    pub(crate) index: u32,
    /// Keys (leaf) or separators (inner node) the node held when visited: the metadata
    /// `lock_from` is computed from.
    pub(crate) len: u32,
}

/// The thesis' `Path` structure (Listing 4.3).
#[derive(Clone, Debug)]
pub(crate) struct Path {
    /// The steps from the root (depth 0) to the leaf.
    pub(crate) path: [Step; HEIGHT_MAX],
    /// Steps recorded.
    pub(crate) depth: usize,
    /// The tree height when the path was taken.
    pub(crate) height: u32,
    /// Levels at or below this are write-latched in the next pass; `>= height` means the
    /// holder too.
    pub(crate) lock_from: u32,
    /// Before a pass: whether the pass validates against this path. After a pass: whether
    /// every step matched.
    pub(crate) valid: bool,
    /// The last-resort pass: lock everything, validate nothing.
    pub(crate) pessimistic: bool,
}

impl Path {
    /// The first pass: nothing remembered, only the leaf write-latched.
    pub(crate) fn first_pass() -> Self {
        Self {
            path: [Step::default(); HEIGHT_MAX],
            depth: 0,
            height: 0,
            lock_from: 0,
            valid: false,
            pessimistic: false,
        }
    }

    /// The pessimistic pass (see the module doc).
    pub(crate) fn pessimistic() -> Self {
        Self {
            lock_from: u32::MAX,
            valid: true,
            pessimistic: true,
            ..Self::first_pass()
        }
    }

    /// This pass's path as the memory of the next one.
    pub(crate) fn next_pass(&self, lock_from: u32) -> Self {
        Self {
            lock_from,
            valid: true,
            pessimistic: false,
            ..self.clone()
        }
    }

    fn push(&mut self, step: Step) {
        assert!(self.depth < HEIGHT_MAX, "tree deeper than HEIGHT_MAX");
        self.path[self.depth] = step;
        self.depth += 1;
    }

    /// The level of the node at `depth`.
    pub(crate) fn level(&self, depth: usize) -> u32 {
        self.height - 1 - depth as u32
    }
}

/// What a write descent holds when it reaches the leaf.
pub(crate) struct Descent<'t> {
    /// The holder, write-latched when the path locks from the holder and stayed valid.
    pub(crate) holder: Option<HolderWrite<'t>>,
    /// Write-latched inner nodes, top first, down to the leaf's parent (contiguous), when the
    /// pass stayed valid. Empty otherwise.
    pub(crate) chain: Vec<WriteGuard>,
    /// The leaf, always write-latched.
    pub(crate) leaf: WriteGuard,
    /// The path this pass took; `valid` says whether it matched the remembered one.
    pub(crate) path: Path,
}

impl Descent<'_> {
    /// Whether the pass holds every latch from `lock_from` down (debug check of the
    /// construction).
    fn chain_is_contiguous(&self, lock_from: u32) -> bool {
        let top_level = if self.holder.is_some() {
            self.path.height - 1
        } else {
            lock_from
        };
        let levels_ok = self
            .chain
            .iter()
            .enumerate()
            .all(|(i, g)| g.level() + i as u32 == top_level);
        levels_ok && self.chain.len() as u32 == top_level
    }
}

/// Descends for a modifying operation, latching as `old` says (see the module doc).
pub(crate) fn descend_for_write<'t>(
    tree: &'t LockBTree,
    key: &SearchKey<'_>,
    old: &Path,
) -> Descent<'t> {
    let waits = &tree.counters.latch_waits;
    let check = old.valid && !old.pessimistic;
    let mut valid = old.valid;
    let lock_from = old.lock_from;
    let mut new = Path::first_pass();
    let mut holder = None;
    // Whether the node at `level` is write-latched in this pass.
    let write_at = |level: u32, valid: bool| level == 0 || (valid && level <= lock_from);

    let mut cur = if valid && lock_from >= old.height {
        let h = tree.tree.write(waits);
        new.height = h.height();
        if check && new.height != old.height {
            valid = false;
        }
        let cur = if write_at(new.height - 1, valid) {
            Guard::Write(h.root_write(waits))
        } else {
            Guard::Read(h.root_read(waits))
        };
        if valid {
            holder = Some(h);
        }
        cur
    } else {
        let h = tree.tree.read(waits);
        new.height = h.height();
        if check && new.height != old.height {
            valid = false;
        }
        if write_at(new.height - 1, valid) {
            Guard::Write(h.root_write(waits))
        } else {
            Guard::Read(h.root_read(waits))
        }
        // `h` is released here, after the root is latched (interlocking).
    };

    let mut chain = Vec::new();
    loop {
        let level = cur.level();
        let body = cur.body();
        let len = body.len() as u32;
        if level == 0 {
            let step = Step {
                node: cur.id(),
                index: 0,
                len,
            };
            if check && valid && old.path[new.depth].node != step.node {
                valid = false;
            }
            new.push(step);
            break;
        }
        let index = search::lower_bound(tree.search, &body.prefixes, &body.keys, key);
        let step = Step {
            node: cur.id(),
            index: index as u32,
            len,
        };
        if check && valid {
            let remembered = old.path[new.depth];
            if remembered.node != step.node || remembered.index != step.index {
                valid = false;
            }
        }
        new.push(step);
        cur.prefetch_child(index, tree.order);
        let next = if write_at(level - 1, valid) {
            Guard::Write(cur.write_child(index, waits))
        } else {
            Guard::Read(cur.read_child(index, waits))
        };
        // The child is latched: now the current node may go (Listing 4.2), unless it is part
        // of a valid write chain.
        match cur {
            Guard::Write(g) if valid => chain.push(g),
            other => drop(other),
        }
        if !valid {
            // A dry run keeps no write latches above the leaf.
            chain.clear();
            holder = None;
        }
        cur = next;
    }
    let Guard::Write(leaf) = cur else {
        unreachable!("a write descent always write-latches the leaf");
    };
    new.valid = valid;
    let descent = Descent {
        holder,
        chain,
        leaf,
        path: new,
    };
    debug_assert!(!valid || descent.chain_is_contiguous(lock_from.min(descent.path.height)));
    descent
}

#[cfg(test)]
thread_local! {
    /// A test hook run once between two passes of this thread's next multi-pass write, while
    /// it holds no latch (it may write to the tree to force a dry run).
    ///
    /// Not a `forest_core::pause` point: a one-shot closure on the writer's own thread, on in
    /// every `cargo test`; the process-wide pause hook would need a feature and a turn lock.
    pub(crate) static BETWEEN_PASSES: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        std::cell::RefCell::new(None);
}

#[cfg(test)]
thread_local! {
    /// A test override of [`PASS_COUNT_MAX`] for this thread, to reach the pessimistic pass.
    pub(crate) static PASS_COUNT_MAX_OVERRIDE: std::cell::Cell<Option<u32>> =
        const { std::cell::Cell::new(None) };
}

/// [`PASS_COUNT_MAX`], or its test override.
#[inline]
pub(crate) fn pass_count_max() -> u32 {
    #[cfg(test)]
    if let Some(n) = PASS_COUNT_MAX_OVERRIDE.with(std::cell::Cell::get) {
        return n;
    }
    PASS_COUNT_MAX
}

/// Runs and clears the [`BETWEEN_PASSES`] hook.
#[cfg(test)]
pub(crate) fn between_passes() {
    if let Some(hook) = BETWEEN_PASSES.with(|h| h.borrow_mut().take()) {
        hook();
    }
}

/// What a write does with an existing or missing key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// Only if absent (the papers' unique insert).
    InsertIfAbsent,
    /// Insert or replace.
    Upsert,
    /// Only if present; never splits.
    UpdateIfPresent,
}

/// Inserts, upserts or updates `key` by multi-pass insertion. Returns whether it wrote.
pub(crate) fn write_entry(tree: &LockBTree, key: &[u8], value: &[u8], mode: WriteMode) -> bool {
    let sk = SearchKey::new(key);
    let cap = tree.key_count_max();
    let mut old = Path::first_pass();
    let mut pass_count = 1;
    loop {
        let mut d = descend_for_write(tree, &sk, &old);
        if old.valid && !d.path.valid {
            tree.counters.dry_runs.incr();
        }
        let body = d.leaf.body();
        let pos = search::lower_bound(tree.search, &body.prefixes, &body.keys, &sk);
        let found = pos < body.len() && sk.cmp_slot(body.prefixes[pos], &body.keys[pos]).is_eq();
        match (mode, found) {
            (WriteMode::InsertIfAbsent, true) | (WriteMode::UpdateIfPresent, false) => {
                return false
            }
            (WriteMode::Upsert | WriteMode::UpdateIfPresent, true) => {
                replace_value(d.leaf.body_mut(), pos, value);
                return true;
            }
            (WriteMode::InsertIfAbsent | WriteMode::Upsert, false) => {}
        }
        if body.len() < cap {
            insert_record(d.leaf.body_mut(), pos, key, value);
            return true;
        }
        // The leaf must split: only a valid pass holding the right latches may do it.
        if d.path.valid && split::can_absorb_split(tree, &d, old.lock_from) {
            split::insert_with_splits(tree, d, pos, key, value);
            return true;
        }
        assert!(!old.pessimistic, "the pessimistic pass always completes");
        if old.valid && d.path.valid {
            // Valid path, but the recheck under the latches failed.
            tree.counters.dry_runs.incr();
        }
        let lock_from = split::lock_from_for_insert(&d.path, cap);
        old = d.path.next_pass(lock_from);
        drop(d);
        #[cfg(test)]
        between_passes();
        // Safe to go on: we hold no latch, and the next pass re-reads everything it uses.
        tree.counters.restarts.incr();
        pass_count += 1;
        if pass_count > pass_count_max() {
            old = Path::pessimistic();
        }
    }
}

/// Replaces the value at `pos` (in place when it fits).
fn replace_value(leaf: &mut NodeBody, pos: usize, value: &[u8]) {
    leaf.values[pos].set(value);
}

/// Inserts a record at `pos` (the leaf may use its overflow slot).
pub(crate) fn insert_record(leaf: &mut NodeBody, pos: usize, key: &[u8], value: &[u8]) {
    debug_assert!(pos == 0 || leaf.keys[pos - 1][..].cmp(key) == Ordering::Less);
    debug_assert!(pos == leaf.len() || leaf.keys[pos][..].cmp(key) == Ordering::Greater);
    leaf.prefixes.insert(pos, prefix_of(key));
    leaf.keys.insert(pos, Key::new(key));
    leaf.values.insert(pos, Value::new(value));
}
