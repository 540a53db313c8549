//! DBSIZE: the number of keys: the engine's entry count, less the reserved entries (the
//! collections', the deadline index's and the server's key layout entry), plus one per collection, less the keys whose
//! deadline has passed but that are not deleted yet.

use super::{Ctx, Reply};
use crate::frame::Frame;

/// Strings and collections, each counted once.
/// The counts move at different moments of a write (the server's when it is decided, the
/// engine's when it applies); a few tries look for two reads that agree, since the background
/// deletion of expired keys writes while clients read.
pub fn key_count(shared: &crate::server::Shared) -> i64 {
    count_with(shared, 0)
}

/// [`key_count`] with `pending` more store entries (EXEC's decided writes: the collection
/// counts already include them).
fn count_with(shared: &crate::server::Shared, pending: i64) -> i64 {
    /// Reads of the counts at most.
    const TRIES_MAX: usize = 4;
    let read = || {
        let store = &shared.store;
        let collections = &shared.collections;
        (
            // Between batches (the scan gate), so an atomic batch that removes one key and
            // adds another (an EXEC) is never counted half applied.
            store.read_consistent(|| store.stats().index.key_count) as i64,
            collections.reserved_count() + collections.server_entries(),
            collections.live_count(),
            shared.expires.due_count(),
        )
    };
    let mut counts = read();
    for _ in 1..TRIES_MAX {
        let again = read();
        if again == counts {
            break;
        }
        counts = again;
    }
    let (entries, reserved, live, due) = counts;
    ((entries + pending - reserved).max(0) + live - due).max(0)
}

pub fn dbsize(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    // Inside EXEC: with the transaction's own writes.
    let pending = super::multi::pending_entries(ctx);
    Ok(Frame::Integer(count_with(ctx.shared, pending)))
}
