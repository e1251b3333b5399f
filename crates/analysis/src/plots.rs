//! Plots of a run's RL metrics over steps: `runs/<name>/plots/*.svg`, one chart per metric
//! group, with the curriculum's stage boundaries as dashed vertical lines (drawn with
//! [`crate::plot::line_chart_svg`]). `rstar train plot RUN_DIR` redraws them.
//!
//! The x axis runs from 0.5 to `last step + 0.5`, with ticks at round step numbers; the
//! boundary after the last step of a stage `s` (the step whose decision was `advance …`) is at
//! `s + 0.5`.
//!
//! The step-time chart stacks wall-clock seconds only, so that its top edge is the step's
//! wall-clock time ([`StepTiming`] says which of `metrics.jsonl`'s timings those are).
use rstar_episode::{IoError, LineError};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Error;
use crate::plot::{LineChart, Series, VLine, line_chart_svg};

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
];

/// Reads a number at a dotted path of a JSON value (`NaN` when missing).
fn at(v: &Value, path: &str) -> f64 {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// How a run's step timings relate, from its `rl.rollout_driver` (see `rstar_train::rl`).
///
/// Every `metrics.jsonl` line records `time_rollout`, `time_tools`, `time_update` and
/// `time_step` (the whole step, 0 in files written before it was recorded). With the lock-step
/// driver generation and tool calls take turns, so `time_rollout` (generating) and `time_tools`
/// (waiting on a round's tool batch) are both wall-clock and add up. With the scheduled driver
/// they overlap: `time_rollout` is the wall-clock time of the whole dispatch, tools included,
/// and `time_tools` sums the durations of concurrent calls (it can exceed the step's wall-clock
/// time many times over), so it is not a part of the step and the chart leaves it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepTiming {
    /// `rl.rollout_driver = "lockstep"` (the default, and what configs without the field ran).
    #[default]
    Lockstep,
    /// `rl.rollout_driver = "scheduled"`.
    Scheduled,
}

impl StepTiming {
    /// The timing of a run from its `config.json` (lock-step when it is absent or says
    /// nothing).
    pub fn of_config(config: Option<&Value>) -> Self {
        match config
            .and_then(|c| c.pointer("/rl/rollout_driver"))
            .and_then(Value::as_str)
        {
            Some("scheduled") => StepTiming::Scheduled,
            _ => StepTiming::Lockstep,
        }
    }

    /// The step-time chart: wall-clock seconds per step, stacked so that the top edge is the
    /// step's wall-clock time (`time_step`; the sum of the parts in files without it).
    pub fn chart(self, records: &[Value], last: f64, vlines: &[VLine]) -> LineChart {
        let per_step = |f: &dyn Fn(&Value) -> f64, name: &str| Series {
            name: name.to_string(),
            points: records.iter().map(|r| (at(r, "step"), f(r))).collect(),
        };
        let num = |r: &Value, path: &str| {
            let x = at(r, path);
            if x.is_finite() { x } else { 0.0 }
        };
        let (title, mut series, parts): (&str, Vec<Series>, &[&str]) = match self {
            StepTiming::Lockstep => (
                "RL step wall-clock time: generation, waiting on tools, update",
                vec![
                    per_step(&|r| num(r, "time_rollout"), "generation"),
                    per_step(&|r| num(r, "time_tools"), "waiting on tools"),
                    per_step(&|r| num(r, "time_update"), "update"),
                ],
                &["time_rollout", "time_tools", "time_update"],
            ),
            StepTiming::Scheduled => (
                "RL step wall-clock time: rollout (generation and tool calls overlapped), update",
                vec![
                    per_step(&|r| num(r, "time_rollout"), "rollout (tools overlapped)"),
                    per_step(&|r| num(r, "time_update"), "update"),
                ],
                &["time_rollout", "time_update"],
            ),
        };
        // What the step spent outside the parts (bookkeeping, metrics, checkpoints), when the
        // file records the step's own time.
        if records.iter().any(|r| num(r, "time_step") > 0.0) {
            series.push(per_step(
                &|r| {
                    let parts: f64 = parts.iter().map(|p| num(r, p)).sum();
                    (num(r, "time_step") - parts).max(0.0)
                },
                "other (logging, checkpoints)",
            ));
        }
        LineChart {
            series,
            vlines: vlines.to_vec(),
            stacked: true,
            ..LineChart::over_steps(title, "RL step", "wall-clock seconds", last)
        }
    }
}

/// Parses `metrics.jsonl` text (one `StepRecord` a line); errors name the file and line.
fn parse(text: &str, path: &Path) -> Result<Vec<Value>, Error> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Value>(l)
                .map_err(|e| Error::Line(LineError::new(path.to_path_buf(), i + 1, e.to_string())))
        })
        .collect()
}

/// The charts of the RL metrics in `records` (parsed `metrics.jsonl` lines), the step-time
/// chart last.
pub fn charts(records: &[Value], timing: StepTiming) -> Vec<(&'static str, LineChart)> {
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
    let last = last.max(1.0);
    let mut out: Vec<(&'static str, LineChart)> = CHARTS
        .iter()
        .map(|&(stem, title, y_label, series)| {
            let chart = LineChart {
                series: series
                    .iter()
                    .map(|&(name, path)| Series {
                        name: name.to_string(),
                        points: records.iter().map(|r| (step(r), at(r, path))).collect(),
                    })
                    .collect(),
                vlines: vlines.clone(),
                ..LineChart::over_steps(title, "RL step", y_label, last)
            };
            (stem, chart)
        })
        .collect();
    // The rollout correction's charts, for runs that record it (`rl.grpo.rollout_correction`).
    if records.iter().any(|r| r.get("rollout_corr").is_some()) {
        for (stem, title, y_label, series) in CORRECTION_CHARTS {
            let chart = LineChart {
                series: series
                    .iter()
                    .map(|&(name, key)| Series {
                        name: name.to_string(),
                        points: records
                            .iter()
                            .map(|r| {
                                let v = r
                                    .get("rollout_corr")
                                    .and_then(|m| m.get(key))
                                    .and_then(Value::as_f64)
                                    .unwrap_or(f64::NAN);
                                (step(r), v)
                            })
                            .collect(),
                    })
                    .collect(),
                vlines: vlines.clone(),
                ..LineChart::over_steps(title, "RL step", y_label, last)
            };
            out.push((stem, chart));
        }
    }
    out.push(("step_time", timing.chart(records, last, &vlines)));
    out
}

/// The charts of the rollout correction's metrics (verl's names, in `rollout_corr`).
const CORRECTION_CHARTS: &[ChartSpec] = &[
    (
        "rollout_is",
        "importance weights of the rollout correction per RL step",
        "trainer / engine probability",
        &[
            ("mean", "rollout_corr/rollout_is_mean"),
            ("max", "rollout_corr/rollout_is_max"),
            ("min", "rollout_corr/rollout_is_min"),
        ],
    ),
    (
        "rollout_mismatch",
        "engine–trainer mismatch per RL step",
        "nats per token",
        &[
            ("KL (k1)", "rollout_corr/kl"),
            ("KL (k3)", "rollout_corr/k3_kl"),
        ],
    ),
];

/// Draws `run/metrics.jsonl` into `run/plots/<chart>.svg` and returns the files written; the
/// step timing is read from `run/config.json` ([`StepTiming::of_config`]).
///
/// # Errors
/// IO errors naming the file, [`Error::Line`] naming the line of a malformed record.
pub fn draw(run: &Path) -> Result<Vec<PathBuf>, Error> {
    let path = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|source| Error::Io(IoError::new(path.clone(), source)))?;
    let records = parse(&text, &path)?;
    // The config only says how to read the timings: a missing or unreadable one is the default.
    let config = std::fs::read_to_string(run.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    let timing = StepTiming::of_config(config.as_ref());
    let dir = run.join("plots");
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io(IoError::new(dir.clone(), source)))?;
    let mut written = Vec::new();
    for (stem, chart) in charts(&records, timing) {
        let file = dir.join(format!("{stem}.svg"));
        std::fs::write(&file, line_chart_svg(&chart))
            .map_err(|source| Error::Io(IoError::new(file.clone(), source)))?;
        written.push(file);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, rollout: f64, tools: f64, update: f64, total: f64) -> Value {
        serde_json::json!({
            "step": step,
            "stage_name": "short",
            "decision": if step == 2 { "advance to `long`" } else { "stay" },
            "time_rollout": rollout,
            "time_tools": tools,
            "time_update": update,
            "time_step": total,
        })
    }

    #[test]
    fn issue_62_the_rollout_correction_is_charted_only_when_recorded() {
        let stems = |records: &[Value]| -> Vec<&str> {
            charts(records, StepTiming::Lockstep)
                .into_iter()
                .map(|(stem, _)| stem)
                .collect()
        };
        let plain = [record(1, 2.0, 0.5, 1.0, 4.0)];
        assert!(!stems(&plain).contains(&"rollout_is"));
        let mut corrected = record(1, 2.0, 0.5, 1.0, 4.0);
        corrected["rollout_corr"] = serde_json::json!({
            "rollout_corr/rollout_is_mean": 0.99, "rollout_corr/rollout_is_max": 1.2,
            "rollout_corr/rollout_is_min": 0.8, "rollout_corr/kl": 5e-4, "rollout_corr/k3_kl": 1e-4,
        });
        let all = charts(std::slice::from_ref(&corrected), StepTiming::Lockstep);
        let is = &all.iter().find(|(s, _)| *s == "rollout_is").unwrap().1;
        assert_eq!(names(is), ["mean", "max", "min"]);
        assert_eq!(is.series[1].points, vec![(1.0, 1.2)]);
        let mismatch = &all
            .iter()
            .find(|(s, _)| *s == "rollout_mismatch")
            .unwrap()
            .1;
        assert_eq!(mismatch.series[0].points, vec![(1.0, 5e-4)]);
        assert_eq!(all.last().unwrap().0, "step_time");
    }

    fn names(chart: &LineChart) -> Vec<&str> {
        chart.series.iter().map(|s| s.name.as_str()).collect()
    }

    /// The top of the stack at each step: the sum of the parts.
    fn tops(chart: &LineChart) -> Vec<f64> {
        (0..chart.series[0].points.len())
            .map(|k| chart.series.iter().map(|s| s.points[k].1).sum())
            .collect()
    }

    #[test]
    fn issue_39_the_scheduled_time_split_stacks_wall_clock_seconds_only() {
        // Summed tool seconds of concurrent calls (2500 s) against a 30-second step.
        let records = [
            record(1, 20.0, 2500.0, 8.0, 30.0),
            record(2, 21.0, 2400.0, 8.5, 31.0),
        ];
        let config = serde_json::json!({"rl": {"rollout_driver": "scheduled"}});
        let timing = StepTiming::of_config(Some(&config));
        assert_eq!(timing, StepTiming::Scheduled);
        let all = charts(&records, timing);
        let (stem, chart) = all.last().unwrap();
        assert_eq!(*stem, "step_time");
        assert!(chart.stacked);
        assert_eq!(
            names(chart),
            [
                "rollout (tools overlapped)",
                "update",
                "other (logging, checkpoints)"
            ]
        );
        // The stack's top is the step's wall-clock time; nothing holds the tool seconds.
        assert_eq!(tops(chart), [30.0, 31.0]);
        assert!(
            chart
                .series
                .iter()
                .all(|s| s.points.iter().all(|p| p.1 < 100.0))
        );
        // The stage boundary after step 2 is on this chart too.
        assert_eq!(chart.vlines.len(), 1);
        assert_eq!(chart.vlines[0].x, 2.5);
    }

    #[test]
    fn the_lockstep_time_split_stacks_generation_tools_and_update() {
        let records = [record(1, 2.0, 0.5, 1.0, 4.0), record(2, 2.0, 0.5, 1.0, 3.0)];
        for config in [
            None,
            Some(serde_json::json!({"rl": {"rollout_driver": "lockstep"}})),
        ] {
            let timing = StepTiming::of_config(config.as_ref());
            assert_eq!(timing, StepTiming::Lockstep);
            let chart = timing.chart(&records, 2.0, &[]);
            assert_eq!(
                names(&chart),
                [
                    "generation",
                    "waiting on tools",
                    "update",
                    "other (logging, checkpoints)"
                ]
            );
            // Step 2's parts add up to 3.5 s against a 3-second step: "other" is 0, not -0.5.
            assert_eq!(tops(&chart), [4.0, 3.5]);
        }
        // Files without `time_step` have the three parts only.
        let old: Vec<Value> = records
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.as_object_mut().unwrap().remove("time_step");
                r
            })
            .collect();
        let chart = StepTiming::Lockstep.chart(&old, 2.0, &[]);
        assert_eq!(names(&chart), ["generation", "waiting on tools", "update"]);
        assert_eq!(tops(&chart), [3.5, 3.5]);
    }
}
