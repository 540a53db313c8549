//! The tokio I/O model (`--io tokio`): connections are tasks on `--threads` worker threads
//! (one per core by default); the accept loop and each connection's reads and writes are
//! asynchronous, and a batch runs on the worker through [`Conn::process`]; only its
//! durability wait, when it wrote under `sync` or `group`, runs inside `block_in_place`, so
//! that the other tasks of that worker move to another thread meanwhile.
//!
//! Stop: the accept loop ends, a watch channel tells every connection to stop at its next
//! read (the batch it runs finishes and its replies go out), and after
//! [`crate::server::STOP_GRACE`] the tasks still running (clients that never read) are
//! aborted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::blocking::Wake;
use crate::cmd::script::{GateMark, RuntimeGate};
use crate::connection::{Conn, Leave, Step, BLOCKED_INPUT_BYTES_MAX, READ_BYTES};
use crate::pubsub::Mailbox;
use crate::server::{Shared, STOP_GRACE};

/// Runs the accept loop and the connections until the stop is requested.
pub fn run(shared: &Arc<Shared>, listener: std::net::TcpListener) {
    let threads = match shared.config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("forest-worker")
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("forest serve: cannot start the tokio runtime: {e}");
            shared.shutdown.request(false);
            return;
        }
    };
    runtime.block_on(accept_loop(Arc::clone(shared), listener));
}

async fn accept_loop(shared: Arc<Shared>, listener: std::net::TcpListener) {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("forest serve: cannot register the listener: {e}");
            return;
        }
    };
    let stop_requested = {
        let shutdown = Arc::clone(&shared.shutdown);
        tokio::task::spawn_blocking(move || shutdown.wait())
    };
    tokio::pin!(stop_requested);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    // Only a wait for an fsync blocks the worker long enough to hand its tasks over.
    let durable = if shared.config.durability.acks_durable() {
        Durable::BlockInPlace
    } else {
        Durable::Inline
    };
    loop {
        tokio::select! {
            _ = &mut stop_requested => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // EMFILE and the like: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                while connections.try_join_next().is_some() {}
                shared.stats.connections_received.fetch_add(1, Ordering::Relaxed);
                if shared.stats.connected_clients.load(Ordering::Relaxed)
                    >= shared.config.max_clients
                {
                    shared.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                    if let Ok(std_stream) = stream.into_std() {
                        let _ = std_stream.set_nonblocking(false);
                        crate::server::reject(std_stream);
                    }
                    continue;
                }
                shared.stats.connected_clients.fetch_add(1, Ordering::Relaxed);
                let conn_shared = Arc::clone(&shared);
                let stop = stop_rx.clone();
                let durable = durable.clone();
                connections.spawn(async move {
                    serve(&conn_shared, stream, stop, &durable, None, None).await;
                    conn_shared.stats.connected_clients.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
    }
    drop(listener);
    // A running script ends by itself (its time limit), a later one at once (`Scripts::stop`).
    shared.scripts.stop();
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(STOP_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// How a connection's task waits for a batch's durability.
#[derive(Clone, Debug)]
pub(crate) enum Durable {
    /// On the task (`periodic`: the wait only checks that the store has not failed).
    Inline,
    /// In `block_in_place`, so that the worker's other tasks move to another thread
    /// meanwhile (the multi-thread runtime).
    BlockInPlace,
    /// Awaiting the runtime's waiter thread, so that the runtime's thread serves its other
    /// connections meanwhile (the per-core model's `current_thread` runtimes, which have
    /// no other thread to hand them to).
    Await(Arc<crate::per_core::Waiter>),
}

/// Runs a batch and waits for its durability as `durable` says.
async fn process(conn: &mut Conn, shared: &Shared, durable: &Durable) -> Step {
    match durable {
        Durable::Inline => conn.process(shared),
        Durable::BlockInPlace => {
            conn.process_with(shared, |batch| tokio::task::block_in_place(|| batch.wait()))
        }
        Durable::Await(waiter) => {
            let pending = conn.begin(shared);
            let waited = if pending.wrote(conn) {
                waiter.durable().await
            } else {
                Ok(())
            };
            match waited {
                // Durable (or failed) by now: the wait returns at once.
                Ok(()) => conn.finish_with(shared, pending, |batch| batch.wait()),
                Err(e) => conn.finish_with(shared, pending, |_| Err(e)),
            }
        }
    }
}

/// Runs the batch [`Leave::Offload`] asked for on a blocking thread, and awaits it: the
/// runtime serves its other connections meanwhile (a script may run for seconds; SCRIPT KILL
/// from a connection of the same runtime stops it). None if that thread panicked.
/// One at a time ([`Shared::offloads`]): the others await their turn without a thread.
async fn offload(mut conn: Conn, shared: &Arc<Shared>) -> Option<(Conn, Step)> {
    // Never closed, so acquiring only waits.
    let _turn = shared.offloads.acquire().await.ok()?;
    let shared = Arc::clone(shared);
    tokio::task::spawn_blocking(move || {
        let step = conn.process_offloaded(&shared);
        (conn, step)
    })
    .await
    .ok()
}

/// Per-core: marks the runtime's gate once no script holds (or takes) the stripes, which a
/// blocked command's retry may wait for (see [`RuntimeGate`]); awaits their release
/// meanwhile (it polled every millisecond: review rev-pcscript F2).
async fn enter_gate<'g>(gate: &'g RuntimeGate, shared: &Shared) -> GateMark<'g> {
    loop {
        let inline = gate.enter();
        if !shared.scripts.holding() {
            return inline;
        }
        drop(inline);
        shared.scripts.released().await;
    }
}

/// Retries a blocked command after `wake` and waits for its durability as `durable` says.
async fn resume(conn: &mut Conn, shared: &Shared, wake: Wake, durable: &Durable) {
    let gate = conn.runtime_gate.clone();
    let mut inline = None;
    if let Some(gate) = &gate {
        inline = Some(enter_gate(gate, shared).await);
    }
    match durable {
        Durable::Inline => {
            conn.resume(shared, wake);
        }
        Durable::BlockInPlace => {
            conn.resume_with(shared, wake, |batch| {
                tokio::task::block_in_place(|| batch.wait())
            });
        }
        Durable::Await(waiter) => {
            let resumed = conn.resume_begin(shared, wake);
            // Not across the durability wait: a script would wait for it.
            drop(inline.take());
            let waited = if resumed.wrote() {
                waiter.durable().await
            } else {
                Ok(())
            };
            match waited {
                Ok(()) => conn.resume_finish_with(shared, resumed, |batch| batch.wait()),
                Err(e) => conn.resume_finish_with(shared, resumed, |_| Err(e)),
            };
        }
    }
}

/// Sends what `mailbox` holds; false if the connection must end (a write failed, or the
/// bound cut the subscriber, also while a write waits for a client that does not read).
async fn send_mailbox(stream: &mut TcpStream, mailbox: &Mailbox) -> bool {
    loop {
        if mailbox.is_killed() {
            return false;
        }
        let bytes = crate::pubsub::concat(mailbox.take());
        if bytes.is_empty() {
            return true;
        }
        tokio::select! {
            written = stream.write_all(&bytes) => {
                if written.is_err() {
                    return false;
                }
            }
            () = mailbox.kill.notified() => return false,
        }
    }
}

/// What ended one round of a blocked connection's wait.
enum Event {
    Woken,
    Wake(Wake),
    Read,
    Left,
    Message,
    Stopped,
}

/// Awaits the connection's waiter until its blocked command is answered (`crate::blocking`),
/// beside the socket (a client that leaves ends the wait at once; what it pipelines is kept
/// for after), the stop, and a subscriber's messages. False if the connection must end.
async fn wait_blocked(
    shared: &Shared,
    conn: &mut Conn,
    stream: &mut TcpStream,
    stopped: &mut (impl std::future::Future + Unpin),
    durable: &Durable,
) -> bool {
    while let Some(waiter) = conn.client.blocking.waiter() {
        let event = match waiter.poll() {
            Some(wake) => Event::Wake(wake),
            None => {
                let deadline = conn.client.blocking.deadline();
                let mailbox = conn.client.pubsub.mailbox().cloned();
                let room = conn.input.len() < BLOCKED_INPUT_BYTES_MAX;
                if room && conn.input.capacity() - conn.input.len() < READ_BYTES / 4 {
                    conn.input.reserve(READ_BYTES);
                }
                let timeout = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        None => std::future::pending().await,
                    }
                };
                let read = async {
                    if room {
                        stream.read_buf(&mut conn.input).await
                    } else {
                        std::future::pending().await
                    }
                };
                let message = async {
                    match &mailbox {
                        Some(mailbox) => mailbox.data.notified().await,
                        None => std::future::pending().await,
                    }
                };
                // The socket before the waiter: a client that left is noticed before it
                // is served (it would take an element it never reads).
                tokio::select! {
                    biased;
                    _ = &mut *stopped => Event::Stopped,
                    n = read => match n {
                        Ok(0) => Event::Left,
                        Ok(_) => Event::Read,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Event::Read,
                        Err(_) => Event::Left,
                    },
                    () = waiter.notify.notified() => Event::Woken,
                    () = timeout => Event::Wake(Wake::Timeout),
                    () = message => Event::Message,
                }
            }
        };
        match event {
            Event::Woken | Event::Read => {}
            Event::Left | Event::Stopped | Event::Wake(Wake::Stopped) => return false,
            Event::Message => {
                if let Some(mailbox) = conn.client.pubsub.mailbox().cloned() {
                    if !send_mailbox(stream, &mailbox).await {
                        return false;
                    }
                }
            }
            Event::Wake(wake) => resume(conn, shared, wake, durable).await,
        }
    }
    true
}

/// Serves one connection until it closes or the server stops (both tokio-based models;
/// `gate`: the per-core runtime's, see [`Conn::runtime_gate`]; `spin`: its busy-poll, told
/// of each read, see [`crate::per_core::Spin`]).
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    mut stop: watch::Receiver<bool>,
    durable: &Durable,
    gate: Option<Arc<RuntimeGate>>,
    spin: Option<&crate::per_core::Spin>,
) {
    let _ = stream.set_nodelay(true);
    let addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let laddr = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let client = shared.new_client(addr, laddr, None);
    let id = client.info.id;
    let mut conn = Conn::new(client);
    // Per-core: the runtime has no other thread to hand its connections to while a command
    // runs long; such commands run on a blocking thread (`Conn::runtime_gate`).
    conn.runtime_gate = gate;
    let partial_timeout = shared.config.partial_frame_timeout;
    let mut step = Step::Continue;
    // Registered once: a fresh wait per read would lock the channel's waiter list each time,
    // which every connection shares.
    let stopped = stop.wait_for(|stopped| *stopped);
    tokio::pin!(stopped);
    while step == Step::Continue {
        // A subscriber's replies and messages go through its mailbox (crate::pubsub).
        let mailbox = conn.client.pubsub.mailbox().cloned();
        if let Some(mailbox) = &mailbox {
            if !send_mailbox(&mut stream, mailbox).await {
                break;
            }
        }
        if conn.is_blocked() {
            if !wait_blocked(shared, &mut conn, &mut stream, &mut stopped, durable).await {
                break;
            }
            if stream.write_all(&conn.output).await.is_err() {
                break;
            }
            conn.sent();
            continue;
        }
        if conn.has_more() {
            match conn.left() {
                Some(Leave::Offload) => {
                    let Some((back, ran)) = offload(conn, shared).await else {
                        // Its thread panicked: the connection's state went with it.
                        shared.drop_client(id);
                        let _ = stream.shutdown().await;
                        return;
                    };
                    (conn, step) = (back, ran);
                }
                Some(Leave::AfterScript) => {
                    // The server's stop kills the script (`Scripts::stop`): bounded.
                    shared.scripts.released().await;
                    step = process(&mut conn, shared, durable).await;
                }
                None => step = process(&mut conn, shared, durable).await,
            }
            if stream.write_all(&conn.output).await.is_err() {
                break;
            }
            conn.sent();
            continue;
        }
        if conn.input.capacity() - conn.input.len() < READ_BYTES / 4 {
            conn.input.reserve(READ_BYTES);
        }
        let read = async {
            if conn.has_partial() {
                tokio::time::timeout(partial_timeout, stream.read_buf(&mut conn.input))
                    .await
                    .unwrap_or(Ok(0))
            } else {
                stream.read_buf(&mut conn.input).await
            }
        };
        let message = async {
            match &mailbox {
                Some(mailbox) => mailbox.data.notified().await,
                None => std::future::pending().await,
            }
        };
        let n = tokio::select! {
            biased;
            _ = &mut stopped => break,
            n = read => n,
            () = message => continue,
        };
        match n {
            Ok(0) => {
                if conn.has_partial() {
                    conn.incomplete_error();
                    let _ = stream.write_all(&conn.output).await;
                }
                break;
            }
            Ok(_) => {
                if let Some(spin) = spin {
                    spin.read();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        step = process(&mut conn, shared, durable).await;
        if !conn.output.is_empty() {
            if stream.write_all(&conn.output).await.is_err() {
                break;
            }
            conn.sent();
        }
        if let Some(mailbox) = conn.client.pubsub.mailbox().cloned() {
            if !send_mailbox(&mut stream, &mailbox).await {
                break;
            }
        }
    }
    // Unsubscribed before the socket closes: a client that saw the close publishes to none.
    conn.client.pubsub.unsubscribe_all();
    shared.drop_client(id);
    let _ = stream.shutdown().await;
    if let Step::Shutdown { save } = step {
        shared.shutdown.request(save);
    }
}
