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

use crate::consolidate::view;
use crate::delta::{copy_bytes, decode_pid, key_cmp, key_eq, read_node, Kind, Node};
use crate::BwTree;

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
    if matches!(node.kind, Kind::RemoveNode) {
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
                debug_assert!(count > 0, "an index page's low key is left of its targets");
                return Route::Child(decode_pid(page.value(count.saturating_sub(1))));
            }
            Kind::Insert(_) | Kind::Modify(_) | Kind::Delete(_) | Kind::RemoveNode => {}
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
    /// The key is not on this page any more (split or merge): search again from the root.
    Elsewhere,
}

/// Looks `key` up in the leaf state `node`, newest delta first (§III-A).
pub(crate) fn lookup<'g>(node: &'g Node, key: &[u8]) -> Lookup<'g> {
    let mut current = node;
    loop {
        match &current.kind {
            Kind::Insert(r) | Kind::Modify(r) if key_eq(r.key(), key) => {
                return Lookup::Found(r.value())
            }
            Kind::Delete(k) if key_eq(k, key) => return Lookup::Absent,
            Kind::Split { separator, .. } if key_cmp(key, separator).is_ge() => {
                return Lookup::Elsewhere
            }
            Kind::RemoveNode => return Lookup::Elsewhere,
            Kind::NodeMerge(merge) => {
                if merge.high.as_deref().is_some_and(|h| key >= h) {
                    return Lookup::Elsewhere;
                }
                if key >= &*merge.separator {
                    current = merge.right();
                    continue;
                }
            }
            Kind::Base(page) => {
                if page.at_or_above_high(key) {
                    return Lookup::Elsewhere;
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

/// The PIDs from the root down to (not including) the page a descent stopped at.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    pids: [Pid; PATH_LEN_MAX],
    len: usize,
}

/// The deepest path. Pages split into halves of at least two entries, so 2^64 records fit in
/// far fewer levels.
const PATH_LEN_MAX: usize = 64;

impl Path {
    pub(crate) fn new() -> Self {
        Self {
            pids: [0; PATH_LEN_MAX],
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, pid: Pid) {
        assert!(
            self.len < PATH_LEN_MAX,
            "tree deeper than {PATH_LEN_MAX} levels"
        );
        self.pids[self.len] = pid;
        self.len += 1;
    }

    pub(crate) fn pop(&mut self) -> Option<Pid> {
        self.len = self.len.checked_sub(1)?;
        Some(self.pids[self.len])
    }

    fn clear(&mut self) {
        self.len = 0;
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
        'restart: loop {
            path.clear();
            let mut pid = self.root_pid(guard);
            let mut at_root = true;
            loop {
                let Some((state, node)) = read_node(&self.table, pid, guard) else {
                    // A page freed after we read its PID (merged away, or an old root).
                    self.stats.restarts.incr();
                    continue 'restart;
                };
                if at_root && node.level < level {
                    // Only a root whose split is incomplete can be below a level in use.
                    let (high, side_link) = node.bounds();
                    match high {
                        Some(high) if !matches!(node.kind, Kind::RemoveNode) => {
                            self.complete_split(
                                Path::new(),
                                pid,
                                node.level,
                                high,
                                side_link,
                                guard,
                            );
                            continue 'restart;
                        }
                        _ => return None,
                    }
                }
                at_root = false;
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
                        if node.delta_count > self.config.consolidate_threshold {
                            self.consolidate_if_long(pid, state, node, guard);
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

    /// Point read (§III-A): the value of `key` into `out`.
    pub(crate) fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let guard = &crossbeam_epoch::pin();
        let mut path = Path::new();
        loop {
            let (pid, state, node) = self.descend_to_leaf(Target::At(key), &mut path, guard);
            let found = match lookup(node, key) {
                Lookup::Found(value) => {
                    out.clear();
                    out.resize(value.len(), 0);
                    copy_bytes(out, value);
                    true
                }
                Lookup::Absent => false,
                // `route` said Here on this very state, so this arm is defensive only.
                Lookup::Elsewhere => {
                    self.stats.restarts.incr();
                    continue;
                }
            };
            self.consolidate_if_long(pid, state, node, guard);
            return found;
        }
    }
}
