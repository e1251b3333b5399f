//! The crate's one error type.

/// Everything that can go wrong in `rstar-roc`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot be satisfied (for example floors that add up to more than `keep`).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The inputs of a call disagree (for example `uids` and `traces` of different lengths).
    #[error("invalid input: {0}")]
    Input(String),
    /// A reward or penalty that is not a finite number.
    #[error("trace {index}: {field} is not a finite number ({value})")]
    NotFinite {
        /// Index of the trace in the batch.
        index: usize,
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// The reference rule's own assertion: it picked a number of traces other than `keep`.
    #[error("group `{uid}`: the reference rule picked {picked} traces instead of {keep}")]
    ReferenceCount {
        /// The group.
        uid: String,
        /// How many the rule picked.
        picked: usize,
        /// How many it should have picked.
        keep: usize,
    },
    /// A JSONL line that cannot be used, with its 1-based line number.
    #[error("{source_name}:{line}: {message}")]
    Line {
        /// Where the lines came from (a path or `<stdin>`).
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
