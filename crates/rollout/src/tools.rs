//! The tools' options (the run config's `tools` section, [`ToolOptions`]), where finished
//! rollouts are scored ([`VerifyAt`]), and the sandboxed in-process Python pool
//! ([`start_pool`]). The choice between the pool and code-judge servers is
//! `rstar_train::tools::RunTools`: the trainer is the crate that sees both this one and
//! `rstar-toolserver`.

use std::path::PathBuf;
use std::time::Duration;

use rstar_toolenv::{BlockingPool, Pool};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The Python sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOptions {
    /// The interpreter.
    pub python: PathBuf,
    /// Workers (`0`: one per CPU).
    pub workers: usize,
    /// Per-call wall-clock limit in seconds.
    pub timeout_secs: f64,
    /// Code-judge servers (`rstar tools serve`, code-judge, SandboxFusion's code-judge API)
    /// that run every tool call instead of the in-process sandbox, which is then not started
    /// (`--tools URL[,URL…]`). Calls are batched and spread over them by their queues; a
    /// server that dies has its calls retried on the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Seconds a tool call may take, from its submission to its answer, before the step is
    /// reported as over budget (`metrics.jsonl`'s `tool_latency.over_budget`, a warning in
    /// the log, a line in the report); absent: no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_budget_secs: Option<f64>,
}

/// Where finished rollouts are scored (`rl.verify`): by the in-process verifier (the default),
/// or on the tool servers' `POST /verify` (`rstar tools serve`), as the paper offloads answer
/// verification to its tool service. Both run `rstar-verifier`, so the scores are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyAt {
    /// In the trainer's process.
    #[default]
    Local,
    /// On the servers of `tools.servers`, in batches beside the tool calls.
    Remote,
}

impl VerifyAt {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
        }
    }

    /// Whether this is the default, [`VerifyAt::Local`] (left out of a saved config).
    pub fn is_local(&self) -> bool {
        *self == Self::Local
    }
}

impl std::str::FromStr for VerifyAt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Self::Local),
            "remote" => Ok(Self::Remote),
            other => Err(format!(
                "`{other}` is not a place to verify answers: expected `local` or `remote`"
            )),
        }
    }
}

impl std::fmt::Display for VerifyAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Starts the sandboxed Python pool the trainer runs every tool call in (no preloaded modules:
/// the embedded tasks need only the standard library).
///
/// # Errors
/// [`Error::Toolenv`] when the interpreter or the sandbox cannot start.
pub fn start_pool(options: &ToolOptions) -> Result<BlockingPool, Error> {
    let mut builder = Pool::builder()
        .python(&options.python)
        .timeout(Duration::from_secs_f64(options.timeout_secs))
        .preload(Vec::<String>::new());
    if options.workers > 0 {
        builder = builder.workers(options.workers);
    }
    Ok(BlockingPool::new(builder)?)
}
