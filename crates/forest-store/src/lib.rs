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
//!
//! Group commit, checkpoints, recovery and the `Store` API build on these (issue 5).

pub mod file;
pub mod wal;
