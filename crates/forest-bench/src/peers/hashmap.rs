//! `hashmap`: `scc::HashMap`, the concurrent hash table Masstree §6.4 measures as the
//! reference without range queries. Point operations are native and atomic. A scan collects
//! the records within the bounds, sorts them and hands them out, so the peer passes the
//! conformance kit; it costs O(n log n), and the runner skips this peer on scan workloads.

use std::ops::Bound;

use forest_core::{check_entry, Index, IndexStats, Order, Result, Visitor};
use scc::HashMap;

use super::key::PeerKey;
use super::{copy_out, wrong_key_shape};

/// An `scc::HashMap` behind the `Index` trait.
pub struct HashMapPeer<K: PeerKey> {
    map: HashMap<K, Box<[u8]>>,
}

impl<K: PeerKey> Default for HashMapPeer<K>
where
    K::Probe: scc::Equivalent<K>,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PeerKey> HashMapPeer<K>
where
    K::Probe: scc::Equivalent<K>,
{
    /// An empty map.
    pub fn new() -> Self {
        Self {
            map: HashMap::new(),
        }
    }
}

impl<K: PeerKey> Index for HashMapPeer<K>
where
    K::Probe: scc::Equivalent<K>,
{
    fn name(&self) -> &'static str {
        "hashmap"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        K::with_probe(key, |probe| {
            self.map.read_sync(probe, |_, v| copy_out(v, out)).is_some()
        })
        .unwrap_or(false)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        Ok(self.map.insert_sync(owned, value.into()).is_ok())
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        self.map.upsert_sync(owned, value.into());
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let Some(updated) = K::with_probe(key, |probe| {
            self.map
                .update_sync(probe, |_, v| {
                    if v.len() == value.len() {
                        v.copy_from_slice(value);
                    } else {
                        *v = value.into();
                    }
                })
                .is_some()
        }) else {
            return Err(wrong_key_shape::<K>(key));
        };
        Ok(updated)
    }

    fn remove(&self, key: &[u8]) -> bool {
        K::with_probe(key, |probe| self.map.remove_sync(probe).is_some()).unwrap_or(false)
    }

    fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        K::with_bounds(lower, upper, |bounds| {
            let Some(range) = bounds else { return };
            let mut records: Vec<(K, Box<[u8]>)> = Vec::new();
            self.map.iter_sync(|k, v| {
                if std::ops::RangeBounds::contains(&range, k.borrow()) {
                    records.push((k.clone(), v.clone()));
                }
                true
            });
            records.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            if order == Order::Descending {
                records.reverse();
            }
            for (k, v) in &records {
                if k.with_bytes(|k| visit(k, v)).is_break() {
                    return;
                }
            }
        });
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            key_count: self.map.len() as u64,
            ..IndexStats::default()
        }
    }
}
