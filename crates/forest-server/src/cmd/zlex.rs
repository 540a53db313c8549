//! Lex ranges of sorted sets: ZRANGE ... BYLEX, ZRANGEBYLEX, ZREVRANGEBYLEX, ZLEXCOUNT,
//! ZREMRANGEBYLEX (docs/PROTOCOL.md "Sorted sets"), with FOREST.RANGE's bounds
//! ([`super::range::lex_bound`]).
//!
//! Redis defines these over a sorted set whose members all have the same score, where the
//! (score, member) order is the members' byte order. forest keeps an entry per member keyed
//! by the member alone (`'n' <member>` -> score, [`super::zset`]), in the members' byte
//! order whatever their scores, so a lex range is one range scan of those entries between
//! the two bounds, in either direction, reading only the members it returns (plus the LIMIT
//! offset). **Difference:** with members of different scores Redis's answer is unspecified
//! (it depends on its encoding); forest's is the members within the bounds in byte order.

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::coll;
use super::range::{empty_between, lex_bound, LexBound};
use super::zset::{self, By, RangeBy, BY_NAME};
use super::{Ctx, Reply};
use crate::collection::{member_key, member_prefix, score_from, Kind};
use crate::frame::Frame;

/// The lower and upper bounds of a scan.
type EntryBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The store bounds of the by-member entries of sorted set `prefix` within `min..max`, or
/// None if no member can be within them (the store is not asked about an inverted range).
fn entry_bounds(prefix: &[u8], (min, max): (LexBound<'_>, LexBound<'_>)) -> Option<EntryBounds> {
    let base = member_key(prefix, &[BY_NAME]);
    let at = |member: &[u8]| member_key(&base, &[member]);
    let lower = match min {
        LexBound::Lowest => Bound::Included(base.clone()),
        LexBound::Highest => return None,
        LexBound::Included(m) => Bound::Included(at(m)),
        LexBound::Excluded(m) => Bound::Excluded(at(m)),
    };
    let upper = match max {
        LexBound::Lowest => return None,
        LexBound::Highest => Bound::Excluded(coll::prefix_upper(&base)),
        LexBound::Included(m) => Bound::Included(at(m)),
        LexBound::Excluded(m) => Bound::Excluded(at(m)),
    };
    (!empty_between(as_ref(&lower), as_ref(&upper))).then_some((lower, upper))
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Members with scores of sorted set `prefix` within the lex bounds, in member order
/// (`order`), skipping `skip`, at most `take`: one range scan of the by-member entries that
/// reads `skip + take` of them at most.
pub(super) fn in_lex_order(
    ctx: &Ctx<'_, '_>,
    prefix: &[u8],
    bounds: (LexBound<'_>, LexBound<'_>),
    order: Order,
    mut skip: usize,
    take: usize,
) -> Vec<(Vec<u8>, f64)> {
    let mut out = Vec::new();
    let Some((lower, upper)) = entry_bounds(prefix, bounds) else {
        return out;
    };
    if take == 0 {
        return out;
    }
    let start = prefix.len() + BY_NAME.len();
    ctx.scan_up_to(
        as_ref(&lower),
        as_ref(&upper),
        order,
        skip.saturating_add(take),
        &mut |key, value| {
            if skip > 0 {
                skip -= 1;
                return ControlFlow::Continue(());
            }
            // A damaged score is skipped, as the by-score scans skip damaged keys.
            if let (Some(member), Ok(score)) = (key.get(start..), <[u8; 8]>::try_from(value)) {
                out.push((member.to_vec(), score_from(score)));
            }
            if out.len() >= take {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    );
    out
}

/// ZRANGEBYLEX key min max [LIMIT offset count].
pub fn zrangebylex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let query = zset::parse_range(&argv[2..], false, Some(By::Lex), Some(false))?;
    zset::range_generic(ctx, argv[1], query)
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count].
pub fn zrevrangebylex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let query = zset::parse_range(&argv[2..], false, Some(By::Lex), Some(true))?;
    zset::range_generic(ctx, argv[1], query)
}

/// ZLEXCOUNT key min max: how many members are within the lex bounds (a keys-only scan of
/// them: O(members counted), where Redis's skiplist is O(log n)).
pub fn zlexcount(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let (min, max) = (lex_bound(argv[2])?, lex_bound(argv[3])?);
    if coll::open_read(ctx, user, Kind::ZSet)?.is_none() {
        return Ok(Frame::Integer(0));
    }
    let Some((lower, upper)) = entry_bounds(&member_prefix(user), (min, max)) else {
        return Ok(Frame::Integer(0));
    };
    let mut count = 0i64;
    ctx.scan_keys_up_to(
        as_ref(&lower),
        as_ref(&upper),
        Order::Ascending,
        usize::MAX,
        &mut |_, _| {
            count += 1;
            ControlFlow::Continue(())
        },
    );
    Ok(Frame::Integer(count))
}

/// ZREMRANGEBYLEX key min max: how many members were removed (one atomic batch; an emptied
/// set is deleted).
pub fn zremrangebylex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (min, max) = (lex_bound(argv[2])?, lex_bound(argv[3])?);
    zset::remove_range(ctx, argv[1], RangeBy::Lex(min, max))
}
