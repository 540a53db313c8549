//! The named workloads and their pre-generated per-thread op streams.
//!
//! Names are an interface that scripts rely on. Each workload sets defaults for key shape,
//! value size, distribution and key count; flags override them.
//!
//! - `ycsb-a` … `ycsb-f`: YCSB's core workloads (Cooper et al., SoCC 2010): A 50 % reads /
//!   50 % updates, B 95/5, C read-only, D 95 % reads of `latest` keys / 5 % inserts, E 95 %
//!   scans of 1–100 records / 5 % inserts, F 50 % reads / 50 % read-modify-writes. Zipfian
//!   except D. An update is an upsert of an existing key (YCSB's update on a key-value store).
//! - `bwtree-synthetic`: Bw-tree §VI: 8-byte keys and values, 1 M keys, 5 reads : 1 write;
//!   the writes are half updates of existing keys and half inserts of new keys (the paper's
//!   Table I shows splits, so its writes add keys). `bwtree-readonly`: Table II's read-only run.
//! - `xbox-like`: Bw-tree §VI Xbox LIVE: 94-byte keys, 1200-byte values, 7.5 : 1 gets : sets.
//! - `dedup-like`: Bw-tree §VI deduplication trace: 20-byte hash keys, 44-byte values,
//!   2.2 : 1 lookups : inserts of new chunk hashes.
//! - `bztree-read-only`, `bztree-read-mostly` (90/10), `bztree-read-heavy` (75/25),
//!   `bztree-balanced` (50/50): BzTree §7.1.2, 8-byte keys and values, 1 M keys, writes are
//!   upserts; with `--dist monotonic` the upserts append new, increasing keys.
//! - `masstree-rw1`: Masstree's rw1 test (§6): each thread puts random 31-bit integers as
//!   decimal strings, then gets all of its keys in shuffled order; reported as two rows,
//!   `masstree-rw1/put` and `masstree-rw1/get`. Its op count is its key count.
//! - `durable-put`, `durable-batch` (issue 5 "Measured"): 8-byte keys, 100-byte values,
//!   upserts only, of distinct new keys (thread t's j-th is key index `keys + j·T + t`), after
//!   a load of `--keys` keys (default none). `durable-batch` hands them to the target in
//!   batches of [`DURABLE_BATCH_OPS`] (one `Store::batch`, one durability wait, per batch).
//!   Meant for `--durability`; under `none` they measure the bare index's upserts.
//! - `westerhoff-seq`: Westerhoff §4.3: the keys are inserted first (the initialization
//!   sequence), then one sequence of 80 % searches of inserted keys and 20 % inserts of new
//!   keys is dealt round-robin over the threads (thread t gets actions t, t+T, t+2T, …).
//!
//! Scans (`ycsb-e`, or any mix with scans) start at an existing key and visit up to their
//! length in records: by default YCSB E's lengths, uniform in `1..=100`, ascending. Two flags
//! reshape every scan of a run: `--scan-len N` makes each scan exactly N records (the start
//! keys stay those of the default, so runs of different lengths scan from the same keys), and
//! `--scan-order desc` makes each scan start at its key and go down (the key itself first).
//!
//! Streams are made before the timed phase (keys materialized into per-thread arenas), so key
//! generation never runs in the timed loop, and one stream set is shared by every engine of a
//! run, so all face the same operations.

use std::str::FromStr;

use forest_core::Order;

use crate::dist::{Dist, KeyChooser};
use crate::keygen::{KeyOrder, KeyShape};
use crate::rng::Rng;

/// What one operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `get` of a key.
    Read,
    /// `upsert` (of an existing key, or of a new one for appending writes).
    Upsert,
    /// `insert` (if absent) of a new key.
    Insert,
    /// A scan from a key, of up to `scan_len` records, in the phase's [`Phase::scan_order`].
    Scan,
    /// `get` then `upsert` of the same key (YCSB F).
    ReadModifyWrite,
}

/// One operation of a stream; its key is a slice of the stream's arena.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// What to do.
    pub kind: OpKind,
    /// Records a scan visits at most.
    pub scan_len: u32,
    key_start: usize,
    key_len: u32,
}

/// One thread's operations of one phase.
#[derive(Default, Debug)]
pub struct Stream {
    /// The operations in order.
    pub ops: Vec<Op>,
    arena: Vec<u8>,
    scratch: Vec<u8>,
}

impl Stream {
    fn push(&mut self, kind: OpKind, scan_len: u32, shape: KeyShape, index: u64, order: KeyOrder) {
        let key_start = self.arena.len();
        shape.encode(index, order, &mut self.scratch);
        self.arena.extend_from_slice(&self.scratch);
        self.ops.push(Op {
            kind,
            scan_len,
            key_start,
            key_len: self.scratch.len() as u32,
        });
    }

    /// The key of `op`, which must come from this stream.
    #[inline]
    pub fn key(&self, op: &Op) -> &[u8] {
        &self.arena[op.key_start..op.key_start + op.key_len as usize]
    }
}

/// A timed phase: one stream per thread, and the suffix of its report row (`put`, `get`).
#[derive(Debug)]
pub struct Phase {
    /// Appended to the workload's name in reports (`masstree-rw1/put`), if any.
    pub suffix: Option<&'static str>,
    /// One stream per thread.
    pub streams: Vec<Stream>,
    /// Consecutive ops handed over as one batch (1: one at a time); batches hold upserts only.
    pub batch_ops: usize,
    /// The direction of every scan of the phase.
    pub scan_order: ScanOrder,
    /// Scans through `Index::scan_pinned` (records in place) instead of `Index::scan`.
    pub scan_pinned: bool,
}

impl Phase {
    /// Operations over all threads.
    pub fn op_count(&self) -> u64 {
        self.streams.iter().map(|s| s.ops.len() as u64).sum()
    }

    /// Whether any op is a scan.
    pub fn has_scans(&self) -> bool {
        self.streams
            .iter()
            .any(|s| s.ops.iter().any(|o| o.kind == OpKind::Scan))
    }
}

/// The proportions of a mixed workload (they need not sum to 1; they are normalized).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// Reads of existing keys.
    pub read: f64,
    /// Upserts of existing keys.
    pub update: f64,
    /// Inserts of new keys.
    pub insert: f64,
    /// Scans starting at an existing key.
    pub scan: f64,
    /// Read-modify-writes of existing keys.
    pub rmw: f64,
    /// Longest scan; lengths are uniform in `1..=scan_len_max` (YCSB E: 100).
    pub scan_len_max: u32,
    /// Under `monotonic`, updates append new increasing keys (BzTree's monotonic upserts).
    pub append_when_monotonic: bool,
}

impl Mix {
    const fn new(read: f64, update: f64, insert: f64, scan: f64, rmw: f64) -> Self {
        Self {
            read,
            update,
            insert,
            scan,
            rmw,
            scan_len_max: 100,
            append_when_monotonic: false,
        }
    }

    const fn appending(mut self) -> Self {
        self.append_when_monotonic = true;
        self
    }
}

/// The direction of a run's scans (`--scan-order`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanOrder {
    /// From the start key up: `[key, +inf)`, smallest first (YCSB E).
    #[default]
    Asc,
    /// From the start key down: `(-inf, key]`, largest first.
    Desc,
}

impl ScanOrder {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScanOrder::Asc => "asc",
            ScanOrder::Desc => "desc",
        }
    }

    /// The index's scan order.
    pub fn order(self) -> Order {
        match self {
            ScanOrder::Asc => Order::Ascending,
            ScanOrder::Desc => Order::Descending,
        }
    }
}

impl FromStr for ScanOrder {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "asc" => Ok(ScanOrder::Asc),
            "desc" => Ok(ScanOrder::Desc),
            _ => anyhow::bail!("unknown scan order {s:?}; known: asc, desc"),
        }
    }
}

/// Reads only: warm-ups.
pub const READ_ONLY: Mix = Mix::new(1.0, 0.0, 0.0, 0.0, 0.0);

/// How a workload's phases are made.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Load the keys, then one timed phase of a mix.
    Mixed(Mix),
    /// Masstree rw1: timed put phase, then timed get phase, no load.
    MasstreeRw1,
    /// Westerhoff §4.3: load, then one 80/20 search/insert sequence dealt round-robin.
    WesterhoffSeq,
    /// Upserts of new keys only, `batch_ops` per call (durable-put, durable-batch).
    Puts { batch_ops: usize },
}

/// Upserts per `Store::batch` of `durable-batch`.
pub const DURABLE_BATCH_OPS: usize = 1_000;

/// A named workload and its defaults.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// The name on the command line and in reports.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Default key shape.
    pub key_shape: KeyShape,
    /// Default value size in bytes.
    pub value_size: usize,
    /// Default distribution.
    pub dist: Dist,
    /// Default key count (the load, or rw1's puts).
    pub keys: u64,
    /// How its phases are made.
    pub kind: Kind,
}

/// 1 M keys: the Bw-tree synthetic workload's and BzTree's prefill.
const PAPER_KEYS: u64 = 1_000_000;

const fn mixed(
    name: &'static str,
    about: &'static str,
    key_shape: KeyShape,
    value_size: usize,
    dist: Dist,
    mix: Mix,
) -> Workload {
    Workload {
        name,
        about,
        key_shape,
        value_size,
        dist,
        keys: PAPER_KEYS,
        kind: Kind::Mixed(mix),
    }
}

/// Every workload, in the order `--help` lists them.
pub const WORKLOADS: &[Workload] = &[
    mixed(
        "ycsb-a",
        "YCSB A: 50% reads, 50% updates, zipfian",
        KeyShape::Ycsb,
        100,
        Dist::Zipfian,
        Mix::new(0.5, 0.5, 0.0, 0.0, 0.0),
    ),
    mixed(
        "ycsb-b",
        "YCSB B: 95% reads, 5% updates, zipfian",
        KeyShape::Ycsb,
        100,
        Dist::Zipfian,
        Mix::new(0.95, 0.05, 0.0, 0.0, 0.0),
    ),
    mixed(
        "ycsb-c",
        "YCSB C: read-only, zipfian",
        KeyShape::Ycsb,
        100,
        Dist::Zipfian,
        Mix::new(1.0, 0.0, 0.0, 0.0, 0.0),
    ),
    mixed(
        "ycsb-d",
        "YCSB D: 95% reads of latest keys, 5% inserts",
        KeyShape::Ycsb,
        100,
        Dist::Latest,
        Mix::new(0.95, 0.0, 0.05, 0.0, 0.0),
    ),
    mixed(
        "ycsb-e",
        "YCSB E: 95% scans of 1-100 records, 5% inserts, zipfian",
        KeyShape::Ycsb,
        100,
        Dist::Zipfian,
        Mix::new(0.0, 0.0, 0.05, 0.95, 0.0),
    ),
    mixed(
        "ycsb-f",
        "YCSB F: 50% reads, 50% read-modify-writes, zipfian",
        KeyShape::Ycsb,
        100,
        Dist::Zipfian,
        Mix::new(0.5, 0.0, 0.0, 0.0, 0.5),
    ),
    mixed(
        "bwtree-synthetic",
        "Bw-tree VI: 8 B keys/values, 5 reads : 1 write (half inserts)",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(5.0 / 6.0, 1.0 / 12.0, 1.0 / 12.0, 0.0, 0.0),
    ),
    mixed(
        "bwtree-readonly",
        "Bw-tree Table II: read-only, 8 B keys/values",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(1.0, 0.0, 0.0, 0.0, 0.0),
    ),
    mixed(
        "xbox-like",
        "Bw-tree VI Xbox: 94 B keys, 1200 B values, 7.5 : 1 gets : sets",
        KeyShape::Text94,
        1200,
        Dist::Uniform,
        Mix::new(7.5, 1.0, 0.0, 0.0, 0.0),
    ),
    mixed(
        "dedup-like",
        "Bw-tree VI dedup: 20 B hashes, 44 B values, 2.2 : 1 reads : inserts",
        KeyShape::Hash20,
        44,
        Dist::Uniform,
        Mix::new(2.2, 0.0, 1.0, 0.0, 0.0),
    ),
    mixed(
        "bztree-read-only",
        "BzTree 7.1.2: 100% reads, 8 B keys/values",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(1.0, 0.0, 0.0, 0.0, 0.0).appending(),
    ),
    mixed(
        "bztree-read-mostly",
        "BzTree 7.1.2: 90% reads, 10% upserts",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(0.9, 0.1, 0.0, 0.0, 0.0).appending(),
    ),
    mixed(
        "bztree-read-heavy",
        "BzTree 7.1.2: 75% reads, 25% upserts",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(0.75, 0.25, 0.0, 0.0, 0.0).appending(),
    ),
    mixed(
        "bztree-balanced",
        "BzTree 7.1.2: 50% reads, 50% upserts",
        KeyShape::U64,
        8,
        Dist::Uniform,
        Mix::new(0.5, 0.5, 0.0, 0.0, 0.0).appending(),
    ),
    Workload {
        name: "masstree-rw1",
        about: "Masstree rw1: put random int32 decimal keys, then get all shuffled (2 rows)",
        key_shape: KeyShape::Decimal,
        value_size: 8,
        dist: Dist::Uniform,
        keys: PAPER_KEYS,
        kind: Kind::MasstreeRw1,
    },
    Workload {
        name: "durable-put",
        about: "Store: upserts of new 8 B keys, 100 B values, one per call (use --durability)",
        key_shape: KeyShape::U64,
        value_size: 100,
        dist: Dist::Uniform,
        keys: 0,
        kind: Kind::Puts { batch_ops: 1 },
    },
    Workload {
        name: "durable-batch",
        about: "Store: upserts as durable-put, 1000 per Store::batch (use --durability)",
        key_shape: KeyShape::U64,
        value_size: 100,
        dist: Dist::Uniform,
        keys: 0,
        kind: Kind::Puts {
            batch_ops: DURABLE_BATCH_OPS,
        },
    },
    Workload {
        name: "westerhoff-seq",
        about: "Westerhoff 4.3: init inserts, then 80% search / 20% insert, round-robin",
        key_shape: KeyShape::U64,
        value_size: 8,
        dist: Dist::Uniform,
        keys: PAPER_KEYS,
        kind: Kind::WesterhoffSeq,
    },
];

impl Workload {
    /// Whether the workload's timed phase scans.
    pub fn has_scans(&self) -> bool {
        matches!(self.kind, Kind::Mixed(mix) if mix.scan > 0.0)
    }

    /// Its scans' longest length by default (None: it has no scans).
    pub fn scan_len_max(&self) -> Option<u32> {
        match self.kind {
            Kind::Mixed(mix) if mix.scan > 0.0 => Some(mix.scan_len_max),
            _ => None,
        }
    }
}

impl FromStr for Workload {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        WORKLOADS
            .iter()
            .find(|w| w.name == s)
            .copied()
            .ok_or_else(|| {
                let known: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
                anyhow::anyhow!("unknown workload {s:?}; known: {}", known.join(", "))
            })
    }
}

/// A workload with every default resolved against the flags.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The workload.
    pub workload: Workload,
    /// Key shape in force.
    pub key_shape: KeyShape,
    /// Value size in force.
    pub value_size: usize,
    /// Distribution in force.
    pub dist: Dist,
    /// Keys loaded (or put, for rw1).
    pub keys: u64,
    /// Timed operations over all threads (not used by rw1).
    pub ops: u64,
    /// Seed of every generator.
    pub seed: u64,
    /// Records of every scan (`--scan-len`); None: the workload's uniform lengths.
    pub scan_len: Option<u32>,
    /// Direction of every scan (`--scan-order`).
    pub scan_order: ScanOrder,
    /// Scans through `Index::scan_pinned` (`--scan-pinned`).
    pub scan_pinned: bool,
}

impl Config {
    /// How key indices map to keys: in key order under `monotonic`, scattered otherwise.
    pub fn key_order(&self) -> KeyOrder {
        if self.dist == Dist::Monotonic {
            KeyOrder::Sequential
        } else {
            KeyOrder::Scattered
        }
    }

    /// Whether this workload loads its keys before the timed phases.
    pub fn has_load(&self) -> bool {
        match self.workload.kind {
            Kind::MasstreeRw1 => false,
            Kind::Puts { .. } => self.keys > 0,
            Kind::Mixed(_) | Kind::WesterhoffSeq => true,
        }
    }

    /// Whether `--keys 0` is meaningful (no load): only for the put workloads.
    pub fn allows_no_keys(&self) -> bool {
        matches!(self.workload.kind, Kind::Puts { .. })
    }

    /// The scans' shape in reports when a flag changed it (`scan=10,desc`, `scan=1-100,desc`);
    /// None for a workload without scans or with its default scans.
    pub fn scan_label(&self) -> Option<String> {
        let max = self.workload.scan_len_max()?;
        if self.scan_len.is_none() && self.scan_order == ScanOrder::Asc && !self.scan_pinned {
            return None;
        }
        let len = match self.scan_len {
            Some(n) => n.to_string(),
            None => format!("1-{max}"),
        };
        let pinned = if self.scan_pinned { ",pinned" } else { "" };
        Some(format!("scan={len},{}{pinned}", self.scan_order.name()))
    }

    /// The key of `index` in this configuration.
    pub fn key(&self, index: u64, out: &mut Vec<u8>) {
        self.key_shape.encode(index, self.key_order(), out);
    }
}

/// A workload's timed phases for `threads` threads.
pub fn phases(config: &Config, threads: usize) -> Vec<Phase> {
    let threads = threads.max(1);
    match config.workload.kind {
        Kind::Mixed(mix) => vec![mixed_phase(config, &mix, threads)],
        Kind::MasstreeRw1 => rw1_phases(config, threads),
        Kind::WesterhoffSeq => vec![westerhoff_phase(config, threads)],
        Kind::Puts { batch_ops } => vec![puts_phase(config, threads, batch_ops)],
    }
}

fn puts_phase(config: &Config, threads: usize, batch_ops: usize) -> Phase {
    let order = config.key_order();
    let per_thread = config.ops / threads as u64;
    let extra = config.ops % threads as u64;
    let streams = (0..threads as u64)
        .map(|t| {
            let mut stream = Stream::default();
            for j in 0..per_thread + u64::from(t < extra) {
                let index = config.keys + j * threads as u64 + t;
                stream.push(OpKind::Upsert, 0, config.key_shape, index, order);
            }
            stream
        })
        .collect();
    Phase {
        suffix: None,
        streams,
        batch_ops: batch_ops.max(1),
        scan_order: config.scan_order,
        scan_pinned: config.scan_pinned,
    }
}

fn mixed_phase(config: &Config, mix: &Mix, threads: usize) -> Phase {
    let order = config.key_order();
    let shape = config.key_shape;
    let keys = config.keys;
    let total = mix.read + mix.update + mix.insert + mix.scan + mix.rmw;
    let latest = KeyChooser::latest_generator(config.dist, keys);
    let per_thread = config.ops / threads as u64;
    let extra = config.ops % threads as u64;
    let streams = (0..threads)
        .map(|t| {
            let t64 = t as u64;
            let rng = Rng::new(config.seed, 1 + t64);
            // Monotonic walks start evenly spaced so threads do not all read one key.
            let offset = keys / threads as u64 * t64;
            let mut chooser = KeyChooser::new(config.dist, rng, latest.as_ref(), offset);
            let count = per_thread + u64::from(t64 < extra);
            let mut stream = Stream::default();
            let mut own_new_keys = 0u64;
            // The j-th new key of thread t is index keys + j·T + t: unique across threads and,
            // under `monotonic`, increasing over time on every thread.
            let next_new_key = |own: &mut u64| {
                let index = keys + *own * threads as u64 + t64;
                *own += 1;
                index
            };
            for _ in 0..count {
                // Keys this thread knows of: the load, plus about T new keys per own insert.
                let known = keys + own_new_keys * threads as u64;
                let pick = chooser.rng().next_f64() * total;
                let (kind, scan_len, index) = if pick < mix.read {
                    (OpKind::Read, 0, chooser.next(known))
                } else if pick < mix.read + mix.update {
                    let index = if mix.append_when_monotonic && config.dist == Dist::Monotonic {
                        next_new_key(&mut own_new_keys)
                    } else {
                        chooser.next(known)
                    };
                    (OpKind::Upsert, 0, index)
                } else if pick < mix.read + mix.update + mix.insert {
                    (OpKind::Insert, 0, next_new_key(&mut own_new_keys))
                } else if pick < mix.read + mix.update + mix.insert + mix.scan {
                    // Drawn even under --scan-len, so the start keys do not depend on it.
                    let drawn = 1 + chooser.rng().below(u64::from(mix.scan_len_max)) as u32;
                    let len = config.scan_len.unwrap_or(drawn);
                    (OpKind::Scan, len, chooser.next(known))
                } else {
                    (OpKind::ReadModifyWrite, 0, chooser.next(known))
                };
                stream.push(kind, scan_len, shape, index, order);
            }
            stream
        })
        .collect();
    Phase {
        suffix: None,
        streams,
        batch_ops: 1,
        scan_order: config.scan_order,
        scan_pinned: config.scan_pinned,
    }
}

fn rw1_phases(config: &Config, threads: usize) -> Vec<Phase> {
    let order = config.key_order();
    let shape = config.key_shape;
    let mut puts = Vec::with_capacity(threads);
    let mut gets = Vec::with_capacity(threads);
    for t in 0..threads {
        let mut own: Vec<u64> = (t as u64..config.keys).step_by(threads).collect();
        let mut put = Stream::default();
        for &index in &own {
            put.push(OpKind::Upsert, 0, shape, index, order);
        }
        Rng::new(config.seed, 1_000 + t as u64).shuffle(&mut own);
        let mut get = Stream::default();
        for &index in &own {
            get.push(OpKind::Read, 0, shape, index, order);
        }
        puts.push(put);
        gets.push(get);
    }
    vec![
        Phase {
            suffix: Some("put"),
            streams: puts,
            batch_ops: 1,
            scan_order: config.scan_order,
            scan_pinned: config.scan_pinned,
        },
        Phase {
            suffix: Some("get"),
            streams: gets,
            batch_ops: 1,
            scan_order: config.scan_order,
            scan_pinned: config.scan_pinned,
        },
    ]
}

/// The thesis' search probability (§4.3: "80% probability for searches, and 20% for inserts").
const WESTERHOFF_SEARCH_SHARE: f64 = 0.8;

fn westerhoff_phase(config: &Config, threads: usize) -> Phase {
    let order = config.key_order();
    let shape = config.key_shape;
    // One chooser for the one sequence; the thesis draws searched keys uniformly.
    let latest = KeyChooser::latest_generator(config.dist, config.keys);
    let mut chooser = KeyChooser::new(config.dist, Rng::new(config.seed, 7), latest.as_ref(), 0);
    let mut streams: Vec<Stream> = (0..threads).map(|_| Stream::default()).collect();
    let mut inserted = config.keys;
    for i in 0..config.ops {
        let stream = &mut streams[(i % threads as u64) as usize];
        if chooser.rng().next_f64() < WESTERHOFF_SEARCH_SHARE {
            stream.push(OpKind::Read, 0, shape, chooser.next(inserted), order);
        } else {
            stream.push(OpKind::Insert, 0, shape, inserted, order);
            inserted += 1;
        }
    }
    Phase {
        suffix: None,
        streams,
        batch_ops: 1,
        scan_order: config.scan_order,
        scan_pinned: config.scan_pinned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> Config {
        let workload: Workload = name.parse().expect("known workload");
        Config {
            workload,
            key_shape: workload.key_shape,
            value_size: workload.value_size,
            dist: workload.dist,
            keys: 1_000,
            ops: 10_000,
            seed: 9,
            scan_len: None,
            scan_order: ScanOrder::Asc,
            scan_pinned: false,
        }
    }

    #[test]
    fn mixes_have_their_proportions() {
        // Goal: op kinds occur in the documented shares. Method: count kinds over 10k ops.
        let phase = &phases(&config("ycsb-b"), 2)[0];
        let ops: Vec<_> = phase.streams.iter().flat_map(|s| s.ops.iter()).collect();
        assert_eq!(ops.len(), 10_000);
        let updates = ops.iter().filter(|o| o.kind == OpKind::Upsert).count();
        assert!((350..650).contains(&updates), "{updates}");
        let e = &phases(&config("ycsb-e"), 1)[0];
        let scans: Vec<_> = e.streams[0]
            .ops
            .iter()
            .filter(|o| o.kind == OpKind::Scan)
            .collect();
        assert!(scans.len() > 9_000);
        assert!(scans.iter().all(|o| (1..=100).contains(&o.scan_len)));
        assert!(e.has_scans());
    }

    #[test]
    fn scan_len_fixes_every_scan_and_keeps_the_start_keys() {
        // Goal: --scan-len N makes every scan exactly N records, and changes nothing else:
        // the same op kinds and keys as the default streams (so lengths compare on the same
        // start keys); --scan-order reaches the phase. Method: generate ycsb-e both ways and
        // compare op by op.
        let default = &phases(&config("ycsb-e"), 2)[0];
        for len in [10, 1_000] {
            let mut c = config("ycsb-e");
            c.scan_len = Some(len);
            c.scan_order = ScanOrder::Desc;
            let fixed = &phases(&c, 2)[0];
            assert_eq!(fixed.scan_order, ScanOrder::Desc);
            assert_eq!(default.scan_order, ScanOrder::Asc);
            for (a, b) in default.streams.iter().zip(&fixed.streams) {
                assert_eq!(a.ops.len(), b.ops.len());
                for (x, y) in a.ops.iter().zip(&b.ops) {
                    assert_eq!(x.kind, y.kind);
                    assert_eq!(a.key(x), b.key(y));
                    if y.kind == OpKind::Scan {
                        assert_eq!(y.scan_len, len);
                    }
                }
            }
            assert!(fixed.has_scans());
            assert_eq!(
                c.scan_label().as_deref(),
                Some(format!("scan={len},desc").as_str())
            );
        }
        // Default lengths still vary over 1..=100.
        let lens: std::collections::BTreeSet<u32> = default.streams[0]
            .ops
            .iter()
            .filter(|o| o.kind == OpKind::Scan)
            .map(|o| o.scan_len)
            .collect();
        assert!(lens.len() > 50 && lens.iter().all(|l| (1..=100).contains(l)));
        assert_eq!(config("ycsb-e").scan_label(), None);
        let mut desc = config("ycsb-e");
        desc.scan_order = ScanOrder::Desc;
        assert_eq!(desc.scan_label().as_deref(), Some("scan=1-100,desc"));
        let mut no_scans = config("ycsb-a");
        no_scans.scan_len = Some(10);
        assert_eq!(no_scans.scan_label(), None);
        assert!(!no_scans.workload.has_scans() && config("ycsb-e").workload.has_scans());
    }

    #[test]
    fn scan_orders_parse_by_name() {
        // Goal: the --scan-order names round-trip; anything else is an error naming both.
        for order in [ScanOrder::Asc, ScanOrder::Desc] {
            assert_eq!(order.name().parse::<ScanOrder>().expect("parses"), order);
        }
        assert_eq!(ScanOrder::Desc.order(), Order::Descending);
        let err = "down"
            .parse::<ScanOrder>()
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("asc") && err.contains("desc"), "{err}");
    }

    #[test]
    fn rw1_has_put_and_get_phases_over_the_same_keys() {
        // Goal: rw1 puts each key once and gets each key once, shuffled. Method: compare sets.
        let phases = phases(&config("masstree-rw1"), 3);
        assert_eq!(phases[0].suffix, Some("put"));
        assert_eq!(phases[1].suffix, Some("get"));
        let keys = |p: &Phase| {
            let mut v: Vec<Vec<u8>> = p
                .streams
                .iter()
                .flat_map(|s| s.ops.iter().map(|o| s.key(o).to_vec()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(keys(&phases[0]), keys(&phases[1]));
        assert_eq!(phases[0].op_count(), 1_000);
        let first_put: Vec<_> = phases[0].streams[0]
            .ops
            .iter()
            .take(20)
            .map(|o| phases[0].streams[0].key(o).to_vec())
            .collect();
        let first_get: Vec<_> = phases[1].streams[0]
            .ops
            .iter()
            .take(20)
            .map(|o| phases[1].streams[0].key(o).to_vec())
            .collect();
        assert_ne!(first_put, first_get, "gets are shuffled");
    }

    #[test]
    fn westerhoff_deals_one_sequence_round_robin() {
        // Goal: the sequence is split evenly, ~20 % inserts of distinct new keys. Method:
        // count per thread and check inserted keys are unique.
        let phase = &phases(&config("westerhoff-seq"), 4)[0];
        assert!(phase.streams.iter().all(|s| s.ops.len() == 2_500));
        let mut inserted: Vec<Vec<u8>> = phase
            .streams
            .iter()
            .flat_map(|s| {
                s.ops
                    .iter()
                    .filter(|o| o.kind == OpKind::Insert)
                    .map(|o| s.key(o).to_vec())
            })
            .collect();
        let n = inserted.len();
        assert!((1_600..2_400).contains(&n), "{n}");
        inserted.sort();
        inserted.dedup();
        assert_eq!(inserted.len(), n);
    }

    #[test]
    fn monotonic_bztree_upserts_append_increasing_keys() {
        // Goal: under monotonic, BzTree upserts append keys in increasing key order.
        // Method: the upsert keys of one thread strictly increase and exceed every loaded key.
        let mut c = config("bztree-balanced");
        c.dist = Dist::Monotonic;
        let phase = &phases(&c, 2)[0];
        let s = &phase.streams[0];
        let keys: Vec<&[u8]> = s
            .ops
            .iter()
            .filter(|o| o.kind == OpKind::Upsert)
            .map(|o| s.key(o))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let mut last_loaded = Vec::new();
        c.key(c.keys - 1, &mut last_loaded);
        assert!(keys[0] > last_loaded.as_slice());
    }

    #[test]
    fn durable_puts_upsert_distinct_new_keys() {
        // Goal: durable-put/-batch streams are upserts of distinct keys past the load, dealt
        // evenly; the batch workload carries its batch size. Method: collect and dedup keys.
        let mut c = config("durable-batch");
        c.keys = 0;
        assert!(!c.has_load() && c.allows_no_keys());
        let phase = &phases(&c, 3)[0];
        assert_eq!(phase.batch_ops, DURABLE_BATCH_OPS);
        assert_eq!(phase.op_count(), 10_000);
        let mut keys: Vec<&[u8]> = phase
            .streams
            .iter()
            .flat_map(|s| s.ops.iter().map(|o| s.key(o)))
            .collect();
        assert!(phase
            .streams
            .iter()
            .all(|s| s.ops.iter().all(|o| o.kind == OpKind::Upsert)));
        assert!(keys.iter().all(|k| k.len() == 8));
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 10_000);
        assert_eq!(phases(&config("durable-put"), 2)[0].batch_ops, 1);
    }

    #[test]
    fn workload_names_are_unique_and_parse() {
        // Goal: the name interface: every workload parses; names are distinct.
        let mut names: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
        for n in &names {
            assert_eq!(n.parse::<Workload>().expect("parses").name, *n);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), WORKLOADS.len());
        assert!("ycsb-z".parse::<Workload>().is_err());
    }
}
