//! The weight-update routes (SGLang's, vLLM's, the upload) and the metrics.

use super::*;

/// Loads the HF directory `dir` (the served architecture, else a 400) and swaps it into every
/// engine, reported as `version` (the current one when `None`). Answers after every engine
/// has the new weights.
/// Where new weights come from: an HF directory the server reads, or the bytes of one
/// safetensors file pushed to it.
pub(crate) enum WeightSource {
    Dir(PathBuf),
    Bytes(Bytes),
}

pub(crate) async fn update_weights(
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

pub(crate) fn current_version(state: &AppState) -> String {
    state
        .weight_version
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

pub(crate) async fn update_weights_from_disk(
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
pub(crate) async fn upload_weights(
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
pub(crate) fn update_answer(outcome: Result<String, ApiError>, paused: Option<u64>) -> Response {
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

pub(crate) async fn collective_rpc(
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

pub(crate) async fn reset_prefix_cache() -> StatusCode {
    StatusCode::OK
}

pub(crate) async fn get_weight_version(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    json(wire::WeightVersion {
        weight_version: Some(current_version(&state)),
    })
}

/// The load of every engine together, in vLLM's Prometheus gauge names
/// ([`EngineLoad::to_prometheus`](rstar_engine::EngineLoad::to_prometheus)).
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
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

pub(crate) async fn health() -> StatusCode {
    StatusCode::OK
}
