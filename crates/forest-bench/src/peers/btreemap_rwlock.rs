//! `btreemap-rwlock`: `std`'s `BTreeMap` under one `RwLock`, the "hard locking" the thesis
//! compares its latch coupling against (Westerhoff §4.3, Fig. 4.3).
//!
//! Keys and values are allocated before the lock is taken, so the critical section holds only
//! the map operation. Scans copy up to [`SCAN_BATCH_RECORDS`] records under the read lock,
//! release it, hand them out, and go on after the last key, so `visit` never runs under the
//! lock (it may call back into the map).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use forest_core::{check_entry, Index, IndexStats, Order, Result, Visitor};

use super::key::{bounds_are_empty, PeerKey};
use super::{copy_out, wrong_key_shape};

/// Records a scan copies per read-lock hold: enough to amortize the lock, few enough that a
/// long scan does not block writers for long.
pub const SCAN_BATCH_RECORDS: usize = 64;

/// A `RwLock<BTreeMap>` behind the `Index` trait.
pub struct BTreeMapRwLock<K: PeerKey> {
    map: RwLock<BTreeMap<K, Box<[u8]>>>,
}

impl<K: PeerKey> Default for BTreeMapRwLock<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PeerKey> BTreeMapRwLock<K> {
    /// An empty map.
    pub fn new() -> Self {
        Self {
            map: RwLock::new(BTreeMap::new()),
        }
    }

    // A panic under the lock leaves the map valid (every mutation is one BTreeMap call), so a
    // poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<K, Box<[u8]>>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<K, Box<[u8]>>> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: PeerKey> Index for BTreeMapRwLock<K> {
    fn name(&self) -> &'static str {
        "btreemap-rwlock"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        K::with_probe(key, |probe| match self.read().get(probe) {
            Some(v) => {
                copy_out(v, out);
                true
            }
            None => false,
        })
        .unwrap_or(false)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let value: Box<[u8]> = value.into();
        let mut map = self.write();
        if map.contains_key(owned.borrow()) {
            return Ok(false);
        }
        map.insert(owned, value);
        Ok(true)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let value: Box<[u8]> = value.into();
        self.write().insert(owned, value);
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let value: Box<[u8]> = value.into();
        let old = {
            let mut map = self.write();
            match map.get_mut(owned.borrow()) {
                Some(slot) => Some(std::mem::replace(slot, value)),
                None => None,
            }
        };
        // The old value is freed after the lock is released.
        Ok(old.is_some())
    }

    fn remove(&self, key: &[u8]) -> bool {
        K::with_probe(key, |probe| {
            let old = self.write().remove(probe);
            old.is_some()
        })
        .unwrap_or(false)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        K::with_bounds(lower, upper, |bounds| {
            let Some((lower, upper)) = bounds else { return };
            // One flat buffer of copied keys and values, reused across batches, so a scan
            // allocates nothing per record (as forest's engines copy into a reused buffer).
            let mut bytes: Vec<u8> = Vec::new();
            let mut ends: Vec<(usize, usize)> = Vec::with_capacity(SCAN_BATCH_RECORDS);
            // The resume point: the last key handed out, excluded.
            let mut resume: Option<K> = None;
            loop {
                bytes.clear();
                ends.clear();
                {
                    let map = self.read();
                    let (lo, hi) = match (&resume, order) {
                        (Some(last), Order::Ascending) => (Bound::Excluded(last.borrow()), upper),
                        (Some(last), Order::Descending) => (lower, Bound::Excluded(last.borrow())),
                        (None, _) => (lower, upper),
                    };
                    if bounds_are_empty(lo, hi) {
                        return;
                    }
                    let range = map.range::<K::Probe, _>((lo, hi));
                    // Both directions through one generic copy: no boxed iterator, so a scan
                    // allocates nothing once its buffers are warm.
                    let last = match order {
                        Order::Ascending => copy_batch(range, &mut bytes, &mut ends),
                        Order::Descending => copy_batch(range.rev(), &mut bytes, &mut ends),
                    };
                    resume = last.cloned();
                }
                let mut start = 0;
                for &(key_end, value_end) in &ends {
                    let flow = visit(&bytes[start..key_end], &bytes[key_end..value_end]);
                    if flow.is_break() {
                        return;
                    }
                    start = value_end;
                }
                if ends.len() < SCAN_BATCH_RECORDS {
                    return;
                }
            }
        });
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            key_count: self.read().len() as u64,
            ..IndexStats::default()
        }
    }
}

/// Copies up to [`SCAN_BATCH_RECORDS`] records into `bytes` (keys and values back to back) and
/// their end offsets into `ends`; returns the last key copied.
fn copy_batch<'a, K: PeerKey + 'a>(
    records: impl Iterator<Item = (&'a K, &'a Box<[u8]>)>,
    bytes: &mut Vec<u8>,
    ends: &mut Vec<(usize, usize)>,
) -> Option<&'a K> {
    let mut last = None;
    for (k, v) in records.take(SCAN_BATCH_RECORDS) {
        k.with_bytes(|k| bytes.extend_from_slice(k));
        let key_end = bytes.len();
        bytes.extend_from_slice(v);
        ends.push((key_end, bytes.len()));
        last = Some(k);
    }
    last
}
