//! GET key. A miss looks for a collection of that name (only while any exists) to answer
//! WRONGTYPE as Redis does; a hit costs nothing more.

use super::{coll, Ctx, Reply};
use crate::frame::Frame;

pub fn get(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match ctx.get_reply(argv[1]) {
        Frame::Null => match coll::kind_of(ctx, argv[1])? {
            None => Ok(Frame::Null),
            Some(_) => Err(coll::wrongtype()),
        },
        reply => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: GET returns the value or null, binary-safe.
    // Method: set a binary value and read it back; read a missing key.
    #[test]
    fn get_values() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);
        h.run_bytes(&[b"SET", b"k", b"\x00\r\n\xff"]);
        assert_eq!(h.run(&["GET", "k"]), Frame::bulk(&b"\x00\r\n\xff"[..]));
        assert_eq!(h.run(&["GET", ""]), Frame::Null);
    }
}
