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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> EngineSpec {
        EngineSpec::parse(text).expect("valid")
    }

    // Goal: every engine builds with no parameters and with every parameter at its
    // default, and both are the same canonical spec (the bare name).
    #[test]
    fn defaults_are_canonical_and_build() {
        for entry in ENGINES {
            let bare = spec(entry.name);
            let index = build(&bare).expect(entry.name);
            index.upsert(b"k", b"v").expect("upsert");
            let all: Vec<String> = entry
                .params
                .iter()
                .map(|p| format!("{}={}", p.key, p.default))
                .collect();
            let full = spec(&format!("{}:{}", entry.name, all.join(",")));
            build(&full).expect("every default builds");
            assert_eq!(canonical(&full).expect("ok"), bare, "{}", entry.name);
            assert_eq!(canonical(&bare).expect("ok"), bare);
            let resolved = (entry.resolve)(&bare).expect("ok");
            let keys: Vec<&str> = resolved.iter().map(|(k, _)| *k).collect();
            let listed: Vec<&str> = entry.params.iter().map(|p| p.key).collect();
            assert_eq!(
                keys, listed,
                "{}: resolve lists every parameter",
                entry.name
            );
            for ((_, value), param) in resolved.iter().zip(entry.params) {
                assert_eq!(value, param.default, "{}: {}", entry.name, param.key);
            }
        }
    }

    // Goal: the canonical form keeps non-defaults only, normalized, in registry order.
    #[test]
    fn canonical_keeps_what_differs() {
        let c = canonical(&spec("masstree:suffix=separate,fanout=15,prefetch=off")).expect("ok");
        assert_eq!(c.label(), "masstree:prefetch=off,suffix=separate");
        let c = canonical(&spec("masstree:fanout=15x32")).expect("ok");
        assert_eq!(c.label(), "masstree:fanout=15x32");
        let c = canonical(&spec("lockbtree:search=linear,order=016")).expect("ok");
        assert_eq!(c.label(), "lockbtree:order=16,search=linear");
        assert!(canonical(&spec("bwtree:page=x")).is_err());
    }

    // Goal: a typo gets an error naming every engine.
    #[test]
    fn unknown_names_list_the_known_ones() {
        let text = build(&spec("bwtre")).err().expect("unknown").to_string();
        for name in engine_names() {
            assert!(text.contains(name), "{text}");
        }
    }

    // Goal: the §6.2 factor-analysis specs build, and a wrong value or key names what is
    // accepted. Method: build each, then check the error texts.
    #[test]
    fn masstree_knobs_parse_and_bad_values_name_the_accepted_ones() {
        for text in [
            "masstree:prefetch=off",
            "masstree:search=binary",
            "masstree:prefetch=on,search=linear",
            "masstree:permuter=off",
            "masstree:permuter=on,suffix=block",
            "masstree:suffix=separate",
            "masstree:suffix=layers,permuter=off",
            "masstree:fanout=15",
            "masstree:fanout=10x8",
            "masstree:fanout=15x32,suffix=separate",
        ] {
            let index = build(&spec(text)).expect(text);
            index.upsert(b"k", b"v").expect("upsert");
            let mut out = Vec::new();
            assert!(index.get(b"k", &mut out), "{text}");
            // A 20-byte key needs a layer only when suffixes are not stored.
            index.upsert(b"0123456789abcdefghij", b"v").expect("upsert");
            let layers = index.stats().counter("layers").expect("kept");
            assert_eq!(layers > 0, text.contains("suffix=layers"), "{text}");
        }
        let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
        assert!(bad("masstree:prefetch=maybe").contains("on, off"));
        assert!(bad("masstree:search=fast").contains("linear, binary"));
        assert!(bad("masstree:permuter=maybe").contains("on, off"));
        assert!(bad("masstree:suffix=inline").contains("block, separate, layers"));
        assert!(bad("masstree:nodes=8").contains("prefetch, search, permuter, suffix, fanout"));
        assert!(bad("masstree:fanout=7").contains("15 (15x16), 10x8, 15x32"));
    }

    // Goal: the Fig. 5 and read-threshold sweep specs build; a bad value or key is refused
    // with the accepted keys.
    #[test]
    fn bwtree_knobs_parse_and_bad_ones_are_named() {
        for text in [
            "bwtree:consolidate=8",
            "bwtree:read_consolidate=0",
            "bwtree:read_consolidate=4,consolidate=2,page=64,merge=8",
        ] {
            let index = build(&spec(text)).expect(text);
            index.upsert(b"k", b"v").expect("upsert");
        }
        let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
        assert!(bad("bwtree:read_consolidate=many").contains("read_consolidate"));
        assert!(bad("bwtree:read_consolidate=2000").contains("read_consolidate_threshold"));
        assert!(bad("bwtree:chain=3").contains("page, consolidate, read_consolidate, merge"));
    }

    // Goal: tsbtree's parameters build, it says it is temporal, and bad values are named.
    #[test]
    fn tsbtree_knobs_parse() {
        let entry = find("tsbtree").expect("registered");
        assert!(entry.capabilities.temporal && entry.capabilities.in_memory);
        assert!(!entry.capabilities.durable_through_store);
        build(&spec(
            "tsbtree:page=4,index_page=4,consolidate=2,time_split=50",
        ))
        .expect("valid");
        let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
        assert!(bad("tsbtree:page=2").contains("max_records_per_page"));
        assert!(bad("tsbtree:time_split=100").contains("time_split_percent"));
        assert!(bad("tsbtree:merge=3").contains("page, index_page, consolidate, time_split"));
    }

    // Goal: lockbtree's parameters build and bad ones are named.
    #[test]
    fn lockbtree_knobs_parse() {
        build(&spec("lockbtree:order=8,search=binary")).expect("valid");
        let bad = |text: &str| build(&spec(text)).err().expect("refused").to_string();
        assert!(bad("lockbtree:order=2").contains("order"));
        assert!(bad("lockbtree:search=fast").contains("linear, binary"));
        assert!(bad("lockbtree:fanout=3").contains("order, search"));
    }
}
