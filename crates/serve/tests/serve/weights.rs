//! Weight updates on a running server: SGLang's `/update_weights_from_disk` and vLLM's
//! `/collective_rpc reload_weights` swap new weights into every engine, later completions are
//! the new weights' (token for token what the new model writes locally) and report the new
//! version, and bad updates are refused with the field named, leaving the old weights
//! serving. [`RemoteEngine::load_weights`] drives the same routes.

use std::sync::Arc;

use burn::tensor::Device;
use rstar_engine::remote::{EngineKind, RemoteEngine, RemoteEngineConfig};
use rstar_engine::{LocalEngine, LocalEngineConfig, TurnGenerator, TurnSpec};
use rstar_policy::{Qwen, QwenConfig, Sampling, Tokenizer, WeightDtype};
use rstar_serve::{ServeConfig, start};
use serde_json::{Value, json};

use super::common::{MODEL, http, load, model_dir, post, runtime};

/// What wrote a turn: its token ids and their log-probs (random tiny models often write the
/// same greedy tokens; their log-probs tell them apart).
#[derive(Debug)]
struct Written {
    ids: Vec<u32>,
    logprobs: Vec<f32>,
}

impl Written {
    /// The same tokens, with log-probs equal to float rounding.
    fn same(&self, other: &Written) -> bool {
        self.ids == other.ids
            && self
                .logprobs
                .iter()
                .zip(&other.logprobs)
                .all(|(a, b)| (a - b).abs() < 1e-4)
    }
}

/// A greedy 12-token completion of `prompt`: what was written, and the choice's and the
/// metadata's weight version.
fn greedy(addr: &str, prompt: &str) -> (Written, String, String) {
    let (status, body) = post(
        addr,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 1}),
    );
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    let written = Written {
        ids: serde_json::from_value(choice["token_ids"].clone()).unwrap(),
        logprobs: serde_json::from_value(choice["logprobs"]["token_logprobs"].clone()).unwrap(),
    };
    let version = choice["weight_version"].as_str().unwrap();
    let meta = body["metadata"]["weight_version"].as_str().unwrap();
    (written, version.to_string(), meta.to_string())
}

fn version(addr: &str) -> String {
    let (status, text) = http(addr, "GET", "/get_weight_version", "");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["weight_version"].as_str().unwrap().to_string()
}

/// What `model` writes greedily for `prompt` on a local engine.
fn local_greedy(rt: &tokio::runtime::Runtime, model: Qwen, prompt: &str) -> Written {
    let tok = Tokenizer::char();
    let context = tok.encode(prompt).unwrap();
    let mut config = LocalEngineConfig::new(Vec::new());
    config.sampling = Sampling::Greedy;
    let engine = LocalEngine::spawn(model, tok, config);
    let spec = TurnSpec {
        rollout: 0,
        turn: 0,
        context,
        max_new_tokens: 12,
        seed: 0,
    };
    let sample = rt.block_on(engine.generate(spec)).unwrap();
    Written {
        ids: sample.tokens,
        logprobs: sample.logprobs,
    }
}

#[test]
fn updated_weights_serve_the_next_request_with_their_version() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.engines = 2;
    config.model_dir = Some(model_dir());
    let server = rt
        .block_on(start(model.clone(), tokenizer, config))
        .unwrap();
    let addr = server.addr().to_string();
    let prompt = "Q:12*34?\nA:";

    // SGLang's initial version, in the route and in every completion.
    assert_eq!(version(&addr), "default");
    let (before, v, meta) = greedy(&addr, prompt);
    assert_eq!((v.as_str(), meta.as_str()), ("default", "default"));
    assert!(before.same(&local_greedy(&rt, model.clone(), prompt)));

    // New weights (another random model of the same architecture), SGLang's way.
    let new_dir = tempfile::tempdir().unwrap();
    let new_model = Qwen::random(QwenConfig::tiny_char(), 7, &Device::flex()).unwrap();
    rstar_policy::save_dir(
        &new_model,
        &Tokenizer::char(),
        new_dir.path(),
        WeightDtype::F32,
    )
    .unwrap();
    let (status, body) = post(
        &addr,
        "/update_weights_from_disk",
        &json!({"model_path": new_dir.path(), "weight_version": "step-1"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(version(&addr), "step-1");
    let expected = local_greedy(&rt, new_model, prompt);
    assert!(!expected.same(&before), "the two random models write alike");
    // Both engines serve the new weights: several requests, spread over them.
    for _ in 0..4 {
        let (after, v, meta) = greedy(&addr, prompt);
        assert!(after.same(&expected), "{after:?} vs {expected:?}");
        assert_eq!((v.as_str(), meta.as_str()), ("step-1", "step-1"));
    }

    // vLLM's way, without a path: back to the served directory; the version stays unless given.
    let (status, body) = post(
        &addr,
        "/collective_rpc",
        &json!({"method": "reload_weights"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"], json!([null, null]));
    assert_eq!(version(&addr), "step-1");
    assert!(greedy(&addr, prompt).0.same(&before));
    let (status, _) = http(&addr, "POST", "/reset_prefix_cache", "");
    assert_eq!(status, 200);

    // The client side: RemoteEngine::load_weights checks the version afterwards.
    let remote = RemoteEngine::new(
        RemoteEngineConfig::new(server.url(), Vec::new()),
        Arc::new(Tokenizer::char()),
    )
    .unwrap();
    rt.block_on(async {
        assert_eq!(remote.detect_kind().await.unwrap(), EngineKind::Rstar);
        remote
            .load_weights(EngineKind::Rstar, new_dir.path(), "step-2")
            .await
            .unwrap();
        assert_eq!(
            remote.weight_version().await.unwrap().as_deref(),
            Some("step-2")
        );
        remote
            .load_weights(EngineKind::Vllm, &model_dir(), "ignored")
            .await
            .unwrap();
    });
    assert_eq!(version(&addr), "step-2");
    assert!(greedy(&addr, prompt).0.same(&before));
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn bad_updates_are_refused_and_the_old_weights_keep_serving() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    let server = rt.block_on(start(model, tokenizer, config)).unwrap();
    let addr = server.addr().to_string();
    let prompt = "Q:1+1?\nA:";
    let (before, _, _) = greedy(&addr, prompt);

    // Another architecture: one layer more than the served model.
    let other = tempfile::tempdir().unwrap();
    let mut config = QwenConfig::tiny_char();
    config.num_hidden_layers += 1;
    let wrong = Qwen::random(config, 1, &Device::flex()).unwrap();
    rstar_policy::save_dir(&wrong, &Tokenizer::char(), other.path(), WeightDtype::F32).unwrap();
    let missing = other.path().join("nothing-here");
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/update_weights_from_disk",
            json!({"weight_version": "v"}),
            "`model_path`: is required",
        ),
        (
            "/update_weights_from_disk",
            json!({"model_path": other.path(), "weight_version": "v"}),
            "another architecture",
        ),
        (
            "/update_weights_from_disk",
            json!({"model_path": missing, "weight_version": "v"}),
            "cannot load",
        ),
        (
            "/update_weights_from_disk",
            json!({"model_path": model_dir(), "load_format": "dummy"}),
            "`dummy` is not supported",
        ),
    ];
    for (route, body, message) in cases {
        let (status, answer) = post(&addr, route, &body);
        assert_eq!(status, 400, "{route} {body}: {answer}");
        assert_eq!(answer["success"], false, "{answer}");
        let text = answer["message"].as_str().unwrap();
        assert!(text.contains(message), "`{text}` lacks `{message}`");
    }
    // vLLM's route answers OpenAI-style errors.
    let (status, answer) = post(&addr, "/collective_rpc", &json!({"method": "sleep"}));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "method", "{answer}");
    let (status, answer) = post(
        &addr,
        "/collective_rpc",
        &json!({"method": "reload_weights"}),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not started from a model directory"),
        "{answer}"
    );
    // Nothing changed.
    assert_eq!(version(&addr), "default");
    assert!(greedy(&addr, prompt).0.same(&before));
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn weights_pushed_over_http_serve_like_weights_read_from_disk() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    let server = rt
        .block_on(start(model.clone(), tokenizer, config))
        .unwrap();
    let addr = server.addr().to_string();
    let prompt = "Q:12*34?\nA:";
    let (before, _, _) = greedy(&addr, prompt);
    let new_model = Qwen::random(QwenConfig::tiny_char(), 7, &Device::flex()).unwrap();
    let remote = RemoteEngine::new(
        RemoteEngineConfig::new(server.url(), Vec::new()),
        Arc::new(Tokenizer::char()),
    )
    .unwrap();
    let push = |m: &Qwen, dtype, version: &str| {
        let bytes = rstar_policy::safetensors_bytes(&m.hf_tensors().unwrap(), dtype).unwrap();
        rt.block_on(remote.upload_weights(bytes.into(), version))
    };
    push(&new_model, WeightDtype::F32, "step 1/é").unwrap();
    // The version travels in the query string, escaped.
    assert_eq!(version(&addr), "step 1/é");
    let expected = local_greedy(&rt, new_model.clone(), prompt);
    assert!(!expected.same(&before), "the two random models write alike");
    let (after, v, _) = greedy(&addr, prompt);
    assert!(after.same(&expected), "{after:?} vs {expected:?}");
    assert_eq!(v, "step 1/é");

    // Another architecture, bytes that are not safetensors, an empty body: refused, and the
    // pushed weights keep serving.
    let mut other = QwenConfig::tiny_char();
    other.num_hidden_layers += 1;
    let wrong = Qwen::random(other, 1, &Device::flex()).unwrap();
    let err = push(&wrong, WeightDtype::F32, "x").unwrap_err().to_string();
    assert!(err.contains("/upload_weights: HTTP 400"), "{err}");
    let (status, text) = http(
        &addr,
        "POST",
        "/upload_weights?weight_version=y",
        "not safetensors",
    );
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("\"success\":false") && text.contains("safetensors"),
        "{text}"
    );
    let (status, text) = http(&addr, "POST", "/upload_weights", "");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("empty"), "{text}");
    assert_eq!(version(&addr), "step 1/é");
    assert!(greedy(&addr, prompt).0.same(&expected));
    // bf16 bytes load too (rounded weights).
    push(&new_model, WeightDtype::Bf16, "bf16").unwrap();
    assert_eq!(version(&addr), "bf16");
    // A tied model's untied copy (what the trainer gives vLLM engines) is the same
    // architecture, and writes what the tied model writes.
    let untied = tempfile::tempdir().unwrap();
    rstar_policy::save_dir_untied(
        &new_model,
        &Tokenizer::char(),
        untied.path(),
        WeightDtype::F32,
    )
    .unwrap();
    let (status, body) = post(
        &addr,
        "/update_weights_from_disk",
        &json!({"model_path": untied.path(), "weight_version": "untied"}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(greedy(&addr, prompt).0.same(&expected));
    rt.block_on(server.shutdown()).unwrap();
}
