//! Flushing Bw-tree pages into LLAMA's LSS (Bw-tree §V-A, §V-B; TSBw §II-D; issue 17,
//! increment 2): page marshalling with the ESL rule, incremental pieces, and the byte layouts
//! of the pieces (docs/FORMAT.md "Bw-tree page pieces").
//!
//! [`BwTree::flush_page`] reads the page's state S, then the ESL, and marshals from S either
//! - a **delta run**: the records written since the page's newest flush delta F, consolidated
//!   into one piece (newest per key), naming F's piece as its previous one; or
//! - a **page image**: the page's records, low key, high key and side link,
//!
//! leaving out every record delta with LSN > ESL (§V-A; those are *held back*). It then calls
//! LLAMA's Flush (`forest_llama::flush`: reserve, CAS the flush delta onto S, copy or filler).
//!
//! Which deltas a flush has written is tracked by chain position, not by LSN range (deltas
//! are installed out of LSN order, so §V-B's "LSNs between the last flushed LSN and ESL" would
//! miss a low-LSN delta installed after a flush): a flush delta's annotation is the ESL its
//! flush used, and a record delta is *unflushed* iff it lies above the page's newest flush
//! delta F, or below F with LSN above F's ESL (held back by F or by an earlier flush, since
//! ESL only grows). A flush writes exactly the unflushed deltas with LSN <= ESL.
//!
//! Invariants:
//! - No piece holds a record with LSN > the ESL read after the state (§V-A). Base pages never
//!   hold one either: consolidations and splits fold only deltas with LSN <= ESL
//!   (`consolidate.rs` `view_at`, `build_state`).
//! - A delta run is written only when the chain down to its base page holds nothing but record
//!   deltas and flush deltas, so the run and the pieces before it describe the page alone;
//!   any structure delta (split, merge, index term) since the base page, or a page with no
//!   flush delta yet, makes the flush a whole image.
//! - A consolidation puts the page's newest flush delta back on the new base page, so a
//!   resident page always names its newest piece (mapping-table checkpoints record it). If
//!   the consolidation folded anything unflushed (or a structure delta) the new base page
//!   holds writes no piece has: the flush delta is then *behind* (`consolidate.rs`
//!   `carried_flush`) and the next flush is a whole image.
//! - A frozen page (remove node delta on top) is not flushed: the delta would hide its
//!   freeze from the readers that look only at the top (the merge's system transactions,
//!   a later increment, flush it).
//!
//! Per key, LSN order is chain order (the store holds a key's lock across taking the LSN and
//! applying the write), which both the newest-per-key rule of runs and `view_at` rely on.

use crossbeam_epoch::Guard;
use forest_core::Result;
use forest_llama::flush::{flush, FlushDelta, FlushOutcome, Piece};
use forest_llama::lss::{Lss, LssAddress, RecordKind};
use forest_llama::Pid;

use crate::base_page::{key_cmp, key_eq};
use crate::consolidate::{view_at, Held};
use crate::delta::{Kind, Node};
use crate::BwTree;

/// The format version of page pieces (first byte of each payload).
pub const PIECE_FORMAT_VERSION: u8 = 1;

/// A delta run's put entry.
const OP_PUT: u8 = 1;
/// A delta run's delete entry.
const OP_DELETE: u8 = 2;

/// How a [`BwTree::flush_page`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageFlush {
    /// A piece of `kind` went to the buffer at `address` and its flush delta is installed.
    Flushed {
        address: LssAddress,
        kind: RecordKind,
        lsn_high: u64,
    },
    /// Nothing to write: every record delta with LSN <= ESL is in the page's pieces already.
    Clean,
    /// The page changed between the read and the flush delta's CAS: a failed-flush filler
    /// took the room (at `filler`); the caller may flush again.
    Lost { filler: LssAddress },
    /// The page is frozen by a merge, or not yet published by the SMO step that allocated
    /// it (`smo_log.rs`): not flushed.
    Frozen,
    /// The PID holds no page (merged away and freed).
    Gone,
}

/// A page image: what a whole-page piece holds, and what a page's pieces rebuild to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageImage {
    /// 0 for a leaf.
    pub level: u32,
    pub low: Vec<u8>,
    /// `None` on the rightmost page of its level.
    pub high: Option<Vec<u8>>,
    /// The right sibling's PID, `u64::MAX` on the rightmost page.
    pub side_link: Pid,
    /// Sorted by key, unique (index pages: the child PID as 8 big-endian bytes).
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A delta run: the writes since a page's previous piece, one per key, sorted by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaRun {
    /// (key, value), the value `None` for a delete.
    pub entries: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl PageImage {
    /// The payload of a page-image piece (docs/FORMAT.md "Bw-tree page pieces").
    pub fn encode(&self) -> Vec<u8> {
        let records = self
            .records
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()));
        encode_image(
            self.level,
            &self.low,
            self.high.as_deref(),
            self.side_link,
            records,
        )
    }

    /// The base page this image describes (its level is the caller's).
    pub(crate) fn base_page(&self) -> crate::base_page::BasePage {
        crate::base_page::BasePage::build(
            &self.low,
            self.high.as_deref(),
            self.side_link,
            self.records
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice())),
        )
    }

    /// Decodes a page-image payload; the error says what is wrong and where.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut r = Reader::new(bytes, "page image");
        r.version()?;
        let level = r.u32()?;
        let side_link = r.u64()?;
        let low = r.bytes16()?.to_vec();
        let high = match r.u8()? {
            0 => None,
            1 => Some(r.bytes16()?.to_vec()),
            flag => return Err(r.error(format!("high-key flag {flag} is neither 0 nor 1"))),
        };
        let count = r.u32()?;
        let mut records: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for _ in 0..count {
            let key = r.bytes16()?.to_vec();
            let value = r.bytes32()?.to_vec();
            if let Some((last, _)) = records.last() {
                if key_cmp(last, &key).is_ge() {
                    return Err(r.error("records are not in strictly ascending key order".into()));
                }
            }
            records.push((key, value));
        }
        r.end()?;
        Ok(Self {
            level,
            low,
            high,
            side_link,
            records,
        })
    }

    /// Applies a run written after this image (or after the runs already applied).
    pub fn apply(&mut self, run: &DeltaRun) {
        for (key, value) in &run.entries {
            let at = self.records.binary_search_by(|(k, _)| key_cmp(k, key));
            match (at, value) {
                (Ok(i), Some(v)) => self.records[i].1.clone_from(v),
                (Err(i), Some(v)) => self.records.insert(i, (key.clone(), v.clone())),
                (Ok(i), None) => {
                    self.records.remove(i);
                }
                (Err(_), None) => {}
            }
        }
    }
}

impl DeltaRun {
    /// The payload of a delta-run piece (docs/FORMAT.md "Bw-tree page pieces").
    pub fn encode(&self) -> Vec<u8> {
        encode_run(
            self.entries
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref())),
        )
    }

    /// Decodes a delta-run payload; the error says what is wrong and where.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut r = Reader::new(bytes, "delta run");
        r.version()?;
        let count = r.u32()?;
        let mut entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for _ in 0..count {
            let op = r.u8()?;
            let key = r.bytes16()?.to_vec();
            let value = match op {
                OP_PUT => Some(r.bytes32()?.to_vec()),
                OP_DELETE => None,
                other => return Err(r.error(format!("entry operation {other} is unknown"))),
            };
            if let Some((last, _)) = entries.last() {
                if key_cmp(last, &key).is_ge() {
                    return Err(r.error("entries are not in strictly ascending key order".into()));
                }
            }
            entries.push((key, value));
        }
        r.end()?;
        Ok(Self { entries })
    }
}

fn encode_image<'a>(
    level: u32,
    low: &[u8],
    high: Option<&[u8]>,
    side_link: Pid,
    records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Vec<u8> {
    let mut out = vec![PIECE_FORMAT_VERSION];
    out.extend_from_slice(&level.to_le_bytes());
    out.extend_from_slice(&side_link.to_le_bytes());
    put16(&mut out, low);
    match high {
        None => out.push(0),
        Some(high) => {
            out.push(1);
            put16(&mut out, high);
        }
    }
    let count = u32::try_from(records.len()).expect("page record count fits u32");
    out.extend_from_slice(&count.to_le_bytes());
    for (key, value) in records {
        put16(&mut out, key);
        put32(&mut out, value);
    }
    out
}

fn encode_run<'a>(entries: impl ExactSizeIterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Vec<u8> {
    let mut out = vec![PIECE_FORMAT_VERSION];
    let count = u32::try_from(entries.len()).expect("page record count fits u32");
    out.extend_from_slice(&count.to_le_bytes());
    for (key, value) in entries {
        out.push(if value.is_some() { OP_PUT } else { OP_DELETE });
        put16(&mut out, key);
        if let Some(value) = value {
            put32(&mut out, value);
        }
    }
    out
}

fn put16(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys (and low and high keys) are at most KEY_BYTES_MAX, which fits a u16.
    let len = u16::try_from(bytes.len()).expect("key length fits u16");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put32(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).expect("value length fits u32");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A bounds-checked reader of a piece payload.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { bytes, at: 0, what }
    }

    fn error(&self, detail: String) -> String {
        format!("{} payload at byte {}: {detail}", self.what, self.at)
    }

    fn take(&mut self, len: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.error(format!(
                "needs {len} bytes, {} left",
                self.bytes.len() - self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> std::result::Result<u16, String> {
        let mut word = [0u8; 2];
        word.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(word))
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut word = [0u8; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn bytes16(&mut self) -> std::result::Result<&'a [u8], String> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    fn bytes32(&mut self) -> std::result::Result<&'a [u8], String> {
        let len = self.u32()?;
        self.take(len as usize)
    }

    fn version(&mut self) -> std::result::Result<(), String> {
        match self.u8()? {
            PIECE_FORMAT_VERSION => Ok(()),
            other => Err(self.error(format!(
                "format version {other}, this build reads {PIECE_FORMAT_VERSION}"
            ))),
        }
    }

    fn end(&self) -> std::result::Result<(), String> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(self.error(format!(
                "{} bytes after the last entry",
                self.bytes.len() - self.at
            )))
        }
    }
}

/// What a flush of a state writes.
enum Plan<'g> {
    Clean,
    Run {
        prev: LssAddress,
        /// Newest per key, sorted by key.
        entries: Vec<(&'g [u8], Option<&'g [u8]>)>,
        lsn_low: u64,
        lsn_high: u64,
    },
    Image,
}

/// The plan for flushing the state `node` at `esl` (module doc: unflushed deltas by chain
/// position).
fn plan(node: &Node, esl: u64) -> Plan<'_> {
    let mut newest_flush: Option<FlushDelta> = None;
    // Newest first (the type of a held delta: key, value or None, LSN).
    let mut included: Vec<Held<'_>> = Vec::new();
    // Keys whose newest delta with LSN <= ESL has been met: that delta is the key's state at
    // ESL, so older ones are shadowed even when unflushed (a write with a lower LSN, e.g. an
    // `Index` write's 0, installed after one with a higher LSN).
    let mut decided: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    let mut current = node;
    loop {
        let (key, value) = match &current.kind {
            Kind::Base(_) => break,
            Kind::Insert(r) | Kind::Modify(r) => (r.key(), Some(r.value())),
            Kind::Delete(key, _) => (&key[..], None),
            Kind::Flush(f, behind) => {
                if newest_flush.is_none() && *behind {
                    // The base page holds writes no piece has.
                    return Plan::Image;
                }
                newest_flush.get_or_insert(*f);
                current = current.next().expect("a chain ends in a base page");
                continue;
            }
            // A structure delta since the base page: the run would not describe the page.
            _ => return Plan::Image,
        };
        let lsn = current.lsn();
        if lsn <= esl && decided.insert(key) {
            let unflushed = newest_flush.is_none_or(|f| lsn > f.annotation);
            if unflushed {
                included.push(Held { key, value, lsn });
            }
        }
        current = current.next().expect("a chain ends in a base page");
    }
    let Some(newest_flush) = newest_flush else {
        return Plan::Image;
    };
    if included.is_empty() {
        return Plan::Clean;
    }
    let lsn_low = included.iter().map(|e| e.lsn).min().unwrap_or(0);
    let lsn_high = included.iter().map(|e| e.lsn).max().unwrap_or(0);
    // Stable sort keeps the newest first among equal keys; dedup keeps that one.
    included.sort_by(|a, b| key_cmp(a.key, b.key));
    included.dedup_by(|later, earlier| key_eq(later.key, earlier.key));
    Plan::Run {
        prev: newest_flush.address,
        entries: included.into_iter().map(|e| (e.key, e.value)).collect(),
        lsn_low,
        lsn_high,
    }
}

/// The LSN range of the record deltas at or below `esl` in the chain from `node` (merged
/// pages' chains included), `(0, 0)` if none.
pub(crate) fn lsn_range(node: &Node, esl: u64) -> (u64, u64) {
    let mut range: Option<(u64, u64)> = None;
    let mut current = Some(node);
    while let Some(n) = current {
        match &n.kind {
            Kind::Insert(_) | Kind::Modify(_) | Kind::Delete(..) if n.lsn() <= esl => {
                let lsn = n.lsn();
                range = Some(range.map_or((lsn, lsn), |(lo, hi)| (lo.min(lsn), hi.max(lsn))));
            }
            Kind::NodeMerge(merge) => {
                let (lo, hi) = lsn_range(merge.right(), esl);
                if hi > 0 {
                    range = Some(range.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))));
                }
            }
            _ => {}
        }
        current = n.next();
    }
    range.unwrap_or((0, 0))
}

/// The image of the state `node` at `esl`: its records with LSN <= ESL.
pub(crate) fn image_at(node: &Node, esl: u64) -> PageImage {
    let (v, _held) = view_at(node, esl);
    PageImage {
        level: node.level,
        low: v.low.to_vec(),
        high: v.high.map(<[u8]>::to_vec),
        side_link: v.side_link,
        records: v
            .records
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
    }
}

impl BwTree {
    /// Flushes page `pid` into `lss` once (Bw-tree §V-B; see the module doc): an incremental
    /// delta run when the page has a flush delta and only record deltas since its base page,
    /// else a whole image; records with LSN above the ESL are left out. The piece is in the
    /// buffer, not yet durable: [`Lss::mk_stable`] on the returned address makes it so.
    ///
    /// Errors: the LSS refused the piece (too large for a segment, or poisoned by an I/O
    /// error); the page is then unchanged.
    /// A page it reads evicted is loaded first; a load error is returned.
    pub fn flush_page(&self, pid: Pid, lss: &Lss) -> Result<PageFlush> {
        self.catching(|| self.flush_page_inner(pid, lss))?
    }

    /// [`Self::flush_page`] inside an operation (a load error unwinds, `storage.rs`).
    pub(crate) fn flush_page_inner(&self, pid: Pid, lss: &Lss) -> Result<PageFlush> {
        self.flush_page_with(pid, lss, false)
    }

    /// [`Self::flush_page_inner`]; with `force_image`, a whole image even when a run would
    /// do, or nothing is new (the cleaner's fresh image of a resident page, `clean.rs`).
    pub(crate) fn flush_page_with(
        &self,
        pid: Pid,
        lss: &Lss,
        force_image: bool,
    ) -> Result<PageFlush> {
        let guard = &crossbeam_epoch::pin();
        let Some((state, node)) = self.read_node(pid, guard) else {
            return Ok(PageFlush::Gone);
        };
        if matches!(node.kind, Kind::RemoveNode { .. }) || self.is_unpublished(pid) {
            return Ok(PageFlush::Frozen);
        }
        // Read after the state: ESL only grows, so it is at least every flush delta's in it.
        let esl = self.esl();
        let planned = if force_image {
            Plan::Image
        } else {
            plan(node, esl)
        };
        let (kind, payload, lsn_low, lsn_high, prev) = match planned {
            Plan::Clean => return Ok(PageFlush::Clean),
            Plan::Run {
                prev,
                entries,
                lsn_low,
                lsn_high,
            } => (
                RecordKind::DeltaRun,
                encode_run(entries.into_iter()),
                lsn_low,
                lsn_high,
                Some(prev),
            ),
            Plan::Image => {
                let (v, _held) = view_at(node, esl);
                let payload = encode_image(
                    node.level,
                    v.low,
                    v.high,
                    v.side_link,
                    v.records.iter().copied(),
                );
                let (lsn_low, lsn_high) = lsn_range(node, esl);
                (RecordKind::PageImage, payload, lsn_low, lsn_high, None)
            }
        };
        let piece = Piece {
            kind,
            lsn_low,
            lsn_high,
            prev,
            payload: &payload,
        };
        let outcome = flush(
            &self.table,
            lss,
            pid,
            state,
            &piece,
            esl,
            |delta| Node::delta(node, node.record_count, Kind::Flush(delta, false)).into_owned(),
            guard,
        )?;
        Ok(match outcome {
            FlushOutcome::Installed { address, state } => {
                self.count_delta(crate::gc::node_ref(state));
                PageFlush::Flushed {
                    address,
                    kind,
                    lsn_high,
                }
            }
            FlushOutcome::Lost { filler, .. } => PageFlush::Lost { filler },
        })
    }

    /// The image a whole-page flush of `pid` would write now: its records with LSN <= ESL.
    /// `None` if the PID holds no page.
    /// A load error is recorded ([`Self::take_load_error`]) and gives `None`.
    pub fn page_image(&self, pid: Pid) -> Option<PageImage> {
        let image = self.catching(|| {
            let guard = &crossbeam_epoch::pin();
            let (_, node) = self.read_node(pid, guard)?;
            // As in `flush_page`: the ESL after the state.
            Some(image_at(node, self.esl()))
        });
        image.unwrap_or_else(|e| {
            self.record_load_error(e);
            None
        })
    }

    /// The newest flush delta of page `pid` (its newest piece's address, highest LSN, and the
    /// ESL of that flush as annotation), if it has one in memory.
    /// `None` for an evicted page too (it is not loaded).
    pub fn last_flush(&self, pid: Pid) -> Option<FlushDelta> {
        let _guard: &Guard = &crossbeam_epoch::pin();
        let node = match self.table.read_location(pid) {
            forest_llama::page_state::PageLocation::Memory(ptr) => {
                crate::gc::node_ref(crossbeam_epoch::Shared::from(ptr))
            }
            _ => return None,
        };
        let mut current = Some(node);
        while let Some(n) = current {
            if let Kind::Flush(f, _) = &n.kind {
                return Some(*f);
            }
            current = n.next();
        }
        None
    }

    /// Every PID that holds a page now, in PID order (frozen and evicted pages included).
    pub fn page_ids(&self) -> Vec<Pid> {
        use forest_llama::page_state::PageLocation;
        (0..self.table.pid_end() as Pid)
            .filter(|&pid| {
                matches!(
                    self.table.read_location(pid),
                    PageLocation::Memory(_) | PageLocation::Stored(_)
                )
            })
            .collect()
    }
}
