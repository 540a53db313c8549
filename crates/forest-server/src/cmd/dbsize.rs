//! DBSIZE: the number of keys: the engine's entry count, less the reserved entries of
//! the collections, plus one per collection.

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Strings and collections, each counted once.
pub fn key_count(shared: &crate::server::Shared) -> i64 {
    let entries = shared.store.stats().index.key_count as i64;
    let collections = &shared.collections;
    (entries - collections.reserved_count()).max(0) + collections.live_count()
}

pub fn dbsize(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    // Inside EXEC: with the transaction's own writes.
    Ok(Frame::Integer(
        key_count(ctx.shared) + super::multi::pending_entries(ctx),
    ))
}
