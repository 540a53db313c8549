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
    /// Rows of workloads with scans: the median over runs of the records the scans visited
    /// per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_per_sec: Option<f64>,
    /// Rows of workloads with scans: records per scan, `10` (`--scan-len`) or `1-100` (the
    /// workload's uniform lengths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_len: Option<String>,
    /// Rows of workloads with scans: `asc` or `desc` (`--scan-order`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_order: Option<String>,
    /// Net heap bytes the load phase allocated (None without the counting allocator), or the
    /// engine's own account after the load where that is larger (an engine with a heap of its
    /// own, as bztree's mapped node heap, allocates outside the counting allocator).
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
        "{:<22} {:>3} {:<34} {:>10} {:>17} {:>9} {:>10} {:>8}  counters/op",
        "workload", "thr", "engine", "Mops/s", "runs min..max", "Mrec/s", "memory MB", "B/key"
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
        let records = r
            .records_per_sec
            .map_or("-".to_string(), |v| format!("{:.3}", v / 1e6));
        let _ = writeln!(
            out,
            "{:<22} {:>3} {:<34} {:>10} {:>8}..{:<8} {:>9} {:>10} {:>8}  {}",
            r.workload,
            r.threads,
            r.label(),
            mops(r.median_ops_per_sec),
            mops(lo),
            mops(hi),
            records,
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

/// Estimated width of `text` in a sans-serif font at `size` px. SVG leaves the font to the
/// viewer, so the layout cannot measure text; these per-character widths (in ems) are those
/// of DejaVu Sans and Liberation Sans rounded up, so labels get at least the room they need.
fn text_width(text: &str, size: f64) -> f64 {
    let ems: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | ' ' => 0.32,
            'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '-' | '/' => 0.42,
            'm' | 'w' | 'M' | 'W' => 0.92,
            'A'..='Z' | '=' | '<' | '>' => 0.72,
            _ => 0.62,
        })
        .sum();
    ems * size
}

/// The plot's geometry, in px. Bars fill the plot's width: a group (one workload at one thread
/// count) gets an equal share of it, its bars at most [`BAR_WIDTH_MAX`] wide each, centered.
const PLOT_WIDTH_MIN: f64 = 560.0;
/// Below this a bar is a hairline; the plot widens instead.
const BAR_WIDTH_MIN: f64 = 10.0;
/// Above this a bar reads as a block, not a bar: the group is centered instead.
const BAR_WIDTH_MAX: f64 = 56.0;
/// Space between two groups' bars.
const GROUP_GAP: f64 = 28.0;
const PLOT_HEIGHT: f64 = 320.0;
const MARGIN: f64 = 16.0;
const TITLE_SIZE: f64 = 16.0;
const LABEL_SIZE: f64 = 12.0;
const VALUE_SIZE: f64 = 10.0;
/// Slant of group labels too wide to stand level under their group, degrees.
const LABEL_SLANT_DEGREES: f64 = 35.0;
const LEGEND_ROW_HEIGHT: f64 = 20.0;
const LEGEND_SWATCH: f64 = 12.0;

/// A grouped bar chart: one group per workload and thread count, one bar per engine, height
/// the median throughput in Mops/s, the value above each bar where it fits, and a legend of
/// engines below. Hand-written SVG 1.1 (no dependency; text is left to the viewer's fonts).
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
    let group_names: Vec<String> = groups
        .iter()
        .map(|(workload, threads)| format!("{workload} T={threads}"))
        .collect();
    let engine_count = engines.len().max(1) as f64;
    let group_count = groups.len().max(1) as f64;
    let title = "forest bench: median throughput per engine";
    let subtitle = "Mops/s; one group per workload and thread count";

    // Horizontal layout: the y axis' labels, then the plot, wide enough for the bars at their
    // minimum width and for the title.
    let max = rows
        .iter()
        .map(|r| r.median_ops_per_sec / 1e6)
        .fold(0.0f64, f64::max);
    let (step, y_max) = nice_axis(max);
    let tick_texts: Vec<String> = ticks(step, y_max).map(|t| format_tick(t, step)).collect();
    let tick_w = tick_texts
        .iter()
        .map(|t| text_width(t, LABEL_SIZE))
        .fold(0.0, f64::max);
    let axis_w = MARGIN + LABEL_SIZE + 8.0 + tick_w + 8.0;
    let titles_w = text_width(title, TITLE_SIZE).max(text_width(subtitle, LABEL_SIZE));
    let plot_w = (group_count * (engine_count * BAR_WIDTH_MIN + GROUP_GAP))
        .max(PLOT_WIDTH_MIN)
        .max(titles_w + MARGIN - axis_w);
    let group_w = plot_w / group_count;
    let bar_w = ((group_w - GROUP_GAP) / engine_count).clamp(BAR_WIDTH_MIN, BAR_WIDTH_MAX);
    // Group labels stand level under their group, or slant down to the left when one is
    // wider than its group; the first group's slanted label must not leave the picture.
    let label_w = group_names
        .iter()
        .map(|n| text_width(n, LABEL_SIZE))
        .fold(0.0, f64::max);
    let slanted = label_w > group_w - 6.0;
    let slant = LABEL_SLANT_DEGREES.to_radians();
    let left = if slanted {
        axis_w.max(MARGIN + label_w * slant.cos() - group_w / 2.0)
    } else {
        axis_w
    };
    let width = left + plot_w + MARGIN;

    // Vertical layout: titles, plot, group labels, legend in as many columns as fit.
    let top = MARGIN + TITLE_SIZE + 6.0 + LABEL_SIZE + 14.0;
    let labels_h = if slanted {
        label_w * slant.sin() + LABEL_SIZE * slant.cos() + 10.0
    } else {
        LABEL_SIZE + 12.0
    };
    let legend_item_w = engines
        .iter()
        .map(|e| LEGEND_SWATCH + 6.0 + text_width(e, LABEL_SIZE) + 20.0)
        .fold(0.0, f64::max);
    let legend_columns =
        (((width - 2.0 * MARGIN) / legend_item_w).floor() as usize).clamp(1, engines.len().max(1));
    let legend_rows = engines.len().div_ceil(legend_columns);
    let legend_top = top + PLOT_HEIGHT + labels_h + 8.0;
    let height = legend_top + legend_rows as f64 * LEGEND_ROW_HEIGHT + MARGIN;
    let y = |v: f64| top + PLOT_HEIGHT - v / y_max * PLOT_HEIGHT;
    let plot_right = left + plot_w;
    let plot_bottom = top + PLOT_HEIGHT;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif" font-size="{LABEL_SIZE}">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="{:.1}" font-size="{TITLE_SIZE}" font-weight="bold">{title}</text>"#,
        MARGIN + TITLE_SIZE
    );
    let _ = writeln!(
        s,
        r##"<text x="{MARGIN}" y="{:.1}" fill="#555">{subtitle}</text>"##,
        MARGIN + TITLE_SIZE + 6.0 + LABEL_SIZE
    );
    // Grid and y axis.
    for (tick, text) in ticks(step, y_max).zip(&tick_texts) {
        let ty = y(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{left:.1}" y1="{ty:.1}" x2="{plot_right:.1}" y2="{ty:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{text}</text>"##,
            left - 6.0,
            ty + LABEL_SIZE * 0.35
        );
    }
    let axis_label_x = left - tick_w - 16.0;
    let axis_label_y = top + PLOT_HEIGHT / 2.0;
    let _ = writeln!(
        s,
        r#"<text x="{axis_label_x:.1}" y="{axis_label_y:.1}" text-anchor="middle" transform="rotate(-90 {axis_label_x:.1} {axis_label_y:.1})">Mops/s</text>"#
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left:.1}" y1="{top:.1}" x2="{left:.1}" y2="{plot_bottom:.1}" stroke="black"/><line x1="{left:.1}" y1="{plot_bottom:.1}" x2="{plot_right:.1}" y2="{plot_bottom:.1}" stroke="black"/>"#
    );
    // Bars, values and group labels.
    let value_w = rows
        .iter()
        .map(|r| text_width(&format_value(r.median_ops_per_sec / 1e6), VALUE_SIZE))
        .fold(0.0, f64::max);
    let value_fits = value_w <= bar_w + 2.0;
    for (g, ((workload, threads), name)) in groups.iter().zip(&group_names).enumerate() {
        let center = left + (g as f64 + 0.5) * group_w;
        let first_x = center - engine_count * bar_w / 2.0;
        for (e, engine) in engines.iter().enumerate() {
            let Some(r) = rows.iter().zip(&labels).find_map(|(r, label)| {
                (r.workload == *workload && r.threads == *threads && label == engine).then_some(r)
            }) else {
                continue;
            };
            let v = r.median_ops_per_sec / 1e6;
            let bx = first_x + e as f64 * bar_w;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {} T={}: {v:.3} Mops/s</title></rect>"#,
                bx + 1.0,
                y(v),
                bar_w - 2.0,
                (plot_bottom - y(v)).max(0.0),
                PALETTE[e % PALETTE.len()],
                xml_escape(engine),
                xml_escape(workload),
                threads
            );
            if value_fits {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="{VALUE_SIZE}" text-anchor="middle">{}</text>"#,
                    bx + bar_w / 2.0,
                    y(v) - 3.0,
                    format_value(v)
                );
            }
        }
        let ly = plot_bottom + LABEL_SIZE + 6.0;
        if slanted {
            let _ = writeln!(
                s,
                r#"<text x="{center:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-{LABEL_SLANT_DEGREES} {center:.1} {ly:.1})">{}</text>"#,
                xml_escape(name)
            );
        } else {
            let _ = writeln!(
                s,
                r#"<text x="{center:.1}" y="{ly:.1}" text-anchor="middle">{}</text>"#,
                xml_escape(name)
            );
        }
    }
    // Legend.
    for (e, engine) in engines.iter().enumerate() {
        let lx = MARGIN + (e % legend_columns) as f64 * legend_item_w;
        let ly = legend_top + (e / legend_columns) as f64 * LEGEND_ROW_HEIGHT;
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{ly:.1}" width="{LEGEND_SWATCH}" height="{LEGEND_SWATCH}" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            PALETTE[e % PALETTE.len()],
            lx + LEGEND_SWATCH + 6.0,
            ly + LEGEND_SWATCH - 1.0,
            xml_escape(engine)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The axis ticks 0, `step`, ... up to `y_max`.
fn ticks(step: f64, y_max: f64) -> impl Iterator<Item = f64> {
    let count = (y_max / step).round() as usize;
    (0..=count).map(move |i| i as f64 * step)
}

/// A tick's text with as many decimals as the step needs (2.5 → "7.5", 0.02 → "0.04").
fn format_tick(tick: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    format!("{tick:.decimals$}")
}

/// A bar's value: three significant figures at most, as the table's Mops/s.
fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// A tick step of 1, 2, 2.5 or 5 × 10^k giving five or six ticks, and the axis top.
fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (0.2, 1.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
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
            records_per_sec: None,
            scan_len: None,
            scan_order: None,
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

    /// The value of attribute `name` in `tag` (a line of the SVG).
    fn attr(tag: &str, name: &str) -> f64 {
        let start = tag.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3;
        let len = tag[start..].find('"').expect("closing quote");
        tag[start..start + len].parse().expect("a number")
    }

    #[test]
    fn svg_layout_fits_the_title_and_spreads_the_bars() {
        // Goal: the plot's old defects stay fixed: with a few rows the title was clipped and
        // the bars sat at the left of a mostly empty plot. Method: for 2 rows (one group) and
        // 12 rows (6 groups), read the picture's width and the bars' boxes back from the SVG.
        let two = vec![row("masstree", 2, 5e6), row("lockbtree", 2, 4e6)];
        let mut twelve = Vec::new();
        for workload in ["ycsb-a", "ycsb-c", "bwtree-readonly"] {
            for threads in [1, 2] {
                for (engine, ops) in [("masstree", 3e6), ("lockbtree:order=16", 2e6)] {
                    let mut r = row(engine, threads, ops * threads as f64);
                    r.workload = workload.to_string();
                    twelve.push(r);
                }
            }
        }
        for rows in [two, twelve] {
            let text = svg(&rows);
            let width = attr(text.lines().next().expect("root"), "width");
            let title = "forest bench: median throughput per engine";
            assert!(
                width >= text_width(title, TITLE_SIZE) + 2.0 * MARGIN,
                "title clipped"
            );
            let bars: Vec<(f64, f64)> = text
                .lines()
                .filter(|l| l.contains("<title>"))
                .map(|l| (attr(l, "x"), attr(l, "x") + attr(l, "width")))
                .collect();
            assert_eq!(bars.len(), rows.len());
            let lo = bars.iter().map(|b| b.0).fold(f64::INFINITY, f64::min);
            let hi = bars.iter().map(|b| b.1).fold(0.0, f64::max);
            assert!(lo > 0.0 && hi < width, "bars inside the picture");
            if rows.len() == 2 {
                let middle = (lo + hi) / 2.0;
                assert!(
                    middle > width * 0.4 && middle < width * 0.7,
                    "one group centered"
                );
            } else {
                assert!(hi - lo > width * 0.7, "groups spread over the width");
            }
        }
    }

    #[test]
    fn tick_texts_show_the_step() {
        // Goal: ticks of a 2.5 step keep their decimal; whole steps print none.
        assert_eq!(format_tick(7.5, 2.5), "7.5");
        assert_eq!(format_tick(0.04, 0.02), "0.04");
        assert_eq!(format_tick(10.0, 5.0), "10");
    }

    #[test]
    fn nice_axis_covers_the_maximum() {
        // Goal: the axis top is at least the largest value, with a 1-2-2.5-5 step.
        for max in [0.003, 0.9, 1.0, 7.3, 42.0, 999.0] {
            let (step, top) = nice_axis(max);
            assert!(top >= max && top <= max + step + 1e-9, "{max} {step} {top}");
        }
    }
}
