//! Page states: base pages and the delta records prepended to them (Bw-tree §III-A, §IV-A).
//!
//! A page state is a chain `delta -> delta -> ... -> base page`, newest first, reached from the
//! page's mapping-table word. A base page is a sorted, contiguous vector of records (leaf:
//! key -> value; index node: separator -> child PID as 8 little-endian bytes) with the page's
//! low key, high key and side link (§III-A "Elastic Virtual Pages"). Deltas:
//!
//! | kind | level | meaning |
//! |------|-------|---------|
//! | `Insert` / `Modify` | leaf | the record (key, value) is now on the page (§III-A) |
//! | `Delete` | leaf | the key is no longer on the page (§III-A) |
//! | `Split` | any | keys >= separator moved to the side link's page (§IV-A "Child Split") |
//! | `IndexTerm` | index | keys in [separator, high) go to child (§IV-A "Parent Update") |
//! | `RemoveNode` | any | the page is being merged into its left sibling (§IV-B "Marking for Delete") |
//! | `NodeMerge` | any | the right sibling's state is part of this page from separator up (§IV-B "Merging Children") |
//! | `IndexTermDelete` | index | separator is no longer a boundary: its keys belong to the child left of it (§IV-B "Parent Update") |
//!
//! Unsafe lives here only. Invariants:
//! - A node is immutable once published by a CAS or by `install_new`.
//! - An installed node owns the state its `next` points to: the chain is freed as a whole by
//!   [`free_chain`] (via [`PageState::reclaim`], after an epoch drains), and a node whose CAS
//!   failed is freed alone (its `next` still belongs to the page).
//! - Two exceptions make a page state a tree (§IV-B): a `RemoveNode` delta does not own its
//!   `next` (the removed page's frozen state), which the left sibling's installed `NodeMerge`
//!   delta owns through `right`; a withdrawn remove (see merge.rs) gives it back to its page.
//!   So a frozen state is freed exactly once: with the left sibling's chain.
//! - Every node of a state read under a guard stays allocated until that guard unpins, because
//!   a chain is only reclaimed after it was swapped out of the table and the epoch drained.
//! - Every node of a chain has the level of its base page; `delta_count` is the number of
//!   deltas from it down to the base page; `record_count` is the number of records (leaf) or
//!   index entries (index node) the page holds at this state.

use crossbeam_epoch::{Guard, Shared};
use forest_llama::{MappingTable, PageState, Pid};

/// The side link of the rightmost page of a level.
pub(crate) const NO_PID: Pid = Pid::MAX;

/// One element of a page state.
pub(crate) struct Node {
    /// The older state this delta was prepended to; null for a base page.
    next: *const Node,
    /// Deltas between this node and the base page (0 for a base page).
    pub(crate) delta_count: u32,
    /// Records (leaf) or index entries (index node) on the page at this state.
    pub(crate) record_count: u32,
    /// 0 for leaves, parents one more than their children.
    pub(crate) level: u32,
    pub(crate) kind: Kind,
}

// SAFETY: a published node is immutable, and the raw `next` pointer is only dereferenced under
// an epoch guard (see the module invariants), so sharing and sending nodes across threads is
// as safe as sharing the boxed data they own.
unsafe impl Send for Node {}
// SAFETY: as for Send: no interior mutability, immutable after publication.
unsafe impl Sync for Node {}

/// What a node says about the page.
pub(crate) enum Kind {
    Base(BasePage),
    Insert(Record),
    Modify(Record),
    Delete(Box<[u8]>),
    Split {
        separator: Box<[u8]>,
        side_link: Pid,
    },
    IndexTerm {
        term: Record,
        high: Option<Box<[u8]>>,
    },
    RemoveNode,
    NodeMerge(NodeMerge),
    IndexTermDelete {
        separator: Box<[u8]>,
    },
}

/// A node merge delta: the removed right sibling's frozen state, now part of this page.
pub(crate) struct NodeMerge {
    /// The right page's low key: keys from here on are searched in `right`.
    pub(crate) separator: Box<[u8]>,
    /// The right page's frozen state (below its remove node delta); owned by this delta once
    /// installed.
    right: *const Node,
    /// The right page's high key, now this page's.
    pub(crate) high: Option<Box<[u8]>>,
    /// The right page's side link, now this page's.
    pub(crate) side_link: Pid,
}

impl NodeMerge {
    pub(crate) fn new(separator: &[u8], right: &Node, high: Option<&[u8]>, side_link: Pid) -> Self {
        Self {
            separator: separator.into(),
            right,
            high: high.map(Into::into),
            side_link,
        }
    }

    /// The right page's frozen state.
    #[inline]
    pub(crate) fn right(&self) -> &Node {
        // SAFETY: `right` points to a frozen state that this delta owns once installed, or that
        // its page's remove node delta still links to before; either way it lives as long as
        // the state this delta is reached from (module invariants).
        unsafe { &*self.right }
    }
}

/// A key and value in one allocation.
pub(crate) struct Record {
    bytes: Box<[u8]>,
    key_len: usize,
}

impl Record {
    pub(crate) fn new(key: &[u8], value: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(key.len() + value.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        Self {
            bytes: bytes.into_boxed_slice(),
            key_len: key.len(),
        }
    }

    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    #[inline]
    pub(crate) fn value(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }
}

/// Where one record of a base page lies in its data block.
#[derive(Clone, Copy)]
struct Slot {
    offset: usize,
    key_len: u32,
    value_len: u32,
}

/// A consolidated page: records sorted by key in one contiguous block (§III-A, §III-B).
pub(crate) struct BasePage {
    /// The smallest key the page may hold; empty for the leftmost page of a level.
    pub(crate) low: Box<[u8]>,
    /// Keys on the page are below this; `None` for the rightmost page of a level.
    pub(crate) high: Option<Box<[u8]>>,
    /// The right sibling (B-link side link), [`NO_PID`] for the rightmost page.
    pub(crate) side_link: Pid,
    data: Box<[u8]>,
    slots: Box<[Slot]>,
}

impl BasePage {
    /// Builds a base page from records sorted by key, without duplicates.
    pub(crate) fn build<'a>(
        low: &[u8],
        high: Option<&[u8]>,
        side_link: Pid,
        records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone,
    ) -> Self {
        let total: usize = records.clone().map(|(k, v)| k.len() + v.len()).sum();
        let mut data = Vec::with_capacity(total);
        let mut slots = Vec::with_capacity(records.len());
        for (key, value) in records {
            slots.push(Slot {
                offset: data.len(),
                // Keys and values are within the forest-core limits, far below u32::MAX.
                key_len: u32::try_from(key.len()).expect("key length within KEY_BYTES_MAX"),
                value_len: u32::try_from(value.len()).expect("value length within VALUE_BYTES_MAX"),
            });
            data.extend_from_slice(key);
            data.extend_from_slice(value);
        }
        let page = Self {
            low: low.into(),
            high: high.map(Into::into),
            side_link,
            data: data.into_boxed_slice(),
            slots: slots.into_boxed_slice(),
        };
        debug_assert!(
            (1..page.len()).all(|i| page.key(i - 1) < page.key(i)),
            "sorted, unique"
        );
        page
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let slot = self.slots[index];
        &self.data[slot.offset..slot.offset + slot.key_len as usize]
    }

    #[inline]
    pub(crate) fn value(&self, index: usize) -> &[u8] {
        let slot = self.slots[index];
        let start = slot.offset + slot.key_len as usize;
        &self.data[start..start + slot.value_len as usize]
    }

    /// Binary search for `key`: `Ok(index)` when present, else `Err(insertion index)`.
    #[inline]
    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        self.slots.binary_search_by(|slot| {
            self.data[slot.offset..slot.offset + slot.key_len as usize].cmp(key)
        })
    }

    /// The number of leading records whose key satisfies `pred` (which must hold for a prefix).
    #[inline]
    pub(crate) fn partition_point(&self, pred: impl Fn(&[u8]) -> bool) -> usize {
        self.slots.partition_point(|slot| {
            pred(&self.data[slot.offset..slot.offset + slot.key_len as usize])
        })
    }

    fn heap_bytes(&self) -> usize {
        self.low.len()
            + self.high.as_ref().map_or(0, |h| h.len())
            + self.data.len()
            + self.slots.len() * std::mem::size_of::<Slot>()
    }
}

/// The child PID stored as an index entry's value.
#[inline]
pub(crate) fn decode_pid(value: &[u8]) -> Pid {
    let bytes: [u8; 8] = value.try_into().expect("index entries hold 8-byte PIDs");
    Pid::from_le_bytes(bytes)
}

impl Node {
    /// A base page node.
    pub(crate) fn base(level: u32, page: BasePage) -> Self {
        Self {
            next: std::ptr::null(),
            delta_count: 0,
            record_count: u32::try_from(page.len()).expect("page record count fits u32"),
            level,
            kind: Kind::Base(page),
        }
    }

    /// A delta on top of `next` (the state the caller read), with the page's new record count.
    pub(crate) fn delta(next: &Node, record_count: u32, kind: Kind) -> Self {
        // A merged page is searched through both chains, so both count toward consolidation.
        let merged = match &kind {
            Kind::NodeMerge(merge) => merge.right().delta_count + 1,
            _ => 0,
        };
        Self {
            next,
            delta_count: next.delta_count + 1 + merged,
            record_count,
            level: next.level,
            kind,
        }
    }

    /// The older state below this delta, `None` for a base page.
    #[inline]
    pub(crate) fn next(&self) -> Option<&Node> {
        // SAFETY: `next` is null or points to the state this node owns (module invariants),
        // which lives at least as long as this node is reachable by the caller.
        unsafe { self.next.as_ref() }
    }

    /// The base page at the end of the chain.
    pub(crate) fn base_page(&self) -> &BasePage {
        let mut node = self;
        loop {
            match &node.kind {
                Kind::Base(page) => return page,
                _ => node = node.next().expect("a chain ends in a base page"),
            }
        }
    }

    /// The page's high key and side link at this state: from the newest split or merge delta,
    /// else from the base page.
    pub(crate) fn bounds(&self) -> (Option<&[u8]>, Pid) {
        let mut node = self;
        loop {
            match &node.kind {
                Kind::Split {
                    separator,
                    side_link,
                } => return (Some(separator), *side_link),
                Kind::NodeMerge(merge) => return (merge.high.as_deref(), merge.side_link),
                Kind::Base(page) => return (page.high.as_deref(), page.side_link),
                _ => node = node.next().expect("a chain ends in a base page"),
            }
        }
    }

    /// Bytes this node takes, alone.
    pub(crate) fn own_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.kind {
                Kind::Base(page) => page.heap_bytes(),
                Kind::Insert(r) | Kind::Modify(r) => r.bytes.len(),
                Kind::Delete(key) => key.len(),
                Kind::Split { separator, .. } => separator.len(),
                Kind::IndexTerm { term, high } => {
                    term.bytes.len() + high.as_ref().map_or(0, |h| h.len())
                }
                Kind::RemoveNode => 0,
                Kind::NodeMerge(merge) => {
                    merge.separator.len()
                        + merge.high.as_ref().map_or(0, |h| h.len())
                        + merge.right().chain_bytes()
                }
                Kind::IndexTermDelete { separator } => separator.len(),
            }
    }

    /// Bytes the whole chain from this node takes.
    pub(crate) fn chain_bytes(&self) -> usize {
        let mut total = 0;
        let mut node = Some(self);
        while let Some(n) = node {
            total += n.own_bytes();
            if matches!(n.kind, Kind::RemoveNode) {
                break; // the frozen state below belongs to the left sibling's merge delta
            }
            node = n.next();
        }
        total
    }
}

impl PageState for Node {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the caller's duty (unreachable, reclaimed once) covers the whole chain, which
        // this state owns.
        unsafe { free_chain(ptr) }
    }
}

/// Frees `ptr` and the chain it owns.
///
/// # Safety
/// `ptr` is an installed state that no thread can reach any more, freed once.
unsafe fn free_chain(mut ptr: *mut Node) {
    while !ptr.is_null() {
        // SAFETY: each node of an unreachable chain was boxed by crossbeam's `Owned` and is
        // owned only by its predecessor (or the caller for the first), so it is freed once.
        let node = unsafe { crossbeam_epoch::Owned::from_raw(ptr) }.into_box();
        ptr = match &node.kind {
            // A remove node delta does not own the frozen state below it.
            Kind::RemoveNode => std::ptr::null_mut(),
            Kind::NodeMerge(merge) => {
                // SAFETY: an installed merge delta owns the right page's frozen state, which
                // is unreachable with it and freed only here.
                unsafe { free_chain(merge.right.cast_mut()) };
                node.next.cast_mut()
            }
            _ => node.next.cast_mut(),
        };
    }
}

/// Reads `pid`'s state as a node reference valid for the guard's lifetime; `None` when the
/// page was freed (merged away) after the caller found its PID.
#[inline]
pub(crate) fn read_node<'g>(
    table: &MappingTable<Node>,
    pid: Pid,
    guard: &'g Guard,
) -> Option<(Shared<'g, Node>, &'g Node)> {
    let state = table.read(pid, guard);
    // SAFETY: the table holds only states built from `Owned<Node>`; a state read under `guard`
    // is reclaimed only after `guard` unpins (§III-D), so the reference lives long enough.
    let node = unsafe { state.as_ref() }?;
    Some((state, node))
}

/// Turns a non-null state (installed by this thread, or read from the table under the same
/// guard) into a node reference.
#[inline]
pub(crate) fn node_ref<'g>(state: Shared<'g, Node>) -> &'g Node {
    // SAFETY: the state came from the table or an `Owned<Node>` installed under the same guard,
    // so it is live until the guard unpins.
    unsafe { state.as_ref() }.expect("an installed state is not null")
}
