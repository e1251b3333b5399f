//! What a run produced ([`TrainReport`]) and its table, read back from the run's files.

use rstar_episode::LineError;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use rstar_analysis::interval::Interval;

use crate::evaluation::decoding_name;
use crate::{EvalRow, io_err, rl, sft};

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The run directory.
    pub out: PathBuf,
    /// Evaluations after SFT and after each stage.
    pub evals: Vec<EvalRow>,
    /// RL steps done.
    pub rl_steps: u64,
    /// SFT steps per second.
    pub sft_steps_per_sec: f64,
    /// Mean RL step time in seconds.
    pub rl_step_secs: f64,
    /// Mean rollout throughput over RL steps (sampled tokens per second of generation).
    pub rollout_tokens_per_sec: f64,
    /// Seconds this invocation took (a resumed run counts from the resume).
    pub total_secs: f64,
    /// Whether every stage is done (false when stopped early by [`RunOptions`]).
    #[serde(default = "yes")]
    pub finished: bool,
    /// The sampling temperature of the avg@k evaluations (`eval.temperature`).
    #[serde(default = "one")]
    pub eval_temperature: f64,
    /// The RL steps' tool-call latency, when the tools timed their calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_latency: Option<RunToolLatency>,
    /// What trained on LoRA adapters, a line a phase (`rl: LoRA rank 16 (alpha 32) on …`);
    /// absent for full fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<String>,
}

/// The tool-call latency over a run's RL steps (each step's is in `metrics.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunToolLatency {
    /// Steps that made tool calls.
    pub steps: usize,
    /// Tool calls in all.
    pub calls: usize,
    /// The median over those steps of each step's median latency.
    pub p50_ms: f64,
    /// The largest step p99 latency.
    pub p99_ms_max: f64,
    /// The slowest call.
    pub max_ms: f64,
    /// The budget (`tools.latency_budget_secs`), when one was set.
    pub budget_secs: Option<f64>,
    /// Steps with calls over the budget.
    pub steps_over_budget: Vec<u64>,
}

impl RunToolLatency {
    /// The summary of `steps`; `None` when none timed a tool call.
    pub fn of(steps: &[rl::StepRecord]) -> Option<Self> {
        let timed: Vec<(u64, rstar_rollout::timing::ToolLatency)> = steps
            .iter()
            .filter_map(|s| s.tool_latency.map(|l| (s.step, l)))
            .collect();
        if timed.is_empty() {
            return None;
        }
        let mut p50: Vec<f64> = timed.iter().map(|(_, l)| l.p50_ms).collect();
        p50.sort_by(f64::total_cmp);
        let worst = |f: fn(&rstar_rollout::timing::ToolLatency) -> f64| {
            timed.iter().map(|(_, l)| f(l)).fold(0.0, f64::max)
        };
        Some(RunToolLatency {
            steps: timed.len(),
            calls: timed.iter().map(|(_, l)| l.calls).sum(),
            p50_ms: p50[(p50.len() - 1) / 2],
            p99_ms_max: worst(|l| l.p99_ms),
            max_ms: worst(|l| l.max_ms),
            budget_secs: timed.iter().find_map(|(_, l)| l.budget_secs),
            steps_over_budget: timed
                .iter()
                .filter(|(_, l)| l.over_budget > 0)
                .map(|(s, _)| *s)
                .collect(),
        })
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let budget = match self.budget_secs {
            None => String::new(),
            Some(b) if self.steps_over_budget.is_empty() => {
                format!("; every step within the {b} s budget")
            }
            Some(b) => format!(
                "; steps over the {b} s budget: {}",
                self.steps_over_budget
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "tool calls: {} in {} RL steps, p50 {:.1} ms (median step), p99 {:.1} ms (worst step), slowest {:.1} ms{budget}\n",
            self.calls, self.steps, self.p50_ms, self.p99_ms_max, self.max_ms
        )
    }
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

impl TrainReport {
    /// The final table, one row after SFT and after each stage: held-out accuracy under
    /// greedy decoding and avg@k at every evaluated temperature (`eval.more_temperatures`,
    /// then `eval.temperature`, the rollouts'), each with its 95% Wilson interval over the
    /// problems, the best of these, its change from the row above with the 95% interval of
    /// the difference (Newcombe's; `rstar_analysis::interval`), then the tool columns (calls
    /// per trace, tool error rate, the same in successful traces, truncation) of the avg@k at
    /// `eval.temperature`, or of the greedy evaluation when `eval.samples` is 0. A row whose
    /// best decoding fell below the previous row's beyond that interval is marked `▼`, one
    /// that rose beyond it `▲`. A last line states the SFT policy's best decoding next to the
    /// final policy's and the gain between them with its interval, the headline: RL must beat
    /// SFT at its best, not at one temperature.
    pub fn table(&self) -> String {
        let k = self
            .evals
            .iter()
            .find_map(|e| e.sampled.map(|s| s.count / e.greedy.count.max(1)))
            .map_or_else(|| "k".to_string(), |k| k.to_string());
        // The extra temperatures ascending, then the rollouts'.
        let mut temps: Vec<f64> = Vec::new();
        for m in self.evals.iter().flat_map(|e| &e.more) {
            if !temps.contains(&m.temperature) && m.temperature != self.eval_temperature {
                temps.push(m.temperature);
            }
        }
        temps.sort_by(f64::total_cmp);
        temps.push(self.eval_temperature);
        let mut s = String::from("| phase | RL steps | problems | greedy |");
        for t in &temps {
            s.push_str(&format!(" avg@{k} (T = {t}) |"));
        }
        s.push_str(
            " best | best vs above | tool calls | tool error rate | in successes | truncated |\n|",
        );
        s.push_str(&"---|".repeat(temps.len() + 10));
        s.push('\n');
        let pct = |x: f64| format!("{:.1}%", 100.0 * x);
        let with_interval = |e: &EvalRow, x: f64| format!("{} {}", pct(x), e.interval(x));
        let mut marked = false;
        for (i, e) in self.evals.iter().enumerate() {
            let t = e.sampled.as_ref().unwrap_or(&e.greedy);
            s.push_str(&format!(
                "| {} | {} | {} | {} |",
                e.phase,
                e.rl_steps,
                e.problems(),
                with_interval(e, e.greedy.accuracy)
            ));
            for &temp in &temps {
                let at = e
                    .decodings(self.eval_temperature)
                    .into_iter()
                    .find(|d| d.0 == Some(temp))
                    .map(|d| d.1);
                s.push_str(&format!(
                    " {} |",
                    at.map_or_else(|| "-".to_string(), |x| with_interval(e, x))
                ));
            }
            let (best_at, best) = e.best(self.eval_temperature);
            let change = match i.checked_sub(1).map(|j| &self.evals[j]) {
                None => "-".to_string(),
                Some(above) => {
                    let change = change(above, e, self.eval_temperature);
                    marked |= change.mark.is_some();
                    change.cell()
                }
            };
            s.push_str(&format!(
                " {} ({}) | {change} | {:.2} | {} | {} | {} |\n",
                with_interval(e, best),
                decoding_name(best_at),
                t.tool_calls,
                pct(t.tool_error_rate),
                pct(t.tool_error_rate_success),
                pct(t.truncation_rate)
            ));
        }
        if marked {
            s.push_str(
                "\n▼ / ▲: the best decoding fell / rose from the row above beyond the 95% interval of the difference\n",
            );
        }
        if let (Some(first), Some(last)) = (self.evals.first(), self.evals.last())
            && self.evals.len() > 1
        {
            let (a_at, a) = first.best(self.eval_temperature);
            let (b_at, b) = last.best(self.eval_temperature);
            let gain = change(first, last, self.eval_temperature);
            s.push_str(&format!(
                "\nbest decoding: {} {} ({}), {} {} ({}): {:+.1} points {}\n",
                first.phase,
                with_interval(first, a),
                decoding_name(a_at),
                last.phase,
                with_interval(last, b),
                decoding_name(b_at),
                100.0 * (b - a),
                gain.interval
            ));
        }
        if let Some(l) = &self.tool_latency {
            s.push_str(&l.line());
        }
        if let Some(lora) = &self.lora {
            for line in lora.lines().filter(|l| !l.is_empty()) {
                s.push_str(&format!("{line} (the base frozen)\n"));
            }
        }
        s
    }

    /// The rows whose best decoding fell below the row above's beyond the 95% interval of the
    /// difference (the table's `▼`), by phase.
    pub fn regressions(&self) -> Vec<String> {
        self.evals
            .windows(2)
            .filter(|w| change(&w[0], &w[1], self.eval_temperature).mark == Some('▼'))
            .map(|w| w[1].phase.clone())
            .collect()
    }
}

/// The change of the best decoding from `before` to `after`.
struct Change {
    /// `after − before`.
    points: f64,
    /// Its 95% interval.
    interval: Interval,
    /// `▼` or `▲` when the interval excludes 0.
    mark: Option<char>,
}

impl Change {
    fn cell(&self) -> String {
        let mark = self.mark.map(|m| format!(" {m}")).unwrap_or_default();
        format!("{:+.1} {}{mark}", 100.0 * self.points, self.interval)
    }
}

fn change(before: &EvalRow, after: &EvalRow, eval_temperature: f64) -> Change {
    let (_, a) = before.best(eval_temperature);
    let (_, b) = after.best(eval_temperature);
    let interval = Interval::difference(b, after.problems(), a, before.problems());
    let mark = match (interval.lo > 0.0, interval.hi < 0.0) {
        (true, _) => Some('▲'),
        (_, true) => Some('▼'),
        _ => None,
    };
    Change {
        points: b - a,
        interval,
        mark,
    }
}

/// Reads the run's JSONL files back into a report.
pub(crate) fn report_from_files(
    out: &Path,
    started: Instant,
    finished: bool,
    eval_temperature: f64,
) -> Result<TrainReport, Error> {
    fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, Error> {
        if !path.exists() {
            return Ok(Vec::new());
        }
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| {
                    Error::Dataset(LineError::new(path.to_path_buf(), i + 1, e.to_string()))
                })
            })
            .collect()
    }
    let evals: Vec<EvalRow> = read(&out.join("eval.jsonl"))?;
    let sft: Vec<sft::SftStep> = read(&out.join("sft_metrics.jsonl"))?;
    let steps: Vec<rl::StepRecord> = read(&out.join("metrics.jsonl"))?;
    let mean = |v: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        if n == 0 { 0.0 } else { sum / n as f64 }
    };
    let sft_secs: f64 = sft.iter().map(|s| s.secs).sum();
    Ok(TrainReport {
        out: out.to_path_buf(),
        evals,
        rl_steps: steps.len() as u64,
        sft_steps_per_sec: if sft_secs > 0.0 {
            sft.len() as f64 / sft_secs
        } else {
            0.0
        },
        rl_step_secs: mean(&mut steps.iter().map(|s| s.time_step)),
        rollout_tokens_per_sec: mean(&mut steps.iter().map(|s| s.rollout_tokens_per_sec)),
        total_secs: started.elapsed().as_secs_f64(),
        finished,
        eval_temperature,
        tool_latency: RunToolLatency::of(&steps),
        lora: rstar_analysis::tensorboard::lora_text(out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SampledAt;
    use rstar_rollout::TrajectoryStats;

    fn stats(count: usize, accuracy: f64, errors: f64, in_successes: f64) -> TrajectoryStats {
        TrajectoryStats {
            count,
            accuracy,
            tool_calls: 1.5,
            tool_error_rate: errors,
            tool_error_rate_success: in_successes,
            ..TrajectoryStats::default()
        }
    }

    fn row(phase: &str, greedy: f64, sampled: Option<f64>, at_06: Option<f64>) -> EvalRow {
        EvalRow {
            phase: phase.into(),
            rl_steps: 0,
            greedy: stats(100, greedy, 0.0, 0.0),
            sampled: sampled.map(|a| stats(400, a, 0.222, 0.089)),
            avg_at_k: sampled,
            pass_at_k: Vec::new(),
            more: at_06
                .map(|a| SampledAt {
                    temperature: 0.6,
                    stats: stats(400, a, 0.1, 0.0),
                })
                .into_iter()
                .collect(),
        }
    }

    fn report(evals: Vec<EvalRow>) -> TrainReport {
        TrainReport {
            out: PathBuf::from("runs/x"),
            evals,
            rl_steps: 0,
            sft_steps_per_sec: 0.0,
            rl_step_secs: 0.0,
            rollout_tokens_per_sec: 0.0,
            total_secs: 0.0,
            finished: true,
            eval_temperature: 0.8,
            tool_latency: None,
            lora: None,
        }
    }

    /// A `metrics.jsonl` line of step `step` with `tool_latency` as given.
    fn step_record(step: u64, tool_latency: serde_json::Value) -> rl::StepRecord {
        let stats = serde_json::to_value(TrajectoryStats::default()).unwrap();
        serde_json::from_value(serde_json::json!({
            "step": step, "stage": 0, "stage_name": "short", "roc": true, "prompts": 1,
            "rollouts": 2, "all": stats, "kept": stats, "equal_reward_groups": 0,
            "roc_metrics": {}, "clip_frac": 0.0, "ppo_kl": 0.0, "entropy": 0.0, "pg_loss": 0.0,
            "grad_norm": 0.0, "updates": 1, "time_rollout": 1.0, "time_tools": 0.5,
            "time_update": 1.0, "rollout_tokens_per_sec": 10.0, "decision": "stay",
            "tool_latency": tool_latency,
        }))
        .unwrap()
    }

    #[test]
    fn the_run_tool_latency_names_the_steps_over_budget() {
        let timed = |calls: usize, p50: f64, p99: f64, max: f64, over: usize| {
            serde_json::json!({"calls": calls, "p50_ms": p50, "p99_ms": p99, "max_ms": max,
                "wait_p50_ms": 1.0, "wait_p99_ms": 2.0, "wait_max_ms": 3.0,
                "budget_secs": 0.5, "over_budget": over})
        };
        let steps = [
            step_record(1, timed(10, 4.0, 9.0, 12.0, 0)),
            step_record(2, serde_json::Value::Null),
            step_record(3, timed(6, 8.0, 700.0, 900.0, 2)),
            step_record(4, timed(4, 5.0, 6.0, 7.0, 0)),
        ];
        let l = RunToolLatency::of(&steps).unwrap();
        // The median of the step medians 4, 5, 8 is 5.
        assert_eq!(
            (l.steps, l.calls, l.p50_ms, l.p99_ms_max, l.max_ms),
            (3, 20, 5.0, 700.0, 900.0)
        );
        assert_eq!(
            (l.budget_secs, l.steps_over_budget.clone()),
            (Some(0.5), vec![3])
        );
        assert_eq!(
            l.line(),
            "tool calls: 20 in 3 RL steps, p50 5.0 ms (median step), p99 700.0 ms (worst step), slowest 900.0 ms; steps over the 0.5 s budget: 3\n"
        );
        assert_eq!(RunToolLatency::of(&steps[1..2]), None);
        let warning = crate::observer::tool_budget_warning(&steps[2]).unwrap();
        assert!(
            warning.starts_with(
                "warning: step 3: 2 of 6 tool calls took longer than the 0.5 s budget"
            ),
            "{warning}"
        );
        assert_eq!(crate::observer::tool_budget_warning(&steps[0]), None);
    }

    #[test]
    fn the_table_shows_every_decoding_with_intervals_and_the_gain_over_the_sft_best() {
        // 400 sampled traces of 100 problems: avg@4; the tool columns are those at T = 0.8.
        // The intervals are Wilson's over the 100 problems (statsmodels gives the same), the
        // change's Newcombe's of the two best decodings.
        let mut last = row("stage hard", 0.9, Some(0.85), Some(0.93));
        last.rl_steps = 32;
        let table = report(vec![row("sft", 0.51, Some(0.4), Some(0.55)), last]).table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "| phase | RL steps | problems | greedy | avg@4 (T = 0.6) | avg@4 (T = 0.8) | best | best vs above | tool calls | tool error rate | in successes | truncated |"
        );
        assert_eq!(
            lines[1],
            "|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        assert_eq!(
            lines[2],
            "| sft | 0 | 100 | 51.0% [41.3, 60.6] | 55.0% [45.2, 64.4] | 40.0% [30.9, 49.8] | 55.0% [45.2, 64.4] (T = 0.6) | - | 1.50 | 22.2% | 8.9% | 0.0% |"
        );
        assert_eq!(
            lines[3],
            "| stage hard | 32 | 100 | 90.0% [82.6, 94.5] | 93.0% [86.3, 96.6] | 85.0% [76.7, 90.7] | 93.0% [86.3, 96.6] (T = 0.6) | +38.0 [26.4, 48.4] ▲ | 1.50 | 22.2% | 8.9% | 0.0% |"
        );
        assert!(lines[5].starts_with("▼ / ▲: "), "{table}");
        assert_eq!(
            lines[7],
            "best decoding: sft 55.0% [45.2, 64.4] (T = 0.6), stage hard 93.0% [86.3, 96.6] (T = 0.6): +38.0 points [26.4, 48.4]"
        );
        // Greedy wins ties and when it is best; a 10-point drop on 100 problems is within
        // the interval of the difference, so it is not marked.
        let table = report(vec![
            row("sft", 0.6, Some(0.4), Some(0.6)),
            row("x", 0.5, Some(0.5), None),
        ])
        .table();
        assert!(
            table.contains("best decoding: sft 60.0% [50.2, 69.1] (greedy), x 50.0% [40.4, 59.6] (greedy): -10.0 points [-23.2, 3.7]"),
            "{table}"
        );
        assert!(
            table.contains("| x | 0 | 100 | 50.0% [40.4, 59.6] | - | 50.0% [40.4, 59.6] | 50.0% [40.4, 59.6] (greedy) | -10.0 [-23.2, 3.7] |"),
            "{table}"
        );
        assert!(!table.contains('▼') && !table.contains('▲'), "{table}");
    }

    #[test]
    fn a_stage_below_the_one_before_beyond_the_interval_is_marked() {
        let on = |problems: usize, mut r: EvalRow| {
            r.greedy.count = problems;
            r
        };
        // On 500 problems: sft 60%, short 95%, long 90% (a drop of 5 points: [-8.3, -1.7]),
        // hard 92% (+2 from long, within its interval).
        let r = report(vec![
            on(500, row("sft", 0.6, None, None)),
            on(500, row("stage short", 0.95, None, None)),
            on(500, row("stage long", 0.90, None, None)),
            on(500, row("stage hard", 0.92, None, None)),
        ]);
        let table = r.table();
        let long = table
            .lines()
            .find(|l| l.starts_with("| stage long"))
            .unwrap();
        assert!(long.contains("| -5.0 [-8.3, -1.7] ▼ |"), "{long}");
        let hard = table
            .lines()
            .find(|l| l.starts_with("| stage hard"))
            .unwrap();
        assert!(!hard.contains('▼') && !hard.contains('▲'), "{hard}");
        assert_eq!(r.regressions(), vec!["stage long".to_string()]);
        // The same drop on 100 problems cannot be told from noise.
        let r = report(vec![
            row("stage short", 0.95, None, None),
            row("stage long", 0.90, None, None),
        ]);
        assert!(r.regressions().is_empty(), "{}", r.table());
    }

    #[test]
    fn without_samples_the_table_shows_greedy_tool_errors() {
        let table = report(vec![row("sft", 0.99, None, None)]).table();
        assert!(
            table.starts_with("| phase | RL steps | problems | greedy | avg@k (T = 0.8) | best |"),
            "{table}"
        );
        assert!(
            table.contains("| sft | 0 | 100 | 99.0% [94.6, 99.8] | - | 99.0% [94.6, 99.8] (greedy) | - | 1.50 | 0.0% | 0.0% | 0.0% |"),
            "{table}"
        );
        assert!(!table.contains("best decoding"), "{table}");
    }
}
