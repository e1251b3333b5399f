//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong reading a run's artefacts or writing its pictures. A run directory with
/// missing or damaged files is not an error for the report ([`crate::report::RunData::load`]
/// notes them in the page); it is for the stricter readers ([`crate::plots::draw`],
/// [`crate::tensorboard::convert`], [`crate::parse_trajectories`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a JSONL file (trajectories, metrics, evaluations) could not be read.
    #[error(transparent)]
    Line(#[from] rstar_episode::LineError),
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] rstar_episode::IoError),
    /// Per-token entropies cannot be analysed or plotted as asked.
    #[error("entropy analysis: {0}")]
    Entropy(String),
    /// A line of a run's JSONL has no step to file its events under.
    #[error("a {file} line has no integer `{field}`")]
    NoStep {
        /// `metrics.jsonl`, `sft_metrics.jsonl` or `eval.jsonl`.
        file: &'static str,
        /// `step` or `rl_steps`.
        field: &'static str,
    },
    /// A directory holds none of a run's JSONL files.
    #[error(
        "{}: has none of sft_metrics.jsonl, metrics.jsonl, eval.jsonl: not a run directory",
        path.display()
    )]
    NotARun {
        /// The directory.
        path: PathBuf,
    },
}
