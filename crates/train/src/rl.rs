//! One GRPO-RoC step: sample prompts, roll out `2G` each (temperature from the stage), verify,
//! reject equal-reward groups, down-sample with RoC to `G` (or, with `roc` off, roll out `G` and
//! keep them), GRPO advantages, old log-probs recomputed before the update, the clipped loss with
//! tool tokens masked, optimizer updates.
//!
//! The rollout goes through one of two drivers (`rl.rollout_driver`): the lock-step
//! [`rollout`] (the default; bit-reproducible, what resume equality relies on) or the
//! scheduled [`scheduled_rollout`] (`rl.engines` local engines holding copies of the current
//! policy, kept across a stage's steps in [`LocalEngines`], tool calls on the same sandbox pool,
//! per-turn seeds derived from the step's seed).
//!
//! A step is [`collect`] (prompts, publication, rollouts, RoC: a [`StepBatch`]) then
//! [`train_on`] (the update and the record); [`step`] runs both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rstar_curriculum::Stage;
use rstar_grpo::{GlobalBatch, GrpoConfig, PolicyLossInputs, group_advantages, policy_loss};
use rstar_policy::{Qwen, Tokenizer, sequence_loss, sequence_target_logprobs};
use rstar_roc::{TraceSummary, reject_equal_reward, select};
use serde::{Deserialize, Serialize};

use super::config::{RlOptions, RocOptions, RolloutDriver};
use super::engines::{RemoteRollouts, logprob_gap, weight_version};
pub use super::optim::{MICRO_BATCH_TOKENS, micro_batches};
use super::optim::{
    clip_global_norm, pack, packed, rl_learning_rate, sequence_row, shifted_values,
    unshifted_values,
};
use crate::error::Error;
pub use crate::rl_engines::{LocalEngines, ScheduledRollout, scheduled_rollout};
use rstar_engine::SharedTokenizer;
use rstar_episode::episode::Trajectory;
use rstar_episode::template::TemplateFormat;
use rstar_episode::toolcall::OutcomeKind;
use rstar_rollout::scheduled::{AsyncTools, ScheduleConfig, run_scheduled_blocking};
use rstar_rollout::setup::RolloutSetup;
use rstar_rollout::timing::ToolLatency;
use rstar_rollout::{Prompt, RolloutConfig, RolloutOutput, TrajectoryStats, mix_seed, rollout};

/// The rollout setup of a stage: the template's base limits with the stage's token and turn
/// budgets, sampled at the stage's temperature (no EOS ids: turns end on the stop strings).
pub fn stage_setup(template: TemplateFormat, stage: &Stage) -> RolloutSetup {
    RolloutSetup::new(template)
        .budget(
            stage.max_response_tokens as usize,
            stage.max_assistant_turns as usize,
        )
        .temperature(stage.temperature as f32)
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
    /// Whether RoC was on (`rl.roc.mode` not `off`).
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
    /// The rollout correction's metrics over the kept tokens, named as verl names them
    /// (`rollout_corr/rollout_is_mean`, `rollout_corr/kl`, …); absent when it is off.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rollout_corr: BTreeMap<String, f64>,
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
    /// The most sequences in one generation call of the lock-step driver (at most
    /// `rl.max_batch` when set; 0 with the scheduled driver).
    #[serde(default)]
    pub largest_call: usize,
    /// Seconds of the whole step (rollout, tools, update, bookkeeping; not the evaluation).
    #[serde(default)]
    pub time_step: f64,
    /// The curriculum's decision after this step (`stay`, `advance to …`, `finish`).
    pub decision: String,
    /// Remote engines: the weight version that wrote every rollout of the step (`step-N`,
    /// the policy after `N` RL steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
    /// The largest `|engine − trainer|` log-prob over the step's assistant tokens, when the
    /// engines report log-probs (remote engines): the check that weight sync and
    /// tokenisation are right.
    #[serde(
        default,
        rename = "rollout/logprob_diff_max",
        skip_serializing_if = "Option::is_none"
    )]
    pub logprob_diff_max: Option<f64>,
    /// The mean of the same differences.
    #[serde(
        default,
        rename = "rollout/logprob_diff_mean",
        skip_serializing_if = "Option::is_none"
    )]
    pub logprob_diff_mean: Option<f64>,
    /// Remote engines: the bytes the step's publication wrote to the publish directory (or
    /// pushed over HTTP, times the engines): the adapter's files with `rl.lora` (and
    /// `rl.publish_lora: adapter`), else the model's; absent when nothing was published.
    #[serde(
        default,
        rename = "publish/bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub publish_bytes: Option<u64>,
    /// The seconds from writing the publication to the last engine serving it.
    #[serde(
        default,
        rename = "publish/secs",
        skip_serializing_if = "Option::is_none"
    )]
    pub publish_secs: Option<f64>,
    /// The scheduled driver: what each engine did in the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<DispatchRecord>,
    /// The step's tool calls: latency and queue-wait percentiles, and the calls over
    /// `tools.latency_budget_secs`; absent when the tools do not time their calls or none
    /// was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_latency: Option<ToolLatency>,
    /// Asynchronous RL (`rl.max_staleness ≥ 1`): the batch's version, its groups by staleness,
    /// the dropped ones, and the engines' and the trainer's idle seconds. Absent in the
    /// synchronous loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asynchronous: Option<crate::rl_async::AsyncRecord>,
}

/// What each engine did in a scheduled step (`metrics.jsonl`'s `dispatch`): the dispatch
/// decisions' outcome, and the engines lost on the way. The per-engine lists follow
/// `engines`; `idle_secs_total`, `idle_secs_max`, `redispatched` and `engines_lost` are also
/// TensorBoard scalars (`dispatch/…`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DispatchRecord {
    /// The engines the step's rollouts were dispatched to (URLs, or local names).
    pub engines: Vec<String>,
    /// Per engine, the model tokens of the turns it wrote.
    pub tokens: Vec<u64>,
    /// Per engine, the turns it wrote.
    pub turns: Vec<u64>,
    /// Per engine, the seconds of the dispatch during which it had no turn to write.
    pub idle_secs: Vec<f64>,
    /// Per engine, the KV capacity the dispatch checked reservations against: what the engine
    /// reported free at the step's start (`/metrics`), else its configured capacity.
    pub kv_capacity: Vec<u64>,
    /// Per engine, the lowest capacity during the step, as the load read from `/metrics`
    /// every `rl.load_refresh_secs` moved it (other clients' KV taken off).
    #[serde(default)]
    pub kv_capacity_low: Vec<u64>,
    /// Load reports read during the step, all engines together.
    #[serde(default)]
    pub load_reports: u64,
    /// The summed idle seconds.
    pub idle_secs_total: f64,
    /// The largest idle seconds of one engine.
    pub idle_secs_max: f64,
    /// Engines that stopped answering during the step (their rollouts went on elsewhere).
    pub lost: Vec<String>,
    /// `lost.len()`.
    pub engines_lost: usize,
    /// Turns that failed on a lost engine and were written again by another.
    pub redispatched: u64,
}

impl DispatchRecord {
    /// The record of a dispatch over engines named `engines`.
    pub fn new(engines: Vec<String>, stats: &rstar_scheduler::DispatchStats) -> Self {
        let idle = stats.idle_secs();
        let lost: Vec<String> = stats
            .lost_engines
            .iter()
            .filter_map(|&e| engines.get(e).cloned())
            .collect();
        DispatchRecord {
            tokens: stats.tokens.clone(),
            turns: stats.turns.clone(),
            kv_capacity: stats.capacity.clone(),
            kv_capacity_low: stats.capacity_low.clone(),
            load_reports: stats.load_reports,
            idle_secs_total: idle.iter().sum(),
            idle_secs_max: idle.iter().copied().fold(0.0, f64::max),
            idle_secs: idle,
            engines_lost: lost.len(),
            lost,
            redispatched: stats.redispatched,
            engines,
        }
    }
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
    /// The prompt and tool-call layout (compact for the character model, ChatML for HF
    /// tokenizers).
    pub template: TemplateFormat,
    /// `tools.latency_budget_secs`: tool calls slower than this are counted in the record's
    /// `tool_latency.over_budget`.
    pub tool_latency_budget_secs: Option<f64>,
    /// The version of the policy that rolls out (the updates it has had), stamped on its
    /// turns: `None` is the synchronous loop's `step − 1`; the asynchronous producer
    /// ([`crate::rl_async`]) names the older version it rolls out with.
    pub policy_version: Option<u64>,
}

/// Where one RL step's rollouts run. The lock-step driver needs `tools` alone; the scheduled
/// driver (`rl.rollout_driver = "scheduled"`) runs when `scheduled` is given, on the remote
/// engines when there are some, else on local engines: those of `engines`, kept across the
/// steps of a stage, or spawned for the step.
pub struct StepTools<'a> {
    /// The tools of the lock-step driver.
    pub tools: &'a dyn AsyncTools,
    /// The same tools, shared with the scheduled driver's tasks.
    pub scheduled: Option<Arc<dyn AsyncTools>>,
    /// Remote engines, published to before each step.
    pub remote: Option<&'a RemoteRollouts>,
    /// Local engines kept across steps (a stage's), their weights swapped each step.
    pub engines: Option<&'a mut LocalEngines>,
}

impl std::fmt::Debug for StepTools<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepTools")
            .field("scheduled", &self.scheduled.is_some())
            .field("remote", &self.remote.map(RemoteRollouts::urls))
            .field("engines", &self.engines)
            .finish()
    }
}

impl<'a> StepTools<'a> {
    /// The lock-step driver's tools alone.
    pub fn new(tools: &'a dyn AsyncTools) -> Self {
        StepTools {
            tools,
            scheduled: None,
            remote: None,
            engines: None,
        }
    }

    /// With the scheduled driver's tools (which `rl.rollout_driver = "scheduled"` then uses).
    pub fn scheduled(mut self, tools: Arc<dyn AsyncTools>) -> Self {
        self.scheduled = Some(tools);
        self
    }

    /// With remote engines.
    pub fn remote(mut self, remote: Option<&'a RemoteRollouts>) -> Self {
        self.remote = remote;
        self
    }

    /// With local engines kept across steps.
    pub fn engines(mut self, engines: &'a mut LocalEngines) -> Self {
        self.engines = Some(engines);
        self
    }
}

/// One GRPO(-RoC) step: [`collect`] with [`rollout_policy`], then [`train_step`]. Returns the updated model, the record
/// (without the curriculum decision) and the step's trajectories (all rollouts). The step
/// computes in `rl.precision`; the returned model computes as it came.
///
/// # Errors
/// Rollout, RoC, advantage and loss errors.
pub fn step(
    model: Qwen,
    optimizer: &mut ModuleOptimizer,
    tokenizer: &Tokenizer,
    inputs: &StepInputs<'_>,
    tools: StepTools<'_>,
) -> Result<(Qwen, StepRecord, Vec<Trajectory>), Error> {
    // The sampling policy: rolls out, and is the policy before the update ([`train_step`]).
    let policy = rollout_policy(&model, inputs.options);
    let batch = collect(&policy, tokenizer, inputs, tools)?;
    let (model, record, trajectories, _) = train_step(model, optimizer, batch, inputs)?;
    Ok((model, record, trajectories))
}

/// The policy that rolls out for the steps of `options`: `model` in the step's precision,
/// without autodiff (what [`step`] samples with, and what the asynchronous producer is given).
pub fn rollout_policy(model: &Qwen, options: &RlOptions) -> Qwen {
    model.clone().with_precision(options.precision).valid()
}

/// The training half of [`step`] on a batch another thread collected (the asynchronous
/// loop, [`crate::rl_async`]): [`train_on`] in the step's precision, where the policy before
/// the update is the proximal one (the clipped ratio's), and the batch's engine log-probs
/// are the behaviour ones (the rollout correction's). Returns the updated model, the record,
/// the trajectories, and the updated policy to publish ([`rollout_policy`] of the new model).
///
/// # Errors
/// Advantage and loss errors.
pub fn train_step(
    model: Qwen,
    optimizer: &mut ModuleOptimizer,
    batch: StepBatch,
    inputs: &StepInputs<'_>,
) -> Result<(Qwen, StepRecord, Vec<Trajectory>, Qwen), Error> {
    let o = inputs.options;
    let previous = (model.precision, model.checkpointing);
    let model = model
        .with_precision(o.precision)
        .with_gradient_checkpointing(o.gradient_checkpointing);
    let proximal = model.valid();
    let (model, record, trajectories) = train_on(model, &proximal, optimizer, batch, inputs)?;
    let published = model.valid();
    Ok((
        model
            .with_precision(previous.0)
            .with_gradient_checkpointing(previous.1),
        record,
        trajectories,
        published,
    ))
}

/// What a step's rollouts produced: everything [`train_on`] needs, and the record's rollout
/// half. The trajectories keep their engines' log-probs and turn versions.
#[derive(Debug, Clone)]
pub struct StepBatch {
    /// Prompts drawn.
    pub prompts: usize,
    /// Every rollout, prompt-major.
    pub trajectories: Vec<Trajectory>,
    /// The indices of the trajectories RoC kept for the update.
    pub kept: Vec<usize>,
    /// RoC's and equal-reward rejection's metrics.
    pub roc_metrics: BTreeMap<String, f64>,
    /// The rollout's timing and throughput.
    pub stats: rstar_rollout::RolloutStats,
    /// The engines' log-prob gap to the trainer (remote engines).
    pub gap: Option<(f64, f64)>,
    /// The scheduled driver's dispatch.
    pub dispatch: Option<DispatchRecord>,
    /// The step's tool-call latencies.
    pub tool_latency: Option<ToolLatency>,
    /// The weight version remote engines served.
    pub weight_version: Option<String>,
    /// What the publication to remote engines sent.
    pub published: Option<super::engines::Published>,
}

/// The rollout half of a step: draws the step's prompts, publishes `policy` to the remote
/// engines (or swaps it into the kept local ones), rolls out `2G` per prompt and applies RoC.
/// `policy` is the model that samples (in the step's precision, without autodiff).
///
/// # Errors
/// Rollout, publication and RoC errors.
pub fn collect(
    policy: &Qwen,
    tokenizer: &Tokenizer,
    inputs: &StepInputs<'_>,
    tools: StepTools<'_>,
) -> Result<StepBatch, Error> {
    let o = inputs.options;
    let step_seed = step_seed(inputs.seed, inputs.step);
    let prompts = sample_prompts(inputs.pool, o.prompts_per_step, step_seed);
    let StepTools {
        tools,
        scheduled,
        remote,
        engines,
    } = tools;
    let version = remote.map(|_| {
        weight_version(
            inputs
                .policy_version
                .unwrap_or(inputs.step.saturating_sub(1)),
        )
    });
    let published = match (remote, &version) {
        (Some(remote), Some(version)) => remote.publish(policy, version)?,
        _ => None,
    };
    // Only this step's calls: not the evaluation's or the hard stage's check before it.
    if let Some(t) = tools.timings() {
        t.take();
    }
    let rolled = step_rollouts(
        policy,
        tokenizer,
        &prompts,
        inputs,
        step_seed,
        tools,
        scheduled,
        remote.zip(version.as_deref()),
        engines,
    )?;
    let out = rolled.output;
    let tool_latency = tools
        .timings()
        .and_then(|t| t.take_summary(inputs.tool_latency_budget_secs));
    let gap = rolled
        .engine_logprobs
        .as_deref()
        .and_then(|lps| logprob_gap(policy, &out.trajectories, lps));
    let (kept, roc_metrics) = select_kept(&out.trajectories, &o.roc, o.group_size, step_seed)?;
    Ok(StepBatch {
        prompts: prompts.len(),
        trajectories: out.trajectories,
        kept,
        roc_metrics,
        stats: out.stats,
        gap,
        dispatch: rolled.dispatch,
        tool_latency,
        weight_version: version,
        published,
    })
}

/// The training half of a step: the GRPO update of `model` on the trajectories `batch` kept,
/// and the step's record. `policy` is the model that sampled `batch` (its old log-probs).
///
/// # Errors
/// Advantage and loss errors.
pub fn train_on(
    model: Qwen,
    policy: &Qwen,
    optimizer: &mut ModuleOptimizer,
    batch: StepBatch,
    inputs: &StepInputs<'_>,
) -> Result<(Qwen, StepRecord, Vec<Trajectory>), Error> {
    let o = inputs.options;
    let trajectories = batch.trajectories;
    let equal_reward_groups = batch
        .roc_metrics
        .get("reject_equal_reward/solve_equal_total")
        .copied()
        .unwrap_or(0.0) as usize;
    let kept_trajectories: Vec<Trajectory> = batch
        .kept
        .iter()
        .map(|&i| trajectories[i].clone())
        .collect();
    let started = Instant::now();
    let (model, u) = update(
        model,
        policy,
        optimizer,
        &kept_trajectories,
        o,
        inputs.step,
        step_lr(o, inputs.step) * inputs.stage.lr_scale,
    )?;
    let time_update = started.elapsed().as_secs_f64();
    let record = StepRecord {
        step: inputs.step,
        stage: inputs.stage_index,
        stage_name: inputs.stage.name.clone(),
        roc: o.roc.is_on(),
        prompts: batch.prompts,
        rollouts: trajectories.len(),
        all: TrajectoryStats::of(&trajectories),
        kept: TrajectoryStats::of(&kept_trajectories),
        equal_reward_groups,
        roc_metrics: batch.roc_metrics,
        rollout_corr: u.correction,
        clip_frac: u.clip_frac,
        ppo_kl: u.ppo_kl,
        entropy: u.entropy,
        pg_loss: u.pg_loss,
        grad_norm: u.grad_norm,
        updates: u.updates,
        time_rollout: batch.stats.generate_secs,
        time_tools: batch.stats.tool_secs,
        time_update,
        rollout_tokens_per_sec: batch.stats.tokens_per_sec(),
        largest_call: batch.stats.largest_call,
        time_step: 0.0,
        decision: String::new(),
        weight_version: batch.weight_version,
        logprob_diff_max: batch.gap.map(|g| g.0),
        logprob_diff_mean: batch.gap.map(|g| g.1),
        publish_bytes: batch.published.map(|p| p.bytes),
        publish_secs: batch.published.map(|p| p.secs),
        dispatch: batch.dispatch,
        tool_latency: batch.tool_latency,
        asynchronous: None,
    };
    Ok((model, record, trajectories))
}

/// A step's rollouts, with the engines' log-probs of each trajectory's assistant tokens when
/// remote engines wrote them.
struct StepRollouts {
    output: RolloutOutput,
    engine_logprobs: Option<Vec<Option<Vec<f32>>>>,
    dispatch: Option<DispatchRecord>,
}

/// The step's rollouts: `rl.roc`'s number per prompt (2G with RoC, G without), by the
/// scheduled driver when it is chosen and async tools are there (on the remote engines when
/// given, with the version they must serve), else lock-step with per-rollout seeds.
#[allow(
    clippy::too_many_arguments,
    reason = "the step's parts, each used once; a struct would only rename them"
)]
fn step_rollouts(
    policy: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    inputs: &StepInputs<'_>,
    step_seed: u64,
    tools: &dyn AsyncTools,
    async_tools: Option<Arc<dyn AsyncTools>>,
    remote: Option<(&RemoteRollouts, &str)>,
    engines: Option<&mut LocalEngines>,
) -> Result<StepRollouts, Error> {
    let o = inputs.options;
    let samples = o.roc.rollouts(o.group_size);
    // The rollout correction weighs the loss with the engines' own log-probs: keep them on
    // the trajectories, and refuse engines that do not report them.
    let keep_logprobs = !o.grpo.rollout_correction.is_off();
    // The version of the weights that roll out: the policy after `step − 1` RL steps.
    let local_version = weight_version(
        inputs
            .policy_version
            .unwrap_or(inputs.step.saturating_sub(1)),
    );
    match (o.rollout_driver, async_tools, remote) {
        (RolloutDriver::Scheduled, Some(tools), Some((remote, version))) => {
            let setup = stage_setup(inputs.template, inputs.stage);
            let stops = setup.stop_strings();
            let alive = remote.alive();
            let generators = remote.generators(
                &stops,
                inputs.stage.temperature as f32,
                version,
                keep_logprobs,
            )?;
            let names: Vec<String> = alive.iter().map(|&i| remote.urls()[i].clone()).collect();
            let out = run_scheduled_blocking(
                generators,
                SharedTokenizer(Arc::new(tokenizer.clone())),
                tools,
                prompts,
                samples,
                &ScheduleConfig {
                    // Polled in the background: free KV that other clients take or give
                    // back during the step.
                    load_refresh_ms: (o.load_refresh_secs * 1000.0).round() as u64,
                    keep_logprobs,
                    ..setup.schedule(step_seed, o.dispatch)
                },
            )
            .map_err(|e| match e {
                rstar_rollout::Error::Scheduler(lost @ rstar_scheduler::Error::EnginesLost { .. }) => {
                    for &i in &alive {
                        remote.lose(i);
                    }
                    Error::Engine(rstar_engine::Error::Remote {
                        url: names.join(","),
                        message: format!(
                            "{lost}; restart them and resume the run from its last checkpoint (rstar train --resume RUN)"
                        ),
                    })
                }
                other => other.into(),
            })?;
            for &e in &out.dispatch.lost_engines {
                remote.lose(alive[e]);
            }
            Ok(StepRollouts {
                dispatch: Some(DispatchRecord::new(names, &out.dispatch)),
                output: out.rollout,
                engine_logprobs: Some(out.engine_logprobs),
            })
        }
        (RolloutDriver::Scheduled, Some(tools), None) => {
            let options = ScheduledRollout {
                template: inputs.template,
                stage: inputs.stage,
                seed: step_seed,
                engines: o.engines.count(),
                dispatch: o.dispatch,
                keep_logprobs,
                weight_version: Some(&local_version),
            };
            let mut fresh = LocalEngines::new();
            engines
                .unwrap_or(&mut fresh)
                .roll_out(policy, tokenizer, prompts, samples, &options, tools)
                .map(|(output, dispatch)| StepRollouts {
                    output,
                    engine_logprobs: None,
                    dispatch: Some(dispatch),
                })
        }
        _ => {
            let config = RolloutConfig {
                weight_version: Some(local_version),
                ..stage_setup(inputs.template, inputs.stage).lock_step(step_seed, o.max_batch)
            };
            let output = rollout(policy, tokenizer, prompts, samples, &config, tools)?;
            Ok(StepRollouts {
                output,
                engine_logprobs: None,
                dispatch: None,
            })
        }
    }
}

/// Equal-reward rejection, then RoC (or nothing more without it): the indices of the kept
/// trajectories and the selection's metrics.
fn select_kept(
    trajectories: &[Trajectory],
    roc: &RocOptions,
    group_size: usize,
    step_seed: u64,
) -> Result<(Vec<usize>, BTreeMap<String, f64>), Error> {
    let uids: Vec<&str> = trajectories.iter().map(|t| t.id.as_str()).collect();
    let summaries: Vec<TraceSummary> = trajectories.iter().map(trace_summary).collect();
    Ok(match roc.select_config(group_size, step_seed) {
        Some(config) => {
            let s = select(&uids, &summaries, &config)?;
            (s.kept, s.metrics)
        }
        None if roc.reject_equal_reward => {
            let rewards: Vec<f64> = summaries.iter().map(|s| s.reward).collect();
            reject_equal_reward(&uids, &rewards)?
        }
        None => ((0..trajectories.len()).collect(), BTreeMap::new()),
    })
}

/// What [`update`] reports: the last mini-batch's entropy, clip fraction and KL, the mean
/// loss and gradient norm over mini-batches, and the number of optimizer steps.
#[derive(Debug, Clone, Default)]
struct UpdateMetrics {
    clip_frac: f32,
    ppo_kl: f32,
    entropy: f32,
    pg_loss: f32,
    grad_norm: f64,
    updates: usize,
    /// The rollout correction's metrics over the step's kept tokens (verl's names); empty
    /// when it is off.
    correction: BTreeMap<String, f64>,
}

/// The GRPO update on the kept trajectories: group advantages, then one optimizer step per
/// mini-batch, each accumulated over length-sorted micro-batches. `policy` is `model.valid()`,
/// the policy that sampled `kept`.
fn update(
    mut model: Qwen,
    policy: &Qwen,
    optimizer: &mut ModuleOptimizer,
    kept: &[Trajectory],
    o: &RlOptions,
    step: u64,
    lr: f64,
) -> Result<(Qwen, UpdateMetrics), Error> {
    let mut m = UpdateMetrics::default();
    if kept.is_empty() {
        return Ok((model, m));
    }
    let rewards: Vec<f32> = kept.iter().map(|t| t.reward.unwrap_or(0.0)).collect();
    let groups: Vec<&str> = kept.iter().map(|t| t.id.as_str()).collect();
    let advantages = group_advantages(&rewards, &groups, &o.grpo.advantage)?;
    let rows: Vec<(Vec<u32>, Vec<f32>)> = kept.iter().map(sequence_row).collect();
    let behaviour = behaviour_logprobs(kept, &o.grpo)?;
    let inner = policy.device();
    let n = rows.len();
    let per = n.div_ceil(o.mini_batches.min(n));
    let chunks: Vec<Vec<usize>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(per)
        .map(<[usize]>::to_vec)
        .collect();
    // Each mini-batch is cut into micro-batches of rows of similar length (less padding);
    // the loss of each is normalised by the mini-batch's token and sequence counts, so the
    // accumulated gradient is the mini-batch's.
    let micro: Vec<Vec<Vec<usize>>> = chunks
        .iter()
        .map(|chunk| micro_batches(chunk, &rows, MICRO_BATCH_TOKENS))
        .collect();
    // Old log-probs: the sampling policy, recomputed before any update. With one update the
    // policy that sampled is the one being updated, so the detached current log-probs are
    // the same numbers without a second forward pass.
    let olds: Option<Vec<Vec<TensorData>>> = (chunks.len() > 1).then(|| {
        micro
            .iter()
            .map(|parts| {
                parts
                    .iter()
                    .map(|part| {
                        let (tokens, _, _) = pack(&packed(part, &rows), &inner);
                        sequence_target_logprobs(policy, tokens).into_data()
                    })
                    .collect()
            })
            .collect()
    });
    // The same rates for every mini-batch of the step (the gains keep their ids).
    let lr = rl_learning_rate(&model, lr, o.gain_lr_multiplier);
    // Per kept row, the old log-probs of its assistant tokens (for the correction's metrics).
    let mut old_rows: Vec<Option<Vec<f32>>> = vec![None; n];
    for (c, parts) in micro.iter().enumerate() {
        let olds = olds.as_ref().map(|o| o[c].as_slice());
        let Some((mut grads, b, olds_seen)) = gradients(
            &model,
            &rows,
            parts,
            &advantages,
            olds,
            &o.grpo,
            o.threads,
            behaviour.as_deref(),
        )?
        else {
            continue;
        };
        for (i, values) in olds_seen {
            old_rows[i] = Some(values);
        }
        m.entropy = b.entropy;
        m.clip_frac = b.clip_frac;
        m.ppo_kl = b.ppo_kl;
        m.pg_loss += b.pg_loss / chunks.len() as f32;
        let grad_norm = clip_global_norm(&model, &mut grads, o.grad_clip);
        super::optim::check_step_finite("rl", step, f64::from(b.pg_loss), grad_norm, "rl.lr")?;
        m.grad_norm += grad_norm / chunks.len() as f64;
        model = optimizer.step(lr.clone(), model, grads);
        m.updates += 1;
    }
    if let Some(behaviour) = &behaviour {
        m.correction = step_correction_metrics(&o.grpo, &rows, behaviour, &old_rows)?;
    }
    Ok((model, m))
}

/// With the rollout correction on, each kept trajectory's behaviour log-probs: the engine's,
/// one per assistant token (`Trajectory::token_logprobs`, which every rollout path keeps when
/// the correction is on). `None` when it is off.
///
/// # Errors
/// A trajectory without one log-prob per assistant token, named.
fn behaviour_logprobs<'a>(
    kept: &'a [Trajectory],
    grpo: &GrpoConfig,
) -> Result<Option<Vec<&'a [f32]>>, Error> {
    if grpo.rollout_correction.is_off() {
        return Ok(None);
    }
    for t in kept {
        let want = t.assistant_token_count();
        if t.token_logprobs.len() != want {
            return Err(Error::Grpo(rstar_grpo::GrpoError::Config {
                field: "rollout_correction",
                reason: format!(
                    "trajectory {}#{} has {} engine log-probs for {want} assistant tokens; the rollout correction needs the engine's log-prob of every token it trains on",
                    t.id,
                    t.sample,
                    t.token_logprobs.len()
                ),
            }));
        }
    }
    Ok(Some(
        kept.iter().map(|t| t.token_logprobs.as_slice()).collect(),
    ))
}

/// verl's `rollout_corr/…` metrics over the whole step (its weights and means are per token
/// or per row, so computing them once over every kept row is verl's whole-batch
/// computation): the trainer's old log-probs against the engines', on each row's assistant
/// tokens.
fn step_correction_metrics(
    grpo: &GrpoConfig,
    rows: &[(Vec<u32>, Vec<f32>)],
    behaviour: &[&[f32]],
    old_rows: &[Option<Vec<f32>>],
) -> Result<BTreeMap<String, f64>, Error> {
    // The behaviour values of the tokens the loss sees, through the aligner the loss uses (the
    // old values come back through `unshifted_values` too): the same tokens, in order.
    let engine: Vec<Vec<f32>> = rows
        .iter()
        .zip(behaviour)
        .map(|((_, w), b)| {
            shifted_values(w, b, w.len()).map_or_else(Vec::new, |grid| unshifted_values(w, &grid))
        })
        .collect();
    let cols = engine.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let n = rows.len();
    let (mut old, mut rollout, mut mask) = (
        vec![0.0f32; n * cols],
        vec![0.0f32; n * cols],
        vec![0.0f32; n * cols],
    );
    for (i, (e, o)) in engine.iter().zip(old_rows).enumerate() {
        let Some(o) = o.as_ref().filter(|o| o.len() == e.len()) else {
            continue;
        };
        for (k, (ev, ov)) in e.iter().zip(o).enumerate() {
            rollout[i * cols + k] = *ev;
            old[i * cols + k] = *ov;
            mask[i * cols + k] = 1.0;
        }
    }
    if !mask.iter().any(|&m| m != 0.0) {
        return Ok(BTreeMap::new());
    }
    Ok(
        rstar_grpo::rollout_correction(&grpo.rollout_correction, &old, &rollout, &mask, n, cols)?
            .metrics,
    )
}

/// What one mini-batch's loss reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniBatchMetrics {
    /// The policy-gradient loss of the mini-batch.
    pub pg_loss: f32,
    /// Mean per-token entropy on the tokens in the loss.
    pub entropy: f32,
    /// Fraction of those tokens where the ratio was clipped.
    pub clip_frac: f32,
    /// Mean `old_logp − logp` over them.
    pub ppo_kl: f32,
}

/// The gradient of the GRPO loss of one mini-batch, given as `parts`, its micro-batches (row
/// indices into `rows`, each row the prompt and response ids with per-token loss weights),
/// accumulated micro-batch by micro-batch with the losses normalised by the whole
/// mini-batch's token and sequence counts, so it equals the gradient of the mini-batch in one
/// piece. `olds` are the micro-batches' old log-probs; `None` takes the detached current ones
/// (the policy being updated is the one that sampled). `None` when no token is in the loss.
///
/// # Errors
/// The loss's errors ([`Error::Grpo`]).
pub fn mini_batch_gradients(
    model: &Qwen,
    rows: &[(Vec<u32>, Vec<f32>)],
    parts: &[Vec<usize>],
    advantages: &[f32],
    olds: Option<&[TensorData]>,
    grpo: &GrpoConfig,
) -> Result<Option<(GradientsParams, MiniBatchMetrics)>, Error> {
    mini_batch_gradients_threads(model, rows, parts, advantages, olds, grpo, 1)
}

/// [`mini_batch_gradients`] with the micro-batches dealt out to `threads` threads (snake
/// order, [`super::optim::deal`]), each with its own autodiff graph on the model forked
/// ([`Module::fork`](burn::module::Module::fork)); each thread sums its micro-batches'
/// gradients and the threads' sums are added in thread order. The same gradient within f32
/// rounding (the sums run in another order), so results depend on the thread count.
///
/// # Errors
/// The loss's errors ([`Error::Grpo`]).
#[allow(clippy::too_many_arguments)] // reason: mini_batch_gradients' inputs and the thread count
pub fn mini_batch_gradients_threads(
    model: &Qwen,
    rows: &[(Vec<u32>, Vec<f32>)],
    parts: &[Vec<usize>],
    advantages: &[f32],
    olds: Option<&[TensorData]>,
    grpo: &GrpoConfig,
    threads: usize,
) -> Result<Option<(GradientsParams, MiniBatchMetrics)>, Error> {
    Ok(
        gradients(model, rows, parts, advantages, olds, grpo, threads, None)?
            .map(|(grads, metrics, _)| (grads, metrics)),
    )
}

/// [`mini_batch_gradients_threads`] with the rows' behaviour log-probs (one per weighted token,
/// indexed as `rows`) when the rollout correction is on; then also the old log-probs each row's
/// loss saw at its weighted tokens (from token 1 on), by row index.
#[allow(clippy::too_many_arguments)] // reason: mini_batch_gradients_threads' inputs and the behaviour log-probs
fn gradients(
    model: &Qwen,
    rows: &[(Vec<u32>, Vec<f32>)],
    parts: &[Vec<usize>],
    advantages: &[f32],
    olds: Option<&[TensorData]>,
    grpo: &GrpoConfig,
    threads: usize,
    behaviour: Option<&[&[f32]]>,
) -> Result<GradientsOut, Error> {
    let all: Vec<usize> = parts.iter().flatten().copied().collect();
    let (tokens_total, sequences_total) = counts(&all, rows);
    if tokens_total == 0 {
        return Ok(None);
    }
    let global = GlobalBatch::new()
        .with_num_tokens(tokens_total)
        .with_num_sequences(sequences_total);
    // One micro-batch's gradient and its sums: entropy, clip fraction and KL weighted by its
    // tokens in the loss, and its share of the policy-gradient loss.
    let part_grads = |model: &Qwen, m: usize| -> Result<PartOut, Error> {
        let part = &parts[m];
        let device = model.device();
        let (tokens, mask, len) = pack(&packed(part, rows), &device);
        // The engines' log-probs on the loss's shifted grid (built only when correcting).
        let rollout = match behaviour {
            Some(b) => {
                let mut grid = Vec::with_capacity(part.len() * (len - 1));
                for &i in part {
                    grid.extend(shifted_values(&rows[i].1, b[i], len).ok_or_else(|| {
                        Error::Grpo(rstar_grpo::GrpoError::Length {
                            field: "rollout_log_prob",
                            expected: rows[i].1.iter().filter(|&&w| w > 0.0).count(),
                            got: b[i].len(),
                        })
                    })?);
                }
                Some(Tensor::<2>::from_data(
                    TensorData::new(grid, [part.len(), len - 1]),
                    &device,
                ))
            }
            None => None,
        };
        let adv: Vec<f32> = part
            .iter()
            .flat_map(|&i| std::iter::repeat_n(advantages[i], len - 1))
            .collect();
        let adv = Tensor::<2>::from_data(TensorData::new(adv, [part.len(), len - 1]), &device);
        // Memory bounded in the vocabulary (`sequence_loss`: above `LOGIT_CHUNK_ELEMENTS`
        // logits, chunked with a closed-form backward), the entropy term included.
        let local = f64::from(mask.clone().sum().into_scalar::<f32>());
        let (loss, (metrics, ent_sum, old_seen)) = sequence_loss(model, tokens, |logp, ent| {
            let old = match olds {
                Some(olds) => Tensor::<2>::from_data(olds[m].clone(), &device),
                None => logp.clone().detach(),
            };
            let ent_sum = f64::from(
                (ent.clone().detach() * mask.clone())
                    .sum()
                    .into_scalar::<f32>(),
            );
            // The old log-probs on the host, for the step's correction metrics.
            let old_seen: Option<Vec<f32>> = rollout
                .is_some()
                .then(|| old.to_data().iter::<f32>().collect());
            let mut loss_inputs = PolicyLossInputs::new(logp, old, adv, mask);
            if grpo.entropy_coeff != 0.0 {
                loss_inputs = loss_inputs.with_entropy(ent);
            }
            if let Some(rollout) = rollout {
                loss_inputs = loss_inputs.with_rollout_log_prob(rollout);
            }
            let out = policy_loss(grpo, loss_inputs, &global)?;
            Ok::<_, rstar_grpo::GrpoError>((out.loss, (out.metrics, ent_sum, old_seen)))
        })?;
        let old_seen: Vec<(usize, Vec<f32>)> = match old_seen {
            Some(grid) => part
                .iter()
                .enumerate()
                .map(|(k, &i)| {
                    let row = &grid[k * (len - 1)..(k + 1) * (len - 1)];
                    (i, unshifted_values(&rows[i].1, row))
                })
                .collect(),
            None => Vec::new(),
        };
        let sums = [
            ent_sum,
            f64::from(metrics.clip_frac) * local,
            f64::from(metrics.ppo_kl) * local,
        ];
        Ok((
            GradientsParams::from_grads(loss.backward(), model),
            sums,
            metrics.pg_loss,
            old_seen,
        ))
    };
    // A thread's micro-batches, its gradients summed.
    let run = |model: &Qwen, ms: &[usize]| -> PartResult {
        let mut accumulated = GradientsAccumulator::<Qwen>::new();
        let (mut sums, mut pg_loss, mut seen) = ([0.0f64; 3], 0.0f32, Vec::new());
        for &m in ms {
            let (grads, s, pg, old_seen) = part_grads(model, m)?;
            accumulated.accumulate(model, grads);
            for (a, b) in sums.iter_mut().zip(s) {
                *a += b;
            }
            pg_loss += pg;
            seen.extend(old_seen);
        }
        Ok((accumulated.grads(), sums, pg_loss, seen))
    };
    let groups = super::optim::deal((0..parts.len()).collect(), threads);
    let results: Vec<PartResult> = if groups.len() <= 1 {
        vec![run(model, &(0..parts.len()).collect::<Vec<_>>())]
    } else {
        super::optim::on_forks(model, &groups, &|m: &Qwen, ms: &Vec<usize>| run(m, ms))
    };
    let mut accumulated = GradientsAccumulator::<Qwen>::new();
    let (mut sums, mut pg_loss, mut seen) = ([0.0f64; 3], 0.0f32, Vec::new());
    for result in results {
        let (grads, s, pg, old_seen) = result?;
        accumulated.accumulate(model, grads);
        for (a, b) in sums.iter_mut().zip(s) {
            *a += b;
        }
        pg_loss += pg;
        seen.extend(old_seen);
    }
    let total = tokens_total as f64;
    Ok(Some((
        accumulated.grads(),
        MiniBatchMetrics {
            pg_loss,
            entropy: (sums[0] / total) as f32,
            clip_frac: (sums[1] / total) as f32,
            ppo_kl: (sums[2] / total) as f32,
        },
        seen,
    )))
}

/// One micro-batch's gradient, its entropy, clip-fraction and KL sums weighted by tokens in the
/// loss, its share of the policy-gradient loss, and (correcting) its rows' old log-probs.
type PartOut = (GradientsParams, [f64; 3], f32, Vec<(usize, Vec<f32>)>);

/// Micro-batches' [`PartOut`]s summed.
type PartResult = Result<PartOut, Error>;

/// A mini-batch's gradient and metrics, and (correcting) its rows' old log-probs; `None` when no
/// token is in the loss.
type GradientsOut = Option<(GradientsParams, MiniBatchMetrics, Vec<(usize, Vec<f32>)>)>;

/// Tokens in the loss (next-token positions [`pack`] keeps) and sequences with at least one.
fn counts(chunk: &[usize], rows: &[(Vec<u32>, Vec<f32>)]) -> (usize, usize) {
    let per_row: Vec<usize> = chunk
        .iter()
        .map(|&i| rows[i].1.iter().skip(1).filter(|&&w| w > 0.0).count())
        .collect();
    (
        per_row.iter().sum(),
        per_row.iter().filter(|&&t| t > 0).count(),
    )
}

/// The learning rate of RL step `step` (1-based): `rl.lr` after a linear warm-up over
/// `rl.warmup_steps` steps.
pub fn step_lr(options: &RlOptions, step: u64) -> f64 {
    if options.warmup_steps == 0 {
        options.lr
    } else {
        options.lr * (step as f64 / options.warmup_steps as f64).min(1.0)
    }
}

/// The rollout seed of RL step `step` (1-based) of a run seeded `seed`: both drivers sample
/// with it (the lock-step one per round, the scheduled one per rollout and turn), and it draws
/// the step's prompts and RoC's choices.
pub fn step_seed(seed: u64, step: u64) -> u64 {
    mix_seed(seed, 0x5254_0000 + step)
}

pub use crate::rl_hard::{HardCheck, hard_problems};
