//! The BzTree's registry entry (volatile mode): parameters into `BzTreeConfig`.

use forest_bztree::{BzTree, BzTreeConfig};
use forest_core::{Index, Result};

use crate::registry::{number, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "bztree";

const PARAMS: &[Param] = &[
    Param {
        key: "node",
        values: "N",
        default: "1024",
        meaning: "node size in bytes (§7.1: 1 KB); split above 3/4 of it, merge below 1/4, \
                  consolidate at 1/4 deleted, values inline up to 1/4 (§4.3, §5.1)",
    },
    FREE_PARAM,
    Param {
        key: "heap_mib",
        values: "N",
        default: "8192",
        meaning: "node heap in MiB: the pool region's user area (§3.1), virtual until touched",
    },
    Param {
        key: "descriptors",
        values: "N",
        default: "32768",
        meaning: "PMwCAS descriptors in the pool (§2.3), a multiple of 64",
    },
];

/// `free`, shared with bztree-pm.
pub(crate) const FREE_PARAM: Param = Param {
    key: "free",
    values: "N|full",
    default: "full",
    meaning: "free space in bytes a rebuilt leaf gets beyond its records (§4.3, §7.7 Fig. 8b), \
              within the node size; full: every leaf a whole node",
};

/// Parses `free`: `None` for `full`.
pub(crate) fn free_space(engine: &str, key: &str, value: &str) -> Result<Option<usize>> {
    if value == "full" {
        return Ok(None);
    }
    number(engine, key, value).map(Some)
}

/// `free`'s resolved value.
pub(crate) fn free_resolved(config: &BzTreeConfig) -> String {
    if config.free_space >= config.node_size {
        "full".to_string()
    } else {
        config.free_space.to_string()
    }
}

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about: "the BzTree on PMwCAS (volatile): in-place leaf updates, frozen-node SMOs in one multi-word CAS",
    params: PARAMS,
    capabilities: Capabilities::STORE_INDEX,
    resolve,
    build,
};

fn config(spec: &EngineSpec) -> Result<BzTreeConfig> {
    let mut node = 1024usize;
    let mut heap_mib = 8192usize;
    let mut descriptors = 32768usize;
    let mut free = None;
    for (k, v) in &spec.params {
        match k.as_str() {
            "node" => node = number(NAME, k, v)?,
            "free" => free = free_space(NAME, k, v)?,
            "heap_mib" => heap_mib = number(NAME, k, v)?,
            "descriptors" => descriptors = number(NAME, k, v)?,
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    let defaults = BzTreeConfig::with_node_size(node);
    let config = BzTreeConfig {
        heap_bytes: heap_mib.saturating_mul(1 << 20),
        descriptor_count: descriptors,
        free_space: free.unwrap_or(defaults.free_space),
        ..defaults
    };
    config.check()?;
    Ok(config)
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let config = config(spec)?;
    Ok(vec![
        ("node", config.node_size.to_string()),
        ("free", free_resolved(&config)),
        ("heap_mib", (config.heap_bytes >> 20).to_string()),
        ("descriptors", config.descriptor_count.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    Ok(Box::new(BzTree::with_config(config(spec)?)?))
}
