//! The crate's error type.

/// Everything that can go wrong in `rstar-grpo`: malformed inputs and invalid configurations.
///
/// Numerical edge cases that have a defined answer (a group of one, a group whose rewards are all
/// equal) are not errors; they give a zero advantage.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrpoError {
    /// A slice or tensor does not have the length its companion inputs imply.
    #[error("`{field}`: expected {expected} values, got {got}")]
    Length {
        /// The argument or field that has the wrong length.
        field: &'static str,
        /// The length implied by the other inputs.
        expected: usize,
        /// The length that was passed.
        got: usize,
    },
    /// A tensor's shape does not match the `[batch, response_len]` of `log_prob`.
    #[error("`{field}`: expected shape {expected:?}, got {got:?}")]
    Shape {
        /// The tensor with the wrong shape.
        field: &'static str,
        /// The expected dimensions.
        expected: Vec<usize>,
        /// The dimensions that were passed.
        got: Vec<usize>,
    },
    /// A value is NaN or infinite where a finite number is required.
    #[error("`{field}`[{index}] is not finite: {value}")]
    NonFinite {
        /// The argument holding the value.
        field: &'static str,
        /// Its position (row-major for matrices).
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// A configuration field is out of its valid range.
    #[error("invalid config field `{field}`: {reason}")]
    Config {
        /// The field, named as in the serialised config.
        field: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
    /// The loss would divide by zero: the batch has no unmasked token (or sequence) and no global
    /// count was passed in.
    #[error(
        "`response_mask` selects no {what}; pass a global count in `GlobalBatch` to aggregate an empty micro-batch"
    )]
    EmptyBatch {
        /// `tokens` or `sequences`.
        what: &'static str,
    },
}
