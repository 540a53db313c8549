//! The text of INFO: Redis's sections (server, clients, memory, persistence, stats,
//! keyspace) with the fields tools read, and a `forest` section with the store's and the
//! engine's counters (`Store::stats`, the papers' Table I figures).
//!
//! Memory: `used_memory` is the engine's own account of its structures
//! (`Index::stats().memory_bytes`: masstree's nodes and key-suffix/value blocks), not the
//! allocator's count Redis reports; it leaves out the allocator's size-class rounding, the
//! write-ahead log's buffers (a shard keeps up to two of 16 MiB after a burst), connection
//! buffers and memory freed but not returned. `used_memory_rss` (the process's resident
//! bytes, as Redis's field) counts all of it; docs/BENCHMARKS.md "Issue 19: memory per member"
//! measures both beside Redis.
//!
//! Choice: the server section reports `redis_version:7.2.0` beside `forest_version`, as
//! other Redis-compatible servers do, because client libraries gate features on it; forest
//! implements the subset of 7.2 that docs/PROTOCOL.md lists.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::server::Shared;

/// The Redis version reported to clients (see the module doc).
pub const REDIS_VERSION_COMPATIBLE: &str = "7.2.0";

/// Every section, in Redis's order.
pub const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "keyspace",
    "forest",
];

/// INFO's text for the sections named (all for none, `all`, `default` or `everything`);
/// unknown names add nothing.
pub fn render(shared: &Shared, names: &[String]) -> String {
    let all = names.is_empty()
        || names
            .iter()
            .any(|n| matches!(n.as_str(), "all" | "default" | "everything"));
    let stats = shared.store.stats();
    let mut out = String::new();
    for &section in SECTIONS {
        if !all && !names.iter().any(|n| n == section) {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        // Writing to a String cannot fail.
        let _ = write_section(&mut out, shared, &stats, section);
    }
    out
}

fn write_section(
    out: &mut String,
    shared: &Shared,
    stats: &forest_store::StoreStats,
    section: &str,
) -> std::fmt::Result {
    let config = &shared.config;
    let s = &shared.stats;
    let uptime = s.started.elapsed().as_secs();
    match section {
        "server" => {
            let port = shared.local_addr.lock().map_or(config.port, |a| a.port());
            write!(out, "# Server\r\n")?;
            write!(out, "redis_version:{REDIS_VERSION_COMPATIBLE}\r\n")?;
            write!(out, "forest_version:{}\r\n", env!("CARGO_PKG_VERSION"))?;
            write!(out, "redis_mode:standalone\r\n")?;
            write!(out, "os:{}\r\n", std::env::consts::OS)?;
            write!(out, "arch_bits:{}\r\n", usize::BITS)?;
            write!(out, "multiplexing_api:{}\r\n", config.io)?;
            write!(
                out,
                "forest_busy_poll_us:{}\r\n",
                config.busy_poll.as_micros()
            )?;
            write!(
                out,
                "forest_busy_poll_yield:{}\r\n",
                u8::from(config.busy_poll_yield)
            )?;
            write!(out, "process_id:{}\r\n", std::process::id())?;
            write!(out, "tcp_port:{port}\r\n")?;
            write!(out, "uptime_in_seconds:{uptime}\r\n")?;
            write!(out, "uptime_in_days:{}\r\n", uptime / 86_400)?;
        }
        "clients" => {
            write!(out, "# Clients\r\n")?;
            write!(out, "connected_clients:{}\r\n", shared.clients.lock().len())?;
            write!(out, "maxclients:{}\r\n", config.max_clients)?;
            write!(
                out,
                "blocked_clients:{}\r\n",
                shared.blocking.blocked_clients()
            )?;
        }
        "memory" => {
            let bytes = stats.index.memory_bytes;
            write!(out, "# Memory\r\n")?;
            write!(out, "used_memory:{bytes}\r\n")?;
            write!(
                out,
                "used_memory_human:{:.2}M\r\n",
                bytes as f64 / (1024.0 * 1024.0)
            )?;
            // Only where the OS tells it (/proc on Linux): no guessed figure elsewhere.
            if let Some(rss) = rss_bytes() {
                write!(out, "used_memory_rss:{rss}\r\n")?;
                write!(
                    out,
                    "used_memory_rss_human:{:.2}M\r\n",
                    rss as f64 / (1024.0 * 1024.0)
                )?;
            }
            match &stats.memory {
                // bwtree on its LSS (`--memory-budget`): pages past the budget are evicted.
                Some(m) => {
                    write!(out, "maxmemory:{}\r\n", m.budget_bytes)?;
                    write!(out, "maxmemory_policy:evict-to-lss\r\n")?;
                    write!(out, "forest_resident_bytes:{}\r\n", m.resident_bytes)?;
                    write!(
                        out,
                        "forest_resident_peak_bytes:{}\r\n",
                        m.resident_peak_bytes
                    )?;
                    write!(out, "forest_memory_budget_bytes:{}\r\n", m.budget_bytes)?;
                    write!(out, "forest_evictions:{}\r\n", m.evictions)?;
                    write!(out, "forest_loads:{}\r\n", m.loads)?;
                    write!(out, "forest_lss_bytes_written:{}\r\n", m.lss_bytes_written)?;
                    write!(out, "forest_lss_live_bytes:{}\r\n", m.lss_live_bytes)?;
                    write!(out, "forest_lss_total_bytes:{}\r\n", m.lss_total_bytes)?;
                    write!(
                        out,
                        "forest_lss_segments_cleaned:{}\r\n",
                        m.lss_segments_cleaned
                    )?;
                    write!(
                        out,
                        "forest_lss_bytes_relocated:{}\r\n",
                        m.lss_bytes_relocated
                    )?;
                    write!(out, "forest_esl:{}\r\n", m.esl)?;
                    if let Some(e) = &m.evictor_error {
                        write!(
                            out,
                            "forest_evictor_error:{}\r\n",
                            e.replace(['\r', '\n'], " ")
                        )?;
                    }
                }
                None => {
                    write!(out, "maxmemory:0\r\n")?;
                    write!(out, "maxmemory_policy:noeviction\r\n")?;
                }
            }
        }
        "persistence" => {
            let r = &stats.recovery;
            write!(out, "# Persistence\r\n")?;
            write!(out, "loading:0\r\n")?;
            write!(
                out,
                "rdb_bgsave_in_progress:{}\r\n",
                u8::from(s.bgsave_in_progress.load(Ordering::Relaxed))
            )?;
            write!(
                out,
                "rdb_last_save_time:{}\r\n",
                s.last_save_unix.load(Ordering::Relaxed)
            )?;
            write!(
                out,
                "rdb_last_bgsave_status:{}\r\n",
                if s.last_bgsave_ok.load(Ordering::Relaxed) {
                    "ok"
                } else {
                    "err"
                }
            )?;
            write!(out, "aof_enabled:1\r\n")?;
            write!(out, "forest_durability:{}\r\n", stats.durability)?;
            write!(out, "forest_shards:{}\r\n", stats.shard_count)?;
            write!(out, "forest_lsn_next:{}\r\n", stats.lsn_next)?;
            write!(out, "forest_durable_lsn:{}\r\n", stats.durable_lsn)?;
            write!(out, "forest_fsyncs:{}\r\n", stats.fsync_count)?;
            write!(out, "forest_checkpoints:{}\r\n", stats.checkpoint_count)?;
            write!(out, "forest_recovered_keys:{}\r\n", r.keys_recovered)?;
            write!(out, "forest_recovered_records:{}\r\n", r.records_replayed)?;
            write!(out, "forest_recovery_ms:{}\r\n", r.elapsed.as_millis())?;
        }
        "stats" => {
            write!(out, "# Stats\r\n")?;
            write!(
                out,
                "total_connections_received:{}\r\n",
                s.connections_received.load(Ordering::Relaxed)
            )?;
            write!(
                out,
                "total_commands_processed:{}\r\n",
                s.commands_processed.load(Ordering::Relaxed)
            )?;
            write!(
                out,
                "rejected_connections:{}\r\n",
                s.rejected_connections.load(Ordering::Relaxed)
            )?;
            write!(out, "expired_keys:{}\r\n", shared.expires.expired_count())?;
            write!(out, "evicted_keys:0\r\n")?;
        }
        "keyspace" => {
            write!(out, "# Keyspace\r\n")?;
            let keys = crate::cmd::key_count(shared);
            if keys > 0 {
                let e = &shared.expires;
                let expires = (e.count() - e.due_count()).max(0);
                let avg_ttl = e.avg_ttl_ms();
                write!(
                    out,
                    "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
                )?;
            }
        }
        "forest" => {
            let i = &stats.index;
            write!(out, "# Forest\r\n")?;
            write!(out, "engine:{}\r\n", stats.engine)?;
            // Store entries, less the server's own (its key layout entry), as DBSIZE.
            let own = shared.collections.server_entries().max(0) as u64;
            write!(out, "keys:{}\r\n", i.key_count.saturating_sub(own))?;
            write!(out, "collections:{}\r\n", shared.collections.live_count())?;
            write!(
                out,
                "collection_entries:{}\r\n",
                shared.collections.reserved_count()
            )?;
            write!(out, "memory_bytes:{}\r\n", i.memory_bytes)?;
            write!(out, "height:{}\r\n", i.height)?;
            write!(out, "inner_nodes:{}\r\n", i.inner_node_count)?;
            write!(out, "leaf_nodes:{}\r\n", i.leaf_node_count)?;
            let temporal = shared.store.retention().ok();
            if let Some(threshold) = temporal {
                // A temporal store's ASOF.RETAIN threshold (0: none).
                write!(out, "asof_retention:{threshold}\r\n")?;
            }
            for (name, value) in &i.counters {
                // The engine's own count of the threshold is the line above (review
                // rev-retain F6: INFO printed T twice).
                if temporal.is_some() && *name == "retention" {
                    continue;
                }
                write!(out, "{name}:{value}\r\n")?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The process's resident bytes (`VmRSS` of /proc/self/status), where the OS has that file.
fn rss_bytes() -> Option<u64> {
    vm_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// `VmRSS:` of a /proc/PID/status text, in bytes (the file gives kB).
fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_reads_the_status_line_in_bytes() {
        let status = "Name:\tforest\nVmPeak:\t  900 kB\nVmRSS:\t    7552 kB\nRssAnon:\t 1164 kB\n";
        assert_eq!(vm_rss(status), Some(7552 * 1024));
        assert_eq!(vm_rss("Name:\tforest\n"), None);
        assert_eq!(
            vm_rss("VmRSS:\t12 MB\n"),
            None,
            "a unit other than kB is not guessed"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn rss_of_this_process_is_known_and_nonzero() {
        assert!(rss_bytes().is_some_and(|b| b > 0));
    }
}
