//! §IV-B2's lists of active time splits, one per tree level.
//!
//! **What a list protects.** A time split of a page at level L posts an index term stamped
//! with its split time T on a level L + 1 page. If that page had meanwhile time-split at a
//! time after T, the term's time region would reach into the historical index page, which is
//! never updated: the term "would have to go into a historical index node" (§IV-B). So a
//! level L + 1 page splits no later than [`SplitList::bound`] of level L: the smallest split
//! time of level L's active splits, or, when none is active, the newest split time the list
//! ever held (level 0; see below for index levels). Every later level-L split registers a
//! time at or after it, so every level-L term still to be posted is at or after the index
//! page's split time. Forest reads only the active splits whose keys lie in the index page's
//! key range: an entry's key is its term's key, so the others' terms go to other pages (the
//! paper keeps the key in each entry but bounds by the whole level; under load, one thread
//! descheduled inside a split then held back every index page of the level). It also leaves
//! out an entry whose page has since started at a later time (another split of that page got
//! in first): that split's CAS is on a state that is gone, so it will fail and post nothing;
//! otherwise a thread descheduled between registering and its CAS held its index page's
//! split time back while the page's other writers went on splitting the page.
//!
//! **Entries.** `⟨next, key, timestamp, PID⟩` as in the paper: the page's low key, the split
//! time and the page's PID (forest's time split keeps the current page's PID, so these are the
//! fields of the new current term it posts). An entry is prepended by a CAS **before** the
//! split begins, and its time is chosen inside that CAS loop ([`SplitList::begin`]).
//!
//! **Ordered and unordered lists.** Leaves split at the clock's tick (EOSL-TS with a store),
//! so level 0's list is ordered as the paper's is: a registration below the newest time the
//! list holds is refused, entries are prepended in time order ("new entries, with later
//! timestamps, are prepended"), and when no split is active the newest time is a lower bound
//! for every later one. Index pages split at a bound of their own (`time_split.rs`: the
//! smaller of this list's and the page's oldest current child's start), so two index pages
//! of one level split at times in no particular order: their lists take registrations in any
//! order and bound nothing when none is active; what a page one level up then needs is given
//! by its own rule, under which every later term posted on it is at or after its split time.
//!
//! **Removal.** The entry is marked deleted as soon as its term is posted, by whichever thread
//! posts it ([`SplitList::finish_posted`]: a writer helping along a half-done split, or the
//! splitting thread), or finds it posted, or grows the root instead; and at the latest by the
//! splitting thread when its step 2 returns ([`Active::finish`]), or when step 1's CAS failed
//! (no split, no term). So a split whose thread stalls between its steps pins its level's
//! bound only until another writer completes it. Marked entries are unlinked
//! ("consolidated") by the next registration once [`CONSOLIDATE_AT`] of them have gathered.
//! The header keeps the newest split time the list held (the paper's "lower time bound for
//! all subsequent time splits" of an empty list).
//!
//! **Key splits (forest's addition).** A key split's term starts at its left page's start, which
//! may be older than every current term of the index page above once the left page has
//! time-split meanwhile; so a key split registers its term too ([`SplitList::begin_key_split`],
//! any order, the list's newest time unchanged), before its split delta's CAS, with its left
//! page's PID and the state it read there. The bound counts it until it is posted
//! ([`SplitList::finish_key_split`]) whatever its right page's start (that moves on when the
//! right page time-splits, but its key term is still to come), unless the caller finds it
//! doomed: the left page's state is no longer the one read and its side links do not lead
//! to the right page, so the CAS failed or will. Its thread may stall between its split delta
//! and its post, and only writers of the right page's keys would post it: so an index page
//! held back by one posts it itself ([`SplitList::pending_key_splits`]), as it helps a
//! half-done time split of its oldest child (`time_split.rs`).
//!
//! **Choices where the paper is loose.** §IV-B2 says both "earlier than the time of any active
//! time split" and "min{timestamp}"; forest takes the min itself: a term stamped exactly at an
//! index page's split time belongs to the current page, whose time range `[start, end)`
//! includes its start. The paper's list is latch-free by CAS on a linked list; here the head
//! is one epoch-protected header (the newest time and the first link), replaced by CAS, and
//! links are shared immutable `Arc`s, so an unlinking copy shares each entry's `deleted` flag
//! with the old chain and a mark made concurrently with a consolidation is never lost.

use forest_core::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use forest_llama::Pid;

/// Marked entries that make the next registration unlink them.
pub(crate) const CONSOLIDATE_AT: usize = 8;

/// One active split: the fields of the index term it will post.
pub(crate) struct Entry {
    pub key: Box<[u8]>,
    pub ts: u64,
    pub pid: Pid,
    /// A key split's origin (module doc), else None (a time split).
    pub key_split: Option<KeySplitOrigin>,
    deleted: AtomicBool,
}

/// Where a key split's entry came from: its left page and the state the split read there,
/// whose replacement by anything but the split delta dooms the split (module doc).
#[derive(Clone, Copy)]
pub(crate) struct KeySplitOrigin {
    pub left: Pid,
    /// The address of the state read, compared only (never dereferenced).
    pub state: usize,
}

/// A link of the list: an entry and the earlier ones.
struct Link {
    entry: Arc<Entry>,
    next: Option<Arc<Link>>,
}

impl Drop for Link {
    /// Unlinks iteratively: a long chain must not recurse once per link.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(link) = next {
            match Arc::try_unwrap(link) {
                Ok(mut owned) => next = owned.next.take(),
                Err(_) => break, // still shared: its last owner unlinks the rest
            }
        }
    }
}

/// What the head points to: the newest time ever registered and the chain, newest first.
struct Header {
    newest: u64,
    first: Option<Arc<Link>>,
}

impl Header {
    fn links(&self) -> impl Iterator<Item = &Link> {
        std::iter::successors(self.first.as_deref(), |l| l.next.as_deref())
    }
}

/// A level's list of active time splits (module doc).
pub(crate) struct SplitList {
    head: Atomic<Header>,
    /// Whether registrations must come in time order (module doc: leaves' lists).
    ordered: bool,
}

/// A registered split; [`Active::finish`] removes it (dropping it unfinished also does).
pub(crate) struct Active {
    entry: Arc<Entry>,
}

impl Active {
    /// The split time registered.
    pub fn ts(&self) -> u64 {
        self.entry.ts
    }

    /// Marks the entry deleted: the split and its index term are done (module doc).
    pub fn finish(self) {
        drop(self);
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.entry.deleted.store(true, Ordering::Release);
    }
}

impl SplitList {
    /// A list whose registrations come in time order (leaves: split times from the clock or
    /// EOSL-TS) when `ordered`, else in any order (index pages, module doc).
    pub fn new(ordered: bool) -> Self {
        Self {
            head: Atomic::new(Header {
                newest: 0,
                first: None,
            }),
            ordered,
        }
    }

    fn header<'g>(&self, guard: &'g Guard) -> (Shared<'g, Header>, &'g Header) {
        let shared = self.head.load(Ordering::Acquire, guard);
        // SAFETY: the head is never null (set in `new`, replaced only by CAS with another
        // header) and a replaced header is destroyed only through `guard.defer_destroy`, after
        // every thread pinned when it was replaced (as this one is) has unpinned.
        let header = unsafe { shared.deref() };
        (shared, header)
    }

    /// The latest time at which a page one level up with key range `[low, high)` may split
    /// (module doc): the smallest time of the active splits whose keys (so whose terms) fall
    /// in that range, leaving out those that `doomed` says can no longer install; else the
    /// newest time an ordered list ever held (an unordered one bounds nothing then:
    /// [`u64::MAX`]).
    pub fn bound(&self, low: &[u8], high: Option<&[u8]>, doomed: impl Fn(&Entry) -> bool) -> u64 {
        let guard = &crossbeam_epoch::pin();
        let (_, header) = self.header(guard);
        let idle = if self.ordered {
            header.newest
        } else {
            u64::MAX
        };
        header
            .links()
            .filter(|l| !l.entry.deleted.load(Ordering::Acquire))
            .filter(|l| *l.entry.key >= *low && high.is_none_or(|h| *l.entry.key < *h))
            .filter(|l| !doomed(&l.entry))
            .map(|l| l.entry.ts)
            .min()
            .unwrap_or(idle)
    }

    /// The unposted key splits whose terms go to a page one level up with key range
    /// `[low, high)` and start before `before` (the ones that may hold its split time back:
    /// a helper posts them, module doc).
    pub fn pending_key_splits(
        &self,
        low: &[u8],
        high: Option<&[u8]>,
        before: u64,
    ) -> Vec<Arc<Entry>> {
        let guard = &crossbeam_epoch::pin();
        let (_, header) = self.header(guard);
        header
            .links()
            .filter(|l| l.entry.key_split.is_some() && l.entry.ts < before)
            .filter(|l| !l.entry.deleted.load(Ordering::Acquire))
            .filter(|l| *l.entry.key >= *low && high.is_none_or(|h| *l.entry.key < *h))
            .map(|l| Arc::clone(&l.entry))
            .collect()
    }

    /// Registers a split of page `pid` (low key `key`) before it begins. `choose` picks the
    /// split time after the list's header was read (None: no split now); in an ordered list a
    /// time below the newest it holds is refused (None), so that entries stay in time order.
    pub fn begin(
        &self,
        key: &[u8],
        pid: Pid,
        mut choose: impl FnMut() -> Option<u64>,
    ) -> Option<Active> {
        let guard = &crossbeam_epoch::pin();
        loop {
            let (shared, header) = self.header(guard);
            let ts = choose()?;
            if self.ordered && ts < header.newest {
                return None;
            }
            let entry = Arc::new(Entry {
                key: key.into(),
                ts,
                pid,
                key_split: None,
                deleted: AtomicBool::new(false),
            });
            if self.push(shared, header, &entry, ts.max(header.newest), guard) {
                return Some(Active { entry });
            }
            // Another registration got in: read again, choose again.
        }
    }

    /// Registers a key split's term `(sep, ts, q)` before the split delta's CAS on `origin`
    /// (module doc: a key split's term starts at its left page's start, in any order, and
    /// leaves the list's newest time alone).
    pub fn begin_key_split(&self, sep: &[u8], q: Pid, ts: u64, origin: KeySplitOrigin) -> Active {
        let guard = &crossbeam_epoch::pin();
        let entry = Arc::new(Entry {
            key: sep.into(),
            ts,
            pid: q,
            key_split: Some(origin),
            deleted: AtomicBool::new(false),
        });
        loop {
            let (shared, header) = self.header(guard);
            if self.push(shared, header, &entry, header.newest, guard) {
                return Active { entry };
            }
        }
    }

    /// Prepends `entry` to the chain read as `shared` (unlinking marked entries once enough
    /// gathered), with `newest` as the header's time; false when another registration got in.
    fn push(
        &self,
        shared: Shared<'_, Header>,
        header: &Header,
        entry: &Arc<Entry>,
        newest: u64,
        guard: &Guard,
    ) -> bool {
        let marked = header
            .links()
            .filter(|l| l.entry.deleted.load(Ordering::Acquire))
            .count();
        let next = if marked >= CONSOLIDATE_AT {
            // Unlink the marked entries: a fresh chain of the live ones, same order.
            let live: Vec<Arc<Entry>> = header
                .links()
                .filter(|l| !l.entry.deleted.load(Ordering::Acquire))
                .map(|l| Arc::clone(&l.entry))
                .collect();
            live.into_iter()
                .rev()
                .fold(None, |next, entry| Some(Arc::new(Link { entry, next })))
        } else {
            header.first.clone()
        };
        let new = Owned::new(Header {
            newest,
            first: Some(Arc::new(Link {
                entry: Arc::clone(entry),
                next,
            })),
        });
        match self
            .head
            .compare_exchange(shared, new, Ordering::AcqRel, Ordering::Acquire, guard)
        {
            Ok(_) => {
                // SAFETY: `shared` was just replaced, so no new reader can reach it; the
                // readers that did are pinned, and the epoch frees it after they unpin.
                unsafe { guard.defer_destroy(shared) };
                true
            }
            Err(_) => false,
        }
    }

    /// Marks the entry of page `pid`'s split at `ts` deleted: its term is posted, here by a
    /// thread helping along (Bw-tree §IV-C) while the split's own thread has not come back.
    pub fn finish_posted(&self, pid: Pid, ts: u64) {
        let guard = &crossbeam_epoch::pin();
        let (_, header) = self.header(guard);
        for link in header.links() {
            if link.entry.pid == pid && link.entry.ts == ts {
                link.entry.deleted.store(true, Ordering::Release);
            }
        }
    }

    /// Marks the key-split entries of right page `q` deleted: its term is posted, by the
    /// splitting thread or by a helper, whose term may start later (at `q`'s start, once `q`
    /// time-split meanwhile). `q` is a current page, so its PID names no other entry's page.
    pub fn finish_key_split(&self, q: Pid) {
        let guard = &crossbeam_epoch::pin();
        let (_, header) = self.header(guard);
        for link in header.links() {
            if link.entry.key_split.is_some() && link.entry.pid == q {
                link.entry.deleted.store(true, Ordering::Release);
            }
        }
    }

    /// Active (unmarked) entries and all linked ones (stats).
    pub fn counts(&self) -> (usize, usize) {
        let guard = &crossbeam_epoch::pin();
        let (_, header) = self.header(guard);
        let linked = header.links().count();
        let active = header
            .links()
            .filter(|l| !l.entry.deleted.load(Ordering::Acquire))
            .count();
        (active, linked)
    }
}

impl Drop for SplitList {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can hold or reach the header any more.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let shared = self.head.load(Ordering::Relaxed, guard);
        // SAFETY: the header is non-null and owned by this list alone (see `header`).
        drop(unsafe { shared.into_owned() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_is_the_oldest_active_split_else_the_newest_ever() {
        let list = SplitList::new(true);
        assert_eq!(list.bound(b"", None, |_| false), 0);
        let a = list.begin(b"a", 1, || Some(10)).expect("in order");
        let b = list.begin(b"b", 2, || Some(20)).expect("in order");
        assert_eq!(list.bound(b"", None, |_| false), 10);
        a.finish();
        assert_eq!(list.bound(b"", None, |_| false), 20);
        b.finish();
        assert_eq!(
            list.bound(b"", None, |_| false),
            20,
            "empty: the newest time it held"
        );
        assert!(list.begin(b"c", 3, || Some(15)).is_none(), "out of order");
        assert!(list.begin(b"c", 3, || None).is_none());
    }

    #[test]
    fn an_unordered_list_takes_any_time_and_bounds_only_while_active() {
        let list = SplitList::new(false);
        assert_eq!(list.bound(b"", None, |_| false), u64::MAX);
        let a = list.begin(b"a", 1, || Some(20)).expect("any order");
        let b = list.begin(b"b", 2, || Some(10)).expect("any order");
        assert_eq!(list.bound(b"", None, |_| false), 10);
        b.finish();
        assert_eq!(list.bound(b"", None, |_| false), 20);
        a.finish();
        assert_eq!(list.bound(b"", None, |_| false), u64::MAX);
    }

    #[test]
    fn bound_reads_only_the_splits_whose_keys_are_in_range() {
        let list = SplitList::new(true);
        let _a = list.begin(b"a", 1, || Some(10)).expect("in order");
        let _m = list.begin(b"m", 2, || Some(20)).expect("in order");
        assert_eq!(list.bound(b"", None, |_| false), 10);
        assert_eq!(list.bound(b"b", None, |_| false), 20);
        assert_eq!(list.bound(b"", Some(b"m"), |_| false), 10);
        assert_eq!(
            list.bound(b"b", Some(b"m"), |_| false),
            20,
            "none active here: the newest"
        );
        assert_eq!(list.bound(b"m", Some(b"n"), |_| false), 20);
        assert_eq!(
            list.bound(b"", None, |e| e.pid == 1),
            20,
            "a doomed one is left out"
        );
    }

    #[test]
    fn a_helper_finishes_an_entry_by_its_page_and_time() {
        let list = SplitList::new(true);
        let owner = list.begin(b"a", 7, || Some(10)).expect("in order");
        let _other = list.begin(b"b", 8, || Some(20)).expect("in order");
        list.finish_posted(7, 11);
        assert_eq!(
            list.bound(b"", None, |_| false),
            10,
            "another split of the page is not this one"
        );
        list.finish_posted(7, 10);
        assert_eq!(list.bound(b"", None, |_| false), 20);
        owner.finish();
        assert_eq!(list.counts(), (1, 2));
    }

    #[test]
    fn marked_entries_are_unlinked_by_a_later_registration() {
        let list = SplitList::new(true);
        let keep = list.begin(b"k", 0, || Some(1)).expect("in order");
        for ts in 2..2 + CONSOLIDATE_AT as u64 {
            list.begin(b"x", 1, || Some(ts)).expect("in order").finish();
        }
        assert_eq!(list.counts(), (1, 1 + CONSOLIDATE_AT));
        let last = list.begin(b"y", 2, || Some(100)).expect("in order");
        assert_eq!(list.counts(), (2, 2), "the marked ones are gone");
        assert_eq!(list.bound(b"", None, |_| false), 1);
        keep.finish();
        last.finish();
        assert_eq!(list.bound(b"", None, |_| false), 100);
    }

    #[test]
    fn a_key_split_bounds_at_its_old_start_until_its_term_is_posted() {
        let list = SplitList::new(true);
        let t = list.begin(b"a", 1, || Some(30)).expect("in order");
        t.finish();
        let origin = KeySplitOrigin { left: 6, state: 0 };
        let k = list.begin_key_split(b"m", 7, 5, origin);
        assert_eq!(list.bound(b"", None, |_| false), 5, "older than the newest");
        assert_eq!(
            list.bound(b"", None, |e| e.key_split.is_none()),
            5,
            "the caller judges a key split's doom by its origin"
        );
        assert_eq!(list.pending_key_splits(b"", None, 6).len(), 1);
        assert!(
            list.pending_key_splits(b"", None, 5).is_empty(),
            "not before 5"
        );
        assert!(
            list.pending_key_splits(b"n", None, 6).is_empty(),
            "out of range"
        );
        assert!(
            list.begin(b"b", 2, || Some(40)).is_some(),
            "the newest time stays the time splits' own"
        );
        list.finish_key_split(7);
        assert_eq!(list.bound(b"m", None, |_| false), 40);
        k.finish();
    }
}
