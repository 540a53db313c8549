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
use forest_store::ScanSink;

use super::coll;
use super::range::{empty_between, lex_bound, ArrayInto, LexBound, Members, RESERVED_RECORDS_MAX};
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
    skip: usize,
    take: usize,
) -> Vec<(Vec<u8>, f64)> {
    let Some((lower, upper)) = entry_bounds(prefix, bounds) else {
        return Vec::new();
    };
    if take == 0 {
        return Vec::new();
    }
    let start = prefix.len() + BY_NAME.len();
    let mut scored: Vec<(Vec<u8>, [u8; 8])> = Vec::new();
    scan_lex(ctx, (&lower, &upper), start, order, skip, take, &mut scored);
    scored
        .into_iter()
        .map(|(member, score)| (member, score_from(score)))
        .collect()
}

/// The by-member entries within `(lower, upper)` (from [`entry_bounds`]; members start at
/// byte `start` of a key) in `order`, skipping `skip`, handing at most `take` to `out` as
/// (member, score bytes): one range scan reading `skip + take` entries at most, in place
/// where the store alone answers (`Ctx::scan_in_place_up_to`). A damaged score is skipped, as
/// the by-score scans skip damaged keys. Shared by [`in_lex_order`] and the direct reply of
/// [`lex_into`].
fn scan_lex(
    ctx: &Ctx<'_, '_>,
    (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
    start: usize,
    order: Order,
    skip: usize,
    take: usize,
    out: &mut dyn Members<[u8; 8]>,
) {
    let mut sink = LexRows {
        start,
        skip_first: skip,
        skip,
        take,
        taken: 0,
        out,
    };
    ctx.scan_in_place_up_to(
        as_ref(lower),
        as_ref(upper),
        order,
        skip.saturating_add(take),
        false,
        &mut sink,
    );
}

/// [`scan_lex`]'s rows: the offset skipped, then members with their score bytes.
struct LexRows<'a> {
    start: usize,
    skip_first: usize,
    skip: usize,
    take: usize,
    taken: usize,
    out: &'a mut dyn Members<[u8; 8]>,
}

impl ScanSink for LexRows<'_> {
    fn record(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        if self.skip > 0 {
            self.skip -= 1;
            return ControlFlow::Continue(());
        }
        if let (Some(member), Ok(score)) = (key.get(self.start..), <[u8; 8]>::try_from(value)) {
            self.out.member(member, score);
            self.taken += 1;
        }
        if self.taken >= self.take {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn restart(&mut self) {
        self.skip = self.skip_first;
        self.taken = 0;
        self.out.clear();
    }
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

/// ZRANGEBYLEX for a connection's top-level command (`super::Encoder`): the members are
/// written straight into `out` from the store's scan rows, no [`Frame`] per member
/// ([`super::range::ArrayInto`]); the same bytes as [`zrangebylex`]'s reply.
pub fn zrangebylex_into(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), Frame> {
    let query = zset::parse_range(&argv[2..], false, Some(By::Lex), Some(false))?;
    lex_into(ctx, argv[1], query, out)
}

/// ZREVRANGEBYLEX as [`zrangebylex_into`].
pub fn zrevrangebylex_into(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), Frame> {
    let query = zset::parse_range(&argv[2..], false, Some(By::Lex), Some(true))?;
    lex_into(ctx, argv[1], query, out)
}

/// The members of sorted set `user` that lex query `query` selects, written into `out` as
/// `zset::range_generic` would reply: under the key's stripe lock, missing key empty,
/// another type WRONGTYPE, damaged scores skipped as [`in_lex_order`] skips them.
pub(super) fn lex_into(
    ctx: &mut Ctx<'_, '_>,
    user: &[u8],
    query: zset::RangeQuery<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Frame> {
    let RangeBy::Lex(min, max) = query.by else {
        // Not a lex range (parse_range gives one for these commands): the frame's bytes.
        let reply = zset::range_generic(ctx, user, query)?;
        reply.encode_to(ctx.client.protocol, out);
        return Ok(());
    };
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    if coll::open_read(ctx, user, Kind::ZSet)?.is_none() {
        ArrayInto::empty(out);
        return Ok(());
    }
    let (skip, take) = zset::skip_take(query.limit);
    let prefix = member_prefix(user);
    let (Some((lower, upper)), true) = (entry_bounds(&prefix, (min, max)), take > 0) else {
        ArrayInto::empty(out);
        return Ok(());
    };
    let order = if query.rev {
        Order::Descending
    } else {
        Order::Ascending
    };
    let start = prefix.len() + BY_NAME.len();
    let mut array = ArrayInto::begin(out, take.min(RESERVED_RECORDS_MAX));
    scan_lex(
        ctx,
        (&lower, &upper),
        start,
        order,
        skip,
        take,
        &mut LexReply(&mut array),
    );
    array.finish();
    Ok(())
}

/// ZRANGEBYLEX's members written into the reply.
struct LexReply<'a, 'o>(&'a mut ArrayInto<'o>);

impl Members<[u8; 8]> for LexReply<'_, '_> {
    fn member(&mut self, member: &[u8], _: [u8; 8]) {
        self.0.bulk(member);
    }

    fn clear(&mut self) {
        self.0.clear();
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::range::tests::{both_ways, conn, PROTOCOLS};
    use super::super::testing::*;

    fn lex_arg(kind: u8, member: &str) -> String {
        match kind % 4 {
            0 => "-".into(),
            1 => "+".into(),
            2 => format!("[{member}"),
            _ => format!("({member}"),
        }
    }

    // Goal: ZRANGEBYLEX and ZREVRANGEBYLEX written straight into the output give the bytes
    // of their frames, in the cases apart from the ranges: a missing key, another type,
    // LIMIT 0, a negative offset or count, bad bounds and syntax, an empty member.
    // Method: each both ways, in RESP2 and RESP3.
    #[test]
    fn direct_lex_replies_equal_framed_ones() {
        let mut h = Harness::new();
        h.run(&[
            "ZADD", "z", "0", "a", "0", "b", "0", "c", "0", "", "0", "dd",
        ]);
        h.run(&["SET", "s", "x"]);
        let queries: &[&[&str]] = &[
            &["ZRANGEBYLEX", "z", "-", "+"],
            &["ZRANGEBYLEX", "missing", "-", "+"],
            &["ZRANGEBYLEX", "s", "-", "+"],
            &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "0", "0"],
            &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "1", "2"],
            &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "-1", "2"],
            &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "2", "-1"],
            &["ZRANGEBYLEX", "z", "(a", "[c"],
            &["ZRANGEBYLEX", "z", "[c", "(a"],
            &["ZRANGEBYLEX", "z", "a", "+"],
            &["ZRANGEBYLEX", "z", "-", "+", "WITHSCORES"],
            &["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "x", "1"],
            &["ZREVRANGEBYLEX", "z", "+", "-"],
            &["ZREVRANGEBYLEX", "z", "[c", "(a", "LIMIT", "1", "5"],
            &["ZREVRANGEBYLEX", "s", "+", "-"],
        ];
        for protocol in PROTOCOLS {
            let mut c = conn(&h, protocol);
            for query in queries {
                let argv: Vec<&[u8]> = query.iter().map(|a| a.as_bytes()).collect();
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                assert_eq!(
                    String::from_utf8_lossy(&direct),
                    String::from_utf8_lossy(&framed),
                    "{query:?} in {protocol:?}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        // Goal: the direct ZRANGEBYLEX / ZREVRANGEBYLEX bytes equal the frame path's for
        // any members, bounds and LIMIT, in RESP2 and RESP3. Method: random members of one
        // score, random lex bounds, offsets and counts (negative ones included).
        #[test]
        fn direct_lex_bytes_match_the_frame_path(
            members in proptest::collection::btree_set("[a-e]{0,4}", 1..40),
            lo in (0u8..4, "[a-e]{0,3}"),
            hi in (0u8..4, "[a-e]{0,3}"),
            rev in any::<bool>(),
            limit in proptest::option::of((-1i64..5, -1i64..200)),
        ) {
            let mut h = Harness::new();
            let mut zadd = vec!["ZADD".to_string(), "z".to_string()];
            for m in &members {
                zadd.extend(["0".to_string(), m.clone()]);
            }
            let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
            h.run(&zadd);
            let (a, b) = (lex_arg(lo.0, &lo.1), lex_arg(hi.0, &hi.1));
            let name = if rev { "ZREVRANGEBYLEX" } else { "ZRANGEBYLEX" };
            let limit_text = limit.map(|(o, n)| (o.to_string(), n.to_string()));
            let mut argv: Vec<&[u8]> = vec![name.as_bytes(), b"z", a.as_bytes(), b.as_bytes()];
            if let Some((o, n)) = &limit_text {
                argv.extend([&b"LIMIT"[..], o.as_bytes(), n.as_bytes()]);
            }
            for protocol in PROTOCOLS {
                let mut c = conn(&h, protocol);
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                prop_assert_eq!(direct, framed);
            }
        }
    }
}
