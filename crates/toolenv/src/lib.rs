//! A sandboxed, fast Python executor for model-written code: rStar2-Agent's
//! tool environment.
//!
//! A [`Pool`] runs N workers. Each worker is a Python "zygote" that has
//! already imported numpy and sympy; per call it forks one child, which
//! enters a fresh sandbox (its own session, rlimits, a per-call temporary
//! directory as the only writable place, a nested Landlock domain, no
//! capabilities or an unprivileged uid), runs the code, and is killed with
//! everything it started. Workers themselves run in a new network namespace,
//! with their call directories on a private size-limited tmpfs, under a
//! seccomp filter and, where the host allows, a pids cgroup. Forking
//! from a preloaded parent costs a few milliseconds, where a new interpreter
//! costs tens of milliseconds plus about a second when the snippet imports
//! sympy. [`Backend::Spawn`] runs a new interpreter per call under the same
//! sandbox, as the portable fallback and the correctness oracle.
//!
//! It is deliberately **not** an HTTP service (that builds on [`Pool`]), a
//! language-agnostic judge, or a security boundary against kernel exploits:
//! it layers the isolation Linux offers unprivileged-to-root processes and
//! reports, in [`SandboxReport`], which layers are in force.
//!
//! Main types: [`PoolBuilder`] (documented defaults), [`Pool`] (async; a
//! blocking wrapper is [`BlockingPool`]), [`ToolCall`], [`ToolResult`] with
//! its [`Outcome`], and [`format_response`], the reference's tool-response
//! text.
//!
//! ```no_run
//! use rstar_toolenv::{BlockingPool, Outcome, Pool, ToolCall};
//!
//! let pool = BlockingPool::new(Pool::builder().workers(2))?;
//! let result = pool.run(ToolCall::python("print(int(input()) * 2)", "21"));
//! assert_eq!(result.outcome, Outcome::Output);
//! assert_eq!(result.stdout, "42\n");
//! println!("{}", result.text(pool.pool().format()));
//! # Ok::<(), rstar_toolenv::Error>(())
//! ```
//!
//! The text helpers are pure and need no Python:
//!
//! ```
//! use rstar_toolenv::{format_response, ResponseFormat};
//! let text = format_response(true, "", "42\n", "", 0.123, &ResponseFormat::new());
//! assert_eq!(text, "Tool call success\nstdout: 42\n\nexecution time: 0.12s");
//! ```
//!
//! # Crate features
//! None. Linux only (namespaces, seccomp, Landlock, cgroups); each layer is
//! detected at start-up and a missing one is logged as a warning.
#![warn(missing_docs)]

mod call;
mod config;
mod error;
pub mod format;
mod pool;
pub mod sandbox;
mod worker;

pub use call::{Outcome, Tool, ToolCall, ToolResult};
pub use config::{Backend, Config, PoolBuilder};
pub use error::{Error, Result};
pub use format::{ResponseFormat, format_response, truncate_middle};
pub use pool::{BlockingPool, Pool, PoolStatus};
pub use sandbox::{Layer, LayerState, SandboxReport};
