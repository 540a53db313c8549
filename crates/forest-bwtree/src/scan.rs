//! Range scans in both orders (Bw-tree §III-C), moving between leaves by side link (§III-A).
//!
//! A scan keeps a cursor (the last key handed out, or the key the next page starts at). Under
//! an epoch pin it finds the leaf holding the next keys, copies a batch of that page's records
//! in range into a flat buffer (keys and values back to back with their end offsets; one
//! buffer per thread, reused by its next scans), unpins, and hands the records out one by one:
//! no pin is held while `visit` runs, and each value is copied once, into the buffer. Before
//! each next-record it checks whether the page changed since the copy (its mapping-table word
//! moved); if so it copies again from the cursor, so an update to the unreturned part is seen
//! (§III-C). The same check runs after the page's last record, before the scan ends or goes on
//! to the next page, and once more under the pin that copies the next page: a key inserted
//! into the tail of a page already handed out (between the cursor and the high key) is seen,
//! not skipped. Each next-record is atomic; the scan as a whole is not.
//!
//! Finding the next batch's page, cheapest first:
//! - The same page (its batch ran out of budget, or it changed): read again by its PID.
//! - Ascending, the page's records are all out: its side link (§III-A), read by PID. The cursor
//!   becomes the page's high key, which is the right sibling's low key.
//! - Otherwise, or when the PID cannot be trusted: a descent from the root (`get.rs`), which
//!   completes the SMOs it meets (§IV-C). Descending scans always take it at a page's low key:
//!   the paper's pages have no left link, and a left neighbour remembered from the parent would
//!   need the same checks as a descent.
//!
//! A PID kept across an unpinned stretch may have been freed and handed to another page since
//! (§III-D protects PIDs only within an epoch), even to a page never linked in (a failed split's
//! right half, briefly). It is read again only if no PID was freed since the last batch
//! (`BwTree::pids_freed`, read after the word): then it is the same page, whose low key never
//! changes, and it is used if it is still a live leaf covering the cursor (a split may have
//! moved its high key, a merge may have frozen it); else the scan descends.
//!
//! Batches: the first copies at most [`SCAN_BUDGET_FIRST`] records, each next one of the same
//! scan twice as many, so a short scan copies little past what it hands out and a long one
//! copies whole pages. A scan told its length (`Index::scan_hinted`) budgets each batch for the
//! records the hint still expects instead, so a visitor that stops there gets them from one
//! batch per page and nothing past them is copied; past the hint, batches follow the quotas
//! above. A chain of record and split deltas over a base page (the common leaf
//! state) is merged in place from the cursor's position on: base page and deltas (sorted on the
//! stack, as consolidation's fast path does), no folded view; other chains fold a view
//! (`consolidate.rs`).
//!
//! The pinned scan (`Index::scan_pinned`, [`BwTree::scan_pinned_range`]) copies nothing: under
//! one pin it walks a page's state in place (the same merge of base page and deltas) and hands
//! `visit` slices of the base page's arena and of the deltas, which the pin keeps alive. A
//! state is immutable, so no check runs between a page's records; the page behind is checked
//! before the next page's first record as above. It moves on by side link (ascending) or by
//! descent (descending) under the same pin, and pins anew every [`PAGES_PER_PIN`] pages,
//! keeping the cursor and the page behind across the unpinned moment as `scan` does.
//!
//! Choices the paper leaves open:
//! - "Has the unreturned subrange changed" is checked as "has the page's state changed", which
//!   is cheaper than inspecting the new deltas and errs on the side of copying again. Without a
//!   pin the check is two loads: the page's word, and `gc.rs`'s reuse generation, which tells
//!   that no freed node allocation was reused since the copy (else an equal address could be a
//!   new state); when the generation moved, the check pins and compares the node's stamp.
//! - Descending scans find the page holding the greatest keys below the cursor with the same
//!   descent, comparing strictly ([`Target::Below`]).

use std::cell::Cell;
use std::ops::{Bound, ControlFlow};

use crossbeam_epoch::{Guard, Shared};
use forest_core::index::{below_lower, past_upper};
use forest_core::{Order, Visitor};
use forest_llama::page_state::{decode, PageLocation};
use forest_llama::Pid;

use crate::base_page::{key_cmp, key_eq, key_prefix, BasePage};
use crate::consolidate::{view, EDITS_MAX};
use crate::delta::{Kind, Node};
use crate::gc::{node_ref, reuse_generation};
use crate::get::{Path, Target};
use crate::BwTree;

/// Records a scan's first batch copies at most; each next batch of the same scan doubles it.
/// Small, so that a scan of a few records (YCSB E's are 1 to 100) does not copy a whole page.
pub(crate) const SCAN_BUDGET_FIRST: usize = 32;

/// The largest buffer a thread keeps for its next scan (a scan over huge values may grow one).
const BUFFER_KEEP_BYTES_MAX: usize = 1 << 20;

/// Records copied out of a page: keys and values back to back, with their end offsets.
#[derive(Default)]
struct Copied {
    bytes: Vec<u8>,
    /// Per record, where its key and its value end in `bytes`; its key starts where the
    /// previous record's value ends.
    ends: Vec<(usize, usize)>,
}

impl Copied {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    #[inline]
    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push((key_end, self.bytes.len()));
    }

    /// Like [`Self::push`] for a key and value stored back to back (`record`, whose first
    /// `key_len` bytes are the key): one copy.
    #[inline]
    fn push_joined(&mut self, record: &[u8], key_len: usize) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(record);
        self.ends.push((start + key_len, self.bytes.len()));
    }

    /// The key of record `index`.
    fn key(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.ends[i].1);
        &self.bytes[start..self.ends[index].0]
    }
}

/// A scan's buffers, kept per thread between scans.
#[derive(Default)]
struct ScanBuffers {
    copied: Copied,
    /// The cursor's key (see [`From`]).
    cursor: Vec<u8>,
    /// The page boundary the next batch starts at (high key going up, low key going down).
    boundary: Vec<u8>,
    /// The boundary a batch copies, swapped into `boundary` when the scan goes past its page.
    next_boundary: Vec<u8>,
}

thread_local! {
    /// One thread's buffers, taken by a scan and given back when it ends (a scan that `visit`
    /// starts on the same thread finds none and makes its own).
    static BUFFERS: Cell<Option<ScanBuffers>> = const { Cell::new(None) };
}

impl ScanBuffers {
    fn take() -> Self {
        BUFFERS
            .try_with(Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    fn give_back(self) {
        if self.copied.bytes.capacity() <= BUFFER_KEEP_BYTES_MAX {
            // During thread exit the thread-local may be gone: the buffers are then freed.
            let _ = BUFFERS.try_with(|b| b.set(Some(self)));
        }
    }
}

/// Where the scan stands: the records handed out next lie beyond this.
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    /// The scan's own bound (lower when ascending, upper when descending): nothing out yet.
    Start,
    /// The cursor key, the last handed out.
    After,
}

/// How the next batch finds its page.
#[derive(Clone, Copy)]
enum Find {
    /// A descent from the root.
    Descend,
    /// The page with this PID, if it can be trusted (see the module doc).
    Page(Pid),
}

/// The page a batch came from, to tell whether it changed.
struct Mark {
    pid: Pid,
    /// Its state's address and stamp (see `Node::stamp`).
    state_word: usize,
    stamp: u32,
    /// The reuse generation read while pinned (see `gc::reuse_generation`).
    reuse_generation: u64,
}

/// Why a batch ended.
#[derive(Clone, Copy)]
enum Ending {
    /// The budget ran out; the page may hold more records.
    Budget,
    /// The page's records beyond the cursor are all copied; the scan goes on at the boundary
    /// (high key going up, low key going down), ascending by the side link.
    Neighbour(Pid),
    /// The scan's range ends here.
    Finished,
}

impl BwTree {
    /// A scan (see the module doc); `len_hint`, if given, is the count of records the visitor
    /// is expected to take (`Index::scan_hinted`), which sizes the batches and nothing else.
    pub(crate) fn scan_range(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: Option<usize>,
        visit: &mut Visitor<'_>,
    ) {
        let mut buffers = ScanBuffers::take();
        self.scan_with(&mut buffers, lower, upper, order, len_hint, visit);
        buffers.give_back();
    }

    fn scan_with(
        &self,
        buffers: &mut ScanBuffers,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: Option<usize>,
        visit: &mut Visitor<'_>,
    ) {
        let ScanBuffers {
            copied,
            cursor,
            boundary,
            next_boundary,
        } = buffers;
        // The cursor: records handed out next lie beyond `Start` (the scan's bound) or beyond
        // the key in `cursor` (`After`).
        let mut from = From::Start;
        let mut find = Find::Descend;
        // Set when the next batch starts at `boundary`, past the end of this page (which must
        // not change before that batch is copied: its records up to the boundary are out).
        let mut behind: Option<Mark> = None;
        let mut pids_freed = 0;
        // The records the hint still expects (0 without one, or once they are out).
        let mut hinted = len_hint.map_or(0, |hint| hint.max(1));
        let mut quota = SCAN_BUDGET_FIRST;
        loop {
            let hinted_batch = hinted > 0;
            let budget = if hinted_batch { hinted } else { quota };
            let start = match (&behind, from, order) {
                (Some(_), _, Order::Ascending) => Bound::Included(&boundary[..]),
                (Some(_), _, Order::Descending) => Bound::Excluded(&boundary[..]),
                (None, From::Start, Order::Ascending) => lower,
                (None, From::Start, Order::Descending) => upper,
                (None, From::After, _) => Bound::Excluded(&cursor[..]),
            };
            if order == Order::Descending && matches!(start, Bound::Excluded(k) if k.is_empty()) {
                return; // nothing lies below the empty key
            }
            let batch = self.copy_batch(
                find,
                pids_freed,
                start,
                (lower, upper, order),
                budget,
                copied,
                next_boundary,
                behind.as_mut(),
            );
            let Some((mut mark, ending, freed)) = batch else {
                // The page behind changed after its last record went out: copy it again from
                // the cursor, so that what was inserted there is seen (§III-C).
                let page = behind.take().expect("only a batch past a page checks it");
                find = Find::Page(page.pid);
                continue;
            };
            behind = None;
            pids_freed = freed;
            let mut key_start = 0;
            let mut handed_out = 0;
            let mut changed = false;
            for &(key_end, value_end) in &copied.ends {
                // §III-C: before each next-record, check the page for updates since the copy.
                if handed_out > 0 && self.page_changed(&mut mark) {
                    changed = true;
                    break;
                }
                let flow = visit(
                    &copied.bytes[key_start..key_end],
                    &copied.bytes[key_end..value_end],
                );
                if flow == ControlFlow::Break(()) {
                    return;
                }
                key_start = value_end;
                handed_out += 1;
            }
            hinted = hinted.saturating_sub(handed_out);
            if handed_out > 0 {
                cursor.clear();
                cursor.extend_from_slice(copied.key(handed_out - 1));
                from = From::After;
            }
            // Ending here, or going past this page's end: the same check before that next-record.
            if changed || (!matches!(ending, Ending::Budget) && self.page_changed(&mut mark)) {
                find = Find::Page(mark.pid);
                continue;
            }
            match ending {
                Ending::Finished => return,
                Ending::Budget => {
                    find = Find::Page(mark.pid);
                    if !hinted_batch {
                        quota = quota.saturating_mul(2);
                    }
                }
                Ending::Neighbour(side_link) => {
                    std::mem::swap(boundary, next_boundary);
                    find = match order {
                        Order::Ascending => Find::Page(side_link),
                        Order::Descending => Find::Descend,
                    };
                    behind = Some(mark);
                }
            }
        }
    }

    /// Under one pin: finds the page (`find`, else a descent) and copies into `copied` its
    /// records from `start` on in the scan's order, within its range, at most `budget`; on
    /// [`Ending::Neighbour`] the boundary into `boundary`. Returns the page's mark, why the
    /// batch ended, and the count of freed PIDs read before anything else under this pin;
    /// `None` if the page `behind` (whose end this batch starts past) changed meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn copy_batch(
        &self,
        find: Find,
        pids_freed: u64,
        start: Bound<&[u8]>,
        (lower, upper, order): (Bound<&[u8]>, Bound<&[u8]>, Order),
        budget: usize,
        copied: &mut Copied,
        boundary: &mut Vec<u8>,
        behind: Option<&mut Mark>,
    ) -> Option<(Mark, Ending, u64)> {
        copied.clear();
        let guard = &crossbeam_epoch::pin();
        // Before any state is read: a page read under this pin and freed later shows in a
        // count read after this one.
        let freed_now = self.pids_freed();
        let reuse_generation = reuse_generation();
        let found = match find {
            Find::Page(pid) => self.revisit(pid, pids_freed, start, order, guard),
            Find::Descend => None,
        };
        let (pid, state, node) = found
            .unwrap_or_else(|| self.descend_to_leaf(target(start, order), &mut Path::new(), guard));
        let ending = copy_records(node, start, lower, upper, order, budget, copied, boundary);
        // The page behind had nothing more beyond the cursor when this page was read: the
        // first record here is the next one at this moment.
        if behind.is_some_and(|page| self.page_changed(page)) {
            return None;
        }
        // A consolidation of the state just copied holds the same records: the mark follows
        // it, so the first next-record does not take it for a change.
        let state = self
            .consolidate_after_scan(pid, state, node, guard)
            .unwrap_or(state);
        let mark = Mark {
            pid,
            state_word: state.as_raw() as usize,
            stamp: node_ref(state).stamp,
            reuse_generation,
        };
        Some((mark, ending, freed_now))
    }

    /// The leaf `pid` if it is still the page the scan met there and holds the keys from
    /// `start` on in `order`; `None` sends the scan down from the root.
    fn revisit<'g>(
        &self,
        pid: Pid,
        pids_freed: u64,
        start: Bound<&[u8]>,
        order: Order,
        guard: &'g Guard,
    ) -> Option<(Pid, Shared<'g, Node>, &'g Node)> {
        // The raw word first: the PID may be on the free list, whose links are no state. Read
        // as a state under this pin, it stays one (a PID is free-listed after the epoch).
        if !matches!(
            decode::<Node>(self.table.read_word(pid)),
            PageLocation::Memory(_)
        ) {
            return None;
        }
        let (state, node) = self.read_node(pid, guard)?;
        // After the read: a PID freed and handed out again shows in this count.
        if self.pids_freed() != pids_freed {
            return None;
        }
        let live_leaf = node.level == 0 && !matches!(node.kind, Kind::RemoveNode { .. });
        (live_leaf && covers(node, start, order)).then_some((pid, state, node))
    }

    /// Whether the page of `mark` has another state than the one its records came from: another
    /// address, or the same address reused for a new state (see the module doc).
    fn page_changed(&self, mark: &mut Mark) -> bool {
        if self.table.read_word(mark.pid) != mark.state_word {
            return true;
        }
        // Read after the word: a reused address shows here as a newer generation.
        if reuse_generation() == mark.reuse_generation {
            return false;
        }
        let guard = &crossbeam_epoch::pin();
        let generation = reuse_generation();
        // The raw word again: the PID may have been freed (merged away) and reused as a free
        // list link since the copy, which is no state to read. Equal to the copied state's
        // address under the pin, it is a live state, and a PID freed later is free-listed only
        // after this pin's epoch, so the read below sees a state or nothing.
        if self.table.read_word(mark.pid) != mark.state_word {
            return true;
        }
        match self.read_node(mark.pid, guard) {
            Some((state, node))
                if state.as_raw() as usize == mark.state_word && node.stamp == mark.stamp =>
            {
                // The same state, installed now: the generation read above vouches for it.
                mark.reuse_generation = generation;
                false
            }
            _ => true,
        }
    }
}

/// Pages a pinned scan walks under one epoch pin before it unpins and pins again: a long scan
/// must not hold back the reclamation of every epoch-managed structure for its whole run.
const PAGES_PER_PIN: usize = 8;

impl BwTree {
    /// [`forest_core::Index::scan_pinned`]: the records of each page handed to `visit` in
    /// place, from the page's base page and its deltas, under the pin its state was read with.
    pub(crate) fn scan_pinned_range(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        let mut buffers = ScanBuffers::take();
        self.scan_in_place(&mut buffers, lower, upper, order, visit);
        buffers.give_back();
    }

    /// The pinned scan (see the module doc). A page's state is immutable and lives as long as
    /// the pin, so each record handed out is in the state as the page had it when read: no
    /// copy, and no check of the page between its records. Under one pin the scan goes from
    /// page to page by side link (ascending) or by descent (descending), after checking, as
    /// `scan` does, that the page behind did not change since it was read (else it reads it
    /// again from the cursor, §III-C). Every [`PAGES_PER_PIN`] pages it unpins: the cursor
    /// (last key out) and the page behind go on as in `scan`, by PID with the same checks.
    fn scan_in_place(
        &self,
        buffers: &mut ScanBuffers,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        let ScanBuffers {
            cursor,
            boundary,
            next_boundary,
            ..
        } = buffers;
        let mut from = From::Start;
        let mut find = Find::Descend;
        // The page behind, with the count of freed PIDs read before its state was.
        let mut behind: Option<(Mark, u64)> = None;
        // The count of freed PIDs read before the state that `find`'s PID came from.
        let mut pids_freed = 0;
        loop {
            let guard = &crossbeam_epoch::pin();
            // Both before any state is read under this pin, as in `copy_batch`.
            let freed_now = self.pids_freed();
            let reuse_generation = reuse_generation();
            // The last key handed out under this pin, in its page.
            let mut last: Option<&[u8]> = None;
            for _ in 0..PAGES_PER_PIN {
                let start = match (&behind, last, from, order) {
                    (Some(_), _, _, Order::Ascending) => Bound::Included(&boundary[..]),
                    (Some(_), _, _, Order::Descending) => Bound::Excluded(&boundary[..]),
                    (None, Some(key), _, _) => Bound::Excluded(key),
                    (None, None, From::Start, Order::Ascending) => lower,
                    (None, None, From::Start, Order::Descending) => upper,
                    (None, None, From::After, _) => Bound::Excluded(&cursor[..]),
                };
                if order == Order::Descending && matches!(start, Bound::Excluded(k) if k.is_empty())
                {
                    return; // nothing lies below the empty key
                }
                let found = match find {
                    Find::Page(pid) => self.revisit(pid, pids_freed, start, order, guard),
                    Find::Descend => None,
                };
                let (pid, state, node) = found.unwrap_or_else(|| {
                    self.descend_to_leaf(target(start, order), &mut Path::new(), guard)
                });
                // Consolidated first, the walk reads one base page; it holds the same records.
                let (state, node) = match self.consolidate_after_scan(pid, state, node, guard) {
                    Some(consolidated) => (consolidated, node_ref(consolidated)),
                    None => (state, node),
                };
                // The page behind had nothing more beyond the cursor when this page was read;
                // if it changed since, it is read again from the cursor (§III-C).
                if let Some((mut page, freed)) = behind.take() {
                    if self.page_changed(&mut page) {
                        find = Find::Page(page.pid);
                        pids_freed = freed;
                        continue;
                    }
                }
                let ending = walk_page(
                    node,
                    start,
                    (lower, upper, order),
                    next_boundary,
                    &mut |key, value| {
                        let value = match value {
                            Value::Alone(value) => value,
                            Value::AfterKey(record) => &record[key.len()..],
                        };
                        if visit(key, value).is_break() {
                            return Took::Stop;
                        }
                        last = Some(key);
                        Took::More
                    },
                );
                match ending {
                    // Stopped by the visitor, or past the scan's range (no budget here).
                    None | Some(Ending::Finished | Ending::Budget) => return,
                    Some(Ending::Neighbour(side_link)) => {
                        std::mem::swap(boundary, next_boundary);
                        find = match order {
                            Order::Ascending => Find::Page(side_link),
                            Order::Descending => Find::Descend,
                        };
                        pids_freed = freed_now;
                        let mark = Mark {
                            pid,
                            state_word: state.as_raw() as usize,
                            stamp: node.stamp,
                            reuse_generation,
                        };
                        behind = Some((mark, freed_now));
                    }
                }
            }
            // The pin ends: the cursor leaves the page it is in.
            if let Some(key) = last {
                cursor.clear();
                cursor.extend_from_slice(key);
                from = From::After;
            }
        }
    }
}

/// What a descent looks for to find the page holding the keys from `start` on in `order`.
fn target(start: Bound<&[u8]>, order: Order) -> Target<'_> {
    match (start, order) {
        (Bound::Included(k) | Bound::Excluded(k), Order::Ascending) => Target::At(k),
        (Bound::Unbounded, Order::Ascending) => Target::At(&[]),
        (Bound::Included(k), Order::Descending) => Target::At(k),
        (Bound::Excluded(k), Order::Descending) => Target::Below(Some(k)),
        (Bound::Unbounded, Order::Descending) => Target::Below(None),
    }
}

/// Whether the live leaf state `node` holds the keys from `start` on in `order` (its low key
/// at or left of them, its high key right of them).
fn covers(node: &Node, start: Bound<&[u8]>, order: Order) -> bool {
    let low = node.base_page().low();
    let (high, _) = node.bounds();
    let below_high = |key: &[u8]| high.is_none_or(|h| key_cmp_wide(key, h).is_lt());
    let low_at_or_below = |key: &[u8]| key_cmp_wide(low, key).is_le();
    match (start, order) {
        (Bound::Included(k) | Bound::Excluded(k), Order::Ascending) => {
            low_at_or_below(k) && below_high(k)
        }
        (Bound::Unbounded, Order::Ascending) => low.is_empty(),
        (Bound::Included(k), Order::Descending) => low_at_or_below(k) && below_high(k),
        (Bound::Excluded(k), Order::Descending) => {
            key_cmp_wide(low, k).is_lt() && high.is_none_or(|h| key_cmp_wide(k, h).is_le())
        }
        (Bound::Unbounded, Order::Descending) => high.is_none(),
    }
}

/// Copies `node`'s records from `start` on in `order` into `copied`, within the scan's range
/// and at most `budget` of them (see [`Ending`]); on a neighbour ending the page's boundary into
/// `boundary`.
#[allow(clippy::too_many_arguments)]
fn copy_records(
    node: &Node,
    start: Bound<&[u8]>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    budget: usize,
    copied: &mut Copied,
    boundary: &mut Vec<u8>,
) -> Ending {
    let ending = walk_page(
        node,
        start,
        (lower, upper, order),
        boundary,
        &mut |key, value| {
            if copied.ends.len() == budget {
                return Took::Full;
            }
            match value {
                Value::Alone(value) => copied.push(key, value),
                Value::AfterKey(record) => copied.push_joined(record, key.len()),
            }
            Took::More
        },
    );
    ending.expect("a copy never stops a walk")
}

/// What a walk's `take` did with a record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Took {
    /// Took it; the walk goes on.
    More,
    /// Did not take it: the batch is full ([`Ending::Budget`]).
    Full,
    /// Took it, and the scan stops here (its visitor said so).
    Stop,
}

/// Walks `node`'s records from `start` on in `order` within the scan's range, handing each to
/// `take`. Returns why the walk ended (on [`Ending::Neighbour`], with the page's boundary in
/// `boundary`), or `None` when `take` stopped it.
fn walk_page<'g>(
    node: &'g Node,
    start: Bound<&[u8]>,
    (lower, upper, order): (Bound<&[u8]>, Bound<&[u8]>, Order),
    boundary: &mut Vec<u8>,
    take: &mut impl FnMut(&'g [u8], Value<'g>) -> Took,
) -> Option<Ending> {
    let mut ending = None;
    let mut stopped = false;
    let mut emit = |key: &'g [u8], value: Value<'g>| -> bool {
        let beyond = match order {
            Order::Ascending => past_upper(key, upper),
            Order::Descending => below_lower(key, lower),
        };
        if beyond {
            ending = Some(Ending::Finished);
            return false;
        }
        match take(key, value) {
            Took::More => true,
            Took::Full => {
                ending = Some(Ending::Budget);
                false
            }
            Took::Stop => {
                stopped = true;
                false
            }
        }
    };
    match leaf_edits(node) {
        Some(edited) => edited.walk(start, order, &mut emit),
        None => walk_view(&view(node).records, start, order, &mut emit),
    }
    if stopped {
        return None;
    }
    if let Some(ending) = ending {
        return Some(ending);
    }
    // The page's records beyond the cursor are all out.
    Some(match order {
        Order::Ascending => match node.bounds() {
            (Some(high), side_link) if !past_upper(high, upper) => {
                boundary.clear();
                boundary.extend_from_slice(high);
                Ending::Neighbour(side_link)
            }
            _ => Ending::Finished,
        },
        Order::Descending => {
            let low = node.base_page().low();
            let done = match lower {
                Bound::Included(l) | Bound::Excluded(l) => l >= low,
                Bound::Unbounded => low.is_empty(),
            };
            if done {
                Ending::Finished
            } else {
                boundary.clear();
                boundary.extend_from_slice(low);
                Ending::Neighbour(crate::base_page::NO_PID)
            }
        }
    })
}

/// A record's value as a walk hands it to its `emit`.
#[derive(Clone, Copy)]
enum Value<'a> {
    Alone(&'a [u8]),
    /// The whole record, key then value (a base page's), copied at once.
    AfterKey(&'a [u8]),
}

/// A leaf state of record deltas (and split deltas) over a base page, read in place.
struct LeafEdits<'g> {
    base: &'g BasePage,
    /// Base records below the newest split's separator (the rest moved right).
    cut: usize,
    /// The deltas' records, newest per key, sorted by key; `None` values delete.
    edits: [(&'g [u8], Option<&'g [u8]>); EDITS_MAX],
    /// [`wide_prefix`] of each of `edits`' keys, for the merge's compares.
    wides: [(u64, u64); EDITS_MAX],
    len: usize,
}

/// The chain of `node` as [`LeafEdits`]; `None` for longer chains or other deltas.
fn leaf_edits(node: &Node) -> Option<LeafEdits<'_>> {
    if node.delta_count as usize > EDITS_MAX {
        return None;
    }
    // Entries older than a split delta hold only keys below its separator (as in `view`);
    // those newer than the newest split are below it by construction.
    let mut limit: Option<&[u8]> = None;
    let below = |key: &[u8], limit: Option<&[u8]>| limit.is_none_or(|l| key_cmp(key, l).is_lt());
    let mut edits: [(&[u8], Option<&[u8]>); EDITS_MAX] = [(&[], None); EDITS_MAX];
    let mut len = 0;
    let mut current = node;
    let base = loop {
        let edit = match &current.kind {
            Kind::Base(page) => {
                // Searched next: the prefixes' misses overlap the walk and sort of the deltas.
                page.prefetch();
                break page;
            }
            Kind::Insert(r) | Kind::Modify(r) => (r.key(), Some(r.value())),
            Kind::Delete(key, _) => (&key[..], None),
            Kind::Split { separator, .. } => {
                if below(separator, limit) {
                    limit = Some(separator);
                }
                current = current.next()?;
                continue;
            }
            _ => return None,
        };
        if below(edit.0, limit) {
            edits[len] = edit;
            len += 1;
        }
        current = current.next()?;
    };
    // Sorted as (16-byte prefix, index) triples, small and compared inline (see
    // `wide_prefix`); the full keys only where prefixes tie. Stable (insertion sort at this
    // length: no allocation): the newest delta stays first among equal keys, and the dedup
    // keeps it.
    let mut order = [(0u64, 0u64, 0u8); EDITS_MAX];
    for (slot, (i, edit)) in order.iter_mut().zip(edits[..len].iter().enumerate()) {
        let (high, low) = wide_prefix(edit.0);
        *slot = (high, low, i as u8);
    }
    let order = &mut order[..len];
    order.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| tail_cmp(edits[usize::from(a.2)].0, edits[usize::from(b.2)].0))
    });
    let mut sorted: [(&[u8], Option<&[u8]>); EDITS_MAX] = [(&[], None); EDITS_MAX];
    let mut wides = [(0u64, 0u64); EDITS_MAX];
    let mut kept = 0;
    for &(high, low, i) in order.iter() {
        let edit = edits[usize::from(i)];
        if kept == 0 || wides[kept - 1] != (high, low) || !key_eq(sorted[kept - 1].0, edit.0) {
            sorted[kept] = edit;
            wides[kept] = (high, low);
            kept += 1;
        }
    }
    let cut = limit.map_or(base.len(), |l| base.count_below(l, false));
    Some(LeafEdits {
        base,
        cut,
        edits: sorted,
        wides,
        len: kept,
    })
}

/// Orders two keys as slices do, by their first 16 bytes as two zero-padded big-endian
/// numbers first: a page's keys often share their first 8 bytes (YCSB's `user` and the first
/// digits), where [`key_cmp`] ties and calls `memcmp` on every comparison of a scan's merge of
/// base page and deltas. Equal 16-byte prefixes with either key at most 16 bytes long mean one
/// key is the other's start (the padding is zeros), so the lengths decide.
#[inline]
fn key_cmp_wide(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    wide_prefix(a)
        .cmp(&wide_prefix(b))
        .then_with(|| tail_cmp(a, b))
}

/// The first 16 bytes of `key`, zero-padded, as two big-endian numbers: compared as a pair,
/// they order keys as the keys do, except that equal pairs need [`tail_cmp`].
#[inline]
fn wide_prefix(key: &[u8]) -> (u64, u64) {
    (key_prefix(key), key_prefix(key.get(8..).unwrap_or(&[])))
}

/// Orders two keys whose [`wide_prefix`] is equal.
#[inline]
fn tail_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() <= 16 || b.len() <= 16 {
        a.len().cmp(&b.len())
    } else {
        a[16..].cmp(&b[16..])
    }
}

/// Whether `key` sorts before the split point of `start` in `order`: ascending, the keys
/// before the start; descending, the keys at or after it (those the walk goes down from).
fn start_below(start: Bound<&[u8]>, order: Order, key: &[u8]) -> bool {
    match (start, order) {
        (Bound::Included(k), Order::Ascending) => key_cmp(key, k).is_lt(),
        (Bound::Excluded(k), Order::Ascending) => key_cmp(key, k).is_le(),
        (Bound::Unbounded, Order::Ascending) => false,
        (Bound::Included(k), Order::Descending) => key_cmp(key, k).is_le(),
        (Bound::Excluded(k), Order::Descending) => key_cmp(key, k).is_lt(),
        (Bound::Unbounded, Order::Descending) => true,
    }
}

impl<'g> LeafEdits<'g> {
    /// Orders `key` against edit `e`, whose key is `edit_key`, by the edit's prefix kept.
    #[inline]
    fn cmp_edit(&self, key: &[u8], e: usize, edit_key: &[u8]) -> std::cmp::Ordering {
        wide_prefix(key)
            .cmp(&self.wides[e])
            .then_with(|| tail_cmp(key, edit_key))
    }

    /// Calls `emit` on the records from `start` on in `order` until it returns false.
    fn walk(
        &self,
        start: Bound<&[u8]>,
        order: Order,
        emit: &mut impl FnMut(&'g [u8], Value<'g>) -> bool,
    ) {
        let (base, edits) = (self.base, &self.edits[..self.len]);
        let base_record = |b: usize| {
            let (record, key_len) = base.record(b);
            (&record[..key_len], Value::AfterKey(record))
        };
        // Base records and edits before these indexes lie below the start.
        let mut b =
            match (start, order) {
                // A page entered by its side link: from its low key on, no search.
                (Bound::Included(k), Order::Ascending) if key_eq(k, base.low()) => 0,
                (Bound::Included(k), Order::Ascending)
                | (Bound::Excluded(k), Order::Descending) => base.count_below(k, false),
                (Bound::Excluded(k), Order::Ascending)
                | (Bound::Included(k), Order::Descending) => base.count_below(k, true),
                (Bound::Unbounded, Order::Ascending) => 0,
                (Bound::Unbounded, Order::Descending) => self.cut,
            }
            .min(self.cut);
        let mut e = edits.partition_point(|&(k, _)| start_below(start, order, k));
        match order {
            Order::Ascending => loop {
                let take_base = match (b < self.cut, edits.get(e)) {
                    (false, None) => return,
                    (true, None) => Some(true),
                    (false, Some(_)) => Some(false),
                    (true, Some(&(ek, _))) => match self.cmp_edit(base.key(b), e, ek) {
                        std::cmp::Ordering::Less => Some(true),
                        std::cmp::Ordering::Greater => Some(false),
                        std::cmp::Ordering::Equal => {
                            b += 1; // the edit replaces the base record
                            Some(false)
                        }
                    },
                };
                if take_base == Some(true) {
                    let (key, value) = base_record(b);
                    if !emit(key, value) {
                        return;
                    }
                    b += 1;
                } else {
                    let (ek, ev) = edits[e];
                    e += 1;
                    if let Some(v) = ev {
                        if !emit(ek, Value::Alone(v)) {
                            return;
                        }
                    }
                }
            },
            Order::Descending => loop {
                let take_base = match (b > 0, e > 0) {
                    (false, false) => return,
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => match self.cmp_edit(base.key(b - 1), e - 1, edits[e - 1].0) {
                        std::cmp::Ordering::Greater => true,
                        std::cmp::Ordering::Less => false,
                        std::cmp::Ordering::Equal => {
                            b -= 1; // the edit replaces the base record
                            false
                        }
                    },
                };
                if take_base {
                    b -= 1;
                    let (key, value) = base_record(b);
                    if !emit(key, value) {
                        return;
                    }
                } else {
                    e -= 1;
                    if let (ek, Some(v)) = edits[e] {
                        if !emit(ek, Value::Alone(v)) {
                            return;
                        }
                    }
                }
            },
        }
    }
}

/// Calls `emit` on the folded view's records from `start` on in `order` until it returns
/// false.
fn walk_view<'g>(
    records: &[(&'g [u8], &'g [u8])],
    start: Bound<&[u8]>,
    order: Order,
    emit: &mut impl FnMut(&'g [u8], Value<'g>) -> bool,
) {
    let at = records.partition_point(|&(k, _)| start_below(start, order, k));
    match order {
        Order::Ascending => {
            for &(k, v) in &records[at..] {
                if !emit(k, Value::Alone(v)) {
                    return;
                }
            }
        }
        Order::Descending => {
            for &(k, v) in records[..at].iter().rev() {
                if !emit(k, Value::Alone(v)) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forest_core::Index;

    #[test]
    fn a_hinted_batch_copies_no_more_than_the_hint() {
        // Goal: `scan_hinted` sizes a scan's batches by its hint: a scan that stops on its
        // `hint`-th record copies no record past it (without the hint the first batch copies
        // [`SCAN_BUDGET_FIRST`]; this failed before `scan_hinted` was overridden). Method:
        // 2 000 keys in pages of up to 128 records; scans of 1, 5 and 10 records from every
        // 37th key in both orders, each followed by a look at this thread's buffer, which
        // holds the scan's last batch.
        let tree = BwTree::new();
        for i in 0..2_000u32 {
            tree.upsert(&i.to_be_bytes(), &[7; 100]).unwrap();
        }
        let mut whole_batches = 0;
        for order in [Order::Ascending, Order::Descending] {
            for start in (0..2_000u32).step_by(37) {
                for hint in [1, 5, 10] {
                    let start = start.to_be_bytes();
                    let (lower, upper) = match order {
                        Order::Ascending => (Bound::Included(&start[..]), Bound::Unbounded),
                        Order::Descending => (Bound::Unbounded, Bound::Included(&start[..])),
                    };
                    let mut seen = 0;
                    tree.scan_hinted(lower, upper, order, hint, &mut |_, _| {
                        seen += 1;
                        if seen == hint {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    });
                    let left = match order {
                        Order::Ascending => 2_000 - u32::from_be_bytes(start),
                        Order::Descending => u32::from_be_bytes(start) + 1,
                    };
                    assert_eq!(seen, hint.min(left as usize));
                    let buffers = ScanBuffers::take();
                    let copied = buffers.copied.ends.len();
                    assert!(
                        copied <= hint,
                        "{order:?}: {copied} records copied, hint {hint}"
                    );
                    whole_batches += usize::from(copied == hint);
                    buffers.give_back();
                }
            }
        }
        assert!(whole_batches > 0, "some scans lie within one page");
    }

    #[test]
    fn wide_compare_orders_like_slices() {
        // Goal: `key_cmp_wide`, `wide_prefix` + `tail_cmp` and the sort in `leaf_edits` order
        // keys exactly as byte slices do. Method: keys around the 8- and 16-byte boundaries,
        // with zero bytes where padding could hide a difference, and YCSB-like keys; every pair
        // compared against `Ord for [u8]`.
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for len in [1, 7, 8, 9, 15, 16, 17, 23, 24] {
            for fill in [0u8, b'5', 0xff] {
                let mut key = vec![b'u'; len];
                key[len - 1] = fill;
                keys.push(key.clone());
                key.push(0);
                keys.push(key);
            }
        }
        keys.push(b"user1234567890123456789".to_vec());
        keys.push(b"user1234567890123456788".to_vec());
        keys.push(b"user12345678901234567890".to_vec());
        keys.push(b"user123456789012".to_vec());
        keys.push(b"user123456789012\0".to_vec());
        for a in &keys {
            for b in &keys {
                assert_eq!(key_cmp_wide(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}
