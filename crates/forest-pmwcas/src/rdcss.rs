//! RDCSS, the restricted double-compare single-swap that installs a descriptor reference in a
//! target word only while the descriptor is still `Undecided` (BzTree §2.3.2 Phase 1; Harris,
//! Fraser and Pratt 2002 §4, the paper's [11] and footnote 2's [37]).
//!
//! Installation (Harris's `RDCSS`): CAS the word from the entry's expected value to a fresh
//! RDCSS reference; on meeting another RDCSS reference, complete that one first and retry.
//! Completion (Harris's `Complete`): read the descriptor's status; if `Undecided`, CAS the
//! RDCSS reference to the descriptor reference, else back to the expected value. The status
//! read is the RDCSS's linearization point; that is sound only if the word held *this*
//! installation from before the read until the CAS, which is why every installation draws a
//! fresh sequence number (`word.rs`): Harris et al. allocate a new RDCSS descriptor per attempt,
//! and microsoft/pmwcas (`Descriptor::CondCAS`, `src/mwcas/mwcas.cc`) reuses the word
//! descriptor, which lets a completer stalled after reading `Undecided` finish a later
//! installation of the same entry made after the PMwCAS succeeded and another PMwCAS restored
//! the expected value, so the old PMwCAS would overwrite the new one (§2.3.2's race).
//! A reference is `(index, slot, seq)`, so its uniqueness needs a fresh `seq` per run of
//! Phase 1 (the owner's or a helper's), not per word: a run installs each slot at most once
//! (after an installation went in it moves to the next slot, and it retries a slot only after
//! a CAS that failed, so its reference never was in the word), and each run draws its own
//! number with one `fetch_add` (issue 16 session 17: one locked instruction per PMwCAS instead
//! of one per word).
//!
//! Choices the paper leaves open (persistence of RDCSS):
//! - RDCSS references are never flushed on purpose, but a cache may write one back, so
//!   completion writes its result with the dirty bit set (readers flush it, §2.3.1) and the
//!   installer flushes a rolled-back word before it goes on: a descriptor is never reused
//!   while a durable word could still hold one of its RDCSS references.
//! - Recovery rolls every RDCSS reference of the current generation back to the entry's
//!   expected value, whatever the status: an RDCSS reference only ever replaced that value.
//!
//! Stale references: a completer may find a reference whose descriptor has since been reused
//! (its generation moved on, or the sequence number predates the generation's first). The
//! installer completes its own installation before it unpins, and reuse waits for it, so the
//! word no longer holds the reference: the completer just reads the word again.

use crate::layout::{
    self, State, DESCRIPTOR_HEADER_WORDS, D_INSTALL_SEQ, D_SEQ_START, D_STATUS, ENTRY_WORDS,
    E_EXPECTED,
};
use crate::persist::Persist;
use crate::pool::Inner;
use crate::sync::atomic::{fence, Ordering};
use crate::word::{
    decode_ref, descriptor_ref, rdcss_ref, tag_at_least, Word, DIRTY_BIT, RDCSS_BIT, TAG_MASK,
};

impl<P: Persist> Inner<P> {
    /// Installs descriptor `index`'s entry `slot` in `word` by RDCSS. Returns `expected` if
    /// this installation went in (and was completed: the word then holds the descriptor
    /// reference, or `expected` again if the descriptor was already decided), else the value
    /// met instead (never an RDCSS reference).
    ///
    /// Precondition: the caller owns the descriptor, or read its generation `Undecided` while
    /// pinned in the reuse domain (`reuse.rs`), so it cannot be reused before the caller
    /// unpins; `seq` is its run's [`Inner::rdcss_seq`], and this run has not installed `slot`
    /// yet (module doc).
    pub(crate) fn rdcss_install(
        &self,
        word: &Word,
        index: u32,
        slot: usize,
        expected: u64,
        seq: u64,
    ) -> u64 {
        let mine = rdcss_ref(index, slot, seq);
        loop {
            forest_core::pause::pause_point("pmwcas:rdcss-installing");
            match word.cas_raw(expected, mine) {
                Ok(_) => {
                    forest_core::pause::pause_point("pmwcas:rdcss-installed");
                    self.rdcss_complete(word, mine);
                    if P::DURABLE {
                        // Installer's duty (module doc): a rolled-back word is flushed before
                        // the descriptor can be released.
                        let now = word.load_raw();
                        if now == expected | DIRTY_BIT {
                            self.clean_dirty(word, now);
                        }
                    }
                    return expected;
                }
                Err(current) if current & RDCSS_BIT != 0 => {
                    // Another installation holds the word: finish it, then compare again.
                    self.rdcss_complete(word, current);
                }
                Err(current) => return current,
            }
        }
    }

    /// Draws the install sequence number of one run of Phase 1 over descriptor `index`.
    #[inline]
    pub(crate) fn rdcss_seq(&self, index: u32) -> u64 {
        self.desc(index)[D_INSTALL_SEQ].fetch_add(1, Ordering::SeqCst) & TAG_MASK
    }

    /// Completes the RDCSS installation `reference` found in `word` (see the module doc).
    pub(crate) fn rdcss_complete(&self, word: &Word, reference: u64) {
        let (index, slot, seq) = decode_ref(reference);
        assert!(
            (index as usize) < self.geometry.descriptor_count && slot < layout::ENTRIES_MAX,
            "RDCSS reference {reference:#x} names no descriptor entry: corrupt word"
        );
        let d = self.desc(index);
        let status = d[D_STATUS].load(Ordering::SeqCst);
        let gen = layout::status_gen(status);
        let seq_start = d[D_SEQ_START].load(Ordering::Relaxed);
        let state = layout::status_state(status & !layout::STATUS_DIRTY);
        let expected =
            d[DESCRIPTOR_HEADER_WORDS + slot * ENTRY_WORDS + E_EXPECTED].load(Ordering::Relaxed);
        // Seqlock reader side (`pool.rs` start_generation): the fields above belong to `gen`
        // only if the status still shows `gen` after them.
        fence(Ordering::Acquire);
        let again = d[D_STATUS].load(Ordering::Relaxed);
        let current = layout::status_gen(again) == gen
            && matches!(
                state,
                Some(State::Undecided | State::Succeeded | State::Failed)
            )
            && tag_at_least(seq, seq_start);
        if !current {
            return; // stale: the word has moved on (module doc); the caller reads it again
        }
        forest_core::pause::pause_point("pmwcas:rdcss-status-read");
        let dirty = if P::DURABLE { DIRTY_BIT } else { 0 };
        let desired = if state == Some(State::Undecided) {
            descriptor_ref(index, gen) | dirty
        } else {
            expected | dirty
        };
        let _ = word.cas_raw(reference, desired);
    }
}
