//! Opening a TSBw-tree from LSS-C (issue 18, step 1 of the storage design; TSBw §II-D
//! Mk-Stable/Hi-Stable and the mapping-table checkpoint, §V-A "recovery reads only LSS-C";
//! Bw-tree §V-A), after forest-bwtree's `recover.rs` and `map_checkpoint.rs` over
//! forest-llama's `checkpoint.rs` and `recover.rs`.
//!
//! **What a checkpoint persists.** [`TsbTree::take_map_checkpoint`] is forest-llama's
//! `Checkpoints::take_with_root`: S, then each page's newest image (an evicted page's address,
//! a resident page's newest flush delta, or, for a resident page without one since its last
//! consolidation, a flush made there, at or above S), the free PIDs, T. Beside it, in the
//! same directory, `tsb-meta` ([`TsbMeta`], docs/FORMAT.md "TSBw-tree meta"): the clock's
//! high-water mark and the retention threshold. Written after S (inside the root callback,
//! before any word is walked) and synced before the checkpoint is published: every version
//! in a piece below S was stamped before S, so the clock it records covers them. The
//! retention threshold is also written, and synced, *before* a raise frees anything
//! ([`TsbTree::set_retention`](forest_core::TemporalIndex::set_retention) on a checkpointed
//! tree): a freed PID can be reused, and a reused PID's image may be recovered while older
//! index images still name it; only a threshold at least the one that freed it keeps reads
//! from following those stale terms (`retention.rs`).
//!
//! **Opening** ([`TsbTree::open`]): `tsb-meta` read (damage refused, naming the file), then
//! forest-llama's `open_recovering` (the newest valid checkpoint, the scan of the LSS from its
//! S: each PID mapped to its newest stable image, PIDs with none free; a damaged checkpoint
//! falls back to the older one, and none valid is refused naming the files), then the tree:
//! the recorded root (without a checkpoint, PID 0, the first root: the scan from 0 met every
//! image), the clock raised to the larger of the meta's and the newest timestamp among the
//! images the scan met (a record header's `lsn_high`), the retention threshold the meta's.
//! No page is read: pages load on first use (`storage.rs`). §IV-B2's split lists start
//! empty and the retention queue too (recovered historical pages are not freed by a later
//! raise: their PIDs stay in use; the threshold still refuses reads before it).
//!
//! **Why the pages recovered fit together without logging Algorithm 1's steps.** Every
//! image is one page state that existed in memory, and `storage.rs`'s flush order ("Flush
//! order") reserves an image only after the images it relies on: a side link's or history
//! link's page has some image (any image of a key split's right page holds its range's
//! versions as of the split; a historical page never changes), and each page an index term
//! names has an image holding its newest split or term change as of the index page's read.
//! The stable prefix is contiguous in address order, so a recovered image's dependencies are
//! recovered too, at that image or a newer one. The mixes that remain are the ones memory
//! has too: an index page older than its children is a half-done split (B-link side links,
//! history links and help-along complete it, §IV-C); a recovered root older than the newest
//! is a root whose growth has not happened yet (its side link or history link leads on). A
//! version is immutable, so a page never recovers to a state that contradicts another: per
//! key the recovered history is a prefix of the history before the crash, and holds every
//! version of an image that was stable, which a checkpoint makes of every version it saw.
//!
//! Refused (named errors, never a guess): a damaged `tsb-meta`, a map with pages but no root
//! among them, and system-transaction units (tsbtree writes none).

use std::sync::Arc;

use forest_core::sync::atomic::{AtomicU64, Ordering};
use forest_core::{Error, Result, Timestamp};
use forest_file::Dir;
use forest_llama::checkpoint::{CheckpointInfo, Checkpoints};
use forest_llama::lss::{Lss, LssAddress, LssConfig, RecordKind};
use forest_llama::page_state::PageLocation;
use forest_llama::recover::{open_recovering, RecoveredMap};
use forest_llama::Pid;

use crate::node::{self, Kind, Node};
use crate::storage::TsbFlush;
use crate::{TsbConfig, TsbTree};

/// The meta file's name in the checkpoint directory.
pub const META_FILE: &str = "tsb-meta";
const META_TMP: &str = "tsb-meta.tmp";
const META_MAGIC: [u8; 8] = *b"FORESTTM";
const META_VERSION: u32 = 1;
const META_BYTES: usize = 36;

/// Flushes of one page a checkpoint or a flush pass tries before giving up (each lost one
/// lost to a concurrent write).
const FLUSH_TRIES: usize = 64;

/// What `tsb-meta` holds (module doc; docs/FORMAT.md "TSBw-tree meta").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsbMeta {
    /// At least every timestamp handed out when it was written.
    pub clock: Timestamp,
    /// The retention threshold.
    pub retention: Timestamp,
}

impl TsbMeta {
    fn encode(&self) -> [u8; META_BYTES] {
        let mut out = [0; META_BYTES];
        out[0..8].copy_from_slice(&META_MAGIC);
        out[8..12].copy_from_slice(&META_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.clock.to_le_bytes());
        out[24..32].copy_from_slice(&self.retention.to_le_bytes());
        let crc = crc32c::crc32c(&out[..32]);
        out[32..36].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes `data`, read from `path`; every check names the file and offset.
    fn decode(path: &std::path::Path, data: &[u8]) -> Result<Self> {
        let corrupt = |offset: u64, what: String| Error::Corrupt {
            path: path.to_path_buf(),
            offset,
            what: format!("tsbtree meta file: {what}"),
        };
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        if data.len() != META_BYTES {
            return Err(corrupt(
                0,
                format!("{} bytes, expected {META_BYTES}", data.len()),
            ));
        }
        if data[0..8] != META_MAGIC {
            return Err(corrupt(0, "bad magic".into()));
        }
        let crc = u32::from_le_bytes(data[32..36].try_into().expect("4 bytes"));
        if crc32c::crc32c(&data[..32]) != crc {
            return Err(corrupt(32, "checksum mismatch".into()));
        }
        let version = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
        if version != META_VERSION {
            return Err(Error::InvalidUse(format!(
                "{}: tsbtree meta format version {version}; this build reads {META_VERSION}",
                path.display()
            )));
        }
        if data[12..16] != [0; 4] {
            return Err(corrupt(12, "reserved bytes not zero".into()));
        }
        Ok(Self {
            clock: word(16),
            retention: word(24),
        })
    }

    /// Reads `tsb-meta` from `dir`: `None` if there is none.
    pub fn read(dir: &dyn Dir) -> Result<Option<Self>> {
        if !dir.exists(META_FILE)? {
            return Ok(None);
        }
        let file = dir.open(META_FILE)?;
        let mut data = Vec::new();
        file.read_all(&mut data)?;
        Self::decode(file.path(), &data).map(Some)
    }

    /// Writes `tsb-meta` to `dir` durably: a synced temporary file renamed over it, then the
    /// directory synced.
    pub fn write(&self, dir: &dyn Dir) -> Result<()> {
        if dir.exists(META_TMP)? {
            dir.remove(META_TMP)?;
        }
        let mut file = dir.create(META_TMP)?;
        file.append(&self.encode())?;
        file.sync()?;
        drop(file);
        dir.rename(META_TMP, META_FILE)?;
        dir.sync_dir()
    }
}

/// The checkpoints a tree takes, and where its meta goes.
pub(crate) struct TsbCheckpoints {
    checkpoints: Arc<Checkpoints>,
    dir: Arc<dyn Dir>,
    /// Meta writes one at a time; holds the highest retention threshold written, so that a
    /// checkpoint's write never lowers one a raise wrote before raising it in memory.
    meta: std::sync::Mutex<Timestamp>,
}

fn recovery_error(what: String) -> Error {
    Error::InvalidUse(format!("tsbtree recovery: {what}"))
}

impl TsbTree {
    /// Opens the tree on the LSS in `lss_dir` (created empty if there is none) with its
    /// checkpoints and meta in `checkpoint_dir` (module doc): `config` as the tree had,
    /// `memory_budget_pages` as [`Self::with_lss`]. The tree takes checkpoints there
    /// ([`Self::take_map_checkpoint`]); with none yet, one is taken before this returns.
    /// Also returns what recovery found.
    pub fn open(
        config: TsbConfig,
        lss_dir: Arc<dyn Dir>,
        lss_config: LssConfig,
        checkpoint_dir: Arc<dyn Dir>,
        memory_budget_pages: Option<usize>,
    ) -> Result<(Self, RecoveredMap)> {
        let meta = TsbMeta::read(&*checkpoint_dir)?;
        let (lss, checkpoints, map) =
            open_recovering(lss_dir, lss_config, Arc::clone(&checkpoint_dir))?;
        if map.checkpoint.is_some() && meta.is_none() {
            return Err(Error::Corrupt {
                path: checkpoint_dir.path().join(META_FILE),
                offset: 0,
                what: "tsbtree meta file missing beside a map checkpoint (it is written \
                       before every checkpoint is published)"
                    .into(),
            });
        }
        let mut meta = meta.unwrap_or_default();
        // Images at or above S may hold versions stamped after the meta was written.
        lss.scan(map.scanned_from, |_, header, _| {
            if header.kind == RecordKind::PageImage {
                meta.clock = meta.clock.max(header.lsn_high);
            }
            Ok(())
        })?;
        let tree = Self::open_recovered(config, Arc::new(lss), &map, meta, memory_budget_pages)?;
        tree.use_map_checkpoints(Arc::new(checkpoints), checkpoint_dir)?;
        if map.checkpoint.is_none() {
            // A first checkpoint before any write: a crash later always finds the root in
            // one (without one recovery takes PID 0, which must then have an image).
            tree.flush_resident_pages()?;
            tree.take_map_checkpoint(0)?;
        }
        Ok((tree, map))
    }

    /// The tree `map` describes on `lss` (module doc), its clock at least `meta.clock` and its
    /// retention threshold `meta.retention`. A map with no page gives a fresh tree.
    pub fn open_recovered(
        config: TsbConfig,
        lss: Arc<Lss>,
        map: &RecoveredMap,
        meta: TsbMeta,
        memory_budget_pages: Option<usize>,
    ) -> Result<Self> {
        let mut tree = Self::with_config(config)?;
        if let Some((&pid, deltas)) = map.unit_deltas.iter().next() {
            return Err(recovery_error(format!(
                "a system-transaction unit at {} changes page {pid}; tsbtree writes none",
                deltas[0].unit
            )));
        }
        tree.clock.advance_to(meta.clock);
        tree.retention.store(meta.retention, Ordering::SeqCst);
        if map.pages.is_empty() {
            return tree.with_lss(lss, memory_budget_pages);
        }
        let root = match map.checkpoint {
            Some(_) => map.checkpoint_root(),
            None => Some(0),
        };
        let in_map = |pid: Pid| map.pages.binary_search_by_key(&pid, |p| p.0).is_ok();
        let Some(root) = root.filter(|&r| in_map(r)) else {
            return Err(recovery_error(format!(
                "no root among the {} recovered pages (root {root:?})",
                map.pages.len()
            )));
        };
        tree.table = map.table()?;
        tree.root = AtomicU64::new(root);
        let tree = tree.with_lss(lss, memory_budget_pages)?;
        tree.count_evicted(map.pages.len());
        Ok(tree)
    }

    /// Lets [`Self::take_map_checkpoint`] take checkpoints in `checkpoints`, with the meta
    /// file in `dir` (their directory). Once only; refused without an LSS.
    pub fn use_map_checkpoints(
        &self,
        checkpoints: Arc<Checkpoints>,
        dir: Arc<dyn Dir>,
    ) -> Result<()> {
        let Some(storage) = &self.storage else {
            return Err(Error::InvalidUse(
                "use_map_checkpoints on a tree without an LSS".into(),
            ));
        };
        storage
            .checkpoints
            .set(TsbCheckpoints {
                checkpoints,
                dir,
                meta: std::sync::Mutex::new(0),
            })
            .map_err(|_| Error::InvalidUse("use_map_checkpoints called twice".into()))
    }

    /// Takes a mapping-table checkpoint (module doc); `rssp` is a store's field (0 for a
    /// tree of its own). Refused unless [`Self::use_map_checkpoints`] was called. Fails,
    /// publishing nothing, when the meta cannot be written or a page without an image
    /// cannot be flushed.
    pub fn take_map_checkpoint(&self, rssp: u64) -> Result<CheckpointInfo> {
        let (storage, checkpoints) = self.checkpoints().ok_or_else(|| {
            Error::InvalidUse("take_map_checkpoint before use_map_checkpoints".into())
        })?;
        let root = || {
            // After S: the clock covers every version in a piece below S.
            self.write_meta(checkpoints, self.retention_threshold())?;
            Ok(Some(self.root_pid()))
        };
        checkpoints.checkpoints.take_with_root(
            &self.table,
            &storage.lss,
            rssp,
            root,
            |pid, state| {
                let guard = &crossbeam_epoch::pin();
                match newest_image(node::state_ref(state, guard)) {
                    Some(address) => Ok(Some(address)),
                    None => self.image_now(pid),
                }
            },
        )
    }

    /// Flushes every resident page that has versions or structure no image holds (a clean
    /// close, or a store's checkpoint under its flush limit): pages lost to a concurrent
    /// write are flushed again, up to a bound, then the pass fails. The pieces written;
    /// the caller makes them stable (a checkpoint's walk does).
    pub fn flush_resident_pages(&self) -> Result<usize> {
        if self.storage.is_none() {
            return Err(Error::InvalidUse(
                "flush_resident_pages on a tree without an LSS".into(),
            ));
        }
        let mut flushed = 0;
        for pid in 0..self.table.pid_end() as Pid {
            for attempt in 0.. {
                if !matches!(self.table.read_location(pid), PageLocation::Memory(_)) {
                    break;
                }
                match self.flush_page(pid)? {
                    TsbFlush::Flushed { .. } => flushed += 1,
                    TsbFlush::Lost if attempt < FLUSH_TRIES => continue,
                    TsbFlush::Lost => {
                        return Err(Error::InvalidUse(format!(
                            "tsbtree flush pass: page {pid} lost {FLUSH_TRIES} flushes to writes"
                        )))
                    }
                    TsbFlush::Clean | TsbFlush::Gone => {}
                }
                break;
            }
        }
        Ok(flushed)
    }

    /// The tree's storage and checkpoints, if it uses them.
    fn checkpoints(&self) -> Option<(&crate::storage::Storage, &TsbCheckpoints)> {
        let storage = self.storage.as_ref()?;
        Some((storage, storage.checkpoints.get()?))
    }

    /// Writes the meta with the clock now and `retention`, synced.
    fn write_meta(&self, checkpoints: &TsbCheckpoints, retention: Timestamp) -> Result<()> {
        let mut written = checkpoints.meta.lock().unwrap_or_else(|e| e.into_inner());
        let retention = retention.max(self.retention_threshold()).max(*written);
        TsbMeta {
            clock: self.clock.last(),
            retention,
        }
        .write(&*checkpoints.dir)?;
        *written = retention;
        Ok(())
    }

    /// A raise of the retention threshold to `t` made durable first on a checkpointed tree
    /// (module doc); nothing to do otherwise.
    pub(crate) fn persist_retention(&self, t: Timestamp) -> Result<()> {
        match self.checkpoints() {
            Some((_, checkpoints)) if t > self.retention_threshold() => {
                self.write_meta(checkpoints, t)
            }
            _ => Ok(()),
        }
    }

    /// The address of an image of page `pid` holding its state now, flushed here if its
    /// state has none (a checkpoint's walk met it without a flush delta).
    fn image_now(&self, pid: Pid) -> Result<Option<LssAddress>> {
        for _ in 0..FLUSH_TRIES {
            match self.table.read_location(pid) {
                PageLocation::Stored(bits) => return Ok(LssAddress::from_bits(bits)),
                PageLocation::Memory(_) => {}
                PageLocation::Empty | PageLocation::FreeLink(_) => return Ok(None),
            }
            if let TsbFlush::Flushed { address } = self.flush_page(pid)? {
                return Ok(Some(address));
            }
            // Clean: a flush delta is there now; Lost: written over; Gone: freed. Look again.
            let guard = &crossbeam_epoch::pin();
            if let PageLocation::Memory(ptr) = self.table.read_location(pid) {
                let state = crossbeam_epoch::Shared::from(ptr);
                if let Some(address) = newest_image(node::state_ref(state, guard)) {
                    return Ok(Some(address));
                }
            }
        }
        Err(Error::InvalidUse(format!(
            "tsbtree map checkpoint: page {pid} holds a state no image has and lost \
             {FLUSH_TRIES} flushes to writes; no checkpoint is published"
        )))
    }
}

/// The address of the newest flush delta in the chain from `head` (the page's newest image).
fn newest_image(head: Option<&Node>) -> Option<LssAddress> {
    head?.chain().find_map(|n| match &n.kind {
        Kind::Flush(f) => Some(f.address),
        _ => None,
    })
}
