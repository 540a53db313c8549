//! Page consolidation (Bw-tree §III-B) and the merged view of a page state it builds on.
//!
//! A view folds a chain into the page's current records, sorted: the newest delta for a key
//! wins, deletes drop the key, and records at or above the newest split delta's separator are
//! gone to the side link's page (§IV-A "Consolidations": "For pages with split deltas,
//! consolidation involves creating a new base page containing records with keys less than the
//! separator key in the split delta"). Index-term deltas are insertions of (separator, child).
//!
//! Consolidation is done by the thread that noticed the long chain, after its own operation;
//! a failed CAS abandons the new page and is not retried (§III-B). A leaf whose chain holds
//! only insert, modify and delete deltas over a base page of uniform records (the common case)
//! takes a fast path that copies the base page's unchanged runs wholesale
//! ([`BasePage::with_edits`]) instead of folding a view record by record.

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_llama::flush::FlushDelta;
use forest_llama::Pid;

use crate::base_page::{key_cmp, key_eq, key_prefix, BasePage, Edit};
use crate::delta::{Kind, Lsn48, Node, Record};
use crate::BwTree;

/// A page's records at one state, borrowed from the chain.
pub(crate) struct View<'g> {
    pub(crate) records: Vec<(&'g [u8], &'g [u8])>,
    pub(crate) low: &'g [u8],
    pub(crate) high: Option<&'g [u8]>,
    pub(crate) side_link: Pid,
}

/// A record delta left out of a view because its LSN is above the ESL the view was taken at
/// (Bw-tree §V-A).
#[derive(Clone, Copy)]
pub(crate) struct Held<'g> {
    pub(crate) key: &'g [u8],
    /// The value, `None` for a delete.
    pub(crate) value: Option<&'g [u8]>,
    pub(crate) lsn: u64,
}

/// Folds the chain from `node` into a sorted view.
pub(crate) fn view(node: &Node) -> View<'_> {
    view_at(node, u64::MAX).0
}

/// Folds the chain from `node` into a sorted view of the record deltas with LSN <= `esl`
/// (and every other delta), and returns every record delta with LSN above `esl` apart,
/// newest first (§V-A: consolidation and flushes keep those out). All of them, not the
/// newest per key: a later ESL between two held LSNs of one key needs the older one. Per
/// key, LSN order is chain order (the store orders two writes of a key), so a key's held
/// deltas are newer than all of its deltas in the view.
pub(crate) fn view_at(node: &Node, esl: u64) -> (View<'_>, Vec<Held<'_>>) {
    // Newest first: (key, value or None for a delete).
    let mut deltas: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(node.delta_count as usize);
    let mut held: Vec<Held<'_>> = Vec::new();
    // The page's bounds come from the newest split or merge delta, else the base page.
    let (high, side_link) = node.bounds();
    // Entries older than a split or merge delta hold only keys below its separator: the rest
    // moved to the split-off page, or is superseded by the absorbed page's state. (A merge
    // often sits on the very split that made the absorbed page, whose base below still has
    // stale copies of the moved records.)
    let mut limit = high;
    let below = |key: &[u8], limit: Option<&[u8]>| limit.is_none_or(|l| key_cmp(key, l).is_lt());
    let mut current = node;
    let base = loop {
        // Each entry is kept only if no newer split or merge cut it off.
        let entry = match &current.kind {
            Kind::Base(page) => break page,
            Kind::Insert(r) | Kind::Modify(r) => Some((r.key(), Some(r.value()))),
            Kind::IndexTerm { term, .. } => Some((term.key(), Some(term.value()))),
            Kind::Delete(key, _) => Some((&**key, None)),
            Kind::IndexTermDelete { separator, .. } => Some((&**separator, None)),
            Kind::Split { separator, .. } => {
                if below(separator, limit) {
                    limit = Some(separator);
                }
                None
            }
            // The absorbed page's records are older than the deltas above the merge and
            // disjoint from those below it (§IV-B: its state "is now logically part of L").
            Kind::NodeMerge(merge) => {
                let (right, right_held) = view_at(merge.right(), esl);
                // Before the absorbed page's records join `deltas`: only the deltas above
                // the merge are newer than its held ones.
                held.extend(
                    right_held
                        .into_iter()
                        .filter(|h| below(h.key, limit) && !folded_newer(&deltas, h.key)),
                );
                deltas.extend(
                    right
                        .records
                        .into_iter()
                        .filter(|(k, _)| below(k, limit))
                        .map(|(k, v)| (k, Some(v))),
                );
                if below(&merge.separator, limit) {
                    limit = Some(&merge.separator);
                }
                None
            }
            Kind::RemoveNode { .. } | Kind::Flush(..) => None,
        };
        if let Some((key, value)) = entry {
            if below(key, limit) {
                let lsn = current.lsn();
                if lsn > esl {
                    // Shadowed by a newer folded write of the key (one whose LSN is lower,
                    // e.g. an `Index` write's 0): re-created on top, it would undo that write.
                    if !folded_newer(&deltas, key) {
                        held.push(Held { key, value, lsn });
                    }
                } else {
                    deltas.push((key, value));
                }
            }
        }
        current = current.next().expect("a chain ends in a base page");
    };
    // Stable sort keeps the newest delta first among equal keys; dedup keeps that one.
    deltas.sort_by(|a, b| key_cmp(a.0, b.0));
    deltas.dedup_by(|later, earlier| key_eq(later.0, earlier.0));
    let mut records = Vec::with_capacity(base.len() + deltas.len());
    let mut d = deltas.into_iter().peekable();
    // The base page is the oldest entry: the smallest cut applies to it.
    let cut = limit.map_or(base.len(), |l| base.count_below(l, false));
    // The next delta's key prefix: base records below it need no full comparison.
    let next_prefix = |d: &mut std::iter::Peekable<std::vec::IntoIter<(&[u8], _)>>| {
        d.peek().map_or(u64::MAX, |(dk, _)| key_prefix(dk))
    };
    let mut next = next_prefix(&mut d);
    base.for_each_record_below(cut, |bk, bv| {
        if key_prefix(bk) < next {
            records.push((bk, bv));
            return;
        }
        // Deltas for keys up to this one come first; one for this very key replaces it.
        while let Some(&(dk, dv)) = d.peek() {
            let order = key_cmp(dk, bk);
            if order.is_gt() {
                break;
            }
            d.next();
            next = next_prefix(&mut d);
            if let Some(v) = dv {
                records.push((dk, v));
            }
            if order.is_eq() {
                return;
            }
        }
        records.push((bk, bv));
    });
    records.extend(d.filter_map(|(dk, dv)| Some((dk, dv?))));
    let view = View {
        records,
        low: base.low(),
        high,
        side_link,
    };
    (view, held)
}

/// Whether `deltas` (the folded entries newer than the one being looked at) hold `key`.
/// Linear: asked only for deltas above ESL, which exist only with an ESL source.
fn folded_newer(deltas: &[(&[u8], Option<&[u8]>)], key: &[u8]) -> bool {
    deltas.iter().any(|(k, _)| key_eq(k, key))
}

/// The flush delta a consolidation at `esl` of the chain from `node` puts on the new base
/// page: the chain's newest one, so that the page keeps naming its newest piece (a
/// mapping-table checkpoint records it, forest-llama `checkpoint.rs`), and whether it is then
/// *behind* ([`Kind::Flush`]): the new base page holds writes no flush wrote, so the next
/// flush is an image. Not behind only if the consolidation folds deltas that flushes already
/// wrote, so that the new base page equals the page's LSS state (the next flush stays
/// incremental). Behind if the newest flush delta is, if the chain holds a structure delta
/// (not a plain leaf chain), or if it would fold a delta no flush wrote: one above the newest
/// flush delta, or one below it that it held back (LSN above its ESL, kept in its annotation)
/// and that is now at or below `esl`. `None` if the chain has no flush delta.
pub(crate) fn carried_flush(node: &Node, esl: u64) -> Option<(FlushDelta, bool)> {
    let mut flushed: Option<(FlushDelta, bool)> = None;
    // Whether a delta folded so far (newest first) makes the new base page behind.
    let mut dirty = false;
    let mut current = Some(node);
    while let Some(n) = current {
        match &n.kind {
            Kind::Base(_) => break,
            Kind::Insert(_) | Kind::Modify(_) | Kind::Delete(..) => {
                let lsn = n.lsn();
                let unflushed = flushed.is_none_or(|(f, _)| lsn > f.annotation);
                dirty |= unflushed && lsn <= esl;
            }
            Kind::Flush(f, behind) => {
                if flushed.is_none() {
                    flushed = Some((*f, *behind));
                }
            }
            // A merged page's frozen state (`right`) is not this page's: its pieces are not.
            _ => dirty = true,
        }
        current = n.next();
    }
    flushed.map(|(f, behind)| (f, behind || dirty))
}

/// A new page state: `page` (at `level`), topped by a flush delta for `flushed` if given,
/// (behind if its bool says so), then by the `held` deltas (newest first, as [`view_at`] returns them; installed oldest
/// first, so the newest ends on top). A held write becomes an insert or a modify as its key
/// is absent or present at that point; a held delete of an absent key changes nothing at any
/// ESL and is dropped.
pub(crate) fn build_state(
    level: u32,
    page: BasePage,
    flushed: Option<(FlushDelta, bool)>,
    held: &[Held<'_>],
) -> Owned<Node> {
    // Each node is leaked into the next one, which owns it from then on (`gc.rs` frees the
    // chain as a whole, or `drop_unpublished` if it is never installed).
    fn push(top: Box<Node>, record_count: u32, kind: Kind) -> Box<Node> {
        let below: &Node = Box::leak(top);
        Box::new(Node::delta(below, record_count, kind))
    }
    let mut count = u32::try_from(page.len()).expect("page record count fits u32");
    // Whether each held key is on the page below the delta about to be pushed.
    let mut present: std::collections::BTreeMap<&[u8], bool> = held
        .iter()
        .map(|h| (h.key, page.search(h.key).is_ok()))
        .collect();
    let mut top = Box::new(Node::base(level, page));
    if let Some((f, behind)) = flushed {
        top = push(top, count, Kind::Flush(f, behind));
    }
    for h in held.iter().rev() {
        let here = present
            .get_mut(h.key)
            .expect("every held key was looked up");
        let was_present = std::mem::replace(here, h.value.is_some());
        let kind = match (h.value, was_present) {
            (Some(v), true) => Kind::Modify(Record::with_lsn(h.key, v, h.lsn)),
            (Some(v), false) => {
                count += 1;
                Kind::Insert(Record::with_lsn(h.key, v, h.lsn))
            }
            (None, true) => {
                count -= 1;
                Kind::Delete(h.key.into(), Lsn48::new(h.lsn))
            }
            (None, false) => continue,
        };
        top = push(top, count, kind);
    }
    Owned::from(top)
}

/// The record deltas of a chain of at most [`EDITS_MAX`] that holds nothing else (the common
/// leaf case), sorted by key with the newest per key kept, and its base page; `None` for any
/// other chain. Gathered on the stack: a consolidation follows most writes on small pages
/// (readers' threshold), so it allocates nothing but the new page.
fn record_edits(node: &Node, esl: u64) -> Option<(&BasePage, Edits<'_>)> {
    if node.delta_count as usize > EDITS_MAX {
        return None;
    }
    let mut edits = Edits {
        items: [(&[], None); EDITS_MAX],
        len: 0,
    };
    let mut current = node;
    let base = loop {
        let edit = match &current.kind {
            Kind::Base(page) => break page,
            Kind::Insert(r) | Kind::Modify(r) => (r.key(), Some(r.value())),
            Kind::Delete(key, _) => (&key[..], None),
            _ => return None,
        };
        if current.lsn() > esl {
            return None; // held above ESL: the folding path keeps it on top
        }
        // delta_count bounds the chain's length, checked above.
        edits.items[edits.len] = edit;
        edits.len += 1;
        current = current.next()?;
    };
    let items = &mut edits.items[..edits.len];
    // Stable sort (insertion sort at this length: no allocation) keeps the newest delta first
    // among equal keys; the dedup below keeps that one.
    items.sort_by(|a, b| key_cmp(a.0, b.0));
    let mut kept = 0;
    for i in 0..items.len() {
        if kept == 0 || !key_eq(items[kept - 1].0, items[i].0) {
            items[kept] = items[i];
            kept += 1;
        }
    }
    edits.len = kept;
    Some((base, edits))
}

/// The deltas between the top of `node`'s chain and its base page that a consolidation now
/// would put back on top at most: every record delta above `esl` and one flush delta (a merged
/// page's held deltas are not counted, so this errs toward consolidating).
fn staying_on_top(node: &Node, esl: u64) -> u32 {
    let mut held = 0;
    let mut flush = 0;
    let mut current = Some(node);
    while let Some(n) = current {
        match n.kind {
            Kind::Base(_) => break,
            Kind::Flush(..) => flush = 1,
            _ if n.lsn() > esl => held += 1,
            _ => {}
        }
        current = n.next();
    }
    held + flush
}

/// The record deltas (inserts, modifies, deletes) in `node`'s chain above its newest flush
/// delta, or above its base page if none: the writes its next flush has to write.
fn unflushed_record_deltas(node: &Node) -> u32 {
    let mut records = 0;
    let mut current = Some(node);
    while let Some(n) = current {
        match n.kind {
            Kind::Base(_) | Kind::Flush(..) => break,
            Kind::Insert(_) | Kind::Modify(_) | Kind::Delete(..) => records += 1,
            _ => {}
        }
        current = n.next();
    }
    records
}

/// The longest chain of record deltas consolidated through [`record_edits`]; longer ones (rare:
/// above the writers' threshold) fold a full view.
pub(crate) const EDITS_MAX: usize = 16;

/// Record edits gathered from a chain, newest per key, sorted by key.
struct Edits<'a> {
    items: [Edit<'a>; EDITS_MAX],
    len: usize,
}

impl<'a> std::ops::Deref for Edits<'a> {
    type Target = [Edit<'a>];

    fn deref(&self) -> &[Edit<'a>] {
        &self.items[..self.len]
    }
}

/// The largest base page (bytes) a reader consolidates at the readers' threshold. Measured
/// between two points: pages of the paper's 16-byte records (2-3 KiB) gain from it on reads
/// and on the 5:1 synthetic mix, pages of Xbox-like records (about 110 KiB) lost 10-20 %
/// (docs/BENCHMARKS.md, bwtree section).
const READ_CONSOLIDATE_PAGE_BYTES_MAX: usize = 8 << 10;

/// How much longer a chain pages above [`READ_CONSOLIDATE_PAGE_BYTES_MAX`] keep before a
/// writer consolidates them (`BwTree::writers_threshold`). Measured on YCSB A, 100 000 keys, 2
/// threads (process CPU seconds for 1 M operations, 3 runs): threshold 4: 2.07; 8: 1.75; 16:
/// 1.63 (the skip list: 1.88).
const LARGE_PAGE_CHAIN_FACTOR: u32 = 4;

/// How much longer a chain a leaf sized in bytes keeps before a writer, or a reader,
/// consolidates it (`BwTree::writers_threshold`). Under the readers' threshold a ~4 KiB YCSB
/// leaf was copied after nearly every update (YCSB A and B +14 % instructions per operation
/// against 128-record leaves). Callgrind instructions per operation, one thread, 100 000 keys,
/// against main's 128-record leaves (docs/BENCHMARKS.md, "Issue 14: byte-sized leaves'
/// chains"): chains of 4 / 8 / 16: YCSB-A -7 / -20 / -25 %, B -8 / -6 / +1.5 %, C -12 / -7 /
/// +2 %, E -18 / -12 / -0.4 %.
const BYTE_LEAF_CHAIN_FACTOR: u32 = 2;

/// The longest chain a scan leaves on a leaf sized in bytes: past it, the scan that read the
/// leaf consolidates it (§III-B: the thread that noticed; §III-C: a scan reads every record of
/// a page, so a chain costs it most). Gets and writers keep [`BYTE_LEAF_CHAIN_FACTOR`]'s
/// longer chains, which YCSB-A's hot pages need. A scan reads a leaf many times per write
/// on scan-heavy workloads, and a delta is a pointer chase (a cache miss) per read, while a
/// consolidation is one copy per two writes at most: only record deltas above the newest
/// flush delta count (so a scan never folds a page no one wrote since its flush). It holds whatever
/// `consolidate_threshold` says (the threshold is the writers' and gets'; review rev-bwscan
/// F4). On an LSS each such fold makes the page's next flush a whole image, not a delta run
/// (rev-bwscan F3 measured 0.27 consolidations per update with main's rule, at most 0.5 here).
const SCAN_LEAF_CHAIN_MAX: u32 = 1;

/// Which read noticed a chain (`BwTree::consolidate_after`).
#[derive(Clone, Copy)]
enum Reader {
    /// A get, or a descent through an index page.
    Get,
    /// A scan's leaf.
    Scan,
}

impl BwTree {
    /// Replaces `state` of `pid` by a consolidated base page when its chain is longer than
    /// the writers' threshold (§III-B).
    pub(crate) fn consolidate_if_long<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) {
        // Checked first: most writes leave a short chain, and the base page is at its end.
        if node.delta_count <= self.config.consolidate_threshold {
            return;
        }
        let threshold = self.writers_threshold(node);
        self.consolidate_if_longer(pid, state, node, threshold, guard);
    }

    /// The writers' threshold for the page at `node`: the configured one, or for a base page
    /// above [`READ_CONSOLIDATE_PAGE_BYTES_MAX`] [`LARGE_PAGE_CHAIN_FACTOR`] times it, or for a
    /// leaf sized in bytes [`BYTE_LEAF_CHAIN_FACTOR`] times it (at most [`EDITS_MAX`]). A
    /// consolidation copies the whole page while a delta costs a read about one cache miss, so
    /// the chain that balances the two grows with the page (about as its square root): under
    /// YCSB A's zipfian updates of 100-byte values (16 KiB pages) writers consolidating every
    /// fourth delta spent their time copying hot pages.
    fn writers_threshold(&self, node: &Node) -> u32 {
        let threshold = self.config.consolidate_threshold;
        let factor = if node.base_page().heap_bytes() > READ_CONSOLIDATE_PAGE_BYTES_MAX {
            LARGE_PAGE_CHAIN_FACTOR
        } else if self.leaf_sized_in_bytes(node) {
            BYTE_LEAF_CHAIN_FACTOR
        } else {
            return threshold;
        };
        threshold
            .saturating_mul(factor)
            .min(EDITS_MAX as u32)
            .max(threshold)
    }

    /// Whether `node` is a leaf whose split limit its records' bytes set, below
    /// `max_records_per_page` (insert.rs `page_limits`, [`crate::LEAF_BYTES_MAX`]).
    fn leaf_sized_in_bytes(&self, node: &Node) -> bool {
        node.level == 0 && self.page_limits(node).0 < self.config.max_records_per_page
    }

    /// After a read of `state` (a get, a scan's page copy, a descent through an index page):
    /// consolidates the page when its chain is longer than the readers' threshold and its base
    /// page is small enough that the copy costs less than the delta walks it saves the next
    /// reads ([`READ_CONSOLIDATE_PAGE_BYTES_MAX`]); larger pages keep the writers' threshold.
    /// Returns the installed state, if it consolidated.
    pub(crate) fn consolidate_after_read<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) -> Option<Shared<'g, Node>> {
        self.consolidate_after(Reader::Get, pid, state, node, guard)
    }

    /// [`Self::consolidate_after_read`] for a scan's leaf: a leaf sized in bytes keeps at most
    /// [`SCAN_LEAF_CHAIN_MAX`] record deltas above its newest flush delta; other pages as after
    /// any read.
    pub(crate) fn consolidate_after_scan<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) -> Option<Shared<'g, Node>> {
        self.consolidate_after(Reader::Scan, pid, state, node, guard)
    }

    fn consolidate_after<'g>(
        &self,
        reader: Reader,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) -> Option<Shared<'g, Node>> {
        let read_threshold = self.config.read_consolidate_threshold;
        let least = match reader {
            Reader::Get => read_threshold,
            Reader::Scan => read_threshold.min(SCAN_LEAF_CHAIN_MAX),
        };
        if node.delta_count <= least {
            return None;
        }
        let sized_in_bytes = self.leaf_sized_in_bytes(node);
        let threshold = match reader {
            // A scan counts the record deltas above the newest flush delta only: folding a page
            // with at most one write since its flush would make the next flush a whole image
            // for one record (review rev-bwscan F1, F2). Past that the chain is longer than
            // SCAN_LEAF_CHAIN_MAX, so the fold below always runs.
            Reader::Scan if sized_in_bytes => {
                if unflushed_record_deltas(node) <= SCAN_LEAF_CHAIN_MAX {
                    return None;
                }
                SCAN_LEAF_CHAIN_MAX
            }
            _ if !sized_in_bytes
                && node.base_page().heap_bytes() <= READ_CONSOLIDATE_PAGE_BYTES_MAX =>
            {
                read_threshold
            }
            _ => self.writers_threshold(node),
        };
        self.consolidate_if_longer(pid, state, node, threshold, guard)
    }

    /// Replaces `state` of `pid` by a consolidated base page when its chain is longer than
    /// `threshold` (the writers' or the readers', see [`crate::BwTreeConfig`]). Returns the
    /// installed state, if it consolidated.
    pub(crate) fn consolidate_if_longer<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        threshold: u32,
        guard: &'g Guard,
    ) -> Option<Shared<'g, Node>> {
        // A frozen page (remove node delta on top) is never replaced: it is being merged.
        if node.delta_count <= threshold || matches!(node.kind, Kind::RemoveNode { .. }) {
            return None;
        }
        // Read after the state: ESL only grows, so it is at least any flush delta's in it.
        let esl = self.esl();
        // §V-A keeps deltas above ESL on top (and a flush delta may be re-created), so a chain
        // of only those folds to the same length: consolidate only when some delta can fold
        // (review rev1 F2: every read re-consolidated such a page). Without an ESL source
        // nothing is held.
        if esl != u64::MAX && node.delta_count <= staying_on_top(node, esl) {
            return None;
        }
        let page = match record_edits(node, esl) {
            Some((base, edits)) => base.with_edits(&edits),
            None => None,
        };
        let new_state = match page {
            Some(page) => {
                debug_assert_eq!(page.len(), node.record_count as usize);
                Node::base(node.level, page).into_owned()
            }
            None => {
                // §V-A: only deltas with LSN <= ESL are folded; the rest stay on top.
                let (v, held) = view_at(node, esl);
                let page = BasePage::build(v.low, v.high, v.side_link, v.records.iter().copied());
                build_state(node.level, page, carried_flush(node, esl), &held)
            }
        };
        debug_assert_eq!(new_state.record_count, node.record_count);
        self.stats.consolidate_attempts.incr();
        self.stats.cas_attempts.incr();
        match self.table.update_r(pid, state, new_state, guard) {
            Ok(installed) => {
                self.uncount_state(node);
                self.count_state(crate::gc::node_ref(installed));
                self.stats.consolidations.incr();
                Some(installed)
            }
            Err((abandoned, _)) => {
                // §III-B: "the thread abandons the operation by deallocating the new page".
                crate::gc::drop_unpublished(abandoned);
                self.stats.failed_consolidates.incr();
                self.stats.cas_failures.incr();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{NodeMerge, Record};

    fn leaf(records: &[(&[u8], &[u8])], high: Option<&[u8]>) -> Box<Node> {
        Box::new(Node::base(
            0,
            BasePage::build(b"", high, 7, records.iter().copied()),
        ))
    }

    // Goal: the view applies deltas newest first over the base page. Method: build a chain by
    // hand (insert, modify, delete, split) and compare the folded records.
    #[test]
    fn view_folds_deltas_newest_first_and_cuts_at_split() {
        let base = leaf(
            &[(b"a", b"1"), (b"c", b"3"), (b"e", b"5"), (b"g", b"7")],
            None,
        );
        let d1 = Box::new(Node::delta(&base, 5, Kind::Insert(Record::new(b"b", b"2"))));
        let d2 = Box::new(Node::delta(&d1, 5, Kind::Modify(Record::new(b"c", b"33"))));
        let d3 = Box::new(Node::delta(
            &d2,
            4,
            Kind::Delete(b"a".as_slice().into(), Default::default()),
        ));
        let d4 = Box::new(Node::delta(&d3, 5, Kind::Insert(Record::new(b"a", b"11"))));
        let d5 = Box::new(Node::delta(
            &d4,
            3,
            Kind::Split {
                separator: b"e".as_slice().into(),
                side_link: 9,
            },
        ));
        let v = view(&d5);
        let got: Vec<(&[u8], &[u8])> = v.records.clone();
        let want: Vec<(&[u8], &[u8])> = vec![(b"a", b"11"), (b"b", b"2"), (b"c", b"33")];
        assert_eq!(got, want);
        assert_eq!(v.high, Some(b"e".as_slice()));
        assert_eq!(v.side_link, 9);
        let before_split = view(&d4);
        assert_eq!(before_split.records.len(), 5);
        assert_eq!(before_split.side_link, 7);
        assert_eq!(d5.delta_count, 5);
    }

    // Goal: consolidation's fast path builds the same page as folding the view. Method: a
    // uniform base page of 0 to 40 records, then chains of 1 to 12 random inserts, modifies
    // and deletes (repeated keys, keys before the first and after the last, pages drained
    // empty); both builds are compared record by record. An edit of another shape, or an
    // empty result, must fall back (None).
    #[test]
    fn fast_path_matches_the_folded_view() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let keys: Vec<[u8; 8]> = (0..40u64).map(|i| (i * 2 + 1).to_be_bytes()).collect();
        let base_records: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &k[..])).collect();
        let (mut fast, mut fallback) = (0, 0);
        for round in 0..300 {
            // Each node links to the one before by address: keep them all alive here.
            let mut chain: Vec<Box<Node>> = vec![leaf(&base_records[..round % 41], Some(b"\xff"))];
            for _ in 0..1 + next(12) {
                let key = next(84).to_be_bytes();
                let top = chain.last().expect("a base page");
                let present = crate::get::lookup_found(top, &key).is_some();
                let count = top.record_count;
                let (kind, count) = match (next(3), present) {
                    (0, true) => (
                        Kind::Delete(key.as_slice().into(), Default::default()),
                        count - 1,
                    ),
                    (_, true) => (Kind::Modify(Record::new(&key, &[7; 8])), count),
                    (_, false) => (Kind::Insert(Record::new(&key, &key)), count + 1),
                };
                let delta = Box::new(Node::delta(top, count, kind));
                chain.push(delta);
            }
            let top = chain.last().expect("a chain");
            let v = view(top);
            let want = BasePage::build(v.low, v.high, v.side_link, v.records.iter().copied());
            let (base, edits) = record_edits(top, u64::MAX).expect("record deltas only");
            match base.with_edits(&edits) {
                Some(got) => {
                    fast += 1;
                    assert_eq!(got.len(), want.len(), "round {round}");
                    assert_eq!(got.len(), top.record_count as usize, "round {round}");
                    for i in 0..want.len() {
                        assert_eq!(got.key(i), want.key(i), "round {round}");
                        assert_eq!(got.value(i), want.value(i), "round {round}");
                        assert_eq!(got.search(want.key(i)), Ok(i), "round {round}");
                    }
                    assert_eq!(got.low(), want.low());
                    assert_eq!(got.high(), want.high());
                    assert_eq!(got.side_link(), want.side_link());
                }
                None => {
                    fallback += 1;
                    assert!(want.len() == 0 || base.len() == 0, "round {round}");
                }
            }
        }
        assert!(
            fast > 200 && fallback > 0,
            "{fast} fast, {fallback} fallbacks"
        );
        let base = BasePage::build(b"", None, 7, base_records.iter().copied());
        let odd: Vec<Edit<'_>> = vec![(b"short", Some(b"v"))];
        assert!(base.with_edits(&odd).is_none(), "another shape falls back");
    }

    // Goal (regression): a merge on top of the split that made the absorbed page must not
    // bring back the stale copies of moved records in the left page's base. Method: base
    // [a b c d], split at c, the right page's frozen state [c' (d deleted)], merged back.
    #[test]
    fn view_of_merge_over_split_ignores_stale_base_records() {
        let base = leaf(
            &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")],
            None,
        );
        let split = Box::new(Node::delta(
            &base,
            2,
            Kind::Split {
                separator: b"c".as_slice().into(),
                side_link: 9,
            },
        ));
        let right = leaf(&[(b"c", b"3"), (b"d", b"4")], None);
        let right_mod = Box::new(Node::delta(
            &right,
            2,
            Kind::Modify(Record::new(b"c", b"33")),
        ));
        let right_del = Box::new(Node::delta(
            &right_mod,
            1,
            Kind::Delete(b"d".as_slice().into(), Default::default()),
        ));
        let merge = NodeMerge::new(b"c", &right_del, None, 11);
        let merged = Box::new(Node::delta(&split, 3, Kind::NodeMerge(merge)));
        let newer = Box::new(Node::delta(
            &merged,
            4,
            Kind::Insert(Record::new(b"e", b"5")),
        ));
        let v = view(&newer);
        let want: Vec<(&[u8], &[u8])> =
            vec![(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"e", b"5")];
        assert_eq!(v.records, want);
        assert_eq!(v.high, None);
        assert_eq!(v.side_link, 11);
        assert_eq!(crate::get::lookup_found(&newer, b"d"), None);
        assert_eq!(
            crate::get::lookup_found(&newer, b"c"),
            Some(b"33".as_slice())
        );
    }
}
