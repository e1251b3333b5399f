//! One GRPO-RoC step: sample prompts, roll out `2G` each (temperature from the stage), verify,
//! reject equal-reward groups, down-sample with RoC to `G` (or, with `roc` off, roll out `G` and
//! keep them), GRPO advantages, old log-probs recomputed before the update, the clipped loss with
//! tool tokens masked, optimizer updates.

use std::collections::BTreeMap;
use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rstar_curriculum::Stage;
use rstar_grpo::{GlobalBatch, PolicyLossInputs, group_advantages, policy_loss};
use rstar_policy::{Qwen, Sampling, Tokenizer, sequence_logprobs};
use rstar_roc::{RocConfig, TraceSummary, reject_equal_reward, select};
use serde::{Deserialize, Serialize};

use super::config::RlOptions;
use super::optim::{clip_global_norm, pack};
use crate::episode::{Limits, Trajectory};
use crate::error::AgentError;
use crate::rollout::{Prompt, RolloutConfig, ToolExecutor, TrajectoryStats, mix_seed, rollout};
use crate::template::TemplateFormat;
use crate::toolcall::OutcomeKind;

/// The limits of a stage on top of the compact defaults.
pub fn stage_limits(stage: &Stage) -> Limits {
    Limits {
        max_assistant_turns: stage.max_assistant_turns as usize,
        max_response_tokens: stage.max_response_tokens as usize,
        ..Limits::compact()
    }
}

/// What RoC reads of a trajectory: the reward, calls by outcome, answer tags, turns.
pub fn trace_summary(t: &Trajectory) -> TraceSummary {
    let (mut ok, mut failed, mut timed_out, mut parse) = (0, 0, 0, 0);
    for c in &t.tool_calls {
        match c.outcome.kind {
            OutcomeKind::Output | OutcomeKind::NoOutput => ok += 1,
            OutcomeKind::Error => failed += 1,
            OutcomeKind::Timeout => timed_out += 1,
            OutcomeKind::ParseFailure => parse += 1,
        }
    }
    let text = t.assistant_text();
    let opens = text.matches("<answer>").count() as u32;
    let closes = text.matches("</answer>").count() as u32;
    TraceSummary::new(f64::from(t.reward.unwrap_or(0.0)))
        .with_calls(ok, failed, timed_out, parse)
        .with_answers(opens.min(closes), opens != closes)
        .with_turns(t.assistant_turns() as u32)
}

/// One RL step's record: a line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 1-based RL step of the run.
    pub step: u64,
    /// Curriculum stage index and name.
    pub stage: usize,
    /// The stage's name.
    pub stage_name: String,
    /// Whether RoC was on.
    pub roc: bool,
    /// Prompts sampled.
    pub prompts: usize,
    /// Rollouts made (`2G` or `G` per prompt).
    pub rollouts: usize,
    /// Statistics of all rollouts: reward (accuracy), length, truncation, tool use.
    pub all: TrajectoryStats,
    /// Statistics of the trajectories kept for the update.
    pub kept: TrajectoryStats,
    /// Groups dropped because every reward in them was equal.
    pub equal_reward_groups: usize,
    /// RoC and equal-reward metrics, named as the reference names them.
    pub roc_metrics: BTreeMap<String, f64>,
    /// Fraction of tokens where the ratio was clipped (last mini-batch).
    pub clip_frac: f32,
    /// Mean `old_logp − logp` (verl's `ppo_kl`, last mini-batch).
    pub ppo_kl: f32,
    /// Mean per-token entropy of the policy on the kept assistant tokens.
    pub entropy: f32,
    /// The policy-gradient loss (mean over mini-batches).
    pub pg_loss: f32,
    /// Global gradient norm before clipping (mean over mini-batches).
    pub grad_norm: f64,
    /// Optimizer updates made (0 when no group survived).
    pub updates: usize,
    /// Seconds generating.
    pub time_rollout: f64,
    /// Seconds running tools.
    pub time_tools: f64,
    /// Seconds computing old log-probs, losses and updates.
    pub time_update: f64,
    /// Tokens sampled per second of generation.
    pub rollout_tokens_per_sec: f64,
    /// The curriculum's decision after this step (`stay`, `advance to …`, `finish`).
    pub decision: String,
}

/// Draws `n` prompts without replacement (all of them when the pool is smaller).
pub fn sample_prompts(pool: &[Prompt], n: usize, seed: u64) -> Vec<Prompt> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = n.min(pool.len());
    let mut idx = sample(&mut rng, pool.len(), n).into_vec();
    idx.sort_unstable();
    idx.into_iter().map(|i| pool[i].clone()).collect()
}

/// The inputs of one step besides the model and optimizer.
#[derive(Debug)]
pub struct StepInputs<'a> {
    /// 1-based step of the run.
    pub step: u64,
    /// The stage and its index.
    pub stage: &'a Stage,
    /// Its index.
    pub stage_index: usize,
    /// The prompts of this stage to draw from.
    pub pool: &'a [Prompt],
    /// Options.
    pub options: &'a RlOptions,
    /// The run's seed.
    pub seed: u64,
}

/// Runs one GRPO(-RoC) step and returns the updated model, the record (without the curriculum
/// decision) and the step's trajectories (all rollouts).
///
/// # Errors
/// Rollout, RoC, advantage and loss errors.
pub fn step(
    mut model: Qwen,
    optimizer: &mut ModuleOptimizer,
    tokenizer: &Tokenizer,
    inputs: &StepInputs<'_>,
    executor: &mut dyn ToolExecutor,
) -> Result<(Qwen, StepRecord, Vec<Trajectory>), AgentError> {
    let o = inputs.options;
    let g = o.group_size;
    let step_seed = mix_seed(inputs.seed, 0x5254_0000 + inputs.step);
    let prompts = sample_prompts(inputs.pool, o.prompts_per_step, step_seed);
    let samples = if o.roc { 2 * g } else { g };
    let config = RolloutConfig {
        template: TemplateFormat::Compact,
        limits: stage_limits(inputs.stage),
        sampling: Sampling::Temperature {
            temperature: inputs.stage.temperature as f32,
        },
        seed: step_seed,
        max_batch: 0,
        eos: Vec::new(),
    };
    let policy = model.valid();
    let out = rollout(&policy, tokenizer, &prompts, samples, &config, executor)?;
    let trajectories = out.trajectories;
    let uids: Vec<&str> = trajectories.iter().map(|t| t.id.as_str()).collect();
    let summaries: Vec<TraceSummary> = trajectories.iter().map(trace_summary).collect();

    // Equal-reward rejection, then RoC (or nothing more without it).
    let (kept, roc_metrics) = if o.roc {
        let half = (g / 2).min(2);
        let roc = RocConfig {
            keep: g,
            min_failures: half,
            min_successes: half,
            reject_equal_reward: true,
            seed: step_seed,
            ..RocConfig::paper()
        };
        let s = select(&uids, &summaries, &roc)?;
        (s.kept, s.metrics)
    } else {
        let rewards: Vec<f64> = summaries.iter().map(|s| s.reward).collect();
        reject_equal_reward(&uids, &rewards)?
    };
    let equal_reward_groups = roc_metrics
        .get("reject_equal_reward/solve_equal_total")
        .copied()
        .unwrap_or(0.0) as usize;
    let kept_trajectories: Vec<Trajectory> =
        kept.iter().map(|&i| trajectories[i].clone()).collect();

    let started = Instant::now();
    let (mut clip_frac, mut ppo_kl, mut entropy, mut pg_loss, mut grad_norm) =
        (0.0f32, 0.0f32, 0.0f32, 0.0f32, 0.0f64);
    let mut updates = 0;
    if !kept.is_empty() {
        let rewards: Vec<f32> = kept_trajectories
            .iter()
            .map(|t| t.reward.unwrap_or(0.0))
            .collect();
        let groups: Vec<&str> = kept_trajectories.iter().map(|t| t.id.as_str()).collect();
        let advantages = group_advantages(&rewards, &groups, &o.grpo.advantage)?;
        let rows: Vec<(Vec<u32>, Vec<f32>)> = kept_trajectories
            .iter()
            .map(|t| {
                let mut ids = t.prompt_ids.clone();
                ids.extend_from_slice(&t.response_ids);
                let mut w = vec![0.0f32; t.prompt_ids.len()];
                w.extend(t.loss_mask.iter().map(|&m| f32::from(m)));
                (ids, w)
            })
            .collect();
        let device = model.device();
        let inner = policy.device();
        let n = rows.len();
        let per = n.div_ceil(o.mini_batches.min(n));
        let chunks: Vec<Vec<usize>> = (0..n)
            .collect::<Vec<_>>()
            .chunks(per)
            .map(<[usize]>::to_vec)
            .collect();
        // Old log-probs: the sampling policy, recomputed before any update.
        let mut olds = Vec::with_capacity(chunks.len());
        for chunk in &chunks {
            let packed: Vec<(&[u32], &[f32])> = chunk
                .iter()
                .map(|&i| (rows[i].0.as_slice(), rows[i].1.as_slice()))
                .collect();
            let (tokens, _, _) = pack(&packed, &inner);
            let (old, _) = sequence_logprobs(&policy, tokens);
            olds.push(old.into_data());
        }
        for (chunk, old) in chunks.iter().zip(olds) {
            let packed: Vec<(&[u32], &[f32])> = chunk
                .iter()
                .map(|&i| (rows[i].0.as_slice(), rows[i].1.as_slice()))
                .collect();
            let (tokens, mask, len) = pack(&packed, &device);
            let adv: Vec<f32> = chunk
                .iter()
                .flat_map(|&i| std::iter::repeat_n(advantages[i], len - 1))
                .collect();
            let adv = Tensor::<2>::from_data(TensorData::new(adv, [chunk.len(), len - 1]), &device);
            let old = Tensor::<2>::from_data(old, &device);
            let (logp, ent) = sequence_logprobs(&model, tokens);
            let count = mask.clone().sum().into_scalar::<f32>().max(1.0);
            entropy = (ent.detach() * mask.clone()).sum().into_scalar::<f32>() / count;
            let loss = policy_loss(
                &o.grpo,
                PolicyLossInputs::new(logp, old, adv, mask),
                &GlobalBatch::new(),
            )?;
            clip_frac = loss.metrics.clip_frac;
            ppo_kl = loss.metrics.ppo_kl;
            pg_loss += loss.metrics.pg_loss / chunks.len() as f32;
            let mut grads = GradientsParams::from_grads(loss.loss.backward(), &model);
            grad_norm += clip_global_norm(&model, &mut grads, o.grad_clip) / chunks.len() as f64;
            model = optimizer.step(o.lr, model, grads);
            updates += 1;
        }
    }
    let time_update = started.elapsed().as_secs_f64();
    let record = StepRecord {
        step: inputs.step,
        stage: inputs.stage_index,
        stage_name: inputs.stage.name.clone(),
        roc: o.roc,
        prompts: prompts.len(),
        rollouts: trajectories.len(),
        all: TrajectoryStats::of(&trajectories),
        kept: TrajectoryStats::of(&kept_trajectories),
        equal_reward_groups,
        roc_metrics,
        clip_frac,
        ppo_kl,
        entropy,
        pg_loss,
        grad_norm,
        updates,
        time_rollout: out.stats.generate_secs,
        time_tools: out.stats.tool_secs,
        time_update,
        rollout_tokens_per_sec: out.stats.tokens_per_sec(),
        decision: String::new(),
    };
    Ok((model, record, trajectories))
}

/// The problems of `pool` whose pass rate over `k` samples of `model` is below `below` (the
/// curriculum's hard stage), checked on the first `limit` problems (`0`: all).
///
/// # Errors
/// Rollout errors.
#[allow(clippy::too_many_arguments)]
pub fn hard_problems(
    model: &Qwen,
    tokenizer: &Tokenizer,
    pool: &[Prompt],
    limit: usize,
    k: u32,
    below: f64,
    stage: &Stage,
    seed: u64,
    executor: &mut dyn ToolExecutor,
) -> Result<Vec<Prompt>, AgentError> {
    let candidates = if limit == 0 {
        pool
    } else {
        &pool[..limit.min(pool.len())]
    };
    let k = k.max(1) as usize;
    let config = RolloutConfig {
        template: TemplateFormat::Compact,
        limits: stage_limits(stage),
        sampling: Sampling::Temperature {
            temperature: stage.temperature as f32,
        },
        seed,
        max_batch: 0,
        eos: Vec::new(),
    };
    let out = rollout(model, tokenizer, candidates, k, &config, executor)?;
    Ok(candidates
        .iter()
        .enumerate()
        .filter(|(p, _)| {
            let solved = out.trajectories[p * k..(p + 1) * k]
                .iter()
                .filter(|t| t.reward.unwrap_or(0.0) > 0.0)
                .count();
            (solved as f64 / k as f64) < below
        })
        .map(|(_, prompt)| prompt.clone())
        .collect())
}
