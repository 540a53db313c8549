//! INCR, DECR, INCRBY, DECRBY: atomic per key through the batch's read-modify-write, on
//! values that are decimal 64-bit integers (Redis's strict syntax and its error texts).

use forest_store::Rmw;

use super::{coll, int_arg, not_an_integer, Ctx, Reply};
use crate::frame::Frame;
use crate::parse::parse_int;

/// Adds `delta` to the integer at `key` (absent = 0) and replies with the result.
fn add(ctx: &mut Ctx<'_, '_>, key: &[u8], delta: i64) -> Reply {
    let _guard = coll::string_write(ctx, key)?;
    let mut outcome: Result<i64, Frame> = Err(not_an_integer());
    ctx.read_modify_write(key, |old| {
        let current = match old {
            None => Some(0),
            Some(bytes) => parse_int(bytes),
        };
        outcome = match current {
            None => Err(not_an_integer()),
            Some(n) => n
                .checked_add(delta)
                .ok_or_else(|| Frame::err("increment or decrement would overflow")),
        };
        Ok(match &outcome {
            Ok(n) => Rmw::Put(n.to_string().into_bytes()),
            Err(_) => Rmw::Keep,
        })
    })?;
    outcome.map(Frame::Integer)
}

pub fn incr(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    add(ctx, argv[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    add(ctx, argv[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    add(ctx, argv[1], int_arg(argv[2])?)
}

pub fn decrby(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match int_arg(argv[2])? {
        i64::MIN => Err(Frame::err("decrement would overflow")),
        delta => add(ctx, argv[1], -delta),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: the INCR family counts, refuses non-integers and overflow with Redis's texts,
    // and leaves the value unchanged on error.
    // Method: count from absent, hit both i64 ends, corrupt the value.
    #[test]
    fn counters() {
        let mut h = Harness::new();
        let not_int = Frame::Error("ERR value is not an integer or out of range".into());
        let overflow = Frame::Error("ERR increment or decrement would overflow".into());
        assert_eq!(h.run(&["INCR", "n"]), Frame::Integer(1));
        assert_eq!(h.run(&["INCRBY", "n", "41"]), Frame::Integer(42));
        assert_eq!(h.run(&["DECR", "n"]), Frame::Integer(41));
        assert_eq!(h.run(&["DECRBY", "n", "50"]), Frame::Integer(-9));
        assert_eq!(h.run(&["GET", "n"]), bulk("-9"));
        assert_eq!(h.run(&["INCRBY", "n", "x"]), not_int);
        assert_eq!(h.run(&["INCRBY", "n", "+1"]), not_int);
        h.run(&["SET", "m", "9223372036854775807"]);
        assert_eq!(h.run(&["INCR", "m"]), overflow);
        assert_eq!(h.run(&["GET", "m"]), bulk("9223372036854775807"));
        h.run(&["SET", "m", "-9223372036854775808"]);
        assert_eq!(h.run(&["DECR", "m"]), overflow);
        assert_eq!(
            h.run(&["DECRBY", "m", "-9223372036854775808"]),
            Frame::Error("ERR decrement would overflow".into())
        );
        for bad in ["abc", " 1", "1.5", "", "01"] {
            h.run(&["SET", "s", bad]);
            assert_eq!(h.run(&["INCR", "s"]), not_int, "{bad:?}");
            assert_eq!(h.run(&["GET", "s"]), bulk(bad));
        }
    }
}
