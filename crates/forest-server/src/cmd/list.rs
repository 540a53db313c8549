//! Lists: LPUSH, RPUSH, LPOP, RPOP, LRANGE, LLEN, LINDEX (docs/PROTOCOL.md "Lists").
//!
//! A list is the members `head..tail` of its key ([`crate::collection`]): LPUSH stores at
//! `head - 1`, RPUSH at `tail`, so element `i` is at sequence `head + i` and LINDEX and
//! LRANGE are one lookup or one range scan. Every command holds the key's stripe lock.

use std::ops::Bound;

use forest_core::Order;

use super::coll::{self, null_array};
use super::{int_arg, Ctx};
use crate::collection::{member_key, member_prefix, seq_bytes, Kind};
use crate::frame::Frame;

fn push(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], left: bool) -> Frame {
    let user = argv[1];
    let prefix = member_prefix(user);
    for element in &argv[2..] {
        if let Err(e) = coll::check_member(&member_key(&prefix, &[&[0; 8]]), element) {
            return e;
        }
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let mut open = match coll::open_write(ctx, user, Kind::List) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut result = Ok(());
    for element in &argv[2..] {
        let seq = if left {
            open.meta.a.checked_sub(1)
        } else {
            Some(open.meta.b)
        };
        let Some(seq) = seq.filter(|s| *s < i64::MAX) else {
            result = Err(Frame::err("list sequence numbers exhausted"));
            break;
        };
        if let Err(e) = coll::put_member(ctx, &member_key(&prefix, &[&seq_bytes(seq)]), element) {
            result = Err(e);
            break;
        }
        if left {
            open.meta.a = seq;
        } else {
            open.meta.b = seq + 1;
        }
        open.meta.count = open.meta.count.saturating_add(1);
    }
    let len = open.meta.count;
    if let Err(e) = coll::finish(ctx, user, open) {
        return e;
    }
    match result {
        Ok(()) => Frame::Integer(len as i64),
        Err(e) => e,
    }
}

/// LPUSH key element [element ...]: the new length.
pub fn lpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    push(ctx, argv, true)
}

/// RPUSH key element [element ...]: the new length.
pub fn rpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    push(ctx, argv, false)
}

fn pop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], left: bool) -> Frame {
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
    let meta = match coll::open_read(ctx, user, Kind::List) {
        Ok(Some(m)) => m,
        Ok(None) if count.is_some() => return null_array(ctx),
        Ok(None) => return Frame::Null,
        Err(e) => return e,
    };
    let mut open = match coll::open_write(ctx, user, Kind::List) {
        Ok(o) => o,
        Err(e) => return e,
    };
    debug_assert_eq!(open.meta, meta);
    let prefix = member_prefix(user);
    let want = count.unwrap_or(1).min(open.meta.count);
    let mut keys = Vec::new();
    let mut popped = Vec::new();
    for _ in 0..want {
        let seq = if left {
            open.meta.a
        } else {
            open.meta.b.saturating_sub(1)
        };
        let key = member_key(&prefix, &[&seq_bytes(seq)]);
        let mut value = Vec::new();
        // Members head..tail always exist; only a type entry written by hand under the
        // reserved byte could say otherwise, and then the hole is skipped.
        let present = ctx.read(&key, &mut value);
        if left {
            open.meta.a = open.meta.a.saturating_add(1);
        } else {
            open.meta.b = open.meta.b.saturating_sub(1);
        }
        open.meta.count = open.meta.count.saturating_sub(1);
        if present {
            keys.push(key);
            popped.push(Frame::Bulk(value));
        }
    }
    // The members' removal and the new metadata are one batch (`finish` writes the unit).
    for key in &keys {
        if let Err(e) = coll::remove_member(ctx, key) {
            return e;
        }
    }
    if let Err(e) = coll::finish(ctx, user, open) {
        return e;
    }
    match count {
        Some(_) => Frame::Array(popped),
        None => popped.pop().unwrap_or(Frame::Null),
    }
}

/// LPOP key [count].
pub fn lpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    pop(ctx, argv, true)
}

/// RPOP key [count].
pub fn rpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    pop(ctx, argv, false)
}

/// LRANGE key start stop.
pub fn lrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    let (start, stop) = match (int_arg(argv[2]), int_arg(argv[3])) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let meta = match coll::open_read(ctx, user, Kind::List) {
        Ok(Some(m)) => m,
        Ok(None) => return Frame::Array(vec![]),
        Err(e) => return e,
    };
    let Some((first, last)) = coll::index_range(start, stop, meta.count) else {
        return Frame::Array(vec![]);
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
    Frame::Array(entries.into_iter().map(|(_, v)| Frame::Bulk(v)).collect())
}

/// LLEN key.
pub fn llen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    match coll::open_read(ctx, argv[1], Kind::List) {
        Ok(meta) => Frame::Integer(meta.map_or(0, |m| m.count as i64)),
        Err(e) => e,
    }
}

/// LINDEX key index.
pub fn lindex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let user = argv[1];
    let index = match int_arg(argv[2]) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let meta = match coll::open_read(ctx, user, Kind::List) {
        Ok(Some(m)) => m,
        Ok(None) => return Frame::Null,
        Err(e) => return e,
    };
    let Some((i, _)) = coll::index_range(index, index, meta.count) else {
        return Frame::Null;
    };
    let key = member_key(
        &member_prefix(user),
        &[&seq_bytes(meta.a.saturating_add(i as i64))],
    );
    let mut value = Vec::new();
    if ctx.read(&key, &mut value) {
        Frame::Bulk(value)
    } else {
        Frame::Null
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
