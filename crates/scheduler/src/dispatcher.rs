//! The tokio dispatcher: runs multi-turn rollouts against any [`Engine`] and [`ToolRunner`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::engine::{Engine, EngineUnavailable, KvAccounting, ToolCall, ToolRunner, TurnRequest};
use crate::ledger::{KvLedger, choose_ledger};
use crate::policy::{DispatchPolicy, EngineView, KvRetention, choose_engine};
use crate::rollout::{FinishReason, Next, RolloutState};
use crate::{Error, Result};

/// One rollout to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutRequest {
    /// A caller-chosen id, passed to the engine and the tool runner.
    pub id: u64,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Response budget in tokens (model and tool tokens together).
    pub max_response_tokens: u64,
    /// The most model turns.
    pub max_turns: u32,
}

/// A finished rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutResult {
    /// The request's id.
    pub id: u64,
    /// The response: model turns and tool outputs, in order.
    pub response: Vec<u32>,
    /// One flag per response token: `true` for model tokens (trained on), `false` for tool
    /// tokens (masked out of the loss).
    pub model_mask: Vec<bool>,
    /// Model turns.
    pub turns: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Why it ended.
    pub finish: FinishReason,
    /// The engines its turns ran on, one entry per turn (segments of a turn share its
    /// engine).
    pub engines: Vec<usize>,
}

/// Counters from one [`Dispatcher::run`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DispatchStats {
    /// Per engine, the most KV tokens reserved at once (kv-aware only; zero otherwise).
    pub peak_reserved: Vec<u64>,
    /// Per engine, the capacity reservations were checked against (the smaller of
    /// [`Engine::kv_capacity`] and the free tokens it reported at the start).
    pub capacity: Vec<u64>,
    /// The most tool calls in flight at once.
    pub peak_tool_calls: usize,
    /// The most rollouts waiting in the dispatcher's queue at once.
    pub peak_queue: usize,
    /// Per engine, the model tokens of the turns it wrote (kept by the rollouts).
    #[serde(default)]
    pub tokens: Vec<u64>,
    /// Per engine, the turns it wrote.
    #[serde(default)]
    pub turns: Vec<u64>,
    /// Per engine, the microseconds during which it had at least one turn to generate.
    #[serde(default)]
    pub busy_micros: Vec<u64>,
    /// Microseconds from the start of the run to its end.
    #[serde(default)]
    pub wall_micros: u64,
    /// The engines found unavailable during the run ([`EngineUnavailable`]), in that order;
    /// none of their rollouts was lost (see [`Dispatcher::run`]).
    #[serde(default)]
    pub lost_engines: Vec<usize>,
    /// Turns that failed on an engine that was gone and were dispatched again elsewhere.
    #[serde(default)]
    pub redispatched: u64,
    /// Load reports taken during the run ([`Dispatcher::load_refresh`]), all engines together.
    #[serde(default)]
    pub load_reports: u64,
    /// kv-aware with [`Dispatcher::load_refresh`]: per engine, the lowest capacity applied
    /// during the run (other clients' load taken off); equal to [`Self::capacity`] otherwise.
    #[serde(default)]
    pub capacity_low: Vec<u64>,
}

impl DispatchStats {
    /// Per engine, the seconds it had no turn to generate (`wall − busy`): the long tail
    /// that a better dispatch shortens.
    pub fn idle_secs(&self) -> Vec<f64> {
        self.busy_micros
            .iter()
            .map(|&b| self.wall_micros.saturating_sub(b) as f64 / 1e6)
            .collect()
    }
}

/// What [`Dispatcher::run`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    /// The finished rollouts, in the order of the requests.
    pub rollouts: Vec<RolloutResult>,
    /// Counters.
    pub stats: DispatchStats,
}

/// Runs batches of rollouts over a set of engines and one tool runner, with one of the three
/// [`DispatchPolicy`] values and a [`KvRetention`].
///
/// The admission decision is [`choose_engine`] (`static`, `least-requests`) or
/// [`choose_ledger`] (`kv-aware`), the same functions the [simulator](crate::simulate)
/// measures. Under `kv-aware` the dispatcher keeps its own book of reservations, one
/// [`KvLedger`] per engine: prompt + budget while a turn generates, only the context while a
/// tool call runs (grown back, under the banker's check, before the next turn), and never
/// more than the engine's capacity; with [`Dispatcher::segment_tokens`] turns run in
/// segments and reservations grow segment by segment. Under the other two policies every
/// rollout is sent at once and the engines queue (and, being real engines, may preempt).
///
/// ```no_run
/// use std::sync::Arc;
/// use rstar_scheduler::{
///     DispatchPolicy, Dispatcher, Engine, KvRetention, RolloutRequest, ToolRunner,
/// };
///
/// async fn roll(
///     engines: Vec<Arc<dyn Engine>>,
///     tools: Arc<dyn ToolRunner>,
///     prompts: Vec<Vec<u32>>,
/// ) -> rstar_scheduler::Result<()> {
///     let requests = prompts
///         .into_iter()
///         .enumerate()
///         .map(|(i, prompt)| RolloutRequest {
///             id: i as u64,
///             prompt,
///             max_response_tokens: 12_288,
///             max_turns: 16,
///         })
///         .collect();
///     let report = Dispatcher::new(engines, tools)
///         .policy(DispatchPolicy::KvAware)
///         .retention(KvRetention::Keep)
///         .run(requests)
///         .await?;
///     for r in &report.rollouts {
///         println!("{}: {} tokens, {} tool calls, {:?}", r.id, r.response.len(), r.tool_calls, r.finish);
///     }
///     Ok(())
/// }
/// ```
pub struct Dispatcher {
    engines: Vec<Arc<dyn Engine>>,
    tools: Arc<dyn ToolRunner>,
    policy: DispatchPolicy,
    retention: KvRetention,
    segment: u64,
    refresh: Duration,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("engines", &self.engines.len())
            .field("policy", &self.policy)
            .field("retention", &self.retention)
            .field("segment_tokens", &self.segment)
            .field("load_refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

enum Event {
    Turn {
        slot: usize,
        engine: usize,
        result: std::result::Result<crate::engine::TurnOutput, TurnError>,
    },
    Tool {
        slot: usize,
        result: std::result::Result<crate::engine::ToolOutput, String>,
    },
}

/// A failed turn: the message, and whether the engine is gone ([`EngineUnavailable`]).
struct TurnError {
    message: String,
    unavailable: bool,
}

struct Slot {
    request: RolloutRequest,
    state: RolloutState,
    context: Vec<u32>,
    mask: Vec<bool>,
    engines: Vec<usize>,
    /// The engine the rollout is bound to (sticky), if any.
    engine: Option<usize>,
    /// Whether a kv-aware reservation is held.
    reserved: bool,
    pending_tool: Option<String>,
    done: bool,
    /// Tokens of the current turn generated by earlier segments.
    partial: u64,
    /// `max_new_tokens` of the request in flight.
    asked: u64,
    /// Whether a turn (or segment) of the rollout is being generated.
    generating: bool,
}

struct Run<'a> {
    d: &'a Dispatcher,
    slots: Vec<Slot>,
    views: Vec<EngineView>,
    /// kv-aware: the reservations on each engine.
    ledgers: Vec<KvLedger>,
    /// kv-aware: bound rollouts waiting for their reservation to grow, per engine.
    pending: Vec<VecDeque<usize>>,
    queue: VecDeque<usize>,
    tasks: JoinSet<Event>,
    tools_in_flight: usize,
    stats: DispatchStats,
    /// Per engine, whether it still answers.
    alive: Vec<bool>,
    /// The engines lost so far, with their last message.
    lost: Vec<(usize, String)>,
    /// Per engine: turns in flight, since when it has been busy, and its busy time so far.
    generating: Vec<usize>,
    busy_since: Vec<Instant>,
    busy: Vec<Duration>,
    /// kv-aware: per engine, the capacity a load report may not take it below (see
    /// [`Dispatcher::load_refresh`]).
    floor: Vec<u64>,
    /// kv-aware: per engine, the capacity its load reports ask for (the lower of the last two),
    /// applied as far as the reservations allow, and again as they end; and what the last
    /// report alone asked for.
    want: Vec<Option<u64>>,
    last_report: Vec<Option<u64>>,
}

impl Dispatcher {
    /// A dispatcher over `engines` (at least one) and `tools`, `kv-aware` with
    /// [`KvRetention::Keep`] until changed.
    pub fn new(engines: Vec<Arc<dyn Engine>>, tools: Arc<dyn ToolRunner>) -> Self {
        Self {
            engines,
            tools,
            policy: DispatchPolicy::KvAware,
            retention: KvRetention::Keep,
            segment: 0,
            refresh: Duration::ZERO,
        }
    }

    /// kv-aware only: asks every engine for its free KV tokens ([`Engine::free_kv_tokens`])
    /// every `interval` while the run goes on, not only at its start (`Duration::ZERO`, the
    /// default: only at the start). Each report sets the capacity the engine's [`KvLedger`]
    /// checks against to the free tokens reported plus what this run's turns in flight hold
    /// there as the engine counts them ([`Engine::kv_accounting`]), at most
    /// [`Engine::kv_capacity`], so memory other clients take or give back during the run is
    /// neither reserved twice nor left unused. A report lowers the capacity at once and raises
    /// it when the report before agrees.
    ///
    /// The reports come from one background task per engine and are applied between
    /// events, so a slow or failing report never holds up a turn (a failed report is
    /// ignored; a lost engine is found by its turns). A report never takes an engine below
    /// what keeps its current reservations safe ([`KvLedger::set_capacity`]), nor below the
    /// largest reservation of the run where the engine could take it at the start, so every
    /// rollout can still run and the run always ends.
    pub fn load_refresh(mut self, interval: Duration) -> Self {
        self.refresh = interval;
        self
    }

    /// kv-aware only: generates turns in segments of at most `tokens` tokens (0, the
    /// default: whole turns). A rollout then reserves its context plus one segment instead
    /// of prompt + budget, and its reservation grows segment by segment under the banker's
    /// check ([`KvLedger`]), so far more rollouts share an engine without any risk of
    /// eviction or deadlock (see docs/scheduler.md for the measured effect).
    ///
    /// Requires engines that honour [`TurnRequest::max_new_tokens`] and that keep the
    /// context cached between requests of one rollout: a segment is a request with the
    /// same `rollout` and `turn` whose context ends with the previous segment's tokens. A
    /// turn that returns exactly `max_new_tokens` tokens without a tool call, before the
    /// budget is spent, is taken to be cut and continues in the next segment; an engine
    /// that answers an empty turn there ends the rollout as usual.
    pub fn segment_tokens(mut self, tokens: u64) -> Self {
        self.segment = tokens;
        self
    }

    /// Sets the dispatch policy.
    pub fn policy(mut self, policy: DispatchPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets what happens to KV caches during tool calls.
    pub fn retention(mut self, retention: KvRetention) -> Self {
        self.retention = retention;
        self
    }

    /// Runs every rollout to completion and returns them in request order.
    ///
    /// An engine that fails with [`EngineUnavailable`] is lost for the rest of the run: every
    /// rollout bound to it goes on on the others from its last completed turn (the failed
    /// turn kept nothing, so no token is lost or written twice), counted in
    /// [`DispatchStats::lost_engines`] and [`DispatchStats::redispatched`].
    ///
    /// Fails with [`Error::TooLarge`] (before starting anything) when a kv-aware reservation
    /// fits no engine, with [`Error::EnginesLost`] when no engine is left, and with
    /// [`Error::Engine`] or [`Error::Tool`] on the first other failure of an implementation
    /// (the other in-flight calls are cancelled).
    pub async fn run(&self, requests: Vec<RolloutRequest>) -> Result<DispatchReport> {
        if self.engines.is_empty() {
            return Err(Error::Config {
                field: "engines",
                reason: "a dispatcher needs at least one engine".into(),
            });
        }
        let started = Instant::now();
        let mut views = Vec::with_capacity(self.engines.len());
        let mut lost = Vec::new();
        for (i, engine) in self.engines.iter().enumerate() {
            let free = match engine.free_kv_tokens().await {
                Ok(free) => free,
                // Gone before the run: its rollouts go to the others.
                Err(e) if EngineUnavailable::is_in(e.as_ref()) => {
                    lost.push((i, format!("free_kv_tokens: {e}")));
                    0
                }
                Err(e) => {
                    return Err(Error::Engine {
                        engine: i,
                        rollout: 0,
                        message: format!("free_kv_tokens: {e}"),
                    });
                }
            };
            views.push(EngineView {
                capacity: engine.kv_capacity().min(free),
                reserved: 0,
                in_flight: 0,
            });
        }
        if lost.len() == views.len() {
            return Err(Error::EnginesLost { lost });
        }
        let alive: Vec<bool> = (0..views.len())
            .map(|i| !lost.iter().any(|(e, _)| *e == i))
            .collect();
        let slots: Vec<Slot> = requests
            .into_iter()
            .map(|request| Slot {
                state: RolloutState::new(
                    request.prompt.len() as u64,
                    request.max_response_tokens,
                    request.max_turns,
                ),
                context: request.prompt.clone(),
                mask: Vec::new(),
                engines: Vec::new(),
                engine: None,
                reserved: false,
                pending_tool: None,
                done: false,
                partial: 0,
                asked: 0,
                generating: false,
                request,
            })
            .collect();
        // The largest reservation of the run: a load report takes no engine that could hold it
        // at the start below it, so every rollout can always run somewhere.
        let largest_claim = slots
            .iter()
            .map(|s| s.state.reservation())
            .max()
            .unwrap_or(0);
        if self.policy.reserves_kv() {
            let largest = views
                .iter()
                .zip(&alive)
                .filter(|(_, a)| **a)
                .map(|(v, _)| v.capacity)
                .max()
                .unwrap_or(0);
            if let Some(s) = slots.iter().find(|s| s.state.reservation() > largest) {
                return Err(Error::TooLarge {
                    rollout: s.request.id,
                    need: s.state.reservation(),
                    largest,
                });
            }
        }
        let mut run = Run {
            d: self,
            queue: (0..slots.len()).collect(),
            slots,
            stats: DispatchStats {
                peak_reserved: vec![0; views.len()],
                capacity: views.iter().map(|v| v.capacity).collect(),
                tokens: vec![0; views.len()],
                turns: vec![0; views.len()],
                lost_engines: lost.iter().map(|(e, _)| *e).collect(),
                capacity_low: views.iter().map(|v| v.capacity).collect(),
                ..DispatchStats::default()
            },
            floor: views
                .iter()
                .map(|v| v.capacity.min(largest_claim))
                .collect(),
            want: vec![None; views.len()],
            last_report: vec![None; views.len()],
            ledgers: views.iter().map(|v| KvLedger::new(v.capacity)).collect(),
            pending: vec![VecDeque::new(); views.len()],
            generating: vec![0; views.len()],
            busy_since: vec![started; views.len()],
            busy: vec![Duration::ZERO; views.len()],
            alive,
            lost,
            views,
            tasks: JoinSet::new(),
            tools_in_flight: 0,
        };
        let (reports, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let pollers: Vec<tokio::task::JoinHandle<()>> =
            if self.policy.reserves_kv() && !self.refresh.is_zero() {
                (0..self.engines.len())
                    .filter(|&i| run.alive[i])
                    .map(|i| {
                        let engine = Arc::clone(&self.engines[i]);
                        let (reports, every) = (reports.clone(), self.refresh);
                        tokio::spawn(async move {
                            loop {
                                tokio::time::sleep(every).await;
                                if let Ok(free) = engine.free_kv_tokens().await
                                    && reports.send((i, free)).is_err()
                                {
                                    break;
                                }
                            }
                        })
                    })
                    .collect()
            } else {
                Vec::new()
            };
        drop(reports);
        let polling = !pollers.is_empty();
        run.admit();
        let driven = run.drive(&mut rx, polling).await;
        for poller in &pollers {
            poller.abort();
        }
        driven?;
        // Only possible when the engines that could hold a reservation were lost: the
        // others cannot take it.
        if let Some(s) = run.slots.iter().find(|s| !s.done) {
            let largest = (0..run.ledgers.len())
                .filter(|&e| run.alive[e])
                .map(|e| run.ledgers[e].capacity())
                .max()
                .unwrap_or(0);
            return Err(Error::TooLarge {
                rollout: s.request.id,
                need: s.state.reservation(),
                largest,
            });
        }
        for (e, l) in run.ledgers.iter().enumerate() {
            run.stats.peak_reserved[e] = l.peak();
        }
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        run.stats.busy_micros = run.busy.iter().map(|&d| micros(d)).collect();
        run.stats.wall_micros = micros(started.elapsed());
        let rollouts = run
            .slots
            .into_iter()
            .map(|s| RolloutResult {
                id: s.request.id,
                response: s.context[s.request.prompt.len()..].to_vec(),
                model_mask: s.mask,
                turns: s.state.turns(),
                tool_calls: s.state.tool_calls(),
                finish: s.state.finish().unwrap_or(FinishReason::Stop),
                engines: s.engines,
            })
            .collect();
        Ok(DispatchReport {
            rollouts,
            stats: run.stats,
        })
    }
}

impl Run<'_> {
    /// Handles events, and load reports between them, until every rollout has ended.
    async fn drive(
        &mut self,
        reports: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, u64)>,
        polling: bool,
    ) -> Result<()> {
        loop {
            tokio::select! {
                // Reports first: one taken before a turn ended is applied while the turn still
                // counts as in flight, so the run's own use is never counted as another
                // client's (a report taken after it ended errs high, and is capped).
                biased;
                Some((engine, free)) = reports.recv(), if polling => {
                    self.on_load(engine, free);
                }
                joined = self.tasks.join_next() => {
                    let Some(joined) = joined else { return Ok(()) };
                    let event = joined.map_err(|e| Error::Engine {
                        engine: usize::MAX,
                        rollout: 0,
                        message: format!("task panicked: {e}"),
                    })?;
                    self.handle(event)?;
                }
            }
            self.admit();
        }
    }

    /// A load report: the engine's capacity for this run becomes the free tokens it reports
    /// plus what this run's turns in flight hold there (as [`Engine::kv_accounting`] counts
    /// them), within [`Engine::kv_capacity`], never below its floor (see
    /// [`Dispatcher::load_refresh`]) nor what keeps its reservations safe.
    fn on_load(&mut self, engine: usize, free: u64) {
        self.stats.load_reports += 1;
        if !self.alive[engine] {
            return;
        }
        let reserved = self.d.engines[engine].kv_accounting() == KvAccounting::Reserved;
        let ours: u64 = self
            .slots
            .iter()
            .filter(|s| s.generating && s.engine == Some(engine))
            .map(|s| s.context.len() as u64 + if reserved { s.asked } else { 0 })
            .sum();
        let want = self.d.engines[engine]
            .kv_capacity()
            .min(free.saturating_add(ours))
            .max(self.floor[engine]);
        // A report raises the capacity only when the one before agrees: one taken as a turn
        // ended, before the dispatcher saw it end, reads the turn twice as free (its own
        // report, and the run's book), and admitting on it would hold for a rollout's life.
        // Lowering takes one report.
        let target = self.last_report[engine].map_or(want, |last| last.min(want));
        self.last_report[engine] = Some(want);
        self.want[engine] = Some(target);
        self.apply_capacity(engine, target);
    }

    /// Sets `engine`'s capacity to `want`, as far as its reservations allow.
    fn apply_capacity(&mut self, engine: usize, want: u64) {
        let applied = self.ledgers[engine].set_capacity(want);
        self.views[engine].capacity = applied;
        let low = &mut self.stats.capacity_low[engine];
        *low = (*low).min(applied);
    }

    /// kv-aware: the allocation a rollout needs to go on (its whole claim, or its context
    /// plus one segment).
    fn target(&self, slot: usize) -> u64 {
        let s = &self.slots[slot];
        let claim = s.state.reservation();
        if self.d.segment == 0 {
            claim
        } else {
            (s.context.len() as u64 + self.d.segment).min(claim)
        }
    }

    /// Grows the reservations of bound rollouts that wait (kv-aware), then admits queued
    /// rollouts in order while the policy allows.
    fn admit(&mut self) {
        let total = self.slots.len();
        self.stats.peak_queue = self.stats.peak_queue.max(self.queue.len());
        if self.d.policy.reserves_kv() {
            // A capacity a report lowered less far than asked (the reservations then held
            // needed more) goes the rest of the way as they end.
            for e in 0..self.want.len() {
                if let Some(want) = self.want[e]
                    && self.ledgers[e].capacity() > want
                {
                    self.apply_capacity(e, want);
                }
            }
            for e in 0..self.pending.len() {
                let mut k = 0;
                while k < self.pending[e].len() {
                    let slot = self.pending[e][k];
                    let alloc = self.target(slot);
                    if self.ledgers[e].grow(slot as u64, alloc) {
                        self.pending[e].remove(k);
                        self.submit_turn(slot);
                    } else {
                        k += 1;
                    }
                }
            }
        }
        // Engines with rollouts waiting to grow take no new one; lost engines take none.
        let skip: Vec<bool> = self
            .pending
            .iter()
            .zip(&self.alive)
            .map(|(p, alive)| !p.is_empty() || !alive)
            .collect();
        while let Some(&slot) = self.queue.front() {
            let engine = match self.slots[slot].engine {
                // A resumed rollout under `release` is re-dispatched only under kv-aware;
                // the other policies keep it on its engine, as verl's sticky sessions do.
                Some(e) if !self.d.policy.reserves_kv() => e,
                _ if self.d.policy.reserves_kv() => {
                    let alloc = self.target(slot);
                    let claim = self.slots[slot].state.reservation();
                    match choose_ledger(&self.ledgers, &skip, alloc, claim) {
                        Some(e) => {
                            assert!(self.ledgers[e].admit(slot as u64, alloc, claim));
                            e
                        }
                        None => break,
                    }
                }
                _ => match self.pick(slot, total) {
                    Some(e) => e,
                    None => break,
                },
            };
            self.queue.pop_front();
            let s = &mut self.slots[slot];
            if s.engine.is_none() {
                self.views[engine].in_flight += 1;
            }
            s.reserved = self.d.policy.reserves_kv();
            s.engine = Some(engine);
            self.submit_turn(slot);
        }
    }

    /// `static` and `least-requests`: the policy's engine, or, when it is lost, the live
    /// engine with the fewest rollouts.
    fn pick(&self, slot: usize, total: usize) -> Option<usize> {
        let need = self.slots[slot].state.reservation();
        let e = choose_engine(self.d.policy, &self.views, slot, total, need)?;
        if self.alive[e] {
            return Some(e);
        }
        (0..self.views.len())
            .filter(|&i| self.alive[i])
            .min_by_key(|&i| (self.views[i].in_flight, i))
    }

    fn submit_turn(&mut self, slot: usize) {
        let limit = self.slots[slot].state.turn_limit() - self.slots[slot].partial;
        let asked = if self.slots[slot].reserved && self.d.segment > 0 {
            let engine = self.slots[slot].engine.expect("bound");
            let alloc = self.ledgers[engine]
                .allocation(slot as u64)
                .expect("a reserved rollout is in its engine's ledger");
            (alloc - self.slots[slot].context.len() as u64).min(limit)
        } else {
            limit
        };
        let s = &mut self.slots[slot];
        s.asked = asked;
        s.generating = true;
        let engine = s.engine.expect("a submitted turn has an engine");
        if s.partial == 0 {
            s.engines.push(engine);
        }
        let request = TurnRequest {
            rollout: s.request.id,
            turn: s.state.turns(),
            context: s.context.clone(),
            max_new_tokens: asked,
        };
        if self.generating[engine] == 0 {
            self.busy_since[engine] = Instant::now();
        }
        self.generating[engine] += 1;
        let e = Arc::clone(&self.d.engines[engine]);
        self.tasks.spawn(async move {
            let result = e.generate(request).await.map_err(|e| TurnError {
                unavailable: EngineUnavailable::is_in(e.as_ref()),
                message: e.to_string(),
            });
            Event::Turn {
                slot,
                engine,
                result,
            }
        });
    }

    /// Frees the slot's engine binding (and reservation) and tells the engine.
    fn unbind(&mut self, slot: usize, keep_sticky: bool) {
        let s = &mut self.slots[slot];
        let Some(engine) = s.engine else { return };
        if s.reserved {
            self.ledgers[engine].remove(slot as u64);
            s.reserved = false;
        }
        // Under kv-aware a released rollout is dispatched again from scratch; the other
        // policies keep it bound to its engine (sticky) until it ends.
        if !keep_sticky || self.d.policy.reserves_kv() {
            self.views[engine].in_flight -= 1;
            s.engine = None;
        }
        let e = Arc::clone(&self.d.engines[engine]);
        let id = s.request.id;
        // Fire and forget: release is advisory and must not hold up dispatch.
        tokio::spawn(async move { e.release(id).await });
    }

    fn handle(&mut self, event: Event) -> Result<()> {
        match event {
            Event::Turn {
                slot,
                engine,
                result,
            } => {
                self.generating[engine] -= 1;
                if self.generating[engine] == 0 {
                    self.busy[engine] += self.busy_since[engine].elapsed();
                }
                self.slots[slot].generating = false;
                let out = match result {
                    Ok(out) => out,
                    Err(e) if e.unavailable => {
                        // The engine is gone: nothing of this turn was kept, so the rollout
                        // goes on elsewhere from its last completed turn.
                        self.lose(engine, e.message)?;
                        let s = &mut self.slots[slot];
                        debug_assert!(s.engine.is_none(), "lose() unbound it");
                        if s.partial == 0 {
                            // The failed turn's engine entry is replaced by the next one.
                            s.engines.pop();
                        }
                        self.stats.redispatched += 1;
                        self.queue.push_front(slot);
                        return Ok(());
                    }
                    Err(e) => {
                        return Err(Error::Engine {
                            engine,
                            rollout: self.slots[slot].request.id,
                            message: e.message,
                        });
                    }
                };
                let s = &mut self.slots[slot];
                let kept = out.tokens.len().min(s.asked as usize);
                s.context.extend_from_slice(&out.tokens[..kept]);
                s.mask.extend(std::iter::repeat_n(true, kept));
                self.stats.tokens[engine] += kept as u64;
                self.stats.turns[engine] += 1;
                let generated = s.partial + kept as u64;
                if self.d.segment > 0
                    && out.tool_call.is_none()
                    && kept as u64 == s.asked
                    && generated < s.state.turn_limit()
                {
                    // A segment ended inside the turn: the engine keeps the context; the
                    // next segment goes once the reservation has grown (or, its engine
                    // lost meanwhile, once it is dispatched again).
                    s.partial = generated;
                    match s.engine {
                        Some(e) => self.pending[e].push_back(slot),
                        None => self.queue.push_front(slot),
                    }
                    return Ok(());
                }
                s.partial = 0;
                match s.state.on_turn_end(generated, out.tool_call.is_some()) {
                    Next::RunTool => {
                        let call = ToolCall {
                            rollout: s.request.id,
                            turn: s.state.turns() - 1,
                            payload: out.tool_call.unwrap_or_default(),
                        };
                        s.pending_tool = Some(call.payload.clone());
                        if self.d.retention == KvRetention::Release {
                            self.unbind(slot, true);
                        } else if s.reserved {
                            // Only the context stays on the engine during the call.
                            let context = s.context.len() as u64;
                            self.ledgers[engine].shrink(slot as u64, context);
                        }
                        self.tools_in_flight += 1;
                        self.stats.peak_tool_calls =
                            self.stats.peak_tool_calls.max(self.tools_in_flight);
                        let tools = Arc::clone(&self.d.tools);
                        self.tasks.spawn(async move {
                            let result = tools.run(call).await.map_err(|e| e.to_string());
                            Event::Tool { slot, result }
                        });
                    }
                    Next::Finish(_) => self.finish(slot),
                    Next::Generate => unreachable!("a turn end never asks for a turn"),
                }
            }
            Event::Tool { slot, result } => {
                self.tools_in_flight -= 1;
                let s = &mut self.slots[slot];
                s.pending_tool = None;
                let out = result.map_err(|message| Error::Tool {
                    rollout: s.request.id,
                    message,
                })?;
                let kept = out.tokens.len().min(s.state.turn_limit() as usize);
                s.context.extend_from_slice(&out.tokens[..kept]);
                s.mask.extend(std::iter::repeat_n(false, kept));
                match s.state.on_tool_result(out.tokens.len() as u64) {
                    Next::Generate => match s.engine {
                        Some(engine) if self.d.retention == KvRetention::Keep => {
                            if s.reserved {
                                // The reservation grows back before the next turn goes.
                                self.pending[engine].push_back(slot);
                            } else {
                                // The engine still holds the context.
                                self.submit_turn(slot);
                            }
                        }
                        // Released (resumed rollouts go ahead of new ones so started work
                        // finishes), or its engine was lost during the call.
                        _ => self.queue.push_front(slot),
                    },
                    Next::Finish(_) => self.finish(slot),
                    Next::RunTool => unreachable!("a tool result never asks for a tool"),
                }
            }
        }
        Ok(())
    }

    /// Marks `engine` lost (once) and unbinds every rollout bound to it: those waiting to grow
    /// go back to the queue at once, those whose turn or tool call is in flight when it
    /// returns. Fails when no engine is left.
    fn lose(&mut self, engine: usize, message: String) -> Result<()> {
        if self.alive[engine] {
            self.alive[engine] = false;
            self.lost.push((engine, message));
            self.stats.lost_engines.push(engine);
            for slot in 0..self.slots.len() {
                let s = &mut self.slots[slot];
                if s.done || s.engine != Some(engine) {
                    continue;
                }
                if s.reserved {
                    self.ledgers[engine].remove(slot as u64);
                    s.reserved = false;
                }
                s.engine = None;
                self.views[engine].in_flight -= 1;
            }
            let waiting: Vec<usize> = self.pending[engine].drain(..).collect();
            for slot in waiting.into_iter().rev() {
                self.queue.push_front(slot);
            }
        }
        if self.alive.iter().any(|&a| a) {
            Ok(())
        } else {
            Err(Error::EnginesLost {
                lost: std::mem::take(&mut self.lost),
            })
        }
    }

    fn finish(&mut self, slot: usize) {
        self.unbind(slot, false);
        self.slots[slot].done = true;
    }
}
