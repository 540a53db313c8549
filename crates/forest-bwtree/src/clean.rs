//! Cleaning the Bw-tree's LSS (Bw-tree §II-E "During cleaning, LSS makes pages and their
//! deltas contiguous"; TSBw §V-A relocation; issue 17, increment 5). The protocol and its
//! invariants are LLAMA's (forest-llama `clean.rs`); this module does the access method's
//! part: a resident page with a live piece in the victim is flushed as a fresh whole image
//! (`flush_page_with(.., true)`), an evicted one is rebuilt from its pieces into one image
//! that `forest_llama::clean::relocate` writes at the log end and switches to by CAS.
//!
//! A page that cannot be moved now (frozen by a merge: not flushed, `flush.rs`) leaves its
//! segment for a later round. Readers that read an address in a removed segment re-read the
//! word (`storage.rs` `moved`).

use forest_core::Result;
use forest_llama::clean::{
    above_target, finish_relocations, post_relocation, relocate, CleanStats, Posted,
};
use forest_llama::lss::{Lss, LssAddress};
use forest_llama::page_state::PageLocation;
use forest_llama::read::{payload_error, read_pieces};
use forest_llama::Pid;

use crate::flush::{DeltaRun, PageFlush, PageImage};
use crate::BwTree;

/// The default space target: the LSS may hold twice its live bytes (issue 17).
pub const LSS_SPACE_FACTOR_DEFAULT: f64 = 2.0;

/// Attempts per page before its segment is left for a later round (each lost CAS means the
/// page changed, which moves it out of the victim or brings it back to memory).
const PAGE_ATTEMPTS: usize = 16;

/// Segments cleaned per [`BwTree::clean_to_target`] call at most, so the evictor's thread
/// gets back to eviction.
const SEGMENTS_PER_ROUND: usize = 8;

impl BwTree {
    /// The LSS space target (LSS bytes ≤ `factor` × live bytes; default
    /// [`LSS_SPACE_FACTOR_DEFAULT`]). Refused below 1.1 (the cleaner would rewrite forever).
    pub fn set_lss_space_factor(&self, factor: f64) -> Result<()> {
        if !(factor >= 1.1 && factor.is_finite()) {
            return Err(forest_core::Error::Config(format!(
                "lss_space_factor {factor}: give a number of at least 1.1"
            )));
        }
        if let Some(storage) = &self.storage {
            *storage
                .space_factor
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = factor;
        }
        Ok(())
    }

    /// The cleaner's counters, if on storage.
    pub fn clean_stats(&self) -> Option<&CleanStats> {
        self.storage.as_ref().map(|s| &s.clean_stats)
    }

    /// Cleans until the LSS is within its space target or a round's segments are done
    /// (the background policy: the store's evictor thread calls it). Returns the segments
    /// removed.
    pub fn clean_to_target(&self) -> Result<usize> {
        let Some(storage) = &self.storage else {
            return Ok(0);
        };
        let factor = *storage
            .space_factor
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut cleaned = {
            let _one = storage.cleaning.lock().unwrap_or_else(|e| e.into_inner());
            self.remove_waiting(storage)?
        };
        for _ in 0..SEGMENTS_PER_ROUND {
            if !above_target(&storage.lss, factor) {
                break;
            }
            match self.clean_once()? {
                Some(_) => cleaned += 1,
                None => break,
            }
        }
        Ok(cleaned)
    }

    /// [`Self::clean_to_target`] unless another thread is cleaning (the after-operation
    /// path of a tree without a background evictor, `storage.rs`).
    pub(crate) fn clean_if_idle(&self) -> Result<usize> {
        let Some(storage) = &self.storage else {
            return Ok(0);
        };
        let factor = *storage
            .space_factor
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !above_target(&storage.lss, factor) {
            return Ok(0);
        }
        let Ok(_one) = storage.cleaning.try_lock() else {
            return Ok(0);
        };
        let mut cleaned = self.remove_waiting(storage)?;
        for _ in 0..SEGMENTS_PER_ROUND {
            if !above_target(&storage.lss, factor) {
                break;
            }
            let Some(victim) = self.pick_clean_victim(storage) else {
                break;
            };
            if !self.clean_segment_locked(victim)? {
                break;
            }
            cleaned += 1;
        }
        Ok(cleaned)
    }

    /// Picks a victim by cost-benefit and cleans it (callable directly, e.g. by tests):
    /// the segment removed, or `None` if there was no candidate or a page in it could not
    /// be moved now.
    pub fn clean_once(&self) -> Result<Option<u64>> {
        let Some(storage) = &self.storage else {
            return Ok(None);
        };
        let _one = storage.cleaning.lock().unwrap_or_else(|e| e.into_inner());
        let Some(victim) = self.pick_clean_victim(storage) else {
            return Ok(None);
        };
        Ok(self.clean_segment_locked(victim)?.then_some(victim))
    }

    /// Cleans segment `sequence` (steps 1 and 2 of forest-llama `clean.rs`); whether it was
    /// removed.
    pub fn clean_segment(&self, sequence: u64) -> Result<bool> {
        let Some(storage) = &self.storage else {
            return Ok(false);
        };
        let _one = storage.cleaning.lock().unwrap_or_else(|e| e.into_inner());
        self.clean_segment_locked(sequence)
    }

    fn clean_segment_locked(&self, sequence: u64) -> Result<bool> {
        let Some(storage) = &self.storage else {
            return Ok(false);
        };
        let lss = &storage.lss;
        let pids = lss.segment_live_pages(sequence);
        self.catching(|| self.relocate_evicted(lss, &pids))??;
        for pid in pids {
            if !self.catching(|| self.clean_page(lss, pid, sequence))?? {
                return Ok(false);
            }
        }
        if lss.segment_live_bytes(sequence) > 0 {
            return Ok(false); // a page came back into it? (cannot: posts go to the log end)
        }
        // With mapping-table checkpoints it may have to wait (`map_checkpoint.rs`).
        self.remove_emptied(storage, sequence)
    }

    /// Relocates every page of `pids` that is evicted now with one Mk-Stable for all their
    /// images (forest-llama `finish_relocations`; review rev-clean F2: one per page cost a
    /// buffer write and an fsync each). A page that changes meanwhile is left to
    /// [`Self::clean_page`], which looks at it again.
    fn relocate_evicted(&self, lss: &Lss, pids: &[Pid]) -> Result<()> {
        let Some(storage) = &self.storage else {
            return Ok(());
        };
        let guard = &crossbeam_epoch::pin();
        let mut posted: Vec<Posted> = Vec::new();
        for &pid in pids {
            let PageLocation::Stored(bits) = self.table.read_location(pid) else {
                continue;
            };
            let Some(old) = LssAddress::from_bits(bits) else {
                continue;
            };
            let (image, lsn_low, lsn_high) = match self.image_of_pieces(lss, pid, old) {
                Ok(found) => found,
                Err(_) if self.moved(pid, bits) => continue,
                Err(e) => {
                    // Images already posted die unswitched (review rev-systxn F2: they stayed
                    // counted live, and each retry of the victim added them again).
                    for p in &posted {
                        lss.note_lost(p.pid, p.image);
                    }
                    return Err(e);
                }
            };
            match post_relocation(
                lss,
                pid,
                old,
                &image,
                lsn_low,
                lsn_high,
                &storage.clean_stats,
            ) {
                Ok(p) => posted.push(p),
                Err(e) => {
                    // Posted images die unswitched; every word is unchanged.
                    for p in &posted {
                        lss.note_lost(p.pid, p.image);
                    }
                    return Err(e);
                }
            }
        }
        finish_relocations(&self.table, lss, &posted, &storage.clean_stats, guard)?;
        Ok(())
    }

    /// Moves page `pid`'s live pieces out of segment `sequence`; whether none is left there.
    fn clean_page(&self, lss: &Lss, pid: Pid, sequence: u64) -> Result<bool> {
        let Some(storage) = &self.storage else {
            return Ok(false);
        };
        let segment_end = (sequence + 1) * lss.config().segment_bytes;
        for _ in 0..PAGE_ATTEMPTS {
            if !lss.page_has_live_piece_in(pid, sequence) {
                return Ok(true);
            }
            let guard = &crossbeam_epoch::pin();
            match self.table.read_location(pid) {
                PageLocation::Memory(_) => match self.flush_page_with(pid, lss, true)? {
                    PageFlush::Flushed { .. } => {
                        // The image and any run after it: what the page holds live now.
                        storage
                            .clean_stats
                            .bytes_relocated
                            .add(lss.page_live_bytes(pid));
                    }
                    PageFlush::Lost { .. } | PageFlush::Clean => {}
                    PageFlush::Frozen => return Ok(false),
                    PageFlush::Gone => {
                        lss.note_freed(pid, LssAddress::current(segment_end));
                    }
                },
                PageLocation::Stored(bits) => {
                    let Some(old) = LssAddress::from_bits(bits) else {
                        return Ok(false);
                    };
                    let (image, lsn_low, lsn_high) = match self.image_of_pieces(lss, pid, old) {
                        Ok(found) => found,
                        // Loaded or freed meanwhile: look again.
                        Err(_) if self.moved(pid, bits) => continue,
                        Err(e) => return Err(e),
                    };
                    relocate(
                        &self.table,
                        lss,
                        pid,
                        old,
                        &image,
                        lsn_low,
                        lsn_high,
                        &storage.clean_stats,
                        guard,
                    )?;
                }
                // Freed (its pieces noted dead by `free_page`, or about to be): a page of a
                // later life of this PID has no piece below the victim's end.
                PageLocation::Empty | PageLocation::FreeLink(_) => {
                    lss.note_freed(pid, LssAddress::current(segment_end));
                }
            }
        }
        Ok(!lss.page_has_live_piece_in(pid, sequence))
    }

    /// The encoded page image that page `pid`'s pieces (newest at `newest`) rebuild to, and
    /// their LSN range.
    fn image_of_pieces(
        &self,
        lss: &Lss,
        pid: Pid,
        newest: LssAddress,
    ) -> Result<(Vec<u8>, u64, u64)> {
        let pieces = read_pieces(lss, pid, newest)?;
        let (image_at, image_record) = pieces.last().expect("read_pieces ends at an image");
        let mut image = PageImage::decode(&image_record.payload)
            .map_err(|what| payload_error(lss, pid, *image_at, &what))?;
        for (at, record) in pieces.iter().rev().skip(1) {
            let run = DeltaRun::decode(&record.payload)
                .map_err(|what| payload_error(lss, pid, *at, &what))?;
            image.apply(&run);
        }
        let lsn_low = pieces
            .iter()
            .map(|(_, r)| r.header.lsn_low)
            .filter(|l| *l > 0)
            .min()
            .unwrap_or(0);
        let lsn_high = pieces
            .iter()
            .map(|(_, r)| r.header.lsn_high)
            .max()
            .unwrap_or(0);
        Ok((image.encode(), lsn_low, lsn_high))
    }
}
