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
//!   store: checkpoints follow the LSS's growth) or the LSS took no byte since the last
//!   poll or checkpoint (an idle store, whose writes alone would never trigger one; also a
//!   store trickling writes into resident pages, which write no LSS byte: review rev-lss2
//!   F1). Two checkpoints with no full segment written between them move both kept S past
//!   every segment the cleaner could pick, so the rule then turns false: an idle store
//!   reaches its target (when the cleaner can) and is never due again, no checkpoint loop
//!   at rest. The idle path is also bounded outright: at most [`IDLE_PER_SEGMENT`]
//!   successful idle-path checkpoints per segment of LSS bytes written (any writer, the
//!   cleaner and the checkpoints' flushes included), so a trickling store whose target the
//!   cleaner cannot reach does not flush every other poll for ever.
//! - Failures: a failed checkpoint closes the idle path for a back-off, 1 s doubling per
//!   failure up to 1 min, reset by a success (review rev-lss2 F2: an idle store gets no
//!   other schedule); the busy path retries only after another sixteenth is written.
//! - Shutdown: the store stops the thread (it finishes a checkpoint it began) before it
//!   stops its group commit; the thread holds the store's parts by `Arc`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// At most this many idle-path checkpoints succeed per segment of LSS bytes written
/// (module doc): enough for an idle store's two (both kept S past every candidate) and two
/// more (the segments the cleaner then emptied), with room for the cleaner's own writes.
const IDLE_PER_SEGMENT: u32 = 4;

/// The idle path's wait after a failed checkpoint: doubles per failure, reset on success.
const IDLE_BACKOFF_FIRST: Duration = Duration::from_secs(1);
const IDLE_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Why the checkpointer's space rule wants a checkpoint (module doc).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SpaceDue {
    No,
    /// A sixteenth of the LSS was written since the thread's last checkpoint.
    Grew,
    /// No LSS byte was written since the last poll or checkpoint.
    Idle,
}

/// The idle path's state (module doc): its budget per segment written and its back-off.
struct IdlePath {
    /// LSS bytes written when `taken` was last reset.
    epoch: u64,
    /// Idle-path checkpoints that succeeded since `epoch`.
    taken: u32,
    /// After a failure: no idle-path checkpoint before this instant.
    closed_until: Option<Instant>,
    backoff: Duration,
}

impl IdlePath {
    fn new(written: u64) -> Self {
        Self {
            epoch: written,
            taken: 0,
            closed_until: None,
            backoff: IDLE_BACKOFF_FIRST,
        }
    }

    /// Whether an idle-path checkpoint may run now, `written` LSS bytes written so far.
    fn open(&mut self, written: u64, segment_bytes: u64) -> bool {
        if written.saturating_sub(self.epoch) >= segment_bytes {
            self.epoch = written;
            self.taken = 0;
        }
        self.taken < IDLE_PER_SEGMENT && self.closed_until.is_none_or(|t| Instant::now() >= t)
    }

    fn finished(&mut self, ok: bool, idle: bool) {
        if ok {
            self.closed_until = None;
            self.backoff = IDLE_BACKOFF_FIRST;
            self.taken += u32::from(idle);
        } else {
            self.closed_until = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(IDLE_BACKOFF_MAX);
        }
    }
}

/// The checkpointer's space rule (module doc): a checkpoint would let the cleaner gain, and
/// a sixteenth of the LSS was written since `written_at` (its bytes written when the
/// thread's last checkpoint began) or the store is idle: its LSS bytes written are still
/// `seen` (as at the last poll or checkpoint's end) and the idle path is open.
fn space_due(parts: &Parts, written_at: u64, seen: u64, idle: &mut IdlePath) -> SpaceDue {
    let Some(lss) = parts.tree.lss() else {
        return SpaceDue::No;
    };
    let written = lss.stats().bytes_written;
    let due = if written.saturating_sub(written_at) >= lss.total_bytes() / 16 {
        SpaceDue::Grew
    } else if written == seen && idle.open(written, lss.config().segment_bytes) {
        SpaceDue::Idle
    } else {
        return SpaceDue::No;
    };
    if parts.tree.map_checkpoint_would_let_clean() {
        due
    } else {
        SpaceDue::No
    }
}

fn bytes_written(tree: &BwTree) -> u64 {
    tree.lss().map_or(0, |lss| lss.stats().bytes_written)
}

fn run(parts: &Parts, wake: &Wake) {
    let mut written_at = 0;
    let mut seen = bytes_written(&parts.tree);
    let mut idle = IdlePath::new(seen);
    loop {
        let due = {
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
            let due = if asked {
                SpaceDue::No
            } else {
                space_due(parts, written_at, seen, &mut idle)
            };
            let claimed = asked || (due != SpaceDue::No && parts.map.claim());
            seen = bytes_written(&parts.tree);
            if !claimed {
                continue;
            }
            due
        };
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
        idle.finished(result.is_ok(), due == SpaceDue::Idle);
        if let Err(e) = result {
            eprintln!("forest-store: scheduled map checkpoint: {e}");
            parts.map.failed(e);
        }
        // The checkpoint's own flushes are not a sign of a busy store.
        seen = bytes_written(&parts.tree);
        parts.map.done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The idle path's bound (review rev-lss2 F1): IDLE_PER_SEGMENT successes, then closed
    // until a segment of LSS bytes is written; failures count not against it.
    #[test]
    fn the_idle_path_takes_a_few_checkpoints_per_segment_written() {
        let mut idle = IdlePath::new(100);
        for _ in 0..IDLE_PER_SEGMENT {
            assert!(idle.open(100, 1000));
            idle.finished(true, true);
        }
        assert!(!idle.open(100, 1000));
        assert!(!idle.open(1099, 1000), "less than a segment written");
        assert!(idle.open(1100, 1000), "a segment written reopens it");
        // Busy-path and writer checkpoints do not use the idle budget.
        idle.finished(true, false);
        assert_eq!(idle.taken, 0);
    }

    // Review rev-lss2 F2: a failure closes the idle path for a back-off doubling per failure
    // up to IDLE_BACKOFF_MAX, and a success reopens it and resets the back-off.
    #[test]
    fn a_failure_closes_the_idle_path_for_a_doubling_back_off() {
        let mut idle = IdlePath::new(0);
        idle.finished(false, true);
        assert!(!idle.open(0, 1000), "closed right after a failure");
        assert_eq!(idle.backoff, 2 * IDLE_BACKOFF_FIRST);
        assert_eq!(idle.taken, 0, "a failure uses no budget");
        for _ in 0..10 {
            idle.finished(false, true);
        }
        assert_eq!(idle.backoff, IDLE_BACKOFF_MAX);
        // The delay passes: open again, before any success.
        idle.closed_until = Some(Instant::now());
        assert!(idle.open(0, 1000));
        idle.finished(true, true);
        assert_eq!(idle.backoff, IDLE_BACKOFF_FIRST);
        assert!(idle.closed_until.is_none() && idle.open(0, 1000));
    }
}
