//! EXISTS key [key ...]: how many of the keys exist, strings or collections (a repeated
//! key counts each time).

use super::{coll, Ctx};
use crate::frame::Frame;

pub fn exists(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let mut count = 0;
    for key in &argv[1..] {
        if ctx.shared.store.get(key, &mut ctx.buffers.scratch) {
            count += 1;
            continue;
        }
        match coll::kind_of(ctx, key) {
            Ok(Some(_)) => count += 1,
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    Frame::Integer(count)
}
