//! Recovery of the mapping table from the LSS (issue 17 "Recovery"; Bw-tree §V-A, §II-F;
//! TSBw §II-D Mk-Stable/Hi-Stable, §II-E system transactions; docs/ARCHITECTURE.md
//! "Recovery"). [`open_recovering`] opens an LSS directory and rebuilds what its mapping table
//! held, without reading a page: pages load on first use (`read.rs`).
//!
//! Steps:
//! 1. [`Checkpoints::open`]: the newest valid `map-<seq>`, else the older kept one; if
//!    checkpoint files exist and none is valid, open fails ([`Error::Corrupt`], naming each
//!    file): the segments the cleaner removed may be needed by a scan from the start.
//! 2. [`Lss::open`] with T (the checkpoint's `stable_end`) as the address known stable: the
//!    end of the valid prefix is found in the last segment and a torn tail after it is cut
//!    only if it lies at or above T. Why that cut is safe: a record below T was stable when
//!    the checkpoint was published and the checkpoint relies on it; nothing durable relies on
//!    a record at or above T (the store deletes WAL only below the RSSP of a published
//!    checkpoint, whose pieces lie below its T), so a record there that was made stable and
//!    then torn only loses what WAL redo from RSSP brings back. A prefix ending below T is
//!    refused ([`Error::Corrupt`]). Without any checkpoint file the scan starts at segment 0,
//!    which must exist (the cleaner removes nothing before two checkpoints are kept): a
//!    missing first segment is refused ([`MISSING_START`]).
//! 3. Scan every record from S (or 0) to the end of the stable prefix, in address order:
//!    page pieces through [`Recovery::apply_piece`]; each committed system transaction
//!    ([`RecordKind::TxnUnit`]: its presence is its commit, TSBw §II-E) applies its Allocate
//!    and Free, and its Update-D deltas are kept per page ([`RecoveredMap::unit_deltas`]) until
//!    a later (non-relocation) piece of that page supersedes them (a flush after an SMO writes
//!    the page's whole state, which includes the SMO's delta). Fillers (lost flushes, aborted
//!    transactions) and padding change nothing. A record that fails to decode below the end
//!    of the last segment's valid prefix is corruption: open fails naming file, offset, PID.
//! 4. Free PIDs: every PID below `pid_end` that recovers to neither a piece nor unit deltas,
//!    the checkpoint's free marks included. So an uncommitted or aborted transaction's
//!    Allocate (never logged, or logged only in a filler) is freed, as is a PID freed after the
//!    walk.
//!
//! 5. Live bytes of the earlier run's segments. From a version-3 checkpoint
//!    (`space_from_checkpoint`): each recovered page's chain is followed through the scan's
//!    headers while it lies at or above S; where it reaches below S, at piece A, the page's
//!    pieces the checkpoint lists up to A are its live pieces there (`checkpoint.rs` "Live
//!    pieces" says why the list holds them). No segment below S is read. If A itself is not
//!    in the list, or lies in a segment file that is missing, the open falls back to the
//!    pass below (and says so on stderr); the pieces of the chain below A are taken from the
//!    list unchecked (review rev-lss4 F2: a list that lacked one would count it dead; `forest
//!    check` names it; following the chain's headers below A is left open). Otherwise
//!    ([`rebuild_space`]): the record headers of
//!    the segments below S (read in one pass over them; no page is decoded) and those of the
//!    scan from S give each recovered page's chain (its newest piece back to its newest
//!    image, as `read.rs` follows it), and those pieces are the only live ones; the LSS's
//!    space map then tracks every segment from the oldest file on (`space.rs`
//!    `track_recovered`), so the cleaner reclaims what the earlier run left. If a chain
//!    cannot be followed (a piece not scanned or unreadable) nothing is tracked and those
//!    segments stay as before: never cleaned, never lost ([`RecoveredMap::space`] says why).
//!    A segment below S whose scan fails (damage) is kept untracked, never cleaned, the
//!    others tracked; chains reaching into it past the damage read those pieces one by one
//!    ([`SpaceRebuilt::damaged`], also printed on stderr).
//!
//! Left to the access method (forest-bwtree): applying [`RecoveredMap::unit_deltas`] on top of
//! the page's piece (or as its first state, a split's new page) and finding its root.
//! Not covered here (docs/ARCHITECTURE.md "Recovery", open points): a committed unit below S
//! whose page's newest piece the checkpoint recorded is older than the unit (the walk records
//! flushed pieces only): the checkpoint's taker must flush such pages before its walk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use forest_core::{Error, Result};
use forest_file::Dir;

use crate::checkpoint::{Checkpoints, LivePiece, MapCheckpoint, Recovery};
use crate::lss::record::record_bytes;
use crate::lss::segment::parse_segment_file_name;
use crate::lss::{Lss, LssAddress, LssConfig, OpenReport, RecordHeader, RecordKind};
use crate::mapping_table::{MappingTable, PageState, Pid, PID_COUNT_MAX};
use crate::sys_txn::{decode_unit, TxnOp};

/// The text of the error when there is no checkpoint and the first segment is missing.
pub const MISSING_START: &str = "no map checkpoint and segment 0 is missing";

/// An Update-D of a committed system transaction that no later piece of its page superseded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitDelta {
    /// The unit's address.
    pub unit: LssAddress,
    /// The transaction's number (informative).
    pub txn: u64,
    /// The page's newest piece when the delta was posted.
    pub prev: Option<LssAddress>,
    /// The access method's delta kind and encoding.
    pub kind: u8,
    pub bytes: Vec<u8>,
}

/// Counts of what the scan met.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub records: u64,
    /// Pieces that became their page's newest.
    pub pieces_applied: u64,
    /// Relocation images whose CAS had lost (dead, not applied).
    pub dead_relocations: u64,
    pub units_committed: u64,
    /// Failed-flush fillers (lost flushes and aborted transactions).
    pub fillers: u64,
}

/// What [`open_recovering`] rebuilt.
#[derive(Debug)]
pub struct RecoveredMap {
    /// The checkpoint recovery started from (its file name), if any.
    pub checkpoint: Option<(String, MapCheckpoint)>,
    /// Checkpoint files found damaged and set aside (name, why).
    pub rejected: Vec<(String, String)>,
    /// What opening the LSS found (its end, a cut tail).
    pub open: OpenReport,
    /// The scan's first address (S, or 0) and its end (the end of the stable prefix).
    pub scanned_from: LssAddress,
    pub scanned_end: LssAddress,
    /// One past the highest PID in use.
    pub pid_end: u64,
    /// PID → the address of its newest piece, ascending.
    pub pages: Vec<(Pid, LssAddress)>,
    /// Free PIDs, ascending; none of them in `pages` or `unit_deltas`.
    pub free: Vec<Pid>,
    /// PID → committed unit deltas above its newest piece, in log order (a page with no piece
    /// starts from its first, a page image).
    pub unit_deltas: BTreeMap<Pid, Vec<UnitDelta>>,
    /// Per Update-D kind, the newest committed one's PID and unit address (the Bw-tree finds
    /// its newest root change here; a later piece of the page does not erase it).
    pub newest_by_kind: BTreeMap<u8, (Pid, LssAddress)>,
    pub stats: ScanStats,
    /// The live pieces rebuilt for the earlier run's segments (step 5), or why not.
    pub space: std::result::Result<SpaceRebuilt, String>,
}

/// What step 5 gave the LSS's space map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceRebuilt {
    /// The oldest segment file: every segment from it on is tracked.
    pub first_segment: u64,
    /// The live pieces found, and their bytes (headers included).
    pub pieces: u64,
    pub live_bytes: u64,
    /// Segments below S read for it: 0 when the checkpoint's live pieces sufficed.
    pub segments_read: u64,
    /// Segments below S whose scan failed, and why: kept, never cleaned (review rev-smo2
    /// F3); their pieces a recovered chain reaches were read one by one.
    pub damaged: Vec<(u64, String)>,
}

impl RecoveredMap {
    /// The root the checkpoint recorded ([`MapCheckpoint::root`]).
    pub fn checkpoint_root(&self) -> Option<Pid> {
        self.checkpoint.as_ref().and_then(|(_, c)| c.root)
    }

    /// The store's RSSP recorded in the checkpoint used (0 without one: redo everything).
    pub fn rssp(&self) -> u64 {
        self.checkpoint.as_ref().map_or(0, |(_, c)| c.rssp)
    }

    /// The mapping table: each page's word its LSS address, the free PIDs on the free list,
    /// PIDs with unit deltas only left empty for the access method to install.
    pub fn table<T: PageState>(&self) -> Result<MappingTable<T>> {
        let stored = self.pages.iter().map(|&(pid, a)| (pid, a.to_bits()));
        // Pushed highest first, so allocation reuses the lowest PIDs first.
        MappingTable::from_recovered(self.pid_end, stored, self.free.iter().rev().copied())
            .map_err(|what| Error::InvalidUse(format!("recovered mapping table: {what}")))
    }
}

/// Opens the LSS in `lss_dir` with `config` and the checkpoints in `checkpoint_dir` (module
/// doc), and rebuilds the mapping table. The LSS is returned open and unattached.
pub fn open_recovering(
    lss_dir: Arc<dyn Dir>,
    config: LssConfig,
    checkpoint_dir: Arc<dyn Dir>,
) -> Result<(Lss, Checkpoints, RecoveredMap)> {
    let (checkpoints, outcome) = Checkpoints::open(checkpoint_dir)?;
    let checkpoint = outcome.checkpoint;
    let (start, stable_end) = match &checkpoint {
        Some((_, c)) => (c.start, c.stable_end),
        None => {
            let first = lss_dir
                .list()?
                .iter()
                .filter_map(|n| parse_segment_file_name(n))
                .min();
            if first.is_some_and(|s| s != 0) {
                return Err(Error::Corrupt {
                    path: lss_dir.path().to_path_buf(),
                    offset: 0,
                    what: format!("{MISSING_START} (the first is {})", first.unwrap_or(0)),
                });
            }
            (LssAddress::current(0), LssAddress::current(0))
        }
    };
    let listing = Arc::clone(&lss_dir);
    let (lss, open) = Lss::open(lss_dir, config, stable_end)?;
    let mut scan = Scan::new(checkpoint.as_ref().map(|(_, c)| c));
    let mut pieces = PieceHeaders::default();
    let locate = |address| lss.locate(address);
    lss.scan(start, |address, header, payload| {
        pieces.note(address, header, payload.len());
        scan.visit(&locate, address, header, payload)
    })?;
    let scanned_end = lss.hi_stable();
    let mut map = scan.finish(checkpoint, outcome.rejected, open, start, scanned_end);
    let recorded = map
        .checkpoint
        .as_ref()
        .and_then(|(_, c)| Some((c.start, c.pieces.as_deref()?)));
    let from_checkpoint = recorded.map(|(start, recorded)| {
        space_from_checkpoint(&lss, &*listing, start, recorded, &pieces, &map.pages)
    });
    map.space = match from_checkpoint {
        Some(Ok(rebuilt)) => Ok(rebuilt),
        Some(Err(why)) => {
            eprintln!(
                "forest-llama: the map checkpoint's live pieces do not cover the recovered \
                 pages ({why}); reading the segments below S instead"
            );
            rebuild_space(&lss, &*listing, start, pieces, &map.pages)
        }
        None => rebuild_space(&lss, &*listing, start, pieces, &map.pages),
    };
    Ok((lss, checkpoints, map))
}

/// Page pieces' headers by offset: (PID, record bytes, a page image?, previous piece).
#[derive(Default)]
pub(crate) struct PieceHeaders(pub(crate) HashMap<u64, (Pid, u32, bool, Option<LssAddress>)>);

impl PieceHeaders {
    pub(crate) fn note(
        &mut self,
        address: LssAddress,
        header: &RecordHeader,
        payload_bytes: usize,
    ) {
        let image = match header.kind {
            RecordKind::PageImage => true,
            RecordKind::DeltaRun => false,
            _ => return,
        };
        // A record fits a segment, so a u32.
        let bytes = u32::try_from(record_bytes(payload_bytes)).unwrap_or(u32::MAX);
        self.0
            .insert(address.offset(), (header.pid, bytes, image, header.prev));
    }
}

/// Step 5 from a version-3 checkpoint (module doc): `recorded` are its live pieces below
/// `start` (S), ascending by (PID, offset); `scanned` the headers of the scan from S. Reads
/// nothing but the directory's listing; on success the LSS tracks every segment from the
/// oldest file on. An error (a chain the list does not cover) changes nothing.
fn space_from_checkpoint(
    lss: &Lss,
    dir: &dyn Dir,
    start: LssAddress,
    recorded: &[LivePiece],
    scanned: &PieceHeaders,
    pages: &[(Pid, LssAddress)],
) -> std::result::Result<SpaceRebuilt, String> {
    let segment_bytes = lss.config().segment_bytes;
    let present: BTreeSet<u64> = dir
        .list()
        .map_err(|e| format!("listing the segments: {e}"))?
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    let start_segment = start.offset() / segment_bytes;
    let first = present
        .first()
        .map_or(start_segment, |&f| f.min(start_segment));
    let mut live: Vec<(Pid, u64, u32)> = Vec::new();
    for &(pid, newest) in pages {
        let mut at = newest;
        loop {
            if at.is_archive() {
                return Err(format!("page {pid}'s piece at {at}: an LSS-H address"));
            }
            if at.offset() < start.offset() {
                let of_page = {
                    let from = recorded.partition_point(|p| p.pid < pid);
                    let to = recorded.partition_point(|p| p.pid <= pid);
                    &recorded[from..to]
                };
                if of_page
                    .binary_search_by_key(&at.offset(), |p| p.offset)
                    .is_err()
                {
                    return Err(format!(
                        "page {pid}'s piece at {at}, below S, is not among the checkpoint's live pieces"
                    ));
                }
                for piece in of_page.iter().filter(|p| p.offset <= at.offset()) {
                    let segment = piece.offset / segment_bytes;
                    let last = (piece.offset + u64::from(piece.bytes) - 1) / segment_bytes;
                    if segment != last || !present.contains(&segment) {
                        return Err(format!(
                            "page {pid}'s live piece at {} lies in no segment file (segment {segment})",
                            piece.offset
                        ));
                    }
                    live.push((pid, piece.offset, piece.bytes));
                }
                break;
            }
            let Some(&(owner, bytes, image, prev)) = scanned.0.get(&at.offset()) else {
                return Err(format!(
                    "page {pid}'s piece at {at}: no page piece was scanned there"
                ));
            };
            if owner != pid {
                return Err(format!("page {pid}'s piece at {at} is page {owner}'s"));
            }
            live.push((pid, at.offset(), bytes));
            if image {
                break;
            }
            match prev.filter(|p| *p < at) {
                Some(p) => at = p,
                None => {
                    return Err(format!(
                        "page {pid}'s piece at {at}: a delta run with no previous piece below it"
                    ))
                }
            }
        }
    }
    let rebuilt = SpaceRebuilt {
        first_segment: first,
        pieces: live.len() as u64,
        live_bytes: live.iter().map(|&(_, _, b)| u64::from(b)).sum(),
        segments_read: 0,
        damaged: Vec::new(),
    };
    lss.track_recovered(first, &|s| present.contains(&s), &BTreeSet::new(), live);
    Ok(rebuilt)
}

/// Step 5 (module doc): reads the headers of the segments below `start` (S) into `pieces`,
/// follows each recovered page's chain from its newest piece (`pages`), and has the LSS track
/// every segment from the oldest file on with those pieces live. Runs before anything is
/// posted. An error leaves the space map as [`Lss::open`] made it.
fn rebuild_space(
    lss: &Lss,
    dir: &dyn Dir,
    start: LssAddress,
    mut pieces: PieceHeaders,
    pages: &[(Pid, LssAddress)],
) -> std::result::Result<SpaceRebuilt, String> {
    let segment_bytes = lss.config().segment_bytes;
    let present: BTreeSet<u64> = dir
        .list()
        .map_err(|e| format!("listing the segments: {e}"))?
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    let start_segment = start.offset() / segment_bytes;
    let first = present
        .first()
        .map_or(start_segment, |&f| f.min(start_segment));
    // One segment at a time: a damaged one (review rev-smo2 F3: one bad byte in a dead
    // piece) is kept untracked, and its records before the damage are noted still.
    let mut damaged = Vec::new();
    // S's own segment too, up to S (the scan from S reads the rest).
    let below_s = (first..=start_segment).filter(|s| s * segment_bytes < start.offset());
    let mut segments_read = 0;
    for segment in below_s.filter(|s| present.contains(s)) {
        segments_read += 1;
        let begin = LssAddress::current(segment * segment_bytes);
        let until = LssAddress::current(((segment + 1) * segment_bytes).min(start.offset()));
        let scanned = lss.scan_range(
            begin,
            until,
            &|s| !present.contains(&s),
            |at, header, payload| {
                pieces.note(at, header, payload.len());
                Ok(())
            },
        );
        if let Err(e) = scanned {
            damaged.push((segment, e.to_string()));
        }
    }
    let in_damaged = |at: LssAddress| {
        damaged
            .iter()
            .any(|(s, _)| at.offset() / segment_bytes == *s)
    };
    let mut live = Vec::new();
    for &(pid, newest) in pages {
        let chain = follow_chain(pid, newest, &mut pieces, &mut |at, pieces| {
            if in_damaged(at) {
                // A live piece past the damage: read on its own (its header and crc).
                let record = lss
                    .read(at)
                    .map_err(|e| format!("in a damaged segment: {e}"))?;
                pieces.note(at, &record.header, record.payload.len());
            }
            Ok(())
        })
        .map_err(|e| format!("page {pid}'s piece at {}: {}", e.at, e.what))?;
        live.extend(chain.into_iter().map(|(at, bytes)| (pid, at, bytes)));
    }
    for (segment, reason) in &damaged {
        eprintln!("forest-llama: LSS segment {segment} is damaged ({reason}); kept, never cleaned");
    }
    let kept: BTreeSet<u64> = damaged.iter().map(|(s, _)| *s).collect();
    let rebuilt = SpaceRebuilt {
        first_segment: first,
        pieces: live.len() as u64,
        live_bytes: live.iter().map(|&(_, _, b)| u64::from(b)).sum(),
        segments_read,
        damaged,
    };
    lss.track_recovered(first, &|s| present.contains(&s), &kept, live);
    Ok(rebuilt)
}

/// Where a page's chain broke ([`follow_chain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChainError {
    /// The piece that could not be followed.
    pub at: LssAddress,
    pub what: String,
}

/// The pieces of page `pid`'s chain, (offset, record bytes), from its newest piece `newest`
/// back to its newest image, as `read.rs` follows it. `fetch` is called with a piece
/// `pieces` does not hold, and may note it (a piece in a damaged segment, read on its own).
/// Every piece must be a page image or delta run of `pid`; a delta run's `prev` must lie
/// below it, so a chain ends.
pub(crate) fn follow_chain(
    pid: Pid,
    newest: LssAddress,
    pieces: &mut PieceHeaders,
    fetch: &mut dyn FnMut(LssAddress, &mut PieceHeaders) -> std::result::Result<(), String>,
) -> std::result::Result<Vec<(u64, u32)>, ChainError> {
    let mut chain = Vec::new();
    let mut at = newest;
    loop {
        let fail = |what: String| ChainError { at, what };
        if at.is_archive() {
            return Err(fail(
                "an LSS-H address, which no chain of LSS-C reaches".into(),
            ));
        }
        if !pieces.0.contains_key(&at.offset()) {
            fetch(at, pieces).map_err(fail)?;
        }
        let Some(&(owner, bytes, image, prev)) = pieces.0.get(&at.offset()) else {
            return Err(fail("no page piece was scanned there".into()));
        };
        if owner != pid {
            return Err(fail(format!(
                "a piece of page {owner} (two pages would share it)"
            )));
        }
        chain.push((at.offset(), bytes));
        if image {
            return Ok(chain);
        }
        match prev.filter(|p| *p < at) {
            Some(p) => at = p,
            None => return Err(fail("a delta run with no previous piece below it".into())),
        }
    }
}

/// Maps an address to its segment file and the offset in it, for error reports.
pub(crate) type Locate<'a> = dyn Fn(LssAddress) -> (std::path::PathBuf, u64) + 'a;

/// The scan's state (step 3).
pub(crate) struct Scan {
    recovery: Recovery,
    unit_deltas: BTreeMap<Pid, Vec<UnitDelta>>,
    newest_by_kind: BTreeMap<u8, (Pid, LssAddress)>,
    pid_end: u64,
    stats: ScanStats,
}

impl Scan {
    pub(crate) fn new(checkpoint: Option<&MapCheckpoint>) -> Self {
        Self {
            recovery: checkpoint.map_or_else(Recovery::default, Recovery::from_checkpoint),
            unit_deltas: BTreeMap::new(),
            newest_by_kind: BTreeMap::new(),
            pid_end: checkpoint.map_or(0, |c| c.pid_end),
            stats: ScanStats::default(),
        }
    }

    fn see_pid(&mut self, locate: &Locate<'_>, address: LssAddress, pid: Pid) -> Result<()> {
        if pid >= PID_COUNT_MAX as u64 {
            let (path, offset) = locate(address);
            return Err(Error::Corrupt {
                path,
                offset,
                what: format!("LSS record at address {address} names PID {pid}, beyond any table"),
            });
        }
        self.pid_end = self.pid_end.max(pid + 1);
        Ok(())
    }

    pub(crate) fn visit(
        &mut self,
        locate: &Locate<'_>,
        address: LssAddress,
        header: &crate::lss::RecordHeader,
        payload: &[u8],
    ) -> Result<()> {
        self.stats.records += 1;
        match header.kind {
            RecordKind::PageImage | RecordKind::DeltaRun => {
                self.see_pid(locate, address, header.pid)?;
                let relocation = header.relocated_from().is_some();
                if self.recovery.apply_piece(address, header) {
                    self.stats.pieces_applied += u64::from(!relocation);
                    if !relocation {
                        // The piece holds the page's whole state at its flush, SMOs included.
                        self.unit_deltas.remove(&header.pid);
                    }
                } else if relocation {
                    self.stats.dead_relocations += 1;
                }
            }
            RecordKind::TxnUnit => {
                let unit = decode_unit(payload).map_err(|what| {
                    let (path, offset) = locate(address);
                    Error::Corrupt {
                        path,
                        offset,
                        what: format!("system-transaction unit at address {address}: {what}"),
                    }
                })?;
                self.stats.units_committed += 1;
                for op in unit.ops {
                    match op {
                        TxnOp::Allocate(pid) => {
                            self.see_pid(locate, address, pid)?;
                            self.recovery.apply_allocate(pid);
                        }
                        TxnOp::Free(pid) => {
                            self.see_pid(locate, address, pid)?;
                            self.recovery.apply_free(pid);
                            self.unit_deltas.remove(&pid);
                        }
                        TxnOp::UpdateD {
                            pid,
                            prev,
                            kind,
                            bytes,
                        } => {
                            self.see_pid(locate, address, pid)?;
                            self.recovery.apply_allocate(pid);
                            self.newest_by_kind.insert(kind, (pid, address));
                            self.unit_deltas.entry(pid).or_default().push(UnitDelta {
                                unit: address,
                                txn: unit.txn,
                                prev,
                                kind,
                                bytes,
                            });
                        }
                    }
                }
            }
            RecordKind::FailedFlush => self.stats.fillers += 1,
            RecordKind::TxnBegin | RecordKind::TxnCommit | RecordKind::Padding => {}
        }
        Ok(())
    }

    pub(crate) fn finish(
        self,
        checkpoint: Option<(String, MapCheckpoint)>,
        rejected: Vec<(String, String)>,
        open: OpenReport,
        scanned_from: LssAddress,
        scanned_end: LssAddress,
    ) -> RecoveredMap {
        let pages: Vec<(Pid, LssAddress)> = self.recovery.pages().collect();
        let mut in_use = vec![false; usize::try_from(self.pid_end).unwrap_or(usize::MAX)];
        for &(pid, _) in &pages {
            in_use[pid as usize] = true;
        }
        for &pid in self.unit_deltas.keys() {
            in_use[pid as usize] = true;
        }
        // Allocated by a committed unit with no state logged: nothing can reach it (its state
        // would be an Update-D), so it is free like any other PID without a state.
        let free = (0..self.pid_end).filter(|&p| !in_use[p as usize]).collect();
        RecoveredMap {
            checkpoint,
            rejected,
            open,
            scanned_from,
            scanned_end,
            pid_end: self.pid_end,
            pages,
            free,
            unit_deltas: self.unit_deltas,
            newest_by_kind: self.newest_by_kind,
            stats: self.stats,
            space: Err("not rebuilt yet".into()),
        }
    }
}
