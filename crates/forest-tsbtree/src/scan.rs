//! Range scans at the current time and as of time `t` (Bw-tree §III-C's page-at-a-time copy;
//! TSBw-tree §III-A1's search at time t): under an epoch pin, the leaf holding the cursor at
//! `t` is found (through side and history links), the versions of its keys alive at `t` are
//! copied out, the pin is dropped, they are handed to `visit`, and the next leaf is found from
//! the copied page's high key (ascending) or low key (descending). A page's key range is read
//! from the same state as its records, so no key is returned twice or skipped.

use std::ops::{Bound, ControlFlow};

use forest_core::index::{below_lower, past_upper};
use forest_core::{Order, Result, Visitor};

use crate::as_of::Target;
use crate::page;
use crate::version::Record;
use crate::TsbTree;

/// The latest version at or before `t` of each key of sorted `records`, if not a tombstone.
fn alive_at(records: &[Record], t: u64) -> impl Iterator<Item = &Record> {
    records.iter().enumerate().filter_map(move |(i, r)| {
        if r.ts > t {
            return None;
        }
        let newer_at_t = records
            .get(i + 1)
            .is_some_and(|n| n.key == r.key && n.ts <= t);
        (!newer_at_t && r.value.is_some()).then_some(r)
    })
}

/// A copied record.
type KeyValue = (Box<[u8]>, Box<[u8]>);

impl TsbTree {
    pub(crate) fn scan_at(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        t: u64,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let in_range = |k: &[u8]| forest_core::index::in_bounds(k, lower, upper);
        let mut batch: Vec<KeyValue> = Vec::new();
        match order {
            Order::Ascending => {
                let mut cursor: Bound<Vec<u8>> = lower.map(<[u8]>::to_vec);
                loop {
                    batch.clear();
                    let next = {
                        let guard = &crossbeam_epoch::pin();
                        let target = match &cursor {
                            Bound::Included(k) | Bound::Excluded(k) => Target::At(k),
                            Bound::Unbounded => Target::At(&[]),
                        };
                        let (_, head) = self.find_leaf_as_of(target, t, guard)?;
                        let view = page::leaf_view(head);
                        let cur = cursor.as_ref().map(Vec::as_slice);
                        for r in alive_at(&view.records, t) {
                            if in_range(&r.key)
                                && forest_core::index::in_bounds(&r.key, cur, Bound::Unbounded)
                            {
                                let v = r.value.clone().unwrap_or_default();
                                batch.push((r.key.clone(), v));
                            }
                        }
                        view.high
                    };
                    for (k, v) in &batch {
                        if visit(k, v).is_break() {
                            return Ok(());
                        }
                    }
                    match next {
                        Some(high) if !past_upper(&high, upper) => {
                            cursor = Bound::Included(high.into_vec());
                        }
                        _ => return Ok(()),
                    }
                }
            }
            Order::Descending => {
                if matches!(upper, Bound::Excluded(k) if k.is_empty()) {
                    return Ok(()); // nothing sorts below the empty key
                }
                let mut cursor: Bound<Vec<u8>> = upper.map(<[u8]>::to_vec);
                loop {
                    batch.clear();
                    let next = {
                        let guard = &crossbeam_epoch::pin();
                        let target = match &cursor {
                            Bound::Included(k) => Target::At(k),
                            Bound::Excluded(k) => Target::Below(k),
                            Bound::Unbounded => Target::End,
                        };
                        let (_, head) = self.find_leaf_as_of(target, t, guard)?;
                        let view = page::leaf_view(head);
                        let cur = cursor.as_ref().map(Vec::as_slice);
                        for r in alive_at(&view.records, t) {
                            if in_range(&r.key)
                                && forest_core::index::in_bounds(&r.key, Bound::Unbounded, cur)
                            {
                                let v = r.value.clone().unwrap_or_default();
                                batch.push((r.key.clone(), v));
                            }
                        }
                        view.low
                    };
                    for (k, v) in batch.iter().rev() {
                        if visit(k, v) == ControlFlow::Break(()) {
                            return Ok(());
                        }
                    }
                    if next.is_empty() || below_lower(&next, lower) {
                        return Ok(());
                    }
                    cursor = Bound::Excluded(next.into_vec());
                }
            }
        }
    }
}
