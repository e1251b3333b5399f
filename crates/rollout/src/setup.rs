//! [`RolloutSetup`]: what every rollout of a run shares (the template, its limits, the sampler,
//! the stop strings), and the one place the local engines and the scheduled driver's
//! configuration are made from it. The trainer's RL step and `rstar eval` both build theirs
//! here, so a local engine's KV budget follows one rule ([`RolloutSetup::kv_capacity`]).
//!
//! ```
//! use rstar_episode::template::TemplateFormat;
//! use rstar_rollout::setup::RolloutSetup;
//! use rstar_scheduler::DispatchPolicy;
//!
//! // A curriculum stage's budgets on the compact layout, sampled at T = 1.
//! let setup = RolloutSetup::new(TemplateFormat::Compact).budget(96, 3).temperature(1.0);
//! assert_eq!(setup.limits.max_response_tokens, 96);
//! assert_eq!(setup.stop_strings(), ["</c>", "</answer>"]);
//! let config = setup.schedule(7, DispatchPolicy::LeastRequests);
//! assert_eq!(config.limits, setup.limits);
//! // Room for 8 rollouts of a 512-position model, but never under the engine's default.
//! let engine = setup.local_engine_config("train-0", 8, 512);
//! assert_eq!(engine.max_batch, 8);
//! assert_eq!(engine.kv_capacity, setup.kv_capacity(8, 512));
//! ```

use std::sync::Arc;

use rstar_engine::{LocalEngine, LocalEngineConfig};
use rstar_episode::episode::Limits;
use rstar_episode::template::{Template, TemplateFormat};
use rstar_policy::{Qwen, Sampling, Tokenizer};
use rstar_scheduler::{DispatchPolicy, KvRetention};

use crate::RolloutConfig;
use crate::scheduled::ScheduleConfig;

/// The base limits of a template: [`Limits::compact`] for the character model's compact
/// layout, [`Limits::rstar2_agent`] for ChatML.
pub fn base_limits(template: TemplateFormat) -> Limits {
    match template {
        TemplateFormat::Compact => Limits::compact(),
        TemplateFormat::ChatMl => Limits::rstar2_agent(),
    }
}

/// What the rollouts of a run (a curriculum stage, an evaluation) share.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutSetup {
    /// The prompt and tool-call layout.
    pub template: TemplateFormat,
    /// Token, turn and tool-output limits ([`base_limits`] of the template unless set).
    pub limits: Limits,
    /// The sampler of every assistant turn.
    pub sampling: Sampling,
    /// Token ids that end a turn besides the template's stop strings (none unless set: the
    /// trainer's turns end on the stop strings alone; `rstar eval` adds the model's own).
    pub eos: Vec<u32>,
}

impl RolloutSetup {
    /// The template's base limits, temperature 1, no EOS ids.
    pub fn new(template: TemplateFormat) -> Self {
        Self {
            template,
            limits: base_limits(template),
            sampling: Sampling::Temperature { temperature: 1.0 },
            eos: Vec::new(),
        }
    }

    /// A stage's budgets: the most response tokens and assistant turns of one rollout.
    #[must_use]
    pub fn budget(mut self, max_response_tokens: usize, max_assistant_turns: usize) -> Self {
        self.limits.max_response_tokens = max_response_tokens;
        self.limits.max_assistant_turns = max_assistant_turns;
        self
    }

    /// Samples at `temperature` (0: greedy, as the policy's sampler reads it).
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.sampling = Sampling::Temperature { temperature };
        self
    }

    /// Samples with `sampling`.
    #[must_use]
    pub fn sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Ends turns on these token ids too.
    #[must_use]
    pub fn eos(mut self, eos: Vec<u32>) -> Self {
        self.eos = eos;
        self
    }

    /// The template's stop strings, owned.
    pub fn stop_strings(&self) -> Vec<String> {
        Template::of(self.template)
            .stop_strings()
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// The scheduled driver's configuration: these limits, caches kept over tool calls, the
    /// integer reward, no per-token statistics or log-probs, no load polling. Set the other
    /// fields with struct update syntax.
    pub fn schedule(&self, seed: u64, dispatch: DispatchPolicy) -> ScheduleConfig {
        ScheduleConfig {
            template: self.template,
            limits: self.limits.clone(),
            seed,
            policy: dispatch,
            retention: KvRetention::Keep,
            record_entropy: false,
            verifier: rstar_verifier::Mode::Integer,
            load_refresh_ms: 0,
            keep_logprobs: false,
        }
    }

    /// The lock-step driver's configuration: these limits, sampler and EOS ids, batches of up
    /// to `max_batch` sequences, per-rollout seeds (so the trajectories do not depend on the
    /// batch, as the scheduled driver's), no weight version.
    pub fn lock_step(&self, seed: u64, max_batch: usize) -> RolloutConfig {
        RolloutConfig {
            template: self.template,
            limits: self.limits.clone(),
            sampling: self.sampling,
            seed,
            max_batch,
            eos: self.eos.clone(),
            per_rollout_seeds: true,
            weight_version: None,
        }
    }

    /// The KV budget, in tokens, that a local engine reports to the dispatcher: room for
    /// `max_batch` rollouts of `max_prompt_tokens` (the model's `max_position_embeddings`)
    /// plus the response budget each, and never less than [`LocalEngineConfig::new`]'s. A
    /// local engine has no paged cache, so its nominal budget must not hold back a rollout
    /// its batch admits under `kv-aware` dispatch.
    pub fn kv_capacity(&self, max_batch: usize, max_prompt_tokens: usize) -> u64 {
        let per_rollout = (self.limits.max_response_tokens + max_prompt_tokens) as u64;
        let default = LocalEngineConfig::new(Vec::new()).kv_capacity;
        default.max(max_batch.max(1) as u64 * per_rollout)
    }

    /// A local engine's configuration for this setup: its stop strings, EOS ids and sampler,
    /// batches of up to `max_batch` turns and [`kv_capacity`](Self::kv_capacity).
    pub fn local_engine_config(
        &self,
        name: impl Into<String>,
        max_batch: usize,
        max_prompt_tokens: usize,
    ) -> LocalEngineConfig {
        let mut config = LocalEngineConfig::new(self.stop_strings());
        config.eos = self.eos.clone();
        config.sampling = self.sampling;
        config.max_batch = max_batch.max(1);
        config.kv_capacity = self.kv_capacity(max_batch, max_prompt_tokens);
        config.name = name.into();
        config
    }

    /// Spawns `count` local engines named `{prefix}-{i}`, each with its own copy of `model`,
    /// batches of up to `max_batch` turns and weight version `version`.
    pub fn spawn_local(
        &self,
        model: &Qwen,
        tokenizer: &Tokenizer,
        count: usize,
        max_batch: usize,
        prefix: &str,
        version: &str,
    ) -> Vec<Arc<LocalEngine>> {
        (0..count)
            .map(|i| {
                let mut config = self.local_engine_config(
                    format!("{prefix}-{i}"),
                    max_batch,
                    model.config.max_position_embeddings,
                );
                config.weight_version = version.to_string();
                Arc::new(LocalEngine::spawn(model.clone(), tokenizer.clone(), config))
            })
            .collect()
    }
}
