//! The TSBw-tree's registry entry: parameters into `TsbConfig`.

use forest_core::{Index, Result};
use forest_tsbtree::{TsbConfig, TsbTree};

use crate::registry::{number, unknown_param, Capabilities, EngineEntry, Param, Resolved};
use crate::spec::EngineSpec;

const NAME: &str = "tsbtree";

const PARAMS: &[Param] = &[
    Param {
        key: "page",
        values: "N",
        default: "128",
        meaning: "versions per leaf before it splits by key or time (§III-A2, §III-A3)",
    },
    Param {
        key: "index_page",
        values: "N",
        default: "128",
        meaning: "index terms per index page before it key-splits (§III-A1)",
    },
    Param {
        key: "consolidate",
        values: "N",
        default: "8",
        meaning: "delta chain length at which a writer consolidates its leaf (§VI-A: 10)",
    },
    Param {
        key: "time_split",
        values: "1..99",
        default: "33",
        meaning: "percent of a full page that must be historical for a time split (§VI-A: a third)",
    },
];

pub(crate) const ENTRY: EngineEntry = EngineEntry {
    name: NAME,
    about: "the TSBw-tree on a LLAMA mapping table: versions, as-of reads, key and time splits (in memory)",
    params: PARAMS,
    // Until the storage increments of issue 18, a store would keep only current values.
    capabilities: Capabilities {
        in_memory: true,
        durable_through_store: false,
        persistent_on_its_own: false,
        store_holds_its_file: false,
        temporal: true,
    },
    resolve,
    build,
};

fn config(spec: &EngineSpec) -> Result<TsbConfig> {
    let mut config = TsbConfig::default();
    for (k, v) in &spec.params {
        match k.as_str() {
            "page" => config.max_records_per_page = number(NAME, k, v)?,
            "index_page" => config.max_index_entries = number(NAME, k, v)?,
            "consolidate" => config.consolidate_threshold = number(NAME, k, v)?,
            "time_split" => config.time_split_percent = number(NAME, k, v)?,
            _ => return Err(unknown_param(NAME, k, PARAMS)),
        }
    }
    Ok(config)
}

fn resolve(spec: &EngineSpec) -> Result<Resolved> {
    let config = config(spec)?;
    // The tree checks the values; refuse what build refuses.
    TsbTree::with_config(config.clone())?;
    Ok(vec![
        ("page", config.max_records_per_page.to_string()),
        ("index_page", config.max_index_entries.to_string()),
        ("consolidate", config.consolidate_threshold.to_string()),
        ("time_split", config.time_split_percent.to_string()),
    ])
}

fn build(spec: &EngineSpec) -> Result<Box<dyn Index>> {
    Ok(Box::new(TsbTree::with_config(config(spec)?)?))
}
