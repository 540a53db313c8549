//! How stores become durable: the `Persist` trait (`flush(range)`, `fence()`) and its four
//! implementations (BzTree §2.1, §2.3.1, §3.1).
//!
//! - [`NoPersist`]: volatile mode (§3.1). `DURABLE` is false, so the PMwCAS code sets no dirty
//!   bits and every flush compiles away: the same code as persistent mode, without flushes.
//! - [`Clwb`](crate::clwb::Clwb): cache-line write-back chosen at run time by CPUID (`clwb`,
//!   else `clflushopt`, else `clflush`) and `sfence` (§2.1). On a file mapping this reaches the
//!   page cache: safe against a killed process at any instant, against power loss only on a
//!   DAX file system mapped with `MAP_SYNC`.
//! - [`Msync`]: every flush is an `msync` of the pages it touches (memmap2 `flush_range`):
//!   power-loss safe on any disk, slowly.
//! - [`Sim`](crate::sim::Sim): for tests; flushes copy lines to a durable image, and a
//!   simulated crash keeps each word stored since its line's last flush old or new at random.
//!
//! Contract: after `flush(r)` and then `fence()` return, every store to `r` that happened
//! before the flush is durable. Ranges are byte offsets into the pool's region; an
//! implementation widens them to whole cache lines (or pages).

use std::ops::Range;

use crate::region::Region;

/// Bytes of a cache line: the unit of a flush and of a crash's tearing (`sim.rs`).
pub const CACHE_LINE_BYTES: usize = 64;

/// How stores to a region become durable (see the module doc).
pub trait Persist: Send + Sync + 'static {
    /// Whether flushes do anything. When false the PMwCAS sets no dirty bits (§3.1).
    const DURABLE: bool;

    /// Starts writing back the cache lines holding bytes `range` of `region`.
    fn flush(&self, region: &Region, range: Range<usize>);

    /// Waits until every flush issued before it by this thread is durable.
    fn fence(&self);

    /// The name `--persist` takes.
    fn name(&self) -> &'static str;
}

/// Volatile mode: nothing is ever flushed (§3.1).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPersist;

impl Persist for NoPersist {
    const DURABLE: bool = false;

    #[inline(always)]
    fn flush(&self, _region: &Region, _range: Range<usize>) {}

    #[inline(always)]
    fn fence(&self) {}

    fn name(&self) -> &'static str {
        "none"
    }
}

/// Every flush is an `msync` of the pages it touches: durable on any disk at each flush.
/// `fence` has nothing left to wait for.
#[cfg(not(any(loom, shuttle)))]
#[derive(Debug, Default, Clone, Copy)]
pub struct Msync;

#[cfg(not(any(loom, shuttle)))]
impl Persist for Msync {
    const DURABLE: bool = true;

    fn flush(&self, region: &Region, range: Range<usize>) {
        if let Err(e) = region.sync_range(range.clone()) {
            // A failed msync leaves the page's durability unknown; going on would acknowledge
            // writes that may be lost (the fsync lesson), so stop.
            panic!("msync of pool bytes {range:?} failed: {e}; the pool can no longer promise durability");
        }
    }

    #[inline]
    fn fence(&self) {}

    fn name(&self) -> &'static str {
        "msync"
    }
}
