//! Pub/Sub: the channels and patterns every client subscribed to ([`Hub`]), and each
//! subscriber's [`Mailbox`], the bounded queue of bytes its connection sends (redis
//! src/pubsub.c; docs/PROTOCOL.md "Pub/Sub").
//!
//! Delivery: PUBLISH encodes the message once per protocol (RESP2 `*3`, RESP3 push `>3`)
//! and appends it to the mailbox of every subscriber of the channel and of every matching
//! pattern (Redis's glob, [`crate::glob`]). Once a connection has a mailbox, its command
//! replies go through the mailbox too, so replies and messages leave in one order:
//! messages that arrive while the connection runs a batch are held and follow the batch's
//! replies (so a SUBSCRIBE's confirmation precedes every message of its channel). Who
//! sends the bytes: in the threads model a writer thread per subscribed connection (the
//! connection's thread is blocked reading); in the tokio model the connection's task.
//!
//! Bound (Redis's `client-output-buffer-limit pubsub 32mb 8mb 60`): a mailbox holding more
//! than [`Limits::hard`] bytes, or more than [`Limits::soft`] for [`Limits::soft_for`]
//! without a pause, is killed: its queue is dropped, its socket shut down, and the
//! connection ends. A subscriber's memory is at most the hard limit queued plus one taken
//! chunk being written. The limits are the hub's [`SharedLimits`]: `CONFIG SET
//! client-output-buffer-limit` (and `forest serve --pubsub-limit`) change them for every
//! subscriber at once, checked at each message as Redis does.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{Shutdown as NetShutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::frame::{Frame, Protocol};
use crate::glob;

/// Redis's default hard limit for pubsub clients.
pub const HARD_BYTES_DEFAULT: usize = 32 * 1024 * 1024;
/// Redis's default soft limit for pubsub clients.
pub const SOFT_BYTES_DEFAULT: usize = 8 * 1024 * 1024;
/// How long the soft limit may be passed before the client is cut.
pub const SOFT_FOR_DEFAULT: Duration = Duration::from_secs(60);

/// A subscriber's output bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub hard: usize,
    pub soft: usize,
    pub soft_for: Duration,
}

impl Limits {
    /// Parses Redis's `HARD SOFT SECONDS` (`32mb 8mb 60`; byte counts with Redis's units
    /// b, k, kb, m, mb, g, gb, any case; 0 turns a limit off).
    pub fn parse(hard: &str, soft: &str, seconds: &str) -> Result<Self, String> {
        let seconds: u64 = seconds
            .parse()
            .map_err(|_| format!("'{seconds}' is not a whole number of seconds"))?;
        Ok(Self {
            hard: memory_bytes(hard)?,
            soft: memory_bytes(soft)?,
            soft_for: Duration::from_secs(seconds),
        })
    }

    /// The limit that applies: Redis's 0 means none.
    fn bound(bytes: usize) -> usize {
        if bytes == 0 {
            usize::MAX
        } else {
            bytes
        }
    }
}

/// A byte count as Redis's `memtoull` reads it: digits then b, k (1000), kb (1024), m, mb, g
/// or gb, any case.
pub fn memory_bytes(text: &str) -> Result<usize, String> {
    let lower = text.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let scale: usize = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => {
            return Err(format!(
                "'{text}' is not a byte count (units: b, k, kb, m, mb, g, gb)"
            ))
        }
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{text}' is not a byte count (units: b, k, kb, m, mb, g, gb)"))
}

/// The pubsub class's limits, shared by the hub and every mailbox and changeable at run time
/// (relaxed loads: a change applies from the next message on).
#[derive(Debug)]
pub struct SharedLimits {
    hard: AtomicU64,
    soft: AtomicU64,
    soft_for_ms: AtomicU64,
}

impl SharedLimits {
    pub fn new(limits: Limits) -> Self {
        let shared = Self {
            hard: AtomicU64::new(0),
            soft: AtomicU64::new(0),
            soft_for_ms: AtomicU64::new(0),
        };
        shared.set(limits);
        shared
    }

    pub fn get(&self) -> Limits {
        Limits {
            hard: self.hard.load(Ordering::Relaxed) as usize,
            soft: self.soft.load(Ordering::Relaxed) as usize,
            soft_for: Duration::from_millis(self.soft_for_ms.load(Ordering::Relaxed)),
        }
    }

    pub fn set(&self, limits: Limits) {
        self.hard.store(limits.hard as u64, Ordering::Relaxed);
        self.soft.store(limits.soft as u64, Ordering::Relaxed);
        let ms = u64::try_from(limits.soft_for.as_millis()).unwrap_or(u64::MAX);
        self.soft_for_ms.store(ms, Ordering::Relaxed);
    }
}

impl Default for SharedLimits {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            hard: HARD_BYTES_DEFAULT,
            soft: SOFT_BYTES_DEFAULT,
            soft_for: SOFT_FOR_DEFAULT,
        }
    }
}

/// Bytes to send: a message shared by its subscribers, or a batch's replies.
#[derive(Debug)]
pub enum Chunk {
    Shared(Arc<[u8]>),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Shared(bytes) => bytes,
            Chunk::Owned(bytes) => bytes,
        }
    }
}

#[derive(Debug, Default)]
struct MailState {
    queue: VecDeque<Chunk>,
    /// Messages that arrived while the connection ran a batch.
    held: Vec<Chunk>,
    in_batch: bool,
    /// Bytes in `queue` and `held`.
    bytes: usize,
    soft_since: Option<Instant>,
    /// The connection ended: the writer sends what is queued, then stops.
    closing: bool,
    /// The writer thread stopped.
    writer_done: bool,
}

/// A subscribed connection's outgoing bytes (see the module doc).
#[derive(Debug)]
pub struct Mailbox {
    state: Mutex<MailState>,
    /// Wakes the writer thread (threads model).
    ready: Condvar,
    /// Wakes the connection's task (tokio model).
    pub data: tokio::sync::Notify,
    /// Tells the connection's task it was killed while it writes.
    pub kill: tokio::sync::Notify,
    killed: AtomicBool,
    resp3: AtomicBool,
    limits: Arc<SharedLimits>,
    /// The socket, shut down to cut the connection (threads model).
    stream: Mutex<Option<TcpStream>>,
}

impl Mailbox {
    fn new(limits: Arc<SharedLimits>, protocol: Protocol, in_batch: bool) -> Self {
        Self {
            state: Mutex::new(MailState {
                in_batch,
                ..MailState::default()
            }),
            ready: Condvar::new(),
            data: tokio::sync::Notify::new(),
            kill: tokio::sync::Notify::new(),
            killed: AtomicBool::new(false),
            resp3: AtomicBool::new(protocol == Protocol::Resp3),
            limits,
            stream: Mutex::new(None),
        }
    }

    /// Whether the bound cut this subscriber.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Bytes queued and not yet taken by the sender.
    pub fn queued_bytes(&self) -> usize {
        self.state.lock().bytes
    }

    /// The socket to shut down if the bound is passed (threads model).
    pub fn set_stream(&self, stream: TcpStream) {
        *self.stream.lock() = Some(stream);
    }

    /// The connection starts a batch: messages wait for its replies.
    pub fn begin_batch(&self) {
        self.state.lock().in_batch = true;
    }

    /// The batch's replies (`output`, emptied), then the messages held meanwhile.
    pub fn end_batch(&self, output: &mut Vec<u8>, protocol: Protocol) {
        self.resp3
            .store(protocol == Protocol::Resp3, Ordering::SeqCst);
        let mut state = self.state.lock();
        state.in_batch = false;
        if !output.is_empty() {
            let bytes = std::mem::take(output);
            state.bytes += bytes.len();
            state.queue.push_back(Chunk::Owned(bytes));
        }
        let held = std::mem::take(&mut state.held);
        state.queue.extend(held);
        self.after_push(state, Instant::now());
    }

    /// Appends a message (in the subscriber's protocol).
    fn deliver(&self, resp2: &Arc<[u8]>, resp3: &Arc<[u8]>, now: Instant) {
        if self.is_killed() {
            return;
        }
        let bytes = if self.resp3.load(Ordering::SeqCst) {
            resp3
        } else {
            resp2
        };
        let mut state = self.state.lock();
        state.bytes += bytes.len();
        let chunk = Chunk::Shared(Arc::clone(bytes));
        if state.in_batch {
            state.held.push(chunk);
        } else {
            state.queue.push_back(chunk);
        }
        self.after_push(state, now);
    }

    /// Checks the bound, then wakes the sender.
    fn after_push(&self, mut state: parking_lot::MutexGuard<'_, MailState>, now: Instant) {
        let limits = self.limits.get();
        let over_soft = state.bytes > Limits::bound(limits.soft);
        if !over_soft {
            state.soft_since = None;
        }
        let soft_expired = over_soft && {
            let since = *state.soft_since.get_or_insert(now);
            now.duration_since(since) >= limits.soft_for
        };
        if state.bytes > Limits::bound(limits.hard) || soft_expired {
            state.queue.clear();
            state.held.clear();
            state.bytes = 0;
            drop(state);
            self.cut();
            return;
        }
        let wake = !state.queue.is_empty();
        drop(state);
        if wake {
            self.ready.notify_one();
            self.data.notify_one();
        }
    }

    /// Kills the subscriber: nothing more is queued; the socket is shut down.
    fn cut(&self) {
        self.killed.store(true, Ordering::SeqCst);
        if let Some(stream) = self.stream.lock().as_ref() {
            let _ = stream.shutdown(NetShutdown::Both);
        }
        self.ready.notify_all();
        self.kill.notify_one();
        self.data.notify_one();
    }

    /// Everything queued, in order (empty if none).
    pub fn take(&self) -> Vec<Chunk> {
        let mut state = self.state.lock();
        state.bytes -= state.queue.iter().map(|c| c.as_ref().len()).sum::<usize>();
        state.queue.drain(..).collect()
    }

    /// The connection ended: the writer sends what is queued, then stops.
    pub fn close(&self) {
        self.state.lock().closing = true;
        self.ready.notify_all();
    }

    /// Sends the queue to `stream` until the connection ends or is killed (the threads
    /// model's writer thread).
    pub fn run_writer(&self, mut stream: TcpStream) {
        use std::io::Write;
        loop {
            let chunks = {
                let mut state = self.state.lock();
                while state.queue.is_empty() && !state.closing && !self.is_killed() {
                    self.ready.wait(&mut state);
                }
                if self.is_killed() || (state.queue.is_empty() && state.closing) {
                    break;
                }
                state.bytes -= state.queue.iter().map(|c| c.as_ref().len()).sum::<usize>();
                state.queue.drain(..).collect()
            };
            if stream.write_all(&concat(chunks)).is_err() {
                self.cut();
                break;
            }
        }
        self.state.lock().writer_done = true;
        self.ready.notify_all();
    }

    /// Waits up to `timeout` for the writer thread to stop; whether it did.
    pub fn wait_writer(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        while !state.writer_done {
            if self.ready.wait_until(&mut state, deadline).timed_out() {
                return state.writer_done;
            }
        }
        true
    }
}

/// The chunks' bytes in one buffer (one write for many small messages).
pub fn concat(chunks: Vec<Chunk>) -> Vec<u8> {
    match <[Chunk; 1]>::try_from(chunks) {
        Ok([Chunk::Owned(bytes)]) => bytes,
        Ok([chunk]) => chunk.as_ref().to_vec(),
        Err(chunks) => {
            let mut out = Vec::with_capacity(chunks.iter().map(|c| c.as_ref().len()).sum());
            for chunk in &chunks {
                out.extend_from_slice(chunk.as_ref());
            }
            out
        }
    }
}

type Subscribers = HashMap<u64, Arc<Mailbox>>;

#[derive(Debug, Default)]
struct HubState {
    channels: HashMap<Vec<u8>, Subscribers>,
    patterns: HashMap<Vec<u8>, Subscribers>,
}

/// Every subscription of the server.
#[derive(Debug, Default)]
pub struct Hub {
    state: RwLock<HubState>,
    limits: Arc<SharedLimits>,
}

/// The message a subscriber gets, in both protocols.
fn encode(items: Vec<Frame>) -> (Arc<[u8]>, Arc<[u8]>) {
    let frame = Frame::Push(items);
    let mut resp2 = Vec::new();
    let mut resp3 = Vec::new();
    frame.encode_to(Protocol::Resp2, &mut resp2);
    frame.encode_to(Protocol::Resp3, &mut resp3);
    (resp2.into(), resp3.into())
}

impl Hub {
    pub fn new(limits: Limits) -> Self {
        Self {
            state: RwLock::default(),
            limits: Arc::new(SharedLimits::new(limits)),
        }
    }

    /// The subscribers' output limits (`CONFIG GET client-output-buffer-limit`).
    pub fn limits(&self) -> Limits {
        self.limits.get()
    }

    /// Changes the limits of every subscriber, present and future (`CONFIG SET`).
    pub fn set_limits(&self, limits: Limits) {
        self.limits.set(limits);
    }

    /// PUBLISH: the number of deliveries (a client subscribed by channel and pattern counts
    /// twice, as in Redis).
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> usize {
        self.publish_at(channel, message, Instant::now())
    }

    fn publish_at(&self, channel: &[u8], message: &[u8], now: Instant) -> usize {
        let state = self.state.read();
        let mut count = 0;
        if let Some(subscribers) = state.channels.get(channel) {
            let (resp2, resp3) = encode(vec![
                Frame::bulk("message"),
                Frame::bulk(channel),
                Frame::bulk(message),
            ]);
            for mailbox in subscribers.values() {
                mailbox.deliver(&resp2, &resp3, now);
                count += 1;
            }
        }
        for (pattern, subscribers) in &state.patterns {
            if !glob::matches(pattern, channel) {
                continue;
            }
            let (resp2, resp3) = encode(vec![
                Frame::bulk("pmessage"),
                Frame::bulk(pattern.as_slice()),
                Frame::bulk(channel),
                Frame::bulk(message),
            ]);
            for mailbox in subscribers.values() {
                mailbox.deliver(&resp2, &resp3, now);
                count += 1;
            }
        }
        count
    }

    /// Channels with at least one subscriber, matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let state = self.state.read();
        let mut out: Vec<Vec<u8>> = state
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob::matches(p, c)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Subscribers of `channel` (patterns not counted, as Redis).
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.state
            .read()
            .channels
            .get(channel)
            .map_or(0, HashMap::len)
    }

    /// How many clients a PUBLISH to `channel` reaches now.
    pub fn receivers(&self, channel: &[u8]) -> usize {
        let state = self.state.read();
        let direct = state.channels.get(channel).map_or(0, HashMap::len);
        direct
            + state
                .patterns
                .iter()
                .filter(|(p, _)| glob::matches(p, channel))
                .map(|(_, s)| s.len())
                .sum::<usize>()
    }

    /// Distinct patterns subscribed to.
    pub fn numpat(&self) -> usize {
        self.state.read().patterns.len()
    }

    fn add(&self, pattern: bool, name: &[u8], id: u64, mailbox: &Arc<Mailbox>) {
        let mut state = self.state.write();
        let map = if pattern {
            &mut state.patterns
        } else {
            &mut state.channels
        };
        map.entry(name.to_vec())
            .or_default()
            .insert(id, Arc::clone(mailbox));
    }

    fn remove(&self, pattern: bool, name: &[u8], id: u64) {
        let mut state = self.state.write();
        let map = if pattern {
            &mut state.patterns
        } else {
            &mut state.channels
        };
        if let Some(subscribers) = map.get_mut(name) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                map.remove(name);
            }
        }
    }
}

/// A client's subscriptions.
#[derive(Debug)]
pub struct Subscriber {
    hub: Arc<Hub>,
    id: u64,
    channels: BTreeSet<Vec<u8>>,
    patterns: BTreeSet<Vec<u8>>,
    mailbox: Option<Arc<Mailbox>>,
}

/// SUBSCRIBE's and its kin's confirmation: `[kind, name, count]`.
fn confirmation(kind: &str, name: Option<&[u8]>, count: usize) -> Frame {
    Frame::Push(vec![
        Frame::bulk(kind),
        name.map_or(Frame::Null, Frame::bulk),
        Frame::Integer(count as i64),
    ])
}

impl Subscriber {
    pub fn new(hub: Arc<Hub>, id: u64) -> Self {
        Self {
            hub,
            id,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            mailbox: None,
        }
    }

    /// Whether the client has a subscription (Redis's subscribed mode).
    pub fn is_subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty()
    }

    fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Channels and patterns subscribed to (CLIENT LIST's `sub` and `psub`).
    pub fn counts(&self) -> (usize, usize) {
        (self.channels.len(), self.patterns.len())
    }

    /// The mailbox, once the client subscribed (it stays for the connection's life).
    pub fn mailbox(&self) -> Option<&Arc<Mailbox>> {
        self.mailbox.as_ref()
    }

    /// SUBSCRIBE (`pattern` false) or PSUBSCRIBE: one confirmation per name. Runs inside
    /// a batch, so the mailbox made here holds messages until the batch's replies.
    pub fn subscribe(&mut self, pattern: bool, names: &[&[u8]], protocol: Protocol) -> Frame {
        let mailbox = Arc::clone(self.mailbox.get_or_insert_with(|| {
            Arc::new(Mailbox::new(Arc::clone(&self.hub.limits), protocol, true))
        }));
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            let set = if pattern {
                &mut self.patterns
            } else {
                &mut self.channels
            };
            if set.insert(name.to_vec()) {
                self.hub.add(pattern, name, self.id, &mailbox);
            }
            let kind = if pattern { "psubscribe" } else { "subscribe" };
            replies.push(confirmation(kind, Some(name), self.count()));
        }
        Frame::Sequence(replies)
    }

    /// UNSUBSCRIBE or PUNSUBSCRIBE of `names`, or of every one if none is named.
    pub fn unsubscribe(&mut self, pattern: bool, names: &[&[u8]]) -> Frame {
        let kind = if pattern {
            "punsubscribe"
        } else {
            "unsubscribe"
        };
        let names: Vec<Vec<u8>> = if names.is_empty() {
            let set = if pattern {
                &self.patterns
            } else {
                &self.channels
            };
            set.iter().cloned().collect()
        } else {
            names.iter().map(|n| n.to_vec()).collect()
        };
        if names.is_empty() {
            return Frame::Sequence(vec![confirmation(kind, None, self.count())]);
        }
        let mut replies = Vec::with_capacity(names.len());
        for name in &names {
            let set = if pattern {
                &mut self.patterns
            } else {
                &mut self.channels
            };
            if set.remove(name) {
                self.hub.remove(pattern, name, self.id);
            }
            replies.push(confirmation(kind, Some(name), self.count()));
        }
        Frame::Sequence(replies)
    }

    /// Leaves every channel and pattern without confirmations (RESET, disconnect).
    pub fn unsubscribe_all(&mut self) {
        for name in std::mem::take(&mut self.channels) {
            self.hub.remove(false, &name, self.id);
        }
        for name in std::mem::take(&mut self.patterns) {
            self.hub.remove(true, &name, self.id);
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.unsubscribe_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(chunks: Vec<Chunk>) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.as_ref().to_vec()).collect()
    }

    // Goal: messages that arrive during a batch follow its replies; RESP2 and RESP3
    // encodings; pattern messages. Method: a subscriber in a batch, a publish, the batch's end.
    #[test]
    fn batch_replies_precede_held_messages() {
        let hub = Arc::new(Hub::default());
        let mut sub = Subscriber::new(Arc::clone(&hub), 1);
        sub.subscribe(false, &[b"ch"], Protocol::Resp2);
        sub.subscribe(true, &[b"c*"], Protocol::Resp2);
        assert_eq!(hub.publish(b"ch", b"hi"), 2);
        let mailbox = Arc::clone(sub.mailbox().expect("mailbox"));
        assert!(mailbox.take().is_empty(), "held while the batch runs");
        let mut output = b"+REPLY\r\n".to_vec();
        mailbox.end_batch(&mut output, Protocol::Resp2);
        assert!(output.is_empty());
        assert_eq!(
            bytes(mailbox.take()),
            b"+REPLY\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n\
              *4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$2\r\nhi\r\n"
                .to_vec()
        );
        mailbox.end_batch(&mut Vec::new(), Protocol::Resp3);
        assert_eq!(hub.publish(b"ch", b"x"), 2);
        let out = bytes(mailbox.take());
        assert!(out.starts_with(b">3\r\n$7\r\nmessage\r\n"), "{out:?}");
        assert_eq!(mailbox.queued_bytes(), 0);
        drop(sub);
        assert_eq!((hub.numsub(b"ch"), hub.numpat()), (0, 0));
        assert_eq!(hub.publish(b"ch", b"x"), 0);
    }

    // Goal: the hard limit kills at once; the soft limit only after it was passed for
    // `soft_for` without a pause. Method: an injected clock, small limits.
    #[test]
    fn limits_cut_slow_subscribers() {
        let limits = Limits {
            hard: 1000,
            soft: 100,
            soft_for: Duration::from_secs(60),
        };
        let hub = Hub::new(limits);
        let mailbox = Mailbox::new(Arc::clone(&hub.limits), Protocol::Resp2, false);
        let (a, b) = encode(vec![Frame::bulk(vec![b'x'; 60])]);
        let t0 = Instant::now();
        mailbox.deliver(&a, &b, t0);
        mailbox.deliver(&a, &b, t0);
        assert!(!mailbox.is_killed(), "over soft, not for long");
        mailbox.deliver(&a, &b, t0 + Duration::from_secs(59));
        assert!(!mailbox.is_killed());
        mailbox.take();
        mailbox.deliver(&a, &b, t0 + Duration::from_secs(61));
        assert!(!mailbox.is_killed(), "below soft again: the clock restarts");
        mailbox.deliver(&a, &b, t0 + Duration::from_secs(62));
        mailbox.deliver(&a, &b, t0 + Duration::from_secs(200));
        assert!(mailbox.is_killed(), "over soft for 138 s");
        assert_eq!(mailbox.queued_bytes(), 0);

        let mailbox = Mailbox::new(Arc::clone(&hub.limits), Protocol::Resp2, false);
        let (a, b) = encode(vec![Frame::bulk(vec![b'x'; 600])]);
        mailbox.deliver(&a, &b, t0);
        assert!(!mailbox.is_killed());
        mailbox.deliver(&a, &b, t0);
        assert!(mailbox.is_killed(), "over hard");
        mailbox.deliver(&a, &b, t0);
        assert_eq!(mailbox.queued_bytes(), 0, "nothing queued after the cut");
        assert_eq!(hub.numpat(), 0);
    }

    // Goal: a limit changed at run time applies to a mailbox made before the change, and 0
    // turns a limit off (Redis's CONFIG SET client-output-buffer-limit). Method: a mailbox
    // under the default limits, then a 100-byte hard limit, then none.
    #[test]
    fn changed_limits_apply_to_existing_subscribers() {
        let hub = Hub::default();
        let mailbox = Mailbox::new(Arc::clone(&hub.limits), Protocol::Resp2, false);
        let (a, b) = encode(vec![Frame::bulk(vec![b'x'; 60])]);
        let t0 = Instant::now();
        mailbox.deliver(&a, &b, t0);
        mailbox.deliver(&a, &b, t0);
        assert!(!mailbox.is_killed(), "120 bytes under the 32 MiB default");
        hub.set_limits(Limits {
            hard: 0,
            soft: 0,
            soft_for: Duration::ZERO,
        });
        mailbox.deliver(&a, &b, t0);
        assert!(!mailbox.is_killed(), "no limits at all");
        hub.set_limits(Limits {
            hard: 100,
            soft: 0,
            soft_for: Duration::ZERO,
        });
        mailbox.deliver(&a, &b, t0);
        assert!(mailbox.is_killed(), "over the new hard limit");
    }

    #[test]
    fn memory_units_as_redis_reads_them() {
        assert_eq!(memory_bytes("32mb"), Ok(32 << 20));
        assert_eq!(memory_bytes("8MB"), Ok(8 << 20));
        assert_eq!(memory_bytes("1k"), Ok(1000));
        assert_eq!(memory_bytes("1kb"), Ok(1024));
        assert_eq!(memory_bytes("2g"), Ok(2_000_000_000));
        assert_eq!(memory_bytes("77"), Ok(77));
        assert_eq!(memory_bytes("0"), Ok(0));
        assert!(memory_bytes("12xb").is_err());
        assert!(memory_bytes("mb").is_err());
        assert!(memory_bytes("-1").is_err());
        assert_eq!(
            Limits::parse("32mb", "8mb", "60"),
            Ok(Limits::default()),
            "Redis's default is forest's"
        );
        assert!(Limits::parse("1mb", "1mb", "x").is_err());
    }
}
