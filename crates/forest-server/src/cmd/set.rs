//! The string writes: SET, SETNX, GETSET, MSET, MSETNX, APPEND (docs/PROTOCOL.md
//! "Strings"). Each goes through the connection's batch.

use forest_core::check_entry;
use forest_store::{Rmw, WriteBatch};

use super::expire::{self, TimeUnit};
use super::{coll, is_word, store_error, syntax_error, Ctx, Reply};
use crate::expiry::KeyHash;
use crate::frame::Frame;

/// SET's condition.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Condition {
    Always,
    /// NX: only if absent.
    Absent,
    /// XX: only if present.
    Present,
}

/// What SET does to the key's deadline.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// No option: a deadline is cleared, as Redis does.
    Clear,
    /// KEEPTTL.
    Keep,
    /// EX, PX, EXAT, PXAT: this deadline (ms since the Unix epoch).
    At(u64),
}

/// SET's parsed options.
#[derive(Clone, Copy)]
struct SetOptions {
    condition: Condition,
    get: bool,
    expiry: Expiry,
    /// The clock's reading the deadline was computed from, if it was: the command's one
    /// reading.
    now: Option<u64>,
}

/// SET's expiry option before its number is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TimeOption {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL], with Redis's
/// rules (redis `t_string.c` `parseExtendedStringArgumentsOrReply`): an option may repeat,
/// conflicting ones are a syntax error, then the time is checked, then GET's type.
pub fn set(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (key, value) = (argv[1], argv[2]);
    let mut condition = Condition::Always;
    let mut get = false;
    let mut keep = false;
    let mut time: Option<(TimeOption, &[u8])> = None;
    let mut i = 3;
    while i < argv.len() {
        let option = argv[i];
        let next = argv.get(i + 1).copied();
        let timed = |kind: TimeOption| -> Option<(TimeOption, &[u8])> {
            let free = !keep && time.is_none_or(|(k, _)| k == kind);
            next.filter(|_| free).map(|n| (kind, n))
        };
        // The time options first (the common SET EX), each word tried only at its length.
        let kind = match option.len() {
            2 if is_word(option, "ex") => Some(TimeOption::Ex),
            2 if is_word(option, "px") => Some(TimeOption::Px),
            4 if is_word(option, "exat") => Some(TimeOption::ExAt),
            4 if is_word(option, "pxat") => Some(TimeOption::PxAt),
            _ => None,
        };
        if let Some(found) = kind.and_then(timed) {
            time = Some(found);
            i += 1;
        } else if kind.is_some() {
            return Err(syntax_error());
        } else if is_word(option, "nx") && condition != Condition::Present {
            condition = Condition::Absent;
        } else if is_word(option, "xx") && condition != Condition::Absent {
            condition = Condition::Present;
        } else if is_word(option, "get") {
            get = true;
        } else if is_word(option, "keepttl") && time.is_none() {
            keep = true;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    let mut now = None;
    let expiry = match time {
        None if keep => Expiry::Keep,
        None => Expiry::Clear,
        Some((kind, arg)) => {
            let (unit, absolute) = match kind {
                TimeOption::Ex => (TimeUnit::Seconds, false),
                TimeOption::Px => (TimeUnit::Millis, false),
                TimeOption::ExAt => (TimeUnit::Seconds, true),
                TimeOption::PxAt => (TimeUnit::Millis, true),
            };
            let clock = ctx.now_ms();
            now = Some(clock);
            Expiry::At(expire::positive_deadline(
                arg, unit, absolute, clock, "set",
            )?)
        }
    };
    set_with(
        ctx,
        key,
        value,
        SetOptions {
            condition,
            get,
            expiry,
            now,
        },
    )
}

/// SETEX and PSETEX: SET with a deadline, computed from the clock's reading `now`.
pub fn set_with_deadline(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    value: &[u8],
    deadline: u64,
    now: u64,
) -> Reply {
    set_with(
        ctx,
        key,
        value,
        SetOptions {
            condition: Condition::Always,
            get: false,
            expiry: Expiry::At(deadline),
            now: Some(now),
        },
    )
}

fn set_with(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8], options: SetOptions) -> Reply {
    // SET replaces a collection of that name (NX keeps it; GET refuses it, as Redis). The
    // key's stripe lock is held across the write, so SET is ordered against MSETNX and
    // against the creation of a collection under the same name.
    let shared = ctx.shared;
    let _guard = shared.collections.lock(key);
    let reply = set_locked(ctx, key, value, options);
    // A collection replaced is removed in one batch with the string, written here while the
    // stripe lock is still held.
    ctx.end_unit()?;
    reply
}

/// SET's work under `key`'s stripe lock.
fn set_locked(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8], options: SetOptions) -> Reply {
    let SetOptions {
        mut condition,
        get,
        expiry,
        now,
    } = options;
    let shared = ctx.shared;
    // The key's deadline, read once: a due key is deleted first. SET with a deadline outside
    // a unit keeps the key's hash for the map's update (one hash per command).
    let (hash, mut old) = match (expiry, &ctx.unit) {
        (Expiry::At(_), None) => {
            let (hash, old) = shared.expires.probe(key);
            (Some(hash), old)
        }
        _ => (None, ctx.deadline(key)),
    };
    let now = match now {
        Some(now) => now,
        None if old.is_some() || expiry != Expiry::Clear => ctx.now_ms(),
        None => 0,
    };
    if old.is_some_and(|d| d <= now) {
        expire::delete_expired(ctx, key)?;
        old = None;
    }
    if let Expiry::At(deadline) = expiry {
        if deadline <= now {
            return set_expired(ctx, key, options);
        }
    }
    let new = match expiry {
        Expiry::Clear => None,
        Expiry::Keep => old,
        Expiry::At(deadline) => Some(deadline),
    };
    if shared.collections.any() {
        match coll::read_meta(ctx, key)? {
            Some(_) if get => return Err(coll::wrongtype()),
            Some(_) if condition == Condition::Absent => return Ok(Frame::Null),
            Some(_) => {
                // The collection's removal and the new string are one atomic batch (the
                // unit ends when the command does); its deadline entry goes with it, and
                // the string takes `new` where strings keep deadlines.
                ctx.begin_unit();
                coll::delete_locked(ctx, key)?;
                // The key existed, so XX holds: Redis overwrites a key of any type (the
                // string is written below whatever the condition).
                condition = Condition::Always;
                if old.is_some() {
                    expire::stage_deadline(ctx, key, None)?;
                    old = None;
                }
            }
            None => {}
        }
    }
    if new != old {
        if condition == Condition::Always && !get && ctx.unit.is_none() {
            // The common SET EX: one entry, `FF 'x' <key>` (two, and a move, where the
            // string was at its raw key or loses its deadline).
            return set_placed(ctx, key, value, old, new, hash);
        }
        // The value and the deadline go in one unit, written when SET ends.
        ctx.begin_unit();
    }
    let (applied, reply) = write_value(ctx, key, value, condition, get)?;
    if applied && new != old {
        expire::stage_deadline(ctx, key, new)?;
    }
    Ok(reply)
}

/// SET without conditions that sets or clears a deadline, outside a unit: the string where
/// it lives with `new`, one atomic batch (one entry unless it moves), then the map.
fn set_placed(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    value: &[u8],
    old: Option<u64>,
    new: Option<u64>,
    hash: Option<KeyHash>,
) -> Reply {
    let shared = ctx.shared;
    if let (Some(deadline), Some(hash), false) = (new, hash, shared.collections.any()) {
        if old.is_some() || !raw_present(ctx, key) {
            let timed = Timed {
                hash,
                created: old.is_none(),
                deadline,
            };
            return set_timed(ctx, key, value, timed);
        }
    }
    let mut batch = WriteBatch::new();
    let (moves, reserved) = expire::place_string_in(ctx, &mut batch, key, value, old, new)?;
    // A change of where reads look (a collection replaced may be involved): bracketed, so
    // that a read missing the string between the write and the map's change reads again
    // (review F4).
    let moves = moves || old.is_none() != new.is_none();
    if moves {
        shared.expires.begin_move();
    }
    let written = match batch.ops() {
        [forest_store::BatchOp::Upsert(k, v)] => ctx.upsert_at(k, v).map(drop),
        _ => ctx.write_at(&batch).map(drop),
    };
    if written.is_ok() {
        expire::account(shared, key, new, reserved);
    }
    if moves {
        shared.expires.end_move();
    }
    written?;
    Ok(Frame::ok())
}

/// Whether string `key` is at its raw key (no unit open: the store's).
fn raw_present(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> bool {
    let scratch = &mut ctx.buffers.scratch;
    ctx.shared.store.get(key, scratch)
}

/// What [`set_timed`] writes besides the value: the key's hash in the deadline map, whether
/// the key has no deadline and no entry now, and its new deadline.
#[derive(Clone, Copy)]
struct Timed {
    hash: KeyHash,
    created: bool,
    deadline: u64,
}

/// [`set_placed`] where the string stays at or goes to `FF 'x'` alone: one entry, nothing
/// at its raw key, no collection anywhere.
fn set_timed(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8], timed: Timed) -> Reply {
    // The entry's key and value in the connection's pooled buffers (no allocation once
    // warm): `FF 'x' <key>` -> `<deadline BE> <value>` (`crate::expiry`'s layout).
    let mut place = ctx.buffers.take();
    place.extend_from_slice(&crate::expiry::string_bounds().0);
    place.extend_from_slice(key);
    let mut stored = ctx.buffers.take();
    stored.extend_from_slice(&timed.deadline.to_be_bytes());
    stored.extend_from_slice(value);
    let written = set_timed_entry(ctx, key, &place, &stored, timed);
    ctx.buffers.give(place);
    ctx.buffers.give(stored);
    written?;
    Ok(Frame::ok())
}

/// [`set_timed`]'s write of `place` -> `stored` and the map's change.
fn set_timed_entry(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    place: &[u8],
    stored: &[u8],
    timed: Timed,
) -> Result<(), Frame> {
    let Timed {
        hash,
        created,
        deadline,
    } = timed;
    let shared = ctx.shared;
    check_entry(place, stored).map_err(|e| store_error(&e))?;
    // A new key: the map learns the deadline first, then the entry is written. A read
    // between the two looks at `FF 'x'` and misses, as it would before the SET; a read
    // after finds it. So a scan never lists the key while GET misses it (review F4), and
    // the write needs no bracketing as a move (two atomic counters every client shares).
    if created {
        shared.expires.mark_timed();
        shared.expires.insert_hashed(hash, key, deadline);
    }
    let written = ctx.upsert_at(place, stored);
    match (created, written.is_ok()) {
        (false, true) => shared.expires.insert_hashed(hash, key, deadline),
        (true, false) => {
            shared.expires.remove(key);
        }
        _ => {}
    }
    written
}

/// SET's string write as its condition says: whether it wrote, and the reply.
fn write_value(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    value: &[u8],
    condition: Condition,
    get: bool,
) -> Result<(bool, Frame), Frame> {
    if get {
        let mut applied = false;
        let old = ctx.read_modify_write(key, |old| {
            applied = match condition {
                Condition::Always => true,
                Condition::Absent => old.is_none(),
                Condition::Present => old.is_some(),
            };
            Ok(if applied {
                Rmw::Put(value.to_vec())
            } else {
                Rmw::Keep
            })
        })?;
        return Ok((applied, old.map_or(Frame::Null, Frame::Bulk)));
    }
    let done = match condition {
        Condition::Always => ctx.upsert(key, value).map(|()| true),
        Condition::Absent => ctx.insert(key, value),
        Condition::Present => ctx.update(key, value),
    }?;
    Ok((done, if done { Frame::ok() } else { Frame::Null }))
}

/// SET with a deadline already past: as if set and expired at once (Redis deletes such a
/// key on its next access): the old key is deleted if the condition holds, the reply is
/// SET's.
fn set_expired(ctx: &mut Ctx<'_, '_>, key: &[u8], options: SetOptions) -> Reply {
    let mut old = Vec::new();
    let string = ctx.read_raw(key, &mut old);
    let collection = !string && coll::kind_of(ctx, key)?.is_some();
    if options.get && collection {
        return Err(coll::wrongtype());
    }
    let present = string || collection;
    let applies = match options.condition {
        Condition::Always => true,
        Condition::Absent => !present,
        Condition::Present => present,
    };
    if applies && present {
        expire::delete_expired(ctx, key)?;
    } else if applies {
        // Redis sets the key and it expires: a write WATCH sees (review rev-srv F1).
        ctx.shared.watches.touched(key);
    }
    Ok(if options.get {
        if string {
            Frame::Bulk(old)
        } else {
            Frame::Null
        }
    } else if applies {
        Frame::ok()
    } else {
        Frame::Null
    })
}

/// SETNX key value: 1 if set.
pub fn setnx(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    // A collection of that name (or its damaged type entry) counts as present.
    let Ok(_guard) = coll::string_write(ctx, argv[1]) else {
        return Ok(Frame::Integer(0));
    };
    let inserted = ctx.insert(argv[1], argv[2])?;
    Ok(Frame::Integer(i64::from(inserted)))
}

/// GETSET key value: the old value.
pub fn getset(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let value = argv[2];
    let _guard = coll::string_write(ctx, argv[1])?;
    // GETSET clears a deadline, as SET does: the value and the deadline in one unit.
    let clears = ctx.deadline(argv[1]).is_some();
    if clears {
        ctx.begin_unit();
    }
    let old = ctx.read_modify_write(argv[1], |_| Ok(Rmw::Put(value.to_vec())));
    let staged = if clears {
        expire::stage_deadline(ctx, argv[1], None)
    } else {
        Ok(())
    };
    ctx.end_unit()?;
    let old = old?;
    staged?;
    Ok(old.map_or(Frame::Null, Frame::Bulk))
}

/// The key-value pairs of MSET/MSETNX, checked against the limits before anything is written.
/// A key and its value.
type Pair<'a> = (&'a [u8], &'a [u8]);

fn pairs<'a>(name: &str, argv: &[&'a [u8]]) -> Result<Vec<Pair<'a>>, Frame> {
    let rest = &argv[1..];
    if !rest.len().is_multiple_of(2) {
        return Err(super::wrong_arity(name));
    }
    let pairs: Vec<_> = rest.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    for (k, v) in &pairs {
        check_entry(k, v).map_err(|e| store_error(&e))?;
    }
    Ok(pairs)
}

/// MSET k v [k v ...]. Each pair is atomic; the whole is not (see docs/PROTOCOL.md).
pub fn mset(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let pairs = pairs("mset", argv)?;
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(pairs.iter().map(|(k, _)| *k));
    for (k, _) in &pairs {
        expire::purge_due(ctx, k)?;
    }
    // One atomic batch: the collections it replaces are removed in it too, and the
    // deadlines it clears.
    let mut batch = WriteBatch::new();
    let mut replaced = Vec::new();
    if shared.collections.any() {
        let mut seen = std::collections::HashSet::new();
        for (k, _) in pairs.iter().filter(|(k, _)| seen.insert(*k)) {
            if let Some(keys) = coll::delete_into(ctx, k, &mut batch)? {
                replaced.push(keys);
            }
        }
    }
    if ctx.unit.is_some() {
        // Inside EXEC: the deadlines change in its unit, with its batch.
        ctx.write(&batch)?;
        for (k, v) in pairs {
            ctx.upsert(k, v)?;
            expire::stage_deadline(ctx, k, None)?;
        }
        for keys in replaced {
            coll::deleted(ctx, keys);
        }
        return Ok(Frame::ok());
    }
    // Each string at its raw key, without a deadline: a string that had one moves.
    let mut changes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (k, v) in &pairs {
        // A key named again is at its raw key by then.
        let old = if seen.insert(*k) {
            ctx.deadline(k)
        } else {
            None
        };
        let (_, reserved) = expire::place_string_in(ctx, &mut batch, k, v, old, None)?;
        if old.is_some() {
            changes.push((*k, reserved));
        }
    }
    let moves = !changes.is_empty();
    if moves {
        shared.expires.begin_move();
    }
    let written = ctx.write_at(&batch);
    if written.is_ok() {
        for (k, reserved) in changes {
            expire::account(shared, k, None, reserved);
        }
    }
    if moves {
        shared.expires.end_move();
    }
    written?;
    for keys in replaced {
        coll::deleted(ctx, keys);
    }
    Ok(Frame::ok())
}

/// MSETNX k v [k v ...]: 1 if no key existed and all were set. Holds the stripe locks of
/// all its keys, and every string write holds its key's stripe lock, so MSETNX is all or
/// nothing against every other write; its keys are written as one atomic batch, so after a
/// crash too.
pub fn msetnx(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let pairs = pairs("msetnx", argv)?;
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(pairs.iter().map(|(k, _)| *k));
    for (k, _) in &pairs {
        expire::purge_due(ctx, k)?;
    }
    for (k, _) in &pairs {
        if ctx.present(k) || !matches!(coll::kind_of(ctx, k), Ok(None)) {
            // The answer rests on what was read: it waits until that is durable.
            ctx.observe(k);
            return Ok(Frame::Integer(0));
        }
    }
    // No key existed: all are set, a repeated key to its last value (as Redis does).
    let mut batch = WriteBatch::new();
    for (k, v) in pairs {
        batch.put(k, v);
    }
    ctx.write(&batch)?;
    Ok(Frame::Integer(1))
}

/// APPEND key value: the new length.
pub fn append(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let suffix = argv[2];
    let _guard = coll::string_write(ctx, argv[1])?;
    let mut len = 0;
    ctx.read_modify_write(argv[1], |old| {
        let mut value = Vec::with_capacity(old.map_or(0, <[u8]>::len) + suffix.len());
        value.extend_from_slice(old.unwrap_or_default());
        value.extend_from_slice(suffix);
        len = value.len();
        Ok(Rmw::Put(value))
    })?;
    Ok(Frame::Integer(len as i64))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;
    use forest_store::file::{CrashMode, FaultPlan, SimDir};
    use forest_store::Durability;

    // Goal: SET XX over a collection replaces it, as Redis 7 does for a key of any type
    // (`SET z 1 XX` on a zset: OK, a string). Before the fix it removed the collection and
    // then found no string to update: nil, and the key gone. Found by
    // `scripts/diff-expiry-vs-redis.py --mode multi`. Method: XX plain, with EX, in MULTI.
    #[test]
    fn set_xx_replaces_a_collection() {
        let mut h = Harness::new();
        for (i, extra) in [&[][..], &["EX", "100"], &["KEEPTTL"]].iter().enumerate() {
            let key = format!("z{i}");
            h.run(&["ZADD", &key, "1", "m"]);
            let mut argv = vec!["SET", key.as_str(), "v", "XX"];
            argv.extend_from_slice(extra);
            assert_eq!(h.run(&argv), Frame::ok(), "{argv:?}");
            assert_eq!(h.run(&["TYPE", &key]), Frame::Simple("string".into()));
            assert_eq!(h.run(&["GET", &key]), bulk("v"));
        }
        h.run(&["HSET", "h", "f", "v"]);
        h.run(&["EXPIRE", "h", "100"]);
        h.run(&["MULTI"]);
        h.run(&["SET", "h", "s", "XX"]);
        h.run(&["TTL", "h"]);
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![Frame::ok(), Frame::Integer(-1)])
        );
        assert_eq!(h.run(&["GET", "h"]), bulk("s"));
    }

    // Goal: SET's NX, XX and GET options behave as Redis 7's; malformed expiry options are
    // syntax errors (tests/expiry.rs has the rest).
    // Method: sequences of SETs checked by their replies and a final GET.
    #[test]
    fn set_options() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SET", "k", "1", "XX"]), Frame::Null);
        assert_eq!(h.run(&["SET", "k", "1", "nx"]), Frame::ok());
        assert_eq!(h.run(&["SET", "k", "2", "NX"]), Frame::Null);
        assert_eq!(h.run(&["SET", "k", "3", "XX", "GET"]), bulk("1"));
        assert_eq!(h.run(&["SET", "k", "4", "NX", "GET"]), bulk("3"));
        assert_eq!(h.run(&["GET", "k"]), bulk("3"));
        assert_eq!(h.run(&["SET", "n", "x", "GET"]), Frame::Null);
        assert_eq!(h.run(&["GET", "n"]), bulk("x"));
        assert_eq!(
            h.run(&["SET", "k", "v", "NX", "XX"]),
            Frame::Error("ERR syntax error".into())
        );
        assert_eq!(
            h.run(&["SET", "k", "v", "BOGUS"]),
            Frame::Error("ERR syntax error".into())
        );
        // An expiry option without its number, or two of them, is a syntax error.
        for args in [
            &["EX"][..],
            &["px"],
            &["EX", "1", "PX", "1"],
            &["KEEPTTL", "EX", "1"],
        ] {
            let mut argv = vec!["SET", "k", "v"];
            argv.extend_from_slice(args);
            assert_eq!(
                h.run(&argv),
                Frame::Error("ERR syntax error".into()),
                "{args:?}"
            );
        }
        assert_eq!(h.run(&["GET", "k"]), bulk("3"));
    }

    // Goal: SETNX, GETSET, MSET, MSETNX and APPEND reply as Redis does.
    // Method: each on present and absent keys.
    #[test]
    fn other_string_writes() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SETNX", "a", "1"]), Frame::Integer(1));
        assert_eq!(h.run(&["SETNX", "a", "2"]), Frame::Integer(0));
        assert_eq!(h.run(&["GETSET", "a", "3"]), bulk("1"));
        assert_eq!(h.run(&["GETSET", "b", "3"]), Frame::Null);
        assert_eq!(h.run(&["MSET", "c", "1", "d", "2"]), Frame::ok());
        assert_eq!(
            h.run(&["MSET", "c", "1", "d"]),
            Frame::Error("ERR wrong number of arguments for 'mset' command".into())
        );
        assert_eq!(h.run(&["MSETNX", "c", "9", "e", "9"]), Frame::Integer(0));
        assert_eq!(h.run(&["GET", "e"]), Frame::Null);
        assert_eq!(h.run(&["MSETNX", "e", "5", "f", "6"]), Frame::Integer(1));
        assert_eq!(
            h.run(&["MGET", "c", "d", "e", "f", "zz"]),
            Frame::Array(vec![
                bulk("1"),
                bulk("2"),
                bulk("5"),
                bulk("6"),
                Frame::Null
            ])
        );
        assert_eq!(h.run(&["APPEND", "g", "ab"]), Frame::Integer(2));
        assert_eq!(h.run(&["APPEND", "g", "cd"]), Frame::Integer(4));
        assert_eq!(h.run(&["GET", "g"]), bulk("abcd"));
    }

    // Goal: MSETNX with a repeated key sets it to its last value and answers 1, as Redis
    // does (review C8). Method: MSETNX a 1 a 2, then GET a; and the same beside another key.
    #[test]
    fn msetnx_repeated_key_takes_its_last_value() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["MSETNX", "a", "1", "a", "2"]), Frame::Integer(1));
        assert_eq!(h.run(&["GET", "a"]), bulk("2"));
        assert_eq!(
            h.run(&["MSETNX", "b", "1", "c", "x", "b", "3"]),
            Frame::Integer(1)
        );
        assert_eq!(h.run(&["MGET", "b", "c"]), bulks(&["3", "x"]));
        assert_eq!(h.run(&["MSETNX", "a", "9", "a", "8"]), Frame::Integer(0));
        assert_eq!(h.run(&["GET", "a"]), bulk("2"));
    }

    // Goal: MSETNX's 0 (and SETNX's) waits until the write it saw is durable (review C7).
    // Method: client A's pipeline sets k and is not yet waited for; client B's MSETNX k x
    // (then SETNX k x) answers 0; a power loss right after: k must hold A's value, as B's
    // answer said it existed.
    #[test]
    fn msetnx_zero_waits_for_what_it_read() {
        for cmd in [
            &["MSETNX", "k", "x"][..],
            &["MSETNX", "j", "1", "k", "x"],
            &["SETNX", "k", "x"],
        ] {
            let dir = SimDir::new(2);
            let shared = sim_shared(&dir, Durability::Sync);
            let mut batch_a = shared.store.batch();
            assert_eq!(
                run_in(&shared, &mut batch_a, &["SET", "k", "v"]),
                Frame::ok()
            );
            assert_eq!(run_alone(&shared, cmd), Frame::Integer(0), "{cmd:?}");
            dir.crash_with(CrashMode::DropUnsynced);
            std::mem::forget(batch_a);
            std::mem::forget(shared);
            let after = sim_shared(&dir, Durability::Sync);
            assert_eq!(
                run_alone(&after, &["GET", "k"]),
                bulk("v"),
                "{cmd:?} answered 0, yet k was not durable"
            );
        }
    }

    // Goal: MSET over a key holding a collection is whole after a crash: the collection's
    // removal and the new strings are one atomic batch (review C9). Method: SADD k with 200
    // members; a pipeline's MSET k new j new whose one fsync fails (part of its bytes may
    // reach the disk), a power loss; after reopening (and the collection repair): either k is
    // the whole set and j absent, or k and j are MSET's strings.
    #[test]
    fn mset_over_a_collection_is_whole_after_a_crash() {
        let members: Vec<String> = (0..200)
            .map(|i| format!("member-{i:04}-{}", "x".repeat(40)))
            .collect();
        let mut sadd = vec!["SADD", "k"];
        sadd.extend(members.iter().map(|s| s.as_str()));
        let (mut old, mut new) = (0, 0);
        for seed in 0..100 {
            let dir = SimDir::new(seed);
            let shared = sim_shared(&dir, Durability::Group);
            assert_eq!(run_alone(&shared, &sadd), Frame::Integer(200));
            run_alone(&shared, &["SET", "other", "1"]);
            let mut batch = shared.store.batch();
            assert_eq!(
                run_in(&shared, &mut batch, &["MSET", "k", "new", "j", "new"]),
                Frame::ok()
            );
            dir.set_faults(FaultPlan::sync(1));
            // The group flusher may have synced the batch before the fault was set: then it
            // is acknowledged, and must be there whole after the crash.
            let acked = batch.wait().is_ok();
            dir.set_faults(FaultPlan::default());
            dir.crash_with(CrashMode::DropUnsynced);
            std::mem::forget(shared);
            let after = sim_shared(&dir, Durability::Group);
            if acked {
                assert_eq!(run_alone(&after, &["GET", "k"]), bulk("new"), "seed {seed}");
            }
            let state = (
                run_alone(&after, &["TYPE", "k"]),
                run_alone(&after, &["SCARD", "k"]),
                run_alone(&after, &["GET", "j"]),
            );
            if state
                == (
                    Frame::Simple("set".into()),
                    Frame::Integer(200),
                    Frame::Null,
                )
            {
                old += 1;
            } else if state.0 == Frame::Simple("string".into()) {
                assert_eq!(run_alone(&after, &["GET", "k"]), bulk("new"), "seed {seed}");
                assert_eq!(state.2, bulk("new"), "seed {seed}: MSET is whole");
                new += 1;
            } else {
                panic!("seed {seed}: MSET over a set is not whole after a crash: {state:?}");
            }
            assert_eq!(
                run_alone(&after, &["GET", "other"]),
                bulk("1"),
                "seed {seed}"
            );
        }
        assert!(old + new == 100, "{old} old, {new} new");
    }

    // Goal: a collection command touching several keys (its members and its type entry) is
    // whole after a crash (issue 12 "Atomic batches"). Method: on a set of 20 members, a
    // pipeline runs SADD of 100 new members, SREM of 10 old ones and HSET of 50 fields of a
    // new hash; its fsync fails and the power is lost (scattered write-back of the unsynced
    // pages); after reopening, each collection is exactly before or exactly after its
    // command, and its count matches its members.
    #[test]
    fn collection_commands_are_whole_after_a_crash() {
        let old: Vec<String> = (0..20).map(|i| format!("old-{i:03}")).collect();
        let new: Vec<String> = (0..100)
            .map(|i| format!("new-{i:03}-{}", "y".repeat(30)))
            .collect();
        let mut sadd_old = vec!["SADD", "s"];
        sadd_old.extend(old.iter().map(String::as_str));
        let mut sadd_new = vec!["SADD", "s"];
        sadd_new.extend(new.iter().map(String::as_str));
        let mut srem = vec!["SREM", "s"];
        srem.extend(old[..10].iter().map(String::as_str));
        let mut hset = vec!["HSET", "h"];
        let fields: Vec<String> = (0..50).map(|i| format!("f{i:02}")).collect();
        for f in &fields {
            hset.push(f.as_str());
            hset.push("value-of-some-length");
        }
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..60 {
            let dir = SimDir::new(seed);
            let shared = sim_shared(&dir, Durability::Group);
            assert_eq!(run_alone(&shared, &sadd_old), Frame::Integer(20));
            let mut batch = shared.store.batch();
            assert_eq!(run_in(&shared, &mut batch, &sadd_new), Frame::Integer(100));
            assert_eq!(run_in(&shared, &mut batch, &srem), Frame::Integer(10));
            assert_eq!(run_in(&shared, &mut batch, &hset), Frame::Integer(50));
            dir.set_faults(FaultPlan::sync(1));
            // The group flusher may have synced the pipeline before the fault was set: then
            // it is acknowledged, and every command must be there after the crash.
            let acked = batch.wait().is_ok();
            dir.set_faults(FaultPlan::default());
            dir.crash_with(if seed % 2 == 0 {
                CrashMode::Scatter
            } else {
                CrashMode::Random
            });
            std::mem::forget(shared);
            let after = sim_shared(&dir, Durability::Group);
            let scard = run_alone(&after, &["SCARD", "s"]);
            let members = match run_alone(&after, &["SMEMBERS", "s"]) {
                Frame::Array(items) => items.len() as i64,
                other => panic!("seed {seed}: SMEMBERS {other:?}"),
            };
            assert_eq!(
                scard,
                Frame::Integer(members),
                "seed {seed}: count and members"
            );
            // Before SADD: 20; after SADD: 120; after SREM too: 110.
            assert!(
                matches!(scard, Frame::Integer(20 | 120 | 110)),
                "seed {seed}: the set holds part of a command: {scard:?}"
            );
            if acked {
                assert_eq!(scard, Frame::Integer(110), "seed {seed}: acknowledged");
            }
            let hlen = run_alone(&after, &["HLEN", "h"]);
            assert!(
                matches!(hlen, Frame::Integer(0 | 50)),
                "seed {seed}: the hash holds part of HSET: {hlen:?}"
            );
            if acked {
                assert_eq!(hlen, Frame::Integer(50), "seed {seed}: acknowledged");
            }
            seen.insert((format!("{scard:?}"), format!("{hlen:?}")));
        }
        assert!(
            seen.len() > 1,
            "the crashes kept different prefixes: {seen:?}"
        );
    }
}
