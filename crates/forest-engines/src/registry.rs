//! The registry table and what reads it.

use forest_core::{Error, Index, Result};

use crate::spec::EngineSpec;
use crate::{bwtree, bztree, bztree_pm, lockbtree, masstree, tsbtree};

/// One parameter of an engine, for `forest engines` and `--help`.
#[derive(Debug)]
pub struct Param {
    pub key: &'static str,
    /// The values accepted, as help text (`on|off`, `N`).
    pub values: &'static str,
    /// The value when the parameter is not given.
    pub default: &'static str,
    /// What it changes, with the paper section.
    pub meaning: &'static str,
}

/// What an engine can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Runs as a bare in-memory index (`forest bench` without `--durability`).
    pub in_memory: bool,
    /// Can be the index of a `forest_store::Store` (durable through its logs and
    /// checkpoints, which hold keys and values only).
    pub durable_through_store: bool,
    /// Keeps its data in files of its own and recovers from them (BzTree on PMwCAS,
    /// LLAMA's log-structured store).
    pub persistent_on_its_own: bool,
    /// A store can hold the engine's own file as its data, inside the store's directory
    /// (bztree-pm: `forest_store::pm`). Such an engine is not among the store's
    /// `engine_names`, which run every test of a store engine.
    pub store_holds_its_file: bool,
    /// Answers as-of-time reads and version history (TSBw).
    pub temporal: bool,
}

/// Every parameter of a spec with its value, in the registry's order.
pub type Resolved = Vec<(&'static str, String)>;

impl Capabilities {
    /// An in-memory index that a store makes durable (lockbtree, bwtree, masstree).
    pub const STORE_INDEX: Capabilities = Capabilities {
        in_memory: true,
        durable_through_store: true,
        persistent_on_its_own: false,
        store_holds_its_file: false,
        temporal: false,
    };
}

/// An engine in the registry.
pub struct EngineEntry {
    /// Registry name (the spec's name).
    pub name: &'static str,
    /// One line: what it is.
    pub about: &'static str,
    /// Its parameters, in the order the canonical spec lists them.
    pub params: &'static [Param],
    pub capabilities: Capabilities,
    /// Every parameter's value for `spec` (each of `params`, in order), or an error naming
    /// what is accepted.
    pub resolve: fn(&EngineSpec) -> Result<Resolved>,
    /// A new, empty engine as `spec` configures it.
    pub build: fn(&EngineSpec) -> Result<Box<dyn Index>>,
}

impl std::fmt::Debug for EngineEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineEntry")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

/// Every forest engine. Adding one is one entry here (see the crate doc).
pub static ENGINES: &[EngineEntry] = &[
    lockbtree::ENTRY,
    bwtree::ENTRY,
    masstree::ENTRY,
    bztree::ENTRY,
    bztree_pm::ENTRY,
    tsbtree::ENTRY,
];

/// The engine of a new store when none is named: the fastest on YCSB-B and YCSB-C
/// (docs/BENCHMARKS.md "The default engine").
pub const ENGINE_DEFAULT: &str = "masstree";

/// Every engine's name, in registry order.
pub fn engine_names() -> impl Iterator<Item = &'static str> {
    ENGINES.iter().map(|e| e.name)
}

/// The entry named `name`, or an error listing the known engines.
pub fn find(name: &str) -> Result<&'static EngineEntry> {
    ENGINES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::UnknownEngine {
            name: name.to_string(),
            known: engine_names().collect::<Vec<_>>().join(", "),
        })
}

/// A new, empty engine as `spec` names and configures it.
pub fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    (find(&spec.name)?.build)(spec)
}

/// `spec` with only the parameters that differ from the engine's defaults, in the
/// registry's order and with values normalized (`fanout=15` is `fanout=15x16`, the
/// default): two specs name the same configuration exactly when their canonical forms are
/// equal, under this build's defaults (a later build that changes a default changes what a
/// recorded bare name means; the store rebuilds its index at every open, so no data depends
/// on it). Errors as [`build`].
pub fn canonical(spec: &EngineSpec) -> Result<EngineSpec> {
    let entry = find(&spec.name)?;
    let given = (entry.resolve)(spec)?;
    let defaults = (entry.resolve)(&EngineSpec::bare(entry.name))?;
    let params = given
        .into_iter()
        .zip(defaults)
        .filter(|((_, value), (_, default))| value != default)
        .map(|((key, value), _)| (key.to_string(), value))
        .collect();
    Ok(EngineSpec {
        name: entry.name.to_string(),
        params,
    })
}

/// Parses a numeric parameter of `engine`.
pub(crate) fn number<T: std::str::FromStr>(engine: &str, key: &str, value: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| Error::Config(format!("{engine}: {key}={value:?} is not a number")))
}

/// A switch parameter: `on` or `off`, else an error naming both.
pub(crate) fn on_off(engine: &str, key: &str, value: &str) -> Result<bool> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Error::Config(format!(
            "{engine}: {key}={value:?}; known: on, off"
        ))),
    }
}

/// `on` or `off`.
pub(crate) fn switch(on: bool) -> String {
    if on { "on" } else { "off" }.to_string()
}

/// The error for a parameter `key` that `entry` does not take.
pub(crate) fn unknown_param(engine: &str, key: &str, params: &[Param]) -> Error {
    let known: Vec<&str> = params.iter().map(|p| p.key).collect();
    Error::Config(format!(
        "{engine}: unknown parameter {key:?}; known: {}",
        known.join(", ")
    ))
}
