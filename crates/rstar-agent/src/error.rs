//! One error type over the workspace's crates, for code that calls several of them.

/// An error of any of the crates this facade re-exports; each variant wraps that crate's own
/// error and shows it unchanged. `?` converts each of them.
///
/// Each error has one variant: a policy error is [`AgentError::Policy`] and an agent-format
/// error [`AgentError::Episode`] whether the policy, a rollout or the trainer returned it (the
/// conversions lift them out of the crate that wrapped them; the text is the same).
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
    Tasks(rstar_tasks::Error),
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
    Rollout(rstar_rollout::Error),
    /// A training run failed (`rstar-train`).
    #[cfg(feature = "train")]
    #[error(transparent)]
    Train(rstar_train::Error),
}

impl From<rstar_tasks::Error> for AgentError {
    fn from(e: rstar_tasks::Error) -> Self {
        match e {
            rstar_tasks::Error::Episode(e) => AgentError::Episode(e),
            e => AgentError::Tasks(e),
        }
    }
}

#[cfg(feature = "rollout")]
impl From<rstar_rollout::Error> for AgentError {
    fn from(e: rstar_rollout::Error) -> Self {
        match e {
            rstar_rollout::Error::Policy(e) => AgentError::Policy(e),
            rstar_rollout::Error::Episode(e) => AgentError::Episode(e),
            rstar_rollout::Error::Engine(e) => AgentError::Engine(e),
            e => AgentError::Rollout(e),
        }
    }
}

#[cfg(feature = "train")]
impl From<rstar_train::Error> for AgentError {
    fn from(e: rstar_train::Error) -> Self {
        match e {
            rstar_train::Error::Policy(e) => AgentError::Policy(e),
            rstar_train::Error::Engine(e) => AgentError::Engine(e),
            rstar_train::Error::Episode(e) => AgentError::Episode(e),
            rstar_train::Error::Analysis(e) => AgentError::Analysis(e),
            rstar_train::Error::Rollout(e) => e.into(),
            rstar_train::Error::Tasks(e) => e.into(),
            e => AgentError::Train(e),
        }
    }
}

#[cfg(all(test, feature = "train"))]
mod tests {
    use super::*;

    /// A policy error has one variant, whichever crate returned it, and the same text.
    #[test]
    fn a_policy_error_has_one_variant_whoever_returns_it() {
        let policy = || rstar_policy::Error::InvalidConfig {
            field: "num_heads".into(),
            reason: "bad".into(),
        };
        let direct = AgentError::from(policy());
        for lifted in [
            AgentError::from(rstar_rollout::Error::Policy(policy())),
            AgentError::from(rstar_train::Error::Policy(policy())),
            AgentError::from(rstar_train::Error::from(rstar_rollout::Error::Policy(
                policy(),
            ))),
        ] {
            assert!(matches!(lifted, AgentError::Policy(_)), "{lifted:?}");
            assert_eq!(lifted.to_string(), direct.to_string());
        }
    }
}
