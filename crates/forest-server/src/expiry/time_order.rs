//! One shard's deadlines in time order, for the active expiry task and the due counts
//! (DBSIZE, INFO): a binary min-heap of (deadline, stamp, key) whose stale entries are
//! dropped lazily.
//!
//! A change of deadline pushes an entry and removes none: the entry the key had before
//! becomes stale (its stamp is no longer the key's in the map) and is dropped when it
//! reaches the top, or when stale entries outnumber live ones and the heap is rebuilt from
//! the map. So a deadline set costs a push, O(1) for the common case of deadlines that grow
//! with time (SET EX with one TTL), where the `BTreeSet` this replaces paid a descent for
//! the insert and another for the removal of the old pair. The walks below visit only
//! entries at or before `now` (a heap's subtree never holds an earlier deadline than its
//! root), so they cost what is due, not what is stored.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A deadline in the order. `stamp` is unique within the shard (a counter), so entries of
/// one key never tie and an entry is live exactly while the map holds its stamp; `hash` is
/// the key's in the map, where its bytes are (24 bytes an entry, no key shared).
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub deadline: u64,
    pub stamp: u64,
    pub hash: u64,
}

impl Entry {
    fn rank(&self) -> (u64, u64) {
        (self.deadline, self.stamp)
    }
}

/// The heap: `heap[i]` ranks at or before its children `heap[2i+1]` and `heap[2i+2]`.
#[derive(Debug, Default)]
pub(super) struct TimeOrder {
    heap: Vec<Entry>,
}

impl TimeOrder {
    /// Entries, stale ones included.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn clear(&mut self) {
        self.heap.clear();
    }

    pub fn push(&mut self, entry: Entry) {
        self.heap.push(entry);
        let mut at = self.heap.len() - 1;
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].rank() <= self.heap[at].rank() {
                break;
            }
            self.heap.swap(parent, at);
            at = parent;
        }
    }

    /// Replaces the heap with `entries` (the map's live ones), in O(n).
    pub fn rebuild(&mut self, entries: impl Iterator<Item = Entry>) {
        self.heap.clear();
        self.heap.extend(entries);
        for at in (0..self.heap.len() / 2).rev() {
            self.sift_down(at);
        }
    }

    /// Drops stale entries (`live` false) due at `now` from the top: the walks below meet
    /// no others first, and a tick that finds nothing due costs no look at the map.
    pub fn prune_top(&mut self, now: u64, live: impl Fn(&Entry) -> bool) {
        while self
            .heap
            .first()
            .is_some_and(|top| top.deadline <= now && !live(top))
        {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
            self.sift_down(0);
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let len = self.heap.len();
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if left < len && self.heap[left].rank() < self.heap[least].rank() {
                least = left;
            }
            if right < len && self.heap[right].rank() < self.heap[least].rank() {
                least = right;
            }
            if least == at {
                return;
            }
            self.heap.swap(at, least);
            at = least;
        }
    }

    /// Up to `max` live entries with a deadline at or before `now`, earliest first: a
    /// best-first walk from the top that expands only entries at or before `now`.
    pub fn earliest(&self, now: u64, max: usize, live: impl Fn(&Entry) -> bool) -> Vec<Entry> {
        let mut found = Vec::new();
        let mut frontier: BinaryHeap<Reverse<((u64, u64), usize)>> = BinaryHeap::new();
        let offer = |at: usize, frontier: &mut BinaryHeap<_>| {
            if let Some(entry) = self.heap.get(at).filter(|e| e.deadline <= now) {
                frontier.push(Reverse((entry.rank(), at)));
            }
        };
        offer(0, &mut frontier);
        while found.len() < max {
            let Some(Reverse((_, at))) = frontier.pop() else {
                break;
            };
            let entry = self.heap[at];
            if live(&entry) {
                found.push(entry);
            }
            offer(2 * at + 1, &mut frontier);
            offer(2 * at + 2, &mut frontier);
        }
        found
    }

    /// Live entries with a deadline at or before `now`.
    pub fn count_due(&self, now: u64, live: impl Fn(&Entry) -> bool) -> usize {
        let mut count = 0;
        let mut pending = vec![0usize];
        while let Some(at) = pending.pop() {
            let Some(entry) = self.heap.get(at).filter(|e| e.deadline <= now) else {
                continue;
            };
            count += usize::from(live(entry));
            pending.push(2 * at + 1);
            pending.push(2 * at + 2);
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(deadline: u64, stamp: u64) -> Entry {
        Entry {
            deadline,
            stamp,
            hash: stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        }
    }

    // Goal: the walks give exactly the live entries due, earliest first, however the heap
    // was built (pushes in any order, a rebuild, stale entries pruned from the top or left
    // inside).
    // Method: a pseudo-random set of entries, every third stale; compare `earliest` and
    // `count_due` with a sorted filter of the same entries, for several `now` and `max`.
    #[test]
    fn walks_match_a_sorted_filter() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let entries: Vec<Entry> = (0..500).map(|s| entry(next() % 1_000, s)).collect();
        let live = |e: &Entry| !e.stamp.is_multiple_of(3);
        let mut pushed = TimeOrder::default();
        for e in &entries {
            pushed.push(*e);
        }
        let mut rebuilt = TimeOrder::default();
        rebuilt.rebuild(entries.iter().copied());
        let mut pruned = TimeOrder::default();
        pruned.rebuild(entries.iter().copied());
        pruned.prune_top(500, live);
        assert!(pruned
            .heap
            .first()
            .is_none_or(|top| top.deadline > 500 || live(top)));
        for order in [&pushed, &rebuilt, &pruned] {
            for now in [0, 1, 10, 333, 999, 5_000] {
                let mut expected: Vec<(u64, u64)> = entries
                    .iter()
                    .filter(|e| e.deadline <= now && live(e))
                    .map(Entry::rank)
                    .collect();
                expected.sort_unstable();
                assert_eq!(order.count_due(now, live), expected.len(), "now {now}");
                for max in [0, 1, 7, 1_000] {
                    let got: Vec<(u64, u64)> = order
                        .earliest(now, max, live)
                        .iter()
                        .map(Entry::rank)
                        .collect();
                    let want: Vec<(u64, u64)> = expected.iter().copied().take(max).collect();
                    assert_eq!(got, want, "now {now} max {max}");
                }
            }
        }
        assert_eq!(pushed.len(), 500);
        // Stale entries on top go once due, and not before.
        let mut small = TimeOrder::default();
        for e in [entry(5, 3), entry(1, 6), entry(9, 1), entry(7, 9)] {
            small.push(e);
        }
        small.prune_top(0, live);
        assert_eq!(small.len(), 4, "nothing due yet");
        small.prune_top(8, live);
        assert_eq!(
            small.len(),
            1,
            "the three stale ones due by 8 went, the live one stays"
        );
        pushed.clear();
        assert_eq!(pushed.count_due(u64::MAX, live), 0);
    }
}
