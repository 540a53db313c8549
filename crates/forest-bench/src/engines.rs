//! Specs for `forest bench`: forest's engines from the one registry (`forest_engines`),
//! and the peers measured beside them ([`crate::peers`]), built as an `Arc<dyn Index>`.
//!
//! A spec is `name` or `name:key=value,...` (e.g. `lockbtree:order=16,search=linear`), so a
//! sweep over an engine's configuration is a list of specs (`forest_engines::split_list`).
//! Peers take no parameters and are built for the run's key shape.

use std::sync::Arc;

use anyhow::{bail, Context};
use forest_core::Index;
pub use forest_engines::{split_list, EngineSpec as Spec, ENGINES};

use crate::keygen::KeyShape;
use crate::peers;

/// Whether `spec` names a peer (not a forest engine).
pub fn is_peer(spec: &Spec) -> bool {
    peers::PEER_NAMES.contains(&spec.name.as_str())
}

/// Every known name: engines, then peers.
pub fn known_names() -> Vec<&'static str> {
    forest_engines::engine_names()
        .chain(peers::PEER_NAMES)
        .collect()
}

/// Builds the index a spec names, for keys of `shape`.
pub fn build(spec: &Spec, shape: KeyShape) -> anyhow::Result<Arc<dyn Index>> {
    if is_peer(spec) {
        if !spec.params.is_empty() {
            bail!("peer {} takes no parameters", spec.name);
        }
        if let Some(index) = peers::build(&spec.name, shape) {
            return Ok(index);
        }
    }
    if forest_engines::find(&spec.name).is_ok() {
        let index = forest_engines::build(spec).with_context(|| format!("building {spec}"))?;
        return Ok(Arc::from(index));
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
        // Goal: a typo gets an error naming every engine and peer; a peer takes no
        // parameters; an engine's bad parameter is named with the spec.
        let err = build(&Spec::parse("bwtre").expect("valid"), KeyShape::U64)
            .err()
            .expect("unknown");
        let text = err.to_string();
        for name in known_names() {
            assert!(text.contains(name), "{text}");
        }
        assert!(build(&Spec::parse("skiplist:x=1").expect("valid"), KeyShape::U64).is_err());
        let err = build(
            &Spec::parse("bwtree:chain=3").expect("valid"),
            KeyShape::U64,
        )
        .err()
        .expect("refused");
        let text = format!("{err:#}");
        assert!(
            text.contains("building bwtree:chain=3") && text.contains("page"),
            "{text}"
        );
    }
}
