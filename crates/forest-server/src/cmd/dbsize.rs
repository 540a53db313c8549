//! DBSIZE: the number of keys: the engine's entry count, less the reserved entries (the
//! collections' and the deadline index's), plus one per collection, less the keys whose
//! deadline has passed but that are not deleted yet.

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Strings and collections, each counted once.
pub fn key_count(shared: &crate::server::Shared) -> i64 {
    let entries = shared.store.stats().index.key_count as i64;
    let collections = &shared.collections;
    let due = shared.expires.due_count(&shared.store);
    ((entries - collections.reserved_count()).max(0) + collections.live_count() - due).max(0)
}

pub fn dbsize(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    Ok(Frame::Integer(key_count(ctx.shared)))
}
