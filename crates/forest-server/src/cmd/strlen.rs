//! STRLEN key.

use super::{coll, Ctx};
use crate::frame::Frame;

pub fn strlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    if ctx.shared.store.get(argv[1], &mut ctx.buffers.scratch) {
        return Frame::Integer(ctx.buffers.scratch.len() as i64);
    }
    match coll::kind_of(ctx, argv[1]) {
        Ok(None) => Frame::Integer(0),
        Ok(Some(_)) => coll::wrongtype(),
        Err(e) => e,
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
