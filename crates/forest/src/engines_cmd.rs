//! `forest engines`: every engine of the registry (`forest_engines`) with its capabilities
//! and parameters, and the peers `forest bench` measures beside them (issue 13).

use std::fmt::Write as _;

use clap::Args;

/// `forest engines`' flags (none yet: the list is short).
#[derive(Args, Debug, Clone)]
pub struct EnginesArgs {}

/// The listing `forest engines` prints.
pub fn listing() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Engines (--engine SPEC for serve and the store commands, --engines for bench; a spec \
         is NAME or NAME:key=value,...):"
    );
    for e in forest_engines::ENGINES {
        let default = if e.name == forest_engines::ENGINE_DEFAULT {
            " (default)"
        } else {
            ""
        };
        let _ = writeln!(s, "\n  {}{default}: {}", e.name, e.about);
        let c = e.capabilities;
        let can: Vec<&str> = [
            (c.in_memory, "in memory"),
            (c.durable_through_store, "durable through the store"),
            (c.persistent_on_its_own, "persistent on its own"),
            (
                c.store_holds_its_file,
                "a store engine holding its own file",
            ),
            (c.temporal, "temporal"),
        ]
        .into_iter()
        .filter_map(|(has, what)| has.then_some(what))
        .collect();
        let _ = writeln!(s, "    capabilities: {}", can.join(", "));
        for p in e.params {
            let _ = writeln!(
                s,
                "    {}={:<24} {} [default: {}]",
                p.key, p.values, p.meaning, p.default
            );
        }
    }
    let _ = writeln!(
        s,
        "\nPeers (forest bench --engines only; no parameters; u64 keys on the u64 shape, byte \
         keys otherwise):"
    );
    for p in forest_bench::peers::PEER_NAMES {
        let _ = writeln!(s, "  {:<18} {}", p, forest_bench::peers::describe(p));
    }
    s
}

/// Prints [`listing`].
pub fn engines(_args: EnginesArgs) -> anyhow::Result<()> {
    print!("{}", listing());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every engine, parameter and peer is listed with what it means.
    #[test]
    fn lists_every_engine_parameter_and_peer() {
        let text = listing();
        for e in forest_engines::ENGINES {
            assert!(
                text.contains(e.name) && text.contains(e.about),
                "{}",
                e.name
            );
            for p in e.params {
                assert!(
                    text.contains(&format!("{}={}", p.key, p.values)),
                    "{}",
                    p.key
                );
                assert!(text.contains(p.meaning), "{}", p.key);
            }
        }
        for p in forest_bench::peers::PEER_NAMES {
            assert!(text.contains(p), "{p}");
        }
        assert!(text.contains("masstree (default)"));
    }
}
