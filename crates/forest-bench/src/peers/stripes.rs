//! A fixed table of mutexes chosen by key hash, making an adapter's multi-step writes on one
//! key atomic with respect to each other (see [`crate::peers`]).

use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crossbeam_utils::CachePadded;

/// Stripe count: far above the thread counts benchmarked, so two threads rarely share a
/// stripe by accident; a power of two for a cheap modulo. Cache-padded, 1024 stripes cost
/// 128 KiB per peer, once.
const STRIPE_COUNT: usize = 1024;
const _: () = assert!(STRIPE_COUNT.is_power_of_two());

/// Per-key-hash mutexes.
pub struct Stripes {
    locks: Box<[CachePadded<Mutex<()>>]>,
}

impl Default for Stripes {
    fn default() -> Self {
        Self::new()
    }
}

impl Stripes {
    /// A table of unlocked stripes.
    pub fn new() -> Self {
        Self {
            locks: (0..STRIPE_COUNT)
                .map(|_| CachePadded::new(Mutex::new(())))
                .collect(),
        }
    }

    /// Locks the stripe of `key` (any hashable key form; equal keys give equal stripes as
    /// long as callers hash the same form).
    #[inline]
    pub fn lock<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, ()> {
        let mut hasher = FxHasher(0);
        key.hash(&mut hasher);
        let slot = (hasher.finish() as usize) & (STRIPE_COUNT - 1);
        // A panic while holding a stripe guards no data (the mutex holds `()`), so a
        // poisoned stripe is still a valid lock.
        self.locks[slot]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A small multiplicative hasher (rustc's FxHash), enough to spread keys over stripes.
struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(FX_SEED);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits, which the multiplication mixes best, into the low ones.
        self.0 ^ (self.0 >> 32)
    }
}
