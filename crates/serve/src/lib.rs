//! `rstar serve`: a policy behind the OpenAI-compatible HTTP API that vLLM, SGLang and
//! llama.cpp speak, so the same clients (the `openai` Python package, `curl`, our own
//! [`RemoteEngine`](rstar_engine::remote::RemoteEngine)) talk to our model and to theirs.
//!
//! Routes:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/completions` | continue a prompt (a string, token ids, or a list of either) |
//! | `POST /v1/chat/completions` | `messages` rendered with the template's chat layout, then continued |
//! | `GET /v1/models` | the one served model, with vLLM's `max_model_len` |
//! | `GET /health` | 200 while the server runs |
//! | `POST /update_weights_from_disk` | SGLang's: load `model_path` (an HF directory of the same architecture) into every engine, reported as `weight_version` |
//! | `POST /collective_rpc` | vLLM's, method `reload_weights` only: reload from `kwargs.weights_path`, else from the served directory |
//! | `POST /reset_prefix_cache` | vLLM's; there is no prefix cache to reset, so it only answers 200 |
//! | `GET /get_weight_version` | SGLang's: `{"weight_version": …}` (`"default"` until the first update) |
//! | `POST /v1/load_lora_adapter` | vLLM's: serve the PEFT adapter in `lora_path` as `lora_name` (see below) |
//! | `POST /v1/upload_lora_adapter` | the same, the adapter sent as the body (`?lora_name=N`) |
//! | `POST /v1/unload_lora_adapter` | vLLM's: stop serving `lora_name` |
//!
//! Weight updates are how a trainer keeps its rollout engines on-policy: it writes its new
//! weights to a directory and calls one of the two update routes. Requests already waiting
//! are answered by the old weights, later ones by the new; every completion reports the
//! version that wrote it, per choice (`weight_version`) and as SGLang does
//! (`metadata.weight_version`, the oldest of the choices').
//!
//! LoRA adapters are served as vLLM serves them: a request whose `model` names a loaded adapter
//! is answered by the base with that adapter merged in, and reports the adapter's name as its
//! weight version, so a trainer that publishes each step's adapter under a new name (`step-N`)
//! sends megabytes instead of the model. The routes, the one-file upload format and what is
//! refused are in the `adapters` module's documentation (`docs/serve.md`).
//!
//! Requests are answered by [`LocalEngine`]s, so concurrent requests (and the `n` choices of
//! one request) are batched into one generation call. Each request carries its own sampler and
//! stop strings ([`TurnOptions`]); choice `j` samples with seed `seed + j`, so a seeded request
//! returns the same tokens whichever batch it lands in (up to float rounding).
//!
//! `stream: true` answers both endpoints with server-sent events in OpenAI's chunk format
//! (`chat.completion.chunk` objects with `choices[].delta`, then `data: [DONE]`), a last chunk
//! with `usage` and no choices when `stream_options.include_usage` is set. A choice is generated
//! whole and then sent as one chunk per token (where the tokens decode to whole characters), in one
//! response: this engine batches whole turns and has no per-token callback.
//!
//! A chat request with `tools` gets the Hermes `<tool_call>{"name", "arguments"}</tool_call>`
//! blocks of the model's text as OpenAI `tool_calls` (`id`, `type: "function"`,
//! `function.name`, `function.arguments` as a JSON string) with `finish_reason: "tool_calls"`,
//! in streams too, as vLLM's `hermes` tool parser returns them; `tool_choice` may be `auto` or
//! `none`.
//!
//! Beyond OpenAI's fields the server reads vLLM's `top_k`, `ignore_eos` and
//! `include_stop_str_in_output`, and every choice carries vLLM's `token_ids` (the generated ids,
//! a stop string's or EOS token included) and `stop_reason`. Log-probabilities are the model's at
//! temperature 1 (what the trainer recomputes); `top_logprobs` is not reported. Bad requests get
//! a 400 with OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`, naming
//! the field.
//!
//! ```no_run
//! use burn::tensor::Device;
//! use rstar_serve::{ServeConfig, start};
//! use rstar_policy::{Qwen, QwenConfig, Tokenizer};
//!
//! # async fn run() -> Result<(), rstar_serve::Error> {
//! let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex())?;
//! let mut config = ServeConfig::new("tiny");
//! config.port = 0; // a free port
//! let server = start(model, Tokenizer::char(), config).await?;
//! println!("serving on {}", server.url());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Crate features
//! - `flex`, `wgpu`, `cuda`, `tch`, `fusion`, `autotune`: the policy's backends and GPU options,
//!   forwarded to `rstar-policy` (see its features); none by default: the binary picks one.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use burn::tensor::Device;
use rstar_policy::{FinishReason, Generation, Qwen, QwenConfig, Sampling, Tokenizer};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use rstar_engine::wire::{
    self, ChatCompletion, ChatCompletionChunk, ChatDeltaChoice, ChatLogprobs, ChatRequest,
    CommonRequest, Completion, CompletionRequest, Content, Delta, ErrorObject, ErrorResponse,
    Message, ModelCard, ModelList, ResponseMessage, StopReason, TextChoice, TextCompletion,
    TextLogprobs, TokenLogprob, Usage,
};
use rstar_engine::{LocalEngine, LocalEngineConfig, TurnOptions, TurnSpec};
use rstar_episode::chat::{ChatFormat, ChatMessage, ChatRole, ChatToolCall, Conversation, Json};
use rstar_episode::template::{Template, TemplateFormat};

mod adapters;
pub mod error;
mod stream;

pub use error::Error;
mod tool_calls;

/// How [`start`] serves a model.
#[derive(Clone, PartialEq)]
pub struct ServeConfig {
    /// The address to bind (loopback by default).
    pub host: IpAddr,
    /// The port; 0 picks a free one ([`ServerHandle::addr`] tells which).
    pub port: u16,
    /// The model's name in requests and responses (`model`); a request naming another model
    /// gets a 404.
    pub model_name: String,
    /// Engines, each with its own copy of the model on its own thread (one per GPU; several
    /// share the CPU).
    pub engines: usize,
    /// The most sequences in one batched generation call.
    pub max_batch: usize,
    /// How long an engine waits after the first waiting request for others to join its batch.
    pub gather: Duration,
    /// The chat layout of `/v1/chat/completions`.
    pub template: TemplateFormat,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// `max_tokens` of a completion request that gives none (OpenAI's default is 16); a chat
    /// request without one may use the whole context.
    pub default_max_tokens: usize,
    /// The most choices (`n` times the prompts) one request may ask for.
    pub max_choices: usize,
    /// The most choices being generated or waiting at once, over all requests; a request that
    /// would exceed it is answered 429 at once instead of queueing without bound.
    pub max_in_flight: usize,
    /// The served model's directory: what vLLM's `reload_weights` without a `weights_path`
    /// reloads (`None`: such a call is refused).
    pub model_dir: Option<PathBuf>,
    /// When set, every route but `GET /health` answers 401 unless the request carries
    /// `Authorization: Bearer <key>` (as vLLM's and SGLang's `--api-key`): the weight updates
    /// (`/upload_weights`, `/update_weights_from_disk`, `/collective_rpc`) replace the served
    /// model, so a server reachable from other machines should have one.
    pub api_key: Option<String>,
    /// What one client can hold: open connections, and how long a request head and body may
    /// take to arrive ([`rstar_http::ConnectionLimits`]).
    pub limits: rstar_http::ConnectionLimits,
    /// The most LoRA adapters loaded at once (`/v1/load_lora_adapter`); each holds a merged
    /// copy of the projections per engine. 0 refuses every adapter.
    pub max_lora_adapters: usize,
}

/// Shows whether an API key is set, never the key.
impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured, so that a new field is a compile error here until it is shown.
        let ServeConfig {
            host,
            port,
            model_name,
            engines,
            max_batch,
            gather,
            template,
            max_body_bytes,
            default_max_tokens,
            max_choices,
            max_in_flight,
            model_dir,
            api_key,
            limits,
            max_lora_adapters,
        } = self;
        f.debug_struct("ServeConfig")
            .field("host", host)
            .field("port", port)
            .field("model_name", model_name)
            .field("engines", engines)
            .field("max_batch", max_batch)
            .field("gather", gather)
            .field("template", template)
            .field("max_body_bytes", max_body_bytes)
            .field("default_max_tokens", default_max_tokens)
            .field("max_choices", max_choices)
            .field("max_in_flight", max_in_flight)
            .field("model_dir", model_dir)
            .field("api_key", &rstar_engine::remote::redacted(api_key))
            .field("limits", limits)
            .field("max_lora_adapters", max_lora_adapters)
            .finish()
    }
}

impl ServeConfig {
    /// Loopback port 8000, one engine, batches of up to 64, 2 ms gathering, the ChatML layout,
    /// 32 MiB bodies, 16 default completion tokens, at most 256 choices a request and 1024 in
    /// flight, at most 4 LoRA adapters.
    pub fn new(model_name: impl Into<String>) -> Self {
        ServeConfig {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8000,
            model_name: model_name.into(),
            engines: 1,
            max_batch: 64,
            gather: Duration::from_millis(2),
            template: TemplateFormat::ChatMl,
            max_body_bytes: 32 << 20,
            default_max_tokens: 16,
            max_choices: 256,
            max_in_flight: 1024,
            model_dir: None,
            api_key: None,
            limits: rstar_http::ConnectionLimits::new(),
            max_lora_adapters: 4,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Serve(m.to_string()));
        if self.engines == 0 {
            return bad("`engines` must be at least 1");
        }
        if self.max_batch == 0 {
            return bad("`max_batch` must be at least 1");
        }
        if self.model_name.is_empty() {
            return bad("`model_name` must not be empty");
        }
        if self.max_choices == 0 {
            return bad("`max_choices` must be at least 1");
        }
        if self.api_key.as_deref().is_some_and(str::is_empty) {
            return bad("`api_key` must not be empty (leave it unset for none)");
        }
        if let Err(e) = self.limits.validate() {
            return Err(Error::Serve(format!("`limits`: {e}")));
        }
        Ok(())
    }
}

/// A running server: its address, and the way to stop it.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// The bound address (the real port when the config asked for 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://host:port` (append `/v1` for OpenAI clients).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections, lets in-flight requests finish, and stops the engines.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Serve(format!("serving {}: {e}", self.addr))),
            Err(e) => Err(Error::Serve(format!("the server task failed: {e}"))),
        }
    }
}

/// Binds the configured address and serves `model` until [`ServerHandle::shutdown`]. Needs a
/// multi-threaded tokio runtime.
pub async fn start(
    model: Qwen,
    tokenizer: Tokenizer,
    config: ServeConfig,
) -> Result<ServerHandle, Error> {
    let app = router(model, tokenizer, config.clone())?;
    let addr = SocketAddr::new(config.host, config.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Serve(format!("binding {addr}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Serve(format!("reading the bound address: {e}")))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        rstar_http::serve(listener, app, config.limits, async move {
            let _ = stopped.await;
        })
        .await
    });
    Ok(ServerHandle {
        addr,
        stop: Some(stop),
        task,
    })
}

/// The routes of the API over `config.engines` engines serving `model`, for embedding in
/// another axum application ([`start`] serves exactly this).
pub fn router(model: Qwen, tokenizer: Tokenizer, config: ServeConfig) -> Result<Router, Error> {
    config.validate()?;
    let max_model_len = model.config.max_position_embeddings;
    let vocab_size = model.config.vocab_size.min(tokenizer.vocab_size());
    let eos = model.config.eos_token_ids.clone();
    let model_config = model.config.clone();
    let upload_limit = model_config.num_params().saturating_mul(4) + (16 << 20);
    let device = model.device();
    let engines = spawn_engines(
        EngineSetup {
            tokenizer: &tokenizer,
            eos: &eos,
            config: &config,
            max_model_len,
        },
        &model,
        None,
    );
    let chat_system = default_system_turn(config.template);
    let state = Arc::new(AppState {
        engines,
        tokenizer,
        max_model_len,
        vocab_size,
        eos,
        created: unix_now(),
        requests: AtomicU64::new(0),
        in_flight: Arc::new(tokio::sync::Semaphore::new(config.max_in_flight.max(1))),
        chat_system,
        config: config.clone(),
        model_config,
        device,
        weight_version: std::sync::RwLock::new(rstar_engine::INITIAL_WEIGHT_VERSION.to_string()),
        updating: tokio::sync::Mutex::new(()),
        base: std::sync::RwLock::new(model),
        adapters: adapters::Adapters::default(),
    });
    let api_key = config.api_key.clone();
    let budget_layer = axum::middleware::from_fn_with_state(
        rstar_http::BodyBudget::new(config.max_body_bytes.saturating_add(4 << 20)),
        rstar_http::BodyBudget::layer,
    );
    let routes = Router::new()
        // Prompts are parsed and tokenized within a bound of bytes at once, so large ones
        // queue behind each other and `/health` and small requests stay fast.
        .route(
            "/v1/completions",
            post(completions).layer(budget_layer.clone()),
        )
        .route(
            "/v1/chat/completions",
            post(chat_completions).layer(budget_layer),
        )
        .route("/v1/models", get(models))
        .route("/update_weights_from_disk", post(update_weights_from_disk))
        .route("/collective_rpc", post(collective_rpc))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/get_weight_version", get(get_weight_version))
        .route("/metrics", get(metrics))
        .route(
            "/upload_weights",
            // The weights in f32 and a header: far above the body limit of a request.
            post(upload_weights).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route("/v1/load_lora_adapter", post(adapters::load_lora_adapter))
        .route(
            "/v1/upload_lora_adapter",
            // An adapter is smaller than the model it adapts.
            post(adapters::upload_lora_adapter).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            "/v1/unload_lora_adapter",
            post(adapters::unload_lora_adapter),
        );
    // Checked before the body is read; `/health` (added after) stays open for probes.
    let routes = match api_key {
        Some(key) => routes.route_layer(axum::middleware::from_fn_with_state(
            Arc::new(key),
            require_api_key,
        )),
        None => routes,
    };
    Ok(routes
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state))
}

struct Slot {
    engine: LocalEngine,
    in_flight: AtomicUsize,
}

/// What every engine of the server is built from.
#[derive(Clone, Copy)]
struct EngineSetup<'a> {
    tokenizer: &'a Tokenizer,
    eos: &'a [u32],
    config: &'a ServeConfig,
    max_model_len: usize,
}

/// `config.engines` engines serving `model`: the base model's (`serve-N`, reporting the
/// initial weight version), or an adapter's (`serve-NAME-N`, reporting the adapter's name).
fn spawn_engines(setup: EngineSetup<'_>, model: &Qwen, adapter: Option<&str>) -> Vec<Slot> {
    let config = setup.config;
    (0..config.engines)
        .map(|i| {
            let mut engine_config = LocalEngineConfig::new(Vec::new());
            engine_config.eos = setup.eos.to_vec();
            engine_config.max_batch = config.max_batch;
            engine_config.gather = config.gather;
            engine_config.name = match adapter {
                Some(name) => format!("serve-{name}-{i}"),
                None => format!("serve-{i}"),
            };
            if let Some(name) = adapter {
                engine_config.weight_version = name.to_string();
            }
            // What a batch of `max_batch` full-length sequences holds.
            engine_config.kv_capacity = (config.max_batch.max(1) * setup.max_model_len) as u64;
            Slot {
                engine: LocalEngine::spawn(model.clone(), setup.tokenizer.clone(), engine_config),
                in_flight: AtomicUsize::new(0),
            }
        })
        .collect()
}

struct AppState {
    engines: Vec<Slot>,
    tokenizer: Tokenizer,
    max_model_len: usize,
    /// Ids a prompt may hold: those both the model and the tokenizer know.
    vocab_size: usize,
    eos: Vec<u32>,
    created: u64,
    requests: AtomicU64,
    /// One permit per choice being generated or waiting ([`ServeConfig::max_in_flight`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The system turn a chat without a system message gets.
    chat_system: String,
    config: ServeConfig,
    /// The served architecture: new weights must have exactly this one.
    model_config: QwenConfig,
    /// Where new weights are loaded.
    device: Device,
    /// The version of the weights every engine holds (after the last finished update).
    weight_version: std::sync::RwLock<String>,
    /// One weight update (or adapter load or unload) at a time.
    updating: tokio::sync::Mutex<()>,
    /// The base weights the engines serve, which adapters are merged into.
    base: std::sync::RwLock<Qwen>,
    /// The loaded LoRA adapters ([`adapters`]).
    adapters: adapters::Adapters,
}

impl AppState {
    fn engine_setup(&self) -> EngineSetup<'_> {
        EngineSetup {
            tokenizer: &self.tokenizer,
            eos: &self.eos,
            config: &self.config,
            max_model_len: self.max_model_len,
        }
    }
}

/// An answer's JSON. It goes through a [`Value`], as every answer did before the wire types:
/// keys sorted and an `f32` written as the `f64` it widens to, so the bytes stay those earlier
/// versions wrote.
fn json(body: impl serde::Serialize) -> axum::Json<Value> {
    // The wire types have string keys only, so they always make a value.
    axum::Json(serde_json::to_value(body).unwrap_or_default())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Errors

/// An OpenAI-style error response.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
}

impl ApiError {
    fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
        }
    }

    fn field(param: &str, message: impl std::fmt::Display) -> Self {
        ApiError::invalid(Some(param), format!("`{param}`: {message}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorResponse {
            error: Some(ErrorObject {
                message: self.message,
                kind: self.kind.to_string(),
                param: self.param,
                code: self.status.as_u16(),
            }),
            ..ErrorResponse::default()
        };
        (self.status, json(body)).into_response()
    }
}

/// Refuses a request without `Authorization: Bearer <key>` ([`ServeConfig::api_key`]).
async fn require_api_key(
    axum::extract::State(key): axum::extract::State<Arc<String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if rstar_http::bearer_matches(request.headers(), &key) {
        return next.run(request).await;
    }
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        kind: "authentication_error",
        message: "missing or wrong API key: send `Authorization: Bearer <key>`".into(),
        param: None,
    }
    .into_response()
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: "no such route; the API serves POST /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /health".into(),
        param: None,
    }
}

async fn method_not_allowed() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        kind: "invalid_request_error",
        message: "method not allowed on this route".into(),
        param: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Request parsing

/// The request body's bytes.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| ApiError {
        status: if rstar_http::is_body_timeout(&e) {
            StatusCode::REQUEST_TIMEOUT
        } else {
            e.status()
        },
        kind: "invalid_request_error",
        message: format!("reading the request body: {}", e.body_text()),
        param: None,
    })
}

/// A request body as `T`: the body must be a JSON object, then is read into `T` in its written
/// order (a chat request's tool schemas keep their key order). Absent and `null` fields read as
/// `None`, unknown fields are ignored (as OpenAI's servers do), and a field of the wrong type is
/// named in the error.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let obj = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return Err(ApiError::invalid(
                None,
                "the request body must be a JSON object",
            ));
        }
        Err(e) => {
            return Err(ApiError::invalid(
                None,
                format!("the request body is not valid JSON: {e}"),
            ));
        }
    };
    serde_json::from_slice::<T>(body).map_err(|whole| {
        // Every field of a request type is optional, so the field that fails alone is the one
        // that fails the whole.
        obj.into_iter()
            .find_map(|(name, value)| {
                let alone = Value::Object(Map::from_iter([(name.clone(), value)]));
                serde_json::from_value::<T>(alone)
                    .err()
                    .map(|e| ApiError::field(&name, plain_types(&e.to_string())))
            })
            .unwrap_or_else(|| ApiError::invalid(None, whole.to_string()))
    })
}

/// A serde message with Rust's type names in the words of the API (`expected usize` → `expected
/// a non-negative integer`), so a client reads what to send.
fn plain_types(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, words) in [
        ("usize", "a non-negative integer"),
        ("u64", "a non-negative integer"),
        ("u32", "a non-negative integer"),
        ("u16", "a non-negative integer"),
        ("u8", "a non-negative integer"),
        ("isize", "an integer"),
        ("i64", "an integer"),
        ("i32", "an integer"),
        ("f64", "a number"),
        ("f32", "a number"),
    ] {
        out = out.replace(&format!("expected {rust}"), &format!("expected {words}"));
    }
    out
}

/// Settings shared by both endpoints, validated.
#[derive(Debug)]
struct Common {
    /// The name the request gave as `model` (the served model's when it gave none).
    model: String,
    /// The LoRA adapter that `model` names (`None`: the base model).
    adapter: Option<Arc<adapters::Adapter>>,
    sampling: Sampling,
    /// Explicit `max_tokens`.
    max_tokens: Option<usize>,
    stop: Vec<String>,
    seed: Option<u64>,
    n: usize,
    ignore_eos: bool,
    include_stop: bool,
    /// Answer as server-sent events.
    stream: bool,
    /// End the stream with a usage chunk (`stream_options.include_usage`).
    include_usage: bool,
}

/// Checks a request's common fields against what the server supports; `chat` reads
/// `max_completion_tokens`.
fn validate(request: CommonRequest, state: &AppState, chat: bool) -> Result<Common, ApiError> {
    let model = request
        .model
        .unwrap_or_else(|| state.config.model_name.clone());
    let adapter = adapters::served(state, &model)?;
    let stream = request.stream == Some(true);
    if request.stream_options.is_some() && !stream {
        // OpenAI's and vLLM's rule.
        return Err(ApiError::field(
            "stream_options",
            "is only allowed when `stream` is true",
        ));
    }
    let include_usage = request
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    for (name, value) in [
        ("presence_penalty", request.presence_penalty),
        ("frequency_penalty", request.frequency_penalty),
    ] {
        if value.is_some_and(|v| v != 0.0) {
            return Err(ApiError::field(name, "only 0 is supported"));
        }
    }
    if request.repetition_penalty.is_some_and(|v| v != 1.0) {
        return Err(ApiError::field("repetition_penalty", "only 1 is supported"));
    }
    if request.logit_bias.is_some_and(|m| !m.is_empty()) {
        return Err(ApiError::field("logit_bias", "is not supported"));
    }
    let sampling = Sampling::from_openai(request.temperature, request.top_p, request.top_k)
        .map_err(|e| ApiError::field(e.field, e.reason))?;
    let mut max_tokens = request.max_tokens;
    if chat && request.max_completion_tokens.is_some() {
        max_tokens = request.max_completion_tokens;
    }
    if max_tokens == Some(0) {
        return Err(ApiError::field("max_tokens", "must be at least 1"));
    }
    let stop = request.stop.unwrap_or_default().0;
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::field("stop", "stop strings must not be empty"));
    }
    let n = request.n.unwrap_or(1);
    if n == 0 {
        return Err(ApiError::field("n", "must be at least 1"));
    }
    if let Some(best_of) = request.best_of
        && best_of != n
    {
        return Err(ApiError::field(
            "best_of",
            "only `best_of` = `n` is supported",
        ));
    }
    Ok(Common {
        model,
        adapter,
        sampling,
        max_tokens,
        stop,
        seed: request.seed,
        n,
        ignore_eos: request.ignore_eos.unwrap_or(false),
        include_stop: request.include_stop_str_in_output.unwrap_or(false),
        stream,
        include_usage,
    })
}

/// The prompts of a completion request as token ids.
/// The most bytes one token can stand for: no real vocabulary has a longer token.
const MAX_TOKEN_BYTES: usize = 256;

/// Refuses a text that cannot fit the context whatever its tokens are (more than
/// `MAX_TOKEN_BYTES` bytes per position), before it is tokenized: a 30 MB prompt is answered
/// at once instead of holding a thread for seconds.
fn fits_context(state: &AppState, text: &str, param: &str) -> Result<(), ApiError> {
    let limit = state.max_model_len.saturating_mul(MAX_TOKEN_BYTES);
    if text.len() > limit {
        return Err(ApiError::field(
            param,
            format!(
                "is {} bytes, more than the {} tokens of the context can hold (at most {MAX_TOKEN_BYTES} bytes a token): not tokenized",
                text.len(),
                state.max_model_len
            ),
        ));
    }
    Ok(())
}

fn parse_prompts(prompt: Option<&Value>, state: &AppState) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad_shape = || {
        ApiError::field(
            "prompt",
            "must be a string, a list of strings, a list of token ids or a list of lists of token ids",
        )
    };
    let encode = |text: &str| {
        fits_context(state, text, "prompt")?;
        state
            .tokenizer
            .encode(text)
            .map_err(|e| ApiError::field("prompt", format!("cannot be tokenized: {e}")))
    };
    let ids = |values: &[Value]| -> Result<Vec<u32>, ApiError> {
        values
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(bad_shape)
            })
            .collect()
    };
    let prompts = match prompt {
        None | Some(Value::Null) => return Err(ApiError::field("prompt", "is required")),
        Some(Value::String(s)) => vec![encode(s)?],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::field("prompt", "must not be empty"));
        }
        Some(Value::Array(items)) => match &items[0] {
            Value::Number(_) => vec![ids(items)?],
            Value::String(_) => items
                .iter()
                .map(|v| v.as_str().ok_or_else(bad_shape).and_then(encode))
                .collect::<Result<_, _>>()?,
            Value::Array(_) => items
                .iter()
                .map(|v| v.as_array().ok_or_else(bad_shape).and_then(|a| ids(a)))
                .collect::<Result<_, _>>()?,
            _ => return Err(bad_shape()),
        },
        Some(_) => return Err(bad_shape()),
    };
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(ApiError::field("prompt", format!("prompt {i} is empty")));
        }
        if let Some(id) = p.iter().find(|&&id| id as usize >= state.vocab_size) {
            return Err(ApiError::field(
                "prompt",
                format!(
                    "token id {id} of prompt {i} is outside the vocabulary of {}",
                    state.vocab_size
                ),
            ));
        }
    }
    Ok(prompts)
}

/// The token budget of a prompt: the explicit `max_tokens` must fit the context (vLLM's rule),
/// a default is cut to what fits.
fn budget(
    state: &AppState,
    prompt_len: usize,
    explicit: Option<usize>,
    default: usize,
) -> Result<usize, ApiError> {
    let max = state.max_model_len;
    if prompt_len >= max {
        return Err(ApiError::invalid(
            Some("prompt"),
            format!(
                "this model's maximum context length is {max} tokens; the prompt has {prompt_len}, which leaves no room for a completion"
            ),
        ));
    }
    match explicit {
        Some(m) if m > max - prompt_len => Err(ApiError::invalid(
            Some("max_tokens"),
            format!(
                "this model's maximum context length is {max} tokens; you requested {} ({prompt_len} in the prompt, {m} in the completion)",
                prompt_len.saturating_add(m)
            ),
        )),
        Some(m) => Ok(m),
        None => Ok(default.min(max - prompt_len)),
    }
}

// ---------------------------------------------------------------------------------------------
// Generation

/// Generates `n` choices for every prompt (prompt-major order), spreading them over the
/// engines by their in-flight counts.
async fn generate_all(
    state: &Arc<AppState>,
    prompts: &[(Vec<u32>, usize)],
    common: &Common,
    stop_strings: Vec<String>,
) -> Result<(Vec<Generation>, Vec<Arc<str>>), ApiError> {
    let request = state.requests.fetch_add(1, Ordering::Relaxed);
    let base_seed = common.seed.unwrap_or_else(rand::random);
    let options = TurnOptions {
        sampling: Some(common.sampling),
        stop_strings: Some(stop_strings),
        eos: Some(if common.ignore_eos {
            Vec::new()
        } else {
            state.eos.clone()
        }),
    };
    let choices = prompts.len().saturating_mul(common.n);
    let permits = u32::try_from(choices)
        .ok()
        .and_then(|n| Arc::clone(&state.in_flight).try_acquire_many_owned(n).ok())
        .ok_or_else(|| ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            message: format!(
                "the server is generating its maximum of {} choices; retry later",
                state.config.max_in_flight
            ),
            param: None,
        })?;
    // Dropped with the request (a client that goes away): the tasks are aborted, and the
    // engine skips turns whose answer nobody waits for any more.
    let mut tasks = tokio::task::JoinSet::new();
    for (context, max_tokens) in prompts {
        for j in 0..common.n {
            let spec = TurnSpec {
                rollout: request,
                turn: j as u32,
                context: context.clone(),
                max_new_tokens: *max_tokens,
                seed: base_seed.wrapping_add(j as u64),
            };
            let state = Arc::clone(state);
            let adapter = common.adapter.clone();
            let options = options.clone();
            let index = tasks.len();
            tasks.spawn(async move {
                let slots = adapter.as_ref().map_or(&state.engines, |a| &a.engines);
                let slot = slots
                    .iter()
                    .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
                    .expect("at least one engine");
                slot.in_flight.fetch_add(1, Ordering::Relaxed);
                let out = slot.engine.generate_versioned(spec, options).await;
                slot.in_flight.fetch_sub(1, Ordering::Relaxed);
                (index, out.map_err(|e| e.to_string()))
            });
        }
    }
    let mut out: Vec<Option<(Generation, Arc<str>)>> = (0..tasks.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined.map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: format!("generation failed: {e}"),
            param: None,
        })?;
        out[index] = Some(result.map_err(|message| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: format!("generation failed: {message}"),
            param: None,
        })?);
    }
    drop(permits);
    Ok(out.into_iter().flatten().unzip())
}

/// A response's `metadata`, as SGLang writes it: the version of the weights that wrote the
/// choices (the oldest, in the rare case a weight update landed between them).
fn metadata(versions: &[Arc<str>]) -> wire::Metadata {
    let oldest = versions.iter().min_by_key(|v| version_order(v));
    wire::Metadata {
        weight_version: oldest.map(|v| v.to_string()),
    }
}

/// Versions sort numerically when they are numbers (`step-12` after `step-9`), else as text;
/// `default` comes first.
fn version_order(v: &str) -> (u8, u64, String) {
    if v == rstar_engine::INITIAL_WEIGHT_VERSION {
        return (0, 0, String::new());
    }
    let digits: String = v.chars().filter(char::is_ascii_digit).collect();
    match digits.parse::<u64>() {
        Ok(n) => (1, n, v.to_string()),
        Err(_) => (2, 0, v.to_string()),
    }
}

/// The choice's text: the generated text without the stop string unless asked to keep it.
fn choice_text(g: &Generation, include_stop: bool, keep: &[&str]) -> String {
    match &g.finish_reason {
        FinishReason::Stop(s) if !include_stop && !keep.contains(&s.as_str()) => g
            .text
            .strip_suffix(s.as_str())
            .unwrap_or(&g.text)
            .to_string(),
        _ => g.text.clone(),
    }
}

fn finish_reason(g: &Generation) -> (wire::FinishReason, Option<StopReason>) {
    match &g.finish_reason {
        FinishReason::Stop(s) => (wire::FinishReason::Stop, Some(StopReason::Text(s.clone()))),
        FinishReason::Eos => (
            wire::FinishReason::Stop,
            g.tokens.last().map(|&t| StopReason::Token(t)),
        ),
        FinishReason::Length => (wire::FinishReason::Length, None),
    }
}

fn token_strings(state: &AppState, tokens: &[u32]) -> Vec<String> {
    tokens
        .iter()
        .map(|&t| state.tokenizer.decode(&[t]).unwrap_or_default())
        .collect()
}

fn usage(prompts: &[(Vec<u32>, usize)], generations: &[Generation]) -> Usage {
    let prompt_tokens: usize = prompts.iter().map(|(p, _)| p.len()).sum();
    let completion_tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: CompletionRequest = parse_body(&body_bytes(body)?)?;
    let common = validate(request.common, &state, false)?;
    if request.echo == Some(true) {
        return Err(ApiError::field(
            "echo",
            "echoing the prompt is not supported",
        ));
    }
    if request.suffix.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::field("suffix", "is not supported"));
    }
    let logprobs = request.logprobs;
    let prompts = parse_prompts(request.prompt.as_ref(), &state)?;
    check_choices(&state, prompts.len().saturating_mul(common.n))?;
    let prompts = prompts
        .into_iter()
        .map(|p| {
            let b = budget(
                &state,
                p.len(),
                common.max_tokens,
                state.config.default_max_tokens,
            )?;
            Ok((p, b))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let (generations, versions) =
        generate_all(&state, &prompts, &common, common.stop.clone()).await?;
    let head = ResponseHead {
        id: format!("cmpl-{}", response_id()),
        object: "text_completion",
        created: unix_now(),
        model: common.model.clone(),
    };
    let texts: Vec<String> = generations
        .iter()
        .map(|g| choice_text(g, common.include_stop, &[]))
        .collect();
    let totals = usage(&prompts, &generations);
    if common.stream {
        let usage = common.include_usage.then_some(totals);
        return Ok(stream::sse_response(&completion_chunks(
            &state,
            &head,
            &generations,
            &versions,
            &texts,
            logprobs.is_some(),
            usage,
        )));
    }
    let choices: Vec<TextChoice> = generations
        .iter()
        .zip(&versions)
        .zip(texts)
        .enumerate()
        .map(|(index, ((g, version), text))| {
            let (reason, stop_reason) = finish_reason(g);
            TextChoice {
                index,
                text: Some(text),
                logprobs: logprobs.map(|_| completion_logprobs(&state, &g.tokens, &g.logprobs)),
                finish_reason: Some(reason),
                stop_reason: Some(stop_reason),
                token_ids: Some(g.tokens.clone()),
                weight_version: Some(version.to_string()),
            }
        })
        .collect();
    let body: TextCompletion = Completion {
        usage: Some(Some(totals)),
        metadata: Some(metadata(&versions)),
        ..head.with(choices)
    };
    Ok(json(body).into_response())
}

/// What every chunk of a response shares, and the response itself.
struct ResponseHead {
    id: String,
    object: &'static str,
    created: u64,
    /// The served model's name, or the adapter's the request named.
    model: String,
}

impl ResponseHead {
    /// `{"id", "object", "created", "model", "choices"}`.
    fn with<C>(&self, choices: Vec<C>) -> Completion<C> {
        Completion {
            id: self.id.clone(),
            object: self.object.to_string(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: None,
            metadata: None,
        }
    }

    /// A stream chunk of one choice; `usage: null` when the stream ends with a usage chunk
    /// (as OpenAI writes every chunk of such a stream).
    fn chunk<C>(&self, choice: C, with_usage: bool) -> Completion<C> {
        Completion {
            usage: with_usage.then_some(None),
            ..self.with(vec![choice])
        }
    }

    /// The last chunk of a stream with `stream_options.include_usage`: no choices, the usage.
    fn usage_chunk<C>(&self, usage: Usage, versions: &[Arc<str>]) -> Completion<C> {
        Completion {
            usage: Some(Some(usage)),
            metadata: Some(metadata(versions)),
            ..self.with(Vec::new())
        }
    }
}

/// A completion choice's `logprobs` for `tokens`.
fn completion_logprobs(state: &AppState, tokens: &[u32], logprobs: &[f32]) -> TextLogprobs {
    TextLogprobs {
        tokens: token_strings(state, tokens),
        token_logprobs: Some(logprobs.to_vec()),
        top_logprobs: None,
        text_offset: None,
    }
}

/// A chat choice's `logprobs.content` for `tokens`.
fn chat_logprobs(state: &AppState, tokens: &[u32], logprobs: &[f32]) -> ChatLogprobs {
    let content = token_strings(state, tokens)
        .into_iter()
        .zip(logprobs)
        .map(|(token, &logprob)| TokenLogprob {
            bytes: token.as_bytes().to_vec(),
            token,
            logprob,
            top_logprobs: Vec::new(),
        })
        .collect();
    ChatLogprobs { content }
}

/// The `logprobs` slice of a piece (empty when the generation has none for those tokens).
fn piece_logprobs(g: &Generation, tokens: &std::ops::Range<usize>) -> Vec<f32> {
    g.logprobs.get(tokens.clone()).unwrap_or_default().to_vec()
}

/// A streamed completion: per choice, one chunk per [`stream::pieces`] piece (with its
/// `token_ids` and, when asked, its log-probs), then one with the `finish_reason`; then the usage
/// chunk when asked.
fn completion_chunks(
    state: &AppState,
    head: &ResponseHead,
    generations: &[Generation],
    versions: &[Arc<str>],
    texts: &[String],
    logprobs: bool,
    usage: Option<Usage>,
) -> Vec<TextCompletion> {
    let with_usage = usage.is_some();
    let mut chunks = Vec::new();
    for (index, ((g, version), text)) in generations.iter().zip(versions).zip(texts).enumerate() {
        for piece in stream::pieces(&state.tokenizer, &g.tokens, text) {
            let ids = &g.tokens[piece.tokens.clone()];
            let choice = TextChoice {
                index,
                text: Some(piece.text),
                logprobs: logprobs
                    .then(|| completion_logprobs(state, ids, &piece_logprobs(g, &piece.tokens))),
                finish_reason: None,
                stop_reason: None,
                token_ids: Some(ids.to_vec()),
                weight_version: None,
            };
            chunks.push(head.chunk(choice, with_usage));
        }
        let (reason, stop_reason) = finish_reason(g);
        let choice = TextChoice {
            index,
            text: Some(String::new()),
            logprobs: None,
            finish_reason: Some(reason),
            stop_reason: Some(stop_reason),
            token_ids: Some(Vec::new()),
            weight_version: Some(version.to_string()),
        };
        chunks.push(head.chunk(choice, with_usage));
    }
    if let Some(usage) = usage {
        chunks.push(head.usage_chunk(usage, versions));
    }
    chunks
}

/// One chat choice, read: its content and, when the request has tools, its tool calls.
struct ChatChoice<'a> {
    generation: &'a Generation,
    version: &'a str,
    /// The content without tool parsing (the stop string cut).
    content: String,
    /// The tool calls, when the request has `tools` and the text holds decodable calls.
    tools: Option<tool_calls::ToolTurn>,
}

impl ChatChoice<'_> {
    /// The content the choice reports: the text before the first tool call, or all of it.
    fn content(&self) -> &str {
        self.tools.as_ref().map_or(&self.content, |t| &t.content)
    }

    fn finish_reason(&self) -> (wire::FinishReason, Option<StopReason>) {
        let (reason, stop_reason) = finish_reason(self.generation);
        match self.tools {
            Some(_) => (wire::FinishReason::ToolCalls, stop_reason),
            None => (reason, stop_reason),
        }
    }
}

/// A streamed chat completion: per choice, a first chunk with `role`, one chunk per
/// [`stream::pieces`] piece of the content, one per tool call (`delta.tool_calls`, whole), then
/// one with the `finish_reason`; then the usage chunk when asked.
fn chat_chunks(
    state: &AppState,
    head: &ResponseHead,
    choices: &[ChatChoice<'_>],
    logprobs: bool,
    usage: Option<Usage>,
    versions: &[Arc<str>],
) -> Vec<ChatCompletionChunk> {
    let with_usage = usage.is_some();
    let mut chunks = Vec::new();
    for (index, c) in choices.iter().enumerate() {
        let g = c.generation;
        let delta = |delta: Delta| ChatDeltaChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: None,
            stop_reason: None,
            token_ids: None,
            weight_version: None,
        };
        let first = Delta {
            role: Some("assistant".into()),
            content: Some(String::new()),
            tool_calls: None,
        };
        chunks.push(head.chunk(delta(first), with_usage));
        for piece in stream::pieces(&state.tokenizer, &g.tokens, c.content()) {
            let ids = &g.tokens[piece.tokens.clone()];
            let choice = ChatDeltaChoice {
                logprobs: logprobs
                    .then(|| chat_logprobs(state, ids, &piece_logprobs(g, &piece.tokens))),
                token_ids: Some(ids.to_vec()),
                ..delta(Delta {
                    content: Some(piece.text),
                    ..Delta::default()
                })
            };
            chunks.push(head.chunk(choice, with_usage));
        }
        for (k, call) in c.tools.iter().flat_map(|t| &t.calls).enumerate() {
            let choice = delta(Delta {
                tool_calls: Some(vec![call.to_wire(Some(k))]),
                ..Delta::default()
            });
            chunks.push(head.chunk(choice, with_usage));
        }
        let (reason, stop_reason) = c.finish_reason();
        let choice = ChatDeltaChoice {
            finish_reason: Some(reason),
            stop_reason: Some(stop_reason),
            token_ids: Some(Vec::new()),
            weight_version: Some(c.version.to_string()),
            ..delta(Delta::default())
        };
        chunks.push(head.chunk(choice, with_usage));
    }
    if let Some(usage) = usage {
        chunks.push(head.usage_chunk(usage, versions));
    }
    chunks
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ChatRequest = parse_body(&body_bytes(body)?)?;
    let common = validate(request.common, &state, true)?;
    let logprobs = request.logprobs.unwrap_or(false);
    let messages = match request.messages {
        None => return Err(ApiError::field("messages", "is required")),
        Some(m) if m.is_empty() => return Err(ApiError::field("messages", "must not be empty")),
        Some(m) => m,
    };
    let tools: Vec<Json> = request.tools.unwrap_or_default();
    // `auto` (the default) and `none`; forcing a call needs guided decoding, which this engine
    // does not have.
    let parse_tools = match &request.tool_choice {
        None => !tools.is_empty(),
        Some(Value::String(s)) if s == "auto" => !tools.is_empty(),
        Some(Value::String(s)) if s == "none" => false,
        Some(_) => {
            return Err(ApiError::field(
                "tool_choice",
                "only `auto` and `none` are supported",
            ));
        }
    };
    let text = render_chat(&state, &messages, tools)?;
    fits_context(&state, &text, "messages")?;
    let context = state
        .tokenizer
        .encode(&text)
        .map_err(|e| ApiError::field("messages", format!("cannot be tokenized: {e}")))?;
    check_choices(&state, common.n)?;
    let max = budget(&state, context.len(), common.max_tokens, usize::MAX)?;
    let prompts = vec![(context, max)];
    let template = Template::of(state.config.template);
    let mut stops: Vec<String> = template
        .stop_strings()
        .iter()
        .map(|s| s.to_string())
        .collect();
    stops.extend(common.stop.iter().cloned());
    let (generations, versions) = generate_all(&state, &prompts, &common, stops).await?;
    // The compact template's stop strings close a tool call or an answer: they are content.
    let keep: Vec<&str> = match state.config.template {
        TemplateFormat::Compact => template.stop_strings().to_vec(),
        TemplateFormat::ChatMl => Vec::new(),
    };
    let head = ResponseHead {
        id: format!("chatcmpl-{}", response_id()),
        object: "chat.completion",
        created: unix_now(),
        model: common.model.clone(),
    };
    let choices: Vec<ChatChoice<'_>> = generations
        .iter()
        .zip(&versions)
        .map(|(g, version)| {
            let mut content = choice_text(g, common.include_stop, &keep);
            if let Some(stripped) = content.strip_suffix("<|im_end|>") {
                content = stripped.to_string();
            }
            let tools = if parse_tools {
                tool_calls::parse(&content, |_| format!("call_{}", response_id()))
            } else {
                None
            };
            ChatChoice {
                generation: g,
                version,
                content,
                tools,
            }
        })
        .collect();
    let totals = usage(&prompts, &generations);
    if common.stream {
        let head = ResponseHead {
            object: "chat.completion.chunk",
            ..head
        };
        let usage = common.include_usage.then_some(totals);
        return Ok(stream::sse_response(&chat_chunks(
            &state, &head, &choices, logprobs, usage, &versions,
        )));
    }
    let choices: Vec<wire::ChatChoice> = choices
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let g = c.generation;
            let (reason, stop_reason) = c.finish_reason();
            let message = match &c.tools {
                // As vLLM answers: `content` is the text before the calls, `null` when empty.
                Some(t) => ResponseMessage {
                    role: "assistant".into(),
                    content: Some(t.content.clone()).filter(|s| !s.is_empty()),
                    tool_calls: Some(t.calls.iter().map(|call| call.to_wire(None)).collect()),
                },
                None => ResponseMessage {
                    role: "assistant".into(),
                    content: Some(c.content.clone()),
                    tool_calls: None,
                },
            };
            wire::ChatChoice {
                index,
                message,
                finish_reason: Some(reason),
                stop_reason,
                logprobs: logprobs.then(|| chat_logprobs(&state, &g.tokens, &g.logprobs)),
                token_ids: g.tokens.clone(),
                weight_version: Some(c.version.to_string()),
            }
        })
        .collect();
    let body: ChatCompletion = Completion {
        usage: Some(Some(totals)),
        metadata: Some(metadata(&versions)),
        ..head.with(choices)
    };
    Ok(json(body).into_response())
}

fn check_choices(state: &AppState, choices: usize) -> Result<(), ApiError> {
    if choices > state.config.max_choices {
        return Err(ApiError::field(
            "n",
            format!(
                "the request asks for {choices} choices (n times the prompts); this server answers at most {}",
                state.config.max_choices
            ),
        ));
    }
    Ok(())
}

fn response_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The served model, then each loaded LoRA adapter (with vLLM's `parent`: the base).
async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let card = |id: &str, root: &str, parent: Option<&str>| ModelCard {
        id: Some(id.to_string()),
        object: "model".into(),
        created: state.created,
        owned_by: "rstar".into(),
        root: Some(root.to_string()),
        parent: parent.map(str::to_string),
        max_model_len: Some(state.max_model_len as u64),
    };
    let base = &state.config.model_name;
    let mut data = vec![card(base, base, None)];
    data.extend(
        adapters::read(&state)
            .iter()
            .map(|(name, a)| card(name, &a.root, Some(base))),
    );
    json(ModelList {
        object: "list".into(),
        data,
    })
}

// ---------------------------------------------------------------------------------------------
// Weight updates

/// Loads the HF directory `dir` (the served architecture, else a 400) and swaps it into every
/// engine, reported as `version` (the current one when `None`). Answers after every engine
/// has the new weights.
/// Where new weights come from: an HF directory the server reads, or the bytes of one
/// safetensors file pushed to it.
enum WeightSource {
    Dir(PathBuf),
    Bytes(Bytes),
}

async fn update_weights(
    state: &Arc<AppState>,
    source: WeightSource,
    version: Option<String>,
) -> Result<String, ApiError> {
    let _one_at_a_time = state.updating.lock().await;
    adapters::check_no_adapters(state)?;
    let device = state.device.clone();
    let (param, dir) = match &source {
        WeightSource::Dir(dir) => ("model_path", dir.clone()),
        WeightSource::Bytes(_) => ("body", PathBuf::from("the uploaded safetensors")),
    };
    let config = state.model_config.clone();
    let loaded = tokio::task::spawn_blocking(move || match source {
        WeightSource::Dir(path) => rstar_policy::load_model(&path, &device),
        WeightSource::Bytes(bytes) => rstar_policy::load_model_from_bytes(
            config,
            &bytes,
            &device,
            std::path::Path::new("the uploaded safetensors"),
        ),
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: "server_error",
        message: format!("loading the weights failed: {e}"),
        param: None,
    })?
    .map_err(|e| ApiError::invalid(Some(param), format!("cannot load {}: {e}", dir.display())))?;
    // A tied model's untied copy (what vLLM engines are given) computes the same: the tie
    // alone does not make another architecture.
    let untied = |c: &QwenConfig| QwenConfig {
        tie_word_embeddings: false,
        ..c.clone()
    };
    if untied(&loaded.config) != untied(&state.model_config) {
        return Err(ApiError::invalid(
            Some(param),
            format!(
                "{} holds another architecture than the served model ({:?} vs {:?})",
                dir.display(),
                loaded.config,
                state.model_config
            ),
        ));
    }
    let version = version.unwrap_or_else(|| current_version(state));
    for slot in &state.engines {
        slot.engine
            .swap_weights(loaded.clone(), version.clone())
            .await
            .map_err(|e| ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                kind: "server_error",
                message: format!("swapping the weights failed: {e}"),
                param: None,
            })?;
    }
    *state
        .weight_version
        .write()
        .unwrap_or_else(|p| p.into_inner()) = version.clone();
    *state.base.write().unwrap_or_else(|p| p.into_inner()) = loaded;
    Ok(version)
}

fn current_version(state: &AppState) -> String {
    state
        .weight_version
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

async fn update_weights_from_disk(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let outcome = async {
        let request: wire::UpdateWeightsFromDisk = parse_body(&body_bytes(body)?)?;
        let path = request
            .model_path
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ApiError::field("model_path", "is required"))?;
        if let Some(format) = request.load_format.filter(|f| f != "auto") {
            return Err(ApiError::field(
                "load_format",
                format!("`{format}` is not supported (only `auto`: HF safetensors)"),
            ));
        }
        update_weights(
            &state,
            WeightSource::Dir(PathBuf::from(path)),
            request.weight_version,
        )
        .await
    }
    .await;
    // SGLang's answer: `success` and `message`, 200 or 400.
    update_answer(outcome, Some(0))
}

/// `POST /upload_weights?weight_version=V`: the body is one safetensors file of the served
/// architecture in HF naming (what `rstar_policy::safetensors_bytes` writes), swapped in like
/// `/update_weights_from_disk` does, for engines on machines without a shared path. Answers as
/// SGLang's update routes: `{"success", "message"}`.
async fn upload_weights(
    State(state): State<Arc<AppState>>,
    query: axum::extract::Query<std::collections::HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(body)?;
        if bytes.is_empty() {
            return Err(ApiError::field(
                "body",
                "is empty: send the safetensors file",
            ));
        }
        let version = query
            .get("weight_version")
            .filter(|v| !v.is_empty())
            .cloned();
        update_weights(&state, WeightSource::Bytes(bytes), version).await
    }
    .await;
    update_answer(outcome, None)
}

/// SGLang's answer to a weight update: `{"success", "message"}` (and, from
/// `/update_weights_from_disk`, `num_paused_requests`), 200 or the error's status.
fn update_answer(outcome: Result<String, ApiError>, paused: Option<u64>) -> Response {
    match outcome {
        Ok(version) => json(wire::UpdateWeightsResponse {
            success: Some(true),
            message: Some(format!(
                "Succeeded to update model weights (version {version})."
            )),
            num_paused_requests: paused,
        })
        .into_response(),
        Err(e) => (
            e.status,
            json(wire::UpdateWeightsResponse {
                success: Some(false),
                message: Some(e.message),
                num_paused_requests: None,
            }),
        )
            .into_response(),
    }
}

async fn collective_rpc(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let request: wire::CollectiveRpc = parse_body(&body_bytes(body)?)?;
    match request.method.as_deref() {
        Some("reload_weights") => {}
        Some(other) => {
            return Err(ApiError::field(
                "method",
                format!("`{other}` is not supported (only `reload_weights`)"),
            ));
        }
        None => return Err(ApiError::field("method", "is required")),
    }
    let kwargs = request.kwargs.unwrap_or_default();
    let text = |key: &str| -> Result<Option<String>, ApiError> {
        match kwargs.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::field(
                &format!("kwargs.{key}"),
                "must be a string",
            )),
        }
    };
    let dir = match (text("weights_path")?, &state.config.model_dir) {
        (Some(path), _) => PathBuf::from(path),
        (None, Some(dir)) => dir.clone(),
        (None, None) => {
            return Err(ApiError::field(
                "kwargs.weights_path",
                "is required: this server was not started from a model directory",
            ));
        }
    };
    update_weights(&state, WeightSource::Dir(dir), text("weight_version")?).await?;
    // One result per worker, as vLLM answers.
    Ok(json(wire::CollectiveRpcResponse {
        results: vec![Value::Null; state.engines.len()],
    }))
}

async fn reset_prefix_cache() -> StatusCode {
    StatusCode::OK
}

async fn get_weight_version(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    json(wire::WeightVersion {
        weight_version: Some(current_version(&state)),
    })
}

/// The load of every engine together, in vLLM's Prometheus gauge names
/// ([`EngineLoad::to_prometheus`](rstar_engine::EngineLoad::to_prometheus)).
async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let adapters = adapters::read(&state);
    let slots = state
        .engines
        .iter()
        .chain(adapters.values().flat_map(|a| a.engines.iter()));
    let total = slots.map(|s| s.engine.load()).fold(
        rstar_engine::EngineLoad {
            capacity_tokens: Some(0),
            used_tokens: Some(0),
            running: Some(0),
            waiting: Some(0),
        },
        |a, b| {
            let sum = |x: Option<u64>, y: Option<u64>| Some(x.unwrap_or(0) + y.unwrap_or(0));
            rstar_engine::EngineLoad {
                capacity_tokens: sum(a.capacity_tokens, b.capacity_tokens),
                used_tokens: sum(a.used_tokens, b.used_tokens),
                running: sum(a.running, b.running),
                waiting: sum(a.waiting, b.waiting),
            }
        },
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        total.to_prometheus(&state.config.model_name),
    )
        .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

// ---------------------------------------------------------------------------------------------
// Chat layout

fn content_text(i: usize, m: &Message) -> Result<String, ApiError> {
    match &m.content {
        None => Ok(String::new()),
        Some(Content::Text(s)) => Ok(s.clone()),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match (p.kind.as_str(), &p.text) {
                ("text", Some(t)) => Ok(t.as_str()),
                _ => Err(ApiError::field(
                    "messages",
                    format!(
                        "message {i}: only text content parts are supported, got `{}`",
                        p.kind
                    ),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.concat()),
    }
}

/// The system turn of the template's own prompt (ChatML: the paper's system prompt with the
/// tool schema; compact: none).
fn default_system_turn(format: TemplateFormat) -> String {
    match format {
        TemplateFormat::ChatMl => {
            let prompt = Template::chatml().render_prompt("");
            match prompt.find("<|im_start|>user\n") {
                Some(end) => prompt[..end].to_string(),
                None => String::new(),
            }
        }
        TemplateFormat::Compact => String::new(),
    }
}

/// A request's messages and tools as a [`Conversation`]: `developer` is a system message,
/// content parts are joined, tool-call arguments are written as the template writes them (a
/// string as it is, any other JSON with Python's separators, none as `{}`).
fn conversation(messages: &[Message], tools: Vec<Json>) -> Result<Conversation, ApiError> {
    let roles = messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m.role.as_str() {
            "system" | "developer" => Ok(ChatRole::System),
            "user" => Ok(ChatRole::User),
            "assistant" => Ok(ChatRole::Assistant),
            "tool" => Ok(ChatRole::Tool),
            other => Err(ApiError::field(
                "messages",
                format!("message {i}: unknown role `{other}` (system, developer, user, assistant or tool)"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let messages = messages
        .iter()
        .zip(roles)
        .enumerate()
        .map(|(i, (m, role))| {
            let tool_calls = m
                .tool_calls
                .iter()
                .flatten()
                .map(|call| ChatToolCall {
                    name: call.function.name.clone(),
                    arguments: match &call.function.arguments {
                        Some(Json::String(s)) => s.clone(),
                        Some(other) => other.to_python_json(),
                        None => "{}".into(),
                    },
                })
                .collect();
            Ok(ChatMessage {
                role,
                content: content_text(i, m)?,
                reasoning_content: None,
                tool_calls,
                trained: true,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Conversation { messages, tools })
}

/// Renders `messages` in the template's chat layout ([`ChatFormat::of_template`]), ending where
/// the assistant writes.
///
/// ChatML: the system turn is the request's system message, else the template's own (the
/// paper's prompt with its tool schema); `tools` in the request are listed in it the way Qwen's
/// template lists them, after the request's system message or `You are a helpful assistant.`.
fn render_chat(
    state: &AppState,
    messages: &[Message],
    tools: Vec<Json>,
) -> Result<String, ApiError> {
    let mut conv = conversation(messages, tools)?;
    let has_system = conv
        .messages
        .first()
        .is_some_and(|m| m.role == ChatRole::System);
    let format = ChatFormat::of_template(state.config.template);
    if format == ChatFormat::Compact
        && let Some(i) = conv.messages.iter().position(|m| !m.tool_calls.is_empty())
    {
        // The compact layout writes a call as `<c>…</c>` in the assistant's text: a structured
        // call has no place in it, and dropping it would change the history silently.
        return Err(ApiError::field(
            "messages",
            format!(
                "message {i}: the compact layout has no `tool_calls`; write the call into the assistant's content as <c>code</c> (or serve with --template chatml)"
            ),
        ));
    }
    let mut text = String::new();
    if format == ChatFormat::ChatMl && !has_system {
        if conv.tools.is_empty() {
            text.push_str(&state.chat_system);
        } else {
            conv.messages.insert(
                0,
                ChatMessage {
                    role: ChatRole::System,
                    content: "You are a helpful assistant.".into(),
                    reasoning_content: None,
                    tool_calls: Vec::new(),
                    trained: true,
                },
            );
        }
    }
    text.push_str(&format.render_prompt(&conv));
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn debug_shows_whether_a_key_is_set_never_the_key() {
        let mut config = ServeConfig::new("m");
        assert!(format!("{config:?}").contains("api_key: None"));
        config.api_key = Some("sk-secret-123".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("api_key: Some(\"<redacted>\")"), "{shown}");
        assert!(shown.contains("model_name: \"m\""), "{shown}");
    }

    fn state(format: TemplateFormat) -> AppState {
        let mut config = ServeConfig::new("m");
        config.template = format;
        AppState {
            engines: Vec::new(),
            tokenizer: Tokenizer::char(),
            max_model_len: 100,
            vocab_size: 10,
            eos: Vec::new(),
            created: 0,
            requests: AtomicU64::new(0),
            in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
            chat_system: default_system_turn(format),
            config,
            model_config: QwenConfig::tiny_char(),
            device: Device::flex(),
            weight_version: std::sync::RwLock::new("default".into()),
            updating: tokio::sync::Mutex::new(()),
            base: std::sync::RwLock::new(
                Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap(),
            ),
            adapters: adapters::Adapters::default(),
        }
    }

    /// Issue 70: a field of the wrong type is named in the API's words, not Rust's.
    #[test]
    fn type_errors_name_json_types_not_rust_types() {
        let err = parse_body::<CommonRequest>(br#"{"n": "two"}"#).unwrap_err();
        assert!(
            err.message.contains("`n`") && err.message.contains("expected a non-negative integer"),
            "{}",
            err.message
        );
        assert!(!err.message.contains("usize"), "{}", err.message);
        let err = parse_body::<CommonRequest>(br#"{"temperature": "hot"}"#).unwrap_err();
        assert!(err.message.contains("expected a number"), "{}", err.message);
    }

    fn messages(v: Value) -> Vec<Message> {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    #[test]
    fn chatml_layout_matches_qwen() {
        let s = state(TemplateFormat::ChatMl);
        let m = messages(json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}
            ]},
            {"role": "tool", "content": "4"},
            {"role": "tool", "content": "5"},
        ]));
        assert_eq!(
            render_chat(&s, &m, Vec::new()).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        );
        // Without a system message: the template's system turn with its tool schema.
        let m = messages(json!([{"role": "user", "content": "hi"}]));
        let text = render_chat(&s, &m, Vec::new()).unwrap();
        assert!(text.starts_with("<|im_start|>system\nA conversation between User and Assistant."));
        assert!(text.contains("\"name\": \"python_code_with_standard_io\""));
        assert!(text.ends_with(
            "</tool_call><|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        ));
        // Request tools are listed with Python's separators.
        let body = r#"{"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": [true, null, "é"]}}}]}"#;
        let tools = parse_body::<ChatRequest>(body.as_bytes())
            .unwrap()
            .tools
            .unwrap();
        let text = render_chat(&s, &m, tools).unwrap();
        assert!(
            text.starts_with("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n"),
            "{text}"
        );
        assert!(text.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"z\": 1, \"a\": [true, null, \"é\"]}}}\n</tools>"), "{text}");
    }

    /// Renders a request body's messages and tools as the chat endpoint does.
    fn render_request(s: &AppState, body: &str) -> Result<String, ApiError> {
        let request: ChatRequest = parse_body(body.as_bytes())?;
        render_chat(
            s,
            &request.messages.unwrap_or_default(),
            request.tools.unwrap_or_default(),
        )
    }

    /// Every prompt of `tests/data/render_cases.json` is what serve's own renderer wrote for
    /// its request before the chat layouts moved into `rstar_episode::chat` (captured from that
    /// code): the move changed no byte.
    #[test]
    fn issue_39_chat_prompts_are_rendered_as_before_the_move() {
        #[derive(serde::Deserialize)]
        struct Case {
            template: TemplateFormat,
            request: String,
            prompt: String,
        }
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../tests/data/render_cases.json")).unwrap();
        assert_eq!(cases.len(), 15);
        let mut refused = 0;
        for case in cases {
            let s = state(case.template);
            // Issue 70: the compact layout used to drop an assistant's structured `tool_calls`
            // (the captured prompt has none of them); it now refuses them.
            if case.template == TemplateFormat::Compact && case.request.contains("tool_calls") {
                let err = render_request(&s, &case.request).unwrap_err();
                assert!(
                    err.message.contains("has no `tool_calls`"),
                    "{}",
                    err.message
                );
                refused += 1;
                continue;
            }
            let got = render_request(&s, &case.request).unwrap();
            assert_eq!(got, case.prompt, "{}", case.request);
        }
        assert!(refused > 0);
    }

    /// Where serve's old tool-schema writer and Python's `json.dumps` disagreed (a float in
    /// exponent notation, a repeated key), the one writer writes what `json.dumps` writes, as
    /// vLLM renders the model's template.
    #[test]
    fn issue_39_tool_schemas_are_written_as_json_dumps_writes_them() {
        let s = state(TemplateFormat::ChatMl);
        let body = r#"{"messages": [{"role": "user", "content": "w"}], "tools": [{"min": 1e-5, "max": 1e16, "k": 1, "k": 2}]}"#;
        let text = render_request(&s, body).unwrap();
        assert!(
            text.contains("<tools>\n{\"min\": 1e-05, \"max\": 1e+16, \"k\": 2}\n</tools>"),
            "{text}"
        );
    }

    /// The stream chunks of both endpoints have the fields, `null`s and left-out fields they had
    /// when they were built as `json!` values (written out here from that code).
    #[test]
    fn issue_39_stream_chunks_keep_their_fields() {
        let s = state(TemplateFormat::ChatMl);
        let id = |c: &str| s.tokenizer.encode(c).unwrap()[0];
        let g = Generation {
            tokens: s.tokenizer.encode("hi!").unwrap(),
            text: "hi!".into(),
            logprobs: vec![-0.5, -0.25, -1.0],
            entropies: Vec::new(),
            finish_reason: FinishReason::Stop("!".into()),
        };
        let versions: Vec<Arc<str>> = vec!["v1".into()];
        let head = ResponseHead {
            id: "cmpl-x".into(),
            object: "text_completion",
            created: 1,
            model: "m".into(),
        };
        let usage = Usage {
            prompt_tokens: 2,
            completion_tokens: 3,
            total_tokens: 5,
        };
        let chunks = completion_chunks(
            &s,
            &head,
            std::slice::from_ref(&g),
            &versions,
            &["hi".into()],
            true,
            Some(usage),
        );
        let envelope = |choices: Value| {
            json!({"id": "cmpl-x", "object": "text_completion", "created": 1, "model": "m",
                   "choices": choices, "usage": null})
        };
        let piece = |text: &str, ids: Vec<u32>, lps: Vec<f32>| {
            let tokens: Vec<String> = ids
                .iter()
                .map(|&t| s.tokenizer.decode(&[t]).unwrap())
                .collect();
            envelope(
                json!([{"index": 0, "text": text, "finish_reason": null, "token_ids": ids,
                "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": null, "text_offset": null}}]),
            )
        };
        let want = vec![
            piece("h", vec![id("h")], vec![-0.5]),
            piece("i", vec![id("i")], vec![-0.25]),
            piece("", vec![id("!")], vec![-1.0]),
            envelope(
                json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": "stop",
                "stop_reason": "!", "token_ids": [], "weight_version": "v1"}]),
            ),
            json!({"id": "cmpl-x", "object": "text_completion", "created": 1, "model": "m",
                   "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
                   "metadata": {"weight_version": "v1"}}),
        ];
        let got: Vec<Value> = chunks
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(got, want);

        // A chat choice with a tool call, no log-probs, no usage chunk.
        let head = ResponseHead {
            id: "chatcmpl-x".into(),
            object: "chat.completion.chunk",
            created: 1,
            model: "m".into(),
        };
        let choice = ChatChoice {
            generation: &g,
            version: "v1",
            content: "hi!".into(),
            tools: Some(tool_calls::ToolTurn {
                content: "hi".into(),
                calls: vec![tool_calls::FunctionCall {
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
            }),
        };
        let got: Vec<Value> = chat_chunks(&s, &head, &[choice], false, None, &versions)
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        let chunk = |choice: Value| {
            json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                   "model": "m", "choices": [choice]})
        };
        let delta = |delta: Value| json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null});
        let with_ids = |mut v: Value, ids: Vec<u32>| {
            v["token_ids"] = json!(ids);
            v
        };
        let want = vec![
            chunk(delta(json!({"role": "assistant", "content": ""}))),
            chunk(with_ids(delta(json!({"content": "h"})), vec![id("h")])),
            chunk(with_ids(delta(json!({"content": "i"})), vec![id("i")])),
            chunk(with_ids(delta(json!({"content": ""})), vec![id("!")])),
            chunk(delta(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]}),
            )),
            chunk(
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "tool_calls",
                "stop_reason": "!", "token_ids": [], "weight_version": "v1"}),
            ),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn compact_layout() {
        let s = state(TemplateFormat::Compact);
        let m = messages(json!([
            {"role": "user", "content": "2*3?"},
            {"role": "assistant", "content": "<c>print(2*3)</c>"},
            {"role": "tool", "content": "6"},
        ]));
        assert_eq!(
            render_chat(&s, &m, Vec::new()).unwrap(),
            "Q:2*3?\nA:<c>print(2*3)</c>\nO:6\nA:"
        );
        let m = messages(
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
        );
        assert_eq!(render_chat(&s, &m, Vec::new()).unwrap(), "Q:a\nA:b\nA:");
        let m = messages(json!([{"role": "wizard", "content": "a"}]));
        let err = render_chat(&s, &m, Vec::new()).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages"));
        assert!(
            err.message.contains("unknown role `wizard`"),
            "{}",
            err.message
        );
        // Issue 70: a structured tool call has no place in the compact layout: refused, naming
        // the message, instead of dropped from the history.
        let m = messages(json!([
            {"role": "user", "content": "2*3?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "python", "arguments": "{\"code\": \"print(6)\"}"}}
            ]},
            {"role": "tool", "content": "6"},
        ]));
        let err = render_chat(&s, &m, Vec::new()).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages"));
        assert!(
            err.message
                .contains("message 1: the compact layout has no `tool_calls`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn sampling_and_field_errors() {
        let s = state(TemplateFormat::ChatMl);
        let parse = |v: Value| {
            validate(
                parse_body::<CommonRequest>(v.to_string().as_bytes())?,
                &s,
                false,
            )
        };
        assert_eq!(
            parse(json!({"temperature": 0})).unwrap().sampling,
            Sampling::Greedy
        );
        assert_eq!(
            parse(json!({"temperature": 0.5, "top_k": 3}))
                .unwrap()
                .sampling,
            Sampling::TopK {
                k: 3,
                temperature: 0.5
            }
        );
        assert_eq!(
            parse(json!({"top_p": 0.9})).unwrap().sampling,
            Sampling::TopP {
                p: 0.9,
                temperature: 1.0
            }
        );
        assert_eq!(parse(json!({"stop": "x"})).unwrap().stop, ["x"]);
        let err = parse(json!({"max_tokens": "ten"})).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        assert!(
            err.message
                .starts_with("`max_tokens`: invalid type: string \"ten\""),
            "{}",
            err.message
        );
        assert_eq!(
            parse(json!({"top_k": 2, "top_p": 0.5}))
                .unwrap_err()
                .param
                .as_deref(),
            Some("top_k")
        );
        assert_eq!(
            parse(json!({"model": "other"})).unwrap_err().status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            parse(json!({"stop": [1]})).unwrap_err().param.as_deref(),
            Some("stop")
        );
        assert_eq!(
            parse(json!({"n": 0})).unwrap_err().param.as_deref(),
            Some("n")
        );
    }

    #[test]
    fn prompts_and_budgets() {
        let s = state(TemplateFormat::ChatMl);
        let parse = |v: Value| parse_prompts(v.get("prompt"), &s);
        assert_eq!(parse(json!({"prompt": [1, 2]})).unwrap(), vec![vec![1, 2]]);
        assert_eq!(
            parse(json!({"prompt": [[1], [3, 4]]})).unwrap(),
            vec![vec![1], vec![3, 4]]
        );
        assert_eq!(
            parse(json!({"prompt": ""})).unwrap_err().param.as_deref(),
            Some("prompt")
        );
        assert!(
            parse(json!({"prompt": []}))
                .unwrap_err()
                .message
                .contains("must not be empty")
        );
        assert!(
            parse(json!({"prompt": [10]}))
                .unwrap_err()
                .message
                .contains("outside the vocabulary of 10")
        );
        assert!(parse(json!({"prompt": [-1]})).is_err());
        assert!(parse(json!({"prompt": 3})).is_err());
        // max_model_len is 100.
        assert_eq!(budget(&s, 90, None, 16).unwrap(), 10);
        assert_eq!(budget(&s, 90, Some(10), 16).unwrap(), 10);
        assert_eq!(
            budget(&s, 90, Some(11), 16).unwrap_err().param.as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            budget(&s, 100, None, 16).unwrap_err().param.as_deref(),
            Some("prompt")
        );
    }
}
