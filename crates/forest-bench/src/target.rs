//! What a benchmark runs against: a bare index (durability `none`), or a durable
//! [`forest_store::Store`] over a store engine in a directory of its own (issue 5 "Measured";
//! DESIGN.md "Durability": `sync`, `group`, `periodic:MS`).
//!
//! Choices:
//! - Every durable run opens a fresh store in a fresh directory (under `--dir`, else the
//!   system's temp dir) and removes it when the run ends, so runs do not see each other's logs.
//! - The untimed load goes through [`Store::batch`] in batches of [`LOAD_BATCH_OPS`]
//!   inserts: one durability wait per batch, so loading a million keys under `sync` takes
//!   seconds, not a million fsyncs.
//! - No checkpoint runs during a benchmark unless `--checkpoint-every MS` asks for one every
//!   `MS` (a thread started with the store, stopped before it closes): then the timed phase
//!   measures puts while checkpoints run (issue 5 "Put throughput while a checkpoint runs").

use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Context;
use forest_core::{Index, IndexStats, Order, Visitor};
use forest_store::{Durability, Store, StoreOptions};

/// Inserts per [`Store::batch`] of a durable load (untimed): large enough that the load's
/// fsyncs cost little, small enough that a batch's owned copies stay a few hundred KB.
pub const LOAD_BATCH_OPS: usize = 1_000;

/// How a durable run opens its store: `--durability`, `--shards`, `--checkpoint-every`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurableMode {
    pub durability: Durability,
    /// Shard logs (`StoreOptions::shards`).
    pub shards: usize,
    /// Start a checkpoint every this many milliseconds while the store is open (back to
    /// back if one takes longer); None: no checkpoint during the run.
    pub checkpoint_every_ms: Option<u64>,
    /// `--memory-budget`: bwtree on its LSS, evicting above this many resident bytes
    /// (`StoreOptions::memory_budget_bytes`); None: all in memory.
    pub memory_budget_bytes: Option<u64>,
    /// `--map-checkpoint-bytes` / `--no-map-checkpoints` (`StoreOptions::
    /// map_checkpoint_wal_bytes`): with a budget, map checkpoints every this many WAL bytes.
    pub map_checkpoint_wal_bytes: Option<u64>,
}

impl DurableMode {
    /// `durability` with the store's default shards and no background checkpoints.
    pub fn new(durability: Durability) -> Self {
        Self {
            durability,
            shards: forest_store::store::SHARD_COUNT_DEFAULT,
            checkpoint_every_ms: None,
            memory_budget_bytes: None,
            map_checkpoint_wal_bytes: Some(forest_store::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT),
        }
    }
}

/// A durability mode of `--durability`: None is `none` (the bare index).
pub type Mode = Option<DurableMode>;

/// Parses `none`, `sync`, `group` or `periodic:MS` (default shards, no checkpoints).
pub fn parse_mode(text: &str) -> anyhow::Result<Mode> {
    match text.trim() {
        "none" => Ok(None),
        other => Ok(Some(DurableMode::new(
            other.parse::<Durability>().map_err(|e| {
                anyhow::anyhow!("--durability {other:?}: {e} (or \"none\" for the bare index)")
            })?,
        ))),
    }
}

/// The mode's name in reports: `none`, `sync`, `group`, `periodic:MS`, followed by
/// `,shards=N` and `,checkpoint-every=MS` when they differ from the defaults.
pub fn mode_name(mode: Mode) -> String {
    let Some(m) = mode else {
        return "none".to_string();
    };
    let mut name = m.durability.to_string();
    if m.shards != forest_store::store::SHARD_COUNT_DEFAULT {
        name += &format!(",shards={}", m.shards);
    }
    if let Some(ms) = m.checkpoint_every_ms {
        name += &format!(",checkpoint-every={ms}");
    }
    if let Some(bytes) = m.memory_budget_bytes {
        name += &format!(",budget={bytes}");
    }
    name
}

/// A thread that checkpoints a store every interval until dropped.
pub struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<std::thread::JoinHandle<anyhow::Result<u64>>>,
}

impl Checkpointer {
    fn start(store: Arc<Store>, every: Duration) -> anyhow::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("forest-bench-checkpointer".to_string())
            .spawn(move || {
                let mut count = 0u64;
                let (lock, wake) = &*flag;
                let mut stopped = lock.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                loop {
                    let (guard, _) = wake
                        .wait_timeout(stopped, every)
                        .map_err(|_| anyhow::anyhow!("poisoned"))?;
                    stopped = guard;
                    if *stopped {
                        return Ok(count);
                    }
                    drop(stopped);
                    store.checkpoint().context("background checkpoint")?;
                    count += 1;
                    stopped = lock.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                }
            })
            .context("starting the checkpoint thread")?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        if let Ok(mut stopped) = lock.lock() {
            *stopped = true;
        }
        wake.notify_all();
        if let Some(handle) = self.handle.take() {
            // A failed checkpoint fails the store's writes too, which the run reports.
            let _ = handle.join();
        }
    }
}

/// Whether `spec` can run on a store with a memory budget: bwtree alone evicts to an LSS.
pub fn budget_can_run(spec: &crate::engines::Spec) -> bool {
    spec.name == "bwtree"
}

/// Whether `spec` can run under a durable mode: an engine that can be a store's index,
/// with any of its parameters (the store takes the full spec).
pub fn store_can_run(spec: &crate::engines::Spec) -> bool {
    forest_engines::find(&spec.name)
        .is_ok_and(|e| e.capabilities.durable_through_store || e.capabilities.store_holds_its_file)
}

/// A benchmark's target.
pub enum Target {
    /// The bare index.
    Memory(Arc<dyn Index>),
    /// A durable store; the directory is removed when the target drops (after the
    /// checkpointer and the store, which are declared first and so dropped first).
    Durable {
        /// Stops and joins its thread before the store drops.
        checkpointer: Option<Box<Checkpointer>>,
        store: Arc<Store>,
        dir: tempfile::TempDir,
    },
}

impl Target {
    /// Opens a fresh store of `engine` under `mode`, in a new directory inside `parent`
    /// (the system's temp dir when None), with its checkpoint thread if the mode asks.
    pub fn open_durable(
        engine: &str,
        mode: DurableMode,
        parent: Option<&Path>,
    ) -> anyhow::Result<Target> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("forest-bench-");
        let dir = match parent {
            Some(p) => {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
                builder.tempdir_in(p)
            }
            None => builder.tempdir(),
        }
        .context("creating the store's directory")?;
        let store = Store::open_path(
            dir.path(),
            StoreOptions {
                engine: Some(engine.to_string()),
                durability: mode.durability,
                shards: mode.shards,
                switch_engine: false,
                memory_budget_bytes: mode.memory_budget_bytes,
                map_checkpoint_wal_bytes: mode.map_checkpoint_wal_bytes,
            },
        )
        .with_context(|| format!("opening a {engine} store in {}", dir.path().display()))?;
        let store = Arc::new(store);
        let checkpointer = match mode.checkpoint_every_ms {
            Some(ms) => Some(Box::new(Checkpointer::start(
                Arc::clone(&store),
                Duration::from_millis(ms),
            )?)),
            None => None,
        };
        Ok(Target::Durable {
            checkpointer,
            store,
            dir,
        })
    }

    /// Whether writes go through a store.
    pub fn is_durable(&self) -> bool {
        matches!(self, Target::Durable { .. })
    }

    /// The engine's name.
    pub fn name(&self) -> String {
        match self {
            Target::Memory(index) => index.name().to_string(),
            Target::Durable { store, .. } => store.stats().engine,
        }
    }

    /// The store's directory, if durable.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Target::Memory(_) => None,
            Target::Durable { dir, .. } => Some(dir.path()),
        }
    }

    #[inline]
    pub fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        match self {
            Target::Memory(index) => index.get(key, out),
            Target::Durable { store, .. } => store.get(key, out),
        }
    }

    #[inline]
    pub fn insert(&self, key: &[u8], value: &[u8]) -> forest_core::Result<bool> {
        match self {
            Target::Memory(index) => index.insert(key, value),
            Target::Durable { store, .. } => store.insert(key, value),
        }
    }

    #[inline]
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> forest_core::Result<()> {
        match self {
            Target::Memory(index) => index.upsert(key, value),
            Target::Durable { store, .. } => store.upsert(key, value),
        }
    }

    /// Upserts every pair: one [`Store::batch`] (one durability wait) on a store, one upsert
    /// after another on a bare index.
    pub fn upsert_batch(&self, pairs: &[(&[u8], &[u8])]) -> forest_core::Result<()> {
        match self {
            Target::Memory(index) => pairs.iter().try_for_each(|(k, v)| index.upsert(k, v)),
            Target::Durable { store, .. } => {
                let mut batch = store.batch();
                for (k, v) in pairs {
                    batch.upsert(k, v)?;
                }
                batch.wait()
            }
        }
    }

    /// Inserts every key with `value`; the number that were absent.
    pub fn insert_batch(&self, keys: &[Vec<u8>], value: &[u8]) -> anyhow::Result<u64> {
        match self {
            Target::Memory(index) => keys
                .iter()
                .try_fold(0u64, |n, k| Ok(n + u64::from(index.insert(k, value)?))),
            Target::Durable { store, .. } => {
                let mut batch = store.batch();
                let mut inserted = 0u64;
                for k in keys {
                    inserted += u64::from(batch.insert(k, value)?);
                }
                batch.wait()?;
                Ok(inserted)
            }
        }
    }

    /// A scan whose visitor takes about `len_hint` records (`Index::scan_hinted`; the store's
    /// scan takes no hint, nor does the pinned scan, which copies nothing).
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        pinned: bool,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        match self {
            Target::Memory(index) if pinned => index.scan_pinned(lower, upper, order, visit),
            Target::Memory(index) => index.scan_hinted(lower, upper, order, len_hint, visit),
            Target::Durable { store, .. } => store.scan(lower, upper, order, visit),
        }
    }

    /// The engine's statistics.
    pub fn stats(&self) -> IndexStats {
        match self {
            Target::Memory(index) => index.stats(),
            Target::Durable { store, .. } => store.stats().index,
        }
    }

    /// Log fsyncs since the store opened (0 for a bare index).
    pub fn fsync_count(&self) -> u64 {
        match self {
            Target::Memory(_) => 0,
            Target::Durable { store, .. } => store.stats().fsync_count,
        }
    }
}
