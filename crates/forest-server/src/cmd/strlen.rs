//! STRLEN key.

use super::{coll, Ctx, Reply};
use crate::frame::Frame;

pub fn strlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if ctx.string_present(argv[1]) {
        return Ok(Frame::Integer(ctx.buffers.scratch.len() as i64));
    }
    match coll::kind_of(ctx, argv[1])? {
        None => Ok(Frame::Integer(0)),
        Some(_) => Err(coll::wrongtype()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: STRLEN counts bytes, 0 for a missing key.
    // Method: a multi-byte UTF-8 value and a missing key.
    #[test]
    fn strlen_counts_bytes() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "héllo"]);
        assert_eq!(h.run(&["STRLEN", "k"]), Frame::Integer(6));
        assert_eq!(h.run(&["STRLEN", "none"]), Frame::Integer(0));
    }
}
