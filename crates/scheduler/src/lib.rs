//! KV-cache-aware dispatch of multi-turn agentic rollouts, and a simulator to prove it.
//!
//! In agentic RL, rollout lengths and tool-call counts vary widely. Split rollouts evenly
//! across GPUs in advance and most GPUs idle while a few finish the long tail; let an
//! inference engine admit more than its KV cache holds and it must preempt and recompute.
//! rStar2-Agent's scheduler instead admits a rollout only where its KV reservation fits,
//! sends tool calls asynchronously the moment a turn ends, and gives freed capacity to the
//! next rollout at once. This crate provides:
//!
//! - the [`Engine`] and [`ToolRunner`] traits (dyn-compatible, boxed futures), so local
//!   engines, remote OpenAI-compatible servers and a sandbox plug in;
//! - the rollout state machine [`RolloutState`] (turn → tool → turn … until stop, budget or
//!   turn limit) and the two [`KvRetention`] policies during tool calls;
//! - the three [`DispatchPolicy`] values (`static`, `least-requests`, `kv-aware`), whose
//!   decisions are the pure functions [`choose_engine`] and [`choose_ledger`];
//! - [`KvLedger`]: kv-aware's per-engine book of reservations, kept safe with the banker's
//!   algorithm, so that reservations can shrink during tool calls and grow segment by
//!   segment without ever risking an eviction or a deadlock;
//! - a tokio [`Dispatcher`] that runs batches of rollouts against any engines and tools;
//! - a seeded discrete-event simulator ([`simulate_all`], [`SimConfig`] presets) reporting
//!   makespan, GPU idle fraction, peak KV use, evictions and tool-call concurrency.
//!
//! It is deliberately **not** an inference engine, a tokenizer or a sandbox: those sit behind
//! the traits (`rstar-policy`, remote servers, `rstar-toolenv`). It does not depend on Burn.
//!
//! ```
//! use rstar_scheduler::{DispatchPolicy, SimConfig, simulate_all};
//!
//! let report = simulate_all(&SimConfig::small()).unwrap();
//! let kv = report.get(DispatchPolicy::KvAware).unwrap();
//! assert_eq!(kv.evictions, 0);
//! // kv-aware leaves GPUs idle far less than a static split.
//! assert!(report.idle_cut_vs_static(DispatchPolicy::KvAware).unwrap() >= 0.3);
//! println!("{}", report.table());
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

mod dispatcher;
mod engine;
mod error;
mod ledger;
mod policy;
mod rollout;
mod sim;

pub use dispatcher::{DispatchReport, DispatchStats, Dispatcher, RolloutRequest, RolloutResult};
pub use engine::{
    BoxError, BoxFuture, Engine, EngineUnavailable, KvAccounting, ToolCall, ToolOutput, ToolRunner,
    TurnOutput, TurnRequest,
};
pub use error::{Error, Result};
pub use ledger::{KvLedger, choose_ledger};
pub use policy::{DispatchPolicy, EngineView, KvRetention, choose_engine, static_engine};
pub use rollout::{FinishReason, Next, RolloutState};
pub use sim::{
    EngineModel, PolicyReport, SimConfig, SimReport, SimRollout, SimTurn, ToolStep, Workload,
    WorkloadConfig, WorkloadSummary, simulate, simulate_all, simulate_workload,
};
