//! Commands: one file per command or small family, a table of their specs, and [`execute`],
//! which runs one command of a batch over the store without any socket (testable alone).
//!
//! Every write goes through the connection's [`Batch`], so the batch's writes share one
//! durability wait (masstree.md §5); a command that wrote sets [`Ctx::wrote`] so that the
//! connection can turn its reply into an error if that wait fails. Reads go straight to
//! [`forest_store::Store::get`] and `scan`.
//!
//! Checks in Redis's order: unknown command, arity, then authentication.
//!
//! A handler returns a [`Reply`]: `Err` is the error reply, so handlers and their parse
//! helpers stop at the first error with `?`; [`execute`] sends either side alike.

mod asof;
mod bits;
pub mod blocking;
mod client;
mod coll;
mod command;
mod config;
pub use config::tuning_defaults;
mod connection;
mod dbsize;
mod del;
mod exists;
pub mod expire;
mod float80;
mod flush;
pub(crate) mod get;
mod hash;
mod incr;
mod info;
mod keys;
mod keyspace;
mod list;
mod lmove;
mod mget;
pub mod multi;
mod object;
pub mod overlay;
pub mod pubsub;
mod randomkey;
mod range;
mod rename;
mod sample;
mod save;
mod scan;
pub mod script;
mod set;
mod setops;
mod sets;
mod shutdown;
pub(crate) mod stream;
mod stream_group;
mod strings;
mod strings_scan;
mod strlen;
mod time;
mod zlex;
mod zset;
mod zsetops;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use forest_core::{check_entry, Error};
use forest_store::Batch;

use crate::frame::{Frame, Protocol};
pub(crate) use crate::parse::is_word;
use crate::server::{ClientInfo, Shared};

pub use command::COMMAND_SPECS;
pub use dbsize::key_count;
pub use expire::expire_cycle;

/// A command's reply: `Err` holds an error reply (what `?` returns early with), which
/// [`execute`] sends as it sends `Ok`.
pub type Reply = Result<Frame, Frame>;

/// A command's handler.
pub type Handler = fn(&mut Ctx<'_, '_>, &[&[u8]]) -> Reply;

/// What Redis's COMMAND INFO and COMMAND DOCS say about a command, and its handler.
#[derive(Debug)]
pub struct Spec {
    /// Lower case, as Redis names commands in errors.
    pub name: &'static str,
    /// Redis's convention: n = exactly n arguments (name included), -n = at least n.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    /// The arguments after the name, in Redis's usage syntax (`key [NX|XX] [GET]`).
    pub usage: &'static str,
    pub run: Handler,
}

/// What the connection must do after a command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum After {
    #[default]
    Continue,
    /// Send the replies so far, then close (QUIT).
    Close,
    /// Close without a reply for this command and stop the server (SHUTDOWN).
    Shutdown { save: bool },
}

/// A connection's own state.
#[derive(Debug)]
pub struct Client {
    pub info: std::sync::Arc<ClientInfo>,
    pub protocol: Protocol,
    pub authenticated: bool,
    /// MULTI's queue and WATCH's keys ([`multi`]).
    pub txn: multi::TxnState,
    /// Pub/Sub subscriptions and the mailbox of their messages ([`crate::pubsub`]).
    pub pubsub: crate::pubsub::Subscriber,
    /// The blocking command waiting, and the keys the running command made ready
    /// ([`crate::blocking`]).
    pub blocking: crate::blocking::ClientBlock,
}

impl Client {
    /// The connection's subscriptions and transaction as CLIENT LIST shows them.
    pub fn state(&self) -> crate::server::ClientState {
        let (sub, psub) = self.pubsub.counts();
        let (watch, dirty) = self.txn.watching();
        crate::server::ClientState {
            sub,
            psub,
            multi: self.txn.queued(),
            watch,
            dirty,
            blocked: self.blocking.is_blocked(),
        }
    }
}

/// Everything a command sees.
pub struct Ctx<'a, 's> {
    pub shared: &'a Shared,
    pub client: &'a mut Client,
    pub batch: &'a mut Batch<'s>,
    /// Set by a command that wrote through the batch.
    pub wrote: bool,
    pub after: After,
    /// Reusable value buffers.
    pub buffers: &'a mut Buffers,
    /// The writes of the collection command running, decided but not yet applied: they go
    /// to the store as one atomic batch when it finishes (issue 12), so a crash keeps all
    /// of a command's members and meta entry or none, and no reader sees part of it.
    pub unit: Option<Unit>,
    /// The command's "now" for deadlines, read from the clock once, at its first use
    /// ([`Self::now_ms`]), as Redis's command-time snapshot: a deadline passing while the
    /// command runs must not make a key it has seen live absent (review rev-lists F2).
    pub now: std::cell::Cell<Option<u64>>,
}

/// A command's decided writes (see [`Ctx::unit`]) and the state they leave, by key.
#[derive(Clone, Debug, Default)]
pub struct Unit {
    /// The final state of each key written; [`Ctx::end_unit`] writes it as one batch (one
    /// op per key, as EXEC's), so a decided write is copied once.
    overlay: overlay::Overlay,
    /// EXEC's unit: it spans every queued command; only EXEC writes it ([`multi`]).
    txn: bool,
    /// Deadline changes decided with the writes, in order: the map of deadlines takes them
    /// once the unit's batch is visible ([`expire::apply_deadlines`]), never before, nor when
    /// the batch fails; the unit's own reads see them first ([`Ctx::deadline`]).
    pub(crate) deadlines: Vec<expire::DeadlineChange>,
    /// Set once a removal is decided that [`Ctx::decide_remove_present`] did not vouch for
    /// (read present in the store, the key untouched by the unit before). Until then every
    /// removal in the overlay is of a key the store holds, and [`Ctx::end_unit`] writes them
    /// as [`forest_store::BatchOp::RemovePresent`], which the store applies without reading
    /// the key again (a pop's unit: one removal and its type entry). EXEC writes plain
    /// removals.
    plain_removal: bool,
}

impl Unit {
    /// The state the decided writes leave, by key (None: removed).
    pub fn overlay(&self) -> &overlay::Overlay {
        &self.overlay
    }
}

/// Pooled bytes per connection: enough for a pipeline of small values, small enough for
/// thousands of connections.
const POOL_BYTES_MAX: usize = 256 * 1024;

/// The op vector a connection keeps between units: enough for the small units the pool is
/// for (a member and its type entry); a larger one is dropped, not kept for the connection's
/// life (review rev-lists13 F2: one SADD of 20 000 members left 1.1 MB per connection).
const UNIT_OPS_KEPT: usize = 64;

/// What a pooled buffer costs the pool: its bytes and its `Vec` header in the free list.
fn pooled_cost(buffer: &Vec<u8>) -> usize {
    buffer.capacity() + std::mem::size_of::<Vec<u8>>()
}

/// A connection's reusable value buffers, so that a GET allocates nothing once warm: a
/// reply's buffer returns here after it is encoded.
#[derive(Debug, Default)]
pub struct Buffers {
    free: Vec<Vec<u8>>,
    free_bytes: usize,
    /// For reads whose value is not returned (EXISTS, STRLEN, TYPE).
    pub scratch: Vec<u8>,
    /// The answers of the batch's run of GETs read together (issue 15).
    pub(crate) prereads: get::PreReads,
    /// The ops of the last unit written ([`Ctx::end_unit`]), emptied: their keys and values
    /// went back to `free`, so a collection command's unit allocates nothing once warm.
    unit_ops: Vec<forest_store::BatchOp>,
    /// The last unit's emptied overlay vector ([`overlay::Overlay`]), for the next unit.
    overlay_vec: Option<Vec<overlay::Entry>>,
}

impl Buffers {
    /// A pooled buffer holding a copy of `bytes`.
    fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buffer = self.take();
        buffer.extend_from_slice(bytes);
        buffer
    }

    /// A pooled buffer holding `parts` one after another (a key built of a prefix and a
    /// suffix).
    fn concat(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        let mut buffer = self.take();
        for part in parts {
            buffer.extend_from_slice(part);
        }
        buffer
    }

    fn take(&mut self) -> Vec<u8> {
        match self.free.pop() {
            Some(buffer) => {
                self.free_bytes -= pooled_cost(&buffer);
                buffer
            }
            None => Vec::new(),
        }
    }

    fn give(&mut self, mut buffer: Vec<u8>) {
        if buffer.capacity() > 0 && self.free_bytes + pooled_cost(&buffer) <= POOL_BYTES_MAX {
            buffer.clear();
            self.free_bytes += pooled_cost(&buffer);
            self.free.push(buffer);
        }
    }

    /// Takes back the buffers of an encoded reply (bulk strings, flat arrays of them).
    pub fn recycle(&mut self, reply: Frame) {
        match reply {
            Frame::Bulk(buffer) => self.give(buffer),
            Frame::Array(items) => {
                for item in items {
                    if let Frame::Bulk(buffer) = item {
                        self.give(buffer);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Ctx<'_, '_> {
    /// Starts a unit (see [`Ctx::unit`]); a unit already open goes on.
    pub fn begin_unit(&mut self) {
        if self.unit.is_none() {
            let small = self.buffers.overlay_vec.take().unwrap_or_default();
            self.unit = Some(Unit {
                overlay: overlay::Overlay::with_vec(small),
                ..Unit::default()
            });
        }
    }

    /// Drops the open unit's decided writes, unless it is EXEC's (which goes on).
    pub fn drop_unit(&mut self) {
        if !self.unit.as_ref().is_some_and(|u| u.txn) {
            self.unit = None;
        }
    }

    /// Refuses a write when a store read of the running command failed ([`CommandReads`]).
    pub(crate) fn reads_ok(&self) -> Result<(), Frame> {
        read_failure().map_or(Ok(()), Err)
    }

    /// Writes the open unit, if any, as one atomic batch (EXEC's unit waits for EXEC).
    pub fn end_unit(&mut self) -> Result<(), Frame> {
        if self.unit.as_ref().is_some_and(|u| u.txn) {
            return Ok(());
        }
        if let Err(failed) = self.reads_ok() {
            self.unit = None;
            return Err(failed);
        }
        let Some(unit) = self.unit.take() else {
            return Ok(());
        };
        // A deadline change may move a string between its two places: readers that miss
        // it meanwhile read again (`Expires::read_string`).
        let Unit {
            mut overlay,
            deadlines,
            plain_removal,
            ..
        } = unit;
        let moves = !deadlines.is_empty();
        if moves {
            self.shared.expires.begin_move();
        }
        let mut ops = std::mem::take(&mut self.buffers.unit_ops);
        overlay.drain(|key, value| {
            ops.push(match value {
                Some(value) => forest_store::BatchOp::Upsert(key, value),
                None if !plain_removal => forest_store::BatchOp::RemovePresent(key),
                None => forest_store::BatchOp::Remove(key),
            })
        });
        self.buffers.overlay_vec = overlay.into_vec();
        let written = match ops.is_empty() {
            true => Ok(()),
            false => {
                self.wrote = true;
                self.batch.write_ops(&ops)
            }
        };
        if let Err(e) = written {
            if moves {
                self.shared.expires.end_move();
            }
            self.recycle_ops(ops);
            return Err(store_error(&e));
        }
        // Once the writes are visible, still under the command's stripe lock: the deadlines
        // (`expiry`'s invariants), then the watchers (crate::watch).
        expire::apply_deadlines(self.shared, &deadlines);
        if moves {
            self.shared.expires.end_move();
        }
        for op in &ops {
            self.shared.watches.touched_store_key(op.key());
        }
        self.recycle_ops(ops);
        Ok(())
    }

    /// Gives a written unit's keys and values back to the pool and keeps its emptied vector
    /// for the next unit.
    fn recycle_ops(&mut self, mut ops: Vec<forest_store::BatchOp>) {
        for op in ops.drain(..) {
            match op {
                forest_store::BatchOp::Insert(key, value)
                | forest_store::BatchOp::Upsert(key, value)
                | forest_store::BatchOp::Update(key, value) => {
                    self.buffers.give(key);
                    self.buffers.give(value);
                }
                forest_store::BatchOp::Remove(key) | forest_store::BatchOp::RemovePresent(key) => {
                    self.buffers.give(key)
                }
            }
        }
        if ops.capacity() <= UNIT_OPS_KEPT {
            self.buffers.unit_ops = ops;
        }
    }

    /// The deadline of user key `user` as the running command sees it: the open unit's
    /// decided changes first, then the map.
    pub fn deadline(&self, user: &[u8]) -> Option<u64> {
        if let Some(unit) = &self.unit {
            // A flush (FLUSHDB inside EXEC) hides every deadline decided before it.
            if let Some(change) = unit
                .deadlines
                .iter()
                .rev()
                .find(|c| c.flush || c.user == user)
            {
                return change.new;
            }
        }
        self.shared.expires.deadline(user)
    }

    /// The command's now in milliseconds since the Unix epoch ([`Self::now`]): the clock's
    /// first reading in this command, whatever it reads later.
    pub fn now_ms(&self) -> u64 {
        match self.now.get() {
            Some(now) => now,
            None => {
                let now = self.shared.expires.now_ms();
                self.now.set(Some(now));
                now
            }
        }
    }

    /// Whether `user`'s deadline (as [`Self::deadline`]) is at or before the command's now.
    #[inline]
    pub fn is_due(&self, user: &[u8]) -> bool {
        let pending = self.unit.as_ref().is_some_and(|u| !u.deadlines.is_empty());
        if !pending && !self.shared.expires.any() {
            return false;
        }
        self.deadline(user).is_some_and(|d| d <= self.now_ms())
    }

    /// [`crate::expiry::Expires::hides`] as the running command sees deadlines.
    #[inline]
    pub fn hides(&self, key: &[u8]) -> bool {
        match key {
            [crate::collection::RESERVED_BYTE, crate::collection::TYPE_TAG, user @ ..] => {
                self.is_due(user)
            }
            [crate::collection::RESERVED_BYTE, ..] => false,
            user => self.is_due(user),
        }
    }

    /// The value of `key` as the running command sees it (its own decided writes first), or
    /// none if its deadline passed. A string's deadline is in its value where it has one
    /// (`expiry`'s layout), so one store read answers both.
    pub fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if self.unit.is_none() && !is_reserved(key) {
            let expires = &self.shared.expires;
            return match expires.read_string(&self.shared.store, key, out) {
                Some(Some(deadline)) => deadline > self.now_ms(),
                Some(None) => true,
                None => false,
            };
        }
        !self.is_due(key) && self.read_raw(key, out)
    }

    /// [`Self::read`] blind to deadlines: what a write replaces (writes purge a due key
    /// first, `expire::purge_due`, and that deletion reads the key it removes). A string is
    /// read from where it lives: its raw key, or `FF 'x'` with its deadline stripped.
    pub(crate) fn read_raw(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if is_reserved(key) {
            return self.read_at(key, out);
        }
        let Some(overlay) = self
            .unit
            .as_ref()
            .map(|u| &u.overlay)
            .filter(|o| !o.is_empty())
        else {
            return self
                .shared
                .expires
                .read_string(&self.shared.store, key, out)
                .is_some();
        };
        let place = crate::expiry::string_key(key);
        let (raw, timed) = (overlay.get(key), overlay.get(&place));
        out.clear();
        if let Some(Some(v)) = raw {
            out.extend_from_slice(v);
            return true;
        }
        if let Some(Some(v)) = timed {
            out.extend_from_slice(v);
            return crate::expiry::strip_deadline(out).is_some();
        }
        let store = &self.shared.store;
        match (raw, timed) {
            (None, None) => self.shared.expires.read_string(store, key, out).is_some(),
            (None, Some(_)) => store.get(key, out),
            (Some(_), None) => {
                store.get(&place, out) && crate::expiry::strip_deadline(out).is_some()
            }
            (Some(_), Some(_)) => false,
        }
    }

    /// The entry at store key `key` exactly (no string's place is looked up), as the running
    /// command sees it.
    pub(crate) fn read_at(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if let Some(state) = self.unit.as_ref().and_then(|u| u.overlay.get(key)) {
            out.clear();
            return match state {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            };
        }
        self.shared.store.get(key, out)
    }

    /// Where string `key` lives as the running command sees it, and its deadline: its raw
    /// key (None) or `FF 'x'` (Some). None for a reserved key, which is its own place.
    fn place_of(&self, key: &[u8]) -> Option<(Vec<u8>, u64)> {
        if is_reserved(key) {
            return None;
        }
        self.deadline(key)
            .map(|d| (crate::expiry::string_key(key), d))
    }

    /// Whether string `key` is present and not expired, as the running command sees it (its
    /// unit's writes and deadlines first); its value is left in `buffers.scratch`.
    pub fn string_present(&mut self, key: &[u8]) -> bool {
        self.present(key)
    }

    /// Whether `key` is present and not expired, as the running command sees it; its value
    /// is left in `buffers.scratch`.
    pub fn present(&mut self, key: &[u8]) -> bool {
        let mut scratch = std::mem::take(&mut self.buffers.scratch);
        let present = self.read(key, &mut scratch);
        self.buffers.scratch = scratch;
        present
    }

    /// [`Self::present`] blind to deadlines (see [`Self::read_raw`]).
    pub(crate) fn present_raw(&mut self, key: &[u8]) -> bool {
        let mut scratch = std::mem::take(&mut self.buffers.scratch);
        let present = self.read_raw(key, &mut scratch);
        self.buffers.scratch = scratch;
        present
    }

    /// Whether store key `key` holds an entry, as the running command sees it.
    pub(crate) fn present_at(&mut self, key: &[u8]) -> bool {
        let mut scratch = std::mem::take(&mut self.buffers.scratch);
        let present = self.read_at(key, &mut scratch);
        self.buffers.scratch = scratch;
        present
    }

    /// The write hook of blocking commands: a collection's type entry was written (under
    /// its stripe lock), so a client waiting on it is woken once this command is done
    /// ([`crate::blocking`]). One atomic load while nobody is blocked.
    /// It is also where the meta cache forgets the entry (`crate::meta_cache`): every write
    /// of a type key passes here.
    fn touched_type_entry(&mut self, key: &[u8]) {
        if let [crate::collection::RESERVED_BYTE, crate::collection::TYPE_TAG, user @ ..] = key {
            self.shared.collections.forget_meta(user);
        }
        if let Some(user) = self.shared.blocking.waits_on_store_key(key) {
            self.client.blocking.note(user);
        }
    }

    /// Forgets the cached type entry a write outside a unit is about to change, before it
    /// is visible (`crate::meta_cache`: the cache is the store's value or unknown).
    fn forget_type_entry(&self, key: &[u8]) {
        if let [crate::collection::RESERVED_BYTE, crate::collection::TYPE_TAG, user @ ..] = key {
            self.shared.collections.forget_meta(user);
        }
    }

    /// Records a decided write in the open unit.
    fn decide(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.touched_type_entry(key);
        let unit = self.unit.as_mut().expect("a unit is open");
        // Pooled copies: `end_unit` gives them back once written.
        let value = value.map(|v| self.buffers.copy_of(v));
        unit.plain_removal |= value.is_none();
        match unit.overlay.get_mut(key) {
            Some(state) => {
                if let Some(old) = std::mem::replace(state, value) {
                    self.buffers.give(old);
                }
            }
            None => {
                let key = self.buffers.copy_of(key);
                unit.overlay.insert(key, value);
            }
        }
    }

    /// [`Self::decide`] of a key and value the caller built: kept, not copied.
    fn decide_owned(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.touched_type_entry(&key);
        let unit = self.unit.as_mut().expect("a unit is open");
        unit.plain_removal |= value.is_none();
        unit.overlay.insert(key, value);
    }

    /// [`Self::decide_owned`] of the removal of `key`, which the running command has just read
    /// present: if it read it in the store (its unit had not touched it), the store may
    /// remove it without reading it again ([`Unit::plain_removal`]).
    fn decide_remove_present(&mut self, key: Vec<u8>) {
        self.touched_type_entry(&key);
        let unit = self.unit.as_mut().expect("a unit is open");
        if let Some(old) = unit.overlay.insert(key, None) {
            unit.plain_removal = true;
            if let Some(old) = old {
                self.buffers.give(old);
            }
        }
    }

    /// Sets `key` to `value` through the batch; a string with a deadline at its place,
    /// keeping the deadline.
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<(), Frame> {
        match self.place_of(key) {
            Some((place, d)) => self.upsert_at(&place, &crate::expiry::encode_string(d, value)),
            None => self.upsert_at(key, value),
        }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
        match self.place_of(key) {
            Some((place, d)) => self.insert_at(&place, &crate::expiry::encode_string(d, value)),
            None => self.insert_at(key, value),
        }
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
        match self.place_of(key) {
            Some((place, d)) => self.update_at(&place, &crate::expiry::encode_string(d, value)),
            None => self.update_at(key, value),
        }
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool, Frame> {
        match self.place_of(key) {
            Some((place, _)) => self.remove_at(&place),
            None => self.remove_at(key),
        }
    }

    /// Sets store key `key` exactly (see [`Self::read_at`]).
    pub(crate) fn upsert_at(&mut self, key: &[u8], value: &[u8]) -> Result<(), Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            check_entry(key, value).map_err(|e| store_error(&e))?;
            self.decide(key, Some(value));
            return Ok(());
        }
        self.forget_type_entry(key);
        self.wrote = true;
        self.batch.upsert(key, value).map_err(|e| store_error(&e))?;
        self.shared.watches.touched_store_key(key);
        self.touched_type_entry(key);
        Ok(())
    }

    fn insert_at(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            check_entry(key, value).map_err(|e| store_error(&e))?;
            if self.present_at(key) {
                return Ok(false);
            }
            self.decide(key, Some(value));
            return Ok(true);
        }
        self.forget_type_entry(key);
        self.wrote = true;
        let changed = self.batch.insert(key, value).map_err(|e| store_error(&e))?;
        if changed {
            self.shared.watches.touched_store_key(key);
            self.touched_type_entry(key);
        }
        Ok(changed)
    }

    fn update_at(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            check_entry(key, value).map_err(|e| store_error(&e))?;
            if !self.present_at(key) {
                return Ok(false);
            }
            self.decide(key, Some(value));
            return Ok(true);
        }
        self.forget_type_entry(key);
        self.wrote = true;
        let changed = self.batch.update(key, value).map_err(|e| store_error(&e))?;
        if changed {
            self.shared.watches.touched_store_key(key);
            self.touched_type_entry(key);
        }
        Ok(changed)
    }

    /// Removes store key `key` exactly (see [`Self::read_at`]).
    pub(crate) fn remove_at(&mut self, key: &[u8]) -> Result<bool, Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            if !self.present_at(key) {
                return Ok(false);
            }
            self.decide(key, None);
            return Ok(true);
        }
        self.forget_type_entry(key);
        self.wrote = true;
        let changed = self.batch.remove(key).map_err(|e| store_error(&e))?;
        if changed {
            self.shared.watches.touched_store_key(key);
            self.touched_type_entry(key);
        }
        Ok(changed)
    }

    /// Makes the reply wait until what was written under `key`'s stripe is durable (a reply
    /// decided from a read, as MSETNX's 0, or an absent collection's answer). Waits only if
    /// that write is not yet durable, so a read of settled data costs no durability wait.
    pub(crate) fn observe(&mut self, key: &[u8]) {
        if self.batch.observe(key) {
            self.wrote = true;
        }
    }

    /// Applies `batch` atomically (after a crash too) within the pipeline's batch. Its
    /// string keys are written where they live, with their deadlines ([`Self::upsert`]).
    fn write(&mut self, batch: &forest_store::WriteBatch) -> Result<Vec<bool>, Frame> {
        if self.unit.is_some() {
            return multi::decide_batch(self, batch, true);
        }
        if !self.shared.expires.any() {
            return self.write_at(batch);
        }
        let mut placed = forest_store::WriteBatch::new();
        for op in batch.ops() {
            use forest_store::BatchOp;
            let place = self.place_of(op.key());
            let key = place.as_ref().map_or(op.key(), |(p, _)| p.as_slice());
            let value = |v: &[u8]| match &place {
                Some((_, d)) => crate::expiry::encode_string(*d, v),
                None => v.to_vec(),
            };
            match op {
                BatchOp::Upsert(_, v) => placed.put(key, &value(v)),
                BatchOp::Insert(_, v) => placed.insert(key, &value(v)),
                BatchOp::Update(_, v) => placed.update(key, &value(v)),
                BatchOp::Remove(_) | BatchOp::RemovePresent(_) => placed.remove(key),
            };
        }
        self.write_at(&placed)
    }

    /// [`Self::write`] of store keys exactly (see [`Self::read_at`]).
    pub(crate) fn write_at(
        &mut self,
        batch: &forest_store::WriteBatch,
    ) -> Result<Vec<bool>, Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            return multi::decide_batch(self, batch, false);
        }
        for op in batch.ops() {
            self.forget_type_entry(op.key());
        }
        self.wrote = true;
        let changed = self.batch.write(batch).map_err(|e| store_error(&e))?;
        for (op, changed) in batch.ops().iter().zip(&changed) {
            if *changed {
                self.shared.watches.touched_store_key(op.key());
                self.touched_type_entry(op.key());
            }
        }
        Ok(changed)
    }

    fn read_modify_write(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> forest_core::Result<forest_store::Rmw>,
    ) -> Result<Option<Vec<u8>>, Frame> {
        let Some((place, d)) = self.place_of(key) else {
            return self.read_modify_write_at(key, f);
        };
        let old = self.read_modify_write_at(&place, |stored| {
            let old = match stored {
                Some(stored) => Some(
                    crate::expiry::decode_string(stored)
                        .ok_or_else(|| {
                            Error::InvalidUse("a string's stored deadline is cut short".into())
                        })?
                        .1,
                ),
                None => None,
            };
            Ok(match f(old)? {
                forest_store::Rmw::Put(value) => {
                    forest_store::Rmw::Put(crate::expiry::encode_string(d, &value))
                }
                other => other,
            })
        })?;
        Ok(old.map(|mut stored| {
            crate::expiry::strip_deadline(&mut stored);
            stored
        }))
    }

    fn read_modify_write_at(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> forest_core::Result<forest_store::Rmw>,
    ) -> Result<Option<Vec<u8>>, Frame> {
        self.reads_ok()?;
        if self.unit.is_some() {
            let mut old = Vec::new();
            let old = self.read_at(key, &mut old).then_some(old);
            match f(old.as_deref()).map_err(|e| store_error(&e))? {
                forest_store::Rmw::Keep => {}
                forest_store::Rmw::Put(value) => {
                    check_entry(key, &value).map_err(|e| store_error(&e))?;
                    self.decide(key, Some(&value));
                }
                forest_store::Rmw::Remove => self.decide(key, None),
            }
            return Ok(old);
        }
        self.forget_type_entry(key);
        self.wrote = true;
        let mut changed = false;
        let old = self
            .batch
            .read_modify_write(key, |old| {
                let decided = f(old);
                changed = !matches!(decided, Ok(forest_store::Rmw::Keep));
                decided
            })
            .map_err(|e| store_error(&e))?;
        if changed {
            self.shared.watches.touched_store_key(key);
            self.touched_type_entry(key);
        }
        Ok(old)
    }

    /// The value of `key` as a reply: a bulk string or null.
    fn get_reply(&mut self, key: &[u8]) -> Frame {
        let mut value = self.buffers.take();
        if self.read(key, &mut value) {
            Frame::Bulk(value)
        } else {
            self.buffers.give(value);
            Frame::Null
        }
    }
}

/// Whether `key` is a reserved store key (a collection's, a deadline's), not a string's.
fn is_reserved(key: &[u8]) -> bool {
    key.first() == Some(&crate::collection::RESERVED_BYTE)
}

/// A store error as Redis-style error text (docs/PROTOCOL.md "Errors").
pub fn store_error(err: &Error) -> Frame {
    match err {
        Error::KeyTooLong { len, max } => {
            Frame::err(format!("key too long ({len} bytes; the limit is {max})"))
        }
        Error::ValueTooLong { len, max } => {
            Frame::err(format!("value too long ({len} bytes; the limit is {max})"))
        }
        other => Frame::err(other),
    }
}

/// `-ERR wrong number of arguments for 'name' command`.
pub fn wrong_arity(name: &str) -> Frame {
    Frame::err(format!("wrong number of arguments for '{name}' command"))
}

pub fn syntax_error() -> Frame {
    Frame::err("syntax error")
}

pub fn not_an_integer() -> Frame {
    Frame::err("value is not an integer or out of range")
}

/// An integer argument, or Redis's error.
pub fn int_arg(arg: &[u8]) -> Result<i64, Frame> {
    crate::parse::parse_int(arg).ok_or_else(not_an_integer)
}

/// `-ERR unknown subcommand 'x'. Try NAME HELP.`
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Frame {
    Frame::err(format!(
        "unknown subcommand '{}'. Try {} HELP.",
        printable(sub, 128),
        command.to_ascii_uppercase()
    ))
}

/// At most `max` bytes of `arg` as text fit for an error line.
fn printable(arg: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&arg[..arg.len().min(max)]).replace(['\r', '\n'], " ")
}

/// Redis's text for an unknown command, with up to 128 characters of its arguments.
fn unknown_command(argv: &[&[u8]]) -> Frame {
    let mut args = String::new();
    for arg in &argv[1..] {
        if args.len() >= 128 {
            break;
        }
        let room = 128 - args.len();
        args.push('\'');
        args.push_str(&printable(arg, room));
        args.push_str("' ");
    }
    Frame::err(format!(
        "unknown command '{}', with args beginning with: {args}",
        printable(argv[0], 128)
    ))
}

/// FNV-1a: command names are short and trusted to be few, so a keyed hash (SipHash, the
/// default) buys nothing here and costs a few percent of a GET.
struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// A byte key's length prefix: one round, not eight.
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0 ^ n as u64).wrapping_mul(0x0100_0000_01b3);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Keyed by the name's bytes: a lookup needs no UTF-8 check of what the client sent.
type SpecTable = HashMap<&'static [u8], &'static Spec, BuildHasherDefault<NameHasher>>;

fn table() -> &'static SpecTable {
    static TABLE: OnceLock<SpecTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        COMMAND_SPECS
            .iter()
            .map(|s| (s.name.as_bytes(), s))
            .collect()
    })
}

std::thread_local! {
    /// The command [`lookup`] found last on this thread: a pipeline mostly repeats one
    /// command, and comparing its name costs a fraction of the table's lowering, hashing
    /// and probing (issue 15, session 19).
    static LAST_SPEC: std::cell::Cell<Option<&'static Spec>> =
        const { std::cell::Cell::new(None) };
}

/// The spec of the command named `name` in any letter case.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    if let Some(spec) = LAST_SPEC.with(std::cell::Cell::get) {
        // Names are lower case and unique: the same answer as the table's.
        if spec.name.as_bytes().eq_ignore_ascii_case(name) {
            return Some(spec);
        }
    }
    // Names are short; longer input is no command.
    let mut lower = [0u8; 32];
    let dst = lower.get_mut(..name.len())?;
    for (d, s) in dst.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let spec = table().get(&dst[..]).copied()?;
    LAST_SPEC.with(|last| last.set(Some(spec)));
    Some(spec)
}

/// Commands allowed before AUTH.
fn allowed_before_auth(name: &str) -> bool {
    matches!(name, "auth" | "hello" | "quit")
}

/// Whether a key argument (by the spec's key positions) begins with the reserved byte.
fn has_reserved_key(spec: &Spec, argv: &[&[u8]]) -> bool {
    if spec.first_key <= 0 || spec.step <= 0 {
        return false;
    }
    let first = spec.first_key as usize;
    let last = if spec.last_key < 0 {
        argv.len()
            .saturating_sub(spec.last_key.unsigned_abs() as usize)
    } else {
        spec.last_key as usize
    };
    argv.iter()
        .take(last + 1)
        .skip(first)
        .step_by(spec.step as usize)
        .any(|key| key.first() == Some(&crate::collection::RESERVED_BYTE))
}

/// Runs one command (`argv[0]` is its name; `argv` is not empty): its reply, or its error.
pub fn execute(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Frame {
    let (Ok(reply) | Err(reply)) = dispatch(ctx, argv);
    // Once the command (a whole EXEC) is done: the clients waiting on the keys it made
    // ready, in the order it made them ready (crate::blocking).
    ctx.client.blocking.flush(&ctx.shared.blocking);
    reply
}

/// A handler that writes its reply straight into the connection's output, the bytes its
/// [`Frame`] would encode to in the connection's protocol (an array of bulk strings, or with
/// WITHSCORES of members and scores, which differ between RESP2 and RESP3), with no [`Frame`]
/// per element and no second copy. On `Err` it has written nothing.
pub(crate) type Encoder = fn(&mut Ctx<'_, '_>, &[&[u8]], &mut Vec<u8>) -> Result<(), Frame>;

/// The commands with an [`Encoder`], used only for a connection's top-level command: within
/// EXEC or a script a command's reply is a [`Frame`] inside another reply.
fn encoder(spec: &Spec) -> Option<Encoder> {
    match spec.name {
        "get" => Some(get::get_into),
        "forest.range" => Some(range::range_into),
        "lrange" => Some(list::lrange_into),
        "zrange" => Some(zset::zrange_into),
        "zrevrange" => Some(zset::zrevrange_into),
        "zrangebyscore" => Some(zset::zrangebyscore_into),
        "zrevrangebyscore" => Some(zset::zrevrangebyscore_into),
        "zrangebylex" => Some(zlex::zrangebylex_into),
        "zrevrangebylex" => Some(zlex::zrevrangebylex_into),
        _ => None,
    }
}

/// [`execute`] for a connection's top-level command, whose reply goes to `out` after the
/// replies before it: a command with an [`Encoder`] writes its reply into `out` and returns
/// None; any other returns its reply, for the caller to encode.
pub fn execute_into(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], out: &mut Vec<u8>) -> Option<Frame> {
    let reply = dispatch_into(ctx, argv, out);
    ctx.client.blocking.flush(&ctx.shared.blocking);
    match reply {
        Ok(reply) => reply,
        Err(reply) => Some(reply),
    }
}

/// [`dispatch`], a command with an [`Encoder`] writing into `out` (Ok(None)).
fn dispatch_into(
    ctx: &mut Ctx<'_, '_>,
    argv: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<Option<Frame>, Frame> {
    let spec = check(ctx, argv).map_err(|e| multi::reject(ctx, e))?;
    if let Some(reply) = multi::intercept(ctx, spec, argv) {
        return reply.map(Some);
    }
    let Some(encode) = encoder(spec) else {
        return run(ctx, spec, argv).map(Some);
    };
    if has_reserved_key(spec, argv) {
        return Err(coll::reserved_key());
    }
    let start = out.len();
    let reads = CommandReads::begin();
    let written = encode(ctx, argv, out);
    if let Some(failed) = reads.failed() {
        // As `run`: nothing of a command whose read failed is sent or written.
        out.truncate(start);
        ctx.drop_unit();
        return Err(failed);
    }
    // As `run`: a unit left open is written whatever the reply, and its error wins.
    let ended = ctx.end_unit();
    if written.is_err() || ended.is_err() {
        out.truncate(start);
    }
    ended?;
    written.map(|()| None)
}

/// The checks in Redis's order: the command's name, its arity, authentication.
fn check(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Result<&'static Spec, Frame> {
    let name = argv.first().ok_or_else(|| Frame::err("empty command"))?;
    let spec = lookup(name).ok_or_else(|| unknown_command(argv))?;
    let argc = argv.len() as i64;
    let arity = i64::from(spec.arity);
    if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Err(wrong_arity(spec.name));
    }
    if !ctx.client.authenticated && !allowed_before_auth(spec.name) {
        return Err(Frame::Error("NOAUTH Authentication required.".to_string()));
    }
    Ok(spec)
}

fn dispatch(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    // A command refused before it runs makes a transaction being queued fail at EXEC.
    let spec = check(ctx, argv).map_err(|e| multi::reject(ctx, e))?;
    if let Some(reply) = multi::intercept(ctx, spec, argv) {
        return reply;
    }
    run(ctx, spec, argv)
}

/// Runs a command whose name, arity and authentication were checked.
pub(crate) fn run(ctx: &mut Ctx<'_, '_>, spec: &'static Spec, argv: &[&[u8]]) -> Reply {
    if has_reserved_key(spec, argv) {
        return Err(coll::reserved_key());
    }
    let reads = CommandReads::begin();
    let reply = (spec.run)(ctx, argv);
    if let Some(failed) = reads.failed() {
        // A reply built on a read that failed is wrong, and so are writes decided from it.
        ctx.drop_unit();
        return Err(failed);
    }
    // Handlers write their units under their stripe locks (`coll::write`, SET); a unit
    // left open is still written here, whole, whatever the reply.
    ctx.end_unit()?;
    reply
}

std::thread_local! {
    /// The running command's mark in this thread's failed store reads ([`CommandReads`]).
    static COMMAND_READS: std::cell::Cell<Option<forest_store::ReadFailures>> =
        const { std::cell::Cell::new(None) };
}

/// A command's reads as a whole (review rev-lstore F3): a store read that could not load a
/// page (a bwtree on its LSS) answers "not found" and counts in the thread's
/// [`forest_store::ReadFailures`]; from the command's start on, its reply becomes the error
/// ([`Self::failed`]) and every write it tries is refused ([`Ctx::reads_ok`]), since a write
/// decided from a wrong "absent" is wrong too. Nested commands (EXEC's, a script's) mark
/// their own start and give the outer mark back when done.
pub(crate) struct CommandReads {
    outer: Option<forest_store::ReadFailures>,
}

impl CommandReads {
    /// Marks the start of a command on this thread.
    pub(crate) fn begin() -> Self {
        let mark = forest_store::ReadFailures::mark();
        Self {
            outer: COMMAND_READS.with(|c| c.replace(Some(mark))),
        }
    }

    /// The error reply if a store read of this command failed.
    pub(crate) fn failed(&self) -> Option<Frame> {
        read_failure()
    }
}

impl Drop for CommandReads {
    fn drop(&mut self) {
        COMMAND_READS.with(|c| c.set(self.outer));
    }
}

/// The error reply if a store read of the running command (on this thread) failed.
fn read_failure() -> Option<Frame> {
    let mark = COMMAND_READS.with(std::cell::Cell::get)?;
    mark.since().map(|e| storage_read_error(&e))
}

/// `-ERR storage: ...`: a store read could not load a page (the message names the segment
/// file, offset and page), so the command neither answers nor writes.
pub fn storage_read_error(message: &str) -> Frame {
    Frame::err(format!("storage: cannot read a page: {message}"))
}

#[cfg(test)]
pub(crate) mod testing {
    //! A store in a temporary directory and a client, to run commands without sockets.

    use super::*;
    use crate::server::{Config, Shared};
    use forest_store::{Durability, Store, StoreOptions};

    pub struct Harness {
        pub shared: Shared,
        pub client: Client,
        _dir: tempfile::TempDir,
    }

    impl Harness {
        pub fn new() -> Self {
            Self::with_config(|_| {})
        }

        pub fn with_config(edit: impl FnOnce(&mut Config)) -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut config = Config {
                dir: dir.path().to_path_buf(),
                durability: Durability::Periodic { interval_ms: 1000 },
                ..Config::default()
            };
            edit(&mut config);
            let store = Store::open_path(
                dir.path(),
                StoreOptions {
                    engine: config.engine.clone(),
                    durability: config.durability,
                    ..StoreOptions::default()
                },
            )
            .expect("open store");
            // As `Server::open`: a new store records the key layout.
            crate::expiry::layout::relayout(&store).expect("layout");
            let shared = Shared::new(store, config);
            let client = shared.new_client("127.0.0.1:1".into(), "127.0.0.1:6379".into(), None);
            Self {
                shared,
                client,
                _dir: dir,
            }
        }

        /// Runs one command as a batch of its own and returns its reply.
        pub fn run(&mut self, argv: &[&str]) -> Frame {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            self.run_bytes(&argv)
        }

        pub fn run_bytes(&mut self, argv: &[&[u8]]) -> Frame {
            run_on(&self.shared, &mut self.client, argv)
        }

        /// Runs one command as a connection's top-level command (`execute_into`: a command
        /// with an [`Encoder`] writes its reply's bytes) and returns the reply's bytes in the
        /// client's protocol.
        pub fn run_into(&mut self, argv: &[&str]) -> Vec<u8> {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            let protocol = self.client.protocol;
            let mut batch = self.shared.store.batch();
            let mut buffers = Buffers::default();
            let mut ctx = Ctx {
                shared: &self.shared,
                client: &mut self.client,
                batch: &mut batch,
                unit: None,
                wrote: false,
                after: After::Continue,
                buffers: &mut buffers,
                now: Default::default(),
            };
            let mut out = Vec::new();
            if let Some(reply) = execute_into(&mut ctx, &argv, &mut out) {
                reply.encode_to(protocol, &mut out);
            }
            batch.wait().expect("wait");
            out
        }

        /// The engine's entries, less the server's own (the key layout entry).
        pub fn entries(&self) -> u64 {
            let all = self.shared.store.stats().index.key_count;
            all - self.shared.collections.server_entries() as u64
        }

        /// Closes the store and opens it again over the same directory (a restart).
        pub fn restart(self) -> Self {
            let Harness {
                shared,
                client,
                _dir,
            } = self;
            let config = shared.config.clone();
            drop(client);
            let store = std::sync::Arc::into_inner(shared.store).expect("sole owner");
            store.close().expect("close");
            let store = Store::open_path(
                _dir.path(),
                StoreOptions {
                    engine: config.engine.clone(),
                    durability: config.durability,
                    ..StoreOptions::default()
                },
            )
            .expect("reopen store");
            crate::collection::repair(&store).expect("repair");
            crate::expiry::repair(&store).expect("expiry repair");
            let shared = Shared::new(store, config);
            let client = shared.new_client("127.0.0.1:1".into(), "127.0.0.1:6379".into(), None);
            Self {
                shared,
                client,
                _dir,
            }
        }
    }

    /// Runs one command as a batch of its own for `client` (any thread).
    pub fn run_on(shared: &Shared, client: &mut Client, argv: &[&[u8]]) -> Frame {
        let mut batch = shared.store.batch();
        let mut buffers = Buffers::default();
        let mut ctx = Ctx {
            shared,
            client,
            batch: &mut batch,
            unit: None,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            now: Default::default(),
        };
        let reply = execute(&mut ctx, argv);
        batch.wait().expect("wait");
        reply
    }

    pub fn bulk(s: &str) -> Frame {
        Frame::bulk(s.as_bytes())
    }

    pub fn bulks(items: &[&str]) -> Frame {
        Frame::Array(items.iter().map(|s| bulk(s)).collect())
    }

    /// A server state over a simulated directory (power losses), one shard, lockbtree,
    /// collections and deadlines repaired as the server does at start.
    pub fn sim_shared(dir: &forest_store::file::SimDir, durability: Durability) -> Shared {
        let store = Store::open(
            dir.clone(),
            StoreOptions {
                engine: Some("lockbtree".into()),
                durability,
                shards: 1,
                switch_engine: false,
                memory_budget_bytes: None,
                map_checkpoint_wal_bytes: None,
            },
        )
        .expect("open store");
        crate::collection::repair(&store).expect("repair");
        crate::expiry::repair(&store).expect("expiry repair");
        Shared::new(
            store,
            Config {
                durability,
                ..Config::default()
            },
        )
    }

    /// Runs one command inside `batch` (a pipeline's batch, not waited for here).
    pub fn run_in(shared: &Shared, batch: &mut forest_store::Batch<'_>, argv: &[&str]) -> Frame {
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
            now: Default::default(),
        };
        execute(&mut ctx, &argv)
    }

    /// Runs one command as a batch of its own and waits for it.
    pub fn run_alone(shared: &Shared, argv: &[&str]) -> Frame {
        let mut batch = shared.store.batch();
        let reply = run_in(shared, &mut batch, argv);
        batch.wait().expect("wait");
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    // Goal: unknown commands and wrong arity get Redis's exact texts, in Redis's order.
    // Method: run bad commands and compare the error strings.
    #[test]
    fn unknown_and_arity_errors() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["foo", "a", "b"]),
            Frame::Error("ERR unknown command 'foo', with args beginning with: 'a' 'b' ".into())
        );
        assert_eq!(
            h.run(&["foo"]),
            Frame::Error("ERR unknown command 'foo', with args beginning with: ".into())
        );
        assert_eq!(
            h.run(&["GET"]),
            Frame::Error("ERR wrong number of arguments for 'get' command".into())
        );
        assert_eq!(
            h.run(&["gEt", "a", "b"]),
            Frame::Error("ERR wrong number of arguments for 'get' command".into())
        );
        let long = "x".repeat(300);
        let Frame::Error(text) = h.run(&["nope", &long, "y"]) else {
            panic!("error expected");
        };
        assert!(text.len() < 300, "{text}");
    }

    // Goal: every spec is reachable by name and its arity matches its usage line's shape.
    // Method: look every name up in two letter cases; names are lower case.
    #[test]
    fn specs_are_consistent() {
        for spec in COMMAND_SPECS {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            assert!(lookup(spec.name.as_bytes()).is_some());
            assert!(lookup(spec.name.to_ascii_uppercase().as_bytes()).is_some());
            assert_ne!(spec.arity, 0, "{}", spec.name);
        }
        assert!(lookup(&[b'g'; 40]).is_none());
    }

    // Goal: the last-found cache of `lookup` answers as the table does, whatever came before
    // (a cached name never answers for another name, a prefix, or a longer one).
    // Method: look names up in an order that leaves each one cached before the next, in both
    // letter cases, against the table itself.
    #[test]
    fn lookup_after_any_other_name_answers_as_the_table() {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for name in [
            "get", "GET", "gEt", "ge", "gett", "set", "SETEX", "setex", "", "x",
        ] {
            names.push(name.as_bytes().to_vec());
        }
        names.push(vec![b'g'; 40]);
        names.push(b"g\xc3\xa9t".to_vec());
        for first in &names {
            for second in &names {
                lookup(first);
                let lower = second.to_ascii_lowercase();
                let want = table().get(&lower[..]).map(|s| s.name);
                assert_eq!(
                    lookup(second).map(|s| s.name),
                    want,
                    "{first:?} then {second:?}"
                );
            }
        }
    }

    // Goal: store limit errors read as protocol.md says.
    // Method: a key one byte over the limit.
    #[test]
    fn limit_errors() {
        let mut h = Harness::new();
        let key = vec![b'k'; forest_core::KEY_BYTES_MAX + 1];
        assert_eq!(
            h.run_bytes(&[b"SET", &key, b"v"]),
            Frame::Error("ERR key too long (16385 bytes; the limit is 16384)".into())
        );
        let value = vec![b'v'; forest_core::VALUE_BYTES_MAX + 1];
        assert_eq!(
            h.run_bytes(&[b"SET", b"k", &value]),
            Frame::Error("ERR value too long (1048577 bytes; the limit is 1048576)".into())
        );
    }

    // Goal: reply buffers come back to the pool, are handed out empty, and the pool stays
    // within its byte bound. Method: give many buffers, take one, recycle an array reply.
    // Goal (review rev-lists13 F2): what a connection keeps between commands stays within
    // the pool's bound (POOL_BYTES_MAX, "small enough for thousands of connections") after
    // one large unit too. Method: one SADD of 20 000 members through a connection's
    // buffers, then the bytes its pool and its kept op vector hold.
    #[test]
    fn rev_lists_kept_unit_ops_are_bounded() {
        let h = Harness::new();
        let mut client = h
            .shared
            .new_client("127.0.0.1:3".into(), "127.0.0.1:6379".into(), None);
        let mut buffers = Buffers::default();
        let members: Vec<String> = (0..20_000).map(|i| format!("m{i}")).collect();
        let mut argv: Vec<&[u8]> = vec![b"SADD", b"s"];
        argv.extend(members.iter().map(|m| m.as_bytes()));
        let mut batch = h.shared.store.batch();
        let mut ctx = Ctx {
            shared: &h.shared,
            client: &mut client,
            batch: &mut batch,
            wrote: false,
            after: After::Continue,
            buffers: &mut buffers,
            unit: None,
            now: Default::default(),
        };
        assert_eq!(execute(&mut ctx, &argv), Frame::Integer(20_000));
        batch.wait().expect("wait");
        let kept = buffers.free_bytes
            + buffers.unit_ops.capacity() * std::mem::size_of::<forest_store::BatchOp>();
        assert!(
            kept <= POOL_BYTES_MAX,
            "a connection keeps {kept} bytes after one SADD (bound {POOL_BYTES_MAX})"
        );
    }

    #[test]
    fn buffer_pool_is_bounded() {
        let mut buffers = Buffers::default();
        for _ in 0..10_000 {
            buffers.give(Vec::with_capacity(1024));
        }
        assert!(buffers.free_bytes <= POOL_BYTES_MAX);
        let count = buffers.free.len();
        let mut taken = buffers.take();
        assert!(taken.is_empty() && taken.capacity() >= 1024);
        taken.extend_from_slice(b"value");
        buffers.give(taken);
        assert_eq!(buffers.free.len(), count);
        assert!(buffers.free.iter().all(Vec::is_empty));
        let mut small = Buffers::default();
        small.recycle(Frame::Array(vec![Frame::bulk("abc"), Frame::Null]));
        small.recycle(Frame::bulk("xyz"));
        assert_eq!(small.free.len(), 2);
    }
}
