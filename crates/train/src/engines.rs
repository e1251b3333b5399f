//! Rollouts on remote engines (`rl.engines` as URLs, `rstar train --engines URL[,URL…]`):
//! `rstar serve`, SGLang or vLLM servers write every RL step's turns through the scheduled
//! driver, and the trainer keeps them on-policy.
//!
//! Before a step's first request the trainer publishes the policy it will update: HF-layout
//! safetensors (`config.json`, `model.safetensors`, the tokenizer) in
//! `<publish_dir>/<version>/`, a directory every engine must be able to read, then each
//! engine's reload call ([`RemoteEngine::load_weights`]). The version is `step-N`, the policy
//! after `N` RL steps (`step-0` is the one RL starts from). Engines that report versions
//! (`rstar serve`, SGLang) must report it for every turn of the step: a turn written by
//! other weights fails the step instead of being trained on. vLLM reports none; its reload
//! call returns once the new weights serve.
//!
//! With a LoRA policy (`rl.lora`) the trainer publishes the adapter alone, a few megabytes
//! instead of the model (`rl.publish_lora`, `adapter` by default): PEFT's files in
//! `<publish_dir>/<version>/` loaded with each engine's `POST /v1/load_lora_adapter
//! {lora_name: version, lora_path}` (`rstar serve`; vLLM started with `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), or pushed to `rstar serve`'s
//! `/v1/upload_lora_adapter` with `rl.publish_via: http`. The step's requests name the adapter as
//! their `model`, and every turn must come back from it: `rstar serve` reports the adapter as
//! the turn's weight version and vLLM as the answer's `model`, so the turn-by-turn check holds
//! on vLLM too. The previous step's adapter is unloaded once every engine has the new one. The
//! engines must serve the base the adapters train over: the model RL starts from (the SFT
//! checkpoint when SFT ran). `merged` publishes the merged model through the reloads above
//! instead, for engines without runtime adapters (SGLang here).
//!
//! Every step also compares the engines' sampling log-probs with the trainer's recomputation
//! on the same tokens ([`logprob_gap`]): with the same weights and tokens they agree to float
//! rounding, so a gap says that weight sync or tokenisation is wrong.

use rstar_episode::IoError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use rstar_policy::{
    Qwen, Tokenizer, WeightDtype, safetensors_bytes, save_dir, save_dir_untied,
    sequence_target_logprobs,
};
use std::time::Instant;

use crate::error::Error;
use rstar_engine::remote::{EngineKind, RemoteEngine, RemoteEngineConfig};
use rstar_engine::{BoxError, BoxFuture, TurnGenerator, TurnSample, TurnSpec};
use rstar_episode::episode::Trajectory;
use rstar_policy::Sampling;

use super::config::{PublishLora, PublishVia};
use super::optim::{MICRO_BATCH_TOKENS, micro_batches, pack, packed, sequence_row, shifted_values};

/// The remote engines of a run and what they serve.
#[derive(Debug)]
pub struct RemoteRollouts {
    urls: Vec<String>,
    kinds: Vec<EngineKind>,
    publish_dir: PathBuf,
    dtype: WeightDtype,
    via: PublishVia,
    tokenizer: Arc<Tokenizer>,
    /// `$RSTAR_ENGINE_API_KEY` when set ([`ENGINE_API_KEY_ENV`]).
    api_key: Option<String>,
    /// With a LoRA policy, whether its adapter is published rather than the merged model.
    lora: PublishLora,
    /// The version every engine serves, once published, and whether it is an adapter.
    published: Mutex<Option<(String, bool)>>,
    /// Per engine, whether it still answers (a lost engine is never asked again).
    alive: Mutex<Vec<bool>>,
}

/// The directory of a version's untied copy, for vLLM engines.
fn untied_name(version: &str) -> String {
    format!("{version}-untied")
}

/// The weight version of the policy after `steps` RL steps.
pub fn weight_version(steps: u64) -> String {
    format!("step-{steps}")
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io(IoError::new(PathBuf::from("<tokio runtime>"), e)))
}

/// The environment variable holding the key the trainer sends to its remote engines
/// (`Authorization: Bearer <key>`; `rstar serve --api-key`, vLLM's and SGLang's `--api-key`).
/// Read from the environment, not the run config, so that it is never written to
/// `config.json`.
pub const ENGINE_API_KEY_ENV: &str = "RSTAR_ENGINE_API_KEY";

fn engine_api_key() -> Option<String> {
    std::env::var(ENGINE_API_KEY_ENV)
        .ok()
        .filter(|k| !k.is_empty())
}

fn engine(
    url: &str,
    tokenizer: &Arc<Tokenizer>,
    api_key: Option<&str>,
) -> Result<RemoteEngine, Error> {
    let mut config = RemoteEngineConfig::new(url, Vec::new());
    config.api_key = api_key.map(str::to_string);
    Ok(RemoteEngine::new(config, Arc::clone(tokenizer))?)
}

impl RemoteRollouts {
    /// Checks every URL and learns each server's kind (`kind`, or detected from
    /// `GET /v1/models`); weights are published under `publish_dir` in `dtype`.
    ///
    /// # Errors
    /// A bad URL, a server that does not answer, or one whose kind cannot be told.
    pub fn connect(
        urls: &[String],
        kind: Option<EngineKind>,
        publish_dir: PathBuf,
        dtype: WeightDtype,
        tokenizer: &Tokenizer,
    ) -> Result<Self, Error> {
        let tokenizer = Arc::new(tokenizer.clone());
        let api_key = engine_api_key();
        let engines = urls
            .iter()
            .map(|u| engine(u, &tokenizer, api_key.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        let kinds = match kind {
            Some(kind) => vec![kind; urls.len()],
            None => runtime()?.block_on(async {
                let mut kinds = Vec::with_capacity(engines.len());
                for e in &engines {
                    kinds.push(e.detect_kind().await?);
                }
                Ok::<_, Error>(kinds)
            })?,
        };
        Ok(RemoteRollouts {
            urls: urls.to_vec(),
            kinds,
            publish_dir,
            dtype,
            via: PublishVia::Disk,
            lora: PublishLora::Adapter,
            tokenizer,
            api_key,
            published: Mutex::new(None),
            alive: Mutex::new(vec![true; urls.len()]),
        })
    }

    /// Pushes the weights over HTTP (`rstar serve`'s `/upload_weights`) instead of writing them
    /// to the publish directory.
    ///
    /// # Errors
    /// With `http`, an engine that is not `rstar serve` (SGLang and vLLM read weights from a
    /// path only).
    pub fn via(mut self, via: PublishVia) -> Result<Self, Error> {
        if via == PublishVia::Http
            && let Some(i) = self.kinds.iter().position(|&k| k != EngineKind::Rstar)
        {
            return Err(Error::TrainConfig {
                field: "rl.publish_via".into(),
                message: format!(
                    "is `http`, which only `rstar serve` takes, but {} is {}: publish to a path every engine reads (--publish-dir)",
                    self.urls[i],
                    self.kinds[i].name()
                ),
            });
        }
        self.via = via;
        Ok(self)
    }

    /// How a LoRA policy is published (`rl.publish_lora`).
    ///
    /// # Errors
    /// `adapter` with an SGLang engine (this trainer loads adapters only on `rstar serve` and
    /// vLLM).
    pub fn lora(mut self, lora: PublishLora) -> Result<Self, Error> {
        if lora == PublishLora::Adapter
            && let Some(i) = self.kinds.iter().position(|&k| k == EngineKind::Sglang)
        {
            return Err(Error::TrainConfig {
                field: "rl.publish_lora".into(),
                message: format!(
                    "is `adapter`, but {} is SGLang, which this trainer does not load adapters on: set it to `merged` (--publish-lora merged) to publish the merged model",
                    self.urls[i]
                ),
            });
        }
        self.lora = lora;
        Ok(self)
    }

    /// `url (kind)` for every engine, comma-separated, for the run's log.
    pub fn describe(&self) -> String {
        self.urls
            .iter()
            .zip(&self.kinds)
            .map(|(u, k)| format!("{u} ({})", k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The engines' URLs, in the order of `rl.engines`.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The indices (into [`urls`](Self::urls)) of the engines still in use.
    pub fn alive(&self) -> Vec<usize> {
        let alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        (0..alive.len()).filter(|&i| alive[i]).collect()
    }

    /// Stops using engine `index` (into [`urls`](Self::urls)) for the rest of the run.
    pub fn lose(&self, index: usize) {
        if let Some(a) = self
            .alive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(index)
        {
            *a = false;
        }
    }

    /// The error when no engine is left: each URL, and how to go on.
    fn all_lost(&self, why: &str) -> Error {
        Error::Engine(rstar_engine::Error::Remote {
            url: self.urls.join(","),
            message: format!(
                "every engine is gone ({why}); restart them and resume the run from its last checkpoint (rstar train --resume RUN)"
            ),
        })
    }

    /// The version every engine serves now (`None` before the first publication).
    pub fn published(&self) -> Option<String> {
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(v, _)| v.clone())
    }

    /// Whether the version every engine serves is a LoRA adapter, which requests name as their
    /// `model`.
    fn serves_adapter(&self) -> bool {
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|(_, adapter)| *adapter)
    }

    /// Makes every engine serve `model` as `version` (nothing to do when it already does):
    /// its adapter when it has one and `rl.publish_lora` is `adapter`
    /// ([`publish_adapter`](Self::publish_adapter)), else the model, written to
    /// `<publish_dir>/<version>/` (or pushed, `rl.publish_via: http`) and reloaded by each
    /// engine; the previous version's directory is removed once every engine has moved on. An
    /// engine that does not answer ([`Error::Unavailable`]) is lost for the rest of the run
    /// (logged); the others go on. Returns what was sent, `None` when nothing was.
    ///
    /// # Errors
    /// Writing the weights, an engine that refuses or fails the reload, or no engine left.
    pub fn publish(&self, model: &Qwen, version: &str) -> Result<Option<Published>, Error> {
        let previous = self.published();
        if previous.as_deref() == Some(version) {
            return Ok(None);
        }
        let started = Instant::now();
        let (bytes, adapter) = if model.lora.is_some() && self.lora == PublishLora::Adapter {
            (self.publish_adapter(model, version)?, true)
        } else {
            (
                self.publish_model(model, version, previous.as_deref())?,
                false,
            )
        };
        Ok(Some(Published {
            bytes,
            secs: started.elapsed().as_secs_f64(),
            adapter,
        }))
    }

    /// [`publish`](Self::publish) of the whole model (merged with its adapters, if any): the
    /// bytes written (or pushed to every engine).
    fn publish_model(
        &self,
        model: &Qwen,
        version: &str,
        previous: Option<&str>,
    ) -> Result<u64, Error> {
        if self.via == PublishVia::Http {
            return self.push(model, version);
        }
        let dir = self.publish_dir.join(version);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| Error::Io(IoError::new(dir.clone(), e)))?;
        }
        save_dir(model, &self.tokenizer, &dir, self.dtype)?;
        // vLLM keeps a tied output head on reload: its engines read an untied copy.
        let untied = (model.config.tie_word_embeddings
            && self
                .alive()
                .iter()
                .any(|&i| self.kinds[i] == EngineKind::Vllm))
        .then(|| self.publish_dir.join(untied_name(version)));
        if let Some(untied) = &untied {
            if untied.exists() {
                std::fs::remove_dir_all(untied)
                    .map_err(|e| Error::Io(IoError::new(untied.clone(), e)))?;
            }
            save_dir_untied(model, &self.tokenizer, untied, self.dtype)?;
        }
        // vLLM reloads from the directory it was started with unless told a path; every kind
        // here is told this one.
        let absolute = |dir: &Path| {
            std::fs::canonicalize(dir).map_err(|e| Error::Io(IoError::new(dir.to_path_buf(), e)))
        };
        let dir = absolute(&dir)?;
        let untied = untied.as_deref().map(absolute).transpose()?;
        let sent = dir_bytes(&dir) + untied.as_deref().map_or(0, dir_bytes);
        self.reload_each(version, false, |i, e| {
            let from = match (self.kinds[i], &untied) {
                (EngineKind::Vllm, Some(untied)) => untied,
                _ => &dir,
            };
            async move { e.load_weights(self.kinds[i], from, version).await }
        })?;
        if let Some(old) = previous {
            // Best effort: a leftover directory costs disk, not correctness.
            let _ = std::fs::remove_dir_all(self.publish_dir.join(old));
            let _ = std::fs::remove_dir_all(self.publish_dir.join(untied_name(old)));
        }
        Ok(sent)
    }

    /// [`publish`](Self::publish) over HTTP: the weights serialised once, then pushed to every
    /// engine still in use.
    fn push(&self, model: &Qwen, version: &str) -> Result<u64, Error> {
        let bytes = bytes::Bytes::from(safetensors_bytes(&model.hf_tensors()?, self.dtype)?);
        let engines = self.alive().len() as u64;
        self.reload_each(version, false, |_, e| {
            let bytes = bytes.clone();
            async move { e.upload_weights(bytes, version).await }
        })?;
        Ok(bytes.len() as u64 * engines)
    }

    /// [`publish`](Self::publish) of `model`'s LoRA adapter as `version`: PEFT's files in
    /// `<publish_dir>/<version>/` loaded by each engine (`/v1/load_lora_adapter`), or one file
    /// pushed to each (`/v1/upload_lora_adapter`, `rl.publish_via: http`); then the previous
    /// adapter is unloaded from every engine and its directory removed. The bytes written (or
    /// pushed to every engine).
    fn publish_adapter(&self, model: &Qwen, version: &str) -> Result<u64, Error> {
        let previous = self
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // An engine left running by an earlier run may hold an adapter of this name: the
        // run's first load replaces it.
        let first = previous.is_none();
        let sent = if self.via == PublishVia::Http {
            let bytes = bytes::Bytes::from(rstar_policy::lora::adapter_bytes(model, ADAPTER_BASE)?);
            let engines = self.alive().len() as u64;
            self.reload_each(version, true, |_, e| {
                let bytes = bytes.clone();
                async move {
                    if first {
                        let _ = e.unload_lora_adapter(version).await;
                    }
                    e.upload_lora_adapter(version, bytes).await
                }
            })?;
            bytes.len() as u64 * engines
        } else {
            let dir = self.publish_dir.join(version);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| Error::Io(IoError::new(dir.clone(), e)))?;
            }
            rstar_policy::lora::save_adapter(model, &dir, ADAPTER_BASE)?;
            let dir =
                std::fs::canonicalize(&dir).map_err(|e| Error::Io(IoError::new(dir.clone(), e)))?;
            let sent = dir_bytes(&dir);
            self.reload_each(version, true, |_, e| {
                let dir = dir.clone();
                async move {
                    if first {
                        let _ = e.unload_lora_adapter(version).await;
                    }
                    e.load_lora_adapter(version, &dir).await
                }
            })?;
            sent
        };
        if let Some((old, was_adapter)) = previous {
            if was_adapter {
                self.unload_everywhere(&old);
            }
            // Best effort: a leftover directory costs disk, not correctness.
            let _ = std::fs::remove_dir_all(self.publish_dir.join(&old));
            let _ = std::fs::remove_dir_all(self.publish_dir.join(untied_name(&old)));
        }
        Ok(sent)
    }

    /// Unloads the adapter `name` from every engine still in use; a failure is logged, not
    /// fatal (an adapter left loaded costs the engine memory, not correctness: requests name
    /// the new one).
    fn unload_everywhere(&self, name: &str) {
        let Ok(rt) = runtime() else { return };
        rt.block_on(async {
            for i in self.alive() {
                let Ok(remote) = engine(&self.urls[i], &self.tokenizer, self.api_key.as_deref())
                else {
                    continue;
                };
                if let Err(e) = remote.unload_lora_adapter(name).await {
                    tracing::warn!("unloading the previous adapter `{name}`: {e}");
                }
            }
        });
    }

    /// Makes every engine still in use serve `version` with `reload` (engine index, client),
    /// one engine after another (each reload is a disk read or an upload, and the errors name
    /// the engine). An engine that does not answer is lost (logged); the others go on. Records
    /// the version once done.
    ///
    /// # Errors
    /// The first other reload error, or no engine left.
    fn reload_each<F, Fut>(&self, version: &str, adapter: bool, reload: F) -> Result<(), Error>
    where
        F: Fn(usize, RemoteEngine) -> Fut,
        Fut: std::future::Future<Output = Result<(), rstar_engine::Error>>,
    {
        runtime()?.block_on(async {
            for i in self.alive() {
                let remote = engine(&self.urls[i], &self.tokenizer, self.api_key.as_deref())?;
                match reload(i, remote).await {
                    Ok(()) => {}
                    Err(lost @ rstar_engine::Error::Unavailable { .. }) => {
                        tracing::warn!("{lost}; the run goes on without it");
                        self.lose(i);
                    }
                    Err(other) => return Err(other.into()),
                }
            }
            Ok::<_, Error>(())
        })?;
        if self.alive().is_empty() {
            return Err(self.all_lost(&format!("none took weight version {version}")));
        }
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((version.to_string(), adapter));
        Ok(())
    }

    /// One generator per engine still in use (the indices are [`alive`](Self::alive)'s) for a
    /// step: the stage's temperature and the template's stop strings, log-probs on, checking
    /// that engines with versions report `version` for every turn. When the engines serve an
    /// adapter, requests name it as their `model` and every engine reports it.
    ///
    /// # Errors
    /// A bad URL (checked by [`connect`](Self::connect) already).
    pub fn generators(
        &self,
        stop_strings: &[String],
        temperature: f32,
        version: &str,
        need_logprobs: bool,
    ) -> Result<Vec<Arc<dyn TurnGenerator>>, Error> {
        self.alive()
            .into_iter()
            .map(|i| {
                let (url, kind) = (&self.urls[i], self.kinds[i]);
                let mut config = RemoteEngineConfig::new(url.clone(), stop_strings.to_vec());
                config.sampling = Sampling::Temperature { temperature };
                config.logprobs = true;
                config.api_key = self.api_key.clone();
                if self.serves_adapter() {
                    config.model = Some(version.to_string());
                    config.model_is_version = true;
                }
                let engine = RemoteEngine::new(config, Arc::clone(&self.tokenizer))?;
                Ok(Arc::new(Checked {
                    engine,
                    expected: version.to_string(),
                    kind,
                    need_logprobs,
                }) as Arc<dyn TurnGenerator>)
            })
            .collect()
    }
}

/// What one publication sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Published {
    /// Bytes written to the publish directory, or pushed over HTTP (times the engines).
    pub bytes: u64,
    /// Seconds from the start of writing to the last engine serving it.
    pub secs: f64,
    /// Whether it was a LoRA adapter (else the whole model).
    pub adapter: bool,
}

/// The `base_model_name_or_path` of a published adapter's config: the engines know their base.
const ADAPTER_BASE: &str = "base";

/// The bytes of the files directly in `dir` (0 when it cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A remote engine whose turns must come from the published weights, and carry one log-prob
/// per token when the loss corrects with them.
struct Checked {
    engine: RemoteEngine,
    expected: String,
    kind: EngineKind,
    need_logprobs: bool,
}

impl TurnGenerator for Checked {
    fn name(&self) -> String {
        self.engine.name()
    }

    fn kv_capacity(&self) -> u64 {
        self.engine.kv_capacity()
    }

    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        self.engine.free_kv_tokens()
    }

    /// `rstar serve` reports its turns as the local engine counts them (context plus
    /// `max_new_tokens`); vLLM and SGLang report the KV their pages hold.
    fn kv_accounting(&self) -> rstar_scheduler::KvAccounting {
        match self.kind {
            EngineKind::Rstar => rstar_scheduler::KvAccounting::Reserved,
            EngineKind::Vllm | EngineKind::Sglang => rstar_scheduler::KvAccounting::Tokens,
        }
    }

    fn generate(&self, spec: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>> {
        Box::pin(async move {
            let sample = self.engine.generate(spec).await?;
            check_version(
                &self.engine.name(),
                self.kind,
                sample.weight_version.as_deref(),
                &self.expected,
            )?;
            if self.need_logprobs {
                check_logprobs(
                    &self.engine.name(),
                    self.kind,
                    sample.tokens.len(),
                    sample.logprobs.len(),
                )?;
            }
            Ok(sample)
        })
    }
}

/// Whether a turn carries one log-prob per token, as the rollout correction needs.
///
/// # Errors
/// A turn without them, naming the engine and the setting that needs them.
pub fn check_logprobs(
    engine: &str,
    kind: EngineKind,
    tokens: usize,
    logprobs: usize,
) -> Result<(), String> {
    if logprobs == tokens {
        return Ok(());
    }
    Err(format!(
        "{engine}: the {} server returned {logprobs} log-probs for a turn of {tokens} tokens; the rollout correction (rl.grpo.rollout_correction, --rollout-correction) weighs each token by the engine's log-prob, so it needs one per token id (a server that omits `logprobs`, or returns text the trainer re-tokenises, cannot serve it: turn the correction off)",
        kind.name()
    ))
}

/// Whether a turn's reported weight version is the published one (vLLM reports none).
///
/// # Errors
/// Stale weights, or an engine of a versioned kind that reported no version.
pub fn check_version(
    engine: &str,
    kind: EngineKind,
    reported: Option<&str>,
    expected: &str,
) -> Result<(), String> {
    match (reported, kind.reports_versions()) {
        (Some(v), _) if v == expected => Ok(()),
        (Some(v), _) => Err(format!(
            "{engine}: a turn was written by weight version `{v}`, but the trainer published `{expected}`; stale rollouts are never trained on"
        )),
        (None, true) => Err(format!(
            "{engine}: the {} server reported no weight version for a turn (give --engine-kind vllm for a server without versions)",
            kind.name()
        )),
        (None, false) => Ok(()),
    }
}

/// The largest and the mean `|engine − trainer|` log-prob over the assistant tokens of the
/// trajectories whose engine log-probs are known (`engine[i]` for `trajectories[i]`, one per
/// assistant token), the trainer's recomputed with `policy` on the same token ids. `None` when
/// no trajectory has engine log-probs.
pub fn logprob_gap(
    policy: &Qwen,
    trajectories: &[Trajectory],
    engine: &[Option<Vec<f32>>],
) -> Option<(f64, f64)> {
    // Per trajectory with engine log-probs: its sequence row and those log-probs.
    let (seqs, theirs): (Vec<_>, Vec<&[f32]>) = trajectories
        .iter()
        .zip(engine)
        .filter_map(|(t, lp)| {
            let lp = lp.as_deref().filter(|l| !l.is_empty())?;
            Some((sequence_row(t), lp))
        })
        .unzip();
    if seqs.is_empty() {
        return None;
    }
    let device: Device = policy.device();
    let all: Vec<usize> = (0..seqs.len()).collect();
    let (mut max, mut sum, mut n) = (0.0f64, 0.0f64, 0usize);
    for part in micro_batches(&all, &seqs, MICRO_BATCH_TOKENS) {
        let (tokens, _, len) = pack(&packed(&part, &seqs), &device);
        let logp = sequence_target_logprobs(policy, tokens);
        let values: Vec<f32> = logp
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        for (k, &i) in part.iter().enumerate() {
            let w = &seqs[i].1;
            // The engine's values on the trainer's shifted grid (one aligner for the gap and
            // the rollout correction, `optim::shifted_values`).
            let Some(grid) = shifted_values(w, theirs[i], len) else {
                continue;
            };
            for (c, b) in grid.iter().enumerate() {
                if !w.get(c + 1).is_some_and(|&x| x > 0.0) {
                    continue;
                }
                let a = values.get(k * (len - 1) + c).copied();
                let d = a.map_or(f64::INFINITY, |a| f64::from((a - b).abs()));
                max = max.max(d);
                sum += d;
                n += 1;
            }
        }
    }
    (n > 0).then(|| (max, sum / n as f64))
}

/// The publish directory of a run: `rl.publish_dir`, else `<out>/published`.
pub fn publish_dir(configured: Option<&Path>, out: &Path) -> PathBuf {
    configured.map_or_else(|| out.join("published"), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_where_engines_report_them() {
        assert!(check_version("e", EngineKind::Rstar, Some("step-3"), "step-3").is_ok());
        let stale = check_version("e", EngineKind::Rstar, Some("step-2"), "step-3").unwrap_err();
        assert!(
            stale.contains("`step-2`") && stale.contains("`step-3`"),
            "{stale}"
        );
        let silent = check_version("e", EngineKind::Sglang, None, "step-3").unwrap_err();
        assert!(silent.contains("--engine-kind vllm"), "{silent}");
        assert!(check_version("e", EngineKind::Vllm, None, "step-3").is_ok());
        // A version vLLM does report is still checked.
        assert!(check_version("e", EngineKind::Vllm, Some("x"), "step-3").is_err());
        assert_eq!(weight_version(0), "step-0");
    }

    #[test]
    fn turns_without_a_log_prob_per_token_are_refused_for_the_correction() {
        assert!(check_logprobs("e", EngineKind::Vllm, 5, 5).is_ok());
        assert!(check_logprobs("e", EngineKind::Rstar, 0, 0).is_ok());
        let none = check_logprobs("http://e:1", EngineKind::Vllm, 5, 0).unwrap_err();
        assert!(
            none.contains("http://e:1")
                && none.contains("0 log-probs for a turn of 5 tokens")
                && none.contains("rl.grpo.rollout_correction"),
            "{none}"
        );
    }

    #[test]
    fn engines_read_as_a_count_a_list_or_a_comma_separated_string() {
        use super::super::config::Engines;
        let two = Engines::Remote(vec!["http://a:1".into(), "http://b:2".into()]);
        let read = |text: &str| serde_json::from_str::<Engines>(text);
        assert_eq!(read("2").unwrap(), Engines::Local(2));
        assert_eq!(read(r#"["http://a:1", "http://b:2"]"#).unwrap(), two);
        assert_eq!(read(r#""http://a:1, http://b:2""#).unwrap(), two);
        assert_eq!("http://a:1,http://b:2".parse::<Engines>().unwrap(), two);
        assert_eq!("4".parse::<Engines>().unwrap(), Engines::Local(4));
        // Written back as they are read.
        assert_eq!(serde_json::to_string(&Engines::Local(3)).unwrap(), "3");
        assert_eq!(read(&serde_json::to_string(&two).unwrap()).unwrap(), two);
        for bad in [r#""ftp://x""#, "true", r#""""#, "-1"] {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("URL") || e.contains("engines"), "{bad}: {e}");
        }
    }
}
