//! BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMOVE, BRPOPLPUSH, BLMPOP, BZMPOP and CLIENT UNBLOCK
//! (docs/PROTOCOL.md "Blocking pops"; the registry and the order of service are
//! [`crate::blocking`]'s).
//!
//! A blocking pop first tries its keys in argument order under the stripe locks of all of
//! them (and of a move's destination), each as the non-blocking form would (LPOP, ZPOPMIN,
//! LMOVE, LMPOP, ZMPOP, whose cores `lmove` and `zsetops` share); if all are empty it registers
//! the client as waiting on them, still under those locks, and the connection holds its reply
//! (and the commands pipelined after it) until [`resume`] answers: served when a key became
//! ready, or null at the timeout. Inside EXEC it answers null at once, as Redis does; Redis
//! 7.0 refuses these commands in scripts (flag `noscript`), and so does forest.
//! XREAD and XREADGROUP with BLOCK (`stream::read_or_block`) wait the same way and are
//! resumed here too ([`Pop::Stream`]).

use std::time::{Duration, Instant};

use forest_core::Order;

use super::coll::{self, null_array};
use super::lmove::{self, mpop_args, End};
use super::{int_arg, is_word, list, printable, wrong_arity, zset, zsetops, Ctx, Reply};
use crate::blocking::{Pop, Unblock, Waiting, Wake};
use crate::collection::Kind;
use crate::frame::Frame;

/// `i64::MAX` as a double: Redis converts the milliseconds to a `long long`, and a value
/// past it (infinities too) comes out negative on the machines Redis runs on.
const MS_LIMIT: f64 = 9_223_372_036_854_775_807.0;

/// A timeout in seconds as Redis 7.0 reads it (a double; 0 waits forever, as does one
/// below a millisecond, which Redis truncates to 0): None for forever.
pub fn timeout_arg(arg: &[u8]) -> Result<Option<Duration>, Frame> {
    let bad = || Frame::err("timeout is not a float or out of range");
    let text = std::str::from_utf8(arg).map_err(|_| bad())?;
    let seconds: f64 = text.parse().map_err(|_| bad())?;
    if seconds.is_nan() {
        return Err(bad());
    }
    let ms = (seconds * 1000.0).trunc();
    if !(0.0..MS_LIMIT).contains(&ms) {
        return Err(Frame::err("timeout is negative"));
    }
    Ok((ms > 0.0).then(|| Duration::from_millis(ms as u64)))
}

/// Serves `pop` from `key`: the reply (`[key, element]`, `[key, member, score]`, the element
/// moved, `[key, [...]]`), or None if the key is empty or absent. Takes the key's stripe
/// lock, and the destination's for a move (re-entrant: callers hold them already).
fn pop_from(ctx: &mut Ctx<'_, '_>, pop: &Pop, key: &[u8]) -> Result<Option<Frame>, Frame> {
    let end = |left: bool| if left { End::Left } else { End::Right };
    let order = |max: bool| {
        if max {
            Order::Descending
        } else {
            Order::Ascending
        }
    };
    match pop {
        Pop::List { left } => {
            let argv: [&[u8]; 2] = [b"lpop", key];
            let value = if *left {
                list::lpop(ctx, &argv)?
            } else {
                list::rpop(ctx, &argv)?
            };
            Ok(match value {
                Frame::Null => None,
                value => Some(Frame::Array(vec![Frame::bulk(key), value])),
            })
        }
        Pop::ZSet { max } => {
            let argv: [&[u8]; 2] = [b"zpopmin", key];
            let popped = if *max {
                zset::zpopmax(ctx, &argv)?
            } else {
                zset::zpopmin(ctx, &argv)?
            };
            Ok(match popped {
                Frame::Array(mut items) if items.len() == 2 => {
                    items.insert(0, Frame::bulk(key));
                    Some(Frame::Array(items))
                }
                _ => None,
            })
        }
        Pop::Move {
            dest,
            from_left,
            to_left,
        } => {
            let moved = lmove::move_element(ctx, key, dest, end(*from_left), end(*to_left))?;
            Ok(moved.map(Frame::Bulk))
        }
        Pop::ListMany { left, count } => lmove::pop_first(ctx, &[key], end(*left), *count),
        Pop::ZSetMany { max, count } => zsetops::pop_first(ctx, &[key], order(*max), *count),
        Pop::Stream(args) => super::stream::read_one(ctx, args, key),
    }
}

/// The keys whose stripes a blocked `pop` on `keys` holds: the destination of a move too.
fn lock_keys<'k>(keys: &'k [&'k [u8]], pop: &'k Pop) -> impl Iterator<Item = &'k [u8]> {
    let dest = match pop {
        Pop::Move { dest, .. } => Some(dest.as_slice()),
        _ => None,
    };
    keys.iter().copied().chain(dest)
}

/// A blocking command with its arguments parsed (see the module doc): serves it from the
/// first non-empty key in argument order, or registers the client as waiting.
fn block_on(ctx: &mut Ctx<'_, '_>, keys: &[&[u8]], timeout: Option<Duration>, pop: Pop) -> Reply {
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(lock_keys(keys, &pop));
    for key in keys {
        if let Some(reply) = pop_from(ctx, &pop, key)? {
            return Ok(reply);
        }
    }
    // EXEC runs it as the non-blocking form (Redis's CLIENT_DENY_BLOCKING): LMOVE's null,
    // the others' null array.
    if ctx.unit.as_ref().is_some_and(|u| u.txn) {
        return Ok(match pop {
            Pop::Move { .. } => Frame::Null,
            _ => null_array(ctx),
        });
    }
    let blocked = shared.blocking.register(ctx.client.info.id, keys);
    ctx.client.blocking.waiting = Some(Waiting {
        blocked,
        pop,
        keys: keys.iter().map(|k| k.to_vec()).collect(),
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
    });
    // Not sent: the connection answers when the wait ends ([`resume`]).
    Ok(Frame::Null)
}

/// `B*POP key [key ...] timeout`.
fn blocking_pop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], pop: Pop) -> Reply {
    let (timeout, keys) = argv[1..]
        .split_last()
        .ok_or_else(|| wrong_arity(&String::from_utf8_lossy(argv[0]).to_ascii_lowercase()))?;
    // Redis reads the timeout before it looks at any key.
    let timeout = timeout_arg(timeout)?;
    block_on(ctx, keys, timeout, pop)
}

/// Goes on with the connection's blocked command after `wake`: its reply (the wait is
/// over and the client deregistered), or None if it still waits (what woke it was taken
/// by another client first; it stays first in line).
pub fn resume(ctx: &mut Ctx<'_, '_>, wake: Wake) -> Option<Frame> {
    let reader = matches!(
        ctx.client.blocking.waiting.as_ref().map(|w| &w.pop),
        Some(Pop::Stream(_))
    );
    let noted = ctx.client.blocking.ready.len();
    let reply = resume_pop(ctx, wake);
    // A stream read's own writes (XREADGROUP's PEL and consumer records) add no entry:
    // they wake nobody, as in Redis; else a reader that found nothing would wake itself
    // again and again.
    if reader {
        ctx.client.blocking.ready.truncate(noted);
    }
    reply
}

fn resume_pop(ctx: &mut Ctx<'_, '_>, wake: Wake) -> Option<Frame> {
    let waiting = ctx.client.blocking.waiting.as_ref()?;
    let (pop, keys) = (waiting.pop.clone(), waiting.keys.clone());
    let ready = match wake {
        Wake::Ready(ready) => ready,
        Wake::Timeout | Wake::Unblocked(Unblock::Timeout) | Wake::Stopped => {
            ctx.client.blocking.waiting = None;
            return Some(null_array(ctx));
        }
        Wake::Unblocked(Unblock::Error) => {
            ctx.client.blocking.waiting = None;
            return Some(Frame::Error(
                "UNBLOCKED client unblocked via CLIENT UNBLOCK".into(),
            ));
        }
    };
    let shared = ctx.shared;
    let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let _guards = shared.collections.lock_many(lock_keys(&key_refs, &pop));
    // The keys in the order they became ready, then the others (a key is offered to one
    // waiter at a time, so another may hold an element too).
    let order = ready
        .iter()
        .filter(|k| keys.contains(k))
        .chain(keys.iter().filter(|k| !ready.contains(k)));
    for key in order {
        match pop_from(ctx, &pop, key) {
            Ok(Some(reply)) => {
                // Deregisters; the next waiter of the key is woken for what is left.
                ctx.client.blocking.waiting = None;
                return Some(reply);
            }
            Ok(None) => {}
            // A move whose destination is now of another type: Redis answers WRONGTYPE
            // and ends the wait (the element stays in the source).
            Err(error)
                if matches!(pop, Pop::Move { .. })
                    && matches!(coll::open_read(ctx, key, Kind::List), Ok(Some(_))) =>
            {
                ctx.client.blocking.waiting = None;
                return Some(error);
            }
            // A key that is now of another type is passed over: the client keeps waiting,
            // as in Redis.
            Err(_) => {}
        }
    }
    None
}

/// BLPOP key [key ...] timeout: `[key, element]` from the head of the first non-empty list,
/// else waits; null array at the timeout.
pub fn blpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    blocking_pop(ctx, argv, Pop::List { left: true })
}

/// BRPOP key [key ...] timeout: as BLPOP, from the tail.
pub fn brpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    blocking_pop(ctx, argv, Pop::List { left: false })
}

/// BZPOPMIN key [key ...] timeout: `[key, member, score]` of the lowest score of the first
/// non-empty sorted set, else waits; null array at the timeout.
pub fn bzpopmin(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    blocking_pop(ctx, argv, Pop::ZSet { max: false })
}

/// BZPOPMAX key [key ...] timeout: as BZPOPMIN, the highest score.
pub fn bzpopmax(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    blocking_pop(ctx, argv, Pop::ZSet { max: true })
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout: LMOVE, waiting while the source
/// is empty; the element moved, or a null array at the timeout (null inside EXEC).
pub fn blmove(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    // Redis's order of errors: the ends, then the timeout.
    let (from, to) = (End::parse(argv[3])?, End::parse(argv[4])?);
    let timeout = timeout_arg(argv[5])?;
    let pop = Pop::Move {
        dest: argv[2].to_vec(),
        from_left: from == End::Left,
        to_left: to == End::Left,
    };
    block_on(ctx, &argv[1..2], timeout, pop)
}

/// BRPOPLPUSH source destination timeout: BLMOVE source destination RIGHT LEFT timeout.
pub fn brpoplpush(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let timeout = timeout_arg(argv[3])?;
    let pop = Pop::Move {
        dest: argv[2].to_vec(),
        from_left: false,
        to_left: true,
    };
    block_on(ctx, &argv[1..2], timeout, pop)
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]: LMPOP, waiting while every
/// list is empty; `[key, [element ...]]`, or a null array at the timeout.
pub fn blmpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    // Redis checks the rest of the line before the timeout.
    let args = mpop_args(&argv[2..], ["left", "right"])?;
    let timeout = timeout_arg(argv[1])?;
    let pop = Pop::ListMany {
        left: !args.second,
        count: args.count,
    };
    block_on(ctx, args.keys, timeout, pop)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]: ZMPOP, waiting while every
/// sorted set is empty; `[key, [[member, score], ...]]`, or a null array at the timeout.
pub fn bzmpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = mpop_args(&argv[2..], ["min", "max"])?;
    let timeout = timeout_arg(argv[1])?;
    let pop = Pop::ZSetMany {
        max: args.second,
        count: args.count,
    };
    block_on(ctx, args.keys, timeout, pop)
}

/// CLIENT UNBLOCK client-id [TIMEOUT|ERROR] (`args` after the subcommand `sub`): 1 if that
/// client was blocked and is now released (TIMEOUT: its command answers as at its timeout;
/// ERROR: `-UNBLOCKED client unblocked via CLIENT UNBLOCK`), else 0.
pub fn client_unblock(ctx: &mut Ctx<'_, '_>, sub: &[u8], args: &[&[u8]]) -> Reply {
    let (id, how) = match args {
        [] => return Err(wrong_arity("client|unblock")),
        [id] => (id, Unblock::Timeout),
        [id, reason] if is_word(reason, "timeout") => (id, Unblock::Timeout),
        [id, reason] if is_word(reason, "error") => (id, Unblock::Error),
        [_, _] => {
            return Err(Frame::err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
        _ => {
            return Err(Frame::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                printable(sub, 128)
            )))
        }
    };
    let id = int_arg(id)?;
    let released = u64::try_from(id).is_ok_and(|id| ctx.shared.blocking.unblock(id, how));
    Ok(Frame::Integer(i64::from(released)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    // Goal: Redis 7.0.15's timeout parsing and errors (checked against redis-server).
    // Method: each kind of argument.
    #[test]
    fn timeouts_as_redis_reads_them() {
        let not_float = Err(Frame::err("timeout is not a float or out of range"));
        let negative = Err(Frame::err("timeout is negative"));
        assert_eq!(timeout_arg(b"0"), Ok(None));
        assert_eq!(
            timeout_arg(b"0.0001"),
            Ok(None),
            "truncated to 0 ms: forever"
        );
        assert_eq!(timeout_arg(b"-0.0001"), Ok(None));
        assert_eq!(timeout_arg(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(timeout_arg(b"abc"), not_float);
        assert_eq!(timeout_arg(b" 1"), not_float);
        assert_eq!(timeout_arg(b"nan"), not_float);
        assert_eq!(timeout_arg(b"-1"), negative);
        assert_eq!(timeout_arg(b"inf"), negative);
        assert_eq!(timeout_arg(b"-inf"), negative);
        assert_eq!(timeout_arg(b"1e16"), negative);
        assert!(timeout_arg(b"1e15").is_ok_and(|t| t.is_some()));
    }

    // Goal: a non-empty key answers at once, in key order; errors as Redis (WRONGTYPE on an
    // empty key before a string; arity); inside EXEC an empty key answers a null array.
    // Method: one client, no waiting.
    #[test]
    fn immediate_replies_and_errors() {
        let mut h = Harness::new();
        h.run(&["RPUSH", "l", "a", "b"]);
        h.run(&["ZADD", "z", "1", "one", "2", "two"]);
        h.run(&["SET", "s", "v"]);
        assert_eq!(h.run(&["BLPOP", "none", "l", "0"]), bulks(&["l", "a"]));
        assert_eq!(h.run(&["BRPOP", "l", "0"]), bulks(&["l", "b"]));
        assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["BZPOPMIN", "z", "1"]),
            Frame::Array(vec![bulk("z"), bulk("one"), Frame::Double(1.0)])
        );
        assert_eq!(
            h.run(&["BZPOPMAX", "none", "z", "1"]),
            Frame::Array(vec![bulk("z"), bulk("two"), Frame::Double(2.0)])
        );
        let wrong = super::super::coll::wrongtype();
        assert_eq!(h.run(&["BLPOP", "none", "s", "1"]), wrong);
        assert_eq!(h.run(&["BZPOPMIN", "s", "1"]), wrong);
        assert_eq!(
            h.run(&["BLPOP", "s", "x"]),
            Frame::err("timeout is not a float or out of range")
        );
        assert_eq!(
            h.run(&["BLPOP", "k"]),
            Frame::err("wrong number of arguments for 'blpop' command")
        );
        assert!(!h.client.blocking.is_blocked());
        h.run(&["MULTI"]);
        h.run(&["BLPOP", "none", "0"]);
        h.run(&["BZPOPMIN", "none", "0"]);
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![Frame::NullArray, Frame::NullArray])
        );
        assert!(!h.client.blocking.is_blocked());
        assert_eq!(h.shared.blocking.blocked_clients(), 0);
    }

    // Goal: an empty key blocks; a push from another client wakes it with the element; a
    // woken client whose element was taken keeps waiting; CLIENT UNBLOCK. Method: two
    // clients on one harness, the wake-ups polled by hand.
    #[test]
    fn block_wake_and_serve() {
        let mut h = Harness::new();
        let mut other = h.shared.new_client("o".into(), "o".into(), None);
        h.run(&["BLPOP", "q", "0"]);
        assert!(h.client.blocking.is_blocked());
        assert_eq!(h.shared.blocking.blocked_clients(), 1);
        let waiter = h.client.blocking.waiter().expect("waiter");
        assert_eq!(waiter.poll(), None);
        run_on(&h.shared, &mut other, &[b"RPUSH", b"q", b"x"]);
        let wake = waiter.poll().expect("woken");
        assert_eq!(wake, Wake::Ready(vec![b"q".to_vec()]));
        // Another client takes it first: still waiting.
        run_on(&h.shared, &mut other, &[b"LPOP", b"q"]);
        assert_eq!(resume_on(&mut h, wake), None);
        assert!(h.client.blocking.is_blocked());
        run_on(&h.shared, &mut other, &[b"LPUSH", b"q", b"y"]);
        let wake = waiter.poll().expect("woken");
        assert_eq!(resume_on(&mut h, wake), Some(bulks(&["q", "y"])));
        assert!(!h.client.blocking.is_blocked());
        assert_eq!(h.shared.blocking.blocked_clients(), 0);
        assert_eq!(h.run(&["EXISTS", "q"]), Frame::Integer(0));

        h.run(&["BZPOPMAX", "z", "0"]);
        let id = h.client.info.id.to_string();
        let id = id.as_str();
        assert_eq!(
            unblock(&h.shared, &mut other, &[id, "later"]),
            Frame::err("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        );
        assert_eq!(
            unblock(&h.shared, &mut other, &["x"]),
            Frame::err("value is not an integer or out of range")
        );
        assert_eq!(
            unblock(&h.shared, &mut other, &[id, "ERROR"]),
            Frame::Integer(1)
        );
        assert_eq!(unblock(&h.shared, &mut other, &[id]), Frame::Integer(0));
        let wake = waiter_of(&h).poll().expect("woken");
        assert_eq!(
            resume_on(&mut h, wake),
            Some(Frame::Error(
                "UNBLOCKED client unblocked via CLIENT UNBLOCK".into()
            ))
        );
        assert_eq!(unblock(&h.shared, &mut other, &[id]), Frame::Integer(0));
    }

    fn unblock(
        shared: &crate::server::Shared,
        other: &mut crate::cmd::Client,
        args: &[&str],
    ) -> Frame {
        let mut argv: Vec<&[u8]> = vec![b"CLIENT", b"UNBLOCK"];
        argv.extend(args.iter().map(|a| a.as_bytes()));
        run_on(shared, other, &argv)
    }

    fn waiter_of(h: &Harness) -> std::sync::Arc<crate::blocking::Waiter> {
        h.client.blocking.waiter().expect("waiter")
    }

    fn resume_on(h: &mut Harness, wake: Wake) -> Option<Frame> {
        let mut batch = h.shared.store.batch();
        let mut buffers = super::super::Buffers::default();
        let mut ctx = Ctx {
            shared: &h.shared,
            client: &mut h.client,
            batch: &mut batch,
            unit: None,
            wrote: false,
            after: super::super::After::Continue,
            buffers: &mut buffers,
            now: Default::default(),
        };
        let reply = resume(&mut ctx, wake);
        h.client.blocking.flush(&h.shared.blocking);
        batch.wait().expect("wait");
        reply
    }
}
