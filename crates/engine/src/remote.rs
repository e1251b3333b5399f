//! [`RemoteEngine`]: a [`TurnGenerator`] over the OpenAI-compatible completions API that vLLM,
//! SGLang, llama.cpp and `rstar serve` speak, so a model served elsewhere writes the turns of
//! an evaluation or a rollout.
//!
//! Each turn is one `POST /v1/completions` whose `prompt` is the context as token ids (exact:
//! no re-tokenisation of earlier turns), with `max_tokens` cut to what fits the server's
//! context, the turn's `seed`, the engine's stop strings (kept in the output with vLLM's
//! `include_stop_str_in_output`) and sampler, and `logprobs: 1`. The turn's tokens are the
//! returned `token_ids` when the server sends them (`rstar serve` does; vLLM does with
//! `return_token_ids`), else the returned text tokenized with our tokenizer; its log-probs are
//! `logprobs.token_logprobs` when they line up with the tokens. Connection errors, timeouts,
//! 429 and 5xx answers are retried with exponential backoff; other answers fail the turn with
//! the server's message.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rstar_engine::{TurnGenerator, TurnSpec};
//! use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
//! use rstar_policy::Tokenizer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let tokenizer = Arc::new(Tokenizer::char());
//! let config = RemoteEngineConfig::new("http://127.0.0.1:8000", vec!["</c>".into()]);
//! let engine = RemoteEngine::new(config, Arc::clone(&tokenizer))?;
//! let context = tokenizer.encode("Q:2+2?\nA:")?;
//! let spec = TurnSpec { rollout: 0, turn: 0, context, max_new_tokens: 32, seed: 7 };
//! let sample = engine.generate(spec).await?;
//! println!("{}", tokenizer.decode(&sample.tokens)?);
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rstar_policy::{Sampling, Tokenizer};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::wire::{
    CollectiveRpc, CommonRequest, CompletionRequest, ErrorResponse, FinishReason, LoadLoraAdapter,
    ModelList, Stop, StopReason, TextChoice, TextCompletion, UnloadLoraAdapter,
    UpdateWeightsFromDisk, UpdateWeightsResponse, WeightVersion,
};
use crate::{BoxError, BoxFuture, EngineLoad, TurnGenerator, TurnSample, TurnSpec};

/// How a [`RemoteEngine`] talks to its server. Its `Debug` output shows whether an API key is
/// set, never the key.
#[derive(Clone, PartialEq)]
pub struct RemoteEngineConfig {
    /// The server, `http://host:port` (a trailing `/v1` is accepted; plain HTTP only).
    pub url: String,
    /// The model to ask for; `None` takes the first model of `GET /v1/models`.
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Strings that end a turn (kept in the turn).
    pub stop_strings: Vec<String>,
    /// The sampler, sent as `temperature` (0 for greedy), `top_k`, `top_p`.
    pub sampling: Sampling,
    /// The time limit of one HTTP request.
    pub timeout: Duration,
    /// Retries after the first attempt, on connection errors, timeouts, 429 and 5xx.
    pub max_retries: u32,
    /// The first retry's delay; each later one doubles it.
    pub backoff: Duration,
    /// The KV capacity reported to the scheduler, in tokens.
    pub kv_capacity: u64,
    /// The server's context length; `None` reads vLLM's `max_model_len` from `GET /v1/models`
    /// (and sends `max_tokens` uncut when the server does not say).
    pub max_model_len: Option<usize>,
    /// Whether to ask for per-token log-probabilities.
    pub logprobs: bool,
    /// The engine's name in logs; `None` uses the URL.
    pub name: Option<String>,
    /// `model` names a LoRA adapter that is named for its weight version (`step-N`): a turn
    /// whose answer carries no weight version reports the answer's `model`, which vLLM sets to
    /// the adapter that wrote it.
    pub model_is_version: bool,
}

/// What a `Debug` output shows for an API key: whether one is set, never the key, so a
/// config written to a log or a panic message does not leak it.
pub fn redacted(key: &Option<String>) -> Option<&'static str> {
    key.as_ref().map(|_| "<redacted>")
}

impl std::fmt::Debug for RemoteEngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured, so that a new field is a compile error here until it is shown.
        let RemoteEngineConfig {
            url,
            model,
            api_key,
            stop_strings,
            sampling,
            timeout,
            max_retries,
            backoff,
            kv_capacity,
            max_model_len,
            logprobs,
            name,
            model_is_version,
        } = self;
        f.debug_struct("RemoteEngineConfig")
            .field("url", url)
            .field("model", model)
            .field("api_key", &redacted(api_key))
            .field("stop_strings", stop_strings)
            .field("sampling", sampling)
            .field("timeout", timeout)
            .field("max_retries", max_retries)
            .field("backoff", backoff)
            .field("kv_capacity", kv_capacity)
            .field("max_model_len", max_model_len)
            .field("logprobs", logprobs)
            .field("name", name)
            .field("model_is_version", model_is_version)
            .finish()
    }
}

impl RemoteEngineConfig {
    /// Temperature 1, a 600 s timeout, 4 retries from 0.5 s, a 64 × 4096-token KV budget,
    /// log-probs on, the model and its context length read from the server.
    pub fn new(url: impl Into<String>, stop_strings: Vec<String>) -> Self {
        RemoteEngineConfig {
            url: url.into(),
            model: None,
            api_key: None,
            stop_strings,
            sampling: Sampling::Temperature { temperature: 1.0 },
            timeout: Duration::from_secs(600),
            max_retries: 4,
            backoff: Duration::from_millis(500),
            kv_capacity: 64 * 4096,
            max_model_len: None,
            logprobs: true,
            name: None,
            model_is_version: false,
        }
    }
}

/// What the server said about its model.
#[derive(Debug, Clone)]
struct ModelInfo {
    name: String,
    max_model_len: Option<usize>,
}

/// A [`TurnGenerator`] backed by an OpenAI-compatible server (see the module docs).
pub struct RemoteEngine {
    config: RemoteEngineConfig,
    /// `http://host:port[/prefix]` without a trailing slash or `/v1`.
    base: String,
    tokenizer: Arc<Tokenizer>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    info: tokio::sync::OnceCell<ModelInfo>,
    /// The KV capacity the server last reported on `/metrics` (0: none reported).
    reported_capacity: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("base", &self.base)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One failed attempt: whether it is worth retrying, and why it failed.
struct Failure {
    retry: bool,
    message: String,
}

impl RemoteEngine {
    /// Checks the URL and the options; connects on the first turn.
    pub fn new(config: RemoteEngineConfig, tokenizer: Arc<Tokenizer>) -> Result<Self, Error> {
        let bad = |message: String| Error::Remote {
            url: config.url.clone(),
            message,
        };
        let mut base = config.url.trim().trim_end_matches('/').to_string();
        if let Some(stripped) = base.strip_suffix("/v1") {
            base = stripped.to_string();
        }
        if !base.starts_with("http://") {
            return Err(bad(
                "the URL must start with http:// (no TLS client is built in; put a plain-HTTP proxy in front of an https server)".into(),
            ));
        }
        base.parse::<Uri>()
            .map_err(|e| bad(format!("not a valid URL: {e}")))?;
        if config.timeout.is_zero() {
            return Err(bad("`timeout` must be positive".into()));
        }
        if config.model.as_deref() == Some("") {
            return Err(bad("`model` must not be empty".into()));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(RemoteEngine {
            config,
            base,
            tokenizer,
            http,
            info: tokio::sync::OnceCell::new(),
            reported_capacity: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The engine's configuration.
    pub fn config(&self) -> &RemoteEngineConfig {
        &self.config
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::Remote {
            url: self.base.clone(),
            message: message.into(),
        }
    }

    /// The server did not answer: the engine is gone ([`Error::Unavailable`]).
    fn unavailable(&self, message: impl Into<String>) -> Error {
        Error::Unavailable {
            url: self.base.clone(),
            message: message.into(),
        }
    }

    /// One HTTP exchange with a JSON body: (status, body).
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Bytes>,
    ) -> Result<(StatusCode, Bytes), Failure> {
        let payload = body.map(|b| ("application/json", b.clone()));
        self.exchange_payload(method, path, payload).await
    }

    /// One HTTP exchange with a body of any type: (status, body).
    async fn exchange_payload(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Bytes)>,
    ) -> Result<(StatusCode, Bytes), Failure> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(key) = &self.config.api_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let payload = match body {
            Some((content_type, bytes)) => {
                request = request.header(CONTENT_TYPE, content_type);
                bytes
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(payload)).map_err(|e| Failure {
            retry: false,
            message: format!("building the request: {e}"),
        })?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| Failure {
                retry: true,
                message: format!("connection failed: {e}"),
            })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| Failure {
                    retry: true,
                    message: format!("reading the response: {e}"),
                })?
                .to_bytes();
            Ok((status, body))
        };
        match tokio::time::timeout(self.config.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(Failure {
                retry: true,
                message: format!("no answer within {:?}", self.config.timeout),
            }),
        }
    }

    /// `GET path` with retries, the 2xx answer read as `T`.
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path` of `body` as JSON with retries, the 2xx answer read as `T`.
    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, Error> {
        // Through a `Value`, as the bodies were built before the wire types: an `f32` goes as
        // the `f64` it widens to, so the bytes stay those earlier versions sent.
        let body = serde_json::to_value(body)
            .map_err(|e| self.error(format!("{path}: building the request: {e}")))?;
        self.call(Method::POST, path, Some(&Bytes::from(body.to_string())))
            .await
    }

    /// An exchange with retries, the 2xx answer read as `T` (JSON first, so an answer that is
    /// not JSON is told from one of another shape).
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Bytes>,
    ) -> Result<T, Error> {
        let mut attempt = 0;
        loop {
            let failure = match self.exchange(method.clone(), path, body).await {
                Ok((status, bytes)) if status.is_success() => {
                    let json: Value = serde_json::from_slice(&bytes)
                        .map_err(|e| self.error(format!("{path}: the answer is not JSON: {e}")))?;
                    return T::deserialize(json).map_err(|e| self.error(format!("{path}: {e}")));
                }
                Ok((status, bytes)) => Failure {
                    retry: status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS,
                    message: format!("{path}: HTTP {status}: {}", error_message(&bytes)),
                },
                Err(failure) => failure,
            };
            if !failure.retry || attempt >= self.config.max_retries {
                if failure.retry {
                    return Err(self.unavailable(format!(
                        "{} (after {} attempts)",
                        failure.message,
                        attempt + 1
                    )));
                }
                return Err(self.error(failure.message));
            }
            let delay = self.config.backoff.saturating_mul(1 << attempt.min(16));
            tracing::warn!(url = %self.base, attempt, "{}; retrying in {delay:?}", failure.message);
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// The served model and its context length, asked once.
    async fn model_info(&self) -> Result<&ModelInfo, Error> {
        self.info
            .get_or_try_init(|| async {
                if let (Some(name), Some(len)) = (&self.config.model, self.config.max_model_len) {
                    return Ok(ModelInfo {
                        name: name.clone(),
                        max_model_len: Some(len),
                    });
                }
                let models: ModelList = self.get("/v1/models").await?;
                let card = match &self.config.model {
                    Some(name) => models.data.iter().find(|m| m.id.as_ref() == Some(name)),
                    None => models.data.first(),
                };
                let name = match (&self.config.model, card) {
                    (Some(name), _) => name.clone(),
                    (None, Some(card)) => card
                        .id
                        .clone()
                        .ok_or_else(|| self.error("/v1/models: `data[0].id` is not a string"))?,
                    (None, None) => return Err(self.error("/v1/models: `data` lists no model")),
                };
                // vLLM lists an adapter without a context length: its base's (`parent`) holds.
                let parent = card
                    .and_then(|c| c.parent.as_ref())
                    .and_then(|p| models.data.iter().find(|m| m.id.as_ref() == Some(p)));
                let max_model_len = self.config.max_model_len.or_else(|| {
                    card.and_then(|c| c.max_model_len)
                        .or_else(|| parent.and_then(|c| c.max_model_len))
                        .and_then(|n| usize::try_from(n).ok())
                });
                Ok(ModelInfo {
                    name,
                    max_model_len,
                })
            })
            .await
    }

    /// The completion request of a turn.
    fn request_body(&self, model: &str, spec: &TurnSpec, max_tokens: usize) -> CompletionRequest {
        let (temperature, top_k, top_p) = match self.config.sampling {
            Sampling::Greedy => (0.0, None, None),
            Sampling::Temperature { temperature } => (temperature, None, None),
            Sampling::TopK { k, temperature } => (temperature, Some(k as i64), None),
            Sampling::TopP { p, temperature } => (temperature, None, Some(p)),
        };
        let stops = &self.config.stop_strings;
        CompletionRequest {
            common: CommonRequest {
                model: Some(model.to_string()),
                max_tokens: Some(max_tokens),
                seed: Some(spec.seed),
                n: Some(1),
                stream: Some(false),
                include_stop_str_in_output: Some(true),
                stop: (!stops.is_empty()).then(|| Stop(stops.clone())),
                temperature: Some(temperature),
                top_k,
                top_p,
                ..CommonRequest::default()
            },
            prompt: Some(Value::from(spec.context.clone())),
            logprobs: self.config.logprobs.then_some(1),
            no_stop_trim: Some(true),
            skip_special_tokens: Some(false),
            spaces_between_special_tokens: Some(false),
            return_token_ids: Some(true),
            ..CompletionRequest::default()
        }
    }

    /// The choice's text with the stop string that ended it put back: servers other than vLLM
    /// (SGLang without `no_stop_trim`, llama.cpp, OpenAI) trim it, and the episode needs it to
    /// see a complete tool call. The stop string is vLLM's `stop_reason` when it is one of ours,
    /// else the only configured stop string; with several and no `stop_reason` the text is
    /// kept as it is.
    fn with_stop_string(&self, text: &str, choice: &TextChoice) -> String {
        let stops = &self.config.stop_strings;
        if choice.finish_reason != Some(FinishReason::Stop)
            || stops.iter().any(|s| text.ends_with(s.as_str()))
        {
            return text.to_string();
        }
        let reason = match &choice.stop_reason {
            Some(Some(StopReason::Text(reason))) => Some(reason.as_str()),
            _ => None,
        };
        let stop = match reason {
            Some(reason) if stops.iter().any(|s| s == reason) => Some(reason),
            _ if stops.len() == 1 => Some(stops[0].as_str()),
            _ => None,
        };
        match stop {
            Some(stop) => format!("{text}{stop}"),
            None => text.to_string(),
        }
    }

    /// Reads the first choice of a completion answer into a turn.
    fn read_choice(&self, answer: &TextCompletion) -> Result<TurnSample, Error> {
        let choice = answer
            .choices
            .first()
            .ok_or_else(|| self.error("/v1/completions: the answer has no `choices[0]`"))?;
        let tokens: Vec<u32> = match &choice.token_ids {
            Some(ids) => ids.clone(),
            None => {
                let text = choice.text.as_deref().ok_or_else(|| {
                    self.error("/v1/completions: `choices[0].text` is not a string")
                })?;
                let text = self.with_stop_string(text, choice);
                self.tokenizer
                    .encode(&text)
                    .map_err(|e| self.error(format!("tokenizing `choices[0].text`: {e}")))?
            }
        };
        let logprobs: Vec<f32> = choice
            .logprobs
            .as_ref()
            .and_then(|l| l.token_logprobs.clone())
            .filter(|lps| lps.len() == tokens.len())
            .unwrap_or_default();
        // `rstar serve` reports the version per choice; SGLang in the response's metadata; vLLM
        // names the adapter that wrote it.
        let weight_version = choice
            .weight_version
            .clone()
            .or_else(|| {
                answer
                    .metadata
                    .as_ref()
                    .and_then(|m| m.weight_version.clone())
            })
            .or_else(|| {
                (self.config.model_is_version && !answer.model.is_empty())
                    .then(|| answer.model.clone())
            });
        Ok(TurnSample {
            tokens,
            logprobs,
            entropies: Vec::new(),
            weight_version,
        })
    }

    async fn turn(&self, spec: TurnSpec) -> Result<TurnSample, Error> {
        if spec.context.is_empty() {
            return Err(self.error("the context is empty"));
        }
        let info = self.model_info().await?;
        let max_tokens = match info.max_model_len {
            Some(len) => spec
                .max_new_tokens
                .min(len.saturating_sub(spec.context.len())),
            None => spec.max_new_tokens,
        };
        if max_tokens == 0 {
            if info
                .max_model_len
                .is_some_and(|len| spec.context.len() > len)
            {
                return Err(self.error(format!(
                    "the context has {} tokens; the server's model takes at most {}",
                    spec.context.len(),
                    info.max_model_len.unwrap_or(0)
                )));
            }
            return Ok(TurnSample::default());
        }
        let body = self.request_body(&info.name, &spec, max_tokens);
        let answer: TextCompletion = self.post("/v1/completions", &body).await?;
        self.read_choice(&answer)
    }
}

/// What serves an engine's URL, which says how its weights are updated
/// ([`RemoteEngine::load_weights`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// `rstar serve`: SGLang's `/update_weights_from_disk`, with versions.
    Rstar,
    /// SGLang: `/update_weights_from_disk`, with versions.
    Sglang,
    /// vLLM: `/collective_rpc` `reload_weights`, then `/reset_prefix_cache`; no versions.
    Vllm,
}

impl EngineKind {
    /// The kind's name: `rstar`, `sglang`, `vllm`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Rstar => "rstar",
            EngineKind::Sglang => "sglang",
            EngineKind::Vllm => "vllm",
        }
    }

    /// Whether the server reports the version of the weights that wrote each completion.
    pub fn reports_versions(self) -> bool {
        !matches!(self, EngineKind::Vllm)
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rstar" => Ok(EngineKind::Rstar),
            "sglang" => Ok(EngineKind::Sglang),
            "vllm" => Ok(EngineKind::Vllm),
            other => Err(format!(
                "`{other}` is not an engine kind: expected `rstar`, `sglang` or `vllm`"
            )),
        }
    }
}

impl RemoteEngine {
    /// The server's kind, from the `owned_by` of its first model in `GET /v1/models`
    /// (`rstar`, `sglang`, `vllm`).
    ///
    /// # Errors
    /// The server does not answer, or names another owner (give the kind explicitly then).
    pub async fn detect_kind(&self) -> Result<EngineKind, Error> {
        let models: ModelList = self.get("/v1/models").await?;
        let owner = models.data.first().map_or("", |m| m.owned_by.as_str());
        owner.parse().map_err(|_| {
            self.error(format!(
                "/v1/models says the model is owned by `{owner}`; cannot tell whether this is rstar serve, SGLang or vLLM (give the kind: --engine-kind rstar|sglang|vllm)"
            ))
        })
    }

    /// Makes the server serve the HF weights in `dir` (a directory it can read) from its next
    /// request on, as `version` where the kind keeps versions:
    /// - `rstar` and `sglang`: `POST /update_weights_from_disk {model_path, weight_version}`,
    ///   then `GET /get_weight_version` must say `version`;
    /// - `vllm`: `POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path"}}`,
    ///   then `POST /reset_prefix_cache` (cached prefixes hold the old weights' KV).
    ///
    /// # Errors
    /// The server refuses or fails the update, or reports another version afterwards.
    pub async fn load_weights(
        &self,
        kind: EngineKind,
        dir: &std::path::Path,
        version: &str,
    ) -> Result<(), Error> {
        let path = dir.to_string_lossy();
        match kind {
            EngineKind::Rstar | EngineKind::Sglang => {
                let body = UpdateWeightsFromDisk {
                    model_path: Some(path.into_owned()),
                    weight_version: Some(version.to_string()),
                    ..UpdateWeightsFromDisk::default()
                };
                let answer: UpdateWeightsResponse =
                    self.post("/update_weights_from_disk", &body).await?;
                if answer.success == Some(false) {
                    return Err(self.error(format!(
                        "/update_weights_from_disk: {}",
                        answer.message.as_deref().unwrap_or("failed")
                    )));
                }
                let served = self.weight_version().await?;
                if served.as_deref() != Some(version) {
                    return Err(self.error(format!(
                        "after the update the server reports weight version {served:?}, not `{version}`"
                    )));
                }
            }
            EngineKind::Vllm => {
                let body = CollectiveRpc {
                    method: Some("reload_weights".into()),
                    kwargs: Some(Map::from_iter([(
                        "weights_path".to_string(),
                        Value::from(path.into_owned()),
                    )])),
                };
                // Any JSON answer will do: vLLM's results are the workers' return values.
                let _: IgnoredAny = self.post("/collective_rpc", &body).await?;
                self.call_no_body(Method::POST, "/reset_prefix_cache")
                    .await?;
            }
        }
        Ok(())
    }

    /// The server's load from `GET /metrics` ([`EngineLoad::from_prometheus`]: vLLM's and
    /// `rstar serve`'s gauges, SGLang's with `--enable-metrics`). One attempt, at most 5 s: a
    /// server without the route (404) gives an all-`None` load.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the server does not answer; another error status.
    pub async fn load(&self) -> Result<EngineLoad, Error> {
        let exchange = self.exchange(Method::GET, "/metrics", None);
        let answer = tokio::time::timeout(Duration::from_secs(5), exchange).await;
        match answer {
            Ok(Ok((status, body))) if status.is_success() => {
                let load = EngineLoad::from_prometheus(&String::from_utf8_lossy(&body));
                if let Some(c) = load.capacity_tokens {
                    self.reported_capacity
                        .store(c, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(load)
            }
            Ok(Ok((StatusCode::NOT_FOUND, _))) => Ok(EngineLoad::default()),
            Ok(Ok((status, body))) => {
                Err(self.error(format!("/metrics: HTTP {status}: {}", error_message(&body))))
            }
            Ok(Err(failure)) => Err(self.unavailable(format!("/metrics: {}", failure.message))),
            Err(_) => Err(self.unavailable("/metrics: no answer within 5 s")),
        }
    }

    /// Pushes the weights to an `rstar serve` engine: `POST /upload_weights?weight_version=V`
    /// with `safetensors` (one file of the served architecture in HF naming,
    /// `rstar_policy::safetensors_bytes`) as the body, then checks `GET /get_weight_version`.
    /// For engines that cannot read the trainer's disk. One attempt: a reload is not repeated
    /// blindly.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the server does not answer; the server's refusal (a
    /// body of another architecture); another version reported afterwards.
    pub async fn upload_weights(&self, safetensors: Bytes, version: &str) -> Result<(), Error> {
        let path = format!("/upload_weights?weight_version={}", query_value(version));
        match self
            .exchange_payload(
                Method::POST,
                &path,
                Some(("application/octet-stream", safetensors)),
            )
            .await
        {
            Ok((status, _)) if status.is_success() => {}
            Ok((status, body)) => {
                return Err(self.error(format!(
                    "/upload_weights: HTTP {status}: {}",
                    error_message(&body)
                )));
            }
            Err(failure) => {
                return Err(self.unavailable(format!("/upload_weights: {}", failure.message)));
            }
        }
        let served = self.weight_version().await?;
        if served.as_deref() != Some(version) {
            return Err(self.error(format!(
                "after the upload the server reports weight version {served:?}, not `{version}`"
            )));
        }
        Ok(())
    }

    /// Serves the PEFT adapter directory `dir` (one the server reads) as `name`:
    /// `POST /v1/load_lora_adapter {lora_name, lora_path}` (vLLM started with `--enable-lora`
    /// and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, and `rstar serve`), then `GET /v1/models`
    /// must list it. One attempt: a load is not repeated blindly.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the server does not answer; its refusal (an adapter its base
    /// cannot take, a name already loaded, a vLLM without runtime LoRA updating); an adapter
    /// not listed afterwards.
    pub async fn load_lora_adapter(&self, name: &str, dir: &std::path::Path) -> Result<(), Error> {
        let body = LoadLoraAdapter {
            lora_name: Some(name.to_string()),
            lora_path: Some(dir.to_string_lossy().into_owned()),
            load_inplace: None,
        };
        self.once("/v1/load_lora_adapter", &body)
            .await
            .map_err(|e| match e {
                // No such route: a vLLM without runtime adapters.
                Error::Remote { url, message } if message.contains("HTTP 404 Not Found: Not Found") => {
                    Error::Remote {
                        url,
                        message: format!(
                            "{message} (vLLM serves this route only when started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment)"
                        ),
                    }
                }
                other => other,
            })?;
        self.check_listed(name).await
    }

    /// [`load_lora_adapter`](Self::load_lora_adapter) for engines that cannot read the
    /// trainer's disk (`rstar serve` only): `POST /v1/upload_lora_adapter?lora_name=N` with
    /// `adapter` (one file, `rstar_policy::lora::adapter_bytes`) as the body.
    ///
    /// # Errors
    /// As [`load_lora_adapter`](Self::load_lora_adapter).
    pub async fn upload_lora_adapter(&self, name: &str, adapter: Bytes) -> Result<(), Error> {
        let path = format!("/v1/upload_lora_adapter?lora_name={}", query_value(name));
        self.once_payload(&path, ("application/octet-stream", adapter))
            .await?;
        self.check_listed(name).await
    }

    /// Stops serving the adapter `name`: `POST /v1/unload_lora_adapter {lora_name}`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the server does not answer; its refusal (an unknown name).
    pub async fn unload_lora_adapter(&self, name: &str) -> Result<(), Error> {
        let body = UnloadLoraAdapter {
            lora_name: Some(name.to_string()),
        };
        self.once("/v1/unload_lora_adapter", &body).await
    }

    async fn check_listed(&self, name: &str) -> Result<(), Error> {
        let models: ModelList = self.get("/v1/models").await?;
        if models.data.iter().any(|m| m.id.as_deref() == Some(name)) {
            return Ok(());
        }
        Err(self.error(format!(
            "the adapter `{name}` was loaded, but GET /v1/models does not list it"
        )))
    }

    /// One `POST path` of `body` as JSON; any 2xx answer (vLLM answers its adapter routes
    /// with text) is success.
    async fn once(&self, path: &str, body: &impl Serialize) -> Result<(), Error> {
        let body = serde_json::to_vec(body)
            .map_err(|e| self.error(format!("{path}: building the request: {e}")))?;
        self.once_payload(path, ("application/json", Bytes::from(body)))
            .await
    }

    async fn once_payload(&self, path: &str, payload: (&'static str, Bytes)) -> Result<(), Error> {
        match self
            .exchange_payload(Method::POST, path, Some(payload))
            .await
        {
            Ok((status, _)) if status.is_success() => Ok(()),
            Ok((status, body)) => {
                Err(self.error(format!("{path}: HTTP {status}: {}", error_message(&body))))
            }
            Err(failure) => Err(self.unavailable(format!("{path}: {}", failure.message))),
        }
    }

    /// The weight version the server reports (`GET /get_weight_version`, `rstar serve` and
    /// SGLang).
    ///
    /// # Errors
    /// The server does not answer, or its answer has no `weight_version` string.
    pub async fn weight_version(&self) -> Result<Option<String>, Error> {
        let answer: WeightVersion = self.get("/get_weight_version").await?;
        Ok(answer.weight_version)
    }

    /// [`call`](Self::call) for routes that answer 2xx with an empty or non-JSON body.
    async fn call_no_body(&self, method: Method, path: &str) -> Result<(), Error> {
        match self.exchange(method, path, None).await {
            Ok((status, _)) if status.is_success() => Ok(()),
            Ok((status, bytes)) => {
                Err(self.error(format!("{path}: HTTP {status}: {}", error_message(&bytes))))
            }
            Err(failure) => Err(self.unavailable(failure.message)),
        }
    }
}

/// An error for the scheduler: [`Error::Unavailable`] becomes
/// [`rstar_scheduler::EngineUnavailable`], so the dispatcher moves the engine's rollouts to
/// the others instead of failing the run.
pub(crate) fn into_box(e: Error) -> BoxError {
    match e {
        Error::Unavailable { .. } => Box::new(rstar_scheduler::EngineUnavailable(e.to_string())),
        other => BoxError::from(other),
    }
}

/// `value` percent-encoded for a query string.
fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The message of an error answer: OpenAI's `error.message`, FastAPI's `detail`, or the text
/// (its first 500 characters when it is not JSON).
fn error_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => ErrorResponse::deserialize(v)
            .ok()
            .and_then(|e| e.message().map(str::to_string))
            .unwrap_or_else(|| text.into_owned()),
        Err(_) => text.chars().take(500).collect(),
    }
}

impl TurnGenerator for RemoteEngine {
    fn name(&self) -> String {
        self.config
            .name
            .clone()
            .unwrap_or_else(|| self.base.clone())
    }

    /// The capacity the server reported on `/metrics` the last time it was asked
    /// ([`free_kv_tokens`](TurnGenerator::free_kv_tokens) asks), else
    /// [`RemoteEngineConfig::kv_capacity`].
    fn kv_capacity(&self) -> u64 {
        match self
            .reported_capacity
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            0 => self.config.kv_capacity,
            reported => reported,
        }
    }

    /// What the server reports free on `/metrics` ([`RemoteEngine::load`]); the configured
    /// capacity when it reports no capacity or use (the dispatcher's own book then decides
    /// alone). A server that does not answer is [`rstar_scheduler::EngineUnavailable`].
    fn free_kv_tokens(&self) -> BoxFuture<'_, Result<u64, BoxError>> {
        Box::pin(async move {
            match self.load().await {
                Ok(load) => Ok(load.free_tokens().unwrap_or_else(|| self.kv_capacity())),
                Err(e @ Error::Unavailable { .. }) => Err(into_box(e)),
                Err(e) => {
                    tracing::warn!(url = %self.base, "{e}; using the configured KV capacity");
                    Ok(self.config.kv_capacity)
                }
            }
        })
    }

    fn generate(&self, spec: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>> {
        Box::pin(async move { self.turn(spec).await.map_err(into_box) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An answer as the server's JSON.
    fn answer(v: Value) -> TextCompletion {
        serde_json::from_value(v).unwrap()
    }

    /// A request as it goes on the wire.
    fn wire(request: CompletionRequest) -> Value {
        serde_json::to_value(request).unwrap()
    }

    fn engine(url: &str) -> Result<RemoteEngine, Error> {
        RemoteEngine::new(
            RemoteEngineConfig::new(url, vec!["</c>".into()]),
            Arc::new(Tokenizer::char()),
        )
    }

    #[test]
    fn debug_shows_whether_a_key_is_set_never_the_key() {
        let mut config = RemoteEngineConfig::new("http://h:1", Vec::new());
        let shown = format!("{config:?}");
        assert!(shown.contains("api_key: None"), "{shown}");
        assert!(shown.contains("url: \"http://h:1\""), "{shown}");
        config.api_key = Some("sk-secret-123".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("api_key: Some(\"<redacted>\")"), "{shown}");
    }

    #[test]
    fn urls() {
        assert_eq!(engine("http://h:1/v1/").unwrap().base, "http://h:1");
        assert_eq!(engine("http://h:1").unwrap().base, "http://h:1");
        let err = engine("https://h:1").unwrap_err().to_string();
        assert!(
            err.starts_with("remote engine https://h:1: the URL must start with http://"),
            "{err}"
        );
    }

    #[test]
    fn request_and_answer() {
        let mut e = engine("http://h:1").unwrap();
        e.config.sampling = Sampling::TopK {
            k: 5,
            temperature: 0.5,
        };
        let spec = TurnSpec {
            rollout: 1,
            turn: 2,
            context: vec![3, 4],
            max_new_tokens: 9,
            seed: 11,
        };
        let body = wire(e.request_body("m", &spec, 7));
        assert_eq!(body["prompt"], json!([3, 4]));
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["seed"], 11);
        // Seeds go signed, as vLLM's API takes them (it refuses anything above i64::MAX).
        let high = TurnSpec {
            seed: u64::MAX - 1,
            ..spec.clone()
        };
        assert_eq!(wire(e.request_body("m", &high, 7))["seed"], -2);
        assert_eq!(body["stop"], json!(["</c>"]));
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["logprobs"], 1);
        // Token ids win over the text; log-probs that do not line up are dropped.
        let a = answer(
            json!({"choices": [{"text": "zz", "token_ids": [9, 8, 7], "logprobs": {"token_logprobs": [-0.5, -1.0, -0.25]}}]}),
        );
        let s = e.read_choice(&a).unwrap();
        assert_eq!(
            (s.tokens, s.logprobs),
            (vec![9, 8, 7], vec![-0.5, -1.0, -0.25])
        );
        let a =
            answer(json!({"choices": [{"text": "ab", "logprobs": {"token_logprobs": [-0.5]}}]}));
        let s = e.read_choice(&a).unwrap();
        let tok = Tokenizer::char();
        assert_eq!(s.tokens, tok.encode("ab").unwrap());
        assert!(s.logprobs.is_empty());
        let err = e
            .read_choice(&answer(json!({"choices": []})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no `choices[0]`"), "{err}");
    }

    #[test]
    fn issue_39_the_typed_request_is_the_one_built_by_hand_before() {
        let e = engine("http://h:1").unwrap();
        let spec = TurnSpec {
            rollout: 0,
            turn: 0,
            context: vec![3, 4],
            max_new_tokens: 9,
            seed: 11,
        };
        assert_eq!(
            wire(e.request_body("m", &spec, 7)),
            json!({
                "model": "m", "prompt": [3, 4], "max_tokens": 7, "seed": 11, "n": 1,
                "stream": false, "include_stop_str_in_output": true, "no_stop_trim": true,
                "skip_special_tokens": false, "spaces_between_special_tokens": false,
                "return_token_ids": true, "stop": ["</c>"], "logprobs": 1, "temperature": 1.0,
            })
        );
        // Token ids that are not ids fail the turn, naming the field.
        let err = serde_json::from_value::<TextCompletion>(
            json!({"choices": [{"text": "a", "token_ids": "a"}]}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("`token_ids`: invalid type: string"),
            "{err}"
        );
        // An answer without text or ids says so.
        let err = e
            .read_choice(&answer(json!({"choices": [{"text": null}]})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`choices[0].text` is not a string"), "{err}");
    }

    #[test]
    fn a_trimmed_stop_string_is_put_back() {
        let mut e = engine("http://h:1").unwrap();
        fn text_of(e: &RemoteEngine, v: Value) -> String {
            let tokens = e.read_choice(&answer(v)).unwrap().tokens;
            Tokenizer::char().decode(&tokens).unwrap()
        }
        // llama.cpp / OpenAI: stopped on the only stop string, which they trim.
        assert_eq!(
            text_of(
                &e,
                json!({"choices": [{"text": "<c>print(1)", "finish_reason": "stop"}]})
            ),
            "<c>print(1)</c>"
        );
        // vLLM with include_stop_str_in_output: already there, not doubled.
        assert_eq!(
            text_of(
                &e,
                json!({"choices": [{"text": "<c>x</c>", "finish_reason": "stop"}]})
            ),
            "<c>x</c>"
        );
        // Ended by length (or EOS, reported as "stop" with no stop string by vLLM as
        // `stop_reason: null` — with several stop strings nothing is guessed).
        assert_eq!(
            text_of(
                &e,
                json!({"choices": [{"text": "<c>pri", "finish_reason": "length"}]})
            ),
            "<c>pri"
        );
        e.config.stop_strings = vec!["</c>".into(), "</a>".into()];
        assert_eq!(
            text_of(
                &e,
                json!({"choices": [{"text": "so 4", "finish_reason": "stop", "stop_reason": "</a>"}]})
            ),
            "so 4</a>"
        );
        assert_eq!(
            text_of(
                &e,
                json!({"choices": [{"text": "so 4", "finish_reason": "stop", "stop_reason": null}]})
            ),
            "so 4"
        );
        let body = wire(e.request_body(
            "m",
            &TurnSpec {
                rollout: 0,
                turn: 0,
                context: vec![1],
                max_new_tokens: 1,
                seed: 0,
            },
            1,
        ));
        assert_eq!(body["no_stop_trim"], true);
    }

    #[test]
    fn error_messages() {
        assert_eq!(error_message(br#"{"error": {"message": "bad"}}"#), "bad");
        assert_eq!(error_message(br#"{"detail": "Not Found"}"#), "Not Found");
        assert_eq!(error_message(b"oops"), "oops");
    }
}
