//! TYPE: what tools ask of a key (redis-cli --bigkeys, client libraries). An expired key
//! is "none". TTL and PTTL are in `expire.rs`.

use super::{coll, Ctx, Reply};
use crate::frame::Frame;

/// The key's type name, or "none".
fn type_name(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<&'static str, Frame> {
    if ctx.string_present(key) {
        return Ok("string");
    }
    Ok(coll::kind_of(ctx, key)?.map_or("none", |k| k.name()))
}

pub fn type_(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    Ok(Frame::Simple(type_name(ctx, argv[1])?.into()))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: TYPE/TTL/PTTL answer as for a Redis string without a deadline.
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
