//! The border node's 64-bit permutation of §4.6.2 (masstree-beta's `kpermuter.hh`).
//!
//! The low 4 bits hold `nkeys`; bits `4(i+1)..4(i+2)` hold `keyindex[i]`, the slot of the
//! `i`-th smallest key, for `i < nkeys`; positions `nkeys..15` list the free slots. A writer
//! publishes a new key order and a new key count with one aligned store.
//!
//! Invariant: the 15 entries are always a permutation of `0..15`.
//! Choice (as kpermuter): inserts take the slot at the back (position 14); removes put the
//! freed slot just after the live keys, so a freed slot is reused as late as possible.

/// Slots in a border node (the paper's width 15).
pub const WIDTH: usize = 15;

/// A key order over the 15 slots of a border node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permuter(u64);

impl Permuter {
    /// No keys; free slots in order 0..15.
    pub fn empty() -> Self {
        Self::encode(&std::array::from_fn(|i| i), 0)
    }

    /// Live keys in the given slots (in key order), the other slots free.
    pub fn from_sorted(slots: &[usize]) -> Self {
        debug_assert!(slots.len() <= WIDTH);
        let mut a = [0usize; WIDTH];
        let mut used = [false; WIDTH];
        for (i, &s) in slots.iter().enumerate() {
            a[i] = s;
            debug_assert!(!used[s], "slot twice in a permutation");
            used[s] = true;
        }
        let mut j = slots.len();
        for (s, &u) in used.iter().enumerate() {
            if !u {
                a[j] = s;
                j += 1;
            }
        }
        Self::encode(&a, slots.len())
    }

    /// The permutation stored in a word.
    pub fn from_value(x: u64) -> Self {
        Self(x)
    }

    /// The word to store.
    pub fn value(self) -> u64 {
        self.0
    }

    /// `nkeys`.
    pub fn size(self) -> usize {
        (self.0 & 15) as usize
    }

    /// The slot at position `i`.
    pub fn get(self, i: usize) -> usize {
        debug_assert!(i < WIDTH);
        ((self.0 >> (4 * i + 4)) & 15) as usize
    }

    fn decode(self) -> [usize; WIDTH] {
        std::array::from_fn(|i| self.get(i))
    }

    fn encode(a: &[usize; WIDTH], size: usize) -> Self {
        let mut x = size as u64;
        for (i, &s) in a.iter().enumerate() {
            x |= (s as u64) << (4 * i + 4);
        }
        Self(x)
    }

    /// Takes the free slot at the back and inserts it at position `i`; returns the new order
    /// and the slot. Precondition: `size() < WIDTH` and `i <= size()`.
    pub fn insert_from_back(self, i: usize) -> (Self, usize) {
        let n = self.size();
        assert!(n < WIDTH, "insert into a full permutation");
        assert!(i <= n, "insert position past the end");
        let mut a = self.decode();
        let slot = a[WIDTH - 1];
        a.copy_within(i..WIDTH - 1, i + 1);
        a[i] = slot;
        (Self::encode(&a, n + 1), slot)
    }

    /// Removes the key at position `i`; its slot becomes the first free one.
    /// Precondition: `i < size()`.
    pub fn remove(self, i: usize) -> Self {
        let n = self.size();
        assert!(i < n, "remove past the end");
        let mut a = self.decode();
        let slot = a[i];
        a.copy_within(i + 1..n, i);
        a[n - 1] = slot;
        Self::encode(&a, n - 1)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn is_permutation(p: Permuter) -> bool {
        let mut seen = [false; WIDTH];
        (0..WIDTH).all(|i| !std::mem::replace(&mut seen[p.get(i)], true))
    }

    #[test]
    fn inserts_and_removes_match_a_vec_model() {
        // Goal: a pseudo-random mix of inserts and removes keeps the live order equal to a Vec
        // model and the 15 entries a permutation.
        let mut p = Permuter::empty();
        let mut model: Vec<usize> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = p.size();
            if n < WIDTH && (n == 0 || !x.is_multiple_of(3)) {
                let i = (x >> 8) as usize % (n + 1);
                let (q, slot) = p.insert_from_back(i);
                assert!(!model.contains(&slot), "a live slot was handed out");
                model.insert(i, slot);
                p = q;
            } else {
                let i = (x >> 8) as usize % n;
                model.remove(i);
                p = p.remove(i);
            }
            assert!(is_permutation(p));
            assert_eq!(p.size(), model.len());
            for (i, &s) in model.iter().enumerate() {
                assert_eq!(p.get(i), s);
            }
        }
    }

    #[test]
    fn freed_slot_is_reused_last() {
        // Goal: after a remove, the next insert takes a slot that was never used rather than
        // the one just freed (fewer slot reuses, fewer vinsert bumps).
        let (p, a) = Permuter::empty().insert_from_back(0);
        let p = p.remove(0);
        let (_, b) = p.insert_from_back(0);
        assert_ne!(a, b);
        let q = Permuter::from_sorted(&[3, 1, 2]);
        assert_eq!((q.size(), q.get(0), q.get(1), q.get(2)), (3, 3, 1, 2));
        assert!(is_permutation(q));
    }
}
