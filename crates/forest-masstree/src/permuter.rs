//! The border node's 64-bit permutation of §4.6.2 (masstree-beta's `kpermuter.hh`).
//!
//! The low 4 bits hold `nkeys`; bits `4(i+1)..4(i+2)` hold `keyindex[i]`, the slot of the
//! `i`-th smallest key, for `i < nkeys`; positions `nkeys..W` list the free slots. A writer
//! publishes a new key order and a new key count with one aligned store. `W` is the border
//! node's width: 15 in the paper, the most 4-bit entries a 64-bit word holds beside `nkeys`.
//!
//! Invariant: the `W` entries are always a permutation of `0..W`.
//! Choice (as kpermuter): inserts take the slot at the back (position 14); removes put the
//! freed slot just after the live keys, so a freed slot is reused as late as possible.

/// Slots in the paper's border node, and the most a permutation word holds.
pub const WIDTH_MAX: usize = 15;

/// The fewest slots a border node may have: all keys with one slice live in one border node
/// (§4.2), and up to 10 keys share a slice (lengths 0..=8 and one longer key or layer link).
pub const WIDTH_MIN: usize = 10;

/// A key order over the `W` slots of a border node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permuter<const W: usize>(u64);

impl<const W: usize> Permuter<W> {
    const WIDTH_OK: () = assert!(W >= WIDTH_MIN && W <= WIDTH_MAX);

    /// No keys; free slots in order 0..W.
    pub fn empty() -> Self {
        let () = Self::WIDTH_OK;
        Self::encode(&std::array::from_fn(|i| i), 0)
    }

    /// Live keys in the given slots (in key order), the other slots free.
    pub fn from_sorted(slots: &[usize]) -> Self {
        debug_assert!(slots.len() <= W);
        let mut a = [0usize; W];
        let mut used = [false; W];
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

    /// Keys in slots `0..size` in slot order, the other slots free in order: the permutation
    /// of a node kept physically sorted (without "+Permuter", §6.2).
    pub fn identity(size: usize) -> Self {
        debug_assert!(size <= W);
        Self::encode(&std::array::from_fn(|i| i), size)
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
        debug_assert!(i < W);
        ((self.0 >> (4 * i + 4)) & 15) as usize
    }

    fn decode(self) -> [usize; W] {
        std::array::from_fn(|i| self.get(i))
    }

    fn encode(a: &[usize; W], size: usize) -> Self {
        let mut x = size as u64;
        for (i, &s) in a.iter().enumerate() {
            x |= (s as u64) << (4 * i + 4);
        }
        Self(x)
    }

    /// Takes the free slot at the back and inserts it at position `i`; returns the new order
    /// and the slot. Precondition: `size() < W` and `i <= size()`.
    pub fn insert_from_back(self, i: usize) -> (Self, usize) {
        let n = self.size();
        assert!(n < W, "insert into a full permutation");
        assert!(i <= n, "insert position past the end");
        let mut a = self.decode();
        let slot = a[W - 1];
        a.copy_within(i..W - 1, i + 1);
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

    fn is_permutation(p: Permuter<15>) -> bool {
        let mut seen = [false; 15];
        (0..15).all(|i| !std::mem::replace(&mut seen[p.get(i)], true))
    }

    #[test]
    fn inserts_and_removes_match_a_vec_model() {
        // Goal: a pseudo-random mix of inserts and removes keeps the live order equal to a Vec
        // model and the W entries a permutation, at the paper's width and the narrowest.
        model_run::<15>();
        model_run::<10>();
    }

    fn model_run<const W: usize>() {
        let is_permutation = |p: Permuter<W>| {
            let mut seen = [false; W];
            (0..W).all(|i| !std::mem::replace(&mut seen[p.get(i)], true))
        };
        let mut p = Permuter::<W>::empty();
        let mut model: Vec<usize> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = p.size();
            if n < W && (n == 0 || !x.is_multiple_of(3)) {
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
        let (p, a) = Permuter::<15>::empty().insert_from_back(0);
        let p = p.remove(0);
        let (_, b) = p.insert_from_back(0);
        assert_ne!(a, b);
        let q = Permuter::<15>::from_sorted(&[3, 1, 2]);
        assert_eq!((q.size(), q.get(0), q.get(1), q.get(2)), (3, 3, 1, 2));
        assert!(is_permutation(q));
    }

    #[test]
    fn identity_lists_slots_in_order() {
        // Goal: a sorted node's permutation (no "+Permuter") maps position i to slot i and is
        // what from_sorted makes of 0..size.
        let p = Permuter::<10>::identity(4);
        assert_eq!(p.size(), 4);
        assert!((0..10).all(|i| p.get(i) == i));
        assert_eq!(p, Permuter::<10>::from_sorted(&[0, 1, 2, 3]));
    }
}
