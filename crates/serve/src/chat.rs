//! The chat layout: messages rendered with the template's conversation format.

use super::*;

pub(crate) fn content_text(i: usize, m: &Message) -> Result<String, ApiError> {
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
pub(crate) fn default_system_turn(format: TemplateFormat) -> String {
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
pub(crate) fn conversation(
    messages: &[Message],
    tools: Vec<Json>,
) -> Result<Conversation, ApiError> {
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
pub(crate) fn render_chat(
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
