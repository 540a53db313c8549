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
    for (k, v) in &spec.params {
        match k.as_str() {
            "node" => node = number(NAME, k, v)?,
            "heap_mib" => heap_mib = number(NAME, k, v)?,
            "descriptors" => descriptors = number(NAME, k, v)?,
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    let config = BzTreeConfig {
        heap_bytes: heap_mib.saturating_mul(1 << 20),
        descriptor_count: descriptors,
        ..BzTreeConfig::with_node_size(node)
    };
    config.check()?;
    Ok(config)
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let config = config(spec)?;
    Ok(vec![
        ("node", config.node_size.to_string()),
        ("heap_mib", (config.heap_bytes >> 20).to_string()),
        ("descriptors", config.descriptor_count.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    Ok(Box::new(BzTree::with_config(config(spec)?)?))
}
