//! `forest inspect DIR` (issue 17 "Recovery": "prints segment utilization, resident and
//! evicted pages, pieces per page"): a read-only picture of a store
//! ([`forest_store::verify::inspect`]). For a bwtree store on map checkpoints it prints the
//! checkpoint recovery uses (S, T, RSSP), each LSS segment's live and total bytes, the pages
//! an open leaves evicted or rebuilds resident, and a histogram of pieces per page; for any
//! other store its logs and checkpoints. Damage is printed and exits 1 (one line on stderr,
//! as every command); a missing directory is an error, never a panic. The store's lock is
//! not taken and no file is opened for writing: a store a server holds is read (the output
//! says it is in use), and so is a read-only copy.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use forest_llama::inspect::Inspection;
use forest_store::verify::InspectReport;
use forest_store::Store;

/// `forest inspect`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// The store's directory (read only, without its lock: a running server's store is read,
    /// its figures from a moment ago).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// `forest inspect`: prints the picture, then fails with the first problem, if any.
pub fn inspect(args: InspectArgs) -> Result<()> {
    let dir = &args.dir;
    if !dir.is_dir() {
        bail!("{}: no such store directory", dir.display());
    }
    let report = Store::inspect_path(dir)
        .with_context(|| format!("inspecting the store in {}", dir.display()))?;
    println!("store {}", dir.display());
    if report.in_use {
        println!("{}", crate::store_cmd::IN_USE_LINE);
    }
    print_store(&report);
    if let Some(lss) = &report.lss {
        print_lss(lss);
    }
    let problems = report.problems();
    for problem in &problems {
        println!("PROBLEM: {problem}");
    }
    if let Some(first) = problems.first() {
        bail!(
            "{first} ({} problem(s) in all; `forest check` verifies every file)",
            problems.len()
        );
    }
    Ok(())
}

fn print_store(report: &InspectReport) {
    match &report.engine_recorded {
        Some(engine) => println!("engine recorded: {engine}"),
        None => println!("engine recorded: none"),
    }
    if let Some(e) = &report.meta_error {
        println!("meta: DAMAGED: {e}");
    }
    for (name, bytes) in &report.files {
        println!("file {name}: {bytes} bytes");
    }
    if report.lss.is_none() {
        if report.lss_scratch {
            println!(
                "lss/: no map checkpoints (an open discards it and replays the logs): no LSS \
                 to inspect"
            );
        } else {
            println!(
                "no LSS: the data is in the logs and checkpoints above (engines other than \
                 bwtree, or bwtree without a memory budget)"
            );
        }
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn print_lss(lss: &Inspection) {
    match &lss.checkpoint {
        Some((name, c)) => println!(
            "map checkpoint lss/{name} (recovery starts here): sequence {}, rssp {}, S {}, T {}, \
             {} entries, {} free PIDs, pid_end {}, root {}",
            c.sequence,
            c.rssp,
            c.start.offset(),
            c.stable_end.offset(),
            c.entries.len(),
            c.free.len(),
            c.pid_end,
            c.root
                .map_or_else(|| "not recorded".to_string(), |r| r.to_string()),
        ),
        None => println!("map checkpoint: none valid (the scan reads from address 0)"),
    }
    if lss.checkpoint.is_some() {
        match lss.recorded_pieces {
            Some(n) => {
                println!("live pieces below S recorded: {n} (an open reads no segment below S)")
            }
            None => println!(
                "live pieces below S: not recorded (format version 2: an open reads every \
                 segment below S)"
            ),
        }
    }
    for (name, why) in &lss.rejected {
        println!("map checkpoint lss/{name}: DAMAGED, skipped: {why}");
    }
    if let Some(bytes) = lss.segment_bytes {
        println!("segment size: {bytes} bytes");
    }
    for s in &lss.segments {
        let mut line = format!(
            "segment lss/{}: {} bytes, {} records ({} bytes), live {} bytes in {} pieces \
             ({:.1} %)",
            s.name,
            s.bytes,
            s.records,
            s.record_bytes,
            s.live_bytes,
            s.live_pieces,
            percent(s.live_bytes, s.bytes)
        );
        if let Some((offset, bytes, why)) = &s.torn {
            line +=
                &format!(", torn tail at offset {offset} ({bytes} bytes; an open cuts it): {why}");
        }
        if s.damage.is_some() {
            line += ", DAMAGED";
        }
        println!("{line}");
    }
    let total = lss.total_bytes();
    println!(
        "lss: {} segments, {total} bytes, {} live ({:.1} %; total / live = {:.2})",
        lss.segments.len(),
        lss.live_bytes,
        percent(lss.live_bytes, total),
        total as f64 / lss.live_bytes.max(1) as f64
    );
    println!(
        "scan from S: {} records ({} to {}), {} pieces applied, {} units committed, {} \
         fillers, {} dead relocations",
        lss.stats.records,
        lss.scanned_from,
        lss.scanned_end,
        lss.stats.pieces_applied,
        lss.stats.units_committed,
        lss.stats.fillers,
        lss.stats.dead_relocations
    );
    println!(
        "pages at open: {} evicted (loaded on first use), {} resident (rebuilt from unit \
         deltas), {} free PIDs, pid_end {}",
        lss.evicted, lss.resident, lss.free, lss.pid_end
    );
    let histogram: Vec<String> = lss
        .pieces_per_page
        .iter()
        .map(|(pieces, pages)| format!("{pieces}: {pages}"))
        .collect();
    println!("pieces per page (pieces: pages): {}", histogram.join(", "));
}
