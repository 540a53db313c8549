//! The persistent mode's file (BzTree §3.1 "Persistence Modes", §6): one file, mapped shared,
//! holding the PMwCAS pool's header, the tree's header and the allocator state (the pool's
//! client words), the descriptor pool, and the node heap (the pool's user area). Volatile mode
//! lays out an anonymous region the same way.
//!
//! Client words (8-byte little-endian, from byte 64; docs/FORMAT.md):
//!
//! | word | what |
//! |---|---|
//! | 0 | root: offset of the root node (a PMwCAS target word, §3.1 "Root pointer") |
//! | 1 | magic `BZTREEPM` |
//! | 2 | format version |
//! | 3 | persist mode of the last open: the first 8 bytes of its name (`clwb`, `msync`, ...) |
//! | 4 | global index epoch (§3.1): 1 at creation, + 1 at every open |
//! | 5 | boot id of the last open (the first 64 bits of the kernel's boot id, 0 if unknown) |
//! | 6 | node size |
//! | 7, 8 | the heap's first and end byte offsets |
//! | 9 | crc32c of words 1, 2, 6, 7, 8 (the fields fixed at creation) |
//! | 10 | store LSN: forest-store's record of the last atomic batch wholly applied (0: none) |
//! | 11 | store pending: the LSN of an atomic batch being applied (0: none) |
//! | 12 | pid of the process that holds the file's lock (for the second opener's error) |
//! | 13..16 | zero |
//! | 16.. | allocator state (`heap.rs`): bump pointer, free-list heads, unactivated lists |
//!
//! Opening checks, in order, and names the first problem found: the pool header (magic,
//! version, checksum, geometry), the tree's magic, version and checksum, the node size against
//! the configuration, the heap bounds; then recovers (§6.3): the allocator first, then the
//! descriptor pool (forest-pmwcas), then the epoch moves on by one so that every reservation of
//! earlier runs is recognised as dangling (no tree walk). The epoch advances at every open, not
//! only after a crash: the file does not record a clean shutdown, and a spare epoch costs
//! nothing (27 bits last 134 M opens; it then wraps to 1).
//!
//! Lock: [`BzTree::open`] takes an exclusive `flock` on the file before mapping it, held
//! until the tree drops (the kernel drops it when the process dies); a second open, in this
//! process or another, fails at once naming the file and the holder's pid (word 12).
//!
//! Creation writes the magic last: a file whose creation was cut short fails to open with
//! "never completed" rather than being taken for a tree.

use std::path::Path;
use std::sync::Arc;

use forest_core::{Error, Result};
use forest_pmwcas::{Geometry, Persist, Pool, PoolConfig, RecoveryReport, Region};

use crate::heap::{AllocatorRecovery, HeapRecycler, NodeHeap, STATE_WORDS};
use crate::metadata::EPOCH_MASK;
use crate::{BzTree, BzTreeConfig, Counters, DESCRIPTOR_PARTITIONS};

/// "BZTREEPM", little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BZTREEPM");
/// Version of the tree's part of the file (2: internal nodes hold a key prefix array,
/// node.rs).
pub const VERSION: u64 = 2;

const W_ROOT: u64 = 0;
const W_MAGIC: u64 = 1;
const W_VERSION: u64 = 2;
const W_PERSIST: u64 = 3;
const W_EPOCH: u64 = 4;
const W_BOOT: u64 = 5;
const W_NODE: u64 = 6;
const W_HEAP_START: u64 = 7;
const W_HEAP_END: u64 = 8;
const W_CRC: u64 = 9;
const W_STORE_LSN: u64 = 10;
const W_STORE_PENDING: u64 = 11;
const W_PID: u64 = 12;
/// Byte offset of the client words in every pool file (forest-pmwcas's fixed header).
const CLIENT_START_BYTES: u64 = 64;
const W_STATE: u64 = 16;
/// Client words of a tree's pool.
pub(crate) const CLIENT_WORDS: usize = W_STATE as usize + STATE_WORDS;

/// What an open found and did (§6.3).
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// Whether the file was created by this open.
    pub created: bool,
    /// Allocator recovery (runs first).
    pub allocator: AllocatorRecovery,
    /// Descriptor pool recovery.
    pub pool: RecoveryReport,
    /// Frees the recoveries skipped as repeats of frees done before the crash (the chunk
    /// free already, or freed by the same descriptor generation and perhaps reused since),
    /// at open; most repeats come later, when what recovery left is finished
    /// ([`BzTree::repeat_frees_skipped`]).
    pub repeat_frees_skipped: u64,
    /// The global index epoch of this run.
    pub index_epoch: u64,
    /// Whether the previous open ran on this boot (a same-boot reopen: the page cache kept
    /// every store, whatever the persist mode).
    pub same_boot: bool,
    /// Wall time of the recovery steps.
    pub recovery_micros: u64,
    /// Where `recovery_micros` (and the mapping before it) went.
    pub phases: OpenPhases,
}

/// Wall time of each step of an open, in nanoseconds (the `recovery_micros` breakdown; the
/// pool's own steps are in [`RecoveryReport`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenPhases {
    /// Locking and mapping the file (before `recovery_micros` starts).
    pub map_nanos: u64,
    /// Reading and checking the pool and tree headers.
    pub headers_nanos: u64,
    /// Allocator recovery (the unactivated lists).
    pub allocator_nanos: u64,
    /// `Pool::open`: the header check, the descriptor recovery, the free lists.
    pub pool_nanos: u64,
    /// The root check and the epoch bump (stamping and persisting the header words).
    pub epoch_nanos: u64,
}

fn nanos_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn corrupt(path: &Path, word: u64, what: String) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset: word,
        what,
    }
}

/// Opens (creating it if missing) and locks the file at `path` (module doc, "Lock").
fn lock_file(path: &Path) -> Result<std::fs::File> {
    let io = |op: &'static str, source: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io("open", e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            use std::os::unix::fs::FileExt;
            let mut pid = [0u8; 8];
            let holder = file
                .read_exact_at(&mut pid, CLIENT_START_BYTES + W_PID * 8)
                .ok()
                .map(|()| u64::from_le_bytes(pid))
                .filter(|&p| p != 0)
                .map_or_else(|| "another opener".to_string(), |p| format!("pid {p}"));
            Err(io(
                "lock",
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!("the BzTree file is already open ({holder} holds its lock)"),
                ),
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(io("lock", e)),
    }
}

/// The first 64 bits of the kernel's boot id, 0 if it cannot be read.
fn boot_id() -> u64 {
    // Read once per process: it cannot change while the process runs, and each read of the
    // proc file cost an open a system call or three (20-50 us of a recovery on a loaded
    // machine, read twice per open before).
    static BOOT_ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BOOT_ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .and_then(|s| {
                let hex: String = s.chars().filter(char::is_ascii_hexdigit).take(16).collect();
                u64::from_str_radix(&hex, 16).ok()
            })
            .unwrap_or(0)
    })
}

/// A tree file's header words as a plain read finds them: no lock, no mapping, no recovery
/// and nothing written (an open stamps this boot's id; a store decides first whether to trust
/// the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPeek {
    /// Whether the tree's magic word is there (a file whose creation completed).
    pub magic: bool,
    /// The persist mode of the last open (`clwb`, `msync`, ...; empty if unset).
    pub persist: String,
    /// Whether the last open ran on this boot (boot id word nonzero and the kernel's).
    pub same_boot: bool,
    /// Word 10, `store LSN`.
    pub store_lsn: u64,
    /// Word 11, `store pending`.
    pub store_pending: u64,
}

/// Reads the header words of the tree file at `path` (module doc) without opening it as a
/// tree; `None` if the file does not exist. A file too short for them reads as no magic.
pub fn peek_header(path: &Path) -> Result<Option<HeaderPeek>> {
    use std::io::Read;
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                op: "open",
                source,
            })
        }
    };
    let mut bytes = vec![0u8; (CLIENT_START_BYTES + 8 * W_PID) as usize];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    op: "read",
                    source,
                })
            }
        }
    }
    if filled < bytes.len() {
        bytes.fill(0);
    }
    let word = |w: u64| {
        let at = (CLIENT_START_BYTES + 8 * w) as usize;
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let persist = word(W_PERSIST)
        .to_le_bytes()
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    Ok(Some(HeaderPeek {
        magic: word(W_MAGIC) == MAGIC,
        persist,
        same_boot: word(W_BOOT) != 0 && word(W_BOOT) == boot_id(),
        store_lsn: word(W_STORE_LSN),
        store_pending: word(W_STORE_PENDING),
    }))
}

fn name_word(name: &str) -> u64 {
    let mut bytes = [0u8; 8];
    for (b, c) in bytes.iter_mut().zip(name.bytes()) {
        *b = c;
    }
    u64::from_le_bytes(bytes)
}

fn fixed_crc(words: [u64; 5]) -> u64 {
    let mut bytes = [0u8; 40];
    for (chunk, w) in bytes.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    u64::from(crc32c::crc32c(&bytes))
}

/// The pool configuration of a new tree.
pub(crate) fn pool_config(config: &BzTreeConfig) -> PoolConfig {
    PoolConfig {
        user_words: config.heap_bytes / 8,
        partition_count: DESCRIPTOR_PARTITIONS,
        descriptors_per_partition: config.descriptor_count / DESCRIPTOR_PARTITIONS,
        client_words: CLIENT_WORDS,
        recyclers: Vec::new(),
    }
}

fn pool_error(e: forest_pmwcas::Error) -> Error {
    Error::Config(format!("bztree: PMwCAS pool: {e}"))
}

/// Reads client word `w` of a region before its pool is open.
fn client(region: &Region, geometry: &Geometry, w: u64) -> u64 {
    region
        .load_for_flush(geometry.client_start_bytes() + w * 8)
        .unwrap_or(0)
}

impl<P: Persist> BzTree<P> {
    /// Bytes of the region (file) a new tree with `config` needs.
    pub fn region_bytes(config: &BzTreeConfig) -> Result<usize> {
        config.check()?;
        pool_config(config).region_bytes().map_err(pool_error)
    }

    /// Opens the tree in the file at `path`, creating it (with `config`) if it is missing or
    /// empty; an existing file is checked and recovered (module doc). The node size must
    /// match the file's; heap and descriptor pool sizes are the file's.
    pub fn open(path: &Path, config: BzTreeConfig, persist: P) -> Result<Self> {
        let bytes = Self::region_bytes(&config)?;
        let mapping = std::time::Instant::now();
        let lock = lock_file(path)?;
        let exists = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let region = Region::map_file(path, bytes).map_err(|e| match e {
            forest_pmwcas::Error::Io(what) => Error::Io {
                path: path.to_path_buf(),
                op: "map",
                source: std::io::Error::other(what),
            },
            other => corrupt(path, 0, other.to_string()),
        })?;
        let map_nanos = nanos_since(mapping);
        let mut tree = if exists {
            let mut tree = Self::open_in(region, config, persist, path)?;
            tree.open_report.phases.map_nanos = map_nanos;
            tree
        } else {
            Self::create_in(region, config, persist)?
        };
        debug_assert_eq!(tree.pool.client_header().start, CLIENT_START_BYTES);
        tree.set_client(W_PID, u64::from(std::process::id()));
        tree.file_lock = Some(lock);
        Ok(tree)
    }

    /// Sets client word `w` and persists it.
    fn set_client(&self, w: u64, value: u64) {
        let off = self.pool.client_header().start + w * 8;
        self.heap
            .atomic_client(off)
            .store(value, std::sync::atomic::Ordering::Release);
        self.persist_bytes(off, 8);
    }

    fn get_client(&self, w: u64) -> u64 {
        let off = self.pool.client_header().start + w * 8;
        self.heap
            .atomic_client(off)
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The store LSN (header word 10): forest-store records here, once an atomic batch is
    /// wholly applied, its last LSN, so that a reopen redoes only later batches.
    pub fn store_lsn(&self) -> u64 {
        self.get_client(W_STORE_LSN)
    }

    /// Records and persists the store LSN (see [`Self::store_lsn`]).
    pub fn set_store_lsn(&self, lsn: u64) {
        self.set_client(W_STORE_LSN, lsn);
    }

    /// The LSN of the atomic batch forest-store was applying (header word 11; 0: none): a
    /// nonzero value at open means the tree may hold part of that batch.
    pub fn store_pending(&self) -> u64 {
        self.get_client(W_STORE_PENDING)
    }

    /// Records and persists the batch being applied (see [`Self::store_pending`]).
    pub fn set_store_pending(&self, lsn: u64) {
        self.set_client(W_STORE_PENDING, lsn);
    }

    /// A new tree in `region` (zeroed, at least [`BzTree::region_bytes`]).
    pub fn create_in(region: Region, config: BzTreeConfig, persist: P) -> Result<Self> {
        config.check()?;
        let mut pool_config = pool_config(&config);
        let geometry = pool_config.geometry().map_err(pool_error)?;
        let (start, end) = (geometry.user_start_bytes(), region.len_bytes() as u64);
        let heap = Self::heap_for(&region, &geometry, start, end);
        pool_config.recyclers = vec![Arc::new(HeapRecycler(Arc::clone(&heap)))];
        let pool = Pool::create(region, persist, pool_config).map_err(pool_error)?;
        let flush = |r: std::ops::Range<usize>| pool.persist_range(r);
        heap.format(&flush);
        let base = geometry.client_start_bytes();
        let mut tree = Self {
            pool,
            heap,
            root_off: base + W_ROOT * 8,
            config,
            index_epoch: 1,
            counters: Counters::default(),
            file_lock: None,
            open_report: OpenReport {
                created: true,
                index_epoch: 1,
                ..OpenReport::default()
            },
        };
        let leaf = tree
            .build_leaf(&[], 0)
            .ok_or_else(|| Error::Config("bztree: node heap too small for a leaf".into()))?;
        tree.heap.word(tree.root_off).init(leaf);
        tree.persist_bytes(tree.root_off, 8);
        tree.heap.activated(leaf, &|r| tree.pool.persist_range(r));
        let fixed = [MAGIC, VERSION, tree.config.node_size as u64, start, end];
        let set = |w: u64, v: u64| {
            tree.heap
                .atomic_client(base + w * 8)
                .store(v, std::sync::atomic::Ordering::Relaxed)
        };
        set(W_VERSION, VERSION);
        set(W_NODE, fixed[2]);
        set(W_HEAP_START, start);
        set(W_HEAP_END, end);
        set(W_CRC, fixed_crc(fixed));
        tree.stamp_open(1);
        tree.persist_bytes(base, W_STATE * 8);
        set(W_MAGIC, MAGIC);
        tree.persist_bytes(base + W_MAGIC * 8, 8);
        tree.open_report.same_boot = true;
        Ok(tree)
    }

    /// Records this run's epoch, boot id and persist mode (persisted by the caller).
    fn stamp_open(&self, epoch: u64) {
        let base = self.pool.client_header().start;
        let set = |w: u64, v: u64| {
            self.heap
                .atomic_client(base + w * 8)
                .store(v, std::sync::atomic::Ordering::Relaxed)
        };
        set(W_EPOCH, epoch);
        set(W_BOOT, boot_id());
        set(W_PERSIST, name_word(self.pool.persist().name()));
    }

    fn heap_for(region: &Region, geometry: &Geometry, start: u64, end: u64) -> Arc<NodeHeap> {
        let state = geometry.client_start_bytes() + W_STATE * 8;
        // SAFETY: the region outlives the heap: the tree owns the pool, which owns the region
        // (its mapping never moves) and runs no release once dropped (heap.rs module doc).
        Arc::new(unsafe { NodeHeap::new(region.base_ptr(), start, end, state) })
    }

    /// Opens the tree in `region` (a mapped file, or a crash image): checks and recovers it
    /// (module doc). `path` names it in errors.
    pub fn open_in(region: Region, config: BzTreeConfig, persist: P, path: &Path) -> Result<Self> {
        config.check()?;
        let started = std::time::Instant::now();
        let geometry =
            Pool::<P>::read_geometry(&region).map_err(|e| corrupt(path, 0, e.to_string()))?;
        if geometry.client_words != CLIENT_WORDS {
            return Err(corrupt(
                path,
                40,
                format!(
                    "pool has {} client words, a BzTree file has {CLIENT_WORDS} (not a bztree-pm file?)",
                    geometry.client_words
                ),
            ));
        }
        let base = geometry.client_start_bytes();
        let word = |w: u64| client(&region, &geometry, w);
        let at = |w: u64| base + w * 8;
        if word(W_MAGIC) != MAGIC {
            return Err(corrupt(
                path,
                at(W_MAGIC),
                if word(W_MAGIC) == 0 {
                    "the tree header has no magic: its creation never completed".into()
                } else {
                    format!(
                        "bad tree magic {:#018x} (not a bztree-pm file)",
                        word(W_MAGIC)
                    )
                },
            ));
        }
        if word(W_VERSION) != VERSION {
            return Err(corrupt(
                path,
                at(W_VERSION),
                if word(W_VERSION) == 1 {
                    // Review rev-bz4 F1/F3: say what changed and what to do.
                    format!(
                        "tree format version 1, this build reads {VERSION} (version 2, session \
                         19, gave internal nodes a key prefix array); a clwb store rebuilds its \
                         tree from its checkpoint and logs, an msync store's tree file is its \
                         only copy: open it with a build from before session 19 and copy its \
                         records out (this build has no converter)"
                    )
                } else {
                    format!(
                        "tree format version {}, this build reads {VERSION}",
                        word(W_VERSION)
                    )
                },
            ));
        }
        let fixed = [
            MAGIC,
            VERSION,
            word(W_NODE),
            word(W_HEAP_START),
            word(W_HEAP_END),
        ];
        if fixed_crc(fixed) != word(W_CRC) {
            return Err(corrupt(
                path,
                at(W_CRC),
                "tree header checksum mismatch".into(),
            ));
        }
        if word(W_NODE) != config.node_size as u64 {
            return Err(corrupt(
                path,
                at(W_NODE),
                format!(
                    "the file's nodes are {} bytes, the configuration asks for {}",
                    word(W_NODE),
                    config.node_size
                ),
            ));
        }
        let (start, end) = (word(W_HEAP_START), word(W_HEAP_END));
        if start != geometry.user_start_bytes() || end != region.len_bytes() as u64 {
            return Err(corrupt(
                path,
                at(W_HEAP_START),
                format!(
                    "heap {start}..{end} does not match the pool's user area {}..{}",
                    geometry.user_start_bytes(),
                    region.len_bytes()
                ),
            ));
        }
        let same_boot = word(W_BOOT) != 0 && word(W_BOOT) == boot_id();
        let epoch = word(W_EPOCH);
        let mut phases = OpenPhases {
            headers_nanos: nanos_since(started),
            ..OpenPhases::default()
        };
        let step = std::time::Instant::now();
        let heap = Self::heap_for(&region, &geometry, start, end);
        let allocator = {
            let flush = |r: std::ops::Range<usize>| {
                if P::DURABLE {
                    persist.flush(&region, r);
                    persist.fence();
                }
            };
            heap.recover(&flush)
                .map_err(|what| corrupt(path, at(W_STATE), what))?
        };
        phases.allocator_nanos = nanos_since(step);
        let step = std::time::Instant::now();
        let pool_config = PoolConfig {
            partition_count: geometry.partition_count,
            descriptors_per_partition: geometry.descriptor_count / geometry.partition_count,
            client_words: CLIENT_WORDS,
            user_words: 0,
            recyclers: vec![Arc::new(HeapRecycler(Arc::clone(&heap)))],
        };
        let (pool, report) = Pool::open(region, persist, pool_config)
            .map_err(|e| corrupt(path, 0, e.to_string()))?;
        phases.pool_nanos = nanos_since(step);
        let step = std::time::Instant::now();
        let index_epoch = epoch % EPOCH_MASK + 1;
        let descriptor_count = geometry.descriptor_count;
        let mut tree = Self {
            pool,
            heap,
            root_off: at(W_ROOT),
            config: BzTreeConfig {
                heap_bytes: (end - start) as usize,
                descriptor_count,
                ..config
            },
            index_epoch,
            counters: Counters::default(),
            file_lock: None,
            open_report: OpenReport::default(),
        };
        let root = tree.root(&tree.pool.pin());
        if root < start || root >= end || !root.is_multiple_of(8) {
            return Err(corrupt(
                path,
                at(W_ROOT),
                format!("root {root} is outside the heap"),
            ));
        }
        tree.stamp_open(index_epoch);
        tree.persist_bytes(base, W_STATE * 8);
        phases.epoch_nanos = nanos_since(step);
        tree.open_report = OpenReport {
            created: false,
            allocator,
            pool: report,
            repeat_frees_skipped: tree.heap.repeats_skipped(),
            index_epoch,
            same_boot,
            recovery_micros: started.elapsed().as_micros() as u64,
            phases,
        };
        Ok(tree)
    }

    /// What the open that made this tree found and did.
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }

    /// Finishes now the decided descriptors the open's recovery left for after it
    /// (forest-pmwcas `recovery.rs`: their words, their policies' frees); otherwise the first
    /// write does it. Returns what it did.
    pub fn finish_recovery(&self) -> RecoveryReport {
        self.pool.finish_recovery()
    }

    /// Frees skipped as repeats of frees done before a crash since this tree was opened:
    /// [`OpenReport::repeat_frees_skipped`] plus those of finishing what recovery left.
    pub fn repeat_frees_skipped(&self) -> u64 {
        self.heap.repeats_skipped()
    }

    /// What a SIGKILL now would leave in the tree's file: every word as this process last
    /// stored it, flushed or not (the page cache keeps a shared mapping's stores).
    pub fn kill_image(&self) -> Vec<u64> {
        self.pool.region().snapshot()
    }
}

impl BzTree<forest_pmwcas::Sim> {
    /// What a power loss now could leave (forest-pmwcas `Sim::crash_image`): every flushed
    /// line, and each word stored since its line's last flush old or new at random.
    pub fn crash_image(&self, seed: u64) -> Vec<u64> {
        self.pool.persist().crash_image(self.pool.region(), seed)
    }
}
