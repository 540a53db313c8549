//! Page consolidation (Bw-tree §III-B) and the merged view of a page state it builds on.
//!
//! A view folds a chain into the page's current records, sorted: the newest delta for a key
//! wins, deletes drop the key, and records at or above the newest split delta's separator are
//! gone to the side link's page (§IV-A "Consolidations": "For pages with split deltas,
//! consolidation involves creating a new base page containing records with keys less than the
//! separator key in the split delta"). Index-term deltas are insertions of (separator, child).
//!
//! Consolidation is done by the thread that noticed the long chain, after its own operation;
//! a failed CAS abandons the new page and is not retried (§III-B).

use crossbeam_epoch::{Guard, Owned, Shared};
use forest_llama::Pid;

use crate::delta::{key_cmp, key_eq, key_prefix, BasePage, Kind, Node};
use crate::BwTree;

/// A page's records at one state, borrowed from the chain.
pub(crate) struct View<'g> {
    pub(crate) records: Vec<(&'g [u8], &'g [u8])>,
    pub(crate) low: &'g [u8],
    pub(crate) high: Option<&'g [u8]>,
    pub(crate) side_link: Pid,
}

/// Folds the chain from `node` into a sorted view.
pub(crate) fn view(node: &Node) -> View<'_> {
    // Newest first: (key, value or None for a delete).
    let mut deltas: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(node.delta_count as usize);
    // The page's bounds come from the newest split or merge delta, else the base page.
    let (high, side_link) = node.bounds();
    // Entries older than a split or merge delta hold only keys below its separator: the rest
    // moved to the split-off page, or is superseded by the absorbed page's state. (A merge
    // often sits on the very split that made the absorbed page, whose base below still has
    // stale copies of the moved records.)
    let mut limit = high;
    let below = |key: &[u8], limit: Option<&[u8]>| limit.is_none_or(|l| key_cmp(key, l).is_lt());
    let mut current = node;
    let base = loop {
        // Each entry is kept only if no newer split or merge cut it off.
        let entry = match &current.kind {
            Kind::Base(page) => break page,
            Kind::Insert(r) | Kind::Modify(r) => Some((r.key(), Some(r.value()))),
            Kind::IndexTerm { term, .. } => Some((term.key(), Some(term.value()))),
            Kind::Delete(key) => Some((&**key, None)),
            Kind::IndexTermDelete { separator, .. } => Some((&**separator, None)),
            Kind::Split { separator, .. } => {
                if below(separator, limit) {
                    limit = Some(separator);
                }
                None
            }
            // The absorbed page's records are older than the deltas above the merge and
            // disjoint from those below it (§IV-B: its state "is now logically part of L").
            Kind::NodeMerge(merge) => {
                let right = view(merge.right()).records;
                deltas.extend(
                    right
                        .into_iter()
                        .filter(|(k, _)| below(k, limit))
                        .map(|(k, v)| (k, Some(v))),
                );
                if below(&merge.separator, limit) {
                    limit = Some(&merge.separator);
                }
                None
            }
            Kind::RemoveNode => None,
        };
        if let Some((key, value)) = entry {
            if below(key, limit) {
                deltas.push((key, value));
            }
        }
        current = current.next().expect("a chain ends in a base page");
    };
    // Stable sort keeps the newest delta first among equal keys; dedup keeps that one.
    deltas.sort_by(|a, b| key_cmp(a.0, b.0));
    deltas.dedup_by(|later, earlier| key_eq(later.0, earlier.0));
    let mut records = Vec::with_capacity(base.len() + deltas.len());
    let mut d = deltas.into_iter().peekable();
    // The base page is the oldest entry: the smallest cut applies to it.
    let cut = limit.map_or(base.len(), |l| base.count_below(l, false));
    // The next delta's key prefix: base records below it need no full comparison.
    let next_prefix = |d: &mut std::iter::Peekable<std::vec::IntoIter<(&[u8], _)>>| {
        d.peek().map_or(u64::MAX, |(dk, _)| key_prefix(dk))
    };
    let mut next = next_prefix(&mut d);
    base.for_each_record_below(cut, |bk, bv| {
        if key_prefix(bk) < next {
            records.push((bk, bv));
            return;
        }
        // Deltas for keys up to this one come first; one for this very key replaces it.
        while let Some(&(dk, dv)) = d.peek() {
            let order = key_cmp(dk, bk);
            if order.is_gt() {
                break;
            }
            d.next();
            next = next_prefix(&mut d);
            if let Some(v) = dv {
                records.push((dk, v));
            }
            if order.is_eq() {
                return;
            }
        }
        records.push((bk, bv));
    });
    records.extend(d.filter_map(|(dk, dv)| Some((dk, dv?))));
    View {
        records,
        low: base.low(),
        high,
        side_link,
    }
}

impl BwTree {
    /// Replaces `state` of `pid` by a consolidated base page when its chain is long (§III-B).
    pub(crate) fn consolidate_if_long<'g>(
        &self,
        pid: Pid,
        state: Shared<'g, Node>,
        node: &'g Node,
        guard: &'g Guard,
    ) {
        // A frozen page (remove node delta on top) is never replaced: it is being merged.
        if node.delta_count <= self.config.consolidate_threshold
            || matches!(node.kind, Kind::RemoveNode)
        {
            return;
        }
        let v = view(node);
        let page = BasePage::build(v.low, v.high, v.side_link, v.records.iter().copied());
        let base = Owned::new(Node::base(node.level, page));
        self.stats.consolidate_attempts.incr();
        self.stats.cas_attempts.incr();
        match self.table.update_r(pid, state, base, guard) {
            Ok(_) => self.stats.consolidations.incr(),
            Err((abandoned, _)) => {
                // §III-B: "the thread abandons the operation by deallocating the new page".
                drop(abandoned);
                self.stats.failed_consolidates.incr();
                self.stats.cas_failures.incr();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{NodeMerge, Record};

    fn leaf(records: &[(&[u8], &[u8])], high: Option<&[u8]>) -> Box<Node> {
        Box::new(Node::base(
            0,
            BasePage::build(b"", high, 7, records.iter().copied()),
        ))
    }

    // Goal: the view applies deltas newest first over the base page. Method: build a chain by
    // hand (insert, modify, delete, split) and compare the folded records.
    #[test]
    fn view_folds_deltas_newest_first_and_cuts_at_split() {
        let base = leaf(
            &[(b"a", b"1"), (b"c", b"3"), (b"e", b"5"), (b"g", b"7")],
            None,
        );
        let d1 = Box::new(Node::delta(&base, 5, Kind::Insert(Record::new(b"b", b"2"))));
        let d2 = Box::new(Node::delta(&d1, 5, Kind::Modify(Record::new(b"c", b"33"))));
        let d3 = Box::new(Node::delta(&d2, 4, Kind::Delete(b"a".as_slice().into())));
        let d4 = Box::new(Node::delta(&d3, 5, Kind::Insert(Record::new(b"a", b"11"))));
        let d5 = Box::new(Node::delta(
            &d4,
            3,
            Kind::Split {
                separator: b"e".as_slice().into(),
                side_link: 9,
            },
        ));
        let v = view(&d5);
        let got: Vec<(&[u8], &[u8])> = v.records.clone();
        let want: Vec<(&[u8], &[u8])> = vec![(b"a", b"11"), (b"b", b"2"), (b"c", b"33")];
        assert_eq!(got, want);
        assert_eq!(v.high, Some(b"e".as_slice()));
        assert_eq!(v.side_link, 9);
        let before_split = view(&d4);
        assert_eq!(before_split.records.len(), 5);
        assert_eq!(before_split.side_link, 7);
        assert_eq!(d5.delta_count, 5);
    }

    // Goal (regression): a merge on top of the split that made the absorbed page must not
    // bring back the stale copies of moved records in the left page's base. Method: base
    // [a b c d], split at c, the right page's frozen state [c' (d deleted)], merged back.
    #[test]
    fn view_of_merge_over_split_ignores_stale_base_records() {
        let base = leaf(
            &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")],
            None,
        );
        let split = Box::new(Node::delta(
            &base,
            2,
            Kind::Split {
                separator: b"c".as_slice().into(),
                side_link: 9,
            },
        ));
        let right = leaf(&[(b"c", b"3"), (b"d", b"4")], None);
        let right_mod = Box::new(Node::delta(
            &right,
            2,
            Kind::Modify(Record::new(b"c", b"33")),
        ));
        let right_del = Box::new(Node::delta(
            &right_mod,
            1,
            Kind::Delete(b"d".as_slice().into()),
        ));
        let merge = NodeMerge::new(b"c", &right_del, None, 11);
        let merged = Box::new(Node::delta(&split, 3, Kind::NodeMerge(merge)));
        let newer = Box::new(Node::delta(
            &merged,
            4,
            Kind::Insert(Record::new(b"e", b"5")),
        ));
        let v = view(&newer);
        let want: Vec<(&[u8], &[u8])> =
            vec![(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"e", b"5")];
        assert_eq!(v.records, want);
        assert_eq!(v.high, None);
        assert_eq!(v.side_link, 11);
        assert_eq!(crate::get::lookup_found(&newer, b"d"), None);
        assert_eq!(
            crate::get::lookup_found(&newer, b"c"),
            Some(b"33".as_slice())
        );
    }
}
