//! Lists: LPUSH, RPUSH, LPOP, RPOP, LRANGE, LLEN, LINDEX (docs/PROTOCOL.md "Lists").
//!
//! A list is the members `head..tail` of its key ([`crate::collection`]): LPUSH stores at
//! `head - 1`, RPUSH at `tail`, so element `i` is at sequence `head + i` and LINDEX and
//! LRANGE are one lookup or one range scan. Every command holds the key's stripe lock.

use std::ops::Bound;

use forest_core::Order;

use super::coll::{self, null_array};
use super::{int_arg, Ctx, Reply};
use crate::collection::{member_key, member_prefix, seq_bytes, Kind};
use crate::frame::Frame;

fn push(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], left: bool) -> Reply {
    let user = argv[1];
    let prefix = member_prefix(user);
    for element in &argv[2..] {
        coll::check_member(&member_key(&prefix, &[&[0; 8]]), element)?;
    }
    coll::write(ctx, user, Kind::List, |ctx, meta| {
        for element in &argv[2..] {
            let seq = if left {
                meta.a.checked_sub(1)
            } else {
                Some(meta.b)
            };
            let Some(seq) = seq.filter(|s| *s < i64::MAX) else {
                return Err(Frame::err("list sequence numbers exhausted"));
            };
            coll::put_member(ctx, &member_key(&prefix, &[&seq_bytes(seq)]), element)?;
            if left {
                meta.a = seq;
            } else {
                meta.b = seq + 1;
            }
            meta.count = meta.count.saturating_add(1);
        }
        Ok(Frame::Integer(meta.count as i64))
    })
}

/// LPUSH key element [element ...]: the new length.
pub fn lpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    push(ctx, argv, true)
}

/// RPUSH key element [element ...]: the new length.
pub fn rpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    push(ctx, argv, false)
}

fn pop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], left: bool) -> Reply {
    let user = argv[1];
    let count = coll::pop_count(argv)?;
    let absent = match count {
        Some(_) => null_array(ctx),
        None => Frame::Null,
    };
    coll::write_existing(ctx, user, Kind::List, absent, |ctx, meta| {
        let prefix = member_prefix(user);
        let want = count.unwrap_or(1).min(meta.count);
        let mut keys = Vec::new();
        let mut popped = Vec::new();
        for _ in 0..want {
            let seq = if left {
                meta.a
            } else {
                meta.b.saturating_sub(1)
            };
            let key = member_key(&prefix, &[&seq_bytes(seq)]);
            let mut value = Vec::new();
            // Members head..tail always exist; only a type entry written by hand under the
            // reserved byte could say otherwise, and then the hole is skipped.
            let present = ctx.read(&key, &mut value);
            if left {
                meta.a = meta.a.saturating_add(1);
            } else {
                meta.b = meta.b.saturating_sub(1);
            }
            meta.count = meta.count.saturating_sub(1);
            if present {
                keys.push(key);
                popped.push(Frame::Bulk(value));
            }
        }
        // The members' removal and the new metadata are one unit, written by `coll::write`.
        for key in &keys {
            coll::remove_member(ctx, key)?;
        }
        Ok(coll::popped_reply(count, popped))
    })
}

/// LPOP key [count].
pub fn lpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    pop(ctx, argv, true)
}

/// RPOP key [count].
pub fn rpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    pop(ctx, argv, false)
}

/// LRANGE key start stop.
pub fn lrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let (start, stop) = (int_arg(argv[2])?, int_arg(argv[3])?);
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let Some(meta) = coll::open_read(ctx, user, Kind::List)? else {
        return Ok(Frame::Array(vec![]));
    };
    let Some((first, last)) = coll::index_range(start, stop, meta.count) else {
        return Ok(Frame::Array(vec![]));
    };
    let prefix = member_prefix(user);
    let lower = member_key(&prefix, &[&seq_bytes(meta.a.saturating_add(first as i64))]);
    let upper = member_key(&prefix, &[&seq_bytes(meta.a.saturating_add(last as i64))]);
    let entries = coll::members(
        ctx,
        Bound::Included(&lower),
        Bound::Included(&upper),
        Order::Ascending,
        usize::MAX,
    );
    Ok(Frame::Array(
        entries.into_iter().map(|(_, v)| Frame::Bulk(v)).collect(),
    ))
}

/// LLEN key.
pub fn llen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    coll::len(ctx, argv[1], Kind::List)
}

/// LINDEX key index.
pub fn lindex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let index = int_arg(argv[2])?;
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let Some(meta) = coll::open_read(ctx, user, Kind::List)? else {
        return Ok(Frame::Null);
    };
    let Some((i, _)) = coll::index_range(index, index, meta.count) else {
        return Ok(Frame::Null);
    };
    let key = member_key(
        &member_prefix(user),
        &[&seq_bytes(meta.a.saturating_add(i as i64))],
    );
    let mut value = Vec::new();
    if ctx.read(&key, &mut value) {
        Ok(Frame::Bulk(value))
    } else {
        Ok(Frame::Null)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::super::testing::*;
    use crate::frame::Frame;

    fn model_range(model: &VecDeque<String>, start: i64, stop: i64) -> Frame {
        let Some((a, b)) = super::coll::index_range(start, stop, model.len() as u64) else {
            return bulks(&[]);
        };
        Frame::Array(
            model
                .iter()
                .skip(a as usize)
                .take((b - a + 1) as usize)
                .map(|s| bulk(s))
                .collect(),
        )
    }

    // Goal: pushes, pops, LRANGE, LINDEX and LLEN agree with a VecDeque model.
    // Method: a fixed pseudo-random sequence of operations, each reply compared.
    #[test]
    fn list_against_model() {
        let mut h = Harness::new();
        let mut model: VecDeque<String> = VecDeque::new();
        let mut x: u64 = 7;
        for step in 0..600 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let e = format!("e{step}");
            match x % 7 {
                0 | 1 => {
                    model.push_front(e.clone());
                    assert_eq!(
                        h.run(&["LPUSH", "l", &e]),
                        Frame::Integer(model.len() as i64)
                    );
                }
                2 | 3 => {
                    model.push_back(e.clone());
                    assert_eq!(
                        h.run(&["RPUSH", "l", &e]),
                        Frame::Integer(model.len() as i64)
                    );
                }
                4 => {
                    let want = model.pop_front().map_or(Frame::Null, |s| bulk(&s));
                    assert_eq!(h.run(&["LPOP", "l"]), want);
                }
                5 => {
                    let want = model.pop_back().map_or(Frame::Null, |s| bulk(&s));
                    assert_eq!(h.run(&["RPOP", "l"]), want);
                }
                _ => {
                    let (a, b) = ((x >> 8) as i64 % 20 - 10, (x >> 16) as i64 % 20 - 5);
                    let (sa, sb) = (a.to_string(), b.to_string());
                    assert_eq!(h.run(&["LRANGE", "l", &sa, &sb]), model_range(&model, a, b));
                    let want = super::coll::index_range(a, a, model.len() as u64)
                        .map_or(Frame::Null, |(i, _)| bulk(&model[i as usize]));
                    assert_eq!(h.run(&["LINDEX", "l", &sa]), want);
                }
            }
            assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(model.len() as i64));
        }
    }

    // Goal: pops with a count, multi-element pushes, emptying and type errors as Redis.
    // Method: one scenario, replies compared.
    #[test]
    fn list_counts_and_types() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["RPUSH", "l", "a", "b", "c"]), Frame::Integer(3));
        assert_eq!(h.run(&["LPUSH", "l", "x", "y"]), Frame::Integer(5));
        assert_eq!(
            h.run(&["LRANGE", "l", "0", "-1"]),
            bulks(&["y", "x", "a", "b", "c"])
        );
        assert_eq!(h.run(&["LPOP", "l", "2"]), bulks(&["y", "x"]));
        assert_eq!(h.run(&["RPOP", "l", "5"]), bulks(&["c", "b", "a"]));
        assert_eq!(h.run(&["EXISTS", "l"]), Frame::Integer(0));
        assert_eq!(h.run(&["LPOP", "l"]), Frame::Null);
        assert_eq!(h.run(&["LPOP", "l", "1"]), Frame::NullArray);
        assert_eq!(
            h.run(&["LPOP", "l", "-1"]),
            Frame::Error("ERR value is out of range, must be positive".into())
        );
        h.run(&["SET", "s", "v"]);
        let wrong = Frame::Error(
            "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
        );
        assert_eq!(h.run(&["LPUSH", "s", "a"]), wrong);
        assert_eq!(h.run(&["LRANGE", "s", "0", "1"]), wrong);
        h.run(&["RPUSH", "l", "a"]);
        assert_eq!(h.run(&["GET", "l"]), wrong);
        assert_eq!(h.run(&["INCR", "l"]), wrong);
        assert_eq!(h.run(&["APPEND", "l", "x"]), wrong);
        assert_eq!(h.run(&["STRLEN", "l"]), wrong);
        assert_eq!(h.run(&["TYPE", "l"]), Frame::Simple("list".into()));
        assert_eq!(h.run(&["SET", "l", "now a string"]), Frame::ok());
        assert_eq!(h.run(&["GET", "l"]), bulk("now a string"));
        assert_eq!(h.run(&["LLEN", "l"]), wrong);
    }
}
