//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH (and RESET), with Redis's semantics
//! (redis src/multi.c; docs/PROTOCOL.md "Transactions").
//!
//! Queuing: after MULTI every command but EXEC, DISCARD, MULTI, WATCH, QUIT and RESET is
//! checked (name, arity, authentication) and queued with `+QUEUED`; a command refused
//! there marks the transaction, and its EXEC answers `-EXECABORT` (Redis's
//! CLIENT_DIRTY_EXEC). WATCH registers keys in [`crate::watch::Watches`]; a write of one
//! of them (any client, deletions, FLUSHDB, expiry) sets the client's dirty flag, and EXEC
//! then answers a null reply.
//!
//! EXEC is one atomic store batch, and no global lock:
//! 1. it takes the server stripe locks (`Collections::lock_many`, stripe order) of every
//!    key its commands name (by the command table's key positions) and of its watched keys;
//!    a transaction holding a command whose keys are not known up front (KEYS, SCAN,
//!    DBSIZE, FLUSHDB, FOREST.RANGE / COUNT / DELRANGE, EVAL and its kin) takes all of them
//!    (`lock_all`). Every write takes its key's stripe, so no other write of these keys
//!    runs until EXEC ends; the locks are re-entrant, so each command takes its own again;
//! 2. it checks the dirty flag under those locks (the watch hook runs under the writer's
//!    stripe lock, so a write is seen here or comes after the whole EXEC);
//! 3. it runs the commands over one unit ([`super::Unit`] with `txn` set): writes are
//!    decided into an overlay, not applied, and every read of a command (point reads,
//!    MGET, and the scans through [`Ctx::scan`]) sees the earlier writes of the same EXEC;
//! 4. it hands the overlay to the store as one `WriteBatch` (`Batch::write`): readers of
//!    single keys (the stripes' seqlocks) and scans (the scan gate) see all of it or none,
//!    and recovery keeps the batch whole or drops it whole.
//!
//! A script (EVAL, [`super::script`]) runs the same way, through [`begin_script`] and
//! [`end_script`]: every stripe, one unit, one batch.
//!
//! Two transactions on disjoint keys share no lock (unless their stripes collide).
//! A runtime error of one command is its own reply; the others' writes stand.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use forest_core::{check_entry, Order, Visitor};
use forest_store::{BatchOp, WriteBatch};

use super::{store_error, Ctx, Reply, Spec, Unit};
use crate::frame::{Frame, Protocol};
use crate::watch::{DirtyFlag, Watches};

/// An entry of a unit's overlay: a key and its new value (None: removed).
type OverlayEntry<'a> = (&'a Vec<u8>, &'a Option<Vec<u8>>);

/// Commands refused inside MULTI (Redis's `no-multi` flag, and the subscriptions, whose
/// several replies would not fit EXEC's one reply per command).
const NO_MULTI: &[&str] = &[
    "save",
    "shutdown",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
];

/// Commands that run at once even inside MULTI.
const NOT_QUEUED: &[&str] = &["exec", "discard", "multi", "watch", "quit", "reset"];

/// A command waiting for EXEC.
#[derive(Debug)]
struct Queued {
    spec: &'static Spec,
    argv: Vec<Vec<u8>>,
}

/// A client's transaction state.
#[derive(Debug, Default)]
pub struct TxnState {
    multi: bool,
    queue: Vec<Queued>,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    aborted: bool,
    /// A watched key was written since WATCH.
    dirty: DirtyFlag,
    watched: Vec<Vec<u8>>,
    /// Watched keys that were live with a deadline at WATCH: one due at EXEC was touched
    /// (Redis's isWatchedKeyExpired), even if nothing deleted it yet.
    expiring: Vec<Vec<u8>>,
    /// Where `watched` is registered (to forget it when the client goes).
    watches: Option<(Arc<Watches>, u64)>,
    /// EXEC is running the queue: PUBLISH waits for its end.
    executing: bool,
    deferred: Vec<(Vec<u8>, Vec<u8>)>,
}

impl TxnState {
    /// Whether MULTI was sent and EXEC or DISCARD not yet.
    pub fn in_multi(&self) -> bool {
        self.multi
    }

    /// Whether EXEC would run a script (EVAL and its kin queued since MULTI): the per-core
    /// model runs such an EXEC off its runtime's thread (`crate::connection`).
    pub fn queues_a_script(&self) -> bool {
        self.multi && self.queue.iter().any(|q| is_script(q.spec))
    }

    /// Commands queued since MULTI; None outside MULTI.
    pub fn queued(&self) -> Option<usize> {
        self.multi.then_some(self.queue.len())
    }

    /// Keys watched, and whether one was written since (CLIENT LIST).
    pub fn watching(&self) -> (usize, bool) {
        (self.watched.len(), self.dirty.load(Ordering::SeqCst))
    }

    /// Forgets the queue and every watched key.
    fn clear(&mut self) {
        self.multi = false;
        self.queue.clear();
        self.aborted = false;
        self.unwatch();
    }

    fn unwatch(&mut self) {
        if let Some((watches, id)) = &self.watches {
            watches.unwatch(*id, &self.watched);
        }
        self.watched.clear();
        self.expiring.clear();
        self.dirty.store(false, Ordering::SeqCst);
    }
}

impl Drop for TxnState {
    fn drop(&mut self) {
        self.unwatch();
    }
}

/// Marks a transaction being queued as failed (a command refused before it ran);
/// returns the error to send.
pub(crate) fn reject(ctx: &mut Ctx<'_, '_>, error: Frame) -> Frame {
    if ctx.client.txn.multi {
        ctx.client.txn.aborted = true;
    }
    error
}

/// What happens to a checked command before it runs: refused in RESP2's subscribed
/// mode, answered by PING's subscribed form, or queued inside MULTI. None: run it now.
pub(crate) fn intercept(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static Spec,
    argv: &[&[u8]],
) -> Option<Reply> {
    let name = spec.name;
    if ctx.client.txn.multi && NO_MULTI.contains(&name) {
        return Some(Err(reject(
            ctx,
            Frame::err("Command not allowed inside a transaction"),
        )));
    }
    if ctx.client.pubsub.is_subscribed() && ctx.client.protocol == Protocol::Resp2 {
        match name {
            "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "quit" | "reset" => {}
            "ping" => {
                let message = argv.get(1).copied().unwrap_or_default();
                return Some(Ok(Frame::Array(vec![
                    Frame::bulk("pong"),
                    Frame::bulk(message),
                ])));
            }
            _ => {
                return Some(Err(reject(
                    ctx,
                    Frame::err(format!(
                        "Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / \
                         PING / QUIT / RESET are allowed in this context"
                    )),
                )))
            }
        }
    }
    if !ctx.client.txn.multi || NOT_QUEUED.contains(&name) {
        return None;
    }
    ctx.client.txn.queue.push(Queued {
        spec,
        argv: argv.iter().map(|a| a.to_vec()).collect(),
    });
    Some(Ok(Frame::Simple("QUEUED".into())))
}

/// MULTI.
pub fn multi(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    if ctx.client.txn.multi {
        return Err(Frame::err("MULTI calls can not be nested"));
    }
    ctx.client.txn.multi = true;
    Ok(Frame::ok())
}

/// DISCARD.
pub fn discard(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    if !ctx.client.txn.multi {
        return Err(Frame::err("DISCARD without MULTI"));
    }
    ctx.client.txn.clear();
    Ok(Frame::ok())
}

/// WATCH key [key ...].
pub fn watch(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if ctx.client.txn.multi {
        return Err(Frame::err("WATCH inside MULTI is not allowed"));
    }
    let txn = &mut ctx.client.txn;
    // No point in watching once dirty (as Redis).
    if txn.dirty.load(Ordering::SeqCst) {
        return Ok(Frame::ok());
    }
    let id = ctx.client.info.id;
    let shared = ctx.shared;
    let watches = &shared.watches;
    txn.watches = Some((Arc::clone(watches), id));
    for key in &argv[1..] {
        // Under the key's stripe, which every write holds while it applies and touches: a
        // write either comes before (and the reads after WATCH see it) or marks us dirty.
        let _guard = shared.collections.lock(key);
        if watches.watch(id, &txn.dirty, key) {
            txn.watched.push(key.to_vec());
            if shared.expires.deadline(key).is_some() && !shared.expires.is_due(key) {
                txn.expiring.push(key.to_vec());
            }
        }
    }
    Ok(Frame::ok())
}

/// UNWATCH.
pub fn unwatch(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    ctx.client.txn.unwatch();
    Ok(Frame::ok())
}

/// RESET: leaves MULTI, forgets watched keys and subscriptions, back to RESP2, no name,
/// not authenticated if a password is set (Redis's `clearClientConnectionState`).
pub fn reset(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    ctx.client.txn.clear();
    ctx.client.pubsub.unsubscribe_all();
    ctx.client.protocol = Protocol::Resp2;
    ctx.client.authenticated = ctx.shared.config.requirepass.is_none();
    {
        let mut meta = ctx.client.info.meta.lock();
        meta.resp = 2;
        meta.name.clear();
    }
    Ok(Frame::Simple("RESET".into()))
}

/// Whether `spec`'s command reads or writes keys its arguments do not name (a script, EVAL
/// and its kin, `movablekeys`, may touch any key).
fn keyspace_wide(spec: &Spec) -> bool {
    spec.first_key <= 0
        && spec
            .flags
            .iter()
            .any(|f| matches!(*f, "write" | "readonly" | "movablekeys"))
}

/// The key arguments of a command, by the table's key positions.
fn key_args<'a>(spec: &Spec, argv: &'a [Vec<u8>]) -> impl Iterator<Item = &'a [u8]> {
    let (first, step) = if spec.first_key > 0 && spec.step > 0 {
        (spec.first_key as usize, spec.step as usize)
    } else {
        (argv.len(), 1)
    };
    let last = if spec.last_key < 0 {
        argv.len()
            .saturating_sub(spec.last_key.unsigned_abs() as usize)
    } else {
        spec.last_key as usize
    };
    argv.iter()
        .take(last.saturating_add(1))
        .skip(first)
        .step_by(step)
        .map(Vec::as_slice)
}

/// EXEC (see the module doc).
pub fn exec(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    // Its own mark, whether or not it runs through `run` (`write_unit` checks it).
    let _reads = super::CommandReads::begin();
    let txn = &mut ctx.client.txn;
    if !txn.multi {
        return Err(Frame::err("EXEC without MULTI"));
    }
    let queue = std::mem::take(&mut txn.queue);
    let aborted = txn.aborted;
    txn.multi = false;
    txn.aborted = false;
    if aborted {
        txn.unwatch();
        return Err(Frame::Error(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    let shared = ctx.shared;
    // A queued script may hold every stripe for seconds: marked before they are taken (the
    // script's own begin_script then takes them again, re-entrant).
    let _holding = queue
        .iter()
        .any(|q| is_script(q.spec))
        .then(|| shared.scripts.hold());
    let _guards = if queue.iter().any(|q| keyspace_wide(q.spec)) {
        shared.collections.lock_all()
    } else {
        let keys = queue.iter().flat_map(|q| key_args(q.spec, &q.argv));
        shared
            .collections
            .lock_many(keys.chain(txn.watched.iter().map(Vec::as_slice)))
    };
    // Under the stripes of every watched key: a write is seen now or comes after EXEC.
    let dirty = txn.dirty.load(Ordering::SeqCst)
        || txn.expiring.iter().any(|key| shared.expires.is_due(key));
    txn.unwatch();
    if dirty {
        return Ok(match ctx.client.protocol {
            Protocol::Resp2 => Frame::NullArray,
            Protocol::Resp3 => Frame::Null,
        });
    }
    ctx.client.txn.executing = true;
    ctx.unit = Some(Unit {
        txn: true,
        ..Unit::default()
    });
    let mut replies = Vec::with_capacity(queue.len());
    let mut argv: Vec<&[u8]> = Vec::new();
    for queued in &queue {
        argv.clear();
        argv.extend(queued.argv.iter().map(Vec::as_slice));
        let (Ok(reply) | Err(reply)) = super::run(ctx, queued.spec, &argv);
        replies.push(reply);
    }
    ctx.client.txn.executing = false;
    let written = write_unit(ctx);
    drop(_guards);
    // Published only if the transaction's writes were (review rev-lfix F2: an EXEC refused
    // for a failed read answered the error yet delivered its PUBLISH).
    let deferred = std::mem::take(&mut ctx.client.txn.deferred);
    if written.is_ok() {
        for (channel, message) in deferred {
            shared.pubsub.publish(&channel, &message);
        }
    }
    written?;
    Ok(Frame::Array(replies))
}

/// Whether `spec` runs a script (EVAL and its kin).
fn is_script(spec: &Spec) -> bool {
    matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro")
}

/// A script's hold on the keyspace ([`begin_script`]).
pub(super) struct ScriptUnit<'a> {
    guards: Vec<crate::collection::StripeGuard<'a>>,
    /// The script's mark in `Scripts::holding` (outside EXEC, whose own mark covers it),
    /// dropped after the guards.
    holding: Option<super::script::Holding<'a>>,
    /// Inside EXEC: EXEC's unit and the count of its deferred messages before the script, to
    /// go back to if the script's writes are dropped.
    nested: Option<(Option<Unit>, usize)>,
}

/// Starts a script (EVAL and its kin, [`super::script`]) as EXEC starts its queue: every
/// stripe lock (a script may touch keys it did not declare), one transaction unit whose
/// writes its later reads see, PUBLISH deferred. Inside EXEC the script joins EXEC's unit
/// (EXEC took every stripe already: `keyspace_wide`; the locks are re-entrant).
pub(super) fn begin_script<'a>(ctx: &mut Ctx<'a, '_>) -> ScriptUnit<'a> {
    let shared: &'a crate::server::Shared = ctx.shared;
    if ctx.unit.as_ref().is_some_and(|u| u.txn) {
        let guards = shared.collections.lock_all();
        let before = ctx.unit.clone();
        return ScriptUnit {
            guards,
            holding: None,
            nested: Some((before, ctx.client.txn.deferred.len())),
        };
    }
    let holding = Some(shared.scripts.hold());
    let guards = shared.collections.lock_all();
    ctx.unit = Some(Unit {
        txn: true,
        ..Unit::default()
    });
    ctx.client.txn.executing = true;
    ScriptUnit {
        guards,
        holding,
        nested: None,
    }
}

/// Ends a script: `keep` writes its unit as one atomic batch (readers and recovery see all of
/// it or none) and then delivers its messages; otherwise (a script stopped by its time limit
/// or SCRIPT KILL) its writes and messages are dropped, inside EXEC too. The stripes are
/// released before the messages go out, as EXEC does.
pub(super) fn end_script(
    ctx: &mut Ctx<'_, '_>,
    script: ScriptUnit<'_>,
    keep: bool,
) -> Result<(), Frame> {
    let ScriptUnit {
        guards,
        holding,
        nested,
    } = script;
    if let Some((before, published)) = nested {
        if !keep {
            ctx.unit = before;
            ctx.client.txn.deferred.truncate(published);
        }
        return Ok(());
    }
    ctx.client.txn.executing = false;
    let deferred = std::mem::take(&mut ctx.client.txn.deferred);
    let written = if keep {
        write_unit(ctx)
    } else {
        ctx.unit = None;
        Ok(())
    };
    drop(guards);
    drop(holding);
    if keep && written.is_ok() {
        for (channel, message) in deferred {
            ctx.shared.pubsub.publish(&channel, &message);
        }
    }
    written
}

/// Writes EXEC's overlay as one atomic batch: one op per key, its final state.
fn write_unit(ctx: &mut Ctx<'_, '_>) -> Result<(), Frame> {
    let Some(unit) = ctx.unit.take() else {
        return Ok(());
    };
    // A store read of the transaction (or script) failed: its writes may rest on it.
    ctx.reads_ok()?;
    let mut batch = WriteBatch::new();
    for (key, value) in unit.overlay.iter() {
        match value {
            Some(value) => batch.put(key, value),
            None => batch.remove(key),
        };
    }
    // Strings may move between their two places (see `Ctx::end_unit`).
    let moves = !unit.deadlines.is_empty();
    if moves {
        ctx.shared.expires.begin_move();
    }
    if !batch.is_empty() {
        ctx.wrote = true;
        // A failed write leaves the map of deadlines as it was.
        if let Err(e) = ctx.batch.write(&batch) {
            if moves {
                ctx.shared.expires.end_move();
            }
            return Err(store_error(&e));
        }
    }
    // Once the writes are visible, still under the stripes: the deadlines the transaction
    // changed (`crate::expiry`), then the watchers (crate::watch).
    super::expire::apply_deadlines(ctx.shared, &unit.deadlines);
    if moves {
        ctx.shared.expires.end_move();
    }
    for key in unit.overlay.keys() {
        ctx.shared.watches.touched_store_key(key);
    }
    Ok(())
}

/// PUBLISH inside EXEC: delivered once the transaction is written (no subscriber sees a
/// message before the writes of the transaction that sent it). False: not inside EXEC.
pub fn defer_publish(ctx: &mut Ctx<'_, '_>, channel: &[u8], message: &[u8]) -> bool {
    if !ctx.client.txn.executing {
        return false;
    }
    ctx.client
        .txn
        .deferred
        .push((channel.to_vec(), message.to_vec()));
    true
}

/// `Ctx::write` inside a unit: each op decided into the overlay, in order; with `placed`,
/// string keys where they live (`Ctx::upsert`), else store keys exactly (`Ctx::upsert_at`).
pub(super) fn decide_batch(
    ctx: &mut Ctx<'_, '_>,
    batch: &WriteBatch,
    placed: bool,
) -> Result<Vec<bool>, Frame> {
    for op in batch.ops() {
        match op {
            BatchOp::Insert(k, v) | BatchOp::Upsert(k, v) | BatchOp::Update(k, v) => {
                check_entry(k, v).map_err(|e| store_error(&e))?
            }
            BatchOp::Remove(_) | BatchOp::RemovePresent(_) => {}
        }
    }
    let mut changed = Vec::with_capacity(batch.len());
    for op in batch.ops() {
        changed.push(match (op, placed) {
            (BatchOp::Upsert(k, v), true) => ctx.upsert(k, v).map(|()| true)?,
            (BatchOp::Upsert(k, v), false) => ctx.upsert_at(k, v).map(|()| true)?,
            (BatchOp::Insert(k, v), true) => ctx.insert(k, v)?,
            (BatchOp::Insert(k, v), false) => ctx.insert_at(k, v)?,
            (BatchOp::Update(k, v), true) => ctx.update(k, v)?,
            (BatchOp::Update(k, v), false) => ctx.update_at(k, v)?,
            (BatchOp::Remove(k) | BatchOp::RemovePresent(k), true) => ctx.remove(k)?,
            (BatchOp::Remove(k) | BatchOp::RemovePresent(k), false) => ctx.remove_at(k)?,
        });
    }
    Ok(changed)
}

/// How many store entries the open unit adds (negative: removes), for DBSIZE inside EXEC.
pub fn pending_entries(ctx: &mut Ctx<'_, '_>) -> i64 {
    let Some(unit) = ctx.unit.as_ref() else {
        return 0;
    };
    let mut scratch = Vec::new();
    // Deadline index entries are counted as reserved when the unit is applied
    // (`expire::apply_deadlines`), not when decided: they are neither keys nor pending here.
    let deadline_prefix = [crate::collection::RESERVED_BYTE, crate::expiry::EXPIRE_TAG];
    unit.overlay
        .iter()
        .filter(|(key, _)| !key.starts_with(&deadline_prefix))
        .map(|(key, value)| {
            let before = i64::from(ctx.shared.store.get(key, &mut scratch));
            i64::from(value.is_some()) - before
        })
        .sum()
}

impl Ctx<'_, '_> {
    /// [`forest_store::Store::scan`] as the running command sees it: within a unit (a
    /// collection command's, or EXEC's), its decided writes merged in key order.
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.scan_up_to(lower, upper, order, usize::MAX, visit)
    }

    /// [`Self::scan_up_to`]: a range of string keys (its upper bound at or below the
    /// reserved byte) is read from both places strings live, merged in key order, values
    /// without their deadlines (`super::strings_scan`); any other range is read as stored.
    pub fn scan_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        if super::strings_scan::in_strings(upper) {
            return self.scan_strings(lower, upper, order, limit, false, visit);
        }
        self.scan_up_to_at(lower, upper, order, limit, visit)
    }

    /// [`Self::scan_keys_up_to_at`], string ranges merged as [`Self::scan_up_to`].
    pub fn scan_keys_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        if super::strings_scan::in_strings(upper) {
            return self.scan_strings(lower, upper, order, limit, true, visit);
        }
        self.scan_keys_up_to_at(lower, upper, order, limit, visit)
    }

    /// [`Self::scan_up_to_at`] for keys alone: outside a unit's writes, the store's
    /// keys-only scan, which copies no values; the visitor gets each key with an empty value.
    pub(crate) fn scan_keys_up_to_at(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        if self.unit.as_ref().is_some_and(|u| !u.overlay.is_empty()) {
            return self.scan_up_to_at(lower, upper, order, limit, &mut |k, _| visit(k, &[]));
        }
        self.shared
            .store
            .scan_keys_up_to(lower, upper, order, limit, visit)
    }

    /// The store's entries in a range, at most `limit`, as stored (no string's place is
    /// looked up), within a unit its decided writes merged in key order.
    pub(crate) fn scan_up_to_at(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) {
        let store = &self.shared.store;
        let Some(overlay) = self
            .unit
            .as_ref()
            .map(|u| &u.overlay)
            .filter(|o| !o.is_empty())
        else {
            return store.scan_up_to(lower, upper, order, limit, visit);
        };
        if limit == 0 {
            return;
        }
        let range = overlay.range((lower, upper));
        // The store need read no more than `limit` plus the entries the unit removes: if
        // it returns that many, `limit` entries were handed out before it ended.
        let removed = range.clone().filter(|(_, v)| v.is_none()).count();
        let mut pending: Box<dyn Iterator<Item = OverlayEntry<'_>>> = match order {
            Order::Ascending => Box::new(range),
            Order::Descending => Box::new(range.rev()),
        };
        let mut next = pending.next();
        let before = |a: &[u8], b: &[u8]| match order {
            Order::Ascending => a < b,
            Order::Descending => a > b,
        };
        let mut handed = 0usize;
        let mut stopped = false;
        let mut hand = |key: &[u8], value: &[u8], stopped: &mut bool| {
            handed += 1;
            if visit(key, value).is_break() || handed >= limit {
                *stopped = true;
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        store.scan_up_to(
            lower,
            upper,
            order,
            limit.saturating_add(removed),
            &mut |key, value| {
                while let Some((k, v)) = next {
                    if !before(k, key) {
                        break;
                    }
                    next = pending.next();
                    if let Some(v) = v {
                        hand(k, v, &mut stopped)?;
                    }
                }
                match next {
                    Some((k, v)) if k.as_slice() == key => {
                        next = pending.next();
                        match v {
                            Some(v) => hand(k, v, &mut stopped),
                            None => ControlFlow::Continue(()),
                        }
                    }
                    _ => hand(key, value, &mut stopped),
                }
            },
        );
        while let (false, Some((k, v))) = (stopped, next) {
            next = pending.next();
            if let Some(v) = v {
                let _ = hand(k, v, &mut stopped);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::{Frame, Protocol};

    fn ok() -> Frame {
        Frame::ok()
    }

    fn queued() -> Frame {
        Frame::Simple("QUEUED".into())
    }

    fn err(text: &str) -> Frame {
        Frame::Error(text.into())
    }

    // Goal: MULTI/EXEC/DISCARD and their misuse answer as Redis (tests/unit/multi.tcl).
    // Method: one client through the dispatch.
    #[test]
    fn multi_exec_discard_basics() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["EXEC"]), err("ERR EXEC without MULTI"));
        assert_eq!(h.run(&["DISCARD"]), err("ERR DISCARD without MULTI"));
        h.run(&["RPUSH", "mylist", "a", "b", "c"]);
        assert_eq!(h.run(&["MULTI"]), ok());
        assert_eq!(h.run(&["LRANGE", "mylist", "0", "-1"]), queued());
        assert_eq!(h.run(&["PING"]), queued());
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![bulks(&["a", "b", "c"]), Frame::Simple("PONG".into())])
        );
        assert_eq!(h.run(&["MULTI"]), ok());
        assert_eq!(h.run(&["DEL", "mylist"]), queued());
        assert_eq!(h.run(&["DISCARD"]), ok());
        assert_eq!(h.run(&["LLEN", "mylist"]), Frame::Integer(3));
        assert_eq!(h.run(&["MULTI"]), ok());
        assert_eq!(h.run(&["MULTI"]), err("ERR MULTI calls can not be nested"));
        assert_eq!(
            h.run(&["WATCH", "x"]),
            err("ERR WATCH inside MULTI is not allowed")
        );
        assert_eq!(h.run(&["SET", "x", "1"]), queued());
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![ok()]),
            "not aborted by either"
        );
        assert_eq!(h.run(&["MULTI"]), ok());
        assert_eq!(h.run(&["EXEC"]), Frame::Array(vec![]));
    }

    // Goal: a queuing error (unknown command, arity, a command refused in MULTI) aborts
    // EXEC with EXECABORT and writes nothing; the client leaves MULTI.
    #[test]
    fn queuing_errors_abort_exec() {
        let mut h = Harness::new();
        for bad in [&["NOPE", "x"][..], &["GET"][..], &["SUBSCRIBE", "c"][..]] {
            assert_eq!(h.run(&["MULTI"]), ok());
            assert_eq!(h.run(&["SET", "foo1", "bar1"]), queued());
            assert!(matches!(h.run(bad), Frame::Error(_)), "{bad:?}");
            assert_eq!(h.run(&["SET", "foo2", "bar2"]), queued());
            assert_eq!(
                h.run(&["EXEC"]),
                err("EXECABORT Transaction discarded because of previous errors.")
            );
            assert_eq!(h.run(&["EXISTS", "foo1", "foo2"]), Frame::Integer(0));
            assert_eq!(h.run(&["PING"]), Frame::Simple("PONG".into()));
        }
        assert_eq!(h.run(&["MULTI"]), ok());
        assert_eq!(
            h.run(&["SAVE"]),
            err("ERR Command not allowed inside a transaction")
        );
        assert!(matches!(h.run(&["EXEC"]), Frame::Error(e) if e.starts_with("EXECABORT")));
    }

    // Goal: a runtime error is its own command's reply; the other writes stand.
    #[test]
    fn runtime_errors_affect_only_their_command() {
        let mut h = Harness::new();
        h.run(&["MULTI"]);
        h.run(&["SET", "a", "1"]);
        h.run(&["LPUSH", "a", "x"]);
        h.run(&["INCR", "a"]);
        h.run(&["SET", "b", "v"]);
        h.run(&["INCR", "b"]);
        let Frame::Array(replies) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert_eq!(replies[0], ok());
        assert!(matches!(&replies[1], Frame::Error(e) if e.starts_with("WRONGTYPE")));
        assert_eq!(replies[2], Frame::Integer(2));
        assert_eq!(replies[3], ok());
        assert_eq!(
            replies[4],
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(h.run(&["MGET", "a", "b"]), bulks(&["2", "v"]));
    }

    // Goal: inside EXEC every command sees the earlier writes of the same EXEC: point
    // reads, MGET, collections, and the scans (KEYS, SCAN, DBSIZE, FOREST.RANGE/COUNT/
    // DELRANGE, FLUSHDB); another client sees nothing of a queued transaction before EXEC.
    #[test]
    fn commands_see_earlier_writes_of_their_exec() {
        let mut h = Harness::new();
        h.run(&["SET", "old", "o"]);
        h.run(&["MULTI"]);
        for cmd in [
            &["SET", "k", "1"][..],
            &["INCR", "k"],
            &["GET", "k"],
            &["MGET", "k", "none"],
            &["RPUSH", "l", "a", "b"],
            &["LRANGE", "l", "0", "-1"],
            &["TYPE", "l"],
            &["EXISTS", "k", "l", "old"],
            &["DEL", "old"],
            &["KEYS", "*"],
            &["SCAN", "0", "COUNT", "100"],
            &["DBSIZE"],
            &["FOREST.RANGE", "-", "+"],
            &["FOREST.COUNT", "-", "+"],
            &["SET", "m", "2"],
            &["FOREST.DELRANGE", "[k", "[m"],
            &["DBSIZE"],
            &["DEL", "l"],
            &["KEYS", "*"],
        ] {
            assert_eq!(h.run(cmd), queued(), "{cmd:?}");
        }
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        assert_eq!(run_on(&h.shared, &mut other, &[b"GET", b"k"]), Frame::Null);
        let Frame::Array(r) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert_eq!(r[1], Frame::Integer(2));
        assert_eq!(r[2], bulk("2"));
        assert_eq!(r[3], Frame::Array(vec![bulk("2"), Frame::Null]));
        assert_eq!(r[4], Frame::Integer(2));
        assert_eq!(r[5], bulks(&["a", "b"]));
        assert_eq!(r[6], Frame::Simple("list".into()));
        assert_eq!(r[7], Frame::Integer(3));
        assert_eq!(r[8], Frame::Integer(1));
        assert_eq!(r[9], bulks(&["k", "l"]));
        assert!(matches!(&r[10], Frame::Array(a) if a[1] == bulks(&["k", "l"])));
        assert_eq!(r[11], Frame::Integer(2));
        assert_eq!(r[12], bulks(&["k", "2"]));
        assert_eq!(r[13], Frame::Integer(1));
        assert_eq!(r[15], Frame::Integer(2));
        assert_eq!(r[16], Frame::Integer(1));
        assert_eq!(r[17], Frame::Integer(1));
        assert_eq!(r[18], bulks(&[]));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(h.entries(), 0);
    }

    // Goal: the string and keyspace commands of issue 15 (GETRANGE, GETDEL, SETRANGE, BITCOUNT,
    // RENAME, COPY, OBJECT ENCODING, RANDOMKEY, LCS) read the earlier writes of their EXEC too.
    #[test]
    fn string_and_keyspace_commands_see_earlier_writes_of_their_exec() {
        let mut h = Harness::new();
        h.run(&["MULTI"]);
        for cmd in [
            &["SET", "k", "hello"][..],
            &["GETRANGE", "k", "0", "1"],
            &["SETRANGE", "k", "5", " world"],
            &["BITCOUNT", "k"],
            &["RENAME", "k", "r"],
            &["COPY", "r", "c"],
            &["OBJECT", "ENCODING", "c"],
            &["LCS", "r", "c", "LEN"],
            &["RANDOMKEY"],
            &["GETDEL", "c"],
            &["SADD", "s", "m"],
            &["RENAME", "s", "t"],
            &["TYPE", "t"],
            &["EXISTS", "s", "c"],
        ] {
            assert_eq!(h.run(cmd), queued(), "{cmd:?}");
        }
        let Frame::Array(r) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert_eq!(r[1], bulk("he"));
        assert_eq!(r[2], Frame::Integer(11));
        assert_eq!(r[3], Frame::Integer(45));
        assert_eq!(r[4], ok());
        assert_eq!(r[5], Frame::Integer(1));
        assert_eq!(r[6], bulk("embstr"));
        assert_eq!(r[7], Frame::Integer(11));
        assert!(
            matches!(&r[8], Frame::Bulk(k) if k == b"r" || k == b"c"),
            "{:?}",
            r[8]
        );
        assert_eq!(r[9], bulk("hello world"));
        assert_eq!(r[11], ok());
        assert_eq!(r[12], Frame::Simple("set".into()));
        assert_eq!(r[13], Frame::Integer(0));
        assert_eq!(h.run(&["GET", "r"]), bulk("hello world"));
        assert_eq!(h.run(&["SMEMBERS", "t"]), bulks(&["m"]));
    }

    // Goal: DBSIZE inside EXEC counts keys, not the deadline entries the EXEC staged (EXPIRE
    // adds one, PERSIST removes one). Method: DBSIZE after each inside one EXEC.
    #[test]
    fn dbsize_inside_exec_ignores_staged_deadlines() {
        let mut h = Harness::new();
        h.run(&["SET", "old", "1", "EX", "100"]);
        h.run(&["MULTI"]);
        for cmd in [
            &["SET", "a", "1"][..],
            &["EXPIRE", "a", "100"],
            &["DBSIZE"],
            &["PERSIST", "old"],
            &["DBSIZE"],
        ] {
            h.run(cmd);
        }
        let Frame::Array(r) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert_eq!(r[2], Frame::Integer(2));
        assert_eq!(r[4], Frame::Integer(2));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(2));
    }

    // Goal: FLUSHDB inside EXEC removes strings and collections written earlier in it.
    #[test]
    fn flushdb_inside_exec() {
        let mut h = Harness::new();
        h.run(&["SADD", "s", "x"]);
        h.run(&["MULTI"]);
        h.run(&["SET", "a", "1"]);
        h.run(&["HSET", "h", "f", "v"]);
        h.run(&["FLUSHDB"]);
        h.run(&["SET", "after", "1"]);
        h.run(&["DBSIZE"]);
        let Frame::Array(r) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert_eq!(r[4], Frame::Integer(1));
        assert_eq!(h.run(&["KEYS", "*"]), bulks(&["after"]));
        assert_eq!(h.entries(), 1);
    }

    // Goal: WATCH as Redis: a write by another client (SET, DEL, a collection write,
    // FLUSHDB of an existing key) makes EXEC answer null (RESP2 *-1, RESP3 null); no write,
    // DEL of a missing key, FLUSHDB without the key, UNWATCH, or the end of an EXEC leave
    // it alone.
    #[test]
    fn watch_aborts_exec_after_writes() {
        let mut h = Harness::new();
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        let mut watched_exec = |h: &mut Harness, write: &[&str]| {
            h.run(&["WATCH", "x", "l"]);
            if !write.is_empty() {
                let argv: Vec<&[u8]> = write.iter().map(|a| a.as_bytes()).collect();
                run_on(&h.shared, &mut other, &argv);
            }
            h.run(&["MULTI"]);
            h.run(&["PING"]);
            h.run(&["EXEC"])
        };
        let pong = Frame::Array(vec![Frame::Simple("PONG".into())]);
        assert_eq!(watched_exec(&mut h, &[]), pong);
        assert_eq!(watched_exec(&mut h, &["SET", "x", "1"]), Frame::NullArray);
        assert_eq!(watched_exec(&mut h, &["SET", "y", "1"]), pong);
        assert_eq!(watched_exec(&mut h, &["DEL", "x"]), Frame::NullArray);
        assert_eq!(
            watched_exec(&mut h, &["DEL", "x"]),
            pong,
            "nothing to delete"
        );
        assert_eq!(watched_exec(&mut h, &["RPUSH", "l", "a"]), Frame::NullArray);
        assert_eq!(watched_exec(&mut h, &["LPOP", "l"]), Frame::NullArray);
        assert_eq!(watched_exec(&mut h, &["FLUSHDB"]), pong, "x does not exist");
        h.run(&["SET", "x", "1"]);
        assert_eq!(watched_exec(&mut h, &["FLUSHDB"]), Frame::NullArray);
        h.run(&["SET", "x", "1"]);
        assert_eq!(
            watched_exec(&mut h, &["MSET", "y", "1", "x", "2"]),
            Frame::NullArray
        );
        assert_eq!(watched_exec(&mut h, &["INCR", "x"]), Frame::NullArray);
        assert_eq!(
            watched_exec(&mut h, &["FOREST.DELRANGE", "[x", "[x"]),
            Frame::NullArray
        );
        assert!(h.shared.watches.is_empty(), "EXEC unwatches");
        // UNWATCH and DISCARD forget the dirty flag.
        h.run(&["WATCH", "x"]);
        h.run(&["SET", "x", "1"]);
        h.run(&["UNWATCH"]);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(h.run(&["EXEC"]), pong);
        h.run(&["WATCH", "x"]);
        h.run(&["SET", "x", "2"]);
        h.run(&["MULTI"]);
        h.run(&["DISCARD"]);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(h.run(&["EXEC"]), pong);
        // RESP3's null; the transaction's own writes did not happen.
        h.run(&["HELLO", "3"]);
        h.run(&["WATCH", "x"]);
        h.run(&["SET", "x", "3"]);
        h.run(&["MULTI"]);
        h.run(&["SET", "x", "never"]);
        assert_eq!(h.run(&["EXEC"]), Frame::Null);
        assert_eq!(h.client.protocol, Protocol::Resp3);
        assert_eq!(h.run(&["GET", "x"]), bulk("3"));
    }

    // Goal: a client's watches go when it goes (no registry growth).
    #[test]
    fn dropped_client_unwatches() {
        let h = Harness::new();
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        run_on(&h.shared, &mut other, &[b"WATCH", b"a", b"b"]);
        assert_eq!(h.shared.watches.len(), 2);
        drop(other);
        assert!(h.shared.watches.is_empty());
    }

    // Goal: an EXEC's writes survive a restart, together.
    #[test]
    fn exec_survives_a_restart() {
        let mut h = Harness::new();
        h.run(&["MULTI"]);
        h.run(&["SET", "a", "1"]);
        h.run(&["SADD", "s", "m"]);
        h.run(&["EXEC"]);
        let mut h = h.restart();
        assert_eq!(h.run(&["GET", "a"]), bulk("1"));
        assert_eq!(h.run(&["SMEMBERS", "s"]), bulks(&["m"]));
    }

    // Goal: transactions on disjoint keys take no global lock: an EXEC runs while another
    // holds the stripe of an unrelated key (as a running EXEC or a write would).
    // Method: hold "a"'s stripe; EXEC on a key of another stripe on a second thread must
    // finish (the bound on the wait is only hit if it hangs).
    #[test]
    fn disjoint_transactions_do_not_wait_for_each_other() {
        let h = Harness::new();
        let collections = &h.shared.collections;
        let other = (0..)
            .map(|i| format!("b{i}"))
            .find(|k| {
                collections
                    .lock_many([&b"a"[..], k.as_bytes()].into_iter())
                    .len()
                    == 2
            })
            .expect("a key on another stripe");
        let held = collections.lock(b"a");
        std::thread::scope(|s| {
            let (done, finished) = std::sync::mpsc::channel();
            let shared = &h.shared;
            let other = other.as_bytes();
            s.spawn(move || {
                let mut client = shared.new_client("t".into(), "u".into(), None);
                run_on(shared, &mut client, &[b"MULTI"]);
                run_on(shared, &mut client, &[b"SET", other, b"1"]);
                let reply = run_on(shared, &mut client, &[b"EXEC"]);
                done.send(reply).expect("send");
            });
            let reply = finished
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("EXEC on another stripe finished while 'a' was held");
            assert_eq!(reply, Frame::Array(vec![ok()]));
        });
        drop(held);
    }

    // Goal: expiry commands inside EXEC are part of its one batch: the map of deadlines does
    // not change before EXEC (another client sees no TTL while the commands are queued and
    // run), later commands of the same EXEC see earlier deadlines (TTL after EXPIRE, SET EX
    // then PERSIST, GETEX), and after EXEC every client sees them.
    // Method: run them in one EXEC, read TTL from a second client before and after.
    #[test]
    fn expiry_commands_inside_exec_share_its_batch() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        let mut other = h.shared.new_client("b".into(), "c".into(), None);
        h.run(&["SET", "a", "1"]);
        h.run(&["MULTI"]);
        for command in [
            &["EXPIRE", "a", "100"][..],
            &["TTL", "a"],
            &["SET", "b", "2", "EX", "50"],
            &["PTTL", "b"],
            &["PERSIST", "b"],
            &["TTL", "b"],
            &["GETEX", "a", "EX", "70"],
            &["TTL", "a"],
        ] {
            assert_eq!(h.run(command), Frame::Simple("QUEUED".into()));
        }
        assert_eq!(
            run_on(&h.shared, &mut other, &[b"TTL", b"a"]),
            Frame::Integer(-1)
        );
        assert_eq!(h.shared.expires.count(), 0, "nothing staged before EXEC");
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Integer(100),
                Frame::ok(),
                Frame::Integer(50_000),
                Frame::Integer(1),
                Frame::Integer(-1),
                bulk("1"),
                Frame::Integer(70),
            ])
        );
        assert_eq!(
            run_on(&h.shared, &mut other, &[b"TTL", b"a"]),
            Frame::Integer(70)
        );
        assert_eq!(h.run(&["TTL", "b"]), Frame::Integer(-1));
        assert_eq!(h.shared.expires.count(), 1);
        // An expired key inside EXEC: gone for the rest of the transaction.
        h.run(&["SET", "c", "3", "PX", "10"]);
        h.shared.expires.advance_clock_ms(20);
        h.run(&["MULTI"]);
        h.run(&["GET", "c"]);
        h.run(&["EXISTS", "c"]);
        h.run(&["SETNX", "c", "4"]);
        h.run(&["TTL", "c"]);
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![
                Frame::Null,
                Frame::Integer(0),
                Frame::Integer(1),
                Frame::Integer(-1)
            ])
        );
        assert_eq!(h.run(&["GET", "c"]), bulk("4"));
    }

    // Goal: Redis's isWatchedKeyExpired: a key live at WATCH whose deadline passed by EXEC
    // counts as touched even if nothing deleted it; a key already expired at WATCH does not;
    // the active expiry task's deletion touches watchers.
    // Method: WATCH, move the clock, EXEC; and once with an expire cycle in between.
    #[test]
    fn watched_key_that_expires_aborts_exec() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["SET", "k", "v", "PX", "100"]);
        h.run(&["WATCH", "k"]);
        h.shared.expires.advance_clock_ms(200);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(h.run(&["EXEC"]), Frame::NullArray, "expired since WATCH");
        // Already due at WATCH: not a change.
        h.run(&["WATCH", "k"]);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![Frame::Simple("PONG".into())])
        );
        // Deleted by the active task between WATCH and EXEC.
        h.run(&["SET", "j", "v", "PX", "100"]);
        h.run(&["WATCH", "j"]);
        h.shared.expires.advance_clock_ms(200);
        assert!(super::super::expire_cycle(&h.shared, 16) >= 1);
        h.run(&["MULTI"]);
        h.run(&["PING"]);
        assert_eq!(h.run(&["EXEC"]), Frame::NullArray, "deleted as expired");
    }
}
