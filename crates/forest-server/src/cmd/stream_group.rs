//! Stream consumer groups: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO
//! (docs/PROTOCOL.md "Streams"), with Redis 7.0's replies and errors (its t_stream.c).
//!
//! The state lives in the stream's member range (layout in [`super::stream`]'s module doc):
//! a record per group (last-delivered id, entries-read, pending and consumer counts), a
//! record per consumer (seen-time, pending count), a PEL entry per delivered, unacknowledged
//! id (delivery time, delivery count, consumer) and, per consumer, an index entry per id it
//! holds (so its history, XPENDING's consumer filter and DELCONSUMER are range scans). Each
//! command changes them in one unit (`coll::write`), so the counts always agree with the
//! entries they count, after a crash too. Times are Unix milliseconds, as Redis keeps them.

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::stream::{
    edge_id, end_bound, entries, entries_frame, entry_frame, id_frame, id_from, incr_id, loose_id,
    now_ms, read_reply, start_bound, strict_id, words, Id, Keys, ReadArgs, ReadFrom, Stream,
    MAX_ID,
};
use super::{int_arg, is_word, syntax_error, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::collection::{Kind, Meta};
use crate::frame::Frame;

/// Redis's SCG_INVALID_ENTRIES_READ.
const UNKNOWN_READ: i64 = -1;

/// A group's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    last: Id,
    entries_read: i64,
    pending: u64,
    consumers: u64,
}

impl Group {
    fn encode(&self) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[..8].copy_from_slice(&self.last.0.to_be_bytes());
        out[8..16].copy_from_slice(&self.last.1.to_be_bytes());
        out[16..24].copy_from_slice(&self.entries_read.to_be_bytes());
        out[24..32].copy_from_slice(&self.pending.to_be_bytes());
        out[32..40].copy_from_slice(&self.consumers.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Group> {
        let [ms, seq, read, pending, consumers] = words::<5>(bytes)?;
        Some(Group {
            last: (ms, seq),
            entries_read: read as i64,
            pending,
            consumers,
        })
    }
}

/// A consumer's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Consumer {
    seen: u64,
    pending: u64,
}

/// A PEL entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Nack {
    time: u64,
    count: u64,
    consumer: Vec<u8>,
}

impl Nack {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.consumer.len());
        out.extend_from_slice(&self.time.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.consumer);
        out
    }

    fn decode(bytes: &[u8]) -> Option<Nack> {
        let [time, count] = words::<2>(bytes)?;
        Some(Nack {
            time,
            count,
            consumer: bytes[16..].to_vec(),
        })
    }
}

fn read_value(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    ctx.read(key, &mut value).then_some(value)
}

/// One group of one stream, as a command reads and changes it.
struct Groups<'k> {
    keys: &'k Keys,
    name: Vec<u8>,
}

impl Groups<'_> {
    fn damaged(&self) -> Frame {
        super::stream::damaged(&self.keys.user)
    }

    fn load(&self, ctx: &mut Ctx<'_, '_>) -> Result<Option<Group>, Frame> {
        match read_value(ctx, &self.keys.group(&self.name)) {
            None => Ok(None),
            Some(v) => Group::decode(&v).map(Some).ok_or_else(|| self.damaged()),
        }
    }

    fn save(&self, ctx: &mut Ctx<'_, '_>, group: &Group) -> Result<(), Frame> {
        coll::put_member(ctx, &self.keys.group(&self.name), &group.encode()).map(|_| ())
    }

    fn consumer(&self, ctx: &mut Ctx<'_, '_>, name: &[u8]) -> Result<Option<Consumer>, Frame> {
        match read_value(ctx, &self.keys.consumer(&self.name, name)) {
            None => Ok(None),
            Some(v) => {
                let [seen, pending] = words::<2>(&v).ok_or_else(|| self.damaged())?;
                Ok(Some(Consumer { seen, pending }))
            }
        }
    }

    fn save_consumer(
        &self,
        ctx: &mut Ctx<'_, '_>,
        name: &[u8],
        consumer: Consumer,
    ) -> Result<(), Frame> {
        let mut value = [0u8; 16];
        value[..8].copy_from_slice(&consumer.seen.to_be_bytes());
        value[8..].copy_from_slice(&consumer.pending.to_be_bytes());
        coll::put_member(ctx, &self.keys.consumer(&self.name, name), &value).map(|_| ())
    }

    /// The consumer `name`, created if absent (counted in `group`); its seen-time set to
    /// `now` if `refresh` (Redis's lookup without SLC_NO_REFRESH) or if created. Returns
    /// whether it was created.
    fn touch(
        &self,
        ctx: &mut Ctx<'_, '_>,
        group: &mut Group,
        name: &[u8],
        now: u64,
        refresh: bool,
    ) -> Result<bool, Frame> {
        match self.consumer(ctx, name)? {
            Some(mut c) => {
                if refresh {
                    c.seen = now;
                    self.save_consumer(ctx, name, c)?;
                }
                Ok(false)
            }
            None => {
                group.consumers += 1;
                self.save_consumer(
                    ctx,
                    name,
                    Consumer {
                        seen: now,
                        pending: 0,
                    },
                )?;
                Ok(true)
            }
        }
    }

    fn add_pending(&self, ctx: &mut Ctx<'_, '_>, name: &[u8], delta: i64) -> Result<(), Frame> {
        let mut c = self.consumer(ctx, name)?.ok_or_else(|| self.damaged())?;
        c.pending = c.pending.saturating_add_signed(delta);
        self.save_consumer(ctx, name, c)
    }

    fn nack(&self, ctx: &mut Ctx<'_, '_>, id: Id) -> Result<Option<Nack>, Frame> {
        match read_value(ctx, &self.keys.pel(&self.name, id)) {
            None => Ok(None),
            Some(v) => Nack::decode(&v).map(Some).ok_or_else(|| self.damaged()),
        }
    }

    fn index_key(&self, consumer: &[u8], id: Id) -> Vec<u8> {
        let mut key = self.keys.consumer_pel(&self.name, consumer);
        key.extend_from_slice(&super::stream::id_bytes(id));
        key
    }

    /// Writes PEL entry `id` as `nack`, moving it from `old`'s holder if it had one; keeps
    /// the index and the counts.
    fn put_nack(
        &self,
        ctx: &mut Ctx<'_, '_>,
        group: &mut Group,
        id: Id,
        old: Option<&Nack>,
        nack: &Nack,
    ) -> Result<(), Frame> {
        match old {
            Some(old) if old.consumer == nack.consumer => {}
            Some(old) => {
                coll::remove_member(ctx, &self.index_key(&old.consumer, id))?;
                self.add_pending(ctx, &old.consumer, -1)?;
                coll::put_member(ctx, &self.index_key(&nack.consumer, id), b"")?;
                self.add_pending(ctx, &nack.consumer, 1)?;
            }
            None => {
                coll::put_member(ctx, &self.index_key(&nack.consumer, id), b"")?;
                self.add_pending(ctx, &nack.consumer, 1)?;
                group.pending += 1;
            }
        }
        coll::put_member(ctx, &self.keys.pel(&self.name, id), &nack.encode()).map(|_| ())
    }

    /// Removes PEL entry `id` (held as `nack`), its index entry, and counts it out.
    fn remove_nack(
        &self,
        ctx: &mut Ctx<'_, '_>,
        group: &mut Group,
        id: Id,
        nack: &Nack,
    ) -> Result<(), Frame> {
        coll::remove_member(ctx, &self.keys.pel(&self.name, id))?;
        coll::remove_member(ctx, &self.index_key(&nack.consumer, id))?;
        self.add_pending(ctx, &nack.consumer, -1)?;
        group.pending = group.pending.saturating_sub(1);
        Ok(())
    }

    /// Up to `limit` PEL entries with ids in `from..=to`, ascending.
    fn pel(
        &self,
        ctx: &Ctx<'_, '_>,
        from: Id,
        to: Id,
        limit: usize,
    ) -> Result<Vec<(Id, Nack)>, Frame> {
        if from > to {
            return Ok(Vec::new());
        }
        let (lower, upper) = (
            self.keys.pel(&self.name, from),
            self.keys.pel(&self.name, to),
        );
        let skip = lower.len() - 16;
        coll::members(
            ctx,
            Bound::Included(lower.as_slice()),
            Bound::Included(upper.as_slice()),
            Order::Ascending,
            limit,
        )
        .into_iter()
        .map(|(k, v)| {
            let id = id_from(&k[skip..]).ok_or_else(|| self.damaged())?;
            Ok((id, Nack::decode(&v).ok_or_else(|| self.damaged())?))
        })
        .collect()
    }

    /// Up to `limit` ids of `consumer`'s PEL within `from..=to`, ascending.
    fn consumer_ids(
        &self,
        ctx: &Ctx<'_, '_>,
        consumer: &[u8],
        from: Id,
        to: Id,
        limit: usize,
    ) -> Result<Vec<Id>, Frame> {
        if from > to {
            return Ok(Vec::new());
        }
        let (lower, upper) = (self.index_key(consumer, from), self.index_key(consumer, to));
        let skip = lower.len() - 16;
        coll::members(
            ctx,
            Bound::Included(lower.as_slice()),
            Bound::Included(upper.as_slice()),
            Order::Ascending,
            limit,
        )
        .into_iter()
        .map(|(k, _)| id_from(&k[skip..]).ok_or_else(|| self.damaged()))
        .collect()
    }

    /// Every consumer of the group, in name order, with its record.
    fn consumers(&self, ctx: &Ctx<'_, '_>) -> Result<Vec<(Vec<u8>, Consumer)>, Frame> {
        let prefix = self.keys.group_part(&self.name, b'c');
        let end = coll::prefix_upper(&prefix);
        coll::members(
            ctx,
            Bound::Included(prefix.as_slice()),
            Bound::Excluded(end.as_slice()),
            Order::Ascending,
            usize::MAX,
        )
        .into_iter()
        .map(|(k, v)| {
            let [seen, pending] = words::<2>(&v).ok_or_else(|| self.damaged())?;
            Ok((k[prefix.len()..].to_vec(), Consumer { seen, pending }))
        })
        .collect()
    }
}

/// Removes every member key beginning with `prefix`; how many.
fn remove_prefixed(ctx: &mut Ctx<'_, '_>, prefix: &[u8]) -> Result<u64, Frame> {
    let end = coll::prefix_upper(prefix);
    let found = coll::members(
        ctx,
        Bound::Included(prefix),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        usize::MAX,
    );
    let mut removed = 0;
    for (key, _) in found {
        if coll::remove_member(ctx, &key)? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The names and records of every group of a stream, in name order.
fn all_groups(ctx: &Ctx<'_, '_>, keys: &Keys) -> Result<Vec<(Vec<u8>, Group)>, Frame> {
    let prefix = keys.groups();
    let end = coll::prefix_upper(&prefix);
    coll::members(
        ctx,
        Bound::Included(prefix.as_slice()),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        usize::MAX,
    )
    .into_iter()
    .map(|(k, v)| {
        let group = Group::decode(&v).ok_or_else(|| super::stream::damaged(&keys.user))?;
        Ok((k[prefix.len()..].to_vec(), group))
    })
    .collect()
}

/// A stream's numbers and its first entry's id (0-0 if empty): what the entries-read
/// estimate and the lag need.
struct View {
    stream: Stream,
    first: Id,
}

impl View {
    fn new(ctx: &Ctx<'_, '_>, keys: &Keys, stream: Stream) -> Result<View, Frame> {
        let first = edge_id(ctx, keys, true)?.unwrap_or((0, 0));
        Ok(View { stream, first })
    }

    /// Redis's streamEstimateDistanceFromFirstEverEntry.
    fn estimate(&self, id: Id) -> i64 {
        let s = &self.stream;
        let added = s.added as i64;
        if s.added == 0 {
            return 0;
        }
        if s.len == 0 && id <= s.last {
            return added;
        }
        match id.cmp(&s.last) {
            std::cmp::Ordering::Equal => return added,
            std::cmp::Ordering::Greater => return UNKNOWN_READ,
            std::cmp::Ordering::Less => {}
        }
        if s.max_deleted == (0, 0) || s.max_deleted < self.first {
            if id < self.first {
                return added - s.len as i64;
            } else if id == self.first {
                return added - s.len as i64 + 1;
            }
        }
        UNKNOWN_READ
    }

    /// Redis's streamRangeHasTombstones from `start` to the end.
    fn tombstones_from(&self, start: Id) -> bool {
        let s = &self.stream;
        if s.len == 0 || s.max_deleted == (0, 0) || self.first > s.max_deleted {
            return false;
        }
        start <= s.max_deleted
    }

    /// Redis's streamReplyWithCGLag.
    fn lag(&self, group: &Group) -> Frame {
        let s = &self.stream;
        if s.added == 0 {
            return Frame::Integer(0);
        }
        if group.entries_read != UNKNOWN_READ && !self.tombstones_from(group.last) {
            return Frame::Integer(s.added as i64 - group.entries_read);
        }
        match self.estimate(group.last) {
            UNKNOWN_READ => Frame::Null,
            read => Frame::Integer(s.added as i64 - read),
        }
    }

    /// A group's last id moves to `id` (delivered): its entries-read follows.
    fn deliver(&self, group: &mut Group, id: Id) {
        if id <= group.last {
            return;
        }
        if group.entries_read != UNKNOWN_READ && !self.tombstones_from(id) {
            group.entries_read += 1;
        } else if self.stream.added != 0 {
            group.entries_read = self.estimate(id);
        }
        group.last = id;
    }
}

fn entries_read_frame(read: i64) -> Frame {
    if read == UNKNOWN_READ {
        Frame::Null
    } else {
        Frame::Integer(read)
    }
}

fn text(s: &str) -> Frame {
    Frame::bulk(s.as_bytes())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned()
}

/// `-NOGROUP No such key 'k' or consumer group 'g'` (and `suffix`).
fn no_key_or_group(user: &[u8], group: &[u8], suffix: &str) -> Frame {
    Frame::Error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{suffix}",
        lossy(user),
        lossy(group)
    ))
}

/// `-NOGROUP No such consumer group 'g' for key name 'k'`.
fn no_group(user: &[u8], group: &[u8]) -> Frame {
    Frame::Error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        lossy(group),
        lossy(user)
    ))
}

/// An error sent back as `Ok` by `coll::write_existing` for a missing key, as an `Err`.
fn as_reply(reply: Frame) -> Reply {
    match reply {
        Frame::Error(_) => Err(reply),
        other => Ok(other),
    }
}

fn subcommand_syntax(command: &str, sub: &[u8]) -> Frame {
    Frame::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        lossy(sub)
    ))
}

fn help(lines: &[&str]) -> Frame {
    Frame::Array(lines.iter().map(|l| Frame::Simple((*l).into())).collect())
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// Checks a subcommand's arity (Redis's convention: n exact, -n at least n).
fn sub_arity(argv: &[&[u8]], command: &str, sub: &str, arity: i64) -> Result<(), Frame> {
    let argc = argv.len() as i64;
    if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Err(wrong_arity(&format!("{command}|{sub}")));
    }
    Ok(())
}

fn requires_key() -> Frame {
    Frame::err("The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.")
}

/// XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP ...
pub fn xgroup(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    let name = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let arity = match name.as_str() {
        "create" | "setid" => -5,
        "createconsumer" | "delconsumer" => 5,
        "destroy" => 4,
        "help" => 2,
        _ => return Err(unknown_subcommand("xgroup", sub)),
    };
    sub_arity(argv, "xgroup", &name, arity)?;
    if name == "help" {
        return Ok(help(XGROUP_HELP));
    }
    let (create, setid) = (name == "create", name == "setid");
    let (mut mkstream, mut entries_read) = (false, UNKNOWN_READ);
    let mut i = 5;
    while i < argv.len() {
        if create && is_word(argv[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && is_word(argv[i], "entriesread") && i + 1 < argv.len() {
            entries_read = int_arg(argv[i + 1])?;
            if entries_read < 0 && entries_read != UNKNOWN_READ {
                return Err(Frame::err("value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(subcommand_syntax("XGROUP", sub));
        }
    }
    if (create && argv.len() > 8) || (setid && argv.len() != 5 && argv.len() != 7) {
        return Err(subcommand_syntax("XGROUP", sub));
    }
    let user = argv[2];
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: argv[3].to_vec(),
    };
    let now = now_ms();
    let change = |ctx: &mut Ctx<'_, '_>, meta: &mut Meta| -> Reply {
        let stream = Stream::open(ctx, &keys, meta)?;
        let found = groups.load(ctx)?;
        if create {
            let id = match argv[4] {
                b"$" => stream.last,
                id => strict_id(id)?,
            };
            if found.is_some() {
                return Err(Frame::Error(
                    "BUSYGROUP Consumer Group name already exists".into(),
                ));
            }
            let group = Group {
                last: id,
                entries_read,
                pending: 0,
                consumers: 0,
            };
            groups.save(ctx, &group)?;
            stream.save(ctx, &keys, meta)?;
            return Ok(Frame::ok());
        }
        if name == "destroy" {
            if found.is_none() {
                return Ok(Frame::Integer(0));
            }
            // Its blocked readers wake and answer NOGROUP (Redis 7.0).
            if ctx.shared.blocking.waits_on(user) {
                ctx.client.blocking.note(user);
            }
            coll::remove_member(ctx, &keys.group(&groups.name))?;
            remove_prefixed(ctx, &keys.group_data(&groups.name))?;
            return Ok(Frame::Integer(1));
        }
        let Some(mut group) = found else {
            return Err(no_group(user, &groups.name));
        };
        let reply = match name.as_str() {
            "setid" => {
                group.last = match argv[4] {
                    b"$" => stream.last,
                    id => loose_id(id, 0)?,
                };
                group.entries_read = entries_read;
                Frame::ok()
            }
            "createconsumer" => {
                let created = groups.touch(ctx, &mut group, argv[4], now, false)?;
                Frame::Integer(i64::from(created))
            }
            _ => {
                // DELCONSUMER: its pending entries go with it.
                let consumer = argv[4];
                let Some(record) = groups.consumer(ctx, consumer)? else {
                    return Ok(Frame::Integer(0));
                };
                let ids = groups.consumer_ids(ctx, consumer, (0, 0), MAX_ID, usize::MAX)?;
                for id in &ids {
                    coll::remove_member(ctx, &keys.pel(&groups.name, *id))?;
                }
                remove_prefixed(ctx, &keys.consumer_pel(&groups.name, consumer))?;
                coll::remove_member(ctx, &keys.consumer(&groups.name, consumer))?;
                group.pending = group.pending.saturating_sub(ids.len() as u64);
                group.consumers = group.consumers.saturating_sub(1);
                Frame::Integer(record.pending as i64)
            }
        };
        groups.save(ctx, &group)?;
        Ok(reply)
    };
    if create && mkstream {
        coll::write(ctx, user, Kind::Stream, change)
    } else {
        as_reply(coll::write_existing(
            ctx,
            user,
            Kind::Stream,
            requires_key(),
            change,
        )?)
    }
}

/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key
/// [key ...] id [id ...].
pub fn xreadgroup(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = super::stream::prepare_read(ctx, argv, true)?;
    super::stream::read_or_block(ctx, args)
}

/// Whether `user` (a stream) has group `name`.
pub(super) fn group_exists(ctx: &mut Ctx<'_, '_>, user: &[u8], name: &[u8]) -> Result<bool, Frame> {
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: name.to_vec(),
    };
    Ok(groups.load(ctx)?.is_some())
}

/// XREADGROUP's NOGROUP error.
pub(super) fn no_group_for_read(user: &[u8], group: &[u8]) -> Frame {
    no_key_or_group(user, group, " in XREADGROUP with GROUP option")
}

/// XREADGROUP's read now (see `stream::read_streams`; `stream::prepare_read` checked every
/// key and group): each stream is served in a unit of its own.
pub(super) fn read_group(ctx: &mut Ctx<'_, '_>, args: &ReadArgs) -> Result<Option<Frame>, Frame> {
    let Some((group_name, consumer)) = &args.group else {
        return Ok(None);
    };
    let limit = if args.count == 0 {
        usize::MAX
    } else {
        usize::try_from(args.count).unwrap_or(usize::MAX)
    };
    let now = now_ms();
    let mut served = Vec::new();
    for (key, from) in args.keys.iter().zip(&args.from) {
        let keys = Keys::new(key);
        let groups = Groups {
            keys: &keys,
            name: group_name.clone(),
        };
        let reply = coll::write_existing(ctx, key, Kind::Stream, Frame::Null, |ctx, meta| {
            let stream = Stream::load(ctx, &keys, meta)?;
            let Some(mut group) = groups.load(ctx)? else {
                return Err(no_group_for_read(key, group_name));
            };
            let reply = match *from {
                ReadFrom::After(after) => {
                    groups.touch(ctx, &mut group, consumer, now, true)?;
                    let Some(start) = incr_id(after) else {
                        groups.save(ctx, &group)?;
                        return Ok(Frame::Array(vec![]));
                    };
                    let ids = groups.consumer_ids(ctx, consumer, start, MAX_ID, limit)?;
                    let mut items = Vec::with_capacity(ids.len());
                    for id in ids {
                        let found = entries(ctx, &keys, id, id, Order::Ascending, 1)?;
                        match found.first() {
                            None => {
                                items.push(Frame::Array(vec![id_frame(id), coll::null_array(ctx)]))
                            }
                            Some((_, value)) => {
                                items.push(entry_frame(key, id, value)?);
                                let old = groups.nack(ctx, id)?.ok_or_else(|| groups.damaged())?;
                                let nack = Nack {
                                    time: now,
                                    count: old.count.saturating_add(1),
                                    consumer: old.consumer.clone(),
                                };
                                groups.put_nack(ctx, &mut group, id, Some(&old), &nack)?;
                            }
                        }
                    }
                    Frame::Array(items)
                }
                ReadFrom::New => {
                    let top = edge_id(ctx, &keys, false)?;
                    if top.is_none_or(|top| top <= group.last) {
                        return Ok(Frame::Null);
                    }
                    groups.touch(ctx, &mut group, consumer, now, true)?;
                    let view = View::new(ctx, &keys, stream)?;
                    let start = incr_id(group.last).unwrap_or(MAX_ID);
                    let found = entries(ctx, &keys, start, MAX_ID, Order::Ascending, limit)?;
                    for (id, _) in &found {
                        view.deliver(&mut group, *id);
                        if !args.noack {
                            let old = groups.nack(ctx, *id)?;
                            let nack = Nack {
                                time: now,
                                count: 1,
                                consumer: consumer.clone(),
                            };
                            groups.put_nack(ctx, &mut group, *id, old.as_ref(), &nack)?;
                        }
                    }
                    entries_frame(key, &found)?
                }
            };
            groups.save(ctx, &group)?;
            Ok(reply)
        })?;
        if reply != Frame::Null {
            served.push((key.clone(), reply));
        }
    }
    if served.is_empty() {
        return Ok(None);
    }
    Ok(Some(read_reply(ctx, served)))
}

/// XACK key group id [id ...]: how many PEL entries were removed.
pub fn xack(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: argv[2].to_vec(),
    };
    coll::write_existing(ctx, user, Kind::Stream, Frame::Integer(0), |ctx, _meta| {
        let Some(mut group) = groups.load(ctx)? else {
            return Ok(Frame::Integer(0));
        };
        let ids = argv[3..]
            .iter()
            .map(|a| strict_id(a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut acked = 0;
        for id in ids {
            if let Some(nack) = groups.nack(ctx, id)? {
                groups.remove_nack(ctx, &mut group, id, &nack)?;
                acked += 1;
            }
        }
        groups.save(ctx, &group)?;
        Ok(Frame::Integer(acked))
    })
}

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]].
pub fn xpending(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let argc = argv.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(syntax_error());
    }
    let mut extended = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0;
        if is_word(argv[3], "idle") {
            min_idle = int_arg(argv[4])?;
            if argc < 8 {
                return Err(syntax_error());
            }
            at += 2;
        }
        let count = int_arg(argv[at + 2])?.max(0);
        let from = start_bound(argv[at])?;
        let to = end_bound(argv[at + 1])?;
        let consumer = argv.get(at + 3).map(|c| c.to_vec());
        extended = Some((min_idle, from, to, count, consumer));
    }
    let user = argv[1];
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: argv[2].to_vec(),
    };
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let missing = || no_key_or_group(user, argv[2], "");
    if coll::open_read(ctx, user, Kind::Stream)?.is_none() {
        return Err(missing());
    }
    let Some(group) = groups.load(ctx)? else {
        return Err(missing());
    };
    let Some((min_idle, from, to, count, consumer)) = extended else {
        if group.pending == 0 {
            return Ok(Frame::Array(vec![
                Frame::Integer(0),
                Frame::Null,
                Frame::Null,
                coll::null_array(ctx),
            ]));
        }
        let first = groups.pel(ctx, (0, 0), MAX_ID, 1)?;
        let last = {
            let (lower, upper) = (
                keys.pel(&groups.name, (0, 0)),
                keys.pel(&groups.name, MAX_ID),
            );
            coll::members(
                ctx,
                Bound::Included(lower.as_slice()),
                Bound::Included(upper.as_slice()),
                Order::Descending,
                1,
            )
        };
        let last_id = last
            .first()
            .and_then(|(k, _)| id_from(&k[k.len() - 16..]))
            .ok_or_else(|| groups.damaged())?;
        let first_id = first
            .first()
            .map(|(id, _)| *id)
            .ok_or_else(|| groups.damaged())?;
        let holders: Vec<Frame> = groups
            .consumers(ctx)?
            .into_iter()
            .filter(|(_, c)| c.pending > 0)
            .map(|(name, c)| {
                Frame::Array(vec![Frame::bulk(name), Frame::bulk(c.pending.to_string())])
            })
            .collect();
        return Ok(Frame::Array(vec![
            Frame::Integer(group.pending as i64),
            id_frame(first_id),
            id_frame(last_id),
            Frame::Array(holders),
        ]));
    };
    let now = now_ms();
    let mut out = Vec::new();
    let mut left = count as u64;
    // Without IDLE the first `count` entries of the range are the answer: read no more.
    let reads = if min_idle <= 0 {
        usize::try_from(count).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    let wanted = |nack: &Nack| min_idle <= 0 || now.saturating_sub(nack.time) as i64 >= min_idle;
    let mut push = |id: Id, nack: &Nack| {
        out.push(Frame::Array(vec![
            id_frame(id),
            Frame::bulk(nack.consumer.clone()),
            Frame::Integer(now.saturating_sub(nack.time) as i64),
            Frame::Integer(nack.count as i64),
        ]));
    };
    match consumer {
        Some(name) => {
            if groups.consumer(ctx, &name)?.is_none() {
                return Ok(Frame::Array(vec![]));
            }
            for id in groups.consumer_ids(ctx, &name, from, to, reads)? {
                if left == 0 {
                    break;
                }
                let nack = groups.nack(ctx, id)?.ok_or_else(|| groups.damaged())?;
                if wanted(&nack) {
                    push(id, &nack);
                    left -= 1;
                }
            }
        }
        None => {
            for (id, nack) in groups.pel(ctx, from, to, reads)? {
                if left == 0 {
                    break;
                }
                if wanted(&nack) {
                    push(id, &nack);
                    left -= 1;
                }
            }
        }
    }
    Ok(Frame::Array(out))
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-ms]
/// [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid].
pub fn xclaim(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: argv[2].to_vec(),
    };
    let consumer = argv[3];
    let missing = no_key_or_group(user, argv[2], "");
    let reply = coll::write_existing(ctx, user, Kind::Stream, missing, |ctx, _meta| {
        let Some(mut group) = groups.load(ctx)? else {
            return Err(no_key_or_group(user, argv[2], ""));
        };
        let min_idle = crate::parse::parse_int(argv[4])
            .ok_or_else(|| Frame::err("Invalid min-idle-time argument for XCLAIM"))?
            .max(0);
        let mut ids = Vec::new();
        let mut j = 5;
        while j < argv.len() {
            match strict_id(argv[j]) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let now = now_ms();
        let (mut force, mut justid) = (false, false);
        let (mut retry, mut time): (i64, i64) = (-1, -1);
        let mut last_id = (0, 0);
        while j < argv.len() {
            let more = argv.len() - 1 - j;
            let opt = argv[j];
            let number = |arg: &[u8], what: &str| {
                crate::parse::parse_int(arg)
                    .ok_or_else(|| Frame::err(format!("Invalid {what} option argument for XCLAIM")))
            };
            if is_word(opt, "force") {
                force = true;
            } else if is_word(opt, "justid") {
                justid = true;
            } else if is_word(opt, "idle") && more > 0 {
                j += 1;
                time = (now as i64).saturating_sub(number(argv[j], "IDLE")?);
            } else if is_word(opt, "time") && more > 0 {
                j += 1;
                time = number(argv[j], "TIME")?;
            } else if is_word(opt, "retrycount") && more > 0 {
                j += 1;
                retry = number(argv[j], "RETRYCOUNT")?;
            } else if is_word(opt, "lastid") && more > 0 {
                j += 1;
                last_id = strict_id(argv[j])?;
            } else {
                return Err(Frame::err(format!(
                    "Unrecognized XCLAIM option '{}'",
                    lossy(opt)
                )));
            }
            j += 1;
        }
        let time = if time < 0 || time > now as i64 {
            now
        } else {
            time as u64
        };
        if last_id > group.last {
            group.last = last_id;
        }
        let mut out = Vec::new();
        let mut touched = false;
        for id in ids {
            let old = groups.nack(ctx, id)?;
            let entry = entries(ctx, &keys, id, id, Order::Ascending, 1)?;
            let Some((_, value)) = entry.first() else {
                // The entry is gone: its PEL entry goes too.
                if let Some(old) = old {
                    groups.remove_nack(ctx, &mut group, id, &old)?;
                }
                continue;
            };
            let (base, holder) = match &old {
                Some(old) => {
                    if min_idle > 0 && (now.saturating_sub(old.time) as i64) < min_idle {
                        continue;
                    }
                    (old.count, Some(old))
                }
                None if force => (1, None),
                None => continue,
            };
            if !touched {
                groups.touch(ctx, &mut group, consumer, now, true)?;
                touched = true;
            }
            let count = if retry >= 0 {
                retry as u64
            } else if !justid {
                base.saturating_add(1)
            } else {
                base
            };
            let nack = Nack {
                time,
                count,
                consumer: consumer.to_vec(),
            };
            groups.put_nack(ctx, &mut group, id, holder, &nack)?;
            out.push(if justid {
                id_frame(id)
            } else {
                entry_frame(user, id, value)?
            });
        }
        groups.save(ctx, &group)?;
        Ok(Frame::Array(out))
    })?;
    as_reply(reply)
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]:
/// `[next-start, [claimed ...], [deleted ids ...]]`.
pub fn xautoclaim(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let min_idle = crate::parse::parse_int(argv[4])
        .ok_or_else(|| Frame::err("Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0);
    let start = start_bound(argv[5])?;
    let (mut count, mut justid) = (100i64, false);
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if is_word(argv[j], "count") && more > 0 {
            // Redis bounds it so that count * 10 attempts cannot overflow.
            count = crate::parse::parse_int(argv[j + 1])
                .filter(|n| (1..=i64::MAX / 16).contains(n))
                .ok_or_else(|| Frame::err("COUNT must be > 0"))?;
            j += 1;
        } else if is_word(argv[j], "justid") {
            justid = true;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    let user = argv[1];
    let keys = Keys::new(user);
    let groups = Groups {
        keys: &keys,
        name: argv[2].to_vec(),
    };
    let consumer = argv[3];
    let missing = no_key_or_group(user, argv[2], "");
    let reply = coll::write_existing(ctx, user, Kind::Stream, missing, |ctx, _meta| {
        let Some(mut group) = groups.load(ctx)? else {
            return Err(no_key_or_group(user, argv[2], ""));
        };
        let now = now_ms();
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        let mut touched = false;
        // At most `attempts` entries are examined; one more names the next cursor.
        let wanted = usize::try_from(attempts.saturating_add(1)).unwrap_or(usize::MAX);
        let pel = groups.pel(ctx, start, MAX_ID, wanted)?;
        let mut next = (0, 0);
        for (id, nack) in &pel {
            if attempts == 0 || left == 0 {
                next = *id;
                break;
            }
            attempts -= 1;
            let entry = entries(ctx, &keys, *id, *id, Order::Ascending, 1)?;
            let Some((_, value)) = entry.first() else {
                groups.remove_nack(ctx, &mut group, *id, nack)?;
                deleted.push(id_frame(*id));
                left -= 1;
                continue;
            };
            if min_idle > 0 && (now.saturating_sub(nack.time) as i64) < min_idle {
                continue;
            }
            if !touched {
                groups.touch(ctx, &mut group, consumer, now, true)?;
                touched = true;
            }
            let moved = Nack {
                time: now,
                count: if justid {
                    nack.count
                } else {
                    nack.count.saturating_add(1)
                },
                consumer: consumer.to_vec(),
            };
            groups.put_nack(ctx, &mut group, *id, Some(nack), &moved)?;
            claimed.push(if justid {
                id_frame(*id)
            } else {
                entry_frame(user, *id, value)?
            });
            left -= 1;
        }
        groups.save(ctx, &group)?;
        Ok(Frame::Array(vec![
            id_frame(next),
            Frame::Array(claimed),
            Frame::Array(deleted),
        ]))
    })?;
    as_reply(reply)
}

/// XINFO STREAM key [FULL [COUNT count]] | GROUPS key | CONSUMERS key group | HELP.
pub fn xinfo(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    let name = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let arity = match name.as_str() {
        "stream" => -3,
        "groups" => 3,
        "consumers" => 4,
        "help" => 2,
        _ => return Err(unknown_subcommand("xinfo", sub)),
    };
    sub_arity(argv, "xinfo", &name, arity)?;
    if name == "help" {
        return Ok(help(XINFO_HELP));
    }
    let user = argv[2];
    let keys = Keys::new(user);
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    let Some(stream) = super::stream::open_read(ctx, user)? else {
        return Err(Frame::err("no such key"));
    };
    let view = View::new(ctx, &keys, stream)?;
    let now = now_ms();
    match name.as_str() {
        "consumers" => {
            let groups = Groups {
                keys: &keys,
                name: argv[3].to_vec(),
            };
            if groups.load(ctx)?.is_none() {
                return Err(no_group(user, argv[3]));
            }
            let items = groups
                .consumers(ctx)?
                .into_iter()
                .map(|(name, c)| {
                    Frame::Map(vec![
                        (text("name"), Frame::bulk(name)),
                        (text("pending"), Frame::Integer(c.pending as i64)),
                        (
                            text("idle"),
                            Frame::Integer(now.saturating_sub(c.seen) as i64),
                        ),
                    ])
                })
                .collect();
            Ok(Frame::Array(items))
        }
        "groups" => {
            let items = all_groups(ctx, &keys)?
                .into_iter()
                .map(|(name, g)| {
                    Frame::Map(vec![
                        (text("name"), Frame::bulk(name)),
                        (text("consumers"), Frame::Integer(g.consumers as i64)),
                        (text("pending"), Frame::Integer(g.pending as i64)),
                        (text("last-delivered-id"), id_frame(g.last)),
                        (text("entries-read"), entries_read_frame(g.entries_read)),
                        (text("lag"), view.lag(&g)),
                    ])
                })
                .collect();
            Ok(Frame::Array(items))
        }
        _ => stream_info(ctx, argv, &keys, &view),
    }
}

/// XINFO STREAM's reply.
fn stream_info(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], keys: &Keys, view: &View) -> Reply {
    let mut full = None;
    if argv.len() > 3 {
        if !is_word(argv[3], "full") {
            return Err(subcommand_syntax("XINFO", argv[1]));
        }
        let mut count = 10i64;
        match &argv[4..] {
            [] => {}
            [word, n] if is_word(word, "count") => {
                count = int_arg(n)?;
                if count < 0 {
                    count = 0;
                }
            }
            _ => return Err(subcommand_syntax("XINFO", argv[1])),
        }
        full = Some(count);
    }
    let user = &keys.user;
    let s = view.stream;
    let groups = all_groups(ctx, keys)?;
    // Redis's radix tree of listpack nodes of up to 100 entries: an estimate.
    let nodes = s.len.div_ceil(100);
    let mut pairs = vec![
        (text("length"), Frame::Integer(s.len as i64)),
        (text("radix-tree-keys"), Frame::Integer(nodes as i64)),
        (text("radix-tree-nodes"), Frame::Integer(nodes as i64 + 1)),
        (text("last-generated-id"), id_frame(s.last)),
        (text("max-deleted-entry-id"), id_frame(s.max_deleted)),
        (text("entries-added"), Frame::Integer(s.added as i64)),
        (text("recorded-first-entry-id"), id_frame(view.first)),
    ];
    let Some(count) = full else {
        let edge = |first: bool, ctx: &Ctx<'_, '_>| -> Result<Frame, Frame> {
            let order = if first {
                Order::Ascending
            } else {
                Order::Descending
            };
            Ok(
                match entries(ctx, keys, (0, 0), MAX_ID, order, 1)?.first() {
                    Some((id, v)) => entry_frame(user, *id, v)?,
                    None => Frame::Null,
                },
            )
        };
        pairs.push((text("groups"), Frame::Integer(groups.len() as i64)));
        pairs.push((text("first-entry"), edge(true, &*ctx)?));
        pairs.push((text("last-entry"), edge(false, &*ctx)?));
        return Ok(Frame::Map(pairs));
    };
    let limit = if count == 0 {
        usize::MAX
    } else {
        usize::try_from(count).unwrap_or(usize::MAX)
    };
    let found = entries(ctx, keys, (0, 0), MAX_ID, Order::Ascending, limit)?;
    pairs.push((text("entries"), entries_frame(user, &found)?));
    let mut group_items = Vec::new();
    for (name, g) in groups {
        let groups = Groups { keys, name };
        let pel = groups.pel(ctx, (0, 0), MAX_ID, limit)?;
        let pending = pel
            .iter()
            .map(|(id, n)| {
                Frame::Array(vec![
                    id_frame(*id),
                    Frame::bulk(n.consumer.clone()),
                    Frame::Integer(n.time as i64),
                    Frame::Integer(n.count as i64),
                ])
            })
            .collect();
        let mut consumers = Vec::new();
        for (cname, c) in groups.consumers(ctx)? {
            let mut own = Vec::new();
            for id in groups.consumer_ids(ctx, &cname, (0, 0), MAX_ID, limit)? {
                let nack = groups.nack(ctx, id)?.ok_or_else(|| groups.damaged())?;
                own.push(Frame::Array(vec![
                    id_frame(id),
                    Frame::Integer(nack.time as i64),
                    Frame::Integer(nack.count as i64),
                ]));
            }
            consumers.push(Frame::Map(vec![
                (text("name"), Frame::bulk(cname)),
                (text("seen-time"), Frame::Integer(c.seen as i64)),
                (text("pel-count"), Frame::Integer(c.pending as i64)),
                (text("pending"), Frame::Array(own)),
            ]));
        }
        group_items.push(Frame::Map(vec![
            (text("name"), Frame::bulk(groups.name.clone())),
            (text("last-delivered-id"), id_frame(g.last)),
            (text("entries-read"), entries_read_frame(g.entries_read)),
            (text("lag"), view.lag(&g)),
            (text("pel-count"), Frame::Integer(g.pending as i64)),
            (text("pending"), Frame::Array(pending)),
            (text("consumers"), Frame::Array(consumers)),
        ]));
    }
    pairs.push((text("groups"), Frame::Array(group_items)));
    Ok(Frame::Map(pairs))
}

#[cfg(test)]
mod tests {
    use super::super::{execute, After, Buffers, Ctx};
    use crate::frame::Frame;
    use crate::server::{Config, Shared};
    use forest_store::file::{CrashMode, FaultPlan, SimDir};
    use forest_store::{Batch, Durability, Store, StoreOptions};

    /// A server state over a simulated directory (power losses), repaired as the server
    /// does at start (as `rename`'s crash test).
    fn sim_shared(dir: &SimDir) -> Shared {
        let store = Store::open(
            dir.clone(),
            StoreOptions {
                engine: Some("lockbtree".into()),
                durability: Durability::Group,
                shards: 1,
                switch_engine: false,
                memory_budget_bytes: None,
            },
        )
        .expect("open store");
        crate::collection::repair(&store).expect("repair");
        Shared::new(
            store,
            Config {
                durability: Durability::Group,
                ..Config::default()
            },
        )
    }

    fn run_in(shared: &Shared, batch: &mut Batch<'_>, argv: &[&str]) -> Frame {
        let mut client = shared.new_client("127.0.0.1:2".into(), "127.0.0.1:6379".into(), None);
        let mut buffers = Buffers::default();
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let mut ctx = Ctx {
            shared,
            client: &mut client,
            batch,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            unit: None,
        };
        execute(&mut ctx, &argv)
    }

    fn run_alone(shared: &Shared, argv: &[&str]) -> Frame {
        let mut batch = shared.store.batch();
        let reply = run_in(shared, &mut batch, argv);
        batch.wait().expect("wait");
        reply
    }

    fn items(frame: Frame) -> Vec<Frame> {
        match frame {
            Frame::Array(items) => items,
            other => panic!("array expected: {other:?}"),
        }
    }

    /// Who holds each pending entry by the extended XPENDING, checked against its summary
    /// and against XINFO CONSUMERS' counts: the consumer names holding all of them.
    fn holders(shared: &Shared, total: i64) -> Vec<Frame> {
        let rows = items(run_alone(shared, &["XPENDING", "s", "g", "-", "+", "1000"]));
        assert_eq!(rows.len() as i64, total, "PEL entries");
        let mut counts = std::collections::BTreeMap::new();
        for row in rows {
            let name = items(row)[1].clone();
            *counts.entry(format!("{name:?}")).or_insert(0i64) += 1;
        }
        let summary = items(run_alone(shared, &["XPENDING", "s", "g"]));
        assert_eq!(summary[0], Frame::Integer(total));
        let mut listed = Vec::new();
        for holder in items(summary[3].clone()) {
            let pair = items(holder);
            let Frame::Bulk(n) = &pair[1] else {
                panic!("count expected");
            };
            let n: i64 = String::from_utf8_lossy(n).parse().expect("count");
            assert_eq!(counts.get(&format!("{:?}", pair[0])), Some(&n));
            listed.push(pair[0].clone());
        }
        for consumer in items(run_alone(shared, &["XINFO", "CONSUMERS", "s", "g"])) {
            let Frame::Map(pairs) = consumer else {
                panic!("map expected");
            };
            let pending = counts.get(&format!("{:?}", pairs[0].1)).copied();
            assert_eq!(
                pairs[1].1,
                Frame::Integer(pending.unwrap_or(0)),
                "{pairs:?}"
            );
        }
        listed
    }

    // Goal: a consumer-group command is whole after a crash: XCLAIM of 200 pending entries
    // rewrites 200 PEL entries, 400 index entries and two consumers' counts, and after a
    // power loss they are all the old owner's or all the new one's, with every count
    // agreeing with the entries it counts. Method: SimDir power losses (scattered and
    // random write-back) while XCLAIM's batch waits on a failed fsync, over 40 seeds; both
    // outcomes must occur.
    #[test]
    fn xclaim_is_whole_after_a_crash() {
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let dir = SimDir::new(seed);
            let shared = sim_shared(&dir);
            for i in 1..=200 {
                let id = format!("{i}-0");
                run_alone(
                    &shared,
                    &["XADD", "s", &id, "field", "some value of some length"],
                );
            }
            run_alone(&shared, &["XGROUP", "CREATE", "s", "g", "0"]);
            run_alone(
                &shared,
                &["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"],
            );
            let mut claim = vec!["XCLAIM", "s", "g", "bob", "0"];
            let ids: Vec<String> = (1..=200).map(|i| format!("{i}-0")).collect();
            claim.extend(ids.iter().map(String::as_str));
            claim.push("JUSTID");
            let mut batch = shared.store.batch();
            let reply = run_in(&shared, &mut batch, &claim);
            assert_eq!(items(reply).len(), 200);
            dir.set_faults(FaultPlan::sync(1));
            let acked = batch.wait().is_ok();
            dir.set_faults(FaultPlan::default());
            dir.crash_with(if seed % 4 < 2 {
                CrashMode::Scatter
            } else {
                CrashMode::Random
            });
            std::mem::forget(shared);
            let after = sim_shared(&dir);
            let who = holders(&after, 200);
            let claimed = who == vec![Frame::bulk("bob")];
            assert!(
                claimed || who == vec![Frame::bulk("alice")],
                "seed {seed}: XCLAIM is not whole after a crash: {who:?}"
            );
            if acked {
                assert!(claimed, "seed {seed}: acknowledged");
            }
            outcomes.insert(claimed);
        }
        assert_eq!(
            outcomes.len(),
            2,
            "the crashes kept both outcomes: {outcomes:?}"
        );
    }
}
