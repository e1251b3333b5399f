//! The event loop: engines, tools and the dispatcher in virtual time.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use super::report::PolicyReport;
use super::{SimConfig, Workload};
use crate::ledger::{KvLedger, choose_ledger};
use crate::policy::{DispatchPolicy, EngineView, KvRetention, choose_engine};
use crate::rollout::{Next, RolloutState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An engine's planned steps end (stale if the version moved on).
    Wake { engine: usize, version: u64 },
    /// A rollout's tool call returns.
    ToolDone { seq: usize },
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    order: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // Reversed, so the max-heap pops the earliest event; ties go to the first scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.order.cmp(&self.order))
    }
}

#[derive(Debug, Clone)]
struct Seq {
    state: RolloutState,
    turn: usize,
    /// Tokens generated so far in the current turn.
    turn_done: u64,
    /// KV tokens resident on its engine.
    kv: u64,
    engine: Option<usize>,
    reserved: bool,
    running: bool,
    done: bool,
    /// Tokens the current segment may still generate (`u64::MAX`: the whole turn).
    seg_left: u64,
}

impl Seq {
    fn context(&self) -> u64 {
        self.state.context_tokens() + self.turn_done
    }
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    steps: u64,
    end: f64,
    prefill_s: f64,
    a: f64,
    c: f64,
}

impl Plan {
    /// Seconds for the first `j` steps (j >= 1): prefill, then steps whose attention cost
    /// grows by `c` per step as every running sequence adds a token.
    fn time(&self, j: u64) -> f64 {
        let j = j as f64;
        self.prefill_s + j * self.a + self.c * j * (j - 1.0) / 2.0
    }
}

#[derive(Debug, Default)]
struct Eng {
    clock: f64,
    running: Vec<usize>,
    waiting: VecDeque<usize>,
    /// Resident sequences that are not running (tool in flight, or queued with their cache).
    held: Vec<usize>,
    used: u64,
    pending_prefill: u64,
    plan: Option<Plan>,
    version: u64,
    busy_s: f64,
    /// Busy intervals and their batch sizes.
    busy: Vec<(f64, f64, u64)>,
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    work: &'a Workload,
    policy: DispatchPolicy,
    seqs: Vec<Seq>,
    engines: Vec<Eng>,
    views: Vec<EngineView>,
    /// kv-aware: the reservations on each engine.
    ledgers: Vec<KvLedger>,
    /// kv-aware: rollouts bound to each engine that wait for their reservation to grow
    /// (after a tool call or at the end of a segment), in arrival order.
    pending: Vec<VecDeque<usize>>,
    /// kv-aware: tokens per segment (0: whole turns).
    segment: u64,
    /// kv-aware: per engine, the ledger version and pending length at the last scan that
    /// granted nothing (nothing can change before one of them does).
    scanned: Vec<(u64, usize)>,
    /// kv-aware: the queue front and the sum of ledger versions when it last failed to be
    /// admitted.
    refused: Option<(usize, u64)>,
    queue: VecDeque<usize>,
    heap: BinaryHeap<Event>,
    order: u64,
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    // Metrics.
    now: f64,
    finished: usize,
    makespan: f64,
    generated: u64,
    steps: u64,
    prefilled: u64,
    recomputed: u64,
    evictions: u64,
    peak_kv: f64,
    peak_reserved: f64,
    tools_now: usize,
    tools_peak: usize,
    tools_area: f64,
    tools_last: f64,
    tool_calls: u64,
}

/// Runs one policy over a workload; the config has been validated.
pub(super) fn run(cfg: &SimConfig, work: &Workload, policy: DispatchPolicy) -> PolicyReport {
    let seqs = work
        .rollouts
        .iter()
        .map(|r| Seq {
            state: RolloutState::new(r.prompt_tokens, work.max_response_tokens, work.max_turns),
            turn: 0,
            turn_done: 0,
            kv: 0,
            engine: None,
            reserved: false,
            running: false,
            done: false,
            seg_left: u64::MAX,
        })
        .collect();
    let n = cfg.engines;
    let mut sim = Sim {
        cfg,
        work,
        policy,
        seqs,
        engines: (0..n).map(|_| Eng::default()).collect(),
        views: vec![
            EngineView {
                capacity: cfg.engine.kv_capacity_tokens,
                reserved: 0,
                in_flight: 0,
            };
            n
        ],
        ledgers: vec![KvLedger::new(cfg.engine.kv_capacity_tokens); n],
        pending: vec![VecDeque::new(); n],
        segment: cfg.kv_segment_tokens,
        scanned: vec![(u64::MAX, 0); n],
        refused: None,
        queue: VecDeque::new(),
        heap: BinaryHeap::new(),
        order: 0,
        dirty: Vec::new(),
        is_dirty: vec![false; n],
        now: 0.0,
        finished: 0,
        makespan: 0.0,
        generated: 0,
        steps: 0,
        prefilled: 0,
        recomputed: 0,
        evictions: 0,
        peak_kv: 0.0,
        peak_reserved: 0.0,
        tools_now: 0,
        tools_peak: 0,
        tools_area: 0.0,
        tools_last: 0.0,
        tool_calls: 0,
    };
    sim.start();
    while let Some(event) = sim.heap.pop() {
        debug_assert!(event.time >= sim.now - 1e-9, "time went backwards");
        sim.now = event.time;
        match event.kind {
            Kind::Wake { engine, version } => {
                if sim.engines[engine].version == version {
                    sim.complete_plan(engine);
                }
            }
            Kind::ToolDone { seq } => sim.tool_done(seq),
        }
        sim.dispatch_queue();
        sim.process_dirty();
    }
    assert_eq!(sim.finished, work.rollouts.len(), "every rollout finishes");
    sim.report()
}

impl Sim<'_> {
    fn push(&mut self, time: f64, kind: Kind) {
        self.order += 1;
        self.heap.push(Event {
            time,
            order: self.order,
            kind,
        });
    }

    fn mark(&mut self, e: usize) {
        if !self.is_dirty[e] {
            self.is_dirty[e] = true;
            self.dirty.push(e);
        }
    }

    fn start(&mut self) {
        let total = self.seqs.len();
        if self.policy.reserves_kv() {
            self.queue = (0..total).collect();
            self.dispatch_queue();
        } else {
            for i in 0..total {
                let need = self.seqs[i].state.reservation();
                let e = choose_engine(self.policy, &self.views, i, total, need)
                    .expect("static and least-requests always choose");
                self.bind(i, e);
            }
        }
        self.process_dirty();
    }

    /// Binds a rollout to an engine and queues its turn there. Under kv-aware the caller
    /// has admitted it to the engine's ledger.
    fn bind(&mut self, i: usize, e: usize) {
        self.views[e].in_flight += 1;
        let s = &mut self.seqs[i];
        s.engine = Some(e);
        s.reserved = self.policy.reserves_kv();
        self.enqueue(i, e);
    }

    /// Queues a bound rollout's turn (or segment) on its engine.
    fn enqueue(&mut self, i: usize, e: usize) {
        if self.policy.reserves_kv() {
            let l = &self.ledgers[e];
            self.peak_reserved = self
                .peak_reserved
                .max(l.reserved() as f64 / l.capacity() as f64);
        }
        self.engines[e].waiting.push_back(i);
        self.interrupt(e);
        self.mark(e);
    }

    /// The allocation a kv-aware rollout needs to go on: its whole claim, or its context
    /// plus one segment.
    fn target(&self, i: usize) -> u64 {
        let s = &self.seqs[i];
        let claim = s.state.reservation();
        if self.segment == 0 {
            claim
        } else {
            (s.context() + self.segment).min(claim)
        }
    }

    /// Sets the segment a kv-aware rollout may generate once it holds `alloc` tokens.
    fn start_segment(&mut self, i: usize, alloc: u64) {
        let s = &mut self.seqs[i];
        s.seg_left = if self.segment == 0 {
            u64::MAX
        } else {
            alloc - s.context()
        };
    }

    /// Drops the dispatcher's binding of a rollout (its reservation and in-flight count).
    fn unbind(&mut self, i: usize) {
        let s = &mut self.seqs[i];
        let e = s.engine.take().expect("bound");
        self.views[e].in_flight -= 1;
        if s.reserved {
            s.reserved = false;
            self.ledgers[e].remove(i as u64);
        }
    }

    /// kv-aware: grows the reservations of bound rollouts that wait (in arrival order, any
    /// that the banker's check allows), then admits queued rollouts while an engine without
    /// waiting rollouts of its own can take them.
    fn dispatch_queue(&mut self) {
        if !self.policy.reserves_kv() {
            return;
        }
        for e in 0..self.engines.len() {
            if self.pending[e].is_empty()
                || self.scanned[e] == (self.ledgers[e].version(), self.pending[e].len())
            {
                continue;
            }
            let mut k = 0;
            while k < self.pending[e].len() {
                let i = self.pending[e][k];
                let alloc = self.target(i);
                if self.ledgers[e].grow(i as u64, alloc) {
                    self.pending[e].remove(k);
                    self.start_segment(i, alloc);
                    self.enqueue(i, e);
                } else {
                    k += 1;
                }
            }
            self.scanned[e] = (self.ledgers[e].version(), self.pending[e].len());
        }
        let skip: Vec<bool> = self.pending.iter().map(|p| !p.is_empty()).collect();
        while let Some(&i) = self.queue.front() {
            let versions: u64 = self.ledgers.iter().map(KvLedger::version).sum();
            if self.refused == Some((i, versions)) {
                break;
            }
            let (alloc, claim) = (self.target(i), self.seqs[i].state.reservation());
            let Some(e) = choose_ledger(&self.ledgers, &skip, alloc, claim) else {
                self.refused = Some((i, versions));
                break;
            };
            self.queue.pop_front();
            assert!(self.ledgers[e].admit(i as u64, alloc, claim));
            self.start_segment(i, alloc);
            self.bind(i, e);
        }
    }

    fn process_dirty(&mut self) {
        while let Some(e) = self.dirty.pop() {
            self.is_dirty[e] = false;
            self.replan(e);
        }
    }

    /// Brings engine `e` to the current time before something changes on it: the steps that
    /// have started complete, and the rest of its plan is dropped.
    fn interrupt(&mut self, e: usize) {
        let now = self.now;
        let eng = &mut self.engines[e];
        let Some(plan) = eng.plan else {
            eng.clock = eng.clock.max(now);
            return;
        };
        if now >= plan.end {
            // Its wake event is due at this very time and will run the whole plan.
            return;
        }
        let elapsed = now - eng.clock;
        let j = if elapsed <= 0.0 {
            0
        } else {
            // The smallest j >= 1 with time(j) >= elapsed; time() increases with j.
            let (mut lo, mut hi) = (1, plan.steps);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if plan.time(mid) >= elapsed {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        };
        if j == plan.steps {
            return;
        }
        let eng = &mut self.engines[e];
        eng.plan = None;
        eng.version += 1;
        if j > 0 {
            self.apply_steps(e, j, plan.time(j));
        }
    }

    fn apply_steps(&mut self, e: usize, j: u64, dt: f64) {
        let eng = &mut self.engines[e];
        for &i in &eng.running {
            let s = &mut self.seqs[i];
            s.turn_done += j;
            s.kv += j;
            if s.seg_left != u64::MAX {
                s.seg_left -= j;
            }
        }
        let b = eng.running.len() as u64;
        eng.used += b * j;
        eng.pending_prefill = 0;
        eng.busy.push((eng.clock, eng.clock + dt, b));
        eng.busy_s += dt;
        eng.clock += dt;
        self.generated += b * j;
        self.steps += j;
        let cap = self.cfg.engine.kv_capacity_tokens;
        assert!(
            eng.used <= cap,
            "engine {e} holds {} > {cap} tokens",
            eng.used
        );
        self.peak_kv = self.peak_kv.max(eng.used as f64 / cap as f64);
    }

    fn complete_plan(&mut self, e: usize) {
        let plan = self.engines[e].plan.take().expect("a wake has a plan");
        self.engines[e].version += 1;
        self.apply_steps(e, plan.steps, plan.time(plan.steps));
        // Turn ends, in admission order so the run is deterministic.
        let running = std::mem::take(&mut self.engines[e].running);
        let mut still = Vec::with_capacity(running.len());
        let mut ended = Vec::new();
        let mut paused = Vec::new();
        for i in running {
            let s = &self.seqs[i];
            if s.turn_done >= self.work.rollouts[i].turns[s.turn].generated {
                ended.push(i);
            } else if s.seg_left == 0 {
                paused.push(i);
            } else {
                still.push(i);
            }
        }
        self.engines[e].running = still;
        // A segment ended inside a turn: the rollout keeps its cache and waits for the
        // dispatcher to grow its reservation (at once, if the banker's check allows).
        for i in paused {
            self.seqs[i].running = false;
            self.engines[e].held.push(i);
            self.pending[e].push_back(i);
        }
        for i in ended {
            self.seqs[i].running = false;
            self.turn_end(i, e);
        }
        self.mark(e);
    }

    fn turn_end(&mut self, i: usize, e: usize) {
        let turn = self.work.rollouts[i].turns[self.seqs[i].turn];
        let s = &mut self.seqs[i];
        debug_assert_eq!(s.turn_done, turn.generated);
        s.turn_done = 0;
        let next = s.state.on_turn_end(turn.generated, turn.asks_tool);
        match next {
            Next::RunTool => {
                let step = turn
                    .tool
                    .expect("the workload agrees with the state machine");
                self.tool_change(1);
                self.tool_calls += 1;
                self.push(self.now + step.latency_s, Kind::ToolDone { seq: i });
                match self.cfg.retention {
                    KvRetention::Keep => {
                        self.engines[e].held.push(i);
                        if self.policy.reserves_kv() {
                            // Only the context stays on the engine during the call.
                            let s = &mut self.seqs[i];
                            s.seg_left = 0;
                            self.ledgers[e].shrink(i as u64, s.state.context_tokens());
                        }
                    }
                    KvRetention::Release => {
                        self.drop_kv(i, e, false);
                        if self.policy.reserves_kv() {
                            self.unbind(i);
                        }
                    }
                }
            }
            Next::Finish(_) => self.finish(i, e),
            Next::Generate => unreachable!("a turn end never asks for a turn"),
        }
    }

    /// Frees a sequence's KV cache; `lost` counts it as work to redo.
    fn drop_kv(&mut self, i: usize, e: usize, lost: bool) {
        let s = &mut self.seqs[i];
        self.engines[e].used -= s.kv;
        if lost {
            self.recomputed += s.kv;
        }
        s.kv = 0;
        self.engines[e].held.retain(|&h| h != i);
    }

    fn finish(&mut self, i: usize, e: usize) {
        self.drop_kv(i, e, false);
        if self.seqs[i].engine.is_some() {
            self.unbind(i);
        }
        self.seqs[i].done = true;
        self.finished += 1;
        self.makespan = self.makespan.max(self.now);
        self.mark(e);
    }

    fn tool_change(&mut self, up: i64) {
        self.tools_area += self.tools_now as f64 * (self.now - self.tools_last);
        self.tools_last = self.now;
        self.tools_now = (self.tools_now as i64 + up) as usize;
        self.tools_peak = self.tools_peak.max(self.tools_now);
    }

    fn tool_done(&mut self, i: usize) {
        self.tool_change(-1);
        let turn = self.work.rollouts[i].turns[self.seqs[i].turn];
        let step = turn.tool.expect("a tool call ran");
        let s = &mut self.seqs[i];
        let next = s.state.on_tool_result(step.tokens);
        s.turn += 1;
        match (next, self.cfg.retention) {
            (Next::Generate, KvRetention::Keep) => {
                let e = s.engine.expect("kept rollouts stay bound");
                if self.policy.reserves_kv() {
                    // The reservation grows back before the next turn is queued.
                    self.pending[e].push_back(i);
                    return;
                }
                self.interrupt(e);
                self.engines[e].waiting.push_back(i);
                self.mark(e);
            }
            (Next::Generate, KvRetention::Release) => match s.engine {
                Some(e) => {
                    self.interrupt(e);
                    self.engines[e].waiting.push_back(i);
                    self.mark(e);
                }
                // kv-aware: resumed rollouts go ahead of new ones.
                None => self.queue.push_front(i),
            },
            (Next::Finish(_), _) => {
                let e = match s.engine {
                    Some(e) => e,
                    None => {
                        // A released kv-aware rollout: nothing resident, nothing bound.
                        s.done = true;
                        self.finished += 1;
                        self.makespan = self.makespan.max(self.now);
                        return;
                    }
                };
                self.interrupt(e);
                self.finish(i, e);
            }
            (Next::RunTool, _) => unreachable!("a tool result never asks for a tool"),
        }
    }

    /// Admits what fits, preempts what must go, and plans the next steps.
    fn replan(&mut self, e: usize) {
        if self.engines[e].plan.is_some() {
            return;
        }
        let now = self.now;
        let clock = &mut self.engines[e].clock;
        *clock = clock.max(now);
        let cap = self.cfg.engine.kv_capacity_tokens;
        self.admit(e);
        // Make room for the next step: drop idle caches first (least recently used, as a
        // prefix cache does), then preempt the newest running sequences.
        loop {
            let eng = &self.engines[e];
            if eng.running.is_empty() || eng.used + eng.running.len() as u64 <= cap {
                break;
            }
            if self.evict_held(e, None) {
                continue;
            }
            let i = self.engines[e].running.pop().expect("non-empty");
            self.seqs[i].running = false;
            self.drop_kv(i, e, true);
            self.engines[e].waiting.push_front(i);
            self.evictions += 1;
            if self.engines[e].running.is_empty() {
                // The preempted sequence is alone: it fits once it is prefilled again.
                self.admit(e);
            }
        }
        let eng = &self.engines[e];
        if eng.running.is_empty() {
            return;
        }
        let m = &self.cfg.engine;
        let b = eng.running.len() as u64;
        let kv_sum: u64 = eng.running.iter().map(|&i| self.seqs[i].kv).sum();
        let to_turn_end = eng
            .running
            .iter()
            .map(|&i| {
                let s = &self.seqs[i];
                (self.work.rollouts[i].turns[s.turn].generated - s.turn_done).min(s.seg_left)
            })
            .min()
            .expect("non-empty");
        let room = (cap - eng.used) / b;
        let steps = to_turn_end.min(room).max(1);
        let mut plan = Plan {
            steps,
            end: 0.0,
            prefill_s: eng.pending_prefill as f64 / m.prefill_tokens_per_s,
            a: m.step_base_s + m.step_per_seq_s * b as f64 + m.step_per_kv_token_s * kv_sum as f64,
            c: m.step_per_kv_token_s * b as f64,
        };
        plan.end = eng.clock + plan.time(steps);
        let version = eng.version;
        self.engines[e].plan = Some(plan);
        self.push(plan.end, Kind::Wake { engine: e, version });
    }

    /// Drops the least recently used idle cache on engine `e` other than `except`'s; returns
    /// whether there was one.
    fn evict_held(&mut self, e: usize, except: Option<usize>) -> bool {
        let Some(&h) = self.engines[e].held.iter().find(|&&h| Some(h) != except) else {
            return false;
        };
        self.drop_kv(h, e, true);
        self.evictions += 1;
        true
    }

    fn admit(&mut self, e: usize) {
        let cap = self.cfg.engine.kv_capacity_tokens;
        let max_batch = self.cfg.engine.max_batch;
        while self.engines[e].running.len() < max_batch {
            let Some(&i) = self.engines[e].waiting.front() else {
                break;
            };
            let need = self.seqs[i].context() - self.seqs[i].kv;
            // Room for the new tokens and one more step of every running sequence.
            let fits = |eng: &Eng| eng.used + need + (eng.running.len() as u64) < cap;
            if !fits(&self.engines[e]) {
                // Idle caches (tool calls in flight, or queued with their cache) give way to
                // work that can run, least recently used first.
                if self.evict_held(e, Some(i)) {
                    continue;
                }
                if !self.engines[e].running.is_empty() {
                    break;
                }
                let eng = &self.engines[e];
                let need = self.seqs[i].context() - self.seqs[i].kv;
                assert!(
                    eng.used + need < cap,
                    "an engine that holds one rollout cannot admit it"
                );
                continue;
            }
            let eng = &mut self.engines[e];
            eng.waiting.pop_front();
            eng.held.retain(|&h| h != i);
            eng.used += need;
            eng.pending_prefill += need;
            eng.running.push(i);
            self.prefilled += need;
            let s = &mut self.seqs[i];
            s.kv += need;
            s.running = true;
            let used = eng.used;
            self.peak_kv = self.peak_kv.max(used as f64 / cap as f64);
        }
    }

    fn report(&mut self) -> PolicyReport {
        self.tool_change(0);
        let n = self.engines.len() as f64;
        let makespan = self.makespan;
        let busy: f64 = self.engines.iter().map(|e| e.busy_s).sum();
        let points = self.cfg.timeline_points;
        let bucket = if makespan > 0.0 {
            makespan / points as f64
        } else {
            1.0
        };
        let mut timeline = vec![0.0f64; points];
        let mut occupancy = vec![0.0f64; points];
        let max_batch = self.cfg.engine.max_batch as f64;
        for eng in &self.engines {
            for &(a, b, batch) in &eng.busy {
                let first = ((a / bucket) as usize).min(points - 1);
                let last = ((b / bucket) as usize).min(points - 1);
                for (k, slot) in timeline.iter_mut().enumerate().take(last + 1).skip(first) {
                    let lo = a.max(k as f64 * bucket);
                    let hi = b.min((k + 1) as f64 * bucket);
                    if hi > lo {
                        *slot += hi - lo;
                        occupancy[k] += (hi - lo) * batch as f64 / max_batch;
                    }
                }
            }
        }
        for v in timeline.iter_mut().chain(occupancy.iter_mut()) {
            *v /= n * bucket;
        }
        PolicyReport {
            policy: self.policy,
            retention: self.cfg.retention,
            rollouts: self.finished,
            makespan_s: makespan,
            gpu_idle_fraction: if makespan > 0.0 {
                (1.0 - busy / (n * makespan)).max(0.0)
            } else {
                0.0
            },
            generated_tokens: self.generated,
            throughput_tokens_per_s: if makespan > 0.0 {
                self.generated as f64 / makespan
            } else {
                0.0
            },
            mean_batch: if self.steps > 0 {
                self.generated as f64 / self.steps as f64
            } else {
                0.0
            },
            prefilled_tokens: self.prefilled,
            recomputed_tokens: self.recomputed,
            evictions: self.evictions,
            peak_kv_fraction: self.peak_kv,
            peak_reserved_fraction: self.peak_reserved,
            tool_calls: self.tool_calls,
            peak_tool_concurrency: self.tools_peak,
            mean_tool_concurrency: if makespan > 0.0 {
                self.tools_area / makespan
            } else {
                0.0
            },
            timeline_step_s: bucket,
            timeline: timeline.into_iter().map(|v| v.min(1.0) as f32).collect(),
            occupancy: occupancy.into_iter().map(|v| v.min(1.0) as f32).collect(),
        }
    }
}
