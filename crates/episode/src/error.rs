//! The agent format's error type, and the two file errors every crate above it shares:
//! [`IoError`] (a file that could not be read or written) and [`LineError`] (a line of a file
//! that could not be read). Each crate's error enum holds them as `Io(IoError)` and
//! `Dataset(LineError)`, shown unchanged, so one message reads the same from every crate.

use std::path::{Path, PathBuf};

/// Reading or writing a file failed: `{path}: {source}`.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct IoError {
    /// The file.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: std::io::Error,
}

impl IoError {
    /// The error of `path`.
    pub fn new(path: impl Into<PathBuf>, source: std::io::Error) -> IoError {
        IoError {
            path: path.into(),
            source,
        }
    }

    /// For `map_err`: `std::fs::read(p).map_err(IoError::at(p))?`.
    pub fn at(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
        move |source| IoError::new(path, source)
    }
}

/// A line of a file (JSONL rows, a metrics log, a config) could not be read:
/// `{path}:{line}: {message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {message}", path.display())]
pub struct LineError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, naming the field.
    pub message: String,
}

impl LineError {
    /// Line `line` (1-based) of `path`.
    pub fn new(path: impl Into<PathBuf>, line: usize, message: impl Into<String>) -> LineError {
        LineError {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}

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
    #[error(transparent)]
    Dataset(#[from] LineError),
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A value could not be written as JSON.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_the_file_and_keep_their_source() {
        let e = IoError::at(Path::new("runs/x/metrics.jsonl"))(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "gone",
        ));
        assert_eq!(e.to_string(), "runs/x/metrics.jsonl: gone");
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("gone".into())
        );
        let wrapped = Error::from(e);
        assert_eq!(wrapped.to_string(), "runs/x/metrics.jsonl: gone");
        let line = Error::from(LineError::new("a.jsonl", 3, "`answer` is missing"));
        assert_eq!(line.to_string(), "a.jsonl:3: `answer` is missing");
    }
}
