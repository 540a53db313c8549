//! Hashes: HSET, HMSET, HSETNX, HGET, HMGET, HGETALL, HKEYS, HVALS, HSTRLEN, HDEL, HLEN,
//! HEXISTS, HINCRBY, HINCRBYFLOAT, HRANDFIELD, HSCAN (docs/PROTOCOL.md "Hashes"). A field is
//! a member entry whose value is the field's value, so HGETALL, HKEYS and HVALS come in
//! field order, and HSCAN walks the fields in order with a cursor naming the last one.

use std::ops::Bound;

use forest_core::Order;

use super::{coll, float80, sample};
use super::{int_arg, Ctx, Reply};
use crate::collection::{member_key, member_prefix, member_prefix_into, Kind};
use crate::frame::{Frame, Protocol};
use crate::parse::parse_int;

/// HSET key field value [field value ...]: how many fields were new.
pub fn hset(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if !(argv.len() - 2).is_multiple_of(2) {
        return Err(super::wrong_arity("hset"));
    }
    let mut prefix = ctx.buffers.take();
    member_prefix_into(user, &mut prefix);
    let checked = argv[2..]
        .chunks_exact(2)
        .try_for_each(|pair| coll::check_member_parts(&prefix, pair[0], pair[1]));
    let reply = checked.and_then(|()| {
        coll::write(ctx, user, Kind::Hash, |ctx, meta| {
            coll::count_changes(ctx, meta, 1, argv[2..].chunks_exact(2), |ctx, pair| {
                let key = ctx.buffers.concat(&[&prefix, pair[0]]);
                coll::set_member(ctx, user, key, pair[1])
            })
        })
    });
    ctx.buffers.give(prefix);
    reply
}

/// HMSET key field value [field value ...]: HSET with Redis 2.0's reply, OK.
pub fn hmset(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if !(argv.len() - 2).is_multiple_of(2) {
        return Err(super::wrong_arity("hmset"));
    }
    hset(ctx, argv).map(|_| Frame::ok())
}

/// HSETNX key field value: 1 if the field was set, 0 if it existed (nothing changed).
pub fn hsetnx(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let key = member_key(&member_prefix(argv[1]), &[argv[2]]);
    coll::check_member(&key, argv[3])?;
    coll::write(ctx, argv[1], Kind::Hash, |ctx, meta| {
        coll::count_changes(ctx, meta, 1, [()], |ctx, ()| {
            coll::insert_member(ctx, &key, argv[3])
        })
    })
}

/// HKEYS key: the fields, in field order.
pub fn hkeys(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let entries = sample::all(ctx, argv[1], Kind::Hash)?;
    Ok(Frame::Array(
        entries.into_iter().map(|(f, _)| Frame::Bulk(f)).collect(),
    ))
}

/// HVALS key: the values, in field order.
pub fn hvals(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let entries = sample::all(ctx, argv[1], Kind::Hash)?;
    Ok(Frame::Array(
        entries.into_iter().map(|(_, v)| Frame::Bulk(v)).collect(),
    ))
}

/// HSTRLEN key field: the length of the field's value, 0 if there is none.
pub fn hstrlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if coll::open_read(ctx, argv[1], Kind::Hash)?.is_none() {
        return Ok(Frame::Integer(0));
    }
    Ok(match field(ctx, &member_prefix(argv[1]), argv[2]) {
        Frame::Bulk(value) => Frame::Integer(value.len() as i64),
        _ => Frame::Integer(0),
    })
}

/// HINCRBYFLOAT key field increment: the new value, computed and printed as Redis does
/// (80-bit long double, `%.17Lf`; [`float80`]).
pub fn hincrbyfloat(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let increment = argv[3];
    let not_a_float = || Frame::err("value is not a valid float");
    // The increment is checked first: Redis refuses a bad one whatever the key holds.
    match float80::incr_by_float(b"0", increment) {
        Err(float80::Refusal::NotAFloat) => return Err(not_a_float()),
        Err(float80::Refusal::NanOrInfinity) => return Err(Frame::err("value is NaN or Infinity")),
        Ok(_) => {}
    }
    let key = member_key(&member_prefix(user), &[argv[2]]);
    // The longest text `%.17Lf` prints is the member limit's concern, checked on the result.
    coll::check_member(&key, b"")?;
    coll::write(ctx, user, Kind::Hash, |ctx, meta| {
        let mut value = Vec::new();
        let present = ctx.read(&key, &mut value);
        let old: &[u8] = if present { &value } else { b"0" };
        let text = float80::incr_by_float(old, increment).map_err(|e| match e {
            float80::Refusal::NotAFloat => Frame::err("hash value is not a float"),
            float80::Refusal::NanOrInfinity => {
                Frame::err("increment would produce NaN or Infinity")
            }
        })?;
        coll::check_member(&key, text.as_bytes())?;
        if coll::put_member(ctx, &key, text.as_bytes())? {
            meta.count = meta.count.saturating_add(1);
        }
        Ok(Frame::bulk(text))
    })
}

/// HRANDFIELD key [count [WITHVALUES]]: one random field (null if none); with a count,
/// up to `count` distinct fields, or for a negative count exactly `-count` fields that may
/// repeat; WITHVALUES pairs each with its value (RESP3: [field, value] arrays).
pub fn hrandfield(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sample::Picks {
        items: picks,
        count,
        with_values,
    } = sample::random_command(ctx, argv, Kind::Hash, Some("withvalues"), "fields")?;
    if count.is_none() {
        return Ok(picks
            .into_iter()
            .next()
            .map_or(Frame::Null, |(f, _)| Frame::Bulk(f)));
    }
    let resp3 = ctx.client.protocol == Protocol::Resp3;
    let mut out = Vec::with_capacity(picks.len() * if with_values { 2 } else { 1 });
    for (f, v) in picks {
        match (with_values, resp3) {
            (false, _) => out.push(Frame::Bulk(f)),
            (true, false) => {
                out.push(Frame::Bulk(f));
                out.push(Frame::Bulk(v));
            }
            (true, true) => out.push(Frame::Array(vec![Frame::Bulk(f), Frame::Bulk(v)])),
        }
    }
    Ok(Frame::Array(out))
}

/// HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES] ([`sample::scan`]).
pub fn hscan(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    sample::scan(ctx, argv, Kind::Hash)
}

/// The value of `field` in hash `user`, or None; WRONGTYPE as Redis. Read through the unit,
/// so that inside MULTI/EXEC or a script it sees the writes made before it (review rev-coll
/// F1: it read the store, and HGET after HSET in one EXEC answered the old value).
fn field(ctx: &mut Ctx<'_, '_>, prefix: &[u8], field: &[u8]) -> Frame {
    let mut value = Vec::new();
    if ctx.read_at(&member_key(prefix, &[field]), &mut value) {
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
    // The key's stripe lock: its reads see every write to it whole.
    let shared = ctx.shared;
    let _guard = shared.collections.lock(argv[1]);
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

    fn strings(items: &[&str]) -> Frame {
        Frame::Array(items.iter().map(|s| bulk(s)).collect())
    }

    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

    // Goal: HMSET, HSETNX, HKEYS, HVALS, HSTRLEN and HINCRBYFLOAT reply as redis-server 7.0.15
    // did to the same commands (run by hand against it), errors included. Method: the same
    // sequence through the harness.
    #[test]
    fn more_hash_commands_as_redis() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["HSET", "h", "a", "1", "b", "2", "c", "x"]),
            Frame::Integer(3)
        );
        assert_eq!(h.run(&["HMSET", "h", "d", "4"]), Frame::ok());
        assert_eq!(h.run(&["HSETNX", "h", "a", "9"]), Frame::Integer(0));
        assert_eq!(h.run(&["HSETNX", "h", "e", "5"]), Frame::Integer(1));
        assert_eq!(
            h.run(&["HGET", "h", "a"]),
            bulk("1"),
            "HSETNX kept the value"
        );
        assert_eq!(h.run(&["HKEYS", "h"]), strings(&["a", "b", "c", "d", "e"]));
        assert_eq!(h.run(&["HVALS", "h"]), strings(&["1", "2", "x", "4", "5"]));
        assert_eq!(h.run(&["HSTRLEN", "h", "c"]), Frame::Integer(1));
        assert_eq!(h.run(&["HSTRLEN", "h", "zz"]), Frame::Integer(0));
        assert_eq!(h.run(&["HSTRLEN", "nokey", "f"]), Frame::Integer(0));
        assert_eq!(h.run(&["HKEYS", "nokey"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["HINCRBYFLOAT", "h", "a", "0.1"]), bulk("1.1"));
        assert_eq!(
            h.run(&["HINCRBYFLOAT", "h", "c", "1"]),
            Frame::err("hash value is not a float")
        );
        assert_eq!(
            h.run(&["HINCRBYFLOAT", "h", "a", "abc"]),
            Frame::err("value is not a valid float")
        );
        assert_eq!(
            h.run(&["HINCRBYFLOAT", "h", "a", "inf"]),
            Frame::err("value is NaN or Infinity")
        );
        assert_eq!(h.run(&["HINCRBYFLOAT", "h", "n", "1e5"]), bulk("100000"));
        assert_eq!(h.run(&["HINCRBYFLOAT", "h", "n", "5.0e3"]), bulk("105000"));
        assert_eq!(h.run(&["HLEN", "h"]), Frame::Integer(6));
        assert_eq!(h.run(&["SET", "s", "v"]), Frame::ok());
        for argv in [
            &["HINCRBYFLOAT", "s", "f", "1"][..],
            &["HKEYS", "s"],
            &["HVALS", "s"],
            &["HSTRLEN", "s", "f"],
            &["HSETNX", "s", "f", "v"],
            &["HMSET", "s", "f", "v"],
            &["HRANDFIELD", "s"],
            &["HSCAN", "s", "0"],
        ] {
            assert_eq!(h.run(argv), Frame::Error(WRONGTYPE.into()), "{argv:?}");
        }
        assert_eq!(
            h.run(&["HINCRBYFLOAT", "s", "f", "inf"]),
            Frame::err("value is NaN or Infinity"),
            "the increment is checked before the key's type"
        );
        assert_eq!(
            h.run(&["HMSET", "h", "a"]),
            Frame::Error("ERR wrong number of arguments for 'hmset' command".into())
        );
    }

    // Goal: HRANDFIELD's shapes and errors as Redis 7.0's, and its picks are fields of the
    // hash: distinct for a positive count, exactly -count for a negative one, all of them for
    // a count above the size; WITHVALUES pairs each with its own value, flat in RESP2 and as
    // pairs in RESP3. Method: a 5-field hash, each form many times.
    #[test]
    fn hrandfield_as_redis() {
        let mut h = Harness::new();
        let fields = ["a", "b", "c", "d", "e"];
        for (i, f) in fields.iter().enumerate() {
            h.run(&["HSET", "h", f, &format!("v{i}")]);
        }
        assert_eq!(h.run(&["HRANDFIELD", "nokey"]), Frame::Null);
        assert_eq!(h.run(&["HRANDFIELD", "nokey", "3"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["HRANDFIELD", "h", "0"]), Frame::Array(vec![]));
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "1", "withvalues", "x"]),
            Frame::err("syntax error")
        );
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "1", "foo"]),
            Frame::err("syntax error")
        );
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "x"]),
            Frame::err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "-9223372036854775808"]),
            Frame::err(
                "value is out of range, value must between -9223372036854775807 and 9223372036854775807"
            )
        );
        for count in ["4611686018427387904", "-4611686018427387904"] {
            assert_eq!(
                h.run(&["HRANDFIELD", "h", count, "WITHVALUES"]),
                Frame::err("value is out of range")
            );
        }
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "4611686018427387904"]),
            strings(&fields),
            "a huge positive count is every field"
        );
        assert_eq!(
            h.run(&["HRANDFIELD", "h", "-16777217"]),
            Frame::err("value is out of range, forest returns at most 16777216 random fields")
        );
        let text = |f: &Frame| match f {
            Frame::Bulk(b) => String::from_utf8(b.clone()).expect("utf8"),
            other => panic!("bulk expected: {other:?}"),
        };
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let one = text(&h.run(&["HRANDFIELD", "h"]));
            assert!(fields.contains(&one.as_str()), "{one}");
            seen.insert(one);
            let Frame::Array(distinct) = h.run(&["HRANDFIELD", "h", "3"]) else {
                panic!("array expected");
            };
            let names: std::collections::HashSet<String> = distinct.iter().map(text).collect();
            assert_eq!((distinct.len(), names.len()), (3, 3), "{distinct:?}");
            let Frame::Array(repeats) = h.run(&["HRANDFIELD", "h", "-7"]) else {
                panic!("array expected");
            };
            assert_eq!(repeats.len(), 7);
            assert!(repeats.iter().all(|f| fields.contains(&text(f).as_str())));
        }
        assert_eq!(seen.len(), 5, "every field drawn in 200 tries: {seen:?}");
        assert_eq!(h.run(&["HRANDFIELD", "h", "9"]), strings(&fields));
        let Frame::Array(flat) = h.run(&["HRANDFIELD", "h", "2", "WITHVALUES"]) else {
            panic!("array expected");
        };
        assert_eq!(flat.len(), 4);
        for pair in flat.chunks_exact(2) {
            let i = fields
                .iter()
                .position(|f| *f == text(&pair[0]))
                .expect("a field");
            assert_eq!(text(&pair[1]), format!("v{i}"));
        }
        h.client.protocol = Protocol::Resp3;
        let Frame::Array(pairs) = h.run(&["HRANDFIELD", "h", "-3", "withvalues"]) else {
            panic!("array expected");
        };
        assert_eq!(pairs.len(), 3);
        for pair in pairs {
            let Frame::Array(pair) = pair else {
                panic!("RESP3: a [field, value] pair expected");
            };
            let i = fields
                .iter()
                .position(|f| *f == text(&pair[0]))
                .expect("a field");
            assert_eq!(text(&pair[1]), format!("v{i}"));
        }
    }

    // Goal: HSCAN returns every field exactly once over an iteration, with its value (or
    // without, NOVALUES), filtered by MATCH, COUNT fields examined per call; errors as
    // Redis's. Method: 25 fields scanned 4 at a time; a field added mid-iteration; bad
    // cursors and options.
    #[test]
    fn hscan_walks_every_field_once() {
        let mut h = Harness::new();
        for i in 0..25 {
            h.run(&["HSET", "h", &format!("f{i:02}"), &format!("{i}")]);
        }
        let mut cursor = "0".to_string();
        let mut got = Vec::new();
        let mut calls = 0;
        loop {
            let Frame::Array(reply) = h.run(&["HSCAN", "h", &cursor, "COUNT", "4"]) else {
                panic!("array expected");
            };
            let (Frame::Bulk(next), Frame::Array(items)) = (&reply[0], &reply[1]) else {
                panic!("cursor and items expected: {reply:?}");
            };
            assert!(items.len() <= 8);
            for pair in items.chunks_exact(2) {
                got.push((pair[0].clone(), pair[1].clone()));
            }
            if calls == 1 {
                h.run(&["HSET", "h", "f99", "late"]);
            }
            calls += 1;
            cursor = String::from_utf8(next.clone()).expect("utf8");
            if cursor == "0" {
                break;
            }
        }
        let want: Vec<(Frame, Frame)> = (0..25)
            .map(|i| (bulk(&format!("f{i:02}")), bulk(&format!("{i}"))))
            .chain([(bulk("f99"), bulk("late"))])
            .collect();
        assert_eq!(got, want);
        assert_eq!(calls, 7, "26 fields, 4 a call");
        assert_eq!(
            h.run(&["HSCAN", "h", "0", "MATCH", "f1*", "COUNT", "100", "NOVALUES"]),
            Frame::Array(vec![
                bulk("0"),
                strings(&["f10", "f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18", "f19"])
            ])
        );
        assert_eq!(
            h.run(&["HSCAN", "nokey", "0"]),
            Frame::Array(vec![bulk("0"), Frame::Array(vec![])])
        );
        assert_eq!(h.run(&["HSCAN", "h", "abc"]), Frame::err("invalid cursor"));
        assert_eq!(
            h.run(&["HSCAN", "h", "0", "COUNT", "0"]),
            Frame::err("syntax error")
        );
        assert_eq!(
            h.run(&["HSCAN", "h", "0", "COUNT", "x"]),
            Frame::err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["HSCAN", "h", "0", "foo"]),
            Frame::err("syntax error")
        );
        // A cursor of another key's iteration is not this one's.
        let Frame::Array(reply) = h.run(&["HSCAN", "h", "0", "COUNT", "2"]) else {
            panic!("array expected");
        };
        let Frame::Bulk(other) = &reply[0] else {
            panic!("cursor expected");
        };
        h.run(&["HSET", "g", "x", "1"]);
        let other = String::from_utf8(other.clone()).expect("utf8");
        assert_eq!(h.run(&["HSCAN", "g", &other]), Frame::err("invalid cursor"));
    }

    // Goal: HSET of a field to the value it holds writes nothing (session 16: it used to
    // write the field and the type entry again) yet replies and signals as Redis's: 0, and a
    // client WATCHing the key sees it touched (Redis's HSET signals the key whatever it set);
    // a changed value, a new field and a repeated field in one HSET still write.
    // Method: the store's next LSN before and after each HSET; WATCH, another client's HSET,
    // then EXEC.
    #[test]
    fn hset_of_the_same_value_writes_nothing_but_touches_watchers() {
        let mut h = Harness::new();
        let lsn = |h: &Harness| h.shared.store.stats().lsn_next;
        assert_eq!(h.run(&["HSET", "h", "f", "v", "g", "w"]), Frame::Integer(2));
        let before = lsn(&h);
        assert_eq!(h.run(&["HSET", "h", "f", "v"]), Frame::Integer(0));
        assert_eq!(h.run(&["HSET", "h", "g", "w", "f", "v"]), Frame::Integer(0));
        assert_eq!(h.run(&["HMSET", "h", "f", "v"]), Frame::ok());
        assert_eq!(lsn(&h), before, "no-op HSETs wrote");
        assert_eq!(h.run(&["HSET", "h", "f", "v2"]), Frame::Integer(0));
        assert!(lsn(&h) > before, "a changed value is written");
        assert_eq!(h.run(&["HGET", "h", "f"]), bulk("v2"));
        // The same field twice in one HSET: the second value wins, counted new once.
        assert_eq!(
            h.run(&["HSET", "h", "n", "1", "n", "2", "f", "v2"]),
            Frame::Integer(1)
        );
        assert_eq!(h.run(&["HGET", "h", "n"]), bulk("2"));
        assert_eq!(h.run(&["HLEN", "h"]), Frame::Integer(3));
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        h.run(&["WATCH", "h"]);
        run_on(&h.shared, &mut other, &[b"HSET", b"h", b"f", b"v2"]);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(h.run(&["EXEC"]), Frame::NullArray, "HSET touches watchers");
        let mut h = h.restart();
        assert_eq!(h.run(&["HGET", "h", "f"]), bulk("v2"));
        assert_eq!(h.run(&["HLEN", "h"]), Frame::Integer(3));
    }
}
