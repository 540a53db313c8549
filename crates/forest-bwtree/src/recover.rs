//! Opening a Bw-tree from its LSS (issue 17 "Recovery"; Bw-tree §V-A, §IV-C; TSBw §II-E;
//! docs/ARCHITECTURE.md "Recovery"). forest-llama's `recover::open_recovering` rebuilds the
//! mapping table (each page's newest piece, the free PIDs, the committed SMO deltas above a
//! page's newest piece); [`BwTree::open_recovered`] makes a tree of it. No page is read but
//! those an SMO changed after their newest piece: pages load on first use (`storage.rs`).
//!
//! The root: the newest committed root change (`smo_log::kind::ROOT`) the scan met, else the
//! root the checkpoint recorded (read after S, `map_checkpoint.rs`), else, with no checkpoint
//! (the scan began at the log's start, so it met every root change), PID 0, the root a fresh
//! tree allocates first.
//!
//! A page with committed SMO deltas above its newest piece is rebuilt at open: its piece's
//! image (or the split's or new root's image in the unit), then each delta in log order:
//! - split (separator, Q): records from the separator on leave, high key = separator, side
//!   link = Q;
//! - index term (separator, child): the entry added (an index page's value is the child PID,
//!   docs/FORMAT.md); index-term delete: the separator's entry removed;
//! - node merge (R, R's newest piece, high key, side link): R's records in [separator, high)
//!   join, the high key and side link become R's; R itself was freed by the same unit;
//! - remove node: nothing. A merge's first step alone leaves R an ordinary page; if its index
//!   term delete committed too, the parent routes R's range to L, whose side link leads to R:
//!   a B-link state every descent handles (§IV-A), as after a half split.
//!
//! The rebuilt state has no flush delta, so its next flush is a whole image, and the
//! checkpoint's pre-walk pass flushes it before the next walk.
//!
//! Refused (named errors, never a guess): a unit delta the access method cannot decode, a
//! delta on a page that has neither a piece nor a first image, a node merge whose right page
//! had no piece, and a map with pages but no root (a version-1 checkpoint).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use forest_core::{Error, Result};
use forest_llama::lss::{Lss, LssAddress};
use forest_llama::page_state::PageLocation;
use forest_llama::recover::{RecoveredMap, UnitDelta};
use forest_llama::Pid;

use crate::consolidate::build_state;
use crate::delta::{Kind, Node};
use crate::flush::{PageFlush, PageImage};
use crate::gc::node_ref;
use crate::smo_log::{kind, SmoDelta};
use crate::{BwTree, BwTreeConfig};

/// Flush attempts of one page in the pre-walk pass before giving up on it (each lost one
/// lost to a concurrent write).
const PASS_FLUSH_TRIES: usize = 64;

/// Millisecond waits for a frozen page in [`BwTree::flush_resident_pages`].
const PASS_FROZEN_WAITS: usize = 1000;

fn recovery_error(what: String) -> Error {
    Error::InvalidUse(format!("Bw-tree recovery: {what}"))
}

impl BwTree {
    /// The tree `map` describes on `lss` (module doc), with `config` (as the tree had) and
    /// `memory_budget_bytes` (as [`Self::with_lss`]). A map with no page gives a fresh tree.
    pub fn open_recovered(
        config: BwTreeConfig,
        lss: Arc<Lss>,
        map: &RecoveredMap,
        memory_budget_bytes: Option<u64>,
    ) -> Result<Self> {
        let tree = Self::with_config(config)?;
        if map.pages.is_empty() && map.unit_deltas.is_empty() {
            return tree.with_lss(lss, memory_budget_bytes);
        }
        let in_use = |pid: Pid| {
            map.pages.binary_search_by_key(&pid, |p| p.0).is_ok()
                || map.unit_deltas.contains_key(&pid)
        };
        let root = match map.newest_by_kind.get(&kind::ROOT) {
            Some(&(pid, _)) => Some(pid),
            None if map.checkpoint.is_none() => Some(0),
            None => map.checkpoint_root(),
        };
        let Some(root) = root.filter(|&r| in_use(r)) else {
            return Err(recovery_error(format!(
                "no root among the recovered pages (root {root:?}; a checkpoint of format \
                 version 1 records none)"
            )));
        };
        let mut tree = tree;
        tree.table = map.table()?;
        tree.root = AtomicU64::new(root);
        let tree = tree.with_lss(Arc::clone(&lss), memory_budget_bytes)?;
        for (&pid, deltas) in &map.unit_deltas {
            let address = map
                .pages
                .binary_search_by_key(&pid, |p| p.0)
                .ok()
                .map(|i| map.pages[i].1);
            let image = tree.rebuild_with_units(&lss, pid, address, deltas)?;
            tree.install_rebuilt(pid, image)?;
        }
        Ok(tree)
    }

    /// Page `pid`'s image with its unit deltas applied (module doc).
    fn rebuild_with_units(
        &self,
        lss: &Lss,
        pid: Pid,
        address: Option<LssAddress>,
        deltas: &[UnitDelta],
    ) -> Result<PageImage> {
        let decode = |d: &UnitDelta| {
            SmoDelta::decode(d.kind, &d.bytes).map_err(|what| {
                recovery_error(format!(
                    "unit at LSS address {} (transaction {}), delta on page {pid}: {what}",
                    d.unit, d.txn
                ))
            })
        };
        let mut image: Option<PageImage> = None;
        for d in deltas {
            let delta = decode(d)?;
            if let SmoDelta::PageImage(first) = delta {
                image = Some(first);
                continue;
            }
            let current = match image.take() {
                Some(current) => current,
                None => match address {
                    Some(address) => self.rebuild_image(lss, pid, address)?,
                    None => {
                        return Err(recovery_error(format!(
                            "page {pid} has a delta (unit at {}) but neither a piece nor a \
                             first image",
                            d.unit
                        )))
                    }
                },
            };
            image = Some(self.apply_unit_delta(lss, pid, current, delta)?);
        }
        match (image, address) {
            (Some(image), _) => Ok(image),
            (None, Some(address)) => self.rebuild_image(lss, pid, address),
            (None, None) => Err(recovery_error(format!("page {pid} has no state"))),
        }
    }

    fn apply_unit_delta(
        &self,
        lss: &Lss,
        pid: Pid,
        mut image: PageImage,
        delta: SmoDelta,
    ) -> Result<PageImage> {
        match delta {
            SmoDelta::PageImage(first) => return Ok(first),
            SmoDelta::Split { separator, right } => {
                image.records.retain(|(k, _)| *k < separator);
                image.high = Some(separator);
                image.side_link = right;
            }
            SmoDelta::IndexTerm {
                separator, child, ..
            } => {
                let entry = (separator, child.to_le_bytes().to_vec());
                match image.records.binary_search_by(|(k, _)| k.cmp(&entry.0)) {
                    Ok(i) => image.records[i] = entry,
                    Err(i) => image.records.insert(i, entry),
                }
            }
            SmoDelta::IndexTermDelete { separator } => {
                image.records.retain(|(k, _)| *k != separator);
            }
            // R is frozen whole either way: its state is what its records say.
            SmoDelta::RemoveNode | SmoDelta::Root | SmoDelta::MergeCommit => {}
            SmoDelta::NodeMerge {
                separator,
                right,
                right_piece,
                high,
                side_link,
            } => {
                let Some(piece) = right_piece else {
                    return Err(recovery_error(format!(
                        "node merge of page {right} into {pid}: the right page had no piece"
                    )));
                };
                let absorbed = self.rebuild_image(lss, right, piece)?;
                let within = |k: &Vec<u8>| *k >= separator && high.as_ref().is_none_or(|h| k < h);
                image
                    .records
                    .extend(absorbed.records.into_iter().filter(|(k, _)| within(k)));
                image.records.sort_by(|a, b| a.0.cmp(&b.0));
                image
                    .records
                    .dedup_by(|later, earlier| later.0 == earlier.0);
                image.high = high;
                image.side_link = side_link;
            }
        }
        Ok(image)
    }

    /// Installs `image` as `pid`'s resident state (no flush delta: its next flush is an
    /// image), in place of its LSS address or in its empty word.
    fn install_rebuilt(&self, pid: Pid, image: PageImage) -> Result<()> {
        let page = image.base_page();
        let state = build_state(image.level, page, None, &[]);
        let guard = &crossbeam_epoch::pin();
        let installed = match self.table.read_location(pid) {
            PageLocation::Stored(bits) => self
                .table
                .install_loaded(pid, bits, state, guard)
                .map_err(|_| recovery_error(format!("page {pid} changed during open")))?,
            PageLocation::Empty => self.table.install_new(pid, state, guard),
            other => {
                return Err(recovery_error(format!(
                    "page {pid}'s word holds {other:?} at open"
                )))
            }
        };
        self.count_state(node_ref(installed));
        Ok(())
    }

    /// The checkpoint's pre-walk pass (`map_checkpoint.rs`): flushes every resident page whose
    /// newest state holds an SMO delta (or writes a consolidation folded) that its newest
    /// piece lacks, or that has never been flushed, so that the walk records a piece with it:
    /// a unit below S is never scanned. Runs after the checkpoint barrier, so every unit below
    /// S has made its CAS, its delta is in the state read here, and the PIDs it freed are
    /// free.
    ///
    /// The rule (review rev-recov F2): every page this pass names gets a piece, or the pass
    /// fails and no checkpoint is published. A page lost to writes is flushed again
    /// (`PASS_FLUSH_TRIES`); a frozen one (a merge's right page whose frozen state needs a
    /// piece) is helped to finish its merge and waited for (`PASS_FROZEN_WAITS`); still not
    /// flushed, the pass fails. Excused: a freed page (`Gone`: a unit at or above S frees it,
    /// and the scan applies that) and an unpublished one (allocated by a step after the
    /// barrier, so its unit, with its first image, lies at or above S). The walk's
    /// `checkpoint_piece` (`smo_log.rs`) then only flushes pages a unit changed whose change
    /// `needs_piece` cannot see (a structure delta a consolidation folded).
    pub(crate) fn flush_unlogged_structure(&self, lss: &Lss) -> Result<usize> {
        let mut pids = Vec::new();
        {
            let guard = &crossbeam_epoch::pin();
            self.table.for_each_state(guard, |pid, state| {
                if needs_piece(node_ref(state)) {
                    pids.push(pid);
                }
            });
        }
        let mut flushed = 0;
        for pid in pids {
            let (mut lost, mut frozen_waits) = (0, 0);
            loop {
                match self.flush_page(pid, lss)? {
                    PageFlush::Flushed { .. } => flushed += 1,
                    PageFlush::Clean | PageFlush::Gone => {}
                    PageFlush::Frozen if self.is_unpublished(pid) || !self.still_needs_piece(pid) => {
                    }
                    PageFlush::Lost { .. } if lost < PASS_FLUSH_TRIES => {
                        lost += 1;
                        continue;
                    }
                    PageFlush::Frozen if frozen_waits < PASS_FROZEN_WAITS => {
                        // A thread that meets an SMO completes it (Bw-tree §IV-C).
                        self.complete_merge(pid, &crossbeam_epoch::pin());
                        frozen_waits += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        continue;
                    }
                    PageFlush::Lost { .. } | PageFlush::Frozen => {
                        return Err(recovery_error(format!(
                            "map checkpoint: page {pid} holds structure no piece has and could                              not be flushed ({lost} flushes lost to writes, {frozen_waits} ms                              frozen by a merge); no checkpoint is published"
                        )))
                    }
                }
                break;
            }
        }
        Ok(flushed)
    }

    /// Whether page `pid`'s current state needs a piece (`needs_piece`): a merge freezes R
    /// only in a state its newest piece holds (`merge.rs` `clean_state`), so a page frozen
    /// since it was named usually has its piece already.
    fn still_needs_piece(&self, pid: Pid) -> bool {
        // Pinned while the state read is used.
        let _guard = crossbeam_epoch::pin();
        match self.table.read_location(pid) {
            PageLocation::Memory(ptr) if !ptr.is_null() => {
                needs_piece(node_ref(crossbeam_epoch::Shared::from(ptr)))
            }
            _ => false,
        }
    }
}

impl BwTree {
    /// Flushes every resident page's record deltas with LSN <= the ESL into the LSS (a
    /// store's map checkpoint, before [`Self::take_map_checkpoint`]: its RSSP promises that
    /// every update below it is in a piece the walk records; forest-store `llama.rs`).
    /// Evicted pages are not read (their pieces hold everything they had). A page lost to a
    /// concurrent write is flushed again; a frozen one (a merge or split step in flight) is
    /// waited for, briefly: still frozen after that, the pass fails and the caller must not
    /// publish a checkpoint relying on it. Returns the pieces written; the caller makes them
    /// stable (the checkpoint's walk does, up to its T).
    pub fn flush_resident_pages(&self) -> Result<usize> {
        let Some(lss) = self.lss() else {
            return Err(Error::InvalidUse(
                "flush_resident_pages on a tree without an LSS".into(),
            ));
        };
        let mut flushed = 0;
        for pid in 0..self.table.pid_end() as Pid {
            let (mut lost, mut frozen_waits) = (0, 0);
            loop {
                if !matches!(self.table.read_location(pid), PageLocation::Memory(_)) {
                    break;
                }
                match self.flush_page(pid, lss)? {
                    PageFlush::Lost { .. } if lost < PASS_FLUSH_TRIES => lost += 1,
                    PageFlush::Frozen if frozen_waits < PASS_FROZEN_WAITS => {
                        frozen_waits += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    PageFlush::Lost { .. } | PageFlush::Frozen => {
                        return Err(Error::InvalidUse(format!(
                            "Bw-tree flush pass: page {pid} could not be flushed ({lost} lost \
                             to writes, {frozen_waits} ms frozen by an SMO)"
                        )))
                    }
                    PageFlush::Flushed { .. } => {
                        flushed += 1;
                        break;
                    }
                    PageFlush::Clean | PageFlush::Gone => break,
                }
            }
        }
        Ok(flushed)
    }
}

/// Whether the state `node` holds more than record deltas above a faithful newest piece. A
/// remove node delta needs none (recovery without its unit finds the merge not begun, or
/// R freed by T3, `recover.rs` module doc): the frozen state below it decides.
fn needs_piece(node: &Node) -> bool {
    let mut current = Some(node);
    while let Some(n) = current {
        match &n.kind {
            Kind::Insert(_) | Kind::Modify(_) | Kind::Delete(..) | Kind::RemoveNode { .. } => {}
            Kind::Flush(_, behind) => return *behind,
            _ => return true,
        }
        current = n.next();
    }
    true
}
