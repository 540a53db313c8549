//! TYPE, TTL, PTTL: what tools ask of a key (redis-cli --bigkeys, client libraries). No
//! key expires.

use super::{coll, Ctx, Reply};
use crate::frame::Frame;

/// The key's type name, or "none".
fn type_name(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<&'static str, Frame> {
    if ctx.present(key) {
        return Ok("string");
    }
    Ok(coll::kind_of(ctx, key)?.map_or("none", |k| k.name()))
}

pub fn type_(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    Ok(Frame::Simple(type_name(ctx, argv[1])?.into()))
}

/// TTL and PTTL: -1 (no expiry) for a key, -2 for a missing one.
pub fn ttl(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match type_name(ctx, argv[1])? {
        "none" => Ok(Frame::Integer(-2)),
        _ => Ok(Frame::Integer(-1)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: TYPE/TTL/PTTL answer as for a Redis string without expiry.
    // Method: a present and a missing key.
    #[test]
    fn key_types() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["TYPE", "k"]), Frame::Simple("string".into()));
        assert_eq!(h.run(&["TYPE", "x"]), Frame::Simple("none".into()));
        assert_eq!(h.run(&["TTL", "k"]), Frame::Integer(-1));
        assert_eq!(h.run(&["PTTL", "x"]), Frame::Integer(-2));
    }
}
