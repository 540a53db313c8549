//! Read-only inspection of an LSS directory and its mapping-table checkpoints (issue 17
//! "Recovery": "`forest check DIR` verifies segments and checkpoints; `forest inspect DIR`
//! prints segment utilization, resident and evicted pages, pieces per page"; Bw-tree §V-A the
//! checkpoint, §II-E live bytes per segment; TSBw §II-C a page's piece chain).
//!
//! [`inspect`] does what an open's recovery does (`recover.rs` steps 1, 3, 4, 5) and changes
//! no byte: the newest valid checkpoint by [`read_newest`] (which sets nothing aside), every
//! segment file read whole and decoded record by record (never [`crate::lss::Lss::open`],
//! which cuts a torn tail), the scan from S with recovery's own rule (`recover.rs` `Scan`),
//! then each recovered page's chain (`recover.rs` `follow_chain`, as step 5 and `read.rs`
//! follow it). Memory: each segment is read through a bounded window, and only the record
//! headers from S on are kept; a chain's pieces below S are read one by one as it is
//! followed (their bytes read twice, the price of not keeping every header of the LSS). Those pieces are the live ones: they give each segment's live bytes and each
//! page's piece count. At open every page with a piece is evicted (an LSS address, loaded on
//! first use); the pages with committed unit deltas above their newest piece are rebuilt by
//! the access method and resident.
//!
//! The table check ([`Inspection::table_problems`], run by `forest check`): a version-3
//! checkpoint's live pieces must include every recovered chain's pieces below S (else an
//! open falls back to reading the segments below S: a writer's bug, named); every entry of
//! the checkpoint recovery uses must name a chain that decodes: each piece a whole record of
//! that PID whose crc matches, delta runs linking to a lower address, ending at an image, the
//! entry's address below T. A chain reaching another PID's piece means two PIDs share it.
//! PIDs in range (below `pid_end`, at most the table's size) and no PID both mapped and free
//! are the decoder's checks ([`crate::checkpoint::decode`]). A crc cannot catch the rest: a
//! checkpoint whose writer named a wrong address decodes. Each problem names the checkpoint,
//! the PID, the segment file and the offset in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use forest_core::{Error, Result};
use forest_file::{Dir, ReadWindow, READ_CHUNK_BYTES};

use crate::checkpoint::{read_newest, MapCheckpoint, ReadOutcome};
use crate::lss::record::{self, payload_len, RECORD_HEADER_BYTES};
use crate::lss::segment::{
    decode_header, parse_segment_file_name, segment_file_name, window_record, SegmentHeader,
    SEGMENT_HEADER_BYTES,
};
use crate::lss::{LssAddress, OpenReport, RecordKind, LSS_OFFSET_MAX};
use crate::mapping_table::Pid;
use crate::recover::{follow_chain, PieceHeaders, Scan, ScanStats};

/// One segment file as [`inspect`] read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentUsage {
    pub sequence: u64,
    pub name: String,
    /// The file's length.
    pub bytes: u64,
    /// Valid records, and their bytes (headers included).
    pub records: u64,
    pub record_bytes: u64,
    /// The live pieces in it (of the recovered pages' chains), and their bytes.
    pub live_pieces: u64,
    pub live_bytes: u64,
    /// The first bytes that are not a record, where an open would not cut them: damage.
    pub damage: Option<String>,
    /// A torn tail at or above T in the last segment, what an open cuts: (file offset,
    /// bytes, why).
    pub torn: Option<(u64, u64, String)>,
}

/// What [`inspect`] found.
#[derive(Debug, Default)]
pub struct Inspection {
    /// The checkpoint recovery starts from, with its file name.
    pub checkpoint: Option<(String, MapCheckpoint)>,
    /// Newer checkpoint files that failed their checks, each with its error.
    pub rejected: Vec<(String, String)>,
    /// The segment size the segment headers record.
    pub segment_bytes: Option<u64>,
    /// Every segment file, oldest first.
    pub segments: Vec<SegmentUsage>,
    /// Segments missing where recovery's scan reads (from S's segment to the last), or
    /// no segment at all where the checkpoint relies on some.
    pub missing: Vec<String>,
    /// The scan's first address (S, or 0) and the end of what it read.
    pub scanned_from: u64,
    pub scanned_end: u64,
    /// Why recovery's scan stops short of the last segment's damage (an open refuses the
    /// store): no valid checkpoint, a unit or PID recovery rejects.
    pub scan_error: Option<String>,
    pub stats: ScanStats,
    /// One past the highest PID in use after the scan.
    pub pid_end: u64,
    /// Pages with a piece and no unit deltas: evicted at open, loaded on first use.
    pub evicted: u64,
    /// Pages with committed unit deltas above their newest piece: rebuilt at open, resident.
    pub resident: u64,
    pub free: u64,
    /// Chain length (pieces) → pages with it, over the evicted and resident pages whose
    /// chain could be followed.
    pub pieces_per_page: BTreeMap<usize, u64>,
    /// The bytes of every live piece.
    pub live_bytes: u64,
    /// The live pieces below S the checkpoint records (version 3), `None` if it records none.
    pub recorded_pieces: Option<u64>,
    /// Record headers the inspection held in memory at its end (those from S on and the
    /// chains' pieces below S), against every record of the LSS before session 20.
    pub headers_kept: u64,
    /// The checkpoint's entries whose chain does not decode (module doc).
    pub table_problems: Vec<String>,
    /// Pages as recovery leaves them whose chain does not decode (a read of them would fail).
    pub chain_problems: Vec<String>,
}

impl Inspection {
    /// The bytes of every segment file.
    pub fn total_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// Every problem found, one line each (torn tails at or above T are not problems; a
    /// damaged newer checkpoint is, although recovery falls back).
    pub fn problems(&self) -> Vec<String> {
        self.rejected
            .iter()
            .map(|(name, why)| format!("map checkpoint {name} is damaged: {why}"))
            .chain(self.segments.iter().filter_map(|s| s.damage.clone()))
            .chain(self.missing.iter().cloned())
            .chain(self.scan_error.clone())
            .chain(self.table_problems.iter().cloned())
            .chain(self.chain_problems.iter().cloned())
            .collect()
    }
}

/// Reads the LSS in `dir` (segments and map checkpoints) without changing it (module doc).
/// Errors: the directory cannot be listed or a checkpoint is of a newer format; damage (no
/// valid checkpoint included: then the segments are read as from address 0) is in the report.
pub fn inspect(dir: &dyn Dir) -> Result<Inspection> {
    let (outcome, no_checkpoint) = match read_newest(dir) {
        Ok(outcome) => (outcome, None),
        Err(e @ Error::Corrupt { .. }) => (ReadOutcome::default(), Some(e.to_string())),
        Err(e) => return Err(e),
    };
    let names = dir.list()?;
    let mut sequences: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    sequences.sort_unstable();
    // The size every header records (the first readable one; a differing one is damage).
    let segment_bytes = sequences
        .iter()
        .find_map(|&s| read_header(dir, s).ok().map(|h| h.segment_bytes));
    let (start, stable_end) = outcome
        .checkpoint
        .as_ref()
        .map_or((0, 0), |(_, c)| (c.start.offset(), c.stable_end.offset()));
    let mut report = Inspection {
        rejected: outcome.rejected,
        segment_bytes,
        scanned_from: start,
        scanned_end: start,
        scan_error: no_checkpoint,
        ..Inspection::default()
    };
    let Some(sb) = segment_bytes else {
        if sequences.is_empty() && stable_end > SEGMENT_HEADER_BYTES {
            report
                .missing
                .push("no LSS segment: the map checkpoint's pages are gone".into());
        }
        report.segments = sequences
            .iter()
            .map(|&sequence| SegmentUsage {
                sequence,
                name: segment_file_name(sequence),
                damage: Some(format!(
                    "{}: offset 0: {}",
                    segment_file_name(sequence),
                    read_header(dir, sequence).err().unwrap_or_default()
                )),
                ..SegmentUsage::default()
            })
            .collect();
        report.checkpoint = outcome.checkpoint;
        return Ok(report);
    };
    let locate = |address: LssAddress| -> (PathBuf, u64) {
        let offset = address.offset();
        (dir.path().join(segment_file_name(offset / sb)), offset % sb)
    };
    // The segment file's name and the offset in it, for a report line.
    let place = |address: LssAddress| -> (String, u64) {
        let offset = address.offset();
        (segment_file_name(offset / sb), offset % sb)
    };
    let start_segment = start / sb;
    let mut scan = Scan::new(outcome.checkpoint.as_ref().map(|(_, c)| c));
    let mut pieces = PieceHeaders::default();
    // Recovery reads every segment from S's to the last: one missing there stops it.
    let present: BTreeSet<u64> = sequences.iter().copied().collect();
    let last_present = sequences.last().copied().unwrap_or(start_segment);
    let mut first_gap = None;
    let mut at = start_segment;
    while at < last_present {
        if present.contains(&at) {
            at += 1;
            continue;
        }
        let next = present.range(at..).next().copied().unwrap_or(last_present);
        first_gap.get_or_insert(at);
        report.missing.push(format!(
            "LSS segments {} to {} missing (recovery scans from segment {start_segment}, the \
             map checkpoint's S)",
            segment_file_name(at),
            segment_file_name(next - 1),
        ));
        at = next;
    }
    // The segment at which recovery's scan stops (a gap or damage), if any.
    let mut stopped: Option<u64> = None;
    for (i, &sequence) in sequences.iter().enumerate() {
        let last = i + 1 == sequences.len();
        if let Some(gap) = first_gap.filter(|&g| sequence > g) {
            stopped.get_or_insert(gap);
        }
        let resume = if sequence == start_segment {
            start % sb
        } else {
            0
        };
        let (usage, stops) = read_segment(
            dir,
            sequence,
            sb,
            last,
            stable_end,
            resume,
            &mut |address, rec| {
                // Headers from S on only: a chain's pieces below S are read one by one when
                // followed (`read_piece`), so memory holds the live pieces, not every record.
                if address.offset() >= start {
                    pieces.note(address, &rec.header, rec.payload.len());
                }
                if address.offset() >= start && report.scan_error.is_none() && stopped.is_none() {
                    match scan.visit(&locate, address, &rec.header, rec.payload) {
                        Ok(()) => report.scanned_end = address.offset() + rec.len() as u64,
                        Err(e) => report.scan_error = Some(e.to_string()),
                    }
                }
            },
        );
        // Recovery's scan stops at damage from S on, and at a gap.
        if sequence >= start_segment && stops {
            stopped = Some(sequence);
        }
        report.segments.push(usage);
    }
    let mut fetch = |at: LssAddress, pieces: &mut PieceHeaders| read_piece(dir, sb, at, pieces);
    if let Some((name, c)) = &outcome.checkpoint {
        for &(pid, address) in &c.entries {
            let (file, offset) = place(address);
            if address.offset() >= stable_end {
                report.table_problems.push(format!(
                    "map checkpoint {name}: PID {pid}: its entry names {file} offset {offset} \
                     (address {address}), at or above T {stable_end}: not stable when published"
                ));
            }
            if let Err(e) = follow_chain(pid, address, &mut pieces, &mut fetch) {
                let (file, offset) = place(e.at);
                report.table_problems.push(format!(
                    "map checkpoint {name}: PID {pid}: its chain from address {address} breaks \
                     at {file} offset {offset} (address {}): {}",
                    e.at, e.what
                ));
            }
        }
    }
    let scanned_end = LssAddress::current(report.scanned_end);
    let open = OpenReport {
        end: scanned_end,
        segment_count: sequences.len(),
        scanned_record_count: 0,
        cut: None,
        removed: Vec::new(),
    };
    let named: BTreeMap<Pid, LssAddress> = outcome
        .checkpoint
        .as_ref()
        .map(|(_, c)| c.entries.iter().copied().collect())
        .unwrap_or_default();
    let map = scan.finish(
        outcome.checkpoint,
        Vec::new(),
        open,
        LssAddress::current(start),
        scanned_end,
    );
    let checkpoint = map.checkpoint;
    // A version-3 checkpoint's live pieces (`checkpoint.rs` "Live pieces"): every chain
    // piece below S must be among them, or an open falls back to reading the segments.
    let recorded = checkpoint
        .as_ref()
        .and_then(|(name, c)| Some((name.as_str(), c.pieces.as_deref()?)));
    report.recorded_pieces = recorded.map(|(_, r)| r.len() as u64);
    report.stats = map.stats;
    report.pid_end = map.pid_end;
    report.free = map.free.len() as u64;
    let resident: BTreeSet<Pid> = map.unit_deltas.keys().copied().collect();
    report.resident = resident.len() as u64;
    let mut live: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &(pid, newest) in &map.pages {
        report.evicted += u64::from(!resident.contains(&pid));
        match follow_chain(pid, newest, &mut pieces, &mut fetch) {
            Ok(chain) => {
                *report.pieces_per_page.entry(chain.len()).or_default() += 1;
                for &(offset, _) in chain.iter().filter(|&&(o, _)| o < start) {
                    let Some((name, recorded)) = recorded else {
                        break;
                    };
                    if recorded
                        .binary_search_by_key(&(pid, offset), |p| (p.pid, p.offset))
                        .is_err()
                    {
                        let (file, at) = place(LssAddress::current(offset));
                        report.table_problems.push(format!(
                            "map checkpoint {name}: PID {pid}: its chain's piece at {file} \
                             offset {at} (address {offset}), below S, is not among the \
                             checkpoint's live pieces: an open reads every segment below S"
                        ));
                    }
                }
                for (offset, bytes) in chain {
                    let segment = live.entry(offset / sb).or_default();
                    segment.0 += 1;
                    segment.1 += u64::from(bytes);
                    report.live_bytes += u64::from(bytes);
                }
            }
            // The table check named it already.
            Err(_) if named.get(&pid) == Some(&newest) => {}
            Err(e) => {
                let (file, offset) = place(e.at);
                report.chain_problems.push(format!(
                    "PID {pid} as recovered: its chain from address {newest} breaks at {file} \
                     offset {offset} (address {}): {}; a read of it fails",
                    e.at, e.what
                ));
            }
        }
    }
    // A page with unit deltas only (a split's new page) has no piece yet.
    let unit_only = resident
        .iter()
        .filter(|&&p| map.pages.binary_search_by_key(&p, |e| e.0).is_err())
        .count();
    if unit_only > 0 {
        *report.pieces_per_page.entry(0).or_default() += unit_only as u64;
    }
    for usage in &mut report.segments {
        if let Some(&(pieces, bytes)) = live.get(&usage.sequence) {
            usage.live_pieces = pieces;
            usage.live_bytes = bytes;
        }
    }
    report.checkpoint = checkpoint;
    report.headers_kept = pieces.0.len() as u64;
    Ok(report)
}

/// Reads and decodes segment `sequence`'s header. A size of 0 is damage (no LSS writes it; an
/// open refuses it as a size other than its own): every address computation divides by it.
fn read_header(dir: &dyn Dir, sequence: u64) -> std::result::Result<SegmentHeader, String> {
    let mut head = [0u8; SEGMENT_HEADER_BYTES as usize];
    dir.open(&segment_file_name(sequence))
        .and_then(|file| file.read_exact_at(0, &mut head))
        .map_err(|e| e.to_string())?;
    match decode_header(&head)? {
        h if h.segment_bytes == 0 => Err("the header names segment size 0".into()),
        h => Ok(h),
    }
}

/// Reads segment `sequence` front to back through a bounded window (a chunk plus the largest
/// record, not the whole segment) and calls `visit` with each valid record in order. Damage
/// below `resume` (S's offset in S's segment, else 0), which recovery's scan from S never
/// reads, is reported and decoding goes on at `resume`. Also returns whether decoding
/// stopped at or above `resume` (damage, a torn tail): where recovery's scan stops.
fn read_segment(
    dir: &dyn Dir,
    sequence: u64,
    segment_bytes: u64,
    last: bool,
    stable_end: u64,
    resume: u64,
    visit: &mut dyn FnMut(LssAddress, &record::RecordRef<'_>),
) -> (SegmentUsage, bool) {
    let name = segment_file_name(sequence);
    let mut usage = SegmentUsage {
        sequence,
        name: name.clone(),
        ..SegmentUsage::default()
    };
    let read_error = |usage: &mut SegmentUsage, e: Error| {
        usage.damage = Some(format!("{name}: {e}"));
    };
    let mut window = match dir
        .open(&name)
        .and_then(|f| ReadWindow::new(f, READ_CHUNK_BYTES))
    {
        Ok(window) => window,
        Err(e) => {
            read_error(&mut usage, e);
            return (usage, true);
        }
    };
    usage.bytes = window.len();
    let head = match window.bytes_at(0, SEGMENT_HEADER_BYTES as usize) {
        Ok(head) => head,
        Err(e) => {
            read_error(&mut usage, e);
            return (usage, true);
        }
    };
    match decode_header(head) {
        // A creation a crash cut off (header only): an open removes it.
        Err(why) if last && usage.bytes <= SEGMENT_HEADER_BYTES => {
            usage.torn = Some((0, usage.bytes, format!("segment creation cut off: {why}")));
            return (usage, true);
        }
        Err(why) => {
            usage.damage = Some(format!("{name}: offset 0: {why}"));
            return (usage, true);
        }
        Ok(h) if h.sequence != sequence || h.segment_bytes != segment_bytes => {
            usage.damage = Some(format!(
                "{name}: offset 0: the header names sequence {} and segment size {} (expected \
                 {sequence} and {segment_bytes})",
                h.sequence, h.segment_bytes
            ));
            return (usage, true);
        }
        Ok(_) => {}
    }
    // A crafted sequence can put the segment past the address space.
    let Some(segment_start) = sequence.checked_mul(segment_bytes).filter(|s| {
        s.checked_add(segment_bytes)
            .is_some_and(|e| e <= LSS_OFFSET_MAX)
    }) else {
        usage.damage = Some(format!(
            "{name}: sequence {sequence} of {segment_bytes}-byte segments lies past the LSS's \
             largest address {LSS_OFFSET_MAX}"
        ));
        return (usage, true);
    };
    let len = usage.bytes.min(segment_bytes);
    let mut at = SEGMENT_HEADER_BYTES;
    while at < len {
        let address = LssAddress::current(segment_start + at);
        let bytes = match window_record(&mut window, at) {
            // Only the segment's bytes (a longer file's tail is no record).
            Ok(bytes) => &bytes[..bytes.len().min((len - at) as usize)],
            Err(e) => {
                read_error(&mut usage, e);
                return (usage, true);
            }
        };
        match record::decode(address, bytes) {
            Ok(rec) => {
                usage.records += 1;
                usage.record_bytes += rec.len() as u64;
                visit(address, &rec);
                at += rec.len() as u64;
            }
            Err(e) => {
                let what = e.to_error(&dir.path().join(&name), at, address).to_string();
                if last && segment_start + at >= stable_end {
                    usage.torn = Some((at, usage.bytes - at, what));
                    return (usage, true);
                }
                let first = format!(
                    "{name}: first bad record at offset {at} (below T {stable_end} or before the \
                     last segment): {what}"
                );
                usage.damage = Some(match usage.damage.take() {
                    Some(below) => format!("{below}; from S on, {first}"),
                    None => first,
                });
                if at >= resume {
                    return (usage, true);
                }
                // Below S: the scan from S does not read it; decode again from S.
                at = resume.min(len);
            }
        }
    }
    let end = segment_start + at;
    // A full segment's end is the next one's start, whose header holds no record.
    let end_records = if end.is_multiple_of(segment_bytes) {
        end + SEGMENT_HEADER_BYTES
    } else {
        end
    };
    if last && end_records < stable_end {
        let short = format!(
            "{name}: the LSS ends at offset {at} (address {end}), below T {stable_end} that the \
             map checkpoint relies on"
        );
        usage.damage = Some(match usage.damage.take() {
            Some(below) => format!("{below}; {short}"),
            None => short,
        });
        return (usage, true);
    } else if last && usage.bytes > len {
        usage.torn = Some((
            len,
            usage.bytes - len,
            "bytes past the segment's size".into(),
        ));
        return (usage, true);
    }
    (usage, false)
}

/// Reads the record at `at` on its own (one not met by the segment pass: past damage, or not
/// where a record begins) and notes it if it is a page piece.
fn read_piece(
    dir: &dyn Dir,
    segment_bytes: u64,
    at: LssAddress,
    pieces: &mut PieceHeaders,
) -> std::result::Result<(), String> {
    let sequence = at.offset() / segment_bytes;
    let offset = at.offset() % segment_bytes;
    let name = segment_file_name(sequence);
    if offset < SEGMENT_HEADER_BYTES {
        return Err("inside a segment header".into());
    }
    let file = dir
        .open(&name)
        .map_err(|e| format!("segment file {name} cannot be read: {e}"))?;
    let available = file
        .len()
        .map_err(|e| e.to_string())?
        .min(segment_bytes)
        .saturating_sub(offset);
    let mut bytes = vec![0u8; (RECORD_HEADER_BYTES as u64).min(available) as usize];
    file.read_exact_at(offset, &mut bytes)
        .map_err(|e| e.to_string())?;
    if let Some(payload) = payload_len(&bytes) {
        let need = RECORD_HEADER_BYTES as u64 + u64::from(payload);
        if need <= available {
            bytes.resize(need as usize, 0);
            file.read_exact_at(offset, &mut bytes)
                .map_err(|e| e.to_string())?;
        }
    }
    let rec = record::decode(at, &bytes)
        .map_err(|e| e.to_error(&dir.path().join(&name), offset, at).to_string())?;
    match rec.header.kind {
        RecordKind::PageImage | RecordKind::DeltaRun => {
            pieces.note(at, &rec.header, rec.payload.len());
            Ok(())
        }
        kind => Err(format!("a {} record, not a page piece", kind.name())),
    }
}
