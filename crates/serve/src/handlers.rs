//! The completion, chat and model-list handlers, streamed or whole.

use super::*;

pub(crate) async fn completions(
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
pub(crate) struct ResponseHead {
    pub(crate) id: String,
    pub(crate) object: &'static str,
    pub(crate) created: u64,
    /// The served model's name, or the adapter's the request named.
    pub(crate) model: String,
}

impl ResponseHead {
    /// `{"id", "object", "created", "model", "choices"}`.
    pub(crate) fn with<C>(&self, choices: Vec<C>) -> Completion<C> {
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
    pub(crate) fn chunk<C>(&self, choice: C, with_usage: bool) -> Completion<C> {
        Completion {
            usage: with_usage.then_some(None),
            ..self.with(vec![choice])
        }
    }

    /// The last chunk of a stream with `stream_options.include_usage`: no choices, the usage.
    pub(crate) fn usage_chunk<C>(&self, usage: Usage, versions: &[Arc<str>]) -> Completion<C> {
        Completion {
            usage: Some(Some(usage)),
            metadata: Some(metadata(versions)),
            ..self.with(Vec::new())
        }
    }
}

/// A completion choice's `logprobs` for `tokens`.
pub(crate) fn completion_logprobs(
    state: &AppState,
    tokens: &[u32],
    logprobs: &[f32],
) -> TextLogprobs {
    TextLogprobs {
        tokens: token_strings(state, tokens),
        token_logprobs: Some(logprobs.to_vec()),
        top_logprobs: None,
        text_offset: None,
    }
}

/// A chat choice's `logprobs.content` for `tokens`.
pub(crate) fn chat_logprobs(state: &AppState, tokens: &[u32], logprobs: &[f32]) -> ChatLogprobs {
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
pub(crate) fn piece_logprobs(g: &Generation, tokens: &std::ops::Range<usize>) -> Vec<f32> {
    g.logprobs.get(tokens.clone()).unwrap_or_default().to_vec()
}

/// A streamed completion: per choice, one chunk per [`stream::pieces`] piece (with its
/// `token_ids` and, when asked, its log-probs), then one with the `finish_reason`; then the usage
/// chunk when asked.
pub(crate) fn completion_chunks(
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
pub(crate) struct ChatChoice<'a> {
    pub(crate) generation: &'a Generation,
    pub(crate) version: &'a str,
    /// The content without tool parsing (the stop string cut).
    pub(crate) content: String,
    /// The tool calls, when the request has `tools` and the text holds decodable calls.
    pub(crate) tools: Option<tool_calls::ToolTurn>,
}

impl ChatChoice<'_> {
    /// The content the choice reports: the text before the first tool call, or all of it.
    pub(crate) fn content(&self) -> &str {
        self.tools.as_ref().map_or(&self.content, |t| &t.content)
    }

    pub(crate) fn finish_reason(&self) -> (wire::FinishReason, Option<StopReason>) {
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
pub(crate) fn chat_chunks(
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

pub(crate) async fn chat_completions(
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

pub(crate) fn check_choices(state: &AppState, choices: usize) -> Result<(), ApiError> {
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

pub(crate) fn response_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The served model, then each loaded LoRA adapter (with vLLM's `parent`: the base).
pub(crate) async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
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
