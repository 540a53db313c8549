//! forest-bztree: the BzTree, a latch-free B+tree whose every multi-word change is one PMwCAS
//! (Arulraj, Levandoski, Minhas, Larson, "BzTree: A High-Performance Latch-free Range Index
//! for Non-Volatile Memory", VLDB 2018), on `forest-pmwcas`, in both modes of §3.1: volatile
//! (engine `bztree`: the pool's region is an anonymous mapping and nothing is flushed) and
//! persistent (engine `bztree-pm`: the region maps a file). Words hold region offsets in both.
//! The reference implementation sfu-dis/bztree was read for orientation; nothing is copied.
//!
//! | module | paper | what |
//! |---|---|---|
//! | [`status_word`] | Fig. 2c | leaf and internal status words, const-asserted |
//! | [`metadata`] | Fig. 2b, §4.2.1 | record metadata entries, allocation epochs |
//! | `node` | §4.1, Fig. 2a | header, metadata array, record block; building nodes |
//! | `audit` | issue 16 | full check of a quiescent tree and heap (tests after a crash) |
//! | `file` | §3.1, §6.3 | the file: header, layout, open and create, recovery order |
//! | `heap` | §3.1, §6.1, §6.3 | the node heap and its persistent three-stage allocator; the `FREE-ONE` recycler |
//! | `leaf` | §4.2 | insert (reserve, copy, complete; uniqueness), delete, update, upsert, read |
//! | `internal` | §4.4, §5.1 | descent with a path stack; in-place child swaps |
//! | `consolidate` | §4.3, §5.4 | freeze, live records, consolidation, helping a frozen leaf |
//! | `split` | §5.2, Fig. 3 | leaf split, parent overflow, root split |
//! | `merge` | §5.3 | leaf merge with a sibling, internal merges, root collapse |
//! | `scan` | §4.2.6 | range scans by leaf snapshot, both orders |
//!
//! PMwCAS sizes (Table 1; `stats()` reports attempts and failures by size): insert 2 + 2
//! (reserve, complete); delete 2; update by record pointer 3; consolidation 1 (freeze) + 2;
//! split 1 + 3; merge 2 + 3. Where this crate differs, and why:
//! - An update or upsert of an existing key with an inline value appends a version and
//!   completes with 3 words (its metadata visible, the old version's metadata invisible, the
//!   status with the old size added to the delete size), not 2: with two words the old version
//!   stays visible and a later 2-word delete would bring it back. So a leaf never holds two
//!   visible versions of a key, and a read that finds none while the delete size moved
//!   (a version swap ran under it) reads again.
//!   Session 18 built the paper's 2 + 2 and measured it (commit 602cc0a, reverted; BENCHMARKS
//!   "Issue 16: ... the paper's 2 + 2 upsert"): the completion made ours visible and added
//!   the old version's bytes to the delete size, so every change to a key's versions but an
//!   insert's first moved it; versions became visible in entry order (a completion meeting a
//!   later visible version abandoned its own); reads took the newest, the unsorted region
//!   newest first once the delete size was non-zero; a delete hid every visible version;
//!   scans and consolidation kept the newest. It saved one word per upsert (-335
//!   instructions of PMwCAS) but cost more in the leaf search, which must now pass the whole
//!   unsorted region before the sorted one, and in consolidation's dedup: +2.1 % instructions
//!   on balanced, +1.5 % on read-only. So the 3-word completion stays.
//! - A record whose value is behind a record pointer completes with one more word: its pointer
//!   word, linked from 0 to the value block by a `FREE-ONE` entry (the "reference" a chunk is
//!   activated into, §6.1), so a failed completion frees the block and a crash before it
//!   leaves no block behind a dangling reservation. Memory-only entries (new and retired
//!   nodes, §6.3) are not counted in the sizes.
//! - A delete, or a completion that hides an old version, of a record-pointer record also
//!   names the record's pointer word, expected and new both the block it read, and retires
//!   that block as a memory-only entry (delete 3 words, completion 4 or 5). §4.2.3's in-place
//!   swap changes only the pointer word; without it as a target, a swap landing between the
//!   read and the PMwCAS left the PMwCAS free to succeed: the old block freed twice (the
//!   swap's `FREE-ONE` and the retirement) and the swap's block leaked (issue 16, pause-point
//!   scenarios `delete_meets_a_pointer_swap`, `completion_meets_a_pointer_swap`). So a block
//!   is retired only by the PMwCAS that removes it from the pointer word it read, once. The
//!   word keeps the block (not 0): a reader that saw the version visible may still follow the
//!   pointer, to a block the epoch holds; consolidation copies only visible records, so the
//!   stale pointer of an invisible one is never followed again. Recovery (§6.3) is as for
//!   any memory-only entry: freed only if the descriptor rolls forward, once.
//! - A root split installs with 1 word (the root word) and a consolidation of the root leaf
//!   too; a split whose parent overflows freezes every replaced ancestor in the same PMwCAS
//!   (§7.2's split "up to the great-grandparent"): 2 + the number of replaced internal nodes.
//! - A merge whose parent becomes underfull merges the parent with a sibling in the same
//!   PMwCAS, up the tree; a root left with one child is replaced by that child (collapse).
//! - Internal nodes (§4.1 gives them the leaves' layout) also hold an array of 8-byte key
//!   prefixes after their metadata, written once at build (`node` module doc): the descent
//!   binary-searches integers in one array and reads a key only on a prefix tie. Session 19
//!   (BENCHMARKS "Issue 16: the descent's cost"). Not counted in the split and merge sizes.
//! - The volatile tree's node heap asks for transparent huge pages (`madvise`): a descent
//!   lands on a random node per level, and at a million keys the nodes span more 4 KiB pages
//!   than the TLB maps. Files (`bztree-pm`) keep the page cache's pages.
//!
//! Thresholds (`BzTreeConfig`): a leaf is consolidated when a write finds no room or its
//! delete size passes `delete_size_max`; it splits instead when its live bytes plus the write
//! would pass `max_size`; a delete that leaves it below `min_size` merges it (§5.1). A rebuilt
//! leaf gets its live records, the pending write and `free_space` more bytes, within
//! `node_size` (§4.3 "along with some free space"; §7.7 Fig. 8b varies it); by default every
//! leaf is a whole node.
//!
//! Pause points (feature `pause-points`, forest-core `pause`), no latch held at any:
//! - `insert:reserved`: a record's space is reserved (2-word PMwCAS done), its bytes not yet
//!   visible. Other inserts of the same key wait for it (bounded), then freeze the leaf.
//! - `consolidate:prepared`: the leaf is frozen and N′ built; not installed.
//! - `split:prepared`: N frozen, N′, O and P′ built; the 3-word install not yet run.
//! - `merge:prepared`: L and N frozen, L′ and P′ built; not installed.
//! - `consolidate:live-read`: a thread reading a leaf's live records (to consolidate a frozen
//!   leaf, or to size an unfrozen one for a merge) has read a visible entry.
//! - `delete:pointer-read`, `complete:pointer-read`: a delete, or a completion hiding an old
//!   version, has read a record-pointer version's block and not yet run its PMwCAS; a swap
//!   of that pointer meanwhile makes the PMwCAS fail, and it retries with the new block.
//!   Threads meeting a frozen leaf run their own consolidation or split and race to install
//!   (§4.3, §5.4); the paused thread's install then fails and it retries.
//!
//! Persistent mode (`bztree-pm`, §3.1, §6): [`BzTree::open`] maps one file (`file`: header,
//! descriptor pool, allocator, node heap) and recovers it; `heap` is the allocate → activate →
//! free allocator of §6.1, whose activation goes through descriptor slots (§6.3); record bytes
//! and new nodes are flushed before the PMwCAS that makes them visible (§6.2). The same code
//! runs in volatile mode with the `none` persister.
//!
//! `unsafe` lives in `heap` and in `file`'s construction of the heap over the region.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod audit;
mod consolidate;
mod file;
mod heap;
mod internal;
mod leaf;
mod merge;
pub mod metadata;
mod node;
mod scan;
mod split;
pub mod status_word;

use std::ops::Bound;
use std::sync::Arc;

use forest_core::stats::names;
use forest_core::{Counter, Error, Index, IndexStats, Order, Result, Visitor};
use forest_pmwcas::{Guard, NoPersist, Persist, Policy, Pool, Region, ENTRIES_MAX};

pub use crate::audit::Audit;
pub use crate::file::{peek_header, HeaderPeek, OpenPhases, OpenReport};
pub use crate::heap::AllocatorRecovery;
use crate::heap::NodeHeap;

/// Configuration of a BzTree (§5.1, §7.1, §7.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BzTreeConfig {
    /// Bytes of a node (§7.1: 1 KB). Nodes holding records larger than this are larger.
    pub node_size: usize,
    /// Live bytes (header, metadata, records) above which a consolidation splits (§5.1).
    pub max_size: usize,
    /// Live bytes below which a delete merges the leaf with a sibling (§5.1).
    pub min_size: usize,
    /// Delete size above which a write consolidates the leaf first (§4.3).
    pub delete_size_max: usize,
    /// Free space a leaf built by a consolidation, split or merge gets beyond its records and
    /// the pending write (§4.3 "along with some free space", §7.7 Fig. 8b), capped so that the
    /// leaf stays within `node_size`. At `node_size` (the default) every leaf is a full node.
    /// Smaller leaves hold a shorter unsorted region (fewer key compares per search) and take
    /// less memory, and are consolidated more often.
    pub free_space: usize,
    /// Longest value stored inline; longer ones go to a value block behind a record pointer
    /// (§4.2.3).
    pub inline_value_max: usize,
    /// Bytes of the node heap (virtual: an anonymous mapping costs only what is touched).
    pub heap_bytes: usize,
    /// PMwCAS descriptors in the pool (a multiple of 64, its partitions). A thread stalled
    /// while pinned holds back every descriptor retired meanwhile, so the pool must outlast a
    /// time slice of the other threads (§2.3 "pooled and eventually reused").
    pub descriptor_count: usize,
}

/// Partitions of the descriptor pool (forest-pmwcas's default).
pub(crate) const DESCRIPTOR_PARTITIONS: usize = 64;

/// Smallest node size accepted.
pub const NODE_SIZE_MIN: usize = 256;
/// Largest node size accepted (the offset field's reach).
pub const NODE_SIZE_MAX: usize = 1 << 20;

impl BzTreeConfig {
    /// The thresholds derived from `node_size`: split above 3/4, merge below 1/4, consolidate
    /// when a quarter is deleted, values inline up to a quarter.
    pub fn with_node_size(node_size: usize) -> Self {
        Self {
            node_size,
            max_size: node_size / 4 * 3,
            min_size: node_size / 4,
            delete_size_max: node_size / 4,
            free_space: node_size,
            inline_value_max: node_size / 4,
            heap_bytes: 8 << 30,
            descriptor_count: 32 * 1024,
        }
    }

    /// Checks the values against each other.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Config(format!("bztree: {what}")));
        if !(NODE_SIZE_MIN..=NODE_SIZE_MAX).contains(&self.node_size)
            || !self.node_size.is_multiple_of(8)
        {
            return bad(format!(
                "node_size {} is not a multiple of 8 in {NODE_SIZE_MIN}..={NODE_SIZE_MAX}",
                self.node_size
            ));
        }
        if self.max_size > self.node_size || self.max_size < self.node_size / 2 {
            return bad(format!(
                "max_size {} is not in node_size/2..=node_size ({})",
                self.max_size, self.node_size
            ));
        }
        if self.min_size * 2 > self.max_size {
            return bad(format!(
                "min_size {} is more than half of max_size {} (merges would split again)",
                self.min_size, self.max_size
            ));
        }
        if self.free_space < 64 || !self.free_space.is_multiple_of(8) {
            return bad(format!(
                "free_space {} is not a multiple of 8 of at least 64",
                self.free_space
            ));
        }
        if self.inline_value_max > self.node_size / 2 {
            return bad(format!(
                "inline_value_max {} is more than half of node_size {}",
                self.inline_value_max, self.node_size
            ));
        }
        if self.descriptor_count == 0
            || !self.descriptor_count.is_multiple_of(DESCRIPTOR_PARTITIONS)
            || self.descriptor_count > forest_pmwcas::word::DESCRIPTORS_MAX
        {
            return bad(format!(
                "descriptor_count {} is not a multiple of {DESCRIPTOR_PARTITIONS} in 64..={}",
                self.descriptor_count,
                forest_pmwcas::word::DESCRIPTORS_MAX
            ));
        }
        if self.heap_bytes < 1 << 20 {
            return bad(format!("heap_bytes {} is below 1 MiB", self.heap_bytes));
        }
        Ok(())
    }
}

impl Default for BzTreeConfig {
    fn default() -> Self {
        Self::with_node_size(1024)
    }
}

/// Event counters (issue 16 `stats()`), beside the pool's PMwCAS counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub consolidations: Counter,
    pub splits: Counter,
    pub merges: Counter,
    pub smo_failures: Counter,
    pub frozen_retries: Counter,
    pub restarts: Counter,
    pub recheck_waits: Counter,
    pub recheck_timeouts: Counter,
    pub read_retries: Counter,
}

/// Most levels a descent records.
pub(crate) const PATH_MAX: usize = 32;

/// Internal nodes met by a descent, root first, with the child slot taken in each.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub nodes: [(u64, u64); PATH_MAX],
    pub len: usize,
    pub leaf: u64,
}

impl Path {
    pub fn parent(&self) -> Option<(u64, u64)> {
        self.len.checked_sub(1).map(|i| self.nodes[i])
    }
}

/// One word of a PMwCAS the tree issues.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub off: u64,
    pub old: u64,
    pub new: u64,
    /// `FREE-ONE`: the old value is memory freed on success, the new one on failure.
    pub free_one: bool,
}

impl Target {
    pub fn new(off: u64, old: u64, new: u64) -> Self {
        Self {
            off,
            old,
            new,
            free_one: false,
        }
    }
}

/// Bit `i` of a [`Folds`] mask (none past 64: a PMwCAS holds far fewer entries).
#[inline]
pub(crate) fn bit(i: usize) -> u64 {
    1u64.checked_shl(i as u32).unwrap_or(0)
}

/// Which targets of a PMwCAS fold a retired node and a new node into their one `FREE-ONE`
/// entry (the target's old value retired, its new value fresh), and so which retired and new
/// nodes are left for memory-only entries (`BzTree::pmwcas_with`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Folds {
    pub targets: u64,
    pub retire: u64,
    pub fresh: u64,
}

impl Folds {
    pub fn of(targets: &[Target], retire: &[u64], fresh: &[u64]) -> Self {
        let mut f = Self::default();
        if retire.is_empty() || fresh.is_empty() {
            return f;
        }
        for (i, t) in targets.iter().enumerate() {
            let r = retire.iter().position(|&m| m == t.old && m != 0);
            let n = fresh.iter().position(|&m| m == t.new && m != 0);
            if let (Some(r), Some(n)) = (r, n) {
                if f.retire & bit(r) == 0 && f.fresh & bit(n) == 0 {
                    f.retire |= bit(r);
                    f.fresh |= bit(n);
                    f.targets |= bit(i);
                }
            }
        }
        f
    }

    /// Descriptor entries of a PMwCAS over `targets` naming `retire` and `fresh`: one per
    /// target, then the unfolded retired and new nodes in pairs.
    pub fn entries(targets: &[Target], retire: &[u64], fresh: &[u64]) -> usize {
        let f = Self::of(targets, retire, fresh);
        let retired = retire.len() - f.retire.count_ones() as usize;
        let new = fresh.len() - f.fresh.count_ones() as usize;
        targets.len() + retired.max(new)
    }
}

/// How a PMwCAS ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Succeeded,
    Failed,
    /// No descriptor within the bounded wait: unpin and retry the operation.
    PoolExhausted,
}

/// The BzTree over a PMwCAS pool with persister `P`: volatile ([`NoPersist`], an anonymous
/// region, [`BzTree::create`]) or persistent (a mapped file, [`BzTree::open`], §6). One code
/// path: the persistent mode adds only what `P` flushes.
pub struct BzTree<P: Persist = NoPersist> {
    pub(crate) pool: Pool<P>,
    pub(crate) heap: Arc<NodeHeap>,
    pub(crate) root_off: u64,
    pub(crate) config: BzTreeConfig,
    /// The global index epoch (§3.1): 1 in volatile mode, the file's + 1 at every open.
    pub(crate) index_epoch: u64,
    pub(crate) counters: Counters,
    pub(crate) open_report: OpenReport,
    /// The file's exclusive lock (`file` module doc), held while the tree lives; None for
    /// anonymous regions and crash images.
    pub(crate) file_lock: Option<std::fs::File>,
}

impl<P: Persist> std::fmt::Debug for BzTree<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BzTree")
            .field("config", &self.config)
            .field("heap", &self.heap)
            .finish_non_exhaustive()
    }
}

impl BzTree<NoPersist> {
    /// An empty volatile tree with the default configuration.
    pub fn new() -> Self {
        Self::with_config(BzTreeConfig::default()).expect("the default configuration is valid")
    }

    /// An empty volatile tree.
    pub fn with_config(config: BzTreeConfig) -> Result<Self> {
        Self::create(config, NoPersist)
    }
}

impl Default for BzTree<NoPersist> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Persist> BzTree<P> {
    /// An empty tree whose pool and heap live in a new anonymous region.
    pub fn create(config: BzTreeConfig, persist: P) -> Result<Self> {
        let region = Region::heap(Self::region_bytes(&config)?);
        // Huge pages for the node heap only: a descent touches a node per level at random.
        let heap_start = file::pool_config(&config)
            .geometry()
            .map_or(0, |g| g.user_start_bytes() as usize);
        region.advise_huge_pages(heap_start..region.len_bytes());
        Self::create_in(region, config, persist)
    }

    /// Bytes of the node heap in use (chunk sizes), without the tree walk of `stats()`.
    pub fn memory_in_use(&self) -> u64 {
        self.heap.bytes_in_use()
    }

    /// The configuration.
    pub fn config(&self) -> &BzTreeConfig {
        &self.config
    }

    pub(crate) fn root(&self, guard: &Guard) -> u64 {
        self.pool.read(self.heap.word(self.root_off), guard)
    }

    pub(crate) fn heap_full(&self) -> Error {
        Error::Config(format!(
            "bztree: node heap of {} bytes is full (raise heap_bytes)",
            self.heap.capacity()
        ))
    }

    /// §6.2 flush-before-visible and the allocator's persistence: flushes and fences bytes
    /// of the region (nothing in volatile mode).
    pub(crate) fn flush(&self, range: std::ops::Range<usize>) {
        self.pool.persist_range(range);
    }

    /// Runs one PMwCAS over `targets`, with `retire` (nodes or value blocks) freed after the
    /// epoch if it succeeds (`FREE-ONE` memory entries, §6.3).
    pub(crate) fn pmwcas(&self, guard: &Guard, targets: &[Target], retire: &[u64]) -> Outcome {
        self.pmwcas_with(guard, targets, retire, &[])
    }

    /// Runs one PMwCAS over `targets` that also names every chunk it retires (`retire`:
    /// freed after the epoch if it succeeds) and every new chunk it links (`fresh`: freed if
    /// it fails), §6.1/§6.3: a target whose old value is retired and new value fresh is one
    /// `FREE-ONE` entry (`ReserveEntry`), the others are memory-only entries. Each new chunk,
    /// and the new value of every `free_one` target, is activated: its offset persisted in
    /// the descriptor slot, then dropped from the allocator's unactivated list. So unless the
    /// outcome is `PoolExhausted` (nothing named), the descriptor owns `fresh`: the caller
    /// must not free them.
    pub(crate) fn pmwcas_with(
        &self,
        guard: &Guard,
        targets: &[Target],
        retire: &[u64],
        fresh: &[u64],
    ) -> Outcome {
        let mut d = match self.pool.allocate_descriptor(guard) {
            Ok(d) => d,
            Err(forest_pmwcas::Error::PoolExhausted { .. }) => return Outcome::PoolExhausted,
            Err(e) => panic!("bztree: allocating a descriptor: {e}"),
        };
        let flush = |r: std::ops::Range<usize>| self.flush(r);
        let folds = Folds::of(targets, retire, fresh);
        let built = (|| -> std::result::Result<(), forest_pmwcas::Error> {
            for (i, t) in targets.iter().enumerate() {
                let word = self.heap.word(t.off);
                if t.free_one || folds.targets & bit(i) != 0 {
                    let slot = d.reserve_entry(word, t.old, Policy::FreeOne)?;
                    d.set_new(slot, t.new)?;
                    if t.new != 0 {
                        self.heap.activated(t.new, &flush);
                    }
                } else {
                    d.add_word(word, t.old, t.new)?;
                }
            }
            // The other retired and new nodes in pairs, one memory-only entry each (freed on
            // success and on failure respectively): fewer entries leave room for a split
            // that reaches the root (`split.rs`).
            let mut retired = (0..retire.len())
                .filter(|&i| folds.retire & bit(i) == 0)
                .map(|i| retire[i]);
            let mut new = (0..fresh.len())
                .filter(|&i| folds.fresh & bit(i) == 0)
                .map(|i| fresh[i]);
            loop {
                match (retired.next(), new.next()) {
                    (None, None) => break,
                    (Some(r), None) => d.add_memory(r, 0)?,
                    (r, Some(m)) => {
                        let slot = match r {
                            Some(r) => d.reserve_memory_retiring(r)?,
                            None => d.reserve_memory()?,
                        };
                        d.set_new(slot, m)?;
                        self.heap.activated(m, &flush);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = built {
            panic!(
                "bztree: building a PMwCAS of {} words, {} retired, {} new: {e}",
                targets.len(),
                retire.len(),
                fresh.len()
            );
        }
        match d.execute() {
            Ok(true) => Outcome::Succeeded,
            Ok(false) => Outcome::Failed,
            Err(e) => panic!("bztree: PMwCAS: {e}"),
        }
    }

    /// Most entries (targets and memory) one PMwCAS may hold.
    pub(crate) const ENTRIES: usize = ENTRIES_MAX;

    /// Walks the tree for height and node counts (stats; quiescent use).
    fn shape(&self) -> (u32, u64, u64, u64) {
        let guard = self.pool.pin();
        let root = self.root(&guard);
        let height = self.level(root) as u32 + 1;
        let (mut inner, mut leaves, mut keys) = (0, 0, 0);
        let mut stack = vec![root];
        while let Some(node) = stack.pop() {
            if self.level(node) == 0 {
                leaves += 1;
                let s = self.status(node, &guard);
                keys += (0..s.record_count())
                    .filter(|&i| self.leaf_meta(node, i, &guard).is_visible())
                    .count() as u64;
            } else {
                inner += 1;
                for i in 0..self.sorted_count(node) {
                    stack.push(self.child(node, i, &guard));
                }
            }
        }
        (height, inner, leaves, keys)
    }
}

/// Counter names of PMwCAS attempts and failures by size (1..=ENTRIES_MAX).
const ATTEMPT_NAMES: [&str; 15] = [
    "pmwcas_0w",
    "pmwcas_1w",
    "pmwcas_2w",
    "pmwcas_3w",
    "pmwcas_4w",
    "pmwcas_5w",
    "pmwcas_6w",
    "pmwcas_7w",
    "pmwcas_8w",
    "pmwcas_9w",
    "pmwcas_10w",
    "pmwcas_11w",
    "pmwcas_12w",
    "pmwcas_13w",
    "pmwcas_14w",
];
const FAILURE_NAMES: [&str; 15] = [
    "pmwcas_0w_failed",
    "pmwcas_1w_failed",
    "pmwcas_2w_failed",
    "pmwcas_3w_failed",
    "pmwcas_4w_failed",
    "pmwcas_5w_failed",
    "pmwcas_6w_failed",
    "pmwcas_7w_failed",
    "pmwcas_8w_failed",
    "pmwcas_9w_failed",
    "pmwcas_10w_failed",
    "pmwcas_11w_failed",
    "pmwcas_12w_failed",
    "pmwcas_13w_failed",
    "pmwcas_14w_failed",
];
const _: () = assert!(ATTEMPT_NAMES.len() == ENTRIES_MAX + 1);

impl<P: Persist> Index for BzTree<P> {
    fn name(&self) -> &'static str {
        if P::DURABLE {
            "bztree-pm"
        } else {
            "bztree"
        }
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.read(key, out)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        forest_core::check_entry(key, value)?;
        self.put(key, value, leaf::PutMode::Insert)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        forest_core::check_entry(key, value)?;
        self.put(key, value, leaf::PutMode::Upsert).map(|_| ())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        forest_core::check_entry(key, value)?;
        self.put(key, value, leaf::PutMode::Update)
    }

    fn remove(&self, key: &[u8]) -> bool {
        if forest_core::check_key(key).is_err() {
            return false;
        }
        self.delete(key)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.range_scan(lower, upper, order, visit);
    }

    fn stats(&self) -> IndexStats {
        let (height, inner, leaves, keys) = self.shape();
        let p = self.pool.stats();
        let c = &self.counters;
        let mut counters = vec![
            (names::CONSOLIDATIONS, c.consolidations.get()),
            (names::SPLITS, c.splits.get()),
            (names::MERGES, c.merges.get()),
            (names::RESTARTS, c.restarts.get()),
            ("smo_failures", c.smo_failures.get()),
            ("frozen_retries", c.frozen_retries.get()),
            ("recheck_waits", c.recheck_waits.get()),
            ("recheck_timeouts", c.recheck_timeouts.get()),
            ("read_retries", c.read_retries.get()),
            (names::CAS_ATTEMPTS, p.attempts()),
            (names::CAS_FAILURES, p.failures()),
            ("pmwcas_helps", p.helps),
            ("pmwcas_dirty_flushes", p.dirty_flushes),
            ("pmwcas_pool_waits", p.pool_waits),
            ("pmwcas_epoch_retires", p.epoch_retires),
            ("pmwcas_reuse_deferred", p.reuse_deferred),
        ];
        for size in 1..=ENTRIES_MAX {
            if p.attempts_by_size[size] > 0 {
                counters.push((ATTEMPT_NAMES[size], p.attempts_by_size[size]));
                counters.push((FAILURE_NAMES[size], p.failures_by_size[size]));
            }
        }
        IndexStats {
            key_count: keys,
            memory_bytes: self.heap.bytes_in_use(),
            height,
            inner_node_count: inner,
            leaf_node_count: leaves,
            counters,
        }
    }
}
