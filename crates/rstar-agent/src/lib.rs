//! rStar2-Agent in Rust: the umbrella crate.
//!
//! This crate composes the workspace's single-purpose crates into the whole
//! recipe: an agent loop in which a policy writes Python, a sandbox runs it and
//! a verifier scores the final answer, and a trainer that runs SFT and then
//! staged GRPO-RoC. The `rstar` command-line interface is the `rstar-cli` crate.
//!
//! It is deliberately **not** the place for new algorithms: advantages and the
//! loss live in `rstar-grpo`, down-sampling in `rstar-roc`, the sandbox in
//! `rstar-toolenv`, and so on. Each of them is re-exported here under a short
//! name (`rstar_agent::verifier`, `rstar_agent::roc`, …) as it lands.
//!
//! The agent format is the `rstar-episode` crate, re-exported here (see `docs/episode.md`):
//! [`template`] (the reference ChatML prompt and a compact one for character models),
//! [`toolcall`] (Hermes tool-call parsing, [`toolcall::ToolOutcome`]), [`episode`] (the pure
//! [`episode::Episode`] state machine and the serialisable [`episode::Trajectory`]). The
//! problems are the `rstar-tasks` crate (see `docs/tasks.md`): [`tasks`] (the embedded task set
//! and its SFT corpus) and [`dataset`] (problem files). Errors are [`AgentError`]. [`analysis`] reads trajectory
//! files back: the token-entropy analysis of `rstar analyze entropy` (see
//! `docs/analysis.md`) and its SVG plot.
//!
//! ```
//! assert!(!rstar_agent::VERSION.is_empty());
//! ```
//!
//! The trainer is [`rollout`] (batched multi-turn rollouts of a policy with the sandboxed tool)
//! and [`train`] (SFT, then staged GRPO-RoC; `rstar train`).
//!
//! Inference and evaluation: [`engine`] (the async [`engine::TurnGenerator`] trait and
//! [`engine::LocalEngine`]), [`remote`] (the same over an OpenAI-compatible server), [`serve`]
//! (that server for our own policy, `rstar serve`), [`scheduled`] (rollouts through
//! `rstar-scheduler`'s dispatcher with asynchronous tool calls) and [`eval`] (avg@k, pass@k and tool
//! statistics, `rstar eval`).
//!
//! # Crate features
//! None by default: a library enables no backend; the binary (`rstar-cli`) picks one.
//! - `flex`: Burn's pure-Rust CPU backend for the policy.
//! - `wgpu`, `cuda`: GPU backends (forwarded to `rstar-policy`; `wgpu` is tested on Mesa's
//!   lavapipe through `rstar-policy`, `cuda` is never built).
#![warn(missing_docs)]

pub mod chat_sft;
pub mod engine;
pub mod error;
pub mod eval;
pub mod remote;
pub mod rollout;
pub mod scheduled;
pub mod serve;
pub mod train;

pub use rstar_episode::{episode, template, toolcall};
pub use rstar_tasks::{dataset, tasks};

pub use error::AgentError;
pub use rstar_analysis as analysis;
pub use rstar_curriculum as curriculum;
pub use rstar_grpo as grpo;
pub use rstar_policy as policy;
pub use rstar_roc as roc;
pub use rstar_scheduler as scheduler;
pub use rstar_toolenv as toolenv;
pub use rstar_toolserver as toolserver;
pub use rstar_verifier as verifier;

/// The version of the `rstar-agent` crate and the `rstar` binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
