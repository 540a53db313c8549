//! Streams: XADD (NOMKSTREAM, MAXLEN/MINID with `=`/`~` and LIMIT), XLEN, XRANGE, XREVRANGE,
//! XDEL, XTRIM, XSETID, XREAD (docs/PROTOCOL.md "Streams"); the consumer groups are in
//! [`super::stream_group`], over the same layout.
//!
//! Layout, under the stream's member prefix `P` (`collection::member_prefix`), with
//! `T` = 16 bytes 0xFF (the largest id's bytes, so every key below sorts after every entry):
//! - entry: `P <ms u64 BE> <seq u64 BE>` -> fields and values, each a u32 BE length and the
//!   bytes;
//! - state: `P T 's'` -> entries-added u64, max-deleted-entry-id (ms u64, seq u64): written
//!   with the stream's first command, so an empty stream (XDEL of all, MAXLEN 0, XGROUP
//!   CREATE MKSTREAM) still has a member and its type entry stays, as Redis keeps it;
//! - group: `P T 'G' <group>` -> last-delivered id (16), entries-read i64 (-1: unknown),
//!   pending count u64, consumer count u64;
//! - per group `B` = `P T 'g' <u32 BE len(group)> <group>`: consumer `B 'c' <name>` ->
//!   seen-time ms u64, pending count u64; PEL entry `B 'p' <id>` -> delivery time ms u64,
//!   delivery count u64, consumer name; the consumer's PEL index
//!   `B 'q' <u32 BE len(name)> <name> <id>` -> empty.
//!
//! The type entry (`collection::Meta`) keeps the member count as entries + 1 (the state
//! entry; group keys are not counted) and the last id (`a` = ms, `b` = seq, the u64's bits),
//! so ids only grow even after entries go. Every range over entries is bounded by entry
//! keys (at most `P T`), so it never meets a group key; DEL, RENAME, COPY and expiry move or
//! remove the whole member range, groups with it. Each command's changes are one unit
//! through `coll::write` (one atomic batch), so a crash never separates a PEL entry from its
//! consumer's index entry or the counts that count it.

use std::ops::Bound;
use std::time::{Duration, Instant};

use forest_core::Order;

use super::coll;
use super::{int_arg, is_word, syntax_error, Ctx, Reply};
use crate::blocking::{Pop, Waiting};
use crate::collection::{member_prefix, Kind, Meta};
use crate::frame::{Frame, Protocol};

/// A stream entry id.
pub(super) type Id = (u64, u64);

/// The largest id: `+`.
pub(super) const MAX_ID: Id = (u64::MAX, u64::MAX);

/// Approximate trimming's default LIMIT: Redis's 100 * stream-node-max-entries (100).
const APPROX_LIMIT_DEFAULT: u64 = 10_000;

pub(super) fn invalid_id() -> Frame {
    Frame::err("Invalid stream ID specified as stream command argument")
}

/// Milliseconds since the epoch.
pub(super) fn now_ms() -> u64 {
    crate::server::unix_nanos() / 1_000_000
}

/// A u64 as Redis's `string2ull` reads one (digits, at most 127 bytes).
fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || text.starts_with('-') {
        return None;
    }
    text.parse::<u64>().ok()
}

/// Redis's `streamGenericParseIDOrReply`: `ms`, `ms-seq`, and without `strict` `-`/`+`;
/// `missing_seq` when the seq is absent. With `allow_star`, `ms-*` gives a None seq.
fn parse_id_generic(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    allow_star: bool,
) -> Result<(u64, Option<u64>), Frame> {
    if arg.len() > 127 {
        return Err(invalid_id());
    }
    match arg {
        b"-" if !strict => return Ok((0, Some(0))),
        b"+" if !strict => return Ok((u64::MAX, Some(u64::MAX))),
        _ => {}
    }
    let text = std::str::from_utf8(arg).map_err(|_| invalid_id())?;
    let number = |s: &str| parse_u64(s).ok_or_else(invalid_id);
    match text.split_once('-') {
        None => Ok((number(text)?, Some(missing_seq))),
        Some((ms, "*")) if allow_star => Ok((number(ms)?, None)),
        Some((ms, seq)) => Ok((number(ms)?, Some(number(seq)?))),
    }
}

/// A strict id (no `-`, `+`, `ms-*`), seq 0 if absent.
pub(super) fn strict_id(arg: &[u8]) -> Result<Id, Frame> {
    let (ms, seq) = parse_id_generic(arg, 0, true, false)?;
    Ok((ms, seq.unwrap_or(0)))
}

/// An id that may be `-` or `+`, `missing_seq` if the seq is absent.
pub(super) fn loose_id(arg: &[u8], missing_seq: u64) -> Result<Id, Frame> {
    let (ms, seq) = parse_id_generic(arg, missing_seq, false, false)?;
    Ok((ms, seq.unwrap_or(missing_seq)))
}

pub(super) fn incr_id((ms, seq): Id) -> Option<Id> {
    if seq < u64::MAX {
        Some((ms, seq + 1))
    } else if ms < u64::MAX {
        Some((ms + 1, 0))
    } else {
        None
    }
}

fn decr_id((ms, seq): Id) -> Option<Id> {
    if seq > 0 {
        Some((ms, seq - 1))
    } else if ms > 0 {
        Some((ms - 1, u64::MAX))
    } else {
        None
    }
}

/// A range's start (`-`, an id, `(id` exclusive) as an inclusive id.
pub(super) fn start_bound(arg: &[u8]) -> Result<Id, Frame> {
    match arg {
        [b'(', rest @ ..] if !rest.is_empty() => {
            let (ms, seq) = parse_id_generic(rest, 0, true, false)?;
            incr_id((ms, seq.unwrap_or(0)))
                .ok_or_else(|| Frame::err("invalid start ID for the interval"))
        }
        _ => loose_id(arg, 0),
    }
}

/// A range's end (`+`, an id, `(id` exclusive) as an inclusive id.
pub(super) fn end_bound(arg: &[u8]) -> Result<Id, Frame> {
    match arg {
        [b'(', rest @ ..] if !rest.is_empty() => {
            let (ms, seq) = parse_id_generic(rest, u64::MAX, true, false)?;
            decr_id((ms, seq.unwrap_or(u64::MAX)))
                .ok_or_else(|| Frame::err("invalid end ID for the interval"))
        }
        _ => loose_id(arg, u64::MAX),
    }
}

pub(super) fn id_bytes((ms, seq): Id) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&ms.to_be_bytes());
    out[8..].copy_from_slice(&seq.to_be_bytes());
    out
}

pub(super) fn id_from(bytes: &[u8]) -> Option<Id> {
    let ms: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    let seq: [u8; 8] = bytes.get(8..16)?.try_into().ok()?;
    Some((u64::from_be_bytes(ms), u64::from_be_bytes(seq)))
}

pub(super) fn id_text((ms, seq): Id) -> String {
    format!("{ms}-{seq}")
}

pub(super) fn id_frame(id: Id) -> Frame {
    Frame::bulk(id_text(id))
}

/// `n` u64 words, big-endian, from `bytes` (None if too short).
pub(super) fn words<const N: usize>(bytes: &[u8]) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    for (i, word) in out.iter_mut().enumerate() {
        *word = u64::from_be_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?);
    }
    Some(out)
}

pub(super) fn damaged(user: &[u8]) -> Frame {
    Frame::err(format!(
        "stream '{}' is damaged",
        String::from_utf8_lossy(&user[..user.len().min(64)])
    ))
}

fn encode_fields(pairs: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.iter().map(|p| p.len() + 4).sum());
    for part in pairs {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn decode_fields(mut bytes: &[u8]) -> Option<Vec<Frame>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        out.push(Frame::bulk(bytes.get(4..4 + len)?));
        bytes = &bytes[4 + len..];
    }
    Some(out)
}

/// An entry as a reply: `[id, [field, value, ...]]`.
pub(super) fn entry_frame(user: &[u8], id: Id, value: &[u8]) -> Result<Frame, Frame> {
    let fields = decode_fields(value).ok_or_else(|| damaged(user))?;
    Ok(Frame::Array(vec![id_frame(id), Frame::Array(fields)]))
}

/// The keys of one stream's layout (see the module doc).
pub(super) struct Keys {
    pub user: Vec<u8>,
    prefix: Vec<u8>,
}

impl Keys {
    pub fn new(user: &[u8]) -> Self {
        Self {
            user: user.to_vec(),
            prefix: member_prefix(user),
        }
    }

    pub fn entry(&self, id: Id) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(&id_bytes(id));
        key
    }

    /// `P T tag`.
    fn tail(&self, tag: u8) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(&[0xff; 16]);
        key.push(tag);
        key
    }

    pub fn state(&self) -> Vec<u8> {
        self.tail(b's')
    }

    /// `P T 'G'`: every group record begins with it.
    pub fn groups(&self) -> Vec<u8> {
        self.tail(b'G')
    }

    pub fn group(&self, group: &[u8]) -> Vec<u8> {
        let mut key = self.groups();
        key.extend_from_slice(group);
        key
    }

    /// `B` of the module doc, then `tag`.
    pub fn group_part(&self, group: &[u8], tag: u8) -> Vec<u8> {
        let mut key = self.tail(b'g');
        key.extend_from_slice(&(group.len() as u32).to_be_bytes());
        key.extend_from_slice(group);
        key.push(tag);
        key
    }

    /// Every key of `group`'s consumers, PEL and index begins with this.
    pub fn group_data(&self, group: &[u8]) -> Vec<u8> {
        let mut key = self.group_part(group, 0);
        key.pop();
        key
    }

    pub fn consumer(&self, group: &[u8], name: &[u8]) -> Vec<u8> {
        let mut key = self.group_part(group, b'c');
        key.extend_from_slice(name);
        key
    }

    pub fn pel(&self, group: &[u8], id: Id) -> Vec<u8> {
        let mut key = self.group_part(group, b'p');
        key.extend_from_slice(&id_bytes(id));
        key
    }

    /// The prefix of `name`'s PEL index entries in `group`.
    pub fn consumer_pel(&self, group: &[u8], name: &[u8]) -> Vec<u8> {
        let mut key = self.group_part(group, b'q');
        key.extend_from_slice(&(name.len() as u32).to_be_bytes());
        key.extend_from_slice(name);
        key
    }

    /// The id of an entry key of this stream.
    pub fn entry_id(&self, key: &[u8]) -> Option<Id> {
        let suffix = key.get(self.prefix.len()..)?;
        (suffix.len() == 16).then(|| id_from(suffix)).flatten()
    }
}

/// A stream's numbers: the type entry's and the state entry's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Stream {
    pub len: u64,
    pub last: Id,
    pub added: u64,
    pub max_deleted: Id,
}

impl Stream {
    fn state_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.added.to_be_bytes());
        out[8..].copy_from_slice(&id_bytes(self.max_deleted));
        out
    }

    /// The stream as its type entry `meta` and state entry (read through `ctx`) say.
    pub fn load(ctx: &mut Ctx<'_, '_>, keys: &Keys, meta: &Meta) -> Result<Stream, Frame> {
        let mut value = Vec::new();
        if !ctx.read(&keys.state(), &mut value) {
            return Err(damaged(&keys.user));
        }
        let [added, del_ms, del_seq] = words::<3>(&value).ok_or_else(|| damaged(&keys.user))?;
        Ok(Stream {
            len: meta.count.saturating_sub(1),
            last: (meta.a as u64, meta.b as u64),
            added,
            max_deleted: (del_ms, del_seq),
        })
    }

    /// The stream being written: a new one if `meta` is (count 0).
    pub fn open(ctx: &mut Ctx<'_, '_>, keys: &Keys, meta: &Meta) -> Result<Stream, Frame> {
        if meta.count == 0 {
            return Ok(Stream::default());
        }
        Self::load(ctx, keys, meta)
    }

    /// Writes the state entry and the type entry's numbers back (the type entry itself is
    /// written by `coll::write`'s finish).
    pub fn save(&self, ctx: &mut Ctx<'_, '_>, keys: &Keys, meta: &mut Meta) -> Result<(), Frame> {
        coll::put_member(ctx, &keys.state(), &self.state_bytes())?;
        meta.count = self.len.saturating_add(1);
        meta.a = self.last.0 as i64;
        meta.b = self.last.1 as i64;
        Ok(())
    }
}

/// `user`'s stream for a read: None if absent, WRONGTYPE for another type.
pub(super) fn open_read(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<Option<Stream>, Frame> {
    let Some(meta) = coll::open_read(ctx, user, Kind::Stream)? else {
        return Ok(None);
    };
    Stream::load(ctx, &Keys::new(user), &meta).map(Some)
}

/// Up to `limit` entries with ids in `from..=to`, in `order`, as (id, value).
pub(super) fn entries(
    ctx: &Ctx<'_, '_>,
    keys: &Keys,
    from: Id,
    to: Id,
    order: Order,
    limit: usize,
) -> Result<Vec<(Id, Vec<u8>)>, Frame> {
    if from > to || limit == 0 {
        return Ok(Vec::new());
    }
    let (lower, upper) = (keys.entry(from), keys.entry(to));
    coll::members(
        ctx,
        Bound::Included(lower.as_slice()),
        Bound::Included(upper.as_slice()),
        order,
        limit,
    )
    .into_iter()
    .map(|(k, v)| Ok((keys.entry_id(&k).ok_or_else(|| damaged(&keys.user))?, v)))
    .collect()
}

/// The first (or last) entry's id, if any.
pub(super) fn edge_id(ctx: &Ctx<'_, '_>, keys: &Keys, first: bool) -> Result<Option<Id>, Frame> {
    let order = if first {
        Order::Ascending
    } else {
        Order::Descending
    };
    Ok(entries(ctx, keys, (0, 0), MAX_ID, order, 1)?
        .first()
        .map(|(id, _)| *id))
}

/// Entries as a reply array.
pub(super) fn entries_frame(user: &[u8], found: &[(Id, Vec<u8>)]) -> Result<Frame, Frame> {
    found
        .iter()
        .map(|(id, v)| entry_frame(user, *id, v))
        .collect::<Result<Vec<_>, _>>()
        .map(Frame::Array)
}

/// A trimming strategy (XADD's and XTRIM's options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trim {
    MaxLen(u64),
    MinId(Id),
}

/// XADD's and XTRIM's parsed options.
#[derive(Debug, Default)]
struct TrimArgs {
    trim: Option<Trim>,
    /// Entries removed at most (0: no limit).
    limit: u64,
    nomkstream: bool,
    /// XADD: the id argument's position.
    id_at: usize,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`.
fn parse_trim_args(argv: &[&[u8]], xadd: bool) -> Result<TrimArgs, Frame> {
    let mut args = TrimArgs::default();
    let (mut approx, mut limit_given) = (false, false);
    let mut limit: i64 = 0;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        let opt = argv[i];
        if xadd && opt == b"*" {
            break;
        } else if (is_word(opt, "maxlen") || is_word(opt, "minid")) && more > 0 {
            if args.trim.is_some() {
                return Err(Frame::err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            approx = false;
            let next = argv[i + 1];
            if more >= 2 && (next == b"~" || next == b"=") {
                approx = next == b"~";
                i += 1;
            }
            let value = argv[i + 1];
            args.trim = Some(if is_word(opt, "maxlen") {
                let n = int_arg(value)?;
                if n < 0 {
                    return Err(Frame::err("The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(strict_id(value)?)
            });
            i += 2;
        } else if is_word(opt, "limit") && more > 0 {
            limit = int_arg(argv[i + 1])?;
            if limit < 0 {
                return Err(Frame::err("The LIMIT argument must be >= 0."));
            }
            limit_given = true;
            i += 2;
        } else if xadd && is_word(opt, "nomkstream") {
            args.nomkstream = true;
            i += 1;
        } else if xadd {
            // An id, or the error for what is neither an option nor one.
            parse_id_generic(opt, 0, true, true)?;
            break;
        } else {
            return Err(syntax_error());
        }
    }
    args.id_at = i;
    if limit != 0 && args.trim.is_none() {
        return Err(Frame::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && args.trim.is_none() {
        return Err(Frame::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    args.limit = if limit_given {
        if !approx {
            return Err(Frame::err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        limit as u64
    } else if approx {
        APPROX_LIMIT_DEFAULT
    } else {
        0
    };
    Ok(args)
}

/// Removes the oldest entries that `trim` drops, at most `limit` (0: all); how many.
/// Exact trimming: Redis's `~` removes whole nodes only, so it may keep more.
pub(super) fn trim(
    ctx: &mut Ctx<'_, '_>,
    keys: &Keys,
    stream: &mut Stream,
    trim: Trim,
    limit: u64,
) -> Result<u64, Frame> {
    let cap = if limit == 0 { u64::MAX } else { limit };
    let victims: Vec<Id> = match trim {
        Trim::MaxLen(max) => {
            let over = stream.len.saturating_sub(max).min(cap);
            let over = usize::try_from(over).unwrap_or(usize::MAX);
            entries(ctx, keys, (0, 0), MAX_ID, Order::Ascending, over)?
                .into_iter()
                .map(|(id, _)| id)
                .collect()
        }
        Trim::MinId(min) => match decr_id(min) {
            None => Vec::new(),
            Some(below) => {
                let cap = usize::try_from(cap).unwrap_or(usize::MAX);
                entries(ctx, keys, (0, 0), below, Order::Ascending, cap)?
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect()
            }
        },
    };
    let mut removed = 0;
    for id in victims {
        if coll::remove_member(ctx, &keys.entry(id))? {
            removed += 1;
        }
    }
    stream.len = stream.len.saturating_sub(removed);
    Ok(removed)
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] id|* field value
/// [field value ...]: the new entry's id (null with NOMKSTREAM on a missing key).
pub fn xadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let args = parse_trim_args(argv, true)?;
    let pairs = argv.get(args.id_at + 1..).unwrap_or(&[]);
    if args.id_at >= argv.len() || pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(super::wrong_arity("xadd"));
    }
    let requested = if argv[args.id_at] == b"*" {
        None
    } else {
        Some(parse_id_generic(argv[args.id_at], 0, true, true)?)
    };
    if requested == Some((0, Some(0))) {
        return Err(Frame::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let keys = Keys::new(user);
    let value = encode_fields(pairs);
    coll::check_member(&keys.entry(MAX_ID), &value)?;
    let change = |ctx: &mut Ctx<'_, '_>, meta: &mut Meta| {
        let mut stream = Stream::open(ctx, &keys, meta)?;
        let last = stream.last;
        if last == MAX_ID {
            return Err(Frame::err(
                "The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let id =
            match requested {
                Some((ms, Some(seq))) if (ms, seq) > last => (ms, seq),
                Some((ms, None)) if ms > last.0 => (ms, 0),
                Some((ms, None)) if ms == last.0 && last.1 == u64::MAX => {
                    return Err(Frame::err("Elements are too large to be stored"))
                }
                Some((ms, None)) if ms == last.0 => (ms, last.1 + 1),
                Some(_) => return Err(Frame::err(
                    "The ID specified in XADD is equal or smaller than the target stream top item",
                )),
                None => {
                    let now = now_ms();
                    if now > last.0 {
                        (now, 0)
                    } else {
                        incr_id(last).unwrap_or(MAX_ID)
                    }
                }
            };
        coll::put_member(ctx, &keys.entry(id), &value)?;
        stream.len += 1;
        stream.added += 1;
        stream.last = id;
        if let Some(how) = args.trim {
            trim(ctx, &keys, &mut stream, how, args.limit)?;
        }
        stream.save(ctx, &keys, meta)?;
        Ok(id_frame(id))
    };
    if args.nomkstream {
        coll::write_existing(ctx, user, Kind::Stream, Frame::Null, change)
    } else {
        coll::write(ctx, user, Kind::Stream, change)
    }
}

/// XLEN key.
pub fn xlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let meta = coll::open_read(ctx, argv[1], Kind::Stream)?;
    Ok(Frame::Integer(
        meta.map_or(0, |m| m.count.saturating_sub(1) as i64),
    ))
}

/// XRANGE key start end [COUNT count]: `[[id, [field, value, ...]], ...]`.
pub fn xrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    range_command(ctx, argv, Order::Ascending)
}

/// XREVRANGE key end start [COUNT count]: as XRANGE, newest first.
pub fn xrevrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    range_command(ctx, argv, Order::Descending)
}

fn range_command(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], order: Order) -> Reply {
    let user = argv[1];
    let (start_arg, end_arg) = match order {
        Order::Ascending => (argv[2], argv[3]),
        Order::Descending => (argv[3], argv[2]),
    };
    let from = start_bound(start_arg)?;
    let to = end_bound(end_arg)?;
    let mut count: Option<i64> = None;
    let mut rest = &argv[4..];
    while let [word, n, tail @ ..] = rest {
        if !is_word(word, "count") {
            return Err(syntax_error());
        }
        count = Some(int_arg(n)?.max(0));
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(syntax_error());
    }
    let meta = coll::open_read(ctx, user, Kind::Stream)?;
    if meta.is_none() {
        return Ok(Frame::Array(vec![]));
    }
    let limit = match count {
        Some(0) => return Ok(coll::null_array(ctx)),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let keys = Keys::new(user);
    let found = entries(ctx, &keys, from, to, order, limit)?;
    entries_frame(user, &found)
}

/// XDEL key id [id ...]: how many entries were removed.
pub fn xdel(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let keys = Keys::new(user);
    // A missing key answers 0 before the ids are read, as Redis.
    coll::write_existing(ctx, user, Kind::Stream, Frame::Integer(0), |ctx, meta| {
        let ids = argv[2..]
            .iter()
            .map(|a| strict_id(a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut stream = Stream::load(ctx, &keys, meta)?;
        let mut deleted = 0;
        for id in ids {
            if coll::remove_member(ctx, &keys.entry(id))? {
                deleted += 1;
                stream.len = stream.len.saturating_sub(1);
                stream.max_deleted = stream.max_deleted.max(id);
            }
        }
        stream.save(ctx, &keys, meta)?;
        Ok(Frame::Integer(deleted))
    })
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: how many entries were removed.
pub fn xtrim(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let args = parse_trim_args(argv, false)?;
    let Some(how) = args.trim else {
        return Err(syntax_error());
    };
    let keys = Keys::new(user);
    coll::write_existing(ctx, user, Kind::Stream, Frame::Integer(0), |ctx, meta| {
        let mut stream = Stream::load(ctx, &keys, meta)?;
        let removed = trim(ctx, &keys, &mut stream, how, args.limit)?;
        stream.save(ctx, &keys, meta)?;
        Ok(Frame::Integer(removed as i64))
    })
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id].
pub fn xsetid(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let id = strict_id(argv[2])?;
    let (mut added, mut max_deleted) = (None, None);
    let mut rest = &argv[3..];
    loop {
        match rest {
            [] => break,
            [word, n, tail @ ..] if is_word(word, "entriesadded") => {
                let n = int_arg(n)?;
                if n < 0 {
                    return Err(Frame::err("entries_added must be positive"));
                }
                added = Some(n as u64);
                rest = tail;
            }
            [word, max, tail @ ..] if is_word(word, "maxdeletedid") => {
                let max = strict_id(max)?;
                if id < max {
                    return Err(Frame::err(
                        "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    ));
                }
                max_deleted = Some(max);
                rest = tail;
            }
            _ => return Err(syntax_error()),
        }
    }
    let keys = Keys::new(user);
    let absent = Frame::err("no such key");
    let reply = coll::write_existing(ctx, user, Kind::Stream, absent, |ctx, meta| {
        let mut stream = Stream::load(ctx, &keys, meta)?;
        if stream.len > 0 {
            let top = edge_id(ctx, &keys, false)?.unwrap_or_default();
            if id < top {
                return Err(Frame::err(
                    "The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if added.is_some_and(|n| n < stream.len) {
                return Err(Frame::err(
                    "The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        stream.last = id;
        if let Some(n) = added {
            stream.added = n;
        }
        if let Some(max) = max_deleted.filter(|m| *m != (0, 0)) {
            stream.max_deleted = max;
        }
        stream.save(ctx, &keys, meta)?;
        Ok(Frame::ok())
    })?;
    match reply {
        Frame::Error(_) => Err(reply),
        ok => Ok(ok),
    }
}

/// Where a read of one stream starts (XREAD, XREADGROUP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// Entries after this id (XREAD's `$`: the last id when called); for XREADGROUP: the
    /// consumer's pending entries after it.
    After(Id),
    /// `>`: entries never delivered to the group (XREADGROUP only).
    New,
}

/// XREAD's and XREADGROUP's parsed arguments, so that a blocking caller can read again with
/// the same ones ([`read_streams`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadArgs {
    /// At most this many entries per stream (0: all).
    pub count: u64,
    /// BLOCK's timeout in milliseconds (0: forever), if given.
    pub block: Option<u64>,
    /// XREADGROUP's group and consumer.
    pub group: Option<(Vec<u8>, Vec<u8>)>,
    pub noack: bool,
    pub keys: Vec<Vec<u8>>,
    pub from: Vec<ReadFrom>,
    /// A blocked XREADGROUP's streams' last ids when it blocked (None: no stream): it reads
    /// again only once one changed (an XADD), not after other writes (XGROUP SETID), as
    /// Redis wakes it only then. Empty until it blocks.
    pub tops: Vec<Option<Id>>,
}

/// Parses XREAD (`group` false) or XREADGROUP arguments and checks each key (its type, its
/// group) as Redis does when the command is called, with Redis's errors in its order; `$`
/// becomes the stream's last id now. A blocking caller calls this once, then
/// [`read_streams`] until it answers.
pub fn prepare_read(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], group: bool) -> Result<ReadArgs, Frame> {
    let mut args = ReadArgs {
        count: 0,
        block: None,
        group: None,
        noack: false,
        keys: Vec::new(),
        from: Vec::new(),
        tops: Vec::new(),
    };
    let mut streams_at = None;
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        let opt = argv[i];
        if is_word(opt, "block") && more > 0 {
            // Redis 7.0 refuses BLOCK in scripts (before reading the timeout), with the
            // command's name as called.
            if ctx.client.blocking.in_script {
                return Err(Frame::err(format!(
                    "{} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(argv[0])
                )));
            }
            let ms = crate::parse::parse_int(argv[i + 1])
                .ok_or_else(|| Frame::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Frame::err("timeout is negative"));
            }
            args.block = Some(ms as u64);
            i += 2;
        } else if is_word(opt, "count") && more > 0 {
            args.count = int_arg(argv[i + 1])?.max(0) as u64;
            i += 2;
        } else if is_word(opt, "streams") && more > 0 {
            let rest = &argv[i + 1..];
            if !rest.len().is_multiple_of(2) {
                return Err(Frame::err(
                    "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            streams_at = Some(i + 1);
            break;
        } else if is_word(opt, "group") && more >= 2 {
            if !group {
                return Err(Frame::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            args.group = Some((argv[i + 1].to_vec(), argv[i + 2].to_vec()));
            i += 3;
        } else if is_word(opt, "noack") {
            if !group {
                return Err(Frame::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            args.noack = true;
            i += 1;
        } else {
            return Err(syntax_error());
        }
    }
    let Some(at) = streams_at else {
        return Err(syntax_error());
    };
    if group && args.group.is_none() {
        return Err(Frame::err("Missing GROUP option for XREADGROUP"));
    }
    let rest = &argv[at..];
    let (keys, ids) = rest.split_at(rest.len() / 2);
    // Key by key as Redis: the key's type, its group, then its id.
    for (key, id) in keys.iter().zip(ids) {
        if key.first() == Some(&crate::collection::RESERVED_BYTE) {
            return Err(coll::reserved_key());
        }
        let meta = coll::open_read(ctx, key, Kind::Stream)?;
        if let Some((name, _)) = &args.group {
            let found = match &meta {
                Some(_) => super::stream_group::group_exists(ctx, key, name)?,
                None => false,
            };
            if !found {
                return Err(super::stream_group::no_group_for_read(key, name));
            }
        }
        args.keys.push(key.to_vec());
        args.from.push(match *id {
            b"$" if group => {
                return Err(Frame::err(
                    "The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ))
            }
            // `$`: the last id now, 0-0 for a missing stream.
            b"$" => ReadFrom::After(meta.map_or((0, 0), |m| (m.a as u64, m.b as u64))),
            b">" if !group => {
                return Err(Frame::err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ))
            }
            b">" => ReadFrom::New,
            id => ReadFrom::After(strict_id(id)?),
        });
    }
    Ok(args)
}

/// Reads what `args` asks for; if nothing is there: a null array without BLOCK (and inside
/// MULTI, where Redis does not block), else the client waits on the keys
/// ([`crate::blocking`]) until a write of one of them lets it read something
/// ([`read_one`], from `cmd::blocking::resume`) or the timeout answers a null array.
pub(super) fn read_or_block(ctx: &mut Ctx<'_, '_>, args: ReadArgs) -> Reply {
    let in_transaction = ctx.unit.as_ref().is_some_and(|u| u.txn);
    let Some(ms) = args.block.filter(|_| !in_transaction) else {
        return Ok(read_streams(ctx, &args)?.unwrap_or_else(|| coll::null_array(ctx)));
    };
    let shared = ctx.shared;
    let keys: Vec<&[u8]> = args.keys.iter().map(Vec::as_slice).collect();
    // Read and register under the keys' stripe locks: an XADD comes before the read (and
    // is read) or sees the waiter.
    let _guards = shared.collections.lock_many(keys.iter().copied());
    if let Some(reply) = read_streams(ctx, &args)? {
        return Ok(reply);
    }
    let tops = match args.group {
        Some(_) => keys
            .iter()
            .map(|key| last_id(ctx, key))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    // XREAD takes nothing away: every XADD serves all its readers. XREADGROUP's `>` takes
    // entries from its group: its readers are served in turn, as pops (Redis serves them
    // in the order they blocked, and a later one reads what the earlier left).
    let blocked = if args.group.is_some() {
        shared.blocking.register(ctx.client.info.id, &keys)
    } else {
        shared.blocking.register_reader(ctx.client.info.id, &keys)
    };
    let deadline = match ms {
        0 => None,
        ms => Instant::now().checked_add(Duration::from_millis(ms)),
    };
    ctx.client.blocking.waiting = Some(Waiting {
        blocked,
        keys: args.keys.clone(),
        pop: Pop::Stream(Box::new(ReadArgs { tops, ..args })),
        deadline,
    });
    // Not sent: the connection answers when the wait ends (`cmd::blocking::resume`).
    Ok(Frame::Null)
}

/// `key`'s last id, None if it is not a stream (or another type).
fn last_id(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Option<Id>, Frame> {
    match coll::open_read(ctx, key, Kind::Stream) {
        Ok(meta) => Ok(meta.map(|m| (m.a as u64, m.b as u64))),
        Err(error) if error == coll::wrongtype() => Ok(None),
        Err(error) => Err(error),
    }
}

/// A woken reader's read of `key` alone (one of `args`' keys, with its id): Some(reply)
/// ends the wait, None keeps it (nothing new, or the key is not a stream now). As Redis
/// 7.0 serves a woken reader: one stream per reply; XREADGROUP whose group is gone from a
/// stream that exists answers NOGROUP.
pub(super) fn read_one(
    ctx: &mut Ctx<'_, '_>,
    args: &ReadArgs,
    key: &[u8],
) -> Result<Option<Frame>, Frame> {
    let Some(at) = args.keys.iter().position(|k| k == key) else {
        return Ok(None);
    };
    if let Some((group, _)) = &args.group {
        if coll::open_read(ctx, key, Kind::Stream)?.is_none() {
            return Ok(None);
        }
        if !super::stream_group::group_exists(ctx, key, group)? {
            return Ok(Some(Frame::Error(
                "NOGROUP the consumer group this client was blocked on no longer exists".into(),
            )));
        }
        if args.tops.get(at).copied().flatten() == last_id(ctx, key)? {
            return Ok(None);
        }
    }
    let one = ReadArgs {
        keys: vec![key.to_vec()],
        from: vec![args.from[at]],
        ..args.clone()
    };
    read_streams(ctx, &one)
}

/// The reply of a read that served streams: RESP2 `[[key, entries], ...]`, RESP3 a map.
pub(super) fn read_reply(ctx: &Ctx<'_, '_>, served: Vec<(Vec<u8>, Frame)>) -> Frame {
    match ctx.client.protocol {
        Protocol::Resp2 => Frame::Array(
            served
                .into_iter()
                .map(|(k, v)| Frame::Array(vec![Frame::bulk(k), v]))
                .collect(),
        ),
        Protocol::Resp3 => Frame::Map(
            served
                .into_iter()
                .map(|(k, v)| (Frame::bulk(k), v))
                .collect(),
        ),
    }
}

/// Reads what `args` (from [`prepare_read`]) asks for now: Some(reply) if a stream had
/// something to serve, None if none had (the caller answers a null array, or blocks).
/// Group reads go to [`super::stream_group::read_group`].
pub fn read_streams(ctx: &mut Ctx<'_, '_>, args: &ReadArgs) -> Result<Option<Frame>, Frame> {
    if args.group.is_some() {
        return super::stream_group::read_group(ctx, args);
    }
    let limit = if args.count == 0 {
        usize::MAX
    } else {
        usize::try_from(args.count).unwrap_or(usize::MAX)
    };
    let mut served = Vec::new();
    for (key, from) in args.keys.iter().zip(&args.from) {
        let Some(stream) = open_read(ctx, key)? else {
            continue;
        };
        let after = match *from {
            ReadFrom::After(id) => id,
            // Only XREADGROUP reads `>`.
            ReadFrom::New => stream.last,
        };
        let keys = Keys::new(key);
        let Some(start) = incr_id(after) else {
            continue;
        };
        let found = entries(ctx, &keys, start, MAX_ID, Order::Ascending, limit)?;
        if found.is_empty() {
            continue;
        }
        served.push((key.clone(), entries_frame(key, &found)?));
    }
    if served.is_empty() {
        return Ok(None);
    }
    Ok(Some(read_reply(ctx, served)))
}

/// XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...].
pub fn xread(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = prepare_read(ctx, argv, false)?;
    read_or_block(ctx, args)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn entry(id: &str, fields: &[&str]) -> Frame {
        Frame::Array(vec![bulk(id), bulks(fields)])
    }

    fn err(text: &str) -> Frame {
        Frame::Error(format!("ERR {text}"))
    }

    // Goal: XADD ids (explicit, `ms-*`, `*`), its errors, XLEN and XRANGE bounds as Redis.
    // Method: one scenario, replies compared.
    #[test]
    fn stream_ids_and_ranges() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["XADD", "s", "5-1", "a", "1"]), bulk("5-1"));
        assert_eq!(h.run(&["XADD", "s", "5-*", "b", "2"]), bulk("5-2"));
        assert_eq!(h.run(&["XADD", "s", "7", "c", "3", "d", "4"]), bulk("7-0"));
        assert_eq!(
            h.run(&["XADD", "s", "6-0", "x", "y"]),
            err("The ID specified in XADD is equal or smaller than the target stream top item")
        );
        assert_eq!(
            h.run(&["XADD", "t", "0-0", "x", "y"]),
            err("The ID specified in XADD must be greater than 0-0")
        );
        assert_eq!(h.run(&["EXISTS", "t"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["XADD", "s", "abc", "x", "y"]),
            err("Invalid stream ID specified as stream command argument")
        );
        assert_eq!(
            h.run(&["XADD", "s", "*", "x"]),
            err("wrong number of arguments for 'xadd' command")
        );
        let Frame::Bulk(auto) = h.run(&["XADD", "s", "*", "e", "5"]) else {
            panic!("id expected");
        };
        let auto = String::from_utf8(auto).expect("utf8");
        assert!(auto.ends_with("-0"), "{auto}");
        assert_eq!(h.run(&["XLEN", "s"]), Frame::Integer(4));
        assert_eq!(h.run(&["XLEN", "t"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["XRANGE", "s", "-", "7"]),
            Frame::Array(vec![
                entry("5-1", &["a", "1"]),
                entry("5-2", &["b", "2"]),
                entry("7-0", &["c", "3", "d", "4"]),
            ])
        );
        assert_eq!(
            h.run(&["XRANGE", "s", "(5-1", "+", "COUNT", "1"]),
            Frame::Array(vec![entry("5-2", &["b", "2"])])
        );
        assert_eq!(
            h.run(&["XRANGE", "s", "5", "5"]),
            Frame::Array(vec![entry("5-1", &["a", "1"]), entry("5-2", &["b", "2"])])
        );
        assert_eq!(
            h.run(&["XREVRANGE", "s", "(7-0", "-"]),
            Frame::Array(vec![entry("5-2", &["b", "2"]), entry("5-1", &["a", "1"])])
        );
        assert_eq!(h.run(&["TYPE", "s"]), Frame::Simple("stream".into()));
    }

    // Goal: a stream written before consumer groups (no state entry, count = entries) is
    // made one of today's by the repair at start: XLEN, entries-added, ids go on.
    // Method: write the old layout straight to the store, restart, read and add.
    #[test]
    fn old_streams_are_migrated() {
        use crate::collection::{type_key, Kind, Meta};
        let mut h = Harness::new();
        h.run(&["SET", "other", "v"]);
        let keys = Keys::new(b"old");
        let store = &h.shared.store;
        for id in [(1, 0), (5, 0)] {
            store
                .upsert(&keys.entry(id), &encode_fields(&[b"f", b"v"]))
                .expect("upsert");
        }
        let meta = Meta {
            kind: Kind::Stream,
            count: 2,
            a: 5,
            b: 0,
        };
        store
            .upsert(&type_key(b"old"), &meta.encode())
            .expect("upsert");
        let mut h = h.restart();
        assert_eq!(h.run(&["XLEN", "old"]), Frame::Integer(2));
        let Frame::Map(info) = h.run(&["XINFO", "STREAM", "old"]) else {
            panic!("map expected");
        };
        assert!(info.contains(&(bulk("entries-added"), Frame::Integer(2))));
        assert_eq!(h.run(&["XADD", "old", "5-*", "g", "w"]), bulk("5-1"));
        assert_eq!(h.run(&["XDEL", "old", "1-0", "5-0"]), Frame::Integer(2));
        assert_eq!(
            h.run(&["XRANGE", "old", "-", "+"]),
            Frame::Array(vec![entry("5-1", &["g", "w"])])
        );
        assert_eq!(
            crate::collection::repair(&h.shared.store).expect("repair"),
            crate::collection::RepairReport::default()
        );
    }

    // Goal: an emptied stream stays (Redis keeps empty streams), with its last id, and its
    // group keys never show among its entries. Method: XDEL of every entry, then XADD.
    #[test]
    fn empty_stream_stays() {
        let mut h = Harness::new();
        h.run(&["XADD", "s", "1-1", "a", "1"]);
        h.run(&["XGROUP", "CREATE", "s", "g", "0"]);
        assert_eq!(h.run(&["XDEL", "s", "1-1"]), Frame::Integer(1));
        assert_eq!(h.run(&["XLEN", "s"]), Frame::Integer(0));
        assert_eq!(h.run(&["EXISTS", "s"]), Frame::Integer(1));
        assert_eq!(h.run(&["XRANGE", "s", "-", "+"]), Frame::Array(vec![]));
        assert_eq!(
            h.run(&["XADD", "s", "1-1", "a", "1"]),
            err("The ID specified in XADD is equal or smaller than the target stream top item")
        );
        assert_eq!(h.run(&["XADD", "s", "1-2", "a", "1"]), bulk("1-2"));
        assert_eq!(
            h.run(&["XREVRANGE", "s", "+", "-"]),
            Frame::Array(vec![entry("1-2", &["a", "1"])])
        );
        assert_eq!(h.run(&["DEL", "s"]), Frame::Integer(1));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(h.shared.collections.reserved_count(), 0);
    }
}
