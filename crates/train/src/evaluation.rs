//! Held-out evaluation of a policy during a run: greedy, sampled at the evaluation temperature
//! and at the extra temperatures, on the run's tools.

use rstar_episode::episode::{Limits, Trajectory};
use rstar_episode::template::TemplateFormat;
use rstar_policy::{Qwen, Sampling, Tokenizer};
use rstar_rollout::eval::{EvalReport, EvalSummary};
use rstar_rollout::scheduled::AsyncTools;
use rstar_rollout::{Prompt, RolloutConfig, TrajectoryStats, rollout};

use crate::error::Error;
use crate::{EvalOptions, SampledAt};

/// `greedy` or `T = 0.6`.
pub(crate) fn decoding_name(temperature: Option<f64>) -> String {
    temperature.map_or_else(|| "greedy".to_string(), |t| format!("T = {t}"))
}

/// What [`evaluate`] measured.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// Greedy decoding, one sample per problem.
    pub greedy: TrajectoryStats,
    /// `eval.samples` samples per problem at `eval.temperature`, when `eval.samples > 0`.
    pub sampled: Option<TrajectoryStats>,
    /// avg@k and pass@k of those samples, as `rstar eval` computes them.
    pub sampled_summary: Option<EvalSummary>,
    /// avg@k at each of `eval.more_temperatures`, when `eval.samples > 0`.
    pub more: Vec<SampledAt>,
    /// The greedy trajectories.
    pub trajectories: Vec<Trajectory>,
}

/// Evaluates `model` (a non-autodiff snapshot) on `prompts` with the compact template and
/// limits.
///
/// # Errors
/// Rollout errors.
pub fn evaluate(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    options: &EvalOptions,
    seed: u64,
    tools: &dyn AsyncTools,
) -> Result<Evaluation, Error> {
    evaluate_with(
        TemplateFormat::Compact,
        model,
        tokenizer,
        prompts,
        options,
        seed,
        tools,
    )
}

/// [`evaluate`] in a given template (with its [`base_limits`](rstar_rollout::setup::base_limits), the response budget replaced
/// by `options.max_response_tokens` when set).
///
/// # Errors
/// Rollout errors.
pub fn evaluate_with(
    template: TemplateFormat,
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    options: &EvalOptions,
    seed: u64,
    tools: &dyn AsyncTools,
) -> Result<Evaluation, Error> {
    let base = rstar_rollout::setup::base_limits(template);
    let config = RolloutConfig {
        template,
        limits: Limits {
            max_response_tokens: options
                .max_response_tokens
                .unwrap_or(base.max_response_tokens),
            ..base
        },
        sampling: Sampling::Greedy,
        seed,
        max_batch: options.max_batch,
        eos: Vec::new(),
        per_rollout_seeds: false,
        weight_version: None,
    };
    let sample = |temperature: f64| {
        let config = RolloutConfig {
            sampling: Sampling::Temperature {
                temperature: temperature as f32,
            },
            ..config.clone()
        };
        rollout(model, tokenizer, prompts, options.samples, &config, tools)
    };
    // With tools two threads may share (`AsyncTools::shared`), the greedy pass and
    // `more_temperatures` run on this thread and the samples at `eval.temperature` on a second
    // one. Every rollout is seeded as before, so the numbers are those of one pass after another.
    let run_here = || {
        let greedy = rollout(model, tokenizer, prompts, 1, &config, tools);
        let mut more_out = Vec::new();
        if options.samples > 0 {
            for &temperature in &options.more_temperatures {
                more_out.push((temperature, sample(temperature)));
            }
        }
        (greedy, more_out)
    };
    let (greedy, main_sampled, mut more_out) = if options.samples > 0 && tools.shared() {
        std::thread::scope(|scope| {
            let sample = &sample;
            let handle = scope.spawn(move || sample(options.temperature));
            let (greedy, more_out) = run_here();
            let main_sampled = handle.join().expect("the evaluation thread does not panic");
            (greedy, Some(main_sampled), more_out)
        })
    } else {
        let (greedy, more_out) = run_here();
        (greedy, None, more_out)
    };
    let greedy = greedy?;
    let mut sampled = None;
    let mut sampled_summary = None;
    let mut more = Vec::new();
    if options.samples > 0 {
        let out = match main_sampled {
            Some(out) => out?,
            None => sample(options.temperature)?,
        };
        sampled_summary = Some(EvalReport::from_trajectories(&out.trajectories)?.summary);
        sampled = Some(TrajectoryStats::of(&out.trajectories));
        for (temperature, out) in more_out.drain(..) {
            more.push(SampledAt {
                temperature,
                stats: TrajectoryStats::of(&out?.trajectories),
            });
        }
    }
    Ok(Evaluation {
        greedy: TrajectoryStats::of(&greedy.trajectories),
        sampled,
        sampled_summary,
        more,
        trajectories: greedy.trajectories,
    })
}
