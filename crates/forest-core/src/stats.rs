//! Index statistics and the sharded event counters engines keep.
//!
//! The counters are the papers' contention figures (Bw-tree Table I: failed splits, failed
//! consolidates, failed updates; BzTree and Masstree: retries and restarts). A benchmark divides
//! them by the operations it ran, so a reader can reason about more cores than the machine has.
//!
//! [`Counter`] spreads increments over cache-padded shards chosen per thread, so counting an
//! event never makes threads share a cache line on the hot path. Counters use `std` atomics with
//! relaxed ordering even under loom: they are observations, never part of a protocol.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Standard counter names, shared by engines so that reports line up across engines.
pub mod names {
    /// Compare-and-swap instructions issued on the data path.
    pub const CAS_ATTEMPTS: &str = "cas_attempts";
    /// Compare-and-swap instructions that lost a race.
    pub const CAS_FAILURES: &str = "cas_failures";
    /// Operations that started over from the root (a failed validation, a lost race).
    pub const RESTARTS: &str = "restarts";
    /// Local retries that did not restart from the root.
    pub const RETRIES: &str = "retries";
    /// Latch acquisitions that had to wait (spin) at least once.
    pub const LATCH_WAITS: &str = "latch_waits";
    /// Node splits completed.
    pub const SPLITS: &str = "splits";
    /// Node merges completed.
    pub const MERGES: &str = "merges";
    /// Records moved from a sibling to fix an underfull node.
    pub const BORROWS: &str = "borrows";
    /// Consolidations completed (delta chains folded into a base page).
    pub const CONSOLIDATIONS: &str = "consolidations";
}

/// Shard count of a [`Counter`]. A power of two above the core count of common servers; the
/// memory cost (64 cache lines a counter) is paid once per index, not per node.
const COUNTER_SHARD_COUNT: usize = 64;
const _: () = assert!(COUNTER_SHARD_COUNT.is_power_of_two());

static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_SLOT: Cell<usize> = Cell::new(
        NEXT_THREAD_SLOT.fetch_add(1, Ordering::Relaxed) & (COUNTER_SHARD_COUNT - 1),
    );
}

/// An event counter that threads bump without sharing a cache line.
pub struct Counter {
    shards: Box<[CachePadded<AtomicU64>]>,
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counter({})", self.get())
    }
}

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self {
            shards: (0..COUNTER_SHARD_COUNT)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        let slot = THREAD_SLOT.with(Cell::get);
        self.shards[slot].fetch_add(n, Ordering::Relaxed);
    }

    /// The sum over shards. Not a snapshot: increments racing with the read may be missed.
    pub fn get(&self) -> u64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

/// Sizes and event counts of one index at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Live records.
    pub key_count: u64,
    /// Bytes the index holds on the heap, as the engine accounts them.
    pub memory_bytes: u64,
    /// Levels from the root to the leaves; 1 for a lone leaf, 0 where the notion does not apply.
    pub height: u32,
    /// Interior (index) nodes.
    pub inner_node_count: u64,
    /// Leaf nodes.
    pub leaf_node_count: u64,
    /// The engine's own counters, by name (see [`names`]), in a stable order.
    pub counters: Vec<(&'static str, u64)>,
}

impl IndexStats {
    /// The value of counter `name`, if the engine keeps it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_sums_increments_from_many_threads() {
        let counter = std::sync::Arc::new(Counter::new());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        counter.incr();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(counter.get(), 80_000);
    }

    #[test]
    fn stats_find_counters_by_name() {
        let stats = IndexStats {
            counters: vec![(names::SPLITS, 3), (names::MERGES, 1)],
            ..IndexStats::default()
        };
        assert_eq!(stats.counter(names::SPLITS), Some(3));
        assert_eq!(stats.counter(names::MERGES), Some(1));
        assert_eq!(stats.counter(names::RESTARTS), None);
    }
}
