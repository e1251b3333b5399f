//! The scheduled driver's local engines for the RL step (`rl.rollout_driver = "scheduled"`
//! without remote engines): [`LocalEngines`], kept across the steps of a stage, and
//! [`scheduled_rollout`] for one rollout on engines of its own.

use rstar_episode::IoError;
use std::sync::Arc;

use rstar_curriculum::Stage;
use rstar_engine::{LocalEngine, SharedTokenizer, TurnGenerator};
use rstar_episode::template::TemplateFormat;
use rstar_policy::{Qwen, Tokenizer};
use rstar_rollout::scheduled::{AsyncTools, ScheduleConfig, run_scheduled_blocking};
use rstar_rollout::{Prompt, RolloutOutput};
use rstar_scheduler::DispatchPolicy;

use crate::error::Error;
use crate::rl::{DispatchRecord, stage_setup};

/// What [`scheduled_rollout`] needs besides the policy, prompts and tools.
#[derive(Debug, Clone, Copy)]
pub struct ScheduledRollout<'a> {
    /// The prompt and tool-call layout.
    pub template: TemplateFormat,
    /// The stage: token and turn limits, temperature.
    pub stage: &'a Stage,
    /// Turn `t` of rollout `r` samples with `mix(mix(seed, r), t)`.
    pub seed: u64,
    /// Local engines (at least one is started).
    pub engines: usize,
    /// How rollouts are assigned to engines.
    pub dispatch: DispatchPolicy,
    /// Keep the engines' per-token log-probs on the trajectories
    /// ([`ScheduleConfig::keep_logprobs`]).
    pub keep_logprobs: bool,
    /// The engines' weight version, stamped on every assistant turn (`None`: `default`).
    pub weight_version: Option<&'a str>,
}

/// Rolls out `samples` episodes of every prompt through
/// [`run_scheduled_blocking`] on `engines` [`LocalEngine`]s, each holding its own copy of
/// `policy` and stopped when the rollout is over, with the stage's limits and temperature and
/// tool calls on `tools`. Trajectories are prompt-major like [`rollout`]'s, without per-token
/// statistics, and do not depend on the number of engines or the dispatch policy (per-turn
/// seeds).
///
/// # Errors
/// [`Error::Scheduler`] when an engine fails, the verifier's errors for a ground truth it
/// cannot score.
pub fn scheduled_rollout(
    policy: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    samples: usize,
    options: &ScheduledRollout<'_>,
    tools: Arc<dyn AsyncTools>,
) -> Result<RolloutOutput, Error> {
    LocalEngines::new()
        .roll_out(policy, tokenizer, prompts, samples, options, tools)
        .map(|(output, _)| output)
}

/// The local engines of the scheduled driver, kept across the steps of a stage: spawned once
/// for the stage's sampler, limits and batch, then each step's policy swapped in
/// ([`LocalEngine::swap_weights`]) instead of spawning new engine threads. A new stage (or
/// any other change of what the engines were spawned for) spawns them again.
#[derive(Default)]
pub struct LocalEngines {
    /// What the engines were spawned for (the stage, template, count and batch).
    key: String,
    engines: Vec<Arc<LocalEngine>>,
    /// Engines spawned over this holder's life.
    spawned: usize,
}

impl std::fmt::Debug for LocalEngines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEngines")
            .field("key", &self.key)
            .field("engines", &self.engines.len())
            .field("spawned", &self.spawned)
            .finish()
    }
}

impl LocalEngines {
    /// None yet: the first rollout spawns them.
    pub fn new() -> Self {
        Self::default()
    }

    /// Engine threads spawned so far (a stage's engines count once, whatever its steps).
    pub fn spawned(&self) -> usize {
        self.spawned
    }

    /// Rolls out `samples` episodes of every prompt on these engines with `policy`'s weights
    /// (spawning them first when `options` needs other engines than the ones held), and the
    /// dispatch record.
    ///
    /// # Errors
    /// [`Error::Scheduler`] when an engine fails, the verifier's errors.
    pub fn roll_out(
        &mut self,
        policy: &Qwen,
        tokenizer: &Tokenizer,
        prompts: &[Prompt],
        samples: usize,
        options: &ScheduledRollout<'_>,
        tools: Arc<dyn AsyncTools>,
    ) -> Result<(RolloutOutput, DispatchRecord), Error> {
        let setup = stage_setup(options.template, options.stage);
        let count = options.engines.max(1);
        let rollouts = (prompts.len() * samples).max(1);
        let per_engine = rollouts.div_ceil(count);
        let version = options
            .weight_version
            .unwrap_or(rstar_engine::INITIAL_WEIGHT_VERSION);
        let key = format!("{setup:?}|{count}|{per_engine}");
        if key == self.key && self.engines.len() == count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|source| Error::Io(IoError::new("<tokio runtime>", source)))?;
            for engine in &self.engines {
                runtime
                    .block_on(engine.swap_weights(policy.clone(), version))
                    .map_err(|e| {
                        Error::Io(IoError::new(
                            format!("<engine {}>", engine.name()),
                            std::io::Error::other(format!("swapping in the step's weights: {e}")),
                        ))
                    })?;
            }
        } else {
            self.engines =
                setup.spawn_local(policy, tokenizer, count, per_engine, "train", version);
            self.spawned += count;
            self.key = key;
        }
        let generators: Vec<Arc<dyn TurnGenerator>> = self
            .engines
            .iter()
            .map(|e| Arc::clone(e) as Arc<dyn TurnGenerator>)
            .collect();
        let names: Vec<String> = generators.iter().map(|g| g.name()).collect();
        let config = ScheduleConfig {
            keep_logprobs: options.keep_logprobs,
            ..setup.schedule(options.seed, options.dispatch)
        };
        let out = run_scheduled_blocking(
            generators,
            SharedTokenizer(Arc::new(tokenizer.clone())),
            tools,
            prompts,
            samples,
            &config,
        )?;
        Ok((out.rollout, DispatchRecord::new(names, &out.dispatch)))
    }
}
