//! `forest serve`: the RESP server over a store (issue 6; docs/PROTOCOL.md), a thin layer
//! over [`forest_server::Server`]. Prints one start line on stdout once listening, stops on
//! SIGINT, SIGTERM or SHUTDOWN after making the log durable, and exits 0.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use forest_server::{Config, IoModel, Server};
use forest_store::Durability;

/// `forest serve`'s flags.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The store's directory (created if missing).
    #[arg(long, default_value = "./forest-data", value_name = "DIR")]
    pub dir: PathBuf,
    /// The index engine, with parameters if wanted: `masstree`, `bwtree:page=64`,
    /// `masstree:fanout=15x32` (`forest engines` lists them) [default: the one the directory
    /// records, masstree for a new store]. Another than the recorded one is refused without
    /// --switch-engine.
    #[arg(long, value_name = "SPEC")]
    pub engine: Option<String>,
    /// Rebuild the index in --engine although the directory recorded another (the logs and
    /// checkpoints hold keys and values only), and record it.
    #[arg(long, requires = "engine")]
    pub switch_engine: bool,
    /// When a write's reply is sent: sync (fsync per write), group (after its group
    /// commit's fsync) or periodic:MS (at once; fsync at least every MS ms).
    #[arg(long, default_value = "group", value_name = "MODE")]
    pub durability: String,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: String,
    /// The TCP port (0: any free port; the start line tells which).
    #[arg(long, default_value_t = 6379, value_name = "N")]
    pub port: u16,
    /// Threads of the per-core and tokio I/O models (0: one per core); the threads model
    /// runs one thread per connection.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// Per-core I/O model: how long (microseconds) a runtime keeps polling for requests
    /// after its last read before it sleeps in epoll_wait (0: it sleeps at once). A request
    /// arriving meanwhile is served without a thread wake-up, for CPU spent polling.
    #[arg(long, default_value_t = forest_server::server::BUSY_POLL_DEFAULT.as_micros() as u64, value_name = "US")]
    pub busy_poll_us: u64,
    /// With --busy-poll-us: between polls, give the core to any other thread runnable on it
    /// (sched_yield), e.g. a client on the same machine.
    #[arg(long)]
    pub busy_poll_yield: bool,
    /// The most clients served at once; the next gets an error and is closed.
    #[arg(long, default_value_t = forest_server::server::MAX_CLIENTS_DEFAULT, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_clients: usize,
    /// Require AUTH with this password (user `default`) before other commands.
    #[arg(long, value_name = "PASS")]
    pub requirepass: Option<String>,
    /// How connections are driven: per-core (tasks on --threads single-threaded runtimes,
    /// each connection staying on one, as Redis's event loop, one per core; Lua scripts and
    /// SAVE run on a blocking thread), threads (one thread per connection) or tokio (tasks
    /// on a multi-thread runtime of --threads workers).
    #[arg(long, default_value = "per-core", value_name = "MODEL")]
    pub io: IoModel,
    /// A subscriber's output bound, as Redis's `client-output-buffer-limit pubsub`: cut at
    /// HARD bytes queued, or over SOFT for SECONDS (units b, k, kb, m, mb, g, gb; 0: none).
    /// CONFIG SET client-output-buffer-limit changes it at run time.
    #[arg(long, default_value = "32mb 8mb 60", value_name = "HARD SOFT SECONDS",
          value_parser = parse_pubsub_limit)]
    pub pubsub_limit: forest_server::pubsub::Limits,
    /// Engine bwtree only: run the tree on its own log-structured store (DIR/lss/) and evict
    /// pages above this many resident bytes: `none` or bytes with a unit (b, k, kb, kib, m,
    /// mb, mib, g, gb, gib; `64MiB`). The tree then recovers from its LSS (map checkpoints,
    /// below). Refused for other engines.
    #[arg(long, value_name = "BYTES")]
    pub memory_budget: Option<String>,
    /// With --memory-budget: take a mapping-table checkpoint of DIR/lss/ (on a background
    /// thread) after every BYTES of log (units as --memory-budget) [default: 64MiB]. A start
    /// then recovers the tree from its newest map checkpoint and redoes only the log after it;
    /// the log below the older kept one is deleted.
    #[arg(long, value_name = "BYTES")]
    pub map_checkpoint_bytes: Option<String>,
    /// With --memory-budget: take no map checkpoints, so every start discards DIR/lss/ and
    /// rebuilds the tree from the checkpoint and log. Ignored by a store that already has map
    /// checkpoints (its log may be cut below them): it keeps using them.
    #[arg(long, conflicts_with = "map_checkpoint_bytes")]
    pub no_map_checkpoints: bool,
}

fn parse_pubsub_limit(text: &str) -> std::result::Result<forest_server::pubsub::Limits, String> {
    match text.split_ascii_whitespace().collect::<Vec<_>>()[..] {
        [hard, soft, seconds] => forest_server::pubsub::Limits::parse(hard, soft, seconds),
        _ => Err(format!(
            "'{text}': three values expected, HARD SOFT SECONDS (as '32mb 8mb 60')"
        )),
    }
}

/// Runs the server until it is stopped.
pub fn serve(args: ServeArgs) -> Result<()> {
    let durability: Durability = args.durability.parse()?;
    let memory_budget_bytes = match &args.memory_budget {
        Some(text) => forest_store::parse_memory_budget(text).context("--memory-budget")?,
        None => None,
    };
    let map_checkpoint_wal_bytes = forest_store::map_checkpoint_schedule(
        args.map_checkpoint_bytes.as_deref(),
        args.no_map_checkpoints,
    )?;
    if memory_budget_bytes.is_none() {
        if let Some(flag) = forest_store::map_checkpoint_flag(
            args.map_checkpoint_bytes.is_some(),
            args.no_map_checkpoints,
        ) {
            anyhow::bail!("{flag} needs --memory-budget (map checkpoints are a budgeted bwtree's)");
        }
    }
    let config = Config {
        dir: args.dir,
        engine: args.engine,
        switch_engine: args.switch_engine,
        durability,
        bind: args.bind,
        port: args.port,
        threads: args.threads,
        busy_poll: std::time::Duration::from_micros(args.busy_poll_us),
        busy_poll_yield: args.busy_poll_yield,
        max_clients: args.max_clients,
        requirepass: args.requirepass,
        io: args.io,
        pubsub_limits: args.pubsub_limit,
        memory_budget_bytes,
        map_checkpoint_wal_bytes,
        ..Config::default()
    };
    let dir = config.dir.display().to_string();
    let server = Server::open(config).with_context(|| format!("serve {dir}"))?;
    forest_server::shutdown::install_signal_handlers(server.shutdown_handle())
        .context("install signal handlers")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", server.start_line()).context("write the start line")?;
    stdout.flush().context("write the start line")?;
    drop(stdout);
    server.run().context("stop the server")?;
    Ok(())
}
