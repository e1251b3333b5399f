//! One error type over the workspace's crates, for code that calls several of them.

/// An error of any of the crates this facade re-exports; each variant wraps that crate's own
/// error and shows it unchanged. `?` converts each of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// Reading a run's artefacts or writing its report, plots or TensorBoard events failed.
    #[error(transparent)]
    Analysis(#[from] rstar_analysis::Error),
    /// The agent format rejected a call or a trajectory.
    #[error(transparent)]
    Episode(#[from] rstar_episode::Error),
    /// The task set or a problem file is unusable.
    #[error(transparent)]
    Tasks(#[from] rstar_tasks::Error),
    /// A ground truth the verifier cannot score.
    #[error("verifier: {0}")]
    Verifier(#[from] rstar_verifier::Error),
    /// An engine failed (`rstar-engine`).
    #[cfg(feature = "engine")]
    #[error(transparent)]
    Engine(#[from] rstar_engine::Error),
    /// The policy failed (`rstar-policy`).
    #[cfg(feature = "engine")]
    #[error("policy: {0}")]
    Policy(#[from] rstar_policy::Error),
    /// `rstar serve` could not start or stop (`rstar-serve`).
    #[cfg(feature = "serve")]
    #[error(transparent)]
    Serve(#[from] rstar_serve::Error),
    /// A rollout, an evaluation or the tools failed (`rstar-rollout`).
    #[cfg(feature = "rollout")]
    #[error(transparent)]
    Rollout(#[from] rstar_rollout::Error),
    /// A training run failed (`rstar-train`).
    #[cfg(feature = "train")]
    #[error(transparent)]
    Train(#[from] rstar_train::Error),
}
