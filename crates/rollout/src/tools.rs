//! Where tool calls go: the sandboxed in-process Python pool, or code-judge servers
//! (`rstar tools serve`, code-judge, SandboxFusion's code-judge API). [`RunTools`] is the one
//! place the trainer and `rstar eval` choose between them, from [`ToolOptions`] (the run
//! config's `tools` section).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rstar_toolenv::{BlockingPool, Pool};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::scheduled::{AsyncTools, PoolTools, ServerTools};
use crate::timing::ToolTimings;

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

/// Where a run's tool calls go: the in-process sandbox, or the code-judge servers of
/// `tools.servers` (`--tools`), which then replace it everywhere (RL steps, the hard stage's
/// check, the evaluations).
#[derive(Debug)]
pub enum RunTools {
    /// The sandboxed Python pool, and where its calls' latencies are noted (shared by every
    /// [`RunTools::async_tools`] handle).
    Pool(BlockingPool, ToolTimings),
    /// Code-judge servers.
    Servers(Arc<ServerTools>),
}

impl RunTools {
    /// The servers when `options.servers` lists some, else a started pool.
    pub fn start(options: &ToolOptions) -> Result<Self, Error> {
        Self::start_verifying(options, VerifyAt::Local)
    }

    /// [`RunTools::start`], with finished rollouts scored where `verify` says: with
    /// [`VerifyAt::Remote`], on the servers ([`ServerTools::verifying`]).
    ///
    /// # Errors
    /// As [`RunTools::start`]; [`VerifyAt::Remote`] without servers.
    pub fn start_verifying(options: &ToolOptions, verify: VerifyAt) -> Result<Self, Error> {
        if options.servers.is_empty() {
            if verify == VerifyAt::Remote {
                return Err(Error::Toolserver(rstar_toolserver::Error::Config(
                    "`rl.verify` is `remote`, which scores answers on the tool servers, but `tools.servers` lists none (--tools URL[,URL…])".into(),
                )));
            }
            Ok(RunTools::Pool(start_pool(options)?, ToolTimings::new()))
        } else {
            Ok(RunTools::Servers(Arc::new(
                ServerTools::connect(&options.servers)?.verifying(verify == VerifyAt::Remote),
            )))
        }
    }

    /// Whether finished rollouts are scored on the servers.
    pub fn verifies(&self) -> bool {
        match self {
            RunTools::Pool(..) => false,
            RunTools::Servers(servers) => servers.verifies(),
        }
    }

    /// The tools, for either driver (the lock-step one through [`AsyncTools::run_round`]).
    pub fn async_tools(&self) -> Arc<dyn AsyncTools> {
        match self {
            RunTools::Pool(pool, timings) => Arc::new(PoolTools {
                pool: pool.pool().clone(),
                timeout: None,
                timings: timings.clone(),
            }),
            RunTools::Servers(servers) => Arc::clone(servers) as Arc<dyn AsyncTools>,
        }
    }
}
