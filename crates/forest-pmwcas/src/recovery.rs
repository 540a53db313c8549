//! Recovery (BzTree §2.3.2 "Recovery", §6.3 "Recovery steps"): scan the descriptor pool, and
//! only the pool, after a crash; in each partition only the descriptors below its durable
//! high-water mark (`pool.rs`), since every descriptor above it has been `Free` since the
//! pool was made. A mark above its partition's size is a corrupt pool. For each descriptor in
//! flight:
//! - `Succeeded`: words still holding its reference roll forward to the new values;
//! - `Undecided` or `Failed`: they roll back to the expected values; an `Undecided` status
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
}

/// Recovers every descriptor below the high-water marks (module doc). Single-threaded, before
/// any other use.
pub(crate) fn recover<P: Persist>(inner: &Inner<P>) -> Result<RecoveryReport, Error> {
    let mut report = RecoveryReport::default();
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
            recover_descriptor(inner, index as u32, &mut report)?;
        }
    }
    // The `Free` statuses, flushed one by one, become durable together: a crash before this
    // only repeats policies, which recyclers accept (module doc), and nothing is allocated
    // before recovery returns.
    inner.persist.fence();
    Ok(report)
}

/// Recovers descriptor `index` (module doc) and marks it free, durably.
fn recover_descriptor<P: Persist>(
    inner: &Inner<P>,
    index: u32,
    report: &mut RecoveryReport,
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
            report.values_freed += inner.apply_policies_where(index, gen, false, ENTRIES_MAX, true);
        }
        State::Undecided | State::Succeeded | State::Failed => {
            report.descriptors_in_flight += 1;
            if count > ENTRIES_MAX {
                return Err(Error::Format(format!(
                    "descriptor {index} counts {count} entries"
                )));
            }
            let succeeded = state == State::Succeeded;
            // Undecided: the entries may predate this generation (module doc).
            let decided = state != State::Undecided;
            let me = descriptor_ref(index, gen);
            let seq_start = d[D_SEQ_START].load(Ordering::Relaxed);
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
            report.values_freed +=
                inner.apply_policies_where(index, gen, succeeded, count, !decided);
        }
    }
    d[D_STATUS].store(layout::status(gen, 0, State::Free), Ordering::Relaxed);
    // Fenced once for all at the end of `recover`.
    inner.flush_status(index);
    Ok(())
}

fn is_ours(value: u64, index: u32, slot: usize, seq_start: u64) -> bool {
    let (i, s, seq) = decode_ref(value);
    i == index && s == slot && tag_at_least(seq, seq_start)
}
