//! KEYS pattern: every matching key, in key order. The pattern's literal prefix narrows
//! the scan. Keys are the string keys (below byte 0xFF) merged with the collections' type
//! entries (`FF 't' <key>`, [`crate::collection`]), so a collection is one key.

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::{Ctx, Reply};
use crate::collection::{type_key, Meta, RESERVED_BYTE, TYPE_TAG};
use crate::frame::Frame;
use crate::glob;

/// Which types a key listing returns: None for all, else one TYPE name.
pub type TypeFilter<'a> = Option<&'a str>;

/// Up to `limit` user keys with their type names, in key order, from `lower` (a user-key
/// bound) up to `end` (exclusive; None: no end): the string range and the type-entry range
/// scanned separately and merged. Disjoint, since no string key begins with 0xFF.
pub fn list_keys(
    ctx: &Ctx<'_, '_>,
    lower: Bound<&[u8]>,
    end: Option<&[u8]>,
    limit: usize,
    filter: TypeFilter<'_>,
) -> Vec<(Vec<u8>, &'static str)> {
    if filter.is_none() && ctx.shared.collections.any() {
        // Two scans: under one pass of the store's scan gate, so that a command turning a
        // string into a collection (or back) is seen whole.
        return ctx
            .shared
            .store
            .read_consistent(|| scan_keys(ctx, lower, end, limit, filter));
    }
    scan_keys(ctx, lower, end, limit, filter)
}

fn scan_keys(
    ctx: &Ctx<'_, '_>,
    lower: Bound<&[u8]>,
    end: Option<&[u8]>,
    limit: usize,
    filter: TypeFilter<'_>,
) -> Vec<(Vec<u8>, &'static str)> {
    let strings_end = [RESERVED_BYTE];
    let mut strings = Vec::new();
    if filter.is_none_or(|f| f == "string") {
        let upper = match end {
            Some(e) if e < &strings_end[..] => Bound::Excluded(e),
            _ => Bound::Excluded(&strings_end[..]),
        };
        ctx.scan_up_to(lower, upper, Order::Ascending, limit, &mut |key, _| {
            strings.push((key.to_vec(), "string"));
            ControlFlow::Continue(())
        });
    }
    let mut collections = Vec::new();
    if ctx.shared.collections.any() && filter != Some("string") {
        let (lower_key, end_key);
        let t_lower = match lower {
            Bound::Included(k) => {
                lower_key = type_key(k);
                Bound::Included(lower_key.as_slice())
            }
            Bound::Excluded(k) => {
                lower_key = type_key(k);
                Bound::Excluded(lower_key.as_slice())
            }
            Bound::Unbounded => Bound::Included(&[RESERVED_BYTE, TYPE_TAG][..]),
        };
        end_key = match end {
            Some(e) => type_key(e),
            None => vec![RESERVED_BYTE, TYPE_TAG + 1],
        };
        ctx.scan(
            t_lower,
            Bound::Excluded(end_key.as_slice()),
            Order::Ascending,
            &mut |key, value| {
                let kind = Meta::decode(value).map_or("none", |m| m.kind.name());
                if filter.is_none_or(|f| f == kind) {
                    collections.push((key[2..].to_vec(), kind));
                }
                if collections.len() >= limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
    }
    if collections.is_empty() {
        return strings;
    }
    let mut merged = Vec::with_capacity((strings.len() + collections.len()).min(limit));
    let (mut a, mut b) = (
        strings.into_iter().peekable(),
        collections.into_iter().peekable(),
    );
    while merged.len() < limit {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 <= y.0 => a.next(),
            (Some(_), Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        };
        match next {
            Some(item) => merged.push(item),
            None => break,
        }
    }
    merged
}

/// The scan bounds every match of `pattern` lies within.
pub fn pattern_bounds(pattern: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    let prefix = glob::literal_prefix(pattern);
    let end = glob::prefix_end(&prefix);
    (prefix, end)
}

pub fn keys(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let pattern = argv[1];
    let (prefix, end) = pattern_bounds(pattern);
    let generation = ctx.shared.expires.generation();
    let mut found = list_keys(
        ctx,
        Bound::Included(&prefix),
        end.as_deref(),
        usize::MAX,
        None,
    );
    found.retain(|(key, _)| !ctx.is_due(key));
    super::expire::recheck_listed(ctx, generation, &mut found);
    Ok(Frame::Array(
        found
            .into_iter()
            .filter(|(key, _)| glob::matches(pattern, key))
            .map(|(key, _)| Frame::Bulk(key))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    // Goal: KEYS returns the matching keys in key order.
    // Method: keys inside and outside a prefix, a class pattern.
    #[test]
    fn keys_in_order() {
        let mut h = Harness::new();
        h.run(&["MSET", "user:2", "b", "user:1", "a", "users", "c", "x", "d"]);
        assert_eq!(h.run(&["KEYS", "user:*"]), bulks(&["user:1", "user:2"]));
        assert_eq!(
            h.run(&["KEYS", "*"]),
            bulks(&["user:1", "user:2", "users", "x"])
        );
        assert_eq!(
            h.run(&["KEYS", "user[s:]*"]),
            bulks(&["user:1", "user:2", "users"])
        );
        assert_eq!(h.run(&["KEYS", "nomatch*"]), bulks(&[]));
    }
}
