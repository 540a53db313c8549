//! Range scans in both orders across layers (§3 getrange, §4.3's linked border nodes; the
//! shape of masstree-beta's `masstree_scan.hh`: a stack of layers, each walked along its
//! border nodes, every node read at a stable version and validated).
//!
//! A scan runs in batches. Under one pin ([`crate::node::TreeGuard`]) it descends from the
//! tree's root to the first key in range (through the layers the bound's prefix names), then
//! walks on along the border nodes' sibling links, copying each node's records into one flat
//! buffer (keys and values back to back, with their lengths; kept per thread), until the
//! batch holds its quota of records. Then it unpins and hands the batch to the visitor, and
//! the next batch descends again from the root to just past the last key handed out. The
//! quota starts at [`BATCH_RECORDS_FIRST`] (a short scan copies little it will not hand
//! out) and grows to [`BATCH_RECORDS_MAX`] (a long scan descends rarely). No pin or lock is
//! held while the visitor runs, and each record handed out was in the tree when its node was
//! validated.
//!
//! Within a batch the walk keeps a stack of levels, one per layer it is inside (`Level`:
//! the layer's link, the border node at hand with its version, and the place in key order up
//! to which it has handed out; a stack on the heap, so the 2,048 layers of a 16 KiB key need
//! no deep recursion):
//! - A node is read whole into a small array (each slot's slice, `keylen` and block, or its
//!   layer link) and validated by its version; only then are its records copied out (a block
//!   never changes once published and the pin keeps it alive, so a value is copied once,
//!   straight into the buffer). At a layer link the walk pushes a level for the layer below
//!   (at its place in key order: after the keys of that slice that end in it, ascending;
//!   before them, descending) and, once that layer is done, re-reads the node it left from
//!   the place after the link. A failed validation re-reads the node, walking right past
//!   splits (Fig. 7). The key prefix is built once per layer (8 bytes pushed on entry,
//!   popped on exit), not per record.
//! - Ascending moves to the `next` link read in the validated snapshot: at version `v` the
//!   node holds every key below its high key and `next` starts exactly there; later splits
//!   only move keys right, into nodes the walk still reaches. A layer ends at its last node.
//! - Descending moves to the `prev` link and walks right from it to the node responsible for
//!   the slice just below the current node's lowkey (masstree-beta's reverse helper: `prev`
//!   may name a node that split since); a layer ends at its leftmost node (lowkey 0).
//! - A layer's link names its first border node, so an ascending walk of a whole layer starts
//!   there with no descent. Finding that node deleted means the layer was emptied and removed
//!   after its slot was validated: it held no key present throughout, and is skipped.
//! - Any other deleted node met on the way (a removed node, §4.6.5: its key range went to its
//!   left neighbour, which the walk may have passed) ends the batch early: the next batch
//!   re-descends from the root by key. Entries before the walk's place (below the bound, or
//!   in a range a removed node passed on) are skipped, and every key is checked against the
//!   batch's bounds, so the keys handed out are strictly ordered and none twice.

use std::cell::Cell;
use std::ops::{Bound, ControlFlow};

use forest_core::index::{below_lower, past_upper};
use forest_core::sync::atomic::Ordering;
use forest_core::{Order, Visitor};

use crate::block::{self, BlockRef};
use crate::key::{class_of_keylen, push_slice, slice_of, KEYLEN_LAYER, KEYLEN_SUFFIX, SLICE_BYTES};
use crate::node::{BorderRef, Kind, NodeRef, TreeGuard};
use crate::nodeversion::DELETED;
use crate::Masstree;

/// Records per batch while a scan is short: about two border nodes' worth. A scan cannot
/// know where its visitor will stop, and every record copied past that point costs a cache
/// miss on its value block, so short scans (YCSB-E's are 1-100 records) copy in small
/// batches; but each batch also costs a pin and a re-descent from the root. On YCSB-E
/// (session 11, CPU time on a loaded machine) 32 took 3-4 % less CPU than 16, 24 in between,
/// 8 more.
pub const BATCH_RECORDS_FIRST: usize = 32;

/// Once a scan has handed out this many records, each batch is as large as all the records
/// handed out so far (doubling, so a long scan re-descends once per doubling), up to
/// [`BATCH_RECORDS_MAX`].
const BATCH_GROWTH_AFTER: usize = 128;

/// The largest batch: a long scan re-descends once per this many records.
pub const BATCH_RECORDS_MAX: usize = 1024;

/// A batch also ends once its buffer holds this many bytes, so a scan of large values keeps
/// its buffer small (one record always fits, however large).
const BATCH_BYTES_MAX: usize = 256 * 1024;

/// Cache lines of a value block prefetched before its record is copied: its length, header,
/// suffix and a value of about 150 bytes (YCSB's 100-byte values span 2–3 lines). One line
/// left the rest of such a value to miss inside the copy: 3 lines made YCSB-E 32 % faster
/// (docs/BENCHMARKS.md, issue 14); a larger value streams in as it is copied.
const BLOCK_LINES: usize = 3;

/// Layers below a node whose first border node is prefetched ahead of the walk.
const LAYERS_AHEAD: usize = 2;

/// Appends `src` to `out`; a piece of at most 16 bytes (a layer prefix, a key suffix) with
/// fixed-size loads and stores (two overlapping words) instead of a call to `memcpy`: the
/// calls for these short pieces were about a tenth of a scan's CPU time (perf, YCSB-E).
#[inline(always)]
fn push_bytes(out: &mut Vec<u8>, src: &[u8]) {
    let n = src.len();
    let at = out.len();
    match n {
        0 => {}
        1..=3 => {
            for &b in src {
                out.push(b);
            }
        }
        4..=7 => {
            let head: [u8; 4] = src[..4].try_into().unwrap_or_default();
            let tail: [u8; 4] = src[n - 4..].try_into().unwrap_or_default();
            out.extend_from_slice(&head);
            out.extend_from_slice(&tail);
            out[at + n - 4..at + n].copy_from_slice(&tail);
            out.truncate(at + n);
        }
        8..=16 => {
            let head: [u8; 8] = src[..8].try_into().unwrap_or_default();
            let tail: [u8; 8] = src[n - 8..].try_into().unwrap_or_default();
            out.extend_from_slice(&head);
            out.extend_from_slice(&tail);
            out[at + n - 8..at + n].copy_from_slice(&tail);
            out.truncate(at + n);
        }
        _ => out.extend_from_slice(src),
    }
}

/// A thread keeps its buffer for the next scan only up to this capacity.
const KEPT_BYTES_MAX: usize = 4 * BATCH_BYTES_MAX;

const _: () = assert!(BATCH_RECORDS_FIRST >= 1 && BATCH_RECORDS_FIRST <= BATCH_GROWTH_AFTER);
const _: () = assert!(BATCH_GROWTH_AFTER <= BATCH_RECORDS_MAX);
// Lengths are stored as u32.
const _: () = assert!(forest_core::KEY_BYTES_MAX <= u32::MAX as usize);

/// The records of one batch: keys and values back to back in `bytes`, each record's key and
/// value lengths in `lens`, in the order they are handed out.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    lens: Vec<(u32, u32)>,
    /// [`scan_pinned`] only: where in `bytes` the last key handed out starts (the keys
    /// before it are dead; they are dropped only once they pass [`PINNED_KEPT_BYTES`], so
    /// handing a record out moves no bytes).
    last_at: usize,
}

/// [`scan_pinned`]: dead keys in front of the last one handed out are dropped once they take
/// this many bytes.
const PINNED_KEPT_BYTES: usize = 4096;

impl Batch {
    fn clear(&mut self) {
        self.bytes.clear();
        self.lens.clear();
        self.last_at = 0;
    }

    /// The records as (key, value) pairs.
    fn records(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut at = 0;
        self.lens.iter().map(move |&(k, v)| {
            let (k, v) = (k as usize, v as usize);
            let key = &self.bytes[at..at + k];
            let value = &self.bytes[at + k..at + k + v];
            at += k + v;
            (key, value)
        })
    }

    /// The last record's key.
    fn last_key(&self) -> Option<&[u8]> {
        let &(k, v) = self.lens.last()?;
        let end = self.bytes.len() - v as usize;
        Some(&self.bytes[end - k as usize..end])
    }
}

thread_local! {
    /// The thread's batch buffer between scans (taken while a scan runs, so a scan nested in
    /// a visitor gets a fresh one).
    static BUFFER: Cell<Batch> = Cell::new(Batch::default());
}

/// A slot of a border node, as read before the node's validation.
#[derive(Clone, Copy)]
enum Item<'g, const W: usize, const F: usize> {
    Record {
        slice: u64,
        keylen: u8,
        block: BlockRef<'g>,
    },
    Layer {
        slice: u64,
        link: BorderRef<'g, W, F>,
    },
}

/// Reads the live slots of `n` into `items` in key order; returns how many, or `None` when a
/// slot is mid-change (a layer being installed, a block being moved): the caller re-reads.
/// Unvalidated: the caller checks `n`'s version afterwards.
#[inline]
fn read_node<'g, const W: usize, const F: usize>(
    n: BorderRef<'g, W, F>,
    guard: &'g TreeGuard<'_>,
    items: &mut [Option<Item<'g, W, F>>; W],
) -> Option<usize> {
    let perm = n.permutation();
    let mut count = 0;
    for i in 0..perm.size() {
        let s = perm.get(i);
        let slice = n.keyslice[s].load(Ordering::Acquire);
        let keylen = n.keylen[s].load(Ordering::Acquire);
        let item = match keylen {
            KEYLEN_LAYER => {
                forest_core::pause::pause_point("scan:layer-slot-read");
                Item::Layer {
                    slice,
                    // A listed layer slot without its link is being rewritten, or was moved
                    // or removed since `perm` was read (its link cleared).
                    link: n.layer[s].load(Ordering::Acquire, guard)?,
                }
            }
            0..=8 => match n.value[s].load_ref(Ordering::Acquire, guard) {
                Some(block) => Item::Record {
                    slice,
                    keylen,
                    block,
                },
                // A slot being emptied: absent.
                None => continue,
            },
            KEYLEN_SUFFIX => Item::Record {
                slice,
                keylen,
                // A long key without its block is in transition.
                block: n.value[s].load_ref(Ordering::Acquire, guard)?,
            },
            // A layer being installed: the writer has the node marked, wait for it.
            _ => return None,
        };
        items[count] = Some(item);
        count += 1;
    }
    Some(count)
}

/// Why a batch stopped before its walk ended.
enum Stop {
    /// The batch is full, or a deleted node was met: hand out what it holds, then go on from
    /// past its last key.
    More,
    /// The scan passed its far bound: hand out what the batch holds and end.
    End,
}

/// A place in a layer's key order: a slice and a length class (`class_of_keylen`; a layer
/// link sorts after the keys of its slice that end in the slice).
type Place = (u64, u8);

/// The length class of a layer link: that of a long key (`class_of_keylen` caps at it).
const LAYER_CLASS: u8 = KEYLEN_SUFFIX;

const _: () = assert!(KEYLEN_LAYER > KEYLEN_SUFFIX);

/// One layer being walked: a level of the scan's stack (masstree-beta's `node_stack_`).
struct Level<'g, const W: usize, const F: usize> {
    /// The layer's link (its first border node; layer 0: the root as loaded).
    link: NodeRef<'g, W, F>,
    layer0: bool,
    /// The border node at hand and a stable version of it.
    node: BorderRef<'g, W, F>,
    version: u64,
    /// Ascending: the first place still to hand out; descending: the last.
    at: Place,
}

/// An item's place.
#[inline]
fn place_of<const W: usize, const F: usize>(item: &Item<'_, W, F>) -> Place {
    match *item {
        Item::Record { slice, keylen, .. } => (slice, class_of_keylen(keylen)),
        Item::Layer { slice, .. } => (slice, LAYER_CLASS),
    }
}

/// Cache lines of a whole border node: a scan reads all of it (its layer links and its
/// sibling links lie past [`Masstree::PREFETCH_LINES`]).
const fn border_lines<const W: usize, const F: usize>() -> usize {
    std::mem::size_of::<crate::border::Border<W, F>>().div_ceil(64)
}

/// One batch's walk, under one pin.
struct Collect<'s, 'g, 't, const W: usize, const F: usize> {
    tree: &'t Masstree<W, F>,
    guard: &'g TreeGuard<'t>,
    order: Order,
    lower: Bound<&'s [u8]>,
    upper: Bound<&'s [u8]>,
    /// The key bytes of the layer being walked (8 per level below layer 0).
    prefix: &'s mut Vec<u8>,
    batch: &'s mut Batch,
    quota: usize,
    /// Whether a key was handed out in this batch (so later ones are past the near bound).
    past_near: bool,
    /// [`scan_pinned`]'s visitor, called under the pin as each record is reached; the batch
    /// then holds only the last key handed out.
    pinned: Option<&'s mut Visitor<'s>>,
}

impl<'s, 'g, const W: usize, const F: usize> Collect<'s, 'g, '_, W, F> {
    /// Copies one record into the batch if it is within the bounds; `Break` when the batch
    /// is full or the scan passed its far bound.
    #[inline]
    fn push(&mut self, slice: u64, keylen: u8, b: BlockRef<'g>) -> ControlFlow<Stop> {
        let start = self.batch.bytes.len();
        let (suffix, value) = block::entry(b.get());
        let bytes = &mut self.batch.bytes;
        bytes.reserve(self.prefix.len() + SLICE_BYTES + suffix.len() + value.bytes.len());
        push_bytes(bytes, self.prefix);
        if keylen == KEYLEN_SUFFIX {
            push_slice(bytes, slice, SLICE_BYTES);
            push_bytes(bytes, suffix);
        } else {
            push_slice(bytes, slice, keylen as usize);
        }
        let key = &bytes[start..];
        let (beyond, behind) = match self.order {
            Order::Ascending => (
                past_upper(key, self.upper),
                !self.past_near && below_lower(key, self.lower),
            ),
            Order::Descending => (
                below_lower(key, self.lower),
                !self.past_near && past_upper(key, self.upper),
            ),
        };
        if beyond || behind {
            bytes.truncate(start);
            return if beyond {
                ControlFlow::Break(Stop::End)
            } else {
                ControlFlow::Continue(())
            };
        }
        // The walk hands out keys in order, so every later key is past the near bound too.
        self.past_near = true;
        if let Some(visit) = self.pinned.as_mut() {
            let flow = visit(key, value.bytes);
            // Keep this key: where a restart goes on from.
            if start >= PINNED_KEPT_BYTES {
                bytes.drain(..start);
                self.batch.last_at = 0;
            } else {
                self.batch.last_at = start;
            }
            return match flow {
                ControlFlow::Break(()) => ControlFlow::Break(Stop::End),
                ControlFlow::Continue(()) => ControlFlow::Continue(()),
            };
        }
        let key_len = bytes.len() - start;
        bytes.extend_from_slice(value.bytes);
        self.batch
            .lens
            .push((key_len as u32, value.bytes.len() as u32));
        if self.batch.lens.len() >= self.quota || self.batch.bytes.len() >= BATCH_BYTES_MAX {
            return ControlFlow::Break(Stop::More);
        }
        ControlFlow::Continue(())
    }

    /// The level that starts walking the layer reached from `link` (its first border node,
    /// or layer 0's root) at the scan's near bound, whose prefix is `self.prefix`; `None`
    /// when the whole layer lies beyond that bound.
    fn enter(&self, link: NodeRef<'g, W, F>, layer0: bool) -> Option<Level<'g, W, F>> {
        // Once a key was handed out, the near bound lies behind the walk.
        let near = |b: Bound<&'s [u8]>| if self.past_near { Bound::Unbounded } else { b };
        let at = match (self.order, near(self.lower), near(self.upper)) {
            (Order::Ascending, Bound::Unbounded, _) => (0, 0),
            (Order::Ascending, Bound::Included(k) | Bound::Excluded(k), _) => {
                match bound_slice(self.prefix, k) {
                    Ok(s) => (s, 0),
                    Err(true) => return None, // the layer lies below it
                    Err(false) => (0, 0),
                }
            }
            (Order::Descending, _, Bound::Unbounded) => (u64::MAX, u8::MAX),
            (Order::Descending, _, Bound::Included(k) | Bound::Excluded(k)) => {
                match bound_slice(self.prefix, k) {
                    Ok(s) => (s, u8::MAX),
                    Err(true) => (u64::MAX, u8::MAX),
                    Err(false) => return None, // the layer lies above it
                }
            }
        };
        // The layer's first border node is the one for slice 0: no descent needed.
        let (node, version) = match link.kind() {
            Kind::Border(b) if at.0 == 0 => (b, b.base.version.stable()),
            _ => crate::layer::find_border(self.tree, link, at.0, self.guard),
        };
        Some(Level {
            link,
            layer0,
            node,
            version,
            at,
        })
    }

    /// Reads `level`'s node into `items` and validates the read, re-reading and walking
    /// right past splits towards `level.at` until it holds; updates `level.node` and
    /// `level.version` to the node read. Returns how many items it read and the `next`
    /// link read within that version, or `None` when the node is deleted.
    fn read_validated(
        &self,
        level: &mut Level<'g, W, F>,
        items: &mut [Option<Item<'g, W, F>>; W],
    ) -> Option<(usize, Option<BorderRef<'g, W, F>>)> {
        let (mut n, mut v) = (level.node, level.version);
        loop {
            if v & DELETED != 0 {
                level.node = n;
                return None;
            }
            forest_core::pause::pause_point("scan:before-copy");
            // All of its lines at once (a descent prefetched only the lines a get reads).
            crate::prefetch::node(n.as_ptr(), border_lines::<W, F>());
            let Some(count) = read_node(n, self.guard, items) else {
                forest_core::pause::pause_point("scan:copy-failed");
                self.tree.counters.retries.incr();
                (n, v) = crate::layer::walk_right(n, level.at.0, self.guard);
                continue;
            };
            let next = n.next.load(Ordering::Acquire, self.guard);
            if n.base.version.has_changed(v) {
                self.tree.counters.retries.incr();
                (n, v) = crate::layer::walk_right(n, level.at.0, self.guard);
                continue;
            }
            level.node = n;
            level.version = v;
            return Some((count, next));
        }
    }

    /// Starts loading what the walk of `level`'s node will read next (§4.2's prefetching,
    /// applied to a scan): the blocks of its records still to hand out in this batch (not
    /// past its quota), the first layers below it and the neighbour it moves to next (whole
    /// nodes: a scan reads their layer and sibling links too), so their cache misses overlap
    /// instead of coming one after another.
    #[inline]
    fn prefetch(
        &self,
        level: &Level<'g, W, F>,
        items: &[Option<Item<'g, W, F>>],
        next: Option<BorderRef<'g, W, F>>,
    ) {
        let mut layers = 0;
        // Only the blocks this batch will copy: the rest would take memory bandwidth (and
        // line fill buffers) from the records it does copy.
        let mut records = self.quota.saturating_sub(self.batch.lens.len());
        let mut ahead = |item: &Item<'g, W, F>| match *item {
            Item::Record { block, .. } if records > 0 => {
                records -= 1;
                block.prefetch(BLOCK_LINES);
            }
            Item::Record { .. } => {}
            Item::Layer { link, .. } if layers < LAYERS_AHEAD => {
                layers += 1;
                crate::prefetch::node(link.as_ptr(), border_lines::<W, F>());
            }
            Item::Layer { .. } => {}
        };
        let live = items.iter().flatten();
        match self.order {
            Order::Ascending => {
                live.filter(|i| place_of(i) >= level.at)
                    .for_each(&mut ahead);
                if let Some(nx) = next {
                    crate::prefetch::node(nx.as_ptr(), border_lines::<W, F>());
                }
            }
            Order::Descending => {
                live.rev()
                    .filter(|i| place_of(i) <= level.at)
                    .for_each(&mut ahead);
                if let Some(p) = level.node.prev.load(Ordering::Relaxed, self.guard) {
                    crate::prefetch::node(p.as_ptr(), border_lines::<W, F>());
                }
            }
        }
    }

    /// Walks from the tree's root (layer 0) until the batch is full, the scan passes its far
    /// bound (`Break`) or the tree ends (`Continue`).
    fn walk(&mut self, root: NodeRef<'g, W, F>) -> ControlFlow<Stop> {
        let mut items = [None; W];
        let mut stack: Vec<Level<'g, W, F>> = Vec::new();
        stack.extend(self.enter(root, true));
        while let Some(level) = stack.last_mut() {
            let Some((count, next)) = self.read_validated(level, &mut items) else {
                if !level.layer0 && level.node.node() == level.link {
                    // The layer was emptied and removed since its slot was validated.
                    stack.pop();
                    self.prefix.truncate(self.prefix.len() - SLICE_BYTES);
                    continue;
                }
                // A removed node: its keys went to a neighbour the walk may have passed.
                self.tree.counters.restarts.incr();
                return ControlFlow::Break(Stop::More);
            };
            if self.tree.config.prefetch {
                self.prefetch(level, &items[..count], next);
            }
            let mut below = None;
            let live = items[..count].iter().flatten();
            match self.order {
                Order::Ascending => {
                    for item in live {
                        // Before the walk's place: below the bound, handed out before the
                        // layer it descended into, or passed on by a removed node.
                        if place_of(item) < level.at {
                            continue;
                        }
                        match *item {
                            Item::Record {
                                slice,
                                keylen,
                                block,
                            } => self.push(slice, keylen, block)?,
                            Item::Layer { slice, link } => {
                                level.at = (slice, LAYER_CLASS + 1);
                                below = Some((slice, link));
                                break;
                            }
                        }
                    }
                }
                Order::Descending => {
                    for item in live.rev() {
                        if place_of(item) > level.at {
                            continue;
                        }
                        match *item {
                            Item::Record {
                                slice,
                                keylen,
                                block,
                            } => self.push(slice, keylen, block)?,
                            Item::Layer { slice, link } => {
                                level.at = (slice, LAYER_CLASS - 1);
                                below = Some((slice, link));
                                break;
                            }
                        }
                    }
                }
            }
            if let Some((slice, link)) = below {
                // Into the layer below, at its place in key order; this level goes on once
                // it is done, re-reading its node (the items above are overwritten).
                push_slice(self.prefix, slice, SLICE_BYTES);
                match self.enter(link.node(), false) {
                    Some(l) => stack.push(l),
                    None => self.prefix.truncate(self.prefix.len() - SLICE_BYTES),
                }
                continue;
            }
            // Done with the node: on to its neighbour, or the layer is done.
            let n = level.node;
            let neighbour = match self.order {
                Order::Ascending => next.map(|nx| {
                    debug_assert!(nx.lowkey > n.lowkey);
                    level.at = (nx.lowkey, 0);
                    forest_core::pause::pause_point("scan:next-node");
                    (nx, nx.base.version.stable())
                }),
                Order::Descending if n.lowkey == 0 => None,
                Order::Descending => {
                    level.at = (n.lowkey - 1, u8::MAX);
                    let Some(p) = n.prev.load(Ordering::Acquire, self.guard) else {
                        debug_assert!(false, "a border node of lowkey {} has no prev", n.lowkey);
                        self.tree.counters.restarts.incr();
                        return ControlFlow::Break(Stop::More);
                    };
                    forest_core::pause::pause_point("scan:prev-node");
                    // `p` may have split since it was linked as `prev`: walk right to the
                    // node for the slice below `n`'s range (masstree-beta's reverse
                    // helper). A deleted `p` ends the batch when it is read.
                    Some(crate::layer::walk_right(p, level.at.0, self.guard))
                }
            };
            match neighbour {
                Some((nb, v)) => {
                    level.node = nb;
                    level.version = v;
                }
                None => {
                    let layer0 = level.layer0;
                    stack.pop();
                    if !layer0 {
                        self.prefix.truncate(self.prefix.len() - SLICE_BYTES);
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Where a bound key falls relative to the layer holding keys `prefix ++ x`: the slice to
/// start at, or `Err` when the whole layer lies on one side (`Err(true)` = below the key).
fn bound_slice(prefix: &[u8], k: &[u8]) -> Result<u64, bool> {
    if prefix.is_empty() || (k.len() > prefix.len() && k.starts_with(prefix)) {
        Ok(slice_of(&k[prefix.len()..]))
    } else {
        Err(prefix < k)
    }
}

/// `Index::scan` for Masstree.
pub fn scan<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    run(tree, lower, upper, order, visit, false);
}

/// [`Masstree::scan_pinned`]: as [`scan`], but `visit` runs under the scan's epoch pin, on
/// each record as the walk reaches it (key assembled in the buffer, value in place), with no
/// batches: the visitor must not block (it holds back the reclamation of every tree).
pub fn scan_pinned<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
) {
    run(tree, lower, upper, order, visit, true);
}

fn run<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
    pinned: bool,
) {
    let mut batch = BUFFER.take();
    let mut prefix = Vec::new();
    // The last key handed out, once a batch was.
    let mut resume: Option<Vec<u8>> = None;
    let mut handed_count = 0;
    let mut quota = if pinned {
        usize::MAX
    } else {
        BATCH_RECORDS_FIRST
    };
    loop {
        batch.clear();
        let (lo, hi) = match (&resume, order) {
            (None, _) => (lower, upper),
            (Some(r), Order::Ascending) => (Bound::Excluded(&r[..]), upper),
            (Some(r), Order::Descending) => (lower, Bound::Excluded(&r[..])),
        };
        let (flow, handed) = {
            let guard = tree.pin();
            prefix.clear();
            let mut c = Collect {
                tree,
                guard: &guard,
                order,
                lower: lo,
                upper: hi,
                prefix: &mut prefix,
                batch: &mut batch,
                quota,
                past_near: false,
                pinned: pinned.then_some(&mut *visit),
            };
            let flow = c.walk(tree.root(&guard));
            (flow, c.past_near)
            // The guard unpins here: a batch's visitor runs unpinned.
        };
        let more = matches!(flow, ControlFlow::Break(Stop::More));
        if pinned {
            if !more {
                break;
            }
            if handed {
                let r = resume.get_or_insert_with(Vec::new);
                r.clear();
                r.extend_from_slice(&batch.bytes[batch.last_at..]);
            }
            continue;
        }
        let mut stopped = false;
        for (k, v) in batch.records() {
            if visit(k, v).is_break() {
                stopped = true;
                break;
            }
        }
        if stopped || !more {
            break;
        }
        if let Some(last) = batch.last_key() {
            let r = resume.get_or_insert_with(Vec::new);
            r.clear();
            r.extend_from_slice(last);
        }
        handed_count += batch.lens.len();
        quota = if handed_count < BATCH_GROWTH_AFTER {
            BATCH_RECORDS_FIRST
        } else {
            handed_count.min(BATCH_RECORDS_MAX)
        };
    }
    if batch.bytes.capacity() <= KEPT_BYTES_MAX {
        batch.clear();
        BUFFER.set(batch);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::push_bytes;

    #[test]
    fn push_bytes_appends_every_length() {
        // Goal: the fixed-size paths of `push_bytes` (1-3, 4-7, 8-16 bytes, and memcpy past
        // that) append exactly `src`, after whatever `out` held. Method: every length 0..=40
        // appended after 0..=9 bytes already there, compared with `extend_from_slice`.
        let src: Vec<u8> = (1..=40).collect();
        for before in 0..10usize {
            for n in 0..=src.len() {
                let mut got = vec![0xEE; before];
                let mut want = got.clone();
                push_bytes(&mut got, &src[..n]);
                want.extend_from_slice(&src[..n]);
                assert_eq!(got, want, "{n} bytes after {before}");
            }
        }
    }
}
