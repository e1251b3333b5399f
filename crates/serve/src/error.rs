//! The crate's error type.

/// What can stop `rstar serve` from starting or stopping.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server could not start or stop (binding its address, a bad serve option).
    #[error("serve: {0}")]
    Serve(String),
    /// The serving loop failed, or its task did ([`ServerHandle::shutdown`](crate::ServerHandle::shutdown)).
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}
