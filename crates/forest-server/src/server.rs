//! The server: configuration, the state all connections share, the accept loop with its
//! client bound, and the orderly stop (DESIGN.md "Server"; masstree.md §5).
//!
//! I/O models ([`IoModel`]): `per-core` (the default since session 14) runs connections as
//! tasks on `--threads` single-threaded runtimes, each connection staying on one
//! ([`crate::per_core`]); `threads` runs one OS thread per connection, blocking reads and
//! writes (a slow client blocks only its own thread); `tokio` runs connections as tasks on
//! a multi-thread runtime of `--threads` workers ([`crate::tokio_io`]). All run a
//! connection's pipelined commands as one batch ([`crate::connection`]).
//!
//! Invariants:
//! - At most `max_clients` connections are served at once; the next one gets
//!   `-ERR max number of clients reached` and is closed.
//! - Stop (SIGINT, SIGTERM, SHUTDOWN): the listener closes first, then every connection's
//!   read side, so each finishes the batch it is running and sends its replies; after a grace
//!   period the stragglers (clients that do not read) are cut; then the store is closed,
//!   which makes the log durable.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown as NetShutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use forest_core::Result;
use forest_store::{Durability, Store, StoreOptions};
use parking_lot::Mutex;

use crate::cmd::Client;
use crate::collection::Collections;
use crate::expiry::Expires;
use crate::frame::Protocol;
use crate::shutdown::Shutdown;

/// The default client bound (Redis's `maxclients` default).
pub const MAX_CLIENTS_DEFAULT: usize = 10_000;
/// How long a stop waits for connections to finish their batch and send the replies before
/// it cuts them (a client that never reads would otherwise hold the stop forever).
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Stack of a connection thread: commands recurse nowhere deep (frames nest at most
/// [`crate::frame::DEPTH_MAX`]), and 10 000 threads must fit.
pub const CONNECTION_STACK_BYTES: usize = 256 * 1024;
/// [`Config::busy_poll`]'s default (`--busy-poll-us`): off, as measured so far (BENCHMARKS,
/// issue 15, session 18: on a loaded machine a window cut the wake-ups, not the cost).
pub const BUSY_POLL_DEFAULT: Duration = Duration::from_micros(0);
/// SCAN cursors remembered at once; older ones are forgotten (`-ERR invalid cursor`).
pub const CURSOR_COUNT_MAX: usize = 16_384;
/// Bytes of resume keys the SCAN cursors may hold at once (keys are up to 16 KiB).
pub const CURSOR_BYTES_MAX: usize = 32 * 1024 * 1024;

/// How connections are driven.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoModel {
    /// Tokio tasks on `threads` single-threaded runtimes, one thread each; a connection
    /// stays on the runtime the acceptor gave it. The default (session 14).
    #[default]
    PerCore,
    /// A thread per connection.
    Threads,
    /// Tokio tasks on a multi-thread runtime of `threads` workers.
    Tokio,
}

impl std::str::FromStr for IoModel {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "threads" => Ok(IoModel::Threads),
            "tokio" => Ok(IoModel::Tokio),
            "per-core" => Ok(IoModel::PerCore),
            _ => Err(format!(
                "io model {s:?}: expected per-core, threads or tokio"
            )),
        }
    }
}

impl std::fmt::Display for IoModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoModel::Threads => "threads",
            IoModel::Tokio => "tokio",
            IoModel::PerCore => "per-core",
        })
    }
}

/// `forest serve`'s settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub dir: PathBuf,
    /// The engine spec; None: the one recorded in the directory, or the store's default
    /// for a new one.
    pub engine: Option<String>,
    /// Open with `engine` even if the directory recorded another (`StoreOptions`).
    pub switch_engine: bool,
    pub durability: Durability,
    pub bind: String,
    /// 0: an ephemeral port.
    pub port: u16,
    /// Threads of the per-core and tokio models (0: one per core).
    pub threads: usize,
    /// Per-core model: how long a runtime keeps polling for readiness after its last read
    /// before it sleeps in epoll_wait (`crate::per_core`'s busy-poll); zero: it sleeps at once.
    pub busy_poll: Duration,
    /// With `busy_poll`: give the core to another runnable thread between polls
    /// (`sched_yield`), e.g. a client on the same machine.
    pub busy_poll_yield: bool,
    pub max_clients: usize,
    pub requirepass: Option<String>,
    pub io: IoModel,
    /// How long half a command may wait for its next bytes before the connection gets a
    /// protocol error and is closed.
    pub partial_frame_timeout: Duration,
    /// Subscribers' output bound (Redis's `client-output-buffer-limit pubsub`).
    pub pubsub_limits: crate::pubsub::Limits,
    /// Engine bwtree on its LSS, evicting pages above this many resident bytes
    /// (`StoreOptions::memory_budget_bytes`); None: all in memory. Other engines refuse it.
    pub memory_budget_bytes: Option<u64>,
    /// With a memory budget: a map checkpoint of the LSS every this many WAL bytes, and
    /// recovery from it (`StoreOptions::map_checkpoint_wal_bytes`); None: none taken.
    pub map_checkpoint_wal_bytes: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("./forest-data"),
            engine: None,
            switch_engine: false,
            durability: Durability::default(),
            bind: "127.0.0.1".to_string(),
            port: 6379,
            threads: 0,
            busy_poll: BUSY_POLL_DEFAULT,
            busy_poll_yield: false,
            max_clients: MAX_CLIENTS_DEFAULT,
            requirepass: None,
            io: IoModel::default(),
            partial_frame_timeout: crate::connection::PARTIAL_FRAME_TIMEOUT,
            pubsub_limits: crate::pubsub::Limits::default(),
            memory_budget_bytes: None,
            map_checkpoint_wal_bytes: Some(forest_store::llama::MAP_CHECKPOINT_WAL_BYTES_DEFAULT),
        }
    }
}

/// What CLIENT LIST shows of a connection.
#[derive(Debug)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub created: Instant,
    /// Milliseconds since the server started, at the last batch.
    pub active_ms: AtomicU64,
    pub meta: Mutex<ClientMeta>,
    /// A handle to cut the connection at stop (threads model).
    pub stream: Option<TcpStream>,
}

/// The mutable names of a connection.
#[derive(Debug, Default)]
pub struct ClientMeta {
    pub name: String,
    pub lib_name: String,
    pub lib_ver: String,
    pub last_command: &'static str,
    pub resp: u8,
    /// The connection's state for CLIENT LIST, as of its last command batch
    /// ([`crate::cmd::Client::publish_state`]).
    pub state: ClientState,
}

/// What CLIENT LIST shows of a connection's subscriptions and transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientState {
    /// Channels and patterns subscribed to.
    pub sub: usize,
    pub psub: usize,
    /// Commands queued since MULTI; None outside MULTI (Redis's `multi=-1`).
    pub multi: Option<usize>,
    /// Keys watched.
    pub watch: usize,
    /// A watched key was written since WATCH (flag `d`).
    pub dirty: bool,
    /// A blocking command waits (flag `b`).
    pub blocked: bool,
}

impl ClientState {
    /// Redis's `flags=`: `P` subscribed, `x` in MULTI, `b` blocked, `d` watched key
    /// touched; `N` none.
    pub fn flags(&self) -> String {
        let mut f = String::new();
        if self.sub + self.psub > 0 {
            f.push('P');
        }
        if self.multi.is_some() {
            f.push('x');
        }
        if self.blocked {
            f.push('b');
        }
        if self.dirty {
            f.push('d');
        }
        if f.is_empty() {
            f.push('N');
        }
        f
    }
}

/// Counters for INFO.
#[derive(Debug)]
pub struct ServerStats {
    pub started: Instant,
    pub commands_processed: AtomicU64,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub connected_clients: AtomicUsize,
    /// Unix seconds of the last successful SAVE/BGSAVE (server start before any).
    pub last_save_unix: AtomicU64,
    pub bgsave_in_progress: AtomicBool,
    pub last_bgsave_ok: AtomicBool,
}

impl ServerStats {
    /// Records the end of a BGSAVE.
    pub fn finish_bgsave(&self, ok: bool) {
        if ok {
            self.last_save_unix.store(unix_secs(), Ordering::Relaxed);
        }
        self.last_bgsave_ok.store(ok, Ordering::Relaxed);
        self.bgsave_in_progress.store(false, Ordering::Release);
    }
}

/// SCAN's server-side cursors: a number for clients (Redis clients parse cursors as
/// unsigned integers), the key to resume after for the server.
#[derive(Debug)]
pub struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    bytes: usize,
}

impl Cursors {
    fn new() -> Self {
        // Start away from small numbers so that a cursor of an earlier run is unlikely to
        // name a live one.
        let seed = unix_nanos() & 0x0000_ffff_ffff_ffff;
        Self {
            next: seed.max(1),
            keys: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Remembers `key` and returns its cursor (never 0).
    pub fn remember(&mut self, key: Vec<u8>) -> u64 {
        while self.order.len() >= CURSOR_COUNT_MAX || self.bytes + key.len() > CURSOR_BYTES_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(k) = self.keys.remove(&old) {
                self.bytes -= k.len();
            }
        }
        self.next = self.next.wrapping_add(1).max(1);
        let id = self.next;
        self.bytes += key.len();
        self.keys.insert(id, key);
        self.order.push_back(id);
        id
    }

    /// The key to resume after, and forgets the cursor (each is used once).
    pub fn take(&mut self, id: u64) -> Option<Vec<u8>> {
        let key = self.keys.remove(&id)?;
        self.bytes -= key.len();
        // `order` keeps the id until it reaches the front (bounding `order` bounds both);
        // removing it here would cost a linear search.
        Some(key)
    }
}

/// State every connection shares.
pub struct Shared {
    pub store: Arc<Store>,
    /// The engine the store opened with.
    pub engine: String,
    pub config: Config,
    /// The bound address (set once listening).
    pub local_addr: Mutex<Option<SocketAddr>>,
    pub stats: Arc<ServerStats>,
    pub clients: Mutex<HashMap<u64, Arc<ClientInfo>>>,
    pub cursors: Mutex<Cursors>,
    pub shutdown: Arc<Shutdown>,
    /// Stripe locks and counts of the collection types ([`crate::collection`]).
    pub collections: Collections,
    /// Key deadlines ([`crate::expiry`]).
    pub expires: Expires,
    /// WATCH's registry ([`crate::watch`]).
    pub watches: Arc<crate::watch::Watches>,
    /// Pub/Sub's channels and patterns ([`crate::pubsub`]).
    pub pubsub: Arc<crate::pubsub::Hub>,
    /// Clients blocked on keys ([`crate::blocking`]).
    pub blocking: Arc<crate::blocking::Blocking>,
    /// EVAL's interpreter and script cache ([`crate::cmd::script`]).
    pub scripts: crate::cmd::script::Scripts,
    /// Per-core and tokio: one offloaded batch (a script, an EXEC that queued one, SAVE)
    /// runs at a time. A script takes every stripe lock, so a second one could only wait on
    /// its blocking thread: connections await this permit on their runtime instead (review
    /// rev-pcore F2: EVALs released together by a script's end each took a thread).
    pub offloads: tokio::sync::Semaphore,
    /// Redis's encoding and memory tuning parameters, kept for CONFIG GET only
    /// ([`crate::cmd::config`]).
    pub tuning: Mutex<Vec<(&'static str, String)>>,
    next_client_id: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(crate) fn unix_secs() -> u64 {
    unix_nanos() / 1_000_000_000
}

impl Shared {
    pub fn new(store: Store, config: Config) -> Self {
        let engine = store.stats().engine;
        let collections = Collections::recount(&store);
        let expires = Expires::load(&store);
        Self {
            collections,
            expires,
            watches: Arc::default(),
            pubsub: Arc::new(crate::pubsub::Hub::new(config.pubsub_limits)),
            blocking: Arc::default(),
            scripts: crate::cmd::script::Scripts::default(),
            offloads: tokio::sync::Semaphore::new(1),
            tuning: Mutex::new(crate::cmd::tuning_defaults()),
            engine,
            store: Arc::new(store),
            config,
            local_addr: Mutex::new(None),
            stats: Arc::new(ServerStats {
                started: Instant::now(),
                commands_processed: AtomicU64::new(0),
                connections_received: AtomicU64::new(0),
                rejected_connections: AtomicU64::new(0),
                connected_clients: AtomicUsize::new(0),
                last_save_unix: AtomicU64::new(unix_secs()),
                bgsave_in_progress: AtomicBool::new(false),
                last_bgsave_ok: AtomicBool::new(true),
            }),
            clients: Mutex::new(HashMap::new()),
            cursors: Mutex::new(Cursors::new()),
            shutdown: Arc::new(Shutdown::new()),
            next_client_id: AtomicU64::new(1),
        }
    }

    /// Registers a new connection and returns its state.
    pub fn new_client(&self, addr: String, laddr: String, stream: Option<TcpStream>) -> Client {
        let id = self.next_client_id.fetch_add(1, Ordering::Relaxed);
        let info = Arc::new(ClientInfo {
            id,
            addr,
            laddr,
            created: Instant::now(),
            active_ms: AtomicU64::new(self.uptime_ms()),
            meta: Mutex::new(ClientMeta {
                resp: 2,
                ..ClientMeta::default()
            }),
            stream,
        });
        self.clients.lock().insert(id, Arc::clone(&info));
        Client {
            info,
            protocol: Protocol::Resp2,
            authenticated: self.config.requirepass.is_none(),
            txn: crate::cmd::multi::TxnState::default(),
            pubsub: crate::pubsub::Subscriber::new(Arc::clone(&self.pubsub), id),
            blocking: crate::blocking::ClientBlock::default(),
        }
    }

    /// Unregisters a connection.
    pub fn drop_client(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    pub fn uptime_ms(&self) -> u64 {
        self.stats.started.elapsed().as_millis() as u64
    }
}

/// Opens the store and binds the listener; [`Server::run`] serves until stopped.
pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    open_ms: u128,
    /// Entries recovery brought back, less the server's own (`expiry::layout`'s entries).
    recovered_keys: u64,
}

impl Server {
    /// Opens (recovers) the store in `config.dir` and binds the address.
    pub fn open(config: Config) -> Result<Server> {
        // Bind first: a port in use fails at once, not after a long recovery. Clients that
        // connect meanwhile wait in the backlog until `run`.
        let address = format!("{}:{}", config.bind, config.port);
        // A Config error rather than Io: Io's text already holds its source, which a
        // caller printing the error chain would repeat.
        let listen_error = |e: std::io::Error| {
            forest_core::Error::Config(format!("cannot listen on {address}: {e}"))
        };
        let listener = TcpListener::bind(&address).map_err(listen_error)?;
        let local = listener.local_addr().map_err(listen_error)?;
        let started = Instant::now();
        let store = Store::open_path(
            &config.dir,
            StoreOptions {
                engine: config.engine.clone(),
                switch_engine: config.switch_engine,
                durability: config.durability,
                memory_budget_bytes: config.memory_budget_bytes,
                map_checkpoint_wal_bytes: config.map_checkpoint_wal_bytes,
                ..StoreOptions::default()
            },
        )?;
        // The start line counts keys, not the server's own entries recovery read back.
        let own = [
            crate::expiry::layout::LAYOUT_KEY,
            crate::expiry::layout::PROGRESS_KEY,
        ]
        .iter()
        .filter(|key| store.get(&key[..], &mut Vec::new()))
        .count() as u64;
        let recovered_keys = store.recovery_report().keys_recovered.saturating_sub(own);
        // The keys in this build's layout first (a store of an older one is moved over).
        crate::expiry::layout::relayout(&store)?;
        // A crash may have cut a collection command in two; mend before serving.
        crate::collection::repair(&store)?;
        crate::expiry::repair(&store)?;
        let open_ms = started.elapsed().as_millis();
        let shared = Arc::new(Shared::new(store, config));
        *shared.local_addr.lock() = Some(local);
        Ok(Server {
            shared,
            listener,
            open_ms,
            recovered_keys,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.shared.local_addr.lock()
    }

    /// The stop handle (signals and tests trigger it).
    pub fn shutdown_handle(&self) -> Arc<Shutdown> {
        Arc::clone(&self.shared.shutdown)
    }

    /// The start line of protocol.md ("Start line").
    pub fn start_line(&self) -> String {
        let c = &self.shared.config;
        let addr = self.local_addr().map(|a| a.to_string()).unwrap_or_default();
        format!(
            "forest serve: listening on {addr}, engine {}, dir {}, durability {}, recovered {} \
             keys in {} ms",
            self.shared.engine,
            c.dir.display(),
            c.durability,
            self.recovered_keys,
            self.open_ms
        )
    }

    /// Serves until stopped, then closes the store (making the log durable).
    pub fn run(self) -> Result<()> {
        let Server {
            shared, listener, ..
        } = self;
        // Deletes keys whose deadline passed, without waiting for a write to find them.
        let expirer = crate::expiry::spawn_active(Arc::clone(&shared)).map_err(|e| {
            forest_core::Error::Config(format!("cannot start the expiry thread: {e}"))
        })?;
        match shared.config.io {
            IoModel::Threads => run_threads(&shared, listener),
            IoModel::Tokio => crate::tokio_io::run(&shared, listener),
            IoModel::PerCore => crate::per_core::run(&shared, listener),
        }
        // It stops once the stop is requested (within one pause).
        let _ = expirer.join();
        close_store(shared)
    }
}

/// Closes the store once no connection holds it; saves first if SHUTDOWN SAVE asked.
fn close_store(shared: Arc<Shared>) -> Result<()> {
    if shared.shutdown.save_requested() {
        shared.store.checkpoint()?;
    }
    // Connections and a BGSAVE thread hold clones only while they run; wait briefly for a
    // BGSAVE to end.
    let deadline = Instant::now() + STOP_GRACE * 2;
    let mut shared = shared;
    loop {
        match Arc::try_unwrap(shared) {
            Ok(inner) => {
                return match Arc::try_unwrap(inner.store) {
                    Ok(store) => store.close(),
                    Err(store) => store.sync(),
                };
            }
            Err(still) if Instant::now() < deadline => {
                shared = still;
                std::thread::sleep(Duration::from_millis(10));
            }
            // Someone still holds it: make the log durable without closing.
            Err(still) => return still.store.sync(),
        }
    }
}

/// Rejects a connection over the client bound, with Redis's error.
pub(crate) fn reject(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
    let _ = stream.shutdown(NetShutdown::Both);
}

fn run_threads(shared: &Arc<Shared>, listener: TcpListener) {
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let wake = shared.local_addr.lock().unwrap_or_else(|| {
        listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    });
    let stopper = {
        let shutdown = Arc::clone(&shared.shutdown);
        std::thread::spawn(move || {
            shutdown.wait();
            // Wake the blocking accept below.
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        })
    };
    for stream in listener.incoming() {
        if shared.shutdown.is_requested() {
            break;
        }
        let Ok(stream) = stream else {
            // EMFILE and the like: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        handles.retain(|h| !h.is_finished());
        shared
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        let count = shared.stats.connected_clients.load(Ordering::Relaxed);
        if count >= shared.config.max_clients {
            shared
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            reject(stream);
            continue;
        }
        shared
            .stats
            .connected_clients
            .fetch_add(1, Ordering::Relaxed);
        let conn_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("forest-conn".into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                crate::connection::serve_blocking(&conn_shared, stream);
                conn_shared
                    .stats
                    .connected_clients
                    .fetch_sub(1, Ordering::Relaxed);
            });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(_) => {
                shared
                    .stats
                    .connected_clients
                    .fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    drop(listener);
    // A running script ends by itself (its time limit), a later one at once (`Scripts::stop`).
    shared.scripts.stop();
    let _ = stopper.join();
    // Blocked connections sleep on their waiter, not in a read: wake them to end.
    shared.blocking.stop_all();
    stop_connections(shared, handles);
}

/// Closes every connection's read side, waits for them to finish their batch, then cuts the
/// ones still running after [`STOP_GRACE`].
fn stop_connections(shared: &Shared, handles: Vec<JoinHandle<()>>) {
    let streams = |how| {
        for info in shared.clients.lock().values() {
            if let Some(stream) = &info.stream {
                let _ = stream.shutdown(how);
            }
        }
    };
    streams(NetShutdown::Read);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    streams(NetShutdown::Both);
    for handle in handles {
        let _ = handle.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: SCAN cursors are never 0, resolve once, and stay within their bounds.
    // Method: remember more than the count bound and check the oldest are forgotten.
    #[test]
    fn cursor_table_is_bounded() {
        let mut cursors = Cursors::new();
        let first = cursors.remember(b"a".to_vec());
        assert_ne!(first, 0);
        assert_eq!(cursors.take(first), Some(b"a".to_vec()));
        assert_eq!(cursors.take(first), None);
        let ids: Vec<u64> = (0..CURSOR_COUNT_MAX + 10)
            .map(|i| cursors.remember(i.to_string().into_bytes()))
            .collect();
        assert!(cursors.keys.len() <= CURSOR_COUNT_MAX);
        assert_eq!(cursors.take(ids[0]), None);
        assert!(cursors.take(ids[ids.len() - 1]).is_some());
        let big = vec![0u8; CURSOR_BYTES_MAX / 2 + 1];
        cursors.remember(big.clone());
        cursors.remember(big);
        assert!(cursors.bytes <= CURSOR_BYTES_MAX);
    }
}
