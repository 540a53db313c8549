//! Blocking commands' registry (BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMOVE, BRPOPLPUSH, BLMPOP,
//! BZMPOP, XREAD and XREADGROUP with BLOCK; redis src/blocked.c):
//! which clients wait on which keys, in the order they began to wait, and each waiting
//! client's [`Waiter`], the condition its connection sleeps on.
//!
//! Design (as Pub/Sub's mailbox, [`crate::pubsub`]): a blocked connection costs no thread of
//! its own and does not poll. In the threads model its thread sleeps on the waiter's
//! condition variable; in the tokio model its task awaits the waiter's `Notify` (beside its
//! socket, so a disconnect ends it at once). A waiter is woken by:
//! - a key becoming ready: every write of a collection's type entry (a push, ZADD, a
//!   RENAME or COPY onto the key, EXEC's and a script's writes) notes the key if someone
//!   waits on it ([`Blocking::waits_on`], called under the key's stripe lock), and once the
//!   command (or the whole EXEC or script) is done, [`Blocking::signal`] wakes the first
//!   waiter of each key noted, in the order the keys were noted;
//! - its timeout (the connection's own deadline), CLIENT UNBLOCK, or the server's stop.
//!
//! The woken client runs its pop again itself, under the stripe locks of its keys, trying
//! the keys in the order they became ready. If another client took the element first it
//! keeps waiting, still first in line. Order of service (Redis's): per key, first come first
//! served. Only the first waiter of a key is woken; when it leaves (served, timed out,
//! unblocked, gone), the next one is woken in turn if the one leaving had been woken, so the
//! elements of a push of several go one each to the waiters in their order, and an element
//! a waiter did not take (it left meanwhile) is offered to the next: none is lost or given
//! twice.
//!
//! XREAD's readers take nothing away from the key, so they are not served in turn: every
//! write of a stream wakes all of them (Redis serves every XREAD waiter of an XADD), and each
//! reads again after the id it waits for; they never count as a key's first in line.
//! XREADGROUP's `>` takes entries from its group, so its readers wait in turn as pops do.
//!
//! Invariants:
//! - A waiter registers under the stripe locks of all its keys, after finding them all
//!   empty; a write notes a key under its stripe lock once its change is decided. So a push
//!   either came before the registration (and the pop saw it) or sees the waiter.
//! - A waiter is in the registry exactly while its connection's [`Blocked`] lives: dropping
//!   it (served, timeout, disconnect, connection end in any I/O model) deregisters it.
//! - Lock order: the registry's lock (read or write), then a waiter's; a waiter's lock alone
//!   otherwise.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::collection::{RESERVED_BYTE, TYPE_TAG};

/// How CLIENT UNBLOCK ends a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unblock {
    /// As if the timeout passed (the command's null reply).
    Timeout,
    /// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error,
}

/// Why a waiting connection woke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// These keys became ready, in this order: run the pop again.
    Ready(Vec<Vec<u8>>),
    /// The deadline passed.
    Timeout,
    /// CLIENT UNBLOCK.
    Unblocked(Unblock),
    /// The server stops: end the connection.
    Stopped,
}

#[derive(Debug, Default)]
struct WaitState {
    /// Keys signaled and not yet tried, in signal order, each once.
    ready: Vec<Vec<u8>>,
    /// Signaled at least once: on leaving, the next waiter of its keys is woken.
    signaled: bool,
    unblock: Option<Unblock>,
    /// CLIENT UNBLOCK came (a second one answers 0).
    unblocked: bool,
    stopped: bool,
}

/// One blocked client's wake-up condition (see the module doc).
#[derive(Debug)]
pub struct Waiter {
    pub client: u64,
    /// An XREAD reader: woken by every write of its keys, not in turn (module doc).
    every: bool,
    /// The keys waited on, each once.
    keys: Vec<Vec<u8>>,
    state: Mutex<WaitState>,
    /// Wakes the connection's thread (threads model).
    cond: Condvar,
    /// Wakes the connection's task (tokio model); a wake before the task waits is kept.
    pub notify: tokio::sync::Notify,
}

impl Waiter {
    fn new(client: u64, keys: Vec<Vec<u8>>, every: bool, stopped: bool) -> Self {
        Self {
            client,
            every,
            keys,
            state: Mutex::new(WaitState {
                stopped,
                ..WaitState::default()
            }),
            cond: Condvar::new(),
            notify: tokio::sync::Notify::new(),
        }
    }

    fn wake(&self, change: impl FnOnce(&mut WaitState)) {
        let mut state = self.state.lock();
        change(&mut state);
        drop(state);
        self.cond.notify_one();
        self.notify.notify_one();
    }

    fn signal(&self, key: &[u8]) {
        self.wake(|state| {
            state.signaled = true;
            if !state.ready.iter().any(|k| k == key) {
                state.ready.push(key.to_vec());
            }
        });
    }

    /// What woke the waiter, if anything did (stop first, then CLIENT UNBLOCK, then keys).
    pub fn poll(&self) -> Option<Wake> {
        Self::take(&mut self.state.lock())
    }

    fn take(state: &mut WaitState) -> Option<Wake> {
        if state.stopped {
            return Some(Wake::Stopped);
        }
        if let Some(how) = state.unblock.take() {
            return Some(Wake::Unblocked(how));
        }
        if !state.ready.is_empty() {
            return Some(Wake::Ready(std::mem::take(&mut state.ready)));
        }
        None
    }

    /// Sleeps until something wakes the waiter or `deadline` passes (threads model).
    pub fn wait(&self, deadline: Option<Instant>) -> Wake {
        let mut state = self.state.lock();
        loop {
            if let Some(wake) = Self::take(&mut state) {
                return wake;
            }
            match deadline {
                None => self.cond.wait(&mut state),
                Some(deadline) => {
                    if self.cond.wait_until(&mut state, deadline).timed_out() {
                        return Self::take(&mut state).unwrap_or(Wake::Timeout);
                    }
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// Per key, its waiters in the order they began to wait.
    keys: HashMap<Vec<u8>, VecDeque<Arc<Waiter>>>,
    /// Per client id, its waiter (CLIENT UNBLOCK).
    clients: HashMap<u64, Arc<Waiter>>,
}

/// Every blocked client of the server (see the module doc).
#[derive(Debug, Default)]
pub struct Blocking {
    /// Waiters registered: writes skip the registry while it is 0.
    count: AtomicUsize,
    stopped: AtomicBool,
    /// Read-locked by the write hook and wake-ups (many at once), write-locked to register
    /// and deregister.
    registry: RwLock<Registry>,
}

impl Blocking {
    /// Clients blocked now (INFO's `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Registers client `client` as waiting on `keys` (last in line on each). Call it under
    /// the stripe locks of every key, having found them all empty.
    pub fn register(self: &Arc<Self>, client: u64, keys: &[&[u8]]) -> Blocked {
        self.register_as(client, keys, false)
    }

    /// [`Self::register`] for an XREAD reader: woken by every write of its keys, whatever
    /// waits before it.
    pub fn register_reader(self: &Arc<Self>, client: u64, keys: &[&[u8]]) -> Blocked {
        self.register_as(client, keys, true)
    }

    fn register_as(self: &Arc<Self>, client: u64, keys: &[&[u8]], every: bool) -> Blocked {
        let mut distinct: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
        for key in keys {
            if !distinct.iter().any(|k| k == key) {
                distinct.push(key.to_vec());
            }
        }
        let mut registry = self.registry.write();
        // A stop that came first must still reach this waiter.
        let waiter = Arc::new(Waiter::new(
            client,
            distinct,
            every,
            self.stopped.load(Ordering::SeqCst),
        ));
        for key in &waiter.keys {
            registry
                .keys
                .entry(key.clone())
                .or_default()
                .push_back(Arc::clone(&waiter));
        }
        registry.clients.insert(client, Arc::clone(&waiter));
        self.count.fetch_add(1, Ordering::SeqCst);
        Blocked {
            waiter,
            blocking: Arc::clone(self),
        }
    }

    /// Whether a client waits on user key `user` (the write hook; one atomic load while
    /// nobody is blocked).
    pub fn waits_on(&self, user: &[u8]) -> bool {
        self.count.load(Ordering::SeqCst) > 0 && self.registry.read().keys.contains_key(user)
    }

    /// [`Self::waits_on`] for a store key: true only for the type entry of a collection
    /// someone waits on (every change of a collection rewrites or removes it).
    pub fn waits_on_store_key<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        if self.count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        match key {
            [RESERVED_BYTE, TYPE_TAG, user @ ..] if self.waits_on(user) => Some(user),
            _ => None,
        }
    }

    /// Wakes the first waiter of each of `keys`, in order, and every XREAD reader of them
    /// (after the command that made them ready).
    pub fn signal(&self, keys: &[Vec<u8>]) {
        let registry = self.registry.read();
        for key in keys {
            let Some(queue) = registry.keys.get(key) else {
                continue;
            };
            for reader in queue.iter().filter(|w| w.every) {
                reader.signal(key);
            }
            if let Some(first) = first_in_turn(queue) {
                first.signal(key);
            }
        }
    }

    /// CLIENT UNBLOCK: ends client `client`'s wait; whether it was waiting.
    pub fn unblock(&self, client: u64, how: Unblock) -> bool {
        let registry = self.registry.read();
        let Some(waiter) = registry.clients.get(&client) else {
            return false;
        };
        let mut fresh = false;
        waiter.wake(|state| {
            fresh = !state.unblocked && !state.stopped;
            if fresh {
                state.unblocked = true;
                state.unblock = Some(how);
            }
        });
        fresh
    }

    /// The server stops: every waiter, present and future, wakes with [`Wake::Stopped`].
    pub fn stop_all(&self) {
        // Read-locked: a registration (write-locked) before it is woken here, one after it
        // sees the flag.
        let registry = self.registry.read();
        self.stopped.store(true, Ordering::SeqCst);
        for waiter in registry.clients.values() {
            waiter.wake(|state| state.stopped = true);
        }
    }

    fn remove(&self, waiter: &Arc<Waiter>) {
        let mut registry = self.registry.write();
        // An XREAD reader took nothing: it has nothing to pass on.
        let pass_on = !waiter.every && waiter.state.lock().signaled;
        for key in &waiter.keys {
            let Some(queue) = registry.keys.get_mut(key) else {
                continue;
            };
            let was_first = first_in_turn(queue).is_some_and(|w| Arc::ptr_eq(w, waiter));
            queue.retain(|w| !Arc::ptr_eq(w, waiter));
            if queue.is_empty() {
                registry.keys.remove(key);
                continue;
            }
            // What this waiter was offered and did not take, or what its pop left, is the
            // next one's to try.
            if let Some(next) = first_in_turn(queue).filter(|_| was_first && pass_on) {
                next.signal(key);
            }
        }
        if registry
            .clients
            .get(&waiter.client)
            .is_some_and(|w| Arc::ptr_eq(w, waiter))
        {
            registry.clients.remove(&waiter.client);
        }
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The first waiter of a key that is served in turn (not an XREAD reader).
fn first_in_turn(queue: &VecDeque<Arc<Waiter>>) -> Option<&Arc<Waiter>> {
    queue.iter().find(|w| !w.every)
}

/// A connection's registration while its blocking command waits; dropping it deregisters.
#[derive(Debug)]
pub struct Blocked {
    pub waiter: Arc<Waiter>,
    blocking: Arc<Blocking>,
}

impl Drop for Blocked {
    fn drop(&mut self) {
        self.blocking.remove(&self.waiter);
    }
}

/// What a blocked command does when it is woken (see `cmd::blocking`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pop {
    /// BLPOP (`left`) or BRPOP.
    List { left: bool },
    /// BZPOPMAX (`max`) or BZPOPMIN.
    ZSet { max: bool },
    /// BLMOVE and BRPOPLPUSH: from one end of the source to an end of `dest`.
    Move {
        dest: Vec<u8>,
        from_left: bool,
        to_left: bool,
    },
    /// BLMPOP: up to `count` elements from one end.
    ListMany { left: bool, count: u64 },
    /// BZMPOP: up to `count` members from one end.
    ZSetMany { max: bool, count: u64 },
    /// XREAD or XREADGROUP with BLOCK: read again with the same arguments (`$` resolved).
    Stream(Box<crate::cmd::stream::ReadArgs>),
}

/// A waiting command: its registration, what it pops, from which keys, until when.
#[derive(Debug)]
pub struct Waiting {
    pub blocked: Blocked,
    pub pop: Pop,
    /// The keys in argument order.
    pub keys: Vec<Vec<u8>>,
    /// None: forever.
    pub deadline: Option<Instant>,
}

/// A connection's blocking state (a field of `cmd::Client`).
#[derive(Debug, Default)]
pub struct ClientBlock {
    /// Keys the running command made ready, for [`Blocking::signal`] once it is done.
    pub ready: Vec<Vec<u8>>,
    /// The blocking command that waits, if any.
    pub waiting: Option<Waiting>,
    /// A script's command runs: XREAD and XREADGROUP refuse BLOCK, as Redis 7.0.
    pub in_script: bool,
}

impl ClientBlock {
    /// Notes `user` as made ready by the running command (each key once, in order).
    pub fn note(&mut self, user: &[u8]) {
        if !self.ready.iter().any(|k| k == user) {
            self.ready.push(user.to_vec());
        }
    }

    /// Wakes the waiters of the keys the command just done made ready.
    pub fn flush(&mut self, blocking: &Blocking) {
        if !self.ready.is_empty() {
            blocking.signal(&self.ready);
            self.ready.clear();
        }
    }

    /// Whether a blocking command waits (CLIENT LIST's flag `b`).
    pub fn is_blocked(&self) -> bool {
        self.waiting.is_some()
    }

    /// The waiter to sleep on while blocked.
    pub fn waiter(&self) -> Option<Arc<Waiter>> {
        self.waiting.as_ref().map(|w| Arc::clone(&w.blocked.waiter))
    }

    /// The blocked command's deadline (None: forever, or not blocked).
    pub fn deadline(&self) -> Option<Instant> {
        self.waiting.as_ref().and_then(|w| w.deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ready(keys: &[&str]) -> Wake {
        Wake::Ready(keys.iter().map(|k| k.as_bytes().to_vec()).collect())
    }

    // Goal: only the first waiter of a key is woken; when it leaves after being woken, the
    // next is; a waiter never woken passes nothing on. Method: three waiters on one key.
    #[test]
    fn first_in_line_is_woken_then_the_next() {
        let blocking = Arc::new(Blocking::default());
        let a = blocking.register(1, &[b"k"]);
        let b = blocking.register(2, &[b"k", b"j"]);
        let c = blocking.register(3, &[b"k"]);
        assert_eq!(blocking.blocked_clients(), 3);
        assert!(blocking.waits_on(b"k") && blocking.waits_on(b"j"));
        blocking.signal(&[b"k".to_vec()]);
        assert_eq!(a.waiter.poll(), Some(ready(&["k"])));
        assert_eq!(b.waiter.poll(), None);
        drop(a);
        assert_eq!(b.waiter.poll(), Some(ready(&["k"])), "passed on");
        blocking.signal(&[b"j".to_vec(), b"k".to_vec()]);
        assert_eq!(b.waiter.poll(), Some(ready(&["j", "k"])), "in signal order");
        assert_eq!(c.waiter.poll(), None);
        drop(c);
        assert_eq!(
            b.waiter.poll(),
            None,
            "c was never woken: nothing to pass on"
        );
        drop(b);
        assert_eq!(blocking.blocked_clients(), 0);
        assert!(!blocking.waits_on(b"k") && !blocking.waits_on(b"j"));
    }

    // Goal: XREAD readers are all woken by a signal, whatever their place in line, and never
    // count as first: the pop behind them is woken too, and a reader leaving passes nothing
    // on. Method: a reader, a pop, a reader on one key.
    #[test]
    fn readers_are_all_woken_and_not_in_turn() {
        let blocking = Arc::new(Blocking::default());
        let r1 = blocking.register_reader(1, &[b"s"]);
        let pop = blocking.register(2, &[b"s"]);
        let r2 = blocking.register_reader(3, &[b"s"]);
        let pop2 = blocking.register(4, &[b"s"]);
        blocking.signal(&[b"s".to_vec()]);
        assert_eq!(r1.waiter.poll(), Some(ready(&["s"])));
        assert_eq!(pop.waiter.poll(), Some(ready(&["s"])));
        assert_eq!(r2.waiter.poll(), Some(ready(&["s"])));
        assert_eq!(pop2.waiter.poll(), None, "only the first pop");
        drop(r1);
        assert_eq!(pop2.waiter.poll(), None, "a reader passes nothing on");
        drop(pop);
        assert_eq!(pop2.waiter.poll(), Some(ready(&["s"])), "passed on");
        drop((r2, pop2));
        assert_eq!(blocking.blocked_clients(), 0);
        assert!(!blocking.waits_on(b"s"));
    }

    // Goal: CLIENT UNBLOCK, timeouts and the stop wake a sleeping thread.
    // Method: a thread waits; another unblocks it; a deadline; a stop before registering.
    #[test]
    fn unblock_timeout_and_stop() {
        let blocking = Arc::new(Blocking::default());
        let a = blocking.register(7, &[b"k"]);
        let waiter = Arc::clone(&a.waiter);
        let sleeper = std::thread::spawn(move || waiter.wait(None));
        std::thread::sleep(Duration::from_millis(20));
        assert!(blocking.unblock(7, Unblock::Error));
        assert!(!blocking.unblock(7, Unblock::Timeout), "already unblocked");
        assert!(!blocking.unblock(8, Unblock::Timeout));
        assert_eq!(
            sleeper.join().expect("join"),
            Wake::Unblocked(Unblock::Error)
        );
        drop(a);
        let b = blocking.register(8, &[b"k"]);
        let deadline = Instant::now() + Duration::from_millis(10);
        assert_eq!(b.waiter.wait(Some(deadline)), Wake::Timeout);
        blocking.stop_all();
        assert_eq!(b.waiter.wait(None), Wake::Stopped);
        let c = blocking.register(9, &[b"k"]);
        assert_eq!(c.waiter.poll(), Some(Wake::Stopped), "stop came first");
        assert_eq!(
            blocking.waits_on_store_key(&crate::collection::type_key(b"k")),
            Some(&b"k"[..])
        );
        assert_eq!(blocking.waits_on_store_key(b"k"), None);
    }
}
