//! The crate's error type.

/// What can go wrong in a rollout, an evaluation or starting the tools.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tool executor returned a different number of outcomes than there were calls.
    #[error("expected {expected} tool outcomes, got {got}")]
    OutcomeCount {
        /// Calls handed out.
        expected: usize,
        /// Outcomes received.
        got: usize,
    },
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] rstar_episode::IoError),
    /// A trajectory or summary could not be written as JSON.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
    /// The agent format rejected a call or a trajectory.
    #[error(transparent)]
    Episode(rstar_episode::Error),
    /// The policy (model, tokenizer, generation) failed.
    #[error("policy: {0}")]
    Policy(#[from] rstar_policy::Error),
    /// An engine failed (a remote server unreachable or answering something unusable).
    #[error(transparent)]
    Engine(#[from] rstar_engine::Error),
    /// The tool sandbox could not be started.
    #[error("tool sandbox: {0}")]
    Toolenv(#[from] rstar_toolenv::Error),
    /// The tools failed as a whole (not one call, whose failure is an outcome): servers that
    /// could not be reached or configured, a verification that could not be had.
    #[error("tools: {0}")]
    Tools(#[source] rstar_scheduler::BoxError),
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
}

impl Error {
    /// [`Error::Tools`] with a message.
    pub fn tools(message: impl Into<String>) -> Self {
        Self::Tools(message.into().into())
    }
}

impl From<rstar_episode::Error> for Error {
    /// A file error of the agent format is this crate's [`Error::Io`]: one place for it.
    fn from(e: rstar_episode::Error) -> Self {
        match e {
            rstar_episode::Error::Io(e) => Error::Io(e),
            e => Error::Episode(e),
        }
    }
}
