//! LLAMA, the Bw-tree's cache layer (Bw-tree §II-B, §III-D, §V; TSBw-tree §II-C), in memory
//! mode: the mapping table of page states and the latch-free operations on it.
//!
//! | module | paper |
//! |--------|-------|
//! | [`mapping_table`] | §II-B mapping table; TSBw §II-C Allocate, Free, Read, Update-D, Update-R; §III-D epochs for states and PIDs |
//! | [`page_state`] | §II-B: a word holds a memory pointer or (later issue) a storage offset |
//! | [`flush`] | TSBw §II-D Flush: reserve, CAS the flush delta, copy the piece or write a failed-flush filler; §V-B page marshalling is the access method's |
//! | [`evict`] | §V-B swapping pages out: resident bytes, the clock, swap-out by CAS to an LSS address |
//! | [`read`] | TSBw §II-C Read of an evicted page: its piece chain from the LSS |
//! | [`checkpoint`] | §V-A, §VIII-B; TSBw §II-D: mapping-table checkpoints (PID → newest stable piece, free PIDs, the LSS address to scan from) |
//! | [`recover`] | §V-A, §II-F; TSBw §II-D, §II-E: opening an LSS: newest valid checkpoint, scan from S applying pieces and committed units, the torn-tail rule |
//! | [`inspect`] | §V-A, §II-E; TSBw §II-C: read-only inspection of an LSS (live bytes per segment, pieces per page, the checkpoint's table check) |
//! | [`clean`] | §II-E, TSBw §V-A: LSS cleaning (live bytes per segment, cost-benefit victims, relocation by CAS, segment removal) |
//! | [`sys_txn`] | TSBw §II-E, Bw §IV-C, §V-A: system transactions (TBegin, TCommit as one unit record reserved before the SMO's CAS, TAbort) |
//! | [`lss`] | §II-E, §V-B, §VIII-B; TSBw §II-D: the log-structured store (segment files, records, the latch-free flush buffer, Mk-Stable, Hi-Stable) |
//!
//! The access method (forest-bwtree) owns the meaning of a page state: this crate only stores
//! pointers to states of a type implementing [`PageState`], swaps them with CAS, and reclaims
//! swapped-out states through crossbeam-epoch. The log-structured store ([`lss`], issue 17)
//! is the storage layer under flushing, eviction, cleaning and recovery, which later
//! increments of issue 17 build on it.

pub mod checkpoint;
pub mod clean;
pub mod evict;
pub mod flush;
pub mod inspect;
pub mod lss;
pub mod mapping_table;
pub mod page_state;
pub mod read;
pub mod recover;
pub mod sys_txn;

pub use mapping_table::{MappingTable, PageState, Pid, PID_COUNT_MAX};
