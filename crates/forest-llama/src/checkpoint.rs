//! Mapping-table checkpoints (issue 17 "Recovery", first part; Bw-tree §V-A, §VIII-B; TSBw
//! §II-D; llama-notes §4): PID → address of the page's newest stable piece, the free PIDs and
//! the LSS address S the checkpoint began at, written fuzzily while pages change and published
//! atomically. Recovery (a later increment) loads the newest valid one and scans the LSS from S.
//! File format byte by byte in docs/FORMAT.md "Mapping-table checkpoints".
//!
//! Taking one ([`Checkpoints::take`]):
//! 1. `walk` = the number of walks begun, plus one (for the cleaner's rule below);
//! 2. S = [`Lss::mk_stable`] of everything reserved: every record below S is durable, so every
//!    flush that reserved below S has already made its CAS (a flush copies and commits after
//!    its CAS, and a buffer becomes durable only once its writers left);
//! 3. walk the words: an evicted page (tag `01`) records its address (stable by eviction's
//!    invariant); a resident page records the address of its newest flush delta, which the
//!    access method finds (`newest_flushed`), or nothing if it has none; a free-list word
//!    records a free PID; an empty word nothing;
//! 4. T = Mk-Stable of everything reserved again: every address recorded is now stable (a
//!    resident page's newest flush may lie at or above S). T is in the file: damage recovery
//!    meets in [S, T) lost a piece the checkpoint relies on; damage at or above T may be a
//!    torn tail;
//! 5. write `map-<seq>.tmp`, fsync, rename to `map-<seq>`, fsync the directory (the store's
//!    checkpoint rules, forest-store `checkpoint.rs`), then delete all but the newest
//!    [`GENERATIONS_KEPT`].
//!
//! Recovery rule ([`Recovery`]): start from the checkpoint's entries and free PIDs, then scan
//! the LSS from S to the end of the stable prefix and apply each valid record in address
//! order ([`Recovery::apply_piece`]): a delta run or a flush's page image becomes its page's
//! address and takes the PID off the free set; a relocation image (a page image whose `prev`
//! names the address `old` it relocates from, docs/FORMAT.md) applies only if `old` holds
//! the state the page recovers to (its address, or an image of that state applied before);
//! every other kind changes nothing. The
//! cleaner makes a relocation image stable *before* its CAS, so a relocation that lost
//! (the page was loaded and flushed meanwhile) leaves a valid image above the page's newest
//! piece: "later wins" alone would bring back that stale state (review rev-mapckpt F4).
//!
//! A *piece* of P below is a record whose CAS installed it (a flush's delta on P's state, an
//! eviction's or a relocation's word); P's pieces lie in address order (a flush reserves
//! before its CAS, and a relocation's CAS wins only if no piece was installed since it was
//! posted: the word still holds `old`). A lost flush leaves a filler; a lost relocation an
//! image of `old`, the same page state as `old`.
//!
//! Why a fuzzy walk is complete: recovery ends each page P at its newest stable piece at the
//! crash, or at a lost relocation image of that piece (the same state; its segment is kept
//! while a kept checkpoint's scan reaches it, below).
//! 1. The walk records, for the newest piece A of P below S, A or a later piece (E ≥ S), and
//!    nothing if P has none: A's flush made its CAS before the walk (step 2), so the word
//!    the walk read holds A's flush delta or a newer state of P (a state built on it, deltas,
//!    a consolidation, which keeps the newest flush, a later flush, an eviction or
//!    relocation to a stable address). Every address recorded is stable (step 4).
//! 2. Say the scan is *on track* at Y if P recovers to the state of its newest piece below Y
//!    (that piece or an image of it; the addresses known to hold it include that piece),
//!    and *off track* if P recovers to the entry E ≥ Y and every piece of P in [S, Y)
//!    is a relocation. At Y = S, one holds by 1.
//! 3. A record of P at Y: a delta run or a flush's image is P's next piece and applies: on
//!    track. A relocation of `old` that won: on track, `old` is the newest piece, which
//!    holds P's state, and it applies; off track, it is skipped (P is at E, and `old` < Y ≤
//!    E), and P stays off track if Y < E, or is at its newest piece if Y = E: on track. A
//!    lost relocation of `old` (no piece): on track it applies only if `old` holds P's state
//!    (an image of it: on track); off track, skipped. Fillers change nothing.
//! 4. E is stable, so the scan passes it: it ends on track, at P's newest stable piece or an
//!    image of it. With no stable piece, the walk recorded nothing and the scan meets no
//!    piece; a relocation image needs P mapped to apply.
//!
//! The free marks are a snapshot of the free list as the walk read it: a PID recorded free
//! may be allocated again and flushed at or above S, and then the scan meets its piece and
//! the rule takes it off the free set (review rev-mapckpt F5). The checkpoint leaves open
//! whether a PID below `pid_end` with neither an entry nor a free mark (allocated with no
//! stable piece, or freed while its epoch drained), or a PID freed after the walk, exists
//! after the scan: that is recovery's, with the system transactions' Allocate and Free.
//!
//! Live pieces (version 3): between steps 2 and 3 the walk snapshots the LSS's space map
//! (`lss/space.rs`): every piece it counts live below S, kept for the PIDs the walk maps. A
//! recovering open builds its space map from them and the scan from S instead of reading
//! every segment below S (`recover.rs` step 5). Why that is enough: a piece of P below S
//! that the chain recovery ends at reaches was in P's current chain when the snapshot was
//! taken, and the space map counts every current-chain piece (its invariant; a flush and a
//! relocation note their piece at reservation, and every reservation below S was released
//! before S was fixed). The notes that kill a piece before the snapshot cannot hide one
//! recovery needs: an image note follows its CAS, and that image is below T, so the scan
//! (or the walk's entry, below S) ends P's chain at it or above; a Free note follows the word
//! emptied, so the walk maps P to no piece of that life. Pieces counted live but dead (a lost
//! relocation not yet noted) only delay cleaning. The snapshot is taken only if the space
//! map counts every piece of the log (an open whose rebuild failed does not): otherwise the
//! file is written as version 2 and the next open reads the segments below S as before.
//!
//! Opening ([`Checkpoints::open`]) sets damaged published files aside as `<name>.corrupt`,
//! the older kept one included (then one generation is kept and the cleaner may remove
//! nothing until a second is taken); sequences continue above every `map-<seq>` and
//! `.corrupt` name, `u64::MAX` is never one. A whole file of a newer format version is
//! refused ([`Error::InvalidUse`]) and left in place.
//!
//! What the cleaner must obey so recovery never meets a missing piece ([`Checkpoints::
//! may_remove`]): a segment can be removed only if (a) it lies wholly below the S of the
//! *older* kept checkpoint (recovery falls back to it when the newest is damaged, and scans
//! from its S), and (b) both kept checkpoints began their walks after the segment's last live
//! piece died ([`Checkpoints::clean_ticket`] when it emptied): a walk that read a word before a
//! relocation or a newer image superseded the piece would name the removed piece.
//!
//! Invariants:
//! - A published `map-<seq>` was fsynced whole before its rename; a `.tmp` is never read.
//! - Every address in a published checkpoint was stable before it was published.
//! - [`decode`] never panics and checks every byte it accepts: header and body crc32c, counts
//!   against the length, T not below S, PIDs strictly ascending and below `pid_end`, no PID
//!   both mapped and free; a failure is [`Error::Corrupt`] naming the file and offset (a
//!   newer version: [`Error::InvalidUse`]).
//! - `walks_begun`'s increment and [`Checkpoints::clean_ticket`]'s load are SeqCst: the
//!   cleaner writes "segment emptied" then reads the count, a walk increments it then reads
//!   the words (store buffering: acquire/release alone lets both read the old values).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::Shared;
use forest_core::{Error, Result};
use forest_file::Dir;
use parking_lot::Mutex;

use crate::lss::{Lss, LssAddress, RecordHeader, RecordKind, LSS_OFFSET_MAX, RECORD_HEADER_BYTES};
use crate::mapping_table::{MappingTable, PageState, Pid, PID_COUNT_MAX};
use crate::page_state::PageLocation;

/// The first 8 bytes of a mapping-table checkpoint.
pub const MAP_MAGIC: [u8; 8] = *b"FORESTMP";
/// The last 4 bytes of a mapping-table checkpoint.
pub const MAP_TRAILER_MAGIC: [u8; 4] = *b"MPEN";
/// The format version this build writes (with the live pieces below S); it reads this,
/// [`MAP_FORMAT_VERSION_NO_PIECES`] and [`MAP_FORMAT_VERSION_ROOTLESS`].
pub const MAP_FORMAT_VERSION: u32 = 3;
/// Version 2: version 3 without the live-pieces section; also what this build writes when
/// its LSS does not track every piece ([`MapCheckpoint::pieces`] `None`).
pub const MAP_FORMAT_VERSION_NO_PIECES: u32 = 2;
/// Version 1: the same layout with bytes 12..16 reserved (zero), read as "no root recorded".
pub const MAP_FORMAT_VERSION_ROOTLESS: u32 = 1;
/// Bytes of the header.
pub const MAP_HEADER_BYTES: usize = 80;
/// Bytes of one mapped entry (PID, address).
pub const MAP_ENTRY_BYTES: usize = 16;
/// Bytes of one free PID.
pub const MAP_FREE_BYTES: usize = 8;
/// Bytes of the live-pieces count (version 3).
pub const MAP_PIECE_COUNT_BYTES: usize = 8;
/// Bytes of one live piece (PID u32, record bytes u32, log offset u64; version 3).
pub const MAP_PIECE_BYTES: usize = 16;
/// Bytes of the trailer (body crc32c, magic).
pub const MAP_TRAILER_BYTES: usize = 8;
/// Published checkpoints kept: the newest and the one recovery falls back to.
pub const GENERATIONS_KEPT: usize = 2;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const ROOT_AT: usize = 12;
const SEQUENCE_AT: usize = 16;
const START_AT: usize = 24;
const RSSP_AT: usize = 32;
const PID_END_AT: usize = 40;
const ENTRY_COUNT_AT: usize = 48;
const FREE_COUNT_AT: usize = 56;
const STABLE_END_AT: usize = 64;
const RESERVED_B_AT: usize = 72;
const HEADER_CRC_AT: usize = 76;
const _: () = assert!(HEADER_CRC_AT + 4 == MAP_HEADER_BYTES);

/// PIDs walked under one epoch pin, so a long walk does not hold reclamation back.
const WALK_PIN_PIDS: u64 = 4096;

const PREFIX: &str = "map-";
const TMP_SUFFIX: &str = ".tmp";
const CORRUPT_SUFFIX: &str = ".corrupt";

/// The name of published checkpoint `sequence`.
pub fn map_file_name(sequence: u64) -> String {
    format!("{PREFIX}{sequence:016x}")
}

/// The name checkpoint `sequence` is written under before its rename.
pub fn map_tmp_name(sequence: u64) -> String {
    format!("{PREFIX}{sequence:016x}{TMP_SUFFIX}")
}

/// The sequence of a published checkpoint's name, if `name` is one. `u64::MAX` is never a
/// sequence (there would be no next one), so `map-ffffffffffffffff` is no checkpoint's name.
pub fn parse_map_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix(PREFIX)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().filter(|&s| s != u64::MAX)
}

/// The sequence of a checkpoint set aside as `<name>.corrupt`, if `name` is one.
fn parse_corrupt_name(name: &str) -> Option<u64> {
    parse_map_file_name(name.strip_suffix(CORRUPT_SUFFIX)?)
}

fn is_map_tmp(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX)
        .is_some_and(|n| parse_map_file_name(n).is_some())
}

/// One mapping-table checkpoint's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapCheckpoint {
    /// Its number: the newest checkpoint has the highest.
    pub sequence: u64,
    /// S: recovery scans the LSS from here (every record below it was durable when the walk
    /// began).
    pub start: LssAddress,
    /// The access method's root PID as read after S was fixed (the Bw-tree logs every later
    /// root change as a system transaction, which the scan from S meets); `None`: not
    /// recorded (version 1 files, or a taker without a root).
    pub root: Option<Pid>,
    /// The store's field, opaque to LLAMA: the RSSP (Bw-tree §V-A) the store had acknowledged
    /// before the checkpoint began, so every update below it lies in pieces below S; WAL redo
    /// after this checkpoint alone may start there. 0 if none.
    pub rssp: u64,
    /// One past the highest PID the table had handed out.
    pub pid_end: u64,
    /// T: Hi-Stable once the walk finished (step 4). Recovery that meets damage in [S, T)
    /// has lost a piece the checkpoint relies on; damage at or above T may be a torn tail.
    pub stable_end: LssAddress,
    /// PID → address of its newest stable piece, PIDs strictly ascending.
    pub entries: Vec<(Pid, LssAddress)>,
    /// PIDs on the free list when the walk read their words, strictly ascending, none of
    /// them in `entries`: a snapshot; a PID may be allocated again after (see [`Recovery`]).
    pub free: Vec<Pid>,
    /// The LSS's live pieces below S of the mapped PIDs, snapshotted from its space map after
    /// S was fixed ("Live pieces" in the module doc), ascending by (PID, offset); a recovering
    /// open builds the space map from them instead of reading every segment below S.
    /// `None`: not recorded (versions 1 and 2, or an LSS that does not track every piece),
    /// written as version 2.
    pub pieces: Option<Vec<LivePiece>>,
}

/// A live page piece below S (version 3): a record of `bytes` (header included) at log
/// offset `offset`, part of page `pid`'s chain or counted live by the space map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LivePiece {
    pub pid: Pid,
    pub offset: u64,
    pub bytes: u32,
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&data[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&data[at..at + 8]);
    u64::from_le_bytes(w)
}

fn corrupt(path: &Path, offset: usize, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.into(),
    }
}

impl MapCheckpoint {
    /// The file's bytes (docs/FORMAT.md "Mapping-table checkpoints"), as given: [`walk`]
    /// builds sorted lists, and [`decode`] refuses any other.
    pub fn encode(&self) -> Vec<u8> {
        let pieces_bytes = self
            .pieces
            .as_ref()
            .map_or(0, |p| MAP_PIECE_COUNT_BYTES + p.len() * MAP_PIECE_BYTES);
        let mut out = Vec::with_capacity(
            MAP_HEADER_BYTES
                + self.entries.len() * MAP_ENTRY_BYTES
                + self.free.len() * MAP_FREE_BYTES
                + pieces_bytes
                + MAP_TRAILER_BYTES,
        );
        out.extend_from_slice(&MAP_MAGIC);
        let version = if self.pieces.is_some() {
            MAP_FORMAT_VERSION
        } else {
            MAP_FORMAT_VERSION_NO_PIECES
        };
        put_u32(&mut out, version);
        // PIDs are below PID_COUNT_MAX < u32::MAX (mapping_table.rs), so pid + 1 fits.
        put_u32(&mut out, self.root.map_or(0, |pid| pid as u32 + 1));
        put_u64(&mut out, self.sequence);
        put_u64(&mut out, self.start.to_bits());
        put_u64(&mut out, self.rssp);
        put_u64(&mut out, self.pid_end);
        put_u64(&mut out, self.entries.len() as u64);
        put_u64(&mut out, self.free.len() as u64);
        put_u64(&mut out, self.stable_end.to_bits());
        put_u32(&mut out, 0);
        let crc = crc32c::crc32c(&out[..HEADER_CRC_AT]);
        put_u32(&mut out, crc);
        for &(pid, address) in &self.entries {
            put_u64(&mut out, pid);
            put_u64(&mut out, address.to_bits());
        }
        for &pid in &self.free {
            put_u64(&mut out, pid);
        }
        if let Some(pieces) = &self.pieces {
            put_u64(&mut out, pieces.len() as u64);
            for piece in pieces {
                // PIDs are below PID_COUNT_MAX < u32::MAX (mapping_table.rs).
                put_u32(&mut out, piece.pid as u32);
                put_u32(&mut out, piece.bytes);
                put_u64(&mut out, piece.offset);
            }
        }
        let crc = crc32c::crc32c(&out[MAP_HEADER_BYTES..]);
        put_u32(&mut out, crc);
        out.extend_from_slice(&MAP_TRAILER_MAGIC);
        out
    }
}

/// Checks and decodes a whole checkpoint file read from `path`. Never panics; any damage is
/// [`Error::Corrupt`] with the offset of the first bad field.
pub fn decode(path: &Path, data: &[u8]) -> Result<MapCheckpoint> {
    let least = MAP_HEADER_BYTES + MAP_TRAILER_BYTES;
    if data.len() < least {
        return Err(corrupt(
            path,
            data.len(),
            format!(
                "map checkpoint cut short: {} bytes, at least {least}",
                data.len()
            ),
        ));
    }
    let stored = u32_at(data, HEADER_CRC_AT);
    let computed = crc32c::crc32c(&data[..HEADER_CRC_AT]);
    if stored != computed {
        return Err(corrupt(
            path,
            HEADER_CRC_AT,
            format!(
                "map checkpoint header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
        ));
    }
    if data[MAGIC_AT..VERSION_AT] != MAP_MAGIC {
        return Err(corrupt(path, MAGIC_AT, "not a map checkpoint (bad magic)"));
    }
    let version = u32_at(data, VERSION_AT);
    if version > MAP_FORMAT_VERSION {
        // Whole (the crc matched): not damage, a newer build's file. Never set it aside.
        return Err(Error::InvalidUse(format!(
            "{}: map checkpoint format version {version} is newer than this build's \
             {MAP_FORMAT_VERSION}; open the directory with a build that reads it",
            path.display()
        )));
    }
    if version < MAP_FORMAT_VERSION_ROOTLESS {
        return Err(corrupt(
            path,
            VERSION_AT,
            format!("map checkpoint format version {version}, this build reads versions {MAP_FORMAT_VERSION_ROOTLESS} to {MAP_FORMAT_VERSION}"),
        ));
    }
    let with_pieces = version == MAP_FORMAT_VERSION;
    let root = match u32_at(data, ROOT_AT) {
        0 => None,
        _ if version == MAP_FORMAT_VERSION_ROOTLESS => {
            return Err(corrupt(path, ROOT_AT, "reserved bytes not zero"))
        }
        plus_one => Some(u64::from(plus_one - 1)),
    };
    if u32_at(data, RESERVED_B_AT) != 0 {
        return Err(corrupt(path, RESERVED_B_AT, "reserved bytes not zero"));
    }
    let sequence = u64_at(data, SEQUENCE_AT);
    let Some(start) = LssAddress::from_bits(u64_at(data, START_AT)) else {
        return Err(corrupt(path, START_AT, "start is not an LSS address"));
    };
    let rssp = u64_at(data, RSSP_AT);
    let Some(stable_end) = LssAddress::from_bits(u64_at(data, STABLE_END_AT)) else {
        return Err(corrupt(
            path,
            STABLE_END_AT,
            "stable_end is not an LSS address",
        ));
    };
    if stable_end.offset() < start.offset() {
        return Err(corrupt(path, STABLE_END_AT, "stable_end below start"));
    }
    let pid_end = u64_at(data, PID_END_AT);
    if pid_end > PID_COUNT_MAX as u64 {
        return Err(corrupt(
            path,
            PID_END_AT,
            format!("pid_end {pid_end} above the table's {PID_COUNT_MAX} PIDs"),
        ));
    }
    let entry_count = u64_at(data, ENTRY_COUNT_AT);
    let free_count = u64_at(data, FREE_COUNT_AT);
    // Entries and free PIDs; then, in version 3, the pieces' count and the pieces.
    let lists = entry_count
        .checked_mul(MAP_ENTRY_BYTES as u64)
        .and_then(|e| {
            free_count
                .checked_mul(MAP_FREE_BYTES as u64)?
                .checked_add(e)
        })
        .and_then(|b| b.checked_add(MAP_HEADER_BYTES as u64));
    let pieces_at = lists.filter(|&end| {
        let room = end.checked_add(MAP_TRAILER_BYTES as u64);
        if with_pieces {
            room.and_then(|r| r.checked_add(MAP_PIECE_COUNT_BYTES as u64))
                .is_some_and(|r| r <= data.len() as u64)
        } else {
            room == Some(data.len() as u64)
        }
    });
    let Some(pieces_at) = pieces_at else {
        return Err(corrupt(
            path,
            ENTRY_COUNT_AT,
            format!(
                "{entry_count} entries and {free_count} free PIDs do not fit the file's {} bytes",
                data.len()
            ),
        ));
    };
    // Below data.len(), so a usize.
    let pieces_at = pieces_at as usize;
    let piece_count = if with_pieces {
        let count = u64_at(data, pieces_at);
        let expected = count.checked_mul(MAP_PIECE_BYTES as u64).and_then(|b| {
            b.checked_add((pieces_at + MAP_PIECE_COUNT_BYTES + MAP_TRAILER_BYTES) as u64)
        });
        if expected != Some(data.len() as u64) {
            return Err(corrupt(
                path,
                pieces_at,
                format!(
                    "{count} live pieces do not fill the file's {} bytes",
                    data.len()
                ),
            ));
        }
        count
    } else {
        0
    };
    let trailer_at = data.len() - MAP_TRAILER_BYTES;
    if data[trailer_at + 4..] != MAP_TRAILER_MAGIC {
        return Err(corrupt(
            path,
            trailer_at + 4,
            "map checkpoint trailer missing (bad trailer magic)",
        ));
    }
    let stored = u32_at(data, trailer_at);
    let computed = crc32c::crc32c(&data[MAP_HEADER_BYTES..trailer_at]);
    if stored != computed {
        return Err(corrupt(
            path,
            trailer_at,
            format!(
                "map checkpoint body checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
        ));
    }
    // The counts fill the file exactly, so they fit memory.
    let mut entries = Vec::with_capacity(entry_count as usize);
    let mut at = MAP_HEADER_BYTES;
    let free_at = MAP_HEADER_BYTES + entry_count as usize * MAP_ENTRY_BYTES;
    while at < free_at {
        let pid = u64_at(data, at);
        if pid >= pid_end {
            return Err(corrupt(
                path,
                at,
                format!("entry PID {pid} not below pid_end {pid_end}"),
            ));
        }
        if entries.last().is_some_and(|&(last, _)| last >= pid) {
            return Err(corrupt(path, at, format!("entry PID {pid} out of order")));
        }
        let Some(address) = LssAddress::from_bits(u64_at(data, at + 8)) else {
            return Err(corrupt(
                path,
                at + 8,
                format!("entry of PID {pid}: not an LSS address"),
            ));
        };
        entries.push((pid, address));
        at += MAP_ENTRY_BYTES;
    }
    let mut free: Vec<Pid> = Vec::with_capacity(free_count as usize);
    while at < pieces_at {
        let pid = u64_at(data, at);
        if pid >= pid_end {
            return Err(corrupt(
                path,
                at,
                format!("free PID {pid} not below pid_end {pid_end}"),
            ));
        }
        if free.last().is_some_and(|&last| last >= pid) {
            return Err(corrupt(path, at, format!("free PID {pid} out of order")));
        }
        if entries.binary_search_by_key(&pid, |&(p, _)| p).is_ok() {
            return Err(corrupt(
                path,
                at,
                format!("PID {pid} is both mapped and free"),
            ));
        }
        free.push(pid);
        at += MAP_FREE_BYTES;
    }
    let pieces = if with_pieces {
        at += MAP_PIECE_COUNT_BYTES;
        let mut pieces: Vec<LivePiece> = Vec::with_capacity(piece_count as usize);
        while at < trailer_at {
            let piece = LivePiece {
                pid: u64::from(u32_at(data, at)),
                bytes: u32_at(data, at + 4),
                offset: u64_at(data, at + 8),
            };
            check_piece(path, at, &piece, pieces.last(), &entries, start)?;
            pieces.push(piece);
            at += MAP_PIECE_BYTES;
        }
        Some(pieces)
    } else {
        None
    };
    Ok(MapCheckpoint {
        sequence,
        start,
        root,
        rssp,
        pid_end,
        stable_end,
        entries,
        free,
        pieces,
    })
}

/// A version-3 live piece at file offset `at`, after `last`: a mapped PID's, ascending by
/// (PID, offset), not overlapping the PID's previous piece, at least a record header, and
/// wholly below S (recovery reads the segments from S).
fn check_piece(
    path: &Path,
    at: usize,
    piece: &LivePiece,
    last: Option<&LivePiece>,
    entries: &[(Pid, LssAddress)],
    start: LssAddress,
) -> Result<()> {
    let LivePiece { pid, bytes, offset } = *piece;
    if entries.binary_search_by_key(&pid, |&(p, _)| p).is_err() {
        return Err(corrupt(
            path,
            at,
            format!("live piece of PID {pid}, which has no entry"),
        ));
    }
    if let Some(last) = last {
        if (last.pid, last.offset) >= (pid, offset) {
            return Err(corrupt(
                path,
                at,
                format!("live piece of PID {pid} at {offset} out of order"),
            ));
        }
        if last.pid == pid && last.offset + u64::from(last.bytes) > offset {
            return Err(corrupt(
                path,
                at,
                format!(
                    "live piece of PID {pid} at {offset} overlaps the one at {}",
                    last.offset
                ),
            ));
        }
    }
    if (bytes as usize) < RECORD_HEADER_BYTES {
        return Err(corrupt(
            path,
            at + 4,
            format!(
                "live piece of PID {pid} at {offset}: {bytes} bytes, less than a record header"
            ),
        ));
    }
    if offset
        .checked_add(u64::from(bytes))
        .is_none_or(|end| end > start.offset())
    {
        return Err(corrupt(
            path,
            at + 8,
            format!(
                "live piece of PID {pid} at {offset} ({bytes} bytes) does not end below S {start}"
            ),
        ));
    }
    Ok(())
}

/// What [`read_newest`] found.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// The newest valid checkpoint, with its file name; `None` if there is no checkpoint file.
    pub checkpoint: Option<(String, MapCheckpoint)>,
    /// Published checkpoints that failed their checks, each with its error: those newer than
    /// the one loaded ([`read_newest`]), and a damaged older kept one ([`Checkpoints::open`]).
    pub rejected: Vec<(String, String)>,
    /// Unpublished `.tmp` files (never read).
    pub tmp: Vec<String>,
}

/// Reads the newest valid checkpoint in `dir`, newest first: a torn or damaged one falls back
/// to the one before. No checkpoint file is `Ok` with none; checkpoint files of which none is
/// valid is [`Error::Corrupt`] (recovery must not silently start from nothing). A whole file
/// of a newer format version is [`Error::InvalidUse`], never a fallback. Changes nothing on
/// disk.
pub fn read_newest(dir: &dyn Dir) -> Result<ReadOutcome> {
    let names = dir.list()?;
    let mut outcome = ReadOutcome {
        tmp: names.iter().filter(|n| is_map_tmp(n)).cloned().collect(),
        ..ReadOutcome::default()
    };
    let mut published: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| parse_map_file_name(n).map(|s| (s, n)))
        .collect();
    published.sort_unstable_by_key(|&(s, _)| std::cmp::Reverse(s));
    for (sequence, name) in &published {
        let file = dir.open(name)?;
        let path = file.path().to_path_buf();
        let mut data = Vec::new();
        file.read_all(&mut data)?;
        let checked = decode(&path, &data).and_then(|c| {
            if c.sequence == *sequence {
                Ok(c)
            } else {
                Err(corrupt(
                    &path,
                    SEQUENCE_AT,
                    format!("sequence {} differs from the name's {sequence}", c.sequence),
                ))
            }
        });
        match checked {
            Ok(c) => {
                outcome.checkpoint = Some(((*name).clone(), c));
                return Ok(outcome);
            }
            Err(e @ Error::Corrupt { .. }) => {
                outcome.rejected.push(((*name).clone(), e.to_string()))
            }
            // A newer format's file: refusing it is the only safe answer.
            Err(e) => return Err(e),
        }
    }
    if let Some((name, _)) = outcome.rejected.first() {
        return Err(Error::Corrupt {
            path: dir.path().join(name),
            offset: 0,
            what: format!(
                "no valid map checkpoint among {} files: {}",
                outcome.rejected.len(),
                outcome
                    .rejected
                    .iter()
                    .map(|(n, e)| format!("{n}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    Ok(outcome)
}

/// Writes `checkpoint` to `map-<seq>.tmp` and fsyncs it; on error the file is removed (best
/// effort, as the store's checkpoints: a full disk must not stay full of it).
pub fn write_tmp(dir: &dyn Dir, checkpoint: &MapCheckpoint) -> Result<u64> {
    let name = map_tmp_name(checkpoint.sequence);
    if dir.exists(&name)? {
        dir.remove(&name)?;
    }
    let bytes = checkpoint.encode();
    let written = (|| {
        let mut file = dir.create(&name)?;
        file.append(&bytes)?;
        file.sync()
    })();
    if written.is_err() {
        let _ = dir.remove(&name);
    }
    written.map(|()| bytes.len() as u64)
}

/// Publishes written checkpoint `sequence`: rename, then fsync the directory.
pub fn publish(dir: &dyn Dir, sequence: u64) -> Result<()> {
    dir.rename(&map_tmp_name(sequence), &map_file_name(sequence))?;
    dir.sync_dir()
}

/// Deletes every published checkpoint but the newest [`GENERATIONS_KEPT`], then syncs the
/// directory. Call only once the newest is published and its rename durable.
pub fn prune(dir: &dyn Dir) -> Result<()> {
    let mut sequences: Vec<u64> = dir
        .list()?
        .iter()
        .filter_map(|n| parse_map_file_name(n))
        .collect();
    sequences.sort_unstable_by(|a, b| b.cmp(a));
    if sequences.len() <= GENERATIONS_KEPT {
        return Ok(());
    }
    for &sequence in &sequences[GENERATIONS_KEPT..] {
        dir.remove(&map_file_name(sequence))?;
    }
    dir.sync_dir()
}

/// What [`Checkpoints::take`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub sequence: u64,
    /// S.
    pub start: LssAddress,
    /// Hi-Stable once every recorded address was stable (step 4).
    pub stable_end: LssAddress,
    pub entry_count: usize,
    pub free_count: usize,
    /// Live pieces recorded (version 3), or `None` (written as version 2).
    pub piece_count: Option<usize>,
    pub bytes: u64,
}

/// Walks `table` into a checkpoint (steps 2–4 of the module doc); `newest_flushed` gives the
/// address of a resident state's newest flush delta, and its error fails the walk. Writes
/// nothing to disk.
pub fn walk<T: PageState>(
    table: &MappingTable<T>,
    lss: &Lss,
    sequence: u64,
    rssp: u64,
    root: impl FnOnce() -> Result<Option<Pid>>,
    mut newest_flushed: impl FnMut(Pid, Shared<'_, T>) -> Result<Option<LssAddress>>,
) -> Result<(MapCheckpoint, LssAddress)> {
    let everything = LssAddress::current(LSS_OFFSET_MAX);
    let start = lss.mk_stable(everything)?;
    // After S: every root change logged below S had made its CAS (as every flush had).
    let root = root()?;
    // After S, before any word is read ("Live pieces" in the module doc).
    let snapshot = lss.live_pieces_below(start);
    let pid_end = table.pid_end() as u64;
    let mut entries = Vec::new();
    let mut free = Vec::new();
    let mut pid = 0;
    while pid < pid_end {
        let _guard = crossbeam_epoch::pin();
        let end = (pid + WALK_PIN_PIDS).min(pid_end);
        for p in pid..end {
            match table.read_location(p) {
                PageLocation::Memory(ptr) if !ptr.is_null() => {
                    // Read under `_guard`: the state lives until it unpins.
                    if let Some(address) = newest_flushed(p, Shared::from(ptr))? {
                        entries.push((p, address));
                    }
                }
                PageLocation::Stored(bits) => match LssAddress::from_bits(bits) {
                    Some(address) => entries.push((p, address)),
                    None => {
                        return Err(Error::InvalidUse(format!(
                            "map checkpoint: PID {p}'s word holds {bits:#x}, not an LSS address"
                        )))
                    }
                },
                PageLocation::FreeLink(_) => free.push(p),
                PageLocation::Memory(_) | PageLocation::Empty => {}
            }
        }
        pid = end;
    }
    let stable_end = lss.mk_stable(everything)?;
    // Only the mapped PIDs' pieces: recovery follows no other page below S.
    let pieces = snapshot.map(|mut all| {
        all.sort_unstable();
        let mut mapped = entries.iter().map(|&(pid, _)| pid).peekable();
        all.retain(|piece| {
            while mapped.next_if(|&pid| pid < piece.pid).is_some() {}
            mapped.peek() == Some(&piece.pid)
        });
        all
    });
    Ok((
        MapCheckpoint {
            sequence,
            start,
            root,
            rssp,
            pid_end,
            stable_end,
            entries,
            free,
            pieces,
        },
        stable_end,
    ))
}

/// Recovery's mapping table while it scans the LSS from S (module doc, "Recovery rule"):
/// starts from a checkpoint, then [`Self::apply_piece`] of every valid record from S to the
/// end of the stable prefix, in address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// PID → the addresses known to hold the state it recovers to, the one it recovers to
    /// last (never empty): a piece, then the relocation images of it the scan applied.
    pages: BTreeMap<Pid, Vec<LssAddress>>,
    free: BTreeSet<Pid>,
}

impl Recovery {
    /// The state a checkpoint records: its entries, and its free PIDs.
    pub fn from_checkpoint(checkpoint: &MapCheckpoint) -> Self {
        Self {
            pages: checkpoint
                .entries
                .iter()
                .map(|&(pid, address)| (pid, vec![address]))
                .collect(),
            free: checkpoint.free.iter().copied().collect(),
        }
    }

    /// Applies the record at `address` with `header`; whether it changed what its page
    /// recovers to. A delta run or a flush's page image is the page's newest piece so far, and
    /// takes its PID off the free set (the free marks are a snapshot: the PID was allocated
    /// again). A relocation image of `old` applies only if `old` holds the state the page
    /// recovers to (its address, or one of that state's images applied before): otherwise
    /// its CAS lost to a newer piece, and it is dead. Every other kind changes nothing.
    pub fn apply_piece(&mut self, address: LssAddress, header: &RecordHeader) -> bool {
        let pid = header.pid;
        match (header.kind, header.relocated_from()) {
            (RecordKind::PageImage, Some(old)) => match self.pages.get_mut(&pid) {
                Some(same_state) if same_state.contains(&old) => {
                    same_state.push(address);
                    true
                }
                _ => false,
            },
            (RecordKind::PageImage | RecordKind::DeltaRun, _) => {
                self.pages.insert(pid, vec![address]);
                self.free.remove(&pid);
                true
            }
            _ => false,
        }
    }

    /// A committed system transaction's Allocate of `pid` (`recover.rs`): the PID is in use
    /// again, though it may have no piece yet.
    pub fn apply_allocate(&mut self, pid: Pid) {
        self.free.remove(&pid);
    }

    /// A committed system transaction's Free of `pid` (`recover.rs`): it recovers free, and
    /// its pieces are garbage.
    pub fn apply_free(&mut self, pid: Pid) {
        self.pages.remove(&pid);
        self.free.insert(pid);
    }

    /// The address `pid` recovers to, if any.
    pub fn address_of(&self, pid: Pid) -> Option<LssAddress> {
        self.pages
            .get(&pid)
            .and_then(|same_state| same_state.last().copied())
    }

    /// Whether `pid` recovers free.
    pub fn is_free(&self, pid: Pid) -> bool {
        self.free.contains(&pid)
    }

    /// Every mapped PID and its address, ascending.
    pub fn pages(&self) -> impl Iterator<Item = (Pid, LssAddress)> + '_ {
        self.pages
            .iter()
            .filter_map(|(&pid, same_state)| Some((pid, *same_state.last()?)))
    }

    /// Every free PID, ascending; none of them mapped.
    pub fn free(&self) -> impl Iterator<Item = Pid> + '_ {
        self.free.iter().copied()
    }
}

/// The checkpoints of one LSS directory: taking them in sequence, and the bound the cleaner
/// must respect (module doc).
pub struct Checkpoints {
    dir: Arc<dyn Dir>,
    /// Walks begun in this process (the cleaner's tickets compare against it).
    walks_begun: AtomicU64,
    /// The next checkpoint's sequence; held across a whole `take`, so takes run one at a
    /// time.
    next_sequence: Mutex<u64>,
    /// The kept checkpoints, oldest first: (walk number, S). Walk 0: taken by an earlier
    /// process, which says nothing of segments emptied in this one. Its own lock, so the
    /// cleaner never waits for a checkpoint's walk or I/O.
    kept: Mutex<Vec<(u64, LssAddress)>>,
}

impl Checkpoints {
    /// Opens the checkpoints of `dir`: reads the newest valid one ([`read_newest`]), deletes
    /// unpublished `.tmp` files, and renames damaged published ones `<name>.corrupt` so that
    /// pruning never keeps a damaged file in place of a valid one. The older kept checkpoint
    /// is checked too: if damaged, it is set aside the same way (and reported in
    /// `rejected`), and only one generation is kept, so [`Self::may_remove`] refuses every
    /// segment until a second checkpoint is taken. Sequences continue above every
    /// `map-<seq>` and `map-<seq>.corrupt`, so none is reused.
    pub fn open(dir: Arc<dyn Dir>) -> Result<(Self, ReadOutcome)> {
        let mut outcome = read_newest(&*dir)?;
        let mut older = Vec::new();
        if let Some((newest, _)) = &outcome.checkpoint {
            let newest = parse_map_file_name(newest);
            let mut published: Vec<u64> = dir
                .list()?
                .iter()
                .filter_map(|n| parse_map_file_name(n))
                .filter(|&s| Some(s) < newest)
                .collect();
            published.sort_unstable();
            for &sequence in published.iter().rev().take(GENERATIONS_KEPT - 1) {
                let name = map_file_name(sequence);
                let file = dir.open(&name)?;
                let mut data = Vec::new();
                file.read_all(&mut data)?;
                match decode(file.path(), &data) {
                    Ok(c) if c.sequence == sequence => older.push(c.start),
                    Ok(c) => outcome.rejected.push((
                        name,
                        format!("sequence {} differs from the name's {sequence}", c.sequence),
                    )),
                    Err(e @ Error::Corrupt { .. }) => outcome.rejected.push((name, e.to_string())),
                    Err(e) => return Err(e),
                }
            }
        }
        for name in &outcome.tmp {
            dir.remove(name)?;
        }
        for (name, _) in &outcome.rejected {
            dir.rename(name, &format!("{name}{CORRUPT_SUFFIX}"))?;
        }
        if !outcome.tmp.is_empty() || !outcome.rejected.is_empty() {
            dir.sync_dir()?;
        }
        let seen_max = dir
            .list()?
            .iter()
            .filter_map(|n| parse_map_file_name(n).or_else(|| parse_corrupt_name(n)))
            .max();
        let next = match seen_max {
            None => 1,
            // parse_map_file_name refuses u64::MAX, so this is never None; kept checked.
            Some(s) => s.checked_add(1).ok_or_else(|| {
                Error::InvalidUse(format!(
                    "{}: map checkpoint sequences exhausted",
                    dir.path().display()
                ))
            })?,
        };
        // Oldest first; walk 0: taken by an earlier process.
        let mut kept: Vec<(u64, LssAddress)> = older.into_iter().map(|s| (0, s)).collect();
        if let Some((_, c)) = &outcome.checkpoint {
            kept.push((0, c.start));
        }
        let checkpoints = Self {
            dir,
            walks_begun: AtomicU64::new(0),
            next_sequence: Mutex::new(next),
            kept: Mutex::new(kept),
        };
        Ok((checkpoints, outcome))
    }

    /// Takes a checkpoint of `table` over `lss` (module doc, steps 1–5); one at a time.
    /// `rssp` is the store's field ([`MapCheckpoint::rssp`]); `newest_flushed` gives the
    /// address of a resident state's newest flush delta (the access method's: it must find it
    /// through consolidations too), or `None` if the page has never been flushed.
    pub fn take<T: PageState>(
        &self,
        table: &MappingTable<T>,
        lss: &Lss,
        rssp: u64,
        mut newest_flushed: impl FnMut(Pid, Shared<'_, T>) -> Option<LssAddress>,
    ) -> Result<CheckpointInfo> {
        self.take_with_root(
            table,
            lss,
            rssp,
            || Ok(None),
            |pid, state| Ok(newest_flushed(pid, state)),
        )
    }

    /// [`Self::take`] recording the access method's root PID, read by `root` after S is
    /// fixed ([`MapCheckpoint::root`]). `root` runs before the walk reads any word, so it may
    /// also flush pages whose newest state no stable piece holds (the Bw-tree flushes pages
    /// with an SMO delta above their newest piece: a unit below S is never scanned); an error
    /// from it fails the checkpoint before anything is written, and so does one from
    /// `newest_flushed` (a page that needs a new piece and cannot get one: naming its older
    /// piece would lose what only the new one holds).
    pub fn take_with_root<T: PageState>(
        &self,
        table: &MappingTable<T>,
        lss: &Lss,
        rssp: u64,
        root: impl FnOnce() -> Result<Option<Pid>>,
        newest_flushed: impl FnMut(Pid, Shared<'_, T>) -> Result<Option<LssAddress>>,
    ) -> Result<CheckpointInfo> {
        let mut next_sequence = self.next_sequence.lock();
        // SeqCst with `clean_ticket`'s load (store buffering): the cleaner's "segment
        // emptied" then ticket, against this increment then the walk's reads of the words.
        let walk_number = self.walks_begun.fetch_add(1, Ordering::SeqCst) + 1;
        let sequence = *next_sequence;
        let (checkpoint, stable_end) = walk(table, lss, sequence, rssp, root, newest_flushed)?;
        // A failed write leaves the sequence used: a torn `.tmp` is never read anyway.
        *next_sequence += 1;
        let bytes = write_tmp(&*self.dir, &checkpoint)?;
        publish(&*self.dir, sequence)?;
        {
            let mut kept = self.kept.lock();
            kept.push((walk_number, checkpoint.start));
            let excess = kept.len().saturating_sub(GENERATIONS_KEPT);
            kept.drain(..excess);
        }
        prune(&*self.dir)?;
        Ok(CheckpointInfo {
            sequence,
            start: checkpoint.start,
            stable_end,
            entry_count: checkpoint.entries.len(),
            free_count: checkpoint.free.len(),
            piece_count: checkpoint.pieces.as_ref().map(Vec::len),
            bytes,
        })
    }

    /// The cleaner's ticket for a segment whose last live piece just died: pass it to
    /// [`Self::may_remove`].
    pub fn clean_ticket(&self) -> u64 {
        self.walks_begun.load(Ordering::SeqCst)
    }

    /// The S of the older kept checkpoint: no segment at or above it may be removed. `None`
    /// before any checkpoint exists (then recovery scans from the LSS's start: nothing may go).
    pub fn clean_bound(&self) -> Option<LssAddress> {
        self.kept.lock().first().map(|&(_, start)| start)
    }

    /// Whether the cleaner may remove a segment that ends at `segment_end` (exclusive) and
    /// emptied when [`Self::clean_ticket`] gave `ticket`: wholly below the older kept
    /// checkpoint's S, and every kept checkpoint walked after it emptied.
    pub fn may_remove(&self, segment_end: LssAddress, ticket: u64) -> bool {
        let kept = self.kept.lock();
        kept.len() == GENERATIONS_KEPT
            && kept
                .iter()
                .all(|&(walk, start)| walk > ticket && segment_end.offset() <= start.offset())
    }
}
