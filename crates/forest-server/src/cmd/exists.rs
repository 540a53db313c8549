//! EXISTS key [key ...]: how many of the keys exist, strings or collections (a repeated
//! key counts each time).

use super::{coll, Ctx, Reply};
use crate::frame::Frame;

pub fn exists(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let mut count = 0;
    for key in &argv[1..] {
        if ctx.string_present(key) {
            count += 1;
            continue;
        }
        if coll::kind_of(ctx, key)?.is_some() {
            count += 1;
        }
    }
    Ok(Frame::Integer(count))
}
