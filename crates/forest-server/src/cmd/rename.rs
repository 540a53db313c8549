//! RENAME, RENAMENX and COPY for every type (Redis's src/db.c), and the replacement of a key
//! of any type by a string (BITOP's destination).
//!
//! A string is one entry; a collection is its type entry and its member entries under its
//! name ([`crate::collection`]), so renaming or copying one rewrites every member key under
//! the new name. Each command holds the stripe locks of both keys ([`lock_many`]) and
//! writes everything — the new entries, the removal of the source (RENAME) and of a
//! destination it replaces — as one atomic batch: after a crash, and to every reader, the
//! key is at its old name or its new one, never at both or neither. The cost is one entry
//! written per member (Redis moves a pointer), and the batch holds the whole collection.
//!
//! [`lock_many`]: crate::collection::Collections::lock_many

use std::ops::{Bound, ControlFlow};

use forest_core::Order;
use forest_store::WriteBatch;

use super::{coll, expire, int_arg, is_word, syntax_error, Ctx, Reply};
use crate::collection::{member_key, member_prefix, type_key, Meta};
use crate::frame::Frame;

/// What a key holds, read whole under its stripe lock.
enum Content {
    String(Vec<u8>),
    /// The type entry and the members as (suffix after the member prefix, value).
    Collection {
        meta: Meta,
        members: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

/// The content of `key`, or None. Precondition: `key`'s stripe lock is held.
fn read_content(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Option<Content>, Frame> {
    let mut value = Vec::new();
    if ctx.read(key, &mut value) {
        return Ok(Some(Content::String(value)));
    }
    if !ctx.shared.collections.any() {
        return Ok(None);
    }
    let Some(meta) = coll::read_meta(ctx, key)? else {
        return Ok(None);
    };
    let prefix = member_prefix(key);
    let end = coll::prefix_upper(&prefix);
    let mut members = Vec::new();
    ctx.scan(
        Bound::Included(prefix.as_slice()),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        &mut |k, v| {
            members.push((k[prefix.len()..].to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        },
    );
    Ok(Some(Content::Collection { meta, members }))
}

/// Whether `key` holds anything (a string or a collection, even one whose type entry is
/// damaged).
fn exists(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> bool {
    ctx.present(key) || !matches!(coll::kind_of(ctx, key), Ok(None))
}

/// Adds to `batch` the writes that make `key` hold `content`; returns the reserved entries
/// they add (0 for a string).
fn put_content(batch: &mut WriteBatch, key: &[u8], content: &Content) -> Result<i64, Frame> {
    match content {
        Content::String(value) => {
            coll::check_member(key, value)?;
            batch.put(key, value);
            Ok(0)
        }
        Content::Collection { meta, members } => {
            let prefix = member_prefix(key);
            for (suffix, value) in members {
                let member = member_key(&prefix, &[suffix]);
                coll::check_member(&member, value)?;
                batch.put(&member, value);
            }
            batch.put(&type_key(key), &meta.encode());
            Ok(members.len() as i64 + 1)
        }
    }
}

/// Adds to `batch` the removal of `key`'s own `content` (read by [`read_content`]).
fn remove_content(batch: &mut WriteBatch, key: &[u8], content: &Content) {
    match content {
        Content::String(_) => {
            batch.remove(key);
        }
        Content::Collection { members, .. } => {
            let prefix = member_prefix(key);
            for (suffix, _) in members {
                batch.remove(&member_key(&prefix, &[suffix]));
            }
            batch.remove(&type_key(key));
        }
    }
}

/// What removing a destination changed: the store entries of a collection removed.
#[derive(Default)]
struct Replaced {
    collection_keys: Option<i64>,
}

/// Adds to `batch` the removal of whatever `key` holds. Precondition: its stripe lock is
/// held; [`Replaced::settle`] follows a successful write.
fn remove_any(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    batch: &mut WriteBatch,
) -> Result<Replaced, Frame> {
    if ctx.present(key) {
        batch.remove(key);
        return Ok(Replaced::default());
    }
    if !ctx.shared.collections.any() {
        return Ok(Replaced::default());
    }
    Ok(Replaced {
        collection_keys: coll::delete_into(ctx, key, batch)?,
    })
}

impl Replaced {
    /// Lowers the collection counters once the batch is written.
    fn settle(self, ctx: &Ctx<'_, '_>) {
        if let Some(keys) = self.collection_keys {
            coll::deleted(ctx, keys);
        }
    }
}

/// Makes `key` hold the string `value`, or nothing (None), whatever it held, without a
/// deadline, in one atomic batch. Precondition: `key`'s stripe lock is held.
pub fn replace_locked(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), Frame> {
    expire::purge_due(ctx, key)?;
    let mut batch = WriteBatch::new();
    if let Some(value) = value {
        coll::check_member(key, value)?;
    }
    let replaced = remove_any(ctx, key, &mut batch)?;
    if let Some(value) = value {
        batch.put(key, value);
    }
    if batch.is_empty() {
        return Ok(());
    }
    expire::in_unit(ctx, |ctx| {
        ctx.write(&batch)?;
        expire::stage_deadline(ctx, key, None)
    })?;
    replaced.settle(ctx);
    Ok(())
}

fn no_such_key() -> Frame {
    Frame::err("no such key")
}

/// RENAME source destination: `+OK`; the destination, of any type, is replaced.
pub fn rename(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    rename_generic(ctx, argv[1], argv[2], false)
}

/// RENAMENX source destination: 1 if renamed, 0 if the destination exists.
pub fn renamenx(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    rename_generic(ctx, argv[1], argv[2], true)
}

fn rename_generic(ctx: &mut Ctx<'_, '_>, from: &[u8], to: &[u8], nx: bool) -> Reply {
    let done = if nx { Frame::Integer(1) } else { Frame::ok() };
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many([from, to].into_iter());
    // Due keys are absent: deleted first, so that no deadline of theirs is left behind.
    expire::purge_due(ctx, from)?;
    expire::purge_due(ctx, to)?;
    let Some(content) = read_content(ctx, from)? else {
        return Err(no_such_key());
    };
    if from == to {
        return Ok(if nx { Frame::Integer(0) } else { Frame::ok() });
    }
    if nx && exists(ctx, to) {
        return Ok(Frame::Integer(0));
    }
    let deadline = ctx.deadline(from);
    let mut batch = WriteBatch::new();
    let replaced = remove_any(ctx, to, &mut batch)?;
    put_content(&mut batch, to, &content)?;
    remove_content(&mut batch, from, &content);
    // The source's deadline moves with it (a replaced destination's goes), in the same
    // batch: no entry is left under the old name to delete a later key of that name.
    // The content first, so that the deadline goes where the key's kind keeps it (a
    // string's in its value, a collection's in an `FF 'E'` entry); a deadline that cannot
    // be stored fails the unit, which is then dropped whole.
    let string = match &content {
        Content::String(value) => Some(value.as_slice()),
        Content::Collection { .. } => None,
    };
    expire::check_deadline_fits(to, deadline, string)?;
    expire::in_unit(ctx, |ctx| {
        ctx.write(&batch)?;
        expire::stage_deadline(ctx, to, deadline)?;
        expire::stage_deadline(ctx, from, None)
    })?;
    // The source's reserved entries moved to the new name: the counts change only by
    // the destination replaced.
    replaced.settle(ctx);
    Ok(done)
}

/// COPY source destination [DB index] [REPLACE]: 1 if copied, 0 if the source is missing or
/// the destination exists without REPLACE.
pub fn copy(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (from, to) = (argv[1], argv[2]);
    let mut replace = false;
    let mut i = 3;
    while i < argv.len() {
        if is_word(argv[i], "replace") {
            replace = true;
        } else if is_word(argv[i], "db") && i + 1 < argv.len() {
            let db = int_arg(argv[i + 1])?;
            // Redis checks the index fits an int before selecting.
            if i32::try_from(db).is_err() {
                return Err(Frame::err(
                    "value is out of range, value must between -2147483648 and 2147483647",
                ));
            }
            if db != 0 {
                return Err(Frame::err("DB index is out of range"));
            }
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    if from == to {
        return Err(Frame::err("source and destination objects are the same"));
    }
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many([from, to].into_iter());
    expire::purge_due(ctx, from)?;
    expire::purge_due(ctx, to)?;
    let Some(content) = read_content(ctx, from)? else {
        return Ok(Frame::Integer(0));
    };
    if exists(ctx, to) && !replace {
        return Ok(Frame::Integer(0));
    }
    let mut batch = WriteBatch::new();
    let replaced = remove_any(ctx, to, &mut batch)?;
    let added = put_content(&mut batch, to, &content)?;
    // The copy has the source's deadline; a replaced destination's goes.
    let deadline = ctx.deadline(from);
    let string = match &content {
        Content::String(value) => Some(value.as_slice()),
        Content::Collection { .. } => None,
    };
    expire::check_deadline_fits(to, deadline, string)?;
    expire::in_unit(ctx, |ctx| {
        ctx.write(&batch)?;
        expire::stage_deadline(ctx, to, deadline)
    })?;
    replaced.settle(ctx);
    if added > 0 {
        ctx.shared.collections.add_reserved(added);
        ctx.shared.collections.add_live(1);
    }
    Ok(Frame::Integer(1))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;
    use forest_store::file::{CrashMode, FaultPlan, SimDir};
    use forest_store::Durability;

    fn err(text: &str) -> Frame {
        Frame::Error(text.into())
    }

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    /// Every collection type, filled, under names prefixed by `p`.
    fn fill(h: &mut Harness, p: &str) {
        h.run(&["RPUSH", &format!("{p}list"), "a", "b", "c"]);
        h.run(&["SADD", &format!("{p}set"), "x", "y"]);
        h.run(&["HSET", &format!("{p}hash"), "f", "v", "g", "w"]);
        h.run(&["ZADD", &format!("{p}zset"), "2", "two", "1", "one"]);
        h.run(&["XADD", &format!("{p}stream"), "1-1", "k", "v"]);
        h.run(&["SET", &format!("{p}string"), "s"]);
    }

    /// Every type's content under names prefixed by `p`, as replies.
    fn contents(h: &mut Harness, p: &str) -> Vec<Frame> {
        vec![
            h.run(&["LRANGE", &format!("{p}list"), "0", "-1"]),
            h.run(&["SMEMBERS", &format!("{p}set")]),
            h.run(&["HGETALL", &format!("{p}hash")]),
            h.run(&["ZRANGE", &format!("{p}zset"), "0", "-1", "WITHSCORES"]),
            h.run(&["XRANGE", &format!("{p}stream"), "-", "+"]),
            h.run(&["GET", &format!("{p}string")]),
        ]
    }

    // Goal: RENAME moves every type whole (members, counts, list ends, stream ids) and the
    // old name is gone; DBSIZE and the reserved counts stay exact.
    // Method: one key of each type renamed, contents compared, writes after the rename.
    #[test]
    fn rename_every_type() {
        let mut h = Harness::new();
        fill(&mut h, "a:");
        let before = contents(&mut h, "a:");
        for t in ["list", "set", "hash", "zset", "stream", "string"] {
            assert_eq!(
                h.run(&["RENAME", &format!("a:{t}"), &format!("b:{t}")]),
                Frame::ok()
            );
        }
        assert_eq!(contents(&mut h, "b:"), before);
        assert_eq!(h.run(&["EXISTS", "a:list", "a:set", "a:string"]), int(0));
        assert_eq!(h.run(&["DBSIZE"]), int(6));
        assert_eq!(h.run(&["RPUSH", "b:list", "d"]), int(4));
        assert_eq!(h.run(&["LPOP", "b:list"]), bulk("a"));
        assert_eq!(
            h.run(&["XADD", "b:stream", "1-1", "k", "v"]),
            err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        );
        assert_eq!(h.run(&["TYPE", "b:zset"]), Frame::Simple("zset".into()));
        let reserved = h.shared.collections.reserved_count();
        assert_eq!(h.run(&["FLUSHALL"]), Frame::ok());
        assert_eq!(h.shared.collections.reserved_count(), 0, "was {reserved}");
        assert_eq!(h.entries(), 0);
    }

    // Goal: RENAME replaces a destination of any type; RENAMENX refuses an existing one;
    // same-name and missing-source cases answer as Redis (keyspace.tcl).
    // Method: each case, then the types and DBSIZE.
    #[test]
    fn rename_cases() {
        let mut h = Harness::new();
        h.run(&["SET", "s", "v"]);
        h.run(&["SADD", "set", "m1", "m2"]);
        h.run(&["HSET", "h", "f", "v"]);
        assert_eq!(h.run(&["RENAME", "s", "set"]), Frame::ok());
        assert_eq!(h.run(&["GET", "set"]), bulk("v"));
        assert_eq!(h.run(&["RENAME", "h", "set"]), Frame::ok());
        assert_eq!(h.run(&["HGET", "set", "f"]), bulk("v"));
        assert_eq!(h.run(&["DBSIZE"]), int(1));
        assert_eq!(h.run(&["RENAME", "none", "x"]), err("ERR no such key"));
        assert_eq!(h.run(&["RENAMENX", "none", "x"]), err("ERR no such key"));
        assert_eq!(h.run(&["RENAME", "none", "none"]), err("ERR no such key"));
        assert_eq!(h.run(&["RENAME", "set", "set"]), Frame::ok());
        assert_eq!(h.run(&["RENAMENX", "set", "set"]), int(0));
        h.run(&["SET", "t", "1"]);
        assert_eq!(h.run(&["RENAMENX", "set", "t"]), int(0));
        assert_eq!(h.run(&["RENAMENX", "set", "u"]), int(1));
        assert_eq!(h.run(&["HGET", "u", "f"]), bulk("v"));
        assert_eq!(h.run(&["DBSIZE"]), int(2));
        assert_eq!(h.shared.collections.live_count(), 1);
        assert_eq!(h.shared.collections.reserved_count(), 2);
    }

    // Goal: COPY copies every type whole and independently, honours REPLACE, refuses other
    // databases and the same key with Redis's texts.
    // Method: copy each type, change the copy, compare with the original.
    #[test]
    fn copy_every_type() {
        let mut h = Harness::new();
        fill(&mut h, "a:");
        let original = contents(&mut h, "a:");
        for t in ["list", "set", "hash", "zset", "stream", "string"] {
            assert_eq!(
                h.run(&["COPY", &format!("a:{t}"), &format!("b:{t}")]),
                int(1)
            );
        }
        assert_eq!(contents(&mut h, "b:"), original);
        assert_eq!(h.run(&["DBSIZE"]), int(12));
        h.run(&["RPUSH", "b:list", "z"]);
        h.run(&["SADD", "b:set", "new"]);
        assert_eq!(contents(&mut h, "a:"), original);
        assert_eq!(h.run(&["COPY", "a:set", "b:string"]), int(0));
        assert_eq!(h.run(&["COPY", "a:set", "b:string", "REPLACE"]), int(1));
        assert_eq!(h.run(&["TYPE", "b:string"]), Frame::Simple("set".into()));
        assert_eq!(
            h.run(&["COPY", "a:string", "b:list", "replace", "DB", "0"]),
            int(1)
        );
        assert_eq!(h.run(&["GET", "b:list"]), bulk("s"));
        assert_eq!(h.run(&["COPY", "none", "x"]), int(0));
        assert_eq!(
            h.run(&["COPY", "a:set", "a:set"]),
            err("ERR source and destination objects are the same")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "DB", "1"]),
            err("ERR DB index is out of range")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "DB", "-1"]),
            err("ERR DB index is out of range")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "DB", "z"]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "DB", "99999999999"]),
            err("ERR value is out of range, value must between -2147483648 and 2147483647")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "DB"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["COPY", "a:set", "x", "NOPE"]),
            err("ERR syntax error")
        );
        assert_eq!(h.run(&["DBSIZE"]), int(12));
        let collections = h.shared.collections.live_count();
        assert_eq!(collections, 10);
        let mut h = h.restart();
        assert_eq!(h.run(&["DBSIZE"]), int(12));
        assert_eq!(contents(&mut h, "a:"), original);
    }

    // Goal: RENAME and COPY of a collection are whole after a crash: the new member entries,
    // the removal of the old ones and of the replaced destination are one atomic batch
    // (issue 15 "Writes are atomic single store batches"). Method: a 200-member set `src`
    // and a 50-field hash `dst`; a pipeline runs RENAME src dst (or COPY src dst REPLACE)
    // whose fsync fails, then the power is lost (scattered write-back); after reopening,
    // the keyspace is exactly before or exactly after the command, with exact counts.
    #[test]
    fn rename_and_copy_are_whole_after_a_crash() {
        let members: Vec<String> = (0..200)
            .map(|i| format!("member-{i:04}-{}", "x".repeat(30)))
            .collect();
        let mut sadd = vec!["SADD", "src"];
        sadd.extend(members.iter().map(String::as_str));
        let mut hset = vec!["HSET", "dst"];
        let fields: Vec<String> = (0..50).map(|i| format!("f{i:02}")).collect();
        for f in &fields {
            hset.push(f.as_str());
            hset.push("value-of-some-length");
        }
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..60 {
            let copy = seed % 2 == 1;
            let dir = SimDir::new(seed);
            let shared = sim_shared(&dir, Durability::Group);
            assert_eq!(run_alone(&shared, &sadd), Frame::Integer(200));
            assert_eq!(run_alone(&shared, &hset), Frame::Integer(50));
            let mut batch = shared.store.batch();
            let command: &[&str] = if copy {
                &["COPY", "src", "dst", "REPLACE"]
            } else {
                &["RENAME", "src", "dst"]
            };
            let reply = run_in(&shared, &mut batch, command);
            assert!(
                reply == Frame::ok() || reply == Frame::Integer(1),
                "{reply:?}"
            );
            dir.set_faults(FaultPlan::sync(1));
            let acked = batch.wait().is_ok();
            dir.set_faults(FaultPlan::default());
            dir.crash_with(if seed % 4 < 2 {
                CrashMode::Scatter
            } else {
                CrashMode::Random
            });
            std::mem::forget(shared);
            let after = sim_shared(&dir, Durability::Group);
            let state = (
                run_alone(&after, &["TYPE", "src"]),
                run_alone(&after, &["SCARD", "src"]),
                run_alone(&after, &["TYPE", "dst"]),
                run_alone(&after, &["DBSIZE"]),
            );
            let set = || Frame::Simple("set".into());
            let before = (
                set(),
                Frame::Integer(200),
                Frame::Simple("hash".into()),
                Frame::Integer(2),
            );
            let done = if copy {
                (set(), Frame::Integer(200), set(), Frame::Integer(2))
            } else {
                (
                    Frame::Simple("none".into()),
                    Frame::Integer(0),
                    set(),
                    Frame::Integer(1),
                )
            };
            assert!(
                state == before || state == done,
                "seed {seed}: {command:?} is not whole after a crash: {state:?}"
            );
            if acked {
                assert_eq!(state, done, "seed {seed}: acknowledged");
            }
            if state == done {
                assert_eq!(run_alone(&after, &["SCARD", "dst"]), Frame::Integer(200));
                assert_eq!(
                    run_alone(&after, &["HLEN", "dst"]),
                    super::super::coll::wrongtype()
                );
            } else {
                assert_eq!(run_alone(&after, &["HLEN", "dst"]), Frame::Integer(50));
            }
            outcomes.insert(state == done);
        }
        assert_eq!(
            outcomes.len(),
            2,
            "the crashes kept both outcomes: {outcomes:?}"
        );
    }
}
