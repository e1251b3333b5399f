//! The crate's error type.

/// What can go wrong talking to an engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
}
