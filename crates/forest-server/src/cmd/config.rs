//! CONFIG GET / SET / RESETSTAT: the parameters redis-benchmark and client libraries ask
//! for, answered from forest's own settings (docs/PROTOCOL.md "Server"). Nothing else changes
//! at run time: SET accepts a parameter only when the value is the current one, or for `save`
//! (Redis's snapshot schedule, which forest has no use for: its log is always on), the
//! scripts' time limit (`busy-reply-threshold`, alias `lua-time-limit`), which it sets, and
//! the pubsub class of `client-output-buffer-limit`, which bounds subscribers
//! ([`crate::pubsub::Limits`]); its `normal` and `replica` classes stay as Redis's defaults,
//! since forest bounds no other client's output and has no replicas. Redis's encoding and
//! memory tuning parameters ([`TUNING`]: listpack sizes, list compression, stream node sizes,
//! lazyfree, ...) mean nothing to forest, whose collections are ordered keys, but tools and
//! client test suites set them: SET checks and keeps a value, GET returns it.

use std::sync::atomic::Ordering;

use forest_store::Durability;

use super::{is_word, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::frame::Frame;
use crate::glob;
use crate::pubsub::Limits;

/// What a tuning parameter's value must be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Value {
    /// A whole number within these bounds (Redis's `int` configs).
    Int(i64, i64),
    /// A byte count in Redis's units.
    Bytes,
    /// yes or no.
    YesNo,
}

/// The tuning parameters forest keeps without using them: name, Redis 7's alias (or ""),
/// what a value must be, Redis 7's default.
const TUNING: &[(&str, &str, Value, &str)] = &[
    (
        "hash-max-listpack-entries",
        "hash-max-ziplist-entries",
        Value::Int(0, I32_MAX),
        "128",
    ),
    (
        "hash-max-listpack-value",
        "hash-max-ziplist-value",
        Value::Bytes,
        "64",
    ),
    (
        "list-max-listpack-size",
        "list-max-ziplist-size",
        Value::Int(I32_MIN, I32_MAX),
        "-2",
    ),
    ("list-compress-depth", "", Value::Int(0, I32_MAX), "0"),
    ("set-max-intset-entries", "", Value::Int(0, I32_MAX), "512"),
    (
        "set-max-listpack-entries",
        "",
        Value::Int(0, I32_MAX),
        "128",
    ),
    ("set-max-listpack-value", "", Value::Bytes, "64"),
    (
        "zset-max-listpack-entries",
        "zset-max-ziplist-entries",
        Value::Int(0, I32_MAX),
        "128",
    ),
    (
        "zset-max-listpack-value",
        "zset-max-ziplist-value",
        Value::Bytes,
        "64",
    ),
    ("stream-node-max-bytes", "", Value::Bytes, "4096"),
    ("stream-node-max-entries", "", Value::Int(0, I32_MAX), "100"),
    ("hll-sparse-max-bytes", "", Value::Bytes, "3000"),
    ("activerehashing", "", Value::YesNo, "yes"),
    ("lazyfree-lazy-eviction", "", Value::YesNo, "no"),
    ("lazyfree-lazy-expire", "", Value::YesNo, "no"),
    ("lazyfree-lazy-server-del", "", Value::YesNo, "no"),
    ("lazyfree-lazy-user-del", "", Value::YesNo, "no"),
    ("lazyfree-lazy-user-flush", "", Value::YesNo, "no"),
    ("maxmemory-samples", "", Value::Int(1, I32_MAX), "5"),
    ("hz", "", Value::Int(0, I32_MAX), "10"),
    ("dynamic-hz", "", Value::YesNo, "yes"),
    ("replica-lazy-flush", "", Value::YesNo, "no"),
];

const I32_MIN: i64 = i32::MIN as i64;
const I32_MAX: i64 = i32::MAX as i64;

/// The tuning parameters' starting values ([`crate::server::Shared::tuning`]).
pub fn tuning_defaults() -> Vec<(&'static str, String)> {
    TUNING
        .iter()
        .map(|(name, _, _, default)| (*name, default.to_string()))
        .collect()
}

/// The tuning parameter `name` is (by its name or alias), and its canonical name.
fn tuning_entry(name: &str) -> Option<(&'static str, Value)> {
    TUNING
        .iter()
        .find(|(n, alias, _, _)| *n == name || (!alias.is_empty() && *alias == name))
        .map(|(n, _, kind, _)| (*n, *kind))
}

/// `value` checked as `kind` wants, in the form CONFIG GET shows; errors name the parameter
/// as given (`name`: an alias stays an alias, as in Redis).
fn tuning_value(canonical: &str, name: &str, kind: Value, value: &[u8]) -> Result<String, Frame> {
    let text = String::from_utf8_lossy(value).to_ascii_lowercase();
    let fail = |why: &str| {
        Frame::err(format!(
            "CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
    };
    match kind {
        // Redis reads "-0" as no integer.
        Value::Int(_, _) if text.starts_with("-0") => {
            Err(fail("argument couldn't be parsed into an integer"))
        }
        Value::Int(min, max) => match text.parse::<i64>() {
            // Redis keeps hz within 1..=500 and shows what it keeps.
            Ok(n) if canonical == "hz" && (min..=max).contains(&n) => {
                Ok(n.clamp(1, 500).to_string())
            }
            Ok(n) if (min..=max).contains(&n) => Ok(n.to_string()),
            Ok(_) => Err(fail(&format!(
                "argument must be between {min} and {max} inclusive"
            ))),
            Err(_) => Err(fail("argument couldn't be parsed into an integer")),
        },
        // An empty byte count is 0, as in Redis.
        Value::Bytes if text.is_empty() => Ok("0".to_string()),
        Value::Bytes => crate::pubsub::memory_bytes(&text)
            .map(|n| n.to_string())
            .map_err(|_| fail("argument must be a memory value")),
        Value::YesNo if text == "yes" || text == "no" => Ok(text),
        Value::YesNo => Err(fail("argument must be 'yes' or 'no'")),
    }
}

/// Redis's defaults of the classes forest does not bound.
const NORMAL_CLASS: &str = "normal 0 0 0";
const REPLICA_CLASS: &str = "slave 268435456 67108864 60";

fn output_limits(limits: Limits) -> String {
    format!(
        "{NORMAL_CLASS} {REPLICA_CLASS} pubsub {} {} {}",
        limits.hard,
        limits.soft,
        limits.soft_for.as_secs()
    )
}

/// Parses `CONFIG SET client-output-buffer-limit` groups `<class> <hard> <soft> <seconds>`:
/// the pubsub limits to apply, if the value names that class.
fn parse_output_limits(value: &[u8]) -> Result<Option<Limits>, Frame> {
    let fail = |why: String| {
        Frame::err(format!(
            "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - {why}"
        ))
    };
    let text = String::from_utf8_lossy(value);
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err(fail(
            "Wrong number of arguments in buffer limit configuration.".into(),
        ));
    }
    let mut pubsub = None;
    for group in words.chunks_exact(4) {
        let limits = Limits::parse(group[1], group[2], group[3]).map_err(|_| {
            fail(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration.".into(),
            )
        })?;
        let class = group[0].to_ascii_lowercase();
        let spelled = format!(
            "{} {} {}",
            limits.hard,
            limits.soft,
            limits.soft_for.as_secs()
        );
        match class.as_str() {
            "pubsub" => pubsub = Some(limits),
            "normal" if spelled == "0 0 0" => {}
            "normal" => {
                return Err(fail(
                    "forest bounds the output of subscribers only: the normal class stays 0 0 0"
                        .into(),
                ))
            }
            "slave" | "replica" if spelled == "268435456 67108864 60" => {}
            "slave" | "replica" => {
                return Err(fail(
                    "forest has no replicas: the replica class stays 256mb 64mb 60".into(),
                ))
            }
            _ => {
                return Err(fail(
                    "Invalid client class specified in buffer limit configuration.".into(),
                ))
            }
        }
    }
    Ok(pubsub)
}

/// The parameters and their values.
fn parameters(ctx: &Ctx<'_, '_>) -> Vec<(&'static str, String)> {
    let c = &ctx.shared.config;
    let port = ctx.shared.local_addr.lock().map_or(c.port, |a| a.port());
    let mut params = vec![
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
        (
            "client-output-buffer-limit",
            output_limits(ctx.shared.pubsub.limits()),
        ),
        ("forest-engine", ctx.shared.engine.clone()),
        ("forest-durability", c.durability.to_string()),
    ];
    let tuning = ctx.shared.tuning.lock();
    for (name, alias, _, _) in TUNING {
        let value = tuning
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(String::new, |(_, v)| v.clone());
        if !alias.is_empty() {
            params.push((*alias, value.clone()));
        }
        params.push((*name, value));
    }
    params
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
        if args.len() < 2 {
            return Err(wrong_arity("config|set"));
        }
        if !args.len().is_multiple_of(2) {
            return Err(super::syntax_error());
        }
        let params = parameters(ctx);
        for pair in args.chunks_exact(2) {
            let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
            let Some((_, current)) = params.iter().find(|(n, _)| *n == name) else {
                return Err(Frame::err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{name}'"
                )));
            };
            if matches!(
                name.as_str(),
                "busy-reply-threshold" | "lua-time-limit" | "client-output-buffer-limit"
            ) {
                continue;
            }
            if let Some((canonical, kind)) = tuning_entry(&name) {
                tuning_value(canonical, &name, kind, pair[1])?;
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
        let mut pubsub_limits = None;
        let mut tuned = Vec::new();
        for pair in args.chunks_exact(2) {
            let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
            if let Some((canonical, kind)) = tuning_entry(&name) {
                tuned.push((canonical, tuning_value(canonical, &name, kind, pair[1])?));
            }
            if name == "client-output-buffer-limit" {
                if let Some(limits) = parse_output_limits(pair[1])? {
                    pubsub_limits = Some(limits);
                }
            }
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
        if let Some(limits) = pubsub_limits {
            ctx.shared.pubsub.set_limits(limits);
        }
        let mut tuning = ctx.shared.tuning.lock();
        for (name, value) in tuned {
            if let Some(slot) = tuning.iter_mut().find(|(n, _)| *n == name) {
                slot.1 = value;
            }
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
        assert_eq!(pairs.len(), 4, "{pairs:?}");
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

    // Goal: Redis's encoding and memory tuning parameters, which mean nothing to forest, are
    // accepted by CONFIG SET (by name or Redis 7's alias, checked whole, Redis's units) and
    // read back by CONFIG GET, as client test suites expect. Method: GET defaults, SET some,
    // GET them back under both names; bad values are refused and change nothing.
    #[test]
    fn tuning_parameters_are_kept() {
        let mut h = Harness::new();
        let get = |h: &mut Harness, name: &str| match h.run(&["CONFIG", "GET", name]) {
            Frame::Map(pairs) => pairs,
            other => panic!("map expected: {other:?}"),
        };
        assert_eq!(
            get(&mut h, "hash-max-listpack-entries"),
            vec![(bulk("hash-max-listpack-entries"), bulk("128"))]
        );
        assert_eq!(get(&mut h, "*-max-*-entries").len(), 6);
        assert_eq!(
            h.run(&[
                "CONFIG",
                "SET",
                "hash-max-ziplist-entries",
                "512",
                "list-max-listpack-size",
                "-4",
                "stream-node-max-bytes",
                "8kb",
                "activerehashing",
                "NO"
            ]),
            Frame::ok()
        );
        assert_eq!(
            get(&mut h, "hash-max-*-entries"),
            vec![
                (bulk("hash-max-ziplist-entries"), bulk("512")),
                (bulk("hash-max-listpack-entries"), bulk("512")),
            ]
        );
        assert_eq!(get(&mut h, "list-max-listpack-size")[0].1, bulk("-4"));
        assert_eq!(get(&mut h, "stream-node-max-bytes")[0].1, bulk("8192"));
        assert_eq!(get(&mut h, "activerehashing")[0].1, bulk("no"));
        for (name, value) in [
            ("zset-max-listpack-entries", "many"),
            ("list-max-listpack-size", "2147483648"),
            ("maxmemory-samples", "-0"),
            ("hash-max-ziplist-value", "-6"),
            ("hash-max-listpack-value", "1xb"),
            ("lazyfree-lazy-expire", "maybe"),
        ] {
            let Frame::Error(text) = h.run(&["CONFIG", "SET", "hz", "20", name, value]) else {
                panic!("{name} {value}: an error expected");
            };
            assert!(
                text.contains(&format!("(possibly related to argument '{name}')")),
                "{name} {value}: {text}"
            );
        }
        assert_eq!(
            get(&mut h, "hz")[0].1,
            bulk("10"),
            "a refused SET changed nothing"
        );
        // Redis keeps hz within 1..=500, accepts -6 as a list size and "" as 0 bytes.
        let set = ["CONFIG", "SET", "hz", "0", "list-max-listpack-size", "-6"];
        assert_eq!(h.run(&set), Frame::ok());
        assert_eq!(get(&mut h, "hz")[0].1, bulk("1"));
        assert_eq!(h.run(&["CONFIG", "SET", "hz", "4096"]), Frame::ok());
        assert_eq!(get(&mut h, "hz")[0].1, bulk("500"));
        assert_eq!(
            h.run(&["CONFIG", "SET", "stream-node-max-bytes", ""]),
            Frame::ok()
        );
        assert_eq!(get(&mut h, "stream-node-max-bytes")[0].1, bulk("0"));
        assert_eq!(
            h.run(&["CONFIG", "SET", "hz", "1", "x"]),
            Frame::err("syntax error")
        );
    }

    // Goal: the pubsub output limits read and change as Redis's client-output-buffer-limit,
    // with Redis's units, whole-or-nothing; the classes forest does not bound refuse a change
    // and say why. Method: GET, SET pubsub (alone and beside the default classes), then bad
    // values, then GET again.
    #[test]
    fn client_output_buffer_limit() {
        let mut h = Harness::new();
        let get = |h: &mut Harness| h.run(&["CONFIG", "GET", "client-output-buffer-limit"]);
        let value = |text: &str| Frame::Map(vec![(bulk("client-output-buffer-limit"), bulk(text))]);
        assert_eq!(
            get(&mut h),
            value("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
        );
        let set = |h: &mut Harness, text: &str| {
            h.run(&["CONFIG", "SET", "client-output-buffer-limit", text])
        };
        assert_eq!(set(&mut h, "pubsub 1mb 512kb 10"), Frame::ok());
        assert_eq!(
            get(&mut h),
            value("normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 10")
        );
        assert_eq!(
            set(&mut h, "normal 0 0 0 replica 256mb 64mb 60 pubsub 0 0 0"),
            Frame::ok()
        );
        assert_eq!(
            get(&mut h),
            value("normal 0 0 0 slave 268435456 67108864 60 pubsub 0 0 0")
        );
        for bad in [
            "pubsub 1mb 1mb",
            "pubsub 1xb 1mb 60",
            "pubsub 1mb 1mb soon",
            "other 1 1 1",
            "normal 1mb 0 0",
            "replica 1mb 1mb 1",
            "pubsub 5mb 1mb 5 normal 1 1 1",
        ] {
            let Frame::Error(text) = set(&mut h, bad) else {
                panic!("{bad}: an error expected");
            };
            assert!(
                text.starts_with("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit')"),
                "{bad}: {text}"
            );
        }
        assert_eq!(
            get(&mut h),
            value("normal 0 0 0 slave 268435456 67108864 60 pubsub 0 0 0"),
            "a refused SET changed nothing"
        );
    }
}
