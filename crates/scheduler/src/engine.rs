//! The two traits a deployment implements: [`Engine`] (an inference engine with a KV cache)
//! and [`ToolRunner`] (the code sandbox).
//!
//! Both return boxed futures ([`BoxFuture`]) rather than using `async fn` in the trait, so
//! that they stay dyn-compatible: a [`Dispatcher`](crate::Dispatcher) holds
//! `Arc<dyn Engine>` values of different kinds (a local Burn engine, a remote
//! OpenAI-compatible server) side by side. Implement a method as
//! `Box::pin(async move { ... })`.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the return type of the trait methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The error an implementation returns; the dispatcher wraps its message in
/// [`Error::Engine`](crate::Error::Engine) or [`Error::Tool`](crate::Error::Tool).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error an [`Engine`] returns when it is gone (connection refused, no answer after its
/// retries), as opposed to refusing one request. The [`Dispatcher`](crate::Dispatcher) then
/// stops using the engine and re-dispatches every rollout it held to the others, from the
/// rollout's last completed turn; only when every engine is gone does the run fail
/// ([`Error::EnginesLost`](crate::Error::EnginesLost)). Any other error fails the run at
/// once. Return it boxed (`Err(Box::new(EngineUnavailable(..)))`); the dispatcher also finds it
/// in an error's `source()` chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EngineUnavailable(pub String);

impl EngineUnavailable {
    /// Whether `error` is, or was caused by, an [`EngineUnavailable`].
    pub fn is_in(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(e) = next {
            if e.is::<EngineUnavailable>() {
                return true;
            }
            next = e.source();
        }
        false
    }
}

/// What an engine's [`Engine::free_kv_tokens`] counts as used for a turn in flight, so that a
/// [`Dispatcher`](crate::Dispatcher) refreshing the load
/// ([`load_refresh`](crate::Dispatcher::load_refresh)) can tell its own turns from other
/// clients' load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvAccounting {
    /// The tokens the turn holds now: its context and what it has generated so far (a paged
    /// KV cache: vLLM, SGLang). The dispatcher cannot see the tokens generated so far, so
    /// until the turn ends they count as other clients': the estimate errs low.
    #[default]
    Tokens,
    /// What the turn may hold: its context plus `max_new_tokens` (an engine that reserves
    /// whole turns, as `rstar serve` and the local engine do). The dispatcher's estimate of its
    /// own use is then exact.
    Reserved,
}

/// One model turn to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRequest {
    /// The rollout's id, stable across its turns (engines may key a prefix cache on it).
    pub rollout: u64,
    /// The turn's number within the rollout, from 0.
    pub turn: u32,
    /// The whole context: prompt, earlier turns and tool outputs, as token ids.
    pub context: Vec<u32>,
    /// The most tokens this turn may generate.
    pub max_new_tokens: u64,
}

/// A generated turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnOutput {
    /// The generated token ids (at most `max_new_tokens`; more are cut).
    pub tokens: Vec<u32>,
    /// The tool call the turn ended with, if any (e.g. the JSON inside `<tool_call>`); the
    /// engine adapter parses it because it knows the chat template.
    pub tool_call: Option<String>,
}

/// An inference engine with a KV cache: a local model, a vLLM/SGLang server, a fake in tests.
pub trait Engine: Send + Sync {
    /// KV-cache capacity in tokens. Constant for the engine's lifetime.
    fn kv_capacity(&self) -> u64;

    /// KV tokens free now, as the engine reports them (vLLM and SGLang export this as a
    /// metric). The dispatcher reads it at the start of each [`run`](crate::Dispatcher::run)
    /// (and during it with [`load_refresh`](crate::Dispatcher::load_refresh)) so that memory
    /// held by other clients is not reserved twice.
    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>>;

    /// What [`Self::free_kv_tokens`] counts as used for a turn in flight (the default:
    /// [`KvAccounting::Tokens`]).
    fn kv_accounting(&self) -> KvAccounting {
        KvAccounting::Tokens
    }

    /// Generates one turn.
    fn generate(&self, request: TurnRequest) -> BoxFuture<'_, Result<TurnOutput, BoxError>>;

    /// Drops whatever the engine keeps for a finished rollout (its cached prefix). Called
    /// once per rollout when it ends, and when a tool call starts under
    /// [`KvRetention::Release`](crate::KvRetention::Release). The default does nothing.
    fn release(&self, rollout: u64) -> BoxFuture<'_, ()> {
        let _ = rollout;
        Box::pin(async {})
    }
}

/// A tool call to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The rollout that made the call.
    pub rollout: u64,
    /// The turn that ended with it.
    pub turn: u32,
    /// The call itself, as the engine returned it.
    pub payload: String,
}

/// A tool result, ready to append to the context.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    /// The tokens of the tool response turn (e.g. `<tool_response>…</tool_response>`).
    pub tokens: Vec<u32>,
}

/// Runs tool calls, e.g. `rstar-toolenv`'s sandbox. Calls from different rollouts run
/// concurrently; a tool that fails in the sandbox is a result, not an `Err`.
pub trait ToolRunner: Send + Sync {
    /// Runs one call.
    fn run(&self, call: ToolCall) -> BoxFuture<'_, Result<ToolOutput, BoxError>>;
}
