//! Hashes: HSET, HGET, HMGET, HGETALL, HDEL, HLEN, HEXISTS, HINCRBY (docs/PROTOCOL.md
//! "Hashes"). A field is a member entry whose value is the field's value, so HGETALL comes
//! in field order.

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::{int_arg, Ctx, Reply};
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;
use crate::parse::parse_int;

/// HSET key field value [field value ...]: how many fields were new.
pub fn hset(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if !(argv.len() - 2).is_multiple_of(2) {
        return Err(super::wrong_arity("hset"));
    }
    let prefix = member_prefix(user);
    for pair in argv[2..].chunks_exact(2) {
        coll::check_member(&member_key(&prefix, &[pair[0]]), pair[1])?;
    }
    coll::write(ctx, user, Kind::Hash, |ctx, meta| {
        coll::count_changes(ctx, meta, 1, argv[2..].chunks_exact(2), |ctx, pair| {
            coll::put_member(ctx, &member_key(&prefix, &[pair[0]]), pair[1])
        })
    })
}

/// The value of `field` in hash `user`, or None; WRONGTYPE as Redis.
fn field(ctx: &mut Ctx<'_, '_>, prefix: &[u8], field: &[u8]) -> Frame {
    let mut value = Vec::new();
    if ctx
        .shared
        .store
        .get(&member_key(prefix, &[field]), &mut value)
    {
        Frame::Bulk(value)
    } else {
        Frame::Null
    }
}

/// HGET key field.
pub fn hget(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if coll::open_read(ctx, argv[1], Kind::Hash)?.is_none() {
        return Ok(Frame::Null);
    }
    Ok(field(ctx, &member_prefix(argv[1]), argv[2]))
}

/// HMGET key field [field ...].
pub fn hmget(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if coll::open_read(ctx, argv[1], Kind::Hash)?.is_none() {
        return Ok(Frame::Array(
            argv[2..].iter().map(|_| Frame::Null).collect(),
        ));
    }
    let prefix = member_prefix(argv[1]);
    Ok(Frame::Array(
        argv[2..].iter().map(|f| field(ctx, &prefix, f)).collect(),
    ))
}

/// HGETALL key: a map (RESP2: flat field value ...), in field order.
pub fn hgetall(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if coll::open_read(ctx, user, Kind::Hash)?.is_none() {
        return Ok(Frame::Map(vec![]));
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
    Ok(Frame::Map(
        entries
            .into_iter()
            .map(|(k, v)| (Frame::bulk(&k[prefix.len()..]), Frame::Bulk(v)))
            .collect(),
    ))
}

/// HDEL key field [field ...]: how many were removed.
pub fn hdel(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let prefix = member_prefix(user);
    coll::write_existing(ctx, user, Kind::Hash, Frame::Integer(0), |ctx, meta| {
        coll::count_changes(ctx, meta, -1, &argv[2..], |ctx, f| {
            coll::remove_member(ctx, &member_key(&prefix, &[f]))
        })
    })
}

/// HLEN key.
pub fn hlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    coll::len(ctx, argv[1], Kind::Hash)
}

/// HEXISTS key field.
pub fn hexists(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if coll::open_read(ctx, argv[1], Kind::Hash)?.is_none() {
        return Ok(Frame::Integer(0));
    }
    let key = member_key(&member_prefix(argv[1]), &[argv[2]]);
    Ok(Frame::Integer(i64::from(ctx.present(&key))))
}

/// HINCRBY key field increment: the new value.
pub fn hincrby(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let delta = int_arg(argv[3])?;
    let key = member_key(&member_prefix(user), &[argv[2]]);
    coll::check_member(&key, b"-9223372036854775808")?;
    coll::write(ctx, user, Kind::Hash, |ctx, meta| {
        let mut value = Vec::new();
        let present = ctx.read(&key, &mut value);
        let current = if present { parse_int(&value) } else { Some(0) };
        let n = current
            .ok_or_else(|| Frame::err("hash value is not an integer"))?
            .checked_add(delta)
            .ok_or_else(|| Frame::err("increment or decrement would overflow"))?;
        if coll::put_member(ctx, &key, n.to_string().as_bytes())? {
            meta.count = meta.count.saturating_add(1);
        }
        Ok(Frame::Integer(n))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::testing::*;
    use crate::frame::{Frame, Protocol};

    // Goal: HSET, HGET, HDEL, HEXISTS, HLEN, HMGET, HINCRBY agree with a HashMap model.
    // Method: a pseudo-random operation sequence on a small field space.
    #[test]
    fn hash_against_model() {
        let mut h = Harness::new();
        let mut model: HashMap<String, String> = HashMap::new();
        let mut x: u64 = 1234;
        for step in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = format!("f{}", (x >> 8) % 20);
            match x % 5 {
                0 | 1 => {
                    let v = format!("{step}");
                    let new = model.insert(f.clone(), v.clone()).is_none();
                    assert_eq!(
                        h.run(&["HSET", "h", &f, &v]),
                        Frame::Integer(i64::from(new))
                    );
                }
                2 => {
                    let removed = model.remove(&f).is_some();
                    assert_eq!(
                        h.run(&["HDEL", "h", &f]),
                        Frame::Integer(i64::from(removed))
                    );
                }
                3 => {
                    let want = model.get(&f).map_or(Frame::Null, |v| bulk(v));
                    assert_eq!(h.run(&["HGET", "h", &f]), want);
                    let want = Frame::Integer(i64::from(model.contains_key(&f)));
                    assert_eq!(h.run(&["HEXISTS", "h", &f]), want);
                }
                _ => {
                    let n: i64 = model.get(&f).map_or(0, |v| v.parse().expect("int"));
                    model.insert(f.clone(), (n + 3).to_string());
                    assert_eq!(h.run(&["HINCRBY", "h", &f, "3"]), Frame::Integer(n + 3));
                }
            }
            assert_eq!(h.run(&["HLEN", "h"]), Frame::Integer(model.len() as i64));
        }
        let mut fields: Vec<_> = model.iter().collect();
        fields.sort();
        let want = Frame::Map(fields.iter().map(|(f, v)| (bulk(f), bulk(v))).collect());
        assert_eq!(h.run(&["HGETALL", "h"]), want);
    }

    // Goal: HGETALL's RESP2 and RESP3 shapes, HMGET with missing fields, and errors.
    // Method: encode replies for both protocols; bad HINCRBY inputs.
    #[test]
    fn hash_replies_and_errors() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["HSET", "h", "b", "2", "a", "1"]), Frame::Integer(2));
        let reply = h.run(&["HGETALL", "h"]);
        let mut out = Vec::new();
        reply.encode_to(Protocol::Resp2, &mut out);
        assert_eq!(out, b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n");
        out.clear();
        reply.encode_to(Protocol::Resp3, &mut out);
        assert_eq!(out, b"%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n");
        assert_eq!(
            h.run(&["HMGET", "h", "a", "x", "b"]),
            Frame::Array(vec![bulk("1"), Frame::Null, bulk("2")])
        );
        assert_eq!(
            h.run(&["HSET", "h", "a"]),
            Frame::Error("ERR wrong number of arguments for 'hset' command".into())
        );
        assert_eq!(
            h.run(&["HINCRBY", "h", "a", "x"]),
            Frame::Error("ERR value is not an integer or out of range".into())
        );
        h.run(&["HSET", "h", "s", "text"]);
        assert_eq!(
            h.run(&["HINCRBY", "h", "s", "1"]),
            Frame::Error("ERR hash value is not an integer".into())
        );
        h.run(&["HSET", "h", "m", "9223372036854775807"]);
        assert_eq!(
            h.run(&["HINCRBY", "h", "m", "1"]),
            Frame::Error("ERR increment or decrement would overflow".into())
        );
        assert_eq!(
            h.run(&["HDEL", "h", "a", "b", "s", "m", "zz"]),
            Frame::Integer(4)
        );
        assert_eq!(h.run(&["EXISTS", "h"]), Frame::Integer(0));
        assert_eq!(h.run(&["HGETALL", "h"]), Frame::Map(vec![]));
    }
}
