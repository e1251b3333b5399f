//! Turn generators: what writes an assistant turn, behind one async trait.
//!
//! A [`TurnGenerator`] continues a context (prompt, earlier turns, tool responses as token ids)
//! by one assistant turn and returns the sampled tokens with their log-probabilities and
//! entropies where it has them. The agent layer wraps generators into
//! [`rstar_scheduler::Engine`]s (see `scheduled`), so the scheduler dispatches turns across
//! them by free KV capacity. Implementations:
//!
//! - [`LocalEngine`]: an [`rstar_policy::Qwen`] on its own thread that batches whatever turns
//!   are waiting into one [`generate_requests`] call (several engines on one machine share the
//!   CPU; one engine per GPU);
//! - [`remote::RemoteEngine`]: a remote OpenAI-compatible server (vLLM, SGLang, llama.cpp,
//!   `rstar serve`), spoken to in the request and response types of [`wire`], which
//!   `rstar serve` answers in too;
//! - scripted generators in tests.
//!
//! Sampling is seeded per turn ([`TurnSpec::seed`]), so a turn samples the same tokens whichever
//! batch it lands in (up to float rounding): rollouts stay reproducible although the batches an
//! engine forms depend on timing.
//!
//! ```
//! use rstar_engine::{LocalEngine, LocalEngineConfig, TurnGenerator, TurnSpec};
//! use rstar_policy::{Qwen, QwenConfig, Sampling, Tokenizer};
//! use burn::tensor::Device;
//!
//! let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap();
//! let tok = Tokenizer::char();
//! let context = tok.encode("Q: 2+2?\nA:").unwrap();
//! let engine = LocalEngine::spawn(model, tok, LocalEngineConfig::new(vec!["</c>".into()]));
//! let spec = TurnSpec { rollout: 0, turn: 0, context, max_new_tokens: 8, seed: 7 };
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let a = rt.block_on(engine.generate(spec.clone())).unwrap();
//! let b = rt.block_on(engine.generate(spec)).unwrap();
//! assert_eq!(a, b); // seeded per turn
//! assert!(a.tokens.len() <= 8 && a.logprobs.len() == a.tokens.len());
//! ```
//!
//! # Crate features
//! None. The Burn backend is `rstar-policy`'s feature (`flex`, `wgpu`, `cuda`, `tch`, and
//! `fusion`, `autotune` for the GPU ones): a binary enables it there, once for every crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use rstar_policy::{
    Generation, GenerationConfig, Qwen, Request, Sampling, Tokenizer, generate_requests,
};
pub use rstar_scheduler::{BoxError, BoxFuture};

use rstar_episode::episode::TextTokenizer;

pub mod error;
pub mod remote;
pub mod wire;

pub use error::Error;

/// One assistant turn to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSpec {
    /// The rollout's id, stable across its turns.
    pub rollout: u64,
    /// The turn's number within the rollout, from 0.
    pub turn: u32,
    /// The whole context as token ids.
    pub context: Vec<u32>,
    /// The most tokens the turn may have.
    pub max_new_tokens: usize,
    /// The turn's sampling seed.
    pub seed: u64,
}

/// A written turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnSample {
    /// The sampled token ids (a stop string or EOS token included).
    pub tokens: Vec<u32>,
    /// Per token, its log-probability under the model at temperature 1; empty when the
    /// generator does not report them.
    pub logprobs: Vec<f32>,
    /// Per token, the entropy of the model's distribution; empty when not reported.
    pub entropies: Vec<f32>,
    /// The version of the weights that wrote the turn, when the generator reports one
    /// ([`LocalEngine::swap_weights`], `rstar serve`'s and SGLang's `weight_version`).
    pub weight_version: Option<String>,
}

/// Writes assistant turns: a local policy, a remote server, a script.
///
/// Stop strings, EOS ids and the sampler belong to the generator's configuration (they follow
/// from the template and the run), not to each turn.
pub trait TurnGenerator: Send + Sync {
    /// A short name for logs and reports (`local-0`, `http://host:8000`).
    fn name(&self) -> String;

    /// KV-cache capacity in tokens, which the scheduler's `kv-aware` policy reserves against.
    fn kv_capacity(&self) -> u64;

    /// KV tokens free now; the default reports the whole capacity.
    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        let capacity = self.kv_capacity();
        Box::pin(async move { Ok(capacity) })
    }

    /// What [`Self::free_kv_tokens`] counts as used for a turn in flight
    /// ([`rstar_scheduler::KvAccounting`]); the default, `Tokens`, is a paged cache's (vLLM,
    /// SGLang).
    fn kv_accounting(&self) -> rstar_scheduler::KvAccounting {
        rstar_scheduler::KvAccounting::Tokens
    }

    /// Writes one turn.
    fn generate(&self, spec: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>>;
}

/// What an engine reports of its load: its KV capacity and use in tokens, and its requests.
/// Remote servers report it on `GET /metrics` ([`EngineLoad::from_prometheus`]: vLLM's, SGLang's
/// and `rstar serve`'s gauges); a [`LocalEngine`] counts its own ([`LocalEngine::load`]).
/// A field the engine does not report is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineLoad {
    /// KV-cache capacity in tokens.
    pub capacity_tokens: Option<u64>,
    /// KV tokens in use (or, for a local engine, reserved by the turns in flight).
    pub used_tokens: Option<u64>,
    /// Requests being generated.
    pub running: Option<u64>,
    /// Requests waiting for a batch.
    pub waiting: Option<u64>,
}

impl EngineLoad {
    /// KV tokens free now, when both the capacity and the use are known.
    pub fn free_tokens(&self) -> Option<u64> {
        Some(self.capacity_tokens?.saturating_sub(self.used_tokens?))
    }

    /// Reads a Prometheus text exposition (`GET /metrics`):
    ///
    /// - vLLM: `vllm:cache_config_info{num_gpu_blocks, block_size}` (capacity),
    ///   `vllm:kv_cache_usage_perc` (or the older `vllm:gpu_cache_usage_perc`, a 0–1
    ///   fraction), `vllm:num_requests_running`, `vllm:num_requests_waiting`;
    /// - SGLang: `sglang:max_total_num_tokens`, `sglang:token_usage` (0–1),
    ///   `sglang:num_running_reqs`, `sglang:num_queue_reqs`.
    ///
    /// `rstar serve` writes vLLM's names. Series of one metric with different labels (one per
    /// data-parallel rank) are summed; usage fractions are averaged. Unknown lines are
    /// ignored, so an empty text gives an all-`None` load.
    pub fn from_prometheus(text: &str) -> EngineLoad {
        let (mut capacity, mut running, mut waiting) = (None::<f64>, None::<f64>, None::<f64>);
        let (mut usage_sum, mut usage_n) = (0.0f64, 0u32);
        let add = |slot: &mut Option<f64>, v: f64| *slot = Some(slot.unwrap_or(0.0) + v);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // `name{labels} value [timestamp]`; label values may hold spaces.
            let (name, labels, rest) = match (line.find('{'), line.rfind('}')) {
                (Some(open), Some(close)) if open < close => {
                    (&line[..open], &line[open + 1..close], &line[close + 1..])
                }
                _ => match line.split_once(char::is_whitespace) {
                    Some((name, rest)) => (name, "", rest),
                    None => continue,
                },
            };
            let Some(value) = rest.split_whitespace().next() else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if !value.is_finite() {
                continue;
            }
            match name {
                "vllm:cache_config_info" => {
                    let label = |key: &str| {
                        labels.split(',').find_map(|kv| {
                            let (k, v) = kv.split_once('=')?;
                            (k.trim() == key)
                                .then(|| v.trim().trim_matches('"').parse::<f64>().ok())
                                .flatten()
                        })
                    };
                    if let (Some(blocks), Some(size)) =
                        (label("num_gpu_blocks"), label("block_size"))
                    {
                        add(&mut capacity, blocks * size);
                    }
                }
                "sglang:max_total_num_tokens" => add(&mut capacity, value),
                "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" | "sglang:token_usage" => {
                    usage_sum += value.clamp(0.0, 1.0);
                    usage_n += 1;
                }
                "vllm:num_requests_running" | "sglang:num_running_reqs" => add(&mut running, value),
                "vllm:num_requests_waiting" | "sglang:num_queue_reqs" => add(&mut waiting, value),
                _ => {}
            }
        }
        let tokens = |v: f64| v.max(0.0).round() as u64;
        let usage = (usage_n > 0).then(|| usage_sum / f64::from(usage_n));
        EngineLoad {
            capacity_tokens: capacity.map(tokens),
            used_tokens: capacity.zip(usage).map(|(c, u)| tokens(c * u)),
            running: running.map(tokens),
            waiting: waiting.map(tokens),
        }
    }

    /// The Prometheus text `rstar serve` answers on `GET /metrics`: vLLM's gauge names, so
    /// that dashboards and clients written for vLLM read it, with a one-token block.
    pub fn to_prometheus(&self, model_name: &str) -> String {
        let label = model_name.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, labels: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {value}\n"
            ));
        };
        let model = format!("model_name=\"{label}\"");
        if let Some(c) = self.capacity_tokens {
            gauge(
                "vllm:cache_config_info",
                "Information of the KV cache (capacity = num_gpu_blocks * block_size tokens).",
                &format!("{model},block_size=\"1\",num_gpu_blocks=\"{c}\""),
                "1".into(),
            );
            let usage = match (c, self.used_tokens) {
                (0, _) | (_, None) => 0.0,
                (c, Some(u)) => (u as f64 / c as f64).min(1.0),
            };
            gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage (1 means 100 percent).",
                &model,
                format!("{usage}"),
            );
        }
        if let Some(r) = self.running {
            gauge(
                "vllm:num_requests_running",
                "Requests being generated.",
                &model,
                r.to_string(),
            );
        }
        if let Some(w) = self.waiting {
            gauge(
                "vllm:num_requests_waiting",
                "Requests waiting for a batch.",
                &model,
                w.to_string(),
            );
        }
        out
    }
}

/// The counters behind [`LocalEngine::load`].
#[derive(Debug, Default)]
struct LoadCounters {
    /// Turns sent and not yet answered.
    turns: AtomicU64,
    /// Their contexts plus their `max_new_tokens`.
    tokens: AtomicU64,
    /// Turns in the batch being generated.
    running: AtomicU64,
}

/// Takes a turn off the counters when it is answered or abandoned.
struct InFlight {
    counters: Arc<LoadCounters>,
    tokens: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counters.turns.fetch_sub(1, Ordering::SeqCst);
        self.counters
            .tokens
            .fetch_sub(self.tokens, Ordering::SeqCst);
    }
}

/// The policy crate's [`Tokenizer`] as the agent layer's [`TextTokenizer`].
///
/// Encoding with an HF tokenizer can fail (the `tokenizers` crate reports errors); such text is
/// logged and encoded as nothing. The built-in character tokenizer never fails.
#[derive(Debug, Clone, Copy)]
pub struct PolicyTokenizer<'a>(pub &'a Tokenizer);

impl TextTokenizer for PolicyTokenizer<'_> {
    fn encode(&self, text: &str) -> Vec<u32> {
        self.0.encode(text).unwrap_or_else(|err| {
            tracing::warn!("tokenizer could not encode {text:?}: {err}");
            Vec::new()
        })
    }
    fn decode(&self, ids: &[u32]) -> String {
        self.0.decode(ids).unwrap_or_else(|err| {
            tracing::warn!("tokenizer could not decode {ids:?}: {err}");
            String::new()
        })
    }
}

/// An owned, shareable [`Tokenizer`] as the agent layer's [`TextTokenizer`].
#[derive(Debug, Clone)]
pub struct SharedTokenizer(pub Arc<Tokenizer>);

impl TextTokenizer for SharedTokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        PolicyTokenizer(&self.0).encode(text)
    }
    fn decode(&self, ids: &[u32]) -> String {
        PolicyTokenizer(&self.0).decode(ids)
    }
}

/// How a [`LocalEngine`] generates.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalEngineConfig {
    /// Strings that end a turn (the template's [`stop_strings`](rstar_episode::template::Template::stop_strings)).
    pub stop_strings: Vec<String>,
    /// Token ids that end a turn.
    pub eos: Vec<u32>,
    /// The sampler.
    pub sampling: Sampling,
    /// The most turns in one batched generation call.
    pub max_batch: usize,
    /// The KV capacity reported to the scheduler, in tokens.
    pub kv_capacity: u64,
    /// How long the engine waits after the first waiting turn for others to join its batch.
    pub gather: Duration,
    /// The engine's name.
    pub name: String,
    /// The weight version its turns report until the first [`LocalEngine::swap_weights`]
    /// ([`INITIAL_WEIGHT_VERSION`] by default; `rstar serve` names an adapter's engines for the
    /// adapter).
    pub weight_version: String,
}

impl LocalEngineConfig {
    /// Temperature 1, batches of up to 64 turns, a 64 × 4096-token KV budget, 2 ms gathering.
    pub fn new(stop_strings: Vec<String>) -> Self {
        LocalEngineConfig {
            stop_strings,
            eos: Vec::new(),
            sampling: Sampling::Temperature { temperature: 1.0 },
            max_batch: 64,
            kv_capacity: 64 * 4096,
            gather: Duration::from_millis(2),
            name: "local".into(),
            weight_version: INITIAL_WEIGHT_VERSION.into(),
        }
    }
}

/// Per-turn overrides of a [`LocalEngine`]'s configuration, for callers that mix settings on
/// one engine (`rstar serve` answers requests with their own sampler and stop strings). Turns
/// with different samplers or EOS ids that wait together are generated in separate batched
/// calls; stop strings are per sequence anyway.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnOptions {
    /// Replaces [`LocalEngineConfig::sampling`].
    pub sampling: Option<Sampling>,
    /// Replaces [`LocalEngineConfig::stop_strings`].
    pub stop_strings: Option<Vec<String>>,
    /// Replaces [`LocalEngineConfig::eos`].
    pub eos: Option<Vec<u32>>,
}

struct Job {
    spec: TurnSpec,
    options: TurnOptions,
    reply: tokio::sync::oneshot::Sender<Result<(Generation, Arc<str>), String>>,
}

/// What the engine thread is sent: a turn to write, or new weights to write the next ones.
enum Message {
    Job(Job),
    Swap {
        model: Box<Qwen>,
        version: String,
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// The version [`LocalEngine`]s report before any [`LocalEngine::swap_weights`] (SGLang's
/// default too).
pub const INITIAL_WEIGHT_VERSION: &str = "default";

/// A policy on its own thread: turns sent to it while it is busy wait, and are generated
/// together in the next batched [`generate_requests`] call (continuous batching at turn
/// granularity). Dropping the engine stops the thread.
///
/// [`swap_weights`](Self::swap_weights) replaces the model between batches: turns sent before
/// the swap are written by the old weights, turns sent after it by the new ones, and every
/// turn reports the version that wrote it.
pub struct LocalEngine {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
    config: LocalEngineConfig,
    load: Arc<LoadCounters>,
}

impl std::fmt::Debug for LocalEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEngine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LocalEngine {
    /// Starts the engine's thread with its own copy of the model.
    pub fn spawn(model: Qwen, tokenizer: Tokenizer, config: LocalEngineConfig) -> Self {
        let (tx, rx) = mpsc::channel::<Message>();
        let thread_config = config.clone();
        let load = Arc::new(LoadCounters::default());
        let thread_load = Arc::clone(&load);
        let thread = std::thread::Builder::new()
            .name(format!("rstar-{}", config.name))
            .spawn(move || serve(model, tokenizer, thread_config, rx, &thread_load))
            .expect("spawning an engine thread");
        LocalEngine {
            tx: Some(tx),
            thread: Some(thread),
            config,
            load,
        }
    }

    /// The engine's load now: its configured KV capacity, the tokens the turns in flight may
    /// hold (context plus `max_new_tokens` each: a local engine has no paged cache, so this is
    /// what they reserve), the turns in the batch being generated and those waiting.
    pub fn load(&self) -> EngineLoad {
        let turns = self.load.turns.load(Ordering::SeqCst);
        let running = self.load.running.load(Ordering::SeqCst).min(turns);
        EngineLoad {
            capacity_tokens: Some(self.config.kv_capacity),
            used_tokens: Some(self.load.tokens.load(Ordering::SeqCst)),
            running: Some(running),
            waiting: Some(turns - running),
        }
    }

    /// The engine's configuration.
    pub fn config(&self) -> &LocalEngineConfig {
        &self.config
    }

    /// Writes one turn with per-turn overrides, returning the whole [`Generation`] (its text and
    /// why it ended, besides what a [`TurnSample`] holds). With default options this is
    /// [`TurnGenerator::generate`].
    pub fn generate_with(
        &self,
        spec: TurnSpec,
        options: TurnOptions,
    ) -> BoxFuture<'_, Result<Generation, BoxError>> {
        let versioned = self.generate_versioned(spec, options);
        Box::pin(async move { versioned.await.map(|(g, _)| g) })
    }

    /// [`generate_with`](Self::generate_with), with the version of the weights that wrote the
    /// turn.
    pub fn generate_versioned(
        &self,
        spec: TurnSpec,
        options: TurnOptions,
    ) -> BoxFuture<'_, Result<(Generation, Arc<str>), BoxError>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let tokens = (spec.context.len() + spec.max_new_tokens) as u64;
        self.load.turns.fetch_add(1, Ordering::SeqCst);
        self.load.tokens.fetch_add(tokens, Ordering::SeqCst);
        let in_flight = InFlight {
            counters: Arc::clone(&self.load),
            tokens,
        };
        let sent = self.send(Message::Job(Job {
            spec,
            options,
            reply,
        }));
        Box::pin(async move {
            let _in_flight = in_flight;
            if !sent {
                return Err("the engine thread has stopped".into());
            }
            match answer.await {
                Ok(Ok(generation)) => Ok(generation),
                Ok(Err(message)) => Err(message.into()),
                Err(_) => Err("the engine thread stopped before answering".into()),
            }
        })
    }

    /// Replaces the engine's weights with `model`'s, reported as `version` from then on. The
    /// turns sent before this call are written by the old weights; the future resolves once
    /// they are and the swap is done, so every turn sent afterwards uses the new ones.
    ///
    /// # Errors
    /// The engine thread has stopped.
    pub fn swap_weights(
        &self,
        model: Qwen,
        version: impl Into<String>,
    ) -> BoxFuture<'_, Result<(), BoxError>> {
        let (done, swapped) = tokio::sync::oneshot::channel();
        let sent = self.send(Message::Swap {
            model: Box::new(model),
            version: version.into(),
            done,
        });
        Box::pin(async move {
            if sent && swapped.await.is_ok() {
                Ok(())
            } else {
                Err("the engine thread has stopped".into())
            }
        })
    }

    fn send(&self, message: Message) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(message).is_ok())
    }
}

impl Drop for LocalEngine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl TurnGenerator for LocalEngine {
    fn name(&self) -> String {
        self.config.name.clone()
    }

    fn kv_capacity(&self) -> u64 {
        self.config.kv_capacity
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        let free = self.load().free_tokens().unwrap_or(self.config.kv_capacity);
        Box::pin(async move { Ok(free) })
    }

    /// Its load counts each turn in flight as its context plus `max_new_tokens`.
    fn kv_accounting(&self) -> rstar_scheduler::KvAccounting {
        rstar_scheduler::KvAccounting::Reserved
    }

    fn generate(&self, spec: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>> {
        let generation = self.generate_versioned(spec, TurnOptions::default());
        Box::pin(async move {
            let (g, version) = generation.await?;
            Ok(TurnSample {
                tokens: g.tokens,
                logprobs: g.logprobs,
                entropies: g.entropies,
                weight_version: Some(version.to_string()),
            })
        })
    }
}

/// The engine thread: take the first waiting turn, gather the others, generate, answer; swap
/// the weights when told, after the turns sent before the swap.
fn serve(
    mut model: Qwen,
    tokenizer: Tokenizer,
    config: LocalEngineConfig,
    rx: mpsc::Receiver<Message>,
    load: &LoadCounters,
) {
    let mut version: Arc<str> = Arc::from(config.weight_version.as_str());
    // A swap met while gathering a batch: done once that batch is written.
    let mut pending: Option<Message> = None;
    loop {
        let first = match pending.take() {
            Some(message) => message,
            None => match rx.recv() {
                Ok(message) => message,
                Err(_) => return,
            },
        };
        let first = match first {
            Message::Job(job) => job,
            Message::Swap {
                model: new,
                version: v,
                done,
            } => {
                model = *new;
                version = Arc::from(v);
                let _ = done.send(());
                continue;
            }
        };
        let mut jobs = vec![first];
        if !config.gather.is_zero() {
            std::thread::sleep(config.gather);
        }
        while jobs.len() < config.max_batch.max(1) {
            match rx.try_recv() {
                Ok(Message::Job(job)) => jobs.push(job),
                Ok(swap) => {
                    pending = Some(swap);
                    break;
                }
                Err(_) => break,
            }
        }
        // A bad request fails alone, not the batch it landed in.
        let (max_pos, vocab) = (
            model.config.max_position_embeddings,
            model.config.vocab_size,
        );
        let mut valid = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.reply.is_closed() {
                // Nobody waits for this turn any more (a client went away): skip it.
                continue;
            }
            let context = &job.spec.context;
            if !context.is_empty() && context.len() >= max_pos {
                // The context fills the model: nothing more can be written (an empty turn,
                // which the scheduled driver records as a truncated response).
                let _ = job.reply.send(Ok((
                    rstar_policy::Generation {
                        tokens: Vec::new(),
                        text: String::new(),
                        logprobs: Vec::new(),
                        entropies: Vec::new(),
                        finish_reason: rstar_policy::FinishReason::Length,
                    },
                    Arc::clone(&version),
                )));
                continue;
            }
            let problem = if context.is_empty() {
                Some("the context is empty".to_string())
            } else {
                context
                    .iter()
                    .find(|&&id| id as usize >= vocab)
                    .map(|id| format!("token id {id} is outside the vocabulary of {vocab}"))
            };
            match problem {
                Some(message) => {
                    let _ = job.reply.send(Err(message));
                }
                None => valid.push(job),
            }
        }
        // One batched call per sampler and EOS set (one call when no turn overrides them).
        let mut groups: Vec<(Sampling, Vec<u32>, Vec<Job>)> = Vec::new();
        for job in valid {
            let sampling = job.options.sampling.unwrap_or(config.sampling);
            let eos = job.options.eos.as_ref().unwrap_or(&config.eos);
            match groups
                .iter_mut()
                .find(|(s, e, _)| *s == sampling && e == eos)
            {
                Some(group) => group.2.push(job),
                None => groups.push((sampling, eos.clone(), vec![job])),
            }
        }
        let batch: usize = groups.iter().map(|g| g.2.len()).sum();
        load.running.store(batch as u64, Ordering::SeqCst);
        for (sampling, eos, jobs) in groups {
            generate_group(&model, &tokenizer, &config, sampling, eos, jobs, &version);
        }
        load.running.store(0, Ordering::SeqCst);
    }
}

/// Generates one group of turns that share a sampler and EOS ids, and answers each.
fn generate_group(
    model: &Qwen,
    tokenizer: &Tokenizer,
    config: &LocalEngineConfig,
    sampling: Sampling,
    eos: Vec<u32>,
    jobs: Vec<Job>,
    version: &Arc<str>,
) {
    let requests: Vec<Request> = jobs
        .iter()
        .map(|j| Request {
            prompt: j.spec.context.clone(),
            stop_strings: j.options.stop_strings.clone(),
            max_new_tokens: Some(j.spec.max_new_tokens),
            seed: Some(j.spec.seed),
        })
        .collect();
    let gen_config = GenerationConfig {
        max_new_tokens: jobs
            .iter()
            .map(|j| j.spec.max_new_tokens)
            .max()
            .unwrap_or(0),
        stop_strings: config.stop_strings.clone(),
        eos,
        sampling,
        seed: 0,
    };
    // A panic inside generation (a backend out of memory on a large batch) fails this group's
    // turns and leaves the engine serving, instead of killing its thread.
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        generate_requests(model, tokenizer, &requests, &gen_config).map_err(|e| e.to_string())
    }))
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("generation panicked: {what}"))
    });
    match generated {
        Ok(outputs) => {
            for (job, g) in jobs.into_iter().zip(outputs) {
                let _ = job.reply.send(Ok((g, Arc::clone(version))));
            }
        }
        Err(message) => {
            for job in jobs {
                let _ = job.reply.send(Err(message.clone()));
            }
        }
    }
}
