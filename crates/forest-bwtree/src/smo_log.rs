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
//! In memory (no LSS) a step is its bare CAS: nothing is encoded or allocated.
//!
//! Crash points (pause points, test feature): `txn:committed` after every unit is filled
//! (before the step's follow-up), in addition to the SMO's own points (`split:*`, `merge:*`),
//! which now also lie after their step's unit.

use crossbeam_epoch::Guard;
use forest_core::pause::pause_point;
use forest_llama::lss::LssAddress;
use forest_llama::sys_txn::{SysTxn, TxnOutcome};
use forest_llama::Pid;

use crate::delta::{Kind, Node};
use crate::flush::PageImage;
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

impl BwTree {
    /// Runs one SMO step: `cas` is its CAS; on an LSS the step is a system transaction whose
    /// unit `log` builds (called only on an LSS, so memory mode encodes nothing). If the CAS
    /// loses, the PIDs the step allocated are freed (TAbort). Returns whether the CAS won.
    ///
    /// An LSS that refuses the unit (poisoned by an I/O error) makes nothing durable any more,
    /// so the step then runs unlogged, counted in `sys_txn_errors`: the tree keeps working in
    /// memory and the store already fails on the poisoned LSS.
    pub(crate) fn smo_step(
        &self,
        log: impl FnOnce() -> StepLog,
        allocated: &[Pid],
        cas: impl FnOnce() -> bool,
        guard: &Guard,
    ) -> bool {
        let Some(storage) = &self.storage else {
            let won = cas();
            if !won {
                for &pid in allocated {
                    self.free_page(pid, guard);
                }
            }
            return won;
        };
        let step = log();
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
        let outcome = txn.commit_if(
            || cas.take().is_some_and(|cas| cas()),
            |pid| self.free_page(pid, guard),
        );
        match outcome {
            Ok(TxnOutcome::Committed(_)) => {
                pause_point("txn:committed");
                true
            }
            Ok(TxnOutcome::Aborted) => false,
            Err(_) => {
                storage.sys_txn_errors.incr();
                let won = cas.take().is_some_and(|cas| cas());
                if !won {
                    for &pid in allocated {
                        self.free_page(pid, guard);
                    }
                }
                won
            }
        }
    }
}

impl BwTree {
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

    /// SMO steps run unlogged because the LSS refused their unit (module doc), if on an LSS.
    pub fn sys_txn_errors(&self) -> Option<u64> {
        self.storage.as_ref().map(|s| s.sys_txn_errors.get())
    }
}
