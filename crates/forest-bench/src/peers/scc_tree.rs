//! `scc-tree`: `scc::TreeIndex`, a concurrent B+tree with lock-free reads. Insert-if-absent
//! and upsert are native; update-if-present and remove take a key stripe (see
//! [`crate::peers`]).
//!
//! Descending scans: scc 3.8's reverse range iteration (`Range::rev`) returns nothing after
//! many removals (the kit's `order_ascending` and `model_many_keys` show it), so a descending
//! scan collects the ascending range and hands it out backwards. It costs the whole range,
//! so the runner does not measure this peer on descending scans
//! ([`super::reverse_scan_gap`]).

use std::ops::Bound;

use forest_core::{check_entry, Index, IndexStats, Order, Result, Visitor};
use scc::{Guard, TreeIndex};

use super::key::PeerKey;
use super::stripes::Stripes;
use super::{copy_out, wrong_key_shape};

/// A `TreeIndex` behind the `Index` trait.
pub struct SccTree<K: PeerKey> {
    tree: TreeIndex<K, Box<[u8]>>,
    stripes: Stripes,
}

impl<K: PeerKey> Default for SccTree<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PeerKey> SccTree<K> {
    /// An empty tree.
    pub fn new() -> Self {
        Self {
            tree: TreeIndex::new(),
            stripes: Stripes::new(),
        }
    }
}

impl<K: PeerKey> Index for SccTree<K> {
    fn name(&self) -> &'static str {
        "scc-tree"
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        K::with_probe(key, |probe| {
            self.tree
                .peek_with(probe, |_, v| copy_out(v, out))
                .is_some()
        })
        .unwrap_or(false)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        Ok(self.tree.insert_sync(owned, value.into()).is_ok())
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        self.tree.upsert_sync(owned, value.into());
        Ok(())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_entry(key, value)?;
        let owned = K::from_bytes(key).ok_or_else(|| wrong_key_shape::<K>(key))?;
        let probe: &K::Probe = owned.borrow();
        let _stripe = self.stripes.lock(probe);
        if !self.tree.contains(probe) {
            return Ok(false);
        }
        self.tree.upsert_sync(owned, value.into());
        Ok(true)
    }

    fn remove(&self, key: &[u8]) -> bool {
        K::with_probe(key, |probe| {
            let _stripe = self.stripes.lock(probe);
            self.tree.remove_sync(probe)
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
            let Some(range) = bounds else { return };
            let guard = Guard::new();
            let entries = self.tree.range::<K::Probe, _>(range, &guard);
            match order {
                Order::Ascending => {
                    for (k, v) in entries {
                        if k.with_bytes(|k| visit(k, v)).is_break() {
                            return;
                        }
                    }
                }
                Order::Descending => {
                    let records: Vec<(&K, &Box<[u8]>)> = entries.collect();
                    for (k, v) in records.into_iter().rev() {
                        if k.with_bytes(|k| visit(k, v)).is_break() {
                            return;
                        }
                    }
                }
            }
        });
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            key_count: self.tree.len() as u64,
            height: self.tree.depth() as u32,
            ..IndexStats::default()
        }
    }
}
