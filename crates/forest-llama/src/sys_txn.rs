//! System transactions (TSBw §II-E "System Transactions": TBegin, TCommit, TAbort; Bw-tree
//! §IV-C, §V-A "the SMO is logged as a system transaction"; issue 17, docs/ARCHITECTURE.md
//! "System transactions").
//!
//! A transaction ([`SysTxn`], from [`SysTxn::begin`]) buffers its operations in memory — the
//! active transaction table is the set of live `SysTxn` values, each owned by the thread that
//! runs its SMO, since nothing but that thread and recovery ever reads one — and TCommit
//! ([`SysTxn::commit_if`]) writes them as ONE [`RecordKind::TxnUnit`] record, so a
//! transaction is stable all or nothing and recovery, which applies whole units only, needs no
//! undo. Inside: Allocate, Free and Update-D (with the delta's bytes, the access method's
//! encoding), plus Read and Update-R of a page the transaction allocated (it is unreachable
//! until the transaction's own CAS publishes it, so those need no record of their own: its
//! state is carried as an Update-D of kind "page image").
//!
//! The order (the same as Flush's, `flush.rs`): TCommit first reserves the unit's room (its
//! address is then fixed), then runs the SMO's CAS, then copies the unit in if the CAS won, or
//! writes a failed-flush filler there and aborts if it lost. So:
//! - an SMO commits only if its own CAS won (Bw §V-A);
//! - whatever uses the SMO's result lies after its commit in the LSS (TSBw §II-E): anything
//!   that sees the new state read it after the CAS, so its own reservation comes after the
//!   unit's, whose address was fixed before the CAS.
//!
//! TAbort ([`SysTxn::abort`]) frees every PID the transaction allocated (through the access
//! method's free, which keeps its accounting) and writes nothing.
//!
//! The unit's payload is byte by byte in docs/FORMAT.md "System-transaction units";
//! [`decode_unit`] never panics (tests/it/sys_txn.rs fuzzes it).

use std::sync::atomic::{AtomicU64, Ordering};

use forest_core::{Error, Result};

use crate::lss::record::PID_NONE;
use crate::lss::{Lss, LssAddress, RecordHeader, RecordKind};
use crate::mapping_table::{MappingTable, PageState, Pid};

/// Format version of a unit payload (its first byte).
pub const UNIT_VERSION: u8 = 1;

/// Operation codes in a unit payload.
const OP_ALLOCATE: u8 = 1;
const OP_FREE: u8 = 2;
const OP_UPDATE_D: u8 = 3;

/// The `prev` word's value for "no previous piece".
const PREV_NONE: u64 = u64::MAX;

/// One operation of a system transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// The PID was allocated by the transaction.
    Allocate(Pid),
    /// The PID is freed when the transaction commits.
    Free(Pid),
    /// A delta installed on `pid` (or, for a page the transaction allocated, its first
    /// state): `kind` and `bytes` are the access method's encoding; `prev` the page's newest
    /// piece in the LSS when the delta was posted (for recovery's chain of the page).
    UpdateD {
        pid: Pid,
        prev: Option<LssAddress>,
        kind: u8,
        bytes: Vec<u8>,
    },
}

/// A decoded unit: its transaction number and operations in the order they were made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnUnit {
    pub txn: u64,
    pub ops: Vec<TxnOp>,
}

/// How a [`SysTxn::commit_if`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// The CAS won; the unit is at this address (stable once `hi_stable()` passes it).
    Committed(LssAddress),
    /// The CAS lost: a filler took the unit's room and the transaction was aborted.
    Aborted,
}

/// Counters of an LSS's system transactions.
#[derive(Default)]
pub struct TxnStats {
    next_txn: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
    active: AtomicU64,
}

impl TxnStats {
    /// Transactions committed.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }
    /// Transactions aborted (explicitly or by a lost CAS).
    pub fn aborted(&self) -> u64 {
        self.aborted.load(Ordering::Relaxed)
    }
    /// Transactions begun and not yet ended (the active transaction table's size).
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }
}

/// A system transaction in progress (TBegin to TCommit or TAbort).
#[must_use = "a system transaction ends with commit_if or abort"]
pub struct SysTxn<'a> {
    lss: &'a Lss,
    stats: &'a TxnStats,
    txn: u64,
    ops: Vec<TxnOp>,
    lsn_low: u64,
    lsn_high: u64,
    ended: bool,
}

impl<'a> SysTxn<'a> {
    /// TBegin: a transaction that will log on `lss`, counted in `stats`.
    pub fn begin(lss: &'a Lss, stats: &'a TxnStats) -> Self {
        stats.active.fetch_add(1, Ordering::Relaxed);
        Self {
            lss,
            stats,
            txn: stats.next_txn.fetch_add(1, Ordering::Relaxed) + 1,
            ops: Vec::new(),
            lsn_low: 0,
            lsn_high: 0,
            ended: false,
        }
    }

    /// This transaction's number (unique per tree attached to the LSS, from 1: a later tree on the same open LSS counts from 1 again; review rev-systxn F3: informative, recovery never keys on it).
    pub fn id(&self) -> u64 {
        self.txn
    }

    /// Allocate inside the transaction: a fresh PID of `table`, freed again if the
    /// transaction aborts.
    pub fn allocate<T: PageState>(&mut self, table: &MappingTable<T>) -> Pid {
        let pid = table.allocate();
        self.ops.push(TxnOp::Allocate(pid));
        pid
    }

    /// Records a PID allocated outside (by the caller, just before) as this transaction's.
    pub fn note_allocated(&mut self, pid: Pid) {
        self.ops.push(TxnOp::Allocate(pid));
    }

    /// Free inside the transaction: `pid` is logged free at commit. The caller frees it in
    /// memory once the transaction committed (its Free precondition: nothing reaches it).
    pub fn free(&mut self, pid: Pid) {
        self.ops.push(TxnOp::Free(pid));
    }

    /// Update-D inside the transaction: the delta of access-method `kind` with encoding
    /// `bytes` installed on `pid`, whose newest piece is `prev`; its updates' LSNs are
    /// `lsn_low..=lsn_high` (0 for none).
    pub fn update_d(
        &mut self,
        pid: Pid,
        prev: Option<LssAddress>,
        kind: u8,
        bytes: Vec<u8>,
        lsn_low: u64,
        lsn_high: u64,
    ) {
        if lsn_low > 0 && (self.lsn_low == 0 || lsn_low < self.lsn_low) {
            self.lsn_low = lsn_low;
        }
        self.lsn_high = self.lsn_high.max(lsn_high);
        self.ops.push(TxnOp::UpdateD {
            pid,
            prev,
            kind,
            bytes,
        });
    }

    /// The operations buffered so far.
    pub fn ops(&self) -> &[TxnOp] {
        &self.ops
    }

    /// TCommit of an SMO whose last step is the CAS `cas`: reserves the unit (one record),
    /// runs `cas`, and fills the unit if it won, else writes a filler in its room and aborts
    /// (freeing what the transaction allocated with `free`). A reservation error (the LSS
    /// poisoned, a unit larger than a segment) returns it without running `cas` or freeing
    /// anything: the caller decides (the transaction is then ended, logged nowhere).
    pub fn commit_if(
        mut self,
        cas: impl FnOnce() -> bool,
        free: impl FnMut(Pid),
    ) -> Result<TxnOutcome> {
        let payload = encode_unit(self.txn, &self.ops);
        let reservation = match self.lss.reserve(payload.len()) {
            Ok(r) => r,
            Err(e) => {
                self.end();
                return Err(e);
            }
        };
        if !cas() {
            reservation.fail(PID_NONE);
            self.abort_inner(free);
            return Ok(TxnOutcome::Aborted);
        }
        let mut reservation = reservation;
        let address = reservation.address();
        reservation.payload_mut().copy_from_slice(&payload);
        reservation.commit(&RecordHeader {
            kind: RecordKind::TxnUnit,
            pid: PID_NONE,
            lsn_low: self.lsn_low,
            lsn_high: self.lsn_high,
            prev: None,
        });
        self.stats.committed.fetch_add(1, Ordering::Relaxed);
        self.end();
        Ok(TxnOutcome::Committed(address))
    }

    /// TAbort: frees (with `free`) every PID the transaction allocated; writes nothing.
    pub fn abort(mut self, free: impl FnMut(Pid)) {
        self.abort_inner(free);
    }

    fn abort_inner(&mut self, mut free: impl FnMut(Pid)) {
        for op in &self.ops {
            if let TxnOp::Allocate(pid) = op {
                free(*pid);
            }
        }
        self.stats.aborted.fetch_add(1, Ordering::Relaxed);
        self.end();
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.stats.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for SysTxn<'_> {
    fn drop(&mut self) {
        // Dropped without commit or abort (an unwinding SMO): logged nowhere; its allocated
        // PIDs are the access method's to free (they are unreachable).
        self.end();
    }
}

/// Encodes a unit payload (docs/FORMAT.md "System-transaction units").
pub fn encode_unit(txn: u64, ops: &[TxnOp]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + ops.len() * 24);
    out.push(UNIT_VERSION);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&u32::try_from(ops.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&txn.to_le_bytes());
    for op in ops {
        match op {
            TxnOp::Allocate(pid) => {
                out.push(OP_ALLOCATE);
                out.extend_from_slice(&pid.to_le_bytes());
            }
            TxnOp::Free(pid) => {
                out.push(OP_FREE);
                out.extend_from_slice(&pid.to_le_bytes());
            }
            TxnOp::UpdateD {
                pid,
                prev,
                kind,
                bytes,
            } => {
                out.push(OP_UPDATE_D);
                out.extend_from_slice(&pid.to_le_bytes());
                let prev = prev.map_or(PREV_NONE, LssAddress::to_bits);
                out.extend_from_slice(&prev.to_le_bytes());
                out.push(*kind);
                let len = u32::try_from(bytes.len()).expect("a delta fits a u32");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    out
}

/// A cursor over payload bytes that fails instead of panicking.
struct Cursor<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Cursor<'b> {
    fn take(&mut self, n: usize) -> std::result::Result<&'b [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "unit payload ends at byte {} inside a field of {n} bytes at {}",
                    self.bytes.len(),
                    self.at
                )
            })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
}

/// Decodes a unit payload; an error says what is wrong and where. Never panics.
pub fn decode_unit(bytes: &[u8]) -> std::result::Result<TxnUnit, String> {
    let mut c = Cursor { bytes, at: 0 };
    let version = c.u8()?;
    if version != UNIT_VERSION {
        return Err(format!(
            "unit payload version {version}, expected {UNIT_VERSION}"
        ));
    }
    if c.take(3)? != [0, 0, 0] {
        return Err("unit payload reserved bytes 1..4 are not zero".into());
    }
    let count = c.u32()?;
    let txn = c.u64()?;
    // Each operation takes at least 9 bytes: a count beyond that is damage, not a reason to
    // allocate.
    if count as usize > bytes.len() / 9 {
        return Err(format!(
            "unit payload of {} bytes announces {count} operations",
            bytes.len()
        ));
    }
    let mut ops = Vec::with_capacity(count as usize);
    for i in 0..count {
        let at = c.at;
        let op = match c.u8()? {
            OP_ALLOCATE => TxnOp::Allocate(c.u64()?),
            OP_FREE => TxnOp::Free(c.u64()?),
            OP_UPDATE_D => {
                let pid = c.u64()?;
                let prev = match c.u64()? {
                    PREV_NONE => None,
                    bits => Some(LssAddress::from_bits(bits).ok_or_else(|| {
                        format!("operation {i} at byte {at}: bad address {bits:#x}")
                    })?),
                };
                let kind = c.u8()?;
                let len = c.u32()? as usize;
                let bytes = c.take(len)?.to_vec();
                TxnOp::UpdateD {
                    pid,
                    prev,
                    kind,
                    bytes,
                }
            }
            code => return Err(format!("operation {i} at byte {at}: unknown code {code}")),
        };
        ops.push(op);
    }
    if c.at != bytes.len() {
        return Err(format!(
            "unit payload has {} bytes after its last operation",
            bytes.len() - c.at
        ));
    }
    Ok(TxnUnit { txn, ops })
}

/// Reads the unit at `address` (which must be below Hi-Stable): an error if the record there
/// is not a unit or does not decode.
pub fn read_unit(lss: &Lss, address: LssAddress) -> Result<TxnUnit> {
    let record = lss.read(address)?;
    let corrupt = |what: String| {
        let (path, offset) = lss.locate(address);
        Error::Corrupt {
            path,
            offset,
            what: format!("LSS record at address {address}: {what}"),
        }
    };
    if record.header.kind != RecordKind::TxnUnit {
        return Err(corrupt(format!(
            "a {}, not a system-transaction unit",
            record.header.kind.name()
        )));
    }
    decode_unit(&record.payload).map_err(|why| corrupt(format!("system-transaction unit: {why}")))
}
