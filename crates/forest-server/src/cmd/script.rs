//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD / EXISTS / FLUSH / KILL
//! / HELP, with Redis's semantics (redis src/eval.c, src/script_lua.c; docs/PROTOCOL.md
//! "Scripting").
//!
//! One Lua 5.1 interpreter per server ([`Scripts`]), made on first use and kept behind a
//! mutex: scripts run one at a time, as in Redis. A script runs as EXEC runs its queue
//! ([`super::multi::begin_script`]): under every stripe lock (it may touch keys it did not
//! declare), over one transaction unit, so its reads see its own writes and its writes reach
//! the store as one atomic batch that readers and recovery see whole or not at all. Lock
//! order: the stripes, then the interpreter's mutex (an EXEC holding stripes may run EVAL).
//!
//! `redis.call` / `redis.pcall` run a command through [`super::run`], the dispatcher EXEC
//! uses, and convert replies by Redis's RESP2 rules both ways ([`reply_to_lua`],
//! [`lua_to_reply`]). They are Rust functions scoped to one run (C functions to Lua, as in
//! Redis, so a tail call to one keeps the caller's frame and an error names its line);
//! `redis.call` raises a [`CallError`], which the prelude turns back into Redis's `{err=...}`
//! table. The Lua prelude (`prelude.lua`) installs Redis's error handler, its `pcall`, the
//! `redis` helpers, and read-only globals.
//!
//! Invariants:
//! - At most one script runs at a time (the interpreter's mutex), holding every stripe.
//! - A script's writes are applied together when it ends, or not at all if it was stopped.
//! - Lua runs on a stack of its own ([`SCRIPT_STACK_BYTES`]), never a connection thread's.
//! - The interpreter holds at most [`LUA_MEMORY_BYTES_MAX`]; the cache at most
//!   [`EVAL_SCRIPTS_MAX`] EVAL scripts.
//!
//! Runaway scripts: an instruction-count hook stops a script that has run longer than the
//! time limit (`busy-reply-threshold`, alias `lua-time-limit`, default 5 s) or that SCRIPT
//! KILL named; its writes and messages are dropped. Redis instead answers BUSY to the other
//! clients until SCRIPT KILL, which it refuses once the script wrote.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value};
use parking_lot::{Condvar, Mutex};

use super::{int_arg, is_word, multi, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::frame::{Frame, Protocol};

/// Redis's `busy-reply-threshold` default (the older `lua-time-limit`).
pub const TIME_LIMIT_MS_DEFAULT: u64 = 5000;
/// Scripts that EVAL added and the cache keeps, least recently used evicted first (Redis's
/// LRU_LIST_LENGTH); SCRIPT LOAD's stay until SCRIPT FLUSH.
pub const EVAL_SCRIPTS_MAX: usize = 500;
/// VM instructions between two looks at the clock and at SCRIPT KILL (Redis: 100,000; fewer
/// here so a stopped script ends within a millisecond or so).
const HOOK_INSTRUCTIONS: u32 = 10_000;
/// Memory the interpreter may hold (scripts, their data, the cache): a script building a
/// huge table or string gets Lua's "not enough memory" instead of taking the server's
/// (Redis sets no such bound).
pub const LUA_MEMORY_BYTES_MAX: usize = 1 << 30;
/// The stack scripts run on ([`stacker::grow`]): Lua recurses in C up to 200 calls deep
/// (LUAI_MAXCCALLS: nested `pcall`, `gsub` callbacks, the parser on nested expressions),
/// more than a connection thread's 256 KiB hold. Mapped per script; only touched pages cost.
const SCRIPT_STACK_BYTES: usize = 16 << 20;
/// Tables nested in a script's reply beyond this depth are refused (a table holding itself).
const REPLY_DEPTH_MAX: usize = 128;
/// The chunk name Redis gives scripts: errors read `user_script:LINE: ...`.
const CHUNK_NAME: &str = "@user_script";
/// The prelude's chunk name (its frames are not the user's).
const PRELUDE_NAME: &str = "=forest_prelude";
/// Stack levels `locate` looks through for the user's frame.
const LOCATE_LEVELS_MAX: usize = 64;
/// Redis's shebang flags (`#!lua flags=...`).
const SHEBANG_FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// Why a script was stopped by its hook.
const STOP_NONE: u8 = 0;
const STOP_TIME: u8 = 1;
const STOP_KILL: u8 = 2;

/// The server's scripting state.
pub struct Scripts {
    engine: Mutex<Option<Engine>>,
    time_limit_ms: AtomicU64,
    /// A script is running (SCRIPT KILL answers NOTBUSY otherwise).
    running: AtomicBool,
    /// SCRIPT KILL asked the running script to stop.
    kill: Arc<AtomicBool>,
    /// The server stops: scripts that start from now on are stopped ([`Scripts::stop`]).
    stopping: AtomicBool,
    /// Scripts (or EXECs running one) taking or holding every stripe lock
    /// ([`Scripts::holding`]), and how their end is signalled.
    hold: Arc<HoldState>,
    /// One per per-core runtime ([`RuntimeGate`]).
    gates: Mutex<Vec<Arc<RuntimeGate>>>,
    /// The interpreter's memory bound ([`LUA_MEMORY_BYTES_MAX`]; smaller in tests).
    memory_bytes_max: std::sync::atomic::AtomicUsize,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            engine: Mutex::new(None),
            time_limit_ms: AtomicU64::new(TIME_LIMIT_MS_DEFAULT),
            running: AtomicBool::new(false),
            kill: Arc::new(AtomicBool::new(false)),
            stopping: AtomicBool::new(false),
            hold: Arc::new(HoldState::default()),
            gates: Mutex::new(Vec::new()),
            memory_bytes_max: std::sync::atomic::AtomicUsize::new(LUA_MEMORY_BYTES_MAX),
        }
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("time_limit_ms", &self.time_limit_ms())
            .finish_non_exhaustive()
    }
}

/// Where a script comes from: its text (EVAL) or its digest (EVALSHA).
#[derive(Clone, Copy)]
enum Source<'a> {
    Body(&'a [u8]),
    Sha(&'a [u8]),
}

/// A `#!lua` first line's flags.
#[derive(Clone, Copy, Debug, Default)]
struct Shebang {
    declared: bool,
    no_writes: bool,
}

struct Script {
    function: Function,
    shebang: Shebang,
}

/// A Lua state with the prelude run, and the compiled scripts.
struct Engine {
    lua: Lua,
    /// The prelude's `run(f, keys, argv)`: `xpcall` under Redis's error handler.
    run: Function,
    /// The prelude's `set_commands(call, pcall)`: `redis.call` and `redis.pcall` of the
    /// script about to run.
    set_commands: Function,
    scripts: HashMap<String, Script>,
    /// EVAL's scripts, least recently used first.
    lru: VecDeque<String>,
    /// The memory bound the state was made with.
    memory_bytes_max: usize,
}

impl Scripts {
    /// Milliseconds a script may run before it is stopped (0: no limit, as Redis).
    pub fn time_limit_ms(&self) -> u64 {
        self.time_limit_ms.load(Ordering::Relaxed)
    }

    pub fn set_time_limit_ms(&self, ms: u64) {
        self.time_limit_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether a script is taking or holding every stripe lock: any command may then wait
    /// for it (up to the time limit), so the per-core model runs none that may on a
    /// runtime's only thread meanwhile ([`RuntimeGate`]).
    pub fn holding(&self) -> bool {
        self.hold.count.load(Ordering::SeqCst) != 0
    }

    /// Returns once no script takes or holds every stripe lock, without blocking the
    /// thread: a per-core connection awaits it on its runtime instead of holding a blocking
    /// thread per command while a script runs (session 14: a busy server under a long
    /// script spawned one per command).
    pub async fn released(&self) {
        loop {
            let notified = self.hold.released.notified();
            tokio::pin!(notified);
            // Registered before the look: a release after it wakes this future.
            notified.as_mut().enable();
            if !self.holding() {
                return;
            }
            notified.await;
        }
    }

    /// A new per-core runtime's gate (see [`RuntimeGate`]).
    pub fn runtime_gate(&self) -> Arc<RuntimeGate> {
        let gate = Arc::new(RuntimeGate {
            inline: AtomicBool::new(false),
            hold: Arc::clone(&self.hold),
        });
        self.gates.lock().push(Arc::clone(&gate));
        gate
    }

    /// Marks a script (or an EXEC that runs one) as [`Self::holding`] before it takes every
    /// stripe, until the guard is dropped (after it released them); returns once no runtime
    /// runs commands inline that began before they could see the mark. It sleeps on
    /// [`HoldState::cleared`] meanwhile (a runtime's batch may run a long command inline,
    /// KEYS or FLUSHALL; a `yield_now` loop burnt a core for as long: review rev-pcscript F2).
    pub(super) fn hold(&self) -> Holding<'_> {
        self.hold.count.fetch_add(1, Ordering::SeqCst);
        let holding = Holding(&self.hold);
        for gate in self.gates.lock().iter() {
            if !gate.inline.load(Ordering::SeqCst) {
                continue;
            }
            let mut cleared = self.hold.lock.lock();
            // The gate's drop clears `inline`, then (seeing the count) takes the lock to
            // notify: a clear after this look wakes the wait below.
            while gate.inline.load(Ordering::SeqCst) {
                self.hold.cleared.wait(&mut cleared);
            }
        }
        holding
    }

    /// Marks a script as running until the guard drops, on a panic too (a panic that left
    /// the mark made SCRIPT KILL answer OK with no script: review rev-pcscript F5).
    fn start_running(&self) -> Running<'_> {
        self.kill.store(false, Ordering::SeqCst);
        self.running.store(true, Ordering::SeqCst);
        // After the reset: a stop that this look misses sets `kill` after it.
        if self.stopping.load(Ordering::SeqCst) {
            self.kill.store(true, Ordering::SeqCst);
        }
        Running(&self.running)
    }

    /// Whether a script runs, or takes or holds the stripes to run (SHUTDOWN NOSAVE kills it).
    pub fn busy(&self) -> bool {
        self.running.load(Ordering::SeqCst) || self.holding()
    }

    /// The server stops (a signal, the stop handle, SHUTDOWN once its wait for the script
    /// is over): the running script runs to its end, bounded by the time limit, as Redis
    /// acts on a SIGTERM once the script has returned (review rev-pcore F5); a script that
    /// starts later is stopped at its first hook, its writes dropped, so the stop waits for
    /// no new script. With no time limit (0) the stop waits as long as the script runs, as
    /// Redis does; SCRIPT KILL or SHUTDOWN NOSAVE ends it.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// SHUTDOWN NOSAVE: [`Self::stop`], and the running script is stopped at its next hook
    /// too, its writes dropped (Redis exits under it).
    pub fn stop_now(&self) {
        self.stop();
        self.kill.store(true, Ordering::SeqCst);
    }

    /// A new interpreter (the next script's) holds at most `bytes`.
    #[cfg(test)]
    fn set_memory_bytes_max(&self, bytes: usize) {
        self.memory_bytes_max.store(bytes, Ordering::Relaxed);
        self.flush();
    }

    /// The interpreter, made on first use.
    fn engine<'g>(
        &self,
        guard: &'g mut parking_lot::MutexGuard<'_, Option<Engine>>,
    ) -> Result<&'g mut Engine, Frame> {
        if guard.is_none() {
            let memory = self.memory_bytes_max.load(Ordering::Relaxed);
            let engine = Engine::new(memory).map_err(|e| {
                Frame::err(format!(
                    "cannot start the Lua interpreter: {}",
                    line_text(&e.to_string())
                ))
            })?;
            **guard = Some(engine);
        }
        guard
            .as_mut()
            .ok_or_else(|| Frame::err("cannot start the Lua interpreter"))
    }

    /// SCRIPT LOAD: the script's digest, compiled and cached (not evicted).
    fn load(&self, body: &[u8]) -> Result<String, Frame> {
        let mut guard = self.engine.lock();
        let engine = self.engine(&mut guard)?;
        stacker::grow(SCRIPT_STACK_BYTES, || engine.load(body, false))
    }

    fn exists(&self, sha: &[u8]) -> bool {
        let guard = self.engine.lock();
        guard.as_ref().is_some_and(|engine| {
            engine
                .scripts
                .contains_key(&String::from_utf8_lossy(sha).to_ascii_lowercase())
        })
    }

    /// SCRIPT FLUSH: a new interpreter next time, with no script.
    fn flush(&self) {
        *self.engine.lock() = None;
    }

    /// Runs a script whose unit is open (see the module doc): its reply, and whether its
    /// writes stand (false: stopped by the time limit or SCRIPT KILL).
    fn run(
        &self,
        ctx: &mut Ctx<'_, '_>,
        source: Source<'_>,
        keys: &[&[u8]],
        args: &[&[u8]],
        ro_command: bool,
    ) -> (Reply, bool) {
        let mut run = || {
            stacker::grow(SCRIPT_STACK_BYTES, || {
                self.run_here(ctx, source, keys, args, ro_command)
            })
        };
        // A script may run for seconds. On the tokio I/O model, first hand this worker's
        // queued tasks (other connections, a SCRIPT KILL) to another thread: a task in the
        // worker's LIFO slot is not stolen, and would wait for the script (CI saw SCRIPT
        // KILL unanswered for 30 s). The per-core model's connection already runs it on a
        // blocking thread (`Conn::runtime_gate`).
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        }
    }

    /// [`Self::run`] on the stack it is called on.
    fn run_here(
        &self,
        ctx: &mut Ctx<'_, '_>,
        source: Source<'_>,
        keys: &[&[u8]],
        args: &[&[u8]],
        ro_command: bool,
    ) -> (Reply, bool) {
        let mut guard = self.engine.lock();
        let engine = match self.engine(&mut guard) {
            Ok(engine) => engine,
            Err(e) => return (Err(e), true),
        };
        let sha = match source {
            Source::Sha(sha) => {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                if !engine.scripts.contains_key(&sha) {
                    return (Err(noscript()), true);
                }
                sha
            }
            Source::Body(body) => match engine.load(body, true) {
                Ok(sha) => sha,
                Err(e) => return (Err(e), true),
            },
        };
        engine.touch(&sha);
        let Some(script) = engine.scripts.get(&sha) else {
            return (Err(noscript()), true);
        };
        let (function, shebang) = (script.function.clone(), script.shebang);
        if ro_command && shebang.declared && !shebang.no_writes {
            return (
                Err(Frame::err(
                    "Can not execute a script with write flag using *_ro command.",
                )),
                true,
            );
        }
        let limit = self.time_limit_ms();
        let deadline = (limit > 0).then(|| Instant::now() + Duration::from_millis(limit));
        let running = self.start_running();
        #[cfg(test)]
        if PANIC_WHILE_RUNNING.with(std::cell::Cell::get) {
            panic!("injected: a script's run panics");
        }
        let protocol = std::mem::replace(&mut ctx.client.protocol, Protocol::Resp2);
        let rules = Rules {
            read_only: ro_command || shebang.no_writes,
            deadline,
            kill: Arc::clone(&self.kill),
        };
        let outcome = engine.call(ctx, &function, keys, args, rules);
        ctx.client.protocol = protocol;
        drop(running);
        match outcome {
            Outcome::Done(Ok(value)) => (lua_to_reply(&value), true),
            Outcome::Done(Err(error)) => (Err(script_error(&error, &sha)), true),
            // Not a user's SCRIPT KILL: the server stops (review rev-pcore F5).
            Outcome::Stopped(STOP_KILL) if self.stopping.load(Ordering::SeqCst) => (
                Err(Frame::err(format!(
                    "Script stopped: the server is shutting down... script: {sha}; none of \
                     its writes were applied."
                ))),
                false,
            ),
            Outcome::Stopped(STOP_KILL) => (
                Err(Frame::err(format!(
                    "Script killed by user with SCRIPT KILL... script: {sha}; none of its \
                     writes were applied."
                ))),
                false,
            ),
            Outcome::Stopped(_) => (
                Err(Frame::err(format!(
                    "Script timed out: it ran longer than busy-reply-threshold ({limit} ms) and \
                     was stopped; none of its writes were applied. script: {sha}"
                ))),
                false,
            ),
            Outcome::Failed(error) => (
                Err(Frame::err(format!(
                    "Error running script {sha}, {}",
                    line_text(&error.to_string())
                ))),
                true,
            ),
        }
    }

    /// SCRIPT KILL.
    fn kill(&self) -> Reply {
        if !self.running.load(Ordering::SeqCst) {
            return Err(Frame::Error(
                "NOTBUSY No scripts in execution right now.".into(),
            ));
        }
        self.kill.store(true, Ordering::SeqCst);
        Ok(Frame::ok())
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: the next script run on this thread panics once marked running.
    static PANIC_WHILE_RUNNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The count behind [`Scripts::holding`] and the signals of its changes, shared with the
/// runtimes' gates.
#[derive(Debug, Default)]
pub struct HoldState {
    count: AtomicUsize,
    /// Notified when the count falls to zero ([`Scripts::released`]).
    released: tokio::sync::Notify,
    /// With [`Self::cleared`]: a script waiting for a runtime's gate to clear sleeps there.
    lock: Mutex<()>,
    cleared: Condvar,
}

/// A script's mark in [`Scripts::holding`].
pub(super) struct Holding<'a>(&'a HoldState);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.released.notify_waiters();
        }
    }
}

/// [`Scripts::start_running`]'s mark.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A per-core runtime's thread runs a batch's commands inline (the per-core model,
/// `crate::connection`): a command waiting there for a script's stripe locks would stall
/// every connection of the runtime. Dekker's handshake keeps it from happening: the thread
/// marks the gate, then looks at [`Scripts::holding`] before each command (set: the batch
/// ends there, and the connection awaits [`Scripts::released`] or, for a long command, a
/// blocking thread); a script marks `holding`, then waits for every gate to clear before
/// it takes the stripes. One of the two sees the other's mark; the gate's drop, seeing
/// `holding`, wakes the script's wait.
#[derive(Debug)]
#[repr(align(128))] // Its own cache line: each runtime writes its gate twice a batch.
pub struct RuntimeGate {
    inline: AtomicBool,
    hold: Arc<HoldState>,
}

impl RuntimeGate {
    /// Marks the runtime's thread as running commands inline until the guard is dropped.
    pub fn enter(&self) -> GateMark<'_> {
        self.inline.store(true, Ordering::SeqCst);
        GateMark(self)
    }
}

/// A runtime's mark in its [`RuntimeGate`].
#[derive(Debug)]
pub struct GateMark<'a>(&'a RuntimeGate);

impl Drop for GateMark<'_> {
    fn drop(&mut self) {
        let gate = self.0;
        // SeqCst, then the look at the count: the other half of `Scripts::hold`'s handshake.
        gate.inline.store(false, Ordering::SeqCst);
        if gate.hold.count.load(Ordering::SeqCst) != 0 {
            drop(gate.hold.lock.lock());
            gate.hold.cleared.notify_all();
        }
    }
}

/// What a run of a script may do and for how long.
struct Rules {
    /// Refuse write commands (EVAL_RO, `#!lua flags=no-writes`).
    read_only: bool,
    /// Stop the script past this instant (None: no time limit).
    deadline: Option<Instant>,
    /// SCRIPT KILL's request.
    kill: Arc<AtomicBool>,
}

/// How a script's call ended.
enum Outcome {
    /// Returned (Ok) or raised an error (the handler's table).
    Done(Result<Value, Value>),
    /// Stopped by the hook (STOP_TIME or STOP_KILL).
    Stopped(u8),
    /// The interpreter itself failed (out of memory, ...).
    Failed(mlua::Error),
}

impl Engine {
    fn new(memory_bytes_max: usize) -> mlua::Result<Engine> {
        // Base (with `coroutine` in 5.1), string, table, math: Redis's set, less the
        // libraries it adds (cjson, cmsgpack, struct, bit); no io, os, package or debug.
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        let sha1hex = lua.create_function(|_, s: mlua::LuaString| Ok(sha1_hex(&s.as_bytes())))?;
        let log = lua.create_function(|_, (level, message): (f64, mlua::LuaString)| {
            // Redis's default verbosity, notice: debug and verbose lines are not written.
            if level >= 2.0 {
                eprintln!("forest serve: script: {}", message.to_string_lossy());
            }
            Ok(())
        })?;
        // The source and line of the innermost frame of the user's code (not C, not the
        // prelude): where an error happened, for the handler.
        let locate = lua.create_function(|lua, ()| {
            for level in 1..LOCATE_LEVELS_MAX {
                let frame = lua.inspect_stack(level, |debug| {
                    let source = debug.source();
                    let source = source.source.filter(|_| source.what != "C")?;
                    (source != PRELUDE_NAME).then(|| (source.into_owned(), debug.current_line()))
                });
                match frame {
                    None => break,
                    Some(None) => continue,
                    Some(Some((source, line))) => return Ok((Some(source), line)),
                }
            }
            Ok((None, None))
        })?;
        let call_error = lua.create_function(|lua, value: Value| {
            let Value::Error(error) = value else {
                return Ok(None);
            };
            let Some(text) = call_error_text(&error) else {
                return Ok(None);
            };
            let table = lua.create_table()?;
            table.raw_set("err", text)?;
            Ok(Some(table))
        })?;
        let (run, set_commands): (Function, Function) = lua
            .load(include_str!("prelude.lua"))
            .set_name(PRELUDE_NAME)
            .set_mode(ChunkMode::Text)
            .call((sha1hex, log, locate, call_error))?;
        lua.set_memory_limit(memory_bytes_max)?;
        Ok(Engine {
            lua,
            run,
            set_commands,
            scripts: HashMap::new(),
            lru: VecDeque::new(),
            memory_bytes_max,
        })
    }

    /// Compiles and caches `body` unless cached; its digest. EVAL's scripts (`evictable`)
    /// push the least recently used one out past [`EVAL_SCRIPTS_MAX`].
    fn load(&mut self, body: &[u8], evictable: bool) -> Result<String, Frame> {
        let sha = sha1_hex(body);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (shebang, code) = shebang(body)?;
        let function = self
            .lua
            .load(code)
            .set_name(CHUNK_NAME)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let message = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                Frame::err(format!(
                    "Error compiling script (new function): {}",
                    line_text(&message)
                ))
            })?;
        if evictable {
            while self.lru.len() >= EVAL_SCRIPTS_MAX {
                let Some(oldest) = self.lru.pop_front() else {
                    break;
                };
                self.scripts.remove(&oldest);
            }
            self.lru.push_back(sha.clone());
        }
        self.scripts
            .insert(sha.clone(), Script { function, shebang });
        Ok(sha)
    }

    /// Marks an EVAL script as just used.
    fn touch(&mut self, sha: &str) {
        if self.lru.back().is_some_and(|last| last == sha) {
            return;
        }
        if let Some(at) = self.lru.iter().position(|s| s == sha) {
            if let Some(s) = self.lru.remove(at) {
                self.lru.push_back(s);
            }
        }
    }

    /// Runs `function` with KEYS and ARGV, its `redis.call` bound to `ctx`, under the hook.
    fn call(
        &self,
        ctx: &mut Ctx<'_, '_>,
        function: &Function,
        keys: &[&[u8]],
        args: &[&[u8]],
        rules: Rules,
    ) -> Outcome {
        let Rules {
            read_only,
            deadline,
            kill,
        } = rules;
        let lua = &self.lua;
        let stop = Arc::new(AtomicU8::new(STOP_NONE));
        let hook_stop = Arc::clone(&stop);
        let hooked = lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
            move |lua, _| {
                let reason = if kill.load(Ordering::Relaxed) {
                    STOP_KILL
                } else if deadline.is_some_and(|d| Instant::now() >= d) {
                    STOP_TIME
                } else {
                    return Ok(mlua::VmState::Continue);
                };
                hook_stop.store(reason, Ordering::SeqCst);
                // From now on raised at every instruction (as Redis turns to a line hook
                // once a script is killed): a `pcall` loop in the script catches one error,
                // and the next instruction outside it raises again.
                lua.set_global_hook(HookTriggers::new().every_nth_instruction(1), |_, _| {
                    Err(mlua::Error::runtime("script stopped"))
                })?;
                Err(mlua::Error::runtime("script stopped"))
            },
        );
        if let Err(e) = hooked {
            return Outcome::Failed(e);
        }
        let ctx = std::cell::RefCell::new(ctx);
        let result = lua.scope(|scope| {
            let call = scope.create_function(|lua, args: MultiValue| {
                let mut ctx = ctx
                    .try_borrow_mut()
                    .map_err(|_| mlua::Error::RecursiveMutCallback)?;
                match dispatch(lua, &mut ctx, &args, read_only)? {
                    Ok(value) => Ok(value),
                    Err(text) => Err(mlua::Error::external(CallError(text))),
                }
            })?;
            let pcall = scope.create_function(|lua, args: MultiValue| {
                let mut ctx = ctx
                    .try_borrow_mut()
                    .map_err(|_| mlua::Error::RecursiveMutCallback)?;
                dispatch(lua, &mut ctx, &args, read_only)?.or_else(|text| {
                    let table = lua.create_table()?;
                    table.raw_set("err", text)?;
                    Ok(Value::Table(table))
                })
            })?;
            self.set_commands.call::<()>((call, pcall))?;
            let keys = strings_table(lua, keys)?;
            let args = strings_table(lua, args)?;
            let ran = self
                .run
                .call::<(bool, Value)>((function.clone(), keys, args));
            self.set_commands.call::<()>((Value::Nil, Value::Nil))?;
            ran
        });
        lua.remove_global_hook();
        lua.remove_hook();
        // `collectgarbage('stop')` in one script must not leave the next ones without a
        // collector; and Lua 5.1 collects nothing when an allocation fails, so the garbage of
        // a script that came near the bound is collected now, not left to fail the next.
        lua.gc_restart();
        if lua.used_memory() > self.memory_bytes_max / 2 {
            // A failed collection (out of memory) leaves the next script to fail as this one.
            let _ = lua.gc_collect();
        }
        match stop.load(Ordering::SeqCst) {
            STOP_NONE => {}
            reason => return Outcome::Stopped(reason),
        }
        match result {
            Ok((true, value)) => Outcome::Done(Ok(value)),
            Ok((false, error)) => Outcome::Done(Err(error)),
            Err(e) => Outcome::Failed(e),
        }
    }
}

/// A Lua table of strings (KEYS, ARGV).
fn strings_table(lua: &Lua, items: &[&[u8]]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// Lowercase hex SHA1, as Redis names scripts.
fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// `-NOSCRIPT No matching script. Please use EVAL.`
fn noscript() -> Frame {
    Frame::Error("NOSCRIPT No matching script. Please use EVAL.".into())
}

/// Text fit for a one-line reply (Redis maps CR and LF to spaces).
fn line_text(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// Splits Redis 7's `#!lua [flags=a,b]` first line off: its flags, and the code to compile
/// (the line's newline kept, so line numbers match the text sent).
fn shebang(body: &[u8]) -> Result<(Shebang, &[u8]), Frame> {
    if !body.starts_with(b"#!") {
        return Ok((Shebang::default(), body));
    }
    let end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts
        .next()
        .ok_or_else(|| Frame::err("Invalid engine in script shebang"))?;
    if engine != "#!lua" {
        return Err(Frame::err(format!(
            "Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut shebang = Shebang {
        declared: true,
        no_writes: false,
    };
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(Frame::err(format!("Unknown lua shebang option: {part}")));
        };
        for flag in flags.split(',').filter(|f| !f.is_empty()) {
            if !SHEBANG_FLAGS.contains(&flag) {
                return Err(Frame::err(format!(
                    "Unexpected flag in script shebang: {flag}"
                )));
            }
            shebang.no_writes |= flag == "no-writes";
        }
    }
    Ok((shebang, &body[end..]))
}

/// The error `redis.call` raises for an error reply: the prelude's handler and `pcall` make
/// it Redis's `{err=...}` table again.
#[derive(Debug)]
struct CallError(String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// The text of a [`CallError`] inside `error` (as mlua may wrap it).
fn call_error_text(error: &mlua::Error) -> Option<&str> {
    match error {
        mlua::Error::ExternalError(e) => e.downcast_ref::<CallError>().map(|c| c.0.as_str()),
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            call_error_text(cause)
        }
        _ => None,
    }
}

/// `redis.call` / `redis.pcall`'s runner: the reply as Lua sees it, or an error reply's text
/// as Lua's `err` field holds it.
fn dispatch(
    lua: &Lua,
    ctx: &mut Ctx<'_, '_>,
    args: &MultiValue,
    read_only: bool,
) -> mlua::Result<Result<Value, String>> {
    let reply = match command_args(args) {
        Some(argv) => call(ctx, &argv, read_only),
        None => Frame::err("Lua redis lib command arguments must be strings or integers"),
    };
    let value = match &reply {
        Frame::Error(text) => Err(error_text(text)),
        other => Ok(reply_to_lua(lua, other, 0)?),
    };
    ctx.buffers.recycle(reply);
    Ok(value)
}

/// The arguments of `redis.call` as a command line: strings, and numbers as Redis prints
/// them (integers without a fraction); None if one is neither.
fn command_args(args: &MultiValue) -> Option<Vec<Vec<u8>>> {
    args.iter()
        .map(|arg| match arg {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            Value::Integer(n) => Some(n.to_string().into_bytes()),
            Value::Number(n) => Some(number_text(*n).into_bytes()),
            _ => None,
        })
        .collect()
}

/// A Lua number as a command argument: an integer when it is one.
fn number_text(n: f64) -> String {
    // 2^63: the first double past i64.
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    if n.fract() == 0.0 && (-I64_END..I64_END).contains(&n) {
        (n as i64).to_string()
    } else {
        crate::frame::double_text(n)
    }
}

/// Runs one command for a script, with Redis's checks for scripts first.
fn call(ctx: &mut Ctx<'_, '_>, argv: &[Vec<u8>], read_only: bool) -> Frame {
    let Some(name) = argv.first() else {
        return Frame::err("Please specify at least one argument for this redis lib call");
    };
    let Some(spec) = super::lookup(name) else {
        return Frame::err("Unknown Redis command called from script");
    };
    let (argc, arity) = (argv.len() as i64, i64::from(spec.arity));
    if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Frame::err("Wrong number of args calling Redis command from script");
    }
    if spec.flags.contains(&"noscript") {
        return Frame::err("This Redis command is not allowed from script");
    }
    // Redis counts PUBLISH (may_replicate) as a write here.
    if read_only && (spec.flags.contains(&"write") || spec.name == "publish") {
        return Frame::err("Write commands are not allowed from read-only scripts.");
    }
    let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    ctx.client.blocking.in_script = true;
    let (Ok(reply) | Err(reply)) = super::run(ctx, spec, &argv);
    ctx.client.blocking.in_script = false;
    reply
}

/// A command's reply as Lua sees it (Redis's RESP2 rules): integer -> number, bulk ->
/// string, null -> false, array -> table, status -> {ok=...}, error -> {err=...}.
fn reply_to_lua(lua: &Lua, reply: &Frame, depth: usize) -> mlua::Result<Value> {
    if depth > REPLY_DEPTH_MAX {
        return Err(mlua::Error::runtime("reply nested too deep"));
    }
    let field = |name: &str, text: &str| -> mlua::Result<Value> {
        let table = lua.create_table()?;
        table.raw_set(name, text)?;
        Ok(Value::Table(table))
    };
    Ok(match reply {
        Frame::Simple(text) => field("ok", text)?,
        Frame::Error(text) => field("err", &error_text(text))?,
        // Lua 5.1 numbers are doubles, as Redis pushes them.
        Frame::Integer(n) => Value::Number(*n as f64),
        Frame::Bulk(bytes) | Frame::Verbatim { text: bytes, .. } => {
            Value::String(lua.create_string(bytes)?)
        }
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Array(items) | Frame::Push(items) | Frame::Sequence(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, reply_to_lua(lua, item, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Frame::Map(pairs) => {
            let table = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (key, value)) in pairs.iter().enumerate() {
                table.raw_set(2 * i + 1, reply_to_lua(lua, key, depth + 1)?)?;
                table.raw_set(2 * i + 2, reply_to_lua(lua, value, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Frame::Double(x) => Value::String(lua.create_string(crate::frame::double_text(*x))?),
        Frame::Boolean(b) => Value::Number(f64::from(u8::from(*b))),
    })
}

/// An error reply's text as Lua's `err` field holds it (Redis's luaPushErrorBuff on
/// "-TEXT"): `CODE message`, with ERR for a text of one word.
fn error_text(text: &str) -> String {
    let (code, message) = text.split_once(' ').unwrap_or(("ERR", text));
    format!("{code} {}", message.trim_matches(['\r', '\n']))
}

/// A script's return value as a reply (Redis's RESP2 rules): number -> integer
/// (truncated), string -> bulk, true -> 1, false and nil -> null, {err=...} -> error,
/// {ok=...} -> status, {double=...} -> double, other tables -> array up to the first nil.
fn lua_to_reply(value: &Value) -> Reply {
    match lua_to_frame(value, 0)? {
        Frame::Error(text) => Err(Frame::Error(text)),
        frame => Ok(frame),
    }
}

/// [`lua_to_reply`] at nesting `depth`: an `{err=...}` table is an error element (as Redis
/// nests one in an array); `Err` when no reply can be made.
fn lua_to_frame(value: &Value, depth: usize) -> Result<Frame, Frame> {
    Ok(match value {
        Value::String(s) => Frame::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Frame::Integer(1),
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(*n as i64),
        Value::Table(table) => {
            if depth >= REPLY_DEPTH_MAX {
                return Err(Frame::err("reached lua stack limit"));
            }
            let lua_error = |e: mlua::Error| Frame::err(line_text(&e.to_string()));
            if let Value::String(text) = table.raw_get::<Value>("err").map_err(lua_error)? {
                return Ok(Frame::Error(line_text(&text.to_string_lossy())));
            }
            if let Value::String(text) = table.raw_get::<Value>("ok").map_err(lua_error)? {
                return Ok(Frame::Simple(line_text(&text.to_string_lossy())));
            }
            match table.raw_get::<Value>("double").map_err(lua_error)? {
                Value::Number(x) => return Ok(Frame::Double(x)),
                Value::Integer(n) => return Ok(Frame::Double(n as f64)),
                _ => {}
            }
            let mut items = Vec::new();
            for i in 1.. {
                let item = table.raw_get::<Value>(i).map_err(lua_error)?;
                if item.is_nil() {
                    break;
                }
                items.push(lua_to_frame(&item, depth + 1)?);
            }
            Frame::Array(items)
        }
        _ => Frame::Null,
    })
}

/// The reply to a script that raised an error: the handler's `{err=, source=, line=}` as
/// Redis words it, `<err> script: <sha>, on <source>:<line>.`
fn script_error(error: &Value, sha: &str) -> Frame {
    let Value::Table(table) = error else {
        let text = match error {
            Value::String(s) => s.to_string_lossy(),
            _ => "execution failure".to_string(),
        };
        return Frame::err(format!("Error running script {sha}, {}", line_text(&text)));
    };
    let text = |name: &str| -> Option<String> {
        match table.raw_get::<Value>(name).ok()? {
            Value::String(s) => Some(s.to_string_lossy()),
            Value::Integer(n) => Some(n.to_string()),
            Value::Number(n) => Some(number_text(n)),
            _ => None,
        }
    };
    let message = text("err").unwrap_or_else(|| "ERR unknown error".to_string());
    let full = match (text("source"), text("line")) {
        (Some(source), Some(line)) => format!("{message} script: {sha}, on {source}:{line}."),
        _ => message,
    };
    Frame::Error(line_text(&full))
}

/// EVAL script numkeys [key ...] [arg ...].
pub fn eval(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    eval_generic(ctx, argv, false, false)
}

/// EVALSHA sha1 numkeys [key ...] [arg ...].
pub fn evalsha(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    eval_generic(ctx, argv, true, false)
}

/// EVAL_RO: EVAL refusing write commands.
pub fn eval_ro(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    eval_generic(ctx, argv, false, true)
}

/// EVALSHA_RO: EVALSHA refusing write commands.
pub fn evalsha_ro(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    eval_generic(ctx, argv, true, true)
}

fn eval_generic(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], by_sha: bool, ro_command: bool) -> Reply {
    // Redis answers a digest of the wrong length before it reads numkeys.
    if by_sha && argv[1].len() != 40 {
        return Err(noscript());
    }
    let numkeys = int_arg(argv[2])?;
    let rest = &argv[3..];
    if numkeys > rest.len() as i64 {
        return Err(Frame::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let Ok(numkeys) = usize::try_from(numkeys) else {
        return Err(Frame::err("Number of keys can't be negative"));
    };
    let (keys, args) = rest.split_at(numkeys);
    let source = if by_sha {
        Source::Sha(argv[1])
    } else {
        Source::Body(argv[1])
    };
    let shared = ctx.shared;
    let unit = multi::begin_script(ctx);
    let (reply, keep) = shared.scripts.run(ctx, source, keys, args, ro_command);
    multi::end_script(ctx, unit, keep)?;
    reply
}

/// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
pub fn script(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    let scripts = &ctx.shared.scripts;
    if is_word(sub, "help") && argv.len() == 2 {
        let lines = [
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache (ASYNC runs synchronously in forest).",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Print this help.",
        ];
        return Ok(Frame::Array(
            lines.iter().map(|l| Frame::Simple((*l).into())).collect(),
        ));
    }
    if is_word(sub, "load") {
        if argv.len() != 3 {
            return Err(wrong_arity("script|load"));
        }
        return Ok(Frame::bulk(scripts.load(argv[2])?));
    }
    if is_word(sub, "exists") {
        if argv.len() < 3 {
            return Err(wrong_arity("script|exists"));
        }
        return Ok(Frame::Array(
            argv[2..]
                .iter()
                .map(|sha| Frame::Integer(i64::from(scripts.exists(sha))))
                .collect(),
        ));
    }
    if is_word(sub, "flush") {
        if argv.len() == 2
            || (argv.len() == 3 && (is_word(argv[2], "async") || is_word(argv[2], "sync")))
        {
            scripts.flush();
            return Ok(Frame::ok());
        }
        return Err(Frame::err("SCRIPT FLUSH only support SYNC|ASYNC option"));
    }
    if is_word(sub, "kill") {
        if argv.len() != 2 {
            return Err(wrong_arity("script|kill"));
        }
        return scripts.kill();
    }
    Err(unknown_subcommand("script", sub))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn err(text: &str) -> Frame {
        Frame::Error(text.to_string())
    }

    fn eval(h: &mut Harness, script: &str, keys: &[&str], args: &[&str]) -> Frame {
        let numkeys = keys.len().to_string();
        let mut argv = vec!["EVAL", script, &numkeys];
        argv.extend_from_slice(keys);
        argv.extend_from_slice(args);
        h.run(&argv)
    }

    /// The text of an error reply.
    fn error_of(frame: Frame) -> String {
        match frame {
            Frame::Error(text) => text,
            other => panic!("error expected, got {other:?}"),
        }
    }

    // Goal: Lua values become replies by Redis's RESP2 rules.
    // Method: EVAL scripts returning each kind of value.
    #[test]
    fn lua_values_become_replies() {
        let mut h = Harness::new();
        for (script, want) in [
            ("return 1", Frame::Integer(1)),
            ("return 3.99", Frame::Integer(3)),
            ("return -3.99", Frame::Integer(-3)),
            ("return 'x'", bulk("x")),
            ("return true", Frame::Integer(1)),
            ("return false", Frame::Null),
            ("return nil", Frame::Null),
            ("return", Frame::Null),
            ("return {}", Frame::Array(vec![])),
            (
                "return {1, 'a', {2, 'b'}, true, false}",
                Frame::Array(vec![
                    Frame::Integer(1),
                    bulk("a"),
                    Frame::Array(vec![Frame::Integer(2), bulk("b")]),
                    Frame::Integer(1),
                    Frame::Null,
                ]),
            ),
            ("return {1, nil, 3}", Frame::Array(vec![Frame::Integer(1)])),
            ("return {ok='fine'}", Frame::Simple("fine".into())),
            ("return {ok='a\\r\\nb'}", Frame::Simple("a  b".into())),
            ("return {err='My Error'}", err("My Error")),
            ("return {double=1.5}", Frame::Double(1.5)),
            (
                "return {1, {err='inner'}}",
                Frame::Array(vec![Frame::Integer(1), err("inner")]),
            ),
            ("return redis.error_reply('oops')", err("ERR oops")),
            (
                "return redis.error_reply('-WRONG thing')",
                err("WRONG thing"),
            ),
            ("return redis.error_reply('MY code')", err("MY code")),
            (
                "return redis.status_reply('PONG')",
                Frame::Simple("PONG".into()),
            ),
            (
                "return redis.status_reply(1)",
                err("ERR wrong number or type of arguments"),
            ),
            (
                "return redis.sha1hex('')",
                bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709"),
            ),
            ("return function() end", Frame::Null),
        ] {
            assert_eq!(eval(&mut h, script, &[], &[]), want, "{script}");
        }
        // A table holding itself: refused, not an endless reply.
        assert_eq!(
            eval(&mut h, "local t = {} t[1] = t return t", &[], &[]),
            err("ERR reached lua stack limit")
        );
    }

    // Goal: replies become Lua values by Redis's RESP2 rules, and KEYS/ARGV hold the
    // arguments. Method: scripts that describe what redis.call returned.
    #[test]
    fn replies_become_lua_values() {
        let mut h = Harness::new();
        assert_eq!(
            eval(
                &mut h,
                "return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}",
                &["k1", "k2"],
                &["a1"]
            ),
            Frame::Array(vec![
                bulk("k1"),
                bulk("k2"),
                bulk("a1"),
                Frame::Integer(2),
                Frame::Integer(1)
            ])
        );
        for (script, want) in [
            (
                "return redis.call('set', 'k', 'v')",
                Frame::Simple("OK".into()),
            ),
            ("return redis.call('get', 'k')", bulk("v")),
            ("return type(redis.call('set', 'k', 'v'))", bulk("table")),
            ("return redis.call('set', 'k', 'v').ok", bulk("OK")),
            (
                "return redis.call('get', 'missing') == false",
                Frame::Integer(1),
            ),
            ("return type(redis.call('incr', 'n'))", bulk("number")),
            ("return redis.call('incr', 'n') + 10", Frame::Integer(12)),
            ("return redis.call('ping')", Frame::Simple("PONG".into())),
            ("return redis.call('echo', 'hi')", bulk("hi")),
            (
                "redis.call('rpush', 'l', 'a', 'b') return redis.call('lrange', 'l', 0, -1)",
                bulks(&["a", "b"]),
            ),
            (
                "redis.call('hset', 'h', 'f', 'v') return redis.call('hgetall', 'h')",
                bulks(&["f", "v"]),
            ),
            (
                "return redis.pcall('incr', 'k')",
                err("ERR value is not an integer or out of range"),
            ),
            (
                "return redis.pcall('incr', 'k').err",
                bulk("ERR value is not an integer or out of range"),
            ),
            (
                "return redis.pcall('lpush', 'k', 'x')",
                err("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ),
            (
                "redis.call('set', 'f', 2.5) return redis.call('get', 'f')",
                bulk("2.5"),
            ),
            (
                "redis.call('set', 'f', 3.0) return redis.call('get', 'f')",
                bulk("3"),
            ),
            (
                "redis.call('set', 'f', 7) return redis.call('get', 'f')",
                bulk("7"),
            ),
            (
                "return redis.call('exists', 'k', 'nope')",
                Frame::Integer(1),
            ),
        ] {
            assert_eq!(eval(&mut h, script, &[], &[]), want, "{script}");
        }
        // HELLO 3 outside does not change what scripts see (RESP2), nor the client's protocol.
        h.run(&["HELLO", "3"]);
        assert_eq!(
            eval(&mut h, "return redis.call('hgetall', 'h')", &[], &[]),
            bulks(&["f", "v"])
        );
        assert_eq!(h.client.protocol, Protocol::Resp3);
    }

    // Goal: bad input gets Redis's error texts, never a panic.
    // Method: bad numkeys, syntax and runtime errors, refused and unknown commands.
    #[test]
    fn errors_read_as_redis() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["EVAL", "return 1", "2", "a"]),
            err("ERR Number of keys can't be greater than number of args")
        );
        assert_eq!(
            h.run(&["EVAL", "return 1", "-1"]),
            err("ERR Number of keys can't be negative")
        );
        assert_eq!(
            h.run(&["EVAL", "return 1", "x"]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["EVAL", "return 1"]),
            err("ERR wrong number of arguments for 'eval' command")
        );
        assert_eq!(
            eval(&mut h, "return (", &[], &[]),
            err("ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'")
        );
        let sha = |s: &str| sha1_hex(s.as_bytes());
        let script = "local x = 1\nerror('boom')";
        assert_eq!(
            eval(&mut h, script, &[], &[]),
            err(&format!(
                "ERR user_script:2: boom script: {}, on @user_script:2.",
                sha(script)
            ))
        );
        let script = "redis.call('set', 'a', '1')\nreturn redis.call('incr', 'b', 'c')";
        assert_eq!(
            eval(&mut h, script, &[], &[]),
            err(&format!(
                "ERR Wrong number of args calling Redis command from script script: {}, on @user_script:2.",
                sha(script)
            ))
        );
        // The write before the error stands, as in Redis.
        assert_eq!(h.run(&["GET", "a"]), bulk("1"));
        let script = "return redis.call('nope')";
        assert_eq!(
            eval(&mut h, script, &[], &[]),
            err(&format!(
                "ERR Unknown Redis command called from script script: {}, on @user_script:1.",
                sha(script)
            ))
        );
        let script = "return redis.call('get', 'a').x.y";
        assert!(error_of(eval(&mut h, script, &[], &[]))
            .starts_with("ERR user_script:1: attempt to index field 'x' (a nil value) script: "));
        for command in [
            "multi",
            "exec",
            "watch",
            "subscribe",
            "eval",
            "evalsha",
            "script",
            "quit",
            "shutdown",
            "auth",
            "client",
            "config",
        ] {
            let script = format!("return redis.pcall('{command}', 'a', 'b', 'c')");
            let text = error_of(eval(&mut h, &script, &[], &[]));
            assert!(
                text == "ERR This Redis command is not allowed from script"
                    || text == "ERR Wrong number of args calling Redis command from script",
                "{command}: {text}"
            );
        }
        assert_eq!(
            eval(&mut h, "return redis.pcall('multi')", &[], &[]),
            err("ERR This Redis command is not allowed from script")
        );
        assert_eq!(
            eval(&mut h, "return redis.pcall()", &[], &[]),
            err("ERR Please specify at least one argument for this redis lib call")
        );
        assert_eq!(
            eval(&mut h, "return redis.pcall('get', {})", &[], &[]),
            err("ERR Lua redis lib command arguments must be strings or integers")
        );
        // pcall turns a redis.call error into its message, as Redis's pcall.
        assert_eq!(
            eval(
                &mut h,
                "local ok, e = pcall(redis.call, 'nope') return {tostring(ok), e}",
                &[],
                &[]
            ),
            bulks(&["false", "ERR Unknown Redis command called from script"])
        );
        assert_eq!(
            eval(&mut h, "return redis.pcall('get', '\\255x')", &[], &[]),
            err("ERR keys beginning with byte 0xff are reserved by forest")
        );
    }

    // Goal: globals are read-only and unknown ones are errors (Redis 7), and no script can
    // change what the next one sees. Method: scripts that try; then one that uses them.
    #[test]
    fn globals_are_protected() {
        let mut h = Harness::new();
        assert!(error_of(eval(&mut h, "x = 1", &[], &[]))
            .starts_with("ERR user_script:1: Attempt to modify a readonly table script: "));
        assert!(error_of(eval(&mut h, "return y", &[], &[])).starts_with(
            "ERR Script attempted to access nonexistent global variable 'y' script: "
        ));
        for script in [
            "string.len = nil",
            "redis.call = nil",
            "_G.string = nil",
            "rawset(_G, 'KEYS', 1)",
            "rawset(string, 'len', 1)",
            "setmetatable(_G, nil)",
            "setfenv(0, {})",
            "math.floor = nil",
        ] {
            assert!(
                matches!(eval(&mut h, script, &[], &[]), Frame::Error(_)),
                "{script}"
            );
        }
        assert_eq!(
            eval(
                &mut h,
                "return {string.len('abc'), math.floor(2.5), type(redis.call), #KEYS}",
                &["k"],
                &[]
            ),
            Frame::Array(vec![
                Frame::Integer(3),
                Frame::Integer(2),
                bulk("function"),
                Frame::Integer(1)
            ])
        );
        for removed in ["dofile", "loadfile", "print", "debug", "newproxy"] {
            assert!(matches!(
                eval(&mut h, &format!("return {removed}"), &[], &[]),
                Frame::Error(_)
            ));
        }
        assert_eq!(
            eval(
                &mut h,
                "return loadstring(string.dump(function() return 1 end))",
                &[],
                &[]
            ),
            Frame::Null
        );
        assert_eq!(
            eval(&mut h, "return loadstring('return 7')()", &[], &[]),
            Frame::Integer(7)
        );
    }

    // Goal: EVALSHA, SCRIPT LOAD / EXISTS / FLUSH as Redis, digests in any letter case.
    #[test]
    fn script_cache() {
        let mut h = Harness::new();
        let body = "return 'cached'";
        let sha = sha1_hex(body.as_bytes());
        let noscript = err("NOSCRIPT No matching script. Please use EVAL.");
        assert_eq!(h.run(&["EVALSHA", &sha, "0"]), noscript);
        assert_eq!(h.run(&["EVALSHA", "short", "x"]), noscript);
        assert_eq!(
            h.run(&["SCRIPT", "EXISTS", &sha, "nope"]),
            Frame::Array(vec![Frame::Integer(0), Frame::Integer(0)])
        );
        assert_eq!(h.run(&["EVAL", body, "0"]), bulk("cached"));
        assert_eq!(h.run(&["EVALSHA", &sha, "0"]), bulk("cached"));
        assert_eq!(
            h.run(&["EVALSHA", &sha.to_ascii_uppercase(), "0"]),
            bulk("cached")
        );
        assert_eq!(
            h.run(&["SCRIPT", "EXISTS", &sha.to_ascii_uppercase()]),
            Frame::Array(vec![Frame::Integer(1)])
        );
        assert_eq!(h.run(&["SCRIPT", "FLUSH"]), Frame::ok());
        assert_eq!(h.run(&["EVALSHA", &sha, "0"]), noscript);
        assert_eq!(h.run(&["SCRIPT", "LOAD", body]), bulk(&sha));
        assert_eq!(h.run(&["EVALSHA_RO", &sha, "0"]), bulk("cached"));
        assert_eq!(h.run(&["SCRIPT", "FLUSH", "ASYNC"]), Frame::ok());
        assert_eq!(h.run(&["SCRIPT", "FLUSH", "sync"]), Frame::ok());
        assert_eq!(
            h.run(&["SCRIPT", "FLUSH", "NOW"]),
            err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
        );
        assert_eq!(
            h.run(&["SCRIPT", "LOAD", "return ("]),
            err("ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'")
        );
        assert_eq!(
            h.run(&["SCRIPT", "LOAD"]),
            err("ERR wrong number of arguments for 'script|load' command")
        );
        assert_eq!(
            h.run(&["SCRIPT", "NOPE"]),
            err("ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.")
        );
        assert_eq!(
            h.run(&["SCRIPT", "KILL"]),
            err("NOTBUSY No scripts in execution right now.")
        );
        assert!(matches!(h.run(&["SCRIPT", "HELP"]), Frame::Array(_)));
        // EVAL's scripts are evicted past the bound, least recently used first; SCRIPT LOAD's stay.
        let loaded = sha1_hex(b"return 'loaded'");
        h.run(&["SCRIPT", "LOAD", "return 'loaded'"]);
        h.run(&["EVAL", "return 0", "0"]);
        for i in 1..EVAL_SCRIPTS_MAX {
            h.run(&["EVAL", &format!("return {i}"), "0"]);
        }
        h.run(&["EVAL", "return 0", "0"]);
        h.run(&["EVAL", "return 'one more'", "0"]);
        let exists =
            |h: &mut Harness, body: &str| h.run(&["SCRIPT", "EXISTS", &sha1_hex(body.as_bytes())]);
        assert_eq!(
            exists(&mut h, "return 1"),
            Frame::Array(vec![Frame::Integer(0)]),
            "the oldest went"
        );
        assert_eq!(
            exists(&mut h, "return 0"),
            Frame::Array(vec![Frame::Integer(1)]),
            "used again, kept"
        );
        assert_eq!(
            h.run(&["SCRIPT", "EXISTS", &loaded]),
            Frame::Array(vec![Frame::Integer(1)])
        );
    }

    // Goal: a script's reads see its own writes; its writes reach the store as one batch
    // (nothing visible to another client mid-script is testable here, see
    // tests/scripting.rs); a script that errors keeps the writes before the error.
    #[test]
    fn script_reads_its_own_writes() {
        let mut h = Harness::new();
        let script = "redis.call('set', KEYS[1], 'v1') \
                      redis.call('rpush', KEYS[2], 'x') \
                      redis.call('expire', KEYS[1], 100) \
                      return {redis.call('get', KEYS[1]), redis.call('llen', KEYS[2]), \
                              redis.call('ttl', KEYS[1]), redis.call('exists', KEYS[1], KEYS[2]), \
                              redis.call('dbsize'), #redis.call('keys', '*')}";
        assert_eq!(
            eval(&mut h, script, &["a", "l"], &[]),
            Frame::Array(vec![
                bulk("v1"),
                Frame::Integer(1),
                Frame::Integer(100),
                Frame::Integer(2),
                Frame::Integer(2),
                Frame::Integer(2)
            ])
        );
        assert_eq!(h.run(&["TTL", "a"]), Frame::Integer(100));
        // Keys the script did not declare are written too.
        assert_eq!(
            eval(
                &mut h,
                "redis.call('set', 'undeclared', 1) return 1",
                &[],
                &[]
            ),
            Frame::Integer(1)
        );
        assert_eq!(h.run(&["GET", "undeclared"]), bulk("1"));
        let mut h = h.restart();
        assert_eq!(h.run(&["GET", "a"]), bulk("v1"));
        assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(1));
    }

    // Goal: EVAL_RO and `#!lua flags=no-writes` refuse writes; shebang errors as Redis.
    #[test]
    fn read_only_scripts() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        let ro = |h: &mut Harness, script: &str| h.run(&["EVAL_RO", script, "1", "k"]);
        assert_eq!(ro(&mut h, "return redis.call('get', KEYS[1])"), bulk("v"));
        assert_eq!(
            ro(&mut h, "return redis.pcall('set', KEYS[1], 'w')"),
            err("ERR Write commands are not allowed from read-only scripts.")
        );
        assert_eq!(
            ro(&mut h, "return redis.pcall('publish', 'c', 'm')"),
            err("ERR Write commands are not allowed from read-only scripts.")
        );
        assert_eq!(
            eval(
                &mut h,
                "#!lua flags=no-writes\nreturn redis.pcall('del', 'k')",
                &[],
                &[]
            ),
            err("ERR Write commands are not allowed from read-only scripts.")
        );
        assert_eq!(
            eval(
                &mut h,
                "#!lua\nreturn redis.call('set', 'k', 'w')",
                &[],
                &[]
            ),
            Frame::Simple("OK".into())
        );
        assert_eq!(
            ro(&mut h, "#!lua\nreturn 1"),
            err("ERR Can not execute a script with write flag using *_ro command.")
        );
        assert_eq!(
            ro(&mut h, "#!lua flags=no-writes,allow-oom\nreturn 1"),
            Frame::Integer(1)
        );
        assert_eq!(
            eval(&mut h, "#!python\nreturn 1", &[], &[]),
            err("ERR Unexpected engine in script shebang: #!python")
        );
        assert_eq!(
            eval(&mut h, "#!lua flags=fast\nreturn 1", &[], &[]),
            err("ERR Unexpected flag in script shebang: fast")
        );
        assert_eq!(
            eval(&mut h, "#!lua x=1\nreturn 1", &[], &[]),
            err("ERR Unknown lua shebang option: x=1")
        );
        // Line numbers count the shebang line.
        assert!(error_of(eval(&mut h, "#!lua\nerror('here')", &[], &[]))
            .starts_with("ERR user_script:2: here"));
        assert_eq!(h.run(&["GET", "k"]), bulk("w"));
    }

    // Goal: a runaway script is stopped after the time limit, its writes dropped, even when it
    // catches errors with pcall or loops in a coroutine; the server takes scripts after it.
    // Method: CONFIG SET busy-reply-threshold 100, then endless loops.
    #[test]
    fn runaway_scripts_are_stopped() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
            Frame::ok()
        );
        assert_eq!(
            h.run(&["CONFIG", "GET", "lua-time-limit"]),
            Frame::Map(vec![(bulk("lua-time-limit"), bulk("100"))])
        );
        for script in [
            "redis.call('set', 'w', 1) while true do end",
            "redis.call('set', 'w', 1) while true do pcall(function() while true do end end) end",
            "redis.call('set', 'w', 1) coroutine.wrap(function() while true do end end)()",
            "redis.call('set', 'w', 1) local s = 'x' while true do s = string.sub(s .. 'x', 1, 10) end",
        ] {
            let started = Instant::now();
            let text = error_of(eval(&mut h, script, &[], &[]));
            assert!(text.starts_with("ERR Script timed out: it ran longer than busy-reply-threshold (100 ms)"), "{script}: {text}");
            assert!(started.elapsed() < Duration::from_secs(30), "{script}");
            assert_eq!(h.run(&["EXISTS", "w"]), Frame::Integer(0), "{script}: its write was dropped");
        }
        assert_eq!(eval(&mut h, "return 'after'", &[], &[]), bulk("after"));
        // Memory past the bound is refused, not taken (16 MiB here).
        h.shared.scripts.set_memory_bytes_max(16 << 20);
        h.run(&["CONFIG", "SET", "busy-reply-threshold", "60000"]);
        let script = "local t = {} for i = 1, 1e7 do t[i] = string.rep('x', 100) .. i end";
        let text = error_of(eval(&mut h, script, &[], &[]));
        assert!(text.contains("not enough memory"), "{text}");
        assert_eq!(
            eval(&mut h, "return #string.rep('x', 1000)", &[], &[]),
            Frame::Integer(1000)
        );
        assert!(matches!(
            h.run(&["CONFIG", "SET", "lua-time-limit", "x"]),
            Frame::Error(_)
        ));
    }

    // Goal: SCRIPT KILL from another client stops a running script; its writes are dropped.
    // Method: a script loops on one thread; another client sends SCRIPT KILL until it is OK.
    #[test]
    fn script_kill_stops_a_running_script() {
        let h = Harness::new();
        let shared = &h.shared;
        std::thread::scope(|s| {
            let runner = s.spawn(|| {
                let mut client = shared.new_client("a".into(), "b".into(), None);
                run_on(
                    shared,
                    &mut client,
                    &[
                        b"EVAL",
                        b"redis.call('set', 'w', 1) while true do end",
                        b"0",
                    ],
                )
            });
            let mut killer = shared.new_client("c".into(), "d".into(), None);
            let started = Instant::now();
            while run_on(shared, &mut killer, &[b"SCRIPT", b"KILL"]) != Frame::ok() {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the script never ran"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let reply = runner.join().expect("runner");
            assert!(error_of(reply).starts_with("ERR Script killed by user with SCRIPT KILL..."));
            assert_eq!(
                run_on(shared, &mut killer, &[b"EXISTS", b"w"]),
                Frame::Integer(0)
            );
        });
    }

    /// CPU time (user + system) the calling thread used so far, in clock ticks.
    fn thread_cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("thread stat");
        // The fields after the command name (which ends with ')'): utime, stime are 12th, 13th.
        let fields: Vec<&str> = stat[stat.rfind(')').expect("name") + 2..]
            .split(' ')
            .collect();
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }

    // Goal (review rev-pcscript F2): a script waiting for a runtime's gate to clear (a
    // batch running inline, which may be long: KEYS, FLUSHALL) sleeps; it spun in
    // `yield_now` for as long, a core's worth of CPU on an idle machine.
    // Method: a runtime gate marked inline; a thread takes `hold` (it must wait), the gate
    // clears after 1 s, and the thread's own CPU time over its wait must stay under 50 ms
    // (clock ticks of /proc/thread-self/stat).
    #[test]
    fn a_script_waiting_for_a_gate_sleeps() {
        let scripts = Scripts::default();
        let gate = scripts.runtime_gate();
        let mark = gate.enter();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let before = thread_cpu_ticks();
                let started = Instant::now();
                let holding = scripts.hold();
                let (waited, ticks) = (started.elapsed(), thread_cpu_ticks() - before);
                drop(holding);
                (waited, ticks)
            });
            std::thread::sleep(Duration::from_secs(1));
            drop(mark);
            let (waited, ticks) = waiter.join().expect("waiter");
            assert!(
                waited >= Duration::from_millis(900),
                "hold did not wait: {waited:?}"
            );
            let hz = 100; // Linux's USER_HZ, the unit of /proc's CPU times.
            let used = Duration::from_millis(ticks * 1000 / hz);
            assert!(
                used < Duration::from_millis(50),
                "hold used {used:?} of CPU waiting"
            );
        });
        assert!(!scripts.holding());
    }

    // Goal (review rev-pcscript F5): a script whose run panics leaves no running mark:
    // SCRIPT KILL then answers NOTBUSY, and the stripes are free for the next script.
    // Method: inject a panic right after the run is marked (thread-local hook), catch it,
    // then SCRIPT KILL and a second EVAL. Before the drop guard SCRIPT KILL answered OK.
    #[test]
    fn a_panicking_script_leaves_no_running_mark() {
        let h = Harness::new();
        let shared = &h.shared;
        let mut client = shared.new_client("a".into(), "b".into(), None);
        PANIC_WHILE_RUNNING.with(|p| p.set(true));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_on(shared, &mut client, &[b"EVAL", b"return 1", b"0"])
        }));
        PANIC_WHILE_RUNNING.with(|p| p.set(false));
        assert!(panicked.is_err(), "the injected panic did not happen");
        assert!(!shared.scripts.holding());
        let mut other = shared.new_client("c".into(), "d".into(), None);
        assert_eq!(
            error_of(run_on(shared, &mut other, &[b"SCRIPT", b"KILL"])),
            "NOTBUSY No scripts in execution right now."
        );
        assert_eq!(
            run_on(shared, &mut other, &[b"EVAL", b"return 2", b"0"]),
            Frame::Integer(2)
        );
    }

    // Goal: EVAL inside MULTI is queued and runs in EXEC's one batch, seeing the earlier
    // commands' writes; redis.log and redis.sha1hex work.
    #[test]
    fn eval_inside_exec() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["MULTI"]), Frame::Simple("OK".into()));
        assert_eq!(h.run(&["SET", "a", "1"]), Frame::Simple("QUEUED".into()));
        assert_eq!(
            h.run(&[
                "EVAL",
                "redis.log(redis.LOG_DEBUG, 'not shown') return redis.call('incr', KEYS[1])",
                "1",
                "a"
            ]),
            Frame::Simple("QUEUED".into())
        );
        assert_eq!(h.run(&["GET", "a"]), Frame::Simple("QUEUED".into()));
        assert_eq!(
            h.run(&["EXEC"]),
            Frame::Array(vec![Frame::ok(), Frame::Integer(2), bulk("2")])
        );
        // A stopped script inside EXEC drops its own writes only.
        h.run(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
        h.run(&["MULTI"]);
        h.run(&["SET", "b", "1"]);
        h.run(&["EVAL", "redis.call('set', 'c', 1) while true do end", "0"]);
        h.run(&["SET", "d", "1"]);
        let Frame::Array(replies) = h.run(&["EXEC"]) else {
            panic!("array expected");
        };
        assert!(matches!(&replies[1], Frame::Error(e) if e.starts_with("ERR Script timed out")));
        assert_eq!(h.run(&["EXISTS", "b", "c", "d"]), Frame::Integer(2));
        assert_eq!(
            eval(
                &mut h,
                "redis.log(redis.LOG_WARNING, 'hello', 'from', 'a', 'test') return 1",
                &[],
                &[]
            ),
            Frame::Integer(1)
        );
        assert!(
            matches!(eval(&mut h, "redis.log(9, 'x')", &[], &[]), Frame::Error(e) if e.starts_with("ERR Invalid log level."))
        );
    }
}
