//! Mapping-table checkpoints of a Bw-tree on the LSS (issue 17, recovery part 1; Bw-tree §V-A
//! "the mapping table is checkpointed", §VIII-B; TSBw §II-D; llama-notes §4): the access
//! method's part of forest-llama's `checkpoint.rs`.
//!
//! - [`BwTree::take_map_checkpoint`] walks the table with `Checkpoints::take`, naming each
//!   resident page's newest flush delta's piece, or flushing it first if a system-transaction
//!   unit below S changed it after that piece (`smo_log.rs` "Checkpoints"). A consolidation keeps that delta on the new
//!   base page (*behind* if it folded unflushed writes, `consolidate.rs` `carried_flush`), a
//!   split keeps it below the split delta, a merge's left page keeps its own, a load names
//!   the address it read and a relocation's CAS puts the new address in the word; so the
//!   newest piece of every resident page is found, which the completeness argument of
//!   `checkpoint.rs` needs.
//! - The cleaner's rule (`Checkpoints::{clean_ticket, clean_bound, may_remove}`): once a tree
//!   uses checkpoints ([`BwTree::use_map_checkpoints`]), victims are only segments wholly
//!   below the older kept checkpoint's S, and an emptied segment is removed only when
//!   `may_remove` allows it; until then it waits in `Storage::emptied` with its ticket and
//!   every cleaning pass looks at it again first.
//!
//! Invariant: with checkpoints in use, no segment is removed that a kept checkpoint's entries
//! or its scan from S could read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use forest_core::{Error, Result};
use forest_llama::checkpoint::{CheckpointInfo, Checkpoints};
use forest_llama::clean::{above_target, pick_victim_where};

use crate::gc::node_ref;
use crate::storage::Storage;
use crate::{root_word_pid, BwTree};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The checkpoints a tree's cleaner obeys, and the segments it emptied that may not go yet.
pub(crate) struct MapCheckpoints {
    pub(crate) checkpoints: Arc<Checkpoints>,
    /// Emptied segment → its `clean_ticket`.
    emptied: Mutex<BTreeMap<u64, u64>>,
}

impl BwTree {
    /// Makes this tree's cleaner obey `checkpoints` (module doc) and lets
    /// [`Self::take_map_checkpoint`] take them. Once only; refused without an LSS.
    pub fn use_map_checkpoints(&self, checkpoints: Arc<Checkpoints>) -> Result<()> {
        let Some(storage) = &self.storage else {
            return Err(Error::InvalidUse(
                "use_map_checkpoints on a tree without an LSS".into(),
            ));
        };
        storage
            .map_checkpoints
            .set(MapCheckpoints {
                checkpoints,
                emptied: Mutex::new(BTreeMap::new()),
            })
            .map_err(|_| Error::InvalidUse("use_map_checkpoints called twice".into()))
    }

    /// Takes a mapping-table checkpoint of this tree (forest-llama `Checkpoints::take`):
    /// every page's newest stable piece, the free PIDs and S. `rssp` is the store's field.
    /// Refused unless [`Self::use_map_checkpoints`] was called. Before the walk, pages whose
    /// SMO deltas no piece holds are flushed, and the root is recorded (`recover.rs`). Fails,
    /// publishing nothing, when such a page cannot be flushed (`smo_log.rs`
    /// `checkpoint_piece`).
    pub fn take_map_checkpoint(&self, rssp: u64) -> Result<CheckpointInfo> {
        let (storage, map) = self.map_checkpoints().ok_or_else(|| {
            Error::InvalidUse("take_map_checkpoint before use_map_checkpoints".into())
        })?;
        let root = || {
            // After S (forest-llama `walk`), before the first page is decided: wait once for
            // the SMO steps in flight, so every unit below S is registered (`smo_log.rs`
            // "Checkpoints"); pages with SMO deltas no piece holds get one (`recover.rs`);
            // then the root as of now (later root changes are units >= S).
            BwTree::checkpoint_barrier(storage);
            self.flush_unlogged_structure(&storage.lss)?;
            Ok(Some(root_word_pid(self.root_word())))
        };
        let info = map.checkpoints.take_with_root(
            &self.table,
            &storage.lss,
            rssp,
            root,
            |pid, state| self.checkpoint_piece(storage, pid, node_ref(state)),
        )?;
        BwTree::forget_units_below(storage, info.start);
        Ok(info)
    }

    /// The tree's storage and checkpoints, if it uses them.
    pub(crate) fn map_checkpoints(&self) -> Option<(&Storage, &MapCheckpoints)> {
        let storage = self.storage.as_ref()?;
        Some((storage, storage.map_checkpoints.get()?))
    }

    /// A victim for the cleaner: by cost-benefit among the segments it may remove in the end
    /// (with checkpoints: wholly below the older kept S, not already emptied and waiting).
    pub(crate) fn pick_clean_victim(&self, storage: &Storage) -> Option<u64> {
        let Some(map) = storage.map_checkpoints.get() else {
            return pick_victim_where(&storage.lss, |_| true);
        };
        let bound = map.checkpoints.clean_bound()?;
        let segment_bytes = storage.lss.config().segment_bytes;
        let emptied = lock(&map.emptied);
        pick_victim_where(&storage.lss, |sequence| {
            (sequence + 1) * segment_bytes <= bound.offset() && !emptied.contains_key(&sequence)
        })
    }

    /// Removes the emptied segment `sequence` now if the checkpoints allow it, else notes it
    /// with its ticket for a later pass; whether it was removed. Called with the cleaner's
    /// lock held.
    pub(crate) fn remove_emptied(&self, storage: &Storage, sequence: u64) -> Result<bool> {
        if let Some(map) = storage.map_checkpoints.get() {
            let ticket = map.checkpoints.clean_ticket();
            let end = forest_llama::lss::LssAddress::current(
                (sequence + 1) * storage.lss.config().segment_bytes,
            );
            if !map.checkpoints.may_remove(end, ticket) {
                lock(&map.emptied).entry(sequence).or_insert(ticket);
                return Ok(false);
            }
        }
        forest_core::pause::pause_point("clean:before-remove");
        storage.lss.remove_segment(sequence)?;
        storage.clean_stats.segments_cleaned.incr();
        Ok(true)
    }

    /// Removes every waiting emptied segment the checkpoints now allow; how many. Called with
    /// the cleaner's lock held.
    pub(crate) fn remove_waiting(&self, storage: &Storage) -> Result<usize> {
        let Some(map) = storage.map_checkpoints.get() else {
            return Ok(0);
        };
        let segment_bytes = storage.lss.config().segment_bytes;
        let ready: Vec<u64> = lock(&map.emptied)
            .iter()
            .filter(|&(&sequence, &ticket)| {
                let end = forest_llama::lss::LssAddress::current((sequence + 1) * segment_bytes);
                map.checkpoints.may_remove(end, ticket)
            })
            .map(|(&sequence, _)| sequence)
            .collect();
        for &sequence in &ready {
            forest_core::pause::pause_point("clean:before-remove");
            storage.lss.remove_segment(sequence)?;
            storage.clean_stats.segments_cleaned.incr();
            lock(&map.emptied).remove(&sequence);
        }
        Ok(ready.len())
    }

    /// Whether a map checkpoint would let the cleaner gain space now (the checkpointer's
    /// space rule, forest-store `store/map_ckpt.rs`): the LSS is above its space target and
    /// either an emptied segment waits for a checkpoint (`may_remove` refuses it), or a
    /// segment the cleaner could pick (wholly stable, a free byte, not waiting) ends above
    /// the older kept checkpoint's S. A checkpoint's S is at least the stable end, so two
    /// checkpoints with no LSS write between them make this false: an idle store is never
    /// due forever. False for a tree that does not use checkpoints.
    pub fn map_checkpoint_would_let_clean(&self) -> bool {
        let Some((storage, map)) = self.map_checkpoints() else {
            return false;
        };
        let factor = *storage
            .space_factor
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !above_target(&storage.lss, factor) {
            return false;
        }
        let segment_bytes = storage.lss.config().segment_bytes;
        let end = |sequence: u64| (sequence + 1) * segment_bytes;
        let emptied = lock(&map.emptied);
        let waiting = emptied.iter().any(|(&sequence, &ticket)| {
            !map.checkpoints.may_remove(
                forest_llama::lss::LssAddress::current(end(sequence)),
                ticket,
            )
        });
        // Before any checkpoint the cleaner may take nothing: every segment waits for S.
        let bound = map.checkpoints.clean_bound().map_or(0, |s| s.offset());
        waiting
            || storage
                .lss
                .clean_candidates()
                .into_iter()
                .any(|(sequence, live)| {
                    live < segment_bytes
                        && end(sequence) > bound
                        && !emptied.contains_key(&sequence)
                })
    }

    /// Segments emptied by the cleaner that the checkpoints do not let it remove yet.
    pub fn segments_waiting_for_checkpoints(&self) -> Vec<u64> {
        self.map_checkpoints()
            .map(|(_, map)| lock(&map.emptied).keys().copied().collect())
            .unwrap_or_default()
    }
}
