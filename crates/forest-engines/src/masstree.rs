//! Masstree's registry entry: parameters into `MasstreeConfig` and the node widths.

use forest_core::{Error, Index, Result};
use forest_masstree::{
    Masstree, Masstree10x8, Masstree15x32, MasstreeConfig, NodeSearch, SuffixStorage,
};

use crate::registry::{on_off, switch, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "masstree";

const PARAMS: &[Param] = &[
    Param {
        key: "prefetch",
        values: "on|off",
        default: "on",
        meaning: "prefetch a child node's cache lines before searching it (§4.2, §6.2)",
    },
    Param {
        key: "search",
        values: "linear|binary",
        default: "linear",
        meaning: "in-node key search (§4.8)",
    },
    Param {
        key: "permuter",
        values: "on|off",
        default: "on",
        meaning: "border nodes ordered through a permutation (§4.6.2); off: sorted slots shifted in place",
    },
    Param {
        key: "suffix",
        values: "block|separate|layers",
        default: "block",
        meaning: "key suffixes in the value block, in a block of their own, or none: long keys always in layers (§4.2)",
    },
    Param {
        key: "fanout",
        values: "15x16|10x8|15x32",
        default: "15x16",
        meaning: "border slots x interior fanout (§4.2); `15` means 15x16",
    },
];

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about: "Masstree: a trie of B+trees over 8-byte key slices, optimistic readers, per-node locks",
    params: PARAMS,
    capabilities: Capabilities::STORE_INDEX,
    resolve,
    build,
};

/// Border slots x interior fanout: a type each, so a node's size really changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fanout {
    F15x16,
    F10x8,
    F15x32,
}

fn config(spec: &EngineSpec) -> Result<(MasstreeConfig, Fanout)> {
    let mut config = MasstreeConfig::default();
    let mut fanout = Fanout::F15x16;
    let bad = |text: String| Error::Config(format!("{NAME}: {text}"));
    for (k, v) in &spec.params {
        match k.as_str() {
            "fanout" => {
                fanout = match v.as_str() {
                    "15" | "15x16" => Fanout::F15x16,
                    "10x8" => Fanout::F10x8,
                    "15x32" => Fanout::F15x32,
                    _ => {
                        return Err(bad(format!(
                            "fanout={v:?}; known: 15 (15x16), 10x8, 15x32 (border slots x \
                             interior fanout; border nodes need at least 10 slots, §4.2)"
                        )))
                    }
                };
            }
            "prefetch" => config.prefetch = on_off(NAME, k, v)?,
            "search" => {
                config.search = match v.as_str() {
                    "linear" => NodeSearch::Linear,
                    "binary" => NodeSearch::Binary,
                    _ => return Err(bad(format!("search={v:?}; known: linear, binary"))),
                };
            }
            "permuter" => config.permuter = on_off(NAME, k, v)?,
            "suffix" => {
                config.suffix = match v.as_str() {
                    "block" => SuffixStorage::Block,
                    "separate" => SuffixStorage::Separate,
                    "layers" => SuffixStorage::Layers,
                    _ => return Err(bad(format!("suffix={v:?}; known: block, separate, layers"))),
                };
            }
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    Ok((config, fanout))
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let (config, fanout) = config(spec)?;
    let search = match config.search {
        NodeSearch::Linear => "linear",
        NodeSearch::Binary => "binary",
    };
    let suffix = match config.suffix {
        SuffixStorage::Block => "block",
        SuffixStorage::Separate => "separate",
        SuffixStorage::Layers => "layers",
    };
    let fanout = match fanout {
        Fanout::F15x16 => "15x16",
        Fanout::F10x8 => "10x8",
        Fanout::F15x32 => "15x32",
    };
    Ok(vec![
        ("prefetch", switch(config.prefetch)),
        ("search", search.to_string()),
        ("permuter", switch(config.permuter)),
        ("suffix", suffix.to_string()),
        ("fanout", fanout.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    let (config, fanout) = config(spec)?;
    Ok(match fanout {
        Fanout::F15x16 => Box::new(Masstree::with_config(config)),
        Fanout::F10x8 => Box::new(Masstree10x8::with_widths(config)),
        Fanout::F15x32 => Box::new(Masstree15x32::with_widths(config)),
    })
}
