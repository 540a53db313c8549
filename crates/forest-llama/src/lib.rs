//! LLAMA, the Bw-tree's cache layer (Bw-tree §II-B, §III-D, §V; TSBw-tree §II-C), in memory
//! mode: the mapping table of page states and the latch-free operations on it.
//!
//! | module | paper |
//! |--------|-------|
//! | [`mapping_table`] | §II-B mapping table; TSBw §II-C Allocate, Free, Read, Update-D, Update-R; §III-D epochs for states and PIDs |
//! | [`page_state`] | §II-B: a word holds a memory pointer or (later issue) a storage offset |
//!
//! The access method (forest-bwtree) owns the meaning of a page state: this crate only stores
//! pointers to states of a type implementing [`PageState`], swaps them with CAS, and reclaims
//! swapped-out states through crossbeam-epoch. Flushing, eviction and the log-structured store
//! are a later issue.

pub mod mapping_table;
pub mod page_state;

pub use mapping_table::{MappingTable, PageState, Pid, PID_COUNT_MAX};
