//! Page states: base pages and the delta records prepended to them (Bw-tree §III-A, §IV-A).
//!
//! A page state is a chain `delta -> delta -> ... -> base page`, newest first, reached from the
//! page's mapping-table word. A base page is a sorted, contiguous vector of records (leaf:
//! key -> value; index node: separator -> child PID as 8 little-endian bytes) with the page's
//! low key, high key and side link (§III-A "Elastic Virtual Pages"), laid out for search
//! (see [`BasePage`]): one allocation with a dense array of 8-byte key prefixes, compared
//! first, and the keys and values in one arena. A delta is one node allocation: records of up
//! to [`INLINE_BYTES_MAX`] bytes live inside it. Deltas:
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
//!
//! Unsafe lives here only. Invariants:
//! - A node is immutable once published by a CAS or by `install_new`.
//! - An installed node owns the state its `next` points to: the chain is freed as a whole by
//!   [`free_chain`] (via [`PageState::reclaim`], after an epoch drains), and a node whose CAS
//!   failed is freed alone (its `next` still belongs to the page).
//! - Two exceptions make a page state a tree (§IV-B): a `RemoveNode` delta does not own its
//!   `next` (the removed page's frozen state), which the left sibling's installed `NodeMerge`
//!   delta owns through `right`; a withdrawn remove (see merge.rs) gives it back to its page.
//!   A merge is withdrawn (CAS from the uncommitted remove node delta back to the frozen
//!   state) or committed (CAS from it to a committed one, before the node merge delta), and
//!   one CAS on the same word decides which. So a frozen state is freed exactly once: with the
//!   left sibling's chain, with its page after a withdrawal, or, when the tree drops before
//!   the merge completed, with its page then (`BwTree::give_back_frozen_states`).
//! - A freed node's allocation may be reused for a new node by the thread that freed it
//!   ([`Node::into_owned`]): only after its contents were dropped, and only as a fresh node
//!   (never in the memory-tool build, `memcheck.rs`: there it is poisoned and freed).
//!   Pinned readers never see it (the node was unreachable before the epoch drained); code
//!   that compares addresses without a pin (scans) also compares the node's `stamp`.
//! - Every node of a state read under a guard stays allocated until that guard unpins, because
//!   a chain is only reclaimed after it was swapped out of the table and the epoch drained.
//! - A base page's prefix array holds [`key_prefix`] of each key, in key order; its slots
//!   (when present) hold increasing offsets that end at the arena's length.
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
    Delete(Bytes),
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
    Heap(Box<[u8]>),
}
const _: () = assert!(INLINE_BYTES_MAX < u8::MAX as usize);

impl Bytes {
    /// The concatenation of `parts`.
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
            Self::Heap(parts.concat().into_boxed_slice())
        }
    }

    /// Heap bytes beyond the node.
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Heap(bytes) => bytes.len(),
        }
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, buf } => &buf[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(bytes: &[u8]) -> Self {
        Self::concat([bytes, &[]])
    }
}

/// A key and value in one byte string (inline in the node when short).
pub(crate) struct Record {
    bytes: Bytes,
    key_len: u16,
}
// Key lengths fit the u16 of `Record::key_len` and of a base page slot.
const _: () = assert!(forest_core::limits::KEY_BYTES_MAX <= u16::MAX as usize);

impl Record {
    pub(crate) fn new(key: &[u8], value: &[u8]) -> Self {
        Self {
            bytes: Bytes::concat([key, value]),
            key_len: u16::try_from(key.len()).expect("key length within KEY_BYTES_MAX"),
        }
    }

    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.bytes[..usize::from(self.key_len)]
    }

    #[inline]
    pub(crate) fn value(&self) -> &[u8] {
        &self.bytes[usize::from(self.key_len)..]
    }
}

/// The first 8 bytes of `key`, zero-padded, as a big-endian number: comparing prefixes orders
/// keys as comparing the keys does, except that equal prefixes need the full keys.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        // Shifted in byte by byte: a variable-length copy would call memcpy.
        None => key.iter().enumerate().fold(0, |prefix, (i, &byte)| {
            prefix | u64::from(byte) << (56 - 8 * i)
        }),
    }
}

/// Orders two keys as slices do, comparing their 8-byte prefixes first: short keys need no
/// call to `memcmp`.
#[inline]
pub(crate) fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match key_prefix(a).cmp(&key_prefix(b)) {
        std::cmp::Ordering::Equal if a.len() <= 8 && b.len() <= 8 => a.len().cmp(&b.len()),
        std::cmp::Ordering::Equal => a.cmp(b),
        other => other,
    }
}

/// Whether two keys are equal, prefixes first (see [`key_cmp`]).
#[inline]
pub(crate) fn key_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && key_prefix(a) == key_prefix(b) && (a.len() <= 8 || a[8..] == b[8..])
}

/// Words before a base page's prefix array: the side link, and the low and high key lengths.
const HEADER_WORDS: usize = 2;
/// The high-key length word's value for "no high key" (a real key is at most 16 KiB).
const NO_HIGH: u64 = u32::MAX as u64;
/// The cache line size the prefix prefetch steps by (x86-64).
const CACHE_LINE_BYTES: usize = 64;
/// The most record bytes [`BasePage::prefetch`] fetches with the prefixes: a full page of
/// the paper's 16-byte records (128 x 16), about 32 lines more than the prefixes' 16.
const RECORD_PREFETCH_BYTES_MAX: usize = 2048;
/// Slot bits holding the key length; the rest hold the record's offset in the arena.
const SLOT_KEY_LEN_BITS: u32 = 16;

/// `dst.copy_from_slice(src)`, with 8 and 16 bytes (the common key and record sizes) copied
/// inline instead of by a call to `memcpy`, which costs more than the copy.
#[inline]
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    match (
        <&mut [u8; 8]>::try_from(&mut *dst),
        <&[u8; 8]>::try_from(src),
    ) {
        (Ok(d), Ok(s)) => *d = *s,
        _ => match (
            <&mut [u8; 16]>::try_from(&mut *dst),
            <&[u8; 16]>::try_from(src),
        ) {
            (Ok(d), Ok(s)) => *d = *s,
            _ => dst.copy_from_slice(src),
        },
    }
}

/// The bytes of `words`, to write a base page's arena.
#[inline]
fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 storage may hold any bytes, u8 needs no alignment, and the byte slice covers
    // exactly the words' memory under the same exclusive borrow.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// A change to one key of a page: its new value, or `None` for a delete.
pub(crate) type Edit<'a> = (&'a [u8], Option<&'a [u8]>);

/// `BasePage::shape` for a page whose records differ in key or value length.
const NOT_UNIFORM: u32 = u32::MAX;
// A uniform shape packs key length << 16 | value length; a real key length never makes it
// NOT_UNIFORM.
const _: () = assert!(forest_core::limits::KEY_BYTES_MAX < u16::MAX as usize);

/// A consolidated page: records sorted by key in one allocation (§III-A, §III-B).
///
/// Layout of `words`: a header ([`HEADER_WORDS`]), a dense array of the keys' 8-byte
/// prefixes ([`key_prefix`]) that a binary search probes first, then, unless all records have
/// the same key and value lengths, `len + 1` slots (offset << 16 | key length; the last holds
/// the end offset), then a byte arena with the low key, the high key and each record's key
/// and value back to back. The record count, the high key's prefix and the uniform record
/// shape sit in the node itself, so a search touches the node, the prefix array (fetched at
/// once) and, on a prefix tie or a hit, the record's bytes (and its slot if not uniform).
pub(crate) struct BasePage {
    words: Box<[u64]>,
    /// The high key's prefix; `u64::MAX` without a high key, so that no key prefix is above
    /// it and a tie is settled by [`Self::high`].
    high_prefix: u64,
    len: u32,
    /// Key length << 16 | value length when all records share them, else [`NOT_UNIFORM`]:
    /// then a record's place is computed and the page has no slots.
    shape: u32,
}

impl Drop for BasePage {
    fn drop(&mut self) {
        crate::page_buffers::give(std::mem::take(&mut self.words));
    }
}

impl BasePage {
    /// Builds a base page from records sorted by key, without duplicates.
    pub(crate) fn build<'a>(
        low: &[u8],
        high: Option<&[u8]>,
        side_link: Pid,
        records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone,
    ) -> Self {
        let len = records.len();
        let high_bytes = high.unwrap_or(&[]);
        let total = low.len()
            + high_bytes.len()
            + records
                .clone()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        let shape = records.clone().next().map_or(NOT_UNIFORM, |(key, value)| {
            let same = records
                .clone()
                .all(|(k, v)| k.len() == key.len() && v.len() == value.len());
            match u16::try_from(value.len()) {
                Ok(value_len) if same => ((key.len() as u32) << 16) | u32::from(value_len),
                _ => NOT_UNIFORM,
            }
        });
        let slot_count = if shape == NOT_UNIFORM { len + 1 } else { 0 };
        let arena_word = HEADER_WORDS + len + slot_count;
        let mut words = crate::page_buffers::take(arena_word + total.div_ceil(8));
        words[0] = side_link;
        words[1] = low.len() as u64 | (high.map_or(NO_HIGH, |h| h.len() as u64) << 32);
        let (head, arena_words) = words.split_at_mut(arena_word);
        let arena = bytes_mut(arena_words);
        let mut at = 0;
        let mut put = |at: &mut usize, bytes: &[u8]| {
            copy_bytes(&mut arena[*at..*at + bytes.len()], bytes);
            *at += bytes.len();
        };
        put(&mut at, low);
        put(&mut at, high_bytes);
        for (i, (key, value)) in records.enumerate() {
            head[HEADER_WORDS + i] = key_prefix(key);
            if slot_count > 0 {
                head[HEADER_WORDS + len + i] =
                    ((at as u64) << SLOT_KEY_LEN_BITS) | key.len() as u64;
            }
            put(&mut at, key);
            put(&mut at, value);
        }
        debug_assert_eq!(at, total, "the arena holds exactly the bytes counted");
        if slot_count > 0 {
            head[HEADER_WORDS + 2 * len] = (total as u64) << SLOT_KEY_LEN_BITS;
        }
        let page = Self {
            words,
            high_prefix: high.map_or(u64::MAX, key_prefix),
            len: u32::try_from(len).expect("page record count fits u32"),
            shape,
        };
        debug_assert!(
            (1..page.len()).all(|i| page.key(i - 1) < page.key(i)),
            "sorted, unique"
        );
        debug_assert_eq!(page.low(), low);
        debug_assert_eq!(page.high(), high);
        page
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// The right sibling (B-link side link), [`NO_PID`] for the rightmost page.
    #[inline]
    pub(crate) fn side_link(&self) -> Pid {
        self.words[0]
    }

    /// Words of slots: none for a uniform page.
    #[inline]
    fn slot_count(&self) -> usize {
        if self.shape == NOT_UNIFORM {
            self.len() + 1
        } else {
            0
        }
    }

    /// The arena: keys and values, after the header, prefixes and slots.
    #[inline]
    fn arena(&self) -> &[u8] {
        let words = &self.words[HEADER_WORDS + self.len() + self.slot_count()..];
        // SAFETY: the words are initialized u64s, every bit pattern is a valid u8, u8 needs no
        // alignment, and the byte slice covers exactly the words' memory, borrowed from self.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
    }

    /// The lengths of the low key and of the high key (`NO_HIGH` if none).
    #[inline]
    fn bound_lens(&self) -> (usize, u64) {
        ((self.words[1] & NO_HIGH) as usize, self.words[1] >> 32)
    }

    /// The smallest key the page may hold; empty for the leftmost page of a level.
    #[inline]
    pub(crate) fn low(&self) -> &[u8] {
        &self.arena()[..self.bound_lens().0]
    }

    /// Keys on the page are below this; `None` for the rightmost page of a level.
    #[inline]
    pub(crate) fn high(&self) -> Option<&[u8]> {
        let (low_len, high_len) = self.bound_lens();
        if high_len == NO_HIGH {
            return None;
        }
        Some(&self.arena()[low_len..low_len + high_len as usize])
    }

    /// Whether the page has a high key and `key` is at or above it (the key is elsewhere).
    #[inline]
    pub(crate) fn at_or_above_high(&self, key: &[u8]) -> bool {
        match key_prefix(key).cmp(&self.high_prefix) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => self.high().is_some_and(|high| key >= high),
        }
    }

    #[inline]
    fn prefixes(&self) -> &[u64] {
        &self.words[HEADER_WORDS..HEADER_WORDS + self.len()]
    }

    /// (offset in the arena, key length, value length) of record `index`.
    #[inline]
    fn slot(&self, index: usize) -> (usize, usize, usize) {
        if self.shape != NOT_UNIFORM {
            let (key_len, value_len) =
                ((self.shape >> 16) as usize, (self.shape & 0xFFFF) as usize);
            let (low_len, high_len) = self.bound_lens();
            let records = low_len
                + if high_len == NO_HIGH {
                    0
                } else {
                    high_len as usize
                };
            return (records + index * (key_len + value_len), key_len, value_len);
        }
        let decode = |word: u64| {
            (
                (word >> SLOT_KEY_LEN_BITS) as usize,
                (word & ((1 << SLOT_KEY_LEN_BITS) - 1)) as usize,
            )
        };
        let (offset, key_len) = decode(self.words[HEADER_WORDS + self.len() + index]);
        let (end, _) = decode(self.words[HEADER_WORDS + self.len() + index + 1]);
        (offset, key_len, end - offset - key_len)
    }

    #[inline]
    pub(crate) fn key(&self, index: usize) -> &[u8] {
        let (offset, key_len, _) = self.slot(index);
        self.arena_bytes(offset, key_len)
    }

    #[inline]
    pub(crate) fn value(&self, index: usize) -> &[u8] {
        let (offset, key_len, value_len) = self.slot(index);
        self.arena_bytes(offset + key_len, value_len)
    }

    /// `len` bytes at `offset` in the arena, sliced once from the whole allocation (a lookup's
    /// hot path: cheaper than slicing the arena first).
    #[inline]
    fn arena_bytes(&self, offset: usize, len: usize) -> &[u8] {
        let start = (HEADER_WORDS + self.len() + self.slot_count()) * 8 + offset;
        // SAFETY: the words are initialized u64s, every bit pattern is a valid u8, u8 needs no
        // alignment, and the byte slice covers exactly the words' memory, borrowed from self.
        let all = unsafe {
            std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.words.len() * 8)
        };
        &all[start..start + len]
    }

    /// Calls `visit` on each of the first `count` records in key order, walking the arena
    /// once (consolidation and views read whole pages).
    pub(crate) fn for_each_record_below<'a>(
        &'a self,
        count: usize,
        mut visit: impl FnMut(&'a [u8], &'a [u8]),
    ) {
        debug_assert!(count <= self.len());
        let arena = self.arena();
        let (low_len, high_len) = self.bound_lens();
        let start = low_len
            + if high_len == NO_HIGH {
                0
            } else {
                high_len as usize
            };
        if self.shape != NOT_UNIFORM {
            let (key_len, value_len) =
                ((self.shape >> 16) as usize, (self.shape & 0xFFFF) as usize);
            let stride = key_len + value_len;
            if stride == 0 {
                // Only one record can have an empty key and value.
                (0..count).for_each(|_| visit(&[], &[]));
                return;
            }
            for record in arena[start..start + count * stride].chunks_exact(stride) {
                let (key, value) = record.split_at(key_len);
                visit(key, value);
            }
            return;
        }
        let slots = &self.words[HEADER_WORDS + self.len()..HEADER_WORDS + self.len() + count + 1];
        for pair in slots.windows(2) {
            let offset = (pair[0] >> SLOT_KEY_LEN_BITS) as usize;
            let key_len = (pair[0] & ((1 << SLOT_KEY_LEN_BITS) - 1)) as usize;
            let end = (pair[1] >> SLOT_KEY_LEN_BITS) as usize;
            let (key, value) = arena[offset..end].split_at(key_len);
            visit(key, value);
        }
    }

    /// Asks the CPU to fetch the header and the whole prefix array at once: a binary search
    /// over a page not in cache then waits for about one memory access instead of one per
    /// probe (the branch-free search below cannot run ahead of its loads). A page of uniform
    /// records taking at most [`RECORD_PREFETCH_BYTES_MAX`] (as the paper's 8-byte ones) has
    /// its records fetched too, so that the record a hit reads is not one more dependent miss
    /// after the search. Leaves only: the few index pages stay cached, and there the
    /// prefetches cost more than they save.
    #[inline]
    pub(crate) fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            let start = self.words.as_ptr().cast::<i8>();
            let mut end = (HEADER_WORDS + self.len()) * 8;
            if self.shape != NOT_UNIFORM {
                let stride = (self.shape >> 16) as usize + (self.shape & 0xFFFF) as usize;
                let records = self.len() * stride;
                if records <= RECORD_PREFETCH_BYTES_MAX {
                    // The low and high keys come first in the arena: allow a line for them
                    // (a hint: a longer pair only leaves the last line unfetched).
                    end = (end + records + CACHE_LINE_BYTES).min(self.words.len() * 8);
                }
            }
            let mut offset = 0;
            while offset < end {
                // SAFETY: a prefetch is a hint that never faults; the address is in bounds.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        start.wrapping_add(offset),
                    )
                };
                offset += CACHE_LINE_BYTES;
            }
        }
    }

    /// Binary search for `key`: `Ok(index)` when present, else `Err(insertion index)`.
    ///
    /// A branch-free lower bound over the prefix array (std's `partition_point` selects
    /// without branching, so a probe never mispredicts), then full keys only for the records
    /// whose prefix ties with `key`'s: none or one for keys of up to 8 bytes, a binary
    /// search among them for keys that share longer prefixes.
    #[inline]
    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let prefix = key_prefix(key);
        let prefixes = self.prefixes();
        let first = prefixes.partition_point(|&p| p < prefix);
        if prefixes.get(first) != Some(&prefix) {
            return Err(first);
        }
        if self.shape != NOT_UNIFORM && (self.shape >> 16) as usize == key.len() && key.len() <= 8 {
            // Keys of one length of at most 8 bytes are equal when their prefixes are.
            return Ok(first);
        }
        if prefixes.get(first + 1) != Some(&prefix) {
            return match key_cmp(self.key(first), key) {
                std::cmp::Ordering::Equal => Ok(first),
                std::cmp::Ordering::Less => Err(first + 1),
                std::cmp::Ordering::Greater => Err(first),
            };
        }
        // Several records share the prefix: they are contiguous from `first`.
        let end = first + prefixes[first..].partition_point(|&p| p == prefix);
        let (mut lo, mut hi) = (first, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match key_cmp(self.key(mid), key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The number of records whose key is below `key` (`inclusive`: at or below).
    #[inline]
    pub(crate) fn count_below(&self, key: &[u8], inclusive: bool) -> usize {
        match self.search(key) {
            Ok(index) => index + usize::from(inclusive),
            Err(index) => index,
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// This page with `edits` applied (sorted by key, one per key; `None` deletes the key),
    /// built by copying the unchanged runs of prefixes and records wholesale: consolidation's
    /// fast path (§III-B) for a leaf whose chain holds only record deltas. `None` when the
    /// page and the edits do not share one record shape (the caller folds a full view), when
    /// there are more than [`crate::consolidate::EDITS_MAX`] edits, or when the result is empty.
    pub(crate) fn with_edits(&self, edits: &[Edit<'_>]) -> Option<BasePage> {
        if self.shape == NOT_UNIFORM || edits.len() > crate::consolidate::EDITS_MAX {
            return None;
        }
        let (key_len, value_len) = ((self.shape >> 16) as usize, (self.shape & 0xFFFF) as usize);
        let stride = key_len + value_len;
        if stride == 0
            || edits
                .iter()
                .any(|(k, v)| v.is_some_and(|v| k.len() != key_len || v.len() != value_len))
        {
            return None;
        }
        // Where each edit lands in this page, and the record count after them.
        let mut len = self.len();
        let mut places = [Ok(0); crate::consolidate::EDITS_MAX];
        for (&(key, value), slot) in edits.iter().zip(&mut places) {
            let place = self.search(key);
            match (place, value) {
                (Ok(_), None) => len -= 1,
                (Err(_), Some(_)) => len += 1,
                _ => {}
            }
            *slot = place;
        }
        if len == 0 {
            return None;
        }
        let (low_len, high_len) = self.bound_lens();
        let bounds_len = low_len
            + if high_len == NO_HIGH {
                0
            } else {
                high_len as usize
            };
        let arena_word = HEADER_WORDS + len;
        let mut words =
            crate::page_buffers::take(arena_word + (bounds_len + len * stride).div_ceil(8));
        words[..HEADER_WORDS].copy_from_slice(&self.words[..HEADER_WORDS]);
        let old_arena = self.arena();
        let (head, arena_words) = words.split_at_mut(arena_word);
        let prefixes = &mut head[HEADER_WORDS..];
        let arena = bytes_mut(arena_words);
        arena[..bounds_len].copy_from_slice(&old_arena[..bounds_len]);
        let old_records = &old_arena[bounds_len..bounds_len + self.len() * stride];
        let records = &mut arena[bounds_len..bounds_len + len * stride];
        // Copies old records [from, end) to the new page at `to`, advancing both.
        let old_prefixes = self.prefixes();
        let copy_run = |prefixes: &mut [u64],
                        records: &mut [u8],
                        from: &mut usize,
                        to: &mut usize,
                        end: usize| {
            let count = end - *from;
            prefixes[*to..*to + count].copy_from_slice(&old_prefixes[*from..end]);
            records[*to * stride..(*to + count) * stride]
                .copy_from_slice(&old_records[*from * stride..end * stride]);
            *from = end;
            *to += count;
        };
        // `from`: next old record to copy; `to`: next new record to write.
        let (mut from, mut to) = (0, 0);
        for (&(key, value), &place) in edits.iter().zip(&places) {
            let (index, present) = match place {
                Ok(index) => (index, true),
                Err(index) => (index, false),
            };
            copy_run(prefixes, records, &mut from, &mut to, index);
            if present {
                from += 1; // replaced or deleted
            }
            if let Some(value) = value {
                prefixes[to] = key_prefix(key);
                let record = &mut records[to * stride..(to + 1) * stride];
                copy_bytes(&mut record[..key_len], key);
                copy_bytes(&mut record[key_len..], value);
                to += 1;
            }
        }
        copy_run(prefixes, records, &mut from, &mut to, self.len());
        debug_assert_eq!(to, len, "every record written once");
        let page = Self {
            words,
            high_prefix: self.high_prefix,
            len: u32::try_from(len).expect("page record count fits u32"),
            shape: self.shape,
        };
        debug_assert!(
            (1..page.len()).all(|i| page.key(i - 1) < page.key(i)),
            "sorted, unique"
        );
        Some(page)
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

    /// Bytes this node takes, alone.
    pub(crate) fn own_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.kind {
                Kind::Base(page) => page.heap_bytes(),
                Kind::Insert(r) | Kind::Modify(r) => r.bytes.heap_bytes(),
                Kind::Delete(key) => key.heap_bytes(),
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

impl PageState for Node {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the caller's duty (unreachable, reclaimed once) covers the whole chain, which
        // this state owns.
        unsafe { free_chain(ptr) }
    }
}

/// Node allocations a thread freed, reused by its next deltas and base pages: the same reason
/// as [`crate::page_buffers`] (the collecting thread frees nodes another thread allocated),
/// for the most frequent allocation of all, one per update.
const SPARE_NODES_MAX: usize = 256;

thread_local! {
    // Boxes, not values: the allocations themselves are what is kept for reuse.
    #[allow(clippy::vec_box)]
    static SPARE_NODES: std::cell::RefCell<Vec<Box<std::mem::MaybeUninit<Node>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Node {
    /// This node in a heap allocation ready to install, reusing one this thread freed (none
    /// in the memory-tool build).
    pub(crate) fn into_owned(self) -> crossbeam_epoch::Owned<Node> {
        if !crate::memcheck::RECYCLES {
            return crossbeam_epoch::Owned::new(self);
        }
        let spare = SPARE_NODES
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten();
        match spare {
            Some(slot) => crossbeam_epoch::Owned::from(Box::write(slot, self)),
            None => crossbeam_epoch::Owned::new(self),
        }
    }
}

/// Drops `node`'s contents and keeps its allocation for [`Node::into_owned`] while this thread
/// has room (else frees it; in the memory-tool build always, poisoned first: `memcheck.rs`).
fn recycle(node: Box<Node>) {
    let raw = Box::into_raw(node);
    // SAFETY: `raw` came from a live, owned box; its contents are dropped exactly once here and
    // never read again.
    unsafe { std::ptr::drop_in_place(raw) };
    if crate::memcheck::POISONS {
        // SAFETY: the contents were dropped above, so the bytes are dead and ours to write.
        unsafe {
            std::ptr::write_bytes(
                raw.cast::<u8>(),
                crate::memcheck::POISON_BYTE,
                std::mem::size_of::<Node>(),
            )
        };
        // The stores must reach memory although a free follows.
        std::hint::black_box(raw);
    }
    // SAFETY: same allocation, same layout (MaybeUninit<Node> has Node's); its contents are now
    // uninitialized, which MaybeUninit allows, and dropping the box frees without a drop.
    let slot = unsafe { Box::from_raw(raw.cast::<std::mem::MaybeUninit<Node>>()) };
    if !crate::memcheck::RECYCLES {
        return; // freed here
    }
    // During thread exit the thread-local may be gone: the slot is then simply freed.
    let _ = SPARE_NODES.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < SPARE_NODES_MAX {
            spare.push(slot);
        }
    });
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
            Kind::RemoveNode { .. } => std::ptr::null_mut(),
            Kind::NodeMerge(merge) => {
                // SAFETY: an installed merge delta owns the right page's frozen state, which
                // is unreachable with it and freed only here.
                unsafe { free_chain(merge.right.cast_mut()) };
                node.next.cast_mut()
            }
            _ => node.next.cast_mut(),
        };
        recycle(node);
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

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a freed chain's node allocations are reused by this thread's next nodes, whose
    // contents are the new ones, and the old contents were dropped (their heap bytes freed).
    // Method: build a base + delta chain, free it, then allocate and compare addresses.
    #[cfg(not(forest_memcheck))]
    #[test]
    fn freed_nodes_are_reused_with_fresh_contents() {
        let page = BasePage::build(b"", None, NO_PID, [(&b"a"[..], &b"1"[..])].into_iter());
        let base = Node::base(0, page)
            .into_owned()
            .into_shared(unsafe_free_guard());
        // SAFETY: (test) `base` was just allocated and is only used here.
        let base_ref = unsafe { base.deref() };
        let long_value = vec![9u8; 100]; // a boxed (heap) record, dropped with its node
        let delta = Node::delta(base_ref, 2, Kind::Insert(Record::new(b"b", &long_value)));
        let top = delta.into_owned().into_shared(unsafe_free_guard());
        let addresses = [top.as_raw() as usize, base.as_raw() as usize];
        // SAFETY: (test) the chain is unreachable by anyone else and freed once.
        unsafe { free_chain(top.as_raw().cast_mut()) };
        let page = BasePage::build(b"", None, NO_PID, [(&b"c"[..], &b"3"[..])].into_iter());
        let again = Node::base(0, page).into_owned();
        assert!(
            addresses.contains(&(&*again as *const Node as usize)),
            "reused"
        );
        assert!(matches!(&again.kind, Kind::Base(p) if p.key(0) == b"c"));
    }

    // Goal: the memory-tool build keeps no freed node for reuse (each goes to the allocator,
    // where a memory tool sees it). Method: free a chain and look at the thread's spares.
    #[cfg(forest_memcheck)]
    #[test]
    fn memcheck_build_keeps_no_freed_node() {
        let page = BasePage::build(b"", None, NO_PID, [(&b"a"[..], &b"1"[..])].into_iter());
        let base = Node::base(0, page)
            .into_owned()
            .into_shared(unsafe_free_guard());
        // SAFETY: (test) the node is unreachable by anyone else and freed once.
        unsafe { free_chain(base.as_raw().cast_mut()) };
        assert_eq!(SPARE_NODES.with(|spare| spare.borrow().len()), 0);
    }

    /// A guard for tests that own every node they touch (no concurrent reader exists).
    fn unsafe_free_guard() -> &'static crossbeam_epoch::Guard {
        // SAFETY: (test) an unprotected guard is sound when no other thread shares the data.
        unsafe { crossbeam_epoch::unprotected() }
    }

    /// Every accessor of `page` against the records it was built from.
    fn check_page(low: &[u8], high: Option<&[u8]>, records: &[(&[u8], &[u8])]) {
        let page = BasePage::build(low, high, 42, records.iter().copied());
        assert_eq!(page.len(), records.len());
        assert_eq!(page.low(), low);
        assert_eq!(page.high(), high);
        assert_eq!(page.side_link(), 42);
        for (i, &(key, value)) in records.iter().enumerate() {
            assert_eq!(page.key(i), key);
            assert_eq!(page.value(i), value);
            assert_eq!(page.search(key), Ok(i));
            assert_eq!(page.count_below(key, false), i);
            assert_eq!(page.count_below(key, true), i + 1);
            // A key just above this one (a zero byte appended) is absent and sorts after it.
            let above = [key, &[0]].concat();
            if records
                .get(i + 1)
                .is_none_or(|&(next, _)| next != &above[..])
            {
                assert_eq!(page.search(&above), Err(i + 1));
            }
        }
        for key in [&b""[..], b"\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"m"] {
            let want = records.partition_point(|&(k, _)| k < key);
            assert_eq!(page.count_below(key, false), want);
            let want_high = high.is_some_and(|h| key >= h);
            assert_eq!(page.at_or_above_high(key), want_high, "{key:?}");
        }
    }

    // Goal: the one-allocation base page (prefix array, slots or uniform stride, arena) gives
    // back what it was built from, and its prefix-first search agrees with slice order.
    // Method: uniform and mixed-length pages whose keys tie on their 8-byte prefixes, differ
    // only in a trailing zero byte, or are empty; empty pages; pages with and without a high key.
    #[test]
    fn base_page_round_trips_uniform_and_mixed_records() {
        let uniform: Vec<(&[u8], &[u8])> = vec![
            (b"aaaaaaa1", b"v1v1v1v1"),
            (b"aaaaaaa2", b"v2v2v2v2"),
            (b"bbbbbbbb", b"v3v3v3v3"),
        ];
        check_page(b"", None, &uniform);
        check_page(b"a", Some(b"c"), &uniform);
        let mixed: Vec<(&[u8], &[u8])> = vec![
            (b"", b"empty key"),
            (b"a", b""),
            (b"a\0", b"x"),
            (b"abcdefgh", b"prefix only"),
            (b"abcdefgh\0", b"tie on prefix"),
            (b"abcdefghij", b"longer"),
            (b"abcdefgi", b"next prefix"),
            (b"\xff\xff\xff\xff\xff\xff\xff\xff", b"max prefix"),
        ];
        check_page(b"", None, &mixed);
        check_page(b"", Some(b"\xff\xff\xff\xff\xff\xff\xff\xff\x01"), &mixed);
        check_page(b"", Some(b"abcdefgh\0"), &mixed[..4]);
        check_page(b"k", Some(b"q"), &[]);
        check_page(b"", None, &[]);
    }

    // Goal: prefix-first comparisons agree with slice order. Method: all pairs of keys around
    // the 8-byte boundary.
    #[test]
    fn key_cmp_agrees_with_slice_order() {
        let keys: [&[u8]; 9] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgha",
            b"abcdefgi",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(key_eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
