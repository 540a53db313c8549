//! A connection: read what the client sent, run every complete command in it as one batch,
//! send all the replies in one write (masstree.md §5: batching per connection, the log
//! forced in the background; DESIGN.md "Server").
//!
//! [`Conn::process`] is the I/O-free core both I/O models use: decode the buffer's complete
//! commands, run them through one [`forest_store::Batch`], each reply encoded into the output
//! as its command ends (FOREST.RANGE writes its own there, `cmd::execute_into`), then wait
//! once for the batch's durability. The output goes out only after that wait, so a write's
//! reply goes out only after the write is durable under the store's mode; if the wait fails,
//! every write reply of the batch is replaced by an error (reads are unaffected). No lock is
//! held across the wait.
//!
//! Invariants:
//! - Replies are in command order, each encoded in the protocol the connection spoke when
//!   the command ran (HELLO 3 answers in RESP3); `Conn::writes` holds where each write's
//!   reply is until the wait.
//! - The input buffer holds at most one partial command plus one read; the output buffer
//!   one batch's replies; both shrink back after an unusually large batch.
//! - A protocol error ends the connection after the replies of the commands before it.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown as NetShutdown, TcpStream};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use forest_store::Batch;

use crate::cmd::script::RuntimeGate;
use crate::cmd::{self, After, Buffers, Client, Ctx};
use crate::frame::{Frame, Limits, Protocol};
use crate::parse::{is_word, Requests};
use crate::server::Shared;

/// Bytes asked of the socket per read: many pipelined commands, or a large value in a few
/// reads, while an idle connection costs little.
pub const READ_BYTES: usize = 16 * 1024;
/// Buffer capacity kept between batches; a larger one (after a big value or reply) is
/// given back, so that thousands of mostly idle connections stay small.
pub const BUFFER_BYTES_KEPT: usize = 256 * 1024;
/// Reply bytes one batch may produce before the batch ends early: the commands after it
/// wait in the input for the next round, so a pipeline of large reads never holds more than
/// about this much output (plus one reply) per connection.
pub const BATCH_REPLY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Reply slots kept between batches (a larger pipeline's are given back).
const REPLIES_KEPT_COUNT: usize = 4096;
/// The default of how long a partly received command may wait for its next bytes before the
/// connection is closed with a protocol error (a client that sent half a frame and then
/// nothing); `Config::partial_frame_timeout`.
pub const PARTIAL_FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// What the I/O loop does after a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read more.
    Continue,
    /// Send the output, then close.
    Close,
    /// Send the output, close, and stop the server.
    Shutdown { save: bool },
}

/// A connection's buffers and state, independent of how its bytes move.
#[derive(Debug)]
pub struct Conn {
    pub client: Client,
    requests: Requests,
    /// Bytes received and not yet consumed.
    pub input: Vec<u8>,
    /// Replies not yet sent.
    pub output: Vec<u8>,
    buffers: Buffers,
    /// Where this batch's write replies are in `output`, and the protocol each was encoded
    /// in: replaced by an error if the batch's durability wait fails.
    writes: Vec<(Range<usize>, Protocol)>,
    /// The last batch ended early: complete commands wait in the input.
    more: bool,
    /// Set: batches run on a per-core runtime's only thread, marked in its gate; a command
    /// that may run long or wait for a script's stripe locks ends the batch before it, and
    /// [`Self::left`] says so and why.
    pub runtime_gate: Option<Arc<RuntimeGate>>,
    /// The last batch stopped before such a command.
    left: Option<Leave>,
}

/// A batch between [`Conn::begin`] and [`Conn::finish_with`]: its commands ran, its
/// replies wait in the output for its durability.
#[must_use = "a batch's replies go out only after Conn::finish_with"]
#[derive(Debug)]
pub struct Pending<'s> {
    /// None: the input held no complete command.
    batch: Option<Batch<'s>>,
    step: Step,
    /// Input bytes the batch used.
    consumed: usize,
    executed: usize,
    /// The last command's name, for CLIENT LIST.
    name: Option<&'static str>,
    /// A blocking command wrote before it blocked.
    wrote_unreplied: bool,
}

impl Pending<'_> {
    /// Whether the batch wrote (its replies wait for its durability).
    pub fn wrote(&self, conn: &Conn) -> bool {
        self.batch.is_some() && (!conn.writes.is_empty() || self.wrote_unreplied)
    }
}

/// A blocked command's retry between [`Conn::resume_begin`] and
/// [`Conn::resume_finish_with`].
#[must_use = "a retry's reply goes out only after Conn::resume_finish_with"]
#[derive(Debug)]
pub struct Resumed<'s> {
    batch: Batch<'s>,
    /// None: it still waits.
    reply: Option<Frame>,
    wrote: bool,
}

impl Resumed<'_> {
    /// Whether the retry wrote (its reply waits for its durability).
    pub fn wrote(&self) -> bool {
        self.wrote
    }
}

/// Why a per-core batch stopped before a command (see [`Conn::runtime_gate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// It may run long: [`Conn::process_offloaded`] on a blocking thread.
    Offload,
    /// A script holds (or takes) every stripe lock, which the command may wait for: the
    /// connection awaits [`crate::cmd::script::Scripts::released`] on its runtime, then
    /// processes again (no thread per waiting command).
    AfterScript,
}

/// Whether a command must not run on a runtime's only thread now (see
/// [`Conn::runtime_gate`]): while a script holds every stripe lock, any command may wait
/// for them, except the few in [`touches_no_stripe`]; otherwise a script (EVAL and its kin,
/// or an EXEC that queued one) may run for seconds and SAVE writes a checkpoint. The common
/// case costs one atomic load and a look at the name's length and first byte.
fn leaves_runtime(shared: &Shared, client: &Client, argv: &[&[u8]]) -> Option<Leave> {
    if shared.scripts.holding() {
        return (!touches_no_stripe(argv)).then_some(Leave::AfterScript);
    }
    let name = argv.first()?;
    let txn = &client.txn;
    let long = match (name.len(), name.first().map(u8::to_ascii_lowercase)) {
        (4 | 7 | 10, Some(b'e')) => {
            if is_word(name, "exec") {
                txn.queues_a_script()
            } else {
                // Inside MULTI a script is only queued.
                !txn.in_multi()
                    && ["eval", "evalsha", "eval_ro", "evalsha_ro"]
                        .iter()
                        .any(|word| is_word(name, word))
            }
        }
        (4, Some(b's')) => is_word(name, "save"),
        _ => false,
    };
    long.then_some(Leave::Offload)
}

/// Commands that take no stripe lock and run inline while a script holds them: SCRIPT KILL
/// (else it would queue behind the waiting writers until the time limit: review
/// rev-pcscript F1), SHUTDOWN NOSAVE (stops the script, as Redis), and PING, ECHO, TIME
/// and QUIT, so that clients see the server alive. Any other SHUTDOWN waits for the script
/// like other commands (review rev-pcore F1).
fn touches_no_stripe(argv: &[&[u8]]) -> bool {
    match argv {
        [name, sub] if is_word(name, "script") => is_word(sub, "kill"),
        [name, args @ ..] if is_word(name, "shutdown") => {
            args.iter().any(|arg| is_word(arg, "nosave"))
        }
        [name, ..] => ["ping", "echo", "time", "quit"]
            .iter()
            .any(|word| is_word(name, word)),
        [] => true,
    }
}

/// Reads the values of the run of GETs that starts at request `first` together
/// ([`cmd::get::PreReads`]), if the request after it is a GET too.
fn read_get_run(
    shared: &Shared,
    requests: &Requests,
    input: &[u8],
    first: usize,
    prereads: &mut cmd::get::PreReads,
) {
    let mut argv: Vec<&[u8]> = Vec::with_capacity(2);
    let mut keys: Vec<&[u8]> = Vec::new();
    for i in first..requests.len() {
        requests.argv(i, input, &mut argv);
        match argv[..] {
            [name, key] if is_word(name, "get") => keys.push(key),
            _ => break,
        }
    }
    if keys.len() >= 2 {
        prereads.read(shared, &keys, first);
    }
}

/// `output` with each write reply at `writes` replaced by `write not acknowledged` (a
/// batch whose durability wait failed; rare, so it may copy).
fn unacknowledge(
    output: &mut Vec<u8>,
    writes: &[(Range<usize>, Protocol)],
    err: &forest_core::Error,
) {
    let mut rebuilt = Vec::with_capacity(output.len());
    let mut at = 0;
    for (span, protocol) in writes {
        rebuilt.extend_from_slice(&output[at..span.start]);
        Frame::err(format_args!("write not acknowledged: {err}"))
            .encode_to(*protocol, &mut rebuilt);
        at = span.end;
    }
    rebuilt.extend_from_slice(&output[at..]);
    *output = rebuilt;
}

impl Conn {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            requests: Requests::new(Limits::default()),
            input: Vec::new(),
            output: Vec::new(),
            buffers: Buffers::default(),
            writes: Vec::new(),
            more: false,
            runtime_gate: None,
            left: None,
        }
    }

    /// Why the last batch stopped before a command that must not run inline now (see
    /// [`Self::runtime_gate`]); None if it did not.
    pub fn left(&self) -> Option<Leave> {
        self.left
    }

    /// [`Self::process`] for a batch [`Leave::Offload`] asked for, on a thread that may
    /// block (not a runtime's: its other connections are served meanwhile). It runs every
    /// complete command, long ones included, and waits for durability on this thread.
    pub fn process_offloaded(&mut self, shared: &Shared) -> Step {
        self.left = None;
        let gate = self.runtime_gate.take();
        let step = self.process(shared);
        self.runtime_gate = gate;
        step
    }

    /// Whether a partly received command waits in the input.
    pub fn has_partial(&self) -> bool {
        !self.more && !self.input.is_empty()
    }

    /// Whether complete commands wait in the input (run [`Self::process`] again before
    /// reading).
    pub fn has_more(&self) -> bool {
        self.more
    }

    /// Runs every complete command of the input as one batch and appends the replies to the
    /// output (see the module doc).
    pub fn process(&mut self, shared: &Shared) -> Step {
        self.process_with(shared, |batch| batch.wait())
    }

    /// [`Self::process`], with `wait` making a batch that wrote durable (the tokio model
    /// runs it where blocking is allowed); a batch that only read is checked directly.
    pub fn process_with(
        &mut self,
        shared: &Shared,
        wait: impl FnOnce(Batch<'_>) -> forest_core::Result<()>,
    ) -> Step {
        let pending = self.begin(shared);
        self.finish_with(shared, pending, wait)
    }

    /// The first half of [`Self::process_with`]: runs the batch's commands and encodes
    /// their replies, but neither waits for the batch's durability nor lets the replies go
    /// (the per-core model awaits [`Pending::wrote`]'s durability between the halves, so
    /// that its thread serves other connections meanwhile). The input must not change
    /// before [`Self::finish_with`].
    pub fn begin<'s>(&mut self, shared: &'s Shared) -> Pending<'s> {
        let Conn {
            client,
            requests,
            input,
            output,
            buffers,
            writes,
            more,
            runtime_gate,
            left,
        } = self;
        *left = None;
        let mut pending = Pending {
            batch: None,
            step: Step::Continue,
            consumed: requests.decode(input),
            executed: 0,
            name: None,
            wrote_unreplied: false,
        };
        *more = false;
        // A subscriber's messages that arrive meanwhile follow this batch's replies.
        if let Some(mailbox) = client.pubsub.mailbox() {
            mailbox.begin_batch();
        }
        if requests.is_empty() {
            return pending;
        }
        // Replies are encoded as their commands end, in order, so that a command may
        // write its reply straight into the output (`cmd::execute_into`); a write's reply
        // is kept track of until the batch's durability wait says whether it stands.
        let batch_start = output.len();
        let mut executed = 0;
        let mut cut = false;
        let mut blocked = false;
        let mut batch = shared.store.batch();
        let mut argv: Vec<&[u8]> = Vec::with_capacity(8);
        let inline = runtime_gate.as_deref().map(RuntimeGate::enter);
        buffers.prereads.clear();
        for i in 0..requests.len() {
            requests.argv(i, input, &mut argv);
            if inline.is_some() {
                if let Some(why) = leaves_runtime(shared, client, &argv) {
                    // Left, with what follows it, for later or a thread that may block.
                    *left = Some(why);
                    break;
                }
            }
            if i >= buffers.prereads.run_end() && cmd::get::starts_run(client, &argv) {
                read_get_run(shared, requests, input, i, &mut buffers.prereads);
            }
            buffers.prereads.at_request(i);
            executed = i + 1;
            let mut ctx = Ctx {
                shared,
                client,
                batch: &mut batch,
                unit: None,
                wrote: false,
                after: After::Continue,
                buffers,
                now: Default::default(),
            };
            let start = output.len();
            let reply = cmd::execute_into(&mut ctx, &argv, output);
            let (wrote, after) = (ctx.wrote, ctx.after);
            blocked = client.blocking.is_blocked();
            if blocked || matches!(after, After::Shutdown { .. }) {
                // A blocking command that wrote before it blocked (an expired key purged):
                // its batch is waited for as a write's, though no reply of it is sent yet.
                pending.wrote_unreplied = wrote;
                // A blocking command waits: its reply comes from `resume`, and the
                // commands after it wait behind it in the input (as in Redis). SHUTDOWN
                // answers nothing.
                output.truncate(start);
                if let Some(reply) = reply {
                    buffers.recycle(reply);
                }
                if let (false, After::Shutdown { save }) = (blocked, after) {
                    pending.step = Step::Shutdown { save };
                }
                break;
            }
            if let Some(reply) = reply {
                reply.encode_to(client.protocol, output);
                buffers.recycle(reply);
            }
            if wrote {
                writes.push((start..output.len(), client.protocol));
            }
            if after == After::Close {
                pending.step = Step::Close;
                break;
            }
            if output.len() - batch_start > BATCH_REPLY_BYTES_MAX && executed < requests.len() {
                cut = true;
                break;
            }
        }
        drop(inline);
        if left.is_some() && executed > 0 {
            // The name of the last command that ran, not of the one left.
            requests.argv(executed - 1, input, &mut argv);
        }
        pending.name = argv
            .first()
            .and_then(|n| cmd::lookup(n))
            .map(|spec| spec.name);
        if left.is_some() {
            pending.consumed = requests.cut(executed);
            *more = true;
            if executed == 0 {
                // Nothing ran: no batch to account for.
                pending.name = None;
                return pending;
            }
        }
        if cut || blocked {
            pending.consumed = requests.cut(executed);
            *more = cut || pending.consumed < input.len();
        }
        pending.executed = executed;
        pending.batch = Some(batch);
        pending
    }

    /// The second half of [`Self::process_with`]: waits for the batch's durability
    /// (`wait`, if it wrote), turns its write replies into errors if that failed, and
    /// consumes its input.
    pub fn finish_with(
        &mut self,
        shared: &Shared,
        pending: Pending<'_>,
        wait: impl FnOnce(Batch<'_>) -> forest_core::Result<()>,
    ) -> Step {
        let Conn {
            client,
            requests,
            input,
            output,
            writes,
            ..
        } = self;
        let Pending {
            batch,
            mut step,
            consumed,
            executed,
            name,
            wrote_unreplied,
        } = pending;
        if let Some(batch) = batch {
            if writes.is_empty() && !wrote_unreplied {
                // Checks only that the store has not failed; a read's reply stands either way.
                let _ = batch.wait();
            } else if let Err(err) = wait(batch) {
                unacknowledge(output, writes, &err);
            }
            writes.clear();
            shared
                .stats
                .commands_processed
                .fetch_add(executed as u64, Ordering::Relaxed);
            client
                .info
                .active_ms
                .store(shared.uptime_ms(), Ordering::Relaxed);
            // One lock per batch (as before), for the last command and what CLIENT LIST
            // shows of the subscriptions and transaction.
            let state = client.state();
            let mut meta = client.info.meta.lock();
            if let Some(name) = name {
                meta.last_command = name;
            }
            meta.state = state;
        }
        if let Some(err) = requests.error() {
            if step == Step::Continue {
                Frame::err(format_args!("Protocol error: {err}"))
                    .encode_to(client.protocol, output);
                step = Step::Close;
            }
        }
        input.drain(..consumed);
        if input.capacity() > BUFFER_BYTES_KEPT && input.len() < READ_BYTES {
            input.shrink_to(READ_BYTES);
        }
        if writes.capacity() > REPLIES_KEPT_COUNT {
            *writes = Vec::new();
        }
        requests.shrink();
        if let Some(mailbox) = client.pubsub.mailbox() {
            mailbox.end_batch(output, client.protocol);
        }
        step
    }

    /// Whether a blocking command waits (the I/O loop sleeps on
    /// [`crate::cmd::Client::blocking`]'s waiter, then calls [`Self::resume_with`]).
    pub fn is_blocked(&self) -> bool {
        self.client.blocking.is_blocked()
    }

    /// Goes on with the blocked command after `wake` (`crate::blocking`): appends its reply
    /// to the output once its pop is durable (`wait`, as [`Self::process_with`]), or leaves
    /// it waiting. Returns whether it still waits.
    pub fn resume_with(
        &mut self,
        shared: &Shared,
        wake: crate::blocking::Wake,
        wait: impl FnOnce(Batch<'_>) -> forest_core::Result<()>,
    ) -> bool {
        let resumed = self.resume_begin(shared, wake);
        self.resume_finish_with(shared, resumed, wait)
    }

    /// The first half of [`Self::resume_with`] (as [`Self::begin`] is of
    /// [`Self::process_with`]): retries the blocked command; its reply, if any, waits for
    /// [`Self::resume_finish_with`].
    pub fn resume_begin<'s>(
        &mut self,
        shared: &'s Shared,
        wake: crate::blocking::Wake,
    ) -> Resumed<'s> {
        let Conn {
            client, buffers, ..
        } = self;
        let mut batch = shared.store.batch();
        let (reply, wrote) = {
            let mut ctx = Ctx {
                shared,
                client,
                batch: &mut batch,
                unit: None,
                wrote: false,
                after: After::Continue,
                buffers,
                now: Default::default(),
            };
            let reply = cmd::blocking::resume(&mut ctx, wake);
            (reply, ctx.wrote)
        };
        client.blocking.flush(&shared.blocking);
        Resumed {
            batch,
            reply,
            wrote,
        }
    }

    /// The second half of [`Self::resume_with`]; returns whether the command still waits.
    pub fn resume_finish_with(
        &mut self,
        shared: &Shared,
        resumed: Resumed<'_>,
        wait: impl FnOnce(Batch<'_>) -> forest_core::Result<()>,
    ) -> bool {
        let Conn {
            client,
            input,
            output,
            buffers,
            more,
            ..
        } = self;
        let Resumed {
            batch,
            reply,
            wrote,
        } = resumed;
        let Some(reply) = reply else {
            // A retry that found nothing may still have written (an expired key purged).
            if wrote {
                let _ = wait(batch);
            }
            return true;
        };
        let waited = if wrote { wait(batch) } else { batch.wait() };
        match waited {
            Err(err) if wrote => Frame::err(format_args!("write not acknowledged: {err}"))
                .encode_to(client.protocol, output),
            _ => reply.encode_to(client.protocol, output),
        }
        buffers.recycle(reply);
        client
            .info
            .active_ms
            .store(shared.uptime_ms(), Ordering::Relaxed);
        let state = client.state();
        client.info.meta.lock().state = state;
        if let Some(mailbox) = client.pubsub.mailbox() {
            mailbox.end_batch(output, client.protocol);
        }
        // What was pipelined behind the blocked command (or read while it waited) runs next.
        *more = !input.is_empty();
        false
    }

    /// [`Self::resume_with`] waiting for durability on the calling thread.
    pub fn resume(&mut self, shared: &Shared, wake: crate::blocking::Wake) -> bool {
        self.resume_with(shared, wake, |batch| batch.wait())
    }

    /// After the output was sent: gives back an unusually large output buffer.
    pub fn sent(&mut self) {
        self.output.clear();
        if self.output.capacity() > BUFFER_BYTES_KEPT {
            self.output.shrink_to(READ_BYTES);
        }
    }

    /// The reply for a connection that ends with half a command in its buffer.
    pub fn incomplete_error(&mut self) {
        Frame::err("Protocol error: incomplete command at the end of the stream")
            .encode_to(self.client.protocol, &mut self.output);
        if let Some(mailbox) = self.client.pubsub.mailbox() {
            mailbox.end_batch(&mut self.output, self.client.protocol);
        }
    }
}

/// Serves one connection on the calling thread until it closes (threads model).
pub fn serve_blocking(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let laddr = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let client = shared.new_client(addr, laddr, stream.try_clone().ok());
    let id = client.info.id;
    let mut conn = Conn::new(client);
    let mut chunk = [0u8; READ_BYTES];
    let mut step = Step::Continue;
    // Once the client subscribes, a writer thread sends its mailbox (crate::pubsub).
    let mut writer: Option<std::thread::JoinHandle<()>> = None;
    // A stop that began before this client registered would not cut its read side.
    while step == Step::Continue && !shared.shutdown.is_requested() {
        if conn.is_blocked() {
            if !wait_blocked(shared, &mut conn, &stream) {
                break;
            }
            if !conn.output.is_empty() {
                if stream.write_all(&conn.output).is_err() {
                    break;
                }
                conn.sent();
            }
            continue;
        }
        if conn.has_more() {
            step = conn.process(shared);
            if writer.is_none() {
                writer = start_writer(&conn, &stream);
            }
            if stream.write_all(&conn.output).is_err() {
                break;
            }
            conn.sent();
            continue;
        }
        let timeout = conn
            .has_partial()
            .then_some(shared.config.partial_frame_timeout);
        let _ = stream.set_read_timeout(timeout);
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
            Err(_) => break,
        };
        if n == 0 {
            if conn.has_partial() {
                conn.incomplete_error();
                let _ = stream.write_all(&conn.output);
            }
            break;
        }
        conn.input.extend_from_slice(&chunk[..n]);
        step = conn.process(shared);
        if writer.is_none() {
            writer = start_writer(&conn, &stream);
        }
        if !conn.output.is_empty() {
            if stream.write_all(&conn.output).is_err() {
                break;
            }
            conn.sent();
        }
    }
    // Unsubscribed before the socket closes: a client that saw the close publishes to none.
    conn.client.pubsub.unsubscribe_all();
    if let (Some(mailbox), Some(writer)) = (conn.client.pubsub.mailbox(), writer) {
        // The writer sends what is queued (QUIT's reply), unless the client does not read.
        mailbox.close();
        mailbox.wait_writer(crate::server::STOP_GRACE);
        let _ = stream.shutdown(NetShutdown::Both);
        let _ = writer.join();
    }
    shared.drop_client(id);
    let _ = stream.shutdown(NetShutdown::Both);
    if let Step::Shutdown { save } = step {
        shared.shutdown.request(save);
    }
}

/// Bytes a blocked connection reads ahead (commands pipelined behind the blocking one)
/// before it stops reading until it is served.
pub const BLOCKED_INPUT_BYTES_MAX: usize = 1024 * 1024;

/// Threads model: sleeps on the connection's waiter until its blocked command is answered
/// (no polling; `crate::blocking`); false if the connection must end (stop, or the client
/// left). The thread is not reading meanwhile, so a client that left is noticed when it is
/// woken, before it is served: it takes no element, which goes to the next waiter.
fn wait_blocked(shared: &Shared, conn: &mut Conn, stream: &TcpStream) -> bool {
    while let Some(waiter) = conn.client.blocking.waiter() {
        match waiter.wait(conn.client.blocking.deadline()) {
            crate::blocking::Wake::Stopped => return false,
            // A subscriber's writer thread shares the socket: no non-blocking read then.
            crate::blocking::Wake::Ready(_)
                if conn.client.pubsub.mailbox().is_none()
                    && client_left(stream, &mut conn.input) =>
            {
                return false
            }
            wake => {
                conn.resume(shared, wake);
            }
        }
    }
    true
}

/// Whether the peer closed the connection: reads what it sent meanwhile (without waiting)
/// into `input`, up to [`BLOCKED_INPUT_BYTES_MAX`].
fn client_left(stream: &TcpStream, input: &mut Vec<u8>) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut chunk = [0u8; READ_BYTES];
    let mut reader = stream;
    let left = loop {
        if input.len() >= BLOCKED_INPUT_BYTES_MAX {
            break false;
        }
        match reader.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => break e.kind() != ErrorKind::WouldBlock,
        }
    };
    let _ = stream.set_nonblocking(false);
    left
}

/// Starts the writer thread of a connection that just subscribed.
fn start_writer(conn: &Conn, stream: &TcpStream) -> Option<std::thread::JoinHandle<()>> {
    let mailbox = std::sync::Arc::clone(conn.client.pubsub.mailbox()?);
    let (Ok(out), Ok(cut)) = (stream.try_clone(), stream.try_clone()) else {
        let _ = stream.shutdown(NetShutdown::Both);
        return None;
    };
    mailbox.set_stream(cut);
    if mailbox.is_killed() {
        let _ = stream.shutdown(NetShutdown::Both);
    }
    std::thread::Builder::new()
        .name("forest-pubsub".into())
        .stack_size(crate::server::CONNECTION_STACK_BYTES)
        .spawn(move || mailbox.run_writer(out))
        .map_err(|_| {
            let _ = stream.shutdown(NetShutdown::Both);
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::Harness;

    fn run(conn: &mut Conn, shared: &Shared, bytes: &[u8]) -> (Step, Vec<u8>) {
        conn.input.extend_from_slice(bytes);
        let step = conn.process(shared);
        let out = conn.output.clone();
        conn.sent();
        (step, out)
    }

    // Goal: a pipeline's replies come back in order in one buffer, RESP3 after HELLO 3.
    // Method: feed a pipeline with a split command, then HELLO 3 and a missing key.
    #[test]
    fn pipeline_replies_in_order() {
        let h = Harness::new();
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (step, out) = run(
            &mut conn,
            &h.shared,
            b"SET a 1\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nINCR a\r\nGET b\r\n*2\r\n$3\r\nGET",
        );
        assert_eq!(step, Step::Continue);
        assert_eq!(out, b"+OK\r\n$1\r\n1\r\n:2\r\n$-1\r\n");
        let (_, out) = run(&mut conn, &h.shared, b"\r\n$1\r\na\r\n");
        assert_eq!(out, b"$1\r\n2\r\n");
        let (_, out) = run(&mut conn, &h.shared, b"HELLO 3\r\nGET nope\r\n");
        assert!(out.starts_with(b"%7\r\n"), "{out:?}");
        assert!(out.ends_with(b"_\r\n"), "{out:?}");
    }

    // Goal: a protocol error closes the connection after the replies before it.
    // Method: a good command, then an array element that is not a bulk string.
    #[test]
    fn protocol_error_closes() {
        let h = Harness::new();
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (step, out) = run(&mut conn, &h.shared, b"PING\r\n*1\r\n:1\r\n");
        assert_eq!(step, Step::Close);
        assert_eq!(
            out,
            b"+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n"
        );
    }

    // Goal: QUIT answers and stops the batch; SHUTDOWN answers nothing.
    // Method: commands after each must not run.
    #[test]
    fn quit_and_shutdown_end_the_batch() {
        let h = Harness::new();
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (step, out) = run(&mut conn, &h.shared, b"QUIT\r\nSET x 1\r\n");
        assert_eq!(step, Step::Close);
        assert_eq!(out, b"+OK\r\n");
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (step, out) = run(
            &mut conn,
            &h.shared,
            b"PING\r\nSHUTDOWN NOSAVE\r\nSET x 1\r\n",
        );
        assert_eq!(step, Step::Shutdown { save: false });
        assert_eq!(out, b"+PONG\r\n");
        let mut value = Vec::new();
        assert!(!h.shared.store.get(b"x", &mut value));
    }

    // Goal: when a batch's durability wait fails, each write's reply becomes `write not
    // acknowledged` in its place, in the protocol it was encoded in, while the replies of
    // reads (a FOREST.RANGE written straight into the output among them) stand.
    // Method: a store over a simulated disk whose next fsync fails (`sync` durability: the
    // batch's own wait runs the flush); one pipeline of writes and reads, HELLO 3 midway.
    #[test]
    fn a_failed_wait_turns_only_the_write_replies_into_errors() {
        use forest_store::file::FaultPlan;
        let (dir, shared) = crate::review_rev2::sim_shared();
        let client = shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (_, out) = run(&mut conn, &shared, b"SET a 1\r\n");
        assert_eq!(out, b"+OK\r\n");
        dir.set_faults(FaultPlan::sync(1));
        let (step, out) = run(
            &mut conn,
            &shared,
            b"GET a\r\nSET b 2\r\nFOREST.RANGE - +\r\nHELLO 3\r\nINCR n\r\nGET a\r\n",
        );
        assert_eq!(step, Step::Continue);
        let text = String::from_utf8_lossy(&out).into_owned();
        let (before, hello) = text.split_once('%').expect("HELLO 3's map");
        let mut lines = before.split("\r\n");
        assert_eq!(lines.next(), Some("$1"));
        assert_eq!(lines.next(), Some("1"));
        let error = lines.next().expect("SET's reply");
        assert!(error.starts_with("-ERR write not acknowledged: "), "{text}");
        assert_eq!(
            lines.collect::<Vec<_>>().join("\r\n"),
            "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"
        );
        let tail = format!("{error}\r\n$1\r\n1\r\n");
        assert!(hello.ends_with(&tail), "{text}");
    }

    // Goal: a blocking command that purges an expired key before it blocks has its batch
    // waited for through the I/O model's wait for writes (under tokio, `block_in_place`
    // around a possible fsync), and one that only read does not (review rev2's low
    // finding). Method: a list given a deadline, the clock moved past it, BLPOP on it
    // through `process_with` with a wait that counts its calls; then BLPOP on a missing key.
    #[test]
    fn blocking_command_that_purged_waits_as_a_write() {
        let h = Harness::new();
        h.shared.expires.freeze_clock();
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let (_, out) = run(&mut conn, &h.shared, b"RPUSH q a\r\nPEXPIRE q 100\r\n");
        assert_eq!(out, b":1\r\n:1\r\n");
        h.shared.expires.advance_clock_ms(200);
        let mut waits = 0;
        let mut blpop = |conn: &mut Conn, key: &str| {
            conn.input
                .extend_from_slice(format!("BLPOP {key} 0\r\n").as_bytes());
            let step = conn.process_with(&h.shared, |batch| {
                waits += 1;
                batch.wait()
            });
            assert_eq!(step, Step::Continue);
            assert!(conn.is_blocked(), "BLPOP {key} waits");
            assert!(conn.output.is_empty(), "no reply while blocked");
        };
        blpop(&mut conn, "q");
        let mut value = Vec::new();
        assert!(
            !h.shared
                .store
                .get(&crate::collection::type_key(b"q"), &mut value),
            "the expired list was purged"
        );
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut other = Conn::new(client);
        blpop(&mut other, "missing");
        assert_eq!(waits, 1, "only the batch that purged waits as a write");
    }

    // Goal: a pipeline of large reads is answered in rounds of bounded output, all of it,
    // in order. Method: ten GETs of a 1 MiB value in one input; count replies per round.
    #[test]
    fn large_replies_split_the_batch() {
        let h = Harness::new();
        let client = h.shared.new_client("a".into(), "b".into(), None);
        let mut conn = Conn::new(client);
        let value = vec![b'v'; 1024 * 1024];
        let mut set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(run(&mut conn, &h.shared, &set).1, b"+OK\r\n");
        conn.input.extend_from_slice(&b"GET k\r\n".repeat(10));
        conn.input.extend_from_slice(b"PING\r\n");
        let mut replies = 0;
        let mut rounds = 0;
        let mut last;
        loop {
            let step = conn.process(&h.shared);
            assert_eq!(step, Step::Continue);
            assert!(conn.output.len() <= BATCH_REPLY_BYTES_MAX + value.len() + 64);
            replies += conn
                .output
                .windows(9)
                .filter(|w| w == b"$1048576\r")
                .count();
            last = conn.output.clone();
            conn.sent();
            rounds += 1;
            if !conn.has_more() {
                break;
            }
        }
        assert_eq!(replies, 10);
        assert!(rounds >= 3, "{rounds}");
        assert!(last.ends_with(b"+PONG\r\n"));
        assert!(conn.input.is_empty());
    }
}
