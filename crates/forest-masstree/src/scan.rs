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
//! out) and grows to [`BATCH_RECORDS_MAX`] (a long scan descends rarely); a scan told its
//! length (`Index::scan_hinted`, [`scan_hinted`]) makes its first batch that long, so it
//! copies no record past where its visitor stops and descends once. No pin or lock is
//! held while the visitor runs, and each record handed out was in the tree when its slot was
//! validated.
//!
//! Within a batch the walk keeps a stack of levels, one per layer it is inside (`Level`:
//! the layer's link, the border node at hand with its version, its permutation and the
//! walk's position in it, and the place in key order up to which it has handed out; a stack
//! on the heap, so the 2,048 layers of a 16 KiB key need no deep recursion):
//! - A node's permutation is read once at a stable version; then each slot in turn is read
//!   (slice, `keylen`, block or layer link) and validated by the node's version before it is
//!   used, as masstree-beta's scan emits each key only after checking the node unchanged.
//!   A record's block never changes once published and the pin keeps it alive, so it is
//!   copied after its validation, once, straight into the buffer. A failed validation (or a
//!   slot mid-change) re-reads the node from the walk's place, walking right past splits
//!   (Fig. 7); the records already copied were each validated, so they stay.
//! - At a layer link (validated like a record) the walk pushes a level for the layer below
//!   (at its place in key order: after the keys of that slice that end in it, ascending;
//!   before them, descending). Once that layer is done, it goes on in the node it left at
//!   the saved position if the node's version is unchanged, without reading it again (YCSB
//!   keys put ~11 keys in each layer-1 subtree, so a layer-0 node used to be re-read about
//!   15 times); only a changed node is re-read, from the place after the link. The key
//!   prefix is built once per layer (8 bytes pushed on entry, popped on exit), not per
//!   record, and a key is written as whole words (prefix words, slice word, suffix).
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
use crate::permuter::Permuter;
use crate::Masstree;

/// Records per batch while a scan is short: about two border nodes' worth. A scan cannot
/// know where its visitor will stop, and every record copied past that point costs a cache
/// miss on its value block, so short scans (YCSB-E's are 1-100 records) copy in small
/// batches; but each batch also costs a pin and a re-descent from the root. On YCSB-E
/// (session 11, CPU time on a loaded machine) 32 took 3-4 % less CPU than 16, 24 in between,
/// 8 more. Session 16, after the walk got cheaper (docs/BENCHMARKS.md, issue 14): 16 still
/// cost 3.4 % more instructions per YCSB-E scan than 32 in a harness outside the repository
/// (each batch's descent outweighs the records it saves); for lengths uniform in 1-100 a fixed
/// 32 beats geometric growth (review rev-mscan2 checked the arithmetic).
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

/// Copies `src` into `buf` at `at` (the caller made room for it and 16 bytes more); a piece
/// of at most 16 bytes (a key suffix) with fixed-size moves (two overlapping words) instead
/// of a call to `memcpy`: the calls for these short pieces were about a tenth of a scan's CPU
/// time (perf, YCSB-E).
#[inline(always)]
fn put_short(buf: &mut [u8], at: usize, src: &[u8]) {
    let n = src.len();
    match n {
        0 => {}
        1..=3 => buf[at..at + n].copy_from_slice(src),
        4..=7 => {
            let head: [u8; 4] = src[..4].try_into().unwrap_or_default();
            let tail: [u8; 4] = src[n - 4..].try_into().unwrap_or_default();
            buf[at..at + 4].copy_from_slice(&head);
            buf[at + n - 4..at + n].copy_from_slice(&tail);
        }
        8..=16 => {
            let head: [u8; 8] = src[..8].try_into().unwrap_or_default();
            let tail: [u8; 8] = src[n - 8..].try_into().unwrap_or_default();
            buf[at..at + 8].copy_from_slice(&head);
            buf[at + n - 8..at + n].copy_from_slice(&tail);
        }
        _ => buf[at..at + n].copy_from_slice(src),
    }
}

/// Bytes written past a key's end by [`put_key`] (a whole slice word for a shorter key).
const KEY_SLACK: usize = SLICE_BYTES + 16;

/// Writes the key `prefix ++ slice[..keylen] (++ suffix)` into `buf` at `at` (room for it and
/// [`KEY_SLACK`] more made by the caller); returns where it ends. A prefix of up to 16 bytes
/// and the slice go as whole words, so a key costs a few moves, not `memcpy` calls.
#[inline(always)]
fn put_key(
    buf: &mut [u8],
    at: usize,
    prefix: &[u8],
    slice: u64,
    keylen: u8,
    suffix: &[u8],
) -> usize {
    // Up to two words (layers 1 and 2) as fixed moves, a deeper prefix by memcpy: a loop of
    // word copies cost ~2 k instructions per YCSB-E scan in its bounds arithmetic (callgrind).
    put_short(buf, at, prefix);
    let mut p = at + prefix.len();
    buf[p..p + SLICE_BYTES].copy_from_slice(&slice.to_be_bytes());
    if keylen == KEYLEN_SUFFIX {
        p += SLICE_BYTES;
        put_short(buf, p, suffix);
        p + suffix.len()
    } else {
        p + usize::from(keylen.min(SLICE_BYTES as u8))
    }
}

/// A thread keeps its buffer for the next scan only up to this capacity.
const KEPT_BYTES_MAX: usize = 4 * BATCH_BYTES_MAX;

const _: () = assert!(BATCH_RECORDS_FIRST >= 1 && BATCH_RECORDS_FIRST <= BATCH_GROWTH_AFTER);
const _: () = assert!(BATCH_GROWTH_AFTER <= BATCH_RECORDS_MAX);
// Lengths are stored as u32.
const _: () = assert!(forest_core::KEY_BYTES_MAX <= u32::MAX as usize);

/// The records of one batch: keys and values back to back in `bytes[..used]`, each record's
/// key and value lengths in `lens`, in the order they are handed out. `bytes` is kept
/// zero-filled to its full length (grown by doubling), so records are written into it by
/// slice moves, with no length bookkeeping per piece.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    used: usize,
    lens: Vec<(u32, u32)>,
    /// [`scan_pinned`] only: the length of the last key handed out, kept at `bytes[..]`'s
    /// start (where a restart goes on from).
    pinned_key: usize,
    /// Kept with the buffer so a scan allocates nothing: the walk's layer prefix and the
    /// last key handed out (where the next batch goes on from).
    prefix: Vec<u8>,
    resume: Vec<u8>,
}

impl Batch {
    fn clear(&mut self) {
        self.used = 0;
        self.lens.clear();
        self.pinned_key = 0;
    }

    /// Makes room for `more` bytes past `used`.
    #[inline]
    fn room(&mut self, more: usize) {
        let need = self.used + more;
        if need > self.bytes.len() {
            let len = need.max(2 * self.bytes.len()).max(4096);
            self.bytes.resize(len, 0);
        }
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
        let end = self.used - v as usize;
        Some(&self.bytes[end - k as usize..end])
    }
}

thread_local! {
    /// The thread's batch buffer between scans (taken while a scan runs, so a scan nested in
    /// a visitor gets a fresh one).
    static BUFFER: Cell<Batch> = Cell::new(Batch::default());
}

/// Why a batch stopped before its walk ended.
enum Stop {
    /// The batch is full, or a deleted node was met: hand out what it holds, then go on from
    /// past its last key.
    More,
    /// The scan passed its far bound: hand out what the batch holds and end.
    End,
}

/// A place in a layer's key order: `slice << 8 | class` (`class_of_keylen`; a layer link
/// sorts after the keys of its slice that end in the slice, with the class of a long key).
type Place = u128;

#[inline(always)]
fn place(slice: u64, class: u8) -> Place {
    (u128::from(slice) << 8) | u128::from(class)
}

/// Past every place: where a descending walk of a whole layer starts.
const PLACE_END: Place = ((u64::MAX as u128) << 8 | 0xFF) + 1;

/// The slice of a place.
#[inline(always)]
fn slice_at(p: Place) -> u64 {
    (p >> 8) as u64
}

// A layer link's class is that of a long key: `class_of_keylen` caps at it.
const _: () = assert!(KEYLEN_LAYER > KEYLEN_SUFFIX);

/// One layer being walked: a level of the scan's stack (masstree-beta's `node_stack_`).
struct Level<'g, const W: usize, const F: usize> {
    /// The layer's link (its first border node; layer 0: the root as loaded).
    link: NodeRef<'g, W, F>,
    layer0: bool,
    /// The border node at hand and a stable version of it.
    node: BorderRef<'g, W, F>,
    version: u64,
    /// Ascending: the first place still to hand out; descending: the place just past the last
    /// one still to hand out (exclusive). Moved past each record handed out and each layer
    /// entered, so a re-read skips them.
    at: Place,
    /// The node's permutation read at `version`, once read, and the walk's position in it
    /// (ascending: the next index; descending: the count of positions still to visit). Kept
    /// while a layer below is walked: back from it, the walk goes on here if the node's
    /// version is unchanged, and re-reads it (from `at`) only if not.
    perm: Option<Permuter<W>>,
    pos: usize,
    /// Whether every slot of `perm` lies ahead of `at` (decided when the node is read: its
    /// first slot in the walk's order is), so no slot needs the place check.
    all_ahead: bool,
    /// The layer's keys against the scan's far bound.
    far: Far,
}

/// Where a layer's keys stand against the scan's far bound (upper ascending, lower
/// descending), decided once per layer, so that a record is compared whole with the bound
/// only where its slice equals the bound's (a slice before the bound's, in the walk's
/// order, puts the whole key before the bound: slices order as their bytes, zero-padded).
#[derive(Clone, Copy)]
enum Far {
    /// Every key of the layer is within the far bound.
    Within,
    /// A key whose slice comes before this one in the walk's order is within; any other is
    /// compared whole.
    Slice(u64),
    /// Every key is compared whole.
    Compare,
}

impl Far {
    /// Whether a key of slice `slice` is certainly within the far bound.
    #[inline(always)]
    fn within(self, order: Order, slice: u64) -> bool {
        match (self, order) {
            (Far::Within, _) => true,
            (Far::Slice(s), Order::Ascending) => slice < s,
            (Far::Slice(s), Order::Descending) => slice > s,
            (Far::Compare, _) => false,
        }
    }
}

impl<const W: usize, const F: usize> Level<'_, W, F> {
    /// The slice a re-read walks right towards.
    #[inline]
    fn at_slice(&self, order: Order) -> u64 {
        match order {
            Order::Ascending => slice_at(self.at),
            Order::Descending => slice_at(self.at.saturating_sub(1)),
        }
    }
}

/// Whether `p` is still to visit at `at` in `order`.
#[inline(always)]
fn ahead(order: Order, p: Place, at: Place) -> bool {
    match order {
        Order::Ascending => p >= at,
        Order::Descending => p < at,
    }
}

/// The `at` just past `p` in `order`.
#[inline(always)]
fn past(order: Order, p: Place) -> Place {
    match order {
        Order::Ascending => p + 1,
        Order::Descending => p,
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
    /// [`scan_pinned`] only: whether `batch.bytes` starts with `prefix`, so a record writes
    /// only its slice and suffix after it (the prefix is written once per layer entered).
    prefix_in_key: bool,
}

/// What the walk does after a slot.
enum Step<'g, const W: usize, const F: usize> {
    /// On to the next slot.
    Next,
    /// Into the layer below, whose slice and link these are.
    Down(u64, BorderRef<'g, W, F>),
    /// The node changed or a slot is mid-change: re-read it from the level's place.
    Reread,
}

impl<'s, 'g, const W: usize, const F: usize> Collect<'s, 'g, '_, W, F> {
    /// Hands one record (validated by its caller; its block never changes once published)
    /// out if it is within the bounds: copies it into the batch, or ([`scan_pinned`]) gives
    /// it to the visitor with the key assembled after the layer's prefix and the value in
    /// place. `Break` when the batch is full or the scan passed its far bound. `far` is the
    /// layer's [`Far`]: most records pass the far bound on their slice alone.
    #[inline]
    fn push(&mut self, slice: u64, keylen: u8, b: BlockRef<'g>, far: Far) -> ControlFlow<Stop> {
        let (suffix, value) = block::entry(b.get());
        let batch = &mut *self.batch;
        let (start, end) = if self.pinned.is_some() {
            // The key alone, at the buffer's start, after the prefix written there once.
            let plen = self.prefix.len();
            batch.used = 0;
            batch.room(plen + suffix.len() + KEY_SLACK);
            if !self.prefix_in_key {
                batch.bytes[..plen].copy_from_slice(self.prefix);
                self.prefix_in_key = true;
            }
            (
                0,
                put_key(&mut batch.bytes, plen, &[], slice, keylen, suffix),
            )
        } else {
            let start = batch.used;
            batch.room(self.prefix.len() + suffix.len() + KEY_SLACK + value.bytes.len());
            let end = put_key(&mut batch.bytes, start, self.prefix, slice, keylen, suffix);
            (start, end)
        };
        let key = &batch.bytes[start..end];
        let (beyond, behind) = match self.order {
            Order::Ascending => (
                !far.within(self.order, slice) && past_upper(key, self.upper),
                !self.past_near && below_lower(key, self.lower),
            ),
            Order::Descending => (
                !far.within(self.order, slice) && below_lower(key, self.lower),
                !self.past_near && past_upper(key, self.upper),
            ),
        };
        if beyond {
            return ControlFlow::Break(Stop::End);
        }
        if behind {
            return ControlFlow::Continue(());
        }
        // The walk hands out keys in order, so every later key is past the near bound too.
        self.past_near = true;
        if let Some(visit) = self.pinned.as_mut() {
            batch.pinned_key = end;
            return match visit(key, value.bytes) {
                ControlFlow::Break(()) => ControlFlow::Break(Stop::End),
                ControlFlow::Continue(()) => ControlFlow::Continue(()),
            };
        }
        let key_len = end - start;
        let v = value.bytes.len();
        batch.bytes[end..end + v].copy_from_slice(value.bytes);
        batch.used = end + v;
        batch.lens.push((key_len as u32, v as u32));
        if batch.lens.len() >= self.quota || batch.used >= BATCH_BYTES_MAX {
            return ControlFlow::Break(Stop::More);
        }
        ControlFlow::Continue(())
    }

    /// The layer below is entered: its slice joins the prefix.
    #[inline]
    fn prefix_push(&mut self, slice: u64) {
        push_slice(self.prefix, slice, SLICE_BYTES);
        self.prefix_in_key = false;
    }

    /// The layer is left: its slice leaves the prefix.
    #[inline]
    fn prefix_pop(&mut self) {
        self.prefix.truncate(self.prefix.len() - SLICE_BYTES);
        self.prefix_in_key = false;
    }

    /// The layer's keys (prefix `self.prefix`) against the far bound.
    fn far(&self) -> Far {
        let bound = match self.order {
            Order::Ascending => self.upper,
            Order::Descending => self.lower,
        };
        let (Bound::Included(k) | Bound::Excluded(k)) = bound else {
            return Far::Within;
        };
        match (bound_slice(self.prefix, k), self.order) {
            (Ok(s), _) => Far::Slice(s),
            // The layer lies below the bound's key: ascending, all within. (A prefix equal
            // to the key gives `Err(false)`, compared whole.)
            (Err(true), Order::Ascending) => Far::Within,
            // Descending: within if the layer lies strictly above the key.
            (Err(false), Order::Descending) if self.prefix.as_slice() > k => Far::Within,
            _ => Far::Compare,
        }
    }

    /// The level that starts walking the layer reached from `link` (its first border node,
    /// or layer 0's root) at the scan's near bound, whose prefix is `self.prefix`; `None`
    /// when the whole layer lies beyond that bound.
    fn enter(&self, link: NodeRef<'g, W, F>, layer0: bool) -> Option<Level<'g, W, F>> {
        // Once a key was handed out, the near bound lies behind the walk.
        let near = |b: Bound<&'s [u8]>| if self.past_near { Bound::Unbounded } else { b };
        let at = match (self.order, near(self.lower), near(self.upper)) {
            (Order::Ascending, Bound::Unbounded, _) => 0,
            (Order::Ascending, Bound::Included(k) | Bound::Excluded(k), _) => {
                match bound_slice(self.prefix, k) {
                    Ok(s) => place(s, 0),
                    Err(true) => return None, // the layer lies below it
                    Err(false) => 0,
                }
            }
            (Order::Descending, _, Bound::Unbounded) => PLACE_END,
            (Order::Descending, _, Bound::Included(k) | Bound::Excluded(k)) => {
                match bound_slice(self.prefix, k) {
                    Ok(s) => place(s, u8::MAX) + 1,
                    Err(true) => PLACE_END,
                    Err(false) => return None, // the layer lies above it
                }
            }
        };
        let start = match self.order {
            Order::Ascending => slice_at(at),
            Order::Descending => slice_at(at - 1),
        };
        // The layer's first border node is the one for slice 0: no descent needed.
        let (node, version) = match link.kind() {
            Kind::Border(b) if start == 0 => (b, b.base.version.stable()),
            _ => crate::layer::find_border(self.tree, link, start, self.guard),
        };
        Some(Level {
            link,
            layer0,
            node,
            version,
            at,
            perm: None,
            pos: 0,
            all_ahead: false,
            far: self.far(),
        })
    }

    /// Whether the first slot of `perm` in the walk's order lies ahead of `level.at`, and so
    /// every slot (a permutation lists its slots in key order). Read before the records'
    /// validations: each record handed out validates the node unchanged since `perm`, this
    /// read included.
    #[inline]
    fn first_ahead(&self, level: &Level<'g, W, F>, perm: Permuter<W>) -> bool {
        let size = perm.size();
        if size == 0 {
            return true;
        }
        let s = perm.get(match self.order {
            Order::Ascending => 0,
            Order::Descending => size - 1,
        });
        let n = level.node;
        let slice = n.keyslice[s].load(Ordering::Acquire);
        let keylen = n.keylen[s].load(Ordering::Acquire);
        ahead(self.order, place(slice, class_of_keylen(keylen)), level.at)
    }

    /// Starts loading what the walk of `level`'s node will read next (§4.2's prefetching,
    /// applied to a scan): the blocks of its records still to hand out in this batch (not
    /// past its quota), the first layers below it and the neighbour it moves to next (whole
    /// nodes: a scan reads their layer and sibling links too), so their cache misses overlap
    /// instead of coming one after another. Reads the node unvalidated: a wrong guess only
    /// costs a useless prefetch.
    #[inline]
    fn prefetch(&self, level: &Level<'g, W, F>, perm: Permuter<W>) {
        let n = level.node;
        let mut layers = 0;
        // Only the blocks this batch will copy: the rest would take memory bandwidth (and
        // line fill buffers) from the records it does copy.
        let mut records = self.quota.saturating_sub(self.batch.lens.len());
        let size = perm.size();
        for j in 0..size {
            let i = match self.order {
                Order::Ascending => j,
                Order::Descending => size - 1 - j,
            };
            let s = perm.get(i);
            let keylen = n.keylen[s].load(Ordering::Relaxed);
            if !level.all_ahead {
                let slice = n.keyslice[s].load(Ordering::Relaxed);
                if !ahead(self.order, place(slice, class_of_keylen(keylen)), level.at) {
                    continue;
                }
            }
            if keylen == KEYLEN_LAYER {
                if layers < LAYERS_AHEAD {
                    layers += 1;
                    if let Some(link) = n.layer[s].load(Ordering::Relaxed, self.guard) {
                        crate::prefetch::node(link.as_ptr(), border_lines::<W, F>());
                    }
                }
            } else if records > 0 {
                records -= 1;
                if let Some(b) = n.value[s].load_ref(Ordering::Relaxed, self.guard) {
                    b.prefetch(BLOCK_LINES);
                }
            }
            if records == 0 && layers >= LAYERS_AHEAD {
                break;
            }
        }
        match self.order {
            Order::Ascending => {
                if let Some(nx) = n.next.load(Ordering::Relaxed, self.guard) {
                    crate::prefetch::node(nx.as_ptr(), border_lines::<W, F>());
                }
            }
            Order::Descending => {
                if let Some(p) = n.prev.load(Ordering::Relaxed, self.guard) {
                    crate::prefetch::node(p.as_ptr(), border_lines::<W, F>());
                }
            }
        }
    }

    /// Back from the layer below the slot at index `i` of `perm`: starts loading the layer
    /// [`LAYERS_AHEAD`] layer slots further on, so the walk keeps that many layers in flight
    /// (the node's first ones were started by [`Collect::prefetch`]).
    #[inline]
    fn prefetch_layer_after(&self, n: BorderRef<'g, W, F>, perm: Permuter<W>, i: usize) {
        let j = match self.order {
            Order::Ascending => i + LAYERS_AHEAD,
            Order::Descending => match i.checked_sub(LAYERS_AHEAD) {
                Some(j) => j,
                None => return,
            },
        };
        if j < perm.size() {
            let s = perm.get(j);
            if n.keylen[s].load(Ordering::Relaxed) == KEYLEN_LAYER {
                if let Some(link) = n.layer[s].load(Ordering::Relaxed, self.guard) {
                    crate::prefetch::node(link.as_ptr(), border_lines::<W, F>());
                }
            }
        }
    }

    /// Reads the slot at index `i` of `perm` in `level`'s node and, once the node's version
    /// validates the read, copies its record out or names the layer to enter. A slot skipped
    /// before validation (ahead of the bound, a short key whose block is gone) is covered by
    /// the next validation: every exit from a node validates its version (a record handed
    /// out, a layer entered, a stop after a validated record, leaving the node), so a new
    /// early exit must validate too or it loses keys (review rev-mscan2 F2).
    #[inline]
    fn slot(
        &mut self,
        level: &mut Level<'g, W, F>,
        perm: Permuter<W>,
        i: usize,
    ) -> ControlFlow<Stop, Step<'g, W, F>> {
        let n = level.node;
        let s = perm.get(i);
        let slice = n.keyslice[s].load(Ordering::Acquire);
        let keylen = n.keylen[s].load(Ordering::Acquire);
        let p = place(slice, class_of_keylen(keylen));
        // Before the walk's place: below the bound, handed out before the layer it
        // descended into, or passed on by a removed node.
        if !level.all_ahead && !ahead(self.order, p, level.at) {
            return ControlFlow::Continue(Step::Next);
        }
        match keylen {
            KEYLEN_LAYER => {
                forest_core::pause::pause_point("scan:layer-slot-read");
                // A listed layer slot without its link is being rewritten, or was moved or
                // removed since `perm` was read (its link cleared).
                let Some(link) = n.layer[s].load(Ordering::Acquire, self.guard) else {
                    return ControlFlow::Continue(Step::Reread);
                };
                if n.base.version.has_changed(level.version) {
                    return ControlFlow::Continue(Step::Reread);
                }
                level.at = past(self.order, p);
                ControlFlow::Continue(Step::Down(slice, link))
            }
            0..=KEYLEN_SUFFIX => {
                let block = n.value[s].load_ref(Ordering::Acquire, self.guard);
                if n.base.version.has_changed(level.version) {
                    return ControlFlow::Continue(Step::Reread);
                }
                match block {
                    Some(b) => {
                        level.at = past(self.order, p);
                        self.push(slice, keylen, b, level.far)?;
                        ControlFlow::Continue(Step::Next)
                    }
                    // A short key's slot being emptied: absent.
                    None if keylen != KEYLEN_SUFFIX => ControlFlow::Continue(Step::Next),
                    // A long key without its block is in transition.
                    None => ControlFlow::Continue(Step::Reread),
                }
            }
            // A layer being installed: the writer has the node marked, wait for it.
            _ => ControlFlow::Continue(Step::Reread),
        }
    }

    /// Walks from the tree's root (layer 0) until the batch is full, the scan passes its far
    /// bound (`Break`) or the tree ends (`Continue`).
    fn walk(&mut self, root: NodeRef<'g, W, F>) -> ControlFlow<Stop> {
        let mut stack: Vec<Level<'g, W, F>> = Vec::with_capacity(4);
        stack.extend(self.enter(root, true));
        'levels: while let Some(level) = stack.last_mut() {
            let n = level.node;
            let perm = match level.perm {
                // Back from a layer below, the node unchanged: go on where the walk was.
                Some(perm) if !n.base.version.has_changed(level.version) => {
                    if self.tree.config.prefetch {
                        let i = match self.order {
                            Order::Ascending => level.pos.wrapping_sub(1),
                            Order::Descending => level.pos,
                        };
                        self.prefetch_layer_after(n, perm, i);
                    }
                    perm
                }
                Some(_) => {
                    self.tree.counters.retries.incr();
                    (level.node, level.version) =
                        crate::layer::walk_right(n, level.at_slice(self.order), self.guard);
                    level.perm = None;
                    continue;
                }
                None => {
                    if level.version & DELETED != 0 {
                        if !level.layer0 && n.node() == level.link {
                            // The layer was emptied and removed since its slot was validated.
                            stack.pop();
                            self.prefix_pop();
                            continue;
                        }
                        // A removed node: its keys went to a neighbour the walk may have
                        // passed.
                        self.tree.counters.restarts.incr();
                        return ControlFlow::Break(Stop::More);
                    }
                    forest_core::pause::pause_point("scan:before-copy");
                    // All of its lines at once (a descent prefetched only the lines a get
                    // reads).
                    crate::prefetch::node(n.as_ptr(), border_lines::<W, F>());
                    let perm = n.permutation();
                    level.perm = Some(perm);
                    level.pos = match self.order {
                        Order::Ascending => 0,
                        Order::Descending => perm.size(),
                    };
                    level.all_ahead = self.first_ahead(level, perm);
                    if self.tree.config.prefetch {
                        self.prefetch(level, perm);
                    }
                    perm
                }
            };
            loop {
                let i = match self.order {
                    Order::Ascending if level.pos < perm.size() => {
                        level.pos += 1;
                        level.pos - 1
                    }
                    Order::Descending if level.pos > 0 => {
                        level.pos -= 1;
                        level.pos
                    }
                    _ => break,
                };
                match self.slot(level, perm, i)? {
                    Step::Next => {}
                    Step::Down(slice, link) => {
                        // Into the layer below, at its place in key order; this level goes on
                        // once it is done.
                        self.prefix_push(slice);
                        match self.enter(link.node(), false) {
                            Some(l) => stack.push(l),
                            None => self.prefix_pop(),
                        }
                        continue 'levels;
                    }
                    Step::Reread => {
                        forest_core::pause::pause_point("scan:copy-failed");
                        self.tree.counters.retries.incr();
                        (level.node, level.version) =
                            crate::layer::walk_right(n, level.at_slice(self.order), self.guard);
                        level.perm = None;
                        continue 'levels;
                    }
                }
            }
            // Done with the node: on to its neighbour, or the layer is done. `next` is read
            // within the node's version: at that version the node holds every key below its
            // high key and `next` starts exactly there.
            let next = match self.order {
                Order::Ascending => n.next.load(Ordering::Acquire, self.guard),
                Order::Descending => None,
            };
            if n.base.version.has_changed(level.version) {
                self.tree.counters.retries.incr();
                (level.node, level.version) =
                    crate::layer::walk_right(n, level.at_slice(self.order), self.guard);
                level.perm = None;
                continue;
            }
            let neighbour = match self.order {
                Order::Ascending => next.map(|nx| {
                    debug_assert!(nx.lowkey > n.lowkey);
                    level.at = place(nx.lowkey, 0);
                    forest_core::pause::pause_point("scan:next-node");
                    (nx, nx.base.version.stable())
                }),
                Order::Descending if n.lowkey == 0 => None,
                Order::Descending => {
                    level.at = place(n.lowkey, 0);
                    let Some(p) = n.prev.load(Ordering::Acquire, self.guard) else {
                        debug_assert!(false, "a border node of lowkey {} has no prev", n.lowkey);
                        self.tree.counters.restarts.incr();
                        return ControlFlow::Break(Stop::More);
                    };
                    forest_core::pause::pause_point("scan:prev-node");
                    // `p` may have split since it was linked as `prev`: walk right to the
                    // node for the slice below `n`'s range (masstree-beta's reverse
                    // helper). A deleted `p` ends the batch when it is read.
                    Some(crate::layer::walk_right(p, n.lowkey - 1, self.guard))
                }
            };
            match neighbour {
                Some((nb, v)) => {
                    level.node = nb;
                    level.version = v;
                    level.perm = None;
                }
                None => {
                    let layer0 = level.layer0;
                    stack.pop();
                    if !layer0 {
                        self.prefix_pop();
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
    run(tree, lower, upper, order, visit, Mode::Batches(None));
}

/// `Index::scan_hinted` for Masstree: as [`scan`], but the first batch holds `len_hint`
/// records (at least 1, at most [`BATCH_RECORDS_MAX`]), so a caller that stops on the
/// `len_hint`-th record gets them from one descent and one pin, and no record is copied past
/// it (sibling and layer prefetches still run ahead). A batch cut short by the byte bound
/// leaves the rest of the hint to the next one; past the hint, later batches follow [`scan`]'s
/// quotas (a visitor that stops only on the call after its last record pays one more batch).
pub fn scan_hinted<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    len_hint: usize,
    visit: &mut Visitor<'_>,
) {
    run(
        tree,
        lower,
        upper,
        order,
        visit,
        Mode::Batches(Some(len_hint)),
    );
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
    run(tree, lower, upper, order, visit, Mode::Pinned);
}

/// How [`run`] hands records out.
#[derive(Clone, Copy)]
enum Mode {
    /// Copied out in batches, the visitor unpinned; the first batch sized by the length hint
    /// if there is one.
    Batches(Option<usize>),
    /// In place under the pin ([`scan_pinned`]).
    Pinned,
}

fn run<const W: usize, const F: usize>(
    tree: &Masstree<W, F>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    visit: &mut Visitor<'_>,
    mode: Mode,
) {
    let pinned = matches!(mode, Mode::Pinned);
    let mut batch = BUFFER.take();
    let mut prefix = std::mem::take(&mut batch.prefix);
    let mut resume = std::mem::take(&mut batch.resume);
    // Whether `resume` holds the last key handed out (once a batch was).
    let mut resuming = false;
    let mut handed_count = 0;
    let mut quota = match mode {
        Mode::Pinned => usize::MAX,
        Mode::Batches(None) => BATCH_RECORDS_FIRST,
        Mode::Batches(Some(hint)) => hint.clamp(1, BATCH_RECORDS_MAX),
    };
    loop {
        batch.clear();
        let (lo, hi) = match (resuming, order) {
            (false, _) => (lower, upper),
            (true, Order::Ascending) => (Bound::Excluded(&resume[..]), upper),
            (true, Order::Descending) => (lower, Bound::Excluded(&resume[..])),
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
                prefix_in_key: false,
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
                resume.clear();
                resume.extend_from_slice(&batch.bytes[..batch.pinned_key]);
                resuming = true;
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
            resume.clear();
            resume.extend_from_slice(last);
            resuming = true;
        }
        handed_count += batch.lens.len();
        let rule = if handed_count < BATCH_GROWTH_AFTER {
            BATCH_RECORDS_FIRST
        } else {
            handed_count.min(BATCH_RECORDS_MAX)
        };
        // A hinted first batch cut short (byte bound, a removed node) leaves the rest of the
        // hint to the next batch, not the default quota (review rev-mscan3 F1).
        quota = match mode {
            Mode::Batches(Some(hint)) if handed_count < hint => {
                rule.max((hint - handed_count).min(BATCH_RECORDS_MAX))
            }
            _ => rule,
        };
    }
    if batch.bytes.len() <= KEPT_BYTES_MAX && resume.capacity() <= KEPT_BYTES_MAX {
        batch.clear();
        prefix.clear();
        batch.prefix = prefix;
        batch.resume = resume;
        BUFFER.set(batch);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{put_key, put_short, KEY_SLACK};
    use crate::key::{slice_of, KEYLEN_SUFFIX};

    #[test]
    fn put_short_writes_every_length() {
        // Goal: the fixed-size paths of `put_short` (1-3, 4-7, 8-16 bytes, and memcpy past
        // that) write exactly `src` and nothing before it. Method: every length 0..=40
        // written at offsets 0..=9 of a buffer of 0xEE, compared with a plain copy.
        let src: Vec<u8> = (1..=40).collect();
        for at in 0..10usize {
            for n in 0..=src.len() {
                let mut got = vec![0xEE; at + n + 16];
                put_short(&mut got, at, &src[..n]);
                let mut want = vec![0xEE; at + n + 16];
                want[at..at + n].copy_from_slice(&src[..n]);
                assert_eq!(got[..at + n], want[..at + n], "{n} bytes at {at}");
            }
        }
    }

    #[test]
    fn put_key_assembles_prefix_slice_and_suffix() {
        // Goal: `put_key` writes prefix, the slice's first `keylen` bytes (all 8 and the
        // suffix for a long key) and returns the key's end, for prefixes of 0-3 words.
        // Method: keys of every length 0..=30 split as a layer walk would.
        let whole: Vec<u8> = (b'a'..=b'z').chain(b'0'..=b'9').collect();
        for words in 0..=3usize {
            for rest in 0..=(whole.len() - 8 * words) {
                let key = &whole[..8 * words + rest];
                let (prefix, tail) = key.split_at(8 * words);
                let (keylen, suffix) = if tail.len() > 8 {
                    (KEYLEN_SUFFIX, &tail[8..])
                } else {
                    (tail.len() as u8, &[][..])
                };
                let mut buf = vec![0u8; 3 + key.len() + KEY_SLACK];
                let end = put_key(&mut buf, 3, prefix, slice_of(tail), keylen, suffix);
                assert_eq!(&buf[3..end], key, "{words} words + {rest}");
            }
        }
    }
}
