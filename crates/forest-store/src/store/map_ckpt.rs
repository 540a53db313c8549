//! Map checkpoints of a bwtree on its LSS (issue 17; Bw-tree §V-A: the DC's checkpoint
//! advances the TC's redo scan start point, RSSP; `crate::llama`, "Recovery").
//!
//! - [`take`] is the checkpoint itself, shared by `Store::checkpoint` and the checkpointer:
//!   rotate the logs at `R` (every shard held, so every write below `R` has applied), sync
//!   (ESL ≥ `R` − 1), flush every resident page, publish a map checkpoint with RSSP `R`,
//!   then delete the logs wholly below the older kept checkpoint's RSSP.
//! - [`Checkpointer`]: the scheduled ones run on this background thread. A writer whose
//!   write found one due (`Llama::map_due`, after its acknowledgement) only wakes it, so no
//!   writer waits for a checkpoint beyond the rotation's brief hold of the shards, as with
//!   any checkpoint. One runs at a time (the claim, and the store's checkpoint lock); an
//!   error is printed and kept for `StoreStats` (`MemoryStats::map_checkpoint_error`); so
//!   is a panic, which ends that checkpoint, not the thread.
//! - Space: the cleaner takes victims only below the older kept checkpoint's S and removes a
//!   segment it emptied only once two later checkpoints were taken (forest-bwtree
//!   `map_checkpoint.rs`), so with no checkpoint the LSS only grows. The thread therefore
//!   also takes one, every [`SPACE_POLL`] at most, when a checkpoint would let the cleaner
//!   gain (`BwTree::map_checkpoint_would_let_clean`: the LSS above its space target, and an
//!   emptied segment waiting or a segment the cleaner could pick at or above the older kept
//!   S), and either a sixteenth of the LSS was written since the last one it took (a busy
//!   store: checkpoints follow the LSS's growth) or neither the LSS took a byte nor the store
//!   an LSN since the last poll or checkpoint (an idle store, whose writes alone would never
//!   trigger one; a store writing into resident pages is not idle, so it does not flush them
//!   all every other poll). Two
//!   checkpoints with no LSS write between them move both kept S past every segment the
//!   cleaner could pick, so an idle store reaches its target (when the cleaner can) and is
//!   then never due again: no checkpoint loop at rest. After a failed one the idle path waits
//!   for a checkpoint that succeeds (a failing one is retried after a sixteenth, not every
//!   poll).
//! - Shutdown: the store stops the thread (it finishes a checkpoint it began) before it
//!   stops its group commit; the thread holds the store's parts by `Arc`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;
use std::time::Duration;

use forest_bwtree::BwTree;
use forest_core::{Error, Result};
use parking_lot::Mutex;

use super::CheckpointState;
use crate::checkpoint::CheckpointInfo;
use crate::file::Dir;
use crate::llama::MapSchedule;
use crate::lsn::LsnAllocator;
use crate::wal::group_commit::GroupCommit;

/// What a map checkpoint uses of the store.
pub(super) struct Parts {
    pub(super) dir: Arc<dyn Dir>,
    pub(super) commit: Arc<GroupCommit>,
    pub(super) lsns: Arc<LsnAllocator>,
    pub(super) checkpoints: Arc<Mutex<CheckpointState>>,
    pub(super) count: Arc<AtomicU64>,
    pub(super) tree: Arc<BwTree>,
    pub(super) map: Arc<MapSchedule>,
}

/// A map checkpoint (module doc); the caller holds the store's checkpoint lock (`state`).
pub(super) fn take(
    dir: &dyn Dir,
    commit: &GroupCommit,
    lsns: &LsnAllocator,
    count: &AtomicU64,
    (tree, map): (&BwTree, &MapSchedule),
    state: &mut CheckpointState,
) -> Result<CheckpointInfo> {
    let fresh = super::fresh_logs_in(dir, lsns, commit.shard_count(), state)?;
    let (start_lsn, old_logs) = commit.rotate(fresh)?;
    state.retire(old_logs, start_lsn);
    commit.sync()?;
    forest_core::pause::pause_point("store:map-checkpoint-synced");
    map.checkpoint(tree, start_lsn)?;
    count.fetch_add(1, Ordering::Relaxed);
    state.map_rssps.push(start_lsn);
    let excess = state.map_rssps.len().saturating_sub(2);
    state.map_rssps.drain(..excess);
    if state.map_rssps.len() == 2 {
        let older = state.map_rssps[0];
        let mut removed = false;
        let mut kept = Vec::new();
        for (name, lsn_end) in state.retired.drain(..) {
            if lsn_end <= older {
                dir.remove(&name)?;
                removed = true;
            } else {
                kept.push((name, lsn_end));
            }
        }
        state.retired = kept;
        if removed {
            dir.sync_dir()?;
        }
        // A full checkpoint from before the switch-over to map checkpoints, at or below the
        // older kept RSSP, is superseded by both kept map checkpoints (recovery reads those):
        // delete it after the log deletion above is durable (review rev-mapdef F3).
        let mut stale = false;
        for name in dir.list()? {
            if crate::checkpoint::parse_checkpoint_name(&name).is_some_and(|s| s <= older) {
                dir.remove(&name)?;
                stale = true;
            }
        }
        if stale {
            dir.sync_dir()?;
        }
    }
    Ok(CheckpointInfo {
        start_lsn,
        end_lsn: start_lsn - 1,
        entry_count: 0,
        bytes: 0,
    })
}

/// How often the checkpointer looks at the LSS's space (module doc).
const SPACE_POLL: Duration = Duration::from_millis(200);

#[derive(Default)]
struct Wake {
    /// (a checkpoint is due, stop).
    state: std::sync::Mutex<(bool, bool)>,
    cv: Condvar,
}

/// The background thread that takes scheduled map checkpoints (module doc).
pub(super) struct Checkpointer {
    wake: Arc<Wake>,
    handle: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(parts: Parts) -> Result<Self> {
        let wake = Arc::new(Wake::default());
        let theirs = Arc::clone(&wake);
        let handle = std::thread::Builder::new()
            .name("map-checkpointer".into())
            .spawn(move || run(&parts, &theirs))
            .map_err(|source| Error::Io {
                path: "map-checkpointer".into(),
                op: "spawn the map checkpointer thread",
                source,
            })?;
        Ok(Self {
            wake,
            handle: Some(handle),
        })
    }

    /// Asks for the checkpoint a writer claimed (`Llama::map_due`); never waits for it.
    pub(super) fn wake(&self) {
        let mut state = self.wake.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = true;
        self.wake.cv.notify_one();
    }

    /// Stops the thread after the checkpoint it is taking, if any (idempotent).
    pub(super) fn stop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        {
            let mut state = self.wake.state.lock().unwrap_or_else(|e| e.into_inner());
            state.1 = true;
            self.wake.cv.notify_one();
        }
        // A panic in a checkpoint was printed; the store's files are as after a crash.
        let _ = handle.join();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The checkpointer's space rule (module doc): a checkpoint would let the cleaner gain, and
/// a sixteenth of the LSS was written since `written_at` (its bytes written when the
/// thread's last checkpoint began) or, if `idle_allowed`, the store is idle: [`activity`]
/// is still `seen` (as at the last poll or checkpoint's end).
fn space_due(parts: &Parts, written_at: u64, seen: (u64, u64), idle_allowed: bool) -> bool {
    let Some(lss) = parts.tree.lss() else {
        return false;
    };
    let grew = lss.stats().bytes_written.saturating_sub(written_at) >= lss.total_bytes() / 16;
    let idle = idle_allowed && activity(parts) == seen;
    (grew || idle) && parts.tree.map_checkpoint_would_let_clean()
}

fn bytes_written(tree: &BwTree) -> u64 {
    tree.lss().map_or(0, |lss| lss.stats().bytes_written)
}

/// (LSS bytes written, the store's next LSN): unchanged while the store is idle.
fn activity(parts: &Parts) -> (u64, u64) {
    (bytes_written(&parts.tree), parts.lsns.next())
}

fn run(parts: &Parts, wake: &Wake) {
    let mut written_at = 0;
    let mut seen = activity(parts);
    let mut idle_allowed = true;
    loop {
        {
            let mut state = wake.state.lock().unwrap_or_else(|e| e.into_inner());
            if !state.0 && !state.1 {
                state = wake
                    .cv
                    .wait_timeout(state, SPACE_POLL)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if state.1 {
                return;
            }
            let asked = std::mem::take(&mut state.0);
            drop(state);
            // A writer's claim (`asked`), or our own for space.
            let claimed =
                asked || (space_due(parts, written_at, seen, idle_allowed) && parts.map.claim());
            seen = activity(parts);
            if !claimed {
                continue;
            }
        }
        written_at = bytes_written(&parts.tree);
        // A panic ends this checkpoint as an error would (its files are as after a crash)
        // and not the thread: otherwise the claim stays taken and no scheduled checkpoint
        // runs again, silently (review rev-mapdef F5). The checkpoint lock does not poison.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut state = parts.checkpoints.lock();
            parts
                .commit
                .check_failed()
                .and_then(|()| {
                    take(
                        &*parts.dir,
                        &parts.commit,
                        &parts.lsns,
                        &parts.count,
                        (&parts.tree, &parts.map),
                        &mut state,
                    )
                })
                .map_err(|e| e.to_string())
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("the map checkpoint panicked: {what}"))
        });
        idle_allowed = result.is_ok();
        if let Err(e) = result {
            eprintln!("forest-store: scheduled map checkpoint: {e}");
            parts.map.failed(e);
        }
        // The checkpoint's own flushes are not a sign of a busy store.
        seen = activity(parts);
        parts.map.done();
    }
}
