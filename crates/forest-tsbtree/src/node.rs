//! Page states: delta chains over base pages (TSBw-tree §II-C, §III-B; Bw-tree §III-A), and
//! the crate's only `unsafe`.
//!
//! A page state is a chain `delta -> ... -> base`, newest first, installed in the mapping
//! table. Leaf deltas: a [`Kind::Version`] (a new version, never an overwrite: §III-B), a
//! [`Kind::KeySplit`] and a [`Kind::TimeSplit`] (the split deltas of Algorithm 1 line 10).
//! Index deltas: the split deltas [`Kind::IndexSplit`] and [`Kind::IndexTimeSplit`], and the
//! index-entry deltas of Algorithm 1 line 17, [`Kind::KeyTerm`] and [`Kind::TimeTerm`].
//!
//! Invariants (what makes the `unsafe` below sound):
//! - A node is immutable once published by a CAS or `install_new`.
//! - A delta owns the state its `next` points to; a whole chain is freed together, by
//!   [`PageState::reclaim`] on its head, once the mapping table retired that head (Update-R,
//!   Free) and the epoch drained, or when the table drops. Nothing else frees a node.
//! - So every node reachable from a state read under a guard stays allocated until that guard
//!   unpins: [`state_ref`] and [`Node::next`] hand out references bounded by that guard.

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_llama::{MappingTable, PageState, Pid};

use crate::version::Record;

/// Timestamp of a current page's end: "infinity" (§III-A1).
pub(crate) const INFINITY: u64 = u64::MAX;

/// One element of a page state.
pub(crate) struct Node {
    /// The older state this delta was prepended to; null for a base page.
    next: *const Node,
    /// Deltas from here down to the base.
    pub delta_count: u32,
    /// Leaf: versions in the page's view; index: entries in its view.
    pub record_count: u32,
    /// 0 for leaves.
    pub level: u32,
    /// Leaf: an upper bound on the marshalled bytes of the view's versions (exact at a base;
    /// a split delta does not lower it), for the split by bytes on LSS-C (`storage.rs`).
    pub bytes: u64,
    /// Some state of this page has an image reserved in LSS-C (a flush delta here or below,
    /// kept across consolidations; `storage.rs` "Flush order").
    pub imaged: bool,
    /// A split or index-term delta since the page's newest image (a new page: true), kept
    /// across consolidations; cleared by a flush delta (`storage.rs` "Flush order").
    pub structure_unflushed: bool,
    pub kind: Kind,
}

// SAFETY: `next` is only read through `Node::next` under the chain-ownership invariant of the
// module doc; all other fields are plain owned data, so sharing and sending a node is sound.
unsafe impl Send for Node {}
// SAFETY: as for Send: nodes are immutable once published.
unsafe impl Sync for Node {}

/// What a node is.
pub(crate) enum Kind {
    /// A leaf base page (current or historical).
    Leaf(LeafBase),
    /// A new version of a key (§III-A1: an update inserts a version).
    Version(Record),
    /// Key split (§III-A2): keys `>= sep` are now on the current page `q`.
    KeySplit { sep: Box<[u8]>, q: Pid },
    /// Time split (§III-A3) at `t`: versions before `t` are on the historical page `h`; the
    /// page keeps the versions alive at `t` and starts at `t`.
    TimeSplit { t: u64, h: Pid },
    /// An index base page.
    Index(IndexBase),
    /// Index key split: keys `>= sep` are now on index page `q`.
    IndexSplit { sep: Box<[u8]>, q: Pid },
    /// Index time split at `t` (`time_split.rs`): the terms not alive from `t` on are on the
    /// historical index page `h`; the page keeps the terms alive at `t` and starts at `t`.
    IndexTimeSplit { t: u64, h: Pid },
    /// A new index term (Algorithm 1 line 17 after a key split).
    KeyTerm(Term),
    /// The index change of a time split: the current term of `cur` (key `key`) now leads to
    /// the historical page `hist`, and a new current term `(key, t, cur)` is added.
    TimeTerm {
        key: Box<[u8]>,
        t: u64,
        hist: Pid,
        cur: Pid,
    },
    /// LLAMA's flush delta (TSBw §II-D, `storage.rs`): the state below was written to LSS-C
    /// as one page image at the address it names; its annotation is the flush limit the image
    /// used (versions above it were held back). Changes nothing a search sees, so it may top
    /// a historical page too.
    Flush(forest_llama::flush::FlushDelta),
}

/// A leaf base page: a key range `[low, high)` and a time range `[start, end)` (§III-A1).
pub(crate) struct LeafBase {
    pub low: Box<[u8]>,
    /// None: no upper bound.
    pub high: Option<Box<[u8]>>,
    /// B-link side link to the right sibling (current pages only).
    pub side: Option<Pid>,
    /// The page holds every version alive at any time in `[start, end)` for its keys.
    pub start: u64,
    /// [`INFINITY`] for a current page, the split time for a historical one.
    pub end: u64,
    /// The latest historical page of this page's keys before `start` (forest's design: see
    /// `as_of.rs`); copied to the right page by a key split.
    pub history: Option<Pid>,
    /// Sorted by (key, timestamp), unique.
    pub records: Vec<Record>,
}

/// An index term `(key, timestamp, PID)` (§III-A1): the child holds keys from `key` (to the
/// next term's key) for times from `ts` (to the next term's time for that key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub key: Box<[u8]>,
    pub ts: u64,
    pub pid: Pid,
}

/// An index base page: key range `[low, high)` and time range `[start, end)` like a leaf's,
/// entries sorted by (key, ts).
pub(crate) struct IndexBase {
    pub low: Box<[u8]>,
    pub high: Option<Box<[u8]>>,
    /// B-link side link to the right sibling (current pages only).
    pub side: Option<Pid>,
    /// The page's terms route every time in `[start, end)` for its keys.
    pub start: u64,
    /// [`INFINITY`] for a current page, the split time for a historical one.
    pub end: u64,
    /// The latest historical index page of this page's keys before `start`; copied to the
    /// right page by a key split (as for leaves, `as_of.rs`).
    pub history: Option<Pid>,
    pub entries: Vec<Term>,
}

impl Node {
    /// A base node.
    pub fn base(kind: Kind, level: u32, record_count: usize) -> Owned<Node> {
        let bytes = match &kind {
            Kind::Leaf(b) => b.records.iter().map(record_bytes).sum(),
            _ => 0,
        };
        Owned::new(Node {
            next: std::ptr::null(),
            delta_count: 0,
            record_count: count(record_count),
            level,
            bytes,
            imaged: false,
            structure_unflushed: true,
            kind,
        })
    }

    /// A base node folding the state `head` (a consolidation): its flush-order flags carry
    /// over, since the fold changes no link.
    pub fn folded(head: &Node, kind: Kind, record_count: usize) -> Owned<Node> {
        let mut base = Self::base(kind, head.level, record_count);
        base.imaged = head.imaged;
        base.structure_unflushed = head.structure_unflushed;
        base
    }

    /// A delta over `head` (which the caller read from the page it will CAS).
    pub fn delta(
        head: &Node,
        head_ptr: Shared<'_, Node>,
        kind: Kind,
        record_count: usize,
    ) -> Owned<Node> {
        let bytes = match &kind {
            Kind::Version(r) => head.bytes.saturating_add(record_bytes(r)),
            _ => head.bytes,
        };
        let (imaged, structure_unflushed) = match &kind {
            Kind::Flush(_) => (true, false),
            Kind::Version(_) => (head.imaged, head.structure_unflushed),
            _ => (head.imaged, true),
        };
        Owned::new(Node {
            next: head_ptr.as_raw(),
            delta_count: head.delta_count.saturating_add(1),
            record_count: count(record_count),
            level: head.level,
            bytes,
            imaged,
            structure_unflushed,
            kind,
        })
    }

    /// The state below this delta (None at the base), valid as long as `self` is.
    #[inline]
    pub fn next(&self) -> Option<&Node> {
        // SAFETY: a delta owns its `next` (module doc), which is freed only together with
        // this node, so it lives at least as long as the borrow of `self`.
        unsafe { self.next.as_ref() }
    }

    /// This node and every node below it, newest first.
    pub fn chain(&self) -> impl Iterator<Item = &Node> {
        std::iter::successors(Some(self), |n| n.next())
    }

    /// The base page at the end of the chain.
    pub fn base_node(&self) -> &Node {
        let mut n = self;
        while let Some(next) = n.next() {
            n = next;
        }
        n
    }
}

/// A version's bytes in a leaf image, with a bound on its framing (`marshal.rs`).
pub(crate) fn record_bytes(r: &crate::version::Record) -> u64 {
    (r.key.len() + r.value.as_ref().map_or(0, |v| v.len()) + RECORD_FRAMING_BYTES) as u64
}

/// More than a version's framing in a leaf image takes (lengths, timestamp, flags, crc share).
const RECORD_FRAMING_BYTES: usize = 32;

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The node a state word points to, for as long as `guard` is pinned; None for an empty PID.
#[inline]
pub(crate) fn state_ref<'g>(state: Shared<'g, Node>, _guard: &'g Guard) -> Option<&'g Node> {
    // SAFETY: `state` was read from the mapping table under `guard`; the table retires states
    // only through the epoch (module doc), so the node stays allocated while `guard` is pinned.
    unsafe { state.as_ref() }
}

/// Reads `pid`'s state: the head pointer and the node.
#[inline]
pub(crate) fn read<'g>(
    table: &MappingTable<Node>,
    pid: Pid,
    guard: &'g Guard,
) -> Option<(Shared<'g, Node>, &'g Node)> {
    let state = table.read(pid, guard);
    state_ref(state, guard).map(|n| (state, n))
}

/// Frees a state this thread built and never published (a load whose install lost).
pub(crate) fn drop_unpublished(state: Owned<Node>) {
    let ptr = Box::into_raw(state.into_box());
    // SAFETY: `state` was never installed, so no other thread can reach it, and its chain
    // was built for it alone (module doc: a delta owns its `next`); reclaimed once, here.
    unsafe { Node::reclaim(ptr) };
}

impl PageState for Node {
    unsafe fn reclaim(ptr: *mut Self) {
        let mut ptr = ptr;
        while !ptr.is_null() {
            // SAFETY: the trait's contract for the head; for each later node, the head owned
            // it (module doc) and no other chain does, so each node is rebuilt and freed once.
            let node = unsafe { Owned::from_raw(ptr) };
            ptr = node.next.cast_mut();
            drop(node);
        }
    }
}
