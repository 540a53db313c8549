//! The `forest` command line: `forest serve` ([`serve_cmd`]), `forest bench`, `forest
//! engines` ([`engines_cmd`]), and the store
//! commands `load`, `get`, `put`, `del`, `scan`, `check`, `checkpoint` ([`store_cmd`]),
//! `inspect` ([`inspect_cmd`]).
//! Errors print as one line and exit with status 1.

mod engines_cmd;
mod inspect_cmd;
mod serve_cmd;
mod store_cmd;

use clap::{Parser, Subcommand};

/// mimalloc (built without transparent huge pages), wrapped so that `forest bench` can count
/// each index's heap bytes. The wrapper is off (one relaxed load of a never-written flag per
/// allocation and free) except around a benchmark's load phase, so `forest serve` and the
/// store commands pay no more than that (measured in docs/BENCHMARKS.md "Allocator (issue
/// 13)").
#[global_allocator]
static ALLOC: forest_bench::alloc_count::CountingAlloc<mimalloc::MiMalloc> =
    forest_bench::alloc_count::CountingAlloc(mimalloc::MiMalloc);

/// forest: a persistent, concurrent, ordered key-value store with interchangeable index
/// engines.
#[derive(Parser, Debug)]
#[command(name = "forest", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a store over Redis's protocol (RESP2/RESP3) on port 6379: redis-cli,
    /// redis-benchmark and Redis client libraries work unchanged; FOREST.RANGE, FOREST.COUNT
    /// and FOREST.DELRANGE add ordered ranges (docs/PROTOCOL.md).
    Serve(Box<serve_cmd::ServeArgs>),
    // No doc comment here: it would replace the about texts `BenchArgs` carries.
    Bench(Box<forest_bench::BenchArgs>),
    /// Bulk-load N keys `key-000000000000`.. into a store (a progress bar on a terminal).
    Load(store_cmd::LoadArgs),
    /// Print a key's value (exit 1 if absent). Keys and values are UTF-8 text, or hex with --hex.
    Get(store_cmd::GetArgs),
    /// Set a key to a value (UTF-8 text, or hex with --hex), creating the store if needed.
    Put(store_cmd::PutArgs),
    /// Remove a key; prints `removed` or `absent`.
    Del(store_cmd::DelArgs),
    /// Print `key<TAB>value` lines in key order, within optional bounds.
    Scan(store_cmd::ScanArgs),
    /// Verify every file of a store without changing it and report what an open would
    /// recover (checkpoint, records replayed, torn tails, records/s and MB/s); exit 1 on
    /// damage. Reads without the store's lock and opens nothing for writing: a store a
    /// server holds is checked (the output says it is in use: figures from a moment ago),
    /// and so is a read-only copy. `--repair` opens a store whose
    /// recovery refuses (acknowledged writes proven lost), dropping and listing the loss.
    /// A bwtree store with map checkpoints (DIR/lss/map-*): checks the newest valid map
    /// checkpoint (a damaged one is named, with whether the older is usable), every LSS
    /// segment record's crc up to the stable end T (a torn tail above T is what an open cuts,
    /// not damage), and the WAL from the checkpoint's RSSP on (logs below it are deleted by
    /// design).
    /// The checkpoint's mapping table is checked too: every entry names a piece chain that
    /// decodes (each piece that PID's, ending at a page image, no piece shared by two PIDs).
    Check(store_cmd::CheckArgs),
    /// Print a read-only picture of a store: for a bwtree store on map checkpoints the
    /// checkpoint recovery uses (S, T, RSSP), each LSS segment's live and total bytes, the
    /// pages an open leaves evicted or rebuilds resident and pieces per page; for any other
    /// store its logs and checkpoints. Exit 1 on damage. Reads without the store's lock and
    /// opens nothing for writing, as `check` does.
    Inspect(inspect_cmd::InspectArgs),
    /// Write a checkpoint (and delete the logs and checkpoints it makes obsolete).
    Checkpoint(store_cmd::DirArgs),
    /// List every index engine with its capabilities and parameters (what each means and
    /// its default), and the peers `forest bench` measures.
    Engines(engines_cmd::EnginesArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help and --version: exit 0
        Err(err) => fail(&command_line_error(&err)),
    };
    let result = match cli.command {
        Command::Serve(args) => serve_cmd::serve(*args),
        Command::Bench(args) => forest_bench::run(*args),
        Command::Load(args) => store_cmd::load(args),
        Command::Get(args) => store_cmd::get(args),
        Command::Put(args) => store_cmd::put(args),
        Command::Del(args) => store_cmd::del(args),
        Command::Scan(args) => store_cmd::scan(args),
        Command::Check(args) => store_cmd::check(args),
        Command::Inspect(args) => inspect_cmd::inspect(args),
        Command::Checkpoint(args) => store_cmd::checkpoint(args),
        Command::Engines(args) => engines_cmd::engines(args),
    };
    if let Err(err) = result {
        fail(&format!("{err:#}"));
    }
}

/// Prints one line and exits with status 1.
fn fail(message: &str) -> ! {
    eprintln!("forest: {message}");
    std::process::exit(1);
}

/// A command-line error as one line: clap's first paragraph (which may list the missing
/// arguments on lines of their own), joined, without its `error: ` prefix.
fn command_line_error(err: &clap::Error) -> String {
    let text = err.to_string();
    let first: Vec<&str> = text
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let first = first.join(" ");
    let first = first.strip_prefix("error: ").unwrap_or(&first);
    format!("{first} (see forest --help)")
}
