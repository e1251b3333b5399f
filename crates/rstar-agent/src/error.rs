//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the engines, the drivers, evaluation and the trainer; the agent
/// format's and the task set's errors are wrapped ([`AgentError::Episode`], [`AgentError::Tasks`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A tool executor returned a different number of outcomes than there were calls.
    #[error("expected {expected} tool outcomes, got {got}")]
    OutcomeCount {
        /// Calls handed out.
        expected: usize,
        /// Outcomes received.
        got: usize,
    },
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
    /// Reading a run's artefacts or writing its report, plots or TensorBoard events failed
    /// (`rstar-analysis`).
    #[error(transparent)]
    Analysis(#[from] rstar_analysis::Error),
    /// A trajectory line is not valid JSON of the trajectory schema.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
    /// The agent format rejected a call or a trajectory (an episode driven in the wrong state, a
    /// trajectory that breaks an invariant).
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
    /// A ground truth the verifier cannot score.
    #[error("verifier: {0}")]
    Verifier(#[from] rstar_verifier::Error),
    /// The rollout dispatcher failed: no engine, a reservation that fits no engine, or an
    /// engine or tool failure (its message kept).
    #[error("scheduler: {0}")]
    Scheduler(#[from] rstar_scheduler::Error),
    /// A problem cannot be evaluated (e.g. a ground truth the verifier cannot score).
    #[error("problem `{id}`: {message}")]
    Problem {
        /// The problem's id.
        id: String,
        /// What is wrong with it.
        message: String,
    },
    /// An evaluation option or input is unusable; names the option.
    #[error("eval: `{field}` {message}")]
    EvalConfig {
        /// The option (`--model`, `samples`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// `rstar serve` could not start or stop (binding its address, a bad serve option).
    #[error("serve: {0}")]
    Serve(String),
    /// A remote OpenAI-compatible server could not be reached or answered something unusable.
    #[error("remote engine {url}: {message}")]
    Remote {
        /// The server's base URL.
        url: String,
        /// What went wrong, naming the response field when one is missing or malformed.
        message: String,
    },
    /// A remote server stopped answering: connections refused or reset, no answer within the
    /// timeout, or 5xx/429 answers, on every retry. Rollouts treat the engine as gone (they
    /// go on on the others, see `rstar_scheduler::EngineUnavailable`).
    #[error("remote engine {url} is unavailable: {message}")]
    Unavailable {
        /// The server's base URL.
        url: String,
        /// The last failure.
        message: String,
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
}
