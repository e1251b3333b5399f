//! `rstar-python`: the workspace's crates as one Python module, `rstar_agent`, for the Python RL
//! stacks (verl, TRL, OpenRLHF).
//!
//! A PyO3 extension built by maturin into one abi3 wheel for CPython 3.9 and later
//! (`cargo xtask wheel`). It exposes:
//! - the verifier ([`rstar_verifier`]): `compute_score` (verl's `custom_reward_function`
//!   signature) and `compute_score_batch` (verl's batch reward manager), `score` (a batch on
//!   rayon with the GIL released), `verify` (one `Verdict` with its reason), and `trl_reward` /
//!   `TrlReward` (TRL's `reward_funcs` signature, conversational completions accepted);
//! - RoC ([`rstar_roc`]): `roc_select` (the kept indices of a group or a batch, paper or reference
//!   rule, seeded) and `roc_penalties`;
//! - advantages ([`rstar_grpo`]): `advantages` (GRPO, Dr. GRPO, RLOO over grouped rewards);
//! - the sandbox ([`rstar_toolenv`]): `Sandbox` (the zygote pool: `run(code, stdin, timeout)` →
//!   one of the four outcomes) and `ToolClient` (the batching client of `rstar tools serve`
//!   fleets, [`rstar_toolserver`]).
//!
//! It is deliberately **not** new logic: every function wraps a crate's own API, so the Python
//! answers are the Rust answers (the pytest suite in `tests/` checks them against `rstar verify`
//! and the crates' fixtures). Bad input (a non-string, a NUL byte, a string over
//! [`MAX_TEXT_BYTES`], an unknown mode) raises `TypeError` or `ValueError` with the Rust error's
//! message; a panic becomes a `RuntimeError`, never an abort.
//!
//! The Rust side of the crate is small: the modes and checks the bindings share, usable from Rust
//! (the lib has no doctests, which would link libpython; the `modes` example runs this):
//!
//! ```ignore
//! use rstar_python::modes::{ScoreMode, score_one};
//!
//! let mode: ScoreMode = "auto".parse().unwrap();
//! assert_eq!(score_one(mode, "so the answer is \\boxed{42}", "42").unwrap(), 1.0);
//! assert_eq!(score_one(mode, "\\boxed{2\\sqrt{3}}", "\\sqrt{12}").unwrap(), 1.0);
//! ```
//!
//! # Crate features
//! None. PyO3 is built with `abi3-py39`; maturin sets `PYO3_BUILD_EXTENSION_MODULE` so the wheel
//! does not link `libpython`.
#![warn(missing_docs)]

pub mod modes;
mod py;

pub use modes::{MAX_TEXT_BYTES, ScoreMode, check_text, score_one};
