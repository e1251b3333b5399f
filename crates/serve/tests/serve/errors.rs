//! Bad requests get a 400 (unknown routes a 404) with OpenAI's error body naming the field.

use serde_json::{Value, json};

use super::common::{MODEL, http, post, runtime, serve};

/// Checks an OpenAI error body: (status, param, a piece of the message).
fn check(status: u16, body: &Value, want_status: u16, param: Option<&str>, message: &str) {
    assert_eq!(status, want_status, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], want_status, "{body}");
    assert_eq!(error["param"], json!(param), "{body}");
    let text = error["message"].as_str().unwrap();
    assert!(text.contains(message), "`{text}` lacks `{message}`");
    let kind = error["type"].as_str().unwrap();
    assert!(kind.ends_with("_error"), "{body}");
}

#[test]
fn bad_requests_get_openai_errors() {
    let rt = runtime();
    let server = serve(&rt, 1, 8);
    let addr = server.addr().to_string();
    let c = "/v1/completions";
    let cases: Vec<(&str, Value, u16, Option<&str>, &str)> = vec![
        // Sizes that overflow a multiplication or an addition are refused, not wrapped.
        (
            c,
            json!({"prompt": ["a", "b"], "n": 9_223_372_036_854_775_808u64}),
            400,
            Some("n"),
            "this server answers at most 256",
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": u64::MAX}),
            400,
            Some("max_tokens"),
            "maximum context length is 4096 tokens",
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": "ten"}),
            400,
            Some("max_tokens"),
            "`max_tokens`: invalid type: string \"ten\"",
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": 5000}),
            400,
            Some("max_tokens"),
            "maximum context length is 4096 tokens; you requested 5001 (1 in the prompt, 5000 in the completion)",
        ),
        (
            c,
            json!({"prompt": vec![10; 4096]}),
            400,
            Some("prompt"),
            "the prompt has 4096, which leaves no room",
        ),
        (
            c,
            json!({"prompt": ""}),
            400,
            Some("prompt"),
            "prompt 0 is empty",
        ),
        (
            c,
            json!({"prompt": []}),
            400,
            Some("prompt"),
            "must not be empty",
        ),
        (
            c,
            json!({"max_tokens": 3}),
            400,
            Some("prompt"),
            "is required",
        ),
        (
            c,
            json!({"prompt": [1, 99999]}),
            400,
            Some("prompt"),
            "token id 99999 of prompt 0 is outside the vocabulary",
        ),
        (
            c,
            json!({"prompt": [1, -2]}),
            400,
            Some("prompt"),
            "must be a string, a list of strings",
        ),
        (
            c,
            json!({"prompt": {"a": 1}}),
            400,
            Some("prompt"),
            "must be a string",
        ),
        (
            c,
            json!({"prompt": "x", "temperature": -1}),
            400,
            Some("temperature"),
            "must be a number ≥ 0",
        ),
        (
            c,
            json!({"prompt": "x", "top_p": 0}),
            400,
            Some("top_p"),
            "(0, 1]",
        ),
        (
            c,
            json!({"prompt": "x", "stop": 3}),
            400,
            Some("stop"),
            "a string or a list of strings",
        ),
        (
            c,
            json!({"prompt": "x", "n": 0}),
            400,
            Some("n"),
            "at least 1",
        ),
        (
            c,
            json!({"prompt": "x", "n": 1000}),
            400,
            Some("n"),
            "1000 choices",
        ),
        (
            c,
            // Issue 44: streaming is served; its options need `stream: true`.
            json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            400,
            Some("stream_options"),
            "only allowed when `stream` is true",
        ),
        (
            c,
            json!({"prompt": "x", "echo": true}),
            400,
            Some("echo"),
            "not supported",
        ),
        (
            c,
            json!({"prompt": "x", "presence_penalty": 0.5}),
            400,
            Some("presence_penalty"),
            "only 0",
        ),
        (
            c,
            json!({"prompt": "x", "model": "gpt-4"}),
            404,
            Some("model"),
            "the model `gpt-4` does not exist",
        ),
        (c, json!(["prompt"]), 400, None, "must be a JSON object"),
        (
            "/v1/chat/completions",
            json!({"model": MODEL}),
            400,
            Some("messages"),
            "is required",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": []}),
            400,
            Some("messages"),
            "must not be empty",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": 5}]}),
            400,
            Some("messages"),
            "`messages`",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "bot", "content": "x"}]}),
            400,
            Some("messages"),
            "message 0: unknown role `bot` (system, developer, user, assistant or tool)",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
            400,
            Some("max_tokens"),
            "at least 1",
        ),
    ];
    for (path, body, status, param, message) in cases {
        let (got, json) = post(&addr, path, &body);
        check(got, &json, status, param, message);
    }
    let (status, text) = http(&addr, "POST", c, "{not json");
    check(
        status,
        &serde_json::from_str(&text).unwrap(),
        400,
        None,
        "not valid JSON",
    );
    let (status, text) = http(&addr, "GET", "/v2/anything", "");
    check(
        status,
        &serde_json::from_str(&text).unwrap(),
        404,
        None,
        "no such route",
    );
    let (status, text) = http(&addr, "GET", c, "");
    check(
        status,
        &serde_json::from_str(&text).unwrap(),
        405,
        None,
        "method not allowed",
    );
    // The server still answers.
    assert_eq!(http(&addr, "GET", "/health", "").0, 200);
    let (status, ok) = post(
        &addr,
        c,
        &json!({"prompt": "x", "max_tokens": 2, "temperature": 0}),
    );
    assert_eq!(status, 200, "{ok}");
    let n = ok["choices"][0]["token_ids"].as_array().unwrap().len();
    assert!((1..=2).contains(&n), "{ok}");
    assert_eq!(ok["usage"]["completion_tokens"], n);
    // "x" is one token.
    assert_eq!(ok["usage"]["total_tokens"], n + 1);
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn a_full_server_answers_429_at_once() {
    let rt = runtime();
    let (model, tokenizer) = super::common::load();
    let mut config = rstar_serve::ServeConfig::new(MODEL);
    config.port = 0;
    config.max_in_flight = 1;
    let server = rt
        .block_on(rstar_serve::start(model, tokenizer, config))
        .unwrap();
    let addr = server.addr().to_string();
    // Two choices never fit in one permit: refused without queueing.
    let (status, body) = post(
        &addr,
        "/v1/completions",
        &json!({"prompt": "x", "n": 2, "max_tokens": 2}),
    );
    check(status, &body, 429, None, "maximum of 1 choices");
    // One choice fits, and the permit comes back afterwards.
    for _ in 0..2 {
        let (status, body) = post(
            &addr,
            "/v1/completions",
            &json!({"prompt": "x", "max_tokens": 2}),
        );
        assert_eq!(status, 200, "{body}");
    }
}

#[test]
fn a_seed_reads_signed_or_unsigned_as_the_same_bits() {
    let rt = runtime();
    let server = serve(&rt, 1, 8);
    let addr = server.addr().to_string();
    let tokens = |seed: Value| {
        let (status, body) = post(
            &addr,
            "/v1/completions",
            &json!({"model": MODEL, "prompt": "Q:1+1?\nA:", "max_tokens": 12, "temperature": 1.0, "seed": seed}),
        );
        assert_eq!(status, 200, "{body}");
        body["choices"][0]["token_ids"].clone()
    };
    // -2 is u64::MAX - 1 in two's complement: OpenAI's signed seeds reach every sampler seed.
    assert_eq!(tokens(json!(-2)), tokens(json!(u64::MAX - 1)));
    assert_eq!(tokens(json!(5)), tokens(json!(5)));
    let (status, body) = post(
        &addr,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": "x", "seed": 1.5}),
    );
    check(status, &body, 400, Some("seed"), "seed");
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn an_api_key_guards_every_route_but_health() {
    use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
    use rstar_serve::{ServeConfig, start};
    use rstar_testdata::http as raw;

    let rt = runtime();
    let (model, tokenizer) = super::common::load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.api_key = Some(String::new());
    let err = rt
        .block_on(start(model.clone(), tokenizer.clone(), config.clone()))
        .unwrap_err();
    assert!(err.to_string().contains("`api_key`"), "{err}");
    config.api_key = Some("s3cret".into());
    let server = rt
        .block_on(start(model, tokenizer.clone(), config))
        .unwrap();
    let addr = server.addr().to_string();
    let completion = json!({"model": MODEL, "prompt": "Q:1+1?", "max_tokens": 2}).to_string();

    // Probes need no key.
    assert_eq!(raw(&addr, "GET", "/health", "", None).0, 200);
    // Every other route does, checked before the body is read.
    for (method, path, body) in [
        ("POST", "/v1/completions", completion.as_str()),
        ("GET", "/v1/models", ""),
        ("GET", "/metrics", ""),
        ("GET", "/get_weight_version", ""),
        (
            "POST",
            "/upload_weights?weight_version=evil",
            "not safetensors",
        ),
        ("POST", "/update_weights_from_disk", "{}"),
    ] {
        for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
            let (status, text) = raw(&addr, method, path, body, token);
            let body: Value = serde_json::from_str(&text).unwrap();
            check(status, &body, 401, None, "API key");
        }
    }
    let (status, text) = raw(
        &addr,
        "POST",
        "/v1/completions",
        &completion,
        Some("s3cret"),
    );
    assert_eq!(status, 200, "{text}");
    // The refused upload changed nothing.
    let (status, text) = raw(&addr, "GET", "/get_weight_version", "", Some("s3cret"));
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("evil"), "{text}");

    // The remote client sends its key.
    let tokenizer = std::sync::Arc::new(tokenizer);
    let url = format!("http://{addr}");
    let mut keyed = RemoteEngineConfig::new(url.clone(), Vec::new());
    keyed.api_key = Some("s3cret".into());
    let keyed = RemoteEngine::new(keyed, tokenizer.clone()).unwrap();
    let load = rt.block_on(keyed.load()).unwrap();
    assert!(load.capacity_tokens.is_some(), "{load:?}");
    let bare = RemoteEngine::new(RemoteEngineConfig::new(url, Vec::new()), tokenizer).unwrap();
    let err = rt.block_on(bare.load()).unwrap_err().to_string();
    assert!(err.contains("401"), "{err}");
}
