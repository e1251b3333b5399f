//! The agent format's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the agent format: an [`Episode`](crate::episode::Episode)
/// driven in the wrong order, a trajectory that breaks an invariant, a JSONL file of
/// trajectories that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// A trajectory breaks an invariant (lengths of its per-token fields, its turn spans); the
    /// message names the field.
    #[error("invalid trajectory: {0}")]
    Trajectory(String),
    /// A line of a JSONL file could not be read.
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
    /// A value could not be written as JSON.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
}
