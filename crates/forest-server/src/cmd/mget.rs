//! MGET key [key ...].

use super::Ctx;
use crate::frame::Frame;

pub fn mget(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    Frame::Array(argv[1..].iter().map(|k| ctx.get_reply(k)).collect())
}
