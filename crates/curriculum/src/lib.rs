//! Staged RL training for rStar2-Agent: the stages, the triggers that end
//! them, hard-problem filtering and a state that survives a restart.
//!
//! The paper trains in three stages: 8K-token responses on all problems for
//! 300 steps (until the reward is flat with about 10% of responses
//! truncated), 12K for 85 steps, then 12K and 15 tool turns on the problems
//! the policy does not solve 8 of 8, with the optimizer reset, for 125 steps.
//! [`CurriculumConfig::rstar2_agent`] is that recipe; [`CurriculumConfig::tiny`]
//! is the same shape at CPU scale.
//!
//! Each step the trainer reports [`StepMetrics`] to [`Curriculum::observe`],
//! which answers [`Decision::Stay`], [`Decision::Advance`] (with the reason) or
//! [`Decision::Finish`]. Stages end on a [`Trigger`]: a step budget, a
//! truncation rate held for a window, a reward plateau, or `any`/`all` of them.
//! [`HardFilter`] picks a stage's problems from [`PassCounts`] and reports what
//! it dropped. [`CurriculumState`] serialises with serde; configurations are
//! TOML ([`CurriculumConfig::from_toml_file`]).
//!
//! It is deliberately **not** a trainer, a data loader or a sampler: it decides
//! and reports; it never touches the model, the optimizer or the data.
//!
//! ```
//! use rstar_curriculum::{Curriculum, CurriculumConfig, Decision, StepMetrics};
//!
//! let mut c = Curriculum::new(CurriculumConfig::rstar2_agent())?;
//! assert_eq!(c.stage().max_response_tokens, 8192);
//! let mut advanced_at = Vec::new();
//! for step in 1..=510u64 {
//!     // A reward that keeps rising and few truncations: only the budgets end stages.
//!     match c.observe(StepMetrics::new(step as f64 / 1000.0, 0.01))? {
//!         Decision::Stay => {}
//!         Decision::Advance { .. } | Decision::Finish { .. } => advanced_at.push(step),
//!     }
//! }
//! assert_eq!(advanced_at, [300, 385, 510]);
//! assert!(c.is_finished() && c.stage().reset_optimizer);
//! # Ok::<(), rstar_curriculum::Error>(())
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

mod curriculum;
mod error;
mod filter;
mod stage;
pub mod trigger;

pub use curriculum::{Curriculum, CurriculumState, Decision, StepMetrics};
pub use error::{Error, Result};
pub use filter::{FilterReport, HardFilter, PassCount, PassCounts};
pub use stage::{CurriculumConfig, ProblemSet, Stage, describe};
pub use trigger::Trigger;
