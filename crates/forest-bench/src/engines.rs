//! The registry: an `Arc<dyn Index>` from a spec string, for engines and peers alike.
//!
//! A spec is `name` or `name:key=value,...` (e.g. `lockbtree:order=16,search=linear`), so a
//! sweep over an engine's configuration is a list of specs. In a comma-separated list
//! (`--engines`), a piece with `=` and no `:` continues the previous spec's parameters:
//! `lockbtree:order=16,search=linear,skiplist` is two specs. Peers take no parameters and are
//! built for the run's key shape (see [`crate::peers`]).
//!
//! Adding an engine is one entry in [`ENGINES`]: its name, a line of help, its parameters'
//! help, and a constructor from the parsed parameters.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use forest_core::Index;

use crate::keygen::KeyShape;
use crate::peers;

/// A parsed spec: the registry name, its parameters, and the label reports use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The engine's or peer's registry name.
    pub name: String,
    /// `key=value` parameters in the order given.
    pub params: Vec<(String, String)>,
}

impl Spec {
    /// Parses `name` or `name:key=value,...`.
    pub fn parse(spec: &str) -> anyhow::Result<Spec> {
        let spec = spec.trim();
        let (name, rest) = match spec.split_once(':') {
            Some((name, rest)) => (name, Some(rest)),
            None => (spec, None),
        };
        if name.is_empty() {
            bail!("empty engine name in spec {spec:?}");
        }
        let mut params = Vec::new();
        for pair in rest
            .into_iter()
            .flat_map(|r| r.split(','))
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| anyhow!("parameter {pair:?} of spec {spec:?} is not key=value"))?;
            params.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(Spec {
            name: name.to_string(),
            params,
        })
    }

    /// The label of reports: the spec as written, normalized.
    pub fn label(&self) -> String {
        if self.params.is_empty() {
            return self.name.clone();
        }
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}:{}", self.name, params.join(","))
    }

    /// Whether this spec names a peer (not a forest engine).
    pub fn is_peer(&self) -> bool {
        peers::PEER_NAMES.contains(&self.name.as_str())
    }
}

/// Splits a comma-separated list of specs (see the module doc for the `=` rule).
pub fn split_list(list: &str) -> anyhow::Result<Vec<Spec>> {
    let mut pieces: Vec<String> = Vec::new();
    for piece in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pieces.last_mut() {
            Some(last) if piece.contains('=') && !piece.contains(':') => {
                last.push(',');
                last.push_str(piece);
            }
            _ => pieces.push(piece.to_string()),
        }
    }
    pieces.iter().map(|p| Spec::parse(p)).collect()
}

/// A forest engine in the registry.
pub struct EngineEntry {
    /// Registry name.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// The parameters it takes, for `--help`.
    pub params: &'static str,
    /// Builds it from a spec's parameters.
    pub build: fn(&Spec) -> anyhow::Result<Arc<dyn Index>>,
}

/// Every forest engine (peers are in [`crate::peers`]).
pub const ENGINES: &[EngineEntry] = &[
    EngineEntry {
        name: "lockbtree",
        about: "Westerhoff's lock-coupling B+tree: RW spin latches, interlocking reads, multi-pass writes",
        params: "order=N (node order), search=linear|binary (in-node search)",
        build: build_lockbtree,
    },
    EngineEntry {
        name: "bwtree",
        about: "the Bw-tree on a LLAMA mapping table: latch-free delta records, consolidation, B-link SMOs",
        params: "page=N (records per page before a split), consolidate=N (delta chain length \
                 that triggers consolidation), merge=N (records below which a page merges; 0: never)",
        build: build_bwtree,
    },
    EngineEntry {
        name: "masstree",
        about: "Masstree: a trie of B+trees over 8-byte key slices, optimistic readers, per-node locks",
        params: "prefetch=on|off (child prefetch, §6.2), search=linear|binary (in-node search, \
                 §4.8), permuter=on|off (border-node permutation, §4.6.2; off: sorted slots \
                 shifted in place), suffix=block|separate|layers (key suffix in the value block, \
                 in a block of its own, or none: long keys always in layers, §4.2), \
                 fanout=15|10x8|15x32 (border slots x interior fanout, §4.2)",
        build: build_masstree,
    },
];

/// Parses a numeric parameter of `engine`.
fn number<T: std::str::FromStr>(engine: &str, key: &str, value: &str) -> anyhow::Result<T> {
    value
        .parse()
        .map_err(|_| anyhow!("{engine}: {key}={value:?} is not a number"))
}

fn build_bwtree(spec: &Spec) -> anyhow::Result<Arc<dyn Index>> {
    use forest_bwtree::{BwTree, BwTreeConfig};
    let mut config = BwTreeConfig::default();
    for (k, v) in &spec.params {
        match k.as_str() {
            "page" => config.max_records_per_page = number("bwtree", k, v)?,
            "consolidate" => config.consolidate_threshold = number("bwtree", k, v)?,
            "read_consolidate" => config.read_consolidate_threshold = number("bwtree", k, v)?,
            "merge" => config.merge_threshold = number("bwtree", k, v)?,
            _ => bail!(
                "bwtree: unknown parameter {k:?}; known: page, consolidate, read_consolidate, merge"
            ),
        }
    }
    Ok(Arc::new(BwTree::with_config(config)?))
}

/// A switch parameter: `on` or `off`, else an error naming both.
fn on_off(engine: &str, key: &str, value: &str) -> anyhow::Result<bool> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => bail!("{engine}: {key}={value:?}; known: on, off"),
    }
}

fn build_masstree(spec: &Spec) -> anyhow::Result<Arc<dyn Index>> {
    use forest_masstree::{
        Masstree, Masstree10x8, Masstree15x32, MasstreeConfig, NodeSearch, SuffixStorage,
    };
    let mut config = MasstreeConfig::default();
    // Border slots x interior fanout (§4.2): a type each, so a node's size really changes.
    let mut fanout = "15x16";
    for (k, v) in &spec.params {
        match k.as_str() {
            "fanout" => {
                fanout = match v.as_str() {
                    "15" | "15x16" => "15x16",
                    "10x8" => "10x8",
                    "15x32" => "15x32",
                    _ => bail!(
                        "masstree: fanout={v:?}; known: 15 (15x16), 10x8, 15x32 (border slots x \
                         interior fanout; border nodes need at least 10 slots, §4.2)"
                    ),
                };
            }
            "prefetch" => config.prefetch = on_off("masstree", k, v)?,
            "search" => {
                config.search = match v.as_str() {
                    "linear" => NodeSearch::Linear,
                    "binary" => NodeSearch::Binary,
                    _ => bail!("masstree: search={v:?}; known: linear, binary"),
                };
            }
            "permuter" => config.permuter = on_off("masstree", k, v)?,
            "suffix" => {
                config.suffix = match v.as_str() {
                    "block" => SuffixStorage::Block,
                    "separate" => SuffixStorage::Separate,
                    "layers" => SuffixStorage::Layers,
                    _ => bail!("masstree: suffix={v:?}; known: block, separate, layers"),
                };
            }
            _ => bail!(
                "masstree: unknown parameter {k:?}; known: prefetch, search, permuter, suffix, \
                 fanout"
            ),
        }
    }
    Ok(match fanout {
        "10x8" => Arc::new(Masstree10x8::with_widths(config)),
        "15x32" => Arc::new(Masstree15x32::with_widths(config)),
        _ => Arc::new(Masstree::with_config(config)),
    })
}

fn build_lockbtree(spec: &Spec) -> anyhow::Result<Arc<dyn Index>> {
    use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch};
    if spec.params.is_empty() {
        return Ok(Arc::new(LockBTree::new()));
    }
    let mut config = LockBTreeConfig::default();
    for (k, v) in &spec.params {
        match k.as_str() {
            "order" => {
                config.order = number("lockbtree", k, v)?;
            }
            "search" => {
                config.search = match v.as_str() {
                    "linear" => NodeSearch::Linear,
                    "binary" => NodeSearch::Binary,
                    _ => bail!("lockbtree: search={v:?}; known: linear, binary"),
                };
            }
            _ => bail!("lockbtree: unknown parameter {k:?}; known: order, search"),
        }
    }
    Ok(Arc::new(LockBTree::with_config(config)?))
}

/// Every known name: engines, then peers.
pub fn known_names() -> Vec<&'static str> {
    ENGINES
        .iter()
        .map(|e| e.name)
        .chain(peers::PEER_NAMES)
        .collect()
}

/// Builds the index a spec names, for keys of `shape`.
pub fn build(spec: &Spec, shape: KeyShape) -> anyhow::Result<Arc<dyn Index>> {
    if let Some(entry) = ENGINES.iter().find(|e| e.name == spec.name) {
        return (entry.build)(spec).with_context(|| format!("building {}", spec.label()));
    }
    if spec.is_peer() {
        if !spec.params.is_empty() {
            bail!("peer {} takes no parameters", spec.name);
        }
        if let Some(index) = peers::build(&spec.name, shape) {
            return Ok(index);
        }
    }
    Err(forest_core::Error::UnknownEngine {
        name: spec.name.clone(),
        known: known_names().join(", "),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_and_without_parameters() {
        // Goal: the spec grammar: names, parameters, and lists where parameters continue.
        let spec = Spec::parse("lockbtree:order=16,search=linear").expect("valid");
        assert_eq!(spec.name, "lockbtree");
        assert_eq!(spec.params.len(), 2);
        assert_eq!(spec.label(), "lockbtree:order=16,search=linear");
        let list = split_list("lockbtree:order=16,search=linear,skiplist,lockbtree").expect("ok");
        let labels: Vec<_> = list.iter().map(Spec::label).collect();
        assert_eq!(
            labels,
            ["lockbtree:order=16,search=linear", "skiplist", "lockbtree"]
        );
        assert!(Spec::parse("lockbtree:order").is_err());
    }

    #[test]
    fn every_peer_builds_for_both_key_representations() {
        // Goal: peers build by name for u64 and byte keys. Method: build, upsert, get back.
        for name in peers::PEER_NAMES {
            for shape in [KeyShape::U64, KeyShape::Ycsb] {
                let index = build(&Spec::parse(name).expect("valid"), shape).expect("builds");
                let key = shape.key(3, crate::keygen::KeyOrder::Scattered);
                index.upsert(&key, b"v").expect("upsert");
                let mut out = Vec::new();
                assert!(index.get(&key, &mut out), "{name}");
                assert_eq!(out, b"v");
            }
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        // Goal: a typo gets an error naming every engine and peer.
        let err = build(&Spec::parse("bwtre").expect("valid"), KeyShape::U64)
            .err()
            .expect("unknown");
        let text = err.to_string();
        for name in known_names() {
            assert!(text.contains(name), "{text}");
        }
        assert!(build(&Spec::parse("skiplist:x=1").expect("valid"), KeyShape::U64).is_err());
    }

    #[test]
    fn masstree_knobs_parse_and_bad_values_name_the_accepted_ones() {
        // Goal: the §6.2 factor-analysis specs build, and a wrong value or key names what is
        // accepted. Method: build each, then check the error texts.
        for spec in [
            "masstree",
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
            let index = build(&Spec::parse(spec).expect("valid"), KeyShape::U64).expect(spec);
            index.upsert(b"k", b"v").expect("upsert");
            let mut out = Vec::new();
            assert!(index.get(b"k", &mut out), "{spec}");
            // A 20-byte key needs a layer only when suffixes are not stored.
            index.upsert(b"0123456789abcdefghij", b"v").expect("upsert");
            let layers = index.stats().counter("layers").expect("kept");
            assert_eq!(layers > 0, spec.contains("suffix=layers"), "{spec}");
        }
        let bad = |spec: &str| {
            let err = build(&Spec::parse(spec).expect("valid"), KeyShape::U64)
                .err()
                .expect("refused");
            format!("{err:#}")
        };
        assert!(bad("masstree:prefetch=maybe").contains("on, off"));
        assert!(bad("masstree:search=fast").contains("linear, binary"));
        assert!(bad("masstree:permuter=maybe").contains("on, off"));
        assert!(bad("masstree:suffix=inline").contains("block, separate, layers"));
        assert!(bad("masstree:nodes=8").contains("prefetch, search, permuter, suffix, fanout"));
        assert!(bad("masstree:fanout=7").contains("15 (15x16), 10x8, 15x32"));
    }

    #[test]
    fn bwtree_knobs_parse_and_bad_ones_are_named() {
        // Goal: the Fig. 5 and read-threshold sweep specs build; a bad value or key is refused
        // with the accepted keys. Method: build each, then check the error texts.
        for spec in [
            "bwtree",
            "bwtree:consolidate=8",
            "bwtree:read_consolidate=0",
            "bwtree:read_consolidate=4,consolidate=2,page=64,merge=8",
        ] {
            let index = build(&Spec::parse(spec).expect("valid"), KeyShape::U64).expect(spec);
            index.upsert(b"k", b"v").expect("upsert");
            let mut out = Vec::new();
            assert!(index.get(b"k", &mut out), "{spec}");
        }
        let bad = |spec: &str| {
            let err = build(&Spec::parse(spec).expect("valid"), KeyShape::U64)
                .err()
                .expect("refused");
            format!("{err:#}")
        };
        assert!(bad("bwtree:read_consolidate=many").contains("read_consolidate"));
        assert!(bad("bwtree:read_consolidate=2000").contains("read_consolidate_threshold"));
        assert!(bad("bwtree:chain=3").contains("page, consolidate, read_consolidate, merge"));
    }
}
