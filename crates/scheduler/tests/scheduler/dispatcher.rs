//! The tokio dispatcher against in-process fake engines and tools, in paused virtual time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rstar_scheduler::{
    BoxError, BoxFuture, DispatchPolicy, Dispatcher, Engine, EngineUnavailable, Error,
    FinishReason, KvAccounting, KvRetention, RolloutRequest, ToolCall, ToolOutput, ToolRunner,
    TurnOutput, TurnRequest,
};

/// The scripted behaviour of rollout `id`: turn `t` generates `10 + (id * 7 + t * 13) % 40`
/// tokens and calls a tool while `t < id % 4`.
fn script(id: u64, turn: u32) -> (usize, bool) {
    let n = 10 + ((id * 7 + turn as u64 * 13) % 40) as usize;
    (n, (turn as u64) < id % 4)
}

const TOOL_TOKENS: [u32; 3] = [9, 9, 9];

/// A fake engine: 1 ms of virtual time per generated token, KV held per rollout from its
/// first turn until `release`, peak recorded.
struct FakeEngine {
    capacity: u64,
    fail_on: Option<u64>,
    held: Mutex<HashMap<u64, u64>>,
    peak: Mutex<u64>,
    peak_rollouts: Mutex<usize>,
    released: Mutex<Vec<u64>>,
    /// KV tokens held by other clients (reported as not free).
    external: Mutex<u64>,
    /// When set, the engine reports each turn in flight as its context plus
    /// `max_new_tokens` (as `rstar serve` does) instead of the KV it holds.
    reserving: Option<Mutex<HashMap<u64, u64>>>,
    /// Per turn: when it started, and how many rollouts then held KV.
    admissions: Mutex<Vec<(tokio::time::Instant, usize)>>,
}

impl FakeEngine {
    fn new(capacity: u64) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            fail_on: None,
            held: Mutex::new(HashMap::new()),
            peak: Mutex::new(0),
            peak_rollouts: Mutex::new(0),
            released: Mutex::new(Vec::new()),
            external: Mutex::new(0),
            admissions: Mutex::new(Vec::new()),
            reserving: None,
        })
    }

    /// An engine that reports whole turns reserved ([`KvAccounting::Reserved`]).
    fn reserving(capacity: u64) -> Arc<Self> {
        let mut engine = Arc::into_inner(Self::new(capacity)).unwrap();
        engine.reserving = Some(Mutex::new(HashMap::new()));
        Arc::new(engine)
    }

    fn hold(&self, rollout: u64, tokens: u64) {
        let mut held = self.held.lock().unwrap();
        held.insert(rollout, tokens);
        let total = held.values().sum::<u64>();
        let mut peak = self.peak.lock().unwrap();
        *peak = (*peak).max(total);
        let mut peak = self.peak_rollouts.lock().unwrap();
        *peak = (*peak).max(held.len());
    }
}

impl Engine for FakeEngine {
    fn kv_capacity(&self) -> u64 {
        self.capacity
    }

    fn kv_accounting(&self) -> KvAccounting {
        match self.reserving {
            Some(_) => KvAccounting::Reserved,
            None => KvAccounting::Tokens,
        }
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        Box::pin(async move {
            let used: u64 = match &self.reserving {
                Some(turns) => turns.lock().unwrap().values().sum(),
                None => self.held.lock().unwrap().values().sum(),
            };
            let external = *self.external.lock().unwrap();
            Ok(self.capacity.saturating_sub(used + external))
        })
    }

    fn generate(&self, request: TurnRequest) -> BoxFuture<'_, Result<TurnOutput, BoxError>> {
        Box::pin(async move {
            if self.fail_on == Some(request.rollout) {
                return Err("out of memory".into());
            }
            let (n, tool) = script(request.rollout, request.turn);
            let n = n.min(request.max_new_tokens as usize);
            // The whole turn's KV (context plus new tokens) is held while it generates.
            self.hold(request.rollout, (request.context.len() + n) as u64);
            let holding = self.held.lock().unwrap().len();
            let now = tokio::time::Instant::now();
            self.admissions.lock().unwrap().push((now, holding));
            if let Some(turns) = &self.reserving {
                let claim = request.context.len() as u64 + request.max_new_tokens;
                turns.lock().unwrap().insert(request.rollout, claim);
            }
            tokio::time::sleep(Duration::from_millis(n as u64)).await;
            if let Some(turns) = &self.reserving {
                turns.lock().unwrap().remove(&request.rollout);
            }
            Ok(TurnOutput {
                tokens: vec![request.rollout as u32; n],
                tool_call: tool.then(|| format!("print({})", request.turn)),
            })
        })
    }

    fn release(&self, rollout: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.held.lock().unwrap().remove(&rollout);
            self.released.lock().unwrap().push(rollout);
        })
    }
}

/// A fake sandbox: 300 ms per call, three tokens back, concurrency recorded.
#[derive(Default)]
struct FakeTools {
    now: Mutex<usize>,
    peak: Mutex<usize>,
    calls: Mutex<Vec<ToolCall>>,
}

impl ToolRunner for FakeTools {
    fn run(&self, call: ToolCall) -> BoxFuture<'_, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            {
                let mut now = self.now.lock().unwrap();
                *now += 1;
                let mut peak = self.peak.lock().unwrap();
                *peak = (*peak).max(*now);
            }
            self.calls.lock().unwrap().push(call);
            tokio::time::sleep(Duration::from_millis(300)).await;
            *self.now.lock().unwrap() -= 1;
            Ok(ToolOutput {
                tokens: TOOL_TOKENS.to_vec(),
            })
        })
    }
}

fn requests(n: u64, budget: u64) -> Vec<RolloutRequest> {
    (0..n)
        .map(|id| RolloutRequest {
            id,
            prompt: vec![1; 20],
            max_response_tokens: budget,
            max_turns: 8,
        })
        .collect()
}

/// The response the script produces, written out independently of the dispatcher.
fn expected_response(id: u64) -> (Vec<u32>, Vec<bool>, u32) {
    let (mut tokens, mut mask) = (Vec::new(), Vec::new());
    let mut turn = 0;
    loop {
        let (n, tool) = script(id, turn);
        tokens.extend(std::iter::repeat_n(id as u32, n));
        mask.extend(std::iter::repeat_n(true, n));
        turn += 1;
        if !tool {
            return (tokens, mask, turn);
        }
        tokens.extend_from_slice(&TOOL_TOKENS);
        mask.extend([false; 3]);
    }
}

async fn run_with(
    policy: DispatchPolicy,
    retention: KvRetention,
    capacity: u64,
    n: u64,
) -> (
    rstar_scheduler::DispatchReport,
    Vec<Arc<FakeEngine>>,
    Arc<FakeTools>,
) {
    let engines: Vec<Arc<FakeEngine>> = (0..3).map(|_| FakeEngine::new(capacity)).collect();
    let tools = Arc::new(FakeTools::default());
    let dyn_engines: Vec<Arc<dyn Engine>> = engines
        .iter()
        .map(|e| Arc::clone(e) as Arc<dyn Engine>)
        .collect();
    let report = Dispatcher::new(dyn_engines, Arc::clone(&tools) as Arc<dyn ToolRunner>)
        .policy(policy)
        .retention(retention)
        .run(requests(n, 1000))
        .await
        .unwrap();
    (report, engines, tools)
}

#[tokio::test(start_paused = true)]
async fn every_rollout_completes_once_with_the_scripted_tokens() {
    for policy in DispatchPolicy::ALL {
        for retention in [KvRetention::Keep, KvRetention::Release] {
            let (report, engines, tools) = run_with(policy, retention, 4000, 24).await;
            assert_eq!(report.rollouts.len(), 24);
            let mut tool_calls = 0;
            for (i, r) in report.rollouts.iter().enumerate() {
                assert_eq!(r.id, i as u64, "results in request order");
                let (tokens, mask, turns) = expected_response(r.id);
                assert_eq!(r.response, tokens, "{policy} {retention:?} rollout {i}");
                assert_eq!(r.model_mask, mask);
                assert_eq!(r.turns, turns);
                assert_eq!(r.tool_calls, turns - 1);
                assert_eq!(r.finish, FinishReason::Stop);
                assert_eq!(r.engines.len(), turns as usize);
                if retention == KvRetention::Keep || policy != DispatchPolicy::KvAware {
                    assert!(r.engines.iter().all(|&e| e == r.engines[0]), "sticky");
                }
                tool_calls += r.tool_calls as usize;
            }
            assert_eq!(tools.calls.lock().unwrap().len(), tool_calls);
            // Tool calls overlap: they run the moment a turn ends, not one by one.
            assert!(*tools.peak.lock().unwrap() > 1);
            assert_eq!(report.stats.peak_tool_calls, *tools.peak.lock().unwrap());
            // Let the fire-and-forget releases run, then every rollout was released.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let released: usize = engines
                .iter()
                .map(|e| e.released.lock().unwrap().len())
                .sum();
            assert!(released >= 24, "{policy} {retention:?}: {released}");
            assert!(engines.iter().all(|e| e.held.lock().unwrap().is_empty()));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn kv_aware_never_overfills_an_engine_but_static_does() {
    // Each reservation is 20 + 1000 tokens; 2100 holds two of them.
    let (report, engines, _) = run_with(DispatchPolicy::KvAware, KvRetention::Keep, 2100, 30).await;
    for (e, engine) in engines.iter().enumerate() {
        assert!(*engine.peak.lock().unwrap() <= 2100);
        // Rollouts waiting for a tool hold only their context, so more than two may be
        // bound at once; the tokens they hold never exceed the capacity.
        assert!(report.stats.peak_reserved[e] <= 2100);
        assert!(report.stats.peak_reserved[e] >= 2040, "two at the start");
    }
    assert!(report.stats.peak_queue > 0, "rollouts waited for room");
    let (_, engines, _) = run_with(DispatchPolicy::Static, KvRetention::Keep, 2100, 30).await;
    // Static hands each engine its whole block of ten at once, whatever the budget: the
    // worst case (10 x 1020 tokens) is five times what the engine holds.
    let peak = engines
        .iter()
        .map(|e| *e.peak_rollouts.lock().unwrap())
        .max()
        .unwrap();
    assert_eq!(peak, 10, "static admits everything");
}

#[tokio::test(start_paused = true)]
async fn budget_truncates_and_oversized_reservations_are_refused() {
    let engines: Vec<Arc<dyn Engine>> = vec![FakeEngine::new(10_000)];
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let d = Dispatcher::new(engines.clone(), Arc::clone(&tools));
    // Rollout 3 makes three tool calls; a 30-token budget cuts it in the first turn.
    let report = d.run(requests(4, 30).split_off(3)).await.unwrap();
    let r = &report.rollouts[0];
    assert_eq!(r.response.len(), 30);
    assert_eq!(r.finish, FinishReason::Length);
    let err = d.run(requests(1, 20_000)).await.unwrap_err();
    // The largest capacity is what the engine reports free, at most its 10_000 tokens.
    assert!(
        matches!(err, Error::TooLarge { need: 20_020, largest, .. } if largest <= 10_000),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn engine_failures_surface_with_the_rollout() {
    let engine = Arc::new(FakeEngine {
        fail_on: Some(2),
        ..Arc::into_inner(FakeEngine::new(10_000)).unwrap()
    });
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let err = Dispatcher::new(vec![engine as Arc<dyn Engine>], tools)
        .policy(DispatchPolicy::LeastRequests)
        .run(requests(4, 500))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("rollout 2") && text.contains("out of memory"),
        "{text}"
    );
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    assert!(
        Dispatcher::new(Vec::new(), tools)
            .run(requests(1, 10))
            .await
            .is_err()
    );
}

/// A fake engine that honours `max_new_tokens` and continues a cut turn: turn `t` of
/// rollout `id` is `script(id, t)` tokens long whatever the segments, and KV held per
/// rollout is recorded as in [`FakeEngine`].
struct SegmentEngine {
    inner: Arc<FakeEngine>,
    done: Mutex<HashMap<(u64, u32), usize>>,
    requests: Mutex<usize>,
}

impl Engine for SegmentEngine {
    fn kv_capacity(&self) -> u64 {
        self.inner.capacity
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        self.inner.free_kv_tokens()
    }

    fn generate(&self, request: TurnRequest) -> BoxFuture<'_, Result<TurnOutput, BoxError>> {
        Box::pin(async move {
            *self.requests.lock().unwrap() += 1;
            let (len, tool) = script(request.rollout, request.turn);
            let key = (request.rollout, request.turn);
            let before = *self.done.lock().unwrap().get(&key).unwrap_or(&0);
            let n = (len - before).min(request.max_new_tokens as usize);
            self.done.lock().unwrap().insert(key, before + n);
            self.inner
                .hold(request.rollout, (request.context.len() + n) as u64);
            tokio::time::sleep(Duration::from_millis(n as u64)).await;
            let ends = before + n == len;
            Ok(TurnOutput {
                tokens: vec![request.rollout as u32; n],
                tool_call: (ends && tool).then(|| format!("print({})", request.turn)),
            })
        })
    }

    fn release(&self, rollout: u64) -> BoxFuture<'_, ()> {
        self.inner.release(rollout)
    }
}

#[tokio::test(start_paused = true)]
async fn segments_share_an_engine_without_overfilling_it() {
    let inner: Vec<Arc<FakeEngine>> = (0..3).map(|_| FakeEngine::new(2100)).collect();
    let engines: Vec<Arc<SegmentEngine>> = inner
        .iter()
        .map(|e| {
            Arc::new(SegmentEngine {
                inner: Arc::clone(e),
                done: Mutex::new(HashMap::new()),
                requests: Mutex::new(0),
            })
        })
        .collect();
    let dyn_engines: Vec<Arc<dyn Engine>> = engines
        .iter()
        .map(|e| Arc::clone(e) as Arc<dyn Engine>)
        .collect();
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let report = Dispatcher::new(dyn_engines, tools)
        .segment_tokens(16)
        .run(requests(30, 1000))
        .await
        .unwrap();
    for r in &report.rollouts {
        let (tokens, mask, turns) = expected_response(r.id);
        assert_eq!(r.response, tokens, "rollout {}", r.id);
        assert_eq!(r.model_mask, mask);
        assert_eq!(r.turns, turns);
        assert_eq!(r.engines.len(), turns as usize, "one entry per turn");
        assert_eq!(r.finish, FinishReason::Stop);
    }
    // Turns are 10-49 tokens, so many take two to four segments of 16.
    let requests: usize = engines.iter().map(|e| *e.requests.lock().unwrap()).sum();
    let turns: usize = report.rollouts.iter().map(|r| r.turns as usize).sum();
    assert!(requests > turns, "{requests} requests for {turns} turns");
    for (e, engine) in inner.iter().enumerate() {
        assert!(*engine.peak.lock().unwrap() <= 2100);
        assert!(report.stats.peak_reserved[e] <= 2100);
        // Whole-turn reservations (1020 each) allow three rollouts at most; 16-token
        // segments let all ten of the engine's share in.
        assert!(*engine.peak_rollouts.lock().unwrap() > 3);
    }
}

/// An engine that answers like [`FakeEngine`] for its first `answers` turns and is then gone:
/// every later turn (and `free_kv_tokens`) fails with [`EngineUnavailable`], after 5 ms.
struct DyingEngine {
    inner: Arc<FakeEngine>,
    answers: Mutex<usize>,
    refused: Mutex<usize>,
}

impl DyingEngine {
    fn new(capacity: u64, answers: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: FakeEngine::new(capacity),
            answers: Mutex::new(answers),
            refused: Mutex::new(0),
        })
    }

    fn gone(&self) -> bool {
        *self.answers.lock().unwrap() == 0
    }
}

impl Engine for DyingEngine {
    fn kv_capacity(&self) -> u64 {
        self.inner.capacity
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        Box::pin(async move {
            if self.gone() {
                return Err(Box::new(EngineUnavailable("connection refused".into())) as BoxError);
            }
            self.inner.free_kv_tokens().await
        })
    }

    fn generate(&self, request: TurnRequest) -> BoxFuture<'_, Result<TurnOutput, BoxError>> {
        Box::pin(async move {
            let live = {
                let mut left = self.answers.lock().unwrap();
                let live = *left > 0;
                *left = left.saturating_sub(1);
                live
            };
            if !live {
                *self.refused.lock().unwrap() += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                return Err(Box::new(EngineUnavailable("connection refused".into())) as BoxError);
            }
            self.inner.generate(request).await
        })
    }

    fn release(&self, rollout: u64) -> BoxFuture<'_, ()> {
        self.inner.release(rollout)
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_engine_loses_no_rollout_and_writes_no_turn_twice() {
    for policy in DispatchPolicy::ALL {
        for retention in [KvRetention::Keep, KvRetention::Release] {
            // Engine 1 answers six turns, then every request to it fails.
            let engines = [
                DyingEngine::new(4000, usize::MAX),
                DyingEngine::new(4000, 6),
                DyingEngine::new(4000, usize::MAX),
            ];
            let dyn_engines: Vec<Arc<dyn Engine>> = engines
                .iter()
                .map(|e| Arc::clone(e) as Arc<dyn Engine>)
                .collect();
            let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
            let report = Dispatcher::new(dyn_engines, tools)
                .policy(policy)
                .retention(retention)
                .run(requests(24, 1000))
                .await
                .unwrap_or_else(|e| panic!("{policy} {retention:?}: {e}"));
            let label = format!("{policy} {retention:?}");
            for r in &report.rollouts {
                let (tokens, mask, turns) = expected_response(r.id);
                assert_eq!(r.response, tokens, "{label}: rollout {}", r.id);
                assert_eq!(r.model_mask, mask, "{label}");
                assert_eq!(r.turns, turns, "{label}");
                assert_eq!(
                    r.engines.len(),
                    turns as usize,
                    "{label}: one engine per turn"
                );
            }
            assert_eq!(report.stats.lost_engines, vec![1], "{label}");
            let refused = *engines[1].refused.lock().unwrap() as u64;
            assert!(refused > 0, "{label}: the engine was asked after it died");
            assert_eq!(report.stats.redispatched, refused, "{label}");
            // Engine 1 wrote its six turns and no other; the others wrote the rest.
            assert_eq!(report.stats.turns[1], 6, "{label}");
            let written: u64 = report.stats.turns.iter().sum();
            let turns: u64 = report.rollouts.iter().map(|r| u64::from(r.turns)).sum();
            assert_eq!(written, turns, "{label}: every turn written once");
            let per_engine: Vec<usize> = (0..3)
                .map(|e| {
                    report
                        .rollouts
                        .iter()
                        .flat_map(|r| &r.engines)
                        .filter(|&&x| x == e)
                        .count()
                })
                .collect();
            assert_eq!(per_engine[1], 6, "{label}: {per_engine:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn losing_every_engine_is_an_error_naming_them() {
    let engines: Vec<Arc<dyn Engine>> = vec![
        DyingEngine::new(4000, 3) as Arc<dyn Engine>,
        DyingEngine::new(4000, 2) as Arc<dyn Engine>,
    ];
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let err = Dispatcher::new(engines, tools)
        .run(requests(12, 1000))
        .await
        .unwrap_err();
    match &err {
        Error::EnginesLost { lost } => {
            let mut which: Vec<usize> = lost.iter().map(|(e, _)| *e).collect();
            which.sort_unstable();
            assert_eq!(which, vec![0, 1]);
        }
        other => panic!("expected EnginesLost, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("every engine is gone") && text.contains("connection refused"),
        "{text}"
    );
    // An engine gone before the run starts is skipped; a run with none left fails at once.
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let report = Dispatcher::new(
        vec![
            DyingEngine::new(4000, 0) as Arc<dyn Engine>,
            DyingEngine::new(4000, usize::MAX) as Arc<dyn Engine>,
        ],
        Arc::clone(&tools),
    )
    .run(requests(4, 1000))
    .await
    .unwrap();
    assert_eq!(report.stats.lost_engines, vec![0]);
    assert!(
        report
            .rollouts
            .iter()
            .all(|r| r.engines.iter().all(|&e| e == 1))
    );
    let err = Dispatcher::new(vec![DyingEngine::new(4000, 0) as Arc<dyn Engine>], tools)
        .run(requests(1, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EnginesLost { .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn busy_time_and_tokens_are_counted_per_engine() {
    // One engine, no tools (rollout 0 of the script makes no call, 4 and 8 neither): the
    // engine is busy from the first turn to the last, so it is never idle.
    let engine = FakeEngine::new(10_000);
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let reqs: Vec<RolloutRequest> = requests(9, 1000)
        .into_iter()
        .filter(|r| r.id % 4 == 0)
        .collect();
    let report = Dispatcher::new(vec![Arc::clone(&engine) as Arc<dyn Engine>], tools)
        .policy(DispatchPolicy::LeastRequests)
        .run(reqs)
        .await
        .unwrap();
    let tokens: u64 = report
        .rollouts
        .iter()
        .map(|r| r.response.len() as u64)
        .sum();
    assert_eq!(report.stats.tokens, vec![tokens]);
    assert_eq!(report.stats.turns, vec![3]);
    // The three turns run side by side; the longest (script: 10 + (id*7 % 40) tokens at
    // 1 ms each) sets the wall time.
    let longest = [0u64, 4, 8]
        .iter()
        .map(|&id| script(id, 0).0 as u64)
        .max()
        .unwrap();
    assert_eq!(report.stats.wall_micros, longest * 1000);
    assert_eq!(report.stats.busy_micros, vec![longest * 1000]);
    assert_eq!(report.stats.idle_secs(), vec![0.0]);
    // With tools, engines idle while calls run: busy < wall on every engine.
    let (report, _, _) = run_with(DispatchPolicy::Static, KvRetention::Keep, 4000, 3).await;
    for (e, &busy) in report.stats.busy_micros.iter().enumerate() {
        assert!(busy < report.stats.wall_micros, "engine {e}");
    }
    let idle = report.stats.idle_secs();
    assert!(idle.iter().all(|&s| s > 0.0), "{idle:?}");
}

/// Runs 60 rollouts (reservations of 1020 tokens) on two engines of 2100 tokens under
/// kv-aware with their KV released during tool calls (so every turn is admitted again, and
/// only generating rollouts hold KV), while other clients take 1000 tokens of engine 0 from
/// `from` to `to` ms. Returns the report and, for engine 0, the most rollouts holding KV when
/// a turn started there during the external load (from `from` + 20 ms, or 0) and after it
/// (from `to` + 20 ms).
async fn external_load(
    refresh: Duration,
    reserving: bool,
    (from, to): (u64, u64),
) -> (rstar_scheduler::DispatchReport, usize, usize) {
    let engine = if reserving {
        FakeEngine::reserving
    } else {
        FakeEngine::new
    };
    let engines: Vec<Arc<FakeEngine>> = (0..2).map(|_| engine(2100)).collect();
    let tools: Arc<dyn ToolRunner> = Arc::new(FakeTools::default());
    let start = tokio::time::Instant::now();
    let loaded = Arc::clone(&engines[0]);
    if from == 0 {
        *loaded.external.lock().unwrap() = 1000;
    }
    let other_client = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(from)).await;
        *loaded.external.lock().unwrap() = 1000;
        tokio::time::sleep(Duration::from_millis(to - from)).await;
        *loaded.external.lock().unwrap() = 0;
    });
    let report = Dispatcher::new(
        engines
            .iter()
            .map(|e| Arc::clone(e) as Arc<dyn Engine>)
            .collect(),
        tools,
    )
    .policy(DispatchPolicy::KvAware)
    .retention(KvRetention::Release)
    .load_refresh(refresh)
    .run(requests(60, 1000))
    .await
    .unwrap();
    other_client.await.unwrap();
    let most = |from: u64, to: u64| {
        engines[0]
            .admissions
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| {
                let ms = at.duration_since(start).as_millis() as u64;
                (from..to).contains(&ms)
            })
            .map(|&(_, holding)| holding)
            .max()
            .unwrap_or(0)
    };
    let settle = if from == 0 { 0 } else { from + 20 };
    (report, most(settle, to), most(to + 20, u64::MAX))
}

#[tokio::test(start_paused = true)]
async fn load_reported_during_the_run_moves_rollouts_off_a_loaded_engine() {
    let (report, during, after) = external_load(Duration::from_millis(10), false, (100, 400)).await;
    for (i, r) in report.rollouts.iter().enumerate() {
        let (tokens, _, _) = expected_response(i as u64);
        assert_eq!(r.response, tokens, "rollout {i}");
    }
    // 1000 of engine 0's 2100 tokens are taken: one 1020-token reservation fits, not two.
    assert_eq!(during, 1, "engine 0 admitted a second rollout while loaded");
    assert_eq!(after, 2, "engine 0 takes two again once the load is gone");
    assert!(
        report.stats.load_reports > 100,
        "{}",
        report.stats.load_reports
    );
    // Reported free + this run's context on it: at most 1100, never below one reservation.
    let low = report.stats.capacity_low[0];
    assert!((1020..=1100).contains(&low), "{low}");
    // Tokens of turns in flight, and reports taken just before a rollout left, count as
    // taken until the next report, so engine 1 reads below its 2100 now and then; but far
    // above the loaded engine.
    let lows = &report.stats.capacity_low;
    assert!(lows[1] > lows[0] + 500, "{lows:?}");

    // Read only at the start, the load taken later is reserved twice.
    let (report, during, _) = external_load(Duration::ZERO, false, (100, 400)).await;
    assert_eq!(during, 2);
    assert_eq!(report.stats.load_reports, 0);
    assert_eq!(report.stats.capacity_low, vec![2100, 2100]);

    // An engine that reports whole turns reserved (context + max_new_tokens, as rstar serve
    // does), with the other client's 1000 tokens there from the start until 300 ms: the run's
    // own turns are taken off exactly, so the unloaded engine never reads below its capacity,
    // and the loaded one takes a second rollout once the tokens are given back. Read only at
    // the start, it never does.
    let (report, during, after) = external_load(Duration::from_millis(10), true, (0, 300)).await;
    assert_eq!((during, after), (1, 2));
    assert_eq!(report.stats.capacity_low, vec![1100, 2100]);
    let (_, during, after) = external_load(Duration::ZERO, true, (0, 300)).await;
    assert_eq!((during, after), (1, 1));
}
