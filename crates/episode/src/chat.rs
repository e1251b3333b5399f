//! Conversations for supervised fine-tuning: the OpenAI / HF chat layout (`messages` of
//! `role`/`content`, assistant `tool_calls`, `tool` messages, a `tools` list per row), read
//! from JSON and rendered with a model's chat template, with the byte spans the loss is taken
//! on.
//!
//! [`Conversation::from_json`] checks a row and names the field of every problem
//! (`messages[3].role: unknown role "function"`); [`ChatFormat::render`] writes the text the
//! model's chat template writes (today Qwen3's: ChatML with the Hermes tool-call layout,
//! byte-for-byte as `tokenizer.apply_chat_template` renders it) and returns the byte ranges
//! of the assistant turns: their content, tool calls and closing `<|im_end|>`, not the
//! `<|im_start|>assistant\n` header, the user, system and tool turns.
//! [`ChatFormat::ChatMl`] and [`ChatFormat::Compact`] are the chat layouts of rstar's own
//! prompt templates; `rstar serve` renders chat requests with them
//! ([`ChatFormat::render_prompt`] adds the opening of the assistant's turn).
//!
//! Rows are read with [`Json`], which keeps the key order of objects, so tool schemas and
//! tool-call arguments render in the order the file has them, as Python's `json.dumps` does.
//!
//! ```
//! use rstar_episode::chat::{ChatFormat, Conversation, Json};
//!
//! let row: Json = serde_json::from_str(r#"{"messages": [
//!     {"role": "user", "content": "2+2?"},
//!     {"role": "assistant", "content": "4"}]}"#).unwrap();
//! let conv = Conversation::from_json(&row).unwrap();
//! let r = ChatFormat::Qwen3.render(&conv);
//! assert_eq!(r.text, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n");
//! assert_eq!(&r.text[r.assistant[0].clone()], "<think>\n\n</think>\n\n4<|im_end|>");
//! ```

use std::fmt::Write as _;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::template::TemplateFormat;

/// A JSON value that keeps the order of object keys (serde_json's `Value` sorts them).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number as serde_json read it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, its keys in file order.
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out: Vec<(String, Json)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            // A repeated key keeps its first place and its last value, as Python's json does.
            match out.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 = v,
                None => out.push((k, v)),
            }
        }
        Ok(Json::Object(out))
    }
}

impl Json {
    /// Parses JSON text.
    ///
    /// # Errors
    /// serde_json's error (with line and column) for text that is not one JSON value.
    pub fn parse(text: &str) -> Result<Json, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The value of `key` in an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The JSON type's name, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// The text Python's `json.dumps(value, ensure_ascii=False)` writes (what the `tojson`
    /// filter of HF chat templates writes): `", "` and `": "` separators, keys in order,
    /// non-ASCII kept, floats as Python's `repr` writes them (`1e-05`, `1.0`).
    pub fn to_python_json(&self) -> String {
        let mut out = String::new();
        self.write_python(&mut out);
        out
    }

    fn write_python(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => match n.as_f64() {
                Some(f) if n.is_f64() => out.push_str(&python_float(f)),
                _ => {
                    let _ = write!(out, "{n}");
                }
            },
            Json::String(s) => {
                out.push_str(&serde_json::to_string(s).expect("a string serialises"));
            }
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write_python(out);
                }
                out.push(']');
            }
            Json::Object(kv) => {
                out.push('{');
                for (i, (k, v)) in kv.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&serde_json::to_string(k).expect("a string serialises"));
                    out.push_str(": ");
                    v.write_python(out);
                }
                out.push('}');
            }
        }
    }
}

impl From<Json> for serde_json::Value {
    fn from(j: Json) -> Self {
        match j {
            Json::Null => serde_json::Value::Null,
            Json::Bool(b) => serde_json::Value::Bool(b),
            Json::Number(n) => serde_json::Value::Number(n),
            Json::String(s) => serde_json::Value::String(s),
            Json::Array(items) => items.into_iter().map(serde_json::Value::from).collect(),
            Json::Object(kv) => serde_json::Value::Object(
                kv.into_iter()
                    .map(|(k, v)| (k, serde_json::Value::from(v)))
                    .collect(),
            ),
        }
    }
}

/// Python's `repr` of a finite float: the shortest round-trip digits, in fixed notation for
/// decimal exponents from -4 to 15 (with `.0` when integral), else `d.ddde±XX`.
fn python_float(f: f64) -> String {
    let sci = format!("{f:e}"); // shortest round-trip digits: "-1.5e-5", "1e16"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is an integer");
    let (sign, mantissa) = mantissa
        .strip_prefix('-')
        .map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if (point as usize) >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let frac = if digits.len() > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{}{frac}e{esign}{:02}", &digits[..1], exp.abs())
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatRole {
    /// Instructions before the conversation (or, later, between turns).
    System,
    /// The user.
    User,
    /// The model: the turns the loss is taken on.
    Assistant,
    /// A tool's result, answering the assistant's last tool calls.
    Tool,
}

impl ChatRole {
    /// The role's name in the chat layout.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
        }
    }
}

/// One assistant tool call: the function's name and its arguments as the template writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatToolCall {
    /// The function name.
    pub name: String,
    /// The arguments as JSON text: a string argument as the file has it (checked to be a JSON
    /// object), an object written as [`Json::to_python_json`] writes it.
    pub arguments: String,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: ChatRole,
    /// Its text (`null` content reads as empty, as OpenAI's API means it; a list of
    /// `{"type": "text", "text": …}` parts is joined).
    pub content: String,
    /// A separate reasoning text (`reasoning_content`), when the row has one.
    pub reasoning_content: Option<String>,
    /// The assistant's tool calls, in order.
    pub tool_calls: Vec<ChatToolCall>,
    /// Whether an assistant message is in the loss (`"weight": 0`, OpenAI's fine-tuning
    /// layout, leaves it out; rendered all the same).
    pub trained: bool,
}

/// One training conversation: its messages and the tools its system turn lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The messages, in order.
    pub messages: Vec<ChatMessage>,
    /// The tool schemas (`tools`), each written with `tojson`.
    pub tools: Vec<Json>,
}

impl Conversation {
    /// Reads a row: an object with `messages` (an array, or a JSON string of one) and
    /// optionally `tools` (the same). Accepted message layouts: OpenAI's (`tool_calls` of
    /// `{"type": "function", "function": {"name", "arguments"}}`, `arguments` a JSON string)
    /// and HF's (`{"name", "arguments"}`, `arguments` an object).
    ///
    /// # Errors
    /// A message naming the field: a missing or mistyped field, an unknown role, a tool call
    /// whose arguments are not a JSON object, OpenAI's legacy `function_call`, a `weight`
    /// other than 0 or 1 (OpenAI's fine-tuning layout: 0 keeps an assistant message out of the
    /// loss), a conversation with no assistant message in the loss.
    pub fn from_json(row: &Json) -> Result<Conversation, String> {
        if !matches!(row, Json::Object(_)) {
            return Err(format!("expected an object, found {}", row.kind()));
        }
        let messages =
            list_field(row, "messages")?.ok_or_else(|| "`messages` is missing".to_string())?;
        let tools = list_field(row, "tools")?.unwrap_or_default();
        if let Some((i, t)) = tools
            .iter()
            .enumerate()
            .find(|(_, t)| !matches!(t, Json::Object(_)))
        {
            return Err(format!(
                "tools[{i}]: expected an object, found {}",
                t.kind()
            ));
        }
        let messages = messages
            .iter()
            .enumerate()
            .map(|(i, m)| message(m).map_err(|e| format!("messages[{i}]{e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if !messages.iter().any(|m| m.role == ChatRole::Assistant) {
            return Err("`messages` has no assistant message: nothing to train on".into());
        }
        if !messages
            .iter()
            .any(|m| m.role == ChatRole::Assistant && m.trained)
        {
            return Err("every assistant message has `\"weight\": 0`: nothing to train on".into());
        }
        Ok(Conversation { messages, tools })
    }
}

/// A list field, given as an array or as a JSON string holding one (as many HF datasets store
/// `tools`); `None` when absent or null.
fn list_field(row: &Json, key: &str) -> Result<Option<Vec<Json>>, String> {
    match row.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(items)) => Ok(Some(items.clone())),
        Some(Json::String(text)) => match Json::parse(text) {
            Ok(Json::Array(items)) => Ok(Some(items)),
            Ok(other) => Err(format!(
                "`{key}`: the string holds {}, expected an array",
                other.kind()
            )),
            Err(e) => Err(format!("`{key}`: the string is not valid JSON ({e})")),
        },
        Some(other) => Err(format!(
            "`{key}`: expected an array, found {}",
            other.kind()
        )),
    }
}

fn text_field(m: &Json, key: &str) -> Result<Option<String>, String> {
    match m.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Array(parts)) if key == "content" => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Json::as_str), p.get("text")) {
                    (Some("text") | None, Some(Json::String(t))) => out.push_str(t),
                    _ => {
                        return Err(format!(
                            ".content[{i}]: expected a text part {{\"type\": \"text\", \"text\": …}}"
                        ));
                    }
                }
            }
            Ok(Some(out))
        }
        Some(other) => Err(format!(".{key}: expected a string, found {}", other.kind())),
    }
}

fn message(m: &Json) -> Result<ChatMessage, String> {
    if !matches!(m, Json::Object(_)) {
        return Err(format!(": expected an object, found {}", m.kind()));
    }
    let role = match m.get("role") {
        Some(Json::String(r)) => match r.as_str() {
            "system" => ChatRole::System,
            "user" => ChatRole::User,
            "assistant" => ChatRole::Assistant,
            "tool" => ChatRole::Tool,
            other => {
                return Err(format!(
                    ".role: unknown role {other:?} (expected system, user, assistant or tool)"
                ));
            }
        },
        Some(other) => return Err(format!(".role: expected a string, found {}", other.kind())),
        None => return Err(".role is missing".into()),
    };
    let content = text_field(m, "content")?.unwrap_or_default();
    let reasoning_content = text_field(m, "reasoning_content")?;
    let tool_calls = match m.get("tool_calls") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Array(calls)) => {
            if role != ChatRole::Assistant && !calls.is_empty() {
                return Err(format!(
                    ".tool_calls: only assistant messages call tools (this one is {})",
                    role.as_str()
                ));
            }
            calls
                .iter()
                .enumerate()
                .map(|(j, c)| tool_call(c).map_err(|e| format!(".tool_calls[{j}]{e}")))
                .collect::<Result<_, _>>()?
        }
        Some(other) => {
            return Err(format!(
                ".tool_calls: expected an array, found {}",
                other.kind()
            ));
        }
    };
    if !matches!(m.get("function_call"), None | Some(Json::Null)) {
        return Err(
            ".function_call: OpenAI's legacy layout; write it as `tool_calls` (and its result as a `tool` message)"
                .into(),
        );
    }
    // OpenAI's fine-tuning layout: `"weight": 0` keeps an assistant message out of the loss.
    let trained = match m.get("weight") {
        None | Some(Json::Null) => true,
        Some(Json::Number(n)) if n.as_f64() == Some(0.0) => false,
        Some(Json::Number(n)) if n.as_f64() == Some(1.0) => true,
        Some(other) => {
            return Err(format!(
                ".weight: expected 0 or 1, found {}",
                match other {
                    Json::Number(n) => n.to_string(),
                    _ => other.kind().to_string(),
                }
            ));
        }
    };
    if !trained && role != ChatRole::Assistant {
        return Err(format!(
            ".weight: only assistant messages are trained on (this one is {})",
            role.as_str()
        ));
    }
    Ok(ChatMessage {
        role,
        content,
        reasoning_content,
        tool_calls,
        trained,
    })
}

fn tool_call(c: &Json) -> Result<ChatToolCall, String> {
    // OpenAI nests the call in `function`; HF's layout is flat.
    let (f, at) = match c.get("function") {
        Some(f @ Json::Object(_)) => (f, ".function"),
        Some(other) => {
            return Err(format!(
                ".function: expected an object, found {}",
                other.kind()
            ));
        }
        None => (c, ""),
    };
    let name = match f.get("name") {
        Some(Json::String(n)) if !n.is_empty() => n.clone(),
        Some(Json::String(_)) => return Err(format!("{at}.name is empty")),
        Some(other) => {
            return Err(format!(
                "{at}.name: expected a string, found {}",
                other.kind()
            ));
        }
        None => return Err(format!("{at}.name is missing")),
    };
    let arguments = match f.get("arguments") {
        Some(Json::String(text)) => match Json::parse(text) {
            Ok(Json::Object(_)) => text.clone(),
            Ok(other) => {
                return Err(format!(
                    "{at}.arguments: the string holds {}, expected a JSON object",
                    other.kind()
                ));
            }
            Err(e) => return Err(format!("{at}.arguments: not valid JSON ({e})")),
        },
        Some(obj @ Json::Object(_)) => obj.to_python_json(),
        Some(other) => {
            return Err(format!(
                "{at}.arguments: expected a JSON object or a string of one, found {}",
                other.kind()
            ));
        }
        None => return Err(format!("{at}.arguments is missing")),
    };
    Ok(ChatToolCall { name, arguments })
}

/// A rendered conversation: the text, and the byte ranges of it the loss is taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedChat {
    /// The whole text, as the chat template writes it.
    pub text: String,
    /// Byte ranges of `text` written by the assistant, in order (those of messages with
    /// `"weight": 0` left out).
    pub assistant: Vec<Range<usize>>,
}

/// A chat layout: a model family's chat template, or one of rstar's own prompt templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatFormat {
    /// Qwen3's template (ChatML, the tool schemas in the system turn, Hermes `<tool_call>`
    /// blocks, tool results as `<tool_response>` blocks in a user turn, an empty
    /// `<think>` block on assistant turns after the last user query that have no reasoning
    /// of their own when they end the conversation).
    Qwen3,
    /// The chat layout of [`TemplateFormat::ChatMl`](crate::template::TemplateFormat::ChatMl),
    /// what `rstar serve` renders: Qwen3's layout with assistant turns as written (no `<think>`
    /// block, `</think>` not split off) and tool-call names written as JSON strings, which is
    /// Qwen2.5's layout less its default system turn.
    ChatMl,
    /// The chat layout of [`TemplateFormat::Compact`](crate::template::TemplateFormat::Compact):
    /// a first system message as a first line, `Q:{user}\nA:`, the assistant's text,
    /// `\nO:{tool}\nA:`, later system messages as lines of their own. Assistant `tool_calls`
    /// are not written (the compact template's calls are `<c>…</c>` in the text).
    Compact,
}

impl ChatFormat {
    /// The format whose template a model ships (`chat_template` of `tokenizer_config.json`),
    /// when it is one this crate renders.
    pub fn detect(chat_template: &str) -> Option<ChatFormat> {
        let qwen3 = [
            "<tool_call>",
            "<tool_response>",
            "last_query_index",
            "<think>",
        ];
        qwen3
            .iter()
            .all(|m| chat_template.contains(m))
            .then_some(ChatFormat::Qwen3)
    }

    /// The chat layout of a prompt template.
    pub fn of_template(format: TemplateFormat) -> ChatFormat {
        match format {
            TemplateFormat::ChatMl => ChatFormat::ChatMl,
            TemplateFormat::Compact => ChatFormat::Compact,
        }
    }

    /// The format's name (`qwen3`, `chatml`, `compact`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChatFormat::Qwen3 => "qwen3",
            ChatFormat::ChatMl => "chatml",
            ChatFormat::Compact => "compact",
        }
    }

    /// The model chat template of a name (`qwen3`), as `--chat-format` names one; rstar's own
    /// layouts are chosen by their [`TemplateFormat`] ([`ChatFormat::of_template`]).
    pub fn from_name(name: &str) -> Option<ChatFormat> {
        (name == "qwen3").then_some(ChatFormat::Qwen3)
    }

    /// Renders a whole conversation (no generation prompt), as
    /// `tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)` does.
    pub fn render(self, conv: &Conversation) -> RenderedChat {
        match self {
            ChatFormat::Qwen3 => render_chatml(conv, true),
            ChatFormat::ChatMl => render_chatml(conv, false),
            ChatFormat::Compact => render_compact(conv).0,
        }
    }

    /// Renders a conversation and then the opening of the assistant's next turn, as
    /// `apply_chat_template(…, add_generation_prompt=True)` does: `<|im_start|>assistant\n` in
    /// the ChatML layouts, `\nA:` in the compact one unless the text already ends there (after
    /// a user or tool message).
    pub fn render_prompt(self, conv: &Conversation) -> String {
        match self {
            ChatFormat::Qwen3 | ChatFormat::ChatMl => {
                let mut text = self.render(conv).text;
                text.push_str("<|im_start|>assistant\n");
                text
            }
            ChatFormat::Compact => {
                let (rendered, open) = render_compact(conv);
                let mut text = rendered.text;
                if !open {
                    text.push_str("\nA:");
                }
                text
            }
        }
    }
}

const TOOLS_INTRO: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const TOOLS_OUTRO: &str = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/// Qwen3's layout (`qwen3`), or the same without its `<think>` handling and with tool-call
/// names written as JSON strings ([`ChatFormat::ChatMl`]).
fn render_chatml(conv: &Conversation, qwen3: bool) -> RenderedChat {
    let msgs = &conv.messages;
    let mut text = String::new();
    let mut assistant = Vec::new();
    let first_is_system = msgs.first().is_some_and(|m| m.role == ChatRole::System);
    if !conv.tools.is_empty() {
        text.push_str("<|im_start|>system\n");
        if first_is_system {
            text.push_str(&msgs[0].content);
            text.push_str("\n\n");
        }
        text.push_str(TOOLS_INTRO);
        for t in &conv.tools {
            text.push('\n');
            text.push_str(&t.to_python_json());
        }
        text.push_str(TOOLS_OUTRO);
    } else if first_is_system {
        text.push_str("<|im_start|>system\n");
        text.push_str(&msgs[0].content);
        text.push_str("<|im_end|>\n");
    }
    // The last user message that is a real query (not tool responses wrapped as a user turn).
    let last_query = msgs
        .iter()
        .rposition(|m| {
            m.role == ChatRole::User
                && !(m.content.starts_with("<tool_response>")
                    && m.content.ends_with("</tool_response>"))
        })
        .unwrap_or(msgs.len().saturating_sub(1));
    for (i, m) in msgs.iter().enumerate() {
        let last = i + 1 == msgs.len();
        match m.role {
            ChatRole::User | ChatRole::System => {
                if m.role == ChatRole::System && i == 0 {
                    continue;
                }
                let _ = write!(
                    text,
                    "<|im_start|>{}\n{}<|im_end|>\n",
                    m.role.as_str(),
                    m.content
                );
            }
            ChatRole::Assistant => {
                let (reasoning, content) = match &m.reasoning_content {
                    _ if !qwen3 => (String::new(), m.content.clone()),
                    Some(r) => (r.clone(), m.content.clone()),
                    // `content.split('</think>')`: the reasoning is before the first
                    // `</think>`, the content after the last.
                    None => match m.content.rsplit_once("</think>") {
                        Some((_, after)) => {
                            let before = m.content.split("</think>").next().unwrap_or("");
                            let reasoning = before
                                .trim_end_matches('\n')
                                .rsplit("<think>")
                                .next()
                                .unwrap_or("")
                                .trim_start_matches('\n')
                                .to_string();
                            (reasoning, after.trim_start_matches('\n').to_string())
                        }
                        None => (String::new(), m.content.clone()),
                    },
                };
                text.push_str("<|im_start|>assistant\n");
                let start = text.len();
                if qwen3 && i > last_query && (last || !reasoning.is_empty()) {
                    let _ = write!(
                        text,
                        "<think>\n{}\n</think>\n\n{}",
                        reasoning.trim_matches('\n'),
                        content.trim_start_matches('\n')
                    );
                } else {
                    text.push_str(&content);
                }
                for (j, call) in m.tool_calls.iter().enumerate() {
                    if j > 0 || !content.is_empty() {
                        text.push('\n');
                    }
                    // Qwen's templates write the name as it is; the ChatML layout as a JSON string.
                    let name = if qwen3 {
                        format!("\"{}\"", call.name)
                    } else {
                        serde_json::to_string(&call.name).expect("a string serialises")
                    };
                    let _ = write!(
                        text,
                        "<tool_call>\n{{\"name\": {name}, \"arguments\": {}}}\n</tool_call>",
                        call.arguments
                    );
                }
                text.push_str("<|im_end|>");
                if m.trained {
                    assistant.push(start..text.len());
                }
                text.push('\n');
            }
            ChatRole::Tool => {
                if i == 0 || msgs[i - 1].role != ChatRole::Tool {
                    text.push_str("<|im_start|>user");
                }
                let _ = write!(text, "\n<tool_response>\n{}\n</tool_response>", m.content);
                if last || msgs[i + 1].role != ChatRole::Tool {
                    text.push_str("<|im_end|>\n");
                }
            }
        }
    }
    RenderedChat { text, assistant }
}

/// The compact layout ([`ChatFormat::Compact`]), and whether the text ends where the assistant
/// writes (`A:` after a user or tool message).
fn render_compact(conv: &Conversation) -> (RenderedChat, bool) {
    let msgs = &conv.messages;
    let mut text = String::new();
    let mut assistant = Vec::new();
    let rest = match msgs.split_first() {
        Some((first, rest)) if first.role == ChatRole::System => {
            text.push_str(&first.content);
            text.push('\n');
            rest
        }
        _ => &msgs[..],
    };
    let mut open = false;
    for m in rest {
        match m.role {
            ChatRole::User => {
                if open {
                    text.push('\n');
                }
                let _ = write!(text, "Q:{}\nA:", m.content);
                open = true;
            }
            ChatRole::Assistant => {
                if !open {
                    text.push_str("A:");
                }
                let start = text.len();
                text.push_str(&m.content);
                if m.trained {
                    assistant.push(start..text.len());
                }
                open = false;
            }
            ChatRole::Tool => {
                let _ = write!(text, "\nO:{}\nA:", m.content);
                open = true;
            }
            ChatRole::System => {
                text.push_str(&m.content);
                text.push('\n');
            }
        }
    }
    (RenderedChat { text, assistant }, open)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(row: &str) -> Result<Conversation, String> {
        Conversation::from_json(&Json::parse(row).expect("test rows are JSON"))
    }

    #[test]
    fn python_floats_are_written_as_repr_writes_them() {
        // Each pair: what Python 3's repr(float) prints.
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789012345.0, "123456789012345.0"),
            (-2.5e-7, "-2.5e-07"),
            (1.25e22, "1.25e+22"),
            (0.1, "0.1"),
        ] {
            assert_eq!(python_float(f), want, "{f}");
        }
    }

    #[test]
    fn objects_keep_their_key_order_and_python_separators() {
        let j = Json::parse(r#"{"z": 1, "a": [true, null, "é\n"], "m": {"b": 2.0, "a": 1e-5}}"#)
            .unwrap();
        assert_eq!(
            j.to_python_json(),
            r#"{"z": 1, "a": [true, null, "é\n"], "m": {"b": 2.0, "a": 1e-05}}"#
        );
    }

    #[test]
    fn bad_rows_name_the_field() {
        let cases = [
            (r#"[]"#, "expected an object, found an array"),
            (r#"{"tools": []}"#, "`messages` is missing"),
            (
                r#"{"messages": [{"role": "function", "content": "x"}]}"#,
                "messages[0].role: unknown role \"function\"",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}]}"#,
                "no assistant message",
            ),
            (
                r#"{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1"}}]}]}"#,
                "messages[0].tool_calls[0].function.arguments: not valid JSON",
            ),
            (
                r#"{"messages": [{"role": "assistant", "tool_calls": [{"name": "f", "arguments": 3}]}]}"#,
                "messages[0].tool_calls[0].arguments: expected a JSON object or a string of one, found a number",
            ),
            (
                r#"{"messages": [{"role": "assistant", "content": 5}]}"#,
                "messages[0].content: expected a string, found a number",
            ),
            (
                r#"{"messages": "[{\"role\": \"assistant\"", "tools": []}"#,
                "`messages`: the string is not valid JSON",
            ),
            (
                r#"{"messages": [{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}}]}"#,
                "messages[0].function_call: OpenAI's legacy layout",
            ),
            (
                r#"{"messages": [{"role": "assistant", "content": "x", "weight": 0}]}"#,
                "every assistant message has `\"weight\": 0`",
            ),
            (
                r#"{"messages": [{"role": "assistant", "content": "x", "weight": 0.5}]}"#,
                "messages[0].weight: expected 0 or 1, found 0.5",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x", "weight": 0}, {"role": "assistant", "content": "y"}]}"#,
                "messages[0].weight: only assistant messages are trained on",
            ),
        ];
        for (row, want) in cases {
            let err = conv(row).expect_err(row);
            assert!(err.contains(want), "{row}: {err}");
        }
    }

    #[test]
    fn tool_results_group_into_one_user_turn_and_only_assistant_text_is_trained() {
        let c = conv(
            r#"{"messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                {"name": "g", "arguments": {"y": "z"}}]},
            {"role": "tool", "content": "1"},
            {"role": "tool", "content": "2"},
            {"role": "assistant", "content": "done"}]}"#,
        )
        .unwrap();
        let r = ChatFormat::Qwen3.render(&c);
        let want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"y\": \"z\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n";
        assert_eq!(r.text, want);
        let spans: Vec<&str> = r.assistant.iter().map(|s| &r.text[s.clone()]).collect();
        assert_eq!(
            spans,
            [
                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"y\": \"z\"}}\n</tool_call><|im_end|>",
                "<think>\n\n</think>\n\ndone<|im_end|>"
            ]
        );
    }

    #[test]
    fn weight_zero_keeps_an_assistant_turn_out_of_the_loss_but_in_the_text() {
        let row = |w: &str| {
            conv(&format!(
                r#"{{"messages": [{{"role": "user", "content": "a"}}, {{"role": "assistant", "content": "b"{w}}}, {{"role": "user", "content": "c"}}, {{"role": "assistant", "content": "d"}}]}}"#
            ))
            .unwrap()
        };
        let (all, first_out) = (
            ChatFormat::Qwen3.render(&row("")),
            ChatFormat::Qwen3.render(&row(r#", "weight": 0"#)),
        );
        assert_eq!(all.text, first_out.text);
        assert_eq!(all.assistant.len(), 2);
        assert_eq!(first_out.assistant, all.assistant[1..]);
        assert_eq!(
            &first_out.text[first_out.assistant[0].clone()],
            "<think>\n\n</think>\n\nd<|im_end|>"
        );
        assert_eq!(ChatFormat::Qwen3.render(&row(r#", "weight": 1"#)), all);
    }

    #[test]
    fn rstar_layouts_render_prompts_and_train_on_the_assistant_text() {
        let c = conv(
            r#"{"messages": [
            {"role": "user", "content": "2*3?"},
            {"role": "assistant", "content": "<c>print(2*3)</c>"},
            {"role": "tool", "content": "6"},
            {"role": "assistant", "content": "<think>x</think>6"}]}"#,
        )
        .unwrap();
        let r = ChatFormat::Compact.render(&c);
        assert_eq!(
            r.text,
            "Q:2*3?\nA:<c>print(2*3)</c>\nO:6\nA:<think>x</think>6"
        );
        let spans: Vec<&str> = r.assistant.iter().map(|s| &r.text[s.clone()]).collect();
        assert_eq!(spans, ["<c>print(2*3)</c>", "<think>x</think>6"]);
        assert_eq!(
            ChatFormat::Compact.render_prompt(&c),
            format!("{}\nA:", r.text)
        );
        // ChatML keeps the assistant's text as written; Qwen3 splits off its reasoning.
        let chatml = ChatFormat::ChatMl.render_prompt(&c);
        assert!(
            chatml.ends_with(
                "<|im_start|>assistant\n<think>x</think>6<|im_end|>\n<|im_start|>assistant\n"
            ),
            "{chatml}"
        );
        let qwen3 = ChatFormat::Qwen3.render_prompt(&c);
        assert!(
            qwen3.ends_with("<|im_start|>assistant\n<think>\nx\n</think>\n\n6<|im_end|>\n<|im_start|>assistant\n"),
            "{qwen3}"
        );
        assert_eq!(ChatFormat::from_name("chatml"), None);
        assert_eq!(
            ChatFormat::of_template(TemplateFormat::Compact).as_str(),
            "compact"
        );
    }

    #[test]
    fn detects_qwen3_by_its_markers() {
        assert_eq!(
            ChatFormat::detect("{{ last_query_index }} <think> <tool_call> <tool_response>"),
            Some(ChatFormat::Qwen3)
        );
        assert_eq!(ChatFormat::detect("{{ bos_token }}[INST]"), None);
    }
}
