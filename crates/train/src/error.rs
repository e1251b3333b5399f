//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong in a training run: its config, its steps, its checkpoints, and what the
/// rollouts, the policy and the recipe's crates report (wrapped).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a JSONL or JSON file (trajectories, metrics, a config) could not be read.
    #[error("{}:{line}: {message}", path.display())]
    Dataset {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A trainer configuration is unusable; names the field.
    #[error("invalid train config: `{field}` {message}")]
    TrainConfig {
        /// The field, dotted (`sft.batch_size`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A training step produced a NaN or infinite loss or gradient norm. The run stops before
    /// the optimizer applies it: no metrics line, no checkpoint of it.
    #[error(
        "{phase} step {step} diverged: the {quantity} is {value} (lower `{lr_field}` or set a gradient clip); nothing of this step was applied, logged or checkpointed"
    )]
    Diverged {
        /// `sft` or `rl`.
        phase: &'static str,
        /// The 1-based step.
        step: u64,
        /// `loss` or `gradient norm`.
        quantity: &'static str,
        /// The value (NaN or ±inf).
        value: f64,
        /// The learning-rate field to look at (`sft.lr`, `rl.lr`).
        lr_field: &'static str,
    },
    /// A run cannot be resumed from this directory or checkpoint; names the path.
    #[error("resume from {}: {message}", path.display())]
    Resume {
        /// The run directory or checkpoint file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A rollout, an evaluation or the tools failed (`rstar-rollout`).
    #[error(transparent)]
    Rollout(#[from] rstar_rollout::Error),
    /// An engine failed (`rstar-engine`).
    #[error(transparent)]
    Engine(#[from] rstar_engine::Error),
    /// Reading a run's artefacts or writing its report, plots or TensorBoard events failed
    /// (`rstar-analysis`).
    #[error(transparent)]
    Analysis(#[from] rstar_analysis::Error),
    /// A metrics or trajectory line is not valid JSON of its schema.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
    /// The agent format rejected a trajectory.
    #[error(transparent)]
    Episode(#[from] rstar_episode::Error),
    /// The task set or a problem file is unusable.
    #[error(transparent)]
    Tasks(#[from] rstar_tasks::Error),
    /// The policy (model, tokenizer, generation, checkpoint) failed.
    #[error("policy: {0}")]
    Policy(#[from] rstar_policy::Error),
    /// The GRPO loss or advantages rejected their inputs.
    #[error("grpo: {0}")]
    Grpo(#[from] rstar_grpo::GrpoError),
    /// RoC down-sampling rejected its inputs.
    #[error("roc: {0}")]
    Roc(#[from] rstar_roc::Error),
    /// The curriculum rejected its config or a step's metrics.
    #[error("curriculum: {0}")]
    Curriculum(#[from] rstar_curriculum::Error),
    /// The tool sandbox could not be started.
    #[error("tool sandbox: {0}")]
    Toolenv(#[from] rstar_toolenv::Error),
    /// The rollout dispatcher failed.
    #[error("scheduler: {0}")]
    Scheduler(#[from] rstar_scheduler::Error),
}
