//! The real `openai` Python client against the server: completions (text and token-id
//! prompts, `n`, seeds, log-probs), chat completions, the model list and an error, checked
//! against in-process generation.

use std::process::Command;

use rstar_episode::template::Template;
use rstar_policy::{FinishReason, GenerationConfig, Request, Sampling, generate_requests};
use serde_json::Value;

use super::common::{MODEL, load, runtime, serve};

/// Runs the client script; its JSON output.
fn run_client(url: &str, ids: &[u32]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve/openai_client.py");
    let out = Command::new(rstar_testdata::python())
        .arg(script)
        .arg(url)
        .arg(MODEL)
        .arg(serde_json::to_string(ids).unwrap())
        .output()
        .expect("the Python interpreter runs (set RSTAR_PYTHON to target/venv/bin/python)");
    assert!(
        out.status.success(),
        "the openai client failed (is `openai` installed? `cargo xtask venv`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn openai_client_gets_what_in_process_generation_writes() {
    let rt = runtime();
    let server = serve(&rt, 1, 1);
    let (model, tok) = load();
    let eos = model.config.eos_token_ids.clone();
    let prompt_ids = tok.encode("Q:7*6?\nA:").unwrap();
    let out = run_client(&server.url(), &prompt_ids);
    let one = |prompt: Vec<u32>, max: usize, stops: &[&str], sampling: Sampling, seed: u64| {
        let request = Request {
            prompt,
            stop_strings: Some(stops.iter().map(|s| s.to_string()).collect()),
            max_new_tokens: Some(max),
            seed: Some(seed),
        };
        let config = GenerationConfig {
            max_new_tokens: max,
            eos: eos.clone(),
            sampling,
            ..GenerationConfig::new()
        };
        generate_requests(&model, &tok, &[request], &config)
            .unwrap()
            .remove(0)
    };

    // A text prompt, greedy, with a stop string and log-probs.
    let r = &out["text"];
    assert_eq!(r["object"], "text_completion");
    assert_eq!(r["model"], MODEL);
    assert!(r["id"].as_str().unwrap().starts_with("cmpl-"));
    let choice = &r["choices"][0];
    let expected = one(
        tok.encode("Q:2+2?\nA:").unwrap(),
        12,
        &["</c>"],
        Sampling::Greedy,
        0,
    );
    let text = expected.text.strip_suffix("</c>").unwrap_or(&expected.text);
    assert_eq!(choice["text"], text);
    assert_eq!(ids(&choice["token_ids"]), expected.tokens);
    let reason = match expected.finish_reason {
        FinishReason::Length => "length",
        FinishReason::Stop(_) | FinishReason::Eos => "stop",
    };
    assert_eq!(choice["finish_reason"], reason);
    let lps: Vec<f32> =
        serde_json::from_value(choice["logprobs"]["token_logprobs"].clone()).unwrap();
    assert_eq!(lps, expected.logprobs);
    let tokens = choice["logprobs"]["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), expected.tokens.len());
    // "Q:2+2?\nA:" is 9 bytes, one token each.
    assert_eq!(r["usage"]["prompt_tokens"], 9);
    assert_eq!(r["usage"]["completion_tokens"], expected.tokens.len());
    assert_eq!(r["usage"]["total_tokens"], 9 + expected.tokens.len());

    // Token ids, temperature 1, seed 5, n = 2: choice j samples with seed 5 + j.
    let r = &out["ids"];
    assert_eq!(r["choices"].as_array().unwrap().len(), 2);
    for j in 0..2 {
        let choice = &r["choices"][j];
        assert_eq!(choice["index"], j);
        let expected = one(
            prompt_ids.clone(),
            8,
            &[],
            Sampling::Temperature { temperature: 1.0 },
            5 + j as u64,
        );
        assert_eq!(ids(&choice["token_ids"]), expected.tokens, "choice {j}");
        assert_eq!(choice["text"], expected.text, "choice {j}");
    }
    assert_eq!(r["usage"]["prompt_tokens"], prompt_ids.len());

    // Chat: the template's system turn, the user turn, the assistant's opening.
    let r = &out["chat"];
    assert_eq!(r["object"], "chat.completion");
    let full = Template::chatml().render_prompt("");
    let system = &full[..full.find("<|im_start|>user\n").unwrap()];
    let context = tok
        .encode(&format!(
            "{system}<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
        ))
        .unwrap();
    let expected = one(context.clone(), 10, &["<|im_end|>"], Sampling::Greedy, 0);
    let choice = &r["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let content = expected
        .text
        .strip_suffix("<|im_end|>")
        .unwrap_or(&expected.text);
    assert_eq!(choice["message"]["content"], content);
    assert_eq!(ids(&choice["token_ids"]), expected.tokens);
    assert_eq!(
        choice["logprobs"]["content"].as_array().unwrap().len(),
        expected.tokens.len()
    );
    assert_eq!(r["usage"]["prompt_tokens"], context.len());

    // The model list and an OpenAI error.
    assert_eq!(out["models"][0]["id"], MODEL);
    assert_eq!(out["models"][0]["max_model_len"], 4096);
    assert_eq!(out["bad"]["status"], 400);
    let body = &out["bad"]["body"];
    // The client hands over `error`'s contents.
    let error = if body.get("error").is_some() {
        &body["error"]
    } else {
        body
    };
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], "prompt");
    assert_eq!(error["message"], "`prompt`: prompt 0 is empty");
    rt.block_on(server.shutdown()).unwrap();
}
