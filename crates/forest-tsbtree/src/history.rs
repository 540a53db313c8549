//! A key's version history (issue 18's `history`): the versions of one key in a time range,
//! each once.
//!
//! The walk starts at the key's current leaf and follows history links (`as_of.rs`) back
//! while the page starts after `from`; every page on the way holds the key's range for its
//! time range. A version that a time split copied into both pages (Fig. 3) is the same
//! `(key, timestamp)` in both, and is kept once.

use std::collections::BTreeMap;

use forest_core::{HistoryVisitor, Order, Result};

use crate::as_of::{Locate, Target};
use crate::page;
use crate::TsbTree;

impl TsbTree {
    pub(crate) fn history_of(
        &self,
        key: &[u8],
        from: u64,
        to: u64,
        order: Order,
        visit: &mut HistoryVisitor<'_>,
    ) -> Result<()> {
        if from > to {
            return self.check_retained(from);
        }
        let mut versions: BTreeMap<u64, Option<Box<[u8]>>> = BTreeMap::new();
        {
            let guard = &crossbeam_epoch::pin();
            // The page holding the key at `to` (current or historical), then back in time.
            // `from` is checked after pinning, so nothing the walk needs is freed under it.
            self.check_retained(from)?;
            let (_, mut head) = self.find_leaf_as_of(Target::At(key), to, guard)?;
            loop {
                let view = page::leaf_view(head);
                let first = view.records.partition_point(|r| *r.key < *key);
                for r in view.records[first..].iter().take_while(|r| *r.key == *key) {
                    if (from..=to).contains(&r.ts) {
                        versions.entry(r.ts).or_insert_with(|| r.value.clone());
                    }
                }
                match (view.history, view.start > from) {
                    (Some(h), true) => {
                        self.check_history_link(from, view.start)?;
                        head = self.read_as_of(h, from, guard)?;
                    }
                    _ => break,
                }
                // A historical page holds the key range of its page when it split, which
                // includes the key; no side links to follow.
                debug_assert!(matches!(
                    crate::as_of::locate(head, Target::At(key), view.start.saturating_sub(1)),
                    Locate::Here | Locate::History(_)
                ));
            }
        }
        let mut hand_out =
            |(ts, v): (&u64, &Option<Box<[u8]>>)| visit(*ts, v.as_deref()).is_break();
        match order {
            Order::Ascending => {
                for e in versions.iter() {
                    if hand_out(e) {
                        return Ok(());
                    }
                }
            }
            Order::Descending => {
                for e in versions.iter().rev() {
                    if hand_out(e) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }
}
