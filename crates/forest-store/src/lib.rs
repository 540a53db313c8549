//! forest-store: the durable store over any engine of the [`forest_core::Index`] trait
//! (issue 5; DESIGN.md "Durability"). The store plays the papers' transactional component:
//! Masstree §5's per-core logs, checkpoints and recovery cutoff, with LSNs as in the Bw-tree's
//! TC (bw-tree.md §V-A).
//!
//! Modules, bottom up:
//! - [`file`](mod@file): the one trait through which the store reaches the disk (STYLE.md §1), with
//!   [`file::OsDir`] over `std::fs` and [`file::SimDir`], the simulated disk that models power
//!   loss and injected I/O errors (STYLE.md §5 "Simulated file"; issue 5 "Power loss").
//! - [`wal`]: the write-ahead log: the record format ([`wal::record`], byte by byte in
//!   docs/FORMAT.md), a writer and a reader over the file trait.
//!   [`wal::group_commit`] shares each fsync among the writers of a shard log.
//! - [`lsn`]: the LSN allocator, per-key stripes, the recovery cutoff (bw-tree.md §V-A).
//! - [`durability`]: `sync`, `group`, `periodic:MS` (masstree.md §5).
//! - [`checkpoint`]: a scan of the index published by rename (masstree.md §5).
//! - [`recovery`]: newest complete checkpoint plus the logs merged by LSN (masstree.md §5);
//!   [`replay`] applies what it decodes with several threads, partitioned by key.
//! - [`meta`]: the `META` file that records the store's engine.
//! - `pm`: a store on the persistent BzTree (`bztree-pm`), whose file is the data; the
//!   durability model per persist mode.
//! - `llama`: a store on `bwtree` with a memory budget: the tree on its own LSS, evicting
//!   pages (issue 17).
//! - [`store`]: [`Store`], the API over all of it.
//! - [`verify`](mod@verify): [`verify::verify`], a read-only check of every file (`forest check`).

pub mod checkpoint;
pub mod durability;
/// The file trait, moved to the `forest-file` crate (issue 17) so that forest-llama, below
/// this crate, can use it; re-exported here under its old path.
pub use forest_file as file;
pub mod llama;
pub mod lsn;
pub mod meta;
mod pm;
pub mod recovery;
pub mod replay;
mod scan_gate;
pub mod store;
pub mod verify;
pub mod wal;

pub use durability::Durability;
pub use llama::{map_checkpoint_flag, map_checkpoint_schedule, parse_memory_budget};
pub use store::{
    engine_names, new_engine, resolve_engine, Batch, BatchOp, MemoryStats, ReadFailures, Rmw,
    ScanSink, Store, StoreOptions, StoreStats, WriteBatch, ENGINE_DEFAULT,
};
pub use verify::{verify, VerifyReport};
