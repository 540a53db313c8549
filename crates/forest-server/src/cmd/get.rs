//! GET key. A miss looks for a collection of that name (only while any exists) to answer
//! WRONGTYPE as Redis does; a hit costs nothing more.

use super::{coll, Ctx, Reply};
use crate::frame::{encode_bulk, Frame};

pub fn get(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match ctx.get_reply(argv[1]) {
        Frame::Null => match coll::kind_of(ctx, argv[1])? {
            None => Ok(Frame::Null),
            Some(_) => Err(coll::wrongtype()),
        },
        reply => Ok(reply),
    }
}

/// GET with its reply written straight into the connection's output (`cmd::Encoder`): the
/// bytes `get`'s reply encodes to, without building a `Frame` or matching on it to encode
/// and recycle it (the value is still read into a pooled buffer and copied out; issue 15,
/// session 19: counted in instructions, most of a pipelined GET's server work is such
/// overhead around the store's read).
pub(crate) fn get_into(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), Frame> {
    let mut value = ctx.buffers.take();
    let found = ctx.read(argv[1], &mut value);
    if found {
        encode_bulk(out, &value);
    }
    ctx.buffers.give(value);
    if !found {
        if coll::kind_of(ctx, argv[1])?.is_some() {
            return Err(coll::wrongtype());
        }
        Frame::Null.encode_to(ctx.client.protocol, out);
    }
    Ok(())
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

    // Goal: GET's encoder writes the bytes `get`'s reply encodes to, in RESP2 and RESP3: a
    // value (binary, empty), a missing key, a collection (WRONGTYPE), a key with a deadline
    // before and after it passed, and inside MULTI (QUEUED, then EXEC's array).
    // Method: each case through `run_into` against `run`'s reply encoded, the clock frozen.
    #[test]
    fn get_into_matches_get() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run_bytes(&[b"SET", b"bin", b"\x00\r\n\xff"]);
        h.run(&["SET", "empty", ""]);
        h.run(&["RPUSH", "list", "a"]);
        h.run(&["SET", "timed", "v", "PX", "1000"]);
        let check = |h: &mut Harness, argv: &[&str]| {
            for protocol in [crate::frame::Protocol::Resp2, crate::frame::Protocol::Resp3] {
                h.client.protocol = protocol;
                let mut expected = Vec::new();
                h.run(argv).encode_to(protocol, &mut expected);
                assert_eq!(h.run_into(argv), expected, "{argv:?} {protocol:?}");
            }
        };
        for key in ["bin", "empty", "nope", "list", "timed"] {
            check(&mut h, &["GET", key]);
        }
        assert_eq!(h.run_into(&["GET", "timed"]), b"$1\r\nv\r\n");
        h.shared.expires.advance_clock_ms(2000);
        check(&mut h, &["GET", "timed"]);
        h.client.protocol = crate::frame::Protocol::Resp2;
        assert_eq!(h.run_into(&["MULTI"]), b"+OK\r\n");
        assert_eq!(h.run_into(&["GET", "empty"]), b"+QUEUED\r\n");
        assert_eq!(h.run_into(&["EXEC"]), b"*1\r\n$0\r\n\r\n");
    }
}
