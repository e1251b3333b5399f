//! The crate's error type.

/// What can stop `rstar serve` from starting or stopping.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server could not start or stop (binding its address, a bad serve option).
    #[error("serve: {0}")]
    Serve(String),
    /// The policy (model, tokenizer, checkpoint) failed.
    #[error("policy: {0}")]
    Policy(#[from] rstar_policy::Error),
}
