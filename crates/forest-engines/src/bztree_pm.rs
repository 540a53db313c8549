//! The persistent BzTree's registry entry (`bztree-pm`, BzTree §3.1, §6): the tree lives in
//! one file, mapped shared, and recovers from it on its own. `build` makes a new, empty engine,
//! so each build creates a fresh file in `dir` (the system's temp dir by default), removed when
//! the engine drops: a benchmark's file is scratch space. Reopening a file is
//! `forest_bztree::BzTree::open`; a store's tree (forest-store, a file in the store's
//! directory that outlives the process) is a [`StoreTree`].

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::{Error, Index, IndexStats, Order, Result, Visitor};
use forest_pmwcas::{Clwb, Msync, Persist};

use crate::registry::{number, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "bztree-pm";

const PARAMS: &[Param] = &[
    Param {
        key: "persist",
        values: "clwb|msync",
        default: "clwb",
        meaning: "how stores become durable (§2.1): clwb writes cache lines back (the page \
                  cache: safe against a killed process, against power loss only on DAX with \
                  MAP_SYNC); msync syncs the pages of every flush (power-loss safe, slowly)",
    },
    Param {
        key: "dir",
        values: "PATH",
        default: "",
        meaning: "directory of the tree's file (empty: the system's temp dir); the file is \
                  new for each engine built and removed when it drops (a store ignores it: \
                  its tree is bztree-pm.pool in the store's directory, and kept)",
    },
    Param {
        key: "node",
        values: "N",
        default: "1024",
        meaning: "node size in bytes (§7.1: 1 KB), as for bztree",
    },
    crate::bztree::FREE_PARAM,
    Param {
        key: "heap_mib",
        values: "N",
        default: "8192",
        meaning: "node heap in MiB: the file's size (sparse until written)",
    },
    Param {
        key: "descriptors",
        values: "N",
        default: "32768",
        meaning: "PMwCAS descriptors in the file's pool (§2.3, §6.3), a multiple of 64",
    },
];

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about: "the BzTree on PMwCAS, persistent: one mapped file, recovered by PMwCAS and allocator recovery alone (§6)",
    params: PARAMS,
    capabilities: Capabilities {
        in_memory: true,
        durable_through_store: false,
        persistent_on_its_own: true,
        store_holds_its_file: true,
        temporal: false,
    },
    resolve,
    build,
};

struct Parsed {
    persist: String,
    dir: String,
    config: BzTreeConfig,
}

fn parse(spec: &EngineSpec) -> Result<Parsed> {
    let mut persist = "clwb".to_string();
    let mut dir = String::new();
    let mut node = 1024usize;
    let mut heap_mib = 8192usize;
    let mut descriptors = 32768usize;
    let mut free = None;
    for (k, v) in &spec.params {
        match k.as_str() {
            "persist" => match v.as_str() {
                "clwb" | "msync" => persist = v.clone(),
                _ => {
                    return Err(Error::Config(format!(
                        "{NAME}: persist={v}: expected clwb or msync"
                    )))
                }
            },
            "dir" => dir = v.clone(),
            "node" => node = number(NAME, k, v)?,
            "free" => free = crate::bztree::free_space(NAME, k, v)?,
            "heap_mib" => heap_mib = number(NAME, k, v)?,
            "descriptors" => descriptors = number(NAME, k, v)?,
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    let defaults = BzTreeConfig::with_node_size(node);
    let config = BzTreeConfig {
        heap_bytes: heap_mib.saturating_mul(1 << 20),
        descriptor_count: descriptors,
        free_space: free.unwrap_or(defaults.free_space),
        ..defaults
    };
    config.check()?;
    Ok(Parsed {
        persist,
        dir,
        config,
    })
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let p = parse(spec)?;
    Ok(vec![
        ("persist", p.persist),
        ("dir", p.dir),
        ("node", p.config.node_size.to_string()),
        ("free", crate::bztree::free_resolved(&p.config)),
        ("heap_mib", (p.config.heap_bytes >> 20).to_string()),
        ("descriptors", p.config.descriptor_count.to_string()),
    ])
}

/// A fresh file name in `dir`: unique within this process and across processes.
fn fresh_path(dir: &str) -> Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = if dir.is_empty() {
        std::env::temp_dir()
    } else {
        PathBuf::from(dir)
    };
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        path: dir.clone(),
        op: "create directory",
        source,
    })?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!("bztree-pm-{}-{n}.pool", std::process::id())))
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    let p = parse(spec)?;
    let path = fresh_path(&p.dir)?;
    let _ = std::fs::remove_file(&path);
    Ok(match p.persist.as_str() {
        "msync" => Box::new(Scratch::open(path, p.config, Msync)?),
        _ => Box::new(Scratch::open(path, p.config, Clwb::detect())?),
    })
}

/// A tree in a scratch file, removed when the tree drops.
struct Scratch<P: Persist> {
    tree: Option<BzTree<P>>,
    path: PathBuf,
}

impl<P: Persist> Scratch<P> {
    fn open(path: PathBuf, config: BzTreeConfig, persist: P) -> Result<Self> {
        let tree = BzTree::open(&path, config, persist)?;
        Ok(Self {
            tree: Some(tree),
            path,
        })
    }

    fn tree(&self) -> &BzTree<P> {
        self.tree
            .as_ref()
            .expect("the tree is dropped only with the scratch file")
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl<P: Persist> Drop for Scratch<P> {
    fn drop(&mut self) {
        // Unmap before removing the file.
        drop(self.tree.take());
        let _ = std::fs::remove_file(self.path());
    }
}

impl<P: Persist> Index for Scratch<P> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.tree().get(key, out)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.tree().insert(key, value)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree().upsert(key, value)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.tree().update(key, value)
    }

    fn remove(&self, key: &[u8]) -> bool {
        self.tree().remove(key)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.tree().scan(lower, upper, order, visit);
    }

    fn stats(&self) -> IndexStats {
        self.tree().stats()
    }
}

/// The name of a store's tree file in its directory.
pub const STORE_FILE_NAME: &str = "bztree-pm.pool";

/// A tree in either persist mode.
enum AnyTree {
    Clwb(BzTree<Clwb>),
    Msync(BzTree<Msync>),
}

macro_rules! with_tree {
    ($self:expr, $t:ident => $e:expr) => {
        match &*$self.0 {
            AnyTree::Clwb($t) => $e,
            AnyTree::Msync($t) => $e,
        }
    };
}

/// A `bztree-pm` tree that is a store's data (forest-store): opened, not created afresh, in a
/// file the store names, kept when it drops. Clones share the tree. The spec's `dir` is not
/// used (the store's directory holds the file).
#[derive(Clone)]
pub struct StoreTree(Arc<AnyTree>);

impl std::fmt::Debug for StoreTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTree")
            .field("msync", &self.is_msync())
            .finish_non_exhaustive()
    }
}

impl StoreTree {
    /// Opens (or creates, if missing or empty) the tree of `spec` (a `bztree-pm` spec) in
    /// the file at `path`: checked, locked and recovered (`BzTree::open`).
    pub fn open(spec: &EngineSpec, path: &Path) -> Result<StoreTree> {
        if spec.name != NAME {
            return Err(Error::Config(format!(
                "StoreTree opens {NAME} specs, not {:?}",
                spec.name
            )));
        }
        let p = parse(spec)?;
        Ok(StoreTree(Arc::new(match p.persist.as_str() {
            "msync" => AnyTree::Msync(BzTree::open(path, p.config, Msync)?),
            _ => AnyTree::Clwb(BzTree::open(path, p.config, Clwb::detect())?),
        })))
    }

    /// Whether every flush is an msync (`persist=msync`): a write is durable on return.
    pub fn is_msync(&self) -> bool {
        matches!(&*self.0, AnyTree::Msync(_))
    }

    /// Whether the file was created by this open.
    pub fn created(&self) -> bool {
        with_tree!(self, t => t.open_report().created)
    }

    /// Whether the previous open of the file ran on this boot (its page cache is whole).
    pub fn same_boot(&self) -> bool {
        with_tree!(self, t => t.open_report().same_boot)
    }

    /// The open's recovery time in microseconds.
    pub fn recovery_micros(&self) -> u64 {
        with_tree!(self, t => t.open_report().recovery_micros)
    }

    /// `BzTree::store_lsn`.
    pub fn store_lsn(&self) -> u64 {
        with_tree!(self, t => t.store_lsn())
    }

    /// `BzTree::set_store_lsn`.
    pub fn set_store_lsn(&self, lsn: u64) {
        with_tree!(self, t => t.set_store_lsn(lsn))
    }

    /// `BzTree::store_pending`.
    pub fn store_pending(&self) -> u64 {
        with_tree!(self, t => t.store_pending())
    }

    /// `BzTree::set_store_pending`.
    pub fn set_store_pending(&self, lsn: u64) {
        with_tree!(self, t => t.set_store_pending(lsn))
    }
}

impl Index for StoreTree {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        with_tree!(self, t => t.get(key, out))
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        with_tree!(self, t => t.insert(key, value))
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        with_tree!(self, t => t.upsert(key, value))
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        with_tree!(self, t => t.update(key, value))
    }

    fn remove(&self, key: &[u8]) -> bool {
        with_tree!(self, t => t.remove(key))
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        with_tree!(self, t => t.scan(lower, upper, order, visit))
    }

    fn stats(&self) -> IndexStats {
        with_tree!(self, t => t.stats())
    }
}
