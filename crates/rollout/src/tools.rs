//! The tools: the one tool trait of the agent layer ([`AsyncTools`]) and its implementations
//! here ([`PoolTools`], the sandbox; [`FnTools`], an async function), the tools' options (the
//! run config's `tools` section, [`ToolOptions`]), where finished rollouts are scored
//! ([`VerifyAt`]), and the sandboxed in-process Python pool ([`start_pool`]). The choice between the pool and code-judge servers is
//! `rstar_train::tools::RunTools`: the trainer is the crate that sees both this one and
//! `rstar-toolserver`.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use rstar_episode::toolcall::{ToolCall, ToolName, ToolOutcome};
use rstar_scheduler::BoxFuture;
use rstar_toolenv::{BlockingPool, Pool};
use rstar_verifier::{Scored, VerifyItem};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::outcome_of;
use crate::scheduled::runtime;
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

/// The tools: runs tool calls; a failure in the sandbox is an outcome, not an error. The one
/// tool trait of the agent layer: the scheduled driver calls [`run`](Self::run) as each
/// rollout's turn ends, the lock-step driver ([`rollout`](crate::rollout)), the SFT corpus and
/// the trainer's evaluation call [`run_round`](Self::run_round) once a round. Implementations:
/// [`PoolTools`] (the sandbox), `rstar_train::tools::ServerTools` (code-judge servers), [`FnTools`] (an async
/// function), [`FnExecutor`](crate::FnExecutor) (a plain closure).
pub trait AsyncTools: Send + Sync {
    /// Runs one call. `history` holds the code of the rollout's earlier `jupyter_code` calls,
    /// which a stateful executor replays first (empty for the first call and for
    /// `python_code_with_standard_io`).
    fn run(&self, call: ToolCall, history: Vec<String>) -> BoxFuture<'_, ToolOutcome>;

    /// Runs a lock-step round's calls (no history) concurrently and waits for them; one
    /// outcome per call, in call order. Call it from a plain thread, outside any tokio runtime.
    /// The default drives every [`run`](Self::run) at once on a current-thread runtime.
    fn run_round(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        let futures = calls
            .iter()
            .map(|c| self.run(c.clone(), Vec::new()))
            .collect();
        block_on_round(calls.len(), join_all(futures))
    }

    /// Whether two threads may run rounds on these tools at once (the trainer's evaluation
    /// samples two decodings side by side when they may). `true` unless an implementation's
    /// calls must come in one order.
    fn shared(&self) -> bool {
        true
    }

    /// Where these tools note each call's latency and run time, when they do
    /// ([`PoolTools`] and `rstar_train::tools::ServerTools`); the trainer takes a step's notes after its
    /// rollouts and writes their percentiles to `metrics.jsonl`.
    fn timings(&self) -> Option<&ToolTimings> {
        None
    }

    /// Whether the drivers score finished rollouts through [`verify`](Self::verify), on the
    /// tools' side (`rl.verify = "remote"`: the tool servers' `POST /verify`), rather than with
    /// the in-process verifier. `false` (the default) unless an implementation offloads them.
    fn verifies(&self) -> bool {
        false
    }

    /// Scores finished answers where the tools run; one verdict per answer, in order. The
    /// default scores them in process, as the drivers do when [`verifies`](Self::verifies) is
    /// `false`.
    ///
    /// # Errors
    /// When the answers could not be scored at all (the servers unreachable after the
    /// client's retries, or refusing the request).
    fn verify(&self, answers: Vec<VerifyItem>) -> BoxFuture<'_, VerifyResult> {
        Box::pin(async move { Ok(verify_in_process(&answers)) })
    }

    /// [`verify`](Self::verify) for the lock-step driver: waits for the verdicts. Call it
    /// from a plain thread, outside any tokio runtime.
    ///
    /// # Errors
    /// As [`verify`](Self::verify).
    fn verify_round(&self, answers: Vec<VerifyItem>) -> VerifyResult {
        match runtime() {
            Ok(rt) => rt.block_on(self.verify(answers)),
            Err(e) => Err(Error::tools(e.to_string())),
        }
    }
}

/// What [`AsyncTools::verify`] answers: one verdict per answer, or why none could be had.
pub type VerifyResult = Result<Vec<Scored>, Error>;

/// The verdicts of the in-process verifier, in the wire form of `/verify`.
fn verify_in_process(answers: &[VerifyItem]) -> Vec<Scored> {
    let verifier = rstar_verifier::Verifier::new();
    answers.iter().map(|a| a.score(&verifier)).collect()
}

/// A lock-step round's outcomes: `round` run on a current-thread runtime, or, when no runtime
/// can be made, one internal error per call (`calls` of them).
fn block_on_round(calls: usize, round: impl Future<Output = Vec<ToolOutcome>>) -> Vec<ToolOutcome> {
    match runtime() {
        Ok(rt) => rt.block_on(round),
        Err(e) => (0..calls)
            .map(|_| ToolOutcome::code_judge(false, "internal_error", "", &e.to_string(), 0.0))
            .collect(),
    }
}

/// Polls every future until all are done; their outputs in order.
async fn join_all<T>(futures: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut futures: Vec<Option<BoxFuture<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *output = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// An async function as the tools (tests, scripted environments). It gets the call only.
#[derive(Debug, Clone)]
pub struct FnTools<F>(pub F);

impl<F, Fut> AsyncTools for FnTools<F>
where
    F: Fn(ToolCall) -> Fut + Send + Sync,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    fn run(&self, call: ToolCall, _history: Vec<String>) -> BoxFuture<'_, ToolOutcome> {
        Box::pin((self.0)(call))
    }
}

/// The sandboxed Python pool of [`rstar_toolenv`] (the async [`rstar_toolenv::Pool`]; a
/// [`rstar_toolenv::BlockingPool`] gives it with `pool()`).
#[derive(Debug, Clone)]
pub struct PoolTools {
    /// The pool.
    pub pool: rstar_toolenv::Pool,
    /// Per-call wall-clock limit; `None` uses the pool's.
    pub timeout: Option<Duration>,
    /// Where each call's latency and run time are noted ([`AsyncTools::timings`]).
    pub timings: ToolTimings,
}

impl AsyncTools for PoolTools {
    fn run(&self, call: ToolCall, history: Vec<String>) -> BoxFuture<'_, ToolOutcome> {
        let call = match call.name {
            ToolName::PythonCodeWithStandardIo => {
                rstar_toolenv::ToolCall::python(call.code, call.input)
            }
            ToolName::JupyterCode => rstar_toolenv::ToolCall::jupyter(call.code, history),
        };
        let call = self.limited(call);
        Box::pin(async move { outcome_of(&self.timed(call).await) })
    }

    /// Every call of the round as a Python call (the lock-step driver keeps no notebook
    /// history), all at once on the pool's workers.
    fn run_round(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        let futures: Vec<BoxFuture<'_, rstar_toolenv::ToolResult>> = calls
            .iter()
            .map(|c| {
                let call = self.limited(rstar_toolenv::ToolCall::python(
                    c.code.clone(),
                    c.input.clone(),
                ));
                Box::pin(self.timed(call)) as BoxFuture<'_, _>
            })
            .collect();
        block_on_round(calls.len(), async move {
            join_all(futures).await.iter().map(outcome_of).collect()
        })
    }

    fn timings(&self) -> Option<&ToolTimings> {
        Some(&self.timings)
    }
}

impl PoolTools {
    /// The pool's tools, with the pool's own time limit and a fresh [`ToolTimings`].
    pub fn new(pool: rstar_toolenv::Pool) -> Self {
        PoolTools {
            pool,
            timeout: None,
            timings: ToolTimings::new(),
        }
    }

    /// Runs `call`, noting its latency and run time.
    async fn timed(&self, call: rstar_toolenv::ToolCall) -> rstar_toolenv::ToolResult {
        let started = std::time::Instant::now();
        let (result, behind) = self.pool.run_waited(call).await;
        self.timings
            .record_waited(started.elapsed(), result.cost, behind);
        result
    }

    /// `call` with the per-call limit, when one is set.
    fn limited(&self, call: rstar_toolenv::ToolCall) -> rstar_toolenv::ToolCall {
        match self.timeout {
            Some(t) => call.with_timeout(t),
            None => call,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(code: &str) -> ToolCall {
        ToolCall {
            name: ToolName::PythonCodeWithStandardIo,
            code: code.into(),
            input: String::new(),
        }
    }

    /// A future that is pending `polls` times (waking itself each time), then gives `value`.
    fn after<T: Send + 'static>(polls: usize, value: T) -> BoxFuture<'static, T> {
        let mut left = polls;
        let mut value = Some(value);
        Box::pin(std::future::poll_fn(move |cx| {
            if left == 0 {
                std::task::Poll::Ready(value.take().expect("polled after ready"))
            } else {
                left -= 1;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }))
    }

    #[test]
    fn join_all_keeps_the_order_of_the_futures_not_of_their_ends() {
        let rt = runtime().unwrap();
        let out = rt.block_on(join_all(vec![after(3, "a"), after(0, "b"), after(1, "c")]));
        assert_eq!(out, ["a", "b", "c"]);
        assert!(rt.block_on(join_all::<u8>(Vec::new())).is_empty());
    }

    #[test]
    fn a_round_gives_one_outcome_per_call_in_call_order() {
        let tools = FnTools(|c: ToolCall| async move {
            // The later calls finish first.
            let wait = 3 - c.code.len().min(3);
            for _ in 0..wait {
                tokio::task::yield_now().await;
            }
            ToolOutcome::code_judge(true, "", &format!("{}\n", c.code), "", 0.0)
        });
        let calls = [call("a"), call("bb"), call("ccc")];
        let outcomes = tools.run_round(&calls);
        let want: Vec<ToolOutcome> = ["a", "bb", "ccc"]
            .iter()
            .map(|c| ToolOutcome::code_judge(true, "", &format!("{c}\n"), "", 0.0))
            .collect();
        assert_eq!(outcomes, want);
        assert!(tools.run_round(&[]).is_empty());
    }

    #[test]
    fn the_default_verify_scores_in_process_as_the_verifier_does() {
        let tools =
            FnTools(|_c: ToolCall| async { ToolOutcome::code_judge(true, "", "", "", 0.0) });
        assert!(!tools.verifies());
        assert!(tools.shared());
        assert!(tools.timings().is_none());
        let items = vec![
            VerifyItem::new("so \\boxed{42}", "42", rstar_verifier::Mode::Integer),
            VerifyItem::new("so \\boxed{41}", "42", rstar_verifier::Mode::Integer),
            VerifyItem::new("no box", "42", rstar_verifier::Mode::Integer),
        ];
        let verifier = rstar_verifier::Verifier::new();
        let want: Vec<Scored> = items.iter().map(|a| a.score(&verifier)).collect();
        let got = tools.verify_round(items).unwrap();
        assert_eq!(got, want);
        let rewards: Vec<u8> = got.iter().map(|v| v.reward).collect();
        assert_eq!(rewards, [1, 0, 0]);
    }
}
