//! LSS cleaning (Bw-tree §II-E: "The LSS cleans prior parts of flash representing the old
//! parts of its log storage ... During cleaning, LSS makes pages and their deltas contiguous";
//! TSBw §V-A: "nodes that are still active need to be relocated (re-written) to the end of
//! the queue"; llama-notes §4; LFS's cost-benefit policy). Issue 17, increment 5.
//!
//! LLAMA's part: the live-byte accounting (`lss/space.rs`), the victim policy
//! ([`pick_victim`]), the relocation of an evicted page ([`relocate`]) and the removal of a
//! segment ([`Lss::remove_segment`]). The access method's part (forest-bwtree `clean.rs`)
//! knows what a page is: it flushes a resident page as a fresh image, and rebuilds an
//! evicted page's pieces into the one image [`relocate`] writes.
//!
//! The protocol for a victim segment V (docs/ARCHITECTURE.md "Built: cleaning"):
//! 1. for each page P with a live piece in V: if P is resident, flush it as a whole image
//!    (its older pieces die when the image is installed; a later flush continues from the
//!    image, never from V); if P is evicted (its word holds the address A of its newest
//!    piece, whose chain reaches V), rebuild P from its pieces and post the image at the log
//!    end (address A', [`post_relocation`]); once every evicted page of V is posted, one
//!    Mk-Stable of the highest A' makes them all stable, then each word is CASed from A to
//!    A' ([`finish_relocations`]). A page loaded, updated or freed meanwhile makes its CAS
//!    fail; the cleaner looks at P again.
//! 2. once V holds no live piece: make everything posted stable (every piece that superseded
//!    one in V is then durable, so recovery will find it), then delete V's file.
//!
//! Invariants:
//! - A word holds an address only if every piece up to it is stable (eviction's invariant):
//!   [`finish_relocations`] makes the images stable before their CASes.
//! - Once V is removed, no word holds an address in V again. A word may return to an address
//!   it left (load, then evict unchanged: the loaded state names A, review rev-clean F7), but
//!   V is removed only after every piece in it is dead, which takes either a newer image
//!   installed on the page's in-memory state (later evictions write the newer address) or a
//!   relocation CAS made while the word held A (after it, a load's install, which CASes from
//!   A, fails and cannot install a state naming A). So a reader that read A before and finds
//!   V gone re-reads the word, finds it changed, and starts over (forest-bwtree
//!   `storage.rs`); nothing else keeps V's addresses (a resident page's flush deltas in V are
//!   superseded by the image's delta on top, and runs continue from the newest flush delta).
//! - One tree per LSS ([`Lss::attach`]): pieces are keyed by PID, which one tree's mapping
//!   table gives a meaning.
//! - A segment is removed only with zero live bytes and below Hi-Stable's segment, after a
//!   Mk-Stable of everything posted.

use crossbeam_epoch::Guard;
use forest_core::pause::pause_point;
use forest_core::{Counter, Result};

use crate::lss::{Lss, LssAddress, RecordHeader, RecordKind};
use crate::mapping_table::{MappingTable, PageState, Pid};

/// The cleaner's counters.
#[derive(Default)]
pub struct CleanStats {
    /// Segments removed.
    pub segments_cleaned: Counter,
    /// Bytes of page images the cleaner wrote (relocations and fresh images of resident
    /// pages).
    pub bytes_relocated: Counter,
    /// Evicted pages relocated by CAS.
    pub relocations: Counter,
    /// Relocation CASes that lost (the page was loaded or freed meanwhile).
    pub relocation_races: Counter,
}

/// Picks the segment to clean by LFS's cost-benefit, age × free / (1 + live), among the
/// segments [`Lss::clean_candidates`] lists (age: segments written since, a log-distance
/// proxy for LFS's time since the last write). `None` if no candidate has a free byte.
pub fn pick_victim(lss: &Lss) -> Option<u64> {
    pick_victim_where(lss, |_| true)
}

/// [`pick_victim`] among the segments `allowed` accepts (a mapping-table checkpoint's bound,
/// `checkpoint.rs` `Checkpoints::clean_bound`); ages still count from the newest segment.
pub fn pick_victim_where(lss: &Lss, allowed: impl Fn(u64) -> bool) -> Option<u64> {
    let segment_bytes = lss.config().segment_bytes;
    let candidates = lss.clean_candidates();
    let newest = candidates.last().map_or(0, |(s, _)| *s) + 1;
    candidates
        .into_iter()
        .filter(|&(sequence, live)| live < segment_bytes && allowed(sequence))
        .map(|(sequence, live)| {
            let age = (newest - sequence) as f64;
            let free = (segment_bytes - live) as f64;
            (sequence, age * free / (1.0 + live as f64))
        })
        // The best score; among equals the oldest (max_by keeps the last maximum).
        .rev()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(sequence, _)| sequence)
}

/// Whether the LSS is above its space target: more than `space_factor` × its live bytes,
/// and past two segments (one segment is always being filled). Segments a recovering open
/// kept because it could not read them are counted out, bytes and live bytes: the cleaner
/// never takes them, so counted in they could hold the LSS above a target it can never reach
/// and keep the cleaner and the checkpointer's space rule rewriting live data for ever
/// (session 18 review rev-lss2 F3).
pub fn above_target(lss: &Lss, space_factor: f64) -> bool {
    let (kept, kept_live) = lss.kept_bytes();
    let total = lss.total_bytes().saturating_sub(kept);
    let live = lss.live_bytes().saturating_sub(kept_live);
    total > 2 * lss.config().segment_bytes && total as f64 > space_factor * live.max(1) as f64
}

/// How a [`relocate`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relocation {
    /// The word holds the image's address now.
    Moved(LssAddress),
    /// The word no longer held `old`: the image is dead; look at the page again.
    Changed,
}

/// An image a relocation posted and has not yet switched to ([`post_relocation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    pub pid: Pid,
    /// The address the word held when the image was built.
    pub old: LssAddress,
    /// The image's address.
    pub image: LssAddress,
}

/// Posts the relocated image of evicted page `pid` at the log end (step 1, module doc):
/// `image` is a page-image payload that `old`'s pieces rebuild to, LSNs `lsn_low..=lsn_high`.
/// The record is a page image whose `prev` is `old` ([`RecordHeader::relocated_from`]).
/// Nothing refers to it until [`finish_relocations`] switches the word to it. Errors: the
/// LSS's (too large, poisoned); the page is then unchanged.
pub fn post_relocation(
    lss: &Lss,
    pid: Pid,
    old: LssAddress,
    image: &[u8],
    lsn_low: u64,
    lsn_high: u64,
    stats: &CleanStats,
) -> Result<Posted> {
    let mut reservation = lss.reserve(image.len())?;
    let address = reservation.address();
    let bytes = reservation.len();
    lss.note_piece(pid, address, bytes);
    reservation.payload_mut().copy_from_slice(image);
    reservation.commit(&RecordHeader {
        kind: RecordKind::PageImage,
        pid,
        lsn_low,
        lsn_high,
        // Names what it relocates, so recovery can tell a lost relocation (checkpoint.rs).
        prev: Some(old),
    });
    stats.bytes_relocated.add(bytes as u64);
    Ok(Posted {
        pid,
        old,
        image: address,
    })
}

/// Makes every image in `posted` stable with ONE Mk-Stable (of the highest address: the
/// stable part is a prefix), then CASes each page's word from its old address to its image
/// (pause point `clean:relocated` before the CASes). So cleaning a segment costs the buffer
/// writes its images fill, not a write and an fsync per page (review rev-clean F2). A lost
/// CAS marks that image dead; the caller looks at the page again. On an Mk-Stable error
/// every image is dead and every word unchanged.
pub fn finish_relocations<T: PageState>(
    table: &MappingTable<T>,
    lss: &Lss,
    posted: &[Posted],
    stats: &CleanStats,
    _guard: &Guard,
) -> Result<Vec<Relocation>> {
    let Some(highest) = posted.iter().map(|p| p.image).max() else {
        return Ok(Vec::new());
    };
    if let Err(e) = lss.mk_stable(highest) {
        for p in posted {
            lss.note_lost(p.pid, p.image);
        }
        return Err(e);
    }
    pause_point("clean:relocated");
    Ok(posted
        .iter()
        .map(|p| {
            if table.relocate(p.pid, p.old.to_bits(), p.image.to_bits()) {
                lss.note_image(p.pid, p.image);
                stats.relocations.incr();
                Relocation::Moved(p.image)
            } else {
                lss.note_lost(p.pid, p.image);
                stats.relocation_races.incr();
                Relocation::Changed
            }
        })
        .collect())
}

/// Relocates one evicted page: [`post_relocation`], then [`finish_relocations`] of it alone.
// The table, the store, the page, its old address, the image and its LSN range, the stats.
#[allow(clippy::too_many_arguments)]
pub fn relocate<T: PageState>(
    table: &MappingTable<T>,
    lss: &Lss,
    pid: Pid,
    old: LssAddress,
    image: &[u8],
    lsn_low: u64,
    lsn_high: u64,
    stats: &CleanStats,
    guard: &Guard,
) -> Result<Relocation> {
    let posted = post_relocation(lss, pid, old, image, lsn_low, lsn_high, stats)?;
    Ok(finish_relocations(table, lss, &[posted], stats, guard)?[0])
}
