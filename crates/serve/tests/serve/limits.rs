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

use super::common::{MODEL, http, load, runtime, serve};

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

/// Sends `body` to `path` in 50 equal parts spread over `over`, then reads the answer:
/// (status line and body, seconds the upload took).
fn steady_post(addr: &str, path: &str, body: &[u8], over: Duration) -> (String, f64) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    let started = Instant::now();
    let parts = 50;
    for (i, part) in body.chunks(body.len().div_ceil(parts)).enumerate() {
        s.write_all(part).unwrap();
        let due = over.mul_f64((i + 1) as f64 / parts as f64);
        std::thread::sleep(due.saturating_sub(started.elapsed()));
    }
    let secs = started.elapsed().as_secs_f64();
    let answer = read_until_closed(&mut s, Duration::from_secs(60)).expect("an answer");
    (answer, secs)
}

/// The weights of the served model as an upload body.
fn weights_body() -> Vec<u8> {
    let (model, _) = load();
    rstar_policy::safetensors_bytes(&model.hf_tensors().unwrap(), WeightDtype::F32).unwrap()
}

/// Issue 71: the body timeout is progress-based. A weight upload that keeps arriving is taken
/// however long it takes (here 6 times `body_timeout`, which the old total deadline refused);
/// a body that trickles in a byte at a time, each within `body_timeout`, is cut off by
/// `body_min_rate` with a 408 that names it.
#[test]
fn issue_71_a_steady_upload_outlasts_the_body_timeout_and_a_trickle_does_not() {
    let rt = runtime();
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.limits.body_timeout = Duration::from_millis(500);
    let server = rt.block_on(start(model, tokenizer, config)).unwrap();
    let addr = server.addr().to_string();
    let body = weights_body();
    let (answer, secs) = steady_post(
        &addr,
        "/upload_weights?weight_version=steady",
        &body,
        Duration::from_secs(3),
    );
    eprintln!(
        "{} bytes sent steadily over {secs:.1}s: {}",
        body.len(),
        answer.lines().next().unwrap_or("")
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(version(&addr), "steady");

    // One byte every 0.3 s (never 0.5 s without one): 3 bytes/s, below 1024.
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(10) && s.write_all(b" ").is_ok() {
        sent += 1;
        std::thread::sleep(Duration::from_millis(300));
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut probe = [0u8; 1];
        if matches!(std::io::Read::read(&mut s, &mut probe), Ok(1)) {
            let rest = read_until_closed(&mut s, Duration::from_secs(5)).unwrap_or_default();
            let answer = format!("{}{rest}", probe[0] as char);
            eprintln!(
                "a trickle of {sent} bytes cut off after {:.1}s",
                started.elapsed().as_secs_f64()
            );
            assert!(
                answer.starts_with("HTTP/1.1 408") && answer.contains("body_min_rate"),
                "{answer}"
            );
            assert!(started.elapsed() < Duration::from_secs(3));
            rt.block_on(server.shutdown()).unwrap();
            return;
        }
    }
    panic!("the trickle of {sent} bytes was never cut off");
}

/// Issue 71's check at the default limits: 100 connections that send a head and one byte of
/// body are all closed within 30 s (after `body_timeout`'s 15 s without a byte), and `/health`
/// answers within 100 ms meanwhile.
#[test]
fn issue_71_one_byte_bodies_are_closed_at_the_default_body_timeout_while_health_answers() {
    let rt = runtime();
    // The default limits: one engine, batches of 64, as `ServeConfig::new` sets them.
    let server = serve(&rt, 1, 64);
    let addr = server.addr().to_string();
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
            )
            .unwrap();
            s
        })
        .collect();
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let (status, _) = http(&addr, "GET", "/health", "");
        assert_eq!(status, 200);
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
    for (i, s) in slow.iter_mut().enumerate() {
        let left = Duration::from_secs(30).saturating_sub(started.elapsed());
        let answer = read_until_closed(s, left.max(Duration::from_millis(1)))
            .unwrap_or_else(|| panic!("connection {i} still open after 30 s"));
        assert!(answer.starts_with("HTTP/1.1 408"), "{i}: {answer}");
    }
    let closed = started.elapsed().as_secs_f64();
    eprintln!(
        "100 one-byte bodies closed after {closed:.1}s; /health at worst {:.1} ms meanwhile",
        worst.as_secs_f64() * 1e3
    );
    assert!(closed < 30.0);
    assert!(worst < Duration::from_millis(100), "{worst:?}");
    rt.block_on(server.shutdown()).unwrap();
}

/// Issue 71's check as written: the served weights (3.3 MB for the test model; the issue's 4 MB)
/// sent steadily over 90 s at the default limits are accepted and served. Slow: `cargo test -p
/// rstar-serve --test serve -- --ignored issue_71_an_upload`.
#[test]
#[ignore = "90 s: cargo test -p rstar-serve --test serve -- --ignored issue_71_an_upload"]
fn issue_71_an_upload_sent_steadily_over_90_s_is_accepted_and_served() {
    let rt = runtime();
    let server = serve(&rt, 1, 64);
    let addr = server.addr().to_string();
    let before = greedy_text(&addr);
    let body = weights_body();
    let (answer, secs) = steady_post(
        &addr,
        "/upload_weights?weight_version=slow",
        &body,
        Duration::from_secs(90),
    );
    eprintln!(
        "{} bytes over {secs:.1}s: {}",
        body.len(),
        answer.lines().next().unwrap_or("")
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(version(&addr), "slow");
    assert_eq!(greedy_text(&addr), before);
    rt.block_on(server.shutdown()).unwrap();
}
