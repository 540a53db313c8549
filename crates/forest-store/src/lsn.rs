//! LSNs: the global log sequence number allocator, the per-key lock stripes that order two
//! writes to one key, and the recovery cutoff (bw-tree.md §V-A: LSNs and the end of stable
//! log; masstree.md §5: per-core logs and the recovery cutoff).
//!
//! Invariants:
//! - LSNs are dense: every allocated LSN belongs to exactly one log record (the store
//!   allocates one only once it knows it will log the operation, under the shard's lock, and
//!   encodes the record in the same critical section). So a missing LSN in the logs means a
//!   lost record, and everything after it is beyond the recovery cutoff.
//! - Per key, LSN order is the order the index applied the writes: a writer holds the key's
//!   [`KeyStripes`] lock across deciding the outcome, taking the LSN and applying it.
//!
//! Choice (the papers differ): Masstree's cutoff is the minimum over logs of their last
//! timestamp, and idle logs write timestamps to keep it moving. Dense LSNs let recovery
//! compute the same bound without such markers: the cutoff is the end of the gap-free run of
//! LSNs from the replay start ([`recovery_cutoff`]). A write is acknowledged only when every
//! LSN up to its own is durable (see `wal::group_commit`), so the cutoff never drops it.

use forest_core::hash::{fold_words, GOLDEN};
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out LSNs, 1 first; 0 means "none yet".
#[derive(Debug)]
pub struct LsnAllocator {
    next: AtomicU64,
    /// Every LSN up to this one is durable in every log (group commit publishes it): the
    /// ESL a Bw-tree on storage reads (bw-tree.md §V-A). Only grows.
    durable: AtomicU64,
}

impl LsnAllocator {
    /// An allocator whose first LSN is `next`, with every LSN up to `durable` (< `next`)
    /// durable. Not `next - 1` by default: what recovery read may be only in the page cache
    /// (review rev-lstore F9), so a reopened store passes what recovery proved
    /// ([`crate::recovery::RecoveryReport::durable_lsn`]) and publishes the rest once it has
    /// made it durable itself.
    pub fn new(next: u64, durable: u64) -> Self {
        assert!(next >= 1, "LSN 0 means none");
        assert!(
            durable < next,
            "durable LSN {durable} not below the next LSN {next}"
        );
        Self {
            next: AtomicU64::new(next),
            durable: AtomicU64::new(durable),
        }
    }

    /// Records that every LSN up to `lsn` is durable (never lowers it).
    pub fn publish_durable(&self, lsn: u64) {
        self.durable.fetch_max(lsn, Ordering::SeqCst);
    }

    /// Every LSN up to this one is durable.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::SeqCst)
    }

    /// Takes `count` consecutive LSNs (a write's, or an atomic batch's records) and returns
    /// the first. Precondition: the caller holds the lock of the shard it logs to.
    pub fn allocate_n(&self, count: u64) -> u64 {
        self.next.fetch_add(count, Ordering::SeqCst)
    }

    /// The LSN the next allocation returns.
    pub fn next(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// The last LSN handed out (0 if none).
    pub fn last(&self) -> u64 {
        self.next() - 1
    }
}

/// [`KeyStripes::index_of`]'s hash: every byte moves it, and its low bits are as mixed as
/// its high ones (the finaliser), so the stripe mask may take them.
fn key_hash(key: &[u8]) -> u64 {
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(GOLDEN).rotate_left(29);
    fold_words(0, key, mix)
}

/// How many key stripes: enough that unrelated keys rarely share one under 64 writers.
pub const KEY_STRIPE_COUNT: usize = 1024;

const _: () = assert!(KEY_STRIPE_COUNT.is_power_of_two());

/// One key stripe.
#[derive(Debug, Default)]
pub struct Stripe {
    /// Covers one key's outcome decision, LSN and apply (an atomic batch holds the stripes
    /// of all its keys).
    lock: Mutex<()>,
    /// The highest LSN a write under this stripe took: a conditional write that changes
    /// nothing saw the effect of writes up to it, and answers only once it is durable
    /// (issue 12, defect 4).
    last_lsn: AtomicU64,
    /// Odd while an atomic batch applies keys of this stripe: a seqlock for readers, so that
    /// no read sees part of a batch.
    seq: AtomicU64,
}

impl Stripe {
    /// Locks the stripe.
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock()
    }

    /// The highest LSN a write under this stripe took (0: none since open).
    pub fn last_lsn(&self) -> u64 {
        self.last_lsn.load(Ordering::Acquire)
    }

    /// Records that a write under this stripe took `lsn`. Precondition: the stripe is
    /// locked (so LSNs noted here only grow, and a plain store suffices).
    pub fn note_lsn(&self, lsn: u64) {
        debug_assert!(lsn >= self.last_lsn.load(Ordering::Relaxed));
        self.last_lsn.store(lsn, Ordering::Release);
    }

    /// Marks the start (odd) or end (even) of a batch's apply. Precondition: locked.
    pub fn bump(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
    }

    /// A seqlock snapshot: `None` while a batch applies (wait with [`Self::lock`]).
    pub fn read_begin(&self) -> Option<u64> {
        let seq = self.seq.load(Ordering::SeqCst);
        (seq & 1 == 0).then_some(seq)
    }

    /// Whether no batch applied since `seq` was read.
    pub fn read_valid(&self, seq: u64) -> bool {
        self.seq.load(Ordering::SeqCst) == seq
    }

    /// Waits until the batch applying now, if any, is done.
    pub fn wait_for_batch(&self) {
        drop(self.lock.lock());
    }
}

/// Per-key lock stripes (see [`Stripe`]).
#[derive(Debug)]
pub struct KeyStripes {
    stripes: Box<[Stripe]>,
}

impl Default for KeyStripes {
    fn default() -> Self {
        Self {
            stripes: (0..KEY_STRIPE_COUNT).map(|_| Stripe::default()).collect(),
        }
    }
}

impl KeyStripes {
    /// The stripe index of `key`: readers and writers hash every key, so a multiply-rotate
    /// over 8-byte words with murmur3's 64-bit finaliser (crc32c's call cost ~130
    /// instructions a key, ~2 % of a list push; session 14's callgrind). In memory only.
    pub fn index_of(key: &[u8]) -> usize {
        (key_hash(key) as usize) & (KEY_STRIPE_COUNT - 1)
    }

    /// The stripe of `key`.
    pub fn of(&self, key: &[u8]) -> &Stripe {
        &self.stripes[Self::index_of(key)]
    }

    /// The stripe numbered `index`.
    pub fn at(&self, index: usize) -> &Stripe {
        &self.stripes[index]
    }

    /// Locks the stripe of `key`.
    pub fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        self.of(key).lock()
    }
}

/// The recovery cutoff: the last LSN of the gap-free run `start, start + 1, …` in `lsns`
/// (sorted ascending, each at least `start`); `start - 1` if `start` itself is missing.
pub fn recovery_cutoff(start: u64, lsns: impl IntoIterator<Item = u64>) -> u64 {
    let mut expected = start;
    for lsn in lsns {
        debug_assert!(lsn >= start, "LSNs below the replay start are skipped");
        if lsn != expected {
            break;
        }
        expected += 1;
    }
    expected - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the key stripe hash spreads keys of one shape over every stripe and sees every
    // byte. Method: 20,480 `key:N` keys (redis-benchmark's shape) and list member keys
    // differing only in their last bytes; no stripe over 3x its share.
    #[test]
    fn key_stripes_spread() {
        let mut load = vec![0u32; KEY_STRIPE_COUNT];
        for i in 0..20 * KEY_STRIPE_COUNT {
            load[KeyStripes::index_of(format!("key:{i:012}").as_bytes())] += 1;
        }
        assert!(load.iter().filter(|&&n| n > 0).count() >= KEY_STRIPE_COUNT - 2);
        assert!(load.iter().copied().max().unwrap_or(0) <= 60);
        let mut member = vec![0xff, b'm', 0, 0, 0, 6, b'm', b'y', b'l', b'i', b's', b't'];
        member.extend_from_slice(&[0x7f; 8]);
        let mut members = vec![0u32; KEY_STRIPE_COUNT];
        for i in 0..20 * KEY_STRIPE_COUNT as u32 {
            member[16..].copy_from_slice(&i.to_be_bytes());
            members[KeyStripes::index_of(&member)] += 1;
        }
        assert!(members.iter().copied().max().unwrap_or(0) <= 60);
        assert_ne!(KeyStripes::index_of(b""), KeyStripes::index_of(b"\0\0\0\0"));
    }

    // Goal: the cutoff is the end of the gap-free run. Method: runs with and without gaps.
    #[test]
    fn cutoff_stops_at_the_first_gap() {
        assert_eq!(recovery_cutoff(1, []), 0);
        assert_eq!(recovery_cutoff(1, [1, 2, 3]), 3);
        assert_eq!(recovery_cutoff(1, [1, 2, 4, 5]), 2);
        assert_eq!(recovery_cutoff(5, [6, 7]), 4);
        assert_eq!(recovery_cutoff(5, [5, 6, 7]), 7);
    }

    // Goal: the allocator is dense and starts where told. Method: allocate a few.
    #[test]
    fn allocator_is_dense() {
        let lsns = LsnAllocator::new(7, 3);
        assert_eq!(lsns.last(), 6);
        assert_eq!(lsns.durable(), 3, "durable as told, not everything below 7");
        assert_eq!(lsns.allocate_n(1), 7);
        assert_eq!(lsns.allocate_n(1), 8);
        assert_eq!(lsns.next(), 9);
    }
}
