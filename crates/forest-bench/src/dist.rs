//! Key-access distributions: which existing key an operation touches.
//!
//! - `uniform`: every key equally likely (BzTree §7.1.2 "Random").
//! - `zipfian`: YCSB's scrambled zipfian, θ = 0.99 (Gray et al.'s generator over 10^10
//!   items, hashed with FNV-64 onto the key range), as BzTree §7.1.2 "Zipfian" and YCSB A–C, F.
//! - `latest`: YCSB's skewed-latest: a zipfian distance back from the newest key (YCSB D).
//! - `monotonic`: keys accessed in increasing order (BzTree §7.1.2 "Monotonic"); each thread
//!   walks the key indices upward from its own offset, and the workload loads and appends
//!   keys in key order (see [`crate::keygen::KeyOrder::Sequential`]).
//!
//! Generators yield key *indices*; [`crate::keygen`] turns them into bytes.

use std::str::FromStr;

use crate::rng::{fnv64, Rng};

/// The skew of YCSB's zipfian generators (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_THETA: f64 = 0.99;

/// YCSB's scrambled zipfian draws from this many items, then hashes onto the key range, so the
/// hot keys do not cluster at small indices (`ScrambledZipfianGenerator.ITEM_COUNT`).
const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;

/// ζ(10^10, 0.99), precomputed by YCSB (`ScrambledZipfianGenerator.ZETAN`); computing it
/// would take 10^10 steps.
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// A key-access distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dist {
    /// Every key equally likely.
    Uniform,
    /// YCSB's scrambled zipfian, θ = 0.99.
    Zipfian,
    /// YCSB's skewed-latest: recent keys most likely.
    Latest,
    /// Keys in increasing order.
    Monotonic,
}

impl Dist {
    /// Every distribution, in the order `--help` lists them.
    pub const ALL: [Dist; 4] = [Dist::Uniform, Dist::Zipfian, Dist::Latest, Dist::Monotonic];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Zipfian => "zipfian",
            Dist::Latest => "latest",
            Dist::Monotonic => "monotonic",
        }
    }

    /// One line for `--help`.
    pub fn describe(self) -> &'static str {
        match self {
            Dist::Uniform => "every key equally likely",
            Dist::Zipfian => "YCSB scrambled zipfian, theta 0.99 (hot keys spread over the range)",
            Dist::Latest => "YCSB skewed-latest: zipfian distance back from the newest key",
            Dist::Monotonic => "increasing keys: loads and inserts in key order, reads walk upward",
        }
    }
}

impl FromStr for Dist {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        Dist::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = Dist::ALL.iter().map(|d| d.name()).collect();
                anyhow::anyhow!("unknown distribution {s:?}; known: {}", known.join(", "))
            })
    }
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): item 0 most popular, over `[0, item_count)`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    item_count: u64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

/// ζ(n, θ) = Σ_{i=1..n} 1/i^θ.
fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// A generator over `[0, item_count)`; computes ζ(item_count) in O(item_count).
    pub fn new(item_count: u64) -> Self {
        let item_count = item_count.max(1);
        Self::with_zetan(item_count, zeta(item_count, ZIPFIAN_THETA))
    }

    fn with_zetan(item_count: u64, zetan: f64) -> Self {
        let theta = ZIPFIAN_THETA;
        let zeta2 = zeta(2, theta);
        Self {
            item_count,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / item_count as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// The next item, in `[0, item_count)`.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.item_count - 1);
        }
        let v = (self.item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.item_count - 1)
    }
}

/// Chooses the key index of each operation on existing keys, for one thread.
#[derive(Clone, Debug)]
pub struct KeyChooser {
    dist: Dist,
    rng: Rng,
    /// Scrambled zipfian (`zipfian`) or recency zipfian over the loaded count (`latest`).
    zipfian: Option<Zipfian>,
    /// The next index of a `monotonic` walk.
    cursor: u64,
}

impl KeyChooser {
    /// A chooser for one thread. `shared_zipfian` is the `latest` generator built once for
    /// all threads ([`KeyChooser::latest_generator`]), since ζ(n) costs O(n).
    pub fn new(dist: Dist, rng: Rng, shared_zipfian: Option<&Zipfian>, start_offset: u64) -> Self {
        let zipfian = match dist {
            Dist::Zipfian => Some(Zipfian::with_zetan(SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN)),
            Dist::Latest => shared_zipfian.cloned(),
            Dist::Uniform | Dist::Monotonic => None,
        };
        Self {
            dist,
            rng,
            zipfian,
            cursor: start_offset,
        }
    }

    /// The generator `latest` needs, over `key_count` items (None for other distributions).
    pub fn latest_generator(dist: Dist, key_count: u64) -> Option<Zipfian> {
        (dist == Dist::Latest).then(|| Zipfian::new(key_count))
    }

    /// An index of an existing key, given that indices `[0, key_count)` exist.
    #[inline]
    pub fn next(&mut self, key_count: u64) -> u64 {
        let key_count = key_count.max(1);
        match (self.dist, &self.zipfian) {
            (Dist::Zipfian, Some(z)) => fnv64(z.next(&mut self.rng)) % key_count,
            (Dist::Latest, Some(z)) => (key_count - 1).saturating_sub(z.next(&mut self.rng)),
            (Dist::Monotonic, _) => {
                let index = self.cursor % key_count;
                self.cursor = self.cursor.wrapping_add(1);
                index
            }
            _ => self.rng.below(key_count),
        }
    }

    /// The thread's generator, for decisions other than the key (op kind, scan length).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(dist: Dist, key_count: u64, draws: usize) -> Vec<u64> {
        let latest = KeyChooser::latest_generator(dist, key_count);
        let mut chooser = KeyChooser::new(dist, Rng::new(42, 0), latest.as_ref(), 0);
        let mut hits = vec![0u64; key_count as usize];
        for _ in 0..draws {
            hits[chooser.next(key_count) as usize] += 1;
        }
        hits
    }

    #[test]
    fn zipfian_is_skewed() {
        // Goal: the hottest zipfian key is far above uniform's share. Method: 200k draws over
        // 10k keys; uniform gives each key ~20 hits, zipfian's top key must get > 50x that.
        let hits = histogram(Dist::Zipfian, 10_000, 200_000);
        let top = *hits.iter().max().expect("non-empty");
        assert!(top > 50 * 20, "top {top}");
        let uniform = histogram(Dist::Uniform, 10_000, 200_000);
        let top_uniform = *uniform.iter().max().expect("non-empty");
        assert!(top_uniform < 60, "uniform top {top_uniform}");
        // Scrambled: the hot keys are not simply the smallest indices.
        let hottest = hits.iter().position(|&h| h == top).expect("present");
        assert_ne!(hottest, 0);
    }

    #[test]
    fn plain_zipfian_favours_item_zero() {
        // Goal: the unscrambled generator ranks item 0 first. Method: 100k draws over 1000.
        let z = Zipfian::new(1_000);
        let mut rng = Rng::new(3, 3);
        let mut hits = vec![0u32; 1_000];
        for _ in 0..100_000 {
            hits[z.next(&mut rng) as usize] += 1;
        }
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[500]);
    }

    #[test]
    fn latest_favours_recent_keys() {
        // Goal: `latest` concentrates on the newest indices. Method: the top 1% of indices gets
        // far more than 1% of 100k draws over 10k keys.
        let hits = histogram(Dist::Latest, 10_000, 100_000);
        let recent: u64 = hits[9_900..].iter().sum();
        assert!(recent > 30_000, "recent {recent}");
        assert!(hits[9_999] > hits[5_000]);
    }

    #[test]
    fn monotonic_increases() {
        // Goal: `monotonic` walks indices upward. Method: 1000 draws strictly increase.
        let mut chooser = KeyChooser::new(Dist::Monotonic, Rng::new(1, 1), None, 17);
        let draws: Vec<u64> = (0..1_000).map(|_| chooser.next(1_000_000)).collect();
        assert_eq!(draws[0], 17);
        assert!(draws.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn dist_names_round_trip() {
        // Goal: every distribution parses from its own name.
        for dist in Dist::ALL {
            assert_eq!(dist.name().parse::<Dist>().ok(), Some(dist));
        }
        assert!("pareto".parse::<Dist>().is_err());
    }
}
