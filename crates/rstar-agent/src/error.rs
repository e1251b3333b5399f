//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the agent-format layer and the embedded task set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// An [`Episode`](crate::episode::Episode) method was called in the wrong state.
    #[error("episode misuse: {0}")]
    EpisodeState(String),
    /// A tool executor returned a different number of outcomes than there were calls.
    #[error("expected {expected} tool outcomes, got {got}")]
    OutcomeCount {
        /// Calls handed out.
        expected: usize,
        /// Outcomes received.
        got: usize,
    },
    /// A line of a problem file could not be read.
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
    /// A task-set configuration is unusable.
    #[error("invalid task config: {0}")]
    TaskConfig(String),
    /// A demonstration could not be built because the executor's output did not match.
    #[error("demonstration for `{id}`: {message}")]
    Demonstration {
        /// The problem id.
        id: String,
        /// What the executor returned instead of what was needed.
        message: String,
    },
    /// A trajectory breaks an invariant (lengths of its per-token fields, its turn spans); the
    /// message names the field.
    #[error("invalid trajectory: {0}")]
    Trajectory(String),
    /// Per-token entropies cannot be analysed as asked.
    #[error("entropy analysis: {0}")]
    Analysis(String),
    /// A trajectory line is not valid JSON of the trajectory schema.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
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
    /// A trainer configuration is unusable; names the field.
    #[error("invalid train config: `{field}` {message}")]
    TrainConfig {
        /// The field, dotted (`sft.batch_size`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}
