//! The crate's one error type.

/// Everything that can go wrong in `rstar-scheduler`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; names the field and why.
    #[error("invalid config field `{field}`: {reason}")]
    Config {
        /// The offending field, e.g. `engines` or `kv_capacity_tokens`.
        field: &'static str,
        /// Why the value was rejected.
        reason: String,
    },
    /// A preset name that is not one of [`crate::SimConfig::PRESETS`].
    #[error("unknown preset `{0}` (known: {known})", known = crate::SimConfig::PRESETS.join(", "))]
    UnknownPreset(String),
    /// A policy name that is not `static`, `least-requests` or `kv-aware`.
    #[error("unknown dispatch policy `{0}` (known: static, least-requests, kv-aware)")]
    UnknownPolicy(String),
    /// A rollout can never be admitted because its reservation exceeds every engine's capacity.
    #[error("rollout {rollout} needs {need} kv tokens but the largest engine holds {largest}")]
    TooLarge {
        /// The rollout's id.
        rollout: u64,
        /// Its reservation (prompt plus response budget), in tokens.
        need: u64,
        /// The largest engine capacity, in tokens.
        largest: u64,
    },
    /// An engine failed to generate a turn.
    #[error("engine {engine} failed on rollout {rollout}: {message}")]
    Engine {
        /// The engine's index.
        engine: usize,
        /// The rollout's id.
        rollout: u64,
        /// The engine's message.
        message: String,
    },
    /// Every engine became unavailable ([`EngineUnavailable`](crate::EngineUnavailable));
    /// lists each engine and its last message.
    #[error("every engine is gone: {}", lost.iter().map(|(e, m)| format!("engine {e}: {m}")).collect::<Vec<_>>().join("; "))]
    EnginesLost {
        /// Per engine, in the order they were lost: its index and its last message.
        lost: Vec<(usize, String)>,
    },
    /// The tool runner failed (as opposed to the tool reporting an error, which is a result).
    #[error("tool runner failed on rollout {rollout}: {message}")]
    Tool {
        /// The rollout's id.
        rollout: u64,
        /// The runner's message.
        message: String,
    },
    /// Writing a report or a plot failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file being written.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
