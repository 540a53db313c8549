//! Recovery (BzTree §2.3.2 "Recovery", §6.3 "Recovery steps"): scan the descriptor pool, and
//! only the pool, after a crash; in each partition only the descriptors below its durable
//! high-water mark (`pool.rs`), since every descriptor above it has been `Free` since the
//! pool was made. A mark above its partition's size is a corrupt pool. For each descriptor in
//! flight:
//! - `Succeeded` or `Failed` (decided): left for after open (below); when finished, words
//!   still holding its reference roll forward to the new values (`Succeeded`) or back to the
//!   expected ones (`Failed`);
//! - `Undecided`: words holding its reference roll back to the expected values; its status
//!   may be durable before its entries are (publication persists both with one fence,
//!   `descriptor.rs`), but then no word holds a reference to it, so an entry that names no
//!   target word is skipped rather than reported, and only its activated entries are freed
//!   (as for `Building`: those were persisted at activation);
//! - any state: words holding one of its RDCSS references (current generation) roll back to
//!   the entry's expected value (an RDCSS reference only ever replaced that value);
//! - then its policies apply (`FREE-ONE`: old values after success, new values otherwise), and
//!   it is marked free, durably: each status is flushed, and one fence at the end makes them
//!   all durable (a crash before it repeats policies, which recyclers accept; nothing is
//!   allocated before recovery returns). Restored words are fenced before the policies only
//!   when there are any: most descriptors found after a crash are retired ones waiting for
//!   their epoch, which no word holds.
//!
//! A `Building` descriptor never executed: no word refers to it, and only its activated
//! entries of the current generation are freed (`descriptor.rs`, activation).
//!
//! Left for after open (issue 16's bar, 145 us after a SIGKILL; not in the paper). Nearly
//! every descriptor a SIGKILL leaves is decided, most of them retired SMO or value-block
//! descriptors whose memory waited for the pool's epoch: no word holds them any more, but
//! checking their target words and freeing their memory cost a page fault of the fresh
//! mapping per word and per chunk (about 6 us per descriptor and 4.5 us per freed chunk on a
//! loaded machine: 560 of 670 us). Recovery only records them (index, generation); they stay
//! out of the free lists (the cursors skip them, `pool.rs`) until [`finish`] runs, at the
//! first descriptor or chunk allocation after open, at `Pool::finish_recovery`, or when the
//! pool is dropped. Their entries are checked at open all the same (a corrupt one is a named error). Why waiting is safe:
//! - A decided descriptor whose status is durable is a state the running protocol already
//!   handles without its owner: any thread meeting its reference in a word helps it, and
//!   helping a decided descriptor only runs Phase 2 (persisting a decision left dirty first),
//!   which installs exactly the values recovery would (new on success, expected on failure);
//!   an RDCSS reference of it completes back to the expected value, its status not being
//!   `Undecided` (`rdcss.rs`), as recovery would roll it back. So reads in this run see the
//!   recovered values whether or not it is finished yet. Its entries are durable (invariant
//!   below), and so is its decision: a `Succeeded` or `Failed` status read here is the one the
//!   crash left, and recovery wrote nothing to it.
//! - Finishing uses only CASes (a plain store could overwrite a newer PMwCAS's word): RDCSS
//!   references of its generation are completed, then Phase 2 runs as a helper's would.
//! - Its policies free memory that no thread of this run can reach: a word holding its
//!   reference resolves to the new value on success (the old one is what is freed) and to the
//!   expected value on failure (the new one is freed), and memory-only entries name nodes the
//!   operation unlinked or never linked.
//! - Still they apply in the finish itself, and its `Free` status is made durable there, before
//!   any thread of this run takes a descriptor or a chunk: every descriptor allocation waits
//!   for the finish, and so does a client's chunk allocation (`Pool::ensure_recovery_finished`;
//!   forest-bztree calls it before taking a node or value block). A repeated policy is safe
//!   only then. A release the crash cut between its policies and its `Free` status freed its
//!   chunks once already; one of them may have been taken by an SMO in flight at the crash,
//!   whose rollback at open freed it again under the SMO's tag, or taken, linked and freed
//!   again. Once this run has taken such a chunk, the repeat finds neither the chunk free nor
//!   its own tag on it, and frees a linked node: a leaf that the next allocation overwrote
//!   lost acknowledged writes (issue 16, CI of the first version of this deferral, which
//!   applied the policies in a later epoch release; test forest-bztree `left_repeat`). A
//!   crash during the finish repeats them on chunks nothing took since. Only the return to
//!   the free list goes through the pool's epoch: it keeps a thread of this run that met the
//!   descriptor's reference and is still helping it from being overtaken by its next
//!   generation (a helper finding it `Free` reads its word again, `execute.rs`).
//! - A crash before it is finished finds it decided again: recovery is unchanged, and a
//!   repeated policy is accepted (`Recycle::free_by`). Nothing else needs it free: the mark
//!   covers it, and no other descriptor depends on it.
//!
//! `Undecided` descriptors (at most one per thread at a crash) are still recovered at open: a
//! helper would run their Phase 1, which must not happen to a PMwCAS whose owner is gone and
//! whose entries may not be durable.
//!
//! Idempotent: words are restored by value, not by replay, so a second recovery finds no word
//! holding a reference and changes nothing; a recovery interrupted by a crash is simply run
//! again. Policies may run twice across such a crash, so recyclers accept a repeated free
//! (`pool.rs` `Recycle`).
//!
//! Invariants relied on (`execute.rs`, `rdcss.rs`): a durable `Succeeded` or `Failed` status of
//! generation g, or a durable word holding a reference of g, implies g's entries are durable;
//! no durable word holds a reference to a descriptor of another generation than the pool's
//! durable one.
//!
//! A word left dirty (a value flushed but not yet cleaned) stays dirty: the first read flushes
//! and cleans it again.

use std::time::Instant;

use crate::error::Error;
use crate::layout::{
    self, State, DESCRIPTOR_HEADER_WORDS, D_SEQ_START, D_STATUS, ENTRIES_MAX, ENTRY_WORDS,
    E_ADDRESS, E_EXPECTED, E_NEW,
};
use crate::persist::Persist;
use crate::pool::Inner;
use crate::sync::atomic::Ordering;
use crate::word::{decode_ref, descriptor_ref, tag_at_least, DIRTY_BIT, RDCSS_BIT};

/// What one recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Descriptors read: the sum of the partitions' high-water marks.
    pub descriptors_scanned: usize,
    /// Descriptors found in flight (not free).
    pub descriptors_in_flight: usize,
    /// Words rolled forward to a new value.
    pub words_rolled_forward: usize,
    /// Words rolled back to an expected value (descriptor or RDCSS references).
    pub words_rolled_back: usize,
    /// Values handed to recyclers by policy.
    pub values_freed: usize,
    /// Decided descriptors left for after open (module doc), of `descriptors_in_flight`.
    pub descriptors_left: usize,
    /// Wall time of the whole scan, in nanoseconds (it includes the two below and the page
    /// faults of reading descriptors).
    pub scan_nanos: u64,
    /// Of `scan_nanos`: restoring words (reading each target word, storing, flushing, fencing).
    pub words_nanos: u64,
    /// Of `scan_nanos`: applying policies (the recyclers' frees).
    pub policies_nanos: u64,
    /// The final fence that makes the `Free` statuses durable.
    pub fence_nanos: u64,
}

/// Recovers every descriptor below the high-water marks (module doc). Single-threaded, before
/// any other use. Returns the decided descriptors left for after open (index, generation).
pub(crate) fn recover<P: Persist>(
    inner: &Inner<P>,
) -> Result<(RecoveryReport, Vec<(u32, u64)>), Error> {
    let mut report = RecoveryReport::default();
    let mut left = Vec::new();
    let started = Instant::now();
    let per = inner.geometry.per_partition();
    for p in 0..inner.geometry.partition_count {
        let mark = inner.mark_word(p).load(Ordering::Relaxed);
        if mark > per as u64 {
            return Err(Error::Format(format!(
                "partition {p}'s high-water mark at byte {} is {mark}, above its {per} descriptors",
                inner.geometry.marks_start_bytes() + 8 * p as u64
            )));
        }
        let first = p * per;
        for index in first..first + mark as usize {
            report.descriptors_scanned += 1;
            recover_descriptor(inner, index as u32, &mut report, &mut left)?;
        }
    }
    // The `Free` statuses, flushed one by one, become durable together: a crash before this
    // only repeats policies, which recyclers accept (module doc), and nothing is allocated
    // before recovery returns.
    report.scan_nanos = nanos_since(started);
    let fenced = Instant::now();
    inner.persist.fence();
    report.fence_nanos = nanos_since(fenced);
    report.descriptors_left = left.len();
    Ok((report, left))
}

/// Recovers descriptor `index` (module doc) and marks it free, durably.
fn recover_descriptor<P: Persist>(
    inner: &Inner<P>,
    index: u32,
    report: &mut RecoveryReport,
    left: &mut Vec<(u32, u64)>,
) -> Result<(), Error> {
    let d = inner.desc(index);
    let status = d[D_STATUS].load(Ordering::Relaxed);
    let gen = layout::status_gen(status);
    let state = layout::status_state(status).ok_or_else(|| {
        Error::Format(format!(
            "descriptor {index} has status {status:#x}, which names no state"
        ))
    })?;
    let count = layout::status_count(status);
    match state {
        State::Free => return Ok(()),
        State::Building => {
            report.descriptors_in_flight += 1;
            let policies = Instant::now();
            report.values_freed += inner.apply_policies_where(index, gen, false, ENTRIES_MAX, true);
            report.policies_nanos += nanos_since(policies);
        }
        State::Undecided | State::Succeeded | State::Failed => {
            report.descriptors_in_flight += 1;
            if count > ENTRIES_MAX {
                return Err(Error::Format(format!(
                    "descriptor {index} counts {count} entries"
                )));
            }
            if count > 0 && state != State::Undecided {
                // Decided: finished after open (module doc). Its entries are checked now (their
                // lines are read anyway): the finish relies on each naming a target word.
                check_entries(inner, index, count)?;
                left.push((index, gen));
                return Ok(());
            }
            let succeeded = state == State::Succeeded;
            // Undecided: the entries may predate this generation (module doc).
            let decided = state != State::Undecided;
            let me = descriptor_ref(index, gen);
            let seq_start = d[D_SEQ_START].load(Ordering::Relaxed);
            let words = Instant::now();
            let mut restored = 0usize;
            for slot in 0..count {
                let e = DESCRIPTOR_HEADER_WORDS + slot * ENTRY_WORDS;
                let address = d[e + E_ADDRESS].load(Ordering::Relaxed);
                if address >= layout::TOMBSTONE {
                    continue;
                }
                let Some(word) = inner.target_word(address) else {
                    if decided {
                        return Err(Error::Format(format!(
                            "descriptor {index} entry {slot} names byte {address}, not a target word"
                        )));
                    }
                    continue;
                };
                let value = word.load_raw() & !DIRTY_BIT;
                let restore = if value == me {
                    if succeeded {
                        report.words_rolled_forward += 1;
                        d[e + E_NEW].load(Ordering::Relaxed)
                    } else {
                        report.words_rolled_back += 1;
                        d[e + E_EXPECTED].load(Ordering::Relaxed)
                    }
                } else if value & RDCSS_BIT != 0 && is_ours(value, index, slot, seq_start) {
                    report.words_rolled_back += 1;
                    d[e + E_EXPECTED].load(Ordering::Relaxed)
                } else {
                    continue;
                };
                word.store_raw(restore);
                inner.flush_word(word);
                restored += 1;
            }
            // Words before policies; a retired descriptor (no word holds it) needs no fence.
            if restored > 0 {
                inner.persist.fence();
            }
            report.words_nanos += nanos_since(words);
            let policies = Instant::now();
            report.values_freed +=
                inner.apply_policies_where(index, gen, succeeded, count, !decided);
            report.policies_nanos += nanos_since(policies);
        }
    }
    d[D_STATUS].store(layout::status(gen, 0, State::Free), Ordering::Relaxed);
    // Fenced once for all at the end of `recover`.
    inner.flush_status(index);
    Ok(())
}

/// Finishes decided descriptor `index` of generation `gen` that recovery left (module doc):
/// completes its RDCSS references, runs its Phase 2 as a helper would, and returns whether it
/// succeeded; the caller then applies its policies and frees it (`Inner::finish_recovery`).
/// Any thread, any time after open, once per descriptor. Counts in `report` the words it
/// found holding a reference (another thread may help them first).
pub(crate) fn finish<P: Persist>(
    inner: &Inner<P>,
    index: u32,
    gen: u64,
    report: &mut RecoveryReport,
) -> bool {
    let d = inner.desc(index);
    let status = d[D_STATUS].load(Ordering::SeqCst);
    debug_assert_eq!(
        layout::status_gen(status),
        gen,
        "a left descriptor is not reused"
    );
    let count = layout::status_count(status).min(ENTRIES_MAX);
    let seq_start = d[D_SEQ_START].load(Ordering::Relaxed);
    let succeeded = layout::status_state(status & !layout::STATUS_DIRTY) == Some(State::Succeeded);
    let me = descriptor_ref(index, gen);
    for slot in 0..count {
        let address =
            d[DESCRIPTOR_HEADER_WORDS + slot * ENTRY_WORDS + E_ADDRESS].load(Ordering::Relaxed);
        let Some(word) = (address < layout::TOMBSTONE)
            .then(|| inner.target_word(address))
            .flatten()
        else {
            continue;
        };
        let value = word.load_raw();
        if value & !DIRTY_BIT == me {
            if succeeded {
                report.words_rolled_forward += 1;
            } else {
                report.words_rolled_back += 1;
            }
        }
        if value & RDCSS_BIT != 0 && is_ours(value, index, slot, seq_start) {
            report.words_rolled_back += 1;
            // Decided, so it completes back to the expected value; the installer's duty
            // (`rdcss.rs`): that value is durable before the descriptor can be released.
            inner.rdcss_complete(word, value);
            let now = word.load_raw();
            if P::DURABLE && now & DIRTY_BIT != 0 {
                inner.clean_dirty(word, now);
            }
        }
    }
    let outcome = inner.help(index, gen, 0);
    debug_assert_eq!(outcome, Some(succeeded), "a left descriptor stays decided");
    succeeded
}

/// A decided descriptor's entries name target words (or are tombstones): a corrupt pool
/// otherwise, reported by name rather than left to a finish that could not restore the word.
fn check_entries<P: Persist>(inner: &Inner<P>, index: u32, count: usize) -> Result<(), Error> {
    let d = inner.desc(index);
    for slot in 0..count {
        let address =
            d[DESCRIPTOR_HEADER_WORDS + slot * ENTRY_WORDS + E_ADDRESS].load(Ordering::Relaxed);
        if address < layout::TOMBSTONE && inner.target_word(address).is_none() {
            return Err(Error::Format(format!(
                "descriptor {index} entry {slot} names byte {address}, not a target word"
            )));
        }
    }
    Ok(())
}

fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn is_ours(value: u64, index: u32, slot: usize, seq_start: u64) -> bool {
    let (i, s, seq) = decode_ref(value);
    i == index && s == slot && tag_at_least(seq, seq_start)
}
