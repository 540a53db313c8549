//! What every collection command shares ([`crate::collection`] has the layout): type
//! checks with Redis's WRONGTYPE, creation and removal of type entries with the counts kept
//! exact, member writes through the connection's batch, and removal of a whole collection.
//!
//! Every command that changes a collection's members goes through [`write`] (or
//! [`write_existing`]), which owns the sequence that makes it atomic: the key's stripe
//! lock, [`open_write`] (which begins the command's unit, [`Ctx::unit`]), the handler's
//! changes, and [`finish`] (which writes the unit as one batch while the lock is held). So
//! a handler states only what it changes, and none can drop the lock before its unit is
//! written or forget to keep the counts.

use std::ops::{Bound, ControlFlow};

use forest_core::{check_entry, Order};
use forest_store::Rmw;

mod many;
pub use many::{check_keys, write_many, Many};

use super::{store_error, Ctx, Reply};
use crate::collection::{member_prefix, type_key, Kind, Meta};
use crate::frame::Frame;
use crate::server::Shared;

/// Redis's error for a command on a key of another type.
pub fn wrongtype() -> Frame {
    Frame::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// The error for a user key in forest's reserved range.
pub fn reserved_key() -> Frame {
    Frame::err("keys beginning with byte 0xff are reserved by forest")
}

fn corrupt(user: &[u8]) -> Frame {
    Frame::err(format!(
        "collection metadata of '{}' is damaged",
        super::printable(user, 64)
    ))
}

/// The type entry of `user`, if any and not expired.
pub fn read_meta(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<Option<Meta>, Frame> {
    if ctx.is_due(user) {
        return Ok(None);
    }
    if let Some(meta) = cached_meta(ctx, user) {
        return Ok(Some(meta));
    }
    read_meta_raw(ctx, user)
}

/// `user`'s type entry from the meta cache, if known and the running command's unit decided
/// nothing for it (its own writes come first): the cache equals the store
/// (`crate::meta_cache`).
fn cached_meta(ctx: &Ctx<'_, '_>, user: &[u8]) -> Option<Meta> {
    if let Some(unit) = &ctx.unit {
        if !unit.overlay.is_empty() && unit.overlay.contains_key(type_key(user).as_slice()) {
            return None;
        }
    }
    ctx.shared.collections.cached_meta(user)
}

/// The type entry of `user`, expired or not (deletions).
fn read_meta_raw(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<Option<Meta>, Frame> {
    let key = type_key(user);
    let mut scratch = std::mem::take(&mut ctx.buffers.scratch);
    let present = ctx.read(&key, &mut scratch);
    ctx.buffers.scratch = scratch;
    if !present {
        return Ok(None);
    }
    Meta::decode(&ctx.buffers.scratch)
        .map(Some)
        .ok_or_else(|| corrupt(user))
}

/// The type of `user` if it is a collection (a cheap "no" while no collection exists).
pub fn kind_of(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<Option<Kind>, Frame> {
    if !ctx.shared.collections.any() {
        return Ok(None);
    }
    Ok(read_meta(ctx, user)?.map(|m| m.kind))
}

/// `user`'s metadata for a read of a `kind` command: None if the key is absent,
/// WRONGTYPE if it holds a string or another collection.
pub fn open_read(ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Result<Option<Meta>, Frame> {
    match read_meta(ctx, user)? {
        Some(meta) if meta.kind == kind => Ok(Some(meta)),
        Some(_) => Err(wrongtype()),
        None if ctx.present(user) => Err(wrongtype()),
        None => Ok(None),
    }
}

/// Runs a `kind` command's change of collection `user`, creating the collection (in memory
/// only) if absent. `change` gets the collection's metadata to update (the member count as
/// each member is added or removed, a list's ends, a stream's last id) and returns the
/// reply. Under `user`'s stripe lock: [`open_write`] begins the unit, `change` decides its
/// writes, [`finish`] writes the unit. If `change` fails, what it decided before the error
/// is still written (with the metadata as it left it), as one batch, and its error is the
/// reply; if opening fails (WRONGTYPE), nothing is written. The caller must not hold the
/// stripe lock.
pub fn write<'a, 's>(
    ctx: &mut Ctx<'a, 's>,
    user: &[u8],
    kind: Kind,
    change: impl FnOnce(&mut Ctx<'a, 's>, &mut Meta) -> Reply,
) -> Reply {
    let shared: &'a Shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    super::expire::purge_due(ctx, user)?;
    write_locked(ctx, user, kind, change)
}

/// [`write`] for a command that only changes an existing collection (removals, pops):
/// `absent` is the reply for a missing key, and nothing is opened or written for it.
pub fn write_existing<'a, 's>(
    ctx: &mut Ctx<'a, 's>,
    user: &[u8],
    kind: Kind,
    absent: Frame,
    change: impl FnOnce(&mut Ctx<'a, 's>, &mut Meta) -> Reply,
) -> Reply {
    let shared: &'a Shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    super::expire::purge_due(ctx, user)?;
    let Some(seen) = open_read(ctx, user, kind)? else {
        // Absent perhaps because of a write not yet durable (review rev-lists13 F1): the
        // answer waits for it.
        let key = ctx.buffers.concat(&[
            &[
                crate::collection::RESERVED_BYTE,
                crate::collection::TYPE_TAG,
            ],
            user,
        ]);
        ctx.observe(&key);
        ctx.buffers.give(key);
        return Ok(absent);
    };
    // The stripe lock is held since the read: nothing changed the collection, and the
    // command's one "now" keeps its deadline's verdict, so `seen` is what a second read
    // would find.
    ctx.begin_unit();
    let mut open = Open {
        meta: seen,
        existed: true,
        opened: seen,
    };
    let reply = change(ctx, &mut open.meta);
    finish(ctx, user, open)?;
    reply
}

/// [`write`]'s sequence. Precondition: `user`'s stripe lock is held.
fn write_locked<'a, 's>(
    ctx: &mut Ctx<'a, 's>,
    user: &[u8],
    kind: Kind,
    change: impl FnOnce(&mut Ctx<'a, 's>, &mut Meta) -> Reply,
) -> Reply {
    let mut open = open_write(ctx, user, kind)?;
    let reply = change(ctx, &mut open.meta);
    finish(ctx, user, open)?;
    reply
}

/// Runs `change` on each of `items` in turn and moves the member count by `step` (1: added,
/// -1: removed) for each it reports changed (true); replies with how many were. An error
/// stops it with the count moved for the items before it.
pub fn count_changes<'a, 's, T>(
    ctx: &mut Ctx<'a, 's>,
    meta: &mut Meta,
    step: i64,
    items: impl IntoIterator<Item = T>,
    mut change: impl FnMut(&mut Ctx<'a, 's>, T) -> Result<bool, Frame>,
) -> Reply {
    let mut changed = 0u64;
    for item in items {
        if change(ctx, item)? {
            changed += 1;
            meta.count = meta.count.saturating_add_signed(step);
        }
    }
    Ok(Frame::Integer(changed as i64))
}

/// A collection opened for a write; [`finish`] must follow (it keeps the counts exact).
struct Open {
    meta: Meta,
    existed: bool,
    /// The metadata as opened, to skip rewriting an unchanged type entry.
    opened: Meta,
}

/// Opens `user` for a write of a `kind` command, creating it (in memory only) if absent.
/// Precondition: `user`'s stripe lock is held.
fn open_write(ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Result<Open, Frame> {
    // The command's writes, from here to `finish`, are one atomic batch.
    ctx.begin_unit();
    let opened = open_write_in_unit(ctx, user, kind);
    if opened.is_err() {
        // Nothing is written for a command that could not open its collection (the unit
        // could hold the sweep of stray members; harmless to drop).
        ctx.drop_unit();
    }
    opened
}

fn open_write_in_unit(ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Result<Open, Frame> {
    match read_meta(ctx, user)? {
        Some(meta) if meta.kind == kind => Ok(Open {
            meta,
            existed: true,
            opened: meta,
        }),
        Some(_) => Err(wrongtype()),
        None => {
            // Counted before the string check: a SET that reads the count afterwards takes
            // the locked path and sees this collection.
            ctx.shared.collections.add_live(1);
            if ctx.present(user) {
                ctx.shared.collections.add_live(-1);
                return Err(wrongtype());
            }
            // Members left by a crash between a command's entries, or written by hand
            // under the reserved byte, must not join the new collection. An empty range
            // costs one descent.
            if let Err(e) = clear_members(ctx, user) {
                ctx.shared.collections.add_live(-1);
                return Err(e);
            }
            Ok(Open {
                meta: Meta::new(kind),
                existed: false,
                opened: Meta::new(kind),
            })
        }
    }
}

/// Writes `open`'s metadata back: removes the type entry of an emptied collection, keeps
/// the counts exact. Precondition: the stripe lock taken for [`open_write`] is still held.
fn finish(ctx: &mut Ctx<'_, '_>, user: &[u8], open: Open) -> Result<(), Frame> {
    // EXEC's unit is written at EXEC's end, not here: nothing to cache yet.
    let txn = ctx.unit.as_ref().is_some_and(|u| u.txn);
    let meta = open.meta;
    let result = settle(ctx, user, open);
    // The unit is written here, under the caller's stripe lock, whatever happened above.
    let written = ctx.end_unit();
    if result.is_ok() && written.is_ok() && !txn && meta.count > 0 {
        // The store holds `meta` at the type key now, and the lock is still held.
        ctx.shared.collections.cache_meta(user, meta);
    }
    result.and(written)
}

/// [`finish`]'s decisions, into the open unit: the type entry written back or removed, the
/// counts moved. Precondition: `user`'s stripe lock is held and the unit is open.
fn settle(ctx: &mut Ctx<'_, '_>, user: &[u8], open: Open) -> Result<(), Frame> {
    let key = ctx.buffers.concat(&[
        &[
            crate::collection::RESERVED_BYTE,
            crate::collection::TYPE_TAG,
        ],
        user,
    ]);
    let collections = &ctx.shared.collections;
    match (open.meta.count, open.existed) {
        (0, false) => {
            collections.add_live(-1);
            ctx.buffers.give(key);
            Ok(())
        }
        (0, true) => {
            collections.add_live(-1);
            let removed = ctx.remove(&key);
            ctx.buffers.give(key);
            if removed? {
                collections.add_reserved(-1);
            }
            // An emptied collection is deleted, its deadline with it.
            super::expire::stage_deadline(ctx, user, None)
        }
        (_, true)
            if open.meta == open.opened
                && open.meta.kind != Kind::Stream
                && ctx.unit.as_ref().is_some_and(|u| u.overlay().is_empty()) =>
        {
            // A command that changed nothing (SADD of members already there, ZADD of the same
            // score): the entry is not rewritten. The reply waits for the last write under the
            // entry's stripe, which is the last change of this collection only because every
            // change, of members alone too (HSET of a new value, ZADD of a new score, LSET),
            // rewrites the entry (review rev-coll F1: skipping it then let a no-op reply be
            // acknowledged before the change it read was durable). A change of a list always
            // moves an end or the count, so the blocking commands' hook loses nothing; a
            // stream's writes all signal its readers.
            ctx.observe(&key);
            // Back to the pool: a no-op command (SADD of a member already there) takes
            // nothing from it for good, so the next one allocates nothing.
            ctx.buffers.give(key);
            Ok(())
        }
        (_, existed) => {
            // The type key is its own place (no string's deadline applies): decided as is.
            let value = open.meta.encode();
            let result = match ctx.unit.is_some() {
                true => check_member(&key, &value).map(|()| {
                    let value = ctx.buffers.copy_of(&value);
                    ctx.decide_owned(key, Some(value))
                }),
                false => {
                    let upserted = ctx.upsert(&key, &value);
                    ctx.buffers.give(key);
                    upserted
                }
            };
            if result.is_ok() && !existed {
                collections.add_reserved(1);
            } else if result.is_err() && !existed {
                collections.add_live(-1);
            }
            result
        }
    }
}

/// A collection's member count as a reply (HLEN, SCARD, LLEN, ZCARD, XLEN): 0 if absent.
pub fn len(ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Reply {
    let meta = open_read(ctx, user, kind)?;
    Ok(Frame::Integer(meta.map_or(0, |m| m.count as i64)))
}

/// Checks a member entry against the store's limits before anything is written.
pub fn check_member(key: &[u8], value: &[u8]) -> Result<(), Frame> {
    check_entry(key, value).map_err(|e| store_error(&e))
}

/// [`check_member`] of the member key `prefix` + `suffix`, without building it.
pub fn check_member_parts(prefix: &[u8], suffix: &[u8], value: &[u8]) -> Result<(), Frame> {
    let mut key = [0u8; 64];
    let len = prefix.len() + suffix.len();
    if len > key.len() {
        return check_member(&[prefix, suffix].concat(), value);
    }
    key[..prefix.len()].copy_from_slice(prefix);
    key[prefix.len()..len].copy_from_slice(suffix);
    check_member(&key[..len], value)
}

/// Sets a member entry; true if it is new.
pub fn put_member(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
    check_member(key, value)?;
    let old = ctx.read_modify_write(key, |_| Ok(Rmw::Put(value.to_vec())))?;
    let new = old.is_none();
    if new {
        ctx.shared.collections.add_reserved(1);
    }
    Ok(new)
}

/// Sets member entry `key` of collection `user` to `value` (HSET's field); true if it is new.
/// A member that already holds `value` is not rewritten, so a command that changes nothing
/// writes nothing (its reply waits in [`finish`] as any no-op's); `user`'s watchers are still
/// touched, as Redis's HSET signals the key whatever it set. Precondition: a unit is open
/// (inside [`write`]); `key` is a pooled buffer, kept or given back.
pub fn set_member(
    ctx: &mut Ctx<'_, '_>,
    user: &[u8],
    key: Vec<u8>,
    value: &[u8],
) -> Result<bool, Frame> {
    let mut old = ctx.buffers.take();
    let existed = ctx.read_at(&key, &mut old);
    let same = existed && old == value;
    ctx.buffers.give(old);
    if same {
        ctx.buffers.give(key);
        ctx.shared.watches.touched(user);
        return Ok(false);
    }
    // Read just above in this command's view: decided without reading it again.
    put_known_member(ctx, key, value, existed)?;
    Ok(!existed)
}

/// Sets a member entry that the caller knows absent (a list's next sequence number, which
/// the list's invariant keeps free): decided without reading it. Precondition: a unit is
/// open (inside [`write`]).
pub fn put_new_member(ctx: &mut Ctx<'_, '_>, key: Vec<u8>, value: &[u8]) -> Result<(), Frame> {
    put_known_member(ctx, key, value, false)
}

/// Sets a member entry whose presence (`existed`) the caller has just read in the running
/// command's view, or knows: decided without reading it again. Precondition: a unit is
/// open (inside [`write`]).
pub fn put_known_member(
    ctx: &mut Ctx<'_, '_>,
    key: Vec<u8>,
    value: &[u8],
    existed: bool,
) -> Result<(), Frame> {
    if ctx.unit.is_none() {
        return put_member(ctx, &key, value).map(|_| ());
    }
    check_member(&key, value)?;
    let value = ctx.buffers.copy_of(value);
    ctx.decide_owned(key, Some(value));
    if !existed {
        ctx.shared.collections.add_reserved(1);
    }
    Ok(())
}

/// Removes a member entry that the caller has just read present in the running command's
/// view: decided without reading it again. Precondition: a unit is open (inside [`write`]).
pub fn remove_known_member(ctx: &mut Ctx<'_, '_>, key: Vec<u8>) -> Result<(), Frame> {
    if ctx.unit.is_none() {
        return remove_member(ctx, &key).map(|_| ());
    }
    ctx.decide_remove_present(key);
    ctx.shared.collections.add_reserved(-1);
    Ok(())
}

/// Adds a member entry only if absent; true if added.
pub fn insert_member(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
    let added = ctx.insert(key, value)?;
    if added {
        ctx.shared.collections.add_reserved(1);
    }
    Ok(added)
}

/// Removes a member entry; true if it was there.
pub fn remove_member(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<bool, Frame> {
    let removed = ctx.remove(key)?;
    if removed {
        ctx.shared.collections.add_reserved(-1);
    }
    Ok(removed)
}

/// Up to `limit` entries within the bounds, in `order`, copied out.
/// Within a command's unit, its own decided writes are seen: removed entries are skipped,
/// new ones merged in order.
pub fn members(
    ctx: &Ctx<'_, '_>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    order: Order,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    if limit == 0 {
        return out;
    }
    let overlay = ctx.unit.as_ref().map(|u| u.overlay());
    // The store need read no more than `limit` plus the members this command removed: a
    // short read stays optimistic in the store's scan gate (SPOP reads one member).
    let removed = overlay.map_or(0, |o| {
        o.range((lower, upper)).filter(|(_, v)| v.is_none()).count()
    });
    let rows = limit.saturating_add(removed);
    ctx.shared
        .store
        .scan_up_to(lower, upper, order, rows, &mut |k, v| {
            match overlay.and_then(|o| o.get(k)) {
                Some(None) => return ControlFlow::Continue(()),
                Some(Some(new)) => out.push((k.to_vec(), new.clone())),
                None => out.push((k.to_vec(), v.to_vec())),
            }
            if out.len() >= limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
    if let Some(overlay) = overlay {
        let added: Vec<(Vec<u8>, Vec<u8>)> = overlay
            .range((lower, upper))
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone())))
            .filter(|(k, _)| out.iter().all(|(o, _)| o != k))
            .collect();
        out.extend(added);
        match order {
            Order::Ascending => out.sort(),
            Order::Descending => out.sort_by(|a, b| b.cmp(a)),
        }
        out.truncate(limit);
    }
    out
}

/// The end (exclusive) of every key beginning with `prefix`.
pub fn prefix_upper(prefix: &[u8]) -> Vec<u8> {
    // Reserved prefixes hold the byte 'm' or 't' below 0xFF, so an end always exists; the
    // fallback (everything above the prefix) is never taken.
    crate::glob::prefix_end(prefix).unwrap_or_else(|| vec![0xff; prefix.len() + 1])
}

/// Removes every member entry of `user`; keeps the reserved count exact. Precondition:
/// `user`'s stripe lock is held, which covers its members: no member entry's own stripe
/// is taken (a caller holding several stripes, `write_many`, must wait for no other).
fn clear_members(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<(), Frame> {
    let prefix = member_prefix(user);
    let end = prefix_upper(&prefix);
    let mut keys = Vec::new();
    ctx.scan_keys_up_to(
        Bound::Included(prefix.as_slice()),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        usize::MAX,
        &mut |key, _| {
            keys.push(key.to_vec());
            ControlFlow::Continue(())
        },
    );
    let mut removed = 0;
    for key in &keys {
        if ctx.remove(key)? {
            removed += 1;
        }
    }
    ctx.shared.collections.add_reserved(-removed);
    Ok(())
}

/// Removes collection `user` with all its members, if it is one; true if it was.
/// Precondition: `user`'s stripe lock is held.
pub fn delete_locked(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    // One atomic batch: members and type entry go together (a unit already open, as SET's
    // that replaces the collection, takes them in).
    let own_unit = ctx.unit.is_none();
    ctx.begin_unit();
    let deleted = delete_in_unit(ctx, user);
    if own_unit {
        ctx.end_unit()?;
    }
    deleted
}

fn delete_in_unit(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    let meta = match read_meta_raw(ctx, user) {
        Ok(m) => m,
        // A damaged type entry is still removed, with its members.
        Err(_) => Some(Meta::new(Kind::Set)),
    };
    if meta.is_none() {
        return Ok(false);
    }
    clear_members(ctx, user)?;
    if ctx.remove(&type_key(user))? {
        ctx.shared.collections.add_reserved(-1);
        ctx.shared.collections.add_live(-1);
    }
    Ok(true)
}

/// Adds to `batch` the removal of collection `user` (every member, then its type entry), if
/// it is one, so that a command replacing it (MSET) is one atomic batch; returns the number
/// of keys removed (members and type entry), or None. The caller holds `user`'s stripe lock
/// and, once the batch is written, lowers the counters with [`deleted`].
pub fn delete_into(
    ctx: &mut Ctx<'_, '_>,
    user: &[u8],
    batch: &mut forest_store::WriteBatch,
) -> Result<Option<i64>, Frame> {
    let meta = match read_meta(ctx, user) {
        Ok(m) => m,
        Err(_) => Some(Meta::new(Kind::Set)),
    };
    if meta.is_none() {
        return Ok(None);
    }
    let prefix = member_prefix(user);
    let end = prefix_upper(&prefix);
    let mut removed = 0i64;
    ctx.scan(
        Bound::Included(prefix.as_slice()),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        &mut |key, _| {
            batch.remove(key);
            removed += 1;
            ControlFlow::Continue(())
        },
    );
    batch.remove(&type_key(user));
    Ok(Some(removed + 1))
}

/// Lowers the collection counters for a collection of `keys` keys removed by a batch that
/// [`delete_into`] filled.
pub fn deleted(ctx: &Ctx<'_, '_>, keys: i64) {
    ctx.shared.collections.add_reserved(-keys);
    ctx.shared.collections.add_live(-1);
}

/// For a string write that must not touch a collection (INCR, APPEND, GETSET, SETNX...):
/// WRONGTYPE if `key` is a collection, else its stripe lock, held across the write so that
/// no collection of that name appears meanwhile and MSETNX (which holds the stripes of all
/// its keys) is all or nothing.
pub fn string_write<'a>(
    ctx: &mut Ctx<'a, '_>,
    key: &[u8],
) -> Result<crate::collection::StripeGuard<'a>, Frame> {
    let shared: &'a Shared = ctx.shared;
    let guard = shared.collections.lock(key);
    super::expire::purge_due(ctx, key)?;
    if shared.collections.any() && read_meta(ctx, key)?.is_some() {
        return Err(wrongtype());
    }
    Ok(guard)
}

/// Normalizes Redis's `start stop` indexes (negative from the end) over `len` elements:
/// the inclusive index range, or None if empty.
pub fn index_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        start.saturating_add(len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop
    };
    let stop = stop.min(len - 1);
    if start > stop || start >= len {
        return None;
    }
    Some((start as u64, stop as u64))
}

/// The optional count of a pop command (`key [count]`): Redis's error for a negative one,
/// a syntax error for anything after it.
pub fn pop_count(argv: &[&[u8]]) -> Result<Option<u64>, Frame> {
    if argv.len() > 3 {
        let name = String::from_utf8_lossy(argv[0]).to_ascii_lowercase();
        return Err(super::wrong_arity(&name));
    }
    // Redis's one error for a count that is not a whole number >= 0.
    let count = match argv.get(2).map(|arg| crate::parse::parse_int(arg)) {
        None => None,
        Some(Some(n)) if n >= 0 => Some(n as u64),
        Some(_) => return Err(Frame::err("value is out of range, must be positive")),
    };
    Ok(count)
}

/// A pop's reply: the popped members with a count, else the one popped or null.
pub fn popped_reply(count: Option<u64>, mut popped: Vec<Frame>) -> Frame {
    match count {
        Some(_) => Frame::Array(popped),
        None => popped.pop().unwrap_or(Frame::Null),
    }
}

/// The null reply of a pop with a count on a missing key.
pub fn null_array(ctx: &Ctx<'_, '_>) -> Frame {
    match ctx.client.protocol {
        crate::frame::Protocol::Resp2 => Frame::NullArray,
        crate::frame::Protocol::Resp3 => Frame::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn wrong() -> Frame {
        wrongtype()
    }

    // Goal: two threads pushing to one list and adding to one set lose nothing.
    // Method: 2 threads x 500 LPUSH/RPUSH and SADD of distinct members on one key each,
    // each thread its own client; then LLEN, SCARD and the exact contents.
    #[test]
    fn concurrent_writers_lose_nothing() {
        let h = Harness::new();
        let per_thread = 500;
        std::thread::scope(|scope| {
            for t in 0..2 {
                let shared = &h.shared;
                scope.spawn(move || {
                    let mut client = shared.new_client("t".into(), "t".into(), None);
                    for i in 0..per_thread {
                        let e = format!("t{t}-{i:04}");
                        let push: &[u8] = if i % 2 == 0 { b"LPUSH" } else { b"RPUSH" };
                        run_on(shared, &mut client, &[push, b"l", e.as_bytes()]);
                        run_on(shared, &mut client, &[b"SADD", b"s", e.as_bytes()]);
                    }
                });
            }
        });
        let mut h = h;
        let total = (2 * per_thread) as i64;
        assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(total));
        assert_eq!(h.run(&["SCARD", "s"]), Frame::Integer(total));
        let Frame::Array(items) = h.run(&["LRANGE", "l", "0", "-1"]) else {
            panic!("array expected");
        };
        let mut items: Vec<Frame> = items;
        items.sort_by_key(|f| format!("{f:?}"));
        items.dedup();
        assert_eq!(items.len() as i64, total);
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(2));
    }

    // Goal: every collection type and the counts survive a restart.
    // Method: build one of each, close and reopen the store, read them all back.
    #[test]
    fn collections_survive_restart() {
        let mut h = Harness::new();
        h.run(&["RPUSH", "l", "a", "b", "c"]);
        h.run(&["LPOP", "l"]);
        h.run(&["SADD", "s", "x", "y"]);
        h.run(&["HSET", "h", "f", "v", "g", "w"]);
        h.run(&["ZADD", "z", "2", "two", "1", "one"]);
        h.run(&["XADD", "x", "1-1", "k", "v"]);
        h.run(&["SET", "str", "v"]);
        let mut h = h.restart();
        assert_eq!(h.run(&["LRANGE", "l", "0", "-1"]), bulks(&["b", "c"]));
        assert_eq!(h.run(&["LPUSH", "l", "a"]), Frame::Integer(3));
        assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&["x", "y"]));
        assert_eq!(
            h.run(&["HGETALL", "h"]),
            Frame::Map(vec![(bulk("f"), bulk("v")), (bulk("g"), bulk("w"))])
        );
        assert_eq!(h.run(&["ZRANGE", "z", "0", "-1"]), bulks(&["one", "two"]));
        assert_eq!(h.run(&["XLEN", "x"]), Frame::Integer(1));
        assert_eq!(
            h.run(&["XADD", "x", "1-1", "k", "v"]),
            Frame::Error(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item"
                    .into()
            )
        );
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(6));
        assert_eq!(h.run(&["TYPE", "z"]), Frame::Simple("zset".into()));
    }

    // Goal: KEYS, SCAN, EXISTS, DBSIZE, DEL, FLUSHDB and FOREST.* see a collection as one
    // key (or, for FOREST.*, not at all), and reserved keys are refused.
    // Method: strings and collections interleaved in key order, each command checked.
    #[test]
    fn collections_in_the_keyspace() {
        let mut h = Harness::new();
        h.run(&["MSET", "a", "1", "c", "3", "e", "5"]);
        h.run(&["RPUSH", "b", "x", "y"]);
        h.run(&["SADD", "d", "m"]);
        h.run(&["HSET", "f", "k", "v"]);
        assert_eq!(
            h.run(&["KEYS", "*"]),
            bulks(&["a", "b", "c", "d", "e", "f"])
        );
        assert_eq!(h.run(&["KEYS", "[b-d]"]), bulks(&["b", "c", "d"]));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(6));
        assert_eq!(h.run(&["EXISTS", "a", "b", "d", "zz"]), Frame::Integer(3));
        assert_eq!(h.run(&["TTL", "b"]), Frame::Integer(-1));
        let mut keys = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let Frame::Array(reply) = h.run(&["SCAN", &cursor, "COUNT", "2"]) else {
                panic!("array expected");
            };
            let [Frame::Bulk(next), Frame::Array(batch)] = &reply[..] else {
                panic!("{reply:?}");
            };
            keys.extend(batch.iter().cloned());
            cursor = String::from_utf8(next.clone()).expect("utf8");
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(Frame::Array(keys), bulks(&["a", "b", "c", "d", "e", "f"]));
        let Frame::Array(reply) = h.run(&["SCAN", "0", "TYPE", "list", "COUNT", "100"]) else {
            panic!("array expected");
        };
        assert_eq!(reply[1], bulks(&["b"]));
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "KEYSONLY"]),
            bulks(&["a", "c", "e"])
        );
        assert_eq!(h.run(&["FOREST.COUNT", "-", "+"]), Frame::Integer(3));
        assert_eq!(
            h.run(&["MGET", "a", "b"]),
            Frame::Array(vec![bulk("1"), Frame::Null])
        );
        assert_eq!(h.run(&["GETSET", "b", "v"]), wrong());
        assert_eq!(h.run(&["SET", "b", "v", "GET"]), wrong());
        assert_eq!(h.run(&["SET", "b", "v", "NX"]), Frame::Null);
        assert_eq!(h.run(&["SETNX", "b", "v"]), Frame::Integer(0));
        assert_eq!(h.run(&["MSETNX", "b", "v", "zz", "1"]), Frame::Integer(0));
        assert_eq!(h.run(&["SADD", "a", "m"]), wrong());
        assert_eq!(h.run(&["HGET", "d", "m"]), wrong());
        assert_eq!(h.run(&["DEL", "b", "a", "nope"]), Frame::Integer(2));
        assert_eq!(h.run(&["LLEN", "b"]), Frame::Integer(0));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(4));
        assert_eq!(h.run(&["MSET", "d", "now-string"]), Frame::ok());
        assert_eq!(h.run(&["GET", "d"]), bulk("now-string"));
        assert_eq!(h.run(&["FLUSHDB"]), Frame::ok());
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(h.entries(), 0);
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&[]));
        let reserved =
            Frame::Error("ERR keys beginning with byte 0xff are reserved by forest".into());
        assert_eq!(h.run_bytes(&[b"SET", b"\xffx", b"v"]), reserved);
        assert_eq!(h.run_bytes(&[b"GET", b"\xfft"]), reserved);
        assert_eq!(h.run_bytes(&[b"MSET", b"a", b"1", b"\xff", b"2"]), reserved);
        assert_eq!(h.run_bytes(&[b"LPUSH", b"\xff", b"2"]), reserved);
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
    }

    // Goal: index normalization matches Redis's LRANGE/ZRANGE rules.
    // Method: positive, negative, out-of-range and inverted ranges over 5 elements.
    #[test]
    fn index_ranges() {
        assert_eq!(index_range(0, -1, 5), Some((0, 4)));
        assert_eq!(index_range(-2, -1, 5), Some((3, 4)));
        assert_eq!(index_range(-100, 2, 5), Some((0, 2)));
        assert_eq!(index_range(3, 100, 5), Some((3, 4)));
        assert_eq!(index_range(5, 10, 5), None);
        assert_eq!(index_range(3, 1, 5), None);
        assert_eq!(index_range(0, -6, 5), None);
        assert_eq!(index_range(0, 0, 0), None);
        assert_eq!(index_range(i64::MIN, i64::MAX, 3), Some((0, 2)));
    }
}
