//! A unit's decided writes by key ([`super::Unit`]'s overlay): the state each key is left
//! in (`Some(value)`, or `None`: removed), in key order.
//!
//! Most units are a member and its collection's type entry (a push, a pop, HSET): a
//! `BTreeMap` allocated a node for each of them (~600 instructions of an LPOP's ~10 k,
//! session 16's callgrind). So up to [`SMALL_MAX`] keys live in a sorted vector, which the
//! connection's pool keeps between units ([`super::Buffers`]); a larger unit (SADD of many
//! members, a collection's deletion) moves them into a `BTreeMap`. Invariant: at most one of
//! the two holds entries, so the chain of both iterates in key order.

use std::collections::BTreeMap;
use std::ops::Bound;

/// The keys a unit keeps in its sorted vector before it moves to the map.
pub const SMALL_MAX: usize = 16;

/// A key the unit wrote and its value, None for a removal.
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// See the module doc.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// Sorted by key, unique; empty once `big` holds the entries.
    small: Vec<Entry>,
    big: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

/// An entry as iterators yield it.
pub type Item<'a> = (&'a Vec<u8>, &'a Option<Vec<u8>>);

fn item(entry: &Entry) -> Item<'_> {
    (&entry.0, &entry.1)
}

impl Overlay {
    /// An empty overlay whose vector is `small` (a pooled, emptied one).
    pub fn with_vec(mut small: Vec<Entry>) -> Self {
        small.clear();
        Self {
            small,
            big: BTreeMap::new(),
        }
    }

    /// Hands every entry to `f` in key order, leaving the overlay empty (its vector's
    /// allocation kept).
    pub fn drain(&mut self, mut f: impl FnMut(Vec<u8>, Option<Vec<u8>>)) {
        for (key, value) in self.small.drain(..) {
            f(key, value);
        }
        // An empty map's iterator still costs ~300 instructions to walk and drop.
        if !self.big.is_empty() {
            for (key, value) in std::mem::take(&mut self.big) {
                f(key, value);
            }
        }
    }

    /// The emptied vector, for the pool, if it is the small one's size.
    pub fn into_vec(mut self) -> Option<Vec<Entry>> {
        self.small.clear();
        (self.small.capacity() <= SMALL_MAX && self.small.capacity() > 0).then_some(self.small)
    }

    pub fn is_empty(&self) -> bool {
        self.small.is_empty() && self.big.is_empty()
    }

    pub fn len(&self) -> usize {
        self.small.len() + self.big.len()
    }

    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        self.small.binary_search_by(|(k, _)| k.as_slice().cmp(key))
    }

    pub fn get(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        if !self.big.is_empty() {
            return self.big.get(key);
        }
        self.find(key).ok().map(|i| &self.small[i].1)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Option<Vec<u8>>> {
        if !self.big.is_empty() {
            return self.big.get_mut(key);
        }
        match self.find(key) {
            Ok(i) => Some(&mut self.small[i].1),
            Err(_) => None,
        }
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s state; returns the state it replaces, if any (the key kept is the first
    /// one inserted, as `BTreeMap::insert`'s).
    pub fn insert(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Option<Option<Vec<u8>>> {
        if !self.big.is_empty() {
            return self.big.insert(key, value);
        }
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.small[i].1, value)),
            Err(i) if self.small.len() < SMALL_MAX => {
                self.small.insert(i, (key, value));
                None
            }
            Err(_) => {
                self.big.extend(self.small.drain(..));
                self.big.insert(key, value)
            }
        }
    }

    /// The entries with keys within `bounds`, in key order (both ends).
    pub fn range<'s>(
        &'s self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
    ) -> impl DoubleEndedIterator<Item = Item<'s>> + Clone + 's {
        let (lower, upper) = bounds;
        let start = match lower {
            Bound::Included(k) => self.small.partition_point(|(e, _)| e.as_slice() < k),
            Bound::Excluded(k) => self.small.partition_point(|(e, _)| e.as_slice() <= k),
            Bound::Unbounded => 0,
        };
        let end = match upper {
            Bound::Included(k) => self.small.partition_point(|(e, _)| e.as_slice() <= k),
            Bound::Excluded(k) => self.small.partition_point(|(e, _)| e.as_slice() < k),
            Bound::Unbounded => self.small.len(),
        };
        // An inverted range is empty (BTreeMap::range would panic; callers never ask one).
        let small = &self.small[start..end.max(start)];
        let big = match self.big.is_empty() || !valid(lower, upper) {
            true => None,
            false => Some(self.big.range::<[u8], _>((lower, upper))),
        };
        small
            .iter()
            .map(item as fn(&Entry) -> Item<'_>)
            .chain(big.into_iter().flatten())
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Item<'_>> + Clone + '_ {
        self.range((Bound::Unbounded, Bound::Unbounded))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Vec<u8>> + '_ {
        self.iter().map(|(k, _)| k)
    }
}

/// Whether `BTreeMap::range` accepts these bounds (it panics on an inverted or empty
/// excluded range).
fn valid(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b)) | (Bound::Excluded(a), Bound::Included(b)) => {
            a <= b
        }
        (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the overlay answers as the BTreeMap it replaces, small and spilled.
    // Method: random inserts (new keys and replacements, some removals) of 1–40 keys from a
    // 48-key space, checked after each against a BTreeMap: get, the replaced state, every
    // range of every kind of bound both ways, then drain's order; the vector is reused.
    #[test]
    fn overlay_matches_btreemap() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let key = |i: u64| format!("k{i:02}").into_bytes();
        let mut pooled = None;
        for round in 0..300 {
            let mut overlay = Overlay::with_vec(pooled.take().unwrap_or_default());
            let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            let ops = 1 + next(40);
            for op in 0..ops {
                let k = key(next(48));
                let v = (next(4) > 0).then(|| format!("v{round}-{op}").into_bytes());
                assert_eq!(
                    overlay.insert(k.clone(), v.clone()),
                    model.insert(k, v),
                    "replaced state"
                );
                assert_eq!(overlay.len(), model.len());
                assert_eq!(overlay.is_empty(), model.is_empty());
                for i in 0..48 {
                    assert_eq!(overlay.get(&key(i)), model.get(&key(i)));
                    assert_eq!(overlay.contains_key(&key(i)), model.contains_key(&key(i)));
                }
            }
            if let Some(state) = overlay.get_mut(&key(3)) {
                *state = None;
                model.insert(key(3), None);
            }
            let all: Vec<_> = model.iter().collect();
            assert_eq!(overlay.iter().collect::<Vec<_>>(), all);
            assert_eq!(
                overlay.keys().collect::<Vec<_>>(),
                model.keys().collect::<Vec<_>>()
            );
            for a in 0..49 {
                for b in a..49 {
                    let (ka, kb) = (key(a), key(b));
                    let bounds = [
                        (Bound::Included(&ka[..]), Bound::Excluded(&kb[..])),
                        (Bound::Included(&ka[..]), Bound::Included(&kb[..])),
                        (Bound::Excluded(&ka[..]), Bound::Included(&kb[..])),
                        (Bound::Unbounded, Bound::Excluded(&kb[..])),
                        (Bound::Excluded(&ka[..]), Bound::Unbounded),
                    ];
                    for bounds in bounds {
                        if matches!(bounds, (Bound::Included(_), Bound::Excluded(_))) && a == b {
                            continue;
                        }
                        let want: Vec<_> = model.range::<[u8], _>(bounds).collect();
                        let got: Vec<_> = overlay.range(bounds).collect();
                        assert_eq!(got, want, "{bounds:?}");
                        let want: Vec<_> = model.range::<[u8], _>(bounds).rev().collect();
                        let got: Vec<_> = overlay.range(bounds).rev().collect();
                        assert_eq!(got, want, "rev {bounds:?}");
                    }
                }
            }
            let mut drained = Vec::new();
            overlay.drain(|k, v| drained.push((k, v)));
            assert_eq!(drained, model.into_iter().collect::<Vec<_>>());
            assert!(overlay.is_empty());
            pooled = overlay.into_vec();
        }
    }
}
