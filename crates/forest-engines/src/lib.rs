//! The engine registry (issue 13): one table, [`ENGINES`], holds every index engine's name,
//! parameters, capabilities and constructor. The store opens engines through it, `forest
//! bench` measures them, the CLI and `forest serve` accept their specs, and `forest engines`
//! prints it. A spec is `name` or `name:key=value,...` ([`EngineSpec`]), e.g.
//! `masstree:fanout=15x32`; its canonical form ([`canonical`]) keeps only the parameters
//! that differ from the engine's defaults, so `masstree` and `masstree:fanout=15x16` are the
//! same engine. The store records the canonical spec in its META file.
//!
//! Adding an engine (the checklist in docs/ARCHITECTURE.md): its crate implements
//! `forest_core::Index` and passes the conformance kit; a module here parses its parameters
//! into its config and builds it; one [`EngineEntry`] in [`ENGINES`]. Nothing else names it.

mod bwtree;
mod bztree;
mod bztree_pm;
mod lockbtree;
mod masstree;
mod registry;
mod spec;
mod tsbtree;

pub use bwtree::bwtree_of;
pub use bztree_pm::{StoreTree, STORE_FILE_NAME};
pub use forest_bztree::{peek_header, HeaderPeek};
pub use registry::{
    build, canonical, engine_names, find, Capabilities, EngineEntry, Param, Resolved, ENGINES,
    ENGINE_DEFAULT,
};
pub use spec::{split_list, EngineSpec};
