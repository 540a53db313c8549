//! MGET key [key ...].

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Reads all keys at one moment with respect to atomic batches (`Store::get_many`): an
/// MSET is seen whole or not at all.
pub fn mget(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let keys = &argv[1..];
    if ctx.unit.is_some() {
        // Inside EXEC: the transaction's own writes first.
        return Ok(Frame::Array(
            keys.iter().map(|k| ctx.get_reply(k)).collect(),
        ));
    }
    let mut replies = vec![Frame::Null; keys.len()];
    let buffers = &mut ctx.buffers;
    // Deadlines before values (see `expiry`'s invariants).
    let due: Vec<bool> = keys.iter().map(|k| ctx.shared.expires.is_due(k)).collect();
    ctx.shared.store.get_many(keys, &mut |i, value| {
        if let Some(value) = value.filter(|_| !due[i]) {
            let mut buffer = buffers.take();
            buffer.extend_from_slice(value);
            replies[i] = Frame::Bulk(buffer);
        }
    });
    Ok(Frame::Array(replies))
}
