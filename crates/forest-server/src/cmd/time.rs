//! TIME: the server's clock as [seconds, microseconds].

use super::{Ctx, Reply};
use crate::frame::Frame;

pub fn time(_ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    let micros = crate::server::unix_nanos() / 1000;
    Ok(Frame::Array(vec![
        Frame::bulk((micros / 1_000_000).to_string()),
        Frame::bulk((micros % 1_000_000).to_string()),
    ]))
}
