//! The versions that reads from a time on need ([`forest_core::TemporalIndex::versions_from`]):
//! what a store's temporal checkpoint writes (issue 18; tsbw-tree-temporal.md §V-C: history
//! before the retention threshold is gone, so a checkpoint holds the rest).
//!
//! The walk is the ascending scan's (`scan.rs`): the current leaf holding the cursor, found
//! under an epoch pin, its records copied, then the next leaf from its high key; so every key
//! is visited once, in order, while writes and splits go on. For each current leaf the walk
//! also follows its history links back while the page starts after `from`, as `history.rs`
//! does for one key: a historical page reached so covers at least the leaf's key range for
//! its time range (key splits copy the history link and the start, `key_split.rs`), and the
//! page where the walk stops starts at or before `from`, so it holds every version alive at
//! `from` (a time split copies them into both pages, Fig. 3). Only keys in the current
//! leaf's range (and at or after the cursor) are taken from each page, and a version met in
//! two pages is kept once. Historical pages are never updated and retention cannot free a
//! page ending after `from` (the threshold is at most `from`), so the chain read under the
//! pin is stable.
//!
//! Which versions: those of `version::alive_from` at `from` among the versions up to `to`;
//! later versions are writes under way, which the caller's cut leaves to its log.

use std::collections::BTreeMap;

use forest_core::{Result, Timestamp, VersionVisitor};

use crate::as_of::Target;
use crate::page;
use crate::version::{self, Record};
use crate::TsbTree;

/// One leaf's versions met on the walk, each once: (key, timestamp) to value (None: a
/// tombstone).
type Found = BTreeMap<(Box<[u8]>, Timestamp), Option<Box<[u8]>>>;

impl TsbTree {
    pub(crate) fn versions_between(
        &self,
        from: Timestamp,
        to: Timestamp,
        visit: &mut VersionVisitor<'_>,
    ) -> Result<()> {
        self.check_retained(from)?;
        let mut cursor: Vec<u8> = Vec::new();
        let mut found: Found = BTreeMap::new();
        loop {
            found.clear();
            let next = {
                let guard = &crossbeam_epoch::pin();
                // After pinning: nothing the walk needs is freed under it (retention.rs).
                self.check_retained(from)?;
                let (_, head) = self.find_leaf_as_of(Target::At(&cursor), u64::MAX, guard)?;
                let mut view = page::leaf_view(head);
                let high = view.high.clone();
                let in_leaf = |k: &[u8]| *k >= *cursor && high.as_deref().is_none_or(|h| k < h);
                loop {
                    for r in &view.records {
                        if r.ts <= to && in_leaf(&r.key) {
                            found
                                .entry((r.key.clone(), r.ts))
                                .or_insert_with(|| r.value.clone());
                        }
                    }
                    match (view.history, view.start > from) {
                        (Some(h), true) => {
                            self.check_history_link(from, view.start)?;
                            view = page::leaf_view(self.read_as_of(h, from, guard)?);
                        }
                        _ => break,
                    }
                }
                high
            };
            let records: Vec<Record> = std::mem::take(&mut found)
                .into_iter()
                .map(|((key, ts), value)| Record { key, ts, value })
                .collect();
            for r in version::alive_from(&records, from) {
                if visit(&r.key, r.ts, r.value.as_deref()).is_break() {
                    return Ok(());
                }
            }
            match next {
                Some(high) => cursor = high.into_vec(),
                None => return Ok(()),
            }
        }
    }
}
