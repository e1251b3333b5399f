//! Issue 42: what one client can hold. Non-finite uploaded weights are refused and change
//! nothing; slow clients are cut off; connections over the cap get a clear 503; prompts that
//! cannot fit the context are refused before they are tokenized, while `/health` answers.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_policy::{Tokenizer, WeightDtype};
use rstar_serve::{ServeConfig, start};
use rstar_testdata::read_until_closed;
use serde_json::json;

use super::common::{MODEL, http, load, runtime};

fn version(addr: &str) -> String {
    let (status, text) = http(addr, "GET", "/get_weight_version", "");
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["weight_version"].as_str().unwrap().to_string()
}

fn greedy_text(addr: &str) -> String {
    let (status, text) = http(
        addr,
        "POST",
        "/v1/completions",
        &json!({"model": MODEL, "prompt": "Q:1+2?\nA:", "max_tokens": 8, "temperature": 0})
            .to_string(),
    );
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn issue_42_non_finite_uploads_change_neither_the_weights_nor_the_version() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    let server = rt
        .block_on(start(model.clone(), tokenizer, config))
        .unwrap();
    let addr = server.addr().to_string();
    let before = greedy_text(&addr);
    let remote = RemoteEngine::new(
        RemoteEngineConfig::new(server.url(), Vec::new()),
        Arc::new(Tokenizer::char()),
    )
    .unwrap();
    // The served architecture's own tensors, with their last values overwritten by NaN
    // (0xFFFFFFFF) and by +inf (0x7F800000).
    let good =
        rstar_policy::safetensors_bytes(&model.hf_tensors().unwrap(), WeightDtype::F32).unwrap();
    for pattern in [[0xFFu8, 0xFF, 0xFF, 0xFF], [0x00, 0x00, 0x80, 0x7F]] {
        let mut bad = good.clone();
        let n = bad.len();
        for chunk in bad[n - 4096..].chunks_exact_mut(4) {
            chunk.copy_from_slice(&pattern);
        }
        let err = rt
            .block_on(remote.upload_weights(bad.into(), "poisoned"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HTTP 400") && err.contains("non-finite"),
            "{err}"
        );
        assert_eq!(version(&addr), "default");
        assert_eq!(greedy_text(&addr), before);
    }
    // The sound bytes still load, as the next version.
    rt.block_on(remote.upload_weights(good.into(), "sound"))
        .unwrap();
    assert_eq!(version(&addr), "sound");
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn issue_42_slow_clients_are_cut_off_and_connections_over_the_cap_refused() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.limits.max_connections = 6;
    config.limits.header_timeout = Duration::from_millis(800);
    config.limits.body_timeout = Duration::from_millis(800);
    let server = rt.block_on(start(model, tokenizer, config)).unwrap();
    let addr = server.addr().to_string();

    // Three clients that send a request head and one byte of a 1000-byte body, two that send
    // half a request head, one that sends nothing.
    let mut slow: Vec<TcpStream> = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
        )
        .unwrap();
        slow.push(s);
    }
    for _ in 0..2 {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(s, "GET /health HTTP/1.1\r\nHost:").unwrap();
        slow.push(s);
    }
    slow.push(TcpStream::connect(&addr).unwrap());
    // Every slot is taken: the next connection is refused at once, with a reason.
    std::thread::sleep(Duration::from_millis(100));
    let mut extra = TcpStream::connect(&addr).unwrap();
    let answer = read_until_closed(&mut extra, Duration::from_secs(5)).expect("an answer");
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("max_connections"),
        "{answer}"
    );

    // Each slow client is cut off by its timeout: the slow bodies with a 408, the others
    // closed.
    let started = Instant::now();
    for (i, s) in slow.iter_mut().enumerate() {
        let answer = read_until_closed(s, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("slow client {i} was never cut off"));
        if i < 3 {
            assert!(
                answer.starts_with("HTTP/1.1 408") && answer.contains("body_timeout"),
                "client {i}: {answer}"
            );
        }
    }
    eprintln!(
        "slow clients cut off after {:.2}s",
        started.elapsed().as_secs_f64()
    );
    // The slots are free again.
    let (status, _) = http(&addr, "GET", "/health", "");
    assert_eq!(status, 200);
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn issue_42_prompts_that_cannot_fit_the_context_are_refused_untokenized() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let context = model.config.max_position_embeddings;
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    let server = rt.block_on(start(model, tokenizer, config)).unwrap();
    let addr = server.addr().to_string();
    // Four prompts of 8 MB at once (each under the 32 MiB body limit, each far more bytes
    // than the context's tokens can stand for), and /health throughout.
    let big = "7".repeat(8 << 20);
    let body = json!({"model": MODEL, "prompt": big, "max_tokens": 1}).to_string();
    let chat =
        json!({"model": MODEL, "messages": [{"role": "user", "content": big}], "max_tokens": 1})
            .to_string();
    let answers = std::thread::scope(|scope| {
        let posts: Vec<_> = (0..4)
            .map(|i| {
                let (addr, body, chat) = (&addr, &body, &chat);
                scope.spawn(move || {
                    if i % 2 == 0 {
                        http(addr, "POST", "/v1/completions", body)
                    } else {
                        http(addr, "POST", "/v1/chat/completions", chat)
                    }
                })
            })
            .collect();
        let t = Instant::now();
        let (status, _) = http(&addr, "GET", "/health", "");
        assert_eq!(status, 200);
        eprintln!(
            "/health during four 8 MB prompts: {:.1} ms",
            1e3 * t.elapsed().as_secs_f64()
        );
        posts
            .into_iter()
            .map(|p| p.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (status, text) in answers {
        assert_eq!(status, 400, "{text}");
        assert!(
            text.contains("not tokenized") && text.contains(&format!("{context} tokens")),
            "{text}"
        );
    }
    // A small request is answered as before (200, checked inside).
    greedy_text(&addr);
    let (status, _) = http(&addr, "GET", "/health", "");
    assert_eq!(status, 200);
    rt.block_on(server.shutdown()).unwrap();
}
