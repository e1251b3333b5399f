//! The trainer's configuration: one serde struct with named presets (`smoke`, `tiny`,
//! `rstar2-agent`), saved resolved as `runs/<name>/config.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rstar_curriculum::{CurriculumConfig, Stage};
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

    /// The paper's RL recipe (`/work/shared/DESIGN.md`, arXiv 2508.20722): AdamW at a
    /// constant lr 1e-6 with verl's default weight decay 0.01, 512 prompts per step, 2G = 32 rollouts per
    /// prompt of which RoC keeps G = 16, Clip-Higher 0.2/0.28, token-mean loss, no KL and no
    /// entropy term, temperature 1.0, and the three stages of
    /// [`CurriculumConfig::rstar2_agent`] (8K, 12K, then 12K on the problems not solved 8 of
    /// 8, with the optimizer reset). No SFT step: the paper's non-reasoning SFT is a separate
    /// run, so `init` must be an SFT'd model; `init` and `data` are required (validation
    /// fails without them). One update per step (`mini_batches` 1).
    pub fn rstar2_agent() -> Self {
        let tiny = Self::tiny();
        TrainConfig {
            preset: "rstar2-agent".into(),
            sft: SftOptions {
                steps: 0,
                ..tiny.sft
            },
            rl: RlOptions {
                roc: RocOptions::paper(),
                group_size: 16,
                prompts_per_step: 512,
                pool_size: 42_000,
                lr: 1e-6,
                // verl's `actor.optim.weight_decay`, which the reference launch script keeps
                // (the report names none).
                weight_decay: 0.01,
                grad_clip: Some(1.0),
                mini_batches: 1,
                hard_pool_size: 0,
                grpo: GrpoConfig::rstar2_agent(),
                rollout_driver: RolloutDriver::Lockstep,
                verify: VerifyAt::Local,
                engines: Engines::Local(1),
                engine_kind: None,
                publish_dir: None,
                publish_dtype: rstar_policy::WeightDtype::F32,
                publish_via: PublishVia::Disk,
                publish_lora: PublishLora::Adapter,
                logprob_diff_warn: default_logprob_diff_warn(),
                dispatch: DispatchPolicy::KvAware,
                load_refresh_secs: default_load_refresh_secs(),
                adam_epsilon: 1e-8,
                // The report and the reference launch script (`lr_warmup_steps=20`).
                warmup_steps: 20,
                gain_lr_multiplier: 1.0,
                // 512 × 32 rollouts a step in calls of 64 sequences (the local engine's
                // batch); the hard stage checks 512 problems × 8 at a time.
                max_batch: 64,
                threads: 1,
                precision: Precision::F32,
                lora: None,
                base_precision: Precision::F32,
                gradient_checkpointing: false,
                max_staleness: 0,
            },
            curriculum: CurriculumConfig::rstar2_agent(),
            eval: EvalOptions {
                problems: 500,
                samples: 0,
                temperature: 1.0,
                more_temperatures: Vec::new(),
                max_batch: 64,
                max_response_tokens: None,
            },
            // A 14B policy with its AdamW moments is ~170 GB in f32: not after every step.
            checkpoint_every: 10,
            ..tiny
        }
    }

    /// The embedded default (`cargo xtask train`).
    pub fn tiny() -> Self {
        TrainConfig {
            preset: "tiny".into(),
            seed: 0,
            model: QwenConfig::tiny_char(),
            init: None,
            data: None,
            tasks: TaskConfig::embedded_default(),
            sft: SftOptions {
                steps: 400,
                batch_size: 32,
                corpus_size: 4000,
                // A habitual mistake: 60% of the demonstrations leave out the program's last
                // closing parenthesis, read the SyntaxError and fix it, so the failing call is
                // the SFT policy's mode and only RoC's preference for clean successes removes
                // it (uniform bugs are each a minority that sharpening alone removes, which
                // left RoC nothing to do: docs/training.md, "RoC with a habitual bug").
                failing_fraction: 0.6,
                wrong_programs: BTreeMap::from([
                    (TaskKind::Product, 0.15),
                    (TaskKind::ModPow, 0.3),
                    (TaskKind::DivisorCount, 0.6),
                    (TaskKind::RangeSum, 0.65),
                ]),
                bug_weights: BTreeMap::from([(rstar_tasks::tasks::sft::Bug::SyntaxError, 1.0)]),
                lr: 1e-3,
                warmup_steps: 40,
                schedule: LrSchedule::Cosine,
                min_lr_ratio: 0.1,
                weight_decay: 0.01,
                grad_clip: Some(1.0),
                log_every: 25,
                // Both cores of a laptop, and rows padded in 8 length-sorted micro-batches:
                // 3.2x faster a step than one thread and one padded batch (docs/training.md).
                threads: 2,
                micro_batches: 8,
                precision: Precision::F32,
                lora: None,
                base_precision: Precision::F32,
                gradient_checkpointing: false,
            },
            rl: RlOptions {
                roc: RocOptions::paper(),
                group_size: 8,
                prompts_per_step: 8,
                pool_size: 512,
                lr: 5e-5,
                weight_decay: 0.0,
                grad_clip: Some(1.0),
                mini_batches: 1,
                hard_pool_size: 64,
                grpo: GrpoConfig::rstar2_agent(),
                // Two local engines on their own threads: the same rollouts as the lock-step
                // driver (per-rollout seeds), with both cores generating.
                rollout_driver: RolloutDriver::Scheduled,
                verify: VerifyAt::Local,
                engines: Engines::Local(2),
                engine_kind: None,
                publish_dir: None,
                publish_dtype: rstar_policy::WeightDtype::F32,
                publish_via: PublishVia::Disk,
                publish_lora: PublishLora::Adapter,
                logprob_diff_warn: default_logprob_diff_warn(),
                dispatch: DispatchPolicy::KvAware,
                load_refresh_secs: default_load_refresh_secs(),
                adam_epsilon: 1e-8,
                warmup_steps: 0,
                // The gains at 1.5e-2 a step: RL sharpens the 0.8M-parameter policy within its
                // few dozen steps (docs/training.md, "RL gain experiments").
                gain_lr_multiplier: 300.0,
                max_batch: 0,
                threads: 2,
                precision: Precision::F32,
                lora: None,
                base_precision: Precision::F32,
                gradient_checkpointing: false,
                max_staleness: 0,
            },
            curriculum: CurriculumConfig::tiny(),
            // 500 held-out problems: a Wilson interval of about ±2 points at 95%, where 100
            // problems give ±4 to ±10 and cannot rank two stages 5 points apart. Two samples a
            // problem at each temperature (1 000 rollouts each) keep the four evaluations near
            // 2½ minutes of the run's 9¼ here (docs/experiments.md, "Stages that each teach").
            eval: EvalOptions {
                problems: 500,
                samples: 2,
                temperature: 1.0,
                more_temperatures: vec![0.6],
                max_batch: 0,
                max_response_tokens: None,
            },
            tools: ToolOptions {
                python: PathBuf::from("python3"),
                workers: 0,
                timeout_secs: 5.0,
                servers: Vec::new(),
                latency_budget_secs: None,
            },
            record_entropy: false,
            checkpoint_every: 1,
        }
    }

    /// The CI smoke run: the same shapes, sized to finish in seconds in release.
    pub fn smoke() -> Self {
        let tiny = Self::tiny();
        TrainConfig {
            preset: "smoke".into(),
            sft: SftOptions {
                steps: 30,
                batch_size: 8,
                corpus_size: 60,
                warmup_steps: 5,
                log_every: 10,
                // CI's check: one thread, one padded batch, the lock-step driver (seconds of
                // work, where threads cost more than they save).
                threads: 1,
                micro_batches: 1,
                precision: Precision::F32,
                lora: None,
                base_precision: Precision::F32,
                gradient_checkpointing: false,
                // A third of the calls fail first, with the three bugs drawn uniformly.
                failing_fraction: 1.0 / 3.0,
                bug_weights: BTreeMap::new(),
                ..tiny.sft
            },
            rl: RlOptions {
                group_size: 2,
                prompts_per_step: 2,
                pool_size: 16,
                mini_batches: 1,
                hard_pool_size: 4,
                rollout_driver: RolloutDriver::Lockstep,
                verify: VerifyAt::Local,
                engines: Engines::Local(1),
                threads: 1,
                ..tiny.rl
            },
            curriculum: CurriculumConfig {
                stages: vec![
                    Stage::new("short", 96, 2).steps(2),
                    Stage::new("long", 128, 3).steps(2),
                    Stage::new("hard", 128, 3)
                        .steps(2)
                        .hard(2, 1.0)
                        .reset_optimizer(),
                ],
            },
            eval: EvalOptions {
                problems: 4,
                samples: 0,
                temperature: 1.0,
                more_temperatures: Vec::new(),
                max_batch: 0,
                max_response_tokens: None,
            },
            ..tiny
        }
    }

    /// Checks the fields; errors name the field.
    ///
    /// # Errors
    /// [`Error::TrainConfig`] naming the first bad field, [`Error::Curriculum`] for a
    /// bad curriculum.
    pub fn validate(&self) -> Result<(), Error> {
        self.check_counts()?;
        self.check_endpoints()?;
        self.check_numbers()?;
        self.check_sft_mix()?;
        self.check_clips_and_eval()?;
        self.check_preset()?;
        self.model.validate().map_err(|e| match e {
            rstar_policy::Error::InvalidConfig { field, reason } => Error::TrainConfig {
                field: format!("model.{field}"),
                message: reason,
            },
            other => Error::TrainConfig {
                field: "model".into(),
                message: other.to_string(),
            },
        })?;
        self.rl.roc.validate(self.rl.group_size)?;
        self.rl.grpo.validate()?;
        self.curriculum.validate()?;
        self.check_lora()?;
        self.validate_consistency()
    }

    /// `sft.lora` and `rl.lora`: a valid adapter config, and a base to put it on.
    fn check_lora(&self) -> Result<(), Error> {
        for (phase, lora) in [("sft", &self.sft.lora), ("rl", &self.rl.lora)] {
            if let Some(lora) = lora {
                lora.validate().map_err(|e| lora_error(phase, e))?;
            }
        }
        for (phase, lora, base) in [
            ("sft", &self.sft.lora, self.sft.base_precision),
            ("rl", &self.rl.lora, self.rl.base_precision),
        ] {
            if base == Precision::Bf16 && lora.is_none() {
                return bad(
                    &format!("{phase}.base_precision"),
                    format!(
                        "is bf16, which needs `{phase}.lora` (--lora RANK): without adapters the projections train, and bf16 weights lose every update smaller than about 1/256 of the weight (for bf16 compute over f32 weights, set `{phase}.precision`)"
                    ),
                );
            }
        }
        if self.sft.lora.is_some() && self.sft.steps > 0 && self.init.is_none() {
            return bad(
                "sft.lora",
                "trains adapters over a frozen pretrained model, but `init` is not set: a random model's weights would stay random (set `init`, --init DIR, or drop `sft.lora`)".into(),
            );
        }
        Ok(())
    }

    /// Sizes and counts that must be at least 1.
    fn check_counts(&self) -> Result<(), Error> {
        let positive = [
            ("sft.batch_size", self.sft.batch_size),
            ("sft.threads", self.sft.threads),
            ("sft.micro_batches", self.sft.micro_batches),
            ("sft.corpus_size", self.sft.corpus_size),
            ("rl.group_size", self.rl.group_size),
            ("rl.prompts_per_step", self.rl.prompts_per_step),
            ("rl.pool_size", self.rl.pool_size),
            ("rl.mini_batches", self.rl.mini_batches),
            ("rl.threads", self.rl.threads),
            ("rl.engines", self.rl.engines.count()),
            ("checkpoint_every", self.checkpoint_every),
        ];
        for (field, v) in positive {
            if v == 0 {
                return bad(field, "is 0, expected at least 1".into());
            }
        }
        Ok(())
    }

    /// Remote engines, tool servers, weight publication and the load refresh.
    fn check_endpoints(&self) -> Result<(), Error> {
        if let Some(urls) = self.rl.engines.urls() {
            if self.rl.rollout_driver != RolloutDriver::Scheduled {
                return bad(
                    "rl.engines",
                    format!(
                        "lists servers ({}), which only the scheduled driver uses: set `rl.rollout_driver` to `scheduled` (--rollout scheduled)",
                        urls.join(", ")
                    ),
                );
            }
            if let Some(url) = urls.iter().find(|u| !u.starts_with("http://")) {
                return bad("rl.engines", format!("`{url}` is not an http:// URL"));
            }
        }
        if let Some(url) = self
            .tools
            .servers
            .iter()
            .find(|u| !u.starts_with("http://"))
        {
            return bad("tools.servers", format!("`{url}` is not an http:// URL"));
        }
        if self.rl.verify == VerifyAt::Remote && self.tools.servers.is_empty() {
            return bad(
                "rl.verify",
                "is `remote`, which scores answers on the tool servers' `/verify`, but `tools.servers` lists none: give them (--tools URL[,URL…], `rstar tools serve`) or verify `local`"
                    .to_string(),
            );
        }
        if self.rl.publish_via == PublishVia::Http && self.rl.engines.urls().is_none() {
            return bad(
                "rl.publish_via",
                "is `http`, which pushes weights to remote engines, but `rl.engines` lists none"
                    .to_string(),
            );
        }
        if !(self.rl.load_refresh_secs.is_finite() && self.rl.load_refresh_secs >= 0.0) {
            return bad(
                "rl.load_refresh_secs",
                format!(
                    "is {}, expected a number of seconds ≥ 0 (0: only at each step's start)",
                    self.rl.load_refresh_secs
                ),
            );
        }
        if self.rl.logprob_diff_warn.is_nan() || self.rl.logprob_diff_warn < 0.0 {
            return bad(
                "rl.logprob_diff_warn",
                format!("is {}, expected a number ≥ 0", self.rl.logprob_diff_warn),
            );
        }
        Ok(())
    }

    /// The group size, learning rates and other positive numbers, and fractions.
    fn check_numbers(&self) -> Result<(), Error> {
        if self.rl.group_size < 2 {
            return bad(
                "rl.group_size",
                format!(
                    "is {}, expected at least 2 (GRPO compares within a group)",
                    self.rl.group_size
                ),
            );
        }
        let positive_numbers = [
            ("sft.lr", self.sft.lr, ""),
            ("rl.lr", self.rl.lr, ""),
            ("rl.adam_epsilon", self.rl.adam_epsilon, ""),
            (
                "rl.gain_lr_multiplier",
                self.rl.gain_lr_multiplier,
                " (1: one learning rate for all)",
            ),
            ("eval.temperature", self.eval.temperature, ""),
            ("tools.timeout_secs", self.tools.timeout_secs, ""),
            (
                "tools.latency_budget_secs",
                self.tools.latency_budget_secs.unwrap_or(1.0),
                " of seconds, or leave it out for no budget",
            ),
        ];
        for (field, v, hint) in positive_numbers {
            if !(v.is_finite() && v > 0.0) {
                return bad(field, format!("is {v}, expected a positive number{hint}"));
            }
        }
        for (field, v) in [
            ("sft.failing_fraction", self.sft.failing_fraction),
            ("sft.min_lr_ratio", self.sft.min_lr_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, format!("is {v}, expected a number in [0, 1]"));
            }
        }
        Ok(())
    }

    /// The SFT corpus's mix of wrong programs and bugs.
    fn check_sft_mix(&self) -> Result<(), Error> {
        for (kind, share) in &self.sft.wrong_programs {
            if !(0.0..=1.0).contains(share) {
                return bad(
                    &format!("sft.wrong_programs.{}", kind.as_str()),
                    format!("is {share}, expected a number in [0, 1]"),
                );
            }
        }
        for (bug, weight) in &self.sft.bug_weights {
            if !(weight.is_finite() && *weight >= 0.0) {
                let name = serde_json::to_value(bug)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                return bad(
                    &format!("sft.bug_weights.{name}"),
                    format!("is {weight}, expected a weight ≥ 0"),
                );
            }
        }
        if !self.sft.bug_weights.is_empty() && self.sft.bug_weights.values().all(|w| *w == 0.0) {
            return bad(
                "sft.bug_weights",
                "gives every bug weight 0: leave it out to draw the bugs uniformly".into(),
            );
        }
        Ok(())
    }

    /// Gradient clips and the evaluation's budget and temperatures.
    fn check_clips_and_eval(&self) -> Result<(), Error> {
        for (field, clip) in [
            ("sft.grad_clip", self.sft.grad_clip),
            ("rl.grad_clip", self.rl.grad_clip),
        ] {
            if let Some(c) = clip
                && !(c.is_finite() && c > 0.0)
            {
                return bad(field, format!("is {c}, expected a positive number"));
            }
        }
        if self.eval.max_response_tokens == Some(0) {
            return bad(
                "eval.max_response_tokens",
                "is 0, expected at least 1 (or leave it out for the template's budget)".into(),
            );
        }
        if let Some(t) = self
            .eval
            .more_temperatures
            .iter()
            .find(|t| !(t.is_finite() && **t > 0.0))
        {
            return bad(
                "eval.more_temperatures",
                format!("has {t}, expected positive numbers"),
            );
        }
        Ok(())
    }

    /// What the `rstar2-agent` preset needs set.
    fn check_preset(&self) -> Result<(), Error> {
        if self.preset == "rstar2-agent" {
            if self.init.is_none() {
                return bad(
                    "init",
                    "is not set: the rstar2-agent preset trains a real model (--model DIR)".into(),
                );
            }
            if self.data.is_none() {
                return bad(
                    "data",
                    "is not set: the rstar2-agent preset trains on a dataset (--data FILE)".into(),
                );
            }
        }
        Ok(())
    }

    /// The checks across fields: what would panic deep in a step, or train without a word
    /// on something other than what the config says.
    fn validate_consistency(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| {
            Err(Error::TrainConfig {
                field: field.into(),
                message,
            })
        };
        // A run without `init` uses the built-in tokenizer: its ids must be rows of the
        // embedding (a smaller vocabulary fails in the embedding's gather at the first step).
        if self.init.is_none() {
            let tokens = rstar_policy::Tokenizer::char().vocab_size();
            if self.model.vocab_size < tokens {
                return bad(
                    "model.vocab_size",
                    format!(
                        "is {}, smaller than the built-in tokenizer's {tokens} tokens: set it to at least {tokens}",
                        self.model.vocab_size
                    ),
                );
            }
        }
        // The trainer applies the correction per micro-batch, against the step's global token
        // counts: per-token and per-sequence weights come out as verl's whole-batch ones, but
        // rejection changes those counts and batch normalisation needs the whole batch first.
        let correction = &self.rl.grpo.rollout_correction;
        if correction.rollout_rs.is_some() {
            return bad(
                "rl.grpo.rollout_correction.rollout_rs",
                "rejection sampling is not applied by the trainer yet (it changes the step's token counts before the update, which needs the step split into collect and train, issue #63); use importance weights: rollout_is token or sequence, truncated (a number) or masked (lower_upper)".into(),
            );
        }
        if correction.rollout_is_batch_normalize {
            return bad(
                "rl.grpo.rollout_correction.rollout_is_batch_normalize",
                "is not applied by the trainer yet: it divides by the mean weight of the whole batch, and the loss runs per micro-batch (issue #63)".into(),
            );
        }
        if self.rl.max_staleness > 0 {
            if self.rl.rollout_driver != RolloutDriver::Scheduled {
                return bad(
                    "rl.max_staleness",
                    format!(
                        "is {}, which rolls out on engines while the trainer updates: it needs the scheduled driver (rl.rollout_driver = \"scheduled\", --rollout scheduled); 0 is the synchronous loop",
                        self.rl.max_staleness
                    ),
                );
            }
        }
        if self.rl.pool_size < self.rl.prompts_per_step {
            return bad(
                "rl.pool_size",
                format!(
                    "is {}, fewer problems than one step's rl.prompts_per_step ({}): every step would repeat problems",
                    self.rl.pool_size, self.rl.prompts_per_step
                ),
            );
        }
        if self.eval.problems == 0 {
            return bad(
                "eval.problems",
                "is 0, expected at least 1 (the table compares held-out accuracy)".into(),
            );
        }
        Ok(())
    }

    /// Reads a config from a JSON file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Dataset`] naming the
    /// file, line and field when it does not parse, then [`TrainConfig::validate`]'s errors.
    pub fn from_json_file(path: &std::path::Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let config: TrainConfig = serde_json::from_str(&text).map_err(|e| Error::Dataset {
            path: path.to_path_buf(),
            line: e.line(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }
}

/// The error of an unusable field.
/// A [`LoraConfig::validate`] error under `phase` (`rl.lora.rank`).
fn lora_error(phase: &str, e: rstar_policy::Error) -> Error {
    match e {
        rstar_policy::Error::InvalidConfig { field, reason } => Error::TrainConfig {
            field: format!("{phase}.{field}"),
            message: reason,
        },
        other => Error::TrainConfig {
            field: format!("{phase}.lora"),
            message: other.to_string(),
        },
    }
}

fn bad(field: &str, message: String) -> Result<(), Error> {
    Err(Error::TrainConfig {
        field: field.into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate() {
        for name in ["smoke", "tiny"] {
            let c = TrainConfig::preset(name).unwrap();
            c.validate().unwrap();
            assert_eq!(c.preset, name);
        }
        assert!(TrainConfig::preset("huge").is_err());
    }

    #[test]
    fn the_paper_preset_has_its_hyperparameters_and_needs_a_model_and_data() {
        let mut c = TrainConfig::preset("rstar2-agent").unwrap();
        assert_eq!(
            (c.rl.lr, c.rl.prompts_per_step, c.rl.group_size),
            (1e-6, 512, 16)
        );
        assert!(c.rl.roc == RocOptions::paper());
        assert!(c.rl.grpo.kl.is_none() && c.rl.grpo.entropy_coeff == 0.0);
        assert_eq!((c.rl.warmup_steps, c.rl.max_batch), (20, 64));
        assert_eq!(c.checkpoint_every, 10);
        assert_eq!(TrainConfig::tiny().checkpoint_every, 1);
        assert_eq!(
            (c.rl.grpo.clip_ratio_low, c.rl.grpo.clip_ratio_high),
            (0.2, 0.28)
        );
        let tokens: Vec<u32> = c
            .curriculum
            .stages
            .iter()
            .map(|s| s.max_response_tokens)
            .collect();
        assert_eq!(tokens, [8192, 12288, 12288]);
        assert!(c.curriculum.stages.iter().all(|s| s.temperature == 1.0));
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`init`") && err.contains("--model"), "{err}");
        c.init = Some("m".into());
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`data`") && err.contains("--data"), "{err}");
        c.data = Some("d.jsonl".into());
        c.validate().unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        let mut c = TrainConfig::smoke();
        c.rl.group_size = 1;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`rl.group_size`"), "{err}");
        let mut c = TrainConfig::smoke();
        c.sft.lr = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("`sft.lr`"));
        // Bug weights: each ≥ 0 and finite, not all 0; read by name from JSON.
        use rstar_tasks::tasks::sft::Bug;
        let mut c = TrainConfig::smoke();
        c.sft.bug_weights = BTreeMap::from([(Bug::Typo, -1.0)]);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`sft.bug_weights.typo`"), "{err}");
        c.sft.bug_weights = BTreeMap::from([(Bug::Typo, 0.0), (Bug::SyntaxError, 0.0)]);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("`sft.bug_weights`") && err.contains("uniformly"),
            "{err}"
        );
        c.sft.bug_weights = BTreeMap::from([(Bug::SyntaxError, 1.0)]);
        c.validate().unwrap();
        let mut json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["sft"]["bug_weights"]["syntax_error"], 1.0);
        json["sft"]["bug_weights"] = serde_json::json!({"off_by_one": 1.0});
        let err = serde_json::from_value::<TrainConfig>(json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("off_by_one"), "{err}");
    }

    #[test]
    fn issue_46_the_tool_latency_budget_is_optional_and_positive() {
        let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
        assert!(json["tools"].get("latency_budget_secs").is_none(), "{json}");
        let mut c = TrainConfig::smoke();
        c.tools.latency_budget_secs = Some(0.0);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`tools.latency_budget_secs`"), "{err}");
        c.tools.latency_budget_secs = Some(2.5);
        c.validate().unwrap();
        let back: TrainConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back.tools.latency_budget_secs, Some(2.5));
    }

    #[test]
    fn issue_46_remote_verification_needs_tool_servers_and_is_optional() {
        let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
        assert!(json["rl"].get("verify").is_none(), "{json}");
        let mut c = TrainConfig::smoke();
        c.rl.verify = VerifyAt::Remote;
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("`rl.verify`") && err.contains("tools.servers"),
            "{err}"
        );
        c.tools.servers = vec!["http://a:1".into()];
        c.validate().unwrap();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rl"]["verify"], "remote");
        let back: TrainConfig = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.rl.verify, VerifyAt::Remote);
        let mut bad = json;
        bad["rl"]["verify"] = "nearby".into();
        let err = serde_json::from_value::<TrainConfig>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nearby"), "{err}");
    }

    #[test]
    fn tool_servers_and_pushed_weights_are_checked_and_optional() {
        // Absent from the presets' JSON, and from older configs: the in-process sandbox, disk.
        let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
        assert!(json["tools"].get("servers").is_none(), "{json}");
        assert!(json["rl"].get("publish_via").is_none(), "{json}");
        let mut c = TrainConfig::smoke();
        c.tools.servers = vec!["http://a:1".into(), "https://b:2".into()];
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("`tools.servers`") && err.contains("https://b:2"),
            "{err}"
        );
        c.tools.servers.pop();
        c.validate().unwrap();
        let back: TrainConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back.tools.servers, ["http://a:1"]);
        // Pushing weights needs engines to push to.
        let mut c = TrainConfig::smoke();
        c.rl.publish_via = PublishVia::Http;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`rl.publish_via`"), "{err}");
        c.rl.rollout_driver = RolloutDriver::Scheduled;
        c.rl.engines = Engines::Remote(vec!["http://a:1".into()]);
        c.validate().unwrap();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rl"]["publish_via"], "http");
        assert_eq!("disk".parse::<PublishVia>(), Ok(PublishVia::Disk));
        assert!("ftp".parse::<PublishVia>().unwrap_err().contains("`ftp`"));
    }

    #[test]
    fn the_load_refresh_defaults_to_a_second_and_must_be_a_duration() {
        let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
        json["rl"]
            .as_object_mut()
            .unwrap()
            .remove("load_refresh_secs");
        let c: TrainConfig = serde_json::from_value(json).unwrap();
        assert_eq!(
            c.rl.load_refresh_secs, 1.0,
            "older configs read every second"
        );
        for bad in [-0.5, f64::NAN, f64::INFINITY] {
            let mut c = TrainConfig::smoke();
            c.rl.load_refresh_secs = bad;
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("`rl.load_refresh_secs`"), "{bad}: {err}");
        }
        let mut c = TrainConfig::smoke();
        c.rl.load_refresh_secs = 0.0;
        c.validate().unwrap();
    }

    #[test]
    fn the_eval_temperature_defaults_to_one_and_must_be_positive() {
        let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
        json["eval"].as_object_mut().unwrap().remove("temperature");
        let c: TrainConfig = serde_json::from_value(json).unwrap();
        assert_eq!(c.eval.temperature, 1.0);
        let mut c = TrainConfig::smoke();
        c.eval.temperature = 0.0;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`eval.temperature`"), "{err}");
    }

    #[test]
    fn the_eval_budget_is_optional_and_must_be_positive() {
        // Absent in older configs and in the presets: the template's budget.
        let json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
        assert!(json["eval"].get("max_response_tokens").is_none(), "{json}");
        let mut set = json.clone();
        set["eval"]["max_response_tokens"] = 256.into();
        let c: TrainConfig = serde_json::from_value(set).unwrap();
        assert_eq!(c.eval.max_response_tokens, Some(256));
        let mut c = TrainConfig::smoke();
        c.eval.max_response_tokens = Some(0);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`eval.max_response_tokens`"), "{err}");
    }

    #[test]
    fn older_configs_get_adam_epsilon_1e_8_no_warm_up_and_one_lr_and_these_must_be_positive() {
        let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
        json["rl"].as_object_mut().unwrap().remove("adam_epsilon");
        json["rl"].as_object_mut().unwrap().remove("warmup_steps");
        json["rl"]
            .as_object_mut()
            .unwrap()
            .remove("gain_lr_multiplier");
        let c: TrainConfig = serde_json::from_value(json).unwrap();
        assert_eq!((c.rl.adam_epsilon, c.rl.warmup_steps), (1e-8, 0));
        assert_eq!(c.rl.gain_lr_multiplier, 1.0);
        for m in [0.0, -2.0, f64::INFINITY] {
            let mut c = TrainConfig::smoke();
            c.rl.gain_lr_multiplier = m;
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("`rl.gain_lr_multiplier`"), "{err}");
        }
        for eps in [0.0, -1e-3, f64::NAN] {
            let mut c = TrainConfig::smoke();
            c.rl.adam_epsilon = eps;
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("`rl.adam_epsilon`"), "{err}");
        }
    }

    #[test]
    fn roc_reads_old_bools_mode_names_and_objects() {
        let read = |roc: serde_json::Value| -> Result<TrainConfig, String> {
            let mut json = serde_json::to_value(TrainConfig::tiny()).unwrap();
            json["rl"]["roc"] = roc;
            serde_json::from_value(json).map_err(|e| e.to_string())
        };
        // Configs written before `rl.roc` was an object.
        assert_eq!(read(true.into()).unwrap().rl.roc, RocOptions::paper());
        assert_eq!(read(false.into()).unwrap().rl.roc, RocOptions::off());
        assert_eq!(
            read("reference".into()).unwrap().rl.roc,
            RocOptions::reference()
        );
        let c =
            read(serde_json::json!({"mode": "reference", "keep": 6, "min_failures": 1})).unwrap();
        assert_eq!(
            c.rl.roc,
            RocOptions {
                mode: RocMode::Reference,
                keep: Some(6),
                min_failures: Some(1),
                min_successes: None,
                reject_equal_reward: true,
            }
        );
        // The tiny preset's G = 8: floors 1 and min(2, 6 / 2) = 2.
        assert_eq!(c.rl.roc.floors(c.rl.roc.keep_for(8)), (1, 2));
        let paper = RocOptions::paper().select_config(8, 3).unwrap();
        assert_eq!(
            (paper.keep, paper.min_failures, paper.min_successes),
            (8, 0, 0)
        );
        assert!(paper.reject_equal_reward && paper.seed == 3);
        assert_eq!(paper.mode, rstar_roc::Mode::Paper);
        assert!(RocOptions::off().select_config(8, 3).is_none());
        assert_eq!(
            (
                RocOptions::off().rollouts(8),
                RocOptions::paper().rollouts(8)
            ),
            (8, 16)
        );
        // Bad values name the field.
        for bad in [
            serde_json::json!("sometimes"),
            serde_json::json!(3),
            serde_json::json!({"mode": "paper", "kepp": 4}),
            serde_json::json!({"mode": "half"}),
            serde_json::json!({"keep": 4}),
        ] {
            let err = read(bad.clone()).unwrap_err();
            assert!(err.contains("`rl.roc`"), "{bad}: {err}");
        }
    }

    #[test]
    fn roc_keep_and_floors_are_checked_against_the_group() {
        let check = |roc: RocOptions| {
            let mut c = TrainConfig::smoke();
            c.rl.group_size = 4;
            c.rl.roc = roc;
            c.validate().map_err(|e| e.to_string())
        };
        check(RocOptions::paper()).unwrap();
        check(RocOptions::reference()).unwrap();
        let keep = |k| RocOptions {
            keep: Some(k),
            ..RocOptions::paper()
        };
        for k in [1, 8, 9] {
            let err = check(keep(k)).unwrap_err();
            assert!(err.contains("`rl.roc.keep`"), "{k}: {err}");
        }
        check(keep(6)).unwrap();
        let err = check(RocOptions {
            min_failures: Some(3),
            min_successes: Some(2),
            ..RocOptions::paper()
        })
        .unwrap_err();
        assert!(err.contains("`rl.roc.min_failures`"), "{err}");
        // Off ignores keep.
        check(RocOptions {
            keep: Some(100),
            ..RocOptions::off()
        })
        .unwrap();
    }

    #[test]
    fn precision_defaults_to_f32_reads_bf16_and_names_the_field_of_a_bad_value() {
        let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
        assert_eq!(json["sft"]["precision"], "f32");
        assert_eq!(json["rl"]["precision"], "f32");
        json["sft"].as_object_mut().unwrap().remove("precision");
        json["rl"].as_object_mut().unwrap().remove("precision");
        let c: TrainConfig = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            (c.sft.precision, c.rl.precision),
            (Precision::F32, Precision::F32)
        );
        json["rl"]["precision"] = "bf16".into();
        let c: TrainConfig = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            (c.sft.precision, c.rl.precision),
            (Precision::F32, Precision::Bf16)
        );
        for (field, other) in [("sft", "rl"), ("rl", "sft")] {
            let mut bad = json.clone();
            bad[other]["precision"] = "f32".into();
            bad[field]["precision"] = "fp8".into();
            let err = serde_json::from_value::<TrainConfig>(bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("`{field}.precision`")) && err.contains("`fp8`"),
                "{err}"
            );
        }
        // From a file, the error names the file and line too.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        let mut bad = json;
        bad["sft"]["precision"] = "half".into();
        std::fs::write(&path, serde_json::to_string_pretty(&bad).unwrap()).unwrap();
        let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("`sft.precision`") && err.contains("bad.json") && err.contains("`half`"),
            "{err}"
        );
    }

    #[test]
    fn json_round_trips() {
        let c = TrainConfig::tiny();
        let text = serde_json::to_string_pretty(&c).unwrap();
        let back: TrainConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
    }
}
