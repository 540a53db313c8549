//! DBSIZE: the number of keys: the engine's entry count, less the reserved entries of
//! the collections, plus one per collection.

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Strings and collections, each counted once.
pub fn key_count(shared: &crate::server::Shared) -> i64 {
    count_with(shared, 0)
}

/// [`key_count`] with `pending` more store entries (EXEC's decided writes: the collection
/// counts already include them).
fn count_with(shared: &crate::server::Shared, pending: i64) -> i64 {
    // Between batches (the scan gate), so an atomic batch that removes one key and adds
    // another (an EXEC) is never counted half applied.
    let store = &shared.store;
    let entries = store.read_consistent(|| store.stats().index.key_count) as i64 + pending;
    let collections = &shared.collections;
    (entries - collections.reserved_count()).max(0) + collections.live_count()
}

pub fn dbsize(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    // Inside EXEC: with the transaction's own writes.
    let pending = super::multi::pending_entries(ctx);
    Ok(Frame::Integer(count_with(ctx.shared, pending)))
}
