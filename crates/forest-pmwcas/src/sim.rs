//! The simulated persister for tests (issue 16 "Power loss with `sim`"): a durable image
//! beside the live region. A flush copies the live words of the lines it covers into the
//! image; a simulated crash ([`Sim::crash_image`]) keeps, for each word stored since its
//! line's last flush, the old (durable) or the new (live) value at random, so any subset of
//! unflushed stores may have reached memory, each word whole (8-byte stores are atomic).
//!
//! The model's one simplification: a flush is durable when it returns (`fence` does nothing),
//! so kill points placed between a flush and its fence see the flush done.

use crate::persist::{Persist, CACHE_LINE_BYTES};
use crate::region::{Region, WORD_BYTES};
use crate::sync::atomic::Ordering;
use crate::sync::Mutex;
use std::ops::Range;

/// Simulated persistence (see the module doc).
#[derive(Debug)]
pub struct Sim {
    durable: Mutex<Vec<u64>>,
}

impl Sim {
    /// A persister whose durable image starts equal to `region` (a region all durable).
    pub fn new(region: &Region) -> Self {
        Self {
            durable: Mutex::new(region.snapshot()),
        }
    }

    /// The durable image as it is.
    pub fn durable_image(&self) -> Vec<u64> {
        self.durable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The memory a crash now could leave: each word that differs between `region` and the
    /// durable image is taken from one or the other by the bits of `seed`'s stream.
    pub fn crash_image(&self, region: &Region, seed: u64) -> Vec<u64> {
        let durable = self
            .durable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rng = seed ^ 0x9e37_79b9_7f4a_7c15;
        region
            .words()
            .iter()
            .zip(durable.iter())
            .map(|(live, &old)| {
                let new = live.load(Ordering::SeqCst);
                if new == old {
                    return old;
                }
                // xorshift64*: enough randomness for choosing halves, no dependency.
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                if rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 63 == 1 {
                    new
                } else {
                    old
                }
            })
            .collect()
    }
}

impl Persist for Sim {
    const DURABLE: bool = true;

    fn flush(&self, region: &Region, range: Range<usize>) {
        let words = region.words();
        let start = range.start / CACHE_LINE_BYTES * CACHE_LINE_BYTES / WORD_BYTES;
        let end =
            (range.end.div_ceil(CACHE_LINE_BYTES) * CACHE_LINE_BYTES / WORD_BYTES).min(words.len());
        let mut durable = self
            .durable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for i in start..end {
            durable[i] = words[i].load(Ordering::SeqCst);
        }
    }

    #[inline]
    fn fence(&self) {}

    fn name(&self) -> &'static str {
        "sim"
    }
}
