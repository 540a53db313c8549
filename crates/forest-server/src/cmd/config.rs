//! CONFIG GET / SET / RESETSTAT: the parameters redis-benchmark and client libraries ask
//! for, answered from forest's own settings (docs/PROTOCOL.md "Server"). Nothing else changes
//! at run time: SET accepts a parameter only when the value is the current one, or for `save`
//! (Redis's snapshot schedule, which forest has no use for: its log is always on), or the
//! scripts' time limit (`busy-reply-threshold`, alias `lua-time-limit`), which it sets.

use std::sync::atomic::Ordering;

use forest_store::Durability;

use super::{is_word, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::frame::Frame;
use crate::glob;

/// The parameters and their values.
fn parameters(ctx: &Ctx<'_, '_>) -> Vec<(&'static str, String)> {
    let c = &ctx.shared.config;
    let port = ctx.shared.local_addr.lock().map_or(c.port, |a| a.port());
    vec![
        ("save", String::new()),
        ("appendonly", "yes".into()),
        (
            "appendfsync",
            match c.durability {
                Durability::Periodic { .. } => "everysec",
                _ => "always",
            }
            .into(),
        ),
        ("maxclients", c.max_clients.to_string()),
        ("databases", "1".into()),
        ("port", port.to_string()),
        ("bind", c.bind.clone()),
        ("dir", c.dir.display().to_string()),
        ("timeout", "0".into()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        (
            "proto-max-bulk-len",
            crate::frame::BULK_BYTES_MAX.to_string(),
        ),
        ("cluster-enabled", "no".into()),
        ("loglevel", "notice".into()),
        (
            "busy-reply-threshold",
            ctx.shared.scripts.time_limit_ms().to_string(),
        ),
        (
            "lua-time-limit",
            ctx.shared.scripts.time_limit_ms().to_string(),
        ),
        ("forest-engine", ctx.shared.engine.clone()),
        ("forest-durability", c.durability.to_string()),
    ]
}

pub fn config(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    let args = &argv[2..];
    if is_word(sub, "get") {
        if args.is_empty() {
            return Err(wrong_arity("config|get"));
        }
        let params = parameters(ctx);
        let pairs = params
            .into_iter()
            .filter(|(name, _)| {
                args.iter()
                    .any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
            })
            .map(|(name, value)| (Frame::bulk(name), Frame::bulk(value)))
            .collect();
        Ok(Frame::Map(pairs))
    } else if is_word(sub, "set") {
        if args.is_empty() || !args.len().is_multiple_of(2) {
            return Err(wrong_arity("config|set"));
        }
        let params = parameters(ctx);
        for pair in args.chunks_exact(2) {
            let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
            let Some((_, current)) = params.iter().find(|(n, _)| *n == name) else {
                return Err(Frame::err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{name}'"
                )));
            };
            if matches!(name.as_str(), "busy-reply-threshold" | "lua-time-limit") {
                continue;
            }
            if name != "save" && pair[1] != current.as_bytes() {
                return Err(Frame::err(format!(
                    "CONFIG SET failed (possibly related to argument '{name}') - forest does \
                     not change '{name}' at run time"
                )));
            }
        }
        // Checked whole before any is applied, as Redis's CONFIG SET.
        let mut time_limit = None;
        for pair in args.chunks_exact(2) {
            let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
            if matches!(name.as_str(), "busy-reply-threshold" | "lua-time-limit") {
                let ms = crate::parse::parse_int(pair[1])
                    .and_then(|ms| u64::try_from(ms).ok())
                    .ok_or_else(|| {
                        Frame::err(format!(
                            "CONFIG SET failed (possibly related to argument '{name}') - \
                             argument couldn't be parsed into an integer"
                        ))
                    })?;
                time_limit = Some(ms);
            }
        }
        if let Some(ms) = time_limit {
            ctx.shared.scripts.set_time_limit_ms(ms);
        }
        Ok(Frame::ok())
    } else if is_word(sub, "resetstat") {
        let stats = &ctx.shared.stats;
        stats.commands_processed.store(0, Ordering::Relaxed);
        stats.connections_received.store(0, Ordering::Relaxed);
        stats.rejected_connections.store(0, Ordering::Relaxed);
        ctx.shared.expires.reset_expired_count();
        Ok(Frame::ok())
    } else {
        Err(unknown_subcommand("config", sub))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: CONFIG GET answers the parameters redis-benchmark reads, by glob; SET accepts
    // only harmless changes.
    // Method: GET save/appendonly and a glob; SET a no-op, `save`, and a real change.
    #[test]
    fn config_get_and_set() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["CONFIG", "GET", "save"]),
            Frame::Map(vec![(bulk("save"), bulk(""))])
        );
        assert_eq!(
            h.run(&["config", "get", "APPENDONLY"]),
            Frame::Map(vec![(bulk("appendonly"), bulk("yes"))])
        );
        let Frame::Map(pairs) = h.run(&["CONFIG", "GET", "max*"]) else {
            panic!("map expected");
        };
        assert_eq!(pairs.len(), 3, "{pairs:?}");
        assert_eq!(h.run(&["CONFIG", "SET", "save", "900 1"]), Frame::ok());
        assert_eq!(h.run(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
        assert!(matches!(
            h.run(&["CONFIG", "SET", "appendonly", "no"]),
            Frame::Error(_)
        ));
        assert!(matches!(
            h.run(&["CONFIG", "SET", "nope", "1"]),
            Frame::Error(_)
        ));
        assert_eq!(h.run(&["CONFIG", "RESETSTAT"]), Frame::ok());
        assert_eq!(
            h.run(&["CONFIG", "GET"]),
            Frame::Error("ERR wrong number of arguments for 'config|get' command".into())
        );
    }
}
