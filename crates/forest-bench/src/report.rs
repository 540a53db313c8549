//! Reports: the table on stdout, ratios to a baseline, JSON for machines, an SVG plot.
//!
//! Ratios are computed between rows of the same run, same workload and same thread count:
//! those are the figures the docs quote (DESIGN.md "Report ratios measured in one run").

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One measured configuration: an engine on a workload (phase) at a thread count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ResultRow {
    /// The engine's or peer's spec label (`lockbtree`, `lockbtree:order=16`, `skiplist`).
    pub engine: String,
    /// The workload name, with its phase (`masstree-rw1/put`) where it has several.
    pub workload: String,
    /// Key shape in force.
    pub key_shape: String,
    /// Distribution in force.
    pub dist: String,
    /// Value size in bytes.
    pub value_size: usize,
    /// Threads of the timed phase.
    pub threads: usize,
    /// Keys loaded (or put, for rw1).
    pub keys: u64,
    /// Operations of one timed run (the median run's count in duration mode).
    pub ops: u64,
    /// Throughput of each run, in operations per second.
    pub runs_ops_per_sec: Vec<f64>,
    /// The median of `runs_ops_per_sec`.
    pub median_ops_per_sec: f64,
    /// Net heap bytes the load phase allocated (None without the counting allocator).
    pub memory_bytes: Option<u64>,
    /// `memory_bytes` per loaded key.
    pub bytes_per_key: Option<f64>,
    /// The engine's own account of its memory (`stats().memory_bytes`; 0 for peers).
    pub engine_memory_bytes: u64,
    /// The engine's height after the run (`stats().height`; 0 where it does not apply).
    pub height: u32,
    /// Durability mode: "none" (the bare index), "sync", "group" or "periodic:MS" (a store).
    pub durability: String,
    /// Durable runs: log fsyncs per acknowledged write over the timed phases of all runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsyncs_per_ack: Option<f64>,
    /// Durable runs: median time of a write call until its acknowledgement (a batch call
    /// counts once), microseconds, pooled over all runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_p50_us: Option<f64>,
    /// Durable runs: the 99th percentile of the same, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_p99_us: Option<f64>,
    /// Engine counters (restarts, cas_failures, ...) per timed operation, over all runs.
    pub counters_per_op: BTreeMap<String, f64>,
}

impl ResultRow {
    /// The engine's label with its durability mode when not `none` (`lockbtree [sync]`): the
    /// name of the row in tables, ratios and plots.
    pub fn label(&self) -> String {
        if self.durability == "none" {
            self.engine.clone()
        } else {
            format!("{} [{}]", self.engine, self.durability)
        }
    }
}

/// The JSON document `--json` writes.
#[derive(Debug, Serialize, Deserialize)]
pub struct JsonReport {
    /// Every row, in run order.
    pub results: Vec<ResultRow>,
}

/// Writes the rows as `{"results": [...]}`.
pub fn write_json(path: &Path, rows: &[ResultRow]) -> anyhow::Result<()> {
    let report = JsonReport {
        results: rows.to_vec(),
    };
    let text = serde_json::to_string_pretty(&report).context("encoding the JSON report")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Operations per second as Mops/s: three decimals, six below 0.1 (durable runs do
/// thousands of ops per second, not millions).
fn mops(ops_per_sec: f64) -> String {
    let m = ops_per_sec / 1e6;
    if m < 0.1 {
        format!("{m:.6}")
    } else {
        format!("{m:.3}")
    }
}

/// The results table.
pub fn table(rows: &[ResultRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>3} {:<34} {:>10} {:>17} {:>10} {:>8}  counters/op",
        "workload", "thr", "engine", "Mops/s", "runs min..max", "memory MB", "B/key"
    );
    for r in rows {
        let (lo, hi) = r
            .runs_ops_per_sec
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        let lo = if lo.is_finite() { lo } else { 0.0 };
        let memory = r
            .memory_bytes
            .map_or("-".to_string(), |m| format!("{:.1}", m as f64 / 1e6));
        let per_key = r
            .bytes_per_key
            .map_or("-".to_string(), |b| format!("{b:.1}"));
        let mut counters: Vec<String> = Vec::new();
        if let (Some(f), Some(p50), Some(p99)) = (r.fsyncs_per_ack, r.ack_p50_us, r.ack_p99_us) {
            counters.push(format!(
                "fsyncs/ack={f:.4} ack_p50={p50:.1}us ack_p99={p99:.1}us"
            ));
        }
        counters.extend(
            r.counters_per_op
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| format!("{k}={v:.4}")),
        );
        let _ = writeln!(
            out,
            "{:<22} {:>3} {:<34} {:>10} {:>8}..{:<8} {:>10} {:>8}  {}",
            r.workload,
            r.threads,
            r.label(),
            mops(r.median_ops_per_sec),
            mops(lo),
            mops(hi),
            memory,
            per_key,
            counters.join(" ")
        );
    }
    out
}

/// Each row's throughput relative to the baseline of its workload and thread count.
///
/// The baseline is the row whose engine label or name equals `baseline`, when given;
/// otherwise the first row of a peer (in `peer_names`' order of appearance in the rows),
/// otherwise the group's first row.
pub fn ratios(
    rows: &[ResultRow],
    baseline: Option<&str>,
    is_peer: impl Fn(&str) -> bool,
) -> Vec<(String, usize, String, String, f64)> {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for r in rows {
        let key = (r.workload.clone(), r.threads);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let mut out = Vec::new();
    for (workload, threads) in groups {
        let group: Vec<&ResultRow> = rows
            .iter()
            .filter(|r| r.workload == workload && r.threads == threads)
            .collect();
        let base = match baseline {
            Some(b) => group
                .iter()
                .find(|r| r.label() == b || r.engine == b || r.engine.split(':').next() == Some(b)),
            None => group
                .iter()
                .find(|r| is_peer(&r.engine))
                .or_else(|| group.first()),
        };
        let Some(base) = base else { continue };
        for r in &group {
            let ratio = if base.median_ops_per_sec > 0.0 {
                r.median_ops_per_sec / base.median_ops_per_sec
            } else {
                0.0
            };
            out.push((workload.clone(), threads, r.label(), base.label(), ratio));
        }
    }
    out
}

/// The ratios as text.
pub fn ratio_table(ratios: &[(String, usize, String, String, f64)]) -> String {
    let mut out = String::new();
    let mut last: Option<(&str, usize)> = None;
    for (workload, threads, engine, base, ratio) in ratios {
        if last != Some((workload.as_str(), *threads)) {
            let _ = writeln!(out, "{workload} T={threads} (relative to {base}):");
            last = Some((workload.as_str(), *threads));
        }
        let _ = writeln!(out, "  {engine:<34} {ratio:>7.2}x");
    }
    out
}

/// Fill colors of the plot's engines, in order; they repeat past ten engines.
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A grouped bar chart: one group per workload and thread count, one bar per engine, height
/// the median throughput in Mops/s. Hand-written SVG 1.1 (no dependency).
pub fn svg(rows: &[ResultRow]) -> String {
    let mut engines: Vec<&str> = Vec::new();
    let mut groups: Vec<(&str, usize)> = Vec::new();
    let labels: Vec<String> = rows.iter().map(ResultRow::label).collect();
    for (r, label) in rows.iter().zip(&labels) {
        if !engines.contains(&label.as_str()) {
            engines.push(label);
        }
        if !groups.contains(&(r.workload.as_str(), r.threads)) {
            groups.push((&r.workload, r.threads));
        }
    }
    let bar_w = 14.0;
    let gap = 24.0;
    let (left, top, plot_h, bottom) = (70.0, 40.0, 320.0, 120.0);
    let group_w = engines.len().max(1) as f64 * bar_w + gap;
    let legend_h = 18.0 * engines.len() as f64;
    let width = (left + groups.len().max(1) as f64 * group_w + 20.0).max(520.0);
    let height = top + plot_h + bottom + legend_h;
    let max = rows
        .iter()
        .map(|r| r.median_ops_per_sec / 1e6)
        .fold(0.0f64, f64::max);
    let (step, y_max) = nice_axis(max);
    let y = |v: f64| top + plot_h - v / y_max * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="14">forest bench: median throughput (Mops/s) per engine and thread count</text>"#
    );
    let mut tick = 0.0;
    while tick <= y_max + 1e-9 {
        let ty = y(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{tick:.2}</text>"##,
            width - 10.0,
            left - 6.0,
            ty + 4.0
        );
        tick += step;
    }
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>"#,
        top + plot_h
    );
    for (g, (workload, threads)) in groups.iter().enumerate() {
        let gx = left + g as f64 * group_w + gap / 2.0;
        for (e, engine) in engines.iter().enumerate() {
            let Some(r) = rows.iter().zip(&labels).find_map(|(r, label)| {
                (r.workload == *workload && r.threads == *threads && label == engine).then_some(r)
            }) else {
                continue;
            };
            let v = r.median_ops_per_sec / 1e6;
            let bx = gx + e as f64 * bar_w;
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {} T={}: {v:.3} Mops/s</title></rect>"#,
                y(v),
                bar_w - 2.0,
                (top + plot_h - y(v)).max(0.0),
                PALETTE[e % PALETTE.len()],
                xml_escape(engine),
                xml_escape(workload),
                threads
            );
        }
        let lx = gx + engines.len() as f64 * bar_w / 2.0;
        let ly = top + plot_h + 14.0;
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-35 {lx:.1} {ly:.1})">{} T={threads}</text>"#,
            xml_escape(workload)
        );
    }
    for (e, engine) in engines.iter().enumerate() {
        let ly = top + plot_h + bottom + 18.0 * e as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{left}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 10.0,
            PALETTE[e % PALETTE.len()],
            left + 18.0,
            ly,
            xml_escape(engine)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A tick step of 1, 2 or 5 × 10^k giving about five ticks, and the axis top.
fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (0.2, 1.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    (step, (max / step).ceil() * step)
}

/// Writes the plot.
pub fn write_svg(path: &Path, rows: &[ResultRow]) -> anyhow::Result<()> {
    std::fs::write(path, svg(rows)).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(engine: &str, threads: usize, ops_per_sec: f64) -> ResultRow {
        ResultRow {
            engine: engine.to_string(),
            workload: "ycsb-c".to_string(),
            key_shape: "ycsb".to_string(),
            dist: "zipfian".to_string(),
            value_size: 100,
            threads,
            keys: 10,
            ops: 100,
            runs_ops_per_sec: vec![ops_per_sec],
            median_ops_per_sec: ops_per_sec,
            memory_bytes: Some(1000),
            bytes_per_key: Some(100.0),
            engine_memory_bytes: 0,
            height: 0,
            durability: "none".to_string(),
            fsyncs_per_ack: None,
            ack_p50_us: None,
            ack_p99_us: None,
            counters_per_op: BTreeMap::from([("restarts".to_string(), 0.5)]),
        }
    }

    #[test]
    fn ratios_use_the_first_peer_or_the_named_baseline() {
        // Goal: ratios are per workload and thread count, against the first peer by default
        // and against --baseline when given.
        let rows = vec![
            row("lockbtree", 1, 4e6),
            row("skiplist", 1, 2e6),
            row("lockbtree", 2, 6e6),
            row("skiplist", 2, 3e6),
        ];
        let r = ratios(&rows, None, |e| e == "skiplist");
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|x| x.3 == "skiplist"));
        assert!((r[0].4 - 2.0).abs() < 1e-9);
        let r = ratios(&rows, Some("lockbtree"), |e| e == "skiplist");
        assert!((r[1].4 - 0.5).abs() < 1e-9);
        assert!(ratio_table(&r).contains("relative to lockbtree"));
    }

    #[test]
    fn svg_is_well_formed_and_names_every_engine() {
        // Goal: the plot is an SVG document with a bar per row and a legend entry per engine.
        // Method: count elements and check the root and escaping.
        let rows = vec![row("lockbtree:order=16", 1, 4e6), row("a<b", 1, 2e6)];
        let text = svg(&rows);
        assert!(text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(text.trim_end().ends_with("</svg>"));
        assert!(text.contains("a&lt;b") && !text.contains("a<b"));
        assert_eq!(text.matches("<title>").count(), 2);
        assert_eq!(text.matches("<rect").count(), 1 + 2 + 2);
    }

    #[test]
    fn nice_axis_covers_the_maximum() {
        // Goal: the axis top is at least the largest value, with a 1-2-5 step.
        for max in [0.003, 0.9, 1.0, 7.3, 42.0, 999.0] {
            let (step, top) = nice_axis(max);
            assert!(top >= max && top <= max + step + 1e-9, "{max} {step} {top}");
        }
    }
}
