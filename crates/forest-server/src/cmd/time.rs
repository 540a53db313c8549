//! TIME: the server's clock as [seconds, microseconds].

use super::Ctx;
use crate::frame::Frame;

pub fn time(_ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Frame {
    let micros = crate::server::unix_nanos() / 1000;
    Frame::Array(vec![
        Frame::bulk((micros / 1_000_000).to_string()),
        Frame::bulk((micros % 1_000_000).to_string()),
    ])
}
