//! MGET key [key ...].

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Reads all keys at one moment with respect to atomic batches (`Store::get_many`): an
/// MSET is seen whole or not at all (a key read again after a move is read alone).
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
    let expires = &ctx.shared.expires;
    // Each key where it lives (`crate::expiry`'s layout): a string with a deadline at
    // `FF 'x'`, its deadline in its value.
    let ended = expires.moves_ended();
    let places: Vec<Option<Vec<u8>>> = keys
        .iter()
        .map(|k| expires.deadline(k).map(|_| crate::expiry::string_key(k)))
        .collect();
    let lookups: Vec<&[u8]> = keys
        .iter()
        .zip(&places)
        .map(|(k, p)| p.as_deref().unwrap_or(k))
        .collect();
    let now = expires.now_ms();
    let mut missed = Vec::new();
    ctx.shared.store.get_many(&lookups, &mut |i, value| {
        let value = match (value, places[i].is_some()) {
            (None, _) => {
                missed.push(i);
                return;
            }
            (Some(v), false) => v,
            (Some(stored), true) => match crate::expiry::decode_string(stored) {
                Some((deadline, v)) if deadline > now => v,
                _ => return,
            },
        };
        let mut buffer = buffers.take();
        buffer.extend_from_slice(value);
        replies[i] = Frame::Bulk(buffer);
    });
    if !missed.is_empty() && expires.moved_since(ended) {
        // A string moved between its places meanwhile: read the missed ones again.
        for i in missed {
            replies[i] = ctx.get_reply(keys[i]);
        }
    }
    Ok(Frame::Array(replies))
}
