//! The reference index: a `BTreeMap` behind one `RwLock` (the thesis' "hard locking", and the
//! `RwLock<BTreeMap>` peer of the benchmarks). It proves the kit (every check passes on it)
//! and is a baseline other crates may compare with.
//!
//! Scans follow the papers' leaf-snapshot cursor (DESIGN.md, "The Index API"): copy up to
//! [`SCAN_CHUNK_RECORD_COUNT`] records under the read lock, release it, hand them out, and
//! continue after the last key returned. So `visit` never runs under the lock and may call back
//! into the index.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::conformance::bounds_empty;
use crate::error::Result;
use crate::index::{Index, Order, Visitor};
use crate::limits::check_entry;
use crate::stats::IndexStats;

/// Records a scan copies per lock acquisition: large enough to amortize the lock, small enough
/// that an early stop wastes little.
pub const SCAN_CHUNK_RECORD_COUNT: usize = 64;

/// A `RwLock<BTreeMap<Vec<u8>, Vec<u8>>>` implementing [`Index`].
#[derive(Debug, Default)]
pub struct ReferenceIndex {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl ReferenceIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    // A panic while the lock is held cannot leave the map half-changed (each BTreeMap call is
    // complete or not started), so a poisoned lock is still consistent and is used as is.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the next chunk of records within the bounds, in `order`.
    fn chunk(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        if bounds_empty(lower, upper) {
            return Vec::new();
        }
        let map = self.read();
        let range = map.range::<[u8], _>((lower, upper));
        let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        match order {
            Order::Ascending => range.take(SCAN_CHUNK_RECORD_COUNT).map(copy).collect(),
            Order::Descending => range
                .rev()
                .take(SCAN_CHUNK_RECORD_COUNT)
                .map(copy)
                .collect(),
        }
    }
}

impl Index for ReferenceIndex {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        match self.read().get(key) {
            Some(value) => {
                out.clear();
                out.extend_from_slice(value);
                true
            }
            None => false,
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let mut map = self.write();
        if map.contains_key(key) {
            return Ok(false);
        }
        map.insert(key.to_vec(), value.to_vec());
        Ok(true)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        self.write().insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        match self.write().get_mut(key) {
            Some(old) => {
                old.clear();
                old.extend_from_slice(value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn remove(&self, key: &[u8]) -> bool {
        self.write().remove(key).is_some()
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        // The cursor: the bound on the side the scan moves from, advanced past each chunk.
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let (from_lower, from_upper) = match (&cursor, order) {
                (None, _) => (lower, upper),
                (Some(last), Order::Ascending) => (Bound::Excluded(last.as_slice()), upper),
                (Some(last), Order::Descending) => (lower, Bound::Excluded(last.as_slice())),
            };
            let chunk = self.chunk(from_lower, from_upper, order);
            let complete = chunk.len() < SCAN_CHUNK_RECORD_COUNT;
            for (key, value) in &chunk {
                if visit(key, value).is_break() {
                    return;
                }
            }
            match chunk.into_iter().next_back() {
                Some((last, _)) if !complete => cursor = Some(last),
                _ => return,
            }
        }
    }

    fn stats(&self) -> IndexStats {
        let map = self.read();
        let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        IndexStats {
            key_count: map.len() as u64,
            memory_bytes: bytes as u64,
            ..IndexStats::default()
        }
    }
}
