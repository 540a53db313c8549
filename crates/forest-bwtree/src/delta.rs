//! Delta records and page states (Bw-tree §III-A, §IV-A, §IV-B).
//!
//! A page state is a chain `delta -> delta -> ... -> base page`, newest first, reached from the
//! page's mapping-table word; the base page is `base_page.rs`'s. A delta is one node
//! allocation: records of up to [`INLINE_BYTES_MAX`] bytes live inside it. Deltas:
//!
//! | kind | level | meaning |
//! |------|-------|---------|
//! | `Insert` / `Modify` | leaf | the record (key, value) is now on the page (§III-A) |
//! | `Delete` | leaf | the key is no longer on the page (§III-A) |
//! | `Split` | any | keys >= separator moved to the side link's page (§IV-A "Child Split") |
//! | `IndexTerm` | index | keys in [separator, high) go to child (§IV-A "Parent Update") |
//! | `RemoveNode` | any | the page is being merged into its left sibling (§IV-B "Marking for Delete"); once `committed`, the merge can no longer be withdrawn (merge.rs) |
//! | `NodeMerge` | any | the right sibling's state is part of this page from separator up (§IV-B "Merging Children") |
//! | `IndexTermDelete` | index | separator is no longer a boundary: its keys belong to the child left of it (§IV-B "Parent Update") |
//! | `Flush` | any | the state below was written to the LSS at an address (§V-B, TSBw §II-D; flush.rs) |
//!
//! Insert, modify and delete deltas carry the LSN of their update (§III-A: "All update deltas
//! contain an LSN provided by the client"; 0 when the caller gave none), in 48 bits kept in
//! the record's padding so that a delta stays one 64-byte node ([`LSN_MAX`]).
//!
//! Invariants:
//! - A node is immutable once published by a CAS or by `install_new`.
//! - An installed node owns the state its `next` points to; a whole chain is freed together
//!   after an epoch drains (`gc.rs`).
//! - Two exceptions make a page state a tree (§IV-B): a `RemoveNode` delta does not own its
//!   `next` (the removed page's frozen state), which the left sibling's installed `NodeMerge`
//!   delta owns through `right`; a withdrawn remove (see merge.rs) gives it back to its page.
//!   A merge is withdrawn (CAS from the uncommitted remove node delta back to the frozen
//!   state) or committed (CAS from it to a committed one, before the node merge delta), and
//!   one CAS on the same word decides which.
//! - Every node of a chain has the level of its base page; `delta_count` is the number of
//!   deltas from it down to the base page; `record_count` is the number of records (leaf) or
//!   index entries (index node) the page holds at this state.
//! - A node's `stamp` tells it from an earlier node at the same address (`gc.rs` recycles
//!   allocations).
//!
//! Unsafe here: nodes are `Send` and `Sync`, and a node's `next` and a node merge delta's
//! `right` are dereferenced; both are sound by the ownership invariants above for as long as
//! the state they are reached from is (a guard keeps it: `gc.rs`).

use forest_llama::flush::FlushDelta;
use forest_llama::Pid;

use crate::base_page::{copy_bytes, key_eq, BasePage};

/// The largest LSN a delta holds: 2^48 - 1 (28 years of a million updates a second).
pub const LSN_MAX: u64 = (1 << 48) - 1;

/// An LSN in 48 bits, 2-byte aligned, so it fills a record's padding (see [`Record`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct Lsn48([u16; 3]);
const _: () = assert!(std::mem::size_of::<Lsn48>() == 6);

impl Lsn48 {
    /// `lsn`, which the caller checked against [`LSN_MAX`].
    pub(crate) fn new(lsn: u64) -> Self {
        debug_assert!(lsn <= LSN_MAX, "LSN {lsn} above LSN_MAX");
        let b = lsn.to_le_bytes();
        Self([
            u16::from_le_bytes([b[0], b[1]]),
            u16::from_le_bytes([b[2], b[3]]),
            u16::from_le_bytes([b[4], b[5]]),
        ])
    }

    pub(crate) fn get(self) -> u64 {
        let [a, b, c] = self.0.map(u16::to_le_bytes);
        u64::from_le_bytes([a[0], a[1], b[0], b[1], c[0], c[1], 0, 0])
    }
}

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
    /// Tells this node from an earlier one at the same address ([`next_stamp`]): a scan that
    /// compares a page's state after unpinning must not take a recycled allocation for the
    /// state it copied.
    pub(crate) stamp: u32,
    pub(crate) kind: Kind,
}

/// Stamps for new nodes: the thread's number in the top 8 bits, a per-thread count below, so
/// two nodes at one address share a stamp only if one thread made 2^24 nodes in between and
/// the allocation came back to the same page (and no shared counter is written per node).
fn next_stamp() -> u32 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static STAMP: Cell<Option<u32>> = const { Cell::new(None) };
    }
    STAMP
        .try_with(|stamp| {
            let current = stamp
                .get()
                .unwrap_or_else(|| NEXT_THREAD.fetch_add(1, Ordering::Relaxed) << 24);
            let next = (current & 0xFF00_0000) | (current.wrapping_add(1) & 0x00FF_FFFF);
            stamp.set(Some(next));
            current
        })
        // During thread exit: any stamp; a scan then merely rebuilds its copy more often.
        .unwrap_or(0)
}

// SAFETY: a published node is immutable, and the raw `next` pointer is only dereferenced under
// an epoch guard (see the module invariants), so sharing and sending nodes across threads is
// as safe as sharing the boxed data they own.
unsafe impl Send for Node {}
// SAFETY: as for Send: no interior mutability, immutable after publication.
unsafe impl Sync for Node {}

// A node (header and kind) fits one cache line's worth of allocation.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() <= 64);

/// What a node says about the page.
///
/// Kept to 40 bytes so that a node is one 64-byte allocation: the rare, larger payloads
/// (index-term and node-merge deltas) are boxed, records of up to [`INLINE_BYTES_MAX`] bytes
/// live inline.
pub(crate) enum Kind {
    Base(BasePage),
    Insert(Record),
    Modify(Record),
    Delete(Bytes, Lsn48),
    Split {
        separator: Box<[u8]>,
        side_link: Pid,
    },
    IndexTerm {
        term: Box<Record>,
        high: Option<Box<[u8]>>,
    },
    /// The page is frozen (§IV-B "Marking for Delete"). `committed`: the merge passed its
    /// parent update and can no longer be withdrawn (merge.rs); the frozen state is the same.
    RemoveNode {
        committed: bool,
    },
    NodeMerge(Box<NodeMerge>),
    IndexTermDelete {
        separator: Box<[u8]>,
    },
    /// The state below was flushed (flush.rs): the piece's address, the highest LSN in it,
    /// and as annotation the ESL the flush used. `true`: *behind*, the base page right below
    /// holds writes no piece has (a consolidation folded unflushed or structure deltas), so
    /// the address only names the page's newest piece (for checkpoints and `prev` links) and
    /// the next flush is a whole image.
    Flush(FlushDelta, bool),
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
    pub(crate) fn new(
        separator: &[u8],
        right: &Node,
        high: Option<&[u8]>,
        side_link: Pid,
    ) -> Box<Self> {
        Box::new(Self {
            separator: separator.into(),
            right,
            high: high.map(Into::into),
            side_link,
        })
    }

    /// The right page's frozen state.
    #[inline]
    pub(crate) fn right(&self) -> &Node {
        // SAFETY: `right` points to a frozen state that this delta owns once installed, or that
        // its page's remove node delta still links to before; either way it lives as long as
        // the state this delta is reached from (module invariants).
        unsafe { &*self.right }
    }

    /// The right page's frozen state as the raw pointer this delta owns once installed, for
    /// freeing it with this delta's chain (`gc.rs`).
    #[inline]
    pub(crate) fn right_ptr(&self) -> *mut Node {
        self.right.cast_mut()
    }
}

/// The most bytes a delta keeps inside its node: an 8-byte key with an 8-byte value (the
/// paper's synthetic records) fits, so such a delta is one allocation.
pub(crate) const INLINE_BYTES_MAX: usize = 22;

/// A byte string, inline when short, else boxed.
pub(crate) enum Bytes {
    Inline {
        len: u8,
        buf: [u8; INLINE_BYTES_MAX],
    },
    /// `key_hash` is [`key_hash`] of the key the bytes start with (a record's key, a delete's
    /// whole string), kept in the node's padding: a lookup walking a chain tells another key's
    /// delta from the node alone, without the miss on the boxed bytes (issue 14, YCSB A).
    Heap { key_hash: u32, bytes: Box<[u8]> },
}
const _: () = assert!(INLINE_BYTES_MAX < u8::MAX as usize);
// The hash lives in the padding beside the tag: the heap form is no larger than the inline one.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Bytes>() == 24);

/// The most bytes of a key [`key_hash`] reads: its last ones (keys of one page share their
/// first bytes), so the hash costs a few multiplies even for a 16 KiB key.
const KEY_HASH_BYTES_MAX: usize = 64;

/// A 32-bit hash of `key` (its length and last [`KEY_HASH_BYTES_MAX`] bytes, 8 at a time,
/// FxHash's step): equal keys have equal hashes, so a differing hash proves two keys differ.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut hash = key.len() as u64;
    let tail = &key[key.len().saturating_sub(KEY_HASH_BYTES_MAX)..];
    let mut chunks = tail.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("an 8-byte chunk"));
        hash = (hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    // The high half: FxHash's low bits mix least.
    (hash >> 32) as u32
}

/// A key a lookup compares with the keys of a chain's deltas; its [`key_hash`] is computed at
/// the first boxed delta key of the same length, if any.
pub(crate) struct KeyProbe<'k> {
    pub(crate) key: &'k [u8],
    hash: Option<u32>,
}

impl<'k> KeyProbe<'k> {
    #[inline]
    pub(crate) fn new(key: &'k [u8]) -> Self {
        Self { key, hash: None }
    }

    #[inline]
    fn hash(&mut self) -> u32 {
        *self.hash.get_or_insert_with(|| key_hash(self.key))
    }
}

impl Bytes {
    /// The concatenation of `parts`; the first is the key (see [`Bytes::Heap`]).
    fn concat(parts: [&[u8]; 2]) -> Self {
        let total = parts[0].len() + parts[1].len();
        if total <= INLINE_BYTES_MAX {
            let mut buf = [0u8; INLINE_BYTES_MAX];
            copy_bytes(&mut buf[..parts[0].len()], parts[0]);
            copy_bytes(&mut buf[parts[0].len()..total], parts[1]);
            Self::Inline {
                len: total as u8, // total <= INLINE_BYTES_MAX < u8::MAX
                buf,
            }
        } else {
            Self::Heap {
                key_hash: key_hash(parts[0]),
                bytes: parts.concat().into_boxed_slice(),
            }
        }
    }

    /// Heap bytes beyond the node.
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Heap { bytes, .. } => bytes.len(),
        }
    }

    /// Whether the first `key_len` bytes are `probe`'s key: a boxed string is read only when
    /// the length and the hash match.
    #[inline]
    fn starts_with_key(&self, key_len: usize, probe: &mut KeyProbe<'_>) -> bool {
        if key_len != probe.key.len() {
            return false;
        }
        match self {
            Self::Inline { len, buf } => key_eq(&buf[..usize::from(*len)][..key_len], probe.key),
            Self::Heap { key_hash, bytes } => {
                *key_hash == probe.hash() && key_eq(&bytes[..key_len], probe.key)
            }
        }
    }

    /// Whether these bytes are `probe`'s key (a delete delta's key).
    #[inline]
    pub(crate) fn is_key(&self, probe: &mut KeyProbe<'_>) -> bool {
        let len = match self {
            Self::Inline { len, .. } => usize::from(*len),
            Self::Heap { bytes, .. } => bytes.len(),
        };
        self.starts_with_key(len, probe)
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, buf } => &buf[..usize::from(*len)],
            Self::Heap { bytes, .. } => bytes,
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(bytes: &[u8]) -> Self {
        Self::concat([bytes, &[]])
    }
}

/// A key and value in one byte string (inline in the node when short), and the LSN of the
/// update that wrote it (0: none; index entries have none).
pub(crate) struct Record {
    bytes: Bytes,
    key_len: u16,
    lsn: Lsn48,
}
// The LSN lives in the padding: a record is as large as without it.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Record>() == 32);
// Key lengths fit the u16 of `Record::key_len` and of a base page slot.
const _: () = assert!(forest_core::limits::KEY_BYTES_MAX <= u16::MAX as usize);

impl Record {
    pub(crate) fn new(key: &[u8], value: &[u8]) -> Self {
        Self::with_lsn(key, value, 0)
    }

    /// A record written by the update with LSN `lsn` (at most [`LSN_MAX`]).
    pub(crate) fn with_lsn(key: &[u8], value: &[u8], lsn: u64) -> Self {
        Self {
            bytes: Bytes::concat([key, value]),
            key_len: u16::try_from(key.len()).expect("key length within KEY_BYTES_MAX"),
            lsn: Lsn48::new(lsn),
        }
    }

    #[inline]
    pub(crate) fn lsn(&self) -> u64 {
        self.lsn.get()
    }

    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.bytes[..usize::from(self.key_len)]
    }

    #[inline]
    pub(crate) fn value(&self) -> &[u8] {
        &self.bytes[usize::from(self.key_len)..]
    }

    /// Whether this record's key is `probe`'s key, read from the node alone unless the
    /// length and hash match ([`Bytes::Heap`]).
    #[inline]
    pub(crate) fn key_is(&self, probe: &mut KeyProbe<'_>) -> bool {
        self.bytes.starts_with_key(usize::from(self.key_len), probe)
    }
}

impl Node {
    /// A base page node.
    pub(crate) fn base(level: u32, page: BasePage) -> Self {
        Self {
            next: std::ptr::null(),
            delta_count: 0,
            record_count: u32::try_from(page.len()).expect("page record count fits u32"),
            level,
            stamp: next_stamp(),
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
            stamp: next_stamp(),
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

    /// The older state below this delta as the raw pointer this node owns (null for a base
    /// page), for freeing the chain (`gc.rs`).
    #[inline]
    pub(crate) fn next_ptr(&self) -> *mut Node {
        self.next.cast_mut()
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
                Kind::Base(page) => return (page.high(), page.side_link()),
                _ => node = node.next().expect("a chain ends in a base page"),
            }
        }
    }

    /// The LSN of a record update delta (insert, modify, delete); 0 for any other node.
    #[inline]
    pub(crate) fn lsn(&self) -> u64 {
        match &self.kind {
            Kind::Insert(r) | Kind::Modify(r) => r.lsn(),
            Kind::Delete(_, lsn) => lsn.get(),
            _ => 0,
        }
    }

    /// Bytes this node takes, alone.
    pub(crate) fn own_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.kind {
                Kind::Base(page) => page.heap_bytes(),
                Kind::Insert(r) | Kind::Modify(r) => r.bytes.heap_bytes(),
                Kind::Delete(key, _) => key.heap_bytes(),
                Kind::Split { separator, .. } => separator.len(),
                Kind::IndexTerm { term, high } => {
                    std::mem::size_of::<Record>()
                        + term.bytes.heap_bytes()
                        + high.as_ref().map_or(0, |h| h.len())
                }
                Kind::RemoveNode { .. } => 0,
                Kind::NodeMerge(merge) => {
                    std::mem::size_of::<NodeMerge>()
                        + merge.separator.len()
                        + merge.high.as_ref().map_or(0, |h| h.len())
                        + merge.right().chain_bytes()
                }
                Kind::IndexTermDelete { separator } => separator.len(),
                Kind::Flush(..) => 0,
            }
    }

    /// Bytes the whole chain from this node takes.
    pub(crate) fn chain_bytes(&self) -> usize {
        let mut total = 0;
        let mut node = Some(self);
        while let Some(n) = node {
            total += n.own_bytes();
            if matches!(n.kind, Kind::RemoveNode { .. }) {
                break; // the frozen state below belongs to the left sibling's merge delta
            }
            node = n.next();
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::get::lookup_found;

    // Goal: a lookup tells record and delete deltas apart by key length and hash, and still
    // compares the keys when both match. Method: a chain of boxed records (100-byte values)
    // whose keys have one length; two of them differ only in their first byte, so their hashes
    // (over the last 64 bytes) are equal; look up each key, a key of no delta, and a deleted
    // key whose boxed delete shares the hash of a live one.
    #[test]
    fn lookup_compares_keys_behind_equal_hashes() {
        let long = |first: u8, last: u8| {
            let mut key = vec![b'k'; 100];
            key[0] = first;
            key[99] = last;
            key
        };
        let (a, b, c, d) = (
            long(b'a', b'1'),
            long(b'b', b'1'),
            long(b'a', b'2'),
            long(b'c', b'1'),
        );
        assert_eq!(
            key_hash(&a),
            key_hash(&b),
            "the hash reads only the last 64 bytes"
        );
        assert_ne!(key_hash(&a), key_hash(&c));
        let value = |n: u8| vec![n; 100];
        let base = Box::new(Node::base(
            0,
            BasePage::build(
                b"",
                None,
                crate::base_page::NO_PID,
                [(&d[..], &value(4)[..])].into_iter(),
            ),
        ));
        let d1 = Box::new(Node::delta(
            &base,
            2,
            Kind::Insert(Record::new(&a, &value(1))),
        ));
        let d2 = Box::new(Node::delta(
            &d1,
            3,
            Kind::Insert(Record::new(&b, &value(2))),
        ));
        let d3 = Box::new(Node::delta(
            &d2,
            4,
            Kind::Insert(Record::new(&c, &value(3))),
        ));
        // Deletes `d`, whose hash equals `a`'s and `b`'s.
        let d4 = Box::new(Node::delta(
            &d3,
            3,
            Kind::Delete(d.as_slice().into(), Lsn48::default()),
        ));
        assert!(matches!(&d4.kind, Kind::Delete(Bytes::Heap { .. }, _)));
        assert_eq!(lookup_found(&d4, &a), Some(&value(1)[..]));
        assert_eq!(lookup_found(&d4, &b), Some(&value(2)[..]));
        assert_eq!(lookup_found(&d4, &c), Some(&value(3)[..]));
        assert_eq!(lookup_found(&d4, &d), None, "deleted");
        assert_eq!(
            lookup_found(&d3, &d),
            Some(&value(4)[..]),
            "in the base page"
        );
        assert_eq!(lookup_found(&d4, &long(b'e', b'1')), None);
        // Short keys stay inline and compare as before.
        let e = Box::new(Node::delta(&d4, 4, Kind::Modify(Record::new(b"k", b"v"))));
        assert_eq!(lookup_found(&e, b"k"), Some(&b"v"[..]));
        assert_eq!(lookup_found(&e, &a), Some(&value(1)[..]));
    }
}
