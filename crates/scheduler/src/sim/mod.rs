//! The deterministic discrete-event simulator: configs, presets and the entry points.
//!
//! # The engine model
//! Each engine does continuous batching in steps. A step decodes one token for every running
//! sequence and takes `step_base_s + step_per_seq_s * B + step_per_kv_token_s * K` seconds,
//! where `B` is the batch size and `K` the KV tokens of the running sequences (weights are
//! read once per step, compute grows with the batch, attention reads the whole cache); so
//! throughput grows with the batch while each sequence slows down. Newly admitted tokens are
//! prefilled at `prefill_tokens_per_s`, charged to the next step (chunked prefill). The
//! engine admits queued sequences first come first served while it has a batch slot and KV
//! room; when the next step would not fit in the KV cache it preempts the most recently
//! admitted sequence, which loses its cache and is prefilled again later (vLLM's recompute
//! preemption). That preemption is what [`PolicyReport::evictions`] counts.

mod report;
mod run;
mod workload;

use serde::{Deserialize, Serialize};

use crate::policy::{DispatchPolicy, KvRetention};
use crate::{Error, Result};

pub use report::{PolicyReport, SimReport, WorkloadSummary};
pub use workload::{SimRollout, SimTurn, ToolStep, Workload};

/// The speed and memory of one inference engine (one GPU or one tensor-parallel group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineModel {
    /// KV-cache capacity in tokens.
    pub kv_capacity_tokens: u64,
    /// Most sequences decoded at once (vLLM `max_num_seqs`, SGLang `max_running_requests`).
    pub max_batch: usize,
    /// Prefill speed in tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Fixed cost of one decode step, seconds (reading the weights).
    pub step_base_s: f64,
    /// Extra cost per running sequence per step, seconds.
    pub step_per_seq_s: f64,
    /// Extra cost per KV token of the running sequences per step, seconds (attention).
    pub step_per_kv_token_s: f64,
}

/// The distributions rollouts are drawn from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    /// Prompts per batch.
    pub prompts: usize,
    /// Rollouts per prompt (the paper samples 2G = 32).
    pub rollouts_per_prompt: usize,
    /// Prompt length range in tokens, drawn uniformly (inclusive).
    pub prompt_tokens: (u64, u64),
    /// Response budget in tokens (model and tool tokens together).
    pub max_response_tokens: u64,
    /// Most model turns per rollout.
    pub max_turns: u32,
    /// Median model tokens per rollout for a prompt of average difficulty (log-normal).
    pub response_tokens_median: f64,
    /// Log-normal sigma of the model tokens of one rollout around its prompt's median.
    pub response_tokens_sigma: f64,
    /// Log-normal sigma of the per-prompt difficulty factor: the rollouts of a hard prompt are
    /// all long, which is what makes contiguous static blocks unbalanced.
    pub prompt_difficulty_sigma: f64,
    /// Mean tool calls per rollout (geometric, so a long tail), scaled by the square root of
    /// the prompt's difficulty factor.
    pub tool_calls_mean: f64,
    /// Median tokens of a tool response (log-normal, sigma 0.7).
    pub tool_output_tokens_median: f64,
    /// Median tool latency in seconds (log-normal).
    pub tool_latency_median_s: f64,
    /// Log-normal sigma of the tool latency.
    pub tool_latency_sigma: f64,
    /// Tool latencies are capped here (the sandbox's timeout).
    pub tool_timeout_s: f64,
}

/// Everything one simulation needs. Serialisable, so a run is reproducible from its config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The preset's name, or any label.
    pub name: String,
    /// Seed of the workload.
    pub seed: u64,
    /// Number of engines.
    pub engines: usize,
    /// GPUs per engine (tensor parallelism); only reported, the engine model is per engine.
    #[serde(default = "one")]
    pub gpus_per_engine: usize,
    /// The engine model (all engines alike).
    pub engine: EngineModel,
    /// The workload.
    pub workload: WorkloadConfig,
    /// KV retention during tool calls.
    pub retention: KvRetention,
    /// kv-aware only: generate turns in segments of this many tokens, growing each
    /// rollout's reservation segment by segment under the banker's check (see
    /// [`KvLedger`](crate::KvLedger)); 0 reserves whole turns (prompt + budget while a turn
    /// runs). Segments need engines that honour `max_new_tokens` (see
    /// [`Dispatcher::segment_tokens`](crate::Dispatcher::segment_tokens)). Absent in JSON: 0.
    #[serde(default)]
    pub kv_segment_tokens: u64,
    /// Points in the utilisation timeline of each report.
    pub timeline_points: usize,
}

impl SimConfig {
    /// The preset names [`SimConfig::preset`] knows.
    pub const PRESETS: [&'static str; 2] = ["rstar2-agent-64gpu", "small"];

    /// The paper's scale: 64 GPUs, 512 prompts × 32 rollouts, responses up to 12K tokens
    /// with a long tail, ~0.3 s tools.
    ///
    /// The GPUs form 16 engines of four, as in the reference run script
    /// (`rollout.tensor_model_parallel_size=4`, `gpu_memory_utilization=0.8`, SGLang). The
    /// model is Qwen3-14B (40 layers, 8 KV heads of 128, bf16: 160 KiB of KV per token) on
    /// 192 GB MI300X: 0.8 × 4 × 192 GB less the weights leaves about 560 GB, 3.5M tokens. A
    /// decode step costs 10 ms (weights and all-reduces), 12.5 µs per sequence (28 GFLOP per
    /// token over four GPUs) and 7.5 ns per cached token (reading the cache); prefill runs at
    /// 80K tokens/s. These are estimates, not measurements: change them to fit a cluster.
    pub fn rstar2_agent_64gpu() -> Self {
        Self {
            name: "rstar2-agent-64gpu".into(),
            seed: 0,
            engines: 16,
            gpus_per_engine: 4,
            engine: EngineModel {
                kv_capacity_tokens: 3_500_000,
                max_batch: 256,
                prefill_tokens_per_s: 80_000.0,
                step_base_s: 0.010,
                step_per_seq_s: 0.000_012_5,
                step_per_kv_token_s: 0.000_000_007_5,
            },
            workload: WorkloadConfig {
                prompts: 512,
                rollouts_per_prompt: 32,
                prompt_tokens: (150, 600),
                max_response_tokens: 12_288,
                max_turns: 16,
                response_tokens_median: 3_000.0,
                response_tokens_sigma: 0.6,
                prompt_difficulty_sigma: 0.5,
                tool_calls_mean: 2.0,
                tool_output_tokens_median: 120.0,
                tool_latency_median_s: 0.25,
                tool_latency_sigma: 0.6,
                tool_timeout_s: 10.0,
            },
            retention: KvRetention::Keep,
            kv_segment_tokens: 256,
            timeline_points: 200,
        }
    }

    /// A small cluster for tests and laptops: 8 single-GPU engines, 128 prompts × 16
    /// rollouts, a 4K budget, and the paper-scale preset's proportions (rollouts per engine
    /// four times the batch limit, room for about 64 full reservations per engine).
    pub fn small() -> Self {
        Self {
            name: "small".into(),
            seed: 0,
            engines: 8,
            gpus_per_engine: 1,
            engine: EngineModel {
                kv_capacity_tokens: 280_000,
                max_batch: 64,
                prefill_tokens_per_s: 80_000.0,
                step_base_s: 0.010,
                step_per_seq_s: 0.000_012_5,
                step_per_kv_token_s: 0.000_000_007_5,
            },
            workload: WorkloadConfig {
                prompts: 128,
                rollouts_per_prompt: 16,
                prompt_tokens: (100, 300),
                max_response_tokens: 4_096,
                max_turns: 8,
                response_tokens_median: 1_000.0,
                response_tokens_sigma: 0.6,
                prompt_difficulty_sigma: 0.5,
                tool_calls_mean: 2.0,
                tool_output_tokens_median: 80.0,
                tool_latency_median_s: 0.25,
                tool_latency_sigma: 0.6,
                tool_timeout_s: 10.0,
            },
            retention: KvRetention::Keep,
            kv_segment_tokens: 256,
            timeline_points: 100,
        }
    }

    /// A preset by name (see [`SimConfig::PRESETS`]).
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "rstar2-agent-64gpu" => Ok(Self::rstar2_agent_64gpu()),
            "small" => Ok(Self::small()),
            other => Err(Error::UnknownPreset(other.to_string())),
        }
    }

    /// Checks that the simulation can run: positive sizes and speeds, and an engine that
    /// holds at least one whole rollout.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, reason: &str| {
            Err(Error::Config {
                field,
                reason: reason.to_string(),
            })
        };
        let (e, w) = (&self.engine, &self.workload);
        if self.engines == 0 || self.gpus_per_engine == 0 {
            return bad("engines", "engines and gpus_per_engine must be at least 1");
        }
        if e.max_batch == 0 {
            return bad("engine.max_batch", "must be at least 1");
        }
        if e.prefill_tokens_per_s.is_nan() || e.prefill_tokens_per_s <= 0.0 {
            return bad("engine.prefill_tokens_per_s", "must be positive");
        }
        let costs = [e.step_base_s, e.step_per_seq_s, e.step_per_kv_token_s];
        if costs.iter().any(|c| !c.is_finite() || *c < 0.0) || e.step_base_s <= 0.0 {
            return bad(
                "engine.step_base_s",
                "step costs must be non-negative, the base positive",
            );
        }
        if w.prompts == 0 || w.rollouts_per_prompt == 0 {
            return bad(
                "workload.prompts",
                "prompts and rollouts_per_prompt must be at least 1",
            );
        }
        if w.prompt_tokens.0 == 0 || w.prompt_tokens.0 > w.prompt_tokens.1 {
            return bad("workload.prompt_tokens", "needs 1 <= min <= max");
        }
        if w.max_response_tokens == 0 || w.max_turns == 0 {
            return bad(
                "workload.max_response_tokens",
                "budget and max_turns must be at least 1",
            );
        }
        let finite = [
            w.response_tokens_median,
            w.response_tokens_sigma,
            w.prompt_difficulty_sigma,
            w.tool_calls_mean,
            w.tool_output_tokens_median,
            w.tool_latency_median_s,
            w.tool_latency_sigma,
            w.tool_timeout_s,
        ];
        if finite.iter().any(|x| !x.is_finite() || *x < 0.0) || w.response_tokens_median < 1.0 {
            return bad(
                "workload",
                "distribution parameters must be finite and non-negative",
            );
        }
        let need = w.prompt_tokens.1 + w.max_response_tokens + 1;
        if e.kv_capacity_tokens < need {
            return bad(
                "engine.kv_capacity_tokens",
                &format!("must hold one whole rollout (prompt + budget + 1 = {need} tokens)"),
            );
        }
        if self.timeline_points == 0 {
            return bad("timeline_points", "must be at least 1");
        }
        Ok(())
    }
}

fn one() -> usize {
    1
}

impl Default for SimConfig {
    fn default() -> Self {
        Self::small()
    }
}

/// Simulates one policy on the config's seeded workload.
pub fn simulate(config: &SimConfig, policy: DispatchPolicy) -> Result<PolicyReport> {
    config.validate()?;
    let workload = Workload::generate(&config.workload, config.seed);
    Ok(run::run(config, &workload, policy))
}

/// Simulates one policy on a given workload (e.g. one workload shared by several runs).
pub fn simulate_workload(
    config: &SimConfig,
    workload: &Workload,
    policy: DispatchPolicy,
) -> Result<PolicyReport> {
    config.validate()?;
    Ok(run::run(config, workload, policy))
}

/// Simulates all three policies on the same seeded workload, in [`DispatchPolicy::ALL`] order.
pub fn simulate_all(config: &SimConfig) -> Result<SimReport> {
    config.validate()?;
    let workload = Workload::generate(&config.workload, config.seed);
    let policies = DispatchPolicy::ALL
        .iter()
        .map(|&p| run::run(config, &workload, p))
        .collect();
    Ok(SimReport {
        config: config.clone(),
        workload: workload.summary(),
        policies,
    })
}
