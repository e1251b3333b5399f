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
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
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
//! None. The Burn backend is `rstar-policy`'s feature (`flex`, `wgpu`, `cuda`, `tch`, and
//! `fusion`, `autotune` for the GPU ones): a binary enables it there, once for every crate.

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

/// A running `rstar serve`: [`rstar_http`]'s handle, the one of the project's servers.
/// [`ServerHandle::shutdown`] stops accepting connections, lets in-flight requests finish, and
/// stops the engines; dropping it stops the server too.
pub use rstar_http::ServerHandle;

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
    rstar_http::spawn(listener, app, config.limits)
        .map_err(|e| Error::Serve(format!("reading the bound address: {e}")))
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

mod errors;
use errors::*;
mod request;
use request::*;
mod generation;
use generation::*;
mod handlers;
use handlers::*;
mod weights;
use weights::*;
mod chat;
use chat::*;

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

    /// Every chat request of `tests/data/render_cases.json` renders as Jinja renders it
    /// (`tests/data/chat_oracle.py` over rstar-testdata's `render_chat.py`): the ChatML layout
    /// as Qwen3's own template less its `<think>` handling and with the tool-call name written
    /// by `tojson`, the compact one as `tests/data/compact.jinja`, both with the generation
    /// prompt, after the oracle reads the request as serve documents it (system turn, roles,
    /// content parts, arguments). A compact request with structured `tool_calls` is refused.
    #[test]
    fn chat_prompts_render_as_jinja_renders_the_templates() {
        #[derive(serde::Deserialize)]
        struct Case {
            template: TemplateFormat,
            request: String,
        }
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../tests/data/render_cases.json")).unwrap();
        assert_eq!(cases.len(), 15);
        // The template's own system turn: the paper's system prompt, then its tool's schema.
        let prompt = rstar_episode::template::Template::chatml().render_prompt("");
        let between = |a: &str, b: &str| {
            let from = prompt.find(a).expect("the ChatML prompt's system turn") + a.len();
            prompt[from..from + prompt[from..].find(b).unwrap()].to_string()
        };
        let (system, tool) = (
            between("<|im_start|>system\n", "\n\n# Tools"),
            between("<tools>\n", "\n</tools>"),
        );
        let config = rstar_testdata::fixture("qwen/tokenizer_qwen3/tokenizer_config.json");
        let (python_dir, cases_path) =
            (rstar_testdata::python_dir(), data.join("render_cases.json"));
        let out = rstar_testdata::run_python(
            &data.join("chat_oracle.py"),
            &[
                python_dir.as_os_str(),
                config.as_os_str(),
                cases_path.as_os_str(),
                system.as_ref(),
                tool.as_ref(),
            ],
            "",
        );
        let want: Vec<Option<String>> = serde_json::from_slice(&out).unwrap();
        assert_eq!(want.len(), cases.len());
        let mut refused = 0;
        for (case, want) in cases.iter().zip(want) {
            let s = state(case.template);
            let got = render_request(&s, &case.request);
            match want {
                Some(want) => assert_eq!(got.unwrap(), want, "{}", case.request),
                None => {
                    // Issue 70: the compact layout refuses an assistant's structured
                    // `tool_calls` instead of dropping them.
                    let err = got.unwrap_err();
                    assert!(
                        err.message.contains("has no `tool_calls`"),
                        "{}",
                        err.message
                    );
                    refused += 1;
                }
            }
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
