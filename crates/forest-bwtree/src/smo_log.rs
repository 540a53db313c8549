//! The Bw-tree's SMOs on an LSS as system transactions (TSBw §II-E, Algorithm 1; Bw-tree
//! §IV-C "a thread that meets an SMO must complete it", §V-A "an SMO is logged as a system
//! transaction, committed only if its CAS won"; issue 17; docs/ARCHITECTURE.md "System
//! transactions"). forest-llama's `sys_txn` does the logging; this module says what each SMO
//! step logs, and encodes the deltas (docs/FORMAT.md "System-transaction units").
//!
//! - split = T1 {Allocate Q, Q's image (records <= ESL, the LSN rule), split delta on P}
//!   (`split.rs` `split`), T2 {index-term delta on the parent} (`complete_split`; every
//!   attempt is its own transaction, so a lost CAS is an abort and the retry a new one);
//!   a new root: {Allocate root, its image, root word} (`grow_root`).
//! - merge = T1 {remove-node delta on R} (`merge_into_left`, `collapse_root`), T2
//!   {index-term delete on the parent} (`delete_index_term`), T3 {node-merge delta on L naming
//!   R's newest piece, Free R} (`complete_merge`); a root collapse: {root word, Free R}.
//!
//! Each step's CAS runs inside [`BwTree::smo_step`], which reserves the unit before the CAS
//! (forest-llama `SysTxn::commit_if`): a step commits only if its CAS won, and a thread that
//! sees the step's result (and so flushes, or logs the next step) reserves after the unit.
//! So in the LSS a split's T2 lies after its T1, a merge's T2 after its T1 and T3 after T2,
//! and every piece of a page written after an SMO on it lies after the SMO's unit.
//!
//! In memory (no LSS) a step is its bare CAS: nothing is encoded or allocated. A step the
//! LSS refuses (`Step::NotAttempted`: a unit larger than a segment, e.g. a split's Q of
//! large values with small segments) is aborted, never run unlogged, unless the LSS is
//! poisoned (review rev-systxn F1).
//!
//! Checkpoints: a mapping-table checkpoint plus the LSS records at or after its S rebuild
//! every page (docs/ARCHITECTURE.md "SMOs and checkpoints"). A page whose newest logged state
//! is a unit below S (a split's Q before its first flush, P under its split delta, a parent
//! under an index term, a new root, a merged L) is flushed by the checkpoint's walk, which
//! names that piece, at or above S (`BwTree::checkpoint_piece`). The walk knows such pages
//! from `unit_pages` (page → newest committed unit that changed it, kept on any LSS since a
//! tree may turn checkpoints on after its first SMOs, forgotten below each published S), which is complete for every unit below
//! S because each step holds `smo_barrier` shared from before its reservation until it has
//! published its new pages and registered its unit, and the walk takes it exclusively once
//! (after S, before deciding its first page). A step that frees a PID frees it in memory
//! before it leaves the barrier (`smo_step_then`), so a walk after a unit below S never meets
//! the PID that unit freed still live (review rev-recov F3).
//!
//! Crash points (pause points, test feature): `txn:committed` after every unit is filled
//! (before the step's follow-up), in addition to the SMO's own points (`split:*`, `merge:*`),
//! which now also lie after their step's unit.

use crossbeam_epoch::{Guard, Shared};
use forest_core::pause::pause_point;
use forest_core::Error;
use forest_llama::lss::LssAddress;
use forest_llama::page_state::PageLocation;
use forest_llama::sys_txn::{SysTxn, TxnOutcome};
use forest_llama::Pid;

use crate::delta::{Kind, Node};
use crate::flush::{PageFlush, PageImage};
use crate::gc::node_ref;
use crate::storage::Storage;
use crate::BwTree;

/// Update-D kinds in a unit (the `kind` byte; docs/FORMAT.md).
pub mod kind {
    /// A page's first state, as a page-image payload (a split's Q, a new root).
    pub const PAGE_IMAGE: u8 = 1;
    /// Split delta on P: separator, Q.
    pub const SPLIT: u8 = 2;
    /// Index-term delta on a parent: separator, child, child's high key.
    pub const INDEX_TERM: u8 = 3;
    /// Remove-node delta on R (no fields).
    pub const REMOVE_NODE: u8 = 4;
    /// Index-term delete on a parent: separator.
    pub const INDEX_TERM_DELETE: u8 = 5;
    /// Node-merge delta on L: separator (R's low key), R, R's newest piece, high key, side
    /// link.
    pub const NODE_MERGE: u8 = 6;
    /// The root word now names this page (a grown root, a collapse's child); the unit's
    /// Update-D PID is the new root.
    pub const ROOT: u8 = 7;
    /// A merge's commit on R (its remove node delta becomes committed: the merge can no
    /// longer be withdrawn; no fields).
    pub const MERGE_COMMIT: u8 = 8;
}

/// A decoded SMO delta of a unit (tests and, later, recovery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmoDelta {
    PageImage(PageImage),
    Split {
        separator: Vec<u8>,
        right: Pid,
    },
    IndexTerm {
        separator: Vec<u8>,
        child: Pid,
        high: Option<Vec<u8>>,
    },
    RemoveNode,
    IndexTermDelete {
        separator: Vec<u8>,
    },
    NodeMerge {
        separator: Vec<u8>,
        right: Pid,
        right_piece: Option<LssAddress>,
        high: Option<Vec<u8>>,
        side_link: Pid,
    },
    Root,
    MergeCommit,
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    let len = u16::try_from(key.len()).expect("key length fits u16");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(key);
}

fn put_opt_key(out: &mut Vec<u8>, key: Option<&[u8]>) {
    match key {
        None => out.push(0),
        Some(key) => {
            out.push(1);
            put_key(out, key);
        }
    }
}

impl SmoDelta {
    /// Its `kind` byte and bytes in a unit.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut out = Vec::new();
        let code = match self {
            SmoDelta::PageImage(image) => return (kind::PAGE_IMAGE, image.encode()),
            SmoDelta::Split { separator, right } => {
                put_key(&mut out, separator);
                out.extend_from_slice(&right.to_le_bytes());
                kind::SPLIT
            }
            SmoDelta::IndexTerm {
                separator,
                child,
                high,
            } => {
                put_key(&mut out, separator);
                out.extend_from_slice(&child.to_le_bytes());
                put_opt_key(&mut out, high.as_deref());
                kind::INDEX_TERM
            }
            SmoDelta::RemoveNode => kind::REMOVE_NODE,
            SmoDelta::IndexTermDelete { separator } => {
                put_key(&mut out, separator);
                kind::INDEX_TERM_DELETE
            }
            SmoDelta::NodeMerge {
                separator,
                right,
                right_piece,
                high,
                side_link,
            } => {
                put_key(&mut out, separator);
                out.extend_from_slice(&right.to_le_bytes());
                let piece = right_piece.map_or(u64::MAX, LssAddress::to_bits);
                out.extend_from_slice(&piece.to_le_bytes());
                put_opt_key(&mut out, high.as_deref());
                out.extend_from_slice(&side_link.to_le_bytes());
                kind::NODE_MERGE
            }
            SmoDelta::Root => kind::ROOT,
            SmoDelta::MergeCommit => kind::MERGE_COMMIT,
        };
        (code, out)
    }

    /// Decodes an Update-D of `code` with `bytes`; the error says what is wrong. Never panics.
    pub fn decode(code: u8, bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, at: 0 };
        let delta = match code {
            kind::PAGE_IMAGE => return PageImage::decode(bytes).map(SmoDelta::PageImage),
            kind::SPLIT => SmoDelta::Split {
                separator: r.key()?,
                right: r.u64()?,
            },
            kind::INDEX_TERM => SmoDelta::IndexTerm {
                separator: r.key()?,
                child: r.u64()?,
                high: r.opt_key()?,
            },
            kind::REMOVE_NODE => SmoDelta::RemoveNode,
            kind::INDEX_TERM_DELETE => SmoDelta::IndexTermDelete {
                separator: r.key()?,
            },
            kind::NODE_MERGE => SmoDelta::NodeMerge {
                separator: r.key()?,
                right: r.u64()?,
                right_piece: match r.u64()? {
                    u64::MAX => None,
                    bits => Some(
                        LssAddress::from_bits(bits)
                            .ok_or_else(|| format!("node merge: bad address {bits:#x}"))?,
                    ),
                },
                high: r.opt_key()?,
                side_link: r.u64()?,
            },
            kind::ROOT => SmoDelta::Root,
            kind::MERGE_COMMIT => SmoDelta::MergeCommit,
            other => return Err(format!("unknown SMO delta kind {other}")),
        };
        if r.at != bytes.len() {
            return Err(format!(
                "SMO delta kind {code}: {} bytes after its fields",
                bytes.len() - r.at
            ));
        }
        Ok(delta)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| format!("SMO delta ends inside a field at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
    fn key(&mut self) -> Result<Vec<u8>, String> {
        let mut w = [0u8; 2];
        w.copy_from_slice(self.take(2)?);
        let len = u16::from_le_bytes(w) as usize;
        Ok(self.take(len)?.to_vec())
    }
    fn opt_key(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.take(1)?[0] {
            0 => Ok(None),
            1 => self.key().map(Some),
            flag => Err(format!("key flag {flag} is neither 0 nor 1")),
        }
    }
}

/// The address of the newest piece of the state `node` (its newest flush delta's), if any.
pub(crate) fn newest_piece(node: &Node) -> Option<LssAddress> {
    let mut current = Some(node);
    while let Some(n) = current {
        if let Kind::Flush(f, _) = &n.kind {
            return Some(f.address);
        }
        current = n.next();
    }
    None
}

/// One Update-D of a step: the page, its newest piece, the delta, the LSN range of the
/// records in it.
pub(crate) type LoggedDelta = (Pid, Option<LssAddress>, SmoDelta, (u64, u64));

/// What one SMO step logs: its deltas and the PIDs it frees (its allocations are
/// [`BwTree::smo_step`]'s `allocated`).
#[derive(Default)]
pub(crate) struct StepLog {
    pub(crate) deltas: Vec<LoggedDelta>,
    pub(crate) freed: Vec<Pid>,
}

impl StepLog {
    pub(crate) fn delta(mut self, pid: Pid, prev: Option<LssAddress>, delta: SmoDelta) -> Self {
        self.deltas.push((pid, prev, delta, (0, 0)));
        self
    }
    pub(crate) fn delta_with_lsns(mut self, pid: Pid, delta: SmoDelta, lsns: (u64, u64)) -> Self {
        self.deltas.push((pid, None, delta, lsns));
        self
    }
    pub(crate) fn freed(mut self, pid: Pid) -> Self {
        self.freed.push(pid);
        self
    }
}

/// How one SMO step ([`BwTree::smo_step`]) ended: its CAS won with `W`, lost with `L`, or
/// was not attempted because a healthy LSS refused the step's unit (larger than a segment:
/// the step is aborted, its allocations freed, and the tree stays as it was).
#[must_use]
pub(crate) enum Step<W, L> {
    Won(W),
    Lost(L),
    NotAttempted,
}

impl BwTree {
    /// Runs one SMO step: `cas` is its CAS; on an LSS the step is a system transaction whose
    /// unit `log` builds (called only on an LSS, so memory mode encodes nothing). If the CAS
    /// loses, the PIDs the step allocated are freed (TAbort).
    ///
    /// An LSS that refuses the unit for an I/O error (poisoned: it makes nothing durable any
    /// more, and the store already fails on it) runs the step unlogged, counted in
    /// `sys_txn_errors`, so the tree keeps working in memory. Any other refusal (a unit
    /// larger than a segment, review rev-systxn F1) comes from a healthy LSS whose later
    /// pieces stay durable: the step is then aborted ([`Step::NotAttempted`], counted in
    /// `sys_txn_refused`), since running it unlogged would let pieces that show its result
    /// become durable with no unit allocating its pages.
    pub(crate) fn smo_step<W, L>(
        &self,
        log: impl FnOnce() -> StepLog,
        allocated: &[Pid],
        cas: impl FnOnce() -> Result<W, L>,
        guard: &Guard,
    ) -> Step<W, L> {
        self.smo_step_then(log, allocated, cas, |_| {}, guard)
    }

    /// [`Self::smo_step`], running `on_won` once the CAS won, before the step leaves
    /// `smo_barrier`: a step that frees a PID (a merge's T3, a root collapse) frees it in
    /// memory there, so a checkpoint whose S lies above the step's unit finds the PID free
    /// (module doc, "Checkpoints"; review rev-recov F3).
    pub(crate) fn smo_step_then<W, L>(
        &self,
        log: impl FnOnce() -> StepLog,
        allocated: &[Pid],
        cas: impl FnOnce() -> Result<W, L>,
        on_won: impl FnOnce(&W),
        guard: &Guard,
    ) -> Step<W, L> {
        let free_allocated = || {
            for &pid in allocated {
                self.free_page(pid, guard);
            }
        };
        let Some(storage) = &self.storage else {
            return match cas() {
                Ok(won) => {
                    on_won(&won);
                    Step::Won(won)
                }
                Err(lost) => {
                    free_allocated();
                    Step::Lost(lost)
                }
            };
        };
        // Until the step's pages are published and registered (module doc, "Checkpoints").
        let _barrier = storage
            .smo_barrier
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let step = log();
        let changed: Vec<Pid> = step.deltas.iter().map(|d| d.0).collect();
        let freed = step.freed.clone();
        let mut txn = SysTxn::begin(&storage.lss, &storage.txn_stats);
        for &pid in allocated {
            txn.note_allocated(pid);
        }
        for (pid, prev, delta, (lsn_low, lsn_high)) in step.deltas {
            let (code, bytes) = delta.encode();
            txn.update_d(pid, prev, code, bytes, lsn_low, lsn_high);
        }
        for pid in step.freed {
            txn.free(pid);
        }
        let mut cas = Some(cas);
        let mut result = None;
        let outcome = txn.commit_if(
            || {
                let r = cas.take().map(|cas| cas());
                let won = matches!(r, Some(Ok(_)));
                result = r;
                won
            },
            |pid| self.free_page(pid, guard),
        );
        let publish = || {
            for &pid in allocated {
                self.unpublished(pid, false);
            }
        };
        match (outcome, result) {
            (Ok(TxnOutcome::Committed(unit)), Some(Ok(won))) => {
                publish();
                // Registered also before checkpoints are turned on: the first checkpoint
                // needs every unit below its S (review rev-smo F3). One entry per page at
                // most, forgotten below each published S.
                {
                    let mut pages = storage.unit_pages.lock().unwrap_or_else(|e| e.into_inner());
                    for pid in changed {
                        let newest = pages.entry(pid).or_insert(unit);
                        *newest = (*newest).max(unit);
                    }
                    for pid in freed {
                        pages.remove(&pid);
                    }
                }
                on_won(&won);
                pause_point("txn:committed");
                Step::Won(won)
            }
            // `commit_if` freed the allocations.
            (Ok(TxnOutcome::Aborted), Some(Err(lost))) => {
                publish();
                Step::Lost(lost)
            }
            (Err(Error::Io { .. }), None) => {
                publish();
                storage.sys_txn_errors.incr();
                match cas.take().map(|cas| cas()) {
                    Some(Ok(won)) => {
                        on_won(&won);
                        Step::Won(won)
                    }
                    Some(Err(lost)) => {
                        free_allocated();
                        Step::Lost(lost)
                    }
                    None => unreachable!("the CAS runs once"),
                }
            }
            (Err(_), None) => {
                storage.sys_txn_refused.incr();
                free_allocated();
                publish();
                Step::NotAttempted
            }
            _ => unreachable!("commit_if commits iff the CAS won, and errs only before it"),
        }
    }
}

impl BwTree {
    /// What a mapping-table checkpoint records for the resident page `pid` at `state`
    /// (module doc, "Checkpoints"): its newest piece, unless a committed unit changed the page
    /// after that piece; then the page is flushed now (an image: the unit's change is a
    /// structure delta, or the page has no piece) and that piece, at or above S, is named.
    /// Called by the walk after [`Self::checkpoint_barrier`].
    ///
    /// Errors: that flush's (a poisoned LSS, or an image larger than a segment on a healthy
    /// one): the checkpoint fails and publishes nothing, since the page's older piece lacks
    /// the unit's change and the unit lies below S (review rev-smo F2).
    pub(crate) fn checkpoint_piece(
        &self,
        storage: &Storage,
        pid: Pid,
        state: &Node,
    ) -> Result<Option<LssAddress>, Error> {
        let newest = newest_piece(state);
        let unit = storage
            .unit_pages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
            .copied();
        let Some(unit) = unit else {
            return Ok(newest);
        };
        if newest.is_some_and(|piece| piece > unit) {
            return Ok(newest);
        }
        loop {
            match self.flush_page(pid, &storage.lss)? {
                PageFlush::Flushed { address, .. } => return Ok(Some(address)),
                PageFlush::Lost { .. } => continue, // the page changed: flush it again
                // Clean: a flush since `state` wrote the change (after the unit). Frozen: a
                // merge's R or a collapsing root, frozen clean (`merge.rs` `clean_state`):
                // its newest piece holds every change of the page below the remove node
                // delta. Gone: freed.
                PageFlush::Clean | PageFlush::Frozen | PageFlush::Gone => {
                    // Pinned while the state read is used.
                    let _guard = crossbeam_epoch::pin();
                    let now = match self.table.read_location(pid) {
                        PageLocation::Memory(ptr) if !ptr.is_null() => {
                            newest_piece(node_ref(Shared::from(ptr)))
                        }
                        PageLocation::Stored(bits) => LssAddress::from_bits(bits),
                        _ => None,
                    };
                    return Ok(now.or(newest));
                }
            }
        }
    }

    /// Waits for every SMO step in flight (a checkpoint's walk, once, after its S): every
    /// unit below S is then registered in `unit_pages` and its pages published.
    pub(crate) fn checkpoint_barrier(storage: &Storage) {
        drop(
            storage
                .smo_barrier
                .write()
                .unwrap_or_else(|e| e.into_inner()),
        );
    }

    /// Forgets the units below `start` (a checkpoint's S, once it is published): every page
    /// they changed has a newer piece or is named by its unit's own scan range no more.
    pub(crate) fn forget_units_below(storage: &Storage, start: LssAddress) {
        storage
            .unit_pages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, unit| *unit >= start);
    }

    /// Marks page `pid`, just allocated by an SMO step (before its state is installed), as
    /// unpublished (`on`), or ends that once the step committed or aborted. A flush skips an
    /// unpublished page (`flush.rs`, as a frozen one): its piece would lie before the unit
    /// that allocates the page, or belong to a page the step frees on a lost CAS (a flusher
    /// found the new page through `page_ids` in the racing test). A flush reads the state,
    /// then checks the mark; a mark cleared after the unit was reserved makes any flush that
    /// reads it cleared reserve after the unit. No-op in memory.
    pub(crate) fn unpublished(&self, pid: Pid, on: bool) {
        let Some(storage) = &self.storage else {
            return;
        };
        let mut pids = storage
            .unpublished
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if on {
            pids.push(pid);
        } else {
            pids.retain(|&p| p != pid);
        }
        storage
            .unpublished_count
            .store(pids.len(), std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether page `pid` is unpublished (see [`Self::unpublished`]).
    pub(crate) fn is_unpublished(&self, pid: Pid) -> bool {
        let Some(storage) = &self.storage else {
            return false;
        };
        if storage
            .unpublished_count
            .load(std::sync::atomic::Ordering::SeqCst)
            == 0
        {
            return false;
        }
        storage
            .unpublished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&pid)
    }

    /// The SMOs' system-transaction counters, if on an LSS.
    pub fn sys_txn_stats(&self) -> Option<&forest_llama::sys_txn::TxnStats> {
        self.storage.as_ref().map(|s| &s.txn_stats)
    }

    /// SMO steps run unlogged because a poisoned LSS refused their unit (module doc), if on
    /// an LSS.
    pub fn sys_txn_errors(&self) -> Option<u64> {
        self.storage.as_ref().map(|s| s.sys_txn_errors.get())
    }

    /// SMO steps aborted because a healthy LSS refused their unit (larger than a segment:
    /// the step was not attempted), if on an LSS.
    pub fn sys_txn_refused(&self) -> Option<u64> {
        self.storage.as_ref().map(|s| s.sys_txn_refused.get())
    }
}
