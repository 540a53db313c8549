//! The per-core I/O model (`--io per-core`, the default): `--threads` OS threads (one per
//! core by default), each running its own `current_thread` tokio runtime, and one acceptor
//! that hands each new connection to the runtime serving the fewest. A connection stays on
//! its runtime: its reads, commands, writes and wake-ups never cross threads (no
//! work-stealing hand-offs), as in Redis's event loop, one loop per core.
//!
//! A connection's task is the tokio model's ([`crate::tokio_io::serve`]); only the
//! durability wait differs. A `current_thread` runtime has no other thread to hand its
//! tasks to, so a batch that wrote under `sync` or `group` must not block the thread in
//! [`forest_store::Batch::wait`]: its task asks the runtime's [`Waiter`] thread to make the
//! store durable and awaits the answer, while the runtime serves its other connections.
//! The waiter runs one [`forest_store::Store::sync`] for every request queued meanwhile (the
//! LSNs of every batch that asked are allocated before it asks, so one sync covers them
//! all); the batch's own wait then returns at once, with the error if the sync failed.
//!
//! Long commands: a script (EVAL and its kin, an EXEC that queued one) and SAVE run on a
//! blocking thread (`spawn_blocking`; the connection's state moves there and back), so that
//! the runtime serves its other connections meanwhile, SCRIPT KILL included. While a script
//! holds (or is about to take) every stripe lock, a command that may wait for those locks
//! awaits the script's end on the runtime instead ([`crate::connection::Leave`]; no thread
//! per waiting command), as a blocked command's retry does; the runtime's [`RuntimeGate`]
//! keeps a command that began inline from meeting a script that took them after it looked
//! (`crate::connection`). A script stops when the server stops (`Scripts::stop`).
//!
//! Busy-poll (`--busy-poll-us`, [`crate::server::Config::busy_poll`]; off by default): a
//! runtime that runs out of work sleeps in epoll_wait, and the client's next request then pays
//! a wake-up (the scheduler on both sides; with two runtimes on a 2-core machine forest woke
//! 1.4-2.3x as often per unpipelined request as redis-server's one loop: BENCHMARKS, issue 15,
//! sessions 15, 17 and 18). With a window set, each runtime runs a [`Spin`] task that, for that
//! long after the last read of one of its connections, yields instead of letting the runtime
//! park: tokio then polls its driver without blocking (`epoll_wait` with a zero timeout), and a
//! request that arrives within the window is read without a sleep and a wake-up
//! (`--busy-poll-yield`: with a `sched_yield` between polls, so that a thread runnable on that
//! core runs first). Tokio has no such knob; the kernel's `SO_BUSY_POLL` needs a NIC driver
//! that busy-polls its queues, which loopback has not.
//!
//! Stop: the acceptor stops accepting, a watch channel tells every connection to stop at
//! its next read (the batch it runs finishes and its replies go out), and after
//! [`crate::server::STOP_GRACE`] each runtime aborts its tasks still running (clients that
//! never read).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::cmd::script::RuntimeGate;
use crate::server::{Shared, STOP_GRACE};
use crate::tokio_io::Durable;

/// The name of a runtime's blocking threads (scripts, SAVE), as `top -H` and /proc show it.
const BLOCKING_THREAD_NAME: &str = "forest-blk";

/// The store's sync, as a waiter runs it.
type SyncFn = dyn Fn() -> forest_core::Result<()> + Send + Sync;

/// A runtime's durability waiter: a thread that blocks in the store's sync on behalf of
/// the runtime's tasks (see the module doc).
pub struct Waiter {
    queue: Mutex<Queue>,
    work: Condvar,
    /// The store's directory, for the error of a wait whose sync panicked.
    dir: PathBuf,
    sync: Arc<SyncFn>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("queue", &self.queue)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<oneshot::Sender<()>>,
    stop: bool,
    /// The thread panicked.
    failed: bool,
}

/// The error of a wait whose waiter thread panicked: whether the write is durable is
/// unknown, so it is not acknowledged.
fn waiter_failed(dir: &Path) -> forest_core::Error {
    forest_core::Error::Io {
        path: dir.to_path_buf(),
        op: "sync",
        source: std::io::Error::other("the I/O thread's durability waiter panicked"),
    }
}

impl Waiter {
    /// A waiter for the store in `dir` whose sync is `sync`; [`Self::run`] is its thread.
    pub fn new(
        dir: PathBuf,
        sync: impl Fn() -> forest_core::Result<()> + Send + Sync + 'static,
    ) -> Self {
        Self {
            queue: Mutex::default(),
            work: Condvar::new(),
            dir,
            sync: Arc::new(sync),
        }
    }

    /// Returns once every write logged before the call is durable, or the store failed
    /// (the batch's own wait then reports the error); an error if the sync that served it
    /// panicked. Once the waiter thread panicked, each wait runs the sync on a blocking
    /// thread of the runtime instead (review rev-pcore F6: such writes were applied but
    /// answered "not acknowledged", so a client retrying an INCR applied it twice).
    pub async fn durable(&self) -> forest_core::Result<()> {
        let (tx, rx) = oneshot::channel();
        let failed = {
            let mut queue = self.queue.lock();
            if !queue.failed && !queue.stop {
                queue.waiting.push(tx);
            }
            (queue.failed, queue.stop)
        };
        match failed {
            (true, _) => self.sync_on_a_blocking_thread().await,
            (false, true) => Ok(()),
            (false, false) => {
                self.work.notify_one();
                // A sender dropped unanswered: the thread panicked, in this wait's `sync` or
                // before it took this wait (the panic's unwinding drops the senders before its
                // guard marks the queue failed: review rev-coll F2). Sync here instead; an
                // error only if that panics too.
                match rx.await {
                    Ok(()) => Ok(()),
                    Err(_) => self.sync_on_a_blocking_thread().await,
                }
            }
        }
    }

    /// One `sync` on a blocking thread of the runtime; an error if it panicked.
    async fn sync_on_a_blocking_thread(&self) -> forest_core::Result<()> {
        let sync = Arc::clone(&self.sync);
        // A result's error is the batch's to report, as in `run`.
        tokio::task::spawn_blocking(move || drop(sync()))
            .await
            .map_err(|_| waiter_failed(&self.dir))
    }

    /// The waiter thread's loop: one `sync` per round of requests, until stopped. If it
    /// panics, the waits it held are answered (rev-io low finding: they were never answered):
    /// each syncs on a blocking thread, as every later one does ([`Self::durable`]).
    pub fn run(&self) {
        let _failed = OnPanic(|| {
            let mut queue = self.queue.lock();
            queue.failed = true;
            queue.waiting.clear();
        });
        loop {
            let waiting = {
                let mut queue = self.queue.lock();
                while queue.waiting.is_empty() && !queue.stop {
                    self.work.wait(&mut queue);
                }
                if queue.waiting.is_empty() {
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            // An error is the batch's to report: its wait returns it at once.
            let _ = (self.sync)();
            for tx in waiting {
                let _ = tx.send(());
            }
        }
    }

    /// Ends the thread once the requests queued are answered.
    fn stop(&self) {
        self.queue.lock().stop = true;
        self.work.notify_all();
    }
}

/// A runtime's busy-poll (see the module doc): its connections count their reads here, and
/// its [`spin`] task keeps the runtime from parking for a window after the last one.
#[derive(Debug, Default)]
pub(crate) struct Spin {
    /// Reads that returned bytes. Only the runtime's thread touches it (atomics because
    /// tasks must be `Send`): a load and a store, no locked instruction per read.
    reads: AtomicU64,
    /// The task waits for the next read instead of spinning.
    idle: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Spin {
    /// A connection of the runtime read a request's bytes.
    pub(crate) fn read(&self) {
        self.reads
            .store(self.reads.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if self.idle.load(Ordering::Relaxed) {
            self.idle.store(false, Ordering::Relaxed);
            // A permit if the task is not waiting yet: no wake is lost.
            self.wake.notify_one();
        }
    }
}

/// The busy-poll task of a runtime: after a read, yields (the runtime then polls its driver
/// with a zero timeout rather than sleeping) until `window` has passed without a read, then
/// waits for the next read; `polite`: gives the core to another runnable thread between
/// polls (`sched_yield`). Runs until the runtime drops it.
async fn spin(spin: Arc<Spin>, window: Duration, polite: bool) {
    loop {
        spin.idle.store(true, Ordering::Relaxed);
        spin.wake.notified().await;
        let mut seen = spin.reads.load(Ordering::Relaxed);
        let mut last = Instant::now();
        loop {
            tokio::task::yield_now().await;
            let reads = spin.reads.load(Ordering::Relaxed);
            if reads != seen {
                seen = reads;
                last = Instant::now();
            } else if last.elapsed() >= window {
                break;
            } else if polite {
                // A thread runnable on this core (a client on the same machine) runs first; a
                // no-op when none is.
                std::thread::yield_now();
            }
        }
    }
}

/// Runs its closure when dropped during a panic.
struct OnPanic<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            (self.0)();
        }
    }
}

/// One runtime's thread, as the acceptor sees it.
struct Core {
    /// New connections for the runtime.
    incoming: mpsc::UnboundedSender<std::net::TcpStream>,
    /// Connections it serves now.
    load: Arc<AtomicUsize>,
    thread: JoinHandle<()>,
}

/// Runs the acceptor on the calling thread and the connections on `--threads` runtimes
/// until the stop is requested.
pub fn run(shared: &Arc<Shared>, listener: std::net::TcpListener) {
    let threads = match shared.config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut cores = Vec::with_capacity(threads);
    for index in 0..threads {
        match start_core(shared, index, stop_rx.clone()) {
            Ok(core) => cores.push(core),
            Err(e) => {
                eprintln!("forest serve: cannot start I/O thread {index}: {e}");
                break;
            }
        }
    }
    if cores.is_empty() {
        shared.shutdown.request(false);
        return;
    }
    let acceptor = tokio::runtime::Builder::new_current_thread()
        .thread_name("forest-accept")
        .enable_io()
        .enable_time()
        .build();
    match acceptor {
        Ok(rt) => rt.block_on(accept_loop(shared, listener, &cores)),
        Err(e) => {
            eprintln!("forest serve: cannot start the acceptor's runtime: {e}");
            shared.shutdown.request(false);
        }
    }
    // Connections see the stop at their next read; the runtimes end once theirs are done,
    // a running script's too (it runs to its end: `Scripts::stop`).
    shared.scripts.stop();
    let _ = stop_tx.send(true);
    for core in cores {
        drop(core.incoming);
        let _ = core.thread.join();
    }
}

/// Starts runtime `index` on its own thread, with its durability waiter. A waiter that
/// cannot start fails the runtime's start (it was left waiting inline, blocking its
/// thread in every fsync: rev-io low finding).
fn start_core(
    shared: &Arc<Shared>,
    index: usize,
    stop: watch::Receiver<bool>,
) -> std::io::Result<Core> {
    let (incoming, receiver) = mpsc::unbounded_channel();
    let load = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name(BLOCKING_THREAD_NAME)
        .enable_io()
        .enable_time()
        .build()?;
    let durable = if shared.config.durability.acks_durable() {
        let sync_shared = Arc::clone(shared);
        let waiter = Arc::new(Waiter::new(shared.config.dir.clone(), move || {
            sync_shared.store.sync()
        }));
        let thread_waiter = Arc::clone(&waiter);
        let handle = std::thread::Builder::new()
            .name(format!("forest-wait-{index}"))
            .spawn(move || thread_waiter.run())?;
        Some((waiter, handle))
    } else {
        None
    };
    let mode = match &durable {
        Some((waiter, _)) => Durable::Await(Arc::clone(waiter)),
        None => Durable::Inline,
    };
    let stop_waiter = durable.as_ref().map(|(waiter, _)| Arc::clone(waiter));
    let shared = Arc::clone(shared);
    let core_load = Arc::clone(&load);
    let spawned = std::thread::Builder::new()
        .name(format!("forest-io-{index}"))
        .spawn(move || {
            let gate = shared.scripts.runtime_gate();
            runtime.block_on(serve_core(
                &shared, receiver, stop, &core_load, &mode, &gate,
            ));
            drop(runtime);
            if let Some((waiter, handle)) = durable {
                waiter.stop();
                let _ = handle.join();
            }
        });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => {
            // The closure, and with it the waiter's handle, is gone: the thread ends alone.
            if let Some(waiter) = stop_waiter {
                waiter.stop();
            }
            return Err(e);
        }
    };
    Ok(Core {
        incoming,
        load,
        thread,
    })
}

/// The acceptor: bounds the clients and hands each connection to the runtime serving the
/// fewest (the lowest index on a tie, after the last one chosen: round-robin when even).
async fn accept_loop(shared: &Arc<Shared>, listener: std::net::TcpListener, cores: &[Core]) {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("forest serve: cannot register the listener: {e}");
            shared.shutdown.request(false);
            return;
        }
    };
    let stop_requested = {
        let shutdown = Arc::clone(&shared.shutdown);
        tokio::task::spawn_blocking(move || shutdown.wait())
    };
    tokio::pin!(stop_requested);
    let mut last = cores.len() - 1;
    loop {
        let accepted = tokio::select! {
            _ = &mut stop_requested => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // EMFILE and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        if shared.stats.connected_clients.load(Ordering::Relaxed) >= shared.config.max_clients {
            shared
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nonblocking(false);
            crate::server::reject(stream);
            continue;
        }
        let chosen = (1..=cores.len())
            .map(|step| (last + step) % cores.len())
            .min_by_key(|&i| cores[i].load.load(Ordering::Relaxed))
            .unwrap_or(0);
        last = chosen;
        shared
            .stats
            .connected_clients
            .fetch_add(1, Ordering::Relaxed);
        cores[chosen].load.fetch_add(1, Ordering::Relaxed);
        if let Err(returned) = cores[chosen].incoming.send(stream) {
            // The runtime is gone (it could not start its waiter): nobody serves it.
            drop(returned);
            shared
                .stats
                .connected_clients
                .fetch_sub(1, Ordering::Relaxed);
            cores[chosen].load.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One runtime: serves the connections the acceptor hands it until the acceptor is gone,
/// then lets them finish (see the module doc's stop).
async fn serve_core(
    shared: &Arc<Shared>,
    mut incoming: mpsc::UnboundedReceiver<std::net::TcpStream>,
    stop: watch::Receiver<bool>,
    load: &Arc<AtomicUsize>,
    durable: &Durable,
    gate: &Arc<RuntimeGate>,
) {
    let mut connections = JoinSet::new();
    let busy_poll = (!shared.config.busy_poll.is_zero()).then(|| {
        let state = Arc::new(Spin::default());
        let task = tokio::spawn(spin(
            Arc::clone(&state),
            shared.config.busy_poll,
            shared.config.busy_poll_yield,
        ));
        (state, task)
    });
    while let Some(stream) = incoming.recv().await {
        while connections.try_join_next().is_some() {}
        let conn_shared = Arc::clone(shared);
        let conn_load = Arc::clone(load);
        let stop = stop.clone();
        let durable = durable.clone();
        let gate = Arc::clone(gate);
        let spin = busy_poll.as_ref().map(|(state, _)| Arc::clone(state));
        connections.spawn(async move {
            // `into_std` left it non-blocking; registered with this thread's runtime.
            if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                crate::tokio_io::serve(
                    &conn_shared,
                    stream,
                    stop,
                    &durable,
                    Some(gate),
                    spin.as_deref(),
                )
                .await;
            }
            conn_shared
                .stats
                .connected_clients
                .fetch_sub(1, Ordering::Relaxed);
            conn_load.fetch_sub(1, Ordering::Relaxed);
        });
    }
    let drained = tokio::time::timeout(STOP_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    if let Some((_, task)) = busy_poll {
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::Path;

    use forest_core::Result;
    use forest_store::file::{Dir, DirLock, File, SimDir};
    use forest_store::{Durability, Store, StoreOptions};

    use super::*;
    use crate::server::{Config, IoModel};

    /// Holds every fsync while closed.
    #[derive(Default)]
    struct Gate {
        closed: Mutex<bool>,
        opened: Condvar,
    }

    impl Gate {
        fn set(&self, closed: bool) {
            *self.closed.lock() = closed;
            self.opened.notify_all();
        }

        fn pass(&self) {
            let mut closed = self.closed.lock();
            while *closed {
                self.opened.wait(&mut closed);
            }
        }
    }

    /// A simulated directory whose file syncs wait at the gate.
    struct GatedDir {
        inner: SimDir,
        gate: Arc<Gate>,
    }

    struct GatedFile {
        inner: Box<dyn File>,
        gate: Arc<Gate>,
    }

    impl File for GatedFile {
        fn path(&self) -> &Path {
            self.inner.path()
        }
        fn len(&self) -> Result<u64> {
            self.inner.len()
        }
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            self.inner.read_exact_at(offset, buf)
        }
        fn append(&mut self, data: &[u8]) -> Result<()> {
            self.inner.append(data)
        }
        fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            self.inner.write_at(offset, data)
        }
        fn truncate(&mut self, len: u64) -> Result<()> {
            self.inner.truncate(len)
        }
        fn sync(&mut self) -> Result<()> {
            self.gate.pass();
            self.inner.sync()
        }
    }

    impl GatedDir {
        fn wrap(&self, file: Box<dyn File>) -> Box<dyn File> {
            Box::new(GatedFile {
                inner: file,
                gate: Arc::clone(&self.gate),
            })
        }
    }

    impl Dir for GatedDir {
        fn path(&self) -> &Path {
            self.inner.path()
        }
        fn create(&self, name: &str) -> Result<Box<dyn File>> {
            Ok(self.wrap(self.inner.create(name)?))
        }
        fn open(&self, name: &str) -> Result<Box<dyn File>> {
            Ok(self.wrap(self.inner.open(name)?))
        }
        fn exists(&self, name: &str) -> Result<bool> {
            self.inner.exists(name)
        }
        fn list(&self) -> Result<Vec<String>> {
            self.inner.list()
        }
        fn rename(&self, from: &str, to: &str) -> Result<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, name: &str) -> Result<()> {
            self.inner.remove(name)
        }
        fn sync_dir(&self) -> Result<()> {
            self.inner.sync_dir()
        }
        fn sync_parent(&self) -> Result<()> {
            self.inner.sync_parent()
        }
        fn lock(&self) -> Result<DirLock> {
            self.inner.lock()
        }
    }

    // Goal (rev-io low finding): a waiter thread that panics in its sync answers the wait
    // it served with an error, at once, and a later one too when its own sync (on a
    // blocking thread since rev-pcore F6) panics as well.
    // Method: a waiter whose sync always panics, on its own thread; two waits on a runtime,
    // each bounded by 10 s. Without the drop guard the second wait was never answered.
    #[test]
    fn a_panicking_waiter_answers_every_wait_with_an_error() {
        let waiter = Arc::new(Waiter::new(PathBuf::from("dir"), || -> Result<()> {
            panic!("injected: sync")
        }));
        let thread = {
            let waiter = Arc::clone(&waiter);
            std::thread::spawn(move || waiter.run())
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            for which in ["the wait it served", "a later wait"] {
                let waited = tokio::time::timeout(Duration::from_secs(10), waiter.durable())
                    .await
                    .unwrap_or_else(|_| panic!("{which} was never answered"));
                let error = waited.expect_err(which).to_string();
                assert!(
                    error.contains("durability waiter panicked"),
                    "{which}: {error}"
                );
            }
        });
        assert!(thread.join().is_err(), "the waiter did not panic");
    }

    // Goal (review rev-pcore F6): after the waiter thread panicked, a later write on its
    // runtime is still made durable and acknowledged (it was applied but answered "not
    // acknowledged", so a client retrying an INCR applied it twice).
    // Method: a waiter whose sync panics once, then counts its calls; the wait it served and
    // later waits succeed, each only after a sync that began after it asked.
    #[test]
    fn a_wait_after_the_waiter_panicked_is_made_durable() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let syncs = Arc::clone(&syncs);
            Arc::new(Waiter::new(PathBuf::from("dir"), move || -> Result<()> {
                if syncs.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("injected: sync");
                }
                Ok(())
            }))
        };
        let thread = {
            let waiter = Arc::clone(&waiter);
            std::thread::spawn(move || waiter.run())
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let served = tokio::time::timeout(Duration::from_secs(10), waiter.durable())
                .await
                .expect("the wait it served was never answered");
            // Its sender was dropped by the panic: it syncs again on a blocking thread and is
            // acknowledged once that sync returned (review rev-coll F2: a wait queued while the
            // panic unwound was answered "not acknowledged" too, its write applied).
            served.unwrap_or_else(|e| panic!("the served wait: {e}"));
            assert!(
                syncs.load(Ordering::SeqCst) >= 2,
                "acknowledged without a sync"
            );
            for round in 0..2 {
                let before = syncs.load(Ordering::SeqCst);
                tokio::time::timeout(Duration::from_secs(10), waiter.durable())
                    .await
                    .expect("a later wait was never answered")
                    .unwrap_or_else(|e| panic!("later wait {round}: {e}"));
                assert!(
                    syncs.load(Ordering::SeqCst) > before,
                    "later wait {round} was answered without a sync"
                );
            }
        });
        assert!(thread.join().is_err(), "the waiter did not panic");
    }

    // Goal: the busy-poll keeps its runtime from parking only for its window after a read,
    // then waits for the next read (a runtime that spun on would burn a core on an idle
    // server), and a read starts it again.
    // Method: a `current_thread` runtime counting its parks (`on_thread_park`) with the spin
    // task (window 1 s; plain, then polite); after a read, a 10 ms sleep of the test's task
    // does not park the runtime (without the spin it parks in that sleep); then, with no read,
    // the task goes idle and the runtime parks again (bounded by 60 s); a new read restarts
    // the spin. A sample whose sleep outlasted half the window (the machine stalled the
    // thread) is void and taken again, so a slow machine cannot fail it. The window was 5 s,
    // which spun a CI core for 20 s.
    #[test]
    fn the_busy_poll_spins_for_its_window_after_a_read_then_sleeps() {
        busy_poll_spins_for_its_window(false);
        busy_poll_spins_for_its_window(true);
    }

    fn busy_poll_spins_for_its_window(polite: bool) {
        let parks = Arc::new(AtomicUsize::new(0));
        let runtime = {
            let parks = Arc::clone(&parks);
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .on_thread_park(move || {
                    parks.fetch_add(1, Ordering::SeqCst);
                })
                .build()
                .expect("runtime")
        };
        runtime.block_on(async {
            let state = Arc::new(Spin::default());
            let window = Duration::from_secs(1);
            let task = tokio::spawn(spin(Arc::clone(&state), window, polite));
            let idle = || state.idle.load(Ordering::Relaxed);
            let until_idle = async {
                while !idle() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(60), until_idle)
                .await
                .expect("the spin task never waited");
            for round in 0..2 {
                let mut void_count = 0;
                loop {
                    state.read();
                    // Lets the task take the read and begin spinning.
                    tokio::task::yield_now().await;
                    let before = parks.load(Ordering::SeqCst);
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if parks.load(Ordering::SeqCst) == before {
                        break;
                    }
                    assert!(
                        start.elapsed() > window / 2 && void_count < 20,
                        "round {round}: the runtime parked within the window"
                    );
                    void_count += 1;
                }
                let until_idle = async {
                    while !idle() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                tokio::time::timeout(Duration::from_secs(60), until_idle)
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: the spin never ended"));
                let before = parks.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                assert!(
                    parks.load(Ordering::SeqCst) > before,
                    "round {round}: the runtime did not park after the window"
                );
            }
            task.abort();
        });
    }

    fn roundtrip(stream: &mut TcpStream, request: &[u8], reply: &[u8]) {
        stream.write_all(request).expect("send");
        let mut got = vec![0u8; reply.len()];
        stream.read_exact(&mut got).expect("reply");
        assert_eq!(got, reply, "{}", String::from_utf8_lossy(request));
    }

    // Goal: on a per-core runtime a write's durability wait (`group`) yields: the other
    // connections of its runtime are served while the write's fsync is held, and the
    // write's reply comes only after the fsync (the crux of a `current_thread` runtime).
    // Method: one runtime, a directory whose fsyncs wait at a gate; close the gate, send a
    // SET on one connection, then a GET on another (answered at once), check that the SET
    // is unanswered, open the gate and read its reply.
    #[test]
    fn a_durability_wait_does_not_stall_its_runtime() {
        let gate = Arc::new(Gate::default());
        let dir = GatedDir {
            inner: SimDir::new(7),
            gate: Arc::clone(&gate),
        };
        let store = Store::open(
            dir,
            StoreOptions {
                engine: Some("lockbtree".into()),
                durability: Durability::Group,
                shards: 1,
                switch_engine: false,
                memory_budget_bytes: None,
                map_checkpoint_wal_bytes: None,
            },
        )
        .expect("open store");
        let config = Config {
            durability: Durability::Group,
            io: IoModel::PerCore,
            threads: 1,
            ..Config::default()
        };
        let shared = Arc::new(Shared::new(store, config));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || run(&shared, listener))
        };
        let connect = || {
            let stream = TcpStream::connect(addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            stream
        };
        let (mut writer, mut reader) = (connect(), connect());
        roundtrip(&mut writer, b"SET k 1\r\n", b"+OK\r\n");
        roundtrip(&mut reader, b"PING\r\n", b"+PONG\r\n");
        gate.set(true);
        writer.write_all(b"SET k 2\r\n").expect("send");
        // Given time to reach its wait, the SET holds its reply; the runtime still serves.
        std::thread::sleep(Duration::from_millis(100));
        roundtrip(&mut reader, b"GET k\r\n", b"$1\r\n2\r\n");
        writer
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut early = [0u8; 5];
        let unanswered = writer.read(&mut early);
        assert!(
            matches!(&unanswered, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "the SET was answered before its fsync: {unanswered:?} {early:?}"
        );
        gate.set(false);
        writer
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        writer.read_exact(&mut early).expect("the SET's reply");
        assert_eq!(&early, b"+OK\r\n");
        shared.shutdown.request(false);
        server.join().expect("server thread");
    }
}
