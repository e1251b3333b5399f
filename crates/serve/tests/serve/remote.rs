//! `RemoteEngine` over `rstar serve` writes the turns a `LocalEngine` writes in-process, and
//! concurrent turns are all answered.

use std::sync::Arc;

use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_engine::{LocalEngine, LocalEngineConfig, TurnGenerator, TurnSpec};
use rstar_policy::Sampling;

use super::common::{MODEL, load, runtime, serve};

const STOPS: [&str; 2] = ["</c>", "</answer>"];

fn specs(tok: &rstar_policy::Tokenizer) -> Vec<TurnSpec> {
    let mut long = tok.encode("Q:1+1?\nA:").unwrap();
    // 4090 tokens: the server's 4096-token context leaves 6 of the 20 asked for.
    long.resize(4090, long[0]);
    [
        (tok.encode("Q:What is 12*12?\nA:").unwrap(), 24, 3),
        (
            tok.encode("Q:2+2?\nA:I add.<c>print(2+2)</c>\nO:4\nA:")
                .unwrap(),
            16,
            4,
        ),
        (long, 20, 5),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (context, max_new_tokens, seed))| TurnSpec {
        rollout: i as u64,
        turn: 0,
        context,
        max_new_tokens,
        seed,
    })
    .collect()
}

#[test]
fn remote_engine_equals_local_engine() {
    let rt = runtime();
    let server = serve(&rt, 1, 1);
    let (model, tok) = load();
    let stops: Vec<String> = STOPS.iter().map(|s| s.to_string()).collect();
    for sampling in [Sampling::Greedy, Sampling::Temperature { temperature: 0.7 }] {
        let mut local_config = LocalEngineConfig::new(stops.clone());
        local_config.eos = model.config.eos_token_ids.clone();
        local_config.sampling = sampling;
        let local = LocalEngine::spawn(model.clone(), tok.clone(), local_config);
        let mut remote_config = RemoteEngineConfig::new(server.url(), stops.clone());
        remote_config.sampling = sampling;
        let remote = RemoteEngine::new(remote_config, Arc::new(tok.clone())).unwrap();
        assert_eq!(remote.name(), server.url());
        for spec in specs(&tok) {
            let want = rt.block_on(local.generate(spec.clone())).unwrap();
            let got = rt.block_on(remote.generate(spec.clone())).unwrap();
            assert_eq!(
                got.tokens, want.tokens,
                "{sampling:?}, rollout {}",
                spec.rollout
            );
            assert!(got.tokens.len() <= spec.max_new_tokens.min(4096 - spec.context.len()));
            assert_eq!(got.logprobs.len(), want.logprobs.len());
            for (a, b) in got.logprobs.iter().zip(&want.logprobs) {
                assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
            assert!(
                got.entropies.is_empty(),
                "the API does not report entropies"
            );
        }
    }
    // A context that fills the model's window gets an empty turn, as from a local engine.
    let remote = RemoteEngine::new(
        RemoteEngineConfig::new(format!("{}/v1", server.url()), stops),
        Arc::new(tok.clone()),
    )
    .unwrap();
    let full = TurnSpec {
        rollout: 9,
        turn: 1,
        context: vec![10; 4096],
        max_new_tokens: 8,
        seed: 0,
    };
    assert!(
        rt.block_on(remote.generate(full))
            .unwrap()
            .tokens
            .is_empty()
    );
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn sixteen_concurrent_turns_are_all_answered() {
    let rt = runtime();
    let server = serve(&rt, 2, 64);
    let (_, tok) = load();
    let mut config = RemoteEngineConfig::new(server.url(), vec!["</c>".into()]);
    config.model = Some(MODEL.into());
    let remote = Arc::new(RemoteEngine::new(config, Arc::new(tok.clone())).unwrap());
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let remote = Arc::clone(&remote);
            let context = tok.encode(&format!("Q:{i}+{i}?\nA:")).unwrap();
            rt.spawn(async move {
                let spec = TurnSpec {
                    rollout: i,
                    turn: 0,
                    context,
                    max_new_tokens: 6,
                    seed: i,
                };
                remote.generate(spec).await.map_err(|e| e.to_string())
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let sample = rt
            .block_on(task)
            .unwrap()
            .unwrap_or_else(|e| panic!("turn {i}: {e}"));
        assert!(
            !sample.tokens.is_empty() && sample.tokens.len() <= 6,
            "turn {i}"
        );
        assert_eq!(sample.logprobs.len(), sample.tokens.len(), "turn {i}");
    }
    rt.block_on(server.shutdown()).unwrap();
}

#[test]
fn remote_engine_reports_connection_failures_and_server_errors() {
    let rt = runtime();
    let (_, tok) = load();
    // Nothing listens on the port of a listener that was just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = RemoteEngineConfig::new(format!("http://127.0.0.1:{port}"), Vec::new());
    config.max_retries = 2;
    config.backoff = std::time::Duration::from_millis(1);
    let remote = RemoteEngine::new(config, Arc::new(tok.clone())).unwrap();
    let spec = TurnSpec {
        rollout: 0,
        turn: 0,
        context: vec![10, 11],
        max_new_tokens: 4,
        seed: 0,
    };
    let err = rt
        .block_on(remote.generate(spec.clone()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("connection failed") && err.contains("(after 3 attempts)"),
        "{err}"
    );

    // A 4xx answer is not retried and its message comes through.
    let server = serve(&rt, 1, 1);
    let mut config = RemoteEngineConfig::new(server.url(), Vec::new());
    config.model = Some("other".into());
    let remote = RemoteEngine::new(config, Arc::new(tok)).unwrap();
    let err = rt.block_on(remote.generate(spec)).unwrap_err().to_string();
    assert!(
        err.contains("HTTP 404 Not Found: the model `other` does not exist"),
        "{err}"
    );
    assert!(!err.contains("attempts"), "{err}");
    rt.block_on(server.shutdown()).unwrap();
}
