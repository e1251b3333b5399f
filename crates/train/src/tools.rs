//! Where a run's tool calls go: the sandboxed in-process Python pool
//! ([`rstar_rollout::scheduled::PoolTools`]), or code-judge servers (`rstar tools serve`,
//! code-judge, SandboxFusion's code-judge API) through [`ServerTools`]. [`RunTools`] is the one
//! place the trainer and `rstar eval` choose between them, from
//! [`ToolOptions`](rstar_rollout::tools::ToolOptions) (the run config's `tools` section).
//!
//! The rollout drivers know only [`AsyncTools`] and the verifier's types; this module is where
//! they meet `rstar-toolserver`'s client and wire types.

use rstar_episode::IoError;
use std::sync::Arc;

use rstar_episode::toolcall::{ToolCall, ToolName, ToolOutcome};
use rstar_rollout::Error as RolloutError;
use rstar_rollout::scheduled::{AsyncTools, PoolTools, VerifyResult};
use rstar_rollout::timing::ToolTimings;
use rstar_rollout::tools::{ToolOptions, VerifyAt, start_pool};
use rstar_scheduler::BoxFuture;
use rstar_toolenv::BlockingPool;
use rstar_verifier::VerifyItem;

use crate::error::Error;

/// Tool calls on code-judge servers (`rstar tools serve`, code-judge itself) through
/// [`rstar_toolserver`]'s batching client: calls are grouped into batches, spread over the
/// servers by their queues, and retried on queue timeouts and transport errors (a server that
/// dies has its calls retried on the others). The answer is written as the in-process pool
/// writes it ([`ToolOutcome::code_judge`]), so a rollout scores the same either way.
///
/// The client runs on a small runtime of its own, so the tools can serve any number of
/// scheduled runs, each on its own runtime. `jupyter_code` calls need the in-process sandbox
/// (their cells share state) and are answered with an error here.
pub struct ServerTools {
    client: rstar_toolserver::Client,
    urls: Vec<String>,
    runtime: Option<tokio::runtime::Runtime>,
    /// Score finished rollouts on the servers' `/verify` ([`AsyncTools::verifies`]).
    verify: bool,
    timings: ToolTimings,
}

impl std::fmt::Debug for ServerTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTools")
            .field("urls", &self.urls)
            .finish_non_exhaustive()
    }
}

impl ServerTools {
    /// A client of the servers at `urls` (`http://host:port`), with each call's wall-clock
    /// limit given to the servers' own.
    ///
    /// # Errors
    /// No URL, a bad URL, or a runtime that cannot start.
    pub fn connect(urls: &[String]) -> Result<Self, Error> {
        if urls.is_empty() {
            return Err(Error::TrainConfig {
                field: "tools.servers".into(),
                message: "lists no server".into(),
            });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rstar-tools-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Io(IoError::new("<tokio runtime>", e)))?;
        let client = {
            let _inside = runtime.enter();
            urls.iter()
                .fold(rstar_toolserver::Client::builder(), |b, u| {
                    b.endpoint(u.clone())
                })
                .build()
                .map_err(|e| rstar_engine::Error::Remote {
                    url: urls.join(","),
                    message: e.to_string(),
                })?
        };
        Ok(ServerTools {
            client,
            urls: urls.to_vec(),
            runtime: Some(runtime),
            verify: false,
            timings: ToolTimings::new(),
        })
    }

    /// The same tools, scoring finished rollouts on the servers' `POST /verify` when `on`
    /// (`rl.verify = "remote"`), in batches beside the tool calls, rather than in process.
    pub fn verifying(mut self, on: bool) -> Self {
        self.verify = on;
        self
    }

    /// The servers' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }
}

impl Drop for ServerTools {
    fn drop(&mut self) {
        // Possibly dropped inside another runtime: shut this one down without blocking.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The answer to a `jupyter_code` call, which a code-judge server cannot run.
fn jupyter_refused() -> ToolOutcome {
    ToolOutcome::code_judge(
        false,
        "invalid_input",
        "",
        "jupyter_code needs the in-process sandbox: its cells share state, which a code-judge server does not keep",
        0.0,
    )
}

/// A `python_code_with_standard_io` call as a code-judge submission.
fn submission(call: ToolCall) -> rstar_toolserver::api::Submission {
    let mut submission = rstar_toolserver::api::Submission::python(call.code);
    if !call.input.is_empty() {
        submission.input = Some(call.input);
    }
    submission
}

/// A code-judge result as the in-process pool writes it.
fn server_outcome(r: &rstar_toolserver::api::SubmissionResult) -> ToolOutcome {
    ToolOutcome::code_judge(
        r.run_success,
        r.reason.as_str(),
        r.stdout.as_deref().unwrap_or(""),
        r.stderr.as_deref().unwrap_or(""),
        r.cost,
    )
}

impl AsyncTools for ServerTools {
    fn run(&self, call: ToolCall, _history: Vec<String>) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            if matches!(call.name, ToolName::JupyterCode) {
                return jupyter_refused();
            }
            let started = std::time::Instant::now();
            let r = self.client.run(submission(call)).await;
            self.timings.record(started.elapsed(), r.cost);
            server_outcome(&r)
        })
    }

    fn timings(&self) -> Option<&ToolTimings> {
        Some(&self.timings)
    }

    fn run_round(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        self.batch(calls)
    }

    fn verifies(&self) -> bool {
        self.verify
    }

    /// On the servers, from the client's own runtime (the caller's may be any).
    fn verify(&self, answers: Vec<VerifyItem>) -> BoxFuture<'_, VerifyResult> {
        let client = self.client.clone();
        let task = self
            .runtime
            .as_ref()
            .map(|rt| rt.spawn(async move { client.verify(answers).await }));
        Box::pin(async move {
            match task {
                Some(task) => task
                    .await
                    .map_err(|e| RolloutError::tools(format!("the verify task failed: {e}")))?
                    .map_err(|e| RolloutError::Tools(Box::new(e))),
                None => Err(RolloutError::tools("the tool client is shut down")),
            }
        })
    }

    fn verify_round(&self, answers: Vec<VerifyItem>) -> VerifyResult {
        match &self.runtime {
            Some(runtime) => runtime
                .block_on(self.client.verify(answers))
                .map_err(|e| RolloutError::Tools(Box::new(e))),
            None => Err(RolloutError::tools("the tool client is shut down")),
        }
    }
}

impl ServerTools {
    /// A lock-step round on the servers: the calls go out as one batch (spread over the
    /// servers, retried on the others when one dies), and the round waits for them. Call it
    /// outside any tokio runtime (the lock-step driver and the evaluation are plain threads).
    fn batch(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        let mut outcomes: Vec<Option<ToolOutcome>> = vec![None; calls.len()];
        let mut sent = Vec::new();
        let mut subs = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if matches!(call.name, ToolName::JupyterCode) {
                outcomes[i] = Some(jupyter_refused());
            } else {
                sent.push(i);
                subs.push(submission(call.clone()));
            }
        }
        if !subs.is_empty() {
            let results = match &self.runtime {
                Some(runtime) => runtime.block_on(self.client.run_batch_timed(subs)),
                None => Vec::new(),
            };
            for (r, took) in &results {
                self.timings.record(*took, r.cost);
            }
            for (k, &i) in sent.iter().enumerate() {
                outcomes[i] = Some(results.get(k).map_or_else(
                    || ToolOutcome::code_judge(false, "internal_error", "", "no result", 0.0),
                    |(r, _)| server_outcome(r),
                ));
            }
        }
        outcomes.into_iter().flatten().collect()
    }
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
    ///
    /// # Errors
    /// The pool's or the client's failure to start.
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
                return Err(Error::TrainConfig {
                    field: "rl.verify".into(),
                    message: "is `remote`, which scores answers on the tool servers, but `tools.servers` lists none (--tools URL[,URL…])".into(),
                });
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
