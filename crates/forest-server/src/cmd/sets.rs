//! Sets: SADD, SREM, SPOP, SMEMBERS, SCARD, SISMEMBER, SMISMEMBER, SRANDMEMBER, SSCAN,
//! SINTER, SUNION, SDIFF, SINTERCARD (docs/PROTOCOL.md "Sets"). A member is a member entry
//! with an empty value, so SMEMBERS comes in member order. The commands over several sets
//! hold the stripe locks of all their keys while they read, so they see no other command's
//! write half done (Redis runs them atomically); SINTER and SDIFF read one set whole and look
//! its members up in the others, so SINTER's cost follows its smallest set.

use std::collections::BTreeSet;
use std::ops::Bound;

use forest_core::Order;

use super::{coll, sample};
use super::{syntax_error, Ctx, Reply};
use crate::collection::{member_key, member_prefix, member_prefix_into, Kind};
use crate::frame::Frame;
use crate::parse::{is_word, parse_int};

/// SADD key member [member ...]: how many were added.
pub fn sadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let mut prefix = ctx.buffers.take();
    member_prefix_into(user, &mut prefix);
    let checked = argv[2..]
        .iter()
        .try_for_each(|member| coll::check_member_parts(&prefix, member, b""));
    let reply = checked.and_then(|()| {
        coll::write(ctx, user, Kind::Set, |ctx, meta| {
            coll::count_changes(ctx, meta, 1, &argv[2..], |ctx, member| {
                let key = ctx.buffers.concat(&[&prefix, member]);
                let added = coll::insert_member(ctx, &key, b"");
                ctx.buffers.give(key);
                added
            })
        })
    });
    ctx.buffers.give(prefix);
    reply
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
    coll::write_existing(ctx, user, Kind::Set, absent, |ctx, meta| {
        let prefix = member_prefix(user);
        let end = coll::prefix_upper(&prefix);
        let want = count.unwrap_or(1).min(meta.count);
        let mut popped = Vec::new();
        for _ in 0..want {
            let Some((key, _)) = sample::at_random_point(ctx, &prefix, &end) else {
                break;
            };
            // Found in this command's view, so present: removed without reading it again.
            popped.push(Frame::bulk(&key[prefix.len()..]));
            coll::remove_known_member(ctx, key)?;
            meta.count = meta.count.saturating_sub(1);
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

/// SMISMEMBER key member [member ...]: 1 or 0 per member.
pub fn smismember(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    // The key's stripe lock: its reads see every write to it whole.
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let exists = coll::open_read(ctx, user, Kind::Set)?.is_some();
    let prefix = member_prefix(user);
    Ok(Frame::Array(
        argv[2..]
            .iter()
            .map(|m| Frame::Integer(i64::from(exists && ctx.present(&member_key(&prefix, &[m])))))
            .collect(),
    ))
}

/// SRANDMEMBER key [count]: one random member (null if none); with a count, up to `count`
/// distinct members, or for a negative count exactly `-count` that may repeat.
pub fn srandmember(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sample::Picks {
        items: picks,
        count,
        ..
    } = sample::random_command(ctx, argv, Kind::Set, None, "members")?;
    let mut members = picks.into_iter().map(|(m, _)| Frame::Bulk(m));
    Ok(match count {
        None => members.next().unwrap_or(Frame::Null),
        Some(_) => Frame::Array(members.collect()),
    })
}

/// SSCAN key cursor [MATCH pattern] [COUNT count] ([`sample::scan`]).
pub fn sscan(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    sample::scan(ctx, argv, Kind::Set)
}

/// The size of each of `keys`' sets (None: no such key); WRONGTYPE if any is not a set, as
/// Redis checks every key before it answers.
fn open_sets(ctx: &mut Ctx<'_, '_>, keys: &[&[u8]]) -> Result<Vec<Option<u64>>, Frame> {
    keys.iter()
        .map(|k| Ok(coll::open_read(ctx, k, Kind::Set)?.map(|meta| meta.count)))
        .collect()
}

fn set_members(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Vec<Vec<u8>>, Frame> {
    Ok(sample::all(ctx, key, Kind::Set)?
        .into_iter()
        .map(|(m, _)| m)
        .collect())
}

fn is_member(ctx: &mut Ctx<'_, '_>, key: &[u8], member: &[u8]) -> bool {
    ctx.present(&member_key(&member_prefix(key), &[member]))
}

/// The intersection of `keys`, in member order, at most `limit` members (0: no limit).
pub(super) fn intersection(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    limit: usize,
) -> Result<Vec<Vec<u8>>, Frame> {
    let counts = open_sets(ctx, keys)?;
    let Some(sizes) = counts.iter().copied().collect::<Option<Vec<u64>>>() else {
        return Ok(Vec::new());
    };
    // Read the smallest set, look its members up in the others.
    let smallest = (0..keys.len()).min_by_key(|&i| sizes[i]).unwrap_or(0);
    let mut out = Vec::new();
    for member in set_members(ctx, keys[smallest])? {
        let everywhere = (0..keys.len())
            .filter(|&i| i != smallest)
            .all(|i| is_member(ctx, keys[i], &member));
        if everywhere {
            out.push(member);
            if out.len() == limit {
                break;
            }
        }
    }
    Ok(out)
}

/// SINTER key [key ...]: the members in every set, in member order.
pub fn sinter(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let keys = &argv[1..];
    let _guards = ctx.shared.collections.lock_many(keys.iter().copied());
    let members = intersection(ctx, keys, 0)?;
    Ok(Frame::Array(members.into_iter().map(Frame::Bulk).collect()))
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]: how many members are in every set,
/// counting stops at `limit` (0: no limit).
pub fn sintercard(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let numkeys = match parse_int(argv[1]) {
        Some(n) if n > 0 => n as u64,
        _ => return Err(Frame::err("numkeys should be greater than 0")),
    };
    let rest = &argv[2..];
    if numkeys > rest.len() as u64 {
        return Err(Frame::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let (keys, options) = rest.split_at(numkeys as usize);
    let mut limit = 0usize;
    let mut i = 0;
    while i < options.len() {
        match options.get(i + 1) {
            Some(value) if is_word(options[i], "limit") => {
                limit = match parse_int(value) {
                    Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    // Redis says so for anything but a whole number >= 0.
                    _ => return Err(Frame::err("LIMIT can't be negative")),
                };
                i += 2;
            }
            _ => return Err(syntax_error()),
        }
    }
    let _guards = ctx.shared.collections.lock_many(keys.iter().copied());
    let members = intersection(ctx, keys, limit)?;
    Ok(Frame::Integer(members.len() as i64))
}

/// SUNION key [key ...]: the members of any set, in member order.
pub fn sunion(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let keys = &argv[1..];
    let _guards = ctx.shared.collections.lock_many(keys.iter().copied());
    let members = union(ctx, keys)?;
    Ok(Frame::Array(members.into_iter().map(Frame::Bulk).collect()))
}

/// The union of `keys`, in member order.
pub(super) fn union(ctx: &mut Ctx<'_, '_>, keys: &[&[u8]]) -> Result<Vec<Vec<u8>>, Frame> {
    open_sets(ctx, keys)?;
    let mut all = BTreeSet::new();
    for key in keys {
        all.extend(set_members(ctx, key)?);
    }
    Ok(all.into_iter().collect())
}

/// SDIFF key [key ...]: the members of the first set in none of the others, in member order.
pub fn sdiff(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let keys = &argv[1..];
    let _guards = ctx.shared.collections.lock_many(keys.iter().copied());
    let members = difference(ctx, keys)?;
    Ok(Frame::Array(members.into_iter().map(Frame::Bulk).collect()))
}

/// The members of the first of `keys` in none of the others, in member order.
pub(super) fn difference(ctx: &mut Ctx<'_, '_>, keys: &[&[u8]]) -> Result<Vec<Vec<u8>>, Frame> {
    let counts = open_sets(ctx, keys)?;
    if counts[0].is_none() {
        return Ok(Vec::new());
    }
    let others: Vec<&[u8]> = (1..keys.len())
        .filter(|&i| counts[i].is_some())
        .map(|i| keys[i])
        .collect();
    let mut out = Vec::new();
    for member in set_members(ctx, keys[0])? {
        if !others.iter().any(|k| is_member(ctx, k, &member)) {
            out.push(member);
        }
    }
    Ok(out)
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

    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

    fn wrongtype() -> Frame {
        Frame::Error(WRONGTYPE.into())
    }

    // Goal: SINTER, SUNION, SDIFF, SINTERCARD, SMISMEMBER, SRANDMEMBER and SSCAN reply as
    // redis-server 7.0.15 did to the same commands (run by hand against it), in member order
    // where Redis's order is its hash table's; errors as Redis's, WRONGTYPE checked on every
    // key before a missing one empties the answer. Method: the same sequence.
    #[test]
    fn set_algebra_as_redis() {
        let mut h = Harness::new();
        h.run(&["SADD", "s1", "a", "b", "c", "d"]);
        h.run(&["SADD", "s2", "b", "c", "e"]);
        h.run(&["SET", "str", "v"]);
        assert_eq!(h.run(&["SINTER", "s1", "s2"]), bulks(&["b", "c"]));
        assert_eq!(h.run(&["SINTER", "s1", "missing"]), bulks(&[]));
        for argv in [
            &["SINTER", "s1", "missing", "str"][..],
            &["SINTER", "str", "missing"],
            &["SUNION", "s1", "str"],
            &["SDIFF", "s1", "str"],
            &["SDIFF", "missing", "str"],
            &["SINTERCARD", "2", "missing", "str"],
            &["SMISMEMBER", "str", "a"],
            &["SRANDMEMBER", "str"],
            &["SSCAN", "str", "0"],
        ] {
            assert_eq!(h.run(argv), wrongtype(), "{argv:?}");
        }
        assert_eq!(
            h.run(&["SUNION", "s1", "s2", "missing"]),
            bulks(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(h.run(&["SDIFF", "s1", "s2"]), bulks(&["a", "d"]));
        assert_eq!(h.run(&["SDIFF", "missing", "s1"]), bulks(&[]));
        assert_eq!(
            h.run(&["SDIFF", "s1", "missing"]),
            bulks(&["a", "b", "c", "d"])
        );
        let int = Frame::Integer;
        assert_eq!(h.run(&["SINTERCARD", "2", "s1", "s2"]), int(2));
        assert_eq!(
            h.run(&["SINTERCARD", "2", "s1", "s2", "LIMIT", "1"]),
            int(1)
        );
        assert_eq!(
            h.run(&["SINTERCARD", "2", "s1", "s2", "limit", "0"]),
            int(2)
        );
        assert_eq!(h.run(&["SINTERCARD", "1", "missing"]), int(0));
        let err = |t: &str| Frame::err(t);
        assert_eq!(
            h.run(&["SINTERCARD", "0", "s1"]),
            err("numkeys should be greater than 0")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "x", "s1"]),
            err("numkeys should be greater than 0")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "3", "s1", "s2"]),
            err("Number of keys can't be greater than number of args")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "1", "s1", "LIMIT", "-1"]),
            err("LIMIT can't be negative")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "1", "s1", "foo", "1"]),
            err("syntax error")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "1", "s1", "LIMIT", "99999999999999999999"]),
            err("LIMIT can't be negative")
        );
        assert_eq!(
            h.run(&["SINTERCARD", "1", "missing", "str"]),
            err("syntax error")
        );
        assert_eq!(
            h.run(&["SMISMEMBER", "s1", "a", "z", "c"]),
            Frame::Array(vec![int(1), int(0), int(1)])
        );
        assert_eq!(
            h.run(&["SMISMEMBER", "missing", "a"]),
            Frame::Array(vec![int(0)])
        );
        assert_eq!(h.run(&["SRANDMEMBER", "missing"]), Frame::Null);
        assert_eq!(h.run(&["SRANDMEMBER", "missing", "2"]), bulks(&[]));
        assert_eq!(h.run(&["SRANDMEMBER", "s1", "0"]), bulks(&[]));
        assert_eq!(
            h.run(&["SRANDMEMBER", "s1", "x"]),
            err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["SRANDMEMBER", "s1", "-9223372036854775808"]),
            err("value is out of range, value must between -9223372036854775807 and 9223372036854775807")
        );
        assert_eq!(
            h.run(&["SRANDMEMBER", "s1", "9"]),
            bulks(&["a", "b", "c", "d"])
        );
        for _ in 0..50 {
            let Frame::Bulk(one) = h.run(&["SRANDMEMBER", "s1"]) else {
                panic!("a member expected");
            };
            assert!(["a", "b", "c", "d"].contains(&std::str::from_utf8(&one).expect("utf8")));
            let Frame::Array(three) = h.run(&["SRANDMEMBER", "s1", "3"]) else {
                panic!("array expected");
            };
            let distinct: BTreeSet<_> = three.iter().map(|f| format!("{f:?}")).collect();
            assert_eq!(distinct.len(), 3);
            let Frame::Array(six) = h.run(&["SRANDMEMBER", "s1", "-6"]) else {
                panic!("array expected");
            };
            assert_eq!(six.len(), 6);
        }
        assert_eq!(
            h.run(&["SSCAN", "s1", "0"]),
            Frame::Array(vec![bulk("0"), bulks(&["a", "b", "c", "d"])])
        );
        assert_eq!(
            h.run(&["SSCAN", "s1", "0", "MATCH", "[ab]"]),
            Frame::Array(vec![bulk("0"), bulks(&["a", "b"])])
        );
        assert_eq!(
            h.run(&["SSCAN", "s1", "0", "novalues"]),
            err("syntax error")
        );
        assert_eq!(
            h.run(&["SSCAN", "missing", "0"]),
            Frame::Array(vec![bulk("0"), bulks(&[])])
        );
    }
}
