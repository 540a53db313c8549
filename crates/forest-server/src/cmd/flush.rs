//! FLUSHDB and FLUSHALL [ASYNC|SYNC]: remove every key through the batch (logged like any
//! removal, so a crash never brings back part of what was flushed after the reply):
//! the string keys, then each collection with its members.

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::{coll, is_word, syntax_error, Ctx, Reply};
use crate::collection::{MEMBER_TAG, RESERVED_BYTE, TYPE_TAG};
use crate::frame::Frame;

/// Keys collected per scan before they are removed: bounds the memory of a flush.
const FLUSH_CHUNK_COUNT: usize = 1024;

/// Removes every key within the bounds through the batch; returns how many were removed.
pub fn remove_range(
    ctx: &mut Ctx<'_, '_>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
) -> Result<i64, Frame> {
    let mut removed = 0;
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let mut chunk: Vec<Vec<u8>> = Vec::new();
        let from = match &resume {
            Some(key) => Bound::Excluded(key.as_slice()),
            None => lower,
        };
        ctx.scan(from, upper, Order::Ascending, &mut |key, _| {
            chunk.push(key.to_vec());
            if chunk.len() >= FLUSH_CHUNK_COUNT {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let full = chunk.len() >= FLUSH_CHUNK_COUNT;
        let shared = ctx.shared;
        for key in &chunk {
            // The key's stripe, as every write holds: EXEC and WATCH rely on it.
            let _guard = shared.collections.lock(key);
            if ctx.remove(key)? {
                removed += 1;
            }
        }
        match chunk.pop() {
            Some(last) if full => resume = Some(last),
            _ => return Ok(removed),
        }
    }
}

pub fn flushdb(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match argv {
        [_] => {}
        [_, mode] if is_word(mode, "async") || is_word(mode, "sync") => {}
        _ => return Err(syntax_error()),
    }
    // Every stripe for the whole flush (re-entrant: EXEC and scripts hold them already):
    // a write landing between the removal of `FF 'x'` and the clearing of the deadline map
    // would leave a string at `FF 'x'` the map does not know (review F1).
    let shared = ctx.shared;
    let _guards = shared.collections.lock_all();
    let strings_end = [RESERVED_BYTE];
    remove_range(ctx, Bound::Unbounded, Bound::Excluded(&strings_end))?;
    remove_collections(ctx)?;
    super::expire::flush_index(ctx)?;
    Ok(Frame::ok())
}

/// Removes every collection, each under its stripe lock (so the counts stay exact beside
/// concurrent collection writes), a chunk of names at a time; then any member entries left
/// without a type entry (none unless a crash fell between a collection's writes, which
/// share a batch but are not one atomic unit).
fn remove_collections(ctx: &mut Ctx<'_, '_>) -> Result<(), Frame> {
    let types_start = [RESERVED_BYTE, TYPE_TAG];
    let types_end = [RESERVED_BYTE, TYPE_TAG + 1];
    loop {
        let mut names: Vec<Vec<u8>> = Vec::new();
        ctx.scan(
            Bound::Included(&types_start),
            Bound::Excluded(&types_end),
            Order::Ascending,
            &mut |key, _| {
                names.push(key[types_start.len()..].to_vec());
                if names.len() >= FLUSH_CHUNK_COUNT {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
        if names.is_empty() {
            break;
        }
        let shared = ctx.shared;
        for name in &names {
            let _guard = shared.collections.lock(name);
            // Removes the type entry whatever it holds, so the loop makes progress.
            coll::delete_locked(ctx, name)?;
        }
    }
    let members_start = [RESERVED_BYTE, MEMBER_TAG];
    let members_end = [RESERVED_BYTE, MEMBER_TAG + 1];
    let removed = remove_range(
        ctx,
        Bound::Included(&members_start),
        Bound::Excluded(&members_end),
    )?;
    ctx.shared.collections.add_reserved(-removed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: FLUSHDB and FLUSHALL empty the store, past one chunk of keys.
    // Method: more keys than a chunk, flush, count.
    #[test]
    fn flush_removes_everything() {
        let mut h = Harness::new();
        for i in 0..(super::FLUSH_CHUNK_COUNT + 5) {
            h.run(&["SET", &format!("k{i}"), "v"]);
        }
        assert_eq!(h.run(&["FLUSHDB"]), Frame::ok());
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        h.run(&["SET", "a", "1"]);
        assert_eq!(h.run(&["FLUSHALL", "ASYNC"]), Frame::ok());
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["FLUSHALL", "x"]),
            Frame::Error("ERR syntax error".into())
        );
    }
}
