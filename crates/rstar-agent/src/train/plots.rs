//! Plots of a run's RL metrics over steps: `runs/<name>/plots/*.svg`, one chart per metric
//! group, with the curriculum's stage boundaries as dashed vertical lines (drawn with
//! [`crate::analysis::plot::line_chart_svg`]). `rstar train plot RUN_DIR` redraws them.
//!
//! The x axis runs from 0.5 to `last step + 0.5`; the boundary after the last step of a stage
//! `s` (the step whose decision was `advance …`) is at `s + 0.5`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::analysis::plot::{LineChart, Series, VLine, line_chart_svg};
use crate::error::AgentError;

/// A chart: file stem, title, y label, and the series as (label, JSON path in a
/// `metrics.jsonl` line).
type ChartSpec = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The charts.
const CHARTS: &[ChartSpec] = &[
    (
        "reward",
        "reward (accuracy) per RL step",
        "mean reward",
        &[("all rollouts", "all.accuracy"), ("kept", "kept.accuracy")],
    ),
    (
        "tool_errors",
        "tool error rate per RL step",
        "share of tool calls",
        &[
            ("all traces", "all.tool_error_rate"),
            ("successful traces", "all.tool_error_rate_success"),
            ("kept successful traces", "kept.tool_error_rate_success"),
        ],
    ),
    (
        "response_length",
        "response length per RL step",
        "tokens",
        &[
            ("all rollouts", "all.response_len"),
            ("kept", "kept.response_len"),
        ],
    ),
    (
        "truncation",
        "truncated responses per RL step",
        "share",
        &[("all rollouts", "all.truncation_rate")],
    ),
    (
        "clip_fraction",
        "clipped ratio fraction per RL step",
        "fraction of tokens",
        &[("clip fraction", "clip_frac")],
    ),
    (
        "entropy",
        "policy entropy per RL step",
        "nats per token",
        &[("entropy", "entropy")],
    ),
    (
        "step_time",
        "RL step time split",
        "seconds",
        &[
            ("rollout", "time_rollout"),
            ("tools", "time_tools"),
            ("update", "time_update"),
        ],
    ),
];

/// Reads a number at a dotted path of a JSON value (`NaN` when missing).
fn at(v: &Value, path: &str) -> f64 {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// Parses `metrics.jsonl` text (one `StepRecord` a line); errors name the file and line.
fn parse(text: &str, path: &Path) -> Result<Vec<Value>, AgentError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Value>(l).map_err(|e| AgentError::Dataset {
                path: path.to_path_buf(),
                line: i + 1,
                message: e.to_string(),
            })
        })
        .collect()
}

/// The charts of the RL metrics in `records` (parsed `metrics.jsonl` lines).
pub fn charts(records: &[Value]) -> Vec<(&'static str, LineChart)> {
    let step = |r: &Value| at(r, "step");
    let last = records.iter().map(step).fold(0.0f64, f64::max);
    let vlines: Vec<VLine> = records
        .iter()
        .filter(|r| {
            r.get("decision")
                .and_then(Value::as_str)
                .is_some_and(|d| d.starts_with("advance"))
        })
        .map(|r| VLine {
            x: step(r) + 0.5,
            label: format!(
                "end of `{}`",
                r.get("stage_name").and_then(Value::as_str).unwrap_or("?")
            ),
        })
        .collect();
    CHARTS
        .iter()
        .map(|&(stem, title, y_label, series)| {
            let chart = LineChart {
                title: title.to_string(),
                x_label: "RL step".into(),
                y_label: y_label.to_string(),
                x_range: (0.5, last.max(1.0) + 0.5),
                series: series
                    .iter()
                    .map(|&(name, path)| Series {
                        name: name.to_string(),
                        points: records.iter().map(|r| (step(r), at(r, path))).collect(),
                    })
                    .collect(),
                vlines: vlines.clone(),
            };
            (stem, chart)
        })
        .collect()
}

/// Draws `run/metrics.jsonl` into `run/plots/<chart>.svg` and returns the files written.
///
/// # Errors
/// IO errors naming the file, [`AgentError::Dataset`] naming the line of a malformed record.
pub fn draw(run: &Path) -> Result<Vec<PathBuf>, AgentError> {
    let path = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|source| AgentError::Io {
        path: path.clone(),
        source,
    })?;
    let records = parse(&text, &path)?;
    let dir = run.join("plots");
    std::fs::create_dir_all(&dir).map_err(|source| AgentError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut written = Vec::new();
    for (stem, chart) in charts(&records) {
        let file = dir.join(format!("{stem}.svg"));
        std::fs::write(&file, line_chart_svg(&chart)).map_err(|source| AgentError::Io {
            path: file.clone(),
            source,
        })?;
        written.push(file);
    }
    Ok(written)
}
