//! Reads over a whole collection's members shared by the types: all of them in order, random
//! picks (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER) and cursor scans (HSCAN, SSCAN, ZSCAN), with
//! Redis's shapes.

use std::collections::HashSet;
use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::{syntax_error, Ctx, Reply};
use crate::collection::{member_key, member_prefix, score_from, Kind};
use crate::frame::Frame;
use crate::glob;
use crate::parse::is_word;

/// Where a collection's members begin: its member prefix, and for a sorted set the entries
/// keyed by member (`'n' <member>` -> score bytes), so a sorted set is sampled and scanned
/// in member order as a hash is.
fn base_prefix(user: &[u8], kind: Kind) -> Vec<u8> {
    let mut prefix = member_prefix(user);
    if kind == Kind::ZSet {
        prefix.extend_from_slice(super::zset::BY_NAME);
    }
    prefix
}

/// A sorted set's score bytes as ZSCAN prints them.
pub fn score_text(value: &[u8]) -> Vec<u8> {
    match <[u8; 8]>::try_from(value) {
        Ok(bytes) => crate::frame::double_text(score_from(bytes)).into_bytes(),
        Err(_) => value.to_vec(),
    }
}

/// A member (a hash's field, a set's member) and its value (empty for a set).
pub type Field = (Vec<u8>, Vec<u8>);

/// A random pick reads a collection of at most this many members whole and samples it
/// uniformly; a larger one is sampled at random points of the member space (not uniform: a
/// member after a wide gap is drawn more often, as RANDOMKEY's keys).
const RANDOM_READ_ALL_MAX: u64 = 4096;
/// The most members a negative HRANDFIELD / SRANDMEMBER count may ask for (a difference
/// from Redis, which has no bound: docs/PROTOCOL.md).
pub const RANDOM_REPEATS_MAX: u64 = 1 << 24;

/// Every member of collection `user` of type `kind` with its value, in member order (empty
/// if absent; WRONGTYPE if another type).
pub fn all(ctx: &mut Ctx<'_, '_>, user: &[u8], kind: Kind) -> Result<Vec<Field>, Frame> {
    if coll::open_read(ctx, user, kind)?.is_none() {
        return Ok(Vec::new());
    }
    let prefix = base_prefix(user, kind);
    let end = coll::prefix_upper(&prefix);
    let mut entries = coll::members(
        ctx,
        Bound::Included(&prefix),
        Bound::Excluded(&end),
        Order::Ascending,
        usize::MAX,
    );
    for (k, _) in &mut entries {
        k.drain(..prefix.len());
    }
    Ok(entries)
}

/// What HRANDFIELD, SRANDMEMBER and ZRANDMEMBER picked ([`random_command`]).
pub struct Picks {
    /// The members with their values, none for a missing key.
    pub items: Vec<Field>,
    /// The count given, if any: without one the reply is one member or null.
    pub count: Option<i64>,
    /// WITHVALUES / WITHSCORES was given.
    pub with_values: bool,
}

/// HRANDFIELD, SRANDMEMBER and ZRANDMEMBER's `key [count [WITH]]` (`with`: the option's word,
/// None where there is none): Redis's checks, then the picks, read under the key's stripe
/// lock so they come from one state. A count above the size gives every member once, a
/// negative one repeats; `noun` names the members in forest's own refusal.
pub fn random_command(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    kind: Kind,
    with: Option<&str>,
    noun: &str,
) -> Result<Picks, Frame> {
    let user = argv[1];
    let count = match argv.get(2) {
        Some(arg) => Some(super::int_arg(arg)?),
        None => None,
    };
    let with_values = match (argv.get(3), with) {
        (Some(opt), Some(word)) if argv.len() == 4 && is_word(opt, word) => true,
        (Some(_), _) => return Err(syntax_error()),
        (None, _) => false,
    };
    if count == Some(i64::MIN) {
        return Err(Frame::err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    // Redis refuses counts whose pairs would overflow its reply length.
    if with_values && count.is_some_and(|c| c.unsigned_abs() > (i64::MAX as u64) / 2) {
        return Err(Frame::err("value is out of range"));
    }
    // A negative count repeats without end; Redis would build that reply until memory runs
    // out, forest refuses it.
    if count.is_some_and(|c| c < 0 && c.unsigned_abs() > RANDOM_REPEATS_MAX) {
        return Err(Frame::err(format!(
            "value is out of range, forest returns at most {RANDOM_REPEATS_MAX} random {noun}"
        )));
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let Some(meta) = coll::open_read(ctx, user, kind)? else {
        return Ok(Picks {
            items: Vec::new(),
            count,
            with_values,
        });
    };
    let len = meta.count;
    let items = match count {
        None => random(ctx, user, kind, len, 1, true),
        Some(0) => Vec::new(),
        Some(c) if c > 0 => random(ctx, user, kind, len, c as u64, false),
        Some(c) => random(ctx, user, kind, len, c.unsigned_abs(), true),
    };
    Ok(Picks {
        items,
        count,
        with_values,
    })
}

/// The first member entry at or after a random 8-byte point of `prefix..end` (wrapping to
/// the first): random, not uniform (SPOP, and picks from large collections).
pub fn at_random_point(ctx: &Ctx<'_, '_>, prefix: &[u8], end: &[u8]) -> Option<Field> {
    let point = member_key(prefix, &[&ctx.shared.collections.random().to_be_bytes()]);
    let mut found = coll::members(
        ctx,
        Bound::Included(&point),
        Bound::Excluded(end),
        Order::Ascending,
        1,
    );
    if found.is_empty() {
        found = coll::members(
            ctx,
            Bound::Included(prefix),
            Bound::Excluded(end),
            Order::Ascending,
            1,
        );
    }
    found.pop()
}

/// `want` random members of collection `user` (`len` members, of type `kind`), repeating if
/// `repeat`, else distinct (all of them if `want` >= `len`).
pub fn random(
    ctx: &mut Ctx<'_, '_>,
    user: &[u8],
    kind: Kind,
    len: u64,
    want: u64,
    repeat: bool,
) -> Vec<Field> {
    let random = || ctx.shared.collections.random();
    if len == 0 {
        return Vec::new();
    }
    if !repeat && want >= len {
        return all(ctx, user, kind).unwrap_or_default();
    }
    if len <= RANDOM_READ_ALL_MAX {
        let mut all = all(ctx, user, kind).unwrap_or_default();
        if all.is_empty() {
            return all;
        }
        if repeat {
            return (0..want)
                .map(|_| all[(random() % all.len() as u64) as usize].clone())
                .collect();
        }
        // Distinct: remove random fields until `want` are left (order kept, as Redis's
        // case of a count close to the size).
        while all.len() as u64 > want {
            let i = (random() % all.len() as u64) as usize;
            all.remove(i);
        }
        return all;
    }
    let prefix = base_prefix(user, kind);
    let end = coll::prefix_upper(&prefix);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    // Distinct picks at random points give up after this many tries and read the fields in
    // order from a random point instead (a skewed field space could repeat one field).
    let mut tries = want.saturating_mul(4);
    while (out.len() as u64) < want {
        let Some((mut k, v)) = at_random_point(ctx, &prefix, &end) else {
            break;
        };
        k.drain(..prefix.len());
        if repeat || seen.insert(k.clone()) {
            out.push((k, v));
        } else if tries == 0 {
            let rest = coll::members(
                ctx,
                Bound::Excluded(&member_key(&prefix, &[&k])),
                Bound::Excluded(&end),
                Order::Ascending,
                want as usize,
            );
            for (mut k, v) in rest {
                k.drain(..prefix.len());
                if (out.len() as u64) < want && seen.insert(k.clone()) {
                    out.push((k, v));
                }
            }
            break;
        }
        tries = tries.saturating_sub(1);
    }
    out
}

/// HSCAN / SSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]: members in member
/// order, a few at a time, with the cursor scheme of SCAN ([`super::scan`]): a number naming
/// the last member examined, 0 to start and at the end. Every member present for a whole
/// iteration is returned exactly once. A hash's reply pairs each field with its value
/// (unless NOVALUES, a hash-only option), a sorted set's each member with its score; a
/// set's lists members.
pub fn scan(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], kind: Kind) -> Reply {
    let user = argv[1];
    let invalid_cursor = || Frame::err("invalid cursor");
    let cursor = super::scan::cursor_arg(argv[2])?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = super::scan::SCAN_COUNT_DEFAULT;
    let mut values = kind != Kind::Set;
    let mut i = 3;
    while i < argv.len() {
        if kind == Kind::Hash && is_word(argv[i], "novalues") {
            values = false;
            i += 1;
            continue;
        }
        let Some(&value) = argv.get(i + 1) else {
            return Err(syntax_error());
        };
        if is_word(argv[i], "match") {
            pattern = Some(value);
        } else if is_word(argv[i], "count") {
            count = super::scan::count_arg(value)?;
        } else {
            return Err(syntax_error());
        }
        i += 2;
    }
    let prefix = base_prefix(user, kind);
    let resume = if cursor == 0 {
        None
    } else {
        let key = ctx
            .shared
            .cursors
            .lock()
            .take(cursor)
            .ok_or_else(invalid_cursor)?;
        // A cursor of another key's scan is no cursor of this one.
        if !key.starts_with(&prefix) {
            return Err(invalid_cursor());
        }
        Some(key)
    };
    let done = |found: Vec<Frame>| Frame::Array(vec![Frame::bulk("0"), Frame::Array(found)]);
    if coll::open_read(ctx, user, kind)?.is_none() {
        return Ok(done(vec![]));
    }
    let end = coll::prefix_upper(&prefix);
    let lower = match &resume {
        Some(key) => Bound::Excluded(key.as_slice()),
        None => Bound::Included(prefix.as_slice()),
    };
    let examined = coll::members(ctx, lower, Bound::Excluded(&end), Order::Ascending, count);
    let last = (examined.len() >= count)
        .then(|| examined.last().map(|(k, _)| k.clone()))
        .flatten();
    let mut found = Vec::new();
    for (k, v) in examined {
        let field = &k[prefix.len()..];
        if pattern.is_some_and(|p| !glob::matches(p, field)) {
            continue;
        }
        found.push(Frame::bulk(field));
        if values {
            found.push(Frame::Bulk(if kind == Kind::ZSet {
                score_text(&v)
            } else {
                v
            }));
        }
    }
    let next = match last {
        Some(key) => ctx.shared.cursors.lock().remember(key),
        None => 0,
    };
    Ok(Frame::Array(vec![
        Frame::bulk(next.to_string()),
        Frame::Array(found),
    ]))
}
