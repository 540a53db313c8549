//! forest-pmwcas: persistent multi-word compare-and-swap (PMwCAS) over a descriptor pool, the
//! BzTree's one synchronization primitive (Arulraj et al., "BzTree", VLDB 2018, §2.2–2.3,
//! §6.3; Harris, Fraser and Pratt, DISC 2002; Wang, Levandoski and Larson 2017; the reference
//! library microsoft/pmwcas, whose `src/mwcas/mwcas.{h,cc}` shaped the choices noted in each
//! module).
//!
//! | module | paper | what |
//! |---|---|---|
//! | [`word`] | §2.3, fn. 2 | target words, the three control bits, reference encodings |
//! | `rdcss` | §2.3.2 Phase 1, [11] | RDCSS install/complete, unique per installation |
//! | `execute` | §2.3.1–2.3.2 | Phase 1, persist, decide, Phase 2; helping; the helping read |
//! | [`descriptor`] | Fig. 1, §2.3, §6.1 | the builder API: AddWord, ReserveEntry, RemoveWord, PMwCAS, Discard |
//! | [`pool`] | §2.3, §6.3 | the descriptor pool, partitions, allocation, epoch release, policies |
//! | `reclaim` | §2.2 | epoch guards (crossbeam-epoch; a stand-in under `--cfg loom` / `--cfg shuttle`) |
//! | `reuse` | §2.2 | the descriptor reuse domain: a private epoch pinned only while helping, for descriptors that free no memory |
//! | [`recovery`] | §2.3.2, §6.3 | roll forward/back from the pool alone, then policies |
//! | [`persist`], `clwb`, `sim` | §2.1, §3.1 | flush/fence: none, clwb/clflushopt/clflush, msync, simulated |
//! | [`region`], [`layout`] | §6.3 | the mapped (or heap) region; where header, pool and user words lie |
//! | [`stats`] | §7.6 | attempts and failures by size, helps, dirty flushes, pool waits |
//!
//! Usage: build a [`Pool`] over a [`Region`] with a [`Persist`]; `pin()` a guard; read target
//! words with [`Pool::read`]; build a [`Descriptor`] with `allocate_descriptor`, `add_word`,
//! `reserve_entry`/`set_new`, and `execute` it. Words hold offsets into the region, never
//! addresses, in both modes (the mapping moves between runs).
//!
//! Pause (kill) points, feature `pause-points` (forest-core `pause`), in the order a PMwCAS
//! reaches them: `pmwcas:mark-raised` (an allocation that raised its partition's high-water
//! mark, `pool.rs`), `pmwcas:activation-persisted`, `pmwcas:descriptor-persisted`,
//! `pmwcas:rdcss-installing`, `pmwcas:rdcss-installed`, `pmwcas:rdcss-status-read` (a
//! completer between its status read and its CAS), `pmwcas:phase1-word-installed` (per word),
//! `pmwcas:phase1-persisted`, `pmwcas:status-decided`, `pmwcas:status-persisted`,
//! `pmwcas:phase2-word-installed` (per word), `pmwcas:phase2-done`, `pmwcas:policies-applied`
//! (a release between its policies and the durable `Free` status), `pmwcas:released`. No
//! latch is held at any of them.
//!
//! `unsafe` lives in `region` (the mapping as atomic words) and `clwb` (cache-line flush
//! instructions) only.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod clwb;
pub mod descriptor;
mod error;
mod execute;
pub mod layout;
pub mod persist;
pub mod pool;
mod rdcss;
mod reclaim;
pub mod recovery;
pub mod region;
mod reuse;
mod sim;
pub mod stats;
mod sync;
pub mod word;

pub use clwb::{Clwb, FlushInstruction};
pub use descriptor::{Descriptor, Policy, Slot};
pub use error::Error;
pub use execute::HELP_DEPTH_MAX;
pub use layout::{Geometry, ENTRIES_MAX};
#[cfg(not(any(loom, shuttle)))]
pub use persist::Msync;
pub use persist::{NoPersist, Persist};
pub use pool::{descriptor_tag, NoRecycle, Pool, PoolConfig, Recycle, RecyclerId};
pub use reclaim::Guard;
pub use recovery::RecoveryReport;
pub use region::Region;
pub use sim::Sim;
pub use stats::PmwcasStats;
pub use word::{Word, CONTROL_MASK, VALUE_MASK};
