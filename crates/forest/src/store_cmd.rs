//! The store subcommands: `load`, `get`, `put`, `del`, `scan`, `check`, `checkpoint` (issue 5
//! "CLI"), each a thin layer over [`forest_store::Store`].
//!
//! Keys and values are UTF-8 text on the command line and are written raw to stdout; with
//! `--hex` both are hexadecimal in and out, for binary data. The store records its engine
//! spec in its `META` file; `--engine` is needed only to create a store with another engine
//! than the default (`masstree`), or with `--switch-engine` to switch an existing one (the
//! logs and checkpoints are engine-neutral, so the index is rebuilt in the new engine, and
//! the new choice is recorded).
//!
//! Choices: commands that only read (`get`, `scan`, `check`, `checkpoint`, `del`) refuse a
//! directory that does not exist rather than create an empty store. `check` is read-only
//! ([`Store::verify`]): it reads every file, reports torn tails and damage and what an open
//! would recover, and changes nothing; it refuses a directory a running store holds.

use std::io::{IsTerminal, Write};
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use forest_core::Order;
use forest_store::verify::MapCheck;
use forest_store::{Durability, Store, StoreOptions, VerifyReport};
use indicatif::{ProgressBar, ProgressStyle};

/// Operations per [`Store::batch`] in `load`: large enough to share one durability wait
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
    /// The index engine, with parameters if wanted (`masstree:fanout=15x32`; `forest
    /// engines` lists them). Default: the engine the store recorded, or masstree for a new
    /// store. Another than the recorded one is refused without --switch-engine.
    #[arg(long, value_name = "SPEC")]
    pub engine: Option<String>,
    /// Rebuild the index in --engine although the store recorded another, and record it.
    #[arg(long, requires = "engine")]
    pub switch_engine: bool,
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
    /// Write a checkpoint after the load (default: the keys stay in the logs only, so that
    /// `forest check` times log replay; with it, `check` times the checkpoint load).
    #[arg(long)]
    pub checkpoint: bool,
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

/// `forest checkpoint`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct DirArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `forest check`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// When recovery would refuse (acknowledged writes proven lost: a damaged or missing
    /// log), open the store anyway, dropping what is lost, and print exactly what was
    /// dropped. Changes the store; never needed after a mere crash.
    #[arg(long)]
    pub repair: bool,
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
    let durability: Durability = args.durability.parse().context("--durability")?;
    Store::open_path(
        dir,
        StoreOptions {
            engine: args.engine.clone(),
            switch_engine: args.switch_engine,
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
    let mut index = 0u64;
    let mut value = Vec::with_capacity(args.value_size);
    while index < args.keys {
        let mut batch = store.batch();
        let mut count = 0u64;
        while index < args.keys && count < LOAD_BATCH_COUNT as u64 {
            let key = format!("key-{index:012}").into_bytes();
            // The value repeats the key's digits, so a loaded store can be checked by eye.
            value.clear();
            value.extend(key[4..].iter().copied().cycle().take(args.value_size));
            batch
                .upsert(&key, &value)
                .with_context(|| format!("loading into {}", args.store.dir.display()))?;
            index += 1;
            count += 1;
        }
        batch
            .wait()
            .with_context(|| format!("loading into {}", args.store.dir.display()))?;
        bar.inc(count);
    }
    bar.finish_and_clear();
    if args.checkpoint {
        let info = store
            .checkpoint()
            .with_context(|| format!("checkpointing {}", args.store.dir.display()))?;
        println!(
            "checkpoint: start lsn {}, {} entries, {} bytes",
            info.start_lsn, info.entry_count, info.bytes
        );
    }
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

/// What `forest check` and `forest inspect` print when a store or server holds the directory
/// (they read it without its lock, read-only; `forest_store::verify`).
pub const IN_USE_LINE: &str = "store in use: figures may be from a moment ago (a running store \
     or server holds the directory; it was read without its lock, nothing written)";

/// `forest check`: verifies every file without changing any ([`Store::verify`]), prints
/// what it found and what an open would recover, with its speed; fails on damage.
/// With `--repair`, a store whose recovery would refuse is opened accepting the loss, and
/// every loss is printed.
pub fn check(args: CheckArgs) -> Result<()> {
    let dir = &args.store.dir;
    if !dir.is_dir() {
        bail!("{}: no such store directory", dir.display());
    }
    let report = Store::verify_path(dir, args.store.engine.as_deref())
        .with_context(|| format!("checking the store in {}", dir.display()))?;
    print_verify(dir, &report);
    let problems = report.problems();
    if args.repair && report.recovery.is_err() {
        let durability: Durability = args.store.durability.parse().context("--durability")?;
        let store = Store::open_accepting_loss(
            forest_store::file::OsDir::open(dir)?,
            StoreOptions {
                engine: args.store.engine.clone(),
                switch_engine: args.store.switch_engine,
                durability,
                ..StoreOptions::default()
            },
        )
        .with_context(|| format!("repairing the store in {}", dir.display()))?;
        let recovered = store.recovery_report().clone();
        for loss in &recovered.losses {
            println!("DROPPED: {loss}");
        }
        println!(
            "repaired: {} keys kept, cutoff lsn {}, {} records after it dropped; the store \
             continues at lsn {}",
            recovered.keys_recovered,
            recovered.cutoff_lsn,
            recovered.records_beyond_cutoff,
            recovered.lsn_next
        );
        close(store, dir)?;
        return Ok(());
    }
    if let Some(first) = problems.first() {
        let hint = if report.recovery.is_err() {
            "; `forest check --repair` opens it dropping what is lost"
        } else {
            ""
        };
        bail!("{first} ({} problem(s) in all){hint}", problems.len());
    }
    Ok(())
}

fn per_second(count: f64, elapsed: Duration) -> f64 {
    count / elapsed.as_secs_f64().max(1e-9)
}

fn print_verify(dir: &Path, report: &VerifyReport) {
    println!("store {}", dir.display());
    if report.in_use {
        println!("{IN_USE_LINE}");
    }
    match &report.engine_recorded {
        Some(engine) => println!("engine recorded: {engine}"),
        None => println!("engine recorded: none"),
    }
    if report.retention_recorded > 0 {
        println!(
            "retention threshold recorded: {}",
            report.retention_recorded
        );
    }
    if let Some(e) = &report.meta_error {
        println!("meta: DAMAGED: {e}");
    }
    for log in &report.logs {
        let mut line = format!("log {}: {} bytes", log.name, log.bytes);
        match log.header {
            Some(h) => line += &format!(", shard {}, first lsn {}", h.shard_id, h.first_lsn),
            None => line += ", no header",
        }
        line += &format!(", {} records", log.record_count);
        if let (Some(first), Some(last)) = (log.lsn_first, log.lsn_last) {
            line += &format!(", lsn {first}..={last}");
        }
        if let Some(torn) = log.torn {
            line += &format!(
                ", torn tail at offset {} ({} bytes)",
                torn.offset, torn.bytes
            );
        }
        if let Some(e) = &log.error {
            line += &format!(", DAMAGED: {e}");
        }
        println!("{line}");
    }
    for cp in &report.checkpoints {
        match (&cp.info, &cp.error) {
            (Some(info), _) => {
                let mut line = format!(
                    "checkpoint {}: {} bytes, start lsn {}, end lsn {}, {} entries",
                    cp.name, cp.bytes, info.start_lsn, info.end_lsn, info.entry_count
                );
                // A temporal checkpoint's T and cut (review rev-tckpt F5).
                if let Some(t) = cp.temporal {
                    line += &format!(", retention threshold {}, cut {}", t.threshold, t.cut);
                }
                println!("{line}");
            }
            (None, Some(e)) => println!("checkpoint {}: {} bytes, DAMAGED: {e}", cp.name, cp.bytes),
            (None, None) => println!("checkpoint {}: {} bytes", cp.name, cp.bytes),
        }
    }
    for name in &report.other_files {
        println!("other file: {name}");
    }
    if let Some(map) = &report.map {
        print_map(map);
    }
    println!("recovery (read-only, engine {}):", report.engine);
    let recovery = match &report.recovery {
        Ok(r) => r,
        Err(e) => {
            println!("  would fail: {e}");
            return;
        }
    };
    match recovery.checkpoint_start_lsn {
        Some(lsn) => println!(
            "checkpoint: start lsn {lsn}, {} entries, {} bytes",
            recovery.checkpoint_entry_count, recovery.checkpoint_bytes
        ),
        None => println!("checkpoint: none"),
    }
    for damaged in &recovery.corrupt_checkpoints {
        println!("damaged checkpoint skipped: {damaged}");
    }
    println!(
        "logs read: {} ({} bytes)",
        recovery.log_count, recovery.log_bytes
    );
    println!(
        "records replayed: {}, dropped after the cutoff: {}",
        recovery.records_replayed, recovery.records_beyond_cutoff
    );
    for (name, offset, bytes) in &recovery.torn_tails {
        println!("torn tail: {name} at offset {offset}, {bytes} bytes (an open cuts it)");
    }
    for (name, keep, len) in &recovery.log_cuts {
        println!("an open cuts {name} from {len} to {keep} bytes");
    }
    for name in &recovery.tmp_checkpoints {
        println!("an open deletes the unpublished {name}");
    }
    if recovery.batches_dropped > 0 {
        println!(
            "atomic batches cut by the cutoff, dropped whole: {}",
            recovery.batches_dropped
        );
    }
    for damage in &recovery.covered_damage {
        println!("damage a checkpoint covers (ignored): {damage}");
    }
    for loss in &recovery.losses {
        println!("LOST: {loss}");
    }
    println!(
        "cutoff lsn: {}, next lsn {}{}",
        recovery.cutoff_lsn,
        recovery.lsn_next,
        if recovery.clean {
            " (closed cleanly)"
        } else {
            ""
        }
    );
    if report.map.is_some() {
        println!("keys recovered: not counted (the tree recovers from lss/)");
    } else {
        println!("keys recovered: {}", recovery.keys_recovered);
    }
    println!(
        "checkpoint load: {:.3} s ({:.1} MB/s)",
        recovery.checkpoint_elapsed.as_secs_f64(),
        per_second(
            recovery.checkpoint_bytes as f64 / 1e6,
            recovery.checkpoint_elapsed
        )
    );
    println!(
        "log replay: {:.3} s ({:.0} records/s)",
        recovery.replay_elapsed.as_secs_f64(),
        per_second(recovery.records_replayed as f64, recovery.replay_elapsed)
    );
    println!("recovery time: {:.3} s", recovery.elapsed.as_secs_f64());
}

/// The LSS side of a store on map checkpoints (issue 17): its map checkpoints and segments.
fn print_map(map: &MapCheck) {
    for cp in &map.checkpoints {
        match (&cp.content, &cp.error) {
            (Some(c), _) => println!(
                "map checkpoint lss/{}: {} bytes, rssp {}, S {}, T {}, {} pages{}",
                cp.name,
                cp.bytes,
                c.rssp,
                c.start,
                c.stable_end,
                c.pages,
                if map.used.as_ref() == Some(&cp.name) {
                    " (recovery starts here)"
                } else {
                    ""
                }
            ),
            (None, Some(e)) => println!("{e}"),
            (None, None) => println!("map checkpoint lss/{}: {} bytes", cp.name, cp.bytes),
        }
    }
    for name in &map.tmp {
        println!("an open deletes the unpublished lss/{name}");
    }
    for seg in &map.segments {
        let mut line = format!(
            "segment lss/{}: {} bytes, {} records",
            seg.name, seg.bytes, seg.records
        );
        if let Some((offset, bytes, why)) = &seg.torn {
            line += &format!(
                ", torn tail at offset {offset} ({bytes} bytes, at or above T: an open cuts it): {why}"
            );
        }
        if let Some(e) = &seg.error {
            line += &format!(", DAMAGED: {e}");
        }
        println!("{line}");
    }
    for e in &map.errors {
        println!("lss: {e}");
    }
    for e in &map.table {
        println!("mapping table: {e}");
    }
    if map.used.is_some() {
        println!(
            "wal: checked from the rssp {} on (logs below it are deleted once a map checkpoint \
             covers them)",
            map.rssp
        );
    }
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
