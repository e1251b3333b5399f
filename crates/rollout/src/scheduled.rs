//! Scheduled rollouts: many problems × samples through [`rstar_scheduler::Dispatcher`], each
//! turn written by one of several [`TurnGenerator`]s and each tool call run asynchronously.
//!
//! Where [`rollout`](crate::rollout) drives one policy in lock step (every active
//! episode generates, then every pending call runs), this driver lets each rollout move on its
//! own: the dispatcher admits rollouts to engines by policy (`static`, `least-requests`,
//! `kv-aware`), a rollout's tool call starts the moment its turn ends, and its next turn is
//! queued the moment the call returns. The [`Episode`] of each rollout stays the source of
//! truth (template, tool-call parsing, termination rules, loss mask, per-token statistics);
//! the dispatcher's own [`rstar_scheduler::RolloutState`] only follows it:
//!
//! - an adapter implementing [`rstar_scheduler::Engine`] wraps each generator: it builds a
//!   [`TurnSpec`] from the episode's context and remaining budget, with the seed
//!   `mix(mix(seed, rollout), turn)`, pushes the sample into the episode and reports a tool
//!   call to the dispatcher when the episode asks for tools (or has already answered a
//!   malformed call itself). An episode that is already done answers an empty turn without a
//!   call, which stops the rollout in the dispatcher;
//! - an adapter implementing [`rstar_scheduler::ToolRunner`] runs the episode's pending calls
//!   concurrently on an [`AsyncTools`] (the sandboxed [`rstar_toolenv::Pool`] through
//!   [`PoolTools`], or any async function through [`FnTools`]), pushes the outcomes and
//!   returns the tool turn's tokens.
//!
//! Every rollout samples with seeds of its own, so the trajectories do not depend on the
//! policy, the number of engines or the order in which turns finish (a local engine batches
//! turns as they arrive; up to float rounding, a turn samples the same tokens in any batch).
//! Rollout `p * samples + s` is sample `s` of prompt `p`, and the output is prompt-major.
//!
//! ```
//! use std::sync::Arc;
//! use rstar_engine::{LocalEngine, LocalEngineConfig, SharedTokenizer, TurnGenerator};
//! use rstar_rollout::Prompt;
//! use rstar_rollout::scheduled::{FnTools, ScheduleConfig, run_scheduled_blocking};
//! use rstar_episode::template::Template;
//! use rstar_episode::toolcall::{ToolCall, ToolOutcome};
//! use rstar_policy::{Qwen, QwenConfig, Tokenizer};
//! use burn::tensor::Device;
//!
//! let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap();
//! let stops = Template::compact().stop_strings().iter().map(|s| s.to_string()).collect();
//! let engine = LocalEngine::spawn(model, Tokenizer::char(), LocalEngineConfig::new(stops));
//! let generators: Vec<Arc<dyn TurnGenerator>> = vec![Arc::new(engine)];
//! let tools = Arc::new(FnTools(|_call: ToolCall| async {
//!     ToolOutcome::code_judge(true, "", "6\n", "", 0.0)
//! }));
//! let mut config = ScheduleConfig::compact(7);
//! config.limits.max_response_tokens = 16; // an untrained model writes noise: keep it short
//! let tok = SharedTokenizer(Arc::new(Tokenizer::char()));
//! let prompts = [Prompt::new("p0", "What is 2*3?", "6")];
//! let out = run_scheduled_blocking(generators, tok, tools, &prompts, 2, &config).unwrap();
//! assert_eq!(out.rollout.trajectories.len(), 2);
//! assert!(out.rollout.trajectories.iter().all(|t| t.response_ids.len() <= 16));
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rstar_scheduler::{
    BoxError, BoxFuture, DispatchPolicy, DispatchStats, Dispatcher, Engine, KvRetention,
    RolloutRequest, ToolOutput, ToolRunner, TurnOutput, TurnRequest,
};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::{Prompt, RolloutOutput, RolloutStats, mix_seed};
use rstar_engine::{TurnGenerator, TurnSpec};
use rstar_episode::IoError;
use rstar_episode::episode::{Episode, Limits, Score, Step, StopReason, TextTokenizer, TokenStats};
use rstar_episode::template::{Template, TemplateFormat};
use rstar_episode::toolcall::{ToolCall, ToolName, ToolOutcome};
use rstar_verifier::{Scored, VerifyItem};

pub use crate::tools::{AsyncTools, FnTools, PoolTools, VerifyResult};

/// A verdict as the score of a trajectory: what [`score`] gives in process (a ground truth
/// that cannot be scored scores 0 without an answer).
fn score_of(verdict: &Scored) -> Score {
    match verdict.error {
        None => Score {
            answer: verdict.extracted.clone(),
            reward: f32::from(verdict.reward),
        },
        Some(_) => Score {
            answer: None,
            reward: 0.0,
        },
    }
}

/// How a scheduled rollout runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleConfig {
    /// The prompt template (the generators must stop on its stop strings).
    pub template: TemplateFormat,
    /// Turn and token limits of every episode.
    pub limits: Limits,
    /// The seed of the whole run; turn `t` of rollout `r` samples with `mix(mix(seed, r), t)`.
    pub seed: u64,
    /// How rollouts are assigned to generators.
    pub policy: DispatchPolicy,
    /// What happens to a rollout's KV cache while its tool call runs.
    pub retention: KvRetention,
    /// Keep per-token entropies, log-probabilities and token texts in the trajectories (when
    /// the generators report them); otherwise they are dropped to keep files small.
    pub record_entropy: bool,
    /// How answers are scored: `integer` (the training reward, the default), `math` or
    /// `choice` (see `rstar_verifier::Mode`).
    #[serde(default)]
    pub verifier: rstar_verifier::Mode,
    /// `kv-aware`: read each generator's free KV every this many milliseconds during the run
    /// ([`Dispatcher::load_refresh`]); 0 (the default): only at the start.
    #[serde(default)]
    pub load_refresh_ms: u64,
    /// Keep the generators' per-token log-probabilities in each trajectory's `token_logprobs`
    /// (when every turn reported them), without the entropies and texts of `record_entropy`:
    /// the behaviour log-probs that rollout correction weighs the loss with.
    #[serde(default)]
    pub keep_logprobs: bool,
}

impl ScheduleConfig {
    /// The embedded default: compact template and limits, `kv-aware` dispatch keeping KV
    /// caches during tool calls, no per-token statistics.
    pub fn compact(seed: u64) -> Self {
        ScheduleConfig {
            template: TemplateFormat::Compact,
            limits: Limits::compact(),
            seed,
            policy: DispatchPolicy::KvAware,
            retention: KvRetention::Keep,
            record_entropy: false,
            verifier: rstar_verifier::Mode::Integer,
            load_refresh_ms: 0,
            keep_logprobs: false,
        }
    }
}

/// Where a scheduled run stands, as passed to a [`ProgressFn`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Progress {
    /// Rollouts finished.
    pub done: usize,
    /// Rollouts in the run.
    pub total: usize,
    /// Tokens sampled so far by every generator.
    pub generated_tokens: usize,
    /// Seconds since the dispatch started.
    pub elapsed_secs: f64,
}

/// Called each time a rollout finishes (from the dispatcher's tasks: keep it cheap).
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// The output of a scheduled run: the trajectories and counters of
/// [`rollout`](crate::rollout), plus the dispatcher's.
#[derive(Debug, Clone)]
pub struct ScheduledOutput {
    /// The scored trajectories, prompt-major (`trajectories[p * samples + s]`), and counters:
    /// `rounds` counts generated turns, `generate_secs` is the wall time of the whole dispatch
    /// (turns and tool calls overlap), `tool_secs` the summed duration of the tool calls.
    pub rollout: RolloutOutput,
    /// The dispatcher's counters (peak KV reservations, peak concurrent tool calls, …).
    pub dispatch: DispatchStats,
    /// Per generator, the turns it wrote.
    pub turns_per_engine: Vec<usize>,
    /// Per trajectory (same order), the generator's log-probability of each assistant token
    /// (as [`Trajectory::token_logprobs`](rstar_episode::episode::Trajectory) counts them) when every
    /// turn reported them, for comparing with the trainer's recomputation; `None` otherwise.
    pub engine_logprobs: Vec<Option<Vec<f32>>>,
    /// Per trajectory, the weight version that wrote its turns when the generators report one
    /// (versions joined with `,` in the order met if its turns saw several).
    pub weight_versions: Vec<Option<String>>,
}

struct Slot<T: TextTokenizer> {
    /// Taken out when the dispatch is over (the dispatcher's fire-and-forget `release` tasks
    /// may still hold the adapters, so the shared state cannot be unwrapped).
    episode: Option<Episode<T>>,
    /// Response tokens up to the end of the last assistant turn: the tool turn starts here.
    tool_start: usize,
    /// Whether the episode's end has been counted.
    counted: bool,
    /// Whether the episode's assistant turns carry token statistics (set by the first turn).
    with_stats: Option<bool>,
    /// The generator's log-probability of each kept assistant token, while every turn has
    /// reported them (`None` from the first turn that did not).
    logprobs: Option<Vec<f32>>,
    /// The weight version that wrote each assistant turn, in order.
    turn_versions: Vec<Option<String>>,
    /// The rollout's number and its problem's ground truth (what remote verification sends).
    rollout: usize,
    truth: String,
}

struct Shared<T: TextTokenizer> {
    slots: Vec<Mutex<Slot<T>>>,
    max_response: usize,
    seed: u64,
    record_entropy: bool,
    generated: AtomicUsize,
    turns: AtomicUsize,
    tool_calls: AtomicUsize,
    tool_micros: AtomicUsize,
    done: AtomicUsize,
    started: Instant,
    progress: Option<ProgressFn>,
    /// Remote verification ([`AsyncTools::verifies`]): each finished rollout's answer goes
    /// here as it finishes (`None` otherwise, and once the dispatch is over).
    verify_queue: Mutex<Option<tokio::sync::mpsc::UnboundedSender<(usize, VerifyItem)>>>,
    /// How answers are compared.
    mode: rstar_verifier::Mode,
}

impl<T: TextTokenizer> Slot<T> {
    fn ep(&self) -> Result<&Episode<T>, BoxError> {
        self.episode
            .as_ref()
            .ok_or_else(|| "the rollout was already collected".into())
    }

    fn ep_mut(&mut self) -> Result<&mut Episode<T>, BoxError> {
        self.episode
            .as_mut()
            .ok_or_else(|| "the rollout was already collected".into())
    }
}

impl<T: TextTokenizer> Shared<T> {
    fn slot(&self, rollout: u64) -> Result<std::sync::MutexGuard<'_, Slot<T>>, BoxError> {
        let slot = self
            .slots
            .get(rollout as usize)
            .ok_or_else(|| format!("unknown rollout {rollout}"))?;
        // A panic while holding the lock would have failed the run already.
        Ok(slot.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn response_len(&self, episode: &Episode<T>) -> usize {
        self.max_response - episode.remaining_tokens()
    }

    /// Counts the episode's end once and reports progress.
    fn note_done(&self, slot: &mut Slot<T>) {
        let done = matches!(
            slot.episode.as_ref().map(Episode::step),
            Some(Step::Done(_))
        );
        if slot.counted || !done {
            return;
        }
        slot.counted = true;
        // Remote verification starts now, while the other rollouts go on.
        if let (Some(queue), Some(episode)) = (
            self.verify_queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref(),
            slot.episode.as_ref(),
        ) {
            let answer = VerifyItem::new(episode.assistant_text(), slot.truth.clone(), self.mode);
            // A closed queue (the dispatch is over) leaves it to the final batch.
            let _ = queue.send((slot.rollout, answer));
        }
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(progress) = &self.progress {
            progress(Progress {
                done,
                total: self.slots.len(),
                generated_tokens: self.generated.load(Ordering::SeqCst),
                elapsed_secs: self.started.elapsed().as_secs_f64(),
            });
        }
    }
}

struct EngineAdapter<T: TextTokenizer> {
    generator: Arc<dyn TurnGenerator>,
    shared: Arc<Shared<T>>,
    turns: Arc<AtomicUsize>,
}

impl<T: TextTokenizer + Send + 'static> Engine for EngineAdapter<T> {
    fn kv_capacity(&self) -> u64 {
        self.generator.kv_capacity()
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        self.generator.free_kv_tokens()
    }

    fn kv_accounting(&self) -> rstar_scheduler::KvAccounting {
        self.generator.kv_accounting()
    }

    fn generate(&self, request: TurnRequest) -> BoxFuture<'_, Result<TurnOutput, BoxError>> {
        Box::pin(async move {
            let shared = &self.shared;
            let spec = {
                let slot = shared.slot(request.rollout)?;
                match slot.ep()?.step() {
                    Step::Generate { max_tokens } => TurnSpec {
                        rollout: request.rollout,
                        turn: request.turn,
                        context: slot.ep()?.context_ids(),
                        max_new_tokens: max_tokens,
                        seed: mix_seed(mix_seed(shared.seed, request.rollout), request.turn.into()),
                    },
                    // Done (e.g. the tool turn did not fit): an empty turn without a call
                    // ends the rollout in the dispatcher too.
                    _ => return Ok(TurnOutput::default()),
                }
            };
            let max_tokens = spec.max_new_tokens;
            let sample = self.generator.generate(spec).await?;
            shared
                .generated
                .fetch_add(sample.tokens.len(), Ordering::SeqCst);
            shared.turns.fetch_add(1, Ordering::SeqCst);
            self.turns.fetch_add(1, Ordering::SeqCst);
            if sample.tokens.is_empty() && max_tokens > 0 {
                // A generator writes at least one token (a stop string or EOS included) unless
                // the context already fills the model: the response is truncated there.
                let mut slot = shared.slot(request.rollout)?;
                slot.ep_mut()?.stop(StopReason::TokenBudget);
                return Ok(TurnOutput::default());
            }
            let kept = sample.tokens[..sample.tokens.len().min(max_tokens)].to_vec();
            let mut slot = shared.slot(request.rollout)?;
            let before = shared.response_len(slot.ep()?);
            let version = sample.weight_version.clone();
            let sample_len = sample.tokens.len();
            let turn_logprobs =
                (sample.logprobs.len() == sample_len).then(|| sample.logprobs.clone());
            let has_stats = shared.record_entropy
                && sample.entropies.len() == sample.tokens.len()
                && sample.logprobs.len() == sample.tokens.len();
            // An empty turn says nothing about the generator: it follows the episode's earlier
            // turns (an episode takes statistics for all its turns or for none).
            let with_stats = match slot.with_stats {
                Some(before) if sample.tokens.is_empty() => before,
                _ => has_stats,
            };
            slot.with_stats = Some(with_stats);
            let step = if with_stats {
                let stats = TokenStats {
                    entropies: sample.entropies,
                    logprobs: sample.logprobs,
                };
                slot.ep_mut()?
                    .push_assistant_sampled(&sample.tokens, stats)?
            } else {
                slot.ep_mut()?.push_assistant_ids(&sample.tokens)?
            };
            // Every pushed assistant turn is one turn of the trajectory.
            slot.turn_versions.push(version);
            // The generator's log-probs of the tokens the episode kept: it keeps as many of
            // the sampled ids as its budget has room for.
            let added = sample_len.min(shared.max_response.saturating_sub(before));
            slot.logprobs = match (slot.logprobs.take(), turn_logprobs) {
                (Some(mut all), Some(turn)) => {
                    all.extend_from_slice(&turn[..added]);
                    Some(all)
                }
                _ => None,
            };
            // The tool turn (if any, and if a malformed call was already answered) starts
            // right after the assistant turn.
            slot.tool_start = before + kept.len();
            let tool_call = match step {
                Step::CallTools(calls) => Some(
                    calls
                        .iter()
                        .map(ToolCall::to_hermes_json)
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                // Only malformed calls: the episode answered them already; the tool runner
                // hands the dispatcher that tool turn.
                Step::Generate { .. } => Some(String::new()),
                Step::Done(_) => None,
            };
            shared.note_done(&mut slot);
            Ok(TurnOutput {
                tokens: kept,
                tool_call,
            })
        })
    }
}

struct ToolAdapter<T: TextTokenizer> {
    tools: Arc<dyn AsyncTools>,
    shared: Arc<Shared<T>>,
}

impl<T: TextTokenizer + Send + 'static> ToolRunner for ToolAdapter<T> {
    fn run(&self, call: rstar_scheduler::ToolCall) -> BoxFuture<'_, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            let shared = &self.shared;
            let (calls, history) = {
                let slot = shared.slot(call.rollout)?;
                match slot.ep()?.step() {
                    Step::CallTools(calls) => {
                        let history: Vec<String> = slot
                            .ep()?
                            .tool_calls()
                            .iter()
                            .filter_map(|r| r.call.as_ref())
                            .filter(|c| c.name == ToolName::JupyterCode)
                            .map(|c| c.code.clone())
                            .collect();
                        (calls, history)
                    }
                    _ => (Vec::new(), Vec::new()),
                }
            };
            let outcomes = if calls.is_empty() {
                Vec::new()
            } else {
                let started = Instant::now();
                let outcomes = run_concurrently(&self.tools, calls, history).await?;
                shared
                    .tool_calls
                    .fetch_add(outcomes.len(), Ordering::SeqCst);
                let micros = usize::try_from(started.elapsed().as_micros()).unwrap_or(usize::MAX);
                shared.tool_micros.fetch_add(micros, Ordering::SeqCst);
                outcomes
            };
            let mut slot = shared.slot(call.rollout)?;
            if !outcomes.is_empty() {
                slot.ep_mut()?.push_tool_outcomes(outcomes)?;
            }
            let context = slot.ep()?.context_ids();
            let from = slot.ep()?.prompt_ids().len() + slot.tool_start;
            let tokens = context.get(from..).unwrap_or_default().to_vec();
            shared.note_done(&mut slot);
            Ok(ToolOutput { tokens })
        })
    }
}

/// Runs one turn's calls at once; outcomes in call order. Within one turn a stateful call sees
/// the history before the turn.
async fn run_concurrently(
    tools: &Arc<dyn AsyncTools>,
    calls: Vec<ToolCall>,
    history: Vec<String>,
) -> Result<Vec<ToolOutcome>, BoxError> {
    if calls.len() == 1 {
        let call = calls.into_iter().next().expect("one call");
        return Ok(vec![tools.run(call, history).await]);
    }
    let mut set = tokio::task::JoinSet::new();
    let n = calls.len();
    for (i, call) in calls.into_iter().enumerate() {
        let tools = Arc::clone(tools);
        let history = history.clone();
        set.spawn(async move { (i, tools.run(call, history).await) });
    }
    let mut outcomes: Vec<Option<ToolOutcome>> = vec![None; n];
    while let Some(joined) = set.join_next().await {
        let (i, outcome) = joined.map_err(|e| format!("a tool task failed: {e}"))?;
        outcomes[i] = Some(outcome);
    }
    Ok(outcomes.into_iter().flatten().collect())
}

/// Checks every ground truth before anything runs, naming the problem.
fn check_answers(prompts: &[Prompt], mode: rstar_verifier::Mode) -> Result<(), Error> {
    let verifier = rstar_verifier::Verifier::new();
    for p in prompts {
        if let Err(err) = verifier.check_truth(mode, &p.answer) {
            return Err(Error::Problem {
                id: p.id.clone(),
                message: format!("ground truth {:?}: {err}", p.answer),
            });
        }
    }
    Ok(())
}

/// Scores an episode's assistant text with [`rstar_verifier::Verifier::verify_mode`]
/// (`integer` is [`rstar_verifier::verify`]).
fn score(text: &str, answer: &str, mode: rstar_verifier::Mode) -> Score {
    match rstar_verifier::Verifier::new().verify_mode(mode, text, answer) {
        Ok(v) => Score {
            answer: v.extracted,
            reward: f32::from(v.reward),
        },
        Err(_) => Score {
            answer: None,
            reward: 0.0,
        },
    }
}

/// Rolls out `samples` episodes of every prompt through a [`Dispatcher`] over `generators`,
/// runs tool calls on `tools`, and scores every trajectory. `progress` is called each time a
/// rollout finishes.
///
/// # Errors
/// [`Error::Problem`] for a ground truth the verifier cannot score (before anything
/// runs), [`Error::Scheduler`] when there is no generator, a `kv-aware` reservation fits
/// no generator, or a generator fails (its message is kept), [`rstar_episode::Error::EpisodeState`]
/// when the loop and the episodes disagree (a bug).
pub async fn run_scheduled<T>(
    generators: Vec<Arc<dyn TurnGenerator>>,
    tokenizer: T,
    tools: Arc<dyn AsyncTools>,
    prompts: &[Prompt],
    samples: usize,
    config: &ScheduleConfig,
    progress: Option<ProgressFn>,
) -> Result<ScheduledOutput, Error>
where
    T: TextTokenizer + Clone + Send + 'static,
{
    check_answers(prompts, config.verifier)?;
    let template = Template::of(config.template);
    let mut slots = Vec::with_capacity(prompts.len() * samples);
    for p in prompts {
        for s in 0..samples {
            let episode = Episode::new(
                tokenizer.clone(),
                &template,
                config.limits.clone(),
                &p.problem,
            )
            .with_id(p.id.clone(), s as u32)
            .with_ground_truth(p.answer.clone());
            slots.push(Mutex::new(Slot {
                episode: Some(episode),
                tool_start: 0,
                counted: false,
                with_stats: None,
                logprobs: Some(Vec::new()),
                turn_versions: Vec::new(),
                rollout: slots.len(),
                truth: p.answer.clone(),
            }));
        }
    }
    let requests: Vec<RolloutRequest> = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| RolloutRequest {
            id: i as u64,
            prompt: slot
                .lock()
                .map(|s| s.ep().map(|e| e.prompt_ids().to_vec()).unwrap_or_default())
                .unwrap_or_default(),
            max_response_tokens: config.limits.max_response_tokens as u64,
            // One more than the episode allows: the episode ends a rollout first, and an
            // episode done after its tool turn is stopped with one empty turn.
            max_turns: u32::try_from(config.limits.max_assistant_turns)
                .unwrap_or(u32::MAX - 1)
                .saturating_add(1),
        })
        .collect();
    // Remote verification: a task that scores finished rollouts in batches as they come.
    let (verify_queue, verifying) = if tools.verifies() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(verify_as_they_finish(Arc::clone(&tools), rx));
        (Some(tx), Some(task))
    } else {
        (None, None)
    };
    let verifier_tools = Arc::clone(&tools);
    let shared = Arc::new(Shared {
        slots,
        max_response: config.limits.max_response_tokens,
        seed: config.seed,
        record_entropy: config.record_entropy,
        generated: AtomicUsize::new(0),
        turns: AtomicUsize::new(0),
        tool_calls: AtomicUsize::new(0),
        tool_micros: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        started: Instant::now(),
        progress,
        verify_queue: Mutex::new(verify_queue),
        mode: config.verifier,
    });
    let counters: Vec<Arc<AtomicUsize>> = generators
        .iter()
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let engines: Vec<Arc<dyn Engine>> = generators
        .into_iter()
        .zip(&counters)
        .map(|(generator, turns)| {
            Arc::new(EngineAdapter {
                generator,
                shared: Arc::clone(&shared),
                turns: Arc::clone(turns),
            }) as Arc<dyn Engine>
        })
        .collect();
    let runner = Arc::new(ToolAdapter {
        tools,
        shared: Arc::clone(&shared),
    });
    let report = Dispatcher::new(engines, runner)
        .policy(config.policy)
        .retention(config.retention)
        .load_refresh(Duration::from_millis(config.load_refresh_ms))
        .run(requests)
        .await?;
    let elapsed = shared.started.elapsed().as_secs_f64();
    let stats = RolloutStats {
        rounds: shared.turns.load(Ordering::SeqCst),
        generated_tokens: shared.generated.load(Ordering::SeqCst),
        tool_calls: shared.tool_calls.load(Ordering::SeqCst),
        generate_secs: elapsed,
        tool_secs: shared.tool_micros.load(Ordering::SeqCst) as f64 / 1e6,
        ..RolloutStats::default()
    };
    let verdicts = match verifying {
        Some(task) => Some(collect_verdicts(&shared, task, verifier_tools.as_ref()).await?),
        None => None,
    };
    let mut trajectories = Vec::with_capacity(shared.slots.len());
    let mut engine_logprobs = Vec::with_capacity(shared.slots.len());
    let mut weight_versions = Vec::with_capacity(shared.slots.len());
    for (i, (slot, p)) in shared
        .slots
        .iter()
        .zip(prompts.iter().flat_map(|p| std::iter::repeat_n(p, samples)))
        .enumerate()
    {
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        let episode = slot.episode.take().ok_or_else(|| {
            rstar_episode::Error::EpisodeState("a rollout was collected twice".into())
        })?;
        let remote = verdicts.as_ref().and_then(|v| v[i].as_ref());
        let mut t = episode.finish_scored(|text| match remote {
            Some(verdict) => score_of(verdict),
            None => score(text, &p.answer, config.verifier),
        })?;
        if !config.record_entropy {
            t.strip_token_stats();
        }
        let assistant_tokens = t.assistant_token_count();
        let logprobs = slot.logprobs.take().filter(|l| l.len() == assistant_tokens);
        if config.keep_logprobs
            && t.token_logprobs.is_empty()
            && let Some(l) = &logprobs
        {
            t.token_logprobs = l.clone();
        }
        engine_logprobs.push(logprobs);
        let turn_versions = std::mem::take(&mut slot.turn_versions);
        let mut met: Vec<&str> = Vec::new();
        for v in turn_versions.iter().flatten() {
            if !met.contains(&v.as_str()) {
                met.push(v);
            }
        }
        weight_versions.push((!met.is_empty()).then(|| met.join(",")));
        t.set_turn_versions(turn_versions)?;
        trajectories.push(t);
    }
    Ok(ScheduledOutput {
        rollout: RolloutOutput {
            trajectories,
            stats,
        },
        dispatch: report.stats,
        turns_per_engine: counters.iter().map(|c| c.load(Ordering::SeqCst)).collect(),
        engine_logprobs,
        weight_versions,
    })
}

/// Answers per `/verify` batch of the scheduled driver, and how long it waits to fill one.
const VERIFY_BATCH: usize = 256;
const VERIFY_LINGER: Duration = Duration::from_millis(5);

/// The verification task of a scheduled run: collects finished rollouts' answers into
/// batches (up to [`VERIFY_BATCH`], or what came within [`VERIFY_LINGER`] of the first) and
/// sends each at once, without waiting for the earlier ones, until the queue closes; then the
/// verdicts of all, with their rollouts' numbers.
async fn verify_as_they_finish(
    tools: Arc<dyn AsyncTools>,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<(usize, VerifyItem)>,
) -> Result<Vec<(usize, Scored)>, Error> {
    let mut batches = tokio::task::JoinSet::new();
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + VERIFY_LINGER;
        while batch.len() < VERIFY_BATCH {
            match tokio::time::timeout_at(deadline, queue.recv()).await {
                Ok(Some(answer)) => batch.push(answer),
                Ok(None) | Err(_) => break,
            }
        }
        let tools = Arc::clone(&tools);
        batches.spawn(async move {
            let (rollouts, answers): (Vec<usize>, Vec<VerifyItem>) = batch.into_iter().unzip();
            let verdicts = tools.verify(answers).await?;
            Ok::<_, Error>(rollouts.into_iter().zip(verdicts).collect::<Vec<_>>())
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = batches.join_next().await {
        let verdicts = joined.map_err(|e| Error::tools(format!("a verify task failed: {e}")))??;
        all.extend(verdicts);
    }
    Ok(all)
}

/// Closes the verification queue once the dispatch is over and gathers every rollout's
/// verdict: those scored as they finished, then, in one batch, any whose end the adapters did
/// not see (a rollout stopped where its context filled the model).
async fn collect_verdicts<T: TextTokenizer>(
    shared: &Shared<T>,
    task: tokio::task::JoinHandle<Result<Vec<(usize, Scored)>, Error>>,
    tools: &dyn AsyncTools,
) -> Result<Vec<Option<Scored>>, Error> {
    drop(
        shared
            .verify_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    );
    let mut verdicts: Vec<Option<Scored>> = vec![None; shared.slots.len()];
    let scored = task
        .await
        .map_err(|e| Error::tools(format!("the verification task failed: {e}")))??;
    for (rollout, verdict) in scored {
        verdicts[rollout] = Some(verdict);
    }
    let mut missing = Vec::new();
    let mut answers = Vec::new();
    for (i, slot) in shared.slots.iter().enumerate() {
        if verdicts[i].is_none() {
            let slot = slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(episode) = slot.episode.as_ref() {
                missing.push(i);
                answers.push(VerifyItem::new(
                    episode.assistant_text(),
                    slot.truth.clone(),
                    shared.mode,
                ));
            }
        }
    }
    if !answers.is_empty() {
        let got = tools.verify(answers).await?;
        if got.len() != missing.len() {
            return Err(Error::OutcomeCount {
                expected: missing.len(),
                got: got.len(),
            });
        }
        for (i, verdict) in missing.into_iter().zip(got) {
            verdicts[i] = Some(verdict);
        }
    }
    Ok(verdicts)
}

/// [`run_scheduled`] on a tokio runtime of its own (current-thread: local engines generate on
/// their own threads and the sandbox pool runs on its own runtime), without progress.
///
/// # Errors
/// As [`run_scheduled`], and [`Error::Io`] when the runtime cannot start.
pub fn run_scheduled_blocking<T>(
    generators: Vec<Arc<dyn TurnGenerator>>,
    tokenizer: T,
    tools: Arc<dyn AsyncTools>,
    prompts: &[Prompt],
    samples: usize,
    config: &ScheduleConfig,
) -> Result<ScheduledOutput, Error>
where
    T: TextTokenizer + Clone + Send + 'static,
{
    runtime()?.block_on(run_scheduled(
        generators, tokenizer, tools, prompts, samples, config, None,
    ))
}

/// A current-thread tokio runtime with IO and timers.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io(IoError::new("<tokio runtime>", source)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstar_verifier::Mode;

    /// Remote verification (`rl.verify = "remote"`) scores a rollout from the tool server's
    /// verdict; it must give the score the in-process verifier gives the same text, a ground
    /// truth that cannot be scored included (0, no answer).
    #[test]
    fn a_verdict_scores_as_the_in_process_verifier_does() {
        let verifier = rstar_verifier::Verifier::new();
        let cases = [
            ("so \\boxed{42}", "42", Mode::Integer),
            ("so \\boxed{41}", "42", Mode::Integer),
            ("so \\boxed{1,234}", "1234", Mode::Integer),
            ("no box at all", "42", Mode::Integer),
            ("so \\boxed{\\frac{1}{2}}", "0.5", Mode::Math),
            ("so \\boxed{\\frac{1}{3}}", "0.5", Mode::Math),
            ("so \\boxed{B}", "B", Mode::Choice),
            ("so \\boxed{42}", "", Mode::Integer),
        ];
        let mut scored = 0;
        for (text, truth, mode) in cases {
            let verdict = VerifyItem::new(text, truth, mode).score(&verifier);
            let (remote, local) = (score_of(&verdict), score(text, truth, mode));
            assert_eq!(remote.reward, local.reward, "{text} against {truth:?}");
            assert_eq!(remote.answer, local.answer, "{text} against {truth:?}");
            scored += usize::from(remote.reward > 0.0);
        }
        assert_eq!(scored, 4);
    }

    #[test]
    fn a_ground_truth_that_cannot_be_scored_is_refused_by_problem_id() {
        let prompts = [Prompt::new("fine", "q", "7"), Prompt::new("bad", "q", "")];
        assert!(check_answers(&prompts[..1], Mode::Integer).is_ok());
        let err = check_answers(&prompts, Mode::Integer).unwrap_err();
        assert!(
            matches!(&err, Error::Problem { id, .. } if id == "bad"),
            "{err}"
        );
    }

    /// A config saved before the optional fields existed still reads, with their defaults.
    #[test]
    fn a_config_without_the_later_fields_reads_with_their_defaults() {
        let full = ScheduleConfig::compact(3);
        let mut json = serde_json::to_value(&full).unwrap();
        let object = json.as_object_mut().unwrap();
        for later in ["verifier", "load_refresh_ms", "keep_logprobs"] {
            assert!(object.remove(later).is_some(), "{later}");
        }
        let read: ScheduleConfig = serde_json::from_value(json).unwrap();
        assert_eq!(read, full);
    }
}
