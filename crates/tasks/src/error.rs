//! The task set's and the dataset loader's error type.

use std::path::PathBuf;

/// Everything that can go wrong building the embedded task set and its SFT corpus, or loading a
/// problem file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a problem file could not be read.
    #[error(transparent)]
    Dataset(#[from] rstar_episode::LineError),
    /// A row of a parquet problem file is unusable.
    #[error("{}: row {row}: {message}", path.display())]
    DatasetRow {
        /// The file.
        path: PathBuf,
        /// 0-based row number (as pyarrow and pandas count).
        row: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A problem file is unusable as a whole (unknown extension, no records, unreadable parquet).
    #[error("{}: {message}", path.display())]
    DatasetFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] rstar_episode::IoError),
    /// A task-set configuration is unusable.
    #[error("invalid task config: {0}")]
    TaskConfig(String),
    /// A demonstration could not be built because the executor's output did not match.
    #[error("demonstration for `{id}`: {message}")]
    Demonstration {
        /// The problem id.
        id: String,
        /// What the executor returned instead of what was needed.
        message: String,
    },
    /// The agent format (reading or writing trajectories and corpora) failed.
    #[error(transparent)]
    Episode(rstar_episode::Error),
}

impl From<rstar_episode::Error> for Error {
    /// A file or line error of the agent format is this crate's [`Error::Io`] or
    /// [`Error::Dataset`]: one place for each.
    fn from(e: rstar_episode::Error) -> Self {
        match e {
            rstar_episode::Error::Io(e) => Error::Io(e),
            rstar_episode::Error::Dataset(e) => Error::Dataset(e),
            e => Error::Episode(e),
        }
    }
}
