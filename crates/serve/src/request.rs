//! Request bodies: parsing, the checks shared by both endpoints, prompts and budgets.

use super::*;

/// The request body's bytes.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
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
pub(crate) fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
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
pub(crate) fn plain_types(message: &str) -> String {
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
pub(crate) struct Common {
    /// The name the request gave as `model` (the served model's when it gave none).
    pub(crate) model: String,
    /// The LoRA adapter that `model` names (`None`: the base model).
    pub(crate) adapter: Option<Arc<adapters::Adapter>>,
    pub(crate) sampling: Sampling,
    /// Explicit `max_tokens`.
    pub(crate) max_tokens: Option<usize>,
    pub(crate) stop: Vec<String>,
    pub(crate) seed: Option<u64>,
    pub(crate) n: usize,
    pub(crate) ignore_eos: bool,
    pub(crate) include_stop: bool,
    /// Answer as server-sent events.
    pub(crate) stream: bool,
    /// End the stream with a usage chunk (`stream_options.include_usage`).
    pub(crate) include_usage: bool,
}

/// Checks a request's common fields against what the server supports; `chat` reads
/// `max_completion_tokens`.
pub(crate) fn validate(
    request: CommonRequest,
    state: &AppState,
    chat: bool,
) -> Result<Common, ApiError> {
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
pub(crate) const MAX_TOKEN_BYTES: usize = 256;

/// Refuses a text that cannot fit the context whatever its tokens are (more than
/// `MAX_TOKEN_BYTES` bytes per position), before it is tokenized: a 30 MB prompt is answered
/// at once instead of holding a thread for seconds.
pub(crate) fn fits_context(state: &AppState, text: &str, param: &str) -> Result<(), ApiError> {
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

pub(crate) fn parse_prompts(
    prompt: Option<&Value>,
    state: &AppState,
) -> Result<Vec<Vec<u32>>, ApiError> {
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
pub(crate) fn budget(
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
