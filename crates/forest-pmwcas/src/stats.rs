//! Counters of one pool (issue 16 `stats()`): PMwCAS attempts and failures by size (target
//! words), helps, dirty-word flushes, pool waits, and the epoch work of retirements (§2.2:
//! descriptors whose policies free memory wait for the pool's epoch; others wait in the reuse
//! domain only while a helper is pinned). Each thread counts into its partition's
//! padded block, so counting adds no shared cache line to the hot path; `stats()` sums them.
//! They are std atomics even under loom: counters are not part of the protocol.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::ENTRIES_MAX;

/// One partition's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    attempts: [AtomicU64; ENTRIES_MAX + 1],
    failures: [AtomicU64; ENTRIES_MAX + 1],
    helps: AtomicU64,
    dirty_flushes: AtomicU64,
    pool_waits: AtomicU64,
    epoch_retires: AtomicU64,
    reuse_deferred: AtomicU64,
}

impl Counters {
    pub(crate) fn attempt(&self, size: usize, succeeded: bool) {
        self.attempts[size].fetch_add(1, Ordering::Relaxed);
        if !succeeded {
            self.failures[size].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn help(&self) {
        self.helps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dirty_flush(&self) {
        self.dirty_flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn pool_wait(&self) {
        self.pool_waits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn epoch_retire(&self) {
        self.epoch_retires.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn reuse_defer(&self) {
        self.reuse_deferred.fetch_add(1, Ordering::Relaxed);
    }
}

/// A pool's counters, summed over partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmwcasStats {
    /// PMwCAS executions by number of target words (index = size).
    pub attempts_by_size: Vec<u64>,
    /// Failed PMwCAS executions by number of target words.
    pub failures_by_size: Vec<u64>,
    /// Times a thread helped another thread's PMwCAS (§2.3.2, §5.4).
    pub helps: u64,
    /// Dirty words this pool flushed and cleaned (§2.3.1); zero in volatile mode.
    pub dirty_flushes: u64,
    /// Times an allocation found its partition and every other empty and waited.
    pub pool_waits: u64,
    /// Retirements whose policies free memory, deferred to the pool's epoch (crossbeam).
    pub epoch_retires: u64,
    /// Retirements that met a helper's reuse pin and waited in the reuse domain's limbo
    /// (the others released their descriptor at once).
    pub reuse_deferred: u64,
}

impl PmwcasStats {
    pub(crate) fn sum<'a>(blocks: impl Iterator<Item = &'a Counters>) -> Self {
        let mut s = Self {
            attempts_by_size: vec![0; ENTRIES_MAX + 1],
            failures_by_size: vec![0; ENTRIES_MAX + 1],
            ..Self::default()
        };
        for c in blocks {
            for size in 0..=ENTRIES_MAX {
                s.attempts_by_size[size] += c.attempts[size].load(Ordering::Relaxed);
                s.failures_by_size[size] += c.failures[size].load(Ordering::Relaxed);
            }
            s.helps += c.helps.load(Ordering::Relaxed);
            s.dirty_flushes += c.dirty_flushes.load(Ordering::Relaxed);
            s.pool_waits += c.pool_waits.load(Ordering::Relaxed);
            s.epoch_retires += c.epoch_retires.load(Ordering::Relaxed);
            s.reuse_deferred += c.reuse_deferred.load(Ordering::Relaxed);
        }
        s
    }

    /// All PMwCAS executions.
    pub fn attempts(&self) -> u64 {
        self.attempts_by_size.iter().sum()
    }

    /// All failed PMwCAS executions.
    pub fn failures(&self) -> u64 {
        self.failures_by_size.iter().sum()
    }
}
