//! The records of a run directory that the report and the TensorBoard writer read: one
//! [`EvalRow`] a line of `eval.jsonl`, and the [`TrajectoryStats`] inside it and inside every
//! line of `metrics.jsonl`. The trainer (`rstar-agent`) writes them; they live here so that
//! the reader needs nothing of the writer (`rstar_train::EvalRow`,
//! `rstar_rollout::TrajectoryStats` and `rstar_rollout::eval::PassAtK` are these types).
//!
//! ```
//! use rstar_episode::records::{EvalRow, TrajectoryStats};
//!
//! let line = r#"{"phase":"sft","rl_steps":0,"greedy":{"count":4,"accuracy":0.5,"response_len":90.0,"truncation_rate":0.0,"tool_calls":1.0,"tool_error_rate":0.25,"tool_error_rate_success":0.0,"answered":1.0},"sampled":null}"#;
//! let row: EvalRow = serde_json::from_str(line).unwrap();
//! assert_eq!(row.best(1.0), (None, 0.5));
//! assert_eq!(TrajectoryStats::of(&[]), TrajectoryStats::default());
//! ```

use serde::{Deserialize, Serialize};

use crate::episode::Trajectory;

/// Summary statistics of a set of trajectories (evaluation and RL metrics).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TrajectoryStats {
    /// Trajectories summarised.
    pub count: usize,
    /// Mean reward (avg@k accuracy when rewards are 0/1).
    pub accuracy: f64,
    /// Mean response length in tokens (assistant and tool tokens).
    pub response_len: f64,
    /// Share of truncated trajectories.
    pub truncation_rate: f64,
    /// Tool calls per trajectory.
    pub tool_calls: f64,
    /// Share of tool calls that were errors (error, timeout, parse failure).
    pub tool_error_rate: f64,
    /// The same share over the calls of successful (reward > 0) trajectories only.
    pub tool_error_rate_success: f64,
    /// Share of trajectories with at least one answer tag closed.
    pub answered: f64,
}

impl TrajectoryStats {
    /// Summarises `trajectories` (rewards missing count as 0).
    pub fn of(trajectories: &[Trajectory]) -> Self {
        let n = trajectories.len();
        if n == 0 {
            return TrajectoryStats::default();
        }
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (mut reward, mut len, mut trunc, mut calls, mut errors) = (0.0, 0usize, 0, 0, 0);
        let (mut ok_calls, mut ok_errors, mut answered) = (0, 0, 0);
        for t in trajectories {
            let r = f64::from(t.reward.unwrap_or(0.0));
            reward += r;
            len += t.response_ids.len();
            trunc += usize::from(t.truncated);
            calls += t.tool_calls.len();
            errors += t.tool_errors();
            if r > 0.0 {
                ok_calls += t.tool_calls.len();
                ok_errors += t.tool_errors();
            }
            answered += usize::from(t.answer.is_some());
        }
        TrajectoryStats {
            count: n,
            accuracy: reward / n as f64,
            response_len: ratio(len, n),
            truncation_rate: ratio(trunc, n),
            tool_calls: ratio(calls, n),
            tool_error_rate: ratio(errors, calls),
            tool_error_rate_success: ratio(ok_errors, ok_calls),
            answered: ratio(answered, n),
        }
    }
}

/// The tool calls of one RL step, as the rollouts saw them: latency (from the call's
/// submission to its answer) and wait (latency less the time the sandbox ran it: queueing,
/// batching, transport), in milliseconds, by the nearest-rank percentile. A line of
/// `metrics.jsonl` holds it as `tool_latency`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolLatency {
    /// Calls timed.
    pub calls: usize,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th-percentile latency.
    pub p99_ms: f64,
    /// Slowest call.
    pub max_ms: f64,
    /// Median wait.
    pub wait_p50_ms: f64,
    /// 99th-percentile wait.
    pub wait_p99_ms: f64,
    /// Longest wait.
    pub wait_max_ms: f64,
    /// The step's latency budget in seconds (`tools.latency_budget_secs`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_secs: Option<f64>,
    /// Calls slower than the budget (0 without one).
    #[serde(default)]
    pub over_budget: usize,
    /// Seconds the step's calls spent in the queue while another call was past its soft limit
    /// (running toward its time limit): the time lost behind calls that loop, sleep or hang
    /// (issue #68). Summed over the calls; the in-process pool tells it, tool servers do not
    /// (absent then, and in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_limit_secs: Option<f64>,
}

impl ToolLatency {
    /// Summarises `(latency, run)` pairs in seconds; `None` for no call.
    pub fn of(calls: &[(f64, f64)], budget_secs: Option<f64>) -> Option<Self> {
        if calls.is_empty() {
            return None;
        }
        let mut latency: Vec<f64> = calls.iter().map(|c| c.0 * 1e3).collect();
        let mut wait: Vec<f64> = calls.iter().map(|c| (c.0 - c.1).max(0.0) * 1e3).collect();
        latency.sort_by(f64::total_cmp);
        wait.sort_by(f64::total_cmp);
        Some(ToolLatency {
            calls: calls.len(),
            p50_ms: nearest_rank(&latency, 0.50),
            p99_ms: nearest_rank(&latency, 0.99),
            max_ms: latency[latency.len() - 1],
            wait_p50_ms: nearest_rank(&wait, 0.50),
            wait_p99_ms: nearest_rank(&wait, 0.99),
            wait_max_ms: wait[wait.len() - 1],
            budget_secs,
            over_budget: budget_secs.map_or(0, |b| calls.iter().filter(|c| c.0 > b).count()),
            behind_limit_secs: None,
        })
    }
}

/// The `q`-quantile of sorted values by nearest rank: the `ceil(q·n)`-th smallest.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One pass@k value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PassAtK {
    /// k.
    pub k: usize,
    /// The mean over problems of the unbiased estimate.
    pub value: f64,
}

/// Held-out evaluation of one policy (a line of `eval.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// `sft` or `stage <name>`.
    pub phase: String,
    /// RL steps done when evaluated.
    pub rl_steps: u64,
    /// Greedy decoding, one sample per problem.
    pub greedy: TrajectoryStats,
    /// The sampled evaluation's trajectory statistics at `eval.temperature`, when
    /// `eval.samples > 0`.
    pub sampled: Option<TrajectoryStats>,
    /// avg@k of the sampled evaluation, computed by `rstar eval`'s code
    /// (`rstar_rollout::eval::EvalReport::from_trajectories`); absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_at_k: Option<f64>,
    /// pass@k of the sampled evaluation for `k` = 1, 2, 4, … and `eval.samples`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_at_k: Vec<PassAtK>,
    /// avg@k at each of `eval.more_temperatures`, when `eval.samples > 0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<SampledAt>,
}

/// avg@k at one temperature.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SampledAt {
    /// The sampling temperature.
    pub temperature: f64,
    /// The `eval.samples` samples of every problem.
    pub stats: TrajectoryStats,
}

impl EvalRow {
    /// Accuracy under greedy decoding and at every sampled temperature, in that order:
    /// `(None, greedy)`, then `(Some(T), avg@k)`.
    pub fn decodings(&self, eval_temperature: f64) -> Vec<(Option<f64>, f64)> {
        let mut out = vec![(None, self.greedy.accuracy)];
        out.extend(
            self.sampled
                .map(|s| (Some(eval_temperature), self.avg_at_k.unwrap_or(s.accuracy))),
        );
        out.extend(
            self.more
                .iter()
                .map(|m| (Some(m.temperature), m.stats.accuracy)),
        );
        out
    }

    /// The problems evaluated: the greedy pass's trajectories, one a problem.
    pub fn problems(&self) -> usize {
        self.greedy.count
    }

    /// The 95% Wilson interval over [`EvalRow::problems`] of one of this row's accuracies
    /// (greedy or avg@k: [`crate::interval`] says why one interval serves both).
    pub fn interval(&self, accuracy: f64) -> crate::interval::Interval {
        crate::interval::Interval::wilson(accuracy, self.problems())
    }

    /// The best of [`EvalRow::decodings`] (the first on ties): the decoding and its accuracy.
    pub fn best(&self, eval_temperature: f64) -> (Option<f64>, f64) {
        self.decodings(eval_temperature)
            .into_iter()
            .fold((None, f64::NEG_INFINITY), |best, d| {
                if d.1 > best.1 { d } else { best }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_latency_percentiles_by_nearest_rank() {
        assert_eq!(ToolLatency::of(&[], Some(1.0)), None);
        // 200 calls of 1..=200 ms, each run for half its latency but the last, run 0.
        let mut calls: Vec<(f64, f64)> = (1..=200)
            .map(|i| (i as f64 / 1e3, i as f64 / 2e3))
            .collect();
        calls[199].1 = 0.0;
        let l = ToolLatency::of(&calls, Some(0.150)).unwrap();
        // ceil(0.5·200) = 100th and ceil(0.99·200) = 198th smallest.
        assert_eq!(
            (l.calls, l.p50_ms, l.p99_ms, l.max_ms),
            (200, 100.0, 198.0, 200.0)
        );
        // Waits are i/2 ms (the 100th and 198th: 50 and 99), but the last is all 200 ms.
        assert_eq!(
            (l.wait_p50_ms, l.wait_p99_ms, l.wait_max_ms),
            (50.0, 99.0, 200.0)
        );
        // 151..=200 ms are over 150 ms.
        assert_eq!((l.budget_secs, l.over_budget), (Some(0.150), 50));
        let one = ToolLatency::of(&[(0.004, 0.005)], None).unwrap();
        assert_eq!(
            (one.p50_ms, one.p99_ms, one.wait_max_ms, one.over_budget),
            (4.0, 4.0, 0.0, 0)
        );
    }

    #[test]
    fn stats_of_nothing_are_zero() {
        assert_eq!(TrajectoryStats::of(&[]), TrajectoryStats::default());
    }

    #[test]
    fn the_best_decoding_is_the_first_of_equals() {
        let stats = |accuracy| TrajectoryStats {
            count: 4,
            accuracy,
            ..TrajectoryStats::default()
        };
        let row = EvalRow {
            phase: "sft".into(),
            rl_steps: 0,
            greedy: stats(0.5),
            sampled: Some(stats(0.25)),
            avg_at_k: Some(0.75),
            pass_at_k: Vec::new(),
            more: vec![SampledAt {
                temperature: 0.6,
                stats: stats(0.75),
            }],
        };
        assert_eq!(
            row.decodings(1.0),
            [(None, 0.5), (Some(1.0), 0.75), (Some(0.6), 0.75)]
        );
        assert_eq!(row.best(1.0), (Some(1.0), 0.75));
    }
}
