//! The Bw-tree's registry entry: parameters into `BwTreeConfig`.

use forest_bwtree::{BwTree, BwTreeConfig};
use forest_core::{Index, Result};

use crate::registry::{number, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "bwtree";

const PARAMS: &[Param] = &[
    Param {
        key: "page",
        values: "N",
        default: "128",
        meaning: "records per page before it splits (§IV-A)",
    },
    Param {
        key: "consolidate",
        values: "N",
        default: "4",
        meaning: "delta chain length at which a writer consolidates the page (§III-B, Fig. 5)",
    },
    Param {
        key: "read_consolidate",
        values: "N",
        default: "1",
        meaning: "delta chain length above which a read consolidates the page it read (§III-B)",
    },
    Param {
        key: "merge",
        values: "N",
        default: "32",
        meaning: "records below which a page merges into its left sibling (§IV-B); 0: never",
    },
];

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about:
        "the Bw-tree on a LLAMA mapping table: latch-free delta records, consolidation, B-link SMOs",
    params: PARAMS,
    capabilities: Capabilities::STORE_INDEX,
    resolve,
    build,
};

fn config(spec: &EngineSpec) -> Result<BwTreeConfig> {
    let mut config = BwTreeConfig::default();
    for (k, v) in &spec.params {
        match k.as_str() {
            "page" => config.max_records_per_page = number(NAME, k, v)?,
            "consolidate" => config.consolidate_threshold = number(NAME, k, v)?,
            "read_consolidate" => config.read_consolidate_threshold = number(NAME, k, v)?,
            "merge" => config.merge_threshold = number(NAME, k, v)?,
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    Ok(config)
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let config = config(spec)?;
    // The tree checks the thresholds against each other; refuse what build refuses.
    BwTree::with_config(config.clone())?;
    Ok(vec![
        ("page", config.max_records_per_page.to_string()),
        ("consolidate", config.consolidate_threshold.to_string()),
        (
            "read_consolidate",
            config.read_consolidate_threshold.to_string(),
        ),
        ("merge", config.merge_threshold.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    Ok(Box::new(BwTree::with_config(config(spec)?)?))
}

/// The Bw-tree a `bwtree` spec names, as its own type: a store attaches an LSS to it
/// (forest-store `llama.rs`, issue 17), which a `Box<dyn Index>` cannot.
pub fn bwtree_of(spec: &EngineSpec) -> Result<BwTree> {
    if spec.name != NAME {
        return Err(forest_core::Error::Config(format!(
            "engine {:?} is not {NAME}",
            spec.name
        )));
    }
    BwTree::with_config(config(spec)?)
}
