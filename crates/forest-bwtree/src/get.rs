//! Page search (Bw-tree §III-A "Page search", §IV-A index-node search) and the descent from
//! the root with B-link moves to the right.
//!
//! A leaf search walks the delta chain newest first and stops at the first delta for the key;
//! otherwise it binary-searches the base page. An index search ends early at an index-term
//! delta whose [separator, high) holds the key, else binary-searches the base page. A split
//! delta (or a base page's high key) below the key sends the search along the side link, and
//! the thread first completes that split (§IV-C, see `split.rs`). A node merge delta
//! sends keys at or above its separator into the absorbed page's state (§IV-B: "the search
//! becomes a tree search"). An index page with an index-term delete delta is routed through its
//! merged view: the deleted separator's keys go to the child left of it.
//!
//! A page with a remove node delta is frozen: a thread that meets one completes the merge
//! (§IV-C) and starts over from the root. A PID whose state is gone (freed after a merge,
//! reached from a state read before) also sends the thread back to the root.
//!
//! Choice the paper leaves open: a page holds keys in [low, high); a split's separator is the
//! first key of the new right page.

use crossbeam_epoch::{Guard, Shared};
use forest_llama::Pid;

use crate::base_page::{copy_bytes, decode_pid, key_cmp};
use crate::consolidate::view;
use crate::delta::{KeyProbe, Kind, Node};
use crate::{root_word_pid, BwTree};

/// What a search looks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target<'a> {
    /// The page that holds this key.
    At(&'a [u8]),
    /// The page that holds the greatest keys below this bound (`None`: no bound), for
    /// descending scans and for finding a left sibling.
    Below(Option<&'a [u8]>),
}

impl Target<'_> {
    /// Whether the target lies at or to the right of `boundary` (a low key or separator).
    #[inline]
    pub(crate) fn right_of(self, boundary: &[u8]) -> bool {
        match self {
            Target::At(key) => key_cmp(key, boundary).is_ge(),
            Target::Below(Some(bound)) => bound > boundary,
            Target::Below(None) => true,
        }
    }
}

/// Where a page sends a search.
pub(crate) enum Route<'g> {
    /// Along the side link: the target is at or above `separator`.
    Right { separator: &'g [u8], side_link: Pid },
    /// Down to a child (index nodes).
    Child(Pid),
    /// This leaf holds the target.
    Here,
    /// The page is being merged away (remove node delta on top).
    Removed,
}

/// Routes `target` at the page whose state is `node`.
pub(crate) fn route<'g>(node: &'g Node, target: Target<'_>) -> Route<'g> {
    if matches!(node.kind, Kind::RemoveNode { .. }) {
        return Route::Removed;
    }
    let mut current = node;
    loop {
        match &current.kind {
            Kind::Split {
                separator,
                side_link,
            } => {
                if target.right_of(separator) {
                    return Route::Right {
                        separator,
                        side_link: *side_link,
                    };
                }
            }
            Kind::IndexTerm { term, high } => {
                if target.right_of(term.key())
                    && !high.as_deref().is_some_and(|h| target.right_of(h))
                {
                    return Route::Child(decode_pid(term.value()));
                }
            }
            // A deleted separator hands its keys to the child left of it, whose own range may
            // have grown by earlier deletes since consolidated away; only the page's merged
            // view knows that child, so route by the view (merges are rare, and the next
            // consolidation folds the delete into the base page).
            Kind::IndexTermDelete { .. } => return route_by_view(node, target),
            Kind::NodeMerge(merge) => {
                if let Some(high) = merge.high.as_deref() {
                    if target.right_of(high) {
                        return Route::Right {
                            separator: high,
                            side_link: merge.side_link,
                        };
                    }
                }
                if target.right_of(&merge.separator) {
                    current = merge.right();
                    continue;
                }
            }
            Kind::Base(page) => {
                let beyond_high = match target {
                    Target::At(key) => page.at_or_above_high(key),
                    Target::Below(_) => page.high().is_some_and(|high| target.right_of(high)),
                };
                if beyond_high {
                    return Route::Right {
                        separator: page.high().expect("a page beyond its high key has one"),
                        side_link: page.side_link(),
                    };
                }
                if node.level == 0 {
                    return Route::Here;
                }
                // The first entry's separator is the page's low key, left of the target.
                let count = match target {
                    Target::At(key) => page.count_below(key, true),
                    Target::Below(Some(bound)) => page.count_below(bound, false),
                    Target::Below(None) => page.len(),
                };
                debug_assert!(
                    count > 0,
                    "an index page's low key {:?} is left of its target {target:?} (level {}, \
                     high {:?})",
                    page.low(),
                    node.level,
                    page.high()
                );
                return Route::Child(decode_pid(page.value(count.saturating_sub(1))));
            }
            Kind::Insert(_)
            | Kind::Modify(_)
            | Kind::Delete(..)
            | Kind::RemoveNode { .. }
            | Kind::Flush(..) => {}
        }
        current = current.next().expect("a chain ends in a base page");
    }
}

/// Routes `target` at an index page through its merged view (see [`route`]).
fn route_by_view<'g>(node: &'g Node, target: Target<'_>) -> Route<'g> {
    let v = view(node);
    if let Some(high) = v.high {
        if target.right_of(high) {
            return Route::Right {
                separator: high,
                side_link: v.side_link,
            };
        }
    }
    let count = v.records.partition_point(|&(sep, _)| target.right_of(sep));
    debug_assert!(count > 0, "an index page's low key is left of its targets");
    Route::Child(decode_pid(v.records[count.saturating_sub(1)].1))
}

/// The outcome of looking a key up in a leaf state.
pub(crate) enum Lookup<'g> {
    Found(&'g [u8]),
    Absent,
    /// The key is at or above `separator` (a split delta, a node merge delta's or the base
    /// page's high key): it lives on the page at `side_link` (B-link move).
    Right {
        separator: &'g [u8],
        side_link: Pid,
    },
    /// The page is frozen (remove node delta): it is being merged away.
    Removed,
}

/// Looks `key` up in the leaf state `node`, newest delta first (§III-A). This is also the
/// leaf's routing: one walk of the chain both finds the record and tells a key that moved
/// right, so a point operation walks a leaf's chain once.
#[inline]
pub(crate) fn lookup<'g>(node: &'g Node, key: &[u8]) -> Lookup<'g> {
    // Record deltas are told apart by length and hash first: a boxed key is read only when
    // both match (delta.rs `Bytes::Heap`).
    let mut probe = KeyProbe::new(key);
    let mut current = node;
    loop {
        match &current.kind {
            Kind::Insert(r) | Kind::Modify(r) if r.key_is(&mut probe) => {
                return Lookup::Found(r.value())
            }
            Kind::Delete(k, _) if k.is_key(&mut probe) => return Lookup::Absent,
            Kind::Split {
                separator,
                side_link,
            } if key_cmp(key, separator).is_ge() => {
                return Lookup::Right {
                    separator,
                    side_link: *side_link,
                }
            }
            Kind::RemoveNode { .. } => return Lookup::Removed,
            Kind::NodeMerge(merge) => {
                if let Some(high) = merge.high.as_deref() {
                    if key_cmp(key, high).is_ge() {
                        return Lookup::Right {
                            separator: high,
                            side_link: merge.side_link,
                        };
                    }
                }
                if key_cmp(key, &merge.separator).is_ge() {
                    current = merge.right();
                    continue;
                }
            }
            Kind::Base(page) => {
                page.prefetch();
                if page.at_or_above_high(key) {
                    return Lookup::Right {
                        separator: page.high().expect("a page beyond its high key has one"),
                        side_link: page.side_link(),
                    };
                }
                return match page.search(key) {
                    Ok(index) => Lookup::Found(page.value(index)),
                    Err(_) => Lookup::Absent,
                };
            }
            _ => {}
        }
        current = current.next().expect("a chain ends in a base page");
    }
}

/// The value `lookup` finds, for tests.
#[cfg(test)]
pub(crate) fn lookup_found<'g>(node: &'g Node, key: &[u8]) -> Option<&'g [u8]> {
    match lookup(node, key) {
        Lookup::Found(value) => Some(value),
        _ => None,
    }
}

/// The PIDs from the root down to (not including) the page a descent stopped at: the last
/// [`PATH_LEN_MAX`] of them, which is every one in any tree that fits in memory. A deeper
/// descent forgets the top of its path; a thread that pops past what it kept finds the
/// parent by re-traversing from the root, as it does when a remembered parent was merged
/// away (§IV-A), so the bound costs time in such a tree, never correctness.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    /// A ring: entry `i` of the descent sits at `i % PATH_LEN_MAX`.
    pids: [Pid; PATH_LEN_MAX],
    /// Entries pushed and not popped.
    len: usize,
    /// Entries below this were overwritten (forgotten).
    kept_from: usize,
}

/// The entries a path keeps. Small, because a path is copied into every SMO completion and
/// made on every operation; 16 levels of even 4-record pages hold 4^16 records.
const PATH_LEN_MAX: usize = 16;

impl Path {
    pub(crate) fn new() -> Self {
        Self {
            pids: [0; PATH_LEN_MAX],
            len: 0,
            kept_from: 0,
        }
    }

    pub(crate) fn push(&mut self, pid: Pid) {
        if self.len - self.kept_from == PATH_LEN_MAX {
            self.kept_from += 1;
        }
        self.pids[self.len % PATH_LEN_MAX] = pid;
        self.len += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<Pid> {
        if self.len == self.kept_from {
            return None;
        }
        self.len -= 1;
        Some(self.pids[self.len % PATH_LEN_MAX])
    }

    fn clear(&mut self) {
        self.len = 0;
        self.kept_from = 0;
    }
}

impl BwTree {
    /// Descends from the root to the page at `level` that holds `target`, completing every
    /// incomplete SMO it meets on the way (§IV-C). `path` gets the ancestors it went through.
    /// `None` when the tree has no page at `level` (the root is lower).
    pub(crate) fn descend<'g>(
        &self,
        target: Target<'_>,
        level: u32,
        path: &mut Path,
        guard: &'g Guard,
    ) -> Option<(Pid, Shared<'g, Node>, &'g Node)> {
        self.descend_inner(target, level, true, path, guard)
    }

    /// [`Self::descend`]; with `route_last` false it returns the first page it reaches at
    /// `level` without routing it (no B-link move, no merge help there: the caller does both).
    fn descend_inner<'g>(
        &self,
        target: Target<'_>,
        level: u32,
        route_last: bool,
        path: &mut Path,
        guard: &'g Guard,
    ) -> Option<(Pid, Shared<'g, Node>, &'g Node)> {
        'restart: loop {
            path.clear();
            let root_word = self.root_word();
            let mut pid = root_word_pid(root_word);
            let mut at_root = true;
            loop {
                let Some((state, node)) = self.read_node(pid, guard) else {
                    // A page freed after we read its PID (merged away, or an old root).
                    self.stats.restarts.incr();
                    continue 'restart;
                };
                if at_root && node.level < level {
                    // Only a root whose split is incomplete can be below a level in use:
                    // make the new root over it (§IV-A, §IV-C) and start over. Grown here,
                    // not through `complete_split`, whose parent search would descend again.
                    let (high, side_link) = node.bounds();
                    match high {
                        Some(high) if !matches!(node.kind, Kind::RemoveNode { .. }) => {
                            if self.grow_root(root_word, pid, node.level, high, side_link, guard) {
                                self.stats.smo_helps.incr();
                            } else if self.root_word() == root_word {
                                // The split's right page is frozen or gone, and the root did
                                // not change: no level above exists to find.
                                return None;
                            }
                            continue 'restart;
                        }
                        _ => return None,
                    }
                }
                at_root = false;
                if !route_last && node.level == level {
                    return Some((pid, state, node));
                }
                match route(node, target) {
                    Route::Right {
                        separator,
                        side_link,
                    } => {
                        if self.complete_split(*path, pid, node.level, separator, side_link, guard)
                        {
                            self.stats.smo_helps.incr();
                        }
                        pid = side_link;
                    }
                    Route::Removed => {
                        if self.complete_merge(pid, guard) {
                            self.stats.smo_helps.incr();
                        }
                        self.stats.restarts.incr();
                        continue 'restart;
                    }
                    Route::Child(child) if node.level > level => {
                        // Index pages are read by every descent and written only by SMOs:
                        // the readers' threshold (index-term deltas cost two misses each).
                        if node.delta_count > self.config.read_consolidate_threshold {
                            self.consolidate_after_read(pid, state, node, guard);
                        }
                        path.push(pid);
                        pid = child;
                    }
                    Route::Child(_) | Route::Here => {
                        debug_assert_eq!(node.level, level, "descended to the wrong level");
                        return Some((pid, state, node));
                    }
                }
            }
        }
    }

    /// Descends to the leaf that holds `target`.
    pub(crate) fn descend_to_leaf<'g>(
        &self,
        target: Target<'_>,
        path: &mut Path,
        guard: &'g Guard,
    ) -> (Pid, Shared<'g, Node>, &'g Node) {
        self.descend(target, 0, path, guard)
            .expect("the tree always has a leaf level")
    }

    /// Descends to the leaf that holds `key` and looks the key up there (§III-A), routing
    /// the leaf and searching it in one walk of its chain: B-link moves right complete the
    /// split first (§IV-C), a frozen leaf has its merge completed and the descent restarts.
    /// Returns the leaf, the state the lookup read and what it found (never `Right` or
    /// `Removed`).
    pub(crate) fn find_in_leaf<'g>(
        &self,
        key: &[u8],
        path: &mut Path,
        guard: &'g Guard,
    ) -> (Pid, Shared<'g, Node>, &'g Node, Lookup<'g>) {
        'restart: loop {
            let (mut pid, mut state, mut node) = self.descend_unrouted_leaf(key, path, guard);
            loop {
                match lookup(node, key) {
                    Lookup::Right {
                        separator,
                        side_link,
                    } => {
                        if self.complete_split(*path, pid, 0, separator, side_link, guard) {
                            self.stats.smo_helps.incr();
                        }
                        pid = side_link;
                        let Some((s, n)) = self.read_node(pid, guard) else {
                            self.stats.restarts.incr();
                            continue 'restart;
                        };
                        (state, node) = (s, n);
                    }
                    Lookup::Removed => {
                        if self.complete_merge(pid, guard) {
                            self.stats.smo_helps.incr();
                        }
                        self.stats.restarts.incr();
                        continue 'restart;
                    }
                    found => return (pid, state, node, found),
                }
            }
        }
    }

    /// The first leaf page a descent for `key` reaches, not yet routed (the caller's
    /// [`lookup`] routes it).
    #[inline]
    fn descend_unrouted_leaf<'g>(
        &self,
        key: &[u8],
        path: &mut Path,
        guard: &'g Guard,
    ) -> (Pid, Shared<'g, Node>, &'g Node) {
        self.descend_inner(Target::At(key), 0, false, path, guard)
            .expect("the tree always has a leaf level")
    }

    /// Point read (§III-A): the value of `key` into `out`.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let guard = &crossbeam_epoch::pin();
        let mut path = Path::new();
        let (pid, state, node, found) = self.find_in_leaf(key, &mut path, guard);
        let found = match found {
            Lookup::Found(value) => {
                // A reused buffer usually has the right length already: no fill needed.
                if out.len() != value.len() {
                    out.clear();
                    out.resize(value.len(), 0);
                }
                copy_bytes(out, value);
                true
            }
            _ => false,
        };
        // Checked here first: the call is rare, the check is on every get.
        if node.delta_count > self.config.read_consolidate_threshold {
            self.consolidate_after_read(pid, state, node, guard);
        }
        found
    }
}
