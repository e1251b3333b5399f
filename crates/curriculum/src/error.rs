//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in `rstar-curriculum`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration that parses but cannot be used; names the stage and field.
    #[error("invalid curriculum: {0}")]
    Config(String),
    /// A TOML configuration that does not parse; the message names line and field.
    #[error("{path}: {message}")]
    Toml {
        /// The file (or `<string>`).
        path: PathBuf,
        /// The parser's message, with line, column and field.
        message: String,
    },
    /// A file that cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A metric that is NaN or infinite, or out of its range.
    #[error("step {step}: metric `{field}` is {value}, expected a finite number{range}")]
    BadMetric {
        /// The 1-based step of the run the metrics belong to.
        step: u64,
        /// The metric.
        field: &'static str,
        /// Its value.
        value: f64,
        /// The allowed range, when there is one (for example " in [0, 1]").
        range: &'static str,
    },
    /// `observe` after the last stage ended.
    #[error("the curriculum is finished: its last stage ended at step {0}")]
    Finished(u64),
    /// A saved state that does not fit the configuration.
    #[error("state does not fit the curriculum: {0}")]
    State(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
