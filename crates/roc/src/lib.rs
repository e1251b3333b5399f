//! Resample-on-Correct (RoC), the down-sampling step of rStar2-Agent's
//! GRPO-RoC: roll out 2G traces per problem, keep G, keep the failures diverse
//! and, among the successes, prefer those with few tool errors and a clean
//! answer format. The reward itself stays 0/1.
//!
//! The crate has two rules, named after where they come from:
//! - [`Mode::Paper`]: each side halved in proportion (`⌊n_neg/2⌋` failures of
//!   a group of `2·keep`, the rest successes; [`GroupRule::paper_counts`]),
//!   failures uniformly, successes with probability ∝ 1/`p_total` (zero-penalty
//!   ones first), both without replacement; seeded ChaCha8.
//! - [`Mode::Reference`]: microsoft/rStar's `resample_of_correct`, exactly:
//!   proportional split rounded half to even, floors, lowest-penalty successes,
//!   failures in rollout order, small groups dropped.
//!
//! plus the reference's equal-reward rejection ([`reject_equal_reward`]) and
//! its metrics, named as it names them (`roc_error_ratio/global_err_ratio`, …).
//!
//! It is deliberately **not** a reward function, a tokenizer or a trainer: it
//! reads counts ([`TraceSummary`]), built by the agent loop or parsed from
//! rollout text, and returns the indices to keep. It does no IO beyond parsing
//! bytes it is handed ([`jsonl`]).
//!
//! Main types: [`TraceSummary`], [`PenaltyOptions`] and [`Penalty`],
//! [`RocConfig`], [`select`] returning a [`Selection`], [`GroupRule`] for one
//! group at a time.
//!
//! ```
//! use rstar_roc::{RocConfig, TraceSummary, select};
//!
//! // One prompt, 8 traces: 5 successes with different tool-error records.
//! let traces: Vec<TraceSummary> = (0..8)
//!     .map(|i| {
//!         let reward = if i < 5 { 1.0 } else { 0.0 };
//!         TraceSummary::new(reward).with_calls(2, i % 3, 0, 0).with_answers(1, false).with_turns(3)
//!     })
//!     .collect();
//! let uids = vec!["q1"; 8];
//! let config = RocConfig { keep: 4, ..RocConfig::reference() };
//! let selection = select(&uids, &traces, &config)?;
//! assert_eq!(selection.kept.len(), 4);
//! // The reference keeps the two lowest-penalty successes (no tool error) and the first two failures.
//! assert_eq!(selection.kept, vec![0, 3, 5, 6]);
//! # Ok::<(), rstar_roc::Error>(())
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

mod error;
pub mod jsonl;
mod penalty;
mod select;
mod summary;

pub use error::{Error, Result};
pub use penalty::{
    ErrorCounting, Penalty, PenaltyOptions, TurnCounting, error_count, p_err, p_format, penalty,
};
pub use select::{
    GroupRule, Mode, RocConfig, Selection, all_rewards_equal, reject_equal_reward, select,
};
pub use summary::{ToolOutcome, TraceSummary};
