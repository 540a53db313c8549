//! Engine specs: `name` or `name:key=value,...`.

use forest_core::{Error, Result};

/// A parsed spec: an engine's (or a benchmark peer's) name and its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineSpec {
    /// The registry name.
    pub name: String,
    /// `key=value` parameters in the order given.
    pub params: Vec<(String, String)>,
}

impl EngineSpec {
    /// Parses `name` or `name:key=value,...`.
    pub fn parse(spec: &str) -> Result<EngineSpec> {
        let spec = spec.trim();
        let (name, rest) = match spec.split_once(':') {
            Some((name, rest)) => (name, Some(rest)),
            None => (spec, None),
        };
        if name.is_empty() {
            return Err(Error::Config(format!("empty engine name in spec {spec:?}")));
        }
        let mut params = Vec::new();
        for pair in rest
            .into_iter()
            .flat_map(|r| r.split(','))
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::Config(format!(
                    "parameter {pair:?} of spec {spec:?} is not key=value"
                ))
            })?;
            params.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(EngineSpec {
            name: name.to_string(),
            params,
        })
    }

    /// A spec of `name` with no parameters.
    pub fn bare(name: &str) -> EngineSpec {
        EngineSpec {
            name: name.to_string(),
            params: Vec::new(),
        }
    }

    /// The spec as text, normalized (`name` or `name:k=v,k=v`).
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
}

impl std::fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Splits a comma-separated list of specs: a piece with `=` and no `:` continues the
/// previous spec's parameters, so `lockbtree:order=16,search=linear,skiplist` is two specs.
pub fn split_list(list: &str) -> Result<Vec<EngineSpec>> {
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
    pieces.iter().map(|p| EngineSpec::parse(p)).collect()
}
