//! Cost of a mapping-table checkpoint (issue 17): `Checkpoints::take` over N pages, half
//! resident with a flush address, a quarter evicted, a quarter never flushed, on the OS file
//! system. Usage: `cargo run --release -p forest-llama --example map_checkpoint -- N RUNS DIR`.
#![allow(clippy::unwrap_used)] // a measurement tool: a failure is a panic

use std::sync::Arc;
use std::time::Instant;

use crossbeam_epoch::{self as epoch, Owned, Shared};
use forest_file::{Dir, OsDir};
use forest_llama::checkpoint::Checkpoints;
use forest_llama::lss::{Lss, LssAddress, LssConfig};
use forest_llama::{MappingTable, PageState, Pid};

struct Page {
    flushed: Option<LssAddress>,
}

impl PageState for Page {
    unsafe fn reclaim(ptr: *mut Self) {
        // SAFETY: the trait's contract: an unreachable `Owned` allocation, reclaimed once.
        drop(unsafe { Owned::from_raw(ptr) });
    }
}

fn newest_flushed(_pid: Pid, state: Shared<'_, Page>) -> Option<LssAddress> {
    // SAFETY: the walk reads states under its pin.
    unsafe { state.deref() }.flushed
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pages: u64 = args.get(1).map_or(1_000_000, |a| a.parse().unwrap());
    let runs: usize = args.get(2).map_or(3, |a| a.parse().unwrap());
    let root = std::path::PathBuf::from(args.get(3).map_or("/tmp/map-ckpt-bench", |a| a.as_str()));
    let _ = std::fs::remove_dir_all(&root);
    let lss_dir: Arc<dyn Dir> = Arc::new(OsDir::open(root.join("lss")).unwrap());
    let ckpt_dir: Arc<dyn Dir> = Arc::new(OsDir::open(root.join("map")).unwrap());
    let (lss, _) = Lss::open(lss_dir, LssConfig::default(), LssAddress::current(0)).unwrap();
    let (checkpoints, _) = Checkpoints::open(ckpt_dir).unwrap();
    let table = MappingTable::<Page>::new();
    {
        let guard = &epoch::pin();
        for i in 0..pages {
            let pid = table.allocate();
            let address = LssAddress::current(64 + i * 100);
            let flushed = (i % 4 < 2).then_some(address);
            let state = table.install_new(pid, Owned::new(Page { flushed }), guard);
            if i % 4 == 2 {
                table.swap_out(pid, state, address.to_bits(), guard);
            }
        }
    }
    for run in 0..runs {
        let began = Instant::now();
        let info = checkpoints.take(&table, &lss, 0, newest_flushed).unwrap();
        let elapsed = began.elapsed();
        println!(
            "run {run}: pages {pages} entries {} bytes {} take {:.1} ms ({:.1} ns/page)",
            info.entry_count,
            info.bytes,
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_nanos() as f64 / pages as f64
        );
    }
    drop(table);
    lss.close().unwrap();
    let _ = std::fs::remove_dir_all(&root);
}
