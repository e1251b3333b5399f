//! The task set's and the dataset loader's error type.

use std::path::PathBuf;

/// Everything that can go wrong building the embedded task set and its SFT corpus, or loading a
/// problem file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a problem file could not be read.
    #[error("{}:{line}: {message}", path.display())]
    Dataset {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
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
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
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
    Episode(#[from] rstar_episode::Error),
}
