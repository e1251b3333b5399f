//! Issue 44: server-sent-event streaming in OpenAI's chunk format, and tool calls returned as
//! `tool_calls`, over raw HTTP and with the real `openai` client.
//!
//! A random model writes no tool call, so the tool-call tests serve a *parrot*: a one-layer model
//! built by hand whose one attention head looks a fixed number of positions back and copies that
//! token. Asked to repeat a user message that holds a tool call, it writes the call (see
//! [`parrot`]).

use std::process::Command;

use burn::tensor::Device;
use rstar_policy::{
    Architecture, CharTokenizer, Qwen, QwenConfig, Tokenizer, WeightDtype, safetensors_bytes,
};
use rstar_serve::{ServeConfig, ServerHandle, start};
use serde_json::{Value, json};

use super::common::{MODEL, http, post, runtime, serve};

/// The user message the parrot repeats: a Hermes tool call.
const CALL: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

/// The events of an SSE body: each `data:` payload, `[DONE]` last (checked).
fn events(body: &str) -> Vec<Value> {
    let data: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
        })
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// One POST over a fresh connection: (status line and headers, body).
fn raw_post(addr: &str, path: &str, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (headers, body) = response.split_once("\r\n\r\n").unwrap();
    (headers.to_string(), body.to_string())
}

/// The concatenation over chunks of `choices[0][key…]`: text, or the items of lists.
fn joined(chunks: &[Value], path: &[&str]) -> Value {
    let mut out: Option<Value> = None;
    for c in chunks {
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        // Chunks without the field (a role or tool-call delta) add nothing.
        let v = path.iter().fold(choice, |v, k| &v[*k]);
        if v.is_null() {
            continue;
        }
        out = Some(match (out, v) {
            (None, v) => v.clone(),
            (Some(Value::String(a)), Value::String(b)) => Value::String(a + b),
            (Some(Value::Array(mut a)), Value::Array(b)) => {
                a.extend(b.iter().cloned());
                Value::Array(a)
            }
            (Some(a), b) => panic!("cannot join {a} and {b}"),
        });
    }
    out.unwrap_or(Value::Null)
}

#[test]
fn issue_44_streamed_chunks_add_up_to_the_whole_answer() {
    let rt = runtime();
    let server = serve(&rt, 1, 1);
    let addr = server.addr().to_string();

    // Chat: the same greedy request whole and streamed with the usage chunk.
    let request = json!({"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}],
                         "max_tokens": 12, "temperature": 0, "logprobs": true});
    let (status, whole) = post(&addr, "/v1/chat/completions", &request);
    assert_eq!(status, 200, "{whole}");
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (headers, body) = raw_post(&addr, "/v1/chat/completions", &streamed.to_string());
    assert!(headers.starts_with("HTTP/1.1 200"), "{headers}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{headers}"
    );
    let chunks = events(&body);
    let choice = &whole["choices"][0];
    let tokens = choice["token_ids"].as_array().unwrap().len();
    // A role chunk, at most one chunk a token, a finish chunk, the usage chunk.
    assert!(chunks.len() >= 4 && chunks.len() <= tokens + 3, "{body}");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"), "{id}");
    for c in &chunks {
        assert_eq!(
            (&c["object"], &c["model"], c["id"].as_str()),
            (&json!("chat.completion.chunk"), &json!(MODEL), Some(id)),
            "{c}"
        );
    }
    let (usage_chunk, choice_chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]), "{usage_chunk}");
    assert_eq!(usage_chunk["usage"], whole["usage"]);
    for c in choice_chunks {
        // OpenAI writes `usage: null` on every other chunk of such a stream.
        assert_eq!(c["usage"], Value::Null, "{c}");
        assert!(c.as_object().unwrap().contains_key("usage"), "{c}");
        assert_eq!(c["choices"].as_array().unwrap().len(), 1, "{c}");
        assert_eq!(c["choices"][0]["index"], 0, "{c}");
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let (last, deltas) = choice_chunks[1..].split_last().unwrap();
    assert_eq!(
        joined(deltas, &["delta", "content"]),
        choice["message"]["content"]
    );
    assert_eq!(joined(deltas, &["token_ids"]), choice["token_ids"]);
    assert_eq!(
        joined(deltas, &["logprobs", "content"]),
        choice["logprobs"]["content"]
    );
    for d in deltas {
        assert_eq!(d["choices"][0]["finish_reason"], Value::Null, "{d}");
    }
    assert_eq!(last["choices"][0]["delta"], json!({}), "{last}");
    assert_eq!(last["choices"][0]["finish_reason"], choice["finish_reason"]);
    assert_eq!(last["choices"][0]["stop_reason"], choice["stop_reason"]);

    // Completions, n = 2 with a seed, without the usage chunk: no `usage` key at all.
    let request = json!({"model": MODEL, "prompt": "Q:2+2?\nA:", "max_tokens": 8, "n": 2,
                         "temperature": 1.0, "seed": 3, "logprobs": 1});
    let (status, whole) = post(&addr, "/v1/completions", &request);
    assert_eq!(status, 200, "{whole}");
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let (status, body) = http(&addr, "POST", "/v1/completions", &streamed.to_string());
    assert_eq!(status, 200, "{body}");
    let chunks = events(&body);
    for c in &chunks {
        assert_eq!(c["object"], "text_completion", "{c}");
        assert!(!c.as_object().unwrap().contains_key("usage"), "{c}");
    }
    for j in 0..2 {
        let of_j: Vec<Value> = chunks
            .iter()
            .filter(|c| c["choices"][0]["index"] == j)
            .cloned()
            .collect();
        let choice = &whole["choices"][j];
        let (last, deltas) = of_j.split_last().unwrap();
        assert_eq!(joined(deltas, &["text"]), choice["text"], "choice {j}");
        assert_eq!(joined(deltas, &["token_ids"]), choice["token_ids"]);
        assert_eq!(
            joined(deltas, &["logprobs", "token_logprobs"]),
            choice["logprobs"]["token_logprobs"]
        );
        assert_eq!(last["choices"][0]["finish_reason"], choice["finish_reason"]);
    }

    // `stream_options` without `stream`, and a forced tool choice, are 400s naming the field.
    for (path, body, field) in [
        (
            "/v1/completions",
            json!({"prompt": "a", "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "tool_choice": "required"}),
            "tool_choice",
        ),
    ] {
        let (status, r) = post(&addr, path, &body);
        assert_eq!((status, &r["error"]["param"]), (400, &json!(field)), "{r}");
    }
    rt.block_on(server.shutdown()).unwrap();
}

/// A model that continues a chat by repeating the last user message (and closing the turn).
///
/// One layer, one head of width 288 over one-hot embeddings of the 274 character-tokenizer ids.
/// The query and key are constant (their biases; the weights are zero), so under RoPE their
/// product depends only on the distance between the positions: with the key's first 32 rotary
/// pairs at 1 and the query's at `A·e^{-iθ_j·D}`, the score at distance `d` is
/// `A·Σ_j cos(θ_j·(d − D))/√288`, peaked at `d = D` (the next-largest, at `d = D ± 1`, is
/// 3.9·A/√288 lower, 46 with `A = 200`, so the head attends to one position). Value and output
/// projections are the identity and the MLP's output is zero, so the residual after the layer is
/// the current token plus √288 times the token `D` back, and the tied head reads the latter. `D`
/// is chosen so that the first generated token is the first token of the user message.
fn parrot(user_message: &str) -> (Qwen, Tokenizer) {
    let tok = Tokenizer::char();
    let vocab = CharTokenizer::new().vocab_size();
    let (width, pairs, amplitude) = (288, 32, 200.0_f64);
    let config = QwenConfig {
        architecture: Architecture::Qwen2,
        vocab_size: vocab,
        hidden_size: width,
        intermediate_size: 8,
        num_hidden_layers: 1,
        num_attention_heads: 1,
        num_key_value_heads: 1,
        head_dim: width,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 2048,
        tie_word_embeddings: true,
        qkv_bias: true,
        qk_norm: false,
        eos_token_ids: vec![CharTokenizer::IM_END],
    };
    // The user message, then `<|im_end|>\n<|im_start|>assistant\n`: the last of these predicts
    // the first generated token, which is the message's first, this many positions back.
    let tail = tok.encode("<|im_end|>\n<|im_start|>assistant\n").unwrap();
    let distance = tok.encode(user_message).unwrap().len() + tail.len() - 1;
    let half = width / 2;
    let identity = |n: usize, m: usize| -> Vec<f32> {
        (0..n * m)
            .map(|i| if i / m == i % m { 1.0 } else { 0.0 })
            .collect()
    };
    let random = Qwen::random(config.clone(), 0, &Device::flex()).unwrap();
    let tensors: Vec<_> = random
        .hf_tensors()
        .unwrap()
        .into_iter()
        .map(|(spec, data)| {
            let n = data.len();
            let data = match spec.name.as_str() {
                "model.embed_tokens.weight" => identity(vocab, width),
                "model.layers.0.self_attn.v_proj.weight"
                | "model.layers.0.self_attn.o_proj.weight" => identity(width, width),
                "model.layers.0.self_attn.q_proj.bias" => {
                    let mut q = vec![0.0; width];
                    for j in 0..pairs {
                        let freq = 10_000f64.powf(-2.0 * j as f64 / width as f64);
                        let angle = freq * distance as f64;
                        q[j] = (amplitude * angle.cos()) as f32;
                        q[j + half] = (-amplitude * angle.sin()) as f32;
                    }
                    q
                }
                "model.layers.0.self_attn.k_proj.bias" => (0..width)
                    .map(|j| if j < pairs { 1.0 } else { 0.0 })
                    .collect(),
                name if name.ends_with("norm.weight") => vec![1.0; n],
                // Zero query and key weights, value bias and MLP: only the head's copy remains.
                _ => vec![0.0; n],
            };
            assert_eq!(data.len(), n, "{}", spec.name);
            (spec, data)
        })
        .collect();
    let bytes = safetensors_bytes(&tensors, WeightDtype::F32).unwrap();
    let model = rstar_policy::load_model_from_bytes(
        config,
        &bytes,
        &Device::flex(),
        std::path::Path::new("parrot"),
    )
    .unwrap();
    (model, tok)
}

/// A server of [`parrot`] repeating `user_message`, as model [`MODEL`].
fn parrot_server(rt: &tokio::runtime::Runtime, user_message: &str) -> ServerHandle {
    let (model, tok) = parrot(user_message);
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    rt.block_on(start(model, tok, config)).unwrap()
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

#[test]
fn issue_44_tool_calls_in_the_text_come_back_as_tool_calls() {
    let rt = runtime();
    let server = parrot_server(&rt, CALL);
    let addr = server.addr().to_string();
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": CALL}],
                              "max_tokens": 100, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, r) = post(&addr, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{r}");
        r
    };
    // Without tools the parrot's call is text: the model does what the tests below rely on.
    let plain = chat(json!({}));
    let choice = &plain["choices"][0];
    assert_eq!(choice["message"]["content"], CALL, "{plain}");
    assert_eq!(choice["finish_reason"], "stop");
    assert!(choice["message"].get("tool_calls").is_none(), "{plain}");
    // With tools: `tool_calls`, no content, `finish_reason: "tool_calls"`.
    let r = chat(json!({"tools": tools()}));
    let choice = &r["choices"][0];
    let message = &choice["message"];
    assert_eq!(
        (
            &message["role"],
            &message["content"],
            &choice["finish_reason"]
        ),
        (&json!("assistant"), &Value::Null, &json!("tool_calls")),
        "{r}"
    );
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{r}");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"), "{r}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(
        calls[0]["function"],
        json!({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})
    );
    // The generated ids are still there, `<|im_end|>` (EOS) last.
    assert_eq!(
        choice["token_ids"].as_array().unwrap().last(),
        Some(&json!(CharTokenizer::IM_END))
    );
    // `tool_choice: "none"` leaves the text alone.
    let r = chat(json!({"tools": tools(), "tool_choice": "none"}));
    assert_eq!(r["choices"][0]["message"]["content"], CALL, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "stop");

    // Streamed: content deltas carry nothing, then one `tool_calls` delta, then the finish.
    let body = json!({"messages": [{"role": "user", "content": CALL}], "tools": tools(),
                      "max_tokens": 100, "temperature": 0, "stream": true});
    let (status, text) = http(&addr, "POST", "/v1/chat/completions", &body.to_string());
    assert_eq!(status, 200, "{text}");
    let chunks = events(&text);
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls", "{text}");
    let with_calls: Vec<&Value> = rest
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("tool_calls").is_some())
        .collect();
    assert_eq!(with_calls.len(), 1, "{text}");
    let call = &with_calls[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (&call["index"], &call["type"], &call["function"]),
        (
            &json!(0),
            &json!("function"),
            &json!({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})
        ),
        "{text}"
    );
    assert_eq!(joined(rest, &["delta", "content"]), json!(""), "{text}");
    assert_eq!(
        joined(rest, &["token_ids"]).as_array().unwrap().len(),
        Tokenizer::char().encode(CALL).unwrap().len() + 1
    );
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn issue_44_openai_client_streams_and_receives_tool_calls() {
    let rt = runtime();
    let server = parrot_server(&rt, CALL);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve/openai_stream.py");
    let out = Command::new(rstar_testdata::python())
        .arg(script)
        .arg(server.url())
        .arg(MODEL)
        .arg(CALL)
        .output()
        .expect("the Python interpreter runs (set RSTAR_PYTHON to target/venv/bin/python)");
    assert!(
        out.status.success(),
        "the openai client failed (is `openai` installed? `cargo xtask venv`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    let weather = json!({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"});

    // The stream, put together as a client does: one call, its finish reason, the usage.
    let s = &out["stream_tools"];
    assert_eq!(s["tool_calls"].as_array().unwrap().len(), 1, "{s}");
    let call = &s["tool_calls"][0];
    assert_eq!(
        (&call["type"], &call["name"], &call["arguments"]),
        (&json!("function"), &weather["name"], &weather["arguments"]),
        "{s}"
    );
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{s}");
    assert_eq!(s["finish"]["0"], "tool_calls", "{s}");
    assert_eq!(s["text"], "", "{s}");
    let calls_len = Tokenizer::char().encode(CALL).unwrap().len() + 1;
    assert_eq!(s["usage"]["completion_tokens"], calls_len, "{s}");
    let chunks = s["chunks"].as_array().unwrap();
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );

    // Whole: `message.tool_calls` in the client's types.
    let choice = &out["tools"]["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    assert_eq!(choice["message"]["tool_calls"][0]["function"], weather);
    assert_eq!(choice["message"]["tool_calls"][0]["type"], "function");
    assert_eq!(out["no_tools"]["choices"][0]["message"]["content"], CALL);

    // The client's stream helper accumulates the same final completion.
    let helper = &out["helper"]["choices"][0];
    assert_eq!(helper["finish_reason"], "tool_calls", "{helper}");
    let helper_call = &helper["message"]["tool_calls"][0];
    assert_eq!(
        (
            &helper_call["function"]["name"],
            &helper_call["function"]["arguments"]
        ),
        (&weather["name"], &weather["arguments"]),
        "{helper}"
    );

    // Without tools the stream adds up to the parrot's text; the completion ends with its usage.
    let plain = &out["stream_plain"];
    assert_eq!(plain["finish"]["0"], "stop", "{plain}");
    assert_eq!(plain["text"], CALL, "{plain}");
    assert!(
        plain["tool_calls"].as_array().unwrap().is_empty(),
        "{plain}"
    );
    let completion = &out["stream_completion"];
    assert_eq!(completion["usage"]["prompt_tokens"], 9, "{completion}");
    assert!(
        completion["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["object"] == "text_completion")
    );
    rt.block_on(server.shutdown()).unwrap();
}
