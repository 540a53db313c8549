//! The store subcommands: `load`, `get`, `put`, `del`, `scan`, `check`, `checkpoint` (issue 5
//! "CLI"), each a thin layer over [`forest_store::Store`].
//!
//! Keys and values are UTF-8 text on the command line and are written raw to stdout; with
//! `--hex` both are hexadecimal in and out, for binary data. The store does not record its
//! engine: the files are engine-neutral (logs and checkpoints hold keys and values), so any
//! `--engine` opens any store; it picks the in-memory index (default `lockbtree`).
//!
//! Choices: commands that only read (`get`, `scan`, `check`, `checkpoint`, `del`) refuse a
//! directory that does not exist rather than create an empty store; `check` cannot open
//! read-only (the store has no such mode), so it runs the recovery of a normal open, which
//! cuts torn tails and may write a checkpoint, and reports what it found.

use std::io::{IsTerminal, Write};
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use forest_core::Order;
use forest_store::{BatchOp, Durability, Store, StoreOptions, ENGINE_NAMES};
use indicatif::{ProgressBar, ProgressStyle};

/// Operations per `write_batch` call in `load`: large enough to share one durability wait
/// among many writes, small enough to keep the batch's memory and latency low.
const LOAD_BATCH_COUNT: usize = 1_000;
/// The longest value `load` writes (the store's own limit).
const LOAD_VALUE_BYTES_MAX: usize = forest_core::VALUE_BYTES_MAX;

/// Where the store is and how to open it.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The store's directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The in-memory index: lockbtree, bwtree or masstree. The files do not depend on it.
    #[arg(long, default_value = "lockbtree", value_name = "ENGINE")]
    pub engine: String,
    /// When writes are acknowledged: sync, group or periodic:MS.
    #[arg(long, default_value = "group", value_name = "MODE")]
    pub durability: String,
}

/// How keys and values are spelled.
#[derive(Args, Debug, Clone, Copy)]
pub struct Encoding {
    /// Keys and values are hexadecimal, in and out (for binary data).
    #[arg(long)]
    pub hex: bool,
}

/// `forest load`'s flags.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// How many keys to write: `key-000000000000` upwards.
    #[arg(long, value_name = "N")]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100, value_name = "B")]
    pub value_size: usize,
}

/// `forest get`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    pub key: String,
    #[command(flatten)]
    pub encoding: Encoding,
}

/// `forest put`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct PutArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    pub key: String,
    pub value: String,
    #[command(flatten)]
    pub encoding: Encoding,
}

/// `forest del`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct DelArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    pub key: String,
    #[command(flatten)]
    pub encoding: Encoding,
}

/// `forest scan`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct ScanArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The first key (inclusive).
    #[arg(long, value_name = "K")]
    pub from: Option<String>,
    /// The key to stop before (exclusive).
    #[arg(long, value_name = "K")]
    pub to: Option<String>,
    /// Descending order (the same bounds).
    #[arg(long)]
    pub reverse: bool,
    /// Print at most N records.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub encoding: Encoding,
}

/// `forest check`'s and `forest checkpoint`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct DirArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

fn decode(text: &str, encoding: Encoding, what: &str) -> Result<Vec<u8>> {
    if !encoding.hex {
        return Ok(text.as_bytes().to_vec());
    }
    if !text.len().is_multiple_of(2) {
        bail!("{what} {text:?}: odd number of hex digits");
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| anyhow!("{what} {text:?}: not hexadecimal"))
        })
        .collect()
}

fn encode(bytes: &[u8], encoding: Encoding) -> Vec<u8> {
    if encoding.hex {
        bytes
            .iter()
            .flat_map(|b| format!("{b:02x}").into_bytes())
            .collect()
    } else {
        bytes.to_vec()
    }
}

fn open(args: &StoreArgs, must_exist: bool) -> Result<Store> {
    let dir = &args.dir;
    if must_exist && !dir.is_dir() {
        bail!("{}: no such store directory", dir.display());
    }
    if !ENGINE_NAMES.contains(&args.engine.as_str()) {
        bail!(
            "--engine {:?}: known engines are {}",
            args.engine,
            ENGINE_NAMES.join(", ")
        );
    }
    let durability: Durability = args.durability.parse().context("--durability")?;
    Store::open_path(
        dir,
        StoreOptions {
            engine: args.engine.clone(),
            durability,
            ..StoreOptions::default()
        },
    )
    .with_context(|| format!("opening the store in {}", dir.display()))
}

fn close(store: Store, dir: &Path) -> Result<()> {
    store
        .close()
        .with_context(|| format!("closing the store in {}", dir.display()))
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} keys ({per_sec})",
    ) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// `forest load`: writes `--keys` keys in batches.
pub fn load(args: LoadArgs) -> Result<()> {
    if args.value_size > LOAD_VALUE_BYTES_MAX {
        bail!(
            "--value-size {}: at most {LOAD_VALUE_BYTES_MAX} bytes",
            args.value_size
        );
    }
    let store = open(&args.store, false)?;
    let bar = progress_bar(args.keys);
    let began = Instant::now();
    let mut batch = Vec::with_capacity(LOAD_BATCH_COUNT);
    let mut index = 0u64;
    while index < args.keys {
        batch.clear();
        while index < args.keys && batch.len() < LOAD_BATCH_COUNT {
            let key = format!("key-{index:012}").into_bytes();
            // The value repeats the key's digits, so a loaded store can be checked by eye.
            let value: Vec<u8> = key[4..]
                .iter()
                .copied()
                .cycle()
                .take(args.value_size)
                .collect();
            batch.push(BatchOp::Upsert(key, value));
            index += 1;
        }
        store
            .write_batch(&batch)
            .with_context(|| format!("loading into {}", args.store.dir.display()))?;
        bar.inc(batch.len() as u64);
    }
    bar.finish_and_clear();
    close(store, &args.store.dir)?;
    let elapsed = began.elapsed().as_secs_f64();
    println!(
        "loaded {} keys of {} value bytes into {} in {elapsed:.2} s ({:.0} keys/s)",
        args.keys,
        args.value_size,
        args.store.dir.display(),
        args.keys as f64 / elapsed.max(f64::MIN_POSITIVE)
    );
    Ok(())
}

/// `forest get`: prints the value, or fails if the key is absent.
pub fn get(args: GetArgs) -> Result<()> {
    let key = decode(&args.key, args.encoding, "key")?;
    let store = open(&args.store, true)?;
    let mut value = Vec::new();
    let found = store.get(&key, &mut value);
    close(store, &args.store.dir)?;
    if !found {
        bail!("{}: key {:?} not found", args.store.dir.display(), args.key);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&encode(&value, args.encoding))?;
    out.write_all(b"\n")?;
    Ok(())
}

/// `forest put`: sets the key.
pub fn put(args: PutArgs) -> Result<()> {
    let key = decode(&args.key, args.encoding, "key")?;
    let value = decode(&args.value, args.encoding, "value")?;
    let store = open(&args.store, false)?;
    store
        .upsert(&key, &value)
        .with_context(|| format!("writing to {}", args.store.dir.display()))?;
    close(store, &args.store.dir)
}

/// `forest del`: removes the key; prints `removed` or `absent`.
pub fn del(args: DelArgs) -> Result<()> {
    let key = decode(&args.key, args.encoding, "key")?;
    let store = open(&args.store, true)?;
    let removed = store
        .remove(&key)
        .with_context(|| format!("writing to {}", args.store.dir.display()))?;
    close(store, &args.store.dir)?;
    println!("{}", if removed { "removed" } else { "absent" });
    Ok(())
}

/// `forest scan`: prints `key<TAB>value` lines.
pub fn scan(args: ScanArgs) -> Result<()> {
    let from = args
        .from
        .as_deref()
        .map(|k| decode(k, args.encoding, "--from"))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|k| decode(k, args.encoding, "--to"))
        .transpose()?;
    let store = open(&args.store, true)?;
    let lower = from.as_deref().map_or(Bound::Unbounded, Bound::Included);
    let upper = to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let order = if args.reverse {
        Order::Descending
    } else {
        Order::Ascending
    };
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut count = 0u64;
    let mut write_error = None;
    if limit > 0 {
        store.scan(lower, upper, order, &mut |k, v| {
            let line = [
                encode(k, args.encoding),
                b"\t".to_vec(),
                encode(v, args.encoding),
                b"\n".to_vec(),
            ]
            .concat();
            if let Err(e) = out.write_all(&line) {
                write_error = Some(e);
                return ControlFlow::Break(());
            }
            count += 1;
            if count >= limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
    }
    if let Some(e) = write_error {
        return Err(e).context("writing to stdout");
    }
    out.flush().context("writing to stdout")?;
    close(store, &args.store.dir)
}

/// `forest check`: recovers the store and reports what recovery found; fails on corruption.
pub fn check(args: DirArgs) -> Result<()> {
    let dir = &args.store.dir;
    if !dir.is_dir() {
        bail!("{}: no such store directory", dir.display());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
        files.push((entry.file_name().to_string_lossy().into_owned(), bytes));
    }
    files.sort();
    println!("store {}", dir.display());
    println!("files: {}", files.len());
    for (name, bytes) in &files {
        println!("  {name} {bytes} bytes");
    }
    let kept_corrupt: Vec<&String> = files
        .iter()
        .map(|(name, _)| name)
        .filter(|name| name.ends_with(".corrupt"))
        .collect();
    let store = open(&args.store, true)?;
    let report = store.recovery_report().clone();
    close(store, dir)?;
    match report.checkpoint_start_lsn {
        Some(lsn) => println!(
            "checkpoint: start lsn {lsn}, {} entries, {} bytes",
            report.checkpoint_entry_count, report.checkpoint_bytes
        ),
        None => println!("checkpoint: none"),
    }
    println!("logs read: {}", report.log_count);
    println!(
        "records replayed: {}, dropped after the cutoff: {}",
        report.records_replayed, report.records_beyond_cutoff
    );
    for (name, offset, bytes) in &report.torn_tails {
        println!("torn tail cut: {name} at offset {offset}, {bytes} bytes");
    }
    println!("cutoff lsn: {}", report.cutoff_lsn);
    println!("keys recovered: {}", report.keys_recovered);
    println!("recovery time: {:.3} s", report.elapsed.as_secs_f64());
    if let Some(first) = report.corrupt_checkpoints.first() {
        bail!(
            "{first} (recovery fell back to an older checkpoint; {} damaged in all)",
            report.corrupt_checkpoints.len()
        );
    }
    if let Some(name) = kept_corrupt.first() {
        bail!(
            "{}: damaged checkpoint {name} kept from an earlier recovery",
            dir.display()
        );
    }
    Ok(())
}

/// `forest checkpoint`: writes a checkpoint and prints what it holds.
pub fn checkpoint(args: DirArgs) -> Result<()> {
    let store = open(&args.store, true)?;
    let info = store
        .checkpoint()
        .with_context(|| format!("checkpointing {}", args.store.dir.display()))?;
    close(store, &args.store.dir)?;
    println!(
        "checkpoint: start lsn {}, end lsn {}, {} entries, {} bytes",
        info.start_lsn, info.end_lsn, info.entry_count, info.bytes
    );
    Ok(())
}
