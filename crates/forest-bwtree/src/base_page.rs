//! Base pages (Bw-tree §III-A "Elastic Virtual Pages", §III-B): the consolidated state at the
//! end of every delta chain (`delta.rs`), a sorted, contiguous vector of records (leaf:
//! key -> value; index node: separator -> child PID as 8 little-endian bytes, [`decode_pid`])
//! with the page's low key, high key and side link ([`NO_PID`] on the rightmost page).
//!
//! Layout, a choice the paper leaves open (§VIII-C expects a cache-sensitive page search):
//! one allocation, taken from and given back to `page_buffers.rs`, with a dense array of
//! 8-byte key prefixes ([`key_prefix`]) that a branch-free binary search probes first, and the
//! keys and values in one arena (see [`BasePage`]). Keys everywhere in the engine compare
//! prefix-first ([`key_cmp`], [`key_eq`]), so short keys need no call to `memcmp`.
//!
//! Invariants:
//! - A base page is immutable once built; consolidation (§III-B) builds a new one.
//! - Its keys are sorted and unique.
//! - Its keys share their first `skip` bytes with the low key (the common prefix of the low and
//!   high keys: YCSB keys share `user` and some digits), and its prefix array holds
//!   [`key_prefix`] of the bytes after them, in key order; its slots (when present)
//!   hold increasing offsets that end at the arena's length; a uniform page (all records of
//!   one key and one value length) has no slots.
//!
//! Unsafe here: byte views of the page's `u64` words (u64 storage holds any bytes, u8 needs no
//! alignment, and a view covers exactly the words' memory under the same borrow), and the
//! x86-64 prefetch hint, which never faults.

use forest_llama::Pid;

/// The side link of the rightmost page of a level.
pub(crate) const NO_PID: Pid = Pid::MAX;

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

/// Words before a base page's prefix array: the side link, and word 1 with the low and high key
/// lengths and the length of the prefix every key shares (the skip, bits 16..32).
const HEADER_WORDS: usize = 2;
/// The high-key length word's value for "no high key" (a real key is at most 16 KiB).
const NO_HIGH: u64 = u32::MAX as u64;
/// Bits of word 1 holding the low key's length, and (from [`SKIP_SHIFT`]) the common prefix's.
const LEN_MASK: u64 = 0xFFFF;
const SKIP_SHIFT: u32 = 16;
const _: () = assert!(forest_core::limits::KEY_BYTES_MAX <= LEN_MASK as usize);
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
        let skip = common_prefix_len(low, high, records.clone());
        words[1] = low.len() as u64
            | (skip as u64) << SKIP_SHIFT
            | (high.map_or(NO_HIGH, |h| h.len() as u64) << 32);
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
            head[HEADER_WORDS + i] = key_prefix(&key[skip..]);
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
        ((self.words[1] & LEN_MASK) as usize, self.words[1] >> 32)
    }

    /// The length of the prefix every key on the page shares with the low key (the prefix
    /// array holds the 8 bytes after it).
    #[inline]
    fn skip(&self) -> usize {
        ((self.words[1] >> SKIP_SHIFT) & LEN_MASK) as usize
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

    /// Record `index`'s key and value, back to back as the arena holds them, and the key's
    /// length: a scan copies both with one copy.
    #[inline]
    pub(crate) fn record(&self, index: usize) -> (&[u8], usize) {
        let (offset, key_len, value_len) = self.slot(index);
        (self.arena_bytes(offset, key_len + value_len), key_len)
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
        let skip = self.skip();
        let prefix = if skip == 0 {
            key_prefix(key)
        } else {
            // Keys without the page's common prefix order before or after all its keys.
            match key[..key.len().min(skip)].cmp(&self.low()[..skip]) {
                std::cmp::Ordering::Equal => key_prefix(&key[skip..]),
                std::cmp::Ordering::Less => return Err(0),
                std::cmp::Ordering::Greater => return Err(self.len()),
            }
        };
        let prefixes = self.prefixes();
        let first = prefixes.partition_point(|&p| p < prefix);
        if prefixes.get(first) != Some(&prefix) {
            return Err(first);
        }
        if self.shape != NOT_UNIFORM
            && (self.shape >> 16) as usize == key.len()
            && key.len() - skip <= 8
        {
            // Keys of one length, at most 8 bytes after the common prefix, are equal when their
            // prefixes are.
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
        let skip = self.skip();
        if stride == 0
            || edits.iter().any(|(k, v)| {
                v.is_some_and(|v| {
                    k.len() != key_len || v.len() != value_len || k[..skip] != self.low()[..skip]
                })
            })
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
                prefixes[to] = key_prefix(&key[skip..]);
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

/// The length of the prefix that every key of a page shares with its low key: the common
/// prefix of the low and high keys (keys in [low, high) share it), cut to what the first and
/// last records share with the low key, so that a page built from records outside its bounds
/// still searches correctly. 0 for the leftmost and the rightmost page of a level.
fn common_prefix_len<'a>(
    low: &[u8],
    high: Option<&[u8]>,
    mut records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> usize {
    let lcp = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let Some(high) = high else { return 0 };
    let mut skip = lcp(low, high);
    if skip == 0 {
        return 0;
    }
    let last = records.clone().last();
    for (key, _) in records.next().into_iter().chain(last) {
        skip = skip.min(lcp(low, key));
    }
    skip
}

/// The child PID stored as an index entry's value.
#[inline]
pub(crate) fn decode_pid(value: &[u8]) -> Pid {
    let bytes: [u8; 8] = value.try_into().expect("index entries hold 8-byte PIDs");
    Pid::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    // Goal: a page whose low and high keys share a long prefix (YCSB keys: `user` and digits)
    // searches from past it and still places keys outside its bounds, keys shorter than the
    // prefix and keys that tie on the 8 bytes after it; `with_edits` keeps the skip. Method:
    // uniform keys `user1234NNtiedJ` in [user1234, user1235) (common prefix `user123`),
    // accessors and searches against slice order, then an edit that adds and deletes keys.
    #[test]
    fn common_prefix_is_skipped() {
        let keys: Vec<Vec<u8>> = (0..20)
            .flat_map(|i| (0..3).map(move |j| format!("user1234{i:02}tied{j}").into_bytes()))
            .collect();
        let records: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"vvvv"[..])).collect();
        let (low, high) = (&b"user1234"[..], Some(&b"user1235"[..]));
        check_page(low, high, &records);
        let page = BasePage::build(low, high, 7, records.iter().copied());
        assert_eq!(page.skip(), 7);
        let probes: [&[u8]; 10] = [
            b"",
            b"user",
            b"user123",
            b"user1234",
            b"user12339",
            b"user123405tied",
            b"user123405tied1\0",
            b"user1235",
            b"user1236",
            b"zzz",
        ];
        for probe in probes {
            let want = records.partition_point(|&(k, _)| k < probe);
            let got = page.search(probe);
            assert_eq!(got.unwrap_or_else(|i| i), want, "{probe:?}");
            assert_eq!(got.is_ok(), records.iter().any(|&(k, _)| k == probe));
        }
        let (added, deleted) = (b"user123405tied9".to_vec(), keys[40].clone());
        let mut edits: Vec<Edit<'_>> = vec![(&added[..], Some(&b"wwww"[..])), (&deleted[..], None)];
        edits.sort_by(|a, b| a.0.cmp(b.0));
        let edited = page.with_edits(&edits).expect("uniform records and edits");
        let mut want: Vec<(&[u8], &[u8])> = records.clone();
        want.retain(|&(k, _)| k != &deleted[..]);
        let at = want.partition_point(|&(k, _)| k < &added[..]);
        want.insert(at, (&added[..], &b"wwww"[..]));
        assert_eq!(edited.len(), want.len());
        for (i, &(key, value)) in want.iter().enumerate() {
            assert_eq!((edited.key(i), edited.value(i)), (key, value));
            assert_eq!(edited.search(key), Ok(i));
        }
        // A key outside the common prefix cannot join the page by the fast path.
        let outside: Vec<Edit<'_>> = vec![(&b"user9999999tied"[..], Some(&b"wwww"[..]))];
        assert!(page.with_edits(&outside).is_none());
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

    /// A small xorshift generator: reproducible without a dev-dependency's API.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// A key made of a common stem's start and adversarial bytes (0x00, 0x01, 0x7f,
        /// 0xfe, 0xff), of `len` bytes if given.
        fn key(&mut self, stem: &[u8], len: Option<usize>) -> Vec<u8> {
            const BYTES: [u8; 6] = [0x00, 0x01, 0x7f, 0xfe, 0xff, b'u'];
            let len = len.unwrap_or_else(|| self.below(stem.len() + 12));
            let keep = self.below(stem.len() + 1).min(len);
            let mut key = stem[..keep].to_vec();
            while key.len() < len {
                key.push(BYTES[self.below(BYTES.len())]);
            }
            key
        }
    }

    // Goal (review rev-bwleaf): the prefix skip keeps `search` exact for every key, in or out
    // of the page's bounds and prefix, on pages with and without fences, uniform or mixed, and
    // through `with_edits`. Method: random pages whose low and high keys share stems of 0..20
    // bytes of 0x00/0x01/0x7f/0xfe/0xff; keys (some shorter than, equal to or a prefix of the
    // stem); every probe against slice order; random edits (adds, replaces, deletes, keys off
    // the prefix) against a BTreeMap.
    #[test]
    fn rev_prefix_skip_search_matches_slice_order() {
        use std::collections::BTreeMap;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // Rounds whose page skips a prefix, and those whose edits took the fast path with one.
        let (mut skipped, mut edited_skipped) = (0, 0);
        for round in 0..6_000 {
            let stem_len = rng.below(20);
            let stem = rng.key(&[], Some(stem_len));
            let uniform = rng.below(2) == 0;
            let key_len = stem.len() + rng.below(10);
            let gen = |rng: &mut Rng| rng.key(&stem, uniform.then_some(key_len));
            let mut fences = [gen(&mut rng), gen(&mut rng)];
            fences.sort();
            let (low, high) = match rng.below(4) {
                0 => (Vec::new(), None),
                1 => (fences[0].clone(), None),
                2 => (Vec::new(), Some(fences[1].clone())),
                _ => (fences[0].clone(), Some(fences[1].clone())),
            };
            let in_bounds = |k: &[u8]| k >= &low[..] && high.as_ref().is_none_or(|h| k < &h[..]);
            let mut map = BTreeMap::new();
            for _ in 0..rng.below(40) {
                let key = gen(&mut rng);
                // Mostly in bounds; sometimes not (a page built from records past its fences).
                if in_bounds(&key) || rng.below(8) == 0 {
                    map.insert(key, vec![b'v'; if uniform { 3 } else { rng.below(4) }]);
                }
            }
            let records: Vec<(&[u8], &[u8])> = map.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            let page = BasePage::build(&low, high.as_deref(), 1, records.iter().copied());
            skipped += usize::from(page.skip() > 0);
            let mut probes: Vec<Vec<u8>> = (0..30).map(|_| gen(&mut rng)).collect();
            probes.extend((0..=stem.len()).map(|n| stem[..n].to_vec()));
            probes.extend([
                low.clone(),
                high.clone().unwrap_or_default(),
                vec![0xff; 30],
            ]);
            probes.extend(map.keys().cloned());
            for probe in &probes {
                let want = match map.contains_key(probe) {
                    true => Ok(map.range::<Vec<u8>, _>(..probe).count()),
                    false => Err(map.range::<Vec<u8>, _>(..probe).count()),
                };
                assert_eq!(
                    page.search(probe),
                    want,
                    "round {round} low {low:?} high {high:?} skip {} probe {probe:?}",
                    page.skip()
                );
            }
            // Edits (sorted, one per key) through the fast path, when it takes them.
            let mut edits = BTreeMap::new();
            for _ in 0..rng.below(crate::consolidate::EDITS_MAX + 1) {
                let key = if rng.below(2) == 0 && !map.is_empty() {
                    map.keys().nth(rng.below(map.len())).unwrap().clone()
                } else {
                    gen(&mut rng)
                };
                let value = (rng.below(3) != 0).then(|| vec![b'w'; 3]);
                edits.insert(key, value);
            }
            let list: Vec<Edit<'_>> = edits.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
            if let Some(edited) = page.with_edits(&list) {
                edited_skipped += usize::from(edited.skip() > 0);
                let mut want = map.clone();
                for (k, v) in &edits {
                    match v {
                        Some(v) => want.insert(k.clone(), v.clone()),
                        None => want.remove(k),
                    };
                }
                assert_eq!(edited.len(), want.len(), "round {round}");
                for (i, (k, v)) in want.iter().enumerate() {
                    assert_eq!((edited.key(i), edited.value(i)), (&k[..], &v[..]));
                }
                for probe in probes.iter().chain(edits.keys()) {
                    let below = want.range::<Vec<u8>, _>(..probe).count();
                    let expect = if want.contains_key(probe) {
                        Ok(below)
                    } else {
                        Err(below)
                    };
                    assert_eq!(
                        edited.search(probe),
                        expect,
                        "round {round} edited {probe:?}"
                    );
                }
            }
        }
        assert!(
            skipped > 500 && edited_skipped > 100,
            "{skipped} {edited_skipped}"
        );
    }

    // Measurement (review rev-bwleaf), not a check: ns per hit search over a leaf of 100
    // consecutive YCSB keys (`user` + a hashed u64 in decimal, as YCSB's), the same records
    // built with fences that share a prefix (skip > 0) and without a high key (skip 0).
    // Run: cargo test --release -p forest-bwtree --lib rev_bench_prefix_skip -- --ignored --nocapture
    #[test]
    #[ignore = "rev: measurement of the prefix skip's search cost (release build)"]
    fn rev_bench_prefix_skip() {
        let hash = |i: u64| {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for b in i.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
            h
        };
        let mut keys: Vec<Vec<u8>> = (0..1_000_000u64)
            .map(|i| format!("user{}", hash(i)).into_bytes())
            .collect();
        keys.sort();
        keys.dedup();
        let value = [0u8; 100];
        for (start, size) in [(500_000, 100), (200_000, 32), (700_000, 400)] {
            let chunk = &keys[start..start + size];
            let records: Vec<(&[u8], &[u8])> = chunk.iter().map(|k| (&k[..], &value[..])).collect();
            let (low, high) = (&chunk[0][..], &keys[start + size][..]);
            let skipped = BasePage::build(low, Some(high), 1, records.iter().copied());
            let plain = BasePage::build(low, None, 1, records.iter().copied());
            assert_eq!(plain.skip(), 0);
            let mut line = format!("page of {size}, skip {}:", skipped.skip());
            for round in 0..2 {
                for (name, page) in [("skip", &skipped), ("no skip", &plain)] {
                    let t = std::time::Instant::now();
                    let mut found = 0usize;
                    for _ in 0..20_000 {
                        for k in chunk {
                            found += std::hint::black_box(page)
                                .search(std::hint::black_box(k))
                                .unwrap_or(0);
                        }
                    }
                    let ns = t.elapsed().as_nanos() as f64 / (20_000 * size) as f64;
                    assert!(found > 0);
                    if round == 1 {
                        line += &format!(" {name} {ns:.1} ns");
                    }
                }
            }
            println!("{line}");
        }
    }
}
