//! The rollout driver: many problems × many samples through one policy, in lock step.
//!
//! Each round collects the [`Step::Generate`] of every active [`Episode`], runs **one** batched
//! [`generate_requests`] call for all of them (each sequence with the template's stop strings and
//! the budget its episode has left), feeds the turns back, then runs every pending tool call of
//! the round together through the [`AsyncTools`] (the sandboxed [`rstar_toolenv`] pool runs them
//! concurrently; [`AsyncTools::run_round`]), and repeats until every episode is done. Finished episodes are scored with
//! [`rstar_verifier::verify`] on their assistant text (or, when the tools verify
//! ([`AsyncTools::verifies`]: `rl.verify = "remote"`), in one batch on the tool servers'
//! `/verify`, with the same verifier). An episode whose context reaches the
//! model's `max_position_embeddings` (in a turn, or after a tool turn) ends there truncated
//! ([`StopReason::TokenBudget`]), as one that exhausts its response budget.
//!
//! Deterministic for a seed: round `r` samples with a seed derived from `(seed, r)` and sequence
//! `i` of the round's batch with that seed `+ i` (the policy's rule); the batch order is the
//! episode order, so the same prompts, policy and seed give the same trajectories. With
//! [`RolloutConfig::per_rollout_seeds`], turn `t` of rollout `r` samples with
//! `mix(mix(seed, r), t)` instead (the scheduled driver's rule), so the trajectories do not depend
//! on `max_batch` either, and [`rollout_chunked`] can roll out a large set of problems a chunk at
//! a time with the same results.
//!
//! ```
//! use rstar_rollout::{FnExecutor, Prompt, RolloutConfig, rollout};
//! use rstar_episode::toolcall::ToolOutcome;
//! use rstar_policy::{Qwen, QwenConfig, Tokenizer};
//! use burn::tensor::Device;
//!
//! let device = Device::flex();
//! let model = Qwen::random(QwenConfig::tiny_char(), 0, &device).unwrap();
//! let tok = Tokenizer::char();
//! let prompts = [Prompt::new("p0", "What is 2*3?", "6")];
//! let mut config = RolloutConfig::compact(7);
//! config.limits.max_response_tokens = 16; // an untrained model writes noise: keep it short
//! let tools = FnExecutor::new(|_: &rstar_episode::toolcall::ToolCall| {
//!     ToolOutcome::code_judge(true, "", "6\n", "", 0.0)
//! });
//! let out = rollout(&model, &tok, &prompts, 2, &config, &tools).unwrap();
//! assert_eq!(out.trajectories.len(), 2);
//! assert!(out.trajectories.iter().all(|t| t.response_ids.len() <= 16));
//! ```
//!
//! # Crate features
//! None. The Burn backend is `rstar-policy`'s feature (`flex`, `wgpu`, `cuda`, `tch`, and
//! `fusion`, `autotune` for the GPU ones): a binary enables it there, once for every crate.

use std::time::Instant;

use rstar_policy::{
    FinishReason, GenerationConfig, Qwen, Request, Sampling, Tokenizer, generate_requests,
};
use serde::{Deserialize, Serialize};

use rstar_episode::episode::{Episode, Limits, Score, Step, StopReason, TokenStats, Trajectory};
use rstar_episode::template::{Template, TemplateFormat};
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_scheduler::BoxFuture;

use crate::scheduled::AsyncTools;

pub mod error;
pub mod eval;
pub mod scheduled;
pub mod setup;
pub mod timing;
pub mod tools;

pub use error::Error;
pub use rstar_engine::PolicyTokenizer;

/// A closure that runs one call at a time (tests, scripted tools): the [`AsyncTools`] of a
/// plain `FnMut`. Its calls run one after another in call order, also from the lock-step
/// driver's rounds, and it is never shared between two threads
/// ([`AsyncTools::shared`] is `false`), so a stateful closure sees the calls in a fixed order.
#[derive(Debug)]
pub struct FnExecutor<F>(std::sync::Mutex<F>);

impl<F> FnExecutor<F> {
    /// The tools that answer each call with `f`.
    pub fn new(f: F) -> Self {
        FnExecutor(std::sync::Mutex::new(f))
    }

    fn call(&self, call: &ToolCall) -> ToolOutcome
    where
        F: FnMut(&ToolCall) -> ToolOutcome,
    {
        let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(call)
    }
}

impl<F: FnMut(&ToolCall) -> ToolOutcome + Send> AsyncTools for FnExecutor<F> {
    fn run(&self, call: ToolCall, _history: Vec<String>) -> BoxFuture<'_, ToolOutcome> {
        let outcome = self.call(&call);
        Box::pin(async move { outcome })
    }

    fn run_round(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        calls.iter().map(|c| self.call(c)).collect()
    }

    fn shared(&self) -> bool {
        false
    }
}

/// A sandbox result as the agent layer's [`ToolOutcome`] (code-judge's response layout).
/// An internal sandbox failure becomes an error whose stderr carries the sandbox's message.
pub fn outcome_of(result: &rstar_toolenv::ToolResult) -> ToolOutcome {
    let stderr = match (&result.message, result.stderr.is_empty()) {
        (Some(message), true) => format!("SandboxError: {message}"),
        _ => result.stderr.clone(),
    };
    ToolOutcome::code_judge(
        result.success(),
        result.reason(),
        &result.stdout,
        &stderr,
        result.cost,
    )
}

pub use rstar_episode::Prompt;

/// How a batch of episodes is rolled out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutConfig {
    /// The prompt template.
    pub template: TemplateFormat,
    /// Turn and token limits.
    pub limits: Limits,
    /// The sampler.
    pub sampling: Sampling,
    /// The seed of the whole rollout.
    pub seed: u64,
    /// Most sequences in one generation call; `0` puts every active episode in one call.
    pub max_batch: usize,
    /// EOS ids that end a turn besides the template's stop strings.
    pub eos: Vec<u32>,
    /// Seed each rollout's turns on their own, `mix(mix(seed, rollout), turn)` (rollouts
    /// numbered prompt-major from 0), rather than by round and position in the batch: the
    /// trajectories are then the same whatever `max_batch` and chunking (up to float rounding).
    #[serde(default)]
    pub per_rollout_seeds: bool,
    /// The weight version of the policy, stamped on every assistant turn
    /// ([`Turn::weight_version`](rstar_episode::Turn::weight_version)); `None` stamps nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

impl RolloutConfig {
    /// The embedded default: compact template and limits, temperature 1, one batch.
    pub fn compact(seed: u64) -> Self {
        RolloutConfig {
            template: TemplateFormat::Compact,
            limits: Limits::compact(),
            sampling: Sampling::Temperature { temperature: 1.0 },
            seed,
            max_batch: 0,
            eos: Vec::new(),
            per_rollout_seeds: false,
            weight_version: None,
        }
    }
}

/// Counters and timings of one rollout.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RolloutStats {
    /// Generation calls (one per round, or more with `max_batch`).
    pub rounds: usize,
    /// The most sequences in one generation call.
    #[serde(default)]
    pub largest_call: usize,
    /// Tokens sampled by the policy (before episodes cut them at their budget).
    pub generated_tokens: usize,
    /// Tool calls executed (parse failures are answered without running).
    pub tool_calls: usize,
    /// Seconds in generation.
    pub generate_secs: f64,
    /// Seconds in tool execution.
    pub tool_secs: f64,
}

impl RolloutStats {
    /// Sampled tokens per second of generation time.
    pub fn tokens_per_sec(&self) -> f64 {
        if self.generate_secs > 0.0 {
            self.generated_tokens as f64 / self.generate_secs
        } else {
            0.0
        }
    }
}

/// The scored trajectories of a rollout and its stats.
#[derive(Debug, Clone)]
pub struct RolloutOutput {
    /// `samples` trajectories per prompt, prompt-major: `trajectories[p * samples + s]`.
    pub trajectories: Vec<Trajectory>,
    /// Counters and timings.
    pub stats: RolloutStats,
}

/// SplitMix64: decorrelates the seeds of successive rounds (and of a run's streams, and of a
/// rollout's turns).
pub fn mix_seed(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rolls out `samples` episodes of every prompt with `model` and scores them.
///
/// # Errors
/// [`Error::Policy`] when generation fails, [`Error::Verifier`] for a ground truth
/// that is not an integer, [`rstar_episode::Error::EpisodeState`] / [`Error::OutcomeCount`] when an
/// executor returns the wrong number of outcomes.
pub fn rollout(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    samples: usize,
    config: &RolloutConfig,
    tools: &dyn AsyncTools,
) -> Result<RolloutOutput, Error> {
    rollout_from(model, tokenizer, prompts, samples, config, tools, 0)
}

/// [`rollout`] of `prompts` a chunk of `chunk` prompts at a time (`0`: all at once), each
/// chunk's output handed to `on_chunk` with the chunk's prompts and then dropped, so memory
/// holds one chunk's episodes whatever the number of prompts. With
/// [`RolloutConfig::per_rollout_seeds`] the trajectories are those of one [`rollout`] of all
/// of them (rollouts keep their global numbers); without, each chunk is seeded as a rollout of
/// its own.
///
/// # Errors
/// [`rollout`]'s, and `on_chunk`'s.
#[allow(
    clippy::too_many_arguments,
    reason = "rollout's arguments, the chunk size and the consumer of each chunk"
)]
pub fn rollout_chunked(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    samples: usize,
    config: &RolloutConfig,
    tools: &dyn AsyncTools,
    chunk: usize,
    mut on_chunk: impl FnMut(&[Prompt], RolloutOutput) -> Result<(), Error>,
) -> Result<(), Error> {
    let chunk = if chunk == 0 {
        prompts.len().max(1)
    } else {
        chunk
    };
    for (c, part) in prompts.chunks(chunk).enumerate() {
        let first = (c * chunk * samples) as u64;
        let out = rollout_from(model, tokenizer, part, samples, config, tools, first)?;
        on_chunk(part, out)?;
    }
    Ok(())
}

/// [`rollout`] whose rollouts are numbered from `first` (the per-rollout seeds' numbering).
fn rollout_from(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    samples: usize,
    config: &RolloutConfig,
    tools: &dyn AsyncTools,
    first: u64,
) -> Result<RolloutOutput, Error> {
    let tok = PolicyTokenizer(tokenizer);
    let template = Template::of(config.template);
    let stops: Vec<String> = template
        .stop_strings()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut episodes: Vec<Episode<PolicyTokenizer<'_>>> = Vec::new();
    for p in prompts {
        for s in 0..samples {
            episodes.push(
                Episode::new(tok, &template, config.limits.clone(), &p.problem)
                    .with_id(p.id.clone(), s as u32)
                    .with_ground_truth(p.answer.clone()),
            );
        }
    }
    let mut stats = RolloutStats::default();
    let mut round = 0u64;
    // Assistant turns written so far per episode (the per-rollout seeds' turn number).
    let mut turns = vec![0u64; episodes.len()];
    let max_pos = model.config.max_position_embeddings;
    loop {
        // A context that fills the model (a long prompt, or a tool turn that reached the end)
        // leaves no room for a turn: the response is truncated there.
        for e in &mut episodes {
            if matches!(e.step(), Step::Generate { .. }) && e.context_ids().len() >= max_pos {
                e.stop(StopReason::TokenBudget);
            }
        }
        // Generation: every episode waiting for an assistant turn, in episode order.
        let waiting: Vec<(usize, usize)> = episodes
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.step() {
                Step::Generate { max_tokens } => Some((i, max_tokens)),
                _ => None,
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        let chunk = if config.max_batch == 0 {
            waiting.len()
        } else {
            config.max_batch
        };
        let started = Instant::now();
        for (c, part) in waiting.chunks(chunk).enumerate() {
            let requests: Vec<Request> = part
                .iter()
                .map(|&(i, max_tokens)| Request {
                    prompt: episodes[i].context_ids(),
                    stop_strings: Some(stops.clone()),
                    max_new_tokens: Some(max_tokens),
                    seed: config
                        .per_rollout_seeds
                        .then(|| mix_seed(mix_seed(config.seed, first + i as u64), turns[i])),
                })
                .collect();
            let gen_config = GenerationConfig {
                max_new_tokens: part.iter().map(|&(_, m)| m).max().unwrap_or(1),
                stop_strings: stops.clone(),
                eos: config.eos.clone(),
                sampling: config.sampling,
                seed: mix_seed(config.seed, (round << 20) | c as u64),
            };
            let outputs = generate_requests(model, tokenizer, &requests, &gen_config)?;
            stats.rounds += 1;
            stats.largest_call = stats.largest_call.max(requests.len());
            for ((&(i, _), request), g) in part.iter().zip(&requests).zip(outputs) {
                stats.generated_tokens += g.tokens.len();
                // Cut by the model's context rather than by a stop string or the budget.
                let at_context = g.finish_reason == FinishReason::Length
                    && request.prompt.len() + g.tokens.len() >= max_pos;
                let token_stats = TokenStats {
                    entropies: g.entropies,
                    logprobs: g.logprobs,
                };
                episodes[i].push_assistant_sampled(&g.tokens, token_stats)?;
                turns[i] += 1;
                if at_context {
                    episodes[i].stop(StopReason::TokenBudget);
                }
            }
        }
        stats.generate_secs += started.elapsed().as_secs_f64();

        // Tools: every pending call of the round in one batch.
        let started = Instant::now();
        let mut owners: Vec<(usize, usize)> = Vec::new();
        let mut calls: Vec<ToolCall> = Vec::new();
        for (i, e) in episodes.iter().enumerate() {
            if let Step::CallTools(c) = e.step() {
                owners.push((i, c.len()));
                calls.extend(c);
            }
        }
        if !calls.is_empty() {
            let outcomes = tools.run_round(&calls);
            if outcomes.len() != calls.len() {
                return Err(Error::OutcomeCount {
                    expected: calls.len(),
                    got: outcomes.len(),
                });
            }
            stats.tool_calls += calls.len();
            let mut outcomes = outcomes.into_iter();
            for (i, n) in owners {
                let mine: Vec<ToolOutcome> = outcomes.by_ref().take(n).collect();
                episodes[i].push_tool_outcomes(mine)?;
            }
        }
        stats.tool_secs += started.elapsed().as_secs_f64();
        round += 1;
    }
    if tools.verifies() {
        return score_remotely(episodes, prompts, samples, tools, stats);
    }
    let mut trajectories = Vec::with_capacity(episodes.len());
    for (e, p) in episodes
        .into_iter()
        .zip(prompts.iter().flat_map(|p| std::iter::repeat_n(p, samples)))
    {
        let mut verdict = None;
        let mut t = e.finish_scored(|text| {
            let v = rstar_verifier::verify(text, &p.answer);
            let score = match &v {
                Ok(v) => Score {
                    answer: v.extracted.clone(),
                    reward: f32::from(v.reward),
                },
                Err(_) => Score {
                    answer: None,
                    reward: 0.0,
                },
            };
            verdict = Some(v);
            score
        })?;
        if let Some(Err(err)) = verdict {
            return Err(err.into());
        }
        if let Some(v) = &config.weight_version {
            let n = t
                .turns
                .iter()
                .filter(|turn| turn.role == rstar_episode::episode::Role::Assistant)
                .count();
            t.set_turn_versions(vec![Some(v.clone()); n])?;
        }
        trajectories.push(t);
    }
    Ok(RolloutOutput {
        trajectories,
        stats,
    })
}

/// The lock-step driver's scoring on the tools' side ([`AsyncTools::verifies`]): every finished
/// episode's assistant text in one batch to [`AsyncTools::verify_round`] (the client splits it
/// into requests sent at once), scored as [`rstar_verifier::verify`] scores it in process.
fn score_remotely<T: rstar_episode::episode::TextTokenizer>(
    episodes: Vec<Episode<T>>,
    prompts: &[Prompt],
    samples: usize,
    tools: &dyn AsyncTools,
    stats: RolloutStats,
) -> Result<RolloutOutput, Error> {
    let mut trajectories = episodes
        .into_iter()
        .map(Episode::finish)
        .collect::<Result<Vec<Trajectory>, _>>()?;
    let truths = || prompts.iter().flat_map(|p| std::iter::repeat_n(p, samples));
    let answers = trajectories
        .iter()
        .zip(truths())
        .map(|(t, p)| {
            rstar_verifier::VerifyItem::new(
                t.assistant_text(),
                p.answer.clone(),
                rstar_verifier::Mode::Integer,
            )
        })
        .collect();
    let verdicts = tools.verify_round(answers)?;
    if verdicts.len() != trajectories.len() {
        return Err(Error::OutcomeCount {
            expected: trajectories.len(),
            got: verdicts.len(),
        });
    }
    for ((t, v), p) in trajectories.iter_mut().zip(verdicts).zip(truths()) {
        if let Some(message) = v.error {
            // As in process: a ground truth that is not an integer fails the rollout.
            return Err(Error::Problem {
                id: p.id.clone(),
                message,
            });
        }
        t.answer = v.extracted;
        t.reward = Some(f32::from(v.reward));
    }
    Ok(RolloutOutput {
        trajectories,
        stats,
    })
}

/// Summary statistics of a set of trajectories (evaluation and RL metrics); defined in
/// `rstar-analysis`, which reads them back from `metrics.jsonl` and `eval.jsonl`.
pub use rstar_episode::records::TrajectoryStats;

#[cfg(test)]
mod tests {
    use super::*;
    use rstar_episode::toolcall::OutcomeKind;

    #[test]
    fn seeds_of_rounds_differ_and_are_stable() {
        assert_eq!(mix_seed(1, 2), mix_seed(1, 2));
        assert_ne!(mix_seed(1, 2), mix_seed(1, 3));
        assert_ne!(mix_seed(1, 0), mix_seed(2, 0));
    }

    #[test]
    fn sandbox_results_map_to_outcomes() {
        let mut r = rstar_toolenv::ToolResult::internal("worker died");
        let o = outcome_of(&r);
        assert_eq!(o.kind, OutcomeKind::Error);
        assert!(o.text.contains("SandboxError: worker died"), "{}", o.text);
        r.outcome = rstar_toolenv::Outcome::Output;
        r.message = None;
        r.stdout = "42\n".into();
        let o = outcome_of(&r);
        assert_eq!(o.kind, OutcomeKind::Output);
        assert_eq!(o.stdout(), Some("42\n"));
        r.outcome = rstar_toolenv::Outcome::Timeout;
        assert_eq!(outcome_of(&r).kind, OutcomeKind::Timeout);
    }
}
