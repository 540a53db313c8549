//! Durability modes, named the same everywhere (DESIGN.md "Durability"; issue 5; Masstree §5
//! for `periodic`).
//!
//! - `sync`: the writer forces its own record (write + fsync) before it is acknowledged.
//! - `group` (default): the shard's flusher writes and fsyncs everything appended while the
//!   previous fsync ran; a write is acknowledged after the fsync of its batch (and every
//!   other shard is durable up to its LSN).
//! - `periodic:MS`: acknowledged at once; the flushers force at least every `MS`
//!   milliseconds. A crash loses at most the writes of the last `MS` ms plus one fsync, and
//!   recovery still yields a prefix of the history.

use std::fmt;
use std::str::FromStr;

use forest_core::{Error, Result};

/// The longest periodic interval accepted: a minute of writes is already a lot to lose.
pub const PERIODIC_INTERVAL_MS_MAX: u64 = 60_000;

/// When a write is acknowledged relative to its fsync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Fsync before acknowledging, one force per write.
    Sync,
    /// Acknowledge after the fsync of the group-commit batch that holds the write.
    #[default]
    Group,
    /// Acknowledge at once; force at least every `interval_ms`.
    Periodic { interval_ms: u64 },
}

impl Durability {
    /// Whether an acknowledged write is durable.
    pub fn acks_durable(self) -> bool {
        !matches!(self, Durability::Periodic { .. })
    }
}

impl FromStr for Durability {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::Config(format!(
                "durability {s:?}: expected \"sync\", \"group\" or \"periodic:MS\" with MS in \
                 1..={PERIODIC_INTERVAL_MS_MAX}"
            ))
        };
        match s {
            "sync" => Ok(Durability::Sync),
            "group" => Ok(Durability::Group),
            _ => {
                let ms = s.strip_prefix("periodic:").ok_or_else(bad)?;
                let interval_ms: u64 = ms.parse().map_err(|_| bad())?;
                if !(1..=PERIODIC_INTERVAL_MS_MAX).contains(&interval_ms) {
                    return Err(bad());
                }
                Ok(Durability::Periodic { interval_ms })
            }
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::Sync => f.write_str("sync"),
            Durability::Group => f.write_str("group"),
            Durability::Periodic { interval_ms } => write!(f, "periodic:{interval_ms}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the accepted forms parse and print back; others name the accepted forms.
    // Method: round trips and a few bad strings.
    #[test]
    fn parse_and_display() {
        for text in ["sync", "group", "periodic:200"] {
            let d: Durability = text.parse().expect("valid");
            assert_eq!(d.to_string(), text);
        }
        assert_eq!(Durability::default(), Durability::Group);
        for bad in [
            "",
            "Sync",
            "periodic",
            "periodic:",
            "periodic:0",
            "periodic:x",
            "periodic:60001",
        ] {
            let err = bad.parse::<Durability>().expect_err("invalid").to_string();
            assert!(err.contains("periodic:MS"), "{err}");
        }
    }
}
