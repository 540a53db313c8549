//! The benchmark's pseudo-random generator: SplitMix64 (Steele, Lea, Flood 2014).
//!
//! Op streams are generated before the timed phase, so speed matters less than being
//! deterministic from `--seed` and identical on every platform. SplitMix64's output function
//! is also a bijection on `u64`, which the key shapes use to scatter key numbers without
//! collisions ([`mix64`]).

/// A small deterministic generator; one per thread and purpose, seeded from `--seed`.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

/// The SplitMix64 increment (the golden ratio in 64-bit fixed point).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    /// A generator whose stream is fixed by `seed` and `stream` (e.g. a thread index).
    pub fn new(seed: u64, stream: u64) -> Self {
        Self {
            state: mix64(seed ^ mix64(stream.wrapping_add(1))),
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` (Lemire's multiply-shift; the bias is below 2^-64 · n). `n` > 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// SplitMix64's finalizer: a bijection on `u64` that scatters consecutive inputs.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A bijection on `[0, 2^31)`: odd multiplications and right xor-shifts modulo 2^31, each
/// invertible, so distinct inputs stay distinct.
#[inline]
pub fn mix31(x: u64) -> u64 {
    const MASK: u64 = (1 << 31) - 1;
    let mut z = x & MASK;
    z = z.wrapping_mul(0x2545_F491) & MASK;
    z ^= z >> 15;
    z = z.wrapping_mul(0x6C8E_9CF5) & MASK;
    z ^= z >> 13;
    z
}

/// FNV-1a over a `u64`'s 8 little-endian bytes, as YCSB's `Utils.fnvhash64` (used by the
/// scrambled zipfian generator).
#[inline]
pub fn fnv64(value: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut hash = OFFSET_BASIS;
    let mut v = value;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix31_is_a_bijection_on_a_sample() {
        // Goal: mix31 never maps two inputs to one output. Method: 2^20 inputs, count outputs.
        let mut seen = std::collections::HashSet::new();
        for x in 0..(1u64 << 20) {
            let y = mix31(x);
            assert!(y < (1 << 31));
            assert!(seen.insert(y), "collision at {x}");
        }
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        // Goal: below(n) yields every value of [0, n) and nothing else. Method: 10k draws of n=7.
        let mut rng = Rng::new(1, 0);
        let mut hits = [0u32; 7];
        for _ in 0..10_000 {
            hits[rng.below(7) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| h > 1_000), "{hits:?}");
    }
}
