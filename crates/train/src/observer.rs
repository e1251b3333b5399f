//! What the trainer reports while it runs: the [`Observer`] trait and its log lines.

use crate::{SftOptions, rl, sft};

/// What the trainer reports while it runs. [`LogLines`] turns every event into a log line;
/// the CLI's progress bars implement it too.
pub trait Observer {
    /// A progress message (corpus, evaluations, stages, checkpoints).
    fn log(&mut self, line: &str);
    /// An SFT step finished (`total` steps in all).
    fn sft_step(&mut self, step: &sft::SftStep, options: &SftOptions) {
        if sft_logged(step, options) {
            self.log(&sft_line(step, options.steps));
        }
    }
    /// An RL step finished (`total`: the curriculum's step budget, when it has one).
    fn rl_step(&mut self, record: &rl::StepRecord, total: Option<u64>) {
        let _ = total;
        self.log(&rl_line(record));
    }
}

/// An [`Observer`] that hands every line to a closure.
pub struct LogLines<F>(pub F);

impl<F> std::fmt::Debug for LogLines<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogLines")
    }
}

impl<F: FnMut(&str)> Observer for LogLines<F> {
    fn log(&mut self, line: &str) {
        (self.0)(line);
    }
}

/// Whether an SFT step gets a log line: every `log_every` steps and the last one.
pub fn sft_logged(step: &sft::SftStep, options: &SftOptions) -> bool {
    options.log_every > 0
        && (step.step.is_multiple_of(options.log_every) || step.step == options.steps)
}

/// The log line of an SFT step.
pub fn sft_line(s: &sft::SftStep, total: usize) -> String {
    format!(
        "sft step {}/{}: loss {:.3}, lr {:.2e}, grad norm {:.2}, {:.2}s/step",
        s.step, total, s.loss, s.lr, s.grad_norm, s.secs
    )
}

/// The log line of an RL step. With the scheduled driver the tool calls overlap the turns
/// and each other: their summed time is said as such, not as a phase of the step.
pub fn rl_line(record: &rl::StepRecord) -> String {
    let phases = if record.dispatch.is_some() {
        format!(
            "rollout {:.1}s with {:.1}s of tool calls overlapping, update {:.1}s",
            record.time_rollout, record.time_tools, record.time_update
        )
    } else {
        format!(
            "rollout {:.1}s, tools {:.1}s, update {:.1}s",
            record.time_rollout, record.time_tools, record.time_update
        )
    };
    let latency = record.tool_latency.map_or(String::new(), |l| {
        // The queue time lost behind calls at their time limit, when there was any.
        let behind = l
            .behind_limit_secs
            .filter(|&s| s >= 0.05)
            .map_or(String::new(), |s| {
                format!(", {s:.1}s waited behind calls at their limit")
            });
        format!(
            ", tool call p50 {:.1} ms p99 {:.1} ms max {:.1} ms{behind}",
            l.p50_ms, l.p99_ms, l.max_ms
        )
    });
    // The rollout correction, when on: its mean weight and the engine–trainer KL.
    let corr = |k: &str| {
        record
            .rollout_corr
            .get(&format!("rollout_corr/{k}"))
            .copied()
    };
    let correction = match (corr("rollout_is_mean"), corr("kl")) {
        (Some(mean), Some(kl)) => format!(
            ", IS mean {mean:.3} (max {:.3}) rollout kl {kl:.2e}",
            corr("rollout_is_max").unwrap_or(f64::NAN)
        ),
        _ => String::new(),
    };
    // Asynchronous RL: the rollouts' version, and who waited for whom.
    let phases = match &record.asynchronous {
        Some(a) => format!(
            "{phases}; rolled out by step-{}{}, engines idle {:.1}s, trainer idle {:.1}s",
            a.version,
            match a.dropped_groups {
                0 => String::new(),
                n => format!(", {n} stale group(s) dropped"),
            },
            a.engine_idle_secs,
            a.trainer_idle_secs
        ),
        None => phases,
    };
    format!(
        "rl step {} [{}]: reward {:.3}, kept {} of {}, tool errors {:.1}% ({:.1}% in successes){latency}, clip {:.3}, kl {:.4}{correction}, entropy {:.3}, {:.1}s ({phases}) -> {}",
        record.step,
        record.stage_name,
        record.all.accuracy,
        record.kept.count,
        record.rollouts,
        100.0 * record.all.tool_error_rate,
        100.0 * record.all.tool_error_rate_success,
        record.clip_frac,
        record.ppo_kl,
        record.entropy,
        record.time_step,
        record.decision
    )
}

/// The warning for a step whose tool calls went over `tools.latency_budget_secs`, if any did.
pub fn tool_budget_warning(record: &rl::StepRecord) -> Option<String> {
    let l = record.tool_latency.filter(|l| l.over_budget > 0)?;
    Some(format!(
        "warning: step {}: {} of {} tool calls took longer than the {} s budget (tools.latency_budget_secs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, of which waiting (queue, batching, transport) p99 {:.1} ms",
        record.step,
        l.over_budget,
        l.calls,
        l.budget_secs.unwrap_or(f64::NAN),
        l.p50_ms,
        l.p99_ms,
        l.max_ms,
        l.wait_p99_ms
    ))
}
