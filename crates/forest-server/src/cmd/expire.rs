//! The expiry commands (docs/PROTOCOL.md "Expiry"): EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT
//! (NX|XX|GT|LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, GETEX, SETEX, PSETEX (SET's
//! options are in `set.rs`), DEBUG SET-ACTIVE-EXPIRE; and what every command shares to honour
//! deadlines ([`crate::expiry`] has the layout and the invariants):
//!
//! - [`purge_due`]: a write that finds its key due deletes it first (so INCR starts at 0,
//!   SET NX succeeds, a collection starts empty);
//! - [`delete_expired`]: the one deletion of an expired key, lazy (a write finding it due),
//!   active ([`expire_cycle`]) or asked for (a deadline in the past);
//! - [`stage_deadline`] / [`place_string_in`]: a deadline set, changed or cleared in the
//!   same atomic batch as the write it belongs to.
//!
//! Semantics and error texts follow redis `src/expire.c` (`expireGenericCommand`,
//! `ttlGenericCommand`, `persistCommand`) and `src/t_string.c` (`getexCommand`,
//! `getExpireMillisecondsOrReply`): relative times are added to one reading of the clock
//! per command; a deadline at or before it deletes the key.

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use forest_core::{check_entry, Order};
use forest_store::WriteBatch;

use super::{coll, int_arg, is_word, syntax_error, After, Buffers, Client, Ctx, Reply};
use crate::expiry::{encode_string, index_key, string_key};
use crate::frame::Frame;
use crate::server::Shared;

/// The unit of a time argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Millis,
}

/// `-ERR invalid expire time in 'name' command`.
pub fn invalid_expire(command: &str) -> Frame {
    Frame::err(format!("invalid expire time in '{command}' command"))
}

/// The deadline of SET's, SETEX's and GETEX's time argument: positive, relative to `now_ms`
/// unless `absolute`; Redis's errors for a non-integer, a value of 0 or less, and overflow.
pub fn positive_deadline(
    arg: &[u8],
    unit: TimeUnit,
    absolute: bool,
    now_ms: u64,
    command: &str,
) -> Result<u64, Frame> {
    let n = int_arg(arg)?;
    if n <= 0 || (unit == TimeUnit::Seconds && n > i64::MAX / 1000) {
        return Err(invalid_expire(command));
    }
    let ms = if unit == TimeUnit::Seconds {
        n * 1000
    } else {
        n
    };
    let ms = if absolute {
        Some(ms)
    } else {
        ms.checked_add(now_ms as i64)
    };
    match ms {
        Some(ms) if ms > 0 => Ok(ms as u64),
        _ => Err(invalid_expire(command)),
    }
}

/// Whether `user` exists (string or collection), expired or not. Precondition for a write:
/// its stripe lock is held and [`purge_due`] ran, so nothing due is left.
fn exists_raw(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    if ctx.present_raw(user) {
        return Ok(true);
    }
    Ok(coll::kind_of(ctx, user)?.is_some())
}

/// Whether `user` exists and is not due (a read: no lock).
fn exists_live(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    if ctx.string_present(user) {
        return Ok(true);
    }
    Ok(coll::kind_of(ctx, user)?.is_some())
}

/// Scans that find the generation of deletions changed retry this many times, then check
/// each row with a point read as they go (always right, a read per row).
pub const SCAN_RETRIES: usize = 3;

/// Whether a key a scan listed (`kind` "string" or a collection's type name) is still live,
/// by a point read that checks the deadline first ([`crate::expiry`]'s invariants); for a
/// string with `value`, only if it still holds that value. Read as the running command sees
/// it: inside EXEC or a script, the unit's own writes and deadlines first (a key only the
/// unit wrote is not in the store yet).
pub fn still_live(
    ctx: &Ctx<'_, '_>,
    key: &[u8],
    kind: &str,
    value: Option<&[u8]>,
    scratch: &mut Vec<u8>,
) -> bool {
    if ctx.is_due(key) {
        return false;
    }
    if kind != "string" {
        return ctx.read_at(&crate::collection::type_key(key), scratch);
    }
    ctx.read(key, scratch) && value.is_none_or(|v| v == scratch.as_slice())
}

/// Drops from `keys` (listed by a scan that began when the generation of deletions was
/// `generation`) the keys deleted as expired meanwhile: if the generation moved, each key is
/// read again (see [`crate::expiry::Expires::generation`]).
pub fn recheck_listed(ctx: &Ctx<'_, '_>, generation: u64, keys: &mut Vec<(Vec<u8>, &'static str)>) {
    if ctx.shared.expires.generation() == generation {
        return;
    }
    let mut scratch = Vec::new();
    keys.retain(|(key, kind)| still_live(ctx, key, kind, None, &mut scratch));
}

/// Deletes `user` if its deadline has passed; true if it did. Every write of a key calls
/// this under the key's stripe lock before it reads the key.
pub fn purge_due(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    if !ctx.is_due(user) {
        return Ok(false);
    }
    delete_expired(ctx, user)
}

/// The one deletion of an expired key (lazy, active, or a deadline set in the past): its
/// string or collection and its deadline entry, as one atomic batch; then the deadline
/// leaves the map (after the store, so no reader sees the value without its deadline).
/// Returns whether the key existed. Precondition: `user`'s stripe lock is held.
///
/// WATCH must see this as a write of `user`: hook it here.
pub fn delete_expired(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    let deadline = ctx.deadline(user);
    let own_unit = ctx.unit.is_none();
    ctx.begin_unit();
    let (existed, reserved) = delete_in_unit(ctx, user, deadline)?;
    // The map forgets the deadline once the unit's batch is visible (EXEC's: at its end).
    if let Some(unit) = ctx.unit.as_mut() {
        unit.deadlines.push(DeadlineChange {
            user: user.to_vec(),
            old: deadline,
            new: None,
            expired: Some(existed),
            flush: false,
            reserved,
        });
    }
    if own_unit {
        ctx.end_unit()?;
    }
    Ok(existed)
}

/// A deadline change decided in a unit (see [`super::Unit`]): applied to the map by
/// [`apply_deadlines`] once the unit's batch is visible.
#[derive(Clone, Debug)]
pub struct DeadlineChange {
    pub user: Vec<u8>,
    pub old: Option<u64>,
    pub new: Option<u64>,
    /// A deletion of an expired key ([`delete_expired`]): whether the key existed.
    pub expired: Option<bool>,
    /// FLUSHDB inside EXEC ([`flush_index`]): the map forgets every deadline (`user`,
    /// `old` and `new` unused); the unit's reads see none from here on.
    pub flush: bool,
    /// The reserved store entries (a collection's `FF 'E'` entry) the change adds, or
    /// removes (negative): a string's deadline is in its value, not a reserved entry.
    pub reserved: i64,
}

/// The map takes a unit's deadline changes, in order, after its batch is written and while
/// its stripe locks are held.
pub fn apply_deadlines(shared: &Shared, changes: &[DeadlineChange]) {
    for change in changes {
        if change.flush {
            shared.expires.clear();
            continue;
        }
        match change.expired {
            Some(existed) => {
                let Some(deadline) = change.old else {
                    continue;
                };
                // After the store write, before the map forgets (`Expires::generation`).
                shared.expires.bump_generation();
                shared.expires.remove(&change.user);
                shared.collections.add_reserved(change.reserved);
                if existed && deadline <= shared.expires.now_ms() {
                    shared.expires.note_expired();
                }
            }
            None => account(shared, &change.user, change.new, change.reserved),
        }
    }
}

/// Removes `user` (string or collection) and a collection's deadline entry in the open
/// unit: whether it existed, and the reserved entries removed (negative).
fn delete_in_unit(
    ctx: &mut Ctx<'_, '_>,
    user: &[u8],
    deadline: Option<u64>,
) -> Result<(bool, i64), Frame> {
    let mut existed = ctx.remove(user)?;
    let mut reserved = 0;
    if !existed && ctx.shared.collections.any() {
        existed = coll::delete_locked(ctx, user)?;
    }
    if let Some(deadline) = deadline {
        if ctx.remove_at(&index_key(deadline, user))? {
            reserved -= 1;
        }
    }
    Ok((existed, reserved))
}

/// Decides the change of `user`'s deadline to `new` (None: none) into the open unit, and
/// the map's change for when the unit's batch is visible. A string moves to where it lives
/// with `new` (raw key, or `FF 'x'` with the deadline in its value); a collection's `FF 'E'`
/// entry is replaced; a key that does not exist (yet: a command that writes it after)
/// takes the deadline in the map, and its write goes where the deadline says.
/// Preconditions: a unit is open, `user`'s stripe lock is held, `new` is in the future, and
/// the command's own write of `user`, if any, is decided (so the key's kind is known).
pub fn stage_deadline(ctx: &mut Ctx<'_, '_>, user: &[u8], new: Option<u64>) -> Result<(), Frame> {
    debug_assert!(ctx.unit.is_some(), "a unit is open");
    let old = ctx.deadline(user);
    if old == new {
        return Ok(());
    }
    let mut value = Vec::new();
    let string = ctx.read_raw(user, &mut value);
    let collection = !string && ctx.present_at(&crate::collection::type_key(user));
    // Checked before anything is decided: a failure leaves the unit as it was.
    if let Some(new) = new {
        let checked = if string {
            check_entry(&string_key(user), &encode_string(new, &value))
        } else {
            check_entry(&index_key(new, user), b"")
        };
        checked.map_err(|e| super::store_error(&e))?;
    }
    let mut reserved = 0;
    // A collection's entry, also where a string just replaced the collection (MSET, SET
    // KEEPTTL inside EXEC).
    if let Some(old) = old {
        if ctx.remove_at(&index_key(old, user))? {
            reserved -= 1;
        }
    }
    if string {
        match old {
            Some(_) => ctx.remove_at(&string_key(user))?,
            None => ctx.remove_at(user)?,
        };
        match new {
            Some(new) => ctx.upsert_at(&string_key(user), &encode_string(new, &value))?,
            None => ctx.upsert_at(user, &value)?,
        }
    } else if let (Some(new), true) = (new, collection) {
        ctx.upsert_at(&index_key(new, user), b"")?;
        reserved += 1;
    }
    let change = DeadlineChange {
        user: user.to_vec(),
        old,
        new,
        expired: None,
        flush: false,
        reserved,
    };
    match ctx.unit.as_mut() {
        Some(unit) => unit.deadlines.push(change),
        // No unit (a caller broke the precondition): the writes above went to the batch.
        None => apply_deadlines(ctx.shared, &[change]),
    }
    Ok(())
}

/// Whether `user` can keep deadline `deadline` (None: no deadline, always): a string
/// (`value`) at `FF 'x'`, a collection (None) in an `FF 'E'` entry; else the store's error.
/// For commands that must fail before they decide anything (RENAME, COPY inside EXEC).
pub fn check_deadline_fits(
    user: &[u8],
    deadline: Option<u64>,
    value: Option<&[u8]>,
) -> Result<(), Frame> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    match value {
        Some(value) => check_entry(&string_key(user), &encode_string(deadline, value)),
        None => check_entry(&index_key(deadline, user), b""),
    }
    .map_err(|e| super::store_error(&e))
}

/// Runs `decide` in a unit: the open one (EXEC's, or the command's own), else one of its
/// own, written as one atomic batch when `decide` succeeds and dropped whole when it fails.
/// So a command's writes and the deadline changes it stages ([`stage_deadline`]) are one
/// batch, and the map takes the changes only once it is visible.
pub fn in_unit<T>(
    ctx: &mut Ctx<'_, '_>,
    decide: impl FnOnce(&mut Ctx<'_, '_>) -> Result<T, Frame>,
) -> Result<T, Frame> {
    let own_unit = ctx.unit.is_none();
    ctx.begin_unit();
    let result = decide(ctx);
    if own_unit {
        if result.is_err() {
            ctx.drop_unit();
        } else {
            ctx.end_unit()?;
        }
    }
    result
}

/// Adds to `batch` (which the caller writes, outside a unit: MSET, SET's fast path) string
/// `user` set to `value` with deadline `new`, replacing what it holds now with deadline
/// `old` (the map's): one entry where it stays in its place; where it moves, the old place
/// removed too, and the caller brackets the write with [`crate::expiry::Expires::begin_move`]
/// and `end_move`. Returns (whether it moves, the reserved entries it removes: a replaced
/// collection's deadline entry). The map takes `new` through [`account`] after the write.
pub fn place_string_in(
    ctx: &mut Ctx<'_, '_>,
    batch: &mut WriteBatch,
    user: &[u8],
    value: &[u8],
    old: Option<u64>,
    new: Option<u64>,
) -> Result<(bool, i64), Frame> {
    let mut reserved = 0;
    let mut scratch = Vec::new();
    if let (Some(old), true) = (old, ctx.shared.collections.any()) {
        // A collection replaced in the same batch had its deadline here.
        let entry = index_key(old, user);
        if ctx.shared.store.get(&entry, &mut scratch) {
            batch.remove(&entry);
            reserved -= 1;
        }
    }
    let moves = match (old, new) {
        (Some(_), Some(_)) => false,
        (Some(_), None) => {
            batch.remove(&string_key(user));
            true
        }
        (None, Some(_)) => {
            let raw = ctx.shared.store.get(user, &mut scratch);
            if raw {
                batch.remove(user);
            }
            raw
        }
        (None, None) => false,
    };
    match new {
        Some(new) => {
            let (key, stored) = (string_key(user), encode_string(new, value));
            check_entry(&key, &stored).map_err(|e| super::store_error(&e))?;
            batch.put(&key, &stored);
        }
        None => {
            batch.put(user, value);
        }
    }
    Ok((moves, reserved))
}

/// The map takes `user`'s deadline `new`, and the reserved count the change of entries.
pub(crate) fn account(shared: &Shared, user: &[u8], new: Option<u64>, reserved: i64) {
    match new {
        Some(new) => shared.expires.insert(user, new),
        None => {
            shared.expires.remove(user);
        }
    }
    if reserved != 0 {
        shared.collections.add_reserved(reserved);
    }
}

/// DEL of one key: its stripe lock, a due key deleted as expired (and not counted), else
/// the string or collection removed with its deadline in one batch. True if a live key was
/// removed.
pub fn delete_key(ctx: &mut Ctx<'_, '_>, user: &[u8]) -> Result<bool, Frame> {
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    if purge_due(ctx, user)? {
        return Ok(false);
    }
    if ctx.deadline(user).is_none() {
        let removed =
            ctx.remove(user)? || (shared.collections.any() && coll::delete_locked(ctx, user)?);
        if !removed {
            // A collection deleted by a write not yet durable: DEL's 0 waits for it (review
            // rev-lists13 F1; its type entry is on another stripe than the user key).
            ctx.observe(&crate::collection::type_key(user));
        }
        return Ok(removed);
    }
    ctx.begin_unit();
    let removed = match ctx.remove(user) {
        Ok(true) => Ok(true),
        Ok(false) => coll::delete_locked(ctx, user),
        Err(e) => Err(e),
    };
    let staged = stage_deadline(ctx, user, None);
    let written = ctx.end_unit();
    let removed = removed?;
    staged?;
    written?;
    Ok(removed)
}

/// FOREST.DELRANGE's removal: every live string key within the bounds, each under its
/// stripe lock with its deadline (a due key is deleted as expired and not counted).
pub fn remove_string_range(
    ctx: &mut Ctx<'_, '_>,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
) -> Result<i64, Frame> {
    if !ctx.shared.expires.any() {
        return super::flush::remove_range(ctx, lower, upper);
    }
    /// Keys collected per scan: bounds the memory of one DELRANGE.
    const CHUNK_COUNT: usize = 1024;
    let mut removed = 0;
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let from = match &resume {
            Some(key) => Bound::Excluded(key.as_slice()),
            None => lower,
        };
        let mut chunk: Vec<Vec<u8>> = Vec::new();
        // Both places strings live, merged (`Ctx::scan_keys_up_to`).
        ctx.scan_keys_up_to(from, upper, Order::Ascending, CHUNK_COUNT, &mut |key, _| {
            chunk.push(key.to_vec());
            ControlFlow::Continue(())
        });
        for key in &chunk {
            if delete_key(ctx, key)? {
                removed += 1;
            }
        }
        match chunk.pop() {
            Some(last) if chunk.len() + 1 >= CHUNK_COUNT => resume = Some(last),
            _ => return Ok(removed),
        }
    }
}

/// FLUSHDB's part: removes the whole deadline index and forgets every deadline. Inside
/// EXEC the map forgets them when EXEC's batch is visible: the deadlines its earlier
/// commands staged are cleared first (so that their accounting nets out), then a flush
/// marker follows them in the unit, so that later commands see no deadline and the map
/// keeps only what is staged after it.
pub fn flush_index(ctx: &mut Ctx<'_, '_>) -> Result<(), Frame> {
    // The strings with a deadline first (the caller removed them through the merged scan
    // of the string range; any left are removed here), so that the staged deadlines
    // cleared below move no string back to its raw key.
    let (lower, upper) = crate::expiry::string_bounds();
    super::flush::remove_range(ctx, Bound::Included(&lower), Bound::Excluded(&upper))?;
    if let Some(unit) = ctx.unit.as_ref() {
        let mut staged: Vec<Vec<u8>> = unit
            .deadlines
            .iter()
            .filter(|c| !c.flush)
            .map(|c| c.user.clone())
            .collect();
        staged.sort();
        staged.dedup();
        for user in staged {
            stage_deadline(ctx, &user, None)?;
        }
    }
    let (lower, upper) = crate::expiry::index_bounds();
    let removed =
        super::flush::remove_range(ctx, Bound::Included(&lower), Bound::Excluded(&upper))?;
    ctx.shared.collections.add_reserved(-removed);
    match ctx.unit.as_mut() {
        Some(unit) => unit.deadlines.push(DeadlineChange {
            user: Vec::new(),
            old: None,
            new: None,
            expired: None,
            flush: true,
            reserved: 0,
        }),
        None => ctx.shared.expires.clear(),
    }
    Ok(())
}

/// One tick of the active task: deletes up to `max` keys whose deadline has passed, oldest
/// deadline first, each through [`delete_expired`] under its stripe lock. Returns how many
/// index entries it handled (`max` means more may be due).
pub fn expire_cycle(shared: &Shared, max: usize) -> usize {
    let due = shared.expires.due(shared.expires.now_ms(), max);
    if due.is_empty() {
        return 0;
    }
    let mut client = internal_client(shared);
    let mut batch = shared.store.batch();
    let mut buffers = Buffers::default();
    {
        let mut ctx = Ctx {
            shared,
            client: &mut client,
            batch: &mut batch,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            unit: None,
            now: Default::default(),
        };
        for (deadline, user) in &due {
            let _guard = shared.collections.lock(user);
            // Checked again under the lock: a write may have changed it meanwhile.
            if shared.expires.deadline(user) == Some(*deadline) {
                // A failed write fails the store; the next start finds the key again. A
                // failed read refuses the deletion's writes (`CommandReads`): the key stays
                // due and is tried again.
                let _reads = super::CommandReads::begin();
                let _ = delete_expired(&mut ctx, user);
            }
        }
    }
    // Periodic and group durability: the deletions are logged like any write.
    let _ = batch.wait();
    due.len()
}

/// The client the active task's writes run as (not listed by CLIENT LIST).
fn internal_client(shared: &Shared) -> Client {
    Client {
        info: Arc::new(crate::server::ClientInfo {
            id: 0,
            addr: "internal:expire".into(),
            laddr: String::new(),
            created: std::time::Instant::now(),
            active_ms: std::sync::atomic::AtomicU64::new(shared.uptime_ms()),
            meta: parking_lot::Mutex::new(crate::server::ClientMeta::default()),
            stream: None,
        }),
        protocol: crate::frame::Protocol::Resp2,
        authenticated: true,
        txn: super::multi::TxnState::default(),
        pubsub: crate::pubsub::Subscriber::new(Arc::clone(&shared.pubsub), 0),
        blocking: crate::blocking::ClientBlock::default(),
    }
}

/// EXPIRE's conditions.
#[derive(Clone, Copy, Default)]
struct Conditions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn conditions(args: &[&[u8]]) -> Result<Conditions, Frame> {
    let mut c = Conditions::default();
    for &opt in args {
        if is_word(opt, "nx") {
            c.nx = true;
        } else if is_word(opt, "xx") {
            c.xx = true;
        } else if is_word(opt, "gt") {
            c.gt = true;
        } else if is_word(opt, "lt") {
            c.lt = true;
        } else {
            return Err(Frame::err(format!(
                "Unsupported option {}",
                super::printable(opt, 128)
            )));
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(Frame::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if c.gt && c.lt {
        return Err(Frame::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(c)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key time [NX|XX|GT|LT].
fn expire_generic(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    unit: TimeUnit,
    absolute: bool,
    command: &str,
) -> Reply {
    let user = argv[1];
    let c = conditions(&argv[3..])?;
    let mut when = int_arg(argv[2])?;
    if unit == TimeUnit::Seconds {
        when = when
            .checked_mul(1000)
            .ok_or_else(|| invalid_expire(command))?;
    }
    let now = ctx.now_ms();
    if !absolute {
        when = when
            .checked_add(now as i64)
            .ok_or_else(|| invalid_expire(command))?;
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    purge_due(ctx, user)?;
    if !exists_raw(ctx, user)? {
        return Ok(Frame::Integer(0));
    }
    let current = ctx.deadline(user).map(|d| d as i64);
    let refused = (c.nx && current.is_some())
        || (c.xx && current.is_none())
        || (c.gt && current.is_none_or(|cur| when <= cur))
        || (c.lt && current.is_some_and(|cur| when >= cur));
    if refused {
        return Ok(Frame::Integer(0));
    }
    if when <= now as i64 {
        delete_expired(ctx, user)?;
        return Ok(Frame::Integer(1));
    }
    ctx.begin_unit();
    let staged = stage_deadline(ctx, user, Some(when as u64));
    let written = ctx.end_unit();
    staged?;
    written?;
    Ok(Frame::Integer(1))
}

pub fn expire(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, TimeUnit::Seconds, false, "expire")
}

pub fn pexpire(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, TimeUnit::Millis, false, "pexpire")
}

pub fn expireat(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, TimeUnit::Seconds, true, "expireat")
}

pub fn pexpireat(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, TimeUnit::Millis, true, "pexpireat")
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME: -2 if absent, -1 without a deadline.
fn ttl_generic(ctx: &mut Ctx<'_, '_>, user: &[u8], millis: bool, absolute: bool) -> Reply {
    if !exists_live(ctx, user)? {
        return Ok(Frame::Integer(-2));
    }
    let Some(deadline) = ctx.deadline(user) else {
        return Ok(Frame::Integer(-1));
    };
    let ms = if absolute {
        deadline
    } else {
        deadline.saturating_sub(ctx.now_ms())
    };
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    Ok(Frame::Integer(if millis {
        ms
    } else {
        ms.saturating_add(500) / 1000
    }))
}

pub fn ttl(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv[1], false, false)
}

pub fn pttl(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv[1], true, false)
}

pub fn expiretime(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv[1], false, true)
}

pub fn pexpiretime(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv[1], true, true)
}

/// PERSIST key: 1 if a deadline was removed.
pub fn persist(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    purge_due(ctx, user)?;
    if ctx.deadline(user).is_none() || !exists_raw(ctx, user)? {
        return Ok(Frame::Integer(0));
    }
    ctx.begin_unit();
    let staged = stage_deadline(ctx, user, None);
    let written = ctx.end_unit();
    staged?;
    written?;
    Ok(Frame::Integer(1))
}

/// What GETEX does to the deadline.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GetexChange<'a> {
    Keep,
    Persist,
    Set {
        arg: &'a [u8],
        unit: TimeUnit,
        absolute: bool,
    },
}

/// GETEX key [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|PERSIST].
pub fn getex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let mut change = GetexChange::Keep;
    let mut i = 2;
    while i < argv.len() {
        let opt = argv[i];
        let next = argv.get(i + 1).copied();
        let timed = |unit, absolute| {
            next.map(|arg| GetexChange::Set {
                arg,
                unit,
                absolute,
            })
        };
        let chosen = if is_word(opt, "persist") {
            Some(GetexChange::Persist)
        } else if is_word(opt, "ex") {
            timed(TimeUnit::Seconds, false)
        } else if is_word(opt, "px") {
            timed(TimeUnit::Millis, false)
        } else if is_word(opt, "exat") {
            timed(TimeUnit::Seconds, true)
        } else if is_word(opt, "pxat") {
            timed(TimeUnit::Millis, true)
        } else {
            None
        };
        // Redis accepts an option again (the last wins) but not two different ones.
        let same_kind = match (change, chosen) {
            (GetexChange::Keep, _) => true,
            (GetexChange::Persist, Some(GetexChange::Persist)) => true,
            (
                GetexChange::Set { unit, absolute, .. },
                Some(GetexChange::Set {
                    unit: u,
                    absolute: a,
                    ..
                }),
            ) => unit == u && absolute == a,
            _ => false,
        };
        match chosen {
            Some(c) if same_kind => change = c,
            _ => return Err(syntax_error()),
        }
        i += if matches!(change, GetexChange::Set { .. }) {
            2
        } else {
            1
        };
    }
    let shared = ctx.shared;
    let _guard = shared.collections.lock(user);
    purge_due(ctx, user)?;
    let mut value = ctx.buffers.take();
    if !ctx.read_raw(user, &mut value) {
        ctx.buffers.give(value);
        return match coll::kind_of(ctx, user)? {
            Some(_) => Err(coll::wrongtype()),
            None => Ok(Frame::Null),
        };
    }
    let now = ctx.now_ms();
    match change {
        GetexChange::Keep => {}
        GetexChange::Persist => {
            if ctx.deadline(user).is_some() {
                ctx.begin_unit();
                let staged = stage_deadline(ctx, user, None);
                let written = ctx.end_unit();
                staged?;
                written?;
            }
        }
        GetexChange::Set {
            arg,
            unit,
            absolute,
        } => {
            let deadline = positive_deadline(arg, unit, absolute, now, "getex")?;
            if deadline <= now {
                delete_expired(ctx, user)?;
            } else {
                ctx.begin_unit();
                let staged = stage_deadline(ctx, user, Some(deadline));
                let written = ctx.end_unit();
                staged?;
                written?;
            }
        }
    }
    Ok(Frame::Bulk(value))
}

/// SETEX key seconds value.
pub fn setex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms();
    let deadline = positive_deadline(argv[2], TimeUnit::Seconds, false, now, "setex")?;
    super::set::set_with_deadline(ctx, argv[1], argv[3], deadline, now)
}

/// PSETEX key milliseconds value.
pub fn psetex(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms();
    let deadline = positive_deadline(argv[2], TimeUnit::Millis, false, now, "psetex")?;
    super::set::set_with_deadline(ctx, argv[1], argv[3], deadline, now)
}

/// DEBUG SET-ACTIVE-EXPIRE 0|1: turns the active task off or on, as Redis's tests do.
pub fn debug(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if is_word(argv[1], "set-active-expire") {
        let on = match argv.get(2..) {
            Some([value]) => int_arg(value)? != 0,
            _ => return Err(super::wrong_arity("debug|set-active-expire")),
        };
        ctx.shared.expires.set_active(on);
        return Ok(Frame::ok());
    }
    Err(super::unknown_subcommand("debug", argv[1]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn err(text: &str) -> Frame {
        Frame::Error(format!("ERR {text}"))
    }

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    /// A bulk or verbatim reply's text.
    fn text(reply: Frame) -> String {
        match reply {
            Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            Frame::Verbatim { text, .. } => String::from_utf8_lossy(&text).into_owned(),
            other => panic!("text expected: {other:?}"),
        }
    }

    /// The deadline of `key` in ms, or Redis's -1/-2.
    fn pexpiretime(h: &mut Harness, key: &str) -> i64 {
        match h.run(&["PEXPIRETIME", key]) {
            Frame::Integer(n) => n,
            other => panic!("PEXPIRETIME {key}: {other:?}"),
        }
    }

    // Goal: SET's expiry options, SETEX and PSETEX reply and fail as Redis 7.2 does
    // (t_string.c): conflicting options are syntax errors, a time of 0 or less or one that
    // overflows is "invalid expire time in '<cmd>' command", a non-number is not an integer;
    // the deadline is the clock plus the time (absolute for EXAT/PXAT); KEEPTTL keeps it,
    // plain SET clears it. Method: each option against the test clock.
    #[test]
    fn set_expiry_options() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let now = h.shared.expires.now_ms() as i64;
        assert_eq!(h.run(&["SET", "k", "v", "EX", "100"]), Frame::ok());
        let at = pexpiretime(&mut h, "k");
        assert!((now + 100_000..now + 101_000).contains(&at), "{at}");
        assert_eq!(h.run(&["TTL", "k"]), int(100));
        assert_eq!(h.run(&["SET", "k", "v", "PX", "5000"]), Frame::ok());
        let pttl = match h.run(&["PTTL", "k"]) {
            Frame::Integer(n) => n,
            other => panic!("{other:?}"),
        };
        assert!((4000..=5000).contains(&pttl), "{pttl}");
        let exat = (now / 1000 + 3600).to_string();
        assert_eq!(h.run(&["SET", "k", "v", "EXAT", &exat]), Frame::ok());
        assert_eq!(h.run(&["EXPIRETIME", "k"]), int(now / 1000 + 3600));
        let pxat = (now + 7_777_777).to_string();
        assert_eq!(h.run(&["SET", "k", "v2", "PXAT", &pxat, "GET"]), bulk("v"));
        assert_eq!(pexpiretime(&mut h, "k"), now + 7_777_777);
        assert_eq!(h.run(&["SET", "k", "v3", "KEEPTTL"]), Frame::ok());
        assert_eq!(pexpiretime(&mut h, "k"), now + 7_777_777);
        assert_eq!(
            h.run(&["SET", "k", "v4", "XX", "KEEPTTL", "GET"]),
            bulk("v3")
        );
        assert_eq!(pexpiretime(&mut h, "k"), now + 7_777_777);
        assert_eq!(h.run(&["SET", "k", "v5"]), Frame::ok());
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
        // An option may repeat (the last wins), two different ones may not.
        assert_eq!(
            h.run(&["SET", "k", "v", "EX", "1", "EX", "50"]),
            Frame::ok()
        );
        assert_eq!(h.run(&["TTL", "k"]), int(50));
        for bad in [
            &["EX", "1", "PX", "1"][..],
            &["EX", "1", "KEEPTTL"],
            &["KEEPTTL", "PXAT", "1"],
            &["EXAT", "1", "PXAT", "1"],
            &["NX", "XX", "EX", "1"],
            &["EX"],
            &["PERSIST"],
        ] {
            let mut argv = vec!["SET", "k", "v"];
            argv.extend_from_slice(bad);
            assert_eq!(h.run(&argv), err("syntax error"), "{bad:?}");
        }
        for (cmd, args) in [
            ("set", &["SET", "k", "v", "EX", "0"][..]),
            ("set", &["SET", "k", "v", "PX", "-1"]),
            ("set", &["SET", "k", "v", "EXAT", "0"]),
            ("set", &["SET", "k", "v", "EX", "9223372036854776"]),
            ("set", &["SET", "k", "v", "PX", "9223372036854775807"]),
            ("setex", &["SETEX", "k", "0", "v"]),
            ("setex", &["SETEX", "k", "-10", "v"]),
            ("psetex", &["PSETEX", "k", "0", "v"]),
        ] {
            assert_eq!(
                h.run(args),
                err(&format!("invalid expire time in '{cmd}' command")),
                "{args:?}"
            );
        }
        assert_eq!(
            h.run(&["SET", "k", "v", "EX", "1.5"]),
            err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["SETEX", "k", "ten", "v"]),
            err("value is not an integer or out of range")
        );
        assert_eq!(h.run(&["GET", "k"]), bulk("v"));
        assert_eq!(h.run(&["SETEX", "s", "10", "v"]), Frame::ok());
        assert_eq!(h.run(&["TTL", "s"]), int(10));
        assert_eq!(h.run(&["PSETEX", "p", "1500", "v"]), Frame::ok());
        assert_eq!(h.run(&["TTL", "p"]), int(2));
        // NX/XX with a deadline: the deadline is set only when the value is.
        assert_eq!(h.run(&["SET", "s", "w", "NX", "EX", "99"]), Frame::Null);
        assert_eq!(h.run(&["TTL", "s"]), int(10));
        assert_eq!(h.run(&["SET", "new", "w", "XX", "EX", "99"]), Frame::Null);
        assert_eq!(h.run(&["TTL", "new"]), int(-2));
        assert_eq!(
            h.run(&["SET", "new", "w", "NX", "PX", "99000"]),
            Frame::ok()
        );
        assert_eq!(h.run(&["TTL", "new"]), int(99));
        // A collection replaced by SET EX: the string gets the deadline.
        h.run(&["SADD", "coll", "m"]);
        h.run(&["EXPIRE", "coll", "500"]);
        assert_eq!(h.run(&["SET", "coll", "str", "EX", "20"]), Frame::ok());
        assert_eq!(h.run(&["TYPE", "coll"]), Frame::Simple("string".into()));
        assert_eq!(h.run(&["TTL", "coll"]), int(20));
        assert_eq!(
            h.run(&["SET", "coll", "x", "GET", "EX", "0"]),
            err("invalid expire time in 'set' command")
        );
    }

    // Goal: a deadline at or before now deletes the key, for every command that can set one
    // (Redis: SET EXAT past is set then expired; EXPIRE/EXPIREAT/GETEX EXAT past delete).
    // Method: each on a present key, then read it; expired_keys counts only keys whose
    // deadline passed on their own.
    #[test]
    fn deadlines_in_the_past_delete() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let past = "1";
        h.run(&["SET", "a", "1"]);
        assert_eq!(h.run(&["EXPIRE", "a", "-1"]), int(1));
        assert_eq!(h.run(&["EXISTS", "a"]), int(0));
        h.run(&["SET", "a", "1"]);
        assert_eq!(h.run(&["PEXPIRE", "a", "0"]), int(1));
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
        h.run(&["SET", "a", "1"]);
        assert_eq!(h.run(&["EXPIREAT", "a", past]), int(1));
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
        h.run(&["HSET", "h", "f", "v"]);
        assert_eq!(h.run(&["PEXPIREAT", "h", past]), int(1));
        assert_eq!(h.run(&["HGET", "h", "f"]), Frame::Null);
        assert_eq!(h.run(&["TYPE", "h"]), Frame::Simple("none".into()));
        h.run(&["SET", "a", "old"]);
        assert_eq!(
            h.run(&["SET", "a", "new", "EXAT", past, "GET"]),
            bulk("old")
        );
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
        assert_eq!(h.run(&["SET", "a", "new", "PXAT", past]), Frame::ok());
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
        h.run(&["SET", "a", "old"]);
        assert_eq!(h.run(&["SET", "a", "new", "NX", "PXAT", past]), Frame::Null);
        assert_eq!(h.run(&["GET", "a"]), bulk("old"));
        assert_eq!(h.run(&["GETEX", "a", "PXAT", past]), bulk("old"));
        assert_eq!(h.run(&["GET", "a"]), Frame::Null);
        // Missing keys: 0, nothing created.
        assert_eq!(h.run(&["EXPIRE", "nope", "-5"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "nope", "5"]), int(0));
        assert_eq!(h.run(&["DBSIZE"]), int(0));
        assert_eq!(h.entries(), 0, "no index entry left");
        // Time passing: counted as expired.
        h.run(&["SET", "b", "1", "PX", "10"]);
        h.shared.expires.advance_clock_ms(20);
        assert_eq!(h.run(&["INCR", "b"]), int(1));
        assert_eq!(h.shared.expires.expired_count(), 1);
        let info = text(h.run(&["INFO", "stats"]));
        assert!(info.contains("expired_keys:1\r\n"), "{info}");
    }

    // Goal: EXPIRE's NX, XX, GT, LT follow expire.c: NX only without a deadline, XX only
    // with one, GT only above the current one (no deadline counts as infinite), LT only
    // below it; bad options and combinations get Redis's texts; overflow is an invalid
    // expire time. Method: each case's reply and the deadline after it.
    #[test]
    fn expire_conditions() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["EXPIRE", "k", "100", "XX"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "100", "GT"]), int(0));
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
        assert_eq!(h.run(&["EXPIRE", "k", "100", "LT"]), int(1));
        assert_eq!(h.run(&["TTL", "k"]), int(100));
        assert_eq!(h.run(&["EXPIRE", "k", "200", "NX"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "200", "XX"]), int(1));
        assert_eq!(h.run(&["EXPIRE", "k", "150", "GT"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "300", "gt"]), int(1));
        assert_eq!(h.run(&["EXPIRE", "k", "400", "LT"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "50", "LT", "XX"]), int(1));
        assert_eq!(h.run(&["TTL", "k"]), int(50));
        assert_eq!(h.run(&["PERSIST", "k"]), int(1));
        assert_eq!(h.run(&["PERSIST", "k"]), int(0));
        assert_eq!(h.run(&["PERSIST", "missing"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "70", "NX"]), int(1));
        assert_eq!(h.run(&["TTL", "k"]), int(70));
        assert_eq!(
            h.run(&["EXPIRE", "k", "1", "FOO"]),
            err("Unsupported option FOO")
        );
        let nx_and = err("NX and XX, GT or LT options at the same time are not compatible");
        assert_eq!(h.run(&["EXPIRE", "k", "1", "NX", "XX"]), nx_and);
        assert_eq!(h.run(&["PEXPIRE", "k", "1", "GT", "NX"]), nx_and);
        assert_eq!(
            h.run(&["EXPIRE", "k", "1", "GT", "LT"]),
            err("GT and LT options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "x"]),
            err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "9223372036854775807"]),
            err("invalid expire time in 'expire' command")
        );
        assert_eq!(
            h.run(&["PEXPIRE", "k", "9223372036854775807"]),
            err("invalid expire time in 'pexpire' command")
        );
        assert_eq!(
            h.run(&["EXPIREAT", "k", "-9223372036854775808"]),
            err("invalid expire time in 'expireat' command")
        );
        assert_eq!(h.run(&["TTL", "k"]), int(70));
        assert_eq!(
            h.run(&["EXPIRE", "k"]),
            err("wrong number of arguments for 'expire' command")
        );
        // TTL rounds as Redis: (ms + 500) / 1000.
        h.run(&["PEXPIRE", "k", "1499"]);
        assert_eq!(h.run(&["TTL", "k"]), int(1));
        h.run(&["PEXPIRE", "k", "1500"]);
        assert_eq!(h.run(&["TTL", "k"]), int(2));
        let at = h.shared.expires.now_ms() as i64 + 123_456;
        assert_eq!(h.run(&["PEXPIREAT", "k", &at.to_string()]), int(1));
        assert_eq!(h.run(&["PEXPIRETIME", "k"]), int(at));
        assert_eq!(h.run(&["EXPIRETIME", "k"]), int((at + 500) / 1000));
        assert_eq!(h.run(&["EXPIRETIME", "missing"]), int(-2));
        assert_eq!(h.run(&["PTTL", "missing"]), int(-2));
    }

    // Goal: the overflow and edge cases of redis tests/unit/expire.tcl give its replies.
    // Method: each case of that file that has no replication or AOF in it.
    #[test]
    fn redis_expire_tcl_edge_cases() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let invalid = |cmd: &str| err(&format!("invalid expire time in '{cmd}' command"));
        h.run(&["SET", "foo", "bar"]);
        assert_eq!(
            h.run(&["EXPIRE", "foo", ""]),
            err("value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["SET", "foo", "bar", "EX", "10000000000000000"]),
            invalid("set")
        );
        assert_eq!(
            h.run(&["SET", "foo", "bar", "EX", "-9999999999999999"]),
            invalid("set")
        );
        assert_eq!(
            h.run(&["GETEX", "foo", "EX", "10000000000000000"]),
            invalid("getex")
        );
        assert_eq!(
            h.run(&["GETEX", "foo", "EX", "-9999999999999999"]),
            invalid("getex")
        );
        for n in [
            "9223370399119966",
            "9223372036854776",
            "10000000000000000",
            "18446744073709561",
            "-9223372036854776",
            "-9999999999999999",
        ] {
            assert_eq!(h.run(&["EXPIRE", "foo", n]), invalid("expire"), "{n}");
        }
        assert_eq!(h.run(&["TTL", "foo"]), int(-1));
        assert_eq!(
            h.run(&["PEXPIRE", "foo", "9223372036854770000"]),
            invalid("pexpire")
        );
        assert_eq!(h.run(&["PEXPIREAT", "foo", "9223372036854770000"]), int(1));
        assert_eq!(h.run(&["PEXPIRETIME", "foo"]), int(9223372036854770000));
        assert_eq!(h.run(&["PEXPIREAT", "foo", "-9223372036854770000"]), int(1));
        assert_eq!(h.run(&["TTL", "foo"]), int(-2));
        assert_eq!(
            h.run(&["EXPIRE", "foo", "200", "XX", "AB"]),
            err("Unsupported option AB")
        );
        h.run(&["SET", "foo", "bar", "EX", "100"]);
        assert_eq!(h.run(&["EXPIRE", "foo", "-10", "LT"]), int(1));
        assert_eq!(h.run(&["TTL", "foo"]), int(-2));
        h.run(&["SET", "foo", "bar"]);
        assert_eq!(h.run(&["EXPIRE", "foo", "-10", "LT"]), int(1));
        assert_eq!(h.run(&["TTL", "foo"]), int(-2));
        for flag in ["NX", "XX", "GT", "LT"] {
            assert_eq!(h.run(&["EXPIRE", "none", "100", flag]), int(0));
        }
        // SETEX overwrites a key and its deadline; SET removes it; KEEPTTL keeps it.
        h.run(&["SETEX", "k", "100", "a"]);
        h.run(&["SETEX", "k", "200", "b"]);
        assert_eq!(h.run(&["GET", "k"]), bulk("b"));
        assert_eq!(h.run(&["TTL", "k"]), int(200));
        assert_eq!(h.run(&["SETEX", "k", "-10", "c"]), invalid("setex"));
        assert_eq!(h.shared.expires.count(), 1);
    }

    // Goal: GETEX returns the value and sets, changes or clears its deadline (t_string.c
    // getexCommand): a missing key is null whatever the options, a collection WRONGTYPE, a
    // bad time an error only for a present key, conflicting options a syntax error.
    // Method: each option on one key.
    #[test]
    fn getex_options() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        assert_eq!(h.run(&["GETEX", "k"]), Frame::Null);
        assert_eq!(h.run(&["GETEX", "k", "EX", "-1"]), Frame::Null);
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["GETEX", "k"]), bulk("v"));
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
        assert_eq!(h.run(&["GETEX", "k", "EX", "100"]), bulk("v"));
        assert_eq!(h.run(&["TTL", "k"]), int(100));
        assert_eq!(h.run(&["GETEX", "k", "PX", "20000"]), bulk("v"));
        assert_eq!(h.run(&["TTL", "k"]), int(20));
        let at = h.shared.expires.now_ms() / 1000 + 3000;
        assert_eq!(h.run(&["GETEX", "k", "EXAT", &at.to_string()]), bulk("v"));
        assert_eq!(h.run(&["EXPIRETIME", "k"]), int(at as i64));
        assert_eq!(h.run(&["GETEX", "k", "PERSIST"]), bulk("v"));
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
        assert_eq!(
            h.run(&["GETEX", "k", "EX", "0"]),
            err("invalid expire time in 'getex' command")
        );
        assert_eq!(
            h.run(&["GETEX", "k", "PX", "nope"]),
            err("value is not an integer or out of range")
        );
        for bad in [
            &["EX", "1", "PERSIST"][..],
            &["PERSIST", "EX", "1"],
            &["EX", "1", "PX", "1"],
            &["EX"],
            &["KEEPTTL"],
            &["NX"],
        ] {
            let mut argv = vec!["GETEX", "k"];
            argv.extend_from_slice(bad);
            assert_eq!(h.run(&argv), err("syntax error"), "{bad:?}");
        }
        h.run(&["RPUSH", "l", "a"]);
        assert_eq!(
            h.run(&["GETEX", "l", "EX", "10"]),
            Frame::Error(
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            )
        );
        assert_eq!(h.run(&["TTL", "l"]), int(-1));
    }

    // Goal: which writes keep a deadline and which clear it, as Redis: SET, GETSET, MSET
    // clear; INCR, APPEND, SETRANGE-like updates and collection changes keep; DEL and an
    // emptied collection remove the key and its deadline. Method: set a deadline, run the
    // write, read TTL.
    #[test]
    fn writes_keep_or_clear_deadlines() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let with_ttl = |h: &mut Harness, key: &str| {
            assert_eq!(h.run(&["EXPIRE", key, "100"]), int(1), "{key}");
        };
        h.run(&["SET", "n", "1"]);
        with_ttl(&mut h, "n");
        assert_eq!(h.run(&["INCR", "n"]), int(2));
        assert_eq!(h.run(&["INCRBY", "n", "5"]), int(7));
        assert_eq!(h.run(&["APPEND", "n", "0"]), int(2));
        assert_eq!(h.run(&["TTL", "n"]), int(100));
        assert_eq!(h.run(&["GETSET", "n", "x"]), bulk("70"));
        assert_eq!(h.run(&["TTL", "n"]), int(-1));
        with_ttl(&mut h, "n");
        assert_eq!(h.run(&["MSET", "n", "y", "other", "z"]), Frame::ok());
        assert_eq!(h.run(&["TTL", "n"]), int(-1));
        with_ttl(&mut h, "n");
        assert_eq!(h.run(&["SETNX", "n", "q"]), int(0));
        assert_eq!(h.run(&["TTL", "n"]), int(100));
        assert_eq!(h.run(&["DEL", "n"]), int(1));
        assert_eq!(h.run(&["SET", "n", "back"]), Frame::ok());
        assert_eq!(h.run(&["TTL", "n"]), int(-1));
        for (make, touch) in [
            (&["RPUSH", "l", "a", "b"][..], &["LPUSH", "l", "c"][..]),
            (&["SADD", "s", "a"], &["SADD", "s", "b"]),
            (&["HSET", "h", "f", "v"], &["HSET", "h", "g", "w"]),
            (&["ZADD", "z", "1", "a"], &["ZADD", "z", "2", "b"]),
            (
                &["XADD", "x", "1-1", "f", "v"],
                &["XADD", "x", "2-1", "f", "v"],
            ),
        ] {
            h.run(make);
            with_ttl(&mut h, make[1]);
            h.run(touch);
            assert_eq!(h.run(&["TTL", make[1]]), int(100), "{touch:?}");
        }
        // Emptying a collection deletes it with its deadline.
        assert_eq!(h.run(&["SREM", "s", "a", "b"]), int(2));
        assert_eq!(h.run(&["TTL", "s"]), int(-2));
        assert_eq!(h.run(&["SADD", "s", "again"]), int(1));
        assert_eq!(h.run(&["TTL", "s"]), int(-1));
        assert_eq!(h.run(&["LPOP", "l", "10"]), bulks(&["c", "a", "b"]));
        assert_eq!(h.run(&["TTL", "l"]), int(-2));
        assert_eq!(h.run(&["DEL", "h", "z"]), int(2));
        // Every deadline entry left belongs to a live key: x and other strings.
        assert_eq!(h.shared.expires.count(), 1);
        assert_eq!(h.run(&["FLUSHDB"]), Frame::ok());
        assert_eq!(h.shared.expires.count(), 0);
        assert_eq!(h.entries(), 0);
        assert_eq!(h.run(&["DBSIZE"]), int(0));
    }

    // Goal: an expired key is never visible to any read, and writes see it absent (issue 15
    // "Expiry"), before the active task deleted it. Method: strings and each collection with
    // a deadline, the clock moved past it, no expire cycle run; every read and write
    // checked; then one cycle deletes them all and the store holds only the live keys.
    #[test]
    fn expired_keys_are_invisible() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"]);
        h.run(&["RPUSH", "l", "x"]);
        h.run(&["SADD", "s", "x"]);
        h.run(&["HSET", "hh", "f", "v"]);
        h.run(&["ZADD", "z", "1", "m"]);
        h.run(&["XADD", "x", "1-1", "f", "v"]);
        for key in ["b", "d", "l", "s", "hh", "z", "x"] {
            assert_eq!(h.run(&["PEXPIRE", key, "1000"]), int(1));
        }
        h.run(&["SET", "e", "5", "PX", "1000000"]);
        assert_eq!(h.run(&["DBSIZE"]), int(10));
        h.shared.expires.advance_clock_ms(1000);
        assert_eq!(h.run(&["GET", "b"]), Frame::Null);
        assert_eq!(
            h.run(&["MGET", "a", "b", "c", "d"]),
            Frame::Array(vec![bulk("1"), Frame::Null, bulk("3"), Frame::Null])
        );
        assert_eq!(h.run(&["EXISTS", "a", "b", "d", "l", "s", "x"]), int(1));
        assert_eq!(h.run(&["TYPE", "l"]), Frame::Simple("none".into()));
        assert_eq!(h.run(&["STRLEN", "b"]), int(0));
        assert_eq!(h.run(&["TTL", "b"]), int(-2));
        assert_eq!(h.run(&["PTTL", "hh"]), int(-2));
        assert_eq!(h.run(&["DBSIZE"]), int(3));
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&["a", "c", "e"]));
        let Frame::Array(scan) = h.run(&["SCAN", "0", "COUNT", "100"]) else {
            panic!("array expected");
        };
        assert_eq!(scan[1], bulks(&["a", "c", "e"]));
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "KEYSONLY"]),
            bulks(&["a", "c", "e"])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "REV", "KEYSONLY"]),
            bulks(&["e", "c", "a"])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "(a", "+", "LIMIT", "1"]),
            Frame::Array(vec![bulk("c"), bulk("3")])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "[d", "REV", "LIMIT", "1", "KEYSONLY"]),
            bulks(&["c"])
        );
        assert_eq!(h.run(&["FOREST.RANGE", "[b", "[b"]), bulks(&[]));
        assert_eq!(h.run(&["FOREST.COUNT", "-", "+"]), int(3));
        assert_eq!(h.run(&["FOREST.COUNT", "[b", "[d"]), int(1));
        assert_eq!(h.run(&["LRANGE", "l", "0", "-1"]), bulks(&[]));
        assert_eq!(h.run(&["LLEN", "l"]), int(0));
        assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&[]));
        assert_eq!(h.run(&["SISMEMBER", "s", "x"]), int(0));
        assert_eq!(h.run(&["HGET", "hh", "f"]), Frame::Null);
        assert_eq!(h.run(&["ZCARD", "z"]), int(0));
        assert_eq!(h.run(&["XLEN", "x"]), int(0));
        assert_eq!(h.run(&["PERSIST", "d"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "d", "100"]), int(0));
        assert_eq!(h.run(&["GETEX", "d", "PERSIST"]), Frame::Null);
        // Writes see them absent.
        assert_eq!(h.run(&["INCR", "b"]), int(1));
        assert_eq!(h.run(&["TTL", "b"]), int(-1));
        assert_eq!(h.run(&["SET", "d", "new", "NX"]), Frame::ok());
        assert_eq!(h.run(&["SADD", "s", "y"]), int(1));
        assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&["y"]));
        assert_eq!(h.run(&["RPUSH", "l", "y"]), int(1));
        assert_eq!(h.run(&["DEL", "hh"]), int(0));
        assert_eq!(
            h.run(&["HSET", "z", "f", "v"]),
            int(1),
            "an expired zset is no WRONGTYPE"
        );
        assert_eq!(h.run(&["XADD", "x", "1-1", "f", "v"]), bulk("1-1"));
        assert_eq!(h.run(&["DBSIZE"]), int(9));
        assert_eq!(h.shared.expires.expired_count(), 7);
        assert_eq!(h.shared.expires.count(), 1, "e only");
        assert_eq!(h.run(&["FOREST.DELRANGE", "-", "+"]), int(5));
        assert_eq!(h.shared.expires.count(), 0);
    }

    // Goal: the active task deletes exactly the due keys, oldest deadline first, at most its
    // bound per tick, and the store's entries and DBSIZE fall back. Method: 300 keys due at
    // three times and 100 with a far deadline; cycles of 128 after each step of the clock.
    #[test]
    fn active_expiry_deletes_due_keys() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        for i in 0..400 {
            // Minutes apart: the real time the test takes does not matter.
            let ms = match i % 4 {
                0 => "100000",
                1 => "200000",
                2 => "300000",
                _ => "10000000",
            };
            h.run(&["SET", &format!("k{i:03}"), "v", "PX", ms]);
        }
        h.run(&["HSET", "h", "f", "v"]);
        h.run(&["PEXPIRE", "h", "150000"]);
        h.run(&["SET", "plain", "v"]);
        let entries = |h: &Harness| h.entries() as i64;
        let full = entries(&h);
        assert_eq!(
            full,
            400 + 2 + 1 + 1,
            "strings (each one entry with its deadline), hash, its deadline entry, plain"
        );
        assert_eq!(expire_cycle(&h.shared, 128), 0, "nothing due yet");
        h.shared.expires.advance_clock_ms(150_000);
        assert_eq!(expire_cycle(&h.shared, 128), 101);
        assert_eq!(h.run(&["EXISTS", "h"]), int(0));
        assert_eq!(h.run(&["DBSIZE"]), int(401 - 100));
        h.shared.expires.advance_clock_ms(1_000_000);
        assert_eq!(h.run(&["DBSIZE"]), int(101));
        assert_eq!(expire_cycle(&h.shared, 128), 128);
        assert_eq!(expire_cycle(&h.shared, 128), 72);
        assert_eq!(expire_cycle(&h.shared, 128), 0);
        assert_eq!(h.run(&["DBSIZE"]), int(101));
        assert_eq!(entries(&h), 100 + 1);
        assert_eq!(h.shared.expires.expired_count(), 301);
        let info = text(h.run(&["INFO", "keyspace"]));
        assert!(info.contains("db0:keys=101,expires=100,avg_ttl="), "{info}");
        // Turned off, the task deletes nothing; reads still hide due keys.
        assert_eq!(h.run(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), Frame::ok());
        assert!(!h.shared.expires.is_active());
        assert_eq!(h.run(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]), Frame::ok());
        assert_eq!(
            h.run(&["DEBUG", "NOPE"]),
            err("unknown subcommand 'NOPE'. Try DEBUG HELP.")
        );
    }

    // Goal: deadlines are durable and absolute: after a restart a key keeps the same
    // PEXPIRETIME, and a key whose deadline passed while the server was down is gone
    // (invisible at once, deleted by the first cycle). Method: keys with near and far
    // deadlines, a restart, the clock moved past the near ones.
    #[test]
    fn deadlines_survive_restart() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let now = h.shared.expires.now_ms() as i64;
        let far = now + 3_600_000;
        let near = now + 60_000;
        h.run(&["SET", "far", "v", "PXAT", &far.to_string()]);
        h.run(&["SET", "near", "v", "PXAT", &near.to_string()]);
        h.run(&["SADD", "set", "m"]);
        h.run(&["PEXPIREAT", "set", &near.to_string()]);
        h.run(&["SET", "kept", "v", "EX", "100"]);
        h.run(&["PERSIST", "kept"]);
        let mut h = h.restart();
        h.shared.expires.freeze_clock();
        assert_eq!(pexpiretime(&mut h, "far"), far);
        assert_eq!(pexpiretime(&mut h, "near"), near);
        assert_eq!(pexpiretime(&mut h, "set"), near);
        assert_eq!(pexpiretime(&mut h, "kept"), -1);
        // Down for two minutes: the restarted server's clock is past `near`.
        let mut h = h.restart();
        h.shared.expires.freeze_clock();
        h.shared.expires.advance_clock_ms(120_000);
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&["far", "kept"]));
        assert_eq!(h.run(&["DBSIZE"]), int(2));
        assert_eq!(expire_cycle(&h.shared, 16), 2);
        let mut h = h.restart();
        h.shared.expires.freeze_clock();
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&["far", "kept"]));
        assert_eq!(pexpiretime(&mut h, "far"), far);
        assert_eq!(h.entries(), 2, "far (its deadline in its value), kept");
    }

    // Goal: a key a scan listed, then deleted as expired before the scan checked its
    // deadline (the deletion clears the deadline after the store), is not shown (found by
    // expiry_under_load: KEYS returned a key after its deadline). Method: list keys, run the
    // expire cycle, then filter as KEYS does: the deadline check alone lets the key through,
    // the recheck on the moved generation drops it.
    #[test]
    fn keys_listed_then_deleted_are_dropped() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["SET", "a", "1", "PX", "1000"]);
        h.run(&["SET", "b", "2"]);
        h.shared.expires.advance_clock_ms(2000);
        let client = &mut h.client;
        let mut batch = h.shared.store.batch();
        let mut buffers = Buffers::default();
        let ctx = Ctx {
            shared: &h.shared,
            client,
            batch: &mut batch,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            unit: None,
            now: Default::default(),
        };
        let generation = h.shared.expires.generation();
        let mut listed =
            super::super::keys::list_keys(&ctx, Bound::Unbounded, None, usize::MAX, None);
        assert_eq!(listed.len(), 2, "the store still holds a");
        assert_eq!(expire_cycle(&h.shared, 8), 1);
        listed.retain(|(key, _)| !h.shared.expires.is_due(key));
        assert_eq!(listed.len(), 2, "the deadline is gone with the key");
        recheck_listed(&ctx, generation, &mut listed);
        assert_eq!(listed, vec![(b"b".to_vec(), "string")]);
    }

    // Goal: inside EXEC (a unit), the recheck of listed keys after a deletion of an expired
    // key moved the generation reads through the unit: a key the transaction wrote is still
    // listed (rev-coll F1's family: it read the store, which holds it only after EXEC).
    // Method: a unit writes a string and a set; listed, then the generation moves (another
    // key deleted as expired meanwhile, as the expire cycle does), then the recheck.
    #[test]
    fn recheck_inside_a_unit_keeps_the_units_own_keys() {
        let mut h = Harness::new();
        h.run(&["SET", "old", "1"]);
        let client = &mut h.client;
        let mut batch = h.shared.store.batch();
        let mut buffers = Buffers::default();
        let mut ctx = Ctx {
            shared: &h.shared,
            client,
            batch: &mut batch,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            unit: None,
            now: Default::default(),
        };
        ctx.begin_unit();
        ctx.upsert(b"new", b"v").expect("upsert");
        ctx.upsert_at(&crate::collection::type_key(b"set"), b"meta")
            .expect("type entry");
        let generation = ctx.shared.expires.generation();
        let mut listed = vec![
            (b"new".to_vec(), "string"),
            (b"old".to_vec(), "string"),
            (b"set".to_vec(), "set"),
        ];
        ctx.shared.expires.bump_generation();
        recheck_listed(&ctx, generation, &mut listed);
        assert_eq!(
            listed,
            vec![
                (b"new".to_vec(), "string"),
                (b"old".to_vec(), "string"),
                (b"set".to_vec(), "set"),
            ]
        );
        let mut scratch = Vec::new();
        assert!(still_live(&ctx, b"new", "string", Some(b"v"), &mut scratch));
        assert!(!still_live(
            &ctx,
            b"new",
            "string",
            Some(b"w"),
            &mut scratch
        ));
    }

    // Goal: a GET never misses a string that a concurrent write moves between its raw key
    // and `FF 'x'` (EXPIRE / PERSIST / SET EX / SET), nor MGET.
    // Method: one thread moves the key back and forth; two read it meanwhile, and every
    // read must find one of the values written.
    #[test]
    fn reads_never_miss_a_moving_string() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        h.run(&["SET", "other", "o", "EX", "1000"]);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let shared = &h.shared;
        std::thread::scope(|scope| {
            let stop = &stop;
            scope.spawn(move || {
                let mut client = shared.new_client("w".into(), "w".into(), None);
                for round in 0..2_000 {
                    let argv: &[&[u8]] = match round % 4 {
                        0 => &[b"EXPIRE", b"k", b"1000"],
                        1 => &[b"PERSIST", b"k"],
                        2 => &[b"SET", b"k", b"v", b"EX", b"1000"],
                        _ => &[b"SET", b"k", b"v"],
                    };
                    super::super::testing::run_on(shared, &mut client, argv);
                }
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            for _ in 0..2 {
                scope.spawn(move || {
                    let mut client = shared.new_client("r".into(), "r".into(), None);
                    let mut reads = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) || reads < 100 {
                        let got =
                            super::super::testing::run_on(shared, &mut client, &[b"GET", b"k"]);
                        assert_eq!(got, bulk("v"), "GET after {reads} reads");
                        let got = super::super::testing::run_on(
                            shared,
                            &mut client,
                            &[b"MGET", b"k", b"other"],
                        );
                        assert_eq!(got, bulks(&["v", "o"]), "MGET after {reads} reads");
                        reads += 1;
                    }
                });
            }
        });
    }

    mod model {
        use std::collections::BTreeMap;
        use std::ops::Bound;

        use proptest::prelude::*;

        use super::super::super::testing::*;
        use super::super::expire_cycle;
        use crate::frame::Frame;

        /// Time steps in ms: far above the real time a case takes, so the test clock alone
        /// decides what is due.
        const MINUTE_MS: u64 = 60_000;

        #[derive(Clone, Debug)]
        enum Op {
            Set(u8, u8, Option<u8>),
            Expire(u8, i8),
            Persist(u8),
            Del(u8),
            Advance(u8),
            Cycle(u8),
            /// Close the store and open it again (the clock kept where it stood).
            Reopen,
            /// A plain SET of many keys at once, and GETs of them (MSET, MGET).
            Mset(u8, u8),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0u8..5, 0u8..9, proptest::option::of(1u8..5))
                    .prop_map(|(k, v, t)| Op::Set(k, v, t)),
                (0u8..5, -1i8..4).prop_map(|(k, m)| Op::Expire(k, m)),
                (0u8..5).prop_map(Op::Persist),
                (0u8..5).prop_map(Op::Del),
                (0u8..3).prop_map(Op::Advance),
                (1u8..4).prop_map(Op::Cycle),
                Just(Op::Reopen),
                (0u8..5, 0u8..9).prop_map(|(k, v)| Op::Mset(k, v)),
            ]
        }

        fn key(k: u8) -> String {
            ((b'a' + k) as char).to_string()
        }

        fn bound_arg(kind: u8, k: u8) -> String {
            match kind % 4 {
                0 => "-".into(),
                1 => "+".into(),
                2 => format!("[{}", key(k)),
                _ => format!("({}", key(k)),
            }
        }

        fn model_bound(arg: &str, lower: bool) -> Option<Bound<String>> {
            match arg {
                "-" if lower => Some(Bound::Unbounded),
                "+" if !lower => Some(Bound::Unbounded),
                "-" | "+" => None,
                _ if arg.starts_with('[') => Some(Bound::Included(arg[1..].to_string())),
                _ => Some(Bound::Excluded(arg[1..].to_string())),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            // Goal: with deadlines set, changed, cleared and passing, across reopens, every
            // read agrees with a model in which a key is gone from its deadline on, whether
            // or not the active task has deleted it yet: GET, MGET, PTTL, KEYS, SCAN, DBSIZE,
            // FOREST.COUNT and FOREST.RANGE with any bounds, order and limit (strings with a
            // deadline live at `FF 'x'`, merged into every scan). Method: random operations
            // on five keys against a BTreeMap of (value, deadline), the test clock moved in
            // steps of minutes, expire cycles of random bounds, reopens of the store; every
            // read after each step.
            #[test]
            fn reads_match_a_model(
                ops in proptest::collection::vec(op(), 1..40),
                lo in (0u8..4, 0u8..5),
                hi in (0u8..4, 0u8..5),
                limit in 0usize..6,
                final_advance in 0u8..4,
            ) {
                let mut h = Harness::new();
        h.shared.expires.freeze_clock();
                // Virtual ms since the start; a key's deadline in the same terms.
                let mut now = 0u64;
                let mut model: BTreeMap<String, (String, Option<u64>)> = BTreeMap::new();
                for op in &ops {
                    // The model drops due keys first: they are gone.
                    model.retain(|_, (_, d)| d.is_none_or(|d| d > now));
                    match *op {
                        Op::Set(k, v, t) => {
                            let value = format!("v{v}");
                            let mut argv = vec!["SET".to_string(), key(k), value.clone()];
                            if let Some(t) = t {
                                argv.push("PX".into());
                                argv.push((u64::from(t) * MINUTE_MS).to_string());
                            }
                            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                            prop_assert_eq!(h.run(&argv), Frame::ok());
                            model.insert(key(k), (value, t.map(|t| now + u64::from(t) * MINUTE_MS)));
                        }
                        Op::Expire(k, m) => {
                            let ms = (i64::from(m) * MINUTE_MS as i64).to_string();
                            let want = i64::from(model.contains_key(&key(k)));
                            prop_assert_eq!(h.run(&["PEXPIRE", &key(k), &ms]), Frame::Integer(want));
                            if m <= 0 {
                                model.remove(&key(k));
                            } else if let Some(entry) = model.get_mut(&key(k)) {
                                entry.1 = Some(now + m as u64 * MINUTE_MS);
                            }
                        }
                        Op::Persist(k) => {
                            let want = model.get_mut(&key(k)).map_or(0, |e| i64::from(e.1.take().is_some()));
                            prop_assert_eq!(h.run(&["PERSIST", &key(k)]), Frame::Integer(want));
                        }
                        Op::Del(k) => {
                            let want = i64::from(model.remove(&key(k)).is_some());
                            prop_assert_eq!(h.run(&["DEL", &key(k)]), Frame::Integer(want));
                        }
                        Op::Advance(j) => {
                            let step = MINUTE_MS / 2 + u64::from(j) * MINUTE_MS;
                            h.shared.expires.advance_clock_ms(step as i64);
                            now += step;
                        }
                        Op::Cycle(max) => {
                            expire_cycle(&h.shared, usize::from(max));
                        }
                        Op::Reopen => {
                            h = h.restart();
                            h.shared.expires.freeze_clock();
                            h.shared.expires.advance_clock_ms(now as i64);
                        }
                        Op::Mset(k, v) => {
                            let (a, b) = (key(k), key((k + 1) % 5));
                            let value = format!("m{v}");
                            prop_assert_eq!(h.run(&["MSET", &a, &value, &b, &value]), Frame::ok());
                            model.insert(a.clone(), (value.clone(), None));
                            model.insert(b.clone(), (value.clone(), None));
                            prop_assert_eq!(h.run(&["MGET", &a, &b]), bulks(&[&value, &value]));
                        }
                    }
                    model.retain(|_, (_, d)| d.is_none_or(|d| d > now));
                    for k in 0..5 {
                        let want = model.get(&key(k)).map_or(Frame::Null, |(v, _)| bulk(v));
                        prop_assert_eq!(h.run(&["GET", &key(k)]), want, "GET {} after {:?}", key(k), op);
                        let pttl = match h.run(&["PTTL", &key(k)]) {
                            Frame::Integer(n) => n,
                            other => return Err(TestCaseError::fail(format!("{other:?}"))),
                        };
                        match model.get(&key(k)) {
                            None => prop_assert_eq!(pttl, -2),
                            Some((_, None)) => prop_assert_eq!(pttl, -1),
                            Some((_, Some(d))) => {
                                let left = (d - now) as i64;
                                // Real time passes too, a little.
                                prop_assert!(pttl <= left && pttl > left - 10_000, "{} {}", pttl, left);
                            }
                        }
                    }
                }
                // Time passes once more with no cycle: some keys are due and not deleted.
                let step = u64::from(final_advance) * MINUTE_MS;
                h.shared.expires.advance_clock_ms(step as i64);
                now += step;
                model.retain(|_, (_, d)| d.is_none_or(|d| d > now));
                let keys: Vec<&str> = model.keys().map(String::as_str).collect();
                prop_assert_eq!(h.run(&["KEYS", "*"]), bulks(&keys));
                let all: Vec<String> = (0..5).map(key).collect();
                let mut mget = vec!["MGET"];
                mget.extend(all.iter().map(String::as_str));
                let want = Frame::Array(
                    all.iter().map(|k| model.get(k).map_or(Frame::Null, |(v, _)| bulk(v))).collect(),
                );
                prop_assert_eq!(h.run(&mget), want);
                // SCAN with a small COUNT: every key once, across cursors.
                let mut cursor = "0".to_string();
                let mut scanned = Vec::new();
                loop {
                    let Frame::Array(reply) = h.run(&["SCAN", &cursor, "COUNT", "2"]) else {
                        return Err(TestCaseError::fail("SCAN's reply"));
                    };
                    let [Frame::Bulk(next), Frame::Array(found)] = &reply[..] else {
                        return Err(TestCaseError::fail("SCAN's reply"));
                    };
                    for item in found {
                        let Frame::Bulk(k) = item else {
                            return Err(TestCaseError::fail("SCAN's key"));
                        };
                        scanned.push(String::from_utf8_lossy(k).into_owned());
                    }
                    cursor = String::from_utf8_lossy(next).into_owned();
                    if cursor == "0" {
                        break;
                    }
                }
                prop_assert_eq!(scanned, keys.iter().map(|k| k.to_string()).collect::<Vec<_>>());
                prop_assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(model.len() as i64));
                let (min, max) = (bound_arg(lo.0, lo.1), bound_arg(hi.0, hi.1));
                let want: Vec<(String, String)> = match (model_bound(&min, true), model_bound(&max, false)) {
                    (Some(l), Some(u)) => {
                        let crossed = match (&l, &u) {
                            (Bound::Included(a), Bound::Included(b)) => a > b,
                            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
                            _ => false,
                        };
                        if crossed {
                            vec![]
                        } else {
                            model.range((l, u)).map(|(k, (v, _))| (k.clone(), v.clone())).collect()
                        }
                    }
                    _ => vec![],
                };
                prop_assert_eq!(h.run(&["FOREST.COUNT", &min, &max]), Frame::Integer(want.len() as i64));
                for rev in [false, true] {
                    for limit in [limit, i64::MAX as usize] {
                        let limit_text = limit.to_string();
                        let mut argv = vec!["FOREST.RANGE", &min, &max, "LIMIT", &limit_text];
                        if rev {
                            argv.push("REV");
                        }
                        let got = h.run(&argv);
                        let ordered: Vec<&(String, String)> = if rev {
                            want.iter().rev().collect()
                        } else {
                            want.iter().collect()
                        };
                        let expected = Frame::Array(
                            ordered.into_iter().take(limit).flat_map(|(k, v)| [bulk(k), bulk(v)]).collect(),
                        );
                        prop_assert_eq!(got, expected, "{:?}", argv);
                    }
                }
            }
        }
    }
}

/// Redis's TTL rules for the string and keyspace commands (redis `src/db.c` renameGeneric,
/// copyCommand; `src/bitops.c` bitopCommand; `src/t_string.c`), each command run alone and
/// as the one command of an EXEC, and the deadline index checked against the map.
#[cfg(test)]
mod ttl_rules {
    use std::ops::{Bound, ControlFlow};

    use forest_core::Order;

    use super::super::testing::*;
    use crate::expiry::{index_bounds, split_index_key};
    use crate::frame::Frame;

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    /// Runs `argv` alone, or (`txn`) as the one command of a MULTI/EXEC; its reply.
    fn run_in(h: &mut Harness, txn: bool, argv: &[&str]) -> Frame {
        if !txn {
            return h.run(argv);
        }
        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        assert_eq!(h.run(argv), Frame::Simple("QUEUED".into()), "{argv:?}");
        match h.run(&["EXEC"]) {
            Frame::Array(mut replies) if replies.len() == 1 => replies.pop().expect("one"),
            other => panic!("EXEC of {argv:?}: {other:?}"),
        }
    }

    /// The store's deadlines as (deadline, key) in time order: collections' `FF 'E'`
    /// entries and strings at `FF 'x'` (none of which also has its raw key), each checked
    /// against the map.
    fn index(h: &Harness) -> Vec<(u64, String)> {
        let (lower, upper) = index_bounds();
        let mut entries = Vec::new();
        h.shared.store.scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |key, _| {
                let (deadline, user) = split_index_key(key).expect("an index key");
                entries.push((deadline, String::from_utf8_lossy(user).into_owned()));
                ControlFlow::Continue(())
            },
        );
        let (lower, upper) = crate::expiry::string_bounds();
        let mut strings = Vec::new();
        h.shared.store.scan(
            Bound::Included(&lower[..]),
            Bound::Excluded(&upper[..]),
            Order::Ascending,
            &mut |key, value| {
                let user = crate::expiry::split_string_key(key).expect("a string's place");
                let (deadline, _) = crate::expiry::decode_string(value).expect("a deadline");
                strings.push((deadline, user.to_vec()));
                ControlFlow::Continue(())
            },
        );
        let mut scratch = Vec::new();
        for (deadline, user) in strings {
            assert!(
                !h.shared.store.get(&user, &mut scratch),
                "{user:?} in both places"
            );
            entries.push((deadline, String::from_utf8_lossy(&user).into_owned()));
        }
        entries.sort();
        for (deadline, user) in &entries {
            assert_eq!(
                h.shared.expires.deadline(user.as_bytes()),
                Some(*deadline),
                "{user}"
            );
        }
        assert_eq!(
            entries.len() as i64,
            h.shared.expires.count(),
            "{entries:?}"
        );
        entries
    }

    /// The keys the index holds deadlines for.
    fn indexed(h: &Harness) -> Vec<String> {
        index(h).into_iter().map(|(_, user)| user).collect()
    }

    fn pttl(h: &mut Harness, key: &str) -> Frame {
        h.run(&["PTTL", key])
    }

    // Goal: RENAME and RENAMENX move the source's deadline to the destination, drop a
    // replaced destination's, and leave no entry under the old name: a new key made under
    // the old name survives the old deadline while the renamed key expires. A due source
    // is absent ("no such key"); a due destination is absent (RENAMENX renames). Method:
    // frozen clock, each case alone and inside EXEC.
    #[test]
    fn rename_moves_the_deadline() {
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            h.run(&["SET", "a", "v", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["RENAME", "a", "b"]), Frame::ok());
            assert_eq!(indexed(&h), ["b"], "txn {txn}");
            assert_eq!(h.run(&["RPUSH", "a", "x"]), int(1));
            assert_eq!(pttl(&mut h, "b"), int(1000));
            assert_eq!(pttl(&mut h, "a"), int(-1));
            h.shared.expires.advance_clock_ms(1000);
            assert_eq!(
                h.run(&["LRANGE", "a", "0", "-1"]),
                bulks(&["x"]),
                "txn {txn}"
            );
            assert_eq!(h.run(&["EXISTS", "b"]), int(0));

            // A replaced destination's deadline goes.
            h.run(&["SET", "c", "v"]);
            h.run(&["SET", "d", "w", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["RENAME", "c", "d"]), Frame::ok());
            assert_eq!(pttl(&mut h, "d"), int(-1), "txn {txn}");

            // RENAMENX likewise; a collection's deadline moves too.
            h.run(&["RPUSH", "l", "x"]);
            h.run(&["PEXPIRE", "l", "2000"]);
            assert_eq!(run_in(&mut h, txn, &["RENAMENX", "l", "m"]), int(1));
            assert_eq!(pttl(&mut h, "m"), int(2000), "txn {txn}");
            assert_eq!(h.run(&["SADD", "l", "y"]), int(1));
            h.shared.expires.advance_clock_ms(2000);
            assert_eq!(h.run(&["SMEMBERS", "l"]), bulks(&["y"]), "txn {txn}");
            assert_eq!(h.run(&["EXISTS", "m"]), int(0));

            // A due source is absent; a due destination is absent.
            h.run(&["SET", "s", "v", "PX", "10"]);
            h.run(&["RPUSH", "t", "x"]);
            h.run(&["PEXPIRE", "t", "10"]);
            h.run(&["SET", "u", "new"]);
            h.shared.expires.advance_clock_ms(10);
            assert_eq!(
                run_in(&mut h, txn, &["RENAME", "s", "z"]),
                Frame::Error("ERR no such key".into())
            );
            assert_eq!(run_in(&mut h, txn, &["RENAMENX", "u", "t"]), int(1));
            assert_eq!(h.run(&["TYPE", "t"]), Frame::Simple("string".into()));
            assert_eq!(h.run(&["GET", "t"]), bulk("new"));
            assert_eq!(pttl(&mut h, "t"), int(-1));
            h.run(&["DEL", "a", "b", "d", "l", "m", "t"]);
            assert_eq!(indexed(&h), Vec::<String>::new(), "txn {txn}");
            assert_eq!(h.run(&["DBSIZE"]), int(0));
            assert_eq!(h.entries(), 0, "txn {txn}");
        }
    }

    // Goal: COPY copies the source's deadline; REPLACE drops the destination's old one; a
    // due source copies nothing, a due destination is absent. Method: as above.
    #[test]
    fn copy_copies_the_deadline() {
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            h.run(&["SET", "a", "v", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["COPY", "a", "b"]), int(1));
            assert_eq!(pttl(&mut h, "b"), int(1000), "txn {txn}");
            assert_eq!(pttl(&mut h, "a"), int(1000));
            h.run(&["SET", "c", "plain"]);
            h.run(&["SET", "d", "w", "PX", "5000"]);
            assert_eq!(run_in(&mut h, txn, &["COPY", "c", "d", "REPLACE"]), int(1));
            assert_eq!(pttl(&mut h, "d"), int(-1), "txn {txn}");
            h.run(&["HSET", "h", "f", "v"]);
            h.run(&["PEXPIRE", "h", "3000"]);
            h.run(&["SET", "e", "w", "PX", "5000"]);
            assert_eq!(run_in(&mut h, txn, &["COPY", "h", "e", "REPLACE"]), int(1));
            assert_eq!(pttl(&mut h, "e"), int(3000), "txn {txn}");
            h.shared.expires.advance_clock_ms(1000);
            assert_eq!(h.run(&["EXISTS", "a", "b", "c", "d", "e", "h"]), int(4));
            assert_eq!(run_in(&mut h, txn, &["COPY", "a", "f"]), int(0));
            // b is due: COPY without REPLACE writes it.
            assert_eq!(run_in(&mut h, txn, &["COPY", "c", "b"]), int(1));
            assert_eq!(pttl(&mut h, "b"), int(-1), "txn {txn}");
            h.shared.expires.advance_clock_ms(2000);
            assert_eq!(h.run(&["EXISTS", "e", "h"]), int(0));
            h.run(&["DEL", "b", "c", "d", "e", "h"]);
            assert_eq!(indexed(&h), Vec::<String>::new(), "txn {txn}");
            assert_eq!(h.entries(), 0, "txn {txn}");
        }
    }

    // Goal: BITOP's destination loses its deadline (also when the result is empty and the
    // destination goes); GETDEL removes the deadline with the value, so a new key of that
    // name outlives it. Method: as above.
    #[test]
    fn bitop_and_getdel_drop_the_deadline() {
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            h.run(&["SET", "src", "a"]);
            h.run(&["SET", "d", "x", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["BITOP", "OR", "d", "src"]), int(1));
            assert_eq!(pttl(&mut h, "d"), int(-1), "txn {txn}");
            h.run(&["SET", "e", "x", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["BITOP", "AND", "e", "none"]), int(0));
            assert_eq!(h.run(&["EXISTS", "e"]), int(0));
            assert_eq!(indexed(&h), Vec::<String>::new(), "txn {txn}");
            // A due destination that is a collection is replaced whole.
            h.run(&["RPUSH", "f", "x", "y"]);
            h.run(&["PEXPIRE", "f", "10"]);
            h.shared.expires.advance_clock_ms(10);
            assert_eq!(run_in(&mut h, txn, &["BITOP", "NOT", "f", "src"]), int(1));
            assert_eq!(h.run(&["TYPE", "f"]), Frame::Simple("string".into()));

            h.run(&["SET", "g", "v", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["GETDEL", "g"]), bulk("v"));
            assert_eq!(pttl(&mut h, "g"), int(-2));
            assert_eq!(h.run(&["RPUSH", "g", "x"]), int(1));
            h.shared.expires.advance_clock_ms(1000);
            assert_eq!(h.run(&["LLEN", "g"]), int(1), "txn {txn}");
            h.run(&["DEL", "src", "d", "f", "g"]);
            assert_eq!(indexed(&h), Vec::<String>::new(), "txn {txn}");
            assert_eq!(h.entries(), 0, "txn {txn}");
        }
    }

    // Goal: SETRANGE, SETBIT, APPEND, INCRBYFLOAT and INCR keep a live key's deadline and
    // see a due key as absent (deleted first, so the new value has no deadline). Method: as
    // above.
    #[test]
    fn string_updates_keep_the_deadline() {
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            h.run(&["SET", "s", "hello", "PX", "1000"]);
            h.run(&["SET", "n", "1", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["SETRANGE", "s", "0", "J"]), int(5));
            assert_eq!(run_in(&mut h, txn, &["SETBIT", "s", "0", "1"]), int(0));
            assert_eq!(run_in(&mut h, txn, &["APPEND", "s", "!"]), int(6));
            assert_eq!(
                run_in(&mut h, txn, &["INCRBYFLOAT", "n", "1.5"]),
                bulk("2.5")
            );
            h.run(&["SET", "i", "1", "PX", "1000"]);
            assert_eq!(run_in(&mut h, txn, &["INCR", "i"]), int(2));
            for key in ["s", "n", "i"] {
                assert_eq!(pttl(&mut h, key), int(1000), "{key} txn {txn}");
            }
            h.shared.expires.advance_clock_ms(1000);
            assert_eq!(run_in(&mut h, txn, &["SETRANGE", "s", "1", "ab"]), int(3));
            assert_eq!(h.run(&["GET", "s"]), bulk("\0ab"));
            assert_eq!(
                run_in(&mut h, txn, &["INCRBYFLOAT", "n", "1.5"]),
                bulk("1.5")
            );
            assert_eq!(run_in(&mut h, txn, &["INCR", "i"]), int(1));
            h.run(&["SET", "b", "x", "PX", "10"]);
            h.run(&["SET", "p", "x", "PX", "10"]);
            h.shared.expires.advance_clock_ms(10);
            assert_eq!(run_in(&mut h, txn, &["SETBIT", "b", "7", "1"]), int(0));
            assert_eq!(h.run(&["GET", "b"]), bulk("\u{1}"));
            assert_eq!(run_in(&mut h, txn, &["APPEND", "p", "y"]), int(1));
            for key in ["s", "n", "i", "b", "p"] {
                assert_eq!(pttl(&mut h, key), int(-1), "{key} txn {txn}");
            }
            assert_eq!(indexed(&h), Vec::<String>::new(), "txn {txn}");
        }
    }

    // Goal: a due key is absent to OBJECT ENCODING, TYPE, EXISTS, TOUCH, GETRANGE, LCS,
    // STRLEN and RANDOMKEY, before any deletion. Method: as above, no expire cycle.
    #[test]
    fn reads_see_a_due_key_absent() {
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            h.run(&["SET", "a", "ohmytext", "PX", "10"]);
            h.run(&["SET", "b", "mynewtext"]);
            h.run(&["RPUSH", "l", "x"]);
            h.run(&["PEXPIRE", "l", "10"]);
            assert_eq!(run_in(&mut h, txn, &["LCS", "a", "b"]), bulk("mytext"));
            h.shared.expires.advance_clock_ms(10);
            let null = Frame::Null;
            assert_eq!(run_in(&mut h, txn, &["OBJECT", "ENCODING", "a"]), null);
            assert_eq!(run_in(&mut h, txn, &["OBJECT", "ENCODING", "l"]), null);
            for key in ["a", "l"] {
                assert_eq!(
                    run_in(&mut h, txn, &["TYPE", key]),
                    Frame::Simple("none".into())
                );
            }
            assert_eq!(run_in(&mut h, txn, &["EXISTS", "a", "l", "b"]), int(1));
            assert_eq!(run_in(&mut h, txn, &["TOUCH", "a", "l", "b"]), int(1));
            assert_eq!(run_in(&mut h, txn, &["GETRANGE", "a", "0", "-1"]), bulk(""));
            assert_eq!(run_in(&mut h, txn, &["LCS", "a", "b"]), bulk(""));
            assert_eq!(run_in(&mut h, txn, &["STRLEN", "a"]), int(0));
            for _ in 0..50 {
                assert_eq!(run_in(&mut h, txn, &["RANDOMKEY"]), bulk("b"), "txn {txn}");
            }
            h.run(&["DEL", "b"]);
            assert_eq!(run_in(&mut h, txn, &["RANDOMKEY"]), null, "txn {txn}");
        }
    }

    // Goal: every way a key is removed or replaced removes or replaces its deadline entry
    // in the same batch: a new key of the same name, written by a command that keeps
    // deadlines (RPUSH, SADD), outlives the old deadline, and the index holds no entry
    // for a key that is gone. Method: per path, a key with a deadline, the removal (alone
    // and as the one command of an EXEC), a new key of that name, the clock past the old
    // deadline.
    #[test]
    fn every_removal_takes_the_deadline() {
        let strings: &[&[&str]] = &[
            &["DEL", "k"],
            &["UNLINK", "k"],
            &["FLUSHDB"],
            &["FLUSHALL"],
            &["FOREST.DELRANGE", "[k", "[k"],
            &["FOREST.DELRANGE", "-", "+"],
            &["GETDEL", "k"],
            &["RENAME", "k", "other"],
            &["BITOP", "AND", "k", "missing"],
            &["SET", "k", "v"],
            &["GETSET", "k", "v"],
            &["MSET", "k", "v"],
            &["SETEX", "k", "100000", "v"],
        ];
        let lists: &[&[&str]] = &[
            &["DEL", "k"],
            &["FLUSHDB"],
            &["LPOP", "k"],
            &["RPOP", "k", "5"],
            &["RENAMENX", "k", "other"],
            &["SET", "k", "v"],
            &["MSET", "k", "v"],
            &["BITOP", "OR", "k", "missing"],
        ];
        let sets: &[&[&str]] = &[&["SREM", "k", "m"], &["SPOP", "k"], &["SPOP", "k", "3"]];
        let hashes: &[&[&str]] = &[&["HDEL", "k", "f"]];
        let zsets: &[&[&str]] = &[&["ZPOPMIN", "k"], &["ZREM", "k", "m"]];
        let cases = [
            (&["SET", "k", "v"][..], strings),
            (&["RPUSH", "k", "x"], lists),
            (&["SADD", "k", "m"], sets),
            (&["HSET", "k", "f", "v"], hashes),
            (&["ZADD", "k", "1", "m"], zsets),
        ];
        for txn in [false, true] {
            let mut h = Harness::new();
            h.shared.expires.freeze_clock();
            for (make, removals) in cases {
                for removal in removals {
                    h.run(make);
                    assert_eq!(h.run(&["PEXPIRE", "k", "1000"]), int(1));
                    run_in(&mut h, txn, removal);
                    let what = format!("{make:?} then {removal:?}, txn {txn}");
                    // Entries left: the renamed key's, SETEX's own; never k's old one.
                    let want: &[&str] = match removal[0] {
                        "RENAME" | "RENAMENX" => &["other"],
                        "SETEX" => &["k"],
                        _ => &[],
                    };
                    assert_eq!(indexed(&h), want, "{what}");
                    if h.run(&["EXISTS", "k"]) == int(1) {
                        // Replaced by a string without a deadline (SETEX: with its own).
                        let kept = if removal[0] == "SETEX" {
                            100_000_000
                        } else {
                            -1
                        };
                        assert_eq!(pttl(&mut h, "k"), int(kept), "{what}");
                        h.run(&["DEL", "k"]);
                    }
                    h.run(&["DEL", "other"]);
                    assert_eq!(indexed(&h), Vec::<String>::new(), "{what}");
                    assert_eq!(h.run(&["SADD", "k", "new"]), int(1), "{what}");
                    h.shared.expires.advance_clock_ms(1000);
                    assert_eq!(h.run(&["SCARD", "k"]), int(1), "{what}");
                    h.run(&["DEL", "k"]);
                    assert_eq!(h.entries(), 0, "{what}");
                }
            }
        }
    }

    // Goal: FLUSHDB inside EXEC takes the deadlines its EXEC set before it, and later
    // commands of the EXEC see no deadline; after EXEC the map holds only what was set
    // after the flush. Method: SET EX, FLUSHDB, TTL, SET EX in one EXEC; then a new key
    // under the first name outlives the first deadline.
    #[test]
    fn flushdb_inside_exec_takes_earlier_deadlines() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["SET", "old", "v", "PX", "1000"]);
        h.run(&["RPUSH", "list", "x"]);
        h.run(&["PEXPIRE", "list", "1000"]);
        assert_eq!(h.run(&["MULTI"]), Frame::ok());
        for argv in [
            &["SET", "a", "v", "PX", "1000"][..],
            &["FLUSHDB"],
            &["PTTL", "a"],
            &["PTTL", "old"],
            &["RPUSH", "list", "y"],
            &["PTTL", "list"],
            &["SET", "b", "v", "PX", "2000"],
        ] {
            assert_eq!(h.run(argv), Frame::Simple("QUEUED".into()));
        }
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![
                Frame::ok(),
                Frame::ok(),
                int(-2),
                int(-2),
                int(1),
                int(-1),
                Frame::ok()
            ])
        );
        assert_eq!(indexed(&h), ["b"]);
        assert_eq!(h.run(&["SADD", "a", "m"]), int(1));
        assert_eq!(h.run(&["SADD", "old", "m"]), int(1));
        h.shared.expires.advance_clock_ms(1000);
        assert_eq!(h.run(&["EXISTS", "a", "old", "list", "b"]), int(4));
        assert_eq!(h.run(&["DBSIZE"]), int(4));
        h.shared.expires.advance_clock_ms(1000);
        assert_eq!(h.run(&["DBSIZE"]), int(3));
        h.run(&["FLUSHDB"]);
        assert_eq!(h.entries(), 0);
        assert_eq!(h.shared.expires.count(), 0);
    }

    // Goal: a deadline whose index entry cannot be stored (a key so long that its entry
    // passes the key limit) fails the command whole, also as part of an EXEC: the source
    // keeps its value and deadline, the index stays consistent with the map. Method: a
    // destination name at the key limit, RENAME and COPY alone and inside EXEC.
    #[test]
    fn a_deadline_too_long_to_index_fails_the_whole_command() {
        let long = "x".repeat(forest_core::KEY_BYTES_MAX);
        for txn in [false, true] {
            for argv in [&["RENAME", "a", &long][..], &["COPY", "a", &long]] {
                let mut h = Harness::new();
                h.shared.expires.freeze_clock();
                h.run(&["SET", "a", "v", "PX", "1000"]);
                let reply = run_in(&mut h, txn, argv);
                assert!(matches!(reply, Frame::Error(_)), "{reply:?} txn {txn}");
                assert_eq!(pttl(&mut h, "a"), int(1000), "{} txn {txn}", argv[0]);
                assert_eq!(h.run(&["EXISTS", &long]), int(0), "{} txn {txn}", argv[0]);
                assert_eq!(indexed(&h), ["a"], "{} txn {txn}", argv[0]);
            }
        }
    }
}
