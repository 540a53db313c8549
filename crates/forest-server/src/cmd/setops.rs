//! Set commands that write over several keys (docs/PROTOCOL.md "Sets"): SMOVE, SINTERSTORE,
//! SUNIONSTORE, SDIFFSTORE. Each is one atomic unit under the stripe locks of all its keys
//! ([`coll::write_many`]): SMOVE's member is in its source or its destination, never both or
//! neither, for every reader and after a crash. A STORE form computes its result first (the
//! destination may be a source), then replaces the destination whatever it held, without a
//! deadline, or deletes it for an empty result, as Redis.

use super::coll;
use super::sets::{difference, intersection, union};
use super::{Ctx, Reply};
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;

/// SMOVE source destination member: 1 if moved, 0 if the member (or the source) is not
/// there; WRONGTYPE, nothing moved, if either key holds another type (a missing source is 0
/// whatever the destination holds, as Redis). The same set as both: 1 if the member is in it.
pub fn smove(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (src, dst, member) = (argv[1], argv[2], argv[3]);
    let (src_key, dst_key) = (
        member_key(&member_prefix(src), &[member]),
        member_key(&member_prefix(dst), &[member]),
    );
    coll::check_member(&dst_key, b"")?;
    coll::write_many(ctx, &[src, dst], |ctx, many| {
        let Some(source) = many.existing(ctx, src, Kind::Set)? else {
            return Ok(Frame::Integer(0));
        };
        let target = many.open(ctx, dst, Kind::Set)?;
        if source == target {
            return Ok(Frame::Integer(i64::from(ctx.present(&src_key))));
        }
        if !coll::remove_member(ctx, &src_key)? {
            return Ok(Frame::Integer(0));
        }
        let meta = many.meta(source);
        meta.count = meta.count.saturating_sub(1);
        if coll::insert_member(ctx, &dst_key, b"")? {
            let meta = many.meta(target);
            meta.count = meta.count.saturating_add(1);
        }
        Ok(Frame::Integer(1))
    })
}

type Combine = fn(&mut Ctx<'_, '_>, &[&[u8]]) -> Result<Vec<Vec<u8>>, Frame>;

/// `destination key [key ...]`: stores what `combine` makes of the keys in `destination`;
/// replies with its size.
fn store(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], combine: Combine) -> Reply {
    let (dst, keys) = (argv[1], &argv[2..]);
    coll::write_many(ctx, &argv[1..], |ctx, many| {
        let members = combine(ctx, keys)?;
        let prefix = member_prefix(dst);
        // Checked before the destination is touched: a member that fits under a source's
        // shorter name may not fit under `dst`.
        for member in &members {
            coll::check_member(&member_key(&prefix, &[member]), b"")?;
        }
        let slot = many.replace(ctx, dst, Kind::Set)?;
        for member in &members {
            if coll::put_member(ctx, &member_key(&prefix, &[member]), b"")? {
                let meta = many.meta(slot);
                meta.count = meta.count.saturating_add(1);
            }
        }
        Ok(Frame::Integer(members.len() as i64))
    })
}

/// SINTERSTORE destination key [key ...]: the size of the intersection stored.
pub fn sinterstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store(ctx, argv, |ctx, keys| intersection(ctx, keys, 0))
}

/// SUNIONSTORE destination key [key ...]: the size of the union stored.
pub fn sunionstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store(ctx, argv, union)
}

/// SDIFFSTORE destination key [key ...]: the size of the difference stored.
pub fn sdiffstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store(ctx, argv, difference)
}
