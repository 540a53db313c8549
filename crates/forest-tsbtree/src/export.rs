//! The versions that reads from a time on need ([`forest_core::TemporalIndex::versions_from`]):
//! what a store's temporal checkpoint writes (issue 18; tsbw-tree-temporal.md §V-C: history
//! before the retention threshold is gone, so a checkpoint holds the rest).
//!
//! The walk is the ascending scan's (`scan.rs`): the current leaf holding the cursor, found
//! under an epoch pin, its records copied, then the next leaf from its high key; so every key
//! is visited once while writes and splits go on. For each current leaf the walk also follows
//! its history links back while the page starts after `from`, as `history.rs` does for one
//! key: a historical page reached so covers at least the leaf's key range for its time range
//! (key splits copy the history link and the start, `key_split.rs`), and the page where the
//! walk stops starts at or before `from`, so it holds every version alive at `from` (a time
//! split copies them into both pages, Fig. 3). Only keys in the current leaf's range (and at
//! or after the cursor) are taken from each page. Historical pages are never updated and
//! retention cannot free a page ending after `from` (the threshold is at most `from`), so
//! each page of the chain may be read under a pin of its own, by its PID.
//!
//! Streaming (review rev-tckpt F3): one page is held at a time, never a leaf's whole history
//! (a hot key's can be most of the store). A version is in two pages only as a time split's
//! copy, and a copy is always older than the start of the page holding it, so a page whose
//! start is after `from` hands out only its versions from its start on; the page where the
//! walk stops hands out those of `version::alive_from` at `from` (the latest version before
//! `from` of each key is in it, as its own or as a copy). So each version is handed out once,
//! in no particular order: the caller sorts (a store's checkpoint, by timestamp).
//!
//! Which versions: those of `version::alive_from` at `from` among the versions up to `to`;
//! later versions are writes under way, which the caller's cut leaves to its log.

use forest_core::{Result, Timestamp, VersionVisitor};

use crate::as_of::Target;
use crate::page::{self, LeafView};
use crate::version;
use crate::TsbTree;

impl TsbTree {
    pub(crate) fn versions_between(
        &self,
        from: Timestamp,
        to: Timestamp,
        visit: &mut VersionVisitor<'_>,
    ) -> Result<()> {
        self.check_retained(from)?;
        let mut cursor: Vec<u8> = Vec::new();
        loop {
            let mut view = self.leaf_at(&cursor, from)?;
            let high = view.high.take();
            let in_leaf = |k: &[u8]| *k >= *cursor && high.as_deref().is_none_or(|h| k < h);
            loop {
                view.records.retain(|r| r.ts <= to && in_leaf(&r.key));
                let older = view.history.filter(|_| view.start > from);
                let handed = match older {
                    // Copies are older than the page's start: another page hands them out.
                    Some(_) => {
                        let start = view.start;
                        view.records.retain(|r| r.ts >= start);
                        std::mem::take(&mut view.records)
                    }
                    None => version::alive_from(&view.records, from),
                };
                for r in &handed {
                    if visit(&r.key, r.ts, r.value.as_deref()).is_break() {
                        return Ok(());
                    }
                }
                let Some(h) = older else { break };
                view = {
                    let guard = &crossbeam_epoch::pin();
                    // After pinning: nothing the walk needs is freed under it (retention.rs).
                    self.check_retained(from)?;
                    self.check_history_link(from, view.start)?;
                    page::leaf_view(self.read_as_of(h, from, guard)?)
                };
            }
            match high {
                Some(high) => cursor = high.into_vec(),
                None => return Ok(()),
            }
        }
    }

    /// A copy of the current leaf holding `key`, for a walk from `from`.
    fn leaf_at(&self, key: &[u8], from: Timestamp) -> Result<LeafView> {
        let guard = &crossbeam_epoch::pin();
        self.check_retained(from)?;
        let (_, head) = self.find_leaf_as_of(Target::At(key), u64::MAX, guard)?;
        Ok(page::leaf_view(head))
    }
}
