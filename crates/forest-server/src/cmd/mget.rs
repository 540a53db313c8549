//! MGET key [key ...].

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Reads of all keys that miss one while a string moves, before MGET reads them under
/// `Store::read_consistent`.
const MGET_RETRIES: usize = 8;

/// Reads all keys at one moment with respect to atomic batches (`Store::get_many`): an
/// MSET is seen whole or not at all (a read that may have missed a moving key is redone
/// whole).
pub fn mget(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let keys = &argv[1..];
    if ctx.unit.is_some() {
        // Inside EXEC: the transaction's own writes first.
        return Ok(Frame::Array(
            keys.iter().map(|k| ctx.get_reply(k)).collect(),
        ));
    }
    let now = ctx.now_ms();
    let expires = &ctx.shared.expires;
    for _ in 0..MGET_RETRIES {
        let mut replies = vec![Frame::Null; keys.len()];
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
        let mut missed = false;
        let buffers = &mut ctx.buffers;
        let read = ctx.shared.store.try_get_many(&lookups, &mut |i, value| {
            let value = match (value, places[i].is_some()) {
                (None, _) => {
                    missed = true;
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
        // A page that cannot be read is the reply (review rev-lstore F3), never a nil.
        read.map_err(|e| super::storage_read_error(&e.to_string()))?;
        if !missed || !expires.moved_since(ended) {
            return Ok(Frame::Array(replies));
        }
        // A string moved between its places meanwhile, so a miss may be a key read in the
        // place it just left: read all keys again, not the missed ones alone, which could
        // pair a later MSET's value with the others' older ones (review F3).
    }
    // Moves keep coming: read every key in both places with atomic batches (every move is
    // one) held off, so that the reads see one moment.
    let store = &ctx.shared.store;
    let buffers = &mut ctx.buffers;
    let replies = store.read_consistent(|| {
        keys.iter()
            .map(|k| {
                let mut out = buffers.take();
                if store.try_get(k, &mut out)? {
                    return Ok(Frame::Bulk(out));
                }
                let timed = store.try_get(&crate::expiry::string_key(k), &mut out)?;
                Ok(
                    match timed
                        .then(|| crate::expiry::strip_deadline(&mut out))
                        .flatten()
                    {
                        Some(deadline) if deadline > now => Frame::Bulk(out),
                        _ => Frame::Null,
                    },
                )
            })
            .collect::<forest_core::Result<Vec<Frame>>>()
    });
    let replies = replies.map_err(|e| super::storage_read_error(&e.to_string()))?;
    Ok(Frame::Array(replies))
}
