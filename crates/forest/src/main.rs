//! The `forest` command line: `forest bench` (more subcommands come with the store and the
//! server). Errors print as one line and exit with status 1.

use clap::{Parser, Subcommand};

/// Counts heap bytes so `forest bench` can report each index's memory; off (one relaxed
/// load per allocation) except around a benchmark's load phase.
#[global_allocator]
static ALLOC: forest_bench::alloc_count::CountingAlloc = forest_bench::alloc_count::CountingAlloc;

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
    // No doc comment here: it would replace the about texts `BenchArgs` carries.
    Bench(forest_bench::BenchArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help and --version: exit 0
        Err(err) => fail(&command_line_error(&err)),
    };
    let result = match cli.command {
        Command::Bench(args) => forest_bench::run(args),
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

/// A command-line error as one line: clap's first line, without its `error: ` prefix.
fn command_line_error(err: &clap::Error) -> String {
    let text = err.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    format!("{first} (see forest --help)")
}
