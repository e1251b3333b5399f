//! The trainer's configuration: one serde struct with named presets (`smoke`, `tiny`,
//! `rstar2-agent`), saved resolved as `runs/<name>/config.json`.

use rstar_episode::{IoError, LineError};
use std::collections::BTreeMap;
use std::path::PathBuf;

use rstar_curriculum::CurriculumConfig;
use rstar_grpo::GrpoConfig;
use rstar_policy::{LoraConfig, Precision, QwenConfig};
use rstar_scheduler::DispatchPolicy;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use rstar_tasks::tasks::{TaskConfig, TaskKind};

/// The learning-rate shape after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// Constant at the peak.
    Constant,
    /// Cosine from the peak down to `min_lr_ratio · peak` at the last step.
    Cosine,
}

/// How an RL step rolls out its groups (`rl.rollout_driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutDriver {
    /// [`rollout`](rstar_rollout::rollout): one batched generation call per round, then every
    /// pending tool call of the round; bit-reproducible (what resume equality relies on).
    #[default]
    Lockstep,
    /// [`run_scheduled_blocking`](rstar_rollout::scheduled::run_scheduled_blocking): `rl.engines`
    /// local engines, each with a copy of the current policy, dispatched by `rl.dispatch`;
    /// each rollout moves on its own and samples with per-turn seeds.
    Scheduled,
}

impl RolloutDriver {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lockstep => "lockstep",
            Self::Scheduled => "scheduled",
        }
    }
}

impl std::str::FromStr for RolloutDriver {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lockstep" | "lock-step" => Ok(Self::Lockstep),
            "scheduled" => Ok(Self::Scheduled),
            other => Err(format!(
                "`{other}` is not a rollout driver: expected `lockstep` or `scheduled`"
            )),
        }
    }
}

/// RoC's rule in the trainer (`rl.roc.mode`, `rstar train --roc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RocMode {
    /// Roll out `2G`, keep `rl.roc.keep` with the paper's rule ([`rstar_roc::Mode::Paper`]:
    /// each side halved in proportion, successes ∝ 1/`p_total`) and the paper's penalties.
    Paper,
    /// Roll out `2G`, keep `rl.roc.keep` with microsoft/rStar's rule and text heuristics
    /// ([`rstar_roc::Mode::Reference`]).
    Reference,
    /// Plain GRPO: roll out `G` and keep them (equal-reward groups still dropped when
    /// `rl.roc.reject_equal_reward`).
    Off,
}

impl RocMode {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Paper => "paper",
            Self::Reference => "reference",
            Self::Off => "off",
        }
    }
}

impl std::str::FromStr for RocMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "paper" => Ok(Self::Paper),
            "reference" => Ok(Self::Reference),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "`{other}` is not a RoC mode: expected `paper`, `reference` or `off`"
            )),
        }
    }
}

/// Resample-on-Correct in the run config (`rl.roc`). Older configs wrote a bool there: `true`
/// reads as [`RocOptions::paper`], `false` as [`RocOptions::off`]; a string (`"reference"`)
/// as that mode with its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RocOptions {
    /// The rule, or `off`.
    pub mode: RocMode,
    /// Traces kept per group of `2 · rl.group_size` rolled out; absent: `rl.group_size` (G).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep: Option<usize>,
    /// Floor on kept failures; absent: the mode's (0 paper, `min(2, keep / 2)` reference).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_failures: Option<usize>,
    /// Floor on kept successes; absent: the mode's (0 paper, `min(2, keep / 2)` reference).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_successes: Option<usize>,
    /// Drop groups whose rewards are all equal before down-sampling (they carry no advantage).
    pub reject_equal_reward: bool,
}

impl RocOptions {
    /// The paper's GRPO-RoC: its rule and penalties, no floors, equal-reward groups dropped.
    pub fn paper() -> Self {
        RocOptions {
            mode: RocMode::Paper,
            keep: None,
            min_failures: None,
            min_successes: None,
            reject_equal_reward: true,
        }
    }

    /// The reference code's rule, floors and text heuristics.
    pub fn reference() -> Self {
        RocOptions {
            mode: RocMode::Reference,
            ..Self::paper()
        }
    }

    /// Plain GRPO on `G` rollouts.
    pub fn off() -> Self {
        RocOptions {
            mode: RocMode::Off,
            ..Self::paper()
        }
    }

    /// Whether RoC down-samples (mode not `off`).
    pub fn is_on(&self) -> bool {
        self.mode != RocMode::Off
    }

    /// Rollouts per prompt for a kept group size `g`: `2g` with RoC, `g` without.
    pub fn rollouts(&self, g: usize) -> usize {
        if self.is_on() { 2 * g } else { g }
    }

    /// The traces kept per group for a group size `g`.
    pub fn keep_for(&self, g: usize) -> usize {
        self.keep.unwrap_or(g)
    }

    /// The floors `(failures, successes)` for `keep` kept traces.
    pub fn floors(&self, keep: usize) -> (usize, usize) {
        let default = match self.mode {
            RocMode::Reference => (keep / 2).min(2),
            RocMode::Paper | RocMode::Off => 0,
        };
        (
            self.min_failures.unwrap_or(default),
            self.min_successes.unwrap_or(default),
        )
    }

    /// `rstar_roc`'s configuration for a group size `g` and a step's seed; `None` when off.
    pub fn select_config(&self, g: usize, seed: u64) -> Option<rstar_roc::RocConfig> {
        let base = match self.mode {
            RocMode::Paper => rstar_roc::RocConfig::paper(),
            RocMode::Reference => rstar_roc::RocConfig::reference(),
            RocMode::Off => return None,
        };
        let keep = self.keep_for(g);
        let (min_failures, min_successes) = self.floors(keep);
        Some(rstar_roc::RocConfig {
            keep,
            min_failures,
            min_successes,
            reject_equal_reward: self.reject_equal_reward,
            seed,
            ..base
        })
    }

    /// Checks `keep` and the floors against the group size; errors name the field.
    fn validate(&self, g: usize) -> Result<(), Error> {
        if !self.is_on() {
            return Ok(());
        }
        let bad = |field: &str, message: String| {
            Err(Error::TrainConfig {
                field: format!("rl.roc.{field}"),
                message,
            })
        };
        let keep = self.keep_for(g);
        if keep < 2 {
            return bad(
                "keep",
                format!("is {keep}, expected at least 2 (GRPO compares within a group)"),
            );
        }
        if keep >= 2 * g {
            return bad(
                "keep",
                format!(
                    "is {keep}, expected fewer than the {} rollouts per prompt (2 · rl.group_size)",
                    2 * g
                ),
            );
        }
        let (f, s) = self.floors(keep);
        if f + s > keep {
            return bad(
                "min_failures",
                format!("is {f}: with min_successes {s} the floors exceed keep ({keep})"),
            );
        }
        Ok(())
    }
}

impl Default for RocOptions {
    fn default() -> Self {
        Self::paper()
    }
}

/// `rl.roc` as a file spells it out (every field but `mode` optional).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RocOptionsFile {
    mode: RocMode,
    #[serde(default)]
    keep: Option<usize>,
    #[serde(default)]
    min_failures: Option<usize>,
    #[serde(default)]
    min_successes: Option<usize>,
    #[serde(default = "yes")]
    reject_equal_reward: bool,
}

fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for RocOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(d)?;
        match value {
            serde_json::Value::Bool(true) => Ok(Self::paper()),
            serde_json::Value::Bool(false) => Ok(Self::off()),
            serde_json::Value::String(s) => {
                let mode: RocMode = s
                    .parse()
                    .map_err(|e| D::Error::custom(format!("`rl.roc`: {e}")))?;
                Ok(RocOptions {
                    mode,
                    ..Self::paper()
                })
            }
            serde_json::Value::Object(_) => {
                let f: RocOptionsFile = serde_json::from_value(value)
                    .map_err(|e| D::Error::custom(format!("`rl.roc`: {e}")))?;
                Ok(RocOptions {
                    mode: f.mode,
                    keep: f.keep,
                    min_failures: f.min_failures,
                    min_successes: f.min_successes,
                    reject_equal_reward: f.reject_equal_reward,
                })
            }
            other => Err(D::Error::custom(format!(
                "`rl.roc` is {other}, expected an object (`{{\"mode\": \"paper\"}}`), a mode name or a bool"
            ))),
        }
    }
}

fn one() -> usize {
    1
}

fn default_adam_epsilon() -> f64 {
    1e-8
}

fn kv_aware() -> DispatchPolicy {
    DispatchPolicy::KvAware
}

/// Supervised fine-tuning on the embedded corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftOptions {
    /// Optimizer steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Demonstrations in the corpus (sampled with replacement into batches).
    pub corpus_size: usize,
    /// Share of demonstrations whose first call fails and is fixed.
    pub failing_fraction: f64,
    /// Per kind, the share of demonstrations that solve the problem with a plausible but
    /// wrong program (`tasks::Task::wrong_code`) and box what it prints; absent kinds (and
    /// configs without the field) are always solved correctly.
    #[serde(default)]
    pub wrong_programs: BTreeMap<TaskKind, f64>,
    /// The relative weight of each bug (`typo`, `wrong_function`, `syntax_error`) among the
    /// failing demonstrations ([`rstar_tasks::tasks::sft::SftConfig::bug_weights`]); absent or
    /// empty draws them uniformly.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bug_weights: BTreeMap<rstar_tasks::tasks::sft::Bug, f64>,
    /// Peak learning rate (AdamW).
    pub lr: f64,
    /// Linear warm-up steps.
    pub warmup_steps: usize,
    /// Shape after warm-up.
    pub schedule: LrSchedule,
    /// Floor of the cosine, as a share of the peak.
    pub min_lr_ratio: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Clip the global gradient norm to this; `None` disables clipping.
    pub grad_clip: Option<f32>,
    /// Print a progress line every this many steps (0: never).
    pub log_every: usize,
    /// Threads a step's batch is split over, each running the forward and backward pass of
    /// its shard on its own autodiff graph (`optim::sharded_grads`); 1 runs the whole batch
    /// on the calling thread. Results depend on it (the gradients are summed in another
    /// order), so it is part of the config; absent in older configs: 1.
    #[serde(default = "one_thread")]
    pub threads: usize,
    /// Micro-batches a step's batch is cut into after sorting its rows by length, each padded
    /// only to its own longest row (fewer padding tokens and shorter attention rows than one
    /// batch padded to the longest); their losses add up to the batch's mean. With `threads`
    /// above 1 the micro-batches (at least one per thread) are dealt out to the threads. 1 (absent in older configs)
    /// pads the whole batch to its longest row. Results depend on it, as on `threads`.
    #[serde(default = "one_micro_batch")]
    pub micro_batches: usize,
    /// Compute precision of the SFT steps: `f32` (the default, and absent from older configs)
    /// or `bf16` (bf16 compute over f32 master weights and optimizer state,
    /// [`rstar_policy::Precision`]).
    #[serde(default, deserialize_with = "sft_precision")]
    pub precision: Precision,
    /// Train LoRA adapters over the frozen `init` model instead of every weight
    /// (`rstar_policy::lora`); merged into the model when SFT ends, so RL starts from the
    /// fine-tuned model. Absent (and absent from older configs): full fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// How `sft.lora`'s frozen base holds its seven projection weights: `f32` (the default, and
    /// absent from configs that leave it so) or `bf16` (half their bytes,
    /// `rstar_policy::Qwen::with_base_precision`). Needs `sft.lora`.
    #[serde(
        default,
        skip_serializing_if = "is_f32",
        deserialize_with = "sft_base_precision"
    )]
    pub base_precision: Precision,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations
    /// (`--gradient-checkpointing`, `rstar_policy::Qwen::with_gradient_checkpointing`): the
    /// step's activation memory falls to one layer's plus a hidden state per layer, for one more
    /// forward pass. Off (and absent from configs that leave it off) by default.
    #[serde(default, skip_serializing_if = "is_false")]
    pub gradient_checkpointing: bool,
}

fn one_thread() -> usize {
    1
}

fn one_micro_batch() -> usize {
    1
}

/// GRPO-RoC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlOptions {
    /// Resample-on-Correct: roll out `2G`, keep `rl.roc.keep` (G) by the paper's or the
    /// reference's rule; `off` (`--roc off`, `--no-roc`): plain GRPO on `G`.
    pub roc: RocOptions,
    /// `G`, the kept group size.
    pub group_size: usize,
    /// Prompts per step.
    pub prompts_per_step: usize,
    /// Training problems RL prompts are drawn from.
    pub pool_size: usize,
    /// Learning rate (constant).
    pub lr: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Clip the global gradient norm to this; `None` disables clipping.
    pub grad_clip: Option<f32>,
    /// Optimizer updates per step: the kept batch is split into this many mini-batches
    /// (one update each; after the first, the ratio to the old policy departs from one).
    pub mini_batches: usize,
    /// Problems checked for a hard stage (`k` samples each); `0` uses the whole pool.
    pub hard_pool_size: usize,
    /// The loss (advantages, clipping, aggregation).
    pub grpo: GrpoConfig,
    /// How each step's groups are rolled out: `lockstep` (default) or `scheduled`.
    #[serde(default)]
    pub rollout_driver: RolloutDriver,
    /// Where finished rollouts are scored: `local` (the in-process verifier; the default, and
    /// absent from a saved config) or `remote` (`--verify remote`: the `POST /verify` of the
    /// tool servers in `tools.servers`, in batches beside the tool calls, as the paper offloads
    /// verification to its tool service). The same verifier either way: the same scores.
    #[serde(default, skip_serializing_if = "VerifyAt::is_local")]
    pub verify: VerifyAt,
    /// `scheduled`: where the turns are written. A number: that many local engines, each
    /// holding a copy of the current policy. A list of URLs (or one comma-separated string):
    /// OpenAI-compatible servers (`rstar serve`, SGLang, vLLM) that the trainer publishes its
    /// weights to before every step ([`super::engines`]).
    #[serde(default)]
    pub engines: Engines,
    /// Remote engines: `rstar`, `sglang` or `vllm` for all of them; absent, each server's
    /// kind is read from its `GET /v1/models`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_kind: Option<rstar_engine::remote::EngineKind>,
    /// Remote engines: the directory weights are published to, which every engine must be
    /// able to read (a shared path when they run on other machines); absent,
    /// `<out>/published`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_dir: Option<PathBuf>,
    /// Remote engines: the element type of the published weights, `F32` (exact; the default)
    /// or `Bf16` (half the size: what a real model is served in; the log-prob gap then shows
    /// the rounding).
    #[serde(default)]
    pub publish_dtype: rstar_policy::WeightDtype,
    /// Remote engines: how the weights reach them: `disk` (the default: `publish_dir`, a path
    /// every engine reads) or `http` (pushed to each `rstar serve` engine's
    /// `/upload_weights`, for engines on machines without a shared path).
    #[serde(default, skip_serializing_if = "PublishVia::is_disk")]
    pub publish_via: PublishVia,
    /// Remote engines with `rl.lora`: what each step publishes: `adapter` (the default: the
    /// adapter alone, loaded by each engine under the step's version, a few megabytes) or
    /// `merged` (the merged model through the weight reloads, for engines without runtime
    /// adapters such as SGLang).
    #[serde(default, skip_serializing_if = "PublishLora::is_adapter")]
    pub publish_lora: PublishLora,
    /// A warning is logged when a step's mean `|engine − trainer|` log-prob
    /// (`rollout/logprob_diff_mean`) is above this.
    #[serde(default = "default_logprob_diff_warn")]
    pub logprob_diff_warn: f64,
    /// `scheduled`: how rollouts are assigned to engines (`static`, `least-requests`,
    /// `kv-aware`).
    #[serde(default = "kv_aware")]
    pub dispatch: DispatchPolicy,
    /// Remote engines under `kv-aware`: how often, in seconds, each engine's free KV is read
    /// from its `/metrics` during a step (`0`: only at the step's start). The reads run in
    /// the background and never hold up a turn.
    #[serde(default = "default_load_refresh_secs")]
    pub load_refresh_secs: f64,
    /// AdamW's ε for the RL updates (SFT keeps 1e-8).
    #[serde(default = "default_adam_epsilon")]
    pub adam_epsilon: f64,
    /// Linear learning-rate warm-up over the first RL steps of the run: step `s` (1-based)
    /// uses `lr · min(1, s / warmup_steps)`; 0 for none.
    #[serde(default)]
    pub warmup_steps: u64,
    /// Learning-rate multiplier of the RMSNorm gains ([`rstar_policy::Qwen::norm_gains`]):
    /// they take `lr · gain_lr_multiplier`, every other parameter `lr`
    /// ([`super::optim::rl_learning_rate`]). 1 (the paper, and absent from a config file) is one
    /// learning rate for all.
    #[serde(default = "default_gain_lr_multiplier")]
    pub gain_lr_multiplier: f64,
    /// Most sequences in one generation call of the lock-step driver, in the RL steps and the
    /// hard stage's pass-rate check (`0`: every active episode in one call). The check also
    /// rolls out `rl.prompts_per_step` problems at a time, so its memory does not grow with
    /// the pool. Rollouts are seeded per rollout, so the value changes speed, not results.
    #[serde(default)]
    pub max_batch: usize,
    /// Threads the update's micro-batches are dealt out to, each running their forward and
    /// backward passes on its own autodiff graph (`rl::mini_batch_gradients_threads`); 1
    /// (absent in older configs) runs them one after another. Results depend on it (the
    /// gradients are summed in another order), so it is part of the config.
    #[serde(default = "one_thread")]
    pub threads: usize,
    /// Compute precision of the RL step (rollouts, old log-probs and updates alike): `f32` (the
    /// default, and absent from older configs) or `bf16` (bf16 compute over f32 master weights
    /// and optimizer state, [`rstar_policy::Precision`]).
    #[serde(default, deserialize_with = "rl_precision")]
    pub precision: Precision,
    /// Train fresh LoRA adapters over the model RL starts from (frozen) instead of every
    /// weight (`--lora RANK`, `rstar_policy::lora`): the optimizer, its resets and the
    /// checkpoints hold the adapters alone. Absent (and absent from older configs): full
    /// fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// How `rl.lora`'s frozen base holds its seven projection weights: `f32` (the default, and
    /// absent from configs that leave it so) or `bf16` (`--base-precision bf16`: half their
    /// bytes, `rstar_policy::Qwen::with_base_precision`). Needs `rl.lora`.
    #[serde(
        default,
        skip_serializing_if = "is_f32",
        deserialize_with = "rl_base_precision"
    )]
    pub base_precision: Precision,
    /// Recompute each decoder layer in the backward pass of the updates instead of keeping its
    /// activations (`--gradient-checkpointing`,
    /// `rstar_policy::Qwen::with_gradient_checkpointing`). Off (and absent from configs that
    /// leave it off) by default.
    #[serde(default, skip_serializing_if = "is_false")]
    pub gradient_checkpointing: bool,
    /// Asynchronous RL (`--max-staleness K`): how many updates older than the policy being
    /// trained a rollout's weights may be. `0` (the default, and absent from a config that
    /// leaves it so) is the synchronous loop: each step rolls out with the policy it updates.
    /// With `K ≥ 1` the scheduled driver's engines roll out the next steps' groups while the
    /// trainer updates (`rl_async`), a step's batch starts only once the policy it may lag is
    /// published, and a group staler than `K` is dropped, counted and never trained on. Needs
    /// `rl.rollout_driver = "scheduled"`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_staleness: u64,
}

/// Whether a count is 0 (left out of serialised configs).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Whether a flag is off (left out of serialised configs).
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Whether a precision is the default f32 (left out of serialised configs, so a config that
/// never set it reads back byte for byte as before the field existed).
pub(crate) fn is_f32(p: &Precision) -> bool {
    *p == Precision::F32
}

fn sft_base_precision<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    precision_named("sft.base_precision", d)
}

fn rl_base_precision<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    precision_named("rl.base_precision", d)
}

fn precision_named<'de, D: serde::Deserializer<'de>>(
    field: &str,
    deserializer: D,
) -> Result<Precision, D::Error> {
    let s = String::deserialize(deserializer)?;
    s.parse()
        .map_err(|e: String| serde::de::Error::custom(format!("`{field}`: {e}")))
}

fn sft_precision<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    precision_named("sft.precision", d)
}

fn rl_precision<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    precision_named("rl.precision", d)
}

fn default_gain_lr_multiplier() -> f64 {
    1.0
}

fn default_load_refresh_secs() -> f64 {
    1.0
}

fn default_logprob_diff_warn() -> f64 {
    0.02
}

/// `rl.publish_via`: how published weights reach remote engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishVia {
    /// Written to `rl.publish_dir`, which every engine reads (a shared path).
    #[default]
    Disk,
    /// Pushed over HTTP to each engine (`rstar serve`'s `/upload_weights`).
    Http,
}

impl PublishVia {
    fn is_disk(&self) -> bool {
        *self == PublishVia::Disk
    }
}

impl std::str::FromStr for PublishVia {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "disk" => Ok(PublishVia::Disk),
            "http" => Ok(PublishVia::Http),
            other => Err(format!("`{other}` is neither `disk` nor `http`")),
        }
    }
}

/// `rl.publish_lora`: what a LoRA run publishes to remote engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishLora {
    /// The adapter alone (`/v1/load_lora_adapter`), named for the step's version.
    #[default]
    Adapter,
    /// The model with the adapter merged in, as a full-weight run publishes.
    Merged,
}

impl PublishLora {
    fn is_adapter(&self) -> bool {
        *self == PublishLora::Adapter
    }
}

impl std::str::FromStr for PublishLora {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "adapter" => Ok(PublishLora::Adapter),
            "merged" => Ok(PublishLora::Merged),
            other => Err(format!("`{other}` is neither `adapter` nor `merged`")),
        }
    }
}

/// `rl.engines`: local engines or remote servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engines {
    /// This many local engines, each with a copy of the policy.
    Local(usize),
    /// The base URLs of OpenAI-compatible servers.
    Remote(Vec<String>),
}

impl Default for Engines {
    fn default() -> Self {
        Engines::Local(1)
    }
}

impl Engines {
    /// The remote servers' URLs, if these are remote engines.
    pub fn urls(&self) -> Option<&[String]> {
        match self {
            Engines::Remote(urls) => Some(urls),
            Engines::Local(_) => None,
        }
    }

    /// The number of engines.
    pub fn count(&self) -> usize {
        match self {
            Engines::Local(n) => *n,
            Engines::Remote(urls) => urls.len(),
        }
    }
}

impl std::fmt::Display for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Engines::Local(n) => write!(f, "{n} local engine(s)"),
            Engines::Remote(urls) => write!(f, "{}", urls.join(",")),
        }
    }
}

impl std::str::FromStr for Engines {
    type Err = String;

    /// `2` (local engines) or `http://a:8000,http://b:8000` (servers).
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(n) = s.trim().parse::<usize>() {
            return Ok(Engines::Local(n));
        }
        let urls: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect();
        if urls.is_empty() || !urls.iter().all(|u| u.starts_with("http://")) {
            return Err(format!(
                "`{s}` is neither a number of local engines nor a comma-separated list of http:// URLs"
            ));
        }
        Ok(Engines::Remote(urls))
    }
}

impl Serialize for Engines {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Engines::Local(n) => s.serialize_u64(*n as u64),
            Engines::Remote(urls) => urls.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Engines {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(usize),
            Text(String),
            Urls(Vec<String>),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a number of local engines or a list of server URLs")
        })?;
        match raw {
            Raw::Count(n) => Ok(Engines::Local(n)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
            Raw::Urls(urls) => Ok(Engines::Remote(urls)),
        }
    }
}

/// Held-out evaluation after SFT and after each stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// Held-out (by numbers) problems.
    pub problems: usize,
    /// Samples per problem at `temperature` for avg@k; `0` evaluates greedily only.
    pub samples: usize,
    /// Sampling temperature of avg@k (1 when absent from a config file).
    #[serde(default = "default_eval_temperature")]
    pub temperature: f64,
    /// More temperatures at which avg@k is also measured (the table shows each, and the best
    /// of greedy and all temperatures); empty when absent from a config file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_temperatures: Vec<f64>,
    /// Sequences per generation call (`0`: all at once).
    pub max_batch: usize,
    /// Response budget of each evaluation episode in tokens, assistant and tool tokens
    /// together; absent: the template's (320 compact, 8 192 ChatML, as `rstar eval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_tokens: Option<usize>,
}

fn default_eval_temperature() -> f64 {
    1.0
}

pub use rstar_rollout::tools::{ToolOptions, VerifyAt};

/// Everything `rstar train` needs; see [`TrainConfig::preset`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The preset this config started from (informational).
    pub preset: String,
    /// Seed of everything random (model init, tasks, corpus, batches, rollouts).
    pub seed: u64,
    /// The policy architecture (trained from scratch unless `init` is set).
    pub model: QwenConfig,
    /// Start from this model directory instead of a random model: an HF directory
    /// (`config.json`, `*.safetensors`, `tokenizer.json`) or one written by
    /// `rstar_policy::save_dir` (e.g. `runs/<name>/checkpoints/sft`). Its config replaces
    /// `model` and its tokenizer the built-in character one; an HF tokenizer switches the
    /// prompts and tool calls to the ChatML template (`--model DIR`, `--init DIR`).
    #[serde(default)]
    pub init: Option<PathBuf>,
    /// Train and evaluate on the problems of this dataset file instead of the embedded task
    /// set (`--data FILE`; read by `crate::dataset`).
    #[serde(default)]
    pub data: Option<PathBuf>,
    /// The embedded task set.
    pub tasks: TaskConfig,
    /// SFT.
    pub sft: SftOptions,
    /// GRPO-RoC.
    pub rl: RlOptions,
    /// The RL stages.
    pub curriculum: CurriculumConfig,
    /// Held-out evaluation.
    pub eval: EvalOptions,
    /// The sandbox.
    pub tools: ToolOptions,
    /// Keep per-token entropies, log-probabilities and token texts in the trajectories the run
    /// writes (`samples.jsonl`), for `rstar analyze entropy`; otherwise they are stripped to
    /// keep the files small (`--record-entropy`).
    #[serde(default)]
    pub record_entropy: bool,
    /// Write the resumable checkpoint (`checkpoints/last/`) every this many SFT and RL steps,
    /// and after every evaluation; a kill loses the steps since the last one, which a resume
    /// replays. 1 (the default) loses at most the current step; a large model, whose
    /// checkpoint is three times its f32 size, wants more.
    #[serde(default = "one")]
    pub checkpoint_every: usize,
}

impl TrainConfig {
    /// A preset by name: `smoke` (seconds; SFT a few dozen steps, two RL steps per stage),
    /// `tiny` (the embedded default on a 2-core CPU: the calibration's 0.8M-parameter char
    /// model, 400 SFT steps of 32, the tiny curriculum) or `rstar2-agent` (the paper's RL
    /// hyperparameters; needs `init` and `data`, see [`TrainConfig::rstar2_agent`]).
    ///
    /// # Errors
    /// [`Error::TrainConfig`] for an unknown name.
    pub fn preset(name: &str) -> Result<Self, Error> {
        match name {
            "smoke" => Ok(Self::smoke()),
            "tiny" => Ok(Self::tiny()),
            "rstar2-agent" | "rstar2_agent" => Ok(Self::rstar2_agent()),
            other => Err(Error::TrainConfig {
                field: "preset".into(),
                message: format!("is `{other}`, expected `smoke`, `tiny` or `rstar2-agent`"),
            }),
        }
    }

    /// The paper's RL recipe (arXiv 2508.20722): AdamW at a constant lr 1e-6 with verl's
    /// default weight decay 0.01, 512 prompts per step, 2G = 32 rollouts per prompt of which RoC
    /// keeps G = 16, Clip-Higher 0.2/0.28, token-mean loss, no KL and no entropy term,
    /// temperature 1.0, and the three stages of [`CurriculumConfig::rstar2_agent`] (8K, 12K,
    /// then 12K on the problems not solved 8 of 8, with the optimizer reset). No SFT step: the
    /// paper's non-reasoning SFT is a separate run, so `init` must be an SFT'd model; `init` and
    /// `data` are required (validation fails without them). One update per step
    /// (`mini_batches` 1). The data is `crates/train/presets/rstar2-agent.json`, whose notes
    /// say where each value comes from.
    pub fn rstar2_agent() -> Self {
        Self::embedded("rstar2-agent")
    }

    /// The embedded default (`cargo xtask train`): `crates/train/presets/tiny.json`.
    pub fn tiny() -> Self {
        Self::embedded("tiny")
    }

    /// The CI smoke run, the same shapes sized to finish in seconds in release:
    /// `crates/train/presets/smoke.json`.
    pub fn smoke() -> Self {
        Self::embedded("smoke")
    }

    /// An embedded preset by its file's name.
    fn embedded(name: &str) -> Self {
        let text = PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| *text)
            .unwrap_or_else(|| unreachable!("no embedded preset `{name}`"));
        Self::from_json_str(text)
            .unwrap_or_else(|e| panic!("the embedded preset `{name}` does not read: {e}"))
    }

    /// A config from JSON text: keys named `//` are notes, left out before reading.
    ///
    /// # Errors
    /// The JSON error (its line and column when the text has no notes).
    pub fn from_json_str(text: &str) -> Result<Self, serde_json::Error> {
        if text.contains("\"//\"") {
            let mut value: serde_json::Value = serde_json::from_str(text)?;
            strip_notes(&mut value);
            serde_json::from_value(value)
        } else {
            serde_json::from_str(text)
        }
    }

    /// Reads a config from a JSON file (keys named `//` are notes, as in the presets).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Dataset`] naming the
    /// file, line and field when it does not parse, then [`TrainConfig::validate`]'s errors.
    pub fn from_json_file(path: &std::path::Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| Error::Io(IoError::new(path.to_path_buf(), source)))?;
        let config = TrainConfig::from_json_str(&text).map_err(|e| {
            Error::Dataset(LineError::new(path.to_path_buf(), e.line(), e.to_string()))
        })?;
        config.validate()?;
        Ok(config)
    }
}

mod checks;

/// The presets as data, embedded in the binary: `crates/train/presets/NAME.json`.
const PRESETS: [(&str, &str); 3] = [
    ("tiny", include_str!("../presets/tiny.json")),
    ("smoke", include_str!("../presets/smoke.json")),
    ("rstar2-agent", include_str!("../presets/rstar2-agent.json")),
];

/// Removes every object key named `//` (a note), at any depth.
fn strip_notes(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("//");
            map.values_mut().for_each(strip_notes);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_notes),
        _ => {}
    }
}

fn bad(field: &str, message: String) -> Result<(), Error> {
    Err(Error::TrainConfig {
        field: field.into(),
        message,
    })
}

#[cfg(test)]
mod tests;
