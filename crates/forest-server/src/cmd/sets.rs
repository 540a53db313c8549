//! Sets: SADD, SREM, SPOP, SMEMBERS, SCARD, SISMEMBER (docs/PROTOCOL.md "Sets"). A member
//! is a member entry with an empty value, so SMEMBERS comes in member order.

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::{Ctx, Reply};
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;

/// SADD key member [member ...]: how many were added.
pub fn sadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let prefix = member_prefix(user);
    for member in &argv[2..] {
        coll::check_member(&member_key(&prefix, &[member]), b"")?;
    }
    coll::write(ctx, user, Kind::Set, |ctx, meta| {
        coll::count_changes(ctx, meta, 1, &argv[2..], |ctx, member| {
            coll::insert_member(ctx, &member_key(&prefix, &[member]), b"")
        })
    })
}

/// SREM key member [member ...]: how many were removed.
pub fn srem(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let prefix = member_prefix(user);
    coll::write_existing(ctx, user, Kind::Set, Frame::Integer(0), |ctx, meta| {
        coll::count_changes(ctx, meta, -1, &argv[2..], |ctx, member| {
            coll::remove_member(ctx, &member_key(&prefix, &[member]))
        })
    })
}

/// SPOP key [count]: removes and returns random members.
///
/// The choice: a random 8-byte point in the member range, the first member at or after it
/// (wrapping to the first member). Members after long gaps are likelier, so the choice is
/// random but not uniform (a difference from Redis, noted in docs/PROTOCOL.md).
pub fn spop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let count = coll::pop_count(argv)?;
    let absent = match count {
        Some(_) => Frame::Array(vec![]),
        None => Frame::Null,
    };
    let shared = ctx.shared;
    coll::write_existing(ctx, user, Kind::Set, absent, |ctx, meta| {
        let prefix = member_prefix(user);
        let end = coll::prefix_upper(&prefix);
        let want = count.unwrap_or(1).min(meta.count);
        let mut popped = Vec::new();
        for _ in 0..want {
            let point = member_key(&prefix, &[&shared.collections.random().to_be_bytes()]);
            let mut found = coll::members(
                ctx,
                Bound::Included(&point),
                Bound::Excluded(&end),
                Order::Ascending,
                1,
            );
            if found.is_empty() {
                found = coll::members(
                    ctx,
                    Bound::Included(&prefix),
                    Bound::Excluded(&end),
                    Order::Ascending,
                    1,
                );
            }
            let Some((key, _)) = found.pop() else {
                break;
            };
            if coll::remove_member(ctx, &key)? {
                meta.count = meta.count.saturating_sub(1);
                popped.push(Frame::bulk(&key[prefix.len()..]));
            }
        }
        Ok(coll::popped_reply(count, popped))
    })
}

/// SMEMBERS key: every member, in member order.
pub fn smembers(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if coll::open_read(ctx, user, Kind::Set)?.is_none() {
        return Ok(Frame::Array(vec![]));
    }
    let prefix = member_prefix(user);
    let end = coll::prefix_upper(&prefix);
    let entries = coll::members(
        ctx,
        Bound::Included(&prefix),
        Bound::Excluded(&end),
        Order::Ascending,
        usize::MAX,
    );
    Ok(Frame::Array(
        entries
            .into_iter()
            .map(|(k, _)| Frame::bulk(&k[prefix.len()..]))
            .collect(),
    ))
}

/// SCARD key.
pub fn scard(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    coll::len(ctx, argv[1], Kind::Set)
}

/// SISMEMBER key member.
pub fn sismember(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if coll::open_read(ctx, user, Kind::Set)?.is_none() {
        return Ok(Frame::Integer(0));
    }
    let key = member_key(&member_prefix(user), &[argv[2]]);
    let present = ctx.present(&key);
    Ok(Frame::Integer(i64::from(present)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: SADD, SREM, SPOP, SMEMBERS, SCARD, SISMEMBER agree with a BTreeSet model.
    // Method: a pseudo-random operation sequence on a small member space.
    #[test]
    fn set_against_model() {
        let mut h = Harness::new();
        let mut model = BTreeSet::new();
        let mut x: u64 = 99;
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let m = format!("m{}", (x >> 8) % 30);
            match x % 6 {
                0 | 1 => {
                    let added = model.insert(m.clone());
                    assert_eq!(h.run(&["SADD", "s", &m]), Frame::Integer(i64::from(added)));
                }
                2 => {
                    let removed = model.remove(&m);
                    assert_eq!(
                        h.run(&["SREM", "s", &m]),
                        Frame::Integer(i64::from(removed))
                    );
                }
                3 => match h.run(&["SPOP", "s"]) {
                    Frame::Null => assert!(model.is_empty()),
                    Frame::Bulk(b) => {
                        let b = String::from_utf8(b).expect("utf8");
                        assert!(model.remove(&b), "{b} popped but absent");
                    }
                    other => panic!("{other:?}"),
                },
                4 => {
                    let want = model.contains(&m);
                    assert_eq!(
                        h.run(&["SISMEMBER", "s", &m]),
                        Frame::Integer(i64::from(want))
                    );
                }
                _ => {
                    let all: Vec<&str> = model.iter().map(String::as_str).collect();
                    assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&all));
                }
            }
            assert_eq!(h.run(&["SCARD", "s"]), Frame::Integer(model.len() as i64));
        }
    }

    // Goal: SADD with repeats, SPOP with a count, and a missing key answer as Redis.
    // Method: one scenario.
    #[test]
    fn set_counts() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SADD", "s", "a", "b", "a", "c"]), Frame::Integer(3));
        let Frame::Array(popped) = h.run(&["SPOP", "s", "5"]) else {
            panic!("array expected");
        };
        assert_eq!(popped.len(), 3);
        assert_eq!(h.run(&["EXISTS", "s"]), Frame::Integer(0));
        assert_eq!(h.run(&["SPOP", "s", "2"]), bulks(&[]));
        assert_eq!(h.run(&["SPOP", "s"]), Frame::Null);
        assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&[]));
    }
}
