//! lockbtree's registry entry: parameters into `LockBTreeConfig`.

use forest_core::{Error, Index, Result};
use forest_lockbtree::{LockBTree, LockBTreeConfig, NodeSearch};

use crate::registry::{number, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "lockbtree";

const PARAMS: &[Param] = &[
    Param {
        key: "order",
        values: "N",
        default: "128",
        meaning: "children of a full inner node (a node holds order-1 keys)",
    },
    Param {
        key: "search",
        values: "linear|binary",
        default: "binary",
        meaning: "in-node key search",
    },
];

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about:
        "Westerhoff's lock-coupling B+tree: RW spin latches, interlocking reads, multi-pass writes",
    params: PARAMS,
    capabilities: Capabilities::STORE_INDEX,
    resolve,
    build,
};

fn config(spec: &EngineSpec) -> Result<LockBTreeConfig> {
    let mut config = LockBTreeConfig::default();
    for (k, v) in &spec.params {
        match k.as_str() {
            "order" => config.order = number(NAME, k, v)?,
            "search" => {
                config.search = match v.as_str() {
                    "linear" => NodeSearch::Linear,
                    "binary" => NodeSearch::Binary,
                    _ => {
                        return Err(Error::Config(format!(
                            "{NAME}: search={v:?}; known: linear, binary"
                        )))
                    }
                };
            }
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    Ok(config)
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let config = config(spec)?;
    // The tree checks the order's range; resolve must refuse what build refuses.
    LockBTree::with_config(config)?;
    let search = match config.search {
        NodeSearch::Linear => "linear",
        NodeSearch::Binary => "binary",
    };
    Ok(vec![
        ("order", config.order.to_string()),
        ("search", search.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    Ok(Box::new(LockBTree::with_config(config(spec)?)?))
}
