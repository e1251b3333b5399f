//! rStar2-Agent in Rust: the umbrella crate.
//!
//! This crate composes the workspace's single-purpose crates into the whole
//! recipe: an agent loop in which a policy writes Python, a sandbox runs it and
//! a verifier scores the final answer, and a trainer that runs SFT and then
//! staged GRPO-RoC. It also hosts the `rstar` command-line interface.
//!
//! It is deliberately **not** the place for new algorithms: advantages and the
//! loss live in `rstar-grpo`, down-sampling in `rstar-roc`, the sandbox in
//! `rstar-toolenv`, and so on. Each of them is re-exported here under a short
//! name (`rstar_agent::verifier`, `rstar_agent::roc`, …) as it lands.
//!
//! ```
//! assert!(!rstar_agent::VERSION.is_empty());
//! ```
//!
//! # Crate features
//! None yet: backends (`flex`, `wgpu`, `cuda`) become features of this crate
//! when the policy crate lands.
#![warn(missing_docs)]

pub mod cli;

/// The version of the `rstar-agent` crate and the `rstar` binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
