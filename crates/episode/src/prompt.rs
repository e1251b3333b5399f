//! [`Prompt`]: one problem to roll out (id, text, ground truth), the plain data type every
//! driver, dataset loader and evaluator passes around.

use serde::{Deserialize, Serialize};

/// One problem to roll out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// Problem id (recorded in the trajectories; RoC and GRPO group by it).
    pub id: String,
    /// The problem text.
    pub problem: String,
    /// The ground truth, scored with `rstar_verifier::verify`.
    pub answer: String,
}

impl Prompt {
    /// A prompt from its parts.
    pub fn new(
        id: impl Into<String>,
        problem: impl Into<String>,
        answer: impl Into<String>,
    ) -> Self {
        Prompt {
            id: id.into(),
            problem: problem.into(),
            answer: answer.into(),
        }
    }
}
