//! What a benchmark runs against: a bare index (durability `none`), or a durable
//! [`forest_store::Store`] over a store engine in a directory of its own (issue 5 "Measured";
//! DESIGN.md "Durability": `sync`, `group`, `periodic:MS`).
//!
//! Choices:
//! - Every durable run opens a fresh store in a fresh directory (under `--dir`, else the
//!   system's temp dir) and removes it when the run ends, so runs do not see each other's logs.
//! - The untimed load goes through [`Store::write_batch`] in batches of [`LOAD_BATCH_OPS`]
//!   inserts: one durability wait per batch, so loading a million keys under `sync` takes
//!   seconds, not a million fsyncs.
//! - No checkpoint runs during a benchmark: the timed phase measures the log path only.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use forest_core::{Index, IndexStats, Order, Visitor};
use forest_store::{BatchOp, Durability, Store, StoreOptions};

/// Inserts per `write_batch` of a durable load (untimed): large enough that the load's
/// fsyncs cost little, small enough that a batch's owned copies stay a few hundred KB.
pub const LOAD_BATCH_OPS: usize = 1_000;

/// A durability mode of `--durability`: None is `none` (the bare index).
pub type Mode = Option<Durability>;

/// Parses `none`, `sync`, `group` or `periodic:MS`.
pub fn parse_mode(text: &str) -> anyhow::Result<Mode> {
    match text.trim() {
        "none" => Ok(None),
        other => Ok(Some(other.parse::<Durability>().map_err(|e| {
            anyhow::anyhow!("--durability {other:?}: {e} (or \"none\" for the bare index)")
        })?)),
    }
}

/// The mode's name in reports: `none`, `sync`, `group`, `periodic:MS`.
pub fn mode_name(mode: Mode) -> String {
    mode.map_or_else(|| "none".to_string(), |d| d.to_string())
}

/// Whether `spec_name` with `has_params` can run under a durable mode: the store opens its
/// engines by plain name.
pub fn store_can_run(spec_name: &str, has_params: bool) -> bool {
    !has_params && forest_store::ENGINE_NAMES.contains(&spec_name)
}

/// A benchmark's target.
pub enum Target {
    /// The bare index.
    Memory(Arc<dyn Index>),
    /// A durable store; the directory is removed when the target drops (after the store,
    /// which is declared first and so dropped first).
    Durable {
        /// Boxed: a store is large, and the bare-index variant is two words.
        store: Box<Store>,
        dir: tempfile::TempDir,
    },
}

impl Target {
    /// Opens a fresh store of `engine` under `durability`, in a new directory inside `parent`
    /// (the system's temp dir when None).
    pub fn open_durable(
        engine: &str,
        durability: Durability,
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
                engine: engine.to_string(),
                durability,
                ..StoreOptions::default()
            },
        )
        .with_context(|| format!("opening a {engine} store in {}", dir.path().display()))?;
        Ok(Target::Durable {
            store: Box::new(store),
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

    /// Upserts every pair: one `write_batch` (one durability wait) on a store, one upsert
    /// after another on a bare index.
    pub fn upsert_batch(&self, pairs: &[(&[u8], &[u8])]) -> forest_core::Result<()> {
        match self {
            Target::Memory(index) => pairs.iter().try_for_each(|(k, v)| index.upsert(k, v)),
            Target::Durable { store, .. } => {
                let ops: Vec<BatchOp> = pairs
                    .iter()
                    .map(|(k, v)| BatchOp::Upsert(k.to_vec(), v.to_vec()))
                    .collect();
                store.write_batch(&ops).map(|_| ())
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
                let ops: Vec<BatchOp> = keys
                    .iter()
                    .map(|k| BatchOp::Insert(k.clone(), value.to_vec()))
                    .collect();
                let changed = store.write_batch(&ops)?;
                Ok(changed.iter().filter(|c| **c).count() as u64)
            }
        }
    }

    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        match self {
            Target::Memory(index) => index.scan(lower, upper, order, visit),
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
