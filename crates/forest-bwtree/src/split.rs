//! Node splits as B-link half splits (Bw-tree §IV-A), and their completion by any thread that
//! meets them (§IV-C).
//!
//! 1. Child split: allocate Q, build its base page from P's records at or above the separator
//!    K_P (side link: P's old side link), install it without a CAS (only this thread knows Q),
//!    then prepend a split delta (K_P, Q) to P with a CAS. If that CAS fails the split is
//!    abandoned ("failed split", Table I) and Q freed; the next writer over the threshold
//!    tries again.
//! 2. Parent update: prepend an index-term delta (K_P, Q, K_Q) to the parent, K_Q being Q's
//!    high key. The parent comes from the path remembered on the way down; when the parent no
//!    longer holds K_P (it split), the poster moves right; when the remembered parent was
//!    merged away (its state is gone or frozen) it completes that merge and re-traverses from
//!    the root to the parent level; when P was the root, a new root is made over P and Q and
//!    swapped in with a CAS on the root PID.
//!
//! Any thread that follows a side link completes that split first (posts the index term if
//! the parent does not route K_P to Q yet), so an incomplete split is "committed" before the
//! thread's own update or SMO (§IV-C). Posting is idempotent: it first routes K_P in the
//! parent and stops if it already reaches Q. It also stops if Q is frozen or gone: a page is
//! only removed after its parent routed to it (merge.rs), so its index term was posted before,
//! and posting again would resurrect a merged page. Because the poster CASes on the parent
//! state it routed in, a term posted (and a merge begun) after that read makes its CAS fail.

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_core::pause::pause_point;
use forest_llama::Pid;

use crate::base_page::{key_cmp, BasePage, NO_PID};
use crate::consolidate::{build_state, view, view_at};
use crate::delta::{Kind, Node, Record};
use crate::flush::{image_at, lsn_range};
use crate::gc::node_ref;
use crate::get::{route, Path, Route, Target};
use crate::smo_log::{newest_piece, SmoDelta, Step, StepLog};
use crate::{root_word_pid, BwTree};

impl BwTree {
    /// Splits the page `pid` at `state` (which has grown past the page size) and completes the
    /// split up the tree. `path` holds the page's ancestors.
    pub(crate) fn split<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        path: Path,
        guard: &'g Guard,
    ) {
        // §IV-C: an earlier split of this page that is still incomplete goes first
        // (idempotent: nothing is posted if the parent already has it).
        if let (Some(high), side_link) = node.bounds() {
            if self.complete_split(path, pid, node.level, high, side_link, guard) {
                self.stats.smo_helps.incr();
            }
        }
        // §V-A: Q's base page holds only records with LSN <= ESL; deltas above ESL stay
        // deltas on top of it (the same rule as consolidation's).
        let (v, held) = view_at(node, self.esl());
        let full_view;
        let full = if held.is_empty() {
            &v
        } else {
            full_view = view(node);
            &full_view
        };
        if full.records.len() < 2 {
            return;
        }
        let middle = self.split_point(&full.records);
        let sized = middle > full.records.len() / 2;
        let separator = full.records[middle].0;
        let first_right = v
            .records
            .partition_point(|(k, _)| key_cmp(k, separator).is_lt());
        let right = BasePage::build(
            separator,
            v.high,
            v.side_link,
            v.records[first_right..].iter().copied(),
        );
        let q_state = if held.is_empty() {
            Owned::new(Node::base(node.level, right))
        } else {
            let held_right: Vec<_> = held
                .iter()
                .filter(|h| key_cmp(h.key, separator).is_ge())
                .copied()
                .collect();
            build_state(node.level, right, None, &held_right)
        };
        debug_assert_eq!(q_state.record_count as usize, full.records.len() - middle);
        let q = self.table.allocate();
        self.unpublished(q, true);
        let q_installed = self.table.install_new(q, q_state, guard);
        self.count_state(node_ref(q_installed));
        let kind = Kind::Split {
            separator: separator.into(),
            side_link: q,
        };
        let left_count = u32::try_from(middle).expect("page record count fits u32");
        let delta = Owned::new(Node::delta(node, left_count, kind));
        self.stats.split_attempts.incr();
        self.stats.cas_attempts.incr();
        // On an LSS, T1 of the split (`smo_log.rs`): Allocate Q, Q's image, the split delta.
        let step = self.smo_step(
            || {
                let (q_node, esl) = (node_ref(q_installed), self.esl());
                StepLog::default()
                    .delta_with_lsns(
                        q,
                        SmoDelta::PageImage(image_at(q_node, esl)),
                        lsn_range(q_node, esl),
                    )
                    .delta(
                        pid,
                        newest_piece(node),
                        SmoDelta::Split {
                            separator: separator.to_vec(),
                            right: q,
                        },
                    )
            },
            &[q],
            || self.table.update_d(pid, state, delta, guard),
            guard,
        );
        match step {
            Step::Won(installed) => {
                self.count_delta(node_ref(installed));
                self.stats.splits.incr();
                pause_point(if node.level == 0 {
                    "split:leaf-half-split-installed"
                } else {
                    "split:index-half-split-installed"
                });
                let Kind::Split { separator, .. } = &node_ref(installed).kind else {
                    unreachable!("the installed delta is the split delta")
                };
                self.complete_split(path, pid, node.level, separator, q, guard);
                // Each half splits again while it is over: P over its limit when Q took
                // less than half (`split_point`; review rev-smo F1), and either half whose
                // own records fill more than half a segment (review rev-smo2 F1b: the limit
                // averages over P's old base, records that moved to Q included, so a P of
                // large records could stay larger than a segment). Every split moves at
                // least one record, so this ends; both halves stay flushable, whoever
                // writes to them next.
                for half in [pid, q] {
                    if let Some((state, node)) = self.read_node(half, guard) {
                        let over_limit = half == pid
                            && sized
                            && node.record_count as usize > self.page_limits(node).0;
                        if over_limit || self.over_room(node) {
                            self.split(half, state, node, Path::new(), guard);
                        }
                    }
                }
            }
            Step::Lost((abandoned, _)) => {
                drop(abandoned);
                // Q was never reachable: `smo_step` freed it (TAbort; its state and PID are
                // reclaimed after the epoch, like any freed page).
                self.stats.failed_splits.incr();
                self.stats.cas_failures.incr();
            }
            Step::NotAttempted => {
                // The LSS refused T1 (Q's image is larger than a segment; review rev-systxn
                // F1): aborted, Q freed as on a lost CAS, the delta never installed. P stays
                // oversize and the next writer over the threshold tries again (each retry
                // is refused while Q's image does not fit: the page keeps working, unsplit).
                self.stats.failed_splits.incr();
            }
        }
    }

    /// Where a page of `records` splits: the middle, or on an LSS further right when the
    /// right half's records would fill more than half a segment's record (review rev-smo F1:
    /// T1 logs Q's image in one unit, which must fit a segment; a split refused for that
    /// would be refused again on every insert while the page grew without bound). Q then
    /// takes the most records from the right that fit, at least one; P stays over its limit
    /// and splits again on the next insert into it, so each page stays within its limit
    /// plus one record. Records are estimated at their bytes plus [`RECORD_ESTIMATE_BYTES`].
    fn split_point(&self, records: &[(&[u8], &[u8])]) -> usize {
        let middle = records.len() / 2;
        let Some(storage) = &self.storage else {
            return middle;
        };
        let room = storage.lss.config().record_bytes_max() / 2;
        let mut bytes = 0u64;
        let mut first = records.len();
        while first > middle {
            let (k, v) = records[first - 1];
            bytes += (k.len() + v.len() + RECORD_ESTIMATE_BYTES) as u64;
            if bytes > room && first < records.len() {
                break;
            }
            first -= 1;
        }
        first
    }

    /// On an LSS, whether the page at `node` has two records or more and they fill more
    /// than half a segment's record, estimated as in [`Self::split_point`] (review rev-smo2
    /// F1b: such a page's image may not fit a segment, so it splits again).
    fn over_room(&self, node: &Node) -> bool {
        let Some(storage) = &self.storage else {
            return false;
        };
        if node.record_count < 2 {
            return false;
        }
        let room = storage.lss.config().record_bytes_max() / 2;
        let full = view(node);
        let bytes: u64 = full
            .records
            .iter()
            .map(|(k, v)| (k.len() + v.len() + RECORD_ESTIMATE_BYTES) as u64)
            .sum();
        full.records.len() > 1 && bytes > room
    }

    /// On an LSS, whether the write at the top of `node` (whose limit is `split_above`
    /// records) left the page's records filling more than half a segment's record: checked
    /// (by [`Self::over_room`]) only when the written record is larger than the limit
    /// assumed, since the limit averages over the base page and a delta of larger records,
    /// or a value overwritten by a larger one, grows the page without adding to its count
    /// (review rev-smo2 F1b: concurrent writers left a page larger than a segment).
    pub(crate) fn write_over_room(&self, node: &Node, split_above: usize) -> bool {
        let Some(storage) = &self.storage else {
            return false;
        };
        let (Kind::Insert(r) | Kind::Modify(r)) = &node.kind else {
            return false;
        };
        let room = storage.lss.config().record_bytes_max() / 2;
        let assumed = room / split_above.max(1) as u64;
        let bytes = (r.key().len() + r.value().len() + RECORD_ESTIMATE_BYTES) as u64;
        bytes > assumed && self.over_room(node)
    }

    /// On an LSS, `split_above` capped so that a leaf of records of `per_record` bytes
    /// splits before its image fills half a segment's record, at least above one record
    /// (review rev-smo F1: a page whose image is larger than a segment can be neither
    /// flushed nor evicted). The default 64 MiB segments leave every usual page as it was.
    pub(crate) fn split_above_on_lss(&self, split_above: usize, per_record: usize) -> usize {
        let Some(storage) = &self.storage else {
            return split_above;
        };
        let room = storage.lss.config().record_bytes_max() / 2;
        let fit = room / (per_record + RECORD_ESTIMATE_BYTES).max(1) as u64;
        split_above.min(usize::try_from(fit).unwrap_or(usize::MAX).max(1))
    }

    /// Completes the split of page `pid` at `level` into (`separator`, `side_link`): posts the
    /// index term to the parent unless the parent already has it (§IV-A "Parent Update",
    /// §IV-C). `path` holds the page's ancestors as remembered on the way down. Returns whether
    /// this call posted the term (or made the new root).
    pub(crate) fn complete_split(
        &self,
        mut path: Path,
        pid: Pid,
        level: u32,
        separator: &[u8],
        side_link: Pid,
        guard: &Guard,
    ) -> bool {
        let mut parent = match path.pop() {
            Some(parent) => parent,
            None => match self.find_parent(pid, level, separator, side_link, &mut path, guard) {
                FoundParent::Pid(parent) => parent,
                FoundParent::RootGrown => return true,
                FoundParent::None => return false,
            },
        };
        loop {
            let Some((state, node)) = self.read_node(parent, guard) else {
                // The remembered parent was merged away: re-traverse (§IV-A).
                match self.find_parent(pid, level, separator, side_link, &mut path, guard) {
                    FoundParent::Pid(found) => parent = found,
                    FoundParent::RootGrown => return true,
                    FoundParent::None => return false,
                }
                continue;
            };
            debug_assert_eq!(node.level, level + 1, "a parent is one level up");
            debug_assert!(
                node.base_page().low() <= separator,
                "parent {parent} (low {:?}) of page {pid} is right of its split at {separator:?}",
                node.base_page().low()
            );
            match route(node, Target::At(separator)) {
                Route::Right {
                    separator: parent_separator,
                    side_link: parent_side,
                } => {
                    // The parent split and K_P went right: complete that split, then follow.
                    if self.complete_split(
                        path,
                        parent,
                        level + 1,
                        parent_separator,
                        parent_side,
                        guard,
                    ) {
                        self.stats.smo_helps.incr();
                    }
                    parent = parent_side;
                }
                Route::Removed => {
                    // The parent is being merged: complete that first (§IV-C), re-traverse.
                    if self.complete_merge(parent, guard) {
                        self.stats.smo_helps.incr();
                    }
                    match self.find_parent(pid, level, separator, side_link, &mut path, guard) {
                        FoundParent::Pid(found) => parent = found,
                        FoundParent::RootGrown => return true,
                        FoundParent::None => return false,
                    }
                }
                Route::Child(child) if child == side_link => return false,
                Route::Child(_) => {
                    // Not posted, or posted and since merged away: tell them apart by Q.
                    let high = match self.read_node(side_link, guard) {
                        Some((_, right)) if !matches!(right.kind, Kind::RemoveNode { .. }) => {
                            right.bounds().0
                        }
                        _ => return false,
                    };
                    let term = Record::new(separator, &side_link.to_le_bytes());
                    let kind = Kind::IndexTerm {
                        term: Box::new(term),
                        high: high.map(Into::into),
                    };
                    let delta = Owned::new(Node::delta(node, node.record_count + 1, kind));
                    self.stats.cas_attempts.incr();
                    // On an LSS, T2 of the split: the index-term delta (each attempt its own).
                    let step = self.smo_step(
                        || {
                            StepLog::default().delta(
                                parent,
                                newest_piece(node),
                                SmoDelta::IndexTerm {
                                    separator: separator.to_vec(),
                                    child: side_link,
                                    high: high.map(<[u8]>::to_vec),
                                },
                            )
                        },
                        &[],
                        || self.table.update_d(parent, state, delta, guard),
                        guard,
                    );
                    match step {
                        Step::Won(installed) => {
                            let installed_node = node_ref(installed);
                            self.count_delta(installed_node);
                            if installed_node.record_count as usize
                                > self.config.max_records_per_page
                            {
                                self.split(parent, installed, installed_node, path, guard);
                            } else {
                                self.consolidate_if_long(parent, installed, installed_node, guard);
                            }
                            return true;
                        }
                        Step::Lost((abandoned, _)) => {
                            // Another delta reached the parent first; route again in its new
                            // state (the term may be there now, or the parent may have split).
                            drop(abandoned);
                            self.stats.cas_failures.incr();
                        }
                        // Refused (a unit of two keys larger than a segment): the split stays
                        // incomplete, which the side link keeps correct (§IV-C).
                        Step::NotAttempted => return false,
                    }
                }
                Route::Here => unreachable!("a parent is an index page"),
            }
        }
    }

    /// Finds the parent of page `pid` (at `level`) for `separator` from the root, or makes a
    /// new root when `pid` is the root.
    fn find_parent(
        &self,
        pid: Pid,
        level: u32,
        separator: &[u8],
        side_link: Pid,
        path: &mut Path,
        guard: &Guard,
    ) -> FoundParent {
        let root_word = self.root_word();
        if root_word_pid(root_word) == pid
            && self.grow_root(root_word, pid, level, separator, side_link, guard)
        {
            return FoundParent::RootGrown;
        }
        match self.descend(Target::At(separator), level + 1, path, guard) {
            Some((parent, _, _)) => FoundParent::Pid(parent),
            None => FoundParent::None,
        }
    }

    /// Makes a new root over the old root `pid` and its new right sibling `side_link`; false
    /// when the root changed since `root_word` was read, or the split no longer stands.
    ///
    /// Precondition: `root_word` was read (before this call) with `pid` as the root.
    /// The split was read from some earlier state of `pid`; since then the root may have grown
    /// over it and collapsed back (its right page merged away meanwhile). So the split is
    /// checked after the root word was read: the right page is still a live, unfrozen page
    /// (within this guard its PID cannot have been reused), and the CAS on the versioned root
    /// word fails if the root changed at all after that read. A right page that is live and
    /// unfrozen was never merged, so no root over it ever collapsed: it has no parent yet.
    pub(crate) fn grow_root(
        &self,
        root_word: u64,
        pid: Pid,
        level: u32,
        separator: &[u8],
        side_link: Pid,
        guard: &Guard,
    ) -> bool {
        match self.read_node(side_link, guard) {
            Some((_, right)) if !matches!(right.kind, Kind::RemoveNode { .. }) => {}
            _ => return false, // merged away: the split was completed and undone
        }
        let left = pid.to_le_bytes();
        let right = side_link.to_le_bytes();
        let entries = [(&[][..], &left[..]), (separator, &right[..])];
        let page = BasePage::build(b"", None, NO_PID, entries.into_iter());
        let root = self.table.allocate();
        self.unpublished(root, true);
        let root_state =
            self.table
                .install_new(root, Owned::new(Node::base(level + 1, page)), guard);
        self.count_state(node_ref(root_state));
        self.stats.cas_attempts.incr();
        // On an LSS: {Allocate root, its image, the root word}; a lost CAS frees the root.
        let step = self.smo_step(
            || {
                let image = image_at(node_ref(root_state), self.esl());
                StepLog::default()
                    .delta(root, None, SmoDelta::PageImage(image))
                    .delta(root, None, SmoDelta::Root)
            },
            &[root],
            || self.set_root(root_word, root).then_some(()).ok_or(()),
            guard,
        );
        match step {
            Step::Won(()) => true,
            Step::Lost(()) => {
                self.stats.cas_failures.incr();
                false
            }
            // Refused: the root freed, the split stays incomplete (as above).
            Step::NotAttempted => false,
        }
    }
}

/// A record's bytes in a page image beyond its key and value (6 in `flush.rs`
/// `encode_image`), with room to spare, for [`BwTree::split_point`]'s estimate.
const RECORD_ESTIMATE_BYTES: usize = 32;

/// Where a split's parent was found.
enum FoundParent {
    Pid(Pid),
    /// The split page was the root, and this thread made the new root over it.
    RootGrown,
    /// No page at the parent level holds the separator (the page is no longer in the tree).
    None,
}
