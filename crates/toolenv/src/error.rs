//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while building or driving a pool.
///
/// A call that fails inside the sandbox is never an `Error`: it is a
/// [`ToolResult`](crate::ToolResult) with an outcome, and a worker that dies is
/// reported as an [`Outcome::Internal`](crate::Outcome::Internal) result the
/// caller may retry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Python interpreter could not be started.
    #[error("cannot start python interpreter {python}: {source}")]
    Spawn {
        /// The configured interpreter.
        python: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// A worker broke the protocol, died, or did not answer in time.
    #[error("worker {worker}: {message}")]
    Worker {
        /// The worker index.
        worker: usize,
        /// What happened.
        message: String,
    },
    /// A filesystem operation on the pool's own directories failed.
    #[error(transparent)]
    Io(#[from] rstar_episode::IoError),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The pool was shut down.
    #[error("the pool is shut down")]
    Closed,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
