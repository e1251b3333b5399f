//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in `rstar-policy`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file (config, tokenizer) could not be parsed.
    #[error("{path}: line {line}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The line the parser stopped at (1-based, 0 when unknown).
        line: usize,
        /// What the parser said.
        message: String,
    },
    /// A config field has a value this crate does not implement.
    #[error("{path}: field `{field}`: unsupported value {value} ({reason})")]
    Unsupported {
        /// The config file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// Its value, as JSON.
        value: String,
        /// What is supported instead.
        reason: String,
    },
    /// A config is internally inconsistent (e.g. heads do not divide).
    #[error("invalid config: field `{field}`: {reason}")]
    InvalidConfig {
        /// The offending field.
        field: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A checkpoint lacks a tensor the architecture needs.
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor {
        /// The checkpoint directory.
        path: PathBuf,
        /// The HF tensor name.
        name: String,
    },
    /// A checkpoint tensor has the wrong shape.
    #[error("{path}: tensor `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        /// The safetensors file.
        path: PathBuf,
        /// The HF tensor name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A checkpoint tensor has a dtype this crate cannot read.
    #[error(
        "{path}: tensor `{name}` has unsupported dtype {dtype} (f32, bf16 and f16 are supported)"
    )]
    UnsupportedDtype {
        /// The safetensors file.
        path: PathBuf,
        /// The HF tensor name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A safetensors file is malformed.
    #[error("{path}: invalid safetensors file: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A tensor holds NaN or infinite values: a diverged or corrupted model, refused at load and
    /// at save.
    #[error(
        "{path}: tensor `{name}` has {count} non-finite values (first at index {first}): a diverged or corrupted model"
    )]
    NonFinite {
        /// The file (or the source the weights came from).
        path: PathBuf,
        /// The HF tensor name.
        name: String,
        /// How many of its values are NaN or infinite.
        count: usize,
        /// The flat index of the first.
        first: usize,
    },
    /// A file of a checkpoint does not match the digest written when it was saved.
    #[error("{path}: {message}")]
    Digest {
        /// The file (or the digest file).
        path: PathBuf,
        /// What does not match.
        message: String,
    },
    /// A directory has no `*.safetensors` file.
    #[error("{path}: no *.safetensors file in the model directory")]
    NoWeights {
        /// The directory.
        path: PathBuf,
    },
    /// A directory has no tokenizer file.
    #[error("{path}: no tokenizer.json or tokenizer_rstar.json in the model directory")]
    NoTokenizer {
        /// The directory.
        path: PathBuf,
    },
    /// The HF tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of size {vocab_size}")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A request is malformed (empty prompt, bad sampling parameter, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A sequence would exceed the model's context length.
    #[error("sequence of {len} tokens exceeds max_position_embeddings {max}")]
    TooLong {
        /// The requested length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Reading a tensor back from the device failed.
    #[error("tensor readback: {0}")]
    Readback(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn json(path: impl Into<PathBuf>, err: &serde_json::Error) -> Self {
        Error::Json {
            path: path.into(),
            line: err.line(),
            message: err.to_string(),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
