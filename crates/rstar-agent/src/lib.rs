//! rStar2-Agent in Rust: the facade.
//!
//! The recipe is a policy that writes Python, a sandbox that runs it, a verifier that scores
//! the final answer, and a trainer that runs SFT and then staged GRPO-RoC. Each piece is a
//! crate of its own, usable alone; this crate re-exports them under short names, behind
//! features, so that one dependency gives the whole recipe or only the part a project needs:
//!
//! | name | crate | feature |
//! |---|---|---|
//! | [`episode`], [`template`], [`toolcall`], [`chat`] | `rstar-episode`: the agent format | always |
//! | [`tasks`], [`dataset`] | `rstar-tasks`: the embedded task set, problem files | always |
//! | [`verifier`] | `rstar-verifier`: math answer checking | always |
//! | [`analysis`] | `rstar-analysis`: report, plots, TensorBoard, entropy | always |
//! | `engine`, `remote`, `policy` | `rstar-engine` (local and remote engines), `rstar-policy` | `engine` |
//! | `serve` | `rstar-serve`: the OpenAI-compatible server | `serve` |
//! | `rollout`, `scheduled`, `eval`, `toolenv`, `toolserver`, `scheduler` | `rstar-rollout` and the sandbox, tool service, dispatcher | `rollout` |
//! | `train`, `chat_sft`, `grpo`, `roc`, `curriculum` | `rstar-train` and the recipe's algorithms | `train` |
//!
//! The `rstar` command line is the `rstar-cli` crate. Errors of every crate convert into
//! [`AgentError`].
//!
//! ```
//! assert!(!rstar_agent::VERSION.is_empty());
//! let verdict = rstar_agent::verifier::verify("so the answer is \\boxed{42}", "42").unwrap();
//! assert_eq!(verdict.reward, 1);
//! ```
//!
//! # Crate features
//! - `train` (default): `rollout` plus the trainer, GRPO, RoC and the curriculum.
//! - `serve` (default): `engine` plus the OpenAI-compatible server.
//! - `rollout`: `engine` plus rollouts, evaluation, the sandbox, the tool service and the
//!   dispatcher.
//! - `engine`: the local and remote engines and the policy.
//! - `flex`, `wgpu`, `cuda`, `tch`, `fusion`, `autotune`: the policy's backends and GPU options
//!   (forwarded to `rstar-policy`; none by default: the binary picks one).
#![warn(missing_docs)]

pub mod error;

pub use error::AgentError;
pub use rstar_analysis as analysis;
pub use rstar_episode::{chat, episode, template, toolcall};
pub use rstar_tasks::{dataset, tasks};
pub use rstar_verifier as verifier;

#[cfg(feature = "engine")]
pub use rstar_engine as engine;
#[cfg(feature = "engine")]
pub use rstar_engine::remote;
#[cfg(feature = "engine")]
pub use rstar_policy as policy;

#[cfg(feature = "serve")]
pub use rstar_serve as serve;

#[cfg(feature = "rollout")]
pub use rstar_rollout as rollout;
#[cfg(feature = "rollout")]
pub use rstar_rollout::{eval, scheduled};
#[cfg(feature = "rollout")]
pub use rstar_scheduler as scheduler;
#[cfg(feature = "rollout")]
pub use rstar_toolenv as toolenv;
#[cfg(feature = "rollout")]
pub use rstar_toolserver as toolserver;

#[cfg(feature = "train")]
pub use rstar_curriculum as curriculum;
#[cfg(feature = "train")]
pub use rstar_grpo as grpo;
#[cfg(feature = "train")]
pub use rstar_roc as roc;
#[cfg(feature = "train")]
pub use rstar_train as train;
#[cfg(feature = "train")]
pub use rstar_train::chat_sft;

/// The version of the `rstar-agent` crate and the `rstar` binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
