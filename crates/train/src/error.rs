//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong in a training run: its config, its steps, its checkpoints, and what the
/// rollouts, the policy and the recipe's crates report (wrapped).
///
/// Each error has one place: a policy error is [`Error::Policy`], a file error
/// [`Error::Io`], a bad line [`Error::Dataset`], however deep it came from (a rollout's policy
/// error, a task file's line, an analysis read are lifted out of their crate's wrapper).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a JSONL or JSON file (trajectories, metrics, a config) could not be read.
    #[error(transparent)]
    Dataset(#[from] rstar_episode::LineError),
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] rstar_episode::IoError),
    /// A trainer configuration is unusable; names the field.
    #[error("invalid train config: `{field}` {message}")]
    TrainConfig {
        /// The field, dotted (`sft.batch_size`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A training step produced a NaN or infinite loss or gradient norm. The run stops before
    /// the optimizer applies it: no metrics line, no checkpoint of it.
    #[error(
        "{phase} step {step} diverged: the {quantity} is {value} (lower `{lr_field}` or set a gradient clip); nothing of this step was applied, logged or checkpointed"
    )]
    Diverged {
        /// `sft` or `rl`.
        phase: &'static str,
        /// The 1-based step.
        step: u64,
        /// `loss` or `gradient norm`.
        quantity: &'static str,
        /// The value (NaN or ±inf).
        value: f64,
        /// The learning-rate field to look at (`sft.lr`, `rl.lr`).
        lr_field: &'static str,
    },
    /// A run cannot be resumed from this directory or checkpoint; names the path.
    #[error("resume from {}: {message}", path.display())]
    Resume {
        /// The run directory or checkpoint file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A rollout, an evaluation or the tools failed (`rstar-rollout`).
    #[error(transparent)]
    Rollout(rstar_rollout::Error),
    /// An engine failed (`rstar-engine`).
    #[error(transparent)]
    Engine(#[from] rstar_engine::Error),
    /// Reading a run's artefacts or writing its report, plots or TensorBoard events failed
    /// (`rstar-analysis`).
    #[error(transparent)]
    Analysis(rstar_analysis::Error),
    /// A metrics or trajectory line is not valid JSON of its schema.
    #[error("trajectory json: {0}")]
    Json(#[from] serde_json::Error),
    /// The agent format rejected a trajectory.
    #[error(transparent)]
    Episode(rstar_episode::Error),
    /// The task set or a problem file is unusable.
    #[error(transparent)]
    Tasks(rstar_tasks::Error),
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
    /// The rollout dispatcher failed.
    #[error("scheduler: {0}")]
    Scheduler(#[from] rstar_scheduler::Error),
}

impl From<rstar_episode::Error> for Error {
    fn from(e: rstar_episode::Error) -> Self {
        match e {
            rstar_episode::Error::Io(e) => Error::Io(e),
            rstar_episode::Error::Dataset(e) => Error::Dataset(e),
            e => Error::Episode(e),
        }
    }
}

impl From<rstar_tasks::Error> for Error {
    fn from(e: rstar_tasks::Error) -> Self {
        match e {
            rstar_tasks::Error::Io(e) => Error::Io(e),
            rstar_tasks::Error::Dataset(e) => Error::Dataset(e),
            rstar_tasks::Error::Episode(e) => e.into(),
            e => Error::Tasks(e),
        }
    }
}

impl From<rstar_analysis::Error> for Error {
    fn from(e: rstar_analysis::Error) -> Self {
        match e {
            rstar_analysis::Error::Io(e) => Error::Io(e),
            rstar_analysis::Error::Line(e) => Error::Dataset(e),
            e => Error::Analysis(e),
        }
    }
}

impl From<rstar_rollout::Error> for Error {
    fn from(e: rstar_rollout::Error) -> Self {
        match e {
            rstar_rollout::Error::Policy(e) => Error::Policy(e),
            rstar_rollout::Error::Io(e) => Error::Io(e),
            rstar_rollout::Error::Episode(e) => e.into(),
            rstar_rollout::Error::Engine(e) => Error::Engine(e),
            e => Error::Rollout(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy or file error reaches the trainer's error in one variant, whichever crate
    /// wrapped it, with the same text.
    #[test]
    fn wrapped_errors_are_lifted_to_their_one_variant() {
        let policy = || rstar_policy::Error::InvalidConfig {
            field: "num_heads".into(),
            reason: "bad".into(),
        };
        let direct = Error::from(policy());
        let lifted = Error::from(rstar_rollout::Error::Policy(policy()));
        assert!(matches!(lifted, Error::Policy(_)), "{lifted:?}");
        assert_eq!(lifted.to_string(), direct.to_string());

        let io = || rstar_episode::IoError::new("a.jsonl", std::io::Error::other("gone"));
        for lifted in [
            Error::from(rstar_rollout::Error::Io(io())),
            Error::from(rstar_rollout::Error::Episode(
                rstar_episode::Error::Io(io()),
            )),
            Error::from(rstar_tasks::Error::Episode(rstar_episode::Error::Io(io()))),
            Error::from(rstar_analysis::Error::Io(io())),
        ] {
            assert!(matches!(lifted, Error::Io(_)), "{lifted:?}");
            assert_eq!(lifted.to_string(), "a.jsonl: gone");
        }
        let line = || rstar_episode::LineError::new("m.jsonl", 2, "not JSON");
        for lifted in [
            Error::from(rstar_analysis::Error::Line(line())),
            Error::from(rstar_tasks::Error::Dataset(line())),
        ] {
            assert!(matches!(lifted, Error::Dataset(_)), "{lifted:?}");
            assert_eq!(lifted.to_string(), "m.jsonl:2: not JSON");
        }
        // What is not lifted stays in its crate's variant.
        let other = Error::from(rstar_rollout::Error::tools("down"));
        assert!(matches!(other, Error::Rollout(_)), "{other:?}");
    }
}
