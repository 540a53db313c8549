//! forest-bench: one harness for forest's engines and well-known peers (DESIGN.md
//! "Benchmarks"): same key generator, same threads, same run.
//!
//! - [`keygen`]: key shapes of the papers' data sets (Bw-tree §VI, Masstree §6, YCSB).
//! - [`dist`]: uniform, YCSB scrambled zipfian and latest, monotonic (BzTree §7.1.2).
//! - [`workload`]: the named workloads (YCSB A–F, Bw-tree §VI, BzTree §7.1.2, Masstree rw1,
//!   Westerhoff §4.3) and their pre-generated per-thread op streams.
//! - [`peers`]: adapters for crossbeam-skiplist, scc, `RwLock<BTreeMap>`, masstree-rs, and a
//!   hash map.
//! - [`engines`]: the registry building an `Arc<dyn Index>` from a spec string.
//! - [`alloc_count`]: the counting global allocator measuring index memory.
//! - [`runner`]: load, warm-up, timed phase, repetitions.
//! - [`report`]: the table, ratios, JSON and SVG.
//! - [`target`]: a bare index, or a durable store over one (`--durability`).
//! - [`rng`]: the deterministic generator (SplitMix64) and the bijections that scatter keys.
//! - [`cli`]: `forest bench`'s flags ([`BenchArgs`]) and [`run`].

pub mod alloc_count;
pub mod cli;
pub mod dist;
pub mod engines;
pub mod keygen;
pub mod peers;
pub mod report;
pub mod rng;
pub mod runner;
pub mod target;
pub mod workload;

pub use cli::{run, BenchArgs};
