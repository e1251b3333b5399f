//! The OpenAI-compatible JSON that `rstar serve` answers and [`RemoteEngine`] asks in: one set of
//! request and response types for both sides.
//!
//! Requests ([`CompletionRequest`], [`ChatRequest`], the weight-update bodies) are what a
//! client serialises (`None` fields are left out) and what the server deserialises strictly:
//! a field of the wrong type is an error, unknown fields are ignored, as OpenAI's servers do.
//! Shapes the server checks itself (a completion's `prompt`, `tool_choice`, `kwargs`) stay
//! JSON values so that it can name what is wrong.
//!
//! Responses ([`TextCompletion`], [`ChatCompletion`], [`ChatCompletionChunk`], [`ModelList`],
//! [`ErrorResponse`], …) are what the server serialises and what a client deserialises
//! leniently, since vLLM, SGLang and llama.cpp answer too: a field that is absent, `null` or of
//! another type than the one `rstar serve` writes reads as its default (`None`), so a reader
//! decides what it can do without it. The one exception is a choice's `token_ids`, which a
//! reader trusts over the text: when present, they must be token ids.
//!
//! [`RemoteEngine`]: crate::remote::RemoteEngine
//!
//! ```
//! use rstar_engine::wire::{CommonRequest, CompletionRequest, TextCompletion};
//!
//! let request = CompletionRequest {
//!     common: CommonRequest { max_tokens: Some(8), seed: Some(u64::MAX), ..Default::default() },
//!     prompt: Some(vec![1u32, 2, 3].into()),
//!     ..Default::default()
//! };
//! // Seeds go signed, as OpenAI's and vLLM's APIs take them.
//! assert_eq!(
//!     serde_json::to_string(&request).unwrap(),
//!     r#"{"max_tokens":8,"seed":-1,"prompt":[1,2,3]}"#
//! );
//! let answer: TextCompletion = serde_json::from_str(
//!     r#"{"choices": [{"text": "4", "finish_reason": "stop", "stop_reason": null}]}"#,
//! ).unwrap();
//! assert_eq!(answer.choices[0].text.as_deref(), Some("4"));
//! ```

use std::collections::BTreeMap;

use rstar_episode::chat::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Requests

/// `stop`: a string or a list of strings (written as a list).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Stop(pub Vec<String>);

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Stop(vec![s])),
            v => serde_json::from_value::<Vec<String>>(v)
                .map(Stop)
                .map_err(|_| serde::de::Error::custom("must be a string or a list of strings")),
        }
    }
}

/// OpenAI's `stream_options`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// End the stream with a chunk holding `usage` and no choices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// The fields both completion endpoints read, with OpenAI's (and vLLM's) names. Absent and
/// `null` fields read as `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommonRequest {
    /// The model asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Answer as server-sent events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// OpenAI's stream options (only with `stream`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// OpenAI's presence penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// OpenAI's frequency penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// vLLM's repetition penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// OpenAI's logit bias (token id → bias).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<Map<String, Value>>,
    /// The sampling temperature (0 for greedy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling's `p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// vLLM's top-k (-1 or 0 for none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// The most tokens to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// The chat endpoint's newer name of `max_tokens` (it wins there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<usize>,
    /// Strings that end a choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// OpenAI's and vLLM's seeds are signed 64-bit integers; `rstar serve`'s samplers take the
    /// same 64 bits unsigned. Written signed, read either way.
    #[serde(
        default,
        deserialize_with = "seed_bits",
        serialize_with = "seed_signed",
        skip_serializing_if = "Option::is_none"
    )]
    pub seed: Option<u64>,
    /// Choices per prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// OpenAI's `best_of`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_of: Option<usize>,
    /// vLLM's: generate past EOS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// vLLM's: keep the stop string that ended a choice in its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_stop_str_in_output: Option<bool>,
}

/// A seed given as a signed (OpenAI, vLLM) or unsigned 64-bit integer: its 64 bits.
fn seed_bits<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a 64-bit integer"))),
    }
}

/// A seed's 64 bits written signed, as OpenAI's and vLLM's APIs take them (vLLM refuses
/// anything above `i64::MAX`).
fn seed_signed<S: Serializer>(seed: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match seed {
        Some(bits) => s.serialize_i64(*bits as i64),
        None => s.serialize_none(),
    }
}

/// A `POST /v1/completions` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The fields both endpoints read.
    #[serde(flatten)]
    pub common: CommonRequest,
    /// A string, token ids, or a list of either; the server checks the shape (and names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Value>,
    /// OpenAI's: prepend the prompt to the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    /// OpenAI's: text after the completion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// Per-token log-probabilities, with this many alternatives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
    /// SGLang's: keep the stop string in the text. Sent for SGLang; `rstar serve` does not
    /// read it (its `include_stop_str_in_output` is vLLM's name).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub no_stop_trim: Option<bool>,
    /// vLLM's: leave special tokens out of the text. Sent for vLLM; not read by `rstar serve`.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// vLLM's: put spaces between special tokens. Sent for vLLM; not read by `rstar serve`.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub spaces_between_special_tokens: Option<bool>,
    /// vLLM's: answer with the choices' `token_ids`. Sent for vLLM; `rstar serve` always does.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub return_token_ids: Option<bool>,
}

/// A `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The fields both endpoints read.
    #[serde(flatten)]
    pub common: CommonRequest,
    /// The conversation.
    pub messages: Option<Vec<Message>>,
    /// Tool schemas, listed in the system turn as the chat template writes them (their key
    /// order kept).
    pub tools: Option<Vec<Json>>,
    /// `auto` or `none` (a string); the server refuses other choices.
    pub tool_choice: Option<Value>,
    /// Per-token log-probabilities.
    pub logprobs: Option<bool>,
}

/// One chat message as OpenAI writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant` or `tool` (checked by the server).
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant message's tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<MessageToolCall>>,
}

/// A message's content: a string or a list of parts (the server takes text parts only).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A string.
    Text(String),
    /// Parts, `{"type": "text", "text": …}` and others.
    Parts(Vec<ContentPart>),
}

/// One part of a message's content.
#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    /// `text`, `image_url`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// A text part's text.
    #[serde(default)]
    pub text: Option<String>,
}

/// A tool call of an assistant message in a request.
#[derive(Debug, Clone, Deserialize)]
pub struct MessageToolCall {
    /// The call.
    pub function: MessageFunction,
}

/// The function a [`MessageToolCall`] calls.
#[derive(Debug, Clone, Deserialize)]
pub struct MessageFunction {
    /// The function's name.
    pub name: String,
    /// A JSON string (OpenAI) or an object.
    #[serde(default)]
    pub arguments: Option<Json>,
}

/// SGLang's `POST /update_weights_from_disk` body (the fields `rstar serve` reads).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateWeightsFromDisk {
    /// An HF directory the server can read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// `auto` (HF safetensors) only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_format: Option<String>,
    /// The version the server reports for the new weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

/// vLLM's `POST /v1/load_lora_adapter` body (`rstar serve` reads the same).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadLoraAdapter {
    /// The name requests give as `model` to be served with the adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_name: Option<String>,
    /// A PEFT adapter directory the server can read (`adapter_config.json`,
    /// `adapter_model.safetensors`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_path: Option<String>,
    /// vLLM's: replace an adapter already loaded under the name instead of refusing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_inplace: Option<bool>,
}

/// vLLM's `POST /v1/unload_lora_adapter` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnloadLoraAdapter {
    /// The adapter's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_name: Option<String>,
}

/// vLLM's `POST /collective_rpc` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRpc {
    /// The worker method (`reload_weights`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Its keyword arguments (`weights_path`, and `rstar serve`'s `weight_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kwargs: Option<Map<String, Value>>,
}

// ---------------------------------------------------------------------------------------------
// Responses

/// A field of an answer read as `T`, or `T`'s default when it is absent, `null` or of another
/// type: what one server writes, another may leave out.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).unwrap_or_default())
}

/// A list read as `T`s, `null` as empty.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// `token_ids`, named in the error when they are not token ids.
fn token_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    Option::<Vec<u32>>::deserialize(d)
        .map_err(|e| serde::de::Error::custom(format!("`token_ids`: {e}")))
}

/// A completion answer or stream chunk of either endpoint: `id`, `object`, `created`, `model`,
/// the choices, then `usage` and SGLang's `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "C: Serialize", deserialize = "C: Deserialize<'de>"))]
pub struct Completion<C> {
    /// `cmpl-…`, `chatcmpl-…`.
    #[serde(default, deserialize_with = "lenient")]
    pub id: String,
    /// `text_completion`, `chat.completion` or `chat.completion.chunk`.
    #[serde(default, deserialize_with = "lenient")]
    pub object: String,
    /// Unix seconds.
    #[serde(default, deserialize_with = "lenient")]
    pub created: u64,
    /// The model's name.
    #[serde(default, deserialize_with = "lenient")]
    pub model: String,
    /// The choices (a stream chunk has one, its usage chunk none).
    #[serde(default, deserialize_with = "nullable")]
    pub choices: Vec<C>,
    /// Token counts. Left out of a stream's chunks unless `stream_options.include_usage` is
    /// set; then `null` on every chunk but the last (`Some(None)`), as OpenAI writes it.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Option<Option<Usage>>,
    /// SGLang's: the version of the weights that wrote the choices.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Metadata>,
}

/// A `/v1/completions` answer, and each chunk of its stream.
pub type TextCompletion = Completion<TextChoice>;
/// A `/v1/chat/completions` answer.
pub type ChatCompletion = Completion<ChatChoice>;
/// A chunk of a `/v1/chat/completions` stream.
pub type ChatCompletionChunk = Completion<ChatDeltaChoice>;

/// Token counts of an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompts.
    #[serde(default, deserialize_with = "lenient")]
    pub prompt_tokens: usize,
    /// Tokens generated.
    #[serde(default, deserialize_with = "lenient")]
    pub completion_tokens: usize,
    /// Both.
    #[serde(default, deserialize_with = "lenient")]
    pub total_tokens: usize,
}

/// SGLang's response `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// The version of the weights that wrote the choices (the oldest of theirs).
    #[serde(default, deserialize_with = "lenient")]
    pub weight_version: Option<String>,
}

/// Why a choice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// On a stop string or EOS.
    Stop,
    /// On the token budget.
    Length,
    /// On tool calls (chat with `tools`).
    ToolCalls,
}

/// vLLM's `stop_reason`: the stop string or the EOS token id that ended a choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopReason {
    /// A stop string.
    Text(String),
    /// An EOS token id.
    Token(u32),
}

/// A choice of a `/v1/completions` answer or stream chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    /// The choice's index (prompt-major: prompt `i`, choice `j` of `n` is `i * n + j`).
    #[serde(default, deserialize_with = "lenient")]
    pub index: usize,
    /// The generated text (a stream chunk's piece of it).
    #[serde(default, deserialize_with = "lenient")]
    pub text: Option<String>,
    /// Per-token log-probabilities, when asked (`null` otherwise).
    #[serde(default, deserialize_with = "lenient")]
    pub logprobs: Option<TextLogprobs>,
    /// Why it ended (`null` in a stream's content chunks).
    #[serde(default, deserialize_with = "lenient")]
    pub finish_reason: Option<FinishReason>,
    /// vLLM's `stop_reason` (`null` when it ended on the budget). Left out of a stream's
    /// content chunks.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_reason: Option<Option<StopReason>>,
    /// vLLM's `token_ids`: the generated ids, a stop string's or EOS included.
    #[serde(
        default,
        deserialize_with = "token_ids",
        skip_serializing_if = "Option::is_none"
    )]
    pub token_ids: Option<Vec<u32>>,
    /// The version of the weights that wrote it (`rstar serve`). Left out of a stream's
    /// content chunks.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub weight_version: Option<String>,
}

/// A completion choice's `logprobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextLogprobs {
    /// Each token's text.
    #[serde(default, deserialize_with = "lenient")]
    pub tokens: Vec<String>,
    /// Each token's log-probability.
    #[serde(default, deserialize_with = "lenient")]
    pub token_logprobs: Option<Vec<f32>>,
    /// The most likely alternatives per token (`null` from `rstar serve`).
    #[serde(default, deserialize_with = "lenient")]
    pub top_logprobs: Option<Vec<BTreeMap<String, f32>>>,
    /// Each token's byte offset in the text (`null` from `rstar serve`).
    #[serde(default, deserialize_with = "lenient")]
    pub text_offset: Option<Vec<usize>>,
}

/// A choice of a `/v1/chat/completions` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// The choice's index.
    pub index: usize,
    /// The assistant's message.
    pub message: ResponseMessage,
    /// Why it ended.
    pub finish_reason: Option<FinishReason>,
    /// vLLM's `stop_reason`.
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
    /// Per-token log-probabilities, when asked (`null` otherwise).
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    /// vLLM's `token_ids`.
    #[serde(default)]
    pub token_ids: Vec<u32>,
    /// The version of the weights that wrote it.
    #[serde(default)]
    pub weight_version: Option<String>,
}

/// The assistant message of a [`ChatChoice`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseMessage {
    /// `assistant`.
    pub role: String,
    /// The text (before the first tool call when there are calls; `null` when that is empty).
    pub content: Option<String>,
    /// The tool calls the text holds, when the request has `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A choice of a `/v1/chat/completions` stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatDeltaChoice {
    /// The choice's index.
    pub index: usize,
    /// What this chunk adds.
    pub delta: Delta,
    /// The log-probabilities of this chunk's tokens, when asked (`null` otherwise).
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    /// Why it ended (`null` but in a choice's last chunk).
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// vLLM's `stop_reason`, in a choice's last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<Option<StopReason>>,
    /// The chunk's generated ids, in content chunks and (empty) the last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// The version of the weights that wrote the choice, in its last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

/// A chat stream chunk's `delta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// `assistant`, in a choice's first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A piece of the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls, whole, each with its `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A tool call in OpenAI's layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's place among the choice's calls, in stream deltas only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// `call_…`, unique within the response.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The call.
    pub function: FunctionCall,
}

/// The function a [`ToolCall`] calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments as a JSON string.
    pub arguments: String,
}

/// A chat choice's `logprobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    /// One entry per token.
    pub content: Vec<TokenLogprob>,
}

/// One token's log-probability in a chat choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// The text's UTF-8 bytes.
    pub bytes: Vec<u8>,
    /// The most likely alternatives (empty from `rstar serve`).
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative token of a [`TokenLogprob`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// The text's UTF-8 bytes.
    pub bytes: Vec<u8>,
}

/// The `GET /v1/models` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// `list`.
    #[serde(default, deserialize_with = "lenient")]
    pub object: String,
    /// The served models.
    #[serde(default, deserialize_with = "lenient")]
    pub data: Vec<ModelCard>,
}

/// One model of a [`ModelList`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The name requests give as `model`.
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    /// `model`.
    #[serde(default, deserialize_with = "lenient")]
    pub object: String,
    /// Unix seconds.
    #[serde(default, deserialize_with = "lenient")]
    pub created: u64,
    /// Who serves it: `rstar`, `sglang`, `vllm`.
    #[serde(default, deserialize_with = "lenient")]
    pub owned_by: String,
    /// vLLM's: the model it was loaded from.
    #[serde(default, deserialize_with = "lenient")]
    pub root: Option<String>,
    /// vLLM's, for a LoRA adapter: the base model it is served over.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent: Option<String>,
    /// vLLM's: the context length, in tokens.
    #[serde(default, deserialize_with = "lenient")]
    pub max_model_len: Option<u64>,
}

/// An error answer: OpenAI's `{"error": {…}}` as `rstar serve` writes it; FastAPI's
/// `{"detail"}` and `{"message"}` answers are read too ([`ErrorResponse::message`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// OpenAI's error object.
    #[serde(default, deserialize_with = "lenient")]
    pub error: Option<ErrorObject>,
    /// FastAPI's message (vLLM's routes outside the OpenAI API); never written by `rstar serve`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub detail: Option<String>,
    /// A bare message; never written by `rstar serve`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub message: Option<String>,
}

impl ErrorResponse {
    /// OpenAI's `error.message`, else FastAPI's `detail`, else `message`.
    pub fn message(&self) -> Option<&str> {
        self.error
            .as_ref()
            .map(|e| e.message.as_str())
            .or(self.detail.as_deref())
            .or(self.message.as_deref())
    }
}

/// OpenAI's error object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What went wrong (naming the field).
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, …
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: String,
    /// The request field at fault.
    #[serde(default, deserialize_with = "lenient")]
    pub param: Option<String>,
    /// The HTTP status.
    #[serde(default, deserialize_with = "lenient")]
    pub code: u16,
}

/// SGLang's answer to a weight update: `success` and `message`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateWeightsResponse {
    /// Whether the weights were updated (absent reads as not refused).
    #[serde(default, deserialize_with = "lenient")]
    pub success: Option<bool>,
    /// What happened.
    #[serde(default, deserialize_with = "lenient")]
    pub message: Option<String>,
    /// SGLang's count of requests paused for the update.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_paused_requests: Option<u64>,
}

/// vLLM's answer to `/collective_rpc`: one result per worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRpcResponse {
    /// The workers' results (`null` each from `rstar serve`).
    #[serde(default, deserialize_with = "lenient")]
    pub results: Vec<Value>,
}

/// SGLang's `GET /get_weight_version` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightVersion {
    /// The version of the served weights.
    #[serde(default, deserialize_with = "lenient")]
    pub weight_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_null_and_mistyped_answer_fields_read_as_defaults() {
        // vLLM without `return_token_ids`, `stop_reason` a token id, no `metadata`.
        let a: TextCompletion = serde_json::from_value(json!({
            "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": "x", "logprobs": null, "finish_reason": "length",
                         "stop_reason": 151645}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
        .unwrap();
        let c = &a.choices[0];
        assert_eq!(c.text.as_deref(), Some("x"));
        assert_eq!(c.finish_reason, Some(FinishReason::Length));
        assert_eq!(c.stop_reason, Some(Some(StopReason::Token(151645))));
        assert_eq!((c.token_ids.as_ref(), a.metadata.as_ref()), (None, None));
        // Whatever does not fit is left out, but token ids must be ids.
        let a: TextCompletion = serde_json::from_value(json!({
            "choices": [{"text": 3, "finish_reason": "abort", "logprobs": {"token_logprobs": [null]}}],
            "metadata": "x"}))
        .unwrap();
        let c = &a.choices[0];
        assert_eq!((c.text.as_ref(), c.finish_reason), (None, None));
        assert_eq!(c.logprobs.as_ref().unwrap().token_logprobs, None);
        let err =
            serde_json::from_value::<TextCompletion>(json!({"choices": [{"token_ids": ["a"]}]}))
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("`token_ids`: invalid type"), "{err}");
        assert!(
            serde_json::from_value::<TextCompletion>(json!({"choices": null}))
                .unwrap()
                .choices
                .is_empty()
        );
    }

    #[test]
    fn requests_leave_out_what_is_not_set() {
        assert_eq!(
            serde_json::to_value(CompletionRequest::default()).unwrap(),
            json!({})
        );
        let r: CompletionRequest = serde_json::from_value(json!({
            "seed": -2, "stop": "x", "return_token_ids": "not read", "prompt": [1]}))
        .unwrap();
        assert_eq!(r.common.seed, Some(u64::MAX - 1));
        assert_eq!(r.common.stop, Some(Stop(vec!["x".into()])));
        assert_eq!(r.return_token_ids, None);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"seed": -2, "stop": ["x"], "prompt": [1]})
        );
    }

    #[test]
    fn error_answers_of_openai_fastapi_and_others() {
        let read = |v: Value| serde_json::from_value::<ErrorResponse>(v).unwrap();
        assert_eq!(
            read(json!({"error": {"message": "bad", "type": "x", "code": "str"}})).message(),
            Some("bad")
        );
        assert_eq!(
            read(json!({"detail": "Not Found"})).message(),
            Some("Not Found")
        );
        assert_eq!(
            read(json!({"error": "flat", "message": "m"})).message(),
            Some("m")
        );
        assert_eq!(read(json!({})).message(), None);
    }
}
