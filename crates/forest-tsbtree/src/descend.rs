//! Descents from the root, with the Bw-tree's help-along (§IV-C): a writer's descent completes
//! every split it meets before following its side link, and posts a leaf's pending time-split
//! term before using the leaf. Readers (as-of searches) never help: side and history links
//! are always valid paths.

use crossbeam_epoch::{Guard, Shared};
use forest_core::Result;
use forest_llama::Pid;

use crate::as_of::{self, Locate, Route, Target};
use crate::node::{Kind, Node, Term};
use crate::page;
use crate::TsbTree;

/// A current leaf found for a write.
pub(crate) struct LeafHit<'g> {
    pub pid: Pid,
    pub state: Shared<'g, Node>,
    pub head: &'g Node,
}

impl TsbTree {
    /// The root's PID and state.
    pub(crate) fn root<'g>(&self, guard: &'g Guard) -> (Pid, Shared<'g, Node>, &'g Node) {
        loop {
            let pid = self.root_pid();
            if let Some((state, head)) = self.read_node(pid, guard) {
                return (pid, state, head);
            }
        }
    }

    /// The leaf holding `target` at time `t`, following side and history links; no helping.
    /// Errors: `t` below the retention threshold, checked on entry (the caller pinned `guard`
    /// first) and before every term or history link whose time range the threshold may have
    /// passed since (`retention.rs`).
    pub(crate) fn find_leaf_as_of<'g>(
        &self,
        target: Target<'_>,
        t: u64,
        guard: &'g Guard,
    ) -> Result<(Pid, &'g Node)> {
        self.check_retained(t)?;
        let (mut pid, _, mut head) = self.root(guard);
        loop {
            let next = if head.level > 0 {
                match as_of::route_index(head, target, t) {
                    Route::Child(term, end) => {
                        self.check_term(t, end)?;
                        term.pid
                    }
                    Route::Right(q) => q,
                    Route::History(q) => {
                        self.check_history_link(t, page::page_start(head))?;
                        q
                    }
                }
            } else {
                match as_of::locate(head, target, t) {
                    Locate::Here => return Ok((pid, head)),
                    Locate::Right(q) => q,
                    Locate::History(h) => {
                        self.check_history_link(t, page::page_start(head))?;
                        h
                    }
                }
            };
            pid = next;
            head = self.read_as_of(pid, t, guard)?;
        }
    }

    /// [`Self::read_live`] for a read at `t`: a PID that holds no state was freed by
    /// retention after the read checked the threshold (the epoch keeps its PID from reuse
    /// until the read unpins), so the read is refused.
    pub(crate) fn read_as_of<'g>(&self, pid: Pid, t: u64, guard: &'g Guard) -> Result<&'g Node> {
        match self.read_node(pid, guard) {
            Some((_, head)) => Ok(head),
            None => {
                self.check_retained(t)?;
                panic!("pid {pid} is linked but holds no state (retention is below {t})")
            }
        }
    }

    /// A PID reached through a term or link: it always holds a state (pages are only freed
    /// when a split fails, before anyone could link to them).
    pub(crate) fn read_live<'g>(&self, pid: Pid, guard: &'g Guard) -> &'g Node {
        self.read_node(pid, guard)
            .unwrap_or_else(|| panic!("pid {pid} is linked but holds no state"))
            .1
    }

    /// The current leaf for a write of `key`, reached through its own index term, with every
    /// split met on the way completed and the leaf's pending time-split term posted, so that
    /// the leaf may split in turn.
    pub(crate) fn find_leaf_for_write<'g>(&self, key: &[u8], guard: &'g Guard) -> LeafHit<'g> {
        'restart: loop {
            let (mut pid, mut state, mut head) = self.root(guard);
            let mut parent: Option<(Pid, Term)> = None;
            loop {
                if head.level > 0 {
                    match as_of::route_index(head, Target::At(key), u64::MAX) {
                        Route::Child(term, _) => {
                            parent = Some((pid, term.clone()));
                            pid = term.pid;
                        }
                        Route::Right(_) => {
                            self.help_split(pid, head, guard);
                            self.stats.restarts.incr();
                            continue 'restart;
                        }
                        Route::History(_) => unreachable!("the current time is after every start"),
                    }
                    let Some((s, h)) = self.read_node(pid, guard) else {
                        continue 'restart;
                    };
                    (state, head) = (s, h);
                    if head.level > 0 {
                        // An index page whose time split's term is not posted yet: post it.
                        if let Some((_, term)) = &parent {
                            if term.ts < page::page_start(head) {
                                self.stats.smo_helps.incr();
                                self.help_time_split(pid, head, &term.key, guard);
                            }
                        }
                    }
                    continue;
                }
                match as_of::locate(head, Target::At(key), u64::MAX) {
                    Locate::Here => {}
                    Locate::Right(_) => {
                        self.help_split(pid, head, guard);
                        self.stats.restarts.incr();
                        continue 'restart;
                    }
                    Locate::History(_) => unreachable!("the current time is after every start"),
                }
                if let Some((_, term)) = &parent {
                    let start = page::page_start(head);
                    if term.ts < start {
                        self.stats.smo_helps.incr();
                        self.help_time_split(pid, head, &term.key, guard);
                    }
                }
                return LeafHit { pid, state, head };
            }
        }
    }

    /// The node at `level` whose key range holds `key` now, for posting a term; every split
    /// met on the way (and at the node itself) completed first. None when the tree is lower.
    pub(crate) fn find_node<'g>(
        &self,
        key: &[u8],
        level: u32,
        guard: &'g Guard,
    ) -> Option<(Pid, Shared<'g, Node>, &'g Node)> {
        'restart: loop {
            let (mut pid, mut state, mut head) = self.root(guard);
            if head.level < level {
                return None;
            }
            loop {
                let split_pending = match &head.kind {
                    _ if head.level == 0 => {
                        matches!(
                            as_of::locate(head, Target::At(key), u64::MAX),
                            Locate::Right(_)
                        )
                    }
                    _ => matches!(
                        as_of::route_index(head, Target::At(key), u64::MAX),
                        Route::Right(_)
                    ),
                };
                if split_pending {
                    self.help_split(pid, head, guard);
                    continue 'restart;
                }
                if head.level == level {
                    return Some((pid, state, head));
                }
                let Route::Child(term, _) = as_of::route_index(head, Target::At(key), u64::MAX)
                else {
                    continue 'restart; // not reached: the current time is after every start
                };
                pid = term.pid;
                let Some((s, h)) = self.read_node(pid, guard) else {
                    continue 'restart;
                };
                (state, head) = (s, h);
            }
        }
    }

    /// Completes the newest key split of a page (leaf or index) whose side link a search
    /// was about to follow: posts its term, or grows the root.
    pub(crate) fn help_split(&self, pid: Pid, head: &Node, guard: &Guard) {
        self.stats.smo_helps.incr();
        let (sep, q) = newest_split(head);
        let q_start = page::page_start(self.read_live(q, guard));
        self.complete_split(pid, head.level, &sep, q, q_start, guard);
    }
}

/// The separator and right page of the newest split in a chain (or its base's side link).
fn newest_split(head: &Node) -> (Box<[u8]>, Pid) {
    current_split(head).expect("a search went right from a page with no split")
}

/// A page state's high key and side link (its newest key split's, else its base's); None
/// when it has none (the rightmost page of its level, or a historical page).
pub(crate) fn current_split(head: &Node) -> Option<(Box<[u8]>, Pid)> {
    for n in head.chain() {
        match &n.kind {
            Kind::KeySplit { sep, q } | Kind::IndexSplit { sep, q } => {
                return Some((sep.clone(), *q))
            }
            Kind::Leaf(b) => return b.high.clone().zip(b.side),
            Kind::Index(b) => return b.high.clone().zip(b.side),
            _ => {}
        }
    }
    None
}
