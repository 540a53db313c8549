//! Leaf operations (BzTree §4.2): insert with its uniqueness protocol, delete, update, upsert
//! and reads, each a PMwCAS on the leaf's status word and record metadata (Table 1).
//!
//! Insert (§4.2.1): read the status (frozen: retry or help), search the sorted region (binary)
//! and the unsorted region (linear) for the key, reserve a metadata entry and storage with a
//! 2-word PMwCAS (status: count + 1, block size + record; the entry: allocation bit and the
//! global index epoch), copy the record, flush it (persistent mode), re-read the status
//! (frozen: the reservation is abandoned, retry on the new leaf), and make the record visible
//! with a 2-word PMwCAS (the entry: visible and offset; the status unchanged). The `recheck`
//! flag is set when the search met an in-progress entry of this epoch whose key could be the
//! same or the reservation lost a race; then, before completing, the entries before its own are
//! scanned again, waiting (bounded) on in-progress ones; a duplicate zeroes the record and its
//! entry. A wait that passes its bound freezes the leaf: the stalled reservation and this one
//! are abandoned with it, and the insert retries on the consolidated leaf.
//!
//! Versions (crate doc): an update or upsert of an existing key appends a new version and
//! completes it with 3 words that also hide the old one, so at most one version of a key is
//! visible; a record-pointer value is swapped in place with §4.2.3's 3-word PMwCAS. A read that
//! finds nothing while the delete size moved during its search reads again (a version swap
//! moved the key behind it).

use forest_core::Result;
use forest_pmwcas::{Guard, Persist};

use crate::metadata::{record_block_bytes, Metadata, TOTAL_LEN_MAX};
use crate::node::{key_cmp, key_eq, key_prefix, lower_bound, HEADER_BYTES, METADATA_BYTES};
use crate::status_word::StatusWord;
use crate::{BzTree, Outcome, Path, Target};

/// What a write does with an existing or missing key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PutMode {
    /// Only if absent (§4.2.1).
    Insert,
    /// Only if present (§4.2.3).
    Update,
    /// Either (§4.2.4).
    Upsert,
}

/// A visible version of a key in a leaf.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pub index: u64,
    pub meta: Metadata,
}

/// The result of searching a leaf for a key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Search {
    pub found: Option<Found>,
    /// An in-progress entry of this epoch with the key's length was seen.
    pub in_progress: bool,
}

/// Spins of a wait on an in-progress entry before the leaf is frozen.
const RECHECK_WAIT_SPINS: u32 = 1 << 14;
/// No entry to skip.
const SKIP_NONE: u64 = u64::MAX;

impl<P: Persist> BzTree<P> {
    /// Searches `leaf` under status `s`: sorted region by binary search, unsorted linearly
    /// (§4.2.5), skipping entry `skip`.
    pub(crate) fn search_leaf(
        &self,
        leaf: u64,
        s: StatusWord,
        key: &[u8],
        skip: u64,
        guard: &Guard,
    ) -> Search {
        let sorted = self.sorted_count(leaf).min(s.record_count());
        // The sorted region by the keys' first 8 bytes, without a branch on the comparisons
        // (`node::lower_bound`); where the first record not below ties key's prefix (with
        // 8-byte keys, it is key), by whole keys from there. Its keys are distinct.
        let prefix = key_prefix(key);
        let meta = |i: u64| self.leaf_meta(leaf, i, guard);
        let lb = lower_bound(0, sorted, |i| {
            key_prefix(self.key_of(leaf, meta(i))) < prefix
        });
        if lb < sorted {
            let m = meta(lb);
            let k = self.key_of(leaf, m);
            if key_prefix(k) == prefix {
                let (i, m) = match key_cmp(k, key) {
                    std::cmp::Ordering::Equal => (lb, Some(m)),
                    std::cmp::Ordering::Greater => (sorted, None),
                    std::cmp::Ordering::Less => {
                        let i = lower_bound(lb + 1, sorted - lb - 1, |i| {
                            key_cmp(self.key_of(leaf, meta(i)), key).is_lt()
                        });
                        let m = (i < sorted).then(|| meta(i));
                        (i, m.filter(|&m| key_eq(self.key_of(leaf, m), key)))
                    }
                };
                if let Some(m) = m {
                    if m.is_visible() && i != skip {
                        return Search {
                            found: Some(Found { index: i, meta: m }),
                            in_progress: false,
                        };
                    }
                }
            }
        }
        let mut in_progress = false;
        for i in sorted..s.record_count() {
            if i == skip {
                continue;
            }
            let m = self.leaf_meta(leaf, i, guard);
            if m.key_len() != key.len() {
                continue;
            }
            if m.is_visible() {
                if key_eq(self.key_of(leaf, m), key) {
                    return Search {
                        found: Some(Found { index: i, meta: m }),
                        in_progress,
                    };
                }
            } else if m.is_reserved() && m.allocation_epoch() == self.index_epoch {
                in_progress = true;
            }
        }
        Search {
            found: None,
            in_progress,
        }
    }

    fn has_room(&self, leaf: u64, s: StatusWord, need: u64) -> bool {
        HEADER_BYTES + METADATA_BYTES * s.record_count() + s.block_size() + need
            <= self.node_size(leaf)
    }

    /// Point read (§4.2.5): ignores the frozen bit and in-progress entries.
    pub(crate) fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if forest_core::check_key(key).is_err() {
            return false;
        }
        let guard = self.pool.pin();
        let leaf = self.leaf_for(key, &guard);
        loop {
            let s = self.status(leaf, &guard);
            let search = self.search_leaf(leaf, s, key, SKIP_NONE, &guard);
            if let Some(f) = search.found {
                out.clear();
                out.extend_from_slice(self.value_of(leaf, f.meta, &guard));
                return true;
            }
            if self.status(leaf, &guard).delete_size() == s.delete_size() {
                return false;
            }
            self.counters.read_retries.incr();
        }
    }

    /// Insert, update or upsert (§4.2.1, §4.2.3, §4.2.4).
    pub(crate) fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<bool> {
        let pointer =
            value.len() > self.config.inline_value_max || key.len() + value.len() > TOTAL_LEN_MAX;
        let mut block = None;
        let result = self.put_with(key, value, mode, pointer, &mut block);
        if let Some(b) = block {
            // Never made visible nor named in a descriptor: no other thread saw it.
            self.heap.free(b, &|r| self.flush(r));
        }
        result
    }

    fn ensure_block(&self, value: &[u8], block: &mut Option<u64>) -> Result<u64> {
        if let Some(b) = *block {
            return Ok(b);
        }
        let b = self
            .new_value_block(value)
            .ok_or_else(|| self.heap_full())?;
        *block = Some(b);
        Ok(b)
    }

    fn put_with(
        &self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
        pointer: bool,
        block: &mut Option<u64>,
    ) -> Result<bool> {
        let total = if pointer {
            8 + key.len()
        } else {
            key.len() + value.len()
        };
        let rec = record_block_bytes(total);
        let need = METADATA_BYTES + rec;
        let mut frozen_seen = 0;
        let mut first = true;
        'op: loop {
            if !std::mem::take(&mut first) {
                self.counters.restarts.incr();
            }
            let guard = self.pool.pin();
            let path = self.descend(key, false, &guard);
            let leaf = path.leaf;
            let mut recheck = false;
            'leaf: loop {
                let s = self.status(leaf, &guard);
                if s.is_frozen() {
                    self.on_frozen(&path, key, need, &mut frozen_seen, &guard)?;
                    continue 'op;
                }
                let search = self.search_leaf(leaf, s, key, SKIP_NONE, &guard);
                recheck |= search.in_progress;
                match (mode, search.found) {
                    (PutMode::Insert, Some(_)) => return Ok(false),
                    (PutMode::Update, None) => {
                        if self.status(leaf, &guard).delete_size() == s.delete_size() {
                            return Ok(false);
                        }
                        self.counters.read_retries.incr();
                        continue 'leaf;
                    }
                    (_, Some(f)) if pointer && f.meta.is_record_pointer() => {
                        // §4.2.3 record pointer: swap it in place, 3 words.
                        let b = self.ensure_block(value, block)?;
                        let ptr = Self::pointer_off(leaf, f.meta);
                        let old = self.pool.read(self.heap.word(ptr), &guard);
                        let targets = [
                            Target {
                                off: ptr,
                                old,
                                new: b,
                                free_one: true,
                            },
                            Target::new(Self::meta_off(leaf, f.index), f.meta.0, f.meta.0),
                            Target::new(Self::status_off(leaf), s.0, s.0),
                        ];
                        match self.pmwcas(&guard, &targets, &[]) {
                            Outcome::Succeeded => {
                                *block = None;
                                return Ok(true);
                            }
                            Outcome::Failed => {
                                // FREE-ONE frees the new block of a failed PMwCAS.
                                *block = None;
                                continue 'leaf;
                            }
                            Outcome::PoolExhausted => continue 'op,
                        }
                    }
                    _ => {}
                }
                let reserved_s = s.reserved(rec);
                if reserved_s.is_none()
                    || !self.has_room(leaf, s, need)
                    || s.delete_size() > self.config.delete_size_max as u64
                {
                    // §5.1: an updater runs the pending SMO first. A new version of an
                    // existing key does not grow the live records: consolidate, not split.
                    let growth = if search.found.is_some() { 0 } else { need };
                    self.maintain(&path, key, need, growth, &guard)?;
                    continue 'op;
                }
                // Reserve (2 words).
                let Some(new_s) = reserved_s else {
                    continue 'op;
                };
                let b = if pointer {
                    Some(self.ensure_block(value, block)?)
                } else {
                    None
                };
                let idx = s.record_count();
                let reservation = Metadata::reserved(self.index_epoch, key.len(), total, pointer);
                let targets = [
                    Target::new(Self::status_off(leaf), s.0, new_s.0),
                    Target::new(Self::meta_off(leaf, idx), 0, reservation.0),
                ];
                match self.pmwcas(&guard, &targets, &[]) {
                    Outcome::Succeeded => {}
                    Outcome::Failed => {
                        recheck = true;
                        continue 'leaf;
                    }
                    Outcome::PoolExhausted => continue 'op,
                }
                forest_core::pause::pause_point("insert:reserved");
                let offset = self.node_size(leaf) - new_s.block_size();
                let at = leaf + offset;
                match b {
                    Some(_) => {
                        // The pointer is linked by the completion PMwCAS (`link_block`).
                        self.heap.word(at).init(0);
                        self.heap.write(at + 8, key);
                    }
                    None => {
                        self.heap.write(at, key);
                        self.heap.write(at + key.len() as u64, value);
                    }
                }
                self.persist_bytes(at, total as u64);
                let visible = Metadata::visible(offset, key.len(), total, pointer);
                let link = Link {
                    value,
                    at: b.map(|_| at),
                };
                match self.complete(
                    &path,
                    key,
                    mode,
                    idx,
                    reservation,
                    visible,
                    search.found,
                    recheck,
                    (link, block),
                    &guard,
                )? {
                    // Visible now, the block (if any) linked by the completion; an abandoned
                    // record's block stays ours and `put` frees it.
                    Completion::Done(result) => return Ok(result),
                    Completion::Retry => continue 'op,
                }
            }
        }
    }

    /// Completes a reserved record (§4.2.1 completion; supersedes an old version, crate doc).
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        path: &Path,
        key: &[u8],
        mode: PutMode,
        idx: u64,
        reservation: Metadata,
        visible: Metadata,
        found: Option<Found>,
        mut recheck: bool,
        (link, block): (Link<'_>, &mut Option<u64>),
        guard: &Guard,
    ) -> Result<Completion> {
        let leaf = path.leaf;
        let mut supersede = found;
        loop {
            let s = self.status(leaf, guard);
            if s.is_frozen() {
                // The freeze abandons the reservation; the new leaf will not have it.
                self.counters.frozen_retries.incr();
                return Ok(Completion::Retry);
            }
            if let Some(f) = supersede {
                if self.leaf_meta(leaf, f.index, guard) != f.meta {
                    // The version we replace is gone: find the current one.
                    match self.search_leaf(leaf, s, key, idx, guard).found {
                        Some(g) => supersede = Some(g),
                        None => {
                            if self.status(leaf, guard).delete_size() != s.delete_size() {
                                self.counters.read_retries.incr();
                                continue;
                            }
                            supersede = None;
                            if mode == PutMode::Update {
                                return self.abandon(leaf, idx, reservation, visible, guard);
                            }
                            recheck = true;
                        }
                    }
                    continue;
                }
                let mut targets = [
                    Target::new(Self::meta_off(leaf, idx), reservation.0, visible.0),
                    Target::new(Self::meta_off(leaf, f.index), f.meta.0, f.meta.deleted().0),
                    Target::new(
                        Self::status_off(leaf),
                        s.0,
                        s.deleted(f.meta.block_bytes()).0,
                    ),
                    Target::new(0, 0, 0),
                    Target::new(0, 0, 0),
                ];
                let mut n = 3;
                let mut retire = [0u64; 1];
                let retire: &[u64] = match self.pointer_guard(leaf, f.meta, guard) {
                    Some((t, b)) => {
                        forest_core::pause::pause_point("complete:pointer-read");
                        targets[n] = t;
                        n += 1;
                        retire[0] = b;
                        &retire
                    }
                    None => &[],
                };
                let n = match self.link_block(&link, block) {
                    Ok(Some(t)) => {
                        targets[n] = t;
                        n + 1
                    }
                    Ok(None) => n,
                    Err(e) => {
                        self.abandon(leaf, idx, reservation, visible, guard)?;
                        return Err(e);
                    }
                };
                let outcome = self.pmwcas(guard, &targets[..n], retire);
                Self::linked(&link, block, outcome);
                match outcome {
                    Outcome::Succeeded => return Ok(Completion::Done(true)),
                    Outcome::Failed => continue,
                    Outcome::PoolExhausted => return Ok(Completion::Retry),
                }
            }
            if recheck {
                // Re-scan the unsorted entries before ours (§4.2.1).
                let mut duplicate = None;
                let mut j = self.sorted_count(leaf);
                while j < idx {
                    let m = self.leaf_meta(leaf, j, guard);
                    if m.key_len() == key.len() {
                        if m.is_visible() {
                            if key_eq(self.key_of(leaf, m), key) {
                                duplicate = Some(Found { index: j, meta: m });
                                break;
                            }
                        } else if m.is_reserved() && m.allocation_epoch() == self.index_epoch {
                            // Wait for it: it serialized before us and may be our key.
                            if !self.wait_for_entry(leaf, j, m, guard) {
                                return Ok(Completion::Retry);
                            }
                            continue;
                        }
                    }
                    j += 1;
                }
                if let Some(d) = duplicate {
                    if mode == PutMode::Insert {
                        return self
                            .abandon(leaf, idx, reservation, visible, guard)
                            .map(|_| Completion::Done(false));
                    }
                    supersede = Some(d);
                    continue;
                }
            }
            let mut targets = [
                Target::new(Self::meta_off(leaf, idx), reservation.0, visible.0),
                Target::new(Self::status_off(leaf), s.0, s.0),
                Target::new(0, 0, 0),
            ];
            let n = match self.link_block(&link, block) {
                Ok(Some(t)) => {
                    targets[2] = t;
                    3
                }
                Ok(None) => 2,
                Err(e) => {
                    self.abandon(leaf, idx, reservation, visible, guard)?;
                    return Err(e);
                }
            };
            let outcome = self.pmwcas(guard, &targets[..n], &[]);
            Self::linked(&link, block, outcome);
            match outcome {
                Outcome::Succeeded => return Ok(Completion::Done(true)),
                Outcome::Failed => continue,
                Outcome::PoolExhausted => return Ok(Completion::Retry),
            }
        }
    }

    /// The completion's word linking a record-pointer value's block (§6.1: the record's
    /// pointer word is the "reference" the block is activated into): `FREE-ONE` from 0 to the
    /// block, so a failed completion frees the block and a crash before the completion leaves
    /// no block behind a dangling reservation.
    fn link_block(&self, link: &Link<'_>, block: &mut Option<u64>) -> Result<Option<Target>> {
        let Some(at) = link.at else {
            return Ok(None);
        };
        let b = self.ensure_block(link.value, block)?;
        Ok(Some(Target {
            off: at,
            old: 0,
            new: b,
            free_one: true,
        }))
    }

    /// After a completion that linked a block: unless no descriptor was had, the block is no
    /// longer ours (the tree's on success; the descriptor's policy frees it on failure).
    fn linked(link: &Link<'_>, block: &mut Option<u64>, outcome: Outcome) {
        if link.at.is_some() && outcome != Outcome::PoolExhausted {
            *block = None;
        }
    }

    /// Waits (bounded) for in-progress entry `j` to finish; false if the leaf froze or the
    /// wait ran out and this thread froze it (§4.2.1 "waits ... abandoned on freeze").
    fn wait_for_entry(&self, leaf: u64, j: u64, m: Metadata, guard: &Guard) -> bool {
        self.counters.recheck_waits.incr();
        for spin in 0..RECHECK_WAIT_SPINS {
            if self.leaf_meta(leaf, j, guard) != m {
                return true;
            }
            let s = self.status(leaf, guard);
            if s.is_frozen() {
                return false;
            }
            if spin % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        self.counters.recheck_timeouts.incr();
        let s = self.status(leaf, guard);
        if !s.is_frozen() {
            let _ = self.freeze(leaf, s, guard);
        }
        false
    }

    /// Gives up a reserved record: zeroes its bytes and its entry (§4.2.1 duplicate). Returns
    /// `Done(false)`.
    fn abandon(
        &self,
        leaf: u64,
        idx: u64,
        reservation: Metadata,
        visible: Metadata,
        guard: &Guard,
    ) -> Result<Completion> {
        self.heap
            .zero(leaf + visible.offset(), visible.block_bytes());
        let targets = [Target::new(Self::meta_off(leaf, idx), reservation.0, 0)];
        // Only this thread changes its own reservation; a freeze does not touch it. If the
        // pool is exhausted the entry stays reserved and a later consolidation drops it.
        let _ = self.pmwcas(guard, &targets, &[]);
        Ok(Completion::Done(false))
    }

    /// Delete (§4.2.2): 2 words, the entry invisible and the status's delete size.
    pub(crate) fn delete(&self, key: &[u8]) -> bool {
        let mut frozen_seen = 0;
        let mut first = true;
        'op: loop {
            if !std::mem::take(&mut first) {
                self.counters.restarts.incr();
            }
            let guard = self.pool.pin();
            let path = self.descend(key, false, &guard);
            let leaf = path.leaf;
            loop {
                let s = self.status(leaf, &guard);
                if s.is_frozen() {
                    if self
                        .on_frozen(&path, key, 0, &mut frozen_seen, &guard)
                        .is_err()
                    {
                        // Out of heap to help with: wait for the owner of the freeze.
                        std::thread::yield_now();
                    }
                    continue 'op;
                }
                if s.delete_size() > self.config.delete_size_max as u64 {
                    let _ = self.maintain(&path, key, 0, 0, &guard);
                    continue 'op;
                }
                let Some(f) = self.search_leaf(leaf, s, key, SKIP_NONE, &guard).found else {
                    if self.status(leaf, &guard).delete_size() == s.delete_size() {
                        return false;
                    }
                    self.counters.read_retries.incr();
                    continue;
                };
                let new_s = s.deleted(f.meta.block_bytes());
                let mut targets = [
                    Target::new(Self::meta_off(leaf, f.index), f.meta.0, f.meta.deleted().0),
                    Target::new(Self::status_off(leaf), s.0, new_s.0),
                    Target::new(0, 0, 0),
                ];
                let mut retire = [0u64; 1];
                let (targets, retire): (&[Target], &[u64]) =
                    match self.pointer_guard(leaf, f.meta, &guard) {
                        Some((t, b)) => {
                            forest_core::pause::pause_point("delete:pointer-read");
                            targets[2] = t;
                            retire[0] = b;
                            (&targets, &retire)
                        }
                        None => (&targets[..2], &[]),
                    };
                match self.pmwcas(&guard, targets, retire) {
                    Outcome::Succeeded => {
                        if path.len > 0 && self.underfull(leaf, new_s, &guard) {
                            self.merge_around(key, &guard);
                        }
                        return true;
                    }
                    Outcome::Failed => continue,
                    Outcome::PoolExhausted => continue 'op,
                }
            }
        }
    }

    /// For a PMwCAS that hides record-pointer version `m` and retires its value block: the
    /// block the pointer word holds now, and a target holding the word at it. The in-place
    /// swap (§4.2.3) changes only the pointer word, so without this target a swap landing
    /// after this read would leave the PMwCAS free to succeed and retire a block the swap
    /// already freed (and leak the swap's). The word keeps its value (not 0): a reader that
    /// saw the version visible may still follow it, to a block the epoch keeps.
    fn pointer_guard(&self, leaf: u64, m: Metadata, guard: &Guard) -> Option<(Target, u64)> {
        if !m.is_record_pointer() {
            return None;
        }
        let off = Self::pointer_off(leaf, m);
        let b = self.pool.read(self.heap.word(off), guard);
        Some((Target::new(off, b, b), b))
    }

    /// Whether a leaf's live bytes fell below `min_size` (§5.1).
    pub(crate) fn underfull(&self, leaf: u64, s: StatusWord, guard: &Guard) -> bool {
        let min = self.config.min_size as u64;
        if HEADER_BYTES + s.block_size().saturating_sub(s.delete_size()) >= min {
            return false;
        }
        self.live_bytes(leaf, guard) < min
    }
}

/// A record-pointer record's block to link at completion: the value, and the record's pointer
/// word (`None` for an inline record).
pub(crate) struct Link<'v> {
    value: &'v [u8],
    at: Option<u64>,
}

/// How a completion ended.
pub(crate) enum Completion {
    Done(bool),
    /// Start over from the root (frozen leaf, exhausted pool).
    Retry,
}
