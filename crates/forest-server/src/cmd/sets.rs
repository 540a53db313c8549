//! Sets: SADD, SREM, SPOP, SMEMBERS, SCARD, SISMEMBER (docs/PROTOCOL.md "Sets"). A member
//! is a member entry with an empty value, so SMEMBERS comes in member order.

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::Ctx;
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;

/// SADD key member [member ...]: how many were added.
pub fn sadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    let prefix = member_prefix(user);
    for member in &argv[2..] {
        if let Err(e) = coll::check_member(&member_key(&prefix, &[member]), b"") {
            return e;
        }
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let mut open = match coll::open_write(ctx, user, Kind::Set) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut added = 0;
    let mut result = Ok(());
    for member in &argv[2..] {
        match coll::insert_member(ctx, &member_key(&prefix, &[member]), b"") {
            Ok(true) => added += 1,
            Ok(false) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    open.meta.count = open.meta.count.saturating_add(added);
    if let Err(e) = coll::finish(ctx, user, open) {
        return e;
    }
    match result {
        Ok(()) => Frame::Integer(added as i64),
        Err(e) => e,
    }
}

/// SREM key member [member ...]: how many were removed.
pub fn srem(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    let prefix = member_prefix(user);
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    match coll::open_read(ctx, user, Kind::Set) {
        Ok(Some(_)) => {}
        Ok(None) => return Frame::Integer(0),
        Err(e) => return e,
    }
    let mut open = match coll::open_write(ctx, user, Kind::Set) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut removed = 0;
    let mut result = Ok(());
    for member in &argv[2..] {
        match coll::remove_member(ctx, &member_key(&prefix, &[member])) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    open.meta.count = open.meta.count.saturating_sub(removed);
    if let Err(e) = coll::finish(ctx, user, open) {
        return e;
    }
    match result {
        Ok(()) => Frame::Integer(removed as i64),
        Err(e) => e,
    }
}

/// SPOP key [count]: removes and returns random members.
///
/// The choice: a random 8-byte point in the member range, the first member at or after it
/// (wrapping to the first member). Members after long gaps are likelier, so the choice is
/// random but not uniform (a difference from Redis, noted in docs/PROTOCOL.md).
pub fn spop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    let count = match argv.get(2) {
        None => None,
        Some(arg) => match coll::pop_count(arg) {
            Ok(n) => Some(n),
            Err(e) => return e,
        },
    };
    if argv.len() > 3 {
        return super::syntax_error();
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    match coll::open_read(ctx, user, Kind::Set) {
        Ok(Some(_)) => {}
        Ok(None) if count.is_some() => return Frame::Array(vec![]),
        Ok(None) => return Frame::Null,
        Err(e) => return e,
    }
    let mut open = match coll::open_write(ctx, user, Kind::Set) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let prefix = member_prefix(user);
    let end = coll::prefix_upper(&prefix);
    let want = count.unwrap_or(1).min(open.meta.count);
    let mut popped = Vec::new();
    let mut result = Ok(());
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
        match coll::remove_member(ctx, &key) {
            Ok(true) => {
                open.meta.count = open.meta.count.saturating_sub(1);
                popped.push(Frame::bulk(&key[prefix.len()..]));
            }
            Ok(false) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if let Err(e) = coll::finish(ctx, user, open) {
        return e;
    }
    if let Err(e) = result {
        return e;
    }
    match count {
        Some(_) => Frame::Array(popped),
        None => popped.pop().unwrap_or(Frame::Null),
    }
}

/// SMEMBERS key: every member, in member order.
pub fn smembers(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    match coll::open_read(ctx, user, Kind::Set) {
        Ok(Some(_)) => {}
        Ok(None) => return Frame::Array(vec![]),
        Err(e) => return e,
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
    Frame::Array(
        entries
            .into_iter()
            .map(|(k, _)| Frame::bulk(&k[prefix.len()..]))
            .collect(),
    )
}

/// SCARD key.
pub fn scard(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    match coll::open_read(ctx, argv[1], Kind::Set) {
        Ok(meta) => Frame::Integer(meta.map_or(0, |m| m.count as i64)),
        Err(e) => e,
    }
}

/// SISMEMBER key member.
pub fn sismember(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    match coll::open_read(ctx, user, Kind::Set) {
        Ok(Some(_)) => {}
        Ok(None) => return Frame::Integer(0),
        Err(e) => return e,
    }
    let key = member_key(&member_prefix(user), &[argv[2]]);
    let present = ctx.present(&key);
    Frame::Integer(i64::from(present))
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
