//! LoRA adapters served beside the base model, as vLLM serves them with `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/load_lora_adapter` | vLLM's `{lora_name, lora_path, load_inplace}`: the PEFT adapter directory `lora_path` (one the server reads) served as `lora_name` |
//! | `POST /v1/upload_lora_adapter?lora_name=N[&load_inplace=true]` | the same from the request body: one safetensors file, PEFT's `adapter_model.safetensors` with its `adapter_config.json` in the metadata key `adapter_config` ([`rstar_policy::lora::adapter_bytes`]) |
//! | `POST /v1/unload_lora_adapter` | vLLM's `{lora_name}` |
//!
//! A request whose `model` is a loaded adapter's name is answered by that adapter, and reports
//! the adapter's name as its `model` and as the `weight_version` of every choice: a trainer that
//! names each published adapter for its step (`step-N`) learns from every turn which weights
//! wrote it. `GET /v1/models` lists the adapters after the base, with vLLM's `parent`.
//!
//! Each adapter is merged into the base when it is loaded (`W + s·A·B`, by
//! [`rstar_policy::Qwen::merge_lora`]) and served by engines of its own, so it costs no time per
//! token and answers exactly as the merged model's directory would; it holds a merged copy of
//! the projections per engine while it is loaded. An adapter the base cannot take (another
//! rank's shapes, a missing or unknown tensor, a NaN, a PEFT feature this crate does not compute)
//! is refused with a 400 naming what is wrong, and what was served before stays served. While
//! adapters are loaded the base is not replaced (`/update_weights_from_disk`,
//! `/upload_weights` and `/collective_rpc` answer 400): they were merged over the base they were
//! loaded on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use rstar_engine::wire;

use super::{ApiError, AppState, Slot, body_bytes, parse_body};

/// One loaded adapter: its engines serve the base with the adapter merged in.
pub(crate) struct Adapter {
    /// Where it came from: its directory, or `upload`.
    pub(crate) root: String,
    pub(crate) engines: Vec<Slot>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("root", &self.root)
            .field("engines", &self.engines.len())
            .finish()
    }
}

/// The loaded adapters by name.
pub(crate) type Adapters = std::sync::RwLock<BTreeMap<String, Arc<Adapter>>>;

/// Where an adapter comes from.
enum Source {
    Dir(PathBuf),
    Bytes(Bytes),
}

/// The most bytes of an adapter name.
const MAX_NAME_BYTES: usize = 256;

/// vLLM's answer to a load or an unload: 200 and a line of text.
fn success(text: String) -> Response {
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn not_found(name: &str, state: &AppState) -> ApiError {
    let loaded = loaded_names(state);
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: format!(
            "The lora adapter '{name}' cannot be found (loaded: {})",
            if loaded.is_empty() {
                "none".to_string()
            } else {
                loaded.join(", ")
            }
        ),
        param: Some("lora_name".into()),
    }
}

pub(crate) fn read(
    state: &AppState,
) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Adapter>>> {
    state.adapters.read().unwrap_or_else(|p| p.into_inner())
}

/// The loaded adapters' names, each in backticks, for messages.
fn loaded_names(state: &AppState) -> Vec<String> {
    read(state).keys().map(|n| format!("`{n}`")).collect()
}

fn write(state: &AppState) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Adapter>>> {
    state.adapters.write().unwrap_or_else(|p| p.into_inner())
}

/// The adapter a request's `model` names (`None` for the base model).
///
/// # Errors
/// A 404 naming the served model and the loaded adapters when it is neither.
pub(crate) fn served(state: &AppState, model: &str) -> Result<Option<Arc<Adapter>>, ApiError> {
    if model == state.config.model_name {
        return Ok(None);
    }
    if let Some(adapter) = read(state).get(model) {
        return Ok(Some(Arc::clone(adapter)));
    }
    let adapters = loaded_names(state);
    Err(ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: format!(
            "the model `{model}` does not exist; this server serves `{}`{}",
            state.config.model_name,
            if adapters.is_empty() {
                String::new()
            } else {
                format!(" and the LoRA adapters {}", adapters.join(", "))
            }
        ),
        param: Some("model".into()),
    })
}

/// Refuses a base update while adapters are loaded over the current base.
pub(crate) fn check_no_adapters(state: &AppState) -> Result<(), ApiError> {
    let names = loaded_names(state);
    if names.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        None,
        format!(
            "the base weights cannot be replaced while LoRA adapters are loaded over them ({}); unload them first (/v1/unload_lora_adapter)",
            names.join(", ")
        ),
    ))
}

fn checked_name(state: &AppState, name: Option<String>) -> Result<String, ApiError> {
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::field("lora_name", "is required"))?;
    if name == state.config.model_name {
        return Err(ApiError::field(
            "lora_name",
            format!("`{name}` is the base model's name: give the adapter its own"),
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(ApiError::field(
            "lora_name",
            format!("has {} bytes; at most {MAX_NAME_BYTES}", name.len()),
        ));
    }
    Ok(name)
}

/// Loads an adapter from `source`, merged into the base, and serves it as `name` from the next
/// request on; an adapter of that name is replaced only when `inplace`.
async fn load(
    state: &Arc<AppState>,
    name: String,
    source: Source,
    inplace: bool,
) -> Result<String, ApiError> {
    let _one_at_a_time = state.updating.lock().await;
    {
        let adapters = read(state);
        if adapters.contains_key(&name) && !inplace {
            return Err(ApiError::field(
                "lora_name",
                format!(
                    "The lora adapter '{name}' has already been loaded (unload it first, or set `load_inplace`)"
                ),
            ));
        }
        let max = state.config.max_lora_adapters;
        if !adapters.contains_key(&name) && adapters.len() >= max {
            return Err(ApiError::field(
                "lora_name",
                format!(
                    "{max} adapters are loaded, this server's most (--max-lora-adapters); unload one first"
                ),
            ));
        }
    }
    let base = state.base.read().unwrap_or_else(|p| p.into_inner()).clone();
    let (param, root) = match &source {
        Source::Dir(dir) => ("lora_path", dir.display().to_string()),
        Source::Bytes(_) => ("body", "upload".to_string()),
    };
    let merged = tokio::task::spawn_blocking(move || {
        let with = match source {
            Source::Dir(dir) => rstar_policy::lora::load_adapter(base, &dir),
            Source::Bytes(bytes) => rstar_policy::lora::load_adapter_bytes(
                base,
                &bytes,
                Path::new("the uploaded adapter"),
            ),
        }?;
        with.merge_lora()
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: "server_error",
        message: format!("loading the adapter failed: {e}"),
        param: None,
    })?
    .map_err(|e| ApiError::invalid(Some(param), format!("cannot load adapter `{name}`: {e}")))?;
    let adapter = Arc::new(Adapter {
        root,
        engines: super::spawn_engines(state.engine_setup(), &merged, Some(&name)),
    });
    let replaced = write(state).insert(name.clone(), adapter);
    drop_off_runtime(replaced);
    Ok(name)
}

/// Drops an adapter's engines where joining their threads cannot stall the runtime.
fn drop_off_runtime(adapter: Option<Arc<Adapter>>) {
    if let Some(adapter) = adapter {
        tokio::task::spawn_blocking(move || drop(adapter));
    }
}

/// `POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace}`.
pub(crate) async fn load_lora_adapter(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let outcome = async {
        let request: wire::LoadLoraAdapter = parse_body(&body_bytes(body)?)?;
        let name = checked_name(&state, request.lora_name)?;
        let path = request
            .lora_path
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ApiError::field("lora_path", "is required"))?;
        let inplace = request.load_inplace.unwrap_or(false);
        load(&state, name, Source::Dir(PathBuf::from(path)), inplace).await
    }
    .await;
    match outcome {
        Ok(name) => success(format!(
            "Success: LoRA adapter '{name}' added successfully."
        )),
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/upload_lora_adapter?lora_name=N[&load_inplace=true]`, the adapter file as the body.
pub(crate) async fn upload_lora_adapter(
    State(state): State<Arc<AppState>>,
    query: axum::extract::Query<std::collections::HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let outcome = async {
        let name = checked_name(&state, query.get("lora_name").cloned())?;
        let inplace = match query.get("load_inplace").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::field(
                    "load_inplace",
                    format!("is `{other}`: `true` or `false`"),
                ));
            }
        };
        let bytes = body_bytes(body)?;
        if bytes.is_empty() {
            return Err(ApiError::field(
                "body",
                "is empty: send the adapter's safetensors file",
            ));
        }
        load(&state, name, Source::Bytes(bytes), inplace).await
    }
    .await;
    match outcome {
        Ok(name) => success(format!(
            "Success: LoRA adapter '{name}' added successfully."
        )),
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/unload_lora_adapter {lora_name}`: requests already waiting on the adapter are
/// answered; later ones naming it get a 404.
pub(crate) async fn unload_lora_adapter(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let outcome = async {
        let request: wire::UnloadLoraAdapter = parse_body(&body_bytes(body)?)?;
        let name = request
            .lora_name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::field("lora_name", "is required"))?;
        let _one_at_a_time = state.updating.lock().await;
        let removed = write(&state).remove(&name);
        match removed {
            Some(adapter) => {
                drop_off_runtime(Some(adapter));
                Ok(name)
            }
            None => Err(not_found(&name, &state)),
        }
    }
    .await;
    match outcome {
        Ok(name) => success(format!(
            "Success: LoRA adapter '{name}' removed successfully."
        )),
        Err(e) => e.into_response(),
    }
}
